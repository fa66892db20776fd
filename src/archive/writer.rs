//! Appending to an archive: preallocated segments, a sparse index, torn
//! tails cut on open, rotation, retention and sync.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::format::{self, Decoded, SegmentHeader};
use super::{now_ns, ArchiveConfig, ArchiveError, SyncPolicy};

/// Bytes gathered before one `pwrite`.
const WRITE_BUFFER: usize = 256 << 10;

/// Counters of a writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Message records written.
    pub records: u64,
    /// Gap records written.
    pub gaps: u64,
    /// Sequences those gaps cover.
    pub gap_messages: u64,
    /// Record bytes written.
    pub bytes: u64,
    /// `fdatasync` calls.
    pub syncs: u64,
    /// Segments begun.
    pub segments_created: u64,
    /// Segments deleted by retention.
    pub segments_deleted: u64,
    /// Sealed epochs (`DIR/epochs/NNNNNN`) deleted by retention.
    pub epochs_deleted: u64,
    /// Bytes of a torn tail cut when the archive was opened.
    pub torn_bytes_cut: u64,
    /// Held records dropped once the epoch was confirmed: the archive
    /// already held them (see [`ArchiveWriter::hold_until_epoch`]).
    pub already_recorded: u64,
}

/// A record offered while the live epoch was not yet known.
#[derive(Debug)]
enum Held {
    Record {
        seq: u64,
        flags: u32,
        timestamp: u64,
        payload: Vec<u8>,
    },
    Gap {
        from: u64,
        to: u64,
    },
}

/// A closed segment.
#[derive(Debug, Clone)]
struct Closed {
    base_seq: u64,
    bytes: u64,
    /// When its last record was written (the next segment's creation).
    ended_ns: u64,
}

/// The segment being appended to.
#[derive(Debug)]
struct Active {
    file: File,
    path: PathBuf,
    index: File,
    base_seq: u64,
    capacity: u64,
    /// End of the records, buffered ones included.
    end: u64,
    /// End of what is in the file.
    written: u64,
    buf: Vec<u8>,
    index_buf: Vec<u8>,
    index_written: u64,
    records: u64,
}

/// Appends records to an archive directory. One writer per directory.
#[derive(Debug)]
pub struct ArchiveWriter {
    cfg: ArchiveConfig,
    closed: Vec<Closed>,
    active: Option<Active>,
    /// Sequence the next record must carry; 0 while the archive is empty.
    next: u64,
    first: u64,
    unsynced: u64,
    last_sync: Instant,
    /// Last sequence made durable by a sync.
    synced: u64,
    /// The publisher epoch of what `dir` holds (0: not known).
    epoch: u64,
    /// Records offered before the live epoch was known, when holding.
    held: Option<Vec<Held>>,
    stats: WriterStats,
    /// The next segment's file, preallocated ahead of need by
    /// [`prepare_next`](Self::prepare_next) (`SPARE`, deleted as a
    /// temporary on open).
    spare: Option<File>,
}

/// Name of the preallocated spare segment.
const SPARE: &str = "next.seg.tmp";

impl ArchiveWriter {
    /// Opens (creating) the archive in `cfg.dir` for appending: finds the
    /// last valid record of the newest segment, cuts anything after it,
    /// rebuilds that segment's index and continues after it.
    pub fn open(cfg: &ArchiveConfig) -> Result<ArchiveWriter, ArchiveError> {
        let dir = &cfg.dir;
        std::fs::create_dir_all(dir).map_err(ArchiveError::io("create", dir))?;
        remove_temporaries(dir)?;
        finish_sealing(dir)?;
        let mut bases = list_segments(dir)?;
        let mut w = ArchiveWriter {
            cfg: cfg.clone(),
            closed: Vec::new(),
            active: None,
            next: 0,
            first: 0,
            unsynced: 0,
            last_sync: Instant::now(),
            synced: 0,
            epoch: 0,
            held: None,
            stats: WriterStats::default(),
            spare: None,
        };
        // A newest segment whose header is torn (a crash while it was
        // created) holds nothing: it goes.
        while let Some(&base) = bases.last() {
            match w.recover(base)? {
                true => break,
                false => {
                    bases.pop();
                }
            }
        }
        let n = bases.len();
        for (i, &base) in bases.iter().enumerate().take(n.saturating_sub(1)) {
            let path = format::segment_path(dir, base);
            let meta = std::fs::metadata(&path).map_err(ArchiveError::io("stat", &path))?;
            let ended_ns = if i + 1 < n {
                segment_created(&format::segment_path(dir, bases[i + 1])).unwrap_or(0)
            } else {
                0
            };
            w.closed.push(Closed {
                base_seq: base,
                bytes: meta.len(),
                ended_ns,
            });
        }
        w.first = bases.first().copied().unwrap_or(0);
        w.retain(now_ns())?;
        Ok(w)
    }

    /// Recovers segment `base` as the active one; false when it holds no
    /// valid header (then it is deleted).
    fn recover(&mut self, base: u64) -> Result<bool, ArchiveError> {
        let dir = self.cfg.dir.clone();
        let path = format::segment_path(&dir, base);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(ArchiveError::io("open", &path))?;
        let mut head = [0u8; format::SEGMENT_HEADER];
        let header = match file.read_exact_at(&mut head, 0) {
            Ok(()) => SegmentHeader::decode(&head).ok(),
            Err(_) => None,
        };
        let header = match header {
            Some(h) if h.base_seq == base => h,
            _ => {
                log::warn!(
                    "archive {}: {} has no valid header (torn at creation); deleted",
                    dir.display(),
                    path.display()
                );
                remove(&path)?;
                remove_if_there(&format::index_path(&dir, base))?;
                return Ok(false);
            }
        };
        self.epoch = header.epoch;
        let len = file
            .metadata()
            .map_err(ArchiveError::io("stat", &path))?
            .len();
        // Scan: every record whole, checksummed and continuing the last.
        let mut pos = format::SEGMENT_HEADER as u64;
        let mut next = base;
        let mut records = 0u64;
        let mut index_buf = Vec::new();
        let mut chunk = vec![0u8; WRITE_BUFFER.max(2 * format::record_size(format::MAX_PAYLOAD))];
        let mut chunk_at = u64::MAX;
        let mut chunk_len = 0usize;
        loop {
            let chunk_end = chunk_at.wrapping_add(chunk_len as u64);
            let short = pos + format::record_size(format::MAX_PAYLOAD) as u64 > chunk_end;
            if chunk_at == u64::MAX || (short && chunk_end < len) {
                let want = chunk.len().min(len.saturating_sub(pos) as usize);
                read_fully(&file, &mut chunk[..want], pos, &path)?;
                chunk_at = pos;
                chunk_len = want;
            }
            let at = (pos - chunk_at) as usize;
            let (h, size) = match format::decode_record(&chunk[at..chunk_len]) {
                Decoded::Record(h, size) if h.seq == next => (h, size),
                _ => break,
            };
            let payload = &chunk[at + format::RECORD_HEADER..at + format::RECORD_HEADER + h.len];
            if records % format::INDEX_EVERY == 0 {
                index_buf.extend_from_slice(&h.seq.to_le_bytes());
                index_buf.extend_from_slice(&pos.to_le_bytes());
            }
            next = format::record_end(&h, payload);
            records += 1;
            pos += size as u64;
        }
        // Cut whatever follows the last valid record and allocate the
        // segment again: the rest reads as zeros, the end of records.
        let capacity = header.capacity.max(pos);
        if len > pos {
            let mut probe = vec![0u8; (len - pos).min(4096) as usize];
            read_fully(&file, &mut probe, pos, &path)?;
            if probe.iter().any(|&b| b != 0) {
                self.stats.torn_bytes_cut = len - pos;
                log::warn!(
                    "archive {}: cut a torn tail after sequence {} at byte {pos} of {}",
                    dir.display(),
                    next.saturating_sub(1),
                    path.display()
                );
            }
        }
        file.set_len(pos)
            .map_err(ArchiveError::io("truncate", &path))?;
        preallocate(&file, capacity, &path)?;
        let ipath = format::index_path(&dir, base);
        let index = create(&ipath)?;
        index
            .write_all_at(&index_buf, 0)
            .map_err(ArchiveError::io("write", &ipath))?;
        self.active = Some(Active {
            file,
            path,
            index,
            base_seq: base,
            capacity,
            end: pos,
            written: pos,
            buf: Vec::with_capacity(WRITE_BUFFER),
            index_buf: Vec::new(),
            index_written: index_buf.len() as u64,
            records,
        });
        self.next = next;
        Ok(true)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    /// Sequence the next record must carry (0: the archive is empty and
    /// takes any, or records are held until the epoch is known).
    pub fn next_seq(&self) -> u64 {
        match self.held {
            Some(_) => 0,
            None => self.next,
        }
    }

    /// The publisher epoch whose sequences the archive holds (0: not
    /// known: a version-1 archive, or none given yet).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The live epoch is not known yet (a datagram subscriber learns it
    /// from the first datagram): what is appended is held, not written,
    /// until [`follow_epoch`](Self::follow_epoch) says whose it is, so
    /// that a new epoch's first messages are neither taken for ones
    /// already recorded nor appended to the old epoch's archive.
    pub fn hold_until_epoch(&mut self) {
        if self.held.is_none() {
            self.held = Some(Vec::new());
        }
    }

    /// The live stream is publisher epoch `epoch`. When the archive holds
    /// another known epoch, it is sealed as [`new_epoch`](Self::new_epoch)
    /// does (returned); an archive of unknown epoch (version 1) or an
    /// empty one takes it. Held records are then written (those the
    /// archive already holds are dropped and counted,
    /// `WriterStats::already_recorded`). Cheap when nothing changes.
    pub fn follow_epoch(&mut self, epoch: u64) -> Result<Option<PathBuf>, ArchiveError> {
        let held = self.held.take();
        if epoch == self.epoch && held.is_none() {
            return Ok(None);
        }
        let sealed = if self.epoch != 0 && epoch != 0 && self.epoch != epoch {
            log::warn!(
                "archive {}: it holds publisher epoch {}, the live stream is epoch {epoch}: sealing it",
                self.cfg.dir.display(),
                self.epoch
            );
            self.new_epoch(epoch)?
        } else {
            if self.epoch == 0 && epoch != 0 && self.next != 0 {
                log::warn!(
                    "archive {}: its epoch is not recorded (format version 1); taken to be the live epoch {epoch}",
                    self.cfg.dir.display()
                );
            }
            if epoch != 0 {
                self.epoch = epoch;
            }
            None
        };
        for h in held.into_iter().flatten() {
            match h {
                Held::Record {
                    seq,
                    flags,
                    timestamp,
                    payload,
                } => {
                    if flags & crate::wire::FLAG_SOURCE_GAP != 0 && self.next != 0 {
                        // A source-gap notice arrives without its sequence
                        // (the recorder gives it the next one, unknown
                        // while held): it takes the next one now.
                        self.append(self.next, flags, timestamp, &payload)?;
                    } else if seq < self.next {
                        self.stats.already_recorded += 1;
                    } else {
                        self.append(seq, flags, timestamp, &payload)?;
                    }
                }
                Held::Gap { from, to } => self.gap(from, to)?,
            }
        }
        Ok(sealed)
    }

    /// First sequence the archive holds (0 when empty).
    pub fn first_seq(&self) -> u64 {
        self.first
    }

    /// Last sequence a sync made durable (0: none yet in this run).
    pub fn synced_seq(&self) -> u64 {
        self.synced
    }

    /// Counters.
    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    /// Appends message `seq`. A sequence beyond the next expected one
    /// records a gap for those between first; an earlier one is refused.
    pub fn append(
        &mut self,
        seq: u64,
        flags: u32,
        timestamp: u64,
        payload: &[u8],
    ) -> Result<(), ArchiveError> {
        if let Some(held) = &mut self.held {
            held.push(Held::Record {
                seq,
                flags,
                timestamp,
                payload: payload.to_vec(),
            });
            return Ok(());
        }
        if self.next != 0 && seq > self.next {
            self.gap(self.next, seq)?;
        }
        self.write(seq, flags & !format::FLAG_GAP, timestamp, payload)?;
        self.stats.records += 1;
        Ok(())
    }

    /// Records that sequences `from..to` were never received.
    pub fn gap(&mut self, from: u64, to: u64) -> Result<(), ArchiveError> {
        if from >= to {
            return Ok(());
        }
        if let Some(held) = &mut self.held {
            held.push(Held::Gap { from, to });
            return Ok(());
        }
        let (from, to) = if self.next != 0 && from < self.next {
            // Only the part not already recorded.
            if to <= self.next {
                return Ok(());
            }
            (self.next, to)
        } else {
            (from, to)
        };
        self.write(from, format::FLAG_GAP, 0, &to.to_le_bytes())?;
        self.stats.gaps += 1;
        self.stats.gap_messages += to - from;
        Ok(())
    }

    fn write(&mut self, seq: u64, flags: u32, ts: u64, payload: &[u8]) -> Result<(), ArchiveError> {
        if self.next != 0 && seq != self.next {
            return Err(ArchiveError::OutOfOrder {
                dir: self.cfg.dir.clone(),
                seq,
                next: self.next,
            });
        }
        let size = format::record_size(payload.len()) as u64;
        if size + format::SEGMENT_HEADER as u64 > self.cfg.segment_bytes {
            return Err(ArchiveError::TooLarge {
                dir: self.cfg.dir.clone(),
                len: payload.len(),
                segment_bytes: self.cfg.segment_bytes,
            });
        }
        let full = match &self.active {
            Some(a) => a.end + size > a.capacity,
            None => true,
        };
        if full {
            self.rotate(seq)?;
        }
        let a = self
            .active
            .as_mut()
            .expect("rotate leaves an active segment");
        if a.records % format::INDEX_EVERY == 0 {
            a.index_buf.extend_from_slice(&seq.to_le_bytes());
            a.index_buf.extend_from_slice(&a.end.to_le_bytes());
        }
        format::encode_record(&mut a.buf, seq, flags, ts, payload);
        a.end += size;
        a.records += 1;
        self.stats.bytes += size;
        self.next = if flags & format::FLAG_GAP != 0 {
            format::le64(payload)
        } else {
            seq + 1
        };
        if self.first == 0 {
            self.first = seq;
        }
        self.unsynced += 1;
        if a.buf.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        match self.cfg.sync {
            SyncPolicy::Every(n) if self.unsynced >= n => self.sync()?,
            SyncPolicy::Interval(d) if self.last_sync.elapsed() >= d => self.sync()?,
            _ => {}
        }
        Ok(())
    }

    /// Writes buffered records (and index entries) to the files.
    pub fn flush(&mut self) -> Result<(), ArchiveError> {
        let Some(a) = self.active.as_mut() else {
            return Ok(());
        };
        if !a.buf.is_empty() {
            a.file
                .write_all_at(&a.buf, a.written)
                .map_err(ArchiveError::io("write", &a.path))?;
            a.written += a.buf.len() as u64;
            a.buf.clear();
        }
        // The index after the data, so an entry points at written bytes.
        if !a.index_buf.is_empty() {
            let ipath = format::index_path(&self.cfg.dir, a.base_seq);
            a.index
                .write_all_at(&a.index_buf, a.index_written)
                .map_err(ArchiveError::io("write", &ipath))?;
            a.index_written += a.index_buf.len() as u64;
            a.index_buf.clear();
        }
        Ok(())
    }

    /// Flushes and makes everything written durable.
    pub fn sync(&mut self) -> Result<(), ArchiveError> {
        self.flush()?;
        if let Some(a) = &self.active {
            a.file
                .sync_data()
                .map_err(ArchiveError::io("fdatasync", &a.path))?;
            self.stats.syncs += 1;
        }
        self.unsynced = 0;
        self.last_sync = Instant::now();
        self.synced = self.next.saturating_sub(1);
        Ok(())
    }

    /// Idle work: flushes, and syncs when the interval policy is due.
    pub fn tick(&mut self) -> Result<(), ArchiveError> {
        self.flush()?;
        if let SyncPolicy::Interval(d) = self.cfg.sync {
            if self.unsynced > 0 && self.last_sync.elapsed() >= d {
                self.sync()?;
            }
        }
        Ok(())
    }

    /// Closes the active segment (cut to its used size) and begins one at
    /// `seq`; then applies retention.
    fn rotate(&mut self, seq: u64) -> Result<(), ArchiveError> {
        let now = now_ns();
        if let Some(old) = self.active.take() {
            let mut old = old;
            let buf = std::mem::take(&mut old.buf);
            old.file
                .write_all_at(&buf, old.written)
                .map_err(ArchiveError::io("write", &old.path))?;
            let ipath = format::index_path(&self.cfg.dir, old.base_seq);
            old.index
                .write_all_at(&old.index_buf, old.index_written)
                .map_err(ArchiveError::io("write", &ipath))?;
            old.file
                .set_len(old.end)
                .map_err(ArchiveError::io("truncate", &old.path))?;
            if self.cfg.sync != SyncPolicy::None {
                old.file
                    .sync_all()
                    .map_err(ArchiveError::io("fsync", &old.path))?;
                self.stats.syncs += 1;
                // Everything before the record that begins the next one.
                self.synced = seq.saturating_sub(1);
            }
            self.closed.push(Closed {
                base_seq: old.base_seq,
                bytes: old.end,
                ended_ns: now,
            });
        }
        let dir = &self.cfg.dir;
        let path = format::segment_path(dir, seq);
        // Created under a temporary name and renamed whole, so a crash
        // never leaves a segment with half a header under its real name.
        let (file, tmp) = match self.spare.take() {
            Some(file) => (file, dir.join(SPARE)),
            None => {
                let tmp = dir.join(format!("{seq:020}.seg.tmp"));
                let file = create(&tmp)?;
                preallocate(&file, self.cfg.segment_bytes, &tmp)?;
                (file, tmp)
            }
        };
        let header = SegmentHeader {
            base_seq: seq,
            created_ns: now,
            capacity: self.cfg.segment_bytes,
            epoch: self.epoch,
        };
        file.write_all_at(&header.encode(), 0)
            .map_err(ArchiveError::io("write", &tmp))?;
        let ipath = format::index_path(dir, seq);
        let index = create(&ipath)?;
        std::fs::rename(&tmp, &path).map_err(ArchiveError::io("rename", &tmp))?;
        if self.cfg.sync != SyncPolicy::None {
            // The new name survives a power loss too.
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(ArchiveError::io("fsync", dir))?;
        }
        self.active = Some(Active {
            file,
            path,
            index,
            base_seq: seq,
            capacity: self.cfg.segment_bytes,
            end: format::SEGMENT_HEADER as u64,
            written: format::SEGMENT_HEADER as u64,
            buf: Vec::with_capacity(WRITE_BUFFER),
            index_buf: Vec::new(),
            index_written: 0,
            records: 0,
        });
        self.stats.segments_created += 1;
        self.retain(now)
    }

    /// Deletes the oldest sealed epochs, then the oldest closed segments,
    /// past the age or byte limit. Sealed epochs are older than anything
    /// in `DIR`, so they go first, whole; their segments count in the
    /// byte total, and their age is the time they were sealed.
    fn retain(&mut self, now: u64) -> Result<(), ArchiveError> {
        let age = self.cfg.retention_age.as_nanos() as u64;
        if age == 0 && self.cfg.retention_bytes == 0 {
            return Ok(());
        }
        let epochs = self.cfg.dir.join(EPOCHS_DIR);
        let mut sealed = sealed_sizes(&epochs)?;
        let mut total: u64 = self.closed.iter().map(|c| c.bytes).sum::<u64>()
            + sealed.iter().map(|e| e.bytes).sum::<u64>();
        while let Some(e) = sealed.first() {
            let too_old = age != 0 && e.sealed_ns != 0 && now.saturating_sub(e.sealed_ns) > age;
            let too_big = self.cfg.retention_bytes != 0 && total > self.cfg.retention_bytes;
            if !too_old && !too_big {
                break;
            }
            let e = sealed.remove(0);
            remove_epoch(&epochs, e.n)?;
            total -= e.bytes;
            self.stats.epochs_deleted += 1;
            log::info!(
                "archive {}: deleted sealed epoch {:06} ({} bytes of segments) by retention ({})",
                self.cfg.dir.display(),
                e.n,
                e.bytes,
                if too_big {
                    "retention_bytes"
                } else {
                    "retention_age"
                }
            );
        }
        while let Some(c) = self.closed.first() {
            let too_old = age != 0 && c.ended_ns != 0 && now.saturating_sub(c.ended_ns) > age;
            let too_big = self.cfg.retention_bytes != 0 && total > self.cfg.retention_bytes;
            if !too_old && !too_big {
                break;
            }
            let c = self.closed.remove(0);
            total -= c.bytes;
            remove(&format::segment_path(&self.cfg.dir, c.base_seq))?;
            remove_if_there(&format::index_path(&self.cfg.dir, c.base_seq))?;
            self.stats.segments_deleted += 1;
            self.first = self
                .closed
                .first()
                .map(|c| c.base_seq)
                .or(self.active.as_ref().map(|a| a.base_seq))
                .unwrap_or(0);
        }
        Ok(())
    }
}

impl ArchiveWriter {
    /// Preallocates the next segment's file ahead of need, once the
    /// archive is empty or the active segment is half full, so the
    /// rotation that takes it does not wait for the allocation (slow on
    /// some filesystems). Call when idle; cheap when there is nothing to do.
    pub fn prepare_next(&mut self) -> Result<(), ArchiveError> {
        let due = self
            .active
            .as_ref()
            .map_or(true, |a| a.end * 2 >= a.capacity);
        if self.spare.is_some() || !due {
            return Ok(());
        }
        let tmp = self.cfg.dir.join(SPARE);
        let file = create(&tmp)?;
        preallocate(&file, self.cfg.segment_bytes, &tmp)?;
        self.spare = Some(file);
        Ok(())
    }

    /// Whether a spare segment is preallocated.
    pub fn has_spare(&self) -> bool {
        self.spare.is_some()
    }

    /// The publisher restarted and numbers from 1 again: what this archive
    /// holds (the previous epoch) is made durable and moved, whole, into
    /// `DIR/epochs/NNNNNN` (an archive of its own, numbered from 1 in
    /// order), and the writer continues with an empty archive in `DIR`.
    /// Sequence numbers of two epochs never share one archive. `epoch`
    /// (0: not known) is stored in the new segments' headers. Returns the
    /// sealed directory, `None` when there was nothing to seal. Records
    /// held for want of the epoch (see
    /// [`hold_until_epoch`](Self::hold_until_epoch)) came before the
    /// restart: they are settled first as the archive's own epoch.
    pub fn new_epoch(&mut self, epoch: u64) -> Result<Option<PathBuf>, ArchiveError> {
        if self.held.is_some() {
            self.follow_epoch(self.epoch)?;
        }
        self.flush()?;
        if let Some(a) = &self.active {
            // Cut to its used size as a closed segment is: a sealed epoch
            // never grows, and retention counts what it really takes.
            a.file
                .set_len(a.end)
                .map_err(ArchiveError::io("truncate", &a.path))?;
            a.file
                .sync_all()
                .map_err(ArchiveError::io("fsync", &a.path))?;
            self.stats.syncs += 1;
        }
        self.active = None;
        self.closed.clear();
        let sealed = seal(&self.cfg.dir)?;
        let fresh = ArchiveWriter::open(&self.cfg)?;
        // Retention ran on that open: its deletions count too.
        let mut stats = self.stats;
        stats.epochs_deleted += fresh.stats.epochs_deleted;
        stats.segments_deleted += fresh.stats.segments_deleted;
        *self = fresh;
        self.stats = stats;
        self.epoch = epoch;
        Ok(sealed)
    }
}

/// Subdirectory of an archive holding the epochs publisher restarts ended.
pub const EPOCHS_DIR: &str = "epochs";

/// Whether `name` is a segment or an index file of an archive.
fn archive_file(name: &str) -> bool {
    format::parse_segment_name(name).is_some()
        || name
            .strip_suffix(".idx")
            .is_some_and(|d| format::parse_segment_name(&format!("{d}.seg")).is_some())
}

/// Moves the segment and index files of `dir` into `to`.
fn move_archive_files(dir: &Path, to: &Path) -> Result<(), ArchiveError> {
    for e in std::fs::read_dir(dir).map_err(ArchiveError::io("list", dir))? {
        let e = e.map_err(ArchiveError::io("list", dir))?;
        let name = e.file_name();
        if name.to_str().is_some_and(archive_file) {
            let from = e.path();
            std::fs::rename(&from, to.join(&name)).map_err(ArchiveError::io("move", &from))?;
        }
    }
    for d in [to, dir] {
        File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(ArchiveError::io("fsync", d))?;
    }
    Ok(())
}

/// A sealed epoch, as retention sees it.
#[derive(Debug)]
struct SealedEpoch {
    n: u32,
    /// Bytes of its segment files.
    bytes: u64,
    /// When it was sealed (its directory's last change), ns since the
    /// Unix epoch; 0 when unknown.
    sealed_ns: u64,
}

/// The sealed epochs in `epochs`, oldest first, with their sizes.
fn sealed_sizes(epochs: &Path) -> Result<Vec<SealedEpoch>, ArchiveError> {
    let mut out = Vec::new();
    for n in sealed_epochs(epochs, "")? {
        let path = epochs.join(format!("{n:06}"));
        let meta = std::fs::metadata(&path).map_err(ArchiveError::io("stat", &path))?;
        let sealed_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        let mut bytes = 0;
        for base in list_segments(&path)? {
            let seg = format::segment_path(&path, base);
            bytes += std::fs::metadata(&seg)
                .map_err(ArchiveError::io("stat", &seg))?
                .len();
        }
        out.push(SealedEpoch {
            n,
            bytes,
            sealed_ns,
        });
    }
    Ok(out)
}

/// Deletes sealed epoch `n`: renamed `NNNNNN.removed` first (so a crash
/// midway never leaves half an epoch under its name), emptied, and kept
/// as an empty directory so that the next epoch sealed is not given its
/// number again; older such markers go.
fn remove_epoch(epochs: &Path, n: u32) -> Result<(), ArchiveError> {
    let from = epochs.join(format!("{n:06}"));
    let removed = epochs.join(format!("{n:06}.removed"));
    std::fs::rename(&from, &removed).map_err(ArchiveError::io("rename", &from))?;
    for m in sealed_epochs(epochs, ".removed")? {
        let d = epochs.join(format!("{m:06}.removed"));
        for e in std::fs::read_dir(&d).map_err(ArchiveError::io("list", &d))? {
            let e = e.map_err(ArchiveError::io("list", &d))?;
            remove(&e.path())?;
        }
        if m < n {
            std::fs::remove_dir(&d).map_err(ArchiveError::io("remove", &d))?;
        }
    }
    Ok(())
}

/// Numbers of the epoch directories of `dir` named `NNNNNN` followed by
/// `suffix`: "" the sealed ones, ".partial" those whose move a crash
/// interrupted, ".removed" the marker of the last one retention deleted.
fn sealed_epochs(epochs: &Path, suffix: &str) -> Result<Vec<u32>, ArchiveError> {
    let mut out = Vec::new();
    if !epochs.exists() {
        return Ok(out);
    }
    for e in std::fs::read_dir(epochs).map_err(ArchiveError::io("list", epochs))? {
        let e = e.map_err(ArchiveError::io("list", epochs))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(digits) = name.strip_suffix(suffix) else {
            continue;
        };
        if digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()) {
            out.extend(digits.parse::<u32>().ok());
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Moves the archive in `dir` into the next `dir/epochs/NNNNNN`: first
/// into `NNNNNN.partial`, renamed when all of it is there, so a crash
/// midway leaves a partial epoch that [`finish_sealing`] completes (no new
/// epoch is written into `dir` before the move is done).
fn seal(dir: &Path) -> Result<Option<PathBuf>, ArchiveError> {
    if list_segments(dir)?.is_empty() {
        return Ok(None);
    }
    let epochs = dir.join(EPOCHS_DIR);
    std::fs::create_dir_all(&epochs).map_err(ArchiveError::io("create", &epochs))?;
    let n = sealed_epochs(&epochs, "")?
        .into_iter()
        .chain(sealed_epochs(&epochs, ".partial")?)
        .chain(sealed_epochs(&epochs, ".removed")?)
        .max()
        .unwrap_or(0)
        + 1;
    let partial = epochs.join(format!("{n:06}.partial"));
    std::fs::create_dir(&partial).map_err(ArchiveError::io("create", &partial))?;
    complete(dir, &partial).map(Some)
}

/// Moves what is left of `dir`'s archive into `partial` and gives it its
/// final name.
fn complete(dir: &Path, partial: &Path) -> Result<PathBuf, ArchiveError> {
    move_archive_files(dir, partial)?;
    let done = partial.with_extension("");
    std::fs::rename(partial, &done).map_err(ArchiveError::io("rename", partial))?;
    let epochs = dir.join(EPOCHS_DIR);
    File::open(&epochs)
        .and_then(|f| f.sync_all())
        .map_err(ArchiveError::io("fsync", &epochs))?;
    Ok(done)
}

/// Completes an epoch's sealing that a crash interrupted: every segment
/// still in `dir` belongs to it.
fn finish_sealing(dir: &Path) -> Result<(), ArchiveError> {
    let epochs = dir.join(EPOCHS_DIR);
    for n in sealed_epochs(&epochs, ".partial")? {
        complete(dir, &epochs.join(format!("{n:06}.partial")))?;
    }
    Ok(())
}

impl Drop for ArchiveWriter {
    fn drop(&mut self) {
        if let Some(held) = self.held.as_ref().filter(|h| !h.is_empty()) {
            log::warn!(
                "archive {}: {} records not written: the live epoch never became known",
                self.cfg.dir.display(),
                held.len()
            );
        }
        if let Err(e) = self.flush() {
            log::error!("{e}");
        }
        if self.spare.take().is_some() {
            // Unused: it would be deleted at the next open anyway.
            let _ = std::fs::remove_file(self.cfg.dir.join(SPARE));
        }
    }
}

/// Removes the temporary files of a rotation a crash interrupted.
fn remove_temporaries(dir: &Path) -> Result<(), ArchiveError> {
    for e in std::fs::read_dir(dir).map_err(ArchiveError::io("list", dir))? {
        let e = e.map_err(ArchiveError::io("list", dir))?;
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(".seg.tmp"))
        {
            remove(&e.path())?;
        }
    }
    Ok(())
}

/// Base sequences of the segments in `dir`, ascending.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>, ArchiveError> {
    let mut bases = Vec::new();
    for e in std::fs::read_dir(dir).map_err(ArchiveError::io("list", dir))? {
        let e = e.map_err(ArchiveError::io("list", dir))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(b) = format::parse_segment_name(name) {
            bases.push(b);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

fn segment_created(path: &Path) -> Option<u64> {
    let f = File::open(path).ok()?;
    let mut head = [0u8; format::SEGMENT_HEADER];
    f.read_exact_at(&mut head, 0).ok()?;
    SegmentHeader::decode(&head).ok().map(|h| h.created_ns)
}

fn read_fully(f: &File, buf: &mut [u8], at: u64, path: &Path) -> Result<(), ArchiveError> {
    f.read_exact_at(buf, at)
        .map_err(ArchiveError::io("read", path))
}

fn preallocate(f: &File, len: u64, path: &Path) -> Result<(), ArchiveError> {
    // SAFETY: posix_fallocate on a descriptor we own; no memory passed.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
    if rc != 0 {
        return Err(ArchiveError::Io {
            op: "preallocate",
            path: path.to_path_buf(),
            source: std::io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

/// Creates (or empties) a file for reading and writing.
fn create(path: &Path) -> Result<File, ArchiveError> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .map_err(ArchiveError::io("create", path))
}

fn remove(path: &Path) -> Result<(), ArchiveError> {
    std::fs::remove_file(path).map_err(ArchiveError::io("remove", path))
}

fn remove_if_there(path: &Path) -> Result<(), ArchiveError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ArchiveError::io("remove", path)(e))
        }
        _ => Ok(()),
    }
}
