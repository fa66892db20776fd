//! Fuzz targets of mdbus-feed, as plain functions of the input bytes.
//!
//! cargo-fuzz runs them under libFuzzer (`fuzz_targets/`); the crate's
//! stable test suite includes this file (`feed/tests/feed/fuzz.rs`) and
//! runs them over the seed corpus and random inputs. Each one panics only
//! when a property is broken.

use mdbus_feed::arbiter::{Arbiter, ArbiterConfig, ArbiterSink, Line};
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

/// Checks, as the events come, that the sink sees each sequence number
/// once, in order, as a message or inside an unrecoverable range.
struct Checker {
    /// The sequence number the next event must start at, once known.
    next: Option<u64>,
    messages: u64,
    unrecoverable: u64,
    ended: bool,
    max_request: u16,
    session: Option<Session>,
}

impl ArbiterSink for Checker {
    fn message(&mut self, sequence: u64, _line: Line, _data: &[u8]) {
        if let Some(n) = self.next {
            assert_eq!(sequence, n, "message out of order");
        }
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
        if let Some(n) = self.next {
            assert_eq!(first, n, "unrecoverable range out of order");
        }
        self.next = first.checked_add(count);
        self.unrecoverable = self.unrecoverable.saturating_add(count);
    }

    fn session_changed(&mut self, _old: Session, new: Session) {
        self.next = Some(1);
        self.ended = false;
        self.session = Some(new);
    }

    fn end_of_session(&mut self) {
        assert!(!self.ended, "end of session twice");
        self.ended = true;
    }
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
    let max_request = u16::from(input.byte() % 24);
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
    };
    let mut arb = Arbiter::new(config);
    let mut sink = Checker {
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
                arb.on_packet(line, &p, now, &mut sink);
            }
            4 => {
                let p = mdbus_feed::moldudp64::heartbeat(sess, seq);
                arb.on_packet(line, &p, now, &mut sink);
            }
            5 => {
                let p = mdbus_feed::moldudp64::end_of_session(sess, seq);
                arb.on_packet(line, &p, now, &mut sink);
            }
            6 => {
                let len = usize::from(input.byte());
                let raw = input.take(len).to_vec();
                arb.on_packet(line, &raw, now, &mut sink);
            }
            _ => {
                now += u64::from(input.u16()) * 1000;
                arb.on_timer(now, &mut sink);
            }
        }
        if arb.session().is_some() {
            sink.session = arb.session();
        }
        if sink.next.is_none() && arb.expected_sequence() > 0 {
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
