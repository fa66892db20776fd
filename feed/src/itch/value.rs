//! One decoded field as a tagged value, for code that walks a message's
//! fields generically (bindings to other languages, printers) instead of
//! matching on every message type.

use super::fields::{Price4, Price8, Timestamp};
use crate::alpha::Alpha;

/// One body field of a message, as [`Message::for_each_field`](super::Message::for_each_field)
/// hands it out. Decoding into it never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue {
    /// A one-byte code (`Alpha(1)` in the specification: side, event code,
    /// trading state, ...), as the byte received.
    Code(u8),
    /// An unsigned integer field (shares, order references, match numbers,
    /// locate codes, ...).
    Integer(u64),
    /// A `Price(4)` field: the raw integer, 4 implied decimals
    /// ([`Price4::SCALE`] units per dollar).
    Price4(Price4),
    /// A `Price(8)` field: the raw integer, 8 implied decimals
    /// ([`Price8::SCALE`] units per dollar).
    Price8(Price8),
    /// A 6-byte timestamp: nanoseconds since midnight.
    Timestamp(Timestamp),
    /// A space-padded alphanumeric field (stock, MPID, reason, sub-type),
    /// bytes as received in `bytes[..len]`, padding included.
    Alpha {
        /// The field's bytes, left-aligned.
        bytes: [u8; 8],
        /// The field's width.
        len: usize,
    },
}

impl FieldValue {
    /// An alphanumeric field's bytes without the right padding (for other
    /// variants, empty).
    pub fn alpha_trimmed(&self) -> &[u8] {
        match self {
            FieldValue::Alpha { bytes, len } => {
                let b = &bytes[..(*len).min(8)];
                let end = b.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
                &b[..end]
            }
            _ => &[],
        }
    }
}

impl From<u8> for FieldValue {
    fn from(v: u8) -> Self {
        FieldValue::Code(v)
    }
}

impl From<u16> for FieldValue {
    fn from(v: u16) -> Self {
        FieldValue::Integer(v.into())
    }
}

impl From<u32> for FieldValue {
    fn from(v: u32) -> Self {
        FieldValue::Integer(v.into())
    }
}

impl From<u64> for FieldValue {
    fn from(v: u64) -> Self {
        FieldValue::Integer(v)
    }
}

impl From<Price4> for FieldValue {
    fn from(v: Price4) -> Self {
        FieldValue::Price4(v)
    }
}

impl From<Price8> for FieldValue {
    fn from(v: Price8) -> Self {
        FieldValue::Price8(v)
    }
}

impl From<Timestamp> for FieldValue {
    fn from(v: Timestamp) -> Self {
        FieldValue::Timestamp(v)
    }
}

impl<const N: usize> From<Alpha<N>> for FieldValue {
    fn from(v: Alpha<N>) -> Self {
        // ITCH's widest alphanumeric field is 8 bytes (a stock symbol);
        // the compile-time check below keeps it so.
        const { assert!(N <= 8, "an Alpha field wider than 8 bytes") };
        let mut bytes = [b' '; 8];
        bytes[..N].copy_from_slice(&v.0);
        FieldValue::Alpha { bytes, len: N }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode, AddOrder, Header, MwcbDeclineLevel};
    use super::*;
    use crate::alpha::{Mpid, Stock};

    fn fields(bytes: &[u8]) -> Vec<(&'static str, FieldValue)> {
        let mut out = Vec::new();
        decode(bytes)
            .unwrap()
            .for_each_field(|name, v| out.push((name, v)));
        out
    }

    #[test]
    fn add_order_fields_in_wire_order() {
        let add = AddOrder {
            header: Header {
                stock_locate: 7,
                tracking_number: 3,
                timestamp: Timestamp::new(34_200_000_000_001).unwrap(),
            },
            order_reference_number: 42,
            buy_sell_indicator: b'S',
            shares: 300,
            stock: Stock::new("MSFT").unwrap(),
            price: Price4(4_210_100),
        };
        let mut buf = [0; AddOrder::LEN];
        add.encode(&mut buf).unwrap();
        let got = fields(&buf);
        let names: Vec<_> = got.iter().map(|f| f.0).collect();
        let layout: Vec<_> = AddOrder::FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(names, layout);
        assert_eq!(got[0].1, FieldValue::Integer(42));
        assert_eq!(got[1].1, FieldValue::Code(b'S'));
        assert_eq!(got[2].1, FieldValue::Integer(300));
        assert_eq!(got[3].1.alpha_trimmed(), b"MSFT");
        assert_eq!(got[3].1, FieldValue::from(Stock::new("MSFT").unwrap()));
        assert_eq!(got[4].1, FieldValue::Price4(Price4(4_210_100)));
        assert_eq!(
            FieldValue::from(Mpid::new("NSDQ").unwrap()).alpha_trimmed(),
            b"NSDQ"
        );
    }

    #[test]
    fn price8_and_every_type_visits_its_layout() {
        let m = MwcbDeclineLevel {
            header: Header::default(),
            level1: Price8(1),
            level2: Price8(2),
            level3: Price8(300_000_000),
        };
        let mut buf = [0; MwcbDeclineLevel::LEN];
        m.encode(&mut buf).unwrap();
        assert_eq!(
            fields(&buf)[2],
            ("level3", FieldValue::Price8(Price8(300_000_000)))
        );
        // Every type: a message of zeros with its type byte visits exactly
        // the fields of its layout row.
        for t in super::super::MESSAGE_TYPES {
            let mut raw = vec![0u8; t.len];
            raw[0] = t.type_byte;
            let names: Vec<_> = fields(&raw).iter().map(|f| f.0).collect();
            let layout: Vec<_> = t.fields.iter().map(|f| f.name).collect();
            assert_eq!(names, layout, "{}", t.name);
        }
    }
}
