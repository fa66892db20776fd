//! Peer processes for multi-process tests: the test binary runs itself
//! with only its ignored `child_entry` test selected, and that test reads
//! its role from the environment.

use std::process::{Command, Stdio};

/// The libtest arguments that run only the ignored `child_entry` test, on
/// one thread, with its output passed through and the harness quiet.
pub const CHILD_ENTRY_ARGS: [&str; 6] = [
    "--ignored",
    "--exact",
    "child_entry",
    "--nocapture",
    "--test-threads=1",
    "-q",
];

/// This test binary as a peer: `child_entry` selected, stdin and stdout
/// piped (the peer speaks a line protocol on them).
pub fn child_command() -> Command {
    let exe = std::env::current_exe().expect("the test binary's own path");
    let mut c = Command::new(exe);
    c.args(CHILD_ENTRY_ARGS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    c
}
