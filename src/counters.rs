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
//! The file is built under a temporary name, mode 0600, and renamed into
//! place without replacing anything ([`crate::sys::file::create_published`]),
//! so a reader never sees a half-written header. A file whose owner process
//! has exited is *stale*: [`CountersReader::open`] refuses it with
//! [`CountersError::Stale`], and a new owner reclaims it. Anything else at
//! the path (another program's file, a link, another user's file, a
//! damaged counters file) is an error naming it and is never overwritten
//! or removed: mdbus deletes only files it created.
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

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::file::{self, checksum, Distrust, FileError, FileId, MapOptions, OpenError};
use crate::sys::leftovers::Format;
use crate::sys::map::{Access, Mapping};
use crate::sys::process::{process_alive, Creator};

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
    /// The path names a link, another user's file, or a file open to
    /// group/other users.
    #[error("counters file {} {reason}", path.display())]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why it is not trusted.
        reason: Distrust,
    },
    /// Something that is not a counters file of a dead owner is at the
    /// path; it is left as it is.
    #[error("counters file {}: {what}; mdbus never overwrites or removes a file it did not create: choose another counters path or remove that file yourself", path.display())]
    Occupied {
        /// The file.
        path: PathBuf,
        /// What is there.
        what: String,
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

/// `len` bytes of `map` at `offset`, for the header and labels.
fn bytes(map: &Mapping, offset: usize, len: usize) -> &[u8] {
    assert!(offset.checked_add(len).is_some_and(|end| end <= map.len()));
    // SAFETY: inside the mapping (checked above), which outlives the borrow;
    // the bytes read this way (header, labels) are written before the file
    // is published and never again.
    unsafe { std::slice::from_raw_parts(map.as_ptr().add(offset), len) }
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
    id: FileId,
}

// SAFETY: shared references only store or load through atomics (values,
// the update time); the rest of the mapping is not touched after creation.
unsafe impl Sync for CountersFile {}

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
        // Two creators racing for one path both find it free; the loser's
        // publish finds the winner's file. Look again once, so it gets the
        // same answer as a creator that came later (InUse, naming the pid).
        match Self::create_once(path.clone(), owner_name, labels) {
            Err(CountersError::Io { ref source, .. })
                if source.kind() == io::ErrorKind::AlreadyExists =>
            {
                Self::create_once(path, owner_name, labels)
            }
            other => other,
        }
    }

    /// One attempt of [`CountersFile::create`], its arguments checked.
    fn create_once(
        path: PathBuf,
        owner_name: &str,
        labels: &[&str],
    ) -> Result<CountersFile, CountersError> {
        match CountersReader::open_strict(&path) {
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
                    "reclaiming stale counters file {} of {} (pid {}), which is no longer running",
                    path.display(),
                    o.name,
                    o.pid
                );
                if old.id.is_at(&path) {
                    let _ = std::fs::remove_file(&path);
                }
            }
            Err(CountersError::Missing { .. }) => {}
            Err(e @ CountersError::Untrusted { .. }) => return Err(e),
            Err(CountersError::NotCounters { path }) => {
                return Err(CountersError::Occupied {
                    path,
                    what: "it exists and is not an mdbus counters file".into(),
                })
            }
            Err(e) => {
                return Err(CountersError::Occupied {
                    path,
                    what: format!("it cannot be read as one ({e})"),
                })
            }
        }

        let len = HEADER_BYTES + labels.len() * SLOT_BYTES;
        let me = Creator::me();
        let published =
            file::create_published::<CountersError>(&path, len, MapOptions::default(), |map| {
                let mut header = [0u8; HEADER_BYTES];
                header[0..8].copy_from_slice(&MAGIC);
                header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
                header[OFF_SLOTS..OFF_SLOTS + 4]
                    .copy_from_slice(&(labels.len() as u32).to_le_bytes());
                header[OFF_SLOT_SIZE..OFF_SLOT_SIZE + 4]
                    .copy_from_slice(&(SLOT_BYTES as u32).to_le_bytes());
                header[OFF_HEADER_SIZE..OFF_HEADER_SIZE + 4]
                    .copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
                header[OFF_PID..OFF_PID + 4].copy_from_slice(&me.pid.to_le_bytes());
                header[OFF_PROC_START..OFF_PROC_START + 8].copy_from_slice(&me.start.to_le_bytes());
                header[OFF_START_NS..OFF_START_NS + 8]
                    .copy_from_slice(&crate::clock::now_ns().to_le_bytes());
                let sum = checksum(&header[..OFF_CHECKSUM]);
                header[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&sum.to_le_bytes());
                header[OFF_NAME..OFF_NAME + owner_name.len()]
                    .copy_from_slice(owner_name.as_bytes());
                // SAFETY: the mapping is `len >= HEADER_BYTES` long and
                // private to us until it is published.
                unsafe {
                    std::ptr::copy_nonoverlapping(header.as_ptr(), map.as_ptr(), HEADER_BYTES)
                };
                for (i, label) in labels.iter().enumerate() {
                    let mut slot = [0u8; SLOT_BYTES];
                    slot[8] = label.len() as u8;
                    slot[9..9 + label.len()].copy_from_slice(label.as_bytes());
                    // SAFETY: slot i lies inside the mapping (len counts
                    // every slot), still private to us.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            slot.as_ptr(),
                            map.as_ptr().add(HEADER_BYTES + i * SLOT_BYTES),
                            SLOT_BYTES,
                        )
                    };
                }
                Ok(())
            })?;
        Ok(CountersFile {
            path,
            map: published.mapping,
            slots: labels.len(),
            id: published.id,
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
        (i < self.slots).then(|| self.map.atomic_u64(HEADER_BYTES + i * SLOT_BYTES))
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
        self.map
            .atomic_u64(OFF_UPDATED)
            .store(now_ns, Ordering::Release);
    }
}

impl Drop for CountersFile {
    fn drop(&mut self) {
        // An orderly owner removes its file (if it is still this one), so
        // only a crashed owner leaves a stale file behind.
        if self.id.is_at(&self.path) {
            let _ = std::fs::remove_file(&self.path);
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
    id: FileId,
}

// SAFETY: shared references only load values through atomics; the labels
// and header were copied out at open.
unsafe impl Sync for CountersReader {}

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
        // Never through a link; readers need not own the file (a monitor
        // may run as another user the owner granted access).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => CountersError::Missing { path: path.clone() },
                _ if e.raw_os_error() == Some(libc::ELOOP) => CountersError::Untrusted {
                    path: path.clone(),
                    reason: Distrust::Symlink,
                },
                _ => CountersError::Io {
                    path: path.clone(),
                    op: "open",
                    source: e,
                },
            })?;
        let meta = file.metadata().map_err(|e| CountersError::Io {
            path: path.clone(),
            op: "stat",
            source: e,
        })?;
        CountersReader::parse(path, &file, FileId::of(&meta), meta.len())
    }

    /// Opens the file as its would-be owner: only a private file of this
    /// user ([`file::open_private`]).
    fn open_strict(path: &Path) -> Result<CountersReader, CountersError> {
        match file::open_private(path, Access::ReadOnly) {
            Ok((f, id, size)) => CountersReader::parse(path.to_path_buf(), &f, id, size),
            Err(OpenError::Io(e)) if e.source.kind() == io::ErrorKind::NotFound => {
                Err(CountersError::Missing {
                    path: path.to_path_buf(),
                })
            }
            Err(OpenError::Io(e)) => Err(e.into()),
            Err(OpenError::Distrusted { path, reason }) => {
                Err(CountersError::Untrusted { path, reason })
            }
        }
    }

    /// Reads and checks the header with `pread`, then maps only the bytes
    /// it states (never a size the file alone chose).
    fn parse(
        path: PathBuf,
        file: &File,
        id: FileId,
        size: u64,
    ) -> Result<CountersReader, CountersError> {
        let corrupt = |what: String| CountersError::Corrupt {
            path: path.clone(),
            what,
        };
        let mut header = [0u8; HEADER_BYTES];
        let n = read_prefix(file, &mut header).map_err(|e| CountersError::Io {
            path: path.clone(),
            op: "read",
            source: e,
        })?;
        if n < 8 || header[..8] != MAGIC {
            return Err(CountersError::NotCounters { path });
        }
        if n < HEADER_BYTES {
            return Err(corrupt(format!(
                "truncated: {size} bytes, the header alone needs {HEADER_BYTES}"
            )));
        }
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
        if checksum(&header[..OFF_CHECKSUM]) != u64_at(OFF_CHECKSUM) {
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
        if slots > MAX_SLOTS || size < needed as u64 {
            return Err(corrupt(format!(
                "{slots} slots need {needed} bytes, the file has {size}"
            )));
        }
        let map = Mapping::shared(file.as_fd(), needed, Access::ReadOnly, false).map_err(|e| {
            CountersError::Io {
                path: path.clone(),
                op: "mmap",
                source: e,
            }
        })?;
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
            let slot = bytes(&map, HEADER_BYTES + i * SLOT_BYTES, SLOT_BYTES);
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
            id,
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
                .atomic_u64(HEADER_BYTES + i * SLOT_BYTES)
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
        self.map.atomic_u64(OFF_UPDATED).load(Ordering::Acquire)
    }
}

impl From<FileError> for CountersError {
    fn from(e: FileError) -> CountersError {
        CountersError::Io {
            path: e.path,
            op: e.op,
            source: e.source,
        }
    }
}

/// Reads up to `buf.len()` bytes from the start of `file`; the count read.
fn read_prefix(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// How [`crate::sys::leftovers`] recognises a counters file and reads its
/// owner.
pub const FORMAT: Format = Format {
    what: "counters file",
    magic: MAGIC,
    creator: |head| {
        let h = head.get(..OFF_CHECKSUM + 8)?;
        let version = u32::from_le_bytes(h[OFF_VERSION..OFF_VERSION + 4].try_into().ok()?);
        let sum = u64::from_le_bytes(h[OFF_CHECKSUM..OFF_CHECKSUM + 8].try_into().ok()?);
        (h[..8] == MAGIC && version == VERSION && checksum(&h[..OFF_CHECKSUM]) == sum).then(|| {
            Creator {
                pid: u32::from_le_bytes(h[OFF_PID..OFF_PID + 4].try_into().expect("4 bytes")),
                start: u64::from_le_bytes(
                    h[OFF_PROC_START..OFF_PROC_START + 8]
                        .try_into()
                        .expect("8 bytes"),
                ),
            }
        })
    },
};

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
        let sum = checksum(&bytes[..OFF_CHECKSUM]);
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
