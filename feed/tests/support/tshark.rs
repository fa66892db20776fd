//! tshark over a capture of MoldUDP64 on one UDP port, with NASDAQ ITCH
//! decoded under it: shared by the tests of the feed formats, of the
//! exchange simulator and of the relay's pass-through.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// tshark's version line; `None`, after printing why `test` is skipped,
/// when tshark is not installed.
pub fn version_or_skip(test: &str) -> Option<String> {
    let version = Command::new("tshark")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        });
    if version.is_none() {
        mdbus_testkit::skip(
            test,
            mdbus_testkit::Lack::Tool,
            "tshark is not installed (apt-get install tshark)",
        );
    }
    version
}

/// Reads `capture`, decoding UDP port `port` as MoldUDP64, every message
/// block as ITCH (the payload table takes no selector), and checking the
/// IP and UDP checksums; then `extra`. Returns what tshark printed.
pub fn run(capture: &Path, port: u16, extra: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(capture)
        .args(["-d", &format!("udp.port=={port},moldudp64")])
        .args(["-d", "moldudp64.payload,nasdaq_itch"])
        .args(["-o", "ip.check_checksum:TRUE"])
        .args(["-o", "udp.check_checksum:TRUE"])
        .args(extra)
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark {extra:?} on {} failed: {}",
        capture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

/// The full dissection (`-V`) of `capture`, asserted free of malformed
/// packets and error-level expert info; returns it and the number of ITCH
/// layers in it.
pub fn dissect_clean(capture: &Path, port: u16) -> (String, usize) {
    let verbose = run(capture, port, &["-V"]);
    assert!(
        !verbose.contains("Malformed"),
        "tshark reports a malformed packet"
    );
    assert!(
        !verbose.contains("Expert Info (Error"),
        "tshark reports an error:\n{}",
        verbose
            .lines()
            .filter(|l| l.contains("Expert Info (Error"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let itch_layers = verbose
        .lines()
        .filter(|l| l.trim_start().starts_with("Nasdaq TotalView-ITCH"))
        .count();
    (verbose, itch_layers)
}
