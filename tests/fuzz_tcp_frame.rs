//! The TCP frame reader's fuzz target (`fuzz/`, cargo-fuzz on nightly)
//! run on stable: over its seed corpus, random bytes and mutated seeds.
//! `cargo +nightly fuzz run tcp_frame` in `fuzz/` runs it under libFuzzer
//! (docs/SECURITY.md, "Peers").

#[path = "../fuzz/src/tcp_frame.rs"]
mod driver;

use std::path::PathBuf;

use mdbus::transport::tcp::{Frame, FrameReader};
use proptest::prelude::*;

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/tcp_frame");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(f).unwrap())
        })
        .collect()
}

/// How a seed's stream ends when walked as a session's poll walks it:
/// "close", "wait" (not whole yet) or the error sentence.
fn outcome(input: &[u8]) -> String {
    let max = u16::from_le_bytes([input[0], input[1]]) as usize + 1;
    let sent = u16::from_le_bytes([input[2], input[3]]) as u64;
    let stream = &input[4..];
    let mut r = FrameReader::new(max);
    let mut at = 0;
    loop {
        match r.frame(&stream[at..]) {
            Ok(None) => return "wait".into(),
            Err(e) => return e,
            Ok(Some((Frame::Close, _))) => return "close".into(),
            Ok(Some((Frame::Data(h, _), used))) => {
                if let Err(e) = r.accept_data(&h) {
                    return e;
                }
                at += used;
            }
            Ok(Some((Frame::Credit(c), used))) => {
                if let Err(e) = r.accept_credit(c, sent) {
                    return e;
                }
                at += used;
            }
        }
    }
}

#[test]
fn the_seed_corpus_covers_every_outcome_and_passes_the_target() {
    let seeds = seeds();
    let got: Vec<(String, String)> = seeds
        .iter()
        .map(|(name, bytes)| {
            driver::tcp_frame(bytes);
            (name.clone(), outcome(bytes))
        })
        .collect();
    let want = [
        (
            "credit-beyond-sent",
            "a credit for 18446744073709551615 consumed messages, but only 2 were sent",
        ),
        (
            "credit-going-back",
            "a credit for 3 consumed messages after one for 5: credits never go back",
        ),
        (
            "credit-with-payload",
            "a credit frame with 3 payload bytes, where none belong",
        ),
        ("cut-short", "wait"),
        (
            "oversized-frame",
            "a frame of 100000 bytes, larger than max_message 64",
        ),
        (
            "second-hello",
            "a second hello in the middle of the session",
        ),
        (
            "sequence-backwards",
            "frame with sequence 1 and length 1, expected sequence 3: the sequence goes backwards",
        ),
        (
            "sequence-skips",
            "frame with sequence 7 and length 0, expected sequence 2: the sequence skips ahead",
        ),
        ("unknown-flags", "a frame with unknown flag bits 0x100000"),
        ("valid-session", "close"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
}

/// Random bytes, or a seed whose header fields are rewritten where frames
/// start: lengths, sequences, flags and credits a peer could lie with.
fn fuzz_input() -> impl Strategy<Value = Vec<u8>> {
    let seeds: Vec<Vec<u8>> = seeds().into_iter().map(|(_, b)| b).collect();
    let n = seeds.len();
    let lie = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u32::MAX as u64),
        Just(u64::MAX),
        any::<u64>(),
        0u64..300,
    ];
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        (
            0..n,
            proptest::collection::vec((any::<usize>(), 0usize..3, lie), 1..6),
            any::<usize>(),
        )
            .prop_map(move |(i, lies, cut)| {
                let mut s = seeds[i].clone();
                for (at, field, value) in lies {
                    // A header starts 4 bytes in, then every 24 bytes or so:
                    // any offset from there, rounded to a field.
                    let base = 4 + (at % s.len().max(1)) / 8 * 8;
                    let (off, width) = [(0, 8), (8, 4), (12, 4)][field];
                    let bytes = value.to_le_bytes();
                    for (k, byte) in bytes.iter().take(width).enumerate() {
                        if let Some(b) = s.get_mut(base + off + k) {
                            *b = *byte;
                        }
                    }
                }
                s.truncate(cut % (s.len() + 1).max(1) + 4);
                s
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn fuzz_target_tcp_frame(input in fuzz_input()) {
        driver::tcp_frame(&input);
    }
}
