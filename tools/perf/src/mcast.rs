//! `mdbus-perf mcast`: a multicast stream with loss recovery, publisher in
//! one process, subscriber in another, one-way latency per message.
//!
//! The publisher stamps every message with its send time
//! (`timestamps = true`); the subscriber records `clock::now_ns()` minus
//! that stamp into an [`mdbus::metrics::Latency`] histogram. Both read
//! `CLOCK_REALTIME` on one host (across hosts, the clocks must be
//! synchronised, with PTP, for the figures to mean anything).
//!
//! The publisher paces itself (`--rate`), answers retransmit requests and
//! sends heartbeats whenever it waits, and after its last message goes on
//! answering until the subscriber has accounted for every message (or for
//! `--linger` seconds when run on its own). The subscriber reports what it
//! received, what arrived only by retransmission (`recovered`), and what
//! stayed missing (`lost`, reported to it as gaps); `sent = received +
//! lost` when it joined before the first message.
//!
//! With `--loss PCT` the run crosses a lossy network: two network
//! namespaces on a bridge (see [`crate::netns`]), the publisher started in
//! one through `ip netns exec`, this process (the subscriber) moved into
//! the other.

use std::time::{Duration, Instant};

use mdbus::config::{LateJoin, StreamConfig};
use mdbus::metrics::Latency;
use mdbus::{Bus, TransportKind};
use serde::Serialize;

use mdbus_tool_support::output::LatencyNs;
use mdbus_tool_support::percentiles::{nanos, per_sec};

use crate::common::{cores_line, Common, Failure, Load};
use crate::flow::{
    drain_stream, due_ns, pace, serve, start_publishing, time_is_up, write_counter, write_end,
    Drained,
};
use crate::netns::{LossBy, Topology};
use crate::peer::{self, Peer};
use crate::report::{self, Bandwidth, LatencyRow};
use crate::side;

/// Payload bytes without -s.
const DEFAULT_SIZE: u64 = 64;
/// Messages without -n.
const DEFAULT_COUNT: u64 = 100_000;

/// Messages between two calls of the publisher's `service` when it
/// publishes flat out (`--rate 0`).
const SERVICE_EVERY: u64 = 256;
/// Largest one-way latency recorded as itself; larger ones are clamped.
const LATENCY_MAX_NS: u64 = 60_000_000_000;

/// Options of `mdbus-perf mcast`.
#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("transport", |a| a
    .help("Multicast transport: udp (UDP multicast with loss recovery; the default), verbs \
           (RDMA UD multicast with loss recovery: the publisher on --device or --interface, \
           the subscriber on --recv-device or --recv-interface; the default when -d or -x is \
           given) or auto (verbs when an RDMA device has an active port, else udp)")))]
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

    /// Messages per second the publisher sends, evenly spaced; 0 sends as
    /// fast as possible (then latency measures queueing, and the
    /// subscriber's socket may overflow).
    #[arg(long, default_value_t = 100_000, value_name = "MSGS_PER_SEC")]
    pub rate: u64,

    /// Messages the publisher retains for retransmission (a power of two;
    /// about a quarter of them when every message is --size bytes: the
    /// window is also bounded in bytes).
    #[arg(long, default_value_t = 65536)]
    pub capacity: usize,

    /// Run across a network that loses this percentage (0 < PCT < 100) of
    /// what the subscriber's host receives: two network namespaces on a
    /// bridge, loss injected by `tc netem` (or, where the kernel has no
    /// netem, by an nftables rule: `nft`, Debian package nftables). Needs
    /// root; the namespaces are removed afterwards, also on Ctrl-C.
    #[arg(long, value_name = "PCT", value_parser = parse_loss)]
    pub loss: Option<f64>,

    /// With --role pub: seconds to go on answering retransmit requests
    /// after the last message before closing the stream. (Started by the
    /// subscriber, the publisher answers until the subscriber is done.)
    #[arg(long, default_value_t = 1, value_name = "SECS")]
    pub linger: u64,

    /// Run one side only: `pub` publishes; `sub` receives and prints the
    /// result. Start `sub` first. Without --role this process subscribes
    /// and starts the publisher itself.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

fn parse_loss(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p < 100.0 => Ok(p),
        _ => Err("expected a percentage above 0 and below 100, such as 5 or 0.5".into()),
    }
}

/// The two sides.
/// Which side a process plays: the same two as for throughput.
pub use crate::flow::Role;

impl Args {
    /// The side this process plays when --role names one.
    pub fn role_name(&self) -> Option<&'static str> {
        self.role.map(Role::name)
    }
}

/// What holds for the whole run, in its JSON object.
#[derive(Debug, Serialize)]
struct Head {
    transport: &'static str,
    /// The publisher's pace (--rate); 0: as fast as it can.
    target_msgs_per_sec: u64,
    /// `pub` when only the publisher ran here.
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
}

/// What the subscriber measured at one size.
#[derive(Debug, Serialize)]
struct Report {
    size_bytes: u64,
    sent: u64,
    received: u64,
    /// Messages reported lost (unrecoverable gaps).
    lost: u64,
    /// Messages that were missing and arrived by retransmission.
    recovered: u64,
    /// From the first message received to the last.
    seconds: f64,
    msgs_per_sec: f64,
    #[serde(flatten)]
    bandwidth: Bandwidth,
    latency_ns: LatencyNs,
    /// The injected loss, with --loss.
    loss: Option<LossReport>,
}

/// What a publisher run alone did at one size.
#[derive(Debug, Serialize)]
struct Published {
    size_bytes: u64,
    sent: u64,
    seconds: f64,
    msgs_per_sec: f64,
}

#[derive(Debug, Serialize)]
struct LossReport {
    pct: f64,
    by: LossBy,
    /// Packets the impairment dropped.
    dropped: u64,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<u8, Failure> {
    let mut args = args.clone();
    crate::transport::resolve(&mut args.common, TransportKind::Udp)?;
    // Refuses the transports this build cannot run (verbs among them)
    // before saying which ones mcast takes.
    crate::transport::ready(&args.common, false)?;
    if !matches!(
        args.common.transport,
        TransportKind::Udp | TransportKind::Verbs
    ) {
        return Err(Failure::Usage(format!(
            "mcast measures a multicast stream: --transport udp or verbs, not {}",
            args.common.transport.name()
        )));
    }
    if args.loss.is_some() && args.load.all {
        return Err(Failure::Usage(
            "--loss measures one message size: leave out -a".into(),
        ));
    }
    let (has_role, second) = (args.role.is_some(), args.role == Some(Role::Pub));
    let (name, core, peer_core) = side::setup(&mut args.common, has_role, second)?;
    let sizes = args.load.sizes(DEFAULT_SIZE);
    let sweep = args.load.all;
    let head = Head {
        transport: args.common.transport.name(),
        target_msgs_per_sec: args.rate,
        role: (args.role == Some(Role::Pub)).then_some("pub"),
    };
    if args.role == Some(Role::Pub) {
        let mut published = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let name = side::size_channel(&mut args.common, &name, size, i, sweep, true)?;
            let bus = bus(&args, &name, size)?;
            published.push(publish(&args, &bus, &name, size)?);
        }
        if args.common.json && !args.common.spawned {
            report::print("mcast", &head, &published, sweep);
        }
        return Ok(0);
    }
    // With --loss: the hosts exist (and are removed) around the whole
    // run; the publisher's in host 0, this process in host 1.
    let mut topology = None;
    let mut peer_common = args.common.clone();
    if let (Some(pct), None) = (args.loss, args.role) {
        if args.common.transport != TransportKind::Udp {
            return Err(Failure::Usage(
                "--loss runs UDP through network namespaces: --transport udp".into(),
            ));
        }
        if args.common.interface.is_some() {
            return Err(Failure::Usage(
                "--loss chooses the interfaces itself; leave out --interface".into(),
            ));
        }
        crate::netns::check_available()?;
        crate::common::catch_interrupts()?;
        let mut t = Topology::create()?;
        let by = t.impair(pct)?;
        t.enter(1)?;
        args.common.interface = Some(t.addr(1));
        peer_common.interface = Some(t.addr(0));
        topology = Some((t, pct, by));
    }
    let mut reports = Vec::new();
    let mut heading = None;
    let mut code = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let name = side::size_channel(&mut args.common, &name, size, i, sweep, has_role)?;
        let bus = bus(&args, &name, size)?;
        let report = if has_role {
            subscribe(&args, &bus, &name, size, None, None)?
        } else {
            let mut own = args.load.peer_args(size, DEFAULT_COUNT);
            own.extend([
                "--rate".into(),
                args.rate.to_string(),
                "--capacity".into(),
                args.capacity.to_string(),
            ]);
            peer_common.default_port = args.common.default_port;
            let netns = topology.as_ref().map(|(t, ..)| t.host(0));
            let publisher = peer::spawn(
                netns.as_deref(),
                "mcast",
                "pub",
                &own,
                &peer_common,
                &name,
                peer_core,
            )?;
            let impairment = topology.as_ref().map(|(t, pct, by)| (t, *pct, *by));
            peer::measure(publisher, |p| {
                subscribe(&args, &bus, &name, size, Some(p), impairment)
            })?
        };
        heading.get_or_insert_with(|| {
            self::heading(&args, &bus, &name, core, (!has_role).then_some(peer_core))
        });
        code = code.max(report.exit_code(args.allow_loss));
        reports.push(report);
    }
    if args.common.json {
        report::print("mcast", &head, &reports, sweep);
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
            "unrecoverable gaps, overruns",
            allow_loss,
        )
    }
}

/// The bus, with the stream sized, stamped and placed for this run.
fn bus(args: &Args, name: &str, size: u64) -> Result<Bus, Failure> {
    let mut placed = Ok(());
    let bus = crate::transport::bus(&args.common, |cfg| {
        let mut stream = StreamConfig {
            max_message: size as usize,
            capacity: args.capacity,
            timestamps: true,
            // Started on its own, the subscriber may join after the
            // publisher's first messages.
            late_join: LateJoin::Oldest,
            ..cfg.stream(name)
        };
        placed = crate::ip::stream(&args.common, &mut stream, 0);
        if placed.is_ok() && args.common.transport == TransportKind::Verbs {
            let publisher = args.role == Some(Role::Pub);
            placed =
                crate::verbs::stream_interface(&args.common, &cfg.verbs, &mut stream, publisher);
            // The subscriber's device is the one its address is on.
            if let (false, Some(dev)) = (publisher, &args.common.recv_device) {
                cfg.verbs.device = dev.clone();
            }
        }
        cfg.streams.insert(name.into(), stream);
    });
    placed?;
    bus
}

/// Publishes `-n` stamped messages at `--rate` (or for `-D`, then an end
/// mark), then answers retransmit requests until the subscriber is done.
fn publish(args: &Args, bus: &Bus, name: &str, size: u64) -> Result<Published, Failure> {
    let mut publisher = bus.publisher(name)?;
    let done = start_publishing(&args.common, name)?;
    let size = size as usize;
    let last = args.load.count(DEFAULT_COUNT).unwrap_or(u64::MAX / 2);
    let mut sent = 0;
    let t0 = Instant::now();
    for i in 1..=last {
        if time_is_up(args.load.duration, args.rate > 0, t0, i) {
            break;
        }
        if args.rate > 0 {
            pace(t0, due_ns(i, args.rate), || Ok(publisher.service()?))?;
        } else if i % SERVICE_EVERY == 0 {
            publisher.service()?;
        }
        let mut claim = publisher.claim(size)?;
        claim.fill(0x5a);
        write_counter(&mut claim, i);
        // Stamped with the send time here (timestamps = true).
        claim.commit()?;
        sent = i;
    }
    let ns = nanos(t0.elapsed());
    if args.load.duration.is_some() {
        // The subscriber stops here: it could not know the count.
        let mut claim = publisher.claim(size)?;
        write_end(&mut claim);
        claim.commit()?;
    }
    publisher.flush()?;
    serve(
        &mut publisher,
        done.as_ref(),
        &args.common,
        Duration::from_secs(args.linger),
    )?;
    if !args.common.spawned {
        eprintln!("mdbus-perf (pub): published {sent} messages, closing `{name}`");
    }
    // Dropping the publisher closes the stream.
    let rate = per_sec(sent, ns);
    Ok(Published {
        size_bytes: size as u64,
        sent,
        seconds: ns as f64 / 1e9,
        msgs_per_sec: rate.round(),
    })
}

fn subscribe(
    args: &Args,
    bus: &Bus,
    name: &str,
    size: u64,
    mut peer: Option<&mut Peer>,
    network: Option<(&Topology, f64, LossBy)>,
) -> Result<Report, Failure> {
    let mut subscriber = bus.subscriber(name).map_err(|e| args.common.peer_wait(e))?;
    match peer.as_deref_mut() {
        Some(peer) => peer.go()?,
        None => eprintln!("mdbus-perf (sub): joined `{name}`"),
    }
    let count = args.load.count(DEFAULT_COUNT);
    let mut latency = Latency::new(LATENCY_MAX_NS);
    let Drained { end, end_mark, ns } = drain_stream(
        &mut subscriber,
        peer.as_deref_mut(),
        &args.common,
        name,
        count,
        |last_seq| {
            format!("the publisher went silent after message {last_seq} (heartbeat timeout)")
        },
        |m| {
            if let Some(sent) = m.timestamp() {
                latency.record(mdbus::clock::now_ns().saturating_sub(sent));
            }
        },
    )?;
    if let Some(peer) = peer {
        peer.done()?;
    }
    let stats = subscriber.stats();
    let counters = subscriber.recovery_counters().unwrap_or_default();
    log::info!("subscriber's recovery counters: {counters:?}");
    let recovered = counters.recovered;
    let loss = match network {
        Some((t, pct, by)) => Some(LossReport {
            pct,
            by,
            dropped: t.dropped()?,
        }),
        None => None,
    };
    let received = stats.received.saturating_sub(u64::from(end_mark));
    let lost = stats.gap_messages + stats.overrun_messages;
    let rate = per_sec(received, ns);
    Ok(Report {
        size_bytes: size,
        sent: end.or(count).unwrap_or(received + lost),
        received,
        lost,
        recovered,
        seconds: ns as f64 / 1e9,
        msgs_per_sec: rate.round(),
        bandwidth: Bandwidth::of(rate, size, args.report_gbits),
        latency_ns: LatencyNs::of(latency.histogram()),
        loss,
    })
}

/// The lines above the table: transport, stream, cores, pace.
fn heading(args: &Args, bus: &Bus, name: &str, core: usize, peer_core: Option<usize>) -> String {
    let cores = cores_line(("subscriber", core), ("publisher", peer_core));
    let mut text = format!(
        "mdbus-perf mcast: transport {}, stream `{name}`, {}, {cores}\n",
        args.common.transport.name(),
        crate::ip::describe_stream(&bus.config().stream(name)),
    );
    let rate = if args.rate == 0 {
        "as fast as possible".to_string()
    } else {
        format!("{} msgs/s", args.rate)
    };
    let how_long = match args.load.duration {
        Some(d) => format!("for {d:?}"),
        None => format!("{} messages", args.load.count(DEFAULT_COUNT).unwrap_or(0)),
    };
    text += &format!(
        "publisher {how_long} at {rate}, retains {} messages, wait {}",
        args.capacity, args.common.wait
    );
    text
}

fn print_table(args: &Args, heading: &str, reports: &[Report]) {
    println!("{heading}");
    for loss in reports.iter().filter_map(|r| r.loss.as_ref()).take(1) {
        println!(
            "network: two namespaces on a bridge, {}% of what the subscriber's host receives dropped by {} ({} packets)",
            loss.pct,
            loss.by.name(),
            loss.dropped
        );
    }
    println!();
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>12} {:>14} {:>10}",
        "#bytes",
        "sent",
        "received",
        "lost",
        "recovered",
        "msgs/s",
        Bandwidth::heading(args.report_gbits)
    );
    for r in reports {
        println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12} {:>14.0} {:>10.2}",
            r.size_bytes,
            r.sent,
            r.received,
            r.lost,
            r.recovered,
            r.msgs_per_sec,
            r.bandwidth.value()
        );
    }
    println!();
    let rows: Vec<LatencyRow<'_>> = reports
        .iter()
        .map(|r| LatencyRow {
            what: "one-way",
            size: r.size_bytes,
            latency: &r.latency_ns,
        })
        .collect();
    report::print_latency_table(&rows);
    println!();
    println!(
        "one-way: the subscriber's clock at delivery minus the send time each message carries"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_a_percentage_strictly_between_0_and_100() {
        assert_eq!(parse_loss("5"), Ok(5.0));
        assert_eq!(parse_loss("0.5%"), Ok(0.5));
        for bad in ["0", "100", "-1", "x"] {
            assert!(parse_loss(bad).is_err(), "{bad}");
        }
    }
}
