//! The archive's figures for docs/ARCHIVE.md, all from one run:
//!
//! - the publisher's `publish` latency on shared memory with a recorder
//!   recording the stream and without one (HdrHistogram percentiles), at
//!   a steady rate;
//! - the writer's own throughput (records appended, flushed, no sync);
//! - replay throughput through `ArchiveReader` next to a plain sequential
//!   read of the same segment files;
//! - bytes on disk per million ITCH-sized messages.
//!
//! `cargo run --release --example archive_bench -- [MESSAGES] [RATE] [DIR]`

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mdbus::archive::{ArchiveConfig, ArchiveReader, ArchiveWriter, Item, Recorder};
use mdbus::{Bus, Config};

/// ITCH 5.0 message sizes in a typical day's mix: add order (36),
/// order executed (31), order cancel (23), order delete (19), order
/// replace (35), add order with MPID (40), trade (44).
const ITCH_SIZES: [usize; 10] = [36, 36, 36, 31, 23, 19, 19, 35, 40, 44];

fn size_of(seq: u64) -> usize {
    ITCH_SIZES[(seq % ITCH_SIZES.len() as u64) as usize]
}

fn pct(h: &Histogram<u64>) -> String {
    format!(
        "p50 {} p90 {} p99 {} p99.9 {} p99.99 {} max {} ns",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.value_at_quantile(0.9999),
        h.max()
    )
}

/// Publishes `n` messages at `rate` per second; returns the histogram of
/// each `publish` call, and the recorder's stats when one ran.
fn publish_run(n: u64, rate: u64, dir: Option<&Path>, tag: &str) -> (Histogram<u64>, String) {
    let mut toml = format!(
        "transport = \"shm\"\n[shm]\nprefix = \"mdbus-bench-{}-{tag}\"\n[counters]\nenabled = false\n[streams.md]\nmax_message = 64\n",
        std::process::id()
    );
    if let Some(d) = dir {
        toml.push_str(&format!(
            "[streams.md.archive]\ndir = \"{}\"\n",
            d.display()
        ));
    }
    let bus = Bus::new(Config::from_toml_str(&toml, "<bench>").unwrap()).unwrap();
    let mut p = bus.publisher("md").unwrap();
    let rec = dir.map(|_| Recorder::start(&bus, "md").unwrap());
    let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let mut buf = [0u8; 64];
    let interval = 1_000_000_000 / rate;
    let start = Instant::now();
    for seq in 1..=n {
        let due = Duration::from_nanos(interval * (seq - 1));
        while start.elapsed() < due {
            std::hint::spin_loop();
        }
        buf[..8].copy_from_slice(&seq.to_le_bytes());
        let t = Instant::now();
        p.publish(&buf[..size_of(seq)]).unwrap();
        h.record(t.elapsed().as_nanos() as u64).unwrap();
    }
    let elapsed = start.elapsed();
    let note = match rec {
        Some(r) => {
            while r.stats().last_seq < n && r.stats().running {
                std::thread::yield_now();
            }
            let drained = start.elapsed();
            let st = r.stop();
            format!(
                "recorded {} (overrun {}), {:.0} msgs/s over the run, last record {:.1} ms after the last publish",
                st.recorded,
                st.overrun_messages,
                st.recorded as f64 / drained.as_secs_f64(),
                (drained - elapsed).as_secs_f64() * 1e3
            )
        }
        None => "no recorder".into(),
    };
    (h, note)
}

fn dir_bytes(d: &Path) -> (u64, Vec<PathBuf>) {
    let mut total = 0;
    let mut segs = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        total += e.metadata().unwrap().len();
        if e.path().extension().is_some_and(|x| x == "seg") {
            segs.push(e.path());
        }
    }
    segs.sort();
    (total, segs)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map_or(2_000_000, |s| s.parse().unwrap());
    let rate: u64 = args.get(2).map_or(1_000_000, |s| s.parse().unwrap());
    let base = PathBuf::from(
        args.get(3)
            .cloned()
            .unwrap_or_else(|| std::env::temp_dir().display().to_string()),
    )
    .join(format!("mdbus-archive-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "messages {n}, ITCH-sized payloads (mean {:.1} bytes), dir {}",
        ITCH_SIZES.iter().sum::<usize>() as f64 / ITCH_SIZES.len() as f64,
        base.display()
    );

    // 1. The publisher with and without a recorder.
    let (off, _) = publish_run(n, rate, None, "off");
    let rec_dir = base.join("recorded");
    let (on, note) = publish_run(n, rate, Some(&rec_dir), "on");
    println!("publish at {rate}/s, recording off: {}", pct(&off));
    println!("publish at {rate}/s, recording on:  {}", pct(&on));
    println!("recorder: {note}");

    // 2. The writer flat out.
    let w_dir = base.join("writer");
    let mut w = ArchiveWriter::open(&ArchiveConfig {
        dir: w_dir.clone(),
        segment_bytes: 16 << 20,
        ..ArchiveConfig::default()
    })
    .unwrap();
    let payload = [7u8; 64];
    let t = Instant::now();
    for seq in 1..=n {
        w.append(seq, 0, seq, &payload[..size_of(seq)]).unwrap();
    }
    w.flush().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let st = w.stats();
    drop(w);
    println!(
        "writer: {:.2} M records/s, {:.0} MB/s of records (sync none)",
        n as f64 / secs / 1e6,
        st.bytes as f64 / secs / 1e6
    );

    // 3. Replay through the reader next to a plain read of the files.
    let (total, segs) = dir_bytes(&w_dir);
    let t = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    for s in &segs {
        let mut f = std::fs::File::open(s).unwrap();
        loop {
            let k = f.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            read += k as u64;
        }
    }
    let plain = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut r = ArchiveReader::open(&w_dir).unwrap();
    r.seek(1).unwrap();
    let (mut msgs, mut sum) = (0u64, 0u64);
    while let Some(i) = r.next_item().unwrap() {
        if let Item::Message(m) = i {
            msgs += 1;
            sum += m.payload().len() as u64;
        }
    }
    let replay = t.elapsed().as_secs_f64();
    assert_eq!(msgs, n);
    println!(
        "sequential read of the segment files: {:.0} MB/s ({} bytes in {:.3} s)",
        read as f64 / plain / 1e6,
        read,
        plain
    );
    println!(
        "replay through ArchiveReader: {:.2} M msgs/s, {:.0} MB/s of files ({:.3} s; payload {sum} bytes)",
        msgs as f64 / replay / 1e6,
        read as f64 / replay / 1e6,
        replay
    );

    // 4. Bytes on disk: the closed segments (cut to their used size) and
    // their indexes, per message they hold (the newest segment is still
    // preallocated whole).
    let last = segs.last().unwrap();
    let held: u64 = last
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap()
        - 1;
    let closed: u64 = segs[..segs.len() - 1]
        .iter()
        .map(|s| {
            std::fs::metadata(s).unwrap().len()
                + std::fs::metadata(s.with_extension("idx")).unwrap().len()
        })
        .sum();
    println!(
        "on disk: {closed} bytes for the {held} messages of the closed segments (indexes included): {:.1} MB per million messages ({total} bytes in the directory with the newest segment preallocated)",
        closed as f64 / held as f64
    );
    std::fs::remove_dir_all(&base).unwrap();
}
