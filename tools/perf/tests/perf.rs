//! mdbus-perf as a user runs it: the built binary, real processes, shared
//! memory, UDP multicast and TCP on the loopback, (as root) two network
//! namespaces with injected loss, and the verbs transport refused on a
//! machine without RDMA (its measurements run in the RDMA lane:
//! scripts/rdma-guest/bench-verbs). Counts are small; nothing here asserts on
//! speed.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const PERF: &str = env!("CARGO_BIN_EXE_mdbus-perf");

/// Only a guard against a hang turning into a stuck test run; no test
/// depends on how long anything takes.
const HANG_GUARD: Duration = Duration::from_secs(300);

fn perf(args: &[&str]) -> Output {
    Command::new(PERF)
        .args(args)
        .output()
        .expect("run mdbus-perf")
}

/// Options for runs that must finish whatever else the machine is doing:
/// tests run side by side, so busy-polling processes may outnumber cores;
/// yielding keeps them all moving, and the stall limit is generous.
const SHARED_MACHINE: [&str; 4] = ["--wait", "yield", "--timeout", "120"];

/// Runs a measurement with [`SHARED_MACHINE`] options.
fn measure(args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(SHARED_MACHINE);
    perf(&all)
}

/// A channel name no other test (or run) uses, and a bus configuration
/// that keeps its shared-memory segments in a directory of their own,
/// removed when the test ends (segments of a killed process included).
struct Scratch {
    name: String,
    dir: PathBuf,
    config: String,
}

impl Scratch {
    fn new(test: &str) -> Scratch {
        let name = format!("t-{test}-{}", std::process::id());
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("mdbus-perf-{name}"));
        std::fs::create_dir_all(&dir).expect("create segment directory");
        let config = dir.join("bus.toml");
        std::fs::write(
            &config,
            format!("[shm]\ndir = {:?}\n", dir.display().to_string()),
        )
        .expect("write config");
        Scratch {
            name,
            dir,
            config: config.display().to_string(),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "mdbus-perf failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout.clone()).expect("utf-8 stdout");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object expected, got:\n{stdout}");
    let v: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(
        mdbus_tool_support::output::check_convention(&v),
        Ok(()),
        "{stdout}"
    );
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys[..3], ["schema", "tool", "mode"], "{stdout}");
    v
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for key in path {
        cur = &cur[*key];
    }
    cur.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not an unsigned integer in {v}"))
}

/// The round trip's distribution is ordered, counts every measured round
/// trip, and half of it is reported beside it.
fn assert_ordered_percentiles(v: &Value) {
    let p: Vec<u64> = ["min", "p50", "p90", "p99", "p999", "p9999", "max"]
        .iter()
        .map(|k| u(v, &["rtt_ns", k]))
        .collect();
    assert!(p[0] > 0, "a round trip takes some time: {v}");
    assert!(
        p.windows(2).all(|w| w[0] <= w[1]),
        "percentiles out of order: {v}"
    );
    assert_eq!(u(v, &["rtt_ns", "count"]), u(v, &["round_trips"]), "{v}");
    for k in ["min", "p50", "p99", "max"] {
        assert_eq!(
            u(v, &["half_rtt_ns", k]),
            u(v, &["rtt_ns", k]) / 2,
            "{k}: {v}"
        );
    }
    let mean = v["rtt_ns"]["mean"].as_f64().expect("mean");
    assert!(mean >= p[0] as f64 && mean <= p[6] as f64, "{v}");
    assert!(
        v["rtt_ns"]["stddev"].as_f64().expect("stddev") >= 0.0,
        "{v}"
    );
}

/// Waits for `child` to exit and collects its output (stderr from
/// `stderr` when the caller already took the pipe), failing the test and
/// killing the child if it is still running after [`HANG_GUARD`].
fn wait_or_fail(mut child: Child, stderr: Option<Box<dyn Read + Send>>, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdout = Vec::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_end(&mut stdout).expect("read stdout");
        }
        let mut err = Vec::new();
        if let Some(mut r) = stderr.or_else(|| {
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn Read + Send>)
        }) {
            r.read_to_end(&mut err).expect("read stderr");
        }
        let status = child.wait().expect("wait");
        let _ = tx.send(Output {
            status,
            stdout,
            stderr: err,
        });
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => out,
        Err(_) => {
            // SAFETY: kill(2) on the pid of a child this test started and
            // has not reaped (the waiting thread is still blocked).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{what} (pid {pid}) hung");
        }
    }
}

#[test]
fn pingpong_session_json() {
    let s = Scratch::new("pp-session");
    let out = measure(&[
        "pingpong",
        "--transport",
        "shm",
        "--size",
        "32",
        "--iters",
        "2000",
        "--warmup",
        "100",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "shm");
    assert_eq!(v["channel"], "session");
    assert_eq!(u(&v, &["size_bytes"]), 32);
    assert_eq!(u(&v, &["round_trips"]), 2000);
    assert_eq!(u(&v, &["warmup_round_trips"]), 100);
    assert_ordered_percentiles(&v);
}

#[test]
fn pingpong_stream_json_with_a_larger_message() {
    let s = Scratch::new("pp-stream");
    let out = measure(&[
        "pingpong",
        "--channel",
        "stream",
        "--size",
        "200",
        "--iters",
        "1500",
        "--warmup",
        "0",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["channel"], "stream");
    assert_eq!(u(&v, &["size_bytes"]), 200);
    assert_eq!(u(&v, &["round_trips"]), 1500);
    assert_ordered_percentiles(&v);
}

#[test]
fn pingpong_table_names_the_percentiles() {
    let s = Scratch::new("pp-table");
    let out = measure(&[
        "pingpong", "--iters", "500", "--warmup", "10", "--name", &s.name, "--config", &s.config,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for word in [
        "t_min[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99%[usec]",
        "99.9%[usec]",
        "t_max[usec]",
        "\nhalf-RTT ",
        "\nRTT ",
        "half-RTT: the round trip (RTT) halved",
        "500 round trips",
        "transport shm",
    ] {
        assert!(text.contains(word), "{word:?} missing from:\n{text}");
    }
    assert!(
        !text.trim_start().starts_with('{'),
        "table expected:\n{text}"
    );
}

#[test]
fn throughput_unlapped_reader_receives_everything() {
    // A stream holding every message cannot lap its reader.
    let s = Scratch::new("tp-json");
    let out = measure(&[
        "throughput",
        "--transport",
        "shm",
        "--size",
        "64",
        "--count",
        "20000",
        "--capacity",
        "32768",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "shm");
    assert_eq!(u(&v, &["size_bytes"]), 64);
    assert_eq!(u(&v, &["sent"]), 20000);
    assert_eq!(u(&v, &["received"]), 20000);
    assert_eq!(u(&v, &["lost"]), 0);
    assert_eq!(u(&v, &["before_join"]), 0);
    let rate = v["msgs_per_sec"].as_f64().expect("msgs_per_sec");
    let mb = v["mb_per_sec"].as_f64().expect("mb_per_sec");
    assert!(rate > 0.0 && mb > 0.0, "{v}");
}

#[test]
fn throughput_counts_add_up_when_the_reader_may_be_lapped() {
    // Capacity far below the count: whatever the machine, every message is
    // either received or reported lost by the stream, never both or
    // neither (the subscriber attaches before the first message). Loss is
    // exit status 3 with a sentence, unless --allow-loss.
    let s = Scratch::new("tp-lapped");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "throughput",
            "--count",
            "200000",
            "--capacity",
            "64",
            "--name",
            &s.name,
            "--config",
            &s.config,
            "--json",
        ];
        args.extend(extra);
        measure(&args)
    };
    let out = run(&[]);
    let stdout = String::from_utf8(out.stdout.clone()).expect("utf-8 stdout");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(u(&v, &["sent"]), 200000);
    assert_eq!(u(&v, &["before_join"]), 0, "{v}");
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 200000, "{v}");
    let lost = u(&v, &["lost"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if lost > 0 {
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains(&format!("{lost} of 200000 messages lost")),
            "{stderr}"
        );
    } else {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
    }

    let v = json_of(&run(&["--allow-loss"]));
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 200000, "{v}");
}

#[test]
fn throughput_lossless_loses_nothing_with_a_ring_far_smaller_than_the_count() {
    // The same lapping setup as above, but the subscriber asks the
    // publisher to wait for it: every message arrives, exit status 0.
    let s = Scratch::new("tp-lossless");
    let out = measure(&[
        "throughput",
        "--transport",
        "shm",
        "--count",
        "200000",
        "--capacity",
        "64",
        "--lossless",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(u(&v, &["sent"]), 200000, "{v}");
    assert_eq!(u(&v, &["received"]), 200000, "{v}");
    assert_eq!(u(&v, &["lost"]), 0, "{v}");
    usage_error(
        &["throughput", "--transport", "udp", "--lossless"],
        "--lossless is a shared-memory stream's mode; transport udp has none",
    );
}

#[test]
fn throughput_table_names_the_columns() {
    let s = Scratch::new("tp-table");
    let out = measure(&[
        "throughput",
        "--count",
        "1000",
        "--name",
        &s.name,
        "--config",
        &s.config,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for word in [
        "sent",
        "received",
        "lost",
        "msgs/s",
        "MB/s",
        "transport shm",
    ] {
        assert!(text.contains(word), "{word:?} missing from:\n{text}");
    }
}

/// Whether this machine has an RDMA device (then the verbs runs are
/// measured in the RDMA lane's guest, not refused).
fn has_rdma() -> bool {
    Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn verbs_without_a_device_is_refused_in_the_library_sentence() {
    if has_rdma() {
        skip(
            "verbs_without_a_device_is_refused_in_the_library_sentence",
            "this machine has an RDMA device",
        );
        return;
    }
    let runs: &[&[&str]] = &[
        &["pingpong", "--transport", "verbs", "--json"],
        &[
            "pingpong",
            "--transport",
            "verbs",
            "--device",
            "rxe0",
            "--gid-index",
            "1",
            "--size",
            "32",
            "--json",
        ],
        &[
            "throughput",
            "--transport",
            "verbs",
            "--device",
            "rxe0",
            "--signal-every",
            "1",
            "--no-inline",
        ],
        &[
            "mcast",
            "--transport",
            "verbs",
            "--device",
            "rxe0",
            "--recv-device",
            "rxe1",
            "--group",
            "239.1.1.1",
            "--count",
            "20000",
        ],
        &[
            "pingpong",
            "--transport",
            "verbs",
            "--role",
            "pong",
            "--address",
            "10.99.0.1:7000",
        ],
        // perftest's spelling: -d selects verbs.
        &[
            "pingpong", "-d", "rxe0", "-x", "1", "-s", "32", "-n", "1000",
        ],
        &["throughput", "-d", "rxe0", "-n", "10"],
        &["mcast", "-x", "1", "-n", "10"],
    ];
    for args in runs {
        let out = perf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: no report expected");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        let pong = args.contains(&"--role");
        let prefix = if pong {
            "mdbus-perf (pong): transport verbs is not available: "
        } else {
            "mdbus-perf: transport verbs is not available: "
        };
        assert!(stderr.starts_with(prefix), "{args:?}: {stderr}");
        assert!(stderr.contains("RDMA"), "{args:?}: {stderr}");
    }
}

#[test]
fn verbs_options_parse_and_belong_to_verbs() {
    // Only verbs takes them: on another transport each is a usage error
    // naming the option.
    for flag in [
        &["--no-inline"][..],
        &["--signal-every", "1"],
        &["--gid-index", "1"],
        &["--recv-device", "rxe1"],
        &["--recv-interface", "10.99.0.2"],
        &["--max-inline", "32"],
        &["--recv-batch", "8"],
    ] {
        let mut args = vec!["pingpong", "--transport", "shm", "--iters", "1"];
        args.extend_from_slice(flag);
        let out = perf(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(flag[0]), "{args:?}: {stderr}");
        assert!(stderr.contains("--transport verbs"), "{args:?}: {stderr}");
    }
    // Values out of range are refused by the parser, before any device
    // is looked for.
    for (args, needle) in [
        (
            &["throughput", "--transport", "verbs", "--signal-every", "0"][..],
            "--signal-every",
        ),
        (
            &["pingpong", "--transport", "verbs", "--gid-index=-2"],
            "--gid-index",
        ),
        (
            &["mcast", "--transport", "verbs", "--recv-interface", "rxe1"],
            "--recv-interface",
        ),
        (
            &["mcast", "--transport", "verbs", "--group", "10.0.0.1"],
            "multicast",
        ),
    ] {
        let out = perf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    // Every option is in the help.
    let out = perf(&["throughput", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--no-inline",
        "--signal-every",
        "--gid-index",
        "--recv-device",
        "--recv-interface",
        "--max-inline",
        "--recv-batch",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn verbs_pingpong_runs_on_a_session_only() {
    // Refused for what it is, whatever the machine has.
    let out = perf(&["pingpong", "--transport", "verbs", "--channel", "stream"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("RC session"), "{stderr}");
}

#[test]
fn a_group_without_a_port_is_accepted() {
    let p = Patient::new("group-no-port");
    let out = measure(&[
        "mcast",
        "--transport",
        "udp",
        "--group",
        "239.255.77.9",
        "--count",
        "100",
        "--rate",
        "10000",
        "--name",
        &p.name,
        "--config",
        &p.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(u(&v, &["sent"]), 100, "{v}");
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 100, "{v}");
}

#[test]
fn unknown_transport_lists_the_known_ones() {
    let out = perf(&["pingpong", "--transport", "carrier-pigeon"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("shm, udp, tcp, verbs, auto"), "{stderr}");
}

#[test]
fn bad_options_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["pingpong", "--size", "1"], "--size"),
        (&["pingpong", "--cores", "3-1"], "--cores"),
        (
            &["throughput", "--name", "no/slashes", "--count", "1"],
            "no/slashes",
        ),
        (
            &["throughput", "--capacity", "1000", "--count", "1"],
            "capacity",
        ),
    ];
    for (args, needle) in cases {
        let out = perf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn ping_without_pong_gives_up_and_names_the_channel() {
    let s = Scratch::new("no-pong");
    let out = perf(&[
        "pingpong",
        "--role",
        "ping",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--timeout",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(&s.name), "{stderr}");
}

/// Starts `args` with stdout and stderr piped; returns once a stderr line
/// contains `ready`, with the rest of stderr.
fn start_until(args: &[&str], ready: &str) -> (Child, Box<dyn Read + Send>) {
    let mut child = Command::new(PERF)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mdbus-perf");
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 && line.contains(ready) => return (child, Box::new(reader)),
            Ok(n) if n > 0 => {}
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} ended before printing {ready:?}");
            }
        }
    }
}

#[test]
fn ping_reports_a_pong_that_dies() {
    let s = Scratch::new("pong-dies");
    let mut pong = Command::new(PERF)
        .args([
            "pingpong", "--role", "pong", "--name", &s.name, "--config", &s.config, "--cores", "1",
        ])
        .args(SHARED_MACHINE)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pong");
    let (ping, ping_stderr) = start_until(
        &[
            "pingpong",
            "--role",
            "ping",
            "--name",
            &s.name,
            "--config",
            &s.config,
            "--cores",
            "0",
            "--iters",
            "1000000000000",
            "--warmup",
            "0",
            "--wait",
            "yield",
            "--timeout",
            "120",
        ],
        "connected",
    );
    pong.kill().expect("kill pong");
    pong.wait().expect("reap pong");
    let out = wait_or_fail(ping, Some(ping_stderr), "ping after its pong died");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("died"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", pong.id())), "{stderr}");
}

#[test]
fn subscriber_reports_a_publisher_that_dies() {
    let s = Scratch::new("pub-dies");
    let sub = Command::new(PERF)
        .args([
            "throughput",
            "--role",
            "sub",
            "--name",
            &s.name,
            "--config",
            &s.config,
            "--json",
        ])
        .args(SHARED_MACHINE)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sub");
    let (mut publisher, _) = start_until(
        &[
            "throughput",
            "--role",
            "pub",
            "--name",
            &s.name,
            "--config",
            &s.config,
            "--count",
            "1000000000000",
            "--rate",
            "100000",
            "--wait",
            "yield",
            "--timeout",
            "120",
        ],
        "publishing",
    );
    publisher.kill().expect("kill pub");
    publisher.wait().expect("reap pub");
    let out = wait_or_fail(sub, None, "sub after its publisher died");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no report from a failed run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("publisher went down"), "{stderr}");
}

// ------------------------------------------------ the IP transport ----

#[test]
fn pingpong_over_a_tcp_session() {
    let out = measure(&[
        "pingpong",
        "--transport",
        "tcp",
        "--iters",
        "2000",
        "--warmup",
        "100",
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "tcp");
    assert_eq!(v["channel"], "session");
    assert_eq!(u(&v, &["size_bytes"]), 32);
    assert_eq!(u(&v, &["round_trips"]), 2000);
    assert_ordered_percentiles(&v);
}

#[test]
fn pingpong_over_two_udp_streams() {
    // A loaded test machine can pause either process for a second or more
    // (seen at 200-470 ms routinely): give both streams a publisher
    // timeout and retry budget that outlast such a stall, so the test
    // checks the protocol, not the scheduler.
    let s = Scratch::new("udp-pingpong");
    let mut cfg = std::fs::read_to_string(&s.config).unwrap();
    for dir in ["ping", "pong"] {
        cfg += &format!(
            "[streams.\"{}.{dir}\"]\nheartbeat_timeout = \"30s\"\nretransmit_retries = 300\n",
            s.name
        );
    }
    std::fs::write(&s.config, cfg).unwrap();
    let out = measure(&[
        "pingpong",
        "--transport",
        "udp",
        "--size",
        "100",
        "--iters",
        "2000",
        "--warmup",
        "100",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "udp");
    assert_eq!(v["channel"], "stream");
    assert_eq!(u(&v, &["size_bytes"]), 100);
    assert_eq!(u(&v, &["round_trips"]), 2000);
    assert_ordered_percentiles(&v);
}

#[test]
fn throughput_over_udp_accounts_for_every_message() {
    // As fast as possible: the subscriber's socket may overflow, and what
    // cannot be fetched again is reported lost; every message is one or
    // the other.
    let out = measure(&[
        "throughput",
        "--transport",
        "udp",
        "--count",
        "20000",
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "udp");
    assert_eq!(v["channel"], "stream");
    assert_eq!(u(&v, &["sent"]), 20000);
    assert_eq!(u(&v, &["before_join"]), 0, "{v}");
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 20000, "{v}");
}

#[test]
fn throughput_over_udp_packed_datagrams() {
    let out = measure(&[
        "throughput",
        "--transport",
        "udp",
        "--count",
        "20000",
        "--batch",
        "16",
        "--rate",
        "200000",
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(u(&v, &["sent"]), 20000);
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 20000, "{v}");
}

#[test]
fn throughput_over_a_tcp_session_loses_nothing() {
    let out = measure(&[
        "throughput",
        "--transport",
        "tcp",
        "--count",
        "50000",
        "--capacity",
        "256",
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "tcp");
    assert_eq!(v["channel"], "session");
    assert_eq!(u(&v, &["sent"]), 50000);
    assert_eq!(u(&v, &["received"]), 50000);
    assert_eq!(u(&v, &["lost"]), 0);
    assert!(v["msgs_per_sec"].as_f64().unwrap() > 0.0, "{v}");
}

/// A channel name and a configuration giving its stream a recovery budget
/// (and a publisher silence limit) far beyond the defaults, so that a run
/// whose processes the scheduler sets aside for a while on a busy machine
/// still gets back every message it missed.
struct Patient {
    name: String,
    dir: PathBuf,
    config: String,
}

impl Patient {
    fn new(test: &str) -> Patient {
        let name = format!("t-{test}-{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("mdbus-perf-{name}"));
        std::fs::create_dir_all(&dir).expect("create config directory");
        let config = dir.join("bus.toml");
        std::fs::write(
            &config,
            format!(
                "[streams.{name}]\nretransmit_timeout = \"20ms\"\nretransmit_retries = 100\n\
                 heartbeat_timeout = \"30s\"\n"
            ),
        )
        .expect("write config");
        Patient {
            name,
            dir,
            config: config.display().to_string(),
        }
    }
}

impl Drop for Patient {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn assert_ordered_latency(v: &Value) {
    let p: Vec<u64> = ["p50", "p90", "p99", "p999", "max"]
        .iter()
        .map(|k| u(v, &["latency_ns", k]))
        .collect();
    assert!(p[0] > 0, "{v}");
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "out of order: {v}");
}

#[test]
fn mcast_on_the_loopback_loses_nothing() {
    // Paced gently enough that even a subscriber descheduled for tens of
    // milliseconds gets anything its socket dropped again from the
    // publisher's window.
    let p = Patient::new("mcast-lo");
    let out = measure(&[
        "mcast", "--count", "5000", "--rate", "10000", "--size", "48", "--name", &p.name,
        "--config", &p.config, "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["transport"], "udp");
    assert_eq!(u(&v, &["size_bytes"]), 48);
    assert_eq!(u(&v, &["sent"]), 5000);
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 5000, "{v}");
    assert_eq!(u(&v, &["lost"]), 0, "{v}");
    assert_eq!(u(&v, &["received"]), 5000, "{v}");
    assert!(v["loss"].is_null(), "{v}");
    assert_ordered_latency(&v);
}

#[test]
fn mcast_table_names_the_columns() {
    let out = measure(&["mcast", "--count", "500", "--rate", "10000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for word in [
        "transport udp",
        "sent",
        "received",
        "lost",
        "recovered",
        "MB/s",
        "\none-way ",
        "t_typical[usec]",
        "99.9%[usec]",
    ] {
        assert!(text.contains(word), "{word:?} missing from:\n{text}");
    }
}

#[test]
fn mcast_takes_multicast_transports_only() {
    for transport in ["shm", "tcp"] {
        let out = perf(&["mcast", "--transport", transport, "--count", "1"]);
        assert_eq!(out.status.code(), Some(2), "{transport}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("--transport udp or verbs"), "{stderr}");
    }
}

#[test]
fn ip_transport_and_channel_must_agree() {
    for (transport, channel) in [("udp", "session"), ("tcp", "stream")] {
        let out = perf(&[
            "pingpong",
            "--transport",
            transport,
            "--channel",
            channel,
            "--iters",
            "1",
        ]);
        assert_eq!(out.status.code(), Some(2), "{transport} {channel}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    let out = perf(&["mcast", "--group", "10.0.0.1:5000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("multicast"));
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn skip(test: &str, why: &str) {
    eprintln!();
    eprintln!("!!!!!!!! SKIPPED {test}: {why} !!!!!!!!");
    eprintln!();
}

/// Namespaces whose names carry `pid`, as mdbus-perf names them.
fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("mdbp{pid}");
    std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix(&prefix)
                        .is_some_and(|rest| matches!(rest, "h0" | "h1" | "sw"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn mcast_recovers_what_a_lossy_network_drops() {
    const TEST: &str = "mcast_recovers_what_a_lossy_network_drops";
    if !is_root() {
        mdbus_testkit::skip(
            TEST,
            mdbus_testkit::Lack::Tool,
            "--loss needs root for network namespaces",
        );
        return;
    }
    // A window (and pace) large enough that every dropped message is
    // still retained when the subscriber asks for it again. The pace of
    // the netns tests (MDBUS_NET_PACE, lower on the emulated CPUs of the
    // RDMA lane's guest) keeps the subscriber from falling behind.
    let pace = std::env::var("MDBUS_NET_PACE").unwrap_or_else(|_| "20000".into());
    let p = Patient::new("mcast-loss");
    let child = Command::new(PERF)
        .args([
            "mcast",
            "--count",
            "10000",
            "--rate",
            &pace,
            "--capacity",
            "65536",
            "--loss",
            "5",
            "--name",
            &p.name,
            "--config",
            &p.config,
            "--json",
        ])
        .args(SHARED_MACHINE)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mdbus-perf");
    let pid = child.id();
    let out = wait_or_fail(child, None, "mcast --loss");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("cannot inject loss") {
        mdbus_testkit::skip(TEST, mdbus_testkit::Lack::Tool, stderr.trim());
        return;
    }
    let v = json_of(&out);
    assert_eq!(u(&v, &["sent"]), 10000);
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 10000, "{v}");
    assert!(u(&v, &["loss", "dropped"]) > 0, "nothing was dropped: {v}");
    assert!(u(&v, &["recovered"]) > 0, "nothing was recovered: {v}");
    assert_eq!(u(&v, &["lost"]), 0, "{v}");
    assert_eq!(u(&v, &["received"]), 10000, "{v}");
    assert!(
        ["netem", "nftables"].contains(&v["loss"]["by"].as_str().unwrap_or("")),
        "{v}"
    );
    assert_eq!(v["loss"]["pct"].as_f64(), Some(5.0), "{v}");
    assert_ordered_latency(&v);
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "left behind");
}

#[test]
fn mcast_loss_without_root_says_so() {
    if is_root() {
        skip(
            "mcast_loss_without_root_says_so",
            "running as root, where --loss is allowed",
        );
        return;
    }
    let out = perf(&["mcast", "--count", "10", "--loss", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("needs root"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn udp_sides_started_by_hand_meet_on_the_given_group() {
    // The subscriber starts first and says so; the publisher lingers for
    // requests, then closes, which ends the subscriber's run.
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let group = format!("239.255.78.1:{port}");
    let name = format!("t-hand-{}", std::process::id());
    let (sub, sub_stderr) = start_until(
        &[
            "mcast",
            "--role",
            "sub",
            "--group",
            &group,
            "--name",
            &name,
            "--count",
            "2000",
            "--cores",
            "0",
            "--json",
            "--wait",
            "yield",
            "--timeout",
            "120",
        ],
        "joined",
    );
    let publisher = perf(&[
        "mcast",
        "--role",
        "pub",
        "--group",
        &group,
        "--name",
        &name,
        "--count",
        "2000",
        "--rate",
        "20000",
        "--cores",
        "1",
        "--linger",
        "1",
        "--wait",
        "yield",
        "--timeout",
        "120",
        "--json",
    ]);
    // Each side prints its own object.
    let p = json_of(&publisher);
    assert_eq!(
        (&p["mode"], &p["role"]),
        (&"mcast".into(), &"pub".into()),
        "{p}"
    );
    assert_eq!(u(&p, &["sent"]), 2000, "{p}");
    let out = wait_or_fail(sub, Some(sub_stderr), "mcast --role sub");
    let v = json_of(&out);
    assert!(v.get("role").is_none(), "{v}");
    assert_eq!(u(&v, &["sent"]), 2000, "{v}");
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 2000, "{v}");
}

#[test]
fn every_help_lists_the_exit_codes() {
    for command in [&[][..], &["pingpong"], &["throughput"], &["mcast"]] {
        let mut args = command.to_vec();
        args.push("--help");
        let out = perf(&args);
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(
            help.contains(mdbus_tool_support::output::EXIT_CODES_HELP),
            "{args:?}: {help}"
        );
    }
    for command in ["throughput", "mcast"] {
        let help = String::from_utf8(perf(&[command, "--help"]).stdout).unwrap();
        assert!(help.contains("--allow-loss"), "{command}: {help}");
    }
}

// ------------------------------- perftest's flags, one JSON object ----

/// The `results` array of a sweep (-a): one object per size, powers of
/// two from 2 bytes to the largest message (1 MiB), in order.
fn sweep_results(v: &Value) -> &Vec<Value> {
    let results = v["results"].as_array().unwrap_or_else(|| panic!("{v}"));
    let sizes: Vec<u64> = results.iter().map(|r| u(r, &["size_bytes"])).collect();
    let want: Vec<u64> = (1..=20).map(|p| 1u64 << p).collect();
    assert_eq!(sizes, want, "{v}");
    assert!(v.get("size_bytes").is_none(), "{v}");
    results
}

#[test]
fn pingpong_takes_perftests_flags_and_reports_half_the_round_trip() {
    let s = Scratch::new("pp-perftest");
    for count in ["-n", "--count", "--iters"] {
        let out = measure(&[
            "pingpong", "-s", "16", count, "300", "--warmup", "10", "--name", &s.name, "--config",
            &s.config, "--json",
        ]);
        let v = json_of(&out);
        assert_eq!(v["tool"], "mdbus-perf");
        assert_eq!(v["mode"], "pingpong");
        assert_eq!(v["transport"], "shm");
        assert_eq!(u(&v, &["size_bytes"]), 16, "{count}");
        assert_eq!(u(&v, &["round_trips"]), 300, "{count}");
        assert_eq!(u(&v, &["warmup_round_trips"]), 10, "{count}");
        assert_ordered_percentiles(&v);
    }
}

#[test]
fn pingpong_of_two_byte_messages() {
    // Smaller than the 8-byte counter: it wraps, and the end mark still
    // ends pong.
    let s = Scratch::new("pp-2b");
    let out = measure(&[
        "pingpong", "-s", "2", "-n", "200", "--warmup", "0", "--name", &s.name, "--config",
        &s.config, "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(u(&v, &["size_bytes"]), 2);
    assert_eq!(u(&v, &["round_trips"]), 200);
}

#[test]
fn pingpong_sweep_has_one_result_per_size() {
    let s = Scratch::new("pp-all");
    let out = measure(&[
        "pingpong", "-a", "-n", "5", "--warmup", "0", "--name", &s.name, "--config", &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["channel"], "session");
    for r in sweep_results(&v) {
        assert_eq!(u(r, &["round_trips"]), 5, "{r}");
        assert_eq!(u(r, &["rtt_ns", "count"]), 5, "{r}");
        assert_eq!(
            u(r, &["half_rtt_ns", "p50"]),
            u(r, &["rtt_ns", "p50"]) / 2,
            "{r}"
        );
    }
}

#[test]
fn pingpong_for_a_duration_counts_what_it_measured() {
    let s = Scratch::new("pp-duration");
    let out = measure(&[
        "pingpong", "-D", "100ms", "--warmup", "0", "--name", &s.name, "--config", &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    let n = u(&v, &["round_trips"]);
    assert!(n > 0, "{v}");
    assert_eq!(u(&v, &["rtt_ns", "count"]), n, "{v}");
    assert!(v["seconds"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn throughput_takes_perftests_flags_and_reports_gbits() {
    let s = Scratch::new("tp-perftest");
    let out = measure(&[
        "throughput",
        "-s",
        "128",
        "-n",
        "1000",
        "--report_gbits",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["mode"], "throughput");
    assert_eq!(u(&v, &["size_bytes"]), 128);
    assert_eq!(u(&v, &["sent"]), 1000);
    assert_eq!(u(&v, &["received"]), 1000);
    assert!(v["gbits_per_sec"].as_f64().is_some(), "{v}");
    assert!(v.get("mb_per_sec").is_none(), "{v}");
}

#[test]
fn throughput_sweep_has_one_result_per_size() {
    // A ring of 8 holds all 8 messages of every size: nothing is lost.
    let s = Scratch::new("tp-all");
    let out = measure(&[
        "throughput",
        "-a",
        "-n",
        "8",
        "--capacity",
        "8",
        "--name",
        &s.name,
        "--config",
        &s.config,
        "--json",
    ]);
    let v = json_of(&out);
    for r in sweep_results(&v) {
        assert_eq!((u(r, &["sent"]), u(r, &["received"])), (8, 8), "{r}");
        assert!(r["mb_per_sec"].as_f64().is_some(), "{r}");
    }
}

#[test]
fn throughput_for_a_duration_accounts_for_every_message() {
    // Timed: the publisher ends the stream with an end mark the
    // subscriber does not count, on shared memory and on UDP alike.
    let s = Scratch::new("tp-duration");
    for transport in ["shm", "udp"] {
        let out = measure(&[
            "throughput",
            "--transport",
            transport,
            "-D",
            "150ms",
            "--rate",
            "20000",
            "--allow-loss",
            "--name",
            &s.name,
            "--config",
            &s.config,
            "--json",
        ]);
        let v = json_of(&out);
        let sent = u(&v, &["sent"]);
        assert!(sent > 0, "{transport}: {v}");
        assert_eq!(u(&v, &["before_join"]), 0, "{transport}: {v}");
        assert_eq!(
            u(&v, &["received"]) + u(&v, &["lost"]),
            sent,
            "{transport}: {v}"
        );
    }
}

#[test]
fn mcast_takes_perftests_flags() {
    let p = Patient::new("mcast-perftest");
    let out = measure(&[
        "mcast",
        "-s",
        "16",
        "-n",
        "300",
        "--rate",
        "10000",
        "--report_gbits",
        "--name",
        &p.name,
        "--config",
        &p.config,
        "--json",
    ]);
    let v = json_of(&out);
    assert_eq!(v["mode"], "mcast");
    assert_eq!(u(&v, &["size_bytes"]), 16);
    assert_eq!(u(&v, &["sent"]), 300);
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), 300, "{v}");
    assert_eq!(u(&v, &["latency_ns", "count"]), u(&v, &["received"]), "{v}");
    assert!(v["gbits_per_sec"].as_f64().is_some(), "{v}");
}

#[test]
fn mcast_for_a_duration_accounts_for_every_message() {
    let p = Patient::new("mcast-duration");
    let out = measure(&[
        "mcast", "-D", "100ms", "--rate", "10000", "--name", &p.name, "--config", &p.config,
        "--json",
    ]);
    let v = json_of(&out);
    let sent = u(&v, &["sent"]);
    assert!(sent > 0, "{v}");
    assert_eq!(u(&v, &["received"]) + u(&v, &["lost"]), sent, "{v}");
    assert_eq!(u(&v, &["latency_ns", "count"]), u(&v, &["received"]), "{v}");
}

#[test]
fn transport_auto_is_the_librarys_choice() {
    if has_rdma() {
        skip(
            "transport_auto_is_the_librarys_choice",
            "this machine has an RDMA device, where auto picks verbs",
        );
        return;
    }
    // No RDMA device: shared memory, and for a multicast stream UDP.
    let s = Scratch::new("auto");
    for (mode, want) in [("pingpong", "shm"), ("throughput", "shm"), ("mcast", "udp")] {
        let pace: &[&str] = if mode == "pingpong" {
            &["--warmup", "0"]
        } else {
            &["--rate", "10000"]
        };
        let mut args = vec![mode, "--transport", "auto", "-n", "100"];
        args.extend(pace);
        args.extend(["--name", &s.name, "--config", &s.config, "--json"]);
        let v = json_of(&measure(&args));
        assert_eq!(v["transport"], want, "{mode}: {v}");
    }
}

/// Runs `args`, which must fail with exit status 2 and one line on stderr
/// containing `needle`.
fn usage_error(args: &[&str], needle: &str) {
    let out = perf(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

#[test]
fn cores_this_process_may_not_use_are_a_usage_error() {
    let beyond = std::thread::available_parallelism().map_or(1, |n| n.get()) + 64;
    let cores = format!("0,{beyond}");
    for mode in ["pingpong", "throughput"] {
        usage_error(
            &[mode, "--cores", &cores, "-n", "1"],
            &format!("--cores {cores}: core {beyond} is not available to this process"),
        );
    }
}

#[test]
fn addresses_this_host_lacks_or_shm_ignores_are_usage_errors() {
    // TEST-NET-3 (RFC 5737): never an address of this host.
    for args in [
        &[
            "throughput",
            "--transport",
            "udp",
            "--interface",
            "203.0.113.7",
            "-n",
            "1",
        ][..],
        &[
            "pingpong",
            "--transport",
            "tcp",
            "--interface",
            "203.0.113.7",
            "-n",
            "1",
        ],
        &["mcast", "--interface", "203.0.113.7", "-n", "1"],
    ] {
        usage_error(
            args,
            "--interface 203.0.113.7 is not an address of this host's interfaces",
        );
    }
    // A session's acceptor listens at --address: on this host when it
    // runs here (this process's peer, or --role pong).
    let away = ["--transport", "tcp", "--address", "203.0.113.7:7000"];
    for own in [
        &["pingpong", "-n", "1"][..],
        &["pingpong", "--role", "pong"],
        &["throughput", "-n", "1"],
    ] {
        let args: Vec<&str> = own.iter().chain(&away).copied().collect();
        usage_error(
            &args,
            "--address 203.0.113.7 is not an address of this host's interfaces",
        );
    }
    usage_error(
        &["pingpong", "--interface", "127.0.0.1", "-n", "1"],
        "--interface applies to --transport udp, tcp and verbs, not shm",
    );
}

#[test]
fn conflicting_perftest_flags_are_usage_errors() {
    for (args, needle) in [
        (&["pingpong", "-a", "-s", "64"][..], "--all"),
        (&["throughput", "-n", "10", "-D", "1s"], "--duration"),
        (&["mcast", "-s", "1"], "--size"),
        (&["pingpong", "-D", "soon"], "is not a duration"),
        (&["pingpong", "--report_gbits"], "--report_gbits"),
    ] {
        let out = perf(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: "), "{args:?}: {stderr}");
        assert!(first.contains(needle), "{args:?}: {stderr}");
    }
    usage_error(
        &["mcast", "-a", "--loss", "5"],
        "--loss measures one message size: leave out -a",
    );
}

#[test]
fn pingpong_sides_started_by_hand_each_print_one_object() {
    let s = Scratch::new("pp-hand");
    let side = |role: &str, core: &str| {
        let mut c = Command::new(PERF);
        c.args(["pingpong", "--role", role, "--name", &s.name])
            .args(["--config", &s.config, "--cores", core, "-s", "24", "--json"])
            .args(SHARED_MACHINE)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let pong = side("pong", "1").spawn().expect("start pong");
    let ping = side("ping", "0")
        .args(["-n", "50", "--warmup", "5"])
        .spawn()
        .expect("start ping");
    let ping = json_of(&wait_or_fail(ping, None, "ping by hand"));
    let pong = json_of(&wait_or_fail(pong, None, "pong by hand"));
    assert_eq!(u(&ping, &["round_trips"]), 50, "{ping}");
    assert_eq!(u(&ping, &["size_bytes"]), 24, "{ping}");
    assert_eq!(pong["role"], "pong", "{pong}");
    // Pong echoed the warm-up too.
    assert_eq!(u(&pong, &["messages"]), 55, "{pong}");
}

#[test]
fn fanout_simulates_suppression_and_reports_per_loss_event() {
    let run = |repair: &str, backoff: &str| {
        json_of(&perf(&[
            "fanout",
            "--simulate",
            "--subscribers",
            "40",
            "--messages",
            "3000",
            "--loss",
            "2",
            "--correlated",
            "1",
            "--repair",
            repair,
            "--nak-backoff",
            backoff,
            "--json",
        ]))
    };
    let without = run("requester", "0s");
    let with = run("auto", "1ms");
    for v in [&without, &with] {
        assert_eq!(v["mode"], "fanout", "{v}");
        assert_eq!((u(v, &["subscribers"]), u(v, &["messages"])), (40, 3000));
        assert_eq!(v["delivered_all"], true, "{v}");
        assert_eq!(v["lost"], false, "{v}");
        assert!(u(v, &["upstream_loss_events"]) > 0, "{v}");
        assert_eq!(
            u(v, &["recovery_ns", "count"]),
            u(v, &["recovery_us", "count"])
        );
    }
    let per = |v: &Value, k: &str| v[k].as_f64().unwrap();
    // Every subscriber asks without suppression; a few with it.
    assert!(
        per(&without, "requests_per_loss_event") >= 40.0,
        "{without}"
    );
    assert!(per(&with, "requests_per_loss_event") <= 10.0, "{with}");
    assert!(per(&with, "retransmits_per_loss_event") <= 3.0, "{with}");
    assert!(u(&with, &["group_repair_datagrams"]) > 0, "{with}");
}

#[test]
fn fanout_without_simulate_or_with_bad_shares_is_a_usage_error() {
    let out = perf(&["fanout", "--subscribers", "4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("say --simulate, or --transport udp"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = perf(&["fanout", "--simulate", "--correlated", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--correlated 1.5"));
}
