//! Process liveness: a pid plus the process's start time names one process
//! for the life of the machine, even after the pid is recycled.
//!
//! Both functions are allocation-free (stack buffers only): they run from
//! idle polling loops, where the zero-allocation tests watch.

use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A process as recorded in a file it created: pid and start time (clock
/// ticks since boot, 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creator {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot; 0: unknown.
    pub start: u64,
}

impl Creator {
    /// This process.
    pub fn me() -> Creator {
        let pid = std::process::id();
        Creator {
            pid,
            start: process_start_time(pid).unwrap_or(0),
        }
    }

    /// Whether this process still runs ([`process_alive`]).
    pub fn alive(&self) -> bool {
        process_alive(self.pid, self.start)
    }
}

/// Whether process `pid`, started at `start` (0: unknown), still runs. A
/// pid that exists but belongs to a process started at another time is a
/// recycled pid: not alive. A process of another user (`EPERM`) exists.
/// Cost: one `kill(pid, 0)` and one read of `/proc/PID/stat`.
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match (start, process_start_time(pid)) {
        (0, _) | (_, None) => true,
        (want, Some(now)) => want == now,
    }
}

/// Start time of `pid` in clock ticks since boot (field 22 of
/// /proc/PID/stat); it tells a recycled pid from the original process.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let mut path = [0u8; 32];
    {
        let mut w = &mut path[..];
        write!(w, "/proc/{pid}/stat\0").ok()?;
    }
    // SAFETY: `path` is NUL-terminated by the write above.
    let raw = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is writable for its whole length; `fd` is open.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return None;
    }
    parse_start_time(&buf[..n as usize])
}

/// Field 22 of a /proc/PID/stat line.
fn parse_start_time(text: &[u8]) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields resume after
    // the last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    let field = text[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    std::str::from_utf8(field).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_its_start_time_is_checked() {
        let me = std::process::id();
        let start = process_start_time(me).expect("/proc is mounted");
        assert!(process_alive(me, start));
        assert!(!process_alive(me, start + 1));
        assert!(!process_alive(0, 0));
        assert!(!process_alive(u32::MAX, 0));
        assert_eq!(Creator::me(), Creator { pid: me, start });
        assert!(Creator::me().alive());
    }

    #[test]
    fn an_exited_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid, 0));
    }

    #[test]
    fn start_time_survives_odd_command_names() {
        let line = b"42 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 19\n";
        assert_eq!(parse_start_time(line), Some(777));
        assert_eq!(parse_start_time(b"42 (x S 1"), None);
    }
}
