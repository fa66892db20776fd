//! A shared receive queue (SRQ) and the ring of receive buffers posted to
//! it: one registered pool for every queue pair attached to the queue.
//!
//! Unlike a queue pair's own receive ring ([`RecvRing`](super::recv_ring)),
//! buffers come back out of order: each queue pair takes the next posted
//! buffer when a message arrives, and the session that received it hands
//! it back whenever its owner has read it. So buffers are reposted by
//! index, as a chain of the requests built once at start-up: reposting
//! allocates nothing.

use std::ptr::NonNull;

use verbs_sys::{ibv_recv_wr, ibv_sge, ibv_srq, ibv_srq_init_attr, Verbs};

use super::errors;
use super::mr::Region;
use super::pd::Pd;
use crate::error::Result;

/// A shared receive queue; destroyed on drop, after every queue pair
/// attached to it (the owner's order).
pub(crate) struct Srq {
    verbs: &'static Verbs,
    raw: NonNull<ibv_srq>,
}

impl Srq {
    /// Creates a queue in `pd` with room for `depth` posted buffers of one
    /// scatter/gather entry each.
    ///
    /// # Safety
    /// `pd` must outlive the queue.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        pd: &Pd,
        depth: u32,
        device: &str,
    ) -> Result<Srq> {
        let mut attr = ibv_srq_init_attr::default();
        attr.attr.max_wr = depth;
        attr.attr.max_sge = 1;
        // SAFETY: `pd` is live (caller); `attr` is valid for the call.
        let raw = unsafe { (verbs.ibv_create_srq)(pd.as_raw(), &mut attr) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Srq { verbs, raw }),
            None => Err(errors::last(
                format!("ibv_create_srq of {depth} entries"),
                device,
                None,
            )),
        }
    }

    /// The raw pointer, for queue pair creation.
    pub(crate) fn as_raw(&self) -> *mut ibv_srq {
        self.raw.as_ptr()
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq, destroyed once, after the queue
        // pairs attached to it (owner's field order).
        let rc = unsafe { (self.verbs.ibv_destroy_srq)(self.raw.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_srq: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}

/// The buffers of a shared receive queue, one request per buffer.
pub(crate) struct SrqRing {
    wrs: Box<[ibv_recv_wr]>,
    // The requests point into this slice; it never moves (boxed) and lives
    // as long as they do.
    _sges: Box<[ibv_sge]>,
    base: *mut u8,
    slot: usize,
    depth: u32,
}

impl SrqRing {
    /// `depth` buffers of `slot` bytes each, at the start of `mem`.
    pub(crate) fn new(mem: &Region, depth: u32, slot: usize) -> SrqRing {
        let (wrs, sges) = super::recv_ring::requests(mem, depth, slot);
        SrqRing {
            wrs,
            _sges: sges,
            base: mem.ptr(),
            slot,
            depth,
        }
    }

    /// Buffers in the ring.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether `wr_id` names a buffer of this ring.
    #[inline]
    pub(crate) fn owns(&self, wr_id: u64) -> bool {
        wr_id < u64::from(self.depth)
    }

    /// The `len` bytes a completion for buffer `index` left in it (clamped
    /// to the buffer).
    ///
    /// # Safety
    /// `index` must come from a successful completion on this ring's queue
    /// whose buffer has not been reposted since; the slice must be dropped
    /// before it is.
    #[inline]
    pub(crate) unsafe fn buffer<'a>(&self, index: u32, len: u32) -> &'a [u8] {
        let i = index as usize % self.depth as usize;
        // SAFETY: slot i is inside the pool; the device wrote `len` bytes
        // and no longer touches it until it is reposted (caller).
        unsafe {
            std::slice::from_raw_parts(self.base.add(i * self.slot), (len as usize).min(self.slot))
        }
    }

    /// Posts the buffers named in `indices` as one chain. `Err(errno)` on
    /// failure, with nothing posted. Indices out of range are skipped.
    ///
    /// # Safety
    /// Each buffer must be one the queue has completed (or, at start-up,
    /// never posted), named once, and nothing may refer to it any more.
    pub(crate) unsafe fn post(
        &mut self,
        srq: &mut Srq,
        indices: &[u32],
    ) -> std::result::Result<(), i32> {
        let wrs = self.wrs.as_mut_ptr();
        let mut head: *mut ibv_recv_wr = std::ptr::null_mut();
        // Linked back to front, so the chain is in the order given.
        for &i in indices.iter().rev() {
            if i >= self.depth {
                continue;
            }
            // SAFETY: the index is inside the slice.
            let wr = unsafe { wrs.add(i as usize) };
            // SAFETY: as above; no other reference to the request exists.
            unsafe { (*wr).next = head };
            head = wr;
        }
        if head.is_null() {
            return Ok(());
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: the queue is live and `&mut` makes this the only poster;
        // the chain names registered, free buffers (caller) whose requests
        // live in `self`, which outlives the call.
        let rc = unsafe { verbs_sys::ibv_post_srq_recv(srq.as_raw(), head, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            Err(if rc > 0 { rc } else { errors::errno() })
        }
    }

    /// Posts every buffer (at start-up).
    ///
    /// # Safety
    /// No buffer of the ring may have been posted before.
    pub(crate) unsafe fn post_all(&mut self, srq: &mut Srq) -> std::result::Result<(), i32> {
        // Chained in chunks so the index list stays on the stack.
        let mut chunk = [0u32; 256];
        let mut next = 0u32;
        while next < self.depth {
            let n = (self.depth - next).min(chunk.len() as u32);
            for (k, c) in chunk[..n as usize].iter_mut().enumerate() {
                *c = next + k as u32;
            }
            // SAFETY: never posted before (caller), each named once.
            unsafe { self.post(srq, &chunk[..n as usize]) }?;
            next += n;
        }
        Ok(())
    }
}
