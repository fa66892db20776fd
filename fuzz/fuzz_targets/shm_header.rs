//! libFuzzer entry point of `mdbus_fuzz::shm_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mdbus_fuzz::shm_header::shm_header(data));
