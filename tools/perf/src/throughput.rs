//! `mdbus-perf throughput`: one sending process, one receiving process, one
//! channel: a stream on `shm` and `udp`, a session on `tcp` and `verbs`
//! (an RC queue pair whose sends ask for a completion every
//! `--signal-every`th only).
//!
//! The sender writes `-n` messages of `--size` bytes (a counter in the
//! first 8, fewer in a smaller message) as fast as it can, or at `--rate`,
//! or sends for `-D` seconds and ends a stream with an end mark, then
//! closes the channel. The receiver busy-polls, counts what arrives, and
//! times from its first message to its last. With -a, one measurement per
//! size, each with a sender of its own.
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

use mdbus_tool_support::percentiles::{nanos, per_sec, Span};

use crate::common::{bounded_capacity, cores_line, interrupted, watchdog, Common, Failure, Load};
pub use crate::flow::Role;
use crate::flow::{
    counter, counter_of, drain_stream, due_ns, pace, serve, start_publishing, time_is_up,
    write_counter, write_end, Drained,
};
use crate::peer::{self, wait_for_go, Peer};
use crate::report::{self, Bandwidth, WorkFields};
use crate::side;

/// Payload bytes without -s.
const DEFAULT_SIZE: u64 = 64;
/// Most bytes of messages a ring or window holds without --capacity.
const RING_BUDGET: u64 = 64 << 20;

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

    /// Sizes and messages: -s, -n (--count), -a, -D.
    #[command(flatten)]
    pub load: Load,

    /// Report bandwidth in Gb/s (10^9 bits per second) instead of MB/s,
    /// as perftest's --report_gbits.
    #[arg(long = "report_gbits", visible_alias = "report-gbits")]
    pub report_gbits: bool,

    /// Send at most this many messages per second; 0 sends as fast as
    /// possible. A stream subscriber slower than its publisher loses
    /// messages once it is more than --capacity behind (on udp: once the
    /// socket's receive buffer overflows and the missing messages cannot
    /// be fetched again in time).
    #[arg(long, default_value_t = 0, value_name = "MSGS_PER_SEC")]
    pub rate: u64,

    /// Messages the stream retains (a power of two): how far a shm
    /// subscriber may fall behind before it loses messages, and the udp
    /// publisher's window for retransmission. A shm run with -n at most
    /// this large cannot lose any. On tcp and verbs: messages in
    /// flight before the sender waits (on verbs, the receive buffers
    /// posted and the send queue's depth, which the device bounds).
    /// Default: 65536; 4096 on verbs; fewer when that many messages of
    /// --size would take more than 64 MiB.
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

    /// shm: the subscriber asks the publisher to wait for it (the
    /// stream's `lossless = true`), so nothing is lost and the rate is the
    /// one the subscriber keeps up with. A subscriber that stays --timeout
    /// behind is released and loses messages like a lossy one.
    #[arg(long)]
    pub lossless: bool,

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

    /// The capacity at `size`: --capacity, else the transport's default
    /// bounded for large messages.
    fn capacity(&self, size: u64) -> usize {
        self.capacity.unwrap_or_else(|| {
            let default = match self.common.transport {
                TransportKind::Verbs => 4096,
                _ => 65536,
            };
            bounded_capacity(default, size, RING_BUDGET)
        })
    }

    /// Messages without -n.
    fn default_count(&self) -> u64 {
        match self.common.transport {
            TransportKind::Shm => 10_000_000,
            _ => 1_000_000,
        }
    }

    /// Messages to send; `None` with -D.
    fn count(&self) -> Option<u64> {
        self.load.count(self.default_count())
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

/// What holds for the whole run, in its JSON object.
#[derive(Debug, Serialize)]
struct Head {
    transport: &'static str,
    channel: Channel,
    /// `pub` when only the sender ran here.
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
}

/// What the receiver measured at one size.
#[derive(Debug, Serialize)]
struct Report {
    size_bytes: u64,
    sent: u64,
    received: u64,
    lost: u64,
    /// Messages that were missing and arrived by retransmission (udp).
    recovered: u64,
    before_join: u64,
    /// From the first message received to the last.
    seconds: f64,
    msgs_per_sec: f64,
    #[serde(flatten)]
    bandwidth: Bandwidth,
    /// Verbs sessions: the receiving end's work over the messages it
    /// received.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    work: Option<WorkFields>,
}

/// What a sender run alone measured at one size.
#[derive(Debug, Serialize)]
struct PublisherReport {
    size_bytes: u64,
    sent: u64,
    seconds: f64,
    msgs_per_sec: f64,
    #[serde(flatten)]
    bandwidth: Bandwidth,
    /// Verbs sessions: the sending end's work over the messages it sent.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    work: Option<WorkFields>,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<u8, Failure> {
    let mut args = args.clone();
    crate::transport::resolve(&mut args.common, TransportKind::Shm)?;
    if args.lossless && args.common.transport != TransportKind::Shm {
        return Err(Failure::Usage(format!(
            "--lossless is a shared-memory stream's mode; transport {} has none",
            args.common.transport.name()
        )));
    }
    crate::transport::ready(&args.common, args.role != Some(Role::Pub))?;
    let (has_role, second) = (args.role.is_some(), args.role == Some(Role::Pub));
    let (name, core, peer_core) = side::setup(&mut args.common, has_role, second)?;
    let sizes = args.load.sizes(DEFAULT_SIZE);
    let sweep = args.load.all;
    let head = Head {
        transport: args.common.transport.name(),
        channel: args.channel(),
        role: (args.role == Some(Role::Pub)).then_some("pub"),
    };
    if args.role == Some(Role::Pub) {
        let mut sent = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let name = side::size_channel(&mut args.common, &name, size, i, sweep, has_role)?;
            let bus = bus(&args, &name, size)?;
            let (count, ns, work) = match args.channel() {
                Channel::Stream => {
                    let (count, ns) = publish(&args, &bus, &name, size)?;
                    (count, ns, None)
                }
                Channel::Session => send(&args, &bus, &name, size)?,
            };
            let rate = per_sec(count, ns);
            sent.push(PublisherReport {
                size_bytes: size,
                sent: count,
                seconds: ns as f64 / 1e9,
                msgs_per_sec: rate.round(),
                bandwidth: Bandwidth::of(rate, size, args.report_gbits),
                work,
            });
        }
        if args.common.json && !args.common.spawned {
            report::print("throughput", &head, &sent, sweep);
        } else if !args.common.spawned {
            for r in &sent {
                println!(
                    "mdbus-perf throughput (pub): {} messages of {} bytes on `{name}`, {:.0} msgs/s, {:.2} {}",
                    r.sent,
                    r.size_bytes,
                    r.msgs_per_sec,
                    r.bandwidth.value(),
                    Bandwidth::heading(args.report_gbits)
                );
            }
        }
        return Ok(0);
    }
    let mut reports = Vec::new();
    let mut heading = None;
    let mut code = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let name = side::size_channel(&mut args.common, &name, size, i, sweep, has_role)?;
        let bus = bus(&args, &name, size)?;
        let args = &args;
        let report = if has_role {
            receive(args, &bus, &name, size, None)?
        } else {
            let mut own = args.load.peer_args(size, args.default_count());
            own.extend([
                "--rate".into(),
                args.rate.to_string(),
                "--capacity".into(),
                args.capacity(size).to_string(),
                "--batch".into(),
                args.batch.to_string(),
            ]);
            if args.lossless {
                own.push("--lossless".into());
            }
            let publisher = peer::spawn(
                None,
                "throughput",
                "pub",
                &own,
                &args.common,
                &name,
                peer_core,
            )?;
            peer::measure(publisher, |p| receive(args, &bus, &name, size, Some(p)))?
        };
        heading.get_or_insert_with(|| {
            self::heading(
                args,
                &bus,
                &name,
                size,
                core,
                (!has_role).then_some(peer_core),
            )
        });
        code = code.max(report.exit_code(args.allow_loss));
        reports.push(report);
    }
    if args.common.json {
        report::print("throughput", &head, &reports, sweep);
    } else {
        print_table(&args, heading.as_deref().unwrap_or_default(), &reports);
    }
    Ok(code)
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

/// The bus, with the channel sized (and, on the IP transport, placed) for
/// this run.
fn bus(args: &Args, name: &str, size: u64) -> Result<Bus, Failure> {
    let mut placed = Ok(());
    let bus = crate::transport::bus(&args.common, |cfg| match args.channel() {
        Channel::Stream => {
            let mut stream = StreamConfig {
                max_message: size as usize,
                capacity: args.capacity(size),
                // Started on its own, the subscriber may attach after the
                // publisher's first messages.
                late_join: LateJoin::Oldest,
                autoflush: args.batch == 1,
                lossless: args.lossless,
                lossless_timeout: args.common.timeout(),
                ..cfg.stream(name)
            };
            placed = crate::ip::stream(&args.common, &mut stream, 0);
            cfg.streams.insert(name.into(), stream);
        }
        Channel::Session => {
            let mut session = SessionConfig {
                max_message: size as usize,
                capacity: args.capacity(size),
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

/// Publishes `-n` messages on the stream, or for `-D` followed by an end
/// mark; returns how many and the nanoseconds it took. On UDP it then
/// answers retransmit requests until the subscriber is done.
fn publish(args: &Args, bus: &Bus, name: &str, size: u64) -> Result<(u64, u64), Failure> {
    let mut publisher = bus.publisher(name)?;
    let datagram = args.datagram();
    let done = start_publishing(&args.common, name)?;
    let last = args.count().unwrap_or(u64::MAX / 2);
    let mut payload = vec![0x5au8; size as usize];
    let mut sent = 0;
    let t0 = Instant::now();
    let flat = args.common.transport == TransportKind::Shm
        && args.rate == 0
        && args.load.duration.is_none();
    if flat {
        sent = publish_flat(&mut publisher, last, size as usize)?;
    }
    // After a flat run `sent` is `last`: nothing left for this loop.
    for i in sent + 1..=last {
        if time_is_up(args.load.duration, args.rate > 0, t0, i) {
            break;
        }
        if args.rate > 0 {
            pace(t0, due_ns(i, args.rate), || {
                if datagram {
                    publisher.service()?;
                }
                Ok(())
            })?;
        }
        write_counter(&mut payload, i);
        publisher.publish(&payload)?;
        sent = i;
        if args.batch > 1 && i % args.batch == 0 {
            publisher.flush()?;
        }
        if datagram && i % SERVICE_EVERY == 0 {
            publisher.service()?;
        }
    }
    let ns = nanos(t0.elapsed());
    if let Some(c) = publisher.lossless_counters().filter(|_| args.lossless) {
        log::info!("publisher's lossless counters: {c:?}");
        if c.evicted > 0 {
            eprintln!(
                "mdbus-perf (pub): released {} lossless subscriber(s) that stayed behind for --timeout",
                c.evicted
            );
        }
    }
    if args.load.duration.is_some() {
        // The subscriber stops here: it could not know the count.
        write_end(&mut payload);
        publisher.publish(&payload)?;
    }
    publisher.flush()?;
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
    Ok((sent, ns))
}

/// Publishes messages 1..=`last` of `len` bytes on a shared-memory stream
/// as fast as it can, with the throughput bench's per-message work: each
/// message is written in its slot (counter, then fill), not copied there
/// from a prepared buffer. A function of its own so that `claim` and
/// `commit` inline into the loop, as they do in the bench; inside `run`
/// they stayed calls and, with the copy's `memcpy` and the counter's
/// variable-length copy, cost about 40 % more instructions a message than
/// the bench's loop (docs/PERFORMANCE.md).
#[inline(never)]
fn publish_flat(publisher: &mut mdbus::Publisher, last: u64, len: usize) -> Result<u64, Failure> {
    for i in 1..=last {
        let mut claim = publisher.claim(len)?;
        if len >= 8 {
            claim[..8].copy_from_slice(&i.to_le_bytes());
            claim[8..].fill(0x5a);
        } else {
            write_counter(&mut claim, i);
        }
        claim.commit()?;
    }
    Ok(last)
}

/// Sends `-n` messages on the session, or for `-D`; returns how many,
/// the nanoseconds it took and (verbs) the session's work.
fn send(
    args: &Args,
    bus: &Bus,
    name: &str,
    size: u64,
) -> Result<(u64, u64, Option<WorkFields>), Failure> {
    let mut session = bus
        .session_connect(name)
        .map_err(|e| args.common.peer_wait(e))?;
    if args.common.spawned {
        wait_for_go()?;
    } else {
        eprintln!("mdbus-perf (pub): sending on `{name}`");
    }
    let last = args.count().unwrap_or(u64::MAX / 2);
    let mut payload = vec![0x5au8; size as usize];
    let mut sent = 0;
    let t0 = Instant::now();
    for i in 1..=last {
        if time_is_up(args.load.duration, args.rate > 0, t0, i) {
            break;
        }
        if args.rate > 0 {
            pace(t0, due_ns(i, args.rate), || Ok(()))?;
        }
        write_counter(&mut payload, i);
        // Waits while the receiver has no room; fails if it goes away.
        session.send(&payload)?;
        sent = i;
    }
    let ns = nanos(t0.elapsed());
    // Closing sends what is left and tells the receiver this is the end.
    let work = WorkFields::of(session.close_counted(), sent);
    Ok((sent, ns, work))
}

fn receive(
    args: &Args,
    bus: &Bus,
    name: &str,
    size: u64,
    peer: Option<&mut Peer>,
) -> Result<Report, Failure> {
    match args.channel() {
        Channel::Stream => subscribe(args, bus, name, size, peer),
        Channel::Session => receive_session(args, bus, name, size, peer),
    }
}

fn subscribe(
    args: &Args,
    bus: &Bus,
    name: &str,
    size: u64,
    mut peer: Option<&mut Peer>,
) -> Result<Report, Failure> {
    // Attaching waits (on shm) for the publisher to create the stream.
    let mut subscriber = bus.subscriber(name).map_err(|e| args.common.peer_wait(e))?;
    match peer.as_deref_mut() {
        Some(peer) => peer.go()?,
        None => eprintln!("mdbus-perf (sub): attached to `{name}`"),
    }
    // On UDP the publisher stays until told the subscriber is done, so the
    // run ends at message `count` (delivered or reported lost), or at the
    // end mark of a timed run; on shared memory, at the end of the stream
    // (or the end mark).
    let datagram = args.datagram();
    let count = args.count();
    let Drained { end, end_mark, ns } = drain_stream(
        &mut subscriber,
        peer.as_deref_mut(),
        &args.common,
        name,
        if datagram { count } else { None },
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
    let stats = subscriber.stats();
    let recovered = match subscriber.recovery_counters() {
        Some(counters) => {
            log::info!("subscriber's recovery counters: {counters:?}");
            counters.recovered
        }
        None => 0,
    };
    let received = stats.received.saturating_sub(u64::from(end_mark));
    let lost = stats.overrun_messages + stats.gap_messages;
    let sent = end.or(count).unwrap_or(received + lost);
    let rate = per_sec(received, ns);
    Ok(Report {
        size_bytes: size,
        sent,
        received,
        lost,
        recovered,
        before_join: sent.saturating_sub(received + lost),
        seconds: ns as f64 / 1e9,
        msgs_per_sec: rate.round(),
        bandwidth: Bandwidth::of(rate, size, args.report_gbits),
        work: None,
    })
}

fn receive_session(
    args: &Args,
    bus: &Bus,
    name: &str,
    size: u64,
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
    let len = size as usize;
    let mut n = 0u64;
    let mut out_of_order = 0u64;
    let mut span = Span::default();
    {
        let mut dog = watchdog(peer.as_deref_mut(), &args.common, "waiting for messages");
        loop {
            match session.poll(|m| {
                n += 1;
                out_of_order += u64::from(counter(m.payload()) != counter_of(len, n));
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
    // A session delivers everything in order (checked above), so what
    // arrived is what was sent.
    let received = session.stats().received;
    let work = WorkFields::of(session.close_counted(), received);
    let rate = per_sec(received, span.ns());
    Ok(Report {
        size_bytes: size,
        sent: n,
        received,
        lost: n.saturating_sub(received),
        recovered: 0,
        before_join: 0,
        seconds: span.ns() as f64 / 1e9,
        msgs_per_sec: rate.round(),
        bandwidth: Bandwidth::of(rate, size, args.report_gbits),
        work,
    })
}

/// The lines above the table: transport, channel, cores, settings.
fn heading(
    args: &Args,
    bus: &Bus,
    name: &str,
    size: u64,
    core: usize,
    peer_core: Option<usize>,
) -> String {
    let (recv, send) = match args.channel() {
        Channel::Stream => ("subscriber", "publisher"),
        Channel::Session => ("receiver", "sender"),
    };
    let cores = cores_line((recv, core), (send, peer_core));
    let channel = match (args.channel(), args.common.transport) {
        (Channel::Stream, TransportKind::Udp) => format!(
            "stream `{name}`, {}",
            crate::ip::describe_stream(&bus.config().stream(name))
        ),
        (Channel::Stream, _) => format!("stream `{name}`"),
        (Channel::Session, _) => {
            format!("session `{name}` at {}", bus.config().session(name).address)
        }
    };
    let mut text = format!(
        "mdbus-perf throughput: transport {}, {channel}, {cores}\n",
        args.common.transport.name()
    );
    let rate = if args.rate == 0 {
        "as fast as possible".to_string()
    } else {
        format!("at most {} msgs/s", args.rate)
    };
    let how_long = match args.load.duration {
        Some(d) => format!("for {d:?}"),
        None => format!("{} messages", args.count().unwrap_or(0)),
    };
    let batch = if args.datagram() && args.batch > 1 {
        format!(", flush every {} messages", args.batch)
    } else {
        String::new()
    };
    let capacity = if args.load.all {
        format!("capacity {} at {size} bytes", args.capacity(size))
    } else {
        format!("capacity {}", args.capacity(size))
    };
    let lossless = if args.lossless { ", lossless" } else { "" };
    text += &format!(
        "{send} {how_long} {rate}, {capacity}{batch}{lossless}, wait {}",
        args.common.wait
    );
    if args.common.transport == TransportKind::Verbs {
        text += &format!("\n{}", crate::verbs::describe(&bus.config().verbs));
        if args.channel() == Channel::Session {
            text += &format!(
                ", session mode {}",
                bus.config().session(name).mode.as_str()
            );
        }
    }
    text
}

fn print_table(args: &Args, heading: &str, reports: &[Report]) {
    println!("{heading}");
    println!();
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14} {:>10}",
        "#bytes",
        "sent",
        "received",
        "lost",
        "recovered",
        "before join",
        "msgs/s",
        Bandwidth::heading(args.report_gbits)
    );
    for r in reports {
        println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14.0} {:>10.2}",
            r.size_bytes,
            r.sent,
            r.received,
            r.lost,
            r.recovered,
            r.before_join,
            r.msgs_per_sec,
            r.bandwidth.value()
        );
    }
}
