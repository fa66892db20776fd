//! Live latency of a UDP stream on loopback, without and then with a flood
//! of retransmit requests from 200 source ports (as a spoofer would send),
//! in one run. One thread publishes a message, services the publisher and
//! polls the subscriber until the message arrives; the time from publish to
//! delivery goes into an HdrHistogram. Another thread floods the
//! publisher's request socket during the second phase.
//!
//! ```sh
//! cargo run --release -p mdbus --example flood_latency
//! ```

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use mdbus::recovery::frame::{encode_control, Kind, DATAGRAM_HEADER_LEN};
use mdbus::{Bus, Config, Event};
use socket2::{Domain, Protocol, Socket, Type};

const MESSAGES: u64 = 50_000;

fn main() {
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 254, 77, 1), 47_000);
    let toml = format!(
        "transport = \"udp\"\n[streams.s]\ngroup = \"{group}\"\ninterface = \"127.0.0.1\"\n\
         ttl = 0\nmax_message = 64\n"
    );
    let bus = Bus::new(Config::from_toml_str(&toml, "flood_latency").unwrap()).unwrap();
    let listener: UdpSocket = {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.set_reuse_address(true).unwrap();
        s.bind(&group.into()).unwrap();
        s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
            .unwrap();
        s.into()
    };
    let mut s = bus.subscriber("s").unwrap();
    let mut p = bus.publisher("s").unwrap();
    p.publish(&[0u8; 8]).unwrap();
    p.service().unwrap();
    let mut b = [0u8; 2048];
    let (_, from) = listener.recv_from(&mut b).unwrap();
    let std::net::SocketAddr::V4(publisher) = from else {
        panic!("IPv4")
    };
    let id = u32::from_le_bytes(b[8..12].try_into().unwrap());
    let epoch = u64::from_le_bytes(b[16..24].try_into().unwrap());
    while s.poll(|_| {}).unwrap() == 0 {
        p.service().unwrap();
    }

    let flood = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flooder = {
        let (flood, stop, sent) = (flood.clone(), stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let socks: Vec<UdpSocket> = (0..200)
                .map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
                .collect();
            let mut req = [0u8; DATAGRAM_HEADER_LEN];
            encode_control(&mut req, Kind::Request, id, epoch, 1, 65_536);
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if flood.load(Ordering::Relaxed) {
                    let _ = socks[i % socks.len()].send_to(&req, publisher);
                    sent.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                } else {
                    std::hint::spin_loop();
                }
            }
        })
    };

    let mut run = |label: &str| {
        let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
        let before = p.recovery_counters().unwrap();
        let phase = Instant::now();
        for i in 0..MESSAGES {
            let t = Instant::now();
            let seq = p.publish(&i.to_le_bytes()).unwrap();
            let mut got = false;
            while !got {
                p.service().unwrap();
                s.poll(|e| match e {
                    Event::Message(m) => got |= m.seq() == seq,
                    e => panic!("{e:?}"),
                })
                .unwrap();
            }
            h.record(t.elapsed().as_nanos() as u64).unwrap();
        }
        let c = p.recovery_counters().unwrap();
        let secs = phase.elapsed().as_secs_f64();
        println!(
            "{label:<22} p50 {:>7} ns  p99 {:>7} ns  p99.9 {:>8} ns  max {:>9} ns  \
             {secs:.2} s  requests read {:>7}  over budget {:>7}  messages resent {:>7}",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max(),
            c.requests_received - before.requests_received,
            c.drops.over_budget - before.drops.over_budget,
            c.retransmitted - before.retransmitted,
        );
    };
    println!(
        "{MESSAGES} messages of 8 bytes per phase, publish to delivery, one thread, loopback UDP"
    );
    run("no flood");
    flood.store(true, Ordering::Relaxed);
    run("flood, 200 ports");
    stop.store(true, Ordering::Relaxed);
    flooder.join().unwrap();
    println!("flood requests sent: {}", sent.load(Ordering::Relaxed));
}
