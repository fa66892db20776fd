//! The exchange simulator from the command line: `mdbus-exchange`, also
//! reachable as `mdbus-relay simulate`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mdbus_feed::moldudp64::Session;
use mdbus_feed::synth::SynthConfig;
use mdbus_tool_support::duration::parse as parse_duration;
use mdbus_tool_support::output::{completed, EXIT_FAILED, EXIT_USAGE};

use super::{Exchange, ExchangeConfig, ExchangeCounters, ExchangeError};

/// Options of `mdbus-exchange` (and `mdbus-relay simulate`).
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Line A: multicast group and port.
    #[arg(long, default_value = "239.192.10.1:26400")]
    pub group_a: SocketAddrV4,
    /// Line B: multicast group and port.
    #[arg(long, default_value = "239.192.10.2:26400")]
    pub group_b: SocketAddrV4,
    /// Address of the interface to send from (127.0.0.1: loopback, this
    /// host only).
    #[arg(long, default_value = "127.0.0.1")]
    pub interface: Ipv4Addr,
    /// Multicast time-to-live.
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// Probability (0 to 1) that a packet is not sent on line A.
    #[arg(long, default_value_t = 0.0)]
    pub drop_a: f64,
    /// Probability (0 to 1) that a packet is not sent on line B.
    #[arg(long, default_value_t = 0.0)]
    pub drop_b: f64,
    /// Messages per second (0: as fast as the sockets take them).
    #[arg(long, default_value_t = 100_000)]
    pub rate: u64,
    /// Messages of continuous trading in the session (the opening and
    /// closing phases add a few per symbol).
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    /// Securities in the session.
    #[arg(long, default_value_t = 100)]
    pub symbols: u16,
    /// Seed of the session and of the drops.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Session name (up to 10 characters); with --repeat, the next day's
    /// name has its trailing number incremented.
    #[arg(long, default_value = "MDBUS00001", value_parser = parse_session)]
    pub session: Session,
    /// Address the re-request server listens on (unicast UDP).
    #[arg(long, default_value = "127.0.0.1:26410")]
    pub rerequest: SocketAddrV4,
    /// Largest MoldUDP64 packet, bytes.
    #[arg(long, default_value_t = 1400)]
    pub max_packet: usize,
    /// Heartbeat after this long without a packet (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub heartbeat: Duration,
    /// Stop after this long (e.g. 10s, 2m), even mid-session.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// After the end of session, start another day under the next session
    /// name, until stopped (--duration, SIGINT or SIGTERM).
    #[arg(long)]
    pub repeat: bool,
    /// After the session ends, keep answering re-requests this long.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub linger: Duration,
    /// Exit 0 even when datagrams could not be sent (send errors; the
    /// drops asked for with --drop-a/--drop-b are never loss).
    #[arg(long)]
    pub allow_loss: bool,
}

impl SimulateArgs {
    /// The simulator configuration these options describe.
    pub fn config(&self) -> ExchangeConfig {
        ExchangeConfig {
            session: self.session,
            line_a: self.group_a,
            line_b: self.group_b,
            interface: self.interface,
            ttl: self.ttl,
            drop_a: self.drop_a,
            drop_b: self.drop_b,
            seed: self.seed,
            synth: SynthConfig {
                seed: self.seed,
                symbols: self.symbols,
                order_messages: self.messages,
                ..SynthConfig::default()
            },
            messages_per_second: self.rate,
            max_packet: self.max_packet,
            rerequest_bind: self.rerequest,
            heartbeat_interval: self.heartbeat,
            repeat: self.repeat,
        }
    }
}

fn parse_session(s: &str) -> Result<Session, String> {
    Session::new(s).map_err(|e| format!("not a MoldUDP64 session name: {e}"))
}

/// `mdbus-relay simulate`: [`run`] under that name.
pub fn run_simulate(args: &SimulateArgs) -> ExitCode {
    run(args, "mdbus-relay simulate")
}

/// Runs the simulator until the session is over (and `--linger` has
/// passed), `--duration` has passed, or SIGINT/SIGTERM; prints a one-line
/// summary. Exit status 0; 2 when the arguments cannot be used (an address
/// that is not multicast, an interface that is not local, a port in use);
/// 1 when a thread cannot start; 3 when datagrams could not be sent
/// (unless `--allow-loss`). `program` prefixes
/// its messages on stderr.
pub fn run(args: &SimulateArgs, program: &str) -> ExitCode {
    if let Err(e) = mdbus_tool_support::signals::install() {
        eprintln!("{program}: cannot install the SIGINT/SIGTERM handler: {e}");
        return ExitCode::from(EXIT_FAILED);
    }
    let exchange = match Exchange::start(args.config()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{program}: {e}");
            // What the command line asked for cannot be done: a usage
            // error; a thread the system refused is a runtime failure.
            let code = match e {
                ExchangeError::Thread { .. } => EXIT_FAILED,
                _ => EXIT_USAGE,
            };
            return ExitCode::from(code);
        }
    };
    eprintln!(
        "{program}: session {} ({} messages) on {} (A) and {} (B) via {}, re-requests at {}",
        exchange.session(),
        exchange.session_messages(),
        args.group_a,
        args.group_b,
        args.interface,
        exchange.rerequest_addr()
    );
    let started = Instant::now();
    let deadline = args.duration.map(|d| started + d);
    let mut finished_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if mdbus_tool_support::signals::requested() || deadline.is_some_and(|d| now >= d) {
            break;
        }
        if exchange.counters().finished {
            let f = *finished_at.get_or_insert(now);
            if now >= f + args.linger {
                break;
            }
            // Only the clock and the signal flag are left to watch.
            std::thread::sleep(Duration::from_millis(20));
        } else {
            exchange.wait_finished(Duration::from_millis(50));
        }
    }
    let session = exchange.session();
    let c = exchange.stop();
    println!("{}", summary(session, &c, started.elapsed()));
    // Drops asked for are the simulation; a datagram the socket refused
    // is loss nobody asked for.
    let lost = (c.send_errors > 0).then(|| {
        format!(
            "{} datagrams could not be sent (socket errors)",
            c.send_errors
        )
    });
    ExitCode::from(completed(lost.as_deref(), args.allow_loss))
}

/// The one-line summary.
pub(crate) fn summary(session: Session, c: &ExchangeCounters, elapsed: Duration) -> String {
    format!(
        "simulate: session {session}{}, {} messages in {} packets in {:.1} s; line A sent {} \
         dropped {}, line B sent {} dropped {}, both dropped {}; {} heartbeats; re-requests \
         served {} (malformed {}, ignored {}), messages resent {}",
        if c.finished { " finished" } else { "" },
        c.messages,
        c.packets,
        elapsed.as_secs_f64(),
        c.packets_a,
        c.dropped_a,
        c.packets_b,
        c.dropped_b,
        c.dropped_both,
        c.heartbeats,
        c.requests_served,
        c.requests_malformed,
        c.requests_ignored,
        c.messages_resent,
    )
}
