//! Subscriber processes: this binary again, as the hidden `subscribe`
//! command, talking to the replaying process over its stdin and stdout.
//!
//! The conversation, one line each:
//! 1. subscriber → `ready` once it has joined the stream;
//! 2. publisher → `start T0 INTERVAL_NS`: the replay's start (ns since the
//!    epoch) and the histogram interval;
//! 3. publisher → `end LAST_SEQ` after the last message;
//! 4. the subscriber writes its files and exits 0.

use std::io::{self, BufRead, BufReader};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

pub use mdbus_tool_support::process::die_with_parent;
use mdbus_tool_support::process::{this_program, Peer};

use super::error::ReplayError;

/// A subscriber process. Killed if still running when dropped, so a
/// failed run leaves nothing behind.
pub struct Subscriber {
    peer: Peer,
    index: usize,
    lines: Receiver<String>,
}

impl Subscriber {
    /// Starts this binary with `args` as subscriber `index`.
    pub fn spawn(index: usize, args: &[String]) -> Result<Subscriber, ReplayError> {
        let mut cmd = this_program()?;
        cmd.args(args);
        let mut peer = Peer::start(format!("subscriber {index}"), cmd, true)?;
        let (tx, lines) = mpsc::channel();
        if let Some(out) = peer.take_stdout() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Subscriber { peer, index, lines })
    }

    /// Waits for the line `want`, failing if the process exits or
    /// `deadline` passes first.
    pub fn expect_line(&mut self, want: &str, deadline: Instant) -> Result<(), ReplayError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(std::time::Duration::from_millis(100)))
            {
                Ok(line) if line == want => return Ok(()),
                Ok(other) => {
                    return Err(ReplayError::Run(format!(
                        "subscriber {} said {other:?} where {want:?} was expected",
                        self.index
                    )))
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.check_alive()?;
                    if Instant::now() >= deadline {
                        return Err(ReplayError::Run(format!(
                            "subscriber {} did not say {want:?} in time (--timeout)",
                            self.index
                        )));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.check_alive()?;
                    return Err(ReplayError::Run(format!(
                        "subscriber {} closed its output before saying {want:?}",
                        self.index
                    )));
                }
            }
        }
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) -> Result<(), ReplayError> {
        Ok(self.peer.send_line(line)?)
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), ReplayError> {
        Ok(self.peer.check_alive()?)
    }

    /// The exit status if the process has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, ReplayError> {
        Ok(self.peer.exited()?)
    }

    /// Fails unless the process exited successfully.
    pub fn check_success(&self, status: ExitStatus) -> Result<(), ReplayError> {
        Ok(self.peer.check_success(status)?)
    }
}

/// In a subscriber process: what the publisher says on stdin after
/// `start`, read by a thread of its own while the process polls.
#[derive(Clone)]
pub struct Control {
    end: Arc<AtomicU64>,
    gone: Arc<AtomicBool>,
}

impl Control {
    /// Reads the `start` line; returns the start time and interval, and
    /// starts listening for `end`.
    pub fn start() -> Result<(Control, u64, u64), ReplayError> {
        let mut line = String::new();
        io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| ReplayError::Run(format!("cannot read from the publisher: {e}")))?;
        let mut words = line.split_whitespace();
        let parsed = match (words.next(), words.next(), words.next()) {
            (Some("start"), Some(t0), Some(interval)) => t0.parse().ok().zip(interval.parse().ok()),
            _ => None,
        };
        let Some((t0, interval)) = parsed else {
            return Err(ReplayError::Run(format!(
                "expected `start T0 INTERVAL` from the publisher, got {line:?}"
            )));
        };
        let control = Control {
            end: Arc::new(AtomicU64::new(u64::MAX)),
            gone: Arc::new(AtomicBool::new(false)),
        };
        let c = control.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Some(seq) = line
                    .trim()
                    .strip_prefix("end ")
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    // Relaxed: the value itself is the whole message.
                    c.end.store(seq, Ordering::Relaxed);
                }
                line.clear();
            }
            c.gone.store(true, Ordering::Relaxed);
        });
        Ok((control, t0, interval))
    }

    /// The last sequence number published, once the publisher has said.
    #[inline]
    pub fn end(&self) -> Option<u64> {
        // Relaxed: see the store.
        let v = self.end.load(Ordering::Relaxed);
        (v != u64::MAX).then_some(v)
    }

    /// Whether the publisher closed its end of the pipe.
    pub fn publisher_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}
