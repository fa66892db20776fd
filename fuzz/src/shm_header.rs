//! Fuzz targets of the mdbus library, as plain functions of the input bytes.
//!
//! cargo-fuzz runs them under libFuzzer (`fuzz_targets/`); the library's
//! stable test suite includes this file (`tests/fuzz_shm_header.rs`) and runs
//! them over the seed corpus (`fuzz/seeds/`), random and mutated inputs.
//! Each one panics only when a property is broken.

use mdbus::error::SegmentProblem;
use mdbus::transport::shm::segment::{
    decode_header, encode_header, Kind, HEADER_BYTES, SEALED_HEADER,
};

/// The segment header validator. Input: the file length (8 bytes, little
/// endian), the kind asked for (1 byte: even a stream, odd a session), then
/// the sealed header (zero-padded to its 80 bytes).
///
/// Properties: never panics; what it accepts has a sane geometry that fits
/// the file, and re-encodes to a header it accepts with the same fields;
/// a problem of truncation really is one.
pub fn shm_header(data: &[u8]) {
    let file_len = u64::from_le_bytes(
        data.get(..8)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 8]),
    );
    let want = match data.get(8) {
        Some(k) if k % 2 == 1 => Kind::Session,
        _ => Kind::Stream,
    };
    let mut raw = [0u8; SEALED_HEADER];
    let rest = data.get(9..).unwrap_or(&[]);
    let n = rest.len().min(SEALED_HEADER);
    raw[..n].copy_from_slice(&rest[..n]);
    match decode_header(&raw, want, file_len) {
        Ok(f) => {
            assert_eq!(f.kind, want);
            assert!(f.slot_size >= 64 && f.slot_size % 64 == 0);
            assert!(f.capacity.is_power_of_two());
            let rings = if want == Kind::Session { 2 } else { 1 };
            let needed = HEADER_BYTES as u64 + rings * f.capacity * u64::from(f.slot_size);
            let huge = needed.div_ceil(2 << 20) * (2 << 20);
            assert!(f.total_len == needed || f.total_len == huge, "{f:?}");
            assert!(f.total_len <= file_len, "stated size beyond the file");
            let mut again = [0u8; SEALED_HEADER];
            encode_header(&f, &mut again);
            assert_eq!(decode_header(&again, want, file_len), Ok(f));
        }
        Err(SegmentProblem::Truncated { expected, actual }) => {
            assert!(actual < expected, "truncated {actual} >= {expected}")
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}
