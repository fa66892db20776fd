//! `mdbus-relay`: MoldUDP64/ITCH 5.0 in, routed mdbus streams out.
//!
//! ```text
//!  line A ─┐                  ┌─ stream md-a ─▶ subscribers
//!  line B ─┼▶ arbiter ▶ route ┼─ stream md-b ─▶ ...
//!  re-request server ◀─▶      └─ MoldUDP64 pass-through (optional)
//! ```
//!
//! | module | what it holds |
//! |---|---|
//! | [`config`] | `config/relay.toml`: input, bus, routing, pass-through, counters, thread |
//! | [`route`] | the router: locate table, symbol lists, ranges, hash partitions |
//! | [`payload`] | what a relayed message looks like on the bus |
//! | [`pipeline`] | route + publish + count + time, per message, without I/O |
//! | [`ingest`] | the live input's sockets and the arbiter's sink |
//! | [`input`] | file inputs opened once, whose reads and pacing wake for a stop |
//! | [`passthrough`] | MoldUDP64 re-publication |
//! | [`stats`] | counters, the counters file's layout, the summary |
//! | [`run`] | the polling loop for live and file inputs |
//! | [`report`] | the summary printed at the end (text or JSON) |
//! | [`demo`] | `--demo`: the exchange simulator, the relay and a printing subscriber in one process |
//! | [`cli`] | the command line: the relay, `--demo`, `simulate` (the exchange simulator of `mdbus-exchange`) |
//!
//! Build a [`Relay`] from a [`RelayConfig`] (this binds and joins every
//! socket, creates every publisher and the counters file, so mistakes show
//! up at once), then [`Relay::run`] it on the thread that should poll.

pub mod archive;
pub mod cli;
pub mod config;
pub mod demo;
pub mod ingest;
pub mod input;
pub mod passthrough;
pub mod payload;
pub mod pipeline;
pub mod report;
pub mod route;
pub mod run;
pub mod stats;

use std::net::{Ipv4Addr, SocketAddrV4};

pub use config::RelayConfig;
pub use payload::RelayMessage;
pub use run::{Relay, RunOptions, Summary};

/// Why the relay cannot start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The configuration is wrong.
    #[error("{0}")]
    Config(#[from] mdbus::error::ConfigError),
    /// The bus refused a publisher.
    #[error("stream `{stream}`: {source}")]
    Bus {
        /// The stream.
        stream: String,
        /// What the bus said.
        #[source]
        source: mdbus::Error,
    },
    /// A multicast group could not be joined.
    #[error("line {line}: cannot join group {group} on interface {interface}: {reason}")]
    Join {
        /// `A` or `B`.
        line: String,
        /// The group.
        group: SocketAddrV4,
        /// The local interface address.
        interface: Ipv4Addr,
        /// What failed.
        reason: String,
    },
    /// Another socket operation failed.
    #[error("{what}: {source}")]
    Socket {
        /// What was being done.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Something named in the configuration cannot be used.
    #[error("{what}: {reason}")]
    Setup {
        /// What.
        what: String,
        /// Why.
        reason: String,
    },
    /// The counters file could not be created.
    #[error("{0}")]
    Counters(#[from] mdbus::counters::CountersError),
    /// A BinaryFILE input is unreadable.
    #[error("{path}: {source}")]
    BinaryFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        source: mdbus_feed::binaryfile::BinaryFileError,
    },
    /// A capture input is unreadable.
    #[error("{0}")]
    Capture(#[from] mdbus_feed::pcap::CaptureError),
    /// The polling thread could not be pinned.
    #[error("{0}")]
    Affinity(#[from] mdbus::affinity::AffinityError),
    /// The `.mdcap` recording could not be created or finished.
    #[error("recording: {0}")]
    Record(#[from] mdbus_feed::mdcap::MdcapError),
}
