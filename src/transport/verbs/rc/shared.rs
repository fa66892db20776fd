//! Many sessions on one acceptor, receiving through one shared receive
//! queue (SRQ) and one completion queue (`receive = "shared"`).
//!
//! The first shared accept on an address creates its [`Acceptor`]: the
//! listener, a protection domain, the SRQ with `verbs.shared_receive_buffers`
//! buffers of the session's slot size, all posted, and a completion queue
//! as deep. Each session accepted there gets its own queue pair (sends,
//! credits and close words work as before) attached to that SRQ, with its
//! receive completions on the shared queue. Registered receive memory is
//! the pool, whatever the number of sessions.
//!
//! Credits. A session's `capacity` is its share of the pool: accepting it
//! reserves that many buffers, and the sum of the reservations of live
//! sessions may not exceed the pool. The peer is told `capacity` as its
//! receive depth and is granted, as before, one credit per buffer of *this
//! session* reposted. So for every session, credits outstanding (granted,
//! not yet used) plus buffers it holds (arrived, not yet reposted) equal
//! its reservation; summed over sessions that is at most the pool, and the
//! SRQ always has a posted buffer for every message any peer may send:
//! no RNR. A peer that sends beyond its credit is detected (it would hold
//! more buffers than its reservation): its session fails as a protocol
//! error and the buffer goes straight back to the queue.
//!
//! Polling. Whichever session polls takes completions from the shared
//! queue and files each under the session of its queue pair (by QP
//! number), in arrival order, in an inbox as large as that session's
//! reservation; a session delivers its inbox first. Queue pairs complete
//! in order, so every session still delivers in order.
//!
//! Threads. The acceptor and every session on it belong to the thread that
//! created the acceptor: polls from another thread fail with an error
//! rather than take a lock, and the data path takes none.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use verbs_sys::{ibv_wc, IBV_ACCESS_LOCAL_WRITE, IBV_WC_SUCCESS, RDMA_PS_TCP};

use super::super::cm::{CmId, EventChannel};
use super::super::cq::Cq;
use super::super::mr::Region;
use super::super::pd::Pd;
use super::super::srq::{Srq, SrqRing};
use super::super::{device, errors, lib, Lib};
use super::connect::{conn_param, established_or, mode_mismatch, peer_of, refuse, screen_request};
use super::end::End;
use super::hello::{name_hash, Hello};
use super::setup::{Parts, SharedParts};
use super::{RcSession, WC_BATCH};
use crate::config::{SessionConfig, SessionMode, VerbsConfig};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::transport::slot_size;

/// Connect requests kept for sessions not accepted yet; more are refused.
const MAX_PENDING: usize = 1024;

/// An identity of the calling thread: the address of a thread-local,
/// unique among live threads.
fn thread_tag() -> usize {
    thread_local! {
        static TAG: u8 = const { 0 };
    }
    TAG.with(|t| t as *const u8 as usize)
}

/// The acceptors of this process, by address.
fn acceptors() -> std::sync::MutexGuard<'static, Vec<Weak<Acceptor>>> {
    static ALL: Mutex<Vec<Weak<Acceptor>>> = Mutex::new(Vec::new());
    ALL.lock().unwrap_or_else(|p| p.into_inner())
}

/// One address's listener, shared receive queue and completion queue.
pub(super) struct Acceptor {
    addr: SocketAddr,
    /// The thread that created it: the only one that may touch `inner`.
    owner: usize,
    inner: UnsafeCell<Inner>,
}

// SAFETY: `inner` is only reached on the owner thread (checked by every
// access through `Acceptor::inner`), or in Drop, when no other reference
// exists. The verbs objects may be used from any thread one at a time.
unsafe impl Send for Acceptor {}
// SAFETY: as above: shared references on other threads never reach `inner`.
unsafe impl Sync for Acceptor {}

/// Fields drop in order: pending ids, the queue and the completion queue
/// (every queue pair on them is gone: the sessions hold the acceptor),
/// the pool, the domain, the listener, its channel.
struct Inner {
    pending: Vec<(CmId, Hello)>,
    members: HashMap<u32, usize>,
    inboxes: Vec<Option<Inbox>>,
    /// Buffers reserved by live sessions.
    reserved: u32,
    ring: SrqRing,
    srq: Srq,
    cq: Cq,
    pool: Region,
    pd: Pd,
    slot: usize,
    device: String,
    listener: CmId,
    events: EventChannel,
}

/// A completion filed for a session: buffer index, bytes, status.
#[derive(Clone, Copy, Default)]
struct Arrived {
    index: u32,
    len: u32,
    status: u32,
}

/// What one session holds of the pool.
struct Inbox {
    qpn: u32,
    /// Its reservation: buffers it may hold at most.
    window: u32,
    /// Completions filed, not yet delivered (a ring of `window` entries).
    arrived: Box<[Arrived]>,
    head: u32,
    len: u32,
    /// Buffers delivered, waiting to be reposted (`released.len()` is the
    /// window too).
    released: Box<[u32]>,
    nreleased: u32,
    /// Buffers held: filed, being delivered or waiting for a repost.
    held: u32,
    /// The peer sent beyond its credit.
    overrun: bool,
}

impl Inbox {
    fn new(qpn: u32, window: u32) -> Inbox {
        Inbox {
            qpn,
            window,
            arrived: vec![Arrived::default(); window as usize].into_boxed_slice(),
            head: 0,
            len: 0,
            released: vec![0; window as usize].into_boxed_slice(),
            nreleased: 0,
            held: 0,
            overrun: false,
        }
    }

    /// Files a completion; `false` when the session already holds its
    /// whole window (its peer ignored its credit).
    fn file(&mut self, a: Arrived) -> bool {
        if self.held >= self.window || self.len >= self.window {
            self.overrun = true;
            return false;
        }
        let at = (self.head + self.len) % self.window;
        self.arrived[at as usize] = a;
        self.len += 1;
        self.held += 1;
        true
    }

    fn take(&mut self) -> Option<Arrived> {
        if self.len == 0 {
            return None;
        }
        let a = self.arrived[self.head as usize];
        self.head = (self.head + 1) % self.window;
        self.len -= 1;
        Some(a)
    }

    fn release(&mut self, index: u32) {
        if self.nreleased < self.window {
            self.released[self.nreleased as usize] = index;
            self.nreleased += 1;
        }
    }
}

impl Inner {
    /// Takes completions from the shared queue and files them by queue
    /// pair. Returns how many, or the errno of a failed poll.
    fn drain(&mut self) -> std::result::Result<usize, i32> {
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        let done = self.cq.poll(&mut wcs)?;
        let n = done.len();
        for wc in done {
            let a = Arrived {
                index: wc.wr_id as u32,
                len: wc.byte_len,
                status: wc.status,
            };
            if !self.ring.owns(wc.wr_id) {
                continue;
            }
            let filed = match self.members.get(&wc.qp_num) {
                Some(&i) => self.inboxes[i].as_mut().is_some_and(|b| b.file(a)),
                None => false,
            };
            if !filed {
                // A session that is gone, or a peer beyond its credit: the
                // buffer goes straight back.
                // SAFETY: the completion handed the buffer back and nothing
                // refers to it.
                if let Err(e) = unsafe { self.ring.post(&mut self.srq, &[a.index]) } {
                    log::warn!(
                        "shared receive on {}: ibv_post_srq_recv: {}",
                        self.device,
                        errors::describe_errno(e)
                    );
                }
            }
        }
        Ok(n)
    }
}

impl Acceptor {
    /// The state, on the owner thread only.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    fn inner(&self) -> Option<&mut Inner> {
        if thread_tag() != self.owner {
            return None;
        }
        // SAFETY: only the owner thread gets here, and none of our callers
        // keeps the reference across a call that could take another (the
        // message callback runs with none held).
        Some(unsafe { &mut *self.inner.get() })
    }

    /// The acceptor of `addr` for this thread, made when there is none.
    fn get_or_make(
        lib: Lib,
        addr: SocketAddr,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        channel: &str,
    ) -> Result<Arc<Acceptor>> {
        let mut all = acceptors();
        all.retain(|w| w.strong_count() > 0);
        if let Some(a) = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|a| a.addr == addr)
        {
            if a.owner != thread_tag() {
                return Err(wrong_thread(channel, addr));
            }
            return Ok(a);
        }
        let a = Arc::new(Acceptor::make(lib, addr, cfg, vcfg, channel)?);
        all.push(Arc::downgrade(&a));
        Ok(a)
    }

    fn make(
        lib: Lib,
        addr: SocketAddr,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        channel: &str,
    ) -> Result<Acceptor> {
        let events = EventChannel::new(lib.cm)?;
        // SAFETY: `events` outlives the listener (Inner's field order).
        let listener = unsafe { CmId::new(lib.cm, &events, RDMA_PS_TCP) }?;
        listener.bind(addr)?;
        listener.listen(addr)?;
        let ctx = listener.context();
        if ctx.is_null() {
            return Err(Error::NoPeer {
                channel: channel.into(),
                address: addr.to_string(),
                reason: "a shared receive queue needs the address of an RDMA device to listen on, not a wildcard".into(),
            });
        }
        let device = listener.device_name(lib.verbs);
        let depth = vcfg.shared_receive_buffers;
        let slot = slot_size(cfg.max_message);
        let mut attr = verbs_sys::ibv_device_attr::default();
        // SAFETY: the bound listener's context is live while it is.
        let rc = unsafe { (lib.verbs.ibv_query_device)(ctx, &mut attr) };
        if rc != 0 {
            return Err(errors::ret("ibv_query_device", &device, None, rc));
        }
        let key = "verbs.shared_receive_buffers";
        device::check_limit(
            "the shared receive queue",
            depth as usize,
            attr.max_srq_wr,
            &device,
            key,
        )?;
        device::check_limit(
            "the completion queues",
            depth as usize,
            attr.max_cqe,
            &device,
            key,
        )?;
        // SAFETY: every object is created on the listener's live context,
        // which it keeps open, and dropped before it (Inner's field order).
        let pd = unsafe { Pd::alloc(lib.verbs, ctx, &device) }?;
        // SAFETY: as above.
        let cq = unsafe { Cq::new(lib.verbs, ctx, depth as usize, &device) }?;
        // SAFETY: as above; `pd` outlives the queue.
        let mut srq = unsafe { Srq::new(lib.verbs, &pd, depth, &device) }?;
        // SAFETY: as above.
        let pool = unsafe {
            Region::new(
                lib.verbs,
                &pd,
                depth as usize * slot,
                IBV_ACCESS_LOCAL_WRITE,
                "the shared receive pool",
                &device,
            )
        }?;
        let mut ring = SrqRing::new(&pool, depth, slot);
        // SAFETY: nothing was posted yet.
        if let Err(e) = unsafe { ring.post_all(&mut srq) } {
            return Err(errors::os(
                "ibv_post_srq_recv of the shared receive pool",
                &device,
                None,
                e,
            ));
        }
        log::info!(
            "{channel}: shared receive queue on {device} for {addr}: {depth} buffers of {slot} bytes"
        );
        Ok(Acceptor {
            addr,
            owner: thread_tag(),
            inner: UnsafeCell::new(Inner {
                pending: Vec::new(),
                members: HashMap::new(),
                inboxes: Vec::new(),
                reserved: 0,
                ring,
                srq,
                cq,
                pool,
                pd,
                slot,
                device,
                listener,
                events,
            }),
        })
    }
}

/// An error of the shared receive set-up of `channel`.
fn shared_error(channel: &str, device: &str, detail: String) -> Error {
    Error::Verbs {
        op: format!("{channel}: shared receive"),
        device: device.into(),
        port: None,
        qp: None,
        errno: None,
        detail,
    }
}

fn wrong_thread(channel: &str, addr: SocketAddr) -> Error {
    shared_error(
        channel,
        "",
        format!(
            "the sessions accepted on {addr} with receive = \"shared\" belong to the thread that accepted the first of them; accept and poll them there"
        ),
    )
}

/// A session's place on its acceptor, for the data path.
pub(super) struct Member {
    acceptor: *const Acceptor,
    slot: usize,
}

/// Holds the acceptor and returns the session's reservation and buffers
/// when dropped (after the session's queue pair).
pub(super) struct Membership {
    acceptor: Arc<Acceptor>,
    slot: usize,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let Some(inner) = self.acceptor.inner() else {
            log::warn!(
                "a session of the shared receive queue on {} was dropped on another thread than its acceptor's: its buffers stay reserved",
                self.acceptor.addr
            );
            return;
        };
        // The queue pair is gone: file what it completed before, so no
        // completion of it is left for a later queue pair of the same number.
        while matches!(inner.drain(), Ok(n) if n > 0) {}
        let Some(mut b) = inner.inboxes.get_mut(self.slot).and_then(Option::take) else {
            return;
        };
        inner.members.remove(&b.qpn);
        inner.reserved = inner.reserved.saturating_sub(b.window);
        // Buffers filed but never delivered, and delivered but not yet
        // reposted, go back to the queue.
        let mut back: Vec<u32> = b.released[..b.nreleased as usize].to_vec();
        while let Some(a) = b.take() {
            back.push(a.index);
        }
        // SAFETY: every one of them was handed back by a completion and is
        // referred to by nothing (the session is gone).
        if let Err(e) = unsafe { inner.ring.post(&mut inner.srq, &back) } {
            log::warn!(
                "shared receive on {}: ibv_post_srq_recv: {}",
                inner.device,
                errors::describe_errno(e)
            );
        }
    }
}

impl RcSession {
    /// Registered bytes of this end: its send and control pools, its own
    /// receive ring (0 when it receives through a shared queue), and the
    /// shared receive pool it uses (0 without one), which all the sessions
    /// of its acceptor share.
    pub fn registered_bytes(&self) -> (u64, u64, u64) {
        let c = &self.cold;
        let send = c._send_mem.len() + c._ctrl_mem.len();
        let ring = c._recv_mem.as_ref().map_or(0, Region::len);
        let pool = c
            .membership
            .as_ref()
            .and_then(|m| m.acceptor.inner())
            .map_or(0, |i| i.pool.len());
        (send as u64, ring as u64, pool as u64)
    }

    /// Whether the receives of this end come through a shared receive
    /// queue.
    pub fn receives_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Accepts session `name` on the acceptor of `cfg.address` with a
    /// shared receive queue, made on this thread's first such accept.
    pub(super) fn accept_shared(
        name: &str,
        cfg: &SessionConfig,
        vcfg: &VerbsConfig,
        addr: SocketAddr,
    ) -> Result<RcSession> {
        let lib = lib()?;
        let channel = format!("session `{name}`");
        let deadline = Instant::now() + cfg.connect_timeout;
        let acceptor = Acceptor::get_or_make(lib, addr, cfg, vcfg, &channel)?;
        let inner = acceptor
            .inner()
            .ok_or_else(|| wrong_thread(&channel, addr))?;
        let window = u32::try_from(cfg.capacity).unwrap_or(u32::MAX);
        if slot_size(cfg.max_message) > inner.slot {
            return Err(shared_error(
                &channel,
                &inner.device,
                format!(
                    "sessions.{name}.max_message {} does not fit the {}-byte buffers of the shared receive queue on {addr}, sized by the first session accepted there; give its sessions one max_message",
                    cfg.max_message, inner.slot
                ),
            ));
        }
        let pool = inner.ring.depth();
        if inner.reserved.saturating_add(window) > pool {
            return Err(shared_error(
                &channel,
                &inner.device,
                format!(
                    "sessions.{name}.capacity {window} does not fit: the sessions on {addr} already hold {} of its verbs.shared_receive_buffers {pool}; lower their capacity or raise verbs.shared_receive_buffers",
                    inner.reserved
                ),
            ));
        }
        let timeout = || Error::Timeout {
            channel: channel.clone(),
            what: "a peer connecting",
            waited_ms: cfg.connect_timeout.as_millis() as u64,
        };
        let want = name_hash(name);
        let mut rejected = 0u64;
        let (id, peer) = loop {
            if let Some(i) = inner.pending.iter().position(|(_, h)| h.name_hash == want) {
                let (id, h) = inner.pending.swap_remove(i);
                if h.mode == SessionMode::Send {
                    break (id, h);
                }
                refuse(
                    id,
                    &channel,
                    &mode_mismatch(h.mode, SessionMode::Send),
                    &mut rejected,
                );
                continue;
            }
            let Some(ev) = inner.events.next_until(deadline)? else {
                return Err(timeout());
            };
            // The acceptor's channel outlives the id until it is migrated.
            let Some((id, hello)) = screen_request(lib, &ev, vcfg, &channel, &mut rejected) else {
                continue;
            };
            match hello {
                // A shared receive queue carries SEND/RECV sessions only.
                Ok(h) if h.name_hash == want && h.mode != SessionMode::Send => refuse(
                    id,
                    &channel,
                    &mode_mismatch(h.mode, SessionMode::Send),
                    &mut rejected,
                ),
                Ok(h) if h.name_hash == want => break (id, h),
                // Another session of this acceptor, accepted later.
                Ok(h) if inner.pending.len() < MAX_PENDING => inner.pending.push((id, h)),
                Ok(_) => refuse(id, &channel, "too many requests waiting", &mut rejected),
                Err(why) => refuse(id, &channel, &why, &mut rejected),
            }
        };
        // The session's own events (established, disconnected) go to its
        // own channel, as for a session with its own listener.
        let events = EventChannel::new(lib.cm)?;
        // SAFETY: the request event was acknowledged when copied; `events`
        // is kept by the session after the id.
        unsafe { id.migrate(&events) }?;
        if id.context() != inner.listener.context() {
            return Err(shared_error(
                &channel,
                &inner.device,
                "the connection arrived on another device than the listener's".into(),
            ));
        }
        let shared = SharedParts {
            pd: &inner.pd,
            cq: &inner.cq,
            srq: &inner.srq,
        };
        // SAFETY: the acceptor's objects are on the id's device (checked
        // above) and outlive the session, which holds the acceptor.
        let parts = unsafe { Parts::build_in(lib, &id, cfg, vcfg, name, Some(shared)) }?;
        // Filed before the peer can send: a completion of an unknown queue
        // pair would be dropped.
        let qpn = parts.qp.num();
        let slot = match inner.inboxes.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                inner.inboxes.push(None);
                inner.inboxes.len() - 1
            }
        };
        inner.inboxes[slot] = Some(Inbox::new(qpn, window));
        inner.members.insert(qpn, slot);
        inner.reserved += window;
        let membership = Membership {
            acceptor: Arc::clone(&acceptor),
            slot,
        };
        let hello = parts.hello(name).encode();
        id.accept(conn_param(&hello), &parts.device, qpn)?;
        let peer_addr = peer_of(&id);
        established_or(events.next_until(deadline)?, &channel, &peer_addr, timeout)?;
        let mut s = RcSession::new(
            channel, parts, id, events, peer, peer_addr, cfg, vcfg, rejected,
        );
        s.shared = Some(Member {
            acceptor: Arc::as_ptr(&acceptor),
            slot,
        });
        s.cold.membership = Some(membership);
        Ok(s)
    }

    /// Delivers up to `max` messages of this session from its inbox and the
    /// shared completion queue. Returns how many (0: none waiting).
    pub(super) fn poll_shared<F: FnMut(Message<'_>)>(
        &mut self,
        max: usize,
        f: &mut F,
    ) -> Result<usize> {
        let Some(m) = &self.shared else {
            return Ok(0);
        };
        let (acceptor, slot) = (m.acceptor, m.slot);
        // SAFETY: the acceptor is kept alive by the session's membership.
        let acceptor = unsafe { &*acceptor };
        let mut n = 0;
        while n < max {
            // Scoped: no reference into the acceptor is held while the
            // callback runs (it may poll another session of it).
            let next = {
                let Some(inner) = acceptor.inner() else {
                    let e = wrong_thread(&self.cold.channel, acceptor.addr);
                    return Err(e);
                };
                let mine = inner.inboxes[slot].as_mut().expect("a live member");
                match mine.take() {
                    Some(a) => Some((a, mine.overrun)),
                    None if mine.overrun => None,
                    None => match inner.drain() {
                        Ok(0) => None,
                        Ok(k) => {
                            // Counted by the session whose poll drained
                            // them, whichever session they were for.
                            self.completions += k as u64;
                            let mine = inner.inboxes[slot].as_mut().expect("a live member");
                            mine.take().map(|a| (a, mine.overrun))
                        }
                        Err(e) => {
                            self.fail_os("ibv_poll_cq (shared receives)", e);
                            return Err(self.ended().expect("a failure was recorded"));
                        }
                    },
                }
            };
            let Some((a, _)) = next else {
                let overrun = acceptor
                    .inner()
                    .and_then(|i| i.inboxes[slot].as_ref())
                    .is_some_and(|b| b.overrun);
                if overrun && self.end.is_none() {
                    self.fail(End::Protocol(
                        "it sent more messages than it had credit for".into(),
                    ));
                    return Err(self.ended().expect("a failure was recorded"));
                }
                break;
            };
            if a.status != IBV_WC_SUCCESS {
                if let Some(b) = acceptor.inner().and_then(|i| i.inboxes[slot].as_mut()) {
                    b.release(a.index);
                }
                let _ = self.receipts.consumed();
                let wc = ibv_wc {
                    wr_id: u64::from(a.index),
                    status: a.status,
                    qp_num: self.qpn,
                    byte_len: a.len,
                    ..Default::default()
                };
                self.wc_failed(&wc, "receive");
                continue;
            }
            // SAFETY: a successful completion handed the buffer back; it is
            // reposted only after the callback returns (released below).
            let buf = unsafe {
                acceptor
                    .inner()
                    .expect("owner thread checked above")
                    .ring
                    .buffer(a.index, a.len)
            };
            let delivered = self.deliver(buf, f);
            if let Some(b) = acceptor.inner().and_then(|i| i.inboxes[slot].as_mut()) {
                b.release(a.index);
            }
            delivered?;
            n += 1;
            if self.receipts.consumed() {
                self.repost();
            }
        }
        Ok(n)
    }

    /// Reposts this session's `n` delivered buffers to the shared queue,
    /// then grants the peer that many credits.
    pub(super) fn repost_shared(&mut self, n: u32) {
        let Some(m) = &self.shared else {
            return;
        };
        // SAFETY: the acceptor is kept alive by the session's membership.
        let acceptor = unsafe { &*m.acceptor };
        let Some(inner) = acceptor.inner() else {
            return;
        };
        let Some(b) = inner.inboxes[m.slot].as_mut() else {
            return;
        };
        let k = b.nreleased.min(n);
        if k > 0 {
            self.extra_posted.recv_wrs += u64::from(k);
            self.extra_posted.recv_doorbells += 1;
        }
        // SAFETY: the released buffers were delivered and their callbacks
        // returned, so nothing refers to them.
        if let Err(e) = unsafe { inner.ring.post(&mut inner.srq, &b.released[..k as usize]) } {
            self.fail_os("ibv_post_srq_recv", e);
            return;
        }
        b.released.copy_within(k as usize..b.nreleased as usize, 0);
        b.nreleased -= k;
        b.held -= k;
        self.receipts.reposted(k);
        self.announce();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrived(index: u32) -> Arrived {
        Arrived {
            index,
            len: 30,
            status: IBV_WC_SUCCESS,
        }
    }

    /// A session holds at most its window of the pool: filed, delivered
    /// and not yet reposted together. One more is a peer beyond its credit.
    #[test]
    fn an_inbox_holds_its_window_in_order_and_no_more() {
        let mut b = Inbox::new(7, 4);
        for i in [10, 3, 8, 1] {
            assert!(b.file(arrived(i)));
        }
        assert!(!b.overrun);
        assert!(!b.file(arrived(2)), "a fifth buffer is beyond the credit");
        assert!(b.overrun);
        let order: Vec<u32> = std::iter::from_fn(|| b.take()).map(|a| a.index).collect();
        assert_eq!(order, [10, 3, 8, 1]);
        for i in order {
            b.release(i);
        }
        // Delivered but not reposted: still held.
        assert_eq!((b.held, b.nreleased), (4, 4));
        assert_eq!(&b.released[..], [10, 3, 8, 1]);
    }

    #[test]
    fn the_inbox_ring_wraps() {
        let mut b = Inbox::new(1, 3);
        for round in 0..10u32 {
            assert!(b.file(arrived(round)));
            assert_eq!(b.take().map(|a| a.index), Some(round));
            // Reposted at once, as repost_shared does.
            b.held -= 1;
        }
        assert_eq!(b.take().map(|a| a.index), None);
    }
}
