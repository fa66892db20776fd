//! Live: the exchange simulator sends a synthetic day on two loopback
//! multicast lines, each losing packets independently, and answers
//! re-requests; the relay arbitrates, recovers, routes and publishes;
//! subscribers check that every message arrived on its streams, in order,
//! and that the counters agree. Once over shared memory, once over UDP
//! multicast (the bus's own loss recovery behind the relay).

mod relay_common;

use relay_common::live::{live, Day};
use relay_common::*;

/// This process's ports: the tests run side by side, each on its own pair
/// (a line port and the re-request port after it).
fn base_port() -> u16 {
    20_000 + (std::process::id() % 2_500) as u16 * 16
}

#[test]
fn simulator_to_relay_to_shm_subscribers_with_loss_on_both_lines() {
    let scratch = Scratch::new("live-shm-bus");
    let port = base_port();
    live(&scratch.shm_bus(1 << 16), None, port, Day::default());
}

#[test]
fn simulator_to_relay_to_udp_subscribers() {
    let port = base_port() + 2;
    let mut bus = String::from("[bus]\ntransport = \"udp\"\n");
    for (i, s) in STREAMS.iter().enumerate() {
        bus.push_str(&format!(
            "[bus.streams.{s}]\ngroup = \"239.192.82.{}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\ncapacity = 65536\n",
            i + 1
        ));
    }
    live(&bus, None, port, Day::default());
}

/// Both lines lose packets and the relay has no re-request server: what
/// both lost cannot be recovered. Every stream receives an
/// `Event::SourceGap` with the exact feed range of each loss, in its
/// place in the stream, and every sequence number of the day is either
/// delivered or inside exactly one reported range.
#[test]
fn an_unrecoverable_gap_reaches_every_stream_as_a_source_gap() {
    let scratch = Scratch::new("live-source-gap");
    let port = base_port() + 4;
    let out = relay_common::live::run(
        &scratch.shm_bus(1 << 16),
        None,
        port,
        Day::default(),
        relay_common::live::Options {
            drop: (0.2, 0.2),
            rerequest: false,
            ..Default::default()
        },
        true,
    );
    let c = &out.summary.counters;
    assert_eq!(out.summary.ended_by, "end-of-session", "{:?}", out.summary);
    assert!(out.exchange.dropped_both > 0, "{:?}", out.exchange);
    assert!(c.upstream.unrecoverable > 0, "{c:?}");

    // The ranges, from the first stream; every stream has the same.
    let ranges: Vec<(u64, u64)> = out.got["s1"]
        .source_gaps
        .iter()
        .map(|&(f, t, _)| (f, t))
        .collect();
    assert!(!ranges.is_empty());
    let lost: u64 = ranges.iter().map(|(f, t)| t - f).sum();
    assert_eq!(lost, c.upstream.unrecoverable, "{ranges:?}");
    assert_eq!(
        c.local.source_gaps,
        ranges.len() as u64 * STREAMS.len() as u64
    );
    let in_gap = |seq: u64| ranges.iter().any(|&(f, t)| (f..t).contains(&seq));
    for s in STREAMS {
        let g = &out.got[s];
        let r: Vec<(u64, u64)> = g.source_gaps.iter().map(|&(f, t, _)| (f, t)).collect();
        assert_eq!(r, ranges, "stream {s}");
        assert!(g.ended && g.losses == 0, "stream {s}");
        // Each notice sits exactly where its range falls in the stream.
        for &(from, to, before) in &g.source_gaps {
            assert!(g.messages[..before].iter().all(|(q, _)| *q < from), "{s}");
            assert!(g.messages[before..].iter().all(|(q, _)| *q >= to), "{s}");
        }
    }
    // Everything not reported lost was delivered, on its streams, once,
    // in order, byte for byte.
    let kept: Vec<(u64, Vec<u8>)> = out
        .sent
        .iter()
        .filter(|(q, _)| !in_gap(*q))
        .cloned()
        .collect();
    assert_eq!(kept.len() as u64 + lost, out.sent.len() as u64);
    let mut got = out.got.clone();
    for r in got.values_mut() {
        r.source_gaps.clear();
    }
    check_delivery(&kept, &got);
}
