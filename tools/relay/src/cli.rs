//! The `mdbus-relay` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mdbus_tool_support::duration::parse as parse_duration;

use mdbus_tool_support::{output, signals};

use super::report::print_summary;
use super::{demo, Relay, RelayConfig, RunOptions};

/// MoldUDP64 / ITCH 5.0 in, routed mdbus streams out.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-relay",
    version,
    about = "Relay a NASDAQ MoldUDP64/ITCH 5.0 feed onto mdbus streams",
    long_about = "Relay a NASDAQ MoldUDP64/ITCH 5.0 feed onto mdbus streams.\n\n\
The relay joins the feed's A and B multicast lines, arbitrates them (the first copy of each \
message wins), re-requests what both lines lost from the exchange's re-request server, routes \
each ITCH message to a stream by its symbol (symbol lists, ranges or hash partitions; system \
messages to every stream or to a control stream) and publishes it on the bus (shared memory, \
UDP multicast or RDMA verbs), stamped with the arrival time of its datagram. It can also \
re-publish the arbitrated feed as MoldUDP64, and read BinaryFILE or pcap files instead of the \
network. Everything is set in one TOML file (--config; see config/relay.toml, which documents \
every key).\n\n\
Counters (packets, messages, A/B wins, duplicates, gaps, recovered, unrecoverable, per-stream \
messages, latency percentiles) live in a shared-memory counters file that mdbus-stat reads \
while the relay runs, and are printed to stderr every counters.log_interval.\n\n\
--demo runs everything on this host with no configuration: an exchange simulator sending a \
synthetic ITCH session on loopback multicast (with drops on line B so that arbitration and \
recovery show), the relay publishing on shared memory, and a subscriber printing what arrives.\n\n\
SIGINT or SIGTERM stops the relay in order: it publishes what it has, closes its streams and \
prints the summary.\n\n\
Exit status 1: the relay failed while running (an input file that is truncated, say). 2: a \
usage or configuration error, an input file that cannot be opened, an interface that cannot be \
used or a group that cannot be joined. 3: feed messages were unrecoverable (subscribers got \
source gaps), could not be published (bad ITCH, failed publishes) or the recording stopped. \
Input the relay rejected (malformed packets, unconfirmed far jumps, other sessions, \
duplicates, capture frames that are not UDP) is counted by reason in the summary but is not \
data lost by itself: every feed sequence number is delivered or counted unrecoverable.",
    after_help = output::EXIT_CODES_HELP,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// The relay's configuration file (TOML; config/relay.toml documents
    /// every key). With --demo: its bus, routing, counters and thread
    /// settings replace the demo's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// --check and --print-config.
    #[command(flatten)]
    pub config_flags: mdbus_tool_support::config::ConfigFlags,

    /// Run the built-in demonstration: exchange simulator, relay and a
    /// printing subscriber in this process, on loopback multicast and
    /// shared memory.
    #[arg(long)]
    pub demo: bool,

    /// --demo: the feed's port. Lines A and B are the groups 239.192.10.1
    /// and 239.192.10.2 on it, and the re-request server listens on
    /// 127.0.0.1 on the next port (the demo's first line on stderr says
    /// so).
    #[arg(long, value_name = "PORT", default_value_t = demo::DEMO_PORT, requires = "demo")]
    pub demo_port: u16,

    /// Stop after this long, as 10s, 500ms or 2m; default: until SIGINT or
    /// SIGTERM (or the end of a file input).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Print the summary as one JSON object on stdout (docs/JSON.md): schema,
    /// tool, input, seconds, ended_by, every counter under its counters-file
    /// name, drops and skipped {reason: count}, streams [{name, messages}],
    /// latency_ns {count, min, p50, ..., p9999, max, mean, stddev}, lost
    /// and data_lost; --demo adds exchange {...}.
    #[arg(long)]
    pub json: bool,

    /// Record every routed message, with its arrival time and MoldUDP64
    /// sequence number, into this .mdcap file for `mdbus-replay run`
    /// (replaces `record.path` of the configuration).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// Exit 0 even when data was lost (the summary still says what).
    #[arg(long)]
    pub allow_loss: bool,

    /// Log at info level (core placement, sockets, segments) to stderr;
    /// warnings are always shown.
    #[arg(short, long)]
    pub verbose: bool,

    /// `simulate`, or none for the relay itself.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the exchange simulator alone: a synthetic ITCH 5.0 session over
    /// MoldUDP64 on lines A and B, with a re-request server, for a relay
    /// in another process or on another host.
    #[command(after_help = output::EXIT_CODES_HELP)]
    Simulate(mdbus_exchange::SimulateArgs),
}

/// The program: parses the command line and runs.
pub fn main() -> ExitCode {
    let cli: Cli = mdbus_tool_support::version::parse();
    mdbus_tool_support::logging::init("mdbus-relay", cli.verbose);
    let path = cli.config.as_deref();
    let load = |p: &'_ std::path::Path| {
        let c = RelayConfig::from_file(p)?;
        c.bus
            .check_files(&p.display().to_string(), "bus.")
            .map(|()| c)
    };
    if let Some(code) = cli.config_flags.handle("mdbus-relay", path, load, None) {
        return code;
    }
    if let Some(Command::Simulate(args)) = &cli.command {
        return mdbus_exchange::run_simulate(args);
    }
    if let Err(e) = signals::install() {
        eprintln!("mdbus-relay: cannot install the SIGINT/SIGTERM handler: {e}");
        return ExitCode::from(output::EXIT_FAILED);
    }
    let file_config = match &cli.config {
        Some(path) => match RelayConfig::from_file(path) {
            Ok(mut c) => {
                if let Some(r) = &cli.record {
                    c.record.path = r.clone();
                }
                Some((c, path.display().to_string()))
            }
            Err(e) => {
                eprintln!("mdbus-relay: {e}");
                return ExitCode::from(output::EXIT_USAGE);
            }
        },
        None => None,
    };
    let opts = RunOptions {
        duration: cli.duration,
        stop: Arc::new(AtomicBool::new(false)),
        log: true,
    };
    if cli.demo {
        let demo = demo::DemoOptions {
            base: file_config.map(|(c, _)| c),
            record: cli.record.clone(),
            port: cli.demo_port,
            json: cli.json,
            allow_loss: cli.allow_loss,
        };
        return demo::run(demo, &opts);
    }
    let Some((config, source)) = file_config else {
        eprintln!(
            "mdbus-relay: give --config FILE (see config/relay.toml), or --demo to run everything on this host"
        );
        return ExitCode::from(output::EXIT_USAGE);
    };
    let relay = match Relay::new(config, &source) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mdbus-relay: {e}");
            return ExitCode::from(output::EXIT_USAGE);
        }
    };
    eprintln!(
        "mdbus-relay: publishing streams {}{}",
        relay.stream_names().join(", "),
        relay
            .counters_path()
            .map(|p| format!("; counters in {} (read them with mdbus-stat)", p.display()))
            .unwrap_or_default()
    );
    match relay.run(&opts) {
        Ok(summary) => {
            print_summary(&summary, cli.json);
            ExitCode::from(output::completed(
                summary.data_lost.as_deref(),
                cli.allow_loss,
            ))
        }
        Err(e) => {
            eprintln!("mdbus-relay: {e}");
            ExitCode::from(output::EXIT_FAILED)
        }
    }
}
