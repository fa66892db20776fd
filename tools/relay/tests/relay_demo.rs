//! `mdbus-relay --demo --duration 2s`: exits 0 (nothing lost: the
//! simulator's drops are recovered), names where to attach in its first
//! line on stderr, prints the summary on stdout and what the subscriber
//! saw on stderr; `--json` prints exactly one object, in the tools'
//! convention. (The duration is a run length, not a timing assertion.)

use std::process::Command;

use mdbus_tool_support::output::check_convention;

const RELAY: &str = env!("CARGO_BIN_EXE_mdbus-relay");

/// This process's demo ports: tests side by side each pass their own
/// `--demo-port` (the line port and the re-request port after it).
fn demo_port(k: u16) -> String {
    (20_000 + (std::process::id() % 2_500) as u16 * 16 + 10 + 2 * k).to_string()
}

#[test]
fn the_demo_runs_and_prints_its_summary() {
    let port = demo_port(0);
    let out = Command::new(RELAY)
        .args(["--demo", "--duration", "2s", "--demo-port", &port])
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
    // The first line says where the feed is and where each stream can be
    // read, so an operator can attach.
    let first = stderr.lines().next().unwrap_or_default();
    let rerequest = format!(
        "re-requests at 127.0.0.1:{}",
        port.parse::<u16>().unwrap() + 1
    );
    for needle in [
        format!("feed line A 239.192.10.1:{port}"),
        format!("line B 239.192.10.2:{port}"),
        rerequest,
        "streams on shm (dir /dev/shm, prefix mdbus-demo-".to_string(),
        "md-0, md-1, md-2, md-3, ctl".to_string(),
    ] {
        assert!(
            first.contains(&needle),
            "no `{needle}` in the first line: {first}"
        );
    }
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
fn the_demo_summary_is_one_json_object_in_the_convention() {
    let out = Command::new(RELAY)
        .args([
            "--demo",
            "--duration",
            "2s",
            "--json",
            "--demo-port",
            &demo_port(1),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // All of stdout is one JSON object (jq reads it); the subscriber's
    // lines went to stderr.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON value ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    let keys: Vec<&String> = v.as_object().unwrap().keys().take(2).collect();
    assert_eq!(keys, ["schema", "tool"], "{v}");
    assert!(stderr.contains("subscriber: md-0 "), "{stderr}");
    assert_eq!(v["tool"], "mdbus-relay");
    assert_eq!(v["lost"], false, "{v}");
    assert!(v["data_lost"].is_null(), "{v}");
    assert_eq!(v["ended_by"], "duration");
    let messages_in = v["messages_in"].as_u64().unwrap();
    assert!(messages_in > 0);
    // Every message in went out on one stream at least (system messages
    // go to all five).
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 5);
    let out_sum: u64 = streams
        .iter()
        .map(|s| s["messages"].as_u64().unwrap())
        .sum();
    assert_eq!(out_sum, v["messages_out"].as_u64().unwrap());
    assert!(out_sum >= messages_in, "{v}");
    for key in [
        "wins_a",
        "wins_b",
        "gaps",
        "recovered",
        "unrecoverable",
        "malformed_packets",
    ] {
        assert!(v[key].is_u64(), "no {key} in {v}");
    }
    // Rejections by reason, under the counters file's names.
    let drops = v["drops"].as_object().unwrap();
    assert_eq!(drops.len(), 8, "{v}");
    assert_eq!(drops["other_session"], 0);
    assert_eq!(drops["malformed_short_header"], 0);
    // One latency per timed datagram.
    assert_eq!(v["latency_ns"]["count"], v["timed_packets"], "{v}");
    // The simulator's own counts: what it dropped on line B was recovered.
    let x = &v["exchange"];
    assert!(x["dropped_b"].as_u64().unwrap() > 0, "{v}");
    assert!(x["packets_a"].as_u64().unwrap() > 0, "{v}");
}

/// Two demos on one port: the second cannot bind the re-request port and
/// says which option to change (exit status 2, a setting that cannot be
/// used), leaving the first running.
#[test]
fn a_second_demo_on_the_same_port_is_refused_with_the_option_to_change() {
    use std::io::BufRead as _;
    let port = demo_port(2);
    let mut first = Command::new(RELAY)
        .args(["--demo", "--duration", "60s", "--demo-port", &port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first has bound its ports once it says where its counters are
    // (after the simulator started).
    let mut lines = std::io::BufReader::new(first.stderr.take().unwrap()).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("relay publishing"));
    assert!(ready.is_some(), "the first demo did not start");
    std::thread::spawn(move || lines.for_each(drop));
    let second = Command::new(RELAY)
        .args(["--demo", "--duration", "1s", "--demo-port", &port])
        .output()
        .unwrap();
    // SAFETY: signalling our own child, still running (60 s).
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGINT) }, 0);
    let status = first.wait().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "is another demo using port {port}? choose another with --demo-port"
        )),
        "{err}"
    );
    assert!(second.stdout.is_empty());
    assert!(status.success(), "the first demo ended with {status}");
}
