//! Property tests: the decoder and both cores take any bytes without
//! panicking, and whatever reaches a subscriber, what it delivers stays in
//! order and accounts for every sequence number exactly once.

use proptest::prelude::*;
use std::time::Duration;

use super::frame::{self, DatagramHeader, Fragment, Frame, Kind, Limits, DATAGRAM_HEADER_LEN};
use super::publisher::{PublisherConfig, PublisherCore};
use super::sim::{own, payload, Ev, Rng};
use super::subscriber::{Line, SubscriberConfig, SubscriberCore};
use crate::wire::{Header, HEADER_LEN};

const STREAM: u32 = 3;
const MAX_DATAGRAM: usize = 256;
const MAX_MESSAGE: usize = 700;

fn limits() -> Limits {
    Limits {
        stream_id: STREAM,
        max_datagram: MAX_DATAGRAM,
        max_message: MAX_MESSAGE,
    }
}

fn sub_config(window: usize, buffers: usize) -> SubscriberConfig {
    SubscriberConfig {
        max_message: MAX_MESSAGE,
        max_datagram: MAX_DATAGRAM,
        reorder_window: window,
        reassembly_buffers: buffers,
        nak_delay: Duration::from_nanos(10),
        line_grace: Duration::from_nanos(100),
        line_timeout: Duration::from_micros(1),
        request_timeout: Duration::from_nanos(500),
        max_retries: 2,
        publisher_timeout: Duration::from_micros(20),
        ..SubscriberConfig::new(STREAM)
    }
}

/// A datagram in one of the shapes a subscriber may meet: well formed,
/// slightly wrong, or noise.
#[derive(Debug, Clone)]
enum Shape {
    Raw(Vec<u8>),
    Data {
        epoch: u64,
        first: u64,
        lens: Vec<u8>,
        retransmit: bool,
    },
    Fragment {
        epoch: u64,
        seq: u64,
        total: u16,
        chunk: u16,
        index: u16,
        retransmit: bool,
    },
    Control {
        kind: u8,
        epoch: u64,
        seq: u64,
        arg: u64,
    },
}

fn shape() -> impl Strategy<Value = Shape> {
    let epoch = 1u64..4;
    let seq = 1u64..48;
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300).prop_map(Shape::Raw),
        (
            epoch.clone(),
            seq.clone(),
            prop::collection::vec(0u8..60, 1..5),
            any::<bool>()
        )
            .prop_map(|(epoch, first, lens, retransmit)| Shape::Data {
                epoch,
                first,
                lens,
                retransmit
            }),
        (
            epoch.clone(),
            seq.clone(),
            1u16..700,
            100u16..200,
            0u16..8,
            any::<bool>()
        )
            .prop_map(|(epoch, seq, total, chunk, index, retransmit)| {
                Shape::Fragment {
                    epoch,
                    seq,
                    total,
                    chunk,
                    index,
                    retransmit,
                }
            }),
        (3u8..7, epoch, 0u64..60, 0u64..20).prop_map(|(kind, epoch, seq, arg)| {
            Shape::Control {
                kind,
                epoch,
                seq,
                arg,
            }
        }),
    ]
}

fn build(s: &Shape) -> Vec<u8> {
    match s {
        Shape::Raw(b) => b.clone(),
        Shape::Data {
            epoch,
            first,
            lens,
            retransmit,
        } => {
            let mut b = vec![0u8; DATAGRAM_HEADER_LEN];
            for (i, &len) in lens.iter().enumerate() {
                let seq = first + i as u64;
                let mut h = [0u8; HEADER_LEN];
                Header {
                    seq,
                    len: len as u32,
                    flags: 0,
                    timestamp: 0,
                }
                .encode(&mut h);
                b.extend_from_slice(&h);
                b.extend(payload(seq, len as usize));
            }
            let length = b.len() as u32;
            DatagramHeader {
                kind: if *retransmit {
                    Kind::Retransmit
                } else {
                    Kind::Data
                },
                count: lens.len() as u16,
                stream_id: STREAM,
                length,
                epoch: *epoch,
                seq: *first,
                arg: 0,
            }
            .encode(&mut b);
            b
        }
        Shape::Fragment {
            epoch,
            seq,
            total,
            chunk,
            index,
            retransmit,
        } => {
            let total = *total as usize;
            let f = Fragment {
                index: *index,
                count: total.div_ceil(*chunk as usize).max(1) as u16,
                chunk: *chunk as u32,
            };
            let mut b = vec![0u8; DATAGRAM_HEADER_LEN + HEADER_LEN];
            Header {
                seq: *seq,
                len: total as u32,
                flags: 0,
                timestamp: 0,
            }
            .encode(&mut b[DATAGRAM_HEADER_LEN..]);
            let at = f.offset().min(total);
            let part = payload(*seq, total);
            b.extend_from_slice(&part[at..(at + f.len_in(total)).min(total)]);
            let length = b.len() as u32;
            DatagramHeader {
                kind: if *retransmit {
                    Kind::Retransmit
                } else {
                    Kind::Data
                },
                count: 1,
                stream_id: STREAM,
                length,
                epoch: *epoch,
                seq: *seq,
                arg: f.to_arg(),
            }
            .encode(&mut b);
            b
        }
        Shape::Control {
            kind,
            epoch,
            seq,
            arg,
        } => {
            let mut b = [0u8; DATAGRAM_HEADER_LEN];
            let kind = Kind::from_byte(*kind).unwrap_or(Kind::Heartbeat);
            frame::encode_control(&mut b, kind, STREAM, *epoch, *seq, *arg);
            b.to_vec()
        }
    }
}

/// Checks the order rules on a subscriber's events as they come: within
/// one incarnation, messages and gaps follow each other without overlap
/// or hole, and nothing follows the end of the stream.
#[derive(Default)]
struct OrderCheck {
    expect: Option<u64>,
    ended: bool,
}

impl OrderCheck {
    fn see(&mut self, e: &Ev) {
        match *e {
            Ev::Msg(s, _) => {
                assert!(!self.ended, "message after the end");
                if let Some(x) = self.expect {
                    assert_eq!(s, x, "message out of sequence");
                }
                self.expect = Some(s + 1);
            }
            Ev::Gap(f, t) => {
                assert!(!self.ended, "gap after the end");
                assert!(t > f, "empty gap");
                if let Some(x) = self.expect {
                    assert_eq!(f, x, "gap out of sequence");
                }
                self.expect = Some(t);
            }
            Ev::Restart(_) => *self = OrderCheck::default(),
            Ev::End(_) => {
                assert!(!self.ended, "two ends");
                self.ended = true;
            }
            Ev::Down(_) => {}
            Ev::Overrun(..) => panic!("no overruns on datagram streams"),
            Ev::SourceGap(..) => panic!("the core delivers notices as messages"),
        }
    }
}

proptest! {
    #[test]
    fn decoding_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = frame::decode(&bytes, &limits());
    }

    #[test]
    fn decoding_damaged_datagrams_never_panics_and_what_passes_is_consistent(
        s in shape(),
        hits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut b = build(&s);
        for (i, v) in hits {
            if !b.is_empty() {
                let at = i.index(b.len());
                b[at] = v;
            }
        }
        if let Ok(d) = frame::decode(&b, &limits()) {
            match d.frame {
                Frame::Messages { first_seq, messages, .. } => {
                    let n = messages.len();
                    let mut k = 0;
                    for (h, p) in messages {
                        prop_assert_eq!(h.seq, first_seq + k);
                        prop_assert_eq!(h.len as usize, p.len());
                        prop_assert!(p.len() <= MAX_MESSAGE);
                        k += 1;
                    }
                    prop_assert_eq!(k as usize, n);
                }
                Frame::Fragment { header, fragment, bytes, .. } => {
                    prop_assert!(fragment.fits(header.len as usize));
                    prop_assert_eq!(bytes.len(), fragment.len_in(header.len as usize));
                }
                _ => {}
            }
        }
    }

    #[test]
    fn a_subscriber_fed_anything_keeps_its_events_in_order(
        ops in prop::collection::vec((shape(), any::<bool>(), 0u64..300), 1..80),
        window in prop::sample::select(vec![2usize, 8, 64]),
    ) {
        let mut sub = SubscriberCore::new(&sub_config(window, 2)).unwrap();
        let mut check = OrderCheck::default();
        let mut now = 0;
        for (s, on_b, dt) in &ops {
            now += dt;
            let line = if *on_b { Line::B } else { Line::A };
            let epoch = sub.epoch();
            let mut requests = Vec::new();
            let _ = sub.on_datagram(line, &build(s), now, |e| check.see(&own(e)), |r| {
                requests.push(r.to_vec())
            });
            sub.tick(now, |e| check.see(&own(e)), |r| requests.push(r.to_vec()));
            for r in requests {
                let d = frame::decode(&r, &limits()).unwrap();
                let is_request = matches!(d.frame, Frame::Request { .. });
                prop_assert!(is_request);
                prop_assert!(Some(d.epoch) == sub.epoch() || Some(d.epoch) == epoch);
            }
        }
        // Long after: every outstanding sequence is settled.
        for _ in 0..8 {
            now += 1_000;
            sub.tick(now, |e| check.see(&own(e)), |_| {});
        }
        prop_assert_eq!(sub.outstanding(), 0);
    }

    #[test]
    fn a_publisher_fed_anything_answers_only_what_it_has(
        ops in prop::collection::vec((shape(), 0u64..50), 1..40),
        published in 0u64..40,
    ) {
        let mut p = PublisherCore::new(&PublisherConfig {
            max_message: MAX_MESSAGE,
            max_datagram: MAX_DATAGRAM,
            retain_messages: 16,
            retain_bytes: 4096,
            ..PublisherConfig::new(STREAM, 2)
        })
        .unwrap();
        for seq in 1..=published {
            p.publish(&payload(seq, (seq * 37 % 700) as usize), None, 0, |_: &[u8]| {}).unwrap();
        }
        p.flush(0, |_: &[u8]| {});
        let mut now = 0;
        for (s, dt) in &ops {
            now += dt;
            let mut replies = Vec::new();
            let _ = p.on_datagram(&build(s), now, |r: &[u8]| replies.push(r.to_vec()));
            for r in replies {
                prop_assert!(r.len() <= MAX_DATAGRAM);
                let d = frame::decode(&r, &limits()).unwrap();
                prop_assert_eq!(d.epoch, 2);
                let (lo, hi) = match d.frame {
                    Frame::Messages { first_seq, messages, .. } => {
                        (first_seq, first_seq + messages.len() as u64 - 1)
                    }
                    Frame::Fragment { header, .. } => (header.seq, header.seq),
                    Frame::NotAvailable { from, count } => (from, from + count - 1),
                    f => return Err(TestCaseError::fail(format!("{f:?}"))),
                };
                prop_assert!(lo >= 1 && hi <= published);
            }
        }
    }

    #[test]
    fn loss_reordering_and_duplication_account_for_every_message_once(
        lens in prop::collection::vec(0usize..700, 1..40),
        seed in any::<u64>(),
        loss_ppm in 0u32..400_000,
        dup_ppm in 0u32..300_000,
        window in prop::sample::select(vec![4usize, 16, 128]),
    ) {
        let n = lens.len() as u64;
        let mut p = PublisherCore::new(&PublisherConfig {
            max_message: MAX_MESSAGE,
            max_datagram: MAX_DATAGRAM,
            retain_messages: 64,
            retain_bytes: 64 * 700,
            ..PublisherConfig::new(STREAM, 1)
        })
        .unwrap();
        let mut wire: Vec<Vec<u8>> = Vec::new();
        let mut rng = Rng::new(seed);
        for (i, &len) in lens.iter().enumerate() {
            let seq = i as u64 + 1;
            p.publish(&payload(seq, len), None, 0, |d: &[u8]| wire.push(d.to_vec())).unwrap();
            if rng.chance(500_000) {
                p.flush(0, |d: &[u8]| wire.push(d.to_vec()));
            }
        }
        p.flush(0, |d: &[u8]| wire.push(d.to_vec()));

        // Lose, duplicate, then shuffle.
        let mut arriving: Vec<Vec<u8>> = Vec::new();
        for d in wire {
            if rng.chance(loss_ppm) {
                continue;
            }
            if rng.chance(dup_ppm) {
                arriving.push(d.clone());
            }
            arriving.push(d);
        }
        for i in (1..arriving.len()).rev() {
            let j = rng.between(0, i as u64) as usize;
            arriving.swap(i, j);
        }
        // Which messages arrived whole (every fragment at least once).
        let mut have: std::collections::HashMap<u64, std::collections::HashSet<u32>> =
            Default::default();
        for d in &arriving {
            match frame::decode(d, &limits()).unwrap().frame {
                Frame::Messages { messages, .. } => {
                    for (h, _) in messages {
                        have.entry(h.seq).or_default().insert(u32::MAX);
                    }
                }
                Frame::Fragment { header, fragment, .. } => {
                    have.entry(header.seq).or_default().insert(fragment.index as u32);
                }
                _ => {}
            }
        }
        let chunk = MAX_DATAGRAM - DATAGRAM_HEADER_LEN - HEADER_LEN;
        let whole = |seq: u64| {
            let len = lens[seq as usize - 1];
            let want = if len <= chunk { 1 } else { len.div_ceil(chunk) };
            have.get(&seq).map_or(0, |s| s.len()) == want
        };

        // No request is answered: what is lost stays lost.
        // Believes every datagram at once: this pins down the window.
        let cfg = SubscriberConfig { confirm: 1, ..sub_config(window, 64) };
        let mut sub = SubscriberCore::new(&cfg).unwrap();
        let mut events = Vec::new();
        let mut hb = [0u8; DATAGRAM_HEADER_LEN];
        frame::encode_control(&mut hb, Kind::Heartbeat, STREAM, 1, 0, 0);
        sub.on_datagram(Line::A, &hb, 0, |e| events.push(own(e)), |_| {}).unwrap();
        for d in &arriving {
            let _ = sub.on_datagram(Line::A, d, 0, |e| events.push(own(e)), |_| {});
        }
        frame::encode_control(&mut hb, Kind::Heartbeat, STREAM, 1, n, 1);
        sub.on_datagram(Line::A, &hb, 0, |e| events.push(own(e)), |_| {}).unwrap();
        let mut now = 0;
        while sub.outstanding() > 0 {
            now += 1_000;
            prop_assert!(now < 100_000, "outstanding forever");
            sub.tick(now, |e| events.push(own(e)), |_| {});
        }

        let mut next = 1;
        for e in &events {
            match e {
                Ev::Msg(s, p) => {
                    prop_assert_eq!(*s, next);
                    prop_assert!(whole(*s), "{} delivered without all its parts", s);
                    prop_assert_eq!(p, &payload(*s, lens[*s as usize - 1]));
                    next += 1;
                }
                Ev::Gap(f, t) => {
                    prop_assert_eq!(*f, next);
                    if window as u64 > n {
                        // Nothing was pushed out of the window: a gap is
                        // exactly what did not arrive.
                        for s in *f..*t {
                            prop_assert!(!whole(s), "{} arrived but was reported lost", s);
                        }
                    }
                    next = *t;
                }
                e => return Err(TestCaseError::fail(format!("{e:?}"))),
            }
        }
        prop_assert_eq!(next, n + 1);
    }
}
