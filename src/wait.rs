//! What a polling loop does between two empty polls.
//!
//! A subscriber or session that finds nothing to read calls
//! [`Wait::wait`] before polling again. The choice trades latency for the
//! core it burns:
//!
//! | strategy | config string | between polls | use when |
//! | --- | --- | --- | --- |
//! | [`BusySpin`] | `"busy-spin"` | nothing | the core is dedicated (pinned, isolated); lowest latency |
//! | [`SpinHint`] | `"spin-hint"` | `std::hint::spin_loop()` (`pause` on x86, `isb`/`yield` on Arm) | a hyperthread sibling does useful work, or power matters; a `pause` costs roughly 10 to 140 cycles depending on the CPU |
//! | [`Yield`] | `"yield"` | `std::thread::yield_now()` (`sched_yield`) | the core is shared with other runnable threads; adds a syscall |
//! | [`Adaptive`] | `"adaptive"` | spins while traffic flows; after `threads.adaptive_spin_polls` empty polls and `threads.adaptive_quiet` (lengthened, up to `threads.adaptive_quiet_max`, while data comes after short sleeps) without data, blocks on the transport's event source for at most `threads.adaptive_max_block` | many subscribers share few cores, or a feed is idle for long stretches |
//!
//! Blocking needs the transport: [`Adaptive`] is driven by
//! [`Subscriber::poll_wait`](crate::Subscriber::poll_wait), which sleeps on
//! the segment's futex doorbell (shared memory) or in `epoll_wait` on the
//! sockets (UDP) or on the completion channel of the receive completion
//! queue (RDMA UD), and by [`Session::poll_wait`](crate::Session::poll_wait),
//! which sleeps in poll(2) on the socket (TCP) or on the completion channel
//! (RDMA RC; in `write` mode the sender adds one write-with-immediate
//! behind its next message once the receiver has said it sleeps, see
//! docs/RDMA.md). As a plain [`Wait`] (a sender waiting for credit)
//! `"adaptive"` spins with the hint. Every block is bounded by `adaptive_max_block`, so a loop that
//! checks a stop flag (set by SIGINT or SIGTERM) between polls sees it
//! within that time; after [`wake_on_stop`], [`stop_waits`] (called from
//! the signal handler) ends every block at once, and an idle RDMA RC
//! receiver then blocks until its next keep-alive instead.
//!
//! None of them allocates or takes a lock; only [`Yield`] makes a system
//! call. The unit structs let a hot loop be generic over the strategy and
//! compile to the bare instruction; [`WaitStrategy`] is the same choice as
//! a value read from configuration:
//!
//! ```
//! use mdbus::wait::{Wait, WaitStrategy};
//!
//! #[derive(serde::Deserialize)]
//! struct Polling {
//!     wait: WaitStrategy,
//! }
//! let cfg: Polling = toml::from_str(r#"wait = "spin-hint""#).unwrap();
//! assert_eq!(cfg.wait, WaitStrategy::SpinHint);
//!
//! let mut polls = 0;
//! let mut wait = cfg.wait;
//! wait.wait_until(|| {
//!     polls += 1;
//!     polls == 3
//! });
//! assert_eq!(polls, 3);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// A way to pass the time between two empty polls.
///
/// Implementations must not allocate, lock or block; they may keep state
/// (a backoff counter, say), hence `&mut self`.
pub trait Wait {
    /// Called once after each poll that found nothing.
    fn wait(&mut self);

    /// Polls `ready` until it returns `true`, calling [`Wait::wait`] after
    /// each `false`.
    #[inline]
    fn wait_until(&mut self, mut ready: impl FnMut() -> bool) {
        while !ready() {
            self.wait();
        }
    }
}

/// Poll again at once. Lowest latency; keeps the core at full power and
/// starves a hyperthread sibling. Use on a dedicated, pinned core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusySpin;

impl Wait for BusySpin {
    #[inline(always)]
    fn wait(&mut self) {}
}

/// Issue a spin-loop hint (`pause` on x86) before polling again: lets a
/// hyperthread sibling run and saves power, at the cost of the hint itself
/// (roughly 10 to 140 cycles, depending on the CPU) added to the latency.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinHint;

impl Wait for SpinHint {
    #[inline(always)]
    fn wait(&mut self) {
        std::hint::spin_loop();
    }
}

/// Give the core to another runnable thread (`sched_yield`) before polling
/// again. For cores shared with other work; each empty poll costs a system
/// call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Yield;

impl Wait for Yield {
    #[inline]
    fn wait(&mut self) {
        std::thread::yield_now();
    }
}

/// A wait strategy chosen at run time, as written in configuration:
/// `"busy-spin"` (the default), `"spin-hint"` or `"yield"`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// See [`BusySpin`].
    #[default]
    BusySpin,
    /// See [`SpinHint`].
    SpinHint,
    /// See [`Yield`].
    Yield,
    /// See [`Adaptive`].
    Adaptive,
}

impl WaitStrategy {
    /// Every strategy, in the order of the table in the module docs.
    pub const ALL: [WaitStrategy; 4] = [
        WaitStrategy::BusySpin,
        WaitStrategy::SpinHint,
        WaitStrategy::Yield,
        WaitStrategy::Adaptive,
    ];

    /// The configuration string: `"busy-spin"`, `"spin-hint"`, `"yield"` or
    /// `"adaptive"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitStrategy::BusySpin => "busy-spin",
            WaitStrategy::SpinHint => "spin-hint",
            WaitStrategy::Yield => "yield",
            WaitStrategy::Adaptive => "adaptive",
        }
    }
}

impl Wait for WaitStrategy {
    #[inline]
    fn wait(&mut self) {
        match self {
            WaitStrategy::BusySpin => BusySpin.wait(),
            WaitStrategy::SpinHint => SpinHint.wait(),
            WaitStrategy::Yield => Yield.wait(),
            // Without an event source to block on, adaptive spins politely.
            WaitStrategy::Adaptive => SpinHint.wait(),
        }
    }
}

impl fmt::Display for WaitStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no wait strategy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown wait strategy {0:?}: expected \"busy-spin\", \"spin-hint\", \"yield\" or \"adaptive\""
)]
pub struct UnknownWaitStrategy(pub String);

impl FromStr for WaitStrategy {
    type Err = UnknownWaitStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WaitStrategy::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| UnknownWaitStrategy(s.to_owned()))
    }
}

/// The thresholds of [`Adaptive`]: `threads.adaptive_spin_polls`,
/// `threads.adaptive_quiet`, `threads.adaptive_quiet_max` and
/// `threads.adaptive_max_block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// Consecutive empty polls before blocking is considered (at least 1).
    pub spin_polls: u32,
    /// And at least this long without data: bursts with short gaps stay
    /// on the spinning path.
    pub quiet: Duration,
    /// The longest the quiet period grows to while wake-ups keep landing
    /// on the data's path (see [`Adaptive::after_poll`]): a stream whose
    /// gaps are shorter than this ends up spinning through them. At most
    /// 60 s; at or below `quiet` the quiet period never grows.
    pub quiet_max: Duration,
    /// The longest one block lasts; bounds how late a stop flag (SIGINT,
    /// SIGTERM) and the transport's timers (liveness, retransmit
    /// requests) are looked at. From 1 us to 1 s.
    pub max_block: Duration,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            spin_polls: 100,
            quiet: Duration::from_micros(500),
            quiet_max: Duration::from_millis(32),
            max_block: Duration::from_millis(50),
        }
    }
}

impl AdaptiveConfig {
    /// Checks the thresholds; the error names the key and the rule.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.spin_polls == 0 {
            return Err((
                "adaptive_spin_polls",
                "must be at least 1: a poll that finds data must never block".into(),
            ));
        }
        if self.max_block < Duration::from_micros(1) || self.max_block > Duration::from_secs(1) {
            return Err((
                "adaptive_max_block",
                format!(
                    "{:?} is out of range: allowed 1us to 1s (it bounds how late a stop signal is seen)",
                    self.max_block
                ),
            ));
        }
        if self.quiet > Duration::from_secs(60) {
            return Err((
                "adaptive_quiet",
                format!("{:?} is out of range: allowed 0s to 60s", self.quiet),
            ));
        }
        if self.quiet_max > Duration::from_secs(60) {
            return Err((
                "adaptive_quiet_max",
                format!("{:?} is out of range: allowed 0s to 60s", self.quiet_max),
            ));
        }
        Ok(())
    }
}

/// What an [`Adaptive`] wait did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdaptiveStats {
    /// Blocks on the event source.
    pub blocks: u64,
    /// Blocks that ended with an event (data, or the publisher's bell).
    pub woken: u64,
}

/// Spin while traffic flows, block on the transport's event source after a
/// quiet period, and spin again from the first event. Keeps its state
/// between polls; one per polling loop.
///
/// ```
/// use std::time::Duration;
/// use mdbus::wait::{Adaptive, AdaptiveConfig};
///
/// let mut wait = Adaptive::new(AdaptiveConfig {
///     spin_polls: 2,
///     quiet: Duration::ZERO,
///     quiet_max: Duration::ZERO,
///     max_block: Duration::from_millis(10),
/// });
/// assert_eq!(wait.after_poll(0), None); // first empty poll: spin
/// assert_eq!(wait.after_poll(0), Some(Duration::from_millis(10))); // block
/// wait.woke(true); // an event: spin again
/// assert_eq!(wait.after_poll(0), None);
/// ```
#[derive(Debug, Clone)]
pub struct Adaptive {
    cfg: AdaptiveConfig,
    empty: u32,
    quiet_from: Option<Instant>,
    /// The quiet period now: `cfg.quiet`, lengthened while wake-ups keep
    /// landing on the data's path (see [`Adaptive::after_poll`]).
    quiet: Duration,
    /// When the current block began.
    block_from: Option<Instant>,
    /// The last block was short (under half of `max_block`): if a poll
    /// delivers data before the next block, the quiet period grows.
    short_block: bool,
    stats: AdaptiveStats,
}

/// The longest block of a transport that sleeps past `adaptive_max_block`
/// once [`stop_waits`] can end it (an idle RDMA RC session, a datagram
/// subscriber): bounds how late it sees what raises no event (an RC
/// peer's close, a disconnect) and its own timers' slack.
pub const LONG_BLOCK: Duration = Duration::from_secs(1);

/// Empty polls after an event before the wait blocks again (fewer when
/// `spin_polls` is smaller).
const WAKE_POLLS: u32 = 8;

impl Adaptive {
    /// A wait that starts on the spinning path.
    pub fn new(cfg: AdaptiveConfig) -> Adaptive {
        Adaptive {
            cfg,
            empty: 0,
            quiet_from: None,
            quiet: cfg.quiet,
            block_from: None,
            short_block: false,
            stats: AdaptiveStats::default(),
        }
    }

    /// The thresholds.
    pub fn config(&self) -> &AdaptiveConfig {
        &self.cfg
    }

    /// Counts so far.
    pub fn stats(&self) -> AdaptiveStats {
        self.stats
    }

    /// The quiet period in force: `adaptive_quiet`, or longer while
    /// wake-ups land on the data's path (see [`Adaptive::after_poll`]).
    pub fn quiet(&self) -> Duration {
        self.quiet
    }

    /// Records what a poll delivered; returns how long the caller should
    /// now block on its event source, or `None` to poll again at once.
    /// Reads the clock only once the empty polls reach the threshold.
    ///
    /// The quiet period adapts to the traffic. Data delivered after a
    /// block that ended before half of `adaptive_max_block` (woken by the
    /// data's event, or a nap or arming that ended early) means the
    /// stream's gaps are only a little longer than the quiet period: the
    /// sleep put a wake-up on the data's path, and in a request/response
    /// exchange it would do so on every round trip, however long a
    /// wake-up takes (milliseconds on a loaded or emulated host). So the
    /// quiet period doubles, up to `adaptive_quiet_max`. A wake that
    /// brings no data (a heartbeat, a keep-alive) changes nothing, and a
    /// block that lasts out half of `adaptive_max_block` halves it, down
    /// to `adaptive_quiet` (see [`Adaptive::woke`]). The cost: a stream
    /// whose gaps are all shorter than `adaptive_quiet_max` (50 messages
    /// a second under the default 32 ms) ends up spinning through them.
    #[inline]
    pub fn after_poll(&mut self, delivered: usize) -> Option<Duration> {
        if delivered > 0 {
            self.empty = 0;
            self.quiet_from = None;
            if self.short_block {
                self.grow();
            }
            return None;
        }
        if self.empty < self.cfg.spin_polls {
            self.empty += 1;
            if self.empty < self.cfg.spin_polls {
                std::hint::spin_loop();
                return None;
            }
        }
        self.after_empty_at(Instant::now())
    }

    #[cold]
    fn grow(&mut self) {
        self.short_block = false;
        self.quiet = (self.quiet * 2).min(self.cfg.quiet_max.max(self.cfg.quiet));
    }

    fn after_empty_at(&mut self, now: Instant) -> Option<Duration> {
        let since = *self.quiet_from.get_or_insert(now);
        if now.duration_since(since) < self.quiet {
            std::hint::spin_loop();
            return None;
        }
        // Blocking again without data since the last block: whatever woke
        // that one (a heartbeat, a keep-alive) was not the stream's data.
        self.short_block = false;
        self.block_from = Some(now);
        Some(self.cfg.max_block)
    }

    /// Records a block's end: `event` true when the event source fired,
    /// which puts the wait back on the spinning path: `spin_polls` empty
    /// polls, and the whole quiet period again from the first poll that
    /// delivers anything. A block that lasted out half of
    /// `adaptive_max_block` without an event means the stream is idle:
    /// the quiet period halves, down to `adaptive_quiet`. A zero
    /// `adaptive_quiet` stays zero.
    #[inline]
    pub fn woke(&mut self, event: bool) {
        self.woke_at(event, Instant::now());
    }

    fn woke_at(&mut self, event: bool, now: Instant) {
        self.stats.blocks += 1;
        let lasted = self
            .block_from
            .take()
            .map(|b| now.saturating_duration_since(b));
        // Whether this wake put a wake-up on the data's path is known only
        // when a poll delivers (or, if none does, the next block begins).
        self.short_block = lasted.is_some_and(|d| d < self.cfg.max_block / 2);
        if event {
            self.stats.woken += 1;
            // Spin again, but only the quiet period's worth of data earns
            // the quiet period: if the polls after this wake deliver
            // nothing (the event was a heartbeat, a keep-alive, a
            // retransmission already held), the wait blocks again after
            // at most WAKE_POLLS empty polls instead of spinning out the
            // whole quiet period, or all of `spin_polls`, once per
            // heartbeat. Every event source here fires after its data is
            // readable (a completion, a datagram, a ring's bell), so a few
            // polls find what woke the wait; on an emulated CPU each
            // empty poll costs microseconds.
            self.empty = self.cfg.spin_polls.saturating_sub(WAKE_POLLS);
            self.quiet_from = now.checked_sub(self.quiet);
        } else if !self.short_block && lasted.is_some() {
            self.quiet = (self.quiet / 2).max(self.cfg.quiet);
        }
    }
}

/// An epoll instance watching a few file descriptors for input: the event
/// source of socket transports. Closed on drop.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: std::os::fd::OwnedFd,
}

impl Epoll {
    /// Watches `fds` for readability (level-triggered), and the stop
    /// descriptor once [`wake_on_stop`] made it.
    pub(crate) fn new(fds: &[std::os::fd::RawFd]) -> std::io::Result<Epoll> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let ep = Epoll { fd };
        for &f in fds.iter().chain(stop_fd().as_ref()) {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: f as u64,
            };
            // SAFETY: valid epoll descriptor and event struct; `f` is a
            // descriptor the caller keeps open as long as the Epoll.
            let r = unsafe { libc::epoll_ctl(ep.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, f, &mut ev) };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(ep)
    }

    /// Blocks until a descriptor is readable or `timeout` passes; true when
    /// one is readable. A signal ends the wait early (false), and so does
    /// [`stop_waits`] when [`wake_on_stop`] came before this epoll was made.
    pub(crate) fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: valid descriptor; `ev` has room for the one event asked.
        let n =
            unsafe { libc::epoll_wait(self.fd.as_raw_fd(), ev.as_mut_ptr(), 1, millis(timeout)) };
        let stop = stop_fd().map(|f| f as u64);
        ready(n).map(|r| r && Some(ev[0].u64) != stop)
    }
}

/// Blocks in poll(2) until `fd` has one of `events` (`POLLIN`, `POLLOUT`)
/// or `timeout` passes; true when it has (or reports an error or hang-up,
/// which the next poll of the transport reads). A signal ends the wait
/// early (false): poll(2) is never restarted after a handler, whatever
/// `SA_RESTART` says, so a stop flag set by SIGINT or SIGTERM is seen at
/// once by a thread the signal lands on, and within `timeout` by others;
/// after [`wake_on_stop`], [`stop_waits`] ends it at once on every thread
/// (false). The event source of one-descriptor transports (a TCP session,
/// a verbs completion channel); no state, no allocation.
pub(crate) fn poll_fd(
    fd: std::os::fd::RawFd,
    events: libc::c_short,
    timeout: Duration,
) -> std::io::Result<bool> {
    let mut p = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: stop_fd().unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two valid pollfds (poll(2) skips a negative descriptor); the
    // caller keeps `fd` open for the call, the stop descriptor is never
    // closed.
    let n = unsafe { libc::poll(p.as_mut_ptr(), 2, millis(timeout)) };
    ready(n).map(|_| p[0].revents != 0)
}

/// The descriptor [`stop_waits`] makes readable, once [`wake_on_stop`] made
/// it; never closed.
static STOP: std::sync::OnceLock<std::os::fd::OwnedFd> = std::sync::OnceLock::new();

fn stop_fd() -> Option<std::os::fd::RawFd> {
    use std::os::fd::AsRawFd;
    STOP.get().map(|f| f.as_raw_fd())
}

/// Lets [`stop_waits`] end every blocking wait of the library at once, on
/// every thread, and in return lets a sleeping RDMA RC session (`send`
/// and `write-imm` modes) block past `adaptive_max_block`, until its next
/// timer (the keep-alive, at most `verbs.keepalive_interval`): fewer
/// wake-ups while idle. Call it once at start-up, and call
/// [`stop_waits`] from the SIGINT and SIGTERM handlers (mdbus's tools
/// do); without it every block stays bounded by `adaptive_max_block`,
/// which is what bounds how late a stop flag is seen. Idempotent.
///
/// # Errors
/// The system refused an eventfd.
pub fn wake_on_stop() -> std::io::Result<()> {
    use std::os::fd::FromRawFd;
    if STOP.get().is_some() {
        return Ok(());
    }
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns. A thread
    // that loses a race here closes its own; the winner's stays.
    let _ = STOP.set(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// True once [`wake_on_stop`] succeeded: blocks may then outlast
/// `adaptive_max_block` where the transport has a later timer.
pub(crate) fn stop_wakes() -> bool {
    STOP.get().is_some()
}

/// Ends every blocking wait of the library now and from now on (each
/// returns as a timeout would): for the process's SIGINT and SIGTERM
/// handlers, once its loops have a stop flag to look at. Async-signal-safe
/// (an atomic load and one write(2)); does nothing before
/// [`wake_on_stop`].
pub fn stop_waits() {
    if let Some(fd) = stop_fd() {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd; a full
        // counter (EAGAIN) still leaves it readable, which is all a wait
        // looks at.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

/// The longest nap of a loop whose transport has no event source to wake
/// it (a session on shared memory): bounds both its idle cost (one wake-up
/// and one poll per nap) and how late the first message after a quiet
/// spell is seen. RDMA sessions without a channel (`write` mode, an
/// acceptor's shared receive queue) start with it and double it while
/// nothing comes, up to `adaptive_max_block`.
pub const NAP: Duration = Duration::from_millis(1);

/// Sleeps for `d` (rounded up to a millisecond) or until a signal
/// arrives, whichever is first: for a loop without an event source.
pub(crate) fn nap(d: Duration) {
    let mut p = libc::pollfd {
        fd: stop_fd().unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on the stop descriptor (or none: poll skips -1) is a
    // timed sleep that a signal or `stop_waits` interrupts (unlike
    // std::thread::sleep, which resumes).
    let _ = ready(unsafe { libc::poll(&mut p, 1, millis(d)) });
}

/// A block's timeout in milliseconds, rounded up: a sub-millisecond
/// timeout must still block.
fn millis(timeout: Duration) -> i32 {
    timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
}

/// What poll(2) or epoll_wait(2) returned: ready (true), timed out or
/// interrupted by a signal (false), or the error.
fn ready(n: i32) -> std::io::Result<bool> {
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Cfg {
        wait: WaitStrategy,
    }

    #[derive(Debug, serde::Deserialize)]
    struct CfgWithDefault {
        #[serde(default)]
        wait: WaitStrategy,
    }

    #[test]
    fn deserializes_from_config_strings() {
        for (text, expected) in [
            ("busy-spin", WaitStrategy::BusySpin),
            ("spin-hint", WaitStrategy::SpinHint),
            ("yield", WaitStrategy::Yield),
            ("adaptive", WaitStrategy::Adaptive),
        ] {
            let cfg: Cfg = toml::from_str(&format!("wait = \"{text}\"")).unwrap();
            assert_eq!(cfg.wait, expected);
            assert_eq!(text.parse::<WaitStrategy>().unwrap(), expected);
            assert_eq!(expected.to_string(), text);
        }
    }

    #[test]
    fn rejects_unknown_strings() {
        for text in ["busy_spin", "BusySpin", "sleep", ""] {
            assert!(toml::from_str::<Cfg>(&format!("wait = \"{text}\"")).is_err());
            let err = text.parse::<WaitStrategy>().unwrap_err();
            assert_eq!(err, UnknownWaitStrategy(text.to_owned()));
            assert!(err.to_string().contains("spin-hint"));
        }
    }

    #[test]
    fn defaults_to_busy_spin() {
        assert_eq!(WaitStrategy::default(), WaitStrategy::BusySpin);
        let cfg: CfgWithDefault = toml::from_str("").unwrap();
        assert_eq!(cfg.wait, WaitStrategy::BusySpin);
    }

    #[test]
    fn serializes_to_the_config_string() {
        #[derive(serde::Serialize)]
        struct Out {
            wait: WaitStrategy,
        }
        let text = toml::to_string(&Out {
            wait: WaitStrategy::SpinHint,
        })
        .unwrap();
        assert_eq!(text.trim(), "wait = \"spin-hint\"");
    }

    /// Counts the waits between polls.
    struct Counting<W> {
        inner: W,
        waits: usize,
    }

    impl<W: Wait> Wait for Counting<W> {
        fn wait(&mut self) {
            self.waits += 1;
            self.inner.wait();
        }
    }

    #[test]
    fn wait_until_waits_once_per_empty_poll() {
        for strategy in WaitStrategy::ALL {
            let mut counting = Counting {
                inner: strategy,
                waits: 0,
            };
            let mut polls = 0;
            counting.wait_until(|| {
                polls += 1;
                polls == 5
            });
            assert_eq!(polls, 5, "{strategy}");
            assert_eq!(counting.waits, 4, "{strategy}");
        }
    }

    fn quick(spin_polls: u32) -> AdaptiveConfig {
        AdaptiveConfig {
            spin_polls,
            quiet: Duration::ZERO,
            quiet_max: Duration::ZERO,
            max_block: Duration::from_millis(5),
        }
    }

    #[test]
    fn adaptive_blocks_after_the_empty_polls_and_spins_after_an_event() {
        let mut w = Adaptive::new(quick(3));
        assert_eq!(w.after_poll(0), None);
        assert_eq!(w.after_poll(0), None);
        assert_eq!(w.after_poll(0), Some(Duration::from_millis(5)));
        // A block that timed out: stays on the blocking path.
        w.woke(false);
        assert_eq!(w.after_poll(0), Some(Duration::from_millis(5)));
        // An event: spins again for the full count.
        w.woke(true);
        assert_eq!(w.after_poll(0), None);
        assert_eq!(w.after_poll(0), None);
        assert_eq!(w.after_poll(0), Some(Duration::from_millis(5)));
        // Data resets the count too.
        assert_eq!(w.after_poll(4), None);
        assert_eq!(w.after_poll(0), None);
        assert_eq!(
            w.stats(),
            AdaptiveStats {
                blocks: 2,
                woken: 1
            }
        );
    }

    /// 500 us quiet growing to at most 4 ms, blocks of at most 50 ms, one
    /// empty poll before the clock is read.
    fn growing() -> AdaptiveConfig {
        AdaptiveConfig {
            spin_polls: 1,
            quiet: Duration::from_micros(500),
            quiet_max: Duration::from_millis(4),
            max_block: Duration::from_millis(50),
        }
    }

    /// The fake clock's microsecond `us`.
    fn clock() -> impl Fn(u64) -> Instant {
        let t0 = Instant::now();
        move |us| t0 + Duration::from_micros(us)
    }

    /// Data, then empty polls from `from` us until the quiet period in
    /// force has passed and the wait blocks; returns when it blocked.
    fn quiet_then_block(w: &mut Adaptive, at: &impl Fn(u64) -> Instant, from: u64) -> u64 {
        assert_eq!(w.after_poll(1), None);
        let q = w.quiet().as_micros() as u64;
        assert_eq!(w.after_empty_at(at(from)), None);
        assert_eq!(w.after_empty_at(at(from + q - 1)), None);
        assert_eq!(w.after_empty_at(at(from + q)), Some(w.config().max_block));
        from + q
    }

    #[test]
    fn slow_wake_ups_on_the_data_path_grow_the_quiet_period_until_it_spins_through() {
        let cfg = growing();
        let at = clock();
        let mut w = Adaptive::new(cfg);
        // Ping-pong where each wake-up takes 5 ms (an emulated or loaded
        // host): the reply wakes the sleeper 5 ms into its block, ten
        // quiet periods after the last data, and the poll after the wake
        // delivers it. Each round trip doubles the quiet period, up to the
        // 4 ms cap.
        let mut t = 0;
        for (before, after) in [
            (500u64, 1_000u64),
            (1_000, 2_000),
            (2_000, 4_000),
            (4_000, 4_000),
        ] {
            let blocked = quiet_then_block(&mut w, &at, t);
            assert_eq!(w.quiet().as_micros() as u64, before);
            w.woke_at(true, at(blocked + 5_000));
            // The wake alone decides nothing ...
            assert_eq!(w.quiet().as_micros() as u64, before);
            t = blocked + 5_001;
            // ... the data it brings does.
            assert_eq!(w.after_poll(1), None);
            assert_eq!(w.quiet().as_micros() as u64, after, "round trip at {t}");
        }
        // With the peer now answering within the 4 ms spun, the reply
        // arrives before the wait blocks: no blocks, no change.
        assert_eq!(w.after_empty_at(at(t + 1)), None);
        assert_eq!(w.after_empty_at(at(t + 3_999)), None);
        assert_eq!(w.after_poll(1), None);
        assert_eq!(w.quiet(), cfg.quiet_max);
        assert_eq!(
            w.stats(),
            AdaptiveStats {
                blocks: 4,
                woken: 4
            }
        );
    }

    #[test]
    fn wakes_that_bring_no_data_never_grow_the_quiet_period() {
        let cfg = growing();
        let at = clock();
        let mut w = Adaptive::new(cfg);
        let blocked = quiet_then_block(&mut w, &at, 0);
        // A heartbeat every 3 ms (short blocks, each woken by an event)
        // to a subscriber whose stream has stopped: each wake blocks again
        // at the first empty poll, and the quiet period stays put.
        let mut t = blocked;
        for _ in 0..100 {
            t += 3_000;
            w.woke_at(true, at(t));
            assert_eq!(w.after_empty_at(at(t + 1)), Some(cfg.max_block));
            assert_eq!(w.quiet(), cfg.quiet);
            t += 1;
        }
        // Even when the heartbeats come at once after the data (within
        // the old rule's four quiet periods).
        let blocked = quiet_then_block(&mut w, &at, 1_000_000);
        w.woke_at(true, at(blocked + 10));
        assert_eq!(w.after_empty_at(at(blocked + 11)), Some(cfg.max_block));
        assert_eq!(w.quiet(), cfg.quiet);
        // A short block without an event (a nap, an arming that returns at
        // once, a signal) followed by no data changes nothing either.
        w.woke_at(false, at(blocked + 1_011));
        assert_eq!(w.after_empty_at(at(blocked + 1_012)), Some(cfg.max_block));
        w.woke_at(false, at(blocked + 2_012));
        assert_eq!(w.quiet(), cfg.quiet);
        assert_eq!(
            w.stats(),
            AdaptiveStats {
                blocks: 103,
                woken: 101
            }
        );
    }

    #[test]
    fn data_after_a_long_block_does_not_grow_and_idle_blocks_shrink_it_back() {
        let cfg = growing();
        let at = clock();
        let mut w = Adaptive::new(cfg);
        // Grown to the cap by three slow round trips.
        let mut t = 0;
        for _ in 0..3 {
            let blocked = quiet_then_block(&mut w, &at, t);
            w.woke_at(true, at(blocked + 5_000));
            t = blocked + 5_001;
        }
        assert_eq!(w.after_poll(1), None);
        assert_eq!(w.quiet(), Duration::from_millis(4));
        // A message 30 ms into a block (past half of max_block): a sparse
        // stream, not a wake-up on its path; the quiet period stays.
        let blocked = quiet_then_block(&mut w, &at, 1_000_000);
        w.woke_at(true, at(blocked + 30_000));
        assert_eq!(w.after_poll(1), None);
        assert_eq!(w.quiet(), Duration::from_millis(4));
        // The stream stops: each block that times out at 50 ms halves it,
        // down to the configured 500 us and no further.
        let blocked = quiet_then_block(&mut w, &at, 2_000_000);
        let mut t = blocked;
        for expected in [2_000u64, 1_000, 500, 500] {
            t += 50_000;
            w.woke_at(false, at(t));
            assert_eq!(w.quiet().as_micros() as u64, expected);
            assert_eq!(w.after_empty_at(at(t + 1)), Some(cfg.max_block));
            t += 1;
        }
        // A block cut short without an event (a signal) does not halve.
        let grown = quiet_then_block(&mut w, &at, 3_000_000);
        w.woke_at(true, at(grown + 1_000));
        assert_eq!(w.after_poll(1), None);
        assert_eq!(w.quiet(), Duration::from_millis(1));
        let blocked = quiet_then_block(&mut w, &at, 4_000_000);
        w.woke_at(false, at(blocked + 24_000));
        assert_eq!(w.quiet(), Duration::from_millis(1));
    }

    #[test]
    fn a_low_rate_stream_spins_once_its_gaps_are_under_the_cap() {
        // 50 messages a second (20 ms gaps) under the default thresholds:
        // each message wakes a block that began 19.5 ms earlier, under
        // half of max_block, so the quiet period doubles per message until
        // the 32 ms cap covers the gap; from then on the wait never
        // blocks: the documented cost of the rule.
        let cfg = AdaptiveConfig {
            spin_polls: 1,
            ..AdaptiveConfig::default()
        };
        let at = clock();
        let mut w = Adaptive::new(cfg);
        let mut msg = 0;
        let mut blocks = 0;
        for _ in 0..10 {
            assert_eq!(w.after_poll(1), None);
            let q = w.quiet().as_micros() as u64;
            assert_eq!(w.after_empty_at(at(msg)), None);
            if q < 20_000 {
                assert_eq!(w.after_empty_at(at(msg + q)), Some(cfg.max_block));
                blocks += 1;
                w.woke_at(true, at(msg + 20_000));
            } else {
                assert_eq!(w.after_empty_at(at(msg + 19_999)), None);
            }
            msg += 20_000;
        }
        assert_eq!(w.quiet(), Duration::from_millis(32));
        assert_eq!(blocks, 6);
        // With the cap set below the gap (5 ms), it sleeps 15 ms of every
        // 20 ms instead, and pays a wake-up per message.
        let capped = AdaptiveConfig {
            quiet_max: Duration::from_millis(5),
            ..cfg
        };
        let mut w = Adaptive::new(capped);
        for k in 0..10u64 {
            let msg = 1_000_000 + 20_000 * k;
            assert_eq!(w.after_poll(1), None);
            let q = w.quiet().as_micros() as u64;
            assert_eq!(w.after_empty_at(at(msg)), None);
            assert_eq!(w.after_empty_at(at(msg + q)), Some(capped.max_block));
            w.woke_at(true, at(msg + 20_000));
        }
        assert_eq!(w.quiet(), Duration::from_millis(5));
        assert_eq!(w.stats().blocks, 10);
    }

    #[test]
    fn a_wake_without_data_blocks_again_after_a_few_polls_not_spin_polls() {
        let cfg = AdaptiveConfig {
            spin_polls: 100,
            ..AdaptiveConfig::default()
        };
        let mut w = Adaptive::new(cfg);
        let at = clock();
        assert_eq!(w.after_poll(1), None);
        assert_eq!(w.after_empty_at(at(0)), None);
        assert_eq!(w.after_empty_at(at(500)), Some(cfg.max_block));
        // A heartbeat's event: eight empty polls, then a block again.
        w.woke(true);
        for _ in 1..WAKE_POLLS {
            assert_eq!(w.after_poll(0), None);
        }
        assert_eq!(w.after_poll(0), Some(cfg.max_block));
        // Data after a wake: the full count and quiet period again.
        w.woke(true);
        assert_eq!(w.after_poll(1), None);
        for _ in 1..100 {
            assert_eq!(w.after_poll(0), None);
        }
        assert_eq!(
            w.stats(),
            AdaptiveStats {
                blocks: 2,
                woken: 2
            }
        );
    }

    #[test]
    fn adaptive_waits_out_the_quiet_period() {
        let mut w = Adaptive::new(AdaptiveConfig {
            quiet: Duration::from_secs(3600),
            ..quick(1)
        });
        // The empty polls are reached at once, the quiet hour is not.
        for _ in 0..1000 {
            assert_eq!(w.after_poll(0), None);
        }
    }

    #[test]
    fn adaptive_thresholds_are_checked() {
        assert_eq!(AdaptiveConfig::default().check(), Ok(()));
        let cases = [
            (quick(0), "adaptive_spin_polls", "at least 1"),
            (
                AdaptiveConfig {
                    max_block: Duration::ZERO,
                    ..quick(1)
                },
                "adaptive_max_block",
                "allowed 1us to 1s",
            ),
            (
                AdaptiveConfig {
                    max_block: Duration::from_secs(2),
                    ..quick(1)
                },
                "adaptive_max_block",
                "stop signal",
            ),
            (
                AdaptiveConfig {
                    quiet: Duration::from_secs(61),
                    ..quick(1)
                },
                "adaptive_quiet",
                "allowed 0s to 60s",
            ),
            (
                AdaptiveConfig {
                    quiet_max: Duration::from_secs(61),
                    ..quick(1)
                },
                "adaptive_quiet_max",
                "allowed 0s to 60s",
            ),
        ];
        for (cfg, key, text) in cases {
            let (k, msg) = cfg.check().unwrap_err();
            assert_eq!(k, key);
            assert!(msg.contains(text), "{msg}");
        }
    }

    #[test]
    fn epoll_sees_a_readable_socket_and_times_out_on_a_silent_one() {
        use std::os::fd::AsRawFd;
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let ep = Epoll::new(&[rx.as_raw_fd()]).unwrap();
        assert!(!ep.wait(Duration::from_millis(1)).unwrap());
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        // A minute: only the datagram can end this wait within the test.
        assert!(ep.wait(Duration::from_secs(60)).unwrap());
    }

    #[test]
    fn wait_until_ready_at_once_never_waits() {
        let mut counting = Counting {
            inner: BusySpin,
            waits: 0,
        };
        counting.wait_until(|| true);
        assert_eq!(counting.waits, 0);
    }

    #[test]
    fn wait_until_sees_another_threads_store() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        for strategy in WaitStrategy::ALL {
            let flag = Arc::new(AtomicBool::new(false));
            let setter = {
                let flag = Arc::clone(&flag);
                std::thread::spawn(move || flag.store(true, Ordering::Release))
            };
            let mut wait = strategy;
            wait.wait_until(|| flag.load(Ordering::Acquire));
            setter.join().unwrap();
        }
    }
}
