//! mdbus: a low-latency publisher/subscriber bus for market data and order
//! flow.
//!
//! Two kinds of channel, one API over every transport:
//! - a [`Stream`](stream) has one [`Publisher`] and many [`Subscriber`]s and
//!   sequences every message; subscribers learn of loss as [`Event`]s;
//! - a [`Session`] joins two peers, reliable and ordered both ways, with
//!   flow control.
//!
//! A [`Bus`] built from a [`Config`] hands them out. Handles are `Send` but
//! not `Sync`: each thread owns its own, and the send and receive paths take
//! no locks and allocate nothing.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("mdbus-doc-lib-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let cfg = mdbus::Config::from_toml_str(r#"
//!     transport = "shm"
//!     [streams.md]
//!     max_message = 64
//! "#, "<example>")?;
//! # let mut cfg = cfg; cfg.shm.dir = dir.clone();
//! let bus = mdbus::Bus::new(cfg)?;
//! let mut publisher = bus.publisher("md")?;
//! let mut subscriber = bus.subscriber("md")?;
//! publisher.publish(b"tick")?;
//! let n = subscriber.poll(|e| assert!(matches!(e, mdbus::Event::Message(m) if m.payload() == b"tick")))?;
//! assert_eq!(n, 1);
//! # drop((publisher, subscriber)); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Handles move between threads but are never shared:
//!
//! ```
//! fn send<T: Send>() {}
//! send::<mdbus::Publisher>();
//! send::<mdbus::Subscriber>();
//! send::<mdbus::Session>();
//! ```
//!
//! ```compile_fail
//! fn sync<T: Sync>() {}
//! sync::<mdbus::Publisher>();
//! ```
//!
//! ```compile_fail
//! fn sync<T: Sync>() {}
//! sync::<mdbus::Session>();
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(loom))]
pub mod archive;
#[cfg(not(loom))]
mod bus;
pub mod clock;
#[cfg(not(loom))]
pub mod config;
#[cfg(not(loom))]
pub mod counters;
pub mod error;
#[cfg(not(loom))]
pub mod leftovers;
pub mod message;
#[cfg(not(loom))]
pub mod metrics;
pub mod names;
#[cfg(not(loom))]
pub mod recovery;
#[cfg(not(loom))]
mod service;
#[cfg(not(loom))]
pub mod session;
#[cfg(not(loom))]
pub mod stream;
mod sync;
pub mod sys;
pub mod transport;
pub mod wait;
pub mod wire;

#[cfg(not(loom))]
pub use bus::Bus;
#[cfg(not(loom))]
pub use config::{Config, TransportKind};
pub use error::{Error, Result};
pub use message::{Event, Message};
#[cfg(not(loom))]
pub use session::{Session, SessionClaim, SessionStats};
#[cfg(not(loom))]
pub use stream::{Claim, Publisher, Subscriber, SubscriberStats};
/// NUMA placement and thread pinning; lives in [`sys::affinity`].
#[cfg(not(loom))]
pub use sys::affinity;
#[cfg(not(loom))]
pub use transport::verbs::VerbsWork;
