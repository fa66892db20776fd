//! Shared memory between processes on one host.
//!
//! A stream is one [`segment`] holding a [`broadcast`] ring; a session is one
//! segment holding two [`spsc`] rings, one each way. Peers find each other
//! by the segment's file name and watch each other's liveness through the
//! pids and start times the segment records, so a dead peer becomes an
//! event or an error instead of a hang.

pub mod broadcast;
pub mod doorbell;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(not(loom))]
pub mod lossless;
#[cfg(not(loom))]
pub mod segment;
pub mod spsc;

#[cfg(not(loom))]
mod endpoints;
#[cfg(not(loom))]
pub use endpoints::{ShmPublisher, ShmSession, ShmSubscriber};

// Defined beside the transport contract, where the verbs transport uses
// them too; re-exported for the shm modules that name them from here.
pub use super::{slot_size, CHECK_EVERY};
