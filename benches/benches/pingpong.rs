//! Ping-pong round-trip time between two processes on two cores, through
//! four peers measured in one run:
//!
//! - `raw`: two cache-line-padded `AtomicU64`s in a shared mapping; ping
//!   writes `i` to one line, pong spins until it sees `i` and writes it to
//!   the other. The floor: the cost of moving one cache line each way.
//! - `iceoryx2`: two iceoryx2 publish-subscribe services (`ping`, `pong`)
//!   with a 32-byte payload, received by busy polling; each side loans its
//!   next sample right after a send, as iceoryx2's own benchmark does.
//! - `mdbus`: an mdbus shared-memory session (both directions in one
//!   segment, the order-flow channel), 32-byte payload.
//! - `mdbus-stream`: two mdbus shared-memory streams, `ping` and `pong` (the
//!   market-data channel, the same shape as the iceoryx2 run), 32-byte
//!   payload.
//! - `mdbus-nocnt`, `mdbus-stream-nocnt`: the same two with the bus's
//!   counters file off (`[counters] enabled = false`), to show what
//!   counting costs (the report prints the on/off ratios).
//!
//! ```text
//! cargo bench -p mdbus-benches --bench pingpong
//! ```
//!
//! Environment: `MDBUS_BENCH_ITERS` (measured round trips, default
//! 1 000 000), `MDBUS_BENCH_WARMUP` (default 10 000), `MDBUS_BENCH_PEERS`
//! (subset of `raw,iceoryx2,mdbus,mdbus-stream,mdbus-nocnt,mdbus-stream-nocnt`), `MDBUS_BENCH_CORES` (two
//! cores, e.g. `2,3`; default: the first two online cores), `MDBUS_BENCH_WAIT`
//! (`busy-spin`, `spin-hint` or `yield`), `MDBUS_BENCH_JSON` (also append
//! the JSON lines to this file).
//!
//! The parent process is ping and records each round trip, timed with
//! `Instant::now()` around the send and the matching receive, into an
//! HdrHistogram; the cost of the clock itself is measured and printed.
//! The child process is pong; it is this binary again, started with
//! `MDBUS_BENCH_ROLE`.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use mdbus_benches::{
    bench_err, child_init, clock_cost, emit_json, latency_histogram, main_of, nanos, note_smoke,
    print_rtt_table, rtt_json, selected_peers, watchdog, Peer, PeerExt, Percentiles, Result,
    Settings, SharedRegion, SharedSafe,
};

/// Payload size of the iceoryx2 and mdbus round trips.
const PAYLOAD: usize = 32;
/// Pong's first value on every transport: it is ready.
const READY: u64 = u64::MAX - 1;
/// Ping's last value on every transport: pong should exit.
const STOP: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Raw,
    Iceoryx2,
    /// An mdbus session (the order-flow channel, both ways in one segment).
    Mdbus,
    /// Two mdbus streams, `ping` and `pong` (the market-data channel).
    MdbusStream,
    /// `Mdbus` without the bus's counters file.
    MdbusNoCounters,
    /// `MdbusStream` without the bus's counters file.
    MdbusStreamNoCounters,
}

impl Transport {
    const ALL: [Transport; 6] = [
        Transport::Raw,
        Transport::Iceoryx2,
        Transport::Mdbus,
        Transport::MdbusStream,
        Transport::MdbusNoCounters,
        Transport::MdbusStreamNoCounters,
    ];

    fn name(self) -> &'static str {
        match self {
            Transport::Raw => "raw",
            Transport::Iceoryx2 => "iceoryx2",
            Transport::Mdbus => "mdbus",
            Transport::MdbusStream => "mdbus-stream",
            Transport::MdbusNoCounters => "mdbus-nocnt",
            Transport::MdbusStreamNoCounters => "mdbus-stream-nocnt",
        }
    }

    fn is_mdbus(self) -> bool {
        !matches!(self, Transport::Raw | Transport::Iceoryx2)
    }

    fn is_stream(self) -> bool {
        matches!(
            self,
            Transport::MdbusStream | Transport::MdbusStreamNoCounters
        )
    }

    fn counted(self) -> bool {
        matches!(self, Transport::Mdbus | Transport::MdbusStream)
    }

    /// The same channel with the counters file off.
    fn uncounted(self) -> Option<Transport> {
        match self {
            Transport::Mdbus => Some(Transport::MdbusNoCounters),
            Transport::MdbusStream => Some(Transport::MdbusStreamNoCounters),
            _ => None,
        }
    }

    fn pong_role(self) -> String {
        format!("pong-{}", self.name())
    }

    /// Bytes carried each way.
    fn payload(self) -> usize {
        match self {
            Transport::Raw => std::mem::size_of::<u64>(),
            _ => PAYLOAD,
        }
    }
}

fn main() {
    main_of("pingpong", pong, ping);
}

fn selected_transports() -> Result<Vec<Transport>> {
    selected_peers(&Transport::ALL, Transport::name)
}

/// Results of one transport.
struct Measured {
    transport: Transport,
    rtt: Percentiles,
    count: u64,
}

fn ping() -> Result<()> {
    let settings = Settings::from_env(1_000_000, 10_000)?;
    let transports = selected_transports()?;
    mdbus::affinity::pin_current_thread(settings.cores.0)?;
    let clock = clock_cost();
    println!(
        "ping-pong round trip between two processes: ping on core {}, pong on core {} ({})",
        settings.cores.0, settings.cores.1, settings.placement
    );
    println!(
        "{} round trips after {} warm-up, wait {}; Instant::now() pair costs p50 {} ns, p99 {} ns (in every sample once)",
        settings.iters, settings.warmup, settings.wait, clock.p50, clock.p99
    );
    note_smoke(&settings);

    let mut results = Vec::new();
    for transport in transports {
        let hist = match transport {
            Transport::Raw => raw_ping(&settings)?,
            Transport::Iceoryx2 => iceoryx2_ping(&settings)?,
            _ => mdbus_ping(&settings, transport)?,
        };
        results.push(Measured {
            transport,
            rtt: Percentiles::of(&hist),
            count: hist.len(),
        });
    }
    report(&settings, &results, clock)
}

fn pong(role: &str) -> Result<()> {
    let settings = Settings::from_env(1, 0)?;
    child_init()?;
    match Transport::ALL.into_iter().find(|t| t.pong_role() == role) {
        Some(Transport::Raw) => raw_pong(&settings),
        Some(Transport::Iceoryx2) => iceoryx2_pong(&settings),
        Some(t) => mdbus_pong(&settings, t),
        None => Err(bench_err!("unknown role {role:?}")),
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn report(settings: &Settings, results: &[Measured], clock: Percentiles) -> Result<()> {
    print_rtt_table(
        results
            .iter()
            .map(|m| (m.transport.name(), m.transport.payload(), m.rtt, m.count)),
    );
    let find = |t: Transport| results.iter().find(|m| m.transport == t).map(|m| m.rtt);
    // (mdbus row, baseline, p50 ratio, p99.9 ratio)
    let mut ratios = Vec::new();
    for m in results.iter().filter(|m| m.transport.is_mdbus()) {
        for base in [Transport::Raw, Transport::Iceoryx2] {
            if let Some(b) = find(base) {
                let (p50, p999) = (ratio(m.rtt.p50, b.p50), ratio(m.rtt.p999, b.p999));
                println!(
                    "{:>12}/{:<9} p50 x{:.2}  p99.9 x{:.2}",
                    m.transport.name(),
                    base.name(),
                    p50.unwrap_or(f64::NAN),
                    p999.unwrap_or(f64::NAN)
                );
                ratios.push((m.transport, base, p50, p999));
            }
        }
    }
    // Counters on / off, same channel.
    let mut counters = Vec::new();
    for m in results.iter().filter(|m| m.transport.counted()) {
        if let Some(off) = m.transport.uncounted().and_then(find) {
            let (p50, p99, p999) = (
                ratio(m.rtt.p50, off.p50),
                ratio(m.rtt.p99, off.p99),
                ratio(m.rtt.p999, off.p999),
            );
            println!(
                "{:>12} counters on/off p50 x{:.3}  p99 x{:.3}  p99.9 x{:.3}",
                m.transport.name(),
                p50.unwrap_or(f64::NAN),
                p99.unwrap_or(f64::NAN),
                p999.unwrap_or(f64::NAN)
            );
            counters.push((m.transport, p50, p99, p999));
        }
    }
    println!();

    let mut lines = Vec::new();
    for m in results {
        let mut obj = rtt_json("pingpong", settings, clock.p50, m.count, m.rtt);
        obj["peer"] = m.transport.name().into();
        obj["payload"] = m.transport.payload().into();
        for (_, base, p50, p999) in ratios.iter().filter(|r| r.0 == m.transport) {
            obj[format!("vs_{}", base.name())] = serde_json::json!({ "p50": p50, "p999": p999 });
        }
        for (_, p50, p99, p999) in counters.iter().filter(|r| r.0 == m.transport) {
            obj["vs_counters_off"] = serde_json::json!({ "p50": p50, "p99": p99, "p999": p999 });
        }
        lines.push(obj.to_string());
    }
    emit_json(&lines)
}

// ---------------------------------------------------------------- raw ----

/// The two lines ping and pong write, each alone in its cache line (and
/// its prefetch pair: `CachePadded` is 128 bytes on x86-64).
#[repr(C)]
struct Lines {
    /// Written by ping only.
    ping: CachePadded<AtomicU64>,
    /// Written by pong only.
    pong: CachePadded<AtomicU64>,
}

// SAFETY: all-zero is two zero counters, and both are only touched through
// atomic operations.
unsafe impl SharedSafe for Lines {}

const LINES_LEN: usize = 4096;

fn raw_ping(settings: &Settings) -> Result<Histogram<u64>> {
    let region = SharedRegion::create(LINES_LEN)?;
    let lines: &Lines = region.get();
    let mut peer = Peer::spawn(&Transport::Raw.pong_role(), settings, Some(&region))?;
    let mut hist = latency_histogram();
    {
        let mut dog = watchdog(
            Some(&mut peer),
            settings.wait,
            settings.stall,
            "raw ping-pong",
        );
        // Acquire pairs with pong's Release store of READY.
        while lines.pong.load(Ordering::Acquire) != READY {
            dog.idle()?;
        }
        for i in 1..=settings.warmup + settings.iters {
            let t0 = Instant::now();
            // Release pairs with pong's Acquire load; only the value itself
            // is handed over, so this is the cheapest ordering that keeps the
            // baseline honest (a plain store on x86-64).
            lines.ping.store(i, Ordering::Release);
            // Acquire pairs with pong's Release store of `i`.
            while lines.pong.load(Ordering::Acquire) != i {
                dog.idle()?;
            }
            let rtt = nanos(t0.elapsed());
            dog.progress();
            if i > settings.warmup {
                hist.saturating_record(rtt);
            }
        }
        // Release pairs with pong's Acquire load.
        lines.ping.store(STOP, Ordering::Release);
    }
    peer.finish()?;
    Ok(hist)
}

fn raw_pong(settings: &Settings) -> Result<()> {
    let region = SharedRegion::inherited(LINES_LEN)?;
    let lines: &Lines = region.get();
    let mut dog = watchdog(None, settings.wait, settings.stall, "raw pong");
    // Release pairs with ping's Acquire load of READY.
    lines.pong.store(READY, Ordering::Release);
    let mut last = 0;
    loop {
        // Acquire pairs with ping's Release store.
        let seen = lines.ping.load(Ordering::Acquire);
        if seen == last {
            dog.idle()?;
            continue;
        }
        if seen == STOP {
            return Ok(());
        }
        // Release pairs with ping's Acquire load.
        lines.pong.store(seen, Ordering::Release);
        last = seen;
        dog.progress();
    }
}

// ------------------------------------------ echo (iceoryx2 and mdbus) ----

/// One end of a link that carries `u64` values between ping and pong: the
/// iceoryx2 and mdbus ends, timed by one loop ([`echo_ping`]).
trait Echo {
    /// The transport, for errors (`iceoryx2`, `mdbus`).
    const NAME: &'static str;
    /// What ping's watchdog is watching.
    const PING: &'static str;
    /// What pong's watchdog is watching.
    const PONG: &'static str;
    /// Sends `value`; how many receivers it reached, where the transport
    /// tells.
    fn send_value(&mut self, value: u64) -> Result<Option<usize>>;
    /// The next value, if one has arrived.
    fn receive_value(&mut self) -> Result<Option<u64>>;
}

/// Ping's side: waits for pong's READY, times `warmup + iters` round trips
/// (recording all but the warm-up), then tells pong to stop.
fn echo_ping<S: Echo>(
    side: &mut S,
    peer: &mut Peer,
    settings: &Settings,
) -> Result<Histogram<u64>> {
    let name = S::NAME;
    let mut hist = latency_histogram();
    let mut dog = watchdog(Some(peer), settings.wait, settings.stall, S::PING);
    loop {
        match side.receive_value()? {
            Some(READY) => break,
            Some(other) => return Err(bench_err!("{name}: expected READY, got {other}")),
            None => dog.idle()?,
        }
    }
    for i in 1..=settings.warmup + settings.iters {
        let t0 = Instant::now();
        let delivered = side.send_value(i)?;
        loop {
            match side.receive_value()? {
                Some(v) if v == i => break,
                Some(v) => return Err(bench_err!("{name}: sent {i}, got back {v}")),
                None => dog.idle()?,
            }
        }
        let rtt = nanos(t0.elapsed());
        dog.progress();
        if let Some(delivered) = delivered.filter(|&d| d != 1) {
            return Err(bench_err!(
                "{name}: ping {i} reached {delivered} subscribers"
            ));
        }
        if i > settings.warmup {
            hist.saturating_record(rtt);
        }
    }
    side.send_value(STOP)?;
    Ok(hist)
}

/// Pong's side: says READY, then sends back every value until STOP.
fn echo_pong<S: Echo>(side: &mut S, settings: &Settings) -> Result<()> {
    let mut dog = watchdog(None, settings.wait, settings.stall, S::PONG);
    side.send_value(READY)?;
    loop {
        match side.receive_value()? {
            Some(STOP) => return Ok(()),
            Some(v) => {
                side.send_value(v)?;
                dog.progress();
            }
            None => dog.idle()?,
        }
    }
}

impl Echo for iox::Side {
    const NAME: &'static str = "iceoryx2";
    const PING: &'static str = "iceoryx2 ping-pong";
    const PONG: &'static str = "iceoryx2 pong";
    #[inline(always)]
    fn send_value(&mut self, value: u64) -> Result<Option<usize>> {
        self.send(value).map(Some)
    }
    #[inline(always)]
    fn receive_value(&mut self) -> Result<Option<u64>> {
        self.try_receive()
    }
}

impl Echo for md::Side {
    const NAME: &'static str = "mdbus";
    const PING: &'static str = "mdbus ping-pong";
    const PONG: &'static str = "mdbus pong";
    #[inline(always)]
    fn send_value(&mut self, value: u64) -> Result<Option<usize>> {
        self.send(value).map(|()| None)
    }
    #[inline(always)]
    fn receive_value(&mut self) -> Result<Option<u64>> {
        self.try_receive()
    }
}

// ----------------------------------------------------------- iceoryx2 ----

mod iox {
    use super::*;
    use iceoryx2::port::publisher::Publisher;
    use iceoryx2::port::subscriber::Subscriber;
    use iceoryx2::prelude::*;
    use iceoryx2::sample_mut_uninit::SampleMutUninit;
    use std::mem::MaybeUninit;

    pub type Payload = [u8; PAYLOAD];

    pub fn check<T, E: Debug>(r: std::result::Result<T, E>, what: &str) -> Result<T> {
        r.map_err(|e| bench_err!("iceoryx2: {what}: {e:?}"))
    }

    /// The node and the two ports of one side.
    pub struct Side {
        // Field order is drop order: the loaned sample, then the ports,
        // then the node.
        /// The sample the next send writes into, loaned right after the
        /// previous send so the loan overlaps the message's flight (as
        /// iceoryx2's own benchmark does).
        next: Option<SampleMutUninit<ipc::Service, MaybeUninit<Payload>, ()>>,
        pub publisher: Publisher<ipc::Service, Payload, ()>,
        pub subscriber: Subscriber<ipc::Service, Payload, ()>,
        _node: Node<ipc::Service>,
    }

    /// Opens both services and the ports of one side: ping publishes on
    /// `ping` and subscribes to `pong`, pong the other way round.
    pub fn side(is_ping: bool) -> Result<Side> {
        set_log_level(LogLevel::Error);
        let node = check(NodeBuilder::new().create::<ipc::Service>(), "create node")?;
        let run = mdbus_benches::run_name();
        let open = |topic: &str| {
            let name = format!("{run}/{topic}");
            let name: ServiceName = check(name.as_str().try_into(), "service name")?;
            check(
                node.service_builder(&name)
                    .publish_subscribe::<Payload>()
                    .max_publishers(1)
                    .max_subscribers(1)
                    .history_size(0)
                    .subscriber_max_buffer_size(1)
                    .enable_safe_overflow(true)
                    .open_or_create(),
                "open service",
            )
        };
        let (out, inp) = if is_ping {
            ("ping", "pong")
        } else {
            ("pong", "ping")
        };
        let out = open(out)?;
        let inp = open(inp)?;
        let subscriber = check(inp.subscriber_builder().create(), "create subscriber")?;
        let publisher = check(out.publisher_builder().create(), "create publisher")?;
        let next = Some(check(publisher.loan_uninit(), "loan")?);
        Ok(Side {
            next,
            publisher,
            subscriber,
            _node: node,
        })
    }

    impl Side {
        #[inline(always)]
        pub fn send(&mut self, value: u64) -> Result<usize> {
            let mut payload = [0u8; PAYLOAD];
            payload[..8].copy_from_slice(&value.to_le_bytes());
            let sample = match self.next.take() {
                Some(sample) => sample,
                None => check(self.publisher.loan_uninit(), "loan")?,
            };
            let delivered = check(sample.write_payload(payload).send(), "send")?;
            self.next = Some(check(self.publisher.loan_uninit(), "loan")?);
            Ok(delivered)
        }

        /// The value of the next sample, if one has arrived.
        #[inline(always)]
        pub fn try_receive(&self) -> Result<Option<u64>> {
            match check(self.subscriber.receive(), "receive")? {
                Some(sample) => {
                    let bytes: [u8; 8] = sample.payload()[..8].try_into().expect("8 bytes");
                    Ok(Some(u64::from_le_bytes(bytes)))
                }
                None => Ok(None),
            }
        }
    }
}

fn iceoryx2_ping(settings: &Settings) -> Result<Histogram<u64>> {
    // Ports exist before the child starts, so its publisher connects to our
    // subscriber at creation and its READY cannot be lost.
    let mut side = iox::side(true)?;
    let mut peer = Peer::spawn(&Transport::Iceoryx2.pong_role(), settings, None)?;
    let hist = echo_ping(&mut side, &mut peer, settings)?;
    peer.finish()?;
    Ok(hist)
}

fn iceoryx2_pong(settings: &Settings) -> Result<()> {
    echo_pong(&mut iox::side(false)?, settings)
}

// -------------------------------------------------------------- mdbus ----

mod md {
    use super::*;
    use mdbus::{Event, Session};

    /// Session name of the `mdbus` peer; stream names of `mdbus-stream`.
    pub const SESSION: &str = "pingpong";
    pub const PING: &str = "ping";
    pub const PONG: &str = "pong";

    pub fn bus(counters: bool) -> Result<mdbus::Bus> {
        mdbus_benches::mdbus_bus(|cfg| {
            cfg.counters.enabled = counters;
            cfg.sessions.insert(
                SESSION.into(),
                mdbus::config::SessionConfig {
                    max_message: PAYLOAD,
                    connect_timeout: std::time::Duration::from_secs(30),
                    ..Default::default()
                },
            );
            for name in [PING, PONG] {
                cfg.streams.insert(
                    name.into(),
                    mdbus::config::StreamConfig {
                        max_message: PAYLOAD,
                        capacity: 1024,
                        // The peer may attach after the first message.
                        late_join: mdbus::config::LateJoin::Oldest,
                        ..Default::default()
                    },
                );
            }
        })
    }

    #[inline(always)]
    pub fn encode(value: u64) -> [u8; PAYLOAD] {
        let mut payload = [0u8; PAYLOAD];
        payload[..8].copy_from_slice(&value.to_le_bytes());
        payload
    }

    #[inline(always)]
    fn decode(payload: &[u8]) -> u64 {
        u64::from_le_bytes(payload[..8].try_into().expect("8-byte prefix"))
    }

    /// One side of either kind of channel. One per process, never moved
    /// in the timed loop, so the size difference costs nothing; boxing
    /// would add an indirection to every send and receive.
    #[allow(clippy::large_enum_variant)]
    pub enum Side {
        Session(Session),
        Streams {
            publisher: mdbus::Publisher,
            subscriber: mdbus::Subscriber,
        },
    }

    impl Side {
        #[inline(always)]
        pub fn send(&mut self, value: u64) -> Result<()> {
            let payload = encode(value);
            match self {
                Side::Session(s) => {
                    s.send(&payload)?;
                }
                Side::Streams { publisher, .. } => {
                    publisher.publish(&payload)?;
                }
            }
            Ok(())
        }

        #[inline(always)]
        pub fn try_receive(&mut self) -> Result<Option<u64>> {
            let mut got = None;
            match self {
                Side::Session(s) => {
                    s.poll(|m| got = Some(decode(m.payload())))?;
                }
                Side::Streams { subscriber, .. } => {
                    let mut trouble = None;
                    subscriber.poll(|e| match e {
                        Event::Message(m) => got = Some(decode(m.payload())),
                        // The peer's publisher closing after its last
                        // message is the normal end of a run.
                        Event::EndOfStream { .. } => {}
                        other => trouble = Some(format!("{other:?}")),
                    })?;
                    if let Some(event) = trouble {
                        return Err(bench_err!("mdbus stream: unexpected {event}"));
                    }
                }
            }
            Ok(got)
        }
    }
}

fn mdbus_ping(settings: &Settings, transport: Transport) -> Result<Histogram<u64>> {
    let bus = md::bus(transport.counted())?;
    let mut peer;
    let mut side = if transport.is_stream() {
        let publisher = bus.publisher(md::PING)?;
        peer = Peer::spawn(&transport.pong_role(), settings, None)?;
        let subscriber = bus.subscriber(md::PONG)?;
        md::Side::Streams {
            publisher,
            subscriber,
        }
    } else {
        peer = Peer::spawn(&transport.pong_role(), settings, None)?;
        md::Side::Session(bus.session_accept(md::SESSION)?)
    };
    let hist = echo_ping(&mut side, &mut peer, settings)?;
    // `side` outlives the child, so our segments stay until pong is done.
    peer.finish()?;
    Ok(hist)
}

fn mdbus_pong(settings: &Settings, transport: Transport) -> Result<()> {
    let bus = md::bus(transport.counted())?;
    let mut side = if transport.is_stream() {
        let publisher = bus.publisher(md::PONG)?;
        let subscriber = bus.subscriber(md::PING)?;
        md::Side::Streams {
            publisher,
            subscriber,
        }
    } else {
        md::Side::Session(bus.session_connect(md::SESSION)?)
    };
    echo_pong(&mut side, settings)
}
