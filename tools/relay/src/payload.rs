//! What the relay publishes: one mdbus message per ITCH message.
//!
//! | bytes | what |
//! | --- | --- |
//! | 0..8 | the message's MoldUDP64 sequence number, big-endian (for a BinaryFILE input, its position in the file, from 1) |
//! | 8.. | the ITCH 5.0 message exactly as the exchange sent it (type byte first, 12 to 50 bytes) |
//!
//! The mdbus sequence number of a message numbers it within its stream;
//! the MoldUDP64 sequence number places it in the whole feed, so a
//! consumer of several streams can merge them back into feed order. The
//! commit timestamp is the arrival time of the datagram that carried it
//! (`CLOCK_REALTIME`, ns), so a subscriber measures the relay's latency
//! and its own as `now - timestamp`.

use mdbus_feed::itch;

/// Bytes before the ITCH message.
pub const HEADER_LEN: usize = 8;
/// Largest payload: the header and the longest ITCH message.
pub const MAX_LEN: usize = HEADER_LEN + itch::MAX_MESSAGE_LEN;

/// A relayed message, as a subscriber reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayMessage<'a> {
    /// MoldUDP64 sequence number of the message in the upstream session.
    pub sequence: u64,
    /// The ITCH message.
    pub itch: &'a [u8],
}

impl<'a> RelayMessage<'a> {
    /// Splits a payload; `None` when it is shorter than the header or
    /// carries no ITCH bytes.
    pub fn parse(payload: &'a [u8]) -> Option<RelayMessage<'a>> {
        let (head, itch) = payload.split_first_chunk::<HEADER_LEN>()?;
        if itch.is_empty() {
            return None;
        }
        Some(RelayMessage {
            sequence: u64::from_be_bytes(*head),
            itch,
        })
    }

    /// Decodes the ITCH message.
    pub fn decode(&self) -> Result<itch::Message<'a>, itch::DecodeError> {
        itch::decode(self.itch)
    }
}

/// Writes a payload into `out` (at least `HEADER_LEN + itch.len()` bytes);
/// returns its length.
#[inline]
pub fn write(out: &mut [u8], sequence: u64, itch: &[u8]) -> usize {
    let n = HEADER_LEN + itch.len();
    out[..HEADER_LEN].copy_from_slice(&sequence.to_be_bytes());
    copy_short(&mut out[HEADER_LEN..n], itch);
    n
}

/// `dst.copy_from_slice(src)` for the lengths of ITCH messages (12 to 50
/// bytes) as two fixed-size moves that overlap in the middle, instead of
/// a call to `memcpy` (about 10 instructions a message, with its length
/// dispatch). Any other length takes `copy_from_slice`.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() != n {
        // Panics with the standard message, as `copy_from_slice` does.
        dst.copy_from_slice(src);
        return;
    }
    macro_rules! two_moves {
        ($w:literal) => {{
            let head: [u8; $w] = src[..$w].try_into().expect("n >= width");
            let tail: [u8; $w] = src[n - $w..].try_into().expect("n >= width");
            dst[..$w].copy_from_slice(&head);
            dst[n - $w..].copy_from_slice(&tail);
        }};
    }
    match n {
        32..=64 => two_moves!(32),
        16..=31 => two_moves!(16),
        8..=15 => two_moves!(8),
        _ => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips() {
        let mut buf = [0u8; MAX_LEN];
        let n = write(&mut buf, 0x0102_0304_0506_0708, b"Sxxxxxxxxxx0");
        assert_eq!(n, 20);
        assert_eq!(&buf[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let m = RelayMessage::parse(&buf[..n]).unwrap();
        assert_eq!(m.sequence, 0x0102_0304_0506_0708);
        assert_eq!(m.itch, b"Sxxxxxxxxxx0");
        assert_eq!(RelayMessage::parse(&buf[..8]), None);
        assert_eq!(RelayMessage::parse(&buf[..3]), None);
    }

    /// Every length from 0 to past the moves' widths is copied byte for
    /// byte, and nothing after it is touched.
    #[test]
    fn write_copies_every_length_exactly() {
        let src: Vec<u8> = (1..=100u8).collect();
        for len in 0..=src.len() {
            let mut buf = [0xEEu8; 120];
            let n = write(&mut buf, 0x1122_3344_5566_7788, &src[..len]);
            assert_eq!(n, HEADER_LEN + len);
            assert_eq!(&buf[..HEADER_LEN], &0x1122_3344_5566_7788u64.to_be_bytes());
            assert_eq!(&buf[HEADER_LEN..n], &src[..len], "length {len}");
            assert!(buf[n..].iter().all(|&b| b == 0xEE), "length {len}");
        }
    }
}
