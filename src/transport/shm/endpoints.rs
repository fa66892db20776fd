//! Stream and session endpoints over shared-memory segments.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::broadcast::{Read, Reader, RingRef, Writer, BUSY};
use super::doorbell::{Doorbell, Registration, Woke};
use super::lossless::{Gate, LosslessCounters, Member};
use super::segment::{self, Geometry, Kind, Segment};
use super::spsc::{Consumer, PeekError, Producer};
use super::{slot_size, CHECK_EVERY};
use crate::config::{LateJoin, SessionConfig, ShmConfig, StreamConfig};
use crate::error::{Error, Result};
use crate::message::{Event, Message};
use crate::transport::{SessionEnd, StreamReceive, StreamSend};

fn ring_of(seg: &Segment, r: usize) -> RingRef {
    let f = seg.fields();
    RingRef {
        slots: seg.slots(r),
        mask: f.capacity - 1,
        words_per_slot: f.slot_size as usize / 8,
    }
}

/// A ring word holds a value its writer cannot have written: the segment
/// is corrupt, or another process with access to it is hostile.
#[cold]
fn hostile(channel: String, seg: &Segment, reason: String) -> Error {
    Error::Protocol {
        channel,
        peer: format!("the segment {}", seg.path().display()),
        reason,
    }
}

/// Checks, before creating it, that the segment fits the free space of
/// `shm.dir` (configuration load checks the listed channels; this one
/// covers every channel, at the time it is created).
fn check_space(shm: &ShmConfig, name: &str, geo: &Geometry) -> Result<()> {
    let (kind, section) = match geo.kind {
        Kind::Stream => ("stream", "streams"),
        Kind::Session => ("session", "sessions"),
    };
    let how = format!(
        "the segment of {kind} `{name}` ({} slots of {} bytes)",
        geo.capacity, geo.slot_size
    );
    crate::config::check_shm_space(
        shm,
        &format!("{kind} `{name}`"),
        &[(kind, name.into(), geo.total_len() as u64)],
        &format!("{section}.{name}.capacity"),
        &how,
    )?;
    Ok(())
}

/// Opens `kind` `name`, waiting up to `timeout` for it to appear.
fn open_waiting(cfg: &ShmConfig, kind: Kind, name: &str, timeout: Duration) -> Result<Segment> {
    let deadline = Instant::now() + timeout;
    loop {
        let path = segment::lookup_path(cfg, kind, name);
        match Segment::open(&path, kind) {
            Ok(seg) => return Ok(seg),
            Err(Error::Io { ref source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline =>
            {
                // Control plane: a peer that has not started yet.
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(Error::Io { ref source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let what = match kind {
                    Kind::Stream => "stream",
                    Kind::Session => "session",
                };
                return Err(Error::NotFound {
                    channel: format!("{what} `{name}`"),
                });
            }
            Err(e) => return Err(e),
        }
    }
}

/// Publisher of a shared-memory stream.
#[derive(Debug)]
pub struct ShmPublisher {
    writer: Writer,
    /// Wakes subscribers that sleep (adaptive waiting).
    doorbell: Doorbell,
    max_message: usize,
    name: String,
    // Declared last: dropped after the writer that points into it.
    seg: Segment,
    /// Waits for lossless subscribers (holds no pointers into `seg`).
    gate: Gate,
}

/// Creates the segment of a stream or session of `capacity` slots of
/// `max_message` bytes (replacing a stale one), once there is room for it.
fn create_segment(
    shm: &ShmConfig,
    name: &str,
    kind: Kind,
    max_message: usize,
    capacity: usize,
) -> Result<Segment> {
    let geo = Geometry {
        kind,
        slot_size: slot_size(max_message),
        capacity,
    };
    check_space(shm, name, &geo)?;
    Segment::create(shm, name, geo)
}

impl ShmPublisher {
    /// Creates the stream's segment (replacing a stale one).
    pub fn create(shm: &ShmConfig, name: &str, cfg: &StreamConfig) -> Result<ShmPublisher> {
        let seg = create_segment(shm, name, Kind::Stream, cfg.max_message, cfg.capacity)?;
        let ring = ring_of(&seg, 0);
        // SAFETY: the ring and its tail word live in `seg`, which outlives
        // the writer (field order); we created the segment, so we are its
        // only writer.
        let writer = unsafe { Writer::new(ring, seg.producer_word(0)) };
        let doorbell = seg.doorbell();
        Ok(ShmPublisher {
            writer,
            doorbell,
            max_message: cfg.max_message,
            name: name.into(),
            gate: Gate::new(cfg.capacity as u64, cfg.lossless_timeout),
            seg,
        })
    }

    /// What waiting for lossless subscribers cost so far.
    pub fn lossless_counters(&self) -> LosslessCounters {
        self.gate.counters()
    }

    /// The segment's epoch.
    pub fn epoch(&self) -> u64 {
        self.seg.fields().epoch
    }
}

impl StreamSend for ShmPublisher {
    #[inline]
    fn max_message(&self) -> usize {
        self.max_message
    }

    #[inline]
    fn next_seq(&self) -> u64 {
        self.writer.next_seq()
    }

    // Always, as `commit`: the relay's per-message path
    // (`Publisher::publish_in_run`) otherwise pays a call per message.
    #[inline(always)]
    fn claim(&mut self, len: usize) -> Result<&mut [u8]> {
        if len > self.max_message {
            return Err(self.too_large(len));
        }
        self.gate.admit(&self.seg, self.writer.next_seq());
        let p = self.writer.claim();
        // SAFETY: the claimed slot's payload holds max_payload >= max_message
        // >= len bytes; while claimed only this writer stores to it, and the
        // slice borrows `self`, so it cannot outlive the mapping.
        Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) })
    }

    // Always: left to the compiler, this stayed a call of about 36
    // instructions per message on the relay's path, a third of them the
    // call itself.
    #[inline(always)]
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64> {
        if len > self.max_message {
            return Err(self.too_large(len));
        }
        let seq = self.writer.commit(len as u32, flags, timestamp);
        self.doorbell.ring();
        Ok(seq)
    }
}

impl ShmPublisher {
    #[cold]
    fn too_large(&self, len: usize) -> Error {
        Error::MessageTooLarge {
            len,
            max: self.max_message,
            channel: format!("stream `{}`", self.name),
        }
    }
}

impl Drop for ShmPublisher {
    fn drop(&mut self) {
        // Release: every message committed before it is visible to a reader
        // that acquires the flag.
        self.seg.owner_closed().store(1, Ordering::Release);
        // Sleeping subscribers learn of the end now, not at their timeout
        // (fenced: one registering this instant must see it too).
        self.doorbell.ring_fenced();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Live,
    /// Reported down or ended; waiting for a new incarnation.
    Down,
}

/// Subscriber of a shared-memory stream.
#[derive(Debug)]
pub struct ShmSubscriber {
    reader: Reader,
    buf: Vec<u8>,
    idle: u32,
    state: Liveness,
    /// The position at the last liveness check that found the publisher
    /// gone with messages still undrained; the same position at the next
    /// check means they can never be read.
    undrained_at: Option<u64>,
    shm: ShmConfig,
    name: String,
    // Declared last: dropped after the reader that points into it.
    seg: Segment,
    /// This subscriber's lossless record, when `lossless = true` (an
    /// index into `seg`, no pointer).
    lossless: Option<Member>,
    /// Counted among the doorbell's sleepers since its first sleep, so the
    /// publisher fences only while such a subscriber exists.
    sleeper: Registration,
}

impl ShmSubscriber {
    /// Attaches to the stream, waiting up to `shm.attach_timeout` for its
    /// publisher to create it.
    pub fn attach(shm: &ShmConfig, name: &str, cfg: &StreamConfig) -> Result<ShmSubscriber> {
        let seg = open_waiting(shm, Kind::Stream, name, shm.attach_timeout)?;
        let (reader, buf) = Self::reader_for(&seg, cfg.late_join, name)?;
        let lossless = match cfg.lossless {
            true => Some(Self::join(&seg, reader.position(), name)?),
            false => None,
        };
        Ok(ShmSubscriber {
            reader,
            buf,
            idle: 0,
            state: Liveness::Live,
            undrained_at: None,
            shm: shm.clone(),
            name: name.into(),
            seg,
            lossless,
            sleeper: Registration::default(),
        })
    }

    /// Takes a lossless record in `seg`, starting at `position`.
    fn join(seg: &Segment, position: u64, name: &str) -> Result<Member> {
        Member::join(seg, position).ok_or_else(|| {
            Error::io(
                "join as a lossless subscriber of stream",
                format!("`{name}` ({})", seg.path().display()),
                std::io::Error::other(format!(
                    "all {} lossless subscriber records are held by live processes",
                    segment::LOSSLESS_RECORDS
                )),
            )
        })
    }

    fn reader_for(seg: &Segment, late_join: LateJoin, name: &str) -> Result<(Reader, Vec<u8>)> {
        let ring = ring_of(seg, 0);
        // SAFETY: ring and tail live in `seg`, which the subscriber keeps
        // alive longer than the reader (field order, and replaced together).
        let mut reader = unsafe { Reader::new(ring, seg.producer_word(0), 1) };
        if let Err(tail) = reader.checked_tail() {
            return Err(hostile(
                format!("stream `{name}`"),
                seg,
                format!("its tail word holds {tail}, beyond any sequence"),
            ));
        }
        let start = match late_join {
            LateJoin::Next => reader.tail(),
            LateJoin::Oldest | LateJoin::Archive => reader.oldest(),
        };
        // SAFETY: as above.
        reader = unsafe { Reader::new(ring, seg.producer_word(0), start) };
        Ok((reader, vec![0u8; ring.max_payload()]))
    }

    /// The epoch of the publisher incarnation being read.
    pub fn epoch(&self) -> u64 {
        self.seg.fields().epoch
    }

    fn channel(&self) -> String {
        format!("stream `{}`", self.name)
    }

    /// Called after an empty read: every [`CHECK_EVERY`] calls, checks the
    /// publisher, and after it went away, looks for a new incarnation.
    #[cold]
    fn idle_check<F: FnMut(Event<'_>)>(&mut self, f: &mut F) -> Result<()> {
        self.idle = 0;
        match self.state {
            Liveness::Live => {
                let closed = self.seg.owner_closed().load(Ordering::Acquire) != 0;
                let fields = *self.seg.fields();
                let dead =
                    !closed && !segment::process_alive(fields.creator_pid, fields.creator_start);
                // Read after the flag: once the publisher stopped, this tail
                // is final. A writer's tail is at most one behind what a
                // reader has read (it publishes the tail after the slot),
                // never more, and never beyond any sequence.
                let tail = self.reader.tail();
                let pos = self.reader.position();
                if tail >= BUSY || tail.saturating_add(1) < pos {
                    return Err(hostile(
                        self.channel(),
                        &self.seg,
                        format!("its tail word holds {tail}, behind this subscriber's position {pos} or beyond any sequence"),
                    ));
                }
                if !(closed || dead) {
                    self.undrained_at = None;
                    return Ok(());
                }
                // Drain first.
                let last = tail - 1;
                if pos <= last {
                    if self.undrained_at != Some(pos) {
                        self.undrained_at = Some(pos);
                        return Ok(());
                    }
                    // A whole check interval without progress after the
                    // writer stopped: the slots do not hold what the tail
                    // says was published. Report them lost, not waited for.
                    self.reader = Self::reader_at(&self.seg, last + 1);
                    f(Event::Overrun {
                        from: pos,
                        to: last + 1,
                    });
                }
                self.undrained_at = None;
                self.state = Liveness::Down;
                f(if closed {
                    Event::EndOfStream { last_seq: last }
                } else {
                    Event::PublisherDown { last_seq: last }
                });
            }
            Liveness::Down => {
                if self.seg.still_published() {
                    return Ok(());
                }
                let path = segment::lookup_path(&self.shm, Kind::Stream, &self.name);
                let Ok(seg) = Segment::open(&path, Kind::Stream) else {
                    return Ok(());
                };
                if seg.fields().epoch == self.seg.fields().epoch {
                    return Ok(());
                }
                // A restarted publisher starts a new sequence: read all of
                // it that is retained, whatever the late-join policy, and
                // report what it no longer retains as lost.
                let (reader, buf) = Self::reader_for(&seg, LateJoin::Oldest, &self.name)?;
                let first = reader.position();
                let lossless = match self.lossless.take() {
                    Some(old) => {
                        old.leave(&self.seg);
                        Some(Self::join(&seg, first, &self.name)?)
                    }
                    None => None,
                };
                // The next sleep registers in the new segment.
                self.seg.doorbell().deregister(&mut self.sleeper);
                self.reader = reader;
                self.buf = buf;
                self.seg = seg;
                self.lossless = lossless;
                self.state = Liveness::Live;
                f(Event::PublisherRestarted {
                    epoch: self.seg.fields().epoch,
                });
                if first > 1 {
                    f(Event::Overrun { from: 1, to: first });
                }
            }
        }
        Ok(())
    }

    /// Sleeps up to `timeout` on the segment's doorbell unless something is
    /// there to read; true when woken by the publisher (or data was there).
    /// A wake-up with nothing new (a timeout, the publisher's end) makes
    /// the next empty poll check the publisher's liveness, which counting
    /// empty polls would delay by thousands of sleeps.
    pub fn wait_for_data(&mut self, timeout: Duration) -> bool {
        let pos = self.reader.position();
        let reader = &self.reader;
        let woke = self
            .seg
            .doorbell()
            .sleep(&mut self.sleeper, || reader.tail() != pos, timeout);
        if self.reader.tail() == pos {
            self.idle = self.idle.max(CHECK_EVERY - 1);
        }
        woke != Woke::TimedOut
    }

    fn reader_at(seg: &Segment, start: u64) -> Reader {
        // SAFETY: as in `reader_for`.
        unsafe { Reader::new(ring_of(seg, 0), seg.producer_word(0), start) }
    }
}

impl StreamReceive for ShmSubscriber {
    #[inline]
    fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let mut n = 0;
        // Overruns count against the batch too, so a ring whose slots claim
        // to be ahead cannot keep one poll busy.
        let mut overruns = 0;
        while n < max && overruns < max {
            match self.reader.read(&mut self.buf) {
                Read::Message {
                    seq,
                    len,
                    flags,
                    timestamp,
                } => {
                    n += 1;
                    f(Event::Message(Message {
                        seq,
                        flags,
                        timestamp,
                        payload: &self.buf[..len as usize],
                    }));
                }
                Read::Empty => {
                    if n == 0 {
                        self.idle += 1;
                        if self.idle >= CHECK_EVERY {
                            self.idle_check(f)?;
                        }
                    }
                    break;
                }
                Read::Overrun { from, to } => {
                    overruns += 1;
                    f(Event::Overrun { from, to })
                }
                Read::Corrupt { seq, word, value } => {
                    let max = self.buf.len();
                    let reason = match word {
                        "length" => format!(
                            "the slot of sequence {seq} states a length of {value} bytes, more than its {max}"
                        ),
                        _ => format!(
                            "its {word} word holds {value}, beyond any sequence (reading {seq})"
                        ),
                    };
                    return Err(hostile(self.channel(), &self.seg, reason));
                }
            }
        }
        if n > 0 {
            self.idle = 0;
        }
        if n + overruns > 0 {
            if let Some(m) = &self.lossless {
                m.report(&self.seg, self.reader.position());
            }
        }
        Ok(n)
    }
}

impl Drop for ShmSubscriber {
    fn drop(&mut self) {
        if let Some(m) = self.lossless.take() {
            m.leave(&self.seg);
        }
        self.seg.doorbell().deregister(&mut self.sleeper);
    }
}

/// Which end of a session this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Created the segment; sends on ring 0, receives on ring 1.
    Acceptor,
    /// Attached to it; sends on ring 1, receives on ring 0.
    Initiator,
}

/// One end of a shared-memory session.
#[derive(Debug)]
pub struct ShmSession {
    tx: Producer,
    rx: Consumer,
    end: End,
    max_message: usize,
    idle: u32,
    channel: String,
    closed: bool,
    // Declared last: dropped after the rings that point into it.
    seg: Segment,
}

impl ShmSession {
    /// Creates the session and waits up to `cfg.connect_timeout` for the
    /// initiator.
    pub fn accept(shm: &ShmConfig, name: &str, cfg: &SessionConfig) -> Result<ShmSession> {
        let seg = create_segment(shm, name, Kind::Session, cfg.max_message, cfg.capacity)?;
        let channel = format!("session `{name}`");
        let deadline = Instant::now() + cfg.connect_timeout;
        // Acquire: pairs with the initiator's release of its pid, after it
        // wrote its start time.
        while seg.peer_pid().load(Ordering::Acquire) == 0 {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    channel,
                    what: "a peer connecting",
                    waited_ms: cfg.connect_timeout.as_millis() as u64,
                });
            }
            // Control plane: waiting for another process to start.
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(Self::ends(seg, End::Acceptor, cfg.max_message, channel))
    }

    /// Attaches to an accepting peer, waiting up to `cfg.connect_timeout`
    /// for it to appear.
    pub fn connect(shm: &ShmConfig, name: &str, cfg: &SessionConfig) -> Result<ShmSession> {
        let seg = open_waiting(shm, Kind::Session, name, cfg.connect_timeout)?;
        let channel = format!("session `{name}`");
        let f = *seg.fields();
        if !segment::process_alive(f.creator_pid, f.creator_start) {
            return Err(Error::PeerDied {
                channel,
                pid: f.creator_pid,
            });
        }
        let me = std::process::id() as u64;
        seg.peer_start().store(
            segment::process_start_time(me as u32).unwrap_or(0),
            Ordering::Relaxed,
        );
        // Release: the start time is visible to whoever acquires the pid.
        if let Err(other) =
            seg.peer_pid()
                .compare_exchange(0, me, Ordering::Release, Ordering::Relaxed)
        {
            return Err(Error::InUse {
                channel,
                pid: other as u32,
            });
        }
        // The session's maximum is the acceptor's: it sized the slots.
        let max = (f.slot_size as usize - crate::wire::HEADER_LEN).min(cfg.max_message.max(1));
        let max = if max < cfg.max_message {
            log::warn!(
                "{channel}: the acceptor's slots hold {max} bytes, fewer than max_message {}",
                cfg.max_message
            );
            max
        } else {
            cfg.max_message
        };
        Ok(Self::ends(seg, End::Initiator, max, channel))
    }

    /// Removes the acceptor's segment file from the directory, so that
    /// the name can be accepted again while this session goes on (the
    /// mapping of both ends stays); a replay service serves many
    /// requesters on one name this way.
    pub(crate) fn unpublish(&self) {
        if self.end == End::Acceptor {
            self.seg.unpublish();
        }
    }

    fn ends(seg: Segment, end: End, max_message: usize, channel: String) -> ShmSession {
        let (tx_ring, rx_ring) = match end {
            End::Acceptor => (0, 1),
            End::Initiator => (1, 0),
        };
        // SAFETY: both rings and their head words live in `seg`, kept alive
        // longer than the rings (field order). The acceptor is the only
        // producer of ring 0 and consumer of ring 1, the initiator the
        // reverse, and the pid handshake admits one initiator.
        let (tx, rx) = unsafe {
            (
                Producer::new(ring_of(&seg, tx_ring), seg.consumer_word(tx_ring)),
                Consumer::new(ring_of(&seg, rx_ring), seg.consumer_word(rx_ring)),
            )
        };
        ShmSession {
            tx,
            rx,
            end,
            max_message,
            idle: 0,
            channel,
            closed: false,
            seg,
        }
    }

    fn peer(&self) -> (u32, u64, bool) {
        match self.end {
            End::Acceptor => (
                self.seg.peer_pid().load(Ordering::Acquire) as u32,
                self.seg.peer_start().load(Ordering::Relaxed),
                self.seg.peer_closed().load(Ordering::Acquire) != 0,
            ),
            End::Initiator => {
                let f = self.seg.fields();
                (
                    f.creator_pid,
                    f.creator_start,
                    self.seg.owner_closed().load(Ordering::Acquire) != 0,
                )
            }
        }
    }
}

impl SessionEnd for ShmSession {
    #[inline]
    fn max_message(&self) -> usize {
        self.max_message
    }

    #[inline]
    fn try_claim(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > self.max_message {
            // The safe API's callers check first; this keeps the slice in
            // the slot even for those that do not.
            return None;
        }
        let p = self.tx.try_claim()?;
        // SAFETY: the consumer released this slot (try_claim checked its
        // head), so only we touch it until commit; it holds at least
        // max_message >= len bytes; the slice borrows `self`.
        Some(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) })
    }

    #[inline]
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64> {
        Error::check_fits(len, self.max_message, &self.channel)?;
        Ok(self.tx.commit(len as u32, flags, timestamp))
    }

    #[inline]
    fn poll<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let mut n = 0;
        while n < max {
            match self.rx.peek() {
                Ok(m) => {
                    // SAFETY: the slot is ours until `release`; the payload
                    // holds `len` bytes (peek checked it against the slot).
                    let payload = unsafe {
                        std::slice::from_raw_parts(m.payload as *const u8, m.len as usize)
                    };
                    f(Message {
                        seq: m.seq,
                        flags: m.flags,
                        timestamp: m.timestamp,
                        payload,
                    });
                    self.rx.release();
                    n += 1;
                }
                Err(PeekError::Empty) => {
                    if n == 0 {
                        self.idle += 1;
                        if self.idle >= CHECK_EVERY {
                            self.idle = 0;
                            self.check_peer()?;
                        }
                    } else {
                        self.idle = 0;
                    }
                    break;
                }
                Err(PeekError::Corrupt { word, value }) => {
                    let reason = format!(
                        "the slot of sequence {} holds {value} in its {word} word, which its writer cannot have written",
                        self.rx.position()
                    );
                    return Err(hostile(self.channel.clone(), &self.seg, reason));
                }
            }
        }
        Ok(n)
    }

    #[cold]
    fn check_peer(&mut self) -> Result<()> {
        if let Some(head) = self.tx.bad_head() {
            let reason = format!(
                "the peer's head word holds {head}: it consumed more than the {} messages sent, or went back",
                self.tx.sent()
            );
            return Err(hostile(self.channel.clone(), &self.seg, reason));
        }
        let (pid, start, closed) = self.peer();
        if closed || !segment::process_alive(pid, start) {
            // Deliver what the peer sent before it went: only a drained
            // ring reports the end.
            if !matches!(self.rx.peek(), Err(PeekError::Empty)) {
                return Ok(());
            }
            let channel = self.channel.clone();
            return Err(if closed {
                Error::PeerClosed { channel }
            } else {
                Error::PeerDied { channel, pid }
            });
        }
        Ok(())
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let flag = match self.end {
            End::Acceptor => self.seg.owner_closed(),
            End::Initiator => self.seg.peer_closed(),
        };
        // Release: every message sent before is visible to a peer that
        // acquires the flag.
        flag.store(1, Ordering::Release);
    }
}

impl Drop for ShmSession {
    fn drop(&mut self) {
        self.close();
    }
}
