//! The counters file of a [`Bus`](crate::Bus): one per bus, in a
//! well-known directory (`[counters] dir`, default `/dev/shm/mdbus`), so
//! `mdbus-stat` sees every bus on a host.
//!
//! Slots are handed out when a publisher, subscriber or session opens
//! (under a lock, at open time): each handle gets a consecutive range laid
//! out by its role ([`PUBLISHER`], [`SUBSCRIBER`], [`SESSION`]) and
//! labelled `ROLE.CHANNEL.COUNTER` (`sub.md.messages`; a second subscriber
//! of `md` in the same process is `sub.md#2`). The handle owns its range:
//! on the hot path it stores the values it already keeps with single
//! relaxed stores, no lock, no read-modify-write. When it closes, its
//! `open` gauge drops to 0 and the range waits for the next handle of the
//! same role and channel, whose counts continue from there (counters
//! never go backwards).
//!
//! The loss-recovery counters of datagram transports (retransmissions,
//! requests, drops by reason...) are copied in every
//! [`MIRROR_EVERY`] calls and when the handle closes, not per message.
//!
//! Errors the handles return to the application are counted and written to
//! the file's error log (see [`super::errorlog`]), as are events of the
//! RDMA devices ([`note_async_event`], [`note_completion_error`]) and the
//! first datagram dropped for each reason on each stream.

use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::{errorlog, CountersError, CountersFile, Kind};
use crate::config::CountersConfig;
use crate::error::Error;
use crate::recovery::frame::DropReason;
use crate::recovery::Counters;

/// Handles copy their loss-recovery counters in once per this many calls.
pub const MIRROR_EVERY: u64 = 1024;

const C: Kind = Kind::Counter;
const G: Kind = Kind::Gauge;

/// Slots of a stream publisher, in order (then [`PUBLISHER_RECOVERY`],
/// then one `drops_REASON` per [`DropReason`]).
pub const PUBLISHER: [(&str, Kind); 5] = [
    ("open", G),
    ("messages", C),
    ("bytes", C),
    ("errors", C),
    ("last_seq", G),
];
/// The publisher's loss-recovery slots.
pub const PUBLISHER_RECOVERY: [(&str, Kind); 8] = [
    ("datagrams_sent", C),
    ("heartbeats_sent", C),
    ("requests_received", C),
    ("requests_served", C),
    ("retransmitted", C),
    ("not_available_sent", C),
    ("retransmit_throttled", C),
    ("datagrams_received", C),
];
/// Slots of a stream subscriber, in order (then [`SUBSCRIBER_RECOVERY`],
/// then one `drops_REASON` per [`DropReason`]).
pub const SUBSCRIBER: [(&str, Kind); 11] = [
    ("open", G),
    ("messages", C),
    ("bytes", C),
    ("overruns", C),
    ("overrun_messages", C),
    ("gaps", C),
    ("gap_messages", C),
    ("source_gaps", C),
    ("source_gap_messages", C),
    ("errors", C),
    ("last_seq", G),
];
/// The subscriber's loss-recovery slots.
pub const SUBSCRIBER_RECOVERY: [(&str, Kind); 16] = [
    ("datagrams_received", C),
    ("duplicates", C),
    ("stale", C),
    ("gaps_detected", C),
    ("recovered", C),
    ("unrecoverable", C),
    ("requests_sent", C),
    ("messages_requested", C),
    ("not_available_received", C),
    ("heartbeats_received", C),
    ("wins_a", C),
    ("wins_b", C),
    ("restarts", C),
    ("publisher_down", C),
    ("join_skipped", C),
    ("reassembly_evictions", C),
];
/// A subscriber's replay slots, after its drops: how a late joiner
/// (`late_join = "archive"`, `archive::subscribe_from`) replayed the
/// archive and merged into the live stream (the
/// [`ReplayStats`](crate::archive::ReplayStats) figures; 0 for other
/// subscribers).
pub const SUBSCRIBER_REPLAY: [(&str, Kind); 8] = [
    ("replayed", C),
    ("replay_gaps", C),
    ("live_skipped", C),
    ("rejoins", C),
    ("merge_seq", G),
    ("replay_stalls", C),
    ("index_fallbacks", C),
    ("replay_restarts", C),
];
/// Slots of a stream's archive recorder, in order (`rec.STREAM.`).
pub const ARCHIVE: [(&str, Kind); 15] = [
    ("open", G),
    ("recorded", C),
    ("bytes", C),
    ("last_seq", G),
    ("overruns", C),
    ("overrun_messages", C),
    ("gaps", C),
    ("gap_messages", C),
    ("syncs", C),
    ("already_recorded", C),
    ("epochs", C),
    ("handoff_bytes", G),
    ("handoff_high_water", G),
    ("handoff_full", C),
    ("errors", C),
];
/// Slots of a stream's archive replay service, in order
/// (`replay.STREAM.`).
pub const REPLAY_SERVICE: [(&str, Kind); 11] = [
    ("open", G),
    ("requesters", C),
    ("requests", C),
    ("active", G),
    ("refused", C),
    ("bad_requests", C),
    ("throttled", C),
    ("messages", C),
    ("bytes", C),
    ("gaps", C),
    ("errors", C),
];
/// Slots of a session end, in order.
pub const SESSION: [(&str, Kind); 17] = [
    ("open", G),
    ("messages_sent", C),
    ("messages_received", C),
    ("bytes_sent", C),
    ("bytes_received", C),
    ("credit_stalls", C),
    ("errors", C),
    ("last_seq_sent", G),
    ("verbs_send_wrs", C),
    ("verbs_send_doorbells", C),
    ("verbs_recv_wrs", C),
    ("verbs_recv_doorbells", C),
    ("verbs_completions", C),
    ("verbs_receive_events", C),
    ("verbs_sleeps_armed", C),
    ("verbs_wake_imms_sent", C),
    ("verbs_wake_imms_received", C),
];
/// Slots of the bus itself (`bus.OWNER.COUNTER`).
pub const BUS: [(&str, Kind); 6] = [
    ("errors", C),
    ("async_events", C),
    ("completion_errors", C),
    ("errors_unlogged", C),
    ("mr_registrations", C),
    ("mr_deregistrations", C),
];

/// Publisher slot indices.
pub mod publisher {
    #![allow(missing_docs)]
    pub const OPEN: usize = 0;
    pub const MESSAGES: usize = 1;
    pub const BYTES: usize = 2;
    pub const ERRORS: usize = 3;
    pub const LAST_SEQ: usize = 4;
    pub const RECOVERY: usize = 5;
}
/// Subscriber slot indices.
pub mod subscriber {
    #![allow(missing_docs)]
    pub const OPEN: usize = 0;
    pub const MESSAGES: usize = 1;
    pub const BYTES: usize = 2;
    pub const OVERRUNS: usize = 3;
    pub const OVERRUN_MESSAGES: usize = 4;
    pub const GAPS: usize = 5;
    pub const GAP_MESSAGES: usize = 6;
    pub const SOURCE_GAPS: usize = 7;
    pub const SOURCE_GAP_MESSAGES: usize = 8;
    pub const ERRORS: usize = 9;
    pub const LAST_SEQ: usize = 10;
    pub const RECOVERY: usize = 11;
    /// The first of [`super::SUBSCRIBER_REPLAY`].
    pub const REPLAY: usize = RECOVERY + super::SUBSCRIBER_RECOVERY.len() + super::DROP_NAMES.len();
}
/// Session slot indices.
pub mod session {
    #![allow(missing_docs)]
    pub const OPEN: usize = 0;
    pub const MESSAGES_SENT: usize = 1;
    pub const MESSAGES_RECEIVED: usize = 2;
    pub const BYTES_SENT: usize = 3;
    pub const BYTES_RECEIVED: usize = 4;
    pub const CREDIT_STALLS: usize = 5;
    pub const ERRORS: usize = 6;
    pub const LAST_SEQ_SENT: usize = 7;
    /// The first of the five verbs work counts, in
    /// [`VerbsWork::values`](crate::transport::verbs::VerbsWork::values)
    /// order; copied in every `MIRROR_EVERY` calls and at close.
    pub const VERBS_WORK: usize = 8;
    /// The first of the four adaptive-waiting counts, in
    /// [`RcSession::wait_counts`](crate::transport::verbs::RcSession::wait_counts)
    /// order; copied in with the work counts.
    pub const VERBS_WAIT: usize = 13;
}
const BUS_ERRORS: usize = 0;
const BUS_ASYNC_EVENTS: usize = 1;
const BUS_COMPLETION_ERRORS: usize = 2;
const BUS_ERRORS_UNLOGGED: usize = 3;
const BUS_MR_REGISTRATIONS: usize = 4;
const BUS_MR_DEREGISTRATIONS: usize = 5;

/// The counter name of each drop reason, in [`DropReason::ALL`] order.
pub const DROP_NAMES: [&str; 24] = [
    "drops_truncated",
    "drops_bad_magic",
    "drops_bad_version",
    "drops_bad_kind",
    "drops_oversize",
    "drops_bad_length",
    "drops_bad_count",
    "drops_bad_sequence",
    "drops_bad_flags",
    "drops_bad_fragment",
    "drops_too_large",
    "drops_other_stream",
    "drops_old_epoch",
    "drops_unexpected_kind",
    "drops_unsolicited",
    "drops_reassembly_full",
    "drops_foreign_source",
    "drops_implausible_epoch",
    "drops_implausible_jump",
    "drops_unconfirmed_claim",
    "drops_unconfirmed_not_available",
    "drops_bad_mac",
    "drops_unauthenticated",
    "drops_over_budget",
];

/// The role of a handle, which fixes its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A stream's publisher (`pub.`).
    Publisher,
    /// A stream's subscriber (`sub.`).
    Subscriber,
    /// A session end (`sess.`).
    Session,
    /// A stream's archive recorder (`rec.`).
    Archive,
    /// A stream's archive replay service (`replay.`).
    ReplayService,
}

impl Role {
    fn scope(self) -> &'static str {
        match self {
            Role::Publisher => "pub",
            Role::Subscriber => "sub",
            Role::Session => "sess",
            Role::Archive => "rec",
            Role::ReplayService => "replay",
        }
    }

    /// Every slot of the role, in order.
    pub fn slots(self) -> Vec<(&'static str, Kind)> {
        let drops = DROP_NAMES.iter().map(|n| (*n, C));
        match self {
            Role::Publisher => PUBLISHER
                .iter()
                .chain(&PUBLISHER_RECOVERY)
                .copied()
                .chain(drops)
                .collect(),
            Role::Subscriber => SUBSCRIBER
                .iter()
                .chain(&SUBSCRIBER_RECOVERY)
                .copied()
                .chain(drops)
                .chain(SUBSCRIBER_REPLAY)
                .collect(),
            Role::Session => SESSION.to_vec(),
            Role::Archive => ARCHIVE.to_vec(),
            Role::ReplayService => REPLAY_SERVICE.to_vec(),
        }
    }
}

/// A range of slots handed out once and reused by the next handle of the
/// same role and channel.
#[derive(Debug)]
struct Group {
    key: String,
    base: usize,
    in_use: bool,
}

/// The counters file of one bus.
#[derive(Debug)]
pub struct BusCounters {
    file: CountersFile,
    owner: String,
    groups: Mutex<Vec<Group>>,
    /// Single-slot counters found by label (`wc.STATUS.completion_errors`,
    /// `port.DEV/PORT.open`).
    singles: Mutex<Vec<(String, usize)>>,
    bus_base: usize,
}

/// Live bus counters of this process, for events no handle owns (RDMA
/// async events, completion errors).
static LIVE: Mutex<Vec<Weak<BusCounters>>> = Mutex::new(Vec::new());
/// Buses this process created, for unique file names.
static CREATED: AtomicU64 = AtomicU64::new(0);

fn live() -> std::sync::MutexGuard<'static, Vec<Weak<BusCounters>>> {
    // The list stays consistent across a panic: carry on.
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// This process's name, from `/proc/self/comm`.
fn process_name() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "mdbus".into())
}

/// Whether an error is worth the error log: faults of transports, peers
/// and devices; not the application's own mistakes (a message too large,
/// a bad name) nor a peer's orderly close.
fn loggable(e: &Error) -> bool {
    !matches!(
        e,
        Error::MessageTooLarge { .. }
            | Error::BadName { .. }
            | Error::Config(_)
            | Error::PeerClosed { .. }
    )
}

impl BusCounters {
    /// Creates the counters file of a bus under `cfg.dir` (made 0700 when
    /// missing), named `PREFIX-PID-N.counters`.
    pub fn create(cfg: &CountersConfig, prefix: &str) -> Result<Arc<BusCounters>, CountersError> {
        if !cfg.dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&cfg.dir)
                .map_err(|e| CountersError::Io {
                    path: cfg.dir.clone(),
                    op: "mkdir",
                    source: e,
                })?;
        }
        let n = CREATED.fetch_add(1, Ordering::Relaxed);
        let path: PathBuf = cfg
            .dir
            .join(format!("{prefix}-{}-{n}.counters", std::process::id()));
        let mut owner = if cfg.name.is_empty() {
            process_name()
        } else {
            cfg.name.clone()
        };
        // Keep owner names within the header (and labels) at a char boundary.
        while owner.len() > super::MAX_OWNER_NAME {
            owner.pop();
        }
        let file =
            CountersFile::with_capacity(&path, &owner, cfg.slots, errorlog::DEFAULT_ENTRIES)?;
        let labels: Vec<String> = BUS
            .iter()
            .map(|(c, _)| format!("bus.{owner}.{c}"))
            .collect();
        let defs: Vec<(&str, Kind)> = labels
            .iter()
            .zip(BUS.iter())
            .map(|(l, (_, k))| (l.as_str(), *k))
            .collect();
        let bus_base = file.allocate(&defs)?;
        file.touch(crate::clock::now_ns());
        let me = Arc::new(BusCounters {
            file,
            owner,
            groups: Mutex::new(Vec::new()),
            singles: Mutex::new(Vec::new()),
            bus_base,
        });
        let mut l = live();
        l.retain(|w| w.strong_count() > 0);
        l.push(Arc::downgrade(&me));
        Ok(me)
    }

    /// The file.
    pub fn file(&self) -> &CountersFile {
        &self.file
    }

    /// Hands out the slots of a `role` handle of `channel`.
    pub fn open(self: &Arc<Self>, role: Role, channel: &str) -> Result<Slots, CountersError> {
        let key = format!("{}.{channel}", role.scope());
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let reuse = groups.iter().position(|g| g.key == key && !g.in_use);
        let index = match reuse {
            Some(i) => {
                groups[i].in_use = true;
                i
            }
            None => {
                let instance = groups.iter().filter(|g| g.key == key).count() + 1;
                let prefix = if instance == 1 {
                    key.clone()
                } else {
                    format!("{key}#{instance}")
                };
                let slots = role.slots();
                let labels: Vec<String> =
                    slots.iter().map(|(c, _)| format!("{prefix}.{c}")).collect();
                let defs: Vec<(&str, Kind)> = labels
                    .iter()
                    .zip(&slots)
                    .map(|(l, (_, k))| (l.as_str(), *k))
                    .collect();
                let base = self.file.allocate(&defs)?;
                groups.push(Group {
                    key,
                    base,
                    in_use: true,
                });
                groups.len() - 1
            }
        };
        let base = groups[index].base;
        drop(groups);
        // A reused range counts on from where the last handle left it:
        // the new handle's own counts are added to these.
        let offsets: Box<[u64]> = role
            .slots()
            .iter()
            .enumerate()
            .map(|(i, (_, kind))| match kind {
                Kind::Counter => self.file.get(base + i),
                Kind::Gauge => 0,
            })
            .collect();
        // Open: 1 (the slot 0 of every role).
        self.file.set(base, 1);
        self.file.touch(crate::clock::now_ns());
        let recovery = match role {
            Role::Publisher => Some(publisher::RECOVERY),
            Role::Subscriber => Some(subscriber::RECOVERY),
            Role::Session | Role::Archive | Role::ReplayService => None,
        };
        let errors = match role {
            Role::Publisher => publisher::ERRORS,
            Role::Subscriber => subscriber::ERRORS,
            Role::Session => session::ERRORS,
            Role::Archive => ARCHIVE.len() - 1,
            Role::ReplayService => REPLAY_SERVICE.len() - 1,
        };
        Ok(Slots {
            bus: Arc::clone(self),
            base,
            offsets,
            group: index,
            recovery,
            errors,
            ticks: 0,
            drops_seen: 0,
            hot: None,
            channel: format!(
                "{} `{channel}`",
                match role {
                    Role::Session => "session",
                    Role::Archive => "archive of stream",
                    Role::ReplayService => "replay service of stream",
                    Role::Publisher | Role::Subscriber => "stream",
                }
            ),
        })
    }

    /// The slot labelled `label` (a single counter), allocated on first use.
    fn single(&self, label: &str, kind: Kind) -> Option<usize> {
        let mut s = self.singles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, i)) = s.iter().find(|(l, _)| l == label) {
            return Some(*i);
        }
        match self.file.allocate(&[(label, kind)]) {
            Ok(i) => {
                s.push((label.to_string(), i));
                Some(i)
            }
            Err(e) => {
                log::debug!("counter {label} not created: {e}");
                None
            }
        }
    }

    /// Marks RDMA device `device` port `port` as used by this bus
    /// (`port.DEVICE/PORT.open`), so mdbus-stat shows its port counters.
    pub fn note_port(&self, device: &str, port: u8) {
        if let Some(i) = self.single(&format!("port.{device}/{port}.open"), G) {
            self.file.set(i, 1);
        }
    }

    /// Counts an error and logs its text; keeps the file on exit once it
    /// holds an error, so it can be read after the process ended.
    pub fn record_error(&self, text: &str) {
        self.file.add(self.bus_base + BUS_ERRORS, 1);
        if !self.file.record_error(text, crate::clock::now_ns()) {
            self.file.add(self.bus_base + BUS_ERRORS_UNLOGGED, 1);
        }
        self.file.keep_on_drop(true);
    }

    /// Counts a failed work completion by status and logs it.
    fn completion_error(&self, status: u32, text: &str) {
        self.file.add(self.bus_base + BUS_COMPLETION_ERRORS, 1);
        if let Some(i) = self.single(&format!("wc.{status}.completion_errors"), C) {
            self.file.add(i, 1);
        }
        self.record_error(text);
    }

    /// The owner name in the file.
    pub fn owner(&self) -> &str {
        &self.owner
    }
}

/// Records an asynchronous event of an RDMA device (a queue pair or port
/// error, a fatal device) in every bus of this process. Error path only.
pub fn note_async_event(text: &str) {
    for b in live().iter().filter_map(Weak::upgrade) {
        b.file.add(b.bus_base + BUS_ASYNC_EVENTS, 1);
        b.record_error(text);
    }
}

/// Records a failed work completion (`status`, described by `text`) in
/// every bus of this process, counted by status
/// (`wc.STATUS.completion_errors`). Error path only.
pub fn note_completion_error(status: u32, text: &str) {
    for b in live().iter().filter_map(Weak::upgrade) {
        b.completion_error(status, text);
    }
}

/// Which queue of a queue pair a failed work completion came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcQueue {
    /// The send queue (sends, RDMA writes).
    Send,
    /// The receive queue (or the shared receive queue it uses).
    Receive,
}

impl WcQueue {
    fn name(self) -> &'static str {
        match self {
            WcQueue::Send => "send",
            WcQueue::Receive => "receive",
        }
    }
}

/// The short name of work completion status `status` (`IBV_WC_RETRY_EXC_ERR`
/// is `retry_exc_err`), or its number when it has none; used in counter
/// labels, so it never contains a dot or a slash.
pub fn wc_status_name(status: u32) -> String {
    const NAMES: [&str; 24] = [
        "success",
        "loc_len_err",
        "loc_qp_op_err",
        "loc_eec_op_err",
        "loc_prot_err",
        "wr_flush_err",
        "mw_bind_err",
        "bad_resp_err",
        "loc_access_err",
        "rem_inv_req_err",
        "rem_access_err",
        "rem_op_err",
        "retry_exc_err",
        "rnr_retry_exc_err",
        "loc_rdd_viol_err",
        "rem_inv_rd_req_err",
        "rem_abort_err",
        "inv_eecn_err",
        "inv_eec_state_err",
        "fatal_err",
        "resp_timeout_err",
        "general_err",
        "tm_err",
        "tm_rndv_incomplete",
    ];
    match NAMES.get(status as usize) {
        Some(n) => (*n).to_string(),
        None => format!("status_{status}"),
    }
}

/// `s` with the characters that separate label parts (`.`, `/`) made `_`.
fn label_part(s: &str) -> String {
    s.replace(['.', '/'], "_")
}

/// Records a failed work completion of queue pair `qpn` on `device`, from
/// its `queue`, in every bus of this process: counted in total
/// (`bus.OWNER.completion_errors`), by status (`wc.STATUS.completion_errors`)
/// and per queue pair, queue and status
/// (`qp.DEVICE/QPN/QUEUE/STATUS.completion_errors`), and logged as `text`.
/// Error path only.
pub fn note_qp_completion_error(device: &str, qpn: u32, queue: WcQueue, status: u32, text: &str) {
    let label = format!(
        "qp.{}/{qpn:#x}/{}/{}.completion_errors",
        label_part(device),
        queue.name(),
        wc_status_name(status)
    );
    for b in live().iter().filter_map(Weak::upgrade) {
        if let Some(i) = b.single(&label, C) {
            b.file.add(i, 1);
        }
        b.completion_error(status, text);
    }
}

/// Records a completion queue error of `device` (the device's
/// `IBV_EVENT_CQ_ERR` async event, which is how a completion queue
/// overrun is reported) in every bus of this process: counted as
/// `cq.DEVICE.overflows` and as an async event, and logged. Error path only.
pub fn note_cq_overflow(device: &str, text: &str) {
    let label = format!("cq.{}.overflows", label_part(device));
    for b in live().iter().filter_map(Weak::upgrade) {
        if let Some(i) = b.single(&label, C) {
            b.file.add(i, 1);
        }
        b.file.add(b.bus_base + BUS_ASYNC_EVENTS, 1);
        b.record_error(text);
    }
}

/// Counts a memory registration (`registered`) or deregistration of an
/// RDMA device in every bus of this process: open and close time only.
pub fn note_memory_region(registered: bool) {
    let slot = if registered {
        BUS_MR_REGISTRATIONS
    } else {
        BUS_MR_DEREGISTRATIONS
    };
    for b in live().iter().filter_map(Weak::upgrade) {
        b.file.add(b.bus_base + slot, 1);
    }
}

/// The slots of one handle.
#[derive(Debug)]
pub struct Slots {
    bus: Arc<BusCounters>,
    base: usize,
    /// What each slot held when this handle got it (0 for gauges).
    offsets: Box<[u64]>,
    group: usize,
    recovery: Option<usize>,
    errors: usize,
    ticks: u64,
    /// Drop reasons already logged, one bit per [`DropReason::ALL`] index.
    drops_seen: u32,
    /// Three slots resolved once for [`Slots::set3`] (see [`Slots::resolve3`]).
    hot: Option<Hot3>,
    channel: String,
}

/// Three of a handle's words in the mapped file with their offsets, looked
/// up once: a per-message update is then a plain store each, with no
/// bounds check or offset lookup.
#[derive(Debug)]
struct Hot3 {
    /// The slots resolved.
    slots: [usize; 3],
    words: [NonNull<AtomicU64>; 3],
    offsets: [u64; 3],
}

// SAFETY: the words point into the counters file's mapping, which the
// `Arc<BusCounters>` of the `Slots` holding this keeps mapped for as long
// as this lives; they are only touched atomically, and `AtomicU64` is
// `Send` and `Sync`.
unsafe impl Send for Hot3 {}
// SAFETY: as for `Send`.
unsafe impl Sync for Hot3 {}

impl Slots {
    /// Resolves slots `i` for [`Slots::set3`]; when one is out of range,
    /// `set3` falls back to [`Slots::set`] (which ignores it).
    pub fn resolve3(&mut self, i: [usize; 3]) {
        let word = |k: usize| {
            let o = *self.offsets.get(i[k])?;
            let w = self.bus.file.slot(self.base + i[k])?;
            Some((NonNull::from(w), o))
        };
        self.hot = match (word(0), word(1), word(2)) {
            (Some(a), Some(b), Some(c)) => Some(Hot3 {
                slots: i,
                words: [a.0, b.0, c.0],
                offsets: [a.1, b.1, c.1],
            }),
            _ => None,
        };
    }

    /// Stores `values` in slots `i`, as [`Slots::set`] would (single
    /// writer: relaxed): plain stores when `i` is what [`Slots::resolve3`]
    /// was given (a compare of constants at the one call site), else
    /// through `set`.
    #[inline]
    pub fn set3(&self, i: [usize; 3], values: [u64; 3]) {
        match &self.hot {
            Some(h) if h.slots == i => {
                for ((w, o), v) in h.words.iter().zip(h.offsets).zip(values) {
                    // SAFETY: see `Hot3`: the mapping outlives `self`.
                    let w = unsafe { w.as_ref() };
                    w.store(o.wrapping_add(v), Ordering::Relaxed);
                }
            }
            _ => {
                for (i, v) in i.into_iter().zip(values) {
                    self.set(i, v);
                }
            }
        }
    }

    /// Stores `value` in the handle's slot `i` (single writer: relaxed).
    #[inline]
    pub fn set(&self, i: usize, value: u64) {
        if let Some(o) = self.offsets.get(i) {
            self.bus
                .file
                .set_relaxed(self.base + i, o.wrapping_add(value));
        }
    }

    /// Writes `text` to the bus's error log (a failure of the handle's
    /// owner that is not an [`Error`] returned to an application).
    pub fn record_error(&self, text: &str) {
        self.bus.record_error(text);
    }

    /// Stores `values` in the slots after `open` (slot 0), in the order of
    /// the role's slot list: for handles whose owner keeps its own
    /// counters and copies them in now and then.
    pub fn set_after_open(&self, values: &[u64]) {
        for (i, v) in values.iter().enumerate() {
            self.set(i + 1, *v);
        }
    }

    /// The value of the handle's slot `i`.
    pub fn get(&self, i: usize) -> u64 {
        self.bus.file.get(self.base + i)
    }

    /// True once per [`MIRROR_EVERY`] calls: time to copy slow counters.
    #[inline]
    pub fn tick(&mut self) -> bool {
        self.ticks = self.ticks.wrapping_add(1);
        let due = self.ticks % MIRROR_EVERY == 0;
        if due {
            // The file's "last update", which mdbus-stat list shows: one
            // clock read per MIRROR_EVERY calls.
            self.bus.file.touch(crate::clock::now_ns());
        }
        due
    }

    /// Counts an error returned to the application and logs it.
    #[cold]
    pub fn error(&self, e: &Error) {
        // Shared with nothing but this handle's thread; an add keeps it
        // independent of the offsets.
        self.bus.file.add(self.base + self.errors, 1);
        if loggable(e) {
            self.bus.record_error(&e.to_string());
        }
    }

    /// Copies a datagram transport's loss-recovery counters in, and logs
    /// the first drop of each reason.
    pub fn mirror(&mut self, c: &Counters) {
        let Some(r) = self.recovery else { return };
        let pub_values = [
            c.datagrams_sent,
            c.heartbeats_sent,
            c.requests_received,
            c.requests_served,
            c.retransmitted,
            c.not_available_sent,
            c.retransmit_throttled,
            c.datagrams_received,
        ];
        let sub_values = [
            c.datagrams_received,
            c.duplicates,
            c.stale,
            c.gaps_detected,
            c.recovered,
            c.unrecoverable,
            c.requests_sent,
            c.messages_requested,
            c.not_available_received,
            c.heartbeats_received,
            c.wins_a,
            c.wins_b,
            c.restarts,
            c.publisher_down,
            c.join_skipped,
            c.reassembly_evictions,
        ];
        // No allocation: this runs from the polling loop.
        let values: &[u64] = if r == publisher::RECOVERY {
            &pub_values
        } else {
            &sub_values
        };
        for (k, v) in values.iter().enumerate() {
            self.set(r + k, *v);
        }
        let drops = r + values.len();
        for (k, reason) in DropReason::ALL.iter().enumerate() {
            let n = c.drops.get(*reason);
            self.set(drops + k, n);
            if n > 0 && self.drops_seen & (1 << k) == 0 {
                self.drops_seen |= 1 << k;
                self.bus.record_error(&format!(
                    "{}: dropped a datagram: {reason} (counted in {})",
                    self.channel, DROP_NAMES[k]
                ));
            }
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.set(0, 0);
        let mut groups = self.bus.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = groups.get_mut(self.group) {
            g.in_use = false;
        }
    }
}

impl Drop for BusCounters {
    fn drop(&mut self) {
        let mut l = live();
        l.retain(|w| w.strong_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::CountersReader;

    fn config(test: &str) -> (crate::Config, PathBuf) {
        let dir = std::env::temp_dir().join(format!("mdbus-reg-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = crate::Config {
            transport: crate::TransportKind::Shm,
            shm: crate::config::ShmConfig {
                dir: dir.clone(),
                prefix: format!("reg-{test}"),
                ..Default::default()
            },
            counters: CountersConfig {
                dir: dir.join("counters"),
                name: format!("test-{test}"),
                ..Default::default()
            },
            ..Default::default()
        };
        (cfg, dir)
    }

    fn bus(test: &str) -> (crate::Bus, PathBuf) {
        let (cfg, dir) = config(test);
        (crate::Bus::new(cfg).unwrap(), dir)
    }

    fn value(r: &CountersReader, label: &str) -> u64 {
        let i = r
            .index_of(label)
            .unwrap_or_else(|| panic!("no {label} in {:?}", r.labels()));
        r.value(i).unwrap()
    }

    #[test]
    fn every_bus_counts_its_streams_and_sessions_in_its_file() {
        let (bus, dir) = bus("streams");
        let path = bus.counters_path().unwrap().to_path_buf();
        assert_eq!(path.parent().unwrap(), dir.join("counters"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let mut p = bus.publisher("md").unwrap();
        let mut s = bus.subscriber("md").unwrap();
        for m in [&b"abc"[..], b"defgh", b"i"] {
            p.publish(m).unwrap();
        }
        let mut got = 0;
        while got < 3 {
            got += s.poll(|_| {}).unwrap();
        }
        let mut r = CountersReader::open(&path).unwrap();
        assert_eq!(r.owner().name, "test-streams");
        assert!(
            r.updated_ns() >= r.owner().start_time_ns,
            "opening a handle is an update"
        );
        assert_eq!(value(&r, "pub.md.messages"), 3);
        assert_eq!(value(&r, "pub.md.bytes"), 9);
        assert_eq!(value(&r, "pub.md.last_seq"), 3);
        assert_eq!(value(&r, "pub.md.open"), 1);
        assert_eq!(value(&r, "sub.md.messages"), 3);
        assert_eq!(value(&r, "sub.md.bytes"), 9);
        assert_eq!(value(&r, "sub.md.last_seq"), 3);
        assert_eq!(value(&r, "sub.md.gaps"), 0);
        let kind = |l: &str| r.kind(r.index_of(l).unwrap()).unwrap();
        assert_eq!(kind("sub.md.last_seq"), Kind::Gauge);
        assert_eq!(kind("sub.md.open"), Kind::Gauge);
        assert_eq!(kind("sub.md.messages"), Kind::Counter);
        assert_eq!(kind("sub.md.drops_bad_mac"), Kind::Counter);

        // A second subscriber at once has its own slots; a later one takes
        // over a closed one's and counts on.
        let s2 = bus.subscriber("md").unwrap();
        assert!(r.refresh().unwrap());
        assert_eq!(value(&r, "sub.md#2.open"), 1);
        drop(s);
        assert_eq!(value(&r, "sub.md.open"), 0);
        let before = r.len();
        let mut s3 = bus.subscriber("md").unwrap();
        assert!(
            !r.refresh().unwrap(),
            "the closed subscriber's slots are reused"
        );
        assert_eq!(r.len(), before);
        assert_eq!(value(&r, "sub.md.open"), 1);
        p.publish(b"j").unwrap();
        while s3.poll(|_| {}).unwrap() == 0 {}
        assert_eq!(value(&r, "sub.md.messages"), 4, "counts never go backwards");
        drop((s2, s3, p));

        // Sessions: both ends in one process are two instances.
        let acceptor = std::thread::spawn({
            let bus = bus.clone();
            move || bus.session_accept("orders").unwrap()
        });
        let mut client = bus.session_connect("orders").unwrap();
        let mut server = acceptor.join().unwrap();
        client.send(b"new order").unwrap();
        while server.poll(|_| {}).unwrap() == 0 {}
        r.refresh().unwrap();
        let sent =
            value(&r, "sess.orders.messages_sent") + value(&r, "sess.orders#2.messages_sent");
        let received = value(&r, "sess.orders.messages_received")
            + value(&r, "sess.orders#2.messages_received");
        assert_eq!((sent, received), (1, 1));
        let bytes = value(&r, "sess.orders.bytes_sent") + value(&r, "sess.orders#2.bytes_sent");
        assert_eq!(bytes, 9);
        // The verbs work slots are there on every transport, 0 off verbs.
        assert_eq!(client.verbs_work(), None);
        for c in [
            "send_wrs",
            "send_doorbells",
            "recv_wrs",
            "recv_doorbells",
            "completions",
        ] {
            assert_eq!(value(&r, &format!("sess.orders.verbs_{c}")), 0, "{c}");
        }
        drop((client, server));
        drop(bus);
        assert!(!path.exists(), "a bus without errors removes its file");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn errors_returned_to_the_application_are_logged_and_the_file_kept() {
        let (bus, dir) = bus("errors");
        let path = bus.counters_path().unwrap().to_path_buf();
        let c = bus.counters().unwrap();
        let slots = c.open(Role::Publisher, "md").unwrap();
        let e = Error::PeerLost {
            channel: "stream `md`".into(),
            peer: "10.0.0.1:7000".into(),
            reason: "connection reset".into(),
        };
        slots.error(&e);
        slots.error(&e);
        slots.error(&Error::MessageTooLarge {
            len: 10,
            max: 5,
            channel: "stream `md`".into(),
        });
        c.completion_error(
            12,
            "a send failed: work completion status 12 (transport retry counter exceeded)",
        );
        note_memory_region(true);
        note_memory_region(true);
        note_memory_region(false);
        let r = CountersReader::open(&path).unwrap();
        assert_eq!(value(&r, "pub.md.errors"), 3, "every error is counted");
        // At least: RDMA tests running beside this one count theirs too.
        assert!(value(&r, "bus.test-errors.mr_registrations") >= 2);
        assert!(value(&r, "bus.test-errors.mr_deregistrations") >= 1);
        assert_eq!(value(&r, "wc.12.completion_errors"), 1);
        let log = r.errors();
        assert_eq!(
            log.len(),
            2,
            "the caller's own mistake is not logged: {log:?}"
        );
        assert_eq!(log[0].text, e.to_string());
        assert_eq!(log[0].count, 2);
        assert!(log[0].first_ns <= log[0].last_ns);
        assert!(log[1].text.contains("retry counter exceeded"));
        drop(slots);
        drop(bus);
        assert!(
            path.exists(),
            "a file holding errors stays for post-mortem reading"
        );
        let after = CountersReader::open_unchecked(&path).unwrap();
        assert_eq!(after.errors().len(), 2);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Failed completions fed in as the verbs transport reports them are
    /// counted per queue pair, queue and status, in total and by status;
    /// a CQ error event counts as an overflow of its device.
    #[test]
    fn completion_errors_are_counted_per_queue_pair_and_status() {
        let (bus, dir) = bus("qperr");
        let path = bus.counters_path().unwrap().to_path_buf();
        note_qp_completion_error("rxe0", 0x11, WcQueue::Send, 12, "send retry exceeded");
        note_qp_completion_error("rxe0", 0x11, WcQueue::Send, 12, "send retry exceeded");
        note_qp_completion_error("rxe0", 0x11, WcQueue::Send, 5, "flushed");
        note_qp_completion_error("rxe0", 0x12, WcQueue::Receive, 1, "local length");
        note_qp_completion_error("mlx5.1", 0x11, WcQueue::Receive, 99, "odd status");
        note_cq_overflow("rxe0", "a completion queue failed (IBV_EVENT_CQ_ERR)");
        note_cq_overflow("rxe0", "a completion queue failed (IBV_EVENT_CQ_ERR)");
        let r = CountersReader::open(&path).unwrap();
        assert_eq!(
            value(&r, "qp.rxe0/0x11/send/retry_exc_err.completion_errors"),
            2
        );
        assert_eq!(
            value(&r, "qp.rxe0/0x11/send/wr_flush_err.completion_errors"),
            1
        );
        assert_eq!(
            value(&r, "qp.rxe0/0x12/receive/loc_len_err.completion_errors"),
            1
        );
        assert_eq!(
            value(&r, "qp.mlx5_1/0x11/receive/status_99.completion_errors"),
            1
        );
        assert!(r
            .index_of("qp.rxe0/0x12/send/retry_exc_err.completion_errors")
            .is_none());
        assert_eq!(value(&r, "cq.rxe0.overflows"), 2);
        // Other RDMA tests in this process may count theirs too.
        assert!(value(&r, "wc.12.completion_errors") >= 2);
        assert!(value(&r, "bus.test-qperr.completion_errors") >= 5);
        assert!(value(&r, "bus.test-qperr.async_events") >= 2);
        let kind = r.kind(r.index_of("cq.rxe0.overflows").unwrap()).unwrap();
        assert_eq!(kind, Kind::Counter);
        assert!(r
            .errors()
            .iter()
            .any(|e| e.text.contains("IBV_EVENT_CQ_ERR") && e.count == 2));
        drop(bus);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn completion_status_names_have_no_separators() {
        assert_eq!(wc_status_name(0), "success");
        assert_eq!(wc_status_name(5), "wr_flush_err");
        assert_eq!(wc_status_name(12), "retry_exc_err");
        assert_eq!(wc_status_name(13), "rnr_retry_exc_err");
        assert_eq!(wc_status_name(22), "tm_err");
        assert_eq!(wc_status_name(1000), "status_1000");
        assert_eq!(label_part("a.b/c"), "a_b_c");
    }

    #[test]
    fn counters_keys_are_checked() {
        let c = crate::Config::from_toml_str(
            "[counters]\nenabled = false\ndir = \"/tmp/x\"\nslots = 64\nname = \"feed\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            (
                c.counters.enabled,
                c.counters.slots,
                c.counters.name.as_str()
            ),
            (false, 64, "feed")
        );
        for (text, key) in [
            ("[counters]\ndir = \"relative\"\n", "counters.dir"),
            ("[counters]\nslots = 70000\n", "counters.slots"),
            ("[counters]\nslots = 1\nbogus = 1\n", "line 3"),
        ] {
            let e = crate::Config::from_toml_str(text, "t.toml").unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("t.toml: {key}: ")),
                "{e}"
            );
        }
        assert_eq!(
            crate::Config::default().counters.dir,
            PathBuf::from("/dev/shm/mdbus")
        );
    }

    #[test]
    fn a_disabled_bus_has_no_file() {
        let (mut cfg, dir) = config("off");
        cfg.counters.enabled = false;
        let bus = crate::Bus::new(cfg).unwrap();
        assert!(bus.counters_path().is_none());
        assert!(!dir.join("counters").exists());
        std::fs::remove_dir_all(&dir).ok();
    }
}
