//! Lossless shared-memory subscribers: nothing lost at full speed, a
//! subscriber that stops is released after the timeout (and sees an
//! overrun), a forged position in the segment is ignored and counted.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use mdbus::config::{HugePages, StreamConfig};
use mdbus::{Bus, Config, Event};

/// Offset of the first lossless record's position word in a stream
/// segment (record 0 at 2048, position is its second word).
const RECORD0_POSITION: u64 = 2048 + 8;

fn setup(tag: &str, capacity: usize, timeout: Duration) -> (Bus, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mdbus-lossless-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = Config {
        transport: mdbus::TransportKind::Shm,
        ..Default::default()
    };
    cfg.shm.dir = dir.clone();
    cfg.shm.huge_pages = HugePages::Off;
    cfg.shm.attach_timeout = Duration::ZERO;
    cfg.counters.enabled = false;
    cfg.streams.insert(
        "s".into(),
        StreamConfig {
            max_message: 64,
            capacity,
            lossless: true,
            lossless_timeout: timeout,
            ..Default::default()
        },
    );
    (Bus::new(cfg).unwrap(), dir)
}

#[test]
fn nothing_is_lost_at_full_speed() {
    const COUNT: u64 = 300_000;
    // A small ring, so the publisher laps a lossy subscriber many times.
    let (bus, dir) = setup("full", 256, Duration::from_secs(60));
    let mut publisher = bus.publisher("s").unwrap();
    let mut sub = bus.subscriber("s").unwrap();
    let reader = std::thread::spawn(move || {
        let (mut next, mut lost, mut wrong) = (1u64, 0u64, 0u64);
        while next <= COUNT {
            sub.poll(|e| match e {
                Event::Message(m) => {
                    let i = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                    wrong += u64::from(m.seq() != next || i != next);
                    next += 1;
                }
                Event::Overrun { from, to } | Event::Gap { from, to } => lost += to - from,
                _ => {}
            })
            .unwrap();
        }
        (next - 1, lost, wrong, sub.stats().overruns)
    });
    for i in 1..=COUNT {
        let mut c = publisher.claim(64).unwrap();
        c[..8].copy_from_slice(&i.to_le_bytes());
        c.commit().unwrap();
    }
    let (received, lost, wrong, overruns) = reader.join().unwrap();
    assert_eq!((received, lost, wrong, overruns), (COUNT, 0, 0, 0));
    let c = publisher.lossless_counters().unwrap();
    assert_eq!((c.evicted, c.forged), (0, 0));
    drop(publisher);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_subscriber_that_stops_reading_is_released_and_told_by_an_overrun() {
    let (bus, dir) = setup("stopped", 64, Duration::from_millis(1));
    let mut publisher = bus.publisher("s").unwrap();
    let mut sub = bus.subscriber("s").unwrap();
    for i in 1..=200u64 {
        publisher.publish(&i.to_le_bytes()).unwrap();
    }
    let c = publisher.lossless_counters().unwrap();
    assert_eq!((c.waits, c.evicted, c.forged), (1, 1, 0));
    let mut overrun = None;
    let mut first = None;
    sub.poll(|e| match e {
        Event::Overrun { from, to } => overrun = Some((from, to)),
        Event::Message(m) => {
            first.get_or_insert(m.seq());
        }
        _ => {}
    })
    .unwrap();
    let (from, to) = overrun.expect("an overrun");
    assert_eq!(from, 1);
    assert!(to > 200 - 64 && to <= 200, "{to}");
    assert_eq!(first, Some(to));
    drop(publisher);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_forged_position_neither_stalls_nor_holds_the_publisher() {
    let (bus, dir) = setup("forged", 64, Duration::from_secs(3600));
    let mut publisher = bus.publisher("s").unwrap();
    let _sub = bus.subscriber("s").unwrap();
    let seg = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("mdbus.stream.s"))
        .unwrap();
    seg.write_at(&u64::MAX.to_le_bytes(), RECORD0_POSITION)
        .unwrap();
    // With an hour's timeout, only ignoring the record lets this finish.
    for i in 1..=1000u64 {
        publisher.publish(&i.to_le_bytes()).unwrap();
    }
    let c = publisher.lossless_counters().unwrap();
    assert_eq!((c.waits, c.evicted, c.forged), (0, 0, 1));
    drop(publisher);
    std::fs::remove_dir_all(dir).unwrap();
}
