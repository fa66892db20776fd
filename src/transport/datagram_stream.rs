//! Streams over datagram links (UDP multicast, RDMA UD multicast): the
//! recovery core of [`crate::recovery`] driven over one or two
//! [`DatagramLink`]s (lines A and B).
//!
//! The publisher sends every datagram on each line; it answers retransmit
//! requests and sends heartbeats from [`StreamSend::service`]. The
//! subscriber feeds whatever arrives on either line to its core, which
//! delivers in order, drops duplicates and asks the publisher (at the
//! source address of its data) for what is missing.

use crate::clock::monotonic_ns;
use crate::config::StreamConfig;
use crate::error::{ConfigError, Error, Result};
use crate::message::Event;
use crate::recovery::frame::MAC_LEN;
use crate::recovery::mac::{load_key, Key, Mac};
use crate::recovery::Dest;
use crate::recovery::{
    Counters, Line, PublishError, PublisherConfig, PublisherCore, SubscriberConfig, SubscriberCore,
};
use crate::transport::datagram::DatagramLink;
use crate::transport::{StreamReceive, StreamSend};
use crate::wire::FLAG_TIMESTAMP;

/// Identifier of stream `name` on the wire: FNV-1a of the name, so
/// publisher and subscribers agree without coordination.
pub fn stream_id(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Sequences a subscriber can hold out of order while it recovers a loss:
/// the publisher's retained window, within 32 MiB of slots (a slot holds
/// one message, up to the stream's `max_message`).
fn reorder_window(cfg: &StreamConfig) -> usize {
    let slot = (cfg.max_message + 64).min(cfg.max_datagram);
    let fit = ((32usize << 20) / slot).max(2);
    // Largest power of two within both bounds.
    let cap = cfg.capacity.min(fit).max(2);
    1 << (usize::BITS - 1 - cap.leading_zeros())
}

/// Requests and replies are small; this bounds the copy of one.
const CONTROL_MAX: usize = 64;
/// Retransmit requests read (with one receive call) and handled per line
/// per `service` call, so a storm of them cannot starve the publishing
/// thread; the kernel drops what a flood adds beyond.
const REQUESTS_PER_SERVICE: usize = 16;

/// The stream's key, read from `key_file` when one is configured.
fn stream_key(name: &str, cfg: &StreamConfig) -> Result<Option<Key>> {
    if cfg.key_file.is_empty() {
        return Ok(None);
    }
    let key = format!("streams.{name}.key_file");
    Ok(Some(load_key(std::path::Path::new(&cfg.key_file), &key)?))
}

fn config_error(channel: &str, e: ConfigError) -> Error {
    Error::Config(ConfigError {
        source_name: channel.into(),
        ..e
    })
}

/// Publisher of a stream over one or two datagram lines.
#[derive(Debug)]
pub struct DatagramPublisher<L: DatagramLink> {
    core: PublisherCore,
    lines: Vec<L>,
    channel: String,
    autoflush: bool,
    /// The first send error since the last call that could report it.
    failed: Option<Error>,
    /// Seals every datagram sent, when the stream has a key.
    mac: Option<Mac>,
    /// New messages' datagrams go to the lines in two pieces (header, and
    /// the messages as the retained window holds them), sent from there:
    /// the lines gather and the stream has no key (a sealed datagram is
    /// one contiguous copy).
    gather: bool,
}

impl<L: DatagramLink> DatagramPublisher<L> {
    /// A publisher of stream `name` on `lines` (line A first).
    pub fn new(name: &str, cfg: &StreamConfig, lines: Vec<L>) -> Result<Self> {
        let channel = format!("stream `{name}`");
        let max_datagram = lines
            .iter()
            .map(L::max_datagram)
            .min()
            .unwrap_or(cfg.max_datagram)
            .min(cfg.max_datagram);
        let key = stream_key(name, cfg)?;
        let pc = PublisherConfig {
            max_message: cfg.max_message,
            // Room for the MAC the driver appends.
            max_datagram: max_datagram - if key.is_some() { MAC_LEN } else { 0 },
            key,
            retain_messages: cfg.capacity,
            // Room for `capacity` messages of the largest size, within
            // 64 MiB; smaller messages fit more, up to `capacity`.
            retain_bytes: (cfg.capacity * cfg.max_message)
                .min(64 << 20)
                .max(cfg.max_message),
            heartbeat_interval: cfg.heartbeat_interval,
            heartbeat_max_interval: cfg.idle_heartbeat_cap(),
            retransmit_burst: cfg.retransmit_burst,
            retransmit_rate: cfg.retransmit_rate,
            retransmit_global_burst: cfg.retransmit_global_burst,
            retransmit_global_rate: cfg.retransmit_global_rate,
            retransmit_reply_bytes: cfg.retransmit_reply_bytes,
            repair: cfg.repair,
            repair_linger: cfg.repair_linger,
            lossy_share_percent: cfg.lossy_share_percent,
            lossy_window: cfg.lossy_window,
            ..PublisherConfig::new(stream_id(name), crate::clock::now_ns())
        };
        let core = PublisherCore::new(&pc).map_err(|e| config_error(&channel, e))?;
        Ok(DatagramPublisher {
            core,
            lines,
            channel,
            autoflush: cfg.autoflush,
            failed: None,
            gather: L::GATHERS && key.is_none(),
            mac: key.map(|k| Mac::new(k, max_datagram)),
        })
    }

    /// What the publisher has done so far.
    pub fn counters(&self) -> Counters {
        self.core.counters()
    }

    fn take_failure(&mut self) -> Result<()> {
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn publish_error(channel: &str, e: PublishError) -> Error {
    match e {
        PublishError::TooLarge { len, max } => Error::MessageTooLarge {
            len,
            max,
            channel: channel.into(),
        },
        other => Error::Protocol {
            channel: channel.into(),
            peer: "this publisher".into(),
            reason: format!("{other:?}"),
        },
    }
}

/// Sends `d` (sealed when there is a key) on every line, keeping the first
/// error.
fn send_all<L: DatagramLink>(
    lines: &mut [L],
    failed: &mut Option<Error>,
    mac: &mut Option<Mac>,
    d: &[u8],
) {
    let d = match mac {
        Some(m) => m.seal(d),
        None => d,
    };
    for l in lines.iter_mut() {
        if let Err(e) = l.send_group(d) {
            failed.get_or_insert(e);
        }
    }
}

/// Sends `head` followed by `body`, a new messages' datagram whose body
/// lies in `core`'s retained window, on every line, keeping the first
/// error.
///
/// # Safety
///
/// `body` is the retained window's, and the publisher flushes the lines
/// (then releases the core) before a claim could overwrite it
/// ([`PublisherCore::claim_reuses_pinned`]); the window is a box owned by
/// the core, which the publisher drops only after the lines were flushed.
#[inline]
unsafe fn send_all_retained<L: DatagramLink>(
    lines: &mut [L],
    failed: &mut Option<Error>,
    head: &[u8],
    body: &[u8],
) {
    for l in lines.iter_mut() {
        // SAFETY: the caller's contract, above.
        if let Err(e) = unsafe { l.send_group_retained(head, body) } {
            failed.get_or_insert(e);
        }
    }
}

/// Sends what the lines queued, keeping the first error.
fn flush_all<L: DatagramLink>(lines: &mut [L], failed: &mut Option<Error>) {
    for l in lines.iter_mut() {
        if let Err(e) = l.flush() {
            failed.get_or_insert(e);
        }
    }
}

impl<L: DatagramLink> DatagramPublisher<L> {
    /// Sends the pending datagram and what the lines queued. After it
    /// nothing points into the retained window.
    fn flush_lines(&mut self, now: u64) {
        let (lines, failed, mac) = (&mut self.lines, &mut self.failed, &mut self.mac);
        if self.gather {
            // SAFETY: the lines are flushed right below, before any claim.
            self.core.flush_gather(now, |h, b| unsafe {
                send_all_retained(lines, failed, h, b)
            });
        } else {
            self.core.flush(now, |d| send_all(lines, failed, mac, d));
        }
        flush_all(lines, failed);
        self.core.release();
    }
}

impl<L: DatagramLink> StreamSend for DatagramPublisher<L> {
    fn max_message(&self) -> usize {
        self.core.max_message()
    }

    fn next_seq(&self) -> u64 {
        self.core.next_seq()
    }

    #[inline]
    fn claim(&mut self, len: usize) -> Result<&mut [u8]> {
        if self.core.claim_reuses_pinned(len) {
            // Datagrams the lines queued point into the bytes this claim
            // reuses: they leave first.
            flush_all(&mut self.lines, &mut self.failed);
            self.core.release();
        }
        let channel = &self.channel;
        self.core.claim(len).map_err(|e| publish_error(channel, e))
    }

    #[inline]
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64> {
        let ts = (flags & FLAG_TIMESTAMP != 0).then_some(timestamp);
        let (lines, failed, mac) = (&mut self.lines, &mut self.failed, &mut self.mac);
        let seq = if self.gather {
            // SAFETY: `claim` flushes the lines before it reuses what they
            // point at; `flush_lines` and `Drop` flush them too.
            self.core
                .commit_gather_at(len, flags, ts, monotonic_ns, |h, b| unsafe {
                    send_all_retained(lines, failed, h, b)
                })
        } else {
            self.core
                .commit_flagged_at(len, flags, ts, monotonic_ns, |d| {
                    send_all(lines, failed, mac, d)
                })
        }
        .map_err(|e| publish_error(&self.channel, e))?;
        if self.autoflush {
            self.flush_lines(monotonic_ns());
        }
        self.take_failure()?;
        Ok(seq)
    }

    fn flush(&mut self) -> Result<()> {
        self.flush_lines(monotonic_ns());
        self.take_failure()
    }

    fn service(&mut self) -> Result<()> {
        let now = monotonic_ns();
        self.flush_lines(now);
        let (lines, failed, mac) = (&mut self.lines, &mut self.failed, &mut self.mac);
        // Heartbeats (the pending datagram left above).
        self.core.tick(now, |d| send_all(lines, failed, mac, d));
        flush_all(lines, failed);
        for i in 0..self.lines.len() {
            // One receive call for the batch; the (small) requests are
            // copied out so the link is free to send the replies.
            let mut reqs = [[0u8; CONTROL_MAX]; REQUESTS_PER_SERVICE];
            let mut got: [Option<(L::Peer, usize)>; REQUESTS_PER_SERVICE] =
                [None; REQUESTS_PER_SERVICE];
            let mut k = 0;
            self.lines[i].poll(REQUESTS_PER_SERVICE, &mut |peer, bytes: &[u8]| {
                if k < REQUESTS_PER_SERVICE {
                    let n = bytes.len().min(CONTROL_MAX);
                    reqs[k][..n].copy_from_slice(&bytes[..n]);
                    got[k] = Some((peer, bytes.len()));
                    k += 1;
                }
            })?;
            for (req, got) in reqs.iter().zip(&got).take(k) {
                let Some((peer, len)) = *got else { break };
                // A datagram longer than a request is cut short here and
                // then counted by the core as malformed.
                let len = len.min(CONTROL_MAX);
                let (lines, failed, mac) = (&mut self.lines, &mut self.failed, &mut self.mac);
                // Malformed and over-budget requests are counted by the
                // core and dropped.
                let who = L::source_key(&peer);
                let throttled = self.core.counters().requesters_throttled;
                let _ = self
                    .core
                    .on_request(who, &req[..len], now, |dest, reply| match dest {
                        Dest::Group => send_all(lines, failed, mac, reply),
                        Dest::Requester => {
                            let reply = match mac {
                                Some(m) => m.seal(reply),
                                None => reply,
                            };
                            if let Err(e) = lines[i].send_to(peer, reply) {
                                failed.get_or_insert(e);
                            }
                        }
                    });
                if self.core.counters().requesters_throttled != throttled {
                    // Once per subscriber per window: no log flood.
                    log::warn!(
                        "{}: the subscriber at {peer:?} asked for more than its share of the \
                         stream (lossy_share_percent); its retransmit requests are ignored \
                         until the window ends",
                        self.channel
                    );
                }
            }
        }
        self.take_failure()
    }
}

impl<L: DatagramLink> Drop for DatagramPublisher<L> {
    fn drop(&mut self) {
        // What the lines queued leaves before the window it points into is
        // dropped.
        self.flush_lines(monotonic_ns());
        let (lines, failed, mac) = (&mut self.lines, &mut self.failed, &mut self.mac);
        self.core
            .close(monotonic_ns(), |d| send_all(lines, failed, mac, d));
        flush_all(lines, failed);
    }
}

/// Requests a subscriber core asked for during one poll, sent once the
/// link is free again.
struct Pending {
    bufs: [[u8; CONTROL_MAX]; 8],
    lens: [usize; 8],
    n: usize,
    /// Seals requests, when the stream has a key.
    mac: Option<Mac>,
}

impl Pending {
    fn push(&mut self, bytes: &[u8]) {
        let bytes = match &mut self.mac {
            Some(m) => m.seal(bytes),
            None => bytes,
        };
        if self.n < self.bufs.len() && bytes.len() <= CONTROL_MAX {
            self.bufs[self.n][..bytes.len()].copy_from_slice(bytes);
            self.lens[self.n] = bytes.len();
            self.n += 1;
        }
        // More than eight in one poll: the rest are asked again after the
        // request timeout.
    }
}

fn line_of(i: usize) -> Line {
    if i == 0 {
        Line::A
    } else {
        Line::B
    }
}

/// Subscriber of a stream over one or two datagram lines.
pub struct DatagramSubscriber<L: DatagramLink> {
    core: SubscriberCore,
    channel: String,
    /// Throttled notices already logged.
    throttled_logged: u64,
    lines: Vec<L>,
    /// Per line, the source the core is bound to: where requests go.
    publisher: Vec<Option<L::Peer>>,
    pending: Pending,
    /// The lines' sockets (or completion channels), for adaptive waiting;
    /// made at the first wait.
    epoll: Option<crate::wait::Epoll>,
}

impl<L: DatagramLink> std::fmt::Debug for DatagramSubscriber<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatagramSubscriber")
            .field("lines", &self.lines.len())
            .field("publisher", &self.publisher)
            .finish()
    }
}

impl<L: DatagramLink> DatagramSubscriber<L> {
    /// A subscriber of stream `name` on `lines` (line A first).
    pub fn new(name: &str, cfg: &StreamConfig, lines: Vec<L>) -> Result<Self> {
        let channel = format!("stream `{name}`");
        let sc = SubscriberConfig {
            max_message: cfg.max_message,
            max_datagram: cfg.max_datagram,
            reorder_window: reorder_window(cfg),
            // Fragmented messages wait for a lost fragment in these, and so
            // do the fragmented messages behind them: room for many,
            // within 16 MiB.
            reassembly_buffers: ((16usize << 20) / cfg.max_message.max(1)).clamp(4, 256),
            late_join: cfg.late_join,
            nak_delay: cfg.nak_delay,
            line_grace: cfg.line_grace,
            line_timeout: cfg.line_timeout,
            nak_backoff: cfg.nak_backoff,
            nak_group_size: cfg.nak_group_size,
            // Subscribers of one stream must draw different waits.
            nak_seed: crate::clock::now_ns() ^ (u64::from(std::process::id()) << 32),
            request_timeout: cfg.retransmit_timeout,
            max_retries: cfg.retransmit_retries,
            publisher_timeout: cfg.heartbeat_timeout,
            max_jump: cfg.max_jump,
            confirm: cfg.confirm,
            key: stream_key(name, cfg)?,
            ..SubscriberConfig::new(stream_id(name))
        };
        let mut core = SubscriberCore::new(&sc).map_err(|e| config_error(&channel, e))?;
        let mut publisher = Vec::with_capacity(lines.len());
        for (i, l) in lines.iter().enumerate() {
            let source = l.configured_source();
            if let Some(p) = source {
                core.bind(line_of(i), L::source_key(&p));
            }
            publisher.push(source);
        }
        Ok(DatagramSubscriber {
            core,
            channel,
            throttled_logged: 0,
            lines,
            publisher,
            pending: Pending {
                bufs: [[0; CONTROL_MAX]; 8],
                lens: [0; 8],
                n: 0,
                mac: sc.key.map(|k| Mac::new(k, CONTROL_MAX)),
            },
            epoll: None,
        })
    }

    /// What the subscriber has seen so far.
    pub fn counters(&self) -> Counters {
        self.core.counters()
    }

    /// The publisher incarnation followed, once a datagram was heard.
    pub fn epoch(&self) -> Option<u64> {
        self.core.epoch()
    }

    /// Blocks until a line's socket is readable, `timeout` passes or the
    /// recovery core has a request or a loss report due; true when a
    /// socket is readable. At once false when the links have no event
    /// source.
    pub fn wait_for_data(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.block(timeout, false)
    }

    /// As [`wait_for_data`](Self::wait_for_data), for adaptive waiting's
    /// block: once [`stop_waits`](crate::wait::stop_waits) can end it, an
    /// idle subscriber sleeps until the recovery's next timer (a request
    /// due, or the publisher's silence to report), at most
    /// [`LONG_BLOCK`](crate::wait::LONG_BLOCK), instead of `timeout`: the
    /// publisher's heartbeats then wake it, not the clock.
    pub fn wait_idle(&mut self, timeout: std::time::Duration) -> Result<bool> {
        self.block(timeout, true)
    }

    fn block(&mut self, timeout: std::time::Duration, idle: bool) -> Result<bool> {
        if self.epoll.is_none() {
            let mut fds = Vec::with_capacity(2 * self.lines.len());
            for l in &self.lines {
                let mut two = [0; 2];
                let n = l.wait_fds(&mut two);
                fds.extend_from_slice(&two[..n]);
            }
            if fds.is_empty() {
                return Ok(false);
            }
            self.epoll = Some(
                crate::wait::Epoll::new(&fds)
                    .map_err(|e| Error::io("epoll_ctl", "a stream subscriber's sockets", e))?,
            );
        }
        // A line armed just now may have received before arming: the
        // caller polls once more, and sleeps on its next wait.
        let mut armed = false;
        for l in &mut self.lines {
            armed |= l.arm_wait()?;
        }
        if armed {
            return Ok(false);
        }
        let now = monotonic_ns();
        let timeout = if idle && crate::wait::stop_wakes() {
            let due = self.core.wake_deadline().saturating_sub(now);
            std::time::Duration::from_nanos(due).min(crate::wait::LONG_BLOCK)
        } else {
            let due = self.core.next_deadline().saturating_sub(now);
            timeout.min(std::time::Duration::from_nanos(due))
        };
        let ep = self.epoll.as_ref().expect("made above");
        let woke = ep
            .wait(timeout)
            .map_err(|e| Error::io("epoll_wait", "a stream subscriber's sockets", e))?;
        if woke {
            for l in &mut self.lines {
                l.after_wake()?;
            }
        }
        Ok(woke)
    }

    #[cold]
    #[inline(never)]
    fn send_pending(&mut self) -> Result<()> {
        let n = std::mem::replace(&mut self.pending.n, 0);
        if n == 0 {
            return Ok(());
        }
        // Ask on the first line that has heard the publisher.
        let Some(i) = self.publisher.iter().position(Option::is_some) else {
            return Ok(());
        };
        let peer = self.publisher[i].expect("checked");
        for k in 0..n {
            let len = self.pending.lens[k];
            self.lines[i].send_to(peer, &self.pending.bufs[k][..len])?;
        }
        Ok(())
    }
}

impl<L: DatagramLink> StreamReceive for DatagramSubscriber<L> {
    #[inline]
    fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let now = monotonic_ns();
        let mut delivered = 0usize;
        for i in 0..self.lines.len() {
            let line = line_of(i);
            let (core, pending, publisher) =
                (&mut self.core, &mut self.pending, &mut self.publisher[i]);
            self.lines[i].poll(max, &mut |peer, bytes: &[u8]| {
                let before = core.messages_delivered();
                let key = L::source_key(&peer);
                // Malformed, foreign and unconfirmed datagrams are counted
                // by the core.
                let _ = core.on_datagram_from(line, key, bytes, now, &mut *f, |req: &[u8]| {
                    pending.push(req)
                });
                if core.bound_source(line) == Some(key) {
                    // The publisher sends from the address it takes
                    // requests at; requests go to the bound source only.
                    *publisher = Some(peer);
                }
                delivered += (core.messages_delivered() - before) as usize;
            })?;
        }
        let (core, pending) = (&mut self.core, &mut self.pending);
        let before = core.messages_delivered();
        core.tick(now, &mut *f, |req: &[u8]| pending.push(req));
        delivered += (core.messages_delivered() - before) as usize;
        let throttled = core.throttled();
        if throttled != self.throttled_logged {
            self.throttled_logged = throttled;
            log::warn!(
                "{}: the publisher throttled this subscriber's retransmit requests: it asked \
                 for more than its share of the stream (notices so far: {throttled}); \
                 what it cannot recover is reported as gaps",
                self.channel
            );
        }
        // Requests are rare: the busy poll pays one test, not a call.
        if self.pending.n != 0 {
            self.send_pending()?;
        }
        Ok(delivered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    /// An in-memory network: one queue per endpoint; group datagrams go to
    /// every subscriber, with every `drop_every`-th one to the subscriber
    /// dropped.
    #[derive(Default)]
    struct Net {
        queues: Vec<VecDeque<(usize, Vec<u8>)>>,
        group_sent: u64,
        drop_every: u64,
        dropped: u64,
    }

    struct SimLink {
        net: Arc<Mutex<Net>>,
        me: usize,
    }

    impl DatagramLink for SimLink {
        type Peer = usize;
        fn max_datagram(&self) -> usize {
            1472
        }
        fn send_group(&mut self, bytes: &[u8]) -> Result<()> {
            let mut n = self.net.lock().unwrap();
            n.group_sent += 1;
            let drop = n.drop_every > 0 && n.group_sent % n.drop_every == 0;
            for q in 0..n.queues.len() {
                if q == self.me {
                    continue;
                }
                if drop {
                    n.dropped += 1;
                } else {
                    let me = self.me;
                    n.queues[q].push_back((me, bytes.to_vec()));
                }
            }
            Ok(())
        }
        fn send_to(&mut self, peer: usize, bytes: &[u8]) -> Result<()> {
            let me = self.me;
            self.net.lock().unwrap().queues[peer].push_back((me, bytes.to_vec()));
            Ok(())
        }
        fn poll<F: FnMut(usize, &[u8])>(&mut self, max: usize, f: &mut F) -> Result<usize> {
            let mut n = 0;
            while n < max {
                let Some((from, d)) = self.net.lock().unwrap().queues[self.me].pop_front() else {
                    break;
                };
                f(from, &d);
                n += 1;
            }
            Ok(n)
        }
        fn dropped(&self) -> u64 {
            0
        }
    }

    #[test]
    fn live_loss_is_recovered_through_the_driver() {
        let net = Arc::new(Mutex::new(Net {
            queues: vec![VecDeque::new(), VecDeque::new()],
            drop_every: 7,
            ..Default::default()
        }));
        let cfg = StreamConfig {
            max_message: 32,
            retransmit_timeout: std::time::Duration::from_millis(1),
            // One datagram in seven lost on its own link is what the
            // lossy-receiver protection throttles; here the driver's
            // recovery is under test.
            lossy_share_percent: 0,
            ..StreamConfig::default()
        };
        let link = |me| SimLink {
            net: net.clone(),
            me,
        };
        let mut p = DatagramPublisher::new("t", &cfg, vec![link(0)]).unwrap();
        let mut s = DatagramSubscriber::new("t", &cfg, vec![link(1)]).unwrap();
        let total = 20_000u64;
        let mut next = 1u64;
        let mut seq = 0u64;
        for round in 0..1_000_000u64 {
            if seq < total {
                seq += 1;
                let b = p.claim(8).unwrap();
                b.copy_from_slice(&seq.to_le_bytes());
                p.commit(8, 0, 0).unwrap();
            }
            if round % 16 == 0 {
                p.service().unwrap();
            }
            s.poll(64, &mut |e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next);
                    assert_eq!(m.payload(), next.to_le_bytes());
                    next += 1;
                }
                other => panic!("unexpected {other:?}"),
            })
            .unwrap();
            if next > total {
                break;
            }
        }
        let c = s.counters();
        assert_eq!(next - 1, total, "{c:?}");
        assert!(net.lock().unwrap().dropped > 0);
        assert!(c.recovered > 0, "{c:?}");
    }
}

#[cfg(test)]
mod udp_tests {
    use super::*;
    use crate::transport::udp::{LineAddr, UdpLink};
    use std::net::{Ipv4Addr, SocketAddrV4};

    /// A UDP line that loses every `every`-th datagram it receives.
    struct Lossy {
        inner: UdpLink,
        every: u64,
        seen: u64,
        lost: u64,
    }

    impl DatagramLink for Lossy {
        type Peer = SocketAddrV4;
        fn max_datagram(&self) -> usize {
            self.inner.max_datagram()
        }
        fn send_group(&mut self, bytes: &[u8]) -> Result<()> {
            self.inner.send_group(bytes)
        }
        fn flush(&mut self) -> Result<()> {
            self.inner.flush()
        }
        fn send_to(&mut self, peer: SocketAddrV4, bytes: &[u8]) -> Result<()> {
            self.inner.send_to(peer, bytes)
        }
        fn poll<F: FnMut(SocketAddrV4, &[u8])>(&mut self, max: usize, f: &mut F) -> Result<usize> {
            let (seen, every, lost) = (&mut self.seen, self.every, &mut self.lost);
            self.inner.poll(max, &mut |peer, b: &[u8]| {
                *seen += 1;
                if *seen % every == 0 {
                    *lost += 1;
                } else {
                    f(peer, b)
                }
            })
        }
        fn dropped(&self) -> u64 {
            self.inner.dropped()
        }
    }

    /// A publisher and a subscriber of stream `name` on loopback group
    /// 239.255.X.9, the subscriber losing every `every`-th datagram.
    fn lossy_pair(
        name: &str,
        x: u8,
        cfg: &StreamConfig,
        every: u64,
    ) -> (DatagramPublisher<UdpLink>, DatagramSubscriber<Lossy>) {
        let line = LineAddr {
            group: SocketAddrV4::new(
                Ipv4Addr::new(239, 255, x, 9),
                20_000 + x as u16 * 100 + (std::process::id() % 20_000) as u16,
            ),
            interface: Ipv4Addr::LOCALHOST,
            ttl: 0,
            loopback: true,
            source: None,
            recv_buffer: crate::config::DEFAULT_RECV_BUFFER,
        };
        let p = DatagramPublisher::new(
            name,
            cfg,
            vec![UdpLink::publisher(name, &line, 1472).unwrap()],
        )
        .unwrap();
        let sub_link = Lossy {
            inner: UdpLink::subscriber(name, &line, 1472).unwrap(),
            every,
            seen: 0,
            lost: 0,
        };
        (
            p,
            DatagramSubscriber::new(name, cfg, vec![sub_link]).unwrap(),
        )
    }

    #[test]
    fn large_messages_are_fragmented_and_a_lost_fragment_recovered() {
        let cfg = StreamConfig {
            max_message: 20_000,
            retransmit_timeout: std::time::Duration::from_millis(2),
            ..StreamConfig::default()
        };
        // A retransmitted message is all of its fragments again; losing
        // one datagram in 53 leaves most retransmissions whole.
        let (mut p, mut s) = lossy_pair("f", 44, &cfg, 53);
        let body = |seq: u64| -> Vec<u8> {
            (0..5_000 + seq as usize * 97)
                .map(|i| (i as u64).wrapping_mul(seq) as u8)
                .collect()
        };
        let total = 100u64;
        let (mut next, mut seq) = (1u64, 0u64);
        for _ in 0..100_000_000u64 {
            if seq < total {
                seq += 1;
                let m = body(seq);
                p.claim(m.len()).unwrap().copy_from_slice(&m);
                p.commit(m.len(), 0, 0).unwrap();
            }
            p.service().unwrap();
            s.poll(64, &mut |e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next);
                    assert!(
                        m.payload() == body(next),
                        "message {next} reassembled wrong"
                    );
                    next += 1;
                }
                other => panic!("unexpected {other:?}"),
            })
            .unwrap();
            if next > total {
                break;
            }
        }
        let c = s.counters();
        assert_eq!(next - 1, total, "{c:?}");
        assert!(c.fragments_received > total, "{c:?}");
        assert!(s.lines[0].lost > 0 && c.recovered > 0, "{c:?}");
    }

    #[test]
    fn a_subscriber_over_its_share_is_told_with_a_sealed_notice_and_reports_gaps() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mdbus-share-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("stream.key");
        std::fs::write(
            &key,
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
        )
        .unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        // With a key the subscriber believes sealed datagrams only: a
        // counted notice is a sealed one.
        let cfg = StreamConfig {
            max_message: 32,
            retransmit_timeout: std::time::Duration::from_millis(2),
            retransmit_retries: 3,
            retransmit_burst: 8,
            lossy_share_percent: 1,
            // Short windows: a notice at each, some of which the lossy
            // line drops too.
            lossy_window: std::time::Duration::from_millis(1),
            key_file: key.display().to_string(),
            ..StreamConfig::default()
        };
        // One datagram in three lost: far over a 1% share.
        let (mut p, mut s) = lossy_pair("share", 45, &cfg, 3);
        let total = 3_000u64;
        let (mut next, mut seq, mut gaps) = (1u64, 0u64, 0u64);
        for _ in 0..100_000_000u64 {
            if seq < total {
                seq += 1;
                p.claim(8).unwrap().copy_from_slice(&seq.to_le_bytes());
                p.commit(8, 0, 0).unwrap();
            }
            p.service().unwrap();
            s.poll(64, &mut |e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next);
                    next += 1;
                }
                Event::Gap { from, to } => {
                    assert_eq!(from, next);
                    gaps += to - from;
                    next = to;
                }
                other => panic!("unexpected {other:?}"),
            })
            .unwrap();
            if next > total {
                break;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        let (pc, sc) = (p.counters(), s.counters());
        assert_eq!(next - 1, total, "{sc:?}");
        assert!(sc.throttled > 0, "{sc:?}");
        assert!(pc.requesters_throttled >= sc.throttled, "{pc:?} {sc:?}");
        assert!(pc.drops.over_budget > 0, "{pc:?}");
        // What it could not get back is reported, never lost silently.
        assert!(gaps > 0 && sc.unrecoverable == gaps, "{sc:?}");
    }

    #[test]
    fn loss_on_a_real_udp_line_is_recovered() {
        let cfg = StreamConfig {
            max_message: 32,
            autoflush: false,
            retransmit_timeout: std::time::Duration::from_millis(2),
            ..StreamConfig::default()
        };
        let (mut p, mut s) = lossy_pair("t", 43, &cfg, 13);
        let total = 100_000u64;
        let (mut next, mut seq) = (1u64, 0u64);
        for _ in 0..100_000_000u64 {
            for _ in 0..20 {
                if seq < total {
                    seq += 1;
                    let b = p.claim(8).unwrap();
                    b.copy_from_slice(&seq.to_le_bytes());
                    p.commit(8, 0, 0).unwrap();
                }
            }
            p.flush().unwrap();
            p.service().unwrap();
            s.poll(256, &mut |e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next);
                    next += 1;
                }
                other => panic!("unexpected {other:?}"),
            })
            .unwrap();
            if next > total {
                break;
            }
        }
        let c = s.counters();
        assert_eq!(next - 1, total, "{c:?} {:?}", p.counters());
        assert!(s.lines[0].lost > 0);
        assert!(c.recovered > 0, "{c:?}");
    }

    #[test]
    fn a_window_smaller_than_the_send_batch_never_sends_overwritten_bytes() {
        // 32 messages of 32 bytes retained: the window (1 792 bytes) holds
        // 32 messages with their headers, little more than one datagram
        // (25), while the line queues up to 32 datagrams that point into
        // it until a flush.
        let cfg = StreamConfig {
            max_message: 32,
            capacity: 32,
            autoflush: false,
            ..StreamConfig::default()
        };
        let (mut p, mut s) = lossy_pair("w", 46, &cfg, u64::MAX);
        assert!(p.gather);
        let body = |seq: u64| -> [u8; 32] {
            let mut b = [0u8; 32];
            for (i, x) in b.iter_mut().enumerate() {
                *x = (seq as u8).wrapping_mul(31) ^ i as u8;
            }
            b
        };
        let total = 3_000u64;
        let mut next = 1u64;
        let take = |s: &mut DatagramSubscriber<Lossy>, next: &mut u64| {
            s.poll(256, &mut |e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), *next);
                    assert_eq!(m.payload(), body(*next), "message {next}");
                    *next += 1;
                }
                other => panic!("unexpected {other:?} at {next}"),
            })
            .unwrap();
        };
        for seq in 1..=total {
            p.claim(32).unwrap().copy_from_slice(&body(seq));
            p.commit(32, 0, 0).unwrap();
            take(&mut s, &mut next);
        }
        p.flush().unwrap();
        for _ in 0..1_000_000 {
            take(&mut s, &mut next);
            if next > total {
                break;
            }
        }
        assert_eq!(next - 1, total, "{:?}", s.counters());
        assert_eq!(s.counters().recovered, 0);
    }
}
