//! A subscriber process: receives the replayed stream and measures each
//! message's one-way latency from its intended send time.
//!
//! Latency = this process's `CLOCK_REALTIME` at delivery minus the
//! intended send time the message carries, recorded into the histogram of
//! the interval that intended time falls in. Closed intervals go to a
//! writer thread, which appends them to this subscriber's interval log
//! and hands the emptied histogram back: recording allocates nothing, and
//! an interval costs a channel send and, if no emptied histogram is back
//! yet, one allocation.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mdbus::wait::Wait;
use mdbus::Event;
use serde::{Deserialize, Serialize};

use super::error::ReplayError;
use super::hlog::write_hlog;
use super::peer::{die_with_parent, Control};
use super::transport::{BusOptions, End};

/// Largest latency recorded as itself (one hour); larger ones are
/// recorded as this and counted as clamped.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;
/// Significant digits of every histogram.
pub const SIGFIG: u8 = 3;

/// A latency histogram as every process of a replay records it.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, SIGFIG)
        .expect("1 ns to 1 hour at 3 digits are valid bounds")
}

/// Options of the hidden `subscribe` command.
#[derive(Debug, Clone, clap::Args)]
pub struct SubscribeArgs {
    /// The bus: transport, stream and placement.
    #[command(flatten)]
    pub bus: BusOptions,

    /// This subscriber's number, from 1.
    #[arg(long)]
    pub index: usize,

    /// Directory for this subscriber's interval log and counts.
    #[arg(long)]
    pub out: PathBuf,

    /// Core to pin to.
    #[arg(long)]
    pub core: Option<usize>,

    /// Stall on every Nth message, before timing it, for --stall-us
    /// (a subscriber descheduled while the message waits).
    #[arg(long, default_value_t = 0)]
    pub stall_every: u64,

    /// Length of each stall, in microseconds.
    #[arg(long, default_value_t = 0)]
    pub stall_us: u64,
}

/// What a subscriber counted, written next to its interval log.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SubscriberCounts {
    /// Messages delivered.
    pub received: u64,
    /// Overrun events (shm: the subscriber fell a whole ring behind).
    pub overruns: u64,
    /// Messages lost to overruns.
    pub overrun_messages: u64,
    /// Unrecoverable gap events (udp, verbs).
    pub gaps: u64,
    /// Messages lost in gaps.
    pub gap_messages: u64,
    /// Latencies above the histogram's bound, recorded as the bound.
    pub clamped: u64,
    /// Messages whose intended time was later than their delivery (clocks
    /// out of step across hosts), recorded as 1 ns.
    pub early: u64,
    /// Stalls injected.
    pub stalls: u64,
    /// Delivery time of the first and last message, ns since the epoch.
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// Last sequence number the publisher announced.
    pub last_seq: u64,
}

/// The files of subscriber `index` in `dir`.
pub fn files(dir: &std::path::Path, index: usize) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("subscriber-{index}.hlog")),
        dir.join(format!("subscriber-{index}.json")),
    )
}

/// Runs the subscriber process.
pub fn run(args: &SubscribeArgs) -> Result<(), ReplayError> {
    die_with_parent()?;
    // Ctrl-C reaches the whole process group: the subscriber must not die
    // mid-line of its log. It ignores the flag; the publisher, which sees
    // the same signal, ends the replay and tells it where the end is (and
    // if the publisher dies, the death signal still ends this process).
    mdbus_tool_support::signals::install()
        .map_err(|e| ReplayError::Run(format!("cannot catch SIGINT and SIGTERM: {e}")))?;
    if let Some(core) = args.core {
        mdbus::affinity::pin_current_thread(core)
            .map_err(|e| ReplayError::Run(format!("subscriber {}: {e}", args.index)))?;
    }
    let name = args
        .bus
        .name
        .clone()
        .ok_or_else(|| ReplayError::Usage("subscribe needs --name".into()))?;
    let max_message = args.bus.max_message.unwrap_or(1500);
    let capacity = args.bus.capacity.unwrap_or(65536);
    let bus = args
        .bus
        .bus(End::Subscriber, &name, max_message, capacity)?;
    let mut subscriber = bus.subscriber(&name)?;
    println!("ready");
    let (control, t0, interval_ns) = Control::start()?;
    let (hlog, json) = files(&args.out, args.index);
    let (tx, rx) = mpsc::channel::<(u64, Histogram<u64>)>();
    let (pool_tx, pool) = mpsc::channel();
    for _ in 0..2 {
        let _ = pool_tx.send(new_histogram());
    }
    let writer = start_writer(hlog, t0, interval_ns, rx, pool_tx);
    let mut intervals = Intervals {
        current: new_histogram(),
        index: 0,
        t0,
        interval_ns: interval_ns.max(1),
        tx,
        pool,
    };
    let mut counts = SubscriberCounts::default();
    let received = receive(args, &mut subscriber, &control, &mut intervals, &mut counts);
    let Intervals {
        current, index, tx, ..
    } = intervals;
    if !current.is_empty() {
        let _ = tx.send((index, current));
    }
    drop(tx);
    let written = writer
        .join()
        .map_err(|_| ReplayError::Run("the interval log writer panicked".into()))?;
    received?;
    written?;
    let text = serde_json::to_string(&counts).unwrap_or_default();
    std::fs::write(&json, text).map_err(|e| ReplayError::output(&json, e))?;
    Ok(())
}

/// The histogram of the current interval, swapped for an empty one when
/// a message's intended time moves past it.
struct Intervals {
    current: Histogram<u64>,
    index: u64,
    t0: u64,
    interval_ns: u64,
    tx: Sender<(u64, Histogram<u64>)>,
    pool: Receiver<Histogram<u64>>,
}

impl Intervals {
    #[inline]
    fn record(&mut self, intended_ns: u64, latency_ns: u64) {
        let index = intended_ns.saturating_sub(self.t0) / self.interval_ns;
        if index > self.index {
            self.rotate(index);
        }
        // Intended times never decrease, so `index < self.index` cannot
        // happen; such a message would count in the current interval.
        self.current.saturating_record(latency_ns);
    }

    #[cold]
    fn rotate(&mut self, index: u64) {
        if !self.current.is_empty() {
            let fresh = self.pool.try_recv().unwrap_or_else(|_| new_histogram());
            let full = std::mem::replace(&mut self.current, fresh);
            let _ = self.tx.send((self.index, full));
        }
        self.index = index;
    }
}

/// The thread that appends closed intervals to the log.
fn start_writer(
    path: PathBuf,
    t0: u64,
    interval_ns: u64,
    rx: Receiver<(u64, Histogram<u64>)>,
    pool: Sender<Histogram<u64>>,
) -> JoinHandle<Result<(), ReplayError>> {
    std::thread::spawn(move || {
        write_hlog(
            &path,
            "mdbus-replay subscriber: one-way latency in ns from intended send time to delivery",
            t0,
            |sink| {
                for (index, mut h) in rx {
                    let start = Duration::from_nanos(index.saturating_mul(interval_ns));
                    sink.write(&h, start, Duration::from_nanos(interval_ns))?;
                    h.reset();
                    let _ = pool.send(h);
                }
                Ok(())
            },
        )
    })
}

/// Polls until every message up to the publisher's last is accounted for.
fn receive(
    args: &SubscribeArgs,
    subscriber: &mut mdbus::Subscriber,
    control: &Control,
    intervals: &mut Intervals,
    counts: &mut SubscriberCounts,
) -> Result<(), ReplayError> {
    let stall_ns = args.stall_us.saturating_mul(1000);
    let stall_every = if stall_ns > 0 { args.stall_every } else { 0 };
    let timeout = Duration::from_secs(args.bus.timeout);
    let mut wait = args.bus.wait;
    let mut adaptive = (wait == mdbus::wait::WaitStrategy::Adaptive)
        .then(|| mdbus::wait::Adaptive::new(mdbus::wait::AdaptiveConfig::default()));
    // The highest sequence number delivered or reported lost.
    let mut accounted = 0u64;
    let mut trouble: Option<String> = None;
    let mut idle = 0u64;
    let mut quiet_since: Option<Instant> = None;
    loop {
        let n = subscriber.poll(|e| match e {
            Event::Message(m) => {
                counts.received += 1;
                accounted = m.seq();
                if stall_every > 0 && counts.received % stall_every == 0 {
                    counts.stalls += 1;
                    let until = mdbus::clock::monotonic_ns() + stall_ns;
                    while mdbus::clock::monotonic_ns() < until {
                        std::hint::spin_loop();
                    }
                }
                let now = mdbus::clock::now_ns();
                let intended = m.timestamp().unwrap_or(now);
                let latency = match now.checked_sub(intended) {
                    Some(l) => l,
                    None => {
                        counts.early += 1;
                        0
                    }
                };
                if latency > MAX_LATENCY_NS {
                    counts.clamped += 1;
                }
                intervals.record(intended, latency.clamp(1, MAX_LATENCY_NS));
                if counts.first_ns == 0 {
                    counts.first_ns = now;
                }
                counts.last_ns = now;
            }
            Event::Overrun { from, to } => {
                counts.overruns += 1;
                counts.overrun_messages += to - from;
                accounted = to - 1;
            }
            Event::Gap { from, to } => {
                counts.gaps += 1;
                counts.gap_messages += to - from;
                accounted = to - 1;
            }
            Event::EndOfStream { last_seq } => {
                counts.last_seq = last_seq;
            }
            Event::PublisherDown { last_seq } => {
                trouble = Some(format!(
                    "the publisher went silent after message {last_seq}"
                ));
            }
            Event::PublisherRestarted { epoch } => {
                trouble = Some(format!("the publisher restarted (epoch {epoch})"));
            }
            // Replay publishes no source-gap notices.
            Event::SourceGap { from, to } => {
                trouble = Some(format!("unexpected source gap {from}..{to}"));
            }
        })?;
        if let Some(what) = trouble.take() {
            return Err(ReplayError::Run(format!(
                "subscriber {}: {what}",
                args.index
            )));
        }
        if let Some(end) = control.end() {
            counts.last_seq = end;
            if accounted >= end {
                return Ok(());
            }
        }
        if n > 0 {
            idle = 0;
            quiet_since = None;
            continue;
        }
        match adaptive.as_mut() {
            Some(a) => {
                if let Some(limit) = a.after_poll(0) {
                    let event = subscriber.wait_for_data(limit)?;
                    a.woke(event);
                    if !event {
                        // A whole block without traffic: check the
                        // publisher and the timeout at once.
                        idle |= (1 << 14) - 1;
                    }
                }
            }
            None => wait.wait(),
        }
        idle += 1;
        if idle % (1 << 14) == 0 {
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if control.publisher_gone() && control.end().is_none() {
                return Err(ReplayError::Run(format!(
                    "subscriber {}: the publisher went away before the end",
                    args.index
                )));
            }
            if since.elapsed() > timeout {
                return Err(ReplayError::Run(format!(
                    "subscriber {}: no message for {} s (--timeout) after {} of {} messages",
                    args.index,
                    timeout.as_secs(),
                    accounted,
                    control
                        .end()
                        .map_or_else(|| "?".to_string(), |e| e.to_string())
                )));
            }
        }
    }
}
