//! Property tests on arbitrary bytes: the decoders return values, never
//! panic, and whatever they accept re-encodes to the same bytes.

use mdbus_feed::binaryfile::{BinaryFileError, BinaryFileReader, BinaryFileWriter};
use mdbus_feed::itch::{self, len_for, DecodeError, MESSAGE_TYPES};
use mdbus_feed::moldudp64::{Packet, PacketBuilder, PacketError, Session};
use mdbus_feed::pcap::CaptureReader;
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
