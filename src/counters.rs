//! A counters file: named `u64` counters in shared memory, written by one
//! process and read lock-free by any other while it runs (in the spirit of
//! Aeron's CnC file and AeronStat).
//!
//! The owner creates the file with a fixed list of labels, then stores
//! values with single atomic stores; a reader (`mdbus-stat`) maps the same
//! file read-only and loads them. Nobody takes a lock or makes a system
//! call per update, so the owner can update counters from a hot path.
//!
//! Layout (little-endian, offsets in bytes; version 2):
//!
//! | offset | what |
//! | --- | --- |
//! | 0 | magic `MDBUSCNT` |
//! | 8 | layout version (u32), slot capacity (u32) |
//! | 16 | slot size (u32, 128), header size (u32, 256) |
//! | 24 | owner pid (u32), error-log entries (u32) |
//! | 32 | owner process start time, clock ticks since boot (u64) |
//! | 40 | owner start time, ns since the Unix epoch (u64) |
//! | 48 | FNV-1a checksum of bytes 0..48 (u64) |
//! | 64 | owner name, 64 bytes, NUL-padded UTF-8 |
//! | 128 | last update, ns since the Unix epoch (atomic u64, the owner's [`CountersFile::touch`]) |
//! | 136 | slots in use (atomic u64): the labels of slots below it are final |
//! | 144 | error-log entries in use (atomic u64) |
//! | 152 | distinct errors not logged because the log was full (atomic u64) |
//! | 256 + 128·i | slot i: value (atomic u64), kind (u8: 0 counter, 1 gauge), label length (u8), label (up to 118 bytes of UTF-8) |
//! | 256 + 128·capacity + 256·j | error-log entry j (see [`errorlog`]) |
//!
//! Slots are handed out while the owner runs ([`CountersFile::allocate`],
//! when a stream or session opens): the owner writes the labels of the new
//! slots, then publishes them by raising the in-use count (release); a
//! reader loads the count (acquire) and reads labels only below it, so a
//! label is never read while it is written and never changes afterwards.
//! Each slot is 128 bytes, two cache lines, so counters of different
//! threads never share a line.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::sys::file::{self, checksum, Distrust, FileError, FileId, MapOptions, OpenError};
use crate::sys::leftovers::Format;
use crate::sys::map::{Access, Mapping};
use crate::sys::process::{process_alive, Creator};

pub mod errorlog;
pub mod registry;

/// First eight bytes of every counters file.
pub const MAGIC: [u8; 8] = *b"MDBUSCNT";
/// Layout version written and read by this build.
pub const VERSION: u32 = 2;
/// Bytes of the header, before the first slot.
pub const HEADER_BYTES: usize = 256;
/// Bytes per slot.
pub const SLOT_BYTES: usize = 128;
/// Longest label, in bytes.
pub const MAX_LABEL: usize = SLOT_BYTES - 10;
/// Longest owner name, in bytes.
pub const MAX_OWNER_NAME: usize = 64;
/// Most slots a file may have.
pub const MAX_SLOTS: usize = 1 << 16;

const OFF_VERSION: usize = 8;
const OFF_SLOTS: usize = 12;
const OFF_SLOT_SIZE: usize = 16;
const OFF_HEADER_SIZE: usize = 20;
const OFF_PID: usize = 24;
const OFF_ERROR_ENTRIES: usize = 28;
const OFF_PROC_START: usize = 32;
const OFF_START_NS: usize = 40;
const OFF_CHECKSUM: usize = 48;
const OFF_NAME: usize = 64;
const OFF_UPDATED: usize = 128;
const OFF_USED: usize = 136;
const OFF_ERRORS_USED: usize = 144;
const OFF_ERRORS_LOST: usize = 152;
/// Slot offsets: the kind byte and the label length byte.
const SLOT_KIND: usize = 8;
const SLOT_LABEL_LEN: usize = 9;
const SLOT_LABEL: usize = 10;

/// What a slot holds, which decides how a reader shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A count that only grows (messages, bytes, drops): readers show its
    /// rate, and OpenMetrics calls it a counter (`_total`).
    Counter,
    /// A level that goes up and down or a latest value (last sequence,
    /// latency percentile, open or not): shown as it is, never as a rate.
    Gauge,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Counter => 0,
            Kind::Gauge => 1,
        }
    }

    fn from_byte(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Counter),
            1 => Some(Kind::Gauge),
            _ => None,
        }
    }

    /// The kind [`CountersFile::create`] gives a label it is not told:
    /// a gauge when its last dot-separated part ends in `_ns` (latencies),
    /// starts with `last_` or is `open`; a counter otherwise.
    pub fn infer(label: &str) -> Kind {
        let last = label.rsplit('.').next().unwrap_or(label);
        if last.ends_with("_ns") || last.starts_with("last_") || last == "open" {
            Kind::Gauge
        } else {
            Kind::Counter
        }
    }
}

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
    capacity: usize,
    error_entries: usize,
    /// Serialises [`CountersFile::allocate`] and the error log's writers
    /// (open time and error paths, never per message).
    writers: Mutex<()>,
    /// Leave the file behind on drop (it holds errors worth reading).
    keep: AtomicBool,
    id: FileId,
}

// SAFETY: shared references only store or load through atomics (values,
// counts, the error log's words); labels are written under `writers` into
// slots no reader looks at before they are published.
unsafe impl Sync for CountersFile {}

impl std::fmt::Debug for CountersFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountersFile")
            .field("path", &self.path)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Checks a label: at most [`MAX_LABEL`] bytes.
fn check_label(path: &Path, label: &str) -> Result<(), CountersError> {
    if label.len() > MAX_LABEL {
        return Err(CountersError::BadLabel {
            path: path.to_path_buf(),
            what: format!("label `{label}` is longer than {MAX_LABEL} bytes"),
        });
    }
    Ok(())
}

/// Writes slot `i`'s kind and label.
///
/// # Safety
/// No reader may read slot `i`'s label yet (it is not published), and no
/// other writer writes it.
unsafe fn write_label(map: &Mapping, i: usize, label: &str, kind: Kind) {
    let mut slot = [0u8; SLOT_BYTES - 8];
    slot[SLOT_KIND - 8] = kind.byte();
    slot[SLOT_LABEL_LEN - 8] = label.len() as u8;
    slot[SLOT_LABEL - 8..SLOT_LABEL - 8 + label.len()].copy_from_slice(label.as_bytes());
    let at = HEADER_BYTES + i * SLOT_BYTES + 8;
    assert!(at + slot.len() <= map.len());
    // SAFETY: inside the mapping (checked above); the caller promises no
    // one else touches these bytes now. The value word (first 8 bytes of
    // the slot) is left alone.
    unsafe { std::ptr::copy_nonoverlapping(slot.as_ptr(), map.as_ptr().add(at), slot.len()) };
}

impl CountersFile {
    /// Creates the file at `path` with one zeroed slot per label (kinds by
    /// [`Kind::infer`]), replacing a stale file left by an owner that
    /// exited; fails with [`CountersError::InUse`] when a live process owns
    /// it.
    pub fn create(
        path: impl AsRef<Path>,
        owner_name: &str,
        labels: &[&str],
    ) -> Result<CountersFile, CountersError> {
        let f = CountersFile::with_capacity(path, owner_name, labels.len(), 0)?;
        let defs: Vec<(&str, Kind)> = labels.iter().map(|l| (*l, Kind::infer(l))).collect();
        f.allocate(&defs)?;
        Ok(f)
    }

    /// Creates the file at `path` with room for `capacity` slots, none in
    /// use yet ([`CountersFile::allocate`] hands them out), and an error
    /// log of `error_entries` distinct errors.
    pub fn with_capacity(
        path: impl AsRef<Path>,
        owner_name: &str,
        capacity: usize,
        error_entries: usize,
    ) -> Result<CountersFile, CountersError> {
        let path = path.as_ref().to_path_buf();
        if owner_name.len() > MAX_OWNER_NAME {
            return Err(CountersError::BadLabel {
                path,
                what: format!("owner name `{owner_name}` is longer than {MAX_OWNER_NAME} bytes"),
            });
        }
        if capacity > MAX_SLOTS || error_entries > errorlog::MAX_ENTRIES {
            return Err(CountersError::BadLabel {
                path,
                what: format!(
                    "{capacity} counters and {error_entries} error entries, at most {MAX_SLOTS} and {} allowed",
                    errorlog::MAX_ENTRIES
                ),
            });
        }
        // Two creators racing for one path both find it free; the loser's
        // publish finds the winner's file. Look again once, so it gets the
        // same answer as a creator that came later (InUse, naming the pid).
        match Self::create_once(path.clone(), owner_name, capacity, error_entries) {
            Err(CountersError::Io { ref source, .. })
                if source.kind() == io::ErrorKind::AlreadyExists =>
            {
                Self::create_once(path, owner_name, capacity, error_entries)
            }
            other => other,
        }
    }

    /// One attempt of [`CountersFile::with_capacity`], its arguments checked.
    fn create_once(
        path: PathBuf,
        owner_name: &str,
        capacity: usize,
        error_entries: usize,
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

        let len = file_len(capacity, error_entries);
        let me = Creator::me();
        let published =
            file::create_published::<CountersError>(&path, len, MapOptions::default(), |map| {
                let mut header = [0u8; HEADER_BYTES];
                header[0..8].copy_from_slice(&MAGIC);
                header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
                header[OFF_SLOTS..OFF_SLOTS + 4].copy_from_slice(&(capacity as u32).to_le_bytes());
                header[OFF_SLOT_SIZE..OFF_SLOT_SIZE + 4]
                    .copy_from_slice(&(SLOT_BYTES as u32).to_le_bytes());
                header[OFF_HEADER_SIZE..OFF_HEADER_SIZE + 4]
                    .copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
                header[OFF_PID..OFF_PID + 4].copy_from_slice(&me.pid.to_le_bytes());
                header[OFF_ERROR_ENTRIES..OFF_ERROR_ENTRIES + 4]
                    .copy_from_slice(&(error_entries as u32).to_le_bytes());
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
                Ok(())
            })?;
        Ok(CountersFile {
            path,
            map: published.mapping,
            capacity,
            error_entries,
            writers: Mutex::new(()),
            keep: AtomicBool::new(false),
            id: published.id,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots in use.
    pub fn len(&self) -> usize {
        self.used()
    }

    /// True when no slot is in use.
    pub fn is_empty(&self) -> bool {
        self.used() == 0
    }

    /// Slots the file has room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn used(&self) -> usize {
        (self.map.atomic_u64(OFF_USED).load(Ordering::Acquire) as usize).min(self.capacity)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded data is the file, consistent after any panic.
        self.writers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands out one slot per definition, consecutive, labelled and zeroed
    /// counts as they were; returns the first slot's index. Takes a lock:
    /// call it when a stream or session opens, not per message.
    pub fn allocate(&self, defs: &[(&str, Kind)]) -> Result<usize, CountersError> {
        for (label, _) in defs {
            check_label(&self.path, label)?;
        }
        let _g = self.lock();
        let base = self.used();
        if base + defs.len() > self.capacity {
            return Err(CountersError::BadLabel {
                path: self.path.clone(),
                what: format!(
                    "{} more counters do not fit: {base} of {} slots are in use (raise counters.slots)",
                    defs.len(),
                    self.capacity
                ),
            });
        }
        for (k, (label, kind)) in defs.iter().enumerate() {
            // SAFETY: slots at and above `used` are not published, and
            // `writers` is held: nobody reads or writes their labels.
            unsafe { write_label(&self.map, base + k, label, *kind) };
        }
        // Release: a reader that sees the new count sees the labels.
        self.map
            .atomic_u64(OFF_USED)
            .store((base + defs.len()) as u64, Ordering::Release);
        Ok(base)
    }

    #[inline]
    fn slot(&self, i: usize) -> Option<&AtomicU64> {
        (i < self.capacity).then(|| self.map.atomic_u64(HEADER_BYTES + i * SLOT_BYTES))
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

    /// Stores `value` in slot `i` with no ordering: the cheapest update,
    /// for a slot only its owner's thread writes (a plain `mov` on x86).
    #[inline]
    pub fn set_relaxed(&self, i: usize, value: u64) {
        if let Some(w) = self.slot(i) {
            w.store(value, Ordering::Relaxed);
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

    /// Records `text` in the error log at `now_ns`: a new entry the first
    /// time, otherwise its count and last time. Returns false when the log
    /// has no room for another distinct error (it is counted as lost).
    /// Takes a lock and may allocate nothing but is meant for error paths.
    pub fn record_error(&self, text: &str, now_ns: u64) -> bool {
        let _g = self.lock();
        let log = errorlog::Log::new(&self.map, self.error_region(), self.error_entries);
        let used = self.map.atomic_u64(OFF_ERRORS_USED);
        let ok = log.record(used, text, now_ns);
        if !ok {
            self.map
                .atomic_u64(OFF_ERRORS_LOST)
                .fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Keep the file when the owner drops it (default: removed), so that
    /// what it recorded can be read after the process ended.
    pub fn keep_on_drop(&self, keep: bool) {
        self.keep.store(keep, Ordering::Relaxed);
    }

    fn error_region(&self) -> usize {
        HEADER_BYTES + self.capacity * SLOT_BYTES
    }
}

/// Bytes of a file with `capacity` slots and `error_entries` log entries.
fn file_len(capacity: usize, error_entries: usize) -> usize {
    HEADER_BYTES + capacity * SLOT_BYTES + error_entries * errorlog::ENTRY_BYTES
}

impl Drop for CountersFile {
    fn drop(&mut self) {
        // An orderly owner removes its file (if it is still this one), so
        // only a crashed owner, or one that asked to keep it, leaves one
        // behind.
        if !self.keep.load(Ordering::Relaxed) && self.id.is_at(&self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A reader's side: maps the file read-only and loads values.
pub struct CountersReader {
    path: PathBuf,
    map: Mapping,
    capacity: usize,
    error_entries: usize,
    owner: Owner,
    labels: Vec<String>,
    kinds: Vec<Kind>,
    id: FileId,
}

// SAFETY: shared references only load values through atomics; labels are
// copied out (by `&mut self` methods) only below the published count.
unsafe impl Sync for CountersReader {}

impl std::fmt::Debug for CountersReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountersReader")
            .field("path", &self.path)
            .field("owner", &self.owner)
            .field("slots", &self.labels.len())
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
        let capacity = u32_at(OFF_SLOTS) as usize;
        let error_entries = u32_at(OFF_ERROR_ENTRIES) as usize;
        if capacity > MAX_SLOTS || error_entries > errorlog::MAX_ENTRIES {
            return Err(corrupt(format!(
                "{capacity} slots and {error_entries} error entries, at most {MAX_SLOTS} and {} allowed",
                errorlog::MAX_ENTRIES
            )));
        }
        let needed = file_len(capacity, error_entries);
        if size < needed as u64 {
            return Err(corrupt(format!(
                "{capacity} slots and {error_entries} error entries need {needed} bytes, the file has {size}"
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
        let mut r = CountersReader {
            path,
            map,
            capacity,
            error_entries,
            owner,
            labels: Vec::new(),
            kinds: Vec::new(),
            id,
        };
        r.refresh()?;
        Ok(r)
    }

    /// Reads the labels of slots the owner allocated since the last call
    /// (streams and sessions opened meanwhile); true when there were any.
    pub fn refresh(&mut self) -> Result<bool, CountersError> {
        let used = self.map.atomic_u64(OFF_USED).load(Ordering::Acquire) as usize;
        if used > self.capacity {
            return Err(CountersError::Corrupt {
                path: self.path.clone(),
                what: format!("{used} slots in use, the file has {}", self.capacity),
            });
        }
        let before = self.labels.len();
        for i in before..used {
            let slot = bytes(&self.map, HEADER_BYTES + i * SLOT_BYTES, SLOT_BYTES);
            let n = usize::from(slot[SLOT_LABEL_LEN]);
            let kind = Kind::from_byte(slot[SLOT_KIND]);
            let (Some(kind), true) = (kind, n <= MAX_LABEL) else {
                return Err(CountersError::Corrupt {
                    path: self.path.clone(),
                    what: format!("slot {i} has kind {} and a {n}-byte label", slot[SLOT_KIND]),
                });
            };
            self.labels
                .push(String::from_utf8_lossy(&slot[SLOT_LABEL..SLOT_LABEL + n]).into_owned());
            self.kinds.push(kind);
        }
        Ok(used > before)
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

    /// Number of counters (as of the last [`CountersReader::refresh`]).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when the file has no counters.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The counters' labels, in slot order.
    pub fn labels(&self) -> Vec<String> {
        self.labels.clone()
    }

    /// The label of slot `i`.
    pub fn label(&self, i: usize) -> Option<&str> {
        self.labels.get(i).map(String::as_str)
    }

    /// The kind of slot `i`.
    pub fn kind(&self, i: usize) -> Option<Kind> {
        self.kinds.get(i).copied()
    }

    /// Slot index of `label`.
    pub fn index_of(&self, label: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == label)
    }

    /// The value of slot `i`.
    pub fn value(&self, i: usize) -> Option<u64> {
        (i < self.labels.len()).then(|| {
            self.map
                .atomic_u64(HEADER_BYTES + i * SLOT_BYTES)
                .load(Ordering::Acquire)
        })
    }

    /// Every value, in slot order.
    pub fn values(&self) -> Vec<u64> {
        (0..self.labels.len())
            .filter_map(|i| self.value(i))
            .collect()
    }

    /// When the owner last refreshed the file (ns since the Unix epoch; 0
    /// before its first refresh).
    pub fn updated_ns(&self) -> u64 {
        self.map.atomic_u64(OFF_UPDATED).load(Ordering::Acquire)
    }

    /// The error log: each distinct error with its first and last time and
    /// count, in the order they first happened.
    pub fn errors(&self) -> Vec<errorlog::Entry> {
        let used = self.map.atomic_u64(OFF_ERRORS_USED).load(Ordering::Acquire) as usize;
        errorlog::Log::new(
            &self.map,
            HEADER_BYTES + self.capacity * SLOT_BYTES,
            self.error_entries,
        )
        .read(used)
    }

    /// Distinct errors not logged because the log was full.
    pub fn errors_lost(&self) -> u64 {
        self.map.atomic_u64(OFF_ERRORS_LOST).load(Ordering::Relaxed)
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
        assert!(
            e.to_string()
                .contains("is corrupt: 2 slots and 0 error entries need"),
            "{e}"
        );
        let mut flipped = bytes.clone();
        flipped[OFF_SLOTS] ^= 0x40;
        std::fs::write(&copy, &flipped).unwrap();
        let e = CountersReader::open(&copy).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        let mut v2 = bytes;
        v2[OFF_VERSION] = 3;
        std::fs::write(&copy, &v2).unwrap();
        let e = CountersReader::open(&copy).unwrap_err();
        assert!(e.to_string().contains("layout version 3"), "{e}");
        drop(f);

        let long = "x".repeat(MAX_LABEL + 1);
        let e = CountersFile::create(dir.join("l"), "o", &[&long]).unwrap_err();
        assert!(e.to_string().contains("is longer than 118 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
