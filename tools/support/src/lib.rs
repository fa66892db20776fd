//! What every mdbus tool shares.
//!
//! | module | what it holds |
//! |---|---|
//! | [`logging`] | the tools' log lines on stderr |
//! | [`signals`] | SIGINT/SIGTERM as a flag every loop checks |

pub mod logging;
pub mod signals;
