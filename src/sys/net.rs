//! Batched datagram receive: one `recvmmsg` call for up to a batch of
//! datagrams, shared by the UDP transport and the raw-socket baseline of
//! the benchmarks (so both measure the same system call the same way).

use std::io;
use std::os::fd::RawFd;

/// Receives into `hdrs` without blocking (`recvmmsg` with `MSG_DONTWAIT`);
/// returns how many datagrams arrived: 0 when none were waiting or a
/// signal interrupted the call. One system call, no allocation.
///
/// # Safety
/// Every header in `hdrs` must point at iovecs, buffers and (when set) an
/// address buffer that are valid for writes for the duration of the call.
#[inline]
pub unsafe fn recv_batch(fd: RawFd, hdrs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: `hdrs` is a valid array of `hdrs.len()` headers; what they
    // point at is the caller's contract; MSG_DONTWAIT makes it non-blocking.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    Ok(r as usize)
}
