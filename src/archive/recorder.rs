//! The recorder: an archive writer fed by an ordinary subscriber of the
//! stream, on two threads of its own. The receiving thread polls the
//! subscriber and copies what it gets into a preallocated lock-free
//! hand-off ([`handoff`](super::handoff)); it never touches the disk. The
//! writing thread takes from the hand-off and appends to the archive, and
//! preallocates the next segment ahead of need while idle. A slow disk
//! shows as the hand-off's depth and the times the receiver found it full;
//! the publisher never waits for either thread.
//!
//! When the hand-off is full the receiver waits for room and polls no
//! further meanwhile: what the stream brings during the wait stays where
//! the transport keeps it (the shared-memory ring; the socket or receive
//! queue, then the publisher's retained window, from which the
//! subscriber's retransmit requests repair what overflowed once it polls
//! again). Only what the stream no longer holds by then is lost, and it is
//! recorded as a gap with its exact range and counted by its reason
//! (overrun, or unrecoverable on the network), never dropped silently.

use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::handoff::{self, Item};
use super::{ArchiveConfig, ArchiveError, ArchiveWriter};
use crate::config::{LateJoin, StreamConfig};
use crate::counters::registry::{Role, Slots};
use crate::message::Event;
use crate::{Bus, Subscriber};

/// Empty polls before a thread of the recorder starts to sleep between
/// polls.
const SPIN_POLLS: u32 = 64;
/// Its sleep when idle: the ring (or the receive buffer) holds what
/// arrives meanwhile, and the hand-off what the writer has not taken.
const IDLE_SLEEP: Duration = Duration::from_micros(200);
/// The receiver's sleep while the hand-off is full.
const FULL_SLEEP: Duration = Duration::from_micros(50);
/// Bytes of the hand-off by default: 16 MiB, about 260,000 ITCH-sized
/// messages (a message takes its payload plus 32 bytes, rounded up to 8),
/// two minutes of a stream at 2,000 messages a second, a quarter of a
/// second at a million.
pub const HANDOFF_BYTES: usize = 16 << 20;
/// Largest payload the hand-off is sized for when the stream's
/// `max_message` is not known (a subscriber handed in).
const DEFAULT_MAX_PAYLOAD: usize = 64 << 10;
/// Items the writer takes between updates of its counters.
const WRITE_BATCH: usize = 256;
/// Longest a writer that is never idle (it lags behind the stream) goes
/// without flushing, so that readers of the files (a late joiner
/// replaying) see its progress.
const BUSY_FLUSH: Duration = Duration::from_millis(5);

/// Counters of a recorder, readable while it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Messages recorded.
    pub recorded: u64,
    /// Highest sequence recorded (messages and gaps).
    pub last_seq: u64,
    /// Record bytes written.
    pub bytes: u64,
    /// Times the recorder was overrun (it fell more than the ring behind).
    pub overruns: u64,
    /// Messages lost to those overruns (recorded as gaps).
    pub overrun_messages: u64,
    /// Unrecoverable network gaps seen (recorded as gaps).
    pub gaps: u64,
    /// Messages in them.
    pub gap_messages: u64,
    /// `fdatasync` calls.
    pub syncs: u64,
    /// Messages received that the archive already held (a restarted
    /// recorder starts at the oldest message the stream retains).
    pub already_recorded: u64,
    /// Publisher restarts followed: each sealed the previous epoch's
    /// archive into `DIR/epochs/` and began a new one in `DIR`.
    pub epochs: u64,
    /// Messages the receiving thread took from the stream.
    pub received: u64,
    /// Bytes in the hand-off from the receiving thread to the writing
    /// one, not yet written (the recorder's lag behind the stream).
    pub handoff_bytes: u64,
    /// The most bytes the hand-off ever held.
    pub handoff_high_water: u64,
    /// Bytes the hand-off holds.
    pub handoff_capacity: u64,
    /// Times the receiving thread found the hand-off full and waited for
    /// the writer (polling the stream no further meanwhile).
    pub handoff_full: u64,
    /// Its subscriber's loss-recovery counters (datagram transports;
    /// `None` on shared memory): messages recovered by retransmission,
    /// requests sent, given up... Copied when the stream is idle and every
    /// 1,024 polls.
    pub recovery: Option<crate::recovery::Counters>,
    /// Whether its threads still run.
    pub running: bool,
    /// Why it stopped, when it stopped on its own.
    pub error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    /// The receiving thread has handed over everything it will.
    received_all: AtomicBool,
    /// The writing thread failed: the receiver stops too.
    writer_failed: AtomicBool,
    /// Threads still running.
    alive: AtomicU32,
    recorded: AtomicU64,
    last_seq: AtomicU64,
    bytes: AtomicU64,
    overruns: AtomicU64,
    overrun_messages: AtomicU64,
    gaps: AtomicU64,
    gap_messages: AtomicU64,
    syncs: AtomicU64,
    already: AtomicU64,
    epochs: AtomicU64,
    received: AtomicU64,
    handoff_bytes: AtomicU64,
    handoff_high_water: AtomicU64,
    handoff_capacity: AtomicU64,
    handoff_full: AtomicU64,
    recovery: Mutex<Option<crate::recovery::Counters>>,
    error: Mutex<Option<String>>,
}

impl Shared {
    /// Keeps the first error.
    fn fail(&self, e: &ArchiveError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            log::error!("recorder stopped: {e}");
            *slot = Some(e.to_string());
        }
    }
}

/// A hook the writing thread calls before each message it writes, with
/// the message's sequence: tests make the disk slow with it.
pub(crate) type WriteHook = Box<dyn FnMut(u64) + Send>;

/// How a recorder is built beyond its archive's configuration.
pub(crate) struct Options {
    /// Bytes of the hand-off.
    pub handoff_bytes: usize,
    /// Largest payload expected.
    pub max_payload: usize,
    /// Called by the writing thread before each item.
    pub before_write: Option<WriteHook>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            handoff_bytes: HANDOFF_BYTES,
            max_payload: DEFAULT_MAX_PAYLOAD,
            before_write: None,
        }
    }
}

/// Records one stream into its archive on threads of its own.
#[derive(Debug)]
pub struct Recorder {
    shared: Arc<Shared>,
    receiver: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Starts recording stream `name` of `bus` into the archive its
    /// configuration names (`[streams.NAME.archive]` or `[archive]`). The
    /// recorder subscribes from the oldest message the stream retains.
    pub fn start(bus: &Bus, name: &str) -> crate::Result<Recorder> {
        let cfg = super::configured(bus, name, "to record into")?;
        let stream = StreamConfig {
            late_join: LateJoin::Oldest,
            ..bus.config().stream(name)
        };
        let sub = bus.subscriber_with(name, &stream)?;
        // Its counters (`rec.NAME.`) in the bus's counters file, for
        // mdbus-stat.
        let slots = bus.slots(Role::Archive, name);
        let options = Options {
            max_payload: stream.max_message,
            ..Options::default()
        };
        Ok(Recorder::spawn(sub, &cfg, slots, options)?)
    }

    /// Records what `subscriber` receives into the archive `cfg`
    /// describes (opened, and its torn tail cut, before this returns).
    pub fn from_subscriber(
        subscriber: Subscriber,
        cfg: &ArchiveConfig,
    ) -> Result<Recorder, ArchiveError> {
        Recorder::spawn(subscriber, cfg, None, Options::default())
    }

    pub(crate) fn spawn(
        subscriber: Subscriber,
        cfg: &ArchiveConfig,
        slots: Option<Slots>,
        options: Options,
    ) -> Result<Recorder, ArchiveError> {
        let writer = ArchiveWriter::open(cfg)?;
        let (tx, rx) = handoff::channel(options.handoff_bytes, options.max_payload);
        let shared = Arc::new(Shared::default());
        shared.alive.store(2, Relaxed);
        shared.handoff_capacity.store(tx.capacity() as u64, Relaxed);
        shared
            .last_seq
            .store(writer.next_seq().saturating_sub(1), Relaxed);
        let name = subscriber.name().to_string();
        let thread = |prefix: &str| {
            std::thread::Builder::new().name(format!("{prefix}{name}").chars().take(15).collect())
        };
        let spawn_err = |e| ArchiveError::Io {
            op: "start the recorder threads for",
            path: cfg.dir.clone(),
            source: e,
        };
        let s = shared.clone();
        let hook = options.before_write;
        let writer = thread("recw-")
            .spawn(move || {
                let r = write(rx, writer, &s, slots.as_ref(), hook);
                if let Err(e) = &r {
                    s.fail(e);
                    s.writer_failed.store(true, Release);
                }
                let error = s.error.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let (Some(slots), Some(e)) = (&slots, error) {
                    slots.set(ARCHIVE_ERRORS, 1);
                    slots.record_error(&format!("recorder stopped: {e}"));
                }
                s.alive.fetch_sub(1, Release);
            })
            .map_err(spawn_err)?;
        let s = shared.clone();
        let dir = cfg.dir.clone();
        let receiver = thread("rec-").spawn(move || {
            if let Err(e) = receive(subscriber, tx, &s, &dir) {
                s.fail(&e);
            }
            s.received_all.store(true, Release);
            s.alive.fetch_sub(1, Release);
        });
        let receiver = match receiver {
            Ok(r) => r,
            Err(e) => {
                // The writer finishes at once: nothing will come.
                shared.received_all.store(true, Release);
                let _ = writer.join();
                return Err(spawn_err(e));
            }
        };
        Ok(Recorder {
            shared,
            receiver: Some(receiver),
            writer: Some(writer),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> RecorderStats {
        let s = &self.shared;
        RecorderStats {
            recorded: s.recorded.load(Relaxed),
            last_seq: s.last_seq.load(Relaxed),
            bytes: s.bytes.load(Relaxed),
            overruns: s.overruns.load(Relaxed),
            overrun_messages: s.overrun_messages.load(Relaxed),
            gaps: s.gaps.load(Relaxed),
            gap_messages: s.gap_messages.load(Relaxed),
            syncs: s.syncs.load(Relaxed),
            already_recorded: s.already.load(Relaxed),
            epochs: s.epochs.load(Relaxed),
            received: s.received.load(Relaxed),
            handoff_bytes: s.handoff_bytes.load(Relaxed),
            handoff_high_water: s.handoff_high_water.load(Relaxed),
            handoff_capacity: s.handoff_capacity.load(Relaxed),
            handoff_full: s.handoff_full.load(Relaxed),
            recovery: *s.recovery.lock().unwrap_or_else(|p| p.into_inner()),
            running: s.alive.load(Acquire) > 0,
            error: s.error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// Stops the threads after what has been received is written and
    /// synced.
    pub fn stop(mut self) -> RecorderStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Relaxed);
        for t in [self.receiver.take(), self.writer.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The `errors` slot of [`crate::counters::registry::ARCHIVE`].
const ARCHIVE_ERRORS: usize = crate::counters::registry::ARCHIVE.len() - 1;

/// Copies the recorder's counters into its slots of the counters file.
fn mirror(slots: &Slots, s: &Shared) {
    slots.set_after_open(&[
        s.recorded.load(Relaxed),
        s.bytes.load(Relaxed),
        s.last_seq.load(Relaxed),
        s.overruns.load(Relaxed),
        s.overrun_messages.load(Relaxed),
        s.gaps.load(Relaxed),
        s.gap_messages.load(Relaxed),
        s.syncs.load(Relaxed),
        s.already.load(Relaxed),
        s.epochs.load(Relaxed),
        s.handoff_bytes.load(Relaxed),
        s.handoff_high_water.load(Relaxed),
        s.handoff_full.load(Relaxed),
    ]);
}

/// The receiving thread: polls the stream and hands every event over,
/// until told to stop (then it drains what has arrived) or the writer
/// fails.
fn receive(
    mut sub: Subscriber,
    mut tx: handoff::Tx,
    s: &Shared,
    dir: &std::path::Path,
) -> Result<(), ArchiveError> {
    let mut idle = 0u32;
    let mut polls = 0u64;
    let mut high = 0usize;
    let mut received = 0u64;
    let mut too_large = None;
    let mut handed_epoch = None;
    loop {
        // The writer learns the live epoch before the first message of
        // the poll that revealed it (a UDP or verbs subscriber learns it
        // from its first datagram).
        if let Some(epoch) = sub.epoch().filter(|&e| Some(e) != handed_epoch) {
            if !hand_over(&mut tx, &Item::Epoch { epoch }, s, received, &mut high) {
                return Ok(());
            }
            handed_epoch = Some(epoch);
        }
        let stopping = s.stop.load(Relaxed);
        let n = sub.poll(|e| {
            let item = match e {
                Event::Message(m) => {
                    received += 1;
                    Item::Message {
                        seq: m.seq,
                        flags: m.flags,
                        timestamp: m.timestamp,
                        payload: m.payload,
                    }
                }
                Event::SourceGap { from, to } => Item::SourceGap { from, to },
                Event::Overrun { from, to } => Item::Overrun { from, to },
                Event::Gap { from, to } => Item::Gap { from, to },
                Event::PublisherRestarted { epoch } => Item::Restarted { epoch },
                Event::EndOfStream { .. } | Event::PublisherDown { .. } => Item::Sync,
            };
            if item.size() > tx.capacity() {
                too_large = Some(item.size());
                return;
            }
            if !hand_over(&mut tx, &item, s, received, &mut high) {
                return;
            }
            high = high.max(tx.depth());
        });
        let n = n.map_err(|e| ArchiveError::Io {
            op: "receive the stream for",
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        if let Some(size) = too_large {
            return Err(ArchiveError::Io {
                op: "hand a message over to the writer of",
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "a message of stream `{}` takes {size} bytes, more than the recorder's hand-off of {}",
                        sub.name(),
                        tx.capacity()
                    ),
                ),
            });
        }
        if s.writer_failed.load(Acquire) || tx.abandoned() {
            return Ok(());
        }
        s.received.store(received, Relaxed);
        s.handoff_high_water.store(high as u64, Relaxed);
        polls = polls.wrapping_add(1);
        if n == 0 || polls % crate::counters::registry::MIRROR_EVERY == 0 {
            if let Some(c) = sub.recovery_counters() {
                // Uncontended, and not per message.
                *s.recovery.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
            }
        }
        if n == 0 {
            if stopping {
                return Ok(());
            }
            idle += 1;
            if idle > SPIN_POLLS {
                std::thread::sleep(IDLE_SLEEP);
            } else {
                std::hint::spin_loop();
            }
        } else {
            idle = 0;
        }
    }
}

/// Pushes `item`, waiting while the hand-off is full (each wait counted,
/// the counters shown first); false when the writer failed meanwhile.
fn hand_over(
    tx: &mut handoff::Tx,
    item: &Item<'_>,
    s: &Shared,
    received: u64,
    high: &mut usize,
) -> bool {
    if tx.try_push(item) {
        return true;
    }
    *high = (*high).max(tx.depth());
    s.handoff_high_water.store(*high as u64, Relaxed);
    s.received.store(received, Relaxed);
    s.handoff_full.fetch_add(1, Relaxed);
    let mut spins = 0u32;
    loop {
        if s.writer_failed.load(Acquire) || tx.abandoned() {
            return false;
        }
        if tx.try_push(item) {
            return true;
        }
        spins += 1;
        if spins > SPIN_POLLS {
            std::thread::sleep(FULL_SLEEP);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The writing thread: appends what the hand-off brings, flushes and
/// preallocates the next segment while idle, and syncs at the end.
fn write(
    mut rx: handoff::Rx,
    mut w: ArchiveWriter,
    s: &Shared,
    slots: Option<&Slots>,
    mut hook: Option<WriteHook>,
) -> Result<(), ArchiveError> {
    let mut idle = 0u32;
    let mut batches = 0u64;
    let mut flushed = std::time::Instant::now();
    // Held until the live epoch is known, then checked against the
    // archive's: another epoch's archive is sealed first.
    w.hold_until_epoch();
    loop {
        // Read before the hand-off is found empty: nothing comes after.
        let finished = s.received_all.load(Acquire);
        let mut taken = 0;
        while taken < WRITE_BATCH {
            let Some(r) = rx.pop(|item| {
                if let (Some(h), Item::Message { seq, .. }) = (hook.as_mut(), item) {
                    h(seq);
                }
                apply(&mut w, item, s)
            }) else {
                break;
            };
            r?;
            taken += 1;
        }
        s.handoff_bytes.store(rx.depth() as u64, Relaxed);
        let st = w.stats();
        s.recorded.store(st.records, Relaxed);
        s.bytes.store(st.bytes, Relaxed);
        s.syncs.store(st.syncs, Relaxed);
        batches = batches.wrapping_add(1);
        if taken > 0 {
            idle = 0;
            if flushed.elapsed() >= BUSY_FLUSH {
                w.tick()?;
                s.last_seq.store(w.next_seq().saturating_sub(1), Relaxed);
                flushed = std::time::Instant::now();
            }
            if let Some(slots) = slots {
                if batches % crate::counters::registry::MIRROR_EVERY == 0 {
                    mirror(slots, s);
                }
            }
            continue;
        }
        // Idle: flushed before the progress is shown, so a reader of the
        // files finds what `last_seq` says.
        w.tick()?;
        flushed = std::time::Instant::now();
        s.last_seq.store(w.next_seq().saturating_sub(1), Relaxed);
        if finished {
            w.sync()?;
            s.syncs.store(w.stats().syncs, Relaxed);
            if let Some(slots) = slots {
                mirror(slots, s);
            }
            return Ok(());
        }
        w.prepare_next()?;
        if let Some(slots) = slots {
            mirror(slots, s);
        }
        idle += 1;
        if idle > SPIN_POLLS {
            std::thread::sleep(IDLE_SLEEP);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Writes one item of the hand-off.
fn apply(w: &mut ArchiveWriter, item: Item<'_>, s: &Shared) -> Result<(), ArchiveError> {
    match item {
        // A restarted recorder hears again what it recorded before (it
        // starts at the oldest retained message).
        Item::Message { seq, .. } if seq < w.next_seq() => {
            s.already.fetch_add(1, Relaxed);
            Ok(())
        }
        Item::Message {
            seq,
            flags,
            timestamp,
            payload,
        } => w.append(seq, flags, timestamp, payload),
        Item::SourceGap { from, to } => {
            // The notice took the next sequence of the stream; it is kept
            // as the message it was.
            let seq = w.next_seq().max(1);
            let p = crate::wire::source_gap(from, to);
            w.append(seq, crate::wire::FLAG_SOURCE_GAP, 0, &p)
        }
        Item::Overrun { from, to } => {
            s.overruns.fetch_add(1, Relaxed);
            s.overrun_messages.fetch_add(to - from, Relaxed);
            w.gap(from, to)
        }
        Item::Gap { from, to } => {
            s.gaps.fetch_add(1, Relaxed);
            s.gap_messages.fetch_add(to - from, Relaxed);
            w.gap(from, to)
        }
        // The new epoch numbers from 1 again: the previous one's archive
        // is sealed apart, and this one begins anew, so no archive mixes
        // two epochs' sequences.
        Item::Restarted { epoch } => w
            .new_epoch(epoch)
            .map(|sealed| sealed_epoch(w, s, epoch, sealed)),
        // The live epoch: an archive of another one (the publisher
        // restarted while no recorder ran) is sealed first, and what the
        // writer held until now is written.
        Item::Epoch { epoch } => {
            let before = w.stats().already_recorded;
            if let Some(sealed) = w.follow_epoch(epoch)? {
                sealed_epoch(w, s, epoch, Some(sealed));
            }
            s.already
                .fetch_add(w.stats().already_recorded - before, Relaxed);
            Ok(())
        }
        Item::Sync => w.sync(),
    }
}

/// Counts and logs an epoch the writer sealed (the publisher restarted).
fn sealed_epoch(w: &ArchiveWriter, s: &Shared, epoch: u64, sealed: Option<std::path::PathBuf>) {
    s.epochs.fetch_add(1, Relaxed);
    s.last_seq.store(0, Relaxed);
    log::warn!(
        "archive {}: the publisher restarted (epoch {epoch}); the previous epoch is kept in {}",
        w.dir().display(),
        sealed.map_or("(nothing recorded)".into(), |p| p.display().to_string())
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{read_all, Item as Read};
    use crate::Config;
    use std::sync::mpsc;

    fn payload(seq: u64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&seq.to_le_bytes());
        b[8..].copy_from_slice(&(!seq).to_le_bytes());
        b
    }

    /// The sequences the archive in `dir` holds, each message's payload
    /// checked; a gap fails.
    fn read(dir: &std::path::Path) -> Vec<u64> {
        let mut seqs = Vec::new();
        read_all(dir, 1, |i| match i {
            Read::Message(m) => {
                assert_eq!(m.payload(), payload(m.seq()));
                seqs.push(m.seq());
            }
            Read::Gap { from, to } => panic!("gap {from}..{to}"),
        })
        .unwrap();
        seqs
    }

    /// Waits, yielding, until `done` holds for the recorder's counters.
    fn wait_for(r: &Recorder, what: &str, done: impl Fn(&RecorderStats) -> bool) -> RecorderStats {
        let start = std::time::Instant::now();
        loop {
            let st = r.stats();
            if done(&st) {
                return st;
            }
            assert!(st.running, "{st:?}");
            assert!(start.elapsed().as_secs() < 60, "watchdog: {what}: {st:?}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_slow_writer_shows_as_lag_while_the_receiver_receives_and_nothing_is_lost() {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("mdbus-rec-slow-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        let toml = format!(
            "transport = \"shm\"\n[shm]\nprefix = \"mdbus-rec-slow-{pid}\"\n[counters]\nenabled = false\n\
             [streams.md]\nmax_message = 64\ncapacity = 4096\n\
             [streams.md.archive]\ndir = \"{}\"\nsegment_bytes = 65536\n",
            dir.display()
        );
        let bus = Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap();
        let mut p = bus.publisher("md").unwrap();
        let sub = bus.subscriber("md").unwrap();
        // The disk: the writing thread stops before its first record
        // until the test lets it go on.
        let (entered_tx, entered) = mpsc::channel::<u64>();
        let (release, gate) = mpsc::channel::<()>();
        let mut first = true;
        let hook: WriteHook = Box::new(move |seq| {
            if std::mem::take(&mut first) {
                entered_tx.send(seq).unwrap();
                gate.recv().unwrap();
            }
        });
        // Room for 40 messages of 16 bytes (48 bytes each in the ring).
        let item = handoff::size_of_payload(16);
        let options = Options {
            handoff_bytes: 40 * item,
            max_payload: 64,
            before_write: Some(hook),
        };
        let cfg = bus.config().archive_for("md").unwrap();
        let rec = Recorder::spawn(sub, &cfg, None, options).unwrap();
        // Dropped before `rec`: a failed assertion must not leave the
        // writer parked on the gate while `rec`'s drop joins it.
        let release = release;
        let n = 1000u64;
        for seq in 1..=n {
            assert_eq!(p.publish(&payload(seq)).unwrap(), seq);
        }
        assert_eq!(entered.recv().unwrap(), 1);
        // The writer is held: the receiver fills the hand-off, finds it
        // full and says so; nothing has reached the disk.
        let st = wait_for(&rec, "the hand-off full", |st| st.handoff_full > 0);
        assert_eq!(st.recorded, 0, "{st:?}");
        assert_eq!(st.handoff_capacity, 40 * item as u64);
        // Full: the next message did not fit. The live epoch's notice
        // went first and may still take its 32 bytes (the writer takes it
        // before the held message, or not yet).
        let room = st.handoff_capacity - st.handoff_high_water;
        assert!(room < item as u64, "{st:?}");
        let held = st.handoff_high_water / item as u64;
        assert!(held == 40 || (held == 39 && room == 16), "{st:?}");
        assert_eq!(
            st.received,
            held + 1,
            "handed over, and one waiting: {st:?}"
        );
        release.send(()).unwrap();
        let st = wait_for(&rec, "all recorded", |st| st.last_seq == n);
        assert_eq!(st.handoff_bytes, 0, "{st:?}");
        let st = rec.stop();
        assert_eq!(
            (
                st.recorded,
                st.received,
                st.overruns,
                st.gaps,
                st.error.clone()
            ),
            (n, n, 0, 0, None),
            "{st:?}"
        );
        assert!(st.handoff_full >= 1, "{st:?}");
        assert_eq!(read(&dir), (1..=n).collect::<Vec<_>>());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_next_segment_is_preallocated_ahead_and_taken_by_the_rotation() {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("mdbus-rec-spare-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = ArchiveConfig {
            dir: dir.clone(),
            segment_bytes: 4096,
            ..ArchiveConfig::default()
        };
        let mut w = ArchiveWriter::open(&cfg).unwrap();
        // Empty: the first segment is prepared before the first record.
        w.prepare_next().unwrap();
        assert!(w.has_spare());
        let spare = dir.join("next.seg.tmp");
        assert_eq!(std::fs::metadata(&spare).unwrap().len(), 4096);
        w.append(1, 0, 0, &payload(1)).unwrap();
        assert!(!w.has_spare(), "the rotation took it");
        assert_eq!(w.stats().segments_created, 1);
        // Below half full nothing is prepared; past it, the next one.
        w.prepare_next().unwrap();
        assert!(!w.has_spare());
        let mut seq = 2;
        while !w.has_spare() {
            w.append(seq, 0, 0, &payload(seq)).unwrap();
            seq += 1;
            w.prepare_next().unwrap();
        }
        while w.stats().segments_created == 1 {
            w.append(seq, 0, 0, &payload(seq)).unwrap();
            seq += 1;
        }
        assert!(!w.has_spare());
        assert!(!spare.exists());
        drop(w);
        assert_eq!(read(&dir), (1..seq).collect::<Vec<_>>());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
