//! mdbus-relay's per-message path on one pinned core, shared-memory
//! output, against two baselines measured in the same run:
//!
//! | mode | what each packet costs |
//! | --- | --- |
//! | `decode` | MoldUDP64 parse, walk of the message blocks, ITCH decode of each message (the floor of any relay) |
//! | `copy` | the walk, then each message's bytes published as they are on one shm stream (a memcpy into the ring) |
//! | `relay` | the relay: arbiter (line A), length check, route by locate (four hash partitions and a control stream; system messages to all five), publish with the 8-byte sequence header and the arrival timestamp, latency recorded |
//!
//! A synthetic ITCH day (`MDBUS_BENCH_MESSAGES` messages of continuous
//! trading, default 1 000 000, 500 symbols) is packed into MoldUDP64
//! packets of at most 1400 bytes in memory first, so no I/O is measured.
//! Each mode runs `MDBUS_BENCH_PASSES` passes (default 5) over the whole
//! day; throughput is messages/s per pass (min, median, max). Then each
//! mode runs one more pass timing every packet (`CLOCK_REALTIME` before,
//! after publishing) into an HdrHistogram: for `relay` that is the
//! relay-added latency from a datagram's arrival to its last message
//! published, as the relay itself records it. Subscribers are not
//! attached: a shm stream never waits for them, so the publisher side is
//! what is measured.
//!
//! ```text
//! cargo bench -p mdbus-benches --bench relay
//! ```
//!
//! The cost of one clock read is printed first, `CLOCK_REALTIME` and the
//! relay's own clock (the TSC through quanta, anchored to
//! `CLOCK_REALTIME`): the relay pays one per datagram, at its end, which
//! is also when it picks up the next datagram of a batch (live lines are
//! stamped by the kernel); it weighs most when packets carry one message
//! each.
//!
//! Instructions per message, which load does not change, are counted
//! with callgrind over the relay's passes alone (where the host has no
//! hardware counters for `perf stat`; docs/PERFORMANCE.md has the
//! figures):
//!
//! ```text
//! MDBUS_BENCH_PASSES=1 valgrind --tool=callgrind --toggle-collect='relay::Modes::relay_pass' \
//!   --dump-after='relay::Modes::relay_pass' ./relay-* --bench
//! ```
//!
//! `MDBUS_BENCH_CORES`: the core to pin to (default: the first core of
//! the placement); `MDBUS_BENCH_JSON`: also append the JSON lines to this
//! file.

use std::hint::black_box;
use std::time::Instant;

use mdbus::metrics::{summarize, Latency};
use mdbus_feed::arbiter::{Arbiter, Line};
use mdbus_feed::itch;
use mdbus_feed::moldudp64::{Packet, Session};
use mdbus_feed::synth::{Generator, MoldPacker, SynthConfig};
use mdbus_relay::ingest::{arbiter_config, Sink};
use mdbus_relay::pipeline::Pipeline;
use mdbus_relay::route::Router;
use mdbus_relay::RelayConfig;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Day {
    packets: Vec<Vec<u8>>,
    messages: u64,
}

fn day(messages: u64, window_ns: u64) -> Day {
    let g = Generator::new(&SynthConfig {
        seed: 42,
        symbols: 500,
        order_messages: messages,
        ..SynthConfig::default()
    })
    .expect("synthetic session");
    let mut packer = MoldPacker::new(g, Session::new("BENCH00001").unwrap(), 1, 1400)
        .expect("packer")
        .with_window(window_ns);
    let mut packets = Vec::new();
    while let Some(p) = packer.next_packet() {
        packets.push(p.bytes.to_vec());
    }
    Day {
        messages: packer.next_sequence() - 1,
        packets,
    }
}

fn config(dir: &std::path::Path) -> RelayConfig {
    let text = format!(
        "[input]\nline_a = \"239.1.1.1:5000\"\n\
         [bus]\ntransport = \"shm\"\n[bus.shm]\ndir = \"{}\"\nprefix = \"bench\"\nhuge_pages = \"try\"\n\
         [routing]\nmode = \"hash\"\nhash_streams = 4\nhash_prefix = \"md\"\ncontrol = \"ctl\"\nsystem = \"all\"\n",
        dir.display()
    );
    let mut cfg = RelayConfig::from_toml_str(&text, "<bench>").expect("bench config");
    for n in cfg.stream_names() {
        let s = mdbus::config::StreamConfig {
            max_message: 64,
            ..Default::default()
        };
        cfg.bus.streams.insert(n, s);
    }
    cfg
}

/// The three modes' state.
struct Modes {
    copy: mdbus::Publisher,
    pipeline: Pipeline,
    cfg: RelayConfig,
}

impl Modes {
    fn decode_pass(&mut self, day: &Day, timed: Option<&mut Latency>) {
        let mut lat = timed;
        for p in &day.packets {
            let t0 = lat.as_ref().map(|_| mdbus::clock::now_ns());
            if let Ok(pk) = Packet::parse(p) {
                for b in pk.messages().flatten() {
                    if let Ok(m) = itch::decode(b.data) {
                        black_box(m.stock_locate());
                    }
                }
            }
            if let (Some(l), Some(t0)) = (lat.as_mut(), t0) {
                l.record(mdbus::clock::now_ns() - t0);
            }
        }
    }

    fn copy_pass(&mut self, day: &Day, timed: Option<&mut Latency>) {
        let mut lat = timed;
        for p in &day.packets {
            let t0 = lat.as_ref().map(|_| mdbus::clock::now_ns());
            if let Ok(pk) = Packet::parse(p) {
                for b in pk.messages().flatten() {
                    let _ = self.copy.publish(b.data);
                }
            }
            if let (Some(l), Some(t0)) = (lat.as_mut(), t0) {
                l.record(mdbus::clock::now_ns() - t0);
            }
        }
    }

    fn relay_pass(&mut self, day: &Day) -> Arbiter {
        // A fresh arbiter per pass: each pass is the whole session again.
        let mut arb = Arbiter::new(arbiter_config(&self.cfg.input, None));
        let mut errors = 0u64;
        let mut ended = false;
        // As the live relay does for datagrams without a kernel stamp: each
        // is picked up when the previous one is done, one clock read each.
        let mut picked = self.pipeline.now_ns();
        for (i, p) in day.packets.iter().enumerate() {
            self.pipeline.begin_packet(picked);
            let mut sink = Sink {
                pipeline: &mut self.pipeline,
                rerequest: None,
                request_errors: &mut errors,
                ended: &mut ended,
            };
            arb.on_packet(Line::A, p, i as u64, &mut sink);
            picked = self
                .pipeline
                .end_packet()
                .unwrap_or_else(|| self.pipeline.now_ns());
        }
        arb
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo test --benches` runs this with --bench absent: a small smoke run.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let messages = env_u64(
        "MDBUS_BENCH_MESSAGES",
        if smoke { 20_000 } else { 1_000_000 },
    );
    let passes = env_u64("MDBUS_BENCH_PASSES", if smoke { 1 } else { 5 }).max(1) as usize;
    let core = match std::env::var("MDBUS_BENCH_CORES") {
        Ok(list) => mdbus::affinity::parse_cpulist(&list)
            .ok()
            .and_then(|c| c.first().copied()),
        Err(_) => None,
    }
    .unwrap_or_else(|| mdbus::affinity::placement_for(None).core(0));
    if let Err(e) = mdbus::affinity::pin_current_thread(core) {
        eprintln!("relay bench: not pinned: {e}");
    }

    let dir = std::env::temp_dir().join(format!("mdbus-bench-relay-{}", std::process::id()));
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::Path::new("/dev/shm").join(format!("mdbus-bench-relay-{}", std::process::id()))
    } else {
        dir
    };
    std::fs::create_dir_all(&dir).expect("bench directory");
    let cfg = config(&dir);
    let bus = mdbus::Bus::new(cfg.bus.clone()).expect("bus");
    let names = cfg.stream_names();
    let publishers: Vec<_> = names
        .iter()
        .map(|n| bus.publisher(n).expect("publisher"))
        .collect();
    let copy_cfg = mdbus::config::StreamConfig {
        max_message: 64,
        ..Default::default()
    };
    let mut bus_cfg = cfg.bus.clone();
    bus_cfg.streams.insert("copy".into(), copy_cfg);
    let copy_bus = mdbus::Bus::new(bus_cfg).expect("bus");
    let mut modes = Modes {
        copy: copy_bus.publisher("copy").expect("publisher"),
        pipeline: Pipeline::new(Router::new(&cfg.routing, &names), publishers, None),
        cfg,
    };

    // What one clock read costs: the relay reads its clock once per
    // datagram (publish complete, which is the next one's pick-up).
    let reads = 1_000_000u64;
    let t = Instant::now();
    let mut acc = 0u64;
    for _ in 0..reads {
        acc = acc.wrapping_add(mdbus::clock::now_ns());
    }
    black_box(acc);
    let clock_ns = t.elapsed().as_nanos() as f64 / reads as f64;
    eprintln!("relay bench: one CLOCK_REALTIME read costs {clock_ns:.1} ns here");
    let tsc = mdbus_relay::pipeline::ArrivalClock::new();
    let t = Instant::now();
    let mut acc = 0u64;
    for _ in 0..reads {
        acc = acc.wrapping_add(tsc.now_ns());
    }
    black_box(acc);
    let tsc_ns = t.elapsed().as_nanos() as f64 / reads as f64;
    eprintln!(
        "relay bench: one read of the relay's clock (TSC through quanta, as CLOCK_REALTIME) costs {tsc_ns:.1} ns here"
    );

    let mut lines = Vec::new();
    for (label, window) in [
        ("sparse", MoldPacker::<Generator>::DEFAULT_WINDOW_NS),
        ("full", u64::MAX),
    ] {
        let d = day(messages, window);
        lines.extend(measure(&mut modes, &d, label, passes, core, smoke));
    }
    if let Ok(path) = std::env::var("MDBUS_BENCH_JSON") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            for l in &lines {
                let _ = writeln!(f, "{l}");
            }
        }
    }
    drop(modes);
    drop(copy_bus);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Passes of every mode over `d`; prints the tables, returns JSON lines.
fn measure(
    modes: &mut Modes,
    d: &Day,
    label: &str,
    passes: usize,
    core: usize,
    smoke: bool,
) -> Vec<String> {
    eprintln!(
        "\nrelay bench, {label} packets: {} messages in {} packets ({:.1} per packet), core {core}, {passes} passes{}",
        d.messages,
        d.packets.len(),
        d.messages as f64 / d.packets.len() as f64,
        if smoke { " (smoke run)" } else { "" }
    );

    // Warm-up: one pass of each (page faults, caches, branch predictors).
    modes.decode_pass(d, None);
    modes.copy_pass(d, None);
    modes.relay_pass(d);

    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..passes {
        let t = Instant::now();
        modes.decode_pass(d, None);
        rates[0].push(d.messages as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        modes.copy_pass(d, None);
        rates[1].push(d.messages as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        let arb = modes.relay_pass(d);
        rates[2].push(d.messages as f64 / t.elapsed().as_secs_f64());
        assert_eq!(
            arb.counters().messages,
            d.messages,
            "the relay delivered the whole day"
        );
    }

    // Per-packet latency: one more timed pass of each.
    let mut lat_decode = Latency::new(10_000_000_000);
    let mut lat_copy = Latency::new(10_000_000_000);
    modes.decode_pass(d, Some(&mut lat_decode));
    modes.copy_pass(d, Some(&mut lat_copy));
    // The pipeline's histogram has every pass so far; take the last pass
    // alone by difference of a fresh pipeline run.
    let before = modes.pipeline.latency().histogram().clone();
    modes.relay_pass(d);
    let mut relay_hist = modes.pipeline.latency().histogram().clone();
    relay_hist
        .subtract(&before)
        .expect("histograms of one pipeline share their bounds");

    let names = ["decode", "copy", "relay"];
    println!(
        "{:<8} {:>14} {:>14} {:>14}",
        "mode", "min msg/s", "median msg/s", "max msg/s"
    );
    let mut medians = [0.0; 3];
    for (i, r) in rates.iter_mut().enumerate() {
        let min = r.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = r.iter().cloned().fold(0.0, f64::max);
        medians[i] = median(r);
        println!(
            "{:<8} {:>14.0} {:>14.0} {:>14.0}",
            names[i], min, medians[i], max
        );
    }
    println!(
        "relay throughput: {:.2} of decode-only, {:.2} of copy-only (median passes)",
        medians[2] / medians[0],
        medians[2] / medians[1]
    );
    let sums = [
        summarize(lat_decode.histogram()),
        summarize(lat_copy.histogram()),
        summarize(&relay_hist),
    ];
    println!(
        "\nper-packet time, ns  {:>8} {:>8} {:>8} {:>8}",
        "p50", "p99", "p99.9", "max"
    );
    for (n, s) in names.iter().zip(&sums) {
        println!(
            "{:<20} {:>8} {:>8} {:>8} {:>8}",
            n, s.p50, s.p99, s.p999, s.max
        );
    }
    println!(
        "relay-added latency vs copy-only: p50 x{:.2}, p99 x{:.2}, p99.9 x{:.2}",
        sums[2].p50 as f64 / sums[1].p50.max(1) as f64,
        sums[2].p99 as f64 / sums[1].p99.max(1) as f64,
        sums[2].p999 as f64 / sums[1].p999.max(1) as f64,
    );
    let mut lines = Vec::new();
    for i in 0..3 {
        lines.push(
            serde_json::json!({
                "bench": "relay",
                "packing": label,
                "mode": names[i],
                "messages": d.messages,
                "packets": d.packets.len(),
                "passes": passes,
                "core": core,
                "msgs_per_sec_median": medians[i].round(),
                "per_packet_ns": {"p50": sums[i].p50, "p99": sums[i].p99, "p999": sums[i].p999, "max": sums[i].max},
                "vs_decode": medians[i] / medians[0],
                "vs_copy": medians[i] / medians[1],
            })
            .to_string(),
        );
    }
    for l in &lines {
        println!("{l}");
    }
    lines
}
