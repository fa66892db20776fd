//! Datagram framing of streams over datagram transports (UDP multicast,
//! RDMA UD multicast).
//!
//! Every datagram starts with a fixed 40-byte little-endian header:
//!
//! | offset | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 4 | `magic` | `MDBD` |
//! | 4 | 1 | `version` | [`VERSION`] |
//! | 5 | 1 | `kind` | [`Kind`] |
//! | 6 | 2 | `count` | messages that follow (data kinds), 0 otherwise |
//! | 8 | 4 | `stream_id` | which stream |
//! | 12 | 4 | `length` | bytes of the whole datagram, this header included |
//! | 16 | 8 | `epoch` | the publisher's incarnation |
//! | 24 | 8 | `seq` | first message (data), latest (heartbeat), first requested, unavailable or refused (request, not-available, throttled), last (end of stream) |
//! | 32 | 8 | `arg` | data: 0, or the [`Fragment`] fields; heartbeat and end of stream: oldest retained sequence; request, not-available and throttled: message count |
//!
//! Data and retransmitted data carry `count` messages with consecutive
//! sequence numbers from `seq`, each a [`wire::Header`](crate::wire::Header)
//! followed by its payload, packed back to back. A message too large for
//! one datagram travels alone, in fragments: `count` is 1, `arg` holds the
//! fragment's index, the number of fragments and the fragment size, the
//! message header carries the whole message's length and the datagram the
//! fragment's bytes. docs/WIRE.md ("Datagram streams") has the full table.
//!
//! [`decode`] checks every field against the bytes present and the
//! receiver's limits before anything is delivered, so a datagram is either
//! used whole or dropped with one [`DropReason`]; it never panics.

use crate::wire::{Header, HEADER_LEN, KNOWN_FLAGS};

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"MDBD";
/// Datagram layout version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of the datagram header.
pub const DATAGRAM_HEADER_LEN: usize = 40;
/// Smallest `max_datagram` accepted: room for the headers and a useful
/// fragment.
pub const MIN_DATAGRAM: usize = 128;
/// Largest `max_datagram` accepted: the largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// Most fragments one message may be split into (the field is 16 bits).
pub const MAX_FRAGMENTS: usize = u16::MAX as usize;
/// Bit of the `kind` byte saying the datagram ends with a MAC.
pub const KIND_MAC: u8 = 0x80;
/// Bytes of the MAC at the end of an authenticated datagram.
pub const MAC_LEN: usize = 16;
/// Highest sequence number a datagram may mention. Far beyond any real
/// stream (2^62), it keeps every `seq + window` sum of the cores clear of
/// overflow.
pub const MAX_SEQ: u64 = 1 << 62;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Messages sent for the first time (multicast).
    Data = 1,
    /// Messages sent again in answer to a request.
    Retransmit = 2,
    /// The publisher is alive; `seq` is its latest sequence, so a
    /// subscriber notices a lost tail.
    Heartbeat = 3,
    /// Subscriber to publisher (unicast): please resend `arg` messages from
    /// `seq`.
    Request = 4,
    /// Publisher to subscriber: `arg` messages from `seq` are older than the
    /// retained window and cannot be resent.
    NotAvailable = 5,
    /// The publisher closed the stream; `seq` is its last message.
    EndOfStream = 6,
    /// Publisher to subscriber (unicast): the subscriber asked for more
    /// than its share of the stream (`lossy_share_percent`); `arg`
    /// messages from `seq` will not be resent, and its further requests
    /// are ignored until the window ends.
    Throttled = 7,
}

impl Kind {
    /// The kind a header byte names, if any.
    pub fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Data,
            2 => Kind::Retransmit,
            3 => Kind::Heartbeat,
            4 => Kind::Request,
            5 => Kind::NotAvailable,
            6 => Kind::EndOfStream,
            7 => Kind::Throttled,
            _ => return None,
        })
    }
}

/// Why a datagram, or part of one, was not used. Each reason has its own
/// counter in [`Drops`](super::Drops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// Shorter than the datagram header, or than its own `length` field.
    #[error("truncated: shorter than its header or its length field")]
    Truncated,
    /// Does not start with `MDBD`.
    #[error("bad magic: not an mdbus datagram")]
    BadMagic,
    /// Another layout version.
    #[error("unsupported datagram version")]
    BadVersion,
    /// Unknown `kind` byte.
    #[error("unknown datagram kind")]
    BadKind,
    /// Longer than the configured maximum datagram.
    #[error("longer than max_datagram")]
    Oversize,
    /// A length field disagrees with the bytes present.
    #[error("a length field disagrees with the bytes present")]
    BadLength,
    /// The message count is zero, overruns the datagram or leaves bytes
    /// over.
    #[error("message count does not match the bytes present")]
    BadCount,
    /// Sequence numbers that are zero, not consecutive, or would overflow.
    #[error("bad sequence numbers")]
    BadSequence,
    /// Undefined message flag bits set.
    #[error("unknown message flag bits")]
    BadFlags,
    /// Fragment fields inconsistent with each other, with the message, or
    /// with earlier fragments of the same message.
    #[error("inconsistent fragment")]
    BadFragment,
    /// A message longer than the configured maximum message.
    #[error("message longer than max_message")]
    TooLarge,
    /// Belongs to another stream.
    #[error("datagram of another stream")]
    OtherStream,
    /// From an earlier incarnation of the publisher (or, at a publisher, a
    /// request about another incarnation).
    #[error("datagram of an old publisher epoch")]
    OldEpoch,
    /// A kind this side never receives (a request at a subscriber, data at
    /// a publisher).
    #[error("datagram kind not expected here")]
    UnexpectedKind,
    /// A reply (retransmission, not-available) for an incarnation this
    /// subscriber is not following.
    #[error("reply that was not asked for")]
    Unsolicited,
    /// A fragment arrived while every reassembly buffer held an earlier
    /// message; it will be requested again.
    #[error("no free reassembly buffer")]
    ReassemblyFull,
    /// Not from the source this subscriber is bound to (and not, or not
    /// yet, confirmed as its replacement).
    #[error("datagram from a source other than the bound publisher")]
    ForeignSource,
    /// A new publisher epoch not yet confirmed by enough consecutive
    /// datagrams that agree.
    #[error("new epoch not confirmed")]
    ImplausibleEpoch,
    /// A sequence far beyond the stream's (more than `max_jump`, or beyond
    /// the reorder window) not yet confirmed by enough consecutive
    /// datagrams that agree.
    #[error("sequence jump not confirmed")]
    ImplausibleJump,
    /// A heartbeat or end-of-stream marker announcing messages not yet
    /// seen, waiting for a second one that agrees before it is believed
    /// (the datagram still shows the publisher alive).
    #[error("heartbeat or end of stream not yet confirmed")]
    UnconfirmedClaim,
    /// A not-available reply for messages not asked for, or the first one
    /// for a range (believed when the repeated request gets it again).
    #[error("not-available reply not confirmed")]
    UnconfirmedNotAvailable,
    /// The datagram's MAC does not match the stream key.
    #[error("message authentication code does not match")]
    BadMac,
    /// No MAC on a stream configured with a key.
    #[error("datagram without a message authentication code")]
    Unauthenticated,
    /// A retransmit request beyond the requester's or the publisher's
    /// retransmission budget, or from a requester over its share of the
    /// stream (lossy-receiver protection).
    #[error("retransmit request over budget")]
    OverBudget,
}

impl DropReason {
    /// Every reason, in declaration order.
    pub const ALL: [DropReason; 24] = [
        DropReason::Truncated,
        DropReason::BadMagic,
        DropReason::BadVersion,
        DropReason::BadKind,
        DropReason::Oversize,
        DropReason::BadLength,
        DropReason::BadCount,
        DropReason::BadSequence,
        DropReason::BadFlags,
        DropReason::BadFragment,
        DropReason::TooLarge,
        DropReason::OtherStream,
        DropReason::OldEpoch,
        DropReason::UnexpectedKind,
        DropReason::Unsolicited,
        DropReason::ReassemblyFull,
        DropReason::ForeignSource,
        DropReason::ImplausibleEpoch,
        DropReason::ImplausibleJump,
        DropReason::UnconfirmedClaim,
        DropReason::UnconfirmedNotAvailable,
        DropReason::BadMac,
        DropReason::Unauthenticated,
        DropReason::OverBudget,
    ];
}

/// The fixed header of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramHeader {
    /// What follows.
    pub kind: Kind,
    /// Messages in the datagram (data kinds), 0 otherwise.
    pub count: u16,
    /// Stream identifier.
    pub stream_id: u32,
    /// Bytes of the whole datagram.
    pub length: u32,
    /// Publisher incarnation.
    pub epoch: u64,
    /// Kind-specific sequence number (see the module table).
    pub seq: u64,
    /// Kind-specific argument (see the module table).
    pub arg: u64,
}

impl DatagramHeader {
    /// Writes the header into the first [`DATAGRAM_HEADER_LEN`] bytes of
    /// `out`.
    ///
    /// # Panics
    /// When `out` is shorter than [`DATAGRAM_HEADER_LEN`]; callers size
    /// their buffers from the same constant.
    #[inline]
    pub fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind as u8;
        out[6..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..12].copy_from_slice(&self.stream_id.to_le_bytes());
        out[12..16].copy_from_slice(&self.length.to_le_bytes());
        out[16..24].copy_from_slice(&self.epoch.to_le_bytes());
        out[24..32].copy_from_slice(&self.seq.to_le_bytes());
        out[32..40].copy_from_slice(&self.arg.to_le_bytes());
    }
}

/// Where a fragment sits in its message. Every fragment but the last holds
/// exactly `chunk` bytes, so fragment `index` starts at `index * chunk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Position of this fragment, from 0.
    pub index: u16,
    /// Fragments the message was split into (at least 2).
    pub count: u16,
    /// Bytes in every fragment but the last.
    pub chunk: u32,
}

impl Fragment {
    /// The `arg` field that carries these values: index in bits 0..16,
    /// count in 16..32, chunk in 32..64.
    #[inline]
    pub fn to_arg(self) -> u64 {
        self.index as u64 | (self.count as u64) << 16 | (self.chunk as u64) << 32
    }

    /// The values an `arg` field carries.
    #[inline]
    pub fn from_arg(arg: u64) -> Fragment {
        Fragment {
            index: arg as u16,
            count: (arg >> 16) as u16,
            chunk: (arg >> 32) as u32,
        }
    }

    /// Byte offset of this fragment in the message.
    #[inline]
    pub fn offset(self) -> usize {
        self.index as usize * self.chunk as usize
    }

    /// Bytes this fragment holds of a `total`-byte message.
    #[inline]
    pub fn len_in(self, total: usize) -> usize {
        if self.index as usize + 1 == self.count as usize {
            total.saturating_sub(self.offset())
        } else {
            self.chunk as usize
        }
    }

    /// Whether index, count and chunk describe a split of `total` bytes.
    #[inline]
    pub fn fits(self, total: usize) -> bool {
        self.count >= 2
            && self.index < self.count
            && self.chunk > 0
            && total.div_ceil(self.chunk as usize) == self.count as usize
    }
}

/// What a decoded datagram carries.
#[derive(Debug, Clone, Copy)]
pub enum Frame<'a> {
    /// One or more whole messages.
    Messages {
        /// Sent in answer to a request.
        retransmit: bool,
        /// Sequence of the first message.
        first_seq: u64,
        /// The messages, already checked.
        messages: Messages<'a>,
    },
    /// One fragment of a large message.
    Fragment {
        /// Sent in answer to a request.
        retransmit: bool,
        /// The whole message's header (`len` is the whole length).
        header: Header,
        /// Where these bytes go.
        fragment: Fragment,
        /// The fragment's bytes.
        bytes: &'a [u8],
    },
    /// The publisher is alive.
    Heartbeat {
        /// Latest sequence published (0 before the first message).
        latest: u64,
        /// Oldest sequence retained (0 when none).
        oldest: u64,
    },
    /// Please resend `count` messages from `from`.
    Request {
        /// First sequence wanted.
        from: u64,
        /// Messages wanted.
        count: u64,
    },
    /// `count` messages from `from` are no longer retained.
    NotAvailable {
        /// First sequence not available.
        from: u64,
        /// Messages not available.
        count: u64,
    },
    /// The stream is closed.
    EndOfStream {
        /// Last sequence published.
        last_seq: u64,
        /// Oldest sequence retained (0 when none).
        oldest: u64,
    },
    /// The requester is over its share: `count` messages from `from` will
    /// not be resent.
    Throttled {
        /// First sequence refused.
        from: u64,
        /// Messages refused.
        count: u64,
    },
}

impl Frame<'_> {
    /// Data, heartbeats and end of stream come from the publisher on the
    /// stream's lines; requests and replies travel beside them.
    #[inline]
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            Frame::Messages {
                retransmit: false,
                ..
            } | Frame::Fragment {
                retransmit: false,
                ..
            } | Frame::Heartbeat { .. }
                | Frame::EndOfStream { .. }
        )
    }
}

/// A datagram checked against the receiver's limits.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Publisher incarnation.
    pub epoch: u64,
    /// Content.
    pub frame: Frame<'a>,
}

/// What a receiver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The one stream this receiver follows.
    pub stream_id: u32,
    /// Longest datagram accepted.
    pub max_datagram: usize,
    /// Longest message accepted.
    pub max_message: usize,
}

/// The messages of a data datagram, in order. [`decode`] has checked every
/// one, so iterating cannot fail.
#[derive(Debug, Clone, Copy)]
pub struct Messages<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Messages<'a> {
    type Item = (Header, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        // `decode` checked every header: read the fields, not the checks
        // again (a short rest still ends the walk rather than panicking).
        let (head, rest) = self.rest.split_first_chunk::<HEADER_LEN>()?;
        let h = Header {
            seq: u64_at(head, 0),
            len: u32_at(head, 8),
            flags: u32_at(head, 12),
            timestamp: u64_at(head, 16),
        };
        let payload = rest.get(..h.len as usize)?;
        self.rest = &rest[payload.len()..];
        self.left -= 1;
        Some((h, payload))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Messages<'_> {}

#[inline]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Checks a datagram against `limits` and returns what it carries.
///
/// ```
/// use mdbus::recovery::frame::{self, Frame, Kind, Limits};
/// let mut buf = [0u8; frame::DATAGRAM_HEADER_LEN];
/// frame::encode_control(&mut buf, Kind::Heartbeat, 7, 1, 42, 3);
/// let limits = Limits { stream_id: 7, max_datagram: 1472, max_message: 1024 };
/// let d = frame::decode(&buf, &limits).unwrap();
/// assert!(matches!(d.frame, Frame::Heartbeat { latest: 42, oldest: 3 }));
/// assert_eq!(frame::decode(&buf[..20], &limits).unwrap_err(), frame::DropReason::Truncated);
/// ```
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Datagram<'a>, DropReason> {
    if buf.len() < DATAGRAM_HEADER_LEN {
        return Err(DropReason::Truncated);
    }
    if buf[0..4] != MAGIC {
        return Err(DropReason::BadMagic);
    }
    if buf[4] != VERSION {
        return Err(DropReason::BadVersion);
    }
    if buf.len() > limits.max_datagram {
        return Err(DropReason::Oversize);
    }
    let length = u32_at(buf, 12) as usize;
    if length > buf.len() {
        return Err(DropReason::Truncated);
    }
    if length != buf.len() {
        return Err(DropReason::BadLength);
    }
    // A MAC, when the kind byte says there is one, is the last MAC_LEN
    // bytes; whoever holds the key has checked it before this (see
    // `super::mac`), and the rest is decoded without it.
    let (kind, buf) = if buf[5] & KIND_MAC != 0 {
        if buf.len() < DATAGRAM_HEADER_LEN + MAC_LEN {
            return Err(DropReason::Truncated);
        }
        (buf[5] & !KIND_MAC, &buf[..buf.len() - MAC_LEN])
    } else {
        (buf[5], buf)
    };
    let kind = Kind::from_byte(kind).ok_or(DropReason::BadKind)?;
    if u32_at(buf, 8) != limits.stream_id {
        return Err(DropReason::OtherStream);
    }
    let count = u16_at(buf, 6);
    let epoch = u64_at(buf, 16);
    let seq = u64_at(buf, 24);
    let arg = u64_at(buf, 32);
    let body = &buf[DATAGRAM_HEADER_LEN..];
    let frame = match kind {
        Kind::Data | Kind::Retransmit => {
            let retransmit = kind == Kind::Retransmit;
            if arg == 0 {
                decode_messages(body, count, seq, retransmit, limits)?
            } else {
                decode_fragment(body, count, seq, arg, retransmit, limits)?
            }
        }
        Kind::Heartbeat
        | Kind::EndOfStream
        | Kind::Request
        | Kind::NotAvailable
        | Kind::Throttled => {
            if count != 0 {
                return Err(DropReason::BadCount);
            }
            if !body.is_empty() {
                return Err(DropReason::BadLength);
            }
            match kind {
                Kind::Heartbeat | Kind::EndOfStream => {
                    // The oldest retained message is never newer than the
                    // latest one.
                    if arg > seq || seq > MAX_SEQ {
                        return Err(DropReason::BadSequence);
                    }
                    if kind == Kind::Heartbeat {
                        Frame::Heartbeat {
                            latest: seq,
                            oldest: arg,
                        }
                    } else {
                        Frame::EndOfStream {
                            last_seq: seq,
                            oldest: arg,
                        }
                    }
                }
                _ => {
                    if arg == 0 {
                        return Err(DropReason::BadCount);
                    }
                    if seq == 0 || arg > MAX_SEQ || seq > MAX_SEQ - arg {
                        return Err(DropReason::BadSequence);
                    }
                    match kind {
                        Kind::Request => Frame::Request {
                            from: seq,
                            count: arg,
                        },
                        Kind::NotAvailable => Frame::NotAvailable {
                            from: seq,
                            count: arg,
                        },
                        _ => Frame::Throttled {
                            from: seq,
                            count: arg,
                        },
                    }
                }
            }
        }
    };
    Ok(Datagram { epoch, frame })
}

fn decode_messages<'a>(
    body: &'a [u8],
    count: u16,
    first_seq: u64,
    retransmit: bool,
    limits: &Limits,
) -> Result<Frame<'a>, DropReason> {
    if count == 0 {
        return Err(DropReason::BadCount);
    }
    if first_seq == 0 || first_seq > MAX_SEQ - count as u64 {
        return Err(DropReason::BadSequence);
    }
    let mut rest = body;
    for i in 0..count as u64 {
        if rest.len() < HEADER_LEN {
            return Err(DropReason::BadCount);
        }
        let (h, payload) = Header::decode(rest).map_err(|e| match e {
            crate::wire::HeaderError::UnknownFlags(_) => DropReason::BadFlags,
            crate::wire::HeaderError::LengthOverrun { .. } => DropReason::BadLength,
            crate::wire::HeaderError::Short(_) => DropReason::BadCount,
        })?;
        if payload.len() > limits.max_message {
            return Err(DropReason::TooLarge);
        }
        if h.seq != first_seq + i {
            return Err(DropReason::BadSequence);
        }
        rest = &rest[HEADER_LEN + payload.len()..];
    }
    if !rest.is_empty() {
        return Err(DropReason::BadCount);
    }
    Ok(Frame::Messages {
        retransmit,
        first_seq,
        messages: Messages {
            rest: body,
            left: count,
        },
    })
}

fn decode_fragment<'a>(
    body: &'a [u8],
    count: u16,
    seq: u64,
    arg: u64,
    retransmit: bool,
    limits: &Limits,
) -> Result<Frame<'a>, DropReason> {
    if count != 1 || body.len() < HEADER_LEN {
        return Err(DropReason::BadFragment);
    }
    // The message header's length is the whole message, not the bytes in
    // this datagram, so it is read field by field rather than with
    // `Header::decode`.
    let header = Header {
        seq: u64_at(body, 0),
        len: u32_at(body, 8),
        flags: u32_at(body, 12),
        timestamp: u64_at(body, 16),
    };
    if header.flags & !KNOWN_FLAGS != 0 {
        return Err(DropReason::BadFlags);
    }
    if seq == 0 || seq > MAX_SEQ || header.seq != seq {
        return Err(DropReason::BadSequence);
    }
    let total = header.len as usize;
    if total > limits.max_message {
        return Err(DropReason::TooLarge);
    }
    let fragment = Fragment::from_arg(arg);
    let bytes = &body[HEADER_LEN..];
    if !fragment.fits(total) || bytes.len() != fragment.len_in(total) {
        return Err(DropReason::BadFragment);
    }
    Ok(Frame::Fragment {
        retransmit,
        header,
        fragment,
        bytes,
    })
}

/// Writes a control datagram (heartbeat, request, not-available, end of
/// stream, throttled), which is the header alone.
pub fn encode_control(
    out: &mut [u8; DATAGRAM_HEADER_LEN],
    kind: Kind,
    stream_id: u32,
    epoch: u64,
    seq: u64,
    arg: u64,
) {
    DatagramHeader {
        kind,
        count: 0,
        stream_id,
        length: DATAGRAM_HEADER_LEN as u32,
        epoch,
        seq,
        arg,
    }
    .encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        stream_id: 9,
        max_datagram: 512,
        max_message: 1000,
    };

    /// A data datagram with messages `first..first+n`, payload `i` bytes of
    /// value `i` for message `i`.
    fn data(first: u64, n: u16) -> Vec<u8> {
        let mut b = vec![0u8; DATAGRAM_HEADER_LEN];
        for i in 0..n as u64 {
            let len = (i % 5) as usize;
            let mut h = [0u8; HEADER_LEN];
            Header {
                seq: first + i,
                len: len as u32,
                flags: 0,
                timestamp: 0,
            }
            .encode(&mut h);
            b.extend_from_slice(&h);
            b.extend(std::iter::repeat_n(i as u8, len));
        }
        let len = b.len() as u32;
        DatagramHeader {
            kind: Kind::Data,
            count: n,
            stream_id: 9,
            length: len,
            epoch: 1,
            seq: first,
            arg: 0,
        }
        .encode(&mut b);
        b
    }

    fn fragment(seq: u64, total: usize, f: Fragment) -> Vec<u8> {
        let mut b = vec![0u8; DATAGRAM_HEADER_LEN + HEADER_LEN];
        Header {
            seq,
            len: total as u32,
            flags: 0,
            timestamp: 0,
        }
        .encode(&mut b[DATAGRAM_HEADER_LEN..]);
        b.extend(std::iter::repeat_n(7u8, f.len_in(total)));
        let len = b.len() as u32;
        DatagramHeader {
            kind: Kind::Retransmit,
            count: 1,
            stream_id: 9,
            length: len,
            epoch: 1,
            seq,
            arg: f.to_arg(),
        }
        .encode(&mut b);
        b
    }

    fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn header_fields_sit_at_their_documented_offsets() {
        let mut b = [0u8; DATAGRAM_HEADER_LEN];
        encode_control(&mut b, Kind::Request, 0x0A0B0C0D, 0x11, 0x22, 0x33);
        assert_eq!(&b[0..4], b"MDBD");
        assert_eq!(b[4], VERSION);
        assert_eq!(b[5], 4);
        assert_eq!(&b[6..8], &[0, 0]);
        assert_eq!(&b[8..12], &[0x0D, 0x0C, 0x0B, 0x0A]);
        assert_eq!(&b[12..16], &[40, 0, 0, 0]);
        assert_eq!(b[16], 0x11);
        assert_eq!(b[24], 0x22);
        assert_eq!(b[32], 0x33);
        let f = Fragment {
            index: 2,
            count: 3,
            chunk: 0x01020304,
        };
        assert_eq!(f.to_arg(), 0x0102_0304_0003_0002);
        assert_eq!(Fragment::from_arg(f.to_arg()), f);
    }

    #[test]
    fn the_example_in_wire_md_decodes() {
        let hex = "4d444244 01 01 0200 01000000 60000000 0200000000000000 0700000000000000 \
                   0000000000000000 \
                   0700000000000000 03000000 00000000 0000000000000000 616263 \
                   0800000000000000 05000000 00000000 0000000000000000 68656c6c6f";
        let digits: Vec<u8> = hex.bytes().filter(u8::is_ascii_hexdigit).collect();
        let b: Vec<u8> = digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect();
        let limits = Limits {
            stream_id: 1,
            max_datagram: 1472,
            max_message: 100,
        };
        let d = decode(&b, &limits).unwrap();
        assert_eq!(d.epoch, 2);
        let Frame::Messages { messages, .. } = d.frame else {
            panic!()
        };
        let got: Vec<(u64, &[u8])> = messages.map(|(h, p)| (h.seq, p)).collect();
        assert_eq!(got, vec![(7, &b"abc"[..]), (8, &b"hello"[..])]);
    }

    #[test]
    fn data_round_trips_with_every_message_checked() {
        let b = data(5, 4);
        let d = decode(&b, &LIMITS).unwrap();
        assert_eq!(d.epoch, 1);
        let Frame::Messages {
            retransmit,
            first_seq,
            messages,
        } = d.frame
        else {
            panic!("{d:?}")
        };
        assert!(!retransmit);
        assert_eq!(first_seq, 5);
        let got: Vec<(u64, Vec<u8>)> = messages.map(|(h, p)| (h.seq, p.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (5, vec![]),
                (6, vec![1]),
                (7, vec![2, 2]),
                (8, vec![3, 3, 3])
            ]
        );
    }

    #[test]
    fn control_kinds_round_trip() {
        let mut b = [0u8; DATAGRAM_HEADER_LEN];
        for (kind, seq, arg) in [
            (Kind::Heartbeat, 10, 3),
            (Kind::Request, 4, 6),
            (Kind::NotAvailable, 1, 2),
            (Kind::EndOfStream, 10, 0),
            (Kind::Throttled, 7, 5),
        ] {
            encode_control(&mut b, kind, 9, 2, seq, arg);
            let d = decode(&b, &LIMITS).unwrap();
            assert_eq!(d.epoch, 2);
            let ok = match d.frame {
                Frame::Heartbeat { latest, oldest } => (latest, oldest) == (seq, arg),
                Frame::Request { from, count } => (from, count) == (seq, arg),
                Frame::NotAvailable { from, count } => (from, count) == (seq, arg),
                Frame::EndOfStream { last_seq, oldest } => (last_seq, oldest) == (seq, arg),
                Frame::Throttled { from, count } => (from, count) == (seq, arg),
                _ => false,
            };
            assert!(ok, "{kind:?} {:?}", d.frame);
        }
    }

    #[test]
    fn each_malformation_has_its_own_reason() {
        let good = data(5, 3);
        let check = |b: &[u8], want: DropReason| assert_eq!(decode(b, &LIMITS).unwrap_err(), want);

        check(&good[..39], DropReason::Truncated);
        check(&good[..good.len() - 1], DropReason::Truncated);
        let mut b = good.clone();
        b[0] = b'X';
        check(&b, DropReason::BadMagic);
        let mut b = good.clone();
        b[4] = 2;
        check(&b, DropReason::BadVersion);
        let mut b = good.clone();
        b[5] = 0;
        check(&b, DropReason::BadKind);
        let mut b = good.clone();
        b[8] = 8;
        check(&b, DropReason::OtherStream);
        // length field says less than present
        let mut b = good.clone();
        b.push(0);
        check(&b, DropReason::BadLength);
        // count overruns the bytes
        let mut b = good.clone();
        b[6] = 4;
        check(&b, DropReason::BadCount);
        // count leaves bytes over
        let mut b = good.clone();
        b[6] = 2;
        check(&b, DropReason::BadCount);
        let mut b = good.clone();
        b[6] = 0;
        check(&b, DropReason::BadCount);
        // a message's length lies (points past the end)
        let mut b = good.clone();
        let last = b.len() - (HEADER_LEN + 2);
        set_u32(&mut b, last + 8, 50);
        check(&b, DropReason::BadLength);
        // second message's sequence is not first + 1
        let mut b = good.clone();
        b[DATAGRAM_HEADER_LEN + HEADER_LEN] = 9;
        check(&b, DropReason::BadSequence);
        // sequence 0 never exists
        let z = data(0, 1);
        check(&z, DropReason::BadSequence);
        // unknown flag bits
        let mut b = good.clone();
        b[DATAGRAM_HEADER_LEN + 12] = 0x80;
        check(&b, DropReason::BadFlags);
        // longer than the receiver's datagram limit
        let big = data(1, 60);
        assert!(big.len() > LIMITS.max_datagram);
        check(&big, DropReason::Oversize);
        // control datagram with a body or a count
        let mut c = [0u8; DATAGRAM_HEADER_LEN];
        encode_control(&mut c, Kind::Request, 9, 1, 5, 0);
        check(&c, DropReason::BadCount);
        encode_control(&mut c, Kind::Request, 9, 1, 0, 3);
        check(&c, DropReason::BadSequence);
        encode_control(&mut c, Kind::Request, 9, 1, u64::MAX, 3);
        check(&c, DropReason::BadSequence);
        encode_control(&mut c, Kind::Heartbeat, 9, 1, MAX_SEQ + 1, 0);
        check(&c, DropReason::BadSequence);
        encode_control(&mut c, Kind::Heartbeat, 9, 1, 5, 6);
        check(&c, DropReason::BadSequence);
        c[6] = 1;
        check(&c, DropReason::BadCount);
    }

    #[test]
    fn fragments_are_checked_against_their_message() {
        let f = Fragment {
            index: 1,
            count: 3,
            chunk: 400,
        };
        let b = fragment(4, 1000, f);
        let d = decode(&b, &LIMITS).unwrap();
        let Frame::Fragment {
            retransmit,
            header,
            fragment: got,
            bytes,
        } = d.frame
        else {
            panic!()
        };
        assert!(retransmit);
        assert_eq!((header.seq, header.len, got), (4, 1000, f));
        assert_eq!(bytes.len(), 400);
        let last = Fragment { index: 2, ..f };
        let b = fragment(4, 1000, last);
        let d = decode(&b, &LIMITS).unwrap();
        assert!(matches!(d.frame, Frame::Fragment { bytes, .. } if bytes.len() == 200));

        let bad = |f: Fragment, total: usize| {
            let b = fragment(4, total, f);
            decode(&b, &LIMITS).unwrap_err()
        };
        // count disagrees with total / chunk
        assert_eq!(
            bad(Fragment { count: 4, ..f }, 1000),
            DropReason::BadFragment
        );
        // index past count
        assert_eq!(
            bad(Fragment { index: 3, ..f }, 1000),
            DropReason::BadFragment
        );
        // a single fragment is not a fragment
        assert_eq!(
            bad(
                Fragment {
                    index: 0,
                    count: 1,
                    chunk: 400
                },
                300
            ),
            DropReason::BadFragment
        );
        // message larger than the receiver's maximum
        assert_eq!(
            bad(
                Fragment {
                    index: 0,
                    count: 3,
                    chunk: 400
                },
                1001
            ),
            DropReason::TooLarge
        );
        // bytes present differ from what the fragment should hold
        let mut b = fragment(4, 1000, f);
        b.pop();
        let len = b.len() as u32;
        set_u32(&mut b, 12, len);
        assert_eq!(decode(&b, &LIMITS).unwrap_err(), DropReason::BadFragment);
        // fragment header sequence differs from the datagram's
        let mut b = fragment(4, 1000, f);
        b[DATAGRAM_HEADER_LEN] = 5;
        assert_eq!(decode(&b, &LIMITS).unwrap_err(), DropReason::BadSequence);
        // fragment datagrams carry exactly one message
        let mut b = fragment(4, 1000, f);
        b[6] = 2;
        assert_eq!(decode(&b, &LIMITS).unwrap_err(), DropReason::BadFragment);
    }
}
