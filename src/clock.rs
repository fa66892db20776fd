//! Timestamps carried in message headers.
//!
//! `CLOCK_REALTIME` in nanoseconds: on one host every process reads the same
//! clock, and across hosts it is the clock PTP disciplines, so one-way
//! latency stays meaningful on a synchronised network. Reading it goes
//! through the vDSO: no system call, no allocation.

/// Nanoseconds since the Unix epoch from `CLOCK_REALTIME`.
///
/// ```
/// let a = mdbus::clock::now_ns();
/// let b = mdbus::clock::now_ns();
/// assert!(b >= a || a - b < 1_000_000_000); // realtime may step, never by much here
/// ```
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Nanoseconds from `CLOCK_MONOTONIC`, for intervals measured in one process.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}
