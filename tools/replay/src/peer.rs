//! Subscriber processes: this binary again, as the hidden `subscribe`
//! command, talking to the replaying process over its stdin and stdout.
//!
//! The conversation, one line each:
//! 1. subscriber → `ready` once it has joined the stream;
//! 2. publisher → `start T0 INTERVAL_NS`: the replay's start (ns since the
//!    epoch) and the histogram interval;
//! 3. publisher → `end LAST_SEQ` after the last message;
//! 4. the subscriber writes its files and exits 0.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use super::error::ReplayError;

/// Environment variable carrying the parent's pid to a subscriber.
const PARENT_ENV: &str = "MDBUS_REPLAY_PARENT";

/// A subscriber process. Killed if still running when dropped, so a
/// failed run leaves nothing behind.
pub struct Subscriber {
    child: Child,
    index: usize,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Subscriber {
    /// Starts this binary with `args` as subscriber `index`.
    pub fn spawn(index: usize, args: &[String]) -> Result<Subscriber, ReplayError> {
        let exe = std::env::current_exe()
            .map_err(|e| ReplayError::Run(format!("cannot find this program's path: {e}")))?;
        let mut child = Command::new(exe)
            .env(PARENT_ENV, std::process::id().to_string())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| ReplayError::Run(format!("cannot start subscriber {index}: {e}")))?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Subscriber {
            child,
            index,
            stdin,
            lines,
        })
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
        let index = self.index;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| ReplayError::Run(format!("subscriber {index} no longer listens")))?;
        let sent = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
        if sent.is_err() {
            self.check_alive()?;
            return Err(ReplayError::Run(format!(
                "subscriber {index} stopped listening"
            )));
        }
        Ok(())
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), ReplayError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(ReplayError::Run(format!(
                "subscriber {} exited before the replay finished ({})",
                self.index,
                describe(status)
            ))),
            Err(e) => Err(ReplayError::Run(format!(
                "cannot check on subscriber {}: {e}",
                self.index
            ))),
        }
    }

    /// The exit status if the process has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, ReplayError> {
        self.child.try_wait().map_err(|e| {
            ReplayError::Run(format!("cannot check on subscriber {}: {e}", self.index))
        })
    }

    /// Fails unless the process exited successfully.
    pub fn check_success(&self, status: ExitStatus) -> Result<(), ReplayError> {
        if status.success() {
            Ok(())
        } else {
            Err(ReplayError::Run(format!(
                "subscriber {} failed ({})",
                self.index,
                describe(status)
            )))
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// In a subscriber process: die with the parent (it may be killed without
/// a chance to stop its subscribers).
pub fn die_with_parent() -> Result<(), ReplayError> {
    let parent: Option<libc::pid_t> = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse().ok());
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no
    // memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(ReplayError::Run(format!(
            "prctl(PR_SET_PDEATHSIG): {}",
            io::Error::last_os_error()
        )));
    }
    // The parent may have died before prctl: then the signal never comes.
    // SAFETY: getppid has no preconditions.
    if parent.is_some() && Some(unsafe { libc::getppid() }) != parent {
        return Err(ReplayError::Run("the replaying process exited".into()));
    }
    Ok(())
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
