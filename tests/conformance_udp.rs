//! The whole conformance suite on the IP transport over loopback: streams
//! on UDP multicast with loss recovery, sessions on TCP, with real peer
//! processes for the multi-process cases.

mod conformance;

use std::sync::atomic::{AtomicU32, Ordering};

/// Each channel gets its own group and port: a base from the process id,
/// plus a counter, so test binaries running side by side do not collide.
struct Udp;

static NEXT: AtomicU32 = AtomicU32::new(0);

impl conformance::Fixture for Udp {
    fn config_toml(&self, extra: &str) -> String {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 30_000 + (std::process::id() % 1_000) * 32 + n;
        let group = format!("239.255.{}.{}", 1 + std::process::id() % 250, 1 + n % 250);
        // A 2 s silence limit: a loaded machine deschedules a publisher
        // for several hundred milliseconds, which a tighter limit reports
        // as a dead publisher in the middle of a test.
        let stream = format!(
            "group = \"{group}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\n\
             heartbeat_interval = \"20ms\"\nheartbeat_timeout = \"2s\"\n"
        );
        let session = format!("address = \"127.0.0.1:{port}\"\n");
        let extra = conformance::with_fixture_fields(
            extra,
            &[("[streams.s]", &stream), ("[sessions.o]", &session)],
        );
        format!("transport = \"udp\"\n{extra}")
    }
}

conformance_suite!(Udp);
