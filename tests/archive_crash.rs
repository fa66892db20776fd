//! Crash safety: a recorder process is SIGKILLed at twenty random points
//! (seeded); after each, every record that survived is the publisher's
//! (sequence and payload), nothing that was synced is lost, the torn tail
//! is cut on reopen and appending continues from the next sequence.
//!
//! The recorder process is this test binary run again with
//! `MDBUS_ARCHIVE_CRASH_DIR` set: then `crash_helper_recorder` records
//! until it is killed, printing `synced N` after each sync.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mdbus::archive::{ArchiveConfig, ArchiveReader, ArchiveWriter, Item, SyncPolicy};

const ENV: &str = "MDBUS_ARCHIVE_CRASH_DIR";
const SYNC_EVERY: u64 = 50;

fn cfg(d: &Path) -> ArchiveConfig {
    ArchiveConfig {
        dir: d.to_path_buf(),
        segment_bytes: 64 << 10,
        sync: SyncPolicy::Every(SYNC_EVERY),
        ..ArchiveConfig::default()
    }
}

/// The publisher's message `seq`: length and bytes follow from it.
fn payload(seq: u64) -> Vec<u8> {
    let len = 8 + (seq * 7919 % 150) as usize;
    let mut p: Vec<u8> = (0..len).map(|i| (seq as usize ^ (i * 131)) as u8).collect();
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p
}

/// The recorder process (runs only when spawned by the test below).
#[test]
fn crash_helper_recorder() {
    let Some(d) = std::env::var_os(ENV) else {
        return;
    };
    let mut w = ArchiveWriter::open(&cfg(Path::new(&d))).unwrap();
    let start = w.next_seq().max(1);
    println!("start {start} cut {}", w.stats().torn_bytes_cut);
    let mut synced = w.synced_seq();
    // Bounded, so a helper whose test died does not run on.
    for seq in start..start + 2_000_000 {
        w.append(seq, 0, seq, &payload(seq)).unwrap();
        if w.synced_seq() != synced {
            synced = w.synced_seq();
            println!("synced {synced}");
        }
    }
}

/// Every record from 1: the publisher's, contiguous, no gap. Returns the
/// last sequence and whether the reader stopped at a torn tail.
fn verify(d: &Path) -> (u64, u64) {
    let mut r = ArchiveReader::open(d).unwrap();
    r.seek(1).unwrap();
    let mut last = 0;
    while let Some(i) = r.next_item().unwrap() {
        match i {
            Item::Message(m) => {
                assert_eq!(m.seq(), last + 1, "records are contiguous");
                assert_eq!(m.payload(), payload(m.seq()), "payload of {}", m.seq());
                assert_eq!(m.timestamp(), None);
                last = m.seq();
            }
            Item::Gap { from, to } => panic!("a gap {from}..{to} in a crashed archive"),
        }
    }
    (last, r.stats().tail_stops)
}

/// The newest segment and the end of its records.
fn records_end(d: &Path) -> (PathBuf, u64) {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    let seg = segs.pop().unwrap();
    let b = std::fs::read(&seg).unwrap();
    let mut end = 64;
    while end + 24 <= b.len() && b[end..end + 24].iter().any(|&x| x != 0) {
        let l = u32::from_le_bytes(b[end..end + 4].try_into().unwrap()) as usize;
        end += (24 + l + 4 + 7) & !7;
    }
    (seg, end as u64)
}

#[test]
fn sigkill_at_twenty_random_points_loses_nothing_synced_and_corrupts_nothing() {
    let d: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("archive-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut expected_start = 1;
    let mut torn_seen = 0;
    let mut torn_made = 0;
    let mut junk_pending = false;
    for round in 0..20 {
        let mut child = Command::new(&exe)
            .args([
                "crash_helper_recorder",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV, &d)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let kill_after = 1 + next() % 40;
        let mut synced_to = 0;
        let mut seen = 0;
        let mut started = false;
        for line in lines.by_ref() {
            let line = line.unwrap();
            // libtest writes the test's name before its first line.
            if let Some(rest) = line.split_once("start ").map(|(_, r)| r) {
                started = true;
                let mut it = rest.split(" cut ");
                let start: u64 = it.next().unwrap().parse().unwrap();
                assert_eq!(
                    start, expected_start,
                    "round {round}: appending continues after the last valid record"
                );
                let cut: u64 = it.next().unwrap().parse().unwrap();
                if junk_pending {
                    assert!(cut > 0, "round {round}: the torn tail was not cut");
                    torn_seen += 1;
                }
            } else if let Some(s) = line.strip_prefix("synced ") {
                synced_to = s.parse().unwrap();
                seen += 1;
                if seen == kill_after {
                    break;
                }
            }
        }
        // SIGKILL while it goes on writing: the point within a write,
        // a flush or a rotation is wherever the child is by now.
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            seen, kill_after,
            "round {round}: the recorder stopped early"
        );
        assert!(started, "round {round}: no start line");
        let (last, _tail) = verify(&d);
        assert!(
            last >= synced_to,
            "round {round}: synced up to {synced_to} but only {last} survived"
        );
        expected_start = last + 1;
        // A kill lands between the recorder's writes; a power loss can
        // also leave half a record. Every other round gets one (random
        // bytes after the last record), which the next open must cut.
        if round % 2 == 1 && round < 19 {
            let len = 1 + (next() % 300) as usize;
            let junk: Vec<u8> = (0..len).map(|_| next() as u8 | 1).collect();
            let (seg, end) = records_end(&d);
            let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &junk, end).unwrap();
            torn_made += 1;
        }
        junk_pending = round % 2 == 1;
    }
    assert_eq!(torn_seen, torn_made, "every torn tail was found and cut");
    // Reopened here: the tail is cut and appending continues.
    let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
    assert_eq!(w.next_seq(), expected_start);
    for seq in expected_start..expected_start + 100 {
        w.append(seq, 0, seq, &payload(seq)).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(verify(&d), (expected_start + 99, 0));
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}
