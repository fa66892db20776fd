//! `mdbus-relay --demo`: the exchange simulator, the relay and a printing
//! subscriber in one process, needing nothing outside this host.
//!
//! - The simulator sends a synthetic ITCH 5.0 day over MoldUDP64 on two
//!   loopback multicast groups (lines A and B), losing 0.5% of packets on
//!   A and 2% on B independently, and answers re-requests on a loopback
//!   port; at the end of a day it starts the next (a new session).
//! - The relay arbitrates the lines (B wins whatever A lost; what both
//!   lost is re-requested), routes by hash into four streams `md-0` to
//!   `md-3` plus a control stream `ctl`, and publishes on shared memory.
//! - A subscriber thread reads every stream and prints, each second, the
//!   stream rates and a sample decoded message with its latency from the
//!   datagram's arrival.
//!
//! The groups' port is derived from the process id, so demos (and tests)
//! running side by side do not hear each other.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdbus_feed::itch::{self, Message};
use mdbus_feed::moldudp64::Session;
use mdbus_feed::synth::SynthConfig;

use super::config::{InputKind, RelayConfig, RoutingMode, SystemRoute};
use super::report::print_summary;
use super::{Relay, RelayError, RelayMessage, RunOptions};
use mdbus::counters::CountersError;
use mdbus_exchange::{Exchange, ExchangeConfig};
use mdbus_tool_support::output;

/// Messages per second the demo's exchange sends.
pub const DEMO_RATE: u64 = 100_000;

/// The demo's relay configuration for a simulator on `line_a`/`line_b`
/// with its re-request server at `rerequest`; `base` (a --config file)
/// supplies the bus, routing, counters and thread settings when given.
pub fn demo_config(
    base: Option<RelayConfig>,
    line_a: SocketAddrV4,
    line_b: SocketAddrV4,
    rerequest: SocketAddrV4,
) -> RelayConfig {
    let mut cfg = match base {
        Some(c) => c,
        None => {
            let mut c =
                RelayConfig::from_toml_str("[input]\nline_a = \"239.192.10.1:26400\"\n", "<demo>")
                    .expect("the demo's built-in configuration is valid");
            c.bus.shm.prefix = format!("mdbus-demo-{}", std::process::id());
            c.bus.shm.huge_pages = mdbus::config::HugePages::Off;
            c.routing.mode = RoutingMode::Hash;
            c.routing.hash_streams = 4;
            c.routing.hash_prefix = "md".into();
            c.routing.control = "ctl".into();
            c.routing.system = SystemRoute::All;
            // Shared CPUs: give the core away when idle.
            c.thread.idle = mdbus::wait::WaitStrategy::Yield;
            c.thread.pin = false;
            c
        }
    };
    cfg.input.kind = InputKind::Moldudp64;
    cfg.input.line_a = line_a.to_string();
    cfg.input.line_b = line_b.to_string();
    cfg.input.interface = "127.0.0.1".into();
    cfg.input.interface_b = String::new();
    cfg.input.rerequest = rerequest.to_string();
    cfg.input.session = String::new();
    cfg.input.start_sequence = 1;
    cfg.input.stop_at_end_of_session = false;
    cfg
}

/// Runs the demo; `base` is a --config file's settings, `record` a
/// `.mdcap` file to record into.
pub fn run(
    base: Option<RelayConfig>,
    record: Option<PathBuf>,
    opts: &RunOptions,
    json: bool,
    allow_loss: bool,
) -> ExitCode {
    match run_inner(base, record, opts, json) {
        Ok(lost) => ExitCode::from(output::completed(lost.as_deref(), allow_loss)),
        Err(e) => {
            eprintln!("mdbus-relay --demo: {e}");
            ExitCode::from(output::EXIT_FAILED)
        }
    }
}

fn run_inner(
    base: Option<RelayConfig>,
    record: Option<PathBuf>,
    opts: &RunOptions,
    json: bool,
) -> Result<Option<String>, String> {
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    let line_a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 1), port);
    let line_b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 2), port);
    let rerequest_bind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port + 1);
    let ex_cfg = ExchangeConfig {
        session: Session::new("DEMO000001").map_err(|e| e.to_string())?,
        line_a,
        line_b,
        interface: Ipv4Addr::LOCALHOST,
        ttl: 0,
        drop_a: 0.005,
        drop_b: 0.02,
        seed: 0x5eed,
        synth: SynthConfig {
            symbols: 200,
            order_messages: 2_000_000,
            ..SynthConfig::default()
        },
        messages_per_second: DEMO_RATE,
        max_packet: 1400,
        rerequest_bind,
        heartbeat_interval: Duration::from_millis(500),
        repeat: true,
    };
    // The relay joins the groups before the exchange sends its first
    // packet (its re-request port is fixed up front for that), so the demo
    // shows the whole day from its first message.
    let mut cfg = demo_config(base, line_a, line_b, rerequest_bind);
    if let Some(path) = record {
        cfg.record.path = path;
    }
    let bus = mdbus::Bus::new(cfg.bus.clone()).map_err(|e| e.to_string())?;
    let relay = match Relay::new(cfg.clone(), "<demo>") {
        Ok(r) => r,
        // Another relay (or demo) owns the default counters file: use one
        // of our own rather than fail.
        Err(RelayError::Counters(CountersError::InUse { .. })) => {
            let mine = cfg
                .counters
                .path
                .with_file_name(format!("mdbus-relay-demo-{}.counters", std::process::id()));
            eprintln!(
                "mdbus-relay --demo: {} belongs to another running relay; using {}",
                cfg.counters.path.display(),
                mine.display()
            );
            cfg.counters.path = mine;
            Relay::new(cfg.clone(), "<demo>").map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    let exchange = Exchange::start(ex_cfg).map_err(|e| e.to_string())?;
    let names: Vec<String> = relay.stream_names().to_vec();
    eprintln!(
        "mdbus-relay --demo: exchange on {line_a} (A) and {line_b} (B) via 127.0.0.1, re-requests at {}; \
         relay publishing {} on {}; counters in {} (try mdbus-stat {})",
        exchange.rerequest_addr(),
        names.join(", "),
        bus.transport().name(),
        cfg.counters.path.display(),
        cfg.counters.path.display(),
    );
    let stop_sub = Arc::new(AtomicBool::new(false));
    let sub = {
        let stop = stop_sub.clone();
        let bus = bus.clone();
        let names = names.clone();
        std::thread::Builder::new()
            .name("demo-subscriber".into())
            .spawn(move || subscriber(&bus, &names, &stop))
            .map_err(|e| format!("cannot start the subscriber thread: {e}"))?
    };
    let result = relay.run(opts);
    stop_sub.store(true, Ordering::Relaxed);
    let sub_result = sub.join();
    let ex = exchange.stop();
    let summary = result.map_err(|e| e.to_string())?;
    print_summary(&summary, json);
    if !json {
        println!(
            "  exchange     sent A {} / B {} packets, dropped A {} / B {}, re-requests served {}, messages resent {}",
            ex.packets_a, ex.packets_b, ex.dropped_a, ex.dropped_b, ex.requests_served, ex.messages_resent
        );
    }
    match sub_result {
        Ok(Ok(())) => Ok(summary.data_lost),
        Ok(Err(e)) => Err(format!("subscriber: {e}")),
        Err(_) => Err("the subscriber thread panicked".into()),
    }
}

/// Reads every stream and prints rates and a sample once per second.
fn subscriber(bus: &mdbus::Bus, names: &[String], stop: &AtomicBool) -> Result<(), String> {
    let mut subs = Vec::new();
    for n in names {
        subs.push(bus.subscriber(n).map_err(|e| e.to_string())?);
    }
    let mut counts = vec![0u64; names.len()];
    let mut last_counts = counts.clone();
    let mut sample: Option<String> = None;
    let mut last_print = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut got = 0;
        for (i, s) in subs.iter_mut().enumerate() {
            got += s
                .poll(|e| {
                    if let mdbus::Event::Message(m) = e {
                        counts[i] += 1;
                        if sample.is_none() {
                            sample = describe(&names[i], m);
                        }
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        let now = Instant::now();
        if now.duration_since(last_print) >= Duration::from_secs(1) {
            let secs = now.duration_since(last_print).as_secs_f64();
            let rates: Vec<String> = names
                .iter()
                .zip(counts.iter().zip(&last_counts))
                .map(|(n, (c, l))| format!("{n} {:.0}/s", (c - l) as f64 / secs))
                .collect();
            // On stderr, beside the relay's log: stdout holds only the
            // summary (one JSON object with --json).
            eprintln!(
                "subscriber: {} | {}",
                rates.join("  "),
                sample
                    .take()
                    .unwrap_or_else(|| "no orders this second".into())
            );
            last_counts.copy_from_slice(&counts);
            last_print = now;
        }
        if got == 0 {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// "md-2 #1234 (feed seq 5678) add order B 100 AAAB @ 12.3400, 35 µs after arrival"
fn describe(stream: &str, m: mdbus::Message<'_>) -> Option<String> {
    let rm = RelayMessage::parse(m.payload())?;
    let age_us = m
        .timestamp()
        .map(|t| mdbus::clock::now_ns().saturating_sub(t) as f64 / 1e3)
        .unwrap_or(0.0);
    let what = match itch::decode(rm.itch).ok()? {
        Message::AddOrder(a) => format!(
            "add order {} {} {} @ {}",
            char::from(a.buy_sell_indicator()),
            a.shares(),
            a.stock().as_str().unwrap_or("?"),
            a.price()
        ),
        Message::AddOrderMpid(a) => format!(
            "add order {} {} {} @ {}",
            char::from(a.buy_sell_indicator()),
            a.shares(),
            a.stock().as_str().unwrap_or("?"),
            a.price()
        ),
        _ => return None,
    };
    Some(format!(
        "{stream} #{} (feed seq {}) {what}, {age_us:.0} µs after arrival",
        m.seq(),
        rm.sequence
    ))
}
