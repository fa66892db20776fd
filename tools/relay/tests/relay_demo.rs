//! `mdbus-relay --demo --duration 2s`: exits 0 (nothing lost: the
//! simulator's drops are recovered) and prints the summary on stdout and
//! what the subscriber saw on stderr; `--json` prints one object. (The duration is a run length, not a timing
//! assertion.)

use std::process::Command;

const RELAY: &str = env!("CARGO_BIN_EXE_mdbus-relay");

#[test]
fn the_demo_runs_and_prints_its_summary() {
    let out = Command::new(RELAY)
        .args(["--demo", "--duration", "2s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    for needle in [
        "relay summary after",
        "messages in ",
        "messages out ",
        "A/B wins ",
        "duplicates ",
        "gaps ",
        "recovered ",
        "unrecoverable ",
        "relay latency p50 ",
        "stream md-0 ",
        "stream ctl ",
        "ended by     duration",
        "exchange     sent A ",
    ] {
        assert!(stdout.contains(needle), "no `{needle}` in:\n{stdout}");
    }
    assert!(stdout.contains("data lost    none"), "{stdout}");
    // The subscriber's lines go to stderr: stdout is the summary alone.
    assert!(
        stderr.contains("subscriber: md-0 ") && !stdout.contains("subscriber:"),
        "the subscriber printed: {stderr}"
    );
    assert!(
        stderr.contains("mdbus-relay: packets "),
        "the counters line: {stderr}"
    );
    let messages_in: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("messages in"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a messages in line");
    assert!(messages_in > 0, "the demo relayed messages");
}

#[test]
fn the_demo_summary_as_json() {
    let out = Command::new(RELAY)
        .args(["--demo", "--duration", "1s", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exactly one JSON object on stdout, nothing else (jq reads it).
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim().lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(v["data_lost"].is_null(), "{v}");
    assert_eq!(v["ended_by"], "duration");
    assert!(v["messages_in"].as_u64().unwrap() > 0);
    for key in ["wins_a", "wins_b", "gaps", "recovered", "unrecoverable"] {
        assert!(v[key].is_u64(), "no {key} in {v}");
    }
    assert_eq!(v["streams"].as_array().unwrap().len(), 5);
}
