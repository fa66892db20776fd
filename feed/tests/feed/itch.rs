//! ITCH 5.0: sizes from the specification, encode/decode round trips,
//! hand-assembled wire bytes, and bad input.

use mdbus_feed::alpha::Alpha;
use mdbus_feed::itch::{self, *};

use crate::common::{encode, one_of_each, stock};

/// Message type and length as section 4 of the ITCH 5.0 specification
/// lists them, typed in from the specification independently of the
/// layout table in the crate.
const SPEC_SIZES: [(u8, usize); 23] = [
    (b'S', 12),
    (b'R', 39),
    (b'H', 25),
    (b'Y', 20),
    (b'L', 26),
    (b'V', 35),
    (b'W', 12),
    (b'K', 28),
    (b'J', 35),
    (b'h', 21),
    (b'A', 36),
    (b'F', 40),
    (b'E', 31),
    (b'C', 36),
    (b'X', 23),
    (b'D', 19),
    (b'U', 35),
    (b'P', 44),
    (b'Q', 40),
    (b'B', 19),
    (b'I', 50),
    (b'N', 20),
    (b'O', 48),
];

#[test]
fn sizes_match_the_specification() {
    for (t, len) in SPEC_SIZES {
        assert_eq!(len_for(t), Some(len), "len_for({:?})", char::from(t));
    }
    assert_eq!(MESSAGE_TYPES.len(), SPEC_SIZES.len());
    for row in MESSAGE_TYPES {
        assert!(
            SPEC_SIZES.contains(&(row.type_byte, row.len)),
            "{} ({:?}, {} bytes) is not in the specification's table",
            row.name,
            char::from(row.type_byte),
            row.len
        );
        // The body fields tile the message from byte 11 to its end.
        let mut end = HEADER_LEN;
        for f in row.fields {
            assert_eq!(f.offset, end, "{}.{}", row.name, f.name);
            end += f.len;
        }
        assert_eq!(end, row.len, "{}", row.name);
    }
    // Every other byte is unknown.
    for t in 0..=u8::MAX {
        if !SPEC_SIZES.iter().any(|&(s, _)| s == t) {
            assert_eq!(len_for(t), None, "len_for(0x{t:02x})");
        }
    }
    assert_eq!(
        MAX_MESSAGE_LEN,
        SPEC_SIZES.iter().map(|&(_, l)| l).max().unwrap()
    );
    assert_eq!(AddOrder::LEN, 36);
    assert_eq!(Noii::LEN, 50);
    assert_eq!(OperationalHalt::TYPE, b'h');
}

#[test]
fn every_type_round_trips() {
    let all = one_of_each();
    let mut seen: Vec<u8> = all.iter().map(|m| m.msg_type()).collect();
    seen.sort_unstable();
    let mut want: Vec<u8> = SPEC_SIZES.iter().map(|&(t, _)| t).collect();
    want.sort_unstable();
    assert_eq!(seen, want, "the samples cover every type once");

    for m in &all {
        let bytes = encode(m);
        assert_eq!(bytes.len(), m.encoded_len());
        assert_eq!(Some(bytes.len()), len_for(bytes[0]));
        let decoded = itch::decode(&bytes).unwrap();
        assert_eq!(decoded.msg_type(), m.msg_type());
        assert_eq!(decoded.header(), *m.header());
        assert_eq!(decoded.as_bytes(), &bytes[..]);
        assert_eq!(decoded.decode(), *m, "round trip of {m:?}");
        // Encoding the decoded message gives the same bytes back.
        assert_eq!(encode(&decoded.decode()), bytes);
    }
}

#[test]
fn encode_refuses_a_short_buffer() {
    for m in one_of_each() {
        let mut buf = vec![0u8; m.encoded_len() - 1];
        assert_eq!(
            m.encode(&mut buf),
            Err(EncodeError::BufferTooSmall {
                msg_type: m.msg_type(),
                needed: m.encoded_len(),
                available: m.encoded_len() - 1
            })
        );
        // A longer buffer is fine: the message goes at its start.
        let mut big = vec![0xeeu8; 64];
        assert_eq!(m.encode(&mut big), Ok(m.encoded_len()));
        assert!(big[m.encoded_len()..].iter().all(|&b| b == 0xee));
    }
}

#[test]
fn system_event_from_independent_bytes() {
    // A BinaryFILE record from the itchy crate's own test suite: length 12,
    // then a System Event "start of messages".
    let record = [
        0x00, 0x0c, 0x53, 0x00, 0x00, 0x00, 0x00, 0x28, 0x6a, 0xab, 0x3b, 0x3a, 0x99, 0x4f,
    ];
    let Message::SystemEvent(m) = itch::decode(&record[2..]).unwrap() else {
        panic!("not a system event");
    };
    assert_eq!(m.stock_locate(), 0);
    assert_eq!(m.header().tracking_number, 0);
    assert_eq!(m.timestamp().nanos(), 44_438_604_429_977);
    assert_eq!(m.timestamp().to_string(), "12:20:38.604429977");
    assert_eq!(m.event_code(), codes::event::START_OF_MESSAGES);
}

#[test]
fn add_order_from_hand_assembled_bytes() {
    #[rustfmt::skip]
    let bytes = [
        b'A',
        0x00, 0x0d,                         // stock locate 13
        0x00, 0x00,                         // tracking number
        0x1f, 0x1a, 0xce, 0xd9, 0xf0, 0x7b, // 09:30:00.000000123
        0, 0, 0, 0, 0, 0, 0x10, 0x01,       // order reference 4097
        b'S',                               // sell
        0x00, 0x00, 0x01, 0x2c,             // 300 shares
        b'A', b'A', b'P', b'L', b' ', b' ', b' ', b' ',
        0x00, 0x1c, 0xdb, 0x80,             // 189.1200
    ];
    let Message::AddOrder(m) = itch::decode(&bytes).unwrap() else {
        panic!("not an add order");
    };
    assert_eq!(m.stock_locate(), 13);
    assert_eq!(m.timestamp().to_string(), "09:30:00.000000123");
    assert_eq!(m.order_reference_number(), 4097);
    assert_eq!(m.buy_sell_indicator(), codes::side::SELL);
    assert_eq!(m.shares(), 300);
    assert_eq!(m.stock().as_str(), Some("AAPL"));
    assert_eq!(m.price(), Price4(1_891_200));
    assert_eq!(m.price().to_string(), "189.1200");
    assert!((m.price().to_f64() - 189.12).abs() < 1e-9);
}

#[test]
fn order_executed_and_cross_trade_from_hand_assembled_bytes() {
    #[rustfmt::skip]
    let executed = [
        b'E', 0x00, 0x0d, 0x00, 0x01, 0x1f, 0x1a, 0xce, 0xd9, 0xf0, 0x7b,
        0, 0, 0, 0, 0, 0, 0x10, 0x01,       // order reference 4097
        0x00, 0x00, 0x00, 0x64,             // 100 shares executed
        0, 0, 0, 0, 0x3a, 0xde, 0x68, 0xb1, // match number 987654321
    ];
    let Message::OrderExecuted(e) = itch::decode(&executed).unwrap() else {
        panic!("not an order executed");
    };
    assert_eq!(e.header().tracking_number, 1);
    assert_eq!(e.order_reference_number(), 4097);
    assert_eq!(e.executed_shares(), 100);
    assert_eq!(e.match_number(), 987_654_321);

    #[rustfmt::skip]
    let cross = [
        b'Q', 0x00, 0x07, 0x00, 0x00, 0x1f, 0x1a, 0xce, 0xd9, 0xf0, 0x7b,
        0, 0, 0, 0, 0, 0x0f, 0x42, 0x40,    // 1,000,000 shares: 8 bytes in 5.0
        b'S', b'P', b'Y', b' ', b' ', b' ', b' ', b' ',
        0x00, 0x44, 0xaa, 0x20,             // 450.0000
        0, 0, 0, 0, 0, 0, 0, 7,             // match number 7
        b'C',                               // closing cross
    ];
    let Message::CrossTrade(q) = itch::decode(&cross).unwrap() else {
        panic!("not a cross trade");
    };
    assert_eq!(q.shares(), 1_000_000);
    assert_eq!(q.stock(), stock("SPY"));
    assert_eq!(q.cross_price().to_string(), "450.0000");
    assert_eq!(q.match_number(), 7);
    assert_eq!(q.cross_type(), codes::cross_type::CLOSING);
}

#[test]
fn stock_directory_and_noii_from_independent_bytes() {
    // Message bodies from the itchy crate's test suite, behind a header.
    let head = [0x00, 0x01, 0x00, 0x00, 0, 0, 0, 0, 0, 0];
    #[rustfmt::skip]
    let directory_body = [
        0x41, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x4e, 0x20, 0x00, 0x00,
        0x00, 0x64, 0x4e, 0x43, 0x5a, 0x20, 0x50, 0x4e, 0x20, 0x31, 0x4e, 0x00,
        0x00, 0x00, 0x00, 0x4e,
    ];
    let mut bytes = vec![b'R'];
    bytes.extend_from_slice(&head);
    bytes.extend_from_slice(&directory_body);
    let Message::StockDirectory(r) = itch::decode(&bytes).unwrap() else {
        panic!("not a stock directory");
    };
    assert_eq!(r.stock_locate(), 1);
    assert_eq!(r.stock().as_str(), Some("A"));
    assert_eq!(r.market_category(), codes::market_category::NYSE);
    assert_eq!(r.financial_status_indicator(), b' ');
    assert_eq!(r.round_lot_size(), 100);
    assert_eq!(r.round_lots_only(), b'N');
    assert_eq!(r.issue_classification(), b'C');
    assert_eq!(r.issue_sub_type(), Alpha(*b"Z "));
    assert_eq!(r.authenticity(), b'P');
    assert_eq!(r.short_sale_threshold_indicator(), b'N');
    assert_eq!(r.ipo_flag(), b' ');
    assert_eq!(r.luld_reference_price_tier(), b'1');
    assert_eq!(r.etp_flag(), b'N');
    assert_eq!(r.etp_leverage_factor(), 0);
    assert_eq!(r.inverse_indicator(), b'N');

    #[rustfmt::skip]
    let noii_body = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4f,
        0x48, 0x49, 0x42, 0x42, 0x20, 0x20, 0x20, 0x20,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x43, 0x20,
    ];
    let mut bytes = vec![b'I'];
    bytes.extend_from_slice(&head);
    bytes.extend_from_slice(&noii_body);
    let Message::Noii(i) = itch::decode(&bytes).unwrap() else {
        panic!("not a NOII");
    };
    assert_eq!(
        i.imbalance_direction(),
        codes::imbalance_direction::INSUFFICIENT_ORDERS
    );
    assert_eq!(i.stock().as_str(), Some("HIBB"));
    assert_eq!(i.cross_type(), codes::cross_type::CLOSING);
    assert_eq!(i.price_variation_indicator(), b' ');
}

#[test]
fn typed_views_check_type_and_length() {
    let all = one_of_each();
    let add = encode(&all[10]);
    assert!(AddOrderRef::new(&add).is_ok());
    assert_eq!(
        OrderDeleteRef::new(&add),
        Err(DecodeError::WrongType {
            expected: b'D',
            found: b'A'
        })
    );
    assert_eq!(AddOrderRef::new(&[]), Err(DecodeError::Empty));
    assert_eq!(
        AddOrderRef::new(&add[..20]),
        Err(DecodeError::Truncated {
            msg_type: b'A',
            expected: 36,
            actual: 20
        })
    );
    assert_eq!(OwnedMessage::from(AddOrder::decode(&add).unwrap()), all[10]);
}

#[test]
fn bad_input_is_an_error_value() {
    assert_eq!(itch::decode(&[]), Err(DecodeError::Empty));
    assert_eq!(itch::decode(b"Z123"), Err(DecodeError::UnknownType(b'Z')));
    assert_eq!(itch::decode(&[0]), Err(DecodeError::UnknownType(0)));

    for m in one_of_each() {
        let bytes = encode(&m);
        let t = m.msg_type();
        let len = bytes.len();
        // Truncated at every length, including the type byte alone.
        for cut in 1..len {
            assert_eq!(
                itch::decode(&bytes[..cut]),
                Err(DecodeError::Truncated {
                    msg_type: t,
                    expected: len,
                    actual: cut
                })
            );
        }
        // One byte or many too many.
        for extra in [1usize, 7, 100] {
            let mut long = bytes.clone();
            long.resize(len + extra, 0);
            assert_eq!(
                itch::decode(&long),
                Err(DecodeError::TooLong {
                    msg_type: t,
                    expected: len,
                    actual: len + extra
                })
            );
        }
    }
}

#[test]
fn every_type_byte_and_length_is_classified() {
    let buf = [0x41u8; 64];
    for t in 0..=u8::MAX {
        for len in 1..=buf.len() {
            let mut b = buf[..len].to_vec();
            b[0] = t;
            let r = itch::decode(&b);
            match len_for(t) {
                None => assert_eq!(r, Err(DecodeError::UnknownType(t))),
                Some(l) if l == len => assert_eq!(r.unwrap().as_bytes(), &b[..]),
                Some(l) if len < l => {
                    assert!(matches!(r, Err(DecodeError::Truncated { .. })), "{r:?}")
                }
                Some(_) => assert!(matches!(r, Err(DecodeError::TooLong { .. })), "{r:?}"),
            }
        }
    }
}

#[test]
fn errors_say_what_is_wrong() {
    let e = itch::decode(&[b'A'; 20]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "truncated ITCH 'A' (AddOrder) message: 20 bytes, the specification gives 36"
    );
    let e = itch::decode(&[b'z'; 3]).unwrap_err();
    assert_eq!(e.to_string(), "unknown ITCH 5.0 message type 'z' (0x7a)");
    let e = itch::decode(&[0x01; 3]).unwrap_err();
    assert_eq!(e.to_string(), "unknown ITCH 5.0 message type 0x01");
    let mut long = vec![b'D'; 19];
    long.push(0);
    assert_eq!(
        itch::decode(&long).unwrap_err().to_string(),
        "ITCH 'D' (OrderDelete) message too long: 20 bytes, the specification gives 19"
    );
}

#[test]
fn directory_maps_locates_to_symbols() {
    let mut dir = Directory::new();
    for m in one_of_each() {
        let bytes = encode(&m);
        dir.apply(&itch::decode(&bytes).unwrap());
    }
    // Only the Stock Directory sample names a symbol.
    assert_eq!(dir.len(), 1);
    assert_eq!(dir.get(0x0101), Some(&stock("AAPL")));
    assert_eq!(dir.get(0x0102), None);
    assert_eq!(dir.get(u16::MAX), None);
    assert_eq!(dir.insert(u16::MAX, stock("LAST")), None);
    assert_eq!(dir.insert(u16::MAX, stock("LAST2")), Some(stock("LAST")));
    assert_eq!(
        dir.iter().map(|(l, _)| l).collect::<Vec<_>>(),
        [0x0101, u16::MAX]
    );
}
