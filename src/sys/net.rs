//! Datagram receive: one `recvmmsg` call for up to a batch of datagrams,
//! shared by the UDP transport and the raw-socket baseline of the
//! benchmarks (so both measure the same system call the same way), and one
//! `recvfrom` for a single datagram, which costs less when the socket
//! holds at most one.

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

/// Receives one datagram into `buf` without blocking (`recvfrom` with
/// `MSG_DONTWAIT`), writing its source to `from`; returns its length (at
/// most `buf.len()`, the rest cut off), or `None` when none was waiting or
/// a signal interrupted the call. The cheapest read of a socket that is
/// usually empty: no message header or iovec array for the kernel to copy
/// in, and no second, empty attempt after the datagram (which `recvmmsg`
/// makes for every batch it does not fill).
#[inline]
pub fn recv_one(
    fd: RawFd,
    buf: &mut [u8],
    from: &mut libc::sockaddr_in,
) -> io::Result<Option<usize>> {
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `buf` and `from` are valid for writes of the lengths given
    // for the duration of the call; MSG_DONTWAIT makes it non-blocking.
    let r = unsafe {
        libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            (from as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(r as usize))
}
