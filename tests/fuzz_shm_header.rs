//! The cargo-fuzz targets (`fuzz/`), on stable: over the seed corpus,
//! random bytes and mutated seeds. `cargo +nightly fuzz run shm_header`
//! in `fuzz/` explores further.

use mdbus::transport::shm::segment::{encode_header, HeaderFields, Kind, SEALED_HEADER};
use mdbus_testkit::fuzz;
use proptest::prelude::*;

#[path = "../fuzz/src/shm_header.rs"]
mod targets;

const CORPUS: fuzz::Corpus = fuzz::Corpus::new(env!("CARGO_MANIFEST_DIR"));

#[test]
fn shm_header_passes_on_its_seed_corpus() {
    CORPUS.check_seeds(&[("shm_header", targets::shm_header)], 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz::cases()))]

    #[test]
    fn fuzz_target_shm_header(input in CORPUS.input("shm_header", 100)) {
        targets::shm_header(&input);
    }
}

/// Input of the target: file length, kind, sealed header.
fn input(file_len: u64, kind: Kind, f: &HeaderFields) -> Vec<u8> {
    let mut raw = [0u8; SEALED_HEADER];
    encode_header(f, &mut raw);
    let mut v = file_len.to_le_bytes().to_vec();
    v.push(if kind == Kind::Session { 1 } else { 0 });
    v.extend_from_slice(&raw);
    v
}

/// Writes the seed corpus (fuzz/seeds/shm_header): run with `--ignored`
/// after a layout change.
#[test]
#[ignore]
fn write_seeds() {
    let stream = HeaderFields {
        kind: Kind::Stream,
        slot_size: 128,
        capacity: 1024,
        total_len: 4096 + 1024 * 128,
        epoch: 7,
        creator_pid: 42,
        creator_start: 4242,
    };
    let session = HeaderFields {
        kind: Kind::Session,
        total_len: 4096 + 2 * 1024 * 128,
        ..stream
    };
    let huge = HeaderFields {
        total_len: 2 << 20,
        ..stream
    };
    let oversized = HeaderFields {
        slot_size: 1_048_640,
        capacity: 1 << 24,
        total_len: 4096 + (1u64 << 24) * 1_048_640,
        ..stream
    };
    for (name, bytes) in [
        ("stream", input(stream.total_len, Kind::Stream, &stream)),
        ("session", input(session.total_len, Kind::Session, &session)),
        ("huge-pages", input(2 << 20, Kind::Stream, &huge)),
        (
            "claims-more-than-file",
            input(8192, Kind::Stream, &oversized),
        ),
        (
            "wrong-kind",
            input(stream.total_len, Kind::Session, &stream),
        ),
    ] {
        CORPUS.write_seed("shm_header", name, &bytes);
    }
}
