//! mdbus-stat.
fn main() {}
