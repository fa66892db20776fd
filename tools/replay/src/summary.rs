//! What a run prints: the summary table, or one JSON object.

use std::path::Path;

use serde::Serialize;

use super::input::{InputFormat, Skipped};
use super::schedule::Rate;
use super::subscribe::SubscriberCounts;

/// Percentiles of a latency histogram, in nanoseconds (`of`, `rows`:
/// [`SummaryExt`]).
pub use mdbus_tool_support::percentiles::{Summary as Percentiles, SummaryExt};

/// One subscriber's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriberSummary {
    /// Its number, from 1.
    pub index: usize,
    /// The core it was pinned to.
    pub core: usize,
    /// Messages published but not delivered to it.
    pub drops: u64,
    /// Its latency percentiles.
    #[serde(flatten)]
    pub latency: Percentiles,
    /// Its counters.
    #[serde(flatten)]
    pub counts: SubscriberCounts,
}

/// The result of `mdbus-replay run`. The first fields are the documented
/// contract; the rest describe the run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// One-way latency over every subscriber, ns.
    #[serde(flatten)]
    pub latency: Percentiles,
    /// Messages delivered per second per subscriber, from the first send
    /// to the last delivery.
    pub msgs_per_sec: f64,
    /// Messages published but not delivered, summed over subscribers.
    pub drops: u64,
    /// Loss events (shm overruns, unrecoverable udp/verbs gaps), summed
    /// over subscribers.
    pub gaps: u64,
    /// Messages published.
    pub messages: u64,
    /// The input file.
    pub input: String,
    /// Its format.
    pub format: InputFormat,
    /// Transport name.
    pub transport: &'static str,
    /// The pace.
    pub rate: Rate,
    /// Subscriber processes.
    pub subscribers: usize,
    /// Seconds from the first send to the last delivery.
    pub seconds: f64,
    /// Messages the publisher sent per second, first to last send.
    pub send_msgs_per_sec: f64,
    /// Latencies beyond the histogram's one-hour bound.
    pub clamped: u64,
    /// Input messages skipped as duplicates (captures of A/B lines).
    pub duplicates: u64,
    /// Input MoldUDP64 heartbeats.
    pub heartbeats: u64,
    /// What the input held that was not replayed, by reason (frames,
    /// packets; `unrecoverable` in messages).
    pub skipped: Skipped,
    /// `--duration` ended the replay before the end of the input.
    pub duration_reached: bool,
    /// The core the publisher was pinned to.
    pub publisher_core: usize,
    /// Each subscriber.
    pub per_subscriber: Vec<SubscriberSummary>,
    /// The output directory.
    pub out: String,
}

impl Summary {
    /// What was lost, as a sentence, or `None`: messages not delivered to
    /// a subscriber, loss events (gaps, overruns), and input that may
    /// have been feed data but was not replayed (other traffic on the
    /// capture's wire, not IPv4 or not UDP, is not loss).
    pub fn loss(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.drops > 0 {
            parts.push(format!(
                "{} messages published but not delivered (summed over subscribers)",
                self.drops
            ));
        }
        if self.gaps > 0 {
            parts.push(format!("{} loss events (gaps, overruns)", self.gaps));
        }
        if let Some(input) = self.skipped.lost() {
            parts.push(format!("input not replayed: {input}"));
        }
        (!parts.is_empty()).then(|| format!("{}: {}", self.input, parts.join("; ")))
    }

    /// The table a person reads.
    pub fn table(&self) -> String {
        let mut s = format!(
            "mdbus-replay: {} ({}) over {} at {}, {} messages to {} subscriber{}\n",
            self.input,
            self.format,
            self.transport,
            self.rate,
            self.messages,
            self.subscribers,
            if self.subscribers == 1 { "" } else { "s" }
        );
        let cores: Vec<String> = self
            .per_subscriber
            .iter()
            .map(|p| p.core.to_string())
            .collect();
        s.push_str(&format!(
            "publisher on core {}, subscribers on {}; {:.3} s, sending {:.0} msgs/s\n\n",
            self.publisher_core,
            cores.join(","),
            self.seconds,
            self.send_msgs_per_sec
        ));
        s.push_str("one-way latency from each message's intended send time, µs:\n");
        s.push_str(&format!(
            "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>8} {:>6}\n",
            "count", "p50", "p90", "p99", "p99.9", "p99.99", "max", "msgs/s", "drops", "gaps"
        ));
        let l = &self.latency;
        s.push_str(&format!(
            "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12.0} {:>8} {:>6}\n",
            l.count,
            micros(l.p50),
            micros(l.p90),
            micros(l.p99),
            micros(l.p999),
            micros(l.p9999),
            micros(l.max),
            self.msgs_per_sec,
            self.drops,
            self.gaps
        ));
        if self.duration_reached {
            s.push_str(&format!(
                "--duration reached: stopped after {} messages\n",
                self.messages
            ));
        }
        let skipped = self.skipped.describe();
        if !skipped.is_empty() {
            s.push_str(&format!("input skipped, by reason: {skipped}\n"));
        }
        if self.duplicates > 0 {
            s.push_str(&format!(
                "input duplicates dropped (A/B copies, repeats): {}\n",
                self.duplicates
            ));
        }
        if self.clamped > 0 {
            s.push_str(&format!(
                "{} latencies above one hour were recorded as one hour\n",
                self.clamped
            ));
        }
        let out = Path::new(&self.out);
        s.push_str(&format!(
            "\nwritten: {} {} {} {}\n",
            out.join("latency.hlog").display(),
            out.join("latency.hgrm").display(),
            out.join("percentiles.svg").display(),
            out.join("timeline.svg").display()
        ));
        s
    }
}

/// Nanoseconds as microseconds with three decimals.
pub fn micros(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1000.0)
}

/// Messages per second for `n` messages in `ns` nanoseconds.
pub fn per_sec(n: u64, ns: u64) -> f64 {
    mdbus_tool_support::percentiles::per_sec(n, ns).round()
}
