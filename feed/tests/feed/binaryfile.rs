//! BinaryFILE: write/read round trips, truncated files, awkward readers.

use std::io::{self, Read};

use mdbus_feed::binaryfile::{BinaryFileError, BinaryFileReader, BinaryFileWriter};
use mdbus_feed::itch;

use crate::common::{encode, one_of_each};

fn file_of_every_type() -> (Vec<Vec<u8>>, Vec<u8>) {
    let messages: Vec<Vec<u8>> = one_of_each().iter().map(encode).collect();
    let mut w = BinaryFileWriter::new(Vec::new());
    for m in &messages {
        w.write_message(m).unwrap();
    }
    let expected_len: usize = messages.iter().map(|m| m.len() + 2).sum();
    assert_eq!(w.bytes_written(), expected_len as u64);
    (messages, w.into_inner())
}

#[test]
fn round_trip_of_every_type() {
    let (messages, file) = file_of_every_type();
    let mut r = BinaryFileReader::new(&file[..]);
    let mut offset = 0;
    for m in &messages {
        assert_eq!(r.offset(), offset);
        let got = r.next_message().unwrap().unwrap();
        assert_eq!(got, &m[..]);
        itch::decode(got).unwrap();
        offset += 2 + m.len() as u64;
    }
    assert_eq!(r.next_message().unwrap(), None);
    assert_eq!(r.next_message().unwrap(), None);
    assert_eq!(r.messages_read(), messages.len() as u64);
    assert_eq!(r.offset(), file.len() as u64);
}

#[test]
fn empty_stream_and_empty_message() {
    let mut r = BinaryFileReader::new(io::empty());
    assert_eq!(r.next_message().unwrap(), None);

    let mut r = BinaryFileReader::new(&[0u8, 0, 0, 1, 7][..]);
    assert_eq!(r.next_message().unwrap(), Some(&[][..]));
    assert_eq!(r.next_message().unwrap(), Some(&[7][..]));
    assert_eq!(r.next_message().unwrap(), None);
}

#[test]
fn truncated_final_message_reports_its_offset() {
    let (messages, file) = file_of_every_type();
    let last = messages.last().unwrap();
    let last_offset = (file.len() - 2 - last.len()) as u64;
    for cut in 1..last.len() {
        let truncated = &file[..file.len() - cut];
        let mut r = BinaryFileReader::new(truncated);
        for _ in 0..messages.len() - 1 {
            r.next_message().unwrap().unwrap();
        }
        match r.next_message() {
            Err(BinaryFileError::TruncatedMessage {
                offset,
                index,
                expected,
                actual,
            }) => {
                assert_eq!(offset, last_offset);
                assert_eq!(index, messages.len() as u64 - 1);
                assert_eq!(expected, last.len());
                assert_eq!(actual, last.len() - cut);
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    // Cut inside the length prefix.
    let mut r = BinaryFileReader::new(&file[..file.len() - last.len() - 1]);
    for _ in 0..messages.len() - 1 {
        r.next_message().unwrap().unwrap();
    }
    let e = r.next_message().unwrap_err();
    assert!(matches!(
        e,
        BinaryFileError::TruncatedPrefix { offset, index: 22 } if offset == last_offset
    ));
    assert_eq!(
        e.to_string(),
        format!(
            "BinaryFILE truncated at byte offset {last_offset}: the stream ends 1 byte into \
             the 2-byte length prefix of message 22"
        )
    );
}

#[test]
fn truncation_message_names_the_offset() {
    // A 2-byte message, then one that announces 9 bytes and has 2.
    let mut r = BinaryFileReader::new(&[0u8, 2, 1, 0, 0, 9, 1, 2][..]);
    assert_eq!(r.next_message().unwrap(), Some(&[1, 0][..]));
    let e = r.next_message().unwrap_err();
    assert_eq!(
        e.to_string(),
        "BinaryFILE truncated at byte offset 4: message 1 announces 9 bytes but the stream ends after 2"
    );
}

/// Hands out one byte per read, and an interruption before each.
struct Trickle<'a> {
    data: &'a [u8],
    interrupt: bool,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.interrupt = !self.interrupt;
        if self.interrupt {
            return Err(io::ErrorKind::Interrupted.into());
        }
        match (self.data.split_first(), buf.first_mut()) {
            (Some((b, rest)), Some(slot)) => {
                *slot = *b;
                self.data = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[test]
fn short_reads_and_interruptions_are_retried() {
    let (messages, file) = file_of_every_type();
    let mut r = BinaryFileReader::new(Trickle {
        data: &file,
        interrupt: false,
    });
    for m in &messages {
        assert_eq!(r.next_message().unwrap().unwrap(), &m[..]);
    }
    assert_eq!(r.next_message().unwrap(), None);
}

struct Failing;

impl Read for Failing {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other("disk on fire"))
    }
}

#[test]
fn reader_errors_carry_the_offset() {
    let e = BinaryFileReader::new(Failing).next_message().unwrap_err();
    assert!(matches!(e, BinaryFileError::Io { offset: 0, .. }));
    assert_eq!(
        e.to_string(),
        "I/O error reading BinaryFILE at byte offset 0: disk on fire"
    );
}

#[test]
fn writer_refuses_oversized_messages() {
    let mut w = BinaryFileWriter::new(Vec::new());
    let e = w.write_message(&vec![0; 65_536]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(w.into_inner().is_empty(), "nothing written");
}
