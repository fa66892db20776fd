//! What a replay reads: a capture, recognised by its content, as a
//! sequence of timestamped messages.
//!
//! | format | recognised by | a message's time |
//! |---|---|---|
//! | pcap, pcapng of MoldUDP64 over UDP/IPv4 | the pcap or pcapng magic number | the capture time of its packet |
//! | mdcap (`mdbus_feed::mdcap`) | the magic `MDBUSCAP` | the arrival time in its record |
//! | ITCH 5.0 BinaryFILE | none of the above, and its first messages decode as ITCH 5.0 | its ITCH timestamp (ns since midnight) |
//!
//! In a capture, UDP datagrams that are not MoldUDP64 packets are skipped
//! and counted; so are messages whose sequence number was already seen in
//! their session (the second copy of an A/B line pair, a retransmission).
//! A capture without a single MoldUDP64 message is an error.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use mdbus_feed::binaryfile::{BinaryFileError, BinaryFileReader};
use mdbus_feed::itch::{self, DecodeError};
use mdbus_feed::mdcap::{self, MdcapError, MdcapReader};
use mdbus_feed::moldudp64::{Packet, PacketKind, SESSION_LEN};
use mdbus_feed::pcap::{CaptureError, CaptureReader};

/// Messages of a BinaryFILE decoded as ITCH before it is accepted as one.
const PROBE_MESSAGES: u64 = 8;

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
}

impl fmt::Display for InputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputFormat::Pcap => "pcap capture of MoldUDP64",
            InputFormat::Pcapng => "pcapng capture of MoldUDP64",
            InputFormat::Mdcap => "mdcap capture",
            InputFormat::Binaryfile => "ITCH 5.0 BinaryFILE",
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
    /// A well-formed file without messages.
    #[error("{name} holds no messages: there is nothing to replay")]
    NoMessages {
        /// File name.
        name: String,
    },
}

/// Counts of what the input held besides the messages replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InputStats {
    /// Messages handed on for replay.
    pub messages: u64,
    /// Captures: packets read.
    pub packets: u64,
    /// Captures: packets that were not UDP/IPv4 datagrams.
    pub not_udp: u64,
    /// Captures: UDP datagrams that were not MoldUDP64 packets.
    pub not_moldudp64: u64,
    /// Captures: MoldUDP64 heartbeats and end-of-session packets.
    pub heartbeats: u64,
    /// Captures: messages whose sequence number their session had already
    /// delivered (A/B duplicates, retransmissions), skipped.
    pub duplicates: u64,
}

enum Source {
    Capture {
        reader: Box<CaptureReader<BufReader<File>>>,
        // Next expected sequence number per MoldUDP64 session; a handful
        // of sessions at most, each added once.
        next: HashMap<[u8; SESSION_LEN], u64>,
        first_error: Option<String>,
    },
    Mdcap(Box<MdcapReader<BufReader<File>>>),
    BinaryFile(Box<BinaryFileReader<BufReader<File>>>),
}

/// An open input: call [`Input::next_unit`] until it returns `false`, then
/// [`Input::finish`].
pub struct Input {
    name: String,
    format: InputFormat,
    source: Source,
    stats: InputStats,
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
    /// Opens `path` and recognises its format from its content.
    ///
    /// # Errors
    /// The file cannot be read, is empty, or is none of the formats (a
    /// broken capture header, a BinaryFILE whose first messages are not
    /// ITCH 5.0): the error names the file and says what is wrong.
    pub fn open(path: &Path) -> Result<Input, InputError> {
        let name = path.display().to_string();
        let open = || {
            File::open(path).map_err(|source| InputError::Open {
                name: name.clone(),
                source,
            })
        };
        let mut prefix = [0u8; 16];
        let n = read_prefix(&mut open()?, &mut prefix).map_err(|source| InputError::Open {
            name: name.clone(),
            source,
        })?;
        let prefix = &prefix[..n];
        if n == 0 {
            return Err(InputError::Empty { name });
        }
        let (format, source) = if is_pcap(prefix) {
            let reader = CaptureReader::new(name.clone(), BufReader::new(open()?))?;
            let format = match reader.format() {
                mdbus_feed::pcap::CaptureFormat::Pcap => InputFormat::Pcap,
                mdbus_feed::pcap::CaptureFormat::PcapNg => InputFormat::Pcapng,
            };
            let source = Source::Capture {
                reader: Box::new(reader),
                next: HashMap::new(),
                first_error: None,
            };
            (format, source)
        } else if mdcap::has_magic(prefix) || mdcap::MAGIC.starts_with(prefix) {
            let reader = MdcapReader::new(name.clone(), BufReader::new(open()?))?;
            (InputFormat::Mdcap, Source::Mdcap(Box::new(reader)))
        } else {
            probe_binaryfile(&name, open()?, prefix)?;
            let reader = BinaryFileReader::new(BufReader::new(open()?));
            (
                InputFormat::Binaryfile,
                Source::BinaryFile(Box::new(reader)),
            )
        };
        Ok(Input {
            name,
            format,
            source,
            stats: InputStats::default(),
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
    /// of an mdcap file, a message of a BinaryFILE) and hands each of its
    /// messages to `sink` with its time in nanoseconds (epoch for
    /// captures, since midnight for a BinaryFILE). Returns `false` at the
    /// end of the input. Allocates nothing per message.
    ///
    /// # Errors
    /// The input is truncated or malformed at this point; the error names
    /// the file and where.
    pub fn next_unit(&mut self, mut sink: impl FnMut(u64, &[u8])) -> Result<bool, InputError> {
        let stats = &mut self.stats;
        match &mut self.source {
            Source::Capture {
                reader,
                next,
                first_error,
            } => {
                let Some(d) = reader.next_datagram()? else {
                    let s = reader.stats();
                    stats.packets = s.packets;
                    stats.not_udp = s.skipped();
                    return Ok(false);
                };
                let packet = match Packet::parse_strict(d.payload) {
                    Ok(p) if is_session_name(&d.payload[..SESSION_LEN]) => p,
                    Ok(_) => {
                        stats.not_moldudp64 += 1;
                        first_error.get_or_insert_with(|| {
                            format!(
                                "the first, to {}, has a session name that is not ASCII text",
                                d.dst
                            )
                        });
                        return Ok(true);
                    }
                    Err(e) => {
                        stats.not_moldudp64 += 1;
                        first_error.get_or_insert_with(|| format!("the first, to {}: {e}", d.dst));
                        return Ok(true);
                    }
                };
                if packet.kind() != PacketKind::Messages {
                    stats.heartbeats += 1;
                    return Ok(true);
                }
                let mut session = [0u8; SESSION_LEN];
                session.copy_from_slice(&d.payload[..SESSION_LEN]);
                let expected = next.entry(session).or_insert(0);
                for block in packet.messages().flatten() {
                    if block.sequence < *expected {
                        stats.duplicates += 1;
                        continue;
                    }
                    *expected = block.sequence + 1;
                    stats.messages += 1;
                    sink(d.timestamp_ns, block.data);
                }
                Ok(true)
            }
            Source::Mdcap(reader) => match reader.next_record()? {
                Some(r) => {
                    stats.messages += 1;
                    sink(r.timestamp_ns, r.data);
                    Ok(true)
                }
                None => Ok(false),
            },
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
                stats.messages += 1;
                sink(ts, m);
                Ok(true)
            }
        }
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
            Source::Capture { first_error, .. } => {
                let s = &self.stats;
                let udp = s.packets - s.not_udp;
                let mut what = format!("{} packets, {} of them UDP/IPv4 datagrams", s.packets, udp);
                if s.not_moldudp64 > 0 {
                    what.push_str(&format!(
                        ", {} not MoldUDP64 packets ({})",
                        s.not_moldudp64,
                        first_error.as_deref().unwrap_or("")
                    ));
                }
                if s.heartbeats > 0 {
                    what.push_str(&format!(
                        ", {} MoldUDP64 heartbeats or end-of-session packets",
                        s.heartbeats
                    ));
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

fn is_pcap(prefix: &[u8]) -> bool {
    matches!(
        prefix,
        [0xa1, 0xb2, 0xc3, 0xd4, ..]
            | [0xd4, 0xc3, 0xb2, 0xa1, ..]
            | [0xa1, 0xb2, 0x3c, 0x4d, ..]
            | [0x4d, 0x3c, 0xb2, 0xa1, ..]
            | [0x0a, 0x0d, 0x0d, 0x0a, ..]
    )
}

/// MoldUDP64 session names are ASCII text (space padded); junk datagrams
/// rarely are.
fn is_session_name(s: &[u8]) -> bool {
    s.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
}

/// Reads the first messages as a BinaryFILE of ITCH 5.0.
fn probe_binaryfile(name: &str, file: File, prefix: &[u8]) -> Result<(), InputError> {
    let mut reader = BinaryFileReader::new(BufReader::new(file));
    let unrecognised = |why: String| InputError::Unrecognised {
        name: name.to_owned(),
        start: describe_bytes(&prefix[..prefix.len().min(8)]),
        why,
    };
    for _ in 0..PROBE_MESSAGES {
        let offset = reader.offset();
        let index = reader.messages_read();
        match reader.next_message() {
            Ok(None) => break,
            Ok(Some(m)) => {
                if let Err(e) = itch::decode(m) {
                    return Err(unrecognised(format!(
                        "message {index} at byte offset {offset} is not ITCH 5.0: {e}"
                    )));
                }
            }
            Err(e) => return Err(unrecognised(format!("fails: {e}"))),
        }
    }
    Ok(())
}

/// `bytes 68 65 6c 6c 6f ("hello")`.
pub fn describe_bytes(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let text: String = bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '.'
            }
        })
        .collect();
    format!("bytes {} (\"{text}\")", hex.join(" "))
}

fn read_prefix(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
