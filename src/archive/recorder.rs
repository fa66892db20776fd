//! The recorder: an archive writer on its own thread, fed by an ordinary
//! subscriber of the stream. The publisher never waits for it: a recorder
//! that falls behind is overrun (shared memory) or loses datagrams it
//! cannot recover (udp, verbs) like any subscriber, and records the loss
//! as gap records; its counters show it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{ArchiveConfig, ArchiveError, ArchiveWriter};
use crate::config::{LateJoin, StreamConfig};
use crate::counters::registry::{Role, Slots};
use crate::message::Event;
use crate::{Bus, Subscriber};

/// Empty polls before the recorder starts to sleep between polls.
const SPIN_POLLS: u32 = 64;
/// Its sleep when idle: the ring (or the receive buffer) holds what
/// arrives meanwhile.
const IDLE_SLEEP: Duration = Duration::from_micros(200);

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
    /// Whether its thread still runs.
    pub running: bool,
    /// Why it stopped, when it stopped on its own.
    pub error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    running: AtomicBool,
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
    error: Mutex<Option<String>>,
}

/// Records one stream into its archive on a thread of its own.
#[derive(Debug)]
pub struct Recorder {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
        Ok(Recorder::spawn(sub, &cfg, slots)?)
    }

    /// Records what `subscriber` receives into the archive `cfg`
    /// describes (opened, and its torn tail cut, before this returns).
    pub fn from_subscriber(
        subscriber: Subscriber,
        cfg: &ArchiveConfig,
    ) -> Result<Recorder, ArchiveError> {
        Recorder::spawn(subscriber, cfg, None)
    }

    fn spawn(
        subscriber: Subscriber,
        cfg: &ArchiveConfig,
        slots: Option<Slots>,
    ) -> Result<Recorder, ArchiveError> {
        let writer = ArchiveWriter::open(cfg)?;
        let shared = Arc::new(Shared::default());
        shared.running.store(true, Relaxed);
        shared
            .last_seq
            .store(writer.next_seq().saturating_sub(1), Relaxed);
        let s = shared.clone();
        let name = format!("rec-{}", subscriber.name());
        let thread = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || {
                let r = run(subscriber, writer, &s, slots.as_ref());
                if let Err(e) = r {
                    log::error!("recorder stopped: {e}");
                    if let Some(slots) = &slots {
                        slots.set(ARCHIVE_ERRORS, 1);
                        slots.record_error(&format!("recorder stopped: {e}"));
                    }
                    *s.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
                s.running.store(false, Relaxed);
            })
            .map_err(|e| ArchiveError::Io {
                op: "start the recorder thread for",
                path: cfg.dir.clone(),
                source: e,
            })?;
        Ok(Recorder {
            shared,
            thread: Some(thread),
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
            running: s.running.load(Relaxed),
            error: s.error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// Stops the thread after what it has received is written and synced.
    pub fn stop(mut self) -> RecorderStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
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
    ]);
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

fn run(
    mut sub: Subscriber,
    mut w: ArchiveWriter,
    s: &Shared,
    slots: Option<&Slots>,
) -> Result<(), ArchiveError> {
    let mut idle = 0u32;
    let mut polls = 0u64;
    let mut failed: Option<ArchiveError> = None;
    // Held until the live epoch is known, then checked against the
    // archive's: another epoch's archive is sealed first.
    w.hold_until_epoch();
    loop {
        if let Some(epoch) = sub.epoch() {
            let before = w.stats().already_recorded;
            if let Some(sealed) = w.follow_epoch(epoch)? {
                sealed_epoch(&w, s, epoch, Some(sealed));
            }
            s.already
                .fetch_add(w.stats().already_recorded - before, Relaxed);
        }
        let stopping = s.stop.load(Relaxed);
        let n = sub
            .poll(|e| {
                if failed.is_some() {
                    return;
                }
                let r = match e {
                    // A restarted recorder hears again what it recorded
                    // before (it starts at the oldest retained message).
                    Event::Message(m) if m.seq < w.next_seq() => {
                        s.already.fetch_add(1, Relaxed);
                        Ok(())
                    }
                    Event::Message(m) => w.append(m.seq, m.flags, m.timestamp, m.payload),
                    Event::SourceGap { from, to } => {
                        // The notice took the next sequence of the stream;
                        // it is kept as the message it was.
                        let seq = w.next_seq().max(1);
                        let p = crate::wire::source_gap(from, to);
                        w.append(seq, crate::wire::FLAG_SOURCE_GAP, 0, &p)
                    }
                    Event::Overrun { from, to } => {
                        s.overruns.fetch_add(1, Relaxed);
                        s.overrun_messages.fetch_add(to - from, Relaxed);
                        w.gap(from, to)
                    }
                    Event::Gap { from, to } => {
                        s.gaps.fetch_add(1, Relaxed);
                        s.gap_messages.fetch_add(to - from, Relaxed);
                        w.gap(from, to)
                    }
                    // The new epoch numbers from 1 again: the previous
                    // one's archive is sealed apart, and this one begins
                    // anew, so no archive mixes two epochs' sequences.
                    Event::PublisherRestarted { epoch } => w
                        .new_epoch(epoch)
                        .map(|sealed| sealed_epoch(&w, s, epoch, sealed)),
                    Event::EndOfStream { .. } | Event::PublisherDown { .. } => w.sync(),
                };
                if let Err(e) = r {
                    failed = Some(e);
                }
            })
            .map_err(|e| ArchiveError::Io {
                op: "receive the stream for",
                path: w.dir().to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let st = w.stats();
        s.recorded.store(st.records, Relaxed);
        s.bytes.store(st.bytes, Relaxed);
        s.syncs.store(st.syncs, Relaxed);
        polls = polls.wrapping_add(1);
        if let Some(slots) = slots {
            // Every idle poll (cheap then) and every MIRROR_EVERY busy ones.
            if n == 0 || polls % crate::counters::registry::MIRROR_EVERY == 0 {
                mirror(slots, s);
            }
        }
        if let Some(e) = failed.take() {
            return Err(e);
        }
        if n == 0 {
            // Flushed before the progress is shown, so a reader of the
            // files finds what `last_seq` says.
            w.tick()?;
            s.last_seq.store(w.next_seq().saturating_sub(1), Relaxed);
            if stopping {
                w.sync()?;
                s.syncs.store(w.stats().syncs, Relaxed);
                if let Some(slots) = slots {
                    mirror(slots, s);
                }
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
