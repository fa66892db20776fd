//! Sessions over RC queue pairs, connected through rdma_cm.
//!
//! Each end owns one event channel, one cm id, one protection domain, two
//! completion queues (sends, receives), three registered pools and one RC
//! queue pair. Nothing is shared between handles; the handle is `Send` and
//! its owner thread polls everything itself.
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

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use verbs_sys::{
    ibv_send_wr, ibv_sge, ibv_wc, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC,
    IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
    IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
    RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_REJECTED,
    RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_PS_TCP,
};

use super::cm::{CmEvent, CmId, ConnParam, EventChannel};
use super::cq::Cq;
use super::credit::{repost_batch, Credits, Receipts};
use super::mr::Region;
use super::pd::Pd;
use super::qp::{Caps, CmQp};
use super::recv_ring::RecvRing;
use super::send_queue::SendQueue;
use super::{device, errors, lib, Lib};
use crate::config::{SessionConfig, VerbsConfig};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transport::shm::{slot_size, CHECK_EVERY};
use crate::transport::SessionEnd;
use crate::wire::{Header, HEADER_LEN};

/// Completions taken from a queue per `ibv_poll_cq` call.
const WC_BATCH: usize = 32;
/// Send-queue entries beyond `capacity`, for credit and close writes.
const SQ_SLACK: u32 = 8;
/// Control block offsets: the peer's receive-buffer count (u32) and its
/// close word (u64: messages it sent + 1, 0 while open).
const CTRL_CREDIT: usize = 0;
const CTRL_CLOSE: usize = 8;
/// Bytes of the control block and of the out-words in the send pool.
const CTRL_LEN: usize = 64;
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

/// What each end tells the other in the rdma_cm private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hello {
    pid: u32,
    /// FNV-1a of the session name: both ends must mean the same session.
    name_hash: u32,
    /// Receive buffers posted before connecting: the initial credits.
    recv_depth: u32,
    /// Largest payload a receive buffer holds.
    max_payload: u32,
    /// The control block the peer writes credits and close into.
    ctrl_rkey: u32,
    ctrl_addr: u64,
}

const HELLO_MAGIC: &[u8; 4] = b"MDBr";
const HELLO_VERSION: u16 = 1;
const HELLO_LEN: usize = 40;

impl Hello {
    fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.name_hash.to_le_bytes());
        b[16..20].copy_from_slice(&self.recv_depth.to_le_bytes());
        b[20..24].copy_from_slice(&self.max_payload.to_le_bytes());
        b[24..28].copy_from_slice(&self.ctrl_rkey.to_le_bytes());
        b[32..40].copy_from_slice(&self.ctrl_addr.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Hello, String> {
        // IB CM pads private data, so more bytes than ours are normal.
        if b.len() < HELLO_LEN || &b[0..4] != HELLO_MAGIC {
            return Err(
                "the peer is not an mdbus verbs session (no hello in its connect data)".into(),
            );
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let version = u16_at(4);
        if version != HELLO_VERSION {
            return Err(format!(
                "the peer speaks session protocol version {version}, this build version {HELLO_VERSION}; run the same mdbus version on both ends"
            ));
        }
        let h = Hello {
            pid: u32_at(8),
            name_hash: u32_at(12),
            recv_depth: u32_at(16),
            max_payload: u32_at(20),
            ctrl_rkey: u32_at(24),
            ctrl_addr: u64::from_le_bytes(b[32..40].try_into().expect("8 bytes")),
        };
        if h.recv_depth == 0 || h.max_payload == 0 {
            return Err("the peer announced no receive buffers".into());
        }
        Ok(h)
    }
}

fn name_hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// How a session came to an end, kept so every later call reports it.
#[derive(Debug, Clone)]
enum End {
    /// A work completion or post failed.
    Failed {
        op: &'static str,
        detail: String,
        errno: Option<i32>,
    },
    /// The transport gave up on the peer (no acknowledgements).
    Lost(String),
    /// The peer broke the protocol.
    Protocol(String),
}

/// The verbs objects of one end, in teardown order: the queue pair before
/// the queues and pools it points into, everything before the protection
/// domain. The cm id and event channel are held by the owner and dropped
/// after these.
struct Parts {
    qp: CmQp,
    send_cq: Cq,
    recv_cq: Cq,
    send_mem: Region,
    // Held for its registration; reached through `ring`.
    _recv_mem: Region,
    ctrl_mem: Region,
    // Held so it is deallocated last.
    _pd: Pd,
    ring: RecvRing,
    caps: Caps,
    device: String,
    slot: usize,
    recv_depth: u32,
    max_message: usize,
}

impl Parts {
    /// Creates and registers everything on `id`'s device and posts every
    /// receive buffer, so the peer may send as soon as it is connected.
    fn build(
        lib: Lib,
        id: &CmId,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        name: &str,
    ) -> Result<Parts> {
        let device = id.device_name(lib.verbs);
        super::note_overrides(&format!("session `{name}`"), vcfg, &device);
        let ctx = id.context();
        let recv_depth = u32::try_from(cfg.capacity).unwrap_or(u32::MAX);
        let sq_depth = recv_depth.saturating_add(SQ_SLACK);
        let slot = slot_size(cfg.max_message);
        let mut attr = verbs_sys::ibv_device_attr::default();
        // SAFETY: a resolved id's context is live while the id is.
        let rc = unsafe { (lib.verbs.ibv_query_device)(ctx, &mut attr) };
        if rc != 0 {
            return Err(errors::ret(
                "ibv_query_device",
                (device.as_str(), id.port()),
                None,
                rc,
            ));
        }
        let key = format!("sessions.{name}.capacity");
        device::check_limit(
            "the send queue",
            sq_depth as usize,
            attr.max_qp_wr,
            &device,
            &key,
        )?;
        device::check_limit(
            "the completion queues",
            sq_depth as usize,
            attr.max_cqe,
            &device,
            &key,
        )?;

        // SAFETY: every object is created on
        // the id's live context and stored in `Parts`, whose field order
        // drops each before what it depends on; the id outlives `Parts`
        // (the caller keeps it and drops it later).
        let pd = unsafe { Pd::alloc(lib.verbs, ctx, &device) }?;
        // SAFETY: as above.
        let send_cq = unsafe { Cq::new(lib.verbs, ctx, sq_depth as usize, &device) }?;
        // SAFETY: as above.
        let recv_cq = unsafe { Cq::new(lib.verbs, ctx, recv_depth as usize, &device) }?;
        // The NIC only reads the send pool: no access flags. The receive
        // pool takes local writes. Only the small control block may be
        // written by the peer.
        // SAFETY: as above.
        let send_mem = unsafe {
            Region::new(
                lib.verbs,
                &pd,
                sq_depth as usize * slot + CTRL_LEN,
                0,
                "the send pool",
                &device,
            )
        }?;
        // SAFETY: as above.
        let recv_mem = unsafe {
            Region::new(
                lib.verbs,
                &pd,
                recv_depth as usize * slot,
                IBV_ACCESS_LOCAL_WRITE,
                "the receive pool",
                &device,
            )
        }?;
        // SAFETY: as above.
        let ctrl_mem = unsafe {
            Region::new(
                lib.verbs,
                &pd,
                CTRL_LEN,
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                "the control block",
                &device,
            )
        }?;
        let mut inline = if vcfg.inline { vcfg.max_inline } else { 0 };
        let (mut qp, caps) = loop {
            let want = Caps {
                send_wr: sq_depth,
                recv_wr: recv_depth,
                inline,
            };
            // SAFETY: as above; the PD and queues are on the id's device.
            match unsafe {
                CmQp::create(
                    lib.cm, id, &pd, &send_cq, &recv_cq, IBV_QPT_RC, want, &device,
                )
            } {
                Ok(x) => break x,
                // Some devices refuse an inline size they cannot do rather
                // than grant less: ask for less.
                Err(e) if inline > 0 => {
                    log::info!(
                        "session `{name}`: {e}; retrying with {} bytes inline",
                        inline / 2
                    );
                    inline /= 2;
                }
                Err(e) => return Err(e),
            }
        };
        let mut ring = RecvRing::new(&recv_mem, recv_depth, slot);
        // SAFETY: at start-up no buffer has been posted or handed out.
        if let Err(e) = unsafe { ring.post(&mut qp, recv_depth) } {
            return Err(errors::os(
                "ibv_post_recv of the receive ring",
                &device,
                Some(qp.num()),
                e,
            ));
        }
        Ok(Parts {
            qp,
            send_cq,
            recv_cq,
            send_mem,
            _recv_mem: recv_mem,
            ctrl_mem,
            _pd: pd,
            ring,
            caps,
            device,
            slot,
            recv_depth,
            max_message: cfg.max_message,
        })
    }

    fn hello(&self, name: &str) -> Hello {
        Hello {
            pid: std::process::id(),
            name_hash: name_hash(name),
            recv_depth: self.recv_depth,
            max_payload: self.max_message as u32,
            ctrl_rkey: self.ctrl_mem.rkey(),
            ctrl_addr: self.ctrl_mem.ptr() as u64,
        }
    }
}

/// One end of an RC session.
pub struct RcSession {
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
    /// Words the peer writes: credit count and close word.
    ctrl_in: *mut u8,
    peer_ctrl: u64,
    peer_rkey: u32,
    idle: u32,
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
    cold: Box<Cold>,
}

/// What the data path does not touch, boxed to keep the session small.
struct Cold {
    channel: String,
    device: String,
    port: u8,
    peer_addr: String,
    // Teardown order: pools, PD, id, channel.
    _send_mem: Region,
    _recv_mem: Region,
    _ctrl_mem: Region,
    _pd: Pd,
    id: CmId,
    events: EventChannel,
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

fn session_addr(channel: &str, cfg: &SessionConfig, name: &str) -> Result<SocketAddr> {
    if cfg.address.is_empty() {
        return Err(Error::Missing {
            channel: channel.into(),
            key: format!("sessions.{name}.address"),
            transport: "verbs",
        });
    }
    cfg.address.parse().map_err(|_| Error::NoPeer {
        channel: channel.into(),
        address: cfg.address.clone(),
        reason: "not an address such as 10.0.0.1:7000".into(),
    })
}

/// The remote address of a connected id, for messages.
fn peer_of(id: &CmId) -> String {
    // SAFETY: the id is live; the address lies inside it.
    let sa = unsafe { verbs_sys::rdma_get_peer_addr(id.as_raw()) };
    // SAFETY: rdma_cm fills the peer address as a sockaddr_in or _in6
    // according to its family.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*sa.cast::<verbs_sys::sockaddr_in>();
                let ip = std::net::Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes());
                format!("{ip}:{}", u16::from_be(s.sin_port))
            }
            libc::AF_INET6 => {
                let s = &*sa.cast::<verbs_sys::sockaddr_in6>();
                let raw: [u8; 16] = std::ptr::addr_of!(s.sin6_addr).cast::<[u8; 16]>().read();
                format!(
                    "[{}]:{}",
                    std::net::Ipv6Addr::from(raw),
                    u16::from_be(s.sin6_port)
                )
            }
            _ => "(unknown address)".into(),
        }
    }
}

/// "REJECTED (status 8: nobody listens on that port)".
fn describe_event(ev: &CmEvent) -> String {
    let what = match (ev.kind, ev.status) {
        (RDMA_CM_EVENT_REJECTED, 8) => ": nobody listens on that port".to_string(),
        (RDMA_CM_EVENT_REJECTED, 28) => ": refused by the acceptor".to_string(),
        (_, s) if s < 0 => format!(": {}", errors::describe_errno(-s)),
        _ => String::new(),
    };
    format!("{} (status {}{what})", ev.name(), ev.status)
}

/// Why one connect attempt failed.
enum Attempt {
    /// Worth trying again until the deadline (no acceptor yet): what
    /// happened, and whether rdma_cm said so (`false`: the wait for its
    /// answer ran out).
    Retry(String, bool),
    /// Will not get better.
    Fatal(Error),
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Self {
        Attempt::Fatal(e)
    }
}

/// Waits for an event of `id` until `deadline`; events of other ids (the
/// listener's, stale ones) are skipped. `None` on timeout.
fn wait_event(events: &EventChannel, id: &CmId, deadline: Instant) -> Result<Option<CmEvent>> {
    loop {
        match events.next_until(deadline)? {
            Some(ev) if ev.id == id.as_raw() => return Ok(Some(ev)),
            Some(ev) => log::debug!("rdma_cm: skipping {} of another id", ev.name()),
            None => return Ok(None),
        }
    }
}

impl RcSession {
    /// Listens on `cfg.address` and waits up to `cfg.connect_timeout` for
    /// the initiator of session `name`.
    pub fn accept(name: &str, cfg: &SessionConfig, vcfg: &VerbsConfig) -> Result<RcSession> {
        let lib = lib()?;
        let channel = format!("session `{name}`");
        let addr = session_addr(&channel, cfg, name)?;
        let deadline = Instant::now() + cfg.connect_timeout;
        let events = EventChannel::new(lib.cm)?;
        // SAFETY: `events` outlives the listener (declared before it, so
        // dropped after).
        let listener = unsafe { CmId::new(lib.cm, &events, RDMA_PS_TCP) }?;
        listener.bind(addr)?;
        listener.listen(addr)?;
        let timeout = || Error::Timeout {
            channel: channel.clone(),
            what: "a peer connecting",
            waited_ms: cfg.connect_timeout.as_millis() as u64,
        };
        let (id, peer) = loop {
            let Some(ev) = events.next_until(deadline)? else {
                return Err(timeout());
            };
            if ev.kind != RDMA_CM_EVENT_CONNECT_REQUEST {
                log::debug!("{channel}: rdma_cm {} while listening", ev.name());
                continue;
            }
            // SAFETY: a connect request's id is new and ours to own; its
            // channel is `events`, which the session keeps longer.
            let Some(id) = (unsafe { CmId::adopt(lib.cm, ev.id) }) else {
                continue;
            };
            match Hello::decode(ev.private_data()) {
                Ok(h) if h.name_hash == name_hash(name) => break (id, h),
                Ok(_) => {
                    id.reject();
                    log::warn!(
                        "{channel}: refused a peer from {} that asked for another session",
                        peer_of(&id)
                    );
                }
                Err(why) => {
                    id.reject();
                    log::warn!("{channel}: refused a peer from {}: {why}", peer_of(&id));
                }
            }
        };
        let parts = Parts::build(lib, &id, cfg, vcfg, name)?;
        let hello = parts.hello(name).encode();
        let param = ConnParam {
            private: &hello,
            retry_count: RETRY_COUNT,
            rnr_retry_count: RNR_RETRY,
        };
        id.accept(param, &parts.device, parts.qp.num())?;
        let peer_addr = peer_of(&id);
        match wait_event(&events, &id, deadline)? {
            Some(ev) if ev.kind == RDMA_CM_EVENT_ESTABLISHED => {}
            Some(ev) => {
                return Err(Error::PeerLost {
                    channel,
                    peer: peer_addr,
                    reason: format!(
                        "the connection failed during set-up: rdma_cm {}",
                        describe_event(&ev)
                    ),
                })
            }
            None => return Err(timeout()),
        }
        drop(listener);
        Ok(RcSession::new(
            channel, parts, id, events, peer, peer_addr, cfg, vcfg,
        ))
    }

    /// Connects to the acceptor of session `name` at `cfg.address`,
    /// retrying until `cfg.connect_timeout` while nobody listens there yet.
    /// At least one whole attempt is made, so the error says how it failed.
    pub fn connect(name: &str, cfg: &SessionConfig, vcfg: &VerbsConfig) -> Result<RcSession> {
        let lib = lib()?;
        let channel = format!("session `{name}`");
        let addr = session_addr(&channel, cfg, name)?;
        let deadline = Instant::now() + cfg.connect_timeout;
        let events = EventChannel::new(lib.cm)?;
        let mut first = true;
        // What the last attempt learnt; one cut short by the deadline keeps
        // rdma_cm's answer to the one before, which says more.
        let mut answer: Option<String> = None;
        loop {
            let step_floor = first.then(|| Instant::now() + FIRST_STEP);
            first = false;
            match Self::attempt(
                lib, &events, addr, deadline, step_floor, cfg, vcfg, name, &channel,
            ) {
                Ok((parts, id, peer)) => {
                    let peer_addr = addr.to_string();
                    return Ok(RcSession::new(
                        channel, parts, id, events, peer, peer_addr, cfg, vcfg,
                    ));
                }
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(reason, answered)) => {
                    if answered || answer.is_none() {
                        answer = Some(reason);
                    }
                    let reason = answer.as_deref().unwrap_or_default();
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        return Err(Error::NoPeer {
                            channel,
                            address: addr.to_string(),
                            reason: format!(
                                "rdma_cm: {reason} (tried for {} ms)",
                                cfg.connect_timeout.as_millis()
                            ),
                        });
                    }
                    log::debug!("{channel}: connect to {addr}: {reason}; retrying");
                    // Control plane: the acceptor has not started yet.
                    std::thread::sleep(RETRY_PAUSE);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn attempt(
        lib: Lib,
        events: &EventChannel,
        addr: SocketAddr,
        deadline: Instant,
        step_floor: Option<Instant>,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        name: &str,
        channel: &str,
    ) -> std::result::Result<(Parts, CmId, Hello), Attempt> {
        let step_deadline = || match step_floor {
            Some(f) => deadline.max(f),
            None => deadline,
        };
        let ms = |d: Instant| {
            d.saturating_duration_since(Instant::now())
                .as_millis()
                .clamp(100, 5000) as i32
        };
        // SAFETY: `events` outlives the id: the caller keeps both and the
        // session stores the channel after the id.
        let id = unsafe { CmId::new(lib.cm, events, RDMA_PS_TCP) }?;
        let expect = |ev: Option<CmEvent>, want, step: &str| match ev {
            Some(ev) if ev.kind == want => Ok(()),
            Some(ev) => Err(Attempt::Retry(describe_event(&ev), true)),
            None => Err(Attempt::Retry(format!("no answer while {step}"), false)),
        };
        let d = step_deadline();
        id.resolve_addr(None, addr, ms(d))?;
        expect(
            wait_event(events, &id, d)?,
            RDMA_CM_EVENT_ADDR_RESOLVED,
            "resolving the address",
        )?;
        let device = id.device_name(lib.verbs);
        let d = step_deadline();
        id.resolve_route(ms(d), &device)?;
        expect(
            wait_event(events, &id, d)?,
            RDMA_CM_EVENT_ROUTE_RESOLVED,
            "resolving the route",
        )?;
        let parts = Parts::build(lib, &id, cfg, vcfg, name)?;
        let hello = parts.hello(name).encode();
        let param = ConnParam {
            private: &hello,
            retry_count: RETRY_COUNT,
            rnr_retry_count: RNR_RETRY,
        };
        id.connect(param, &parts.device, parts.qp.num())?;
        let d = step_deadline();
        match wait_event(events, &id, d)? {
            Some(ev) if ev.kind == RDMA_CM_EVENT_ESTABLISHED => {
                let peer = Hello::decode(ev.private_data()).map_err(|reason| {
                    Attempt::Fatal(Error::Protocol {
                        channel: channel.into(),
                        peer: addr.to_string(),
                        reason,
                    })
                })?;
                if peer.name_hash != name_hash(name) {
                    return Err(Attempt::Fatal(Error::Protocol {
                        channel: channel.into(),
                        peer: addr.to_string(),
                        reason: "the acceptor serves another session".into(),
                    }));
                }
                Ok((parts, id, peer))
            }
            Some(ev) if ev.kind == RDMA_CM_EVENT_REJECTED && ev.status == 28 => {
                Err(Attempt::Fatal(Error::NoPeer {
                    channel: channel.into(),
                    address: addr.to_string(),
                    reason: format!("rdma_cm: {}", describe_event(&ev)),
                }))
            }
            Some(ev) => Err(Attempt::Retry(describe_event(&ev), true)),
            None => Err(Attempt::Retry(
                "no answer to the connect request".into(),
                false,
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        channel: String,
        parts: Parts,
        id: CmId,
        events: EventChannel,
        peer: Hello,
        peer_addr: String,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
    ) -> RcSession {
        let max_message = parts.max_message.min(peer.max_payload as usize);
        if max_message < parts.max_message {
            log::warn!(
                "{channel}: the peer's receive buffers hold {max_message} bytes, fewer than max_message {}",
                parts.max_message
            );
        }
        let sq_depth = u64::from(parts.caps.send_wr.min(parts.recv_depth + SQ_SLACK));
        let send_base = parts.send_mem.ptr();
        // Some devices grant inline room even when asked for none.
        let inline_max = if vcfg.inline {
            parts.caps.inline as usize
        } else {
            0
        };
        log::info!(
            "{channel}: connected on {} (QP {:#x}) to {peer_addr} (pid {}); {} receive buffers, {} bytes inline, signal every {}, repost by {}",
            parts.device,
            parts.qp.num(),
            peer.pid,
            parts.recv_depth,
            inline_max,
            vcfg.signal_every,
            repost_batch(vcfg.recv_batch, parts.recv_depth)
        );
        RcSession {
            sq: SendQueue::new(sq_depth as u32, vcfg.signal_every),
            credits: Credits::new(peer.recv_depth),
            receipts: Receipts::new(
                parts.recv_depth,
                repost_batch(vcfg.recv_batch, parts.recv_depth),
            ),
            next_seq: 1,
            expect_seq: 1,
            max_message,
            inline_max,
            slot: parts.slot,
            sq_depth,
            send_base,
            send_lkey: parts.send_mem.lkey(),
            // SAFETY: the send pool has CTRL_LEN bytes after the slots.
            ctrl_out: unsafe { send_base.add(sq_depth as usize * parts.slot) },
            ctrl_in: parts.ctrl_mem.ptr(),
            peer_ctrl: peer.ctrl_addr,
            peer_rkey: peer.ctrl_rkey,
            idle: 0,
            disconnected: false,
            end: None,
            closed: false,
            close_timeout: cfg.connect_timeout.max(Duration::from_secs(1)),
            qpn: parts.qp.num(),
            peer_pid: peer.pid,
            qp: parts.qp,
            send_cq: parts.send_cq,
            recv_cq: parts.recv_cq,
            ring: parts.ring,
            cold: Box::new(Cold {
                channel,
                device: parts.device,
                port: id.port(),
                peer_addr,
                _send_mem: parts.send_mem,
                _recv_mem: parts._recv_mem,
                _ctrl_mem: parts.ctrl_mem,
                _pd: parts._pd,
                id,
                events,
            }),
        }
    }

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

    #[inline]
    fn send_slot(&self, index: u64) -> *mut u8 {
        // SAFETY: index % depth names one of the depth slots of the pool.
        unsafe {
            self.send_base
                .add((index % self.sq_depth) as usize * self.slot)
        }
    }

    #[inline]
    fn ctrl_word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: the control block is live, 4-byte aligned at `off`, and
        // only accessed atomically by us (the NIC writes it whole).
        unsafe { AtomicU32::from_ptr(self.ctrl_in.add(off).cast()) }
    }

    #[inline]
    fn close_word(&self) -> u64 {
        // SAFETY: as for ctrl_word32, 8-byte aligned.
        let w = unsafe { AtomicU64::from_ptr(self.ctrl_in.add(CTRL_CLOSE).cast()) };
        // Acquire: the peer wrote it after every message it sent; we read
        // it before deciding those messages are all delivered.
        w.load(Ordering::Acquire)
    }

    /// Applies the credit count the peer last wrote.
    #[inline]
    fn refresh_credits(&mut self) {
        // Acquire: the peer posted the buffers before writing the count.
        let total = u32::from_le(self.ctrl_word32(CTRL_CREDIT).load(Ordering::Acquire));
        if let Err(bad) = self.credits.grant(total) {
            self.fail(End::Protocol(format!(
                "it granted credit up to {bad}, more receive buffers than it has"
            )));
        }
    }

    fn fail(&mut self, why: End) {
        if self.end.is_none() {
            self.end = Some(why);
        }
    }

    fn end_error(&self, why: &End) -> Error {
        match why {
            End::Failed { op, detail, errno } => Error::Verbs {
                op: format!("{} {op}", self.cold.channel),
                device: self.cold.device.clone(),
                port: Some(self.cold.port),
                qp: Some(self.qpn),
                errno: *errno,
                detail: detail.clone(),
            },
            End::Lost(reason) => Error::PeerLost {
                channel: self.cold.channel.clone(),
                peer: self.cold.peer_addr.clone(),
                reason: reason.clone(),
            },
            End::Protocol(reason) => Error::Protocol {
                channel: self.cold.channel.clone(),
                peer: self.cold.peer_addr.clone(),
                reason: reason.clone(),
            },
        }
    }

    /// Records a failed work completion.
    #[cold]
    fn wc_failed(&mut self, wc: &ibv_wc, what: &'static str) {
        match wc.status {
            // A consequence of a disconnect or of an earlier error.
            IBV_WC_WR_FLUSH_ERR => {}
            IBV_WC_RETRY_EXC_ERR => self.fail(End::Lost(
                "no acknowledgement within the transport retries (the peer's host or the network failed)".into(),
            )),
            IBV_WC_RNR_RETRY_EXC_ERR => self.fail(End::Failed {
                op: what,
                detail: format!(
                    "{}: the peer had no receive buffer posted, which credit flow control should prevent",
                    errors::wc_status(wc.status)
                ),
                errno: None,
            }),
            s => self.fail(End::Failed {
                op: what,
                detail: errors::wc_status(s),
                errno: None,
            }),
        }
    }

    /// Takes send completions until the queue is empty.
    fn reap_sends(&mut self) {
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        loop {
            let done = match self.send_cq.poll(&mut wcs) {
                Ok(d) => d,
                Err(e) => {
                    self.fail(End::Failed {
                        op: "ibv_poll_cq (sends)",
                        detail: errors::describe_errno(e),
                        errno: Some(e),
                    });
                    return;
                }
            };
            if done.is_empty() {
                return;
            }
            let mut failed = None;
            for wc in done {
                // In-order completion: this request and all before it are
                // done, failed or flushed alike.
                self.sq.complete(wc.wr_id);
                if wc.status != IBV_WC_SUCCESS && failed.is_none() {
                    failed = Some(*wc);
                }
            }
            if let Some(wc) = failed {
                self.wc_failed(&wc, "send");
            }
        }
    }

    /// Reads rdma_cm events without blocking.
    fn refresh_events(&mut self) {
        loop {
            match self.cold.events.try_next() {
                Ok(Some(ev)) => match ev.kind {
                    RDMA_CM_EVENT_DISCONNECTED => self.disconnected = true,
                    RDMA_CM_EVENT_DEVICE_REMOVAL => {
                        self.disconnected = true;
                        self.fail(End::Failed {
                            op: "rdma_cm",
                            detail: "the device was removed".into(),
                            errno: None,
                        });
                    }
                    _ => log::debug!("{}: rdma_cm {}", self.cold.channel, ev.name()),
                },
                Ok(None) => return,
                Err(e) => {
                    log::warn!("{}: {e}", self.cold.channel);
                    return;
                }
            }
        }
    }

    /// The error that ends the session, once nothing more can be delivered.
    fn ended(&self) -> Option<Error> {
        let close = self.close_word();
        let delivered = self.expect_seq - 1;
        if close != 0 && delivered + 1 >= close {
            return Some(Error::PeerClosed {
                channel: self.cold.channel.clone(),
            });
        }
        if let Some(why) = &self.end {
            return Some(self.end_error(why));
        }
        if self.disconnected {
            if close != 0 {
                return Some(Error::PeerLost {
                    channel: self.cold.channel.clone(),
                    peer: self.cold.peer_addr.clone(),
                    reason: format!(
                        "it closed after sending {} messages, of which {delivered} arrived",
                        close - 1
                    ),
                });
            }
            return Some(Error::PeerDied {
                channel: self.cold.channel.clone(),
                pid: self.peer_pid,
            });
        }
        None
    }

    /// Posts an RDMA write of `bytes` to the peer's control block at
    /// `offset`. Returns the request number.
    fn write_ctrl(&mut self, offset: usize, bytes: &[u8], force_signal: bool) -> Option<u64> {
        if !self.sq.has_room() {
            self.reap_sends();
            if !self.sq.has_room() {
                return None;
            }
        }
        let slot = self.sq.take(force_signal);
        let mut flags = if slot.signaled { IBV_SEND_SIGNALED } else { 0 };
        let src = if bytes.len() <= self.inline_max {
            flags |= IBV_SEND_INLINE;
            bytes.as_ptr()
        } else {
            // Not inline: the source must be registered. A later write of
            // the same word may overwrite it before the NIC reads it, which
            // only sends a newer count.
            // SAFETY: CTRL_LEN out-bytes follow the send slots; `offset` +
            // len stays inside them.
            let out = unsafe { self.ctrl_out.add(offset) };
            // SAFETY: as above; `bytes` does not overlap the pool.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
            out.cast_const()
        };
        let mut sge = ibv_sge {
            addr: src as u64,
            length: bytes.len() as u32,
            lkey: self.send_lkey,
        };
        let mut wr = ibv_send_wr {
            wr_id: slot.index,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_WRITE,
            send_flags: flags,
            ..Default::default()
        };
        wr.wr.rdma.remote_addr = self.peer_ctrl + offset as u64;
        wr.wr.rdma.rkey = self.peer_rkey;
        // SAFETY: inline data is copied during the call; otherwise the
        // source is the registered out-word, left alone until overwritten
        // by a newer value of the same word.
        match unsafe { self.qp.post_send(&mut wr) } {
            Ok(()) => Some(slot.index),
            Err(e) => {
                self.sq.untake(slot);
                self.fail(End::Failed {
                    op: "ibv_post_send (control write)",
                    detail: errors::describe_errno(e),
                    errno: Some(e),
                });
                None
            }
        }
    }

    /// Tells the peer the new receive-buffer count, if it changed.
    fn announce(&mut self) {
        let Some(count) = self.receipts.to_announce() else {
            return;
        };
        if self.disconnected || self.end.is_some() {
            return;
        }
        if self
            .write_ctrl(CTRL_CREDIT, &count.to_le_bytes(), false)
            .is_some()
        {
            self.receipts.announced(count);
        }
        // Otherwise the send queue is full: the next poll tries again.
    }

    /// Reposts the consumed receive buffers as one chain, then announces.
    fn repost(&mut self) {
        let n = self.receipts.unposted();
        if n == 0 || self.disconnected || self.end.is_some() {
            return;
        }
        // SAFETY: the unposted buffers were delivered and their callbacks
        // returned, so nothing refers to them.
        if let Err(e) = unsafe { self.ring.post(&mut self.qp, n) } {
            self.fail(End::Failed {
                op: "ibv_post_recv",
                detail: errors::describe_errno(e),
                errno: Some(e),
            });
            return;
        }
        self.receipts.reposted(n);
        self.announce();
    }
}

impl SessionEnd for RcSession {
    #[inline]
    fn max_message(&self) -> usize {
        self.max_message
    }

    #[inline]
    fn try_claim(&mut self, len: usize) -> Option<&mut [u8]> {
        // Checked in release builds too: the slice below must stay in the
        // slot whatever the caller asks.
        if len > self.max_message {
            return None;
        }
        if self.end.is_some() || self.disconnected || self.closed {
            return None;
        }
        if self.credits.available() == 0 {
            self.refresh_credits();
            if self.credits.available() == 0 {
                return None;
            }
        }
        if !self.sq.has_room() {
            self.reap_sends();
            if !self.sq.has_room() {
                return None;
            }
        }
        let p = self.send_slot(self.sq.next_index());
        // SAFETY: the slot of the next request is free (the send queue has
        // room, so the request that used it last has completed); it holds
        // HEADER_LEN + max_message >= HEADER_LEN + len bytes; the slice
        // borrows `self`.
        Some(unsafe { std::slice::from_raw_parts_mut(p.add(HEADER_LEN), len) })
    }

    #[inline]
    fn commit(&mut self, len: usize, flags: u32, timestamp: u64) -> Result<u64> {
        let slot = self.sq.take(false);
        let p = self.send_slot(slot.index);
        let seq = self.next_seq;
        // SAFETY: the slot is ours (see try_claim) and has room for the
        // header in front of the payload.
        let head = unsafe { std::slice::from_raw_parts_mut(p, HEADER_LEN) };
        Header {
            seq,
            len: len as u32,
            flags,
            timestamp,
        }
        .encode(head);
        let total = HEADER_LEN + len;
        let mut send_flags = if slot.signaled { IBV_SEND_SIGNALED } else { 0 };
        if total <= self.inline_max {
            send_flags |= IBV_SEND_INLINE;
        }
        let mut sge = ibv_sge {
            addr: p as u64,
            length: total as u32,
            lkey: self.send_lkey,
        };
        let mut wr = ibv_send_wr {
            wr_id: slot.index,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_SEND,
            send_flags,
            ..Default::default()
        };
        // SAFETY: the slot is registered in the send pool and is not written
        // again until this request (or a later signaled one) completes: the
        // send queue accounting hands it out again only after that.
        if let Err(e) = unsafe { self.qp.post_send(&mut wr) } {
            self.sq.untake(slot);
            self.refresh_events();
            self.fail(End::Failed {
                op: "ibv_post_send",
                detail: errors::describe_errno(e),
                errno: Some(e),
            });
            return Err(self.ended().expect("a failure was recorded"));
        }
        self.credits.spend();
        self.next_seq += 1;
        Ok(seq)
    }

    #[inline]
    fn poll<F: FnMut(Message<'_>)>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let mut n = 0;
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        while n < max {
            let want = (max - n).min(WC_BATCH);
            let done = match self.recv_cq.poll(&mut wcs[..want]) {
                Ok(d) => d,
                Err(e) => {
                    return Err(errors::os(
                        "ibv_poll_cq (receives)",
                        (self.cold.device.as_str(), self.cold.port),
                        Some(self.qpn),
                        e,
                    ))
                }
            };
            if done.is_empty() {
                break;
            }
            for wc in done {
                if wc.status != IBV_WC_SUCCESS {
                    self.wc_failed(wc, "receive");
                    continue;
                }
                // SAFETY: a successful completion hands the buffer back; it
                // is reposted only after the callback returns.
                let buf = unsafe { self.ring.buffer(wc.wr_id, wc.byte_len) };
                let (h, payload) = match Header::decode(buf) {
                    Ok(x) => x,
                    Err(e) => {
                        self.fail(End::Protocol(format!("message {}: {e}", self.expect_seq)));
                        return Err(self.ended().expect("a failure was recorded"));
                    }
                };
                if h.seq != self.expect_seq {
                    self.fail(End::Protocol(format!(
                        "message {} arrived where {} was expected",
                        h.seq, self.expect_seq
                    )));
                    return Err(self.ended().expect("a failure was recorded"));
                }
                f(Message {
                    seq: h.seq,
                    flags: h.flags,
                    timestamp: h.timestamp,
                    payload,
                });
                self.expect_seq += 1;
                n += 1;
                if self.receipts.consumed() {
                    self.repost();
                }
            }
        }
        if n > 0 {
            self.idle = 0;
            return Ok(n);
        }
        if self.receipts.to_announce().is_some() {
            // A credit write that found the send queue full.
            self.announce();
        }
        if self.disconnected || self.end.is_some() {
            if let Some(e) = self.ended() {
                return Err(e);
            }
        }
        self.idle += 1;
        if self.idle >= CHECK_EVERY {
            self.idle = 0;
            self.refresh_events();
            if let Some(e) = self.ended() {
                return Err(e);
            }
        }
        Ok(0)
    }

    #[cold]
    fn check_peer(&mut self) -> Result<()> {
        self.refresh_events();
        self.reap_sends();
        if let Some(why) = &self.end {
            return Err(self.end_error(why));
        }
        if self.close_word() != 0 {
            return Err(Error::PeerClosed {
                channel: self.cold.channel.clone(),
            });
        }
        if self.disconnected {
            return Err(Error::PeerDied {
                channel: self.cold.channel.clone(),
                pid: self.peer_pid,
            });
        }
        Ok(())
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.refresh_events();
        if !self.disconnected && self.end.is_none() {
            // The close word goes after every message sent (same queue
            // pair, in order); waiting for its completion means all of them
            // reached the peer before the disconnect flushes the queue.
            let deadline = Instant::now() + self.close_timeout;
            let word = self.next_seq.to_le_bytes();
            let mut posted = None;
            while posted.is_none() && self.end.is_none() && Instant::now() < deadline {
                posted = self.write_ctrl(CTRL_CLOSE, &word, true);
            }
            // A peer that has already gone (its disconnect arrived) will not
            // acknowledge: stop waiting then instead of at the deadline.
            let mut spins = 0u32;
            if let Some(index) = posted {
                while self.sq.completed() <= index
                    && self.end.is_none()
                    && !self.disconnected
                    && Instant::now() < deadline
                {
                    self.reap_sends();
                    spins = spins.wrapping_add(1);
                    if spins % 1024 == 0 {
                        self.refresh_events();
                    }
                    std::hint::spin_loop();
                }
            }
            if self.sq.completed() <= posted.unwrap_or(u64::MAX) && !self.disconnected {
                log::warn!(
                    "{}: the close was not acknowledged by the peer within {} ms",
                    self.cold.channel,
                    self.close_timeout.as_millis()
                );
            }
        }
        self.cold.id.disconnect();
        self.disconnected = true;
        // Later calls report this, not the disconnect as the peer's death.
        self.fail(End::Failed {
            op: "used after close",
            detail: "this end was closed".into(),
            errno: None,
        });
    }
}

impl Drop for RcSession {
    fn drop(&mut self) {
        self.close();
        // Fields drop next, in declaration order: parts (QP, queues, pools,
        // PD), then the id, then the event channel.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_rejects_strangers() {
        let h = Hello {
            pid: 42,
            name_hash: name_hash("orders"),
            recv_depth: 64,
            max_payload: 232,
            ctrl_rkey: 0x1234,
            ctrl_addr: 0x7f00_0000_1000,
        };
        let mut padded = h.encode().to_vec();
        padded.resize(56, 0); // IB CM pads connect data
        assert_eq!(Hello::decode(&padded), Ok(h));
        assert!(Hello::decode(&[0u8; 56])
            .unwrap_err()
            .contains("not an mdbus"));
        let mut v2 = h.encode();
        v2[4] = 2;
        assert!(Hello::decode(&v2).unwrap_err().contains("version 2"));
        assert_ne!(name_hash("orders"), name_hash("order"));
    }
}
