//! The live input: lines A and B joined on UDP multicast, the re-request
//! server over unicast UDP, and the glue between the arbiter and the
//! pipeline.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

use mdbus_feed::arbiter::{ArbiterConfig, ArbiterSink, Line};
use mdbus_feed::moldudp64::{Request, Session};
use socket2::{Domain, Protocol, Socket, Type};

use super::config::{InputConfig, LiveAddresses};
use super::pipeline::Pipeline;
use super::RelayError;

/// The arbiter configuration of `[input]`.
pub fn arbiter_config(input: &InputConfig, session: Option<Session>) -> ArbiterConfig {
    let a = &input.arbiter;
    ArbiterConfig {
        expected_session: session,
        start_sequence: (input.start_sequence > 0).then_some(input.start_sequence),
        reorder_bytes: a.reorder_bytes,
        max_reorder_packets: a.max_reorder_packets,
        request_timeout_ns: a.request_timeout.as_nanos() as u64,
        max_retries: a.max_retries,
        max_request_messages: a.max_request_messages.min(u16::MAX - 1),
        requests_per_second: a.requests_per_second,
        gap_wait_ns: a.gap_wait.as_nanos() as u64,
        max_jump: a.max_jump,
        confirm_packets: a.confirm_packets,
        confirm_quiet_ns: u64::try_from(a.confirm_quiet.as_nanos()).unwrap_or(u64::MAX),
    }
}

/// The arbiter's sink: messages to the pipeline, requests to the
/// re-request server.
pub struct Sink<'a> {
    /// Where messages go.
    pub pipeline: &'a mut Pipeline,
    /// The socket requests leave from and answers arrive on, and the
    /// server's address.
    pub rerequest: Option<(&'a UdpSocket, SocketAddr)>,
    /// Requests that could not be sent.
    pub request_errors: &'a mut u64,
    /// Set when the end of the session was reached.
    pub ended: &'a mut bool,
}

impl ArbiterSink for Sink<'_> {
    #[inline]
    fn message(&mut self, sequence: u64, _line: Line, data: &[u8]) {
        self.pipeline.message(sequence, data);
    }

    fn request(&mut self, request: &Request) {
        if let Some((sock, to)) = self.rerequest {
            if sock.send_to(&request.encode(), to).is_err() {
                *self.request_errors += 1;
            }
        }
    }

    fn unrecoverable(&mut self, first: u64, count: u64) {
        // The arbiter guarantees `first + count` does not overflow; saturate
        // anyway rather than trust it on this path.
        // Logged later, off this path (`Pipeline::log_source_gaps`): no
        // allocation here, and no line per range under heavy loss.
        let end = first.saturating_add(count);
        self.pipeline.source_gap(first, end);
    }

    fn session_changed(&mut self, old: Session, new: Session) {
        log::warn!(
            "session changed from {} to {}: following the new one",
            old.as_str().unwrap_or("?"),
            new.as_str().unwrap_or("?")
        );
        self.pipeline.new_session(new);
    }

    fn end_of_session(&mut self) {
        *self.ended = true;
        self.pipeline.end_of_session(mdbus::clock::monotonic_ns());
    }
}

/// The session named by a datagram's first ten bytes, if it has them.
pub fn session_of(datagram: &[u8]) -> Option<Session> {
    let head: [u8; 10] = datagram.get(..10)?.try_into().ok()?;
    Some(mdbus_feed::alpha::Alpha(head))
}

/// The live input's sockets.
#[derive(Debug)]
pub struct LiveSockets {
    /// Line A, joined.
    pub a: UdpSocket,
    /// Line B, joined, if configured.
    pub b: Option<UdpSocket>,
    /// The unicast socket requests leave from, and the server's address.
    pub rerequest: Option<(UdpSocket, SocketAddr)>,
}

fn join(
    line: &str,
    group: SocketAddrV4,
    interface: Ipv4Addr,
    recv_buffer: usize,
) -> Result<UdpSocket, RelayError> {
    let err = |op: &str, e: io::Error| {
        let hint = match e.raw_os_error() {
            Some(libc::EADDRNOTAVAIL) | Some(libc::ENODEV) => {
                format!(" (is {interface} an address of an interface of this host that is up?)")
            }
            Some(libc::EADDRINUSE) => {
                " (another process holds the port without SO_REUSEADDR)".into()
            }
            _ => String::new(),
        };
        RelayError::Join {
            line: line.into(),
            group,
            interface,
            reason: format!("{op}: {e}{hint}"),
        }
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| err("socket", e))?;
    s.set_reuse_address(true)
        .map_err(|e| err("SO_REUSEADDR", e))?;
    // Bound to the group (not the wildcard): only this group's datagrams
    // arrive, even when another group shares the port.
    s.bind(&SocketAddrV4::new(*group.ip(), group.port()).into())
        .map_err(|e| err("bind", e))?;
    s.join_multicast_v4(group.ip(), &interface)
        .map_err(|e| err("IP_ADD_MEMBERSHIP", e))?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    if let Err(e) = s.set_recv_buffer_size(recv_buffer) {
        log::warn!("line {line}: SO_RCVBUF {recv_buffer}: {e}");
    }
    s.set_nonblocking(true)
        .map_err(|e| err("non-blocking", e))?;
    Ok(s.into())
}

impl LiveSockets {
    /// Joins the lines and opens the re-request socket.
    pub fn open(addrs: &LiveAddresses, recv_buffer: usize) -> Result<LiveSockets, RelayError> {
        let a = join("A", addrs.line_a, addrs.interface_a, recv_buffer)?;
        let b = match addrs.line_b {
            Some(g) => Some(join("B", g, addrs.interface_b, recv_buffer)?),
            None => None,
        };
        let rerequest = match addrs.rerequest {
            Some(server) => {
                let local = SocketAddrV4::new(addrs.interface_a, 0);
                let sock = UdpSocket::bind(local).map_err(|e| RelayError::Socket {
                    what: format!("re-request socket on {local}: bind"),
                    source: e,
                })?;
                sock.set_nonblocking(true).map_err(|e| RelayError::Socket {
                    what: "re-request socket: non-blocking".into(),
                    source: e,
                })?;
                Some((sock, SocketAddr::V4(server)))
            }
            None => None,
        };
        Ok(LiveSockets { a, b, rerequest })
    }
}
