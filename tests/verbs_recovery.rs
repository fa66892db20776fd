//! Loss recovery on RDMA UD multicast: in the Soft-RoCE lane's pair set-up
//! the publisher sends on rxe0 (over veth0) and the subscriber receives on
//! rxe1, with `tc netem` dropping RoCE packets on veth0. Every message must
//! still arrive exactly once and in order, recovered by retransmission.
//!
//! Needs the lane's guest (RDMA devices, netem, root). Elsewhere it prints
//! `SKIPPED` and passes; with MDBUS_REQUIRE_RDMA=1 a missing device fails.

mod verbs_support;

use std::process::Command;

use mdbus::{Bus, Config, Event};
use verbs_support::{addr_a, addr_b, rdma_or_skip, unique_group};

/// Removes the netem qdisc again, whatever happens in the test.
struct Netem(&'static str);

impl Netem {
    fn add(dev: &'static str, spec: &str) -> Result<Netem, String> {
        let mut args = vec!["qdisc", "replace", "dev", dev, "root", "netem"];
        args.extend(spec.split_whitespace());
        match Command::new("tc").args(&args).output() {
            Ok(o) if o.status.success() => Ok(Netem(dev)),
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", self.0, "root"])
            .output();
    }
}

/// A bus on `interface`; its subscribers fetch the retained history when
/// they join, so reordering cannot make one start after message 1.
fn bus(interface: String, group: &str, extra: &str) -> Bus {
    let capacity = if extra.contains("capacity") {
        ""
    } else {
        "capacity = 65536\n"
    };
    let toml = format!(
        "transport = \"verbs\"\n[streams.s]\nmax_message = 64\n{capacity}\
         group = \"{group}\"\ninterface = \"{interface}\"\nautoflush = false\n\
         retransmit_timeout = \"50ms\"\nretransmit_retries = 40\n\
         heartbeat_interval = \"10ms\"\nheartbeat_timeout = \"5s\"\n\
         late_join = \"oldest\"\n{extra}"
    );
    Bus::new(Config::from_toml_str(&toml, "<verbs recovery>").unwrap()).unwrap()
}

/// What a run delivered.
struct Outcome {
    delivered: u64,
    gap_messages: u64,
    counters: mdbus::recovery::Counters,
    /// The publisher's.
    publisher: mdbus::recovery::Counters,
}

/// Publishes `total` 64-byte messages, sixteen to a datagram, from rxe0 to
/// a subscriber on rxe1 under `netem` on veth0, and checks that what the
/// subscriber gets is in order, each message once, with every loss it
/// could not recover reported as a gap. `None` when netem is unavailable
/// here (and not required).
fn run(netem: &str, total: u64, publisher_extra: &str, subscriber_extra: &str) -> Option<Outcome> {
    let guard = match Netem::add("veth0", netem) {
        Ok(n) => n,
        Err(why) => {
            let why = format!("cannot add netem on veth0: {why}");
            mdbus_testkit::skip("verbs_recovery", mdbus_testkit::Lack::Kernel, &why);
            return None;
        }
    };
    let group = unique_group();
    let mut p = bus(addr_a(), &group, publisher_extra)
        .publisher("s")
        .unwrap();
    let mut s = bus(addr_b(), &group, subscriber_extra)
        .subscriber("s")
        .unwrap();
    // The subscriber hears the publisher's first heartbeat (nothing
    // published yet) before the first message, so it knows it is there from
    // the start and that anything it misses later is loss, not history.
    for _ in 0..100_000_000u64 {
        p.service().unwrap();
        s.poll(|e| panic!("nothing was published: {e:?}")).unwrap();
        if s.recovery_counters().unwrap().heartbeats_received > 0 {
            break;
        }
    }
    let (mut sent, mut next, mut delivered, mut gap_messages) = (0u64, 1u64, 0u64, 0u64);
    for _ in 0..100_000_000u64 {
        // Never more than a few thousand messages ahead of the reader.
        if sent < total && sent < next + 4096 {
            for _ in 0..16 {
                sent += 1;
                p.publish(&sent.to_le_bytes().repeat(8)).unwrap();
            }
            p.flush().unwrap();
        }
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.seq(), next, "in order, exactly once");
                assert_eq!(m.payload(), &next.to_le_bytes().repeat(8)[..]);
                next += 1;
                delivered += 1;
            }
            Event::Gap { from, to } => {
                assert_eq!(from, next, "a gap starts where delivery stopped");
                gap_messages += to - from;
                next = to;
            }
            other => panic!("unexpected {other:?}"),
        })
        .unwrap();
        if next > total {
            break;
        }
    }
    drop(guard);
    assert_eq!(next - 1, total, "every message delivered or in a gap");
    Some(Outcome {
        delivered,
        gap_messages,
        counters: s.recovery_counters().unwrap(),
        publisher: p.recovery_counters().unwrap(),
    })
}

#[test]
fn ud_multicast_loss_is_recovered_exactly_once_in_order() {
    if !rdma_or_skip("verbs_recovery") {
        return;
    }
    let Some(o) = run("loss 5%", 100_000, "", "") else {
        return;
    };
    let c = o.counters;
    assert_eq!((o.delivered, o.gap_messages), (100_000, 0), "{c:?}");
    assert!(c.recovered > 0, "netem dropped nothing? {c:?}");
    // The publisher's line received the subscriber's requests and none of
    // the publisher's own datagrams to the group.
    let p = o.publisher;
    assert!(p.requests_received > 0, "{p:?}");
    assert!(
        p.datagrams_received <= c.requests_sent,
        "the publisher received {} datagrams for {} requests sent: {p:?}",
        p.datagrams_received,
        c.requests_sent
    );
}

#[test]
fn ud_multicast_reordering_and_duplication_change_nothing() {
    if !rdma_or_skip("verbs_recovery") {
        return;
    }
    let Some(o) = run("delay 1ms 500us loss 1% duplicate 3%", 50_000, "", "") else {
        return;
    };
    let c = o.counters;
    assert_eq!((o.delivered, o.gap_messages), (50_000, 0), "{c:?}");
    assert!(
        c.duplicates > 0,
        "duplicates were injected and must be dropped: {c:?}"
    );
}

#[test]
fn ud_multicast_ab_lines_mask_loss_on_either() {
    if !rdma_or_skip("verbs_recovery") {
        return;
    }
    // Line B on another group over the same devices: netem drops each
    // packet on its own, so the two lines lose independently.
    let b = format!("group_b = \"{}\"\n", unique_group());
    let pub_b = format!("{b}interface_b = \"{}\"\n", addr_a());
    let sub_b = format!("{b}interface_b = \"{}\"\n", addr_b());
    let Some(o) = run("loss 5%", 50_000, &pub_b, &sub_b) else {
        return;
    };
    let c = o.counters;
    assert_eq!((o.delivered, o.gap_messages), (50_000, 0), "{c:?}");
    assert!(c.wins_a > 0 && c.wins_b > 0, "{c:?}");
    // Only what both lines lost (about 0.25%) needs a request; requests
    // count retries too. A single line would have needed about 5%.
    assert!(c.messages_requested < 50_000 * 5 / 100 / 2, "{c:?}");
}

#[test]
fn ud_multicast_window_too_small_reports_gaps() {
    if !rdma_or_skip("verbs_recovery") {
        return;
    }
    // The publisher retains 16 messages: one datagram.
    let Some(o) = run("loss 5%", 50_000, "capacity = 16\n", "") else {
        return;
    };
    assert!(o.gap_messages > 0, "{:?}", o.counters);
    assert_eq!(o.delivered + o.gap_messages, 50_000);
}
