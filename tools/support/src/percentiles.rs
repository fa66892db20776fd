//! Percentile summaries of latency histograms, all read by one function,
//! [`mdbus::metrics::summarize`].

use hdrhistogram::Histogram;
pub use mdbus::metrics::{summarize, Summary};

/// A latency histogram in nanoseconds, 1 ns to 100 s at three significant
/// digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// The full summary read off any histogram, and as table rows.
pub trait SummaryExt {
    /// The usual percentiles of `h` (each the highest value equivalent to
    /// the one at that rank, as HdrHistogram reports them).
    fn of(h: &Histogram<u64>) -> Self;
    /// `(name, value)` in table order: p50 to p99.99, then max.
    fn rows(&self) -> [(&'static str, u64); 6];
}

impl SummaryExt for Summary {
    fn of(h: &Histogram<u64>) -> Self {
        summarize(h)
    }

    fn rows(&self) -> [(&'static str, u64); 6] {
        [
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("p99.9", self.p999),
            ("p99.99", self.p9999),
            ("max", self.max),
        ]
    }
}

/// The short form the measurement reports quote (mdbus-perf, the
/// benches), in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value recorded.
    pub max: u64,
}

impl Percentiles {
    /// Reads the percentiles off a histogram.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles::from(summarize(h))
    }

    /// As a JSON object.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain integers serialise")
    }
}

impl From<Summary> for Percentiles {
    fn from(s: Summary) -> Self {
        Percentiles {
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            p999: s.p999,
            max: s.max,
        }
    }
}

/// Messages (or bytes) per second over `ns` nanoseconds; 0 when no time
/// passed.
pub fn per_sec(count: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        count as f64 * 1e9 / ns as f64
    }
}

/// The times of the first and the last message of a run, for its rate.
#[derive(Debug, Default, Clone, Copy)]
pub struct Span {
    first: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
}

impl Span {
    /// A message arrived now.
    #[inline(always)]
    pub fn mark(&mut self) {
        let now = std::time::Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Nanoseconds from the first message to the last; 0 before two.
    pub fn ns(&self) -> u64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) => nanos(b - a),
            _ => 0,
        }
    }
}

/// Nanoseconds in a duration, saturating.
#[inline]
pub fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut h = latency_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let p = Percentiles::of(&h);
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999, p.max),
            (500, 900, 990, 999, 1000)
        );
        assert_eq!(
            p.to_json(),
            serde_json::json!({"p50": 500, "p90": 900, "p99": 990, "p999": 999, "max": 1000})
        );
        let rows = Summary::of(&h).rows();
        assert_eq!(rows[3], ("p99.9", 999));
        assert_eq!(rows[5], ("max", 1000));
    }

    #[test]
    fn a_span_runs_from_the_first_mark_to_the_last() {
        let mut s = Span::default();
        assert_eq!(s.ns(), 0);
        s.mark();
        assert_eq!(s.ns(), 0);
        let first = s.first.unwrap();
        s.mark();
        assert_eq!(s.ns(), nanos(s.last.unwrap() - first));
    }

    #[test]
    fn rates_handle_zero_time() {
        assert_eq!(per_sec(10, 0), 0.0);
        assert_eq!(per_sec(10, 1_000_000_000), 10.0);
        assert_eq!(per_sec(3, 500_000_000), 6.0);
    }
}
