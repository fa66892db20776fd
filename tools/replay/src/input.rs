//! What a replay reads: a capture, recognised by its content, as a
//! sequence of timestamped messages.
//!
//! | format | recognised by | a message's time |
//! |---|---|---|
//! | pcap, pcapng of MoldUDP64 over UDP/IPv4 | the pcap or pcapng magic number | the capture time of its packet |
//! | mdcap (`mdbus_feed::mdcap`) | the magic `MDBUSCAP` | the arrival time in its record |
//! | ITCH 5.0 BinaryFILE | none of the above, and its first messages decode as ITCH 5.0 | its ITCH timestamp (ns since midnight) |
//! | mdbus archive (`mdbus::archive`, docs/ARCHIVE.md) | a directory | the send time it was recorded with (0 for a stream without timestamps) |
//!
//! The input is opened once (a file, a FIFO, or `-` for standard input)
//! and its format told from its first bytes without consuming them
//! ([`mdbus_feed::sniff`]), so pipes work. Every read waits in `poll`
//! with a short timeout, so a FIFO without a writer or a stalled pipe
//! still wakes for SIGINT/SIGTERM and for `--duration`.
//!
//! Captures (pcap, pcapng, mdcap) go through the feed crate's
//! [`CaptureSequencer`]: the same plausibility rules as the relay (one
//! session, far jumps only when confirmed, overflowing ranges malformed,
//! each sequence number once and in order). Everything skipped is counted
//! by reason in [`Skipped`]. A BinaryFILE has no sequence numbers: its
//! messages are replayed as they are.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use mdbus_feed::arbiter::{ArbiterConfig, ArbiterSink, CaptureSequencer, Line};
use mdbus_feed::binaryfile::{BinaryFileError, BinaryFileReader};
use mdbus_feed::bytes::describe_bytes;
use mdbus_feed::itch::{self, DecodeError};
use mdbus_feed::mdcap::{MdcapError, MdcapReader};
use mdbus_feed::moldudp64::Request;
use mdbus_feed::pcap::{CaptureError, CaptureFormat, CaptureReader, CaptureStats};
use mdbus_feed::sniff::{sniff, Format, PeekReader, Sniffed};
use mdbus_tool_support::readiness::readable_within;
use serde::Serialize;

/// How long a read waits in `poll` before it looks at the signal flag and
/// the deadline again.
const WAKE_EVERY: Duration = Duration::from_millis(50);

/// The formats a replay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// Classic pcap of MoldUDP64 over UDP.
    Pcap,
    /// pcapng of MoldUDP64 over UDP.
    Pcapng,
    /// mdbus's own capture format.
    Mdcap,
    /// ITCH 5.0 BinaryFILE.
    Binaryfile,
    /// A directory recorded by `mdbus::archive`.
    Archive,
}

impl fmt::Display for InputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputFormat::Pcap => "pcap capture of MoldUDP64",
            InputFormat::Pcapng => "pcapng capture of MoldUDP64",
            InputFormat::Mdcap => "mdcap capture",
            InputFormat::Binaryfile => "ITCH 5.0 BinaryFILE",
            InputFormat::Archive => "mdbus archive",
        })
    }
}

/// Why an input cannot be replayed. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file cannot be opened or read.
    #[error("cannot read {name}: {source}")]
    Open {
        /// File name.
        name: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file has no bytes.
    #[error("{name} is empty: there is nothing to replay")]
    Empty {
        /// File name.
        name: String,
    },
    /// The content is none of the formats.
    #[error(
        "{name} is not a capture mdbus-replay reads: it starts with {start}, which is no pcap, \
         pcapng or mdcap magic number, and read as an ITCH 5.0 BinaryFILE {why}"
    )]
    Unrecognised {
        /// File name.
        name: String,
        /// The first bytes, described.
        start: String,
        /// Why the BinaryFILE reading failed.
        why: String,
    },
    /// A pcap or pcapng capture is broken (its message names the file).
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// An mdcap file is broken (its message names the file).
    #[error(transparent)]
    Mdcap(#[from] MdcapError),
    /// A BinaryFILE is broken.
    #[error("{name}: {source}")]
    BinaryFile {
        /// File name.
        name: String,
        /// What is wrong.
        #[source]
        source: BinaryFileError,
    },
    /// A BinaryFILE message that is not ITCH 5.0 (so has no timestamp).
    #[error("{name}: message {index} at byte offset {offset} is not ITCH 5.0: {source}")]
    NotItch {
        /// File name.
        name: String,
        /// Zero-based message index.
        index: u64,
        /// Byte offset of its length prefix.
        offset: u64,
        /// The decoder's reason.
        #[source]
        source: DecodeError,
    },
    /// A capture without MoldUDP64 messages.
    #[error("{name} holds no MoldUDP64 messages: {what}")]
    NoMoldUdp64 {
        /// File name.
        name: String,
        /// What it holds instead.
        what: String,
    },
    /// Reading stopped: SIGINT/SIGTERM, or `--duration` ran out.
    #[error("reading {name} stopped: {why}")]
    Stopped {
        /// File name.
        name: String,
        /// Why.
        why: Stopped,
    },
    /// An archive directory is broken (its message names the file).
    #[error(transparent)]
    Archive(#[from] mdbus::archive::ArchiveError),
    /// A well-formed file without messages.
    #[error("{name} holds no messages: there is nothing to replay")]
    NoMessages {
        /// File name.
        name: String,
    },
}

impl InputError {
    /// Why reading was stopped, if it was: the error itself, or a read
    /// error inside a reader's error.
    pub fn stopped(&self) -> Option<&Stopped> {
        if let InputError::Stopped { why, .. } = self {
            return Some(why);
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            let inner = e
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<Stopped>());
            if inner.is_some() {
                return inner;
            }
            cause = e.source();
        }
        None
    }
}

/// Counts of what the input held besides the messages replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InputStats {
    /// Messages handed on for replay.
    pub messages: u64,
    /// Captures: packets (frames) read.
    pub packets: u64,
    /// Captures: MoldUDP64 heartbeats.
    pub heartbeats: u64,
    /// Captures: messages whose sequence number was already delivered
    /// (A/B duplicates, retransmissions), skipped.
    pub duplicates: u64,
    /// Everything else skipped, by reason.
    pub skipped: Skipped,
}

/// What a capture held that was not replayed, by reason. The frame
/// reasons are the capture reader's ([`CaptureStats`]), the packet
/// reasons the arbiter's; `unrecoverable` counts messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Frames that are not IP (ARP, other ether types): other traffic.
    pub not_ipv4: u64,
    /// IPv6 frames (only UDP over IPv4 is read).
    pub ipv6: u64,
    /// IPv4 frames that are not UDP (TCP, ICMP, IGMP): other traffic.
    pub not_udp: u64,
    /// IPv4 fragments (not reassembled).
    pub fragments: u64,
    /// Frames cut short.
    pub truncated: u64,
    /// UDP length fields that disagree with the datagram.
    pub bad_udp_length: u64,
    /// Headers that do not parse.
    pub unparseable: u64,
    /// pcapng packets on an unsupported link type.
    pub unsupported_link: u64,
    /// Datagrams shorter than the MoldUDP64 header.
    #[serde(rename = "malformed_short_header")]
    pub short_header: u64,
    /// MoldUDP64 packets whose message count lies.
    #[serde(rename = "malformed_count_mismatch")]
    pub count_mismatch: u64,
    /// MoldUDP64 packets with a block length that lies.
    #[serde(rename = "malformed_bad_block_length")]
    pub bad_block_length: u64,
    /// MoldUDP64 packets numbered 0.
    #[serde(rename = "malformed_sequence_zero")]
    pub sequence_zero: u64,
    /// MoldUDP64 packets whose range overflows.
    #[serde(rename = "malformed_sequence_overflow")]
    pub sequence_overflow: u64,
    /// Packets of a session other than the one followed.
    pub other_session: u64,
    /// Packets implausibly far ahead, not confirmed.
    pub suspect_jumps: u64,
    /// Packets with messages after the end of their session.
    pub after_end: u64,
    /// Messages missing from the capture (a gap neither line filled).
    pub unrecoverable: u64,
}

impl Skipped {
    /// Each reason with its count, and whether it may have been feed data
    /// (`true`) or is other traffic on the capture's wire (`false`).
    pub fn reasons(&self) -> [(&'static str, u64, bool); 17] {
        [
            ("not_ipv4", self.not_ipv4, false),
            ("ipv6", self.ipv6, true),
            ("not_udp", self.not_udp, false),
            ("fragments", self.fragments, true),
            ("truncated", self.truncated, true),
            ("bad_udp_length", self.bad_udp_length, true),
            ("unparseable", self.unparseable, true),
            ("unsupported_link", self.unsupported_link, true),
            ("malformed_short_header", self.short_header, true),
            ("malformed_count_mismatch", self.count_mismatch, true),
            ("malformed_bad_block_length", self.bad_block_length, true),
            ("malformed_sequence_zero", self.sequence_zero, true),
            ("malformed_sequence_overflow", self.sequence_overflow, true),
            ("other_session", self.other_session, true),
            ("suspect_jumps", self.suspect_jumps, true),
            ("after_end", self.after_end, true),
            ("unrecoverable", self.unrecoverable, true),
        ]
    }

    /// What may have been feed data and was not replayed, as "3
    /// fragments, 1 suspect_jumps"; `None` when nothing was.
    pub fn lost(&self) -> Option<String> {
        let parts: Vec<String> = self
            .reasons()
            .iter()
            .filter(|(_, n, data)| *data && *n > 0)
            .map(|(name, n, _)| format!("{n} {name}"))
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Every nonzero reason, as "2 not_udp, 1 fragments".
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .reasons()
            .iter()
            .filter(|(_, n, _)| *n > 0)
            .map(|(name, n, _)| format!("{n} {name}"))
            .collect();
        parts.join(", ")
    }
}

/// Why a read stopped waiting (the error inside the `io::Error` a
/// [`WakingReader`] returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// SIGINT or SIGTERM arrived.
    #[error("interrupted by a signal while waiting for input")]
    Signal,
    /// The run's `--duration` ran out.
    #[error("--duration ran out while waiting for input")]
    Deadline,
}

/// A file, FIFO or pipe whose reads wait in `poll` a little at a time and
/// give up with [`Stopped`] once SIGINT/SIGTERM arrived or the deadline
/// passed: a FIFO nobody writes to, or a writer that stalls, never holds
/// the tool.
#[derive(Debug)]
pub struct WakingReader {
    file: File,
    deadline: Option<Instant>,
}

impl WakingReader {
    fn stopped(&self) -> Option<Stopped> {
        if mdbus_tool_support::signals::requested() {
            Some(Stopped::Signal)
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Some(Stopped::Deadline)
        } else {
            None
        }
    }
}

impl Read for WakingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(why) = self.stopped() {
                return Err(io::Error::other(why));
            }
            if !readable_within(self.file.as_fd(), WAKE_EVERY)? {
                continue;
            }
            // A FIFO is opened non-blocking (so that opening one without
            // a writer does not block): readiness may still be spurious.
            match self.file.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }
}

/// The reader every format reads from.
type Stream = PeekReader<WakingReader>;

enum Source {
    Capture {
        reader: Box<CaptureReader<Stream>>,
        sequencer: Box<CaptureSequencer>,
    },
    Mdcap {
        reader: Box<MdcapReader<Stream>>,
        sequencer: Box<CaptureSequencer>,
    },
    BinaryFile(Box<BinaryFileReader<Stream>>),
    Archive(Box<mdbus::archive::ArchiveReader>),
}

/// Hands the arbiter's messages on, with the time of the datagram (or
/// record) being read: a message held back for a gap is due when the
/// packet that completes it arrived.
struct Deliver<'a, F> {
    timestamp_ns: u64,
    sink: &'a mut F,
    messages: &'a mut u64,
    unrecoverable: &'a mut u64,
}

impl<F: FnMut(u64, &[u8])> ArbiterSink for Deliver<'_, F> {
    fn message(&mut self, _sequence: u64, _line: Line, data: &[u8]) {
        *self.messages += 1;
        (self.sink)(self.timestamp_ns, data);
    }

    fn request(&mut self, _request: &Request) {
        // A file cannot be asked again.
    }

    fn unrecoverable(&mut self, _first: u64, count: u64) {
        *self.unrecoverable += count;
    }
}

/// An open input: call [`Input::next_unit`] until it returns `false`, then
/// [`Input::finish`].
pub struct Input {
    name: String,
    format: InputFormat,
    source: Source,
    stats: InputStats,
    last_ns: u64,
}

impl fmt::Debug for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Input {
    /// Opens `path` (`-`: standard input) once and recognises its format
    /// from its content. Reads give up once SIGINT/SIGTERM arrived (see
    /// `mdbus_tool_support::signals`) or at `deadline`.
    ///
    /// # Errors
    /// The file cannot be read, is empty, or is none of the formats (a
    /// broken capture header, a BinaryFILE whose first messages are not
    /// ITCH 5.0): the error names the file and says what is wrong.
    pub fn open(path: &Path, deadline: Option<Instant>) -> Result<Input, InputError> {
        let name = if path == Path::new("-") {
            "standard input".to_owned()
        } else {
            path.display().to_string()
        };
        let open_err = |source| InputError::Open {
            name: name.clone(),
            source,
        };
        if path.is_dir() {
            // An archive: read through the library's reader, from its
            // first record.
            let mut reader = mdbus::archive::ArchiveReader::open(path)?;
            reader.seek(1)?;
            return Ok(Input {
                name,
                format: InputFormat::Archive,
                source: Source::Archive(Box::new(reader)),
                stats: InputStats::default(),
                last_ns: 0,
            });
        }
        let file = if path == Path::new("-") {
            // A duplicate of descriptor 0, left blocking: it is shared
            // with whoever started the tool.
            use std::os::fd::AsFd;
            File::from(io::stdin().as_fd().try_clone_to_owned().map_err(open_err)?)
        } else {
            // Non-blocking, so that opening a FIFO without a writer
            // returns at once; reads wait in poll instead.
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map_err(open_err)?
        };
        let mut stream = PeekReader::new(WakingReader { file, deadline });
        let format = match sniff(&mut stream).map_err(open_err)? {
            Sniffed::Empty => return Err(InputError::Empty { name }),
            Sniffed::Unknown { start, why } => {
                return Err(InputError::Unrecognised {
                    name,
                    start: describe_bytes(&start),
                    why,
                })
            }
            Sniffed::Known(f) => f,
        };
        let sequencer = || Box::new(CaptureSequencer::new(ArbiterConfig::for_capture()));
        let (format, source) = match format {
            Format::Pcap | Format::PcapNg => {
                let reader = CaptureReader::new(name.clone(), stream)?;
                let format = match reader.format() {
                    CaptureFormat::Pcap => InputFormat::Pcap,
                    CaptureFormat::PcapNg => InputFormat::Pcapng,
                };
                let source = Source::Capture {
                    reader: Box::new(reader),
                    sequencer: sequencer(),
                };
                (format, source)
            }
            Format::Mdcap => {
                let reader = MdcapReader::new(name.clone(), stream)?;
                let source = Source::Mdcap {
                    reader: Box::new(reader),
                    sequencer: sequencer(),
                };
                (InputFormat::Mdcap, source)
            }
            Format::BinaryFile => (
                InputFormat::Binaryfile,
                Source::BinaryFile(Box::new(BinaryFileReader::new(stream))),
            ),
        };
        Ok(Input {
            name,
            format,
            source,
            stats: InputStats::default(),
            last_ns: 0,
        })
    }

    /// The file name errors use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The recognised format.
    pub fn format(&self) -> InputFormat {
        self.format
    }

    /// What has been read so far.
    pub fn stats(&self) -> &InputStats {
        &self.stats
    }

    /// Reads the next unit of the input (a packet of a capture, a record
    /// of an mdcap file, a message of a BinaryFILE) and hands each message
    /// it releases to `sink` with its time in nanoseconds (epoch for
    /// captures, since midnight for a BinaryFILE). Returns `false` at the
    /// end of the input, after the sequencer has released what it held.
    /// Allocates nothing per message.
    ///
    /// # Errors
    /// The input is truncated or malformed at this point; the error names
    /// the file and where.
    pub fn next_unit(&mut self, mut sink: impl FnMut(u64, &[u8])) -> Result<bool, InputError> {
        macro_rules! deliver {
            ($timestamp_ns:expr) => {
                &mut Deliver {
                    timestamp_ns: $timestamp_ns,
                    sink: &mut sink,
                    messages: &mut self.stats.messages,
                    unrecoverable: &mut self.stats.skipped.unrecoverable,
                }
            };
        }
        let (more, sequencer) = match &mut self.source {
            Source::Capture { reader, sequencer } => {
                let more = match reader.next_datagram()? {
                    Some(d) => {
                        self.last_ns = self.last_ns.max(d.timestamp_ns);
                        sequencer.on_datagram(&d, deliver!(d.timestamp_ns));
                        true
                    }
                    None => {
                        sequencer.finish(deliver!(self.last_ns));
                        false
                    }
                };
                count_frames(reader.stats(), &mut self.stats);
                (more, sequencer)
            }
            Source::Mdcap { reader, sequencer } => {
                let more = match reader.next_record()? {
                    Some(r) => {
                        self.last_ns = self.last_ns.max(r.timestamp_ns);
                        sequencer.on_record(&r, deliver!(r.timestamp_ns));
                        true
                    }
                    None => {
                        sequencer.finish(deliver!(self.last_ns));
                        false
                    }
                };
                (more, sequencer)
            }
            Source::Archive(reader) => {
                use mdbus::archive::Item;
                return match reader.next_item()? {
                    Some(Item::Message(m)) if mdbus::archive::is_source_gap_notice(&m) => {
                        // The relay's notice of upstream loss, not a
                        // message of the feed.
                        Ok(true)
                    }
                    Some(Item::Message(m)) => {
                        self.stats.messages += 1;
                        sink(m.timestamp().unwrap_or(0), m.payload());
                        Ok(true)
                    }
                    Some(Item::Gap { from, to }) => {
                        self.stats.skipped.unrecoverable += to - from;
                        Ok(true)
                    }
                    None => Ok(false),
                };
            }
            Source::BinaryFile(reader) => {
                let offset = reader.offset();
                let index = reader.messages_read();
                let m = reader
                    .next_message()
                    .map_err(|source| InputError::BinaryFile {
                        name: self.name.clone(),
                        source,
                    })?;
                let Some(m) = m else { return Ok(false) };
                let ts = itch_timestamp(m).map_err(|source| InputError::NotItch {
                    name: self.name.clone(),
                    index,
                    offset,
                    source,
                })?;
                self.stats.messages += 1;
                sink(ts, m);
                return Ok(true);
            }
        };
        count_packets(sequencer, &mut self.stats);
        Ok(more)
    }

    /// Checks the input once it has been read to its end.
    ///
    /// # Errors
    /// It held no message at all (for a capture: no MoldUDP64 message,
    /// with what it held instead).
    pub fn finish(&self) -> Result<InputStats, InputError> {
        if self.stats.messages > 0 {
            return Ok(self.stats);
        }
        match &self.source {
            Source::Capture { reader, .. } => {
                let s = &self.stats;
                let mut what = format!(
                    "{} packets, {} of them UDP/IPv4 datagrams",
                    s.packets,
                    reader.stats().datagrams
                );
                if s.heartbeats > 0 {
                    what.push_str(&format!(", {} MoldUDP64 heartbeats", s.heartbeats));
                }
                let skipped = s.skipped.describe();
                if !skipped.is_empty() {
                    what.push_str(&format!("; skipped: {skipped}"));
                }
                Err(InputError::NoMoldUdp64 {
                    name: self.name.clone(),
                    what,
                })
            }
            _ => Err(InputError::NoMessages {
                name: self.name.clone(),
            }),
        }
    }
}

/// The capture reader's skipped frames, by reason.
fn count_frames(c: &CaptureStats, stats: &mut InputStats) {
    stats.packets = c.packets;
    let s = &mut stats.skipped;
    s.not_ipv4 = c.not_ipv4;
    s.ipv6 = c.ipv6;
    s.not_udp = c.not_udp;
    s.fragments = c.fragments;
    s.truncated = c.truncated;
    s.bad_udp_length = c.bad_udp_length;
    s.unparseable = c.unparseable;
    s.unsupported_link = c.unsupported_link;
}

/// The arbiter's refused packets, by reason.
fn count_packets(sequencer: &CaptureSequencer, stats: &mut InputStats) {
    let c = sequencer.counters();
    stats.heartbeats = c.heartbeats;
    stats.duplicates = c.duplicate_messages;
    let s = &mut stats.skipped;
    s.short_header = c.malformed_by.short_header;
    s.count_mismatch = c.malformed_by.count_mismatch;
    s.bad_block_length = c.malformed_by.bad_block_length;
    s.sequence_zero = c.malformed_by.sequence_zero;
    s.sequence_overflow = c.malformed_by.sequence_overflow;
    s.other_session = c.other_session;
    s.suspect_jumps = c.suspect_jumps;
    s.after_end = c.after_end;
}

/// The 6-byte ITCH timestamp (ns since midnight) of a message that decodes
/// as ITCH 5.0.
fn itch_timestamp(m: &[u8]) -> Result<u64, DecodeError> {
    itch::decode(m)?;
    // Every type is at least the 11-byte common header: type, locate,
    // tracking number, then the timestamp at bytes 5..11.
    let mut ts = [0u8; 8];
    ts[2..].copy_from_slice(&m[5..itch::HEADER_LEN]);
    Ok(u64::from_be_bytes(ts))
}
