//! `mdbus-perf fanout --transport udp` as a user runs it: a publisher and
//! a subscriber process per host, each host a network namespace on one
//! bridge, loss injected by nftables upstream of every subscriber and on
//! the way to each. Needs root and nftables; elsewhere a loud skip, and
//! with CI=true a failure. Counts are small; nothing here asserts on speed.

use std::process::Command;

use serde_json::Value;

const PERF: &str = env!("CARGO_BIN_EXE_mdbus-perf");
const TEST: &str = "udp_fanout_delivers_every_message_to_every_subscriber_process";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn have_nft() -> bool {
    Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
fn udp_fanout_delivers_every_message_to_every_subscriber_process() {
    if !is_root() {
        mdbus_testkit::skip(
            TEST,
            mdbus_testkit::Lack::Tool,
            "needs root for network namespaces",
        );
        return;
    }
    if !have_nft() {
        mdbus_testkit::skip(
            TEST,
            mdbus_testkit::Lack::Tool,
            "nftables (`nft`) is not installed",
        );
        return;
    }
    // 5% loss, half upstream: with 400 datagrams, losses on every host are
    // all but certain (no loss at all: about e^-90).
    let child = Command::new(PERF)
        .args([
            "fanout",
            "--transport",
            "udp",
            "--subscribers",
            "8",
            "--count",
            "8000",
            "--loss",
            "5",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run mdbus-perf");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for mdbus-perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(
        mdbus_tool_support::output::check_convention(&v),
        Ok(()),
        "{v}"
    );
    assert_eq!(v["mode"], "fanout", "{v}");
    assert_eq!(v["simulated"], false, "{v}");
    assert_eq!((u(&v, "subscribers"), u(&v, "messages")), (8, 8000), "{v}");
    assert_eq!(v["delivered_all"], true, "{v}");
    assert_eq!(u(&v, "incomplete_subscribers"), 0, "{v}");
    assert!(u(&v, "upstream_loss_events") > 0, "{v}");
    assert!(u(&v, "independent_loss_events") > 0, "{v}");
    // Every loss was asked for and repaired, and the time it took shows.
    assert!(u(&v, "requests") > 0 && u(&v, "repairs") > 0, "{v}");
    assert!(v["recovery_ns"]["count"].as_u64() > Some(0), "{v}");
    // The namespaces are gone.
    let prefix = format!("mdbp{pid}f");
    let left: Vec<String> = std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}
