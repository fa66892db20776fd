//! Counters of the recovery cores: plain numbers, copied out on request,
//! so reading them costs nothing on the hot path.

use super::frame::DropReason;

/// Datagrams (or, for [`reassembly_full`](Drops::reassembly_full),
/// fragments) dropped, by reason. The fields mirror [`DropReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// [`DropReason::Truncated`].
    pub truncated: u64,
    /// [`DropReason::BadMagic`].
    pub bad_magic: u64,
    /// [`DropReason::BadVersion`].
    pub bad_version: u64,
    /// [`DropReason::BadKind`].
    pub bad_kind: u64,
    /// [`DropReason::Oversize`].
    pub oversize: u64,
    /// [`DropReason::BadLength`].
    pub bad_length: u64,
    /// [`DropReason::BadCount`].
    pub bad_count: u64,
    /// [`DropReason::BadSequence`].
    pub bad_sequence: u64,
    /// [`DropReason::BadFlags`].
    pub bad_flags: u64,
    /// [`DropReason::BadFragment`].
    pub bad_fragment: u64,
    /// [`DropReason::TooLarge`].
    pub too_large: u64,
    /// [`DropReason::OtherStream`].
    pub other_stream: u64,
    /// [`DropReason::OldEpoch`].
    pub old_epoch: u64,
    /// [`DropReason::UnexpectedKind`].
    pub unexpected_kind: u64,
    /// [`DropReason::Unsolicited`].
    pub unsolicited: u64,
    /// [`DropReason::ReassemblyFull`].
    pub reassembly_full: u64,
    /// [`DropReason::ForeignSource`].
    pub foreign_source: u64,
    /// [`DropReason::ImplausibleEpoch`].
    pub implausible_epoch: u64,
    /// [`DropReason::ImplausibleJump`].
    pub implausible_jump: u64,
    /// [`DropReason::UnconfirmedClaim`].
    pub unconfirmed_claim: u64,
    /// [`DropReason::UnconfirmedNotAvailable`].
    pub unconfirmed_not_available: u64,
    /// [`DropReason::BadMac`].
    pub bad_mac: u64,
    /// [`DropReason::Unauthenticated`].
    pub unauthenticated: u64,
    /// [`DropReason::OverBudget`].
    pub over_budget: u64,
}

impl Drops {
    /// Counts one drop.
    #[inline]
    pub fn record(&mut self, reason: DropReason) {
        *self.field(reason) += 1;
    }

    /// Drops counted for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        let mut copy = *self;
        *copy.field(reason)
    }

    /// Drops of every reason.
    pub fn total(&self) -> u64 {
        DropReason::ALL.iter().map(|r| self.get(*r)).sum()
    }

    fn field(&mut self, reason: DropReason) -> &mut u64 {
        match reason {
            DropReason::Truncated => &mut self.truncated,
            DropReason::BadMagic => &mut self.bad_magic,
            DropReason::BadVersion => &mut self.bad_version,
            DropReason::BadKind => &mut self.bad_kind,
            DropReason::Oversize => &mut self.oversize,
            DropReason::BadLength => &mut self.bad_length,
            DropReason::BadCount => &mut self.bad_count,
            DropReason::BadSequence => &mut self.bad_sequence,
            DropReason::BadFlags => &mut self.bad_flags,
            DropReason::BadFragment => &mut self.bad_fragment,
            DropReason::TooLarge => &mut self.too_large,
            DropReason::OtherStream => &mut self.other_stream,
            DropReason::OldEpoch => &mut self.old_epoch,
            DropReason::UnexpectedKind => &mut self.unexpected_kind,
            DropReason::Unsolicited => &mut self.unsolicited,
            DropReason::ReassemblyFull => &mut self.reassembly_full,
            DropReason::ForeignSource => &mut self.foreign_source,
            DropReason::ImplausibleEpoch => &mut self.implausible_epoch,
            DropReason::ImplausibleJump => &mut self.implausible_jump,
            DropReason::UnconfirmedClaim => &mut self.unconfirmed_claim,
            DropReason::UnconfirmedNotAvailable => &mut self.unconfirmed_not_available,
            DropReason::BadMac => &mut self.bad_mac,
            DropReason::Unauthenticated => &mut self.unauthenticated,
            DropReason::OverBudget => &mut self.over_budget,
        }
    }
}

/// What a publisher or subscriber core has done. Each side fills the fields
/// marked for it and leaves the others at 0.
///
/// "Message units" below are whole messages, or single fragments of a
/// fragmented message: a duplicate fragment is one duplicate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Both: datagrams handed to `on_datagram`, valid or not.
    pub datagrams_received: u64,
    /// Both: datagrams emitted (data, heartbeats, replies, requests).
    pub datagrams_sent: u64,

    /// Publisher: messages published.
    pub messages_published: u64,
    /// Publisher: heartbeats (and repeated end-of-stream markers) sent.
    pub heartbeats_sent: u64,
    /// Publisher: valid retransmit requests received.
    pub requests_received: u64,
    /// Publisher: requests answered with at least one message.
    pub requests_served: u64,
    /// Publisher: messages sent again.
    pub retransmitted: u64,
    /// Publisher: not-available replies sent.
    pub not_available_sent: u64,
    /// Publisher: requested messages not sent because of the retransmit
    /// rate limit (the subscriber asks again after its timeout).
    pub retransmit_throttled: u64,
    /// Publisher: requests answered to the stream's group (a repair every
    /// subscriber sees) rather than to the requester alone.
    pub repairs_to_group: u64,
    /// Publisher: requested messages not sent again because they went to
    /// the group moments before (within the repair linger).
    pub requests_lingered: u64,
    /// Publisher: times a requester went over its share of the stream
    /// (`lossy_share_percent`) and was told so; once per requester per
    /// window. Its further requests in the window are dropped as
    /// [`DropReason::OverBudget`], the messages cut from a request count
    /// in `retransmit_throttled`.
    pub requesters_throttled: u64,

    /// Subscriber: messages delivered to the application.
    pub messages_delivered: u64,
    /// Subscriber: message units dropped because a copy had already arrived
    /// (the other line's copy, a network duplicate, a repeated
    /// retransmission).
    pub duplicates: u64,
    /// Subscriber: message units dropped because their sequence is older
    /// than the reorder window behind the delivery point (replays).
    pub stale: u64,
    /// Subscriber: times a missing range was noticed: a sequence jumped
    /// ahead (reordering counts too, until the late message fills it), or
    /// a heartbeat announced messages not seen.
    pub gaps_detected: u64,
    /// Subscriber: messages that were missing and arrived by
    /// retransmission.
    pub recovered: u64,
    /// Subscriber: of those, messages a repair brought before this
    /// subscriber had asked for them (another subscriber's request; the
    /// randomized NAK delay let it stay silent).
    pub suppressed: u64,
    /// Subscriber: messages reported lost in [`Event::Gap`](crate::Event::Gap)s.
    pub unrecoverable: u64,
    /// Subscriber: [`Event::Gap`](crate::Event::Gap)s delivered.
    pub gap_events: u64,
    /// Subscriber: retransmit request datagrams sent.
    pub requests_sent: u64,
    /// Subscriber: messages asked for in those requests (retries included).
    pub messages_requested: u64,
    /// Subscriber: not-available replies received.
    pub not_available_received: u64,
    /// Subscriber: heartbeats received.
    pub heartbeats_received: u64,
    /// Subscriber: throttled notices received for messages it had asked
    /// for: the publisher found it asking for more than its share of the
    /// stream and ignores its requests for a while (docs/SCALING.md).
    pub throttled: u64,
    /// Subscriber: messages whose first copy came on line A.
    pub wins_a: u64,
    /// Subscriber: messages whose first copy came on line B.
    pub wins_b: u64,
    /// Subscriber: new publisher incarnations seen.
    pub restarts: u64,
    /// Subscriber: [`Event::PublisherDown`](crate::Event::PublisherDown)s
    /// delivered.
    pub publisher_down: u64,
    /// Subscriber: messages passed over when joining because the publisher
    /// no longer retained them (not losses: they predate the join).
    pub join_skipped: u64,
    /// Subscriber: fragments received.
    pub fragments_received: u64,
    /// Subscriber: partly or wholly reassembled messages given up to make
    /// room for an earlier one; they are requested again.
    pub reassembly_evictions: u64,

    /// Both: drops by reason.
    pub drops: Drops,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_counter() {
        let all = DropReason::ALL;
        let mut d = Drops::default();
        for (i, r) in all.iter().enumerate() {
            for _ in 0..=i {
                d.record(*r);
            }
        }
        for (i, r) in all.iter().enumerate() {
            assert_eq!(d.get(*r), i as u64 + 1, "{r:?}");
        }
        assert_eq!(d.total(), (1..=all.len() as u64).sum::<u64>());
    }
}
