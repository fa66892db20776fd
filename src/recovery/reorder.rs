//! The subscriber's reorder window: one slot per sequence number from the
//! delivery point on, holding what is known of that message (here, missing,
//! given up) and, for a message that arrived early, a copy of it.
//!
//! Sequence `s` lives in slot `s mod capacity`. The window covers
//! `next..next + capacity`; slots of sequences beyond the highest one seen
//! hold stale values and are initialised when the window reaches them.

use crate::wire::Header;

/// Time value meaning "not yet".
pub(crate) const NEVER: u64 = u64::MAX;
/// `Slot::reassembly` of a message held inline.
pub(crate) const INLINE: u32 = u32::MAX;

/// What is known of one sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not here yet (possibly some of its fragments are).
    Missing,
    /// Here, waiting for earlier messages.
    Present,
    /// Given up: requests went unanswered.
    Lost,
    /// Given up: the publisher no longer retains it.
    NotRetained,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) state: State,
    /// Requests sent for it.
    pub(crate) tries: u32,
    pub(crate) len: u32,
    pub(crate) flags: u32,
    /// Reassembly buffer holding a fragmented message, or [`INLINE`].
    pub(crate) reassembly: u32,
    pub(crate) timestamp: u64,
    /// When it was first known to be missing.
    pub(crate) noticed: u64,
    /// When it was last requested, plus the random wait drawn for its
    /// repeat (so the repeat is due `request_timeout` after this).
    pub(crate) last_request: u64,
    /// Per line, when that line was first seen past this sequence, or
    /// [`NEVER`]; a line past a message it did not deliver has lost it.
    pub(crate) past_at: [u64; 2],
    /// The publisher said once that it no longer retains it.
    pub(crate) not_available: bool,
}

impl Slot {
    const EMPTY: Slot = Slot {
        state: State::Missing,
        tries: 0,
        len: 0,
        flags: 0,
        reassembly: INLINE,
        timestamp: 0,
        noticed: 0,
        last_request: 0,
        past_at: [NEVER; 2],
        not_available: false,
    };
}

/// Slots and, for each, room for one unfragmented message.
#[derive(Debug)]
pub(crate) struct ReorderWindow {
    slots: Box<[Slot]>,
    bytes: Box<[u8]>,
    slot_bytes: usize,
    mask: u64,
}

impl ReorderWindow {
    /// `capacity` is a power of two; `slot_bytes` the largest payload that
    /// arrives unfragmented.
    pub(crate) fn new(capacity: usize, slot_bytes: usize) -> ReorderWindow {
        ReorderWindow {
            slots: vec![Slot::EMPTY; capacity].into_boxed_slice(),
            bytes: super::prefaulted(capacity * slot_bytes),
            slot_bytes,
            mask: capacity as u64 - 1,
        }
    }

    /// Sequences the window spans.
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.mask + 1
    }

    #[inline]
    pub(crate) fn slot(&self, seq: u64) -> &Slot {
        &self.slots[(seq & self.mask) as usize]
    }

    #[inline]
    pub(crate) fn slot_mut(&mut self, seq: u64) -> &mut Slot {
        &mut self.slots[(seq & self.mask) as usize]
    }

    /// Records `seq` as missing since `now`; `past_at` says which lines are
    /// already past it.
    #[inline]
    pub(crate) fn mark_missing(&mut self, seq: u64, now: u64, past_at: [u64; 2]) {
        *self.slot_mut(seq) = Slot {
            noticed: now,
            past_at,
            ..Slot::EMPTY
        };
    }

    /// Keeps a copy of a message that arrived before its turn. Returns
    /// false (and keeps nothing) when the payload exceeds a slot, which
    /// decoding against the same `max_datagram` rules out.
    #[inline]
    pub(crate) fn store(&mut self, h: &Header, payload: &[u8]) -> bool {
        let i = (h.seq & self.mask) as usize;
        if payload.len() > self.slot_bytes {
            return false;
        }
        let at = i * self.slot_bytes;
        self.bytes[at..at + payload.len()].copy_from_slice(payload);
        let s = &mut self.slots[i];
        s.state = State::Present;
        s.len = payload.len() as u32;
        s.flags = h.flags;
        s.timestamp = h.timestamp;
        s.reassembly = INLINE;
        true
    }

    /// Payload of a present, inline message.
    #[inline]
    pub(crate) fn payload(&self, seq: u64) -> &[u8] {
        let i = (seq & self.mask) as usize;
        let at = i * self.slot_bytes;
        &self.bytes[at..at + self.slots[i].len as usize]
    }

    /// Start and capacity of every buffer, to show they never move.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> [(usize, usize); 2] {
        [
            (self.slots.as_ptr() as usize, self.slots.len()),
            (self.bytes.as_ptr() as usize, self.bytes.len()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_share_slots_modulo_the_capacity() {
        let mut w = ReorderWindow::new(4, 8);
        assert_eq!(w.capacity(), 4);
        let h = |seq| Header {
            seq,
            len: 0,
            flags: 1,
            timestamp: 9,
        };
        assert!(w.store(&h(3), b"abc"));
        assert_eq!(w.slot(7).state, State::Present);
        assert_eq!(w.payload(3), b"abc");
        assert!(!w.store(&h(2), b"123456789"));
        w.mark_missing(7, 5, [NEVER, 5]);
        let s = w.slot(3);
        assert_eq!(
            (s.state, s.noticed, s.past_at),
            (State::Missing, 5, [NEVER, 5])
        );
    }
}
