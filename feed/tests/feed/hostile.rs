//! Hostile files: a capture with forged, overflowing, lying and
//! unparseable packets among a genuine A/B feed comes out as exactly the
//! genuine messages, once each, in order, with every skipped thing
//! counted by reason; formats are told apart from a pipe without
//! consuming it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::net::UnixStream;

use etherparse::PacketBuilder as Frame;
use mdbus_feed::arbiter::{ArbiterConfig, ArbiterSink, CaptureSequencer, Line, MalformedCounters};
use mdbus_feed::binaryfile::BinaryFileWriter;
use mdbus_feed::mdcap::{MdcapReader, MdcapWriter};
use mdbus_feed::moldudp64::{self, PacketBuilder, Request, Session};
use mdbus_feed::pcap::{CaptureReader, CaptureStats};
use mdbus_feed::sniff::{sniff, Format, PeekReader, Sniffed};
use pcap_file::DataLink;

use crate::pcap::{classic_pcap, udp_frame};

const EXCHANGE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 7), 5_000);
const LINE_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 1), 26_477);
const LINE_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 2), 26_478);

fn genuine() -> Session {
    Session::new("HOSTILE01").unwrap()
}

fn body(seq: u64) -> Vec<u8> {
    format!("genuine message {seq}").into_bytes()
}

fn mold(session: Session, first: u64, count: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 1500];
    let mut b = PacketBuilder::new(&mut buf, session, first).unwrap();
    for s in first..first + count {
        b.push(&body(s)).unwrap();
    }
    b.finish().to_vec()
}

#[derive(Default)]
struct Out {
    messages: Vec<(u64, Vec<u8>)>,
    unrecoverable: Vec<(u64, u64)>,
}

impl ArbiterSink for Out {
    fn message(&mut self, sequence: u64, _line: Line, data: &[u8]) {
        self.messages.push((sequence, data.to_vec()));
    }
    fn request(&mut self, _request: &Request) {}
    fn unrecoverable(&mut self, first: u64, count: u64) {
        self.unrecoverable.push((first, count));
    }
}

/// The hostile capture: 40 genuine packets of 3 messages on both lines,
/// with one of each kind of trouble among them.
fn hostile_capture() -> Vec<u8> {
    let mut frames = Vec::new();
    let tcp = {
        let mut f = Vec::new();
        Frame::ethernet2([2; 6], [4; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1, 2, 3, 4)
            .write(&mut f, b"not a datagram")
            .unwrap();
        f
    };
    let v6 = {
        let mut f = Vec::new();
        Frame::ethernet2([2; 6], [4; 6])
            .ipv6([1; 16], [2; 16], 64)
            .udp(1, 2)
            .write(&mut f, &mold(genuine(), 1, 3))
            .unwrap();
        f
    };
    let mut arp = udp_frame(EXCHANGE, LINE_A, b"x");
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    for k in 0..40u64 {
        let first = 1 + 3 * k;
        let good = mold(genuine(), first, 3);
        let a = udp_frame(EXCHANGE, LINE_A, &good);
        match k {
            5 => {
                // The A copy is an IP fragment; B still carries it.
                let mut f = a.clone();
                f[14 + 6] |= 0x20;
                frames.push(f);
            }
            6 => {
                // The UDP length claims 10 bytes more than there are, then
                // 2 fewer.
                let mut f = a.clone();
                let len = u16::from_be_bytes([f[38], f[39]]);
                f[38..40].copy_from_slice(&(len + 10).to_be_bytes());
                frames.push(f.clone());
                f[38..40].copy_from_slice(&(len - 2).to_be_bytes());
                frames.push(f);
            }
            7 => {
                // Cut short: the IP header says more than the frame holds.
                frames.push(a[..a.len() - 5].to_vec());
            }
            8 => {
                // The MoldUDP64 count lies, then a block length does.
                let mut lying = good.clone();
                lying[19] += 1;
                frames.push(udp_frame(EXCHANGE, LINE_A, &lying));
                let mut overrun = good.clone();
                overrun[20..22].copy_from_slice(&500u16.to_be_bytes());
                frames.push(udp_frame(EXCHANGE, LINE_A, &overrun));
            }
            _ => frames.push(a),
        }
        frames.push(udp_frame(EXCHANGE, LINE_B, &good));
        match k {
            10 => {
                // One forged packet far ahead, one whose range overflows.
                let forged = mold(genuine(), 1 << 63, 1);
                frames.push(udp_frame(EXCHANGE, LINE_A, &forged));
                let mut overflow = mold(genuine(), 1, 3);
                overflow[10..18].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
                frames.push(udp_frame(EXCHANGE, LINE_B, &overflow));
            }
            11 => {
                // Another session: a 20-byte heartbeat, a packet.
                let evil = Session::new("EVIL").unwrap();
                frames.push(udp_frame(
                    EXCHANGE,
                    LINE_A,
                    &moldudp64::heartbeat(evil, 1 << 40),
                ));
                frames.push(udp_frame(EXCHANGE, LINE_B, &mold(evil, 34, 2)));
            }
            12 => frames.extend([tcp.clone(), v6.clone(), arp.clone()]),
            _ => {}
        }
    }
    classic_pcap(DataLink::ETHERNET, &frames)
}

/// A reader that cannot seek: the far end of a socket pair another thread
/// writes `bytes` into.
fn pipe(bytes: Vec<u8>) -> (UnixStream, std::thread::JoinHandle<()>) {
    let (mut w, r) = UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&bytes).unwrap();
    });
    (r, writer)
}

#[test]
fn a_hostile_capture_read_from_a_pipe_yields_the_genuine_messages_once_in_order() {
    let (r, writer) = pipe(hostile_capture());
    let mut input = PeekReader::new(r);
    assert_eq!(sniff(&mut input).unwrap(), Sniffed::Known(Format::Pcap));
    let mut capture = CaptureReader::new("hostile.pcap", input).unwrap();
    let mut seq = CaptureSequencer::new(ArbiterConfig::for_capture());
    let mut out = Out::default();
    while let Some(d) = capture.next_datagram().unwrap() {
        seq.on_datagram(&d, &mut out);
    }
    seq.finish(&mut out);
    writer.join().unwrap();

    let want: Vec<(u64, Vec<u8>)> = (1..=120).map(|s| (s, body(s))).collect();
    assert_eq!(out.messages, want);
    assert_eq!(out.unrecoverable, []);
    assert_eq!(
        *capture.stats(),
        CaptureStats {
            // 40 on each line, a second frame in rounds 6 and 8, two in
            // 10 and 11, three in 12.
            packets: 40 * 2 + 1 + 1 + 2 + 2 + 3,
            // All but the 7 skipped below.
            datagrams: 89 - 7,
            not_ipv4: 1,
            ipv6: 1,
            not_udp: 1,
            fragments: 1,
            truncated: 1,
            bad_udp_length: 2,
            ..CaptureStats::default()
        }
    );
    let c = seq.counters();
    assert_eq!(
        c.malformed_by,
        MalformedCounters {
            count_mismatch: 1,
            bad_block_length: 1,
            sequence_overflow: 1,
            ..MalformedCounters::default()
        }
    );
    assert_eq!((c.suspect_jumps, c.other_session), (1, 2));
    assert_eq!(c.messages, 120);
    // Every B copy of a packet A delivered is a duplicate.
    assert_eq!(c.duplicate_messages, 120 - 3 * 4);
}

#[test]
fn formats_are_told_apart_without_consuming_the_stream() {
    let mut w = MdcapWriter::new("m", Vec::new()).unwrap();
    w.write(5, 9, b"recorded").unwrap();
    let mdcap = w.finish().unwrap();
    let (r, writer) = pipe(mdcap);
    let mut input = PeekReader::new(r);
    assert_eq!(sniff(&mut input).unwrap(), Sniffed::Known(Format::Mdcap));
    let mut m = MdcapReader::new("m", input).unwrap();
    assert_eq!(m.next_record().unwrap().unwrap().data, b"recorded");
    writer.join().unwrap();

    let mut bf = BinaryFileWriter::new(Vec::new());
    for msg in crate::common::one_of_each().iter().take(12) {
        bf.write_message(&crate::common::encode(msg)).unwrap();
    }
    let bytes = bf.into_inner();
    let mut input = PeekReader::new(&bytes[..]);
    assert_eq!(
        sniff(&mut input).unwrap(),
        Sniffed::Known(Format::BinaryFile)
    );
    let mut all = Vec::new();
    input.read_to_end(&mut all).unwrap();
    assert_eq!(all, bytes, "sniffing consumed nothing");

    let mut empty = PeekReader::new(&[][..]);
    assert_eq!(sniff(&mut empty).unwrap(), Sniffed::Empty);
    let text = b"hello, world: not a feed file".to_vec();
    match sniff(&mut PeekReader::new(&text[..])).unwrap() {
        Sniffed::Unknown { start, why } => {
            assert_eq!(start, b"hello, w");
            assert!(why.starts_with("fails: BinaryFILE truncated"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn mdcap_records_are_sequenced_by_the_same_rules() {
    let mut w = MdcapWriter::new("m", Vec::new()).unwrap();
    for (i, seq) in [1u64, 2, 2, 3, 1 << 63, 0, u64::MAX, 1, 4]
        .into_iter()
        .enumerate()
    {
        w.write(1_000 + i as u64, seq, &body(seq)).unwrap();
    }
    let bytes = w.finish().unwrap();
    let mut r = MdcapReader::new("m", &bytes[..]).unwrap();
    let mut seq = CaptureSequencer::new(ArbiterConfig::for_capture());
    let mut out = Out::default();
    while let Some(rec) = r.next_record().unwrap() {
        seq.on_record(&rec, &mut out);
    }
    seq.finish(&mut out);
    let want: Vec<(u64, Vec<u8>)> = (1..=4).map(|s| (s, body(s))).collect();
    assert_eq!(out.messages, want);
    let c = seq.counters();
    assert_eq!((c.duplicate_messages, c.suspect_jumps), (2, 1));
    assert_eq!(
        (
            c.malformed_by.sequence_zero,
            c.malformed_by.sequence_overflow
        ),
        (1, 1)
    );
}
