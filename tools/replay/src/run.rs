//! `mdbus-replay run`: replays a capture through an mdbus stream to
//! subscriber processes, then merges what they measured into the output
//! files.
//!
//! This process reads the input (a loader thread, ahead of the replay),
//! publishes, and starts the subscribers by running its own binary again
//! (the hidden `subscribe` command), one pinned core each. Each message is
//! published with its intended send time as its timestamp
//! (`commit_with_timestamp`); see [`super::schedule`] for what that time
//! is and [`super::subscribe`] for what the subscribers measure.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mdbus_tool_support::duration::parse as parse_duration;

use super::error::HlogError;
use super::error::ReplayError;
use super::hgrm::{percentile_distribution, MICROSECONDS};
use super::hlog::{write_hlog, HlogReader};
use super::input::{Input, InputError, Stopped};
use super::loader::Loader;
use super::peer::Subscriber;
use super::plot::{self, Curve, TimelinePoint};
use super::schedule::{Rate, Scheduler};
use super::subscribe::{self, new_histogram, SubscriberCounts};
use super::summary::{
    per_sec, Drops, EndedBy, Percentiles, SubscriberSummary, Summary, SummaryExt,
};
use super::transport::{BusOptions, End, Transport};
use mdbus_tool_support::output::LatencyNs;

/// How long before the first message the subscribers are told the start:
/// time for them to read it and begin polling.
const LEAD: Duration = Duration::from_millis(10);
/// Messages between two calls of a datagram publisher's `service` while it
/// sends flat out.
const SERVICE_EVERY: u64 = 256;
/// Messages between two progress updates (and checks on the subscribers).
const PROGRESS_EVERY: u64 = 1 << 14;

/// Options of `mdbus-replay run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The capture to replay: pcap or pcapng of MoldUDP64, mdcap, or an
    /// ITCH 5.0 BinaryFILE (recognised by content), from a file, a FIFO,
    /// or - for standard input (read once, never reopened).
    #[arg(default_value = "-", hide_default_value = true,
          required_unless_present_any = ["check", "print_config"])]
    pub input: PathBuf,

    /// The bus: transport, stream and placement.
    #[command(flatten)]
    pub bus: BusOptions,

    /// Pace: 1x replays at the capture's timing, 10x ten times faster (any
    /// factor, e.g. 0.5x or 1000x), max as fast as the publisher can send
    /// (each message is then due when the send loop reaches it).
    #[arg(long, default_value = "1x")]
    pub rate: Rate,

    /// Directory for latency.hlog, latency.hgrm, percentiles.svg,
    /// timeline.svg and the subscribers' own logs (created if missing).
    #[arg(long, value_name = "DIR", default_value = ".", hide_default_value = true,
          required_unless_present_any = ["check", "print_config"])]
    pub out: PathBuf,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Subscriber processes, each receiving every message.
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub subscribers: u64,

    /// Length of each histogram interval of the log and the timeline (at
    /// least 1ms), by intended send time.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,

    /// Shorten pauses in the capture longer than this (in replay time) to
    /// this, e.g. 10ms: the half hour before the open, overnight gaps.
    /// Default: keep every pause.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_gap: Option<Duration>,

    /// MiB of input read ahead of the replay. An input that fits is read
    /// completely before the replay starts; a larger one streams through
    /// this much memory.
    #[arg(long, default_value_t = 1024, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(4..))]
    pub preload_mb: u64,

    /// Cores, as "2,3" or "4-7": the publisher on the first, subscribers
    /// on the next ones in turn. Default: the cores of --device's NUMA
    /// node, else all this process may use.
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,

    /// Stop the run after this long (e.g. 30s, 5m), counted from the
    /// start of the command: the replay ends at the next message or wait,
    /// the subscribers account for what was sent, and the summary covers
    /// it. Waiting for input (a FIFO without a writer, a stalled pipe)
    /// ends then too. Default: run to the end of the input.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Exit 0 even when messages were lost (subscriber drops, gaps,
    /// overruns) or input was skipped or unrecoverable; the summary still
    /// says what. Without it such a run exits 3.
    #[arg(long)]
    pub allow_loss: bool,

    /// Test hook: each subscriber stalls on every Nth message before
    /// timing it.
    #[arg(long, hide = true, default_value_t = 0)]
    pub stall_every: u64,

    /// Test hook: the length of each stall, µs.
    #[arg(long, hide = true, default_value_t = 0)]
    pub stall_us: u64,
}

/// What the send loop did.
struct Sent {
    /// Why it ended.
    ended_by: EndedBy,
    messages: u64,
    last_seq: u64,
    first_ns: u64,
    last_ns: u64,
}

/// Runs a replay and writes its files; returns the summary to print.
///
/// # Errors
/// Bad options or input (exit status 2), or a failed run (1).
pub fn run(args: &RunArgs) -> Result<Summary, ReplayError> {
    let mut bus = args.bus.clone();
    bus.check()?;
    catch_interrupts()?;
    if args.interval < Duration::from_millis(1) {
        return Err(ReplayError::Usage(
            "--interval must be at least 1ms (the log writes interval times in ms)".into(),
        ));
    }
    let deadline = args.duration.map(|d| Instant::now() + d);
    let input = Input::open(&args.input, deadline).map_err(|e| stopped(e, &args.input))?;
    let input_name = input.name().to_owned();
    let format = input.format();
    let budget = usize::try_from(args.preload_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    let mut loader = Loader::start(input, Scheduler::new(args.rate, args.max_gap), budget)
        .map_err(|e| ReplayError::Run(format!("cannot start the input reader: {e}")))?;
    let whole = loader
        .prime(deadline)
        .map_err(|e| stopped(e, &args.input))?;
    std::fs::create_dir_all(&args.out).map_err(|e| ReplayError::output(&args.out, e))?;
    let subs_dir = args.out.join("subscribers");
    std::fs::create_dir_all(&subs_dir).map_err(|e| ReplayError::output(&subs_dir, e))?;

    let max_message = bus
        .max_message
        .unwrap_or_else(|| whole.map_or(1500, |w| w.max_len.max(1)));
    let capacity = bus.capacity.unwrap_or(match (bus.transport, whole) {
        (Transport::Shm, Some(w)) => (w.stats.messages as usize)
            .next_power_of_two()
            .clamp(4096, 1 << 20),
        _ => 65536,
    });
    bus.pick_port()?;
    let stream = bus
        .name
        .clone()
        .unwrap_or_else(|| format!("mdbus-replay-{}", std::process::id()));
    let cores = cores(args, &bus)?;
    let publisher_core = cores.core(0);

    let bus_handle = bus.bus(End::Publisher, &stream, max_message, capacity)?;
    let mut publisher = bus_handle.publisher(&stream)?;
    let mut subscribers = Vec::new();
    let mut sub_cores = Vec::new();
    for k in 1..=args.subscribers as usize {
        let core = cores.core(k);
        let mut a = vec!["subscribe".to_string()];
        a.extend(bus.to_args(&stream, max_message, capacity));
        a.extend([
            "--index".into(),
            k.to_string(),
            "--out".into(),
            subs_dir.display().to_string(),
            "--core".into(),
            core.to_string(),
            "--stall-every".into(),
            args.stall_every.to_string(),
            "--stall-us".into(),
            args.stall_us.to_string(),
        ]);
        subscribers.push(Subscriber::spawn(k, &a)?);
        sub_cores.push(core);
    }
    let ready_by = Instant::now() + Duration::from_secs(bus.timeout);
    for s in &mut subscribers {
        s.expect_line("ready", ready_by)?;
    }
    mdbus::affinity::pin_current_thread(publisher_core)
        .map_err(|e| ReplayError::Usage(format!("{e}; choose others with --cores")))?;

    let interval_ns = args.interval.as_nanos() as u64;
    let t0 = mdbus::clock::now_ns() + LEAD.as_nanos() as u64;
    for s in &mut subscribers {
        s.send(&format!("start {t0} {interval_ns}"))?;
    }
    // A paced replay ends when its last message is due, whatever the
    // current rate: the ETA comes from the schedule.
    let due_end = due_end(args.rate, whole.map(|w| w.span_ns), t0);
    let progress = progress_bar(whole.map(|w| w.stats.messages), due_end);
    let sent = replay(
        &mut publisher,
        &mut loader,
        args.rate,
        t0,
        bus.transport.is_datagram(),
        &progress,
        &mut subscribers,
        &input_name,
        deadline,
    );
    progress.finish_and_clear();
    let sent = sent?;
    publisher.flush()?;
    for s in &mut subscribers {
        s.send(&format!("end {}", sent.last_seq))?;
    }
    serve_until_done(
        &mut publisher,
        &mut subscribers,
        Duration::from_secs(bus.timeout),
    )?;
    drop(publisher);
    let stats = loader.end().map(|e| e.stats).unwrap_or_default();
    drop(loader);

    let outputs = merge(
        &args.out,
        &subs_dir,
        args.subscribers as usize,
        t0,
        interval_ns,
    )?;
    let mut per_subscriber = Vec::new();
    let mut drops = Drops::default();
    let mut gaps = 0;
    let mut clamped = 0;
    let mut last_delivery = t0;
    for (i, (counts, hist)) in outputs.subscribers.iter().enumerate() {
        let one = SubscriberSummary::new(i + 1, sub_cores[i], sent.messages, counts, hist);
        drops.add(&one.drops);
        gaps += counts.gaps + counts.overruns;
        clamped += counts.clamped;
        last_delivery = last_delivery.max(counts.last_ns);
        per_subscriber.push(one);
    }
    let first = sent.first_ns.min(t0);
    let seconds_ns = last_delivery.saturating_sub(first);
    Ok(Summary {
        latency_ns: LatencyNs::of(&outputs.total),
        msgs_per_sec: per_sec(sent.messages, seconds_ns),
        drops,
        gaps,
        messages: sent.messages,
        input: input_name,
        format,
        transport: bus.transport.name(),
        rate: args.rate,
        subscribers: args.subscribers as usize,
        ended_by: sent.ended_by,
        seconds: seconds_ns as f64 / 1e9,
        send_msgs_per_sec: per_sec(sent.messages, sent.last_ns.saturating_sub(sent.first_ns)),
        clamped,
        duplicates: stats.duplicates,
        heartbeats: stats.heartbeats,
        skipped: stats.skipped,
        publisher_core,
        per_subscriber,
        out: args.out.display().to_string(),
    })
}

fn cores(args: &RunArgs, bus: &BusOptions) -> Result<mdbus::affinity::Placement, ReplayError> {
    use mdbus::affinity::{self, Device, Placement};
    match &args.cores {
        Some(list) => {
            let cores = affinity::parse_cpulist(list)
                .map_err(|e| ReplayError::Usage(format!("--cores {list:?}: {e}")))?;
            if cores.is_empty() {
                return Err(ReplayError::Usage(format!(
                    "--cores {list:?} lists no core"
                )));
            }
            // Keep the order given: the first is the publisher's.
            let mut ordered = Vec::new();
            for c in cores {
                if !ordered.contains(&c) {
                    ordered.push(c);
                }
            }
            Ok(Placement::from_cores(ordered))
        }
        None => Ok(match bus.device.as_deref() {
            Some(dev) if bus.transport == Transport::Verbs => {
                affinity::placement_for(Some(Device::Rdma(dev)))
            }
            Some(dev) => affinity::placement_for(Some(Device::Net(dev))),
            None => affinity::placement_for(None),
        }),
    }
}

/// When the last message of a replay starting at `t0` is due (ns since the
/// epoch): known for a paced replay of an input read whole (`span_ns`, its
/// last message's offset at that pace); `None` at `max`, where the end
/// depends on how fast the publisher goes.
pub fn due_end(rate: Rate, span_ns: Option<u64>, t0: u64) -> Option<u64> {
    rate.speed()?;
    Some(t0.saturating_add(span_ns?))
}

/// Time left until `due_end` (ns since the epoch) at `now_ns`: when the
/// last message of a paced replay is due, however fast the messages so
/// far went.
pub fn schedule_eta(due_end: u64, now_ns: u64) -> Duration {
    Duration::from_nanos(due_end.saturating_sub(now_ns))
}

/// The progress bar (on a terminal only); its ETA is [`schedule_eta`] for
/// a paced replay of a known length, indicatif's estimate from the rate
/// otherwise.
fn progress_bar(total: Option<u64>, due_end: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (bar, template) = match total {
        Some(n) => (
            ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
            "{wide_bar} {human_pos}/{human_len} msgs  {rate}  ETA {schedule_eta}",
        ),
        None => (
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            "{spinner} {human_pos} msgs  {rate}  {elapsed}",
        ),
    };
    match ProgressStyle::with_template(template) {
        Ok(style) => bar.with_style(
            style
                .with_key(
                    "rate",
                    |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.0} msgs/s", s.per_sec());
                    },
                )
                .with_key(
                    "schedule_eta",
                    move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let eta = match due_end {
                            Some(end) => schedule_eta(end, mdbus::clock::now_ns()),
                            None => s.eta(),
                        };
                        let _ = write!(w, "{}", indicatif::HumanDuration(eta));
                    },
                ),
        ),
        Err(_) => bar,
    }
}

/// The send loop: every message at its intended time (or at once if that
/// has passed, or at `max` as soon as the loop reaches it), stamped with
/// that time.
#[allow(clippy::too_many_arguments)]
fn replay(
    publisher: &mut mdbus::Publisher,
    loader: &mut Loader,
    rate: Rate,
    t0: u64,
    datagram: bool,
    progress: &ProgressBar,
    subscribers: &mut [Subscriber],
    input: &str,
    deadline: Option<Instant>,
) -> Result<Sent, ReplayError> {
    let max = publisher.max_message();
    let paced = rate.speed().is_some();
    let mut sent = Sent {
        ended_by: EndedBy::EndOfInput,
        messages: 0,
        last_seq: 0,
        first_ns: 0,
        last_ns: 0,
    };
    // Start together with the subscribers, also at max.
    if let Some(why) = wait_until(t0, publisher, datagram, subscribers, deadline)? {
        sent.ended_by = why;
        return Ok(sent);
    }
    loop {
        let chunk = match loader.next_chunk(deadline) {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) if e.stopped() == Some(&Stopped::Deadline) => {
                sent.ended_by = EndedBy::Duration;
                break;
            }
            Err(e) if e.stopped() == Some(&Stopped::Signal) => {
                sent.ended_by = EndedBy::Interrupted;
                break;
            }
            Err(e) => return Err(stopped(e, Path::new(input))),
        };
        for item in chunk.items() {
            let data = chunk.message(item);
            let intended = if paced {
                let due = t0 + item.offset_ns;
                if mdbus::clock::now_ns() < due {
                    if let Some(why) = wait_until(due, publisher, datagram, subscribers, deadline)?
                    {
                        sent.ended_by = why;
                        break;
                    }
                }
                due
            } else {
                mdbus::clock::now_ns()
            };
            if data.len() > max {
                return Err(ReplayError::Usage(format!(
                    "message {} of {input} is {} bytes, more than the stream's --max-message {max}",
                    sent.messages + 1,
                    data.len()
                )));
            }
            let mut claim = publisher.claim(data.len())?;
            claim.copy_from_slice(data);
            sent.last_seq = claim.commit_with_timestamp(intended)?;
            if sent.messages == 0 {
                sent.first_ns = intended;
                // A marker for whoever watches stderr (an operator, a
                // test about to press Ctrl-C): the replay is under way.
                if progress.is_hidden() {
                    eprintln!(
                        "mdbus-replay: replaying {input}: first message published; \
                         Ctrl-C stops and writes what was measured"
                    );
                }
            }
            sent.messages += 1;
            if sent.messages % SERVICE_EVERY == 0 {
                if datagram {
                    publisher.service()?;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    sent.ended_by = EndedBy::Duration;
                    break;
                }
                if mdbus_tool_support::signals::requested() {
                    sent.ended_by = EndedBy::Interrupted;
                    break;
                }
            }
            if sent.messages % PROGRESS_EVERY == 0 {
                progress.set_position(sent.messages);
                for s in subscribers.iter_mut() {
                    s.check_alive()?;
                }
            }
        }
        loader.recycle(chunk);
        if sent.ended_by != EndedBy::EndOfInput {
            break;
        }
    }
    sent.last_ns = mdbus::clock::now_ns();
    Ok(sent)
}

/// Spins until `due` (ns since the epoch), doing the publisher's duties
/// and checking on the subscribers now and then. Returns why the replay
/// must stop instead when `deadline` came first or SIGINT/SIGTERM arrived,
/// so a pause of hours in a capture never holds the tool.
fn wait_until(
    due: u64,
    publisher: &mut mdbus::Publisher,
    datagram: bool,
    subscribers: &mut [Subscriber],
    deadline: Option<Instant>,
) -> Result<Option<EndedBy>, ReplayError> {
    let mut spins = 0u64;
    while mdbus::clock::now_ns() < due {
        spins += 1;
        if spins % 1024 == 0 {
            if datagram {
                publisher.service()?;
            }
            if mdbus_tool_support::signals::requested() {
                return Ok(Some(EndedBy::Interrupted));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Some(EndedBy::Duration));
            }
            if spins % (1 << 20) == 0 {
                for s in subscribers.iter_mut() {
                    s.check_alive()?;
                }
            }
        }
        std::hint::spin_loop();
    }
    Ok(None)
}

/// After the last message: answers retransmit requests until every
/// subscriber has accounted for everything and exited. Not cut short by
/// SIGINT/SIGTERM: an interrupted replay ends here too, so that every
/// subscriber finishes its interval log (bounded by the timeout).
fn serve_until_done(
    publisher: &mut mdbus::Publisher,
    subscribers: &mut [Subscriber],
    timeout: Duration,
) -> Result<(), ReplayError> {
    let mut done = vec![false; subscribers.len()];
    let mut last_progress = Instant::now();
    while done.iter().any(|d| !d) {
        publisher.service()?;
        for (i, s) in subscribers.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Some(status) = s.exited()? {
                s.check_success(status)?;
                done[i] = true;
                last_progress = Instant::now();
            }
        }
        // A subscriber gives up by itself after --timeout without
        // messages; this is only a guard against one that hangs.
        if last_progress.elapsed() > timeout * 2 {
            return Err(ReplayError::Run(format!(
                "a subscriber did not finish within {} s of the last message",
                (timeout * 2).as_secs()
            )));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// The merged results.
struct Merged {
    total: Histogram<u64>,
    subscribers: Vec<(SubscriberCounts, Histogram<u64>)>,
}

/// Reads every subscriber's log and counts, and writes the merged log,
/// the distribution and the plots.
fn merge(
    out: &Path,
    subs_dir: &Path,
    n: usize,
    t0: u64,
    interval_ns: u64,
) -> Result<Merged, ReplayError> {
    let mut readers = Vec::new();
    let mut subscribers = Vec::new();
    for k in 1..=n {
        let (hlog, json) = subscribe::files(subs_dir, k);
        let text = std::fs::read_to_string(&json)
            .map_err(|e| ReplayError::Run(format!("cannot read {}: {e}", json.display())))?;
        let counts: SubscriberCounts = serde_json::from_str(&text)
            .map_err(|e| ReplayError::Run(format!("{}: {e}", json.display())))?;
        subscribers.push((counts, new_histogram()));
        readers.push(HlogReader::open(&hlog)?);
    }
    let interval = Duration::from_nanos(interval_ns);
    let interval_s = interval.as_secs_f64();
    let mut heads: Vec<Option<(u64, Histogram<u64>)>> = Vec::new();
    for r in &mut readers {
        heads.push(next_indexed(r, interval_ns)?);
    }
    let mut total = new_histogram();
    let mut timeline = Vec::new();
    let hlog = out.join("latency.hlog");
    write_hlog(
        &hlog,
        "mdbus-replay: one-way latency in ns from each message's intended send time to its delivery, all subscribers",
        t0,
        |sink| {
            let mut merged = new_histogram();
            while let Some(index) = heads.iter().flatten().map(|(i, _)| *i).min() {
                merged.reset();
                for (k, head) in heads.iter_mut().enumerate() {
                    if head.as_ref().is_some_and(|(i, _)| *i == index) {
                        if let Some((_, h)) = head.take() {
                            add(&mut merged, &h);
                            add(&mut subscribers[k].1, &h);
                        }
                        *head = next_indexed(&mut readers[k], interval_ns)?;
                    }
                }
                let start = Duration::from_nanos(index.saturating_mul(interval_ns));
                sink.write(&merged, start, interval)?;
                add(&mut total, &merged);
                let p = Percentiles::of(&merged);
                timeline.push(TimelinePoint {
                    t: start.as_secs_f64(),
                    p50: p.p50 as f64 / 1000.0,
                    p99: p.p99 as f64 / 1000.0,
                    max: p.max as f64 / 1000.0,
                });
            }
            Ok(())
        },
    )?;
    let hgrm = out.join("latency.hgrm");
    std::fs::write(&hgrm, percentile_distribution(&total, MICROSECONDS))
        .map_err(|e| ReplayError::output(&hgrm, e))?;
    let p = Percentiles::of(&total);
    plot::percentiles(
        &out.join("percentiles.svg"),
        "mdbus-replay: one-way latency by percentile (intended send time to delivery)",
        &[Curve::of(
            format!(
                "all subscribers: {} messages, p99 {:.3} µs, max {:.3} µs",
                p.count,
                p.p99 as f64 / 1000.0,
                p.max as f64 / 1000.0
            ),
            &total,
        )],
    )?;
    plot::timeline(
        &out.join("timeline.svg"),
        "mdbus-replay: one-way latency over time (per interval of intended send time)",
        interval_s,
        &timeline,
    )?;
    Ok(Merged { total, subscribers })
}

/// The next interval of a subscriber's log, with its index.
fn next_indexed(
    r: &mut HlogReader,
    interval_ns: u64,
) -> Result<Option<(u64, Histogram<u64>)>, ReplayError> {
    let next = match r.next_interval() {
        Ok(next) => next,
        // A subscriber that received nothing wrote a log without intervals.
        Err(ReplayError::Log(HlogError::NoIntervals { .. })) => None,
        Err(e) => return Err(e),
    };
    Ok(next.map(|i| {
        let index = (i.start.as_nanos() as f64 / interval_ns as f64).round() as u64;
        (index, i.histogram)
    }))
}

fn add(into: &mut Histogram<u64>, h: &Histogram<u64>) {
    // Same bounds everywhere in a run; a log from elsewhere with a wider
    // range would fail here rather than be silently cut.
    if into.add(h).is_err() {
        for v in h.iter_recorded() {
            into.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

/// Turns Ctrl-C and SIGTERM into a flag the send loop checks: the replay
/// stops sending, the subscribers account for what was sent and finish
/// their logs, and the results are merged and printed as for
/// `--duration`; the publisher removes its shared-memory segment rather
/// than leaving a segment of the ring's size behind in /dev/shm.
fn catch_interrupts() -> Result<(), ReplayError> {
    mdbus_tool_support::signals::install()
        .map_err(|e| ReplayError::Run(format!("cannot catch SIGINT and SIGTERM: {e}")))
}

/// An input error, unless reading was stopped by a signal or the
/// deadline: then a run failure that says so (exit status 1).
fn stopped(e: InputError, input: &Path) -> ReplayError {
    let input = if input == Path::new("-") {
        Path::new("standard input")
    } else {
        input
    };
    if mdbus_tool_support::signals::requested() {
        return ReplayError::Run(format!(
            "interrupted while waiting for input from {}",
            input.display()
        ));
    }
    match e.stopped() {
        Some(Stopped::Deadline) => ReplayError::Run(format!(
            "--duration ran out while waiting for input from {}",
            input.display()
        )),
        Some(Stopped::Signal) => ReplayError::Run(format!(
            "interrupted while waiting for input from {}",
            input.display()
        )),
        None => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_replays_eta_is_its_schedule_whatever_the_rate_so_far() {
        // A capture whose last message comes 12 s after its first, at 1x:
        // 12 s left at the start, 10 s two seconds in, however many
        // messages those two seconds held (a burst at the open sends
        // thousands in the first milliseconds).
        let t0 = 1_000_000_000_000;
        let end = due_end(Rate::Speed(1.0), Some(12_000_000_000), t0).unwrap();
        assert_eq!(schedule_eta(end, t0), Duration::from_secs(12));
        assert_eq!(
            schedule_eta(end, t0 + 2_000_000_000),
            Duration::from_secs(10)
        );
        assert_eq!(schedule_eta(end, end + 5), Duration::ZERO);
        // At max the end is not known: indicatif estimates from the rate.
        assert_eq!(due_end(Rate::Max, Some(12_000_000_000), t0), None);
        // Nor for an input too large to read ahead whole.
        assert_eq!(due_end(Rate::Speed(10.0), None, t0), None);
    }
}
