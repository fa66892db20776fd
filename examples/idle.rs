//! What adaptive waiting costs and saves, per transport, in one run:
//!
//! 1. **Idle CPU**: a subscriber loop with nothing to read for
//!    `MDBUS_IDLE_SECS` (default 2) seconds; the CPU time of its thread
//!    (`getrusage(RUSAGE_THREAD)`) over the wall time, in percent of one
//!    core. Target: under 1%.
//! 2. **First message after idle**: `MDBUS_IDLE_WAKES` (default 200) times,
//!    the publisher stays silent `MDBUS_IDLE_SILENCE_MS` (default 60 ms:
//!    beyond the longest quiet period, `adaptive_quiet_max`, and half of
//!    `adaptive_max_block`, so an adaptive subscriber is asleep and the
//!    silences do not teach it to spin through them; 20 ms before the
//!    quiet period adapted to short blocks), then publishes one message stamped
//!    with its send time; the subscriber records arrival minus send in an
//!    HdrHistogram (p50, p99).
//! 3. **Steady ping-pong**: two streams, `ping` and `pong`, echoed by a
//!    second thread, `MDBUS_IDLE_ROUNDS` (default 100 000) round trips;
//!    the p50 and p99 round trip with both loops adaptive, and the ratio to
//!    busy-spin.
//!
//! Each is measured with `wait = "adaptive"` (default thresholds) and with
//! busy-spin as the baseline. `MDBUS_IDLE_TRANSPORTS` (comma-separated,
//! default `shm,udp,tcp`) picks from: streams on `shm`, `udp` (multicast
//! over loopback) and `ud` (RDMA UD multicast from the Soft-RoCE lane's
//! rxe0 to rxe1); sessions (one end idles, sleeps, or echoes) on `tcp`
//! (loopback) and RDMA RC on rxe0 in `rc-send`, `rc-imm` (`write-imm`) and
//! `rc-write` modes. Like mdbus's tools, it calls
//! `mdbus::wait::wake_on_stop` first (`MDBUS_IDLE_WAKE_ON_STOP=0` does
//! not: every block then ends by `adaptive_max_block`). Besides the
//! figures it prints the idle loop's blocks per second and, for the
//! ping-pong, the pinging side's blocks and its quiet period at the end.
//!
//! ```sh
//! cargo run --release -p mdbus --example idle
//! # in the Soft-RoCE guest, after building it on the host:
//! scripts/rdma-lane -- env MDBUS_IDLE_TRANSPORTS=ud,rc-send,rc-imm,rc-write \
//!     MDBUS_IDLE_ROUNDS=5000 MDBUS_IDLE_WAKES=100 target/release/examples/idle
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mdbus::wait::{Adaptive, AdaptiveConfig};
use mdbus::{Bus, Config, Event, Message, Session, Subscriber};

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

/// The publishing and the subscribing side's buses for `streams`: one bus
/// on shm and UDP; on RDMA UD (`ud`) one per device of the Soft-RoCE
/// lane's pair (`MDBUS_RDMA_ADDR`, `MDBUS_RDMA_ADDR_B`), since a device
/// does not loop its own multicast back.
fn buses(transport: &str, streams: &[&str]) -> (Bus, Bus) {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let make = |kind: &str, interface: &str| {
        let mut text = format!(
            "transport = \"{kind}\"\n[counters]\nenabled = false\n\
             [shm]\nprefix = \"mdbus-idle-{}-{n}\"\nmlock = false\n",
            std::process::id()
        );
        for (i, s) in streams.iter().enumerate() {
            let port = 46_000 + (std::process::id() % 500) * 16 + n * 2 + i as u32;
            text.push_str(&format!(
                "[streams.{s}]\nmax_message = 64\ngroup = \"239.254.{}.{}:{port}\"\n\
                 interface = \"{interface}\"\nttl = 0\n",
                1 + std::process::id() % 200,
                1 + (n * 2 + i as u32) % 250
            ));
        }
        Bus::new(Config::from_toml_str(&text, "idle").unwrap()).unwrap()
    };
    if transport == "ud" {
        let a = std::env::var("MDBUS_RDMA_ADDR").unwrap_or_else(|_| "10.99.0.1".into());
        let b = std::env::var("MDBUS_RDMA_ADDR_B").unwrap_or_else(|_| "10.99.0.2".into());
        return (make("verbs", &a), make("verbs", &b));
    }
    let bus = make(transport, "127.0.0.1");
    (bus.clone(), bus)
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

/// The percent of one core a loop used, and its blocks (wake-ups) per
/// second.
#[derive(Clone, Copy)]
struct Idle {
    cpu: f64,
    wakes_per_sec: f64,
}

/// Blocks so far of an adaptive wait (0 when busy-spinning).
fn blocks(wait: &Option<Adaptive>) -> u64 {
    wait.as_ref().map_or(0, |w| w.stats().blocks)
}

/// Runs `step` on a thread of its own until the flag is set; `step`
/// returns its wait's blocks so far.
fn measured_loop(
    mut step: impl FnMut() -> u64 + Send + 'static,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<Idle>) {
    let stop = Arc::new(AtomicBool::new(false));
    let t = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || {
            let (c0, w0, b0) = (thread_cpu(), Instant::now(), step());
            let mut b = b0;
            while !stop.load(Ordering::Relaxed) {
                b = step();
            }
            let wall = w0.elapsed().as_secs_f64();
            Idle {
                cpu: (thread_cpu() - c0).as_secs_f64() / wall * 100.0,
                wakes_per_sec: (b - b0) as f64 / wall,
            }
        }
    });
    (stop, t)
}

/// Percent of one core the subscriber's thread used while idle.
fn idle_cpu(transport: &str, mode: Mode, secs: u64) -> Idle {
    let (pb, sb) = buses(transport, &["s"]);
    let mut publisher = pb.publisher("s").unwrap();
    let mut sub = sb.subscriber("s").unwrap();
    let mut wait = waiter(mode);
    let (stop, t) = measured_loop(move || {
        step(&mut sub, &mut wait, |_| {});
        blocks(&wait)
    });
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

/// Latency of the first message after `silence`.
fn first_after_idle(transport: &str, mode: Mode, wakes: u64, silence: Duration) -> Histogram<u64> {
    let (pb, sb) = buses(transport, &["s"]);
    let mut publisher = pb.publisher("s").unwrap();
    let mut sub = sb.subscriber("s").unwrap();
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
        std::thread::sleep(silence);
        publisher.service().unwrap();
        let sent = base.elapsed().as_nanos() as u64;
        publisher.publish(&sent.to_le_bytes()).unwrap();
    }
    t.join().unwrap()
}

/// What the pinging side's adaptive wait did over a ping-pong: blocks,
/// and its quiet period at the end.
type PingWait = Option<(u64, Duration)>;

fn ping_wait(wait: &Option<Adaptive>) -> PingWait {
    wait.as_ref().map(|w| (w.stats().blocks, w.quiet()))
}

/// Round trips over two streams, both loops in `mode`.
fn pingpong(transport: &str, mode: Mode, rounds: u64) -> (Histogram<u64>, PingWait) {
    // The pinging side publishes `ping` on the first bus; the echo
    // publishes `pong` on the second.
    let (a, b) = buses(transport, &["ping", "pong"]);
    let mut ping = a.publisher("ping").unwrap();
    let mut pong = b.publisher("pong").unwrap();
    let mut pong_sub = a.subscriber("pong").unwrap();
    let mut ping_sub = b.subscriber("ping").unwrap();
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
    (h, ping_wait(&wait))
}

/// Session `o` on `kind`: `tcp` (loopback), or an RDMA RC session on the
/// lane's first device (`MDBUS_RDMA_ADDR`) in `rc-send`, `rc-imm` (mode
/// `write-imm`) or `rc-write`. Returns the bus and the session's mode line.
fn session_bus(kind: &str) -> Bus {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let port = 47_000 + (std::process::id() % 500) * 16 + n;
    let (transport, host, mode) = match kind {
        "tcp" => ("tcp", "127.0.0.1".to_string(), ""),
        _ => {
            let a = std::env::var("MDBUS_RDMA_ADDR").unwrap_or_else(|_| "10.99.0.1".into());
            let mode = match kind {
                "rc-send" => "send",
                "rc-imm" => "write-imm",
                "rc-write" => "write",
                other => panic!("unknown session kind {other}"),
            };
            ("verbs", a, mode)
        }
    };
    let mode = if mode.is_empty() {
        String::new()
    } else {
        format!("mode = \"{mode}\"\n")
    };
    let text = format!(
        "transport = \"{transport}\"\n[counters]\nenabled = false\n\
         [sessions.o]\naddress = \"{host}:{port}\"\nmax_message = 64\n{mode}"
    );
    Bus::new(Config::from_toml_str(&text, "idle").unwrap()).unwrap()
}

/// Both ends of a fresh session: (accepted, connected).
fn session_pair(kind: &str) -> (Session, Session) {
    let bus = session_bus(kind);
    let acceptor = std::thread::spawn({
        let bus = bus.clone();
        move || bus.session_accept("o").unwrap()
    });
    let connected = bus.session_connect("o").unwrap();
    (acceptor.join().unwrap(), connected)
}

/// One session poll, then the mode's wait.
fn session_step(s: &mut Session, wait: &mut Option<Adaptive>, f: impl FnMut(Message<'_>)) -> usize {
    match wait {
        Some(w) => s.poll_wait(w, f).unwrap(),
        None => s.poll(f).unwrap(),
    }
}

/// Percent of one core an idle session end's thread used.
fn session_idle_cpu(kind: &str, mode: Mode, secs: u64) -> Idle {
    let (mut s, peer) = session_pair(kind);
    let mut wait = waiter(mode);
    let (stop, t) = measured_loop(move || {
        session_step(&mut s, &mut wait, |_| {});
        blocks(&wait)
    });
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    let cpu = t.join().unwrap();
    drop(peer);
    cpu
}

/// Latency of the first session message after `silence`.
fn session_first_after_idle(
    kind: &str,
    mode: Mode,
    wakes: u64,
    silence: Duration,
) -> Histogram<u64> {
    let (mut s, mut peer) = session_pair(kind);
    let base = Instant::now();
    let t = std::thread::spawn(move || {
        let mut wait = waiter(mode);
        let mut h = Histogram::<u64>::new(3).unwrap();
        while h.len() < wakes {
            session_step(&mut s, &mut wait, |m| {
                let now = base.elapsed().as_nanos() as u64;
                let sent = u64::from_le_bytes(m.payload()[..8].try_into().unwrap());
                h.record(now.saturating_sub(sent)).unwrap();
            });
        }
        h
    });
    for _ in 0..wakes {
        std::thread::sleep(silence);
        // Credits and keep-alives from the receiver.
        peer.poll(|_| {}).unwrap();
        let sent = base.elapsed().as_nanos() as u64;
        peer.send(&sent.to_le_bytes()).unwrap();
    }
    t.join().unwrap()
}

/// Round trips over one session, both ends in `mode`.
fn session_pingpong(kind: &str, mode: Mode, rounds: u64) -> (Histogram<u64>, PingWait) {
    let (mut echo_end, mut s) = session_pair(kind);
    let echo = std::thread::spawn(move || {
        let mut wait = waiter(mode);
        let mut echoed = 0;
        while echoed < rounds {
            let mut buf = [0u8; 8];
            if session_step(&mut echo_end, &mut wait, |m| {
                buf.copy_from_slice(&m.payload()[..8])
            }) > 0
            {
                echo_end.send(&buf).unwrap();
                echoed += 1;
            }
        }
    });
    let mut wait = waiter(mode);
    let mut h = Histogram::<u64>::new(3).unwrap();
    for i in 0..rounds {
        let t0 = Instant::now();
        s.send(&i.to_le_bytes()).unwrap();
        while session_step(&mut s, &mut wait, |_| {}) == 0 {}
        h.record(t0.elapsed().as_nanos() as u64).unwrap();
    }
    echo.join().unwrap();
    (h, ping_wait(&wait))
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
    let silence = Duration::from_millis(env("MDBUS_IDLE_SILENCE_MS", 60));
    let d = AdaptiveConfig::default();
    // As mdbus's tools do (their SIGINT/SIGTERM handlers end the waits):
    // lets idle RDMA RC receivers block until their next keep-alive.
    let wake_on_stop = env("MDBUS_IDLE_WAKE_ON_STOP", 1) == 1;
    if wake_on_stop {
        mdbus::wait::wake_on_stop().unwrap();
    }
    println!("wake_on_stop: {wake_on_stop}, silence before each first message: {silence:?}");
    println!(
        "adaptive thresholds: spin_polls {} quiet {:?} quiet_max {:?} max_block {:?}",
        d.spin_polls, d.quiet, d.quiet_max, d.max_block
    );
    // wakes/s: the idle loop's blocks per second; pp_blocks and
    // pp_quiet_us: the pinging side's blocks over the ping-pong and its
    // quiet period at the end (adaptive only).
    println!(
        "{:<8} {:<10} {:>9} {:>8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>11}",
        "tr",
        "wait",
        "idle_cpu%",
        "wakes/s",
        "first_p50ns",
        "first_p99ns",
        "rtt_p50ns",
        "rtt_p99ns",
        "pp_blocks",
        "pp_quiet_us"
    );
    let only = std::env::var("MDBUS_IDLE_TRANSPORTS").unwrap_or_else(|_| "shm,udp,tcp".into());
    for transport in ["shm", "udp", "ud", "tcp", "rc-send", "rc-imm", "rc-write"] {
        if !only.split(',').any(|t| t == transport) {
            continue;
        }
        let session = !matches!(transport, "shm" | "udp" | "ud");
        let mut rtt50 = [0u64; 2];
        for (k, mode) in [Mode::BusySpin, Mode::Adaptive].into_iter().enumerate() {
            let cpu = if session {
                session_idle_cpu(transport, mode, secs)
            } else {
                idle_cpu(transport, mode, secs)
            };
            eprintln!("{transport} {}: idle done", mode.name());
            let first = if session {
                session_first_after_idle(transport, mode, wakes, silence)
            } else {
                first_after_idle(transport, mode, wakes, silence)
            };
            eprintln!("{transport} {}: first-after-idle done", mode.name());
            let (rtt, pw) = if session {
                session_pingpong(transport, mode, rounds)
            } else {
                pingpong(transport, mode, rounds)
            };
            rtt50[k] = ns(&rtt, 0.5);
            let (pp_blocks, pp_quiet) = match pw {
                Some((b, q)) => (b.to_string(), q.as_micros().to_string()),
                None => ("-".into(), "-".into()),
            };
            println!(
                "{:<8} {:<10} {:>9.2} {:>8.1} {:>12} {:>12} {:>12} {:>12} {:>9} {:>11}",
                transport,
                mode.name(),
                cpu.cpu,
                cpu.wakes_per_sec,
                ns(&first, 0.5),
                ns(&first, 0.99),
                ns(&rtt, 0.5),
                ns(&rtt, 0.99),
                pp_blocks,
                pp_quiet
            );
        }
        println!(
            "{transport}: steady ping-pong p50 adaptive / busy-spin = {:.3}",
            rtt50[1] as f64 / rtt50[0] as f64
        );
    }
}
