//! The doorbell of a shared-memory ring: lets a reader with nothing to read
//! sleep in the kernel (a futex on a word of the segment) instead of
//! spinning. While no reader that may sleep is registered, the writer's
//! cost per message is one plain load and one branch (no fence); with one
//! registered, one fence, one load and one branch while nobody sleeps.
//!
//! Three words, each on its own cache line of the segment header:
//!
//! - `sleepers`: how many readers registered that they may sleep (adaptive
//!   waiting). A reader registers before its first sleep and deregisters
//!   when it goes. The writer only reads it, with a plain load, per message.
//! - `asleep`: nonzero while at least one reader may be asleep: each
//!   reader adds 1 before it sleeps; the writer, finding it nonzero after a
//!   publish, rings and then sets it back to 0 only if nobody announced
//!   since it looked (compare-and-swap), so a reader killed while asleep
//!   costs the writer one wake-up system call, not one per message forever,
//!   and a reader announcing while the writer rings is never erased.
//! - `bell`: a sequence the writer increments when it rings; readers
//!   `FUTEX_WAIT` on it with the value they saw before they announced.
//!
//! No wake-up is lost. The reader loads `bell`, adds 1 to `asleep`, and
//! then (after a SeqCst fence) looks at the ring; the writer stores the
//! message, and then (after a SeqCst fence) loads `asleep`. The two fences
//! order the store-then-load pairs (Dekker): either the reader's look sees
//! the message, or the writer's load sees the announcement and increments
//! `bell` after the reader loaded it, so the reader's `FUTEX_WAIT` either
//! fails at once (the word changed) or is woken by the `FUTEX_WAKE` that
//! follows the increment. Loading `bell` before announcing matters: a
//! reader that announces again while the writer rings for its previous
//! announcement must not sleep on the value that ring already produced
//! (with the load after, the writer's clearing of a flag could erase the
//! second announcement and the reader would sleep to its timeout with a
//! message waiting). `loom_tests` checks the property in every
//! interleaving, over two messages and two sleeps.
//!
//! The writer skips its fence while `sleepers` reads 0. That is safe
//! because registering is an asymmetric barrier: the reader increments
//! `sleepers` and then calls `membarrier(MEMBARRIER_CMD_GLOBAL)`, which
//! returns only after every thread on the machine passed a full barrier.
//! A writer whose load of `sleepers` came before that barrier had its
//! message store ordered before it too, so the reader's first look (after
//! the call) sees the message; a writer whose load came after sees the
//! registration and fences. The call is slow (an RCU grace period), once
//! per subscriber. Where the kernel refuses it (before Linux 4.3, nohz_full,
//! seccomp) the reader's first sleep after registering is capped at
//! [`UNFENCED_FIRST_SLEEP`], so a message published at the instant of
//! registration is seen within that bound, never lost.
//!
//! The words live in a file shared with other processes, so each is
//! checked for what a hostile or stale value can do: a nonzero `sleepers`
//! (a reader killed while registered, or garbage) makes the writer fence
//! per message, as if a reader were registered, until the publisher
//! restarts with a fresh segment; a `sleepers` of 0 while a reader is
//! registered is noticed by that reader before each sleep, which registers
//! again; a value above [`MAX_SLEEPERS`] is left alone by (de)registration
//! (it reads as "may sleep"). A hostile `asleep` or `bell` makes the writer
//! ring needlessly or a reader sleep until its timeout, never more; every
//! sleep has a timeout.

#[cfg(loom)]
use loom::sync::atomic::AtomicU32;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::sync::{fence, AtomicU64, Ordering};

/// Registered sleepers beyond this are a hostile value, never a real count
/// (a segment has far fewer subscribers); registration leaves it alone.
pub const MAX_SLEEPERS: u64 = 1 << 20;

/// The longest first sleep after a registration that could not be made
/// with `membarrier` (see the module docs).
pub const UNFENCED_FIRST_SLEEP: Duration = Duration::from_millis(1);

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

/// A ring's doorbell: the addresses of its three words.
#[derive(Debug, Clone, Copy)]
pub struct Doorbell {
    sleepers: *const AtomicU64,
    asleep: *const AtomicU64,
    bell: *const AtomicU32,
}

// SAFETY: only addresses of shared memory that outlives the doorbell (the
// constructor's contract); every access is atomic.
unsafe impl Send for Doorbell {}

/// A reader's registration as one that may sleep; see [`Doorbell::register`].
#[derive(Debug, Default)]
pub struct Registration {
    registered: bool,
    /// The registration's barrier was the fallback (no `membarrier`) and
    /// the first sleep since has not happened yet.
    unfenced: bool,
}

impl Registration {
    /// Whether this reader is registered.
    pub fn is_registered(&self) -> bool {
        self.registered
    }
}

#[cfg(all(test, not(loom)))]
thread_local! {
    /// Fences the writer executed on this thread (tests).
    static WRITER_FENCES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Fences the writer's side executed on this thread so far (tests count
/// them instead of timing the fast path).
#[cfg(all(test, not(loom)))]
pub fn writer_fences() -> u64 {
    WRITER_FENCES.with(|c| c.get())
}

impl Doorbell {
    /// A doorbell on the words at `sleepers`, `asleep` and `bell`.
    ///
    /// # Safety
    /// All three must point to aligned words that stay mapped as long as the
    /// doorbell (or a copy) is used, and are accessed only atomically.
    pub unsafe fn new(
        sleepers: *const AtomicU64,
        asleep: *const AtomicU64,
        bell: *const AtomicU32,
    ) -> Doorbell {
        Doorbell {
            sleepers,
            asleep,
            bell,
        }
    }

    fn sleepers(&self) -> &AtomicU64 {
        // SAFETY: valid while the doorbell is used (constructor).
        unsafe { &*self.sleepers }
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
    /// announced it sleeps. One load and one branch while no reader is
    /// registered to sleep; one fence, one load, one branch more while one
    /// is but nobody sleeps.
    #[inline]
    pub fn ring(&self) {
        // Relaxed: a registration made concurrently is ordered by the
        // reader's membarrier (module docs), not by this load.
        if self.sleepers().load(Ordering::Relaxed) == 0 {
            return;
        }
        self.ring_fenced();
    }

    /// The writer's side regardless of registrations (its end: a reader
    /// that registers while the writer closes still learns of it now).
    #[inline]
    pub fn ring_fenced(&self) {
        #[cfg(all(test, not(loom)))]
        WRITER_FENCES.with(|c| c.set(c.get() + 1));
        // SeqCst: orders the publish before the load of the flag (the
        // store-load pair of the protocol in the module docs).
        fence(Ordering::SeqCst);
        let announced = self.asleep().load(Ordering::Relaxed);
        if announced != 0 {
            self.wake(announced);
        }
    }

    #[cold]
    #[inline(never)]
    fn wake(&self, announced: u64) {
        // Release: a reader whose futex check sees the new value also sees
        // the message published before it.
        self.bell().fetch_add(1, Ordering::Release);
        futex_wake(self.bell());
        // Only the announcements this ring answered: one made since keeps
        // the count nonzero and is answered by the next publish.
        let _ = self
            .asleep()
            .compare_exchange(announced, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The reader's side, once before it may sleep: counts it in
    /// `sleepers` and makes every writer see that before its next publish
    /// (module docs). Does nothing when already registered and the count
    /// is still nonzero; registers again when a hostile 0 erased it.
    pub fn register(&self, reg: &mut Registration) {
        if reg.registered && self.sleepers().load(Ordering::SeqCst) != 0 {
            return;
        }
        // A count above the bound is garbage that already reads as "may
        // sleep": leave it, so it neither wraps nor grows.
        let _ = self
            .sleepers()
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_SLEEPERS).then(|| n + 1)
            });
        reg.registered = true;
        reg.unfenced = !global_barrier();
    }

    /// The reader's side when it goes: takes it out of `sleepers` (never
    /// below 0, and a count above the bound stays as it is).
    pub fn deregister(&self, reg: &mut Registration) {
        if !std::mem::take(&mut reg.registered) {
            return;
        }
        let _ = self
            .sleepers()
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| {
                (n > 0 && n <= MAX_SLEEPERS).then(|| n - 1)
            });
    }

    /// The reader's side, before a sleep: announces it and returns the
    /// bell's value to sleep on. The caller then looks at the ring and
    /// sleeps only if it is empty.
    #[inline]
    pub fn announce(&self) -> u32 {
        // Before the announcement: see the module docs.
        let seen = self.bell().load(Ordering::Acquire);
        self.asleep().fetch_add(1, Ordering::SeqCst);
        // SeqCst: orders the announcement before the caller's look at the
        // ring (the other store-load pair).
        fence(Ordering::SeqCst);
        seen
    }

    /// Registers the reader (see [`register`](Self::register)), then sleeps
    /// up to `timeout` unless `ready()` (a look at the ring) finds
    /// something after the announcement.
    pub fn sleep(
        &self,
        reg: &mut Registration,
        ready: impl FnOnce() -> bool,
        timeout: Duration,
    ) -> Woke {
        self.register(reg);
        let timeout = match std::mem::take(&mut reg.unfenced) {
            true => timeout.min(UNFENCED_FIRST_SLEEP),
            false => timeout,
        };
        let seen = self.announce();
        if ready() {
            return Woke::Ready;
        }
        futex_wait(self.bell(), seen, timeout)
    }
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL)`: every thread of every process
/// passes a full barrier before it returns. False when the kernel refuses.
#[cfg(not(loom))]
fn global_barrier() -> bool {
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integer arguments and touches no memory
    // of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0) == 0 }
}

// Under loom a registration made before the writer starts is ordered by
// the thread spawn; the model checks the sleeping protocol after it.
#[cfg(loom)]
fn global_barrier() -> bool {
    true
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
    use std::sync::Arc;

    struct Words {
        sleepers: AtomicU64,
        asleep: AtomicU64,
        bell: AtomicU32,
        data: AtomicU64,
    }

    fn words() -> Arc<Words> {
        Arc::new(Words {
            sleepers: AtomicU64::new(0),
            asleep: AtomicU64::new(0),
            bell: AtomicU32::new(0),
            data: AtomicU64::new(0),
        })
    }

    fn bell_of(w: &Words) -> Doorbell {
        // SAFETY: the words live in the Arc, which every test keeps alive
        // longer than the doorbell.
        unsafe { Doorbell::new(&w.sleepers, &w.asleep, &w.bell) }
    }

    #[test]
    fn ringing_with_nobody_asleep_leaves_the_bell_alone() {
        let w = words();
        bell_of(&w).ring();
        assert_eq!(w.bell.load(Ordering::Relaxed), 0);
        assert_eq!(w.asleep.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_writer_with_no_registered_sleeper_never_fences() {
        let w = words();
        // A flag left up by a reader that never registered (or garbage):
        // without a registration the writer does not look at it.
        w.asleep.store(1, Ordering::Relaxed);
        let before = writer_fences();
        for _ in 0..10_000 {
            bell_of(&w).ring();
        }
        assert_eq!(writer_fences() - before, 0);
        assert_eq!(w.bell.load(Ordering::Relaxed), 0, "no wake-up either");
        // Registered: every publish fences, and the flag is answered once.
        let mut reg = Registration::default();
        bell_of(&w).register(&mut reg);
        for _ in 0..100 {
            bell_of(&w).ring();
        }
        assert_eq!(writer_fences() - before, 100);
        assert_eq!(w.bell.load(Ordering::Relaxed), 1);
        // Gone again: no fence.
        bell_of(&w).deregister(&mut reg);
        assert_eq!(w.sleepers.load(Ordering::Relaxed), 0);
        bell_of(&w).ring();
        assert_eq!(writer_fences() - before, 100);
    }

    #[test]
    fn registration_counts_readers_and_survives_hostile_values() {
        let w = words();
        let (mut a, mut b) = (Registration::default(), Registration::default());
        bell_of(&w).register(&mut a);
        bell_of(&w).register(&mut a);
        bell_of(&w).register(&mut b);
        assert_eq!(w.sleepers.load(Ordering::Relaxed), 2, "once per reader");
        // A hostile 0 erased both: the next sleep registers again.
        w.sleepers.store(0, Ordering::Relaxed);
        bell_of(&w).sleep(&mut a, || true, Duration::from_secs(60));
        assert_eq!(w.sleepers.load(Ordering::Relaxed), 1);
        bell_of(&w).deregister(&mut a);
        bell_of(&w).deregister(&mut b);
        bell_of(&w).deregister(&mut b);
        assert_eq!(w.sleepers.load(Ordering::Relaxed), 0, "never below 0");
        // Garbage above the bound neither wraps nor moves, and reads as
        // "may sleep".
        for garbage in [MAX_SLEEPERS + 1, u64::MAX] {
            w.sleepers.store(garbage, Ordering::Relaxed);
            bell_of(&w).register(&mut a);
            bell_of(&w).deregister(&mut a);
            assert_eq!(w.sleepers.load(Ordering::Relaxed), garbage);
            let before = writer_fences();
            bell_of(&w).ring();
            assert_eq!(writer_fences() - before, 1);
        }
    }

    #[test]
    fn a_ready_ring_is_not_slept_on() {
        let w = words();
        let mut reg = Registration::default();
        let woke = bell_of(&w).sleep(&mut reg, || true, Duration::from_secs(60));
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
        let mut reg = Registration::default();
        let woke = bell_of(&w).sleep(&mut reg, || false, Duration::from_millis(1));
        assert_eq!(woke, Woke::TimedOut);
    }

    /// Every one of many publishes wakes the reader sleeping for it: a lost
    /// wake-up would show as a sleep that ended by its (minute-long)
    /// timeout.
    #[test]
    fn a_sleeping_reader_wakes_for_every_message() {
        const ROUNDS: u64 = 2_000;
        let w = words();
        let sleeper = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                let mut reg = Registration::default();
                // Without membarrier the first sleep after registering is
                // capped (module docs); take it here, with nothing to wait
                // for, so every counted sleep has its full timeout.
                bell_of(&w).sleep(&mut reg, || true, Duration::ZERO);
                let (mut seen, mut timeouts) = (0, 0);
                while seen < ROUNDS {
                    let woke = bell_of(&w).sleep(
                        &mut reg,
                        || w.data.load(Ordering::Acquire) != seen,
                        Duration::from_secs(60),
                    );
                    timeouts += u64::from(woke == Woke::TimedOut);
                    seen = w.data.load(Ordering::Acquire);
                }
                bell_of(&w).deregister(&mut reg);
                (seen, timeouts)
            })
        };
        for i in 1..=ROUNDS {
            // Publish only once the reader announced it sleeps (it may
            // still be between the announcement and the wait: the bell
            // covers that).
            while w.asleep.load(Ordering::Relaxed) == 0 && !sleeper.is_finished() {
                std::thread::yield_now();
            }
            w.data.store(i, Ordering::Release);
            bell_of(&w).ring();
        }
        let (seen, timeouts) = sleeper.join().unwrap();
        assert_eq!(seen, ROUNDS);
        assert_eq!(timeouts, 0, "a sleep outlived its message");
        assert_eq!(w.sleepers.load(Ordering::Relaxed), 0);
    }
}
