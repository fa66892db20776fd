//! Forged datagrams and spoofed request floods against a UDP stream on
//! loopback multicast. The forger learns the stream id, epoch and
//! sequence numbers by listening to the group (as any host on the network
//! can) and sends from its own sockets: another port on the publisher's
//! address, and the publisher's own port on another address (127.0.0.2).
//! Every genuine message must arrive exactly once, in order, with no gap,
//! restart or end, and every forged datagram must be counted as dropped.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

use mdbus::recovery::frame::{encode_control, Kind, DATAGRAM_HEADER_LEN};
use mdbus::{Bus, Config, Event};
use socket2::{Domain, Protocol, Socket, Type};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A group and port of its own for each test (a base from the process id).
fn group() -> SocketAddrV4 {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    SocketAddrV4::new(
        Ipv4Addr::new(239, 254, (1 + pid % 250) as u8, (1 + n) as u8),
        (40_000 + (pid % 1_000) * 16 + n) as u16,
    )
}

fn bus(group: SocketAddrV4, extra: &str) -> Bus {
    let toml = format!(
        "transport = \"udp\"\n[streams.s]\ngroup = \"{group}\"\ninterface = \"127.0.0.1\"\n\
         ttl = 0\nmax_message = 64\nheartbeat_interval = \"5ms\"\n\
         retransmit_timeout = \"2ms\"\n{extra}"
    );
    Bus::new(Config::from_toml_str(&toml, "hostile.toml").unwrap()).unwrap()
}

/// A socket that hears the group, as a host on the network does.
fn listener(group: SocketAddrV4) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&group.into()).unwrap();
    s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
        .unwrap();
    s.set_nonblocking(true).unwrap();
    s.into()
}

/// A socket that sends to the group from `from`.
fn sender(from: SocketAddrV4) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.bind(&from.into()).unwrap();
    s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
    s.set_multicast_ttl_v4(0).unwrap();
    s.set_multicast_loop_v4(true).unwrap();
    s.into()
}

/// The first genuine datagram the listener hears: its source, stream id and
/// epoch.
fn sniff(l: &UdpSocket) -> Option<(SocketAddrV4, u32, u64)> {
    let mut b = [0u8; 2048];
    let (n, from) = l.recv_from(&mut b).ok()?;
    if n < DATAGRAM_HEADER_LEN {
        return None;
    }
    let std::net::SocketAddr::V4(from) = from else {
        return None;
    };
    let id = u32::from_le_bytes(b[8..12].try_into().unwrap());
    let epoch = u64::from_le_bytes(b[16..24].try_into().unwrap());
    Some((from, id, epoch))
}

fn control(kind: Kind, id: u32, epoch: u64, seq: u64, arg: u64) -> [u8; DATAGRAM_HEADER_LEN] {
    let mut b = [0u8; DATAGRAM_HEADER_LEN];
    encode_control(&mut b, kind, id, epoch, seq, arg);
    b
}

/// Publishes messages `published + 1..=total` (each its sequence number)
/// calling `attack` after every 100th, and checks that the subscriber
/// delivers every message from 1 once, in order; returns its events other
/// than messages.
fn run(
    published: u64,
    total: u64,
    publisher: &mut mdbus::Publisher,
    subscriber: &mut mdbus::Subscriber,
    mut attack: impl FnMut(u64),
) -> Vec<String> {
    let mut next = 1u64;
    let mut other = Vec::new();
    let mut seq = published;
    for _ in 0..50_000_000u64 {
        if seq < total {
            seq += 1;
            publisher.publish(&seq.to_le_bytes()).unwrap();
            if seq % 100 == 0 {
                attack(seq);
            }
        }
        publisher.service().unwrap();
        subscriber
            .poll(|e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next, "out of order");
                    assert_eq!(m.payload(), next.to_le_bytes());
                    next += 1;
                }
                e => other.push(format!("{e:?}")),
            })
            .unwrap();
        if next > total {
            break;
        }
    }
    assert_eq!(next - 1, total, "delivered; other events: {other:?}");
    other
}

/// Polls `subscriber` until its counters satisfy `done` (bounded), adding
/// events other than messages to `other`; returns the counters. A forgery
/// sent after the last message may still be queued when `run` returns: a
/// poll after an empty one reads a single datagram.
fn settle(
    subscriber: &mut mdbus::Subscriber,
    other: &mut Vec<String>,
    done: impl Fn(&mdbus::recovery::Counters) -> bool,
) -> mdbus::recovery::Counters {
    for _ in 0..10_000_000u64 {
        let c = subscriber.recovery_counters().unwrap();
        if done(&c) {
            return c;
        }
        subscriber.poll(|e| other.push(format!("{e:?}"))).unwrap();
    }
    subscriber.recovery_counters().unwrap()
}

#[test]
fn forged_heartbeats_epochs_jumps_and_notices_from_other_sources_change_nothing() {
    let g = group();
    let b = bus(g, "");
    let l = listener(g);
    let mut s = b.subscriber("s").unwrap();
    let mut p = b.publisher("s").unwrap();
    p.publish(&1u64.to_le_bytes()).unwrap();
    p.service().unwrap();
    let (genuine, id, epoch) = (0..10_000_000)
        .find_map(|_| sniff(&l))
        .expect("heard the publisher");
    let other_port = sender(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    let same_port = sender(SocketAddrV4::new(
        Ipv4Addr::new(127, 0, 0, 2),
        genuine.port(),
    ));
    let mut forged = 0u64;
    let total = 20_000u64;
    let mut other = run(1, total, &mut p, &mut s, |seq| {
        forged += 1;
        let d = match forged % 6 {
            0 => control(Kind::Heartbeat, id, u64::MAX, seq, 1),
            1 => control(Kind::Heartbeat, id, epoch, 1 << 62, 1),
            2 => control(Kind::NotAvailable, id, epoch, seq - 50, 50),
            3 => control(Kind::EndOfStream, id, epoch, seq, 1),
            4 => control(Kind::Heartbeat, id, epoch, seq + 10, 1),
            _ => control(Kind::EndOfStream, id, u64::MAX, 1 << 40, 1),
        };
        let sock = if forged % 2 == 0 {
            &other_port
        } else {
            &same_port
        };
        sock.send_to(&d, g).unwrap();
    });
    assert_eq!(forged, total / 100);
    let c = settle(&mut s, &mut other, |c| c.drops.foreign_source >= forged);
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(c.drops.foreign_source, forged, "{c:?}");
    assert_eq!((c.gap_events, c.restarts, c.unrecoverable), (0, 0, 0));
}

#[test]
fn with_a_configured_source_a_forger_heard_first_is_never_followed() {
    let g = group();
    let port = g.port() + 5_000;
    let b = bus(g, &format!("source = \"127.0.0.1:{port}\"\n"));
    let mut s = b.subscriber("s").unwrap();
    // Before the publisher exists: data from another port, then from the
    // configured port on another address.
    let id = mdbus::transport::datagram_stream::stream_id("s");
    let forgers = [
        sender(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
        sender(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), port)),
    ];
    for (i, f) in forgers.iter().enumerate() {
        for seq in [1_000_000u64, 1_000_001, 1_000_002, 1_000_003] {
            f.send_to(&control(Kind::Heartbeat, id, 7 + i as u64, seq, 1), g)
                .unwrap();
        }
    }
    let mut p = b.publisher("s").unwrap();
    let other = run(0, 5_000, &mut p, &mut s, |_| {});
    assert!(other.is_empty(), "{other:?}");
    let c = s.recovery_counters().unwrap();
    assert_eq!(c.drops.foreign_source, 8, "{c:?}");
}

#[test]
fn a_spoofed_request_flood_is_held_to_the_budget_and_live_data_flows() {
    let g = group();
    let b = bus(
        g,
        "retransmit_burst = 16\nretransmit_rate = 1\nretransmit_global_burst = 64\n\
         retransmit_global_rate = 1\n",
    );
    let l = listener(g);
    let mut s = b.subscriber("s").unwrap();
    let mut p = b.publisher("s").unwrap();
    for seq in 1..=1_000u64 {
        p.publish(&seq.to_le_bytes()).unwrap();
    }
    p.service().unwrap();
    let (genuine, id, epoch) = (0..10_000_000)
        .find_map(|_| sniff(&l))
        .expect("heard the publisher");
    // 200 requesters (200 source ports), each asking for everything 5
    // times.
    let flooders: Vec<UdpSocket> = (0..200)
        .map(|_| {
            let u = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            u.set_nonblocking(true).unwrap();
            u
        })
        .collect();
    let req = control(Kind::Request, id, epoch, 1, 1_000);
    let started = std::time::Instant::now();
    let mut requests = 0u64;
    let other = {
        let mut seq_base = 1_000u64;
        let mut next = 1u64;
        let mut other = Vec::new();
        let total = 20_000u64;
        for round in 0..50_000_000u64 {
            if seq_base < total {
                seq_base += 1;
                p.publish(&seq_base.to_le_bytes()).unwrap();
            }
            if round < 1_000 {
                flooders[round as usize % 200]
                    .send_to(&req, genuine)
                    .unwrap();
                requests += 1;
            }
            p.service().unwrap();
            s.poll(|e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next);
                    next += 1;
                }
                e => other.push(format!("{e:?}")),
            })
            .unwrap();
            if next > total && round >= 1_000 {
                break;
            }
        }
        assert_eq!(next - 1, total);
        other
    };
    // Let the publisher read what is still queued.
    for _ in 0..100 {
        p.service().unwrap();
    }
    let secs = started.elapsed().as_secs() + 1;
    assert!(other.is_empty(), "{other:?}");
    let c = p.recovery_counters().unwrap();
    // Each requester's own budget and the shared one: at most the shared
    // burst plus its refill over the run.
    assert!(
        c.retransmitted <= 64 + secs,
        "{} resent in {secs} s: {c:?}",
        c.retransmitted
    );
    assert_eq!(c.requests_received, requests, "{c:?}");
    assert_eq!(c.drops.over_budget + c.requests_served, requests, "{c:?}");
    // What reached the flooders' ports was resent to them; with the
    // default `repair = "auto"` the rest went to the group (a second
    // requester made the range look shared), within the same budget.
    let mut got = 0u64;
    let mut buf = [0u8; 2048];
    for f in &flooders {
        while let Ok(n) = f.recv(&mut buf) {
            if n > DATAGRAM_HEADER_LEN && buf[5] == Kind::Retransmit as u8 {
                got += u16::from_le_bytes([buf[6], buf[7]]) as u64;
            }
        }
    }
    assert!(got > 0 && got <= c.retransmitted, "{got}: {c:?}");
    if got < c.retransmitted {
        assert!(c.repairs_to_group > 0, "{got}: {c:?}");
    }
}

/// A key file of this test's own, mode `mode`.
fn key_file(name: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("mdbus-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(
        &p,
        "5f1d2c3b4a5968778695a4b3c2d1e0f000112233445566778899aabbccddeeff\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

#[test]
fn with_a_key_unsealed_and_missealed_datagrams_are_dropped() {
    let g = group();
    let key = key_file("stream.key", 0o600);
    let b = bus(g, &format!("key_file = \"{}\"\n", key.display()));
    let l = listener(g);
    let mut s = b.subscriber("s").unwrap();
    let mut p = b.publisher("s").unwrap();
    p.publish(&1u64.to_le_bytes()).unwrap();
    p.service().unwrap();
    let (_, id, epoch) = (0..10_000_000)
        .find_map(|_| sniff(&l))
        .expect("heard the publisher");
    let forger = sender(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    let mut sent = 0u64;
    let mut other = run(1, 5_000, &mut p, &mut s, |seq| {
        let mut d = control(Kind::Heartbeat, id, epoch, seq + 1, 1).to_vec();
        if seq % 200 == 0 {
            // The MAC flag and 16 bytes of guesswork.
            d[5] |= 0x80;
            d.extend_from_slice(&[0xAB; 16]);
            let len = d.len() as u32;
            d[12..16].copy_from_slice(&len.to_le_bytes());
        }
        forger.send_to(&d, g).unwrap();
        sent += 1;
    });
    let c = settle(&mut s, &mut other, |c| {
        c.drops.bad_mac + c.drops.unauthenticated >= sent
    });
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(c.drops.bad_mac, sent / 2, "{c:?}");
    assert_eq!(c.drops.unauthenticated, sent - sent / 2, "{c:?}");
    // A subscriber with the key refuses a publisher without it.
    let g2 = group();
    let keyed = bus(g2, &format!("key_file = \"{}\"\n", key.display()));
    let plain = bus(g2, "");
    let mut s = keyed.subscriber("s").unwrap();
    let mut p = plain.publisher("s").unwrap();
    let mut got = 0u64;
    for i in 1..=100u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    p.flush().unwrap();
    for _ in 0..1_000_000 {
        p.service().unwrap();
        s.poll(|_| got += 1).unwrap();
        if s.recovery_counters().unwrap().drops.unauthenticated >= 1 {
            break;
        }
    }
    assert_eq!(got, 0);
    assert!(s.recovery_counters().unwrap().drops.unauthenticated >= 1);
}

#[test]
fn a_key_file_others_can_read_is_refused_by_name() {
    let g = group();
    let key = key_file("open.key", 0o644);
    let b = bus(g, &format!("key_file = \"{}\"\n", key.display()));
    for e in [
        b.publisher("s").unwrap_err(),
        b.subscriber("s").unwrap_err(),
    ] {
        let text = e.to_string();
        assert!(text.contains(&key.display().to_string()), "{text}");
        assert!(text.contains("0600"), "{text}");
        assert!(text.contains("streams.s.key_file"), "{text}");
    }
}

#[test]
fn a_run_of_forgeries_from_another_port_on_an_idle_stream_displaces_nothing() {
    let g = group();
    let b = bus(g, "");
    let l = listener(g);
    let mut s = b.subscriber("s").unwrap();
    let mut p = b.publisher("s").unwrap();
    let other = run(0, 100, &mut p, &mut s, |_| {});
    assert!(other.is_empty(), "{other:?}");
    let (_, id, epoch) = (0..10_000_000)
        .find_map(|_| sniff(&l))
        .expect("heard the publisher");
    // Ten in a row, all agreeing: a restart with a later epoch, as a
    // genuine restarted publisher would announce itself.
    let forger = sender(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    for _ in 0..10 {
        forger
            .send_to(&control(Kind::Heartbeat, id, epoch + 1, 0, 0), g)
            .unwrap();
    }
    let mut more = Vec::new();
    let mut next = 101u64;
    for seq in 101..=200u64 {
        p.publish(&seq.to_le_bytes()).unwrap();
    }
    for _ in 0..50_000_000u64 {
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.seq(), next);
                next += 1;
            }
            e => more.push(format!("{e:?}")),
        })
        .unwrap();
        if next > 200 {
            break;
        }
    }
    assert_eq!(next, 201, "{more:?}");
    assert!(more.is_empty(), "{more:?}");
    let c = s.recovery_counters().unwrap();
    assert_eq!((c.drops.foreign_source, c.restarts), (10, 0), "{c:?}");
}
