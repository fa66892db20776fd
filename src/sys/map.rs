//! Memory mappings owned by a value and unmapped when it drops.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// Size of a normal page, from `sysconf` (4096 when it cannot say).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Whether a mapping may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `PROT_READ`.
    ReadOnly,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
}

/// One mapping: `len` bytes at `base`, unmapped once on drop.
///
/// It hands out only raw pointers and atomics: what the bytes mean, and who
/// else writes them, is the owner's business. `Send` (it is only an address
/// range) but not `Sync`, so an owner that shares it across threads says
/// why that is sound.
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and is only an address range;
// moving it to another thread moves the ownership of the range with it.
unsafe impl Send for Mapping {}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

impl Mapping {
    /// Maps the first `len` bytes of `fd` shared (`MAP_SHARED`);
    /// `populate` prefaults the page tables (`MAP_POPULATE`): give it only
    /// for a length that was validated, never one read from a file.
    pub fn shared(
        fd: BorrowedFd<'_>,
        len: usize,
        access: Access,
        populate: bool,
    ) -> io::Result<Mapping> {
        let prot = match access {
            Access::ReadOnly => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        Self::map(len, prot, flags, fd.as_raw_fd())
    }

    /// Anonymous private memory, zeroed, `len` rounded up to whole pages.
    pub fn anonymous(len: usize, populate: bool) -> io::Result<Mapping> {
        let page = page_size();
        let len = len.max(1).div_ceil(page) * page;
        let flags =
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if populate { libc::MAP_POPULATE } else { 0 };
        Self::map(len, libc::PROT_READ | libc::PROT_WRITE, flags, -1)
    }

    fn map(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: libc::c_int,
    ) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map zero bytes",
            ));
        }
        // SAFETY: a fresh mapping with no address hint; the kernel picks the
        // address, so no existing memory is replaced. `fd` is open (borrowed
        // from the caller) or -1 for anonymous memory.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { base, len })
    }

    /// Start of the mapping.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Bytes mapped.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes a zero into the first byte of every page, so the first use on
    /// a hot path never takes a page fault.
    ///
    /// # Safety
    /// The mapping is writable and its bytes are still all zero and unseen
    /// by anyone else (a fresh file or anonymous memory).
    pub unsafe fn touch_pages(&self) {
        for off in (0..self.len).step_by(page_size()) {
            // SAFETY: `off < len`, inside the writable mapping (caller);
            // writing zero over zero changes nothing anyone can observe.
            unsafe { self.base.as_ptr().add(off).write_volatile(0) };
        }
    }

    /// Locks the pages in memory (`mlock`); callers treat failure as a
    /// warning (RLIMIT_MEMLOCK is often small).
    pub fn lock(&self) -> io::Result<()> {
        // SAFETY: the range is exactly our mapping.
        if unsafe { libc::mlock(self.base.as_ptr().cast(), self.len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Asks for transparent huge pages (`MADV_HUGEPAGE`) when the mapping is
    /// at least one huge page long; advice only, failures are ignored.
    pub fn advise_huge(&self) {
        if self.len >= super::hugepages::HUGE_PAGE {
            // SAFETY: the range is exactly our mapping; advice does not
            // change its contents.
            unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_HUGEPAGE) };
        }
    }

    /// The 8-byte word at `offset` as an atomic.
    ///
    /// Panics when `offset` is not 8-aligned or the word is not inside the
    /// mapping (checked in release builds too).
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len),
            "word at {offset} outside a {}-byte mapping",
            self.len
        );
        // SAFETY: `offset` is 8-aligned and the mapping page-aligned, so the
        // word is aligned; it lies inside the mapping (checked above), which
        // outlives the borrow. AtomicU64 has the size and alignment of u64,
        // and the owners of the mapping touch such words only atomically.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU64) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe our own mapping, unmapped once here;
        // borrows of it cannot outlive `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn anonymous_memory_is_page_rounded_zeroed_and_word_checked() {
        let m = Mapping::anonymous(10, true).unwrap();
        assert_eq!(m.len(), page_size());
        // SAFETY: fresh anonymous memory nobody else sees.
        unsafe { m.touch_pages() };
        m.atomic_u64(8).store(7, Ordering::Relaxed);
        assert_eq!(m.atomic_u64(8).load(Ordering::Relaxed), 7);
        assert!(
            std::panic::catch_unwind(|| m.atomic_u64(page_size() - 4).load(Ordering::Relaxed))
                .is_err()
        );
        assert!(std::panic::catch_unwind(|| m.atomic_u64(3).load(Ordering::Relaxed)).is_err());
        assert!(Mapping::shared(
            // SAFETY: fd 0 is borrowed only for the failing call.
            unsafe { BorrowedFd::borrow_raw(0) },
            0,
            Access::ReadOnly,
            false
        )
        .is_err());
    }
}
