//! `mdbus-perf pingpong`: round-trip time between two processes.
//!
//! Ping writes a counter into the first 8 bytes (fewer in a smaller
//! message) of a `--size`-byte message and sends it; pong sends the same
//! bytes back; ping times the round trip with `Instant::now()` on either
//! side of it (the clock's own cost, about 20 ns, is in every sample) and
//! records it in an HdrHistogram. Both sides busy-poll. The last message
//! carries the end mark and tells pong to stop. The report gives the round
//! trip (RTT) and half of it (half-RTT, the one-way figure ib_send_lat
//! prints), each with min, percentiles, max, mean and standard deviation;
//! with -a one measurement per size, each with a pong of its own.
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

use mdbus_tool_support::output::LatencyNs;
use mdbus_tool_support::percentiles::{latency_histogram, nanos};

use crate::common::{bounded_capacity, cores_line, watchdog, Common, Failure, Load};
use crate::flow::{counter, counter_of, is_end, write_counter, write_end};
use crate::peer::{self, Peer};
use crate::report::{self, LatencyRow, WorkFields};
use crate::side;

/// Payload bytes without -s.
const DEFAULT_SIZE: u64 = 32;
/// Round trips without -n.
const DEFAULT_ITERS: u64 = 1_000_000;
/// Most bytes of messages a ring holds: one message is in flight each
/// way, so large ones (-a) need no deep ring.
const RING_BUDGET: u64 = 4 << 20;

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

    /// Sizes and round trips: -s, -n, -a, -D.
    #[command(flatten)]
    pub load: Load,

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

/// What holds for the whole run, in its JSON object.
#[derive(Debug, Serialize)]
struct Head {
    transport: &'static str,
    channel: Channel,
    /// `pong` when only the echoing side ran here.
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
}

/// What ping measured at one size.
#[derive(Debug, Serialize)]
struct Measured {
    size_bytes: u64,
    /// Round trips measured (the histogram's count).
    round_trips: u64,
    warmup_round_trips: u64,
    /// From the first measured round trip's start to the last one's end.
    seconds: f64,
    rtt_ns: LatencyNs,
    /// Every figure of `rtt_ns` halved: the one-way share perftest's
    /// latency tests report.
    half_rtt_ns: LatencyNs,
    /// Verbs: ping's end's work over the messages it sent (warm-up and
    /// end mark included). Both ends do the same, so this is also the
    /// pair's work per message.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    work: Option<WorkFields>,
}

/// What pong did at one size, for its report when run by hand.
#[derive(Debug, Serialize)]
struct Echoed {
    size_bytes: u64,
    /// Messages echoed (warm-up included).
    messages: u64,
    /// Verbs: pong's end's work over the messages it echoed.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    work: Option<WorkFields>,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<(), Failure> {
    let mut args = args.clone();
    crate::transport::resolve(&mut args.common, TransportKind::Shm)?;
    // The channel next: a usage error whatever the machine has.
    let channel = args.channel()?;
    crate::transport::ready(&args.common, args.role != Some(Role::Ping))?;
    args.channel = Some(channel);
    let (has_role, second) = (args.role.is_some(), args.role == Some(Role::Pong));
    let (name, core, peer_core) = side::setup(&mut args.common, has_role, second)?;
    let sizes = args.load.sizes(DEFAULT_SIZE);
    let sweep = args.load.all;
    let head = Head {
        transport: args.common.transport.name(),
        channel,
        role: (args.role == Some(Role::Pong)).then_some("pong"),
    };
    if args.role == Some(Role::Pong) {
        let mut echoed = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let name = side::size_channel(&mut args.common, &name, size, i, sweep, has_role)?;
            let bus = bus(&args, &name, size)?;
            echoed.push(pong(&args, &bus, &name, size)?);
        }
        if args.common.json && !args.common.spawned {
            report::print("pingpong", &head, &echoed, sweep);
        }
        return Ok(());
    }
    let mut measured = Vec::new();
    let mut heading = None;
    for (i, &size) in sizes.iter().enumerate() {
        let name = side::size_channel(&mut args.common, &name, size, i, sweep, has_role)?;
        let bus = bus(&args, &name, size)?;
        let args = &args;
        let m = if has_role {
            ping(args, &bus, &name, size, None)?
        } else {
            let own = [
                "--channel".to_string(),
                channel_arg(channel).into(),
                "--size".into(),
                size.to_string(),
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
            peer::measure(pong, |p| ping(args, &bus, &name, size, Some(p)))?
        };
        heading.get_or_insert_with(|| {
            self::heading(args, &bus, &name, core, (!has_role).then_some(peer_core))
        });
        measured.push(m);
    }
    if args.common.json {
        report::print("pingpong", &head, &measured, sweep);
    } else {
        print_table(&args, heading.as_deref().unwrap_or_default(), &measured);
    }
    Ok(())
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
fn bus(args: &Args, name: &str, size: u64) -> Result<Bus, Failure> {
    let timeout = args.common.timeout();
    let channel = args.channel()?;
    let mut placed = Ok(());
    let bus = crate::transport::bus(&args.common, |cfg| match channel {
        Channel::Session => {
            let file = cfg.session(name);
            let mut session = SessionConfig {
                max_message: size as usize,
                capacity: bounded_capacity(file.capacity, size, RING_BUDGET),
                connect_timeout: timeout,
                ..file
            };
            placed = crate::ip::session(&args.common, &cfg.verbs, &mut session);
            cfg.sessions.insert(name.into(), session);
        }
        Channel::Stream => {
            let (ping, pong) = stream_names(name);
            for (offset, stream) in [ping, pong].into_iter().enumerate() {
                let file = cfg.stream(&stream);
                let mut s = StreamConfig {
                    max_message: size as usize,
                    capacity: bounded_capacity(file.capacity, size, RING_BUDGET),
                    // Either side may attach after the other's first message.
                    late_join: LateJoin::Oldest,
                    ..file
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
    /// The end mark: ping's last message.
    End,
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

    /// Closes a session and returns its verbs work over the messages it
    /// sent; `None` for streams and other transports.
    fn close_counted(self) -> Option<WorkFields> {
        match self {
            Link::Session(s) => {
                let sent = s.stats().sent;
                WorkFields::of(s.close_counted(), sent)
            }
            Link::Streams { .. } => None,
        }
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
            got = Some(if is_end(payload) {
                Received::End
            } else {
                Received::Counter(counter(payload))
            });
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
        Ok(got.unwrap_or(Received::Nothing))
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
    size: u64,
    mut peer: Option<&mut Peer>,
) -> Result<Measured, Failure> {
    let channel = args.channel()?;
    let mut link = Link::open(bus, channel, name, true).map_err(|e| args.common.peer_wait(e))?;
    if args.role.is_some() {
        eprintln!("mdbus-perf (ping): connected to pong on `{name}`");
    }
    let size = size as usize;
    let mut out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut hist = latency_histogram();
    let warmup = args.warmup;
    // With -D the count is open and the clock ends the run.
    let last = args
        .load
        .count(DEFAULT_ITERS)
        .map_or(u64::MAX / 2, |n| warmup + n);
    let mut first: Option<Instant> = None;
    let mut end = Instant::now();
    let mut dog = watchdog(peer.as_deref_mut(), &args.common, "waiting for pong's echo");
    for i in 1..=last {
        write_counter(&mut out, i);
        let expect = counter_of(size, i);
        let t0 = Instant::now();
        link.send(&out)?;
        loop {
            match link.try_receive(&mut back)? {
                Received::Counter(v) if v == expect => break,
                Received::Counter(v) => {
                    return Err(Failure::Run(format!(
                        "sent round trip {i} (counter {expect}), got counter {v} back"
                    )))
                }
                Received::End => {
                    return Err(Failure::Run(format!(
                        "sent round trip {i}, got an end mark back"
                    )))
                }
                Received::Nothing => {
                    link.idle()?;
                    dog.idle()?;
                }
                Received::Closed => {
                    return Err(Failure::Run(format!(
                        "pong closed `{name}` after {} round trips",
                        i - 1
                    )))
                }
            }
        }
        end = Instant::now();
        dog.progress();
        if i > warmup {
            hist.saturating_record(nanos(end - t0));
            let start = *first.get_or_insert(t0);
            if args.load.duration.is_some_and(|d| end - start >= d) {
                break;
            }
        }
    }
    write_end(&mut out);
    link.send(&out)?;
    link.linger(peer, &mut back, args.common.timeout())?;
    let work = link.close_counted();
    let rtt_ns = LatencyNs::of(&hist);
    Ok(Measured {
        size_bytes: size as u64,
        round_trips: hist.len(),
        warmup_round_trips: warmup,
        seconds: first.map_or(0.0, |t| (end - t).as_secs_f64()),
        rtt_ns,
        half_rtt_ns: rtt_ns.halved(),
        work,
    })
}

fn pong(args: &Args, bus: &Bus, name: &str, size: u64) -> Result<Echoed, Failure> {
    let mut link =
        Link::open(bus, args.channel()?, name, false).map_err(|e| args.common.peer_wait(e))?;
    if !args.common.spawned {
        eprintln!("mdbus-perf (pong): connected to ping on `{name}`");
    }
    let mut buf = vec![0u8; size as usize];
    let mut echoed = 0u64;
    let mut dog = watchdog(None, &args.common, "waiting for ping");
    loop {
        match link.try_receive(&mut buf)? {
            Received::End | Received::Closed => break,
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
    Ok(Echoed {
        size_bytes: size,
        messages: echoed,
        work: link.close_counted(),
    })
}

/// The lines above the table: transport, channel, cores, settings.
fn heading(args: &Args, bus: &Bus, name: &str, core: usize, peer_core: Option<usize>) -> String {
    let cores = cores_line(("ping", core), ("pong", peer_core));
    let (ping, _) = stream_names(name);
    let transport = args.common.transport;
    let channel = match args.channel.unwrap_or(Channel::Session) {
        Channel::Session if crate::ip::has_ports(transport) => {
            format!("session `{name}` at {}", bus.config().session(name).address)
        }
        Channel::Session => format!("session `{name}`"),
        Channel::Stream if crate::ip::is_ip(transport) => format!(
            "streams `{name}.ping`/`{name}.pong`, {} (and the next port)",
            crate::ip::describe_stream(&bus.config().stream(&ping))
        ),
        Channel::Stream => format!("streams `{name}.ping`/`{name}.pong`"),
    };
    let mut text = format!(
        "mdbus-perf pingpong: transport {}, {channel}, {cores}\n",
        transport.name()
    );
    let what = match args.load.duration {
        Some(d) => format!("round trips for {d:?}"),
        None => format!(
            "{} round trips",
            args.load.count(DEFAULT_ITERS).unwrap_or(0)
        ),
    };
    text += &format!(
        "{what} measured after {} warm-up, wait {}",
        args.warmup, args.common.wait
    );
    if transport == TransportKind::Verbs {
        text += &format!("\n{}", crate::verbs::describe(&bus.config().verbs));
        if args.channel.unwrap_or(Channel::Session) == Channel::Session {
            text += &format!(
                ", session mode {}",
                bus.config().session(name).mode.as_str()
            );
        }
    }
    text
}

fn print_table(args: &Args, heading: &str, measured: &[Measured]) {
    println!("{heading}");
    if args.load.all {
        println!("a channel of its own per size, named after it");
    }
    println!();
    let mut rows = Vec::new();
    for m in measured {
        rows.push(LatencyRow {
            what: "half-RTT",
            size: m.size_bytes,
            latency: &m.half_rtt_ns,
        });
        rows.push(LatencyRow {
            what: "RTT",
            size: m.size_bytes,
            latency: &m.rtt_ns,
        });
    }
    report::print_latency_table(&rows);
    println!();
    println!(
        "half-RTT: the round trip (RTT) halved, the one-way figure ib_send_lat reports \
         (its t_typical is our half-RTT t_typical, the median)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The command line as clap parses it.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(line: &str) -> Args {
        Cli::try_parse_from(line.split_whitespace())
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .args
    }

    #[test]
    fn the_perftest_line_of_issue_13_selects_verbs_on_rxe0() {
        // The acceptance line, as scripts/rdma-guest/run-tests runs it.
        let mut a = parse("mdbus-perf -d rxe0 -x 1 -s 32 -n 1000");
        assert_eq!(a.common.device.as_deref(), Some("rxe0"));
        assert_eq!(a.common.gid_index, Some(1));
        assert_eq!(a.load.size, Some(32));
        assert_eq!(a.load.iters, Some(1000));
        assert_eq!(a.load.count(DEFAULT_ITERS), Some(1000));
        assert_eq!(a.load.sizes(DEFAULT_SIZE), [32]);
        assert_eq!(a.common.transport_arg, None);
        crate::transport::resolve(&mut a.common, TransportKind::Shm).unwrap();
        assert_eq!(a.common.transport, TransportKind::Verbs);
        assert_eq!(a.channel().unwrap(), Channel::Session);
    }

    #[test]
    fn long_forms_and_the_count_alias_mean_the_same() {
        for line in [
            "p --device rxe0 --gid-index 1 --size 64 --iters 7",
            "p --device rxe0 --gid-index 1 --size 64 --count 7",
            "p -d rxe0 -x 1 -s 64 -n 7",
        ] {
            let a = parse(line);
            assert_eq!(
                (
                    a.common.device.as_deref(),
                    a.common.gid_index,
                    a.load.size,
                    a.load.iters
                ),
                (Some("rxe0"), Some(1), Some(64), Some(7)),
                "{line}"
            );
        }
        let a = parse("p -a -D 1.5s");
        assert!(a.load.all);
        assert_eq!(a.load.duration, Some(Duration::from_millis(1500)));
        assert_eq!(a.load.count(DEFAULT_ITERS), None);
        let sizes = a.load.sizes(DEFAULT_SIZE);
        assert_eq!(sizes.first(), Some(&2));
        assert_eq!(
            sizes.last(),
            Some(&(mdbus::config::MAX_MESSAGE_LIMIT as u64))
        );
        assert_eq!(sizes.len(), 20);
        // An explicit transport wins over -d's implication.
        let mut a = parse("p --transport shm -d eth0");
        crate::transport::resolve(&mut a.common, TransportKind::Shm).unwrap();
        assert_eq!(a.common.transport, TransportKind::Shm);
    }

    #[test]
    fn conflicting_perftest_flags_are_usage_errors() {
        for line in ["p -a -s 64", "p -n 10 -D 1s", "p -s 1", "p -D 0s"] {
            let e = Cli::try_parse_from(line.split_whitespace()).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{line}");
        }
    }

    #[test]
    fn measured_serialises_rtt_and_half_rtt() {
        let mut h = latency_histogram();
        for v in [1000u64, 2000, 3000] {
            h.record(v).unwrap();
        }
        let rtt_ns = LatencyNs::of(&h);
        let m = Measured {
            size_bytes: 32,
            round_trips: 3,
            warmup_round_trips: 2,
            seconds: 0.5,
            rtt_ns,
            half_rtt_ns: rtt_ns.halved(),
            work: None,
        };
        let head = Head {
            transport: "shm",
            channel: Channel::Session,
            role: None,
        };
        let v = report::object("pingpong", &head, &[m], false);
        assert_eq!(mdbus_tool_support::output::check_convention(&v), Ok(()));
        assert_eq!(v["channel"], "session");
        assert_eq!(v["round_trips"], 3);
        assert_eq!(v["rtt_ns"]["p50"], 2000);
        assert_eq!(v["half_rtt_ns"]["p50"], 1000);
        assert_eq!(v["half_rtt_ns"]["min"], 500);
        assert_eq!(v["rtt_ns"]["count"], 3);
        assert!(v.get("work_per_msg").is_none(), "{v}");
    }

    #[test]
    fn verbs_work_serialises_totals_and_per_message() {
        let mut h = latency_histogram();
        h.record(1000).unwrap();
        let rtt_ns = LatencyNs::of(&h);
        let work = mdbus::VerbsWork {
            send_wrs: 2050,
            send_doorbells: 2050,
            recv_wrs: 1280,
            recv_doorbells: 9,
            completions: 1300,
        };
        let m = Measured {
            size_bytes: 32,
            round_trips: 1,
            warmup_round_trips: 0,
            seconds: 0.5,
            rtt_ns,
            half_rtt_ns: rtt_ns.halved(),
            work: WorkFields::of(Some(work), 2000),
        };
        let head = Head {
            transport: "verbs",
            channel: Channel::Session,
            role: None,
        };
        let v = report::object("pingpong", &head, &[m], false);
        assert_eq!(mdbus_tool_support::output::check_convention(&v), Ok(()));
        assert_eq!(v["verbs_work"]["messages"], 2000);
        assert_eq!(v["verbs_work"]["totals"]["recv_doorbells"], 9);
        assert_eq!(v["work_per_msg"]["send_wrs"], 1.025);
        assert_eq!(v["work_per_msg"]["recv_wrs"], 0.64);
        assert_eq!(v["work_per_msg"]["recv_doorbells"], 0.005);
        assert_eq!(v["work_per_msg"]["completions"], 0.65);
    }
}
