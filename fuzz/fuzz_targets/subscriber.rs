//! libFuzzer entry point of `mdbus_fuzz::subscriber`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mdbus_fuzz::datagram::subscriber(data));
