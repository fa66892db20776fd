//! The doorbell of a shared-memory ring: lets a reader with nothing to read
//! sleep in the kernel (a futex on a word of the segment) instead of
//! spinning, and costs the writer one fence, one load and one branch per
//! message while nobody sleeps.
//!
//! Two words, on separate cache lines of the segment header:
//!
//! - `asleep`: 1 while at least one reader may be asleep. A reader stores 1
//!   before it sleeps; the writer, finding 1 after a publish, stores 0 and
//!   rings. It is a flag, not a count, so a reader killed while asleep
//!   costs the writer one wake-up system call, not one per message forever.
//! - `bell`: a sequence the writer increments when it rings; readers
//!   `FUTEX_WAIT` on it with the value they saw before their last look at
//!   the ring.
//!
//! No wake-up is lost. The reader stores `asleep = 1`, loads `bell`, and
//! then (after a SeqCst fence) looks at the ring; the writer stores the
//! message, and then (after a SeqCst fence) loads `asleep`. The two fences
//! order the store-then-load pairs (Dekker): either the reader's look sees
//! the message, or the writer's load sees the flag and increments `bell`
//! after the reader loaded it, so the reader's `FUTEX_WAIT` either fails at
//! once (the word changed) or is woken by the `FUTEX_WAKE` that follows the
//! increment. `loom_tests` checks the property in every interleaving.
//!
//! The words live in a file shared with other processes: a hostile value
//! in them makes the writer ring needlessly or a reader sleep until its
//! timeout, never more; every sleep has a timeout.

#[cfg(loom)]
use loom::sync::atomic::AtomicU32;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::sync::{fence, AtomicU64, Ordering};

/// How a sleep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// The ring had something before the reader slept.
    Ready,
    /// The writer rang (or the bell moved before the sleep began).
    Rung,
    /// The timeout passed, or a signal interrupted the sleep.
    TimedOut,
}

/// A ring's doorbell: the addresses of its two words.
#[derive(Debug, Clone, Copy)]
pub struct Doorbell {
    asleep: *const AtomicU64,
    bell: *const AtomicU32,
}

// SAFETY: only addresses of shared memory that outlives the doorbell (the
// constructor's contract); every access is atomic.
unsafe impl Send for Doorbell {}

impl Doorbell {
    /// A doorbell on the words at `asleep` and `bell`.
    ///
    /// # Safety
    /// Both must point to aligned words that stay mapped as long as the
    /// doorbell (or a copy) is used, and are accessed only atomically.
    pub unsafe fn new(asleep: *const AtomicU64, bell: *const AtomicU32) -> Doorbell {
        Doorbell { asleep, bell }
    }

    fn asleep(&self) -> &AtomicU64 {
        // SAFETY: valid while the doorbell is used (constructor).
        unsafe { &*self.asleep }
    }

    fn bell(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.bell }
    }

    /// The writer's side, after each publish: wakes the readers if one
    /// announced it sleeps. One fence, one load, one branch otherwise.
    #[inline]
    pub fn ring(&self) {
        // SeqCst: orders the publish before the load of the flag (the
        // store-load pair of the protocol in the module docs).
        fence(Ordering::SeqCst);
        if self.asleep().load(Ordering::Relaxed) != 0 {
            self.wake();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake(&self) {
        self.asleep().store(0, Ordering::Relaxed);
        // Release: a reader whose futex check sees the new value also sees
        // the message published before it.
        self.bell().fetch_add(1, Ordering::Release);
        futex_wake(self.bell());
    }

    /// The reader's side, before a sleep: announces it and returns the
    /// bell's value to sleep on. The caller then looks at the ring and
    /// sleeps only if it is empty.
    #[inline]
    pub fn announce(&self) -> u32 {
        self.asleep().store(1, Ordering::SeqCst);
        let seen = self.bell().load(Ordering::Acquire);
        // SeqCst: orders the flag's store before the caller's look at the
        // ring (the other store-load pair).
        fence(Ordering::SeqCst);
        seen
    }

    /// Sleeps up to `timeout` unless `ready()` (a look at the ring) finds
    /// something after the announcement.
    pub fn sleep(&self, ready: impl FnOnce() -> bool, timeout: Duration) -> Woke {
        let seen = self.announce();
        if ready() {
            return Woke::Ready;
        }
        futex_wait(self.bell(), seen, timeout)
    }
}

/// Blocks while `*word == expected`, up to `timeout`. Not private: the
/// segment is shared between processes.
#[cfg(not(loom))]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Woke {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid aligned u32 for the call; the kernel reads
    // it and the timespec, nothing else.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
    if r == 0 {
        return Woke::Rung;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        // The bell moved between the announcement and the wait.
        Some(libc::EAGAIN) => Woke::Rung,
        // ETIMEDOUT, EINTR (a signal: the caller checks its flags).
        _ => Woke::TimedOut,
    }
}

#[cfg(not(loom))]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned u32; FUTEX_WAKE only reads the
    // address to find its waiters.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

// Under loom the kernel is not modelled: the model checks that a reader
// about to sleep always sees the bell move (see `loom_tests`).
#[cfg(loom)]
fn futex_wait(_: &AtomicU32, _: u32, _: Duration) -> Woke {
    Woke::TimedOut
}

#[cfg(loom)]
fn futex_wake(_: &AtomicU32) {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Words {
        asleep: AtomicU64,
        bell: AtomicU32,
        data: AtomicBool,
    }

    fn words() -> Arc<Words> {
        Arc::new(Words {
            asleep: AtomicU64::new(0),
            bell: AtomicU32::new(0),
            data: AtomicBool::new(false),
        })
    }

    fn bell_of(w: &Words) -> Doorbell {
        // SAFETY: the words live in the Arc, which every test keeps alive
        // longer than the doorbell.
        unsafe { Doorbell::new(&w.asleep, &w.bell) }
    }

    #[test]
    fn ringing_with_nobody_asleep_leaves_the_bell_alone() {
        let w = words();
        bell_of(&w).ring();
        assert_eq!(w.bell.load(Ordering::Relaxed), 0);
        assert_eq!(w.asleep.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_ready_ring_is_not_slept_on() {
        let w = words();
        let woke = bell_of(&w).sleep(|| true, Duration::from_secs(60));
        assert_eq!(woke, Woke::Ready);
        // The flag stays up: the next publish rings once, then it is down.
        assert_eq!(w.asleep.load(Ordering::Relaxed), 1);
        bell_of(&w).ring();
        assert_eq!(w.asleep.load(Ordering::Relaxed), 0);
        assert_eq!(w.bell.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_empty_ring_sleeps_until_the_timeout() {
        let w = words();
        let woke = bell_of(&w).sleep(|| false, Duration::from_millis(1));
        assert_eq!(woke, Woke::TimedOut);
    }

    #[test]
    fn a_publish_wakes_a_sleeper() {
        let w = words();
        let sleeper = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                // A minute: only the ring can end this sleep within the
                // test's life.
                let woke =
                    bell_of(&w).sleep(|| w.data.load(Ordering::Relaxed), Duration::from_secs(60));
                (woke, w.data.load(Ordering::Relaxed))
            })
        };
        // Publish only once the reader announced it sleeps (it may still be
        // between the announcement and the wait: the bell covers that).
        while w.asleep.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        w.data.store(true, Ordering::Relaxed);
        bell_of(&w).ring();
        let (woke, data) = sleeper.join().unwrap();
        assert!(matches!(woke, Woke::Rung | Woke::Ready), "{woke:?}");
        assert!(data);
    }
}
