//! Registered memory: one allocation per pool, made, touched and locked at
//! start-up and registered once as one memory region. The data path only
//! ever points work requests into these regions.

use std::ptr::NonNull;

use verbs_sys::{ibv_mr, Verbs};

use super::errors;
use super::pd::Pd;
use crate::error::Result;

/// Anonymous memory, page-aligned, touched and (best effort) locked.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize, what: &str, device: &str) -> Result<Mapping> {
        let page = 4096;
        let len = len.max(1).div_ceil(page) * page;
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errors::last(
                format!("mmap of {len} bytes for {what}"),
                device,
                None,
            ));
        }
        let ptr = NonNull::new(p.cast::<u8>()).expect("mmap never returns null on success");
        if len >= 2 << 20 {
            // Transparent huge pages where the kernel allows: fewer TLB
            // misses and fewer pages for the NIC to translate.
            // SAFETY: the range is the mapping just made.
            unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
        }
        // Touch every page so the hot path never takes a page fault.
        for off in (0..len).step_by(page) {
            // SAFETY: `off < len`, inside the writable mapping.
            unsafe { ptr.as_ptr().add(off).write_volatile(0) };
        }
        // SAFETY: the range is the mapping just made.
        if unsafe { libc::mlock(p, len) } != 0 {
            log::debug!(
                "mlock of {len} bytes for {what} failed ({}); the memory stays pinned by its registration anyway",
                errors::describe_errno(errors::errno())
            );
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no registration
        // refers to it any more (Region drops its MR first).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
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
        let mem = Mapping::new(len, what, device)?;
        // SAFETY: `pd` is live (caller); the mapping stays mapped until after
        // the region is deregistered (Drop); the device may write it when
        // `access` allows, and Rust only reaches it through raw pointers.
        let mr = unsafe { verbs.reg_mr(pd.as_raw(), mem.ptr.as_ptr().cast(), mem.len, access) };
        match NonNull::new(mr) {
            Some(mr) => Ok(Region { verbs, mr, mem }),
            None => Err(errors::last(
                format!("ibv_reg_mr of {} bytes for {what}", mem.len),
                device,
                None,
            )),
        }
    }

    /// Start of the memory.
    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.mem.ptr.as_ptr()
    }

    /// Bytes registered.
    pub(crate) fn len(&self) -> usize {
        self.mem.len
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
        if rc != 0 {
            log::warn!(
                "ibv_dereg_mr: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}
