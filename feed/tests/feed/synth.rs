//! The synthetic session: determinism, the shape of the day, and an
//! independent order book that checks every message refers to a live order
//! and never takes more shares than the order has.

use std::collections::{HashMap, HashSet};

use mdbus_feed::itch::{self, codes, Message, Timestamp};
use mdbus_feed::moldudp64::{Packet, PacketKind, Session};
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig, SynthError, SynthMessage, TypeSet};

fn config(seed: u64) -> SynthConfig {
    SynthConfig {
        seed,
        symbols: 40,
        order_messages: 30_000,
        ..SynthConfig::default()
    }
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let a: Vec<_> = Generator::new(&config(9)).unwrap().collect();
    let b: Vec<_> = Generator::new(&config(9)).unwrap().collect();
    let c: Vec<_> = Generator::new(&config(10)).unwrap().collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn a_known_seed_gives_known_bytes() {
    // FNV-1a over the whole session: a change here means sessions that
    // users saved or compared against no longer reproduce.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut n = 0u64;
    for m in Generator::new(&config(1)).unwrap() {
        for &b in m.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x100_0000_01b3);
        }
        n += 1;
    }
    eprintln!("seed 1: {n} messages, FNV-1a {hash:#018x}");
    assert_eq!((n, hash), GOLDEN_SEED_1);
}

/// Message count and FNV-1a hash of the session of `config(1)`.
const GOLDEN_SEED_1: (u64, u64) = (30_249, 0xb988_146a_a554_cca8);

/// What the order book knows of one resting order.
struct Resting {
    locate: u16,
    shares: u32,
}

#[test]
fn the_day_is_well_formed() {
    let cfg = config(3);
    let mut gen = Generator::new(&cfg).unwrap();
    let msgs: Vec<_> = gen.by_ref().collect();
    let decoded: Vec<Message<'_>> = msgs.iter().map(|m| m.decode().unwrap()).collect();

    // Timestamps never go back and match the intended send times.
    for (m, d) in msgs.iter().zip(&decoded) {
        assert_eq!(m.timestamp(), d.timestamp());
    }
    for w in decoded.windows(2) {
        assert!(
            w[0].timestamp() <= w[1].timestamp(),
            "{:?} then {:?}",
            w[0],
            w[1]
        );
    }

    // Start of messages, then the directory for every symbol, then start of
    // system hours.
    let Message::SystemEvent(first) = decoded[0] else {
        panic!("first message {:?}", decoded[0])
    };
    assert_eq!(first.event_code(), codes::event::START_OF_MESSAGES);
    let symbols = usize::from(cfg.symbols);
    let mut dir = itch::Directory::new();
    for (i, d) in decoded[1..=symbols].iter().enumerate() {
        assert!(dir.apply(d), "message {} is {:?}", i + 1, d);
        assert_eq!(usize::from(d.stock_locate()), i + 1);
    }
    assert_eq!(dir.len(), symbols);
    let Message::SystemEvent(s) = decoded[symbols + 1] else {
        panic!("{:?}", decoded[symbols + 1])
    };
    assert_eq!(s.event_code(), codes::event::START_OF_SYSTEM_HOURS);

    // The system events come in the day's order, each once.
    let events: Vec<u8> = decoded
        .iter()
        .filter_map(|d| match d {
            Message::SystemEvent(e) => Some(e.event_code()),
            _ => None,
        })
        .collect();
    assert_eq!(events, b"OSQMEC");
    let Message::SystemEvent(last) = decoded[decoded.len() - 1] else {
        panic!("last message {:?}", decoded.last())
    };
    assert_eq!(last.event_code(), codes::event::END_OF_MESSAGES);

    // Replay through an independent book.
    let mut book: HashMap<u64, Resting> = HashMap::new();
    let mut used_refs: HashSet<u64> = HashSet::new();
    let mut matches: HashSet<u64> = HashSet::new();
    let mut halted: HashSet<u16> = HashSet::new();
    let mut market_open = false;
    for d in &decoded {
        let locate = d.stock_locate();
        if !matches!(
            d,
            Message::SystemEvent(_) | Message::MwcbDeclineLevel(_) | Message::MwcbStatus(_)
        ) {
            assert!(
                dir.get(locate).is_some(),
                "{d:?} names locate {locate}, which the directory does not know"
            );
        }
        match d {
            Message::SystemEvent(e) if e.event_code() == codes::event::START_OF_MARKET_HOURS => {
                market_open = true;
            }
            Message::AddOrder(a) => {
                assert!(market_open);
                assert!(!halted.contains(&locate), "add during a halt");
                assert_eq!(Some(&a.stock()), dir.get(locate));
                assert!(a.shares() > 0);
                assert!(a.price().raw() > 0);
                assert!(
                    used_refs.insert(a.order_reference_number()),
                    "reference reused"
                );
                book.insert(
                    a.order_reference_number(),
                    Resting {
                        locate,
                        shares: a.shares(),
                    },
                );
            }
            Message::AddOrderMpid(a) => {
                assert!(!halted.contains(&locate));
                assert_eq!(Some(&a.stock()), dir.get(locate));
                assert!(used_refs.insert(a.order_reference_number()));
                book.insert(
                    a.order_reference_number(),
                    Resting {
                        locate,
                        shares: a.shares(),
                    },
                );
            }
            Message::OrderExecuted(e) => {
                assert!(!halted.contains(&locate), "execution during a halt");
                let o = book
                    .get_mut(&e.order_reference_number())
                    .expect("execute of a live order");
                assert_eq!(o.locate, locate);
                assert!(e.executed_shares() > 0 && e.executed_shares() <= o.shares);
                o.shares -= e.executed_shares();
                if o.shares == 0 {
                    book.remove(&e.order_reference_number());
                }
                assert!(matches.insert(e.match_number()), "match number reused");
            }
            Message::OrderExecutedWithPrice(e) => {
                assert!(!halted.contains(&locate));
                let o = book
                    .get_mut(&e.order_reference_number())
                    .expect("execute of a live order");
                assert_eq!(o.locate, locate);
                assert!(e.executed_shares() > 0 && e.executed_shares() <= o.shares);
                o.shares -= e.executed_shares();
                if o.shares == 0 {
                    book.remove(&e.order_reference_number());
                }
                assert!(matches.insert(e.match_number()));
            }
            Message::OrderCancel(x) => {
                let o = book
                    .get_mut(&x.order_reference_number())
                    .expect("cancel of a live order");
                assert_eq!(o.locate, locate);
                assert!(x.cancelled_shares() > 0 && x.cancelled_shares() < o.shares);
                o.shares -= x.cancelled_shares();
            }
            Message::OrderDelete(x) => {
                let o = book
                    .remove(&x.order_reference_number())
                    .expect("delete of a live order");
                assert_eq!(o.locate, locate);
            }
            Message::OrderReplace(u) => {
                let o = book
                    .remove(&u.original_order_reference_number())
                    .expect("replace of a live order");
                assert_eq!(o.locate, locate);
                assert!(used_refs.insert(u.new_order_reference_number()));
                assert!(u.shares() > 0);
                book.insert(
                    u.new_order_reference_number(),
                    Resting {
                        locate,
                        shares: u.shares(),
                    },
                );
            }
            Message::Trade(p) => {
                assert!(!halted.contains(&locate));
                assert_eq!(p.order_reference_number(), 0);
                assert!(matches.insert(p.match_number()));
            }
            Message::CrossTrade(q) => {
                assert!(matches.insert(q.match_number()));
            }
            Message::BrokenTrade(b) => {
                assert!(
                    matches.contains(&b.match_number()),
                    "break of an unknown match"
                );
            }
            Message::StockTradingAction(h) => match h.trading_state() {
                codes::trading_state::HALTED => assert!(halted.insert(locate)),
                codes::trading_state::TRADING => {
                    halted.remove(&locate);
                }
                other => panic!("trading state {other}"),
            },
            Message::OperationalHalt(h) => match h.operational_halt_action() {
                b'H' => assert!(halted.insert(locate)),
                b'T' => assert!(halted.remove(&locate)),
                other => panic!("halt action {other}"),
            },
            _ => {}
        }
    }
    assert!(halted.is_empty(), "every halt is lifted by the end");
    assert_eq!(book.len(), gen.live_orders());

    // The mix is dominated by the order messages.
    let count = |t: u8| gen.emitted(t);
    let order_flow: u64 = b"AFEXDUC".iter().map(|&t| count(t)).sum();
    assert!(
        order_flow as f64 > 0.9 * cfg.order_messages as f64,
        "{order_flow}"
    );
    for t in *b"AFEXDUCP" {
        assert!(count(t) > 0, "no {:?} messages", char::from(t));
    }
    assert!(count(b'A') > count(b'P'));
    assert!(count(b'D') > count(b'E'));
}

#[test]
fn arrivals_are_densest_after_the_open() {
    let cfg = SynthConfig {
        symbols: 20,
        order_messages: 50_000,
        ..SynthConfig::default()
    };
    let open = cfg.open.nanos();
    let close = cfg.close.nanos();
    let hour = 3_600_000_000_000u64;
    let (mut first_hour, mut last_hour) = (0u64, 0u64);
    let mut in_flow = false;
    let mut min_gap = u64::MAX;
    let mut prev: Option<Timestamp> = None;
    for m in Generator::new(&cfg).unwrap() {
        let t = m.timestamp().nanos();
        if m.msg_type() == b'S' {
            in_flow = m.bytes()[11] == codes::event::START_OF_MARKET_HOURS;
            continue;
        }
        if !in_flow || !b"AFEXDUCP".contains(&m.msg_type()) {
            continue;
        }
        if t < open + hour {
            first_hour += 1;
        } else if t >= close - hour && t < close {
            last_hour += 1;
        }
        if let Some(p) = prev {
            min_gap = min_gap.min(t - p.nanos());
        }
        prev = Some(m.timestamp());
    }
    assert!(
        first_hour > 2 * last_hour,
        "first hour {first_hour}, last hour {last_hour}"
    );
    // Bursts put messages nanoseconds to microseconds apart.
    assert!(min_gap < 2_000, "smallest gap {min_gap} ns");
    // The flow ends near the close on average.
    let end = prev.unwrap().nanos();
    assert!(
        end > open + 4 * hour && end < close + 2 * hour,
        "flow ends at {}",
        prev.unwrap()
    );
}

#[test]
fn disabled_types_are_not_emitted() {
    let cfg = SynthConfig {
        disabled: TypeSet::OPTIONAL,
        ..config(5)
    };
    let mut gen = Generator::new(&cfg).unwrap();
    let types: HashSet<u8> = gen.by_ref().map(|m| m.msg_type()).collect();
    let mut types: Vec<u8> = types.into_iter().collect();
    types.sort_unstable();
    assert_eq!(types, b"ADERSUX");

    let all = SynthConfig {
        order_messages: 300_000,
        ..config(5)
    };
    let mut gen = Generator::new(&all).unwrap();
    gen.by_ref().for_each(drop);
    for t in TypeSet::OPTIONAL.iter() {
        assert!(gen.emitted(t) > 0, "{:?} never emitted", char::from(t));
    }
}

#[test]
fn bad_configs_are_refused() {
    let base = SynthConfig::default();
    let e = |c: SynthConfig| Generator::new(&c).unwrap_err();
    assert_eq!(
        e(SynthConfig {
            symbols: 0,
            ..base.clone()
        }),
        SynthError::NoSymbols
    );
    assert_eq!(
        e(SynthConfig {
            max_live_orders: 0,
            ..base.clone()
        }),
        SynthError::NoOrderPool
    );
    assert!(matches!(
        e(SynthConfig {
            open: Timestamp::from_hms(0, 10, 0).unwrap(),
            ..base.clone()
        }),
        SynthError::OpenTooEarly { .. }
    ));
    assert!(matches!(
        e(SynthConfig {
            close: base.open,
            ..base.clone()
        }),
        SynthError::CloseBeforeOpen { .. }
    ));
    assert!(matches!(
        e(SynthConfig {
            burst_probability: 1.0,
            ..base.clone()
        }),
        SynthError::BadParameter {
            field: "burst_probability",
            ..
        }
    ));
    assert!(matches!(
        e(SynthConfig {
            open_surge: f64::NAN,
            ..base.clone()
        }),
        SynthError::BadParameter {
            field: "open_surge",
            ..
        }
    ));
    let err = e(SynthConfig {
        disabled: TypeSet::EMPTY.with(b'A'),
        ..base
    });
    assert!(matches!(err, SynthError::RequiredTypeDisabled { .. }));
    assert!(
        err.to_string().starts_with("{'A'} cannot be disabled"),
        "{err}"
    );
}

#[test]
fn the_pool_never_grows_past_its_cap() {
    let cfg = SynthConfig {
        max_live_orders: 50,
        order_messages: 20_000,
        ..config(4)
    };
    let mut gen = Generator::new(&cfg).unwrap();
    while gen.next().is_some() {
        assert!(gen.live_orders() <= 50);
    }
}

#[test]
fn packets_respect_size_and_number_messages_contiguously() {
    let cfg = config(6);
    let originals: Vec<_> = Generator::new(&cfg).unwrap().collect();
    let session = Session::new("SYNTH00001").unwrap();
    let mut packer = MoldPacker::new(Generator::new(&cfg).unwrap(), session, 1, 1472).unwrap();
    let mut expected_seq = 1;
    let mut out = Vec::new();
    let mut packets = 0;
    let mut multi = 0;
    while let Some(p) = packer.next_packet() {
        packets += 1;
        assert!(p.bytes.len() <= 1472);
        let parsed = Packet::parse_strict(p.bytes).unwrap();
        assert_eq!(parsed.session(), session);
        assert_eq!(parsed.kind(), PacketKind::Messages);
        assert_eq!(parsed.sequence(), expected_seq);
        assert_eq!(parsed.sequence(), p.sequence);
        assert_eq!(parsed.count(), p.count);
        assert!(p.send_time.nanos() - p.first_timestamp.nanos() <= 10_000);
        if p.count > 1 {
            multi += 1;
        }
        for b in parsed.messages() {
            let b = b.unwrap();
            assert_eq!(b.sequence, expected_seq);
            expected_seq += 1;
            out.push(b.data.to_vec());
        }
    }
    assert_eq!(out.len(), originals.len());
    for (a, b) in out.iter().zip(&originals) {
        assert_eq!(&a[..], b.bytes());
    }
    assert!(multi > 0 && packets < originals.len());
    assert_eq!(packer.next_sequence(), expected_seq);
    let eos = packer.end_of_session();
    let eos = Packet::parse_strict(&eos).unwrap();
    assert_eq!(eos.kind(), PacketKind::EndOfSession);
    assert_eq!(eos.sequence(), expected_seq);

    // A window of u64::MAX fills packets to the size limit.
    let mut full = MoldPacker::new(Generator::new(&cfg).unwrap(), session, 1, 1472)
        .unwrap()
        .with_window(u64::MAX);
    let first = full.next_packet().unwrap();
    assert!(first.bytes.len() > 1472 - 52, "{}", first.bytes.len());
    assert!(MoldPacker::new(std::iter::empty::<SynthMessage>(), session, 1, 71).is_err());
}
