//! mdbus's own capture format (.mdcap): timestamped messages as a relay
//! saw them, for replay.
//!
//! A pcap holds whole packets and a BinaryFILE holds no times at all; an
//! mdcap file holds exactly what a replay needs: each message with its
//! arrival time and its upstream sequence number, nothing else.
//!
//! # Layout (version 2)
//!
//! All integers little-endian.
//!
//! File header, 16 bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic, the ASCII bytes `MDBUSCAP` |
//! | 8 | 2 | format version, 2 |
//! | 10 | 2 | `S`, the number of stream names that follow (at most 65,533) |
//! | 12 | 4 | reserved, zero (readers ignore them) |
//!
//! Then the stream table: `S` names, each a 1-byte length and that many
//! bytes of UTF-8. A record's stream index points into this table.
//!
//! Then records, end to end, until the end of the file. Each record is a
//! 24-byte header followed by the message:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | arrival time, nanoseconds since the Unix epoch |
//! | 8 | 8 | sequence number upstream (the MoldUDP64 sequence of the message) |
//! | 16 | 4 | message length `L`, at most 65,535 |
//! | 20 | 2 | stream index: below `S`, the stream it was published on; [`STREAM_ALL`] (65,535): every stream; [`STREAM_NONE`] (65,534): none (not routed) |
//! | 22 | 2 | reserved, zero |
//! | 24 | `L` | the message bytes |
//!
//! Version 1 files (no stream table, 20-byte record headers without the
//! stream index) are still read; their records have the stream index
//! [`STREAM_NONE`].
//!
//! A file that ends exactly after a record is complete; one that ends
//! anywhere else is truncated, and the reader says where.
//!
//! ```
//! use mdbus_feed::mdcap::{MdcapReader, MdcapWriter};
//!
//! let mut w = MdcapWriter::new("demo.mdcap", Vec::new())?;
//! w.write(1_700_000_000_000_000_000, 1, b"first")?;
//! w.write(1_700_000_000_000_001_000, 2, b"second")?;
//! let bytes = w.finish()?;
//!
//! let mut r = MdcapReader::new("demo.mdcap", &bytes[..])?;
//! let rec = r.next_record()?.unwrap();
//! assert_eq!((rec.timestamp_ns, rec.sequence, rec.data), (1_700_000_000_000_000_000, 1, &b"first"[..]));
//! assert_eq!(r.next_record()?.unwrap().data, b"second");
//! assert!(r.next_record()?.is_none());
//! # Ok::<(), mdbus_feed::mdcap::MdcapError>(())
//! ```

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};

use crate::bytes::{describe_bytes, read_full};
use std::path::Path;

/// The first 8 bytes of every mdcap file.
pub const MAGIC: [u8; 8] = *b"MDBUSCAP";
/// The format version this build writes (it also reads version 1).
pub const VERSION: u16 = 2;
/// Length of the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Length of the header in front of each message (version 2).
pub const RECORD_HEADER_LEN: usize = 24;
/// Length of the header in front of each message in version 1 files.
pub const RECORD_HEADER_LEN_V1: usize = 20;
/// Stream index of a message published on every stream.
pub const STREAM_ALL: u16 = u16::MAX;
/// Stream index of a message published on no stream (not routed, or read
/// from a version 1 file).
pub const STREAM_NONE: u16 = u16::MAX - 1;
/// Most stream names a file's table may hold (the two indexes above are
/// reserved).
pub const MAX_STREAMS: usize = STREAM_NONE as usize;
/// Longest stream name in the table, in bytes.
pub const MAX_STREAM_NAME_LEN: usize = 255;
/// Longest message a record may hold.
pub const MAX_MESSAGE_LEN: usize = 65_535;

/// Why an mdcap file could not be read or written. Every variant names the
/// file (or the name the caller gave the stream).
#[derive(Debug, thiserror::Error)]
pub enum MdcapError {
    /// The file could not be opened.
    #[error("cannot open {name}: {source}")]
    Open {
        /// File name.
        name: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file could not be created.
    #[error("cannot create {name}: {source}")]
    Create {
        /// File name.
        name: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file has no bytes at all.
    #[error("{name} is empty: an mdcap file starts with a {FILE_HEADER_LEN}-byte header")]
    Empty {
        /// File name.
        name: String,
    },
    /// The file ends inside its header.
    #[error(
        "{name} is truncated: the file ends {len} bytes into the {FILE_HEADER_LEN}-byte mdcap \
         file header"
    )]
    TruncatedHeader {
        /// File name.
        name: String,
        /// Bytes present.
        len: usize,
    },
    /// The file does not start with [`MAGIC`].
    #[error("{name} is not an mdcap file: it starts with {found}, not the magic \"MDBUSCAP\"")]
    BadMagic {
        /// File name.
        name: String,
        /// The first bytes, described.
        found: String,
    },
    /// A version this build does not read.
    #[error("{name} is mdcap format version {version}; this build reads versions 1 and {VERSION}")]
    UnsupportedVersion {
        /// File name.
        name: String,
        /// The version in the header.
        version: u16,
    },
    /// The file ends inside a record.
    #[error("{name} is truncated at byte offset {offset}: record {index} {what}")]
    Truncated {
        /// File name.
        name: String,
        /// Byte offset of the record's header.
        offset: u64,
        /// Zero-based index of the record.
        index: u64,
        /// Where in the record the file ends.
        what: String,
    },
    /// A record announces more bytes than a record may hold (a corrupt
    /// length).
    #[error(
        "{name} is malformed at byte offset {offset}: record {index} announces {len} bytes, \
         more than the {MAX_MESSAGE_LEN} a record may hold"
    )]
    BadLength {
        /// File name.
        name: String,
        /// Byte offset of the record's header.
        offset: u64,
        /// Zero-based index of the record.
        index: u64,
        /// The length announced.
        len: u32,
    },
    /// A message too long for a record was given to the writer.
    #[error(
        "cannot write to {name}: a {len}-byte message exceeds the {MAX_MESSAGE_LEN}-byte limit \
         of an mdcap record"
    )]
    MessageTooLong {
        /// File name.
        name: String,
        /// Message length.
        len: usize,
    },
    /// The stream table is damaged: it ends early or holds a name that is
    /// not UTF-8.
    #[error("{name} is malformed at byte offset {offset}: the stream table {what}")]
    BadStreamTable {
        /// File name.
        name: String,
        /// Byte offset of the table entry.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A record names a stream the file's table does not hold.
    #[error(
        "{name} is malformed at byte offset {offset}: record {index} names stream index \
         {stream}, but the file's stream table holds {streams}"
    )]
    BadStream {
        /// File name.
        name: String,
        /// Byte offset of the record's header.
        offset: u64,
        /// Zero-based index of the record.
        index: u64,
        /// The stream index in the record.
        stream: u16,
        /// Names in the table.
        streams: usize,
    },
    /// The writer was given stream names the format cannot hold, or a
    /// stream index outside them.
    #[error("cannot write to {name}: {what}")]
    BadStreamArgument {
        /// File name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// Reading or writing failed.
    #[error("I/O error on {name} at byte offset {offset}: {source}")]
    Io {
        /// File name.
        name: String,
        /// Byte offset being read or written.
        offset: u64,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// True if `prefix` (the first bytes of a file) starts with [`MAGIC`].
pub fn has_magic(prefix: &[u8]) -> bool {
    prefix.starts_with(&MAGIC)
}

/// One record: a message and when and as what it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Arrival time, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// Sequence number upstream (MoldUDP64).
    pub sequence: u64,
    /// The stream it was published on: an index into the file's stream
    /// table ([`MdcapReader::streams`]), [`STREAM_ALL`] or [`STREAM_NONE`].
    pub stream: u16,
    /// The message.
    pub data: &'a [u8],
}

/// Writes an mdcap file: the header at once, then one record per
/// [`MdcapWriter::write`]. Writing allocates nothing per record.
#[derive(Debug)]
pub struct MdcapWriter<W: Write> {
    name: String,
    writer: W,
    offset: u64,
    records: u64,
    streams: usize,
}

impl MdcapWriter<BufWriter<File>> {
    /// Creates (or truncates) a file and writes the header, with an empty
    /// stream table.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, MdcapError> {
        Self::create_with_streams(path, &[] as &[&str])
    }

    /// Creates (or truncates) a file and writes the header and a table of
    /// `streams`, which [`MdcapWriter::write_on`] indexes.
    ///
    /// # Errors
    /// The file cannot be created or written, or the names do not fit the
    /// format (more than [`MAX_STREAMS`], one longer than
    /// [`MAX_STREAM_NAME_LEN`] bytes).
    pub fn create_with_streams(
        path: impl AsRef<Path>,
        streams: &[impl AsRef<str>],
    ) -> Result<Self, MdcapError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::create(path).map_err(|source| MdcapError::Create {
            name: name.clone(),
            source,
        })?;
        Self::with_streams(name, BufWriter::new(file), streams)
    }
}

impl<W: Write> MdcapWriter<W> {
    /// Writes the file header to `writer`; `name` is what errors call the
    /// stream.
    ///
    /// # Errors
    /// Writing the header fails.
    pub fn new(name: impl Into<String>, writer: W) -> Result<Self, MdcapError> {
        Self::with_streams(name, writer, &[] as &[&str])
    }

    /// Writes the file header and the table of `streams` to `writer`.
    ///
    /// # Errors
    /// As [`MdcapWriter::create_with_streams`].
    pub fn with_streams(
        name: impl Into<String>,
        mut writer: W,
        streams: &[impl AsRef<str>],
    ) -> Result<Self, MdcapError> {
        let name = name.into();
        let bad = |what: String| MdcapError::BadStreamArgument {
            name: name.clone(),
            what,
        };
        let count = match u16::try_from(streams.len()) {
            Ok(n) if streams.len() <= MAX_STREAMS => n,
            _ => {
                return Err(bad(format!(
                    "{} stream names, more than the {MAX_STREAMS} a file may hold",
                    streams.len()
                )))
            }
        };
        let mut table = Vec::new();
        for s in streams {
            let s = s.as_ref();
            let len = u8::try_from(s.len()).map_err(|_| {
                bad(format!(
                    "stream name {s:?} is {} bytes, more than {MAX_STREAM_NAME_LEN}",
                    s.len()
                ))
            })?;
            table.push(len);
            table.extend_from_slice(s.as_bytes());
        }
        let mut header = [0u8; FILE_HEADER_LEN];
        header[..8].copy_from_slice(&MAGIC);
        header[8..10].copy_from_slice(&VERSION.to_le_bytes());
        header[10..12].copy_from_slice(&count.to_le_bytes());
        writer
            .write_all(&header)
            .and_then(|()| writer.write_all(&table))
            .map_err(|source| MdcapError::Io {
                name: name.clone(),
                offset: 0,
                source,
            })?;
        Ok(Self {
            name,
            writer,
            offset: (FILE_HEADER_LEN + table.len()) as u64,
            records: 0,
            streams: streams.len(),
        })
    }

    /// Appends one record: `message`, which arrived at `timestamp_ns`
    /// (nanoseconds since the Unix epoch) as upstream sequence `sequence`.
    ///
    /// # Errors
    /// The message is longer than [`MAX_MESSAGE_LEN`] (nothing is
    /// written), or writing fails.
    pub fn write(
        &mut self,
        timestamp_ns: u64,
        sequence: u64,
        message: &[u8],
    ) -> Result<(), MdcapError> {
        self.write_on(timestamp_ns, sequence, STREAM_NONE, message)
    }

    /// Appends one record of a message published on `stream` (an index
    /// into the table given at creation, [`STREAM_ALL`] or
    /// [`STREAM_NONE`]).
    ///
    /// # Errors
    /// As [`MdcapWriter::write`], and a stream index outside the table
    /// (nothing is written).
    pub fn write_on(
        &mut self,
        timestamp_ns: u64,
        sequence: u64,
        stream: u16,
        message: &[u8],
    ) -> Result<(), MdcapError> {
        if usize::from(stream) >= self.streams && stream < STREAM_NONE {
            return Err(MdcapError::BadStreamArgument {
                name: self.name.clone(),
                what: format!(
                    "stream index {stream}, but the file's stream table holds {}",
                    self.streams
                ),
            });
        }
        let len = match u32::try_from(message.len()) {
            Ok(len) if message.len() <= MAX_MESSAGE_LEN => len,
            _ => {
                return Err(MdcapError::MessageTooLong {
                    name: self.name.clone(),
                    len: message.len(),
                })
            }
        };
        let mut header = [0u8; RECORD_HEADER_LEN];
        header[0..8].copy_from_slice(&timestamp_ns.to_le_bytes());
        header[8..16].copy_from_slice(&sequence.to_le_bytes());
        header[16..20].copy_from_slice(&len.to_le_bytes());
        header[20..22].copy_from_slice(&stream.to_le_bytes());
        let result = self
            .writer
            .write_all(&header)
            .and_then(|()| self.writer.write_all(message));
        if let Err(source) = result {
            return Err(MdcapError::Io {
                name: self.name.clone(),
                offset: self.offset,
                source,
            });
        }
        self.offset += (RECORD_HEADER_LEN + message.len()) as u64;
        self.records += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Bytes written so far, the file header included.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Flushes and returns the underlying writer.
    ///
    /// # Errors
    /// Flushing fails.
    pub fn finish(mut self) -> Result<W, MdcapError> {
        self.writer.flush().map_err(|source| MdcapError::Io {
            name: self.name,
            offset: self.offset,
            source,
        })?;
        Ok(self.writer)
    }
}

/// Reads an mdcap file one record at a time into a buffer allocated once
/// (64 KiB), so reading allocates nothing per record.
#[derive(Debug)]
pub struct MdcapReader<R: Read> {
    name: String,
    reader: R,
    buf: Box<[u8]>,
    offset: u64,
    index: u64,
    version: u16,
    streams: Vec<String>,
}

impl MdcapReader<BufReader<File>> {
    /// Opens a file and checks its header.
    ///
    /// # Errors
    /// The file cannot be opened, is empty, ends inside the header, does
    /// not start with the magic, or has another format version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MdcapError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| MdcapError::Open {
            name: name.clone(),
            source,
        })?;
        Self::new(name, BufReader::new(file))
    }
}

impl<R: Read> MdcapReader<R> {
    /// Reads and checks the header from `reader`; `name` is what errors
    /// call the stream. Each record costs two reads: wrap files in a
    /// `BufReader`.
    ///
    /// # Errors
    /// As [`MdcapReader::open`].
    pub fn new(name: impl Into<String>, mut reader: R) -> Result<Self, MdcapError> {
        let name = name.into();
        let mut header = [0u8; FILE_HEADER_LEN];
        let n = read_full(&mut reader, &mut header).map_err(|source| MdcapError::Io {
            name: name.clone(),
            offset: 0,
            source,
        })?;
        if n == 0 {
            return Err(MdcapError::Empty { name });
        }
        // The magic is checked on what there is, so a short file of
        // something else is "not an mdcap file" rather than "truncated".
        let magic_len = n.min(MAGIC.len());
        if header[..magic_len] != MAGIC[..magic_len] {
            return Err(MdcapError::BadMagic {
                name,
                found: describe_bytes(&header[..magic_len]),
            });
        }
        if n < FILE_HEADER_LEN {
            return Err(MdcapError::TruncatedHeader { name, len: n });
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        if version != 1 && version != VERSION {
            return Err(MdcapError::UnsupportedVersion { name, version });
        }
        let mut offset = FILE_HEADER_LEN as u64;
        let mut streams = Vec::new();
        if version >= 2 {
            let count = usize::from(u16::from_le_bytes([header[10], header[11]]));
            if count > MAX_STREAMS {
                return Err(MdcapError::BadStreamTable {
                    name,
                    offset: 10,
                    what: format!("announces {count} names, more than {MAX_STREAMS}"),
                });
            }
            let mut buf = [0u8; MAX_STREAM_NAME_LEN];
            for i in 0..count {
                let table_err = |what: String| MdcapError::BadStreamTable {
                    name: name.clone(),
                    offset,
                    what,
                };
                let mut len = [0u8; 1];
                let got = read_full(&mut reader, &mut len).map_err(|source| MdcapError::Io {
                    name: name.clone(),
                    offset,
                    source,
                })?;
                if got == 0 {
                    return Err(table_err(format!("ends after {i} of its {count} names")));
                }
                let len = usize::from(len[0]);
                let got =
                    read_full(&mut reader, &mut buf[..len]).map_err(|source| MdcapError::Io {
                        name: name.clone(),
                        offset,
                        source,
                    })?;
                if got < len {
                    return Err(table_err(format!(
                        "ends inside name {i}, which announces {len} bytes"
                    )));
                }
                let s = std::str::from_utf8(&buf[..len])
                    .map_err(|_| table_err(format!("name {i} is not UTF-8")))?;
                streams.push(s.to_string());
                offset += 1 + len as u64;
            }
        }
        Ok(Self {
            name,
            reader,
            buf: vec![0; MAX_MESSAGE_LEN].into_boxed_slice(),
            offset,
            index: 0,
            version,
            streams,
        })
    }

    /// The stream names of the file's table, which records' stream
    /// indexes point into (empty for version 1 files).
    pub fn streams(&self) -> &[String] {
        &self.streams
    }

    /// The file's format version (1 or 2).
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The next record, or `None` at the end of the file. The record's
    /// data borrows the reader's buffer until the next call.
    ///
    /// # Errors
    /// The file ends inside a record, a record's length is impossible, or
    /// reading fails; the error gives the byte offset and the record's
    /// index.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, MdcapError> {
        let start = self.offset;
        let header_len = if self.version == 1 {
            RECORD_HEADER_LEN_V1
        } else {
            RECORD_HEADER_LEN
        };
        let mut header = [0u8; RECORD_HEADER_LEN];
        match read_full(&mut self.reader, &mut header[..header_len]) {
            Ok(0) => return Ok(None),
            Ok(n) if n == header_len => {}
            Ok(n) => {
                return Err(self.truncated(
                    start,
                    format!("ends {n} bytes into its {header_len}-byte header"),
                ))
            }
            Err(source) => return Err(self.io(start, source)),
        }
        let [t0, t1, t2, t3, t4, t5, t6, t7, s0, s1, s2, s3, s4, s5, s6, s7, l0, l1, l2, l3, i0, i1, _, _] =
            header;
        let timestamp_ns = u64::from_le_bytes([t0, t1, t2, t3, t4, t5, t6, t7]);
        let sequence = u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
        let announced = u32::from_le_bytes([l0, l1, l2, l3]);
        let stream = if self.version == 1 {
            STREAM_NONE
        } else {
            u16::from_le_bytes([i0, i1])
        };
        if usize::from(stream) >= self.streams.len() && stream < STREAM_NONE {
            return Err(MdcapError::BadStream {
                name: self.name.clone(),
                offset: start,
                index: self.index,
                stream,
                streams: self.streams.len(),
            });
        }
        let len = match usize::try_from(announced) {
            Ok(len) if len <= MAX_MESSAGE_LEN => len,
            _ => {
                return Err(MdcapError::BadLength {
                    name: self.name.clone(),
                    offset: start,
                    index: self.index,
                    len: announced,
                })
            }
        };
        match read_full(&mut self.reader, &mut self.buf[..len]) {
            Ok(n) if n == len => {}
            Ok(actual) => {
                return Err(self.truncated(
                    start,
                    format!("announces {len} bytes but the file ends after {actual}"),
                ))
            }
            Err(source) => return Err(self.io(start + header_len as u64, source)),
        }
        self.offset = start + (header_len + len) as u64;
        self.index += 1;
        Ok(Some(Record {
            timestamp_ns,
            sequence,
            stream,
            data: &self.buf[..len],
        }))
    }

    /// The name errors use (the path, for [`MdcapReader::open`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Byte offset of the next record (bytes consumed so far).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Records read so far.
    pub fn records_read(&self) -> u64 {
        self.index
    }

    #[cold]
    fn truncated(&self, offset: u64, what: String) -> MdcapError {
        MdcapError::Truncated {
            name: self.name.clone(),
            offset,
            index: self.index,
            what,
        }
    }

    #[cold]
    fn io(&self, offset: u64, source: io::Error) -> MdcapError {
        MdcapError::Io {
            name: self.name.clone(),
            offset,
            source,
        }
    }
}
