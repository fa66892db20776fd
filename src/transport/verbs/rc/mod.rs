//! Sessions over RC queue pairs, connected through rdma_cm.
//!
//! Each end owns one event channel, one cm id, one protection domain, two
//! completion queues (sends, receives), three registered pools and one RC
//! queue pair. Nothing is shared between handles; the handle is `Send` and
//! its owner thread polls everything itself. The exception is an acceptor
//! with `receive = "shared"` (`shared`): its sessions share one domain,
//! shared receive queue and receive completion queue, and one thread.
//!
//! Messages are the 24-byte [`wire`](crate::wire) header and the payload,
//! one `SEND` each. `try_claim` hands out the payload area of the send slot
//! the next request will use (slot `index % depth` of the registered send
//! pool); `commit` writes the header in front and posts it, inline when
//! header and payload fit the granted inline size. Only every Nth send asks
//! for a completion ([`SendQueue`]); completions are reaped only when the
//! send queue is full.
//!
//! Flow control is credit based ([`credit`](super::credit)): each side
//! RDMA-writes the count of receive buffers it has ever posted into a word
//! of the peer's registered control block, after every repost batch. A
//! one-sided write consumes no receive buffer, so credit updates need no
//! credit themselves, and a sender waiting for room sees them with a plain
//! load, without polling its receive queue. Closing in order writes a second
//! word, the number of messages sent plus one, and waits for that write to
//! complete before disconnecting: the peer reports `PeerClosed` once it has
//! delivered that many messages. A disconnect without that word is the
//! peer's death.
//!
//! That is `mode = "send"`. In the ring modes (`write`, `write-imm`) a
//! message is instead one RDMA WRITE into the next slot of a ring in the
//! peer's memory, found by polling the slot's last word or through a
//! write-with-immediate completion; see [`ring`] and docs/RDMA.md. A
//! sleeping `write`-mode receiver is woken by one immediate ([`wait`]).
//!
//! In parts: `hello` (the connect data), `setup` (the verbs objects of
//! one end), `connect` (accept, connect and retries), `data` (claim,
//! commit, poll and the credit writes) and `end` (how a session ends and
//! closes), `ring` (the ring modes' slot layout and receive side).

mod connect;
mod data;
mod end;
mod hello;
mod ring;
mod setup;
mod shared;
mod wait;

use std::time::{Duration, Instant};

use super::async_events::Watch;
use super::cm::{CmId, EventChannel};
use super::cq::Cq;
use super::credit::{Credits, Receipts};
use super::mr::Region;
use super::pd::Pd;
use super::qp::CmQp;
use super::recv_ring::RecvRing;
use super::send_queue::SendQueue;
use crate::config::SessionMode;
use end::End;
use ring::{ImmRecvs, RingIn};

/// Completions taken from a queue per `ibv_poll_cq` call.
const WC_BATCH: usize = 32;
/// Send-queue entries beyond `capacity`, for credit and close writes.
const SQ_SLACK: u32 = 8;
/// Control block offsets: the peer's receive-buffer count (u32), its
/// close word (u64: messages it sent + 1, 0 while open) and, in `write`
/// mode, its sleep generation (u64: bumped each time it arms a wake,
/// see [`wait`]).
const CTRL_CREDIT: usize = 0;
const CTRL_CLOSE: usize = 8;
const CTRL_SLEEP: usize = 16;
/// Bytes of the control block and of the out-words in the send pool.
const CTRL_LEN: usize = 64;
/// Bytes of the control block the peer may write: the credit, close and
/// sleep words, registered on their own (remote write nowhere else).
const CTRL_REMOTE_LEN: usize = 24;
/// Transport retries (timeouts without an acknowledgement) before a send
/// fails: the most the field allows.
const RETRY_COUNT: u8 = 7;
/// Receiver-not-ready retries. Credits guarantee a posted buffer for every
/// send, so an RNR is a bug: 0 makes it fail loudly instead of stalling.
pub const RNR_RETRY: u8 = 0;
/// Pause between connect attempts while the acceptor is not there yet.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// How long one set-up step may take in the first connect attempt even
/// when `connect_timeout` is shorter, so every connect makes one whole
/// attempt and can say how it failed.
const FIRST_STEP: Duration = Duration::from_secs(1);

/// One end of an RC session.
pub struct RcSession {
    /// How messages travel (send, write, write-imm).
    mode: SessionMode,
    /// Ring modes: our ring, which the peer writes.
    ring_in: Option<RingIn>,
    /// write-imm: receive requests without buffers.
    imm: Option<ImmRecvs>,
    /// write mode: the receiving side of wake-on-immediate.
    wake: Option<Box<wait::Wake>>,
    /// write mode, sending side: the peer's sleep generation last woken
    /// with an immediate.
    woke_gen: u64,
    /// Wake immediates posted (write mode, sending side).
    wake_imms_sent: u64,
    /// A wake found the send queue full: retried by the liveness checks.
    wake_owed: bool,
    /// Ring modes: the peer's ring (address, rkey, slot bytes, slots).
    peer_ring: u64,
    peer_ring_rkey: u32,
    peer_slot: u64,
    peer_depth: u64,
    /// Slots of our ring (our receive depth).
    ring_depth: u64,
    sq: SendQueue,
    credits: Credits,
    receipts: Receipts,
    next_seq: u64,
    expect_seq: u64,
    /// Largest payload: ours and the peer's receive buffers both hold it.
    max_message: usize,
    /// Granted inline bytes (0: inline off).
    inline_max: usize,
    /// Bytes per send and receive slot.
    slot: usize,
    sq_depth: u64,
    send_base: *mut u8,
    send_lkey: u32,
    /// Out-words in the send pool, sources of non-inline control writes.
    ctrl_out: *mut u8,
    /// Words the peer writes: credit count, close word, sleep generation.
    ctrl_in: *mut u8,
    peer_ctrl: u64,
    peer_rkey: u32,
    idle: u32,
    /// Naps in a row without data (a shared receive queue's sessions,
    /// and `write` mode while its sleep generation is in flight): each
    /// doubles the next one.
    naps: u32,
    /// When the liveness checks last ran (`clock::monotonic_ns`).
    last_check: u64,
    /// The last sequence whose send the peer's device acknowledged.
    acked: u64,
    /// Per send-queue entry (request index % depth): the last message
    /// sequence posted at or before that request.
    seq_at: Box<[u64]>,
    /// Signaled send completions reaped (successful ones).
    send_completions: u64,
    /// Work completions polled, of every status, from both queues.
    completions: u64,
    /// Work posted outside `qp`: buffers reposted to the acceptor's
    /// shared receive queue, and the receive rings of connect attempts
    /// that failed (the queue pair's own posts are counted by `qp`).
    extra_posted: super::VerbsWork,
    keepalive: KeepAlive,
    /// Connection requests refused (not allowed, wrong session, extra).
    rejected: u64,
    /// DISCONNECTED (or device removal) seen, or we disconnected.
    disconnected: bool,
    end: Option<End>,
    closed: bool,
    close_timeout: Duration,
    qpn: u32,
    peer_pid: u32,
    // Verbs objects, dropped in this order after Drop::drop has closed the
    // session: the QP, its queues and receive ring, then the cold part
    // (pools, PD, cm id, event channel).
    qp: CmQp,
    send_cq: Cq,
    recv_cq: Cq,
    ring: RecvRing,
    /// Set when the receives come through the acceptor's shared receive
    /// queue (`receive = "shared"`), which then replaces `recv_cq` and
    /// `ring`.
    shared: Option<shared::Member>,
    cold: Box<Cold>,
}

/// Keep-alive state, looked at only at the idle cadence.
struct KeepAlive {
    interval: Duration,
    timeout: Duration,
    /// Send requests posted when last looked, and since when unchanged.
    mark: u64,
    since: Instant,
    /// The outstanding keep-alive: its request index and when it was posted.
    pending: Option<(u64, Instant)>,
}

/// What the data path does not touch, boxed to keep the session small.
struct Cold {
    /// Async events of the device; dropped before the id holding the
    /// context open.
    watch: Watch,
    channel: String,
    device: String,
    port: u8,
    peer_addr: String,
    // Teardown order: pools, PD, id, channel.
    _send_mem: Region,
    _recv_mem: Option<Region>,
    _ctrl_mem: Region,
    _pd: Option<Pd>,
    id: CmId,
    events: EventChannel,
    /// The place among its acceptor's sessions of a session on a shared
    /// receive queue; dropped last, after the queue pair and the memory
    /// registered in the acceptor's domain.
    membership: Option<shared::Membership>,
}

// SAFETY: the session exclusively owns every verbs object and pool its raw
// pointers refer to; libibverbs and librdmacm objects may be used from any
// thread as long as no two use one at a time, which `&mut self` ensures
// (the type is not Sync).
unsafe impl Send for RcSession {}

impl std::fmt::Debug for RcSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcSession")
            .field("channel", &self.cold.channel)
            .field("device", &self.cold.device)
            .field("qp", &format_args!("{:#x}", self.qpn))
            .field("peer", &self.cold.peer_addr)
            .field("next_seq", &self.next_seq)
            .field("expect_seq", &self.expect_seq)
            .field("credits", &self.credits.available())
            .finish()
    }
}

impl RcSession {
    /// The RDMA device carrying the session.
    pub fn device(&self) -> &str {
        &self.cold.device
    }

    /// The local queue pair number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// Bytes (header included) a message may have to go inline.
    pub fn inline_limit(&self) -> usize {
        self.inline_max
    }

    /// The peer's process id, from its connect data.
    pub fn peer_pid(&self) -> u32 {
        self.peer_pid
    }

    /// Connection requests the acceptor refused while setting this session
    /// up or afterwards: peers not in `verbs.allow_peers`, peers of another
    /// session, and requests beyond the one served.
    pub fn rejected_peers(&self) -> u64 {
        self.rejected
    }

    /// Successful signaled send completions reaped so far (with
    /// `verbs.signal_every` N, one per N requests).
    pub fn send_completions(&self) -> u64 {
        self.send_completions
    }

    /// Verbs work this end has asked of the device so far: work requests
    /// and doorbells posted, completions polled.
    pub fn verbs_work(&self) -> super::VerbsWork {
        let mut w = self.qp.posted().plus(self.extra_posted);
        w.completions = self.completions;
        w
    }

    /// The last sequence sent whose delivery the peer's device has
    /// acknowledged, as far as completions reaped so far show.
    pub fn acked(&self) -> u64 {
        self.acked
    }
}

impl Drop for RcSession {
    fn drop(&mut self) {
        self.close_in_order();
        // Fields drop next, in declaration order: parts (QP, queues, pools,
        // PD), then the id, then the event channel.
    }
}
