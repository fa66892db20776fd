//! Connection management: listening and accepting, connecting with
//! retries while the acceptor is not there yet, and the rdma_cm events in
//! between.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use verbs_sys::{
    RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_ESTABLISHED,
    RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_PS_TCP,
};

use super::super::cm::{CmEvent, CmId, ConnParam, EventChannel};
use super::super::{errors, lib, Lib, VerbsWork};
use super::hello::{name_hash, Hello};
use super::setup::Parts;
use super::{RcSession, FIRST_STEP, RETRY_COUNT, RETRY_PAUSE, RNR_RETRY};
use crate::config::{SessionConfig, SessionMode, VerbsConfig};
use crate::error::{Error, Result};

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

/// The remote address of an id (connected, or of a connect request).
pub(super) fn peer_addr(id: &CmId) -> Option<SocketAddr> {
    // SAFETY: the id is live; the address lies inside it.
    let sa = unsafe { verbs_sys::rdma_get_peer_addr(id.as_raw()) };
    // SAFETY: rdma_cm fills the peer address as a sockaddr_in or _in6
    // according to its family.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*sa.cast::<verbs_sys::sockaddr_in>();
                let ip = std::net::Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::from((ip, u16::from_be(s.sin_port))))
            }
            libc::AF_INET6 => {
                let s = &*sa.cast::<verbs_sys::sockaddr_in6>();
                let raw: [u8; 16] = std::ptr::addr_of!(s.sin6_addr).cast::<[u8; 16]>().read();
                Some(SocketAddr::from((
                    std::net::Ipv6Addr::from(raw),
                    u16::from_be(s.sin6_port),
                )))
            }
            _ => None,
        }
    }
}

/// The remote address of an id, for messages.
pub(super) fn peer_of(id: &CmId) -> String {
    match peer_addr(id) {
        Some(a) => a.to_string(),
        None => "(unknown address)".into(),
    }
}

/// Whether `verbs.allow_peers` admits `peer` (empty: everyone). IPv4 and
/// its IPv4-mapped GID are the same peer.
pub(super) fn allowed(allow: &[String], peer: Option<SocketAddr>) -> bool {
    if allow.is_empty() {
        return true;
    }
    let Some(peer) = peer else {
        return false;
    };
    let ip = peer.ip().to_canonical();
    allow
        .iter()
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .any(|a| a.to_canonical() == ip)
}

/// Refuses connect request `id` (rdma_reject) and destroys it (drop).
pub(super) fn refuse(id: CmId, channel: &str, why: &str, rejected: &mut u64) {
    id.reject();
    *rejected += 1;
    log::warn!(
        "{channel}: refused a connection request from {}: {why} ({} refused so far)",
        peer_of(&id),
        rejected
    );
}

/// Takes the id of connect request `ev` when the peer is allowed, with
/// the hello it sent (or why it is not one); `None` for another event or
/// a refused peer. The caller must keep the event's channel longer than
/// the id.
pub(super) fn screen_request(
    lib: Lib,
    ev: &CmEvent,
    vcfg: &VerbsConfig,
    channel: &str,
    rejected: &mut u64,
) -> Option<(CmId, std::result::Result<Hello, String>)> {
    if ev.kind != RDMA_CM_EVENT_CONNECT_REQUEST {
        log::debug!("{channel}: rdma_cm {} while listening", ev.name());
        return None;
    }
    // SAFETY: a connect request's id is new and ours to own; its channel
    // outlives it (caller).
    let id = unsafe { CmId::adopt(lib.cm, ev.id) }?;
    if !allowed(&vcfg.allow_peers, peer_addr(&id)) {
        refuse(id, channel, "not in verbs.allow_peers", rejected);
        return None;
    }
    Some((id, Hello::decode(ev.private_data())))
}

/// `Ok` when an accepted connection's next event `ev` is ESTABLISHED;
/// otherwise the set-up failure, or `timeout()` when none came.
pub(super) fn established_or(
    ev: Option<CmEvent>,
    channel: &str,
    peer: &str,
    timeout: impl FnOnce() -> Error,
) -> Result<()> {
    match ev {
        Some(ev) if ev.kind == RDMA_CM_EVENT_ESTABLISHED => Ok(()),
        Some(ev) => Err(Error::PeerLost {
            channel: channel.into(),
            peer: peer.into(),
            reason: format!(
                "the connection failed during set-up: rdma_cm {}",
                describe_event(&ev)
            ),
        }),
        None => Err(timeout()),
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

/// Why a peer in another session mode is refused.
pub(super) fn mode_mismatch(peer: SessionMode, ours: SessionMode) -> String {
    format!(
        "it runs the session in mode `{}`, this end in mode `{}` (sessions.NAME.mode must match)",
        peer.as_str(),
        ours.as_str()
    )
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

/// The connect parameters of both ends: our hello, full transport
/// retries, and no RNR retries (credits make an RNR a bug).
pub(super) fn conn_param(hello: &[u8]) -> ConnParam<'_> {
    ConnParam {
        private: hello,
        retry_count: RETRY_COUNT,
        rnr_retry_count: RNR_RETRY,
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
        if cfg.receive == crate::config::ReceiveMode::Shared {
            let addr = session_addr(&format!("session `{name}`"), cfg, name)?;
            return Self::accept_shared(name, cfg, vcfg, addr);
        }
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
        let mut rejected = 0u64;
        let (id, peer) = loop {
            let Some(ev) = events.next_until(deadline)? else {
                return Err(timeout());
            };
            // The session keeps `events` longer than the id.
            let Some((id, hello)) = screen_request(lib, &ev, vcfg, &channel, &mut rejected) else {
                continue;
            };
            match hello {
                Ok(h) if h.name_hash == name_hash(name) && h.mode == cfg.mode => break (id, h),
                Ok(h) if h.name_hash == name_hash(name) => refuse(
                    id,
                    &channel,
                    &mode_mismatch(h.mode, cfg.mode),
                    &mut rejected,
                ),
                Ok(_) => refuse(id, &channel, "it asked for another session", &mut rejected),
                Err(why) => refuse(id, &channel, &why, &mut rejected),
            }
        };
        let parts = Parts::build(lib, &id, cfg, vcfg, name)?;
        let hello = parts.hello(name).encode();
        let param = conn_param(&hello);
        id.accept(param, &parts.device, parts.qp.num())?;
        let peer_addr = peer_of(&id);
        // Other requests arriving meanwhile are refused and destroyed, not
        // left pending.
        let established = loop {
            let Some(ev) = events.next_until(deadline)? else {
                break None;
            };
            if ev.id == id.as_raw() {
                break Some(ev);
            }
            if ev.kind == RDMA_CM_EVENT_CONNECT_REQUEST {
                // SAFETY: as above.
                if let Some(extra) = unsafe { CmId::adopt(lib.cm, ev.id) } {
                    refuse(
                        extra,
                        &channel,
                        "the session already has its peer",
                        &mut rejected,
                    );
                }
            }
        };
        established_or(established, &channel, &peer_addr, timeout)?;
        drop(listener);
        Ok(RcSession::new(
            channel, parts, id, events, peer, peer_addr, cfg, vcfg, rejected,
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
        // Work posted by attempts that failed, counted in the session's.
        let mut spent = VerbsWork::default();
        loop {
            let step_floor = first.then(|| Instant::now() + FIRST_STEP);
            first = false;
            match Self::attempt(
                lib, &events, addr, deadline, step_floor, cfg, vcfg, name, &channel, &mut spent,
            ) {
                Ok((parts, id, peer)) => {
                    let peer_addr = addr.to_string();
                    let mut s =
                        RcSession::new(channel, parts, id, events, peer, peer_addr, cfg, vcfg, 0);
                    s.extra_posted = s.extra_posted.plus(spent);
                    return Ok(s);
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
        spent: &mut VerbsWork,
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
        match Self::handshake(
            &parts,
            &id,
            events,
            addr,
            step_deadline(),
            name,
            channel,
            cfg,
        ) {
            Ok(peer) => Ok((parts, id, peer)),
            Err(e) => {
                // The receive ring this attempt posted is work done too.
                *spent = spent.plus(parts.qp.posted());
                Err(e)
            }
        }
    }

    /// Sends the connect request of `parts` on `id` and waits for the
    /// acceptor's answer: its hello.
    #[allow(clippy::too_many_arguments)]
    fn handshake(
        parts: &Parts,
        id: &CmId,
        events: &EventChannel,
        addr: SocketAddr,
        d: Instant,
        name: &str,
        channel: &str,
        cfg: &SessionConfig,
    ) -> std::result::Result<Hello, Attempt> {
        let hello = parts.hello(name).encode();
        let param = conn_param(&hello);
        id.connect(param, &parts.device, parts.qp.num())?;
        match wait_event(events, id, d)? {
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
                if peer.mode != cfg.mode {
                    return Err(Attempt::Fatal(Error::Protocol {
                        channel: channel.into(),
                        peer: addr.to_string(),
                        reason: mode_mismatch(peer.mode, cfg.mode),
                    }));
                }
                Ok(peer)
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
}
