//! `mdbus-relay --demo --duration 2s`: exits 0 and prints the summary and
//! what the subscriber saw. (The duration is a run length, not a timing
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
    assert!(
        stdout.contains("subscriber: md-0 "),
        "the subscriber printed: {stdout}"
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
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rfind(|l| l.starts_with('{'))
        .expect("a JSON summary")
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(v["ended_by"], "duration");
    assert!(v["messages_in"].as_u64().unwrap() > 0);
    for key in ["wins_a", "wins_b", "gaps", "recovered", "unrecoverable"] {
        assert!(v[key].is_u64(), "no {key} in {v}");
    }
    assert_eq!(v["streams"].as_array().unwrap().len(), 5);
}
