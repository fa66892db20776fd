//! The command line of `mdbus-replay`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mdbus_tool_support::output::{self, EXIT_CODES_HELP};

use super::error::ReplayError;
use super::report::{self, ReportArgs};
use super::run::{self, RunArgs};
use super::subscribe::{self, SubscribeArgs};
use super::synth::{self, time_of_day, SynthArgs};

/// Replay a market-data capture through mdbus and measure its latency.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-replay",
    version,
    about = "Replay a market-data capture through an mdbus stream and measure one-way latency",
    long_about = "Replay a market-data capture through an mdbus stream and measure one-way latency \
as HdrHistogram logs, percentile tables and plots.\n\n\
A replay is open loop: every message has an intended send time (its capture time, scaled by \
--rate), is published then or at once if it is late, and carries that intended time. \
Subscribers, each a process of its own, record delivery time minus intended time, so a stall \
anywhere (publisher, transport, subscriber) shows up in the tail instead of being hidden \
(coordinated omission).\n\n\
Typical use:\n  \
mdbus-replay synth --messages 1000000 --out day.itch\n  \
mdbus-replay run day.itch --transport shm --rate max --out shm-max\n  \
mdbus-replay run day.itch --transport udp --rate max --out udp-max\n  \
mdbus-replay report shm-max/latency.hlog udp-max/latency.hlog --out compare",
    after_help = EXIT_CODES_HELP
)]
struct Cli {
    #[command(flatten)]
    log: mdbus_tool_support::logging::Verbosity,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a synthetic ITCH 5.0 trading day as an ITCH BinaryFILE.
    ///
    /// Stock directory first, then the pre-open, the opening crosses, and
    /// continuous trading dominated by add, cancel, delete, execute and
    /// replace messages with bursty arrivals densest after the open, then
    /// the close. Messages are timed by their ITCH timestamps, which a
    /// replay paces by. Deterministic: the same options give the same
    /// bytes.
    #[command(after_help = EXIT_CODES_HELP)]
    Synth(SynthArgs),
    /// Replay a capture through an mdbus stream to subscriber processes
    /// and measure one-way latency.
    ///
    /// INPUT is a file, a FIFO, or - for standard input, opened once; its
    /// format is recognised from its content: pcap or pcapng of MoldUDP64
    /// over UDP (each message timed by its packet's capture time), mdcap
    /// (timed by its records), or an ITCH 5.0 BinaryFILE (timed by the
    /// ITCH timestamps); a directory is read as an mdbus archive
    /// (docs/ARCHIVE.md; timed by its recorded send times, its gaps
    /// counted as "unrecoverable"). Captures follow the relay's rules: one session,
    /// each sequence number once and in order (A/B duplicates dropped),
    /// far jumps and overflowing ranges refused; everything skipped is
    /// counted by reason under "skipped", and anything that may have been
    /// feed data, like messages a subscriber missed, makes the exit
    /// status 3 unless --allow-loss. Writes into --out:
    /// latency.hlog (HdrHistogram interval log, format 1.3, one histogram
    /// per --interval, values in ns), latency.hgrm (percentile
    /// distribution, values in µs: scaling ratio 1000), percentiles.svg
    /// and timeline.svg, and prints a table, or with --json one object
    /// (docs/JSON.md): {"schema", "tool", "command": "run", ...,
    /// "ended_by", "messages", "msgs_per_sec", "latency_ns": {count, min,
    /// p50, ..., max, mean, stddev}, "drops": {reason: messages}, "gaps",
    /// "skipped": {reason: count}, "per_subscriber": [...], "lost",
    /// "data_lost"}. drops = messages published but not delivered, summed
    /// over subscribers; gaps = loss events (overruns on shm,
    /// unrecoverable gaps on udp and verbs). Ctrl-C (SIGINT) or SIGTERM
    /// stops the replay like --duration: every file is written for what
    /// was sent.
    #[command(after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Compare interval logs: percentiles side by side with ratios to the
    /// first, and one overlaid percentile plot (report.svg).
    #[command(after_help = EXIT_CODES_HELP)]
    Report(ReportArgs),
    /// A subscriber process of a run (started by `run` itself).
    #[command(hide = true)]
    Subscribe(SubscribeArgs),
}

/// Parses the command line, runs the command, and returns the exit
/// status.
pub fn main() -> ExitCode {
    let cli: Cli = mdbus_tool_support::version::parse();
    cli.log.init("mdbus-replay");
    if let Command::Run(a) = &cli.command {
        let (path, load) = (
            a.bus.config.as_deref(),
            mdbus_tool_support::config::load_bus,
        );
        let defaults: fn() -> mdbus::Config = Default::default;
        if let Some(code) = a
            .bus
            .config_flags
            .handle("mdbus-replay", path, load, Some(defaults))
        {
            return code;
        }
    }
    let result = match &cli.command {
        Command::Synth(a) => synth::run(a).map(|r| {
            if a.json {
                output::print_json(&tagged("synth", &r));
            } else {
                println!(
                    "mdbus-replay synth: wrote {} messages ({} bytes) to {}, {} to {}",
                    r.messages,
                    r.bytes,
                    r.out,
                    time_of_day(r.first_ns),
                    time_of_day(r.last_ns)
                );
            }
        }),
        Command::Run(a) => match run::run(a) {
            Ok(s) => {
                if a.json {
                    output::print_json(&s.json());
                } else {
                    print!("{}", s.table());
                }
                return ExitCode::from(output::completed(s.loss().as_deref(), a.allow_loss));
            }
            Err(e) => Err(e),
        },
        Command::Report(a) => report::run(a).map(|r| {
            if a.json {
                output::print_json(&tagged("report", &r));
            } else {
                print!("{}", r.table());
            }
        }),
        Command::Subscribe(a) => subscribe::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(&e),
    }
}

/// A subcommand's result as the one JSON object of `--json`: `schema`,
/// `tool`, `command`, then the result's fields.
fn tagged(
    command: &str,
    result: &impl serde::Serialize,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = output::json_object("mdbus-replay");
    m.insert("command".into(), command.into());
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(result) {
        m.extend(fields);
    }
    m
}

fn report_error(e: &ReplayError) -> ExitCode {
    eprintln!("mdbus-replay: {e}");
    ExitCode::from(e.exit_code())
}
