//! Hostile and awkward input: forged sequence numbers, packets that lie,
//! frames that are not feed data, pipes and FIFOs, signals and
//! `--duration`. What is delivered is checked twice: message by message
//! through the library's `Input` (order, bytes, once each), and through
//! the binary (counts, the JSON's skip counters by reason, exit status).

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;

use mdbus_feed::moldudp64::PacketBuilder;
use mdbus_replay::input::{Input, InputStats};

use super::*;

const EXCHANGE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 7), 5_000);
const LINE_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 1), 26_477);
const BASE_NS: u64 = 1_700_000_000_000_000_000;
/// Genuine packets in a capture, and messages in each.
const PACKETS: u64 = 200;
const PER_PACKET: u64 = 3;
/// Bytes before the first record of a classic pcap, and before the frame
/// in a record.
const FILE_HEADER: usize = 24;
const RECORD_HEADER: usize = 16;
/// The IPv4 header's offset in a record (after the Ethernet header).
const IP: usize = RECORD_HEADER + 14;

fn session() -> Session {
    Session::new("HOSTILE01").unwrap()
}

fn body(seq: u64) -> Vec<u8> {
    format!("genuine message {seq:05}").into_bytes()
}

/// The genuine messages, in order.
fn genuine() -> Vec<Vec<u8>> {
    (1..=PACKETS * PER_PACKET).map(body).collect()
}

fn mold(first: u64, count: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 1500];
    let mut b = PacketBuilder::new(&mut buf, session(), first).unwrap();
    for s in first..first + count {
        b.push(&body(s)).unwrap();
    }
    b.finish().to_vec()
}

/// One UDP datagram as a pcap record (record header, Ethernet, IPv4, UDP,
/// payload), as the feed crate's capture writer builds it.
fn record(ts: u64, payload: &[u8]) -> Vec<u8> {
    let mut w = CaptureWriter::new("frame", Vec::new()).unwrap();
    w.write_udp(ts, EXCHANGE, LINE_A, payload).unwrap();
    w.finish().unwrap()[FILE_HEADER..].to_vec()
}

/// A pcap of the genuine packets, packet k captured at `time(k)`, and
/// after it the frames `extra(k, time(k))` returns.
fn capture(time: impl Fn(u64) -> u64, mut extra: impl FnMut(u64, u64) -> Vec<Vec<u8>>) -> Vec<u8> {
    let mut file = CaptureWriter::new("capture", Vec::new())
        .unwrap()
        .finish()
        .unwrap();
    for k in 0..PACKETS {
        let ts = time(k);
        file.extend(record(ts, &mold(1 + k * PER_PACKET, PER_PACKET)));
        for r in extra(k, ts) {
            file.extend(r);
        }
    }
    file
}

fn microseconds_apart(k: u64) -> u64 {
    BASE_NS + k * 1_000
}

/// What the library hands on, message by message, and its counters.
fn delivered(path: &str) -> (Vec<Vec<u8>>, InputStats) {
    let mut input = Input::open(Path::new(path), None).unwrap();
    let mut out = Vec::new();
    while input.next_unit(|_, m| out.push(m.to_vec())).unwrap() {}
    (out, input.finish().unwrap())
}

/// Replays `input` on shm at max; the exit code, the JSON and stderr.
fn run_json(s: &Scratch, input: &str, extra: &[&str]) -> (Option<i32>, Value, String) {
    let out_dir = s.path("out");
    let mut args = vec![
        "run", input, "--rate", "max", "--out", &out_dir, "--config", &s.config, "--json",
    ];
    args.extend(SHARED_MACHINE);
    args.extend(extra);
    let out = replay(&args);
    let err = stderr(&out);
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout:?}, stderr {err}"));
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    (out.status.code(), v, err)
}

fn skipped(v: &Value, reason: &str) -> u64 {
    u(&v["skipped"], reason)
}

#[test]
fn a_forged_sequence_2_63_among_600_genuine_messages_changes_nothing() {
    let s = Scratch::new("forged-jump");
    let path = s.path("forged.pcap");
    let bytes = capture(microseconds_apart, |k, ts| {
        if k == PACKETS / 2 {
            vec![record(ts + 1, &mold(1 << 63, 1))]
        } else {
            Vec::new()
        }
    });
    std::fs::write(&path, bytes).unwrap();

    let (messages, stats) = delivered(&path);
    assert_eq!(messages, genuine(), "every genuine message once, in order");
    assert_eq!(stats.skipped.suspect_jumps, 1);

    let (code, v, err) = run_json(&s, &path, &[]);
    assert_eq!(code, Some(3), "skipped input is loss: {err}");
    assert_eq!(u(&v, "messages"), 600);
    assert_eq!(count(&v), 600);
    assert_eq!(dropped(&v), 0);
    assert_eq!(skipped(&v, "suspect_jumps"), 1);
    assert!(
        err.contains("input not replayed: 1 suspect_jumps") && err.contains("--allow-loss"),
        "{err}"
    );

    let (code, v, err) = run_json(&s, &path, &["--allow-loss"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(count(&v), 600);
    assert!(err.contains("allowed by --allow-loss"), "{err}");
}

#[test]
fn a_sequence_that_overflows_injects_nothing() {
    let s = Scratch::new("overflow");
    let path = s.path("overflow.pcap");
    let bytes = capture(microseconds_apart, |k, ts| match k {
        10 => {
            // Three messages from 2^64 - 2: the range wraps.
            let mut p = mold(1, 3);
            p[10..18].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
            vec![record(ts + 1, &p)]
        }
        20 => vec![record(ts + 1, &mold(u64::MAX - 0x1_0000, 2))],
        _ => Vec::new(),
    });
    std::fs::write(&path, bytes).unwrap();

    let (messages, stats) = delivered(&path);
    assert_eq!(messages, genuine(), "no bogus message, nothing lost");
    assert_eq!(stats.skipped.sequence_overflow, 2);

    let (code, v, err) = run_json(&s, &path, &["--allow-loss"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(u(&v, "messages"), 600);
    assert_eq!(count(&v), 600);
    assert_eq!(skipped(&v, "malformed_sequence_overflow"), 2);
}

#[test]
fn mdcap_records_follow_the_same_rules() {
    let s = Scratch::new("mdcap-forged");
    let path = s.path("forged.mdcap");
    let mut w = MdcapWriter::create(&path).unwrap();
    for seq in 1..=PACKETS * PER_PACKET {
        w.write(BASE_NS + seq, seq, &body(seq)).unwrap();
        match seq {
            // A forged record far ahead, a repeat, and one whose sequence
            // is beyond any plausible range.
            100 => w.write(BASE_NS + seq, 1 << 63, b"forged").unwrap(),
            200 => w.write(BASE_NS + seq, 150, &body(150)).unwrap(),
            300 => w.write(BASE_NS + seq, u64::MAX, b"overflow").unwrap(),
            _ => {}
        }
    }
    w.finish().unwrap();
    let (messages, stats) = delivered(&path);
    assert_eq!(messages, genuine());
    assert_eq!(stats.duplicates, 1);
    assert_eq!(stats.skipped.suspect_jumps, 1);
    assert_eq!(stats.skipped.sequence_overflow, 1);
}

#[test]
fn lying_counts_and_lengths_fragments_and_other_frames_are_counted_by_reason() {
    let s = Scratch::new("lies");
    let path = s.path("lies.pcap");
    let bytes = capture(microseconds_apart, |k, ts| {
        // Damaged copies of the packet just sent, so every genuine
        // message is still there once.
        let mut r = record(ts + 1, &mold(1 + k * PER_PACKET, PER_PACKET));
        let udp_len = IP + 20 + 4;
        match k {
            30 => {
                // The MoldUDP64 message count says one more.
                let count = IP + 20 + 8 + 18;
                r[count + 1] += 1;
            }
            40 => {
                // The UDP length says 10 bytes more than there are.
                let len = u16::from_be_bytes([r[udp_len], r[udp_len + 1]]);
                r[udp_len..udp_len + 2].copy_from_slice(&(len + 10).to_be_bytes());
            }
            50 => r[IP + 6] |= 0x20, // more fragments follow
            60 => r[IP + 9] = 2,     // IGMP
            _ => return Vec::new(),
        }
        vec![r]
    });
    std::fs::write(&path, bytes).unwrap();

    let (messages, stats) = delivered(&path);
    assert_eq!(messages, genuine());
    let k = stats.skipped;
    assert_eq!(
        (k.count_mismatch, k.bad_udp_length, k.fragments, k.not_udp),
        (1, 1, 1, 1),
        "{k:?}"
    );

    let (code, v, err) = run_json(&s, &path, &[]);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(count(&v), 600);
    for reason in [
        "malformed_count_mismatch",
        "bad_udp_length",
        "fragments",
        "not_udp",
    ] {
        assert_eq!(skipped(&v, reason), 1, "{reason} in {v}");
    }
    // Other traffic (not UDP) is counted but is not feed data lost.
    assert!(
        err.contains(
            "input not replayed: 1 fragments, 1 bad_udp_length, 1 malformed_count_mismatch; exit status 3"
        ) && !err.contains("not_udp"),
        "{err}"
    );
}

fn mkfifo(path: &str) {
    let c = CString::new(Path::new(path).as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {path}: {}", std::io::Error::last_os_error());
}

#[test]
fn a_capture_through_a_fifo_and_through_stdin_replays_once_read() {
    let s = Scratch::new("fifo");
    let bytes = capture(microseconds_apart, |_, _| Vec::new());
    let fifo = s.path("feed.fifo");
    mkfifo(&fifo);
    let writer = {
        let (fifo, bytes) = (fifo.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut w = OpenOptions::new().write(true).open(&fifo).unwrap();
            w.write_all(&bytes).unwrap();
        })
    };
    let out = s.path("out-fifo");
    let mut args = vec![
        "run", &fifo, "--rate", "max", "--out", &out, "--config", &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    writer.join().unwrap();
    assert_eq!(v["format"], "pcap");
    assert_eq!(v["input"], fifo.as_str());
    assert_eq!(count(&v), 600);

    let out = s.path("out-stdin");
    let mut args = vec![
        "run", "-", "--rate", "max", "--out", &out, "--config", &s.config, "--json",
    ];
    args.extend(SHARED_MACHINE);
    let o = replay_with(&args, Some(bytes), |_| {});
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["input"], "standard input");
    assert_eq!(count(&v), 600);
}

/// True once process `pid` has `path` open.
fn has_open(pid: u32, path: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == Path::new(path)))
}

#[test]
fn a_fifo_without_a_writer_ends_on_sigterm_and_at_duration() {
    let s = Scratch::new("fifo-no-writer");
    let fifo = s.path("nobody.fifo");
    mkfifo(&fifo);
    let out = s.path("out");
    let args = ["run", &fifo, "--out", &out, "--config", &s.config];
    let o = replay_with(&args, None, |pid| {
        // It opens the FIFO after installing its signal handlers; wait
        // for that (the hang guard is the only bound), then SIGTERM.
        let started = std::time::Instant::now();
        while !has_open(pid, &fifo) {
            assert!(started.elapsed() < HANG_GUARD, "never opened {fifo}");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: sending a signal to our own child, still running (it
        // has the FIFO open and cannot read from it).
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    });
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "mdbus-replay: interrupted while waiting for input from {fifo}"
        )),
        "{}",
        stderr(&o)
    );

    let o = replay(&[
        "run",
        &fifo,
        "--out",
        &out,
        "--config",
        &s.config,
        "--duration",
        "1s",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "mdbus-replay: --duration ran out while waiting for input from {fifo}"
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_stalled_pipe_wakes_at_duration() {
    let s = Scratch::new("stalled");
    let bytes = capture(microseconds_apart, |_, _| Vec::new());
    let fifo = s.path("stalled.fifo");
    mkfifo(&fifo);
    // The writer sends half the capture, then holds the FIFO open without
    // writing until the replay has ended.
    let (done, wait) = mpsc::channel::<()>();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut w = OpenOptions::new().write(true).open(&fifo).unwrap();
            w.write_all(&bytes[..bytes.len() / 2]).unwrap();
            let _ = wait.recv();
        })
    };
    let out = s.path("out");
    let o = replay(&[
        "run",
        &fifo,
        "--out",
        &out,
        "--config",
        &s.config,
        "--duration",
        "1s",
    ]);
    done.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "mdbus-replay: --duration ran out while waiting for input from {fifo}"
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_ten_hour_pause_at_1x_ends_at_duration_with_a_summary() {
    let s = Scratch::new("ten-hours");
    let path = s.path("pause.pcap");
    const TEN_HOURS: u64 = 10 * 3600 * 1_000_000_000;
    let bytes = capture(
        |k| microseconds_apart(k) + if k >= PACKETS / 2 { TEN_HOURS } else { 0 },
        |_, _| Vec::new(),
    );
    std::fs::write(&path, bytes).unwrap();
    let out = s.path("out");
    let mut args = vec![
        "run",
        &path,
        "--rate",
        "1x",
        "--duration",
        "2s",
        "--out",
        &out,
        "--config",
        &s.config,
    ];
    args.extend(SHARED_MACHINE);
    let v = replay_json(&args);
    assert_eq!(v["ended_by"], "duration");
    assert_eq!(u(&v, "messages"), 300, "the messages before the pause");
    assert_eq!(count(&v), 300);
    assert_eq!(dropped(&v), 0);
}

/// Ctrl-C in a terminal sends SIGINT to the whole process group: the run
/// and its subscriber processes. The replay stops sending, the
/// subscribers account for what was sent, and every interval log is
/// complete: `report` reads the merged log and each subscriber's.
#[test]
fn ctrl_c_ends_a_paced_replay_with_every_log_complete() {
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    let s = Scratch::new("ctrl-c");
    // At 1x the day's half-hour pre-open alone outlasts any test: the run
    // is still replaying when the signal comes.
    let input = synth(&s, "day.itch", 2000, 30);
    let out = s.path("out");
    let mut args = vec![
        "run",
        &input,
        "--rate",
        "1x",
        "--interval",
        "1ms",
        "--subscribers",
        "2",
        "--out",
        &out,
        "--config",
        &s.config,
        "--json",
    ];
    args.extend(SHARED_MACHINE);
    let mut child = Command::new(REPLAY)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, as a shell job has: the signal goes to the
        // group, as the terminal sends it.
        .process_group(0)
        .spawn()
        .expect("start mdbus-replay");
    let pid = child.id() as i32;
    let mut stdout = child.stdout.take().unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut o = Vec::new();
        let _ = stdout.read_to_end(&mut o);
        let _ = tx.send(o);
    });
    // The run says when its first message is out.
    let mut err = String::new();
    let mut lines = stderr.lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        err.push_str(&line);
        err.push('\n');
        if line.contains("first message published") {
            break;
        }
    }
    assert!(err.contains("first message published"), "{err}");
    // SAFETY: signalling the process group of our own child, which is
    // still running (it has just written to stderr and replays for half
    // an hour).
    assert_eq!(unsafe { libc::kill(-pid, libc::SIGINT) }, 0);
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let stdout = match rx.recv_timeout(HANG_GUARD) {
        Ok(o) => o,
        Err(_) => {
            let _ = child.kill();
            panic!("mdbus-replay still running {HANG_GUARD:?} after SIGINT");
        }
    };
    let status = child.wait().unwrap();
    let err = format!("{err}{}", rest.join().unwrap().join("\n"));
    assert_eq!(status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    assert_eq!(v["ended_by"], "interrupted", "{v}");
    assert_eq!(v["lost"], false, "{v}");
    let sent = u(&v, "messages");
    assert!(sent > 0, "{v}");
    // Each subscriber got everything sent, and the merged log all of it.
    assert_eq!(count(&v), 2 * sent, "{v}");
    let mut logs = vec![format!("{out}/latency.hlog")];
    for k in 1..=2 {
        let sub = &v["per_subscriber"][k - 1];
        assert_eq!(u(sub, "received"), sent, "{v}");
        logs.push(format!("{out}/subscribers/subscriber-{k}.hlog"));
    }
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(text.ends_with('\n'), "{log} ends mid-line: {text:?}");
        let (intervals, total) = read_log(log);
        assert!(!intervals.is_empty(), "{log}");
        assert_eq!(
            total.len(),
            if log.ends_with("latency.hlog") {
                2 * sent
            } else {
                sent
            }
        );
    }
    let mut report = vec!["report"];
    report.extend(logs.iter().map(String::as_str));
    let rdir = s.path("report");
    report.extend(["--out", &rdir]);
    let r = replay_json(&report);
    let entries = r["logs"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(count(&entries[0]), 2 * sent);
    assert_eq!(count(&entries[1]), sent);
    assert_eq!(count(&entries[2]), sent);
}
