//! The archive's files: records written are read back exactly from any
//! sequence, gaps are reported exactly, torn tails are cut, retention
//! deletes whole old segments, and hostile bytes are typed errors or
//! counted stops.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use mdbus::archive::{ArchiveConfig, ArchiveReader, ArchiveWriter, Item, SyncPolicy};

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("archive-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cfg(d: &Path) -> ArchiveConfig {
    ArchiveConfig {
        dir: d.to_path_buf(),
        segment_bytes: 64 << 10,
        ..ArchiveConfig::default()
    }
}

/// The payload of message `seq`: its length and bytes follow from it.
fn payload(seq: u64) -> Vec<u8> {
    let len = 1 + (seq * 7919 % 200) as usize;
    (0..len).map(|i| (seq as usize + i * 31) as u8).collect()
}

fn write(w: &mut ArchiveWriter, seqs: std::ops::RangeInclusive<u64>) {
    for s in seqs {
        w.append(s, 1, s * 10, &payload(s)).unwrap();
    }
}

/// What a reader yields from `from`: messages checked against
/// `payload`, as (seq) and gaps as (from, to) with a marker.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Got {
    M(u64),
    G(u64, u64),
}

fn read(d: &Path, from: u64) -> Vec<Got> {
    let mut out = Vec::new();
    mdbus::archive::read_all(d, from, |i| match i {
        Item::Message(m) => {
            assert_eq!(m.payload(), payload(m.seq()), "payload of {}", m.seq());
            assert_eq!(m.timestamp(), Some(m.seq() * 10));
            out.push(Got::M(m.seq()));
        }
        Item::Gap { from, to } => out.push(Got::G(from, to)),
    })
    .unwrap();
    out
}

fn ms(r: std::ops::RangeInclusive<u64>) -> Vec<Got> {
    r.map(Got::M).collect()
}

fn segments(d: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

#[test]
fn records_read_back_exactly_from_any_sequence_across_segments() {
    let d = dir("roundtrip");
    let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
    write(&mut w, 1..=5000);
    w.flush().unwrap();
    assert!(w.stats().segments_created >= 5, "{:?}", w.stats());
    assert_eq!(w.next_seq(), 5001);
    assert_eq!(read(&d, 1), ms(1..=5000));
    for from in [2, 63, 64, 65, 1000, 2345, 4999, 5000] {
        assert_eq!(read(&d, from), ms(from..=5000), "from {from}");
    }
    assert_eq!(read(&d, 5001), vec![]);
    // The index finds the record: no fallback to a scan.
    let mut r = ArchiveReader::open(&d).unwrap();
    r.seek(3333).unwrap();
    match r.next_item().unwrap() {
        Some(Item::Message(m)) => assert_eq!(m.seq(), 3333),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.stats().index_fallbacks, 0);
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn gaps_are_recorded_and_replayed_with_their_exact_range() {
    let d = dir("gaps");
    let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
    write(&mut w, 5..=9);
    write(&mut w, 15..=16);
    w.gap(17, 25).unwrap();
    w.gap(20, 22).unwrap(); // already covered: nothing
    write(&mut w, 25..=25);
    w.flush().unwrap();
    assert_eq!((w.stats().gaps, w.stats().gap_messages), (2, 13));
    let mut want = vec![Got::G(1, 5)];
    want.extend(ms(5..=9));
    want.push(Got::G(10, 15));
    want.extend(ms(15..=16));
    want.push(Got::G(17, 25));
    want.push(Got::M(25));
    assert_eq!(read(&d, 1), want);
    // A start inside a gap reports the rest of it.
    assert_eq!(read(&d, 20), vec![Got::G(20, 25), Got::M(25)]);
    assert!(
        w.append(3, 0, 0, b"x").is_err(),
        "an earlier sequence is refused"
    );
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_torn_tail_is_cut_on_open_and_appending_continues() {
    let d = dir("torn");
    {
        let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
        write(&mut w, 1..=100);
    }
    let last = segments(&d).pop().unwrap();
    let len = std::fs::metadata(&last).unwrap().len();
    // Half a record after the last valid one, as a crash mid-write leaves.
    let mut rec = Vec::new();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&last)
        .unwrap();
    // Find the end of the records: the first all-zero 24 bytes from the header on.
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    let mut end = 64;
    while buf[end..end + 24].iter().any(|&b| b != 0) {
        let l = u32::from_le_bytes(buf[end..end + 4].try_into().unwrap()) as usize;
        end += (24 + l + 4 + 7) & !7;
    }
    rec.extend_from_slice(&[0x55u8; 17]);
    f.write_all_at(&rec, end as u64).unwrap();
    // A reader stops there, counting it.
    let mut r = ArchiveReader::open(&d).unwrap();
    let mut n = 0;
    while let Some(i) = r.next_item().unwrap() {
        assert!(matches!(i, Item::Message(_)));
        n += 1;
    }
    assert_eq!((n, r.stats().tail_stops), (100, 1));
    let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
    assert_eq!(w.next_seq(), 101);
    assert!(w.stats().torn_bytes_cut > 0);
    write(&mut w, 101..=150);
    w.flush().unwrap();
    assert_eq!(read(&d, 1), ms(1..=150));
    drop(w);
    // A record whose CRC fails is cut the same way, with what follows it.
    let last = segments(&d).pop().unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&last)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 64 + 30).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], 64 + 30).unwrap();
    let w = ArchiveWriter::open(&cfg(&d)).unwrap();
    let first = last
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(
        w.next_seq(),
        first,
        "everything from the damaged record on is cut"
    );
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn retention_by_bytes_deletes_the_oldest_whole_segments() {
    let d = dir("retain");
    let c = ArchiveConfig {
        retention_bytes: 192 << 10,
        ..cfg(&d)
    };
    let mut w = ArchiveWriter::open(&c).unwrap();
    write(&mut w, 1..=10_000);
    w.flush().unwrap();
    let st = w.stats();
    assert!(st.segments_deleted > 0, "{st:?}");
    let closed: u64 = segments(&d)
        .iter()
        .rev()
        .skip(1)
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(closed <= 192 << 10, "{closed}");
    let first = w.first_seq();
    assert!(first > 1);
    let got = read(&d, 1);
    assert_eq!(
        got[0],
        Got::G(1, first),
        "the deleted range is one exact gap"
    );
    assert_eq!(got[1..], ms(first..=10_000)[..]);
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn retention_by_age_deletes_segments_older_than_it() {
    let d = dir("age");
    let c = ArchiveConfig {
        retention_age: std::time::Duration::from_nanos(1),
        ..cfg(&d)
    };
    let mut w = ArchiveWriter::open(&c).unwrap();
    write(&mut w, 1..=3000);
    // Every closed segment is older than 1ns at the next rotation.
    assert!(w.stats().segments_deleted + 1 >= w.stats().segments_created - 1);
    assert!(segments(&d).len() <= 2);
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn sync_policies_sync_when_they_say() {
    let d = dir("sync");
    let mut w = ArchiveWriter::open(&ArchiveConfig {
        sync: SyncPolicy::Every(10),
        ..cfg(&d)
    })
    .unwrap();
    write(&mut w, 1..=100);
    assert_eq!(w.stats().syncs, 10);
    drop(w);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hostile_bytes_are_typed_errors_or_counted_stops_never_panics() {
    let d = dir("hostile");
    {
        let mut w = ArchiveWriter::open(&cfg(&d)).unwrap();
        write(&mut w, 1..=2000);
    }
    let segs = segments(&d);
    assert!(segs.len() >= 3);
    // An index entry pointing past the end: counted, then scanned.
    let idx = segs[1].with_extension("idx");
    let f = std::fs::OpenOptions::new().write(true).open(&idx).unwrap();
    f.write_all_at(&u64::MAX.to_le_bytes(), 24).unwrap();
    let base1 = segs[1]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let mut r = ArchiveReader::open(&d).unwrap();
    r.seek(base1 + 70).unwrap();
    match r.next_item().unwrap() {
        Some(Item::Message(m)) => assert_eq!(m.seq(), base1 + 70),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.stats().index_fallbacks, 1);
    // A flipped byte in a closed segment: an error naming the file.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segs[0])
        .unwrap();
    f.write_all_at(&[0xff], 200).unwrap();
    let mut r = ArchiveReader::open(&d).unwrap();
    let e = loop {
        match r.next_item() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("corruption went unnoticed"),
            Err(e) => break e,
        }
    };
    let text = e.to_string();
    assert!(text.contains(&segs[0].display().to_string()), "{text}");
    // Random damage anywhere: never a panic, never a wrong message.
    let pristine: Vec<Vec<u8>> = segs.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let mut x = 0x9e3779b97f4a7c15u64;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let which = (x % segs.len() as u64) as usize;
        let mut bytes = pristine[which].clone();
        let at = (x >> 20) as usize % bytes.len();
        bytes[at] ^= (x >> 8) as u8 | 1;
        if x % 5 == 0 {
            bytes.truncate(at);
        }
        std::fs::write(&segs[which], &bytes).unwrap();
        let _ = mdbus::archive::read_all(&d, 1 + (x >> 40) % 2000, |i| {
            if let Item::Message(m) = i {
                assert_eq!(m.payload(), payload(m.seq()));
            }
        });
        std::fs::write(&segs[which], &pristine[which]).unwrap();
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_directory_that_is_not_there_is_a_clear_error() {
    let e = ArchiveReader::open("/nonexistent/archive").unwrap_err();
    assert_eq!(
        e.to_string(),
        "archive: /nonexistent/archive: is not a directory"
    );
}

#[test]
fn configuration_errors_name_the_key() {
    let c = ArchiveConfig::default();
    assert_eq!(
        c.check("archive", 232),
        Err((
            "archive.dir".into(),
            "must be set: the archive's directory".into()
        ))
    );
    let c = ArchiveConfig {
        dir: "/a".into(),
        segment_bytes: 1000,
        ..ArchiveConfig::default()
    };
    assert_eq!(
        c.check("archive", 232).unwrap_err().0,
        "archive.segment_bytes"
    );
    let c = ArchiveConfig {
        dir: "/a".into(),
        segment_bytes: 64 << 10,
        ..ArchiveConfig::default()
    };
    assert!(c
        .check("x", 1 << 20)
        .unwrap_err()
        .1
        .contains("cannot hold two"));
    let c = ArchiveConfig {
        dir: "/a".into(),
        retention_bytes: 1,
        ..ArchiveConfig::default()
    };
    assert_eq!(c.check("x", 232).unwrap_err().0, "x.retention_bytes");
    let c = ArchiveConfig {
        dir: "/a".into(),
        sync: SyncPolicy::Every(0),
        ..ArchiveConfig::default()
    };
    assert_eq!(c.check("x", 232).unwrap_err().0, "x.sync");
}
