//! mdbus-replay.
fn main() {}
