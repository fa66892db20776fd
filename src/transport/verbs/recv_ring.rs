//! A ring of receive buffers in one registered pool, with the work requests
//! that post them built once at start-up: reposting links existing
//! requests into a chain and posts it, allocating nothing.
//!
//! A queue pair consumes its receive requests in the order they were
//! posted, so buffers come back in ring order and are reposted in the same
//! order, `n` at a time from the oldest.

use verbs_sys::{ibv_recv_wr, ibv_sge};

use super::mr::Region;
use super::qp::CmQp;

/// One receive request per buffer of `slot` bytes at the start of `mem`
/// (`wr_id` = buffer index), each with its scatter/gather entry; the
/// requests point into the entries, so both are kept together.
pub(crate) fn requests(
    mem: &Region,
    depth: u32,
    slot: usize,
) -> (Box<[ibv_recv_wr]>, Box<[ibv_sge]>) {
    assert!(depth as usize * slot <= mem.len(), "receive pool too small");
    let base = mem.ptr();
    let mut sges: Box<[ibv_sge]> = (0..depth as usize)
        .map(|i| ibv_sge {
            // SAFETY: slot i lies inside the pool (assert above).
            addr: unsafe { base.add(i * slot) } as u64,
            length: slot as u32,
            lkey: mem.lkey(),
        })
        .collect();
    let sp = sges.as_mut_ptr();
    let wrs: Box<[ibv_recv_wr]> = (0..depth as usize)
        .map(|i| ibv_recv_wr {
            wr_id: i as u64,
            next: std::ptr::null_mut(),
            // SAFETY: index i is inside the boxed slice.
            sg_list: unsafe { sp.add(i) },
            num_sge: 1,
        })
        .collect();
    (wrs, sges)
}

/// The receive ring of one queue pair.
pub(crate) struct RecvRing {
    wrs: Box<[ibv_recv_wr]>,
    // The requests point into this slice; it never moves (boxed) and lives
    // as long as they do.
    _sges: Box<[ibv_sge]>,
    base: *mut u8,
    slot: usize,
    depth: u32,
    /// Ring index of the oldest buffer not yet reposted.
    repost_at: u32,
}

impl RecvRing {
    /// `depth` buffers of `slot` bytes each, at the start of `mem`.
    pub(crate) fn new(mem: &Region, depth: u32, slot: usize) -> RecvRing {
        let (wrs, sges) = requests(mem, depth, slot);
        RecvRing {
            wrs,
            _sges: sges,
            base: mem.ptr(),
            slot,
            depth,
            repost_at: 0,
        }
    }

    /// A ring without buffers, for a queue pair that receives through a
    /// shared receive queue; posting to it fails.
    pub(crate) fn empty() -> RecvRing {
        RecvRing {
            wrs: Box::new([]),
            _sges: Box::new([]),
            base: std::ptr::null_mut(),
            slot: 0,
            depth: 0,
            repost_at: 0,
        }
    }

    /// The `len` bytes a completion for request `wr_id` left in its buffer
    /// (clamped to the buffer).
    ///
    /// # Safety
    /// `wr_id` must come from a successful completion of this ring's queue
    /// pair whose buffer has not been reposted since; the slice must be
    /// dropped before it is.
    #[inline]
    pub(crate) unsafe fn buffer<'a>(&self, wr_id: u64, len: u32) -> &'a [u8] {
        let i = (wr_id as usize) % (self.depth as usize).max(1);
        // SAFETY: slot i is inside the pool; the device wrote `len` bytes
        // and no longer touches it until it is reposted (caller).
        unsafe {
            std::slice::from_raw_parts(self.base.add(i * self.slot), (len as usize).min(self.slot))
        }
    }

    /// Posts the `n` oldest buffers as one chain. `Err(errno)` on failure,
    /// with nothing counted as posted.
    ///
    /// # Safety
    /// Those `n` buffers must be ones the queue pair has completed (or, at
    /// start-up, never posted) and nothing may refer to them any more.
    pub(crate) unsafe fn post(&mut self, qp: &mut CmQp, n: u32) -> std::result::Result<(), i32> {
        if n == 0 {
            return Ok(());
        }
        if n > self.depth {
            return Err(libc::EINVAL);
        }
        let depth = self.depth;
        let wrs = self.wrs.as_mut_ptr();
        let first = self.repost_at;
        for k in 0..n {
            let i = (first + k) % depth;
            let next = if k + 1 < n {
                // SAFETY: the index is inside the slice.
                unsafe { wrs.add(((i + 1) % depth) as usize) }
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: the index is inside the slice.
            unsafe { (*wrs.add(i as usize)).next = next };
        }
        // SAFETY: the chain names registered receive buffers that are free
        // (caller); the requests live in `self`, which outlives the call.
        unsafe { qp.post_recv(wrs.add(first as usize)) }?;
        self.repost_at = (first + n) % depth;
        Ok(())
    }
}
