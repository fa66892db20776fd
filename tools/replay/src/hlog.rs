//! HdrHistogram interval logs (.hlog, format version 1.3): writing them
//! with the `hdrhistogram` crate's log writer and V2 deflate encoding, and
//! reading them back one line at a time, so a broken line is reported by
//! number.
//!
//! A log written here looks like the Java reference's:
//!
//! ```text
//! #[mdbus-replay: one-way latency in ns, intended send time to delivery]
//! #[Logged with mdbus-replay 0.1.0]
//! #[Histogram log format version 1.3]
//! #[StartTime: 1700000000.000 (seconds since epoch), 2023-11-14 22:13:20.000 UTC]
//! #[BaseTime: 1700000000.000 (seconds since epoch)]
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! #[MaxValueDivisor: 1000000.000]
//! 0.000,1.000,0.021,HISTFAAAAC...
//! ```
//!
//! Values are nanoseconds; interval timestamps are seconds after BaseTime;
//! `Interval_Max` is in milliseconds (the value divided by 10^6, the
//! reference writers' default).

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriter, IntervalLogWriterBuilder, LogEntry,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use super::error::{HlogError, ReplayError};

/// `Interval_Max` divisor: nanoseconds to milliseconds, as the Java and
/// Python reference writers do by default.
pub const MAX_VALUE_DIVISOR: f64 = 1e6;
/// The V2 encoding's cookies (plain and deflate-compressed) and header.
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const V2_HEADER_LEN: usize = 40;
/// The largest histogram encoding accepted from a log (a 3-digit
/// histogram of any range encodes to well under 1 MiB).
const MAX_ENCODED: usize = 16 << 20;
/// Longest line a log may hold: a histogram's base64 within
/// [`MAX_ENCODED`] and its timestamps. Reading stops there, so a file
/// that is one endless line costs this much memory, not its size.
const MAX_LINE: usize = MAX_ENCODED / 3 * 4 + 4096;

/// One interval read from a log.
#[derive(Debug, Clone)]
pub struct LogInterval {
    /// Start, in seconds after the log's BaseTime (or, without one, as
    /// written).
    pub start: Duration,
    /// Length.
    pub length: Duration,
    /// Its tag, if any.
    pub tag: Option<String>,
    /// The histogram.
    pub histogram: Histogram<u64>,
    /// Line number, from 1.
    pub line: usize,
}

/// What a log says about its times.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogTimes {
    /// `#[StartTime: ...]`, seconds since the epoch.
    pub start_time: Option<f64>,
    /// `#[BaseTime: ...]`, seconds since the epoch.
    pub base_time: Option<f64>,
}

/// Creates `path` and writes a log's header lines; `description` becomes
/// its first comment and `start_ns` (ns since the epoch) its StartTime and
/// BaseTime. `body` then writes the intervals through the [`HlogSink`].
///
/// # Errors
/// The file cannot be written, or `body` fails.
pub fn write_hlog<R>(
    path: &Path,
    description: &str,
    start_ns: u64,
    body: impl FnOnce(&mut HlogSink<'_, '_>) -> Result<R, ReplayError>,
) -> Result<R, ReplayError> {
    let out_err = |e: io::Error| ReplayError::output(path, e);
    let file = File::create(path).map_err(out_err)?;
    let mut out = BufWriter::new(file);
    let start = start_ns as f64 / 1e9;
    write!(
        out,
        "#[{description}]\n\
         #[Logged with mdbus-replay {}]\n\
         #[Histogram log format version 1.3]\n\
         #[StartTime: {start:.3} (seconds since epoch), {}]\n\
         #[BaseTime: {start:.3} (seconds since epoch)]\n\
         \"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
        env!("CARGO_PKG_VERSION"),
        utc_text(start_ns),
    )
    .map_err(out_err)?;
    let mut serializer = V2DeflateSerializer::new();
    let result = {
        let writer = IntervalLogWriterBuilder::new()
            .with_max_value_divisor(MAX_VALUE_DIVISOR)
            .begin_log_with(&mut out, &mut serializer)
            .map_err(out_err)?;
        let mut sink = HlogSink { writer, path };
        body(&mut sink)?
    };
    out.flush().map_err(out_err)?;
    Ok(result)
}

/// Writes the intervals of a log begun by [`write_hlog`].
pub struct HlogSink<'a, 'p> {
    writer: IntervalLogWriter<'a, 'a, BufWriter<File>, V2DeflateSerializer>,
    path: &'p Path,
}

impl HlogSink<'_, '_> {
    /// Writes one interval: `start` after the log's BaseTime, `length` long.
    ///
    /// # Errors
    /// Encoding or writing fails.
    pub fn write(
        &mut self,
        histogram: &Histogram<u64>,
        start: Duration,
        length: Duration,
    ) -> Result<(), ReplayError> {
        self.writer
            .write_histogram(histogram, start, length, None)
            .map_err(|e| ReplayError::output(self.path, io::Error::other(e.to_string())))
    }
}

/// Reads an interval log one interval at a time, one line in memory.
pub struct HlogReader {
    name: String,
    input: BufReader<File>,
    /// The current line, reused.
    raw: Vec<u8>,
    line: usize,
    times: LogTimes,
    intervals: usize,
    deserializer: Deserializer,
    owned: Vec<u8>,
}

impl std::fmt::Debug for HlogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HlogReader")
            .field("name", &self.name)
            .field("line", &self.line)
            .field("intervals", &self.intervals)
            .finish_non_exhaustive()
    }
}

impl HlogReader {
    /// Opens the file at `path`; it is read line by line, each line at
    /// most [`MAX_LINE`] bytes.
    ///
    /// # Errors
    /// It cannot be opened, or is empty.
    pub fn open(path: &Path) -> Result<HlogReader, ReplayError> {
        let name = path.display().to_string();
        let open_err = |source| HlogError::Open {
            path: name.clone(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let mut input = BufReader::new(file);
        if input.fill_buf().map_err(open_err)?.is_empty() {
            return Err(HlogError::Empty { path: name }.into());
        }
        Ok(HlogReader {
            name,
            input,
            raw: Vec::new(),
            line: 0,
            times: LogTimes::default(),
            intervals: 0,
            deserializer: Deserializer::new(),
            owned: Vec::new(),
        })
    }

    /// The file name errors use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the lines read so far say about the log's times.
    pub fn times(&self) -> LogTimes {
        self.times
    }

    /// The next interval, or `None` at the end of the file.
    ///
    /// # Errors
    /// A line that is not part of an interval log, an interval whose
    /// histogram does not decode, or (at the end) no interval at all; the
    /// error names the file and the line.
    pub fn next_interval(&mut self) -> Result<Option<LogInterval>, ReplayError> {
        loop {
            self.raw.clear();
            let read = (&mut self.input)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut self.raw)
                .map_err(|source| HlogError::Open {
                    path: self.name.clone(),
                    source,
                })?;
            if read == 0 {
                break;
            }
            self.line += 1;
            let line = self.line;
            if self.raw.len() > MAX_LINE {
                return Err(HlogError::Syntax {
                    path: self.name.clone(),
                    line,
                    found: format!("a line longer than {MAX_LINE} bytes"),
                }
                .into());
            }
            let raw = &self.raw[..];
            if raw.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            // The parser wants every line to end in a newline.
            let text: &[u8] = if raw.ends_with(b"\n") {
                raw
            } else {
                self.owned.clear();
                self.owned.extend_from_slice(raw);
                self.owned.push(b'\n');
                &self.owned
            };
            match IntervalLogIterator::new(text).next() {
                // A comment or the legend.
                None => {}
                Some(Err(_)) => {
                    return Err(HlogError::Syntax {
                        path: self.name.clone(),
                        line,
                        found: describe_line(raw),
                    }
                    .into())
                }
                Some(Ok(LogEntry::StartTime(d))) => self.times.start_time = Some(d.as_secs_f64()),
                Some(Ok(LogEntry::BaseTime(d))) => self.times.base_time = Some(d.as_secs_f64()),
                Some(Ok(LogEntry::Interval(h))) => {
                    let histogram =
                        decode(h.encoded_histogram(), &mut self.deserializer).map_err(|what| {
                            HlogError::Histogram {
                                path: self.name.clone(),
                                line,
                                what,
                            }
                        })?;
                    self.intervals += 1;
                    return Ok(Some(LogInterval {
                        start: h.start_timestamp(),
                        length: h.duration(),
                        tag: h.tag().map(|t| t.as_str().to_owned()),
                        histogram,
                        line,
                    }));
                }
            }
        }
        if self.intervals == 0 {
            return Err(HlogError::NoIntervals {
                path: self.name.clone(),
            }
            .into());
        }
        Ok(None)
    }
}

/// Reads the log at `path`, handing each interval to `each` in file order;
/// returns what the log says about its times.
///
/// # Errors
/// As [`HlogReader::open`] and [`HlogReader::next_interval`], or `each`'s.
pub fn read_hlog(
    path: &Path,
    mut each: impl FnMut(LogInterval) -> Result<(), ReplayError>,
) -> Result<LogTimes, ReplayError> {
    let mut r = HlogReader::open(path)?;
    while let Some(i) = r.next_interval()? {
        each(i)?;
    }
    Ok(r.times())
}

/// Decodes one base64 histogram: V2, deflated or not. Inflates within
/// [`MAX_ENCODED`] and checks the announced payload length against what
/// is there before handing the bytes to the crate's decoder, so a corrupt
/// line cannot make it allocate gigabytes.
fn decode(encoded: &str, deserializer: &mut Deserializer) -> Result<Histogram<u64>, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let cookie = |b: &[u8]| {
        b.get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    };
    let plain = match cookie(&raw) {
        Some(V2_COMPRESSED_COOKIE) => {
            if raw.len() < 8 {
                return Err("the compressed histogram ends inside its header".into());
            }
            let mut inflated = Vec::new();
            flate2::read::ZlibDecoder::new(&raw[8..])
                .take(MAX_ENCODED as u64 + 1)
                .read_to_end(&mut inflated)
                .map_err(|e| format!("its deflate stream is corrupt: {e}"))?;
            if inflated.len() > MAX_ENCODED {
                return Err(format!("it inflates to more than {MAX_ENCODED} bytes"));
            }
            inflated
        }
        Some(V2_COOKIE) => raw,
        Some(other) => {
            return Err(format!(
                "its cookie {other:#010x} is not that of a V2 histogram encoding"
            ))
        }
        None => return Err("it is shorter than a histogram header".into()),
    };
    if cookie(&plain) != Some(V2_COOKIE) || plain.len() < V2_HEADER_LEN {
        return Err("the inflated bytes are not a V2 histogram encoding".into());
    }
    let payload = u32::from_be_bytes([plain[4], plain[5], plain[6], plain[7]]) as usize;
    if payload > plain.len() - V2_HEADER_LEN {
        return Err(format!(
            "it announces {payload} bytes of counts but holds {}",
            plain.len() - V2_HEADER_LEN
        ));
    }
    deserializer
        .deserialize(&mut &plain[..])
        .map_err(|e| e.to_string())
}

/// The start of a line, for an error.
fn describe_line(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end();
    let mut short: String = text.chars().take(60).collect();
    if short.len() < text.len() {
        short.push_str("...");
    }
    format!("{short:?}")
}

/// `2023-11-14 22:13:20.000 UTC` for nanoseconds since the epoch.
pub fn utc_text(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let millis = (ns / 1_000_000) % 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{millis:03} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_in_utc() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(
            utc_text(1_700_000_000_123_000_000),
            "2023-11-14 22:13:20.123 UTC"
        );
        assert_eq!(
            utc_text(951_782_400_000_000_000),
            "2000-02-29 00:00:00.000 UTC"
        );
    }

    #[test]
    fn corrupt_encodings_are_refused_without_panicking() {
        let mut d = Deserializer::new();
        for bad in ["", "!!!", "AAAA", "HISTFAAAAA==", "HISTEwAAAAA="] {
            assert!(decode(bad, &mut d).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_endless_line_is_refused_after_max_line_bytes() {
        let path = std::env::temp_dir().join(format!("hlog-endless-{}.hlog", std::process::id()));
        {
            let mut f = BufWriter::new(File::create(&path).unwrap());
            f.write_all(b"#[StartTime: 0.000 (seconds since epoch)]\n")
                .unwrap();
            // One line twice as long as allowed, with no newline at all.
            let chunk = [b'7'; 1 << 16];
            for _ in 0..(2 * MAX_LINE / chunk.len() + 1) {
                f.write_all(&chunk).unwrap();
            }
        }
        let mut r = HlogReader::open(&path).unwrap();
        let err = r.next_interval().unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains("line 2"), "{err}");
        assert!(
            err.contains(&format!("longer than {MAX_LINE} bytes")),
            "{err}"
        );
        // Only the start of the line was read.
        assert!(r.raw.len() <= MAX_LINE + 1, "{}", r.raw.len());
    }
}
