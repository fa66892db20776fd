//! The C ABI of mdbus (library `libmdbus.so` / `libmdbus.a`, header
//! `include/mdbus.h`, generated from this crate by cbindgen).
//!
//! Every entry point returns `MDBUS_OK` (0) or a negative `MDBUS_ERR_*`
//! code, except the polls, which return how many events they delivered (or a
//! negative code). On failure, `mdbus_last_error_message()` gives the
//! sentence the Rust error would print, per thread. A panic never crosses
//! the boundary: it is caught and returned as `MDBUS_ERR_PANIC`.
//!
//! Thread rules (the Rust handles' `Send`-not-`Sync`): a bus may be used
//! from any thread at once; every publisher, subscriber and session handle
//! belongs to one thread at a time. It may be handed to another thread (with
//! the usual happens-before, e.g. a mutex or a queue), but two threads must
//! never call into the same handle concurrently.
//!
//! Zero copy: `mdbus_publisher_claim` hands out the transport's own send
//! buffer, and a poll callback sees each payload in place, valid only until
//! the callback returns. Nothing on those paths allocates.
#![allow(non_camel_case_types)]

mod bus;
mod errors;
mod event;
mod handle;
mod publisher;
mod session;
mod subscriber;

pub use bus::*;
pub use errors::*;
pub use event::*;
pub use publisher::*;
pub use session::*;
pub use subscriber::*;

#[cfg(test)]
mod tests;
