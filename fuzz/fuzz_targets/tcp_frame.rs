//! libFuzzer entry point of the TCP frame reader (`fuzz/src/tcp_frame.rs`,
//! which `tests/fuzz_tcp_frame.rs` runs on stable).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mdbus_fuzz::tcp_frame::tcp_frame(data));
