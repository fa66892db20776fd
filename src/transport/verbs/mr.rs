//! Registered memory: one allocation per pool, made, touched and locked at
//! start-up and registered once as one memory region. The data path only
//! ever points work requests into these regions.

use std::ptr::NonNull;

use verbs_sys::{ibv_mr, Verbs};

use crate::sys::map::Mapping;

use super::errors;
use super::pd::Pd;
use crate::error::Result;

/// Anonymous memory, page-aligned, touched and (best effort) locked.
fn pool_memory(len: usize, what: &str, device: &str) -> Result<Mapping> {
    // Not prefaulted: the pages are placed on the device's NUMA node by
    // policy, then touched below.
    let mem = Mapping::anonymous(len, false).map_err(|e| {
        errors::os(
            format!("mmap of {len} bytes for {what}"),
            device,
            None,
            e.raw_os_error().unwrap_or(libc::ENOMEM),
        )
    })?;
    // Transparent huge pages where the kernel allows: fewer TLB misses and
    // fewer pages for the NIC to translate.
    mem.advise_huge();
    crate::sys::numa::place(
        &mem,
        &crate::sys::affinity::Sysfs::system(),
        crate::sys::affinity::Device::Rdma(device),
    );
    // SAFETY: fresh anonymous memory, all zero and seen by nobody yet.
    unsafe { mem.touch_pages() };
    if let Err(e) = mem.lock() {
        log::debug!(
            "mlock of {} bytes for {what} failed ({e}); the memory stays pinned by its registration anyway",
            mem.len()
        );
    }
    Ok(mem)
}

/// A preallocated pool registered as one memory region.
pub(crate) struct Region {
    verbs: &'static Verbs,
    mr: NonNull<ibv_mr>,
    // Dropped after the registration (Drop below deregisters first).
    mem: Mapping,
}

impl Region {
    /// Allocates `len` bytes (rounded up to pages), touches and locks them
    /// and registers them with `access` (`IBV_ACCESS_*` bits; give the
    /// least the pool needs: none for memory the NIC only reads,
    /// `LOCAL_WRITE` for receive buffers, `REMOTE_WRITE` only for words a
    /// peer writes).
    ///
    /// # Safety
    /// `pd` must outlive the region.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        pd: &Pd,
        len: usize,
        access: u32,
        what: &str,
        device: &str,
    ) -> Result<Region> {
        let mem = pool_memory(len, what, device)?;
        let reg = mem.len();
        // SAFETY: the caller's contract.
        unsafe { Self::register(verbs, pd, mem, reg, access, what, device) }
    }

    /// Like [`new`](Self::new), but registers exactly the first `len`
    /// bytes, not the whole page: for words a peer may write, so its
    /// rkey reaches nothing else (a write outside them completes with a
    /// remote access error).
    ///
    /// # Safety
    /// `pd` must outlive the region.
    pub(crate) unsafe fn new_exact(
        verbs: &'static Verbs,
        pd: &Pd,
        len: usize,
        access: u32,
        what: &str,
        device: &str,
    ) -> Result<Region> {
        let mem = pool_memory(len, what, device)?;
        // SAFETY: the caller's contract; len <= mem.len().
        unsafe { Self::register(verbs, pd, mem, len, access, what, device) }
    }

    /// Registers the first `reg` bytes of `mem`.
    ///
    /// # Safety
    /// `pd` must outlive the region; `reg <= mem.len()`.
    unsafe fn register(
        verbs: &'static Verbs,
        pd: &Pd,
        mem: Mapping,
        reg: usize,
        access: u32,
        what: &str,
        device: &str,
    ) -> Result<Region> {
        let reg = reg.min(mem.len());
        // SAFETY: `pd` is live (caller); the mapping stays mapped until after
        // the region is deregistered (Drop); the device may write it when
        // `access` allows, and Rust only reaches it through raw pointers.
        let mr = unsafe { verbs.reg_mr(pd.as_raw(), mem.as_ptr().cast(), reg, access) };
        match NonNull::new(mr) {
            Some(mr) => {
                crate::counters::registry::note_memory_region(true);
                Ok(Region { verbs, mr, mem })
            }
            None => Err(errors::last(
                format!("ibv_reg_mr of {reg} bytes for {what}"),
                device,
                None,
            )),
        }
    }

    /// Start of the memory.
    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    /// Bytes registered.
    pub(crate) fn len(&self) -> usize {
        // SAFETY: the region is live while `self` is.
        unsafe { (*self.mr.as_ptr()).length }
    }

    /// Local key, for scatter/gather entries.
    #[inline]
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: the region is live while `self` is.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// Remote key, for a peer's RDMA writes.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: the region is live while `self` is.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr, deregistered once, before the
        // mapping is unmapped (field drop follows this body); the owner has
        // destroyed the queue pair that pointed work requests here.
        let rc = unsafe { (self.verbs.ibv_dereg_mr)(self.mr.as_ptr()) };
        crate::counters::registry::note_memory_region(false);
        if rc != 0 {
            log::warn!(
                "ibv_dereg_mr: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}
