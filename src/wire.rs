//! Fixed little-endian layouts of the data path.
//!
//! Every message on every transport is preceded by the same 24-byte header:
//!
//! | offset | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 8 | `seq` | sequence number in its stream or session, from 1 |
//! | 8 | 4 | `len` | payload bytes that follow the header |
//! | 12 | 4 | `flags` | [`FLAG_TIMESTAMP`], session control bits, reserved bits (0) |
//! | 16 | 8 | `timestamp` | send time in ns since the Unix epoch, 0 when absent |
//!
//! In a shared-memory ring the header is the first three 64-bit words of a
//! slot, the first of which doubles as the slot's publication marker.

/// Bytes of the message header.
pub const HEADER_LEN: usize = 24;
/// Header words (8 bytes each).
pub const HEADER_WORDS: usize = HEADER_LEN / 8;

/// The `timestamp` field holds a send time.
pub const FLAG_TIMESTAMP: u32 = 1;
/// Session control (byte-stream transports): the first message each side
/// sends, whose payload names the session (see [`hello`]).
pub const FLAG_HELLO: u32 = 1 << 1;
/// Session control (byte-stream transports): the sender closes the session
/// in order; no payload.
pub const FLAG_CLOSE: u32 = 1 << 2;
/// Session control (byte-stream transports): a credit update; `seq` holds
/// the number of messages the sender has consumed so far; no payload.
pub const FLAG_CREDIT: u32 = 1 << 3;
/// Streams: the message is a source-gap notice, not application data: its
/// 16-byte payload ([`source_gap`]) names a range of the publisher's own
/// upstream feed that was lost before it reached the publisher. Subscribers
/// turn it into [`Event::SourceGap`](crate::Event::SourceGap).
pub const FLAG_SOURCE_GAP: u32 = 1 << 4;
/// Flags this version defines; others must be zero.
pub const KNOWN_FLAGS: u32 =
    FLAG_TIMESTAMP | FLAG_HELLO | FLAG_CLOSE | FLAG_CREDIT | FLAG_SOURCE_GAP;

/// Bytes of a source-gap payload.
pub const SOURCE_GAP_LEN: usize = 16;

/// Payload of a source-gap notice: the upstream range `from..to` (end
/// exclusive), two little-endian u64s.
///
/// ```
/// let p = mdbus::wire::source_gap(100, 105);
/// assert_eq!(mdbus::wire::parse_source_gap(&p), Some((100, 105)));
/// assert_eq!(mdbus::wire::parse_source_gap(&p[..15]), None);
/// ```
pub fn source_gap(from: u64, to: u64) -> [u8; SOURCE_GAP_LEN] {
    let mut b = [0u8; SOURCE_GAP_LEN];
    b[..8].copy_from_slice(&from.to_le_bytes());
    b[8..].copy_from_slice(&to.to_le_bytes());
    b
}

/// Reads a source-gap payload: `None` unless it is 16 bytes holding a
/// non-empty range.
pub fn parse_source_gap(p: &[u8]) -> Option<(u64, u64)> {
    let b: &[u8; SOURCE_GAP_LEN] = p.try_into().ok()?;
    let from = u64::from_le_bytes(b[..8].try_into().ok()?);
    let to = u64::from_le_bytes(b[8..].try_into().ok()?);
    (from < to).then_some((from, to))
}

/// Payload of a session hello: a magic and version, the sender's largest
/// message, how many messages it can hold unread (the credits it grants),
/// and the session's name, so two ends configured for different sessions
/// refuse each other with a clear error.
///
/// ```
/// let h = mdbus::wire::hello("orders", 232, 4096);
/// assert_eq!(mdbus::wire::parse_hello(&h), Some(("orders", 232, 4096)));
/// ```
pub fn hello(name: &str, max_message: u32, capacity: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + name.len());
    v.extend_from_slice(HELLO_MAGIC);
    v.extend_from_slice(&max_message.to_le_bytes());
    v.extend_from_slice(&capacity.to_le_bytes());
    v.extend_from_slice(name.as_bytes());
    v
}

/// Reads a hello payload: the session name, the peer's largest message and
/// the credits it grants.
pub fn parse_hello(p: &[u8]) -> Option<(&str, u32, u32)> {
    let rest = p.strip_prefix(HELLO_MAGIC)?;
    let (max, rest) = rest.split_first_chunk::<4>()?;
    let (cap, name) = rest.split_first_chunk::<4>()?;
    Some((
        std::str::from_utf8(name).ok()?,
        u32::from_le_bytes(*max),
        u32::from_le_bytes(*cap),
    ))
}

/// First bytes of a hello payload: "MDBUS" and the protocol version.
pub const HELLO_MAGIC: &[u8; 8] = b"MDBUS\x00\x01\x00";

/// A decoded message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Sequence number.
    pub seq: u64,
    /// Payload length in bytes.
    pub len: u32,
    /// Flag bits.
    pub flags: u32,
    /// Send time (ns since the epoch) or 0.
    pub timestamp: u64,
}

/// Why bytes are not a valid header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("{0} bytes is too short for a 24-byte message header")]
    Short(usize),
    /// The length field claims more bytes than are present.
    #[error("header claims {claimed} payload bytes, {present} present")]
    LengthOverrun {
        /// Bytes claimed.
        claimed: u32,
        /// Bytes present.
        present: usize,
    },
    /// Undefined flag bits are set.
    #[error("unknown flag bits {0:#x}")]
    UnknownFlags(u32),
}

impl Header {
    /// Writes the header into the first 24 bytes of `out`.
    ///
    /// ```
    /// use mdbus::wire::{Header, HEADER_LEN};
    /// let h = Header { seq: 7, len: 3, flags: 0, timestamp: 0 };
    /// let mut buf = [0u8; HEADER_LEN + 3];
    /// h.encode(&mut buf);
    /// assert_eq!(Header::decode(&buf), Ok((h, &[0u8, 0, 0][..])));
    /// ```
    ///
    /// # Panics
    /// When `out` is shorter than [`HEADER_LEN`]; callers size their
    /// buffers from the same constant.
    #[inline]
    pub fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        out[16..24].copy_from_slice(&self.timestamp.to_le_bytes());
    }

    /// Reads a header and returns it with its payload, checking every field
    /// against the bytes present.
    #[inline]
    pub fn decode(buf: &[u8]) -> Result<(Header, &[u8]), HeaderError> {
        let Some((head, rest)) = buf.split_first_chunk::<HEADER_LEN>() else {
            return Err(HeaderError::Short(buf.len()));
        };
        let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        let flags = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
        if flags & !KNOWN_FLAGS != 0 {
            return Err(HeaderError::UnknownFlags(flags & !KNOWN_FLAGS));
        }
        if len as usize > rest.len() {
            return Err(HeaderError::LengthOverrun {
                claimed: len,
                present: rest.len(),
            });
        }
        let h = Header {
            seq: word(0),
            len,
            flags,
            timestamp: word(16),
        };
        Ok((h, &rest[..len as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_little_endian_at_fixed_offsets() {
        let h = Header {
            seq: 0x0102030405060708,
            len: 2,
            flags: FLAG_TIMESTAMP,
            timestamp: 0x1112131415161718,
        };
        let mut b = [0u8; 26];
        h.encode(&mut b);
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[8..12], &[2, 0, 0, 0]);
        assert_eq!(&b[12..16], &[1, 0, 0, 0]);
        assert_eq!(
            &b[16..24],
            &[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11]
        );
    }

    #[test]
    fn lying_lengths_short_buffers_and_unknown_flags_are_errors() {
        let mut b = [0u8; 30];
        Header {
            seq: 1,
            len: 7,
            flags: 0,
            timestamp: 0,
        }
        .encode(&mut b);
        assert_eq!(
            Header::decode(&b),
            Err(HeaderError::LengthOverrun {
                claimed: 7,
                present: 6
            })
        );
        assert_eq!(Header::decode(&b[..10]), Err(HeaderError::Short(10)));
        Header {
            seq: 1,
            len: 0,
            flags: 0x80,
            timestamp: 0,
        }
        .encode(&mut b);
        assert_eq!(Header::decode(&b), Err(HeaderError::UnknownFlags(0x80)));
    }
}
