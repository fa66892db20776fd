//! The session half of the conformance suite on RDMA verbs (RC queue pairs
//! through rdma_cm), with real processes for the multi-process cases.
//! Streams on verbs run over the UD datagram link, tested on its own in
//! tests/verbs_ud.rs until the stream driver carries it.
//!
//! Needs an active RDMA port: run inside the Soft-RoCE lane
//! (`scripts/rdma-lane -- scripts/rdma-guest/verbs-tests`). Elsewhere each
//! test prints `SKIPPED: no RDMA device` and passes.

mod conformance;
mod verbs_support;

/// Sessions on the first device's address, each on its own port.
struct Verbs;

impl conformance::Fixture for Verbs {
    fn config_toml(&self, extra: &str) -> String {
        let address = format!(
            "address = \"{}:{}\"",
            verbs_support::addr_a(),
            verbs_support::unique_port()
        );
        let extra = if extra.contains("[sessions.o]") {
            extra.replace("[sessions.o]", &format!("[sessions.o]\n{address}"))
        } else {
            format!("{extra}\n[sessions.o]\n{address}\n")
        };
        format!("transport = \"verbs\"\n{extra}")
    }
}

/// The fixture, or `None` (after printing why) without RDMA.
fn fixture() -> Option<Verbs> {
    verbs_support::rdma_or_skip("conformance_verbs").then_some(Verbs)
}

conformance_session_suite!(match fixture() {
    Some(f) => f,
    None => return,
});
