//! NASDAQ TotalView-ITCH 5.0: decoding and encoding of every message type.
//!
//! Reference: *Nasdaq TotalView-ITCH 5.0* specification, section 4
//! ("Message Formats"). All integers are big-endian; timestamps are 6-byte
//! nanoseconds since midnight ([`Timestamp`]); prices are fixed-point
//! ([`Price4`], [`Price8`]); symbols are 8-byte space-padded ASCII
//! ([`Stock`](crate::alpha::Stock)).
//!
//! Decoding is zero-copy: [`decode`] checks the type byte and the length and
//! returns a [`Message`] holding a borrowed view whose accessors read fields
//! on demand. [`Message::decode`] (or a view's `decode`) yields the owned
//! struct with every field, which is also what the encoders take.
//!
//! ```
//! use mdbus_feed::alpha::Stock;
//! use mdbus_feed::itch::{self, AddOrder, Header, Message, Price4, Timestamp};
//!
//! let add = AddOrder {
//!     header: Header {
//!         stock_locate: 7,
//!         tracking_number: 0,
//!         timestamp: Timestamp::from_hms(9, 30, 0).unwrap(),
//!     },
//!     order_reference_number: 42,
//!     buy_sell_indicator: b'B',
//!     shares: 100,
//!     stock: Stock::new("AAPL").unwrap(),
//!     price: Price4(1_895_000),
//! };
//! let mut buf = [0u8; itch::MAX_MESSAGE_LEN];
//! let n = add.encode(&mut buf).unwrap();
//! match itch::decode(&buf[..n]).unwrap() {
//!     Message::AddOrder(m) => {
//!         assert_eq!(m.order_reference_number(), 42);
//!         assert_eq!(m.price().to_string(), "189.5000");
//!         assert_eq!(m.decode(), add);
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```

pub mod codes;
mod directory;
mod fields;
mod messages;
mod value;

pub use directory::Directory;
pub use fields::{Header, Price4, Price8, Timestamp};
pub use messages::*;
pub use value::FieldValue;

/// Length of the part every message shares: type byte, stock locate,
/// tracking number, timestamp.
pub const HEADER_LEN: usize = 11;

/// Length of the longest message type (NOII, 50 bytes): a buffer this size
/// holds any message.
pub const MAX_MESSAGE_LEN: usize = 50;

/// Why bytes are not an ITCH 5.0 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all, so no type byte.
    #[error("empty ITCH message: no message type byte")]
    Empty,
    /// A type byte the specification does not define.
    #[error("unknown ITCH 5.0 message type {}", show_type(*.0))]
    UnknownType(u8),
    /// Fewer bytes than the specified length of the type.
    #[error(
        "truncated ITCH {} message: {actual} bytes, the specification gives {expected}",
        show_type(*msg_type)
    )]
    Truncated {
        /// The type byte.
        msg_type: u8,
        /// The specified length.
        expected: usize,
        /// The bytes present.
        actual: usize,
    },
    /// More bytes than the specified length of the type.
    #[error(
        "ITCH {} message too long: {actual} bytes, the specification gives {expected}",
        show_type(*msg_type)
    )]
    TooLong {
        /// The type byte.
        msg_type: u8,
        /// The specified length.
        expected: usize,
        /// The bytes present.
        actual: usize,
    },
    /// A typed view was asked for over a message of another type.
    #[error("expected an ITCH {} message, found type {}", show_type(*expected), show_type(*found))]
    WrongType {
        /// The type the view decodes.
        expected: u8,
        /// The type byte found.
        found: u8,
    },
}

impl DecodeError {
    pub(crate) fn wrong_length(msg_type: u8, expected: usize, actual: usize) -> Self {
        if actual < expected {
            Self::Truncated {
                msg_type,
                expected,
                actual,
            }
        } else {
            Self::TooLong {
                msg_type,
                expected,
                actual,
            }
        }
    }
}

/// Why a message could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer is shorter than the message.
    #[error(
        "cannot encode ITCH {} message: needs {needed} bytes, the buffer has {available}",
        show_type(*msg_type)
    )]
    BufferTooSmall {
        /// The type byte.
        msg_type: u8,
        /// The message length.
        needed: usize,
        /// The buffer length.
        available: usize,
    },
}

/// The name of a message type (the owned struct's name), or `None` for a
/// type the specification does not define.
pub fn type_name(type_byte: u8) -> Option<&'static str> {
    MESSAGE_TYPES
        .iter()
        .find(|t| t.type_byte == type_byte)
        .map(|t| t.name)
}

/// `'A' (AddOrder)`, `'a' (0x61)` or `0x00`: the type byte as a reader
/// wants to see it in an error.
fn show_type(t: u8) -> String {
    match (t.is_ascii_graphic(), type_name(t)) {
        (true, Some(name)) => format!("'{}' ({name})", char::from(t)),
        (true, None) => format!("'{}' (0x{t:02x})", char::from(t)),
        (false, _) => format!("0x{t:02x}"),
    }
}
