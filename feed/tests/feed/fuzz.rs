//! Property tests on arbitrary bytes: the decoders return values, never
//! panic, and whatever they accept re-encodes to the same bytes.

use mdbus_feed::binaryfile::{BinaryFileError, BinaryFileReader, BinaryFileWriter};
use mdbus_feed::itch::{self, len_for, DecodeError, MESSAGE_TYPES};
use mdbus_feed::moldudp64::{Packet, PacketBuilder, PacketError, Session};
use mdbus_feed::pcap::CaptureReader;
use mdbus_testkit::fuzz;
use proptest::prelude::*;

/// A well-formed message of any type with arbitrary field bytes.
fn any_message() -> impl Strategy<Value = Vec<u8>> {
    (0..MESSAGE_TYPES.len()).prop_flat_map(|i| {
        let t = MESSAGE_TYPES[i];
        proptest::collection::vec(any::<u8>(), t.len - 1).prop_map(move |body| {
            let mut m = vec![t.type_byte];
            m.extend(body);
            m
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn itch_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        match itch::decode(&bytes) {
            Ok(m) => {
                prop_assert_eq!(m.as_bytes(), &bytes[..]);
                let mut buf = [0u8; itch::MAX_MESSAGE_LEN];
                let n = m.decode().encode(&mut buf).unwrap();
                prop_assert_eq!(&buf[..n], &bytes[..]);
            }
            Err(DecodeError::Empty) => prop_assert!(bytes.is_empty()),
            Err(DecodeError::UnknownType(t)) => prop_assert_eq!(len_for(t), None),
            Err(DecodeError::Truncated { expected, actual, .. }) => prop_assert!(actual < expected),
            Err(DecodeError::TooLong { expected, actual, .. }) => prop_assert!(actual > expected),
            Err(e @ DecodeError::WrongType { .. }) => prop_assert!(false, "{}", e),
        }
    }

    #[test]
    fn every_well_formed_message_decodes_losslessly(bytes in any_message()) {
        let m = itch::decode(&bytes).unwrap();
        let owned = m.decode();
        let mut buf = [0u8; itch::MAX_MESSAGE_LEN];
        let n = owned.encode(&mut buf).unwrap();
        prop_assert_eq!(&buf[..n], &bytes[..]);
        prop_assert_eq!(itch::decode(&buf[..n]).unwrap().decode(), owned);
    }

    #[test]
    fn moldudp64_walk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let Ok(p) = Packet::parse(&bytes) else {
            prop_assert!(bytes.len() < 20);
            return Ok(());
        };
        let mut ok = 0usize;
        let mut errors = 0usize;
        for block in p.messages() {
            match block {
                Ok(b) => {
                    prop_assert_eq!(errors, 0, "no block after an error");
                    prop_assert_eq!(b.sequence, p.sequence().wrapping_add(ok as u64));
                    ok += 1;
                }
                Err(_) => errors += 1,
            }
        }
        prop_assert!(errors <= 1);
        prop_assert!(ok <= usize::from(p.message_count()));
        prop_assert_eq!(p.validate().is_ok(), errors == 0);
    }

    #[test]
    fn moldudp64_packets_from_the_builder_parse_back(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..40),
        sequence in any::<u64>(),
        max in 20usize..1500,
    ) {
        let mut buf = vec![0u8; max];
        let session = Session::new("PROPTEST").unwrap();
        let mut b = PacketBuilder::new(&mut buf, session, sequence).unwrap();
        let mut taken = 0;
        for m in &messages {
            if b.push(m).is_err() {
                break;
            }
            taken += 1;
        }
        let bytes = b.finish();
        prop_assert!(bytes.len() <= max);
        let p = Packet::parse_strict(bytes).unwrap();
        let got: Vec<&[u8]> = p.messages().map(|b| b.unwrap().data).collect();
        let want: Vec<&[u8]> = messages[..taken].iter().map(Vec::as_slice).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn moldudp64_lying_counts_are_errors(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30), 1..20),
        lie in any::<u16>(),
    ) {
        let mut buf = vec![0u8; 2000];
        let mut b = PacketBuilder::new(&mut buf, Session::BLANK, 1).unwrap();
        for m in &messages {
            b.push(m).unwrap();
        }
        let mut bytes = b.finish().to_vec();
        let truth = messages.len() as u16;
        prop_assume!(lie != truth);
        bytes[18..20].copy_from_slice(&lie.to_be_bytes());
        let r = Packet::parse(&bytes).unwrap().validate();
        let is_expected_error = matches!(
            r,
            Err(PacketError::TrailingBytes { .. }
                | PacketError::MissingBlock { .. }
                | PacketError::TruncatedPrefix { .. }
                | PacketError::BlockOverrun { .. })
        );
        prop_assert!(is_expected_error, "count {} for {} blocks gave {:?}", lie, truth, r);
    }

    #[test]
    fn binaryfile_reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut r = BinaryFileReader::new(&bytes[..]);
        let mut consumed = 0u64;
        loop {
            match r.next_message() {
                Ok(Some(m)) => consumed += 2 + m.len() as u64,
                Ok(None) => {
                    prop_assert_eq!(consumed, bytes.len() as u64);
                    break;
                }
                Err(BinaryFileError::TruncatedPrefix { offset, .. })
                | Err(BinaryFileError::TruncatedMessage { offset, .. }) => {
                    prop_assert_eq!(offset, consumed);
                    break;
                }
                Err(e) => prop_assert!(false, "{}", e),
            }
        }
    }

    #[test]
    fn binaryfile_round_trips(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 0..30),
    ) {
        let mut w = BinaryFileWriter::new(Vec::new());
        for m in &messages {
            w.write_message(m).unwrap();
        }
        let bytes = w.into_inner();
        let mut r = BinaryFileReader::new(&bytes[..]);
        for m in &messages {
            prop_assert_eq!(r.next_message().unwrap(), Some(&m[..]));
        }
        prop_assert_eq!(r.next_message().unwrap(), None);
    }

    #[test]
    fn capture_reader_never_panics(
        magic in prop_oneof![
            Just(vec![0xd4, 0xc3, 0xb2, 0xa1]),
            Just(vec![0x4d, 0x3c, 0xb2, 0xa1]),
            Just(vec![0x0a, 0x0d, 0x0d, 0x0a]),
            Just(vec![]),
        ],
        rest in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut bytes = magic;
        bytes.extend(rest);
        if let Ok(mut r) = CaptureReader::new("fuzz", &bytes[..]) {
            // Every record consumes bytes, so this ends.
            while let Ok(Some(_)) = r.next_datagram() {}
        }
    }
}

// ---------------------------------------------------------------------
// The cargo-fuzz targets (feed/fuzz), on stable: over the seed corpus,
// random bytes and mutated seeds. `cargo +nightly fuzz run TARGET` in
// feed/ runs them under libFuzzer (docs/FEED.md).

#[path = "../../fuzz/src/lib.rs"]
mod targets;

const FUZZ_TARGETS: [(&str, fuzz::Target); 4] = [
    ("moldudp64", targets::moldudp64),
    ("itch", targets::itch),
    ("arbiter", targets::arbiter),
    ("arbiter_attack", targets::arbiter_attack),
];

const CORPUS: fuzz::Corpus = fuzz::Corpus::new(env!("CARGO_MANIFEST_DIR"));

#[test]
fn fuzz_targets_pass_on_their_seed_corpus() {
    CORPUS.check_seeds(&FUZZ_TARGETS, 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz::cases()))]

    #[test]
    fn fuzz_target_moldudp64(input in CORPUS.input("moldudp64", 700)) {
        targets::moldudp64(&input);
    }

    #[test]
    fn fuzz_target_itch(input in CORPUS.input("itch", 700)) {
        targets::itch(&input);
    }

    #[test]
    fn fuzz_target_arbiter(input in CORPUS.input("arbiter", 700)) {
        targets::arbiter(&input);
    }

    #[test]
    fn fuzz_target_arbiter_attack(input in CORPUS.input("arbiter_attack", 700)) {
        targets::arbiter_attack(&input);
    }
}

/// Writes the seed corpus (feed/fuzz/seeds): run with `--ignored` after
/// changing the formats or the arbiter program encoding.
#[test]
#[ignore]
fn write_fuzz_seed_corpus() {
    use mdbus_feed::moldudp64::{self as mold, Request};
    use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};

    let write = |target: &str, name: &str, bytes: &[u8]| CORPUS.write_seed(target, name, bytes);
    let session = Session::new("FUZZ000001").unwrap();

    // MoldUDP64: a packet of the synthetic session, a heartbeat, an end
    // of session, a request, a packet whose count lies.
    let cfg = SynthConfig {
        symbols: 3,
        order_messages: 40,
        ..SynthConfig::default()
    };
    let mut packer = MoldPacker::new(Generator::new(&cfg).unwrap(), session, 1, 400)
        .unwrap()
        .with_window(u64::MAX);
    let first = packer.next_packet().unwrap().bytes.to_vec();
    write("moldudp64", "packet", &first);
    write("moldudp64", "heartbeat", &mold::heartbeat(session, 9));
    write(
        "moldudp64",
        "end-of-session",
        &mold::end_of_session(session, 9),
    );
    let request = Request {
        session,
        sequence: 3,
        count: 7,
    };
    write("moldudp64", "request", &request.encode());
    let mut lying = first.clone();
    lying[19] = lying[19].wrapping_add(1);
    write("moldudp64", "lying-count", &lying);

    // ITCH: a few message types.
    for m in crate::common::one_of_each() {
        let t = m.msg_type();
        if b"SRAUQO".contains(&t) {
            write(
                "itch",
                &format!("type-{}", char::from(t)),
                &crate::common::encode(&m),
            );
        }
    }

    // The arbiter: programs in the encoding `targets::arbiter` reads.
    // Header: flags (bit 0 session fixed; bits 1-2 start, 1 = from 1;
    // bits 3-4 reorder store size; bits 5-6 retries; bit 7 gap wait), max
    // request, a byte for store packets, timeout and rate (here: 2 retries,
    // 4 KiB and 8 packets of store, 2 µs timeout, 100,000 requests/s). Each op: op byte (bits 0-2 kind, 0-3
    // packet / 4 heartbeat / 5 end of session / 6 raw / 7 timer; bits 3-4
    // line), sequence selector (< 64: start + n), session selector, then
    // the kind's bytes.
    let packet = |line: u8, seq: u8, bodies: &[&[u8]]| {
        let mut v = vec![line << 3, seq, 0, bodies.len() as u8];
        for b in bodies {
            v.push(b.len() as u8);
            v.extend_from_slice(b);
        }
        v
    };
    let timer = |ms: u16| {
        let mut v = vec![7, 0, 0];
        v.extend_from_slice(&ms.to_be_bytes());
        v
    };
    let end = |line: u8, seq: u8| vec![(line << 3) | 5, seq, 0];
    let header = [0x5bu8, 4, 0x2c];
    // A/B with a loss on each line, filled by the other.
    let ab = [
        header.to_vec(),
        packet(0, 0, &[b"a1", b"a2"]),
        packet(1, 2, &[b"b3"]),
        packet(1, 0, &[b"b1", b"b2"]),
        packet(0, 3, &[b"a4", b"a5"]),
        packet(1, 3, &[b"b4", b"b5"]),
        end(0, 5),
    ]
    .concat();
    write("arbiter", "ab-lines", &ab);
    // Both lines lose 2..4: requested, answered by the recovery line.
    let recovery = [
        header.to_vec(),
        packet(0, 0, &[b"m1"]),
        packet(0, 4, &[b"m5"]),
        packet(1, 4, &[b"m5"]),
        timer(1),
        packet(2, 1, &[b"r2", b"r3", b"r4"]),
        end(1, 5),
    ]
    .concat();
    write("arbiter", "recovery", &recovery);
    // Nothing answers: retries, then unrecoverable; a heartbeat reveals
    // more; another session takes over.
    let lost = [
        header.to_vec(),
        packet(0, 0, &[b"x1"]),
        vec![4, 9, 0],
        timer(5),
        timer(50),
        timer(500),
        vec![1 << 3, 0, 3, 1, 2, b'n', b'1'],
        timer(500),
    ]
    .concat();
    write("arbiter", "unanswered-and-new-session", &lost);
    // Malformed datagrams among good ones.
    let malformed = [
        header.to_vec(),
        packet(0, 0, &[b"g1"]),
        vec![6, 0, 0, 5, 1, 2, 3, 4, 5],
        vec![6 | (1 << 3), 0, 0, 30],
        first[..25].to_vec(),
        packet(1, 1, &[b"g2"]),
    ]
    .concat();
    write("arbiter", "malformed", &malformed);

    // The attack target: header (bit 0 max_jump, bit 1 session
    // configured, bit 2 start from 1, bits 3-4 confirm_packets), genuine
    // packets, other session, far-ahead point; then ops (odd: an attack,
    // (op >> 1) % 9 its kind).
    let flood = |kind: u8, n: usize| {
        let mut v = vec![0x18u8, 40, 0, 0];
        for _ in 0..n {
            v.extend_from_slice(&[(kind << 1) | 1, 2, 7, 9, 11, 0]);
        }
        v
    };
    write("arbiter_attack", "other-session-run", &flood(0, 200));
    write("arbiter_attack", "far-ahead-run-2-63", &flood(2, 200));
    write(
        "arbiter_attack",
        "garbage-and-malformed",
        &[flood(6, 40), flood(7, 40)].concat(),
    );
    write(
        "arbiter_attack",
        "replays-and-overflow",
        &[flood(8, 40), flood(5, 40)].concat(),
    );
}
