//! rdma_cm: an event channel per handle and its connection-manager ids.
//!
//! The channel's descriptor is non-blocking: set-up waits for an event
//! with `poll(2)` and a deadline, and the data path checks for a
//! disconnect with a non-blocking read when it is idle. Every event is
//! copied out and acknowledged at once, so an id can always be destroyed
//! (`rdma_destroy_id` waits for its events to be acknowledged).

use std::ffi::c_void;
use std::net::{IpAddr, SocketAddr};
use std::ptr::NonNull;
use std::time::Instant;

use verbs_sys::{
    ibv_ah_attr, ibv_context, rdma_cm_event, rdma_cm_event_type, rdma_cm_id,
    rdma_cm_join_mc_attr_ex, rdma_conn_param, rdma_event_channel, rdma_port_space, sockaddr,
    sockaddr_in, sockaddr_in6, Rdmacm, Verbs, RDMA_CM_JOIN_MC_ATTR_ADDRESS,
    RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
};

use super::errors;
use crate::error::Result;

/// An IPv4 or IPv6 socket address in the C layout rdma_cm takes.
#[derive(Clone, Copy)]
pub(crate) enum SockAddr {
    V4(sockaddr_in),
    V6(sockaddr_in6),
}

impl SockAddr {
    pub(crate) fn new(addr: SocketAddr) -> SockAddr {
        match addr {
            SocketAddr::V4(a) => SockAddr::V4(sockaddr_in {
                sin_family: libc::AF_INET as _,
                sin_port: a.port().to_be(),
                sin_addr: verbs_sys::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                ..Default::default()
            }),
            SocketAddr::V6(a) => {
                let mut s = sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as _,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_scope_id: a.scope_id(),
                    ..Default::default()
                };
                // The address is 16 bytes in network order whatever the
                // union's field names are.
                // SAFETY: in6_addr is 16 bytes; the source is 16 bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        a.ip().octets().as_ptr(),
                        std::ptr::addr_of_mut!(s.sin6_addr).cast::<u8>(),
                        16,
                    )
                };
                SockAddr::V6(s)
            }
        }
    }

    /// A pointer for rdma_cm, valid while `self` is.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut sockaddr {
        match self {
            SockAddr::V4(s) => (s as *mut sockaddr_in).cast(),
            SockAddr::V6(s) => (s as *mut sockaddr_in6).cast(),
        }
    }
}

/// The parts of a UD event (multicast join) the link needs.
#[derive(Clone, Copy)]
pub(crate) struct UdParam {
    /// Address handle attributes for the group.
    pub(crate) ah_attr: ibv_ah_attr,
    /// Remote queue pair number (0xFFFFFF for multicast).
    pub(crate) qp_num: u32,
    /// Queue key.
    pub(crate) qkey: u32,
}

/// An event, copied out of librdmacm and already acknowledged.
pub(crate) struct CmEvent {
    /// `RDMA_CM_EVENT_*`.
    pub(crate) kind: rdma_cm_event_type,
    /// The event's status (an errno or a CM reject reason).
    pub(crate) status: i32,
    /// The id the event is for (for a connect request: the new id, which
    /// the receiver must adopt or destroy).
    pub(crate) id: *mut rdma_cm_id,
    /// Up to 64 bytes of private data.
    private: [u8; 64],
    private_len: usize,
    /// For UD ids: the join's address handle, QP number and qkey.
    pub(crate) ud: Option<UdParam>,
}

impl CmEvent {
    /// The event's name ("ESTABLISHED").
    pub(crate) fn name(&self) -> String {
        errors::cm_event_name(self.kind)
    }

    /// The private data that came with a connect request or reply.
    pub(crate) fn private_data(&self) -> &[u8] {
        &self.private[..self.private_len]
    }
}

/// An rdma_cm event channel; destroyed on drop, after every id on it.
pub(crate) struct EventChannel {
    cm: &'static Rdmacm,
    raw: NonNull<rdma_event_channel>,
}

impl EventChannel {
    /// Creates a channel with a non-blocking descriptor.
    pub(crate) fn new(cm: &'static Rdmacm) -> Result<EventChannel> {
        // SAFETY: no arguments; the result is checked and destroyed in Drop.
        let raw = unsafe { (cm.rdma_create_event_channel)() };
        let raw =
            NonNull::new(raw).ok_or_else(|| errors::last("rdma_create_event_channel", "", None))?;
        let ch = EventChannel { cm, raw };
        let fd = ch.fd();
        // SAFETY: `fd` is the channel's open descriptor.
        let rc = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
        };
        if rc != 0 {
            return Err(errors::last(
                "fcntl O_NONBLOCK on the rdma_cm channel",
                "",
                None,
            ));
        }
        Ok(ch)
    }

    pub(crate) fn as_raw(&self) -> *mut rdma_event_channel {
        self.raw.as_ptr()
    }

    fn fd(&self) -> i32 {
        // SAFETY: the channel is live.
        unsafe { (*self.raw.as_ptr()).fd }
    }

    /// The next event if one is waiting; never blocks.
    pub(crate) fn try_next(&self) -> Result<Option<CmEvent>> {
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live; `ev` is a valid out-pointer.
        let rc = unsafe { (self.cm.rdma_get_cm_event)(self.raw.as_ptr(), &mut ev) };
        if rc != 0 {
            let e = errors::errno();
            if e == libc::EAGAIN || e == libc::EWOULDBLOCK || e == libc::EINTR {
                return Ok(None);
            }
            return Err(errors::os("rdma_get_cm_event", "", None, e));
        }
        // SAFETY: a successful call hands out a live event until it is
        // acknowledged below; only plain fields are read.
        let out = unsafe {
            let e = &*ev;
            let mut out = CmEvent {
                kind: e.event,
                status: e.status,
                id: e.id,
                private: [0; 64],
                private_len: 0,
                ud: None,
            };
            let ud_id = !e.id.is_null() && (*e.id).ps == verbs_sys::RDMA_PS_UDP;
            if ud_id {
                let ud = e.param.ud;
                out.ud = Some(UdParam {
                    ah_attr: ud.ah_attr,
                    qp_num: ud.qp_num,
                    qkey: ud.qkey,
                });
            } else {
                let conn = e.param.conn;
                if !conn.private_data.is_null() {
                    let n = usize::from(conn.private_data_len).min(64);
                    std::ptr::copy_nonoverlapping(
                        conn.private_data.cast::<u8>(),
                        out.private.as_mut_ptr(),
                        n,
                    );
                    out.private_len = n;
                }
            }
            out
        };
        // SAFETY: acknowledged once, after the copy; nothing points into it.
        unsafe { (self.cm.rdma_ack_cm_event)(ev) };
        Ok(Some(out))
    }

    /// The next event, waiting until `deadline`; `None` when it passes.
    pub(crate) fn next_until(&self, deadline: Instant) -> Result<Option<CmEvent>> {
        loop {
            if let Some(ev) = self.try_next()? {
                return Ok(Some(ev));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 && errors::errno() != libc::EINTR {
                return Err(errors::last("poll on the rdma_cm channel", "", None));
            }
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel, destroyed once, after
        // every id on it (owner's field order).
        unsafe { (self.cm.rdma_destroy_event_channel)(self.raw.as_ptr()) };
    }
}

/// An rdma_cm id; destroyed on drop (after its queue pair).
pub(crate) struct CmId {
    cm: &'static Rdmacm,
    raw: NonNull<rdma_cm_id>,
}

impl CmId {
    /// Creates an id on `channel` in port space `ps` (`RDMA_PS_TCP` for
    /// RC, `RDMA_PS_UDP` for UD).
    ///
    /// # Safety
    /// `channel` must outlive the id.
    pub(crate) unsafe fn new(
        cm: &'static Rdmacm,
        channel: &EventChannel,
        ps: rdma_port_space,
    ) -> Result<CmId> {
        let mut id: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live (and outlives the id: caller); `id` is
        // a valid out-pointer.
        let rc =
            unsafe { (cm.rdma_create_id)(channel.as_raw(), &mut id, std::ptr::null_mut(), ps) };
        if rc != 0 {
            return Err(errors::ret("rdma_create_id", "", None, rc));
        }
        Ok(CmId {
            cm,
            raw: NonNull::new(id).expect("rdma_create_id succeeded"),
        })
    }

    /// Takes ownership of the id a connect request created.
    ///
    /// # Safety
    /// `raw` must be such an id, owned by nobody else, and its channel must
    /// outlive it.
    pub(crate) unsafe fn adopt(cm: &'static Rdmacm, raw: *mut rdma_cm_id) -> Option<CmId> {
        NonNull::new(raw).map(|raw| CmId { cm, raw })
    }

    pub(crate) fn as_raw(&self) -> *mut rdma_cm_id {
        self.raw.as_ptr()
    }

    /// Moves the id's future events to `channel` (rdma_migrate_id), so a
    /// connection accepted on a shared listener reports to its own session.
    ///
    /// # Safety
    /// `channel` must outlive the id, and every event of the id delivered
    /// so far must have been acknowledged (rdma_cm waits for that).
    pub(crate) unsafe fn migrate(&self, channel: &EventChannel) -> Result<()> {
        // SAFETY: both are live; the caller's contract covers the rest.
        let rc = unsafe { (self.cm.rdma_migrate_id)(self.raw.as_ptr(), channel.as_raw()) };
        if rc != 0 {
            return Err(errors::ret("rdma_migrate_id", "", None, rc));
        }
        Ok(())
    }

    /// The device context the id is bound to (null before address
    /// resolution or binding to a device address). rdma_cm keeps it open
    /// while the id exists.
    pub(crate) fn context(&self) -> *mut ibv_context {
        // SAFETY: the id is live.
        unsafe { (*self.raw.as_ptr()).verbs }
    }

    /// Port number on the device.
    pub(crate) fn port(&self) -> u8 {
        // SAFETY: the id is live.
        unsafe { (*self.raw.as_ptr()).port_num }
    }

    /// The bound device's name, empty before binding.
    pub(crate) fn device_name(&self, verbs: &Verbs) -> String {
        let ctx = self.context();
        if ctx.is_null() {
            return String::new();
        }
        // SAFETY: a bound id's context is live while the id is; its device
        // pointer is the device it was opened from.
        unsafe { super::device::device_name(verbs, (*ctx).device) }
    }

    pub(crate) fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut sa = SockAddr::new(addr);
        // SAFETY: the id is live; the address outlives the call.
        let rc = unsafe { (self.cm.rdma_bind_addr)(self.raw.as_ptr(), sa.as_mut_ptr()) };
        if rc != 0 {
            return Err(errors::ret(format!("rdma_bind_addr {addr}"), "", None, rc));
        }
        Ok(())
    }

    pub(crate) fn listen(&self, addr: SocketAddr) -> Result<()> {
        // SAFETY: the id is live and bound.
        let rc = unsafe { (self.cm.rdma_listen)(self.raw.as_ptr(), 1) };
        if rc != 0 {
            return Err(errors::ret(format!("rdma_listen on {addr}"), "", None, rc));
        }
        Ok(())
    }

    /// Starts address resolution (`ADDR_RESOLVED` follows).
    pub(crate) fn resolve_addr(&self, src: Option<IpAddr>, dst: SocketAddr, ms: i32) -> Result<()> {
        let mut d = SockAddr::new(dst);
        let mut s = src.map(|ip| SockAddr::new(SocketAddr::new(ip, 0)));
        let sp = s.as_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
        // SAFETY: the id is live; both addresses outlive the call.
        let rc = unsafe { (self.cm.rdma_resolve_addr)(self.raw.as_ptr(), sp, d.as_mut_ptr(), ms) };
        if rc != 0 {
            return Err(errors::ret(
                format!("rdma_resolve_addr {dst}"),
                "",
                None,
                rc,
            ));
        }
        Ok(())
    }

    /// Starts route resolution (`ROUTE_RESOLVED` follows).
    pub(crate) fn resolve_route(&self, ms: i32, device: &str) -> Result<()> {
        // SAFETY: the id is live and its address resolved.
        let rc = unsafe { (self.cm.rdma_resolve_route)(self.raw.as_ptr(), ms) };
        if rc != 0 {
            return Err(errors::ret("rdma_resolve_route", device, None, rc));
        }
        Ok(())
    }

    /// Sends a connect request with `private` data.
    pub(crate) fn connect(&self, param: ConnParam<'_>, device: &str, qp: u32) -> Result<()> {
        let mut p = param.raw();
        // SAFETY: the id is live with a QP; `p` and the private data it
        // points to outlive the call (librdmacm copies them).
        let rc = unsafe { (self.cm.rdma_connect)(self.raw.as_ptr(), &mut p) };
        if rc != 0 {
            return Err(errors::ret("rdma_connect", device, Some(qp), rc));
        }
        Ok(())
    }

    /// Accepts a connect request with `private` data.
    pub(crate) fn accept(&self, param: ConnParam<'_>, device: &str, qp: u32) -> Result<()> {
        let mut p = param.raw();
        // SAFETY: as in `connect`.
        let rc = unsafe { (self.cm.rdma_accept)(self.raw.as_ptr(), &mut p) };
        if rc != 0 {
            return Err(errors::ret("rdma_accept", device, Some(qp), rc));
        }
        Ok(())
    }

    /// Refuses a connect request.
    pub(crate) fn reject(&self) {
        // SAFETY: the id is live; no private data.
        unsafe { (self.cm.rdma_reject)(self.raw.as_ptr(), std::ptr::null(), 0) };
    }

    /// Starts an orderly disconnect (the peer gets `DISCONNECTED`). Moves
    /// the queue pair to the error state: outstanding work is flushed.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the id is live.
        unsafe { (self.cm.rdma_disconnect)(self.raw.as_ptr()) };
    }

    /// Joins multicast group `group` (`MULTICAST_JOIN` follows); librdmacm
    /// attaches the id's QP to the group when the join completes.
    pub(crate) fn join_multicast(&self, group: SocketAddr, device: &str) -> Result<()> {
        let mut g = SockAddr::new(group);
        // SAFETY: the id is live with a UD QP; the address outlives the call.
        let rc = unsafe {
            (self.cm.rdma_join_multicast)(self.raw.as_ptr(), g.as_mut_ptr(), std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(errors::ret(
                format!("rdma_join_multicast {group}"),
                device,
                None,
                rc,
            ));
        }
        Ok(())
    }

    /// Joins multicast group `group` as a send-only full member
    /// (`MULTICAST_JOIN` follows with the group's address handle and
    /// qkey): librdmacm does not attach the id's QP, so nothing sent to
    /// the group is delivered to it. ENOSYS when librdmacm has no
    /// `rdma_join_multicast_ex`; kernels and devices that cannot join
    /// send-only refuse here or with a `MULTICAST_ERROR` event.
    pub(crate) fn join_multicast_send_only(&self, group: SocketAddr, device: &str) -> Result<()> {
        let op = || format!("rdma_join_multicast_ex {group} (send-only)");
        let Some(join) = self.cm.rdma_join_multicast_ex else {
            return Err(errors::os(op(), device, None, libc::ENOSYS));
        };
        let mut g = SockAddr::new(group);
        let mut attr = rdma_cm_join_mc_attr_ex {
            comp_mask: RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
            join_flags: RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
            addr: g.as_mut_ptr(),
        };
        // SAFETY: the id is live with a UD QP; the attributes and the
        // address they point to outlive the call (librdmacm copies both).
        let rc = unsafe { join(self.raw.as_ptr(), &mut attr, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(errors::ret(op(), device, None, rc));
        }
        Ok(())
    }

    /// Leaves a joined group.
    pub(crate) fn leave_multicast(&self, group: SocketAddr) {
        let mut g = SockAddr::new(group);
        // SAFETY: the id is live; the address outlives the call.
        unsafe { (self.cm.rdma_leave_multicast)(self.raw.as_ptr(), g.as_mut_ptr()) };
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_id (or adopted from a connect
        // request), destroyed once, after its QP (owner's field order);
        // every event for it was acknowledged when read.
        unsafe { (self.cm.rdma_destroy_id)(self.raw.as_ptr()) };
    }
}

/// What a connect or accept offers the peer.
#[derive(Clone, Copy)]
pub(crate) struct ConnParam<'a> {
    /// Bytes handed to the peer with the request or reply.
    pub(crate) private: &'a [u8],
    /// Transport retries before a send fails (0..=7).
    pub(crate) retry_count: u8,
    /// Receiver-not-ready retries before a send fails (0..=7; 7 = forever).
    pub(crate) rnr_retry_count: u8,
}

impl ConnParam<'_> {
    fn raw(&self) -> rdma_conn_param {
        rdma_conn_param {
            private_data: self.private.as_ptr().cast::<c_void>(),
            private_data_len: self.private.len().min(255) as u8,
            // One-sided writes only (credits, close): no RDMA reads or
            // atomics, so no responder resources.
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 0,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            ..Default::default()
        }
    }
}
