//! Captures: pcap write/read round trips, pcapng with several interfaces
//! and timestamp resolutions, Linux cooked captures, skipped packets, and
//! files that are not captures or are cut short.

use std::borrow::Cow;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use etherparse::{LinuxSllPacketType, PacketBuilder, VlanId};
use mdbus_feed::pcap::{CaptureError, CaptureFormat, CaptureReader, CaptureStats, CaptureWriter};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, TsResolution};

use crate::common::Scratch;

const FEED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 111), 26_477);
const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 40_000);
/// 2024-01-02 14:30:00.123456789 UTC.
const T0: u64 = 1_704_205_800_123_456_789;

pub fn udp_frame(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [1, 0, 0x5e, 0, 0, 1])
        .ipv4(src.ip().octets(), dst.ip().octets(), 32)
        .udp(src.port(), dst.port())
        .write(&mut f, payload)
        .unwrap();
    f
}

#[test]
fn pcap_round_trip() {
    let dir = Scratch::new("pcap_round_trip");
    let path = dir.path("feed.pcap");
    let payloads: Vec<Vec<u8>> = [0usize, 1, 20, 1472, 9000, 65_507]
        .iter()
        .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
        .collect();
    let mut w = CaptureWriter::create(&path).unwrap();
    for (i, p) in payloads.iter().enumerate() {
        let (src, dst) = if i % 2 == 0 {
            (SERVER, FEED)
        } else {
            (FEED, SERVER)
        };
        w.write_udp(T0 + i as u64 * 1_001, src, dst, p).unwrap();
    }
    assert_eq!(w.packets_written(), payloads.len() as u64);
    assert!(matches!(
        w.write_udp(T0, SERVER, FEED, &vec![0; 65_508]),
        Err(CaptureError::PayloadTooLarge { len: 65_508, .. })
    ));
    assert!(matches!(
        w.write_udp(1 << 63, SERVER, FEED, b"x"),
        Err(CaptureError::TimestampOutOfRange { .. })
    ));
    w.finish().unwrap();

    let mut r = CaptureReader::open(&path).unwrap();
    assert_eq!(r.format(), CaptureFormat::Pcap);
    assert_eq!(r.name(), path.display().to_string());
    for (i, p) in payloads.iter().enumerate() {
        let d = r.next_datagram().unwrap().unwrap();
        assert_eq!(d.timestamp_ns, T0 + i as u64 * 1_001, "nanoseconds survive");
        let (src, dst) = if i % 2 == 0 {
            (SERVER, FEED)
        } else {
            (FEED, SERVER)
        };
        assert_eq!((d.src, d.dst), (src, dst));
        assert_eq!(d.payload, &p[..]);
    }
    assert!(r.next_datagram().unwrap().is_none());
    assert_eq!(
        *r.stats(),
        CaptureStats {
            packets: payloads.len() as u64,
            datagrams: payloads.len() as u64,
            ..CaptureStats::default()
        }
    );
}

#[test]
fn written_frames_carry_valid_checksums() {
    let mut w = CaptureWriter::new("memory", Vec::new()).unwrap();
    w.write_udp(T0, SERVER, FEED, b"checksummed").unwrap();
    let bytes = w.finish().unwrap();
    // 24-byte file header, 16-byte record header, then the frame.
    let frame = &bytes[40..];
    let sliced = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else {
        panic!("not IPv4")
    };
    let header = ip.header().to_header();
    assert_eq!(header.header_checksum, header.calc_header_checksum());
    let Some(etherparse::TransportSlice::Udp(udp)) = sliced.transport else {
        panic!("not UDP")
    };
    let computed = udp
        .to_header()
        .calc_checksum_ipv4(&header, udp.payload())
        .unwrap();
    assert_eq!(udp.checksum(), computed);
    // Multicast destination MAC for 233.54.12.111.
    assert_eq!(&frame[..6], &[0x01, 0x00, 0x5e, 0x36, 0x0c, 0x6f]);
}

#[test]
fn pcapng_with_several_interfaces_and_skipped_packets() {
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    // Interface 0: Ethernet, nanosecond timestamps.
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    })
    .unwrap();
    // Interface 1: Ethernet, default microsecond timestamps.
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    // Interface 2: a link type the reader does not take apart.
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::IEEE802_11,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    let mut epb = |iface: u32, raw_ts: u64, frame: &[u8], orig: usize| {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: iface,
            // pcap-file 2.0 writes the Duration's nanoseconds as the raw
            // timestamp, whatever the interface's units.
            timestamp: Duration::from_nanos(raw_ts),
            original_len: orig as u32,
            data: Cow::Borrowed(frame),
            options: vec![],
        })
        .unwrap();
    };
    let good = udp_frame(SERVER, FEED, b"mold");
    epb(0, T0, &good, good.len());
    epb(1, T0 / 1_000, &good, good.len());

    let mut tcp = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(1, 2, 3, 4)
        .write(&mut tcp, b"tcp")
        .unwrap();
    epb(0, T0, &tcp, tcp.len());

    let mut v6 = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv6([1; 16], [2; 16], 64)
        .udp(1, 2)
        .write(&mut v6, b"v6")
        .unwrap();
    epb(0, T0, &v6, v6.len());

    let mut fragment = good.clone();
    fragment[14 + 6] |= 0x20; // IPv4 "more fragments" flag
    epb(0, T0, &fragment, fragment.len());

    // Cut short by a snapshot length: the UDP header is incomplete.
    epb(0, T0, &good[..38], good.len());

    epb(2, T0, &good, good.len());

    let mut vlan = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .single_vlan(VlanId::try_new(100).unwrap())
        .ipv4(SERVER.ip().octets(), FEED.ip().octets(), 64)
        .udp(SERVER.port(), FEED.port())
        .write(&mut vlan, b"tagged")
        .unwrap();
    epb(1, 5, &vlan, vlan.len());

    w.write_pcapng_block(SimplePacketBlock {
        original_len: good.len() as u32,
        data: Cow::Borrowed(&good),
    })
    .unwrap();
    let bytes = w.into_inner();

    let mut r = CaptureReader::new("multi.pcapng", &bytes[..]).unwrap();
    assert_eq!(r.format(), CaptureFormat::PcapNg);
    let d = r.next_datagram().unwrap().unwrap();
    assert_eq!(
        (d.timestamp_ns, d.src, d.dst, d.payload),
        (T0, SERVER, FEED, &b"mold"[..])
    );
    let d = r.next_datagram().unwrap().unwrap();
    assert_eq!(d.timestamp_ns, T0 / 1_000 * 1_000, "microsecond interface");
    let d = r.next_datagram().unwrap().unwrap();
    assert_eq!((d.timestamp_ns, d.payload), (5_000, &b"tagged"[..]));
    let d = r.next_datagram().unwrap().unwrap();
    assert_eq!(
        (d.timestamp_ns, d.payload),
        (0, &b"mold"[..]),
        "simple packet block"
    );
    assert!(r.next_datagram().unwrap().is_none());
    assert_eq!(
        *r.stats(),
        CaptureStats {
            packets: 9,
            datagrams: 4,
            ipv6: 1,
            not_udp: 1,
            fragments: 1,
            truncated: 1,
            unsupported_link: 1,
            ..CaptureStats::default()
        }
    );
    assert_eq!(r.stats().skipped(), 5);
}

pub fn classic_pcap(datalink: DataLink, frames: &[Vec<u8>]) -> Vec<u8> {
    let header = PcapHeader {
        datalink,
        ts_resolution: TsResolution::MicroSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            Duration::new(1_700_000_000 + i as u64, 250_000),
            f.len() as u32,
            f,
        ))
        .unwrap();
    }
    w.into_writer()
}

#[test]
fn linux_cooked_and_raw_ip_captures() {
    let mut sll = Vec::new();
    PacketBuilder::linux_sll(LinuxSllPacketType::MULTICAST, 6, [2, 0, 0, 0, 0, 9, 0, 0])
        .ipv4(SERVER.ip().octets(), FEED.ip().octets(), 64)
        .udp(SERVER.port(), FEED.port())
        .write(&mut sll, b"cooked")
        .unwrap();
    let bytes = classic_pcap(DataLink::LINUX_SLL, &[sll]);
    let mut r = CaptureReader::new("sll.pcap", &bytes[..]).unwrap();
    let d = r.next_datagram().unwrap().unwrap();
    // Written as 250,000 ns into a microsecond file: 250 us.
    assert_eq!(d.timestamp_ns, 1_700_000_000_000_000_000 + 250_000);
    assert_eq!((d.src, d.dst, d.payload), (SERVER, FEED, &b"cooked"[..]));

    let mut raw = Vec::new();
    PacketBuilder::ipv4(SERVER.ip().octets(), FEED.ip().octets(), 64)
        .udp(SERVER.port(), FEED.port())
        .write(&mut raw, b"raw")
        .unwrap();
    let bytes = classic_pcap(DataLink::RAW, &[raw]);
    let mut r = CaptureReader::new("raw.pcap", &bytes[..]).unwrap();
    assert_eq!(r.next_datagram().unwrap().unwrap().payload, b"raw");
}

#[test]
fn snapshot_length_shorter_than_the_packet() {
    // A capture taken with a small snapshot length: records keep 40 of the
    // frame's bytes and the original length says how long it was.
    let frame = udp_frame(SERVER, FEED, &[7; 100]);
    let header = PcapHeader {
        snaplen: 40,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    w.write_raw_packet(&pcap_file::pcap::RawPcapPacket {
        ts_sec: 1,
        ts_frac: 2,
        incl_len: 40,
        orig_len: frame.len() as u32,
        data: Cow::Borrowed(&frame[..40]),
    })
    .unwrap();
    let bytes = w.into_writer();
    let mut r = CaptureReader::new("snap.pcap", &bytes[..]).unwrap();
    assert!(r.next_datagram().unwrap().is_none());
    assert_eq!(r.stats().truncated, 1);
}

#[test]
fn files_that_are_not_captures() {
    let dir = Scratch::new("not_captures");
    let text = dir.path("notes.txt");
    std::fs::write(&text, "hello, not a capture").unwrap();
    let e = CaptureReader::open(&text).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, CaptureError::NotACapture { .. }));
    assert!(msg.contains("notes.txt"), "{msg}");
    assert!(msg.contains("68 65 6c 6c (\"hell\")"), "{msg}");

    let empty = dir.path("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let msg = CaptureReader::open(&empty).unwrap_err().to_string();
    assert!(
        msg.contains("empty.pcap") && msg.contains("the file is empty"),
        "{msg}"
    );

    let missing = dir.path("missing.pcap");
    let e = CaptureReader::open(&missing).unwrap_err();
    assert!(matches!(e, CaptureError::Open { .. }));
    assert!(e.to_string().contains("missing.pcap"), "{e}");

    let wifi = classic_pcap(DataLink::IEEE802_11, &[]);
    let e = CaptureReader::new("wifi.pcap", &wifi[..]).unwrap_err();
    assert!(
        matches!(e, CaptureError::UnsupportedLinkType { link_type: 105, .. }),
        "{e}"
    );
}

#[test]
fn truncated_captures() {
    let frames: Vec<Vec<u8>> = (0..3).map(|i| udp_frame(SERVER, FEED, &[i; 64])).collect();
    let bytes = classic_pcap(DataLink::ETHERNET, &frames);

    // Inside the file header.
    let e = CaptureReader::new("head.pcap", &bytes[..10]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "head.pcap is truncated: the file ends inside the 24-byte pcap file header"
    );

    // Inside the last record: two datagrams come out, then the error.
    let cut = &bytes[..bytes.len() - 10];
    let mut r = CaptureReader::new("cut.pcap", cut).unwrap();
    assert!(r.next_datagram().unwrap().is_some());
    assert!(r.next_datagram().unwrap().is_some());
    let e = r.next_datagram().unwrap_err();
    assert_eq!(
        e.to_string(),
        "cut.pcap is truncated: the file ends inside record 3 (after 2 complete records)"
    );

    // pcapng cut inside a block.
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    w.write_pcapng_block(EnhancedPacketBlock {
        interface_id: 0,
        timestamp: Duration::from_nanos(1),
        original_len: frames[0].len() as u32,
        data: Cow::Borrowed(&frames[0]),
        options: vec![],
    })
    .unwrap();
    let ng = w.into_inner();
    let mut r = CaptureReader::new("cut.pcapng", &ng[..ng.len() - 4]).unwrap();
    let e = r.next_datagram().unwrap_err();
    assert!(matches!(e, CaptureError::Truncated { .. }), "{e}");
    assert!(e.to_string().starts_with("cut.pcapng is truncated"), "{e}");
}
