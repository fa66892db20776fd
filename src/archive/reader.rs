//! Reading an archive, read-only, trusting no byte of it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{self, Decoded, SegmentHeader};
use super::writer::list_segments;
use super::ArchiveError;
use crate::message::Message;

/// Bytes read at a time.
const READ_CHUNK: usize = 256 << 10;

/// What a reader yields, in sequence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    /// A recorded message.
    Message(Message<'a>),
    /// Sequences `from..to` (end exclusive) are not in the archive: the
    /// recorder never received them, or retention deleted them.
    Gap {
        /// First missing sequence.
        from: u64,
        /// Sequence the archive resumes at.
        to: u64,
    },
}

/// Counters of a reader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Message records delivered.
    pub records: u64,
    /// Gaps delivered.
    pub gaps: u64,
    /// Index entries that did not point at their record (the segment was
    /// scanned from its start instead).
    pub index_fallbacks: u64,
    /// Reads that stopped at bytes of the newest segment that are not a
    /// whole valid record: a record being written, or a crashed writer's
    /// torn tail.
    pub tail_stops: u64,
}

#[derive(Debug)]
struct Seg {
    file: File,
    path: PathBuf,
    base: u64,
    /// Position of the next record.
    pos: u64,
    /// Sequence that record must carry.
    next: u64,
}

/// Reads the records of an archive directory from any sequence. The
/// directory may be written by a live recorder at the same time: what it
/// has not written yet is simply not there yet.
#[derive(Debug)]
pub struct ArchiveReader {
    dir: PathBuf,
    bases: Vec<u64>,
    seg: Option<Seg>,
    buf: Vec<u8>,
    buf_at: u64,
    buf_len: usize,
    /// Next sequence to deliver.
    want: u64,
    /// The publisher epoch of the segments opened so far (0: not known).
    epoch: u64,
    stats: ReaderStats,
}

impl ArchiveReader {
    /// Opens the archive in `dir` positioned at its first record.
    pub fn open(dir: impl AsRef<Path>) -> Result<ArchiveReader, ArchiveError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(ArchiveError::NotAnArchive {
                path: dir,
                reason: "is not a directory".into(),
            });
        }
        let bases = list_segments(&dir)?;
        let want = bases.first().copied().unwrap_or(1);
        Ok(ArchiveReader {
            dir,
            bases,
            seg: None,
            buf: Vec::new(),
            buf_at: 0,
            buf_len: 0,
            want,
            epoch: 0,
            stats: ReaderStats::default(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Counters.
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// First sequence the archive holds now, if any.
    pub fn first_seq(&mut self) -> Result<Option<u64>, ArchiveError> {
        self.bases = list_segments(&self.dir)?;
        Ok(self.bases.first().copied())
    }

    /// Sequence the next item starts at.
    pub fn position(&self) -> u64 {
        self.want
    }

    /// The publisher epoch of the records the next item comes from (the
    /// segment holding [`position`](Self::position) is opened for it):
    /// `None` while the archive is empty or when its segments do not
    /// record it (format version 1). Every segment read is checked
    /// against it: two epochs in one directory are an error.
    pub fn epoch(&mut self) -> Result<Option<u64>, ArchiveError> {
        if self.seg.is_none() && !self.locate()? {
            return Ok(None);
        }
        Ok((self.epoch != 0).then_some(self.epoch))
    }

    /// Positions the reader so that the next item starts at `seq` (a Gap
    /// first when the archive no longer, or not yet, holds it).
    pub fn seek(&mut self, seq: u64) -> Result<(), ArchiveError> {
        self.want = seq.max(1);
        self.seg = None;
        self.buf_len = 0;
        Ok(())
    }

    /// Opens the segment holding `self.want` (or the first one after
    /// it), using its index.
    fn locate(&mut self) -> Result<bool, ArchiveError> {
        self.bases = list_segments(&self.dir)?;
        let i = self.bases.partition_point(|&b| b <= self.want);
        let base = match i {
            0 => match self.bases.first() {
                Some(&b) => b,
                None => return Ok(false),
            },
            _ => self.bases[i - 1],
        };
        let mut seg = self.open_segment(base)?;
        if self.want > base {
            if let Some((seq, off)) = self.index_lookup(&seg)? {
                seg.pos = off;
                seg.next = seq;
            }
        }
        self.seg = Some(seg);
        self.buf_len = 0;
        Ok(true)
    }

    fn open_segment(&mut self, base: u64) -> Result<Seg, ArchiveError> {
        let path = format::segment_path(&self.dir, base);
        let file = File::open(&path).map_err(ArchiveError::io("open", &path))?;
        let mut head = [0u8; format::SEGMENT_HEADER];
        file.read_exact_at(&mut head, 0)
            .map_err(ArchiveError::io("read", &path))?;
        let h = SegmentHeader::decode(&head).map_err(|reason| ArchiveError::Corrupt {
            path: path.clone(),
            offset: 0,
            reason,
        })?;
        if h.base_seq != base {
            return Err(ArchiveError::Corrupt {
                path,
                offset: 16,
                reason: format!(
                    "its header says it begins at sequence {}, its name {base}",
                    h.base_seq
                ),
            });
        }
        if h.epoch != 0 {
            if self.epoch != 0 && h.epoch != self.epoch {
                return Err(ArchiveError::Corrupt {
                    path,
                    offset: 40,
                    reason: format!(
                        "its header says publisher epoch {}, the segments read before it {}: \
                         one archive holds one epoch (a forged header, or the archive was \
                         sealed and a new epoch begun while it was read)",
                        h.epoch, self.epoch
                    ),
                });
            }
            self.epoch = h.epoch;
        }
        Ok(Seg {
            file,
            path,
            base,
            pos: format::SEGMENT_HEADER as u64,
            next: base,
        })
    }

    /// The last index entry at or before `self.want` whose record is
    /// really there; None (counted) when the index is missing or wrong.
    fn index_lookup(&mut self, seg: &Seg) -> Result<Option<(u64, u64)>, ArchiveError> {
        let ipath = format::index_path(&self.dir, seg.base);
        let Ok(index) = File::open(&ipath) else {
            self.stats.index_fallbacks += 1;
            return Ok(None);
        };
        let n = index.metadata().map(|m| m.len()).unwrap_or(0) / format::INDEX_ENTRY as u64;
        let entry = |i: u64| -> Option<(u64, u64)> {
            let mut e = [0u8; format::INDEX_ENTRY];
            index
                .read_exact_at(&mut e, i * format::INDEX_ENTRY as u64)
                .ok()?;
            Some((format::le64(&e[..8]), format::le64(&e[8..])))
        };
        // Largest i with entry(i).seq <= want.
        let (mut lo, mut hi) = (0u64, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match entry(mid) {
                Some((s, _)) if s <= self.want => lo = mid + 1,
                Some(_) => hi = mid,
                None => break,
            }
        }
        let found = if lo == 0 { None } else { entry(lo - 1) };
        let Some((seq, off)) = found else {
            self.stats.index_fallbacks += 1;
            return Ok(None);
        };
        // Trust it only when the record it names is there.
        let mut probe = vec![0u8; format::RECORD_HEADER];
        let ok = seq >= seg.base
            && off >= format::SEGMENT_HEADER as u64
            && off % 8 == 0
            && seg.file.read_exact_at(&mut probe, off).is_ok()
            && format::le64(&probe[8..16]) == seq;
        if !ok {
            self.stats.index_fallbacks += 1;
            return Ok(None);
        }
        Ok(Some((seq, off)))
    }

    /// Reads from `at` into the buffer, at least `min` bytes when the file
    /// has them.
    fn fill(&mut self, file: &File, path: &Path, at: u64, min: usize) -> Result<(), ArchiveError> {
        let size = READ_CHUNK.max(min);
        if self.buf.len() < size {
            self.buf.resize(size, 0);
        }
        let mut got = 0;
        while got < size {
            match file.read_at(&mut self.buf[got..size], at + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ArchiveError::io("read", path)(e)),
            }
        }
        self.buf_at = at;
        self.buf_len = got;
        Ok(())
    }

    /// The next item; `Ok(None)` when the archive holds nothing more (yet).
    pub fn next_item(&mut self) -> Result<Option<Item<'_>>, ArchiveError> {
        loop {
            if self.seg.is_none() && !self.locate()? {
                return Ok(None);
            }
            let seg = self.seg.as_ref().expect("located");
            if self.want < seg.base {
                // Older than anything the archive holds.
                let (from, to) = (self.want, seg.base);
                self.want = to;
                self.stats.gaps += 1;
                return Ok(Some(Item::Gap { from, to }));
            }
            let (pos, next, base) = (seg.pos, seg.next, seg.base);
            let decoded = self.decode_at(pos)?;
            match decoded {
                Decoded::Record(h, size) => {
                    let path = &self.seg.as_ref().expect("located").path;
                    if h.seq != next {
                        return Err(ArchiveError::Corrupt {
                            path: path.clone(),
                            offset: pos,
                            reason: format!(
                                "the record holds sequence {} where {next} follows",
                                h.seq
                            ),
                        });
                    }
                    let at = (pos - self.buf_at) as usize;
                    let payload_at = at + format::RECORD_HEADER;
                    let end = format::record_end(&h, &self.buf[payload_at..]);
                    let seg = self.seg.as_mut().expect("located");
                    seg.pos += size as u64;
                    seg.next = end;
                    if end <= self.want {
                        continue;
                    }
                    if h.is_gap() {
                        let from = self.want.max(h.seq);
                        self.want = end;
                        self.stats.gaps += 1;
                        return Ok(Some(Item::Gap { from, to: end }));
                    }
                    self.want = end;
                    self.stats.records += 1;
                    let payload = &self.buf[payload_at..payload_at + h.len];
                    return Ok(Some(Item::Message(Message {
                        seq: h.seq,
                        flags: h.flags,
                        timestamp: h.timestamp,
                        payload,
                    })));
                }
                stop => {
                    // The end of this segment's records, or bytes that
                    // are not a record. A later segment means this one is
                    // closed: re-read once (the writer finishes a segment
                    // before it begins the next), then move on or fail.
                    self.bases = list_segments(&self.dir)?;
                    let later = self.bases.iter().copied().find(|&b| b > base);
                    let Some(later) = later else {
                        if let Decoded::Bad(_) | Decoded::Short { .. } = stop {
                            self.stats.tail_stops += 1;
                        }
                        return Ok(None);
                    };
                    self.buf_len = 0;
                    let again = self.decode_at(pos)?;
                    if let Decoded::Record(..) = again {
                        continue;
                    }
                    let path = self.seg.as_ref().expect("located").path.clone();
                    if let Decoded::Bad(reason) = again {
                        return Err(ArchiveError::Corrupt {
                            path,
                            offset: pos,
                            reason: reason.into(),
                        });
                    }
                    if let Decoded::Short { .. } = again {
                        return Err(ArchiveError::Corrupt {
                            path,
                            offset: pos,
                            reason: "the file ends inside a record".into(),
                        });
                    }
                    if later != next {
                        return Err(ArchiveError::Corrupt {
                            path,
                            offset: pos,
                            reason: format!(
                                "its records end before sequence {next}, but the next segment begins at {later}"
                            ),
                        });
                    }
                    self.seg = Some(self.open_segment(later)?);
                    self.buf_len = 0;
                }
            }
        }
    }

    /// Decodes the record at `pos` of the current segment, reading as
    /// needed; an end or a short record is read again from the file once,
    /// since a live writer may have added to it.
    fn decode_at(&mut self, pos: u64) -> Result<Decoded, ArchiveError> {
        let seg = self.seg.take().expect("located");
        let r = self.decode_in(&seg, pos);
        self.seg = Some(seg);
        r
    }

    fn decode_in(&mut self, seg: &Seg, pos: u64) -> Result<Decoded, ArchiveError> {
        let mut fresh = false;
        loop {
            let inside = pos >= self.buf_at && pos < self.buf_at + self.buf_len as u64;
            if !inside {
                self.fill(&seg.file, &seg.path, pos, format::RECORD_HEADER)?;
                fresh = true;
            }
            let at = (pos - self.buf_at) as usize;
            let d = format::decode_record(&self.buf[at..self.buf_len]);
            match d {
                Decoded::Short { need } if !fresh => {
                    self.fill(&seg.file, &seg.path, pos, need)?;
                    fresh = true;
                }
                Decoded::Short { need }
                    if self.buf_len - at < need && self.buf_len == self.buf.len() =>
                {
                    // The buffer, not the file, was short.
                    self.fill(&seg.file, &seg.path, pos, need)?;
                    if self.buf_len < need {
                        return Ok(Decoded::Short { need });
                    }
                }
                Decoded::End if !fresh => {
                    self.fill(&seg.file, &seg.path, pos, format::RECORD_HEADER)?;
                    fresh = true;
                }
                d => return Ok(d),
            }
        }
    }
}

/// Reads every item of the archive in `dir` from `from`, calling `f` for
/// each; returns the reader's counters. Stops at the end of what is
/// written.
pub fn read_all(
    dir: &Path,
    from: u64,
    mut f: impl FnMut(Item<'_>),
) -> Result<ReaderStats, ArchiveError> {
    let mut r = ArchiveReader::open(dir)?;
    r.seek(from)?;
    while let Some(item) = r.next_item()? {
        f(item);
    }
    Ok(r.stats())
}
