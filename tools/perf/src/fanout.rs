//! `mdbus-perf fanout`: what loss recovery costs as one stream fans out to
//! many subscribers, in the deterministic simulation of
//! [`mdbus::recovery::fanout`] (the real publisher and subscriber cores on
//! a modelled network, so 1,000 subscribers fit on one machine), or over
//! real UDP multicast (`--transport udp`): one publisher and a subscriber
//! process per host, each host a network namespace on one bridge, with
//! loss injected on the bridge upstream of every subscriber and on the way
//! to each.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use mdbus::recovery::fanout::{simulate, FanoutParams, FanoutReport};
use mdbus::recovery::Repair;
use mdbus_tool_support::output::{json_object, LatencyNs, EXIT_DATA_LOST, EXIT_USAGE};

/// Options of `fanout`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Run the simulation.
    #[arg(long, conflicts_with = "transport")]
    pub simulate: bool,
    /// Run over real sockets instead: `udp` (needs root, iproute2 and
    /// nftables: each subscriber is a process in its own network
    /// namespace; at most 249 subscribers), or `verbs` (UD multicast in
    /// the RDMA lane: the publisher on MDBUS_RDMA_ADDR, default 10.99.0.1,
    /// every subscriber on MDBUS_RDMA_ADDR_B, default 10.99.0.2, all of
    /// --loss upstream as tc netem on MDBUS_RDMA_NETDEV, default veth0).
    #[arg(long, value_parser = ["udp", "verbs"])]
    pub transport: Option<String>,
    /// --transport udp: datagrams per second the publisher sends (twenty
    /// 32-byte messages each).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub pace: u64,
    /// Internal: the role of a process started by `--transport udp`.
    #[arg(long, hide = true)]
    pub role: Option<String>,
    /// Subscribers on the stream (at most 10,000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub subscribers: u32,
    /// Messages published (32 bytes each, one per microsecond); the
    /// simulation keeps them all, so at most 10,000,000.
    #[arg(long, alias = "count", short = 'n', default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub messages: u64,
    /// Chance, in percent, that a subscriber loses a given datagram.
    #[arg(long, default_value_t = 1.0)]
    pub loss: f64,
    /// Share of the loss (0 to 1) upstream of every subscriber: one drop
    /// seen by all.
    #[arg(long, default_value_t = 0.5)]
    pub correlated: f64,
    /// Datagrams lost in a row at each upstream drop.
    #[arg(long, default_value_t = 1)]
    pub burst: u32,
    /// Seed of the network model: the same seed gives the same run.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// The subscribers' longest random wait before a request
    /// (streams.NAME.nak_backoff); 0s turns suppression off.
    #[arg(long, default_value = "250us", value_parser = mdbus_tool_support::duration::parse)]
    pub nak_backoff: Duration,
    /// The subscribers' expected group size (streams.NAME.nak_group_size);
    /// default: --subscribers.
    #[arg(long)]
    pub nak_group_size: Option<u32>,
    /// Where the publisher sends repairs (streams.NAME.repair).
    #[arg(long, default_value = "auto", value_parser = parse_repair)]
    pub repair: Repair,
    /// The publisher's linger after a repair to the group
    /// (streams.NAME.repair_linger).
    #[arg(long, default_value = "250us", value_parser = mdbus_tool_support::duration::parse)]
    pub repair_linger: Duration,
    /// Chronically lossy subscribers among them, each losing --lossy-loss
    /// percent more on its own link; reported apart (they may be
    /// throttled and miss messages).
    #[arg(long, default_value_t = 0)]
    pub lossy_subscribers: u32,
    /// Extra loss of each lossy subscriber, in percent.
    #[arg(long, default_value_t = 30.0)]
    pub lossy_loss: f64,
    /// The publisher's lossy-receiver protection
    /// (streams.NAME.lossy_share_percent); 0 turns it off.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub lossy_share: u32,
    /// One-way delay to the nearest subscriber.
    #[arg(long, default_value = "20us", value_parser = mdbus_tool_support::duration::parse)]
    pub one_way: Duration,
    /// Print one JSON object (docs/JSON.md) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Exit 0 even when a subscriber did not get every message.
    #[arg(long)]
    pub allow_loss: bool,
}

fn parse_repair(text: &str) -> Result<Repair, String> {
    match text {
        "auto" => Ok(Repair::Auto),
        "group" => Ok(Repair::Group),
        "requester" => Ok(Repair::Requester),
        _ => Err("expected auto, group or requester".into()),
    }
}

impl Args {
    fn params(&self) -> Result<FanoutParams, String> {
        if !(0.0..=100.0).contains(&self.loss) {
            return Err(format!("--loss {} is not a percentage", self.loss));
        }
        if !(0.0..=1.0).contains(&self.correlated) {
            return Err(format!(
                "--correlated {} is not a share between 0 and 1",
                self.correlated
            ));
        }
        if !(0.0..=100.0).contains(&self.lossy_loss) {
            return Err(format!(
                "--lossy-loss {} is not a percentage",
                self.lossy_loss
            ));
        }
        if self.lossy_subscribers >= self.subscribers {
            return Err(format!(
                "--lossy-subscribers {} leaves no other subscriber of {}",
                self.lossy_subscribers, self.subscribers
            ));
        }
        Ok(FanoutParams {
            subscribers: self.subscribers as usize,
            lossy_subscribers: self.lossy_subscribers as usize,
            lossy_loss_percent: self.lossy_loss,
            lossy_share_percent: self.lossy_share,
            messages: self.messages,
            loss_percent: self.loss,
            correlated: self.correlated,
            burst: self.burst.max(1),
            seed: self.seed,
            nak_backoff: self.nak_backoff,
            nak_group_size: self.nak_group_size.unwrap_or(self.subscribers).max(1),
            repair: self.repair,
            repair_linger: self.repair_linger,
            one_way: self.one_way,
            ..FanoutParams::default()
        })
    }
}

/// The keys every run reports first: what was run, with which settings.
fn head(
    a: &Args,
    simulated: bool,
    subscribers: usize,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = json_object("mdbus-perf");
    m.insert("mode".into(), "fanout".into());
    m.insert("simulated".into(), simulated.into());
    if let Some(t) = &a.transport {
        m.insert("transport".into(), t.as_str().into());
    }
    m.insert("subscribers".into(), subscribers.into());
    m.insert("messages".into(), a.messages.into());
    m.insert("loss_pct".into(), a.loss.into());
    m.insert("correlated".into(), a.correlated.into());
    m.insert(
        "repair".into(),
        format!("{:?}", a.repair).to_lowercase().into(),
    );
    m.insert(
        "nak_backoff_ns".into(),
        (a.nak_backoff.as_nanos() as u64).into(),
    );
    m
}

/// The recovery times, in ns and in µs.
fn recovery_keys(m: &mut serde_json::Map<String, serde_json::Value>, ns: LatencyNs) {
    m.insert(
        "recovery_ns".into(),
        serde_json::to_value(ns).unwrap_or_default(),
    );
    m.insert(
        "recovery_us".into(),
        serde_json::to_value(ns.divided(1000)).unwrap_or_default(),
    );
}

/// The JSON object of a run.
pub fn object(a: &Args, r: &FanoutReport) -> serde_json::Value {
    let mut m = head(a, true, r.subscribers);
    m.insert("burst".into(), a.burst.into());
    m.insert("seed".into(), a.seed.into());
    m.insert("datagrams".into(), r.datagrams.into());
    m.insert("loss_events".into(), r.loss_events().into());
    m.insert("upstream_loss_events".into(), r.upstream_loss_events.into());
    m.insert(
        "independent_loss_events".into(),
        r.independent_loss_events.into(),
    );
    m.insert("requests".into(), r.requests.into());
    m.insert(
        "retransmitted_datagrams".into(),
        r.retransmitted_datagrams.into(),
    );
    m.insert(
        "group_repair_datagrams".into(),
        r.group_repair_datagrams.into(),
    );
    m.insert(
        "requests_per_loss_event".into(),
        round(r.requests_per_loss_event()).into(),
    );
    m.insert(
        "retransmits_per_loss_event".into(),
        round(r.retransmits_per_loss_event()).into(),
    );
    m.insert("lingered_messages".into(), r.lingered.into());
    m.insert("suppressed_messages".into(), r.suppressed.into());
    recovery_keys(&mut m, LatencyNs::of(&r.recovery));
    m.insert("delivered_all".into(), r.delivered_all.into());
    m.insert(
        "incomplete_subscribers".into(),
        r.incomplete_subscribers.into(),
    );
    m.insert("lossy_subscribers".into(), a.lossy_subscribers.into());
    m.insert("lossy_share_pct".into(), a.lossy_share.into());
    m.insert("requesters_throttled".into(), r.requesters_throttled.into());
    m.insert("throttled_notices".into(), r.throttled_notices.into());
    m.insert("lossy_incomplete".into(), r.lossy_incomplete.into());
    m.insert("lost".into(), (!r.delivered_all).into());
    serde_json::Value::Object(m)
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Runs `fanout`.
pub fn main(a: &Args) -> ExitCode {
    if a.role.as_deref() == Some("subscriber") {
        return udp::subscriber(a);
    }
    if a.transport.is_some() {
        return udp::main(a);
    }
    if !a.simulate {
        eprintln!("mdbus-perf fanout: say --simulate, or --transport udp for real sockets");
        return ExitCode::from(EXIT_USAGE);
    }
    let p = match a.params() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mdbus-perf fanout: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let r = simulate(&p);
    if a.json {
        mdbus_tool_support::output::print_json(&object(a, &r));
    } else {
        let us = LatencyNs::of(&r.recovery).divided(1000);
        println!(
            "subscribers {}  messages {}  datagrams {}  loss events {} ({} upstream, {} independent)",
            r.subscribers,
            r.messages,
            r.datagrams,
            r.loss_events(),
            r.upstream_loss_events,
            r.independent_loss_events
        );
        println!(
            "requests {} ({:.2} per loss event)  retransmitted datagrams {} ({:.2} per loss event, {} to the group)",
            r.requests,
            r.requests_per_loss_event(),
            r.retransmitted_datagrams,
            r.retransmits_per_loss_event(),
            r.group_repair_datagrams
        );
        println!(
            "recovery µs: p50 {} p99 {} max {}  delivered to all: {}",
            us.p50, us.p99, us.max, r.delivered_all
        );
        if a.lossy_subscribers > 0 {
            println!(
                "lossy subscribers {} ({} incomplete)  requesters throttled {}  notices believed {}",
                a.lossy_subscribers,
                r.lossy_incomplete,
                r.requesters_throttled,
                r.throttled_notices
            );
        }
    }
    let lost = (!r.delivered_all).then(|| {
        format!(
            "{} of {} subscribers did not get every message in order",
            r.incomplete_subscribers, r.subscribers
        )
    });
    match mdbus_tool_support::output::completed(lost.as_deref(), a.allow_loss) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_DATA_LOST),
    }
}

/// The fan-out over real UDP multicast.
mod udp {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ExitCode, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    use hdrhistogram::Histogram;
    use mdbus::{Bus, Config, Event};
    use mdbus_tool_support::output::{LatencyNs, EXIT_DATA_LOST};
    use serde::{Deserialize, Serialize};

    use super::{round, Args};
    use crate::common::Failure;
    use crate::netns::{Netem, Star};

    /// Where the processes run and how loss is injected.
    enum Net {
        /// UDP: a network namespace per host on one bridge.
        Star(Star),
        /// Verbs UD multicast: this host's two RDMA devices, the publisher
        /// on the first; loss (if any) upstream of all subscribers.
        Rdma(Option<Netem>),
    }

    fn env_or(name: &str, default: &str) -> String {
        std::env::var(name).unwrap_or_else(|_| default.into())
    }

    impl Net {
        fn transport(&self) -> &'static str {
            match self {
                Net::Star(_) => "udp",
                Net::Rdma(_) => "verbs",
            }
        }

        fn addr(&self, h: usize) -> String {
            match (self, h) {
                (Net::Star(t), _) => t.addr(h).to_string(),
                (Net::Rdma(_), 0) => env_or("MDBUS_RDMA_ADDR", "10.99.0.1"),
                (Net::Rdma(_), _) => env_or("MDBUS_RDMA_ADDR_B", "10.99.0.2"),
            }
        }

        fn command(&self, h: usize, exe: &str) -> std::process::Command {
            match self {
                Net::Star(t) => t.exec(h, exe),
                Net::Rdma(_) => std::process::Command::new(exe),
            }
        }

        fn enter_publisher(&self) -> Result<(), Failure> {
            match self {
                Net::Star(t) => t.enter(0),
                Net::Rdma(_) => Ok(()),
            }
        }

        /// Drops so far: (upstream, on single subscribers' links).
        fn dropped(&self) -> Result<(u64, u64), Failure> {
            match self {
                Net::Star(t) => t.dropped().map(|(up, each)| (up, each.iter().sum())),
                Net::Rdma(Some(n)) => Ok((n.dropped()?, 0)),
                Net::Rdma(None) => Ok((0, 0)),
            }
        }
    }

    /// Where a subscriber process finds its stream configuration.
    const TOML_ENV: &str = "MDBUS_PERF_FANOUT_TOML";
    /// Messages per datagram: the publisher flushes after this many.
    const PER_DATAGRAM: u64 = 20;
    /// Most recovery samples one subscriber reports.
    const MAX_SAMPLES: usize = 200_000;

    /// What one subscriber process saw, as it reports it (one JSON line).
    #[derive(Debug, Default, Serialize, Deserialize)]
    struct Seen {
        received: u64,
        bad: u64,
        gap_messages: u64,
        requests_sent: u64,
        messages_requested: u64,
        recovered: u64,
        suppressed: u64,
        throttled: u64,
        timed_out: bool,
        /// Publish-to-delivery times of the messages delivered by a poll
        /// that brought retransmitted messages (the lost ones and those
        /// held behind them), ns.
        recovery_ns: Vec<u64>,
        /// Publish-to-delivery times of every 16th message, ns: the
        /// baseline the recovery times compare with.
        latency_ns: Vec<u64>,
    }

    /// The stream configuration of host `h`.
    fn config(t: &Net, h: usize, a: &Args) -> String {
        let ns = |d: Duration| d.as_nanos();
        // UDP subscribers accept the publisher's address alone.
        let source = match t {
            Net::Star(_) => format!("source = \"{}:40100\"\n", t.addr(0)),
            Net::Rdma(_) => String::new(),
        };
        format!(
            "transport = \"{transport}\"\n[streams.f]\nmax_message = 32\ncapacity = {capacity}\n\
             group = \"239.78.0.1:40101\"\ninterface = \"{addr}\"\n{source}\
             autoflush = false\ntimestamps = true\nlate_join = \"oldest\"\n\
             heartbeat_interval = \"10ms\"\nheartbeat_timeout = \"10s\"\n\
             retransmit_timeout = \"{timeout}ns\"\nretransmit_retries = 200\n\
             nak_backoff = \"{backoff}ns\"\nnak_group_size = {group}\n\
             repair = \"{repair}\"\nrepair_linger = \"{linger}ns\"\n",
            transport = t.transport(),
            capacity = (a.messages as usize).next_power_of_two().max(1024),
            addr = t.addr(h),
            // Several times the linger and the wait: a repair to the group
            // must have had time to arrive before a repeat.
            timeout = (4 * (ns(a.repair_linger) + ns(a.nak_backoff))).max(50_000_000),
            backoff = ns(a.nak_backoff),
            group = a.nak_group_size.unwrap_or(a.subscribers).max(1),
            repair = format!("{:?}", a.repair).to_lowercase(),
            linger = ns(a.repair_linger),
        )
    }

    /// A subscriber process: reads the stream until every message is
    /// delivered or reported lost, then prints what it saw.
    pub fn subscriber(a: &Args) -> ExitCode {
        match run_subscriber(a.messages) {
            Ok(seen) => {
                println!("{}", serde_json::to_string(&seen).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mdbus-perf fanout subscriber: {e}");
                ExitCode::from(1)
            }
        }
    }

    fn run_subscriber(count: u64) -> Result<Seen, String> {
        let toml = std::env::var(TOML_ENV).map_err(|_| format!("{TOML_ENV} is not set"))?;
        let bus = Bus::new(Config::from_toml_str(&toml, TOML_ENV).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let mut s = bus.subscriber("f").map_err(|e| e.to_string())?;
        println!("ready");
        let _ = std::io::stdout().flush();
        let mut seen = Seen::default();
        let mut next = 1u64;
        let mut down = false;
        let deadline = mdbus::clock::monotonic_ns() + 600_000_000_000;
        let mut batch: Vec<u64> = Vec::with_capacity(1024);
        while next <= count && !down {
            if mdbus::clock::monotonic_ns() > deadline {
                seen.timed_out = true;
                break;
            }
            let before = s.recovery_counters().map_or(0, |c| c.recovered);
            batch.clear();
            let now = mdbus::clock::now_ns();
            let n = s
                .poll(|e| match e {
                    Event::Message(m) => {
                        if m.seq() != next || m.payload() != &m.seq().to_le_bytes().repeat(4)[..] {
                            seen.bad += 1;
                        }
                        seen.received += 1;
                        next = m.seq() + 1;
                        if let Some(t) = m.timestamp() {
                            let l = now.saturating_sub(t).max(1);
                            batch.push(l);
                            if m.seq() % 16 == 0 {
                                seen.latency_ns.push(l);
                            }
                        }
                    }
                    Event::Gap { from, to } => {
                        seen.gap_messages += to - from;
                        next = to;
                    }
                    Event::PublisherDown { .. } | Event::EndOfStream { .. } => down = true,
                    _ => seen.bad += 1,
                })
                .map_err(|e| e.to_string())?;
            if s.recovery_counters().map_or(0, |c| c.recovered) != before {
                let room = MAX_SAMPLES - seen.recovery_ns.len().min(MAX_SAMPLES);
                seen.recovery_ns.extend(batch.iter().take(room));
            }
            if n == 0 {
                // Many subscribers share two cores: sleep rather than spin
                // (the socket buffer holds what arrives meanwhile).
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        if let Some(c) = s.recovery_counters() {
            seen.requests_sent = c.requests_sent;
            seen.messages_requested = c.messages_requested;
            seen.recovered = c.recovered;
            seen.suppressed = c.suppressed;
            seen.throttled = c.throttled;
        }
        Ok(seen)
    }

    /// Runs the fan-out and prints the report.
    pub fn main(a: &Args) -> ExitCode {
        match run(a) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("mdbus-perf fanout: {e}");
                ExitCode::from(e.exit_code())
            }
        }
    }

    fn run(a: &Args) -> Result<u8, Failure> {
        if a.subscribers > 249 {
            return Err(Failure::Usage(format!(
                "--subscribers {}: --transport udp runs at most 249 (one host each on one bridge)",
                a.subscribers
            )));
        }
        if !(0.0..=100.0).contains(&a.loss) || !(0.0..=1.0).contains(&a.correlated) {
            return Err(Failure::Usage(format!(
                "--loss {} must be a percentage and --correlated {} a share between 0 and 1",
                a.loss, a.correlated
            )));
        }
        crate::common::catch_interrupts()?;
        let n = a.subscribers as usize;
        let star = if a.transport.as_deref() == Some("verbs") {
            let netem = if a.loss > 0.0 {
                Some(Netem::add(&env_or("MDBUS_RDMA_NETDEV", "veth0"), a.loss)?)
            } else {
                None
            };
            Net::Rdma(netem)
        } else {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err(Failure::Usage(
                    "fanout --transport udp needs root: it builds a network namespace per host"
                        .into(),
                ));
            }
            let star = Star::create(n + 1)?;
            // In hundredths of a percent, as the rules draw them.
            let upstream = (a.loss * a.correlated * 100.0).round() as u32;
            let each = (a.loss * (1.0 - a.correlated) * 100.0).round() as u32;
            star.impair(upstream, each)?;
            Net::Star(star)
        };
        let exe = std::env::current_exe()?;
        let exe = exe.to_string_lossy();
        let (tx, rx) = mpsc::channel::<(usize, String)>();
        let mut subs: Vec<Child> = Vec::with_capacity(n);
        for h in 1..=n {
            let mut child = star
                .command(h, &exe)
                .args(["fanout", "--transport", star.transport()])
                .args(["--role", "subscriber"])
                .args(["--messages", &a.messages.to_string()])
                .env(TOML_ENV, config(&star, h, a))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| Failure::Run(format!("cannot start subscriber {h}: {e}")))?;
            let out = child.stdout.take().expect("piped");
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send((h, line)).is_err() {
                        break;
                    }
                }
            });
            subs.push(child);
        }
        drop(tx);
        let result = publish_and_collect(a, &star, n, &rx);
        for child in &mut subs {
            // A subscriber still running after the run failed is ended;
            // those that reported have exited.
            let _ = child.kill();
            let _ = child.wait();
        }
        let (seen, pc) = result?;
        let (up, each) = star.dropped()?;
        report(a, &seen, &pc, up, each)
    }

    /// Waits for every subscriber, publishes, serves requests until every
    /// subscriber has reported, and returns the reports in host order and
    /// the publisher's counters.
    fn publish_and_collect(
        a: &Args,
        star: &Net,
        n: usize,
        rx: &mpsc::Receiver<(usize, String)>,
    ) -> Result<(Vec<Seen>, mdbus::recovery::Counters), Failure> {
        let wait = |what: &str, secs: u64| -> Result<(usize, String), Failure> {
            rx.recv_timeout(Duration::from_secs(secs))
                .map_err(|_| Failure::Run(format!("a subscriber did not {what} within {secs} s")))
        };
        for _ in 0..n {
            let (h, l) = wait("start", 60)?;
            if l != "ready" {
                return Err(Failure::Run(format!("subscriber {h} said `{l}`")));
            }
        }
        star.enter_publisher()?;
        let bus = Bus::new(
            Config::from_toml_str(&config(star, 0, a), "<fanout publisher>")
                .map_err(|e| Failure::Usage(e.to_string()))?,
        )
        .map_err(|e| Failure::Run(e.to_string()))?;
        let mut p = bus
            .publisher("f")
            .map_err(|e| Failure::Run(e.to_string()))?;
        let fail = |e: mdbus::Error| Failure::Run(e.to_string());
        let start = mdbus::clock::monotonic_ns();
        let per_datagram_ns = 1_000_000_000 / a.pace;
        let mut datagrams = 0u64;
        for seq in 1..=a.messages {
            p.publish(&seq.to_le_bytes().repeat(4)).map_err(fail)?;
            if seq % PER_DATAGRAM == 0 || seq == a.messages {
                p.flush().map_err(fail)?;
                datagrams += 1;
                p.service().map_err(fail)?;
                while mdbus::clock::monotonic_ns() - start < datagrams * per_datagram_ns {
                    p.service().map_err(fail)?;
                    std::thread::sleep(Duration::from_micros(20));
                }
                crate::common::interrupted()?;
            }
        }
        let mut seen: Vec<Option<Seen>> = (0..n).map(|_| None).collect();
        let mut left = n;
        let deadline = mdbus::clock::monotonic_ns() + 600_000_000_000;
        while left > 0 {
            p.service().map_err(fail)?;
            crate::common::interrupted()?;
            match rx.try_recv() {
                Ok((h, line)) => {
                    let s: Seen = serde_json::from_str(&line).map_err(|e| {
                        Failure::Run(format!("subscriber {h} reported `{line}`: {e}"))
                    })?;
                    if seen[h - 1].replace(s).is_none() {
                        left -= 1;
                    }
                }
                Err(mpsc::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(Failure::Run(format!(
                        "{left} subscribers ended without a report"
                    )));
                }
            }
            if mdbus::clock::monotonic_ns() > deadline {
                return Err(Failure::Run(format!(
                    "{left} subscribers did not finish within 600 s"
                )));
            }
        }
        let pc = p.recovery_counters().unwrap_or_default();
        Ok((
            seen.into_iter().map(Option::unwrap_or_default).collect(),
            pc,
        ))
    }

    fn report(
        a: &Args,
        seen: &[Seen],
        pc: &mdbus::recovery::Counters,
        upstream: u64,
        independent: u64,
    ) -> Result<u8, Failure> {
        let histogram = |f: fn(&Seen) -> &Vec<u64>| {
            let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
                .map_err(|e| Failure::Run(format!("histogram: {e}")))?;
            for v in seen.iter().flat_map(f) {
                let _ = h.record(*v);
            }
            Ok::<_, Failure>(h)
        };
        let hist = histogram(|s| &s.recovery_ns)?;
        let all = LatencyNs::of(&histogram(|s| &s.latency_ns)?);
        let incomplete = seen
            .iter()
            .filter(|s| s.received != a.messages || s.bad != 0 || s.gap_messages != 0)
            .count();
        let sum = |f: fn(&Seen) -> u64| seen.iter().map(f).sum::<u64>();
        let requests = sum(|s| s.requests_sent);
        let loss_events = upstream + independent;
        let per = |x: u64| {
            if loss_events == 0 {
                0.0
            } else {
                round(x as f64 / loss_events as f64)
            }
        };
        let ns = LatencyNs::of(&hist);
        if a.json {
            let mut m = super::head(a, false, seen.len());
            m.insert("pace_datagrams_per_s".into(), a.pace.into());
            m.insert("loss_events".into(), loss_events.into());
            m.insert("upstream_loss_events".into(), upstream.into());
            m.insert("independent_loss_events".into(), independent.into());
            m.insert("requests".into(), requests.into());
            m.insert("requests_received".into(), pc.requests_received.into());
            m.insert("repairs".into(), pc.requests_served.into());
            m.insert("repairs_to_group".into(), pc.repairs_to_group.into());
            m.insert("retransmitted_messages".into(), pc.retransmitted.into());
            m.insert("lingered_messages".into(), pc.requests_lingered.into());
            m.insert("requests_per_loss_event".into(), per(requests).into());
            m.insert(
                "repairs_per_loss_event".into(),
                per(pc.requests_served).into(),
            );
            m.insert("suppressed_messages".into(), sum(|s| s.suppressed).into());
            m.insert(
                "requesters_throttled".into(),
                pc.requesters_throttled.into(),
            );
            m.insert("throttled_notices".into(), sum(|s| s.throttled).into());
            super::recovery_keys(&mut m, ns);
            m.insert(
                "latency_ns".into(),
                serde_json::to_value(all).unwrap_or_default(),
            );
            m.insert("delivered_all".into(), (incomplete == 0).into());
            m.insert("incomplete_subscribers".into(), incomplete.into());
            m.insert("lost".into(), (incomplete != 0).into());
            mdbus_tool_support::output::print_json(&serde_json::Value::Object(m));
        } else {
            let us = ns.divided(1000);
            println!(
                "{}: {} subscribers  messages {}  loss events {} ({upstream} upstream, {independent} on one subscriber's link)",
                a.transport.as_deref().unwrap_or("udp"),
                seen.len(),
                a.messages,
                loss_events
            );
            println!(
                "requests {requests} ({:.2} per loss event)  repairs {} ({:.2} per loss event, {} to the group)",
                per(requests),
                pc.requests_served,
                per(pc.requests_served),
                pc.repairs_to_group
            );
            println!(
                "recovery µs: p50 {} p99 {} max {} (every message: p50 {} p99 {})  delivered to all: {}",
                us.p50,
                us.p99,
                us.max,
                all.divided(1000).p50,
                all.divided(1000).p99,
                incomplete == 0
            );
        }
        let lost = (incomplete != 0).then(|| {
            format!(
                "{incomplete} of {} subscribers did not get every message in order",
                seen.len()
            )
        });
        Ok(
            match mdbus_tool_support::output::completed(lost.as_deref(), a.allow_loss) {
                0 => 0,
                _ => EXIT_DATA_LOST,
            },
        )
    }
}
