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
    // Inlined into the arbiter's delivery loop: a call per message cost
    // about 15 instructions.
    #[inline(always)]
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
    let s: UdpSocket = s.into();
    if enable_kernel_timestamps(&s) == KernelStamps::None {
        log::info!("line {line}: no kernel receive timestamps (SO_TIMESTAMPING and SO_TIMESTAMPNS refused): arrival is stamped by the relay");
    }
    Ok(s)
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
                enable_kernel_timestamps(&sock);
                Some((sock, SocketAddr::V4(server)))
            }
            None => None,
        };
        Ok(LiveSockets { a, b, rerequest })
    }
}

/// `SO_TIMESTAMPING` and its control message type, as asm-generic
/// numbers them (x86, arm, riscv; 64-bit `time_t`): libc exports them for
/// Android only.
const SO_TIMESTAMPING: libc::c_int = 37;
const SCM_TIMESTAMPING: libc::c_int = SO_TIMESTAMPING;

/// Which kernel receive timestamp a socket was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelStamps {
    /// `SO_TIMESTAMPING` with `SOF_TIMESTAMPING_RX_SOFTWARE`: the
    /// software receive stamp (`CLOCK_REALTIME`) in `SCM_TIMESTAMPING`.
    Timestamping,
    /// `SO_TIMESTAMPNS` (older kernels, or where the first is refused):
    /// the same stamp in `SCM_TIMESTAMPNS`.
    TimestampNs,
    /// Neither: the relay stamps arrival itself.
    None,
}

/// Turns on kernel receive timestamps for `sock`: `SO_TIMESTAMPING`
/// (software receive stamp), else `SO_TIMESTAMPNS`; both stamp the
/// datagram in `CLOCK_REALTIME` where the kernel first sees it.
///
/// NIC hardware stamps (`SOF_TIMESTAMPING_RX_HARDWARE`) are not asked
/// for: they come in the NIC clock's own time scale (TAI under ptp4l, or
/// free-running), not `CLOCK_REALTIME`, so they cannot be subtracted from
/// the relay's clock without a per-device offset, and they need the
/// device's stamping switched on (`SIOCSHWTSTAMP`, privileged).
pub fn enable_kernel_timestamps(sock: &UdpSocket) -> KernelStamps {
    let flags =
        (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
    if set_int_option(sock, SO_TIMESTAMPING, flags) {
        KernelStamps::Timestamping
    } else if set_int_option(sock, libc::SO_TIMESTAMPNS, 1) {
        KernelStamps::TimestampNs
    } else {
        KernelStamps::None
    }
}

/// `setsockopt(SOL_SOCKET, option, value)`; whether the kernel took it.
fn set_int_option(sock: &UdpSocket, option: libc::c_int, value: libc::c_int) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor and a c_int option of its size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Control bytes per datagram: room for one `SCM_TIMESTAMPING` (three
/// timespecs) with its header and spare, in u64 words so the buffer is
/// aligned.
const CONTROL_WORDS: usize = 12;

/// Datagrams read with one `recvmmsg`, each with the kernel's arrival
/// time when the socket has kernel timestamps
/// ([`enable_kernel_timestamps`]). Every buffer is allocated
/// once; the message headers point into them.
pub struct RecvBatch {
    buffers: Vec<Box<[u8]>>,
    iovecs: Vec<libc::iovec>,
    control: Vec<[u64; CONTROL_WORDS]>,
    headers: Vec<libc::mmsghdr>,
    /// Datagrams the last `recv` filled.
    filled: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slots", &self.buffers.len())
            .field("filled", &self.filled)
            .finish()
    }
}

/// What one datagram of a batch holds.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// Its bytes (a datagram longer than the buffer is cut and flagged).
    pub data: &'a [u8],
    /// The kernel's arrival time (`CLOCK_REALTIME` ns), if it gave one.
    pub kernel_ns: Option<u64>,
    /// The datagram was longer than the buffer.
    pub truncated: bool,
}

impl RecvBatch {
    /// Room for `slots` datagrams of up to `max` bytes each.
    pub fn new(slots: usize, max: usize) -> RecvBatch {
        let mut buffers: Vec<Box<[u8]>> = (0..slots).map(|_| vec![0u8; max].into()).collect();
        let iovecs: Vec<libc::iovec> = buffers
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let control = vec![[0u64; CONTROL_WORDS]; slots];
        // SAFETY: mmsghdr is plain data; all-zero is a valid value, filled
        // in before each call.
        let headers = (0..slots).map(|_| unsafe { std::mem::zeroed() }).collect();
        let mut batch = RecvBatch {
            buffers,
            iovecs,
            control,
            headers,
            filled: 0,
        };
        batch.point_headers();
        batch
    }

    /// Points every header at its buffer and control block. The vectors
    /// are never resized, so the pointers stay valid while `self` lives.
    fn point_headers(&mut self) {
        for (i, h) in self.headers.iter_mut().enumerate() {
            h.msg_hdr.msg_name = std::ptr::null_mut();
            h.msg_hdr.msg_namelen = 0;
            h.msg_hdr.msg_iov = &mut self.iovecs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.control[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_hdr.msg_controllen = CONTROL_WORDS * 8;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
    }

    /// Reads what `sock` (non-blocking) has, up to the batch's size, in
    /// one system call. Returns how many datagrams arrived (0: none).
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        self.filled = 0;
        for h in &mut self.headers {
            // The kernel shortens these to what it wrote.
            h.msg_hdr.msg_controllen = CONTROL_WORDS * 8;
            h.msg_hdr.msg_flags = 0;
        }
        // SAFETY: the headers point at live buffers of the lengths they
        // state (`point_headers`); the socket is valid.
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.headers.as_mut_ptr(),
                self.headers.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(e),
            };
        }
        self.filled = n as usize;
        Ok(self.filled)
    }

    /// Datagram `i` of the last `recv` (`i` below what it returned).
    pub fn get(&self, i: usize) -> Option<Received<'_>> {
        if i >= self.filled {
            return None;
        }
        let h = &self.headers[i];
        let len = (h.msg_len as usize).min(self.buffers[i].len());
        Some(Received {
            data: &self.buffers[i][..len],
            kernel_ns: kernel_timestamp(&h.msg_hdr),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        })
    }
}

/// The kernel's receive stamp of a received message, in ns since the
/// epoch: the software stamp of `SCM_TIMESTAMPING` (its first timespec)
/// or `SCM_TIMESTAMPNS`. `None` if neither is there, or the stamp is zero
/// (no software stamp taken) or out of range.
fn kernel_timestamp(m: &libc::msghdr) -> Option<u64> {
    // SAFETY: `m` is a header the kernel filled: its control pointer and
    // (shortened) length describe our control block, and CMSG_FIRSTHDR /
    // CMSG_NXTHDR stay inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            let h = &*c;
            let stamped = h.cmsg_level == libc::SOL_SOCKET
                && (h.cmsg_type == SCM_TIMESTAMPING || h.cmsg_type == libc::SCM_TIMESTAMPNS);
            // Both carry the software stamp as their first timespec; the
            // kernel's length says it is all there (a truncated control
            // block is not read past).
            let whole = h.cmsg_len as usize
                >= libc::CMSG_LEN(std::mem::size_of::<libc::timespec>() as u32) as usize;
            if stamped && whole {
                let mut ts: libc::timespec = std::mem::zeroed();
                std::ptr::copy_nonoverlapping(
                    libc::CMSG_DATA(c),
                    &mut ts as *mut libc::timespec as *mut u8,
                    std::mem::size_of::<libc::timespec>(),
                );
                return timespec_ns(&ts);
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    None
}

/// A kernel timespec in ns since the epoch (`None`: zero, negative or
/// beyond u64).
fn timespec_ns(ts: &libc::timespec) -> Option<u64> {
    let ns = u64::try_from(ts.tv_sec)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(
            u64::try_from(ts.tv_nsec)
                .ok()
                .filter(|&n| n < 1_000_000_000)?,
        )?;
    (ns > 0).then_some(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends probes from `tx` to `rx` until one arrives with a kernel
    /// stamp. The kernel switches receive stamping on lazily (a deferred
    /// work item) when the first socket of the host asks for it, so the
    /// first datagrams after enabling may arrive unstamped; the relay
    /// stamps those itself. Fails after 10 s.
    fn until_stamped(rx: &UdpSocket, tx: &UdpSocket) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut batch = RecvBatch::new(1, 64);
        loop {
            tx.send_to(b"probe", rx.local_addr().unwrap()).unwrap();
            // Loopback delivery is synchronous: the probe is queued.
            assert_eq!(batch.recv(rx).unwrap(), 1);
            if batch.get(0).unwrap().kernel_ns.is_some() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the kernel never stamped a datagram"
            );
            std::thread::yield_now();
        }
    }

    /// Whether a kernel stamp `ts` is `CLOCK_REALTIME` between two reads of
    /// it: within a second, since the kernel's clock and the vDSO's can
    /// differ by microseconds in a VM (a monotonic clock or garbage would
    /// be off by years).
    fn near(before: u64, ts: u64, after: u64) -> bool {
        (before - 1_000_000_000..=after + 1_000_000_000).contains(&ts)
    }

    #[test]
    fn a_batch_reads_every_queued_datagram_with_its_kernel_arrival_time() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        assert_eq!(enable_kernel_timestamps(&rx), KernelStamps::Timestamping);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        until_stamped(&rx, &tx);
        let before = mdbus::clock::now_ns();
        for i in 0..5u8 {
            tx.send_to(&[i; 3][..=i as usize % 3], rx.local_addr().unwrap())
                .unwrap();
        }
        let mut batch = RecvBatch::new(4, 2048);
        // Loopback delivery is synchronous: all five are queued.
        assert_eq!(batch.recv(&rx).unwrap(), 4, "one call fills the batch");
        let after = mdbus::clock::now_ns();
        let mut last = 0;
        for i in 0..4 {
            let d = batch.get(i).unwrap();
            assert_eq!(d.data, &[i as u8; 3][..=i % 3]);
            assert!(!d.truncated);
            let ts = d.kernel_ns.expect("a kernel timestamp");
            assert!(near(before, ts, after) && ts >= last, "{ts}");
            last = ts;
        }
        assert!(batch.get(4).is_none());
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        assert_eq!(batch.get(0).unwrap().data, &[4u8; 2][..]);
        assert_eq!(batch.recv(&rx).unwrap(), 0, "nothing left: 0, not an error");
    }

    #[test]
    fn a_datagram_longer_than_its_buffer_is_flagged() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(&[7u8; 100], rx.local_addr().unwrap()).unwrap();
        let mut batch = RecvBatch::new(2, 64);
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        let d = batch.get(0).unwrap();
        assert!(d.truncated);
        assert_eq!(d.data.len(), 64);
        assert_eq!(d.kernel_ns, None, "no timestamps asked for");
    }

    /// A message header whose control block holds one control message
    /// of `cmsg_type` carrying `stamps`, its length cut to `cut` bytes of
    /// payload if given.
    fn header_with(
        control: &mut [u64; CONTROL_WORDS],
        cmsg_type: libc::c_int,
        stamps: &[libc::timespec],
        cut: Option<usize>,
    ) -> libc::msghdr {
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        let payload = std::mem::size_of_val(stamps);
        // SAFETY: the control block has room for one header and three
        // timespecs (CONTROL_WORDS), checked by the assertion.
        unsafe {
            let space = libc::CMSG_SPACE(payload as u32) as usize;
            assert!(space <= CONTROL_WORDS * 8);
            m.msg_controllen = space;
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = cmsg_type;
            (*c).cmsg_len = libc::CMSG_LEN(cut.unwrap_or(payload) as u32) as usize;
            std::ptr::copy_nonoverlapping(
                stamps.as_ptr() as *const u8,
                libc::CMSG_DATA(c),
                payload,
            );
        }
        m
    }

    fn ts(sec: i64, nsec: i64) -> libc::timespec {
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        }
    }

    #[test]
    fn the_arrival_time_is_the_software_stamp_of_the_control_message() {
        let mut control = [0u64; CONTROL_WORDS];
        // SCM_TIMESTAMPING: software stamp first, the hardware ones after
        // (not used: another clock).
        let m = header_with(
            &mut control,
            SCM_TIMESTAMPING,
            &[ts(1_700_000_000, 123), ts(0, 0), ts(5, 6)],
            None,
        );
        assert_eq!(kernel_timestamp(&m), Some(1_700_000_000_000_000_123));
        let m = header_with(&mut control, libc::SCM_TIMESTAMPNS, &[ts(42, 7)], None);
        assert_eq!(kernel_timestamp(&m), Some(42_000_000_007));
        // No software stamp (only a hardware one): none, the relay stamps.
        let m = header_with(
            &mut control,
            SCM_TIMESTAMPING,
            &[ts(0, 0), ts(0, 0), ts(5, 6)],
            None,
        );
        assert_eq!(kernel_timestamp(&m), None);
        // A control message cut short is not read past its length.
        let m = header_with(&mut control, SCM_TIMESTAMPING, &[ts(9, 9); 3], Some(8));
        assert_eq!(kernel_timestamp(&m), None);
        // Another control message, or an impossible timespec: none.
        let m = header_with(&mut control, libc::SCM_RIGHTS, &[ts(9, 9)], None);
        assert_eq!(kernel_timestamp(&m), None);
        let m = header_with(&mut control, libc::SCM_TIMESTAMPNS, &[ts(-1, 0)], None);
        assert_eq!(kernel_timestamp(&m), None);
        let m = header_with(
            &mut control,
            libc::SCM_TIMESTAMPNS,
            &[ts(1, 1_000_000_000)],
            None,
        );
        assert_eq!(kernel_timestamp(&m), None);
    }

    #[test]
    fn a_socket_with_only_so_timestampns_is_stamped_by_the_kernel_too() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        assert!(set_int_option(&rx, libc::SO_TIMESTAMPNS, 1));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        until_stamped(&rx, &tx);
        let before = mdbus::clock::now_ns();
        tx.send_to(b"abc", rx.local_addr().unwrap()).unwrap();
        let after = mdbus::clock::now_ns();
        let mut batch = RecvBatch::new(2, 64);
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        let ts = batch.get(0).unwrap().kernel_ns.expect("a kernel timestamp");
        assert!(near(before, ts, after), "{before} {ts} {after}");
    }
}
