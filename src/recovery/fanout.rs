//! One publisher and many subscribers on a modelled network, in simulated
//! time: what loss recovery costs as a stream fans out (docs/SCALING.md).
//!
//! The model: every datagram the publisher sends to the group crosses one
//! upstream link (a drop there is seen by every subscriber: correlated
//! loss, optionally in bursts) and then each subscriber's own link (drops
//! there are independent). Requests travel back on the subscriber's link;
//! a repair goes to the requester alone or to the group, as the
//! publisher's [`Repair`] policy decides, and is subject to the same
//! links. Delays differ per subscriber and jitter per datagram. A seeded
//! xorshift generator drives everything, so a run is reproducible.
//!
//! The cores are the real [`PublisherCore`] and [`SubscriberCore`]; only
//! the network and the clock are simulated, which is what lets one machine
//! measure 1,000 subscribers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::publisher::{Dest, PublisherConfig, PublisherCore, Repair};
use super::rng::Rng;
use super::subscriber::{Line, SubscriberConfig, SubscriberCore};
use crate::message::Event;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct FanoutParams {
    /// Subscribers on the stream.
    pub subscribers: usize,
    /// Messages published.
    pub messages: u64,
    /// Payload bytes of each message.
    pub message_bytes: usize,
    /// Time between two messages.
    pub interval: Duration,
    /// Chance, in percent, that a given subscriber loses a given datagram.
    pub loss_percent: f64,
    /// Share of that loss (0 to 1) that happens upstream of every
    /// subscriber (one drop, seen by all); the rest is independent per
    /// subscriber.
    pub correlated: f64,
    /// Datagrams lost in a row at each upstream drop (1: isolated drops).
    pub burst: u32,
    /// Seed of the network's random generator.
    pub seed: u64,
    /// One-way delay from the publisher to the nearest subscriber; each
    /// further subscriber is a little farther (up to `spread`).
    pub one_way: Duration,
    /// Extra one-way delay of the farthest subscriber.
    pub spread: Duration,
    /// Random extra delay per datagram (reorders within a link).
    pub jitter: Duration,
    /// The subscribers' wait before requesting (fixed part).
    pub nak_delay: Duration,
    /// The subscribers' random extra wait (see
    /// [`SubscriberConfig::nak_backoff`]).
    pub nak_backoff: Duration,
    /// The subscribers' expected group size (see
    /// [`SubscriberConfig::nak_group_size`]).
    pub nak_group_size: u32,
    /// The subscribers' request timeout.
    pub request_timeout: Duration,
    /// Where the publisher sends repairs.
    pub repair: Repair,
    /// The publisher's repair linger.
    pub repair_linger: Duration,
    /// Chronically lossy subscribers (the first ones): each loses
    /// `lossy_loss_percent` of datagrams on its own link on top of the
    /// rest. Their completeness is reported apart
    /// ([`FanoutReport::lossy_incomplete`]): the publisher may throttle
    /// them.
    pub lossy_subscribers: usize,
    /// Extra independent loss of each lossy subscriber, in percent.
    pub lossy_loss_percent: f64,
    /// The publisher's lossy-receiver protection (see
    /// [`PublisherConfig::lossy_share_percent`]); 0 turns it off.
    pub lossy_share_percent: u32,
}

impl Default for FanoutParams {
    /// 100 subscribers, 100,000 32-byte messages at 1 µs, 1% loss of which
    /// half upstream, 20-30 µs one way with 2 µs jitter, NAK delay 20 µs,
    /// backoff 1 ms for a group of 100, request timeout 5 ms, repairs
    /// `Auto` with a 250 µs linger, no lossy subscriber, requesters held
    /// to 10% of the stream.
    fn default() -> Self {
        FanoutParams {
            subscribers: 100,
            messages: 100_000,
            message_bytes: 32,
            interval: Duration::from_micros(1),
            loss_percent: 1.0,
            correlated: 0.5,
            burst: 1,
            seed: 7,
            one_way: Duration::from_micros(20),
            spread: Duration::from_micros(10),
            jitter: Duration::from_micros(2),
            nak_delay: Duration::from_micros(20),
            nak_backoff: Duration::from_millis(1),
            nak_group_size: 100,
            request_timeout: Duration::from_millis(5),
            repair: Repair::Auto,
            repair_linger: Duration::from_micros(250),
            lossy_subscribers: 0,
            lossy_loss_percent: 0.0,
            lossy_share_percent: 10,
        }
    }
}

/// What a simulation measured.
#[derive(Debug, Clone)]
pub struct FanoutReport {
    /// Subscribers simulated.
    pub subscribers: usize,
    /// Messages published.
    pub messages: u64,
    /// Live datagrams the publisher sent to the group.
    pub datagrams: u64,
    /// Upstream drops of live datagrams (each lost by every subscriber).
    pub upstream_loss_events: u64,
    /// Independent drops of live datagrams (each lost by one subscriber).
    pub independent_loss_events: u64,
    /// Request datagrams the subscribers sent.
    pub requests: u64,
    /// Datagrams the publisher sent in answer to requests (a repair to the
    /// group counts once).
    pub retransmitted_datagrams: u64,
    /// Of those, datagrams sent to the group.
    pub group_repair_datagrams: u64,
    /// Requested messages the publisher did not resend (linger).
    pub lingered: u64,
    /// Messages that reached a subscriber by a repair it had not asked for.
    pub suppressed: u64,
    /// Time from when a lost message's live copy would have reached a
    /// subscriber to when its repair was delivered there, ns.
    pub recovery: Histogram<u64>,
    /// Every subscriber delivered every message, in order, exactly once,
    /// with no gap.
    pub delivered_all: bool,
    /// Subscribers that did not (0 when `delivered_all`).
    pub incomplete_subscribers: usize,
    /// Times the publisher found a requester over its share and told it.
    pub requesters_throttled: u64,
    /// Throttled notices the subscribers believed.
    pub throttled_notices: u64,
    /// Lossy subscribers that did not get every message (they are left
    /// out of `delivered_all`, `incomplete_subscribers` and `recovery`).
    pub lossy_incomplete: usize,
}

impl FanoutReport {
    /// Loss events: upstream drops plus independent drops.
    pub fn loss_events(&self) -> u64 {
        self.upstream_loss_events + self.independent_loss_events
    }

    /// Requests per loss event (0 without loss).
    pub fn requests_per_loss_event(&self) -> f64 {
        ratio(self.requests, self.loss_events())
    }

    /// Retransmitted datagrams per loss event (0 without loss).
    pub fn retransmits_per_loss_event(&self) -> f64 {
        ratio(self.retransmitted_datagrams, self.loss_events())
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    /// Packet `p` reaches subscriber `s`.
    ToSub { s: u32, p: u32 },
    /// Packet `p`, a request from subscriber `s`, reaches the publisher.
    ToPub { s: u32, p: u32 },
    /// Subscriber `s` checks its timers.
    SubTick { s: u32 },
    /// The publisher flushes and sends heartbeats.
    PubTick,
    /// The next message is published.
    Publish,
}

struct Net {
    rng: Rng,
    /// Every datagram sent, by index; a multicast one is stored once.
    packets: Vec<Vec<u8>>,
    heap: BinaryHeap<Reverse<(u64, u64, What)>>,
    order: u64,
    delay: Vec<u64>,
    jitter: u64,
    p_up: f64,
    /// Per subscriber: chance its own link drops a datagram.
    p_ind: Vec<f64>,
    burst: u32,
    /// Upstream datagrams still to drop in the current burst.
    burst_left: u32,
}

impl Net {
    fn at(&mut self, t: u64, w: What) {
        self.order += 1;
        self.heap.push(Reverse((t, self.order, w)));
    }

    fn store(&mut self, d: &[u8]) -> u32 {
        self.packets.push(d.to_vec());
        (self.packets.len() - 1) as u32
    }

    fn upstream_drop(&mut self) -> bool {
        if self.burst_left > 0 {
            self.burst_left -= 1;
            return true;
        }
        if self.rng.chance_of(self.p_up) {
            self.burst_left = self.burst.saturating_sub(1);
            return true;
        }
        false
    }

    fn arrival(&mut self, now: u64, s: usize) -> u64 {
        now + self.delay[s] + self.rng.below(self.jitter + 1)
    }
}

/// Runs the simulation `p` describes.
pub fn simulate(p: &FanoutParams) -> FanoutReport {
    let n = p.subscribers.max(1);
    let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
    let share = (p.loss_percent / 100.0).clamp(0.0, 1.0);
    let correlated = p.correlated.clamp(0.0, 1.0);
    let burst = p.burst.max(1);
    let mut net = Net {
        rng: Rng::from_state(p.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        packets: Vec::new(),
        heap: BinaryHeap::new(),
        order: 0,
        delay: (0..n)
            .map(|s| ns(p.one_way) + ns(p.spread) * s as u64 / n as u64)
            .collect(),
        jitter: ns(p.jitter),
        // A burst of `burst` drops per upstream event keeps the upstream
        // share of the loss at `correlated`.
        p_up: share * correlated / burst as f64,
        p_ind: (0..n)
            .map(|s| {
                let extra = if s < p.lossy_subscribers {
                    p.lossy_loss_percent / 100.0
                } else {
                    0.0
                };
                (share * (1.0 - correlated) + extra).clamp(0.0, 1.0)
            })
            .collect(),
        burst,
        burst_left: 0,
    };
    let datagram = 1472;
    let mut publisher = PublisherCore::new(&PublisherConfig {
        max_message: p.message_bytes.max(1),
        max_datagram: datagram,
        retain_messages: (p.messages.max(2) as usize)
            .next_power_of_two()
            .min(1 << 22),
        retain_bytes: (p.messages.max(2) as usize * p.message_bytes.max(1)).min(1 << 30),
        heartbeat_interval: Duration::from_millis(1),
        // Fixed: the figures count heartbeat datagrams as they always did.
        heartbeat_max_interval: Duration::from_millis(1),
        retransmit_rate: 0,
        retransmit_global_rate: 0,
        repair: p.repair,
        repair_linger: p.repair_linger,
        lossy_share_percent: p.lossy_share_percent,
        ..PublisherConfig::new(1, 1)
    })
    .expect("valid publisher settings");
    let mut subs: Vec<SubscriberCore> = (0..n)
        .map(|s| {
            SubscriberCore::new(&SubscriberConfig {
                max_message: p.message_bytes.max(1),
                max_datagram: datagram,
                reorder_window: 1 << 16,
                nak_delay: p.nak_delay,
                line_grace: p.nak_delay,
                request_timeout: p.request_timeout,
                max_retries: 50,
                publisher_timeout: Duration::from_secs(3600),
                nak_backoff: p.nak_backoff,
                nak_group_size: p.nak_group_size,
                nak_seed: p.seed ^ (s as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93),
                ..SubscriberConfig::new(1)
            })
            .expect("valid subscriber settings")
        })
        .collect();
    let interval = ns(p.interval).max(1);
    let tick = 10_000;
    // Per subscriber: next sequence expected, whether it broke order.
    let mut next = vec![1u64; n];
    let mut broken = vec![false; n];
    // Per message: when it was published (for the recovery time).
    let mut published_at = vec![0u64; p.messages as usize + 1];
    // Per subscriber, the live datagrams it lost, as (first, last)
    // sequence ranges in order, and how far its scan has gone.
    let mut lost: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n];
    let mut lost_at = vec![0usize; n];
    let mut recovery =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds");
    let (mut upstream, mut independent, mut datagrams) = (0u64, 0u64, 0u64);
    let (mut retransmitted, mut to_group) = (0u64, 0u64);
    let mut scheduled = vec![u64::MAX; n];
    // Subscribers that delivered the last message.
    let mut complete = 0usize;
    let payload = vec![0x5Au8; p.message_bytes];
    let mut seq = 0u64;
    let end_publish = p.messages * interval;
    // Long enough for the last losses to be seen (heartbeats) and
    // recovered after every retry.
    let end = end_publish + 200 * ns(p.request_timeout).max(1_000_000);
    net.at(0, What::PubTick);
    net.at(interval, What::Publish);

    let limits = super::frame::Limits {
        stream_id: 1,
        max_datagram: datagram,
        max_message: p.message_bytes.max(1),
    };
    // Sends a datagram to the group through the network. A live data
    // datagram's drops are recorded against the subscribers that lose it
    // (`lost`, when given) and returned as (upstream, independent).
    let multicast = |net: &mut Net, now: u64, d: &[u8], lost: Option<&mut Vec<Vec<(u64, u64)>>>| {
        let pkt = net.store(d);
        let range = match super::frame::decode(d, &limits).map(|f| f.frame) {
            Ok(super::frame::Frame::Messages {
                first_seq,
                messages,
                ..
            }) => Some((first_seq, first_seq + messages.len() as u64 - 1)),
            _ => None,
        };
        let mut lost = range.and(lost);
        let mut drops = (0u64, 0u64);
        if net.upstream_drop() {
            if let (Some(r), Some(l)) = (range, lost.as_deref_mut()) {
                drops.0 = 1;
                for v in l.iter_mut() {
                    v.push(r);
                }
            }
            return drops;
        }
        for s in 0..n {
            if net.rng.chance_of(net.p_ind[s]) {
                if let (Some(r), Some(l)) = (range, lost.as_deref_mut()) {
                    drops.1 += 1;
                    l[s].push(r);
                }
                continue;
            }
            let t = net.arrival(now, s);
            net.at(
                t,
                What::ToSub {
                    s: s as u32,
                    p: pkt,
                },
            );
        }
        drops
    };
    let is_data = |d: &[u8]| d.len() > super::frame::DATAGRAM_HEADER_LEN;

    let mut out: Vec<Vec<u8>> = Vec::new();
    while let Some(Reverse((now, _, what))) = net.heap.pop() {
        if now > end {
            break;
        }
        let (s, pkt) = match what {
            What::Publish | What::PubTick => {
                if what == What::Publish {
                    seq += 1;
                    published_at[seq as usize] = now;
                    publisher
                        .publish(&payload, None, now, |d: &[u8]| out.push(d.to_vec()))
                        .expect("publish");
                    if seq < p.messages {
                        net.at(now + interval, What::Publish);
                    }
                } else {
                    if seq == p.messages && complete == n {
                        break;
                    }
                    publisher.tick(now, |d: &[u8]| out.push(d.to_vec()));
                    net.at(now + tick, What::PubTick);
                }
                for d in out.drain(..) {
                    let (u, i) = multicast(&mut net, now, &d, Some(&mut lost));
                    upstream += u;
                    independent += i;
                    datagrams += u64::from(is_data(&d));
                }
                continue;
            }
            What::ToPub { s, p: pkt } => {
                let d = std::mem::take(&mut net.packets[pkt as usize]);
                let mut replies: Vec<(Dest, Vec<u8>)> = Vec::new();
                let _ = publisher.on_request(u64::from(s) + 1, &d, now, |dest, r: &[u8]| {
                    replies.push((dest, r.to_vec()))
                });
                for (dest, r) in replies {
                    retransmitted += u64::from(is_data(&r));
                    match dest {
                        Dest::Group => {
                            to_group += u64::from(is_data(&r));
                            multicast(&mut net, now, &r, None);
                        }
                        Dest::Requester => {
                            if !net.rng.chance_of(net.p_ind[s as usize])
                                && !net.rng.chance_of(net.p_up)
                            {
                                let pkt = net.store(&r);
                                let t = net.arrival(now, s as usize);
                                net.at(t, What::ToSub { s, p: pkt });
                            }
                        }
                    }
                }
                continue;
            }
            What::ToSub { s, p: pkt } => (s as usize, Some(pkt)),
            What::SubTick { s } => (s as usize, None),
        };
        let base = net.delay[s];
        let was_complete = next[s] == p.messages + 1;
        let (nx, br) = (&mut next[s], &mut broken[s]);
        let (lost_s, lost_i) = (&lost[s], &mut lost_at[s]);
        let (published_at, recovery) = (&published_at, &mut recovery);
        let measured = s >= p.lossy_subscribers;
        let mut deliver = |e: Event<'_>| match e {
            Event::Message(m) => {
                if m.seq() != *nx {
                    *br = true;
                }
                *nx = m.seq() + 1;
                // A message of a datagram this subscriber lost live:
                // its recovery time.
                while *lost_i < lost_s.len() && lost_s[*lost_i].1 < m.seq() {
                    *lost_i += 1;
                }
                if let Some(&(a, b)) = lost_s.get(*lost_i) {
                    if measured && (a..=b).contains(&m.seq()) {
                        let live = published_at[m.seq() as usize] + base;
                        let _ = recovery.record(now.saturating_sub(live).max(1));
                    }
                }
            }
            Event::Gap { to, .. } | Event::Overrun { to, .. } => {
                *br = true;
                *nx = to;
            }
            _ => *br = true,
        };
        let mut request = |r: &[u8]| out.push(r.to_vec());
        match pkt {
            Some(pkt) => {
                let d = &net.packets[pkt as usize];
                let _ = subs[s].on_datagram(Line::A, d, now, &mut deliver, &mut request);
            }
            None => {
                scheduled[s] = u64::MAX;
                subs[s].tick(now, &mut deliver, &mut request);
            }
        }
        for r in out.drain(..) {
            if !net.rng.chance_of(net.p_ind[s]) {
                let pkt = net.store(&r);
                let t = net.arrival(now, s);
                net.at(
                    t,
                    What::ToPub {
                        s: s as u32,
                        p: pkt,
                    },
                );
            }
        }
        if !was_complete && next[s] == p.messages + 1 {
            complete += 1;
        }
        let due = subs[s].next_deadline();
        if due < scheduled[s] {
            scheduled[s] = due;
            net.at(due.max(now + 1), What::SubTick { s: s as u32 });
        }
    }

    let mut requests = 0;
    let mut suppressed = 0;
    let mut throttled = 0;
    for s in &subs {
        let c = s.counters();
        requests += c.requests_sent;
        suppressed += c.suppressed;
        throttled += c.throttled;
    }
    let incomplete_in = |r: std::ops::Range<usize>| {
        r.filter(|&s| broken[s] || next[s] != p.messages + 1)
            .count()
    };
    let lossy = p.lossy_subscribers.min(n);
    let incomplete = incomplete_in(lossy..n);
    let pc = publisher.counters();
    FanoutReport {
        subscribers: n,
        messages: p.messages,
        datagrams,
        upstream_loss_events: upstream,
        independent_loss_events: independent,
        requests,
        retransmitted_datagrams: retransmitted,
        group_repair_datagrams: to_group,
        lingered: pc.requests_lingered,
        suppressed,
        recovery,
        delivered_all: incomplete == 0,
        incomplete_subscribers: incomplete,
        requesters_throttled: pc.requesters_throttled,
        throttled_notices: throttled,
        lossy_incomplete: incomplete_in(0..lossy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(subscribers: usize, repair: Repair, backoff_us: u64) -> FanoutReport {
        simulate(&FanoutParams {
            subscribers,
            messages: 4_000,
            loss_percent: 2.0,
            correlated: 1.0,
            repair,
            nak_backoff: Duration::from_micros(backoff_us),
            nak_group_size: subscribers as u32,
            ..FanoutParams::default()
        })
    }

    #[test]
    fn without_suppression_every_subscriber_asks_and_gets_its_own_copy() {
        let r = run(50, Repair::Requester, 0);
        assert!(r.delivered_all, "{r:?}");
        assert!(r.upstream_loss_events > 0, "{r:?}");
        // Each upstream drop is asked for by all 50, each answered alone.
        assert!(r.requests_per_loss_event() >= 50.0, "{r:?}");
        assert!(r.retransmits_per_loss_event() >= 50.0, "{r:?}");
        assert_eq!(r.group_repair_datagrams, 0, "{r:?}");
    }

    #[test]
    fn suppression_keeps_requests_and_repairs_per_loss_flat_as_the_group_grows() {
        let small = run(10, Repair::Auto, 1000);
        let large = run(300, Repair::Auto, 1000);
        for r in [&small, &large] {
            assert!(r.delivered_all, "{r:?}");
            assert!(r.upstream_loss_events > 0, "{r:?}");
            assert!(r.requests_per_loss_event() <= 10.0, "{r:?}");
            assert!(r.retransmits_per_loss_event() <= 3.0, "{r:?}");
            assert!(r.group_repair_datagrams > 0, "{r:?}");
            assert!(r.suppressed > 0, "{r:?}");
        }
        // Thirty times the subscribers, not thirty times the requests.
        assert!(
            large.requests_per_loss_event() < 3.0 * small.requests_per_loss_event(),
            "{small:?} {large:?}"
        );
    }

    #[test]
    fn a_lone_subscribers_losses_are_repaired_to_it_alone() {
        let r = simulate(&FanoutParams {
            subscribers: 20,
            messages: 4_000,
            loss_percent: 1.0,
            correlated: 0.0,
            ..FanoutParams::default()
        });
        assert!(r.delivered_all, "{r:?}");
        assert_eq!(r.upstream_loss_events, 0, "{r:?}");
        assert!(r.independent_loss_events > 0, "{r:?}");
        // Independent losses rarely hit two subscribers in one datagram:
        // most repairs go to the requester alone.
        assert!(
            r.group_repair_datagrams * 2 < r.retransmitted_datagrams,
            "{r:?}"
        );
    }

    #[test]
    fn bursts_upstream_are_recovered_in_order() {
        let r = simulate(&FanoutParams {
            subscribers: 30,
            messages: 4_000,
            loss_percent: 2.0,
            correlated: 1.0,
            burst: 4,
            ..FanoutParams::default()
        });
        assert!(r.delivered_all, "{r:?}");
        assert!(r.upstream_loss_events >= 4, "{r:?}");
        assert!(!r.recovery.is_empty(), "{r:?}");
    }

    #[test]
    fn one_chronically_lossy_subscriber_is_throttled_and_the_others_recover_as_before() {
        let params = FanoutParams {
            subscribers: 30,
            messages: 20_000,
            loss_percent: 1.0,
            correlated: 0.5,
            ..FanoutParams::default()
        };
        let calm = simulate(&params);
        let lossy = simulate(&FanoutParams {
            lossy_subscribers: 1,
            lossy_loss_percent: 30.0,
            ..params.clone()
        });
        assert!(calm.delivered_all && lossy.delivered_all, "{lossy:?}");
        assert_eq!((calm.requesters_throttled, calm.throttled_notices), (0, 0));
        // The lossy one asked for far more than 10% of the stream: it was
        // cut and told.
        assert!(lossy.requesters_throttled >= 1, "{lossy:?}");
        assert!(lossy.throttled_notices >= 1, "{lossy:?}");
        assert_eq!(lossy.lossy_incomplete, 1, "{lossy:?}");
        // The others' recovery is no slower.
        let p99 = |r: &FanoutReport| r.recovery.value_at_quantile(0.99);
        assert!(p99(&lossy) <= 2 * p99(&calm), "{calm:?} {lossy:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let a = run(20, Repair::Auto, 500);
        let b = run(20, Repair::Auto, 500);
        assert_eq!(
            (
                a.requests,
                a.retransmitted_datagrams,
                a.recovery.value_at_quantile(0.99)
            ),
            (
                b.requests,
                b.retransmitted_datagrams,
                b.recovery.value_at_quantile(0.99)
            )
        );
    }

    #[test]
    fn the_wait_distribution_stays_within_its_bounds_and_favours_the_end() {
        assert_eq!(nak_wait_for_test(0, 10, 0.5), 0);
        let t = 1_000_000;
        assert_eq!(nak_wait_for_test(t, 1000, 0.0), 0);
        assert!(nak_wait_for_test(t, 1000, 0.999_999) <= t);
        // Half the subscribers wait more than 90% of the bound in a group
        // of 1,000: few ask early.
        assert!(nak_wait_for_test(t, 1000, 0.5) > t * 9 / 10);
        // A group of one spreads the wait more evenly.
        assert!(nak_wait_for_test(t, 1, 0.5) < t * 7 / 10);
    }

    fn nak_wait_for_test(t: u64, n: u32, u: f64) -> u64 {
        super::super::subscriber::nak_wait(t, n, u)
    }
}
