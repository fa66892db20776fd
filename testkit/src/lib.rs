//! One rule, shared by every test suite of the workspace, for a test whose
//! prerequisite is missing on this machine.
//!
//! A test that lacks what it needs either fails or says loudly that it did
//! nothing. It fails when the run must be complete:
//! - under CI (`CI=true`) or with `MDBUS_REQUIRE_ALL=1`, for a missing
//!   [`Lack::Tool`] (a program, library or header the test command
//!   installs: tshark, Python, iproute2, rdma-core);
//! - for a missing [`Lack::Kernel`] capability (an RDMA device, netem),
//!   under CI too, unless `MDBUS_GUEST_COVERS=1` says that the same run
//!   goes on to run the test in the Soft-RoCE guest, whose kernel has it
//!   (scripts/test-all sets it for the host tests when the guest lane
//!   follows), and always with `MDBUS_REQUIRE_RDMA=1` or
//!   `MDBUS_REQUIRE_NETNS=1` (set inside the guest).
//!
//! Otherwise the skip line goes straight to stderr, past the test
//! harness's capture, so it shows in a passing run.
//!
//! [`fuzz`] holds the other shared piece: the stable run of a cargo-fuzz
//! target over its seed corpus and mutations of it; [`child`] the way a
//! multi-process test starts its peers; [`threads`] tells when another
//! thread sleeps in poll(2) or epoll_wait(2), for tests of waits.

use std::io::Write;

pub mod alloc;
pub mod child;
pub mod fuzz;
pub mod threads;

/// What a test lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lack {
    /// A program, library or header that the test command installs.
    Tool,
    /// A kernel capability the build host may not have (RDMA, netem);
    /// the Soft-RoCE guest has it.
    Kernel,
}

fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.eq_ignore_ascii_case(value))
}

/// Whether a run must not skip anything for `lack`: see the module doc.
pub fn must_run(lack: Lack) -> bool {
    let complete = env_is("CI", "true") || env_is("MDBUS_REQUIRE_ALL", "1");
    match lack {
        Lack::Tool => complete,
        Lack::Kernel => {
            env_is("MDBUS_REQUIRE_RDMA", "1")
                || env_is("MDBUS_REQUIRE_NETNS", "1")
                || (complete && !env_is("MDBUS_GUEST_COVERS", "1"))
        }
    }
}

/// Test `test` cannot run because `why`: panics (failing the test) when
/// the run [`must_run`], else prints one `SKIPPED` line on stderr.
#[track_caller]
pub fn skip(test: &str, lack: Lack, why: &str) {
    if must_run(lack) {
        panic!(
            "{test} must run here but cannot: {why} (CI=true or a MDBUS_REQUIRE_* variable \
             forbids skipping; the test command installs what the tests need)"
        );
    }
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_required_only_when_the_run_must_be_complete() {
        // The test harness runs these in one process: set and clear in one
        // test, in order.
        std::env::remove_var("CI");
        std::env::remove_var("MDBUS_REQUIRE_ALL");
        std::env::remove_var("MDBUS_GUEST_COVERS");
        std::env::remove_var("MDBUS_REQUIRE_RDMA");
        std::env::remove_var("MDBUS_REQUIRE_NETNS");
        assert!(!must_run(Lack::Tool));
        assert!(!must_run(Lack::Kernel));
        std::env::set_var("CI", "true");
        assert!(must_run(Lack::Tool));
        assert!(must_run(Lack::Kernel));
        std::env::set_var("MDBUS_GUEST_COVERS", "1");
        assert!(must_run(Lack::Tool));
        assert!(!must_run(Lack::Kernel));
        std::env::set_var("MDBUS_REQUIRE_RDMA", "1");
        assert!(must_run(Lack::Kernel));
        let caught = std::panic::catch_unwind(|| skip("t", Lack::Tool, "no tshark"));
        let msg = caught.unwrap_err();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("t must run here but cannot: no tshark"),
            "{msg}"
        );
        for v in ["CI", "MDBUS_GUEST_COVERS", "MDBUS_REQUIRE_RDMA"] {
            std::env::remove_var(v);
        }
    }
}
