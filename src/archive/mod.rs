//! The archive: streams recorded to disk, and any range of them replayed,
//! then joined to the live stream (docs/ARCHIVE.md).
//!
//! - [`ArchiveWriter`] appends records to preallocated segment files, each
//!   record checksummed (CRC32C), with a sparse sequence index per segment;
//!   it rotates segments by size, deletes old ones by age and total bytes,
//!   syncs by policy, and on open finds the last valid record and cuts
//!   the torn tail a crash left.
//! - [`ArchiveReader`] reads an archive directory read-only and trusts no
//!   byte of it: bad data is a typed error or a counted stop.
//! - [`Recorder`] runs a writer on its own thread, fed through a lock-free
//!   hand-off by another that polls an ordinary subscriber of the stream,
//!   so it works on every transport and a slow disk never stalls the
//!   publisher or the receiving.
//! - [`ReplaySubscriber`] delivers a stream from any sequence: the
//!   archived range first, then the live stream from exactly the next
//!   sequence, read from the archive's directory or from a
//!   [`ReplayService`] over a session.

mod format;
mod handoff;
mod reader;
mod recorder;
mod replay;
mod service;
mod writer;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::duration_str;
pub use format::{FLAG_GAP, INDEX_EVERY, MAGIC};
pub use reader::{read_all, ArchiveReader, Item, ReaderStats};
pub use recorder::{Recorder, RecorderStats};
pub use replay::{subscribe_from, ReplayStats, ReplaySubscriber};
pub use service::{RemoteSource, ReplayService, ReplaySource, ServiceStats, REPLAY_OVERHEAD};
pub use writer::{ArchiveWriter, WriterStats};

/// When the writer makes what it wrote durable (`fdatasync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncPolicy {
    /// Never: the page cache writes back when it will (a killed recorder
    /// loses nothing it flushed; a host crash loses what was not written
    /// back).
    #[default]
    None,
    /// At most this long after a record is written.
    Interval(#[serde(with = "duration_str")] Duration),
    /// After every N records.
    Every(u64),
}

/// `[archive]` (every listed stream, each in `dir/NAME`) or
/// `[streams.NAME.archive]` (that stream, in `dir`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveConfig {
    /// Directory of the segment files (absolute).
    pub dir: PathBuf,
    /// Size each segment file is preallocated to; a full one is closed
    /// (cut to its used size) and the next begun.
    pub segment_bytes: u64,
    /// Closed segments older than this are deleted; "0s": kept by age.
    #[serde(with = "duration_str")]
    pub retention_age: Duration,
    /// The oldest closed segments are deleted while all of them take more
    /// than this; 0: no limit.
    pub retention_bytes: u64,
    /// When written records are made durable.
    pub sync: SyncPolicy,
    /// Session name of the stream's replay service: a subscriber with
    /// `late_join = "archive"` replays through it instead of reading
    /// `dir`, and [`ReplayService::start`] accepts on it; empty: none.
    pub replay_service: String,
    /// Messages a second the service sends each requester; 0: no limit.
    pub replay_rate_limit: u64,
    /// Requesters the service serves at once; more are refused.
    pub replay_max_requesters: usize,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            dir: PathBuf::new(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            retention_age: Duration::ZERO,
            retention_bytes: 0,
            sync: SyncPolicy::None,
            replay_service: String::new(),
            replay_rate_limit: 0,
            replay_max_requesters: DEFAULT_MAX_REQUESTERS,
        }
    }
}

/// Default `replay_max_requesters`.
pub const DEFAULT_MAX_REQUESTERS: usize = 16;
/// Allowed `replay_max_requesters`: each is a thread of the service.
pub const MAX_REQUESTERS_RANGE: std::ops::RangeInclusive<usize> = 1..=1024;

/// Default `segment_bytes`: 256 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 256 << 20;
/// Allowed `segment_bytes`: 64 KiB to 64 GiB.
pub const SEGMENT_BYTES_RANGE: std::ops::RangeInclusive<u64> = 64 << 10..=64 << 30;

impl ArchiveConfig {
    /// Checks the values for a stream whose messages are at most
    /// `max_message` bytes; the error is (key under `prefix`, message).
    pub fn check(&self, prefix: &str, max_message: usize) -> Result<(), (String, String)> {
        let key = |k: &str| format!("{prefix}.{k}");
        if !self.replay_service.is_empty() {
            if let Err(e) = crate::names::check(&self.replay_service) {
                return Err((key("replay_service"), e.to_string()));
            }
        }
        if !MAX_REQUESTERS_RANGE.contains(&self.replay_max_requesters) {
            return Err((
                key("replay_max_requesters"),
                format!(
                    "{} is out of range: allowed {} to {}",
                    self.replay_max_requesters,
                    MAX_REQUESTERS_RANGE.start(),
                    MAX_REQUESTERS_RANGE.end()
                ),
            ));
        }
        if self.dir.as_os_str().is_empty() && !self.replay_service.is_empty() {
            // A subscriber that replays through the service needs no
            // directory; the service checks for one when it starts.
            return Ok(());
        }
        if self.dir.as_os_str().is_empty() {
            return Err((key("dir"), "must be set: the archive's directory".into()));
        }
        if !self.dir.is_absolute() {
            return Err((
                key("dir"),
                format!("{} is not an absolute path", self.dir.display()),
            ));
        }
        if !SEGMENT_BYTES_RANGE.contains(&self.segment_bytes) {
            return Err((
                key("segment_bytes"),
                format!(
                    "{} is out of range: allowed {} to {} bytes",
                    self.segment_bytes,
                    SEGMENT_BYTES_RANGE.start(),
                    SEGMENT_BYTES_RANGE.end()
                ),
            ));
        }
        let need = (format::SEGMENT_HEADER + 2 * format::record_size(max_message)) as u64;
        if self.segment_bytes < need {
            return Err((
                key("segment_bytes"),
                format!(
                    "{} bytes cannot hold two {max_message}-byte messages (max_message): at least {need}",
                    self.segment_bytes
                ),
            ));
        }
        if self.retention_bytes != 0 && self.retention_bytes < 2 * self.segment_bytes {
            return Err((
                key("retention_bytes"),
                format!(
                    "{} is less than two segments ({} bytes): 0 for no limit, or at least that",
                    self.retention_bytes,
                    2 * self.segment_bytes
                ),
            ));
        }
        match self.sync {
            SyncPolicy::Every(0) => Err((
                key("sync"),
                "every = 0 is not allowed: at least 1 record".into(),
            )),
            SyncPolicy::Interval(d) if d.is_zero() => Err((
                key("sync"),
                "interval = \"0s\" is not allowed: use every = 1 to sync each record".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The configuration of stream `name` under a bus-level `[archive]`:
    /// the same, in `dir/NAME`.
    pub fn for_stream(&self, name: &str) -> ArchiveConfig {
        ArchiveConfig {
            dir: self.dir.join(name),
            ..self.clone()
        }
    }
}

/// Everything archive operations fail with; each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// An operating-system call failed.
    #[error("archive: {op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes of a file are not what the format allows.
    #[error("archive: {} at byte {offset}: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The directory is not an archive, or holds nothing.
    #[error("archive: {}: {reason}", path.display())]
    NotAnArchive {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A record offered to the writer out of order.
    #[error("archive {}: sequence {seq} offered after {next} was expected; records are appended in order", dir.display())]
    OutOfOrder {
        /// The archive.
        dir: PathBuf,
        /// The sequence offered.
        seq: u64,
        /// The one expected.
        next: u64,
    },
    /// A replay service failed, refused, or sent what the protocol does
    /// not allow.
    #[error("archive replay service `{service}`: {reason}")]
    Remote {
        /// The service's session name.
        service: String,
        /// Why.
        reason: String,
    },
    /// A record too large for the segment size.
    #[error("archive {}: a {len}-byte record does not fit a {segment_bytes}-byte segment", dir.display())]
    TooLarge {
        /// The archive.
        dir: PathBuf,
        /// The payload length.
        len: usize,
        /// The configured segment size.
        segment_bytes: u64,
    },
}

impl ArchiveError {
    pub(crate) fn io<'a>(
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> Self + 'a {
        move |source| ArchiveError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<ArchiveError> for crate::Error {
    fn from(e: ArchiveError) -> Self {
        let (op, target) = match &e {
            ArchiveError::Io { op, path, .. } => (*op, path.display().to_string()),
            _ => ("read", "archive".to_string()),
        };
        crate::Error::Io {
            op,
            target,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        }
    }
}

/// The archive configuration of stream `name` of `bus`; an error naming
/// the key when there is none (`what` says what it was wanted for).
fn configured(bus: &crate::Bus, name: &str, what: &str) -> crate::Result<ArchiveConfig> {
    bus.config().archive_for(name).ok_or_else(|| {
        crate::Error::Config(crate::error::ConfigError::new(
            "<configuration>",
            format!("streams.{name}.archive"),
            format!("is not set, nor is [archive]: there is no archive {what}"),
        ))
    })
}

/// Whether a recorded message is a publisher's notice of upstream loss
/// (`Publisher::publish_source_gap`), which a subscriber receives as
/// [`Event::SourceGap`](crate::Event::SourceGap) rather than as a message.
pub fn is_source_gap_notice(m: &crate::Message<'_>) -> bool {
    m.flags & crate::wire::FLAG_SOURCE_GAP != 0
}

/// Nanoseconds since the Unix epoch.
fn now_ns() -> u64 {
    crate::clock::now_ns()
}
