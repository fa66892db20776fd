//! Streams: one publisher, many subscribers, every message sequenced.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("mdbus-doc-stream-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let mut cfg = mdbus::Config::default();
//! cfg.transport = mdbus::TransportKind::Shm;
//! # cfg.shm.dir = dir.clone();
//! let bus = mdbus::Bus::new(cfg)?;
//! let mut publisher = bus.publisher("md")?;
//! let mut subscriber = bus.subscriber("md")?;
//!
//! // Zero-copy: write in place, then commit.
//! let mut claim = publisher.claim(5)?;
//! claim.copy_from_slice(b"hello");
//! assert_eq!(claim.commit()?, 1);
//! publisher.publish(b"world")?;
//!
//! let mut got = Vec::new();
//! subscriber.poll(|event| {
//!     if let mdbus::Event::Message(m) = event {
//!         got.push((m.seq(), m.payload().to_vec()));
//!     }
//! })?;
//! assert_eq!(got, vec![(1, b"hello".to_vec()), (2, b"world".to_vec())]);
//! # drop((publisher, subscriber)); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), mdbus::Error>(())
//! ```

use std::ops::{Deref, DerefMut};

use crate::counters::registry::{publisher as pc, subscriber as sc, Slots};
use crate::error::{Error, Result};
use crate::message::Event;
use crate::transport::datagram_stream::{DatagramPublisher, DatagramSubscriber};
use crate::transport::shm::{ShmPublisher, ShmSubscriber};
use crate::transport::udp::UdpLink;
use crate::transport::verbs::UdLink;
use crate::transport::{StreamReceive, StreamSend};
use crate::wire::{FLAG_SOURCE_GAP, FLAG_TIMESTAMP};

/// The transport a publisher runs on.
#[derive(Debug)]
// Handles are created once and owned by one thread for their life; a box
// would add a pointer chase to every call on the hot path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum PublisherImpl {
    Shm(ShmPublisher),
    Udp(DatagramPublisher<UdpLink>),
    Ud(DatagramPublisher<UdLink>),
    /// A datagram publisher shared with the bus's service thread.
    Served(crate::service::Served),
}

impl PublisherImpl {
    /// Ends the call that entered a served publisher (see
    /// `crate::service`); nothing for the others.
    #[inline]
    fn leave(&self) {
        if let PublisherImpl::Served(s) = self {
            s.leave();
        }
    }
}

/// The transport a subscriber runs on.
#[derive(Debug)]
// Handles are created once and owned by one thread for their life; a box
// would add a pointer chase to every call on the hot path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SubscriberImpl {
    Shm(ShmSubscriber),
    Udp(DatagramSubscriber<UdpLink>),
    Ud(DatagramSubscriber<UdLink>),
    /// The archive's range first, then the live stream (`late_join =
    /// "archive"`).
    Replay(Box<crate::archive::ReplaySubscriber>),
}

impl SubscriberImpl {
    /// See [`Subscriber::wait_for_data`]. A replay sleeps only once it is
    /// live: while it replays, the archive always has something to read.
    pub(crate) fn wait_for_data(&mut self, timeout: std::time::Duration) -> Result<bool> {
        match self {
            SubscriberImpl::Shm(t) => Ok(t.wait_for_data(timeout)),
            SubscriberImpl::Udp(t) => t.wait_for_data(timeout),
            SubscriberImpl::Ud(t) => t.wait_for_data(timeout),
            SubscriberImpl::Replay(r) => match r.live_mut() {
                Some(live) => live.wait_for_data(timeout),
                None => Ok(true),
            },
        }
    }

    /// `poll_wait`'s block: as `wait_for_data`, but a datagram stream may
    /// sleep past `timeout` until its recovery's next timer once a stop
    /// ends blocks at once (see `DatagramSubscriber::wait_idle`).
    fn wait_idle(&mut self, timeout: std::time::Duration) -> Result<bool> {
        match self {
            SubscriberImpl::Udp(t) => t.wait_idle(timeout),
            SubscriberImpl::Ud(t) => t.wait_idle(timeout),
            SubscriberImpl::Replay(r) => match r.live_mut() {
                Some(live) => live.wait_idle(timeout),
                None => Ok(true),
            },
            SubscriberImpl::Shm(_) => self.wait_for_data(timeout),
        }
    }

    /// Polls the transport (the archive, for a replay).
    #[inline]
    pub(crate) fn poll_events<F: FnMut(Event<'_>)>(
        &mut self,
        max: usize,
        f: &mut F,
    ) -> Result<usize> {
        match self {
            SubscriberImpl::Shm(t) => t.poll(max, f),
            SubscriberImpl::Udp(t) => t.poll(max, f),
            SubscriberImpl::Ud(t) => t.poll(max, f),
            SubscriberImpl::Replay(t) => t.poll(max, f),
        }
    }

    /// The publisher epoch followed, once known.
    pub(crate) fn epoch(&self) -> Option<u64> {
        match self {
            SubscriberImpl::Shm(t) => Some(t.epoch()),
            SubscriberImpl::Udp(t) => t.epoch(),
            SubscriberImpl::Ud(t) => t.epoch(),
            SubscriberImpl::Replay(t) => t.live_epoch(),
        }
    }

    /// The transport's loss-recovery counters; none on shared memory.
    pub(crate) fn recovery_counters(&self) -> Option<crate::recovery::Counters> {
        match self {
            SubscriberImpl::Shm(_) => None,
            SubscriberImpl::Udp(t) => Some(t.counters()),
            SubscriberImpl::Ud(t) => Some(t.counters()),
            SubscriberImpl::Replay(t) => t.live_recovery_counters(),
        }
    }
}

macro_rules! with_pub {
    ($self:expr, $t:ident => $body:expr) => {
        match $self {
            PublisherImpl::Shm($t) => $body,
            PublisherImpl::Udp($t) => $body,
            PublisherImpl::Ud($t) => $body,
            PublisherImpl::Served(s) => match s.enter() {
                crate::service::Datagram::Udp($t) => $body,
                crate::service::Datagram::Ud($t) => $body,
            },
        }
    };
}

/// The single publisher of a stream. `Send`, not `Sync`: one thread owns it.
#[derive(Debug)]
pub struct Publisher {
    inner: PublisherImpl,
    name: String,
    stamp: bool,
    published: u64,
    bytes: u64,
    /// The transport's largest payload, fixed at creation: checked here
    /// so that a claim dispatches on the transport once, not twice.
    max_message: usize,
    /// This handle's slots in the bus's counters file.
    counters: Option<Slots>,
}

/// The counters-file slots a commit writes, in [`Slots::set3`] order.
const PUBLISHED_SLOTS: [usize; 3] = [pc::MESSAGES, pc::BYTES, pc::LAST_SEQ];

/// The loss-recovery counters of a publisher's transport.
fn publisher_recovery(inner: &PublisherImpl) -> Option<crate::recovery::Counters> {
    match inner {
        PublisherImpl::Shm(_) => None,
        PublisherImpl::Udp(t) => Some(t.counters()),
        PublisherImpl::Ud(t) => Some(t.counters()),
        PublisherImpl::Served(s) => {
            let c = match s.enter() {
                crate::service::Datagram::Udp(t) => t.counters(),
                crate::service::Datagram::Ud(t) => t.counters(),
            };
            s.leave();
            Some(c)
        }
    }
}

impl Publisher {
    pub(crate) fn new(
        inner: PublisherImpl,
        name: &str,
        stamp: bool,
        mut counters: Option<Slots>,
    ) -> Publisher {
        let max_message = with_pub!(&inner, t => t.max_message());
        inner.leave();
        if let Some(c) = &mut counters {
            c.resolve3(PUBLISHED_SLOTS);
        }
        Publisher {
            inner,
            name: name.into(),
            stamp,
            published: 0,
            bytes: 0,
            max_message,
            counters,
        }
    }

    /// The error for a payload larger than the stream takes (cold path).
    #[cold]
    #[inline(never)]
    fn too_large(&self, len: usize) -> Error {
        Error::MessageTooLarge {
            len,
            max: self.max_message,
            channel: format!("stream `{}`", self.name),
        }
    }

    /// Leaves a served publisher and counts a claim or commit that failed
    /// (cold path).
    #[cold]
    #[inline(never)]
    fn failed(&self, e: Error) -> Error {
        self.inner.leave();
        self.count_error(&e);
        e
    }

    /// The flags and timestamp of a message: `timestamp`, else the clock
    /// when the stream stamps its messages (`stamp`).
    #[inline]
    fn stamp(stamp: bool, timestamp: Option<u64>, extra: u32) -> (u32, u64) {
        match timestamp.or_else(|| stamp.then(crate::clock::now_ns)) {
            Some(t) => (FLAG_TIMESTAMP | extra, t),
            None => (extra, 0),
        }
    }

    /// Counts a committed message, here and in the counters file.
    #[inline]
    fn committed(&mut self, len: usize, seq: u64) {
        self.published += 1;
        self.bytes += len as u64;
        if let Some(c) = &self.counters {
            // Single-writer relaxed stores: no lock, no read-modify-write.
            c.set3(PUBLISHED_SLOTS, [self.published, self.bytes, seq]);
        }
        self.tick();
    }

    /// Counts an error returned to the application (cold path).
    #[cold]
    fn count_error(&self, e: &Error) {
        if let Some(c) = &self.counters {
            c.error(e);
        }
    }

    /// Copies the transport's loss-recovery counters into the counters
    /// file once per [`MIRROR_EVERY`](crate::counters::registry::MIRROR_EVERY) calls.
    #[inline]
    fn tick(&mut self) {
        if let Some(c) = &mut self.counters {
            if c.tick() {
                if let Some(r) = publisher_recovery(&self.inner) {
                    c.mirror(&r);
                }
            }
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Shared memory: how often, and how long, this publisher waited for
    /// `lossless` subscribers, and how many it released; `None` on other
    /// transports.
    pub fn lossless_counters(&self) -> Option<crate::transport::shm::lossless::LosslessCounters> {
        match &self.inner {
            PublisherImpl::Shm(t) => Some(t.lossless_counters()),
            _ => None,
        }
    }

    /// Largest payload accepted.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Sequence number the next message will carry.
    pub fn next_seq(&self) -> u64 {
        let next = with_pub!(&self.inner, t => t.next_seq());
        self.inner.leave();
        next
    }

    /// Messages published by this handle.
    pub fn published(&self) -> u64 {
        self.published
    }

    /// The loss-recovery counters of a datagram transport (requests
    /// served, retransmissions, heartbeats...); `None` on shared memory,
    /// which has nothing to recover.
    pub fn recovery_counters(&self) -> Option<crate::recovery::Counters> {
        publisher_recovery(&self.inner)
    }

    /// Claims `len` bytes in the transport's preallocated send buffer. Write
    /// the message there and [`Claim::commit`] it; dropping the claim
    /// publishes nothing. Never blocks: a stream does not wait for its
    /// subscribers.
    #[inline]
    pub fn claim(&mut self, len: usize) -> Result<Claim<'_>> {
        if len > self.max_message {
            return Err(self.too_large(len));
        }
        // A served publisher is entered here (one handshake per message)
        // and stays entered until the claim is committed or dropped.
        let claimed =
            with_pub!(&mut self.inner, t => t.claim(len)).map(|b| (b.as_mut_ptr(), b.len()));
        match claimed {
            Ok((ptr, len)) => Ok(Claim {
                publisher: self,
                ptr,
                len,
            }),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Copies `bytes` into the stream and publishes them; returns the
    /// message's sequence number.
    #[inline]
    pub fn publish(&mut self, bytes: &[u8]) -> Result<u64> {
        let len = bytes.len();
        if len > self.max_message {
            return Err(self.too_large(len));
        }
        let stamp = self.stamp;
        // Claim, copy and commit under one dispatch on the transport (and
        // one enter of a served publisher), as `claim` then `commit` do.
        let seq = with_pub!(&mut self.inner, t => match t.claim(len) {
            Ok(b) => {
                b.copy_from_slice(bytes);
                let (flags, ts) = Publisher::stamp(stamp, None, 0);
                t.commit(len, flags, ts)
            }
            Err(e) => Err(e),
        });
        match seq {
            Ok(seq) => {
                self.inner.leave();
                self.committed(len, seq);
                Ok(seq)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Sends messages that commits left batched (streams with
    /// `autoflush = false`). Shared memory has nothing to batch.
    #[inline]
    pub fn flush(&mut self) -> Result<()> {
        let r = with_pub!(&mut self.inner, t => t.flush());
        self.inner.leave();
        if let Err(e) = &r {
            self.count_error(e);
        }
        r
    }

    /// Does the publisher's duties between messages: flushes batched
    /// messages and, on datagram transports, answers retransmit requests
    /// and sends heartbeats. Call it whenever the publishing thread has
    /// nothing to publish; subscribers report a publisher that stays silent
    /// longer than `heartbeat_timeout` as down. Shared memory needs none of
    /// this, so there it returns at once.
    #[inline]
    pub fn service(&mut self) -> Result<()> {
        let r = with_pub!(&mut self.inner, t => t.service());
        self.inner.leave();
        if let Err(e) = &r {
            self.count_error(e);
        }
        self.tick();
        r
    }

    /// Tells subscribers that messages `from..to` (end exclusive) of this
    /// publisher's own upstream feed were lost before they reached it and
    /// cannot be filled. The notice is one message of the stream (it takes
    /// the returned sequence number and is recovered like any message);
    /// subscribers receive it as [`Event::SourceGap`]
    /// in its place. Needs `max_message` of at least 16 bytes.
    pub fn publish_source_gap(&mut self, from: u64, to: u64) -> Result<u64> {
        if from >= to {
            return Err(Error::Protocol {
                channel: format!("stream `{}`", self.name),
                peer: "this publisher".into(),
                reason: format!(
                    "a source gap is a non-empty range from..to; {from}..{to} is empty"
                ),
            });
        }
        // Committed through the claim, so that a served publisher is not
        // left between claim and commit.
        let mut c = self.claim(crate::wire::SOURCE_GAP_LEN)?;
        c.copy_from_slice(&crate::wire::source_gap(from, to));
        let len = c.len;
        c.publisher
            .commit_flags(len, crate::wire::FLAG_SOURCE_GAP, None)
    }

    /// Commits a claimed message. The claim's drop leaves a served
    /// publisher (once), after this returns.
    #[inline]
    fn commit_flags(&mut self, len: usize, extra: u32, timestamp: Option<u64>) -> Result<u64> {
        let (flags, ts) = Publisher::stamp(self.stamp, timestamp, extra);
        match with_pub!(&mut self.inner, t => t.commit(len, flags, ts)) {
            Ok(seq) => {
                self.committed(len, seq);
                Ok(seq)
            }
            Err(e) => Err(self.failed(e)),
        }
    }
}

/// Space claimed in a publisher's send buffer. Dereferences to the bytes.
#[derive(Debug)]
pub struct Claim<'a> {
    publisher: &'a mut Publisher,
    ptr: *mut u8,
    len: usize,
}

impl Claim<'_> {
    /// Publishes the message; returns its sequence number. Stamps it with
    /// the send time when the stream's `timestamps` option is on. Fails
    /// only when a datagram transport cannot send (the error names the
    /// socket or device); shared memory cannot fail here.
    #[inline]
    pub fn commit(self) -> Result<u64> {
        self.publisher.commit_flags(self.len, 0, None)
    }

    /// Publishes the message with the given send timestamp (ns since the
    /// Unix epoch), e.g. the time the triggering packet arrived.
    #[inline]
    pub fn commit_with_timestamp(self, timestamp_ns: u64) -> Result<u64> {
        self.publisher.commit_flags(self.len, 0, Some(timestamp_ns))
    }

    /// Shortens the message to `len` bytes before committing (for encoders
    /// that claim a maximum and write less).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl Drop for Claim<'_> {
    /// A claim dropped without commit publishes nothing; a served publisher
    /// is left so that the service thread may serve it again.
    #[inline]
    fn drop(&mut self) {
        self.publisher.inner.leave();
    }
}

impl Deref for Claim<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is the claimed slot, valid and exclusively
        // ours while the publisher is mutably borrowed by this claim.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for Claim<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Counters of one subscriber.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriberStats {
    /// Messages delivered.
    pub received: u64,
    /// Overrun events.
    pub overruns: u64,
    /// Messages lost to overruns.
    pub overrun_messages: u64,
    /// Unrecoverable gap events.
    pub gaps: u64,
    /// Messages lost in unrecoverable gaps.
    pub gap_messages: u64,
    /// [`Event::SourceGap`]s delivered (upstream loss the publisher
    /// reported; not loss on this stream).
    pub source_gaps: u64,
    /// Upstream messages those source gaps cover.
    pub source_gap_messages: u64,
}

/// A subscriber of a stream. `Send`, not `Sync`: one thread owns it.
#[derive(Debug)]
pub struct Subscriber {
    inner: SubscriberImpl,
    name: String,
    batch: usize,
    stats: SubscriberStats,
    bytes: u64,
    last_seq: u64,
    /// This handle's slots in the bus's counters file.
    counters: Option<Slots>,
}

impl Subscriber {
    pub(crate) fn new(
        inner: SubscriberImpl,
        name: &str,
        batch: usize,
        counters: Option<Slots>,
    ) -> Subscriber {
        Subscriber {
            inner,
            name: name.into(),
            batch,
            stats: SubscriberStats::default(),
            bytes: 0,
            last_seq: 0,
            counters,
        }
    }

    /// Stores the counts into the counters file (after a poll that
    /// delivered something) and, once per
    /// [`MIRROR_EVERY`](crate::counters::registry::MIRROR_EVERY) polls, the
    /// transport's loss-recovery counters.
    #[inline]
    fn publish_counts(&mut self, delivered: bool, lost: bool) {
        let Some(c) = &mut self.counters else { return };
        let s = &self.stats;
        // Single-writer relaxed stores: no lock, no read-modify-write; only
        // the slots that changed, so a poll touches three cache lines.
        if delivered {
            c.set(sc::MESSAGES, s.received);
            c.set(sc::BYTES, self.bytes);
            c.set(sc::LAST_SEQ, self.last_seq);
        }
        if lost {
            c.set(sc::OVERRUNS, s.overruns);
            c.set(sc::OVERRUN_MESSAGES, s.overrun_messages);
            c.set(sc::GAPS, s.gaps);
            c.set(sc::GAP_MESSAGES, s.gap_messages);
            c.set(sc::SOURCE_GAPS, s.source_gaps);
            c.set(sc::SOURCE_GAP_MESSAGES, s.source_gap_messages);
        }
        if c.tick() {
            if let Some(r) = self.inner.recovery_counters() {
                c.mirror(&r);
            }
            if let SubscriberImpl::Replay(r) = &self.inner {
                let r = r.stats();
                let values = [
                    r.replayed,
                    r.replay_gaps,
                    r.live_skipped,
                    r.rejoins,
                    r.merge_seq,
                    r.stalls,
                    r.index_fallbacks,
                    r.restarts,
                ];
                for (k, v) in values.into_iter().enumerate() {
                    c.set(sc::REPLAY + k, v);
                }
            }
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counters so far.
    pub fn stats(&self) -> SubscriberStats {
        self.stats
    }

    /// The epoch of the publisher incarnation this subscriber follows:
    /// shared memory knows it from the stream's segment at once, UDP and
    /// verbs once a datagram of the publisher arrived (`None` before);
    /// a `late_join = "archive"` subscriber's is its live stream's.
    pub fn epoch(&self) -> Option<u64> {
        self.inner.epoch()
    }

    /// The loss-recovery counters of a datagram transport (duplicates
    /// dropped, gaps seen, messages recovered, requests sent, drops by
    /// reason, A/B wins...); `None` on shared memory.
    pub fn recovery_counters(&self) -> Option<crate::recovery::Counters> {
        self.inner.recovery_counters()
    }

    /// How a subscriber with `late_join = "archive"` replayed and joined
    /// the live stream; `None` for the others.
    pub fn replay_stats(&self) -> Option<crate::archive::ReplayStats> {
        match &self.inner {
            SubscriberImpl::Replay(r) => Some(r.stats()),
            _ => None,
        }
    }

    /// Delivers what has arrived, up to the stream's `poll_batch` messages,
    /// to `f` in sequence order, with [`Event`]s for anything lost or any
    /// change of publisher. Returns the number of messages delivered; 0 when
    /// there was nothing. Never blocks.
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, mut f: F) -> Result<usize> {
        let stats = &mut self.stats;
        let bytes = &mut self.bytes;
        let last_seq = &mut self.last_seq;
        let mut delivered = false;
        let mut lost = false;
        let mut counted = |e: Event<'_>| {
            let e = match e {
                Event::Message(m) if m.flags & FLAG_SOURCE_GAP != 0 => {
                    match crate::wire::parse_source_gap(m.payload) {
                        Some((from, to)) => Event::SourceGap { from, to },
                        // A notice that holds no range still took its
                        // sequence number: reported as that message lost.
                        None => Event::Gap {
                            from: m.seq,
                            to: m.seq + 1,
                        },
                    }
                }
                e => e,
            };
            match e {
                Event::Message(ref m) => {
                    delivered = true;
                    stats.received += 1;
                    *bytes += m.payload.len() as u64;
                    *last_seq = m.seq;
                }
                Event::Overrun { from, to } => {
                    lost = true;
                    stats.overruns += 1;
                    stats.overrun_messages += to - from;
                }
                Event::Gap { from, to } => {
                    lost = true;
                    stats.gaps += 1;
                    stats.gap_messages += to - from;
                }
                Event::SourceGap { from, to } => {
                    lost = true;
                    stats.source_gaps += 1;
                    stats.source_gap_messages += to - from;
                }
                _ => {}
            }
            f(e)
        };
        let r = self.inner.poll_events(self.batch, &mut counted);
        self.publish_counts(delivered, lost);
        if let (Err(e), Some(c)) = (&r, &self.counters) {
            c.error(e);
        }
        r
    }

    /// Blocks until the transport signals that something may have arrived,
    /// or `timeout` passes: on the segment's doorbell (shared memory), in
    /// `epoll_wait` on the sockets (UDP) or on the receive queue's
    /// completion channel (RDMA UD), bounded by the next retransmit
    /// deadline. Returns true when woken by an event, false on timeout or
    /// on a signal. On RDMA the first wait after traffic only arms the
    /// completion queue and returns false at once (a completion before
    /// arming raises no event); the next one sleeps. Cheap for the
    /// publisher: shared memory rings only while a subscriber sleeps, and
    /// the network transports send nothing extra. Call [`poll`](Self::poll)
    /// next either way.
    pub fn wait_for_data(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.inner.wait_for_data(timeout)
    }

    /// [`poll`](Self::poll), then, when `wait` says the stream has been
    /// quiet long enough, [`wait_for_data`](Self::wait_for_data) for at
    /// most its `max_block`. Returns what the poll delivered. A loop of
    /// these spins while traffic flows and sleeps when it stops; each call
    /// returns within `max_block`, so the loop can check a stop flag. After
    /// [`wake_on_stop`](crate::wait::wake_on_stop) an idle UDP or RDMA UD
    /// subscriber sleeps until its recovery's next timer instead (a
    /// request due, or the publisher's silence to report; at most
    /// [`LONG_BLOCK`](crate::wait::LONG_BLOCK)), and
    /// [`stop_waits`](crate::wait::stop_waits) ends the sleep at once.
    #[inline]
    pub fn poll_wait<F: FnMut(Event<'_>)>(
        &mut self,
        wait: &mut crate::wait::Adaptive,
        mut f: F,
    ) -> Result<usize> {
        // Any event counts as activity: one that is not a message (the
        // publisher's end, a loss) must reach the loop before it sleeps.
        let mut events = 0;
        let n = self.poll(|e| {
            events += 1;
            f(e)
        })?;
        if let Some(limit) = wait.after_poll(events) {
            let event = self.inner.wait_idle(limit)?;
            wait.woke(event);
        }
        Ok(n)
    }
}

/// Publishing in runs: for a publisher that sends several messages in a
/// row (a relay handing on one inbound datagram) and brings its entry in
/// the counters file up to date once per run instead of once per message.
impl Publisher {
    /// Claims `len` bytes, lets `write` fill them, and commits them with
    /// the send timestamp `timestamp_ns`, as [`Publisher::claim`] then
    /// [`Claim::commit_with_timestamp`] do, except that this handle's
    /// counters-file entry (messages, bytes, last sequence) is left for
    /// [`Publisher::end_run`]; [`Publisher::published`] counts at once.
    /// Shared memory is written directly; other transports take the
    /// ordinary claim and commit.
    // Always: a caller that inlines its per-message path (the relay's)
    // otherwise pays a call per message.
    #[inline(always)]
    pub fn publish_in_run(
        &mut self,
        len: usize,
        timestamp_ns: u64,
        write: impl FnOnce(&mut [u8]),
    ) -> Result<u64> {
        let PublisherImpl::Shm(t) = &mut self.inner else {
            let mut c = self.claim(len)?;
            write(&mut c);
            return c.commit_with_timestamp(timestamp_ns);
        };
        // Shared memory fails only for a message larger than the stream
        // takes, which `claim` does not count either.
        write(t.claim(len)?);
        let seq = t.commit(len, FLAG_TIMESTAMP, timestamp_ns)?;
        self.published += 1;
        self.bytes += len as u64;
        Ok(seq)
    }

    /// Ends a run of [`Publisher::publish_in_run`]: writes this handle's
    /// counters into the counters file. Call it after the run's last
    /// message; until then the file lags by the run.
    #[inline]
    pub fn end_run(&mut self) {
        // Other transports updated the file at each commit.
        if !matches!(self.inner, PublisherImpl::Shm(_)) {
            return;
        }
        if let Some(c) = &self.counters {
            let last = self.next_seq().saturating_sub(1);
            c.set3(PUBLISHED_SLOTS, [self.published, self.bytes, last]);
        }
        self.tick();
    }
}

#[cfg(test)]
mod tests {
    use crate::counters::CountersReader;
    use crate::{Bus, Config, Error, TransportKind};

    fn bus(tag: &str) -> (Bus, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("mdbus-stream-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = Config {
            transport: TransportKind::Shm,
            ..Default::default()
        };
        cfg.shm.dir = dir.clone();
        cfg.counters.dir = dir.join("counters");
        (Bus::new(cfg).unwrap(), dir)
    }

    /// `publish` and `claim` refuse a payload over the cached maximum with
    /// the transport's error, publish nothing, and the counters file holds
    /// every message at once (a store per commit, not per run).
    #[test]
    fn publish_and_claim_check_the_cached_maximum_and_count_each_message() {
        let (bus, dir) = bus("max");
        let mut p = bus.publisher("md").unwrap();
        let mut s = bus.subscriber("md").unwrap();
        let max = p.max_message();
        let too_big = vec![0u8; max + 1];
        for e in [
            p.publish(&too_big).unwrap_err(),
            p.claim(max + 1).unwrap_err(),
        ] {
            assert!(
                matches!(e, Error::MessageTooLarge { len, max: m, .. } if len == max + 1 && m == max)
            );
            assert_eq!(
                e.to_string(),
                format!("a {}-byte message is larger than the {max}-byte maximum of stream `md`; raise max_message in its configuration", max + 1)
            );
        }
        assert_eq!(p.publish(b"abc").unwrap(), 1);
        let mut c = p.claim(5).unwrap();
        c.copy_from_slice(b"defgh");
        assert_eq!(c.commit().unwrap(), 2);
        drop(p.claim(4).unwrap());
        assert_eq!(p.publish(&vec![7u8; max]).unwrap(), 3);
        assert_eq!(p.published(), 3);
        assert_eq!(p.next_seq(), 4);
        let r = CountersReader::open(bus.counters_path().unwrap()).unwrap();
        let value = |name: &str| r.index_of(name).and_then(|i| r.value(i)).unwrap();
        assert_eq!(value("pub.md.messages"), 3);
        assert_eq!(value("pub.md.bytes"), 8 + max as u64);
        assert_eq!(value("pub.md.last_seq"), 3);
        let mut got = Vec::new();
        while got.len() < 3 {
            s.poll(|e| {
                if let crate::Event::Message(m) = e {
                    got.push((m.seq(), m.payload().len()));
                }
            })
            .unwrap();
        }
        assert_eq!(got, [(1, 3), (2, 5), (3, max)]);
        drop((p, s, bus));
        std::fs::remove_dir_all(&dir).ok();
    }
}
