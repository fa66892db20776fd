//! The whole conformance suite on RDMA verbs: sessions on RC queue pairs
//! through rdma_cm, streams on UD multicast with loss recovery, with real
//! processes for the multi-process cases. Publishers send on the first
//! device (rxe0 in the lane), subscribers receive on the second (rxe1), as
//! on two hosts.
//!
//! The session half runs once per session mode (`send` at the top level,
//! `write` and `write-imm` in their modules): same contract, same tests.
//!
//! Needs an active RDMA port: run inside the Soft-RoCE lane
//! (`scripts/guest-tests`). Elsewhere each
//! test prints `SKIPPED: no RDMA device` and passes.

mod conformance;
mod verbs_support;

/// Sessions on the first device's address, each on its own port, in
/// session mode `mode`; each stream on its own group.
struct Verbs {
    mode: &'static str,
}

impl conformance::Fixture for Verbs {
    fn config_toml(&self, extra: &str) -> String {
        let session = format!(
            "address = \"{}:{}\"\nmode = \"{}\"\n",
            verbs_support::addr_a(),
            verbs_support::unique_port(),
            self.mode
        );
        // A generous silence limit: the lane's CPUs are emulated and
        // shared by four busy-polling processes, so a subscriber can go
        // unscheduled for a good part of a second.
        let stream = format!(
            "group = \"{}\"\ninterface = \"{}\"\n\
             heartbeat_interval = \"20ms\"\nheartbeat_timeout = \"2s\"\n",
            verbs_support::unique_group(),
            verbs_support::addr_a()
        );
        let extra = conformance::with_fixture_fields(
            extra,
            &[("[streams.s]", &stream), ("[sessions.o]", &session)],
        );
        format!("transport = \"verbs\"\n{extra}")
    }

    fn subscriber_toml(&self, publisher_toml: &str) -> String {
        publisher_toml.replace(
            &format!("interface = \"{}\"", verbs_support::addr_a()),
            &format!("interface = \"{}\"", verbs_support::addr_b()),
        )
    }
}

/// The fixture for `mode`, or `None` (after printing why) without RDMA.
fn fixture(mode: &'static str) -> Option<Verbs> {
    verbs_support::rdma_or_skip("conformance_verbs").then_some(Verbs { mode })
}

conformance_suite!(match fixture("send") {
    Some(f) => f,
    None => return,
});

/// Sessions whose messages are RDMA writes into the peer's ring, found by
/// polling the slot's last word.
mod write {
    use super::*;

    conformance_session_tests!(match fixture("write") {
        Some(f) => f,
        None => return,
    });
}

/// Sessions whose messages are RDMA writes with immediate into the ring.
mod write_imm {
    use super::*;

    conformance_session_tests!(match fixture("write-imm") {
        Some(f) => f,
        None => return,
    });
}
