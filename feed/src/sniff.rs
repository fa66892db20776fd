//! Recognising a feed file by its content, from any reader, without
//! consuming it: a pipe or a FIFO is opened once, its format told from
//! its first bytes, and the same reader handed to the format's reader.
//!
//! ```
//! use mdbus_feed::sniff::{sniff, Format, PeekReader, Sniffed};
//! use mdbus_feed::mdcap::{MdcapReader, MdcapWriter};
//!
//! let mut w = MdcapWriter::new("demo", Vec::new())?;
//! w.write(1, 1, b"hello")?;
//! let bytes = w.finish()?;
//! // Any `Read` will do: a file, stdin, a FIFO.
//! let mut input = PeekReader::new(&bytes[..]);
//! assert_eq!(sniff(&mut input)?, Sniffed::Known(Format::Mdcap));
//! let mut r = MdcapReader::new("demo", input)?;
//! assert_eq!(r.next_record()?.unwrap().data, b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, BufRead, ErrorKind, Read};

use crate::binaryfile::{BinaryFileError, PREFIX_LEN};
use crate::{itch, mdcap, pcap};

/// Messages of a BinaryFILE decoded as ITCH 5.0 before it is taken for
/// one.
pub const PROBE_MESSAGES: u64 = 8;

/// Bytes a [`PeekReader`] buffers by default (and reads at a time).
const BUFFER: usize = 64 * 1024;

/// A buffered reader whose next bytes can be looked at, any number of
/// them, before they are consumed. Reading from it (as [`Read`] or
/// [`BufRead`]) returns peeked bytes first, so nothing is read twice and
/// nothing needs a seek.
#[derive(Debug)]
pub struct PeekReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl<R: Read> PeekReader<R> {
    /// Wraps `inner`, allocating a 64 KiB buffer now.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: vec![0; BUFFER],
            start: 0,
            end: 0,
        }
    }

    /// The next `n` bytes, or fewer at the end of the stream, without
    /// consuming them. Reads (blocking) until it has them.
    ///
    /// # Errors
    /// The underlying reader's.
    pub fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.end - self.start < n {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < n {
                self.buf.resize(n, 0);
            }
            while self.end < n {
                match self.inner.read(&mut self.buf[self.end..]) {
                    Ok(0) => break,
                    Ok(k) => self.end += k,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let have = (self.end - self.start).min(n);
        Ok(&self.buf[self.start..self.start + have])
    }

    /// The underlying reader (bytes peeked or buffered are lost).
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Read for PeekReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.start == self.end && out.len() >= self.buf.len() {
            return self.inner.read(out);
        }
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(out.len());
            out[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: Read> BufRead for PeekReader<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.start == self.end {
            self.start = 0;
            self.end = loop {
                match self.inner.read(&mut self.buf) {
                    Ok(k) => break k,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
        }
        Ok(&self.buf[self.start..self.end])
    }

    fn consume(&mut self, amt: usize) {
        self.start = (self.start + amt).min(self.end);
    }
}

/// The feed file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Classic pcap (see [`pcap::CaptureReader`]).
    Pcap,
    /// pcapng (see [`pcap::CaptureReader`]).
    PcapNg,
    /// mdbus's capture format (see [`mdcap::MdcapReader`]).
    Mdcap,
    /// An ITCH 5.0 BinaryFILE (see [`crate::binaryfile::BinaryFileReader`]).
    BinaryFile,
}

/// What [`sniff`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// One of the formats.
    Known(Format),
    /// The stream has no bytes at all.
    Empty,
    /// None of them.
    Unknown {
        /// Up to the first 8 bytes.
        start: Vec<u8>,
        /// Why it is not a BinaryFILE of ITCH 5.0 either (a sentence
        /// fragment: "message 0 at byte offset 0 is not ITCH 5.0: ...").
        why: String,
    },
}

/// Tells the format of `input` from its first bytes, consuming nothing: a
/// pcap, pcapng or mdcap magic number, else a BinaryFILE whose first
/// [`PROBE_MESSAGES`] messages (or all, if fewer) decode as ITCH 5.0.
///
/// # Errors
/// Reading fails.
pub fn sniff<R: Read>(input: &mut PeekReader<R>) -> io::Result<Sniffed> {
    let prefix = input.peek(mdcap::MAGIC.len())?;
    if prefix.is_empty() {
        return Ok(Sniffed::Empty);
    }
    match pcap::capture_format(prefix) {
        Some(pcap::CaptureFormat::Pcap) => return Ok(Sniffed::Known(Format::Pcap)),
        Some(pcap::CaptureFormat::PcapNg) => return Ok(Sniffed::Known(Format::PcapNg)),
        None => {}
    }
    // A file shorter than the magic but the start of it is a truncated
    // mdcap file, which its reader reports as such.
    if mdcap::MAGIC.starts_with(prefix) || mdcap::has_magic(prefix) {
        return Ok(Sniffed::Known(Format::Mdcap));
    }
    let start = prefix[..prefix.len().min(8)].to_vec();
    match probe_binaryfile(input)? {
        None => Ok(Sniffed::Known(Format::BinaryFile)),
        Some(why) => Ok(Sniffed::Unknown { start, why }),
    }
}

/// Peeks at the first messages as a BinaryFILE of ITCH 5.0; `Some(why)` if
/// they are not.
fn probe_binaryfile<R: Read>(input: &mut PeekReader<R>) -> io::Result<Option<String>> {
    let mut offset = 0usize;
    for index in 0..PROBE_MESSAGES {
        let head = input.peek(offset + PREFIX_LEN)?;
        let prefix = &head[offset.min(head.len())..];
        match prefix.len() {
            0 => return Ok(None),
            1 => {
                let e = BinaryFileError::TruncatedPrefix {
                    offset: offset as u64,
                    index,
                };
                return Ok(Some(format!("fails: {e}")));
            }
            _ => {}
        }
        let len = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
        let record = input.peek(offset + PREFIX_LEN + len)?;
        let Some(body) = record.get(offset + PREFIX_LEN..offset + PREFIX_LEN + len) else {
            let e = BinaryFileError::TruncatedMessage {
                offset: offset as u64,
                index,
                expected: len,
                actual: record.len().saturating_sub(offset + PREFIX_LEN),
            };
            return Ok(Some(format!("fails: {e}")));
        };
        if let Err(e) = itch::decode(body) {
            return Ok(Some(format!(
                "message {index} at byte offset {offset} is not ITCH 5.0: {e}"
            )));
        }
        offset += PREFIX_LEN + len;
    }
    Ok(None)
}
