//! Fuzz targets of the mdbus library, as plain functions of the input bytes.
//!
//! cargo-fuzz runs them under libFuzzer (`fuzz_targets/`); the library's
//! stable test suite includes each module (`tests/fuzz_*.rs`) and runs it
//! over the seed corpus (`fuzz/seeds/TARGET/`), random and mutated inputs.
//! Each target panics only when a property is broken.

pub mod datagram;
pub mod shm_header;
pub mod tcp_frame;
