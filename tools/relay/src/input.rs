//! File inputs that never block past a stop: opened once without waiting
//! (a FIFO's open does not wait for its writer), read through `poll` in
//! short slices so SIGINT/SIGTERM, the stop flag and `--duration` are
//! noticed while the input is silent (a FIFO whose writer has not come,
//! or pauses), and paced by sleeps of the same short slices.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mdbus::clock::monotonic_ns;
use mdbus_tool_support::readiness::readable_within;

/// Longest a wait sleeps before it looks at the stop conditions again.
pub const SLICE: Duration = Duration::from_millis(50);

/// When a run must stop: a signal, the stop flag, or its deadline.
#[derive(Debug, Clone)]
pub struct StopWhen {
    /// Set by anyone (a test) to stop.
    pub flag: Arc<AtomicBool>,
    /// Monotonic ns at which `--duration` ends the run.
    pub deadline: Option<u64>,
}

impl StopWhen {
    /// Why to stop now, if it is time to: `stopped` or `duration`.
    pub fn why(&self) -> Option<&'static str> {
        if self.flag.load(Ordering::Relaxed) || mdbus_tool_support::signals::requested() {
            return Some("stopped");
        }
        if self.deadline.is_some_and(|d| monotonic_ns() >= d) {
            return Some("duration");
        }
        None
    }

    /// Sleeps until `due` (monotonic ns), in slices; returns why it
    /// stopped early, if it did.
    pub fn sleep_until(&self, due: u64) -> Option<&'static str> {
        loop {
            if let Some(why) = self.why() {
                return Some(why);
            }
            let now = monotonic_ns();
            if now >= due {
                return None;
            }
            let left = due - now;
            if left > 2_000_000 {
                // Pacing, not synchronisation: give the core away while the
                // next event is far off, but never longer than a slice.
                let nap = (left - 1_000_000).min(SLICE.as_nanos() as u64);
                std::thread::sleep(Duration::from_nanos(nap));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// The error a [`WakingFile`] returns when told to stop while waiting.
#[derive(Debug, thiserror::Error)]
#[error("input read interrupted: {0}")]
pub struct Stopped(pub &'static str);

/// An input file opened once, without blocking, whose reads wait in
/// `poll` slices and give up with [`Stopped`] when the run must stop.
#[derive(Debug)]
pub struct WakingFile {
    file: File,
    stop: Option<StopWhen>,
}

impl WakingFile {
    /// Opens `path` for reading without waiting for a FIFO's writer.
    ///
    /// # Errors
    /// The file cannot be opened (a sentence naming why), or is a
    /// directory.
    pub fn open(path: &Path) -> Result<WakingFile, String> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| format!("cannot be opened: {e}"))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot be examined: {e}"))?;
        if meta.is_dir() {
            return Err("is a directory, not a file".into());
        }
        Ok(WakingFile { file, stop: None })
    }

    /// Whether it is a regular file (not a FIFO, socket or device), whose
    /// start can be read without consuming it.
    pub fn is_regular(&self) -> bool {
        self.file.metadata().is_ok_and(|m| {
            let t = m.file_type();
            t.is_file() && !t.is_fifo()
        })
    }

    /// The first bytes of a regular file, read at offset 0 without moving
    /// the file position.
    pub fn peek_regular(&self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        self.file.read_at(buf, 0)
    }

    /// From now on, reads give up when `stop` says so.
    pub fn stop_when(&mut self, stop: StopWhen) {
        self.stop = Some(stop);
    }
}

impl Read for WakingFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(why) = self.stop.as_ref().and_then(StopWhen::why) {
                return Err(io::Error::other(Stopped(why)));
            }
            // Nothing yet: a FIFO's writer has not come (Linux reports no
            // hang-up before a writer was ever there) or has paused.
            if !readable_within(self.file.as_fd(), SLICE)? {
                continue;
            }
            match self.file.read(buf) {
                Ok(n) => return Ok(n),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Why a read error happened: the run was told to stop (`Some(why)`), or
/// a genuine error (`None`).
pub fn stopped(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            if let Some(s) = io.get_ref().and_then(|i| i.downcast_ref::<Stopped>()) {
                return Some(s.0);
            }
        }
        if let Some(s) = err.downcast_ref::<Stopped>() {
            return Some(s.0);
        }
        cur = err.source();
    }
    None
}
