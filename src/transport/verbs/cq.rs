//! Completion queues, polled by their owning handle only (no completion
//! channel, no interrupts: the data path busy-polls).

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use verbs_sys::{ibv_context, ibv_cq, ibv_wc, Verbs};

use super::errors;
use crate::error::Result;

/// A completion queue; destroyed on drop (after the queue pair using it).
pub(crate) struct Cq {
    verbs: &'static Verbs,
    raw: NonNull<ibv_cq>,
    /// Destroyed on drop; false for a handle on a queue owned elsewhere.
    owned: bool,
}

impl Cq {
    /// Creates a queue with room for at least `cqe` completions.
    ///
    /// # Safety
    /// `ctx` must be a live context of `verbs` that outlives the queue.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        ctx: *mut ibv_context,
        cqe: usize,
        device: &str,
    ) -> Result<Cq> {
        let n = i32::try_from(cqe).unwrap_or(i32::MAX);
        // SAFETY: guaranteed by the caller; no channel, vector 0.
        let raw =
            unsafe { (verbs.ibv_create_cq)(ctx, n, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Cq {
                verbs,
                raw,
                owned: true,
            }),
            None => Err(errors::last(
                format!("ibv_create_cq of {cqe} entries"),
                device,
                None,
            )),
        }
    }

    /// A handle on `other`'s queue that does not destroy it: for a session
    /// whose receives complete on its acceptor's shared queue, which is
    /// polled through the acceptor only.
    ///
    /// # Safety
    /// `other` must outlive the handle.
    pub(crate) unsafe fn alias(other: &Cq) -> Cq {
        Cq {
            verbs: other.verbs,
            raw: other.raw,
            owned: false,
        }
    }

    /// The raw pointer, for queue pair creation.
    pub(crate) fn as_raw(&self) -> *mut ibv_cq {
        self.raw.as_ptr()
    }

    /// Moves up to `wc.len()` completions into `wc` and returns them;
    /// `Err(errno)` when the provider fails. `wc` may be uninitialised:
    /// the data path keeps it on the stack.
    #[inline]
    pub(crate) fn poll<'w>(
        &mut self,
        wc: &'w mut [MaybeUninit<ibv_wc>],
    ) -> std::result::Result<&'w [ibv_wc], i32> {
        let n = i32::try_from(wc.len()).unwrap_or(i32::MAX);
        // SAFETY: the queue is live; `&mut self` makes this the only poller;
        // `wc` has room for `n` entries (MaybeUninit<T> has T's layout).
        let got = unsafe { verbs_sys::ibv_poll_cq(self.raw.as_ptr(), n, wc.as_mut_ptr().cast()) };
        if got < 0 {
            return Err(if got == -1 { libc::EIO } else { -got });
        }
        // SAFETY: the provider initialised the first `got <= n` entries.
        Ok(unsafe { std::slice::from_raw_parts(wc.as_ptr().cast::<ibv_wc>(), got as usize) })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: created by ibv_create_cq, destroyed once, after the queue
        // pair that used it (owner's field order).
        let rc = unsafe { (self.verbs.ibv_destroy_cq)(self.raw.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_cq: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}
