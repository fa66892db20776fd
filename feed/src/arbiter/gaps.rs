//! The open gaps: runs of sequence numbers known to exist (a later packet
//! or a heartbeat said so) that are neither delivered nor stored, with the
//! re-request state of each.

use std::collections::VecDeque;

use super::rate::Bucket;
use super::{ArbiterConfig, ArbiterCounters, ArbiterSink};
use crate::moldudp64::{Request, Session};

/// Re-requests in flight per gap: a gap larger than this many requests is
/// requested a window at a time, the window sliding as answers arrive.
pub const REQUESTS_IN_FLIGHT: u64 = 8;

#[derive(Debug, Clone, Copy)]
pub(super) struct Gap {
    /// First missing sequence number.
    pub first: u64,
    /// Sequence number after the last missing one.
    pub end: u64,
    /// When the gap was seen.
    seen_ns: u64,
    /// The wait for the other line is over: requests may go out.
    waited: bool,
    /// Times the current window has been requested (0: not yet).
    tries: u32,
    /// Requests of the current try cover `[first, sent_upto)`.
    sent_upto: u64,
    /// When the last request of the current try went out.
    sent_ns: u64,
    /// Retries are exhausted: skip it once delivery reaches it.
    pub dead: bool,
}

impl Gap {
    fn window_end(&self, window: u64) -> u64 {
        self.end.min(self.first.saturating_add(window))
    }
}

/// What the request logic needs from the configuration.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    gap_wait_ns: u64,
    timeout_ns: u64,
    max_retries: u32,
    max_request: u64,
    window: u64,
}

impl Policy {
    pub fn new(c: &ArbiterConfig) -> Self {
        let max_request = u64::from(c.max_request_messages.clamp(1, 0xFFFE));
        Self {
            gap_wait_ns: c.gap_wait_ns,
            timeout_ns: c.request_timeout_ns.max(1),
            max_retries: c.max_retries,
            max_request,
            window: max_request * REQUESTS_IN_FLIGHT,
        }
    }
}

#[derive(Debug)]
pub(super) struct Gaps {
    list: VecDeque<Gap>,
    capacity: usize,
}

impl Gaps {
    /// Room for `capacity` gaps, allocated once.
    pub fn new(capacity: usize) -> Self {
        Self {
            list: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn front(&self) -> Option<&Gap> {
        self.list.front()
    }

    pub fn pop_front(&mut self) -> Option<Gap> {
        self.list.pop_front()
    }

    pub fn clear(&mut self) {
        self.list.clear();
    }

    /// Messages in the open gaps (none of them recovered or reported yet).
    pub fn missing(&self) -> u64 {
        self.list
            .iter()
            .fold(0u64, |n, g| n.saturating_add(g.end - g.first))
    }

    /// Marks every gap unrecoverable (the session is over).
    pub fn kill_all(&mut self) {
        for g in &mut self.list {
            g.dead = true;
        }
    }

    /// Records `[first, end)` as missing; it lies after every open gap.
    /// Returns true for a new gap, false when it extends the last one (a
    /// gap that grows keeps its request state, so nothing can separate two
    /// gaps but a stored packet, which bounds their number).
    pub fn open(&mut self, first: u64, end: u64, now_ns: u64) -> bool {
        let full = self.list.len() >= self.capacity;
        if let Some(last) = self.list.back_mut() {
            if last.end == first || full {
                // The second case cannot happen (gaps never outnumber
                // stored packets plus one); merging keeps every missing
                // sequence covered without allocating.
                debug_assert!(last.end == first, "gap list full");
                last.end = end;
                if last.dead {
                    // New messages are missing: they get their own retries.
                    last.dead = false;
                    last.tries = 0;
                    last.sent_upto = last.first;
                }
                return false;
            }
        }
        self.list.push_back(Gap {
            first,
            end,
            seen_ns: now_ns,
            waited: false,
            tries: 0,
            sent_upto: first,
            sent_ns: now_ns,
            dead: false,
        });
        true
    }

    /// Removes `[p, q)` from the gaps (those messages arrived); returns how
    /// many missing messages that was.
    pub fn fill(&mut self, p: u64, q: u64) -> u64 {
        if p >= q {
            return 0;
        }
        let mut filled = 0;
        let mut i = self.list.partition_point(|g| g.end <= p);
        while i < self.list.len() {
            let g = self.list[i];
            if g.first >= q {
                break;
            }
            let lo = g.first.max(p);
            let hi = g.end.min(q);
            filled += hi - lo;
            if lo == g.first && hi == g.end {
                self.list.remove(i);
                continue;
            }
            if lo == g.first {
                // The front of the gap arrived: the server (or a line) is
                // answering, so the retry count starts over.
                let g = &mut self.list[i];
                g.first = hi;
                g.sent_upto = g.sent_upto.max(hi);
                if g.tries > 1 {
                    g.tries = 1;
                }
                break;
            }
            if hi == g.end {
                let g = &mut self.list[i];
                g.end = lo;
                g.sent_upto = g.sent_upto.min(lo);
                i += 1;
                continue;
            }
            // The middle arrived: split in two, both keeping the state.
            let mut right = g;
            right.first = hi;
            right.sent_upto = g.sent_upto.max(hi);
            let left = &mut self.list[i];
            left.end = lo;
            left.sent_upto = left.sent_upto.min(lo);
            debug_assert!(self.list.len() < self.capacity, "gap list full");
            self.list.insert(i + 1, right);
            break;
        }
        filled
    }

    /// Sends the requests that are due, retries those that timed out and
    /// marks gaps whose retries are exhausted. Returns true if a gap died.
    pub fn service(
        &mut self,
        now_ns: u64,
        policy: &Policy,
        session: Session,
        bucket: &mut Bucket,
        counters: &mut ArbiterCounters,
        sink: &mut impl ArbiterSink,
    ) -> bool {
        let mut died = false;
        // Once the rate limit holds a request back, later gaps send
        // nothing this round, but can still run out of retries.
        let mut blocked = false;
        let mut i = 0;
        while i < self.list.len() {
            let g = &mut self.list[i];
            i += 1;
            if g.dead {
                continue;
            }
            if !g.waited {
                if blocked || now_ns < g.seen_ns.saturating_add(policy.gap_wait_ns) {
                    continue;
                }
                g.waited = true;
            }
            let window_end = g.window_end(policy.window);
            if g.tries == 0 {
                g.tries = 1;
                g.sent_upto = g.first;
            } else if g.sent_upto >= window_end {
                if now_ns < g.sent_ns.saturating_add(policy.timeout_ns) {
                    continue;
                }
                if g.tries > policy.max_retries {
                    g.dead = true;
                    died = true;
                    continue;
                }
                if blocked {
                    continue;
                }
                g.tries += 1;
                g.sent_upto = g.first;
            }
            while !blocked && self.list[i - 1].sent_upto < window_end {
                if !bucket.take(now_ns) {
                    counters.requests_rate_limited += 1;
                    blocked = true;
                    break;
                }
                let g = &mut self.list[i - 1];
                let start = g.sent_upto;
                let mut count = (window_end - start).min(policy.max_request);
                let retry = g.tries > 1;
                g.sent_upto += count;
                g.sent_ns = now_ns;
                if g.sent_upto == g.end {
                    // The request reaches the end of this gap: the next
                    // gaps that are due and within reach ride along (the
                    // messages between them come again, as duplicates),
                    // which spares requests when losses are many and
                    // close together.
                    count = self.coalesce(i, start, now_ns, policy).unwrap_or(count);
                }
                sink.request(&Request {
                    session,
                    sequence: start,
                    // At most 0xFFFE: `Policy` clamps max_request.
                    count: count as u16,
                });
                counters.requests_sent += 1;
                if retry {
                    counters.request_retries += 1;
                }
            }
        }
        died
    }

    /// Marks the gaps from index `next` on that a request starting at
    /// `start` can also cover as requested; returns the extended count.
    fn coalesce(&mut self, next: usize, start: u64, now_ns: u64, policy: &Policy) -> Option<u64> {
        let reach = start.saturating_add(policy.max_request);
        let mut end = None;
        for h in self.list.iter_mut().skip(next) {
            let due = h.waited || now_ns >= h.seen_ns.saturating_add(policy.gap_wait_ns);
            if h.dead || h.tries != 0 || !due || h.end > reach {
                break;
            }
            h.waited = true;
            h.tries = 1;
            h.sent_upto = h.end;
            h.sent_ns = now_ns;
            end = Some(h.end);
        }
        end.map(|e| e - start)
    }

    /// When [`Gaps::service`] next has something to do.
    pub fn next_deadline(&self, policy: &Policy, bucket: &Bucket) -> Option<u64> {
        let mut next: Option<u64> = None;
        for g in &self.list {
            if g.dead {
                continue;
            }
            // Whatever needs a request also needs a token.
            let due = if !g.waited {
                g.seen_ns
                    .saturating_add(policy.gap_wait_ns)
                    .max(bucket.ready_ns())
            } else if g.tries == 0 || g.sent_upto < g.window_end(policy.window) {
                bucket.ready_ns()
            } else {
                let timeout = g.sent_ns.saturating_add(policy.timeout_ns);
                if g.tries > policy.max_retries {
                    timeout
                } else {
                    timeout.max(bucket.ready_ns())
                }
            };
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        next
    }
}
