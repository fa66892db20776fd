//! `mdbus-perf latejoin`: a late joiner gets every message exactly once,
//! in order, and the JSON object follows docs/JSON.md.

use std::process::Command;

use serde_json::Value;

fn run(transport: &str, group: &str) -> Value {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("latejoin-{transport}-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_mdbus-perf"))
        .args([
            "latejoin",
            "--transport",
            transport,
            "--messages",
            "40000",
            "--join-at",
            "0.8",
            // A debug build's recorder writes about that fast on a busy
            // machine; the recorder's lag is not what this checks.
            "--rate",
            "50000",
            "--capacity",
            "16384",
            "--group",
            group,
            "--archive-dir",
        ])
        .arg(&dir)
        .arg("--json")
        .output()
        .expect("run mdbus-perf");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(mdbus_tool_support::output::check_convention(&v), Ok(()));
    v
}

fn check(v: &Value) {
    assert_eq!(v["mode"], "latejoin", "{v}");
    assert_eq!(v["messages"], 40000, "{v}");
    assert_eq!(v["received"], 40000, "{v}");
    for k in ["duplicates", "gaps", "out_of_order"] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
    assert!(v["join_seq"].as_u64().unwrap() >= 32000, "{v}");
    // The join reached back beyond the ring (16384 messages, generous so
    // that a recorder descheduled on a busy machine is not overrun): the
    // archive served the start.
    assert!(v["replayed"].as_u64().unwrap() >= 32000 - 16384, "{v}");
    assert!(v["catchup_ms"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn latejoin_on_shm_receives_everything_once_in_order() {
    check(&run("shm", "239.255.77.1:47000"));
}

#[test]
fn latejoin_on_udp_receives_everything_once_in_order() {
    let port = 47_100 + std::process::id() % 500;
    check(&run("udp", &format!("239.255.78.9:{port}")));
}
