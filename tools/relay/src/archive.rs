//! The streams' archives: with `[bus.archive]` (or a stream's own
//! `[bus.streams.NAME.archive]`) set, the relay records each stream it
//! publishes into its archive on a thread of its own, and serves it to late
//! joiners when `replay_service` names a session (docs/ARCHIVE.md). The
//! publishing path never waits for a recorder.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mdbus::archive::{ArchiveError, ArchiveReader, Recorder, RecorderStats, ReplayService};

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
            // An earlier run's archive: this run's publisher is a new
            // epoch, numbered from 1 again, and the recorder seals the
            // earlier one into DIR/epochs/ when it hears it. Unless the
            // archive does not record its epoch (format version 1): then
            // this run's sequences would be taken for the ones it holds.
            match earlier_run(&cfg.dir).map_err(|e| err(e.into()))? {
                Some(None) => {
                    return Err(RelayError::Config(mdbus::error::ConfigError {
                        source_name: "<configuration>".into(),
                        key: format!("bus.streams.{n}.archive.dir"),
                        message: format!(
                            "{} holds an earlier run of stream {n} without its publisher epoch (archive format version 1), so this run, numbered from 1 again, cannot be told from it: move that archive away or set another directory",
                            cfg.dir.display()
                        ),
                    }))
                }
                Some(Some(epoch)) => log::info!(
                    "stream {n}: {} holds an earlier run (publisher epoch {epoch}): it is sealed into {} and this run recorded from 1",
                    cfg.dir.display(),
                    cfg.dir.join("epochs").display()
                ),
                None => {}
            }
            let recorder = Recorder::start(bus, n).map_err(err)?;
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
/// Whether `dir` holds records (`Some`), and of which publisher epoch
/// (`None` inside: the archive does not record it).
fn earlier_run(dir: &std::path::Path) -> Result<Option<Option<u64>>, ArchiveError> {
    if !dir.exists() {
        return Ok(None);
    }
    let mut r = ArchiveReader::open(dir)?;
    if r.first_seq()?.is_none() {
        return Ok(None);
    }
    Ok(Some(r.epoch()?))
}

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
