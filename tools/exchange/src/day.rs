//! One trading day, generated and packed before it is sent: the packets
//! the lines carry and, by sequence number, every message the re-request
//! server may be asked for.

use std::sync::atomic::{AtomicU64, Ordering};

use mdbus_feed::moldudp64::{Session, BLOCK_PREFIX_LEN};
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};

use super::ExchangeError;

/// Where one packet of the day is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacketRef {
    offset: usize,
    len: usize,
    /// Sequence number of its first message.
    pub first: u64,
    /// Messages in it.
    pub count: u64,
}

/// A generated session: packets as sent, messages by sequence number.
#[derive(Debug)]
pub(crate) struct Day {
    /// The session name.
    pub session: Session,
    packets: Vec<u8>,
    /// Every packet, in sending order.
    pub index: Vec<PacketRef>,
    /// Offset in `packets` of message `s`'s bytes, at `s - 1`; its length
    /// is the block prefix just before.
    offsets: Vec<usize>,
    /// The sequence number after the last message.
    pub end: u64,
    /// Sequence number after the last message sent so far: the server
    /// answers nothing beyond it.
    sent_upto: AtomicU64,
}

impl Day {
    /// Generates and packs the whole session.
    pub fn generate(
        session: Session,
        synth: &SynthConfig,
        max_packet: usize,
    ) -> Result<Day, ExchangeError> {
        let mut packer =
            MoldPacker::new(Generator::new(synth)?, session, 1, max_packet).map_err(|e| {
                ExchangeError::MaxPacket {
                    max: max_packet,
                    reason: e.to_string(),
                }
            })?;
        let mut packets = Vec::new();
        let mut index = Vec::new();
        let mut offsets = Vec::new();
        while let Some(p) = packer.next_packet() {
            let offset = packets.len();
            packets.extend_from_slice(p.bytes);
            index.push(PacketRef {
                offset,
                len: p.bytes.len(),
                first: p.sequence,
                count: u64::from(p.count),
            });
            // Walk the blocks to record where each message starts.
            let mut at = offset + mdbus_feed::moldudp64::HEADER_LEN;
            for _ in 0..p.count {
                let len = usize::from(u16::from_be_bytes([packets[at], packets[at + 1]]));
                offsets.push(at + BLOCK_PREFIX_LEN);
                at += BLOCK_PREFIX_LEN + len;
            }
        }
        Ok(Day {
            session,
            packets,
            index,
            offsets,
            end: packer.next_sequence(),
            sent_upto: AtomicU64::new(1),
        })
    }

    /// The bytes of a packet.
    pub fn packet(&self, p: &PacketRef) -> &[u8] {
        &self.packets[p.offset..p.offset + p.len]
    }

    /// The bytes of message `sequence`, if the day has it.
    pub fn message(&self, sequence: u64) -> Option<&[u8]> {
        let i = usize::try_from(sequence.checked_sub(1)?).ok()?;
        let start = *self.offsets.get(i)?;
        let len = usize::from(u16::from_be_bytes([
            self.packets[start - 2],
            self.packets[start - 1],
        ]));
        Some(&self.packets[start..start + len])
    }

    /// Messages in the session.
    pub fn messages(&self) -> u64 {
        self.end - 1
    }

    /// Records that messages before `next` have been sent.
    pub fn mark_sent(&self, next: u64) {
        // Release: a server thread that sees `next` answers from bytes
        // written before the day was shared, so no data rides on it; the
        // ordering only keeps answers from running ahead of the lines.
        self.sent_upto.store(next, Ordering::Release);
    }

    /// Sequence number after the last message sent.
    pub fn sent_upto(&self) -> u64 {
        self.sent_upto.load(Ordering::Acquire)
    }
}
