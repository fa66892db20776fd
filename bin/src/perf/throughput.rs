//! `mdbus-perf throughput`: one publisher process, one subscriber process,
//! one stream.
//!
//! The publisher writes `--count` messages of `--size` bytes (a counter in
//! the first 8) as fast as it can, or at `--rate`, then closes the stream.
//! The subscriber busy-polls, counts what arrives, and times from its first
//! message to its last. A stream never waits for its subscribers: messages
//! the subscriber was too slow for are overwritten, and the stream reports
//! them to it as overruns; their count is `lost`. A subscriber started on
//! its own (`--role sub`) after the publisher also misses what was
//! published before it attached: `before_join`. So
//! `sent = received + lost + before_join`.

use std::time::Instant;

use mdbus::config::{LateJoin, StreamConfig};
use mdbus::{Bus, Event};
use serde::Serialize;

use crate::common::{pin, Common, Failure, Watchdog};
use crate::peer::{die_with_parent, wait_for_go, Peer};
use crate::report::{nanos, per_sec, print_json};

/// Options of `mdbus-perf throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: Common,

    /// Payload bytes per message, at least 8 (the message counter).
    #[arg(long, default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(8..=mdbus::config::MAX_MESSAGE_LIMIT as u64))]
    pub size: u64,

    /// Messages to publish.
    #[arg(long, default_value_t = 10_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,

    /// Publish at most this many messages per second; 0 publishes as fast
    /// as possible. A subscriber slower than the publisher loses messages
    /// once it is more than --capacity behind.
    #[arg(long, default_value_t = 0, value_name = "MSGS_PER_SEC")]
    pub rate: u64,

    /// Messages the stream retains (a power of two): how far the
    /// subscriber may fall behind before it loses messages. A run with
    /// --count at most this large cannot lose any.
    #[arg(long, default_value_t = 65536)]
    pub capacity: usize,

    /// Run one side only: `pub` publishes; `sub` receives and prints the
    /// result. Start `sub` first: it waits up to --timeout for the
    /// publisher and reads from the oldest message the stream still holds.
    /// Without --role this process subscribes and starts the publisher
    /// itself once it is attached.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

/// The two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Publishes.
    #[value(name = "pub")]
    Pub,
    /// Subscribes, counts and prints.
    #[value(name = "sub")]
    Sub,
}

impl Args {
    /// The side this process plays when --role names one.
    pub fn role_name(&self) -> Option<&'static str> {
        self.role.map(|r| match r {
            Role::Pub => "pub",
            Role::Sub => "sub",
        })
    }
}

/// What the subscriber prints.
#[derive(Debug, Serialize)]
struct Report {
    transport: &'static str,
    size: u64,
    sent: u64,
    received: u64,
    lost: u64,
    before_join: u64,
    msgs_per_sec: f64,
    mb_per_sec: f64,
}

/// What a publisher run alone prints.
#[derive(Debug, Serialize)]
struct PublisherReport {
    transport: &'static str,
    size: u64,
    sent: u64,
    msgs_per_sec: f64,
    mb_per_sec: f64,
}

/// Runs the command.
pub fn run(args: &Args) -> Result<(), Failure> {
    crate::transport::check(args.common.transport)?;
    let name = args.common.channel_name(args.role.is_some())?;
    let (core, peer_core) = args.common.cores_for(args.role == Some(Role::Pub))?;
    pin(core)?;
    if args.common.spawned {
        die_with_parent()?;
    }
    let bus = bus(args, &name)?;
    match args.role {
        Some(Role::Pub) => {
            let (sent, ns) = publish(args, &bus, &name)?;
            if !args.common.spawned {
                let rate = per_sec(sent, ns);
                let report = PublisherReport {
                    transport: args.common.transport.name(),
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
            Ok(())
        }
        Some(Role::Sub) => {
            let report = subscribe(args, &bus, &name, None)?;
            print(args, &report, &name, core, None);
            Ok(())
        }
        None => {
            let own = [
                "--size".to_string(),
                args.size.to_string(),
                "--count".into(),
                args.count.to_string(),
                "--rate".into(),
                args.rate.to_string(),
                "--capacity".into(),
                args.capacity.to_string(),
            ];
            let mut peer = Peer::spawn("throughput", "pub", &own, &args.common, &name, peer_core)?;
            let report =
                subscribe(args, &bus, &name, Some(&mut peer)).map_err(|e| peer.explain(e))?;
            peer.finish()?;
            print(args, &report, &name, core, Some(peer_core));
            Ok(())
        }
    }
}

fn mb(msgs_per_sec: f64, size: u64) -> f64 {
    (msgs_per_sec * size as f64 / 1e6 * 10.0).round() / 10.0
}

/// The bus, with the stream sized for this run.
fn bus(args: &Args, name: &str) -> Result<Bus, Failure> {
    crate::transport::bus(&args.common, |cfg| {
        let stream = StreamConfig {
            max_message: args.size as usize,
            capacity: args.capacity,
            // Started on its own, the subscriber may attach after the
            // publisher's first messages.
            late_join: LateJoin::Oldest,
            ..cfg.stream(name)
        };
        cfg.streams.insert(name.into(), stream);
    })
}

/// Publishes `--count` messages; returns how many and the nanoseconds it
/// took.
fn publish(args: &Args, bus: &Bus, name: &str) -> Result<(u64, u64), Failure> {
    let mut publisher = bus.publisher(name)?;
    if args.common.spawned {
        // The parent subscribes first, so nothing is published unseen.
        wait_for_go()?;
    } else {
        eprintln!("mdbus-perf (pub): publishing on `{name}`");
    }
    let mut payload = vec![0x5au8; args.size as usize];
    let t0 = Instant::now();
    for i in 1..=args.count {
        if args.rate > 0 {
            let due = (u128::from(i - 1) * 1_000_000_000 / u128::from(args.rate)) as u64;
            while nanos(t0.elapsed()) < due {
                std::hint::spin_loop();
            }
        }
        payload[..8].copy_from_slice(&i.to_le_bytes());
        publisher.publish(&payload)?;
    }
    let ns = nanos(t0.elapsed());
    // Dropping the publisher closes the stream: the subscriber's end.
    drop(publisher);
    Ok((args.count, ns))
}

fn subscribe(
    args: &Args,
    bus: &Bus,
    name: &str,
    mut peer: Option<&mut Peer>,
) -> Result<Report, Failure> {
    // Attaching waits for the publisher to create the stream.
    let mut subscriber = bus.subscriber(name).map_err(|e| args.common.peer_wait(e))?;
    match peer.as_deref_mut() {
        Some(peer) => peer.go()?,
        None => eprintln!("mdbus-perf (sub): attached to `{name}`"),
    }
    let mut first = None;
    let mut last = None;
    let mut end = None;
    let mut trouble = None;
    {
        let mut dog = Watchdog::new(peer, &args.common, "waiting for messages");
        while end.is_none() {
            let n = subscriber.poll(|e| match e {
                Event::EndOfStream { last_seq } => end = Some(last_seq),
                Event::PublisherDown { last_seq } => {
                    trouble = Some(format!(
                    "the publisher went down after message {last_seq} without closing the stream"
                ))
                }
                Event::PublisherRestarted { epoch } => {
                    trouble = Some(format!("the publisher restarted (epoch {epoch})"))
                }
                // Counted by the subscriber's stats.
                _ => {}
            })?;
            if let Some(what) = trouble.take() {
                return Err(Failure::Run(format!("stream `{name}`: {what}")));
            }
            if n > 0 {
                let now = Instant::now();
                first.get_or_insert(now);
                last = Some(now);
                dog.progress();
            } else if end.is_none() {
                dog.idle()?;
            }
        }
    }
    let sent = end.unwrap_or(0);
    let stats = subscriber.stats();
    let (received, lost) = (stats.received, stats.overrun_messages + stats.gap_messages);
    let ns = match (first, last) {
        (Some(a), Some(b)) => nanos(b - a),
        _ => 0,
    };
    let rate = per_sec(received, ns);
    Ok(Report {
        transport: args.common.transport.name(),
        size: args.size,
        sent,
        received,
        lost,
        before_join: sent.saturating_sub(received + lost),
        msgs_per_sec: rate.round(),
        mb_per_sec: mb(rate, args.size),
    })
}

fn print(args: &Args, report: &Report, name: &str, core: usize, peer_core: Option<usize>) {
    if args.common.json {
        print_json(report);
        return;
    }
    let cores = match peer_core {
        Some(peer) => format!("subscriber on core {core}, publisher on core {peer}"),
        None => format!("subscriber on core {core}"),
    };
    println!(
        "mdbus-perf throughput: transport {}, stream `{name}`, {}-byte messages, {cores}",
        report.transport, report.size
    );
    let rate = if args.rate == 0 {
        "as fast as possible".to_string()
    } else {
        format!("at most {} msgs/s", args.rate)
    };
    println!(
        "publisher {rate}, capacity {}, wait {}",
        args.capacity, args.common.wait
    );
    println!();
    println!(
        "{:>12} {:>12} {:>12} {:>12} {:>14} {:>10}",
        "sent", "received", "lost", "before join", "msgs/s", "MB/s"
    );
    println!(
        "{:>12} {:>12} {:>12} {:>12} {:>14.0} {:>10.1}",
        report.sent,
        report.received,
        report.lost,
        report.before_join,
        report.msgs_per_sec,
        report.mb_per_sec
    );
}
