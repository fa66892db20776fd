//! Sessions: two peers, reliable and ordered in both directions, with flow
//! control, for order flow.
//!
//! One side accepts, the other connects; after that both sides are equal.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("mdbus-doc-session-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let mut cfg = mdbus::Config::default();
//! cfg.transport = mdbus::TransportKind::Shm;
//! # cfg.shm.dir = dir.clone();
//! let bus = mdbus::Bus::new(cfg)?;
//! // In real use the two ends live in two processes (or threads).
//! let acceptor = std::thread::spawn({
//!     let bus = bus.clone();
//!     move || bus.session_accept("orders")
//! });
//! let mut client = bus.session_connect("orders")?;
//! let mut server = acceptor.join().unwrap()?;
//!
//! client.send(b"new order")?;
//! let mut got = Vec::new();
//! while server.poll(|m| got.extend_from_slice(m.payload()))? == 0 {}
//! assert_eq!(got, b"new order");
//! # drop((client, server)); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), mdbus::Error>(())
//! ```

use std::ops::{Deref, DerefMut};

use crate::counters::registry::{session as sc, Slots};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transport::shm::ShmSession;
use crate::transport::tcp::TcpSession;
use crate::transport::verbs::{RcSession, VerbsWork};
use crate::transport::SessionEnd;
use crate::wait::{Wait, WaitStrategy};
use crate::wire::FLAG_TIMESTAMP;

/// The transport a session runs on.
#[derive(Debug)]
// Handles are created once and owned by one thread for their life; a box
// would add a pointer chase to every call on the hot path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SessionImpl {
    Shm(ShmSession),
    Tcp(TcpSession),
    Verbs(RcSession),
}

macro_rules! with_end {
    ($self:expr, $t:ident => $body:expr) => {
        match $self {
            SessionImpl::Shm($t) => $body,
            SessionImpl::Tcp($t) => $body,
            SessionImpl::Verbs($t) => $body,
        }
    };
}

/// Counters of one session end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Messages sent.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// Times a send found the peer without room and had to wait.
    pub backpressured: u64,
}

/// One end of a session. `Send`, not `Sync`: one thread owns it.
#[derive(Debug)]
pub struct Session {
    inner: SessionImpl,
    name: String,
    stamp: bool,
    batch: usize,
    wait: WaitStrategy,
    stats: SessionStats,
    bytes_sent: u64,
    bytes_received: u64,
    /// This end's slots in the bus's counters file.
    counters: Option<Slots>,
}

/// Waits between two liveness checks while the peer has no room.
const CHECK_EVERY_WAITS: u32 = 4096;

impl Session {
    pub(crate) fn new(
        inner: SessionImpl,
        name: &str,
        stamp: bool,
        batch: usize,
        wait: WaitStrategy,
        counters: Option<Slots>,
    ) -> Session {
        Session {
            inner,
            name: name.into(),
            stamp,
            batch,
            wait,
            stats: SessionStats::default(),
            bytes_sent: 0,
            bytes_received: 0,
            counters,
        }
    }

    /// Counts an error returned to the application, and passes it on.
    #[cold]
    fn count_error(&self, e: Error) -> Error {
        if let Some(c) = &self.counters {
            c.error(&e);
        }
        e
    }

    /// The session's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Largest payload accepted.
    pub fn max_message(&self) -> usize {
        with_end!(&self.inner, t => t.max_message())
    }

    /// Counters so far.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// Verbs work this end has asked of its RDMA device so far (work
    /// requests and doorbells posted, completions polled); `None` on shm
    /// and tcp.
    pub fn verbs_work(&self) -> Option<VerbsWork> {
        match &self.inner {
            SessionImpl::Verbs(t) => Some(t.verbs_work()),
            _ => None,
        }
    }

    /// Copies the verbs work and waiting counts into the counters file
    /// (every `MIRROR_EVERY` calls, after each wait and at close: they
    /// change with every message, and a reader needs no per-message
    /// precision).
    #[cold]
    fn mirror_work(&self) {
        if let (Some(c), SessionImpl::Verbs(t)) = (&self.counters, &self.inner) {
            for (i, v) in t.verbs_work().values().into_iter().enumerate() {
                c.set(sc::VERBS_WORK + i, v);
            }
            for (i, v) in t.wait_counts().into_iter().enumerate() {
                c.set(sc::VERBS_WAIT + i, v);
            }
        }
    }

    fn check_len(&self, len: usize) -> Result<()> {
        let max = self.max_message();
        if len > max {
            return Err(Error::MessageTooLarge {
                len,
                max,
                channel: format!("session `{}`", self.name),
            });
        }
        Ok(())
    }

    /// Claims `len` bytes when the peer has room for one more message;
    /// `Ok(None)` when it has not.
    #[inline]
    pub fn try_claim(&mut self, len: usize) -> Result<Option<SessionClaim<'_>>> {
        self.check_len(len)?;
        let Some(buf) = with_end!(&mut self.inner, t => t.try_claim(len)) else {
            return Ok(None);
        };
        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
        Ok(Some(SessionClaim {
            session: self,
            ptr,
            len,
        }))
    }

    /// Claims `len` bytes, waiting (with the configured wait strategy) while
    /// the peer has no room. Fails when the peer dies or closes meanwhile.
    #[inline]
    pub fn claim(&mut self, len: usize) -> Result<SessionClaim<'_>> {
        self.check_len(len)?;
        let mut waits = 0u32;
        loop {
            // Re-borrow per attempt: the pointer is taken only on success.
            let got = with_end!(&mut self.inner, t => t.try_claim(len).map(|b| (b.as_mut_ptr(), b.len())));
            if let Some((ptr, len)) = got {
                if waits > 0 {
                    self.stats.backpressured += 1;
                    if let Some(c) = &self.counters {
                        c.set(sc::CREDIT_STALLS, self.stats.backpressured);
                    }
                }
                return Ok(SessionClaim {
                    session: self,
                    ptr,
                    len,
                });
            }
            waits += 1;
            if waits % CHECK_EVERY_WAITS == 0 {
                if let Err(e) = with_end!(&mut self.inner, t => t.check_peer()) {
                    return Err(self.count_error(e));
                }
            }
            self.wait.wait();
        }
    }

    /// Copies `bytes` into the session and sends them, waiting while the
    /// peer has no room. Returns the message's sequence number.
    #[inline]
    pub fn send(&mut self, bytes: &[u8]) -> Result<u64> {
        let mut c = self.claim(bytes.len())?;
        c.copy_from_slice(bytes);
        c.commit()
    }

    /// Delivers received messages, up to the session's `poll_batch`, to `f`
    /// in order. Returns how many; 0 when none. Fails once the peer has
    /// died or closed and everything it sent has been delivered.
    #[inline]
    pub fn poll<F: FnMut(Message<'_>)>(&mut self, mut f: F) -> Result<usize> {
        let bytes = &mut self.bytes_received;
        let mut counted = |m: Message<'_>| {
            *bytes += m.payload.len() as u64;
            f(m)
        };
        let n = match with_end!(&mut self.inner, t => t.poll(self.batch, &mut counted)) {
            Ok(n) => n,
            Err(e) => return Err(self.count_error(e)),
        };
        self.stats.received += n as u64;
        if let Some(c) = &mut self.counters {
            if n > 0 {
                c.set(sc::MESSAGES_RECEIVED, self.stats.received);
                c.set(sc::BYTES_RECEIVED, self.bytes_received);
            }
            if c.tick() {
                self.mirror_work();
            }
        }
        Ok(n)
    }

    /// Blocks until the transport signals that a message may have arrived,
    /// or `timeout` passes: in poll(2) on the socket (TCP) or on the
    /// receive completion queue's channel (RDMA; in `write` mode after
    /// telling the sender it sleeps, so that the sender's next message
    /// brings a write-with-immediate). Without an event source it naps:
    /// shared memory for at most [`NAP`](crate::wait::NAP); sessions on an
    /// acceptor's shared receive queue 1 ms first, doubled per nap that
    /// brought nothing, up to `timeout`. Returns true when woken by an event,
    /// false on timeout or on a signal. On RDMA the first wait after
    /// traffic only arms the completion queue and returns false at once (a
    /// completion before arming raises no event); the next one sleeps.
    /// Call [`poll`](Self::poll) next either way.
    pub fn wait_for_data(&mut self, timeout: std::time::Duration) -> Result<bool> {
        match with_end!(&mut self.inner, t => t.wait_for_data(timeout)) {
            Ok(woke) => {
                // A block costs far more than the copy: the counts of
                // sleeps and wake-ups are current while the session idles.
                self.mirror_work();
                Ok(woke)
            }
            Err(e) => Err(self.count_error(e)),
        }
    }

    /// `poll_wait`'s block: as `wait_for_data`, but may outlast `timeout`
    /// once a stop ends blocks at once (see `SessionEnd::wait_idle`).
    fn wait_idle(&mut self, timeout: std::time::Duration) -> Result<bool> {
        match with_end!(&mut self.inner, t => t.wait_idle(timeout)) {
            Ok(woke) => {
                self.mirror_work();
                Ok(woke)
            }
            Err(e) => Err(self.count_error(e)),
        }
    }

    /// [`poll`](Self::poll), then, when `wait` says the session has been
    /// quiet long enough, [`wait_for_data`](Self::wait_for_data) for at
    /// most its `max_block`. Returns what the poll delivered. A loop of
    /// these spins while messages flow and sleeps when they stop; each call
    /// returns within `max_block`, so the loop can check a stop flag. After
    /// [`wake_on_stop`](crate::wait::wake_on_stop) an idle RDMA RC session
    /// sleeps until its next keep-alive instead (at most
    /// [`LONG_BLOCK`](crate::wait::LONG_BLOCK)), and
    /// [`stop_waits`](crate::wait::stop_waits) ends the sleep at once.
    #[inline]
    pub fn poll_wait<F: FnMut(Message<'_>)>(
        &mut self,
        wait: &mut crate::wait::Adaptive,
        f: F,
    ) -> Result<usize> {
        let n = self.poll(f)?;
        if let Some(limit) = wait.after_poll(n) {
            let event = self.wait_idle(limit)?;
            wait.woke(event);
        }
        Ok(n)
    }

    /// Frees the session's name for another `session_accept` while this
    /// session goes on (shm: its file leaves the directory; tcp and verbs
    /// already closed the listener when the peer connected).
    pub(crate) fn release_name(&self) {
        if let SessionImpl::Shm(t) = &self.inner {
            t.unpublish();
        }
    }

    /// Closes this end: the peer's next polls fail with
    /// [`Error::PeerClosed`] once it has read everything sent before.
    pub fn close(mut self) {
        with_end!(&mut self.inner, t => t.close());
        self.mirror_work();
    }

    /// Closes this end as [`Session::close`] does and returns the verbs
    /// work it asked of its device, the close included (`None` on shm and
    /// tcp).
    pub fn close_counted(mut self) -> Option<VerbsWork> {
        with_end!(&mut self.inner, t => t.close());
        self.mirror_work();
        self.verbs_work()
    }

    #[inline]
    fn commit(&mut self, len: usize, timestamp: Option<u64>) -> Result<u64> {
        let ts = timestamp.or_else(|| self.stamp.then(crate::clock::now_ns));
        let (flags, ts) = match ts {
            Some(t) => (FLAG_TIMESTAMP, t),
            None => (0, 0),
        };
        let seq = match with_end!(&mut self.inner, t => t.commit(len, flags, ts)) {
            Ok(s) => s,
            Err(e) => return Err(self.count_error(e)),
        };
        self.stats.sent += 1;
        self.bytes_sent += len as u64;
        if let Some(c) = &mut self.counters {
            // Single-writer relaxed stores: no lock, no read-modify-write.
            c.set(sc::MESSAGES_SENT, self.stats.sent);
            c.set(sc::BYTES_SENT, self.bytes_sent);
            c.set(sc::LAST_SEQ_SENT, seq);
            if c.tick() {
                self.mirror_work();
            }
        }
        Ok(seq)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.mirror_work();
    }
}

/// Space claimed in a session's send buffer. Dereferences to the bytes.
#[derive(Debug)]
pub struct SessionClaim<'a> {
    session: &'a mut Session,
    ptr: *mut u8,
    len: usize,
}

impl SessionClaim<'_> {
    /// Sends the message; returns its sequence number.
    #[inline]
    pub fn commit(self) -> Result<u64> {
        self.session.commit(self.len, None)
    }

    /// Sends the message with the given send timestamp (ns since the epoch).
    #[inline]
    pub fn commit_with_timestamp(self, timestamp_ns: u64) -> Result<u64> {
        self.session.commit(self.len, Some(timestamp_ns))
    }

    /// Shortens the message to `len` bytes before committing.
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl Deref for SessionClaim<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is the claimed slot, exclusively ours while
        // the session is mutably borrowed by this claim.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for SessionClaim<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
