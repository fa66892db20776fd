//! The relay's counters: what the arbiter counted upstream, what the
//! relay did with the messages, and the latency it added; published to the
//! counters file, logged, and summarised at the end.
//!
//! Each counter is defined once, in [`COUNTERS`]: its name, what it means
//! and where its value comes from. The counters file's layout (and so what
//! `mdbus-stat` shows), the relay's JSON and the periodic log line are all
//! derived from that table; a test checks that each of them has every
//! counter.

use mdbus::counters::CountersFile;
use mdbus::metrics::{Latency, Summary};
use mdbus_feed::arbiter::ArbiterCounters;

/// What arbitration and recovery counted: the arbiter's own counters
/// (zero for a BinaryFILE input, which has no packets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Upstream(pub ArbiterCounters);

impl From<&ArbiterCounters> for Upstream {
    fn from(c: &ArbiterCounters) -> Upstream {
        Upstream(*c)
    }
}

impl std::ops::Deref for Upstream {
    type Target = ArbiterCounters;

    fn deref(&self) -> &ArbiterCounters {
        &self.0
    }
}

/// What the relay itself counts, per message; plain integers on the hot
/// path, published periodically. Each field's meaning is in [`COUNTERS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Local {
    pub messages_in: u64,
    pub messages_out: u64,
    pub bad_messages: u64,
    pub unrouted: u64,
    pub publish_errors: u64,
    pub source_gaps: u64,
    pub passthrough_packets: u64,
    pub passthrough_errors: u64,
    pub recorded: u64,
    pub record_errors: u64,
    pub timed_packets: u64,
}

/// Where every counter's value is read from, at one moment. Borrowed, so
/// the polling loop builds it without allocating.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Arbitration and recovery.
    pub up: &'a ArbiterCounters,
    /// Routing and publishing.
    pub local: &'a Local,
    /// Relay-added latency.
    pub latency: &'a Summary,
}

/// How a counter appears in the periodic log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    /// Not in the line.
    No,
    /// `LABEL VALUE`.
    Total(&'static str),
    /// `LABEL VALUE (RATE/s)`.
    Rate(&'static str),
}

/// Where a counter appears in the relay's JSON summary, always under its
/// counters-file name (one name per counter everywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Json {
    /// A key of the object itself.
    Top,
    /// A reason in `drops`: input rejected (packets), by reason.
    Drop,
    /// Not a key: the JSON holds the whole distribution in `latency_ns`.
    Latency,
}

/// One counter.
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    /// Its label in the counters file (and so in `mdbus-stat`), and its
    /// key in the JSON summary.
    pub name: &'static str,
    /// Where the JSON summary holds it.
    pub json: Json,
    /// What it counts.
    pub help: &'static str,
    /// Its place in the periodic log line.
    pub log: Log,
    /// Its value.
    pub get: fn(&View<'_>) -> u64,
}

/// Every counter, in the counters file's order; the per-stream slots
/// (`stream.NAME.messages`) follow them. Names are stable: scripts and
/// dashboards read them.
pub const COUNTERS: &[Counter] = &[
    Counter {
        name: "packets",
        json: Json::Top,
        help: "datagrams received, all lines (0 for a BinaryFILE)",
        log: Log::Rate("packets"),
        get: |v| v.up.packets_a + v.up.packets_b + v.up.packets_recovery,
    },
    Counter {
        name: "packets_a",
        json: Json::Top,
        help: "datagrams received on line A",
        log: Log::No,
        get: |v| v.up.packets_a,
    },
    Counter {
        name: "packets_b",
        json: Json::Top,
        help: "datagrams received on line B",
        log: Log::No,
        get: |v| v.up.packets_b,
    },
    Counter {
        name: "packets_recovery",
        json: Json::Top,
        help: "datagrams received from the re-request server",
        log: Log::No,
        get: |v| v.up.packets_recovery,
    },
    Counter {
        name: "heartbeats",
        json: Json::Top,
        help: "heartbeats received",
        log: Log::No,
        get: |v| v.up.heartbeats,
    },
    Counter {
        name: "messages_in",
        json: Json::Top,
        help: "messages handed to routing, in sequence order",
        log: Log::Rate("in"),
        get: |v| v.local.messages_in,
    },
    Counter {
        name: "messages_out",
        json: Json::Top,
        help: "messages published (a system message sent to every stream counts once per stream)",
        log: Log::Rate("out"),
        get: |v| v.local.messages_out,
    },
    Counter {
        name: "wins_a",
        json: Json::Top,
        help: "messages first delivered from line A",
        log: Log::Total("wins A"),
        get: |v| v.up.wins_a,
    },
    Counter {
        name: "wins_b",
        json: Json::Top,
        help: "messages first delivered from line B",
        log: Log::Total("wins B"),
        get: |v| v.up.wins_b,
    },
    Counter {
        name: "wins_recovery",
        json: Json::Top,
        help: "messages first delivered by the re-request server",
        log: Log::No,
        get: |v| v.up.wins_recovery,
    },
    Counter {
        name: "duplicate_packets",
        json: Json::Top,
        help: "packets that brought nothing new",
        log: Log::Total("dup"),
        get: |v| v.up.duplicate_packets,
    },
    Counter {
        name: "duplicate_messages",
        json: Json::Top,
        help: "messages that had already been delivered",
        log: Log::No,
        get: |v| v.up.duplicate_messages,
    },
    Counter {
        name: "gaps",
        json: Json::Top,
        help: "gaps seen (events)",
        log: Log::Total("gaps"),
        get: |v| v.up.gaps,
    },
    Counter {
        name: "gap_messages",
        json: Json::Top,
        help: "messages missing in those gaps when they were seen",
        log: Log::No,
        get: |v| v.up.gap_messages,
    },
    Counter {
        name: "requests_sent",
        json: Json::Top,
        help: "re-requests sent",
        log: Log::No,
        get: |v| v.up.requests_sent,
    },
    Counter {
        name: "request_retries",
        json: Json::Top,
        help: "re-requests sent again after a timeout",
        log: Log::No,
        get: |v| v.up.request_retries,
    },
    Counter {
        name: "requests_rate_limited",
        json: Json::Top,
        help: "re-requests held back by the rate limit",
        log: Log::No,
        get: |v| v.up.requests_rate_limited,
    },
    Counter {
        name: "recovered",
        json: Json::Top,
        help: "messages that filled a gap (from the other line or the re-request server)",
        log: Log::Total("recovered"),
        get: |v| v.up.recovered,
    },
    Counter {
        name: "unrecoverable",
        json: Json::Top,
        help: "messages declared lost for good",
        log: Log::Total("unrecoverable"),
        get: |v| v.up.unrecoverable,
    },
    Counter {
        name: "malformed_packets",
        json: Json::Top,
        help: "packets rejected as malformed",
        log: Log::Total("malformed"),
        get: |v| v.up.malformed,
    },
    Counter {
        name: "bad_messages",
        json: Json::Top,
        help: "ITCH messages of an unknown type or a wrong length: not published",
        log: Log::Total("bad"),
        get: |v| v.local.bad_messages,
    },
    Counter {
        name: "unrouted",
        json: Json::Top,
        help: "messages routed nowhere (unknown locate without a control stream, or a symbol no stream claims)",
        log: Log::Total("unrouted"),
        get: |v| v.local.unrouted,
    },
    Counter {
        name: "session_changes",
        json: Json::Top,
        help: "session changes mid-stream",
        log: Log::No,
        get: |v| v.up.session_changes,
    },
    Counter {
        name: "backwards",
        json: Json::Top,
        help: "packets whose sequence number jumped backwards",
        log: Log::No,
        get: |v| v.up.backwards,
    },
    Counter {
        name: "reorder_overflow",
        json: Json::Top,
        help: "gaps given up because the reorder store was full",
        log: Log::No,
        get: |v| v.up.reorder_overflow,
    },
    Counter {
        name: "end_of_session",
        json: Json::Top,
        help: "end-of-session packets received in sequence",
        log: Log::No,
        get: |v| v.up.end_of_session,
    },
    Counter {
        name: "other_session",
        json: Json::Drop,
        help: "packets of a session other than the one followed",
        log: Log::No,
        get: |v| v.up.other_session,
    },
    Counter {
        name: "after_end",
        json: Json::Drop,
        help: "packets with new data after the end of session: dropped",
        log: Log::No,
        get: |v| v.up.after_end,
    },
    Counter {
        name: "suspect_jumps",
        json: Json::Drop,
        help: "packets dropped for a sequence number implausibly far ahead",
        log: Log::No,
        get: |v| v.up.suspect_jumps,
    },
    Counter {
        name: "jumps",
        json: Json::Top,
        help: "far jumps believed after confirmation (what they skipped is unrecoverable)",
        log: Log::No,
        get: |v| v.up.jumps,
    },
    Counter {
        name: "unconfirmed_ends",
        json: Json::Top,
        help: "end-of-session packets not (yet) confirmed by every line",
        log: Log::No,
        get: |v| v.up.unconfirmed_ends,
    },
    Counter {
        name: "malformed_short_header",
        json: Json::Drop,
        help: "malformed: header shorter than 20 bytes",
        log: Log::No,
        get: |v| v.up.malformed_by.short_header,
    },
    Counter {
        name: "malformed_count_mismatch",
        json: Json::Drop,
        help: "malformed: message count disagrees with the blocks present",
        log: Log::No,
        get: |v| v.up.malformed_by.count_mismatch,
    },
    Counter {
        name: "malformed_bad_block_length",
        json: Json::Drop,
        help: "malformed: a block length prefix cut short or overrunning the packet",
        log: Log::No,
        get: |v| v.up.malformed_by.bad_block_length,
    },
    Counter {
        name: "malformed_sequence_zero",
        json: Json::Drop,
        help: "malformed: sequence number 0",
        log: Log::No,
        get: |v| v.up.malformed_by.sequence_zero,
    },
    Counter {
        name: "malformed_sequence_overflow",
        json: Json::Drop,
        help: "malformed: a range ending beyond the largest sequence number",
        log: Log::No,
        get: |v| v.up.malformed_by.sequence_overflow,
    },
    Counter {
        name: "publish_errors",
        json: Json::Top,
        help: "publishes that failed (datagram transports only)",
        log: Log::No,
        get: |v| v.local.publish_errors,
    },
    Counter {
        name: "source_gaps",
        json: Json::Top,
        help: "source-gap notices published (one per unrecoverable range and stream)",
        log: Log::No,
        get: |v| v.local.source_gaps,
    },
    Counter {
        name: "passthrough_packets",
        json: Json::Top,
        help: "MoldUDP64 pass-through packets sent (heartbeats included)",
        log: Log::No,
        get: |v| v.local.passthrough_packets,
    },
    Counter {
        name: "passthrough_errors",
        json: Json::Top,
        help: "pass-through sends that failed",
        log: Log::No,
        get: |v| v.local.passthrough_errors,
    },
    Counter {
        name: "recorded",
        json: Json::Top,
        help: "messages written to the .mdcap recording",
        log: Log::No,
        get: |v| v.local.recorded,
    },
    Counter {
        name: "record_errors",
        json: Json::Top,
        help: "recording writes that failed (recording stops at the first)",
        log: Log::No,
        get: |v| v.local.record_errors,
    },
    Counter {
        name: "timed_packets",
        json: Json::Top,
        help: "datagrams whose messages were published, whose latency is recorded",
        log: Log::No,
        get: |v| v.local.timed_packets,
    },
    Counter {
        name: "latency_count",
        json: Json::Latency,
        help: "datagrams in the relay-added latency histogram",
        log: Log::No,
        get: |v| v.latency.count,
    },
    Counter {
        name: "latency_p50_ns",
        json: Json::Latency,
        help: "relay-added latency per datagram (arrival to publish complete), median, ns",
        log: Log::Total("latency p50"),
        get: |v| v.latency.p50,
    },
    Counter {
        name: "latency_p99_ns",
        json: Json::Latency,
        help: "relay-added latency per datagram, 99th percentile, ns",
        log: Log::Total("p99"),
        get: |v| v.latency.p99,
    },
    Counter {
        name: "latency_p999_ns",
        json: Json::Latency,
        help: "relay-added latency per datagram, 99.9th percentile, ns",
        log: Log::Total("p99.9"),
        get: |v| v.latency.p999,
    },
    Counter {
        name: "latency_max_ns",
        json: Json::Latency,
        help: "relay-added latency per datagram, largest, ns",
        log: Log::Total("max"),
        get: |v| v.latency.max,
    },
];

/// Everything, at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Datagrams received, all lines (0 for a BinaryFILE).
    pub packets: u64,
    /// Arbitration and recovery.
    pub upstream: Upstream,
    /// Routing and publishing.
    pub local: Local,
    /// Messages published per stream, in stream order.
    pub streams: Vec<StreamCount>,
    /// Relay-added latency per datagram (arrival to publish complete), ns.
    pub latency_ns: Summary,
}

/// Messages published on one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamCount {
    /// The stream.
    pub name: String,
    /// Messages published on it.
    pub messages: u64,
}

/// The labels of a relay's counters file for streams `names`.
pub fn labels(names: &[String]) -> Vec<String> {
    COUNTERS
        .iter()
        .map(|c| c.name.to_string())
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
    let view = View {
        up: u,
        local: l,
        latency: &lat,
    };
    for (i, c) in COUNTERS.iter().enumerate() {
        file.set(i, (c.get)(&view));
    }
    for (i, v) in per_stream.iter().enumerate() {
        file.set(COUNTERS.len() + i, *v);
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

/// JSON object fields.
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

impl Snapshot {
    /// Adds the counters to a JSON summary: every [`Json::Top`] counter
    /// under its name, then `drops` (input rejected, by reason, under the
    /// counters' names) and `streams` [{name, messages}]. The latency is
    /// the caller's: it needs the histogram, not this summary of it.
    pub fn json_fields(&self, map: &mut JsonMap) {
        let view = self.view();
        let mut drops = JsonMap::new();
        for c in COUNTERS {
            match c.json {
                Json::Top => {
                    map.insert(c.name.into(), (c.get)(&view).into());
                }
                Json::Drop => {
                    drops.insert(c.name.into(), (c.get)(&view).into());
                }
                Json::Latency => {}
            }
        }
        map.insert("drops".into(), drops.into());
        map.insert(
            "streams".into(),
            serde_json::to_value(&self.streams).unwrap_or_default(),
        );
    }

    /// Where the counters' values come from.
    pub fn view(&self) -> View<'_> {
        View {
            up: &self.upstream,
            local: &self.local,
            latency: &self.latency_ns,
        }
    }

    /// One log line: the counters [`COUNTERS`] puts in it, with rates
    /// against `prev` over `secs` where it asks for them.
    pub fn log_line(&self, prev: &Snapshot, secs: f64) -> String {
        use std::fmt::Write as _;
        let (now, then) = (self.view(), prev.view());
        let mut line = String::new();
        for c in COUNTERS {
            let v = (c.get)(&now);
            let sep = if line.is_empty() { "" } else { " " };
            let _ = match c.log {
                Log::No => Ok(()),
                Log::Total(label) => write!(line, "{sep}{label} {v}"),
                Log::Rate(label) => {
                    let rate = v.saturating_sub((c.get)(&then)) as f64 / secs.max(1e-9);
                    write!(line, "{sep}{label} {v} ({rate:.0}/s)")
                }
            };
        }
        line.push_str(" ns");
        line
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use mdbus::counters::CountersReader;
    use mdbus_feed::arbiter::MalformedCounters;

    use super::*;

    /// Every field of both structs set to a value of its own (no
    /// `..Default::default()`: a new field does not compile until it is
    /// given one here, and then the test asks for its counter).
    fn distinct() -> (Upstream, Local, Summary) {
        let up = ArbiterCounters {
            packets_a: 101,
            packets_b: 102,
            packets_recovery: 103,
            heartbeats: 104,
            // Not a counter of its own: it equals `messages_in`.
            messages: 0,
            wins_a: 105,
            wins_b: 106,
            wins_recovery: 107,
            duplicate_packets: 108,
            duplicate_messages: 109,
            gaps: 110,
            gap_messages: 111,
            requests_sent: 112,
            request_retries: 113,
            requests_rate_limited: 114,
            recovered: 115,
            unrecoverable: 116,
            malformed: 117,
            session_changes: 118,
            other_session: 119,
            backwards: 120,
            reorder_overflow: 121,
            end_of_session: 122,
            after_end: 123,
            suspect_jumps: 124,
            jumps: 125,
            unconfirmed_ends: 126,
            malformed_by: MalformedCounters {
                short_header: 127,
                count_mismatch: 128,
                bad_block_length: 129,
                sequence_zero: 130,
                sequence_overflow: 131,
            },
        };
        let local = Local {
            messages_in: 201,
            messages_out: 202,
            bad_messages: 203,
            unrouted: 204,
            publish_errors: 205,
            passthrough_packets: 206,
            passthrough_errors: 207,
            recorded: 208,
            record_errors: 209,
            timed_packets: 210,
            source_gaps: 211,
        };
        let latency = Summary {
            count: 301,
            p50: 302,
            p90: 0,
            p99: 303,
            p999: 304,
            p9999: 0,
            max: 305,
        };
        (Upstream(up), local, latency)
    }

    /// The field values of a struct, from its `Debug` form.
    fn field_values(debug: &str) -> BTreeSet<u64> {
        debug
            .split([',', '{', '}'])
            .filter_map(|f| f.split(':').nth(1))
            .filter_map(|v| v.trim().parse().ok())
            .filter(|&v| v != 0)
            .collect()
    }

    fn snapshot_of(up: Upstream, local: Local, latency: Summary) -> Snapshot {
        Snapshot {
            packets: up.packets_a + up.packets_b + up.packets_recovery,
            upstream: up,
            local,
            streams: vec![StreamCount {
                name: "s1".into(),
                messages: 7,
            }],
            latency_ns: latency,
        }
    }

    #[test]
    fn every_field_has_a_counter() {
        let (up, local, latency) = distinct();
        let snap = snapshot_of(up, local, latency);
        let view = snap.view();
        let values: BTreeSet<u64> = COUNTERS.iter().map(|c| (c.get)(&view)).collect();
        for debug in [
            format!("{:?}", up.0),
            format!("{local:?}"),
            format!("{latency:?}"),
        ] {
            let missing: Vec<u64> = field_values(&debug).difference(&values).copied().collect();
            assert!(
                missing.is_empty(),
                "no counter reads {missing:?} of {debug}"
            );
        }
    }

    #[test]
    fn names_are_unique() {
        let names: BTreeSet<_> = COUNTERS.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), COUNTERS.len());
        assert!(COUNTERS.iter().all(|c| !c.help.is_empty()));
    }

    #[test]
    fn the_json_has_every_counter_under_its_name_and_nothing_else() {
        let (up, local, latency) = distinct();
        let snap = snapshot_of(up, local, latency);
        let mut obj = JsonMap::new();
        snap.json_fields(&mut obj);
        let view = snap.view();
        let mut want: BTreeSet<&str> = ["streams", "drops"].into();
        let drops = obj["drops"].as_object().unwrap();
        for c in COUNTERS {
            let v = (c.get)(&view);
            match c.json {
                Json::Top => {
                    assert_eq!(obj[c.name], v, "{}", c.name);
                    want.insert(c.name);
                }
                Json::Drop => assert_eq!(drops[c.name], v, "{}", c.name),
                // The caller adds the whole distribution as `latency_ns`.
                Json::Latency => assert!(c.name.starts_with("latency_")),
            }
        }
        let have: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
        assert_eq!(have, want);
        assert_eq!(drops.len(), 8);
        assert_eq!(obj["streams"][0]["messages"], 7);
        assert_eq!(obj["malformed_packets"], 117);
        assert_eq!(drops["malformed_short_header"], 127);
        assert_eq!(drops["other_session"], 119);
    }

    #[test]
    fn the_counters_file_has_every_counter_in_order() {
        let (up, local, latency) = distinct();
        let snap = snapshot_of(up, local, latency);
        let names = vec!["s1".to_string()];
        let labels = labels(&names);
        let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        let path = std::env::temp_dir().join(format!(
            "mdbus-relay-stats-test-{}.counters",
            std::process::id()
        ));
        let file = CountersFile::create(&path, "test", &refs).unwrap();
        // A histogram whose summary is the same in every slot it fills.
        let mut hist = Latency::new(1_000_000);
        hist.record(500);
        publish(&file, &up, &local, &[7], &hist, 1);
        let reader = CountersReader::open(&path).unwrap();
        let read: Vec<(String, u64)> = reader.labels().into_iter().zip(reader.values()).collect();
        drop(file);
        let lat = hist.summary();
        let view = View {
            up: &snap.upstream,
            local: &snap.local,
            latency: &lat,
        };
        let want: Vec<(String, u64)> = COUNTERS
            .iter()
            .map(|c| (c.name.to_string(), (c.get)(&view)))
            .chain([("stream.s1.messages".to_string(), 7)])
            .collect();
        assert_eq!(read, want);
    }

    #[test]
    fn the_log_line_has_its_counters_and_rates() {
        let (up, local, latency) = distinct();
        let now = snapshot_of(up, local, latency);
        let prev = Snapshot::default();
        let line = now.log_line(&prev, 2.0);
        assert_eq!(
            line,
            "packets 306 (153/s) in 201 (100/s) out 202 (101/s) wins A 105 wins B 106 dup 108 \
             gaps 110 recovered 115 unrecoverable 116 malformed 117 bad 203 unrouted 204 \
             latency p50 302 p99 303 p99.9 304 max 305 ns"
        );
        let logged = COUNTERS.iter().filter(|c| c.log != Log::No).count();
        assert_eq!(logged, 16);
    }
}
