//! Integration tests of mdbus-feed: the formats against their
//! specifications, bad input, property tests on arbitrary bytes, and
//! cross-checks against independent decoders (the `itchy` crate, tshark).

mod alloc;
mod arbiter;
mod binaryfile;
mod common;
mod fuzz;
mod hostile;
mod itch;
mod itchy_crosscheck;
mod mdcap;
mod moldudp64;
mod pcap;
mod synth;
mod tshark;
#[path = "../support/tshark.rs"]
mod tshark_support;
