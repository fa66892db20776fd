//! The `mdbus-exchange` binary: a whole short session on loopback
//! multicast, and its usage errors.

use std::process::Command;

const EXCHANGE: &str = env!("CARGO_BIN_EXE_mdbus-exchange");

/// A port pair of this process's own, so parallel runs do not meet.
fn port() -> u16 {
    30_000 + (std::process::id() % 10_000) as u16 * 2
}

#[test]
fn runs_a_session_to_its_end_and_says_so() {
    let p = port();
    let out = Command::new(EXCHANGE)
        .args(["--messages", "500", "--symbols", "5", "--rate", "0"])
        .args(["--linger", "0.05s", "--drop-b", "1"])
        .args(["--group-a", &format!("239.192.10.1:{p}")])
        .args(["--group-b", &format!("239.192.10.2:{p}")])
        .args(["--rerequest", &format!("127.0.0.1:{}", p + 1)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.starts_with("mdbus-exchange: session MDBUS00001"),
        "{stderr}"
    );
    assert!(stdout.contains("session MDBUS00001 finished"), "{stdout}");
    // Every message packet dropped on B, none on A; the end of session
    // goes out three times on both lines regardless.
    let packets: u64 = stdout
        .split(" packets in ")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {stdout}"));
    assert!(
        stdout.contains(&format!("dropped 0, line B sent 3 dropped {packets},")),
        "{stdout}"
    );
}

#[test]
fn a_bad_duration_is_a_usage_error_naming_it() {
    let out = Command::new(EXCHANGE)
        .args(["--linger", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`soon` is not a duration"), "{stderr}");
}

#[test]
fn help_lists_the_exit_codes() {
    let out = Command::new(EXCHANGE).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(mdbus_tool_support::output::EXIT_CODES_HELP),
        "{text}"
    );
}

#[test]
fn an_address_that_is_not_multicast_is_a_usage_error() {
    let out = Command::new(EXCHANGE)
        .args(["--group-a", "10.0.0.1:5000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line A address 10.0.0.1:5000 is not an IPv4 multicast group"),
        "{stderr}"
    );
}
