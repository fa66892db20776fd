//! libFuzzer entry point of `mdbus_feed_fuzz::arbiter_attack`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mdbus_feed_fuzz::arbiter_attack(data));
