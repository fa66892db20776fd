//! The remote ring of the `write` and `write-imm` session modes.
//!
//! The receiver registers a ring of `depth` slots of `slot` bytes (remote
//! write allowed on exactly the ring) and names it in its hello. Message
//! `seq` goes to slot `(seq - 1) % depth`, written by one RDMA WRITE that
//! ends at the slot's end: the payload, padded to 8 bytes, then a 32-byte
//! trailer `len u32, flags u32, credit u32, 0 u32, timestamp u64, seq u64`
//! (`credit`: the sender's count of ring slots it has ever freed, the same
//! cumulative count its credit word carries, riding on the message). The sequence is
//! the last word of the slot, so a device that places a write in address
//! order (ConnectX, rxe) makes it visible last: the receiver polls that one
//! word and sees a complete message when it holds the expected sequence
//! (`write`). With `write-imm` the receive completion says the write is
//! placed; the slot is read the same way. After delivery the receiver
//! zeroes the word, so an old lap is never taken for a new message, and
//! gives the slot back as a credit.
//!
//! Every trailer field is the peer's to choose: the sequence must be the
//! expected one and the length must fit the slot and `max_message`.

use std::sync::atomic::{AtomicU64, Ordering};

use verbs_sys::ibv_recv_wr;

use super::super::qp::CmQp;

/// Bytes of the trailer at the end of each slot.
pub(crate) const TRAILER: usize = 32;

/// Slot size of a ring holding payloads up to `max_payload` bytes: the
/// padded payload and the trailer, in whole cache lines.
pub(crate) fn ring_slot(max_payload: usize) -> usize {
    (max_payload.div_ceil(8) * 8 + TRAILER).div_ceil(64) * 64
}

/// Bytes one write of a `len`-byte payload covers (padding and trailer).
#[inline]
pub(crate) fn wire_len(len: usize) -> usize {
    len.div_ceil(8) * 8 + TRAILER
}

/// Writes the trailer into the last `TRAILER` bytes before `end`.
///
/// # Safety
/// `end - TRAILER .. end` must be writable and 8-byte aligned at `end`.
#[inline]
pub(crate) unsafe fn put_trailer(end: *mut u8, t: &Trailer) {
    let mut b = [0u8; TRAILER];
    b[0..4].copy_from_slice(&t.len.to_le_bytes());
    b[4..8].copy_from_slice(&t.flags.to_le_bytes());
    b[8..12].copy_from_slice(&t.credit.to_le_bytes());
    b[16..24].copy_from_slice(&t.timestamp.to_le_bytes());
    b[24..32].copy_from_slice(&t.seq.to_le_bytes());
    let t = b;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), end.sub(TRAILER), TRAILER) };
}

/// The fields of a slot's trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub(crate) len: u32,
    pub(crate) flags: u32,
    /// The sender's cumulative count of freed slots (its credit word).
    pub(crate) credit: u32,
    pub(crate) timestamp: u64,
    pub(crate) seq: u64,
}

/// A message found in a slot.
pub(crate) struct Found<'a> {
    pub(crate) flags: u32,
    pub(crate) credit: u32,
    pub(crate) timestamp: u64,
    pub(crate) payload: &'a [u8],
}

/// Why a slot does not hold the message expected.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// The sequence word is zero: nothing written yet.
    Empty,
    /// Another sequence than the expected one.
    Seq(u64),
    /// A length that does not fit the slot or `max_message`.
    Len(u32),
}

/// The receiving side's view of its ring.
pub(crate) struct RingIn {
    base: *mut u8,
    slot: usize,
    depth: u64,
}

impl RingIn {
    /// `depth` slots of `slot` bytes at `base` (registered, zeroed).
    pub(crate) fn new(base: *mut u8, slot: usize, depth: u32) -> RingIn {
        RingIn {
            base,
            slot,
            depth: depth.max(1).into(),
        }
    }

    #[inline]
    fn end_of(&self, seq: u64) -> *mut u8 {
        let i = (seq.wrapping_sub(1) % self.depth) as usize;
        // SAFETY: slot i is inside the ring; its end is at most one past it.
        unsafe { self.base.add(i * self.slot + self.slot) }
    }

    #[inline]
    fn seq_word(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: the last 8 bytes of a slot, 8-byte aligned (slots are
        // whole cache lines of a page-aligned pool); the NIC writes it, we
        // only load and store it atomically.
        unsafe { AtomicU64::from_ptr(self.end_of(seq).sub(8).cast()) }
    }

    /// The message in the slot of `seq`, when its last word holds `seq`.
    /// `max` is the largest payload the session accepts.
    ///
    /// # Safety
    /// The returned payload must be dropped before [`release`](Self::release)
    /// of the same sequence.
    #[inline]
    pub(crate) unsafe fn read<'a>(&self, seq: u64, max: usize) -> Result<Found<'a>, Bad> {
        let mut got = u64::from_le(self.seq_word(seq).load(Ordering::Acquire));
        if got == 0 {
            return Err(Bad::Empty);
        }
        if got != seq {
            // An 8-byte store the device made in pieces settles at once;
            // a wrong sequence that stays is the peer's.
            for _ in 0..64 {
                std::hint::spin_loop();
                got = u64::from_le(self.seq_word(seq).load(Ordering::Acquire));
                if got == seq {
                    break;
                }
            }
            if got != seq {
                return Err(Bad::Seq(got));
            }
        }
        let end = self.end_of(seq);
        // SAFETY: the trailer's first 16 bytes lie before the sequence word
        // in the same slot; the Acquire load above orders these reads after
        // the device's placement of the whole write.
        let (len, flags, credit, timestamp) = unsafe {
            let t = end.sub(TRAILER);
            (
                u32::from_le(t.cast::<u32>().read_volatile()),
                u32::from_le(t.add(4).cast::<u32>().read_volatile()),
                u32::from_le(t.add(8).cast::<u32>().read_volatile()),
                u64::from_le(t.add(16).cast::<u64>().read_volatile()),
            )
        };
        if len as usize > max || wire_len(len as usize) > self.slot {
            return Err(Bad::Len(len));
        }
        let start = wire_len(len as usize);
        // SAFETY: `start <= slot` (checked), so the payload lies inside
        // this slot. The peer has no credit for the slot until release, so
        // an honest peer leaves it alone while the caller reads it.
        let payload = unsafe { std::slice::from_raw_parts(end.sub(start), len as usize) };
        Ok(Found {
            flags,
            credit,
            timestamp,
            payload,
        })
    }

    /// The credit riding on message `seq` when it has arrived (its
    /// sequence word holds `seq`), without delivering it: a sender out of
    /// credit looks here for counts its peer sent with messages not yet
    /// polled. Write mode only (it trusts placement order).
    #[inline]
    pub(crate) fn peek_credit(&self, seq: u64) -> Option<u32> {
        if u64::from_le(self.seq_word(seq).load(Ordering::Acquire)) != seq {
            return None;
        }
        // SAFETY: the credit word lies in the trailer of this slot; the
        // Acquire load orders the read after the placement.
        Some(u32::from_le(unsafe {
            self.end_of(seq)
                .sub(TRAILER - 8)
                .cast::<u32>()
                .read_volatile()
        }))
    }

    /// Marks the slot of `seq` empty again, before its credit goes back.
    #[inline]
    pub(crate) fn release(&self, seq: u64) {
        // Release: the reads of the message come before the slot can be
        // reused (the credit write that allows it is posted after this).
        self.seq_word(seq).store(0, Ordering::Release);
    }
}

/// Receive requests without buffers, for RDMA WRITE with immediate: each
/// consumes one and completes with the immediate, placing nothing. Built
/// once; reposting links existing requests into a chain.
pub(crate) struct ImmRecvs {
    wrs: Box<[ibv_recv_wr]>,
    depth: u32,
    repost_at: u32,
}

impl ImmRecvs {
    pub(crate) fn new(depth: u32) -> ImmRecvs {
        let depth = depth.max(1);
        let wrs = (0..depth)
            .map(|i| ibv_recv_wr {
                wr_id: u64::from(i),
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 0,
            })
            .collect();
        ImmRecvs {
            wrs,
            depth,
            repost_at: 0,
        }
    }

    /// Posts `n` requests as one chain; `Err(errno)` with nothing posted.
    pub(crate) fn post(&mut self, qp: &mut CmQp, n: u32) -> std::result::Result<(), i32> {
        if n == 0 {
            return Ok(());
        }
        let n = n.min(self.depth);
        let wrs = self.wrs.as_mut_ptr();
        let first = self.repost_at;
        for k in 0..n {
            let i = (first + k) % self.depth;
            let next = if k + 1 < n {
                // SAFETY: the index is inside the slice.
                unsafe { wrs.add(((i + 1) % self.depth) as usize) }
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: the index is inside the slice.
            unsafe { (*wrs.add(i as usize)).next = next };
        }
        // SAFETY: the requests carry no buffers and live in `self`, which
        // outlives the call (the provider copies them).
        unsafe { qp.post_recv(wrs.add(first as usize)) }?;
        self.repost_at = (first + n) % self.depth;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hold_padded_payload_and_trailer() {
        assert_eq!(ring_slot(232), 320);
        assert_eq!(ring_slot(1), 64);
        assert_eq!(ring_slot(32), 64);
        assert_eq!(ring_slot(33), 128);
        assert_eq!(wire_len(0), 32);
        assert_eq!(wire_len(9), 48);
    }

    #[test]
    fn reads_only_the_expected_complete_message() {
        let slot = ring_slot(100);
        let mut mem = vec![0u64; slot * 4 / 8];
        let ring = RingIn::new(mem.as_mut_ptr().cast(), slot, 4);
        // SAFETY: nothing is held across the calls.
        unsafe {
            assert_eq!(ring.read(1, 100).err(), Some(Bad::Empty));
            let end = ring.end_of(1);
            std::ptr::copy_nonoverlapping(b"hello".as_ptr(), end.sub(wire_len(5)), 5);
            let t = |len, seq| Trailer {
                len,
                flags: 1,
                credit: 9,
                timestamp: 77,
                seq,
            };
            assert_eq!(ring.peek_credit(1), None);
            put_trailer(end, &t(5, 1));
            assert_eq!(ring.peek_credit(1), Some(9));
            let m = ring.read(1, 100).ok().unwrap();
            assert_eq!(
                (m.payload, m.flags, m.credit, m.timestamp),
                (&b"hello"[..], 1, 9, 77)
            );
            ring.release(1);
            assert_eq!(ring.read(1, 100).err(), Some(Bad::Empty));
            // Slot of 5 = slot of 1: a stale or wrong sequence is refused.
            put_trailer(end, &t(5, 9));
            assert_eq!(ring.read(5, 100).err(), Some(Bad::Seq(9)));
            // Longer than max_message, longer than the slot.
            put_trailer(end, &t(101, 5));
            assert_eq!(ring.read(5, 100).err(), Some(Bad::Len(101)));
            put_trailer(end, &t(u32::MAX, 5));
            assert_eq!(ring.read(5, usize::MAX).err(), Some(Bad::Len(u32::MAX)));
        }
    }
}
