//! After warm-up, the verbs send and receive paths allocate nothing: a
//! counting global allocator watches RC session round trips (credits,
//! reposts, reaping and idle polls included) and UD multicast datagrams.
//! Needs RDMA (the Soft-RoCE lane); elsewhere it prints `SKIPPED`.

mod verbs_support;

use std::time::Duration;

use mdbus::config::VerbsConfig;
use mdbus::transport::datagram::DatagramLink;
use mdbus::transport::verbs::{UdLink, UdLinkConfig, UdPeer};
use verbs_support::{addr_a, addr_b, rdma_or_skip, unique_group, unique_port};

#[global_allocator]
static A: mdbus_testkit::alloc::Counting = mdbus_testkit::alloc::Counting;

use mdbus_testkit::alloc::allocs;

const ROUND_TRIPS: u64 = 20_000;

#[test]
fn session_round_trips_allocate_nothing() {
    session_round_trips("send");
}

#[test]
fn write_session_round_trips_allocate_nothing() {
    session_round_trips("write");
}

#[test]
fn write_imm_session_round_trips_allocate_nothing() {
    session_round_trips("write-imm");
}

/// Round trips in session mode `mode`: none may allocate after warm-up.
fn session_round_trips(mode: &str) {
    if !rdma_or_skip(&format!("session_round_trips_allocate_nothing ({mode})")) {
        return;
    }
    let toml = format!(
        "transport = \"verbs\"\n[verbs]\nsignal_every = 8\nrecv_batch = 4\n\
         [sessions.o]\naddress = \"{}:{}\"\ncapacity = 16\nmax_message = 200\ntimestamps = true\n\
         mode = \"{mode}\"\n",
        addr_a(),
        unique_port()
    );
    let bus = mdbus::Bus::new(mdbus::Config::from_toml_str(&toml, "<test>").unwrap()).unwrap();
    let acceptor = std::thread::spawn({
        let bus = bus.clone();
        move || bus.session_accept("o").unwrap()
    });
    let mut b = bus.session_connect("o").unwrap();
    let mut a = acceptor.join().unwrap();
    let mut seen = 0u64;
    // Sizes alternate between inline and the registered send pool.
    let mut trip = |a: &mut mdbus::Session, b: &mut mdbus::Session, i: u64| {
        let len = if i % 2 == 0 { 16 } else { 200 };
        let mut c = a.claim(len).unwrap();
        c[..8].copy_from_slice(&i.to_le_bytes());
        c.commit().unwrap();
        let mut got = false;
        while !got {
            b.poll(|m| {
                assert_eq!(m.payload()[..8], i.to_le_bytes());
                assert!(m.timestamp().is_some());
                got = true;
            })
            .unwrap();
        }
        let mut c = b.claim(len).unwrap();
        c[..8].copy_from_slice(&i.to_le_bytes());
        c.commit().unwrap();
        let mut got = false;
        while !got {
            a.poll(|m| {
                assert_eq!(m.payload()[..8], i.to_le_bytes());
                got = true;
            })
            .unwrap();
        }
        seen += 1;
    };
    for i in 0..1000 {
        trip(&mut a, &mut b, i);
    }
    let before = allocs();
    for i in 0..ROUND_TRIPS {
        trip(&mut a, &mut b, i);
    }
    let after = allocs();
    assert_eq!(seen, 1000 + ROUND_TRIPS);
    assert_eq!(
        after - before,
        0,
        "allocations in {ROUND_TRIPS} session round trips ({mode})"
    );
}

#[test]
fn datagrams_allocate_nothing() {
    if !rdma_or_skip("datagrams_allocate_nothing") {
        return;
    }
    let group = unique_group();
    let cfg = |iface: &str| UdLinkConfig {
        group: group.parse().unwrap(),
        interface: Some(iface.parse().unwrap()),
        max_datagram: 1024,
        recv_depth: 256,
        send_depth: 64,
        peer_cache: 4,
        join_timeout: Duration::from_secs(10),
        send_only: false,
    };
    let v = VerbsConfig::default();
    let mut tx = UdLink::join("tx", &cfg(&addr_a()), &v).unwrap();
    let mut rx = UdLink::join("rx", &cfg(&addr_b()), &v).unwrap();
    let buf = [7u8; 600];
    let trip = |tx: &mut UdLink, rx: &mut UdLink, i: u64| {
        let len = if i % 2 == 0 { 32 } else { 600 };
        tx.send_group(&buf[..len]).unwrap();
        let mut from = None;
        while from.is_none() {
            rx.poll(8, &mut |p: UdPeer, b: &[u8]| {
                assert_eq!(b.len(), len);
                from = Some(p);
            })
            .unwrap();
        }
        // The reply path, with its cached address handle.
        rx.send_to(from.unwrap(), &buf[..24]).unwrap();
        let me = tx.local();
        let mut got = false;
        while !got {
            tx.poll(8, &mut |p: UdPeer, _b: &[u8]| got |= p != me)
                .unwrap();
        }
    };
    for i in 0..500 {
        trip(&mut tx, &mut rx, i);
    }
    let before = allocs();
    for i in 0..ROUND_TRIPS / 4 {
        trip(&mut tx, &mut rx, i);
    }
    let after = allocs();
    assert_eq!(
        after - before,
        0,
        "allocations in {} datagram round trips",
        ROUND_TRIPS / 4
    );
    assert_eq!(tx.dropped() + rx.dropped(), 0);
}
