//! Huge pages: their size and whether a hugetlbfs mount can hold a file.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Size of a huge page (2 MiB on x86-64 and the default on aarch64).
pub const HUGE_PAGE: usize = 2 << 20;

/// `len` rounded up to whole huge pages.
pub fn round_up(len: usize) -> usize {
    len.div_ceil(HUGE_PAGE) * HUGE_PAGE
}

/// Whether `mount` is a hugetlbfs mount with at least `bytes` of free huge
/// pages; the error is a clause for a sentence ("/dev/hugepages is not
/// mounted"). Cost: one `statfs`.
pub fn hugetlbfs_usable(mount: &Path, bytes: usize) -> Result<(), String> {
    let c = std::ffi::CString::new(mount.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", mount.display()))?;
    // SAFETY: statfs is plain old data; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is writable.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!("{} is not mounted", mount.display()));
    }
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    if st.f_type as i64 != HUGETLBFS_MAGIC {
        return Err(format!("{} is not a hugetlbfs mount", mount.display()));
    }
    let free = (st.f_bfree as usize).saturating_mul(st.f_bsize as usize);
    if free < bytes {
        return Err(format!(
            "{} has {} bytes of free huge pages, {} needed (raise vm.nr_hugepages)",
            mount.display(),
            free,
            bytes
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_refusals() {
        assert_eq!(round_up(1), HUGE_PAGE);
        assert_eq!(round_up(HUGE_PAGE), HUGE_PAGE);
        assert_eq!(round_up(HUGE_PAGE + 1), 2 * HUGE_PAGE);
        let tmp = std::env::temp_dir();
        let e = hugetlbfs_usable(&tmp.join("mdbus-no-such-mount"), 1).unwrap_err();
        assert!(e.ends_with("is not mounted"), "{e}");
        let e = hugetlbfs_usable(Path::new("/proc"), 1).unwrap_err();
        assert_eq!(e, "/proc is not a hugetlbfs mount");
    }
}
