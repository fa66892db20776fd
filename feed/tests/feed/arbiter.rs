//! The MoldUDP64 arbiter: A/B arbitration, the reorder store, gap
//! re-requests (splitting, rate limit, retries, unrecoverable gaps),
//! session changes, end of session, stale and malformed packets; property
//! tests over arbitrary loss, duplication and reordering; no allocation
//! after construction.

use std::collections::VecDeque;

use allocation_counter::measure;
use mdbus_feed::arbiter::{
    Arbiter, ArbiterConfig, ArbiterConfigError, ArbiterCounters, ArbiterSink, Line,
    MalformedCounters, MAX_SEQUENCE, REQUESTS_IN_FLIGHT, REQUEST_BURST,
};
use mdbus_feed::moldudp64::{self, PacketBuilder, Request, Session};
use proptest::prelude::*;

fn session(name: &str) -> Session {
    Session::new(name).unwrap()
}

fn s1() -> Session {
    session("SESSION01")
}

/// The bytes of message `seq` in the test sessions: its number and a
/// length that varies with it, so a wrong copy or offset shows.
fn body(seq: u64) -> Vec<u8> {
    let mut b = seq.to_be_bytes().to_vec();
    b.extend(std::iter::repeat(b'x').take((seq % 7) as usize));
    b
}

/// A packet of `session` holding messages `first..first + count`.
fn packet_of(session: Session, first: u64, count: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 65_536];
    let mut b = PacketBuilder::new(&mut buf, session, first).unwrap();
    for s in first..first + count {
        b.push(&body(s)).unwrap();
    }
    b.finish().to_vec()
}

fn packet(first: u64, count: u64) -> Vec<u8> {
    packet_of(s1(), first, count)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Message(u64, Line),
    Unrecoverable(u64, u64),
    SessionChanged(Session, Session),
    EndOfSession,
}

/// Records everything, and checks each message's bytes as it arrives.
#[derive(Default)]
struct Recorder {
    events: Vec<Event>,
    requests: Vec<Request>,
}

impl ArbiterSink for Recorder {
    fn message(&mut self, sequence: u64, line: Line, data: &[u8]) {
        assert_eq!(data, body(sequence), "bytes of message {sequence}");
        self.events.push(Event::Message(sequence, line));
    }
    fn request(&mut self, request: &Request) {
        self.requests.push(*request);
    }
    fn unrecoverable(&mut self, first: u64, count: u64) {
        self.events.push(Event::Unrecoverable(first, count));
    }
    fn session_changed(&mut self, old: Session, new: Session) {
        self.events.push(Event::SessionChanged(old, new));
    }
    fn end_of_session(&mut self) {
        self.events.push(Event::EndOfSession);
    }
}

impl Recorder {
    fn sequences(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Message(s, _) => Some(*s),
                _ => None,
            })
            .collect()
    }

    fn lines(&self) -> Vec<Line> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Message(_, l) => Some(*l),
                _ => None,
            })
            .collect()
    }

    fn take_requests(&mut self) -> Vec<(u64, u16)> {
        self.requests
            .drain(..)
            .map(|r| {
                assert_eq!(r.session, s1());
                (r.sequence, r.count)
            })
            .collect()
    }
}

fn config() -> ArbiterConfig {
    ArbiterConfig {
        start_sequence: Some(1),
        gap_wait_ns: 0,
        requests_per_second: 0,
        ..ArbiterConfig::default()
    }
}

fn from(line: Line) -> Vec<Line> {
    vec![line]
}

#[test]
fn first_arrival_wins_whatever_the_line() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 3), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 3), 1, &mut out);
    arb.on_packet(Line::B, &packet(4, 3), 2, &mut out);
    arb.on_packet(Line::A, &packet(4, 3), 3, &mut out);
    arb.on_packet(Line::A, &packet(7, 1), 4, &mut out);
    arb.on_packet(Line::B, &packet(7, 1), 5, &mut out);
    assert_eq!(out.sequences(), (1..=7).collect::<Vec<_>>());
    assert_eq!(
        out.lines(),
        [
            from(Line::A).repeat(3),
            from(Line::B).repeat(3),
            from(Line::A)
        ]
        .concat()
    );
    let c = arb.counters();
    assert_eq!((c.packets_a, c.packets_b), (3, 3));
    assert_eq!((c.wins_a, c.wins_b, c.messages), (4, 3, 7));
    assert_eq!((c.duplicate_packets, c.duplicate_messages), (3, 7));
    assert_eq!((c.gaps, c.requests_sent), (0, 0));
    assert_eq!(arb.expected_sequence(), 8);
    assert_eq!(arb.session(), Some(s1()));
    assert!(out.requests.is_empty());
}

#[test]
fn a_partly_new_packet_delivers_only_its_new_messages() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 4), 0, &mut out);
    // B packs differently: 3..=8 overlaps A's 3 and 4.
    arb.on_packet(Line::B, &packet(3, 6), 1, &mut out);
    assert_eq!(out.sequences(), (1..=8).collect::<Vec<_>>());
    assert_eq!(
        out.lines(),
        [from(Line::A).repeat(4), from(Line::B).repeat(4)].concat()
    );
    let c = arb.counters();
    assert_eq!((c.duplicate_packets, c.duplicate_messages), (0, 2));
    assert_eq!((c.wins_a, c.wins_b), (4, 4));
}

#[test]
fn packets_ahead_of_a_gap_wait_until_the_other_line_fills_it() {
    let mut arb = Arbiter::new(ArbiterConfig {
        gap_wait_ns: 1_000,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::A, &packet(5, 2), 10, &mut out); // 3, 4 lost on A
    arb.on_packet(Line::A, &packet(7, 1), 20, &mut out);
    assert_eq!(out.sequences(), [1, 2]);
    assert_eq!(arb.stored_packets(), 2);
    assert_eq!(arb.open_gaps(), 1);
    assert_eq!(arb.next_deadline(), Some(1_010));
    arb.on_timer(500, &mut out);
    assert!(
        out.requests.is_empty(),
        "the other line has 1 µs to fill it"
    );
    arb.on_packet(Line::B, &packet(3, 2), 600, &mut out);
    assert_eq!(out.sequences(), (1..=7).collect::<Vec<_>>());
    assert_eq!(
        out.lines(),
        [
            from(Line::A).repeat(2),
            from(Line::B).repeat(2),
            from(Line::A).repeat(3)
        ]
        .concat()
    );
    arb.on_packet(Line::B, &packet(5, 3), 700, &mut out);
    let c = arb.counters();
    assert_eq!((c.gaps, c.gap_messages, c.recovered), (1, 2, 2));
    assert_eq!((c.duplicate_packets, c.duplicate_messages), (1, 3));
    assert_eq!(c.requests_sent, 0);
    assert_eq!((arb.stored_packets(), arb.open_gaps()), (0, 0));
    assert_eq!(arb.next_deadline(), None);
}

#[test]
fn an_unfilled_gap_is_requested_after_the_wait_and_recovered() {
    let mut arb = Arbiter::new(ArbiterConfig {
        gap_wait_ns: 1_000,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::B, &packet(5, 2), 100, &mut out);
    assert_eq!(arb.next_deadline(), Some(1_100));
    arb.on_timer(1_099, &mut out);
    assert!(out.requests.is_empty());
    arb.on_timer(1_100, &mut out);
    assert_eq!(out.take_requests(), [(3, 2)]);
    assert_eq!(arb.next_deadline(), Some(1_100 + 20_000_000), "retry timer");
    arb.on_packet(Line::Recovery, &packet(3, 2), 1_500, &mut out);
    assert_eq!(out.sequences(), (1..=6).collect::<Vec<_>>());
    assert_eq!(out.lines()[2..4], [Line::Recovery, Line::Recovery]);
    let c = arb.counters();
    assert_eq!(
        (c.recovered, c.wins_recovery, c.packets_recovery),
        (2, 2, 1)
    );
    assert_eq!((c.requests_sent, c.request_retries), (1, 0));
    assert_eq!(arb.next_deadline(), None);
}

#[test]
fn with_no_wait_a_gap_is_requested_by_the_packet_that_reveals_it() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(10, 1), 5, &mut out);
    assert_eq!(out.take_requests(), [(2, 8)]);
}

#[test]
fn a_heartbeat_beyond_the_expected_sequence_reveals_a_gap() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::A, &moldudp64::heartbeat(s1(), 3), 1, &mut out);
    assert!(out.requests.is_empty(), "nothing missing");
    arb.on_packet(Line::B, &moldudp64::heartbeat(s1(), 6), 2, &mut out);
    assert_eq!(out.take_requests(), [(3, 3)]);
    let c = arb.counters();
    assert_eq!((c.heartbeats, c.gaps, c.gap_messages), (2, 1, 3));
    arb.on_packet(Line::Recovery, &packet(3, 3), 3, &mut out);
    assert_eq!(out.sequences(), (1..=5).collect::<Vec<_>>());
}

#[test]
fn big_gaps_are_split_into_requests_a_window_at_a_time() {
    let mut arb = Arbiter::new(ArbiterConfig {
        max_request_messages: 10,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(27, 1), 1, &mut out);
    assert_eq!(out.take_requests(), [(2, 10), (12, 10), (22, 5)]);

    // A gap wider than the window: REQUESTS_IN_FLIGHT requests, then one
    // more for each one answered.
    let window = 10 * REQUESTS_IN_FLIGHT;
    arb.on_packet(Line::A, &packet(28 + window + 35, 1), 2, &mut out);
    let first: Vec<(u64, u16)> = (0..REQUESTS_IN_FLIGHT).map(|i| (28 + 10 * i, 10)).collect();
    assert_eq!(out.take_requests(), first);
    arb.on_packet(Line::Recovery, &packet(2, 26), 3, &mut out);
    arb.on_packet(Line::Recovery, &packet(28, 10), 4, &mut out);
    assert_eq!(out.take_requests(), [(28 + window, 10)]);
    assert_eq!(arb.expected_sequence(), 38);
}

#[test]
fn a_stored_copy_that_arrived_first_wins_over_a_later_one() {
    let mut arb = Arbiter::new(ArbiterConfig {
        gap_wait_ns: 1_000,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(3, 1), 1, &mut out); // 2 missing
    arb.on_packet(Line::B, &packet(5, 2), 2, &mut out); // 4 missing
                                                        // One answer covering 2..=6: 3, 5 and 6 were stored first.
    arb.on_packet(Line::Recovery, &packet(2, 5), 3, &mut out);
    assert_eq!(out.sequences(), (1..=6).collect::<Vec<_>>());
    assert_eq!(
        out.lines(),
        [
            Line::A,
            Line::Recovery,
            Line::A,
            Line::Recovery,
            Line::B,
            Line::B
        ]
    );
    let c = arb.counters();
    assert_eq!((c.wins_a, c.wins_b, c.wins_recovery), (2, 2, 2));
    assert_eq!((c.duplicate_messages, c.recovered), (3, 2));
}

#[test]
fn nearby_gaps_that_are_due_together_share_a_request() {
    let mut arb = Arbiter::new(ArbiterConfig {
        gap_wait_ns: 1_000,
        max_request_messages: 6,
        ..config()
    });
    let mut out = Recorder::default();
    for (i, s) in [1, 3, 5, 7, 10].into_iter().enumerate() {
        arb.on_packet(Line::A, &packet(s, 1), i as u64, &mut out);
    }
    assert_eq!(arb.open_gaps(), 4);
    arb.on_timer(1_003, &mut out);
    // 2, 4 and 6 are due and within six messages of 2; 8..=9 is not due.
    assert_eq!(out.take_requests(), [(2, 5)]);
    arb.on_timer(1_004, &mut out);
    assert_eq!(out.take_requests(), [(8, 2)]);
    arb.on_packet(Line::Recovery, &packet(2, 5), 1_100, &mut out);
    arb.on_packet(Line::Recovery, &packet(8, 2), 1_100, &mut out);
    assert_eq!(out.sequences(), (1..=10).collect::<Vec<_>>());
    let c = arb.counters();
    assert_eq!(
        (c.requests_sent, c.recovered, c.duplicate_messages),
        (2, 5, 2)
    );
    assert_eq!(arb.next_deadline(), None);
}

#[test]
fn requests_are_rate_limited_with_a_small_burst() {
    let mut arb = Arbiter::new(ArbiterConfig {
        requests_per_second: 100, // one every 10 ms
        max_request_messages: 1,
        request_timeout_ns: u64::MAX / 4,
        ..config()
    });
    let mut out = Recorder::default();
    let t0 = 1_000_000_000;
    arb.on_packet(Line::A, &packet(1, 1), t0, &mut out);
    arb.on_packet(Line::A, &packet(8, 1), t0, &mut out); // 2..=7 missing
    assert_eq!(out.take_requests().len() as u64, REQUEST_BURST);
    assert_eq!(arb.counters().requests_rate_limited, 1);
    assert_eq!(arb.next_deadline(), Some(t0 + 10_000_000));
    arb.on_timer(t0 + 9_999_999, &mut out);
    assert!(out.requests.is_empty());
    arb.on_timer(t0 + 10_000_000, &mut out);
    assert_eq!(out.take_requests(), [(6, 1)]);
    arb.on_timer(t0 + 20_000_000, &mut out);
    assert_eq!(out.take_requests(), [(7, 1)]);
    assert_eq!(arb.counters().requests_sent, 6);
}

#[test]
fn unanswered_requests_are_retried_then_the_gap_is_unrecoverable() {
    let mut arb = Arbiter::new(ArbiterConfig {
        max_retries: 2,
        request_timeout_ns: 1_000,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::A, &packet(5, 2), 0, &mut out);
    assert_eq!(out.take_requests(), [(3, 2)]);
    arb.on_timer(999, &mut out);
    assert!(out.requests.is_empty());
    for t in [1_000, 2_000] {
        assert_eq!(arb.next_deadline(), Some(t));
        arb.on_timer(t, &mut out);
        assert_eq!(out.take_requests(), [(3, 2)], "retry at {t}");
    }
    assert_eq!(arb.next_deadline(), Some(3_000));
    arb.on_timer(3_000, &mut out);
    assert!(out.requests.is_empty());
    assert_eq!(
        out.events,
        [
            Event::Message(1, Line::A),
            Event::Message(2, Line::A),
            Event::Unrecoverable(3, 2),
            Event::Message(5, Line::A),
            Event::Message(6, Line::A),
        ]
    );
    let c = arb.counters();
    assert_eq!((c.requests_sent, c.request_retries), (3, 2));
    assert_eq!((c.unrecoverable, c.recovered, c.messages), (2, 0, 4));
    assert_eq!(arb.next_deadline(), None);
    // Too late: the answer is a duplicate.
    arb.on_packet(Line::Recovery, &packet(3, 2), 3_001, &mut out);
    assert_eq!(arb.counters().duplicate_messages, 2);
    assert_eq!(out.sequences(), [1, 2, 5, 6]);
}

#[test]
fn an_answer_that_makes_progress_starts_the_retries_over() {
    let mut arb = Arbiter::new(ArbiterConfig {
        max_retries: 1,
        request_timeout_ns: 1_000,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(10, 1), 0, &mut out);
    assert_eq!(out.take_requests(), [(2, 8)]);
    arb.on_timer(1_000, &mut out);
    assert_eq!(out.take_requests(), [(2, 8)], "the one retry");
    // Half the answer arrives: retries start over for the rest.
    arb.on_packet(Line::Recovery, &packet(2, 4), 1_500, &mut out);
    arb.on_timer(2_000, &mut out);
    assert_eq!(out.take_requests(), [(6, 4)]);
    arb.on_timer(3_000, &mut out);
    assert!(out.requests.is_empty());
    assert_eq!(out.events.last(), Some(&Event::Message(10, Line::A)));
    assert!(out.events.contains(&Event::Unrecoverable(6, 4)));
    assert_eq!(arb.counters().unrecoverable, 4);
}

#[test]
fn a_full_reorder_store_declares_the_oldest_gap_unrecoverable() {
    let mut arb = Arbiter::new(ArbiterConfig {
        max_reorder_packets: 2,
        gap_wait_ns: u64::MAX / 2,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(3, 1), 1, &mut out); // 2 missing
    arb.on_packet(Line::A, &packet(5, 1), 2, &mut out); // 4 missing
    assert_eq!(arb.stored_packets(), 2);
    arb.on_packet(Line::A, &packet(6, 1), 3, &mut out); // no room
    assert_eq!(
        out.events,
        [
            Event::Message(1, Line::A),
            Event::Unrecoverable(2, 1),
            Event::Message(3, Line::A),
        ]
    );
    assert_eq!(arb.stored_packets(), 2, "5 and 6 wait for 4");
    let c = arb.counters();
    assert_eq!((c.reorder_overflow, c.unrecoverable), (1, 1));
    arb.on_packet(Line::B, &packet(4, 1), 4, &mut out);
    assert_eq!(out.sequences(), [1, 3, 4, 5, 6]);
}

#[test]
fn a_packet_larger_than_the_reorder_store_skips_the_gap_before_it() {
    let mut arb = Arbiter::new(ArbiterConfig {
        reorder_bytes: 100,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(4, 20), 1, &mut out);
    assert_eq!(out.events[1], Event::Unrecoverable(2, 2));
    assert_eq!(out.sequences(), [vec![1], (4..24).collect()].concat());
    assert_eq!(arb.counters().reorder_overflow, 1);
    // A bigger first packet with no gap known yet: the same.
    let mut arb = Arbiter::new(ArbiterConfig {
        reorder_bytes: 100,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(3, 20), 0, &mut out);
    assert_eq!(out.events[0], Event::Unrecoverable(1, 2));
    assert_eq!(out.sequences(), (3..23).collect::<Vec<_>>());
    let c = arb.counters();
    assert_eq!((c.gaps, c.gap_messages, c.unrecoverable), (1, 2, 2));
}

#[test]
fn the_reorder_ring_reuses_space_as_packets_are_delivered() {
    // Room for about three packets at a time; thousands pass through.
    let p = packet(1, 5);
    let mut arb = Arbiter::new(ArbiterConfig {
        reorder_bytes: p.len() * 3 + 10,
        gap_wait_ns: u64::MAX / 2,
        ..config()
    });
    let mut out = Recorder::default();
    let mut seq = 1;
    for round in 0..1_000u64 {
        // One packet lost on A, the next two arrive ahead, then B fills.
        arb.on_packet(Line::A, &packet(seq + 5, 5), round, &mut out);
        arb.on_packet(Line::A, &packet(seq + 10, 5), round, &mut out);
        arb.on_packet(Line::B, &packet(seq, 5), round, &mut out);
        seq += 15;
    }
    assert_eq!(out.sequences(), (1..seq).collect::<Vec<_>>());
    let c = arb.counters();
    assert_eq!((c.reorder_overflow, c.unrecoverable), (0, 0));
    assert_eq!(c.recovered, 5 * 1_000);
}

/// Settings under which changes are confirmed by 4 packets after 100 ns
/// of silence.
fn confirming() -> ArbiterConfig {
    ArbiterConfig {
        gap_wait_ns: u64::MAX / 2,
        confirm_packets: 4,
        confirm_quiet_ns: 100,
        ..config()
    }
}

#[test]
fn another_session_is_followed_only_once_confirmed_on_both_lines_while_the_old_is_silent() {
    let mut arb = Arbiter::new(confirming());
    let mut out = Recorder::default();
    let s2 = session("SESSION02");
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 2), 1, &mut out);
    arb.on_packet(Line::A, &packet(5, 1), 2, &mut out); // 3, 4 missing
                                                        // One 20-byte heartbeat of another session changes nothing.
    arb.on_packet(Line::A, &moldudp64::heartbeat(s2, 1), 3, &mut out);
    assert_eq!(arb.session(), Some(s1()));
    // A run of it on both lines, but the old session spoke 2 ns ago.
    for (i, line) in [Line::A, Line::B, Line::A, Line::B].into_iter().enumerate() {
        arb.on_packet(
            line,
            &packet_of(s2, 1 + i as u64 / 2, 1),
            4 + i as u64,
            &mut out,
        );
    }
    assert_eq!(arb.session(), Some(s1()));
    // The old session goes on: the evidence starts over.
    arb.on_packet(Line::A, &packet(6, 1), 8, &mut out);
    // Silence, then a run on both lines confirms the new session.
    for (i, line) in [Line::A, Line::B, Line::A, Line::B].into_iter().enumerate() {
        arb.on_packet(
            line,
            &packet_of(s2, 3 + i as u64 / 2, 1),
            500 + i as u64,
            &mut out,
        );
    }
    assert_eq!(arb.session(), Some(s2));
    // What came before the confirming packet is a gap, filled as usual.
    arb.on_packet(Line::A, &packet_of(s2, 1, 3), 504, &mut out);
    // A straggler of the old session is not a change back.
    arb.on_packet(Line::B, &packet(3, 3), 505, &mut out);
    assert_eq!(
        out.events,
        [
            Event::Message(1, Line::A),
            Event::Message(2, Line::A),
            Event::Unrecoverable(3, 2),
            Event::Message(5, Line::A),
            Event::Message(6, Line::A),
            Event::SessionChanged(s1(), s2),
            Event::Message(1, Line::A),
            Event::Message(2, Line::A),
            Event::Message(3, Line::A),
            Event::Message(4, Line::B),
        ]
    );
    let c = arb.counters();
    assert_eq!((c.session_changes, c.other_session), (1, 1 + 4 + 3 + 1));
    assert_eq!((arb.stored_packets(), arb.open_gaps()), (0, 0));
}

#[test]
fn another_session_on_one_line_only_is_never_followed() {
    let mut arb = Arbiter::new(confirming());
    let mut out = Recorder::default();
    let s2 = session("SESSION02");
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 1), 1, &mut out);
    for i in 0..1000 {
        arb.on_packet(Line::A, &packet_of(s2, 1 + i, 1), 1000 + i, &mut out);
    }
    assert_eq!(arb.session(), Some(s1()));
    assert_eq!(arb.counters().other_session, 1000);
    arb.on_packet(Line::B, &packet(2, 1), 3000, &mut out);
    assert_eq!(out.sequences(), [1, 2]);
}

#[test]
fn after_its_end_another_session_is_followed_at_once() {
    let mut arb = Arbiter::new(confirming());
    let mut out = Recorder::default();
    let s2 = session("SESSION02");
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::A, &moldudp64::end_of_session(s1(), 3), 1, &mut out);
    arb.on_packet(Line::A, &packet_of(s2, 1, 1), 2, &mut out);
    assert_eq!(
        out.events,
        [
            Event::Message(1, Line::A),
            Event::Message(2, Line::A),
            Event::EndOfSession,
            Event::SessionChanged(s1(), s2),
            Event::Message(1, Line::A),
        ]
    );
}

#[test]
fn one_end_of_session_on_one_line_does_not_end_a_two_line_session() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 2), 1, &mut out);
    arb.on_packet(Line::B, &moldudp64::end_of_session(s1(), 3), 2, &mut out);
    arb.on_packet(Line::A, &packet(3, 2), 3, &mut out);
    arb.on_packet(Line::B, &packet(3, 2), 4, &mut out);
    assert!(!arb.is_ended());
    assert_eq!(out.sequences(), [1, 2, 3, 4]);
    assert_eq!(arb.counters().unconfirmed_ends, 1);
    // The genuine end, on both lines.
    arb.on_packet(Line::A, &moldudp64::end_of_session(s1(), 5), 5, &mut out);
    arb.on_packet(Line::B, &moldudp64::end_of_session(s1(), 5), 6, &mut out);
    assert!(arb.is_ended());
    assert_eq!(out.events.last(), Some(&Event::EndOfSession));
}

#[test]
fn a_configured_session_ignores_every_other() {
    let mut arb = Arbiter::new(ArbiterConfig {
        expected_session: Some(s1()),
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet_of(session("OTHER"), 1, 3), 0, &mut out);
    arb.on_packet(Line::A, &packet(1, 2), 1, &mut out);
    arb.on_packet(Line::B, &packet_of(session("OTHER"), 3, 3), 2, &mut out);
    assert_eq!(out.sequences(), [1, 2]);
    let c = arb.counters();
    assert_eq!((c.other_session, c.session_changes), (2, 0));
}

#[test]
fn end_of_session_is_reported_once_and_in_sequence() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    // B's end of session says 3 and 4 exist: it waits for them.
    arb.on_packet(Line::B, &moldudp64::end_of_session(s1(), 5), 1, &mut out);
    assert_eq!(out.take_requests(), [(3, 2)]);
    assert!(!arb.is_ended());
    arb.on_packet(Line::A, &packet(3, 2), 2, &mut out);
    arb.on_packet(Line::A, &moldudp64::end_of_session(s1(), 5), 3, &mut out);
    arb.on_packet(Line::B, &moldudp64::end_of_session(s1(), 5), 4, &mut out);
    assert_eq!(
        out.events.last_chunk::<2>(),
        Some(&[Event::Message(4, Line::A), Event::EndOfSession])
    );
    assert_eq!(
        out.events
            .iter()
            .filter(|e| **e == Event::EndOfSession)
            .count(),
        1
    );
    assert!(arb.is_ended());
    assert_eq!(arb.counters().end_of_session, 1);
}

#[test]
fn end_of_session_comes_after_a_packet_delivered_around_stored_messages() {
    let mut arb = Arbiter::new(ArbiterConfig {
        gap_wait_ns: 1_000,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 1), 0, &mut out);
    arb.on_packet(Line::A, &packet(3, 1), 1, &mut out); // stored, 2 missing
    arb.on_packet(Line::A, &moldudp64::end_of_session(s1(), 4), 2, &mut out);
    // One packet fills 2 and carries 3 (stored first) and more.
    arb.on_packet(Line::Recovery, &packet(2, 5), 3, &mut out);
    let want: Vec<Event> = [
        (1, Line::A),
        (2, Line::Recovery),
        (3, Line::A),
        (4, Line::Recovery),
        (5, Line::Recovery),
        (6, Line::Recovery),
    ]
    .into_iter()
    .map(|(s, l)| Event::Message(s, l))
    .chain([Event::EndOfSession])
    .collect();
    assert_eq!(out.events, want);
    arb.on_packet(Line::B, &packet(7, 1), 4, &mut out);
    assert_eq!(out.events.len(), want.len(), "nothing after the end");
    assert_eq!(arb.counters().after_end, 1);
}

#[test]
fn sequence_numbers_that_jump_backwards_are_counted_and_dropped() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 5), 0, &mut out);
    arb.on_packet(Line::A, &packet(6, 5), 1, &mut out);
    arb.on_packet(Line::A, &packet(2, 3), 2, &mut out); // stale
    arb.on_packet(Line::B, &packet(1, 5), 3, &mut out); // B lags: not backwards
    arb.on_packet(Line::B, &packet(6, 5), 4, &mut out);
    assert_eq!(out.sequences(), (1..=10).collect::<Vec<_>>());
    let c = arb.counters();
    assert_eq!(c.backwards, 1);
    assert_eq!((c.duplicate_packets, c.duplicate_messages), (3, 13));
}

#[test]
fn an_end_of_session_one_line_lost_is_believed_after_silence_or_at_the_end_of_input() {
    let config = ArbiterConfig {
        confirm_quiet_ns: 100,
        ..config()
    };
    let mut arb = Arbiter::new(config.clone());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 2), 1, &mut out);
    arb.on_packet(Line::A, &moldudp64::end_of_session(s1(), 3), 2, &mut out);
    assert!(!arb.is_ended());
    // The timer for it is due when the session has been silent long
    // enough: since its last new message, at 0 (B's copy brought none).
    assert_eq!(arb.next_deadline(), Some(100));
    arb.on_timer(99, &mut out);
    assert!(!arb.is_ended());
    arb.on_timer(100, &mut out);
    assert!(arb.is_ended());
    assert_eq!(out.events.last(), Some(&Event::EndOfSession));

    // A file ends right after it: finish() believes it.
    let mut arb = Arbiter::new(config);
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 2), 1, &mut out);
    arb.on_packet(Line::A, &moldudp64::end_of_session(s1(), 3), 2, &mut out);
    arb.finish(&mut out);
    assert!(arb.is_ended());
    assert_eq!(arb.counters().unconfirmed_ends, 1);
}

#[test]
fn forged_packets_far_ahead_never_displace_the_genuine_sequence() {
    let mut arb = Arbiter::new(ArbiterConfig {
        max_jump: 1000,
        ..confirming()
    });
    let mut out = Recorder::default();
    let mut now = 0;
    let mut forged = 1u64 << 63;
    for first in (1..=500).step_by(5) {
        for line in [Line::A, Line::B] {
            arb.on_packet(line, &packet(first, 5), now, &mut out);
            now += 1;
        }
        // Far-ahead runs on both lines, heartbeats and ends of session
        // among them.
        for _ in 0..20 {
            for line in [Line::A, Line::B] {
                arb.on_packet(line, &packet(forged, 1), now, &mut out);
                arb.on_packet(line, &moldudp64::heartbeat(s1(), forged + 1), now, &mut out);
                arb.on_packet(
                    line,
                    &moldudp64::end_of_session(s1(), forged + 1),
                    now,
                    &mut out,
                );
                now += 1;
            }
            forged += 1;
        }
    }
    assert_eq!(out.sequences(), (1..=500).collect::<Vec<_>>());
    assert!(out.requests.is_empty());
    let c = arb.counters();
    assert_eq!(c.suspect_jumps, 100 * 20 * 2 * 3);
    assert_eq!((c.jumps, c.gaps, c.unrecoverable), (0, 0, 0));
    assert!(!arb.is_ended());
}

#[test]
fn a_jump_the_feed_keeps_to_stands_once_the_genuine_sequence_stops() {
    let mut arb = Arbiter::new(ArbiterConfig {
        max_jump: 1000,
        gap_wait_ns: 0,
        confirm_packets: 8,
        ..confirming()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 5), 0, &mut out);
    arb.on_packet(Line::B, &packet(1, 5), 1, &mut out);
    arb.on_packet(Line::A, &packet(6, 5), 2, &mut out);
    arb.on_packet(Line::B, &packet(6, 5), 3, &mut out);
    // The feed goes on from 5000, on both lines, and never comes back.
    for i in 0..4 {
        arb.on_packet(Line::A, &packet(5_000 + i, 1), 1_000 + i, &mut out);
        arb.on_packet(Line::B, &packet(5_000 + i, 1), 1_000 + i, &mut out);
    }
    let c = arb.counters();
    assert_eq!((c.suspect_jumps, c.jumps), (7, 1));
    assert!(out.events.contains(&Event::Unrecoverable(11, 5_000 - 11)));
    // The run's own earlier packets are an ordinary gap, requested.
    assert_eq!(out.take_requests(), [(5_000, 3)]);
    arb.on_packet(Line::Recovery, &packet(5_000, 3), 1_010, &mut out);
    let want: Vec<u64> = (1..=10).chain(5_000..5_004).collect();
    assert_eq!(out.sequences(), want);
}

#[test]
fn a_random_flood_publishes_nothing_twice_and_nothing_forged() {
    // 100,000 random datagrams among a 3,000-message A/B day: random
    // bytes, and well-formed packets of random sessions (the genuine one
    // included) at random sequence numbers.
    let mut arb = Arbiter::new(confirming());
    let mut out = Recorder::default();
    let mut rng = Rng(7);
    let names = [s1(), session("SESSION02"), session("X"), session("")];
    let mut now = 0;
    let mut flood = 0;
    for first in (1..=3_000).step_by(3) {
        for line in [Line::A, Line::B] {
            arb.on_packet(line, &packet(first, 3), now, &mut out);
            now += 1;
        }
        for _ in 0..100 {
            let line = [Line::A, Line::B, Line::Recovery][(rng.next() % 3) as usize];
            let d = if rng.next() % 2 == 0 {
                let len = (rng.next() % 80) as usize;
                (0..len).map(|_| rng.next() as u8).collect()
            } else {
                let name = names[(rng.next() % 4) as usize];
                let seq = match rng.next() % 3 {
                    0 => rng.next(),
                    1 => (1 << 63) | (rng.next() % 1_000),
                    _ => u64::MAX - rng.next() % 1_000,
                };
                let seq = if name == s1() {
                    seq
                } else {
                    rng.next() % 10_000
                };
                match rng.next() % 3 {
                    0 => moldudp64::heartbeat(name, seq).to_vec(),
                    1 => moldudp64::end_of_session(name, seq).to_vec(),
                    _ => packet_of(name, seq.min(u64::MAX - 3), 1 + rng.next() % 3),
                }
            };
            arb.on_packet(line, &d, now, &mut out);
            flood += 1;
        }
    }
    assert_eq!(flood, 100_000);
    assert_eq!(out.sequences(), (1..=3_000).collect::<Vec<_>>());
    assert!(out
        .events
        .iter()
        .all(|e| matches!(e, Event::Message(_, Line::A | Line::B))));
    let c = arb.counters();
    assert_eq!((c.session_changes, c.jumps, c.unrecoverable), (0, 0, 0));
    assert!(c.other_session > 0 && c.suspect_jumps > 0 && c.malformed > 0);
}

#[test]
fn malformed_packets_are_counted_and_change_nothing() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(1, 2), 0, &mut out);
    let good = packet(3, 3);
    let mut lying_count = good.clone();
    lying_count[19] = 4;
    let mut overrun = good.clone();
    overrun[21] = 200; // first block's length
    let mut sequence_zero = packet(1, 1);
    sequence_zero[10..18].copy_from_slice(&0u64.to_be_bytes());
    let mut overflowing = packet(1, 3);
    overflowing[10..18].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
    // Ends just past MAX_SEQUENCE: no arithmetic on it could be trusted.
    let mut at_the_top = packet(1, 3);
    at_the_top[10..18].copy_from_slice(&(MAX_SEQUENCE - 1).to_be_bytes());
    let bad: Vec<Vec<u8>> = vec![
        vec![],
        good[..19].to_vec(),
        good[..good.len() - 1].to_vec(),
        lying_count,
        overrun,
        [good.clone(), vec![0]].concat(),
        sequence_zero,
        overflowing,
        at_the_top,
    ];
    for (i, b) in bad.iter().enumerate() {
        arb.on_packet(Line::B, b, 1 + i as u64, &mut out);
    }
    let c = *arb.counters();
    assert_eq!(c.malformed, bad.len() as u64);
    assert_eq!(
        c.malformed_by,
        MalformedCounters {
            short_header: 2,
            count_mismatch: 2,
            bad_block_length: 2,
            sequence_zero: 1,
            sequence_overflow: 2,
        }
    );
    assert_eq!((c.messages, c.gaps, c.requests_sent), (2, 0, 0));
    assert_eq!(arb.expected_sequence(), 3);
    arb.on_packet(Line::A, &good, 100, &mut out);
    assert_eq!(out.sequences(), (1..=5).collect::<Vec<_>>());
}

#[test]
fn late_join_starts_at_the_first_sequence_seen() {
    let mut arb = Arbiter::new(ArbiterConfig {
        start_sequence: None,
        ..config()
    });
    let mut out = Recorder::default();
    assert_eq!(arb.session(), None);
    arb.on_packet(Line::B, &packet(1_000, 2), 0, &mut out);
    arb.on_packet(Line::A, &packet(999, 4), 1, &mut out);
    assert_eq!(out.sequences(), [1_000, 1_001, 1_002]);
    assert!(out.requests.is_empty());
    assert_eq!(arb.counters().gaps, 0);
    // A heartbeat can start it too; a far-ahead packet after it is
    // suspect.
    let mut arb = Arbiter::new(ArbiterConfig {
        start_sequence: None,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &moldudp64::heartbeat(s1(), 50), 0, &mut out);
    assert_eq!(arb.expected_sequence(), 50);
    arb.on_packet(Line::A, &packet(1 << 40, 1), 1, &mut out);
    arb.on_packet(Line::A, &packet(50, 3), 2, &mut out);
    assert_eq!(out.sequences(), [50, 51, 52]);
    assert_eq!(arb.counters().suspect_jumps, 1);
}

#[test]
fn a_garbage_heartbeat_first_gives_way_to_the_first_session_with_messages() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    let garbage = session("GARBAGE");
    arb.on_packet(
        Line::A,
        &moldudp64::heartbeat(garbage, 1 << 40),
        0,
        &mut out,
    );
    assert_eq!(arb.session(), None, "not locked by a heartbeat");
    arb.on_packet(Line::A, &packet(1, 2), 1, &mut out);
    arb.on_packet(Line::B, &packet(1, 2), 2, &mut out);
    assert_eq!(arb.session(), Some(s1()));
    // Now locked: garbage of any session with messages is dropped.
    arb.on_packet(Line::A, &packet_of(garbage, 3, 1), 3, &mut out);
    arb.on_packet(Line::A, &packet(3, 1), 4, &mut out);
    assert_eq!(
        out.events,
        [
            Event::Message(1, Line::A),
            Event::Message(2, Line::A),
            Event::Message(3, Line::A),
        ]
    );
    assert_eq!(arb.counters().other_session, 1);

    // Joining late, the session that replaces it starts where it is met.
    let mut arb = Arbiter::new(ArbiterConfig {
        start_sequence: None,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &moldudp64::heartbeat(garbage, 7), 0, &mut out);
    arb.on_packet(Line::A, &packet(1_000, 2), 1, &mut out);
    arb.on_packet(Line::B, &packet(1_000, 2), 2, &mut out);
    assert_eq!(out.sequences(), [1_000, 1_001]);
    assert_eq!((arb.counters().gaps, arb.counters().unrecoverable), (0, 0));
}

#[test]
fn starting_from_one_requests_what_came_before_the_first_packet() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(3_500, 1), 0, &mut out);
    assert_eq!(
        out.take_requests(),
        [(1, 1000), (1001, 1000), (2001, 1000), (3001, 499)]
    );
}

#[test]
fn requests_name_the_session_adopted() {
    let mut arb = Arbiter::new(config());
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet_of(session("X"), 3, 1), 0, &mut out);
    assert_eq!(
        out.requests,
        [Request {
            session: session("X"),
            sequence: 1,
            count: 2
        }]
    );
}

#[test]
fn configurations_are_validated_with_readable_errors() {
    assert_eq!(ArbiterConfig::default().validate(), Ok(()));
    let bad = ArbiterConfig {
        max_request_messages: 0,
        ..ArbiterConfig::default()
    };
    assert_eq!(
        bad.validate().unwrap_err().to_string(),
        "arbiter setting max_request_messages must be at least 1"
    );
    let bad = ArbiterConfig {
        start_sequence: Some(0),
        ..ArbiterConfig::default()
    };
    assert_eq!(bad.validate(), Err(ArbiterConfigError::StartSequenceZero));
    let bad = ArbiterConfig {
        max_request_messages: u16::MAX,
        ..ArbiterConfig::default()
    };
    assert_eq!(bad.validate(), Err(ArbiterConfigError::RequestTooLarge));
    // Clamped rather than trusted.
    let mut arb = Arbiter::new(ArbiterConfig {
        max_request_messages: 0,
        reorder_bytes: 0,
        max_reorder_packets: 0,
        ..config()
    });
    let mut out = Recorder::default();
    arb.on_packet(Line::A, &packet(3, 1), 0, &mut out);
    assert_eq!(out.sequences(), [3]);
}

// ---------------------------------------------------------------------
// Simulation: lines with loss, duplication and reordering, a re-request
// server, the arbiter driven by its own deadlines.

/// What happens to the session on the way in.
#[derive(Debug, Clone)]
struct Scenario {
    messages: u64,
    /// Messages per packet, cycled.
    packing: Vec<u8>,
    drop_a: f64,
    drop_b: f64,
    duplicate: f64,
    swap: f64,
    /// Chance the server answers a request.
    answer: f64,
    /// Delay of an answer, ns.
    answer_delay: u64,
    /// Nanoseconds between packet arrivals, cycled.
    spacing: Vec<u16>,
    seed: u64,
    max_reorder_packets: usize,
    gap_wait_ns: u64,
    heartbeat_every: usize,
}

fn scenario(answer: impl Strategy<Value = f64>) -> impl Strategy<Value = Scenario> {
    (
        (
            1u64..400,
            proptest::collection::vec(1u8..8, 1..6),
            0.0..0.6f64,
            0.0..0.6f64,
            0.0..0.2f64,
            0.0..0.3f64,
        ),
        (
            answer,
            0u64..50_000,
            proptest::collection::vec(0u16..5_000, 1..6),
            any::<u64>(),
            prop_oneof![Just(3usize), Just(4096)],
            prop_oneof![Just(0u64), Just(2_000), Just(100_000)],
            1usize..20,
        ),
    )
        .prop_map(
            |(
                (messages, packing, drop_a, drop_b, duplicate, swap),
                (
                    answer,
                    answer_delay,
                    spacing,
                    seed,
                    max_reorder_packets,
                    gap_wait_ns,
                    heartbeat_every,
                ),
            )| Scenario {
                messages,
                packing,
                drop_a,
                drop_b,
                duplicate,
                swap,
                answer,
                answer_delay,
                spacing,
                seed,
                max_reorder_packets,
                gap_wait_ns,
                heartbeat_every,
            },
        )
}

/// A small deterministic PRNG (splitmix64) for the simulated network.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }
}

struct Outcome {
    out: Recorder,
    counters: ArbiterCounters,
    /// Messages in every well-formed data packet handed to the arbiter.
    messages_in: u64,
}

fn simulate(sc: &Scenario) -> Outcome {
    let mut rng = Rng(sc.seed);
    // The exchange's packets.
    let mut packets: Vec<(u64, u64)> = Vec::new();
    let mut seq = 1;
    let mut k = 0;
    while seq <= sc.messages {
        let n = u64::from(sc.packing[k % sc.packing.len()]).min(sc.messages + 1 - seq);
        packets.push((seq, n));
        seq += n;
        k += 1;
    }
    let end = sc.messages + 1;
    // Each line: loss, duplication, swaps of neighbours, heartbeats.
    let line = |drop: f64, rng: &mut Rng| {
        let mut v: Vec<Vec<u8>> = Vec::new();
        for (i, &(first, n)) in packets.iter().enumerate() {
            if !rng.chance(drop) {
                v.push(packet(first, n));
                if rng.chance(sc.duplicate) {
                    v.push(packet(first, n));
                }
            }
            if i % sc.heartbeat_every == 0 {
                v.push(moldudp64::heartbeat(s1(), first + n).to_vec());
            }
        }
        for i in 1..v.len() {
            if rng.chance(sc.swap) {
                v.swap(i - 1, i);
            }
        }
        VecDeque::from(v)
    };
    let mut a = line(sc.drop_a, &mut rng);
    let mut b = line(sc.drop_b, &mut rng);
    // The end of session always gets through, on both lines.
    a.push_back(moldudp64::end_of_session(s1(), end).to_vec());
    b.push_back(moldudp64::end_of_session(s1(), end).to_vec());

    let mut arb = Arbiter::new(ArbiterConfig {
        max_reorder_packets: sc.max_reorder_packets,
        gap_wait_ns: sc.gap_wait_ns,
        request_timeout_ns: 100_000,
        max_request_messages: 16,
        requests_per_second: 100_000,
        ..config()
    });
    let mut out = Recorder::default();
    let mut answers: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut now = 0u64;
    let mut messages_in = 0u64;
    let mut k = 0;
    let count_in = |d: &[u8]| {
        let p = moldudp64::Packet::parse_strict(d).unwrap();
        u64::from(p.message_count())
    };
    for step in 0..1_000_000 {
        // Serve the requests made so far.
        for r in out.requests.drain(..) {
            if rng.chance(sc.answer) {
                let first = r.sequence.max(1);
                let last = (r.sequence + u64::from(r.count)).min(end);
                let mut s = first;
                while s < last {
                    let n = (last - s).min(5);
                    answers.push_back((now + sc.answer_delay, packet(s, n)));
                    s += n;
                }
            }
        }
        let lines_left = !a.is_empty() || !b.is_empty();
        let next_answer = answers.front().map(|x| x.0);
        if lines_left {
            now += u64::from(sc.spacing[k % sc.spacing.len()]);
            k += 1;
        } else {
            let next = [arb.next_deadline(), next_answer]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) => now = now.max(t),
                None => break,
            }
        }
        while answers.front().is_some_and(|x| x.0 <= now) {
            let (_, d) = answers.pop_front().unwrap();
            messages_in += count_in(&d);
            arb.on_packet(Line::Recovery, &d, now, &mut out);
        }
        if arb.next_deadline().is_some_and(|t| t <= now) {
            arb.on_timer(now, &mut out);
        }
        if lines_left {
            let from_a = b.is_empty() || (!a.is_empty() && rng.next() % 2 == 0);
            let (l, q) = if from_a {
                (Line::A, &mut a)
            } else {
                (Line::B, &mut b)
            };
            if let Some(d) = q.pop_front() {
                messages_in += count_in(&d);
                arb.on_packet(l, &d, now, &mut out);
            }
        }
        assert!(
            step < 999_999,
            "the simulation did not settle: now {now}, deadline {:?}, gaps {}, stored {}, expected {}, {:?}",
            arb.next_deadline(),
            arb.open_gaps(),
            arb.stored_packets(),
            arb.expected_sequence(),
            arb.counters()
        );
    }
    assert_eq!(arb.stored_packets(), 0, "nothing left in the store");
    assert_eq!(arb.open_gaps(), 0, "no gap left open");
    Outcome {
        out,
        counters: *arb.counters(),
        messages_in,
    }
}

/// Every sequence number 1..=n is delivered or reported unrecoverable,
/// exactly once and in order; the counters agree with what the sink saw.
fn check_coverage(o: &Outcome, n: u64) -> Result<u64, TestCaseError> {
    let mut next = 1u64;
    let mut delivered = 0u64;
    let mut unrecoverable = 0u64;
    let mut ended = 0;
    let mut wins = [0u64; 3];
    for e in &o.out.events {
        match *e {
            Event::Message(s, l) => {
                prop_assert_eq!(s, next, "message out of order");
                next += 1;
                delivered += 1;
                wins[l as usize] += 1;
            }
            Event::Unrecoverable(first, count) => {
                prop_assert_eq!(first, next, "unrecoverable range out of order");
                prop_assert!(count > 0);
                next += count;
                unrecoverable += count;
            }
            Event::EndOfSession => {
                prop_assert_eq!(next, n + 1, "end of session before the end");
                ended += 1;
            }
            Event::SessionChanged(..) => prop_assert!(false, "no session change"),
        }
    }
    prop_assert_eq!(next, n + 1, "every sequence number accounted for");
    prop_assert_eq!(ended, 1);
    let c = &o.counters;
    prop_assert_eq!(c.messages, delivered);
    prop_assert_eq!(c.unrecoverable, unrecoverable);
    prop_assert_eq!([c.wins_a, c.wins_b, c.wins_recovery], wins);
    prop_assert_eq!(c.messages + c.duplicate_messages, o.messages_in);
    prop_assert_eq!(c.end_of_session, 1);
    prop_assert_eq!(c.malformed, 0);
    prop_assert_eq!(c.recovered + c.unrecoverable, c.gap_messages);
    Ok(unrecoverable)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A server that always answers: everything is delivered, exactly once,
    /// in order, whatever the lines did.
    #[test]
    fn every_message_is_delivered_once_in_order_when_the_server_answers(sc in scenario(Just(1.0))) {
        let o = simulate(&sc);
        let unrecoverable = check_coverage(&o, sc.messages)?;
        if sc.max_reorder_packets > 1_000 {
            prop_assert_eq!(unrecoverable, 0);
            prop_assert_eq!(o.counters.reorder_overflow, 0);
        }
    }

    /// A server that answers sometimes or never: what is delivered is in
    /// order and exactly once, the rest is reported unrecoverable, and
    /// the counters add up.
    #[test]
    fn lost_answers_end_in_unrecoverable_gaps_never_in_disorder(sc in scenario(0.0..1.0f64)) {
        let o = simulate(&sc);
        check_coverage(&o, sc.messages)?;
    }
}

// ---------------------------------------------------------------------
// No allocation after construction.

/// A sink that keeps only counts, so the measurement sees the arbiter.
#[derive(Default)]
struct Counting {
    messages: u64,
    last: u64,
    requests: u64,
    unrecoverable: u64,
}

impl ArbiterSink for Counting {
    fn message(&mut self, sequence: u64, _line: Line, _data: &[u8]) {
        assert!(sequence > self.last);
        self.last = sequence;
        self.messages += 1;
    }
    fn request(&mut self, request: &Request) {
        assert!(request.count > 0);
        self.requests += 1;
    }
    fn unrecoverable(&mut self, _first: u64, count: u64) {
        self.unrecoverable += count;
    }
}

#[test]
fn arbitration_and_recovery_allocate_nothing_after_construction() {
    // Every datagram built beforehand; the loop only hands them over.
    let n_packets = 20_000u64;
    let per = 4u64;
    let data: Vec<Vec<u8>> = (0..n_packets).map(|i| packet(1 + i * per, per)).collect();
    let mut arb = Arbiter::new(ArbiterConfig {
        max_reorder_packets: 64,
        max_retries: 0,
        request_timeout_ns: 1_000,
        ..config()
    });
    let mut sink = Counting::default();
    let mut rng = Rng(7);
    let info = measure(|| {
        let mut now = 0u64;
        let mut answer: Option<usize> = None;
        for (i, d) in data.iter().enumerate() {
            now += 100;
            let lost_a = rng.chance(0.05);
            let lost_b = rng.chance(0.05);
            if !lost_a {
                arb.on_packet(Line::A, d, now, &mut sink);
            }
            if !lost_b {
                arb.on_packet(Line::B, d, now, &mut sink);
            }
            if let Some(j) = answer.take() {
                arb.on_packet(Line::Recovery, &data[j], now + 50, &mut sink);
            }
            if lost_a && lost_b && i % 2 == 0 {
                // The server answers half of what both lines lost, once
                // the next packet has revealed the gap.
                answer = Some(i);
            }
            if i % 50 == 0 {
                arb.on_packet(
                    Line::A,
                    &moldudp64::heartbeat(s1(), 1 + (i as u64 + 1) * per),
                    now,
                    &mut sink,
                );
            }
            if arb.next_deadline().is_some_and(|t| t <= now) {
                arb.on_timer(now, &mut sink);
            }
        }
        now += 1_000_000;
        arb.on_timer(now, &mut sink);
        arb.on_timer(now + 1_000_000, &mut sink);
    });
    assert_eq!(info.count_total, 0, "{info:?}");
    let c = arb.counters();
    assert!(
        c.gaps > 0 && c.recovered > 0 && c.unrecoverable > 0,
        "{c:?}"
    );
    assert_eq!(sink.messages + sink.unrecoverable, n_packets * per);
    assert_eq!(c.messages, sink.messages);
}
