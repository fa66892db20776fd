//! The MoldUDP64 pass-through: a capture of two lossy lines goes through
//! the relay, whose pass-through output (loopback multicast) carries the
//! arbitrated session, contiguous, with the upstream session name and
//! sequence numbers; tshark's MoldUDP64 and ITCH dissectors decode it
//! without a malformed packet (skipped, saying so, without tshark).

mod relay_common;
#[path = "../../../feed/tests/support/tshark.rs"]
mod tshark;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use mdbus_feed::moldudp64::{Packet, PacketKind, Session};
use mdbus_feed::pcap::CaptureWriter;
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
use mdbus_relay::{Relay, RelayConfig, RunOptions};
use relay_common::{Scratch, ROUTING};
use socket2::{Domain, Protocol, Socket, Type};

const DEADLINE: Duration = Duration::from_secs(120);

fn join(group: SocketAddrV4) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&group.into()).unwrap();
    s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
        .unwrap();
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s.into()
}

#[test]
fn passthrough_carries_the_arbitrated_session() {
    let scratch = Scratch::new("pt");
    let port = 32_000 + (std::process::id() % 20_000) as u16;
    let out_group = SocketAddrV4::new(Ipv4Addr::new(239, 192, 79, 1), port);
    let a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 1), 26400);
    let b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 2), 26400);

    // Input: a day on two lines, each losing packets the other has.
    let capture = scratch.path("in.pcap");
    let session = Session::new("PASS000001").unwrap();
    let mut packer = MoldPacker::new(
        Generator::new(&SynthConfig {
            seed: 9,
            symbols: 20,
            order_messages: 4_000,
            ..SynthConfig::default()
        })
        .unwrap(),
        session,
        1,
        1400,
    )
    .unwrap()
    .with_window(1_000_000);
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
    let mut w = CaptureWriter::create(&capture).unwrap();
    let mut sent = Vec::new();
    let (mut i, mut ts) = (0usize, 1_000_000_000u64);
    while let Some(p) = packer.next_packet() {
        for blk in Packet::parse(p.bytes).unwrap().messages() {
            let blk = blk.unwrap();
            sent.push((blk.sequence, blk.data.to_vec()));
        }
        if i % 4 != 1 {
            ts += 1000;
            w.write_udp(ts, src, a, p.bytes).unwrap();
        }
        if i % 3 != 2 || i % 4 == 1 {
            ts += 1000;
            w.write_udp(ts, src, b, p.bytes).unwrap();
        }
        i += 1;
    }
    w.write_udp(ts + 1000, src, a, &packer.end_of_session())
        .unwrap();
    w.finish().unwrap();

    let text = format!(
        "[input]\nkind = \"pcap\"\npath = \"{}\"\nline_a = \"{a}\"\nline_b = \"{b}\"\nstart_sequence = 1\n\
         [passthrough]\nenabled = true\ngroup = \"{out_group}\"\ninterface = \"127.0.0.1\"\nttl = 0\nmax_packet = 1000\n\
         [counters]\npath = \"\"\n[thread]\npin = false\n{}{ROUTING}",
        capture.display(),
        scratch.shm_bus(1 << 15),
    );
    let cfg = RelayConfig::from_toml_str(&text, "<test>").unwrap();
    let rx = join(out_group);
    let relay = Relay::new(cfg, "<test>").unwrap();
    let runner = std::thread::spawn(move || {
        relay
            .run(&RunOptions {
                log: false,
                ..RunOptions::default()
            })
            .unwrap()
    });

    // Receive until the end-of-session packet.
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 65536];
    let until = Instant::now() + DEADLINE;
    loop {
        assert!(
            Instant::now() < until,
            "no end of session within {DEADLINE:?}"
        );
        let Ok(n) = rx.recv(&mut buf) else { continue };
        let d = buf[..n].to_vec();
        let end = Packet::parse(&d).is_ok_and(|p| p.kind() == PacketKind::EndOfSession);
        datagrams.push(d);
        if end {
            break;
        }
    }
    let summary = runner.join().unwrap();
    assert_eq!(summary.counters.local.messages_in, sent.len() as u64);

    // Contiguous, complete, byte for byte, within the packet size.
    let mut got = Vec::new();
    let mut next = 1u64;
    for d in &datagrams {
        assert!(d.len() <= 1000);
        let p = Packet::parse_strict(d).unwrap();
        assert_eq!(p.session(), session);
        assert_eq!(p.sequence(), next, "packets follow each other without gaps");
        for blk in p.messages() {
            let blk = blk.unwrap();
            got.push((blk.sequence, blk.data.to_vec()));
        }
        next = p.next_sequence();
    }
    assert_eq!(got, sent);
    assert_eq!(
        summary.counters.local.passthrough_packets,
        datagrams.len() as u64
    );

    // tshark decodes the pass-through without complaint.
    if tshark::version_or_skip("the tshark part of passthrough_carries_the_arbitrated_session")
        .is_none()
    {
        return;
    }
    let pcap = scratch.path("out.pcap");
    let mut w = CaptureWriter::create(&pcap).unwrap();
    let relay_addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40_000);
    for (k, d) in datagrams.iter().enumerate() {
        w.write_udp(1_000_000_000 + k as u64 * 1000, relay_addr, out_group, d)
            .unwrap();
    }
    w.finish().unwrap();
    // Nothing malformed, and an ITCH layer under every relayed message.
    let (_, itch_layers) = tshark::dissect_clean(&pcap, port);
    assert_eq!(
        itch_layers,
        sent.len(),
        "one ITCH layer per relayed message"
    );
}
