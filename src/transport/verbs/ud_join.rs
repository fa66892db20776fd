//! The steps of joining a UD multicast line ([`UdLink::join`]): resolve the
//! group's address, size the link to the device, create its verbs objects
//! and post its receive ring, join the group (a send-only line without
//! attaching its QP), learn the local GID. Each step fails with an error
//! naming the group, device and QP it got to.
//!
//! [`UdLink::join`]: super::ud_link::UdLink::join

use std::net::SocketAddr;
use std::time::Instant;

use verbs_sys::{
    IBV_ACCESS_LOCAL_WRITE, IBV_GID_TYPE_ROCE_V2, IBV_QPT_UD, RDMA_CM_EVENT_ADDR_RESOLVED,
    RDMA_CM_EVENT_MULTICAST_JOIN, RDMA_PS_UDP,
};

use super::cm::{CmId, EventChannel, UdParam};
use super::cq::Cq;
use super::mr::Region;
use super::pd::Pd;
use super::qp::{Caps, CmQp};
use super::recv_ring::RecvRing;
use super::ud_link::{GrhKind, Membership, UdLinkConfig, GRH_LEN, MULTICAST_QPN};
use super::{device, errors, Lib};
use crate::config::VerbsConfig;
use crate::error::{Error, Result};

/// What every step needs: the line's name, configuration and deadline.
pub(super) struct Steps<'a> {
    channel: &'a str,
    cfg: &'a UdLinkConfig,
    deadline: Instant,
}

/// The link's sizes on its device.
pub(super) struct Shape {
    pub device: String,
    pub port: u8,
    pub mtu: usize,
    pub max_datagram: usize,
    pub recv_slot: usize,
    pub send_slot: usize,
}

/// The link's verbs objects, receive ring posted.
pub(super) struct Parts {
    pub pd: Pd,
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub send_mem: Region,
    pub recv_mem: Region,
    pub qp: CmQp,
    pub qpn: u32,
    pub caps: Caps,
    pub ring: RecvRing,
}

impl<'a> Steps<'a> {
    /// The steps of joining `cfg.group` as `channel`, all within
    /// `cfg.join_timeout` from now.
    pub(super) fn new(channel: &'a str, cfg: &'a UdLinkConfig) -> Steps<'a> {
        Steps {
            channel,
            cfg,
            deadline: Instant::now() + cfg.join_timeout,
        }
    }

    fn timeout(&self, what: &'static str) -> Error {
        Error::Timeout {
            channel: self.channel.into(),
            what,
            waited_ms: self.cfg.join_timeout.as_millis() as u64,
        }
    }

    /// An rdma_cm id whose address is resolved to the group's route, and
    /// its event channel (which must outlive it).
    pub(super) fn resolve(&self, lib: &Lib) -> Result<(EventChannel, CmId)> {
        let cfg = self.cfg;
        let events = EventChannel::new(lib.cm)?;
        // SAFETY: the caller keeps `events` alive longer than the id (the
        // link drops the channel after the id).
        let id = unsafe { CmId::new(lib.cm, &events, RDMA_PS_UDP) }?;
        let ms = cfg.join_timeout.as_millis().clamp(100, 60_000) as i32;
        id.resolve_addr(cfg.interface.map(Into::into), SocketAddr::V4(cfg.group), ms)?;
        match events.next_until(self.deadline)? {
            Some(ev) if ev.kind == RDMA_CM_EVENT_ADDR_RESOLVED => Ok((events, id)),
            Some(ev) => Err(errors::other(
                format!("rdma_resolve_addr {} from {:?}", cfg.group, cfg.interface),
                "",
                None,
                format!("rdma_cm {} (status {})", ev.name(), ev.status),
            )),
            None => Err(self.timeout("resolving the multicast group's address")),
        }
    }

    /// The device, port and MTU the route chose, and the slot sizes that
    /// follow; checks the depths against the device's limits.
    pub(super) fn shape(&self, lib: &Lib, id: &CmId, vcfg: &VerbsConfig) -> Result<Shape> {
        let cfg = self.cfg;
        let device = id.device_name(lib.verbs);
        super::note_overrides(self.channel, vcfg, &device);
        let ctx = id.context();
        let port = id.port();
        // SAFETY: a resolved id's context is live while the id is.
        let pattr = unsafe { device::query_port(lib.verbs, ctx, port, &device) }?;
        let mtu = device::mtu_bytes(pattr.active_mtu);
        let max_datagram = cfg.max_datagram.min(mtu);
        let mut dattr = verbs_sys::ibv_device_attr::default();
        // SAFETY: as above.
        let rc = unsafe { (lib.verbs.ibv_query_device)(ctx, &mut dattr) };
        if rc != 0 {
            return Err(errors::ret("ibv_query_device", &device, None, rc));
        }
        let most = cfg.send_depth.max(cfg.recv_depth) as usize;
        device::check_limit(
            "the UD queues",
            most,
            dattr.max_qp_wr,
            &device,
            "the link's depths",
        )?;
        Ok(Shape {
            recv_slot: (GRH_LEN + mtu).div_ceil(64) * 64,
            send_slot: max_datagram.div_ceil(64) * 64,
            device,
            port,
            mtu,
            max_datagram,
        })
    }

    /// The PD, queues, pools and QP of the link, its receive ring posted.
    /// Inline room the device refuses is halved until it accepts.
    pub(super) fn create(
        &self,
        lib: &Lib,
        id: &CmId,
        shape: &Shape,
        vcfg: &VerbsConfig,
    ) -> Result<Parts> {
        let cfg = self.cfg;
        let (ctx, device) = (id.context(), shape.device.as_str());
        // SAFETY: every object below is created on the id's live context
        // and stored in the link, whose field order drops each before what
        // it depends on, and the id after all of them.
        let pd = unsafe { Pd::alloc(lib.verbs, ctx, device) }?;
        // SAFETY: as above.
        let send_cq = unsafe { Cq::new(lib.verbs, ctx, cfg.send_depth as usize, device) }?;
        // SAFETY: as above.
        let recv_cq = unsafe { Cq::with_channel(lib.verbs, ctx, cfg.recv_depth as usize, device) }?;
        // The NIC only reads the send pool; the receive pool takes local
        // writes; nothing is remotely accessible.
        // SAFETY: as above.
        let send_mem = unsafe {
            Region::new(
                lib.verbs,
                &pd,
                cfg.send_depth as usize * shape.send_slot,
                0,
                "the UD send pool",
                device,
            )
        }?;
        // SAFETY: as above.
        let recv_mem = unsafe {
            Region::new(
                lib.verbs,
                &pd,
                cfg.recv_depth as usize * shape.recv_slot,
                IBV_ACCESS_LOCAL_WRITE,
                "the UD receive pool",
                device,
            )
        }?;
        let mut inline = if vcfg.inline { vcfg.max_inline } else { 0 };
        let (mut qp, caps) = loop {
            let want = Caps {
                send_wr: cfg.send_depth,
                recv_wr: cfg.recv_depth,
                inline,
            };
            // SAFETY: as above; PD and queues are on the id's device.
            match unsafe {
                CmQp::create(
                    lib.cm, id, &pd, &send_cq, &recv_cq, IBV_QPT_UD, want, device,
                )
            } {
                Ok(x) => break x,
                Err(e) if inline > 0 => {
                    log::info!(
                        "{}: {e}; retrying with {} bytes inline",
                        self.channel,
                        inline / 2
                    );
                    inline /= 2;
                }
                Err(e) => return Err(e),
            }
        };
        let qpn = qp.num();
        let mut ring = RecvRing::new(&recv_mem, cfg.recv_depth, shape.recv_slot);
        // SAFETY: at start-up no buffer is posted or handed out.
        if let Err(e) = unsafe { ring.post(&mut qp, cfg.recv_depth) } {
            return Err(errors::os(
                "ibv_post_recv of the UD receive ring",
                device,
                Some(qpn),
                e,
            ));
        }
        Ok(Parts {
            pd,
            send_cq,
            recv_cq,
            send_mem,
            recv_mem,
            qp,
            qpn,
            caps,
            ring,
        })
    }

    /// Joins the group and waits for rdma_cm's answer: the group's address
    /// handle attributes, QPN and qkey, and how the QP stands with the
    /// group. A send-only line joins as a send-only full member, so its QP
    /// is never attached; where that is refused it joins in full and
    /// detaches the QP again, and where even that fails it stays attached
    /// (a warning says so).
    pub(super) fn join(
        &self,
        lib: &Lib,
        events: &EventChannel,
        id: &CmId,
        qp: &mut CmQp,
        device: &str,
    ) -> Result<(UdParam, Membership)> {
        let group = SocketAddr::V4(self.cfg.group);
        let qpn = qp.num();
        if !self.cfg.send_only {
            id.join_multicast(group, device)?;
            return Ok((self.joined(events, device, qpn)?, Membership::Full));
        }
        let refused = match id
            .join_multicast_send_only(group, device)
            .and_then(|()| self.joined(events, device, qpn))
        {
            Ok(ud) => return Ok((ud, Membership::SendOnly)),
            Err(e @ Error::Timeout { .. }) => return Err(e),
            Err(e) => e,
        };
        // A refused join may still be on the id's list: leave it before
        // joining the same group again.
        id.leave_multicast(group);
        id.join_multicast(group, device)?;
        let ud = self.joined(events, device, qpn)?;
        match qp.detach_mcast(lib.verbs, &ud.ah_attr.grh.dgid, ud.ah_attr.dlid) {
            Ok(()) => {
                log::info!(
                    "{}: {refused}; joined {} in full and detached QP {qpn:#x} from it",
                    self.channel,
                    self.cfg.group
                );
                Ok((ud, Membership::Detached))
            }
            Err(e) => {
                log::warn!(
                    "{}: {refused}; joined {} in full, and ibv_detach_mcast: {}: QP {qpn:#x} \
                     receives its own datagrams to the group",
                    self.channel,
                    self.cfg.group,
                    errors::describe_errno(e)
                );
                Ok((ud, Membership::Full))
            }
        }
    }

    /// Waits for the answer to a join: the group's address handle
    /// attributes, QPN and qkey.
    fn joined(&self, events: &EventChannel, device: &str, qpn: u32) -> Result<UdParam> {
        let group = self.cfg.group;
        let ud = loop {
            match events.next_until(self.deadline)? {
                Some(ev) if ev.kind == RDMA_CM_EVENT_MULTICAST_JOIN => match ev.ud {
                    Some(ud) => break ud,
                    None => continue,
                },
                Some(ev) if ev.kind == RDMA_CM_EVENT_ADDR_RESOLVED => continue,
                Some(ev) => {
                    return Err(errors::other(
                        format!("rdma_join_multicast {group}"),
                        device,
                        Some(qpn),
                        format!("rdma_cm {} (status {})", ev.name(), ev.status),
                    ))
                }
                None => return Err(self.timeout("joining the multicast group")),
            }
        };
        if ud.qp_num != MULTICAST_QPN {
            log::warn!(
                "{}: the join gave remote QPN {:#x}, not the multicast QPN",
                self.channel,
                ud.qp_num
            );
        }
        Ok(ud)
    }

    /// The GID this link sends from (its peers' name for it) and the GRH
    /// layout its receives carry.
    pub(super) fn local_gid(
        &self,
        lib: &Lib,
        id: &CmId,
        port: u8,
        sgid_index: u8,
    ) -> (GrhKind, [u8; 16]) {
        // SAFETY: the id's context is live while the id is.
        let entry =
            unsafe { device::query_gid_entry(lib.verbs, id.context(), port, sgid_index.into()) };
        match entry {
            Ok(e) => {
                // SAFETY: every bit pattern of the GID union is a valid
                // byte array.
                let raw = unsafe { e.gid.raw };
                let v4 = std::net::Ipv6Addr::from(raw).to_ipv4_mapped().is_some();
                let kind = if e.gid_type == IBV_GID_TYPE_ROCE_V2 && v4 {
                    GrhKind::Ipv4
                } else {
                    GrhKind::Ipv6
                };
                (kind, raw)
            }
            Err(e) => {
                // Older libibverbs: no GID types. An IPv4 interface means
                // RoCE v2 over IPv4 in practice.
                log::debug!(
                    "{}: ibv_query_gid_ex: {}",
                    self.channel,
                    errors::describe_errno(e)
                );
                let interface = self.cfg.interface;
                let kind = if interface.is_some() {
                    GrhKind::Ipv4
                } else {
                    GrhKind::Ipv6
                };
                let raw = interface.map_or([0u8; 16], |ip| ip.to_ipv6_mapped().octets());
                (kind, raw)
            }
        }
    }
}
