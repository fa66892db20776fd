//! The IP transport against raw sockets, two processes on two cores, each
//! pair measured in one run over the loopback:
//!
//! - `udp` (round trip): `mdbus-udp`, two mdbus streams on UDP multicast
//!   (`ping` and `pong`, one each way, loss recovery on, publishers
//!   answering requests while they wait) against `raw-udp`, the same two
//!   multicast groups with plain sockets: `send_to` and a non-blocking
//!   `recv` busy-polled, same payload sizes. And `mdbus-udp-svc`: the same
//!   mdbus streams on buses with the service thread (`[service] thread =
//!   true`), whose publishers never call `service()`: what the service
//!   thread's hand-off costs on the publish path, against `mdbus-udp` in
//!   the same run.
//! - `tcp` (round trip): `mdbus-tcp`, an mdbus session on TCP, against
//!   `raw-tcp`, a TCP connection with `TCP_NODELAY`, `write` and a
//!   non-blocking `read` busy-polled, same payload sizes.
//! - `mcast` (one-way throughput): `mdbus-mcast`, an mdbus stream on UDP
//!   multicast with `autoflush = false`, flushed after every 32 datagrams'
//!   worth of 64-byte messages (16 per 1448-byte datagram; full datagrams
//!   queue in the link and leave with one `sendmmsg` per flush), against
//!   `raw-mcast`, datagrams of the same size carrying the same messages,
//!   sent with `sendmmsg` (32 datagrams per call) and received with
//!   `recvmmsg`, to one receiver process.
//!
//! ```text
//! cargo bench -p mdbus-benches --bench net
//! ```
//!
//! Environment: `MDBUS_BENCH_CASES` (subset of `udp,tcp,mcast`),
//! `MDBUS_BENCH_PEERS` (subset of `raw-udp,mdbus-udp,mdbus-udp-svc,raw-tcp,
//! mdbus-tcp,raw-mcast,mdbus-mcast`), `MDBUS_BENCH_SIZES` (round-trip payload sizes,
//! default `32,1024`), `MDBUS_BENCH_ITERS` (round trips per peer and size,
//! default 100 000), `MDBUS_BENCH_WARMUP` (default 5 000),
//! `MDBUS_BENCH_MESSAGES` (messages of the throughput case, default
//! 5 000 000), `MDBUS_BENCH_SERVICE_INTERVAL` (`mdbus-udp-svc`: time
//! between the service thread's rounds, default `1ms`),
//! `MDBUS_BENCH_HEARTBEAT_TIMEOUT` (the UDP subscribers' publisher
//! silence timeout, default the library's; raise it under valgrind), and `MDBUS_BENCH_CORES`, `MDBUS_BENCH_WAIT`,
//! `MDBUS_BENCH_STALL_SECS`, `MDBUS_BENCH_JSON` as for the other benches.
//!
//! The parent process is ping (round trips) or the receiver (throughput);
//! the child, this binary again started with `MDBUS_BENCH_ROLE`, is pong or
//! the sender. Round trips are timed with `Instant::now()` around the send
//! and the matching receive and recorded into an HdrHistogram.

use std::io::{ErrorKind, Read, Write};
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mdbus::config::{LateJoin, SessionConfig, StreamConfig};
use mdbus::{Event, TransportKind};
use mdbus_benches::{
    bench_err, child_init, clock_cost, emit_json, env_u64, free_port, latency_histogram, main_of,
    nanos, note_smoke, print_rtt_table, rtt_json, wait_for_go, watchdog, DoneSignal, Peer, PeerExt,
    Percentiles, Result, Settings,
};
use mdbus_tool_support::percentiles::Span;
use socket2::{Domain, Protocol, Socket, Type};

/// Group of every multicast case; the port is chosen per run.
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 79, 1);
/// Pong's first value: it is ready.
const READY: u64 = u64::MAX - 1;
/// Ping's last value: pong should exit.
const STOP: u64 = u64::MAX;
/// p50 ratio (mdbus / raw) the TCP round trips aim at.
const TARGET_P50: f64 = 1.2;
/// p50 ratio (mdbus / raw) the UDP round trips aim at (issue 16).
const TARGET_P50_UDP: f64 = 1.1;
/// Empty polls between two `service` calls of a waiting stream publisher.
const SERVICE_EVERY_IDLE: u32 = 64;

/// Child environment: payload size, port, message count.
const SIZE_ENV: &str = "MDBUS_BENCH_SIZE";
const PORT_ENV: &str = "MDBUS_BENCH_PORT";
const MESSAGES_ENV: &str = "MDBUS_BENCH_MESSAGES";
/// `mdbus-udp-svc`: time between the service thread's rounds.
const SERVICE_INTERVAL_ENV: &str = "MDBUS_BENCH_SERVICE_INTERVAL";
const HEARTBEAT_TIMEOUT_ENV: &str = "MDBUS_BENCH_HEARTBEAT_TIMEOUT";

// Throughput case: the datagram layout of an mdbus stream (docs/WIRE.md),
// reproduced by the raw peer.
/// Payload bytes per message.
const MSG: usize = 64;
/// Message header bytes.
const MSG_HEADER: usize = 24;
/// Datagram header bytes.
const DGRAM_HEADER: usize = 40;
/// Largest datagram (a 1500-byte MTU less IP and UDP headers).
const MAX_DATAGRAM: usize = 1472;
/// Messages per datagram: as many as fit.
const PER_DATAGRAM: usize = (MAX_DATAGRAM - DGRAM_HEADER) / (MSG_HEADER + MSG);
/// Bytes of a full datagram.
const DGRAM: usize = DGRAM_HEADER + PER_DATAGRAM * (MSG_HEADER + MSG);
/// Datagrams per `sendmmsg` / `recvmmsg`.
const MMSG_BATCH: usize = 32;
/// Datagram index that ends a raw run.
const END: u64 = u64::MAX;
/// Messages between two `service` calls of the publishing mdbus sender:
/// one `sendmmsg` batch (32 datagrams; a retransmit request waits at most
/// that long). The call follows the flush: `service` flushes what is
/// pending, so between two flushes it would split the batch in two
/// `sendmmsg` calls of 16, twice the raw sender's calls.
const SERVICE_EVERY_MSGS: u64 = (PER_DATAGRAM * MMSG_BATCH) as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Udp,
    Tcp,
    Mcast,
}

impl Case {
    const ALL: [Case; 3] = [Case::Udp, Case::Tcp, Case::Mcast];

    fn name(self) -> &'static str {
        match self {
            Case::Udp => "udp",
            Case::Tcp => "tcp",
            Case::Mcast => "mcast",
        }
    }

    /// The baseline first, then the mdbus peers.
    fn peers(self) -> &'static [Who] {
        match self {
            Case::Udp => &[Who::RawUdp, Who::MdbusUdp, Who::MdbusUdpSvc],
            Case::Tcp => &[Who::RawTcp, Who::MdbusTcp],
            Case::Mcast => &[Who::RawMcast, Who::MdbusMcast],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    RawUdp,
    MdbusUdp,
    /// `MdbusUdp` with the bus's service thread doing `service()`.
    MdbusUdpSvc,
    RawTcp,
    MdbusTcp,
    RawMcast,
    MdbusMcast,
}

impl Who {
    const ALL: [Who; 7] = [
        Who::RawUdp,
        Who::MdbusUdp,
        Who::MdbusUdpSvc,
        Who::RawTcp,
        Who::MdbusTcp,
        Who::RawMcast,
        Who::MdbusMcast,
    ];

    fn name(self) -> &'static str {
        match self {
            Who::RawUdp => "raw-udp",
            Who::MdbusUdp => "mdbus-udp",
            Who::MdbusUdpSvc => "mdbus-udp-svc",
            Who::RawTcp => "raw-tcp",
            Who::MdbusTcp => "mdbus-tcp",
            Who::RawMcast => "raw-mcast",
            Who::MdbusMcast => "mdbus-mcast",
        }
    }

    fn child_role(self) -> String {
        format!("child-{}", self.name())
    }

    /// A round trip over UDP multicast.
    fn is_udp(self) -> bool {
        matches!(self, Who::RawUdp | Who::MdbusUdp | Who::MdbusUdpSvc)
    }
}

fn main() {
    main_of("net", child, parent);
}

fn list_env<T: Copy>(var: &str, all: &[T], name: impl Fn(T) -> &'static str) -> Result<Vec<T>> {
    let Ok(list) = std::env::var(var) else {
        return Ok(all.to_vec());
    };
    list.split(',')
        .map(|text| {
            all.iter()
                .copied()
                .find(|&t| name(t) == text.trim())
                .ok_or_else(|| {
                    let known: Vec<_> = all.iter().map(|&t| name(t)).collect();
                    bench_err!("{var}: unknown {text:?} (one of {})", known.join(", "))
                })
        })
        .collect()
}

fn sizes() -> Result<Vec<usize>> {
    let text = std::env::var("MDBUS_BENCH_SIZES").unwrap_or_else(|_| "32,1024".into());
    text.split(',')
        .map(|s| match s.trim().parse::<usize>() {
            Ok(n) if (8..=1400).contains(&n) => Ok(n),
            _ => Err(bench_err!(
                "MDBUS_BENCH_SIZES: {s:?} is not a size from 8 to 1400 bytes"
            )),
        })
        .collect()
}

/// One round-trip measurement.
struct Rtt {
    who: Who,
    size: usize,
    rtt: Percentiles,
    count: u64,
}

/// One throughput measurement.
struct Through {
    who: Who,
    sent: u64,
    received: u64,
    lost: u64,
    recovered: u64,
    receive_ns: u64,
    send_ns: u64,
}

impl Through {
    fn per_sec(count: u64, ns: u64) -> f64 {
        if ns == 0 {
            0.0
        } else {
            count as f64 * 1e9 / ns as f64
        }
    }
    fn recv_rate(&self) -> f64 {
        Self::per_sec(self.received, self.receive_ns)
    }
    fn send_rate(&self) -> f64 {
        Self::per_sec(self.sent, self.send_ns)
    }
}

fn parent() -> Result<()> {
    let settings = Settings::from_env(100_000, 5_000)?;
    let cases = list_env("MDBUS_BENCH_CASES", &Case::ALL, Case::name)?;
    let peers = list_env("MDBUS_BENCH_PEERS", &Who::ALL, Who::name)?;
    let sizes = sizes()?;
    let messages = env_u64(
        MESSAGES_ENV,
        if settings.smoke { 20_000 } else { 5_000_000 },
    )?
    .max(1);
    mdbus::affinity::pin_current_thread(settings.cores.0)?;
    let clock = clock_cost();
    println!(
        "the IP transport against raw sockets over the loopback: parent (ping, receiver) on core {}, child (pong, sender) on core {} ({})",
        settings.cores.0, settings.cores.1, settings.placement
    );
    println!(
        "round trips: {} after {} warm-up per peer and size, wait {}; Instant::now() pair p50 {} ns (in every sample once)",
        settings.iters, settings.warmup, settings.wait, clock.p50
    );
    note_smoke(&settings);

    let mut rtts = Vec::new();
    let mut throughs = Vec::new();
    for case in cases {
        for &who in case.peers().iter().filter(|w| peers.contains(w)) {
            match case {
                Case::Udp | Case::Tcp => {
                    for &size in &sizes {
                        let hist = ping(&settings, who, size)?;
                        rtts.push(Rtt {
                            who,
                            size,
                            rtt: Percentiles::of(&hist),
                            count: hist.len(),
                        });
                    }
                }
                Case::Mcast => throughs.push(receive(&settings, who, messages)?),
            }
        }
    }
    let mut lines = report_rtts(&settings, &rtts, clock);
    lines.extend(report_throughput(&settings, &throughs, messages));
    println!();
    emit_json(&lines)
}

fn child(role: &str) -> Result<()> {
    let settings = Settings::from_env(1, 0)?;
    child_init()?;
    let who = Who::ALL
        .into_iter()
        .find(|w| w.child_role() == role)
        .ok_or_else(|| bench_err!("unknown role {role:?}"))?;
    let size = env_u64(SIZE_ENV, 32)? as usize;
    let port =
        u16::try_from(env_u64(PORT_ENV, 0)?).map_err(|_| bench_err!("{PORT_ENV} is not a port"))?;
    match who {
        Who::RawUdp => pong(&settings, &mut RawUdp::open(port, size, false)?),
        Who::MdbusUdp => pong(&settings, &mut MdbusUdp::open(port, size, false, false)?),
        Who::MdbusUdpSvc => pong(&settings, &mut MdbusUdp::open(port, size, false, true)?),
        Who::RawTcp => {
            let sock = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
            pong(&settings, &mut RawTcp::new(sock, size)?)
        }
        Who::MdbusTcp => pong(&settings, &mut MdbusTcp::connect(port, size)?),
        Who::RawMcast => raw_send(&settings, port, env_u64(MESSAGES_ENV, 1)?),
        Who::MdbusMcast => mdbus_send(&settings, port, env_u64(MESSAGES_ENV, 1)?),
    }
}

// ------------------------------------------------------- round trips ----

/// One side of a round trip.
trait Side {
    /// Sends `size` bytes with `value` in the first 8.
    fn send(&mut self, value: u64) -> Result<()>;
    /// The value of the next message, if one has arrived.
    fn try_receive(&mut self) -> Result<Option<u64>>;
    /// One empty poll.
    #[inline(always)]
    fn idle(&mut self) -> Result<()> {
        Ok(())
    }
    /// After STOP: whatever this side owes the other before it can go
    /// (a stream publisher answering a request for STOP).
    fn linger(&mut self, _peer: &mut Peer) -> Result<()> {
        Ok(())
    }
}

#[inline(always)]
fn counter(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

fn ping(settings: &Settings, who: Who, size: usize) -> Result<Histogram<u64>> {
    let port = free_port(who.is_udp())?;
    let env = [(SIZE_ENV, size.to_string()), (PORT_ENV, port.to_string())];
    match who {
        Who::RawUdp => {
            // Both sockets exist before pong starts: its READY cannot be
            // missed.
            let mut side = RawUdp::open(port, size, true)?;
            let peer = Peer::spawn_env(&who.child_role(), settings, None, &env)?;
            ping_loop(settings, &mut side, peer, who)
        }
        Who::MdbusUdp | Who::MdbusUdpSvc => {
            let mut side = MdbusUdp::open(port, size, true, who == Who::MdbusUdpSvc)?;
            let peer = Peer::spawn_env(&who.child_role(), settings, None, &env)?;
            ping_loop(settings, &mut side, peer, who)
        }
        Who::RawTcp => {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
            listener.set_nonblocking(true)?;
            let mut peer = Peer::spawn_env(&who.child_role(), settings, None, &env)?;
            let sock = {
                let mut dog = watchdog(
                    Some(&mut peer),
                    settings.wait,
                    settings.stall,
                    "raw TCP accept",
                );
                loop {
                    match listener.accept() {
                        Ok((s, _)) => break s,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => dog.idle()?,
                        Err(e) => return Err(e.into()),
                    }
                }
            };
            let mut side = RawTcp::new(sock, size)?;
            ping_loop(settings, &mut side, peer, who)
        }
        Who::MdbusTcp => {
            let peer = Peer::spawn_env(&who.child_role(), settings, None, &env)?;
            let mut side = MdbusTcp::accept(port, size)?;
            ping_loop(settings, &mut side, peer, who)
        }
        Who::RawMcast | Who::MdbusMcast => Err(bench_err!("{} is not a round trip", who.name())),
    }
}

fn ping_loop(
    settings: &Settings,
    side: &mut impl Side,
    mut peer: Peer,
    who: Who,
) -> Result<Histogram<u64>> {
    let mut hist = latency_histogram();
    {
        let mut dog = watchdog(Some(&mut peer), settings.wait, settings.stall, "ping");
        loop {
            match side.try_receive()? {
                Some(READY) => break,
                Some(v) => return Err(bench_err!("{}: expected READY, got {v}", who.name())),
                None => {
                    side.idle()?;
                    dog.idle()?;
                }
            }
        }
        for i in 1..=settings.warmup + settings.iters {
            let t0 = Instant::now();
            side.send(i)?;
            loop {
                match side.try_receive()? {
                    Some(v) if v == i => break,
                    Some(v) => return Err(bench_err!("{}: sent {i}, got {v} back", who.name())),
                    None => {
                        side.idle()?;
                        dog.idle()?;
                    }
                }
            }
            let rtt = nanos(t0.elapsed());
            dog.progress();
            if i > settings.warmup {
                hist.saturating_record(rtt);
            }
        }
        side.send(STOP)?;
    }
    side.linger(&mut peer)?;
    peer.finish()?;
    Ok(hist)
}

fn pong(settings: &Settings, side: &mut impl Side) -> Result<()> {
    let mut dog = watchdog(None, settings.wait, settings.stall, "pong");
    side.send(READY)?;
    loop {
        match side.try_receive()? {
            Some(STOP) => return Ok(()),
            Some(v) => {
                side.send(v)?;
                dog.progress();
            }
            None => {
                side.idle()?;
                dog.idle()?;
            }
        }
    }
}

/// A UDP socket that sends to multicast groups on the loopback, set up as
/// mdbus sets up its own.
fn mcast_sender() -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into())?;
    s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST)?;
    s.set_multicast_ttl_v4(0)?;
    s.set_multicast_loop_v4(true)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// A UDP socket bound to `group` and joined to it on the loopback, set up
/// as mdbus sets up its own.
fn mcast_receiver(group: SocketAddrV4) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.bind(&group.into())?;
    s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)?;
    s.set_multicast_all_v4(false)?;
    // An 8 MiB receive buffer, as mdbus asks for its own: beyond
    // net.core.rmem_max where the process may (SO_RCVBUFFORCE, as root),
    // else up to that limit.
    let bytes: libc::c_int = 8 << 20;
    // SAFETY: a valid socket, and an int option value of the size given.
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
        let _ = s.set_recv_buffer_size(bytes as usize);
    }
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Ping sends on `port`, pong on `port + 1`.
fn groups(port: u16, is_ping: bool) -> (SocketAddrV4, SocketAddrV4) {
    let ping = SocketAddrV4::new(GROUP, port);
    let pong = SocketAddrV4::new(GROUP, port + 1);
    if is_ping {
        (ping, pong)
    } else {
        (pong, ping)
    }
}

/// Raw UDP multicast: one socket sends to the outgoing group, another,
/// joined to the incoming group, is busy-polled with non-blocking `recv`.
struct RawUdp {
    tx: UdpSocket,
    rx: UdpSocket,
    to: SocketAddrV4,
    out: Vec<u8>,
    back: Vec<u8>,
}

impl RawUdp {
    fn open(port: u16, size: usize, is_ping: bool) -> Result<RawUdp> {
        let (out, inp) = groups(port, is_ping);
        Ok(RawUdp {
            tx: mcast_sender()?,
            rx: mcast_receiver(inp)?,
            to: out,
            out: vec![0x5a; size],
            back: vec![0; 2048],
        })
    }
}

impl Side for RawUdp {
    #[inline(always)]
    fn send(&mut self, value: u64) -> Result<()> {
        self.out[..8].copy_from_slice(&value.to_le_bytes());
        loop {
            match self.tx.send_to(&self.out, self.to) {
                Ok(_) => return Ok(()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    #[inline(always)]
    fn try_receive(&mut self) -> Result<Option<u64>> {
        match self.rx.recv(&mut self.back) {
            Ok(n) => Ok(Some(counter(&self.back[..n]))),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// An mdbus bus on UDP multicast (loopback, time-to-live 0) with streams
/// `ping` (on `port`) and `pong` (on `port + 1`) of `size`-byte messages;
/// `served`: with the service thread (not pinned; a round every
/// `MDBUS_BENCH_SERVICE_INTERVAL`, default 1ms as in the library).
fn udp_bus(port: u16, size: usize, served: bool) -> Result<mdbus::Bus> {
    let interval = match std::env::var(SERVICE_INTERVAL_ENV) {
        Ok(text) => mdbus::config::duration_str::parse(&text)
            .map_err(|e| bench_err!("{SERVICE_INTERVAL_ENV}: {e}"))?,
        Err(_) => mdbus::config::ServiceConfig::default().interval,
    };
    // Under valgrind a side runs tens of times slower: a longer silence
    // must not read as the publisher gone.
    let heartbeat_timeout = match std::env::var(HEARTBEAT_TIMEOUT_ENV) {
        Ok(text) => Some(
            mdbus::config::duration_str::parse(&text)
                .map_err(|e| bench_err!("{HEARTBEAT_TIMEOUT_ENV}: {e}"))?,
        ),
        Err(_) => None,
    };
    mdbus_benches::mdbus_bus(|cfg| {
        cfg.transport = TransportKind::Udp;
        cfg.service.thread = served;
        cfg.service.interval = interval;
        for (name, group) in [("ping", port), ("pong", port + 1)] {
            let s = StreamConfig {
                max_message: size,
                capacity: 1024,
                group: SocketAddrV4::new(GROUP, group).to_string(),
                interface: Ipv4Addr::LOCALHOST.to_string(),
                ttl: 0,
                late_join: LateJoin::Oldest,
                ..Default::default()
            };
            let s = StreamConfig {
                heartbeat_timeout: heartbeat_timeout.unwrap_or(s.heartbeat_timeout),
                ..s
            };
            cfg.streams.insert(name.into(), s);
        }
    })
}

/// mdbus streams, one each way.
struct MdbusUdp {
    publisher: mdbus::Publisher,
    subscriber: mdbus::Subscriber,
    out: Vec<u8>,
    idle: u32,
    /// The bus's service thread serves the publisher: never call
    /// `service()` here.
    served: bool,
}

impl MdbusUdp {
    fn open(port: u16, size: usize, is_ping: bool, served: bool) -> Result<MdbusUdp> {
        let bus = udp_bus(port, size, served)?;
        let (out, inp) = if is_ping {
            ("ping", "pong")
        } else {
            ("pong", "ping")
        };
        // Subscribed before anything is published on either side.
        let subscriber = bus.subscriber(inp)?;
        let publisher = bus.publisher(out)?;
        Ok(MdbusUdp {
            publisher,
            subscriber,
            out: vec![0x5a; size],
            idle: 0,
            served,
        })
    }
}

impl Side for MdbusUdp {
    #[inline(always)]
    fn send(&mut self, value: u64) -> Result<()> {
        self.out[..8].copy_from_slice(&value.to_le_bytes());
        self.publisher.publish(&self.out)?;
        Ok(())
    }

    #[inline(always)]
    fn try_receive(&mut self) -> Result<Option<u64>> {
        let mut got = None;
        let mut trouble = None;
        self.subscriber.poll(|e| match e {
            Event::Message(m) => got = Some(counter(m.payload())),
            Event::EndOfStream { .. } => {}
            other => trouble = Some(format!("{other:?}")),
        })?;
        match trouble {
            Some(what) => Err(bench_err!("mdbus-udp: unexpected {what}")),
            None => Ok(got),
        }
    }

    #[inline(always)]
    fn idle(&mut self) -> Result<()> {
        if self.served {
            return Ok(());
        }
        self.idle += 1;
        if self.idle == SERVICE_EVERY_IDLE {
            self.idle = 0;
            self.publisher.service()?;
        }
        Ok(())
    }

    fn linger(&mut self, peer: &mut Peer) -> Result<()> {
        // Pong exits once it has STOP; answer its requests until then
        // (or let the service thread answer them).
        while !peer.has_exited()? {
            if self.served {
                std::thread::yield_now();
            } else {
                self.publisher.service()?;
            }
        }
        Ok(())
    }
}

/// Raw TCP: `TCP_NODELAY`, `write`, and non-blocking `read` busy-polled
/// until a whole `size`-byte message is in.
struct RawTcp {
    sock: TcpStream,
    out: Vec<u8>,
    back: Vec<u8>,
    got: usize,
}

impl RawTcp {
    fn new(sock: TcpStream, size: usize) -> Result<RawTcp> {
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        Ok(RawTcp {
            sock,
            out: vec![0x5a; size],
            back: vec![0; size],
            got: 0,
        })
    }
}

impl Side for RawTcp {
    #[inline(always)]
    fn send(&mut self, value: u64) -> Result<()> {
        self.out[..8].copy_from_slice(&value.to_le_bytes());
        let mut at = 0;
        while at < self.out.len() {
            match self.sock.write(&self.out[at..]) {
                Ok(0) => return Err(bench_err!("raw-tcp: the peer closed the connection")),
                Ok(n) => at += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn try_receive(&mut self) -> Result<Option<u64>> {
        match self.sock.read(&mut self.back[self.got..]) {
            Ok(0) => Err(bench_err!("raw-tcp: the peer closed the connection")),
            Ok(n) => {
                self.got += n;
                if self.got == self.back.len() {
                    self.got = 0;
                    Ok(Some(counter(&self.back)))
                } else {
                    Ok(None)
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// An mdbus session on TCP.
struct MdbusTcp {
    session: mdbus::Session,
    out: Vec<u8>,
}

impl MdbusTcp {
    fn bus(port: u16, size: usize) -> Result<mdbus::Bus> {
        mdbus_benches::mdbus_bus(|cfg| {
            cfg.transport = TransportKind::Tcp;
            cfg.sessions.insert(
                "pingpong".into(),
                SessionConfig {
                    max_message: size,
                    connect_timeout: Duration::from_secs(30),
                    address: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).to_string(),
                    ..Default::default()
                },
            );
        })
    }

    fn accept(port: u16, size: usize) -> Result<MdbusTcp> {
        Ok(MdbusTcp {
            session: Self::bus(port, size)?.session_accept("pingpong")?,
            out: vec![0x5a; size],
        })
    }

    fn connect(port: u16, size: usize) -> Result<MdbusTcp> {
        Ok(MdbusTcp {
            session: Self::bus(port, size)?.session_connect("pingpong")?,
            out: vec![0x5a; size],
        })
    }
}

impl Side for MdbusTcp {
    #[inline(always)]
    fn send(&mut self, value: u64) -> Result<()> {
        self.out[..8].copy_from_slice(&value.to_le_bytes());
        self.session.send(&self.out)?;
        Ok(())
    }

    #[inline(always)]
    fn try_receive(&mut self) -> Result<Option<u64>> {
        let mut got = None;
        self.session.poll(|m| got = Some(counter(m.payload())))?;
        Ok(got)
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

fn report_rtts(settings: &Settings, rtts: &[Rtt], clock: Percentiles) -> Vec<String> {
    if rtts.is_empty() {
        return Vec::new();
    }
    print_rtt_table(rtts.iter().map(|m| (m.who.name(), m.size, m.rtt, m.count)));
    let base = |who: Who, size: usize| {
        let raw = match who {
            Who::MdbusUdp => Who::RawUdp,
            // The service thread's cost: against the same streams served
            // by explicit service() calls.
            Who::MdbusUdpSvc => Who::MdbusUdp,
            Who::MdbusTcp => Who::RawTcp,
            _ => return None,
        };
        rtts.iter()
            .find(|m| m.who == raw && m.size == size)
            .map(|m| (raw, m.rtt))
    };
    println!();
    let mut lines = Vec::new();
    for m in rtts {
        let mut obj = rtt_json("net", settings, clock.p50, m.count, m.rtt);
        obj["case"] = (if m.who.is_udp() { "udp" } else { "tcp" }).into();
        obj["peer"] = m.who.name().into();
        obj["payload"] = m.size.into();
        if let Some((raw, b)) = base(m.who, m.size).filter(|(raw, _)| *raw == Who::MdbusUdp) {
            // The service thread's cost: no target, every percentile.
            let r = |x: u64, y: u64| ratio(x as f64, y as f64);
            let (p50, p90) = (r(m.rtt.p50, b.p50), r(m.rtt.p90, b.p90));
            let (p99, p999) = (r(m.rtt.p99, b.p99), r(m.rtt.p999, b.p999));
            println!(
                "{:>13}/{:<9} {:>5} B: p50 x{:.3}  p90 x{:.3}  p99 x{:.3}  p99.9 x{:.3}",
                m.who.name(),
                raw.name(),
                m.size,
                p50.unwrap_or(f64::NAN),
                p90.unwrap_or(f64::NAN),
                p99.unwrap_or(f64::NAN),
                p999.unwrap_or(f64::NAN)
            );
            obj[format!("vs_{}", raw.name())] =
                serde_json::json!({ "p50": p50, "p90": p90, "p99": p99, "p999": p999 });
        } else if let Some((raw, b)) = base(m.who, m.size) {
            let p50 = ratio(m.rtt.p50 as f64, b.p50 as f64);
            let p999 = ratio(m.rtt.p999 as f64, b.p999 as f64);
            let target = if m.who.is_udp() {
                TARGET_P50_UDP
            } else {
                TARGET_P50
            };
            let verdict = match p50 {
                Some(r) if r <= target => "within",
                Some(_) => "OVER",
                None => "n/a",
            };
            println!(
                "{:>10}/{:<8} {:>5} B: p50 x{:.2} ({verdict} the x{target} target)  p99.9 x{:.2}",
                m.who.name(),
                raw.name(),
                m.size,
                p50.unwrap_or(f64::NAN),
                p999.unwrap_or(f64::NAN)
            );
            obj[format!("vs_{}", raw.name())] = serde_json::json!({
                "p50": p50, "p999": p999, "p50_target": target,
            });
        }
        lines.push(obj.to_string());
    }
    lines
}

// -------------------------------------------------------- throughput ----

/// Preallocated `recvmmsg`/`sendmmsg` state: `MMSG_BATCH` buffers of
/// `slot` bytes, their iovecs and message headers (each header points at
/// its iovec, each iovec at its buffer; the boxes never move their heap
/// data, so the pointers stay valid as long as `self` lives).
struct Mmsg {
    bufs: Box<[u8]>,
    iov: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    slot: usize,
    /// The destination, for sending.
    name: Box<libc::sockaddr_in>,
}

impl Mmsg {
    fn new(slot: usize, to: Option<SocketAddrV4>) -> Mmsg {
        // SAFETY: sockaddr_in is a plain C struct; all-zero is valid.
        let mut name: Box<libc::sockaddr_in> = Box::new(unsafe { zeroed() });
        if let Some(to) = to {
            name.sin_family = libc::AF_INET as libc::sa_family_t;
            name.sin_port = to.port().to_be();
            name.sin_addr.s_addr = u32::from(*to.ip()).to_be();
        }
        let mut m = Mmsg {
            bufs: vec![0u8; slot * MMSG_BATCH].into_boxed_slice(),
            // SAFETY: iovec and mmsghdr are plain C structs; all-zero is
            // valid (null pointers, zero lengths).
            iov: (0..MMSG_BATCH).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            hdrs: (0..MMSG_BATCH).map(|_| unsafe { zeroed() }).collect(),
            slot,
            name,
        };
        for i in 0..MMSG_BATCH {
            m.iov[i].iov_base = m.bufs[i * slot..].as_mut_ptr().cast();
            m.iov[i].iov_len = slot;
            m.hdrs[i].msg_hdr.msg_iov = &mut m.iov[i];
            m.hdrs[i].msg_hdr.msg_iovlen = 1;
            if to.is_some() {
                m.hdrs[i].msg_hdr.msg_name = (&mut *m.name as *mut libc::sockaddr_in).cast();
                m.hdrs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
        }
        m
    }

    fn buf_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.slot..(i + 1) * self.slot]
    }

    /// Receives up to a batch without blocking; returns how many.
    fn recv(&mut self, fd: libc::c_int) -> std::io::Result<usize> {
        for h in self.hdrs.iter_mut() {
            h.msg_len = 0;
        }
        // SAFETY: every header (MMSG_BATCH of them) points at an iovec and
        // buffer owned by `self`, valid for the call.
        unsafe { mdbus::sys::net::recv_batch(fd, &mut self.hdrs) }
    }

    /// The `i`th datagram received.
    fn datagram(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &self.bufs[i * self.slot..i * self.slot + len]
    }

    /// Sends datagrams `0..n`, of `len[i]` bytes each, to the destination,
    /// retrying what the kernel did not take (a lossless sender).
    fn send(&mut self, fd: libc::c_int, lens: &[usize]) -> std::io::Result<()> {
        for (i, &len) in lens.iter().enumerate() {
            self.iov[i].iov_len = len;
        }
        let mut at = 0;
        while at < lens.len() {
            // SAFETY: headers `at..len` point at iovecs, buffers and the
            // destination owned by `self`, valid for the call.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.hdrs[at..].as_mut_ptr(),
                    (lens.len() - at) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    ErrorKind::WouldBlock | ErrorKind::Interrupted => continue,
                    _ if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                    _ => return Err(e),
                }
            }
            at += r as usize;
        }
        Ok(())
    }
}

/// The sender's report on its stdout: `{"sent": N, "send_ns": T}`.
fn sender_report(out: &str) -> Result<(u64, u64)> {
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).map_err(|e| bench_err!("sender report {out:?}: {e}"))?;
    let field = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| bench_err!("sender report {out:?} lacks {k}"))
    };
    Ok((field("sent")?, field("send_ns")?))
}

fn receive(settings: &Settings, who: Who, messages: u64) -> Result<Through> {
    let port = free_port(true)?;
    let env = [
        (PORT_ENV, port.to_string()),
        (MESSAGES_ENV, messages.to_string()),
    ];
    let group = SocketAddrV4::new(GROUP, port);
    match who {
        Who::RawMcast => raw_receive(settings, group, &env, messages),
        Who::MdbusMcast => mdbus_receive(settings, port, &env, messages),
        _ => Err(bench_err!("{} is not a throughput peer", who.name())),
    }
}

fn raw_receive(
    settings: &Settings,
    group: SocketAddrV4,
    env: &[(&str, String)],
    messages: u64,
) -> Result<Through> {
    let rx = mcast_receiver(group)?;
    let mut peer = Peer::spawn_env(&Who::RawMcast.child_role(), settings, None, env)?;
    peer.go()?;
    let mut batch = Mmsg::new(2048, None);
    let (mut received, mut ended, mut out_of_order, mut expect) = (0u64, false, 0u64, 0u64);
    let mut span = Span::default();
    {
        let mut dog = watchdog(
            Some(&mut peer),
            settings.wait,
            settings.stall,
            "raw multicast receive",
        );
        while !ended && received < messages {
            let n = batch.recv(rx.as_raw_fd())?;
            if n == 0 {
                dog.idle()?;
                continue;
            }
            for d in 0..n {
                let bytes = batch.datagram(d);
                if counter(bytes) == END {
                    ended = true;
                    continue;
                }
                // Read every message's sequence, as a subscriber would.
                let mut at = DGRAM_HEADER;
                while at + MSG_HEADER + MSG <= bytes.len() {
                    let seq = counter(&bytes[at..]);
                    out_of_order += u64::from(seq < expect);
                    expect = seq + 1;
                    received += 1;
                    at += MSG_HEADER + MSG;
                }
            }
            span.mark();
            dog.progress();
        }
    }
    peer.done()?;
    let (sent, send_ns) = sender_report(&peer.finish()?)?;
    if out_of_order > 0 {
        return Err(bench_err!(
            "raw-mcast: {out_of_order} messages out of order"
        ));
    }
    Ok(Through {
        who: Who::RawMcast,
        sent,
        received,
        lost: sent.saturating_sub(received),
        recovered: 0,
        receive_ns: span.ns(),
        send_ns,
    })
}

fn raw_send(settings: &Settings, port: u16, messages: u64) -> Result<()> {
    let tx = mcast_sender()?;
    let mut batch = Mmsg::new(DGRAM, Some(SocketAddrV4::new(GROUP, port)));
    wait_for_go()?;
    let done = DoneSignal::listen();
    let datagrams = messages.div_ceil(PER_DATAGRAM as u64);
    let mut lens = [0usize; MMSG_BATCH];
    let mut seq = 0u64;
    let t0 = Instant::now();
    let mut d = 0u64;
    while d < datagrams {
        let k = (datagrams - d).min(MMSG_BATCH as u64) as usize;
        for (i, len) in lens.iter_mut().enumerate().take(k) {
            let buf = batch.buf_mut(i);
            buf[..8].copy_from_slice(&(d + i as u64).to_le_bytes());
            let mut at = DGRAM_HEADER;
            let mut in_this = 0;
            while in_this < PER_DATAGRAM && seq < messages {
                // The message header (sequence, length, flags, timestamp)
                // and payload (counter, filler), as mdbus writes them.
                buf[at..at + 8].copy_from_slice(&seq.to_le_bytes());
                buf[at + 8..at + 16].copy_from_slice(&(MSG as u64).to_le_bytes());
                buf[at + 16..at + 24].fill(0);
                let p = at + MSG_HEADER;
                buf[p..p + 8].copy_from_slice(&seq.to_le_bytes());
                buf[p + 8..p + MSG].fill(0x5a);
                at += MSG_HEADER + MSG;
                seq += 1;
                in_this += 1;
            }
            *len = at;
        }
        batch.send(tx.as_raw_fd(), &lens[..k])?;
        d += k as u64;
    }
    let send_ns = nanos(t0.elapsed());
    // The end marker, repeated (a receiver whose socket overflowed may miss
    // one) until the receiver is done.
    let mut end = [0u8; DGRAM_HEADER];
    end[..8].copy_from_slice(&END.to_le_bytes());
    let to = SocketAddrV4::new(GROUP, port);
    let mut dog = watchdog(None, settings.wait, settings.stall, "raw sender");
    while !done.is_done() {
        let _ = tx.send_to(&end, to);
        let pause = Instant::now();
        while pause.elapsed() < Duration::from_micros(100) && !done.is_done() {
            dog.idle()?;
        }
    }
    println!(
        "{}",
        serde_json::json!({ "sent": messages, "send_ns": send_ns })
    );
    Ok(())
}

fn mcast_bus(port: u16) -> Result<mdbus::Bus> {
    mdbus_benches::mdbus_bus(|cfg| {
        cfg.transport = TransportKind::Udp;
        cfg.streams.insert(
            "mcast".into(),
            StreamConfig {
                max_message: MSG,
                capacity: 65536,
                group: SocketAddrV4::new(GROUP, port).to_string(),
                interface: Ipv4Addr::LOCALHOST.to_string(),
                ttl: 0,
                max_datagram: MAX_DATAGRAM,
                autoflush: false,
                ..Default::default()
            },
        );
    })
}

fn mdbus_receive(
    settings: &Settings,
    port: u16,
    env: &[(&str, String)],
    messages: u64,
) -> Result<Through> {
    let bus = mcast_bus(port)?;
    let mut sub = bus.subscriber("mcast")?;
    let mut peer = Peer::spawn_env(&Who::MdbusMcast.child_role(), settings, None, env)?;
    peer.go()?;
    let mut reached = false;
    let mut trouble = None;
    let mut span = Span::default();
    {
        let mut dog = watchdog(
            Some(&mut peer),
            settings.wait,
            settings.stall,
            "mdbus multicast receive",
        );
        while !reached {
            let n = sub.poll(|e| match e {
                Event::Message(m) => reached |= m.seq() >= messages,
                Event::Gap { to, .. } | Event::Overrun { to, .. } => reached |= to > messages,
                Event::EndOfStream { .. } => reached = true,
                other => trouble = Some(format!("{other:?}")),
            })?;
            if let Some(what) = trouble.take() {
                return Err(bench_err!("mdbus-mcast: unexpected {what}"));
            }
            if n == 0 {
                dog.idle()?;
            } else {
                span.mark();
                dog.progress();
            }
        }
    }
    peer.done()?;
    let (sent, send_ns) = sender_report(&peer.finish()?)?;
    let stats = sub.stats();
    Ok(Through {
        who: Who::MdbusMcast,
        sent,
        received: stats.received,
        lost: stats.gap_messages + stats.overrun_messages,
        recovered: sub.recovery_counters().map_or(0, |c| c.recovered),
        receive_ns: span.ns(),
        send_ns,
    })
}

fn mdbus_send(settings: &Settings, port: u16, messages: u64) -> Result<()> {
    let bus = mcast_bus(port)?;
    let mut publisher = bus.publisher("mcast")?;
    wait_for_go()?;
    let done = DoneSignal::listen();
    let t0 = Instant::now();
    for i in 0..messages {
        let mut claim = publisher.claim(MSG)?;
        claim[..8].copy_from_slice(&i.to_le_bytes());
        claim[8..].fill(0x5a);
        claim.commit()?;
        if (i + 1) % (PER_DATAGRAM * MMSG_BATCH) as u64 == 0 {
            publisher.flush()?;
        }
        if (i + 1) % SERVICE_EVERY_MSGS == 0 {
            publisher.service()?;
        }
    }
    publisher.flush()?;
    let send_ns = nanos(t0.elapsed());
    // Answer retransmit requests until the receiver has everything (or
    // has given up on what is no longer retained).
    let mut dog = watchdog(None, settings.wait, settings.stall, "mdbus sender");
    while !done.is_done() {
        publisher.service()?;
        dog.idle()?;
    }
    println!(
        "{}",
        serde_json::json!({ "sent": messages, "send_ns": send_ns })
    );
    Ok(())
}

fn report_throughput(settings: &Settings, results: &[Through], messages: u64) -> Vec<String> {
    if results.is_empty() {
        return Vec::new();
    }
    println!();
    println!(
        "multicast throughput: {messages} messages of {MSG} bytes, {PER_DATAGRAM} per {DGRAM}-byte datagram, receiver on core {}, sender on core {}",
        settings.cores.0, settings.cores.1
    );
    println!(
        "{:<12} {:>10} {:>10} {:>9} {:>9} {:>13} {:>13}",
        "peer", "sent", "received", "lost", "recovered", "recv msgs/s", "send msgs/s"
    );
    for m in results {
        println!(
            "{:<12} {:>10} {:>10} {:>9} {:>9} {:>13.0} {:>13.0}",
            m.who.name(),
            m.sent,
            m.received,
            m.lost,
            m.recovered,
            m.recv_rate(),
            m.send_rate()
        );
    }
    let raw = results.iter().find(|m| m.who == Who::RawMcast);
    let mut lines = Vec::new();
    for m in results {
        let mut obj = serde_json::json!({
            "bench": "net",
            "case": "mcast",
            "peer": m.who.name(),
            "size": MSG,
            "per_datagram": PER_DATAGRAM,
            "datagram": DGRAM,
            "sent": m.sent,
            "received": m.received,
            "lost": m.lost,
            "recovered": m.recovered,
            "msgs_per_sec": m.recv_rate().round(),
            "send_msgs_per_sec": m.send_rate().round(),
            "receiver_core": settings.cores.0,
            "sender_core": settings.cores.1,
            "wait": settings.wait.as_str(),
        });
        if let (Some(raw), Who::MdbusMcast) = (raw, m.who) {
            let recv = ratio(m.recv_rate(), raw.recv_rate());
            let send = ratio(m.send_rate(), raw.send_rate());
            println!(
                "{:>12}/{:<9} received msgs/s x{:.2}  sent msgs/s x{:.2}",
                m.who.name(),
                raw.who.name(),
                recv.unwrap_or(f64::NAN),
                send.unwrap_or(f64::NAN)
            );
            obj["vs_raw-mcast"] =
                serde_json::json!({ "msgs_per_sec": recv, "send_msgs_per_sec": send });
        }
        lines.push(obj.to_string());
    }
    lines
}
