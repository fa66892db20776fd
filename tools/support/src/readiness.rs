//! Waiting a bounded time for a file or FIFO to have something to read, so
//! a reader can check between waits whether it was told to stop.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Waits at most `timeout` (`poll(2)`, `POLLIN`) for `fd` to be readable
/// (or at its end, or in error: a read then tells which). `Ok(false)` when
/// the time passed or a signal arrived first: the caller checks its stop
/// condition and waits again.
pub fn readable_within(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(libc::c_int::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is one valid, initialised pollfd whose descriptor is
    // open for the call (borrowed), and the count passed is 1.
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0 && pfd.revents != 0)
}
