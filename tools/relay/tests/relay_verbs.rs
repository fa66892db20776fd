//! The live scenario of `relay_live` with the relay publishing on RDMA
//! verbs: UD multicast streams sent from the first device (rxe0 in the
//! Soft-RoCE lane) and received on the second (rxe1), as on two hosts.
//! Every message must arrive on its streams, in order.
//!
//! Needs an active RDMA port: `scripts/guest-tests` runs it inside the
//! lane. Elsewhere it prints `SKIPPED: no RDMA device` and passes.

mod relay_common;
#[path = "../../../tests/verbs_support/mod.rs"]
mod verbs_support;

use relay_common::live::{live, Day};
use relay_common::STREAMS;

#[test]
fn simulator_to_relay_to_verbs_ud_subscribers() {
    if !verbs_support::rdma_or_skip("relay_verbs") {
        return;
    }
    let (a, b) = (verbs_support::addr_a(), verbs_support::addr_b());
    let port = verbs_support::unique_port();
    let mut bus = String::from("[bus]\ntransport = \"verbs\"\n");
    for s in STREAMS {
        bus.push_str(&format!(
            "[bus.streams.{s}]\ngroup = \"{}\"\ninterface = \"{a}\"\nmax_datagram = 1024\ncapacity = 65536\n",
            verbs_support::unique_group()
        ));
    }
    // Subscribers on the second device: the same streams, the other
    // interface.
    let sub_text = bus
        .replace("[bus]\n", "")
        .replace("[bus.streams.", "[streams.")
        .replace(
            &format!("interface = \"{a}\""),
            &format!("interface = \"{b}\""),
        );
    let sub_bus = mdbus::Config::from_toml_str(&sub_text, "<subscribers>").unwrap();
    // The lane's CPUs are emulated: a small day at a modest pace.
    let day = Day {
        order_messages: 3_000,
        messages_per_second: 5_000,
    };
    live(&bus, Some(sub_bus), port, day);
}
