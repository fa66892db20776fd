//! Credit-based flow control for RC sessions. Pure logic, no verbs calls.
//!
//! A credit is one receive buffer the peer has posted. Each side counts
//! the receive buffers it has ever posted (`posted`, a wrapping u32 that
//! starts at the receive depth, which the connection handshake announces)
//! and tells the peer that count; the peer may have sent at most that many
//! messages. A sender that has sent `sent` messages and been told `granted`
//! may send `granted - sent` more, so a send never finds the peer without a
//! posted buffer: receiver-not-ready (RNR) cannot happen, and the queue
//! pairs are created with `rnr_retry = 0` so a violation is a loud error
//! rather than a silent stall.
//!
//! Counts are cumulative, so a newer update supersedes an older one and a
//! lost or repeated update does no harm; wrapping comparison keeps working
//! past 2^32 messages because fewer than 2^31 are ever in flight.
//!
//! The receiver reposts consumed buffers in batches of `batch` and tells
//! the peer the new count after each batch. `batch` is at most a quarter of
//! the depth (and at least 1), so a sender that used all its credits has
//! put `depth >= batch` messages in flight, whose consumption triggers the
//! next update: flow control cannot deadlock while the receiver polls.
//!
//! In the `write` session mode the count also rides on every message the
//! other way, and a write of its own is due only once [`Receipts::peer_room`]
//! is down to half the depth (see rc/data.rs `announce`).

/// The repost batch for a receive queue of `depth` buffers and the
/// configured `recv_batch`: at most a quarter of the depth, at least 1.
pub(crate) fn repost_batch(recv_batch: u32, depth: u32) -> u32 {
    recv_batch.min(depth / 4).max(1)
}

/// Whether cumulative count `a` is ahead of `b`, modulo 2^32.
#[inline]
fn ahead(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The sending side: what the peer has granted and what was sent.
#[derive(Debug, Clone)]
pub(crate) struct Credits {
    granted: u32,
    sent: u32,
    /// The peer's receive depth: no grant can be further ahead than this.
    depth: u32,
}

impl Credits {
    /// Credits for a peer that posted `depth` receive buffers.
    pub(crate) fn new(depth: u32) -> Credits {
        Credits {
            granted: depth,
            sent: 0,
            depth,
        }
    }

    /// Messages that may be sent now.
    #[inline]
    pub(crate) fn available(&self) -> u32 {
        self.granted.wrapping_sub(self.sent)
    }

    /// Takes one credit. The caller checked [`available`](Self::available).
    #[inline]
    pub(crate) fn spend(&mut self) {
        debug_assert!(self.available() > 0, "send without credit");
        self.sent = self.sent.wrapping_add(1);
    }

    /// Applies the peer's cumulative count `total`. A stale count is
    /// ignored; `Err` when the count is impossible (more buffers than the
    /// peer has beyond what was sent), which only a broken peer sends.
    #[inline]
    pub(crate) fn grant(&mut self, total: u32) -> Result<(), u32> {
        if !ahead(total, self.granted) {
            return Ok(());
        }
        if total.wrapping_sub(self.sent) > self.depth {
            return Err(total);
        }
        self.granted = total;
        Ok(())
    }
}

/// The receiving side: buffers consumed, reposted and announced.
#[derive(Debug, Clone)]
pub(crate) struct Receipts {
    depth: u32,
    batch: u32,
    /// Buffers ever posted, modulo 2^32 (starts at the depth).
    posted: u32,
    /// Buffers consumed and not yet reposted.
    unposted: u32,
    /// The last count sent to the peer.
    announced: u32,
    /// Buffers ever consumed, modulo 2^32.
    consumed_total: u32,
}

impl Receipts {
    /// A queue that starts with `depth` posted buffers (announced in the
    /// handshake), reposting `batch` at a time.
    pub(crate) fn new(depth: u32, batch: u32) -> Receipts {
        Receipts {
            depth,
            batch: batch.max(1),
            posted: depth,
            unposted: 0,
            announced: depth,
            consumed_total: 0,
        }
    }

    /// Records one consumed buffer; `true` when a batch is due.
    #[inline]
    pub(crate) fn consumed(&mut self) -> bool {
        self.unposted += 1;
        self.consumed_total = self.consumed_total.wrapping_add(1);
        self.unposted >= self.batch
    }

    /// Buffers waiting to be reposted.
    #[inline]
    pub(crate) fn unposted(&self) -> u32 {
        self.unposted
    }

    /// Records `n` buffers reposted.
    #[inline]
    pub(crate) fn reposted(&mut self, n: u32) {
        debug_assert!(n <= self.unposted);
        self.unposted -= n;
        self.posted = self.posted.wrapping_add(n);
    }

    /// The count to send the peer, when it has not been told it yet.
    #[inline]
    pub(crate) fn to_announce(&self) -> Option<u32> {
        (self.posted != self.announced).then_some(self.posted)
    }

    /// Buffers ever posted (the count to tell the peer), announced or not.
    #[inline]
    pub(crate) fn posted(&self) -> u32 {
        self.posted
    }

    /// Messages the peer may still send by the last count it was told,
    /// counting everything it sent as consumed: when this is low, an
    /// update that could ride on a later message is due now.
    #[inline]
    pub(crate) fn peer_room(&self) -> u32 {
        self.announced.wrapping_sub(self.consumed_total)
    }

    /// The count to write to the peer now, if any: one it has not been
    /// told, and (when `coalesce`) only once its room by the last count it
    /// was told is down to half the depth. Until then it can keep sending
    /// without the update; when it is down to half, at least two repost
    /// batches (each at most a quarter of the depth) have been made since,
    /// so the write grants something, and a peer out of credit (room 0)
    /// always gets it.
    #[inline]
    pub(crate) fn due(&self, coalesce: bool) -> Option<u32> {
        let count = self.to_announce()?;
        (!coalesce || self.peer_room() <= self.depth / 2).then_some(count)
    }

    /// Records that `count` reached the peer's queue.
    #[inline]
    pub(crate) fn announced(&mut self, count: u32) {
        self.announced = count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn batch_is_a_quarter_of_the_depth_at_most() {
        assert_eq!(repost_batch(16, 4096), 16);
        assert_eq!(repost_batch(16, 16), 4);
        assert_eq!(repost_batch(16, 4), 1);
        assert_eq!(repost_batch(16, 2), 1);
        assert_eq!(repost_batch(1, 1024), 1);
    }

    #[test]
    fn credits_run_out_and_come_back() {
        let mut c = Credits::new(4);
        for _ in 0..4 {
            assert!(c.available() > 0);
            c.spend();
        }
        assert_eq!(c.available(), 0);
        c.grant(6).unwrap();
        assert_eq!(c.available(), 2);
        // Stale and repeated counts change nothing.
        c.grant(5).unwrap();
        c.grant(6).unwrap();
        assert_eq!(c.available(), 2);
        // More than the peer can have posted is refused.
        assert_eq!(c.grant(4 + 4 + 1), Err(9));
    }

    #[test]
    fn credits_survive_wrapping() {
        let mut c = Credits::new(8);
        c.sent = u32::MAX - 2;
        c.granted = u32::MAX - 2;
        assert_eq!(c.available(), 0);
        c.grant(3).unwrap(); // 6 ahead, across the wrap
        assert_eq!(c.available(), 6);
        for _ in 0..6 {
            c.spend();
        }
        assert_eq!(c.sent, 3);
        assert_eq!(c.available(), 0);
    }

    #[test]
    fn receipts_announce_after_each_batch() {
        let mut r = Receipts::new(8, 2);
        assert_eq!(r.to_announce(), None);
        assert!(!r.consumed());
        assert!(r.consumed());
        r.reposted(2);
        assert_eq!(r.to_announce(), Some(10));
        r.announced(10);
        assert_eq!(r.to_announce(), None);
        assert_eq!(r.unposted(), 0);
        // Told 10, consumed 2: the peer may send 8 more.
        assert_eq!(r.peer_room(), 8);
        assert_eq!(r.posted(), 10);
    }

    /// A sender and a receiver joined by a FIFO "wire" with delays: the
    /// receiver never gets a message without a posted buffer (no RNR),
    /// nothing is lost, and everything is delivered (no deadlock), for
    /// many depths, batches and schedules, with credit writes after every
    /// batch and coalesced to half the depth.
    #[test]
    fn simulated_peers_never_overrun_and_never_deadlock() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (depth, recv_batch, coalesce) in [1u32, 2, 3, 4, 8, 16, 64]
            .into_iter()
            .flat_map(|d| [1u32, 2, 16].map(|b| (d, b)))
            .flat_map(|(d, b)| [false, true].map(|c| (d, b, c)))
        {
            let batch = repost_batch(recv_batch, depth);
            let total = 5_000u32;
            let mut credits = Credits::new(depth);
            let mut receipts = Receipts::new(depth, batch);
            let mut posted_free = depth; // receive buffers posted and empty
            let mut to_rx: VecDeque<u32> = VecDeque::new(); // messages on the wire
            let mut arrived: VecDeque<u32> = VecDeque::new(); // in buffers, unread
            let mut to_tx: VecDeque<u32> = VecDeque::new(); // credit updates on the wire
            let (mut sent, mut delivered, mut steps) = (0u32, 0u32, 0u64);
            while delivered < total {
                steps += 1;
                assert!(
                    steps < 10_000_000,
                    "deadlock: depth {depth} batch {batch} coalesce {coalesce}"
                );
                match rand() % 4 {
                    0 if sent < total && credits.available() > 0 => {
                        credits.spend();
                        sent += 1;
                        to_rx.push_back(sent);
                    }
                    1 => {
                        if let Some(m) = to_rx.pop_front() {
                            assert!(posted_free > 0, "RNR: depth {depth} batch {batch}");
                            posted_free -= 1;
                            arrived.push_back(m);
                        }
                    }
                    2 => {
                        if let Some(m) = arrived.pop_front() {
                            assert_eq!(m, delivered + 1, "in order");
                            delivered += 1;
                            if receipts.consumed() {
                                let n = receipts.unposted();
                                receipts.reposted(n);
                                posted_free += n;
                                if let Some(c) = receipts.due(coalesce) {
                                    receipts.announced(c);
                                    to_tx.push_back(c);
                                }
                            }
                        } else if let Some(c) = receipts.due(coalesce) {
                            // An empty poll announces what is due.
                            receipts.announced(c);
                            to_tx.push_back(c);
                        }
                    }
                    _ => {
                        if let Some(c) = to_tx.pop_front() {
                            credits.grant(c).unwrap();
                        }
                    }
                }
            }
            assert_eq!(sent, total);
        }
    }
}
