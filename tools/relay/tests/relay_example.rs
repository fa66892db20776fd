//! config/relay.toml fed by the built-in simulator with its default
//! symbols (`mdbus-relay simulate`): every stream the example defines
//! carries the simulator's securities, not only its system messages.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use clap::Parser;
use mdbus_exchange::{Exchange, SimulateArgs};
use mdbus_relay::{Relay, RelayConfig, RunOptions};

#[derive(Parser)]
struct Simulate {
    #[command(flatten)]
    args: SimulateArgs,
}

/// This process's ports (a line port and the re-request port after it).
fn port() -> u16 {
    20_000 + (std::process::id() % 2_500) as u16 * 16 + 8
}

#[test]
fn the_example_routes_the_simulators_symbols_to_every_stream() {
    let port = port();
    let line_a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 83, 1), port);
    let line_b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 83, 2), port);
    let rerequest = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port + 1);
    // The simulator as `mdbus-relay simulate` runs it, on this test's
    // addresses and with a short day: its default symbols are what count.
    let sim = Simulate::parse_from([
        "simulate".to_string(),
        format!("--group-a={line_a}"),
        format!("--group-b={line_b}"),
        format!("--rerequest={rerequest}"),
        "--messages=5000".into(),
        "--rate=200000".into(),
        "--heartbeat=50ms".into(),
    ])
    .args;
    assert_eq!(sim.symbols, 100, "the simulator's default");

    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/relay.toml");
    let mut cfg = RelayConfig::from_file(&example).unwrap();
    let dir = std::env::temp_dir().join(format!("mdbus-relay-example-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    cfg.input.line_a = line_a.to_string();
    cfg.input.line_b = line_b.to_string();
    cfg.input.rerequest = rerequest.to_string();
    cfg.input.stop_at_end_of_session = true;
    cfg.bus.shm.dir = dir.clone();
    cfg.bus.shm.huge_pages = mdbus::config::HugePages::Off;
    cfg.counters.path = dir.join("counters");
    cfg.counters.log_interval = Duration::ZERO;
    cfg.thread.pin = false;
    cfg.thread.idle = mdbus::wait::WaitStrategy::Yield;
    let names = cfg.stream_names();
    assert_eq!(names, ["md-1", "md-2", "md-other", "ctl"]);

    let relay = Relay::new(cfg, "config/relay.toml").unwrap();
    let exchange = Exchange::start(sim.config()).unwrap();
    let summary = relay
        .run(&RunOptions {
            // A guard only: the run ends at the simulator's end of session.
            duration: Some(Duration::from_secs(120)),
            log: false,
            ..RunOptions::default()
        })
        .unwrap();
    exchange.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(summary.ended_by, "end-of-session", "{summary:?}");
    assert_eq!(summary.data_lost, None);
    let count = |name: &str| {
        summary
            .counters
            .streams
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.messages)
            .unwrap()
    };
    // `ctl` gets the system messages, which every stream gets too; each
    // market-data stream also gets its own securities, at least a Stock
    // Directory message for each of its 32 or more symbols.
    let system = count("ctl");
    assert!(system > 0);
    for name in ["md-1", "md-2", "md-other"] {
        assert!(
            count(name) >= system + 32,
            "{name} got {} messages, the control stream {system}: {:?}",
            count(name),
            summary.counters.streams
        );
    }
    assert_eq!(summary.counters.local.unrouted, 0);
}
