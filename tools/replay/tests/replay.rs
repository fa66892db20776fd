//! mdbus-replay as a user runs it: the built binary, real subscriber
//! processes, shared memory and UDP multicast on the loopback. Inputs are
//! made here (a synthetic day, captures written with the feed crate).
//! Nothing asserts on speed: the assertions are counts, files, their
//! contents and error text; a stall's mark on the histogram is a property
//! of the accounting, not a timing.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hdrhistogram::Histogram;
use mdbus_feed::binaryfile::BinaryFileReader;
use mdbus_feed::mdcap::MdcapWriter;
use mdbus_feed::moldudp64::Session;
use mdbus_feed::pcap::CaptureWriter;
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
use mdbus_replay::hlog::HlogReader;
use mdbus_replay::schedule::{Rate, Scheduler};
use mdbus_tool_support::output::check_convention;
use serde_json::Value;

/// Hostile captures, pipes, FIFOs, signals and --duration.
#[path = "replay/hostile.rs"]
mod hostile;

const REPLAY: &str = env!("CARGO_BIN_EXE_mdbus-replay");

/// Only a guard against a hang turning into a stuck test run.
const HANG_GUARD: Duration = Duration::from_secs(300);

/// Options for runs that must finish whatever else the machine does:
/// tests run side by side on few cores, so polling processes yield.
const SHARED_MACHINE: [&str; 4] = ["--wait", "yield", "--timeout", "120"];

/// A directory of its own per test (removed at the end), with a bus
/// configuration keeping shared-memory segments in it.
struct Scratch {
    dir: PathBuf,
    config: String,
}

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("replay-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        let config = dir.join("bus.toml");
        std::fs::write(
            &config,
            format!("[shm]\ndir = {:?}\n", dir.display().to_string()),
        )
        .expect("write config");
        Scratch {
            config: config.display().to_string(),
            dir,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs mdbus-replay, failing the test if it is still running after
/// [`HANG_GUARD`].
fn replay(args: &[&str]) -> Output {
    replay_with(args, None, |_| {})
}

/// Runs mdbus-replay with `stdin` written to its standard input (none:
/// /dev/null), calls `started` with its pid, and fails the test if it is
/// still running after [`HANG_GUARD`].
fn replay_with(args: &[&str], stdin: Option<Vec<u8>>, started: impl FnOnce(u32)) -> Output {
    let mut child = Command::new(REPLAY)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mdbus-replay");
    if let (Some(bytes), Some(mut input)) = (stdin, child.stdin.take()) {
        std::thread::spawn(move || input.write_all(&bytes));
    }
    started(child.id());
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let mut o = Vec::new();
        let mut e = Vec::new();
        let _ = out.read_to_end(&mut o);
        let _ = err.read_to_end(&mut e);
        let _ = tx.send((o, e));
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok((stdout, stderr)) => Output {
            status: child.wait().expect("wait for mdbus-replay"),
            stdout,
            stderr,
        },
        Err(_) => {
            let _ = child.kill();
            panic!("mdbus-replay {args:?} (pid {pid}) still running after {HANG_GUARD:?}");
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs and parses the one JSON object of a successful run.
fn replay_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = replay(&all);
    assert!(
        out.status.success(),
        "mdbus-replay {all:?} failed ({}):\n{}",
        out.status,
        stderr(&out)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    // All of stdout is one object, in the tools' convention.
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    assert_eq!(v["tool"], "mdbus-replay");
    assert_eq!(v["command"], all[0], "{v}");
    v
}

/// The latency count of a run (or a subscriber, or a report's log).
fn count(v: &Value) -> u64 {
    u(&v["latency_ns"], "count")
}

/// Messages dropped, all reasons.
fn dropped(v: &Value) -> u64 {
    v["drops"]
        .as_object()
        .unwrap_or_else(|| panic!("no drops object in {v}"))
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not an unsigned integer in {v}"))
}

/// A synthetic day of `messages` messages whose trading lasts
/// `seconds` (after the half-hour pre-open, which --max-gap shortens).
fn synth(s: &Scratch, name: &str, messages: u64, seconds: u64) -> String {
    let path = s.path(name);
    let close = format!("09:30:{seconds:02}");
    let out = replay(&[
        "synth",
        "--messages",
        &messages.to_string(),
        "--symbols",
        "20",
        "--close",
        &close,
        "--out",
        &path,
    ]);
    assert!(out.status.success(), "synth failed: {}", stderr(&out));
    path
}

/// Reads a log back with our reader: its intervals and their sum.
fn read_log(path: &str) -> (Vec<(Duration, Histogram<u64>)>, Histogram<u64>) {
    let mut r = HlogReader::open(Path::new(path)).unwrap_or_else(|e| panic!("{e}"));
    let mut intervals = Vec::new();
    let mut total = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    while let Some(i) = r.next_interval().unwrap_or_else(|e| panic!("{e}")) {
        total.add(&i.histogram).unwrap();
        intervals.push((i.start, i.histogram));
    }
    (intervals, total)
}

/// Every output file is there and holds what it should.
fn check_outputs(out_dir: &str, summary: &Value) {
    let dir = Path::new(out_dir);
    let count = count(summary);
    let (intervals, total) = read_log(&dir.join("latency.hlog").display().to_string());
    assert!(!intervals.is_empty());
    assert_eq!(total.len(), count, "the log's count is the summary's");
    assert_eq!(total.max(), u(&summary["latency_ns"], "max"));
    assert_eq!(
        total.value_at_quantile(0.99),
        u(&summary["latency_ns"], "p99")
    );
    assert_eq!(total.min(), u(&summary["latency_ns"], "min"));

    let hlog = std::fs::read_to_string(dir.join("latency.hlog")).unwrap();
    assert!(
        hlog.contains("#[Histogram log format version 1.3]\n"),
        "{hlog}"
    );
    assert!(hlog.contains(
        "\n\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"
    ));
    assert!(hlog.contains("#[StartTime: "));

    let hgrm = std::fs::read_to_string(dir.join("latency.hgrm")).unwrap();
    let lines: Vec<&str> = hgrm.lines().collect();
    assert_eq!(
        lines[0],
        "       Value     Percentile TotalCount 1/(1-Percentile)"
    );
    let footer = lines[lines.len() - 2];
    assert!(
        footer.ends_with(&format!("Total count    = {count:12}]")),
        "{footer}"
    );
    let last_row = lines[lines.len() - 4];
    assert!(
        last_row.contains(" 1.000000000000 ") && last_row.trim_end().ends_with(&count.to_string()),
        "{last_row}"
    );

    let svg = std::fs::read_to_string(dir.join("percentiles.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "not an SVG");
    for label in [
        "percentile",
        "latency (µs, log scale)",
        "\n90%\n",
        "\n99%\n",
        "\n99.9%\n",
    ] {
        assert!(svg.contains(label), "percentiles.svg lacks {label:?}");
    }
    let svg = std::fs::read_to_string(dir.join("timeline.svg")).unwrap();
    for label in ["time since the start", "\np50\n", "\np99\n", "\nmax\n"] {
        assert!(svg.contains(label), "timeline.svg lacks {label:?}");
    }
}

fn check_contract_keys(v: &Value) {
    for key in ["messages", "gaps"] {
        u(v, key);
    }
    for reason in ["overrun_messages", "gap_messages", "unaccounted_messages"] {
        u(&v["drops"], reason);
    }
    assert_eq!(v["lost"], false, "{v}");
    assert!(v["msgs_per_sec"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    let p: Vec<u64> = ["min", "p50", "p90", "p99", "p999", "p9999", "max"]
        .iter()
        .map(|k| u(&v["latency_ns"], k))
        .collect();
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "out of order: {v}");
}

#[test]
fn shm_at_max_delivers_every_message_and_writes_every_file() {
    let s = Scratch::new("shm-max");
    let input = synth(&s, "day.itch", 3000, 2);
    let out = s.path("out");
    let v = replay_json(&[
        "run",
        &input,
        "--transport",
        "shm",
        "--rate",
        "max",
        "--out",
        &out,
        "--config",
        &s.config,
        "--wait",
        "yield",
        "--timeout",
        "120",
    ]);
    check_contract_keys(&v);
    assert_eq!(u(&v, "messages"), 3000, "{v}");
    assert_eq!(count(&v), 3000, "{v}");
    assert_eq!(dropped(&v), 0, "{v}");
    assert_eq!(u(&v, "gaps"), 0, "{v}");
    assert_eq!(v["format"], "binaryfile");
    assert_eq!(v["transport"], "shm");
    assert_eq!(v["rate"], "max");
    check_outputs(&out, &v);
}

#[test]
fn shm_at_a_scaled_rate_to_two_subscribers() {
    let s = Scratch::new("shm-scaled");
    let input = synth(&s, "day.itch", 2000, 2);
    let out = s.path("out");
    let mut args = vec![
        "run",
        &input,
        "--rate",
        "20x",
        "--max-gap",
        "1ms",
        "--interval",
        "10ms",
        "--subscribers",
        "2",
        "--out",
        &out,
        "--config",
        &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    check_contract_keys(&v);
    assert_eq!(u(&v, "messages"), 2000);
    assert_eq!(count(&v), 4000, "every subscriber receives every message");
    assert_eq!(dropped(&v), 0, "{v}");
    let subs = v["per_subscriber"].as_array().unwrap();
    assert_eq!(subs.len(), 2);
    for sub in subs {
        assert_eq!(u(sub, "received"), 2000, "{sub}");
        assert_eq!(count(sub), 2000, "{sub}");
        assert_eq!(dropped(sub), 0, "{sub}");
        assert_eq!(u(sub, "last_seq"), 2000, "{sub}");
        assert!(Path::new(&out)
            .join(format!("subscribers/subscriber-{}.hlog", u(sub, "index")))
            .is_file());
    }
    check_outputs(&out, &v);
    // Trading lasts 2 s of capture time: 100 ms at 20x, so several 10 ms
    // intervals.
    let (intervals, _) = read_log(&format!("{out}/latency.hlog"));
    assert!(intervals.len() >= 5, "{} intervals", intervals.len());
}

/// `--wait adaptive`: subscribers sleep on the segment's doorbell between
/// messages a few milliseconds apart and still receive every one, and the
/// run ends.
#[test]
fn shm_with_adaptive_waiting_delivers_every_message() {
    let s = Scratch::new("shm-adaptive");
    let input = synth(&s, "day.itch", 300, 2);
    let out = s.path("out");
    let v = replay_json(&[
        "run",
        &input,
        "--rate",
        "4x",
        "--max-gap",
        "5ms",
        "--subscribers",
        "2",
        "--out",
        &out,
        "--config",
        &s.config,
        "--wait",
        "adaptive",
        "--timeout",
        "120",
    ]);
    check_contract_keys(&v);
    assert_eq!(u(&v, "messages"), 300, "{v}");
    assert_eq!(count(&v), 600, "{v}");
    assert_eq!(dropped(&v), 0, "{v}");
    for sub in v["per_subscriber"].as_array().unwrap() {
        assert_eq!(u(sub, "received"), 300, "{sub}");
        assert_eq!(u(sub, "last_seq"), 300, "{sub}");
    }
}

#[test]
fn udp_on_the_loopback_at_max_and_at_a_scaled_rate() {
    let s = Scratch::new("udp");
    let input = synth(&s, "day.itch", 3000, 2);
    for (rate, dir) in [("max", "max"), ("50x", "scaled")] {
        let out = s.path(dir);
        let mut args = vec![
            "run",
            &input,
            "--transport",
            "udp",
            "--rate",
            rate,
            "--max-gap",
            "1ms",
            "--out",
            &out,
        ];
        args.extend(SHARED_MACHINE);
        let v = replay_json(&args);
        check_contract_keys(&v);
        assert_eq!(v["transport"], "udp");
        assert_eq!(count(&v), 3000, "{rate}: {v}");
        assert_eq!(dropped(&v), 0, "{rate}: {v}");
        assert_eq!(u(&v, "gaps"), 0, "{rate}: {v}");
        check_outputs(&out, &v);
    }
}

#[test]
fn a_stall_in_the_subscriber_shows_in_the_tail_and_in_its_interval() {
    let s = Scratch::new("stall");
    let input = synth(&s, "day.itch", 3000, 2);
    let out = s.path("out");
    let (stall_every, stall_us) = (1000u64, 20_000u64);
    let interval_ms = 10u64;
    let mut args = vec![
        "run",
        &input,
        "--rate",
        "20x",
        "--max-gap",
        "1ms",
        "--interval",
        "10ms",
        "--stall-every",
        "1000",
        "--stall-us",
        "20000",
        "--out",
        &out,
        "--config",
        &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    assert_eq!(count(&v), 3000);
    assert_eq!(u(&v["per_subscriber"][0], "stalls"), 3);
    let stall_ns = stall_us * 1000;
    // Each stalled message waited the whole stall after its intended
    // send time (it had arrived before the stall began): at least one
    // latency per stall is at least the stall.
    assert!(
        u(&v["latency_ns"], "max") >= stall_ns,
        "max {} < stall {stall_ns}",
        u(&v["latency_ns"], "max")
    );
    let (intervals, total) = read_log(&format!("{out}/latency.hlog"));
    assert!(total.count_between(stall_ns, u64::MAX) >= 3, "{v}");
    // The interval holding each stalled message (by its intended time,
    // from the same schedule the replay used) shows the stall.
    let mut sched = Scheduler::new(Rate::Speed(20.0), Some(Duration::from_millis(1)));
    let mut r = BinaryFileReader::new(std::fs::File::open(&input).unwrap());
    let mut n = 0u64;
    while let Some(m) = r.next_message().unwrap() {
        n += 1;
        let mut ts = [0u8; 8];
        ts[2..].copy_from_slice(&m[5..11]);
        let offset = sched.offset(u64::from_be_bytes(ts));
        if n % stall_every == 0 {
            let index = offset / (interval_ms * 1_000_000);
            let start = Duration::from_millis(index * interval_ms);
            let (_, h) = intervals
                .iter()
                .find(|(t, _)| *t == start)
                .unwrap_or_else(|| panic!("no interval at {start:?} for message {n}"));
            assert!(
                h.max() >= stall_ns,
                "interval at {start:?} (message {n}) has max {} < {stall_ns}",
                h.max()
            );
        }
    }
    assert_eq!(n, 3000);
}

/// A pcap of a synthetic day in MoldUDP64 packets, each sent twice (an
/// A and a B line); returns the number of messages.
fn write_pcap(path: &str, messages: u64, twice: bool) -> u64 {
    let day = Generator::new(&SynthConfig {
        symbols: 5,
        order_messages: messages,
        ..SynthConfig::default()
    })
    .unwrap();
    let mut packer = MoldPacker::new(day, Session::new("REPLAY").unwrap(), 1, 1200).unwrap();
    let mut w = CaptureWriter::create(path).unwrap();
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 30000);
    let a = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 1), 26400);
    let b = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 2), 26400);
    let mut total = 0;
    let base = 1_700_000_000_000_000_000u64;
    while let Some(p) = packer.next_packet() {
        let packet = mdbus_feed::moldudp64::Packet::parse(p.bytes).unwrap();
        total += u64::from(packet.message_count());
        // Packets a microsecond apart: the capture lasts milliseconds.
        let ts = base + total * 1000;
        w.write_udp(ts, src, a, p.bytes).unwrap();
        if twice {
            w.write_udp(ts + 100, src, b, p.bytes).unwrap();
        }
    }
    w.finish().unwrap();
    total
}

#[test]
fn a_pcap_of_two_lines_replays_each_message_once() {
    let s = Scratch::new("pcap");
    let pcap = s.path("feed.pcap");
    let messages = write_pcap(&pcap, 1000, true);
    let out = s.path("out");
    let mut args = vec![
        "run", &pcap, "--rate", "10x", "--out", &out, "--config", &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    assert_eq!(v["format"], "pcap");
    assert_eq!(u(&v, "messages"), messages);
    assert_eq!(count(&v), messages);
    assert_eq!(u(&v, "duplicates"), messages, "the B line's copies");
    assert_eq!(dropped(&v), 0);
}

/// A small synthetic day (3 symbols, 500 order messages).
fn small_day() -> Generator {
    Generator::new(&SynthConfig {
        symbols: 3,
        order_messages: 500,
        ..SynthConfig::default()
    })
    .unwrap()
}

#[test]
fn an_mdcap_capture_replays() {
    let s = Scratch::new("mdcap");
    let path = s.path("relay.mdcap");
    let mut w = MdcapWriter::create(&path).unwrap();
    let day = small_day();
    let mut n = 0;
    for (i, m) in day.enumerate() {
        w.write(
            1_700_000_000_000_000_000 + i as u64 * 2_000,
            i as u64 + 1,
            m.bytes(),
        )
        .unwrap();
        n += 1;
    }
    w.finish().unwrap();
    let out = s.path("out");
    let mut args = vec![
        "run", &path, "--rate", "1x", "--out", &out, "--config", &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    assert_eq!(v["format"], "mdcap");
    assert_eq!(count(&v), n);
    check_outputs(&out, &v);
}

#[test]
fn an_archive_directory_replays_like_a_capture() {
    use mdbus::archive::{ArchiveConfig, ArchiveWriter};
    let s = Scratch::new("archive");
    let dir = s.dir.join("archive");
    let mut w = ArchiveWriter::open(&ArchiveConfig {
        dir: dir.clone(),
        segment_bytes: 64 << 10,
        ..ArchiveConfig::default()
    })
    .unwrap();
    let day = small_day();
    let mut n = 0;
    for (i, m) in day.enumerate() {
        // Stamped as a stream with `timestamps = true` records them.
        let ts = 1_700_000_000_000_000_000 + i as u64 * 2_000;
        w.append(i as u64 + 1, 1, ts, m.bytes()).unwrap();
        n += 1;
    }
    // A range the recorder never received is counted, not replayed.
    w.gap(n + 1, n + 11).unwrap();
    drop(w);
    let out = s.path("out");
    let path = dir.display().to_string();
    let mut args = vec![
        "run",
        &path,
        "--rate",
        "1x",
        "--out",
        &out,
        "--config",
        &s.config,
        "--allow-loss",
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    assert_eq!(v["format"], "archive");
    assert_eq!(count(&v), n);
    assert_eq!(v["skipped"]["unrecoverable"], 10, "{v}");
    check_outputs(&out, &v);
}

/// Runs and expects exit status 2 with one line on stderr.
fn refused(args: &[&str]) -> String {
    let out = replay(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected exit 2 from {args:?}, got {} with:\n{}",
        out.status,
        stderr(&out)
    );
    assert!(out.stdout.is_empty(), "nothing on stdout");
    stderr(&out)
}

fn run_refused(s: &Scratch, input: &str) -> String {
    refused(&["run", input, "--out", &s.path("out"), "--config", &s.config])
}

#[test]
fn a_truncated_pcap_is_named_with_where_it_ends() {
    let s = Scratch::new("truncated");
    let pcap = s.path("feed.pcap");
    write_pcap(&pcap, 200, false);
    let bytes = std::fs::read(&pcap).unwrap();
    // Cut in the middle of the last packet record.
    std::fs::write(&pcap, &bytes[..bytes.len() - 30]).unwrap();
    let err = run_refused(&s, &pcap);
    assert!(
        err.contains(&format!(
            "mdbus-replay: {pcap} is truncated: the file ends inside record"
        )),
        "{err}"
    );
    // Cut inside the file header.
    std::fs::write(&pcap, &bytes[..10]).unwrap();
    let err = run_refused(&s, &pcap);
    assert!(
        err.contains(&format!(
            "{pcap} is truncated: the file ends inside the 24-byte pcap file header"
        )),
        "{err}"
    );
}

#[test]
fn a_pcap_of_other_traffic_says_it_holds_no_moldudp64() {
    let s = Scratch::new("other-traffic");
    let pcap = s.path("dns.pcap");
    let mut w = CaptureWriter::create(&pcap).unwrap();
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5353);
    let dst = SocketAddrV4::new(Ipv4Addr::new(224, 0, 0, 251), 5353);
    for i in 0..5u8 {
        w.write_udp(1_700_000_000_000_000_000, src, dst, &[i; 13])
            .unwrap();
    }
    w.write_udp(
        1_700_000_000_000_000_001,
        src,
        dst,
        b"hello, this is not a MoldUDP64 packet at all",
    )
    .unwrap();
    w.finish().unwrap();
    let err = run_refused(&s, &pcap);
    assert!(
        err.contains(&format!(
            "mdbus-replay: {pcap} holds no MoldUDP64 messages: 6 packets, 6 of them UDP/IPv4 \
             datagrams; skipped: 5 malformed_short_header, 1 malformed_bad_block_length"
        )),
        "{err}"
    );
}

#[test]
fn an_empty_file_is_named() {
    let s = Scratch::new("empty");
    let empty = s.path("empty.itch");
    std::fs::write(&empty, b"").unwrap();
    let err = run_refused(&s, &empty);
    assert_eq!(
        err.trim_end(),
        format!("mdbus-replay: {empty} is empty: there is nothing to replay")
    );
}

#[test]
fn a_file_of_no_known_format_says_what_it_starts_with() {
    let s = Scratch::new("unknown");
    let text = s.path("notes.txt");
    std::fs::write(&text, b"hello world, these are notes\n").unwrap();
    let err = run_refused(&s, &text);
    assert!(
        err.contains(&format!(
            "mdbus-replay: {text} is not a capture mdbus-replay reads: it starts with bytes 68 65 \
             6c 6c 6f 20 77 6f (\"hello wo\"), which is no pcap, pcapng or mdcap magic number, \
             and read as an ITCH 5.0 BinaryFILE"
        )),
        "{err}"
    );
    let missing = s.path("missing.pcap");
    let err = run_refused(&s, &missing);
    assert!(err.contains(&format!("cannot read {missing}: ")), "{err}");
}

#[test]
fn a_corrupt_hlog_is_named_with_its_line() {
    let s = Scratch::new("corrupt-hlog");
    let input = synth(&s, "day.itch", 500, 1);
    let out = s.path("good");
    let v = replay_json(&[
        "run",
        &input,
        "--rate",
        "max",
        "--out",
        &out,
        "--config",
        &s.config,
        "--wait",
        "yield",
        "--timeout",
        "120",
    ]);
    let good = format!("{out}/latency.hlog");
    let text = std::fs::read_to_string(&good).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let interval_line = lines.iter().position(|l| l.starts_with("0.000,")).unwrap();

    // A line that is no part of a log.
    let bad = s.path("garbage.hlog");
    let mut garbled = lines.clone();
    garbled.insert(interval_line, "this line is garbage");
    std::fs::write(&bad, garbled.join("\n")).unwrap();
    let err = refused(&["report", &bad, "--out", &s.path("r")]);
    assert!(
        err.contains(&format!(
            "mdbus-replay: {bad} line {} is not an interval log line",
            interval_line + 1
        )) && err.contains("\"this line is garbage\""),
        "{err}"
    );

    // A histogram whose bytes are damaged.
    let bad = s.path("damaged.hlog");
    let mut damaged = lines.clone();
    let fields: Vec<&str> = lines[interval_line].splitn(4, ',').collect();
    let broken = format!(
        "{},{},{},HISTFAAAA{}",
        fields[0],
        fields[1],
        fields[2],
        &fields[3][12..]
    );
    damaged[interval_line] = &broken;
    std::fs::write(&bad, damaged.join("\n")).unwrap();
    let err = refused(&["report", &bad, "--out", &s.path("r")]);
    assert!(
        err.contains(&format!(
            "mdbus-replay: {bad} line {}: the interval's histogram does not decode: ",
            interval_line + 1
        )),
        "{err}"
    );

    // An empty log, and one with only comments.
    let empty = s.path("empty.hlog");
    std::fs::write(&empty, b"").unwrap();
    let err = refused(&["report", &empty]);
    assert!(
        err.contains(&format!(
            "{empty} is empty: an interval log holds at least one histogram line"
        )),
        "{err}"
    );
    let header = s.path("header.hlog");
    std::fs::write(&header, lines[..interval_line].join("\n")).unwrap();
    let err = refused(&["report", &header]);
    assert!(
        err.contains(&format!("{header} holds no interval histograms")),
        "{err}"
    );
    assert_eq!(count(&v), 500);
}

#[test]
fn report_puts_logs_side_by_side_with_ratios() {
    let s = Scratch::new("report");
    let input = synth(&s, "day.itch", 1000, 1);
    let mut logs = Vec::new();
    let mut counts = Vec::new();
    for (i, subs) in ["1", "2"].iter().enumerate() {
        let out = s.path(&format!("run{i}"));
        let mut args = vec![
            "run",
            &input,
            "--rate",
            "max",
            "--subscribers",
            subs,
            "--out",
            &out,
            "--config",
            &s.config,
        ];
        args.extend(SHARED_MACHINE);
        let v = replay_json(&args);
        counts.push(count(&v));
        logs.push(format!("{out}/latency.hlog"));
    }
    let rdir = s.path("compare");
    let r = replay_json(&["report", &logs[0], &logs[1], "--out", &rdir]);
    let entries = r["logs"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(count(&entries[0]), counts[0]);
    assert_eq!(count(&entries[1]), counts[1]);
    assert_eq!(entries[0]["ratio_to_first"]["at_p99"].as_f64(), Some(1.0));
    let expected =
        u(&entries[1]["latency_ns"], "p99") as f64 / u(&entries[0]["latency_ns"], "p99") as f64;
    // JSON's shortest decimal may differ from the quotient in the last bit.
    let ratio = entries[1]["ratio_to_first"]["at_p99"].as_f64().unwrap();
    assert!(
        (ratio - expected).abs() <= expected * 1e-12,
        "{ratio} {expected}"
    );
    let svg = std::fs::read_to_string(Path::new(&rdir).join("report.svg")).unwrap();
    assert!(svg.contains("run0/latency.hlog") && svg.contains("run1/latency.hlog"));
    // The table: a column per log, ratios in parentheses.
    let out = replay(&["report", &logs[0], &logs[1], "--out", &rdir]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("one-way latency, µs (ratio to the first log)"),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.trim_start().starts_with("p99.9 ")),
        "{table}"
    );
    assert!(table.contains("x)"), "{table}");
}

#[test]
fn synth_writes_exactly_the_messages_asked_for_deterministically() {
    let s = Scratch::new("synth");
    let a = synth(&s, "a.itch", 5000, 10);
    // --json: one object in the convention, the counts by type adding up.
    let c = s.path("c.itch");
    let v = replay_json(&[
        "synth",
        "--messages",
        "5000",
        "--symbols",
        "20",
        "--close",
        "09:30:10",
        "--out",
        &c,
    ]);
    assert_eq!(u(&v, "messages"), 5000, "{v}");
    let by_type: u64 = v["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| u(t, "messages"))
        .sum();
    assert_eq!(by_type, 5000, "{v}");
    assert_eq!(v["types"][0]["type"], "A", "type-letter order: {v}");
    assert_eq!(std::fs::read(&c).unwrap(), std::fs::read(&a).unwrap());
    let b = synth(&s, "b.itch", 5000, 10);
    let bytes = std::fs::read(&a).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(&b).unwrap(),
        "same options, same bytes"
    );
    let mut r = BinaryFileReader::new(&bytes[..]);
    let mut types = Vec::new();
    while let Some(m) = r.next_message().unwrap() {
        mdbus_feed::itch::decode(m).unwrap();
        types.push(m[0]);
    }
    assert_eq!(types.len(), 5000);
    assert_eq!(types[0], b'S', "start of messages first");
    let directory_end = types.iter().position(|&t| t != b'R' && t != b'S').unwrap();
    assert_eq!(
        types[1..directory_end]
            .iter()
            .filter(|&&t| t == b'R')
            .count(),
        20,
        "a stock directory message per symbol, before anything else"
    );
    let core = types.iter().filter(|t| b"AFXDUEC".contains(t)).count();
    assert!(
        core * 10 > types.len() * 8,
        "order messages dominate: {core}"
    );
}

#[test]
fn verbs_without_an_rdma_device_is_refused_in_one_line() {
    if Path::new("/sys/class/infiniband").is_dir() {
        eprintln!("SKIPPED: this machine has RDMA devices; the guest run covers verbs");
        return;
    }
    let s = Scratch::new("verbs");
    let input = synth(&s, "day.itch", 100, 1);
    let err = refused(&[
        "run",
        &input,
        "--transport",
        "verbs",
        "--out",
        &s.path("out"),
    ]);
    assert!(err.starts_with("mdbus-replay: transport verbs"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let s = Scratch::new("usage");
    let input = synth(&s, "day.itch", 100, 1);
    let out = s.path("out");
    for (args, want) in [
        (
            vec!["run", &input, "--out", &out, "--rate", "fast"],
            "expected max or a speed",
        ),
        (
            vec!["run", &input, "--out", &out, "--interval", "10us"],
            "--interval must be at least 1ms",
        ),
        (
            vec!["run", &input, "--out", &out, "--gid-index", "1"],
            "--gid-index applies to --transport verbs only",
        ),
        (vec!["run", &input], "--out"),
    ] {
        let err = refused(&args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Python or its `hdrhistogram` package cannot be had: a SKIPPED line,
/// or a failure under CI.
fn missing(why: &str) {
    mdbus_testkit::skip(
        "the Python cross-check of the .hlog",
        mdbus_testkit::Lack::Tool,
        why,
    );
}

/// A Python virtual environment with the reference `hdrhistogram`
/// package, under the target directory; `None` (and a SKIPPED line, or a
/// failure under CI) where Python or the package cannot be had.
fn python_with_hdrhistogram() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hdr-venv");
    let python = venv.join("bin/python");
    let has_package = |py: &Path| {
        Command::new(py)
            .args(["-c", "import hdrh.histogram, hdrh.log"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if python.exists() && has_package(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output();
    match made {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            missing(&format!(
                "python3 -m venv failed (install python3-venv): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            return None;
        }
        Err(e) => {
            missing(&format!("python3 is not available: {e}"));
            return None;
        }
    }
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "hdrhistogram"])
        .output();
    match pip {
        Ok(o) if o.status.success() && has_package(&python) => Some(python),
        Ok(o) => {
            missing(&format!(
                "pip install hdrhistogram failed (no network?): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            None
        }
        Err(e) => {
            missing(&format!("cannot run pip: {e}"));
            None
        }
    }
}

/// The value at `rank` (1-based) of `h`: the top of the bucket where the
/// running count reaches it, as HdrHistogram reports percentiles.
fn value_at_rank(h: &Histogram<u64>, rank: u64) -> u64 {
    let mut running = 0;
    for v in h.iter_recorded() {
        running += v.count_at_value();
        if running >= rank {
            return h.highest_equivalent(v.value_iterated_to());
        }
    }
    h.max()
}

#[test]
fn the_python_reference_reads_our_log_and_agrees() {
    let Some(python) = python_with_hdrhistogram() else {
        return;
    };
    let s = Scratch::new("python");
    let input = synth(&s, "day.itch", 3000, 2);
    let out = s.path("out");
    let mut args = vec![
        "run",
        &input,
        "--rate",
        "20x",
        "--max-gap",
        "1ms",
        "--interval",
        "10ms",
        "--subscribers",
        "2",
        "--out",
        &out,
        "--config",
        &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/hdr-check.py");
    let checked = Command::new(&python)
        .arg(&script)
        .arg(format!("{out}/latency.hlog"))
        .arg(format!("{out}/latency.hgrm"))
        .output()
        .expect("run hdr-check.py");
    assert!(
        checked.status.success(),
        "hdr-check.py failed: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let py: Value = serde_json::from_slice(&checked.stdout).unwrap();
    let (intervals, ours) = read_log(&format!("{out}/latency.hlog"));
    assert_eq!(u(&py, "intervals"), intervals.len() as u64);
    // The same histogram: identical count and maximum.
    assert_eq!(u(&py, "count"), count(&v));
    assert_eq!(u(&py, "count"), 6000);
    assert_eq!(u(&py, "max"), u(&v["latency_ns"], "max"));
    assert_eq!(u(&py, "min"), ours.min());
    assert_eq!(u(&py, "min"), u(&v["latency_ns"], "min"));
    // Percentiles compared exactly. The two implementations pick the
    // rank differently (Python rounds p * count to the nearest, Rust
    // takes the ceiling): where the ranks agree the values must be equal;
    // where they differ, Python's value must be ours at Python's rank.
    for (key, p) in [
        ("p50", 0.5),
        ("p90", 0.9),
        ("p99", 0.99),
        ("p999", 0.999),
        ("p9999", 0.9999),
    ] {
        let py_value = u(&py["percentiles"], key);
        let py_rank = u(&py["ranks"], key);
        let our_rank = ((p * ours.len() as f64).ceil() as u64).max(1);
        if py_rank == our_rank {
            assert_eq!(py_value, u(&v["latency_ns"], key), "{key}: {py}");
        } else {
            assert_eq!(py_value, value_at_rank(&ours, py_rank), "{key}: {py}");
        }
    }
    // Every row of our .hgrm checks out against the reference's histogram.
    let hgrm = &py["hgrm"];
    assert!(u(hgrm, "rows") > 10, "{hgrm}");
    assert_eq!(hgrm["mismatches"], serde_json::json!([]), "{hgrm}");
    let _ = std::io::stderr().flush();
}

#[test]
fn every_help_lists_the_exit_codes() {
    for command in [&[][..], &["synth"], &["run"], &["report"]] {
        let mut args = command.to_vec();
        args.push("--help");
        let out = replay(&args);
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(
            help.contains(mdbus_tool_support::output::EXIT_CODES_HELP),
            "{args:?}: {help}"
        );
    }
    let help = String::from_utf8(replay(&["run", "--help"]).stdout).unwrap();
    for option in ["--allow-loss", "--duration"] {
        assert!(help.contains(option), "{option}: {help}");
    }
}
