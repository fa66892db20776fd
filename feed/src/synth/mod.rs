//! A deterministic synthetic ITCH 5.0 session, for the simulator, the
//! replay tool and tests.
//!
//! A [`Generator`] produces one trading day in the order a real feed sends
//! it: Start of Messages, a Stock Directory message for every symbol, Start
//! of System Hours, a trading action per symbol, opening imbalance
//! indications, Start of Market Hours and the opening crosses, then
//! continuous trading dominated by adds, deletes, cancels, executions and
//! replaces, with occasional trades, halts and other administrative
//! messages, and finally the closing crosses and the end-of-day system
//! events.
//!
//! The order flow is consistent: every execute, cancel, delete and replace
//! refers to a live order, and no execution or cancel exceeds the shares
//! the order has left. Timestamps never decrease; arrivals are bursty and
//! densest just after the open.
//!
//! The same [`SynthConfig`] (seed included) gives the same bytes on every
//! platform and every build. [`MoldPacker`] packs the messages into
//! MoldUDP64 packets.
//!
//! ```
//! use mdbus_feed::itch::{self, codes};
//! use mdbus_feed::synth::{Generator, SynthConfig};
//!
//! let config = SynthConfig { seed: 1, symbols: 10, order_messages: 1_000, ..SynthConfig::default() };
//! let mut day = Generator::new(&config).unwrap();
//! let first = day.next().unwrap();
//! assert_eq!(first.bytes()[0], b'S');
//! assert_eq!(first.bytes()[11], codes::event::START_OF_MESSAGES);
//! let rest: Vec<_> = day.collect();
//! assert!(rest.iter().all(|m| itch::decode(m.bytes()).is_ok()));
//! ```

mod generator;
mod packer;
mod rng;

pub use generator::{Generator, SynthMessage};
pub use packer::{MoldPacker, PackedPacket};

use crate::itch::Timestamp;

/// A set of ITCH message type bytes (all type bytes are ASCII, below 128).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TypeSet(u128);

impl TypeSet {
    /// No types.
    pub const EMPTY: Self = Self(0);

    /// The types the generator emits only occasionally, which
    /// [`SynthConfig::disabled`] may switch off: everything except System
    /// Event, Stock Directory and the core order messages (`A`, `E`, `X`,
    /// `D`, `U`).
    pub const OPTIONAL: Self = Self::EMPTY
        .with(b'F')
        .with(b'C')
        .with(b'P')
        .with(b'Q')
        .with(b'B')
        .with(b'I')
        .with(b'N')
        .with(b'H')
        .with(b'Y')
        .with(b'L')
        .with(b'V')
        .with(b'W')
        .with(b'K')
        .with(b'J')
        .with(b'h')
        .with(b'O');

    /// This set plus `t` (ignored if `t` is not ASCII).
    pub const fn with(self, t: u8) -> Self {
        if t < 128 {
            Self(self.0 | 1 << t)
        } else {
            self
        }
    }

    /// This set without `t`.
    pub const fn without(self, t: u8) -> Self {
        if t < 128 {
            Self(self.0 & !(1 << t))
        } else {
            self
        }
    }

    /// True if `t` is in the set.
    pub const fn contains(self, t: u8) -> bool {
        t < 128 && self.0 & (1 << t) != 0
    }

    /// True if every type of `self` is in `other`.
    pub const fn is_subset(self, other: Self) -> bool {
        self.0 & !other.0 == 0
    }

    /// The type bytes in the set, in ascending order.
    pub fn iter(self) -> impl Iterator<Item = u8> {
        (0u8..128).filter(move |&t| self.contains(t))
    }
}

impl std::fmt::Debug for TypeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter().map(char::from)).finish()
    }
}

/// What session to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthConfig {
    /// Seed of the pseudo-random sequence; the same config always gives
    /// the same session.
    pub seed: u64,
    /// Number of securities, given locate codes `1..=symbols`.
    pub symbols: u16,
    /// Messages of continuous trading (between the opening and closing
    /// crosses). The pre-open and closing phases add a few per symbol.
    pub order_messages: u64,
    /// Start of market hours. Start of Messages is 30 minutes earlier, so
    /// this must be 00:30 or later.
    pub open: Timestamp,
    /// End of market hours: continuous trading is spread so that it ends
    /// near this time on average.
    pub close: Timestamp,
    /// Arrival rate just after the open, as a multiple of the late-day
    /// rate; it decays over the first hour or so.
    pub open_surge: f64,
    /// Chance that a message starts a burst of messages nanoseconds to
    /// microseconds apart.
    pub burst_probability: f64,
    /// Most orders resting at once. The pool is allocated up front, so the
    /// generator never allocates while running.
    pub max_live_orders: usize,
    /// Optional message types (a subset of [`TypeSet::OPTIONAL`]) not to
    /// emit, e.g. for a consumer that does not know them.
    pub disabled: TypeSet,
}

impl Default for SynthConfig {
    /// 100 symbols, 100,000 messages of continuous trading, 09:30 to 16:00.
    fn default() -> Self {
        Self {
            seed: 0x5eed,
            symbols: 100,
            order_messages: 100_000,
            open: Timestamp::from_hms(9, 30, 0).unwrap_or(Timestamp::MIDNIGHT),
            close: Timestamp::from_hms(16, 0, 0).unwrap_or(Timestamp::MIDNIGHT),
            open_surge: 10.0,
            burst_probability: 0.02,
            max_live_orders: 100_000,
            disabled: TypeSet::EMPTY,
        }
    }
}

/// Why a [`SynthConfig`] cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SynthError {
    /// `symbols` is 0.
    #[error("a session needs at least one symbol")]
    NoSymbols,
    /// `max_live_orders` is 0.
    #[error("max_live_orders must be at least 1")]
    NoOrderPool,
    /// `open` is earlier than 00:30.
    #[error("open {open} leaves no room for the 30-minute pre-open; use 00:30 or later")]
    OpenTooEarly {
        /// The open given.
        open: Timestamp,
    },
    /// `close` is not after `open`.
    #[error("close {close} is not after open {open}")]
    CloseBeforeOpen {
        /// The open given.
        open: Timestamp,
        /// The close given.
        close: Timestamp,
    },
    /// A rate or probability that is negative, not finite, or (for the
    /// burst probability) 1 or more.
    #[error("{field} must be {requirement}; got {value}")]
    BadParameter {
        /// The field.
        field: &'static str,
        /// What it must be.
        requirement: &'static str,
        /// The value given.
        value: f64,
    },
    /// `disabled` holds a type the session cannot do without.
    #[error("{types:?} cannot be disabled; only {optional:?} can")]
    RequiredTypeDisabled {
        /// The required types asked to be disabled.
        types: TypeSet,
        /// The types that may be disabled.
        optional: TypeSet,
    },
}
