//! Errors of the bus, each carrying what a person needs to act on it.
//!
//! `Display` is a sentence that names the object (file, segment, stream,
//! session, device) and what went wrong; the variants keep the same facts as
//! fields for programs that branch on them.

use std::io;
use std::path::PathBuf;

/// Result type of the bus.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the bus can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration file or value is wrong.
    #[error("{0}")]
    Config(#[from] ConfigError),

    /// A shared-memory segment could not be created, opened or trusted.
    #[error("shared-memory segment {path}: {problem}")]
    Segment {
        /// The segment's file.
        path: PathBuf,
        /// What is wrong with it.
        problem: SegmentProblem,
    },

    /// An operating-system call failed.
    #[error("{op} {target}: {source}")]
    Io {
        /// What was being done ("open", "mmap", "bind"...).
        op: &'static str,
        /// What it was done to (a path, an address, a device).
        target: String,
        /// The error the system returned (with its errno).
        #[source]
        source: io::Error,
    },

    /// A message does not fit the channel's fixed maximum.
    #[error("a {len}-byte message is larger than the {max}-byte maximum of {channel}; raise max_message in its configuration")]
    MessageTooLarge {
        /// The offered length.
        len: usize,
        /// The channel's maximum.
        max: usize,
        /// The channel, as "stream `md`" or "session `orders`".
        channel: String,
    },

    /// The other side of a session went away without closing.
    #[error("{channel}: the peer (pid {pid}) has died")]
    PeerDied {
        /// The channel.
        channel: String,
        /// The peer's process id, when known.
        pid: u32,
    },

    /// The connection to a network peer broke.
    #[error("{channel}: lost the peer at {peer}: {reason}")]
    PeerLost {
        /// The channel.
        channel: String,
        /// The peer's address.
        peer: String,
        /// What happened.
        reason: String,
    },

    /// No peer answered at the configured address.
    #[error("{channel}: no peer at {address}: {reason}")]
    NoPeer {
        /// The channel.
        channel: String,
        /// The address tried.
        address: String,
        /// What happened.
        reason: String,
    },

    /// A peer broke the protocol (bad handshake, impossible frame).
    #[error("{channel}: protocol error from {peer}: {reason}")]
    Protocol {
        /// The channel.
        channel: String,
        /// The peer's address.
        peer: String,
        /// What was wrong.
        reason: String,
    },

    /// A required setting is missing for the chosen transport.
    #[error("{channel}: {key} must be set for transport {transport}")]
    Missing {
        /// The channel.
        channel: String,
        /// The configuration key, as `streams.md.group`.
        key: String,
        /// The transport that needs it.
        transport: &'static str,
    },

    /// The other side of a session closed it in an orderly way.
    #[error("{channel}: the peer closed the session")]
    PeerClosed {
        /// The channel.
        channel: String,
    },

    /// Waiting for a peer or a resource took longer than allowed.
    #[error("{channel}: {what} did not happen within {waited_ms} ms")]
    Timeout {
        /// The channel.
        channel: String,
        /// What was waited for ("a peer to connect").
        what: &'static str,
        /// How long was waited.
        waited_ms: u64,
    },

    /// The channel already has an owner that is still alive.
    #[error("{channel} is already owned by live process {pid}; stop it or choose another name")]
    InUse {
        /// The channel.
        channel: String,
        /// The owner's process id.
        pid: u32,
    },

    /// No publisher or acceptor has created the channel yet.
    #[error("{channel} does not exist yet: start its publisher (or acceptor) first, or raise attach_timeout")]
    NotFound {
        /// The channel.
        channel: String,
    },

    /// The requested transport cannot be used here.
    #[error("transport {transport} is not available: {reason}")]
    TransportUnavailable {
        /// The transport that was asked for.
        transport: &'static str,
        /// Why it cannot be used, and what was looked for.
        reason: String,
    },

    /// A name is not usable as a channel name.
    #[error("`{name}` is not a valid channel name: use 1 to 64 characters from A-Z a-z 0-9 . _ -")]
    BadName {
        /// The rejected name.
        name: String,
    },

    /// An RDMA verbs or rdma_cm call failed, or a work completion reported
    /// an error: "ibv_modify_qp to RTR on rxe0 (QP 0x11): Invalid argument
    /// (errno 22)".
    #[error("{op}{}: {detail}", verbs_place(device, *port, *qp))]
    Verbs {
        /// The call and what it was for ("ibv_reg_mr of the receive ring").
        op: String,
        /// The RDMA device, empty before one is known.
        device: String,
        /// The port on the device, when known.
        port: Option<u8>,
        /// The queue pair number, when a queue pair is involved.
        qp: Option<u32>,
        /// The errno the call left, when it sets one.
        errno: Option<i32>,
        /// What went wrong, as a sentence ("Invalid argument (errno 22)").
        detail: String,
    },

    /// An RDMA session or stream stopped working: a fatal event of its
    /// device, port or queue pair, a failed or flushed work request, a
    /// remote access violation, or a peer that went silent or disconnected
    /// without closing. Says how far the exchange got in both directions.
    #[error("{channel} on {device} port {port} (QP {qp:#x}) failed: {cause}; the peer had acknowledged the messages sent up to sequence {acked}, and the messages received up to sequence {delivered} were delivered")]
    RdmaFault {
        /// The channel, as "session `orders`".
        channel: String,
        /// The RDMA device.
        device: String,
        /// The port on the device.
        port: u8,
        /// The local queue pair number.
        qp: u32,
        /// What happened, as a sentence fragment ("the port went down
        /// (IBV_EVENT_PORT_ERR)").
        cause: String,
        /// The last sequence sent whose delivery the peer's device
        /// acknowledged (0: none); later ones may or may not have arrived.
        acked: u64,
        /// The last sequence received and delivered here (0: none).
        delivered: u64,
    },
}

/// " on rxe0 port 1 (QP 0x11)", or less when device, port or QP are not
/// known.
fn verbs_place(device: &str, port: Option<u8>, qp: Option<u32>) -> String {
    let mut s = String::new();
    if !device.is_empty() {
        s.push_str(" on ");
        s.push_str(device);
        if let Some(port) = port {
            s.push_str(&format!(" port {port}"));
        }
    }
    if let Some(qp) = qp {
        s.push_str(&format!(" (QP {qp:#x})"));
    }
    s
}

impl Error {
    /// Builds an [`Error::Io`] from an error value.
    pub(crate) fn io(op: &'static str, target: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            op,
            target: target.into(),
            source,
        }
    }

    /// `Ok` when a `len`-byte message fits `channel` (as "session `orders`"),
    /// whose largest is `max`; [`Error::MessageTooLarge`] otherwise. Checked
    /// in release builds too: the transports' slots hold `max` bytes.
    #[inline]
    pub(crate) fn check_fits(len: usize, max: usize, channel: &str) -> Result<()> {
        if len > max {
            return Err(Self::too_large(len, max, channel));
        }
        Ok(())
    }

    #[cold]
    fn too_large(len: usize, max: usize, channel: &str) -> Self {
        Error::MessageTooLarge {
            len,
            max,
            channel: channel.to_owned(),
        }
    }
}

/// What is wrong with a shared-memory segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentProblem {
    /// The file is shorter than its header or than the size the header states.
    #[error("truncated: {actual} bytes, at least {expected} needed")]
    Truncated {
        /// Bytes needed.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// The file does not start with the mdbus magic.
    #[error("not an mdbus segment (bad magic)")]
    BadMagic,
    /// The layout version differs from this build's.
    #[error("layout version {found}, this build reads version {supported}; restart both sides with the same mdbus version")]
    Version {
        /// Version in the file.
        found: u32,
        /// Version this build speaks.
        supported: u32,
    },
    /// The segment holds another kind of channel.
    #[error("holds a {found}, not a {expected}")]
    WrongKind {
        /// Kind in the file.
        found: &'static str,
        /// Kind asked for.
        expected: &'static str,
    },
    /// The header fails its checksum or states an impossible geometry.
    #[error("corrupt header: {0}")]
    Corrupt(&'static str),
    /// The file is a link, another user's, or open to group/other users:
    /// its contents could be forged, so it is not read.
    #[error("{0}")]
    Untrusted(crate::sys::file::Distrust),
    /// Huge pages were required and cannot be had.
    #[error("huge pages required but unavailable: {0}")]
    NoHugePages(String),
    /// The segment's geometry differs from the local configuration.
    #[error("its {field} is {found}, the configuration says {configured}")]
    Mismatch {
        /// The field that differs.
        field: &'static str,
        /// Value in the segment.
        found: u64,
        /// Value in the configuration.
        configured: u64,
    },
}

/// A configuration file or value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {key}: {message}")]
pub struct ConfigError {
    /// The file (or "<built-in>", "<string>") the value came from.
    pub source_name: String,
    /// The key path, as `streams.md.capacity`.
    pub key: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(
        source_name: impl Into<String>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            source_name: source_name.into(),
            key: key.into(),
            message: message.into(),
        }
    }
}
