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
//! The feed's addresses are fixed, so an operator can point a relay or a
//! capture at them: lines A and B on groups 239.192.10.1 and 239.192.10.2
//! at port [`DEMO_PORT`] (`--demo-port`), re-requests at 127.0.0.1 on the
//! port after it. The first line the demo prints on stderr names them and
//! every stream's shared-memory segment (or group), so a subscriber can
//! attach. Demos side by side need a `--demo-port` each: a second demo on
//! the same port cannot bind the re-request port and says so.

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
use super::report::{print_summary, summary_json};
use super::stats::JsonMap;
use super::{Relay, RelayError, RelayMessage, RunOptions};
use mdbus::counters::CountersError;
use mdbus_exchange::{Exchange, ExchangeConfig};
use mdbus_tool_support::output;

/// Messages per second the demo's exchange sends.
pub const DEMO_RATE: u64 = 100_000;

/// The demo feed's default port: lines A and B on it, re-requests on the
/// next one.
pub const DEMO_PORT: u16 = 26_500;

/// The demo feed's addresses for `port`: line A, line B, re-requests.
pub fn demo_addresses(port: u16) -> (SocketAddrV4, SocketAddrV4, SocketAddrV4) {
    (
        SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 1), port),
        SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 2), port),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port.wrapping_add(1)),
    )
}

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

/// What the demo is asked to do.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// A --config file's settings.
    pub base: Option<RelayConfig>,
    /// A `.mdcap` file to record into.
    pub record: Option<PathBuf>,
    /// The feed's port (`--demo-port`).
    pub port: u16,
    /// Print the summary as one JSON object.
    pub json: bool,
    /// Exit 0 even when data was lost.
    pub allow_loss: bool,
}

/// Runs the demo.
pub fn run(demo: DemoOptions, opts: &RunOptions) -> ExitCode {
    let allow_loss = demo.allow_loss;
    match run_inner(demo, opts) {
        Ok(lost) => ExitCode::from(output::completed(lost.as_deref(), allow_loss)),
        Err(DemoError(code, e)) => {
            eprintln!("mdbus-relay --demo: {e}");
            ExitCode::from(code)
        }
    }
}

/// Why the demo stopped: the exit status and the sentence.
struct DemoError(u8, String);

impl From<String> for DemoError {
    /// A failure while running (exit status 1).
    fn from(e: String) -> DemoError {
        DemoError(output::EXIT_FAILED, e)
    }
}

/// A setting that cannot be used: the bus, the relay's sockets, the
/// simulator's port (exit status 2, as for the relay itself).
fn unusable(e: impl std::fmt::Display) -> DemoError {
    DemoError(output::EXIT_USAGE, e.to_string())
}

/// The first line the demo prints: where the feed is and where each
/// stream can be read.
pub fn first_line(cfg: &RelayConfig) -> String {
    let input = &cfg.input;
    let names = cfg.stream_names();
    let streams = match cfg.bus.transport {
        mdbus::config::TransportKind::Shm => format!(
            "shm (dir {}, prefix {}): {}",
            cfg.bus.shm.dir.display(),
            cfg.bus.shm.prefix,
            names.join(", ")
        ),
        t => {
            let each: Vec<String> = names
                .into_iter()
                .map(
                    |n| match cfg.bus.streams.get(&n).map(|s| s.group.as_str()) {
                        Some(g) if !g.is_empty() => format!("{n} on {g}"),
                        _ => n,
                    },
                )
                .collect();
            format!("{}: {}", t.name(), each.join(", "))
        }
    };
    format!(
        "mdbus-relay --demo: feed line A {} and line B {} on interface {}, re-requests at {}; \
         streams on {streams}",
        input.line_a, input.line_b, input.interface, input.rerequest,
    )
}

fn run_inner(demo: DemoOptions, opts: &RunOptions) -> Result<Option<String>, DemoError> {
    let DemoOptions {
        base,
        record,
        port,
        json,
        ..
    } = demo;
    let (line_a, line_b, rerequest_bind) = demo_addresses(port);
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
    // First, before anything else logs: where to attach.
    eprintln!("{}", first_line(&cfg));
    let bus = mdbus::Bus::new(cfg.bus.clone()).map_err(unusable)?;
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
            Relay::new(cfg.clone(), "<demo>").map_err(unusable)?
        }
        Err(e) => return Err(unusable(e)),
    };
    let exchange = Exchange::start(ex_cfg).map_err(|e| {
        unusable(format!(
            "{e} (is another demo using port {port}? choose another with --demo-port)"
        ))
    })?;
    let names: Vec<String> = relay.stream_names().to_vec();
    eprintln!(
        "mdbus-relay --demo: relay publishing {} on {}; counters in {} (try mdbus-stat {})",
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
    if json {
        let mut m = summary_json(&summary);
        let mut x = JsonMap::new();
        for (k, v) in [
            ("messages", ex.messages),
            ("packets_a", ex.packets_a),
            ("packets_b", ex.packets_b),
            ("dropped_a", ex.dropped_a),
            ("dropped_b", ex.dropped_b),
            ("dropped_both", ex.dropped_both),
            ("requests_served", ex.requests_served),
            ("messages_resent", ex.messages_resent),
            ("send_errors", ex.send_errors),
        ] {
            x.insert(k.into(), v.into());
        }
        m.insert("exchange".into(), x.into());
        output::print_json(&m);
    } else {
        print_summary(&summary, false);
        println!(
            "  exchange     sent A {} / B {} packets, dropped A {} / B {}, re-requests served {}, messages resent {}",
            ex.packets_a, ex.packets_b, ex.dropped_a, ex.dropped_b, ex.requests_served, ex.messages_resent
        );
    }
    match sub_result {
        Ok(Ok(())) => Ok(summary.data_lost),
        Ok(Err(e)) => Err(format!("subscriber: {e}").into()),
        Err(_) => Err(String::from("the subscriber thread panicked").into()),
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
