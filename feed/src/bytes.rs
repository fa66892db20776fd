//! Small helpers the file readers share: filling a buffer while telling
//! how far a short file got, and showing a file's first bytes in an error.

use std::io::{self, ErrorKind, Read};

/// Fills `buf` unless the stream ends first; returns the bytes read. Unlike
/// `read_exact`, tells how far it got, which the truncation errors report.
pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// `bytes 68 65 6c 6c 6f ("hello")`: the start of a file, for an error;
/// bytes that are not printable ASCII show as `.` in the text.
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
