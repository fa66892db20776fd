//! Exchange feed formats for the mdbus tools.
//!
//! `mdbus-relay` takes a NASDAQ feed (ITCH 5.0 over MoldUDP64) in and
//! republishes it as mdbus streams; `mdbus-replay` replays captures through
//! the bus and measures latency. Both speak the formats in this crate:
//!
//! | module | what it holds |
//! |---|---|
//! | [`itch`] | NASDAQ TotalView-ITCH 5.0: zero-copy decoding and encoding of all 23 message types, the stock locate [`Directory`](itch::Directory) |
//! | [`moldudp64`] | MoldUDP64 downstream packets (parse, iterate, build), heartbeats, end of session, request packets |
//! | [`arbiter`] | A/B line arbitration and gap recovery (re-requests), without I/O |
//! | [`binaryfile`] | the length-prefixed BinaryFILE format of historical ITCH files |
//! | [`pcap`] | reading UDP/IPv4 datagrams from pcap and pcapng captures; writing pcap |
//! | [`mdcap`] | mdbus's own capture format: timestamped, sequenced messages as the relay saw them |
//! | [`sniff`] | telling a file's format from its first bytes without consuming them (pipes and FIFOs work) |
//! | [`synth`] | a deterministic synthetic ITCH session and its packing into MoldUDP64 |
//! | [`alpha`] | fixed-width space-padded ASCII fields (symbols, MPIDs, session names) |
//!
//! Decoders never panic and never allocate per message: malformed input
//! comes back as an error value that says what is wrong and where.
//!
//! ```
//! use mdbus_feed::{itch, moldudp64::Packet};
//! use mdbus_feed::moldudp64::Session;
//! use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
//!
//! // A small synthetic day, packed as a feed server would send it...
//! let day = Generator::new(&SynthConfig { symbols: 3, order_messages: 200, ..Default::default() })?;
//! let mut packer = MoldPacker::new(day, Session::new("DEMO")?, 1, 1472)?;
//! let mut directory = itch::Directory::new();
//! // ...and read back the way a relay reads the wire.
//! while let Some(p) = packer.next_packet() {
//!     for block in Packet::parse(p.bytes)?.messages() {
//!         let msg = itch::decode(block?.data)?;
//!         directory.apply(&msg);
//!     }
//! }
//! assert_eq!(directory.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod alpha;
pub mod arbiter;
pub mod binaryfile;
pub mod bytes;
pub mod itch;
pub mod mdcap;
pub mod moldudp64;
pub mod pcap;
pub mod sniff;
pub mod synth;
