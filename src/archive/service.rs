//! The replay service: serves a stream's archive to requesters over the
//! bus's own session transport, so a subscriber that cannot see the
//! recorder's files can still replay then join live (docs/ARCHIVE.md).
//!
//! One thread accepts on the session name, one thread per requester
//! reads the archive and sends; neither touches the recorder or the live
//! stream (the archive is read from its files, read-only). Each requester
//! is held to `replay_rate_limit` messages a second (a token bucket) and
//! at most `replay_max_requesters` are served at once; more are refused
//! with an error naming the limit.
//!
//! The protocol (little-endian, one session message each):
//! - request, requester to service: `[1, version, 0, 0, id: u32, from:
//!   u64]` (16 bytes): everything from sequence `from`, tagged `id`; a
//!   new request replaces the previous one. Version 2 asks for the
//!   archive's publisher epoch too; a version-1 request is still served,
//!   without it.
//! - items: `[1, 0, 0, 0, id: u32]` then as many entries as fit the
//!   session's `max_message`, each a 32-byte header `[kind: u8, 0, 0, 0,
//!   len: u32, a: u64, b: u64, flags: u32, 0: u32]` and `len` payload
//!   bytes: kind 1 a record (`a` its sequence, `b` its timestamp), kind 2
//!   a gap (`a..b` is not in the archive, `len` 0), kind 3 the publisher
//!   epoch of the records that follow (`a`, nonzero; `len` 0), sent alone
//!   in a message before the first record of a version-2 request once
//!   the archive knows it. Packing many records
//!   in one message makes a session that sends each message at once
//!   (tcp) carry a replay at full speed.
//! - error: `[3, 0, 0, 0, id: u32, reason: UTF-8]`; the service then
//!   closes the session.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{ArchiveError, ArchiveReader, Item, ReaderStats};
use crate::counters::registry::{Role, Slots};
use crate::message::Message;
use crate::{Bus, Error, Session};

const KIND_REQUEST: u8 = 1;
/// The request version a requester sends: 2, which also asks for the
/// archive's epoch. Version 1 (no epoch) is still served.
const VERSION: u8 = 2;
const VERSION_EPOCH: u8 = 2;
const REQUEST_LEN: usize = 16;
const KIND_ITEMS: u8 = 1;
const KIND_ERROR: u8 = 3;
const ENTRY_RECORD: u8 = 1;
const ENTRY_GAP: u8 = 2;
const ENTRY_EPOCH: u8 = 3;
/// Bytes of an items message before its entries.
const ITEMS_HEADER: usize = 8;
/// Bytes of an entry before its payload.
const ENTRY_HEADER: usize = 32;
/// What a replay service adds to a record: the session's `max_message`
/// must be at least the stream's plus this.
pub const REPLAY_OVERHEAD: usize = ITEMS_HEADER + ENTRY_HEADER;

/// Idle wait of a requester's thread when the archive has nothing new or
/// the requester has no room (a service thread, off every hot path).
const IDLE: Duration = Duration::from_micros(200);

/// Counters of a replay service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// Requesters accepted and served (refused ones not counted).
    pub requesters: u64,
    /// Valid requests served (a requester seeking again counts again).
    pub requests: u64,
    /// Requesters being served now.
    pub active: u64,
    /// Requesters refused because `replay_max_requesters` were served.
    pub refused: u64,
    /// Requests dropped as malformed (wrong size, kind or version, `from`
    /// 0): the requester got an error naming why.
    pub bad_requests: u64,
    /// Times a requester's sending waited for its rate limit.
    pub throttled: u64,
    /// Record messages replayed, all requesters.
    pub messages: u64,
    /// Payload bytes replayed.
    pub bytes: u64,
    /// Gap messages sent.
    pub gaps: u64,
    /// Requesters ended by an error of the archive or the session.
    pub errors: u64,
}

#[derive(Debug, Default)]
struct Shared {
    requesters: AtomicU64,
    requests: AtomicU64,
    active: AtomicUsize,
    refused: AtomicU64,
    bad_requests: AtomicU64,
    throttled: AtomicU64,
    messages: AtomicU64,
    bytes: AtomicU64,
    gaps: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
    /// Its slots in the bus's counters file (`replay.STREAM.`), if any.
    slots: Option<Slots>,
}

impl Shared {
    /// Copies the counters into the counters file, for mdbus-stat: each
    /// time the acceptor looks for a requester (at least once per
    /// session `connect_timeout`) and when a requester leaves.
    fn mirror(&self) {
        let Some(slots) = &self.slots else { return };
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        slots.set_after_open(&[
            l(&self.requesters),
            l(&self.requests),
            self.active.load(Ordering::Relaxed) as u64,
            l(&self.refused),
            l(&self.bad_requests),
            l(&self.throttled),
            l(&self.messages),
            l(&self.bytes),
            l(&self.gaps),
            l(&self.errors),
        ]);
    }
}

/// What a service is configured with (from the stream's archive section).
#[derive(Debug, Clone)]
struct Settings {
    dir: PathBuf,
    /// The stream's `max_message`: an entry of this size must fit before
    /// another item is read into a message.
    stream_max: usize,
    session: String,
    rate: u64,
    max_requesters: usize,
}

/// A running replay service of one stream. Dropping it stops accepting
/// (within the session's `connect_timeout`) and ends every requester.
#[derive(Debug)]
pub struct ReplayService {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl ReplayService {
    /// Serves the archive of stream `name` of `bus` on the session named
    /// by its `replay_service` key, with its `replay_rate_limit` and
    /// `replay_max_requesters`.
    pub fn start(bus: &Bus, name: &str) -> crate::Result<ReplayService> {
        let a = super::configured(bus, name, "to serve")?;
        let key = format!("streams.{name}.archive");
        let missing = |k: &str, why: &str| {
            Error::Config(crate::error::ConfigError::new(
                "<configuration>",
                format!("{key}.{k}"),
                why.to_string(),
            ))
        };
        if a.dir.as_os_str().is_empty() {
            return Err(missing(
                "dir",
                "must be set: the service reads the archive there",
            ));
        }
        if a.replay_service.is_empty() {
            return Err(missing(
                "replay_service",
                "must be set: the session name the service accepts on",
            ));
        }
        let settings = Settings {
            dir: a.dir.clone(),
            stream_max: bus.config().stream(name).max_message,
            session: a.replay_service.clone(),
            rate: a.replay_rate_limit,
            max_requesters: a.replay_max_requesters,
        };
        let shared = Arc::new(Shared {
            slots: bus.slots(Role::ReplayService, name),
            ..Shared::default()
        });
        let bus = bus.clone();
        let sh = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("mdbus-replay-{name}"))
            .spawn(move || accept_loop(&bus, &settings, &sh))
            .map_err(|e| Error::io("start a thread for", "the replay service", e))?;
        Ok(ReplayService {
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ServiceStats {
        let s = &self.shared;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServiceStats {
            requesters: l(&s.requesters),
            requests: l(&s.requests),
            active: s.active.load(Ordering::Relaxed) as u64,
            refused: l(&s.refused),
            bad_requests: l(&s.bad_requests),
            throttled: l(&s.throttled),
            messages: l(&s.messages),
            bytes: l(&s.bytes),
            gaps: l(&s.gaps),
            errors: l(&s.errors),
        }
    }
}

impl Drop for ReplayService {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(bus: &Bus, s: &Settings, shared: &Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        shared.mirror();
        workers.retain(|w| !w.is_finished());
        let mut session = match bus.session_accept(&s.session) {
            Ok(x) => x,
            Err(Error::Timeout { .. }) => continue,
            Err(e) => {
                log::warn!("replay service `{}`: {e}", s.session);
                // Control plane: not spinning on a persistent failure.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        // The next requester can connect while this one is served.
        session.release_name();
        if shared.active.load(Ordering::Acquire) >= s.max_requesters {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            let reason = format!(
                "replay service `{}` is busy: {} requesters are being served (replay_max_requesters)",
                s.session, s.max_requesters
            );
            let _ = send_error(&mut session, 0, &reason);
            session.close();
            continue;
        }
        shared.active.fetch_add(1, Ordering::AcqRel);
        shared.requesters.fetch_add(1, Ordering::Relaxed);
        let (s2, sh) = (s.clone(), shared.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("mdbus-replay-{}", s.session))
            .spawn(move || {
                let mut w = Worker::new(s2, sh.clone());
                if let Err(e) = w.run(&mut session) {
                    if !matches!(e, Error::PeerClosed { .. } | Error::PeerDied { .. }) {
                        sh.errors.fetch_add(1, Ordering::Relaxed);
                        log::warn!("replay service: {e}");
                    }
                }
                session.close();
                sh.active.fetch_sub(1, Ordering::AcqRel);
                sh.mirror();
            });
        match spawned {
            Ok(w) => workers.push(w),
            Err(e) => {
                shared.active.fetch_sub(1, Ordering::AcqRel);
                shared.errors.fetch_add(1, Ordering::Relaxed);
                log::warn!("replay service `{}`: no thread: {e}", s.session);
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    shared.mirror();
}

fn send_error(session: &mut Session, id: u32, reason: &str) -> crate::Result<()> {
    let max = session.max_message();
    let text = &reason.as_bytes()[..reason.len().min(max.saturating_sub(8))];
    let mut m = vec![0u8; 8 + text.len()];
    m[0] = KIND_ERROR;
    m[4..8].copy_from_slice(&id.to_le_bytes());
    m[8..].copy_from_slice(text);
    session.send(&m).map(|_| ())
}

/// Messages a second, in a bucket holding a twentieth of a second's worth.
#[derive(Debug)]
struct TokenBucket {
    rate: u64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: u64) -> TokenBucket {
        let burst = (rate as f64 / 20.0).max(1.0);
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token if there is one; 0 `rate`: no limit.
    fn take(&mut self) -> bool {
        if self.rate == 0 {
            return true;
        }
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate as f64).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until the next token.
    fn wait(&self) -> Duration {
        Duration::from_secs_f64(((1.0 - self.tokens) / self.rate.max(1) as f64).max(0.0))
    }
}

/// One requester's thread.
struct Worker {
    s: Settings,
    shared: Arc<Shared>,
    reader: Option<ArchiveReader>,
    /// The request being served (0: none).
    id: u32,
    /// The archive's epoch was sent for this request (or is not asked for).
    epoch_sent: bool,
    bucket: TokenBucket,
}

enum Request {
    From { id: u32, from: u64, version: u8 },
    Bad { id: u32, reason: String },
}

fn parse_request(b: &[u8]) -> Request {
    let id = b
        .get(4..8)
        .map(|x| u32::from_le_bytes(x.try_into().expect("4 bytes")))
        .unwrap_or(0);
    if b.len() != REQUEST_LEN {
        return Request::Bad {
            id,
            reason: format!(
                "a request is {REQUEST_LEN} bytes, this one {} bytes",
                b.len()
            ),
        };
    }
    if b[0] != KIND_REQUEST || !(1..=VERSION).contains(&b[1]) {
        return Request::Bad {
            id,
            reason: format!(
                "unknown request kind {} version {}: this service knows kind {KIND_REQUEST} versions 1 to {VERSION}",
                b[0], b[1]
            ),
        };
    }
    let from = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    if from == 0 || id == 0 {
        return Request::Bad {
            id,
            reason: "sequence numbers and request ids start at 1, this request has 0".into(),
        };
    }
    Request::From {
        id,
        from,
        version: b[1],
    }
}

impl Worker {
    fn new(s: Settings, shared: Arc<Shared>) -> Worker {
        let bucket = TokenBucket::new(s.rate);
        Worker {
            s,
            shared,
            reader: None,
            id: 0,
            epoch_sent: false,
            bucket,
        }
    }

    fn run(&mut self, session: &mut Session) -> crate::Result<()> {
        let max = session.max_message();
        while !self.shared.stop.load(Ordering::Acquire) {
            let mut req = None;
            session.poll(|m| {
                // A later request replaces an earlier one, but never hides
                // a bad one.
                if !matches!(req, Some(Request::Bad { .. })) {
                    req = Some(parse_request(m.payload()));
                }
            })?;
            match req {
                Some(Request::Bad { id, reason }) => {
                    self.shared.bad_requests.fetch_add(1, Ordering::Relaxed);
                    let reason =
                        format!("replay service `{}`: bad request: {reason}", self.s.session);
                    send_error(session, id, &reason)?;
                    return Ok(());
                }
                Some(Request::From { id, from, version }) => {
                    if self.reader.is_none() {
                        match ArchiveReader::open(&self.s.dir) {
                            Ok(r) => self.reader = Some(r),
                            Err(e) => {
                                send_error(session, id, &e.to_string())?;
                                return Err(e.into());
                            }
                        }
                    }
                    let r = self.reader.as_mut().expect("opened above");
                    r.seek(from)?;
                    self.id = id;
                    self.epoch_sent = version < VERSION_EPOCH;
                    self.shared.requests.fetch_add(1, Ordering::Relaxed);
                }
                None => {}
            }
            if self.id == 0 {
                // The session's own wait, not a plain sleep: it checks the
                // peer's liveness before sleeping (an RC session counts
                // empty polls otherwise, which sleeps would stretch).
                session.wait_for_data(IDLE)?;
                continue;
            }
            // A burst, then back to the requester's messages.
            for _ in 0..64 {
                match self.send_items(session, max)? {
                    Sent::Full => {}
                    Sent::Throttled => {
                        self.shared.throttled.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(self.bucket.wait().min(Duration::from_millis(10)));
                        break;
                    }
                    Sent::Idle => {
                        session.wait_for_data(IDLE)?;
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends one message of as many items as fit, the rate limit allows
    /// and the archive has now.
    fn send_items(&mut self, session: &mut Session, max: usize) -> crate::Result<Sent> {
        let reader = self.reader.as_mut().expect("a request opened it");
        if !self.epoch_sent {
            // Before the first record: whose sequences they are. An
            // archive that does not know yet (empty, or format version 1)
            // is asked again before the next message.
            if let Some(epoch) = reader.epoch()? {
                let Some(mut c) = session.try_claim(ITEMS_HEADER + ENTRY_HEADER)? else {
                    return Ok(Sent::Idle);
                };
                c[..4].copy_from_slice(&[KIND_ITEMS, 0, 0, 0]);
                c[4..8].copy_from_slice(&self.id.to_le_bytes());
                let e = &mut c[ITEMS_HEADER..ITEMS_HEADER + ENTRY_HEADER];
                e.fill(0);
                e[0] = ENTRY_EPOCH;
                e[8..16].copy_from_slice(&epoch.to_le_bytes());
                c.truncate(ITEMS_HEADER + ENTRY_HEADER);
                c.commit()?;
                self.epoch_sent = true;
                return Ok(Sent::Full);
            }
        }
        let Some(mut c) = session.try_claim(max)? else {
            return Ok(Sent::Idle);
        };
        c[..4].copy_from_slice(&[KIND_ITEMS, 0, 0, 0]);
        c[4..8].copy_from_slice(&self.id.to_le_bytes());
        let mut at = ITEMS_HEADER;
        let (mut records, mut bytes, mut gaps) = (0u64, 0u64, 0u64);
        let mut how = Sent::Full;
        while at + ENTRY_HEADER + self.s.stream_max <= max {
            if !self.bucket.take() {
                how = Sent::Throttled;
                break;
            }
            let (kind, a, b, flags, payload) = match reader.next_item()? {
                None => {
                    // The token is given back.
                    self.bucket.tokens += 1.0;
                    how = Sent::Idle;
                    break;
                }
                Some(Item::Message(m)) => (ENTRY_RECORD, m.seq, m.timestamp, m.flags, m.payload),
                Some(Item::Gap { from, to }) => (ENTRY_GAP, from, to, 0, &[][..]),
            };
            let end = at + ENTRY_HEADER + payload.len();
            if end > max {
                // Larger than the stream's max_message allows (written
                // under another configuration).
                if at > ITEMS_HEADER {
                    self.bucket.tokens += 1.0;
                    reader.seek(a)?;
                    break;
                }
                let reason = format!(
                    "replay service `{}`: sequence {a} has {} bytes, more than the session's max_message {max} less {REPLAY_OVERHEAD}",
                    self.s.session,
                    payload.len()
                );
                send_error(session, self.id, &reason)?;
                return Err(Error::MessageTooLarge {
                    len: payload.len() + REPLAY_OVERHEAD,
                    max,
                    channel: format!("session `{}`", self.s.session),
                });
            }
            let e = &mut c[at..end];
            e[..4].copy_from_slice(&[kind, 0, 0, 0]);
            e[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
            e[8..16].copy_from_slice(&a.to_le_bytes());
            e[16..24].copy_from_slice(&b.to_le_bytes());
            e[24..28].copy_from_slice(&flags.to_le_bytes());
            e[28..32].fill(0);
            e[ENTRY_HEADER..].copy_from_slice(payload);
            at = end;
            if kind == ENTRY_RECORD {
                records += 1;
                bytes += payload.len() as u64;
            } else {
                gaps += 1;
            }
        }
        if at == ITEMS_HEADER {
            // Nothing to send: the claim is left uncommitted.
            return Ok(how);
        }
        c.truncate(at);
        c.commit()?;
        self.shared.messages.fetch_add(records, Ordering::Relaxed);
        self.shared.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.shared.gaps.fetch_add(gaps, Ordering::Relaxed);
        Ok(how)
    }
}

/// How a message of items ended.
enum Sent {
    /// Full: more may follow at once.
    Full,
    /// The rate limit ran out.
    Throttled,
    /// The archive has nothing more now, or the requester no room.
    Idle,
}

/// The requester's end: the archive as a replay service sends it.
#[derive(Debug)]
pub struct RemoteSource {
    bus: Bus,
    /// None while paused (the subscriber is on the live stream).
    session: Option<Session>,
    service: String,
    /// The request being answered; older answers are dropped.
    id: u32,
    /// Sequence the next item starts at.
    want: u64,
    /// Received, not yet returned messages.
    queue: VecDeque<Vec<u8>>,
    /// Buffers to reuse.
    free: Vec<Vec<u8>>,
    /// The message the last item borrows.
    cur: Vec<u8>,
    /// Where the next entry of `cur` starts.
    at: usize,
    /// The archive's publisher epoch, as the service said for the
    /// request being answered.
    epoch: Option<u64>,
    stats: ReaderStats,
}

impl RemoteSource {
    /// Connects to the replay service on session `service`, retrying
    /// while it is between two requesters, up to the session's
    /// `connect_timeout`.
    pub fn connect(bus: &Bus, service: &str) -> crate::Result<RemoteSource> {
        Ok(RemoteSource {
            bus: bus.clone(),
            session: Some(Self::session(bus, service)?),
            service: service.into(),
            id: 0,
            want: 1,
            queue: VecDeque::new(),
            free: Vec::new(),
            cur: Vec::new(),
            at: 0,
            epoch: None,
            stats: ReaderStats::default(),
        })
    }

    fn session(bus: &Bus, service: &str) -> crate::Result<Session> {
        let timeout = bus.config().session(service).connect_timeout;
        let deadline = Instant::now() + timeout;
        let session = loop {
            match bus.session_connect(service) {
                Ok(s) => break s,
                // Another requester took the name first (shm), or the
                // service closed its listener as we connected (tcp).
                Err(e) if Instant::now() < deadline && !matches!(e, Error::Config(_)) => {
                    // Control plane: waiting for the service's next accept.
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
        };
        Ok(session)
    }

    /// Ends the session, freeing the service's requester slot; the next
    /// `seek` connects again.
    pub fn pause(&mut self) {
        if let Some(s) = self.session.take() {
            s.close();
        }
        self.at = self.cur.len();
        // No position: whoever resumes must seek.
        self.want = 0;
        while let Some(b) = self.queue.pop_front() {
            self.free.push(b);
        }
    }

    /// Counters (records and gaps received).
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// Sequence the next item starts at; 0 while paused.
    pub fn position(&self) -> u64 {
        self.want
    }

    /// The publisher epoch of the archive's records, once the service has
    /// said it for the request being answered (`None` before, or from a
    /// service whose archive does not record it).
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    fn remote(&self, reason: String) -> ArchiveError {
        ArchiveError::Remote {
            service: self.service.clone(),
            reason,
        }
    }

    /// Asks for everything from `seq`; answers to earlier requests still
    /// in flight are dropped.
    pub fn seek(&mut self, seq: u64) -> Result<(), ArchiveError> {
        self.want = seq.max(1);
        self.id = self.id.wrapping_add(1).max(1);
        self.epoch = None;
        let mut m = [0u8; REQUEST_LEN];
        m[0] = KIND_REQUEST;
        m[1] = VERSION;
        m[4..8].copy_from_slice(&self.id.to_le_bytes());
        m[8..16].copy_from_slice(&self.want.to_le_bytes());
        while let Some(b) = self.queue.pop_front() {
            self.free.push(b);
        }
        self.at = self.cur.len();
        if self.session.is_none() {
            let s =
                Self::session(&self.bus, &self.service).map_err(|e| self.remote(e.to_string()))?;
            self.session = Some(s);
        }
        let sent = self.session.as_mut().expect("connected above").send(&m);
        sent.map_err(|e| self.remote(e.to_string()))?;
        Ok(())
    }

    /// The next item received, or None when none has arrived yet. An
    /// epoch the service announces is taken (see [`epoch`](Self::epoch))
    /// and answered with None, so that the caller looks at it before the
    /// records that follow it.
    pub fn next_item(&mut self) -> Result<Option<Item<'_>>, ArchiveError> {
        loop {
            if self.at < self.cur.len() {
                return self.entry();
            }
            if self.queue.is_empty() {
                let (queue, free) = (&mut self.queue, &mut self.free);
                let Some(session) = self.session.as_mut() else {
                    return Ok(None);
                };
                let got = session.poll(|m: Message<'_>| {
                    let mut b = free.pop().unwrap_or_default();
                    b.clear();
                    b.extend_from_slice(m.payload);
                    queue.push_back(b);
                });
                if let Err(e) = got {
                    return Err(self.remote(e.to_string()));
                }
            }
            let Some(b) = self.queue.pop_front() else {
                return Ok(None);
            };
            let old = std::mem::replace(&mut self.cur, b);
            self.free.push(old);
            let b = &self.cur;
            if b.len() < ITEMS_HEADER {
                return Err(self.remote(format!("a {}-byte message: too short", b.len())));
            }
            let id = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
            match b[0] {
                KIND_ERROR => {
                    let text = String::from_utf8_lossy(&b[8..]).into_owned();
                    return Err(self.remote(text));
                }
                // An answer to an earlier request: dropped.
                KIND_ITEMS if id != self.id => self.at = self.cur.len(),
                KIND_ITEMS => self.at = ITEMS_HEADER,
                k => {
                    return Err(self.remote(format!(
                        "a {}-byte message of kind {k}: not items or an error",
                        b.len()
                    )))
                }
            }
        }
    }

    /// The entry of `cur` at `at`, checked.
    fn entry(&mut self) -> Result<Option<Item<'_>>, ArchiveError> {
        let b = &self.cur;
        let at = self.at;
        let Some(h) = b.get(at..at + ENTRY_HEADER) else {
            return Err(self.remote(format!(
                "an entry at byte {at} of a {}-byte message is cut short",
                b.len()
            )));
        };
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")) as usize;
        let (kind, a, bb) = (h[0], u64_at(8), u64_at(16));
        let flags = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes"));
        let end = at + ENTRY_HEADER + len;
        if end > b.len() {
            return Err(self.remote(format!(
                "an entry of {len} bytes at byte {at} of a {}-byte message",
                b.len()
            )));
        }
        match kind {
            ENTRY_RECORD => {
                if a != self.want {
                    // A skipped range comes as a gap, never silently.
                    return Err(self.remote(format!(
                        "sequence {a} sent when {} was next: records follow each other, a missing range is a gap",
                        self.want
                    )));
                }
                self.want = a + 1;
                self.at = end;
                self.stats.records += 1;
                Ok(Some(Item::Message(Message {
                    seq: a,
                    flags,
                    timestamp: bb,
                    payload: &self.cur[end - len..end],
                })))
            }
            ENTRY_GAP if len == 0 && a == self.want && bb > a => {
                self.want = bb;
                self.at = end;
                self.stats.gaps += 1;
                Ok(Some(Item::Gap { from: a, to: bb }))
            }
            ENTRY_GAP => Err(self.remote(format!(
                "a gap {a}..{bb} ({len} bytes) when {} was next",
                self.want
            ))),
            ENTRY_EPOCH if len == 0 && a != 0 => {
                self.epoch = Some(a);
                self.at = end;
                Ok(None)
            }
            ENTRY_EPOCH => Err(self.remote(format!(
                "an epoch entry of {len} bytes naming epoch {a}: an epoch is nonzero and has no payload"
            ))),
            k => Err(self.remote(format!("an entry of unknown kind {k}"))),
        }
    }
}

/// Where a replay reads the archive: its directory, or a replay service.
#[derive(Debug)]
pub enum ReplaySource {
    /// The recorder's files, read directly.
    Local(ArchiveReader),
    /// A [`ReplayService`] over a session.
    Remote(Box<RemoteSource>),
}

impl ReplaySource {
    /// Positions the source so that the next item starts at `seq`.
    pub fn seek(&mut self, seq: u64) -> Result<(), ArchiveError> {
        match self {
            ReplaySource::Local(r) => r.seek(seq),
            ReplaySource::Remote(r) => r.seek(seq),
        }
    }

    /// The next item, or None when there is none now.
    pub fn next_item(&mut self) -> Result<Option<Item<'_>>, ArchiveError> {
        match self {
            ReplaySource::Local(r) => r.next_item(),
            ReplaySource::Remote(r) => r.next_item(),
        }
    }

    /// The publisher epoch of what the next item comes from, when the
    /// source tells it: the directory's segments do (format version 2), a
    /// replay service says it before its first record.
    pub fn epoch(&mut self) -> Result<Option<u64>, ArchiveError> {
        match self {
            ReplaySource::Local(r) => r.epoch(),
            ReplaySource::Remote(r) => Ok(r.epoch()),
        }
    }

    /// Sequence the next item starts at.
    pub fn position(&self) -> u64 {
        match self {
            ReplaySource::Local(r) => r.position(),
            ReplaySource::Remote(r) => r.position(),
        }
    }

    /// The replay has joined the live stream: a remote source frees its
    /// service until it is needed again (a `seek`).
    pub fn pause(&mut self) {
        if let ReplaySource::Remote(r) = self {
            r.pause();
        }
    }

    /// Counters.
    pub fn stats(&self) -> ReaderStats {
        match self {
            ReplaySource::Local(r) => r.stats(),
            ReplaySource::Remote(r) => r.stats(),
        }
    }
}
