//! MoldUDP64 A/B line arbitration and gap recovery, without I/O.
//!
//! An exchange sends every MoldUDP64 packet twice, on line A and line B,
//! and answers re-requests for lost messages on a unicast re-request
//! server. An [`Arbiter`] takes every datagram received on either line or
//! from that server ([`Line`]), and hands its [`ArbiterSink`] each message
//! exactly once, in sequence order:
//!
//! - The first copy of a sequence number to arrive wins, whatever its line
//!   ([`ArbiterCounters::wins_a`], [`wins_b`](ArbiterCounters::wins_b));
//!   later copies are duplicates. A packet that is only partly new
//!   delivers only its new messages.
//! - A packet ahead of the next expected sequence number reveals a gap. It
//!   is copied into a reorder store preallocated at construction and
//!   delivered once the gap fills, from the other line or from the
//!   re-request server. A heartbeat or end-of-session packet announcing a
//!   later sequence number reveals a gap too.
//! - A gap the other line has not filled within
//!   [`gap_wait_ns`](ArbiterConfig::gap_wait_ns) is re-requested
//!   ([`ArbiterSink::request`]) in requests of at most
//!   [`max_request_messages`](ArbiterConfig::max_request_messages), at most
//!   [`REQUESTS_IN_FLIGHT`] requests ahead of what has arrived, under a
//!   token-bucket rate limit. A request unanswered after
//!   [`request_timeout_ns`](ArbiterConfig::request_timeout_ns) is re-sent;
//!   after [`max_retries`](ArbiterConfig::max_retries) re-sends without
//!   progress the gap is unrecoverable: reported
//!   ([`ArbiterSink::unrecoverable`]), counted and skipped, and delivery
//!   continues after it. So is the oldest gap when the reorder store is
//!   full.
//! - The arbiter follows one session: the configured one
//!   ([`expected_session`](ArbiterConfig::expected_session)), or the first
//!   one seen (a session seen only in heartbeats and ends of session gives
//!   way to the first one with messages: 20 garbage bytes do not lock the
//!   arbiter). Packets of any other session are
//!   dropped and counted ([`ArbiterCounters::other_session`]). Without a
//!   configured session, another session is followed once it is
//!   confirmed: [`confirm_packets`](ArbiterConfig::confirm_packets)
//!   packets of it continuing one another on both lines (each line that
//!   carried the followed session must carry at least half), with the
//!   followed session silent for
//!   [`confirm_quiet_ns`](ArbiterConfig::confirm_quiet_ns) and through
//!   the whole run; or at once after the followed session's end. The new
//!   session is followed from sequence number 1 (what came before the
//!   confirming run is requested like any gap).
//! - A packet whose sequence number is more than
//!   [`max_jump`](ArbiterConfig::max_jump) beyond the next expected one is
//!   dropped and counted ([`ArbiterCounters::suspect_jumps`]): believed,
//!   it would open a gap of billions of messages, be given up, and leave
//!   every genuine packet after it behind. The jump is believed only under
//!   the same confirmation as a new session: `confirm_packets` far-ahead
//!   packets continuing one another from one point on both lines, while
//!   the genuine sequence has stopped advancing for `confirm_quiet_ns`.
//!   Every packet of the followed session that advances it starts the
//!   evidence over, so however many forged packets arrive, the genuine
//!   sequence keeps being delivered. A believed jump reports the messages
//!   it skips as unrecoverable ([`ArbiterCounters::jumps`]).
//! - An end of session is believed once every line that carried the
//!   session has announced it at the same sequence number (one forged
//!   end-of-session packet on one line does not end a two-line session
//!   that goes on), or once the session has been silent for
//!   `confirm_quiet_ns` after it (a line lost its copy), or at
//!   [`Arbiter::finish`]. Messages past the announced end refute it.
//! - Malformed packets are counted by reason and dropped
//!   ([`MalformedCounters`]): any [`PacketError`](crate::moldudp64::PacketError),
//!   sequence number 0, a range that ends beyond [`MAX_SEQUENCE`] (so no
//!   sequence arithmetic can overflow).
//! - Every sequence number from the start is accounted for exactly once,
//!   in order: delivered ([`ArbiterSink::message`], the bytes of a
//!   received packet of the followed session) or reported in a range
//!   ([`ArbiterSink::unrecoverable`]).
//!
//! There is no I/O, no clock and no allocation after [`Arbiter::new`]:
//! time comes in as `now_ns` (any monotonic clock), and the caller runs
//! [`Arbiter::on_timer`] when [`Arbiter::next_deadline`] says so.
//!
//! ```
//! use mdbus_feed::arbiter::{Arbiter, ArbiterConfig, ArbiterSink, Line};
//! use mdbus_feed::moldudp64::{PacketBuilder, Request, Session};
//!
//! #[derive(Default)]
//! struct Out { messages: Vec<(u64, Line)>, requests: Vec<Request> }
//! impl ArbiterSink for Out {
//!     fn message(&mut self, sequence: u64, line: Line, _data: &[u8]) {
//!         self.messages.push((sequence, line));
//!     }
//!     fn request(&mut self, request: &Request) {
//!         self.requests.push(*request);
//!     }
//! }
//!
//! let session = Session::new("20240102A").unwrap();
//! let packet = |seq: u64, n: usize| {
//!     let mut buf = [0u8; 200];
//!     let mut b = PacketBuilder::new(&mut buf, session, seq).unwrap();
//!     for _ in 0..n {
//!         b.push(b"hello").unwrap();
//!     }
//!     b.finish().to_vec()
//! };
//! let config = ArbiterConfig { start_sequence: Some(1), gap_wait_ns: 0, ..ArbiterConfig::default() };
//! let mut arb = Arbiter::new(config);
//! let mut out = Out::default();
//! arb.on_packet(Line::A, &packet(1, 2), 0, &mut out); // 1, 2 from A
//! arb.on_packet(Line::B, &packet(1, 3), 5, &mut out); // 3 is new: from B
//! arb.on_packet(Line::A, &packet(5, 1), 9, &mut out); // 4 is missing: stored, 4 requested
//! assert_eq!(out.requests, [Request { session, sequence: 4, count: 1 }]);
//! arb.on_packet(Line::Recovery, &packet(4, 1), 30, &mut out);
//! let seqs: Vec<u64> = out.messages.iter().map(|m| m.0).collect();
//! assert_eq!(seqs, [1, 2, 3, 4, 5]);
//! assert_eq!(out.messages[2].1, Line::B);
//! assert_eq!(arb.counters().recovered, 1);
//! ```

mod capture;
mod gaps;
mod guard;
mod rate;
mod store;

use std::fmt;

use crate::moldudp64::{self, Packet, PacketError, PacketKind, Request, Session};

pub use capture::CaptureSequencer;
pub use gaps::REQUESTS_IN_FLIGHT;
pub use rate::BURST as REQUEST_BURST;

use gaps::{Gaps, Policy};
use guard::{line_bit, line_index, Run};
use rate::Bucket;
use store::Store;

/// Where a datagram came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Line {
    /// The A multicast line.
    A,
    /// The B multicast line.
    B,
    /// The re-request server's answers.
    Recovery,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Line::A => "A",
            Line::B => "B",
            Line::Recovery => "recovery",
        })
    }
}

/// How an [`Arbiter`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArbiterConfig {
    /// The only session accepted (packets of others are counted in
    /// [`ArbiterCounters::other_session`] and dropped). `None`: adopt the
    /// first session seen, and follow session changes.
    pub expected_session: Option<Session>,
    /// The first sequence number wanted. `None`: start at the first one
    /// seen (late join); `Some(1)`: everything from the start of the
    /// session, re-requesting what came before the first packet seen.
    pub start_sequence: Option<u64>,
    /// Bytes preallocated for packets that arrive ahead of a gap.
    pub reorder_bytes: usize,
    /// Most packets held ahead of a gap.
    pub max_reorder_packets: usize,
    /// A request not answered within this long is sent again.
    pub request_timeout_ns: u64,
    /// Re-sends of a request before its gap is declared unrecoverable.
    pub max_retries: u32,
    /// Most messages asked for in one request (clamped to 1..=65534).
    pub max_request_messages: u16,
    /// Rate limit on requests (token bucket, bursts of
    /// [`REQUEST_BURST`]); 0: unlimited.
    pub requests_per_second: u32,
    /// How long a gap may wait for the other line before it is requested.
    pub gap_wait_ns: u64,
    /// Largest jump ahead of the next expected sequence number that one
    /// packet is believed about; farther packets count as
    /// [`ArbiterCounters::suspect_jumps`] until a run of them is confirmed
    /// (see [`confirm_packets`](Self::confirm_packets)). 0: no limit (any
    /// jump is believed at once; not for a network others can send on).
    pub max_jump: u64,
    /// Packets that confirm a change the arbiter does not believe from
    /// one packet: another session name, or a jump beyond `max_jump`.
    /// They must continue one another on each line, and each line that
    /// carried the followed session must carry at least half of them.
    pub confirm_packets: u32,
    /// How long the followed session must have made no progress (no new
    /// message, no heartbeat at or past the next expected sequence number)
    /// before such a change is believed, in the clock of `now_ns`.
    pub confirm_quiet_ns: u64,
}

/// Packets in a row beyond [`ArbiterConfig::max_jump`] that made a jump
/// believed before [`ArbiterConfig::confirm_packets`] replaced it.
#[deprecated(note = "jumps are confirmed by ArbiterConfig::confirm_packets and confirm_quiet_ns")]
pub const JUMP_CONFIRM: u32 = 8;

/// The highest sequence number a packet's range may end at. Beyond it a
/// packet is malformed: a genuine session never gets near it, and no
/// range arithmetic (a packet end plus a full packet) can overflow.
pub const MAX_SEQUENCE: u64 = u64::MAX - 0x1_0000;

impl Default for ArbiterConfig {
    /// Any session, late join, 4 MiB / 4,096 packets of reorder store,
    /// 20 ms request timeout, 5 retries, 1,000 messages a request, 1,000
    /// requests a second, 200 µs wait for the other line, jumps of more than
    /// 10,000,000 messages suspect, changes confirmed by 64 packets (32 on
    /// each line) after 5 s without progress.
    fn default() -> Self {
        Self {
            expected_session: None,
            start_sequence: None,
            reorder_bytes: 4 << 20,
            max_reorder_packets: 4096,
            request_timeout_ns: 20_000_000,
            max_retries: 5,
            max_request_messages: 1000,
            requests_per_second: 1000,
            gap_wait_ns: 200_000,
            max_jump: 10_000_000,
            confirm_packets: 64,
            confirm_quiet_ns: 5_000_000_000,
        }
    }
}

impl ArbiterConfig {
    /// Settings for reading a capture offline (`mdbus-replay`, a relay's
    /// file input): any session, late join, nothing requested (the sink
    /// drops requests), and a gap given up 20 ms of capture time after it
    /// appeared if the other line has not filled it. The trust rules are
    /// the live defaults.
    pub fn for_capture() -> Self {
        Self {
            gap_wait_ns: 10_000_000,
            request_timeout_ns: 10_000_000,
            max_retries: 0,
            requests_per_second: 0,
            ..Self::default()
        }
    }
}

/// Why an [`ArbiterConfig`] is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArbiterConfigError {
    /// A field that must be positive is zero.
    #[error("arbiter setting {field} must be at least 1")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// `start_sequence` is 0; MoldUDP64 numbers messages from 1.
    #[error("arbiter start_sequence must be at least 1: MoldUDP64 numbers messages from 1")]
    StartSequenceZero,
    /// `max_request_messages` is 0xFFFF, the end-of-session count.
    #[error("arbiter max_request_messages must be at most 65534")]
    RequestTooLarge,
}

impl ArbiterConfig {
    /// Checks the values [`Arbiter::new`] would otherwise clamp.
    ///
    /// # Errors
    /// The first unusable field.
    pub fn validate(&self) -> Result<(), ArbiterConfigError> {
        let zero = |field| Err(ArbiterConfigError::Zero { field });
        if self.reorder_bytes == 0 {
            return zero("reorder_bytes");
        }
        if self.max_reorder_packets == 0 {
            return zero("max_reorder_packets");
        }
        if self.request_timeout_ns == 0 {
            return zero("request_timeout_ns");
        }
        if self.max_request_messages == 0 {
            return zero("max_request_messages");
        }
        if self.max_request_messages == u16::MAX {
            return Err(ArbiterConfigError::RequestTooLarge);
        }
        if self.start_sequence == Some(0) {
            return Err(ArbiterConfigError::StartSequenceZero);
        }
        if self.confirm_packets == 0 {
            return zero("confirm_packets");
        }
        Ok(())
    }
}

/// Receives what an [`Arbiter`] produces.
pub trait ArbiterSink {
    /// A message in sequence order: its MoldUDP64 sequence number and the
    /// message bytes (ITCH). `line` is the line whose copy was used.
    fn message(&mut self, sequence: u64, line: Line, data: &[u8]);
    /// A re-request to send to the upstream re-request server (unicast
    /// UDP) now; `request.encode()` gives the datagram.
    fn request(&mut self, request: &Request);
    /// Messages `[first, first + count)` will never arrive: reported,
    /// counted, skipped. `first + count` never overflows (it is at most
    /// [`MAX_SEQUENCE`]); it is the end-exclusive bound of the feed range a
    /// source-gap notice carries (`to = first + count`).
    fn unrecoverable(&mut self, first: u64, count: u64) {
        let _ = (first, count);
    }
    /// The session name changed mid-stream (counted; the arbiter resets to
    /// the new session, expecting sequence number 1).
    fn session_changed(&mut self, old: Session, new: Session) {
        let _ = (old, new);
    }
    /// End of session (count 0xFFFF) reached in sequence: the last event
    /// of the session (later packets of it are dropped and counted in
    /// [`ArbiterCounters::after_end`]).
    fn end_of_session(&mut self) {}
}

/// What an [`Arbiter`] has seen and done. Message counters count
/// messages, the others packets or events.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArbiterCounters {
    /// Datagrams received on line A (malformed ones included).
    pub packets_a: u64,
    /// Datagrams received on line B.
    pub packets_b: u64,
    /// Datagrams received from the re-request server.
    pub packets_recovery: u64,
    /// Heartbeats (count 0).
    pub heartbeats: u64,
    /// Messages delivered to the sink.
    pub messages: u64,
    /// Messages delivered from line A's copy.
    pub wins_a: u64,
    /// Messages delivered from line B's copy.
    pub wins_b: u64,
    /// Messages delivered from the re-request server's copy.
    pub wins_recovery: u64,
    /// Packets with no new message (already delivered or stored).
    pub duplicate_packets: u64,
    /// Messages received again after their first copy.
    pub duplicate_messages: u64,
    /// Gaps: runs of missing sequence numbers, counted when revealed.
    pub gaps: u64,
    /// Messages missing when their gap was revealed.
    pub gap_messages: u64,
    /// Request packets sent, re-sends included.
    pub requests_sent: u64,
    /// Request packets re-sent after a timeout.
    pub request_retries: u64,
    /// Times a due request was held back by the rate limit.
    pub requests_rate_limited: u64,
    /// Messages that filled a gap (from the other line or the re-request
    /// server).
    pub recovered: u64,
    /// Messages declared unrecoverable and skipped.
    pub unrecoverable: u64,
    /// Packets rejected as malformed (the sum of [`Self::malformed_by`]).
    pub malformed: u64,
    /// Malformed packets by reason.
    pub malformed_by: MalformedCounters,
    /// Session changes followed.
    pub session_changes: u64,
    /// Packets from a session other than the one followed (the configured
    /// session, or the one before a change).
    pub other_session: u64,
    /// Line A/B packets whose sequence number is below the previous
    /// packet's on the same line (stale or reordered).
    pub backwards: u64,
    /// Times the reorder store was full and the oldest gap was declared
    /// unrecoverable to make room.
    pub reorder_overflow: u64,
    /// Ends of session reached.
    pub end_of_session: u64,
    /// Packets with new messages after the end of their session (dropped).
    pub after_end: u64,
    /// Packets dropped for a sequence number more than
    /// [`ArbiterConfig::max_jump`] ahead (forged, damaged, or a jump not yet
    /// confirmed).
    pub suspect_jumps: u64,
    /// Jumps beyond `max_jump` believed after confirmation; the messages
    /// they skip are in [`Self::unrecoverable`].
    pub jumps: u64,
    /// End-of-session packets not believed when they came: the other line
    /// had not announced the same end (it is believed later if the
    /// session stays silent), or they came from the re-request server.
    pub unconfirmed_ends: u64,
}

/// Malformed packets by reason; see [`ArbiterCounters::malformed_by`].
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct MalformedCounters {
    /// Shorter than the 20-byte header.
    pub short_header: u64,
    /// The message count lies: fewer blocks than announced, or bytes after
    /// the last one.
    pub count_mismatch: u64,
    /// A block's length prefix is cut short or claims more bytes than the
    /// packet holds.
    pub bad_block_length: u64,
    /// Sequence number 0 (MoldUDP64 numbers messages from 1).
    pub sequence_zero: u64,
    /// The packet's range ends beyond [`MAX_SEQUENCE`].
    pub sequence_overflow: u64,
}

impl MalformedCounters {
    fn count(&mut self, e: &PacketError) {
        match e {
            PacketError::ShortHeader { .. } => self.short_header += 1,
            PacketError::MissingBlock { .. } | PacketError::TrailingBytes { .. } => {
                self.count_mismatch += 1
            }
            PacketError::TruncatedPrefix { .. } | PacketError::BlockOverrun { .. } => {
                self.bad_block_length += 1
            }
        }
    }
}

/// What the header of a well-formed packet says, and where it came from.
#[derive(Debug, Clone, Copy)]
struct Head {
    line: Line,
    kind: PacketKind,
    first: u64,
    /// Sequence number after its last message (at most [`MAX_SEQUENCE`]).
    end: u64,
}

/// MoldUDP64 A/B arbitration with gap recovery; see the [module
/// documentation](self).
#[derive(Debug)]
pub struct Arbiter {
    config: ArbiterConfig,
    policy: Policy,
    session: Option<Session>,
    /// The session followed before the last change: its stragglers are
    /// ignored rather than taken for another change.
    previous_session: Option<Session>,
    started: bool,
    /// Next sequence number to deliver.
    expected: u64,
    /// Sequence number after the highest one known to exist.
    high: u64,
    /// Sequence number of the previous packet on A and on B.
    last_sequence: [Option<u64>; 2],
    /// Sequence number the end-of-session packet announced.
    end_at: Option<u64>,
    ended: bool,
    /// End of session announced at a sequence number, and by which lines
    /// (believed when all lines agree, or after `confirm_quiet_ns` of
    /// silence).
    end_claim: Option<(u64, u8)>,
    /// Lines (bits, [`line_bit`]) that carried the followed session.
    lines: u8,
    /// The followed session is configured or has carried a packet with
    /// messages; until then any session with messages replaces it.
    firm: bool,
    /// When the followed session last made progress.
    last_progress_ns: u64,
    /// Evidence for another session.
    candidate: Option<(Session, Run)>,
    /// Evidence for a jump beyond `max_jump`.
    jump: Option<Run>,
    store: Store,
    gaps: Gaps,
    bucket: Bucket,
    counters: ArbiterCounters,
    /// The sequence number a packet must start at to be delivered on the
    /// short path: `expected` while the followed session has nothing
    /// pending (see [`Arbiter::refresh_short`]), [`NO_SHORT`] otherwise.
    short_next: u64,
    /// The followed session's name, for the short path.
    short_session: [u8; moldudp64::SESSION_LEN],
}

/// [`Arbiter::short_next`] when the short path is closed: no packet takes
/// it, since a packet starting there would end past [`MAX_SEQUENCE`].
const NO_SHORT: u64 = u64::MAX;

impl Arbiter {
    /// An arbiter with every buffer allocated. Values that
    /// [`ArbiterConfig::validate`] rejects are clamped into range.
    pub fn new(config: ArbiterConfig) -> Self {
        let max_packets = config.max_reorder_packets.max(1);
        let mut a = Self {
            policy: Policy::new(&config),
            session: config.expected_session,
            previous_session: None,
            started: false,
            expected: 0,
            high: 0,
            last_sequence: [None; 2],
            end_at: None,
            ended: false,
            end_claim: None,
            lines: 0,
            firm: config.expected_session.is_some(),
            last_progress_ns: 0,
            candidate: None,
            jump: None,
            store: Store::new(config.reorder_bytes, max_packets),
            // Gaps never outnumber stored packets by more than one; one
            // more slot for the moment a split precedes the store.
            gaps: Gaps::new(max_packets + 2),
            bucket: Bucket::new(config.requests_per_second),
            counters: ArbiterCounters::default(),
            short_next: NO_SHORT,
            short_session: [0; moldudp64::SESSION_LEN],
            config,
        };
        if let (Some(_), Some(start)) = (a.session, a.config.start_sequence) {
            a.start_at(start.clamp(1, MAX_SEQUENCE));
        }
        a.refresh_short();
        a
    }

    /// Opens the short path for the next packet of the followed session
    /// when nothing is pending (no gap, stored packet, end, end claim),
    /// closes it otherwise. Called after every step that can change any of
    /// that: the general path of [`Arbiter::on_packet`], the timers and
    /// [`Arbiter::finish`].
    fn refresh_short(&mut self) {
        self.short_next = match self.session {
            Some(session)
                if self.started
                    && !self.ended
                    && self.high == self.expected
                    && self.end_claim.is_none()
                    && self.end_at.is_none()
                    && self.gaps.is_empty()
                    && self.store.len() == 0 =>
            {
                self.short_session = session.0;
                self.expected
            }
            _ => NO_SHORT,
        };
    }

    /// The short path: delivers `datagram` at once if it is a well-formed
    /// packet of messages of the followed session starting at the next
    /// expected sequence number with nothing pending, doing what the
    /// general path would do for it; returns false, having changed
    /// nothing, for any other datagram.
    #[inline]
    fn on_next_packet(
        &mut self,
        line: Line,
        datagram: &[u8],
        now_ns: u64,
        sink: &mut impl ArbiterSink,
    ) -> bool {
        let Some((head, _)) = datagram.split_first_chunk::<{ moldudp64::HEADER_LEN }>() else {
            return false;
        };
        let (session, rest) = head.split_at(moldudp64::SESSION_LEN);
        let (sequence, count) = rest.split_at(8);
        let mut first = [0; 8];
        first.copy_from_slice(sequence);
        let first = u64::from_be_bytes(first);
        let count = u16::from_be_bytes([count[0], count[1]]);
        // Not a heartbeat (0) nor an end of session (0xFFFF): one
        // comparison.
        if first != self.short_next || count.wrapping_add(1) < 2 {
            return false;
        }
        // `short_next` is `expected` (at most MAX_SEQUENCE) or NO_SHORT,
        // from which every count overflows.
        let Some(end) = first
            .checked_add(u64::from(count))
            .filter(|&e| e <= MAX_SEQUENCE)
        else {
            return false;
        };
        if session != self.short_session {
            return false;
        }
        let blocks = Blocks {
            bytes: datagram,
            offset: moldudp64::HEADER_LEN,
            left: count,
        };
        if !blocks.clone().whole() {
            return false;
        }
        self.firm = true;
        self.progress(line, first, now_ns);
        self.high = end;
        // Every block of the packet is `first..end`: each is delivered.
        let mut sequence = first;
        for data in blocks {
            sink.message(sequence, line, data);
            sequence += 1;
        }
        count_delivered(&mut self.counters, line, sequence - first);
        self.expected = end;
        self.short_next = end;
        true
    }

    /// One received datagram from a line. Delivers every message that is
    /// now in order to `sink` (and sends requests that are due).
    pub fn on_packet(
        &mut self,
        line: Line,
        datagram: &[u8],
        now_ns: u64,
        sink: &mut impl ArbiterSink,
    ) {
        match line {
            Line::A => self.counters.packets_a += 1,
            Line::B => self.counters.packets_b += 1,
            Line::Recovery => self.counters.packets_recovery += 1,
        }
        if !self.on_next_packet(line, datagram, now_ns, sink) {
            self.on_other_packet(line, datagram, now_ns, sink);
            self.refresh_short();
        }
    }

    /// [`Arbiter::on_packet`] for every datagram the short path does not
    /// take.
    fn on_other_packet(
        &mut self,
        line: Line,
        datagram: &[u8],
        now_ns: u64,
        sink: &mut impl ArbiterSink,
    ) {
        // The cheap walk decides; only a malformed packet is walked again,
        // for the reason it is counted under.
        let packet = match Packet::parse(datagram) {
            Ok(p) if Blocks::new(&p).whole() => Ok(p),
            _ => Packet::parse_strict(datagram),
        };
        let packet = match packet {
            Ok(p) => p,
            Err(e) => {
                self.counters.malformed += 1;
                self.counters.malformed_by.count(&e);
                return;
            }
        };
        let first = packet.sequence();
        if first == 0 {
            self.counters.malformed += 1;
            self.counters.malformed_by.sequence_zero += 1;
            return;
        }
        let Some(end) = first
            .checked_add(u64::from(packet.message_count()))
            .filter(|&e| e <= MAX_SEQUENCE)
        else {
            self.counters.malformed += 1;
            self.counters.malformed_by.sequence_overflow += 1;
            return;
        };
        let kind = packet.kind();
        let head = Head {
            line,
            kind,
            first,
            end,
        };
        if !self.admit_session(packet.session(), head, now_ns, sink) {
            return;
        }
        if kind == PacketKind::Messages {
            // A session that carried messages is locked.
            self.firm = true;
        }
        if !self.started {
            // The configured start, or, joining late, this packet's.
            let start = self.config.start_sequence.unwrap_or(first);
            self.start_at(start.clamp(1, MAX_SEQUENCE));
        }
        if self.config.max_jump > 0
            && first > self.expected.saturating_add(self.config.max_jump)
            && !self.confirm_jump(head, now_ns, sink)
        {
            self.counters.suspect_jumps += 1;
            return;
        }
        // An end of session is no sign of life: repeated on one line, it
        // must not keep its own confirmation (below) from coming.
        let advances = match kind {
            PacketKind::Messages => end > self.expected,
            PacketKind::Heartbeat => first >= self.expected,
            PacketKind::EndOfSession => false,
        };
        if kind == PacketKind::Messages && self.end_claim.is_some_and(|(at, _)| end > at) {
            // Messages past an announced end: the announcement was false.
            self.end_claim = None;
        }
        if advances {
            self.progress(line, first, now_ns);
        } else {
            self.note_line(line, first);
        }
        match kind {
            PacketKind::Heartbeat => {
                self.counters.heartbeats += 1;
                if !self.ended {
                    self.reveal(first, now_ns);
                }
            }
            PacketKind::EndOfSession => {
                if !self.ended {
                    if self.end_at.is_none() {
                        self.claim_end(line, first);
                    }
                    self.reveal(first, now_ns);
                    self.drain(sink);
                }
            }
            PacketKind::Messages => self.on_messages(line, packet, first, end, now_ns, sink),
        }
        self.settle_end(now_ns, sink);
        if self
            .gaps
            .next_deadline(&self.policy, &self.bucket)
            .is_some_and(|due| due <= now_ns)
        {
            self.timers(now_ns, sink);
        }
    }

    /// A packet of `line` starting at `first` advanced the followed
    /// session: it is alive, so whatever evidence there was for a change
    /// starts over.
    #[inline]
    fn progress(&mut self, line: Line, first: u64, now_ns: u64) {
        self.last_progress_ns = now_ns;
        self.candidate = None;
        self.jump = None;
        self.note_line(line, first);
    }

    /// Notes that `line` carried the session, and a packet of it starting
    /// at `first` (counted when it goes backwards).
    #[inline]
    fn note_line(&mut self, line: Line, first: u64) {
        self.lines |= line_bit(line);
        if let Some(i) = line_index(line) {
            if self.last_sequence[i].is_some_and(|prev| first < prev) {
                self.counters.backwards += 1;
            }
            self.last_sequence[i] = Some(first);
        }
    }

    /// Timers: sends due requests (and retries), declares gaps
    /// unrecoverable after `max_retries`, then delivers what follows.
    pub fn on_timer(&mut self, now_ns: u64, sink: &mut impl ArbiterSink) {
        self.timers(now_ns, sink);
        self.refresh_short();
    }

    fn timers(&mut self, now_ns: u64, sink: &mut impl ArbiterSink) {
        self.settle_end(now_ns, sink);
        let Some(session) = self.session else {
            return;
        };
        if self.gaps.is_empty() {
            return;
        }
        let died = self.gaps.service(
            now_ns,
            &self.policy,
            session,
            &mut self.bucket,
            &mut self.counters,
            sink,
        );
        if died {
            self.drain(sink);
        }
    }

    /// When [`Arbiter::on_timer`] next needs to run (`None`: nothing
    /// pending). May be in the past: run it now.
    pub fn next_deadline(&self) -> Option<u64> {
        let gaps = self.gaps.next_deadline(&self.policy, &self.bucket);
        let end = self.end_due();
        match (gaps, end) {
            (Some(g), Some(e)) => Some(g.min(e)),
            (g, e) => g.or(e),
        }
    }

    /// When an end of session announced on only some lines is believed,
    /// if one is pending.
    fn end_due(&self) -> Option<u64> {
        match self.end_claim {
            Some(_) if self.end_at.is_none() && !self.ended => Some(
                self.last_progress_ns
                    .saturating_add(self.config.confirm_quiet_ns),
            ),
            _ => None,
        }
    }

    /// Believes a pending end of session once the session has been silent
    /// for `confirm_quiet_ns` since (a line lost its copy of the end).
    fn settle_end(&mut self, now_ns: u64, sink: &mut impl ArbiterSink) {
        if self.end_due().is_some_and(|due| due <= now_ns) {
            self.end_at = self.end_claim.map(|(at, _)| at);
            self.drain(sink);
        }
    }

    /// The next sequence number to deliver (0 before the first packet).
    pub fn expected_sequence(&self) -> u64 {
        self.expected
    }

    /// The session followed, once locked: configured, or named by a packet
    /// with messages (`None` before, while a session seen only in
    /// heartbeats may still give way to another).
    pub fn session(&self) -> Option<Session> {
        self.session.filter(|_| self.firm)
    }

    /// What has happened so far.
    pub fn counters(&self) -> &ArbiterCounters {
        &self.counters
    }

    /// Packets held in the reorder store.
    pub fn stored_packets(&self) -> usize {
        self.store.len()
    }

    /// Gaps open (waiting for the other line, requested, or unrecoverable
    /// and waiting for delivery to reach them).
    pub fn open_gaps(&self) -> usize {
        self.gaps.len()
    }

    /// True once the end-of-session packet has been reached in sequence.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    fn start_at(&mut self, sequence: u64) {
        self.started = true;
        self.expected = sequence;
        self.high = sequence;
    }

    /// Decides whether a packet of `session` is processed: a packet of the
    /// followed session is; the first packet with messages locks the
    /// session when none is; another session's packet is evidence for a
    /// change, followed once confirmed (or at once after the end of the
    /// followed session), dropped and counted until then.
    fn admit_session(
        &mut self,
        session: Session,
        head: Head,
        now_ns: u64,
        sink: &mut impl ArbiterSink,
    ) -> bool {
        let Some(current) = self.session else {
            self.session = Some(session);
            self.last_progress_ns = now_ns;
            return true;
        };
        if current == session {
            return true;
        }
        if self.config.expected_session.is_some() || self.previous_session == Some(session) {
            self.counters.other_session += 1;
            return false;
        }
        // A session known only from heartbeats and ends of session (20
        // bytes of anything) gives way to the first with messages.
        if self.ended {
            self.change_session(current, session, 0, now_ns, sink);
            return true;
        }
        if !self.firm && head.kind == PacketKind::Messages {
            // Nothing of the replaced session was real (no message): it is
            // forgotten, and the new one starts as if it came first.
            self.forget_session(session, now_ns);
            return true;
        }
        let Some(i) = line_index(head.line) else {
            self.counters.other_session += 1;
            return false;
        };
        let mut run = self
            .candidate
            .and_then(|(s, run)| (s == session).then_some(run));
        let run = Run::advance(&mut run, i, head.first, head.end);
        self.candidate = Some((session, run));
        if self.confirmed(&run, now_ns) {
            self.change_session(current, session, run.lines(), now_ns, sink);
            return true;
        }
        self.counters.other_session += 1;
        false
    }

    /// True if `run` confirms a change: enough packets on the lines that
    /// carried the followed session, which has been silent long enough.
    fn confirmed(&self, run: &Run, now_ns: u64) -> bool {
        run.confirmed(self.config.confirm_packets.max(1), self.lines)
            && now_ns.saturating_sub(self.last_progress_ns) >= self.config.confirm_quiet_ns
    }

    /// The old session is over: delivers what is stored, reports what is
    /// missing, then follows the new one from its start.
    fn change_session(
        &mut self,
        current: Session,
        session: Session,
        lines: u8,
        now_ns: u64,
        sink: &mut impl ArbiterSink,
    ) {
        self.gaps.kill_all();
        self.drain(sink);
        self.store.clear();
        self.gaps.clear();
        self.counters.session_changes += 1;
        sink.session_changed(current, session);
        self.previous_session = Some(current);
        self.session = Some(session);
        self.last_sequence = [None; 2];
        self.end_at = None;
        self.end_claim = None;
        self.ended = false;
        self.lines = lines;
        self.firm = false;
        self.last_progress_ns = now_ns;
        self.candidate = None;
        self.jump = None;
        self.start_at(1);
    }

    /// Replaces a session that never carried a message: no event, no
    /// count; what it revealed is dropped, and delivery starts afresh.
    fn forget_session(&mut self, session: Session, now_ns: u64) {
        // Its heartbeats' gaps were never real: they leave the count.
        self.counters.gap_messages = self
            .counters
            .gap_messages
            .saturating_sub(self.gaps.missing());
        self.store.clear();
        self.gaps.clear();
        self.session = Some(session);
        self.started = false;
        self.expected = 0;
        self.high = 0;
        self.last_sequence = [None; 2];
        self.end_at = None;
        self.end_claim = None;
        self.ended = false;
        self.lines = 0;
        self.last_progress_ns = now_ns;
        self.candidate = None;
        self.jump = None;
    }

    /// A packet more than `max_jump` ahead: evidence for a jump. Returns
    /// true if it confirms the jump, which has then been made (what it
    /// skips reported unrecoverable) and the packet is processed.
    fn confirm_jump(&mut self, head: Head, now_ns: u64, sink: &mut impl ArbiterSink) -> bool {
        let Some(i) = line_index(head.line) else {
            return false;
        };
        if head.kind == PacketKind::EndOfSession || self.ended {
            return false;
        }
        let run = Run::advance(&mut self.jump, i, head.first, head.end);
        if !self.confirmed(&run, now_ns) {
            return false;
        }
        self.jump = None;
        self.counters.jumps += 1;
        // Everything before the run is given up at once (it is more than
        // `max_jump` messages: no request would fetch it); the run's own
        // earlier packets were dropped and become an ordinary gap.
        self.reveal(run.start, now_ns);
        self.gaps.kill_all();
        self.drain(sink);
        self.last_progress_ns = now_ns;
        !self.ended
    }

    /// An end of session announced on `line` at `at`: believed once every
    /// line that carried the session announced the same.
    fn claim_end(&mut self, line: Line, at: u64) {
        let bit = line_bit(line);
        let mask = match &mut self.end_claim {
            Some((claimed, mask)) if *claimed == at => {
                *mask |= bit;
                *mask
            }
            _ => {
                self.end_claim = Some((at, bit));
                bit
            }
        };
        if mask != 0 && mask & self.lines == self.lines {
            self.end_at = Some(at);
        } else {
            self.counters.unconfirmed_ends += 1;
        }
    }

    /// The input is over (the end of a capture): nothing will fill what is
    /// missing, so every open gap is reported unrecoverable and what the
    /// store holds behind them is delivered, in order.
    pub fn finish(&mut self, sink: &mut impl ArbiterSink) {
        // Nothing more will come: an end announced on one line stands.
        self.settle_end(u64::MAX, sink);
        self.gaps.kill_all();
        self.drain(sink);
        self.refresh_short();
    }

    /// Sequence numbers up to `next` exist: anything not seen is a gap.
    fn reveal(&mut self, next: u64, now_ns: u64) {
        if next > self.high {
            if self.gaps.open(self.high, next, now_ns) {
                self.counters.gaps += 1;
            }
            // Saturating: a sequence number near 2^64 (a corrupt or hostile
            // packet) must not overflow the count.
            self.counters.gap_messages =
                self.counters.gap_messages.saturating_add(next - self.high);
            self.high = next;
        }
    }

    /// Counts a packet of `count` messages ending before `end` that brings
    /// nothing: all of it was delivered already (a duplicate), or the
    /// session is over (nothing more belongs to it).
    #[inline]
    fn nothing_new(&mut self, end: u64, count: u64) -> bool {
        if end <= self.expected {
            self.counters.duplicate_packets += 1;
            self.counters.duplicate_messages += count;
            return true;
        }
        if self.ended {
            self.counters.after_end += 1;
            return true;
        }
        false
    }

    fn on_messages(
        &mut self,
        line: Line,
        packet: Packet<'_>,
        first: u64,
        end: u64,
        now_ns: u64,
        sink: &mut impl ArbiterSink,
    ) {
        let count = end - first;
        if self.nothing_new(end, count) {
            return;
        }
        let len = packet.as_bytes().len();
        if first > self.expected && !self.store.fits(len) {
            self.counters.reorder_overflow += 1;
            self.make_room(first, len, now_ns, sink);
            // Making room may have delivered it, or reached the end of the
            // session.
            if self.nothing_new(end, count) {
                return;
            }
        }
        let old_high = self.high;
        self.reveal(first, now_ns);
        let above = end.saturating_sub(first.max(old_high));
        let filled = self.gaps.fill(first, end.min(old_high));
        self.high = self.high.max(end);
        if filled + above == 0 {
            self.counters.duplicate_packets += 1;
            self.counters.duplicate_messages += count;
            return;
        }
        self.counters.recovered += filled;
        if first <= self.expected {
            self.counters.duplicate_messages += self.expected - first;
            // Messages stored earlier from another copy arrived first:
            // they are delivered from the store, and this packet's copies
            // of them are duplicates.
            while self.expected < end {
                let stop = self
                    .store
                    .front()
                    .map_or(end, |e| e.first.clamp(self.expected, end));
                deliver(packet, line, self.expected, stop, &mut self.counters, sink);
                self.expected = stop;
                self.drain_store(sink);
                self.counters.duplicate_messages += self.expected.min(end) - stop;
                if self.expected == stop && stop < end {
                    // Cannot happen: the store's front starts at `stop`,
                    // so draining moved past it.
                    break;
                }
            }
            self.check_end(sink);
        } else {
            // `make_room` left room, or the packet is now in sequence.
            let stored = self.store.insert(first, end, line, packet.as_bytes());
            debug_assert!(stored, "reorder store refused a packet that fits");
        }
    }

    /// The store cannot take a packet starting at `first`: declare the
    /// oldest gaps unrecoverable (delivering what they held back) until it
    /// can, or until the packet is in sequence.
    fn make_room(&mut self, first: u64, len: usize, now_ns: u64, sink: &mut impl ArbiterSink) {
        while first > self.expected && !self.store.fits(len) && !self.ended {
            if self.gaps.front().is_some() {
                self.skip_front_gap(sink);
                self.drain(sink);
            } else {
                // Nothing before the packet is known to be missing yet,
                // but it is, and there is nowhere to wait for it.
                self.reveal(first, now_ns);
                self.skip_front_gap(sink);
                self.drain(sink);
            }
        }
    }

    fn skip_front_gap(&mut self, sink: &mut impl ArbiterSink) {
        if let Some(g) = self.gaps.pop_front() {
            let from = g.first.max(self.expected);
            if g.end > from {
                let n = g.end - from;
                self.counters.unrecoverable = self.counters.unrecoverable.saturating_add(n);
                sink.unrecoverable(from, n);
                self.expected = g.end;
            }
        }
    }

    /// Delivers what the store holds in sequence, skipping dead gaps,
    /// then the end of session if it is due.
    fn drain(&mut self, sink: &mut impl ArbiterSink) {
        self.drain_store(sink);
        self.check_end(sink);
    }

    /// Delivers what the store holds in sequence, skipping dead gaps.
    fn drain_store(&mut self, sink: &mut impl ArbiterSink) {
        loop {
            if let Some(e) = self.store.front() {
                if e.end <= self.expected {
                    self.counters.duplicate_packets += 1;
                    self.counters.duplicate_messages += e.end - e.first;
                    self.store.pop_front();
                    continue;
                }
                if e.first <= self.expected {
                    let from = self.expected;
                    self.counters.duplicate_messages += from - e.first;
                    if let Ok(p) = Packet::parse(self.store.bytes(&e)) {
                        deliver(p, e.line, from, e.end, &mut self.counters, sink);
                    }
                    self.expected = e.end;
                    self.store.pop_front();
                    continue;
                }
            }
            if self
                .gaps
                .front()
                .is_some_and(|g| g.dead && g.first <= self.expected)
            {
                self.skip_front_gap(sink);
                continue;
            }
            break;
        }
    }

    /// Reports the end of session once everything before it (and
    /// anything known beyond it) is delivered or reported.
    fn check_end(&mut self, sink: &mut impl ArbiterSink) {
        if let Some(at) = self.end_at {
            // The end comes last: after anything known beyond it too.
            if !self.ended && self.expected >= at && self.gaps.is_empty() && self.store.len() == 0 {
                self.ended = true;
                self.counters.end_of_session += 1;
                sink.end_of_session();
            }
        }
    }
}

/// The message blocks of a packet by their length prefixes alone: the
/// arbiter's walk, cheaper than [`Packet::messages`] because it reports
/// no error. It stops after the announced count or at the first block
/// that does not fit; [`Blocks::whole`] then tells whether the packet is
/// well formed, as [`Packet::validate`] would.
#[derive(Clone)]
struct Blocks<'a> {
    bytes: &'a [u8],
    offset: usize,
    left: u16,
}

impl<'a> Blocks<'a> {
    #[inline]
    fn new(packet: &Packet<'a>) -> Blocks<'a> {
        Blocks {
            bytes: packet.as_bytes(),
            offset: moldudp64::HEADER_LEN,
            left: packet.message_count(),
        }
    }

    /// Walks the rest: true when every announced block was there and
    /// nothing follows the last.
    #[inline]
    fn whole(mut self) -> bool {
        while self.next().is_some() {}
        self.left == 0 && self.offset == self.bytes.len()
    }
}

impl<'a> Iterator for Blocks<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let &[hi, lo] = self.bytes.get(self.offset..self.offset + 2)? else {
            return None;
        };
        let start = self.offset + 2;
        let end = start + usize::from(u16::from_be_bytes([hi, lo]));
        let data = self.bytes.get(start..end)?;
        self.offset = end;
        self.left -= 1;
        Some(data)
    }
}

/// Hands the messages `from..to` of `packet` to the sink. The packet was
/// validated when it arrived (`Packet::parse_strict`), so this walk only
/// steps over the length prefixes; it still slices with bounds checks,
/// and stops at the first block that does not fit.
fn deliver(
    packet: Packet<'_>,
    line: Line,
    from: u64,
    to: u64,
    counters: &mut ArbiterCounters,
    sink: &mut impl ArbiterSink,
) {
    let mut sequence = packet.sequence();
    let mut delivered = 0;
    for data in Blocks::new(&packet) {
        if sequence >= to {
            break;
        }
        if sequence >= from {
            sink.message(sequence, line, data);
            delivered += 1;
        }
        sequence = sequence.wrapping_add(1);
    }
    count_delivered(counters, line, delivered);
}

/// Counts `delivered` messages from `line`'s copy: once per packet, not
/// per message.
#[inline]
fn count_delivered(counters: &mut ArbiterCounters, line: Line, delivered: u64) {
    counters.messages += delivered;
    match line {
        Line::A => counters.wins_a += delivered,
        Line::B => counters.wins_b += delivered,
        Line::Recovery => counters.wins_recovery += delivered,
    }
}

#[cfg(test)]
mod blocks_tests {
    use super::*;
    use crate::moldudp64::PacketBuilder;

    /// The arbiter's cheap walk accepts exactly the packets
    /// `Packet::validate` accepts, and yields the same messages.
    #[test]
    fn the_cheap_walk_agrees_with_validate_on_every_cut_and_extension() {
        let mut buf = [0u8; 256];
        let mut b = PacketBuilder::new(&mut buf, Session::new("S1").unwrap(), 7).unwrap();
        for m in [&b"Sabc"[..], b"", b"A0123456789", b"xy"] {
            b.push(m).unwrap();
        }
        let good = b.finish().to_vec();
        let p = Packet::parse(&good).unwrap();
        let walked: Vec<&[u8]> = Blocks::new(&p).collect();
        let reference: Vec<&[u8]> = p.messages().map(|m| m.unwrap().data).collect();
        assert_eq!(walked, reference);
        assert_eq!(walked.len(), 4);
        let mut checked = 0;
        for cut in HEADER_MIN..=good.len() + 3 {
            let mut bytes = good.clone();
            bytes.resize(cut, 0xEE);
            // Also every announced count from 0 to 6 over the same bytes.
            for count in 0..=6u16 {
                bytes[18..20].copy_from_slice(&count.to_be_bytes());
                let p = Packet::parse(&bytes).unwrap();
                assert_eq!(
                    Blocks::new(&p).whole(),
                    p.validate().is_ok(),
                    "{} bytes, count {count}",
                    bytes.len()
                );
                checked += 1;
            }
        }
        assert!(checked > 100);
        // Heartbeat and end of session: whole with no block.
        let hb = moldudp64::heartbeat(Session::new("S1").unwrap(), 9);
        assert!(Blocks::new(&Packet::parse(&hb).unwrap()).whole());
        let mut long = hb.to_vec();
        long.push(0);
        let p = Packet::parse(&long).unwrap();
        assert_eq!(Blocks::new(&p).whole(), p.validate().is_ok());
        assert!(!Blocks::new(&p).whole());
    }

    const HEADER_MIN: usize = moldudp64::HEADER_LEN;
}

#[cfg(test)]
mod short_path_tests {
    use super::*;
    use crate::moldudp64::PacketBuilder;

    /// Delivered messages, with the line each came from.
    #[derive(Default)]
    struct Got(Vec<(u64, Line)>, bool);

    impl ArbiterSink for Got {
        fn message(&mut self, sequence: u64, line: Line, data: &[u8]) {
            assert_eq!(data, sequence.to_be_bytes(), "bytes of message {sequence}");
            self.0.push((sequence, line));
        }
        fn request(&mut self, _: &Request) {}
        fn end_of_session(&mut self) {
            self.1 = true;
        }
    }

    fn packet(session: &str, first: u64, count: u64) -> Vec<u8> {
        let mut buf = [0u8; 512];
        let mut b = PacketBuilder::new(&mut buf, Session::new(session).unwrap(), first).unwrap();
        for s in first..first + count {
            b.push(&s.to_be_bytes()).unwrap();
        }
        b.finish().to_vec()
    }

    /// The short path is open exactly while nothing is pending: it closes
    /// on a gap and at the end of the session, opens again once the gap
    /// is filled, and leaves every other datagram (malformed, another
    /// session, a heartbeat) to the general path, which counts it as
    /// before.
    #[test]
    fn the_short_path_closes_while_anything_is_pending_and_takes_only_the_next_packet() {
        let mut a = Arbiter::new(ArbiterConfig {
            start_sequence: Some(1),
            gap_wait_ns: 0,
            requests_per_second: 0,
            ..ArbiterConfig::default()
        });
        let mut got = Got::default();
        let seqs = |g: &Got| g.0.iter().map(|m| m.0).collect::<Vec<_>>();
        // Nothing followed yet: the general path takes the first packet.
        assert_eq!(a.short_next, NO_SHORT);
        a.on_packet(Line::A, &packet("S1", 1, 2), 0, &mut got);
        assert_eq!(a.short_next, 3);
        // A gap: closed until it is filled.
        a.on_packet(Line::A, &packet("S1", 4, 1), 0, &mut got);
        assert_eq!(a.short_next, NO_SHORT);
        assert_eq!(seqs(&got), [1, 2]);
        a.on_packet(Line::B, &packet("S1", 3, 1), 0, &mut got);
        assert_eq!(seqs(&got), [1, 2, 3, 4]);
        assert_eq!(a.short_next, 5);
        // At the next sequence but malformed (one byte short): counted,
        // nothing delivered, still open.
        let good = packet("S1", 5, 2);
        a.on_packet(Line::A, &good[..good.len() - 1], 0, &mut got);
        assert_eq!(a.counters().malformed, 1);
        assert_eq!(a.short_next, 5);
        // Another session at the next sequence: not delivered.
        a.on_packet(Line::A, &packet("S2", 5, 2), 0, &mut got);
        assert_eq!(seqs(&got), [1, 2, 3, 4]);
        // A heartbeat at the next sequence goes the general way.
        let heartbeats = a.counters().heartbeats;
        a.on_packet(
            Line::A,
            &moldudp64::heartbeat(Session::new("S1").unwrap(), 5),
            0,
            &mut got,
        );
        assert_eq!(a.counters().heartbeats, heartbeats + 1);
        // The next packet on B: delivered on the short path, won by B.
        let wins_b = a.counters().wins_b;
        a.on_packet(Line::B, &good, 0, &mut got);
        assert_eq!(seqs(&got), [1, 2, 3, 4, 5, 6]);
        assert_eq!(got.0[4..], [(5, Line::B), (6, Line::B)]);
        assert_eq!(a.counters().wins_b, wins_b + 2);
        assert_eq!(a.counters().messages, 6);
        assert_eq!(a.short_next, 7);
        // Its duplicate on A is no longer at the next sequence.
        a.on_packet(Line::A, &good, 0, &mut got);
        assert_eq!(a.counters().messages, 6);
        // The end of the session closes it for good.
        a.on_packet(
            Line::A,
            &moldudp64::end_of_session(Session::new("S1").unwrap(), 7),
            0,
            &mut got,
        );
        a.finish(&mut got);
        assert!(got.1);
        assert_eq!(a.short_next, NO_SHORT);
        a.on_packet(Line::A, &packet("S1", 7, 1), 0, &mut got);
        assert_eq!(seqs(&got), [1, 2, 3, 4, 5, 6]);
        assert_eq!(a.counters().after_end, 1);
    }
}
