//! Live: the exchange simulator sends a synthetic day on two loopback
//! multicast lines, each losing packets independently, and answers
//! re-requests; the relay arbitrates, recovers, routes and publishes;
//! subscribers check that every message arrived on its streams, in order,
//! and that the counters agree. Once over shared memory, once over UDP
//! multicast (the bus's own loss recovery behind the relay).

mod relay_common;

use relay_common::live::{live, Day};
use relay_common::*;

#[test]
fn simulator_to_relay_to_shm_subscribers_with_loss_on_both_lines() {
    let scratch = Scratch::new("live-shm-bus");
    let port = 33_000 + (std::process::id() % 10_000) as u16 * 2;
    live(&scratch.shm_bus(1 << 16), None, port, Day::default());
}

#[test]
fn simulator_to_relay_to_udp_subscribers() {
    let port = 53_000 + (std::process::id() % 5_000) as u16 * 2;
    let mut bus = String::from("[bus]\ntransport = \"udp\"\n");
    for (i, s) in STREAMS.iter().enumerate() {
        bus.push_str(&format!(
            "[bus.streams.{s}]\ngroup = \"239.192.82.{}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\ncapacity = 65536\n",
            i + 1
        ));
    }
    live(&bus, None, port, Day::default());
}
