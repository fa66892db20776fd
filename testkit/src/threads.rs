//! Where another thread of this process is: for tests that must act only
//! once a thread sleeps on its event source (the kernel's own state, read
//! from /proc, never a timed guess).

/// This thread's kernel id, from `/proc/thread-self` (`PID/task/TID`).
pub fn tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("/proc/thread-self ends in the thread id")
}

/// System call numbers (x86_64) of the blocking waits the transports use:
/// poll, epoll_wait, ppoll, epoll_pwait, epoll_pwait2.
const WAITS: [u64; 5] = [7, 232, 271, 281, 441];

/// True when thread `tid` of this process is asleep inside poll(2) or
/// epoll_wait(2) (or their p-variants): its state is `S` and
/// `/proc/self/task/TID/syscall` names one of those calls.
pub fn blocked_in_wait(tid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // The state follows the command name's closing parenthesis.
    let asleep = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'));
    if !asleep {
        return false;
    }
    let call =
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap_or_default();
    call.split_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|n| WAITS.contains(&n))
}

/// Yields until thread `tid` sleeps in a wait (see [`blocked_in_wait`]).
/// Panics when the thread has ended (it will never sleep).
pub fn until_blocked_in_wait(tid: u32) {
    while !blocked_in_wait(tid) {
        assert!(
            std::path::Path::new(&format!("/proc/self/task/{tid}")).exists(),
            "thread {tid} ended before it slept in a wait"
        );
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_a_thread_in_poll_from_one_in_read() {
        assert!(!blocked_in_wait(tid()), "this thread is running");
        let mut fds = [0i32; 2];
        // SAFETY: a valid array for the two new descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let poller = std::thread::spawn(move || {
            tx.send(tid()).unwrap();
            let mut p = libc::pollfd {
                fd: fds[0],
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; returns when the pipe is written.
            unsafe { libc::poll(&mut p, 1, -1) }
        });
        let t = rx.recv().unwrap();
        until_blocked_in_wait(t);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            tx.send(tid()).unwrap();
            let mut b = [0u8; 1];
            // SAFETY: reads one byte into `b`; returns when the pipe is written.
            unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) }
        });
        let r = rx.recv().unwrap();
        // Asleep in read(2) (state S, syscall 0) is not a wait.
        while std::fs::read_to_string(format!("/proc/self/task/{r}/syscall"))
            .map_or(true, |s| !s.starts_with("0 "))
        {
            std::thread::yield_now();
        }
        assert!(!blocked_in_wait(r));
        assert!(blocked_in_wait(t));
        // SAFETY: writes two bytes from a valid buffer; closes our ends.
        unsafe {
            assert_eq!(libc::write(fds[1], b"xy".as_ptr().cast(), 2), 2);
        }
        assert_eq!(poller.join().unwrap(), 1);
        assert_eq!(reader.join().unwrap(), 1);
        // SAFETY: the pipe's descriptors, closed once.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
