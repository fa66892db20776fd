//! mdbus-stat reading the counters file of a running mdbus-relay, and its
//! errors for a missing file, a file that is not a counters file, and the
//! stale file of a relay that was killed.

#[path = "relay_common/mod.rs"]
mod relay_common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use relay_common::Scratch;

const RELAY: &str = env!("CARGO_BIN_EXE_mdbus-relay");
const STAT: &str = env!("CARGO_BIN_EXE_mdbus-stat");
const DEADLINE: Duration = Duration::from_secs(120);

fn config(scratch: &Scratch, port: u16) -> std::path::PathBuf {
    let text = format!(
        "[input]\nline_a = \"239.192.78.1:{port}\"\ninterface = \"127.0.0.1\"\n\
         [counters]\npath = \"{}\"\nlog_interval = \"0s\"\nrefresh = \"10ms\"\n\
         [thread]\npin = false\nidle = \"yield\"\n{}\n[routing]\ndefault = \"s1\"\ncontrol = \"ctl\"\n",
        scratch.path("counters").display(),
        scratch.shm_bus(1024),
    );
    let path = scratch.path("relay.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A relay running until killed, and its counters file once it exists.
fn start_relay(scratch: &Scratch, port: u16) -> Child {
    let cfg = config(scratch, port);
    let child = Command::new(RELAY)
        .args(["--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let counters = scratch.path("counters");
    let until = Instant::now() + DEADLINE;
    while !counters.exists() {
        assert!(
            Instant::now() < until,
            "the relay's counters file did not appear"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

fn stat(args: &[&str]) -> Output {
    Command::new(STAT).args(args).output().unwrap()
}

fn port() -> u16 {
    31_000 + (std::process::id() % 20_000) as u16
}

#[test]
fn reads_a_running_relay() {
    let scratch = Scratch::new("stat-live");
    let mut relay = start_relay(&scratch, port());
    let file = scratch.path("counters");
    let out = stat(&[file.to_str().unwrap(), "--once", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["owner"], "mdbus-relay");
    assert_eq!(v["pid"], relay.id());
    for label in [
        "packets",
        "messages_in",
        "messages_out",
        "wins_a",
        "wins_b",
        "duplicate_packets",
        "gaps",
        "recovered",
        "unrecoverable",
        "malformed_packets",
        "latency_p99_ns",
        "stream.s1.messages",
        "stream.ctl.messages",
    ] {
        assert!(v["counters"][label].is_u64(), "no counter {label}: {v}");
    }
    assert!(v.get("rates").is_none(), "--once has no rates");

    // Two samples: the second has rates.
    let out = stat(&[
        file.to_str().unwrap(),
        "--count",
        "2",
        "--interval",
        "20ms",
        "--json",
    ]);
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1]["rates"]["packets"].is_f64());

    // Text form: one line per counter.
    let out = stat(&[file.to_str().unwrap(), "--once"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mdbus-relay (pid"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("messages_in ")),
        "{text}"
    );

    // Killed, the relay leaves a stale file behind.
    relay.kill().unwrap();
    relay.wait().unwrap();
    let out = stat(&[file.to_str().unwrap(), "--once"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{} is stale: its owner mdbus-relay (pid {}) is no longer running",
            file.display(),
            relay.id()
        )),
        "{err}"
    );
}

#[test]
fn missing_and_foreign_files_are_errors() {
    let scratch = Scratch::new("stat-bad");
    let missing = scratch.path("none");
    let out = stat(&[missing.to_str().unwrap(), "--once"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "mdbus-stat: counters file {} does not exist",
            missing.display()
        )),
        "{err}"
    );
    let foreign = scratch.path("foreign");
    std::fs::write(&foreign, vec![7u8; 4096]).unwrap();
    let out = stat(&[foreign.to_str().unwrap(), "--once"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not an mdbus counters file"), "{err}");
}

fn stat_json(args: &[&str]) -> serde_json::Value {
    let out = stat(args);
    assert!(
        out.status.success(),
        "mdbus-stat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A demo killed with SIGKILL leaves its shared-memory segments and its
/// counters file behind: `mdbus-stat list` shows them stale with the dead
/// pid, `mdbus-stat clean` removes them (and only them), and a new demo
/// then runs and exits 0.
#[test]
fn clean_removes_what_a_killed_demo_left_and_a_new_demo_starts() {
    let scratch = Scratch::new("stat-clean");
    let cfg = scratch.path("demo.toml");
    std::fs::write(
        &cfg,
        format!(
            "[input]\nline_a = \"239.192.79.1:{}\"\n[counters]\npath = \"{}\"\nlog_interval = \"0s\"\n\
             [thread]\npin = false\nidle = \"yield\"\n{}{}",
            port(),
            scratch.path("counters").display(),
            scratch.shm_bus(1024),
            relay_common::ROUTING
        ),
    )
    .unwrap();
    let dir = scratch.dir.to_str().unwrap().to_string();
    // A file of a live process (this test's own counters file) must stay.
    let keep = mdbus::counters::CountersFile::create(scratch.path("live.counters"), "test", &["x"])
        .unwrap();
    let mut demo = Command::new(RELAY)
        .args(["--demo", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + DEADLINE;
    while !scratch.path("counters").exists() {
        assert!(
            Instant::now() < until,
            "the demo's counters file did not appear"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    demo.kill().unwrap(); // SIGKILL: nothing is cleaned up
    demo.wait().unwrap();

    let listed = stat_json(&["list", &dir, "--json"]);
    let files = listed["files"].as_array().unwrap();
    let stale: Vec<&serde_json::Value> = files.iter().filter(|f| f["state"] == "stale").collect();
    // Four stream segments and the counters file.
    assert_eq!(stale.len(), 5, "{listed}");
    assert!(stale.iter().all(|f| f["pid"] == demo.id()), "{listed}");
    assert!(
        stale
            .iter()
            .any(|f| f["path"] == scratch.path("counters").to_str().unwrap()),
        "{listed}"
    );
    assert!(files
        .iter()
        .any(|f| f["state"] == "alive" && f["pid"] == std::process::id()));

    let cleaned = stat_json(&["clean", &dir, "--json"]);
    let removed = cleaned["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["removed"] == true)
        .count();
    assert_eq!(removed, 5, "{cleaned}");
    assert!(!scratch.path("counters").exists());
    assert!(scratch.path("live.counters").exists(), "a live file stays");
    let after = stat_json(&["list", &dir, "--json"]);
    assert!(
        after["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["state"] == "alive"),
        "{after}"
    );
    // The text form says what it did.
    let out = stat(&["clean", &dir]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 stale removed"));

    let out = Command::new(RELAY)
        .args([
            "--demo",
            "--config",
            cfg.to_str().unwrap(),
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(keep);
}

/// Every tool lists the exit statuses in its --help.
#[test]
fn every_tool_lists_its_exit_codes() {
    for (tool, args) in [
        (RELAY, &["--help"][..]),
        (RELAY, &["simulate", "--help"][..]),
        (STAT, &["--help"][..]),
        (STAT, &["clean", "--help"][..]),
    ] {
        let out = Command::new(tool).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(mdbus_tool_support::output::EXIT_CODES_HELP),
            "{tool} {args:?}: {text}"
        );
    }
}
