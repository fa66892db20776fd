//! `mdbus-perf pingpong`: round-trip time between two processes.
//!
//! Ping writes a counter into the first 8 bytes of a `--size`-byte message
//! and sends it; pong sends the same bytes back; ping times the round trip
//! with `Instant::now()` on either side of it (the clock's own cost, about
//! 20 ns, is in every sample) and records it in an HdrHistogram. Both sides
//! busy-poll. The last message carries `u64::MAX` and tells pong to stop.

use std::time::Instant;

use mdbus::config::{LateJoin, SessionConfig, StreamConfig};
use mdbus::{Bus, Event, Session};
use serde::Serialize;

use crate::common::{pin, Common, Failure, Watchdog};
use crate::peer::{die_with_parent, Peer};
use crate::report::{latency_histogram, nanos, print_json, Percentiles};

/// Counter value that ends the run.
const STOP: u64 = u64::MAX;

/// Options of `mdbus-perf pingpong`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: Common,

    /// Channel carrying the round trip: `session` (both directions in one
    /// session, the order-flow path) or `stream` (a stream each way,
    /// `NAME.ping` and `NAME.pong`, the market-data path).
    #[arg(long, value_enum, default_value_t = Channel::Session)]
    pub channel: Channel,

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
    crate::transport::check(args.common.transport)?;
    let name = args.common.channel_name(args.role.is_some())?;
    let (core, peer_core) = args.common.cores_for(args.role == Some(Role::Pong))?;
    pin(core)?;
    if args.common.spawned {
        die_with_parent()?;
    }
    let bus = bus(args, &name)?;
    match args.role {
        Some(Role::Pong) => pong(args, &bus, &name),
        Some(Role::Ping) => {
            let report = ping(args, &bus, &name, None)?;
            print(args, &report, &name, core, None);
            Ok(())
        }
        None => {
            let own = [
                "--channel".to_string(),
                channel_arg(args.channel).into(),
                "--size".into(),
                args.size.to_string(),
            ];
            let mut peer = Peer::spawn("pingpong", "pong", &own, &args.common, &name, peer_core)?;
            let report = ping(args, &bus, &name, Some(&mut peer)).map_err(|e| peer.explain(e))?;
            peer.finish()?;
            print(args, &report, &name, core, Some(peer_core));
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

/// The bus, with this run's channel sized for `--size`.
fn bus(args: &Args, name: &str) -> Result<Bus, Failure> {
    let size = args.size as usize;
    let timeout = args.common.timeout();
    crate::transport::bus(&args.common, |cfg| match args.channel {
        Channel::Session => {
            let session = SessionConfig {
                max_message: size,
                connect_timeout: timeout,
                ..cfg.session(name)
            };
            cfg.sessions.insert(name.into(), session);
        }
        Channel::Stream => {
            let (ping, pong) = stream_names(name);
            for stream in [ping, pong] {
                let s = StreamConfig {
                    max_message: size,
                    // Either side may attach after the other's first message.
                    late_join: LateJoin::Oldest,
                    ..cfg.stream(&stream)
                };
                cfg.streams.insert(stream, s);
            }
        }
    })
}

/// One side's end of the round trip. One per process, never moved in the
/// timed loop; boxing the larger variant would add an indirection to every
/// send and receive.
#[allow(clippy::large_enum_variant)]
enum Link {
    Session(Session),
    Streams {
        publisher: mdbus::Publisher,
        subscriber: mdbus::Subscriber,
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

#[inline(always)]
fn counter(payload: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = payload.len().min(8);
    bytes[..n].copy_from_slice(&payload[..n]);
    u64::from_le_bytes(bytes)
}

fn ping(args: &Args, bus: &Bus, name: &str, peer: Option<&mut Peer>) -> Result<Report, Failure> {
    let mut link =
        Link::open(bus, args.channel, name, true).map_err(|e| args.common.peer_wait(e))?;
    if args.role.is_some() {
        eprintln!("mdbus-perf (ping): connected to pong on `{name}`");
    }
    let mut out = vec![0x5au8; args.size as usize];
    let mut back = vec![0u8; args.size as usize];
    let mut hist = latency_histogram();
    let mut dog = Watchdog::new(peer, &args.common, "waiting for pong's echo");
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
                Received::Nothing => dog.idle()?,
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
    Ok(Report {
        transport: args.common.transport.name(),
        channel: args.channel,
        size: args.size,
        iters: hist.len(),
        warmup: args.warmup,
        rtt_ns: Percentiles::of(&hist),
    })
}

fn pong(args: &Args, bus: &Bus, name: &str) -> Result<(), Failure> {
    let mut link =
        Link::open(bus, args.channel, name, false).map_err(|e| args.common.peer_wait(e))?;
    if !args.common.spawned {
        eprintln!("mdbus-perf (pong): connected to ping on `{name}`");
    }
    let mut buf = vec![0u8; args.size as usize];
    let mut echoed = 0u64;
    let mut dog = Watchdog::new(None, &args.common, "waiting for ping");
    loop {
        match link.try_receive(&mut buf)? {
            Received::Counter(STOP) | Received::Closed => break,
            Received::Counter(_) => {
                link.send(&buf)?;
                echoed += 1;
                dog.progress();
            }
            Received::Nothing => dog.idle()?,
        }
    }
    if !args.common.spawned {
        eprintln!("mdbus-perf (pong): echoed {echoed} messages");
    }
    Ok(())
}

fn print(args: &Args, report: &Report, name: &str, core: usize, peer_core: Option<usize>) {
    if args.common.json {
        print_json(report);
        return;
    }
    let cores = match peer_core {
        Some(peer) => format!("ping on core {core}, pong on core {peer}"),
        None => format!("ping on core {core}"),
    };
    let channel = match report.channel {
        Channel::Session => format!("session `{name}`"),
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
    let p = report.rtt_ns;
    println!();
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "round trip ns", p.p50, p.p90, p.p99, p.p999, p.max
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_reads_the_first_eight_bytes_little_endian() {
        let mut payload = [0xffu8; 32];
        payload[..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(counter(&payload), 0x0102_0304_0506_0708);
        assert_eq!(counter(&[1, 0]), 1);
    }

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
