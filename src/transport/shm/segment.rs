//! A named shared-memory segment: one file in tmpfs (or hugetlbfs), mapped
//! by every process on the channel.
//!
//! Layout (all little-endian, offsets in bytes):
//!
//! | offset | what |
//! | --- | --- |
//! | 0 | immutable header ([`HeaderFields`]), sealed by a checksum |
//! | 256 | owner-closed flag (set by the creator's orderly drop) |
//! | 320 | peer record: pid, process start time, closed flag (sessions) |
//! | 1024 + 512·r | control lines of ring r: producer line, consumer line |
//! | 2048 + 64·i | lossless subscriber record i of a stream (16; see `lossless`) |
//! | 3584, 3648, 3712 | doorbell of a stream: asleep flag, futex word, registered sleepers (see `doorbell`) |
//! | 4096 | slots of ring 0, then ring 1 |
//!
//! A creator builds the whole segment under a temporary name and renames it
//! into place, so nobody ever maps a half-written header. A segment left by
//! a creator that died is detected (its process is gone, or its pid now
//! belongs to a process started at another time) and replaced.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::config::{HugePages, ShmConfig};
use crate::error::{Error, Result, SegmentProblem};
use crate::sys::file::{self, FileError, FileId, MapOptions, OpenError};
use crate::sys::hugepages;
use crate::sys::leftovers::Format;
use crate::sys::map::{Access, Mapping};
use crate::sys::process::Creator;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

// The liveness helpers moved to `crate::sys::process`; re-exported for the
// endpoints that call them through this module.
pub use crate::sys::process::{process_alive, process_start_time};

/// First eight bytes of every segment.
pub const MAGIC: [u8; 8] = *b"MDBUSHM\0";
/// Layout version written and accepted by this build.
pub const VERSION: u32 = 2;
/// Bytes before the first slot.
pub const HEADER_BYTES: usize = 4096;
/// Offset of the owner-closed flag.
const OWNER_CLOSED: usize = 256;
/// Offset of the peer record: pid, start time, closed.
const PEER_PID: usize = 320;
const PEER_START: usize = 328;
const PEER_CLOSED: usize = 336;
/// Offset of ring 0's control lines.
const RING_CONTROL: usize = 1024;
const RING_CONTROL_STRIDE: usize = 512;
/// The consumer line sits two cache lines after the producer line, so the
/// adjacent-line prefetcher does not couple them.
const CONSUMER_LINE: usize = 128;
/// Offset of the lossless subscribers' records (streams): 16 cache lines.
const LOSSLESS: usize = 2048;
/// Lossless subscriber records in a stream's segment.
pub const LOSSLESS_RECORDS: usize = 16;
/// Offsets of the doorbell of ring 0 (streams): the asleep flag, the
/// futex word and the count of registered sleepers, each on its own cache
/// line; zero in a fresh segment.
const DOORBELL_ASLEEP: usize = 3584;
const DOORBELL_BELL: usize = 3648;
const DOORBELL_SLEEPERS: usize = 3712;
/// Bytes covered by the header checksum.
const CHECKED_BYTES: usize = 72;
/// Bytes of the sealed header: the checked fields and their checksum.
pub const SEALED_HEADER: usize = CHECKED_BYTES + 8;

/// What a segment carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// One broadcast ring.
    Stream = 1,
    /// Two single-producer single-consumer rings, one each way.
    Session = 2,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Session => "session",
        }
    }
    fn from_u32(v: u32) -> Option<Kind> {
        match v {
            1 => Some(Kind::Stream),
            2 => Some(Kind::Session),
            _ => None,
        }
    }
    fn rings(self) -> usize {
        match self {
            Kind::Stream => 1,
            Kind::Session => 2,
        }
    }
}

/// The immutable header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFields {
    /// Channel kind.
    pub kind: Kind,
    /// Bytes per slot, a multiple of 64.
    pub slot_size: u32,
    /// Slots per ring, a power of two.
    pub capacity: u64,
    /// Bytes of the whole segment.
    pub total_len: u64,
    /// Incarnation of the creator: distinct for every creation.
    pub epoch: u64,
    /// Creator's process id.
    pub creator_pid: u32,
    /// Creator's process start time (clock ticks since boot).
    pub creator_start: u64,
}

/// Geometry requested by a creator.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    /// Channel kind.
    pub kind: Kind,
    /// Bytes per slot, a multiple of 64.
    pub slot_size: usize,
    /// Slots per ring, a power of two.
    pub capacity: usize,
}

impl Geometry {
    /// Bytes the segment needs.
    pub fn total_len(&self) -> usize {
        HEADER_BYTES + self.kind.rings() * self.capacity * self.slot_size
    }
}

/// A mapped segment. The creator removes the file when dropped (if the
/// file at the path is still its own).
pub struct Segment {
    path: PathBuf,
    map: Mapping,
    fields: HeaderFields,
    id: FileId,
    owner: bool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("path", &self.path)
            .field("fields", &self.fields)
            .finish()
    }
}

/// Where the segment of `kind` named `name` lives: hugetlbfs when the policy
/// allows and that file exists, else the tmpfs directory.
pub fn lookup_path(cfg: &ShmConfig, kind: Kind, name: &str) -> PathBuf {
    let file = format!("{}.{}.{}", cfg.prefix, kind.name(), name);
    if cfg.huge_pages != HugePages::Off {
        let huge = cfg.hugetlbfs.join(&file);
        if huge.symlink_metadata().is_ok() {
            return huge;
        }
    }
    cfg.dir.join(file)
}

impl From<FileError> for Error {
    fn from(e: FileError) -> Error {
        Error::io(e.op, e.path.display().to_string(), e.source)
    }
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        match e {
            OpenError::Io(e) => e.into(),
            OpenError::Distrusted { path, reason } => Error::Segment {
                path,
                problem: SegmentProblem::Untrusted(reason),
            },
        }
    }
}

/// How a fallback to normal pages was logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Noted {
    /// A debug line only: the default `try` falls back silently.
    Debug,
    /// The warning: huge pages were asked for (`on`) and this is the
    /// process's first fallback.
    Warned,
}

/// Logs that a segment gets normal pages because `why`: a warning once per
/// process (`warned` remembers it) when `huge_pages = "on"` asked for them,
/// otherwise a debug line, since every segment would say the same.
pub(crate) fn note_no_huge_pages(
    policy: HugePages,
    warned: &AtomicBool,
    channel: &str,
    why: &str,
) -> Noted {
    if policy == HugePages::On && !warned.swap(true, Ordering::Relaxed) {
        log::warn!(
            "{channel}: huge pages not used: {why}; using normal pages (shm.huge_pages = \"on\"; said once)"
        );
        return Noted::Warned;
    }
    log::debug!("{channel}: huge pages not used: {why}; using normal pages");
    Noted::Debug
}

impl Segment {
    /// Creates the segment of `name`, reclaiming a stale one left by a dead
    /// creator; fails with [`Error::InUse`] when a live process owns it,
    /// and with [`Error::Segment`] naming the file when a file at its path
    /// is not a trusted, intact segment (it is left alone).
    pub fn create(cfg: &ShmConfig, name: &str, geo: Geometry) -> Result<Segment> {
        debug_assert!(geo.capacity.is_power_of_two() && geo.slot_size % 64 == 0);
        let channel = format!("{} `{}`", geo.kind.name(), name);
        let file = format!("{}.{}.{}", cfg.prefix, geo.kind.name(), name);
        let mut total = geo.total_len();
        let mut dir = cfg.dir.clone();
        if cfg.huge_pages != HugePages::Off {
            let rounded = hugepages::round_up(total);
            match hugepages::hugetlbfs_usable(&cfg.hugetlbfs, rounded) {
                Ok(()) => {
                    dir = cfg.hugetlbfs.clone();
                    total = rounded;
                }
                Err(why) if cfg.huge_pages == HugePages::Require => {
                    return Err(Error::Segment {
                        path: cfg.hugetlbfs.join(&file),
                        problem: SegmentProblem::NoHugePages(why),
                    });
                }
                Err(why) => {
                    static WARNED: AtomicBool = AtomicBool::new(false);
                    note_no_huge_pages(cfg.huge_pages, &WARNED, &channel, &why);
                }
            }
        }
        // Any segment of this name, in either place, must be stale or absent.
        for candidate in [cfg.dir.join(&file), cfg.hugetlbfs.join(&file)] {
            if candidate.symlink_metadata().is_err() {
                continue;
            }
            let old = Segment::open(&candidate, geo.kind)?;
            let f = old.fields;
            if process_alive(f.creator_pid, f.creator_start) {
                return Err(Error::InUse {
                    channel,
                    pid: f.creator_pid,
                });
            }
            log::warn!(
                "{channel}: reclaiming stale segment {} of dead process {}",
                candidate.display(),
                f.creator_pid
            );
            if old.id.is_at(&candidate) {
                let _ = std::fs::remove_file(&candidate);
            }
        }

        let path = dir.join(&file);
        let me = Creator::me();
        let fields = HeaderFields {
            kind: geo.kind,
            slot_size: geo.slot_size as u32,
            capacity: geo.capacity as u64,
            total_len: total as u64,
            epoch: new_epoch(),
            creator_pid: me.pid,
            creator_start: me.start,
        };
        let opts = MapOptions {
            // The first message never takes a page fault.
            prefault: true,
            lock: cfg.mlock,
        };
        let published = file::create_published::<FileError>(&path, total, opts, |map| {
            let mut header = [0u8; CHECKED_BYTES + 8];
            encode_header(&fields, &mut header);
            // SAFETY: the mapping is `total >= HEADER_BYTES` long and
            // private to us until create_published publishes it.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_ptr(), map.as_ptr(), header.len());
            }
            Ok(())
        })?;
        if let Some(e) = published.lock_error {
            log::warn!("{channel}: mlock of {total} bytes failed ({e}); pages may be swapped");
        }
        Ok(Segment {
            path,
            map: published.mapping,
            fields,
            id: published.id,
            owner: true,
        })
    }

    /// Opens and validates an existing segment of `kind`: see
    /// [`Segment::open_expecting`].
    pub fn open(path: &Path, kind: Kind) -> Result<Segment> {
        Segment::open_expecting(path, kind, None)
    }

    /// Opens an existing segment of `kind`, trusting nothing in it:
    /// 1. opens without following a link (`O_NOFOLLOW|O_CLOEXEC`) and
    ///    refuses a file that is not this user's or has any group/other
    ///    permission ([`SegmentProblem::Untrusted`], naming owner and mode);
    /// 2. reads the header page with `pread` and checks magic, version,
    ///    checksum, kind and geometry, the size the header states against
    ///    that geometry and the file's size, and (when `expect` is given)
    ///    slot size and capacity against the configuration;
    /// 3. only then maps exactly the stated size.
    pub fn open_expecting(path: &Path, kind: Kind, expect: Option<&Geometry>) -> Result<Segment> {
        let seg_err = |problem| Error::Segment {
            path: path.to_path_buf(),
            problem,
        };
        let (f, id, size) = file::open_private(path, Access::ReadWrite)?;
        if size < HEADER_BYTES as u64 {
            return Err(seg_err(SegmentProblem::Truncated {
                expected: HEADER_BYTES as u64,
                actual: size,
            }));
        }
        let mut raw = [0u8; CHECKED_BYTES + 8];
        f.read_exact_at(&mut raw, 0)
            .map_err(|e| Error::io("read", path.display().to_string(), e))?;
        let fields = decode_header(&raw, kind, size).map_err(seg_err)?;
        if let Some(geo) = expect {
            for (field, found, configured) in [
                ("slot size", fields.slot_size as u64, geo.slot_size as u64),
                ("capacity", fields.capacity, geo.capacity as u64),
            ] {
                if found != configured {
                    return Err(seg_err(SegmentProblem::Mismatch {
                        field,
                        found,
                        configured,
                    }));
                }
            }
        }
        // The size is validated: prefaulting it is what the creator asked.
        let map = Mapping::shared(
            std::os::fd::AsFd::as_fd(&f),
            fields.total_len as usize,
            Access::ReadWrite,
            true,
        )
        .map_err(|e| Error::io("mmap", path.display().to_string(), e))?;
        Ok(Segment {
            path: path.to_path_buf(),
            map,
            fields,
            id,
            owner: false,
        })
    }

    /// The file of the segment.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header fields.
    pub fn fields(&self) -> &HeaderFields {
        &self.fields
    }

    /// Removes this segment's file if it is still the one at its path.
    pub fn unpublish(&self) {
        if self.owner && self.still_published() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Whether the file at the path is still this segment (not removed or
    /// replaced by a newer incarnation).
    pub fn still_published(&self) -> bool {
        self.id.is_at(&self.path)
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= HEADER_BYTES);
        self.map.atomic_u64(offset)
    }

    /// Flag the creator sets when it closes in order.
    pub fn owner_closed(&self) -> &AtomicU64 {
        self.word(OWNER_CLOSED)
    }
    /// Pid of the attached peer (sessions), 0 when none.
    pub fn peer_pid(&self) -> &AtomicU64 {
        self.word(PEER_PID)
    }
    /// Start time of the attached peer's process.
    pub fn peer_start(&self) -> &AtomicU64 {
        self.word(PEER_START)
    }
    /// Flag the peer sets when it closes in order.
    pub fn peer_closed(&self) -> &AtomicU64 {
        self.word(PEER_CLOSED)
    }
    /// Producer-owned control word of ring `r`.
    pub fn producer_word(&self, r: usize) -> &AtomicU64 {
        self.word(RING_CONTROL + r * RING_CONTROL_STRIDE)
    }
    /// Consumer-owned control word of ring `r`.
    pub fn consumer_word(&self, r: usize) -> &AtomicU64 {
        self.word(RING_CONTROL + r * RING_CONTROL_STRIDE + CONSUMER_LINE)
    }

    /// Word `w` of lossless subscriber record `i` (streams), each record on
    /// its own cache line; see [`super::lossless`].
    pub fn lossless_word(&self, i: usize, w: usize) -> &AtomicU64 {
        assert!(
            i < LOSSLESS_RECORDS && w < 8,
            "lossless record {i} word {w}"
        );
        self.word(LOSSLESS + i * 64 + w * 8)
    }

    /// The doorbell of ring 0, with which a stream's idle subscribers sleep.
    pub fn doorbell(&self) -> super::doorbell::Doorbell {
        let bell = self.word(DOORBELL_BELL) as *const AtomicU64 as *const AtomicU32;
        // SAFETY: the words lie in the header, which the segment keeps
        // mapped; the bell is only ever accessed as this atomic u32 (the
        // first half of an 8-aligned word, so aligned).
        unsafe {
            super::doorbell::Doorbell::new(
                self.word(DOORBELL_SLEEPERS),
                self.word(DOORBELL_ASLEEP),
                bell,
            )
        }
    }

    /// First slot word of ring `r`.
    pub fn slots(&self, r: usize) -> *const AtomicU64 {
        assert!(r < self.fields.kind.rings());
        let off = HEADER_BYTES + r * self.fields.capacity as usize * self.fields.slot_size as usize;
        // SAFETY: decode_header checked that every ring lies inside the
        // stated size, which is the length mapped.
        unsafe { self.map.as_ptr().add(off) as *const AtomicU64 }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // The mapping unmaps itself after this.
        if self.owner && self.still_published() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// How [`crate::sys::leftovers`] recognises a segment and reads its creator.
pub const FORMAT: Format = Format {
    what: "shared-memory segment",
    magic: MAGIC,
    creator: |head| {
        let raw: &[u8; CHECKED_BYTES + 8] = head.get(..CHECKED_BYTES + 8)?.try_into().ok()?;
        let version = u32::from_le_bytes(raw[8..12].try_into().ok()?);
        let sum = u64::from_le_bytes(raw[72..80].try_into().ok()?);
        (raw[..8] == MAGIC && version == VERSION && file::checksum(&raw[..CHECKED_BYTES]) == sum)
            .then(|| Creator {
                pid: u32::from_le_bytes(raw[48..52].try_into().expect("4 bytes")),
                start: u64::from_le_bytes(raw[56..64].try_into().expect("8 bytes")),
            })
    },
};

fn new_epoch() -> u64 {
    // Time in ns mixed with the pid: distinct across restarts and across
    // processes that start in the same nanosecond.
    crate::clock::now_ns() ^ ((std::process::id() as u64) << 48)
}

/// Writes the sealed header of `f` (fields and checksum) into `out`.
pub fn encode_header(f: &HeaderFields, out: &mut [u8; SEALED_HEADER]) {
    out[0..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(f.kind as u32).to_le_bytes());
    out[16..20].copy_from_slice(&f.slot_size.to_le_bytes());
    out[20..24].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    out[24..32].copy_from_slice(&f.capacity.to_le_bytes());
    out[32..40].copy_from_slice(&f.total_len.to_le_bytes());
    out[40..48].copy_from_slice(&f.epoch.to_le_bytes());
    out[48..52].copy_from_slice(&f.creator_pid.to_le_bytes());
    out[52..56].copy_from_slice(&0u32.to_le_bytes());
    out[56..64].copy_from_slice(&f.creator_start.to_le_bytes());
    out[64..72].copy_from_slice(&0u64.to_le_bytes());
    let sum = file::checksum(&out[..CHECKED_BYTES]);
    out[72..80].copy_from_slice(&sum.to_le_bytes());
}

/// Validates a sealed header read from a file of `file_len` bytes that
/// should hold a `want`: magic, version, checksum, kind, geometry, the
/// stated size against the geometry and the file. Total: every input gives
/// a value or a named problem (fuzzed by `fuzz/`).
pub fn decode_header(
    raw: &[u8; SEALED_HEADER],
    want: Kind,
    file_len: u64,
) -> std::result::Result<HeaderFields, SegmentProblem> {
    let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().expect("8 bytes"));
    if raw[0..8] != MAGIC {
        return Err(SegmentProblem::BadMagic);
    }
    let version = u32_at(8);
    if version != VERSION {
        return Err(SegmentProblem::Version {
            found: version,
            supported: VERSION,
        });
    }
    if file::checksum(&raw[..CHECKED_BYTES]) != u64_at(72) {
        return Err(SegmentProblem::Corrupt("header checksum does not match"));
    }
    let kind = Kind::from_u32(u32_at(12)).ok_or(SegmentProblem::Corrupt("unknown kind"))?;
    if kind != want {
        return Err(SegmentProblem::WrongKind {
            found: kind.name(),
            expected: want.name(),
        });
    }
    let slot_size = u32_at(16);
    let capacity = u64_at(24);
    let total_len = u64_at(32);
    if u32_at(20) as usize != HEADER_BYTES {
        return Err(SegmentProblem::Corrupt("header size is not 4096"));
    }
    if slot_size < 64 || slot_size % 64 != 0 {
        return Err(SegmentProblem::Corrupt("slot size is not a multiple of 64"));
    }
    if slot_size as usize > super::slot_size(crate::config::MAX_MESSAGE_LIMIT) {
        return Err(SegmentProblem::Corrupt(
            "slot size is larger than the largest max_message allows",
        ));
    }
    if !capacity.is_power_of_two() || capacity > crate::config::MAX_CAPACITY as u64 {
        return Err(SegmentProblem::Corrupt(
            "capacity is not a power of two in range",
        ));
    }
    let needed = (HEADER_BYTES as u64)
        .checked_add(
            (kind.rings() as u64)
                .checked_mul(capacity)
                .and_then(|n| n.checked_mul(slot_size as u64))
                .ok_or(SegmentProblem::Corrupt("geometry overflows"))?,
        )
        .ok_or(SegmentProblem::Corrupt("geometry overflows"))?;
    // A creator states exactly its rings' size, or that rounded up to
    // whole huge pages: anything else is not a segment this build made.
    if total_len != needed && total_len != hugepages::round_up(needed as usize) as u64 {
        return Err(SegmentProblem::Corrupt(
            "stated size does not match its rings",
        ));
    }
    if file_len < total_len {
        return Err(SegmentProblem::Truncated {
            expected: total_len,
            actual: file_len,
        });
    }
    Ok(HeaderFields {
        kind,
        slot_size,
        capacity,
        total_len,
        epoch: u64_at(40),
        creator_pid: u32_at(48),
        creator_start: u64_at(56),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_fallback_is_silent_under_try_and_warned_once_under_on() {
        let warned = AtomicBool::new(false);
        // The default: never a warning, however many segments fall back.
        for _ in 0..3 {
            assert_eq!(
                note_no_huge_pages(HugePages::Try, &warned, "stream `a`", "no mount"),
                Noted::Debug
            );
        }
        assert!(!warned.load(Ordering::Relaxed));
        // Asked for: the first fallback warns, the next ones do not.
        let noted: Vec<Noted> = (0..3)
            .map(|_| note_no_huge_pages(HugePages::On, &warned, "stream `b`", "no mount"))
            .collect();
        assert_eq!(noted, [Noted::Warned, Noted::Debug, Noted::Debug]);
        assert_eq!(
            note_no_huge_pages(HugePages::Try, &warned, "stream `c`", "no mount"),
            Noted::Debug
        );
    }

    fn fields() -> HeaderFields {
        HeaderFields {
            kind: Kind::Stream,
            slot_size: 128,
            capacity: 8,
            total_len: (HEADER_BYTES + 8 * 128) as u64,
            epoch: 42,
            creator_pid: 1,
            creator_start: 2,
        }
    }

    #[test]
    fn header_round_trips() {
        let mut raw = [0u8; CHECKED_BYTES + 8];
        encode_header(&fields(), &mut raw);
        assert_eq!(decode_header(&raw, Kind::Stream, 1 << 20), Ok(fields()));
    }

    #[test]
    fn every_header_fault_is_named() {
        let mut raw = [0u8; CHECKED_BYTES + 8];
        encode_header(&fields(), &mut raw);
        let total = fields().total_len;
        assert_eq!(
            decode_header(&raw, Kind::Session, total),
            Err(SegmentProblem::WrongKind {
                found: "stream",
                expected: "session"
            })
        );
        assert_eq!(
            decode_header(&raw, Kind::Stream, total - 1),
            Err(SegmentProblem::Truncated {
                expected: total,
                actual: total - 1
            })
        );
        let mut flipped = raw;
        flipped[25] ^= 1;
        assert_eq!(
            decode_header(&flipped, Kind::Stream, total),
            Err(SegmentProblem::Corrupt("header checksum does not match"))
        );
        let mut v9 = raw;
        v9[8] = 9;
        assert_eq!(
            decode_header(&v9, Kind::Stream, total),
            Err(SegmentProblem::Version {
                found: 9,
                supported: VERSION
            })
        );
        let mut magic = raw;
        magic[0] = b'X';
        assert_eq!(
            decode_header(&magic, Kind::Stream, total),
            Err(SegmentProblem::BadMagic)
        );
    }

    #[test]
    fn an_opener_compares_the_geometry_with_its_configuration() {
        let dir = std::env::temp_dir().join(format!("mdbus-seg-geo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = ShmConfig {
            dir: dir.clone(),
            huge_pages: HugePages::Off,
            ..Default::default()
        };
        let geo = Geometry {
            kind: Kind::Stream,
            slot_size: 128,
            capacity: 8,
        };
        let seg = Segment::create(&cfg, "g", geo).unwrap();
        assert_eq!(seg.fields().total_len as usize, geo.total_len());
        let path = seg.path().to_path_buf();
        let opened = Segment::open_expecting(&path, Kind::Stream, Some(&geo)).unwrap();
        assert_eq!(opened.fields(), seg.fields());
        let bigger = Geometry {
            capacity: 16,
            ..geo
        };
        let e = Segment::open_expecting(&path, Kind::Stream, Some(&bigger)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "shared-memory segment {}: its capacity is 8, the configuration says 16",
                path.display()
            )
        );
        drop((opened, seg));
        assert!(!path.exists(), "the creator removes its segment");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
