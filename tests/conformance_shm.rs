//! The conformance suite on the shared-memory transport, with real
//! processes for the multi-process cases.

mod conformance;

use std::sync::atomic::{AtomicU32, Ordering};

/// Each bus gets its own segment-name prefix, so tests run in parallel
/// without sharing segments.
struct Shm;

static NEXT: AtomicU32 = AtomicU32::new(0);

impl conformance::Fixture for Shm {
    fn config_toml(&self, extra: &str) -> String {
        format!(
            "transport = \"shm\"\n[shm]\nprefix = \"mdbus-conf-{}-{}\"\n{extra}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn ring(&self) -> bool {
        true
    }
}

conformance_suite!(Shm);
