//! Packet captures of MoldUDP64 over UDP/IPv4: reading pcap and pcapng
//! files, and writing classic pcap files.
//!
//! The container formats are handled by the `pcap-file` crate and the
//! Ethernet / Linux cooked (SLL) / IPv4 / UDP headers by `etherparse`; this
//! module adds what a feed tool needs on top: one call yielding
//! `(timestamp, source, destination, UDP payload)`, counters for everything
//! skipped, and errors that name the file and say what is wrong with it.
//!
//! References: the pcap file format (tcpdump.org, `pcap-savefile(5)`), the
//! *PCAP Next Generation (pcapng) Capture File Format* (IETF draft), and the
//! link-layer header type registry (tcpdump.org `linktypes.html`).

mod reader;
mod writer;

pub use reader::{capture_format, CaptureFormat, CaptureReader, CaptureStats, Datagram};
pub use writer::CaptureWriter;

use std::io;

/// Why a capture could not be read or written. Every variant names the
/// file (or the name the caller gave the stream).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened or created.
    #[error("cannot open capture {name}: {source}")]
    Open {
        /// File name.
        name: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file does not start like a pcap or pcapng capture.
    #[error("{name} is not a pcap or pcapng capture: {found}")]
    NotACapture {
        /// File name.
        name: String,
        /// What the file starts with instead.
        found: String,
    },
    /// The file ends in the middle of a header or a record.
    #[error("{name} is truncated: {what}")]
    Truncated {
        /// File name.
        name: String,
        /// Where it ends.
        what: String,
    },
    /// A header or record is not valid.
    #[error("{name} is malformed at record {record}: {reason}")]
    Malformed {
        /// File name.
        name: String,
        /// Number of the record (packet, or pcapng block), counting from
        /// 1; 0 is the file header.
        record: u64,
        /// What is wrong.
        reason: String,
    },
    /// A classic pcap file whose link type is not one this reader knows.
    #[error(
        "{name} has link type {link_type}; supported: Ethernet (1), Linux cooked SLL (113), \
         raw IPv4 (101, 228)"
    )]
    UnsupportedLinkType {
        /// File name.
        name: String,
        /// The link type number.
        link_type: u32,
    },
    /// Reading or writing failed.
    #[error("I/O error on capture {name}: {source}")]
    Io {
        /// File name.
        name: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A payload larger than one IPv4 UDP datagram can carry.
    #[error("cannot write to {name}: a {len}-byte UDP payload exceeds the IPv4 maximum of 65507")]
    PayloadTooLarge {
        /// File name.
        name: String,
        /// Payload length.
        len: usize,
    },
    /// A timestamp classic pcap cannot represent (seconds past `u32::MAX`).
    #[error(
        "cannot write to {name}: timestamp {timestamp_ns} ns is past the pcap limit (year 2106)"
    )]
    TimestampOutOfRange {
        /// File name.
        name: String,
        /// The timestamp given.
        timestamp_ns: u64,
    },
}
