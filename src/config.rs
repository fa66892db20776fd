//! Configuration: one TOML file describes the bus, its streams and sessions.
//!
//! Every field has a default, so an empty file (or [`Config::default`]) is a
//! working shared-memory bus. Unknown keys are rejected, and every value is
//! checked at load time; an error names the file, the key and what is
//! allowed, so a typo never turns into a silent default.
//!
//! ```
//! let cfg = mdbus::Config::from_toml_str(r#"
//!     transport = "shm"
//!     [streams.md]
//!     capacity = 4096
//!     max_message = 100
//! "#, "<example>").unwrap();
//! assert_eq!(cfg.stream("md").capacity, 4096);
//! assert_eq!(cfg.stream("other").capacity, mdbus::config::StreamConfig::default().capacity);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
pub use crate::recovery::Repair;
use crate::wait::WaitStrategy;

/// Which transport carries the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// RDMA verbs when an active device is found, otherwise shared memory.
    #[default]
    Auto,
    /// Shared memory on one host.
    Shm,
    /// UDP multicast streams between hosts.
    Udp,
    /// TCP sessions between hosts.
    Tcp,
    /// InfiniBand / RoCE verbs.
    Verbs,
}

impl TransportKind {
    /// The name used in configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Auto => "auto",
            TransportKind::Shm => "shm",
            TransportKind::Udp => "udp",
            TransportKind::Tcp => "tcp",
            TransportKind::Verbs => "verbs",
        }
    }
}

/// Whether to back segments with huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HugePages {
    /// Never.
    Off,
    /// When a hugetlbfs mount with free pages exists; otherwise use normal
    /// pages without a warning (a debug log line says why).
    #[default]
    Try,
    /// Huge pages are wanted: when they cannot be had, normal pages are
    /// used and a warning is logged, once per process.
    On,
    /// Fail when huge pages cannot be had.
    Require,
}

/// Where a subscriber starts reading when it joins a running stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LateJoin {
    /// At the next message published after the join.
    #[default]
    Next,
    /// At the oldest message the publisher still retains.
    Oldest,
    /// From sequence `archive_from`: the stream's archive first, then the
    /// live stream from exactly the next sequence (docs/ARCHIVE.md).
    Archive,
}

/// Shared-memory settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShmConfig {
    /// Directory of the segment files (a tmpfs).
    pub dir: PathBuf,
    /// Mount point of hugetlbfs, used when `huge_pages` allows.
    pub hugetlbfs: PathBuf,
    /// Prefix of every segment name, so several buses can share a host.
    pub prefix: String,
    /// Huge-page policy.
    pub huge_pages: HugePages,
    /// Lock segments in memory (best effort: a failure is logged).
    pub mlock: bool,
    /// How long a subscriber or session initiator waits for the channel to
    /// appear before giving up.
    #[serde(with = "duration_str")]
    pub attach_timeout: Duration,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            dir: PathBuf::from("/dev/shm"),
            hugetlbfs: PathBuf::from("/dev/hugepages"),
            prefix: "mdbus".into(),
            huge_pages: HugePages::Try,
            mlock: true,
            attach_timeout: Duration::from_secs(5),
        }
    }
}

/// Thread placement and waiting.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadConfig {
    /// How blocking calls wait (`busy-spin`, `spin-hint`, `yield`,
    /// `adaptive`).
    pub wait: WaitStrategy,
    /// RDMA or network device whose NUMA node the busy-polling threads
    /// should run on; empty for none.
    pub device: String,
    /// `adaptive`: empty polls before blocking.
    pub adaptive_spin_polls: u32,
    /// `adaptive`: and this long without data.
    #[serde(with = "duration_str")]
    pub adaptive_quiet: Duration,
    /// `adaptive`: the longest the quiet period grows to.
    #[serde(with = "duration_str")]
    pub adaptive_quiet_max: Duration,
    /// `adaptive`: the longest one block lasts.
    #[serde(with = "duration_str")]
    pub adaptive_max_block: Duration,
}

impl Default for ThreadConfig {
    fn default() -> Self {
        let a = crate::wait::AdaptiveConfig::default();
        ThreadConfig {
            wait: WaitStrategy::default(),
            device: String::new(),
            adaptive_spin_polls: a.spin_polls,
            adaptive_quiet: a.quiet,
            adaptive_quiet_max: a.quiet_max,
            adaptive_max_block: a.max_block,
        }
    }
}

impl ThreadConfig {
    /// The thresholds of the adaptive wait.
    pub fn adaptive(&self) -> crate::wait::AdaptiveConfig {
        crate::wait::AdaptiveConfig {
            spin_polls: self.adaptive_spin_polls,
            quiet: self.adaptive_quiet,
            quiet_max: self.adaptive_quiet_max,
            max_block: self.adaptive_max_block,
        }
    }
}

/// The bus's service thread: it does `service()` for the bus's datagram
/// publishers (heartbeats, retransmissions, flushes) so that applications
/// only publish. See docs/EMBEDDING.md ("The service thread").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Start the thread (default false: each publisher's owner calls
    /// `service()` when idle).
    pub thread: bool,
    /// Core to pin it to; none: not pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    /// Time between two rounds over the publishers: the longest a
    /// retransmit request or a due heartbeat waits.
    #[serde(with = "duration_str")]
    pub interval: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            thread: false,
            core: None,
            interval: Duration::from_millis(1),
        }
    }
}

/// One stream: one publisher, many subscribers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamConfig {
    /// Largest message in bytes. Fixes the slot size of the ring.
    pub max_message: usize,
    /// Messages the publisher retains; a power of two. On shared memory a
    /// subscriber more than this many messages behind is overrun; on
    /// datagram transports they are kept for retransmission (within 64 MiB
    /// of payload).
    pub capacity: usize,
    /// Stamp every message with the send time.
    pub timestamps: bool,
    /// Where a subscriber that joins a running stream starts.
    pub late_join: LateJoin,
    /// With `late_join = "archive"`: the first sequence a subscriber
    /// wants (1: the whole stream).
    pub archive_from: u64,
    /// Record this stream (`[streams.NAME.archive]`, docs/ARCHIVE.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<crate::archive::ArchiveConfig>,
    /// Most messages one `poll` call delivers, so a busy stream cannot
    /// starve the caller's other work.
    pub poll_batch: usize,
    /// Multicast group and port of line A, as `"239.1.1.1:5000"` (udp,
    /// verbs). Required on those transports.
    pub group: String,
    /// Local IPv4 address of line A's interface (udp: the interface that
    /// sends and joins; verbs: the address rdma_cm binds, which selects the
    /// device). Empty: let the system choose.
    pub interface: String,
    /// Multicast group and port of line B; empty for a single line.
    pub group_b: String,
    /// Local IPv4 address of line B's interface.
    pub interface_b: String,
    /// Multicast time-to-live (router hops).
    pub ttl: u32,
    /// udp: receive buffer asked of the kernel for each of the line's
    /// sockets (`SO_RCVBUF`), in bytes, so a burst survives a poller that
    /// was descheduled for a moment. Granted beyond `net.core.rmem_max`
    /// only with CAP_NET_ADMIN (`SO_RCVBUFFORCE`), else capped there.
    pub recv_buffer: usize,
    /// Deliver multicast to subscribers on the publishing host too.
    pub loopback: bool,
    /// Largest datagram payload in bytes; messages are packed up to it and
    /// larger ones are fragmented. Verbs caps it at the path MTU.
    pub max_datagram: usize,
    /// Idle time after which a publisher sends a heartbeat.
    #[serde(with = "duration_str")]
    pub heartbeat_interval: Duration,
    /// While the stream stays idle, each further heartbeat comes twice as
    /// long after the previous one, up to this; data starts again at
    /// `heartbeat_interval`. At least `heartbeat_interval` and below
    /// `heartbeat_timeout`; 0 (the default) picks
    /// [`idle_heartbeat_cap`](Self::idle_heartbeat_cap).
    #[serde(with = "duration_str")]
    pub heartbeat_max_interval: Duration,
    /// Silence after which a subscriber reports the publisher down.
    #[serde(with = "duration_str")]
    pub heartbeat_timeout: Duration,
    /// Time a subscriber waits for a retransmission before asking again.
    #[serde(with = "duration_str")]
    pub retransmit_timeout: Duration,
    /// Requests for one gap before it is declared unrecoverable.
    pub retransmit_retries: u32,
    /// Subscribers: how long every live line must have been past a
    /// missing message before it is requested (covers reordering within a
    /// line).
    #[serde(with = "duration_str")]
    pub nak_delay: Duration,
    /// Subscribers: the longest wait for the other line to catch up before
    /// a missing message is requested (covers the skew between lines A
    /// and B).
    #[serde(with = "duration_str")]
    pub line_grace: Duration,
    /// Subscribers: a line silent this long is not waited for.
    #[serde(with = "duration_str")]
    pub line_timeout: Duration,
    /// Subscribers: the longest random wait added to `nak_delay` (and to
    /// `retransmit_timeout` before a repeat), so that of many subscribers
    /// that lost the same datagram only a few ask and the repair sent to
    /// the group reaches the rest first (NAK suppression, docs/SCALING.md).
    /// "0s": ask at once.
    #[serde(with = "duration_str")]
    pub nak_backoff: Duration,
    /// Subscribers: how many subscribers the stream is expected to have;
    /// shapes the random wait so that few ask early however many there are.
    pub nak_group_size: u32,
    /// Publishers: where retransmissions go: "requester" (to it alone),
    /// "group" (to every subscriber) or "auto" (to the requester, unless a
    /// second subscriber asked for the same messages within
    /// `repair_linger`: then to the group).
    pub repair: Repair,
    /// Publishers: how long after a repair to the group further requests
    /// for the same messages are ignored (the repair is already on its
    /// way). Keep it below the subscribers' `retransmit_timeout`.
    #[serde(with = "duration_str")]
    pub repair_linger: Duration,
    /// Publishers: lossy-receiver protection. The most messages one
    /// subscriber may ask for within `lossy_window`, in percent of the
    /// messages published per window (never less than `retransmit_burst`);
    /// beyond it the subscriber is told once and its requests are ignored
    /// for the rest of the window, so one that keeps losing on its own
    /// cannot spend the budget the others share. 0: off.
    pub lossy_share_percent: u32,
    /// Publishers: the window `lossy_share_percent` is measured over.
    #[serde(with = "duration_str")]
    pub lossy_window: Duration,
    /// Send each message as it is committed (datagram transports). Off:
    /// messages are packed into datagrams, and on UDP full datagrams are
    /// queued (up to 32), until the publisher's `flush` or `service` is
    /// called; then they leave together, with one `sendmmsg`. That saves
    /// system calls when messages come in bursts (a feed handler flushes
    /// once per inbound packet).
    pub autoflush: bool,
    /// udp: the publisher's unicast address on line A, as
    /// `"10.0.0.1:41000"`. The publisher sends from (and takes retransmit
    /// requests at) this address; subscribers accept line A's datagrams
    /// from it alone. Empty: the publisher uses an ephemeral port and each
    /// subscriber binds to the first source it hears (a change of source
    /// must then be confirmed, see `confirm`).
    pub source: String,
    /// udp: the same for line B.
    pub source_b: String,
    /// Subscribers: the largest step ahead of the highest sequence seen
    /// that a datagram is believed at once; a larger one needs `confirm`
    /// consecutive datagrams that agree.
    pub max_jump: u64,
    /// Subscribers: consecutive datagrams from one source that must agree
    /// before a new publisher epoch, a jump beyond `max_jump` or a new
    /// source is believed (heartbeats and end-of-stream markers announcing
    /// new messages, and not-available replies, need two). 1 believes the
    /// first one.
    pub confirm: u32,
    /// Publishers: most messages resent in answer to one request, and the
    /// size of each requester's retransmission budget.
    pub retransmit_burst: u32,
    /// Publishers: messages per second each requester's budget refills.
    pub retransmit_rate: u64,
    /// Publishers: size of the retransmission budget all requesters share,
    /// in messages.
    pub retransmit_global_burst: u32,
    /// Publishers: messages per second the shared budget refills.
    pub retransmit_global_rate: u64,
    /// Publishers: most bytes of messages resent in answer to one 40-byte
    /// request (at least one message is sent), which bounds the
    /// amplification a spoofed request can get.
    pub retransmit_reply_bytes: usize,
    /// Datagram transports: a file holding the stream's 32-byte key (64
    /// hexadecimal digits, or raw), owned by the user and mode 0600. With
    /// a key, every datagram carries a MAC; datagrams without one, or with
    /// a wrong one, are dropped and counted. Empty: no authentication.
    pub key_file: String,
    /// shm subscribers: ask the publisher to wait for this subscriber
    /// rather than overwrite what it has not read (a recorder, a replay, a
    /// risk check). A subscriber that stays `lossless_timeout` behind is
    /// turned back into a lossy one and told so by an overrun.
    pub lossless: bool,
    /// shm publishers: how long one message may wait for a lossless
    /// subscriber that has not read the slot it needs; then that
    /// subscriber loses messages like any other (counted, logged).
    #[serde(with = "duration_str")]
    pub lossless_timeout: Duration,
}

impl StreamConfig {
    /// The longest gap between two idle heartbeats: `heartbeat_max_interval`
    /// when set, else a quarter of `heartbeat_timeout` (an idle publisher's
    /// subscribers hear four heartbeat pairs per timeout and take a live one
    /// for down only when three pairs in a row are lost), at most 250 ms and
    /// never below `heartbeat_interval` (a timeout under four intervals keeps
    /// the fixed schedule).
    pub fn idle_heartbeat_cap(&self) -> Duration {
        if !self.heartbeat_max_interval.is_zero() {
            return self.heartbeat_max_interval;
        }
        (self.heartbeat_timeout / 4)
            .min(Duration::from_millis(250))
            .max(self.heartbeat_interval)
    }
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            max_message: 232,
            capacity: 65536,
            timestamps: false,
            late_join: LateJoin::Next,
            archive_from: 1,
            archive: None,
            poll_batch: 256,
            group: String::new(),
            interface: String::new(),
            group_b: String::new(),
            interface_b: String::new(),
            ttl: 1,
            recv_buffer: DEFAULT_RECV_BUFFER,
            loopback: true,
            max_datagram: 1472,
            heartbeat_interval: Duration::from_millis(100),
            // Chosen from the interval and the timeout (idle_heartbeat_cap),
            // so that configs written before the key stay valid.
            heartbeat_max_interval: Duration::ZERO,
            heartbeat_timeout: Duration::from_secs(1),
            retransmit_timeout: Duration::from_millis(10),
            retransmit_retries: 10,
            nak_delay: Duration::from_micros(50),
            line_grace: Duration::from_millis(1),
            line_timeout: Duration::from_millis(100),
            nak_backoff: Duration::from_micros(250),
            nak_group_size: 100,
            repair: Repair::Auto,
            repair_linger: Duration::from_micros(250),
            lossy_share_percent: 0,
            lossy_window: Duration::from_secs(1),
            autoflush: true,
            source: String::new(),
            source_b: String::new(),
            max_jump: 65_536,
            confirm: 3,
            retransmit_burst: 1024,
            retransmit_rate: 100_000,
            retransmit_global_burst: 8192,
            retransmit_global_rate: 200_000,
            retransmit_reply_bytes: 64 * 1024,
            key_file: String::new(),
            lossless: false,
            lossless_timeout: Duration::from_millis(100),
        }
    }
}

/// Default of `streams.NAME.recv_buffer`: 8 MiB.
pub const DEFAULT_RECV_BUFFER: usize = 8 << 20;
/// Allowed `streams.NAME.recv_buffer`: 64 KiB to 1 GiB.
const RECV_BUFFER_RANGE: std::ops::RangeInclusive<usize> = 64 << 10..=1 << 30;
/// Largest `verbs.ud_recv_depth` and `verbs.ud_send_depth` accepted (the
/// device's own limit is checked when a line is created).
pub const MAX_UD_DEPTH: u32 = 1 << 16;

/// A key that was removed: it takes any value, so that a configuration
/// still setting it is told what replaced it rather than "unknown field".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedKey;

impl<'de> Deserialize<'de> for RemovedKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(RemovedKey)
    }
}

/// One session: two peers, reliable and ordered both ways.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// Largest message in bytes.
    pub max_message: usize,
    /// Messages in flight each way before the sender is held back; a power
    /// of two.
    pub capacity: usize,
    /// Stamp every message with the send time.
    pub timestamps: bool,
    /// How long `accept` waits for the initiator and `connect` for the
    /// acceptor.
    #[serde(with = "duration_str")]
    pub connect_timeout: Duration,
    /// Most messages one `poll` call delivers.
    pub poll_batch: usize,
    /// Address the acceptor listens on and the initiator connects to, as
    /// `"10.0.0.1:7000"` (tcp, verbs). Required on those transports.
    pub address: String,
    /// How a verbs session moves messages (other transports ignore it):
    /// SEND/RECV, or RDMA writes into a ring in the peer's memory. Both
    /// ends must use the same mode.
    pub mode: SessionMode,
    /// Where an RC acceptor (verbs) takes this session's receive buffers
    /// from: its own ring (`per-session`), or the shared receive queue of
    /// the acceptor listening on `address` (`shared`; docs/SCALING.md,
    /// "Sessions"). Other transports and the connecting side ignore it.
    pub receive: ReceiveMode,
}

/// How an RC session moves messages (`sessions.NAME.mode`); see
/// docs/RDMA.md for which guarantee each relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// One SEND per message into a posted receive buffer.
    #[default]
    Send,
    /// One RDMA WRITE per message into the next slot of a ring in the
    /// peer's memory; the peer polls the slot's last word.
    Write,
    /// The same ring written with RDMA WRITE with immediate: the peer
    /// learns of each message from a receive completion.
    WriteImm,
}

impl SessionMode {
    /// The name used in configuration files.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMode::Send => "send",
            SessionMode::Write => "write",
            SessionMode::WriteImm => "write-imm",
        }
    }
}

impl std::str::FromStr for SessionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "send" => Ok(SessionMode::Send),
            "write" => Ok(SessionMode::Write),
            "write-imm" => Ok(SessionMode::WriteImm),
            _ => Err(format!(
                "`{s}` is not a session mode: send, write or write-imm"
            )),
        }
    }
}

/// Where an RC session's receive buffers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiveMode {
    /// A receive ring of `capacity` buffers per session.
    #[default]
    PerSession,
    /// One shared receive queue and completion queue per acceptor address,
    /// polled for all its sessions from one thread; each session is
    /// granted `capacity` of its `verbs.shared_receive_buffers` buffers.
    Shared,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_message: 232,
            capacity: 4096,
            timestamps: false,
            connect_timeout: Duration::from_secs(5),
            poll_batch: 256,
            address: String::new(),
            mode: SessionMode::Send,
            receive: ReceiveMode::PerSession,
        }
    }
}

/// RDMA verbs settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerbsConfig {
    /// Device name, e.g. `"mlx5_0"` or `"rxe0"`; empty: the first device
    /// with an active port.
    pub device: String,
    /// Port number on the device.
    pub port: u8,
    /// Removed: rdma_cm takes the GID of the address a channel binds, so
    /// an index here could only contradict it. Present only so that a
    /// configuration that still sets it gets an error saying what to do
    /// instead (see [`Config::validate`]).
    #[doc(hidden)]
    #[serde(default, skip_serializing)]
    pub gid_index: Option<RemovedKey>,
    /// How long resolving a multicast group's address and joining it may
    /// take (UD streams) before the stream fails with a timeout.
    #[serde(with = "duration_str")]
    pub join_timeout: Duration,
    /// Receive buffers each UD multicast line keeps posted: how large a
    /// burst survives a subscriber that is not polling (beyond it the
    /// device drops, and loss recovery fetches the datagrams again).
    pub ud_recv_depth: u32,
    /// Send queue entries of each UD multicast line: datagrams in flight
    /// before the publisher waits for completions.
    pub ud_send_depth: u32,
    /// Send messages inline (copied into the work request) when they fit.
    pub inline: bool,
    /// Inline limit requested at QP creation; the device may grant less,
    /// and the granted value is used.
    pub max_inline: u32,
    /// Request a completion for every Nth send only (1: every send).
    pub signal_every: u32,
    /// Receive buffers reposted per batch.
    pub recv_batch: u32,
    /// Buffers of the shared receive queue of an RC acceptor whose
    /// sessions use `receive = "shared"`: the sum of their capacities
    /// (the credits granted to their peers) may not exceed it.
    pub shared_receive_buffers: u32,
    // Failure detection and admission of RC sessions (docs/RDMA.md,
    // docs/SECURITY.md, "The RDMA fabric").
    /// Idle time after which an RC session writes a zero-length keep-alive
    /// to its peer. Only an idle session sends one: under load the messages
    /// themselves are acknowledged.
    #[serde(with = "duration_str")]
    pub keepalive_interval: Duration,
    /// How long a keep-alive (or any send) may stay unacknowledged before
    /// the session reports its peer gone; also bounds how long an idle
    /// session takes to learn that. Must exceed `keepalive_interval`.
    #[serde(with = "duration_str")]
    pub keepalive_timeout: Duration,
    /// Addresses an RC acceptor takes connections from, as IP addresses
    /// (`"10.0.0.2"`) or GIDs written as IPv6 (`"::ffff:10.0.0.2"`,
    /// `"fe80::1"`). Empty: any peer that names the session. Others are
    /// rejected and counted.
    pub allow_peers: Vec<String>,
}

impl VerbsConfig {
    /// Checks the keys of UD multicast lines, and that the removed
    /// `gid_index` is not set: the key and why.
    pub fn check_ud(&self) -> Result<(), (String, String)> {
        if self.gid_index.is_some() {
            return Err((
                "verbs.gid_index".into(),
                "was removed: rdma_cm uses the GID of the address a channel binds; remove the key and \
set that address instead (streams.NAME.interface, sessions.NAME.address), the IPv4 address \
of the GID wanted (`cat /sys/class/infiniband/DEV/ports/1/gids/N`; mdbus-perf and \
mdbus-replay take --gid-index N to bind it)"
                    .into(),
            ));
        }
        if self.join_timeout.is_zero() {
            return Err((
                "verbs.join_timeout".into(),
                "0 is not allowed: give a duration such as \"5s\"".into(),
            ));
        }
        for (key, v) in [
            ("verbs.ud_recv_depth", self.ud_recv_depth),
            ("verbs.ud_send_depth", self.ud_send_depth),
        ] {
            if !(1..=MAX_UD_DEPTH).contains(&v) {
                return Err((
                    key.into(),
                    format!("{v} is out of range: allowed 1 to {MAX_UD_DEPTH}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks the failure-detection and admission keys: the key and why.
    pub fn check_liveness(&self) -> Result<(), (String, String)> {
        if self.keepalive_interval.is_zero() {
            return Err((
                "verbs.keepalive_interval".into(),
                "0 is not allowed: give a duration such as \"1s\"".into(),
            ));
        }
        if self.keepalive_timeout <= self.keepalive_interval {
            return Err((
                "verbs.keepalive_timeout".into(),
                format!(
                    "{:?} must be longer than verbs.keepalive_interval ({:?})",
                    self.keepalive_timeout, self.keepalive_interval
                ),
            ));
        }
        for (i, a) in self.allow_peers.iter().enumerate() {
            if a.parse::<std::net::IpAddr>().is_err() {
                return Err((
                    format!("verbs.allow_peers[{i}]"),
                    format!("`{a}` is not an IP address or a GID such as ::ffff:10.0.0.2"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: String::new(),
            port: 1,
            gid_index: None,
            join_timeout: Duration::from_secs(5),
            ud_recv_depth: 1024,
            ud_send_depth: 256,
            inline: true,
            max_inline: 64,
            signal_every: 16,
            recv_batch: 16,
            shared_receive_buffers: 4096,
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_secs(5),
            allow_peers: Vec::new(),
        }
    }
}

/// The whole configuration of a bus.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Transport for every channel of this bus.
    pub transport: TransportKind,
    /// Shared-memory settings.
    pub shm: ShmConfig,
    /// Thread placement and waiting.
    pub threads: ThreadConfig,
    /// RDMA verbs settings.
    pub verbs: VerbsConfig,
    /// Streams by name; a stream not listed uses [`StreamConfig::default`].
    pub streams: BTreeMap<String, StreamConfig>,
    /// Sessions by name; a session not listed uses [`SessionConfig::default`].
    pub sessions: BTreeMap<String, SessionConfig>,
    /// Resource limits the sizes above are checked against.
    pub limits: LimitsConfig,
    /// The optional service thread of datagram publishers.
    pub service: ServiceConfig,
    /// The bus's counters file, read by `mdbus-stat`.
    pub counters: CountersConfig,
    /// Archive every listed stream, each in `archive.dir/NAME`, unless it
    /// has its own `[streams.NAME.archive]` (docs/ARCHIVE.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<crate::archive::ArchiveConfig>,
}

/// `[counters]`: the bus's counters file (see docs/OPERATIONS.md,
/// "Counters and mdbus-stat").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CountersConfig {
    /// Write the counters file (default true). Off only to measure what
    /// counting costs: a bus without one is invisible to `mdbus-stat`.
    pub enabled: bool,
    /// Directory of the file, `PREFIX-PID-N.counters` (created 0700 when
    /// missing); `mdbus-stat list` looks here.
    pub dir: PathBuf,
    /// Slots in the file: each publisher takes 37, each subscriber 51, each
    /// session end 8, an archive recorder or replay service 11, the bus 6.
    pub slots: usize,
    /// The owner name shown by `mdbus-stat`; empty: the process's name.
    pub name: String,
}

impl Default for CountersConfig {
    fn default() -> Self {
        CountersConfig {
            enabled: true,
            dir: PathBuf::from(DEFAULT_COUNTERS_DIR),
            slots: 2048,
            name: String::new(),
        }
    }
}

/// Where buses write their counters files unless configured otherwise.
pub const DEFAULT_COUNTERS_DIR: &str = "/dev/shm/mdbus";

/// Largest `max_message` accepted.
pub const MAX_MESSAGE_LIMIT: usize = 1 << 20;
/// Largest ring capacity accepted.
pub const MAX_CAPACITY: usize = 1 << 24;

impl Config {
    /// Reads and checks a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = read_config_text(path).map_err(|e| ConfigError::new(&name, "(file)", e))?;
        Config::from_toml_str(&text, &name)
    }

    /// Parses and checks TOML text; `source_name` names it in errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let key = e
                .span()
                .map(|s| format!("line {}", 1 + text[..s.start].matches('\n').count()))
                .unwrap_or_else(|| "(document)".into());
            ConfigError::new(source_name, key, e.message().trim().to_string())
        })?;
        cfg.validate(source_name)?;
        Ok(cfg)
    }

    /// Checks every value; an error names the key and what is allowed.
    pub fn validate(&self, source_name: &str) -> Result<(), ConfigError> {
        let err = |key: String, msg: String| ConfigError::new(source_name, key, msg);
        if let Err((key, msg)) = self.threads.adaptive().check() {
            return Err(err(format!("threads.{key}"), msg));
        }
        if self.service.thread && self.service.interval.is_zero() {
            return Err(err(
                "service.interval".into(),
                "must be above 0: the service thread would never rest".into(),
            ));
        }
        for (name, s) in &self.streams {
            crate::names::check(name)
                .map_err(|_| err(format!("streams.{name}"), NAME_RULE.into()))?;
            check_common(
                &format!("streams.{name}"),
                s.max_message,
                s.capacity,
                s.poll_batch,
            )
            .map_err(|(k, m)| err(k, m))?;
            check_stream_net(&format!("streams.{name}"), s).map_err(|(k, m)| err(k, m))?;
            if let Some(a) = &s.archive {
                a.check(&format!("streams.{name}.archive"), s.max_message)
                    .map_err(|(k, m)| err(k, m))?;
            }
            if s.late_join == LateJoin::Archive && self.archive_for(name).is_none() {
                return Err(err(
                    format!("streams.{name}.late_join"),
                    "\"archive\" needs an archive: add [streams.NAME.archive] or [archive]".into(),
                ));
            }
        }
        for (name, s) in &self.sessions {
            crate::names::check(name)
                .map_err(|_| err(format!("sessions.{name}"), NAME_RULE.into()))?;
            check_common(
                &format!("sessions.{name}"),
                s.max_message,
                s.capacity,
                s.poll_batch,
            )
            .map_err(|(k, m)| err(k, m))?;
            if s.receive == ReceiveMode::Shared
                && s.capacity > self.verbs.shared_receive_buffers as usize
            {
                return Err(err(
                    format!("sessions.{name}.capacity"),
                    format!(
                        "{} is more than verbs.shared_receive_buffers {}: a session with receive = \"shared\" is granted its capacity out of the shared receive queue; lower it or raise verbs.shared_receive_buffers",
                        s.capacity, self.verbs.shared_receive_buffers
                    ),
                ));
            }
            if s.receive == ReceiveMode::Shared && s.mode != SessionMode::Send {
                return Err(err(
                    format!("sessions.{name}.receive"),
                    format!(
                        "\"shared\" needs mode = \"send\": a shared receive queue holds posted receive buffers, which mode \"{}\" does not use",
                        s.mode.as_str()
                    ),
                ));
            }
            if !s.address.is_empty() && s.address.parse::<std::net::SocketAddr>().is_err() {
                return Err(err(
                    format!("sessions.{name}.address"),
                    format!(
                        "`{}` is not an address: write it as 10.0.0.1:7000",
                        s.address
                    ),
                ));
            }
        }
        if let Some(a) = &self.archive {
            let max = self.streams.values().map(|s| s.max_message).max();
            a.check(
                "archive",
                max.unwrap_or(StreamConfig::default().max_message),
            )
            .map_err(|(k, m)| err(k, m))?;
        }
        if self.verbs.signal_every == 0 || self.verbs.recv_batch == 0 {
            let key = if self.verbs.signal_every == 0 {
                "verbs.signal_every"
            } else {
                "verbs.recv_batch"
            };
            return Err(err(key.into(), "0 is not allowed: at least 1".into()));
        }
        if !(1..=MAX_CAPACITY as u32).contains(&self.verbs.shared_receive_buffers) {
            return Err(err(
                "verbs.shared_receive_buffers".into(),
                format!(
                    "{} is out of range: allowed 1 to {MAX_CAPACITY}",
                    self.verbs.shared_receive_buffers
                ),
            ));
        }
        self.verbs.check_liveness().map_err(|(k, m)| err(k, m))?;
        self.verbs.check_ud().map_err(|(k, m)| err(k, m))?;
        if crate::names::check(&self.shm.prefix).is_err() {
            return Err(err("shm.prefix".into(), NAME_RULE.into()));
        }
        if !self.counters.dir.is_absolute() {
            return Err(err(
                "counters.dir".into(),
                format!("{} is not an absolute path", self.counters.dir.display()),
            ));
        }
        if self.counters.slots > crate::counters::MAX_SLOTS {
            return Err(err(
                "counters.slots".into(),
                format!(
                    "{} is more than the {} a counters file holds",
                    self.counters.slots,
                    crate::counters::MAX_SLOTS
                ),
            ));
        }
        if self.counters.name.len() > crate::counters::MAX_OWNER_NAME {
            return Err(err(
                "counters.name".into(),
                format!("longer than {} bytes", crate::counters::MAX_OWNER_NAME),
            ));
        }
        if !self.shm.dir.is_absolute() {
            return Err(err(
                "shm.dir".into(),
                format!("{} is not an absolute path", self.shm.dir.display()),
            ));
        }
        self.check_resources(source_name)
    }

    /// Checks what the configuration names outside itself, as far as that
    /// needs no device or socket (`--check` runs it after loading): on
    /// `shm`, that `shm.dir` is a directory; every listed stream's key
    /// file, read and checked as its publisher and subscribers would
    /// (owner, mode 0600, 32 bytes). `key_prefix` goes before the keys
    /// named in errors (`"bus."` in the relay's configuration).
    pub fn check_files(&self, source_name: &str, key_prefix: &str) -> Result<(), ConfigError> {
        if self.transport == TransportKind::Shm && !self.shm.dir.is_dir() {
            return Err(ConfigError::new(
                source_name,
                format!("{key_prefix}shm.dir"),
                format!("{} is not a directory", self.shm.dir.display()),
            ));
        }
        for (name, s) in &self.streams {
            if !s.key_file.is_empty() {
                let key = format!("{key_prefix}streams.{name}.key_file");
                crate::recovery::mac::load_key(Path::new(&s.key_file), &key)?;
            }
        }
        Ok(())
    }

    /// The archive of stream `name`: its own `[streams.NAME.archive]`, else
    /// the bus's `[archive]` in a directory of the stream's name; none when
    /// neither is set.
    pub fn archive_for(&self, name: &str) -> Option<crate::archive::ArchiveConfig> {
        match self.streams.get(name).and_then(|s| s.archive.clone()) {
            Some(a) => Some(a),
            None => self.archive.as_ref().map(|a| a.for_stream(name)),
        }
    }

    /// The settings of stream `name` (the defaults when it is not listed).
    pub fn stream(&self, name: &str) -> StreamConfig {
        self.streams.get(name).cloned().unwrap_or_default()
    }

    /// The settings of session `name` (the defaults when it is not listed).
    pub fn session(&self, name: &str) -> SessionConfig {
        self.sessions.get(name).cloned().unwrap_or_default()
    }
}

const NAME_RULE: &str = "a name must be 1 to 64 characters from A-Z a-z 0-9 . _ -";

fn check_stream_net(key: &str, s: &StreamConfig) -> Result<(), (String, String)> {
    for (field, value) in [("group", &s.group), ("group_b", &s.group_b)] {
        if value.is_empty() {
            continue;
        }
        match value.parse::<std::net::SocketAddrV4>() {
            Ok(a) if a.ip().is_multicast() => {}
            _ => {
                return Err((
                    format!("{key}.{field}"),
                    format!(
                        "`{value}` is not an IPv4 multicast group and port such as 239.1.1.1:5000"
                    ),
                ))
            }
        }
    }
    for (field, value) in [("interface", &s.interface), ("interface_b", &s.interface_b)] {
        if !value.is_empty() && value.parse::<std::net::Ipv4Addr>().is_err() {
            return Err((
                format!("{key}.{field}"),
                format!("`{value}` is not a local IPv4 address such as 10.0.0.1"),
            ));
        }
    }
    for (field, value) in [("source", &s.source), ("source_b", &s.source_b)] {
        match value.parse::<std::net::SocketAddrV4>() {
            _ if value.is_empty() => {}
            Ok(a) if !a.ip().is_multicast() && !a.ip().is_unspecified() && a.port() != 0 => {}
            _ => {
                return Err((
                    format!("{key}.{field}"),
                    format!(
                        "`{value}` is not a unicast IPv4 address and port such as 10.0.0.1:41000"
                    ),
                ))
            }
        }
    }
    for (field, value) in [
        ("confirm", s.confirm as u64),
        ("retransmit_burst", s.retransmit_burst as u64),
        ("retransmit_global_burst", s.retransmit_global_burst as u64),
        ("retransmit_reply_bytes", s.retransmit_reply_bytes as u64),
        ("max_jump", s.max_jump),
    ] {
        if value == 0 {
            return Err((
                format!("{key}.{field}"),
                "0 is not allowed: at least 1".into(),
            ));
        }
    }
    if s.nak_group_size == 0 {
        return Err((
            format!("{key}.nak_group_size"),
            "0 is not allowed: at least 1".to_string(),
        ));
    }
    if s.lossy_share_percent > 100 {
        return Err((
            format!("{key}.lossy_share_percent"),
            format!(
                "{} is out of range: allowed 0 (off) to 100",
                s.lossy_share_percent
            ),
        ));
    }
    if s.lossy_share_percent > 0 && s.lossy_window.is_zero() {
        return Err((
            format!("{key}.lossy_window"),
            "0s is not allowed while lossy_share_percent is set".to_string(),
        ));
    }
    // A subscriber that lost a repair to the group asks again after its
    // timeout; a linger that long would ignore it, and the loss would stand.
    if s.repair_linger >= s.retransmit_timeout {
        return Err((
            format!("{key}.repair_linger"),
            format!(
                "{} is not below retransmit_timeout ({}): a subscriber that lost a repair \
                 could never get it again",
                duration_str::format(s.repair_linger),
                duration_str::format(s.retransmit_timeout)
            ),
        ));
    }
    if !s.heartbeat_max_interval.is_zero() && s.heartbeat_max_interval < s.heartbeat_interval {
        return Err((
            format!("{key}.heartbeat_max_interval"),
            format!(
                "{} is below heartbeat_interval ({}): idle heartbeats back off from \
                 heartbeat_interval up to heartbeat_max_interval; raise heartbeat_max_interval \
                 or lower heartbeat_interval",
                duration_str::format(s.heartbeat_max_interval),
                duration_str::format(s.heartbeat_interval)
            ),
        ));
    }
    // Subscribers must hear an idle publisher before they take it for down.
    if !s.heartbeat_max_interval.is_zero() && s.heartbeat_max_interval >= s.heartbeat_timeout {
        return Err((
            format!("{key}.heartbeat_max_interval"),
            format!(
                "{} is not below heartbeat_timeout ({}): subscribers would report an idle \
                 publisher down between two of its heartbeats; lower heartbeat_max_interval \
                 (a quarter of heartbeat_timeout or less) or raise heartbeat_timeout",
                duration_str::format(s.heartbeat_max_interval),
                duration_str::format(s.heartbeat_timeout)
            ),
        ));
    }
    if s.line_timeout.is_zero() {
        return Err((
            format!("{key}.line_timeout"),
            "0 is not allowed: give a duration such as \"100ms\"".into(),
        ));
    }
    if !RECV_BUFFER_RANGE.contains(&s.recv_buffer) {
        return Err((
            format!("{key}.recv_buffer"),
            format!(
                "{} is out of range: allowed {} to {} bytes",
                s.recv_buffer,
                RECV_BUFFER_RANGE.start(),
                RECV_BUFFER_RANGE.end()
            ),
        ));
    }
    if !(64..=65_000).contains(&s.max_datagram) {
        return Err((
            format!("{key}.max_datagram"),
            format!(
                "{} is out of range: allowed 64 to 65000 bytes",
                s.max_datagram
            ),
        ));
    }
    Ok(())
}

fn check_common(
    key: &str,
    max_message: usize,
    capacity: usize,
    poll_batch: usize,
) -> Result<(), (String, String)> {
    if max_message == 0 || max_message > MAX_MESSAGE_LIMIT {
        return Err((
            format!("{key}.max_message"),
            format!("{max_message} is out of range: allowed 1 to {MAX_MESSAGE_LIMIT} bytes"),
        ));
    }
    if !capacity.is_power_of_two() || !(2..=MAX_CAPACITY).contains(&capacity) {
        return Err((
            format!("{key}.capacity"),
            format!("{capacity} is not allowed: a power of two from 2 to {MAX_CAPACITY}"),
        ));
    }
    if poll_batch == 0 {
        return Err((
            format!("{key}.poll_batch"),
            "0 is not allowed: at least 1".into(),
        ));
    }
    Ok(())
}

// ---- Resource limits -------------------------------------------------
//
// Every size a channel allocates is a product of keys checked one at a
// time above (a ring is capacity x slot size); each product, and their sum,
// is checked here against `limits.max_memory` and, for shared memory, the
// space of the file system the segments go to, before anything is created.

/// Resource limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Most bytes the rings, buffers and windows of the listed channels may
    /// take, each and all together (and the most a caller such as the
    /// relay lets one buffer take). Default 8 GiB.
    pub max_memory: u64,
}

/// Default of `limits.max_memory`: 8 GiB.
pub const DEFAULT_MAX_MEMORY: u64 = 8 << 30;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_memory: DEFAULT_MAX_MEMORY,
        }
    }
}

/// Bytes with a readable unit: "1100585369600 bytes (1024.0 GiB)".
pub fn bytes_text(n: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let f = n as f64;
    if f >= GIB {
        format!("{n} bytes ({:.1} GiB)", f / GIB)
    } else {
        format!("{n} bytes ({:.1} MiB)", f / MIB)
    }
}

/// One product of keys: what a channel will allocate.
struct Product {
    /// The key to change, named in the error.
    key: String,
    /// How the bytes come about, naming every key involved.
    how: String,
    bytes: u64,
    /// A shared-memory segment, by kind ("stream", "session") and name:
    /// checked against the file system too.
    segment: Option<(&'static str, String)>,
}

impl LimitsConfig {
    /// Checks that `bytes` (what `key` makes something allocate, `what`
    /// describing it) fit `max_memory`; for callers with buffers of their
    /// own (the relay's reorder store).
    pub fn check(
        &self,
        source_name: &str,
        key: &str,
        what: &str,
        bytes: u64,
    ) -> Result<(), ConfigError> {
        if bytes > self.max_memory {
            return Err(ConfigError::new(
                source_name,
                key,
                format!(
                    "{what} of {} is more than limits.max_memory ({}): lower {key} or raise limits.max_memory",
                    bytes_text(bytes),
                    bytes_text(self.max_memory)
                ),
            ));
        }
        Ok(())
    }
}

/// Free and total bytes of the file system holding `dir`, when it can be
/// asked.
pub(crate) fn fs_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    Some((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
}

/// Checks that a shared-memory segment of `bytes` fits the free space of
/// `shm.dir`, counting a segment of the same name there as free (a creator
/// replaces it). `key`/`how` name the product in the error.
pub(crate) fn check_shm_space(
    shm: &ShmConfig,
    source_name: &str,
    segments: &[(&'static str, String, u64)],
    key: &str,
    how: &str,
) -> Result<(), ConfigError> {
    if shm.huge_pages == HugePages::Require {
        // The segments go to hugetlbfs, which checks its own free pages.
        return Ok(());
    }
    let Some((free, _)) = fs_space(&shm.dir) else {
        // A missing directory is reported by the creation, with its errno.
        return Ok(());
    };
    let mut need = 0u64;
    let mut reusable = 0u64;
    for (kind, name, bytes) in segments {
        need = need.saturating_add(*bytes);
        let path = shm.dir.join(format!("{}.{kind}.{name}", shm.prefix));
        reusable = reusable.saturating_add(std::fs::metadata(path).map_or(0, |m| m.len()));
    }
    let room = free.saturating_add(reusable);
    if need > room {
        return Err(ConfigError::new(
            source_name,
            key,
            format!(
                "{how}: {} of shared memory, but {} has {} free: lower {key}, or free space there",
                bytes_text(need),
                shm.dir.display(),
                bytes_text(room)
            ),
        ));
    }
    Ok(())
}

impl Config {
    /// What each listed channel allocates on this configuration's
    /// transport (the larger of shared memory and verbs for `auto`).
    fn products(&self) -> Vec<Product> {
        use crate::transport::shm::slot_size;
        let header = crate::wire::HEADER_LEN as u64;
        let shm = matches!(self.transport, TransportKind::Shm | TransportKind::Auto);
        let mut out = Vec::new();
        for (name, s) in &self.streams {
            let (cap, max) = (s.capacity as u64, s.max_message as u64);
            let key = format!("streams.{name}");
            if shm {
                let slot = slot_size(s.max_message) as u64;
                out.push(Product {
                    key: format!("{key}.capacity"),
                    how: format!(
                        "{key}.capacity {cap} x {slot}-byte slots ({key}.max_message {max} + {header}-byte header, in whole cache lines) = a ring"
                    ),
                    bytes: cap.saturating_mul(slot).saturating_add(4096),
                    segment: Some(("stream", name.clone())),
                });
            } else {
                // The publisher's retained window: per message an index
                // entry and the message header it keeps with the payload
                // (as it goes on the wire), and the payload bytes, capped
                // at 64 MiB; the bytes (headers and payload) are never
                // fewer than two of the largest messages and a datagram.
                let payload = cap.saturating_mul(max).min(64 << 20).max(max);
                let floor = 2 * (max + header) + s.max_datagram as u64;
                let window = cap.saturating_mul(header).saturating_add(payload);
                out.push(Product {
                    key: format!("{key}.capacity"),
                    how: format!(
                        "{key}.capacity {cap} x 48 bytes (index entry and message header) + {key}.capacity x {key}.max_message {max} bytes of payload (at most 64 MiB; headers and payload at least 2 x ({key}.max_message + 24) + {key}.max_datagram) = a retained window"
                    ),
                    bytes: cap.saturating_mul(24).saturating_add(window.max(floor)),
                    segment: None,
                });
            }
        }
        for (name, s) in &self.sessions {
            let (cap, max) = (s.capacity as u64, s.max_message as u64);
            let key = format!("sessions.{name}");
            let p = match self.transport {
                TransportKind::Tcp => {
                    let frame = header + max;
                    Product {
                        key: format!("{key}.max_message"),
                        how: format!(
                            "({key}.max_message {max} + {header}) x (min({key}.capacity {cap}, 1024) + 4) = send and receive buffers"
                        ),
                        bytes: frame
                            .saturating_mul(cap.min(1024))
                            .max(64 << 10)
                            .saturating_add(frame.saturating_mul(4).max(256 << 10)),
                        segment: None,
                    }
                }
                _ => {
                    let slot = slot_size(s.max_message) as u64;
                    Product {
                        key: format!("{key}.capacity"),
                        how: format!(
                            "2 x {key}.capacity {cap} x {slot}-byte slots ({key}.max_message {max} + {header}-byte header, in whole cache lines) = rings"
                        ),
                        bytes: cap.saturating_mul(slot).saturating_mul(2).saturating_add(4096),
                        segment: (self.transport != TransportKind::Verbs)
                            .then(|| ("session", name.clone())),
                    }
                }
            };
            out.push(p);
        }
        out
    }

    /// What each listed channel allocates on this transport, in bytes, and
    /// whether that is a shared-memory segment: what verbs registers (and
    /// `shm.mlock` locks), and what huge pages would back. The host
    /// readiness check (`mdbus-doctor`) compares them with the memlock
    /// limit and the reserved huge pages.
    pub fn channel_sizes(&self) -> Vec<(u64, bool)> {
        self.products()
            .iter()
            .map(|p| (p.bytes, p.segment.is_some()))
            .collect()
    }

    /// Checks every product of sizes against `limits.max_memory` and the
    /// shared-memory file system, naming the keys and the byte total.
    fn check_resources(&self, source_name: &str) -> Result<(), ConfigError> {
        let max = self.limits.max_memory;
        if max == 0 {
            return Err(ConfigError::new(
                source_name,
                "limits.max_memory",
                "0 is not allowed: at least 1 byte",
            ));
        }
        let products = self.products();
        let mut total = 0u64;
        for p in &products {
            if p.bytes > max {
                return Err(ConfigError::new(
                    source_name,
                    &p.key,
                    format!(
                        "{} of {}, more than limits.max_memory ({}): lower {} or raise limits.max_memory",
                        p.how,
                        bytes_text(p.bytes),
                        bytes_text(max),
                        p.key
                    ),
                ));
            }
            total = total.saturating_add(p.bytes);
            if matches!(self.transport, TransportKind::Shm | TransportKind::Auto) {
                if let Some((kind, name)) = &p.segment {
                    check_shm_space(
                        &self.shm,
                        source_name,
                        &[(*kind, name.clone(), p.bytes)],
                        &p.key,
                        &p.how,
                    )?;
                }
            }
        }
        if total > max {
            return Err(ConfigError::new(
                source_name,
                "limits.max_memory",
                format!(
                    "the {} listed channels need {} together, more than limits.max_memory ({}): make them smaller or raise limits.max_memory",
                    products.len(),
                    bytes_text(total),
                    bytes_text(max)
                ),
            ));
        }
        let segments: Vec<_> = products
            .iter()
            .filter_map(|p| p.segment.clone().map(|(k, n)| (k, n, p.bytes)))
            .collect();
        if segments.len() > 1 && matches!(self.transport, TransportKind::Shm | TransportKind::Auto)
        {
            check_shm_space(
                &self.shm,
                source_name,
                &segments,
                "shm.dir",
                &format!(
                    "the {} listed shared-memory channels together",
                    segments.len()
                ),
            )?;
        }
        Ok(())
    }
}

/// Durations written as `"250ms"`, `"5s"`, `"10us"`, `"100ns"` or `"2m"`.
pub mod duration_str {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    /// Parses a duration with a unit suffix.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mdbus::config::duration_str::parse;
    /// assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
    /// assert!(parse("5").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<Duration, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
            format!("`{s}` has no unit: write it as 250ms, 5s, 10us, 100ns or 2m")
        })?;
        let (num, unit) = s.split_at(split);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("`{s}` does not start with a whole number"))?;
        let d = match unit {
            "ns" => Duration::from_nanos(n),
            "us" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            _ => return Err(format!("`{unit}` is not a unit: use ns, us, ms, s or m")),
        };
        Ok(d)
    }

    /// Serde adapter for `#[serde(with = "duration_str")]`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }

    /// A duration as [`parse`] reads it back exactly: a whole number of
    /// the largest unit that divides it (`1500ms`, `5s`, `2m`, `0s`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mdbus::config::duration_str::{format, parse};
    /// assert_eq!(format(Duration::from_millis(1500)), "1500ms");
    /// assert_eq!(parse(&format(Duration::from_nanos(7))), Ok(Duration::from_nanos(7)));
    /// ```
    pub fn format(d: Duration) -> String {
        let ns = d.as_nanos();
        if ns == 0 {
            return "0s".into();
        }
        const UNITS: [(u128, &str); 5] = [
            (60_000_000_000, "m"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ];
        let (div, unit) = UNITS
            .into_iter()
            .find(|(div, _)| ns % div == 0)
            .unwrap_or((1, "ns"));
        format!("{}{unit}", ns / div)
    }

    /// Serde adapter: writes [`format`].
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }
}

/// Largest configuration file read: a configuration is a few kilobytes;
/// anything far larger is not one, and is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a configuration file of at most [`MAX_CONFIG_BYTES`] (a FIFO or
/// other stream too: the read itself stops there). The error is a
/// sentence fragment: "cannot be read: ...", "is larger than ...".
pub fn read_config_text(path: &Path) -> std::result::Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "is larger than {MAX_CONFIG_BYTES} bytes, which no configuration is"
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_the_default() {
        let c = Config::from_toml_str("", "<t>").unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = Config::from_toml_str("[streams.md]\ncapcity = 8\n", "f.toml").unwrap_err();
        assert_eq!(e.source_name, "f.toml");
        assert_eq!(e.key, "line 2");
        assert!(e.message.contains("unknown field `capcity`"), "{e}");
    }

    #[test]
    fn capacity_must_be_a_power_of_two() {
        let e = Config::from_toml_str("[sessions.o]\ncapacity = 1000\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "sessions.o.capacity");
        assert!(e.message.contains("power of two"), "{e}");
        assert_eq!(
            e.to_string(),
            "f.toml: sessions.o.capacity: 1000 is not allowed: a power of two from 2 to 16777216"
        );
    }

    #[test]
    fn bad_transport_and_duration_are_explained() {
        let e = Config::from_toml_str("transport = \"ib\"\n", "f.toml").unwrap_err();
        assert!(e.message.contains("unknown variant `ib`"), "{e}");
        let e = Config::from_toml_str("[shm]\nattach_timeout = \"5\"\n", "f.toml").unwrap_err();
        assert!(e.message.contains("has no unit"), "{e}");
    }

    #[test]
    fn bad_names_are_rejected() {
        let e = Config::from_toml_str("[streams.\"a/b\"]\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "streams.a/b");
        let e = Config::from_toml_str("[shm]\ndir = \"rel\"\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "shm.dir");
    }

    #[test]
    fn network_addresses_are_checked() {
        let e = Config::from_toml_str("[streams.md]\ngroup = \"10.0.0.1:5000\"\n", "f.toml")
            .unwrap_err();
        assert_eq!(e.key, "streams.md.group");
        let e =
            Config::from_toml_str("[streams.md]\ninterface = \"eth0\"\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "streams.md.interface");
        let e = Config::from_toml_str("[sessions.o]\naddress = \"host\"\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "sessions.o.address");
        let ok = Config::from_toml_str(
            "[streams.md]\ngroup = \"239.1.1.1:5000\"\ninterface = \"10.0.0.1\"\n",
            "f.toml",
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn listed_streams_override_defaults() {
        let c = Config::from_toml_str(
            "[streams.md]\nmax_message = 64\ntimestamps = true\n",
            "f.toml",
        )
        .unwrap();
        let s = c.stream("md");
        assert_eq!(s.max_message, 64);
        assert!(s.timestamps);
        assert_eq!(s.capacity, StreamConfig::default().capacity);
    }

    /// What `--print-config` prints parses back to the same configuration.
    fn round_trip(c: &Config) {
        let text = toml::to_string_pretty(c).unwrap();
        let back =
            Config::from_toml_str(&text, "<printed>").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(&back, c, "{text}");
    }

    #[test]
    fn printed_config_parses_back_equal() {
        round_trip(&Config::default());
        let c = Config::from_toml_str(
            r#"
            transport = "udp"
            [shm]
            huge_pages = "on"
            attach_timeout = "1500ms"
            [service]
            thread = true
            core = 3
            interval = "250us"
            [verbs]
            join_timeout = "2m"
            ud_recv_depth = 4096
            keepalive_timeout = "7s"
            allow_peers = ["10.0.0.2"]
            [streams.md]
            group = "239.1.1.1:5000"
            recv_buffer = 33554432
            heartbeat_timeout = "90s"
            [sessions.orders]
            address = "10.0.0.1:7000"
            connect_timeout = "1m"
            "#,
            "<t>",
        )
        .unwrap();
        assert_eq!(c.verbs.join_timeout, Duration::from_secs(120));
        assert_eq!(c.shm.huge_pages, HugePages::On);
        round_trip(&c);
        let text = toml::to_string_pretty(&c).unwrap();
        // Every default is written out, durations in the form they are read.
        for line in [
            "attach_timeout = \"1500ms\"",
            "interval = \"250us\"",
            "join_timeout = \"2m\"",
            "ud_send_depth = 256",
            "heartbeat_interval = \"100ms\"",
            "heartbeat_max_interval = \"0s\"",
            "heartbeat_timeout = \"90s\"",
            "recv_buffer = 33554432",
            "max_memory = 8589934592",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("gid_index"), "{text}");
    }

    #[test]
    fn durations_are_written_in_their_largest_exact_unit() {
        use duration_str::format;
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_secs(5)), "5s");
        assert_eq!(format(Duration::from_secs(180)), "3m");
        assert_eq!(format(Duration::from_secs(90)), "90s");
        assert_eq!(format(Duration::from_micros(1001)), "1001us");
        assert_eq!(format(Duration::new(1, 1)), "1000000001ns");
    }

    #[test]
    fn the_removed_gid_index_says_what_replaced_it() {
        for value in ["3", "-1", "\"1\""] {
            let e = Config::from_toml_str(&format!("[verbs]\ngid_index = {value}\n"), "f.toml")
                .unwrap_err();
            assert_eq!(e.key, "verbs.gid_index");
            assert!(
                e.message
                    .starts_with("was removed: rdma_cm uses the GID of the address"),
                "{e}"
            );
            assert!(e.message.contains("streams.NAME.interface"), "{e}");
        }
    }

    #[test]
    fn lossy_share_settings_are_checked_with_the_key_named() {
        let e = Config::from_toml_str("[streams.md]\nlossy_share_percent = 101\n", "f.toml")
            .unwrap_err();
        assert_eq!(e.key, "streams.md.lossy_share_percent");
        let e = Config::from_toml_str(
            "[streams.md]\nlossy_share_percent = 10\nlossy_window = \"0s\"\n",
            "f.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "streams.md.lossy_window");
        // Off by default, and then the window does not matter.
        let c = Config::from_toml_str("[streams.md]\nlossy_window = \"0s\"\n", "f.toml").unwrap();
        assert_eq!(c.stream("md").lossy_share_percent, 0);
    }

    #[test]
    fn heartbeat_max_interval_must_lie_between_the_interval_and_the_timeout() {
        let refused = |keys: &str| {
            Config::from_toml_str(&format!("[streams.md]\n{keys}"), "f.toml").unwrap_err()
        };
        let e = refused("heartbeat_interval = \"300ms\"\nheartbeat_max_interval = \"250ms\"\n");
        assert_eq!(
            e.to_string(),
            "f.toml: streams.md.heartbeat_max_interval: 250ms is below heartbeat_interval \
             (300ms): idle heartbeats back off from heartbeat_interval up to \
             heartbeat_max_interval; raise heartbeat_max_interval or lower heartbeat_interval"
        );
        let e = refused("heartbeat_max_interval = \"1s\"\n");
        assert_eq!(
            e.to_string(),
            "f.toml: streams.md.heartbeat_max_interval: 1s is not below heartbeat_timeout \
             (1s): subscribers would report an idle publisher down between two of its \
             heartbeats; lower heartbeat_max_interval (a quarter of heartbeat_timeout or \
             less) or raise heartbeat_timeout"
        );
        let e = refused("heartbeat_max_interval = \"250ms\"\nheartbeat_timeout = \"200ms\"\n");
        assert_eq!(e.key, "streams.md.heartbeat_max_interval");
        assert!(
            e.message
                .contains("250ms is not below heartbeat_timeout (200ms)"),
            "{e}"
        );
        // Unset: a quarter of the timeout, at most 250 ms, at least the
        // interval; configs written before the key keep their meaning.
        let ms = Duration::from_millis;
        for (keys, cap) in [
            ("", ms(250)),
            ("heartbeat_timeout = \"400ms\"\n", ms(100)),
            ("heartbeat_timeout = \"200ms\"\n", ms(100)),
            ("heartbeat_interval = \"300ms\"\n", ms(300)),
            ("heartbeat_timeout = \"10s\"\n", ms(250)),
        ] {
            let c = Config::from_toml_str(&format!("[streams.md]\n{keys}"), "f.toml").unwrap();
            assert_eq!(c.stream("md").idle_heartbeat_cap(), cap, "{keys}");
        }
        // Equal to the interval: the fixed schedule; just below the timeout.
        let ms = Duration::from_millis;
        for (keys, interval, max) in [
            ("heartbeat_max_interval = \"100ms\"\n", ms(100), ms(100)),
            (
                "heartbeat_interval = \"1s\"\nheartbeat_max_interval = \"1s\"\n\
                 heartbeat_timeout = \"1001ms\"\n",
                ms(1000),
                ms(1000),
            ),
        ] {
            let c = Config::from_toml_str(&format!("[streams.md]\n{keys}"), "f.toml").unwrap();
            let s = c.stream("md");
            assert_eq!(
                (s.heartbeat_interval, s.idle_heartbeat_cap()),
                (interval, max)
            );
        }
    }

    #[test]
    fn a_repair_linger_as_long_as_the_retransmit_timeout_is_refused() {
        let e = Config::from_toml_str(
            "[streams.md]\nrepair_linger = \"10ms\"\nretransmit_timeout = \"10ms\"\n",
            "f.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "streams.md.repair_linger");
        assert!(
            e.message.contains("not below retransmit_timeout (10ms)"),
            "{e}"
        );
        let e = Config::from_toml_str("[streams.md]\nnak_group_size = 0\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "streams.md.nak_group_size");
        let c = Config::from_toml_str(
            "[streams.md]\nrepair = \"group\"\nrepair_linger = \"1ms\"\nnak_backoff = \"0s\"\n",
            "f.toml",
        )
        .unwrap();
        let s = c.stream("md");
        assert_eq!(
            (s.repair, s.repair_linger, s.nak_backoff),
            (Repair::Group, Duration::from_millis(1), Duration::ZERO)
        );
        assert!(Config::from_toml_str("[streams.md]\nrepair = \"everyone\"\n", "f.toml").is_err());
    }

    #[test]
    fn transport_timeouts_and_buffers_are_keys_with_the_old_defaults() {
        let c = Config::default();
        assert_eq!(c.verbs.join_timeout, Duration::from_secs(5));
        assert_eq!(c.verbs.ud_recv_depth, 1024);
        assert_eq!(c.verbs.ud_send_depth, 256);
        assert_eq!(c.stream("x").recv_buffer, 8 << 20);
        let e =
            Config::from_toml_str("[streams.md]\nline_timeout = \"0s\"\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "streams.md.line_timeout");
        let e = Config::from_toml_str("[verbs]\njoin_timeout = \"0s\"\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "verbs.join_timeout");
        let e = Config::from_toml_str("[verbs]\nud_recv_depth = 0\n", "f.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.toml: verbs.ud_recv_depth: 0 is out of range: allowed 1 to 65536"
        );
        let e = Config::from_toml_str("[streams.md]\nrecv_buffer = 1000\n", "f.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.toml: streams.md.recv_buffer: 1000 is out of range: allowed 65536 to 1073741824 bytes"
        );
    }

    #[test]
    fn shared_receive_is_a_session_key_checked_against_the_pool() {
        let c = Config::from_toml_str(
            "[verbs]\nshared_receive_buffers = 64\n[sessions.o]\nreceive = \"shared\"\ncapacity = 16\n",
            "f.toml",
        )
        .unwrap();
        assert_eq!(c.session("o").receive, ReceiveMode::Shared);
        assert_eq!(
            Config::default().session("o").receive,
            ReceiveMode::PerSession
        );
        let e = Config::from_toml_str(
            "[verbs]\nshared_receive_buffers = 8\n[sessions.o]\nreceive = \"shared\"\ncapacity = 16\n",
            "f.toml",
        )
        .unwrap_err();
        let m = Config::from_toml_str(
            "[sessions.o]\nreceive = \"shared\"\nmode = \"write\"\ncapacity = 16\n",
            "f.toml",
        )
        .unwrap_err();
        assert_eq!(m.key, "sessions.o.receive");
        assert!(m.message.contains("needs mode = \"send\""), "{m}");
        assert_eq!(e.key, "sessions.o.capacity");
        assert!(
            e.message
                .contains("more than verbs.shared_receive_buffers 8"),
            "{e}"
        );
        let e =
            Config::from_toml_str("[verbs]\nshared_receive_buffers = 0\n", "f.toml").unwrap_err();
        assert_eq!(e.key, "verbs.shared_receive_buffers");
        assert!(Config::from_toml_str("[sessions.o]\nreceive = \"pooled\"\n", "f.toml").is_err());
    }

    /// Every key `--print-config` writes has a row in the configuration
    /// reference of docs/OPERATIONS.md (a row may list sibling keys:
    /// "`streams.NAME.group`, `group_b`").
    #[test]
    fn the_operations_reference_lists_every_key() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/OPERATIONS.md"))
                .unwrap();
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
        let mut c = Config::default();
        c.service.core = Some(0);
        c.streams.insert(
            "NAME".into(),
            StreamConfig {
                archive: Some(crate::archive::ArchiveConfig::default()),
                ..StreamConfig::default()
            },
        );
        c.sessions.insert("NAME".into(), SessionConfig::default());
        c.archive = Some(crate::archive::ArchiveConfig::default());
        let table = toml::Table::try_from(&c).unwrap();
        let mut keys = Vec::new();
        fn leaves(prefix: &str, t: &toml::Table, out: &mut Vec<(String, String)>) {
            for (k, v) in t {
                match v {
                    toml::Value::Table(inner) => leaves(&format!("{prefix}{k}."), inner, out),
                    _ => out.push((prefix.to_string(), k.clone())),
                }
            }
        }
        leaves("", &table, &mut keys);
        assert!(keys.len() > 50, "{keys:?}");
        for (parent, key) in keys {
            let full = format!("`{parent}{key}`");
            let listed = rows.iter().any(|r| {
                let cell = r.split(" | ").next().unwrap_or("");
                cell.contains(&full)
                    || (!parent.is_empty()
                        && cell.contains(&format!("`{parent}"))
                        && cell.contains(&format!(", `{key}`")))
            });
            assert!(listed, "docs/OPERATIONS.md has no row for {full}");
        }
    }

    /// The keys' defaults are the values the transports had built in.
    #[test]
    fn key_defaults_match_the_transports_own() {
        use crate::transport::verbs::UdLinkConfig;
        let c = Config::default();
        assert_eq!(c.verbs.ud_recv_depth, UdLinkConfig::DEFAULT_RECV_DEPTH);
        assert_eq!(c.verbs.ud_send_depth, UdLinkConfig::DEFAULT_SEND_DEPTH);
        let s = c.stream("x");
        let core = crate::recovery::SubscriberConfig::new(0);
        assert_eq!(
            (s.nak_delay, s.line_grace, s.line_timeout),
            (core.nak_delay, core.line_grace, core.line_timeout)
        );
    }

    #[test]
    fn file_checks_find_a_missing_directory_and_a_bad_key_file() {
        let dir = std::env::temp_dir().join(format!("mdbus-check-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("md.key");
        std::fs::write(&key, "00".repeat(32)).unwrap();
        let text = |mode: &str| {
            format!(
                "transport = \"shm\"\n[shm]\ndir = \"{}\"\n[streams.md]\nkey_file = \"{}\"\n",
                dir.join(mode).display(),
                key.display()
            )
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir.join("shm")).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let private = Config::from_toml_str(&text("shm"), "f.toml").unwrap();
        let ok = private.check_files("f.toml", "");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = private.check_files("f.toml", "bus.").unwrap_err();
        let missing = Config::from_toml_str(&text("none"), "f.toml").unwrap();
        let no_dir = missing.check_files("f.toml", "").unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(ok, Ok(()));
        assert_eq!(open.key, "bus.streams.md.key_file");
        assert!(
            open.message.contains("readable or writable by others"),
            "{open}"
        );
        assert_eq!(no_dir.key, "shm.dir");
        assert!(
            no_dir.message.ends_with("none is not a directory"),
            "{no_dir}"
        );
    }

    #[test]
    fn a_huge_config_file_is_refused_before_it_is_parsed() {
        let path = std::env::temp_dir().join(format!("mdbus-huge-{}.toml", std::process::id()));
        let comment = format!("# {}\n", "x".repeat(1000));
        std::fs::write(&path, comment.repeat(1100)).unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains("is larger than 1048576 bytes"), "{err}");
    }
}
