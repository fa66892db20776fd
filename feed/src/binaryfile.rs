//! ITCH BinaryFILE: the file format of Nasdaq's historical ITCH files, in
//! which each message is preceded by its length as a 2-byte big-endian
//! integer and nothing else (no file header, no sequence numbers).
//!
//! Reference: Nasdaq's *BinaryFILE* format, the Soup file format in which
//! Historical TotalView-ITCH files are published. Each record is the same
//! length-prefixed block a MoldUDP64 packet carries, laid end to end.

use std::io::{self, ErrorKind, Read, Write};

use crate::bytes::read_full;

/// Length of the prefix before each message.
pub const PREFIX_LEN: usize = 2;

/// Why a BinaryFILE stream could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BinaryFileError {
    /// The stream ends one byte into a length prefix.
    #[error(
        "BinaryFILE truncated at byte offset {offset}: the stream ends 1 byte into \
         the 2-byte length prefix of message {index}"
    )]
    TruncatedPrefix {
        /// Byte offset of the prefix.
        offset: u64,
        /// Zero-based index of the message.
        index: u64,
    },
    /// The stream ends before the bytes a length prefix announces.
    #[error(
        "BinaryFILE truncated at byte offset {offset}: message {index} announces {expected} \
         bytes but the stream ends after {actual}"
    )]
    TruncatedMessage {
        /// Byte offset of the message's length prefix.
        offset: u64,
        /// Zero-based index of the message.
        index: u64,
        /// Length the prefix announces.
        expected: usize,
        /// Bytes present before the end.
        actual: usize,
    },
    /// The underlying reader failed.
    #[error("I/O error reading BinaryFILE at byte offset {offset}: {source}")]
    Io {
        /// Byte offset being read.
        offset: u64,
        /// The reader's error.
        #[source]
        source: io::Error,
    },
}

/// Reads length-prefixed messages one at a time into a reusable buffer.
///
/// Each call to [`BinaryFileReader::next_message`] performs two reads on
/// the underlying reader; wrap files in a `BufReader`.
///
/// ```
/// use mdbus_feed::binaryfile::BinaryFileReader;
///
/// let bytes: &[u8] = &[0, 2, b'h', b'i', 0, 1, b'!'];
/// let mut r = BinaryFileReader::new(bytes);
/// assert_eq!(r.next_message().unwrap(), Some(&b"hi"[..]));
/// assert_eq!(r.next_message().unwrap(), Some(&b"!"[..]));
/// assert_eq!(r.next_message().unwrap(), None);
/// ```
#[derive(Debug)]
pub struct BinaryFileReader<R> {
    reader: R,
    // Sized once to the largest possible message, so reading never grows it.
    buf: Box<[u8]>,
    offset: u64,
    index: u64,
}

impl<R: Read> BinaryFileReader<R> {
    /// A reader over `reader`, allocating its 64 KiB message buffer now.
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            buf: vec![0; usize::from(u16::MAX)].into_boxed_slice(),
            offset: 0,
            index: 0,
        }
    }

    /// The next message (without its prefix), or `None` at a clean end of
    /// stream. The slice borrows the reader's buffer until the next call.
    ///
    /// # Errors
    /// The stream ends inside a prefix or a message, or the reader fails;
    /// the error carries the byte offset of the message.
    pub fn next_message(&mut self) -> Result<Option<&[u8]>, BinaryFileError> {
        let start = self.offset;
        let mut prefix = [0; PREFIX_LEN];
        match read_full(&mut self.reader, &mut prefix) {
            Ok(0) => return Ok(None),
            Ok(PREFIX_LEN) => {}
            Ok(_) => {
                return Err(BinaryFileError::TruncatedPrefix {
                    offset: start,
                    index: self.index,
                })
            }
            Err(source) => {
                return Err(BinaryFileError::Io {
                    offset: start,
                    source,
                })
            }
        }
        let len = usize::from(u16::from_be_bytes(prefix));
        let body = &mut self.buf[..len];
        match read_full(&mut self.reader, body) {
            Ok(n) if n == len => {}
            Ok(actual) => {
                return Err(BinaryFileError::TruncatedMessage {
                    offset: start,
                    index: self.index,
                    expected: len,
                    actual,
                })
            }
            Err(source) => {
                return Err(BinaryFileError::Io {
                    offset: start + PREFIX_LEN as u64,
                    source,
                })
            }
        }
        self.offset = start + (PREFIX_LEN + len) as u64;
        self.index += 1;
        Ok(Some(&self.buf[..len]))
    }

    /// Byte offset of the next message's prefix (bytes consumed so far).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Messages read so far.
    pub fn messages_read(&self) -> u64 {
        self.index
    }

    /// The underlying reader.
    pub fn into_inner(self) -> R {
        self.reader
    }
}

/// Writes length-prefixed messages.
#[derive(Debug)]
pub struct BinaryFileWriter<W> {
    writer: W,
    offset: u64,
}

impl<W: Write> BinaryFileWriter<W> {
    /// A writer over `writer`; wrap files in a `BufWriter`.
    pub fn new(writer: W) -> Self {
        Self { writer, offset: 0 }
    }

    /// Writes the 2-byte length and the message.
    ///
    /// # Errors
    /// The message is longer than 65,535 bytes (`InvalidInput`, nothing
    /// written) or the writer fails.
    pub fn write_message(&mut self, message: &[u8]) -> io::Result<()> {
        let len = u16::try_from(message.len()).map_err(|_| {
            io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a {}-byte message exceeds the 65535-byte limit of a BinaryFILE record",
                    message.len()
                ),
            )
        })?;
        self.writer.write_all(&len.to_be_bytes())?;
        self.writer.write_all(message)?;
        self.offset += (PREFIX_LEN + message.len()) as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Flushes the underlying writer.
    ///
    /// # Errors
    /// The writer's.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// The underlying writer (not flushed).
    pub fn into_inner(self) -> W {
        self.writer
    }
}
