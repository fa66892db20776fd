//! What UDP multicast and RDMA UD multicast have in common: a path that
//! carries whole datagrams to a group and back to one peer. Streams over
//! either are the same driver (the recovery core in [`crate::recovery`])
//! over one or two links (lines A and B).

use crate::error::{Error, Result};

/// One multicast line: sends datagrams to its group or to one peer, and
/// receives datagrams from either, each with the peer that sent it.
pub trait DatagramLink: Send {
    /// Where a datagram came from, good for a reply: a socket address for
    /// UDP, an address handle and queue pair number for UD.
    type Peer: Copy + Send + std::fmt::Debug + Eq + std::hash::Hash;

    /// A number that identifies `peer` as a source, for the recovery
    /// core's binding: the default hashes it; links whose addresses fit in
    /// 64 bits use them as they are.
    fn source_key(peer: &Self::Peer) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        peer.hash(&mut h);
        h.finish()
    }

    /// The publisher's address this line was configured to accept
    /// datagrams from, if any (subscribers).
    fn configured_source(&self) -> Option<Self::Peer> {
        None
    }

    /// Largest datagram this link carries, in bytes (path MTU less the
    /// transport's own headers).
    fn max_datagram(&self) -> usize;

    /// Sends `bytes` to the group, at once or queued until
    /// [`flush`](Self::flush). A datagram that cannot be sent right now
    /// (full send queue) is counted and dropped by the link, never waited
    /// for: a stream does not stall its publisher.
    fn send_group(&mut self, bytes: &[u8]) -> Result<()>;

    /// Whether the link sends [`send_group_retained`](Self::send_group_retained)'s
    /// datagrams from the caller's bytes (a gathering send), keeping
    /// pointers to them until [`flush`](Self::flush), instead of copying.
    const GATHERS: bool = false;

    /// Sends `head` followed by `body` to the group as one datagram, at
    /// once or queued until [`flush`](Self::flush), as
    /// [`send_group`](Self::send_group); a link with
    /// [`GATHERS`](Self::GATHERS) sends `body` from where it lies. Links
    /// without it answer with an error.
    ///
    /// # Safety
    ///
    /// `body` must stay valid and unchanged until the next `flush` returns
    /// or the link is dropped, whichever comes first: a gathering link
    /// reads it then.
    unsafe fn send_group_retained(&mut self, head: &[u8], body: &[u8]) -> Result<()> {
        let _ = (head, body);
        Err(Error::Protocol {
            channel: "a datagram link".into(),
            peer: "this publisher".into(),
            reason: "the link cannot send a datagram in two pieces (it does not gather)".into(),
        })
    }

    /// Sends what `send_group` queued, for links that batch datagrams into
    /// one system call. A stream calls it when it flushes; a link that sends
    /// at once has nothing to do.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// Sends `bytes` to one peer (retransmit requests and replies).
    fn send_to(&mut self, peer: Self::Peer, bytes: &[u8]) -> Result<()>;

    /// Delivers up to `max` received datagrams to `f`, each borrowed from
    /// the link's receive buffers for the duration of the call. Returns how
    /// many.
    fn poll<F: FnMut(Self::Peer, &[u8])>(&mut self, max: usize, f: &mut F) -> Result<usize>;

    /// The descriptors to wait on for input (adaptive waiting), written to
    /// `out`; returns how many. None: the link has no event source.
    fn wait_fds(&self, out: &mut [std::os::fd::RawFd; 2]) -> usize {
        let _ = out;
        0
    }

    /// Prepares the event source before the subscriber sleeps on
    /// [`wait_fds`](Self::wait_fds). True when the caller must poll once
    /// more before blocking: a verbs completion queue raises an event only
    /// for completions after it was armed. Sockets need nothing.
    fn arm_wait(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// Takes what woke the sleeping subscriber off the event source (a
    /// verbs completion event, acknowledged), so that the descriptor is
    /// quiet again, and makes sure the next [`poll`](Self::poll) reads
    /// every source that may have woken it (a UDP subscriber reads its
    /// unicast socket only now and then otherwise).
    fn after_wake(&mut self) -> Result<()> {
        Ok(())
    }

    /// Datagrams dropped by the link itself (send queue full, receive
    /// buffers exhausted), for the counters.
    fn dropped(&self) -> u64;
}
