//! libFuzzer entry point of the TCP frame reader (`fuzz/src/tcp_frame.rs`,
//! which `tests/tcp_frame_fuzz.rs` runs on stable).
#![no_main]

#[path = "../src/tcp_frame.rs"]
mod driver;

libfuzzer_sys::fuzz_target!(|data: &[u8]| driver::tcp_frame(data));
