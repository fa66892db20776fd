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
use mdbus_tool_support::output::check_convention;
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
    // The recording's stream table is the relay's streams, and each record
    // names where the router sent it.
    let names = r.streams().to_vec();
    assert_eq!(names.len(), STREAMS.len());
    assert!(
        STREAMS.iter().all(|s| names.iter().any(|n| n == s)),
        "{names:?}"
    );
    let mut seen = 0usize;
    let mut last_ts = 0;
    while let Some(rec) = r.next_record().unwrap() {
        assert_eq!(rec.sequence, seen as u64 + 1, "sequence order");
        assert_eq!(rec.data, &messages[seen][..], "message {}", seen + 1);
        let expected = expected_streams(rec.data);
        let recorded: Vec<&str> = match rec.stream {
            mdbus_feed::mdcap::STREAM_ALL => STREAMS.to_vec(),
            mdbus_feed::mdcap::STREAM_NONE => Vec::new(),
            i => vec![names[usize::from(i)].as_str()],
        };
        assert_eq!(recorded, expected, "stream of message {}", seen + 1);
        assert!(rec.timestamp_ns >= last_ts, "arrival times never go back");
        last_ts = rec.timestamp_ns;
        seen += 1;
    }
    assert_eq!(seen, messages.len());
}

/// With `[bus.archive]` set, every stream the relay publishes is recorded
/// into its own archive, whole and in order; a second run into the same
/// archives is refused (its streams number from 1 again).
#[test]
fn archived_streams_hold_what_their_subscribers_received() {
    let scratch = Scratch::new("archive");
    let messages = session(10, 3_000, 12);
    let file = scratch.path("day.itch");
    write_binaryfile(&file, &messages);
    let archive = scratch.path("archive");
    let text = |input: &str| {
        format!(
            "{input}\n[counters]\npath = \"\"\nlog_interval = \"0s\"\n[thread]\npin = false\n{}\
             [bus.archive]\ndir = \"{}\"\n{ROUTING}",
            scratch.shm_bus(CAPACITY),
            archive.display()
        )
    };
    let input = format!(
        "[input]\nkind = \"binaryfile\"\npath = \"{}\"",
        file.display()
    );
    let cfg = RelayConfig::from_toml_str(&text(&input), "<test>").unwrap();
    let (summary, received) = relay(cfg.clone());
    assert_eq!(summary.data_lost, None);
    for s in STREAMS {
        let got = &received[s].messages;
        assert!(!got.is_empty(), "stream {s} received nothing");
        let mut r = mdbus::archive::ArchiveReader::open(archive.join(s)).unwrap();
        r.seek(1).unwrap();
        let mut n = 0usize;
        while let Some(item) = r.next_item().unwrap() {
            let mdbus::archive::Item::Message(m) = item else {
                panic!("stream {s}: a gap in the archive");
            };
            assert_eq!(m.seq(), n as u64 + 1, "stream {s}");
            let rm = mdbus_relay::RelayMessage::parse(m.payload()).unwrap();
            assert_eq!(
                (rm.sequence, rm.itch),
                (got[n].0, &got[n].1[..]),
                "stream {s}"
            );
            n += 1;
        }
        assert_eq!(n, got.len(), "stream {s}: archived all it received");
    }
    // A second run is a new publisher epoch numbered from 1 again: the
    // first run's archive is sealed into DIR/epochs/000001, whole, and the
    // second run recorded from 1.
    let first: BTreeMap<&str, usize> = STREAMS
        .iter()
        .map(|s| (*s, received[*s].messages.len()))
        .collect();
    let (summary, received) = relay(cfg);
    assert_eq!(summary.data_lost, None);
    let count = |d: &std::path::Path| {
        let mut r = mdbus::archive::ArchiveReader::open(d).unwrap();
        r.seek(1).unwrap();
        let mut n = 0usize;
        while let Some(item) = r.next_item().unwrap() {
            assert!(
                matches!(item, mdbus::archive::Item::Message(_)),
                "{}",
                d.display()
            );
            n += 1;
        }
        n
    };
    for s in STREAMS {
        let sealed = archive.join(s).join("epochs").join("000001");
        assert_eq!(
            count(&sealed),
            first[s],
            "stream {s}: the first run, sealed"
        );
        assert_eq!(
            count(&archive.join(s)),
            received[s].messages.len(),
            "stream {s}"
        );
    }

    // An archive that does not record its epoch (format version 1, or a
    // writer never told it) cannot be told from this run: refused.
    let old = scratch.path("old-archive");
    let mut w = mdbus::archive::ArchiveWriter::open(&mdbus::archive::ArchiveConfig {
        dir: old.join(STREAMS[0]),
        segment_bytes: 65536,
        ..Default::default()
    })
    .unwrap();
    w.append(1, 0, 0, b"an earlier day").unwrap();
    drop(w);
    let text = text(&input).replace(&archive.display().to_string(), &old.display().to_string());
    let cfg = RelayConfig::from_toml_str(&text, "<test>").unwrap();
    let e = Relay::new(cfg, "<test>").unwrap_err().to_string();
    assert!(
        e.contains("holds an earlier run of stream")
            && e.contains("without its publisher epoch")
            && e.contains("move that archive away"),
        "{e}"
    );
}

const LINE_A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 1), 26400);
const LINE_B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 2), 26400);
const EXCHANGE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);

/// One Ethernet/IPv4/UDP frame as the capture writer builds it (14 + 20 +
/// 8 bytes of headers, then the payload).
fn udp_frame(dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let mut w = CaptureWriter::new("frame", Vec::new()).unwrap();
    w.write_udp(1_000_000_000, EXCHANGE, dst, payload).unwrap();
    w.finish().unwrap()[24 + 16..].to_vec()
}

/// A classic pcap (the writer's header: native byte order, ns) of raw
/// frames, one every `step_ns` from 1 s, with timestamps overridden where
/// `at` says.
fn raw_pcap(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = CaptureWriter::new("h", Vec::new())
        .unwrap()
        .finish()
        .unwrap();
    for (ts, f) in frames {
        let secs = u32::try_from(ts / 1_000_000_000).unwrap();
        let nanos = (ts % 1_000_000_000) as u32;
        let len = f.len() as u32;
        for v in [secs, nanos, len, len] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out.extend_from_slice(f);
    }
    out
}

/// A genuine session: its packets (session TEST000001), its messages
/// (sequence, bytes) and its end-of-session packet.
struct Genuine(Vec<Vec<u8>>, Vec<(u64, Vec<u8>)>, Vec<u8>);

fn genuine_packets(order_messages: u64) -> Genuine {
    let day = Generator::new(&SynthConfig {
        seed: 13,
        symbols: 30,
        order_messages,
        ..SynthConfig::default()
    })
    .unwrap();
    let mut packer = MoldPacker::new(day, Session::new("TEST000001").unwrap(), 1, 1400).unwrap();
    let (mut packets, mut sent) = (Vec::new(), Vec::new());
    while let Some(p) = packer.next_packet() {
        for blk in Packet::parse(p.bytes).unwrap().messages() {
            let blk = blk.unwrap();
            sent.push((blk.sequence, blk.data.to_vec()));
        }
        packets.push(p.bytes.to_vec());
    }
    Genuine(packets, sent, packer.end_of_session().to_vec())
}

/// A capture of a genuine day on both lines with every kind of damaged,
/// foreign and forged frame among it: the relay publishes exactly the
/// genuine day, counts each skipped frame and each rejected packet under
/// its reason (summary and JSON), and reports nothing lost.
#[test]
fn a_hostile_capture_is_counted_by_reason_and_the_genuine_day_delivered() {
    let scratch = Scratch::new("hostile");
    let Genuine(packets, sent, eos) = genuine_packets(3_000);
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for (k, good) in packets.iter().enumerate() {
        let a = udp_frame(LINE_A, good);
        match k {
            5 => {
                // The A copy is an IP fragment; B still carries it.
                let mut f = a.clone();
                f[14 + 6] |= 0x20;
                frames.push(f);
            }
            6 => {
                // The UDP length says 10 bytes more than there are, then 2
                // fewer.
                let mut f = a.clone();
                let len = u16::from_be_bytes([f[38], f[39]]);
                f[38..40].copy_from_slice(&(len + 10).to_be_bytes());
                frames.push(f.clone());
                f[38..40].copy_from_slice(&(len - 2).to_be_bytes());
                frames.push(f);
            }
            // Cut short: the IP header says more than the frame holds.
            7 => frames.push(a[..a.len() - 5].to_vec()),
            8 => {
                // The MoldUDP64 count lies, then a block length does.
                let mut lying = good.clone();
                lying[19] += 1;
                frames.push(udp_frame(LINE_A, &lying));
                let mut overrun = good.clone();
                overrun[20..22].copy_from_slice(&500u16.to_be_bytes());
                frames.push(udp_frame(LINE_A, &overrun));
            }
            9 => {
                // Not IP (ARP), and IPv4 but not UDP (ICMP).
                let mut arp = a.clone();
                arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
                frames.push(arp);
                let mut icmp = a.clone();
                icmp[14 + 9] = 1;
                frames.push(icmp);
                frames.push(a);
            }
            10 => {
                // A forged packet far ahead, and another session's packet.
                let mut forged = good.clone();
                forged[10..18].copy_from_slice(&(1u64 << 63).to_be_bytes());
                frames.push(udp_frame(LINE_A, &forged));
                let mut evil = good.clone();
                evil[..10].copy_from_slice(b"EVIL      ");
                frames.push(udp_frame(LINE_B, &evil));
                frames.push(a);
            }
            _ => frames.push(a),
        }
        frames.push(udp_frame(LINE_B, good));
    }
    frames.push(udp_frame(LINE_A, &eos));
    frames.push(udp_frame(LINE_B, &eos));
    let stamped: Vec<(u64, Vec<u8>)> = frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| (1_000_000_000 + i as u64 * 1_000, f))
        .collect();
    let file = scratch.path("hostile.pcap");
    std::fs::write(&file, raw_pcap(&stamped)).unwrap();

    let (summary, got) = relay(config(&scratch, &pcap_input(&file)));
    check_delivery(&sent, &got);
    let c = &summary.counters;
    assert_eq!(summary.ended_by, "end-of-session");
    assert_eq!(c.local.messages_in, sent.len() as u64);
    assert_eq!(c.upstream.unrecoverable, 0);
    assert_eq!(summary.data_lost, None, "rejected input is not data lost");
    let k = summary.capture.expect("capture counts");
    assert_eq!(
        (
            k.not_ipv4,
            k.not_udp,
            k.fragments,
            k.truncated,
            k.bad_udp_length
        ),
        (1, 1, 1, 1, 2),
        "{k:?}"
    );
    assert_eq!(k.skipped, 6);
    assert_eq!(k.frames, stamped.len() as u64);
    let m = &c.upstream.malformed_by;
    assert_eq!((m.count_mismatch, m.bad_block_length), (1, 1), "{m:?}");
    assert_eq!(c.upstream.suspect_jumps, 1);
    assert_eq!(c.upstream.other_session, 1);
    // The same counts, by reason, in the JSON and the text summary.
    let json = serde_json::Value::Object(mdbus_relay::report::summary_json(&summary));
    assert_eq!(check_convention(&json), Ok(()), "{json}");
    let skipped = &json["skipped"];
    assert_eq!(skipped["fragments"], 1);
    assert_eq!(skipped["bad_udp_length"], 2);
    assert_eq!(skipped["not_udp"], 1);
    assert_eq!(skipped["truncated"], 1);
    assert_eq!(skipped["not_ipv4"], 1);
    assert_eq!(json["capture_frames"], stamped.len() as u64);
    let drops = &json["drops"];
    assert_eq!(drops["malformed_count_mismatch"], 1);
    assert_eq!(drops["malformed_bad_block_length"], 1);
    assert_eq!(drops["suspect_jumps"], 1);
    assert_eq!(drops["other_session"], 1);
    assert_eq!(json["malformed_packets"], 2);
    assert_eq!(json["lost"], false);
    assert!(json["data_lost"].is_null());
    let text = mdbus_relay::report::summary_text(&summary);
    assert!(
        text.contains("fragments 1, truncated 1, bad UDP length 2"),
        "{text}"
    );
    assert!(
        text.contains("count mismatch 1, bad block length 1"),
        "{text}"
    );
    assert!(text.contains("data lost    none"), "{text}");
}

/// A capture read from a FIFO another thread writes into (no seek, read
/// once): the whole day is delivered.
#[test]
fn a_capture_from_a_fifo_is_read_once_to_the_end() {
    let scratch = Scratch::new("fifo");
    let file = scratch.path("day.pcap");
    let synth = SynthConfig {
        seed: 17,
        symbols: 30,
        order_messages: 5_000,
        ..SynthConfig::default()
    };
    let sent = write_capture(&file, &synth, |l, i| l == 1 && i % 3 == 0, &[]);
    let bytes = std::fs::read(&file).unwrap();
    let fifo = scratch.path("feed.fifo");
    mkfifo(&fifo);
    // Relay::new opens the FIFO without waiting for the writer, which
    // comes afterwards, from another thread.
    let cfg = config(&scratch, &pcap_input(&fifo));
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write as _;
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            // In small pieces: the reader must wait between them.
            for chunk in bytes.chunks(4096) {
                w.write_all(chunk).unwrap();
            }
        })
    };
    let (summary, got) = relay(cfg);
    writer.join().unwrap();
    check_delivery(&sent, &got);
    assert_eq!(summary.ended_by, "end-of-session");
    assert_eq!(summary.counters.upstream.unrecoverable, 0);
    assert_eq!(summary.capture.unwrap().skipped, 0);
}

/// A FIFO nobody writes to: the relay waits for a writer, and `--duration`
/// (or a signal) still ends the run.
#[test]
fn a_fifo_without_a_writer_does_not_hold_off_the_duration() {
    let scratch = Scratch::new("fifo-idle");
    let fifo = scratch.path("idle.fifo");
    mkfifo(&fifo);
    let relay = Relay::new(config(&scratch, &pcap_input(&fifo)), "<test>").unwrap();
    let summary = relay
        .run(&RunOptions {
            duration: Some(Duration::from_millis(300)),
            log: false,
            ..RunOptions::default()
        })
        .unwrap();
    assert_eq!(summary.ended_by, "duration");
    assert_eq!(summary.counters.local.messages_in, 0);
    assert_eq!(summary.data_lost, None);
}

fn mkfifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(
        r,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// `pace = "recorded"` over a capture whose clock jumps 10 hours: the
/// relay does not sleep through `--duration` (the pacing wait wakes in
/// slices). The binary, as an operator runs it: exit 0 and the summary.
#[test]
fn a_ten_hour_jump_in_a_paced_capture_does_not_hold_off_the_duration() {
    let scratch = Scratch::new("pace");
    let Genuine(packets, sent, _) = genuine_packets(200);
    let mut frames = Vec::new();
    let mut ts = 1_000_000_000u64;
    for (k, p) in packets.iter().enumerate() {
        if k == 10 {
            ts += 10 * 3600 * 1_000_000_000;
        }
        ts += 1_000;
        frames.push((ts, udp_frame(LINE_A, p)));
    }
    let file = scratch.path("jump.pcap");
    std::fs::write(&file, raw_pcap(&frames)).unwrap();
    let cfg_path = scratch.path("relay.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "{}\npace = \"recorded\"\n[counters]\npath = \"\"\nlog_interval = \"0s\"\n[thread]\npin = false\n{}{ROUTING}",
            pcap_input(&file),
            scratch.shm_bus(CAPACITY)
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mdbus-relay"))
        .args([
            "--config",
            cfg_path.to_str().unwrap(),
            "--duration",
            "2s",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A guard against a hang, not a timing assertion.
    let until = std::time::Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("the relay slept through --duration");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    assert_eq!(v["ended_by"], "duration");
    // The packets before the jump were relayed, none after it.
    let before: u64 = packets[..10]
        .iter()
        .map(|p| Packet::parse(p).unwrap().messages().count() as u64)
        .sum();
    assert_eq!(v["messages_in"], before, "{v}");
    assert!(before < sent.len() as u64);
    assert!(v["data_lost"].is_null());
}

/// Loss is never silent: a capture that lost packets on both lines exits
/// 3 with the summary saying what was lost, or 0 with `--allow-loss`.
#[test]
fn a_capture_with_unrecoverable_loss_exits_3_unless_allowed() {
    let scratch = Scratch::new("lossy");
    let file = scratch.path("lossy.pcap");
    let synth = SynthConfig {
        seed: 19,
        symbols: 30,
        order_messages: 2_000,
        ..SynthConfig::default()
    };
    write_capture(&file, &synth, |_, i| i == 4, &[]);
    let cfg_path = scratch.path("relay.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "{}\n[counters]\npath = \"\"\nlog_interval = \"0s\"\n[thread]\npin = false\n{}{ROUTING}",
            pcap_input(&file),
            scratch.shm_bus(CAPACITY)
        ),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdbus-relay"))
            .args(["--config", cfg_path.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, stderr) = run(&[]);
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("data lost    data lost: "), "{stdout}");
    assert!(stderr.contains("feed messages unrecoverable"), "{stderr}");
    assert!(stderr.contains("--allow-loss"), "{stderr}");
    let (code, stdout, stderr) = run(&["--allow-loss", "--json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    assert_eq!(v["lost"], true, "{v}");
    let lost = v["unrecoverable"].as_u64().unwrap();
    assert!(lost > 0);
    assert!(
        v["data_lost"]
            .as_str()
            .unwrap()
            .contains(&format!("{lost} feed messages unrecoverable")),
        "{v}"
    );
}

/// The binary on a tiny BinaryFILE with `--json`: all of stdout is one
/// object in the tools' convention, and its counts are the file's, stream
/// by stream (what [`ROUTING`] sends where, computed from the messages).
#[test]
fn json_of_a_binaryfile_run_has_the_files_counts_stream_by_stream() {
    let scratch = Scratch::new("bf-json");
    let messages = session(30, 300, 11);
    let file = scratch.path("day.itch");
    write_binaryfile(&file, &messages);
    let cfg_path = scratch.path("relay.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[input]\nkind = \"binaryfile\"\npath = \"{}\"\n[counters]\npath = \"\"\nlog_interval = \"0s\"\n\
             [thread]\npin = false\n{}{ROUTING}",
            file.display(),
            scratch.shm_bus(CAPACITY)
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdbus-relay"))
        .args(["--config", cfg_path.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    assert_eq!(v["tool"], "mdbus-relay");
    assert_eq!(v["input"], "binaryfile");
    assert_eq!(v["ended_by"], "end-of-file");
    assert_eq!(v["messages_in"], messages.len() as u64);
    assert_eq!(
        (v["lost"].clone(), v["data_lost"].clone()),
        (false.into(), serde_json::Value::Null)
    );
    // A file has no packets: nothing rejected, nothing skipped, nothing
    // timed per datagram.
    for group in ["drops", "skipped"] {
        let total: u64 = v[group]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(total, 0, "{group}: {v}");
    }
    assert_eq!(v["packets"], 0);
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &messages {
        for s in expected_streams(m) {
            *want.entry(s).or_default() += 1;
        }
    }
    let got: BTreeMap<&str, u64> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["messages"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, want, "{v}");
    assert_eq!(v["messages_out"], want.values().sum::<u64>());
    assert_eq!(v["latency_ns"]["count"], v["timed_packets"]);
}
