//! `mdbus-perf throughput`: one sending process, one receiving process, one
//! channel: a stream on `shm` and `udp`, a session on `tcp` and `verbs`
//! (an RC queue pair whose sends ask for a completion every
//! `--signal-every`th only).
//!
//! The sender writes `--count` messages of `--size` bytes (a counter in the
//! first 8) as fast as it can, or at `--rate`, then closes the channel. The
//! receiver busy-polls, counts what arrives, and times from its first
//! message to its last.
//!
//! A stream never waits for its subscribers. On shared memory, messages the
//! subscriber was too slow for are overwritten, and the stream reports them
//! to it as overruns; on UDP, datagrams the network or the subscriber's
//! socket dropped are asked for again, and those the publisher no longer
//! retains (or that stay missing for too long) are reported as gaps. Either
//! way their count is `lost`. A subscriber started on its own (`--role
//! sub`) after the publisher also misses what was published before it
//! attached: `before_join`. So `sent = received + lost + before_join`.
//!
//! On UDP the publisher answers retransmit requests while it publishes and
//! after its last message, until the subscriber has accounted for every
//! message (it tells the publisher so on its stdin), or for `--linger`
//! seconds when run on its own. A session loses nothing: the sender waits
//! while the receiver has no room.

use std::time::{Duration, Instant};

use mdbus::config::{LateJoin, SessionConfig, StreamConfig};
use mdbus::{Bus, TransportKind};
use serde::Serialize;

use mdbus_tool_support::output::print_json;
use mdbus_tool_support::percentiles::{nanos, per_sec, Span};

use crate::common::{cores_line, interrupted, watchdog, Common, Failure};
pub use crate::flow::Role;
use crate::flow::{counter, drain_stream, due_ns, pace, serve, start_publishing, Drained};
use crate::peer::{self, wait_for_go, Peer};
use crate::side;

/// Messages between two calls of a UDP publisher's `service` while it
/// publishes flat out (a system call each; a retransmit request waits at
/// most this long).
const SERVICE_EVERY: u64 = 256;

/// Options of `mdbus-perf throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The options every command shares.
    #[command(flatten)]
    pub common: Common,

    /// Exit 0 even when messages were lost (overruns, unrecoverable
    /// gaps); the report still counts them. Without it a run that lost
    /// anything exits 3.
    #[arg(long)]
    pub allow_loss: bool,

    /// Payload bytes per message, at least 8 (the message counter).
    #[arg(long, default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(8..=mdbus::config::MAX_MESSAGE_LIMIT as u64))]
    pub size: u64,

    /// Messages to send. Default: 10000000 on shm, 1000000 on udp and tcp.
    /// On udp, give both sides the same count when starting them by hand:
    /// the subscriber stops once it has accounted for this many.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Send at most this many messages per second; 0 sends as fast as
    /// possible. A stream subscriber slower than its publisher loses
    /// messages once it is more than --capacity behind (on udp: once the
    /// socket's receive buffer overflows and the missing messages cannot
    /// be fetched again in time).
    #[arg(long, default_value_t = 0, value_name = "MSGS_PER_SEC")]
    pub rate: u64,

    /// Messages the stream retains (a power of two): how far a shm
    /// subscriber may fall behind before it loses messages, and the udp
    /// publisher's window for retransmission. A shm run with --count at
    /// most this large cannot lose any. On tcp and verbs: messages in
    /// flight before the sender waits (on verbs, the receive buffers
    /// posted and the send queue's depth, which the device bounds).
    /// Default: 65536; 4096 on verbs.
    #[arg(long)]
    pub capacity: Option<usize>,

    /// udp: messages per flush. 1 sends each message in a datagram of its
    /// own as it is published; N packs messages into datagrams (autoflush
    /// off) and flushes after every N, as a feed handler flushes once per
    /// inbound packet.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,

    /// udp with --role pub: seconds to go on answering retransmit requests
    /// after the last message before closing the stream. (Started by the
    /// subscriber, the publisher answers until the subscriber is done.)
    #[arg(long, default_value_t = 1, value_name = "SECS")]
    pub linger: u64,

    /// Run one side only: `pub` sends; `sub` receives and prints the
    /// result. Start `sub` first: it waits up to --timeout for the
    /// sender, and on shm reads from the oldest message the stream still
    /// holds. Without --role this process receives and starts the sender
    /// itself once it is ready.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

impl Args {
    /// The side this process plays when --role names one.
    pub fn role_name(&self) -> Option<&'static str> {
        self.role.map(Role::name)
    }

    fn capacity(&self) -> usize {
        self.capacity.unwrap_or(match self.common.transport {
            TransportKind::Verbs => 4096,
            _ => 65536,
        })
    }

    fn count(&self) -> u64 {
        self.count.unwrap_or(match self.common.transport {
            TransportKind::Shm => 10_000_000,
            _ => 1_000_000,
        })
    }

    /// `tcp` and `verbs` carry a session, everything else a stream.
    fn channel(&self) -> Channel {
        if matches!(
            self.common.transport,
            TransportKind::Tcp | TransportKind::Verbs
        ) {
            Channel::Session
        } else {
            Channel::Stream
        }
    }

    /// Whether the stream runs on a datagram transport (loss recovery,
    /// `service` duties).
    fn datagram(&self) -> bool {
        self.common.transport == TransportKind::Udp
    }
}

/// What the run carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Channel {
    Stream,
    Session,
}

/// What the receiver prints.
#[derive(Debug, Serialize)]
struct Report {
    transport: &'static str,
    channel: Channel,
    size: u64,
    sent: u64,
    received: u64,
    lost: u64,
    /// Messages that were missing and arrived by retransmission (udp).
    recovered: u64,
    before_join: u64,
    msgs_per_sec: f64,
    mb_per_sec: f64,
}

/// What a sender run alone prints.
#[derive(Debug, Serialize)]
struct PublisherReport {
    transport: &'static str,
    channel: Channel,
    size: u64,
    sent: u64,
    msgs_per_sec: f64,
    mb_per_sec: f64,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<u8, Failure> {
    crate::transport::ready(&args.common)?;
    let mut args = args.clone();
    let (has_role, second) = (args.role.is_some(), args.role == Some(Role::Pub));
    let (name, core, peer_core) = side::setup(&mut args.common, has_role, second)?;
    let args = &args;
    let bus = bus(args, &name)?;
    match args.role {
        Some(Role::Pub) => {
            let (sent, ns) = match args.channel() {
                Channel::Stream => publish(args, &bus, &name)?,
                Channel::Session => send(args, &bus, &name)?,
            };
            if !args.common.spawned {
                let rate = per_sec(sent, ns);
                let report = PublisherReport {
                    transport: args.common.transport.name(),
                    channel: args.channel(),
                    size: args.size,
                    sent,
                    msgs_per_sec: rate.round(),
                    mb_per_sec: mb(rate, args.size),
                };
                if args.common.json {
                    print_json(&report);
                } else {
                    println!(
                        "mdbus-perf throughput (pub): {sent} messages of {} bytes on `{name}`, {:.0} msgs/s, {:.1} MB/s",
                        args.size, report.msgs_per_sec, report.mb_per_sec
                    );
                }
            }
            Ok(0)
        }
        Some(Role::Sub) => {
            let report = receive(args, &bus, &name, None)?;
            print(args, &bus, &report, &name, core, None);
            Ok(report.exit_code(args.allow_loss))
        }
        None => {
            let own = [
                "--size".to_string(),
                args.size.to_string(),
                "--count".into(),
                args.count().to_string(),
                "--rate".into(),
                args.rate.to_string(),
                "--capacity".into(),
                args.capacity().to_string(),
                "--batch".into(),
                args.batch.to_string(),
            ];
            let publisher = peer::spawn(
                None,
                "throughput",
                "pub",
                &own,
                &args.common,
                &name,
                peer_core,
            )?;
            let report = peer::measure(publisher, |p| receive(args, &bus, &name, Some(p)))?;
            print(args, &bus, &report, &name, core, Some(peer_core));
            Ok(report.exit_code(args.allow_loss))
        }
    }
}

impl Report {
    /// The exit status: [`EXIT_DATA_LOST`](mdbus_tool_support::output::EXIT_DATA_LOST)
    /// when messages were lost and loss is not allowed; says what on stderr.
    fn exit_code(&self, allow_loss: bool) -> u8 {
        crate::flow::loss_exit_code(
            self.lost,
            self.sent,
            "overruns, unrecoverable gaps",
            allow_loss,
        )
    }
}

fn mb(msgs_per_sec: f64, size: u64) -> f64 {
    (msgs_per_sec * size as f64 / 1e6 * 10.0).round() / 10.0
}

/// The bus, with the channel sized (and, on the IP transport, placed) for
/// this run.
fn bus(args: &Args, name: &str) -> Result<Bus, Failure> {
    let mut placed = Ok(());
    let bus = crate::transport::bus(&args.common, |cfg| match args.channel() {
        Channel::Stream => {
            let mut stream = StreamConfig {
                max_message: args.size as usize,
                capacity: args.capacity(),
                // Started on its own, the subscriber may attach after the
                // publisher's first messages.
                late_join: LateJoin::Oldest,
                autoflush: args.batch == 1,
                ..cfg.stream(name)
            };
            placed = crate::ip::stream(&args.common, &mut stream, 0);
            cfg.streams.insert(name.into(), stream);
        }
        Channel::Session => {
            let mut session = SessionConfig {
                max_message: args.size as usize,
                capacity: args.capacity(),
                connect_timeout: args.common.timeout(),
                ..cfg.session(name)
            };
            placed = crate::ip::session(&args.common, &cfg.verbs, &mut session);
            cfg.sessions.insert(name.into(), session);
        }
    });
    placed?;
    bus
}

/// Publishes `--count` messages on the stream; returns how many and the
/// nanoseconds it took. On UDP it then answers retransmit requests until
/// the subscriber is done.
fn publish(args: &Args, bus: &Bus, name: &str) -> Result<(u64, u64), Failure> {
    let mut publisher = bus.publisher(name)?;
    let datagram = args.datagram();
    let done = start_publishing(&args.common, name)?;
    let count = args.count();
    let mut payload = vec![0x5au8; args.size as usize];
    let t0 = Instant::now();
    for i in 1..=count {
        if args.rate > 0 {
            pace(t0, due_ns(i, args.rate), || {
                if datagram {
                    publisher.service()?;
                }
                Ok(())
            })?;
        }
        payload[..8].copy_from_slice(&i.to_le_bytes());
        publisher.publish(&payload)?;
        if args.batch > 1 && i % args.batch == 0 {
            publisher.flush()?;
        }
        if datagram && i % SERVICE_EVERY == 0 {
            publisher.service()?;
        }
    }
    publisher.flush()?;
    let ns = nanos(t0.elapsed());
    if datagram {
        serve(
            &mut publisher,
            done.as_ref(),
            &args.common,
            Duration::from_secs(args.linger),
        )?;
    }
    // Dropping the publisher closes the stream: the subscriber's end.
    drop(publisher);
    Ok((count, ns))
}

/// Sends `--count` messages on the session; returns how many and the
/// nanoseconds it took.
fn send(args: &Args, bus: &Bus, name: &str) -> Result<(u64, u64), Failure> {
    let mut session = bus
        .session_connect(name)
        .map_err(|e| args.common.peer_wait(e))?;
    if args.common.spawned {
        wait_for_go()?;
    } else {
        eprintln!("mdbus-perf (pub): sending on `{name}`");
    }
    let count = args.count();
    let mut payload = vec![0x5au8; args.size as usize];
    let t0 = Instant::now();
    for i in 1..=count {
        if args.rate > 0 {
            pace(t0, due_ns(i, args.rate), || Ok(()))?;
        }
        payload[..8].copy_from_slice(&i.to_le_bytes());
        // Waits while the receiver has no room; fails if it goes away.
        session.send(&payload)?;
    }
    let ns = nanos(t0.elapsed());
    // Closing sends what is left and tells the receiver this is the end.
    session.close();
    Ok((count, ns))
}

fn receive(args: &Args, bus: &Bus, name: &str, peer: Option<&mut Peer>) -> Result<Report, Failure> {
    match args.channel() {
        Channel::Stream => subscribe(args, bus, name, peer),
        Channel::Session => receive_session(args, bus, name, peer),
    }
}

fn subscribe(
    args: &Args,
    bus: &Bus,
    name: &str,
    mut peer: Option<&mut Peer>,
) -> Result<Report, Failure> {
    // Attaching waits (on shm) for the publisher to create the stream.
    let mut subscriber = bus.subscriber(name).map_err(|e| args.common.peer_wait(e))?;
    match peer.as_deref_mut() {
        Some(peer) => peer.go()?,
        None => eprintln!("mdbus-perf (sub): attached to `{name}`"),
    }
    // On UDP the publisher stays until told the subscriber is done, so the
    // run ends at message `count` (delivered or reported lost); on shared
    // memory, at the end of the stream.
    let datagram = args.datagram();
    let count = args.count();
    let Drained { end, ns } = drain_stream(
        &mut subscriber,
        peer.as_deref_mut(),
        &args.common,
        name,
        datagram.then_some(count),
        |last_seq| {
            format!("the publisher went down after message {last_seq} without closing the stream")
        },
        |_| {},
    )?;
    if let Some(peer) = peer {
        if datagram {
            peer.done()?;
        }
    }
    let sent = end.unwrap_or(count);
    let stats = subscriber.stats();
    let recovered = match subscriber.recovery_counters() {
        Some(counters) => {
            log::info!("subscriber's recovery counters: {counters:?}");
            counters.recovered
        }
        None => 0,
    };
    let (received, lost) = (stats.received, stats.overrun_messages + stats.gap_messages);
    let rate = per_sec(received, ns);
    Ok(Report {
        transport: args.common.transport.name(),
        channel: Channel::Stream,
        size: args.size,
        sent,
        received,
        lost,
        recovered,
        before_join: sent.saturating_sub(received + lost),
        msgs_per_sec: rate.round(),
        mb_per_sec: mb(rate, args.size),
    })
}

fn receive_session(
    args: &Args,
    bus: &Bus,
    name: &str,
    mut peer: Option<&mut Peer>,
) -> Result<Report, Failure> {
    // Waits up to --timeout for the sender to connect.
    let mut session = bus
        .session_accept(name)
        .map_err(|e| args.common.peer_wait(e))?;
    match peer.as_deref_mut() {
        Some(peer) => peer.go()?,
        None => eprintln!("mdbus-perf (sub): accepted `{name}`"),
    }
    let mut last = 0u64;
    let mut out_of_order = 0u64;
    let mut span = Span::default();
    {
        let mut dog = watchdog(peer.as_deref_mut(), &args.common, "waiting for messages");
        loop {
            match session.poll(|m| {
                let c = counter(m.payload());
                out_of_order += u64::from(c != last + 1);
                last = c;
            }) {
                Ok(0) => dog.idle()?,
                Ok(_) => {
                    span.mark();
                    dog.progress();
                }
                Err(mdbus::Error::PeerClosed { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Keep this end open until the sender has exited: its close waits for
    // the acknowledgement of its last write, which a queue pair torn down
    // first (verbs) would leave unanswered.
    if let Some(peer) = peer {
        let t0 = Instant::now();
        while !peer.has_exited()? && t0.elapsed() < args.common.timeout() {
            interrupted()?;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if out_of_order > 0 {
        return Err(Failure::Run(format!(
            "session `{name}`: {out_of_order} messages arrived out of order"
        )));
    }
    let received = session.stats().received;
    let rate = per_sec(received, span.ns());
    Ok(Report {
        transport: args.common.transport.name(),
        channel: Channel::Session,
        size: args.size,
        sent: last,
        received,
        lost: last.saturating_sub(received),
        recovered: 0,
        before_join: 0,
        msgs_per_sec: rate.round(),
        mb_per_sec: mb(rate, args.size),
    })
}

fn print(
    args: &Args,
    bus: &Bus,
    report: &Report,
    name: &str,
    core: usize,
    peer_core: Option<usize>,
) {
    if args.common.json {
        print_json(report);
        return;
    }
    let (recv, send) = match report.channel {
        Channel::Stream => ("subscriber", "publisher"),
        Channel::Session => ("receiver", "sender"),
    };
    let cores = cores_line((recv, core), (send, peer_core));
    let channel = match (report.channel, args.common.transport) {
        (Channel::Stream, TransportKind::Udp) => format!(
            "stream `{name}`, {}",
            crate::ip::describe_stream(&bus.config().stream(name))
        ),
        (Channel::Stream, _) => format!("stream `{name}`"),
        (Channel::Session, _) => {
            format!("session `{name}` at {}", bus.config().session(name).address)
        }
    };
    println!(
        "mdbus-perf throughput: transport {}, {channel}, {}-byte messages, {cores}",
        report.transport, report.size
    );
    let rate = if args.rate == 0 {
        "as fast as possible".to_string()
    } else {
        format!("at most {} msgs/s", args.rate)
    };
    let batch = if args.datagram() && args.batch > 1 {
        format!(", flush every {} messages", args.batch)
    } else {
        String::new()
    };
    println!(
        "{send} {rate}, capacity {}{batch}, wait {}",
        args.capacity(),
        args.common.wait
    );
    if args.common.transport == TransportKind::Verbs {
        println!("{}", crate::verbs::describe(&bus.config().verbs));
    }
    println!();
    println!(
        "{:>12} {:>12} {:>12} {:>12} {:>12} {:>14} {:>10}",
        "sent", "received", "lost", "recovered", "before join", "msgs/s", "MB/s"
    );
    println!(
        "{:>12} {:>12} {:>12} {:>12} {:>12} {:>14.0} {:>10.1}",
        report.sent,
        report.received,
        report.lost,
        report.recovered,
        report.before_join,
        report.msgs_per_sec,
        report.mb_per_sec
    );
}
