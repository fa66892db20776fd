//! MoldUDP64: Nasdaq's sequenced-datagram framing for ITCH over UDP.
//!
//! Reference: *MoldUDP64 Protocol Specification*, version 1.00 (Nasdaq,
//! 2009). Every number is big-endian.
//!
//! A downstream packet is a 20-byte header followed by message blocks:
//!
//! | field           | offset | length | meaning                                   |
//! |-----------------|--------|--------|-------------------------------------------|
//! | session         | 0      | 10     | ASCII session name                        |
//! | sequence number | 10     | 8      | sequence number of the first message      |
//! | message count   | 18     | 2      | messages in the packet; 0 heartbeat, 0xFFFF end of session |
//! | message blocks  | 20     | ...    | each a 2-byte length then that many bytes |
//!
//! A request packet (sent to a re-request server) is the same 20-byte
//! header with nothing after it: session, first sequence wanted, and how
//! many messages.
//!
//! [`Packet`] parses a header and iterates over message blocks without
//! copying; [`PacketBuilder`] writes a packet into a caller's buffer.

use crate::alpha::Alpha;

/// A MoldUDP64 session name: 10 ASCII bytes, space-padded.
pub type Session = Alpha<10>;

/// Length of the downstream (and request) packet header.
pub const HEADER_LEN: usize = 20;
/// Length of the session field.
pub const SESSION_LEN: usize = 10;
/// Length of the length prefix of each message block.
pub const BLOCK_PREFIX_LEN: usize = 2;
/// Message count of a heartbeat packet.
pub const HEARTBEAT_COUNT: u16 = 0;
/// Message count of an end-of-session packet.
pub const END_OF_SESSION_COUNT: u16 = 0xFFFF;
/// The most messages one packet can announce (0xFFFF means end of session).
pub const MAX_MESSAGES_PER_PACKET: u16 = 0xFFFE;

const SEQUENCE_OFFSET: usize = 10;
const COUNT_OFFSET: usize = 18;

/// What a downstream packet is, from its message count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Carries `count` message blocks (1..=0xFFFE).
    Messages,
    /// Count 0: no messages; the sequence number is the next expected one.
    Heartbeat,
    /// Count 0xFFFF: the session is over; the sequence number is the next
    /// expected one.
    EndOfSession,
}

/// Why bytes are not a well-formed MoldUDP64 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Fewer bytes than the 20-byte header.
    #[error("MoldUDP64 packet of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    ShortHeader {
        /// Bytes present.
        len: usize,
    },
    /// The header announces more message blocks than the packet holds.
    #[error(
        "MoldUDP64 packet announces {count} messages but ends at byte {offset} \
         where message block {index} should start"
    )]
    MissingBlock {
        /// Message count from the header.
        count: u16,
        /// Zero-based index of the missing block.
        index: u16,
        /// Byte offset where it should start.
        offset: usize,
    },
    /// A block's length prefix is cut short by the end of the packet.
    #[error(
        "MoldUDP64 message block {index} at byte {offset}: only {available} byte of its \
         2-byte length prefix is present"
    )]
    TruncatedPrefix {
        /// Zero-based block index.
        index: u16,
        /// Byte offset of the block.
        offset: usize,
        /// Bytes left in the packet (1).
        available: usize,
    },
    /// A block claims more bytes than remain in the packet.
    #[error(
        "MoldUDP64 message block {index} at byte {offset} claims {len} bytes but only \
         {available} remain in the packet"
    )]
    BlockOverrun {
        /// Zero-based block index.
        index: u16,
        /// Byte offset of the block (its length prefix).
        offset: usize,
        /// Length the block claims.
        len: usize,
        /// Bytes remaining after the prefix.
        available: usize,
    },
    /// Bytes follow the last block the header announces (or follow the
    /// header of a heartbeat or end-of-session packet).
    #[error(
        "MoldUDP64 packet has {extra} bytes at byte {offset} after the {count} message \
         blocks its header announces"
    )]
    TrailingBytes {
        /// Blocks announced (0 for heartbeats and end of session).
        count: u16,
        /// Byte offset of the first extra byte.
        offset: usize,
        /// Number of extra bytes.
        extra: usize,
    },
}

/// A downstream packet whose header has been read; the message blocks are
/// checked as [`Packet::messages`] walks them (or all at once by
/// [`Packet::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    bytes: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Reads the header of a downstream packet. Borrows; never allocates.
    ///
    /// # Errors
    /// Fewer than 20 bytes.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, PacketError> {
        if bytes.len() < HEADER_LEN {
            return Err(PacketError::ShortHeader { len: bytes.len() });
        }
        Ok(Self { bytes })
    }

    /// [`Packet::parse`] followed by [`Packet::validate`]: the whole packet
    /// is well formed.
    ///
    /// # Errors
    /// As either of them.
    pub fn parse_strict(bytes: &'a [u8]) -> Result<Self, PacketError> {
        let p = Self::parse(bytes)?;
        p.validate()?;
        Ok(p)
    }

    /// The session name.
    pub fn session(&self) -> Session {
        let mut s = [0; SESSION_LEN];
        s.copy_from_slice(&self.bytes[..SESSION_LEN]);
        Alpha(s)
    }

    /// Sequence number of the first message (for heartbeats and end of
    /// session: the next sequence number the server will use).
    pub fn sequence(&self) -> u64 {
        let mut b = [0; 8];
        b.copy_from_slice(&self.bytes[SEQUENCE_OFFSET..SEQUENCE_OFFSET + 8]);
        u64::from_be_bytes(b)
    }

    /// The raw message count field.
    pub fn count(&self) -> u16 {
        u16::from_be_bytes([self.bytes[COUNT_OFFSET], self.bytes[COUNT_OFFSET + 1]])
    }

    /// Messages, heartbeat or end of session.
    pub fn kind(&self) -> PacketKind {
        match self.count() {
            HEARTBEAT_COUNT => PacketKind::Heartbeat,
            END_OF_SESSION_COUNT => PacketKind::EndOfSession,
            _ => PacketKind::Messages,
        }
    }

    /// Number of message blocks the header announces (0 for heartbeats and
    /// end of session).
    pub fn message_count(&self) -> u16 {
        match self.kind() {
            PacketKind::Messages => self.count(),
            PacketKind::Heartbeat | PacketKind::EndOfSession => 0,
        }
    }

    /// The sequence number after this packet's last message.
    pub fn next_sequence(&self) -> u64 {
        self.sequence()
            .wrapping_add(u64::from(self.message_count()))
    }

    /// The whole packet.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Iterates over the message blocks, yielding each message's sequence
    /// number and bytes (without the length prefix). Stops after the
    /// announced count; yields one error and then stops if the packet does
    /// not match its header.
    pub fn messages(&self) -> MessageBlocks<'a> {
        MessageBlocks {
            bytes: self.bytes,
            offset: HEADER_LEN,
            index: 0,
            count: self.message_count(),
            sequence: self.sequence(),
            done: false,
        }
    }

    /// Walks every block once: the count matches the blocks present, no
    /// block overruns the packet, and nothing follows the last block.
    ///
    /// # Errors
    /// The first mismatch found.
    pub fn validate(&self) -> Result<(), PacketError> {
        for block in self.messages() {
            block?;
        }
        Ok(())
    }
}

/// One message from a packet: its sequence number and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageBlock<'a> {
    /// The message's sequence number (the packet's plus its index).
    pub sequence: u64,
    /// The message bytes, without the 2-byte length prefix.
    pub data: &'a [u8],
}

/// Iterator over the message blocks of a [`Packet`]; see
/// [`Packet::messages`].
#[derive(Debug, Clone)]
pub struct MessageBlocks<'a> {
    bytes: &'a [u8],
    offset: usize,
    index: u16,
    count: u16,
    sequence: u64,
    done: bool,
}

impl<'a> Iterator for MessageBlocks<'a> {
    type Item = Result<MessageBlock<'a>, PacketError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = self.bytes.get(self.offset..).unwrap_or_default();
        if self.index == self.count {
            self.done = true;
            return if rest.is_empty() {
                None
            } else {
                Some(Err(PacketError::TrailingBytes {
                    count: self.count,
                    offset: self.offset,
                    extra: rest.len(),
                }))
            };
        }
        // Any error ends the walk: after a bad length nothing that follows
        // can be trusted to be a block boundary.
        self.done = true;
        let (prefix, body) = match rest {
            [] => {
                return Some(Err(PacketError::MissingBlock {
                    count: self.count,
                    index: self.index,
                    offset: self.offset,
                }))
            }
            [_] => {
                return Some(Err(PacketError::TruncatedPrefix {
                    index: self.index,
                    offset: self.offset,
                    available: 1,
                }))
            }
            [hi, lo, body @ ..] => ([*hi, *lo], body),
        };
        let len = usize::from(u16::from_be_bytes(prefix));
        let Some(data) = body.get(..len) else {
            return Some(Err(PacketError::BlockOverrun {
                index: self.index,
                offset: self.offset,
                len,
                available: body.len(),
            }));
        };
        self.done = false;
        let block = MessageBlock {
            sequence: self.sequence.wrapping_add(u64::from(self.index)),
            data,
        };
        self.offset += BLOCK_PREFIX_LEN + len;
        self.index += 1;
        Some(Ok(block))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // Up to one error item beyond the remaining blocks.
            let left = usize::from(self.count - self.index);
            (0, Some(left + 1))
        }
    }
}

impl std::iter::FusedIterator for MessageBlocks<'_> {}

/// Why a packet could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The buffer (or the maximum size asked for) cannot hold even the
    /// 20-byte header.
    #[error("MoldUDP64 packet buffer of {max} bytes cannot hold the {HEADER_LEN}-byte header")]
    BufferTooSmall {
        /// Usable buffer size.
        max: usize,
    },
    /// The message does not fit in the space left; finish this packet and
    /// start another.
    #[error(
        "MoldUDP64 packet full: a {len}-byte message needs {needed} bytes with its prefix, \
         {available} are left"
    )]
    Full {
        /// Message length.
        len: usize,
        /// Bytes needed, prefix included.
        needed: usize,
        /// Bytes left before the maximum size.
        available: usize,
    },
    /// The packet already holds the most messages a count can announce.
    #[error("MoldUDP64 packet already holds {MAX_MESSAGES_PER_PACKET} messages")]
    TooManyMessages,
    /// A message longer than a 2-byte length prefix can describe.
    #[error("a {len}-byte message exceeds the 65535-byte limit of a MoldUDP64 message block")]
    MessageTooLong {
        /// Message length.
        len: usize,
    },
}

/// Writes one downstream packet into a caller-owned buffer: header first,
/// then message blocks, the count filled in by [`PacketBuilder::finish`].
/// Never allocates.
///
/// ```
/// use mdbus_feed::moldudp64::{Packet, PacketBuilder, Session};
///
/// let mut buf = [0u8; 1400];
/// let mut b = PacketBuilder::new(&mut buf, Session::new("SESSION01").unwrap(), 1).unwrap();
/// b.push(b"first").unwrap();
/// b.push(b"second").unwrap();
/// let packet = Packet::parse_strict(b.finish()).unwrap();
/// assert_eq!(packet.count(), 2);
/// assert_eq!(packet.next_sequence(), 3);
/// ```
#[derive(Debug)]
pub struct PacketBuilder<'b> {
    buf: &'b mut [u8],
    len: usize,
    count: u16,
    sequence: u64,
}

impl<'b> PacketBuilder<'b> {
    /// Starts a packet whose first message has sequence number `sequence`;
    /// the packet may use all of `buf`.
    ///
    /// # Errors
    /// `buf` is shorter than the header.
    pub fn new(buf: &'b mut [u8], session: Session, sequence: u64) -> Result<Self, BuildError> {
        let max = buf.len();
        Self::with_max_size(buf, session, sequence, max)
    }

    /// Like [`PacketBuilder::new`], but the packet never grows past
    /// `max_size` bytes (e.g. to stay inside a path MTU).
    ///
    /// # Errors
    /// `min(max_size, buf.len())` is shorter than the header.
    pub fn with_max_size(
        buf: &'b mut [u8],
        session: Session,
        sequence: u64,
        max_size: usize,
    ) -> Result<Self, BuildError> {
        let max = max_size.min(buf.len());
        if max < HEADER_LEN {
            return Err(BuildError::BufferTooSmall { max });
        }
        let buf = &mut buf[..max];
        write_header(buf, session, sequence, 0);
        Ok(Self {
            buf,
            len: HEADER_LEN,
            count: 0,
            sequence,
        })
    }

    /// Reserves a block of `len` bytes and returns it for the caller to
    /// fill in place (e.g. an ITCH encoder writing straight into the packet).
    ///
    /// # Errors
    /// The block does not fit, the packet already holds 0xFFFE messages, or
    /// `len` exceeds 65,535.
    pub fn claim(&mut self, len: usize) -> Result<&mut [u8], BuildError> {
        let prefix = u16::try_from(len).map_err(|_| BuildError::MessageTooLong { len })?;
        if self.count == MAX_MESSAGES_PER_PACKET {
            return Err(BuildError::TooManyMessages);
        }
        let needed = BLOCK_PREFIX_LEN + len;
        let available = self.buf.len() - self.len;
        if needed > available {
            return Err(BuildError::Full {
                len,
                needed,
                available,
            });
        }
        let start = self.len;
        self.buf[start..start + BLOCK_PREFIX_LEN].copy_from_slice(&prefix.to_be_bytes());
        self.len += needed;
        self.count += 1;
        Ok(&mut self.buf[start + BLOCK_PREFIX_LEN..self.len])
    }

    /// Appends one message block.
    ///
    /// # Errors
    /// As [`PacketBuilder::claim`]; on error the packet is unchanged.
    pub fn push(&mut self, message: &[u8]) -> Result<(), BuildError> {
        self.claim(message.len())?.copy_from_slice(message);
        Ok(())
    }

    /// True if a message of `len` bytes would fit.
    pub fn fits(&self, len: usize) -> bool {
        len <= usize::from(u16::MAX)
            && self.count < MAX_MESSAGES_PER_PACKET
            && BLOCK_PREFIX_LEN + len <= self.buf.len() - self.len
    }

    /// Messages added so far.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// True while no message has been added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Packet length so far, header included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Sequence number of the first message.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Sequence number the next packet should start at.
    pub fn next_sequence(&self) -> u64 {
        self.sequence.wrapping_add(u64::from(self.count))
    }

    /// Writes the message count and returns the finished packet. A packet
    /// finished with no message is a heartbeat.
    pub fn finish(self) -> &'b [u8] {
        self.buf[COUNT_OFFSET..COUNT_OFFSET + 2].copy_from_slice(&self.count.to_be_bytes());
        let len = self.len;
        let buf: &'b [u8] = self.buf;
        &buf[..len]
    }
}

fn write_header(buf: &mut [u8], session: Session, sequence: u64, count: u16) {
    buf[..SESSION_LEN].copy_from_slice(session.as_bytes());
    buf[SEQUENCE_OFFSET..SEQUENCE_OFFSET + 8].copy_from_slice(&sequence.to_be_bytes());
    buf[COUNT_OFFSET..COUNT_OFFSET + 2].copy_from_slice(&count.to_be_bytes());
}

/// A heartbeat: header only, count 0, `next_sequence` the next sequence
/// number the server will use.
pub fn heartbeat(session: Session, next_sequence: u64) -> [u8; HEADER_LEN] {
    let mut b = [0; HEADER_LEN];
    write_header(&mut b, session, next_sequence, HEARTBEAT_COUNT);
    b
}

/// An end-of-session packet: header only, count 0xFFFF.
pub fn end_of_session(session: Session, next_sequence: u64) -> [u8; HEADER_LEN] {
    let mut b = [0; HEADER_LEN];
    write_header(&mut b, session, next_sequence, END_OF_SESSION_COUNT);
    b
}

/// A retransmission request sent to a re-request server: `count` messages
/// of `session` starting at `sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// Session the messages belong to.
    pub session: Session,
    /// First sequence number wanted.
    pub sequence: u64,
    /// Number of messages wanted.
    pub count: u16,
}

/// Why bytes are not a request packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a MoldUDP64 request packet is exactly {HEADER_LEN} bytes; got {len}")]
pub struct RequestError {
    /// Bytes present.
    pub len: usize,
}

impl Request {
    /// Length of a request packet.
    pub const LEN: usize = HEADER_LEN;

    /// The 20-byte request packet.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        write_header(&mut b, self.session, self.sequence, self.count);
        b
    }

    /// Reads a request packet.
    ///
    /// # Errors
    /// The packet is not exactly 20 bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, RequestError> {
        if bytes.len() != Self::LEN {
            return Err(RequestError { len: bytes.len() });
        }
        let p = Packet { bytes };
        Ok(Self {
            session: p.session(),
            sequence: p.sequence(),
            count: p.count(),
        })
    }
}
