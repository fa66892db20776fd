//! The single-producer single-consumer ring of a shared-memory session, one
//! per direction.
//!
//! Algorithm: a bounded ring in the style of Lamport's SPSC queue with the
//! "sequence in the slot" refinement (as in D. Vyukov's bounded queue): the
//! consumer polls the slot it expects, whose first word becomes that slot's
//! sequence number when the message is ready, so a message costs the
//! consumer one cache line in the common case. The producer learns free
//! space from the consumer's `head` (sequences consumed), which it reads
//! only when its cached copy says the ring is full: that is the credit
//! flow. The producer never overwrites an unconsumed slot, so the consumer
//! hands out a borrowed view of the payload in place, with no copy.

use crate::sync::{AtomicU64, Ordering};
use crate::transport::shm::broadcast::RingRef;
use crate::wire::HEADER_WORDS;

#[inline]
fn word<'a>(slot: *const AtomicU64, i: usize) -> &'a AtomicU64 {
    // SAFETY: callers pass a slot pointer computed from a RingRef and `i`
    // below its words_per_slot; ring memory outlives producer and consumer.
    unsafe { &*slot.add(i) }
}

#[inline]
fn slot(ring: &RingRef, seq: u64) -> *const AtomicU64 {
    // SAFETY: `seq & mask` indexes a slot inside the ring.
    unsafe {
        ring.slots
            .add((seq & ring.mask) as usize * ring.words_per_slot)
    }
}

/// The producing side.
#[derive(Debug)]
pub struct Producer {
    ring: RingRef,
    /// Consumer-owned: sequences consumed so far.
    head: *const AtomicU64,
    next: u64,
    cached_head: u64,
    /// A head value the consumer cannot have written (beyond what was
    /// produced, or behind an earlier one); the producer stops.
    bad_head: Option<u64>,
}

// SAFETY: addresses of shared memory that outlives the producer; used by one
// thread at a time.
unsafe impl Send for Producer {}

impl Producer {
    /// # Safety
    /// `ring` and `head` must stay mapped for the producer's lifetime, the
    /// ring must be fresh (all zero), and there must be one producer.
    pub unsafe fn new(ring: RingRef, head: *const AtomicU64) -> Producer {
        Producer {
            ring,
            head,
            next: 1,
            cached_head: 0,
            bad_head: None,
        }
    }

    /// The ring's geometry.
    #[inline]
    pub fn ring(&self) -> &RingRef {
        &self.ring
    }

    /// The impossible value the consumer's head word held, once one was
    /// seen: the ring is corrupt or the peer hostile, and this producer
    /// refuses every claim from then on.
    pub fn bad_head(&self) -> Option<u64> {
        self.bad_head
    }

    /// Messages sent so far.
    pub fn sent(&self) -> u64 {
        self.next - 1
    }

    /// Messages sent and not yet consumed, as last seen.
    pub fn in_flight(&self) -> u64 {
        self.next - 1 - self.cached_head
    }

    /// Returns the next slot's payload when the consumer has room for it;
    /// `None` when it has not, or when its head word holds a value it
    /// cannot have written (see [`Producer::bad_head`]).
    #[inline]
    pub fn try_claim(&mut self) -> Option<*const AtomicU64> {
        if self.next - self.cached_head > self.ring.capacity() {
            // Acquire: pairs with the consumer's release of `head`, so the
            // consumer's reads of the slot we reuse are finished.
            // SAFETY: valid for the producer's lifetime (constructor).
            let head = unsafe { &*self.head }.load(Ordering::Acquire);
            // The consumer writes the last sequence it consumed: never more
            // than was produced, never less than before. Anything else
            // would wrap the subtraction below.
            if head >= self.next || head < self.cached_head {
                self.bad_head = Some(head);
                return None;
            }
            self.cached_head = head;
            if self.next - self.cached_head > self.ring.capacity() {
                return None;
            }
        }
        // SAFETY: the payload follows the header inside the slot.
        Some(unsafe { slot(&self.ring, self.next).add(HEADER_WORDS) })
    }

    /// Publishes the claimed slot; returns its sequence.
    #[inline]
    pub fn commit(&mut self, len: u32, flags: u32, timestamp: u64) -> u64 {
        debug_assert!(len as usize <= self.ring.max_payload());
        let seq = self.next;
        let s = slot(&self.ring, seq);
        word(s, 1).store(len as u64 | (flags as u64) << 32, Ordering::Relaxed);
        word(s, 2).store(timestamp, Ordering::Relaxed);
        // Release: header and payload happen-before the consumer's acquire
        // load that sees `seq`.
        word(s, 0).store(seq, Ordering::Release);
        self.next = seq + 1;
        seq
    }
}

/// A message found by the consumer, still in its slot.
#[derive(Debug, Clone, Copy)]
pub struct Peeked {
    /// Sequence.
    pub seq: u64,
    /// Payload length.
    pub len: u32,
    /// Flags.
    pub flags: u32,
    /// Send timestamp or 0.
    pub timestamp: u64,
    /// First payload word.
    pub payload: *const AtomicU64,
}

/// The consuming side.
#[derive(Debug)]
pub struct Consumer {
    ring: RingRef,
    head: *const AtomicU64,
    next: u64,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

/// Why a slot cannot be consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekError {
    /// Nothing new.
    Empty,
    /// A word of the slot holds a value the producer cannot have written:
    /// a length larger than a slot, or a sequence that is neither the
    /// expected one nor the one a lap earlier.
    Corrupt {
        /// Which word: "length" or "sequence".
        word: &'static str,
        /// What it holds.
        value: u64,
    },
}

impl Consumer {
    /// # Safety
    /// As for [`Producer::new`], with one consumer.
    pub unsafe fn new(ring: RingRef, head: *const AtomicU64) -> Consumer {
        Consumer {
            ring,
            head,
            next: 1,
        }
    }

    /// The next message, if published. It stays valid until
    /// [`Consumer::release`].
    #[inline]
    pub fn peek(&self) -> Result<Peeked, PeekError> {
        let s = slot(&self.ring, self.next);
        // Acquire: pairs with the producer's release in `commit`.
        let seq = word(s, 0).load(Ordering::Acquire);
        if seq != self.next {
            // Not yet written, the slot holds the message of a lap earlier
            // (0 while fresh). Any other value is not the producer's.
            if seq != self.next.saturating_sub(self.ring.capacity()) {
                return Err(PeekError::Corrupt {
                    word: "sequence",
                    value: seq,
                });
            }
            return Err(PeekError::Empty);
        }
        let meta = word(s, 1).load(Ordering::Relaxed);
        let len = meta as u32;
        if len as usize > self.ring.max_payload() {
            return Err(PeekError::Corrupt {
                word: "length",
                value: len as u64,
            });
        }
        Ok(Peeked {
            seq: self.next,
            len,
            flags: (meta >> 32) as u32,
            timestamp: word(s, 2).load(Ordering::Relaxed),
            // SAFETY: the payload follows the header inside the slot.
            payload: unsafe { s.add(HEADER_WORDS) },
        })
    }

    /// The sequence the consumer expects next.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Hands the peeked slot back to the producer.
    #[inline]
    pub fn release(&mut self) {
        // Release: our reads of the slot happen-before the producer's
        // acquire of `head` that lets it reuse the slot.
        // SAFETY: valid for the consumer's lifetime (constructor).
        unsafe { &*self.head }.store(self.next, Ordering::Release);
        self.next += 1;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::transport::shm::broadcast::copy_in;

    #[test]
    fn producer_is_held_back_when_the_consumer_has_no_room() {
        let words: Vec<AtomicU64> = (0..4 * 4).map(|_| AtomicU64::new(0)).collect();
        let head = AtomicU64::new(0);
        let ring = RingRef {
            slots: words.as_ptr(),
            mask: 3,
            words_per_slot: 4,
        };
        // SAFETY: `words` and `head` outlive both ends; one of each.
        let (mut p, mut c) = unsafe { (Producer::new(ring, &head), Consumer::new(ring, &head)) };
        for i in 0..4u8 {
            let d = p.try_claim().expect("room");
            // SAFETY: claimed payload, one byte fits.
            unsafe { copy_in(d, &[i]) };
            p.commit(1, 0, 0);
        }
        assert!(p.try_claim().is_none(), "a full ring must refuse");
        let m = c.peek().unwrap();
        assert_eq!(m.seq, 1);
        // SAFETY: the peeked payload holds one byte until release.
        assert_eq!(unsafe { *(m.payload as *const u8) }, 0);
        c.release();
        assert!(p.try_claim().is_some(), "one slot freed");
        assert_eq!(p.in_flight(), 3);
        for want in 2..=4 {
            assert_eq!(c.peek().unwrap().seq, want);
            c.release();
        }
        assert_eq!(c.peek().unwrap_err(), PeekError::Empty);
    }

    #[test]
    fn impossible_head_and_sequence_words_are_refused_not_computed_with() {
        let words: Vec<AtomicU64> = (0..4 * 4).map(|_| AtomicU64::new(0)).collect();
        let head = AtomicU64::new(0);
        let ring = RingRef {
            slots: words.as_ptr(),
            mask: 3,
            words_per_slot: 4,
        };
        // SAFETY: `words` and `head` outlive both ends; one of each.
        let (mut p, c) = unsafe { (Producer::new(ring, &head), Consumer::new(ring, &head)) };
        for _ in 0..4 {
            p.try_claim().expect("room");
            p.commit(0, 0, 0);
        }
        // Consumed 9 of 4 sent: `next - head` would wrap.
        head.store(9, Ordering::Relaxed);
        assert!(p.try_claim().is_none());
        assert_eq!(p.bad_head(), Some(9));
        // Slot of sequence 1 holding neither 1 nor 1 - capacity.
        words[4].store(77, Ordering::Relaxed);
        assert_eq!(
            c.peek().unwrap_err(),
            PeekError::Corrupt {
                word: "sequence",
                value: 77
            }
        );
    }
}
