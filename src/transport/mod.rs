//! The transports behind the API, and the contract each one implements.
//!
//! The public [`Publisher`](crate::Publisher), [`Subscriber`](crate::Subscriber)
//! and [`Session`](crate::Session) hold one of these implementations and
//! forward to it with a `match`, so the hot path has no virtual calls. Every
//! implementation passes the same conformance suite (`tests/conformance`).

pub mod datagram;
#[cfg(not(loom))]
pub mod datagram_stream;
pub mod shm;
#[cfg(not(loom))]
pub mod tcp;
#[cfg(not(loom))]
pub mod udp;
#[cfg(not(loom))]
pub mod verbs;

use crate::error::Result;
use crate::message::{Event, Message};

/// Bytes per buffer slot for messages of up to `max_message` bytes: wire
/// header plus payload, rounded up to whole cache lines. Shared by every
/// transport that keeps preallocated slots (shm rings, verbs pools).
pub fn slot_size(max_message: usize) -> usize {
    (crate::wire::HEADER_LEN + max_message).div_ceil(64) * 64
}

/// Empty polls between two liveness checks of the peer. Checking costs a
/// system call, so it happens only when idle, and then only every few
/// microseconds.
pub const CHECK_EVERY: u32 = 4096;

/// The sending end of a stream.
pub trait StreamSend: Send {
    /// Largest payload accepted.
    fn max_message(&self) -> usize;
    /// Sequence number the next commit will carry.
    fn next_seq(&self) -> u64;
    /// Space for a payload of up to `len` bytes (at most
    /// [`max_message`](StreamSend::max_message)), in the transport's
    /// preallocated send buffer.
    fn claim(&mut self, len: usize) -> Result<&mut [u8]>;
    /// Publishes the claimed payload's first `len` bytes; returns the
    /// sequence number.
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64>;
    /// Sends what commits left batched. Shared memory has nothing to do.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// The publisher's duties between messages: flush, answer retransmit
    /// requests, send heartbeats. Shared memory has nothing to do.
    fn service(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The receiving end of a stream.
pub trait StreamReceive: Send {
    /// Delivers up to `max` messages, and any events before them, to `f`.
    /// Returns the number of messages delivered.
    fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize>;
}

/// One end of a session.
pub trait SessionEnd: Send {
    /// Largest payload accepted.
    fn max_message(&self) -> usize;
    /// Space for a payload of up to `len` bytes when the peer has room for
    /// one more message, `None` when it has not (flow control).
    fn try_claim(&mut self, len: usize) -> Option<&mut [u8]>;
    /// Sends the claimed payload's first `len` bytes.
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64>;
    /// Delivers up to `max` received messages to `f`.
    fn poll<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize>;
    /// Fails when the peer has died or closed; called while waiting for room.
    fn check_peer(&mut self) -> Result<()>;
    /// Blocks until something may have arrived or `timeout` passes; true
    /// when woken by the transport's event source (adaptive waiting). The
    /// default has none: it naps for at most [`crate::wait::NAP`].
    fn wait_for_data(&mut self, timeout: std::time::Duration) -> Result<bool> {
        crate::wait::nap(timeout.min(crate::wait::NAP));
        Ok(false)
    }
    /// As [`wait_for_data`](Self::wait_for_data), for a loop that only
    /// waits for data (adaptive waiting's block): once
    /// [`stop_waits`](crate::wait::stop_waits) can end a block, a
    /// transport may sleep past `timeout` until its own next timer.
    fn wait_idle(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.wait_for_data(timeout)
    }
    /// Marks this end closed so the peer learns it.
    fn close(&mut self);
}
