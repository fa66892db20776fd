//! The broadcast ring of a shared-memory stream: one writer, any number of
//! readers, each with its own cursor. Readers never hold the writer back.
//!
//! Algorithm: a ring of fixed-size slots, each guarded by its own sequence
//! word, read as a seqlock (H.-J. Boehm, "Can seqlocks get along with
//! programming language memory models?", MSPC 2012). The writer marks the
//! slot busy, writes the message, then publishes the slot's sequence number
//! with release ordering. A reader that finds the sequence it expects copies
//! the message out and checks the sequence word again; if the writer came
//! round in the meantime the copy is discarded and the reader learns it was
//! overrun, and by how much, from the writer's tail.
//!
//! Slot words: `[0]` sequence (with [`BUSY`] while being written), `[1]`
//! length | flags << 32, `[2]` timestamp, `[3..]` payload. The layout of
//! words 0..3 is the wire header of [`crate::wire`].

use crate::sync::{fence, AtomicU64, Ordering};
use crate::wire::HEADER_WORDS;

/// Set in a slot's sequence word while the writer fills the slot.
pub const BUSY: u64 = 1 << 63;

/// Where a ring's slots are. Shared by writer and readers; the memory is
/// owned by whoever created the ring (a segment, or a test's array).
#[derive(Clone, Copy, Debug)]
pub struct RingRef {
    /// First word of slot 0.
    pub slots: *const AtomicU64,
    /// Slots minus one (slots are a power of two).
    pub mask: u64,
    /// Words per slot, header included.
    pub words_per_slot: usize,
}

impl RingRef {
    /// Slot holding sequence `seq`.
    #[inline]
    fn slot(&self, seq: u64) -> *const AtomicU64 {
        // SAFETY: `seq & mask` < slots and every slot has `words_per_slot`
        // words, so the result stays inside the ring.
        unsafe {
            self.slots
                .add((seq & self.mask) as usize * self.words_per_slot)
        }
    }

    /// Payload bytes a slot holds.
    #[inline]
    pub fn max_payload(&self) -> usize {
        (self.words_per_slot - HEADER_WORDS) * 8
    }

    /// Slots in the ring.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }
}

#[inline]
fn word<'a>(slot: *const AtomicU64, i: usize) -> &'a AtomicU64 {
    // SAFETY: callers pass a slot pointer from `RingRef::slot` and `i` below
    // `words_per_slot`; ring memory outlives every writer and reader (the
    // constructors' contract).
    unsafe { &*slot.add(i) }
}

/// The single writer of a broadcast ring.
#[derive(Debug)]
pub struct Writer {
    ring: RingRef,
    /// Next sequence to be published, mirrored to readers through `tail`.
    tail: *const AtomicU64,
    next: u64,
}

// SAFETY: the writer only holds addresses of shared memory that outlives
// it; it is used by one thread at a time (no `Sync`).
unsafe impl Send for Writer {}

impl Writer {
    /// A writer that continues after the last sequence published in the
    /// ring (1 for a fresh ring).
    ///
    /// # Safety
    /// `ring` and `tail` must point to ring memory that stays mapped for the
    /// writer's lifetime, and no other writer may exist for this ring.
    pub unsafe fn new(ring: RingRef, tail: *const AtomicU64) -> Writer {
        // SAFETY: the caller guarantees `tail` is valid.
        let next = unsafe { &*tail }.load(Ordering::Acquire).max(1);
        Writer { ring, tail, next }
    }

    /// Sequence number the next commit will carry.
    #[inline]
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The ring's geometry.
    #[inline]
    pub fn ring(&self) -> &RingRef {
        &self.ring
    }

    /// Marks the next slot busy and returns its first payload word. The
    /// caller writes at most [`RingRef::max_payload`] bytes there, then
    /// calls [`Writer::commit`]. Claiming again without committing reuses
    /// the same slot.
    #[inline]
    pub fn claim(&mut self) -> *const AtomicU64 {
        let slot = self.ring.slot(self.next);
        // Readers that still read the slot's previous message must see the
        // busy mark before any of the new bytes: relaxed store, then a
        // release fence that orders it before the payload stores (pairs with
        // the reader's acquire fence before its second sequence load).
        word(slot, 0).store(self.next | BUSY, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: the payload follows the header words inside the slot.
        unsafe { slot.add(HEADER_WORDS) }
    }

    /// Publishes the claimed slot with `len` payload bytes and returns its
    /// sequence number.
    #[inline]
    pub fn commit(&mut self, len: u32, flags: u32, timestamp: u64) -> u64 {
        debug_assert!(len as usize <= self.ring.max_payload());
        let seq = self.next;
        let slot = self.ring.slot(seq);
        word(slot, 1).store(len as u64 | (flags as u64) << 32, Ordering::Relaxed);
        word(slot, 2).store(timestamp, Ordering::Relaxed);
        // Release: the payload and header stores above happen-before a
        // reader's acquire load that sees `seq`.
        word(slot, 0).store(seq, Ordering::Release);
        // Release: pairs with the acquire load of readers computing their
        // overrun and late-join positions.
        // SAFETY: `tail` is valid for the writer's lifetime (constructor).
        unsafe { &*self.tail }.store(seq + 1, Ordering::Release);
        self.next = seq + 1;
        seq
    }
}

/// What a reader found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// A message was copied out.
    Message {
        /// Its sequence number.
        seq: u64,
        /// Payload bytes copied.
        len: u32,
        /// Flag bits.
        flags: u32,
        /// Send timestamp or 0.
        timestamp: u64,
    },
    /// Nothing new yet.
    Empty,
    /// The writer lapped this reader: messages `from..to` are lost to it and
    /// the cursor moved to `to`.
    Overrun {
        /// First lost sequence.
        from: u64,
        /// First sequence still readable.
        to: u64,
    },
    /// A word of the ring holds a value no writer can have written (a
    /// length larger than a slot, a tail beyond any sequence): the segment
    /// is corrupt or its writer hostile. The cursor does not move.
    Corrupt {
        /// The sequence being read.
        seq: u64,
        /// Which word: "length" or "tail".
        word: &'static str,
        /// What it holds.
        value: u64,
    },
}

/// One reader of a broadcast ring.
#[derive(Debug)]
pub struct Reader {
    ring: RingRef,
    tail: *const AtomicU64,
    next: u64,
}

// SAFETY: as for `Writer`: addresses of shared memory that outlives the
// reader, used by one thread at a time.
unsafe impl Send for Reader {}

impl Reader {
    /// A reader positioned at sequence `start` (use [`Reader::tail`] for
    /// "next message" and [`Reader::oldest`] for "oldest retained").
    ///
    /// # Safety
    /// `ring` and `tail` must point to ring memory that stays mapped for the
    /// reader's lifetime.
    pub unsafe fn new(ring: RingRef, tail: *const AtomicU64, start: u64) -> Reader {
        Reader {
            ring,
            tail,
            next: start.max(1),
        }
    }

    /// The writer's next sequence, as last published.
    #[inline]
    pub fn tail(&self) -> u64 {
        // SAFETY: valid for the reader's lifetime (constructor).
        unsafe { &*self.tail }.load(Ordering::Acquire).max(1)
    }

    /// The tail, or the value it holds when no writer can have written it
    /// (sequences stay below [`BUSY`]).
    #[inline]
    pub fn checked_tail(&self) -> Result<u64, u64> {
        let tail = self.tail();
        if tail >= BUSY {
            return Err(tail);
        }
        Ok(tail)
    }

    /// Oldest sequence that is certainly still intact in the ring.
    pub fn oldest(&self) -> u64 {
        let tail = self.tail();
        // The slot of `tail - capacity` may be being overwritten right now.
        tail.saturating_add(1)
            .saturating_sub(self.ring.capacity())
            .max(1)
    }

    /// The sequence this reader expects next.
    #[inline]
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Reads the next message into `buf`, which must be at least
    /// [`RingRef::max_payload`] bytes long (shorter panics when a message
    /// does not fit, rather than writing past it).
    // Always inlined: it is the subscriber's per-message path, and out of
    // line it returns its `Read` through memory (counted with cachegrind:
    // 120 instructions a message on the bench's subscriber, 90 inlined).
    #[inline(always)]
    pub fn read(&mut self, buf: &mut [u8]) -> Read {
        let want = self.next;
        let slot = self.ring.slot(want);
        // Acquire: pairs with the writer's release store of `want`, so the
        // header and payload below are the ones published with it.
        let s1 = word(slot, 0).load(Ordering::Acquire);
        if s1 != want {
            return if s1 & !BUSY > want {
                self.overrun(want)
            } else {
                Read::Empty
            };
        }
        let meta = word(slot, 1).load(Ordering::Relaxed);
        let timestamp = word(slot, 2).load(Ordering::Relaxed);
        let len = meta as u32;
        let flags = (meta >> 32) as u32;
        let room = self.ring.max_payload();
        // One compare on the fast path covers both the slot's bound and
        // the caller's buffer.
        if len as usize > room.min(buf.len()) {
            if len as usize <= room {
                buffer_too_short(len as usize, buf.len());
            }
            // Either torn (the writer came round) or corrupt: re-check.
            fence(Ordering::Acquire);
            if word(slot, 0).load(Ordering::Relaxed) != want {
                return self.overrun(want);
            }
            return Read::Corrupt {
                seq: want,
                word: "length",
                value: len as u64,
            };
        }
        // SAFETY: `len <= buf.len()`, checked above (in release builds
        // too: `buf` is the caller's).
        let dst = unsafe { buf.get_unchecked_mut(..len as usize) };
        // SAFETY: the payload follows the header inside the slot and holds
        // max_payload >= `len` bytes; `dst` is `len` long.
        unsafe { copy_out(slot.add(HEADER_WORDS), dst) };
        // Acquire fence, then re-read: if any payload load above saw a store
        // of a later writer, that writer's busy mark is visible now (pairs
        // with the release fence in `claim`).
        fence(Ordering::Acquire);
        if word(slot, 0).load(Ordering::Relaxed) != want {
            return self.overrun(want);
        }
        self.next = want + 1;
        Read::Message {
            seq: want,
            len,
            flags,
            timestamp,
        }
    }

    #[cold]
    fn overrun(&mut self, from: u64) -> Read {
        // Resume a little ahead of the oldest intact message so a reader that
        // is still slow is not lapped again at once.
        // The tail is written by another process: a value no writer can
        // have published is reported, not computed with.
        let tail = match self.checked_tail() {
            Ok(t) => t,
            Err(value) => {
                return Read::Corrupt {
                    seq: from,
                    word: "tail",
                    value,
                }
            }
        };
        if tail <= from {
            // The slot says the writer came round, the tail does not show it
            // yet: nothing is readable until it does (a writer publishes
            // the tail after the slot).
            return Read::Empty;
        }
        let margin = self.ring.capacity() / 8;
        let oldest = (tail + 1).saturating_sub(self.ring.capacity()).max(1);
        let to = (oldest + margin).min(tail).max(from + 1);
        self.next = to;
        Read::Overrun { from, to }
    }
}

/// A caller passed [`Reader::read`] a buffer shorter than the message
/// (its contract asks for [`RingRef::max_payload`] bytes).
#[cold]
#[inline(never)]
fn buffer_too_short(len: usize, buf: usize) -> ! {
    panic!("a {len}-byte message does not fit the reader's {buf}-byte buffer")
}

/// Copies `dst.len()` payload bytes out of a slot.
///
/// # Safety
/// `src` must point to at least `dst.len()` bytes (rounded up to words) of
/// ring memory.
#[inline]
unsafe fn copy_out(src: *const AtomicU64, dst: &mut [u8]) {
    #[cfg(not(loom))]
    {
        // A racing writer can change these bytes while they are copied; the
        // copy is then discarded by the sequence re-check in `read`, so torn
        // bytes never reach the application. Memory written by another
        // process is outside what the compiler can reason about.
        // SAFETY: bounds per the function contract; source and destination
        // are distinct memory.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
    }
    #[cfg(loom)]
    {
        for (i, chunk) in dst.chunks_mut(8).enumerate() {
            // SAFETY: word `i` lies inside the payload per the contract.
            let w = unsafe { &*src.add(i) }.load(Ordering::Relaxed);
            chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// Copies `bytes` into a claimed slot's payload.
///
/// # Safety
/// `dst` must be the payload pointer returned by [`Writer::claim`] and
/// `bytes` no longer than the ring's payload.
#[inline]
pub unsafe fn copy_in(dst: *const AtomicU64, bytes: &[u8]) {
    #[cfg(not(loom))]
    {
        // SAFETY: bounds per the function contract; the writer is the only
        // one storing to a claimed slot.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
    }
    #[cfg(loom)]
    {
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: word `i` lies inside the payload per the contract.
            unsafe { &*dst.add(i) }.store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Mem {
        words: Vec<AtomicU64>,
        tail: AtomicU64,
    }

    fn mem(capacity: usize, words_per_slot: usize) -> Mem {
        Mem {
            words: (0..capacity * words_per_slot)
                .map(|_| AtomicU64::new(0))
                .collect(),
            tail: AtomicU64::new(0),
        }
    }

    fn ring(m: &Mem, capacity: usize, wps: usize) -> RingRef {
        RingRef {
            slots: m.words.as_ptr(),
            mask: capacity as u64 - 1,
            words_per_slot: wps,
        }
    }

    fn publish(w: &mut Writer, bytes: &[u8]) -> u64 {
        let p = w.claim();
        // SAFETY: `p` is the claimed payload and bytes fit the test slots.
        unsafe { copy_in(p, bytes) };
        w.commit(bytes.len() as u32, 0, 0)
    }

    #[test]
    fn reads_in_order_then_reports_empty() {
        let m = mem(8, 4);
        let r = ring(&m, 8, 4);
        // SAFETY: `m` outlives writer and reader.
        let (mut w, mut rd) = unsafe { (Writer::new(r, &m.tail), Reader::new(r, &m.tail, 1)) };
        for i in 0..5u8 {
            assert_eq!(publish(&mut w, &[i; 3]), i as u64 + 1);
        }
        let mut buf = [0u8; 8];
        for i in 0..5u8 {
            match rd.read(&mut buf) {
                Read::Message { seq, len, .. } => {
                    assert_eq!((seq, len), (i as u64 + 1, 3));
                    assert_eq!(&buf[..3], &[i; 3]);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(rd.read(&mut buf), Read::Empty);
    }

    #[test]
    #[should_panic]
    fn a_buffer_shorter_than_the_message_panics_rather_than_overflows() {
        let m = mem(4, 16);
        let r = ring(&m, 4, 16);
        // SAFETY: `m` outlives writer and reader.
        let (mut w, mut rd) = unsafe { (Writer::new(r, &m.tail), Reader::new(r, &m.tail, 1)) };
        publish(&mut w, &[7u8; 90]);
        let mut buf = [0u8; 16];
        let _ = rd.read(&mut buf);
    }

    #[test]
    fn lapped_reader_learns_how_many_it_lost() {
        let m = mem(8, 4);
        let r = ring(&m, 8, 4);
        // SAFETY: `m` outlives writer and reader.
        let (mut w, mut rd) = unsafe { (Writer::new(r, &m.tail), Reader::new(r, &m.tail, 1)) };
        for i in 0..20u8 {
            publish(&mut w, &[i]);
        }
        let mut buf = [0u8; 8];
        // tail = 21, oldest intact = 14, margin 1 -> resume at 15.
        assert_eq!(rd.read(&mut buf), Read::Overrun { from: 1, to: 15 });
        let mut seen = vec![];
        while let Read::Message { seq, .. } = rd.read(&mut buf) {
            assert_eq!(buf[0] as u64 + 1, seq);
            seen.push(seq);
        }
        assert_eq!(seen, (15..=20).collect::<Vec<_>>());
    }

    #[test]
    fn corrupt_length_is_reported_not_copied() {
        let m = mem(4, 4);
        let r = ring(&m, 4, 4);
        // SAFETY: `m` outlives writer and reader.
        let (mut w, mut rd) = unsafe { (Writer::new(r, &m.tail), Reader::new(r, &m.tail, 1)) };
        publish(&mut w, b"ok");
        // Sequence 1 lives in slot 1: word 4 is its sequence, word 5 its length.
        m.words[5].store(1000, Ordering::Relaxed);
        let mut buf = [0u8; 8];
        assert_eq!(
            rd.read(&mut buf),
            Read::Corrupt {
                seq: 1,
                word: "length",
                value: 1000
            }
        );
    }

    #[test]
    fn a_writer_resumes_after_the_published_tail() {
        let m = mem(4, 4);
        let r = ring(&m, 4, 4);
        // SAFETY: `m` outlives the writers.
        let mut w = unsafe { Writer::new(r, &m.tail) };
        publish(&mut w, b"a");
        publish(&mut w, b"b");
        // SAFETY: as above; the first writer is not used again.
        let w2 = unsafe { Writer::new(r, &m.tail) };
        assert_eq!(w2.next_seq(), 3);
    }

    #[test]
    fn a_tail_beyond_any_sequence_is_reported_and_a_lagging_one_waited_for() {
        let m = mem(4, 4);
        let r = ring(&m, 4, 4);
        // SAFETY: `m` outlives writer and reader.
        let (mut w, mut rd) = unsafe { (Writer::new(r, &m.tail), Reader::new(r, &m.tail, 1)) };
        publish(&mut w, b"a");
        // Sequence 1's slot claims a lap the tail (2) does not show.
        m.words[4].store(9, Ordering::Relaxed);
        m.tail.store(1, Ordering::Relaxed);
        let mut buf = [0u8; 8];
        assert_eq!(rd.read(&mut buf), Read::Empty);
        assert_eq!(rd.position(), 1);
        m.tail.store(BUSY + 5, Ordering::Relaxed);
        assert_eq!(
            rd.read(&mut buf),
            Read::Corrupt {
                seq: 1,
                word: "tail",
                value: BUSY + 5
            }
        );
        assert_eq!(rd.position(), 1, "the cursor does not move");
        assert_eq!(rd.checked_tail(), Err(BUSY + 5));
        m.tail.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(rd.oldest(), u64::MAX - 4, "saturates, no wrap");
    }
}
