//! The per-message paths allocate nothing once their buffers exist:
//! decoding and encoding ITCH, walking and building MoldUDP64 packets,
//! reading BinaryFILE, generating and packing a synthetic session, and
//! reading and writing captures. Counted per thread, so tests running in
//! parallel do not disturb the counts.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};

use allocation_counter::measure;
use mdbus_feed::binaryfile::{BinaryFileReader, BinaryFileWriter};
use mdbus_feed::itch::{self, Directory, MAX_MESSAGE_LEN};
use mdbus_feed::moldudp64::{Packet, PacketBuilder, Session};
use mdbus_feed::pcap::{CaptureReader, CaptureWriter};
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};

use crate::common::{encode, one_of_each};

fn session_bytes(cfg: &SynthConfig) -> Vec<Vec<u8>> {
    Generator::new(cfg)
        .unwrap()
        .map(|m| m.bytes().to_vec())
        .collect()
}

#[test]
fn the_counting_allocator_is_installed() {
    let info = measure(|| drop(std::hint::black_box(vec![1u8; 10])));
    assert_eq!(info.count_total, 1);
}

#[test]
fn itch_and_moldudp64_allocate_nothing_per_message() {
    let messages: Vec<Vec<u8>> = one_of_each().iter().map(encode).collect();
    let mut dir = Directory::new();
    let mut packet_buf = vec![0u8; 1472];
    let session = Session::new("ALLOC").unwrap();
    let info = measure(|| {
        for l in 0..=u16::MAX {
            std::hint::black_box(dir.get(l));
        }
        for _ in 0..1_000 {
            let mut b = PacketBuilder::new(&mut packet_buf, session, 1).unwrap();
            for m in &messages {
                let decoded = itch::decode(m).unwrap();
                dir.apply(&decoded);
                let owned = decoded.decode();
                let mut buf = [0u8; MAX_MESSAGE_LEN];
                let n = owned.encode(&mut buf).unwrap();
                assert_eq!(&buf[..n], &m[..]);
                b.push(&buf[..n]).unwrap();
            }
            let p = Packet::parse_strict(b.finish()).unwrap();
            for block in p.messages() {
                let m = itch::decode(block.unwrap().data).unwrap();
                std::hint::black_box(m.timestamp());
            }
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn binaryfile_reading_allocates_nothing_per_message() {
    let cfg = SynthConfig {
        order_messages: 20_000,
        ..SynthConfig::default()
    };
    let mut w = BinaryFileWriter::new(Vec::new());
    for m in session_bytes(&cfg) {
        w.write_message(&m).unwrap();
    }
    let file = w.into_inner();
    let mut r = BinaryFileReader::new(&file[..]);
    let mut n = 0;
    let info = measure(|| {
        while let Some(m) = r.next_message().unwrap() {
            itch::decode(m).unwrap();
            n += 1;
        }
    });
    assert!(n > 20_000);
    assert_eq!(info.count_total, 0, "{info:?}");

    let mut w = BinaryFileWriter::new(io::sink());
    let info = measure(|| {
        for m in &file[2..38] {
            w.write_message(std::slice::from_ref(m)).unwrap();
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn generating_and_packing_allocate_nothing_per_message() {
    let cfg = SynthConfig {
        order_messages: 50_000,
        ..SynthConfig::default()
    };
    let mut gen = Generator::new(&cfg).unwrap();
    let mut n = 0u64;
    let info = measure(|| {
        for m in gen.by_ref() {
            std::hint::black_box(m.bytes());
            n += 1;
        }
    });
    assert!(n > 50_000);
    assert_eq!(info.count_total, 0, "{info:?}");

    let mut packer = MoldPacker::new(
        Generator::new(&cfg).unwrap(),
        Session::new("ALLOC").unwrap(),
        1,
        1472,
    )
    .unwrap();
    let info = measure(|| {
        while let Some(p) = packer.next_packet() {
            std::hint::black_box(p.bytes);
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn captures_allocate_nothing_per_packet() {
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1);
    let dst = SocketAddrV4::new(Ipv4Addr::new(233, 1, 2, 3), 2);
    let payload = [7u8; 1200];

    let mut w = CaptureWriter::new("sink", io::sink()).unwrap();
    let info = measure(|| {
        for i in 0..1_000 {
            w.write_udp(1_000_000_000 + i, src, dst, &payload).unwrap();
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");

    let mut w = CaptureWriter::new("memory", Vec::new()).unwrap();
    for i in 0..1_000 {
        w.write_udp(1_000_000_000 + i, src, dst, &payload).unwrap();
    }
    let file = w.finish().unwrap();
    let mut r = CaptureReader::new("memory", &file[..]).unwrap();
    let mut n = 0;
    let info = measure(|| {
        while let Some(d) = r.next_datagram().unwrap() {
            assert_eq!(d.payload.len(), 1200);
            n += 1;
        }
    });
    assert_eq!(n, 1_000);
    assert_eq!(info.count_total, 0, "{info:?}");
}
