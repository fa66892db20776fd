//! The second process of a run: this binary again, with `--role`.

use std::io::{self, BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{Common, Failure};

/// Environment variable carrying the parent's pid to a spawned peer.
const PARENT_ENV: &str = "MDBUS_PERF_PARENT";

/// A peer process this process started. Killed if still running when
/// dropped, so a failed run leaves nothing behind.
pub struct Peer {
    child: Child,
    role: &'static str,
    stdin: Option<ChildStdin>,
}

impl Peer {
    /// Runs this binary as `subcommand ... --role role`, pinned to `core`,
    /// with `args` (the subcommand's own options) and the shared options of
    /// `common`, on channel `name`.
    pub fn spawn(
        subcommand: &str,
        role: &'static str,
        args: &[String],
        common: &Common,
        name: &str,
        core: usize,
    ) -> Result<Peer, Failure> {
        Self::spawn_in(None, subcommand, role, args, common, name, core)
    }

    /// As [`spawn`](Peer::spawn), inside network namespace `netns` when
    /// given (through `ip netns exec`, which runs this binary in place:
    /// the peer is still this process's child).
    pub fn spawn_in(
        netns: Option<&str>,
        subcommand: &str,
        role: &'static str,
        args: &[String],
        common: &Common,
        name: &str,
        core: usize,
    ) -> Result<Peer, Failure> {
        let exe = std::env::current_exe()?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.env(PARENT_ENV, std::process::id().to_string())
            .arg(subcommand)
            .args(["--role", role, "--spawned", "--name", name])
            .args(["--transport", common.transport.name()])
            .args(["--cores", &core.to_string()])
            .args(["--wait", common.wait.as_str()])
            .args(["--timeout", &common.timeout.to_string()])
            .args(args);
        if let Some(config) = &common.config {
            cmd.arg("--config").arg(config);
        }
        if let Some(group) = common.group {
            cmd.args(["--group", &group.to_string()]);
        }
        if let Some(interface) = common.interface {
            cmd.args(["--interface", &interface.to_string()]);
        }
        if let Some(address) = common.address {
            cmd.args(["--address", &address.to_string()]);
        }
        if let Some(port) = common.default_port {
            cmd.args(["--default-port", &port.to_string()]);
        }
        if let Some(device) = &common.device {
            cmd.args(["--device", device]);
        }
        if let Some(i) = common.gid_index {
            cmd.args(["--gid-index", &i.to_string()]);
        }
        if let Some(device) = &common.recv_device {
            cmd.args(["--recv-device", device]);
        }
        if let Some(interface) = common.recv_interface {
            cmd.args(["--recv-interface", &interface.to_string()]);
        }
        if common.no_inline {
            cmd.arg("--no-inline");
        }
        for (flag, value) in [
            ("--max-inline", common.max_inline),
            ("--signal-every", common.signal_every),
            ("--recv-batch", common.recv_batch),
        ] {
            if let Some(n) = value {
                cmd.args([flag, &n.to_string()]);
            }
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Failure::Run(format!("cannot start the {role} process: {e}")))?;
        let stdin = child.stdin.take();
        Ok(Peer { child, role, stdin })
    }

    /// Fails if the peer has exited.
    pub fn check_alive(&mut self) -> Result<(), Failure> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(Failure::Run(format!(
                "the {} process exited before the run finished ({})",
                self.role,
                describe(status)
            ))),
        }
    }

    /// Tells a peer waiting in [`wait_for_go`] to start.
    pub fn go(&mut self) -> Result<(), Failure> {
        let role = self.role;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Failure::Run(format!("the {role} process was already told to start")))?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .map_err(|_| self.gone())
    }

    /// Tells a peer watching with [`DoneSignal`] that this side is done.
    pub fn done(&mut self) -> Result<(), Failure> {
        let role = self.role;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Failure::Run(format!("the {role} process was already told to stop")))?;
        stdin
            .write_all(b"done\n")
            .and_then(|()| stdin.flush())
            .map_err(|_| self.gone())
    }

    /// Whether the peer has exited (successfully or not).
    pub fn has_exited(&mut self) -> Result<bool, Failure> {
        Ok(self.child.try_wait()?.is_some())
    }

    fn gone(&mut self) -> Failure {
        match self.check_alive() {
            Err(e) => e,
            Ok(()) => Failure::Run(format!("the {} process stopped listening", self.role)),
        }
    }

    /// Waits for the peer to exit; fails unless it succeeded.
    pub fn finish(mut self) -> Result<(), Failure> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        if status.success() {
            Ok(())
        } else {
            Err(Failure::Run(format!(
                "the {} process failed ({})",
                self.role,
                describe(status)
            )))
        }
    }

    /// Turns a failure seen by this process into the peer's, when the
    /// peer's exit explains it better (it died first).
    pub fn explain(&mut self, failure: Failure) -> Failure {
        match self.check_alive() {
            Err(peer_failure) => peer_failure,
            Ok(()) => failure,
        }
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

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// For a spawned peer: die with the parent process.
pub fn die_with_parent() -> Result<(), Failure> {
    let parent: Option<libc::pid_t> = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse().ok());
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no
    // memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(Failure::Run(format!(
            "prctl(PR_SET_PDEATHSIG): {}",
            io::Error::last_os_error()
        )));
    }
    // The parent may have died before prctl: then we were reparented and
    // the signal will never come.
    // SAFETY: getppid has no preconditions.
    if Some(unsafe { libc::getppid() }) != parent {
        return Err(Failure::Run("the parent process exited".into()));
    }
    Ok(())
}

/// For a spawned peer: blocks until the parent calls [`Peer::go`].
pub fn wait_for_go() -> Result<(), Failure> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    if line.trim() == "go" {
        Ok(())
    } else {
        Err(Failure::Run(
            "the parent process went away before the start".into(),
        ))
    }
}

/// For a spawned peer past [`wait_for_go`]: learns, from a thread reading
/// stdin, when the parent says `done` (or goes away), while this process
/// keeps working (a stream publisher answering retransmit requests).
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
    pub fn is_done(&self) -> bool {
        // Relaxed: pairs with the store above; no data depends on it.
        self.0.load(Ordering::Relaxed)
    }
}
