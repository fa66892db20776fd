//! A counters file: named `u64` counters in shared memory, written by one
//! process and read lock-free by any other while it runs (in the spirit of
//! Aeron's CnC file and AeronStat).
//!
//! The owner creates the file with a fixed list of labels, then stores
//! values with single atomic stores; a reader (`mdbus-stat`) maps the same
//! file read-only and loads them. Nobody takes a lock or makes a system
//! call per update, so the owner can update counters from a hot path.
//!
//! Layout (little-endian, offsets in bytes):
//!
//! | offset | what |
//! | --- | --- |
//! | 0 | magic `MDBUSCNT` |
//! | 8 | layout version (u32), number of slots (u32) |
//! | 16 | slot size (u32, 64), header size (u32, 256) |
//! | 24 | owner pid (u32), reserved (u32) |
//! | 32 | owner process start time, clock ticks since boot (u64) |
//! | 40 | owner start time, ns since the Unix epoch (u64) |
//! | 48 | FNV-1a checksum of bytes 0..48 (u64) |
//! | 64 | owner name, 64 bytes, NUL-padded UTF-8 |
//! | 128 | last update, ns since the Unix epoch (atomic u64, the owner's [`CountersFile::touch`]) |
//! | 256 + 64·i | slot i: value (atomic u64), label length (u8), label (up to 55 bytes of UTF-8) |
//!
//! The file is built under a temporary name and renamed into place, so a
//! reader never sees a half-written header. A file whose owner process has
//! exited is *stale*: [`CountersReader::open`] refuses it with
//! [`CountersError::Stale`], and a new owner replaces it.
//!
//! ```
//! use mdbus::counters::{CountersFile, CountersReader};
//! # let dir = std::env::temp_dir().join(format!("mdbus-doc-cnt-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("relay.counters");
//! let file = CountersFile::create(&path, "example", &["packets", "messages"])?;
//! file.set(0, 10);
//! file.add(1, 42);
//!
//! let reader = CountersReader::open(&path)?;
//! assert_eq!(reader.labels(), vec!["packets".to_string(), "messages".to_string()]);
//! assert_eq!(reader.value(1), Some(42));
//! assert_eq!(reader.owner().pid, std::process::id());
//! # drop(file); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), mdbus::counters::CountersError>(())
//! ```

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::transport::shm::segment::{process_alive, process_start_time};

/// First eight bytes of every counters file.
pub const MAGIC: [u8; 8] = *b"MDBUSCNT";
/// Layout version written and read by this build.
pub const VERSION: u32 = 1;
/// Bytes of the header, before the first slot.
pub const HEADER_BYTES: usize = 256;
/// Bytes per slot.
pub const SLOT_BYTES: usize = 64;
/// Longest label, in bytes.
pub const MAX_LABEL: usize = SLOT_BYTES - 9;
/// Longest owner name, in bytes.
pub const MAX_OWNER_NAME: usize = 64;
/// Most slots a file may have.
pub const MAX_SLOTS: usize = 1 << 16;

const OFF_VERSION: usize = 8;
const OFF_SLOTS: usize = 12;
const OFF_SLOT_SIZE: usize = 16;
const OFF_HEADER_SIZE: usize = 20;
const OFF_PID: usize = 24;
const OFF_PROC_START: usize = 32;
const OFF_START_NS: usize = 40;
const OFF_CHECKSUM: usize = 48;
const OFF_NAME: usize = 64;
const OFF_UPDATED: usize = 128;

/// Why a counters file cannot be created or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CountersError {
    /// No file at the path.
    #[error("counters file {} does not exist: is its owner (e.g. mdbus-relay) running, and is this the path its configuration names?", path.display())]
    Missing {
        /// The path looked at.
        path: PathBuf,
    },
    /// A system call on the file failed.
    #[error("counters file {}: {op} failed: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done ("open", "mmap", "rename"...).
        op: &'static str,
        /// The error the system returned.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the counters magic.
    #[error("{} is not an mdbus counters file (it does not start with MDBUSCNT)", path.display())]
    NotCounters {
        /// The file.
        path: PathBuf,
    },
    /// The file has another layout version.
    #[error("counters file {}: layout version {found}, this build reads version {supported}; use the mdbus-stat of the same release as its owner", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The header fails its checksum, states an impossible geometry, or
    /// the file is shorter than the header says.
    #[error("counters file {} is corrupt: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The process that wrote the file has exited.
    #[error("counters file {} is stale: its owner {name} (pid {pid}) is no longer running", path.display())]
    Stale {
        /// The file.
        path: PathBuf,
        /// The owner's name.
        name: String,
        /// The owner's pid.
        pid: u32,
    },
    /// A live process owns the file.
    #[error("counters file {} is in use by live process {pid} ({name}); stop it or choose another path", path.display())]
    InUse {
        /// The file.
        path: PathBuf,
        /// The owner's name.
        name: String,
        /// The owner's pid.
        pid: u32,
    },
    /// A label or owner name is too long, or there are too many labels.
    #[error("counters file {}: {what}", path.display())]
    BadLabel {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// Who wrote a counters file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Process start time in clock ticks since boot (tells a recycled pid
    /// from the owner).
    pub process_start: u64,
    /// When the owner created the file, ns since the Unix epoch.
    pub start_time_ns: u64,
    /// The name the owner gave (e.g. `mdbus-relay`).
    pub name: String,
}

/// A mapping of a counters file, read-write for the owner, read-only for a
/// reader.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value, and every
// access to the words other processes write goes through atomics; moving it
// between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: shared references only load or store through atomics (values,
// the update time) or read the header, which is immutable once published.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(path: &Path, fd: &Fd, len: usize, writable: bool) -> Result<Mapping, CountersError> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an open descriptor; the kernel
        // picks the address.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.0, 0) };
        if p == libc::MAP_FAILED {
            return Err(io_err(path, "mmap"));
        }
        let base = NonNull::new(p.cast()).ok_or_else(|| io_err(path, "mmap"))?;
        Ok(Mapping { base, len })
    }

    fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.len);
        // SAFETY: inside our mapping (checked above); the bytes read this
        // way (header, labels) are written before the file is published by
        // rename and never again.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset), len) }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.len);
        // SAFETY: `offset` is 8-aligned (the mapping is page-aligned) and
        // inside the mapping; AtomicU64 has the size and alignment of u64,
        // and every process touches these words only atomically.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU64) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe our own mapping, unmapped once here;
        // borrows of it cannot outlive `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The owner's side: creates the file and stores values.
///
/// `Send` and `Sync`: updates are single atomic stores, so one thread may
/// update while another refreshes other slots. Each slot should have a
/// single writer (a counter that two threads `add` to loses no update, but
/// `set` from two threads races as any last-writer-wins store does).
pub struct CountersFile {
    path: PathBuf,
    map: Mapping,
    slots: usize,
    inode: (u64, u64),
}

impl std::fmt::Debug for CountersFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountersFile")
            .field("path", &self.path)
            .field("slots", &self.slots)
            .finish()
    }
}

impl CountersFile {
    /// Creates the file at `path` with one zeroed slot per label, replacing
    /// a stale file left by an owner that exited; fails with
    /// [`CountersError::InUse`] when a live process owns it.
    pub fn create(
        path: impl AsRef<Path>,
        owner_name: &str,
        labels: &[&str],
    ) -> Result<CountersFile, CountersError> {
        let path = path.as_ref().to_path_buf();
        if owner_name.len() > MAX_OWNER_NAME {
            return Err(CountersError::BadLabel {
                path,
                what: format!("owner name `{owner_name}` is longer than {MAX_OWNER_NAME} bytes"),
            });
        }
        if labels.len() > MAX_SLOTS {
            return Err(CountersError::BadLabel {
                path,
                what: format!("{} counters, at most {MAX_SLOTS} allowed", labels.len()),
            });
        }
        if let Some(l) = labels.iter().find(|l| l.len() > MAX_LABEL) {
            return Err(CountersError::BadLabel {
                path,
                what: format!("label `{l}` is longer than {MAX_LABEL} bytes"),
            });
        }
        match CountersReader::open_unchecked(&path) {
            Ok(old) if old.owner_alive() => {
                let o = old.owner();
                return Err(CountersError::InUse {
                    path,
                    name: o.name,
                    pid: o.pid,
                });
            }
            Ok(old) => {
                let o = old.owner();
                log::warn!(
                    "replacing stale counters file {} of {} (pid {}), which is no longer running",
                    path.display(),
                    o.name,
                    o.pid
                );
                let _ = std::fs::remove_file(&path);
            }
            Err(CountersError::Missing { .. }) => {}
            Err(e) => {
                log::warn!("replacing unusable counters file: {e}");
                let _ = std::fs::remove_file(&path);
            }
        }

        let len = HEADER_BYTES + labels.len() * SLOT_BYTES;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "counters".into());
        let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let ctmp = cpath(&tmp)?;
        // SAFETY: `ctmp` is a NUL-terminated path; flags and mode are constants.
        let fd = unsafe {
            libc::open(
                ctmp.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io_err(&tmp, "create"));
        }
        let fd = Fd(fd);
        let built = (|| {
            // SAFETY: `fd` is an open, writable file descriptor.
            if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
                return Err(io_err(&tmp, "size"));
            }
            let map = Mapping::map(&tmp, &fd, len, true)?;
            let mut header = [0u8; HEADER_BYTES];
            let pid = std::process::id();
            header[0..8].copy_from_slice(&MAGIC);
            header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
            header[OFF_SLOTS..OFF_SLOTS + 4].copy_from_slice(&(labels.len() as u32).to_le_bytes());
            header[OFF_SLOT_SIZE..OFF_SLOT_SIZE + 4]
                .copy_from_slice(&(SLOT_BYTES as u32).to_le_bytes());
            header[OFF_HEADER_SIZE..OFF_HEADER_SIZE + 4]
                .copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
            header[OFF_PID..OFF_PID + 4].copy_from_slice(&pid.to_le_bytes());
            header[OFF_PROC_START..OFF_PROC_START + 8]
                .copy_from_slice(&process_start_time(pid).unwrap_or(0).to_le_bytes());
            header[OFF_START_NS..OFF_START_NS + 8]
                .copy_from_slice(&crate::clock::now_ns().to_le_bytes());
            let sum = fnv1a(&header[..OFF_CHECKSUM]);
            header[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&sum.to_le_bytes());
            header[OFF_NAME..OFF_NAME + owner_name.len()].copy_from_slice(owner_name.as_bytes());
            // SAFETY: the mapping is `len >= HEADER_BYTES` long and private
            // to us until the rename below publishes it.
            unsafe {
                std::ptr::copy_nonoverlapping(header.as_ptr(), map.base.as_ptr(), HEADER_BYTES)
            };
            for (i, label) in labels.iter().enumerate() {
                let mut slot = [0u8; SLOT_BYTES];
                slot[8] = label.len() as u8;
                slot[9..9 + label.len()].copy_from_slice(label.as_bytes());
                // SAFETY: slot i lies inside the mapping (len counts every
                // slot), still private to us.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        slot.as_ptr(),
                        map.base.as_ptr().add(HEADER_BYTES + i * SLOT_BYTES),
                        SLOT_BYTES,
                    )
                };
            }
            Ok(map)
        })();
        let map = match built {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let cfinal = cpath(&path)?;
        // SAFETY: both paths are NUL-terminated; rename is atomic within a
        // file system, so readers see either no file or a complete one.
        if unsafe { libc::rename(ctmp.as_ptr(), cfinal.as_ptr()) } != 0 {
            let e = io_err(&path, "rename");
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let inode = fstat_inode(&fd).unwrap_or((0, 0));
        Ok(CountersFile {
            path,
            map,
            slots: labels.len(),
            inode,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots
    }

    /// True when the file has no slots.
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    fn slot(&self, i: usize) -> Option<&AtomicU64> {
        (i < self.slots).then(|| self.map.word(HEADER_BYTES + i * SLOT_BYTES))
    }

    /// Stores `value` in slot `i` (ignored when `i` is out of range).
    #[inline]
    pub fn set(&self, i: usize, value: u64) {
        if let Some(w) = self.slot(i) {
            // Release: a reader that sees the value sees the owner's
            // earlier stores too (e.g. the counts a rate is taken against).
            w.store(value, Ordering::Release);
        }
    }

    /// Adds `n` to slot `i` (ignored when `i` is out of range).
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        if let Some(w) = self.slot(i) {
            w.fetch_add(n, Ordering::AcqRel);
        }
    }

    /// The value of slot `i` (0 when out of range).
    pub fn get(&self, i: usize) -> u64 {
        self.slot(i).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Records the time of the latest refresh (ns since the Unix epoch), so
    /// readers compute rates over the owner's own intervals.
    #[inline]
    pub fn touch(&self, now_ns: u64) {
        self.map.word(OFF_UPDATED).store(now_ns, Ordering::Release);
    }
}

impl Drop for CountersFile {
    fn drop(&mut self) {
        // An orderly owner removes its file (if it is still this one), so
        // only a crashed owner leaves a stale file behind.
        if let Ok(m) = std::fs::metadata(&self.path) {
            use std::os::unix::fs::MetadataExt;
            if (m.dev(), m.ino()) == self.inode {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A reader's side: maps the file read-only and loads values.
pub struct CountersReader {
    path: PathBuf,
    map: Mapping,
    slots: usize,
    owner: Owner,
    labels: Vec<String>,
}

impl std::fmt::Debug for CountersReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountersReader")
            .field("path", &self.path)
            .field("owner", &self.owner)
            .field("slots", &self.slots)
            .finish()
    }
}

impl CountersReader {
    /// Opens and validates the file; fails with [`CountersError::Stale`]
    /// when its owner has exited.
    pub fn open(path: impl AsRef<Path>) -> Result<CountersReader, CountersError> {
        let r = CountersReader::open_unchecked(path)?;
        if !r.owner_alive() {
            return Err(CountersError::Stale {
                path: r.path.clone(),
                name: r.owner.name.clone(),
                pid: r.owner.pid,
            });
        }
        Ok(r)
    }

    /// Opens and validates the file whether or not its owner still runs
    /// (to read what a crashed owner left).
    pub fn open_unchecked(path: impl AsRef<Path>) -> Result<CountersReader, CountersError> {
        let path = path.as_ref().to_path_buf();
        let c = cpath(&path)?;
        // SAFETY: `c` is NUL-terminated; flags are constants.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::NotFound {
                return Err(CountersError::Missing { path });
            }
            return Err(CountersError::Io {
                path,
                op: "open",
                source: e,
            });
        }
        let fd = Fd(fd);
        let size = file_size(&fd).ok_or_else(|| io_err(&path, "stat"))?;
        let corrupt = |what: String| CountersError::Corrupt {
            path: path.clone(),
            what,
        };
        if size < 8 {
            return Err(CountersError::NotCounters { path });
        }
        let map = Mapping::map(&path, &fd, size, false)?;
        if map.bytes(0, 8) != MAGIC {
            return Err(CountersError::NotCounters { path });
        }
        if size < HEADER_BYTES {
            return Err(corrupt(format!(
                "truncated: {size} bytes, the header alone needs {HEADER_BYTES}"
            )));
        }
        let header = map.bytes(0, HEADER_BYTES);
        let u32_at =
            |o: usize| u32::from_le_bytes([header[o], header[o + 1], header[o + 2], header[o + 3]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&header[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(OFF_VERSION);
        if version != VERSION {
            return Err(CountersError::Version {
                path,
                found: version,
                supported: VERSION,
            });
        }
        if fnv1a(&header[..OFF_CHECKSUM]) != u64_at(OFF_CHECKSUM) {
            return Err(corrupt("header checksum does not match".into()));
        }
        if u32_at(OFF_SLOT_SIZE) as usize != SLOT_BYTES
            || u32_at(OFF_HEADER_SIZE) as usize != HEADER_BYTES
        {
            return Err(corrupt(format!(
                "slot size {} and header size {}, expected {SLOT_BYTES} and {HEADER_BYTES}",
                u32_at(OFF_SLOT_SIZE),
                u32_at(OFF_HEADER_SIZE)
            )));
        }
        let slots = u32_at(OFF_SLOTS) as usize;
        let needed = HEADER_BYTES + slots * SLOT_BYTES;
        if slots > MAX_SLOTS || size < needed {
            return Err(corrupt(format!(
                "{slots} slots need {needed} bytes, the file has {size}"
            )));
        }
        let name_bytes = &header[OFF_NAME..OFF_NAME + MAX_OWNER_NAME];
        let name_len = name_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MAX_OWNER_NAME);
        let owner = Owner {
            pid: u32_at(OFF_PID),
            process_start: u64_at(OFF_PROC_START),
            start_time_ns: u64_at(OFF_START_NS),
            name: String::from_utf8_lossy(&name_bytes[..name_len]).into_owned(),
        };
        let mut labels = Vec::with_capacity(slots);
        for i in 0..slots {
            let slot = map.bytes(HEADER_BYTES + i * SLOT_BYTES, SLOT_BYTES);
            let n = usize::from(slot[8]);
            if n > MAX_LABEL {
                return Err(corrupt(format!("slot {i} has a {n}-byte label")));
            }
            labels.push(String::from_utf8_lossy(&slot[9..9 + n]).into_owned());
        }
        Ok(CountersReader {
            path,
            map,
            slots,
            owner,
            labels,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who wrote the file.
    pub fn owner(&self) -> Owner {
        self.owner.clone()
    }

    /// Whether the owner process still runs (the same process, not a
    /// recycled pid).
    pub fn owner_alive(&self) -> bool {
        process_alive(self.owner.pid, self.owner.process_start)
    }

    /// Number of counters.
    pub fn len(&self) -> usize {
        self.slots
    }

    /// True when the file has no counters.
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    /// The counters' labels, in slot order.
    pub fn labels(&self) -> Vec<String> {
        self.labels.clone()
    }

    /// The label of slot `i`.
    pub fn label(&self, i: usize) -> Option<&str> {
        self.labels.get(i).map(String::as_str)
    }

    /// Slot index of `label`.
    pub fn index_of(&self, label: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == label)
    }

    /// The value of slot `i`.
    pub fn value(&self, i: usize) -> Option<u64> {
        (i < self.slots).then(|| {
            self.map
                .word(HEADER_BYTES + i * SLOT_BYTES)
                .load(Ordering::Acquire)
        })
    }

    /// Every value, in slot order.
    pub fn values(&self) -> Vec<u64> {
        (0..self.slots).filter_map(|i| self.value(i)).collect()
    }

    /// When the owner last refreshed the file (ns since the Unix epoch; 0
    /// before its first refresh).
    pub fn updated_ns(&self) -> u64 {
        self.map.word(OFF_UPDATED).load(Ordering::Acquire)
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

fn io_err(path: &Path, op: &'static str) -> CountersError {
    CountersError::Io {
        path: path.to_path_buf(),
        op,
        source: io::Error::last_os_error(),
    }
}

fn cpath(p: &Path) -> Result<CString, CountersError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| CountersError::Io {
        path: p.to_path_buf(),
        op: "open",
        source: io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"),
    })
}

fn file_size(fd: &Fd) -> Option<usize> {
    // SAFETY: stat is plain old data; zeroed is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` writable.
    (unsafe { libc::fstat(fd.0, &mut st) } == 0).then_some(st.st_size as usize)
}

fn fstat_inode(fd: &Fd) -> Option<(u64, u64)> {
    // SAFETY: stat is plain old data; zeroed is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` writable.
    (unsafe { libc::fstat(fd.0, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mdbus-cnt-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn values_written_by_the_owner_are_read_by_a_reader() {
        let dir = scratch("rw");
        let path = dir.join("c");
        let f = CountersFile::create(&path, "owner-x", &["a", "b", "stream.md.messages"]).unwrap();
        assert_eq!(f.len(), 3);
        f.set(0, 7);
        f.add(1, 3);
        f.add(1, 4);
        f.set(9, 1); // out of range: ignored
        f.touch(123);
        let r = CountersReader::open(&path).unwrap();
        assert_eq!(r.labels(), ["a", "b", "stream.md.messages"]);
        assert_eq!(r.values(), vec![7, 7, 0]);
        assert_eq!(r.value(3), None);
        assert_eq!(r.index_of("b"), Some(1));
        assert_eq!(r.updated_ns(), 123);
        let o = r.owner();
        assert_eq!(o.name, "owner-x");
        assert_eq!(o.pid, std::process::id());
        assert!(o.start_time_ns > 0);
        f.set(2, 99);
        assert_eq!(r.value(2), Some(99), "the reader sees later stores");
        drop(f);
        assert!(!path.exists(), "an orderly owner removes its file");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_live_owner_keeps_its_file() {
        let dir = scratch("inuse");
        let path = dir.join("c");
        let _f = CountersFile::create(&path, "first", &["a"]).unwrap();
        let e = CountersFile::create(&path, "second", &["a"]).unwrap_err();
        assert!(matches!(e, CountersError::InUse { .. }), "{e}");
        assert!(e.to_string().contains("in use by live process"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Rewrites the owner pid of a file (and its checksum), as if another
    /// process had written it.
    fn forge_owner(path: &Path, pid: u32) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[OFF_PID..OFF_PID + 4].copy_from_slice(&pid.to_le_bytes());
        let sum = fnv1a(&bytes[..OFF_CHECKSUM]);
        bytes[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_file_whose_owner_exited_is_stale_and_replaced() {
        let dir = scratch("stale");
        let path = dir.join("c");
        let f = CountersFile::create(&path, "gone", &["a"]).unwrap();
        f.set(0, 5);
        let copy = dir.join("copy");
        std::fs::copy(&path, &copy).unwrap();
        drop(f);
        // pid_max is at most 2^22: this pid never runs.
        forge_owner(&copy, (1 << 22) + 17);
        let e = CountersReader::open(&copy).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "counters file {} is stale: its owner gone (pid {}) is no longer running",
                copy.display(),
                (1 << 22) + 17
            )
        );
        let r = CountersReader::open_unchecked(&copy).unwrap();
        assert_eq!(r.values(), vec![5]);
        let f2 = CountersFile::create(&copy, "new", &["x", "y"]).unwrap();
        assert_eq!(CountersReader::open(&copy).unwrap().labels(), ["x", "y"]);
        drop(f2);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bad_files_are_named() {
        let dir = scratch("bad");
        let missing = dir.join("none");
        let e = CountersReader::open(&missing).unwrap_err();
        assert!(matches!(e, CountersError::Missing { .. }));
        assert!(e.to_string().contains("does not exist"), "{e}");

        let other = dir.join("other");
        std::fs::write(&other, b"hello, this is not a counters file").unwrap();
        let e = CountersReader::open(&other).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is not an mdbus counters file (it does not start with MDBUSCNT)",
                other.display()
            )
        );

        let path = dir.join("c");
        let f = CountersFile::create(&path, "o", &["a", "b"]).unwrap();
        let copy = dir.join("truncated");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&copy, &bytes[..HEADER_BYTES + SLOT_BYTES]).unwrap();
        let e = CountersReader::open(&copy).unwrap_err();
        assert!(e.to_string().contains("is corrupt: 2 slots need"), "{e}");
        let mut flipped = bytes.clone();
        flipped[OFF_SLOTS] ^= 0x40;
        std::fs::write(&copy, &flipped).unwrap();
        let e = CountersReader::open(&copy).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        let mut v2 = bytes;
        v2[OFF_VERSION] = 2;
        std::fs::write(&copy, &v2).unwrap();
        let e = CountersReader::open(&copy).unwrap_err();
        assert!(e.to_string().contains("layout version 2"), "{e}");
        drop(f);

        let long = "x".repeat(MAX_LABEL + 1);
        let e = CountersFile::create(dir.join("l"), "o", &[&long]).unwrap_err();
        assert!(e.to_string().contains("is longer than 55 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
