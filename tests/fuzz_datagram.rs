//! The cargo-fuzz targets (fuzz/), on stable: over the seed corpus, random
//! bytes and mutated seeds. `cargo +nightly fuzz run TARGET` in the
//! repository root runs them under libFuzzer (docs/SECURITY.md, "Fuzzing").

#[path = "../fuzz/src/datagram.rs"]
mod targets;

use mdbus_testkit::fuzz;
use proptest::prelude::*;

const FUZZ_TARGETS: [(&str, fuzz::Target); 2] = [
    ("frame", targets::frame),
    ("subscriber", targets::subscriber),
];

const CORPUS: fuzz::Corpus = fuzz::Corpus::new(env!("CARGO_MANIFEST_DIR"));

#[test]
fn fuzz_targets_pass_on_their_seed_corpus() {
    CORPUS.check_seeds(&FUZZ_TARGETS, 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz::cases()))]

    #[test]
    fn fuzz_target_frame(input in CORPUS.input("frame", 700)) {
        targets::frame(&input);
    }

    #[test]
    fn fuzz_target_subscriber(input in CORPUS.input("subscriber", 700)) {
        targets::subscriber(&input);
    }
}

/// Writes the seed corpus: genuine datagrams of every kind for `frame`,
/// and programs for `subscriber` (in order, with loss and recovery, with
/// forgeries).
#[test]
#[ignore]
fn write_fuzz_seed_corpus() {
    use mdbus::recovery::frame::{encode_control, Kind, DATAGRAM_HEADER_LEN};
    use mdbus::recovery::{PublisherConfig, PublisherCore};
    let write = |target: &str, name: &str, bytes: &[u8]| CORPUS.write_seed(target, name, bytes);
    let mut p = PublisherCore::new(&PublisherConfig {
        max_message: 4096,
        max_datagram: 256,
        ..PublisherConfig::new(0x5EED, 77)
    })
    .unwrap();
    let mut out: Vec<Vec<u8>> = Vec::new();
    p.publish(b"one", Some(5), 0, |d: &[u8]| out.push(d.to_vec()))
        .unwrap();
    p.publish(b"two", None, 0, |d: &[u8]| out.push(d.to_vec()))
        .unwrap();
    p.flush(0, |d: &[u8]| out.push(d.to_vec()));
    write("frame", "data", &out[0]);
    out.clear();
    p.publish(&[7u8; 600], None, 0, |d: &[u8]| out.push(d.to_vec()))
        .unwrap();
    write("frame", "fragment", &out[1]);
    let mut c = [0u8; DATAGRAM_HEADER_LEN];
    for (kind, name) in [
        (Kind::Heartbeat, "heartbeat"),
        (Kind::Request, "request"),
        (Kind::NotAvailable, "not-available"),
        (Kind::EndOfStream, "end"),
    ] {
        encode_control(&mut c, kind, 0x5EED, 77, 3, 1);
        write("frame", name, &c);
    }
    // Programs: (op, arg) pairs after two configuration bytes.
    let prog = |ops: &[(u8, u8)]| -> Vec<u8> {
        let mut v = vec![1, 8, 1];
        for (o, a) in ops {
            v.push(*o);
            v.push(*a);
        }
        v
    };
    let mut in_order = Vec::new();
    for _ in 0..20 {
        in_order.extend([(0, 0), (2, 0), (3, 0)]);
    }
    write("subscriber", "in-order", &prog(&in_order));
    let mut lossy = Vec::new();
    for i in 0..30u8 {
        lossy.extend([(0, 0), (2, 0)]);
        if i % 3 != 0 {
            lossy.push((3, 1));
        }
        lossy.extend([(7, 0), (5, 0), (3, 0), (4, 0)]);
    }
    write("subscriber", "loss-and-recovery", &prog(&lossy));
    let mut forged = Vec::new();
    for _ in 0..30 {
        forged.extend([(0, 0), (2, 0), (6, 2), (3, 0), (6, 7), (7, 0)]);
    }
    write("subscriber", "forgeries", &prog(&forged));
}
