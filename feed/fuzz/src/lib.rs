//! Fuzz targets of mdbus-feed, as plain functions of the input bytes.
//!
//! cargo-fuzz runs them under libFuzzer (`fuzz_targets/`); the crate's
//! stable test suite includes this file (`feed/tests/feed/fuzz.rs`) and
//! runs them over the seed corpus and random inputs. Each one panics only
//! when a property is broken.

use std::collections::HashMap;

use mdbus_feed::arbiter::{Arbiter, ArbiterConfig, ArbiterSink, Line, MAX_SEQUENCE};
use mdbus_feed::itch::{self, len_for, DecodeError, Directory, MAX_MESSAGE_LEN};
use mdbus_feed::moldudp64::{Packet, PacketBuilder, PacketKind, Request, Session};

/// MoldUDP64: header, message walk, validation, rebuilding what is
/// valid, request packets, and ITCH decoding of every block.
pub fn moldudp64(data: &[u8]) {
    if let Ok(r) = Request::decode(data) {
        assert_eq!(r.encode()[..], data[..], "request round trip");
    }
    let Ok(p) = Packet::parse(data) else {
        assert!(data.len() < 20, "parse refused a full header");
        return;
    };
    let _ = (p.session(), p.kind(), p.next_sequence());
    let announced = p.message_count();
    let mut ok = 0u16;
    let mut errors = 0;
    let mut blocks: Vec<&[u8]> = Vec::new();
    for block in p.messages() {
        match block {
            Ok(b) => {
                assert_eq!(errors, 0, "a block after an error");
                assert_eq!(b.sequence, p.sequence().wrapping_add(u64::from(ok)));
                ok += 1;
                blocks.push(b.data);
                let _ = itch::decode(b.data);
            }
            Err(e) => {
                errors += 1;
                let _ = e.to_string();
            }
        }
    }
    assert!(errors <= 1, "more than one error");
    assert!(ok <= announced, "more blocks than announced");
    assert_eq!(p.validate().is_ok(), errors == 0);
    assert_eq!(Packet::parse_strict(data).is_ok(), errors == 0);
    if errors == 0 && p.kind() != PacketKind::EndOfSession {
        // A valid packet is exactly what the builder makes of its blocks.
        let mut buf = vec![0u8; data.len()];
        let mut b = PacketBuilder::new(&mut buf, p.session(), p.sequence()).unwrap();
        for m in &blocks {
            b.push(m).unwrap();
        }
        assert_eq!(b.finish(), data, "rebuilt packet differs");
    }
}

thread_local! {
    static DIRECTORY: std::cell::RefCell<Directory> = std::cell::RefCell::new(Directory::new());
}

/// ITCH 5.0: decode; whatever decodes re-encodes to the same bytes and
/// decodes again to the same value; errors agree with the type table.
pub fn itch(data: &[u8]) {
    match itch::decode(data) {
        Ok(m) => {
            assert_eq!(m.as_bytes(), data);
            let owned = m.decode();
            let mut buf = [0u8; MAX_MESSAGE_LEN];
            let n = owned.encode(&mut buf).expect("a decoded message encodes");
            assert_eq!(&buf[..n], data, "decode then encode changed the bytes");
            assert_eq!(itch::decode(&buf[..n]).unwrap().decode(), owned);
            let _ = (m.timestamp(), format!("{m:?}"));
            // One directory for all runs: it preallocates 65,536 slots.
            DIRECTORY.with(|d| d.borrow_mut().apply(&m));
        }
        Err(DecodeError::Empty) => assert!(data.is_empty()),
        Err(DecodeError::UnknownType(t)) => assert_eq!(len_for(t), None),
        Err(DecodeError::Truncated {
            expected, actual, ..
        }) => assert!(actual < expected),
        Err(DecodeError::TooLong {
            expected, actual, ..
        }) => assert!(actual > expected),
        Err(e @ DecodeError::WrongType { .. }) => panic!("decode gave {e}"),
    }
}

/// Reads the fuzz input as a stream of small decisions; past the end every
/// read is zero, so any input is a complete program.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn more(&self) -> bool {
        self.pos < self.data.len()
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let start = self.pos.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.pos = start + n;
        &self.data[start..end]
    }
}

const SESSIONS: [&str; 3] = ["FUZZ000001", "FUZZ000002", "OTHER"];

fn session(i: u8) -> Session {
    Session::new(SESSIONS[usize::from(i) % SESSIONS.len()]).unwrap()
}

/// Every message block received, by session and sequence number: what the
/// arbiter may publish at that sequence number.
#[derive(Default)]
struct Received(HashMap<(Session, u64), Vec<Vec<u8>>>);

impl Received {
    fn record(&mut self, datagram: &[u8]) {
        let Ok(p) = Packet::parse_strict(datagram) else {
            return;
        };
        for b in p.messages().flatten() {
            let seen = self.0.entry((p.session(), b.sequence)).or_default();
            if !seen.iter().any(|d| d == b.data) {
                seen.push(b.data.to_vec());
            }
        }
    }

    fn has(&self, session: Option<Session>, sequence: u64, data: &[u8]) -> bool {
        session.is_some_and(|s| {
            self.0
                .get(&(s, sequence))
                .is_some_and(|v| v.iter().any(|d| d == data))
        })
    }
}

/// Checks, as the events come, that the sink sees each sequence number
/// once, in order, as a message or inside an unrecoverable range, and
/// that every message is, byte for byte, one received at its sequence
/// number in the session followed.
struct Checker {
    received: Received,
    /// The sequence number the next event must start at, once known.
    next: Option<u64>,
    messages: u64,
    unrecoverable: u64,
    ended: bool,
    max_request: u16,
    session: Option<Session>,
}

impl ArbiterSink for Checker {
    fn message(&mut self, sequence: u64, _line: Line, data: &[u8]) {
        if let Some(n) = self.next {
            assert_eq!(sequence, n, "message out of order");
        }
        assert!(
            self.received.has(self.session, sequence, data),
            "message {sequence} was never received in the session followed"
        );
        assert!(!self.ended, "message after the end of the session");
        self.next = sequence.checked_add(1);
        self.messages += 1;
    }

    fn request(&mut self, request: &Request) {
        assert!(request.count >= 1 && request.count <= self.max_request.max(1));
        assert!(request.sequence >= 1);
        if let Some(s) = self.session {
            assert_eq!(request.session, s, "request for another session");
        }
    }

    fn unrecoverable(&mut self, first: u64, count: u64) {
        assert!(count > 0, "empty unrecoverable range");
        assert!(
            first.checked_add(count).is_some_and(|e| e <= MAX_SEQUENCE),
            "unrecoverable range past MAX_SEQUENCE"
        );
        if let Some(n) = self.next {
            assert_eq!(first, n, "unrecoverable range out of order");
        }
        self.next = first.checked_add(count);
        self.unrecoverable = self.unrecoverable.saturating_add(count);
    }

    fn session_changed(&mut self, _old: Session, new: Session) {
        // A new session starts at 1; one that replaces a session known
        // only from heartbeats starts where the configuration says.
        self.next = None;
        self.ended = false;
        self.session = Some(new);
    }

    fn end_of_session(&mut self) {
        assert!(!self.ended, "end of session twice");
        self.ended = true;
    }
}

/// Hands a datagram to the arbiter, first recording what it carries (the
/// only bytes the arbiter may publish) and which session it would lock.
fn feed(arb: &mut Arbiter, sink: &mut Checker, line: Line, datagram: &[u8], now: u64) {
    sink.received.record(datagram);
    if arb.session().is_none() {
        // No session locked yet (at most one known from heartbeats, which
        // gives way to the first with messages and its own start): the
        // sequence may start anywhere.
        sink.session = Packet::parse(datagram).ok().map(|p| p.session());
        sink.next = None;
    }
    arb.on_packet(line, datagram, now, sink);
}

/// The arbiter under a program read from the input: a configuration,
/// then packets (well formed or not) on any line in any order, heartbeats,
/// ends of session, time passing and timers. Every sequence number is
/// delivered at most once and in order, nothing is left behind once the
/// timers have run out, and the counters agree with the sink.
pub fn arbiter(data: &[u8]) {
    let mut input = Input { data, pos: 0 };
    let k = input.byte();
    let start_sequence = match (k >> 1) & 3 {
        0 => None,
        1 => Some(1),
        2 => Some(u64::from(input.u16()) + 1),
        _ => Some(u64::MAX - 20),
    };
    let mb = input.byte();
    let max_request = u16::from(mb % 24);
    let r = input.byte();
    let config = ArbiterConfig {
        expected_session: (k & 1 != 0).then(|| session(0)),
        start_sequence,
        reorder_bytes: [0, 64, 400, 4096][usize::from((k >> 3) & 3)],
        max_reorder_packets: usize::from(r % 9),
        request_timeout_ns: 1 + 1000 * u64::from(r >> 4),
        max_retries: u32::from((k >> 5) & 3),
        max_request_messages: max_request,
        requests_per_second: [0, 1, 1000, 100_000][usize::from((r >> 2) & 3)],
        gap_wait_ns: if k & 0x80 != 0 { 500 } else { 0 },
        max_jump: [0, 3, 1000, 10_000_000][usize::from(r & 3)],
        confirm_packets: 1 + u32::from(mb >> 5),
        confirm_quiet_ns: u64::from(mb & 0x10) * 100,
    };
    let mut arb = Arbiter::new(config);
    let mut sink = Checker {
        received: Received::default(),
        next: start_sequence,
        messages: 0,
        unrecoverable: 0,
        ended: false,
        max_request: max_request.clamp(1, 0xFFFE),
        session: (k & 1 != 0).then(|| session(0)),
    };
    let mut now = 0u64;
    let mut buf = vec![0u8; 2048];
    // Sequence numbers near the configured start, so copies overlap.
    let base = start_sequence.unwrap_or(1);
    while input.more() {
        let op = input.byte();
        now += u64::from(op >> 5) * 100;
        let line = [Line::A, Line::B, Line::Recovery][usize::from((op >> 3) % 3)];
        let s = input.byte();
        let seq = match s >> 6 {
            0 | 1 => base.saturating_add(u64::from(s & 0x3f)),
            2 => u64::from(input.u16()),
            _ => u64::MAX - u64::from(s & 0x3f),
        };
        let sess = session(input.byte() % 4 / 3);
        match op & 7 {
            0..=3 => {
                let count = input.byte() % 9;
                let Ok(mut b) = PacketBuilder::new(&mut buf, sess, seq) else {
                    continue;
                };
                for _ in 0..count {
                    let len = usize::from(input.byte() % 13);
                    let body = input.take(len).to_vec();
                    let _ = b.push(&body);
                }
                let p = b.finish().to_vec();
                feed(&mut arb, &mut sink, line, &p, now);
            }
            4 => {
                let p = mdbus_feed::moldudp64::heartbeat(sess, seq);
                feed(&mut arb, &mut sink, line, &p, now);
            }
            5 => {
                let p = mdbus_feed::moldudp64::end_of_session(sess, seq);
                feed(&mut arb, &mut sink, line, &p, now);
            }
            6 => {
                let len = usize::from(input.byte());
                let raw = input.take(len).to_vec();
                feed(&mut arb, &mut sink, line, &raw, now);
            }
            _ => {
                now += u64::from(input.u16()) * 1000;
                arb.on_timer(now, &mut sink);
            }
        }
        sink.session = arb.session();
        if sink.next.is_none() && sink.session.is_some() && arb.expected_sequence() > 0 {
            sink.next = Some(arb.expected_sequence());
        }
    }
    // No more input: the timers run out every gap.
    let mut rounds = 0u32;
    while let Some(t) = arb.next_deadline() {
        now = now.max(t);
        arb.on_timer(now, &mut sink);
        rounds += 1;
        assert!(rounds < 1_000_000, "the timers never settle");
    }
    assert_eq!(arb.open_gaps(), 0, "a gap outlived its retries");
    assert_eq!(arb.stored_packets(), 0, "packets left in the store");
    let c = arb.counters();
    assert_eq!(c.messages, sink.messages);
    assert_eq!(c.unrecoverable, sink.unrecoverable);
    assert_eq!(c.wins_a + c.wins_b + c.wins_recovery, c.messages);
    if c.gap_messages < u64::MAX {
        // Not saturated (a gap of nearly 2^64 messages), so exact.
        assert_eq!(c.recovered + c.unrecoverable, c.gap_messages);
    }
}

/// What the attack target's sink saw.
#[derive(Default)]
struct Published {
    messages: Vec<(u64, Vec<u8>)>,
    unrecoverable: Vec<(u64, u64)>,
    session_changes: u32,
    ends: u32,
}

impl ArbiterSink for Published {
    fn message(&mut self, sequence: u64, _line: Line, data: &[u8]) {
        if self.ends == 0 {
            self.messages.push((sequence, data.to_vec()));
        }
    }

    fn request(&mut self, _request: &Request) {}

    fn unrecoverable(&mut self, first: u64, count: u64) {
        if self.ends == 0 {
            self.unrecoverable.push((first, count));
        }
    }

    fn session_changed(&mut self, _old: Session, _new: Session) {
        if self.ends == 0 {
            self.session_changes += 1;
        }
    }

    fn end_of_session(&mut self) {
        self.ends += 1;
    }
}

/// The bytes of genuine message `seq`.
fn genuine_body(seq: u64) -> Vec<u8> {
    let mut v = b"genuine ".to_vec();
    v.extend_from_slice(&seq.to_be_bytes());
    v
}

/// A genuine feed on lines A and B (each packet on at least one line, B a
/// packet behind A, an end of session on both lines), with packets from an
/// attacker read from the input interleaved: other sessions (single
/// packets and runs that continue one another on both lines), packets and
/// heartbeats of the genuine session far ahead (runs from one point, 2^63,
/// sequences that overflow), garbage and malformed datagrams, and replays
/// of genuine packets. Up to its end of session, the arbiter publishes
/// exactly the genuine messages, each once, in order, byte for byte, and
/// reports nothing lost.
pub fn arbiter_attack(data: &[u8]) {
    let mut input = Input { data, pos: 0 };
    let genuine = Session::new("GENUINE01").unwrap();
    let k = input.byte();
    let max_jump = [1000, 10_000_000][usize::from(k & 1)];
    let config = ArbiterConfig {
        expected_session: (k & 2 != 0).then_some(genuine),
        start_sequence: (k & 4 != 0).then_some(1),
        max_jump,
        confirm_packets: [1, 2, 8, 64][usize::from((k >> 3) & 3)],
        ..ArbiterConfig::default()
    };
    let mut arb = Arbiter::new(config);
    let mut out = Published::default();

    // The genuine day: packets of 1 to 3 messages.
    let packets = 20 + u64::from(input.byte() % 64);
    let mut genuine_packets: Vec<Vec<u8>> = Vec::new();
    let mut seq = 1u64;
    let mut buf = vec![0u8; 2048];
    for i in 0..packets {
        let mut b = PacketBuilder::new(&mut buf, genuine, seq).unwrap();
        for _ in 0..1 + i % 3 {
            b.push(&genuine_body(seq)).unwrap();
            seq += 1;
        }
        genuine_packets.push(b.finish().to_vec());
    }
    let total = seq - 1;
    let end = mdbus_feed::moldudp64::end_of_session(genuine, seq);
    // Line A sends packet i, line B packet i - 1; either may lose it, not
    // both.
    let lost_on: Vec<u8> = (0..genuine_packets.len())
        .map(|i| match data.get(i).copied().unwrap_or(0x80) % 16 {
            // The first packet reaches both lines: it is where a late join
            // starts (confirmed by its copy).
            0 if i > 0 => 1,
            1 if i > 0 => 2,
            _ => 0,
        })
        .collect();
    let mut events: Vec<(Line, Vec<u8>)> = Vec::new();
    for i in 0..=genuine_packets.len() {
        if i < genuine_packets.len() && lost_on[i] != 1 {
            events.push((Line::A, genuine_packets[i].clone()));
        }
        if i > 0 && lost_on[i - 1] != 2 {
            events.push((Line::B, genuine_packets[i - 1].clone()));
        }
    }
    events.push((Line::A, end.to_vec()));
    events.push((Line::B, end.to_vec()));

    let mut now = 0u64;
    // The first genuine packet comes first: an unconfigured arbiter
    // follows the first session it sees (docs/SECURITY.md, "Feed input").
    let mut next_event = 0;
    // The attacker's runs: another session from 1, the genuine session
    // from far ahead.
    let other = session(input.byte());
    let other = if other == genuine { session(2) } else { other };
    let mut other_seq = 1u64;
    let far_start = match input.byte() % 3 {
        0 => 1 << 63,
        // Just out of reach of the end of session at `total + 1`.
        1 => total + 2 + max_jump,
        _ => MAX_SEQUENCE - 10_000,
    };
    let mut far_seq = far_start;
    let mut run_line = 0u8;
    while next_event < events.len() {
        now += 1_000;
        let op = if next_event == 0 { 0 } else { input.byte() };
        if op & 1 == 0 || !input.more() {
            let (line, d) = &events[next_event];
            arb.on_packet(*line, d, now, &mut out);
            next_event += 1;
            continue;
        }
        // Runs go out on A then B, copy for copy, like a genuine feed.
        let line = if run_line % 2 == 0 { Line::A } else { Line::B };
        let step = run_line % 2 == 1;
        run_line = run_line.wrapping_add(1);
        let count = 1 + input.byte() % 4;
        let forged = |sess: Session, first: u64, count: u8, buf: &mut [u8]| {
            let mut b = PacketBuilder::new(buf, sess, first).unwrap();
            for j in 0..count {
                b.push(&[b'f', j]).unwrap();
            }
            b.finish().to_vec()
        };
        let datagram = match (op >> 1) % 9 {
            0 => {
                let p = forged(other, other_seq, count, &mut buf);
                if step {
                    other_seq += u64::from(count);
                }
                p
            }
            1 => {
                let s = u64::from(input.u16()) + 1;
                forged(session(input.byte()), s, count, &mut buf)
            }
            2 => {
                let p = forged(genuine, far_seq, count, &mut buf);
                if step {
                    far_seq = far_seq
                        .saturating_add(u64::from(count))
                        .min(MAX_SEQUENCE - 8);
                }
                p
            }
            3 => mdbus_feed::moldudp64::heartbeat(genuine, far_seq).to_vec(),
            4 => mdbus_feed::moldudp64::end_of_session(genuine, far_seq).to_vec(),
            5 => {
                // Sequences that overflow, or sit right at the top.
                let s = u64::MAX - u64::from(input.byte());
                forged(genuine, s, count, &mut buf)
            }
            6 => {
                let len = usize::from(input.byte() % 64);
                input.take(len).to_vec()
            }
            7 => {
                // A genuine packet cut short or with its count changed.
                let i = usize::from(input.byte()) % genuine_packets.len();
                let mut p = genuine_packets[i].clone();
                if input.byte() % 2 == 0 {
                    p.truncate(p.len() - 1);
                } else {
                    p[19] = p[19].wrapping_add(1 + input.byte() % 3);
                }
                p
            }
            _ => {
                // A replay of a genuine packet already sent.
                let sent = events[..next_event]
                    .iter()
                    .filter(|(_, d)| d.len() > 20)
                    .count();
                if sent == 0 {
                    continue;
                }
                let i = usize::from(input.byte()) % sent;
                events[..next_event]
                    .iter()
                    .filter(|(_, d)| d.len() > 20)
                    .nth(i)
                    .map(|(_, d)| d.clone())
                    .unwrap_or_default()
            }
        };
        arb.on_packet(line, &datagram, now, &mut out);
    }
    let want: Vec<(u64, Vec<u8>)> = (1..=total).map(|s| (s, genuine_body(s))).collect();
    assert_eq!(out.messages.len(), want.len(), "genuine messages published");
    assert!(
        out.messages == want,
        "published messages differ from the genuine ones"
    );
    assert_eq!(out.unrecoverable, [], "nothing genuine is lost");
    assert_eq!(out.session_changes, 0, "no session change");
    assert_eq!(out.ends, 1, "the genuine end of session is reached");
    let c = arb.counters();
    assert_eq!((c.jumps, c.unrecoverable), (0, 0));
}
