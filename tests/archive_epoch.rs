//! The publisher's epoch in the archive: a recorder started after the
//! publisher restarted while no recorder ran seals the old epoch and
//! follows the new one; a late joiner never merges an archive of another
//! epoch into the live stream; epoch fields in the files are checked.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use mdbus::archive::{ArchiveConfig, ArchiveReader, ArchiveWriter, Item, Recorder, ReplayService};
use mdbus::{Bus, Config, Event, Publisher};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("archive-epoch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn transport_toml(transport: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    match transport {
        "shm" => format!(
            "transport = \"shm\"\n[shm]\nprefix = \"mdbus-ep-{}-{n}\"\n[streams.md]\n",
            std::process::id()
        ),
        _ => {
            let port = 44_000 + (std::process::id() % 1_000) * 16 + n;
            let group = format!("239.253.{}.{}", 1 + std::process::id() % 250, 1 + n % 250);
            format!(
                "transport = \"udp\"\n[streams.md]\ngroup = \"{group}:{port}\"\ninterface = \"127.0.0.1\"\n\
                 ttl = 0\nheartbeat_interval = \"20ms\"\nheartbeat_timeout = \"2s\"\n"
            )
        }
    }
}

fn bus(transport: &str, archive: &Path) -> Bus {
    bus_with(transport, archive, false)
}

/// With `service`, late joiners replay through a replay service on the
/// session `rpl` (shm sessions, or TCP on a udp bus).
fn bus_with(transport: &str, archive: &Path, service: bool) -> Bus {
    let mut toml = format!(
        "{}max_message = 64\ncapacity = 4096\n[counters]\nenabled = false\n\
         [streams.md.archive]\ndir = \"{}\"\nsegment_bytes = 65536\n",
        transport_toml(transport),
        archive.display()
    );
    if service {
        toml.push_str("replay_service = \"rpl\"\n[sessions.rpl]\nmax_message = 8192\n");
        toml.push_str("connect_timeout = \"1s\"\n");
        if transport != "shm" {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = 46_000 + (std::process::id() % 1_000) * 16 + n;
            toml.push_str(&format!("address = \"127.0.0.1:{port}\"\n"));
        }
    }
    Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap()
}

/// The payload of `seq` in the publisher incarnation tagged `tag`, so a
/// message of one epoch is never taken for the other's.
fn payload(tag: u64, seq: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p[8..].copy_from_slice(&(tag * 1_000_000 + seq).to_le_bytes());
    p
}

/// Epoch A: messages 1..=100 published and recorded by a recorder that
/// is returned still running.
fn record_epoch_a(bus: &Bus, p: &mut Publisher) -> Recorder {
    let rec = Recorder::start(bus, "md").unwrap();
    for s in 1..=100u64 {
        p.publish(&payload(1, s)).unwrap();
    }
    serve_until(p, "epoch A recorded", || rec.stats().last_seq >= 100);
    rec
}

/// Serves the publisher (retransmissions, heartbeats) until `done`.
fn serve_until(p: &mut Publisher, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        p.service().unwrap();
        assert!(start.elapsed().as_secs() < 60, "watchdog: {what}");
        std::thread::yield_now();
    }
}

/// Everything the archive in `d` holds from 1, each payload checked to be
/// incarnation `tag`'s.
fn read(d: &Path, tag: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut r = ArchiveReader::open(d).unwrap();
    r.seek(1).unwrap();
    while let Some(i) = r.next_item().unwrap() {
        match i {
            Item::Message(m) => {
                assert_eq!(m.payload(), payload(tag, m.seq()), "seq {}", m.seq());
                out.push(m.seq());
            }
            Item::Gap { from, to } => panic!("gap {from}..{to} in {}", d.display()),
        }
    }
    out
}

/// Epoch A (1..=100) recorded, the recorder stopped; the publisher
/// restarts as epoch B and publishes 1..=40 while no recorder runs. A
/// recorder started now sees B is not the archive's epoch: it seals A
/// into `DIR/epochs/000001` and records B from 1, counting nothing as
/// already recorded.
fn recorder_started_after_a_restart_seals_and_follows(transport: &str) {
    let d = dir(&format!("late-rec-{transport}"));
    let bus = bus(transport, &d);
    let mut p = bus.publisher("md").unwrap();
    let rec = record_epoch_a(&bus, &mut p);
    let st = rec.stop();
    assert_eq!((st.recorded, st.epochs), (100, 0), "{st:?}");
    drop(p);

    let mut p = bus.publisher("md").unwrap();
    for s in 1..=40u64 {
        p.publish(&payload(2, s)).unwrap();
    }
    let rec = Recorder::start(&bus, "md").unwrap();
    serve_until(&mut p, "epoch B recorded", || {
        let st = rec.stats();
        assert!(st.running, "{st:?}");
        st.epochs == 1 && st.last_seq >= 40
    });
    let st = rec.stop();
    assert_eq!(
        (st.epochs, st.recorded, st.already_recorded, &st.error),
        (1, 40, 0, &None),
        "{st:?}"
    );
    assert_eq!(read(&d, 2), (1..=40).collect::<Vec<_>>());
    assert_eq!(
        read(&d.join("epochs").join("000001"), 1),
        (1..=100).collect::<Vec<_>>()
    );
    // Each archive names its own epoch, and they differ.
    let mut live = ArchiveReader::open(&d).unwrap();
    let mut sealed = ArchiveReader::open(d.join("epochs").join("000001")).unwrap();
    let (b, a) = (live.epoch().unwrap(), sealed.epoch().unwrap());
    assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn shm_recorder_started_after_a_publisher_restart_seals_and_follows() {
    recorder_started_after_a_restart_seals_and_follows("shm");
}

#[test]
fn udp_recorder_started_after_a_publisher_restart_seals_and_follows() {
    recorder_started_after_a_restart_seals_and_follows("udp");
}

/// The archive holds epoch A (1..=100) and no recorder runs; the live
/// stream is epoch B (1..=40). A late joiner asking for everything from 1
/// gets B's messages 1..=40, once, in order, and nothing of A: the
/// archive of another epoch is not merged into the live stream.
fn late_joiner_against_an_older_epoch_gets_the_live_epoch(transport: &str, via_service: bool) {
    let d = dir(&format!("late-join-{transport}-{via_service}"));
    let bus = bus_with(transport, &d, via_service);
    let service = via_service.then(|| ReplayService::start(&bus, "md").unwrap());
    let mut p = bus.publisher("md").unwrap();
    let rec = record_epoch_a(&bus, &mut p);
    drop(rec);
    drop(p);

    let mut p = bus.publisher("md").unwrap();
    for s in 1..=40u64 {
        p.publish(&payload(2, s)).unwrap();
    }
    let mut sub = mdbus::archive::subscribe_from(&bus, "md", 1).unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 40 {
        assert!(start.elapsed().as_secs() < 60, "watchdog: {seen:?}");
        p.service().unwrap();
        sub.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.payload(), payload(2, m.seq()), "seq {}", m.seq());
                seen.push(format!("{}", m.seq()));
            }
            other => seen.push(format!("{other:?}")),
        })
        .unwrap();
    }
    let want: Vec<String> = (1..=40).map(|s| s.to_string()).collect();
    assert_eq!(seen, want);
    // The live epoch as a plain subscriber learns it (on udp from a
    // datagram: the publisher's heartbeats).
    let mut plain = bus.subscriber("md").unwrap();
    serve_until(&mut p, "a plain subscriber's epoch", || {
        plain.poll(|_| {}).unwrap();
        plain.epoch().is_some()
    });
    let live_epoch = plain.epoch();
    let sealed_epoch = ArchiveReader::open(&d).unwrap().epoch().unwrap();
    assert!(live_epoch.is_some() && sub.epoch().is_some());
    assert_eq!(sub.epoch(), live_epoch);
    assert_ne!(sealed_epoch, live_epoch);
    let st = sub.replay_stats().unwrap();
    assert_eq!((st.replayed, st.restarts), (0, 0), "{st:?}");
    drop(sub);
    drop(service);
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn shm_late_joiner_against_an_archive_of_an_older_epoch_gets_the_live_epoch() {
    late_joiner_against_an_older_epoch_gets_the_live_epoch("shm", false);
}

#[test]
fn udp_late_joiner_against_an_archive_of_an_older_epoch_gets_the_live_epoch() {
    late_joiner_against_an_older_epoch_gets_the_live_epoch("udp", false);
}

/// The same through a replay service, which says the archive's epoch
/// before its first record.
#[test]
fn shm_late_joiner_through_the_service_against_an_older_epoch_gets_the_live_epoch() {
    late_joiner_against_an_older_epoch_gets_the_live_epoch("shm", true);
}

#[test]
fn udp_late_joiner_through_the_service_against_an_older_epoch_gets_the_live_epoch() {
    late_joiner_against_an_older_epoch_gets_the_live_epoch("udp", true);
}

/// On UDP the live epoch is known only once a datagram arrives. With no
/// publisher running, the late joiner waits for it (the stream's
/// `heartbeat_timeout`), then replays the archive's epoch A; when a new publisher
/// (epoch B) starts, it reports the restart before B's messages, as a
/// live subscriber would: A 1..=100, `PublisherRestarted` with B's epoch,
/// B 1..=40; never the two merged.
#[test]
fn udp_late_joiner_that_learns_another_live_epoch_after_replaying_reports_the_restart() {
    let d = dir("learnt-late");
    let bus = bus("udp", &d);
    let mut p = bus.publisher("md").unwrap();
    let rec = record_epoch_a(&bus, &mut p);
    drop(rec);
    drop(p);

    let mut sub = mdbus::archive::subscribe_from(&bus, "md", 1).unwrap();
    let mut seen: Vec<String> = Vec::new();
    let mut p: Option<Publisher> = None;
    let mut restarted_epoch = None;
    let start = Instant::now();
    while seen.len() < 141 {
        assert!(start.elapsed().as_secs() < 60, "watchdog: {seen:?}");
        if seen.len() == 100 && p.is_none() {
            let mut b = bus.publisher("md").unwrap();
            for s in 1..=40u64 {
                b.publish(&payload(2, s)).unwrap();
            }
            p = Some(b);
        }
        if let Some(p) = &mut p {
            p.service().unwrap();
        }
        sub.poll(|e| match e {
            Event::Message(m) => {
                let tag = if restarted_epoch.is_some() { 2 } else { 1 };
                assert_eq!(m.payload(), payload(tag, m.seq()), "seq {}", m.seq());
                seen.push(format!("{tag}:{}", m.seq()));
            }
            Event::PublisherRestarted { epoch } => {
                restarted_epoch = Some(epoch);
                seen.push("restarted".into());
            }
            other => seen.push(format!("{other:?}")),
        })
        .unwrap();
    }
    let want: Vec<String> = (1..=100)
        .map(|s| format!("1:{s}"))
        .chain(["restarted".to_string()])
        .chain((1..=40).map(|s| format!("2:{s}")))
        .collect();
    assert_eq!(seen, want);
    assert_eq!(restarted_epoch, sub.epoch());
    let st = sub.replay_stats().unwrap();
    assert_eq!((st.replayed, st.restarts), (100, 1), "{st:?}");
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

fn cfg(d: &Path) -> ArchiveConfig {
    ArchiveConfig {
        dir: d.to_path_buf(),
        segment_bytes: 65536,
        ..ArchiveConfig::default()
    }
}

fn body(seq: u64) -> [u8; 16] {
    payload(0, seq)
}

/// The writer stores the epoch it is told, keeps it across a reopen,
/// seals its archive when told another, and holds what it is given until
/// told the epoch: the archive's own epoch drops what it already holds
/// (counted), another one seals first and keeps everything.
#[test]
fn the_writer_stores_the_epoch_and_seals_on_another() {
    let d = dir("writer");
    {
        let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
        assert_eq!(w.follow_epoch(5).unwrap(), None);
        for s in 1..=10 {
            w.append(s, 0, 0, &body(s)).unwrap();
        }
    }
    let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
    assert_eq!((w.epoch(), w.next_seq()), (5, 11));
    w.hold_until_epoch();
    for s in 1..=15 {
        w.append(s, 0, 0, &body(s)).unwrap();
    }
    assert_eq!(w.next_seq(), 0, "held: nothing counted as recorded yet");
    assert_eq!(w.follow_epoch(5).unwrap(), None);
    assert_eq!((w.next_seq(), w.stats().already_recorded), (16, 10));
    w.hold_until_epoch();
    for s in 1..=3 {
        w.append(s, 0, 0, &body(s)).unwrap();
    }
    let sealed = w.follow_epoch(9).unwrap().expect("epoch 5 sealed");
    assert_eq!(sealed, d.join("epochs").join("000001"));
    assert_eq!((w.epoch(), w.next_seq()), (9, 4));
    drop(w);
    let mut r = ArchiveReader::open(&sealed).unwrap();
    assert_eq!(r.epoch().unwrap(), Some(5));
    let mut r = ArchiveReader::open(&d).unwrap();
    assert_eq!(r.epoch().unwrap(), Some(9));
    let mut n = 0;
    while let Some(Item::Message(m)) = r.next_item().unwrap() {
        n += 1;
        assert_eq!(m.payload(), body(m.seq()));
    }
    assert_eq!(n, 3);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Rewrites the epoch field of a segment's header, its CRC made to match
/// (`crc` false: left stale).
fn forge(seg: &Path, epoch: u64, version: u32, crc: bool) {
    let mut b = std::fs::read(seg).unwrap();
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[40..48].copy_from_slice(&epoch.to_le_bytes());
    if crc {
        let c = crc32c(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
    }
    std::fs::write(seg, b).unwrap();
}

/// CRC32C (Castagnoli), bitwise: the test's own, independent of the
/// library's.
fn crc32c(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn segments(d: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

fn read_all_err(d: &Path) -> String {
    let mut r = ArchiveReader::open(d).unwrap();
    r.seek(1).unwrap();
    loop {
        match r.next_item() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("read to the end without an error"),
            Err(e) => return e.to_string(),
        }
    }
}

/// A forged epoch field is rejected with an error naming the file: one
/// segment claiming another epoch than the others, a version-1 header
/// claiming any, a field changed without its CRC. A version-1 archive
/// (no epoch) still reads, as epoch unknown.
#[test]
fn a_forged_epoch_field_is_rejected_with_a_clear_error() {
    let d = dir("forged");
    {
        let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
        w.follow_epoch(5).unwrap();
        for s in 1..=3000 {
            w.append(s, 0, 0, &body(s)).unwrap();
        }
    }
    let segs = segments(&d);
    assert!(segs.len() >= 2, "{segs:?}");
    let clean = std::fs::read(&segs[0]).unwrap();

    forge(&segs[0], 6, 2, true);
    let e = read_all_err(&d);
    assert!(
        e.contains(&segs[1].display().to_string())
            && e.contains("at byte 40")
            && e.contains("publisher epoch 5, the segments read before it 6")
            && e.contains("one archive holds one epoch"),
        "{e}"
    );

    forge(&segs[0], 7, 2, false);
    let e = read_all_err(&d);
    assert!(
        e.contains(&segs[0].display().to_string()) && e.contains("fails its CRC32C"),
        "{e}"
    );

    forge(&segs[0], 5, 1, true);
    let e = read_all_err(&d);
    assert!(
        e.contains("a version-1 header carries epoch 5 where that version has zeros"),
        "{e}"
    );

    // Version 1 throughout (epoch 0): read as before, epoch unknown; a
    // writer takes the live epoch for it without sealing.
    std::fs::write(&segs[0], &clean).unwrap();
    for s in &segs {
        forge(s, 0, 1, true);
    }
    let mut r = ArchiveReader::open(&d).unwrap();
    assert_eq!(r.epoch().unwrap(), None);
    let mut n = 0;
    while let Some(i) = r.next_item().unwrap() {
        assert!(matches!(i, Item::Message(_)));
        n += 1;
    }
    assert_eq!(n, 3000);
    let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
    assert_eq!(w.epoch(), 0);
    assert_eq!(w.follow_epoch(7).unwrap(), None);
    assert_eq!((w.epoch(), w.next_seq()), (7, 3001));
    drop(w);
    assert!(!d.join("epochs").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Retention by bytes covers the sealed epochs: the total of `DIR` counts
/// them, the oldest goes first, whole, counted, at the seal's reopen and
/// at a rotation; an epoch sealed later is never given a deleted one's
/// number. Sizes: 1,364 records of 48 bytes fill a 64 KiB segment; 1,500
/// records are that closed segment and 136 more (6,592 bytes, the
/// segment cut to them when sealed): 72,128 bytes an epoch.
#[test]
fn retention_by_bytes_deletes_the_oldest_sealed_epochs_first() {
    let d = dir("ret-bytes");
    let cfg = ArchiveConfig {
        retention_bytes: 2 * 65536,
        ..cfg(&d)
    };
    let epochs = d.join("epochs");
    let mut w = ArchiveWriter::open(&cfg).unwrap();
    w.follow_epoch(1).unwrap();
    let fill = |w: &mut ArchiveWriter| {
        for s in 1..=1500 {
            w.append(s, 0, 0, &body(s)).unwrap();
        }
    };
    fill(&mut w);
    w.new_epoch(2).unwrap();
    assert_eq!(names(&epochs), ["000001"]);
    fill(&mut w);
    // Two sealed epochs, 144,256 bytes: the first goes.
    w.new_epoch(3).unwrap();
    assert_eq!(w.stats().epochs_deleted, 1);
    assert_eq!(names(&epochs), ["000001.removed", "000002"]);
    assert!(names(&epochs.join("000001.removed")).is_empty());
    // Epoch 3 closes a segment: 65,536 + 72,128 bytes, the second goes.
    fill(&mut w);
    assert_eq!(w.stats().epochs_deleted, 2);
    assert_eq!(names(&epochs), ["000002.removed"]);
    // The next one sealed is 000003, not a deleted one's number.
    let sealed = w.new_epoch(4).unwrap().unwrap();
    assert_eq!(sealed, epochs.join("000003"));
    assert_eq!(w.stats().epochs_deleted, 2);
    assert_eq!(names(&epochs), ["000002.removed", "000003"]);
    assert_eq!(read(&sealed, 0), (1..=1500).collect::<Vec<_>>());
    let bytes: u64 = segments(&sealed)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(bytes, 72_128);
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Retention by age covers the sealed epochs too (their age is the time
/// they were sealed); a limit they are within keeps them.
#[test]
fn retention_by_age_deletes_sealed_epochs_past_it() {
    for (age, kept) in [
        (std::time::Duration::from_secs(86_400), true),
        (std::time::Duration::from_nanos(1), false),
    ] {
        let d = dir(&format!("ret-age-{kept}"));
        let cfg = ArchiveConfig {
            retention_age: age,
            ..cfg(&d)
        };
        let mut w = ArchiveWriter::open(&cfg).unwrap();
        w.follow_epoch(1).unwrap();
        for s in 1..=10 {
            w.append(s, 0, 0, &body(s)).unwrap();
        }
        w.new_epoch(2).unwrap();
        // Applied when the sealed epoch is counted (the reopen after the
        // seal), at each rotation and whenever the archive is opened.
        assert_eq!(w.stats().epochs_deleted, u64::from(!kept));
        for s in 1..=10 {
            w.append(s, 0, 0, &body(s)).unwrap();
        }
        drop(w);
        let w = ArchiveWriter::open(&cfg).unwrap();
        let epochs = d.join("epochs");
        if kept {
            assert_eq!(names(&epochs), ["000001"]);
        } else {
            assert_eq!(names(&epochs), ["000001.removed"]);
        }
        assert_eq!(w.next_seq(), 11, "the current epoch is not touched");
        drop(w);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
