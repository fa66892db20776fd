//! Fuzz targets of mdbus's datagram streams, as plain functions of the
//! input bytes.
//!
//! cargo-fuzz runs them under libFuzzer (`fuzz_targets/`); the stable test
//! suite includes this file (`tests/fuzz_datagram.rs`) and runs them over the seed
//! corpus and random inputs. Each one panics only when a property is
//! broken.

use mdbus::recovery::frame::{
    self, Frame, Limits, DATAGRAM_HEADER_LEN, KIND_MAC, MAC_LEN, MAX_SEQ,
};
use mdbus::recovery::mac::{Key, Mac};
use mdbus::recovery::{Line, PublisherConfig, PublisherCore, SubscriberConfig, SubscriberCore};
use mdbus::Event;

const STREAM: u32 = 0x5EED;

/// The frame decoder: never panics; what it accepts is consistent with
/// the bytes (length, counts, consecutive sequence numbers within
/// bounds, fragments that fit); a MAC check never panics, and a sealed
/// copy of an accepted datagram verifies and decodes to the same frame.
pub fn frame(data: &[u8]) {
    let limits = Limits {
        stream_id: STREAM,
        max_datagram: 2048,
        max_message: 4096,
    };
    let key = Key([0x42; 32]);
    let mut mac = Mac::new(key, 4096);
    let _ = mac.verify(data);
    let Ok(d) = frame::decode(data, &limits) else {
        return;
    };
    let mac_len = if data[5] & KIND_MAC != 0 { MAC_LEN } else { 0 };
    assert_eq!(
        u32::from_le_bytes(data[12..16].try_into().unwrap()) as usize,
        data.len(),
        "length field"
    );
    check(&d.frame, data.len() - mac_len, &limits);
    if mac_len == 0 {
        let sealed = mac.seal(data).to_vec();
        mac.verify(&sealed).expect("a sealed datagram verifies");
        let again = frame::decode(
            &sealed,
            &Limits {
                max_datagram: 4096,
                ..limits
            },
        )
        .expect("a sealed datagram decodes");
        assert_eq!(format!("{:?}", again.frame), format!("{:?}", d.frame));
    }
}

fn check(f: &Frame<'_>, len: usize, limits: &Limits) {
    match *f {
        Frame::Messages {
            first_seq,
            messages,
            ..
        } => {
            assert!((1..=MAX_SEQ).contains(&first_seq));
            let mut bytes = DATAGRAM_HEADER_LEN;
            for (i, (h, p)) in messages.enumerate() {
                assert_eq!(h.seq, first_seq + i as u64);
                assert!(p.len() <= limits.max_message);
                bytes += mdbus::wire::HEADER_LEN + p.len();
            }
            assert_eq!(bytes, len, "messages fill the datagram");
        }
        Frame::Fragment {
            header,
            fragment,
            bytes,
            ..
        } => {
            assert!(fragment.fits(header.len as usize));
            assert_eq!(bytes.len(), fragment.len_in(header.len as usize));
            assert!(header.len as usize <= limits.max_message);
        }
        Frame::Heartbeat { latest, oldest }
        | Frame::EndOfStream {
            last_seq: latest,
            oldest,
        } => {
            assert!(oldest <= latest && latest <= MAX_SEQ)
        }
        Frame::Request { from, count }
        | Frame::NotAvailable { from, count }
        | Frame::Throttled { from, count } => {
            assert!(from >= 1 && count >= 1 && from + count <= MAX_SEQ + 1)
        }
    }
}

/// The program's input, read a byte at a time (zeros once it runs out).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Payload of message `seq`, recognisable; every fifth is large enough to
/// be fragmented.
fn payload(seq: u64) -> Vec<u8> {
    let len = if seq % 5 == 0 {
        500
    } else {
        (seq % 23) as usize
    };
    (0..len).map(|i| (seq as usize * 7 + i) as u8).collect()
}

/// What the subscriber has delivered so far.
#[derive(Default)]
struct Seen {
    next: u64,
    ended: bool,
}

impl Seen {
    fn see(&mut self, e: Event<'_>, published: u64) {
        match e {
            Event::Message(m) => {
                assert!(!self.ended, "message after the end");
                if self.next != 0 {
                    assert_eq!(m.seq(), self.next, "out of order");
                }
                assert!(m.seq() <= published, "never published");
                assert_eq!(m.payload(), payload(m.seq()), "payload of {}", m.seq());
                self.next = m.seq() + 1;
            }
            Event::Gap { from, to } => {
                assert!(!self.ended);
                if self.next != 0 {
                    assert_eq!(from, self.next, "gap out of order");
                }
                assert!(to > from && to <= published + 1, "gap {from}..{to}");
                self.next = to;
            }
            Event::EndOfStream { last_seq } => {
                assert!(!self.ended, "two ends");
                assert_eq!(
                    last_seq + 1,
                    self.next.max(1),
                    "end before the last message"
                );
                self.ended = true;
            }
            Event::PublisherDown { .. } => {}
            e => panic!("{e:?}"),
        }
    }
}

/// The subscriber core against a genuine publisher and a forger. The input
/// is a configuration (confirm, max_jump) and a program: publish, flush,
/// deliver a queued genuine datagram (possibly twice, possibly out of
/// order, possibly never), answer the subscriber's requests, let time
/// pass, and send forged datagrams (arbitrary bytes, or a genuine datagram
/// with bytes changed) from another source, never `confirm` in a row.
///
/// Checked all along: events come in stream order, each sequence number
/// once (message or gap), every message's payload is the genuine one, the
/// publisher is never taken to have restarted or ended early. At the end
/// the publisher closes, everything is delivered without loss, and the
/// subscriber reaches the end exactly once with every message accounted
/// for.
pub fn subscriber(data: &[u8]) {
    let mut input = Input(data);
    let confirm = 2 + (input.byte() % 3) as u32;
    let max_jump = 1 + input.byte() as u64;
    // Bound by configuration, or to the first source heard; a forger heard
    // before the publisher would be that (docs/SECURITY.md), so then it
    // waits for the first genuine datagram.
    let pinned = input.byte() % 2 == 0;
    let mut p = PublisherCore::new(&PublisherConfig {
        max_message: 600,
        max_datagram: 256,
        retain_messages: 1024,
        retain_bytes: 1 << 20,
        retransmit_rate: 0,
        retransmit_global_rate: 0,
        ..PublisherConfig::new(STREAM, 77)
    })
    .unwrap();
    let mut s = SubscriberCore::new(&SubscriberConfig {
        max_message: 600,
        max_datagram: 256,
        reorder_window: 64,
        reassembly_buffers: 2,
        confirm,
        max_jump,
        ..SubscriberConfig::new(STREAM)
    })
    .unwrap();
    if pinned {
        s.bind(Line::A, 1);
    }
    let mut queue: Vec<Vec<u8>> = Vec::new();
    let mut requests: Vec<Vec<u8>> = Vec::new();
    let mut now = 0u64;
    let mut seen = Seen::default();
    let mut forged_run = 0u32;
    let mut published = 0u64;
    let mut steps = 0;
    while !input.done() && steps < 2_000 {
        steps += 1;
        let op = input.byte();
        let arg = input.byte();
        now += 1_000 * (1 + (op as u64 >> 6));
        match op % 8 {
            0 | 1 => {
                let seq = p.next_seq();
                let body = payload(seq);
                let _ = arg;
                p.publish(&body, None, now, |d: &[u8]| queue.push(d.to_vec()))
                    .unwrap();
                published = seq;
            }
            2 => p.flush(now, |d: &[u8]| queue.push(d.to_vec())),
            3 | 4 if !queue.is_empty() => {
                let i = arg as usize % queue.len().min(4);
                let d = if op % 8 == 3 {
                    queue.remove(i)
                } else {
                    queue[i].clone()
                };
                let _ = s.on_datagram_from(
                    Line::A,
                    1,
                    &d,
                    now,
                    |e| seen.see(e, published),
                    |r| requests.push(r.to_vec()),
                );
                forged_run = 0;
            }
            5 => {
                for r in std::mem::take(&mut requests) {
                    let _ = p.on_datagram_from(9, &r, now, |d: &[u8]| queue.push(d.to_vec()));
                }
            }
            6 if forged_run + 1 < confirm && (pinned || s.epoch().is_some()) => {
                let mut d = match queue.first() {
                    Some(g) if arg % 2 == 0 => g.clone(),
                    _ => (0..arg as usize % 90).map(|i| (i as u8) ^ arg).collect(),
                };
                for _ in 0..(arg % 4) {
                    let at = input.byte() as usize;
                    let v = input.byte();
                    if !d.is_empty() {
                        let n = d.len();
                        d[at % n] = v;
                    }
                }
                let _ = s.on_datagram_from(
                    Line::A,
                    2,
                    &d,
                    now,
                    |e| seen.see(e, published),
                    |r| requests.push(r.to_vec()),
                );
                forged_run += 1;
            }
            _ => {
                s.tick(
                    now,
                    |e| seen.see(e, published),
                    |r| requests.push(r.to_vec()),
                );
                p.tick(now, |d: &[u8]| queue.push(d.to_vec()));
            }
        }
        if queue.len() > 64 {
            // The network loses what waits too long.
            queue.remove(0);
        }
    }
    // The end: the publisher closes; the network stops losing.
    p.close(now, |d: &[u8]| queue.push(d.to_vec()));
    for _ in 0..10_000 {
        if seen.ended {
            break;
        }
        now += 1_000_000;
        for d in std::mem::take(&mut queue) {
            let _ = s.on_datagram_from(
                Line::A,
                1,
                &d,
                now,
                |e| seen.see(e, published),
                |r| requests.push(r.to_vec()),
            );
        }
        for r in std::mem::take(&mut requests) {
            let _ = p.on_datagram_from(9, &r, now, |d: &[u8]| queue.push(d.to_vec()));
        }
        s.tick(
            now,
            |e| seen.see(e, published),
            |r| requests.push(r.to_vec()),
        );
        p.tick(now, |d: &[u8]| queue.push(d.to_vec()));
    }
    assert!(
        seen.ended || published == 0 && s.epoch().is_none(),
        "never ended"
    );
    let c = s.counters();
    if seen.ended && seen.next > 0 {
        assert_eq!(seen.next, published + 1);
    }
    assert_eq!(c.restarts, 0, "{c:?}");
}
