//! Live: the exchange simulator sends a synthetic day on two loopback
//! multicast lines, each losing packets independently, and answers
//! re-requests; the relay arbitrates, recovers, routes and publishes;
//! subscribers check that every message arrived on its streams, in order,
//! and that the counters agree. Once over shared memory, once over UDP
//! multicast (the bus's own loss recovery behind the relay).

mod relay_common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use mdbus_feed::moldudp64::Session;
use mdbus_feed::synth::{Generator, SynthConfig};
use mdbus_tools::exchange::{Exchange, ExchangeConfig};
use mdbus_tools::relay::{Relay, RelayConfig, RunOptions};
use relay_common::*;

const DEADLINE: Duration = Duration::from_secs(180);

fn synth() -> SynthConfig {
    SynthConfig {
        seed: 21,
        symbols: 30,
        order_messages: 20_000,
        ..SynthConfig::default()
    }
}

/// The session as the generator makes it: (sequence, bytes) from 1.
fn expected() -> Vec<(u64, Vec<u8>)> {
    (1..)
        .zip(
            Generator::new(&synth())
                .unwrap()
                .map(|m| m.bytes().to_vec()),
        )
        .collect()
}

fn live(bus: &str, port: u16) {
    let scratch = Scratch::new(&format!("live-{port}"));
    let line_a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 81, 1), port);
    let line_b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 81, 2), port);
    let rerequest = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port + 1);
    let text = format!(
        "[input]\nline_a = \"{line_a}\"\nline_b = \"{line_b}\"\ninterface = \"127.0.0.1\"\n\
         rerequest = \"{rerequest}\"\nstart_sequence = 1\nstop_at_end_of_session = true\n\
         [counters]\npath = \"{}\"\nlog_interval = \"0s\"\n\
         [thread]\npin = false\nidle = \"yield\"\n{bus}{ROUTING}",
        scratch.path("counters").display(),
    );
    let cfg = RelayConfig::from_toml_str(&text, "<test>").unwrap();
    let sub_bus = mdbus::Bus::new(cfg.bus.clone()).unwrap();
    // The relay joins before the exchange sends its first packet.
    let relay = Relay::new(cfg, "<test>").unwrap();
    let mut subs: Vec<_> = STREAMS
        .iter()
        .map(|s| sub_bus.subscriber(s).unwrap())
        .collect();
    let exchange = Exchange::start(ExchangeConfig {
        session: Session::new("LIVE000001").unwrap(),
        line_a,
        line_b,
        interface: Ipv4Addr::LOCALHOST,
        ttl: 0,
        drop_a: 0.05,
        drop_b: 0.05,
        seed: 77,
        synth: synth(),
        messages_per_second: 100_000,
        max_packet: 1400,
        rerequest_bind: rerequest,
        heartbeat_interval: Duration::from_millis(50),
        repeat: false,
    })
    .unwrap();
    let runner = std::thread::spawn(move || {
        relay
            .run(&RunOptions {
                duration: Some(DEADLINE),
                log: false,
                ..RunOptions::default()
            })
            .unwrap()
    });
    let sent = expected();
    // Subscribers read while the relay runs (a UDP subscriber must, to ask
    // for what it missed in time).
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for (_, m) in &sent {
        for s in expected_streams(m) {
            *want.entry(s.to_string()).or_default() += 1;
        }
    }
    let got = collect(&mut subs, &want, DEADLINE);
    let summary = runner.join().unwrap();
    let ex = exchange.stop();
    assert_eq!(summary.ended_by, "end-of-session", "{summary:?}");
    check_delivery(&sent, &got);

    let c = &summary.counters;
    assert_eq!(c.local.messages_in, sent.len() as u64);
    assert_eq!(c.upstream.unrecoverable, 0);
    assert_eq!(
        c.upstream.wins_a + c.upstream.wins_b + c.upstream.wins_recovery,
        c.local.messages_in,
        "every message won on some line"
    );
    assert!(c.upstream.wins_a > 0 && c.upstream.wins_b > 0);
    assert!(ex.dropped_a > 0 && ex.dropped_b > 0, "{ex:?}");
    if ex.dropped_both > 0 {
        assert!(c.upstream.requests_sent > 0, "{c:?} {ex:?}");
        assert!(c.upstream.wins_recovery > 0, "{c:?} {ex:?}");
        assert!(ex.requests_served > 0);
    }
    let per_stream: u64 = c.streams.iter().map(|s| s.messages).sum();
    assert_eq!(per_stream, c.local.messages_out);
    assert_eq!(c.local.unrouted + c.local.bad_messages, 0);
}

#[test]
fn simulator_to_relay_to_shm_subscribers_with_loss_on_both_lines() {
    let scratch = Scratch::new("live-shm-bus");
    let port = 33_000 + (std::process::id() % 10_000) as u16 * 2;
    live(&scratch.shm_bus(1 << 16), port);
}

#[test]
fn simulator_to_relay_to_udp_subscribers() {
    let port = 53_000 + (std::process::id() % 5_000) as u16 * 2;
    let mut bus = String::from("[bus]\ntransport = \"udp\"\n");
    for (i, s) in STREAMS.iter().enumerate() {
        bus.push_str(&format!(
            "[bus.streams.{s}]\ngroup = \"239.192.82.{}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\ncapacity = 65536\n",
            i + 1
        ));
    }
    live(&bus, port);
}
