//! `mdbus-perf fanout`: what loss recovery costs as one stream fans out to
//! many subscribers, in the deterministic simulation of
//! [`mdbus::recovery::fanout`] (the real publisher and subscriber cores on
//! a modelled network, so 1,000 subscribers fit on one machine).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use mdbus::recovery::fanout::{simulate, FanoutParams, FanoutReport};
use mdbus::recovery::Repair;
use mdbus_tool_support::output::{json_object, LatencyNs, EXIT_DATA_LOST, EXIT_USAGE};

/// Options of `fanout`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Run the simulation (required: a fan-out over real sockets is not
    /// offered by this command).
    #[arg(long)]
    pub simulate: bool,
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

/// The JSON object of a run.
pub fn object(a: &Args, r: &FanoutReport) -> serde_json::Value {
    let mut m = json_object("mdbus-perf");
    m.insert("mode".into(), "fanout".into());
    m.insert("simulated".into(), true.into());
    m.insert("subscribers".into(), r.subscribers.into());
    m.insert("messages".into(), r.messages.into());
    m.insert("loss_pct".into(), a.loss.into());
    m.insert("correlated".into(), a.correlated.into());
    m.insert("burst".into(), a.burst.into());
    m.insert("seed".into(), a.seed.into());
    m.insert(
        "repair".into(),
        format!("{:?}", a.repair).to_lowercase().into(),
    );
    m.insert(
        "nak_backoff_ns".into(),
        (a.nak_backoff.as_nanos() as u64).into(),
    );
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
    let ns = LatencyNs::of(&r.recovery);
    m.insert(
        "recovery_ns".into(),
        serde_json::to_value(ns).unwrap_or_default(),
    );
    m.insert(
        "recovery_us".into(),
        serde_json::to_value(ns.divided(1000)).unwrap_or_default(),
    );
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
    if !a.simulate {
        eprintln!(
            "mdbus-perf fanout: only --simulate is offered; the real-socket fan-out \
is measured by the net_recovery tests"
        );
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
