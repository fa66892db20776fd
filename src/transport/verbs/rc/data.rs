//! The data path: claim, commit and poll, with the credit and control
//! writes that keep them flowing. No allocation, no locks, no system calls
//! except the verbs posts and polls themselves.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use verbs_sys::{
    ibv_wc, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SUCCESS,
    IBV_WC_WR_FLUSH_ERR, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
};

use super::super::{errors, qp};
use super::end::End;
use super::ring::{put_trailer, wire_len, Bad, Trailer, TRAILER};
use super::{RcSession, CTRL_CLOSE, CTRL_CREDIT, CTRL_LEN, CTRL_SLEEP, WC_BATCH};
use crate::config::SessionMode;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transport::{SessionEnd, CHECK_EVERY};
use crate::wire::{Header, HEADER_LEN};

/// Empty polls between two reads of the clock for the liveness checks'
/// time cadence.
const CLOCK_EVERY: u32 = 64;
/// Longest time between two liveness checks of a session polled at
/// least every `CLOCK_EVERY` times in it: far below any keep-alive
/// timeout, far above a spinning poll's check cadence.
const CHECK_INTERVAL_NS: u64 = 1_000_000;

impl RcSession {
    #[inline]
    fn send_slot(&self, index: u64) -> *mut u8 {
        // SAFETY: index % depth names one of the depth slots of the pool.
        unsafe {
            self.send_base
                .add((index % self.sq_depth) as usize * self.slot)
        }
    }

    #[inline]
    fn ctrl_word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: the control block is live, 4-byte aligned at `off`, and
        // only accessed atomically by us (the NIC writes it whole).
        unsafe { AtomicU32::from_ptr(self.ctrl_in.add(off).cast()) }
    }

    #[inline]
    pub(super) fn close_word(&self) -> u64 {
        // SAFETY: as for ctrl_word32, 8-byte aligned.
        let w = unsafe { AtomicU64::from_ptr(self.ctrl_in.add(CTRL_CLOSE).cast()) };
        // Acquire: the peer wrote it after every message it sent; we read
        // it before deciding those messages are all delivered.
        w.load(Ordering::Acquire)
    }

    /// Applies the credit count the peer last wrote.
    #[inline]
    fn refresh_credits(&mut self) {
        // Acquire: the peer posted the buffers before writing the count.
        let total = u32::from_le(self.ctrl_word32(CTRL_CREDIT).load(Ordering::Acquire));
        if let Err(bad) = self.credits.grant(total) {
            self.fail(End::Protocol(format!(
                "it granted credit up to {bad}, more receive buffers than it has"
            )));
        }
    }

    /// Takes send completions until the queue is empty, noting the last
    /// sequence the peer acknowledged.
    pub(super) fn reap_sends(&mut self) {
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        loop {
            let done = match self.send_cq.poll(&mut wcs) {
                Ok(d) => d,
                Err(e) => {
                    self.fail_os("ibv_poll_cq (sends)", e);
                    return;
                }
            };
            self.completions += done.len() as u64;
            if done.is_empty() {
                return;
            }
            let mut failed = None;
            for wc in done {
                // In-order completion: this request and all before it are
                // done, failed or flushed alike.
                self.sq.complete(wc.wr_id);
                if wc.status == IBV_WC_SUCCESS {
                    self.send_completions += 1;
                    self.acked = self
                        .acked
                        .max(self.seq_at[(wc.wr_id % self.sq_depth) as usize]);
                } else if failed.is_none() {
                    failed = Some(*wc);
                }
            }
            if let Some(wc) = failed {
                // A request that failed (not flushed) had every request
                // before it acknowledged; the entry of the one before is
                // still its own unless the queue was full.
                if wc.status != IBV_WC_WR_FLUSH_ERR
                    && wc.wr_id > 0
                    && self.sq.next_index() - wc.wr_id < self.sq_depth
                {
                    let before = self.seq_at[((wc.wr_id - 1) % self.sq_depth) as usize];
                    self.acked = self.acked.max(before);
                }
                self.wc_failed(&wc, "send");
            }
        }
    }

    /// Posts an RDMA write of `bytes` to the peer's control block at
    /// `offset`. Returns the request number.
    pub(super) fn write_ctrl(
        &mut self,
        offset: usize,
        bytes: &[u8],
        force_signal: bool,
    ) -> Option<u64> {
        self.post_write(offset as u64, bytes, offset, force_signal)
    }

    /// Posts an RDMA write of `bytes` to `remote` bytes into the peer's
    /// control block, from out-word `out` of the send pool when it does not
    /// go inline. Zero bytes are a write without a scatter/gather entry.
    fn post_write(
        &mut self,
        remote: u64,
        bytes: &[u8],
        out: usize,
        force_signal: bool,
    ) -> Option<u64> {
        let (addr, rkey) = (self.peer_ctrl + remote, self.peer_rkey);
        self.post_raw(addr, rkey, bytes, out, force_signal, None)
    }

    /// Posts an RDMA write (with immediate `imm` when given) of `bytes` to
    /// `addr` under `rkey`, from out-word `out` when not inline.
    fn post_raw(
        &mut self,
        addr: u64,
        rkey: u32,
        bytes: &[u8],
        out: usize,
        force_signal: bool,
        imm: Option<u32>,
    ) -> Option<u64> {
        if out + bytes.len() > CTRL_LEN {
            return None;
        }
        if !self.sq.has_room() {
            self.reap_sends();
            if !self.sq.has_room() {
                return None;
            }
        }
        let slot = self.sq.take(force_signal);
        let mut flags = if slot.signaled { IBV_SEND_SIGNALED } else { 0 };
        let src = if bytes.len() <= self.inline_max {
            flags |= IBV_SEND_INLINE;
            bytes.as_ptr()
        } else {
            // Not inline: the source must be registered. A later write of
            // the same word may overwrite it before the NIC reads it, which
            // only sends a newer count.
            // SAFETY: CTRL_LEN out-bytes follow the send slots; `out` + len
            // stays inside them (checked above).
            let dst = unsafe { self.ctrl_out.add(out) };
            // SAFETY: as above; `bytes` does not overlap the pool.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
            dst.cast_const()
        };
        let mut sge = qp::sge(src, bytes.len(), self.send_lkey);
        let opcode = match imm {
            Some(_) => IBV_WR_RDMA_WRITE_WITH_IMM,
            None => IBV_WR_RDMA_WRITE,
        };
        let mut wr = qp::send_request(slot.index, &mut sge, opcode, flags);
        wr.__bindgen_anon_1.imm_data = imm.unwrap_or(0).to_be();
        if bytes.is_empty() {
            // Some devices read a zero-length entry as 2 GiB: none at all.
            wr.sg_list = std::ptr::null_mut();
            wr.num_sge = 0;
        }
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
        self.seq_at[(slot.index % self.sq_depth) as usize] = self.next_seq - 1;
        // SAFETY: inline data is copied during the call; otherwise the
        // source is the registered out-word, left alone until overwritten
        // by a newer value of the same word.
        match unsafe { self.qp.post_send(&mut wr) } {
            Ok(()) => Some(slot.index),
            Err(e) => {
                self.sq.untake(slot);
                self.fail_os("ibv_post_send (control write)", e);
                None
            }
        }
    }

    /// Test hook: an RDMA write of `len` (at most 8) bytes to `offset`
    /// bytes into the peer's control block, which its registration may
    /// not cover (then it completes with a remote access error, reported
    /// by the next `check_peer`). `false` when it could not be posted.
    #[doc(hidden)]
    pub fn test_remote_write(&mut self, offset: u64, len: usize) -> bool {
        let bytes = [0xa5u8; 8];
        let len = len.min(bytes.len());
        // Out-word 32..40 is used by no control write.
        self.post_write(offset, &bytes[..len], 32, true).is_some()
    }

    /// Test hook (ring modes): an RDMA write of 8 bytes `offset` bytes
    /// into the peer's message ring with the ring's rkey, which its
    /// registration does not cover at or past the ring's end (then it
    /// completes with a remote access error, reported by the next
    /// `check_peer`). `false` when it could not be posted.
    #[doc(hidden)]
    pub fn test_ring_write(&mut self, offset: u64, len: usize) -> bool {
        let bytes = [0xa5u8; 8];
        let len = len.min(bytes.len());
        let (addr, rkey) = (self.peer_ring + offset, self.peer_ring_rkey);
        self.post_raw(addr, rkey, &bytes[..len], 32, true, None)
            .is_some()
    }

    /// Bytes of the peer's message ring (ring modes; 0 otherwise).
    #[doc(hidden)]
    pub fn test_ring_len(&self) -> u64 {
        self.peer_depth * self.peer_slot
    }

    /// Test hook (ring modes): writes a forged trailer (`seq`, `len`) into
    /// the peer's slot of the next message, without credit, as a hostile
    /// peer could; in write-imm with the next sequence as immediate. The
    /// trailer fills the out-words 32..64 when not sent inline.
    #[doc(hidden)]
    pub fn test_forge_slot(&mut self, seq: u64, len: u32) -> bool {
        let next = self.next_seq;
        let mut t = [0u8; TRAILER];
        // SAFETY: `t` holds exactly TRAILER bytes ending at its end.
        unsafe {
            put_trailer(
                t.as_mut_ptr().add(TRAILER),
                &Trailer {
                    len,
                    flags: 0,
                    credit: 0,
                    timestamp: 0,
                    seq,
                },
            )
        };
        let i = (next - 1) % self.peer_depth;
        let addr = self.peer_ring + (i + 1) * self.peer_slot - TRAILER as u64;
        let imm = (self.mode == SessionMode::WriteImm).then_some(next as u32);
        self.post_raw(addr, self.peer_ring_rkey, &t, 32, true, imm)
            .is_some()
    }

    /// Test hook: fills the payload of the last message committed with
    /// `byte`, as a caller reusing its buffer at once would. With the
    /// message sent inline the peer still gets the original bytes.
    #[doc(hidden)]
    pub fn test_scribble_last_send(&mut self, byte: u8) {
        let Some(index) = self.sq.next_index().checked_sub(1) else {
            return;
        };
        let p = self.send_slot(index);
        // SAFETY: the slot is inside the registered send pool and holds
        // HEADER_LEN + max_message bytes; the device only reads it, and a
        // torn read is exactly what the caller wants to detect.
        unsafe { std::ptr::write_bytes(p.add(HEADER_LEN), byte, self.max_message) };
    }

    /// Test hook: takes the send completions queued, nothing else (no
    /// events, no keep-alive), so a test can count them.
    #[doc(hidden)]
    pub fn test_reap_sends(&mut self) {
        self.reap_sends();
    }

    /// Test hook: moves the queue pair to the error state, as a fatal
    /// device error would: every outstanding request is flushed.
    #[doc(hidden)]
    pub fn test_force_qp_error(&mut self) -> Result<()> {
        let verbs = verbs_sys::Verbs::load().map_err(|e| {
            errors::other(
                "ibv_modify_qp",
                self.cold.device.as_str(),
                Some(self.qpn),
                e.to_string(),
            )
        })?;
        self.qp.force_error(verbs).map_err(|e| {
            errors::os(
                "ibv_modify_qp to ERR",
                (self.cold.device.as_str(), self.cold.port),
                Some(self.qpn),
                e,
            )
        })
    }

    /// Tells the peer the new receive-buffer count, if it changed.
    pub(super) fn announce(&mut self) {
        // Coalesced (Receipts::due): one-way traffic costs one credit
        // write per half ring instead of one per repost batch,
        // request/response traffic almost none (in write mode the count
        // also rides on every message). A shared receive queue's
        // reservations are announced after every batch.
        let Some(count) = self.receipts.due(self.shared.is_none()) else {
            return;
        };
        if self.disconnected || self.end.is_some() {
            return;
        }
        if self
            .write_ctrl(CTRL_CREDIT, &count.to_le_bytes(), false)
            .is_some()
        {
            self.receipts.announced(count);
        }
        // Otherwise the send queue is full: the next poll tries again.
    }

    /// Reposts the consumed receive buffers as one chain, then announces.
    pub(super) fn repost(&mut self) {
        let n = self.receipts.unposted();
        if n == 0 || self.disconnected || self.end.is_some() {
            return;
        }
        if self.shared.is_some() {
            self.repost_shared(n);
            return;
        }
        let posted = match (self.mode, self.imm.as_mut()) {
            (SessionMode::Send, _) => {
                // SAFETY: the unposted buffers were delivered and their
                // callbacks returned, so nothing refers to them.
                unsafe { self.ring.post(&mut self.qp, n) }
            }
            // Released ring slots need only their credit; write-imm also
            // needs a receive request per slot for the immediate.
            (_, Some(imm)) => imm.post(&mut self.qp, n),
            (_, None) => Ok(()),
        };
        if let Err(e) = posted {
            self.fail_os("ibv_post_recv", e);
            return;
        }
        self.receipts.reposted(n);
        self.announce();
    }
}

impl RcSession {
    /// Checks the message in receive buffer `buf` and hands it to `f`; the
    /// caller then counts the buffer consumed.
    #[inline]
    pub(super) fn deliver<F: FnMut(Message<'_>)>(&mut self, buf: &[u8], f: &mut F) -> Result<()> {
        let (h, payload) = match Header::decode(buf) {
            Ok(x) => x,
            Err(e) => {
                self.fail(End::Protocol(format!("message {}: {e}", self.expect_seq)));
                return Err(self.ended().expect("a failure was recorded"));
            }
        };
        if h.seq != self.expect_seq {
            self.fail(End::Protocol(format!(
                "message {} arrived where {} was expected",
                h.seq, self.expect_seq
            )));
            return Err(self.ended().expect("a failure was recorded"));
        }
        f(Message {
            seq: h.seq,
            flags: h.flags,
            timestamp: h.timestamp,
            payload,
        });
        self.expect_seq += 1;
        Ok(())
    }
}

impl SessionEnd for RcSession {
    #[inline]
    fn max_message(&self) -> usize {
        self.max_message
    }

    fn wait_for_data(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.sleep_for_data(timeout, false)
    }

    fn wait_idle(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.sleep_for_data(timeout, true)
    }

    #[inline]
    fn try_claim(&mut self, len: usize) -> Option<&mut [u8]> {
        // Checked in release builds too: the slice below must stay inside
        // the slot. Callers check against max_message first and report
        // MessageTooLarge; a direct caller gets no space.
        if len > self.max_message || self.end.is_some() || self.disconnected || self.closed {
            return None;
        }
        if self.credits.available() == 0 {
            self.refresh_credits();
            if self.credits.available() == 0 && self.mode == SessionMode::Write {
                self.peek_credits();
            }
            if self.credits.available() == 0 {
                return None;
            }
        }
        if !self.sq.has_room() {
            self.reap_sends();
            if !self.sq.has_room() {
                return None;
            }
        }
        let p = self.send_slot(self.sq.next_index());
        // Ring modes: right-aligned, as the write lands in the peer's slot.
        let at = if self.ring_in.is_some() {
            self.slot - wire_len(len)
        } else {
            HEADER_LEN
        };
        // SAFETY: the slot of the next request is free (the send queue has
        // room, so the request that used it last has completed); it holds
        // HEADER_LEN + max_message >= HEADER_LEN + len bytes, and in ring
        // modes ring_slot(max_message) >= wire_len(len); the slice borrows
        // `self`.
        Some(unsafe { std::slice::from_raw_parts_mut(p.add(at), len) })
    }

    #[inline]
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64> {
        // The send would read past the slot: never post it.
        Error::check_fits(len, self.max_message, &self.cold.channel)?;
        let slot = self.sq.take(false);
        let p = self.send_slot(slot.index);
        let seq = self.next_seq;
        self.seq_at[(slot.index % self.sq_depth) as usize] = seq;
        if self.ring_in.is_some() {
            return self.commit_write(slot, p, len, flags, timestamp);
        }
        // SAFETY: the slot is ours (see try_claim) and has room for the
        // header in front of the payload.
        let head = unsafe { std::slice::from_raw_parts_mut(p, HEADER_LEN) };
        Header {
            seq,
            len: len as u32,
            flags,
            timestamp,
        }
        .encode(head);
        let total = HEADER_LEN + len;
        let mut send_flags = if slot.signaled { IBV_SEND_SIGNALED } else { 0 };
        if total <= self.inline_max {
            send_flags |= IBV_SEND_INLINE;
        }
        let mut sge = qp::sge(p, total, self.send_lkey);
        let mut wr = qp::send_request(slot.index, &mut sge, IBV_WR_SEND, send_flags);
        // SAFETY: the slot is registered in the send pool and is not written
        // again until this request (or a later signaled one) completes: the
        // send queue accounting hands it out again only after that.
        if let Err(e) = unsafe { self.qp.post_send(&mut wr) } {
            self.sq.untake(slot);
            self.refresh_events();
            self.fail_os("ibv_post_send", e);
            return Err(self.ended().expect("a failure was recorded"));
        }
        self.credits.spend();
        self.next_seq += 1;
        Ok(seq)
    }

    #[inline]
    fn poll<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let n = match self.mode {
            SessionMode::Write => self.poll_ring(max, f)?,
            SessionMode::Send | SessionMode::WriteImm => self.poll_recv(max, f)?,
        };
        self.after_poll(n)
    }

    fn check_peer(&mut self) -> Result<()> {
        self.peer_state()
    }

    fn close(&mut self) {
        self.close_in_order()
    }
}

impl RcSession {
    /// Ring modes: one RDMA WRITE (with immediate in write-imm) of the
    /// payload and trailer into the peer's slot for this sequence.
    #[inline]
    fn commit_write(
        &mut self,
        slot: super::super::send_queue::Slot,
        p: *mut u8,
        len: usize,
        flags: u32,
        timestamp: u64,
    ) -> Result<u64> {
        let seq = self.next_seq;
        let total = wire_len(len);
        // SAFETY: the local slot is ours (see try_claim) and ends 8-byte
        // aligned (whole cache lines); the trailer follows the payload.
        // The credit count rides on every message; in write mode it is
        // the announcement (see `announce`).
        let credit = self.receipts.posted();
        // SAFETY: as above.
        unsafe {
            put_trailer(
                p.add(self.slot),
                &Trailer {
                    len: len as u32,
                    flags,
                    credit,
                    timestamp,
                    seq,
                },
            )
        };
        // SAFETY: total <= slot (try_claim's layout).
        let src = unsafe { p.add(self.slot - total) };
        let mut send_flags = if slot.signaled { IBV_SEND_SIGNALED } else { 0 };
        if total <= self.inline_max {
            send_flags |= IBV_SEND_INLINE;
        }
        let opcode = if self.mode == SessionMode::WriteImm {
            IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            IBV_WR_RDMA_WRITE
        };
        let mut sge = qp::sge(src, total, self.send_lkey);
        let mut wr = qp::send_request(slot.index, &mut sge, opcode, send_flags);
        // The peer's slot for this sequence, filled up to its end; total
        // fits the peer's slot because len <= the peer's max_payload.
        let i = (seq - 1) % self.peer_depth;
        wr.wr.rdma.remote_addr =
            self.peer_ring + i * self.peer_slot + self.peer_slot - total as u64;
        wr.wr.rdma.rkey = self.peer_ring_rkey;
        wr.__bindgen_anon_1.imm_data = (seq as u32).to_be();
        // SAFETY: as for a SEND: the source is registered and left alone
        // until the request completes.
        if let Err(e) = unsafe { self.qp.post_send(&mut wr) } {
            self.sq.untake(slot);
            self.refresh_events();
            self.fail_os("ibv_post_send (message write)", e);
            return Err(self.ended().expect("a failure was recorded"));
        }
        self.credits.spend();
        self.next_seq += 1;
        if self.mode == SessionMode::Write {
            self.receipts.announced(credit);
            // After the post, never before: a load that misses a new
            // sleep generation then proves the message was posted before
            // the generation landed (see `wait`). Only the compiler could
            // move the load ahead of the opaque post call; the CPU's store
            // buffer drains in far less than the receiver's round trip.
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            if self.peer_sleep_gen() != self.woke_gen {
                self.wake_peer(false);
            }
        }
        Ok(seq)
    }

    /// The sleep generation the peer last wrote into our control block.
    #[inline]
    fn peer_sleep_gen(&self) -> u64 {
        // SAFETY: as for ctrl_word32, 8-byte aligned.
        let w = unsafe { AtomicU64::from_ptr(self.ctrl_in.add(CTRL_SLEEP).cast()) };
        u64::from_le(w.load(Ordering::Relaxed))
    }

    /// Write mode: the peer announced a sleep since the last wake: a
    /// zero-length WRITE_WITH_IMM (immediate: the generation) behind the
    /// messages posted, whose completion wakes it (`signal`: ours too).
    /// Returns its request index; `None` when none was due, or when the
    /// send queue is full (the wake is then owed).
    #[cold]
    pub(super) fn wake_peer(&mut self, signal: bool) -> Option<u64> {
        let gen = self.peer_sleep_gen();
        if gen == self.woke_gen || self.end.is_some() || self.disconnected {
            self.wake_owed = false;
            return None;
        }
        // Zero bytes into the credit word, as a keep-alive: no memory
        // changes; the immediate consumes the receive the peer posted for
        // this generation.
        let posted = self.post_raw(
            self.peer_ctrl + CTRL_CREDIT as u64,
            self.peer_rkey,
            &[],
            CTRL_CREDIT,
            signal,
            Some(gen as u32),
        );
        self.wake_owed = posted.is_none();
        if posted.is_some() {
            self.woke_gen = gen;
            self.wake_imms_sent += 1;
        }
        posted
    }

    /// Write mode, out of credit: applies the counts riding on messages
    /// that have arrived but were not polled yet, so a sender that does
    /// not poll while it waits still sees the credit its peer sent.
    #[cold]
    fn peek_credits(&mut self) {
        let Some(ring) = self.ring_in.as_ref() else {
            return;
        };
        let mut best = None;
        for seq in self.expect_seq..self.expect_seq + self.ring_depth {
            match ring.peek_credit(seq) {
                Some(c) => best = Some(c),
                None => break,
            }
        }
        if let Some(total) = best {
            if let Err(bad) = self.credits.grant(total) {
                self.fail(End::Protocol(format!(
                    "it granted credit up to {bad}, more ring slots than it has"
                )));
            }
        }
    }

    /// Ends the session for a slot that does not hold the expected message.
    #[cold]
    fn bad_slot(&mut self, bad: Bad) -> Error {
        let seq = self.expect_seq;
        let reason = match bad {
            Bad::Empty => format!(
                "its write-with-immediate for message {seq} completed but the message's slot is empty"
            ),
            Bad::Seq(got) => format!(
                "its ring slot for message {seq} holds sequence {got}"
            ),
            Bad::Len(len) => format!(
                "its message {seq} claims {len} payload bytes, more than max_message {} or the ring slot holds",
                self.max_message
            ),
        };
        self.fail(End::Protocol(reason));
        self.ended().expect("a failure was recorded")
    }

    /// Delivers the message in the ring slot of `expect_seq`; `Ok(false)`
    /// when it has not arrived (write mode only).
    #[inline]
    fn take_slot<F: FnMut(Message<'_>)>(&mut self, f: &mut F, must: bool) -> Result<bool> {
        let seq = self.expect_seq;
        let ring = self.ring_in.as_ref().expect("ring mode");
        // SAFETY: the payload is dropped (the callback returns) before the
        // slot is released below.
        match unsafe { ring.read(seq, self.max_message) } {
            Ok(m) => {
                // Cumulative: an older count changes nothing.
                if let Err(bad) = self.credits.grant(m.credit) {
                    let reason =
                        format!("it granted credit up to {bad}, more ring slots than it has");
                    self.fail(End::Protocol(reason));
                    return Err(self.ended().expect("a failure was recorded"));
                }
                f(Message {
                    seq,
                    flags: m.flags,
                    timestamp: m.timestamp,
                    payload: m.payload,
                });
                ring.release(seq);
            }
            Err(Bad::Empty) if !must => return Ok(false),
            Err(bad) => return Err(self.bad_slot(bad)),
        }
        self.expect_seq += 1;
        if self.receipts.consumed() {
            self.repost();
        }
        Ok(true)
    }

    /// Write mode: polls the ring's memory.
    #[inline]
    fn poll_ring<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let mut n = 0;
        while n < max && self.end.is_none() {
            if !self.take_slot(f, false)? {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    /// Send and write-imm modes: receive completions, each one message.
    #[inline]
    fn poll_recv<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let mut n = 0;
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        while n < max {
            if self.shared.is_some() {
                let got = self.poll_shared(max - n, f)?;
                if got == 0 {
                    break;
                }
                n += got;
                continue;
            }
            let want = (max - n).min(WC_BATCH);
            let done = match self.recv_cq.poll(&mut wcs[..want]) {
                Ok(d) => d,
                Err(e) => {
                    self.fail_os("ibv_poll_cq (receives)", e);
                    return Err(self.ended().expect("a failure was recorded"));
                }
            };
            self.completions += done.len() as u64;
            if done.is_empty() {
                break;
            }
            for wc in done {
                if wc.status != IBV_WC_SUCCESS {
                    self.wc_failed(wc, "receive");
                    continue;
                }
                if self.ring_in.is_some() {
                    self.take_imm(wc, f)?;
                } else {
                    self.take_send(wc, f)?;
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Write-imm mode: the completion names the next slot (immediate =
    /// the sequence's low 32 bits); the message is in the ring.
    #[inline]
    fn take_imm<F: FnMut(Message<'_>)>(&mut self, wc: &ibv_wc, f: &mut F) -> Result<()> {
        // SAFETY: a successful receive completion of RDMA WRITE with
        // immediate carries the immediate in this union arm.
        let imm = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
        if wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || imm != self.expect_seq as u32 {
            let reason = format!(
                "a receive completion (opcode {}, immediate {imm}) arrived where the write of message {} was expected",
                wc.opcode, self.expect_seq
            );
            self.fail(End::Protocol(reason));
            return Err(self.ended().expect("a failure was recorded"));
        }
        self.take_slot(f, true)?;
        Ok(())
    }

    /// Send mode: the message is in the completed receive buffer.
    #[inline]
    fn take_send<F: FnMut(Message<'_>)>(&mut self, wc: &ibv_wc, f: &mut F) -> Result<()> {
        // SAFETY: a successful completion hands the buffer back; it is
        // reposted only after the callback returns.
        let buf = unsafe { self.ring.buffer(wc.wr_id, wc.byte_len) };
        self.deliver(buf, f)?;
        if self.receipts.consumed() {
            self.repost();
        }
        Ok(())
    }

    /// What every poll does after taking messages: credits, liveness.
    #[inline]
    fn after_poll(&mut self, n: usize) -> Result<usize> {
        if n > 0 {
            self.idle = 0;
            self.naps = 0;
            return Ok(n);
        }
        if self.receipts.to_announce().is_some() {
            // A credit write that found the send queue full.
            self.announce();
        }
        if self.disconnected || self.end.is_some() {
            if let Some(e) = self.ended() {
                return Err(e);
            }
        }
        self.idle += 1;
        // Every CHECK_EVERY empty polls, or, for a caller that polls
        // slowly (sleeping between polls without `wait_for_data`), once
        // CHECK_INTERVAL has passed: otherwise 4,096 slow polls could
        // hide a peer's close or death for minutes. The clock is read
        // once per CLOCK_EVERY empty polls, so a spinning poll pays
        // nearly nothing for it.
        if self.idle >= CHECK_EVERY
            || (self.idle % CLOCK_EVERY == 0
                && crate::clock::monotonic_ns().saturating_sub(self.last_check)
                    >= CHECK_INTERVAL_NS)
        {
            self.idle = 0;
            self.idle_check();
            if let Some(e) = self.ended() {
                return Err(e);
            }
        }
        Ok(0)
    }
}
