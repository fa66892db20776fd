//! One UDP multicast line, for streams between hosts without RDMA.
//!
//! A line has up to two sockets: a unicast socket bound to the line's
//! interface, which sends to the group and exchanges retransmit requests
//! and replies with single peers, and, for subscribers, a socket bound to
//! the group's address and port and joined to it. Both are non-blocking and
//! polled with `recvmmsg`, so one system call returns a batch of datagrams
//! into buffers allocated once; a socket the last read left empty is read
//! with `recvfrom`, one datagram, which costs less while datagrams come one
//! at a time. Datagrams to the group are queued in a preallocated batch and
//! leave with one `sendmmsg` when the batch is full or the stream flushes
//! (a lone datagram with `sendto`); a stream's new messages are queued as
//! their datagram header and a pointer into the publisher's retained
//! window, where they already lie as they go on the wire, so they are not
//! copied into a batch (a lone one is copied behind its header).

use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::StreamConfig;
use crate::error::{Error, Result};
use crate::transport::datagram::DatagramLink;

/// Where one line sends and listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineAddr {
    /// The group and port.
    pub group: SocketAddrV4,
    /// The local interface address; unspecified lets the system choose.
    pub interface: Ipv4Addr,
    /// Multicast hops.
    pub ttl: u32,
    /// Deliver to subscribers on this host too.
    pub loopback: bool,
    /// The publisher's unicast address: where a publisher binds its
    /// sending socket, and the only source a subscriber accepts. `None`:
    /// an ephemeral port, and subscribers bind to the first source seen.
    pub source: Option<SocketAddrV4>,
    /// Receive buffer asked for each socket (`SO_RCVBUF`), in bytes.
    pub recv_buffer: usize,
}

/// The lines (A, and B when configured) of stream `name`, for a publisher
/// or a subscriber.
pub fn lines(name: &str, cfg: &StreamConfig, publisher: bool) -> Result<Vec<UdpLink>> {
    let channel = format!("stream `{name}`");
    if cfg.group.is_empty() {
        return Err(Error::Missing {
            channel,
            key: format!("streams.{name}.group"),
            transport: "udp",
        });
    }
    let mut out = Vec::with_capacity(2);
    for (group, interface, source, source_key) in [
        (&cfg.group, &cfg.interface, &cfg.source, "source"),
        (&cfg.group_b, &cfg.interface_b, &cfg.source_b, "source_b"),
    ] {
        if group.is_empty() {
            continue;
        }
        // Both were checked when the configuration was loaded.
        let line = LineAddr {
            group: group.parse().map_err(|_| Error::Missing {
                channel: channel.clone(),
                key: format!("streams.{name}.group"),
                transport: "udp",
            })?,
            interface: if interface.is_empty() {
                Ipv4Addr::UNSPECIFIED
            } else {
                interface.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
            },
            ttl: cfg.ttl,
            loopback: cfg.loopback,
            recv_buffer: cfg.recv_buffer,
            source: if source.is_empty() {
                None
            } else {
                Some(source.parse().map_err(|_| Error::Missing {
                    channel: channel.clone(),
                    key: format!("streams.{name}.{source_key}"),
                    transport: "udp",
                })?)
            },
        };
        out.push(if publisher {
            UdpLink::publisher(&channel, &line, cfg.max_datagram)?
        } else {
            UdpLink::subscriber(&channel, &line, cfg.max_datagram)?
        });
    }
    Ok(out)
}

/// Datagrams one `recvmmsg` call can return.
const BATCH: usize = 32;
/// Largest UDP payload accepted into a receive buffer.
const RX_SLOT: usize = 65_536;
/// A subscriber reads its unicast (retransmit reply) socket once in this
/// many polls.
const UNI_EVERY: u32 = 16;

/// Preallocated `recvmmsg` state for one socket.
struct RxBatch {
    bufs: Box<[u8]>,
    iov: Box<[libc::iovec]>,
    names: Box<[libc::sockaddr_in]>,
    hdrs: Box<[libc::mmsghdr]>,
    /// Headers the last call filled: only these have their name length
    /// changed by the kernel and need it reset.
    filled: usize,
    /// The last call left the socket empty (it returned fewer datagrams
    /// than it asked for): the next reads one datagram with `recvfrom`.
    drained: bool,
}

impl RxBatch {
    fn new(slot: usize) -> RxBatch {
        let mut b = RxBatch {
            bufs: vec![0u8; slot * BATCH].into_boxed_slice(),
            // SAFETY: iovec, sockaddr_in and mmsghdr are plain C structs for
            // which all-zero is a valid value.
            iov: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            names: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            filled: 0,
            drained: true,
        };
        for i in 0..BATCH {
            b.hdrs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            b.iov[i].iov_base = b.bufs[i * slot..].as_mut_ptr().cast();
            b.iov[i].iov_len = slot;
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iov[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
            b.hdrs[i].msg_hdr.msg_name = (&mut b.names[i] as *mut libc::sockaddr_in).cast();
        }
        b
    }

    /// Receives up to `max` datagrams without blocking; returns how many.
    ///
    /// After a read that left the socket empty it reads one datagram with
    /// `recvfrom`, and a batch with `recvmmsg` only after a read that found
    /// one: a busy-polled socket that is mostly empty, or that a datagram at
    /// a time trickles into, is read at the cost of a raw socket's `recv`
    /// plus the source address. A `recvmmsg` that returns one datagram
    /// costs markedly more (docs/PERFORMANCE.md): the kernel copies in the
    /// message header and iovec, then tries a second datagram and finds
    /// none. A burst is still read in batches from its second datagram on.
    fn recv(&mut self, fd: libc::c_int, max: usize) -> std::io::Result<usize> {
        let n = max.min(BATCH);
        if n == 0 {
            return Ok(0);
        }
        // A busy poll's empty reads leave every header as it was: reset
        // only what the last read that returned datagrams changed, not the
        // whole batch on every poll.
        for h in &mut self.hdrs[..std::mem::take(&mut self.filled)] {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_len = 0;
        }
        if self.drained || n == 1 {
            let slot = self.iov[0].iov_len;
            let got = crate::sys::net::recv_one(fd, &mut self.bufs[..slot], &mut self.names[0])?;
            self.drained = got.is_none();
            return Ok(match got {
                Some(len) => {
                    // Where `datagram` reads the length.
                    self.hdrs[0].msg_len = len as libc::c_uint;
                    self.filled = 1;
                    1
                }
                None => 0,
            });
        }
        // SAFETY: `hdrs[..n]` point at buffers, iovecs and names owned by
        // `self`, which outlive the call.
        let got = unsafe { crate::sys::net::recv_batch(fd, &mut self.hdrs[..n]) }?;
        self.filled = got;
        self.drained = got < n;
        Ok(got)
    }

    fn datagram(&self, i: usize, slot: usize) -> (SocketAddrV4, &[u8]) {
        let n = &self.names[i];
        let peer = SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(n.sin_addr.s_addr)),
            u16::from_be(n.sin_port),
        );
        let len = (self.hdrs[i].msg_len as usize).min(slot);
        (peer, &self.bufs[i * slot..i * slot + len])
    }
}

/// Preallocated `sendmmsg` state: datagrams to the group queued until the
/// batch is full or the stream flushes. Each datagram has two iovecs: its
/// slot (a whole datagram copied there, or only the head of one), and, for a
/// datagram sent in two pieces, the caller's bytes that follow the head,
/// which the caller keeps unchanged until the batch is sent.
struct TxBatch {
    bufs: Box<[u8]>,
    slot: usize,
    /// Two per datagram: `iov[2 * i]` is slot `i`, `iov[2 * i + 1]` the
    /// caller's bytes when there are any.
    iov: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    /// Boxed so the headers' pointer to it stays valid when the batch moves.
    group: Box<libc::sockaddr_in>,
    queued: usize,
}

impl TxBatch {
    fn new(slot: usize, group: SocketAddrV4) -> TxBatch {
        let mut b = TxBatch {
            bufs: vec![0u8; slot * BATCH].into_boxed_slice(),
            slot,
            // SAFETY: iovec, mmsghdr and sockaddr_in are plain C structs for
            // which all-zero is a valid value.
            iov: (0..2 * BATCH).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            hdrs: (0..BATCH).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            group: Box::new(unsafe { zeroed() }),
            queued: 0,
        };
        b.group.sin_family = libc::AF_INET as libc::sa_family_t;
        b.group.sin_port = group.port().to_be();
        b.group.sin_addr.s_addr = u32::from(*group.ip()).to_be();
        for i in 0..BATCH {
            b.iov[2 * i].iov_base = b.bufs[i * slot..].as_mut_ptr().cast();
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iov[2 * i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
            b.hdrs[i].msg_hdr.msg_name = (&mut *b.group as *mut libc::sockaddr_in).cast();
            b.hdrs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        b
    }

    /// Copies `bytes` (at most a slot) into the next slot; true when the
    /// batch is now full.
    #[inline]
    fn push(&mut self, bytes: &[u8]) -> bool {
        let i = self.queued;
        self.bufs[i * self.slot..i * self.slot + bytes.len()].copy_from_slice(bytes);
        self.iov[2 * i].iov_len = bytes.len();
        self.hdrs[i].msg_hdr.msg_iovlen = 1;
        self.queued += 1;
        self.queued == BATCH
    }

    /// Queues `head` (copied into the next slot; at most a slot) followed
    /// by `body`, which is sent from where it lies; true when the batch is
    /// now full.
    ///
    /// # Safety
    ///
    /// `body` stays valid and unchanged until the next [`send`](Self::send)
    /// returns or the batch is dropped.
    #[inline]
    unsafe fn push_parts(&mut self, head: &[u8], body: &[u8]) -> bool {
        let i = self.queued;
        self.bufs[i * self.slot..i * self.slot + head.len()].copy_from_slice(head);
        self.iov[2 * i].iov_len = head.len();
        // The kernel only reads through it (sendmmsg).
        self.iov[2 * i + 1].iov_base = body.as_ptr().cast_mut().cast();
        self.iov[2 * i + 1].iov_len = body.len();
        self.hdrs[i].msg_hdr.msg_iovlen = 2;
        self.queued += 1;
        self.queued == BATCH
    }

    /// Sends what is queued without blocking. Returns how many datagrams the
    /// kernel would not take now (full socket buffer), which are dropped.
    fn send(&mut self, fd: libc::c_int) -> std::io::Result<usize> {
        if self.queued == 1 {
            return self.send_one(fd);
        }
        let mut sent = 0;
        let mut dropped = 0;
        while sent < self.queued {
            // SAFETY: `hdrs[sent..queued]` point at buffers, iovecs and the
            // group address owned by `self`, which outlive the call, and at
            // the bytes `push_parts` was given, which its callers keep valid
            // until this returns; MSG_DONTWAIT makes it non-blocking.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.hdrs[sent..].as_mut_ptr(),
                    (self.queued - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::Interrupted => continue,
                    std::io::ErrorKind::WouldBlock => {}
                    _ if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                    _ => {
                        self.queued = 0;
                        return Err(e);
                    }
                }
                dropped = self.queued - sent;
                break;
            }
            sent += r as usize;
        }
        self.queued = 0;
        Ok(dropped)
    }

    /// Sends the one queued datagram with `sendto`, its second piece (if
    /// any) copied behind the head in its slot first: a stream that
    /// flushes every message (autoflush) sends this way. Copying at most a
    /// datagram costs less than what `sendmmsg` adds for one datagram in
    /// two pieces (the kernel copies in the message header and the iovec
    /// array; docs/PERFORMANCE.md).
    fn send_one(&mut self, fd: libc::c_int) -> std::io::Result<usize> {
        self.queued = 0;
        let head = self.iov[0].iov_len;
        let mut len = head;
        if self.hdrs[0].msg_hdr.msg_iovlen == 2 {
            let body = self.iov[1];
            // SAFETY: `push_parts`' callers keep the body valid and
            // unchanged until this returns; it is not in `bufs` (the
            // caller's bytes); it fits behind the head in the slot
            // (`send_group_retained` sends larger datagrams on their own).
            let body =
                unsafe { std::slice::from_raw_parts(body.iov_base as *const u8, body.iov_len) };
            self.bufs[head..head + body.len()].copy_from_slice(body);
            len += body.len();
        }
        loop {
            // SAFETY: slot 0 holds `len` bytes; the group address is owned
            // by `self`; MSG_DONTWAIT makes it non-blocking.
            let r = unsafe {
                libc::sendto(
                    fd,
                    self.bufs.as_ptr().cast(),
                    len,
                    libc::MSG_DONTWAIT,
                    (&*self.group as *const libc::sockaddr_in).cast(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if r >= 0 {
                return Ok(0);
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return Ok(1),
                _ if e.raw_os_error() == Some(libc::ENOBUFS) => return Ok(1),
                _ => return Err(e),
            }
        }
    }
}

/// Asks for a large receive buffer, so bursts survive a poller that was
/// descheduled for a moment: beyond `net.core.rmem_max` when the process may
/// (`SO_RCVBUFFORCE` needs CAP_NET_ADMIN), else as much as the limit allows.
/// The size is `streams.NAME.recv_buffer`.
fn raise_recv_buffer(channel: &str, s: &Socket, size: usize) {
    // The configuration caps it at 1 GiB.
    let bytes = size.min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: a valid socket, an int option value of the right size.
    let forced = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    } == 0;
    if !forced {
        if let Err(e) = s.set_recv_buffer_size(size) {
            log::warn!("{channel}: cannot raise the receive buffer: {e}");
        }
    }
}

/// One UDP multicast line.
pub struct UdpLink {
    channel: String,
    uni: Socket,
    group_rx: Option<Socket>,
    group: SockAddr,
    source: Option<SocketAddrV4>,
    max_datagram: usize,
    uni_rx: RxBatch,
    group_batch: Option<RxBatch>,
    tx: TxBatch,
    dropped: u64,
    polls: u32,
    /// The last read of the unicast socket returned datagrams: read it on
    /// every poll until it comes back empty.
    uni_busy: bool,
}

// SAFETY: the raw pointers inside the send and receive batches point into boxes the
// link owns and moves with it; the link is used by one thread at a time.
unsafe impl Send for UdpLink {}

impl std::fmt::Debug for UdpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpLink")
            .field("channel", &self.channel)
            .field("group", &self.group.as_socket())
            .finish()
    }
}

impl UdpLink {
    /// A publisher's line: sends to the group from the interface; receives
    /// retransmit requests on the same socket.
    pub fn publisher(channel: &str, line: &LineAddr, max_datagram: usize) -> Result<UdpLink> {
        Self::open(channel, line, max_datagram, false)
    }

    /// A subscriber's line: joins the group on the interface; sends
    /// retransmit requests from a unicast socket.
    pub fn subscriber(channel: &str, line: &LineAddr, max_datagram: usize) -> Result<UdpLink> {
        Self::open(channel, line, max_datagram, true)
    }

    fn open(channel: &str, line: &LineAddr, max_datagram: usize, join: bool) -> Result<UdpLink> {
        let what = |op: &'static str, target: String| move |e| Error::io(op, target, e);
        let uni = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(what("open a UDP socket for", channel.to_string()))?;
        // A publisher with a configured source sends from it, so that
        // subscribers can tell its datagrams from anyone else's.
        let local = match line.source {
            Some(a) if !join => a,
            _ => SocketAddrV4::new(line.interface, 0),
        };
        uni.bind(&local.into())
            .map_err(what("bind", format!("{channel} to {local}")))?;
        uni.set_multicast_if_v4(&line.interface).map_err(what(
            "set multicast interface",
            format!("{channel} to {}", line.interface),
        ))?;
        uni.set_multicast_ttl_v4(line.ttl)
            .map_err(what("set multicast ttl", channel.to_string()))?;
        uni.set_multicast_loop_v4(line.loopback)
            .map_err(what("set multicast loopback", channel.to_string()))?;
        uni.set_nonblocking(true)
            .map_err(what("configure", channel.to_string()))?;
        raise_recv_buffer(channel, &uni, line.recv_buffer);
        let group_rx = if join {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
                .map_err(what("open a UDP socket for", channel.to_string()))?;
            s.set_reuse_address(true)
                .map_err(what("configure", channel.to_string()))?;
            // Bound to the group's own address: this socket sees that
            // group's traffic only, whatever else the host has joined.
            s.bind(&line.group.into())
                .map_err(what("bind", format!("{channel} to {}", line.group)))?;
            s.join_multicast_v4(line.group.ip(), &line.interface)
                .map_err(what(
                    "join",
                    format!("{channel} group {} on {}", line.group.ip(), line.interface),
                ))?;
            s.set_multicast_all_v4(false)
                .map_err(what("configure", channel.to_string()))?;
            raise_recv_buffer(channel, &s, line.recv_buffer);
            s.set_nonblocking(true)
                .map_err(what("configure", channel.to_string()))?;
            Some(s)
        } else {
            None
        };
        Ok(UdpLink {
            channel: channel.into(),
            uni,
            group_batch: group_rx
                .as_ref()
                .map(|_| RxBatch::new(RX_SLOT.min(max_datagram.max(2048)))),
            group_rx,
            group: line.group.into(),
            source: if join { line.source } else { None },
            tx: TxBatch::new(max_datagram.clamp(1, RX_SLOT), line.group),
            max_datagram,
            uni_rx: RxBatch::new(RX_SLOT.min(max_datagram.max(2048))),
            dropped: 0,
            polls: 0,
            uni_busy: false,
        })
    }

    /// The unicast socket's local address (where replies come back to).
    pub fn local_addr(&self) -> Option<SocketAddrV4> {
        self.uni.local_addr().ok()?.as_socket_ipv4()
    }

    #[inline]
    fn send(&mut self, bytes: &[u8], to: &SockAddr) -> Result<()> {
        self.send_parts(bytes, &[], to)
    }

    /// Sends `head` followed by `body` as one datagram to `to`, now.
    fn send_parts(&mut self, head: &[u8], body: &[u8], to: &SockAddr) -> Result<()> {
        let sent = if body.is_empty() {
            self.uni.send_to(head, to)
        } else {
            let parts = [std::io::IoSlice::new(head), std::io::IoSlice::new(body)];
            self.uni.send_to_vectored(&parts, to)
        };
        match sent {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                self.dropped += 1;
                Ok(())
            }
            Err(e) => Err(Error::io(
                "send",
                format!("{} to {:?}", self.channel, to.as_socket()),
                e,
            )),
        }
    }
}

impl DatagramLink for UdpLink {
    type Peer = SocketAddrV4;

    /// The address and port as they are: distinct sources, distinct keys.
    fn source_key(peer: &SocketAddrV4) -> u64 {
        (u32::from(*peer.ip()) as u64) << 16 | peer.port() as u64
    }

    fn configured_source(&self) -> Option<SocketAddrV4> {
        self.source
    }

    fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    #[inline]
    fn send_group(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > self.tx.slot {
            // Larger than the link's datagrams: sent on its own, where the
            // kernel gives it a clear error.
            self.flush()?;
            let group = self.group.clone();
            return self.send(bytes, &group);
        }
        if self.tx.push(bytes) {
            self.flush()?;
        }
        Ok(())
    }

    const GATHERS: bool = true;

    #[inline]
    unsafe fn send_group_retained(&mut self, head: &[u8], body: &[u8]) -> Result<()> {
        if body.is_empty() {
            return self.send_group(head);
        }
        if head.len() > self.tx.slot || head.len() + body.len() > self.tx.slot {
            // Larger than the link's datagrams: sent on its own, where the
            // kernel gives it a clear error.
            self.flush()?;
            let group = self.group.clone();
            return self.send_parts(head, body, &group);
        }
        // SAFETY: the caller keeps `body` unchanged until the next flush,
        // which sends the batch (this trait method's contract).
        if unsafe { self.tx.push_parts(head, body) } {
            self.flush()?;
        }
        Ok(())
    }

    #[inline]
    fn flush(&mut self) -> Result<()> {
        if self.tx.queued == 0 {
            return Ok(());
        }
        match self.tx.send(self.uni.as_raw_fd()) {
            Ok(dropped) => {
                self.dropped += dropped as u64;
                Ok(())
            }
            Err(e) => Err(Error::io(
                "send",
                format!("{} to {:?}", self.channel, self.group.as_socket()),
                e,
            )),
        }
    }

    #[inline]
    fn send_to(&mut self, peer: SocketAddrV4, bytes: &[u8]) -> Result<()> {
        self.send(bytes, &peer.into())
    }

    #[inline]
    fn poll<F: FnMut(SocketAddrV4, &[u8])>(&mut self, max: usize, f: &mut F) -> Result<usize> {
        let mut total = 0;
        if let (Some(sock), Some(batch)) = (&self.group_rx, &mut self.group_batch) {
            let n = batch
                .recv(sock.as_raw_fd(), max)
                .map_err(|e| Error::io("receive", self.channel.clone(), e))?;
            let slot = batch.iov[0].iov_len;
            for i in 0..n {
                let (peer, bytes) = batch.datagram(i, slot);
                f(peer, bytes);
            }
            total += n;
        }
        // The unicast socket carries only retransmit replies to a
        // subscriber: read it every sixteenth poll, not on every one, so a
        // busy poll costs one system call (as a raw socket's does) and a
        // reply waits at most fifteen polls (microseconds, against a
        // retransmit timeout of milliseconds). While replies flow (the
        // last read returned some) and after a wake-up (`after_wake`) it
        // is read on every poll, so a recovery drains at full speed.
        self.polls = self.polls.wrapping_add(1);
        let skip_uni = self.group_rx.is_some() && !self.uni_busy && self.polls % UNI_EVERY != 0;
        if total < max && !skip_uni {
            let n = self
                .uni_rx
                .recv(self.uni.as_raw_fd(), max - total)
                .map_err(|e| Error::io("receive", self.channel.clone(), e))?;
            let slot = self.uni_rx.iov[0].iov_len;
            for i in 0..n {
                let (peer, bytes) = self.uni_rx.datagram(i, slot);
                f(peer, bytes);
            }
            self.uni_busy = n > 0;
            total += n;
        }
        Ok(total)
    }

    fn wait_fds(&self, out: &mut [std::os::fd::RawFd; 2]) -> usize {
        out[0] = self.uni.as_raw_fd();
        match &self.group_rx {
            Some(g) => {
                out[1] = g.as_raw_fd();
                2
            }
            None => 1,
        }
    }

    fn after_wake(&mut self) -> Result<()> {
        // What woke a sleeping subscriber may be on the unicast socket:
        // the next poll reads it.
        self.polls = UNI_EVERY - 1;
        Ok(())
    }

    fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line on group 239.255.42.`last` over the loopback, on a port of
    /// this process's own.
    fn loopback_line(last: u8) -> LineAddr {
        LineAddr {
            group: SocketAddrV4::new(
                Ipv4Addr::new(239, 255, 42, last),
                20_000 + (std::process::id() % 20_000) as u16,
            ),
            interface: Ipv4Addr::LOCALHOST,
            ttl: 0,
            loopback: true,
            source: None,
            recv_buffer: crate::config::DEFAULT_RECV_BUFFER,
        }
    }

    #[test]
    fn loopback_multicast_reaches_every_subscriber_and_replies_come_back() {
        let line = loopback_line(7);
        let mut p = UdpLink::publisher("stream `t`", &line, 1472).unwrap();
        let mut s1 = UdpLink::subscriber("stream `t`", &line, 1472).unwrap();
        let mut s2 = UdpLink::subscriber("stream `t`", &line, 1472).unwrap();
        for i in 0..10u8 {
            p.send_group(&[i; 100]).unwrap();
        }
        p.flush().unwrap();
        let mut from = None;
        for s in [&mut s1, &mut s2] {
            let mut got = vec![];
            // Loopback delivery is immediate but not synchronous: poll until
            // all ten are in (bounded).
            for _ in 0..1_000_000 {
                s.poll(64, &mut |peer, b: &[u8]| {
                    from = Some(peer);
                    got.push(b.to_vec())
                })
                .unwrap();
                if got.len() == 10 {
                    break;
                }
            }
            assert_eq!(got, (0..10u8).map(|i| vec![i; 100]).collect::<Vec<_>>());
        }
        // The source address of group datagrams is the publisher's unicast
        // socket: a request sent there reaches it.
        let publisher_addr = from.unwrap();
        assert_eq!(Some(publisher_addr), p.local_addr());
        s1.send_to(publisher_addr, b"request").unwrap();
        let mut got = vec![];
        for _ in 0..1_000_000 {
            p.poll(8, &mut |_, b: &[u8]| got.push(b.to_vec())).unwrap();
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got, vec![b"request".to_vec()]);
    }

    #[test]
    fn a_subscriber_takes_every_queued_reply_on_its_unicast_socket() {
        let line = loopback_line(9);
        let mut p = UdpLink::publisher("stream `r`", &line, 1472).unwrap();
        let mut s = UdpLink::subscriber("stream `r`", &line, 1472).unwrap();
        // Five reads' worth of replies: the socket is read once in
        // UNI_EVERY polls while quiet, then on every poll until drained.
        let to = s.local_addr().unwrap();
        for i in 0..40u32 {
            p.send_to(to, &i.to_be_bytes()).unwrap();
        }
        let mut got: Vec<u32> = vec![];
        for _ in 0..1_000_000 {
            s.poll(8, &mut |from, b: &[u8]| {
                assert_eq!(Some(from), p.local_addr());
                got.push(u32::from_be_bytes(b.try_into().unwrap()))
            })
            .unwrap();
            if got.len() == 40 {
                break;
            }
        }
        assert_eq!(got, (0..40).collect::<Vec<_>>());
        assert_eq!(p.dropped(), 0);
    }

    #[test]
    fn queued_datagrams_leave_in_order_when_the_batch_fills_or_flushes() {
        let line = loopback_line(8);
        let mut p = UdpLink::publisher("stream `b`", &line, 1472).unwrap();
        let mut s = UdpLink::subscriber("stream `b`", &line, 1472).unwrap();
        // One full batch leaves by itself; the rest waits for flush.
        let total = BATCH + 5;
        for i in 0..total {
            p.send_group(&(i as u32).to_be_bytes()).unwrap();
        }
        let mut got: Vec<u32> = vec![];
        let take = |s: &mut UdpLink, want: usize, got: &mut Vec<u32>| {
            for _ in 0..1_000_000 {
                s.poll(64, &mut |_, b: &[u8]| {
                    got.push(u32::from_be_bytes(b.try_into().unwrap()))
                })
                .unwrap();
                if got.len() >= want {
                    break;
                }
            }
        };
        take(&mut s, BATCH, &mut got);
        assert_eq!(got, (0..BATCH as u32).collect::<Vec<_>>());
        p.flush().unwrap();
        take(&mut s, total, &mut got);
        assert_eq!(got, (0..total as u32).collect::<Vec<_>>());
        assert_eq!(p.dropped(), 0);
    }

    #[test]
    fn single_flushed_datagrams_leave_whole_and_reads_after_an_empty_one_take_one() {
        let line = loopback_line(11);
        let mut p = UdpLink::publisher("stream `o`", &line, 1472).unwrap();
        let mut s = UdpLink::subscriber("stream `o`", &line, 1472).unwrap();
        // Flushed one at a time, as an autoflushing stream does: gathered
        // ones (their body copied behind the head) and copied ones, the
        // largest filling the datagram.
        let mut want = Vec::new();
        for i in 0..12u8 {
            let head = [0xb0 | i; 24];
            let body = vec![
                i;
                if i == 11 {
                    1472 - 24
                } else {
                    10 + 97 * i as usize
                }
            ];
            let whole = [&head[..], &body].concat();
            if i % 3 == 2 {
                p.send_group(&whole).unwrap();
            } else {
                // SAFETY: `body` outlives the flush below.
                unsafe { p.send_group_retained(&head, &body) }.unwrap();
            }
            p.flush().unwrap();
            want.push(whole);
        }
        // The socket was empty before: the first read that finds anything
        // takes one datagram, later ones batches; every datagram comes
        // whole, in order and from the publisher's address.
        let mut got: Vec<Vec<u8>> = vec![];
        let mut reads = vec![];
        for _ in 0..1_000_000 {
            let n = s
                .poll(64, &mut |from, b: &[u8]| {
                    assert_eq!(Some(from), p.local_addr());
                    got.push(b.to_vec())
                })
                .unwrap();
            if n > 0 {
                reads.push(n);
            }
            if got.len() >= want.len() {
                break;
            }
        }
        assert_eq!(reads[0], 1, "{reads:?}");
        assert_eq!(got, want);
        assert_eq!(p.dropped(), 0);
        // Once empty again, the next datagram is read alone too.
        p.send_group(b"again").unwrap();
        p.flush().unwrap();
        let mut last = vec![];
        for _ in 0..1_000_000 {
            let n = s
                .poll(64, &mut |_, b: &[u8]| last.push(b.to_vec()))
                .unwrap();
            if n > 0 {
                assert_eq!(n, 1);
                break;
            }
        }
        assert_eq!(last, vec![b"again".to_vec()]);
    }

    #[test]
    fn datagrams_in_two_pieces_leave_whole_and_in_order_with_copied_ones() {
        let line = loopback_line(10);
        let mut p = UdpLink::publisher("stream `g`", &line, 1472).unwrap();
        let mut s = UdpLink::subscriber("stream `g`", &line, 1472).unwrap();
        // The bodies stay put until the flush, as the contract asks.
        let bodies: Vec<Vec<u8>> = (0..BATCH as u8 + 3)
            .map(|i| vec![i; 50 + i as usize])
            .collect();
        let mut want = Vec::new();
        for (i, b) in bodies.iter().enumerate() {
            let head = [0xa0 | (i as u8 & 0xf); 24];
            if i % 5 == 4 {
                // A copied one, between the gathered ones.
                let whole = [&head[..], b].concat();
                p.send_group(&whole).unwrap();
                want.push(whole);
            } else {
                // SAFETY: `bodies` is neither changed nor dropped before
                // the flush below.
                unsafe { p.send_group_retained(&head, b) }.unwrap();
                want.push([&head[..], b].concat());
            }
        }
        p.flush().unwrap();
        // A body too large for the link's datagrams: sent alone, refused
        // by the kernel as too long, and reported.
        let big = vec![7u8; 70_000];
        // SAFETY: `big` outlives the call, which sends at once.
        let e = unsafe { p.send_group_retained(&[1; 24], &big) }.unwrap_err();
        assert!(e.to_string().contains("send"), "{e}");
        let mut got: Vec<Vec<u8>> = vec![];
        for _ in 0..1_000_000 {
            s.poll(64, &mut |_, b: &[u8]| got.push(b.to_vec())).unwrap();
            if got.len() >= want.len() {
                break;
            }
        }
        assert_eq!(got, want);
        assert_eq!(p.dropped(), 0);
    }
}
