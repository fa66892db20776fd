//! Resource setup: the protection domain, completion queues, registered
//! pools and queue pair of one end, and the session assembled from them
//! once connected.

use std::time::{Duration, Instant};

use verbs_sys::{IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC};

use super::super::async_events::Watch;
use super::super::cm::{CmId, EventChannel};
use super::super::cq::Cq;
use super::super::credit::{repost_batch, Credits, Receipts};
use super::super::mr::Region;
use super::super::pd::Pd;
use super::super::qp::{Caps, CmQp};
use super::super::recv_ring::RecvRing;
use super::super::send_queue::SendQueue;
use super::super::srq::Srq;
use super::super::{device, errors, Lib};
use super::hello::{name_hash, Hello};
use super::ring::{ring_slot, ImmRecvs, RingIn};
use super::wait::Wake;
use super::{Cold, KeepAlive, RcSession, CTRL_LEN, CTRL_REMOTE_LEN, SQ_SLACK};
use crate::config::{SessionConfig, SessionMode, VerbsConfig};
use crate::error::Result;
use crate::transport::slot_size;

/// What the sessions of one acceptor share when they receive through its
/// shared receive queue.
#[derive(Clone, Copy)]
pub(super) struct SharedParts<'a> {
    pub(super) pd: &'a Pd,
    pub(super) cq: &'a Cq,
    pub(super) srq: &'a Srq,
}

/// The verbs objects of one end, in teardown order: the queue pair before
/// the queues and pools it points into, everything before the protection
/// domain. The cm id and event channel are held by the owner and dropped
/// after these.
pub(super) struct Parts {
    pub(super) qp: CmQp,
    pub(super) send_cq: Cq,
    pub(super) recv_cq: Cq,
    pub(super) send_mem: Region,
    // Held for its registration; reached through `ring`. None when the
    // session receives through a shared receive queue.
    pub(super) _recv_mem: Option<Region>,
    pub(super) ctrl_mem: Region,
    // Held so it is deallocated last; None on a shared receive queue,
    // whose acceptor owns the domain.
    pub(super) _pd: Option<Pd>,
    pub(super) ring: RecvRing,
    pub(super) caps: Caps,
    pub(super) device: String,
    pub(super) slot: usize,
    pub(super) recv_depth: u32,
    pub(super) max_message: usize,
    pub(super) verbs: &'static verbs_sys::Verbs,
    pub(super) mode: SessionMode,
    /// Ring modes: the receive requests without buffers (write-imm: one
    /// per slot; write: one, for a wake).
    pub(super) imm: Option<ImmRecvs>,
}

impl Parts {
    /// Creates and registers everything on `id`'s device and posts every
    /// receive buffer, so the peer may send as soon as it is connected.
    pub(super) fn build(
        lib: Lib,
        id: &CmId,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        name: &str,
    ) -> Result<Parts> {
        // SAFETY: no shared receive queue.
        unsafe { Self::build_in(lib, id, cfg, vcfg, name, None) }
    }

    /// [`build`](Self::build), with the queue pair receiving through the
    /// shared receive queue `shared` (its domain, queue and completion
    /// queue) instead of a ring of its own: `cfg.capacity` is then the
    /// share of that queue this session's peer is granted.
    ///
    /// # Safety
    /// With `shared`, its objects must be on `id`'s device and outlive the
    /// returned parts.
    pub(super) unsafe fn build_in(
        lib: Lib,
        id: &CmId,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        name: &str,
        shared: Option<SharedParts<'_>>,
    ) -> Result<Parts> {
        let device = id.device_name(lib.verbs);
        super::super::note_overrides(&format!("session `{name}`"), vcfg, &device);
        let ctx = id.context();
        let recv_depth = u32::try_from(cfg.capacity).unwrap_or(u32::MAX);
        let sq_depth = recv_depth.saturating_add(SQ_SLACK);
        let mode = cfg.mode;
        let ring_mode = mode != SessionMode::Send;
        // Ring modes lay a message out right-aligned in its slot with the
        // trailer last, the send pool as the peer's ring.
        let slot = if ring_mode {
            ring_slot(cfg.max_message)
        } else {
            slot_size(cfg.max_message)
        };
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
        let own_pd = match shared {
            // SAFETY: as above.
            None => Some(unsafe { Pd::alloc(lib.verbs, ctx, &device) }?),
            Some(_) => None,
        };
        let pd = match (&own_pd, shared) {
            (Some(pd), _) => pd,
            (None, Some(sh)) => sh.pd,
            (None, None) => unreachable!("a domain was allocated"),
        };
        // SAFETY: as above.
        let send_cq = unsafe { Cq::new(lib.verbs, ctx, sq_depth as usize, &device) }?;
        let recv_cq = match shared {
            // SAFETY: the shared queue outlives the parts (caller).
            Some(sh) => unsafe { Cq::alias(sh.cq) },
            // SAFETY: as above.
            None => unsafe { Cq::with_channel(lib.verbs, ctx, recv_depth as usize, &device) }?,
        };
        // The NIC only reads the send pool: no access flags. The receive
        // pool takes local writes. Only the small control block may be
        // written by the peer.
        // SAFETY: as above.
        let send_mem = unsafe {
            Region::new(
                lib.verbs,
                pd,
                sq_depth as usize * slot + CTRL_LEN,
                0,
                "the send pool",
                &device,
            )
        }?;
        // Send mode: receive buffers, local writes only (none of its own
        // with a shared receive queue). Ring modes: the ring the peer writes
        // messages into, registered on its own and to the byte, so the
        // peer's rkey reaches exactly the ring.
        let recv_mem = match shared {
            Some(_) => None,
            // SAFETY: as above.
            None => Some(unsafe {
                if ring_mode {
                    Region::new_exact(
                        lib.verbs,
                        pd,
                        recv_depth as usize * slot,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                        "the message ring",
                        &device,
                    )
                } else {
                    Region::new(
                        lib.verbs,
                        pd,
                        recv_depth as usize * slot,
                        IBV_ACCESS_LOCAL_WRITE,
                        "the receive pool",
                        &device,
                    )
                }
            }?),
        };
        // SAFETY: as above.
        let ctrl_mem = unsafe {
            Region::new_exact(
                lib.verbs,
                pd,
                CTRL_REMOTE_LEN,
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                "the control block",
                &device,
            )
        }?;
        let mut inline = if vcfg.inline { vcfg.max_inline } else { 0 };
        let (mut qp, caps) = loop {
            let want = Caps {
                send_wr: sq_depth,
                // Write mode takes one request from the receive queue:
                // the immediate that wakes a sleeping receiver.
                recv_wr: if mode == SessionMode::Write {
                    1
                } else {
                    recv_depth
                },
                inline,
            };
            // SAFETY: as above; the PD and queues are on the id's device.
            let made = match shared {
                // SAFETY: as above; the shared queue is in `pd`.
                Some(sh) => unsafe {
                    CmQp::create_on_srq(lib.cm, id, pd, &send_cq, sh.cq, sh.srq, want, &device)
                },
                // SAFETY: as above.
                None => unsafe {
                    CmQp::create(
                        lib.cm, id, pd, &send_cq, &recv_cq, IBV_QPT_RC, want, &device,
                    )
                },
            };
            match made {
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
        // Ring modes post no buffers: an empty ring of receive buffers.
        // write-imm posts a request without buffer per slot; write one,
        // for the immediate that wakes it when it sleeps.
        let imm_depth = match mode {
            SessionMode::WriteImm => recv_depth,
            _ => 1,
        };
        let mut imm = ring_mode.then(|| ImmRecvs::new(imm_depth));
        let ring = match &recv_mem {
            Some(mem) => {
                let mut ring = RecvRing::new(mem, if ring_mode { 0 } else { recv_depth }, slot);
                let posted = match imm.as_mut() {
                    Some(imm) => imm.post(&mut qp, imm_depth),
                    // SAFETY: at start-up no buffer has been posted or
                    // handed out.
                    None if !ring_mode => unsafe { ring.post(&mut qp, recv_depth) },
                    None => Ok(()),
                };
                if let Err(e) = posted {
                    return Err(errors::os(
                        "ibv_post_recv of the receive ring",
                        &device,
                        Some(qp.num()),
                        e,
                    ));
                }
                ring
            }
            None => RecvRing::empty(),
        };
        Ok(Parts {
            qp,
            send_cq,
            recv_cq,
            send_mem,
            _recv_mem: recv_mem,
            ctrl_mem,
            _pd: own_pd,
            ring,
            caps,
            device,
            slot,
            recv_depth,
            max_message: cfg.max_message,
            verbs: lib.verbs,
            mode,
            imm,
        })
    }

    pub(super) fn hello(&self, name: &str) -> Hello {
        Hello {
            pid: std::process::id(),
            name_hash: name_hash(name),
            recv_depth: self.recv_depth,
            max_payload: self.max_message as u32,
            ctrl_rkey: self.ctrl_mem.rkey(),
            ctrl_addr: self.ctrl_mem.ptr() as u64,
            mode: self.mode,
            ring_rkey: match (&self._recv_mem, self.mode) {
                (Some(ring), SessionMode::Write | SessionMode::WriteImm) => ring.rkey(),
                _ => 0,
            },
            ring_addr: match (&self._recv_mem, self.mode) {
                (Some(ring), SessionMode::Write | SessionMode::WriteImm) => ring.ptr() as u64,
                _ => 0,
            },
        }
    }
}

impl RcSession {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        channel: String,
        parts: Parts,
        id: CmId,
        events: EventChannel,
        peer: Hello,
        peer_addr: String,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        rejected: u64,
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
        // SAFETY: rdma_cm keeps the id's context open while the id lives;
        // the watch is dropped before the id (Cold's field order).
        let watch = unsafe {
            Watch::new(
                parts.verbs,
                id.context(),
                id.port(),
                parts.qp.num(),
                [
                    parts.send_cq.as_raw() as usize,
                    parts.recv_cq.as_raw() as usize,
                ],
            )
        };
        let ring_mode = parts.mode != SessionMode::Send;
        let ring_in = match (&parts._recv_mem, ring_mode) {
            (Some(ring), true) => Some(RingIn::new(ring.ptr(), parts.slot, parts.recv_depth)),
            _ => None,
        };
        let now = Instant::now();
        let (imm, wake) = match parts.mode {
            SessionMode::Write => (None, parts.imm.map(|r| Box::new(Wake::new(r)))),
            _ => (parts.imm, None),
        };
        RcSession {
            mode: parts.mode,
            ring_in,
            imm,
            wake,
            woke_gen: 0,
            wake_imms_sent: 0,
            wake_owed: false,
            peer_ring: peer.ring_addr,
            peer_ring_rkey: peer.ring_rkey,
            peer_slot: ring_slot(peer.max_payload as usize) as u64,
            peer_depth: u64::from(peer.recv_depth),
            ring_depth: u64::from(parts.recv_depth),
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
            naps: 0,
            last_check: crate::clock::monotonic_ns(),
            acked: 0,
            seq_at: vec![0; sq_depth as usize].into_boxed_slice(),
            send_completions: 0,
            completions: 0,
            extra_posted: Default::default(),
            keepalive: KeepAlive {
                interval: vcfg.keepalive_interval,
                timeout: vcfg.keepalive_timeout,
                mark: 0,
                since: now,
                pending: None,
            },
            rejected,
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
                watch,
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
                membership: None,
            }),
            shared: None,
        }
    }
}
