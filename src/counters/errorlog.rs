//! The error log of a counters file: each distinct error once, with the
//! time it first and last happened and how many times, readable while the
//! owner runs and after it died (in the spirit of Aeron's ErrorStat).
//!
//! A fixed region after the slots holds `N` entries of 256 bytes:
//!
//! | offset | what |
//! | --- | --- |
//! | 0 | sequence (atomic u64): odd while the entry is being written |
//! | 8 | FNV-1a hash of the text |
//! | 16 | first time, ns since the Unix epoch |
//! | 24 | last time, ns since the Unix epoch |
//! | 32 | count |
//! | 40 | text length in bytes (at most [`MAX_TEXT`]) |
//! | 48 | text, UTF-8, as 25 words |
//!
//! Errors are told apart by their text. Writers are serialised by the
//! owner (a lock on the error path, never per message); readers take no
//! lock: they retry an entry whose sequence changed under them (a
//! sequence lock), and take an entry left odd by an owner that died while
//! writing it as it is, marked not [`Entry::consistent`].

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::sys::file::checksum;
use crate::sys::map::Mapping;

/// Bytes per entry.
pub const ENTRY_BYTES: usize = 256;
/// Longest text kept, in bytes (longer texts are cut at a character
/// boundary).
pub const MAX_TEXT: usize = 200;
/// Most entries a log may have.
pub const MAX_ENTRIES: usize = 4096;
/// Entries in the log of a bus's counters file.
pub const DEFAULT_ENTRIES: usize = 64;

const SEQ: usize = 0;
const HASH: usize = 8;
const FIRST: usize = 16;
const LAST: usize = 24;
const COUNT: usize = 32;
const LEN: usize = 40;
const TEXT: usize = 48;
const TEXT_WORDS: usize = MAX_TEXT.div_ceil(8);
/// Attempts at a consistent read of an entry before taking it as it is.
const READ_ATTEMPTS: usize = 1000;

/// One distinct error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What happened (the error's sentence, cut at [`MAX_TEXT`] bytes).
    pub text: String,
    /// When it first happened, ns since the Unix epoch.
    pub first_ns: u64,
    /// When it last happened, ns since the Unix epoch.
    pub last_ns: u64,
    /// How many times it happened.
    pub count: u64,
    /// False when the owner died in the middle of updating this entry
    /// (its fields may mix the old and the new update).
    pub consistent: bool,
}

/// `text` cut to at most [`MAX_TEXT`] bytes at a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= MAX_TEXT {
        return text;
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A view of the log region of a mapping.
pub(crate) struct Log<'a> {
    map: &'a Mapping,
    base: usize,
    entries: usize,
}

impl<'a> Log<'a> {
    /// The log of `entries` entries at byte `base` of `map`; the caller
    /// checked that the region lies inside the mapping.
    pub(crate) fn new(map: &'a Mapping, base: usize, entries: usize) -> Log<'a> {
        Log { map, base, entries }
    }

    fn word(&self, j: usize, off: usize) -> &AtomicU64 {
        self.map.atomic_u64(self.base + j * ENTRY_BYTES + off)
    }

    /// The text of entry `j` (`len` bytes), from its words.
    fn text(&self, j: usize, len: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(TEXT_WORDS * 8);
        for w in 0..TEXT_WORDS {
            let v = self.word(j, TEXT + 8 * w).load(Ordering::Relaxed);
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.truncate(len.min(MAX_TEXT));
        bytes
    }

    /// Records `text` at `now_ns`. The caller serialises writers; `used`
    /// is the count of entries in use. False when the log is full.
    pub(crate) fn record(&self, used: &AtomicU64, text: &str, now_ns: u64) -> bool {
        let text = cut(text).as_bytes();
        let hash = checksum(text);
        let n = (used.load(Ordering::Relaxed) as usize).min(self.entries);
        for j in 0..n {
            if self.word(j, HASH).load(Ordering::Relaxed) == hash
                && self.word(j, LEN).load(Ordering::Relaxed) as usize == text.len()
                && self.text(j, text.len()) == text
            {
                self.write(j, |log| {
                    log.word(j, LAST).store(now_ns, Ordering::Relaxed);
                    let c = log.word(j, COUNT).load(Ordering::Relaxed);
                    log.word(j, COUNT)
                        .store(c.saturating_add(1), Ordering::Relaxed);
                });
                return true;
            }
        }
        if n == self.entries {
            return false;
        }
        self.write(n, |log| {
            log.word(n, HASH).store(hash, Ordering::Relaxed);
            log.word(n, FIRST).store(now_ns, Ordering::Relaxed);
            log.word(n, LAST).store(now_ns, Ordering::Relaxed);
            log.word(n, COUNT).store(1, Ordering::Relaxed);
            log.word(n, LEN).store(text.len() as u64, Ordering::Relaxed);
            for (w, chunk) in text.chunks(8).enumerate() {
                let mut b = [0u8; 8];
                b[..chunk.len()].copy_from_slice(chunk);
                log.word(n, TEXT + 8 * w)
                    .store(u64::from_le_bytes(b), Ordering::Relaxed);
            }
        });
        // Release: a reader that counts the entry sees it written.
        used.store(n as u64 + 1, Ordering::Release);
        true
    }

    /// Runs `f` on entry `j` inside its sequence lock.
    fn write(&self, j: usize, f: impl FnOnce(&Self)) {
        let seq = self.word(j, SEQ);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Relaxed);
        // The odd sequence is visible before any field changes.
        fence(Ordering::Release);
        f(self);
        seq.store((s | 1) + 1, Ordering::Release);
    }

    /// The first `used` entries.
    pub(crate) fn read(&self, used: usize) -> Vec<Entry> {
        (0..used.min(self.entries))
            .map(|j| self.read_one(j))
            .collect()
    }

    fn read_one(&self, j: usize) -> Entry {
        let seq = self.word(j, SEQ);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let s1 = seq.load(Ordering::Acquire);
            let len = self.word(j, LEN).load(Ordering::Relaxed) as usize;
            let text = self.text(j, len);
            let first_ns = self.word(j, FIRST).load(Ordering::Relaxed);
            let last_ns = self.word(j, LAST).load(Ordering::Relaxed);
            let count = self.word(j, COUNT).load(Ordering::Relaxed);
            // The field loads happen before the second sequence load.
            fence(Ordering::Acquire);
            let s2 = seq.load(Ordering::Relaxed);
            let consistent = s1 == s2 && s1 % 2 == 0;
            if consistent || attempt >= READ_ATTEMPTS {
                return Entry {
                    text: String::from_utf8_lossy(&text).into_owned(),
                    first_ns,
                    last_ns,
                    count,
                    consistent,
                };
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{CountersFile, CountersReader};

    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mdbus-elog-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn distinct_errors_are_kept_once_with_first_last_and_count() {
        let dir = scratch("distinct");
        let path = dir.join("c");
        let f = CountersFile::with_capacity(&path, "t", 4, 2).unwrap();
        assert!(f.record_error("socket closed", 100));
        assert!(f.record_error("device gone", 150));
        assert!(f.record_error("socket closed", 200));
        assert!(f.record_error("socket closed", 300));
        assert!(
            !f.record_error("a third distinct error", 400),
            "the log holds two"
        );
        let r = CountersReader::open(&path).unwrap();
        let e = r.errors();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].text.as_str(), e[0].first_ns, e[0].last_ns, e[0].count),
            ("socket closed", 100, 300, 3)
        );
        assert_eq!(
            (e[1].text.as_str(), e[1].first_ns, e[1].last_ns, e[1].count),
            ("device gone", 150, 150, 1)
        );
        assert!(e.iter().all(|x| x.consistent));
        assert_eq!(r.errors_lost(), 1);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        let dir = scratch("long");
        let path = dir.join("c");
        let f = CountersFile::with_capacity(&path, "t", 0, 1).unwrap();
        let long = "é".repeat(150); // 300 bytes
        f.record_error(&long, 1);
        f.record_error(&long, 2);
        let e = CountersReader::open(&path).unwrap().errors();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].text, "é".repeat(100));
        assert_eq!(e[0].count, 2);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn cut_keeps_short_texts() {
        assert_eq!(cut("abc"), "abc");
        assert_eq!(cut(&"x".repeat(201)).len(), 200);
    }
}
