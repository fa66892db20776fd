//! What a run prints: the summary table, or one JSON object.

use std::path::Path;

use serde::Serialize;

use super::input::{InputFormat, Skipped};
use super::schedule::Rate;
use super::subscribe::SubscriberCounts;
use hdrhistogram::Histogram;
use mdbus_tool_support::output::{self, LatencyNs};

/// Percentiles of a latency histogram, in nanoseconds (`of`, `rows`:
/// [`SummaryExt`]).
pub use mdbus_tool_support::percentiles::{Summary as Percentiles, SummaryExt};

/// Messages published but not delivered, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Drops {
    /// Lost to overruns (shm: the subscriber fell a whole ring behind).
    pub overrun_messages: u64,
    /// Lost in unrecoverable gaps (udp, verbs).
    pub gap_messages: u64,
    /// Neither delivered nor reported lost (a subscriber that ended
    /// early).
    pub unaccounted_messages: u64,
}

impl Drops {
    /// The drops of a subscriber that received `c.received` of `sent`.
    pub fn of(sent: u64, c: &SubscriberCounts) -> Drops {
        let missing = sent.saturating_sub(c.received);
        Drops {
            overrun_messages: c.overrun_messages,
            gap_messages: c.gap_messages,
            unaccounted_messages: missing
                .saturating_sub(c.overrun_messages.saturating_add(c.gap_messages)),
        }
    }

    /// Every message dropped.
    pub fn total(&self) -> u64 {
        self.overrun_messages
            .saturating_add(self.gap_messages)
            .saturating_add(self.unaccounted_messages)
    }

    /// Adds another subscriber's.
    pub fn add(&mut self, o: &Drops) {
        self.overrun_messages = self.overrun_messages.saturating_add(o.overrun_messages);
        self.gap_messages = self.gap_messages.saturating_add(o.gap_messages);
        self.unaccounted_messages = self
            .unaccounted_messages
            .saturating_add(o.unaccounted_messages);
    }
}

/// One subscriber's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriberSummary {
    /// Its number, from 1.
    pub index: usize,
    /// The core it was pinned to.
    pub core: usize,
    /// Messages delivered.
    pub received: u64,
    /// Overrun events.
    pub overruns: u64,
    /// Unrecoverable gap events.
    pub gaps: u64,
    /// Latencies above the histogram's bound, recorded as the bound.
    pub clamped: u64,
    /// Messages whose intended time was later than their delivery.
    pub early: u64,
    /// Stalls injected (a test hook).
    pub stalls: u64,
    /// The last sequence number the publisher announced to it.
    pub last_seq: u64,
    /// Messages published but not delivered to it, by reason.
    pub drops: Drops,
    /// Its one-way latency.
    pub latency_ns: LatencyNs,
}

impl SubscriberSummary {
    /// Subscriber `index`'s share, of `sent` messages.
    pub fn new(
        index: usize,
        core: usize,
        sent: u64,
        c: &SubscriberCounts,
        h: &Histogram<u64>,
    ) -> Self {
        SubscriberSummary {
            index,
            core,
            received: c.received,
            overruns: c.overruns,
            gaps: c.gaps,
            clamped: c.clamped,
            early: c.early,
            stalls: c.stalls,
            last_seq: c.last_seq,
            drops: Drops::of(sent, c),
            latency_ns: LatencyNs::of(h),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndedBy {
    /// Every message of the input was replayed.
    EndOfInput,
    /// `--duration` ran out first.
    Duration,
    /// SIGINT or SIGTERM stopped the replay; what was sent is measured.
    Interrupted,
}

/// The result of `mdbus-replay run`, printed as a table or (with
/// `--json`) as one object whose keys docs/REPLAY.md lists.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
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
    /// Why the replay ended.
    pub ended_by: EndedBy,
    /// Messages published.
    pub messages: u64,
    /// Seconds from the first send to the last delivery.
    pub seconds: f64,
    /// Messages delivered per second per subscriber, from the first send
    /// to the last delivery.
    pub msgs_per_sec: f64,
    /// Messages the publisher sent per second, first to last send.
    pub send_msgs_per_sec: f64,
    /// One-way latency over every subscriber.
    pub latency_ns: LatencyNs,
    /// Messages published but not delivered, by reason, summed over
    /// subscribers.
    pub drops: Drops,
    /// Loss events (shm overruns, unrecoverable udp/verbs gaps), summed
    /// over subscribers.
    pub gaps: u64,
    /// Latencies beyond the histogram's one-hour bound.
    pub clamped: u64,
    /// Input messages skipped as duplicates (captures of A/B lines).
    pub duplicates: u64,
    /// Input MoldUDP64 heartbeats.
    pub heartbeats: u64,
    /// What the input held that was not replayed, by reason (frames,
    /// packets; `unrecoverable` in messages).
    pub skipped: Skipped,
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
        let drops = self.drops.total();
        if drops > 0 {
            parts.push(format!(
                "{drops} messages published but not delivered (summed over subscribers)"
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

    /// The one JSON object of `--json` (docs/JSON.md).
    pub fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = output::json_object("mdbus-replay");
        m.insert("command".into(), "run".into());
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(self) {
            m.extend(fields);
        }
        let lost = self.loss();
        m.insert("lost".into(), lost.is_some().into());
        m.insert(
            "data_lost".into(),
            lost.map_or(serde_json::Value::Null, Into::into),
        );
        m
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
        let l = &self.latency_ns;
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
            self.drops.total(),
            self.gaps
        ));
        match self.ended_by {
            EndedBy::EndOfInput => {}
            EndedBy::Duration => s.push_str(&format!(
                "--duration reached: stopped after {} messages\n",
                self.messages
            )),
            EndedBy::Interrupted => s.push_str(&format!(
                "interrupted: stopped after {} messages, every file written\n",
                self.messages
            )),
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
