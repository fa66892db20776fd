//! The live scenario: the exchange simulator sends a synthetic day on two
//! loopback multicast lines, each losing packets independently, and
//! answers re-requests; the relay arbitrates, recovers, routes and
//! publishes on the bus given; subscribers check that every message
//! arrived on its streams, in order, and that the counters agree.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use mdbus_exchange::{Exchange, ExchangeConfig};
use mdbus_feed::moldudp64::Session;
use mdbus_feed::synth::{Generator, SynthConfig};
use mdbus_relay::{Relay, RelayConfig, RunOptions};

use super::*;

const DEADLINE: Duration = Duration::from_secs(180);

/// The day's size and pace.
#[derive(Debug, Clone, Copy)]
pub struct Day {
    /// Order messages of continuous trading.
    pub order_messages: u64,
    /// The exchange's pace.
    pub messages_per_second: u64,
}

impl Default for Day {
    fn default() -> Self {
        Day {
            order_messages: 20_000,
            messages_per_second: 100_000,
        }
    }
}

pub fn synth(day: Day) -> SynthConfig {
    SynthConfig {
        seed: 21,
        symbols: 30,
        order_messages: day.order_messages,
        ..SynthConfig::default()
    }
}

/// The session as the generator makes it: (sequence, bytes) from 1.
fn expected(day: Day) -> Vec<(u64, Vec<u8>)> {
    (1..)
        .zip(
            Generator::new(&synth(day))
                .unwrap()
                .map(|m| m.bytes().to_vec()),
        )
        .collect()
}

/// How the live scenario runs.
pub struct Options {
    /// Drop probability on line A and on line B.
    pub drop: (f64, f64),
    /// Whether the relay is told where the re-request server is (without
    /// it, what both lines lose cannot be recovered).
    pub rerequest: bool,
    /// Extra `[input]` keys (session lock, say).
    pub input: String,
    /// Run while the exchange sends: injects attack datagrams. Returns
    /// when done (it is joined before the checks).
    pub attack: Option<Box<dyn FnOnce(Target) + Send>>,
    /// The exchange's pace (default: the day's).
    pub messages_per_second: Option<u64>,
    /// Records the relay's output here (`--record`).
    pub record: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            drop: (0.05, 0.05),
            rerequest: true,
            input: String::new(),
            attack: None,
            messages_per_second: None,
            record: None,
        }
    }
}

/// Where an attacker sends, and the relay's counters file (to wait for
/// the genuine session to be under way).
pub struct Target {
    pub line_a: SocketAddrV4,
    pub line_b: SocketAddrV4,
    pub counters: std::path::PathBuf,
}

impl Target {
    /// Waits until the relay has published genuine messages (the session
    /// is locked and under way).
    pub fn wait_for_messages(&self) {
        let until = std::time::Instant::now() + DEADLINE;
        loop {
            if let Ok(r) = mdbus::counters::CountersReader::open_unchecked(&self.counters) {
                let v = r
                    .labels()
                    .into_iter()
                    .zip(r.values())
                    .find(|(l, _)| l == "messages_in")
                    .map_or(0, |(_, v)| v);
                if v > 0 {
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < until,
                "the relay never published"
            );
            std::thread::yield_now();
        }
    }

    /// A socket that sends to the groups over loopback, as the exchange.
    pub fn socket(&self) -> std::net::UdpSocket {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into())
            .unwrap();
        s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
        s.set_multicast_loop_v4(true).unwrap();
        s.set_multicast_ttl_v4(0).unwrap();
        s.into()
    }
}

/// What a live run produced.
pub struct Outcome {
    /// The session as the generator made it: (sequence, bytes).
    pub sent: Vec<(u64, Vec<u8>)>,
    /// What each subscriber received.
    pub got: BTreeMap<String, Received>,
    /// The relay's summary.
    pub summary: mdbus_relay::Summary,
    /// The exchange's counters.
    pub exchange: mdbus_exchange::ExchangeCounters,
}

/// Runs the scenario with the relay publishing on `bus` (the `[bus]`
/// tables of a relay configuration) and the subscribers on `sub_bus`
/// (default: the same bus), and checks that every message arrived, in
/// order, and that the counters agree.
pub fn live(bus: &str, sub_bus: Option<mdbus::Config>, port: u16, day: Day) {
    let out = run(bus, sub_bus, port, day, Options::default(), false);
    assert_eq!(out.summary.ended_by, "end-of-session", "{:?}", out.summary);
    check_delivery(&out.sent, &out.got);
    let (sent, summary, ex) = (&out.sent, &out.summary, &out.exchange);
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

/// Runs the scenario and returns what happened; `until_end`: the
/// subscribers read until their streams end rather than until they have
/// every message (for runs that lose messages).
pub fn run(
    bus: &str,
    sub_bus: Option<mdbus::Config>,
    port: u16,
    day: Day,
    opts: Options,
    until_end: bool,
) -> Outcome {
    let scratch = Scratch::new(&format!("live-{port}"));
    let line_a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 81, 1), port);
    let line_b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 81, 2), port);
    let rerequest = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port + 1);
    let rereq_key = if opts.rerequest {
        format!("rerequest = \"{rerequest}\"\n")
    } else {
        String::new()
    };
    let record = match &opts.record {
        Some(p) => format!("[record]\npath = \"{}\"\n", p.display()),
        None => String::new(),
    };
    let text = format!(
        "[input]\nline_a = \"{line_a}\"\nline_b = \"{line_b}\"\ninterface = \"127.0.0.1\"\n\
         {rereq_key}start_sequence = 1\nstop_at_end_of_session = true\n{}\n\
         [counters]\npath = \"{}\"\nlog_interval = \"0s\"\n{record}\
         [thread]\npin = false\nidle = \"yield\"\n{bus}{ROUTING}",
        opts.input,
        scratch.path("counters").display(),
    );
    let cfg = RelayConfig::from_toml_str(&text, "<test>").unwrap();
    let sub_bus = mdbus::Bus::new(sub_bus.unwrap_or_else(|| cfg.bus.clone())).unwrap();
    // The relay and the subscribers join before the exchange sends its
    // first packet.
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
        drop_a: opts.drop.0,
        drop_b: opts.drop.1,
        seed: 77,
        synth: synth(day),
        messages_per_second: opts.messages_per_second.unwrap_or(day.messages_per_second),
        max_packet: 1400,
        rerequest_bind: rerequest,
        heartbeat_interval: Duration::from_millis(50),
        repeat: false,
    })
    .unwrap();
    let target = Target {
        line_a,
        line_b,
        counters: scratch.path("counters"),
    };
    let attacker = opts.attack.map(|f| std::thread::spawn(move || f(target)));
    let runner = std::thread::spawn(move || {
        relay
            .run(&RunOptions {
                duration: Some(DEADLINE),
                log: false,
                ..RunOptions::default()
            })
            .unwrap()
    });
    let sent = expected(day);
    // Subscribers read while the relay runs (a UDP subscriber must, to ask
    // for what it missed in time).
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for (_, m) in &sent {
        for s in expected_streams(m) {
            *want.entry(s.to_string()).or_default() += 1;
        }
    }
    if until_end {
        for v in want.values_mut() {
            *v = usize::MAX;
        }
    }
    let counters = scratch.path("counters");
    let relay_counters = || match mdbus::counters::CountersReader::open_unchecked(&counters) {
        Ok(r) => {
            let nonzero: Vec<String> = r
                .labels()
                .into_iter()
                .zip(r.values())
                .filter(|(_, v)| *v != 0)
                .map(|(l, v)| format!("{l}={v}"))
                .collect();
            format!(
                "relay counters: {}; exchange: {:?}",
                nonzero.join(" "),
                exchange.counters()
            )
        }
        Err(e) => format!("relay counters unreadable: {e}"),
    };
    let got = collect_with(&mut subs, &want, DEADLINE, &relay_counters);
    let summary = runner.join().unwrap();
    if let Some(a) = attacker {
        a.join().unwrap();
    }
    let exchange = exchange.stop();
    Outcome {
        sent,
        got,
        summary,
        exchange,
    }
}
