//! Loss recovery for streams over datagram transports (UDP multicast, RDMA
//! UD multicast): a deterministic protocol core with no sockets and no
//! clock of its own.
//!
//! Callers hand datagrams in with the current time (`now`, in ns from any
//! monotonic origin the two sides need not share) and get datagrams and
//! [`Event`](crate::Event)s back through callbacks. Drivers own the
//! sockets or queue pairs and call:
//!
//! | side | calls | callbacks get |
//! | --- | --- | --- |
//! | [`PublisherCore`] | `publish` / `claim`+`commit` (or `commit_gather_at`, `flush_gather` for a gathering send), `flush`, `tick`, `close`, `on_datagram` (requests) | datagrams for the multicast group(s) (with the gathering methods, a header and a slice of the retained window); replies for the requester |
//! | [`SubscriberCore`] | `on_datagram(Line, ..)` (data and replies), `tick` | events in stream order; requests for the publisher |
//!
//! The byte layout is in [`frame`] and docs/WIRE.md ("Datagram streams").
//!
//! Every buffer is allocated when a core is constructed: the publisher's
//! retained window (which keeps each message as it goes on the wire, so a
//! datagram of new messages is a slice of it) and three datagram buffers, the subscriber's reorder
//! window, reassembly buffers and request buffer. Publishing, receiving,
//! requesting and retransmitting only index into them.
//!
//! ```
//! use mdbus::recovery::{Line, PublisherConfig, PublisherCore, SubscriberConfig, SubscriberCore};
//! use mdbus::Event;
//!
//! let mut publisher = PublisherCore::new(&PublisherConfig::new(1, 100))?;
//! let mut subscriber = SubscriberCore::new(&SubscriberConfig::new(1))?;
//!
//! let mut wire: Vec<Vec<u8>> = Vec::new();
//! publisher.publish(b"hello", None, 0, |d: &[u8]| wire.push(d.to_vec()))?;
//! publisher.publish(b"world", None, 0, |d: &[u8]| wire.push(d.to_vec()))?;
//! publisher.flush(0, |d: &[u8]| wire.push(d.to_vec()));
//! assert_eq!(wire.len(), 1, "both messages in one datagram");
//!
//! let mut got = Vec::new();
//! for d in &wire {
//!     subscriber
//!         .on_datagram(Line::A, d, 10, |e| {
//!             if let Event::Message(m) = e {
//!                 got.push((m.seq(), m.payload().to_vec()));
//!             }
//!         }, |_request: &[u8]| {})
//!         .unwrap();
//! }
//! assert_eq!(got, vec![(1, b"hello".to_vec()), (2, b"world".to_vec())]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod counters;
pub mod fanout;
pub mod frame;
pub mod mac;
mod packer;
pub mod publisher;
mod reassembly;
mod reorder;
mod retained;
mod rng;
pub mod subscriber;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod sim;

pub use counters::{Counters, Drops};
pub use frame::DropReason;
pub use mac::Mac;
pub use publisher::{Dest, PublishError, PublisherConfig, PublisherCore, Repair};
pub use subscriber::{nak_wait, Line, SubscriberConfig, SubscriberCore};

/// A zeroed buffer of `len` bytes with every page written once, so the
/// first use on the hot path does not take page faults.
fn prefaulted(len: usize) -> Box<[u8]> {
    let mut b = vec![0u8; len].into_boxed_slice();
    for i in (0..len).step_by(4096) {
        b[i] = 0;
    }
    // Keeps the writes above from being optimised away.
    std::hint::black_box(&mut b);
    b
}
