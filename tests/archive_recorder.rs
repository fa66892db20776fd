//! The recorder: fed by an ordinary subscriber on its own thread, it
//! records every message of a shared-memory stream; one that falls behind
//! is overrun like any subscriber (the publisher never waits) and records
//! the loss as an exact gap. And the `[archive]` configuration.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use mdbus::archive::{ArchiveConfig, ArchiveReader, ArchiveWriter, Item, Recorder};
use mdbus::{Bus, Config};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("archive-rec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn bus(archive: &Path, stream: &str) -> Bus {
    let toml = format!(
        "transport = \"shm\"\n[shm]\nprefix = \"mdbus-arc-{}-{}\"\n[counters]\nenabled = false\n[streams.md]\nmax_message = 64\n{stream}\n[streams.md.archive]\ndir = \"{}\"\nsegment_bytes = 65536\n",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        archive.display()
    );
    Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap()
}

fn payload(seq: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p[8..].copy_from_slice(&(seq * 31).to_le_bytes());
    p
}

/// Waits (no sleep: yielding) until the recorder has written up to `seq`.
fn wait_recorded(r: &Recorder, seq: u64) {
    let start = std::time::Instant::now();
    while r.stats().last_seq < seq {
        assert!(r.stats().running, "{:?}", r.stats());
        assert!(start.elapsed().as_secs() < 60, "watchdog: {:?}", r.stats());
        std::thread::yield_now();
    }
}

/// Everything the archive holds from 1: messages checked, gaps listed.
fn read(d: &Path) -> (Vec<u64>, Vec<(u64, u64)>) {
    let (mut ms, mut gaps) = (Vec::new(), Vec::new());
    let mut r = ArchiveReader::open(d).unwrap();
    r.seek(1).unwrap();
    while let Some(i) = r.next_item().unwrap() {
        match i {
            Item::Message(m) => {
                assert_eq!(m.payload(), payload(m.seq()));
                ms.push(m.seq());
            }
            Item::Gap { from, to } => gaps.push((from, to)),
        }
    }
    (ms, gaps)
}

#[test]
fn the_recorder_records_every_message_of_the_stream() {
    let d = dir("all");
    let bus = bus(&d, "");
    let mut p = bus.publisher("md").unwrap();
    let rec = Recorder::start(&bus, "md").unwrap();
    for s in 1..=20_000u64 {
        assert_eq!(p.publish(&payload(s)).unwrap(), s);
        if s % 1000 == 0 {
            // Within the ring: the recorder keeps up without loss.
            wait_recorded(&rec, s - 500);
        }
    }
    wait_recorded(&rec, 20_000);
    let st = rec.stop();
    assert_eq!(
        (st.recorded, st.overruns, st.gaps, st.error),
        (20_000, 0, 0, None)
    );
    let (ms, gaps) = read(&d);
    assert_eq!(ms, (1..=20_000).collect::<Vec<_>>());
    assert!(gaps.is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_recorder_that_falls_behind_records_the_loss_as_an_exact_gap() {
    let d = dir("behind");
    let bus = bus(&d, "capacity = 64\nlate_join = \"oldest\"");
    let mut p = bus.publisher("md").unwrap();
    // Subscribed at 1, but not reading while 1000 messages are published
    // into a 64-message ring: the publisher does not wait.
    let sub = bus.subscriber("md").unwrap();
    for s in 1..=1000u64 {
        p.publish(&payload(s)).unwrap();
    }
    let cfg = bus.config().archive_for("md").unwrap();
    let rec = Recorder::from_subscriber(sub, &cfg).unwrap();
    wait_recorded(&rec, 1000);
    for s in 1001..=1010u64 {
        p.publish(&payload(s)).unwrap();
    }
    wait_recorded(&rec, 1010);
    let st = rec.stop();
    assert_eq!(st.overruns, 1, "{st:?}");
    let resumed = 1 + st.overrun_messages;
    let (ms, gaps) = read(&d);
    assert_eq!(gaps, vec![(1, resumed)]);
    assert_eq!(ms, (resumed..=1010).collect::<Vec<_>>());
    assert!(ms.len() >= 64, "the ring's messages are all recorded");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_restarted_recorder_continues_the_archive() {
    let d = dir("restart");
    let bus = bus(&d, "");
    let mut p = bus.publisher("md").unwrap();
    let rec = Recorder::start(&bus, "md").unwrap();
    for s in 1..=100u64 {
        p.publish(&payload(s)).unwrap();
    }
    wait_recorded(&rec, 100);
    rec.stop();
    for s in 101..=200u64 {
        p.publish(&payload(s)).unwrap();
    }
    // From the oldest the ring retains: what the archive has is skipped.
    let rec = Recorder::start(&bus, "md").unwrap();
    wait_recorded(&rec, 200);
    let st = rec.stop();
    assert_eq!((st.recorded, st.already_recorded), (100, 100));
    let (ms, gaps) = read(&d);
    assert_eq!(ms, (1..=200).collect::<Vec<_>>());
    assert!(gaps.is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn archive_configuration_is_checked_and_errors_name_the_key() {
    let c = Config::from_toml_str(
        "[archive]\ndir = \"/var/lib/mdbus\"\nsync = { every = 100 }\n[streams.md]\n[streams.other.archive]\ndir = \"/x\"\nsync = { interval = \"10ms\" }\n",
        "f.toml",
    )
    .unwrap();
    assert_eq!(
        c.archive_for("md").unwrap().dir,
        PathBuf::from("/var/lib/mdbus/md")
    );
    assert_eq!(
        c.archive_for("other").unwrap().sync,
        mdbus::archive::SyncPolicy::Interval(std::time::Duration::from_millis(10))
    );
    let e = Config::from_toml_str("[archive]\ndir = \"/x\"\nsegment = 1\n", "f.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("f.toml: line 3: unknown field `segment`"),
        "{e}"
    );
    let e = Config::from_toml_str("[archive]\ndir = \"x\"\n", "f.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "f.toml: archive.dir: x is not an absolute path"
    );
    let e = Config::from_toml_str(
        "[streams.md.archive]\ndir = \"/x\"\nsegment_bytes = 10\n",
        "f.toml",
    )
    .unwrap_err();
    assert_eq!(e.key, "streams.md.archive.segment_bytes");
    let e = Config::from_toml_str("[streams.md]\nlate_join = \"archive\"\n", "f.toml").unwrap_err();
    assert_eq!(e.key, "streams.md.late_join");
    let e = Config::from_toml_str("[archive]\ndir = \"/x\"\nsync = \"always\"\n", "f.toml")
        .unwrap_err();
    assert!(e.to_string().contains("always"), "{e}");
}

/// A publisher restart (a new epoch, numbered from 1 again): the recorder
/// follows it. The previous epoch's archive is sealed whole into
/// `DIR/epochs/000001` and `DIR` holds the new epoch from 1, so no archive
/// mixes two epochs' sequence numbers.
#[test]
fn a_publisher_restart_seals_the_epoch_and_the_recorder_follows_the_new_one() {
    let d = dir("epoch");
    let bus = bus(&d, "");
    let mut p = bus.publisher("md").unwrap();
    let rec = Recorder::start(&bus, "md").unwrap();
    for s in 1..=100u64 {
        p.publish(&payload(s)).unwrap();
    }
    wait_recorded(&rec, 100);
    drop(p);
    let mut p = bus.publisher("md").unwrap();
    for s in 1..=40u64 {
        p.publish(&payload(s)).unwrap();
    }
    let start = std::time::Instant::now();
    loop {
        let st = rec.stats();
        assert!(st.running, "{st:?}");
        if st.epochs == 1 && st.last_seq >= 40 {
            break;
        }
        assert!(start.elapsed().as_secs() < 60, "watchdog: {st:?}");
        std::thread::yield_now();
    }
    let st = rec.stop();
    assert_eq!(
        (st.epochs, st.recorded, &st.error),
        (1, 140, &None),
        "{st:?}"
    );
    assert_eq!(read(&d), ((1..=40).collect(), vec![]));
    assert_eq!(
        read(&d.join("epochs").join("000001")),
        ((1..=100).collect(), vec![])
    );
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A crash while an epoch was being sealed (its directory still
/// `.partial`, some of its files moved): opening the archive completes
/// the move, and nothing of the epoch is lost or left behind.
#[test]
fn an_epoch_sealing_a_crash_interrupted_is_completed_on_open() {
    let d = dir("sealcrash");
    let cfg = ArchiveConfig {
        dir: d.clone(),
        segment_bytes: 65536,
        ..ArchiveConfig::default()
    };
    {
        let mut w = ArchiveWriter::open(&cfg).unwrap();
        for s in 1..=3000u64 {
            w.append(s, 0, 0, &payload(s)).unwrap();
        }
        w.sync().unwrap();
    }
    let segments = |dir: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".seg") || n.ends_with(".idx"))
            .collect();
        v.sort();
        v
    };
    let files = segments(&d);
    assert!(files.len() >= 6, "three segments or more: {files:?}");
    let partial = d.join("epochs").join("000001.partial");
    std::fs::create_dir_all(&partial).unwrap();
    for f in &files[..2] {
        std::fs::rename(d.join(f), partial.join(f)).unwrap();
    }
    drop(ArchiveWriter::open(&cfg).unwrap());
    assert_eq!(segments(&d), Vec::<String>::new());
    assert!(!partial.exists());
    let sealed = d.join("epochs").join("000001");
    assert_eq!(segments(&sealed), files);
    assert_eq!(read(&sealed), ((1..=3000).collect(), vec![]));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A late joiner whose replay spans a publisher restart: the archived
/// epoch first, then the restart reported as the live path reports it
/// (`PublisherRestarted`), then the new epoch from 1; never the two
/// epochs' sequence numbers merged as one stream.
#[test]
fn a_replay_across_a_publisher_restart_reports_the_restart_between_the_epochs() {
    let d = dir("epoch-replay");
    let bus = bus(&d, "");
    let mut p = bus.publisher("md").unwrap();
    let rec = Recorder::start(&bus, "md").unwrap();
    for s in 1..=100u64 {
        p.publish(&payload(s)).unwrap();
    }
    wait_recorded(&rec, 100);
    let mut sub = mdbus::archive::subscribe_from(&bus, "md", 1).unwrap();
    drop(p);
    let mut p = bus.publisher("md").unwrap();
    for s in 1..=40u64 {
        p.publish(&payload(s)).unwrap();
    }
    let mut seen = Vec::new();
    let start = std::time::Instant::now();
    while seen
        .iter()
        .filter(|e: &&String| e.starts_with("new "))
        .count()
        < 40
    {
        assert!(start.elapsed().as_secs() < 60, "watchdog: {seen:?}");
        let restarted = seen.iter().any(|e| e == "restarted");
        sub.poll(|e| match e {
            mdbus::Event::Message(m) => {
                assert_eq!(m.payload(), payload(m.seq()));
                let epoch = if restarted || seen.iter().any(|e| e == "restarted") {
                    "new"
                } else {
                    "old"
                };
                seen.push(format!("{epoch} {}", m.seq()));
            }
            mdbus::Event::PublisherRestarted { .. } => seen.push("restarted".into()),
            // The old publisher's end may be reported before the restart.
            mdbus::Event::EndOfStream { .. } | mdbus::Event::PublisherDown { .. } => {}
            other => seen.push(format!("{other:?}")),
        })
        .unwrap();
    }
    let want: Vec<String> = (1..=100)
        .map(|s| format!("old {s}"))
        .chain(["restarted".to_string()])
        .chain((1..=40).map(|s| format!("new {s}")))
        .collect();
    assert_eq!(seen, want);
    assert_eq!(sub.replay_stats().unwrap().restarts, 1);
    drop(rec);
    std::fs::remove_dir_all(&d).unwrap();
}
