//! The publisher's side of a datagram stream: sequencing, packing,
//! retention, retransmission and heartbeats, without sockets or a clock.
//!
//! A driver (UDP, RDMA UD) owns a [`PublisherCore`] and:
//! - publishes with [`publish`](PublisherCore::publish) or
//!   [`claim`](PublisherCore::claim) + [`commit`](PublisherCore::commit),
//!   sending every datagram the `emit` callback is given to the stream's
//!   multicast group (both groups with A/B lines);
//! - calls [`flush`](PublisherCore::flush) when it wants a partly filled
//!   datagram out now (messages are packed until a datagram is full);
//! - calls [`tick`](PublisherCore::tick) regularly: it flushes and sends
//!   heartbeats when the stream is idle;
//! - hands every datagram received on its unicast request socket to
//!   [`on_datagram`](PublisherCore::on_datagram) and sends what `reply`
//!   is given back to that datagram's sender.

use std::time::Duration;

use super::counters::Counters;
use super::frame::{
    self, DatagramHeader, DropReason, Frame, Kind, Limits, DATAGRAM_HEADER_LEN, MAX_DATAGRAM,
    MAX_FRAGMENTS, MIN_DATAGRAM,
};
use super::mac::{Key, Mac};
use super::packer::Packer;
use super::retained::Retained;
use crate::error::ConfigError;
use crate::wire::{FLAG_TIMESTAMP, HEADER_LEN, KNOWN_FLAGS};

/// Settings of a [`PublisherCore`]. Memory: `retain_bytes` plus 48 bytes
/// per retained message (its place in the table, and its message header,
/// kept in the window as it goes on the wire) plus three datagrams, all
/// allocated at construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    /// Identifier of the stream, carried in every datagram.
    pub stream_id: u32,
    /// This incarnation of the publisher. A restarted publisher must use a
    /// larger value (start time in ns since the epoch is a good choice):
    /// subscribers take a larger epoch for a restart and drop smaller ones.
    pub epoch: u64,
    /// Largest message in bytes; larger ones are fragmented on the wire.
    pub max_message: usize,
    /// Largest datagram in bytes: the path MTU minus IP/UDP (1472 on a
    /// 1500-byte Ethernet) or the UD payload size (1024 on Soft-RoCE).
    pub max_datagram: usize,
    /// Messages kept for retransmission; a power of two.
    pub retain_messages: usize,
    /// Payload bytes kept for retransmission; at least `max_message`.
    pub retain_bytes: usize,
    /// Idle time after which a heartbeat is sent: the first heartbeat
    /// after a datagram of data (or after [`close`](PublisherCore::close))
    /// comes this long after it, so a message lost on an idle stream is
    /// announced this soon.
    pub heartbeat_interval: Duration,
    /// Each further heartbeat on a stream that stays idle comes twice as
    /// long after the previous one, up to this (PGM's heartbeat back-off):
    /// an idle stream wakes its subscribers less often. At least
    /// `heartbeat_interval`; keep it well below the subscribers'
    /// `publisher_timeout`, which must see several heartbeats.
    pub heartbeat_max_interval: Duration,
    /// Most messages resent in answer to one request, and the size of each
    /// requester's token bucket.
    pub retransmit_burst: u32,
    /// Messages per second each requester's bucket refills; 0 means no
    /// rate limit beyond `retransmit_burst` per request.
    pub retransmit_rate: u64,
    /// Size of the bucket all requesters share, in messages.
    pub retransmit_global_burst: u32,
    /// Messages per second the shared bucket refills; 0 means no limit
    /// beyond `retransmit_global_burst` per request.
    pub retransmit_global_rate: u64,
    /// Most bytes of retransmitted messages (headers included) sent in
    /// answer to one request; at least one message is always sent. With
    /// 40-byte requests this bounds the amplification to
    /// `max(retransmit_reply_bytes, max_message)` / 40 plus datagram
    /// headers.
    pub retransmit_reply_bytes: usize,
    /// Stream key: when set, requests must carry a MAC made with it (see
    /// [`mac`](super::mac)), checked before anything else. The driver
    /// seals what the publisher sends.
    pub key: Option<Key>,
    /// Where retransmissions go (see [`Repair`]).
    pub repair: Repair,
    /// After a range went to the group, requests for it are ignored for
    /// this long: the repair is on its way to every subscriber, and
    /// resending it for each of their requests is what feedback
    /// implosion is made of. Keep it below the subscribers' request
    /// timeout, so that a subscriber that lost the repair too gets it
    /// when it asks again.
    pub repair_linger: Duration,
    /// Lossy-receiver protection: the most messages one requester may ask
    /// for within `lossy_window`, in percent of the messages published in
    /// a window (the current one or the previous, whichever is larger),
    /// and never less than `retransmit_burst`. Beyond it the requester is
    /// sent one [`Kind::Throttled`] notice and its requests are ignored
    /// until the window ends, so a subscriber that keeps losing on its
    /// own cannot spend the retransmission budget the others share.
    /// 0 turns the protection off.
    pub lossy_share_percent: u32,
    /// The window `lossy_share_percent` is measured over.
    pub lossy_window: Duration,
}

/// Where a publisher sends the messages a subscriber asked for again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    /// To the requester alone.
    #[default]
    Requester,
    /// To the stream's group: every subscriber that lost the same
    /// datagram gets it without asking.
    Group,
    /// To the requester, unless another subscriber asked for an
    /// overlapping range within the linger time: then to the group (loss
    /// upstream of several subscribers). A lone late joiner or a lone
    /// lossy receiver is answered alone.
    Auto,
}

/// Recent repairs remembered for the linger and for [`Repair::Auto`].
const RECENT_REPAIRS: usize = 64;

/// One repair sent: `from..to`, when, to whom.
#[derive(Debug, Clone, Copy, Default)]
struct RecentRepair {
    from: u64,
    to: u64,
    at: u64,
    requester: u64,
    group: bool,
}

impl PublisherConfig {
    /// Defaults for stream `stream_id` and incarnation `epoch`: 1472-byte
    /// datagrams, 64 KiB messages, 65536 messages and 16 MiB retained,
    /// heartbeats 10 ms after the last datagram, backing off to every
    /// 25 ms, at most 1024 messages and 64 KiB per
    /// request, 100,000 messages per second per requester, 200,000 for all
    /// requesters together (bursts of 8192), repairs to the requester, a
    /// 250 µs linger, requesters held to 10% of the stream per second.
    pub fn new(stream_id: u32, epoch: u64) -> PublisherConfig {
        PublisherConfig {
            stream_id,
            epoch,
            max_message: 64 * 1024,
            max_datagram: 1472,
            retain_messages: 65536,
            retain_bytes: 16 << 20,
            heartbeat_interval: Duration::from_millis(10),
            heartbeat_max_interval: Duration::from_millis(25),
            retransmit_burst: 1024,
            retransmit_rate: 100_000,
            retransmit_global_burst: 8192,
            retransmit_global_rate: 200_000,
            retransmit_reply_bytes: 64 * 1024,
            key: None,
            repair: Repair::Requester,
            repair_linger: Duration::from_micros(250),
            lossy_share_percent: 0,
            lossy_window: Duration::from_secs(1),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let err = |key: &str, msg: String| Err(ConfigError::new("<publisher>", key, msg));
        if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&self.max_datagram) {
            return err(
                "max_datagram",
                format!(
                    "{} is out of range: allowed {MIN_DATAGRAM} to {MAX_DATAGRAM} bytes",
                    self.max_datagram
                ),
            );
        }
        let chunk = Packer::max_unfragmented(self.max_datagram);
        if self.max_message == 0 || self.max_message.div_ceil(chunk) > MAX_FRAGMENTS {
            return err(
                "max_message",
                format!(
                    "{} is out of range: allowed 1 to {} bytes with max_datagram {}",
                    self.max_message,
                    chunk * MAX_FRAGMENTS,
                    self.max_datagram
                ),
            );
        }
        if !self.retain_messages.is_power_of_two() {
            return err(
                "retain_messages",
                format!("{} is not a power of two", self.retain_messages),
            );
        }
        if self.retain_bytes < self.max_message {
            return err(
                "retain_bytes",
                format!(
                    "{} is less than max_message ({})",
                    self.retain_bytes, self.max_message
                ),
            );
        }
        if self.heartbeat_interval.is_zero() {
            return err("heartbeat_interval", "0 is not allowed".into());
        }
        if self.heartbeat_max_interval < self.heartbeat_interval {
            return err(
                "heartbeat_max_interval",
                format!(
                    "{:?} is below heartbeat_interval ({:?}): idle heartbeats back off from \
                     heartbeat_interval up to heartbeat_max_interval",
                    self.heartbeat_max_interval, self.heartbeat_interval
                ),
            );
        }
        if self.retransmit_burst == 0 {
            return err("retransmit_burst", "0 is not allowed: at least 1".into());
        }
        if self.retransmit_global_burst == 0 {
            return err(
                "retransmit_global_burst",
                "0 is not allowed: at least 1".into(),
            );
        }
        if self.retransmit_reply_bytes == 0 {
            return err(
                "retransmit_reply_bytes",
                "0 is not allowed: at least 1".into(),
            );
        }
        if self.lossy_share_percent > 100 {
            return err(
                "lossy_share_percent",
                format!(
                    "{} is out of range: allowed 0 (off) to 100",
                    self.lossy_share_percent
                ),
            );
        }
        if self.lossy_share_percent > 0 && self.lossy_window.is_zero() {
            return err(
                "lossy_window",
                "0 is not allowed while lossy_share_percent is set".into(),
            );
        }
        Ok(())
    }
}

/// Why a message was not published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// Larger than the configured maximum.
    #[error("a {len}-byte message is larger than the {max}-byte max_message")]
    TooLarge {
        /// Bytes offered.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// `commit` without a `claim` of at least that many bytes.
    #[error("commit of {len} bytes without a claim of at least that many")]
    NotClaimed {
        /// Bytes committed.
        len: usize,
    },
    /// The stream was closed.
    #[error("the stream is closed")]
    Closed,
}

/// Refills at `rate` per second up to `burst`.
#[derive(Debug)]
struct TokenBucket {
    burst: u64,
    rate: u64,
    tokens: u64,
    /// Time up to which refills have been credited.
    credited_to: u64,
}

impl TokenBucket {
    fn full(burst: u64, rate: u64) -> TokenBucket {
        TokenBucket {
            burst,
            rate,
            tokens: burst,
            credited_to: 0,
        }
    }

    /// Tokens there are now.
    fn available(&mut self, now: u64) -> u64 {
        if self.rate == 0 {
            return self.burst;
        }
        self.refill(now);
        self.tokens
    }

    /// Takes `n` tokens, which [`available`](Self::available) said are
    /// there.
    fn take(&mut self, n: u64) {
        if self.rate != 0 {
            self.tokens -= n.min(self.tokens);
        }
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.credited_to) as u128;
        let add = (elapsed * self.rate as u128 / 1_000_000_000) as u64;
        if add > 0 {
            self.tokens = self.tokens.saturating_add(add).min(self.burst);
            // Keep the fraction of a token not yet credited.
            self.credited_to += (add as u128 * 1_000_000_000 / self.rate as u128) as u64;
            if self.tokens == self.burst {
                self.credited_to = now;
            }
        }
    }
}

/// Requester buckets; requesters whose keys hash alike share one, which
/// only ever makes the limit stricter.
const REQUESTER_BUCKETS: usize = 256;

/// Lossy-receiver protection: what each requester (hashed like the
/// buckets) asked for in the current window.
#[derive(Debug)]
struct LossyShare {
    percent: u64,
    window_ns: u64,
    /// Floor of the allowance: one full reply burst.
    floor: u64,
    window_start: u64,
    /// `messages_published` when the window started.
    published_at_start: u64,
    /// Messages published in the previous window.
    published_before: u64,
    /// Per slot: messages asked for in this window.
    asked: Box<[u64]>,
    /// Per slot: told in this window.
    told: Box<[bool]>,
}

impl LossyShare {
    /// Starts a new window when the current one is over.
    fn roll(&mut self, now: u64, published: u64) {
        if now.saturating_sub(self.window_start) < self.window_ns && self.window_start != 0 {
            return;
        }
        self.published_before = published - self.published_at_start;
        self.published_at_start = published;
        self.window_start = now.max(1);
        self.asked.fill(0);
        self.told.fill(false);
    }

    /// Messages slot `k` may still ask for in this window.
    fn left(&self, k: usize, published: u64) -> u64 {
        let basis = self
            .published_before
            .max(published - self.published_at_start);
        let allowance = (basis.saturating_mul(self.percent) / 100).max(self.floor);
        allowance.saturating_sub(self.asked[k])
    }
}

fn requester_slot(key: u64) -> usize {
    // Fibonacci hashing: the top bits of the product mix every key bit.
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % REQUESTER_BUCKETS
}

/// The publisher's protocol state. One thread owns it: every method takes
/// `&mut self`, and nothing is shared.
#[derive(Debug)]
pub struct PublisherCore {
    stream_id: u32,
    epoch: u64,
    max_message: usize,
    heartbeat_ns: u64,
    heartbeat_max_ns: u64,
    /// How long after the last datagram the next heartbeat is due:
    /// `heartbeat_ns` after data (or `close`), doubled after each idle
    /// heartbeat, at most `heartbeat_max_ns`.
    idle_gap: u64,
    limits: Limits,
    retained: Retained,
    /// The datagram being filled with new messages: messages
    /// `run_first..run_first + run_count`, which lie back to back in the
    /// retained window (arena bytes `run_start..run_end`, from monotonic
    /// position `run_pos`) as they go on the wire, so the datagram is its
    /// header and that slice, never copied into a datagram buffer.
    run_first: u64,
    run_count: u16,
    run_start: usize,
    run_end: usize,
    run_pos: u64,
    /// The header of the datagram `run_*` describes, written at flush.
    run_head: [u8; DATAGRAM_HEADER_LEN],
    /// The lowest monotonic window position of a datagram handed out by a
    /// gathering method (`*_gather`) since the last
    /// [`release`](Self::release), plus the window's size: a claim reaching
    /// it would overwrite bytes the driver still points at. `u64::MAX`:
    /// none handed out.
    pin_limit: u64,
    /// Joins a datagram's header and slice for the methods whose `emit`
    /// takes one contiguous datagram.
    joined: Box<[u8]>,
    /// Fragments of messages too large for one datagram.
    live: Packer,
    /// Datagram being filled with resent messages; separate so that a
    /// request never flushes a half-full live datagram.
    resend: Packer,
    control: [u8; DATAGRAM_HEADER_LEN],
    /// Per requester (hashed), then shared by all.
    buckets: Box<[TokenBucket]>,
    global: TokenBucket,
    reply_bytes: usize,
    mac: Option<Mac>,
    /// When the last datagram went out on the stream's lines (not replies).
    last_sent: Option<u64>,
    closed: bool,
    counters: Counters,
    repair: Repair,
    linger_ns: u64,
    /// A ring of the last repairs sent, newest at `recent_next - 1`.
    recent: [RecentRepair; RECENT_REPAIRS],
    recent_next: usize,
    /// `None` when `lossy_share_percent` is 0.
    lossy: Option<LossyShare>,
}

/// The retained window's arena: `retain_bytes` of payload plus a message
/// header for each of `retain_messages`, and never less than two of the
/// largest messages and a datagram, so that a claim never overwrites the
/// datagram still being filled (it lies right behind the claim).
fn window_bytes(cfg: &PublisherConfig) -> usize {
    let largest = cfg.max_message + HEADER_LEN;
    cfg.retain_bytes
        .saturating_add(cfg.retain_messages.saturating_mul(HEADER_LEN))
        .max(2 * largest + cfg.max_datagram)
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// `head` followed by `body`, in `buf` when `body` is not empty.
#[inline]
fn join<'a>(buf: &'a mut [u8], head: &'a [u8], body: &'a [u8]) -> &'a [u8] {
    if body.is_empty() {
        return head;
    }
    let n = head.len() + body.len();
    buf[..head.len()].copy_from_slice(head);
    buf[head.len()..n].copy_from_slice(body);
    &buf[..n]
}

/// Where one reply datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// Back to the requester.
    Requester,
    /// To the stream's group (both lines with A/B).
    Group,
}

impl PublisherCore {
    /// Allocates every buffer the publisher will use.
    pub fn new(cfg: &PublisherConfig) -> Result<PublisherCore, ConfigError> {
        cfg.validate()?;
        let d = cfg.max_datagram;
        Ok(PublisherCore {
            stream_id: cfg.stream_id,
            epoch: cfg.epoch,
            max_message: cfg.max_message,
            heartbeat_ns: ns(cfg.heartbeat_interval),
            heartbeat_max_ns: ns(cfg.heartbeat_max_interval),
            idle_gap: ns(cfg.heartbeat_interval),
            limits: Limits {
                stream_id: cfg.stream_id,
                max_datagram: d,
                max_message: cfg.max_message,
            },
            retained: Retained::new(cfg.retain_messages, window_bytes(cfg)),
            run_first: 0,
            run_count: 0,
            run_start: 0,
            run_end: 0,
            run_pos: 0,
            run_head: [0; DATAGRAM_HEADER_LEN],
            pin_limit: u64::MAX,
            joined: super::prefaulted(d),
            live: Packer::new(Kind::Data, cfg.stream_id, cfg.epoch, d),
            resend: Packer::new(Kind::Retransmit, cfg.stream_id, cfg.epoch, d),
            control: [0; DATAGRAM_HEADER_LEN],
            buckets: (0..REQUESTER_BUCKETS)
                .map(|_| TokenBucket::full(cfg.retransmit_burst as u64, cfg.retransmit_rate))
                .collect(),
            global: TokenBucket::full(
                cfg.retransmit_global_burst as u64,
                cfg.retransmit_global_rate,
            ),
            reply_bytes: cfg.retransmit_reply_bytes,
            mac: cfg.key.map(|k| Mac::new(k, 0)),
            last_sent: None,
            closed: false,
            counters: Counters::default(),
            repair: cfg.repair,
            linger_ns: cfg.repair_linger.as_nanos().min(u64::MAX as u128) as u64,
            recent: [RecentRepair::default(); RECENT_REPAIRS],
            recent_next: 0,
            lossy: (cfg.lossy_share_percent > 0).then(|| LossyShare {
                percent: cfg.lossy_share_percent.into(),
                window_ns: cfg.lossy_window.as_nanos().min(u64::MAX as u128) as u64,
                floor: cfg.retransmit_burst.into(),
                window_start: 0,
                published_at_start: 0,
                published_before: 0,
                asked: vec![0; REQUESTER_BUCKETS].into_boxed_slice(),
                told: vec![false; REQUESTER_BUCKETS].into_boxed_slice(),
            }),
        })
    }

    /// The stream's identifier.
    pub fn stream_id(&self) -> u32 {
        self.stream_id
    }

    /// Largest message accepted.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// This incarnation.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Sequence number the next message gets (the first is 1).
    pub fn next_seq(&self) -> u64 {
        self.retained.next_seq()
    }

    /// Oldest message still retained for retransmission, 0 when none.
    pub fn oldest_retained(&self) -> u64 {
        self.retained.oldest()
    }

    /// What the publisher has done so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Space for a payload of `len` bytes in the retained window: write the
    /// message there, then [`commit`](Self::commit). Claiming may evict the
    /// oldest retained messages.
    pub fn claim(&mut self, len: usize) -> Result<&mut [u8], PublishError> {
        if self.closed {
            return Err(PublishError::Closed);
        }
        if len > self.max_message {
            return Err(PublishError::TooLarge {
                len,
                max: self.max_message,
            });
        }
        Ok(self.retained.claim(len))
    }

    /// Publishes the first `len` bytes of the claimed space, stamped with
    /// `timestamp` when given, and returns its sequence number. The message
    /// is packed into the pending datagram; `emit` receives every datagram
    /// that fills up (and each fragment of a large message).
    pub fn commit<E: FnMut(&[u8])>(
        &mut self,
        len: usize,
        timestamp: Option<u64>,
        now: u64,
        emit: E,
    ) -> Result<u64, PublishError> {
        self.commit_flagged(len, 0, timestamp, now, emit)
    }

    /// [`commit`](Self::commit) with message flags (such as
    /// [`FLAG_SOURCE_GAP`](crate::wire::FLAG_SOURCE_GAP)) carried to the
    /// subscribers; the timestamp flag follows `timestamp`.
    pub fn commit_flagged<E: FnMut(&[u8])>(
        &mut self,
        len: usize,
        flags: u32,
        timestamp: Option<u64>,
        now: u64,
        emit: E,
    ) -> Result<u64, PublishError> {
        self.commit_flagged_at(len, flags, timestamp, || now, emit)
    }

    /// [`commit_flagged`](Self::commit_flagged) that reads the clock only
    /// when a datagram leaves: a message that only joins the pending
    /// datagram needs no time, and a clock read is a large share of the
    /// cost of such a message.
    #[inline]
    pub fn commit_flagged_at<E: FnMut(&[u8]), C: FnOnce() -> u64>(
        &mut self,
        len: usize,
        flags: u32,
        timestamp: Option<u64>,
        clock: C,
        mut emit: E,
    ) -> Result<u64, PublishError> {
        let (pinned, mut joined) = (self.pin_limit, std::mem::take(&mut self.joined));
        let r = self.commit_gather_at(len, flags, timestamp, clock, |h: &[u8], b: &[u8]| {
            emit(join(&mut joined, h, b))
        });
        // What `emit` was given was copied before it returned.
        (self.pin_limit, self.joined) = (pinned, joined);
        r
    }

    /// [`commit_flagged_at`](Self::commit_flagged_at) for a driver that
    /// sends a datagram from two pieces (`emit(head, body)`: the datagram
    /// is `head` followed by `body`) with a gathering send: `body` is the
    /// retained window's own bytes, which stay unchanged while retained.
    /// A driver that keeps pointing at them after `emit` returns (a queued
    /// `sendmmsg`) sends them before a claim would overwrite them
    /// ([`claim_reuses_pinned`](Self::claim_reuses_pinned)) and then calls
    /// [`release`](Self::release).
    #[inline]
    pub fn commit_gather_at<E: FnMut(&[u8], &[u8]), C: FnOnce() -> u64>(
        &mut self,
        len: usize,
        flags: u32,
        timestamp: Option<u64>,
        clock: C,
        mut emit: E,
    ) -> Result<u64, PublishError> {
        if self.closed {
            return Err(PublishError::Closed);
        }
        let flags = flags & KNOWN_FLAGS & !FLAG_TIMESTAMP;
        let (flags, ts) = match timestamp {
            Some(t) => (flags | FLAG_TIMESTAMP, t),
            None => (flags, 0),
        };
        let (seq, pos, span) = self
            .retained
            .commit_span(len, flags, ts)
            .ok_or(PublishError::NotClaimed { len })?;
        self.counters.messages_published += 1;
        let sent = self.push_live(seq, pos, span, &mut emit);
        if sent > 0 {
            self.sent(sent, clock());
        }
        Ok(seq)
    }

    /// Adds message `seq`, just committed, to the pending datagram; sends
    /// that first when the message does not fit or does not follow on in
    /// the window, and sends a message too large for one datagram as
    /// fragments. Returns datagrams sent.
    #[inline]
    fn push_live<E: FnMut(&[u8], &[u8])>(
        &mut self,
        seq: u64,
        pos: u64,
        span: std::ops::Range<usize>,
        emit: &mut E,
    ) -> u64 {
        let need = span.len();
        if DATAGRAM_HEADER_LEN + need > self.limits.max_datagram {
            let mut sent = self.flush_run(emit);
            if let Some((h, payload)) = self.retained.get(seq) {
                sent += self.live.push(&h, payload, &mut |d: &[u8]| emit(d, &[]));
            }
            return sent;
        }
        let mut sent = 0;
        if self.run_count > 0
            && (DATAGRAM_HEADER_LEN + (self.run_end - self.run_start) + need
                > self.limits.max_datagram
                || seq != self.run_first + self.run_count as u64
                || span.start != self.run_end
                || self.run_count == u16::MAX)
        {
            sent = self.flush_run(emit);
        }
        if self.run_count == 0 {
            self.run_first = seq;
            self.run_start = span.start;
            self.run_pos = pos;
        }
        self.run_end = span.end;
        self.run_count += 1;
        sent
    }

    /// Sends the pending datagram, if any. Returns datagrams sent.
    #[inline]
    fn flush_run<E: FnMut(&[u8], &[u8])>(&mut self, emit: &mut E) -> u64 {
        if self.run_count == 0 {
            return 0;
        }
        let body = self.run_start..self.run_end;
        DatagramHeader {
            kind: Kind::Data,
            count: self.run_count,
            stream_id: self.stream_id,
            length: (DATAGRAM_HEADER_LEN + body.len()) as u32,
            epoch: self.epoch,
            seq: self.run_first,
            arg: 0,
        }
        .encode(&mut self.run_head);
        emit(&self.run_head, self.retained.bytes(body));
        self.pin_limit = self
            .pin_limit
            .min(self.run_pos + self.retained.size() as u64);
        self.run_count = 0;
        1
    }

    /// Whether a claim of `len` bytes now would overwrite bytes of a
    /// datagram a gathering method handed out since the last
    /// [`release`](Self::release): the driver must send what it queued
    /// (and release) first.
    /// (It may say so a little early: it bounds the claim's reach by
    /// twice its size rather than placing it.)
    #[inline]
    pub fn claim_reuses_pinned(&self, len: usize) -> bool {
        self.retained.head() + 2 * (HEADER_LEN + len) as u64 > self.pin_limit
    }

    /// The driver has sent every datagram a gathering method handed out:
    /// nothing points into the retained window any more.
    #[inline]
    pub fn release(&mut self) {
        self.pin_limit = u64::MAX;
    }

    /// Copies `payload` into the retained window and commits it.
    pub fn publish<E: FnMut(&[u8])>(
        &mut self,
        payload: &[u8],
        timestamp: Option<u64>,
        now: u64,
        emit: E,
    ) -> Result<u64, PublishError> {
        self.claim(payload.len())?.copy_from_slice(payload);
        self.commit(payload.len(), timestamp, now, emit)
    }

    /// Sends the pending datagram now, if messages wait in it.
    pub fn flush<E: FnMut(&[u8])>(&mut self, now: u64, mut emit: E) {
        let (pinned, mut joined) = (self.pin_limit, std::mem::take(&mut self.joined));
        self.flush_gather(now, |h: &[u8], b: &[u8]| emit(join(&mut joined, h, b)));
        // What `emit` was given was copied before it returned.
        (self.pin_limit, self.joined) = (pinned, joined);
    }

    /// [`flush`](Self::flush) for a gathering driver, as
    /// [`commit_gather_at`](Self::commit_gather_at).
    #[inline]
    pub fn flush_gather<E: FnMut(&[u8], &[u8])>(&mut self, now: u64, mut emit: E) {
        let sent = self.flush_run(&mut emit);
        self.sent(sent, now);
    }

    /// Call regularly: flushes the pending datagram, and when nothing went
    /// out for `heartbeat_interval` sends a heartbeat, twice in a row
    /// (after [`close`](Self::close), the end-of-stream marker again,
    /// twice). While the stream stays idle each further pair comes twice
    /// as long after the previous one, up to `heartbeat_max_interval`;
    /// data (or `close`) starts the schedule again.
    pub fn tick<E: FnMut(&[u8])>(&mut self, now: u64, mut emit: E) {
        self.flush(now, &mut emit);
        let idle = match self.last_sent {
            Some(t) => now.saturating_sub(t) >= self.idle_gap,
            None => true,
        };
        if idle {
            let kind = if self.closed {
                Kind::EndOfStream
            } else {
                Kind::Heartbeat
            };
            let next_gap = self.idle_gap.saturating_mul(2).min(self.heartbeat_max_ns);
            // Twice, back to back: a subscriber believes a heartbeat that
            // announces messages it has not seen (or an end of stream)
            // only when the next datagram repeats it, so the second copy
            // lets it ask for a message lost on an idle stream one
            // interval after it was sent, not two; either copy may be
            // lost.
            for _ in 0..2 {
                self.control_datagram(kind, now, &mut emit);
            }
            // Set after the pair: `sent` starts the schedule again, for data.
            self.idle_gap = next_gap;
        }
    }

    /// Ends the stream: flushes and sends the end-of-stream marker (three
    /// times), which
    /// [`tick`](Self::tick) repeats on the heartbeats' schedule (the first
    /// repeat `heartbeat_interval` after the close, then backing off) so
    /// that a subscriber that lost it still learns. Retransmit requests are still
    /// answered.
    pub fn close<E: FnMut(&[u8])>(&mut self, now: u64, mut emit: E) {
        self.flush(now, &mut emit);
        self.closed = true;
        // Three times: subscribers believe an end of stream once a second
        // marker follows it, and a publisher that is dropped now sends no
        // more; any one of the three may be lost.
        for _ in 0..3 {
            self.control_datagram(Kind::EndOfStream, now, &mut emit);
        }
    }

    /// Handles a datagram from a subscriber (a retransmit request). What
    /// `reply` receives goes back to the sender only: a not-available
    /// notice for the part of the range older than the retained window,
    /// then the retained part as retransmitted data, at most
    /// `retransmit_burst` messages and within the rate limit.
    pub fn on_datagram<R: FnMut(&[u8])>(
        &mut self,
        datagram: &[u8],
        now: u64,
        reply: R,
    ) -> Result<(), DropReason> {
        self.on_datagram_from(0, datagram, now, reply)
    }

    /// [`on_datagram`](Self::on_datagram) for a request from `requester`
    /// (any value that identifies the sender, such as a hash of its
    /// address): each requester has its own retransmission budget
    /// (`retransmit_burst`, `retransmit_rate`) within the one all share
    /// (`retransmit_global_burst`, `retransmit_global_rate`). A request
    /// that gets nothing is dropped as [`DropReason::OverBudget`].
    pub fn on_datagram_from<R: FnMut(&[u8])>(
        &mut self,
        requester: u64,
        datagram: &[u8],
        now: u64,
        mut reply: R,
    ) -> Result<(), DropReason> {
        self.on_request(requester, datagram, now, |_, d| reply(d))
    }

    /// [`on_datagram_from`](Self::on_datagram_from) where replies may also
    /// go to the stream's group: `send` gets each datagram with where it
    /// goes ([`Dest`]), as the configured [`Repair`] decides. Not-available
    /// notices always go to the requester.
    pub fn on_request<S: FnMut(Dest, &[u8])>(
        &mut self,
        requester: u64,
        datagram: &[u8],
        now: u64,
        mut send: S,
    ) -> Result<(), DropReason> {
        self.counters.datagrams_received += 1;
        let result = self.handle(requester, datagram, now, &mut send);
        if let Err(r) = result {
            self.counters.drops.record(r);
        }
        result
    }

    /// Trims `from..end` of what went to the group within the linger time,
    /// and says whether another requester asked for part of it then
    /// (which, with [`Repair::Auto`], sends it to the group).
    fn recall(&self, requester: u64, mut from: u64, end: u64, now: u64) -> (u64, bool) {
        let mut shared = false;
        // Newest first: a later repair covering the start is found first.
        for k in 1..=RECENT_REPAIRS {
            let r = &self.recent[(self.recent_next + RECENT_REPAIRS - k) % RECENT_REPAIRS];
            if r.to == 0 || now.saturating_sub(r.at) >= self.linger_ns {
                continue;
            }
            if r.from <= from && from < r.to && r.group {
                from = r.to.min(end);
            }
            if r.from < end && from < r.to && !r.group && r.requester != requester {
                shared = true;
            }
        }
        (from, shared)
    }

    fn remember(&mut self, r: RecentRepair) {
        self.recent[self.recent_next] = r;
        self.recent_next = (self.recent_next + 1) % RECENT_REPAIRS;
    }

    fn handle<S: FnMut(Dest, &[u8])>(
        &mut self,
        requester: u64,
        datagram: &[u8],
        now: u64,
        send: &mut S,
    ) -> Result<(), DropReason> {
        if let Some(mac) = &self.mac {
            mac.verify(datagram)?;
        }
        let d = frame::decode(datagram, &self.limits)?;
        let Frame::Request { from, count } = d.frame else {
            return Err(DropReason::UnexpectedKind);
        };
        if d.epoch != self.epoch {
            return Err(DropReason::OldEpoch);
        }
        self.counters.requests_received += 1;
        // Sequences not yet published cannot be asked for in good faith;
        // they are ignored.
        let mut end = from.saturating_add(count).min(self.retained.next_seq());
        if from >= end {
            return Ok(());
        }
        if let Some(lossy) = &mut self.lossy {
            let published = self.counters.messages_published;
            lossy.roll(now, published);
            let k = requester_slot(requester);
            let left = lossy.left(k, published);
            let allowed = end.min(from.saturating_add(left));
            lossy.asked[k] += allowed - from;
            if allowed < end {
                // Told once per window: a requester that keeps asking gets
                // no more notices than it got repairs.
                if !lossy.told[k] {
                    lossy.told[k] = true;
                    frame::encode_control(
                        &mut self.control,
                        Kind::Throttled,
                        self.stream_id,
                        self.epoch,
                        allowed,
                        end - allowed,
                    );
                    send(Dest::Requester, &self.control);
                    self.counters.requesters_throttled += 1;
                    self.counters.datagrams_sent += 1;
                }
                self.counters.retransmit_throttled += end - allowed;
                if allowed == from {
                    return Err(DropReason::OverBudget);
                }
                end = allowed;
            }
        }
        let oldest = match self.retained.oldest() {
            0 => self.retained.next_seq(),
            o => o,
        };
        if from < oldest {
            let gone_to = end.min(oldest);
            frame::encode_control(
                &mut self.control,
                Kind::NotAvailable,
                self.stream_id,
                self.epoch,
                from,
                gone_to - from,
            );
            send(Dest::Requester, &self.control);
            self.counters.not_available_sent += 1;
            self.counters.datagrams_sent += 1;
        }
        let asked = from.max(oldest);
        let (start, shared) = if asked < end && self.repair != Repair::Requester {
            self.recall(requester, asked, end, now)
        } else {
            (asked, false)
        };
        self.counters.requests_lingered += start - asked;
        let dest = match self.repair {
            Repair::Group => Dest::Group,
            Repair::Auto if shared => Dest::Group,
            _ => Dest::Requester,
        };
        if start < end {
            // What one reply may hold: `retransmit_burst` messages and
            // `retransmit_reply_bytes`, at least one message.
            // The budgets first: a flood over budget costs a few
            // comparisons per request, not a walk of the window.
            let k = requester_slot(requester);
            let burst = self.buckets[0]
                .burst
                .min(self.buckets[k].available(now))
                .min(self.global.available(now));
            let (mut granted, mut bytes) = (0u64, 0usize);
            for seq in start..end {
                let len = self.retained.get(seq).map_or(0, |(_, p)| p.len()) + HEADER_LEN;
                if granted == burst || (granted > 0 && bytes + len > self.reply_bytes) {
                    break;
                }
                bytes += len;
                granted += 1;
            }
            self.buckets[k].take(granted);
            self.global.take(granted);
            self.counters.retransmit_throttled += end - start - granted;
            if granted == 0 {
                return Err(DropReason::OverBudget);
            }
            let mut sent = 0;
            let mut out = |d: &[u8]| send(dest, d);
            for seq in start..start + granted {
                if let Some((h, payload)) = self.retained.get(seq) {
                    sent += self.resend.push(&h, payload, &mut out);
                }
            }
            sent += self.resend.flush(&mut out);
            self.counters.datagrams_sent += sent;
            self.counters.retransmitted += granted;
            self.counters.requests_served += 1;
            if dest == Dest::Group {
                self.counters.repairs_to_group += 1;
            }
            self.remember(RecentRepair {
                from: start,
                to: start + granted,
                at: now,
                requester,
                group: dest == Dest::Group,
            });
        }
        Ok(())
    }

    fn control_datagram<E: FnMut(&[u8])>(&mut self, kind: Kind, now: u64, emit: &mut E) {
        frame::encode_control(
            &mut self.control,
            kind,
            self.stream_id,
            self.epoch,
            self.retained.latest(),
            self.retained.oldest(),
        );
        emit(&self.control);
        self.counters.heartbeats_sent += 1;
        self.sent(1, now);
    }

    fn sent(&mut self, datagrams: u64, now: u64) {
        if datagrams > 0 {
            self.counters.datagrams_sent += datagrams;
            self.last_sent = Some(now);
            self.idle_gap = self.heartbeat_ns;
        }
    }

    /// Start and capacity of every buffer, to show they never move.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> Vec<(usize, usize)> {
        let mut v = self.retained.buffers().to_vec();
        v.push((self.joined.as_ptr() as usize, self.joined.len()));
        v.push(self.live.buffer());
        v.push(self.resend.buffer());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::frame::decode;

    fn config() -> PublisherConfig {
        PublisherConfig {
            max_message: 4000,
            max_datagram: 256,
            retain_messages: 8,
            retain_bytes: 8000,
            heartbeat_interval: Duration::from_micros(100),
            // The tests of the other budgets run without it.
            lossy_share_percent: 0,
            ..PublisherConfig::new(5, 77)
        }
    }

    fn limits() -> Limits {
        Limits {
            stream_id: 5,
            max_datagram: 256,
            max_message: 4000,
        }
    }

    fn request(from: u64, count: u64, epoch: u64) -> [u8; DATAGRAM_HEADER_LEN] {
        let mut b = [0u8; DATAGRAM_HEADER_LEN];
        frame::encode_control(&mut b, Kind::Request, 5, epoch, from, count);
        b
    }

    /// The messages (header and payload) of data and retransmit datagrams.
    fn messages(out: &[Vec<u8>]) -> Vec<(crate::wire::Header, Vec<u8>)> {
        let mut v = Vec::new();
        for d in out {
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                v.extend(messages.map(|(h, p)| (h, p.to_vec())));
            }
        }
        v
    }

    #[test]
    fn gathered_datagrams_and_their_retransmissions_carry_the_same_bytes_after_the_window_wrapped()
    {
        // A small window: 8 messages, its arena wraps every few datagrams.
        let mut p = PublisherCore::new(&config()).unwrap();
        let mut live: Vec<Vec<u8>> = Vec::new();
        let body = |seq: u64| -> Vec<u8> {
            (0..(seq as usize * 7) % 50)
                .map(|i| (i as u64 ^ seq) as u8)
                .collect()
        };
        for seq in 1..=200u64 {
            let m = body(seq);
            p.claim(m.len()).unwrap().copy_from_slice(&m);
            // What a gathering driver sends: the head, then the window's
            // bytes, copied here as the kernel would.
            let ts = (seq % 3 == 0).then_some(seq * 1000);
            let got = p
                .commit_gather_at(
                    m.len(),
                    0,
                    ts,
                    || 1,
                    |h: &[u8], b: &[u8]| live.push([h, b].concat()),
                )
                .unwrap();
            assert_eq!(got, seq);
            if seq % 16 == 0 {
                p.flush_gather(2, |h: &[u8], b: &[u8]| live.push([h, b].concat()));
                p.release();
            }
        }
        p.flush_gather(3, |h: &[u8], b: &[u8]| live.push([h, b].concat()));
        let sent = messages(&live);
        assert_eq!(
            sent.iter().map(|(h, _)| h.seq).collect::<Vec<_>>(),
            (1..=200).collect::<Vec<_>>()
        );
        for (h, payload) in &sent {
            assert_eq!(payload, &body(h.seq), "message {}", h.seq);
            assert_eq!(h.len as usize, payload.len());
            let ts = (h.seq % 3 == 0).then_some(h.seq * 1000);
            assert_eq!(h.timestamp, ts.unwrap_or(0));
            assert_eq!(h.flags & FLAG_TIMESTAMP != 0, ts.is_some());
        }
        assert!(live.iter().all(|d| d.len() <= 256));
        // The retained ones, asked for again: the same headers and bytes.
        let oldest = p.oldest_retained();
        assert!(oldest > 150, "{oldest}");
        let mut again: Vec<Vec<u8>> = Vec::new();
        p.on_datagram(&request(oldest, 201 - oldest, 77), 4, |d| {
            again.push(d.to_vec())
        })
        .unwrap();
        let resent = messages(&again);
        assert_eq!(resent.len() as u64, 201 - oldest);
        for m in &resent {
            assert_eq!(Some(m), sent.iter().find(|(h, _)| h.seq == m.0.seq));
        }
    }

    #[test]
    fn a_claim_that_would_overwrite_gathered_bytes_is_told_until_released() {
        let mut p = PublisherCore::new(&config()).unwrap();
        let publish = |p: &mut PublisherCore, len: usize| {
            p.claim(len).unwrap().fill(1);
            p.commit_gather_at(len, 0, None, || 1, |_: &[u8], _: &[u8]| {})
                .unwrap();
        };
        assert!(!p.claim_reuses_pinned(4000));
        publish(&mut p, 100);
        // Nothing handed out yet: the pending datagram is the core's own.
        assert!(!p.claim_reuses_pinned(4000));
        p.flush_gather(1, |_: &[u8], _: &[u8]| {});
        // The driver may still point at it: a claim reaching it says so.
        assert!(!p.claim_reuses_pinned(100));
        let mut len = 100;
        while !p.claim_reuses_pinned(4000) {
            publish(&mut p, len);
            len = 1000;
        }
        p.release();
        assert!(!p.claim_reuses_pinned(4000));
        // The contiguous methods copy before `emit` returns: nothing pinned.
        p.flush(2, |_| {});
        p.claim(10).unwrap();
        p.commit(10, None, 3, |_| {}).unwrap();
        p.flush(3, |_| {});
        assert!(!p.claim_reuses_pinned(4000));
    }

    /// Sequences carried by each datagram, with its kind.
    fn seqs(out: &[Vec<u8>]) -> Vec<(Kind, Vec<u64>)> {
        out.iter()
            .map(|d| match decode(d, &limits()).unwrap().frame {
                Frame::Messages {
                    retransmit,
                    messages,
                    ..
                } => (
                    if retransmit {
                        Kind::Retransmit
                    } else {
                        Kind::Data
                    },
                    messages.map(|(h, _)| h.seq).collect(),
                ),
                Frame::NotAvailable { from, count } => {
                    (Kind::NotAvailable, (from..from + count).collect())
                }
                Frame::Heartbeat { latest, oldest } => (Kind::Heartbeat, vec![latest, oldest]),
                Frame::EndOfStream { last_seq, oldest } => {
                    (Kind::EndOfStream, vec![last_seq, oldest])
                }
                f => panic!("{f:?}"),
            })
            .collect()
    }

    #[test]
    fn rejects_unusable_settings_with_the_key_named() {
        let bad = |f: fn(&mut PublisherConfig)| {
            let mut c = config();
            f(&mut c);
            PublisherCore::new(&c).unwrap_err().key
        };
        assert_eq!(bad(|c| c.max_datagram = 64), "max_datagram");
        assert_eq!(bad(|c| c.retain_messages = 6), "retain_messages");
        assert_eq!(bad(|c| c.retain_bytes = 10), "retain_bytes");
        assert_eq!(bad(|c| c.max_message = 0), "max_message");
        assert_eq!(bad(|c| c.retransmit_burst = 0), "retransmit_burst");
    }

    #[test]
    fn packs_messages_and_flushes_on_demand() {
        let mut p = PublisherCore::new(&config()).unwrap();
        let mut out = Vec::new();
        for i in 0..5u8 {
            p.publish(&[i; 20], None, 0, |d: &[u8]| out.push(d.to_vec()))
                .unwrap();
        }
        // (256 - 40) / 44 = 4 messages fit; the fifth started a new one.
        assert_eq!(out.len(), 1);
        p.flush(1, |d: &[u8]| out.push(d.to_vec()));
        assert_eq!(
            seqs(&out),
            vec![(Kind::Data, vec![1, 2, 3, 4]), (Kind::Data, vec![5])]
        );
        assert_eq!(p.counters().messages_published, 5);
        assert_eq!(p.counters().datagrams_sent, 2);
    }

    #[test]
    fn answers_requests_from_the_window_and_says_what_is_gone() {
        let mut p = PublisherCore::new(&config()).unwrap();
        for i in 1..=12u8 {
            p.publish(&[i; 10], None, 0, |_: &[u8]| {}).unwrap();
        }
        p.flush(0, |_: &[u8]| {});
        assert_eq!(p.oldest_retained(), 5);
        let mut out = Vec::new();
        p.on_datagram(&request(2, 5, 77), 1, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        assert_eq!(
            seqs(&out),
            vec![
                (Kind::NotAvailable, vec![2, 3, 4]),
                (Kind::Retransmit, vec![5, 6])
            ]
        );
        // Payloads are the retained ones.
        let Frame::Messages { mut messages, .. } = decode(&out[1], &limits()).unwrap().frame else {
            panic!()
        };
        assert_eq!(messages.next().unwrap().1, &[5u8; 10][..]);
        // Beyond the latest: clamped; wholly beyond: ignored.
        out.clear();
        p.on_datagram(&request(11, 10, 77), 2, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        p.on_datagram(&request(13, 10, 77), 2, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        assert_eq!(seqs(&out), vec![(Kind::Retransmit, vec![11, 12])]);
        let c = p.counters();
        assert_eq!(
            (
                c.requests_received,
                c.requests_served,
                c.retransmitted,
                c.not_available_sent
            ),
            (3, 2, 4, 1)
        );
        // Another incarnation's request, or a data datagram, is dropped.
        assert_eq!(
            p.on_datagram(&request(5, 1, 76), 3, |_: &[u8]| {}),
            Err(DropReason::OldEpoch)
        );
        let mut hb = [0u8; DATAGRAM_HEADER_LEN];
        frame::encode_control(&mut hb, Kind::Heartbeat, 5, 77, 1, 1);
        assert_eq!(
            p.on_datagram(&hb, 3, |_: &[u8]| {}),
            Err(DropReason::UnexpectedKind)
        );
        assert_eq!(
            p.on_datagram(&hb[..3], 3, |_: &[u8]| {}),
            Err(DropReason::Truncated)
        );
        let d = p.counters().drops;
        assert_eq!((d.old_epoch, d.unexpected_kind, d.truncated), (1, 1, 1));
    }

    #[test]
    fn retransmission_is_limited_per_request_and_by_rate() {
        let mut p = PublisherCore::new(&PublisherConfig {
            retransmit_burst: 3,
            retransmit_rate: 1000, // one per ms
            ..config()
        })
        .unwrap();
        for _ in 0..8 {
            p.publish(b"x", None, 0, |_: &[u8]| {}).unwrap();
        }
        let mut n = 0u64;
        let mut count = |d: &[u8]| {
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                n += messages.len() as u64;
            }
        };
        p.on_datagram(&request(1, 8, 77), 1_000_000_000, &mut count)
            .unwrap();
        // Bucket empty: nothing until it refills.
        assert_eq!(
            p.on_datagram(&request(4, 5, 77), 1_000_000_000, &mut count),
            Err(DropReason::OverBudget)
        );
        p.on_datagram(&request(4, 5, 77), 1_002_000_000, &mut count)
            .unwrap();
        // 3 at once, none while the bucket is empty, 2 after 2 ms.
        assert_eq!(n, 5);
        assert_eq!(p.counters().retransmit_throttled, 5 + 5 + 3);
    }

    #[test]
    fn a_flood_from_many_requesters_is_held_to_the_shared_budget() {
        let mut p = PublisherCore::new(&PublisherConfig {
            retransmit_burst: 8,
            retransmit_rate: 1000,
            retransmit_global_burst: 50,
            retransmit_global_rate: 10_000, // one per 100 µs
            ..config()
        })
        .unwrap();
        for _ in 0..16 {
            p.publish(b"x", None, 0, |_: &[u8]| {}).unwrap();
        }
        let mut n = 0u64;
        let mut count = |d: &[u8]| {
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                n += messages.len() as u64;
            }
        };
        // 10,000 spoofed requesters, one request each, all at once.
        let mut over = 0;
        for who in 0..10_000u64 {
            if p.on_datagram_from(who, &request(1, 16, 77), 1, &mut count)
                == Err(DropReason::OverBudget)
            {
                over += 1;
            }
        }
        assert_eq!(n, 50, "the shared burst");
        assert_eq!(p.counters().drops.over_budget, over);
        assert!(over >= 10_000 - 50 / 8 - 1);
        // One requester alone gets its own burst only, and no more until
        // its bucket refills, even when the shared one could give more.
        let mut q = PublisherCore::new(&PublisherConfig {
            retransmit_burst: 8,
            retransmit_rate: 1000,
            ..config()
        })
        .unwrap();
        for _ in 0..16 {
            q.publish(b"x", None, 0, |_: &[u8]| {}).unwrap();
        }
        n = 0;
        let mut count = |d: &[u8]| {
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                n += messages.len() as u64;
            }
        };
        for _ in 0..100 {
            let _ = q.on_datagram_from(7, &request(1, 16, 77), 1, &mut count);
        }
        assert_eq!(n, 8);
    }

    #[test]
    fn one_reply_is_bounded_in_bytes() {
        let mut p = PublisherCore::new(&PublisherConfig {
            retransmit_reply_bytes: 1000,
            ..config()
        })
        .unwrap();
        for _ in 0..32 {
            p.publish(&[1u8; 100], None, 0, |_: &[u8]| {}).unwrap();
        }
        let mut bytes = 0usize;
        let mut msgs = 0u64;
        p.on_datagram(&request(1, 32, 77), 1, |d: &[u8]| {
            bytes += d.len();
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                msgs += messages.len() as u64;
            }
        })
        .unwrap();
        // 124 bytes per message: 8 fit in 1000.
        assert_eq!(msgs, 8);
        // Plus a datagram header per datagram (one message each at 256
        // bytes) and the not-available notice for what is no longer kept.
        assert!(bytes <= 1000 + 9 * DATAGRAM_HEADER_LEN, "{bytes}");
        // A message larger than the cap still goes, alone.
        let mut big = PublisherCore::new(&PublisherConfig {
            retransmit_reply_bytes: 10,
            ..config()
        })
        .unwrap();
        big.publish(&[2u8; 100], None, 0, |_: &[u8]| {}).unwrap();
        big.publish(&[2u8; 100], None, 0, |_: &[u8]| {}).unwrap();
        let mut msgs = 0u64;
        big.on_datagram(&request(1, 2, 77), 1, |d: &[u8]| {
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                msgs += messages.len() as u64;
            }
        })
        .unwrap();
        assert_eq!(msgs, 1);
    }

    #[test]
    fn the_default_amplification_is_bounded_as_documented() {
        // docs/WIRE.md: with the defaults a 40-byte request gets at most
        // about 1,700 times its size back.
        let mut p = PublisherCore::new(&PublisherConfig::new(5, 77)).unwrap();
        for _ in 0..5_000 {
            p.publish(&[3u8; 232], None, 0, |_: &[u8]| {}).unwrap();
        }
        let req = request(1, 5_000, 77);
        let mut bytes = 0usize;
        p.on_datagram(&req, 1, |d: &[u8]| bytes += d.len()).unwrap();
        let ratio = bytes / req.len();
        assert!(bytes > 60_000 && ratio <= 1_700, "{bytes} bytes, {ratio}x");
    }

    #[test]
    fn heartbeats_only_when_idle_and_end_of_stream_repeats() {
        let mut p = PublisherCore::new(&config()).unwrap();
        let mut out = Vec::new();
        p.tick(0, |d: &[u8]| out.push(d.to_vec()));
        // Each heartbeat twice, so that one alone confirms its claim.
        assert_eq!(
            seqs(&out),
            vec![(Kind::Heartbeat, vec![0, 0]), (Kind::Heartbeat, vec![0, 0])]
        );
        assert_eq!(out[0], out[1]);
        out.clear();
        p.publish(b"a", None, 50_000, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        // The tick flushes the pending message; no heartbeat: not idle.
        p.tick(60_000, |d: &[u8]| out.push(d.to_vec()));
        p.tick(159_999, |d: &[u8]| out.push(d.to_vec()));
        assert_eq!(seqs(&out), vec![(Kind::Data, vec![1])]);
        p.tick(160_000, |d: &[u8]| out.push(d.to_vec()));
        assert_eq!(out.len(), 3);
        assert_eq!(
            seqs(&out[1..]),
            vec![(Kind::Heartbeat, vec![1, 1]), (Kind::Heartbeat, vec![1, 1])]
        );
        out.clear();
        p.close(200_000, |d: &[u8]| out.push(d.to_vec()));
        p.tick(250_000, |d: &[u8]| out.push(d.to_vec()));
        p.tick(300_000, |d: &[u8]| out.push(d.to_vec()));
        assert_eq!(
            seqs(&out),
            vec![
                (Kind::EndOfStream, vec![1, 1]),
                (Kind::EndOfStream, vec![1, 1]),
                (Kind::EndOfStream, vec![1, 1]),
                (Kind::EndOfStream, vec![1, 1]),
                (Kind::EndOfStream, vec![1, 1])
            ]
        );
        assert_eq!(
            p.publish(b"late", None, 0, |_: &[u8]| {}),
            Err(PublishError::Closed)
        );
    }

    /// The times of the heartbeat pairs `tick` sends, called every
    /// `step` ns over `from..to`, and their kind; each pair checked to be
    /// two identical datagrams.
    fn rounds(p: &mut PublisherCore, from: u64, to: u64, step: u64) -> Vec<(u64, Kind)> {
        let mut rounds = Vec::new();
        let mut now = from;
        while now < to {
            let mut out = Vec::new();
            p.tick(now, |d: &[u8]| out.push(d.to_vec()));
            if !out.is_empty() {
                assert_eq!(out.len(), 2, "at {now}");
                assert_eq!(out[0], out[1]);
                rounds.push((now, seqs(&out)[0].0));
            }
            now += step;
        }
        rounds
    }

    fn gaps(rounds: &[(u64, Kind)], since: u64) -> Vec<u64> {
        let mut last = since;
        rounds
            .iter()
            .map(|&(t, _)| {
                let gap = t - last;
                last = t;
                gap
            })
            .collect()
    }

    #[test]
    fn idle_heartbeats_back_off_to_the_max_interval_and_data_resets_them() {
        // 100 us after data, then 200, 400, 800, capped at 1 ms.
        let mut p = PublisherCore::new(&PublisherConfig {
            heartbeat_max_interval: Duration::from_millis(1),
            ..config()
        })
        .unwrap();
        p.publish(b"a", None, 0, |_: &[u8]| {}).unwrap();
        p.flush(0, |_: &[u8]| {});
        let r = rounds(&mut p, 1_000, 5_000_000, 1_000);
        assert!(r.iter().all(|&(_, k)| k == Kind::Heartbeat), "{r:?}");
        assert_eq!(
            gaps(&r, 0),
            [100_000, 200_000, 400_000, 800_000]
                .into_iter()
                .chain([1_000_000; 3])
                .collect::<Vec<_>>()
        );
        assert_eq!(p.counters().heartbeats_sent, 14);
        // Data, mid-gap: the next heartbeat comes one interval after it,
        // and the back-off starts again.
        let last = r.last().unwrap().0;
        p.publish(b"b", None, last + 300_000, |_: &[u8]| {})
            .unwrap();
        p.flush(last + 300_000, |_: &[u8]| {});
        let r = rounds(&mut p, last + 301_000, last + 2_000_000, 1_000);
        assert_eq!(
            gaps(&r, last + 300_000),
            [100_000, 200_000, 400_000, 800_000]
        );
        // A publisher that never sent anything starts at once and backs
        // off from there.
        let mut p = PublisherCore::new(&PublisherConfig {
            heartbeat_max_interval: Duration::from_micros(300),
            ..config()
        })
        .unwrap();
        let r = rounds(&mut p, 0, 1_500_000, 1_000);
        assert_eq!(
            gaps(&r, 0),
            [0, 200_000, 300_000, 300_000, 300_000, 300_000]
        );
    }

    #[test]
    fn max_equal_to_the_interval_keeps_the_fixed_schedule() {
        let mut p = PublisherCore::new(&PublisherConfig {
            heartbeat_max_interval: Duration::from_micros(100),
            ..config()
        })
        .unwrap();
        p.publish(b"a", None, 0, |_: &[u8]| {}).unwrap();
        p.flush(0, |_: &[u8]| {});
        let r = rounds(&mut p, 1_000, 1_000_000, 1_000);
        assert_eq!(gaps(&r, 0), [100_000; 9]);
    }

    #[test]
    fn end_of_stream_repeats_follow_the_heartbeat_schedule_from_the_close() {
        let mut p = PublisherCore::new(&PublisherConfig {
            heartbeat_max_interval: Duration::from_micros(500),
            ..config()
        })
        .unwrap();
        p.publish(b"a", None, 0, |_: &[u8]| {}).unwrap();
        p.flush(0, |_: &[u8]| {});
        // Backed off when the stream closes...
        let r = rounds(&mut p, 1_000, 700_001, 1_000);
        assert_eq!(gaps(&r, 0), [100_000, 200_000, 400_000]);
        let mut out = Vec::new();
        p.close(1_000_000, |d: &[u8]| out.push(d.to_vec()));
        assert_eq!(out.len(), 3);
        // ...which starts the schedule again: a subscriber that lost the
        // three markers learns of the end one interval later.
        let r = rounds(&mut p, 1_001_000, 3_000_000, 1_000);
        assert!(r.iter().all(|&(_, k)| k == Kind::EndOfStream), "{r:?}");
        assert_eq!(
            gaps(&r, 1_000_000),
            [100_000, 200_000, 400_000, 500_000, 500_000]
        );
    }

    #[test]
    fn a_max_interval_below_the_interval_is_refused_by_name() {
        let e = PublisherCore::new(&PublisherConfig {
            heartbeat_max_interval: Duration::from_micros(99),
            ..config()
        })
        .unwrap_err();
        assert_eq!(e.key, "heartbeat_max_interval");
        assert_eq!(
            e.to_string(),
            "<publisher>: heartbeat_max_interval: 99µs is below heartbeat_interval (100µs): \
             idle heartbeats back off from heartbeat_interval up to heartbeat_max_interval"
        );
    }

    #[test]
    fn claim_and_commit_write_in_place_and_fragment_large_messages() {
        let mut p = PublisherCore::new(&config()).unwrap();
        let mut out = Vec::new();
        assert!(matches!(
            p.claim(4001),
            Err(PublishError::TooLarge { len: 4001, .. })
        ));
        assert_eq!(
            p.commit(1, None, 0, |_: &[u8]| {}),
            Err(PublishError::NotClaimed { len: 1 })
        );
        let buf = p.claim(1000).unwrap();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        let seq = p
            .commit(1000, Some(42), 0, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        assert_eq!(seq, 1);
        let chunk = 256 - DATAGRAM_HEADER_LEN - crate::wire::HEADER_LEN;
        assert_eq!(out.len(), 1000usize.div_ceil(chunk));
        for d in &out {
            assert!(d.len() <= 256);
            let Frame::Fragment { header, .. } = decode(d, &limits()).unwrap().frame else {
                panic!()
            };
            assert_eq!((header.seq, header.len, header.timestamp), (1, 1000, 42));
            assert_eq!(header.flags, FLAG_TIMESTAMP);
        }
    }

    /// Where each reply to `who`'s request for `from..from+count` went,
    /// with the sequences it carried.
    fn ask(p: &mut PublisherCore, who: u64, from: u64, count: u64, now: u64) -> Vec<(Dest, u64)> {
        let mut out = Vec::new();
        p.on_request(who, &request(from, count, 77), now, |dest, d: &[u8]| {
            if let Frame::Messages { messages, .. } = decode(d, &limits()).unwrap().frame {
                out.push((dest, messages.len() as u64));
            }
        })
        .unwrap();
        out
    }

    /// (kind, first, count) of each reply, and the request's result.
    type Answer = (Vec<(Kind, u64, u64)>, Result<(), DropReason>);

    /// Replies to `who`'s request.
    fn ask_all(p: &mut PublisherCore, who: u64, from: u64, count: u64, now: u64) -> Answer {
        let mut out = Vec::new();
        let r = p.on_request(who, &request(from, count, 77), now, |_, d: &[u8]| {
            out.push(match decode(d, &limits()).unwrap().frame {
                Frame::Messages {
                    first_seq,
                    messages,
                    ..
                } => (Kind::Retransmit, first_seq, messages.len() as u64),
                Frame::Throttled { from, count } => (Kind::Throttled, from, count),
                f => panic!("{f:?}"),
            })
        });
        (out, r)
    }

    /// A publisher with replies of 4 messages, no rate limit, requesters
    /// held to `percent` per 1 ms window, and `published` messages out.
    fn sharing(percent: u32, published: u64) -> PublisherCore {
        let mut p = PublisherCore::new(&PublisherConfig {
            retain_messages: 128,
            retransmit_burst: 4,
            retransmit_rate: 0,
            lossy_share_percent: percent,
            lossy_window: Duration::from_micros(1000),
            ..config()
        })
        .unwrap();
        for _ in 0..published {
            p.publish(b"x", None, 0, |_: &[u8]| {}).unwrap();
        }
        p
    }

    #[test]
    fn a_requester_over_its_share_is_cut_told_once_and_ignored_until_the_window_ends() {
        let us = 1_000;
        let mut p = sharing(10, 100);
        // 10% of the 100 messages published: 10 messages per window, in
        // replies of at most `retransmit_burst`.
        assert_eq!(
            ask_all(&mut p, 1, 1, 4, 10 * us),
            (vec![(Kind::Retransmit, 1, 4)], Ok(()))
        );
        assert_eq!(
            ask_all(&mut p, 1, 11, 4, 20 * us),
            (vec![(Kind::Retransmit, 11, 4)], Ok(()))
        );
        // Two more are allowed, the other two refused, and it is told.
        assert_eq!(
            ask_all(&mut p, 1, 21, 4, 30 * us),
            (
                vec![(Kind::Throttled, 23, 2), (Kind::Retransmit, 21, 2)],
                Ok(())
            )
        );
        // Further requests in the window are ignored, without a notice.
        assert_eq!(
            ask_all(&mut p, 1, 31, 2, 40 * us),
            (vec![], Err(DropReason::OverBudget))
        );
        // Another subscriber is not affected.
        assert_eq!(
            ask_all(&mut p, 2, 41, 4, 50 * us),
            (vec![(Kind::Retransmit, 41, 4)], Ok(()))
        );
        let c = p.counters();
        assert_eq!(c.requesters_throttled, 1);
        assert_eq!(c.retransmit_throttled, 4);
        assert_eq!(c.drops.over_budget, 1);
        assert_eq!(c.retransmitted, 14);
        // A new window: served again.
        assert_eq!(
            ask_all(&mut p, 1, 31, 2, 1020 * us),
            (vec![(Kind::Retransmit, 31, 2)], Ok(()))
        );
    }

    #[test]
    fn the_share_never_falls_below_one_burst_and_zero_turns_it_off() {
        let mut p = sharing(10, 5);
        // 10% of 5 is 0: the floor of one burst still lets a late joiner
        // or a lone loss be repaired.
        assert_eq!(
            ask_all(&mut p, 1, 1, 5, 1_000),
            (
                vec![(Kind::Throttled, 5, 1), (Kind::Retransmit, 1, 4)],
                Ok(())
            )
        );
        let mut off = sharing(0, 100);
        for k in 0..20 {
            let (out, r) = ask_all(&mut off, 1, 1 + 4 * k, 4, 1_000 + k);
            assert_eq!((out.len(), r), (1, Ok(())), "{k}");
        }
        assert_eq!(off.counters().requesters_throttled, 0);
    }

    #[test]
    fn lossy_settings_are_checked() {
        let bad = |f: fn(&mut PublisherConfig)| {
            let mut c = config();
            f(&mut c);
            PublisherCore::new(&c).unwrap_err().key
        };
        assert_eq!(bad(|c| c.lossy_share_percent = 101), "lossy_share_percent");
        assert_eq!(
            bad(|c| {
                c.lossy_share_percent = 5;
                c.lossy_window = Duration::ZERO
            }),
            "lossy_window"
        );
        let mut c = config();
        c.lossy_window = Duration::ZERO;
        assert!(PublisherCore::new(&c).is_ok(), "off needs no window");
    }

    #[test]
    fn auto_repairs_to_the_group_once_a_second_subscriber_asks_then_lingers() {
        let mut p = PublisherCore::new(&PublisherConfig {
            repair: Repair::Auto,
            repair_linger: Duration::from_micros(500),
            ..config()
        })
        .unwrap();
        for _ in 0..4 {
            p.publish(b"x", None, 0, |_: &[u8]| {}).unwrap();
        }
        let us = 1_000;
        assert_eq!(ask(&mut p, 1, 1, 4, 10 * us), vec![(Dest::Requester, 4)]);
        // The same requester again (its repair was lost): to it again.
        assert_eq!(ask(&mut p, 1, 1, 4, 20 * us), vec![(Dest::Requester, 4)]);
        // Another one: the loss was shared, so every subscriber gets it.
        assert_eq!(ask(&mut p, 2, 1, 4, 30 * us), vec![(Dest::Group, 4)]);
        // Within the linger, nobody gets it again, in part or whole.
        assert_eq!(ask(&mut p, 3, 1, 4, 40 * us), vec![]);
        assert_eq!(ask(&mut p, 4, 3, 2, 50 * us), vec![]);
        assert_eq!(p.counters().requests_lingered, 6);
        assert_eq!(p.counters().repairs_to_group, 1);
        // After it, a lone request is answered alone again.
        assert_eq!(ask(&mut p, 3, 1, 4, 600 * us), vec![(Dest::Requester, 4)]);
    }

    #[test]
    fn group_repairs_always_go_to_the_group_and_not_available_to_the_requester() {
        let mut p = PublisherCore::new(&PublisherConfig {
            repair: Repair::Group,
            ..config()
        })
        .unwrap();
        for _ in 0..12 {
            p.publish(b"x", None, 0, |_: &[u8]| {}).unwrap();
        }
        // 8 retained: 1..=4 are gone.
        let mut out = Vec::new();
        p.on_request(1, &request(1, 8, 77), 5, |dest, d: &[u8]| {
            out.push((dest, decode(d, &limits()).unwrap().frame.is_live()))
        })
        .unwrap();
        assert_eq!(out[0].0, Dest::Requester, "the notice: {out:?}");
        assert!(out[1..].iter().all(|&(d, _)| d == Dest::Group), "{out:?}");
        assert_eq!(p.counters().not_available_sent, 1);
    }
}
