//! What the verbs tests share: whether this machine has an active RDMA
//! port, and the addresses of the Soft-RoCE lane's devices.
//!
//! Without RDMA (an ordinary build host), a test that needs it returns at
//! once and says `SKIPPED: no RDMA device` on stderr, bypassing the test
//! harness's capture so the line shows in a passing run. With
//! `MDBUS_REQUIRE_RDMA=1` (set by scripts/rdma-guest/verbs-tests inside the
//! guest) a missing device fails the test instead.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use mdbus::config::VerbsConfig;

/// Whether RDMA is here; prints the skip line when it is not.
pub fn rdma_or_skip(test: &str) -> bool {
    match mdbus::transport::verbs::detect(&VerbsConfig::default()) {
        Ok(_) => true,
        Err(why) => {
            let why = format!("no RDMA device: {why}");
            mdbus_testkit::skip(test, mdbus_testkit::Lack::Kernel, &why);
            false
        }
    }
}

/// The address of the first device (rxe0 in the lane): `MDBUS_RDMA_ADDR`,
/// default 10.99.0.1.
pub fn addr_a() -> String {
    std::env::var("MDBUS_RDMA_ADDR").unwrap_or_else(|_| "10.99.0.1".into())
}

/// The address of the second device (rxe1 in the lane's pair set-up):
/// `MDBUS_RDMA_ADDR_B`, default 10.99.0.2.
pub fn addr_b() -> String {
    std::env::var("MDBUS_RDMA_ADDR_B").unwrap_or_else(|_| "10.99.0.2".into())
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port no other test (in this process or a sibling test binary) uses.
pub fn unique_port() -> u16 {
    (30_000 + (std::process::id() % 1_500) * 20 + NEXT.fetch_add(1, Ordering::Relaxed)) as u16
}

/// A multicast group no other test uses.
pub fn unique_group() -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "239.{}.{}.{}:{}",
        1 + std::process::id() % 200,
        n / 250,
        1 + n % 250,
        unique_port()
    )
}

/// A counter of the device's port 1 (`hw_counters/NAME`), when it has one.
pub fn hw_counter(device: &str, name: &str) -> Option<u64> {
    let p = format!("/sys/class/infiniband/{device}/ports/1/hw_counters/{name}");
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Waits until `device`'s port 1 is ACTIVE with its IPv4-mapped GID at
/// index 1, as the lane leaves it, after a test took its netdev down or
/// re-created it. Polls sysfs (the state of the environment, not of the
/// code under test); panics after a minute.
pub fn wait_port_ready(device: &str) {
    let port = format!("/sys/class/infiniband/{device}/ports/1");
    for _ in 0..6000 {
        let state = std::fs::read_to_string(format!("{port}/state")).unwrap_or_default();
        let gid = std::fs::read_to_string(format!("{port}/gids/1")).unwrap_or_default();
        if state.contains("ACTIVE") && gid.starts_with("0000:0000:0000:0000:0000:ffff:") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{port} did not come back ACTIVE with an IPv4 GID");
}
