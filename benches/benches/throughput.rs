//! One-way throughput from a publisher process to a subscriber process on
//! two cores, 64-byte messages:
//!
//! - `raw-spsc`: a single-producer single-consumer ring in a shared mapping
//!   (4096 slots of 64 bytes, cache-padded head and tail, each side caching
//!   the other's index, the producer publishing its tail every 32 messages
//!   and the consumer its head every 32). Lossless: the producer waits when
//!   the ring is full, so it measures how fast one core can hand cache lines
//!   to another.
//! - `mdbus`: an mdbus shared-memory stream. A stream never waits for its
//!   subscribers, so a subscriber that falls more than the stream's
//!   capacity behind loses messages; they are counted as `lost`.
//! - `mdbus-lossless`: the same with `lossless = true` on the subscriber:
//!   the publisher waits for it (its `waits` and `evicted` are reported;
//!   `lossless_timeout` is 10 s here, so only a stall that long loses).
//! - `mdbus-1m`, `mdbus-10m`, `mdbus-50m`: the lossy stream with the
//!   publisher paced at 1, 10 and 50 M messages a second (checking the
//!   clock every 64 messages), one second's worth of messages (at most
//!   `MDBUS_BENCH_ITERS`): how much of what is sent a subscriber that can
//!   keep up receives.
//!
//! ```text
//! cargo bench -p mdbus-benches --bench throughput
//! ```
//!
//! Environment: `MDBUS_BENCH_ITERS` (messages, default 50 000 000),
//! `MDBUS_BENCH_PEERS` (subset of `raw-spsc,mdbus`), `MDBUS_BENCH_CORES`,
//! `MDBUS_BENCH_WAIT`, `MDBUS_BENCH_JSON` (as for the ping-pong bench).
//!
//! The subscriber (the parent process) times from its first message to its
//! last; the publisher (the child) times its own send loop and reports it.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use mdbus::Event;
use mdbus_benches::{
    bench_err, child_init, emit_json, main_of, nanos, note_smoke, selected_peers, wait_for_go,
    watchdog, Peer, PeerExt, Result, Settings, SharedRegion, SharedSafe,
};

/// Message size in bytes.
const SIZE: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    RawSpsc,
    Mdbus,
    MdbusLossless,
    /// Lossy, the publisher paced at this many messages a second.
    Paced(u64),
}

impl Transport {
    const ALL: [Transport; 6] = [
        Transport::RawSpsc,
        Transport::Mdbus,
        Transport::MdbusLossless,
        Transport::Paced(1_000_000),
        Transport::Paced(10_000_000),
        Transport::Paced(50_000_000),
    ];

    fn name(self) -> &'static str {
        match self {
            Transport::RawSpsc => "raw-spsc",
            Transport::Mdbus => "mdbus",
            Transport::MdbusLossless => "mdbus-lossless",
            Transport::Paced(1_000_000) => "mdbus-1m",
            Transport::Paced(10_000_000) => "mdbus-10m",
            Transport::Paced(_) => "mdbus-50m",
        }
    }

    /// Messages this run sends: paced runs send one second's worth.
    fn count(self, settings: &Settings) -> u64 {
        match self {
            Transport::Paced(rate) => rate.min(settings.iters),
            _ => settings.iters,
        }
    }

    fn publisher_role(self) -> String {
        format!("publish-{}", self.name())
    }
}

/// What one run measured.
struct Measured {
    transport: Transport,
    sent: u64,
    received: u64,
    lost: u64,
    /// Subscriber: first to last message.
    receive_ns: u64,
    /// Publisher: its send loop.
    send_ns: u64,
    /// Publisher: messages that waited for a lossless subscriber, and
    /// lossless subscribers it released.
    waits: u64,
    evicted: u64,
}

impl Measured {
    fn per_sec(count: u64, ns: u64) -> f64 {
        if ns == 0 {
            0.0
        } else {
            count as f64 * 1e9 / ns as f64
        }
    }

    fn msgs_per_sec(&self) -> f64 {
        Self::per_sec(self.received, self.receive_ns)
    }

    fn mb_per_sec(&self) -> f64 {
        self.msgs_per_sec() * SIZE as f64 / 1e6
    }

    fn send_msgs_per_sec(&self) -> f64 {
        Self::per_sec(self.sent, self.send_ns)
    }
}

fn main() {
    main_of("throughput", publish, subscribe);
}

fn selected_transports() -> Result<Vec<Transport>> {
    selected_peers(&Transport::ALL, Transport::name)
}

fn subscribe() -> Result<()> {
    let settings = Settings::from_env(50_000_000, 0)?;
    let transports = selected_transports()?;
    mdbus::affinity::pin_current_thread(settings.cores.0)?;
    println!(
        "throughput, one publisher process to one subscriber process: subscriber on core {}, publisher on core {} ({})",
        settings.cores.0, settings.cores.1, settings.placement
    );
    println!(
        "{} messages of {SIZE} bytes, wait {}",
        settings.iters, settings.wait
    );
    note_smoke(&settings);
    let mut results = Vec::new();
    for transport in transports {
        results.push(match transport {
            Transport::RawSpsc => raw_subscribe(&settings)?,
            t => mdbus_subscribe(&settings, t)?,
        });
    }
    report(&settings, &results)
}

fn publish(role: &str) -> Result<()> {
    let settings = Settings::from_env(50_000_000, 0)?;
    child_init()?;
    let report = match Transport::ALL
        .into_iter()
        .find(|t| t.publisher_role() == role)
    {
        Some(Transport::RawSpsc) => raw_publish(&settings)?,
        Some(t) => mdbus_publish(&settings, t)?,
        None => return Err(bench_err!("unknown role {role:?}")),
    };
    println!(
        "{}",
        serde_json::json!({
            "sent": report.sent,
            "send_ns": report.send_ns,
            "waits": report.waits,
            "evicted": report.evicted,
        })
    );
    Ok(())
}

/// What a publisher reports on its stdout.
#[derive(Debug, Default)]
struct Sent {
    sent: u64,
    send_ns: u64,
    waits: u64,
    evicted: u64,
}

/// Reads the publisher's report from its stdout.
fn publisher_report(out: &str) -> Result<Sent> {
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .map_err(|e| bench_err!("publisher report {out:?}: {e}"))?;
    let field = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| bench_err!("publisher report {out:?} lacks {k}"))
    };
    Ok(Sent {
        sent: field("sent")?,
        send_ns: field("send_ns")?,
        waits: field("waits")?,
        evicted: field("evicted")?,
    })
}

fn report(settings: &Settings, results: &[Measured]) -> Result<()> {
    println!();
    println!(
        "{:<14} {:>5} {:>11} {:>11} {:>9} {:>13} {:>9} {:>14} {:>9} {:>8}",
        "peer",
        "size",
        "sent",
        "received",
        "lost",
        "msgs/s",
        "MB/s",
        "send msgs/s",
        "waits",
        "evicted"
    );
    for m in results {
        println!(
            "{:<14} {:>5} {:>11} {:>11} {:>9} {:>13.0} {:>9.1} {:>14.0} {:>9} {:>8}",
            m.transport.name(),
            SIZE,
            m.sent,
            m.received,
            m.lost,
            m.msgs_per_sec(),
            m.mb_per_sec(),
            m.send_msgs_per_sec(),
            m.waits,
            m.evicted
        );
    }
    let rate = |t: Transport| {
        results
            .iter()
            .find(|m| m.transport == t)
            .map(Measured::msgs_per_sec)
    };
    if let (Some(raw), Some(lossless)) = (rate(Transport::RawSpsc), rate(Transport::MdbusLossless))
    {
        println!(
            "mdbus-lossless / raw-spsc received rate: {:.2} (target >= 0.5)",
            lossless / raw
        );
    }
    for m in results {
        if let Transport::Paced(r) = m.transport {
            println!(
                "{} (paced at {r} msgs/s): received/sent {:.4}",
                m.transport.name(),
                m.received as f64 / m.sent.max(1) as f64
            );
        }
    }
    println!();
    let mut lines = Vec::new();
    for m in results {
        lines.push(
            serde_json::json!({
                "bench": "throughput",
                "peer": m.transport.name(),
                "size": SIZE,
                "sent": m.sent,
                "received": m.received,
                "lost": m.lost,
                "msgs_per_sec": m.msgs_per_sec().round(),
                "mb_per_sec": (m.mb_per_sec() * 10.0).round() / 10.0,
                "send_msgs_per_sec": m.send_msgs_per_sec().round(),
                "waits": m.waits,
                "evicted": m.evicted,
                "subscriber_core": settings.cores.0,
                "publisher_core": settings.cores.1,
                "wait": settings.wait.as_str(),
            })
            .to_string(),
        );
    }
    emit_json(&lines)
}

// ----------------------------------------------------------- raw SPSC ----

/// Slots in the raw ring; a power of two.
const SLOTS: usize = 4096;
/// Messages per index update. Publishing every message makes a consumer
/// that keeps up pull the `tail` line across once per message; batching
/// lets it stream the slots.
const BATCH: u64 = 32;

/// The raw ring. Invariants: `head <= tail <= head + SLOTS`; slot
/// `i % SLOTS` for `head <= i < tail` belongs to the consumer, every other
/// slot to the producer.
#[repr(C)]
struct Spsc {
    /// Messages written; stored by the producer only.
    tail: CachePadded<AtomicU64>,
    /// Messages consumed; stored by the consumer only.
    head: CachePadded<AtomicU64>,
    slots: [Slot; SLOTS],
}

#[repr(C, align(64))]
struct Slot(UnsafeCell<[u8; SIZE]>);

// SAFETY: all-zero is an empty ring (head = tail = 0, zeroed slots); the
// indices are atomics, and each slot is handed between the processes by the
// Release store / Acquire load of `tail` (to the consumer) and `head` (back
// to the producer), per the invariant on `Spsc`.
unsafe impl SharedSafe for Spsc {}

const SPSC_LEN: usize = std::mem::size_of::<Spsc>().next_multiple_of(4096);

fn raw_subscribe(settings: &Settings) -> Result<Measured> {
    let region = SharedRegion::create(SPSC_LEN)?;
    let ring: &Spsc = region.get();
    let mut peer = Peer::spawn(
        &Transport::RawSpsc.publisher_role(),
        settings,
        Some(&region),
    )?;
    peer.go()?;
    let count = settings.iters;
    let (mut next, mut tail) = (0u64, 0u64);
    let mut first = None;
    let mut out_of_order = 0u64;
    {
        let mut dog = watchdog(Some(&mut peer), settings.wait, settings.stall, "raw SPSC");
        while next < count {
            if next == tail {
                // Acquire pairs with the producer's Release store of `tail`:
                // the slots below it are written.
                tail = ring.tail.load(Ordering::Acquire);
                if next == tail {
                    dog.idle()?;
                    continue;
                }
                first.get_or_insert_with(Instant::now);
                dog.progress();
            }
            let slot = &ring.slots[next as usize % SLOTS];
            // SAFETY: `next < tail`, so the producer wrote this slot and
            // will not touch it until `head` passes it.
            let bytes = unsafe { &*slot.0.get() };
            let index = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
            out_of_order += u64::from(index != next);
            next += 1;
            if next % BATCH == 0 || next == tail {
                // Release pairs with the producer's Acquire load of `head`:
                // we are done reading the slots below `next`.
                ring.head.store(next, Ordering::Release);
            }
        }
    }
    let receive_ns = first.map_or(0, |t| nanos(t.elapsed()));
    let Sent { sent, send_ns, .. } = publisher_report(&peer.finish()?)?;
    if out_of_order != 0 {
        return Err(bench_err!("raw SPSC: {out_of_order} messages out of order"));
    }
    Ok(Measured {
        transport: Transport::RawSpsc,
        sent,
        received: next,
        lost: sent - next,
        receive_ns,
        send_ns,
        waits: 0,
        evicted: 0,
    })
}

fn raw_publish(settings: &Settings) -> Result<Sent> {
    let region = SharedRegion::inherited(SPSC_LEN)?;
    let ring: &Spsc = region.get();
    wait_for_go()?;
    let mut dog = watchdog(None, settings.wait, settings.stall, "raw SPSC publisher");
    let mut head = 0u64;
    let t0 = Instant::now();
    for i in 0..settings.iters {
        while i - head >= SLOTS as u64 {
            // Acquire pairs with the consumer's Release store of `head`: it
            // has finished reading the slots below it.
            head = ring.head.load(Ordering::Acquire);
            if i - head >= SLOTS as u64 {
                dog.idle()?;
            } else {
                dog.progress();
            }
        }
        let slot = &ring.slots[i as usize % SLOTS];
        // SAFETY: `i - head < SLOTS`, so the consumer has released this
        // slot and will not read it until `tail` passes it.
        let bytes = unsafe { &mut *slot.0.get() };
        bytes[..8].copy_from_slice(&i.to_le_bytes());
        bytes[8..].fill(0x5a);
        if (i + 1) % BATCH == 0 || i + 1 == settings.iters {
            // Release pairs with the consumer's Acquire load of `tail`: the
            // slots below `i + 1` are written.
            ring.tail.store(i + 1, Ordering::Release);
        }
    }
    Ok(Sent {
        sent: settings.iters,
        send_ns: nanos(t0.elapsed()),
        ..Sent::default()
    })
}

// -------------------------------------------------------------- mdbus ----

const STREAM: &str = "throughput";

fn bus(transport: Transport) -> Result<mdbus::Bus> {
    mdbus_benches::mdbus_bus(|cfg| {
        cfg.streams.insert(
            STREAM.into(),
            mdbus::config::StreamConfig {
                max_message: SIZE,
                lossless: transport == Transport::MdbusLossless,
                // Only a subscriber stalled this long loses: on a shared
                // machine one can be descheduled for a while.
                lossless_timeout: std::time::Duration::from_secs(10),
                ..Default::default()
            },
        );
    })
}

fn mdbus_subscribe(settings: &Settings, transport: Transport) -> Result<Measured> {
    let bus = bus(transport)?;
    let mut peer = Peer::spawn(&transport.publisher_role(), settings, None)?;
    // Attaching waits for the publisher's segment; the publisher waits for
    // `go`, so nothing is published before this subscriber is attached.
    let mut sub = bus.subscriber(STREAM)?;
    peer.go()?;
    let count = transport.count(settings);
    let mut first = None;
    let mut last = None;
    let mut ended = false;
    let mut trouble = None;
    {
        let mut dog = watchdog(
            Some(&mut peer),
            settings.wait,
            settings.stall,
            "mdbus stream",
        );
        let mut gone: Option<(u32, mdbus_tool_support::watchdog::WatchdogError)> = None;
        while !ended {
            let n = sub.poll(|e| match e {
                Event::Message(m) => {
                    if m.seq() == count {
                        ended = true;
                    }
                }
                Event::Overrun { to, .. } | Event::Gap { to, .. } => {
                    if to > count {
                        ended = true;
                    }
                }
                Event::EndOfStream { .. } => ended = true,
                other => trouble = Some(format!("{other:?}")),
            })?;
            if let Some(event) = trouble.take() {
                return Err(bench_err!("mdbus stream: unexpected {event}"));
            }
            if n == 0 {
                match gone.as_mut() {
                    Some((left, _)) if *left > 0 => *left -= 1,
                    Some(_) => {
                        let (_, e) = gone.take().expect("checked");
                        return Err(e.into());
                    }
                    // The publisher may have exited right after its last
                    // messages, which are still in the ring: read on until
                    // the stream ends (it does, once the subscriber sees
                    // the publisher closed), for a bounded number of polls.
                    None => gone = dog.idle().err().map(|e| (1u32 << 22, e)),
                }
            } else {
                dog.progress();
                first.get_or_insert_with(Instant::now);
                last = Some(Instant::now());
            }
        }
    }
    let receive_ns = match (first, last) {
        (Some(a), Some(b)) => nanos(b - a),
        _ => 0,
    };
    let sent = publisher_report(&peer.finish()?)?;
    let stats = sub.stats();
    Ok(Measured {
        transport,
        sent: sent.sent,
        received: stats.received,
        lost: stats.overrun_messages + stats.gap_messages,
        receive_ns,
        send_ns: sent.send_ns,
        waits: sent.waits,
        evicted: sent.evicted,
    })
}

/// Messages a paced publisher sends between two looks at the clock.
const PACE_EVERY: u64 = 64;

fn mdbus_publish(settings: &Settings, transport: Transport) -> Result<Sent> {
    let bus = bus(transport)?;
    let mut publisher = bus.publisher(STREAM)?;
    let count = transport.count(settings);
    let rate = match transport {
        Transport::Paced(r) => Some(r),
        _ => None,
    };
    wait_for_go()?;
    let t0 = Instant::now();
    for i in 0..count {
        if let Some(rate) = rate.filter(|_| i % PACE_EVERY == 0) {
            let due = Duration::from_nanos((i as u128 * 1_000_000_000 / rate as u128) as u64);
            while t0.elapsed() < due {
                std::hint::spin_loop();
            }
        }
        let mut claim = publisher.claim(SIZE)?;
        claim[..8].copy_from_slice(&i.to_le_bytes());
        claim[8..].fill(0x5a);
        claim.commit()?;
    }
    let send_ns = nanos(t0.elapsed());
    let lossless = publisher.lossless_counters().unwrap_or_default();
    Ok(Sent {
        sent: count,
        send_ns,
        waits: lossless.waits,
        evicted: lossless.evicted,
    })
}
