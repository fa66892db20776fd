//! The exchange simulator over loopback multicast: both lines received
//! and arbitrated with recovery from its re-request server (every message
//! once, in order, equal to the generator's), the re-request server's
//! answers, malformed requests, configuration errors, and tshark's
//! MoldUDP64 and ITCH dissectors over a capture of a run.

#[path = "../../../feed/tests/support/tshark.rs"]
mod tshark;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mdbus_exchange::{Exchange, ExchangeConfig, ExchangeCounters, ExchangeError};
use mdbus_feed::arbiter::{Arbiter, ArbiterConfig, ArbiterSink, Line};
use mdbus_feed::moldudp64::{Packet, PacketKind, Request, Session};
use mdbus_feed::pcap::CaptureWriter;
use mdbus_feed::synth::{Generator, SynthConfig};
use socket2::{Domain, Protocol, Socket, Type};

/// Generous: the machine is shared; a test that needs this long has hung.
const DEADLINE: Duration = Duration::from_secs(120);

/// Two groups no other test (or process) on this host uses: the port is
/// one the system just handed out, the groups vary with the process.
fn unique_lines() -> (SocketAddrV4, SocketAddrV4) {
    static N: AtomicU32 = AtomicU32::new(0);
    let port = UdpSocket::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let x = (std::process::id() % 200) as u8 + 20;
    let y = (n * 2 % 250) as u8 + 1;
    (
        SocketAddrV4::new(Ipv4Addr::new(239, 255, x, y), port),
        SocketAddrV4::new(Ipv4Addr::new(239, 255, x, y + 1), port),
    )
}

/// Joins a group on loopback, non-blocking, with a large receive buffer.
fn join(group: SocketAddrV4) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&group.into()).unwrap();
    s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
        .unwrap();
    let _ = s.set_recv_buffer_size(8 << 20);
    s.set_nonblocking(true).unwrap();
    s.into()
}

fn synth(seed: u64, order_messages: u64) -> SynthConfig {
    SynthConfig {
        seed,
        symbols: 20,
        order_messages,
        ..SynthConfig::default()
    }
}

fn session() -> Session {
    Session::new("TEST000001").unwrap()
}

fn config(lines: (SocketAddrV4, SocketAddrV4), synth: SynthConfig) -> ExchangeConfig {
    ExchangeConfig {
        session: session(),
        line_a: lines.0,
        line_b: lines.1,
        synth,
        heartbeat_interval: Duration::from_millis(50),
        ..ExchangeConfig::default()
    }
}

fn generated(cfg: &SynthConfig) -> Vec<Vec<u8>> {
    Generator::new(cfg)
        .unwrap()
        .map(|m| m.bytes().to_vec())
        .collect()
}

/// Waits for a condition on the simulator's counters.
fn wait_counters(ex: &Exchange, what: &str, cond: impl Fn(&ExchangeCounters) -> bool) {
    let start = Instant::now();
    loop {
        let c = ex.counters();
        if cond(&c) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}: {c:?}"
        );
        std::thread::yield_now();
    }
}

/// The arbiter's sink: messages kept, requests sent to the server.
struct Collect<'a> {
    messages: Vec<(u64, Line, Vec<u8>)>,
    socket: &'a UdpSocket,
    server: SocketAddrV4,
    unrecoverable: u64,
    ended: bool,
}

impl ArbiterSink for Collect<'_> {
    fn message(&mut self, sequence: u64, line: Line, data: &[u8]) {
        self.messages.push((sequence, line, data.to_vec()));
    }
    fn request(&mut self, request: &Request) {
        self.socket
            .send_to(&request.encode(), self.server)
            .expect("request sent");
    }
    fn unrecoverable(&mut self, _first: u64, count: u64) {
        self.unrecoverable += count;
    }
    fn end_of_session(&mut self) {
        self.ended = true;
    }
}

#[test]
fn both_lines_and_the_rerequest_server_deliver_every_message_once_in_order() {
    let lines = unique_lines();
    let cfg = synth(7, 20_000);
    let a = join(lines.0);
    let b = join(lines.1);
    let ex = Exchange::start(ExchangeConfig {
        drop_a: 0.1,
        drop_b: 0.1,
        seed: 99,
        messages_per_second: 200_000,
        ..config(lines, cfg.clone())
    })
    .unwrap();
    let rereq = requester();
    rereq.set_nonblocking(true).unwrap();
    let mut arb = Arbiter::new(ArbiterConfig {
        expected_session: Some(session()),
        start_sequence: Some(1),
        gap_wait_ns: 1_000_000,
        ..ArbiterConfig::default()
    });
    let mut sink = Collect {
        messages: Vec::new(),
        socket: &rereq,
        server: ex.rerequest_addr(),
        unrecoverable: 0,
        ended: false,
    };
    // Which lines carried each sequence number, before arbitration.
    let mut seen: BTreeMap<u64, [bool; 2]> = BTreeMap::new();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let epoch = Instant::now();
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    while !sink.ended {
        assert!(
            start.elapsed() < DEADLINE,
            "no end of session after {DEADLINE:?}: {:?} / {:?}",
            arb.counters(),
            ex.counters()
        );
        // One datagram from each socket in turn, as a relay polls them.
        let mut idle = true;
        for (i, (line, sock)) in [(Line::A, &a), (Line::B, &b), (Line::Recovery, &rereq)]
            .into_iter()
            .enumerate()
        {
            if let Ok(n) = sock.recv(&mut buf) {
                idle = false;
                if i < 2 {
                    let p = Packet::parse_strict(&buf[..n]).unwrap();
                    for m in p.messages() {
                        seen.entry(m.unwrap().sequence).or_default()[i] = true;
                    }
                }
                arb.on_packet(line, &buf[..n], now_ns(), &mut sink);
            }
        }
        if arb.next_deadline().is_some_and(|t| t <= now_ns()) {
            arb.on_timer(now_ns(), &mut sink);
        }
        if idle {
            std::thread::yield_now();
        }
    }
    let want = generated(&cfg);
    let n = want.len() as u64;
    assert_eq!(
        sink.unrecoverable,
        0,
        "{:?} / {:?}",
        arb.counters(),
        ex.counters()
    );
    assert_eq!(
        sink.messages.len() as u64,
        n,
        "every message delivered once"
    );
    for (i, (seq, _, data)) in sink.messages.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "in order");
        assert_eq!(data, &want[i], "message {seq} is the generator's");
    }
    // What both lines lost came from the server, and nothing else did
    // unless a line's copy was late.
    for (seq, line, _) in &sink.messages {
        if !seen.get(seq).is_some_and(|s| s[0] || s[1]) {
            assert_eq!(*line, Line::Recovery, "message {seq} was on neither line");
        }
    }
    let c = *arb.counters();
    assert!(ex.wait_finished(DEADLINE), "the simulator never finished");
    let x = ex.stop();
    assert_eq!(x.messages, n);
    assert!(x.finished && x.sessions_finished == 1, "{x:?}");
    assert!(
        x.dropped_a > 0 && x.dropped_b > 0 && x.dropped_both > 0,
        "{x:?}"
    );
    assert!(c.wins_a > 0 && c.wins_b > 0 && c.wins_recovery > 0, "{c:?}");
    assert_eq!(c.wins_a + c.wins_b + c.wins_recovery, n);
    assert!(c.requests_sent > 0 && x.requests_served > 0, "{c:?} {x:?}");
    assert!(x.messages_resent >= c.wins_recovery);
    assert_eq!(c.end_of_session, 1);
    assert_eq!((c.malformed, c.unrecoverable), (0, 0));
    eprintln!("arbiter {c:?}\nexchange {x:?}");
}

/// A unicast socket for requests, with room for a burst of answers.
fn requester() -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into())
        .unwrap();
    let _ = s.set_recv_buffer_size(8 << 20);
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s.into()
}

/// Sends a request and collects the answer's messages until `count`
/// arrived.
fn ask(
    sock: &UdpSocket,
    server: SocketAddrV4,
    req: Request,
    count: u64,
    max_packet: usize,
) -> Vec<(u64, Vec<u8>)> {
    sock.send_to(&req.encode(), server).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65_536];
    let start = Instant::now();
    while (got.len() as u64) < count {
        assert!(start.elapsed() < DEADLINE, "answer to {req:?} incomplete");
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        assert_eq!(from, SocketAddr::V4(server));
        assert!(n <= max_packet, "answer packet of {n} bytes");
        let p = Packet::parse_strict(&buf[..n]).unwrap();
        assert_eq!(p.session(), req.session);
        assert_eq!(p.kind(), PacketKind::Messages);
        for m in p.messages() {
            let m = m.unwrap();
            got.push((m.sequence, m.data.to_vec()));
        }
    }
    got
}

fn expect(want: &[Vec<u8>], first: u64, count: u64) -> Vec<(u64, Vec<u8>)> {
    (first..first + count)
        .map(|s| (s, want[(s - 1) as usize].clone()))
        .collect()
}

#[test]
fn the_rerequest_server_returns_exactly_the_messages_asked_for() {
    let cfg = synth(3, 5_000);
    let want = generated(&cfg);
    let n = want.len() as u64;
    let ex = Exchange::start(ExchangeConfig {
        // Nothing on the lines: only the server has the messages.
        drop_a: 1.0,
        drop_b: 1.0,
        messages_per_second: 0,
        max_packet: 500,
        ..config(unique_lines(), cfg)
    })
    .unwrap();
    assert!(ex.wait_finished(DEADLINE), "the session never ended");
    assert_eq!(ex.session_messages(), n);
    let sock = requester();
    let server = ex.rerequest_addr();
    let req = |sequence, count| Request {
        session: session(),
        sequence,
        count,
    };

    assert_eq!(
        ask(&sock, server, req(5, 10), 10, 500),
        expect(&want, 5, 10)
    );
    // More than a packet holds: several packets, each within max_packet.
    assert_eq!(
        ask(&sock, server, req(100, 3_000), 3_000, 500),
        expect(&want, 100, 3_000)
    );
    // Past the end: only what exists.
    assert_eq!(
        ask(&sock, server, req(n - 2, 10), 3, 500),
        expect(&want, n - 2, 3)
    );
    wait_counters(&ex, "three requests served", |c| c.requests_served == 3);
    let c = ex.stop();
    assert_eq!(c.messages_resent, 10 + 3_000 + 3);
    assert!(c.packets_resent > 3_000 / 40, "{c:?}");
    assert_eq!((c.requests_malformed, c.requests_ignored), (0, 0));
    assert_eq!(c.packets_a, 3, "only the end-of-session packets");
    assert_eq!(c.dropped_a, c.packets);
}

#[test]
fn malformed_and_unanswerable_requests_are_counted_and_ignored() {
    let cfg = synth(4, 500);
    let want = generated(&cfg);
    let n = want.len() as u64;
    let ex = Exchange::start(ExchangeConfig {
        messages_per_second: 0,
        ..config(unique_lines(), cfg)
    })
    .unwrap();
    assert!(ex.wait_finished(DEADLINE), "the session never ended");
    let sock = requester();
    let server = ex.rerequest_addr();
    let good = Request {
        session: session(),
        sequence: 1,
        count: 1,
    };
    let malformed: [&[u8]; 3] = [
        &[],
        &good.encode()[..19],
        &[good.encode(), [0; 20]].concat(),
    ];
    for m in malformed {
        sock.send_to(m, server).unwrap();
    }
    let ignored = [
        Request {
            session: Session::new("OTHER").unwrap(),
            ..good
        },
        Request {
            sequence: 0,
            ..good
        },
        Request { count: 0, ..good },
        Request {
            sequence: n + 1,
            count: 5,
            ..good
        },
    ];
    for r in ignored {
        sock.send_to(&r.encode(), server).unwrap();
    }
    // The server takes datagrams in order: the first answer to arrive is
    // the valid request's, so nothing before it was answered.
    let got = ask(&sock, server, good, 1, 1400);
    assert_eq!(got, expect(&want, 1, 1));
    wait_counters(&ex, "one request served", |c| c.requests_served == 1);
    let c = ex.stop();
    assert_eq!(c.requests_malformed, 3);
    assert_eq!(c.requests_ignored, 4);
    assert_eq!((c.messages_resent, c.packets_resent), (1, 1));
    // Nothing else is waiting on the socket.
    sock.set_nonblocking(true).unwrap();
    assert!(sock.recv(&mut [0u8; 100]).is_err());
}

#[test]
fn bad_configurations_are_refused_with_sentences() {
    let lines = unique_lines();
    let base = || config(lines, synth(1, 10));
    let err = |c: ExchangeConfig| Exchange::start(c).unwrap_err();

    let e = err(ExchangeConfig {
        line_a: "10.1.2.3:26400".parse().unwrap(),
        ..base()
    });
    assert!(matches!(e, ExchangeError::NotMulticast { line: 'A', .. }));
    assert_eq!(
        e.to_string(),
        "line A address 10.1.2.3:26400 is not an IPv4 multicast group (224.0.0.0/4)"
    );
    let e = err(ExchangeConfig {
        line_b: lines.0,
        ..base()
    });
    assert_eq!(
        e.to_string(),
        format!(
            "lines A and B are both {}: give them different groups or ports",
            lines.0
        )
    );
    let e = err(ExchangeConfig {
        drop_b: 1.5,
        ..base()
    });
    assert_eq!(
        e.to_string(),
        "the drop probability of line B is 1.5; it must be between 0 and 1"
    );
    let e = err(ExchangeConfig {
        max_packet: 60,
        ..base()
    });
    assert!(
        e.to_string()
            .starts_with("a maximum packet size of 60 bytes cannot be used: it must be between 72"),
        "{e}"
    );
    // 192.0.2.1 (TEST-NET-1) is no address of this host.
    let e = err(ExchangeConfig {
        interface: Ipv4Addr::new(192, 0, 2, 1),
        ..base()
    });
    assert!(
        e.to_string().starts_with(
            "cannot send multicast from interface 192.0.2.1: bind: Cannot assign requested address"
        ) && e
            .to_string()
            .ends_with("(is it the address of an interface of this host that is up?)"),
        "{e}"
    );
    let e = err(ExchangeConfig {
        rerequest_bind: "192.0.2.1:26410".parse().unwrap(),
        ..base()
    });
    assert!(
        e.to_string()
            .starts_with("cannot bind the re-request server to 192.0.2.1:26410: "),
        "{e}"
    );
    let e = err(ExchangeConfig {
        synth: SynthConfig {
            symbols: 0,
            ..SynthConfig::default()
        },
        ..base()
    });
    assert_eq!(
        e.to_string(),
        "cannot generate the session: a session needs at least one symbol"
    );
}

#[test]
fn heartbeats_fill_idle_time_and_the_session_ends_three_times() {
    let lines = unique_lines();
    let a = join(lines.0);
    a.set_nonblocking(false).unwrap();
    a.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let cfg = synth(5, 50);
    let n = generated(&cfg).len() as u64;
    // Under a second of messages at 200 a second, a heartbeat whenever
    // nothing else went out for 2 ms.
    let ex = Exchange::start(ExchangeConfig {
        messages_per_second: 200,
        heartbeat_interval: Duration::from_millis(2),
        ..config(lines, cfg)
    })
    .unwrap();
    let mut buf = [0u8; 2048];
    let (mut heartbeats, mut ends, mut next) = (0, 0, 1u64);
    let start = Instant::now();
    while ends < 3 {
        assert!(start.elapsed() < DEADLINE, "{ends} ends of session");
        let Ok(len) = a.recv(&mut buf) else { continue };
        let p = Packet::parse_strict(&buf[..len]).unwrap();
        match p.kind() {
            PacketKind::Heartbeat => {
                assert_eq!(p.sequence(), next, "a heartbeat names the next sequence");
                heartbeats += 1;
            }
            PacketKind::EndOfSession => {
                assert_eq!(p.sequence(), n + 1);
                ends += 1;
            }
            PacketKind::Messages => {
                assert_eq!(p.sequence(), next);
                next = p.next_sequence();
            }
        }
    }
    assert_eq!(next, n + 1);
    assert!(heartbeats > 0);
    let c = ex.stop();
    assert_eq!(c.heartbeats, heartbeats);
    assert_eq!(c.packets_a, c.packets + c.heartbeats + 3);
}

// ---------------------------------------------------------------------
// tshark over a capture of a run.

/// One captured frame as we read it.
#[derive(Debug, PartialEq)]
struct Frame {
    sequence: u64,
    count: u16,
    types: Vec<char>,
}

#[test]
fn tshark_decodes_a_capture_of_the_simulator_without_complaint() {
    let Some(version) =
        tshark::version_or_skip("tshark_decodes_a_capture_of_the_simulator_without_complaint")
    else {
        return;
    };
    eprintln!("using {version}");
    let lines = unique_lines();
    let port = lines.0.port();
    let a = join(lines.0);
    let b = join(lines.1);
    let cfg = synth(11, 3_000);
    let n = generated(&cfg).len() as u64;
    let ex = Exchange::start(ExchangeConfig {
        messages_per_second: 100_000,
        drop_b: 0.2,
        ..config(lines, cfg)
    })
    .unwrap();

    let dir = std::env::temp_dir().join(format!("mdbus-exchange-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("simulator.pcap");
    let mut w = CaptureWriter::create(&path).unwrap();
    let mut frames = Vec::new();
    let mut ends = 0;
    let mut buf = [0u8; 2048];
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let start = Instant::now();
    while ends < 6 {
        assert!(start.elapsed() < DEADLINE, "the session never ended");
        let mut idle = true;
        for (sock, group) in [(&a, lines.0), (&b, lines.1)] {
            while let Ok((len, from)) = sock.recv_from(&mut buf) {
                idle = false;
                let SocketAddr::V4(from) = from else {
                    panic!("IPv4 only")
                };
                let t = epoch + start.elapsed().as_nanos() as u64;
                w.write_udp(t, from, group, &buf[..len]).unwrap();
                let p = Packet::parse_strict(&buf[..len]).unwrap();
                if p.kind() == PacketKind::EndOfSession {
                    ends += 1;
                }
                frames.push(Frame {
                    sequence: p.sequence(),
                    count: p.count(),
                    types: p
                        .messages()
                        .map(|m| char::from(m.unwrap().data[0]))
                        .collect(),
                });
            }
        }
        if idle {
            std::thread::yield_now();
        }
    }
    w.finish().unwrap();
    let x = ex.stop();
    assert_eq!(
        frames.len() as u64,
        x.packets_a + x.packets_b,
        "every datagram sent was captured"
    );
    let carried: u64 = frames
        .iter()
        .filter(|f| f.count != 0 && f.count != 0xFFFF)
        .map(|f| u64::from(f.count))
        .sum();
    assert_eq!(carried, 2 * n - x.dropped_messages_b);
    assert_eq!((x.messages_a, x.messages_b), (n, n - x.dropped_messages_b));

    let (_, itch_layers) = tshark::dissect_clean(&path, port);
    let itch_layers = itch_layers as u64;
    assert_eq!(itch_layers, carried, "one ITCH layer per message");

    let fields = tshark::run(
        &path,
        port,
        &[
            "-T",
            "fields",
            "-E",
            "separator=;",
            "-e",
            "moldudp64.session",
            "-e",
            "moldudp64.sequence",
            "-e",
            "moldudp64.count",
            "-e",
            "nasdaq-itch.message_type",
            "-e",
            "ip.checksum.status",
            "-e",
            "udp.checksum.status",
        ],
    );
    let got: Vec<&str> = fields.lines().collect();
    assert_eq!(got.len(), frames.len(), "one line per frame");
    for (i, (line, want)) in got.iter().zip(&frames).enumerate() {
        let f: Vec<&str> = line.split(';').collect();
        assert_eq!(f.len(), 6, "frame {}: {line}", i + 1);
        assert_eq!(f[0], "TEST000001", "frame {}", i + 1);
        let frame = Frame {
            sequence: f[1].parse().unwrap(),
            count: f[2].parse().unwrap(),
            types: f[3]
                .split(',')
                .filter(|t| !t.is_empty())
                .map(|t| t.trim_matches('\'').chars().next().unwrap())
                .collect(),
        };
        assert_eq!(&frame, want, "frame {}", i + 1);
        assert_eq!((f[4], f[5]), ("1", "1"), "frame {}: checksums good", i + 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "tshark agreed on {} frames and {carried} ITCH messages",
        frames.len()
    );
}
