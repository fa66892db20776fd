//! mdbus-relay.
fn main() {}
