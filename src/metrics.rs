//! Latency histograms: HdrHistogram, allocated once, recorded without
//! allocation.

use hdrhistogram::Histogram;

/// A latency histogram in nanoseconds with 3 significant digits, from 1 ns
/// to `max_ns`; larger values are clamped to `max_ns` and counted in
/// [`Latency::clamped`], so nothing is dropped silently.
///
/// ```
/// let mut l = mdbus::metrics::Latency::new(10_000_000);
/// for ns in [100, 200, 300, 20_000_000] { l.record(ns); }
/// assert_eq!(l.histogram().len(), 4);
/// assert_eq!(l.clamped(), 1);
/// assert_eq!(l.summary().p50, 200);
/// ```
#[derive(Debug, Clone)]
pub struct Latency {
    hist: Histogram<u64>,
    max: u64,
    clamped: u64,
}

/// Percentiles of a histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Summary {
    /// Values recorded.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Largest value.
    pub max: u64,
}

impl Latency {
    /// A histogram for values from 1 ns to `max_ns` (at least 2).
    pub fn new(max_ns: u64) -> Latency {
        let max = max_ns.max(2);
        Latency {
            hist: Histogram::new_with_bounds(1, max, 3)
                .expect("bounds 1..max with 3 digits are valid"),
            max,
            clamped: 0,
        }
    }

    /// Records one value. Never allocates.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let v = if ns > self.max {
            self.clamped += 1;
            self.max
        } else {
            ns.max(1)
        };
        self.hist.saturating_record(v);
    }

    /// Records `count` values of `ns` at once, as `count` calls of
    /// [`Latency::record`] would. Never allocates.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        if count == 0 {
            return;
        }
        let v = if ns > self.max {
            self.clamped += count;
            self.max
        } else {
            ns.max(1)
        };
        self.hist.saturating_record_n(v, count);
    }

    /// Values larger than the upper bound, recorded as the bound.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The underlying histogram.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Merges another histogram's counts into this one.
    pub fn add(&mut self, other: &Latency) {
        // Same bounds by construction in this crate's users; saturate
        // otherwise rather than fail.
        let _ = self.hist.add(&other.hist);
        self.clamped += other.clamped;
    }

    /// Clears all counts.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.clamped = 0;
    }

    /// The usual percentiles.
    pub fn summary(&self) -> Summary {
        summarize(&self.hist)
    }
}

/// The usual percentiles of any histogram.
pub fn summarize(h: &Histogram<u64>) -> Summary {
    Summary {
        count: h.len(),
        p50: h.value_at_quantile(0.50),
        p90: h.value_at_quantile(0.90),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        p9999: h.value_at_quantile(0.9999),
        max: h.max(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `record_n(v, n)` is `n` calls of `record(v)`: the same histogram,
    /// clamped count and percentiles, for 0 (recorded as 1), values in
    /// range, values above the bound (clamped) and n = 0.
    #[test]
    fn record_n_is_n_records() {
        let mut at_once = Latency::new(1_000_000);
        let mut one_by_one = Latency::new(1_000_000);
        for (v, n) in [
            (0, 3),
            (1, 1),
            (2047, 5),
            (2049, 2),
            (999_999, 4),
            (1_000_001, 3),
            (u64::MAX, 2),
            (77, 0),
        ] {
            at_once.record_n(v, n);
            for _ in 0..n {
                one_by_one.record(v);
            }
        }
        assert_eq!(at_once.histogram(), one_by_one.histogram());
        assert_eq!(at_once.histogram().len(), 20);
        assert_eq!(at_once.clamped(), 5);
        assert_eq!(at_once.clamped(), one_by_one.clamped());
        assert_eq!(at_once.summary(), one_by_one.summary());
    }
}
