//! One UD multicast line: a [`DatagramLink`] over an unreliable-datagram
//! queue pair that joined an IP multicast group through rdma_cm.
//!
//! Joining: the link's UD cm id resolves the group address from the
//! interface address (which picks the device), gets a UD queue pair (which
//! rdma_cm brings to RTS with its qkey), posts its receive ring, then
//! `rdma_join_multicast`s and waits for `MULTICAST_JOIN`, whose UD
//! parameters give the group's address handle attributes, the remote QPN
//! (0xFFFFFF) and the qkey; librdmacm then attaches the QP to the group.
//! On RoCE the join also joins the IP group, so switches and the host stack
//! forward the group to this port.
//!
//! Publishing lines (`send_only`) need the join only for the address
//! handle and qkey: an attached QP would get back every datagram it sends
//! to the group, one receive completion and repost each, and its receive
//! buffers could fill with them while retransmit requests wait. Such a
//! line joins as a send-only full member (`rdma_join_multicast_ex`), which
//! librdmacm does not attach (and which sends no IGMP join); where the
//! kernel or device refuses that (RoCE v1, InfiniBand without a subnet
//! manager that supports it, a librdmacm without the call) it joins in full
//! and detaches the QP with `ibv_detach_mcast`. [`UdLink::membership`] and
//! the join's log line say which. Either way the QP still receives unicast
//! datagrams: the retransmit requests subscribers send it.
//!
//! Sizes: a datagram carries at most the port's active MTU (1024 on
//! Soft-RoCE over a 1500-byte netdev), so [`max_datagram`](UdLink::max_datagram)
//! is the smaller of that and the configured size; receive buffers are the
//! MTU plus 40 bytes in front, where the device writes the GRH (on RoCE v2
//! with IPv4, the IPv4 header in its last 20 bytes).
//!
//! Sources: a received datagram's [`UdPeer`] is the sender's GID (from the
//! GRH) and QPN (from the work completion's `src_qp`). A stream subscriber
//! binds each line to one such source (docs/SECURITY.md): datagrams from
//! another QP, even on the publisher's own GID, are dropped and counted.
//!
//! Replies: a received datagram's [`UdPeer`] is the sender's GID and QPN.
//! `send_to` finds its address handle in a small cache allocated at
//! start-up, keyed by (GID, QPN), and creates one only on a miss. The
//! handle is built from the GID (global route, our source GID index and
//! port): that is what `ibv_create_ah_from_wc` computes for a unicast
//! datagram, and the only way for a datagram that arrived on a multicast
//! group, for which libibverbs refuses `ibv_create_ah_from_wc` (EINVAL: it
//! looks the group address up in the local GID table). An evicted handle is
//! destroyed only after every send that used it has completed; replies ask
//! for a completion, so that is always soon.
//!
//! Drops: a group send that finds the send queue full even after reaping
//! completions is dropped and counted, never waited for. A receive
//! completing with an error is counted and its buffer reposted. A datagram
//! that arrives while every receive buffer is full is dropped by the device
//! without a trace here; the stream's sequence numbers report it as a gap.

use std::fmt;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use verbs_sys::{
    ibv_ah_attr, ibv_wc, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WC_GRH, IBV_WC_SUCCESS,
    IBV_WC_WR_FLUSH_ERR, IBV_WR_SEND,
};

use super::ah::{Ah, AhCache};
use super::async_events::Watch;
use super::cm::{CmId, EventChannel};
use super::cq::Cq;
use super::credit::repost_batch;
use super::mr::Region;
use super::pd::Pd;
use super::qp::{self, CmQp};
use super::recv_ring::RecvRing;
use super::send_queue::SendQueue;
use super::{errors, lib, ud_join};
use crate::config::{StreamConfig, VerbsConfig};
use crate::error::{Error, Result};
use crate::transport::datagram::DatagramLink;

/// Bytes in front of every received datagram where the device puts the GRH.
pub const GRH_LEN: usize = 40;
/// QPN that addresses a multicast group.
pub(super) const MULTICAST_QPN: u32 = 0xFF_FFFF;
/// Completions per poll call.
const WC_BATCH: usize = 32;

/// Settings of one UD multicast line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdLinkConfig {
    /// The IPv4 multicast group; rdma_cm maps it to the port's multicast
    /// GID. The port number is part of the rdma_cm address only.
    pub group: SocketAddrV4,
    /// Local address whose device carries the line; `None`: the route to
    /// the group decides.
    pub interface: Option<Ipv4Addr>,
    /// Largest datagram wanted; the link caps it at the active MTU.
    pub max_datagram: usize,
    /// Receive buffers kept posted.
    pub recv_depth: u32,
    /// Send queue entries (datagrams in flight before sends are dropped).
    pub send_depth: u32,
    /// Peers whose address handles are kept for replies.
    pub peer_cache: usize,
    /// How long address resolution and the join may take.
    pub join_timeout: Duration,
    /// The line only sends to the group (a stream publisher's): its QP is
    /// not attached, so it receives no group datagrams, its own included,
    /// only unicast ones (retransmit requests). A subscriber's line
    /// receives the group.
    pub send_only: bool,
}

impl UdLinkConfig {
    /// Receive buffers by default (`verbs.ud_recv_depth`'s default).
    pub const DEFAULT_RECV_DEPTH: u32 = 1024;
    /// Send queue entries by default (`verbs.ud_send_depth`'s default).
    pub const DEFAULT_SEND_DEPTH: u32 = 256;
    /// Address handles cached by default.
    pub const DEFAULT_PEER_CACHE: usize = 32;

    /// Line A (or B, with `line_b`) of stream `name`: its `group` and
    /// `interface` (or `group_b`, `interface_b`) and `max_datagram`, with
    /// the default depths and join timeout (a bus sets its `verbs` keys'
    /// over them).
    pub fn from_stream(name: &str, s: &StreamConfig, line_b: bool) -> Result<UdLinkConfig> {
        let (key, group, interface) = if line_b {
            ("group_b", &s.group_b, &s.interface_b)
        } else {
            ("group", &s.group, &s.interface)
        };
        let channel = format!("stream `{name}`");
        if group.is_empty() {
            return Err(Error::Missing {
                channel,
                key: format!("streams.{name}.{key}"),
                transport: "verbs",
            });
        }
        let bad = |what: &str, v: &str| {
            Error::Config(crate::error::ConfigError {
                source_name: "<config>".into(),
                key: format!("streams.{name}.{what}"),
                message: format!("`{v}` is not valid here"),
            })
        };
        let group: SocketAddrV4 = group.parse().map_err(|_| bad(key, group))?;
        let interface = if interface.is_empty() {
            None
        } else {
            Some(interface.parse().map_err(|_| bad("interface", interface))?)
        };
        Ok(UdLinkConfig {
            group,
            interface,
            max_datagram: s.max_datagram,
            recv_depth: Self::DEFAULT_RECV_DEPTH,
            send_depth: Self::DEFAULT_SEND_DEPTH,
            peer_cache: Self::DEFAULT_PEER_CACHE,
            join_timeout: VerbsConfig::default().join_timeout,
            send_only: false,
        })
    }
}

/// The sender of a received datagram: its GID and queue pair number.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdPeer {
    /// The sender's GID (IPv4-mapped on RoCE v2 with IPv4).
    pub gid: [u8; 16],
    /// The sender's queue pair number.
    pub qpn: u32,
}

impl fmt::Debug for UdPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = std::net::Ipv6Addr::from(self.gid);
        match ip.to_ipv4_mapped() {
            Some(v4) => write!(f, "UdPeer({v4}, QP {:#x})", self.qpn),
            None => write!(f, "UdPeer({ip}, QP {:#x})", self.qpn),
        }
    }
}

/// How a line's queue pair stands with its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// Attached: the QP receives the group's datagrams, its own included
    /// (a subscriber's line, or a send-only line whose QP could not be
    /// detached).
    Full,
    /// A send-only full member: the QP was never attached.
    SendOnly,
    /// Joined in full (a send-only join was refused) and then detached.
    Detached,
}

impl Membership {
    /// Whether group datagrams, the line's own included, reach its QP.
    pub fn receives_group(self) -> bool {
        self == Membership::Full
    }
}

/// Where a received datagram's source GID is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GrhKind {
    /// A real GRH (InfiniBand, RoCE v1, RoCE v2 over IPv6): source GID at
    /// bytes 8..24.
    Ipv6,
    /// RoCE v2 over IPv4: the IPv4 header in bytes 20..40, source address
    /// at 32..36.
    Ipv4,
}

/// One UD multicast line.
pub struct UdLink {
    sq: SendQueue,
    /// Granted inline bytes (0: inline off).
    inline_max: usize,
    max_datagram: usize,
    send_base: *mut u8,
    send_slot: usize,
    send_depth: u64,
    send_lkey: u32,
    /// Received buffers not yet reposted, and the repost batch.
    unposted: u32,
    batch: u32,
    qkey: u32,
    group_qpn: u32,
    sgid_index: u8,
    port: u8,
    grh: GrhKind,
    local: UdPeer,
    dropped: u64,
    sent: u64,
    received: u64,
    group: SocketAddrV4,
    membership: Membership,
    channel: String,
    device: String,
    qpn: u32,
    /// Empty receive polls since the device's events were last read.
    idle_polls: u32,
    /// A fault already reported: every later call returns it again.
    fault: Option<String>,
    // Declared before the id: the watch must end while rdma_cm still holds
    // the device context open.
    watch: Watch,
    // Verbs objects in teardown order: QP, address handles, queues, pools,
    // PD, then the id and its channel (after Drop::drop left the group).
    qp: CmQp,
    ahs: AhCache<Ah>,
    group_ah: Ah,
    ring: RecvRing,
    send_cq: Cq,
    recv_cq: Cq,
    // Held for their registrations and teardown only.
    _send_mem: Region,
    _recv_mem: Region,
    pd: Pd,
    id: CmId,
    _events: EventChannel,
}

// SAFETY: the link exclusively owns every verbs object and pool its raw
// pointers refer to; verbs objects may be used from any thread as long as
// no two use one at once, which `&mut self` ensures (the type is not Sync).
unsafe impl Send for UdLink {}

impl fmt::Debug for UdLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdLink")
            .field("channel", &self.channel)
            .field("group", &self.group)
            .field("membership", &self.membership)
            .field("device", &self.device)
            .field("qp", &format_args!("{:#x}", self.qpn))
            .field("max_datagram", &self.max_datagram)
            .field("sent", &self.sent)
            .field("received", &self.received)
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl UdLink {
    /// Joins `cfg.group` on the device of `cfg.interface` and readies the
    /// link; `channel` names it in errors ("stream `md` line A"). The steps
    /// are in [`super::ud_join`]: resolve the group's address, size the
    /// link to the device, create its verbs objects, join, learn the local
    /// GID.
    pub fn join(channel: &str, cfg: &UdLinkConfig, vcfg: &VerbsConfig) -> Result<UdLink> {
        let lib = lib()?;
        let steps = ud_join::Steps::new(channel, cfg);
        let (events, id) = steps.resolve(&lib)?;
        let shape = steps.shape(&lib, &id, vcfg)?;
        let mut parts = steps.create(&lib, &id, &shape, vcfg)?;
        let (ud, membership) = steps.join(&lib, &events, &id, &mut parts.qp, &shape.device)?;
        let mut ah_attr: ibv_ah_attr = ud.ah_attr;
        // SAFETY: the PD outlives the handle (field order).
        let group_ah = unsafe { Ah::new(lib.verbs, &parts.pd, &mut ah_attr, &shape.device) }?;
        let sgid_index = ah_attr.grh.sgid_index;
        let port = if ah_attr.port_num != 0 {
            ah_attr.port_num
        } else {
            shape.port
        };
        let (grh, gid) = steps.local_gid(&lib, &id, port, sgid_index);
        // Some devices grant inline room even when asked for none.
        let inline_max = if vcfg.inline {
            parts.caps.inline as usize
        } else {
            0
        };
        let (device, qpn, max_datagram) = (shape.device, parts.qpn, shape.max_datagram);
        let member = match membership {
            Membership::Full => "receiving the group",
            Membership::SendOnly => "send-only, QP not attached",
            Membership::Detached => "QP detached",
        };
        log::info!(
            "{channel}: joined {} on {device} port {port} (QP {qpn:#x}, qkey {:#x}, {member}); datagrams up to {max_datagram} bytes (MTU {}), {} bytes inline",
            cfg.group,
            ud.qkey,
            shape.mtu,
            inline_max
        );
        // SAFETY: rdma_cm keeps the id's context open while the id lives;
        // the watch is dropped before the id (UdLink's field order).
        let watch = unsafe {
            Watch::new(
                lib.verbs,
                id.context(),
                id.port(),
                qpn,
                [
                    parts.send_cq.as_raw() as usize,
                    parts.recv_cq.as_raw() as usize,
                ],
            )
        };
        Ok(UdLink {
            sq: SendQueue::new(cfg.send_depth, vcfg.signal_every),
            inline_max,
            max_datagram,
            send_base: parts.send_mem.ptr(),
            send_slot: shape.send_slot,
            send_depth: u64::from(cfg.send_depth),
            send_lkey: parts.send_mem.lkey(),
            unposted: 0,
            batch: repost_batch(vcfg.recv_batch, cfg.recv_depth),
            qkey: ud.qkey,
            group_qpn: ud.qp_num,
            sgid_index,
            port,
            grh,
            local: UdPeer { gid, qpn },
            dropped: 0,
            sent: 0,
            received: 0,
            group: cfg.group,
            membership,
            channel: channel.into(),
            device,
            qpn,
            idle_polls: 0,
            fault: None,
            watch,
            qp: parts.qp,
            ahs: AhCache::new(cfg.peer_cache),
            group_ah,
            ring: parts.ring,
            send_cq: parts.send_cq,
            recv_cq: parts.recv_cq,
            _send_mem: parts.send_mem,
            _recv_mem: parts.recv_mem,
            pd: parts.pd,
            id,
            _events: events,
        })
    }

    /// This link's own address, as its peers see it.
    pub fn local(&self) -> UdPeer {
        self.local
    }

    /// How the line's QP stands with its group: whether the group's
    /// datagrams, its own included, reach it.
    pub fn membership(&self) -> Membership {
        self.membership
    }

    /// The RDMA device carrying the line.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Datagrams handed to the device.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Datagrams delivered by `poll`.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The line's end: a device event or a flushed completion says the QP
    /// can carry nothing more. Every later call returns the same error.
    #[cold]
    fn fault(&mut self, cause: String) -> Error {
        let cause = self.fault.get_or_insert(cause).clone();
        Error::RdmaFault {
            channel: self.channel.clone(),
            device: self.device.clone(),
            port: self.port,
            qp: self.qpn,
            cause,
            acked: 0,
            delivered: 0,
        }
    }

    /// Reads the device's pending async events (non-blocking) and ends the
    /// line if one concerns its QP, CQs, port or device.
    #[cold]
    fn check_device(&mut self) -> Result<()> {
        match self.watch.check() {
            Some(cause) => Err(self.fault(cause)),
            None => Ok(()),
        }
    }

    /// Takes send completions until the queue is empty; a failed send is
    /// counted as dropped.
    fn reap(&mut self) -> Result<()> {
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        loop {
            let done = self.send_cq.poll(&mut wcs).map_err(|e| {
                errors::os(
                    "ibv_poll_cq (UD sends)",
                    (self.device.as_str(), self.port),
                    Some(self.qpn),
                    e,
                )
            })?;
            if done.is_empty() {
                return Ok(());
            }
            let mut flushed = false;
            for wc in done {
                self.sq.complete(wc.wr_id);
                if wc.status != IBV_WC_SUCCESS {
                    self.dropped += 1;
                    flushed |= wc.status == IBV_WC_WR_FLUSH_ERR;
                    crate::counters::registry::note_qp_completion_error(
                        &self.device,
                        wc.qp_num,
                        crate::counters::registry::WcQueue::Send,
                        wc.status,
                        &format!(
                            "{}: UD send on QP {}: {}",
                            self.channel,
                            wc.qp_num,
                            errors::wc_status(wc.status)
                        ),
                    );
                    log::debug!("{}: send {}", self.channel, errors::wc_status(wc.status));
                }
            }
            if flushed {
                let cause = format!("a send was {}", errors::wc_status(IBV_WC_WR_FLUSH_ERR));
                return Err(self.fault(cause));
            }
        }
    }

    /// Posts one datagram to `ah`/`qpn`. The caller made room.
    fn post(
        &mut self,
        ah: *mut verbs_sys::ibv_ah,
        qpn: u32,
        bytes: &[u8],
        signal: bool,
    ) -> Result<()> {
        let slot = self.sq.take(signal);
        let mut flags = if slot.signaled { IBV_SEND_SIGNALED } else { 0 };
        let src = if bytes.len() <= self.inline_max {
            flags |= IBV_SEND_INLINE;
            bytes.as_ptr()
        } else {
            // SAFETY: slot `index % depth` is free (the queue had room, so
            // its last request completed) and holds max_datagram >= len
            // bytes; `bytes` does not overlap the pool.
            unsafe {
                let p = self
                    .send_base
                    .add((slot.index % self.send_depth) as usize * self.send_slot);
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
                p.cast_const()
            }
        };
        let mut sge = qp::sge(src, bytes.len(), self.send_lkey);
        let mut wr = qp::send_request(slot.index, &mut sge, IBV_WR_SEND, flags);
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = qpn;
        wr.wr.ud.remote_qkey = self.qkey;
        // SAFETY: inline data is copied during the call; otherwise the
        // source is a registered send slot that is not reused before this
        // request completes (send-queue accounting). The address handle
        // outlives the request: the cache destroys one only after the
        // requests that used it completed.
        match unsafe { self.qp.post_send(&mut wr) } {
            Ok(()) => {
                self.sent += 1;
                Ok(())
            }
            Err(e) => {
                self.sq.untake(slot);
                Err(errors::os(
                    "ibv_post_send (UD)",
                    (self.device.as_str(), self.port),
                    Some(self.qpn),
                    e,
                ))
            }
        }
    }

    fn check_len(&self, len: usize) -> Result<()> {
        Error::check_fits(len, self.max_datagram, &self.channel)
    }

    /// The cache slot of `peer`'s address handle, creating it on a miss.
    #[cold]
    fn add_peer(&mut self, peer: UdPeer) -> Result<usize> {
        let lib = lib()?;
        let victim = loop {
            match self.ahs.victim(self.sq.completed()) {
                Ok(i) => break i,
                // Every cached handle is used by a send still in flight;
                // those are signaled (see send_to), so this ends soon.
                Err(_) => {
                    self.reap()?;
                    std::hint::spin_loop();
                }
            }
        };
        let mut attr = ibv_ah_attr {
            is_global: 1,
            port_num: self.port,
            ..Default::default()
        };
        attr.grh.dgid.raw = peer.gid;
        attr.grh.sgid_index = self.sgid_index;
        attr.grh.hop_limit = 64;
        // SAFETY: the PD outlives the cache (field order).
        let ah = unsafe { Ah::new(lib.verbs, &self.pd, &mut attr, &self.device) }?;
        self.ahs.put(victim, peer.gid, peer.qpn, ah);
        Ok(victim)
    }

    /// The sender of a datagram, from its completion and GRH bytes.
    #[inline]
    fn peer_of(&self, wc: &ibv_wc, grh: &[u8]) -> UdPeer {
        let mut gid = [0u8; 16];
        if wc.wc_flags & IBV_WC_GRH != 0 && grh.len() >= GRH_LEN {
            match self.grh {
                GrhKind::Ipv4 => {
                    gid[10] = 0xff;
                    gid[11] = 0xff;
                    gid[12..16].copy_from_slice(&grh[32..36]);
                }
                GrhKind::Ipv6 => gid.copy_from_slice(&grh[8..24]),
            }
        }
        UdPeer {
            gid,
            qpn: wc.src_qp,
        }
    }
}

impl DatagramLink for UdLink {
    type Peer = UdPeer;

    fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    #[inline]
    fn send_group(&mut self, bytes: &[u8]) -> Result<()> {
        self.check_len(bytes.len())?;
        if !self.sq.has_room() {
            self.reap()?;
            if !self.sq.has_room() {
                self.dropped += 1;
                return Ok(());
            }
        }
        let ah = self.group_ah.as_raw();
        self.post(ah, self.group_qpn, bytes, false)
    }

    fn send_to(&mut self, peer: UdPeer, bytes: &[u8]) -> Result<()> {
        self.check_len(bytes.len())?;
        let i = match self.ahs.find(&peer.gid, peer.qpn) {
            Some(i) => i,
            None => self.add_peer(peer)?,
        };
        if !self.sq.has_room() {
            self.reap()?;
            if !self.sq.has_room() {
                self.dropped += 1;
                return Ok(());
            }
        }
        let ah = self.ahs.use_slot(i, self.sq.next_index()).as_raw();
        // Signaled, so the handle's last use completes visibly and it can
        // be evicted without waiting on unsignaled sends.
        self.post(ah, peer.qpn, bytes, true)
    }

    #[inline]
    fn poll<F: FnMut(UdPeer, &[u8])>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        if self.fault.is_some() {
            return Err(self.fault(String::new()));
        }
        let mut n = 0;
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; WC_BATCH];
        while n < max {
            let want = (max - n).min(WC_BATCH);
            let done = self.recv_cq.poll(&mut wcs[..want]).map_err(|e| {
                errors::os(
                    "ibv_poll_cq (UD receives)",
                    (self.device.as_str(), self.port),
                    Some(self.qpn),
                    e,
                )
            })?;
            if done.is_empty() {
                // An idle line reads the device's events now and then: a
                // port or QP failure shows no completion at all.
                self.idle_polls += 1;
                if self.idle_polls >= crate::transport::CHECK_EVERY {
                    self.idle_polls = 0;
                    self.check_device()?;
                }
                break;
            }
            for wc in done {
                self.unposted += 1;
                if wc.status == IBV_WC_WR_FLUSH_ERR {
                    // The QP is in the error state: nothing will arrive.
                    let cause = format!("a receive was {}", errors::wc_status(wc.status));
                    return Err(self.fault(cause));
                }
                if wc.status != IBV_WC_SUCCESS || (wc.byte_len as usize) < GRH_LEN {
                    self.dropped += 1;
                    if wc.status != IBV_WC_SUCCESS {
                        crate::counters::registry::note_qp_completion_error(
                            &self.device,
                            wc.qp_num,
                            crate::counters::registry::WcQueue::Receive,
                            wc.status,
                            &format!(
                                "UD receive on QP {}: {}",
                                wc.qp_num,
                                errors::wc_status(wc.status)
                            ),
                        );
                    }
                    continue;
                }
                // SAFETY: a successful completion hands the buffer back; it
                // is reposted only after the callback returns.
                let buf = unsafe { self.ring.buffer(wc.wr_id, wc.byte_len) };
                let peer = self.peer_of(wc, &buf[..GRH_LEN]);
                f(peer, &buf[GRH_LEN..]);
                n += 1;
            }
            if self.unposted >= self.batch {
                let k = self.unposted;
                // SAFETY: every unposted buffer's completion was handled
                // and its callback returned.
                unsafe { self.ring.post(&mut self.qp, k) }.map_err(|e| {
                    errors::os(
                        "ibv_post_recv (UD)",
                        (self.device.as_str(), self.port),
                        Some(self.qpn),
                        e,
                    )
                })?;
                self.unposted = 0;
            }
        }
        self.received += n as u64;
        Ok(n)
    }

    fn dropped(&self) -> u64 {
        self.dropped
    }

    fn wait_fds(&self, out: &mut [std::os::fd::RawFd; 2]) -> usize {
        match self.recv_cq.wait_fd() {
            Some(fd) => {
                out[0] = fd;
                1
            }
            None => 0,
        }
    }

    fn arm_wait(&mut self) -> Result<bool> {
        if self.fault.is_some() {
            return Err(self.fault(String::new()));
        }
        // A sleeping line polls too seldom for the idle-poll cadence: it
        // reads the device's events before each sleep instead.
        self.check_device()?;
        self.recv_cq.arm().map_err(|e| {
            errors::os(
                "ibv_req_notify_cq (UD receives)",
                (self.device.as_str(), self.port),
                Some(self.qpn),
                e,
            )
        })
    }

    fn after_wake(&mut self) -> Result<()> {
        self.recv_cq.take_events().map(drop).map_err(|e| {
            errors::os(
                "ibv_get_cq_event (UD receives)",
                (self.device.as_str(), self.port),
                Some(self.qpn),
                e,
            )
        })
    }
}

impl Drop for UdLink {
    fn drop(&mut self) {
        // Leave while the QP still exists: librdmacm detaches it unless it
        // joined send-only (a QP this link detached already fails that
        // detach, which librdmacm ignores). The fields then drop in
        // declaration order (QP, handles, ring, queues, pools, PD, id,
        // channel).
        self.id.leave_multicast(SocketAddr::V4(self.group));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subscriber binds a line to a source by this key: one GID and QPN
    /// is one source; another QPN on the same GID (another process on the
    /// publisher's host) or the same QPN on another GID is another.
    #[test]
    fn a_source_is_its_gid_and_qpn() {
        let peer = |last: u8, qpn: u32| {
            let mut gid = [0u8; 16];
            gid[10] = 0xff;
            gid[11] = 0xff;
            gid[12..].copy_from_slice(&[10, 99, 0, last]);
            UdPeer { gid, qpn }
        };
        let key = |p: UdPeer| <UdLink as DatagramLink>::source_key(&p);
        assert_eq!(key(peer(1, 0x11)), key(peer(1, 0x11)));
        assert_ne!(key(peer(1, 0x11)), key(peer(1, 0x12)));
        assert_ne!(key(peer(1, 0x11)), key(peer(2, 0x11)));
        assert_eq!(format!("{:?}", peer(1, 0x11)), "UdPeer(10.99.0.1, QP 0x11)");
    }
}
