//! `mdbus-replay synth`: a synthetic ITCH 5.0 trading day written as an
//! ITCH BinaryFILE, so the tool is useful without a real capture.
//!
//! The day comes from `mdbus_feed::synth::Generator`: Start of Messages,
//! a Stock Directory message per symbol, the pre-open, the opening
//! crosses, continuous trading dominated by adds, cancels, deletes,
//! executions and replaces, arrivals bursty and densest after the open,
//! then the closing crosses and the end of the day. A BinaryFILE has no
//! times of its own; each message's ITCH timestamp is its time, and that
//! is what a replay paces by.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use mdbus_feed::binaryfile::BinaryFileWriter;
use mdbus_feed::itch::Timestamp;
use mdbus_feed::synth::{Generator, SynthConfig};
use serde::Serialize;

use super::error::ReplayError;

/// Options of `mdbus-replay synth`.
#[derive(Debug, Clone, clap::Args)]
pub struct SynthArgs {
    /// Messages to write, the whole day included (at least a few per
    /// symbol for the pre-open and the close).
    #[arg(long, default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: u64,

    /// The BinaryFILE to write.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Securities in the session.
    #[arg(long, default_value_t = 100,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub symbols: u16,

    /// Seed: the same seed and options give the same file.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,

    /// Start of market hours, HH:MM:SS (the pre-open starts 30 minutes
    /// earlier).
    #[arg(long, default_value = "09:30:00", value_parser = parse_time)]
    pub open: Timestamp,

    /// End of market hours, HH:MM:SS. A short day (e.g. --close 09:31:00)
    /// makes a replay at the capture's pace practical.
    #[arg(long, default_value = "16:00:00", value_parser = parse_time)]
    pub close: Timestamp,

    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// What `synth` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct SynthReport {
    /// The file.
    pub out: String,
    /// Messages written.
    pub messages: u64,
    /// Bytes written.
    pub bytes: u64,
    /// ITCH timestamp of the first message, ns since midnight.
    pub first_ns: u64,
    /// ITCH timestamp of the last message.
    pub last_ns: u64,
    /// Messages per type, in type-letter order (a list: the letters are
    /// data, not keys; docs/JSON.md keeps keys snake_case).
    pub types: Vec<TypeCount>,
}

/// Messages of one ITCH type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeCount {
    /// The type letter.
    #[serde(rename = "type")]
    pub msg_type: String,
    /// Messages of that type.
    pub messages: u64,
}

/// Parses `HH:MM:SS`.
pub fn parse_time(text: &str) -> Result<Timestamp, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let nums: Option<Vec<u64>> = parts.iter().map(|p| p.parse().ok()).collect();
    match nums.as_deref() {
        Some([h, m, s]) if *m < 60 && *s < 60 => {
            Timestamp::from_hms(*h, *m, *s).ok_or_else(|| format!("{text} is not a time of day"))
        }
        _ => Err(format!("expected a time of day as HH:MM:SS, not {text:?}")),
    }
}

/// Writes the session; returns what was written.
///
/// # Errors
/// Options the generator refuses (a close before the open...), or the
/// file cannot be written.
pub fn run(args: &SynthArgs) -> Result<SynthReport, ReplayError> {
    let base = SynthConfig {
        seed: args.seed,
        symbols: args.symbols,
        open: args.open,
        close: args.close,
        ..SynthConfig::default()
    };
    // The day around continuous trading (system events, directory,
    // pre-open, crosses, close) does not depend on the order flow's
    // length: measure it, and give continuous trading the rest.
    let overhead = Generator::new(&SynthConfig {
        order_messages: 0,
        ..base.clone()
    })
    .map_err(|e| ReplayError::Usage(e.to_string()))?
    .count() as u64;
    let config = SynthConfig {
        order_messages: args.messages.saturating_sub(overhead),
        ..base
    };
    let day = Generator::new(&config).map_err(|e| ReplayError::Usage(e.to_string()))?;
    let path = &args.out;
    let file = File::create(path).map_err(|e| ReplayError::output(path, e))?;
    let mut w = BinaryFileWriter::new(BufWriter::new(file));
    let mut report = SynthReport {
        out: path.display().to_string(),
        messages: 0,
        bytes: 0,
        first_ns: 0,
        last_ns: 0,
        types: Default::default(),
    };
    let mut counts = [0u64; 128];
    for m in day.take(args.messages as usize) {
        w.write_message(m.bytes())
            .map_err(|e| ReplayError::output(path, e))?;
        if report.messages == 0 {
            report.first_ns = m.timestamp().nanos();
        }
        report.last_ns = m.timestamp().nanos();
        report.messages += 1;
        counts[usize::from(m.msg_type() & 0x7f)] += 1;
    }
    w.flush().map_err(|e| ReplayError::output(path, e))?;
    report.bytes = w.bytes_written();
    for (t, &n) in counts.iter().enumerate() {
        if n > 0 {
            report.types.push(TypeCount {
                msg_type: char::from(t as u8).to_string(),
                messages: n,
            });
        }
    }
    Ok(report)
}

/// `09:30:00.000000123`.
pub fn time_of_day(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:09}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ns % 1_000_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day() {
        assert_eq!(
            parse_time("09:30:00"),
            Timestamp::from_hms(9, 30, 0).ok_or(String::new())
        );
        assert!(parse_time("9:61:00").is_err());
        assert!(parse_time("noon").is_err());
        assert_eq!(time_of_day(34_200_000_000_123), "09:30:00.000000123");
    }
}
