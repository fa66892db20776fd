//! MoldUDP64: header fields, heartbeats and end of session, message block
//! iteration, packets whose header lies, the builder and request packets.

use mdbus_feed::moldudp64::*;

fn session() -> Session {
    Session::new("SESSION001").unwrap()
}

#[rustfmt::skip]
fn hand_assembled() -> Vec<u8> {
    let mut p = b"SESSION001".to_vec();
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42]); // sequence 42
    p.extend_from_slice(&[0, 2]);                    // two messages
    p.extend_from_slice(&[0, 3, b'a', b'b', b'c']);  // block "abc"
    p.extend_from_slice(&[0, 0]);                    // an empty block
    p
}

#[test]
fn header_and_blocks_of_a_hand_assembled_packet() {
    let bytes = hand_assembled();
    let p = Packet::parse_strict(&bytes).unwrap();
    assert_eq!(p.session(), session());
    assert_eq!(p.session().as_str(), Some("SESSION001"));
    assert_eq!(p.sequence(), 42);
    assert_eq!(p.count(), 2);
    assert_eq!(p.kind(), PacketKind::Messages);
    assert_eq!(p.next_sequence(), 44);
    let blocks: Vec<_> = p.messages().map(Result::unwrap).collect();
    assert_eq!(
        blocks,
        [
            MessageBlock {
                sequence: 42,
                data: b"abc"
            },
            MessageBlock {
                sequence: 43,
                data: b""
            }
        ]
    );
}

#[test]
fn heartbeat_and_end_of_session() {
    let hb = heartbeat(session(), 1000);
    let p = Packet::parse_strict(&hb).unwrap();
    assert_eq!(p.kind(), PacketKind::Heartbeat);
    assert_eq!(p.count(), HEARTBEAT_COUNT);
    assert_eq!(p.message_count(), 0);
    assert_eq!(p.sequence(), 1000);
    assert_eq!(p.next_sequence(), 1000);
    assert_eq!(p.messages().count(), 0);

    let eos = end_of_session(session(), 1000);
    let p = Packet::parse_strict(&eos).unwrap();
    assert_eq!(p.kind(), PacketKind::EndOfSession);
    assert_eq!(p.count(), 0xFFFF);
    assert_eq!(p.message_count(), 0);
    assert_eq!(p.next_sequence(), 1000);

    // An end-of-session packet carrying data is malformed.
    let mut extra = eos.to_vec();
    extra.extend_from_slice(&[0, 1, b'x']);
    assert_eq!(
        Packet::parse(&extra).unwrap().validate(),
        Err(PacketError::TrailingBytes {
            count: 0,
            offset: 20,
            extra: 3
        })
    );
}

#[test]
fn short_header() {
    for len in 0..HEADER_LEN {
        assert_eq!(
            Packet::parse(&hand_assembled()[..len]),
            Err(PacketError::ShortHeader { len })
        );
    }
}

#[test]
fn count_claims_more_blocks_than_present() {
    let mut bytes = hand_assembled();
    bytes[19] = 3;
    let p = Packet::parse(&bytes).unwrap();
    let items: Vec<_> = p.messages().collect();
    assert_eq!(items.len(), 3);
    assert!(items[0].is_ok() && items[1].is_ok());
    assert_eq!(
        items[2],
        Err(PacketError::MissingBlock {
            count: 3,
            index: 2,
            offset: 27
        })
    );
    assert!(p.validate().is_err());
    assert!(Packet::parse_strict(&bytes).is_err());
}

#[test]
fn count_claims_fewer_blocks_than_present() {
    let mut bytes = hand_assembled();
    bytes[19] = 1;
    let p = Packet::parse(&bytes).unwrap();
    let items: Vec<_> = p.messages().collect();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[1],
        Err(PacketError::TrailingBytes {
            count: 1,
            offset: 25,
            extra: 2
        })
    );
}

#[test]
fn block_length_overruns_the_packet() {
    let mut bytes = hand_assembled();
    bytes[21] = 200; // first block claims 200 bytes
    let p = Packet::parse(&bytes).unwrap();
    let mut it = p.messages();
    assert_eq!(
        it.next(),
        Some(Err(PacketError::BlockOverrun {
            index: 0,
            offset: 20,
            len: 200,
            available: 5
        }))
    );
    // After an error the iterator ends: nothing after a bad length can be
    // trusted.
    assert_eq!(it.next(), None);
    assert_eq!(it.next(), None);
}

#[test]
fn length_prefix_cut_in_half() {
    let bytes = &hand_assembled()[..26]; // ends one byte into block 2's prefix
    let items: Vec<_> = Packet::parse(bytes).unwrap().messages().collect();
    assert_eq!(
        items[1],
        Err(PacketError::TruncatedPrefix {
            index: 1,
            offset: 25,
            available: 1
        })
    );
}

#[test]
fn errors_say_what_is_wrong() {
    let mut bytes = hand_assembled();
    bytes[19] = 3;
    let e = Packet::parse_strict(&bytes).unwrap_err();
    assert_eq!(
        e.to_string(),
        "MoldUDP64 packet announces 3 messages but ends at byte 27 where message block 2 should start"
    );
    assert_eq!(
        Packet::parse(&[0; 5]).unwrap_err().to_string(),
        "MoldUDP64 packet of 5 bytes is shorter than the 20-byte header"
    );
}

#[test]
fn builder_respects_the_maximum_size() {
    let mut buf = [0u8; 2048];
    let mut b = PacketBuilder::with_max_size(&mut buf, session(), 7, 60).unwrap();
    assert!(b.is_empty());
    b.push(&[1; 30]).unwrap(); // 20 + 32 = 52
    assert!(!b.fits(7));
    assert!(b.fits(6));
    assert_eq!(
        b.push(&[2; 7]),
        Err(BuildError::Full {
            len: 7,
            needed: 9,
            available: 8
        })
    );
    b.claim(6).unwrap().copy_from_slice(b"claim!");
    assert_eq!(b.len(), 60);
    assert_eq!(b.count(), 2);
    assert_eq!(b.next_sequence(), 9);
    let bytes = b.finish();
    assert_eq!(bytes.len(), 60);
    let p = Packet::parse_strict(bytes).unwrap();
    assert_eq!(p.sequence(), 7);
    let data: Vec<_> = p.messages().map(|m| m.unwrap().data).collect();
    assert_eq!(data, [&[1u8; 30][..], b"claim!"]);
}

#[test]
fn builder_limits() {
    let mut small = [0u8; 19];
    assert_eq!(
        PacketBuilder::new(&mut small, session(), 1).unwrap_err(),
        BuildError::BufferTooSmall { max: 19 }
    );
    let mut buf = vec![0u8; 70_000];
    let mut b = PacketBuilder::new(&mut buf, session(), 1).unwrap();
    assert_eq!(
        b.push(&vec![0; 65_536]),
        Err(BuildError::MessageTooLong { len: 65_536 })
    );
    b.push(&vec![0; 65_535]).unwrap();

    // 0xFFFE empty messages fill the count; one more would read as end of
    // session.
    let mut buf = vec![0u8; HEADER_LEN + 2 * 0xFFFF];
    let mut b = PacketBuilder::new(&mut buf, session(), 1).unwrap();
    for _ in 0..MAX_MESSAGES_PER_PACKET {
        b.push(&[]).unwrap();
    }
    assert!(!b.fits(0));
    assert_eq!(b.push(&[]), Err(BuildError::TooManyMessages));
    let p = Packet::parse_strict(b.finish()).unwrap();
    assert_eq!(p.count(), 0xFFFE);
    assert_eq!(p.messages().count(), 0xFFFE);
}

#[test]
fn an_empty_builder_finishes_as_a_heartbeat() {
    let mut buf = [0u8; 64];
    let b = PacketBuilder::new(&mut buf, session(), 99).unwrap();
    assert_eq!(b.finish(), &heartbeat(session(), 99)[..]);
}

#[test]
fn request_packets_round_trip() {
    let r = Request {
        session: session(),
        sequence: 0x0102_0304_0506_0708,
        count: 500,
    };
    let bytes = r.encode();
    assert_eq!(&bytes[..10], b"SESSION001");
    assert_eq!(&bytes[10..18], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&bytes[18..], &[0x01, 0xf4]);
    assert_eq!(Request::decode(&bytes), Ok(r));
    assert_eq!(Request::decode(&bytes[..19]), Err(RequestError { len: 19 }));
    let mut long = bytes.to_vec();
    long.push(0);
    assert_eq!(Request::decode(&long), Err(RequestError { len: 21 }));
}
