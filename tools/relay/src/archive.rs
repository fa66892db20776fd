//! The streams' archives: with `[bus.archive]` (or a stream's own
//! `[bus.streams.NAME.archive]`) set, the relay records each stream it
//! publishes into its archive on a thread of its own, and serves it to late
//! joiners when `replay_service` names a session (docs/ARCHIVE.md). The
//! publishing path never waits for a recorder.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mdbus::archive::{Recorder, RecorderStats, ReplayService};

use super::RelayError;

/// How long the end of a run waits for a recorder to write what the
/// stream published last.
const CATCH_UP: Duration = Duration::from_secs(10);

/// One stream's recorder and, if configured, its replay service.
#[derive(Debug)]
struct StreamArchive {
    stream: String,
    recorder: Recorder,
    service: Option<ReplayService>,
}

/// The archives of the relay's streams.
#[derive(Debug, Default)]
pub struct Archives {
    streams: Vec<StreamArchive>,
}

impl Archives {
    /// Starts a recorder (and replay service) for every stream of `names`
    /// that has an archive configured on `bus`. Call after the publishers
    /// exist: a recorder starts at the oldest message the stream retains.
    pub fn start(bus: &mdbus::Bus, names: &[String]) -> Result<Archives, RelayError> {
        let mut streams = Vec::new();
        for n in names {
            let Some(cfg) = bus.config().archive_for(n) else {
                continue;
            };
            let err = |source| RelayError::Bus {
                stream: n.clone(),
                source,
            };
            let recorder = Recorder::start(bus, n).map_err(err)?;
            let held = recorder.stats().last_seq;
            if held > 0 {
                // This run's stream numbers from 1 again: the recorder
                // would take it for what the archive already holds.
                drop(recorder.stop());
                return Err(RelayError::Config(mdbus::error::ConfigError {
                    source_name: "<configuration>".into(),
                    key: format!("bus.streams.{n}.archive.dir"),
                    message: format!(
                        "{} already holds sequences up to {held} of an earlier run of stream {n}; this run numbers the stream from 1 again: move that archive away or set another directory",
                        cfg.dir.display()
                    ),
                }));
            }
            let service = if cfg.replay_service.is_empty() {
                None
            } else {
                Some(ReplayService::start(bus, n).map_err(err)?)
            };
            log::info!(
                "stream {n}: recording into {}{}",
                cfg.dir.display(),
                if service.is_some() {
                    format!(
                        ", replayed to late joiners on session {}",
                        cfg.replay_service
                    )
                } else {
                    String::new()
                }
            );
            streams.push(StreamArchive {
                stream: n.clone(),
                recorder,
                service,
            });
        }
        Ok(Archives { streams })
    }

    /// Whether any stream is archived.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Stops every service and recorder, each recorder once it has written
    /// up to `last_seq(stream)` (or after [`CATCH_UP`], or when `stop` is
    /// set). Returns what an archive lost, as a sentence, if anything.
    pub fn finish(&mut self, last_seq: impl Fn(&str) -> u64, stop: &AtomicBool) -> Option<String> {
        let mut lost = Vec::new();
        for a in self.streams.drain(..) {
            drop(a.service);
            let want = last_seq(&a.stream);
            let since = Instant::now();
            loop {
                let st = a.recorder.stats();
                if st.last_seq >= want
                    || !st.running
                    || since.elapsed() >= CATCH_UP
                    || stop.load(Ordering::Relaxed)
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let st = a.recorder.stop();
            log::info!(
                "stream {}: archive holds up to sequence {} ({} recorded)",
                a.stream,
                st.last_seq,
                st.recorded
            );
            if let Some(why) = archive_loss(&st, want) {
                lost.push(format!("the archive of stream {} {why}", a.stream));
            }
        }
        (!lost.is_empty()).then(|| lost.join("; "))
    }
}

/// What a recorder that should hold up to `want` lost, if anything.
fn archive_loss(st: &RecorderStats, want: u64) -> Option<String> {
    if let Some(e) = &st.error {
        return Some(format!("stopped on an error: {e}"));
    }
    let missed = st.overrun_messages + st.gap_messages;
    if missed > 0 {
        return Some(format!(
            "lacks {missed} messages (recorded as gaps: the recorder fell behind or the network lost them)"
        ));
    }
    if st.last_seq < want {
        return Some(format!(
            "ends at sequence {}, before the last published, {want}",
            st.last_seq
        ));
    }
    None
}
