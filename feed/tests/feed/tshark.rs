//! Cross-check against Wireshark's dissectors: a capture of synthetic
//! MoldUDP64 traffic, written by `CaptureWriter`, is read back by tshark.
//!
//! tshark's MoldUDP64 dissector checks the framing (session, sequence
//! numbers, message count, block lengths; a mismatch is flagged as
//! malformed) and its IPv4/UDP dissectors check the checksums. The payload
//! is chained to its NASDAQ-ITCH dissector, which decodes ITCH 2.0/3.0
//! (ASCII fields), not 5.0 (checked with tshark 4.0; Wireshark's field
//! list for it is unchanged through 4.4): it identifies each message's type
//! byte, but its field values for binary 5.0 messages are meaningless, so
//! only the types are compared.
//!
//! Skips, saying so on stderr, when tshark is not installed
//! (`apt-get install tshark`).

use std::net::{Ipv4Addr, SocketAddrV4};

use mdbus_feed::moldudp64::{Packet, Session};
use mdbus_feed::pcap::CaptureWriter;
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};

use crate::common::Scratch;
use crate::tshark_support as tshark;

const PORT: u16 = 26_477;
/// 2024-01-02 00:00:00 UTC: synthetic timestamps are since midnight.
const DAY: u64 = 1_704_153_600_000_000_000;

/// What tshark should report for one frame.
#[derive(Debug, PartialEq)]
struct Expected {
    session: String,
    sequence: u64,
    count: u16,
    msgseq: Vec<u64>,
    msglen: Vec<usize>,
    types: Vec<char>,
}

#[test]
fn tshark_decodes_our_moldudp64_capture() {
    let Some(version) = tshark::version_or_skip("tshark_decodes_our_moldudp64_capture") else {
        return;
    };
    eprintln!("using {version}");

    let dir = Scratch::new("tshark");
    let path = dir.path("moldudp64.pcap");
    let cfg = SynthConfig {
        seed: 11,
        symbols: 25,
        order_messages: 4_000,
        ..SynthConfig::default()
    };
    let session = Session::new("MDBUS00001").unwrap();
    let mut packer = MoldPacker::new(Generator::new(&cfg).unwrap(), session, 1, 1472)
        .unwrap()
        .with_window(1_000_000);
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 20, 30, 40), 40_001);
    let dst = SocketAddrV4::new(Ipv4Addr::new(233, 54, 12, 111), PORT);
    let mut w = CaptureWriter::create(&path).unwrap();
    let mut expected = Vec::new();
    let mut blocks = 0usize;
    let mut last_time = 0;
    let mut first = true;
    while let Some(p) = packer.next_packet() {
        last_time = DAY + p.send_time.nanos();
        w.write_udp(last_time, src, dst, p.bytes).unwrap();
        let parsed = Packet::parse_strict(p.bytes).unwrap();
        let mut e = Expected {
            session: "MDBUS00001".into(),
            sequence: p.sequence,
            count: p.count,
            msgseq: vec![],
            msglen: vec![],
            types: vec![],
        };
        for b in parsed.messages() {
            let b = b.unwrap();
            e.msgseq.push(b.sequence);
            e.msglen.push(b.data.len());
            e.types.push(char::from(b.data[0]));
            blocks += 1;
        }
        expected.push(e);
        if first {
            // A heartbeat after the first packet, as a quiet feed sends.
            first = false;
            w.write_udp(last_time + 1, src, dst, &packer.heartbeat())
                .unwrap();
            expected.push(Expected {
                session: "MDBUS00001".into(),
                sequence: packer.next_sequence(),
                count: 0,
                msgseq: vec![],
                msglen: vec![],
                types: vec![],
            });
        }
    }
    w.write_udp(last_time + 1_000, src, dst, &packer.end_of_session())
        .unwrap();
    expected.push(Expected {
        session: "MDBUS00001".into(),
        sequence: packer.next_sequence(),
        count: 0xFFFF,
        msgseq: vec![],
        msglen: vec![],
        types: vec![],
    });
    w.finish().unwrap();

    // 1. The full dissection: nothing malformed, no error-level expert
    //    info, and an ITCH layer under every message block.
    let (verbose, itch_layers) = tshark::dissect_clean(&path, PORT);
    assert_eq!(itch_layers, blocks, "one ITCH layer per message block");
    for name in [
        "Add Order",
        "Order Executed",
        "Order Delete",
        "Stock Directory",
        "Cross Trade",
    ] {
        assert!(
            verbose.contains(&format!("Message Type: {name}")),
            "no {name} decoded"
        );
    }

    // 2. Field by field: framing, sequence numbers, lengths, types and
    //    checksums of every frame.
    let fields = tshark::run(
        &path,
        PORT,
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
            "moldudp64.msgseq",
            "-e",
            "moldudp64.msglen",
            "-e",
            "nasdaq-itch.message_type",
            "-e",
            "ip.checksum.status",
            "-e",
            "udp.checksum.status",
        ],
    );
    let lines: Vec<&str> = fields.lines().collect();
    assert_eq!(lines.len(), expected.len(), "one line per frame");
    fn list<T: std::str::FromStr>(s: &str) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        if s.is_empty() {
            vec![]
        } else {
            s.split(',').map(|v| v.parse().unwrap()).collect()
        }
    }
    for (i, (line, want)) in lines.iter().zip(&expected).enumerate() {
        let f: Vec<&str> = line.split(';').collect();
        assert_eq!(f.len(), 8, "frame {}: {line}", i + 1);
        let got = Expected {
            session: f[0].to_owned(),
            sequence: f[1].parse().unwrap(),
            count: f[2].parse().unwrap(),
            msgseq: list(f[3]),
            msglen: list(f[4]),
            types: f[5]
                .split(',')
                .filter(|t| !t.is_empty())
                .map(|t| t.trim_matches('\'').chars().next().unwrap())
                .collect(),
        };
        assert_eq!(&got, want, "frame {}", i + 1);
        assert_eq!((f[6], f[7]), ("1", "1"), "frame {}: checksums good", i + 1);
    }
    eprintln!(
        "tshark agreed on {} frames and {blocks} ITCH messages",
        expected.len()
    );
}
