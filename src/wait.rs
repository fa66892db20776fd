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
}

impl WaitStrategy {
    /// Every strategy, in the order of the table in the module docs.
    pub const ALL: [WaitStrategy; 3] = [
        WaitStrategy::BusySpin,
        WaitStrategy::SpinHint,
        WaitStrategy::Yield,
    ];

    /// The configuration string: `"busy-spin"`, `"spin-hint"` or `"yield"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitStrategy::BusySpin => "busy-spin",
            WaitStrategy::SpinHint => "spin-hint",
            WaitStrategy::Yield => "yield",
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
#[error("unknown wait strategy {0:?}: expected \"busy-spin\", \"spin-hint\" or \"yield\"")]
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
