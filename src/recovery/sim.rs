//! A simulated network for the recovery cores, in simulated time: links
//! that lose, delay (and so reorder) and duplicate datagrams, driven by a
//! seeded xorshift generator so that every run is reproducible.
//!
//! The network keeps its own account of what it did (which message units
//! it delivered live on which line, which copies it added, what was
//! requested), and the scenarios check the cores' events and counters
//! against that account.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use super::frame::{self, Frame, Limits};
use super::publisher::{PublisherConfig, PublisherCore};
pub(crate) use super::rng::Rng;
use super::subscriber::{Line, SubscriberConfig, SubscriberCore};
use crate::config::LateJoin;
use crate::message::Event;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const NEVER: u64 = u64::MAX;

/// An owned copy of an event, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ev {
    Msg(u64, Vec<u8>),
    Gap(u64, u64),
    End(u64),
    Down(u64),
    Restart(u64),
    Overrun(u64, u64),
    SourceGap(u64, u64),
}

pub(crate) fn own(e: Event<'_>) -> Ev {
    match e {
        Event::Message(m) => Ev::Msg(m.seq(), m.payload().to_vec()),
        Event::Gap { from, to } => Ev::Gap(from, to),
        Event::EndOfStream { last_seq } => Ev::End(last_seq),
        Event::PublisherDown { last_seq } => Ev::Down(last_seq),
        Event::PublisherRestarted { epoch } => Ev::Restart(epoch),
        Event::Overrun { from, to } => Ev::Overrun(from, to),
        Event::SourceGap { from, to } => Ev::SourceGap(from, to),
    }
}

/// The payload of message `seq`: recognisable, so a mix-up shows.
pub(crate) fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq.wrapping_mul(31).wrapping_add(i as u64 * 7)) as u8)
        .collect()
}

/// One direction of the network.
#[derive(Debug, Clone, Copy)]
struct Link {
    loss_ppm: u32,
    dup_ppm: u32,
    min_delay: u64,
    max_delay: u64,
    /// Losses happen from this time on: the publisher's first heartbeat
    /// (at 0) arrives, so a subscriber listening from the start knows the
    /// stream begins at 1; one that first hears message 2 starts there.
    lossy_from: u64,
    /// From this time on nothing is lost.
    lossless_from: u64,
}

impl Link {
    const fn new(loss_ppm: u32, dup_ppm: u32, min_delay: u64, max_delay: u64) -> Link {
        Link {
            loss_ppm,
            dup_ppm,
            min_delay,
            max_delay,
            lossy_from: 10 * US,
            lossless_from: NEVER,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Sub(Line),
    Pub,
}

/// A message unit: a whole message (`u32::MAX`) or one fragment.
type Unit = (u64, u32);

/// What the network did, for the checks.
#[derive(Debug, Default)]
struct Truth {
    /// Live copies of each unit that the lines delivered (or will).
    live_copies: HashMap<Unit, u32>,
    /// Extra copies the lines added, in units.
    dup_injected: u64,
    /// Units of data that reached the subscriber, every copy counted.
    arrivals: u64,
    /// Ranges the subscriber asked for, `from..to`.
    requests: Vec<(u64, u64)>,
    /// When the subscriber last received anything.
    last_arrival: u64,
}

fn units(d: &[u8], limits: &Limits) -> Vec<Unit> {
    match frame::decode(d, limits).map(|d| d.frame) {
        Ok(Frame::Messages { messages, .. }) => messages.map(|(h, _)| (h.seq, u32::MAX)).collect(),
        Ok(Frame::Fragment {
            header, fragment, ..
        }) => vec![(header.seq, fragment.index as u32)],
        _ => Vec::new(),
    }
}

struct Net {
    rng: Rng,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    packets: Vec<Option<(To, Vec<u8>)>>,
    lines: [Option<Link>; 2],
    up: Link,
    down: Link,
    /// Live data units for which this returns true are lost on every line.
    drop_live: fn(u64) -> bool,
    /// Heartbeats still to lose on every line, from the next one sent.
    lose_heartbeats: u32,
    limits: Limits,
    truth: Truth,
}

impl Net {
    /// Puts `d` on `link`; returns the copies that will arrive.
    fn send(&mut self, link: Link, to: To, now: u64, d: &[u8]) -> u32 {
        let lossy = (link.lossy_from..link.lossless_from).contains(&now);
        if lossy && self.rng.chance(link.loss_ppm) {
            return 0;
        }
        let copies = if self.rng.chance(link.dup_ppm) { 2 } else { 1 };
        for _ in 0..copies {
            let at = now + self.rng.between(link.min_delay, link.max_delay);
            let id = self.packets.len() as u64;
            self.packets.push(Some((to, d.to_vec())));
            self.heap.push(Reverse((at, id)));
        }
        copies
    }

    /// A datagram from the publisher to the stream's lines.
    fn live(&mut self, now: u64, d: &[u8]) {
        let heartbeat = matches!(
            frame::decode(d, &self.limits).map(|d| d.frame),
            Ok(Frame::Heartbeat { .. })
        );
        if heartbeat && self.lose_heartbeats > 0 {
            self.lose_heartbeats -= 1;
            return;
        }
        let units = units(d, &self.limits);
        if units.iter().any(|u| (self.drop_live)(u.0)) {
            return;
        }
        for line in [Line::A, Line::B] {
            let Some(link) = self.lines[line.index()] else {
                continue;
            };
            let copies = self.send(link, To::Sub(line), now, d);
            for u in &units {
                *self.truth.live_copies.entry(*u).or_default() += copies;
            }
            if copies > 1 {
                self.truth.dup_injected += units.len() as u64;
            }
        }
    }

    fn request(&mut self, now: u64, d: &[u8]) {
        if let Ok(Frame::Request { from, count }) = frame::decode(d, &self.limits).map(|d| d.frame)
        {
            self.truth.requests.push((from, from + count));
        }
        let up = self.up;
        self.send(up, To::Pub, now, d);
    }

    fn reply(&mut self, now: u64, d: &[u8]) {
        let units = units(d, &self.limits).len() as u64;
        let down = self.down;
        if self.send(down, To::Sub(Line::A), now, d) > 1 {
            self.truth.dup_injected += units;
        }
    }
}

/// Settings of the simulated publisher's load.
#[derive(Debug, Clone, Copy)]
struct Load {
    messages: u64,
    interval: u64,
    /// Chance per million to flush after each message (ticks flush too).
    flush_ppm: u32,
    small_max: usize,
    /// Chance per million that a message is large (fragmented).
    large_ppm: u32,
    large_max: usize,
}

const SMALL: Load = Load {
    messages: 100_000,
    interval: US,
    flush_ppm: 300_000,
    small_max: 120,
    large_ppm: 0,
    large_max: 0,
};

/// A publisher and a subscriber joined by a simulated network.
struct Sim {
    now: u64,
    net: Net,
    publisher: PublisherCore,
    sub: SubscriberCore,
    publisher_alive: bool,
    /// Before this time, datagrams reaching the subscriber are discarded
    /// (it has not joined yet).
    join_at: u64,
    load: Load,
    published: u64,
    next_publish: u64,
    /// Payload length of each published message, by sequence.
    sizes: Vec<usize>,
    tick_period: u64,
    next_tick: u64,
    events: Vec<(u64, Ev)>,
    /// First sequence the subscriber saw live.
    first_seen: Option<u64>,
    /// Chance per million, at each tick, that a forger sends the
    /// subscriber a datagram (see `forge`).
    forge_ppm: u32,
    /// Forged datagrams sent: from another source, and from the bound one
    /// (spoofed; never two without a genuine datagram between).
    forged: [u64; 2],
    /// The last datagram the subscriber got was a spoofed one.
    spoofed_last: bool,
}

/// The genuine publisher's source, and a forger's.
const GENUINE: u64 = 1;
const FORGER: u64 = 2;

fn sub_config() -> SubscriberConfig {
    SubscriberConfig {
        max_message: 8192,
        max_datagram: 1024,
        reorder_window: 1024,
        reassembly_buffers: 8,
        late_join: LateJoin::Next,
        // Above the 3 µs of reordering within a line.
        nak_delay: Duration::from_micros(4),
        // Above the 5 µs of skew between lines.
        line_grace: Duration::from_micros(50),
        line_timeout: Duration::from_micros(500),
        // Above the 16 µs round trip plus a tick.
        request_timeout: Duration::from_micros(60),
        max_retries: 30,
        publisher_timeout: Duration::from_millis(2),
        ..SubscriberConfig::new(7)
    }
}

fn pub_config(epoch: u64) -> PublisherConfig {
    PublisherConfig {
        max_message: 8192,
        max_datagram: 1024,
        retain_messages: 1 << 17,
        retain_bytes: 8 << 20,
        heartbeat_interval: Duration::from_micros(20),
        // A fixed schedule, well within the subscriber's 2 ms timeout: the
        // scenarios pin recovery down; the back-off has scenarios of its own.
        heartbeat_max_interval: Duration::from_micros(20),
        retransmit_burst: 4096,
        retransmit_rate: 0,
        ..PublisherConfig::new(7, epoch)
    }
}

/// When the first message is published.
const FIRST_PUBLISH: u64 = 20 * US;
const LINE_A: Link = Link::new(0, 0, 5 * US, 8 * US);
const UNICAST: Link = Link::new(0, 0, 5 * US, 8 * US);

impl Sim {
    fn new(seed: u64, sub: SubscriberConfig, publisher: PublisherConfig, load: Load) -> Sim {
        let limits = Limits {
            stream_id: 7,
            max_datagram: publisher.max_datagram,
            max_message: publisher.max_message,
        };
        Sim {
            now: 0,
            net: Net {
                rng: Rng::new(seed),
                heap: BinaryHeap::new(),
                packets: Vec::new(),
                lines: [Some(LINE_A), None],
                up: UNICAST,
                down: UNICAST,
                drop_live: |_| false,
                lose_heartbeats: 0,
                limits,
                truth: Truth::default(),
            },
            publisher: PublisherCore::new(&publisher).unwrap(),
            sub: SubscriberCore::new(&sub).unwrap(),
            publisher_alive: true,
            join_at: 0,
            load,
            published: 0,
            // After the first tick's heartbeat has arrived.
            next_publish: FIRST_PUBLISH,
            sizes: vec![0],
            tick_period: 2 * US,
            next_tick: 0,
            events: Vec::new(),
            first_seen: None,
            forge_ppm: 0,
            forged: [0; 2],
            spoofed_last: false,
        }
    }

    /// A forged datagram: a heartbeat with the largest epoch, one whose
    /// `latest` is 2^62, an end of stream at the latest sequence, a
    /// not-available notice for the last 50 sequences, or data far ahead
    /// or (from another source only) just ahead; then sends it to the
    /// subscriber from the forger, or spoofed from the publisher's source
    /// when the last datagram was genuine and the kind cannot be confirmed
    /// by one more forgery.
    fn forge(&mut self) {
        let latest = self.publisher.next_seq().saturating_sub(1).max(1);
        let epoch = self.publisher.epoch();
        let pick = self.net.rng.between(0, 5);
        let mut c = [0u8; frame::DATAGRAM_HEADER_LEN];
        let d: Vec<u8> = match pick {
            0 => {
                frame::encode_control(&mut c, frame::Kind::Heartbeat, 7, u64::MAX, latest, 1);
                c.to_vec()
            }
            1 => {
                frame::encode_control(&mut c, frame::Kind::Heartbeat, 7, epoch, 1 << 62, 1);
                c.to_vec()
            }
            2 => {
                frame::encode_control(&mut c, frame::Kind::EndOfStream, 7, epoch, latest, 1);
                c.to_vec()
            }
            3 => {
                let from = latest.saturating_sub(50).max(1);
                frame::encode_control(&mut c, frame::Kind::NotAvailable, 7, epoch, from, 50);
                c.to_vec()
            }
            _ => {
                // A real datagram of this stream's format, with the
                // forger's payload: far ahead, or just ahead.
                let mut p = PublisherCore::new(&pub_config(epoch)).unwrap();
                let target = if pick == 4 {
                    latest + 1_000_000
                } else {
                    latest + 1
                };
                let mut out = Vec::new();
                // One message, renumbered: datagram and message sequence.
                p.publish(b"forged", None, 0, |_: &[u8]| {}).unwrap();
                p.flush(0, |d: &[u8]| out = d.to_vec());
                out[24..32].copy_from_slice(&target.to_le_bytes());
                out[40..48].copy_from_slice(&target.to_le_bytes());
                out
            }
        };
        // Spoofing the bound source is allowed only for what one datagram
        // cannot do damage with: epochs, far jumps, claims (which the next
        // genuine datagram breaks), not-available (believed only on a
        // second notice for the same hole, which spoofing once per genuine
        // datagram can still give; so not spoofed here), far data.
        let spoof =
            !self.spoofed_last && matches!(pick, 0 | 1 | 2 | 4) && self.net.rng.chance(500_000);
        let source = if spoof { GENUINE } else { FORGER };
        self.forged[spoof as usize] += 1;
        self.spoofed_last = spoof;
        let now = self.now;
        let (net, events) = (&mut self.net, &mut self.events);
        let _ = self.sub.on_datagram_from(
            Line::A,
            source,
            &d,
            now,
            |e| events.push((now, own(e))),
            |r| net.request(now, r),
        );
    }

    fn publish_one(&mut self) {
        let rng = &mut self.net.rng;
        let len = if rng.chance(self.load.large_ppm) {
            rng.between(self.load.small_max as u64, self.load.large_max as u64) as usize
        } else {
            rng.between(0, self.load.small_max as u64) as usize
        };
        let flush = rng.chance(self.load.flush_ppm);
        let seq = self.publisher.next_seq();
        let now = self.now;
        let net = &mut self.net;
        self.publisher
            .publish(&payload(seq, len), None, now, |d: &[u8]| net.live(now, d))
            .unwrap();
        if flush {
            self.publisher.flush(now, |d: &[u8]| net.live(now, d));
        }
        if self.sizes.len() as u64 <= seq {
            self.sizes.resize(seq as usize + 1, 0);
        }
        self.sizes[seq as usize] = len;
        self.published += 1;
        self.next_publish = now + self.load.interval;
    }

    fn deliver_packet(&mut self) {
        let Some(Reverse((_, id))) = self.net.heap.pop() else {
            return;
        };
        let Some((to, d)) = self.net.packets[id as usize].take() else {
            return;
        };
        let now = self.now;
        match to {
            To::Sub(line) => {
                if now < self.join_at {
                    return;
                }
                let units = units(&d, &self.net.limits);
                self.net.truth.arrivals += units.len() as u64;
                self.net.truth.last_arrival = now;
                if self.first_seen.is_none() {
                    self.first_seen = units.first().map(|u| u.0);
                }
                let (net, events) = (&mut self.net, &mut self.events);
                self.spoofed_last = false;
                let _ = self.sub.on_datagram_from(
                    line,
                    GENUINE,
                    &d,
                    now,
                    |e| events.push((now, own(e))),
                    |r| net.request(now, r),
                );
            }
            To::Pub => {
                if self.publisher_alive {
                    let net = &mut self.net;
                    let _ = self
                        .publisher
                        .on_datagram(&d, now, |r: &[u8]| net.reply(now, r));
                }
            }
        }
    }

    fn tick(&mut self) {
        let now = self.now;
        let (net, events) = (&mut self.net, &mut self.events);
        if self.publisher_alive {
            self.publisher.tick(now, |d: &[u8]| net.live(now, d));
        }
        if now >= self.join_at {
            self.sub
                .tick(now, |e| events.push((now, own(e))), |r| net.request(now, r));
        }
        self.next_tick = now + self.tick_period;
        if self.forge_ppm > 0 && self.sub.epoch().is_some() && self.net.rng.chance(self.forge_ppm) {
            self.forge();
        }
    }

    /// Runs the simulation up to time `end`.
    fn run_until(&mut self, end: u64) {
        loop {
            let t_pub = if self.publisher_alive && self.published < self.load.messages {
                self.next_publish
            } else {
                NEVER
            };
            let t_net = self.net.heap.peek().map_or(NEVER, |r| r.0 .0);
            let t = t_pub.min(t_net).min(self.next_tick);
            if t > end {
                self.now = end;
                return;
            }
            self.now = t;
            if t == t_net {
                self.deliver_packet();
            } else if t == t_pub {
                self.publish_one();
            } else {
                self.tick();
            }
        }
    }

    /// Runs until the load is published, then `settle` more.
    fn run(&mut self, settle: u64) {
        let end = self.now + FIRST_PUBLISH + self.load.messages * self.load.interval + settle;
        self.run_until(end);
    }

    /// The events without their times.
    fn evs(&self) -> Vec<Ev> {
        self.events.iter().map(|(_, e)| e.clone()).collect()
    }

    /// Sequences whose every live copy of some unit was lost.
    fn lost_live(&self) -> HashSet<u64> {
        let mut lost = HashSet::new();
        // Units per message: whole, or its fragments.
        let chunk = self.net.limits.max_datagram - 64;
        for seq in 1..self.sizes.len() as u64 {
            let len = self.sizes[seq as usize];
            let us: Vec<Unit> = if len <= chunk {
                vec![(seq, u32::MAX)]
            } else {
                (0..len.div_ceil(chunk) as u32).map(|i| (seq, i)).collect()
            };
            if us
                .iter()
                .any(|u| self.net.truth.live_copies.get(u).copied().unwrap_or(0) == 0)
            {
                lost.insert(seq);
            }
        }
        lost
    }

    fn total_units(&self) -> u64 {
        let chunk = self.net.limits.max_datagram - 64;
        self.sizes[1..]
            .iter()
            .map(|&len| {
                if len <= chunk {
                    1
                } else {
                    len.div_ceil(chunk) as u64
                }
            })
            .sum()
    }

    /// Every message `from..=to` exactly once, in order, with its payload,
    /// and nothing else.
    fn assert_all_delivered(&self, from: u64, to: u64) {
        let evs = self.evs();
        assert_eq!(evs.len() as u64, to - from + 1, "events: {:?}", head(&evs));
        for (e, seq) in evs.iter().zip(from..=to) {
            let want = Ev::Msg(seq, payload(seq, self.sizes[seq as usize]));
            assert_eq!(*e, want, "at {seq}");
        }
    }
}

impl Sim {
    /// Every delivered message has the payload published under its
    /// sequence.
    fn assert_payloads(&self) {
        for (_, e) in &self.events {
            if let Ev::Msg(s, p) = e {
                assert_eq!(*p, payload(*s, self.sizes[*s as usize]), "at {s}");
            }
        }
    }
}

fn head(evs: &[Ev]) -> Vec<&Ev> {
    evs.iter()
        .filter(|e| !matches!(e, Ev::Msg(..)))
        .take(20)
        .collect()
}

/// Messages and gaps cover `from..=to` exactly once, in order; returns
/// the sequences delivered and those reported lost.
fn cover(evs: &[Ev], from: u64, to: u64) -> (HashSet<u64>, HashSet<u64>) {
    let (mut got, mut gaps) = (HashSet::new(), HashSet::new());
    let mut expect = from;
    for e in evs {
        match e {
            Ev::Msg(s, _) => {
                assert_eq!(*s, expect, "message out of order");
                got.insert(*s);
                expect += 1;
            }
            Ev::Gap(f, t) => {
                assert_eq!(*f, expect, "gap out of order");
                assert!(t > f);
                gaps.extend(*f..*t);
                expect = *t;
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(expect, to + 1, "cover ends early");
    (got, gaps)
}

#[test]
fn one_lossy_line_delivers_everything_once_and_in_order() {
    let mut sim = Sim::new(1, sub_config(), pub_config(1), SMALL);
    sim.net.lines[0] = Some(Link::new(20_000, 10_000, 5 * US, 8 * US));
    sim.net.up = Link::new(10_000, 0, 5 * US, 8 * US);
    sim.net.down = Link::new(10_000, 0, 5 * US, 8 * US);
    sim.run(2 * MS);
    let n = SMALL.messages;
    sim.assert_all_delivered(1, n);

    let c = sim.sub.counters();
    let truth = &sim.net.truth;
    let lost = sim.lost_live();
    assert!(lost.len() > 100, "the link did lose messages");
    // Only what the line lost was asked for, and all of it came back.
    let requested: HashSet<u64> = truth.requests.iter().flat_map(|&(f, t)| f..t).collect();
    assert_eq!(requested, lost);
    assert_eq!(c.recovered, lost.len() as u64);
    assert_eq!(c.wins_a, n - c.recovered);
    // Every extra copy was dropped as a duplicate, and only those.
    assert!(truth.dup_injected > 100);
    assert_eq!(c.duplicates, truth.dup_injected);
    assert_eq!(c.duplicates, truth.arrivals - n);
    assert_eq!((c.stale, c.unrecoverable, c.gap_events), (0, 0, 0));
    assert_eq!(c.messages_delivered, n);
    assert_eq!(c.drops.total(), 0);
    assert!(c.gaps_detected > 0 && c.requests_sent > 0);
    let p = sim.publisher.counters();
    assert_eq!(p.messages_published, n);
    assert!(p.retransmitted >= c.recovered);
    assert_eq!(p.not_available_sent, 0);
}

#[test]
fn forgeries_on_a_lossy_line_change_nothing() {
    let mut sim = Sim::new(11, sub_config(), pub_config(1), SMALL);
    sim.net.lines[0] = Some(Link::new(20_000, 10_000, 5 * US, 8 * US));
    sim.net.up = Link::new(10_000, 0, 5 * US, 8 * US);
    sim.net.down = Link::new(10_000, 0, 5 * US, 8 * US);
    sim.forge_ppm = 100_000;
    sim.run(2 * MS);
    let n = SMALL.messages;
    sim.assert_all_delivered(1, n);
    let c = sim.sub.counters();
    assert!(
        sim.forged[0] > 1_000 && sim.forged[1] > 1_000,
        "{:?}",
        sim.forged
    );
    assert_eq!((c.unrecoverable, c.gap_events, c.restarts), (0, 0, 0));
    assert!(!sim
        .evs()
        .iter()
        .any(|e| matches!(e, Ev::End(_) | Ev::Restart(_))));
    let d = c.drops;
    assert_eq!(d.foreign_source, sim.forged[0], "{d:?}");
    assert_eq!(
        d.implausible_epoch + d.implausible_jump + d.unconfirmed_claim,
        sim.forged[1],
        "{d:?}"
    );
    assert_eq!(c.messages_delivered, n);
}

#[test]
fn two_lines_with_independent_loss_request_only_what_both_lost() {
    let mut sim = Sim::new(2, sub_config(), pub_config(1), SMALL);
    sim.net.lines = [
        Some(Link::new(50_000, 5_000, 5 * US, 8 * US)),
        Some(Link::new(50_000, 5_000, 7 * US, 10 * US)),
    ];
    sim.run(2 * MS);
    let n = SMALL.messages;
    sim.assert_all_delivered(1, n);

    let c = sim.sub.counters();
    let truth = &sim.net.truth;
    let lost_on_both = sim.lost_live();
    let requested: HashSet<u64> = truth.requests.iter().flat_map(|&(f, t)| f..t).collect();
    // No message present on either line was ever requested; everything
    // both lines lost was.
    assert_eq!(requested, lost_on_both);
    assert!(
        !lost_on_both.is_empty() && lost_on_both.len() < 1000,
        "5% x 5%: {}",
        lost_on_both.len()
    );
    assert_eq!(c.recovered, lost_on_both.len() as u64);
    assert_eq!(c.wins_a + c.wins_b + c.recovered, n);
    assert!(c.wins_b > c.wins_a / 50, "B wins what A lost");
    assert_eq!(c.duplicates, truth.arrivals - n);
    assert_eq!((c.stale, c.unrecoverable), (0, 0));
}

#[test]
fn a_dead_line_only_delays_recovery_by_the_line_grace() {
    let mut sim = Sim::new(
        3,
        sub_config(),
        pub_config(1),
        Load {
            messages: 20_000,
            ..SMALL
        },
    );
    sim.net.lines = [
        Some(Link::new(20_000, 0, 5 * US, 8 * US)),
        Some(Link::new(20_000, 0, 7 * US, 10 * US)),
    ];
    sim.run_until(5 * MS);
    // Line B goes dark.
    sim.net.lines[1] = Some(Link::new(1_000_000, 0, 7 * US, 10 * US));
    sim.run(2 * MS);
    sim.assert_all_delivered(1, 20_000);
    let requested: HashSet<u64> = sim
        .net
        .truth
        .requests
        .iter()
        .flat_map(|&(f, t)| f..t)
        .collect();
    assert_eq!(requested, sim.lost_live());
}

#[test]
fn a_retained_window_too_small_gives_gaps_exactly_where_messages_were_lost() {
    let load = Load {
        messages: 20_000,
        flush_ppm: 1_000_000,
        ..SMALL
    };
    let mut sim = Sim::new(
        4,
        sub_config(),
        PublisherConfig {
            retain_messages: 2,
            ..pub_config(1)
        },
        load,
    );
    // Lossless towards the end, so that every loss is long out of the
    // two-message window by the time it is asked for.
    sim.net.lines[0] = Some(Link {
        lossless_from: 19_000 * US,
        ..Link::new(30_000, 0, 5 * US, 8 * US)
    });
    sim.run(2 * MS);
    let (got, gaps) = cover(&sim.evs(), 1, 20_000);
    let lost = sim.lost_live();
    assert!(lost.len() > 100);
    assert_eq!(gaps, lost);
    assert_eq!(got.len() + gaps.len(), 20_000);
    sim.assert_payloads();
    let c = sim.sub.counters();
    assert_eq!(c.unrecoverable, lost.len() as u64);
    assert_eq!(c.recovered, 0);
    assert!(c.not_available_received > 0);
    assert_eq!(
        sim.publisher.counters().not_available_sent,
        c.not_available_received
    );
}

#[test]
fn a_reorder_window_too_small_gives_gaps_exactly_where_messages_were_lost() {
    let mut sim = Sim::new(
        5,
        SubscriberConfig {
            reorder_window: 16,
            request_timeout: Duration::from_millis(1),
            max_retries: 0,
            // Every jump beyond the window believed at once, so the gaps
            // are exactly the losses.
            confirm: 1,
            ..sub_config()
        },
        pub_config(1),
        Load {
            messages: 20_000,
            ..SMALL
        },
    );
    sim.net.lines[0] = Some(Link::new(30_000, 0, 5 * US, 8 * US));
    // Requests never reach the publisher.
    sim.net.up = Link::new(1_000_000, 0, 5 * US, 8 * US);
    sim.run(5 * MS);
    let (_, gaps) = cover(&sim.evs(), 1, 20_000);
    sim.assert_payloads();
    let lost = sim.lost_live();
    assert!(lost.len() > 100);
    assert_eq!(gaps, lost);
    let c = sim.sub.counters();
    assert_eq!(c.unrecoverable, lost.len() as u64);
    assert_eq!(c.messages_delivered, 20_000 - lost.len() as u64);
    assert_eq!(c.stale, 0);
}

#[test]
fn a_restarted_publisher_is_followed_and_its_old_incarnation_dropped() {
    let load = Load {
        messages: 5_000,
        ..SMALL
    };
    let mut sim = Sim::new(6, sub_config(), pub_config(100), load);
    sim.net.lines[0] = Some(Link::new(20_000, 5_000, 5 * US, 8 * US));
    // Keep copies of the first incarnation's datagrams to replay later.
    let mut old: Vec<Vec<u8>> = Vec::new();
    let mut p = PublisherCore::new(&pub_config(100)).unwrap();
    for seq in 1..=50u64 {
        p.publish(&payload(seq, 8), None, 0, |d: &[u8]| old.push(d.to_vec()))
            .unwrap();
        p.flush(0, |d: &[u8]| old.push(d.to_vec()));
    }
    sim.run(MS);
    sim.assert_all_delivered(1, 5_000);
    let first_sizes = sim.sizes.clone();

    // The publisher restarts with a larger epoch and starts again at 1.
    sim.publisher = PublisherCore::new(&pub_config(200)).unwrap();
    sim.published = 0;
    sim.sizes = vec![0];
    sim.next_publish = sim.now + FIRST_PUBLISH;
    sim.run(MS);
    // Old datagrams (replays, stragglers) change nothing.
    let before = sim.events.len();
    for d in &old {
        let r = sim.sub.on_datagram_from(
            Line::A,
            GENUINE,
            d,
            sim.now,
            |_| panic!("delivered"),
            |_| {},
        );
        assert_eq!(r, Err(frame::DropReason::OldEpoch));
    }
    assert_eq!(sim.events.len(), before);

    let evs = sim.evs();
    assert_eq!(evs[5_000], Ev::Restart(200));
    for (i, e) in evs[..5_000].iter().enumerate() {
        let s = i as u64 + 1;
        assert_eq!(*e, Ev::Msg(s, payload(s, first_sizes[s as usize])));
    }
    assert_eq!(evs.len(), 10_001);
    for (i, e) in evs[5_001..].iter().enumerate() {
        let s = i as u64 + 1;
        assert_eq!(*e, Ev::Msg(s, payload(s, sim.sizes[s as usize])));
    }
    let c = sim.sub.counters();
    assert_eq!(c.restarts, 1);
    assert!(c.drops.old_epoch >= old.len() as u64);
    assert_eq!((c.unrecoverable, c.gap_events), (0, 0));
}

#[test]
fn a_heartbeat_reveals_a_lost_tail() {
    let mut sim = Sim::new(
        7,
        sub_config(),
        pub_config(1),
        Load {
            messages: 100,
            flush_ppm: 1_000_000,
            ..SMALL
        },
    );
    // The last five messages never make it on the line.
    sim.net.drop_live = |seq| seq > 95;
    sim.run(MS);
    sim.assert_all_delivered(1, 100);
    let c = sim.sub.counters();
    assert_eq!(c.recovered, 5);
    assert!(c.heartbeats_received > 0);
    assert_eq!(sim.net.truth.requests.first(), Some(&(96, 101)));
}

/// A publisher that sends one message and then waits (as in a round
/// trip), with a heartbeat interval of 1 ms backing off to 4 ms: the
/// message it is idle after is lost on the line, and so are the first
/// `lost_heartbeats` heartbeats after it. Returns how long after its
/// publication message 3 was delivered.
fn idle_loss_recovery_time(lost_heartbeats: u32) -> u64 {
    let interval = 5 * MS;
    let mut sim = Sim::new(
        12,
        SubscriberConfig {
            publisher_timeout: Duration::from_millis(20),
            ..sub_config()
        },
        PublisherConfig {
            heartbeat_interval: Duration::from_millis(1),
            heartbeat_max_interval: Duration::from_millis(4),
            ..pub_config(1)
        },
        Load {
            messages: 5,
            interval,
            flush_ppm: 1_000_000,
            ..SMALL
        },
    );
    sim.net.drop_live = |seq| seq == 3;
    let published_3 = FIRST_PUBLISH + 2 * interval;
    sim.run_until(published_3);
    sim.net.lose_heartbeats = lost_heartbeats;
    sim.run(MS);
    sim.assert_all_delivered(1, 5);
    let c = sim.sub.counters();
    assert_eq!((c.recovered, c.unrecoverable), (1, 0));
    assert_eq!(c.drops.total() - c.drops.unconfirmed_claim, 0, "{c:?}");
    let delivered_3 = sim
        .events
        .iter()
        .find(|(_, e)| matches!(e, Ev::Msg(3, _)))
        .map(|&(t, _)| t)
        .unwrap();
    delivered_3 - published_3
}

#[test]
fn a_message_lost_on_an_idle_stream_is_recovered_after_one_heartbeat() {
    // The heartbeat is due 1 ms after the message; then a request and a
    // reply (about 30 µs here). A second heartbeat would come 1 ms later.
    let t = idle_loss_recovery_time(0);
    assert!((MS..MS + 100 * US).contains(&t), "recovered after {t} ns");
}

#[test]
fn a_lost_heartbeat_on_an_idle_stream_delays_recovery_to_the_next_backed_off_one() {
    // One copy of the first heartbeat lost: the next heartbeat completes
    // the claim. Both copies lost: the next heartbeat alone is enough.
    // The next one comes twice the interval after the first (back-off).
    for lost in [1, 2] {
        let t = idle_loss_recovery_time(lost);
        assert!(
            (3 * MS..3 * MS + 100 * US).contains(&t),
            "{lost} lost: recovered after {t} ns"
        );
    }
}

#[test]
fn an_idle_stream_on_the_default_schedule_stays_up_and_its_lost_tail_is_recovered() {
    // The stream defaults: heartbeats 100 ms after data, backing off to
    // 250 ms, and a subscriber timeout of 1 s; ten seconds idle after the
    // last message, which is lost on the line.
    let stream = crate::config::StreamConfig::default();
    let mut sim = Sim::new(
        14,
        SubscriberConfig {
            publisher_timeout: stream.heartbeat_timeout,
            ..sub_config()
        },
        PublisherConfig {
            heartbeat_interval: stream.heartbeat_interval,
            heartbeat_max_interval: stream.idle_heartbeat_cap(),
            ..pub_config(1)
        },
        Load {
            messages: 5,
            interval: MS,
            flush_ppm: 1_000_000,
            ..SMALL
        },
    );
    sim.tick_period = MS;
    sim.net.drop_live = |seq| seq == 5;
    let published_5 = FIRST_PUBLISH + 4 * MS;
    sim.run_until(10_000 * MS);
    // Every message once, in order, and nothing else: no loss reported,
    // and never the publisher down.
    sim.assert_all_delivered(1, 5);
    let c = sim.sub.counters();
    assert_eq!((c.recovered, c.publisher_down), (1, 0));
    // Recovered after the first heartbeat, 100 ms after the message (at
    // the next 1 ms tick), plus a request and a reply.
    let delivered_5 = sim
        .events
        .iter()
        .find(|(_, e)| matches!(e, Ev::Msg(5, _)))
        .map(|&(t, _)| t)
        .unwrap();
    let t = delivered_5 - published_5;
    assert!((100 * MS..102 * MS).contains(&t), "recovered after {t} ns");
    // Pairs: one at the start (before any data), then 100 ms after the
    // last message (tick at 105 ms), 200 ms later, then every 250 ms to
    // 10 s: 1 + 2 + 38 pairs, against 1 + 99 on a fixed 100 ms schedule.
    let p = sim.publisher.counters();
    assert_eq!(p.heartbeats_sent, 2 * 41);
    assert_eq!(c.heartbeats_received, p.heartbeats_sent);
    // An idle subscriber sleeps until the silence would be reported: a
    // whole timeout after the last heartbeat, beyond the longest gap.
    let timeout = stream.heartbeat_timeout.as_nanos() as u64;
    assert_eq!(
        sim.sub.wake_deadline(),
        sim.net.truth.last_arrival + timeout
    );
}

#[test]
fn a_silent_publisher_is_reported_down_once_after_the_timeout() {
    let mut sim = Sim::new(
        8,
        sub_config(),
        pub_config(1),
        Load {
            messages: 100,
            ..SMALL
        },
    );
    sim.run_until(MS);
    sim.publisher_alive = false;
    sim.run_until(20 * MS);
    let last = sim.net.truth.last_arrival;
    let downs: Vec<&(u64, Ev)> = sim
        .events
        .iter()
        .filter(|(_, e)| matches!(e, Ev::Down(_)))
        .collect();
    assert_eq!(downs.len(), 1, "{downs:?}");
    let (t, e) = downs[0];
    assert_eq!(*e, Ev::Down(100));
    // Reported at the first tick at or after the timeout, not before.
    assert!(*t >= last + 2 * MS && *t < last + 2 * MS + sim.tick_period);
    // The heartbeats kept it alive while the publisher ran.
    assert!(last > 900 * US);
}

#[test]
fn fragmented_messages_with_lost_fragments_are_recovered() {
    let load = Load {
        messages: 20_000,
        large_ppm: 200_000,
        large_max: 8000,
        ..SMALL
    };
    let sub = SubscriberConfig {
        reassembly_buffers: 32,
        ..sub_config()
    };
    let mut sim = Sim::new(9, sub, pub_config(1), load);
    sim.net.lines[0] = Some(Link::new(30_000, 10_000, 5 * US, 8 * US));
    sim.run(2 * MS);
    sim.assert_all_delivered(1, 20_000);
    let c = sim.sub.counters();
    let lost = sim.lost_live();
    assert!(c.fragments_received > 10_000);
    assert_eq!(c.recovered, lost.len() as u64);
    assert_eq!(c.duplicates, sim.net.truth.arrivals - sim.total_units());
    assert_eq!((c.reassembly_evictions, c.drops.reassembly_full), (0, 0));
    assert_eq!(c.drops.total(), 0);
}

#[test]
fn a_late_joiner_fetches_what_the_publisher_still_retains() {
    let mut sim = Sim::new(
        10,
        SubscriberConfig {
            late_join: LateJoin::Oldest,
            ..sub_config()
        },
        PublisherConfig {
            retain_messages: 256,
            ..pub_config(1)
        },
        Load {
            messages: 10_000,
            ..SMALL
        },
    );
    sim.join_at = 3 * MS;
    sim.run(2 * MS);
    let first_seen = sim.first_seen.unwrap();
    let Ev::Msg(first, _) = sim.evs()[0] else {
        panic!(
            "{:?} first seen {first_seen} {:?}",
            head(&sim.evs()),
            sim.sub.counters()
        )
    };
    // From before the join point, as far back as the publisher retained
    // (256) within half the reorder window (512).
    assert!(
        first + 200 < first_seen && first > first_seen - 512,
        "{first} {first_seen}"
    );
    sim.assert_all_delivered(first, 10_000);
    let c = sim.sub.counters();
    assert_eq!(c.join_skipped, first - (first_seen - 512));
    assert_eq!((c.unrecoverable, c.gap_events), (0, 0));
}

#[test]
fn buffers_never_move_or_grow_under_loss() {
    let load = Load {
        messages: 10_000,
        large_ppm: 100_000,
        large_max: 8000,
        ..SMALL
    };
    let sub = SubscriberConfig {
        reassembly_buffers: 32,
        ..sub_config()
    };
    let mut sim = Sim::new(11, sub, pub_config(1), load);
    sim.net.lines = [
        Some(Link::new(30_000, 10_000, 5 * US, 8 * US)),
        Some(Link::new(30_000, 10_000, 7 * US, 10 * US)),
    ];
    let (p, s) = (sim.publisher.buffers(), sim.sub.buffers());
    sim.run(2 * MS);
    sim.assert_all_delivered(1, 10_000);
    assert_eq!(sim.publisher.buffers(), p);
    assert_eq!(sim.sub.buffers(), s);
}

#[test]
fn the_generator_is_reproducible() {
    let (mut a, mut b) = (Rng::new(42), Rng::new(42));
    for _ in 0..100 {
        assert_eq!(a.next_u64(), b.next_u64());
    }
    assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    let mut r = Rng::new(3);
    let hits = (0..100_000).filter(|_| r.chance(50_000)).count();
    assert!((4_000..6_000).contains(&hits), "{hits}");
}
