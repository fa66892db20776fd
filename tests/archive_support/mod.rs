//! What the archive's replay-then-live tests share: a day published at a
//! steady pace with the recorder on, a subscriber joining at 80% that
//! wants everything from sequence 1, and what it saw.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use mdbus::archive::{Recorder, ReplayStats};
use mdbus::{Bus, Event, Publisher, Subscriber};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Messages in the day.
pub const N: u64 = 30_000;
/// Ring / retained window: far smaller than the day, so the join needs
/// the archive.
pub const CAPACITY: u64 = 1024;

/// A fresh directory for test `name` of binary `tag`.
pub fn dir(tag: &str, name: &str) -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The payload of `seq`, checked on receipt.
pub fn payload(seq: u64) -> [u8; 24] {
    let mut p = [0u8; 24];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p[8..16].copy_from_slice(&(seq ^ 0x5a5a).to_le_bytes());
    p
}

/// A process-unique number for names, ports and groups.
pub fn unique() -> u32 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A shm bus of its own (segment names prefixed with `tag`).
pub fn shm_toml(tag: &str) -> String {
    format!(
        "transport = \"shm\"\n[shm]\nprefix = \"mdbus-{tag}-{}-{}\"\n",
        std::process::id(),
        unique()
    )
}

/// What the late subscriber saw.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub received: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub gaps: Vec<(u64, u64)>,
}

/// Publishes N messages (never more than half the ring ahead of the
/// recorder, so the archive is whole), joins the subscriber `subscribe`
/// makes at 80% and checks what it receives while publishing goes on;
/// `watch` describes the state for the watchdog's message. Returns the
/// subscriber too, on the live stream.
pub fn late_join_day(
    publisher: &mut Publisher,
    recorder: &Recorder,
    subscribe: impl FnOnce() -> Subscriber,
    watch: impl Fn() -> String,
) -> (Seen, ReplayStats, Subscriber) {
    let published = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let delivered = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Past N too, until the subscriber is done: it stops once it
            // has N and has joined the live stream (a joiner whose live
            // subscription is still recovering a loss takes the archive
            // further, and joins later).
            for seq in 1.. {
                if done.load(Ordering::Acquire) {
                    break;
                }
                // Flow control on the recorder's progress (no sleep): it
                // is never overrun, so the archive holds every message.
                // The last fifth is published no more than a quarter ring
                // ahead of the late subscriber, so it joins the live stream
                // while publishing goes on.
                while !done.load(Ordering::Acquire)
                    && (recorder.stats().last_seq + CAPACITY / 2 < seq
                        || (seq > N * 8 / 10
                            && delivered.load(Ordering::Acquire) + CAPACITY / 4 < seq))
                {
                    publisher.service().unwrap();
                    assert!(recorder.stats().running, "{:?}", recorder.stats());
                    std::thread::yield_now();
                }
                assert_eq!(publisher.publish(&payload(seq)).unwrap(), seq);
                published.store(seq, Ordering::Release);
            }
            // Retransmissions and heartbeats until the subscriber is done.
            while !done.load(Ordering::Acquire) {
                publisher.service().unwrap();
                std::thread::yield_now();
            }
        });
        while published.load(Ordering::Acquire) < N * 8 / 10 {
            std::thread::yield_now();
        }
        let mut sub = subscribe();
        let mut seen = Seen::default();
        let mut next = 1;
        let start = std::time::Instant::now();
        while next <= N || sub.replay_stats().unwrap().merge_seq == 0 {
            assert!(
                start.elapsed().as_secs() < 120,
                "watchdog: {seen:?} next {next} {:?} {}",
                sub.replay_stats(),
                watch()
            );
            sub.poll(|e| match e {
                Event::Message(m) => {
                    assert_eq!(m.payload(), payload(m.seq()));
                    seen.received += 1;
                    if m.seq() < next {
                        seen.duplicates += 1;
                    } else if m.seq() > next {
                        seen.out_of_order += 1;
                        next = m.seq() + 1;
                    } else {
                        next += 1;
                    }
                }
                Event::Gap { from, to } | Event::Overrun { from, to } => {
                    seen.gaps.push((from, to));
                    next = next.max(to);
                }
                _ => {}
            })
            .unwrap();
            delivered.store(next - 1, Ordering::Release);
        }
        done.store(true, Ordering::Release);
        let stats = sub.replay_stats().unwrap();
        (seen, stats, sub)
    })
}

/// The day arrived whole, once, in order, the archive delivering the
/// start (far beyond the ring) and the live stream the rest.
pub fn check(seen: Seen, stats: ReplayStats) {
    assert!(seen.received >= N, "{seen:?} {stats:?}");
    assert_eq!(
        seen,
        Seen {
            received: seen.received,
            ..Seen::default()
        },
        "{stats:?}"
    );
    assert!(stats.replayed >= N * 8 / 10 - CAPACITY, "{stats:?}");
    assert!(stats.merge_seq > 1, "{stats:?}");
    // Everything before the seam came from the archive (and, when the
    // live subscription had nothing at hand, a little after it).
    assert!(stats.replayed >= stats.merge_seq - 1, "{stats:?}");
}

/// Publishes 1..=3000 on stream `md` of `bus` before starting its
/// recorder (archive in `d`), so the archive holds only what the ring
/// still had; returns the publisher, the recorder (with all 3000) and
/// the archive's first sequence.
pub fn archive_missing_its_start(bus: &Bus, d: &Path) -> (Publisher, Recorder, u64) {
    let mut publisher = bus.publisher("md").unwrap();
    for seq in 1..=3000 {
        publisher.publish(&payload(seq)).unwrap();
    }
    let recorder = Recorder::start(bus, "md").unwrap();
    while recorder.stats().last_seq < 3000 {
        std::thread::yield_now();
    }
    // Where the archive begins (the ring's oldest intact message then).
    let first = mdbus::archive::ArchiveReader::open(d)
        .unwrap()
        .first_seq()
        .unwrap()
        .unwrap();
    assert!(first > 3000 - CAPACITY && first < 3000, "{first}");
    (publisher, recorder, first)
}
