//! Attacks on a live simulator-to-relay session over loopback multicast:
//! garbage datagrams, another session's packets, a duplicate flood and
//! far-ahead (2^63) packets, injected on both lines by another socket
//! while the genuine day is under way. Each attacked run is compared,
//! stream by stream and byte for byte, with an unattacked run of the same
//! day: the relay publishes exactly the genuine day, counts the attack by
//! reason, and loses nothing (no unrecoverable range, no data lost, so
//! exit status 0).

mod relay_common;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use mdbus_feed::moldudp64::{self, PacketBuilder, Session};
use mdbus_feed::synth::{Generator, MoldPacker};
use mdbus_relay::Summary;
use relay_common::live::{run, synth, Day, Options, Outcome, Target};
use relay_common::*;

/// The genuine day: slow enough (about a second) that the attack lands
/// inside it.
const DAY: Day = Day {
    order_messages: 20_000,
    messages_per_second: 20_000,
};

/// Attack datagrams per attack.
const ATTACK: usize = 3_000;

/// This process's ports: one pair per run, runs side by side.
fn port(run: u16) -> u16 {
    20_000 + (std::process::id() % 2_500) as u16 * 16 + run * 2
}

fn bus(scratch: &Scratch) -> String {
    scratch.shm_bus(1 << 16)
}

/// What each stream delivered: (feed sequence, ITCH bytes), in order.
type PerStream = BTreeMap<String, Vec<(u64, Vec<u8>)>>;

/// The unattacked run of the day, once per process.
fn baseline() -> &'static PerStream {
    static BASE: OnceLock<PerStream> = OnceLock::new();
    BASE.get_or_init(|| {
        let scratch = Scratch::new("hostile-base");
        let out = run(
            &bus(&scratch),
            None,
            port(0),
            DAY,
            Options::default(),
            false,
        );
        check_genuine(&out);
        out.got.into_iter().map(|(k, v)| (k, v.messages)).collect()
    })
}

/// The whole genuine day, once each, in order, on its streams; nothing
/// lost.
fn check_genuine(out: &Outcome) {
    assert_eq!(out.summary.ended_by, "end-of-session", "{:?}", out.summary);
    check_delivery(&out.sent, &out.got);
    let c = &out.summary.counters;
    assert_eq!(c.local.messages_in, out.sent.len() as u64, "{c:?}");
    assert_eq!(c.upstream.unrecoverable, 0, "{c:?}");
    assert_eq!(c.upstream.jumps + c.upstream.session_changes, 0, "{c:?}");
    assert_eq!(out.summary.data_lost, None, "rejected input is not loss");
}

/// Runs the day under `attack` and compares it with the baseline.
fn attacked(run_no: u16, attack: impl FnOnce(Target) + Send + 'static) -> Summary {
    let scratch = Scratch::new(&format!("hostile-{run_no}"));
    let out = run(
        &bus(&scratch),
        None,
        port(run_no),
        DAY,
        Options {
            attack: Some(Box::new(attack)),
            ..Options::default()
        },
        false,
    );
    check_genuine(&out);
    let base = baseline();
    for (name, r) in &out.got {
        assert_eq!(
            r.messages.len(),
            base[name].len(),
            "stream {name}: message count vs the unattacked run"
        );
        assert!(
            r.messages == base[name],
            "stream {name} differs from the unattacked run"
        );
    }
    out.summary
}

/// xorshift64*: the attacks are reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Sends each datagram on both lines.
fn flood(t: &Target, datagrams: impl Iterator<Item = Vec<u8>>) {
    let s = t.socket();
    for (i, d) in datagrams.enumerate() {
        for line in [t.line_a, t.line_b] {
            // A full socket buffer drops attack datagrams, which is fine.
            let _ = s.send_to(&d, line);
        }
        if i % 16 == 0 {
            std::thread::yield_now();
        }
    }
}

/// A packet of `session` from `first` carrying `count` copies of a
/// genuine-looking ITCH message.
fn packet(session: Session, first: u64, count: u64) -> Vec<u8> {
    let msg = Generator::new(&synth(DAY))
        .unwrap()
        .nth(3)
        .unwrap()
        .bytes()
        .to_vec();
    let mut buf = vec![0u8; 1400];
    let mut b = PacketBuilder::new(&mut buf, session, first).unwrap();
    for _ in 0..count {
        b.push(&msg).unwrap();
    }
    b.finish().to_vec()
}

#[test]
fn garbage_datagrams_change_nothing() {
    let s = attacked(1, |t| {
        t.wait_for_messages();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        // A 20-byte garbage heartbeat first (it once ended the day), then
        // random datagrams of every length up to 300 bytes.
        let mut first = vec![0u8; 20];
        first.iter_mut().for_each(|b| *b = rng.next() as u8);
        let garbage = (0..ATTACK).map(move |_| {
            let len = (rng.next() % 300) as usize;
            (0..len).map(|_| rng.next() as u8).collect::<Vec<u8>>()
        });
        flood(&t, std::iter::once(first).chain(garbage));
    });
    let c = &s.counters.upstream;
    assert!(c.malformed > 0, "{c:?}");
    assert!(c.malformed_by.short_header > 0, "{c:?}");
    assert!(c.malformed_by.count_mismatch > 0, "{c:?}");
}

#[test]
fn another_sessions_packets_change_nothing() {
    let s = attacked(2, |t| {
        t.wait_for_messages();
        let evil = Session::new("EVIL000001").unwrap();
        // A contiguous run from 1 on both lines (what a genuine session
        // change looks like), and its heartbeats and end of session.
        let run = (0..ATTACK as u64).map(move |k| match k % 100 {
            98 => moldudp64::heartbeat(evil, 1 + 3 * k).to_vec(),
            99 => {
                let mut eos = moldudp64::heartbeat(evil, 1 + 3 * k).to_vec();
                eos[18..20].copy_from_slice(&0xFFFFu16.to_be_bytes());
                eos
            }
            _ => packet(evil, 1 + 3 * k, 3),
        });
        flood(&t, run);
    });
    let c = &s.counters.upstream;
    assert!(c.other_session > 0, "{c:?}");
    assert_eq!(c.session_changes, 0);
}

#[test]
fn a_duplicate_flood_changes_nothing() {
    let s = attacked(3, |t| {
        t.wait_for_messages();
        // The genuine day's own packets (packed as the attacker likes),
        // each three times on both lines, some ahead of the exchange.
        let day = Generator::new(&synth(DAY)).unwrap();
        let mut packer =
            MoldPacker::new(day, Session::new("LIVE000001").unwrap(), 1, 1400).unwrap();
        let mut packets = Vec::new();
        while let Some(p) = packer.next_packet() {
            packets.push(p.bytes.to_vec());
            if packets.len() * 3 >= ATTACK {
                break;
            }
        }
        let copies = packets
            .iter()
            .flat_map(|p| std::iter::repeat_n(p.clone(), 3))
            .collect::<Vec<_>>();
        flood(&t, copies.into_iter());
    });
    let c = &s.counters.upstream;
    // Each line's own copy is one duplicate already; the flood adds its
    // copies.
    assert!(
        c.duplicate_messages > c.wins_a + c.wins_b,
        "the flood was counted as duplicates: {c:?}"
    );
}

#[test]
fn far_ahead_packets_change_nothing() {
    let s = attacked(4, |t| {
        t.wait_for_messages();
        let genuine = Session::new("LIVE000001").unwrap();
        // A run continuing itself from 2^63 on both lines (what a genuine
        // jump looks like), heartbeats there, and ranges that overflow.
        let run = (0..ATTACK as u64).map(move |k| match k % 50 {
            48 => moldudp64::heartbeat(genuine, (1 << 63) + 3 * k).to_vec(),
            49 => packet(genuine, u64::MAX - 1, 3),
            _ => packet(genuine, (1 << 63) + 3 * k, 3),
        });
        flood(&t, run);
    });
    let c = &s.counters.upstream;
    assert!(c.suspect_jumps > 0, "{c:?}");
    assert!(c.malformed_by.sequence_overflow > 0, "{c:?}");
    assert_eq!(c.jumps, 0);
}
