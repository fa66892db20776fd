//! SIGINT and SIGTERM as a flag: the handler only stores `true`, and the
//! polling loop checks the flag between datagrams, then shuts down in
//! order (publishers closed, summary printed).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` is plain old data, zeroed is a valid empty
        // value; the handler is an `extern "C" fn(c_int)` that only stores
        // to an atomic, which is async-signal-safe.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// True once SIGINT or SIGTERM has arrived (after [`install`]).
#[inline]
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}
