//! Code shared by the mdbus command-line tools and their tests.
//!
//! | module | what it holds |
//! |---|---|
//! | [`logging`] | the tools' log lines on stderr |
//! | [`exchange`] | an exchange simulator: an ITCH 5.0 session over MoldUDP64 on A and B multicast lines, with a re-request server |
//! | [`relay`] | `mdbus-relay`: MoldUDP64/ITCH in, routed mdbus streams out |
//! | [`replay`] | `mdbus-replay`: captures replayed through the bus, latency histograms out |
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod exchange;
pub mod logging;
pub mod relay;
pub mod replay;
