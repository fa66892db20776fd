//! The relay's counters: what the arbiter counted upstream, what the
//! relay did with the messages, and the latency it added; published to the
//! counters file, logged, and summarised at the end.

use mdbus::counters::CountersFile;
use mdbus::metrics::{Latency, Summary};
use serde::Serialize;

/// What arbitration and recovery counted (the arbiter's counters; zero for
/// a BinaryFILE input, which has no packets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Upstream {
    /// Datagrams received on line A.
    pub packets_a: u64,
    /// Datagrams received on line B.
    pub packets_b: u64,
    /// Datagrams received from the re-request server.
    pub packets_recovery: u64,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// Messages first delivered from line A.
    pub wins_a: u64,
    /// Messages first delivered from line B.
    pub wins_b: u64,
    /// Messages first delivered by the re-request server.
    pub wins_recovery: u64,
    /// Packets that brought nothing new.
    pub duplicate_packets: u64,
    /// Messages that had already been delivered.
    pub duplicate_messages: u64,
    /// Gaps seen (events).
    pub gaps: u64,
    /// Messages missing in those gaps when they were seen.
    pub gap_messages: u64,
    /// Re-requests sent.
    pub requests_sent: u64,
    /// Re-requests sent again after a timeout.
    pub request_retries: u64,
    /// Re-requests held back by the rate limit.
    pub requests_rate_limited: u64,
    /// Messages that filled a gap (from the other line or the re-request
    /// server).
    pub recovered: u64,
    /// Messages declared lost for good.
    pub unrecoverable: u64,
    /// Packets rejected as malformed.
    pub malformed: u64,
    /// Session changes mid-stream.
    pub session_changes: u64,
    /// Packets whose sequence number jumped backwards.
    pub backwards: u64,
    /// Gaps given up because the reorder store was full.
    pub reorder_overflow: u64,
    /// End-of-session packets received in sequence.
    pub end_of_session: u64,
    /// Packets of a session other than the one followed (stragglers of an
    /// old session, or a feed that is not the configured one).
    pub other_session: u64,
    /// Packets with new data after the end of session: dropped.
    pub after_end: u64,
    /// Packets dropped for a sequence number implausibly far ahead.
    pub suspect_jumps: u64,
}

/// What the relay itself counts, per message; plain integers on the hot
/// path, published periodically.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Local {
    /// Messages handed to routing, in sequence order.
    pub messages_in: u64,
    /// Messages published (a system message sent to every stream counts
    /// once per stream).
    pub messages_out: u64,
    /// ITCH messages of an unknown type or a wrong length: not published.
    pub bad_messages: u64,
    /// Messages routed nowhere (unknown locate without a control stream,
    /// or a symbol no stream claims).
    pub unrouted: u64,
    /// Publishes that failed (datagram transports only).
    pub publish_errors: u64,
    /// MoldUDP64 pass-through packets sent (heartbeats included).
    pub passthrough_packets: u64,
    /// Pass-through sends that failed.
    pub passthrough_errors: u64,
    /// Messages written to the `.mdcap` recording.
    pub recorded: u64,
    /// Recording writes that failed (recording stops at the first).
    pub record_errors: u64,
    /// Datagrams whose messages were published, whose latency is recorded.
    pub timed_packets: u64,
}

/// Everything, at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Datagrams received, all lines (0 for a BinaryFILE).
    pub packets: u64,
    /// Arbitration and recovery.
    #[serde(flatten)]
    pub upstream: Upstream,
    /// Routing and publishing.
    #[serde(flatten)]
    pub local: Local,
    /// Messages published per stream, in stream order.
    pub streams: Vec<StreamCount>,
    /// Relay-added latency per datagram (arrival to publish complete), ns.
    pub latency_ns: Summary,
}

/// Messages published on one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StreamCount {
    /// The stream.
    pub name: String,
    /// Messages published on it.
    pub messages: u64,
}

/// Labels of the counters file's fixed slots, in order; the per-stream
/// slots (`stream.NAME.messages`) follow.
pub const FIXED_LABELS: [&str; 39] = [
    "packets",
    "packets_a",
    "packets_b",
    "packets_recovery",
    "heartbeats",
    "messages_in",
    "messages_out",
    "wins_a",
    "wins_b",
    "wins_recovery",
    "duplicate_packets",
    "duplicate_messages",
    "gaps",
    "gap_messages",
    "requests_sent",
    "request_retries",
    "requests_rate_limited",
    "recovered",
    "unrecoverable",
    "malformed_packets",
    "bad_messages",
    "unrouted",
    "session_changes",
    "backwards",
    "reorder_overflow",
    "end_of_session",
    "other_session",
    "after_end",
    "suspect_jumps",
    "publish_errors",
    "passthrough_packets",
    "passthrough_errors",
    "recorded",
    "record_errors",
    "latency_count",
    "latency_p50_ns",
    "latency_p99_ns",
    "latency_p999_ns",
    "latency_max_ns",
];

/// Every counter's value in [`FIXED_LABELS`] order. No allocation.
pub fn fixed_values(u: &Upstream, l: &Local, lat: &Summary) -> [u64; 39] {
    [
        u.packets_a + u.packets_b + u.packets_recovery,
        u.packets_a,
        u.packets_b,
        u.packets_recovery,
        u.heartbeats,
        l.messages_in,
        l.messages_out,
        u.wins_a,
        u.wins_b,
        u.wins_recovery,
        u.duplicate_packets,
        u.duplicate_messages,
        u.gaps,
        u.gap_messages,
        u.requests_sent,
        u.request_retries,
        u.requests_rate_limited,
        u.recovered,
        u.unrecoverable,
        u.malformed,
        l.bad_messages,
        l.unrouted,
        u.session_changes,
        u.backwards,
        u.reorder_overflow,
        u.end_of_session,
        u.other_session,
        u.after_end,
        u.suspect_jumps,
        l.publish_errors,
        l.passthrough_packets,
        l.passthrough_errors,
        l.recorded,
        l.record_errors,
        lat.count,
        lat.p50,
        lat.p99,
        lat.p999,
        lat.max,
    ]
}

/// The labels of a relay's counters file for streams `names`.
pub fn labels(names: &[String]) -> Vec<String> {
    FIXED_LABELS
        .iter()
        .map(|s| s.to_string())
        .chain(names.iter().map(|n| format!("stream.{n}.messages")))
        .collect()
}

/// Writes every counter into `file` (laid out by [`labels`]). No
/// allocation: called from the polling loop.
pub fn publish(
    file: &CountersFile,
    u: &Upstream,
    l: &Local,
    per_stream: &[u64],
    latency: &Latency,
    now_ns: u64,
) {
    let lat = latency.summary();
    for (i, v) in fixed_values(u, l, &lat).into_iter().enumerate() {
        file.set(i, v);
    }
    for (i, v) in per_stream.iter().enumerate() {
        file.set(FIXED_LABELS.len() + i, *v);
    }
    file.touch(now_ns);
}

/// A snapshot of everything.
pub fn snapshot(
    u: &Upstream,
    l: &Local,
    names: &[String],
    per_stream: &[u64],
    latency: &Latency,
) -> Snapshot {
    Snapshot {
        packets: u.packets_a + u.packets_b + u.packets_recovery,
        upstream: *u,
        local: *l,
        streams: names
            .iter()
            .zip(per_stream)
            .map(|(n, m)| StreamCount {
                name: n.clone(),
                messages: *m,
            })
            .collect(),
        latency_ns: latency.summary(),
    }
}

impl Snapshot {
    /// One log line: totals, and rates against `prev` over `secs`.
    pub fn log_line(&self, prev: &Snapshot, secs: f64) -> String {
        let rate = |now: u64, then: u64| (now.saturating_sub(then)) as f64 / secs.max(1e-9);
        format!(
            "packets {} ({:.0}/s) in {} ({:.0}/s) out {} ({:.0}/s) wins A/B {}/{} dup {} gaps {} recovered {} unrecoverable {} malformed {} bad {} unrouted {} latency p50/p99/p99.9/max {}/{}/{}/{} ns",
            self.packets,
            rate(self.packets, prev.packets),
            self.local.messages_in,
            rate(self.local.messages_in, prev.local.messages_in),
            self.local.messages_out,
            rate(self.local.messages_out, prev.local.messages_out),
            self.upstream.wins_a,
            self.upstream.wins_b,
            self.upstream.duplicate_packets,
            self.upstream.gaps,
            self.upstream.recovered,
            self.upstream.unrecoverable,
            self.upstream.malformed,
            self.local.bad_messages,
            self.local.unrouted,
            self.latency_ns.p50,
            self.latency_ns.p99,
            self.latency_ns.p999,
            self.latency_ns.max,
        )
    }

    /// The summary printed at the end, several lines.
    pub fn summary_text(&self, secs: f64) -> String {
        let mut s = format!(
            "relay summary after {secs:.1} s\n  packets      {} (A {}, B {}, recovery {}, heartbeats {})\n  messages in  {}\n  messages out {}\n  A/B wins     {} / {} (re-requests {})\n  duplicates   {} packets, {} messages\n  gaps         {} ({} messages)\n  recovered    {}\n  unrecoverable {}\n  malformed    {} packets, {} messages\n  unrouted     {}\n  relay latency p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns ({} packets)\n",
            self.packets,
            self.upstream.packets_a,
            self.upstream.packets_b,
            self.upstream.packets_recovery,
            self.upstream.heartbeats,
            self.local.messages_in,
            self.local.messages_out,
            self.upstream.wins_a,
            self.upstream.wins_b,
            self.upstream.wins_recovery,
            self.upstream.duplicate_packets,
            self.upstream.duplicate_messages,
            self.upstream.gaps,
            self.upstream.gap_messages,
            self.upstream.recovered,
            self.upstream.unrecoverable,
            self.upstream.malformed,
            self.local.bad_messages,
            self.local.unrouted,
            self.latency_ns.p50,
            self.latency_ns.p99,
            self.latency_ns.p999,
            self.latency_ns.max,
            self.latency_ns.count,
        );
        for st in &self.streams {
            s.push_str(&format!(
                "  stream {:<12} {} messages\n",
                st.name, st.messages
            ));
        }
        if self.local.recorded > 0 || self.local.record_errors > 0 {
            s.push_str(&format!(
                "  recorded     {} messages ({} write errors)\n",
                self.local.recorded, self.local.record_errors
            ));
        }
        s
    }
}
