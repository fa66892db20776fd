//! A token bucket for re-requests, kept as a theoretical arrival time
//! (GCRA): integer arithmetic, no refill loop.

/// Requests the bucket lets through back to back after a quiet period.
pub const BURST: u64 = 4;

#[derive(Debug, Clone)]
pub(super) struct Bucket {
    /// Nanoseconds per token; 0 means unlimited.
    interval_ns: u64,
    /// How far ahead of `now` the arrival time may run: the burst.
    tolerance_ns: u64,
    /// Theoretical arrival time of the next request.
    tat_ns: u64,
}

impl Bucket {
    /// `per_second` tokens a second (0: unlimited), bursts of [`BURST`].
    pub fn new(per_second: u32) -> Self {
        let interval_ns = if per_second == 0 {
            0
        } else {
            (1_000_000_000 / u64::from(per_second)).max(1)
        };
        Self {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(BURST - 1),
            tat_ns: 0,
        }
    }

    /// Takes a token if one is available at `now_ns`.
    pub fn take(&mut self, now_ns: u64) -> bool {
        if self.interval_ns == 0 {
            return true;
        }
        if now_ns < self.ready_ns() {
            return false;
        }
        self.tat_ns = self.tat_ns.max(now_ns).saturating_add(self.interval_ns);
        true
    }

    /// The earliest time a token is available.
    pub fn ready_ns(&self) -> u64 {
        self.tat_ns.saturating_sub(self.tolerance_ns)
    }
}
