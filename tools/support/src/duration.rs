//! One duration syntax for every tool's options and configuration:
//! a number of seconds (`10`, `1.5`), a number with one unit (`500ms`,
//! `1.5s`, `40us`, `2m`, `1h`), or several units in a row as `humantime`
//! reads them (`2m30s`, `1h 15m`). Configuration files
//! ([`deserialize`]) take the same syntax but insist on a unit: a bare
//! number in a file is too easily meant as milliseconds.

use std::time::Duration;

/// The units a decimal number may carry, in seconds.
const UNITS: &[(&str, f64)] = &[
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("min", 60.0),
    ("h", 3600.0),
];

/// Parses a duration (see the module's documentation).
///
/// ```
/// use std::time::Duration;
/// use mdbus_tool_support::duration::parse;
/// assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse("2m30s"), Ok(Duration::from_secs(150)));
/// ```
///
/// # Errors
/// Not a duration, negative, or too long to represent: a sentence naming
/// the text and the forms that work.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("`{text}` is not a duration: write it as 500ms, 1.5s, 2m30s or 1h");
    if t.is_empty() {
        return Err(bad());
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.contains('.') || unit.is_empty() {
        // A decimal, or a bare number of seconds: one unit at most.
        let value: f64 = number.parse().map_err(|_| bad())?;
        let scale = match unit.trim() {
            "" => 1.0,
            u => UNITS
                .iter()
                .find(|(name, _)| *name == u)
                .map(|(_, s)| *s)
                .ok_or_else(bad)?,
        };
        // Whole nanoseconds, rounded: 0.1us is 100ns, not 99.
        let nanos = (value * scale * 1e9).round();
        if !(0.0..u64::MAX as f64).contains(&nanos) {
            return Err(bad());
        }
        return Ok(Duration::from_nanos(nanos as u64));
    }
    humantime::parse_duration(t).map_err(|_| bad())
}

/// Parses a duration that must be longer than zero (an interval).
///
/// # Errors
/// As [`parse`], or zero.
pub fn parse_nonzero(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err(format!(
            "`{text}` is zero: the interval must be longer than 0"
        ));
    }
    Ok(d)
}

/// Parses a duration that names its unit (`5s`, not `5`).
///
/// # Errors
/// As [`parse`], or a bare number.
pub fn parse_with_unit(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "`{text}` has no unit: write it as 500ms, 1.5s, 2m30s or 1h"
        ));
    }
    parse(text)
}

/// Serde adapter for a duration in a configuration file:
/// `#[serde(with = "mdbus_tool_support::duration")]`.
///
/// # Errors
/// The value is not a string in the syntax of [`parse_with_unit`].
pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    parse_with_unit(&s).map_err(serde::de::Error::custom)
}

/// Serde adapter, the other way: a duration as `humantime` writes it
/// (`200us`, `1s 500ms`, `0s`), which [`deserialize`] reads back exactly.
///
/// # Errors
/// Those of the serializer.
pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_accepts_these() {
        let ok = [
            ("1.5s", Duration::from_millis(1500)),
            ("500ms", Duration::from_millis(500)),
            ("1h", Duration::from_secs(3600)),
            ("2m30s", Duration::from_secs(150)),
            ("2m", Duration::from_secs(120)),
            ("10s", Duration::from_secs(10)),
            ("40us", Duration::from_micros(40)),
            ("100ns", Duration::from_nanos(100)),
            ("0.1us", Duration::from_nanos(100)),
            ("3", Duration::from_secs(3)),
            ("0.25", Duration::from_millis(250)),
            ("0s", Duration::ZERO),
            (" 1h 15m ", Duration::from_secs(4500)),
            ("1.5min", Duration::from_secs(90)),
        ];
        for (text, want) in ok {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_text_is_a_sentence_naming_it() {
        for bad in [
            "",
            "soon",
            "-1s",
            "10 parsecs",
            "1.5.2s",
            "s",
            "1e400s",
            "1.5x",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.contains(&format!("`{bad}` is not a duration")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn files_name_the_unit() {
        assert!(parse_with_unit("5")
            .unwrap_err()
            .contains("`5` has no unit"));
        assert!(parse_with_unit("1.5").unwrap_err().contains("has no unit"));
        assert_eq!(parse_with_unit("2m30s"), Ok(Duration::from_secs(150)));
        assert_eq!(parse_with_unit("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn written_durations_read_back_exactly() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct T {
            #[serde(with = "super")]
            d: Duration,
        }
        for d in [
            Duration::ZERO,
            Duration::from_nanos(7),
            Duration::from_micros(200),
            Duration::from_millis(1500),
            Duration::from_secs(3725),
        ] {
            let text = toml::to_string(&T { d }).unwrap();
            assert_eq!(toml::from_str::<T>(&text).unwrap(), T { d }, "{text}");
        }
        assert_eq!(
            toml::to_string(&T {
                d: Duration::from_millis(1500)
            })
            .unwrap(),
            "d = \"1s 500ms\"\n"
        );
    }

    #[test]
    fn intervals_are_longer_than_zero() {
        assert!(parse_nonzero("0s").unwrap_err().contains("longer than 0"));
        assert_eq!(parse_nonzero("1s"), Ok(Duration::from_secs(1)));
    }
}
