//! The bytes of an archive: segment files of records, and their sparse
//! sequence indexes.
//!
//! A segment `DIR/<base_seq:020>.seg` starts with a 64-byte header (magic,
//! version, base sequence, creation time, preallocated size, the
//! publisher's epoch (version 2; 0: not known), CRC32C of the header), then
//! records, each 8-byte aligned:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | payload length (LE u32) |
//! | 4..8 | flags: the message's wire flags, [`FLAG_GAP`] for a gap record |
//! | 8..16 | sequence |
//! | 16..24 | timestamp (ns since the epoch, 0 when none) |
//! | 24..24+len | payload (a gap record: the LE u64 end of the gap, exclusive) |
//! | then 4 | CRC32C of everything above |
//!
//! The preallocated rest of a segment is zeros; an all-zero record header
//! ends the records. `DIR/<base_seq:020>.idx` holds (sequence, offset)
//! pairs, LE u64 each, one per [`INDEX_EVERY`] records: a reader finds
//! the segment by its name, the record by the index, and scans at most
//! `INDEX_EVERY - 1` records.

use std::path::{Path, PathBuf};

/// First bytes of every segment.
pub const MAGIC: [u8; 8] = *b"MDBARC01";
/// Format version in the segment header: 2 added the publisher's epoch
/// (bytes 40..48, zero in version 1).
pub const VERSION: u32 = 2;
/// The oldest version this build reads (its segments' epoch is unknown).
pub const OLDEST_VERSION: u32 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER: usize = 64;
/// Size of a record's header.
pub const RECORD_HEADER: usize = 24;
/// Size of a record's CRC.
pub const RECORD_CRC: usize = 4;
/// A record flag of the archive's own: the record stands for the
/// sequences `seq..to` that the recorder never received.
pub const FLAG_GAP: u32 = 1 << 31;
/// Largest payload a record may claim; anything longer is corruption.
pub const MAX_PAYLOAD: usize = crate::config::MAX_MESSAGE_LIMIT;
/// One index entry per this many records.
pub const INDEX_EVERY: u64 = 64;
/// Size of an index entry.
pub const INDEX_ENTRY: usize = 16;

/// Bytes a record with `len` payload bytes takes, padding included.
pub fn record_size(len: usize) -> usize {
    (RECORD_HEADER + len + RECORD_CRC + 7) & !7
}

/// The segment file holding records from `base_seq`.
pub fn segment_path(dir: &Path, base_seq: u64) -> PathBuf {
    dir.join(format!("{base_seq:020}.seg"))
}

/// The index file of that segment.
pub fn index_path(dir: &Path, base_seq: u64) -> PathBuf {
    dir.join(format!("{base_seq:020}.idx"))
}

/// The base sequence a segment file's name gives, when it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A segment's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Sequence of its first record.
    pub base_seq: u64,
    /// When it was created (ns since the epoch).
    pub created_ns: u64,
    /// Size it was preallocated to.
    pub capacity: u64,
    /// The epoch of the publisher whose sequences it holds; 0: not known
    /// (a version-1 segment, or a writer not told the epoch).
    pub epoch: u64,
}

impl SegmentHeader {
    /// The 64 header bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER] {
        let mut b = [0u8; SEGMENT_HEADER];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SEGMENT_HEADER as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.base_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.created_ns.to_le_bytes());
        b[32..40].copy_from_slice(&self.capacity.to_le_bytes());
        b[40..48].copy_from_slice(&self.epoch.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Checks and reads a header; the error says what is wrong.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader, String> {
        if b.len() < SEGMENT_HEADER {
            return Err(format!(
                "{} bytes is shorter than the {SEGMENT_HEADER}-byte segment header",
                b.len()
            ));
        }
        if b[0..8] != MAGIC {
            return Err("it does not start with the archive magic MDBARC01".into());
        }
        if crc32c::crc32c(&b[..60]) != le32(&b[60..64]) {
            return Err("its header fails its CRC32C".into());
        }
        let version = le32(&b[8..12]);
        if !(OLDEST_VERSION..=VERSION).contains(&version)
            || le32(&b[12..16]) as usize != SEGMENT_HEADER
        {
            return Err(format!(
                "format version {version} (this build reads {OLDEST_VERSION} to {VERSION})"
            ));
        }
        let epoch = le64(&b[40..48]);
        if version == 1 && epoch != 0 {
            // Version 1 wrote zeros there: a value is not one of ours.
            return Err(format!(
                "a version-1 header carries epoch {epoch} where that version has zeros"
            ));
        }
        if b[48..60].iter().any(|&x| x != 0) {
            return Err("its header's reserved bytes 48..60 are not zero".into());
        }
        Ok(SegmentHeader {
            base_seq: le64(&b[16..24]),
            created_ns: le64(&b[24..32]),
            capacity: le64(&b[32..40]),
            epoch,
        })
    }
}

/// A record's fields, as decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length.
    pub len: usize,
    /// Flags.
    pub flags: u32,
    /// Sequence (the first of a gap).
    pub seq: u64,
    /// Timestamp.
    pub timestamp: u64,
}

impl RecordHeader {
    /// Whether this is a gap record.
    pub fn is_gap(&self) -> bool {
        self.flags & FLAG_GAP != 0
    }
}

/// Appends one record to `out`.
pub fn encode_record(out: &mut Vec<u8>, seq: u64, flags: u32, timestamp: u64, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&timestamp.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.resize(start + record_size(payload.len()), 0);
}

/// What decoding the bytes at a record position found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// A whole record whose CRC matches: its header and size.
    Record(RecordHeader, usize),
    /// An all-zero header: the end of the records.
    End,
    /// Fewer bytes than the record needs: `need` in all.
    Short {
        /// Bytes the record needs.
        need: usize,
    },
    /// Not a record; the reason.
    Bad(&'static str),
}

/// Decodes the record at the start of `b` (which holds what the file has
/// from there, up to some read size).
pub fn decode_record(b: &[u8]) -> Decoded {
    if b.len() < RECORD_HEADER {
        if b.iter().all(|&x| x == 0) {
            return Decoded::End;
        }
        return Decoded::Short {
            need: RECORD_HEADER,
        };
    }
    let h = &b[..RECORD_HEADER];
    if h.iter().all(|&x| x == 0) {
        return Decoded::End;
    }
    let len = le32(&h[0..4]) as usize;
    if len > MAX_PAYLOAD {
        return Decoded::Bad("its length is beyond any message");
    }
    let size = record_size(len);
    if b.len() < size {
        return Decoded::Short { need: size };
    }
    let crc_at = RECORD_HEADER + len;
    if crc32c::crc32c(&b[..crc_at]) != le32(&b[crc_at..crc_at + 4]) {
        return Decoded::Bad("it fails its CRC32C");
    }
    let rh = RecordHeader {
        len,
        flags: le32(&h[4..8]),
        seq: le64(&h[8..16]),
        timestamp: le64(&h[16..24]),
    };
    if rh.is_gap() {
        if len != 8 {
            return Decoded::Bad("a gap record holds 8 bytes");
        }
        if le64(&b[RECORD_HEADER..RECORD_HEADER + 8]) <= rh.seq {
            return Decoded::Bad("a gap record's range is empty");
        }
    }
    Decoded::Record(rh, size)
}

/// The sequence after a record: its own plus one, or a gap's end.
pub fn record_end(h: &RecordHeader, payload: &[u8]) -> u64 {
    if h.is_gap() {
        le64(&payload[..8])
    } else {
        h.seq + 1
    }
}

/// Little-endian u32 of 4 bytes.
pub fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// Little-endian u64 of 8 bytes.
pub fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_any_flipped_bit_is_caught() {
        let mut b = Vec::new();
        encode_record(&mut b, 7, 1, 99, b"hello");
        assert_eq!(b.len(), record_size(5));
        assert_eq!(b.len() % 8, 0);
        match decode_record(&b) {
            Decoded::Record(h, size) => {
                assert_eq!(
                    (h.seq, h.flags, h.timestamp, h.len, size),
                    (7, 1, 99, 5, 40)
                );
                assert_eq!(record_end(&h, &b[RECORD_HEADER..]), 8);
            }
            other => panic!("{other:?}"),
        }
        for bit in 0..(RECORD_HEADER + 5 + 4) * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(decode_record(&c), Decoded::Record(..)),
                "bit {bit} flipped went unnoticed"
            );
        }
        assert_eq!(decode_record(&[0u8; 64]), Decoded::End);
        assert_eq!(decode_record(&b[..30]), Decoded::Short { need: 40 });
    }

    #[test]
    fn absurd_lengths_and_empty_gaps_are_bad() {
        let mut b = vec![0u8; 64];
        b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode_record(&b), Decoded::Bad(_)));
        let mut g = Vec::new();
        encode_record(&mut g, 10, FLAG_GAP, 0, &10u64.to_le_bytes());
        assert_eq!(
            decode_record(&g),
            Decoded::Bad("a gap record's range is empty")
        );
    }

    #[test]
    fn headers_round_trip_and_bad_ones_say_why() {
        let h = SegmentHeader {
            base_seq: 5,
            created_ns: 6,
            capacity: 1 << 20,
            epoch: 77,
        };
        let b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        let mut c = b;
        c[20] ^= 1;
        assert_eq!(
            SegmentHeader::decode(&c),
            Err("its header fails its CRC32C".into())
        );
        assert!(SegmentHeader::decode(&b[..10]).is_err());
        // A version-1 header (no epoch) still reads, as epoch unknown; one
        // claiming an epoch, or a version from the future, does not.
        let v1 = |epoch: u64, version: u32| {
            let mut c = SegmentHeader { epoch, ..h }.encode();
            c[8..12].copy_from_slice(&version.to_le_bytes());
            let crc = crc32c::crc32c(&c[..60]);
            c[60..64].copy_from_slice(&crc.to_le_bytes());
            SegmentHeader::decode(&c)
        };
        assert_eq!(v1(0, 1), Ok(SegmentHeader { epoch: 0, ..h }));
        assert_eq!(
            v1(77, 1),
            Err("a version-1 header carries epoch 77 where that version has zeros".into())
        );
        assert_eq!(
            v1(77, 3),
            Err("format version 3 (this build reads 1 to 2)".into())
        );
        assert_eq!(parse_segment_name("00000000000000000005.seg"), Some(5));
        assert_eq!(parse_segment_name("5.seg"), None);
        assert_eq!(parse_segment_name("0000000000000000000x.seg"), None);
    }
}
