//! MoldUDP64 pass-through: the arbitrated, gap-filled feed re-packed into
//! MoldUDP64 packets on a multicast group of its own, for consumers that
//! already speak it. Upstream session names and sequence numbers are kept;
//! a packet closes when it is full, at the end of each inbound datagram,
//! and before a jump in sequence (an unrecoverable gap, which a MoldUDP64
//! consumer sees as a gap it cannot fill from us).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

use mdbus_feed::moldudp64::{self, Session, BLOCK_PREFIX_LEN, HEADER_LEN};
use socket2::{Domain, Protocol, Socket, Type};

use super::config::PassthroughConfig;
use super::RelayError;

/// The pass-through sender. Its buffer is allocated once.
#[derive(Debug)]
pub struct Passthrough {
    socket: UdpSocket,
    dest: SocketAddr,
    buf: Box<[u8]>,
    max: usize,
    len: usize,
    count: u16,
    session: Session,
    first: u64,
    next: u64,
    heartbeat_ns: u64,
    last_send_ns: u64,
    /// Packets sent.
    pub packets: u64,
    /// Sends that failed.
    pub errors: u64,
}

impl Passthrough {
    /// Opens the sending socket for `cfg` (enabled and validated).
    pub fn open(cfg: &PassthroughConfig) -> Result<Passthrough, RelayError> {
        let group: SocketAddrV4 = cfg.group.parse().map_err(|_| RelayError::Setup {
            what: format!("passthrough group `{}`", cfg.group),
            reason: "not an IPv4 group and port".into(),
        })?;
        let interface: Ipv4Addr = if cfg.interface.is_empty() {
            Ipv4Addr::UNSPECIFIED
        } else {
            cfg.interface.parse().map_err(|_| RelayError::Setup {
                what: format!("passthrough interface `{}`", cfg.interface),
                reason: "not an IPv4 address".into(),
            })?
        };
        let sock = |op: &str, e: std::io::Error| RelayError::Socket {
            what: format!("pass-through to {group} via {interface}: {op}"),
            source: e,
        };
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| sock("socket", e))?;
        s.bind(&SocketAddrV4::new(interface, 0).into())
            .map_err(|e| sock("bind (is the interface address local?)", e))?;
        if !interface.is_unspecified() {
            s.set_multicast_if_v4(&interface)
                .map_err(|e| sock("IP_MULTICAST_IF", e))?;
        }
        s.set_multicast_ttl_v4(cfg.ttl)
            .map_err(|e| sock("IP_MULTICAST_TTL", e))?;
        s.set_multicast_loop_v4(cfg.loopback)
            .map_err(|e| sock("IP_MULTICAST_LOOP", e))?;
        s.set_nonblocking(true)
            .map_err(|e| sock("non-blocking", e))?;
        Ok(Passthrough {
            socket: s.into(),
            dest: group.into(),
            buf: vec![0u8; cfg.max_packet].into_boxed_slice(),
            max: cfg.max_packet,
            len: HEADER_LEN,
            count: 0,
            session: Session::BLANK,
            first: 0,
            next: 0,
            heartbeat_ns: cfg.heartbeat_interval.as_nanos() as u64,
            last_send_ns: 0,
            packets: 0,
            errors: 0,
        })
    }

    /// Adds one message of `session` at `sequence`.
    #[inline]
    pub fn push(&mut self, session: Session, sequence: u64, data: &[u8]) {
        if self.count > 0
            && (session != self.session
                || sequence != self.next
                || self.len + BLOCK_PREFIX_LEN + data.len() > self.max
                || self.count == moldudp64::MAX_MESSAGES_PER_PACKET)
        {
            self.flush();
        }
        if self.count == 0 {
            self.session = session;
            self.first = sequence;
            self.len = HEADER_LEN;
        }
        let Ok(n) = u16::try_from(data.len()) else {
            return;
        };
        if self.len + BLOCK_PREFIX_LEN + data.len() > self.max {
            return;
        }
        self.buf[self.len..self.len + 2].copy_from_slice(&n.to_be_bytes());
        self.buf[self.len + 2..self.len + 2 + data.len()].copy_from_slice(data);
        self.len += BLOCK_PREFIX_LEN + data.len();
        self.count += 1;
        self.next = sequence + 1;
    }

    /// Sends the packet being built, if any.
    #[inline]
    pub fn flush(&mut self) {
        if self.count == 0 {
            return;
        }
        self.buf[..10].copy_from_slice(self.session.as_bytes());
        self.buf[10..18].copy_from_slice(&self.first.to_be_bytes());
        self.buf[18..20].copy_from_slice(&self.count.to_be_bytes());
        let len = self.len;
        self.send_buf(len);
        self.count = 0;
        self.len = HEADER_LEN;
    }

    fn send_buf(&mut self, len: usize) {
        match self.socket.send_to(&self.buf[..len], self.dest) {
            Ok(_) => self.packets += 1,
            Err(_) => self.errors += 1,
        }
    }

    fn send_header(&mut self, header: [u8; HEADER_LEN], now_ns: u64) {
        self.buf[..HEADER_LEN].copy_from_slice(&header);
        self.send_buf(HEADER_LEN);
        self.last_send_ns = now_ns;
    }

    /// Marks a send at `now_ns` (monotonic), for the heartbeat timer.
    pub fn sent_at(&mut self, now_ns: u64) {
        self.last_send_ns = now_ns;
    }

    /// Sends a heartbeat when nothing was sent for the heartbeat interval
    /// (once a session is known).
    pub fn idle(&mut self, now_ns: u64) {
        if self.next > 0 && now_ns.saturating_sub(self.last_send_ns) >= self.heartbeat_ns {
            self.flush();
            let hb = moldudp64::heartbeat(self.session, self.next);
            self.send_header(hb, now_ns);
        }
    }

    /// Passes on the end of the session.
    pub fn end_of_session(&mut self, now_ns: u64) {
        self.flush();
        if self.next > 0 {
            let p = moldudp64::end_of_session(self.session, self.next);
            self.send_header(p, now_ns);
        }
    }
}
