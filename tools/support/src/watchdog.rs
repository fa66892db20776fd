//! Detects a dead peer, a dead parent, a stalled run or Ctrl-C from
//! inside a spin loop, at the cost of a counter increment per empty poll.

use std::time::{Duration, Instant};

use mdbus::wait::{Wait, WaitStrategy};

use crate::process::{parent_pid, Peer, PeerError};

/// Why a [`Watchdog`] stopped the loop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchdogError {
    /// The peer process exited, or this process's parent did.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// Nothing moved for too long.
    #[error("no progress for {:.1} s while {what}; the peer is stuck or gone ({hint})", stall.as_secs_f64())]
    Stalled {
        /// The limit.
        stall: Duration,
        /// What the loop was waiting for.
        what: &'static str,
        /// The option or variable that sets the limit.
        hint: &'static str,
    },
    /// SIGINT or SIGTERM arrived (see [`crate::signals`]).
    #[error("interrupted")]
    Interrupted,
}

/// A watchdog over a spin loop.
///
/// [`Watchdog::idle`] is called once per empty poll: it waits per the
/// strategy and, every 2^14 calls, checks the peer process (the parent's
/// view) or that this process still has its parent (the child's view),
/// the time since the last [`Watchdog::progress`], and, when asked to,
/// [`crate::signals::requested`].
pub struct Watchdog<'a> {
    peer: Option<&'a mut Peer>,
    wait: WaitStrategy,
    idle: u64,
    since: Instant,
    stall: Duration,
    what: &'static str,
    hint: &'static str,
    signals: bool,
}

impl<'a> Watchdog<'a> {
    const CHECK_EVERY: u64 = 1 << 14;

    /// Watches `peer` (if this process started it) during `what`,
    /// allowing `stall` without progress.
    pub fn new(
        peer: Option<&'a mut Peer>,
        wait: WaitStrategy,
        stall: Duration,
        what: &'static str,
    ) -> Self {
        Watchdog {
            peer,
            wait,
            idle: 0,
            since: Instant::now(),
            stall,
            what,
            hint: "timeout",
            signals: false,
        }
    }

    /// Names the option that sets the stall limit in the error.
    pub fn hint(mut self, hint: &'static str) -> Self {
        self.hint = hint;
        self
    }

    /// Also stops the loop on SIGINT or SIGTERM.
    pub fn on_signals(mut self) -> Self {
        self.signals = true;
        self
    }

    /// One empty poll.
    ///
    /// # Errors
    /// See [`WatchdogError`].
    #[inline(always)]
    pub fn idle(&mut self) -> Result<(), WatchdogError> {
        self.wait.wait();
        self.idle += 1;
        if self.idle % Self::CHECK_EVERY == 0 {
            self.check()
        } else {
            Ok(())
        }
    }

    /// The run moved forward (cheap enough to call once per message).
    #[inline(always)]
    pub fn progress(&mut self) {
        self.idle = 0;
    }

    #[cold]
    fn check(&mut self) -> Result<(), WatchdogError> {
        if self.signals && crate::signals::requested() {
            return Err(WatchdogError::Interrupted);
        }
        match &mut self.peer {
            Some(peer) => peer.check_alive()?,
            // Reparented to init: the parent is gone.
            None if parent_pid() == 1 => return Err(PeerError::Orphaned.into()),
            None => {}
        }
        if self.idle == Self::CHECK_EVERY {
            // First check since the last progress: the stall starts here.
            self.since = Instant::now();
        } else if self.since.elapsed() > self.stall {
            return Err(WatchdogError::Stalled {
                stall: self.stall,
                what: self.what,
                hint: self.hint,
            });
        }
        Ok(())
    }
}
