//! The relay fed from files made by the synthetic session generator
//! (BinaryFILE, and pcap captures of MoldUDP64 on two lines), publishing
//! on shared-memory streams: every message delivered to the right streams
//! in order, counts that add up, system messages on every stream, and bad
//! input counted rather than fatal.

mod relay_common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use mdbus_feed::binaryfile::BinaryFileWriter;
use mdbus_feed::moldudp64::{Packet, Session};
use mdbus_feed::pcap::CaptureWriter;
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
use mdbus_relay::{Relay, RelayConfig, RunOptions, Summary};
use relay_common::*;

const CAPACITY: usize = 1 << 17;
const DEADLINE: Duration = Duration::from_secs(120);

fn config(scratch: &Scratch, input: &str) -> RelayConfig {
    let text = format!(
        "{input}\n[counters]\npath = \"{}\"\nlog_interval = \"0s\"\n[thread]\npin = false\n{}{ROUTING}",
        scratch.path("counters").display(),
        scratch.shm_bus(CAPACITY),
    );
    RelayConfig::from_toml_str(&text, "<test>").unwrap()
}

/// Runs the relay to the end of its input with subscribers on every
/// stream; returns the summary and what each stream delivered.
fn relay(cfg: RelayConfig) -> (Summary, BTreeMap<String, Received>) {
    let bus = mdbus::Bus::new(cfg.bus.clone()).unwrap();
    let relay = Relay::new(cfg, "<test>").unwrap();
    let mut subs: Vec<_> = STREAMS.iter().map(|s| bus.subscriber(s).unwrap()).collect();
    let summary = relay
        .run(&RunOptions {
            log: false,
            ..RunOptions::default()
        })
        .unwrap();
    let want: BTreeMap<String, usize> = summary
        .counters
        .streams
        .iter()
        .map(|s| (s.name.clone(), s.messages as usize))
        .collect();
    let got = collect(&mut subs, &want, DEADLINE);
    (summary, got)
}

fn write_binaryfile(path: &std::path::Path, messages: &[Vec<u8>]) {
    let mut w = BinaryFileWriter::new(std::fs::File::create(path).unwrap());
    for m in messages {
        w.write_message(m).unwrap();
    }
    w.flush().unwrap();
}

#[test]
fn binaryfile_every_message_reaches_its_streams_in_order() {
    let scratch = Scratch::new("bf");
    let messages = session(30, 20_000, 7);
    let file = scratch.path("day.itch");
    write_binaryfile(&file, &messages);
    let cfg = config(
        &scratch,
        &format!(
            "[input]\nkind = \"binaryfile\"\npath = \"{}\"",
            file.display()
        ),
    );
    let (summary, got) = relay(cfg);
    let sent: Vec<(u64, Vec<u8>)> = (1..).zip(messages.iter().cloned()).collect();
    check_delivery(&sent, &got);

    let c = &summary.counters;
    assert_eq!(summary.ended_by, "end-of-file");
    assert_eq!(c.local.messages_in, messages.len() as u64);
    let system = messages
        .iter()
        .filter(|m| expected_streams(m).len() == STREAMS.len())
        .count() as u64;
    assert!(system >= 5, "the session has system events");
    assert_eq!(
        c.local.messages_out,
        c.local.messages_in + system * (STREAMS.len() as u64 - 1),
        "fan-out adds up"
    );
    let per_stream: u64 = c.streams.iter().map(|s| s.messages).sum();
    assert_eq!(per_stream, c.local.messages_out);
    assert_eq!(c.local.bad_messages, 0);
    assert_eq!(c.local.unrouted, 0);
    // Every message carries the arrival timestamp.
    for s in STREAMS {
        assert_eq!(got[s].stamped as usize, got[s].messages.len());
    }
    assert_eq!(c.latency_ns.count, messages.len() as u64);
}

/// Packets of a synthetic session on lines A and B, with `drop(line,
/// packet index)` choosing which copies are missing, as a pcap file.
fn write_capture(
    path: &std::path::Path,
    messages_cfg: &SynthConfig,
    drop: impl Fn(usize, usize) -> bool,
    extra: &[(usize, Vec<u8>)],
) -> Vec<(u64, Vec<u8>)> {
    let a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 1), 26400);
    let b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 2), 26400);
    let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
    let mut w = CaptureWriter::create(path).unwrap();
    let day = Generator::new(messages_cfg).unwrap();
    let mut packer = MoldPacker::new(day, Session::new("TEST000001").unwrap(), 1, 1400).unwrap();
    let mut ts = 1_000_000_000u64;
    let mut sent = Vec::new();
    let mut i = 0;
    while let Some(p) = packer.next_packet() {
        for blk in Packet::parse(p.bytes).unwrap().messages() {
            let blk = blk.unwrap();
            sent.push((blk.sequence, blk.data.to_vec()));
        }
        for (l, dst) in [(0, a), (1, b)] {
            if !drop(l, i) {
                ts += 1_000;
                w.write_udp(ts, src, dst, p.bytes).unwrap();
            }
        }
        for (at, bytes) in extra {
            if *at == i {
                ts += 1_000;
                w.write_udp(ts, src, a, bytes).unwrap();
            }
        }
        i += 1;
    }
    ts += 1_000;
    w.write_udp(ts, src, a, &packer.end_of_session()).unwrap();
    w.finish().unwrap();
    sent
}

fn pcap_input(file: &std::path::Path) -> String {
    format!(
        "[input]\nkind = \"pcap\"\npath = \"{}\"\nline_a = \"239.192.10.1:26400\"\nline_b = \"239.192.10.2:26400\"\nstart_sequence = 1",
        file.display()
    )
}

#[test]
fn pcap_of_two_lossy_lines_is_arbitrated_without_loss() {
    let scratch = Scratch::new("pcap");
    let file = scratch.path("feed.pcap");
    let synth = SynthConfig {
        seed: 11,
        symbols: 30,
        order_messages: 20_000,
        ..SynthConfig::default()
    };
    // Every 7th packet missing on A, every 5th on B, never both.
    let sent = write_capture(
        &file,
        &synth,
        |l, i| (l == 0 && i % 7 == 3) || (l == 1 && i % 5 == 1 && i % 7 != 3),
        &[],
    );
    let (summary, got) = relay(config(&scratch, &pcap_input(&file)));
    check_delivery(&sent, &got);
    let c = &summary.counters;
    assert_eq!(summary.ended_by, "end-of-session");
    assert_eq!(c.local.messages_in, sent.len() as u64);
    assert_eq!(c.upstream.unrecoverable, 0);
    assert!(c.upstream.wins_a > 0 && c.upstream.wins_b > 0, "{c:?}");
    assert_eq!(c.upstream.wins_a + c.upstream.wins_b, sent.len() as u64);
    assert!(c.upstream.duplicate_packets > 0);
    assert_eq!(c.upstream.end_of_session, 1);
}

#[test]
fn bad_input_is_counted_and_the_rest_delivered() {
    let scratch = Scratch::new("bad");
    let file = scratch.path("bad.pcap");
    let synth = SynthConfig {
        seed: 3,
        symbols: 30,
        order_messages: 5_000,
        ..SynthConfig::default()
    };
    let session = Session::new("TEST000001").unwrap();
    // A truncated header, and a block length that overruns its packet.
    let mut overrun = vec![0u8; 40];
    overrun[..10].copy_from_slice(session.as_bytes());
    overrun[10..18].copy_from_slice(&5u64.to_be_bytes());
    overrun[18..20].copy_from_slice(&1u16.to_be_bytes());
    overrun[20..22].copy_from_slice(&500u16.to_be_bytes());
    let extra = vec![(2, b"short".to_vec()), (3, overrun)];
    // Packet 10 is lost on both lines: unrecoverable from a capture.
    let sent = write_capture(&file, &synth, |_, i| i == 10, &extra);
    let (summary, got) = relay(config(&scratch, &pcap_input(&file)));
    let c = &summary.counters;
    assert_eq!(c.upstream.malformed, 2, "{c:?}");
    assert!(c.upstream.unrecoverable > 0);
    assert_eq!(
        c.local.messages_in + c.upstream.unrecoverable,
        sent.len() as u64,
        "every message is delivered or counted as lost"
    );
    let lost: std::collections::BTreeSet<u64> = {
        let delivered: std::collections::BTreeSet<u64> = got
            .values()
            .flat_map(|r| r.messages.iter().map(|m| m.0))
            .collect();
        sent.iter()
            .map(|m| m.0)
            .filter(|s| !delivered.contains(s))
            .collect()
    };
    assert_eq!(lost.len() as u64, c.upstream.unrecoverable);
    // The loss reached every stream as a source gap naming exactly the
    // messages not delivered, and the run says data was lost.
    let mut got = got;
    for (name, r) in got.iter_mut() {
        let reported: std::collections::BTreeSet<u64> =
            r.source_gaps.iter().flat_map(|&(f, t, _)| f..t).collect();
        assert_eq!(reported, lost, "stream {name}");
        r.source_gaps.clear();
    }
    assert!(
        summary
            .data_lost
            .as_deref()
            .is_some_and(|d| d.contains(&format!("{} feed messages unrecoverable", lost.len()))),
        "{:?}",
        summary.data_lost
    );
    let kept: Vec<_> = sent.into_iter().filter(|m| !lost.contains(&m.0)).collect();
    check_delivery(&kept, &got);
}

#[test]
fn unknown_itch_types_and_wrong_lengths_are_counted_not_published() {
    let scratch = Scratch::new("itch");
    let mut messages = session(30, 1_000, 5);
    messages.insert(10, b"Zjunkjunkjunk".to_vec());
    messages.insert(20, messages[15][..5].to_vec());
    let file = scratch.path("bad.itch");
    write_binaryfile(&file, &messages);
    let cfg = config(
        &scratch,
        &format!(
            "[input]\nkind = \"binaryfile\"\npath = \"{}\"",
            file.display()
        ),
    );
    let (summary, got) = relay(cfg);
    assert_eq!(summary.counters.local.bad_messages, 2);
    let sent: Vec<(u64, Vec<u8>)> = (1..)
        .zip(messages.iter().cloned())
        .filter(|(_, m)| mdbus_feed::itch::decode(m).is_ok())
        .collect();
    check_delivery(&sent, &got);
}

#[test]
fn a_truncated_binaryfile_is_an_error_naming_the_file() {
    let scratch = Scratch::new("trunc");
    let file = scratch.path("cut.itch");
    let messages = session(3, 100, 5);
    write_binaryfile(&file, &messages);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let cfg = config(
        &scratch,
        &format!(
            "[input]\nkind = \"binaryfile\"\npath = \"{}\"",
            file.display()
        ),
    );
    let relay = Relay::new(cfg, "<test>").unwrap();
    let e = relay.run(&RunOptions::default()).unwrap_err().to_string();
    assert!(e.starts_with(&file.display().to_string()), "{e}");
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn a_recording_holds_every_routed_message_in_sequence_order() {
    let scratch = Scratch::new("rec");
    let messages = session(10, 3_000, 11);
    let file = scratch.path("day.itch");
    write_binaryfile(&file, &messages);
    let recording = scratch.path("day.mdcap");
    let mut cfg = config(
        &scratch,
        &format!(
            "[input]\nkind = \"binaryfile\"\npath = \"{}\"",
            file.display()
        ),
    );
    cfg.record.path = recording.clone();
    let (summary, _) = relay(cfg);
    assert_eq!(summary.counters.local.recorded, messages.len() as u64);
    assert_eq!(summary.counters.local.record_errors, 0);

    let mut r = mdbus_feed::mdcap::MdcapReader::open(&recording).unwrap();
    let mut seen = 0usize;
    let mut last_ts = 0;
    while let Some(rec) = r.next_record().unwrap() {
        assert_eq!(rec.sequence, seen as u64 + 1, "sequence order");
        assert_eq!(rec.data, &messages[seen][..], "message {}", seen + 1);
        assert!(rec.timestamp_ns >= last_ts, "arrival times never go back");
        last_ts = rec.timestamp_ns;
        seen += 1;
    }
    assert_eq!(seen, messages.len());
}
