//! What adaptive waiting costs and saves, per transport, in one run:
//!
//! 1. **Idle CPU**: a subscriber loop with nothing to read for
//!    `MDBUS_IDLE_SECS` (default 2) seconds; the CPU time of its thread
//!    (`getrusage(RUSAGE_THREAD)`) over the wall time, in percent of one
//!    core. Target: under 1%.
//! 2. **First message after idle**: `MDBUS_IDLE_WAKES` (default 200) times,
//!    the publisher stays silent 20 ms (far beyond the quiet period, so an
//!    adaptive subscriber is asleep), then publishes one message stamped
//!    with its send time; the subscriber records arrival minus send in an
//!    HdrHistogram (p50, p99).
//! 3. **Steady ping-pong**: two streams, `ping` and `pong`, echoed by a
//!    second thread, `MDBUS_IDLE_ROUNDS` (default 100 000) round trips;
//!    the p50 and p99 round trip with both loops adaptive, and the ratio to
//!    busy-spin.
//!
//! Each is measured with `wait = "adaptive"` (default thresholds) and with
//! busy-spin as the baseline, on shared memory and on UDP multicast over
//! loopback.
//!
//! ```sh
//! cargo run --release -p mdbus --example idle
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mdbus::wait::{Adaptive, AdaptiveConfig};
use mdbus::{Bus, Config, Event, Subscriber};

static NEXT: AtomicU32 = AtomicU32::new(0);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Adaptive,
    BusySpin,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::BusySpin => "busy-spin",
        }
    }
}

/// One poll, then the mode's wait.
fn step(sub: &mut Subscriber, wait: &mut Option<Adaptive>, f: impl FnMut(Event<'_>)) -> usize {
    match wait {
        Some(w) => sub.poll_wait(w, f).unwrap(),
        None => sub.poll(f).unwrap(),
    }
}

fn waiter(mode: Mode) -> Option<Adaptive> {
    (mode == Mode::Adaptive).then(|| Adaptive::new(AdaptiveConfig::default()))
}

fn bus(transport: &str, streams: &[&str]) -> Bus {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut text = format!(
        "transport = \"{transport}\"\n[counters]\nenabled = false\n\
         [shm]\nprefix = \"mdbus-idle-{}-{n}\"\nmlock = false\n",
        std::process::id()
    );
    for (i, s) in streams.iter().enumerate() {
        let port = 46_000 + (std::process::id() % 500) * 16 + n * 2 + i as u32;
        text.push_str(&format!(
            "[streams.{s}]\nmax_message = 64\ngroup = \"239.254.{}.{}:{port}\"\n\
             interface = \"127.0.0.1\"\nttl = 0\n",
            1 + std::process::id() % 200,
            1 + (n * 2 + i as u32) % 250
        ));
    }
    Bus::new(Config::from_toml_str(&text, "idle").unwrap()).unwrap()
}

fn thread_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Percent of one core the subscriber's thread used while idle.
fn idle_cpu(transport: &str, mode: Mode, secs: u64) -> f64 {
    let bus = bus(transport, &["s"]);
    let mut publisher = bus.publisher("s").unwrap();
    let mut sub = bus.subscriber("s").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut wait = waiter(mode);
            let (c0, w0) = (thread_cpu(), Instant::now());
            while !stop.load(Ordering::Relaxed) {
                step(&mut sub, &mut wait, |_| {});
            }
            (thread_cpu() - c0).as_secs_f64() / w0.elapsed().as_secs_f64() * 100.0
        })
    };
    // The publisher's duties (heartbeats on UDP) go on as in production.
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        publisher.service().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap()
}

fn ns(h: &Histogram<u64>, q: f64) -> u64 {
    h.value_at_quantile(q)
}

/// Latency of the first message after 20 ms of silence.
fn first_after_idle(transport: &str, mode: Mode, wakes: u64) -> Histogram<u64> {
    let bus = bus(transport, &["s"]);
    let mut publisher = bus.publisher("s").unwrap();
    let mut sub = bus.subscriber("s").unwrap();
    let base = Instant::now();
    let t = std::thread::spawn(move || {
        let mut wait = waiter(mode);
        let mut h = Histogram::<u64>::new(3).unwrap();
        while h.len() < wakes {
            step(&mut sub, &mut wait, |e| {
                if let Event::Message(m) = e {
                    let now = base.elapsed().as_nanos() as u64;
                    let sent = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                    h.record(now.saturating_sub(sent)).unwrap();
                }
            });
        }
        h
    });
    for _ in 0..wakes {
        std::thread::sleep(Duration::from_millis(20));
        publisher.service().unwrap();
        let sent = base.elapsed().as_nanos() as u64;
        publisher.publish(&sent.to_le_bytes()).unwrap();
    }
    t.join().unwrap()
}

/// Round trips over two streams, both loops in `mode`.
fn pingpong(transport: &str, mode: Mode, rounds: u64) -> Histogram<u64> {
    let bus = bus(transport, &["ping", "pong"]);
    let mut ping = bus.publisher("ping").unwrap();
    let mut pong = bus.publisher("pong").unwrap();
    let mut pong_sub = bus.subscriber("pong").unwrap();
    let mut ping_sub = bus.subscriber("ping").unwrap();
    let echo = std::thread::spawn(move || {
        let mut wait = waiter(mode);
        let mut echoed = 0;
        let mut empty = 0u32;
        while echoed < rounds {
            let mut buf = [0u8; 8];
            let mut got = false;
            step(&mut ping_sub, &mut wait, |e| {
                if let Event::Message(m) = e {
                    buf.copy_from_slice(&m.payload()[..8]);
                    got = true;
                }
            });
            if !got {
                // Answer retransmit requests now and then (UDP loses a
                // datagram on loopback now and then too).
                empty = empty.wrapping_add(1);
                if empty % 64 == 0 {
                    pong.service().unwrap();
                }
            }
            if got {
                pong.publish(&buf).unwrap();
                echoed += 1;
            }
        }
    });
    let mut wait = waiter(mode);
    let mut h = Histogram::<u64>::new(3).unwrap();
    for i in 0..rounds {
        let t0 = Instant::now();
        ping.publish(&i.to_le_bytes()).unwrap();
        let mut back = false;
        let mut empty = 0u32;
        while !back {
            step(&mut pong_sub, &mut wait, |e| {
                back |= matches!(e, Event::Message(_))
            });
            empty = empty.wrapping_add(1);
            if !back && empty % 64 == 0 {
                ping.service().unwrap();
            }
        }
        h.record(t0.elapsed().as_nanos() as u64).unwrap();
    }
    echo.join().unwrap();
    h
}

fn env(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let secs = env("MDBUS_IDLE_SECS", 2);
    let wakes = env("MDBUS_IDLE_WAKES", 200);
    let rounds = env("MDBUS_IDLE_ROUNDS", 100_000);
    let d = AdaptiveConfig::default();
    println!(
        "adaptive thresholds: spin_polls {} quiet {:?} max_block {:?}",
        d.spin_polls, d.quiet, d.max_block
    );
    println!(
        "{:<5} {:<10} {:>9} {:>12} {:>12} {:>12} {:>12}",
        "tr", "wait", "idle_cpu%", "first_p50ns", "first_p99ns", "rtt_p50ns", "rtt_p99ns"
    );
    let only = std::env::var("MDBUS_IDLE_TRANSPORTS").unwrap_or_else(|_| "shm,udp".into());
    for transport in ["shm", "udp"] {
        if !only.split(',').any(|t| t == transport) {
            continue;
        }
        let mut rtt50 = [0u64; 2];
        for (k, mode) in [Mode::BusySpin, Mode::Adaptive].into_iter().enumerate() {
            let cpu = idle_cpu(transport, mode, secs);
            eprintln!("{transport} {}: idle done", mode.name());
            let first = first_after_idle(transport, mode, wakes);
            eprintln!("{transport} {}: first-after-idle done", mode.name());
            let rtt = pingpong(transport, mode, rounds);
            rtt50[k] = ns(&rtt, 0.5);
            println!(
                "{:<5} {:<10} {:>9.2} {:>12} {:>12} {:>12} {:>12}",
                transport,
                mode.name(),
                cpu,
                ns(&first, 0.5),
                ns(&first, 0.99),
                ns(&rtt, 0.5),
                ns(&rtt, 0.99)
            );
        }
        println!(
            "{transport}: steady ping-pong p50 adaptive / busy-spin = {:.3}",
            rtt50[1] as f64 / rtt50[0] as f64
        );
    }
}
