//! What every mdbus tool shares.
//!
//! | module | what it holds |
//! |---|---|
//! | [`logging`] | the tools' log lines on stderr |
//! | [`signals`] | SIGINT/SIGTERM as a flag every loop checks |
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod logging;
pub mod signals;
