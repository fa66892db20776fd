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
//! | 4096 | slots of ring 0, then ring 1 |
//!
//! A creator builds the whole segment under a temporary name and renames it
//! into place, so nobody ever maps a half-written header. A segment left by
//! a creator that died is detected (its process is gone, or its pid now
//! belongs to a process started at another time) and replaced.

use std::ffi::CString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use crate::config::{HugePages, ShmConfig};
use crate::error::{Error, Result, SegmentProblem};
use std::sync::atomic::AtomicU64;

/// First eight bytes of every segment.
pub const MAGIC: [u8; 8] = *b"MDBUSHM\0";
/// Layout version written and accepted by this build.
pub const VERSION: u32 = 1;
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
/// Bytes covered by the header checksum.
const CHECKED_BYTES: usize = 72;

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
    base: NonNull<u8>,
    len: usize,
    fields: HeaderFields,
    inode: (u64, u64),
    owner: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value; the raw
// pointer is only an address. Moving the handle to another thread is sound;
// it is not `Sync` (no `impl Sync`), so only one thread uses it at a time.
unsafe impl Send for Segment {}

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
        if huge.exists() {
            return huge;
        }
    }
    cfg.dir.join(file)
}

const HUGE_PAGE: usize = 2 << 20;

fn hugetlbfs_usable(cfg: &ShmConfig, bytes: usize) -> std::result::Result<(), String> {
    let c = CString::new(cfg.hugetlbfs.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: statfs is plain old data; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is writable.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!("{} is not mounted", cfg.hugetlbfs.display()));
    }
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    if st.f_type as i64 != HUGETLBFS_MAGIC {
        return Err(format!(
            "{} is not a hugetlbfs mount",
            cfg.hugetlbfs.display()
        ));
    }
    let free = (st.f_bfree as usize).saturating_mul(st.f_bsize as usize);
    if free < bytes {
        return Err(format!(
            "{} has {} bytes of free huge pages, {} needed (raise vm.nr_hugepages)",
            cfg.hugetlbfs.display(),
            free,
            bytes
        ));
    }
    Ok(())
}

impl Segment {
    /// Creates the segment of `name`, replacing a stale one left by a dead
    /// creator; fails with [`Error::InUse`] when a live process owns it.
    pub fn create(cfg: &ShmConfig, name: &str, geo: Geometry) -> Result<Segment> {
        debug_assert!(geo.capacity.is_power_of_two() && geo.slot_size % 64 == 0);
        let channel = format!("{} `{}`", geo.kind.name(), name);
        let file = format!("{}.{}.{}", cfg.prefix, geo.kind.name(), name);
        let mut total = geo.total_len();
        let mut dir = cfg.dir.clone();
        if cfg.huge_pages != HugePages::Off {
            let rounded = total.div_ceil(HUGE_PAGE) * HUGE_PAGE;
            match hugetlbfs_usable(cfg, rounded) {
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
                    // Once per process: every segment would say the same.
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| {
                        log::warn!("{channel}: huge pages not used: {why}; using normal pages")
                    });
                }
            }
        }
        // Any segment of this name, in either place, must be stale or absent.
        for candidate in [cfg.dir.join(&file), cfg.hugetlbfs.join(&file)] {
            if !candidate.exists() {
                continue;
            }
            match Segment::open(&candidate, geo.kind) {
                Ok(old) if process_alive(old.fields.creator_pid, old.fields.creator_start) => {
                    return Err(Error::InUse {
                        channel,
                        pid: old.fields.creator_pid,
                    });
                }
                Ok(old) => log::warn!(
                    "{channel}: replacing stale segment {} of dead process {}",
                    candidate.display(),
                    old.fields.creator_pid
                ),
                Err(e) => log::warn!("{channel}: replacing unusable segment: {e}"),
            }
            let _ = std::fs::remove_file(&candidate);
        }

        let path = dir.join(&file);
        let tmp = dir.join(format!(".{file}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let ctmp = cpath(&tmp)?;
        // SAFETY: `ctmp` is a NUL-terminated path; flags and mode are constants.
        let fd = unsafe {
            libc::open(
                ctmp.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("create", tmp.display().to_string()));
        }
        let fd = Fd(fd);
        // SAFETY: `fd` is an open, writable file descriptor.
        if unsafe { libc::ftruncate(fd.0, total as libc::off_t) } != 0 {
            let e = Error::last_os("size", tmp.display().to_string());
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let base = match map(fd.0, total, &tmp) {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        // Prefault: touch every page so the first message never takes a
        // page fault.
        let page = page_size();
        for off in (0..total).step_by(page) {
            // SAFETY: `off < total`, inside the fresh mapping nobody else sees yet.
            unsafe { base.as_ptr().add(off).write_volatile(0) };
        }
        if cfg.mlock {
            // SAFETY: the range is exactly our mapping.
            if unsafe { libc::mlock(base.as_ptr().cast(), total) } != 0 {
                log::warn!(
                    "{channel}: mlock of {total} bytes failed ({}); pages may be swapped",
                    std::io::Error::last_os_error()
                );
            }
        }
        let fields = HeaderFields {
            kind: geo.kind,
            slot_size: geo.slot_size as u32,
            capacity: geo.capacity as u64,
            total_len: total as u64,
            epoch: new_epoch(),
            creator_pid: std::process::id(),
            creator_start: process_start_time(std::process::id()).unwrap_or(0),
        };
        let mut header = [0u8; CHECKED_BYTES + 8];
        encode_header(&fields, &mut header);
        // SAFETY: the mapping is at least HEADER_BYTES long and private to
        // us until the rename below publishes it.
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), base.as_ptr(), header.len());
        }
        let cpath_final = cpath(&path)?;
        // SAFETY: both paths are NUL-terminated; rename is atomic within a
        // file system, so openers see either no file or a complete one.
        if unsafe { libc::rename(ctmp.as_ptr(), cpath_final.as_ptr()) } != 0 {
            let e = Error::last_os("publish", path.display().to_string());
            let _ = std::fs::remove_file(&tmp);
            // SAFETY: unmapping our own mapping once.
            unsafe { libc::munmap(base.as_ptr().cast(), total) };
            return Err(e);
        }
        let inode = fstat_inode(fd.0).unwrap_or((0, 0));
        Ok(Segment {
            path,
            base,
            len: total,
            fields,
            inode,
            owner: true,
        })
    }

    /// Opens and validates an existing segment of `kind`.
    pub fn open(path: &Path, kind: Kind) -> Result<Segment> {
        let seg_err = |problem| Error::Segment {
            path: path.to_path_buf(),
            problem,
        };
        let c = cpath(path)?;
        // SAFETY: `c` is NUL-terminated; flags are constants.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::last_os("open", path.display().to_string()));
        }
        let fd = Fd(fd);
        // SAFETY: stat is plain old data.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` writable.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(Error::last_os("stat", path.display().to_string()));
        }
        let size = st.st_size as u64;
        if size < HEADER_BYTES as u64 {
            return Err(seg_err(SegmentProblem::Truncated {
                expected: HEADER_BYTES as u64,
                actual: size,
            }));
        }
        let base = map(fd.0, size as usize, path)?;
        let mut seg = Segment {
            path: path.to_path_buf(),
            base,
            len: size as usize,
            fields: HeaderFields {
                kind,
                slot_size: 0,
                capacity: 0,
                total_len: 0,
                epoch: 0,
                creator_pid: 0,
                creator_start: 0,
            },
            inode: (st.st_dev, st.st_ino),
            owner: false,
        };
        let mut raw = [0u8; CHECKED_BYTES + 8];
        // SAFETY: the mapping is at least HEADER_BYTES long; the header is
        // immutable once the segment is published.
        unsafe { std::ptr::copy_nonoverlapping(base.as_ptr(), raw.as_mut_ptr(), raw.len()) };
        seg.fields = decode_header(&raw, kind, size).map_err(seg_err)?;
        Ok(seg)
    }

    /// The file of the segment.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header fields.
    pub fn fields(&self) -> &HeaderFields {
        &self.fields
    }

    /// Whether the file at the path is still this segment (not removed or
    /// replaced by a newer incarnation).
    pub fn still_published(&self) -> bool {
        match std::fs::metadata(&self.path) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino()) == self.inode
            }
            Err(_) => false,
        }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= HEADER_BYTES);
        // SAFETY: `offset` is 8-aligned and inside the header page of our
        // mapping; AtomicU64 has the size and alignment of u64, and every
        // process touches these words only atomically.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU64) }
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

    /// First slot word of ring `r`.
    pub fn slots(&self, r: usize) -> *const AtomicU64 {
        assert!(r < self.fields.kind.rings());
        let off = HEADER_BYTES + r * self.fields.capacity as usize * self.fields.slot_size as usize;
        // SAFETY: decode_header checked that every ring lies inside the mapping.
        unsafe { self.base.as_ptr().add(off) as *const AtomicU64 }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owner && self.still_published() {
            let _ = std::fs::remove_file(&self.path);
        }
        // SAFETY: `base`/`len` describe our own mapping, unmapped once here;
        // borrows of it cannot outlive `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own this descriptor and close it once; a mapping stays
        // valid after its descriptor is closed.
        unsafe { libc::close(self.0) };
    }
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        Error::io(
            "open",
            p.display().to_string(),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains a NUL byte"),
        )
    })
}

fn map(fd: libc::c_int, len: usize, path: &Path) -> Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of an open descriptor; the kernel picks
    // the address. MAP_POPULATE prefaults the page tables.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os("mmap", path.display().to_string()));
    }
    Ok(NonNull::new(p.cast()).expect("mmap never returns NULL on success"))
}

fn fstat_inode(fd: libc::c_int) -> Option<(u64, u64)> {
    // SAFETY: stat is plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` writable.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn new_epoch() -> u64 {
    // Time in ns mixed with the pid: distinct across restarts and across
    // processes that start in the same nanosecond.
    crate::clock::now_ns() ^ ((std::process::id() as u64) << 48)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn encode_header(f: &HeaderFields, out: &mut [u8; CHECKED_BYTES + 8]) {
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
    let sum = fnv1a(&out[..CHECKED_BYTES]);
    out[72..80].copy_from_slice(&sum.to_le_bytes());
}

fn decode_header(
    raw: &[u8; CHECKED_BYTES + 8],
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
    if fnv1a(&raw[..CHECKED_BYTES]) != u64_at(72) {
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
    if total_len < needed {
        return Err(SegmentProblem::Corrupt(
            "stated size is smaller than its rings",
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

/// Whether process `pid`, started at `start` (0: unknown), still runs.
/// Allocation-free: it is called from idle polling loops.
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match (start, process_start_time(pid)) {
        (0, _) | (_, None) => true,
        (want, Some(now)) => want == now,
    }
}

/// Start time of `pid` in clock ticks since boot (field 22 of
/// /proc/PID/stat); it tells a recycled pid from the original process.
/// Reads into stack buffers: no allocation.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let mut path = [0u8; 32];
    {
        let mut w = &mut path[..];
        write!(w, "/proc/{pid}/stat\0").ok()?;
    }
    // SAFETY: `path` is NUL-terminated by the write above.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let fd = Fd(fd);
    let mut buf = [0u8; 1024];
    // SAFETY: `buf` is writable for its whole length.
    let n = unsafe { libc::read(fd.0, buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return None;
    }
    let text = &buf[..n as usize];
    // The command name may hold spaces and parentheses: fields resume after
    // the last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    let field = text[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut v2 = raw;
        v2[8] = 2;
        assert_eq!(
            decode_header(&v2, Kind::Stream, total),
            Err(SegmentProblem::Version {
                found: 2,
                supported: 1
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
    fn own_process_is_alive_and_its_start_time_is_checked() {
        let me = std::process::id();
        let start = process_start_time(me).expect("/proc is mounted");
        assert!(process_alive(me, start));
        assert!(!process_alive(me, start + 1));
        assert!(!process_alive(0, 0));
    }
}
