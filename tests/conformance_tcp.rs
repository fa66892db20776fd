//! The session half of the conformance suite on TCP over loopback, with
//! real processes for the multi-process cases.

mod conformance;

use std::sync::atomic::{AtomicU32, Ordering};

/// Each session gets its own port: a base from the process id, plus a
/// counter, so test binaries running side by side do not collide.
struct Tcp;

static NEXT: AtomicU32 = AtomicU32::new(0);

impl conformance::Fixture for Tcp {
    fn config_toml(&self, extra: &str) -> String {
        let port =
            20_000 + (std::process::id() % 2_000) * 16 + NEXT.fetch_add(1, Ordering::Relaxed);
        let extra = if extra.contains("[sessions.o]") {
            extra.replace(
                "[sessions.o]",
                &format!("[sessions.o]\naddress = \"127.0.0.1:{port}\""),
            )
        } else {
            format!("{extra}\n[sessions.o]\naddress = \"127.0.0.1:{port}\"\n")
        };
        format!("transport = \"tcp\"\n{extra}")
    }
}

conformance_session_suite!(Tcp);
