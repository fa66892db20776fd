//! Send-queue bookkeeping: which requests to signal and how many are still
//! owned by the device. Pure logic, no verbs calls.
//!
//! Requests are numbered from 0 in posting order. Only every Nth one asks
//! for a completion (selective signaling); a completion for request `k`
//! means every request up to `k` is done, because a queue pair completes
//! its sends in order. So the owner learns of completions only when it
//! reaps a signaled one, and until then the unsignaled requests before it
//! still hold their send-queue entries and buffers.
//!
//! Invariant: with N <= depth, any N consecutive requests contain a
//! signaled one, so a full queue always has a signaled request outstanding
//! whose completion will free entries: the queue never wedges.

/// Accounting of one send queue.
#[derive(Debug, Clone)]
pub(crate) struct SendQueue {
    /// Entries the queue pair has (granted `max_send_wr`).
    depth: u64,
    /// Signal every this many requests (1..=depth).
    every: u32,
    /// Requests posted so far; the next one is numbered `posted`.
    posted: u64,
    /// Requests known complete: all numbered below this.
    completed: u64,
    /// Unsignaled requests posted since the last signaled one.
    run: u32,
}

/// What the next request should carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Its number, also its `wr_id`; `index % depth` names its buffer slot.
    pub(crate) index: u64,
    /// Ask for a completion.
    pub(crate) signaled: bool,
}

impl SendQueue {
    /// A queue of `depth` entries signaling every `signal_every`th request
    /// (clamped to 1..=depth).
    pub(crate) fn new(depth: u32, signal_every: u32) -> SendQueue {
        let depth = depth.max(1);
        SendQueue {
            depth: depth.into(),
            every: signal_every.clamp(1, depth),
            posted: 0,
            completed: 0,
            run: 0,
        }
    }

    /// Requests posted but not known complete.
    #[inline]
    pub(crate) fn outstanding(&self) -> u64 {
        self.posted - self.completed
    }

    /// Whether one more request fits.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        self.outstanding() < self.depth
    }

    /// Requests known complete (all numbered below this).
    #[inline]
    pub(crate) fn completed(&self) -> u64 {
        self.completed
    }

    /// The number the next request will carry.
    #[inline]
    pub(crate) fn next_index(&self) -> u64 {
        self.posted
    }

    /// Takes the next entry; `force` asks for a completion whatever the
    /// count. The caller must have checked [`has_room`](Self::has_room).
    #[inline]
    pub(crate) fn take(&mut self, force: bool) -> Slot {
        debug_assert!(self.has_room(), "send queue overrun");
        let signaled = force || self.run + 1 >= self.every;
        self.run = if signaled { 0 } else { self.run + 1 };
        let index = self.posted;
        self.posted += 1;
        Slot { index, signaled }
    }

    /// Gives back the entry just taken when posting it failed.
    pub(crate) fn untake(&mut self, slot: Slot) {
        debug_assert_eq!(slot.index + 1, self.posted);
        self.posted -= 1;
        // Signal the next one: the run count no longer matches.
        self.run = self.every.saturating_sub(1);
    }

    /// Records the completion of signaled request `index`: it and every
    /// request before it are done.
    #[inline]
    pub(crate) fn complete(&mut self, index: u64) {
        debug_assert!(index < self.posted, "completion for a request not posted");
        if index >= self.completed {
            self.completed = index + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_every_nth_request() {
        let mut q = SendQueue::new(64, 4);
        let signaled: Vec<u64> = (0..12)
            .map(|_| q.take(false))
            .filter(|s| s.signaled)
            .map(|s| s.index)
            .collect();
        assert_eq!(signaled, vec![3, 7, 11]);
        assert_eq!(q.outstanding(), 12);
    }

    #[test]
    fn a_completion_frees_everything_before_it() {
        let mut q = SendQueue::new(8, 4);
        for _ in 0..8 {
            q.take(false);
        }
        assert!(!q.has_room());
        q.complete(3);
        assert_eq!(q.outstanding(), 4);
        assert!(q.has_room());
        // A late, older completion changes nothing.
        q.complete(1);
        assert_eq!(q.completed(), 4);
        q.complete(7);
        assert_eq!(q.outstanding(), 0);
    }

    #[test]
    fn forced_signal_restarts_the_count() {
        let mut q = SendQueue::new(64, 4);
        q.take(false);
        assert!(q.take(true).signaled);
        let s: Vec<bool> = (0..4).map(|_| q.take(false).signaled).collect();
        assert_eq!(s, vec![false, false, false, true]);
    }

    #[test]
    fn signal_every_is_clamped_to_the_depth() {
        let mut q = SendQueue::new(4, 1000);
        let s: Vec<bool> = (0..4).map(|_| q.take(false).signaled).collect();
        assert_eq!(s, vec![false, false, false, true]);
        let mut q = SendQueue::new(4, 0);
        assert!(q.take(false).signaled);
    }

    /// Whatever the depth, N and pattern of forced signals, a full queue
    /// holds a signaled request, so reaping can always make room.
    #[test]
    fn a_full_queue_always_holds_a_signaled_request() {
        for depth in 1..=12u32 {
            for every in 1..=depth + 2 {
                let mut q = SendQueue::new(depth, every);
                let mut signaled: Vec<u64> = Vec::new();
                for step in 0..200u64 {
                    if !q.has_room() {
                        let pending: Vec<u64> = signaled
                            .iter()
                            .copied()
                            .filter(|&i| i >= q.completed())
                            .collect();
                        assert!(
                            !pending.is_empty(),
                            "depth {depth} every {every}: full with no signaled request"
                        );
                        // The device completes the oldest signaled request.
                        q.complete(pending[0]);
                        assert!(q.has_room());
                    }
                    let s = q.take(step % 7 == 5);
                    if s.signaled {
                        signaled.push(s.index);
                    }
                }
            }
        }
    }

    #[test]
    fn untake_returns_the_entry_and_signals_next() {
        let mut q = SendQueue::new(8, 4);
        let s = q.take(false);
        q.untake(s);
        assert_eq!(q.outstanding(), 0);
        let s2 = q.take(false);
        assert_eq!(s2.index, s.index);
        assert!(s2.signaled);
    }
}
