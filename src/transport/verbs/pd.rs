//! Protection domain: every handle allocates its own, so memory registered
//! by one handle is never reachable through another's queue pairs.

use std::ptr::NonNull;

use verbs_sys::{ibv_context, ibv_pd, Verbs};

use super::errors;
use crate::error::Result;

/// A protection domain; deallocated on drop, which fails (and is logged)
/// while memory regions, queue pairs or address handles still use it: the
/// owner drops those first.
pub(crate) struct Pd {
    verbs: &'static Verbs,
    raw: NonNull<ibv_pd>,
}

impl Pd {
    /// Allocates a protection domain on `ctx`.
    ///
    /// # Safety
    /// `ctx` must be a live context of `verbs` that outlives the domain.
    pub(crate) unsafe fn alloc(
        verbs: &'static Verbs,
        ctx: *mut ibv_context,
        device: &str,
    ) -> Result<Pd> {
        // SAFETY: guaranteed by the caller.
        let raw = unsafe { (verbs.ibv_alloc_pd)(ctx) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Pd { verbs, raw }),
            None => Err(errors::last("ibv_alloc_pd", device, None)),
        }
    }

    /// The raw pointer, for the calls that create objects in the domain.
    pub(crate) fn as_raw(&self) -> *mut ibv_pd {
        self.raw.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd and deallocated once; the owner
        // has dropped everything created in it (field order).
        let rc = unsafe { (self.verbs.ibv_dealloc_pd)(self.raw.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_dealloc_pd: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}
