//! Shared memory between processes on one host.
//!
//! A stream is one [`segment`] holding a [`broadcast`] ring; a session is one
//! segment holding two [`spsc`] rings, one each way. Peers find each other
//! by the segment's file name and watch each other's liveness through the
//! pids and start times the segment records, so a dead peer becomes an
//! event or an error instead of a hang.

pub mod broadcast;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(not(loom))]
pub mod segment;
pub mod spsc;

#[cfg(not(loom))]
mod endpoints;
#[cfg(not(loom))]
pub use endpoints::{ShmPublisher, ShmSession, ShmSubscriber};

/// Bytes per slot for messages of up to `max_message` bytes: header plus
/// payload, rounded up to whole cache lines.
pub fn slot_size(max_message: usize) -> usize {
    (crate::wire::HEADER_LEN + max_message).div_ceil(64) * 64
}

/// Empty polls between two liveness checks of the peer. Checking costs a
/// system call, so it happens only when idle, and then only every few
/// microseconds.
pub const CHECK_EVERY: u32 = 4096;
