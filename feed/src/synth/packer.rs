//! Packing generated messages into MoldUDP64 downstream packets.

use super::SynthMessage;
use crate::itch::{Timestamp, MAX_MESSAGE_LEN};
use crate::moldudp64::{self, BuildError, PacketBuilder, Session, BLOCK_PREFIX_LEN, HEADER_LEN};

/// One packet from a [`MoldPacker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedPacket<'a> {
    /// Sequence number of the first message.
    pub sequence: u64,
    /// Messages in the packet.
    pub count: u16,
    /// Timestamp of the first message.
    pub first_timestamp: Timestamp,
    /// Timestamp of the last message: the earliest the packet can be sent.
    pub send_time: Timestamp,
    /// The whole MoldUDP64 packet.
    pub bytes: &'a [u8],
}

/// Packs [`SynthMessage`]s into MoldUDP64 packets of at most a given size,
/// numbering messages from a first sequence number, as a feed server would.
///
/// A packet closes when the next message would not fit, or when that
/// message's timestamp is more than the packing window after the packet's
/// first message (a server does not hold a message back waiting for
/// company). Packets are built in one buffer owned by the packer: packing
/// allocates nothing per packet.
///
/// ```
/// use mdbus_feed::moldudp64::{Packet, Session};
/// use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
///
/// let config = SynthConfig { symbols: 5, order_messages: 500, ..SynthConfig::default() };
/// let day = Generator::new(&config).unwrap();
/// let mut packer = MoldPacker::new(day, Session::new("TEST000001").unwrap(), 1, 1200).unwrap();
/// let mut messages = 0;
/// while let Some(p) = packer.next_packet() {
///     assert!(p.bytes.len() <= 1200);
///     messages += Packet::parse_strict(p.bytes).unwrap().message_count() as u64;
/// }
/// assert_eq!(packer.next_sequence(), 1 + messages);
/// ```
#[derive(Debug)]
pub struct MoldPacker<I> {
    source: I,
    pending: Option<SynthMessage>,
    session: Session,
    next_sequence: u64,
    max_packet: usize,
    window_ns: u64,
    buf: Box<[u8]>,
}

impl<I: Iterator<Item = SynthMessage>> MoldPacker<I> {
    /// Default packing window: messages up to 10 µs after a packet's first
    /// message may share its packet.
    pub const DEFAULT_WINDOW_NS: u64 = 10_000;

    /// A packer numbering messages from `first_sequence` (MoldUDP64
    /// sessions start at 1), with packets of at most `max_packet_size`
    /// bytes (1,472 fills a standard Ethernet MTU).
    ///
    /// # Errors
    /// `max_packet_size` cannot hold the header plus one message of the
    /// longest ITCH type (72 bytes).
    pub fn new(
        source: I,
        session: Session,
        first_sequence: u64,
        max_packet_size: usize,
    ) -> Result<Self, BuildError> {
        let min = HEADER_LEN + BLOCK_PREFIX_LEN + MAX_MESSAGE_LEN;
        if max_packet_size < min {
            return Err(BuildError::BufferTooSmall {
                max: max_packet_size,
            });
        }
        Ok(Self {
            source,
            pending: None,
            session,
            next_sequence: first_sequence,
            max_packet: max_packet_size,
            window_ns: Self::DEFAULT_WINDOW_NS,
            buf: vec![0; max_packet_size].into_boxed_slice(),
        })
    }

    /// Sets the packing window: 0 packs only messages with equal
    /// timestamps, `u64::MAX` fills every packet.
    #[must_use]
    pub fn with_window(mut self, window_ns: u64) -> Self {
        self.window_ns = window_ns;
        self
    }

    /// The next packet, or `None` when the messages run out. The bytes
    /// borrow the packer's buffer until the next call.
    pub fn next_packet(&mut self) -> Option<PackedPacket<'_>> {
        let first = self.pending.take().or_else(|| self.source.next())?;
        // `new` checked that the buffer holds a header and any message, so
        // neither the builder nor the first push can fail.
        let mut b = PacketBuilder::with_max_size(
            &mut self.buf,
            self.session,
            self.next_sequence,
            self.max_packet,
        )
        .ok()?;
        b.push(first.bytes()).ok()?;
        let start = first.timestamp();
        let mut last = start;
        for m in self.source.by_ref() {
            let late = m.timestamp().nanos().saturating_sub(start.nanos()) > self.window_ns;
            if late || !b.fits(m.bytes().len()) {
                self.pending = Some(m);
                break;
            }
            // `fits` said yes.
            if b.push(m.bytes()).is_err() {
                self.pending = Some(m);
                break;
            }
            last = m.timestamp();
        }
        let sequence = b.sequence();
        let count = b.count();
        self.next_sequence = b.next_sequence();
        Some(PackedPacket {
            sequence,
            count,
            first_timestamp: start,
            send_time: last,
            bytes: b.finish(),
        })
    }

    /// The sequence number the next packet will start at (after the last
    /// message packed so far).
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// The session name.
    pub fn session(&self) -> Session {
        self.session
    }

    /// A heartbeat packet for the current position.
    pub fn heartbeat(&self) -> [u8; HEADER_LEN] {
        moldudp64::heartbeat(self.session, self.next_sequence)
    }

    /// The end-of-session packet to send after the last packet.
    pub fn end_of_session(&self) -> [u8; HEADER_LEN] {
        moldudp64::end_of_session(self.session, self.next_sequence)
    }
}
