//! `mdbus-perf pingpong`: round-trip time between two processes.
//!
//! Ping writes a counter into the first 8 bytes of a `--size`-byte message
//! and sends it; pong sends the same bytes back; ping times the round trip
//! with `Instant::now()` on either side of it (the clock's own cost, about
//! 20 ns, is in every sample) and records it in an HdrHistogram. Both sides
//! busy-poll. The last message carries `u64::MAX` and tells pong to stop.
//!
//! On the IP transport, `--transport tcp` runs the round trip over one TCP
//! session and `--transport udp` over two UDP multicast streams; a stream
//! publisher answers retransmit requests whenever its side waits, and ping
//! keeps answering them after the last round trip until pong has closed
//! its stream.

use std::time::{Duration, Instant};

use mdbus::config::{LateJoin, SessionConfig, StreamConfig};
use mdbus::{Bus, Event, Session, TransportKind};
use serde::Serialize;

use mdbus_tool_support::output::print_json;
use mdbus_tool_support::percentiles::{latency_histogram, nanos, Percentiles};

use crate::common::{cores_line, watchdog, Common, Failure};
use crate::flow::counter;
use crate::peer::{self, Peer};
use crate::side;

/// Counter value that ends the run.
const STOP: u64 = u64::MAX;

/// Options of `mdbus-perf pingpong`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The options every command shares.
    #[command(flatten)]
    pub common: Common,

    /// Channel carrying the round trip: `session` (both directions in one
    /// session, the order-flow path) or `stream` (a stream each way,
    /// `NAME.ping` and `NAME.pong`, the market-data path). Default:
    /// `session` on shm, tcp and verbs, `stream` on udp; tcp and verbs
    /// (an RC queue pair) run sessions only here, udp only streams.
    #[arg(long, value_enum)]
    pub channel: Option<Channel>,

    /// Payload bytes per message, at least 8 (the round-trip counter).
    #[arg(long, default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(8..=mdbus::config::MAX_MESSAGE_LIMIT as u64))]
    pub size: u64,

    /// Round trips measured.
    #[arg(long, default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..u64::MAX / 2))]
    pub iters: u64,

    /// Round trips run first and left out of the histogram (they warm the
    /// caches, TLBs and branch predictors on both sides).
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(0..u64::MAX / 2))]
    pub warmup: u64,

    /// Run one side only: `ping` sends, times and prints the result; `pong`
    /// echoes. Start both with the same --name, in either order (each
    /// waits up to --timeout for the other). Without --role this process
    /// is ping and starts pong itself.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

/// Channel kinds a round trip can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// One session, both directions.
    Session,
    /// Two streams, one each way.
    Stream,
}

/// The two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Sends, times, prints.
    Ping,
    /// Echoes.
    Pong,
}

impl Args {
    /// The side this process plays when --role names one.
    pub fn role_name(&self) -> Option<&'static str> {
        self.role.map(|r| match r {
            Role::Ping => "ping",
            Role::Pong => "pong",
        })
    }

    /// The channel: as given, or the transport's own.
    fn channel(&self) -> Result<Channel, Failure> {
        use mdbus::TransportKind::{Tcp, Udp, Verbs};
        match (self.common.transport, self.channel) {
            (Verbs, Some(Channel::Stream)) => Err(Failure::Usage(
                "--transport verbs runs the round trip on an RC session; its UD multicast \
                 streams are measured by mcast"
                    .into(),
            )),
            (Udp, Some(Channel::Session)) => Err(Failure::Usage(
                "--transport udp carries streams (UDP multicast); a session runs on --transport tcp"
                    .into(),
            )),
            (Tcp, Some(Channel::Stream)) => Err(Failure::Usage(
                "--transport tcp carries sessions; streams run on --transport udp (UDP multicast)"
                    .into(),
            )),
            (Udp, _) => Ok(Channel::Stream),
            (_, channel) => Ok(channel.unwrap_or(Channel::Session)),
        }
    }
}

/// What ping prints.
#[derive(Debug, Serialize)]
struct Report {
    transport: &'static str,
    channel: Channel,
    size: u64,
    iters: u64,
    warmup: u64,
    rtt_ns: Percentiles,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<(), Failure> {
    // The channel first: a usage error whatever the machine has.
    let channel = args.channel()?;
    crate::transport::ready(&args.common)?;
    let mut args = args.clone();
    args.channel = Some(channel);
    let (has_role, second) = (args.role.is_some(), args.role == Some(Role::Pong));
    let (name, core, peer_core) = side::setup(&mut args.common, has_role, second)?;
    let args = &args;
    let bus = bus(args, &name)?;
    match args.role {
        Some(Role::Pong) => pong(args, &bus, &name),
        Some(Role::Ping) => {
            let report = ping(args, &bus, &name, None)?;
            print(args, &bus, &report, &name, core, None);
            Ok(())
        }
        None => {
            let own = [
                "--channel".to_string(),
                channel_arg(args.channel()?).into(),
                "--size".into(),
                args.size.to_string(),
            ];
            let pong = peer::spawn(
                None,
                "pingpong",
                "pong",
                &own,
                &args.common,
                &name,
                peer_core,
            )?;
            let report = peer::measure(pong, |p| ping(args, &bus, &name, Some(p)))?;
            print(args, &bus, &report, &name, core, Some(peer_core));
            Ok(())
        }
    }
}

fn channel_arg(channel: Channel) -> &'static str {
    match channel {
        Channel::Session => "session",
        Channel::Stream => "stream",
    }
}

fn stream_names(name: &str) -> (String, String) {
    (format!("{name}.ping"), format!("{name}.pong"))
}

/// The bus, with this run's channel sized for `--size` (and placed, on
/// the IP transport: the ping stream on the group's port, pong's on the
/// next).
fn bus(args: &Args, name: &str) -> Result<Bus, Failure> {
    let size = args.size as usize;
    let timeout = args.common.timeout();
    let channel = args.channel()?;
    let mut placed = Ok(());
    let bus = crate::transport::bus(&args.common, |cfg| match channel {
        Channel::Session => {
            let mut session = SessionConfig {
                max_message: size,
                connect_timeout: timeout,
                ..cfg.session(name)
            };
            placed = crate::ip::session(&args.common, &cfg.verbs, &mut session);
            cfg.sessions.insert(name.into(), session);
        }
        Channel::Stream => {
            let (ping, pong) = stream_names(name);
            for (offset, stream) in [ping, pong].into_iter().enumerate() {
                let mut s = StreamConfig {
                    max_message: size,
                    // Either side may attach after the other's first message.
                    late_join: LateJoin::Oldest,
                    ..cfg.stream(&stream)
                };
                if placed.is_ok() {
                    placed = crate::ip::stream(&args.common, &mut s, offset as u16);
                }
                cfg.streams.insert(stream, s);
            }
        }
    });
    placed?;
    bus
}

/// Empty polls between two calls of a stream publisher's `service` while
/// a side waits: often enough to answer a retransmit request within
/// microseconds, rarely enough to keep the system call off the poll loop.
const SERVICE_EVERY: u32 = 64;

/// One side's end of the round trip. One per process, never moved in the
/// timed loop; boxing the larger variant would add an indirection to every
/// send and receive.
#[allow(clippy::large_enum_variant)]
enum Link {
    Session(Session),
    Streams {
        publisher: mdbus::Publisher,
        subscriber: mdbus::Subscriber,
        /// Empty polls since the publisher's last `service`.
        idle: u32,
    },
}

/// What one poll found.
enum Received {
    Nothing,
    Counter(u64),
    /// The other side ended the channel in an orderly way.
    Closed,
}

impl Link {
    /// Pong accepts the session, ping connects; on streams each publishes
    /// its own and subscribes to the other's.
    fn open(bus: &Bus, channel: Channel, name: &str, is_ping: bool) -> mdbus::Result<Link> {
        Ok(match channel {
            Channel::Session if is_ping => Link::Session(bus.session_connect(name)?),
            Channel::Session => Link::Session(bus.session_accept(name)?),
            Channel::Stream => {
                let (ping, pong) = stream_names(name);
                let (out, inp) = if is_ping { (ping, pong) } else { (pong, ping) };
                let publisher = bus.publisher(&out)?;
                let subscriber = bus.subscriber(&inp)?;
                Link::Streams {
                    publisher,
                    subscriber,
                    idle: 0,
                }
            }
        })
    }

    #[inline(always)]
    fn send(&mut self, payload: &[u8]) -> Result<(), Failure> {
        match self {
            Link::Session(s) => {
                s.send(payload)?;
            }
            Link::Streams { publisher, .. } => {
                publisher.publish(payload)?;
            }
        }
        Ok(())
    }

    /// One empty poll: now and then, the publisher's duties (answering
    /// retransmit requests, heartbeats on datagram transports).
    #[inline(always)]
    fn idle(&mut self) -> Result<(), Failure> {
        if let Link::Streams {
            publisher, idle, ..
        } = self
        {
            *idle += 1;
            if *idle == SERVICE_EVERY {
                *idle = 0;
                publisher.service()?;
            }
        }
        Ok(())
    }

    /// After the last message: a stream publisher goes on answering
    /// retransmit requests (the stop message may need one) until the other
    /// side's stream ends, its process (if ours) exits, or `limit` passes.
    fn linger(
        &mut self,
        mut peer: Option<&mut Peer>,
        buf: &mut [u8],
        limit: Duration,
    ) -> Result<(), Failure> {
        if matches!(self, Link::Session(_)) {
            return Ok(());
        }
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            match self.try_receive(buf) {
                Ok(Received::Closed) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
            if let Link::Streams { publisher, .. } = self {
                publisher.service()?;
            }
            if let Some(peer) = peer.as_deref_mut() {
                if peer.has_exited()? {
                    return Ok(());
                }
            }
            crate::common::interrupted()?;
        }
        Ok(())
    }

    /// Polls once; on a message, copies its payload into `buf` (same size)
    /// and returns its counter.
    #[inline(always)]
    fn try_receive(&mut self, buf: &mut [u8]) -> Result<Received, Failure> {
        let mut got = None;
        let mut copy = |payload: &[u8]| {
            let n = payload.len().min(buf.len());
            buf[..n].copy_from_slice(&payload[..n]);
            got = Some(counter(payload));
        };
        match self {
            Link::Session(s) => match s.poll(|m| copy(m.payload())) {
                Ok(_) => {}
                Err(mdbus::Error::PeerClosed { .. }) => return Ok(Received::Closed),
                Err(e) => return Err(e.into()),
            },
            Link::Streams { subscriber, .. } => {
                let mut ended = false;
                let mut trouble = None;
                subscriber.poll(|e| match e {
                    Event::Message(m) => copy(m.payload()),
                    Event::EndOfStream { .. } => ended = true,
                    other => trouble = Some(describe(&other)),
                })?;
                if let Some(what) = trouble {
                    let stream = subscriber.name();
                    return Err(Failure::Run(format!("stream `{stream}`: {what}")));
                }
                if ended && got.is_none() {
                    return Ok(Received::Closed);
                }
            }
        }
        Ok(got.map_or(Received::Nothing, Received::Counter))
    }
}

/// Says what a stream event other than a message or the end means here.
fn describe(event: &Event<'_>) -> String {
    match *event {
        Event::PublisherDown { last_seq } => {
            format!("the peer's publisher went down after message {last_seq}")
        }
        Event::Overrun { from, to } | Event::Gap { from, to } => {
            format!("messages {from}..{to} lost")
        }
        Event::PublisherRestarted { epoch } => {
            format!("the peer's publisher restarted (epoch {epoch})")
        }
        ref other => format!("unexpected {other:?}"),
    }
}

fn ping(
    args: &Args,
    bus: &Bus,
    name: &str,
    mut peer: Option<&mut Peer>,
) -> Result<Report, Failure> {
    let channel = args.channel()?;
    let mut link = Link::open(bus, channel, name, true).map_err(|e| args.common.peer_wait(e))?;
    if args.role.is_some() {
        eprintln!("mdbus-perf (ping): connected to pong on `{name}`");
    }
    let mut out = vec![0x5au8; args.size as usize];
    let mut back = vec![0u8; args.size as usize];
    let mut hist = latency_histogram();
    let mut dog = watchdog(peer.as_deref_mut(), &args.common, "waiting for pong's echo");
    for i in 1..=args.warmup + args.iters {
        out[..8].copy_from_slice(&i.to_le_bytes());
        let t0 = Instant::now();
        link.send(&out)?;
        loop {
            match link.try_receive(&mut back)? {
                Received::Counter(v) if v == i => break,
                Received::Counter(v) => {
                    return Err(Failure::Run(format!("sent round trip {i}, got {v} back")))
                }
                Received::Nothing => {
                    link.idle()?;
                    dog.idle()?;
                }
                Received::Closed => {
                    return Err(Failure::Run(format!(
                        "pong closed `{name}` after {} of {} round trips",
                        i - 1,
                        args.warmup + args.iters
                    )))
                }
            }
        }
        let rtt = nanos(t0.elapsed());
        dog.progress();
        if i > args.warmup {
            hist.saturating_record(rtt);
        }
    }
    out[..8].copy_from_slice(&STOP.to_le_bytes());
    link.send(&out)?;
    link.linger(peer, &mut back, args.common.timeout())?;
    Ok(Report {
        transport: args.common.transport.name(),
        channel,
        size: args.size,
        iters: hist.len(),
        warmup: args.warmup,
        rtt_ns: Percentiles::of(&hist),
    })
}

fn pong(args: &Args, bus: &Bus, name: &str) -> Result<(), Failure> {
    let mut link =
        Link::open(bus, args.channel()?, name, false).map_err(|e| args.common.peer_wait(e))?;
    if !args.common.spawned {
        eprintln!("mdbus-perf (pong): connected to ping on `{name}`");
    }
    let mut buf = vec![0u8; args.size as usize];
    let mut echoed = 0u64;
    let mut dog = watchdog(None, &args.common, "waiting for ping");
    loop {
        match link.try_receive(&mut buf)? {
            Received::Counter(STOP) | Received::Closed => break,
            Received::Counter(_) => {
                link.send(&buf)?;
                echoed += 1;
                dog.progress();
            }
            Received::Nothing => {
                link.idle()?;
                dog.idle()?;
            }
        }
    }
    if !args.common.spawned {
        eprintln!("mdbus-perf (pong): echoed {echoed} messages");
    }
    Ok(())
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
    let cores = cores_line(("ping", core), ("pong", peer_core));
    let (ping, _) = stream_names(name);
    let channel = match report.channel {
        Channel::Session if crate::ip::has_ports(args.common.transport) => {
            format!("session `{name}` at {}", bus.config().session(name).address)
        }
        Channel::Session => format!("session `{name}`"),
        Channel::Stream if crate::ip::is_ip(args.common.transport) => format!(
            "streams `{name}.ping`/`{name}.pong`, {} (and the next port)",
            crate::ip::describe_stream(&bus.config().stream(&ping))
        ),
        Channel::Stream => format!("streams `{name}.ping`/`{name}.pong`"),
    };
    println!(
        "mdbus-perf pingpong: transport {}, {channel}, {}-byte messages, {cores}",
        report.transport, report.size
    );
    println!(
        "{} round trips measured after {} warm-up, wait {}",
        report.iters, report.warmup, args.common.wait
    );
    if args.common.transport == TransportKind::Verbs {
        println!("{}", crate::verbs::describe(&bus.config().verbs));
    }
    println!();
    crate::common::print_percentiles("round trip ns", &report.rtt_ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_serialises_to_the_documented_shape() {
        let report = Report {
            transport: "shm",
            channel: Channel::Session,
            size: 32,
            iters: 10,
            warmup: 2,
            rtt_ns: Percentiles {
                p50: 1,
                p90: 2,
                p99: 3,
                p999: 4,
                max: 5,
            },
        };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "transport": "shm", "channel": "session", "size": 32, "iters": 10, "warmup": 2,
                "rtt_ns": {"p50": 1, "p90": 2, "p99": 3, "p999": 4, "max": 5}
            })
        );
    }
}
