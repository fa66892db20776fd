//! Child processes a tool starts to play another role of a measurement
//! (this binary again, with other arguments), and the child's side of the
//! conversation.
//!
//! The parent writes lines on the child's stdin: `go` to start
//! ([`Peer::go`], [`wait_for_go`]), `done` when it needs nothing more
//! ([`Peer::done`], [`DoneSignal`]); tools with a richer conversation send
//! their own lines ([`Peer::send_line`]). The child dies with its parent
//! ([`die_with_parent`]); the parent kills a child it drops, so a failed
//! run leaves nothing behind.

use std::io::{self, BufRead, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Environment variable carrying the parent's pid to a child, so the
/// child can tell it was orphaned before it armed its death signal.
pub const PARENT_ENV: &str = "MDBUS_TOOL_PARENT";

/// Why a child process failed, or talking to it did.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// This program's own path is unknown.
    #[error("cannot find this program's path: {0}")]
    Exe(#[source] io::Error),
    /// The child could not be started.
    #[error("cannot start {name}: {source}")]
    Spawn {
        /// The child, as in "the pong process" or "subscriber 2".
        name: String,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// The child exited while it still had work to do.
    #[error("{name} exited before the run finished ({status})")]
    Exited {
        /// The child.
        name: String,
        /// Its exit, as [`describe`] says it.
        status: String,
    },
    /// The child exited unsuccessfully at the end.
    #[error("{name} failed ({status})")]
    Failed {
        /// The child.
        name: String,
        /// Its exit, as [`describe`] says it.
        status: String,
    },
    /// The child no longer reads its stdin.
    #[error("{name} stopped listening")]
    Gone {
        /// The child.
        name: String,
    },
    /// Its stdin was already closed by [`Peer::finish`].
    #[error("{name} no longer listens")]
    Closed {
        /// The child.
        name: String,
    },
    /// Waiting for or reading from the child failed.
    #[error("cannot check on {name}: {source}")]
    Io {
        /// The child.
        name: String,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// In a child: the death signal could not be armed.
    #[error("prctl(PR_SET_PDEATHSIG): {0}")]
    DeathSignal(#[source] io::Error),
    /// In a child: the parent had already exited.
    #[error("the parent process exited")]
    Orphaned,
    /// In a child: the parent closed stdin before saying `go`.
    #[error("the parent process went away before the start")]
    NoGo,
}

/// A child process this process started. Killed if still running when
/// dropped.
pub struct Peer {
    child: Child,
    name: String,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
}

/// This program, to be started again as a child with other arguments.
///
/// # Errors
/// Its path is unknown.
pub fn this_program() -> Result<Command, PeerError> {
    Ok(Command::new(
        std::env::current_exe().map_err(PeerError::Exe)?,
    ))
}

impl Peer {
    /// Starts `cmd` as the child called `name` in messages, with its stdin
    /// piped for the conversation, stderr shared, and stdout piped when
    /// `capture_stdout` (else discarded), and [`PARENT_ENV`] set.
    ///
    /// # Errors
    /// The child could not be started.
    pub fn start(
        name: impl Into<String>,
        mut cmd: Command,
        capture_stdout: bool,
    ) -> Result<Peer, PeerError> {
        let name = name.into();
        let mut child = cmd
            .env(PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(if capture_stdout {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| PeerError::Spawn {
                name: name.clone(),
                source,
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        Ok(Peer {
            child,
            name,
            stdin,
            stdout,
        })
    }

    /// The child's name in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's stdout, when captured and not taken yet (for a reader
    /// of its own).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// Sends one line on the child's stdin.
    ///
    /// # Errors
    /// The child exited or stopped reading.
    pub fn send_line(&mut self, line: &str) -> Result<(), PeerError> {
        // A dead child's pipe may still take the line (another process
        // forked meanwhile can hold its read end for a moment): ask first.
        self.check_alive()?;
        let stdin = self.stdin.as_mut().ok_or_else(|| PeerError::Closed {
            name: self.name.clone(),
        })?;
        let sent = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
        if sent.is_err() {
            self.check_alive()?;
            return Err(PeerError::Gone {
                name: self.name.clone(),
            });
        }
        Ok(())
    }

    /// Tells a child waiting in [`wait_for_go`] to start.
    ///
    /// # Errors
    /// As [`send_line`](Peer::send_line).
    pub fn go(&mut self) -> Result<(), PeerError> {
        self.send_line("go")
    }

    /// Tells a child watching with [`DoneSignal`] that this side is done.
    ///
    /// # Errors
    /// As [`send_line`](Peer::send_line).
    pub fn done(&mut self) -> Result<(), PeerError> {
        self.send_line("done")
    }

    /// The exit status if the child has exited.
    ///
    /// # Errors
    /// The system cannot tell.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, PeerError> {
        self.child.try_wait().map_err(|source| PeerError::Io {
            name: self.name.clone(),
            source,
        })
    }

    /// Whether the child has exited (successfully or not).
    ///
    /// # Errors
    /// The system cannot tell.
    pub fn has_exited(&mut self) -> Result<bool, PeerError> {
        Ok(self.exited()?.is_some())
    }

    /// Fails if the child has exited.
    ///
    /// # Errors
    /// [`PeerError::Exited`], or the system cannot tell.
    pub fn check_alive(&mut self) -> Result<(), PeerError> {
        match self.exited()? {
            None => Ok(()),
            Some(status) => Err(PeerError::Exited {
                name: self.name.clone(),
                status: describe(status),
            }),
        }
    }

    /// Fails unless `status` (the child's) is a success.
    ///
    /// # Errors
    /// [`PeerError::Failed`].
    pub fn check_success(&self, status: ExitStatus) -> Result<(), PeerError> {
        if status.success() {
            Ok(())
        } else {
            Err(PeerError::Failed {
                name: self.name.clone(),
                status: describe(status),
            })
        }
    }

    /// Closes the child's stdin, waits for it to exit and returns what it
    /// printed (empty unless stdout was captured and not taken).
    ///
    /// # Errors
    /// The child failed, or reading or waiting failed.
    pub fn finish(mut self) -> Result<String, PeerError> {
        drop(self.stdin.take());
        let io = |name: &str, source| PeerError::Io {
            name: name.to_owned(),
            source,
        };
        let mut out = String::new();
        if let Some(mut stdout) = self.stdout.take() {
            stdout
                .read_to_string(&mut out)
                .map_err(|e| io(&self.name, e))?;
        }
        let status = self.child.wait().map_err(|e| io(&self.name, e))?;
        self.check_success(status)?;
        Ok(out)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `program` with `args` to its end: its exit status (-1 when a
/// signal ended it), stdout and stderr. For the tools' tests of their
/// command lines.
///
/// # Errors
/// The program cannot be started.
pub fn output_of(program: &str, args: &[&str]) -> std::io::Result<(i32, String, String)> {
    let out = Command::new(program).args(args).output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// How a process ended, as a phrase: "exit status 3", "killed by signal 9".
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// In a child: die with the parent (which may be killed without a chance
/// to stop its children).
///
/// # Errors
/// The death signal cannot be armed, or the parent named in
/// [`PARENT_ENV`] has already exited.
pub fn die_with_parent() -> Result<(), PeerError> {
    let parent: Option<libc::pid_t> = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse().ok());
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no
    // memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(PeerError::DeathSignal(io::Error::last_os_error()));
    }
    // The parent may have died before prctl: then we were reparented and
    // the signal will never come.
    if parent.is_some_and(|p| p != parent_pid()) {
        return Err(PeerError::Orphaned);
    }
    Ok(())
}

/// This process's parent.
pub fn parent_pid() -> libc::pid_t {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}

/// In a child: blocks until the parent calls [`Peer::go`].
///
/// # Errors
/// The parent closed stdin first ([`PeerError::NoGo`]).
pub fn wait_for_go() -> Result<(), PeerError> {
    let mut line = String::new();
    // An error reading is the same as end of file: the parent is gone.
    let _ = io::stdin().lock().read_line(&mut line);
    if line.trim() == "go" {
        Ok(())
    } else {
        Err(PeerError::NoGo)
    }
}

/// In a child past [`wait_for_go`]: learns, from a thread reading stdin,
/// when the parent says `done` (or goes away), while the child keeps
/// working (a stream publisher answering retransmit requests).
pub struct DoneSignal(Arc<AtomicBool>);

impl DoneSignal {
    /// Starts listening.
    pub fn listen() -> DoneSignal {
        let flag = Arc::new(AtomicBool::new(false));
        let set = Arc::clone(&flag);
        std::thread::spawn(move || {
            let mut line = String::new();
            // `done`, end of file or an error: the parent needs nothing
            // more from this process either way.
            while io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.trim() == "done" {
                    break;
                }
                line.clear();
            }
            // Relaxed: the flag hands over no data, only "stop".
            set.store(true, Ordering::Relaxed);
        });
        DoneSignal(flag)
    }

    /// Whether the parent said `done`.
    #[inline]
    pub fn is_done(&self) -> bool {
        // Relaxed: pairs with the store above; no data depends on it.
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_child_that_fails_is_named_with_its_status() {
        let p = Peer::start("the test process", sh("exit 3"), false).unwrap();
        let e = p.finish().unwrap_err();
        assert_eq!(e.to_string(), "the test process failed (exit status 3)");
    }

    #[test]
    fn lines_reach_the_child_and_its_output_comes_back() {
        let mut p =
            Peer::start("the echo process", sh("read a; read b; echo $a-$b"), true).unwrap();
        p.go().unwrap();
        p.done().unwrap();
        assert_eq!(p.finish().unwrap(), "go-done\n");
    }

    #[test]
    fn a_dead_child_is_reported_by_check_alive() {
        let mut p = Peer::start("the short process", sh("kill -9 $$"), false).unwrap();
        let status = p.child.wait().unwrap();
        assert_eq!(describe(status), "killed by signal 9");
        let e = p.check_alive().unwrap_err();
        assert_eq!(
            e.to_string(),
            "the short process exited before the run finished (killed by signal 9)"
        );
        assert!(matches!(p.send_line("x"), Err(PeerError::Exited { .. })));
    }

    #[test]
    fn the_child_learns_its_parent() {
        let out = Peer::start("the env process", sh("echo $MDBUS_TOOL_PARENT"), true)
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(out.trim(), std::process::id().to_string());
    }
}
