//! When each message is meant to be sent: the pace of a replay.
//!
//! A replay is open loop. Message `i` is due at `start + offset(i)`, where
//! the offset comes from the capture's own times: `(t(i) - t(0)) / speed`.
//! The publisher sends it then, or at once if it is already late, and the
//! message carries that intended time, never the time it actually left:
//! a stall in the sender delays the messages behind it, and their latency
//! shows it (no coordinated omission). At `max` there is no capture pace:
//! a message is due when the send loop reaches it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How fast a capture is replayed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// At the capture's pace divided by this factor's inverse: `1x` as
    /// captured, `10x` ten times faster.
    Speed(f64),
    /// As fast as the publisher can send.
    Max,
}

impl Rate {
    /// The speed factor, `None` at `max`.
    pub fn speed(self) -> Option<f64> {
        match self {
            Rate::Speed(s) => Some(s),
            Rate::Max => None,
        }
    }
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Rate, String> {
        if text == "max" {
            return Ok(Rate::Max);
        }
        let number = text.strip_suffix('x').unwrap_or(text);
        match number.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 1e12 => Ok(Rate::Speed(s)),
            _ => Err(format!(
                "expected max or a speed such as 1x, 10x or 0.5x (above 0), not {text:?}"
            )),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Speed(s) => write!(f, "{s}x"),
            Rate::Max => f.write_str("max"),
        }
    }
}

impl serde::Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Turns capture times into offsets from the start of the replay.
///
/// Times that go backwards (out-of-order packets in a capture) are taken
/// as no time passing. With `max_gap`, a pause in the capture longer than
/// that (in replay time) is shortened to it, so a day's idle stretches
/// (the night before the pre-open, a halt) do not stall a replay.
#[derive(Debug, Clone)]
pub struct Scheduler {
    speed: Option<f64>,
    // The longest pause, in capture nanoseconds (the replay-time limit
    // times the speed), so the sum below stays exact integer arithmetic.
    max_gap_capture_ns: Option<u64>,
    last: Option<u64>,
    // Capture time elapsed since the first message, pauses shortened.
    elapsed: u64,
    backwards: u64,
}

impl Scheduler {
    /// A schedule for `rate`, pauses shortened to `max_gap` (replay time)
    /// when given.
    pub fn new(rate: Rate, max_gap: Option<Duration>) -> Scheduler {
        let speed = rate.speed();
        let max_gap_capture_ns = match (speed, max_gap) {
            (Some(s), Some(g)) => Some((g.as_nanos() as f64 * s).min(u64::MAX as f64) as u64),
            _ => None,
        };
        Scheduler {
            speed,
            max_gap_capture_ns,
            last: None,
            elapsed: 0,
            backwards: 0,
        }
    }

    /// The offset from the start of the replay, in nanoseconds, of the
    /// message captured at `t` (any clock: only differences count). Always
    /// 0 at `max`. Never decreases.
    #[inline]
    pub fn offset(&mut self, t: u64) -> u64 {
        let Some(speed) = self.speed else { return 0 };
        if let Some(last) = self.last {
            let step = match t.checked_sub(last) {
                Some(d) => d,
                None => {
                    self.backwards += 1;
                    0
                }
            };
            let step = self.max_gap_capture_ns.map_or(step, |g| step.min(g));
            self.elapsed = self.elapsed.saturating_add(step);
        }
        self.last = Some(self.last.map_or(t, |l| l.max(t)));
        // Exact below 2^53 ns (104 days), far beyond any capture.
        (self.elapsed as f64 / speed) as u64
    }

    /// Messages whose time was earlier than the one before.
    pub fn backwards(&self) -> u64 {
        self.backwards
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!("max".parse(), Ok(Rate::Max));
        assert_eq!("1x".parse(), Ok(Rate::Speed(1.0)));
        assert_eq!("10x".parse(), Ok(Rate::Speed(10.0)));
        assert_eq!("0.5x".parse(), Ok(Rate::Speed(0.5)));
        assert_eq!("3".parse(), Ok(Rate::Speed(3.0)));
        for bad in ["0x", "-1x", "fast", "x", "nanx", "infx"] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(e.contains("expected max or a speed"), "{bad}: {e}");
        }
        assert_eq!(Rate::Speed(10.0).to_string(), "10x");
        assert_eq!(Rate::Max.to_string(), "max");
    }

    #[test]
    fn offsets_scale_with_speed() {
        let mut s = Scheduler::new(Rate::Speed(10.0), None);
        assert_eq!(s.offset(1_000), 0);
        assert_eq!(s.offset(11_000), 1_000);
        assert_eq!(s.offset(1_000_011_000), 100_001_000);
    }

    #[test]
    fn backwards_times_count_as_no_time() {
        let mut s = Scheduler::new(Rate::Speed(1.0), None);
        assert_eq!(s.offset(500), 0);
        assert_eq!(s.offset(400), 0);
        assert_eq!(s.offset(600), 100);
        assert_eq!(s.backwards(), 1);
    }

    #[test]
    fn long_pauses_are_shortened_in_replay_time() {
        let mut s = Scheduler::new(Rate::Speed(2.0), Some(Duration::from_millis(1)));
        assert_eq!(s.offset(0), 0);
        // 10 s of capture at 2x would be 5 s; shortened to 1 ms.
        assert_eq!(s.offset(10_000_000_000), 1_000_000);
        // A short step is kept: 1 ms of capture is 0.5 ms of replay.
        assert_eq!(s.offset(10_001_000_000), 1_500_000);
    }

    #[test]
    fn max_has_no_schedule() {
        let mut s = Scheduler::new(Rate::Max, Some(Duration::from_millis(1)));
        assert_eq!(s.offset(5), 0);
        assert_eq!(s.offset(5_000_000_000), 0);
    }
}
