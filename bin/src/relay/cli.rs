//! The `mdbus-relay` command line.
