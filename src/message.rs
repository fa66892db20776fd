//! What a subscriber or session peer receives.

use crate::wire::FLAG_TIMESTAMP;

/// A received message: a borrowed view valid for the duration of the
/// callback it is passed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub(crate) seq: u64,
    pub(crate) flags: u32,
    pub(crate) timestamp: u64,
    pub(crate) payload: &'a [u8],
}

impl<'a> Message<'a> {
    /// Sequence number in its stream or session (the first message is 1).
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The bytes the sender wrote.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Send time in ns since the Unix epoch, when the sender stamped it.
    #[inline]
    pub fn timestamp(&self) -> Option<u64> {
        (self.flags & FLAG_TIMESTAMP != 0).then_some(self.timestamp)
    }
}

/// What a stream subscriber's `poll` reports, in stream order.
///
/// Loss is never silent: every sequence number a subscriber does not
/// receive as a [`Event::Message`] is covered by exactly one
/// [`Event::Overrun`] or [`Event::Gap`] range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The next message.
    Message(Message<'a>),
    /// This subscriber fell more than the publisher's capacity behind:
    /// messages `from..to` (end exclusive) are lost to it.
    Overrun {
        /// First lost sequence.
        from: u64,
        /// Sequence delivery resumes at.
        to: u64,
    },
    /// Messages `from..to` were lost on the network and could not be
    /// recovered.
    Gap {
        /// First lost sequence.
        from: u64,
        /// Sequence delivery resumes at.
        to: u64,
    },
    /// The publisher closed the stream; `last_seq` was its last message.
    EndOfStream {
        /// Last sequence published.
        last_seq: u64,
    },
    /// The publisher stopped without closing (its process died, or it fell
    /// silent for longer than the heartbeat timeout).
    PublisherDown {
        /// Last sequence received.
        last_seq: u64,
    },
    /// A new incarnation of the publisher started; sequence numbers start
    /// again from 1. Delivery resumes at its oldest retained message; when
    /// that is past 1, an [`Event::Overrun`] for the messages it no longer
    /// retains follows at once, so every sequence of the new incarnation is
    /// still covered exactly once.
    PublisherRestarted {
        /// The new incarnation's epoch.
        epoch: u64,
    },
    /// Upstream loss, not loss on this stream: the publisher (a feed
    /// relay) tells its subscribers that messages `from..to` (end
    /// exclusive) of *its own source feed*, numbered in that feed's
    /// sequence space, never reached it and cannot be filled. The notice
    /// travels in-band as one stream message (it takes one stream sequence
    /// number and is recovered like any message), so it arrives exactly
    /// once, in order, between the messages published before and after
    /// it. Unlike [`Event::Gap`] and [`Event::Overrun`], nothing of this
    /// stream was lost.
    SourceGap {
        /// First feed sequence the publisher never received.
        from: u64,
        /// Feed sequence the publisher's input resumed at.
        to: u64,
    },
}
