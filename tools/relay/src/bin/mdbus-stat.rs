//! mdbus-stat: prints the counters of a running mdbus process (such as
//! `mdbus-relay`) from its counters file, with rates per second.
//!
//! ```text
//! mdbus-stat                                   # /dev/shm/mdbus-relay.counters, every second
//! mdbus-stat /dev/shm/feed.counters --interval 5s
//! mdbus-stat --once --json
//! mdbus-stat list                              # mdbus files in /dev/shm: creator pid, alive/stale
//! mdbus-stat clean                             # remove the stale ones
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mdbus::counters::CountersReader;
use mdbus::leftovers::State;
use mdbus_tool_support::duration::parse_nonzero;
use mdbus_tool_support::output::{EXIT_CODES_HELP, EXIT_FAILED, EXIT_USAGE};

/// Print the counters of a running mdbus process.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-stat",
    version,
    about = "Print the live counters of a running mdbus process (e.g. mdbus-relay) from its counters file",
    long_about = "Print the live counters of a running mdbus process, such as mdbus-relay, from \
its counters file: a small shared-memory file the process updates with atomic stores, read here \
without locks or system calls per counter. Each interval prints every counter with its rate per \
second since the previous sample. The file must belong to a live process: a missing file, a file \
that is not a counters file, or one whose owner has exited (stale) is an error (exit status 1); \
exit status 0 when the owner exits while being watched.",
    after_help = EXIT_CODES_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The counters file (mdbus-relay: `counters.path` in its configuration).
    #[arg(default_value = "/dev/shm/mdbus-relay.counters")]
    file: PathBuf,

    /// `list` or `clean` the mdbus files of a directory; none: watch a
    /// counters file.
    #[command(subcommand)]
    command: Option<Command>,

    /// Time between samples, as 500ms, 1s, 5s.
    #[arg(long, default_value = "1s", value_parser = parse_nonzero)]
    interval: Duration,

    /// Print one sample (counters only, no rates) and exit.
    #[arg(long)]
    once: bool,

    /// Print this many samples, then exit (default: until interrupted or
    /// the owner exits).
    #[arg(long, value_name = "N")]
    count: Option<u64>,

    /// One JSON object per sample: {"file", "owner", "pid", "uptime_s",
    /// "counters": {LABEL: VALUE}, "rates": {LABEL: PER_SECOND}} (rates
    /// absent on the first sample).
    #[arg(long)]
    json: bool,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// List the shared-memory segments, counters files and temporary files
    /// mdbus processes left in a directory, with each creator's pid and
    /// whether it still runs (alive, stale, unreadable).
    #[command(after_help = EXIT_CODES_HELP)]
    List(DirArgs),
    /// Remove the stale ones: files of this user, private (0600), whose
    /// creator no longer runs. Files of live processes, of other users,
    /// with damaged headers or unknown formats are left alone.
    #[command(after_help = EXIT_CODES_HELP)]
    Clean(DirArgs),
}

#[derive(Debug, clap::Args)]
struct DirArgs {
    /// The directory (the bus's `shm.dir`, which also holds the relay's
    /// counters file by default).
    #[arg(default_value = "/dev/shm", conflicts_with = "config")]
    dir: PathBuf,

    /// Take the directories from a relay configuration instead: its
    /// `bus.shm.dir` and the directory of its `counters.path`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// One JSON object: {"dir", "files": [{"path", "what", "pid", "state",
    /// "removed"}]}.
    #[arg(long)]
    json: bool,
}

fn state_name(s: State) -> &'static str {
    match s {
        State::Alive => "alive",
        State::Stale => "stale",
        State::Unreadable => "unreadable",
    }
}

/// `list` and `clean`.
fn leftovers(args: &DirArgs, clean: bool) -> ExitCode {
    let dirs = match &args.config {
        None => vec![args.dir.clone()],
        Some(path) => match mdbus_relay::RelayConfig::from_file(path) {
            Ok(c) => {
                let mut d = vec![c.bus.shm.dir.clone()];
                if let Some(p) = c.counters.path.parent() {
                    if !p.as_os_str().is_empty() && !d.iter().any(|x| x == p) {
                        d.push(p.to_path_buf());
                    }
                }
                d
            }
            Err(e) => {
                eprintln!("mdbus-stat: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    let mut found = Vec::new();
    for dir in &dirs {
        let r = if clean {
            mdbus::leftovers::clean(dir)
        } else {
            mdbus::leftovers::list(dir)
        };
        match r {
            Ok(f) => found.extend(f),
            Err(e) => {
                eprintln!("mdbus-stat: cannot read {}: {e}", dir.display());
                return ExitCode::from(EXIT_FAILED);
            }
        }
    }
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let shown = shown.join(", ");
    if args.json {
        let files: Vec<serde_json::Value> = found
            .iter()
            .map(|l| {
                serde_json::json!({
                    "path": l.path.display().to_string(),
                    "what": l.what,
                    "pid": l.creator.map(|c| c.pid),
                    "state": state_name(l.state),
                    "removed": l.removed,
                })
            })
            .collect();
        println!("{}", serde_json::json!({"dir": shown, "files": files}));
    } else {
        for l in &found {
            let pid = l
                .creator
                .map_or_else(|| "?".to_string(), |c| c.pid.to_string());
            println!(
                "{:<10} pid {:>7}  {}  {}{}",
                state_name(l.state),
                pid,
                l.what,
                l.path.display(),
                if l.removed { "  (removed)" } else { "" }
            );
        }
        let removed = found.iter().filter(|l| l.removed).count();
        let stale = found.iter().filter(|l| l.state == State::Stale).count();
        if clean {
            println!(
                "{} files in {}, {removed} stale removed",
                found.len(),
                shown
            );
        } else {
            println!(
                "{} files in {}, {stale} stale (remove them with mdbus-stat clean)",
                found.len(),
                shown
            );
        }
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli: Cli = mdbus_tool_support::version::parse();
    mdbus_tool_support::logging::init("mdbus-stat", false);
    match &cli.command {
        Some(Command::List(a)) => return leftovers(a, false),
        Some(Command::Clean(a)) => return leftovers(a, true),
        None => {}
    }
    let reader = match CountersReader::open(&cli.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mdbus-stat: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let owner = reader.owner();
    let samples = if cli.once { Some(1) } else { cli.count };
    let mut prev: Option<(Instant, Vec<u64>)> = None;
    let mut n = 0u64;
    loop {
        let now = Instant::now();
        let values = reader.values();
        let uptime = mdbus::clock::now_ns().saturating_sub(owner.start_time_ns) as f64 / 1e9;
        let rates: Option<Vec<f64>> = prev.as_ref().map(|(t, old)| {
            let secs = now.duration_since(*t).as_secs_f64().max(1e-9);
            values
                .iter()
                .zip(old)
                .map(|(v, o)| v.saturating_sub(*o) as f64 / secs)
                .collect()
        });
        if cli.json {
            let counters: serde_json::Map<String, serde_json::Value> = reader
                .labels()
                .into_iter()
                .zip(&values)
                .map(|(l, v)| (l, serde_json::json!(v)))
                .collect();
            let mut obj = serde_json::json!({
                "file": cli.file.display().to_string(),
                "owner": owner.name,
                "pid": owner.pid,
                "uptime_s": uptime,
                "counters": counters,
            });
            if let Some(r) = &rates {
                let rates: serde_json::Map<String, serde_json::Value> = reader
                    .labels()
                    .into_iter()
                    .zip(r)
                    .map(|(l, v)| (l, serde_json::json!(v)))
                    .collect();
                obj["rates"] = serde_json::Value::Object(rates);
            }
            println!("{obj}");
        } else {
            println!(
                "{} — {} (pid {}), up {:.1} s",
                cli.file.display(),
                owner.name,
                owner.pid,
                uptime
            );
            let width = reader.labels().iter().map(String::len).max().unwrap_or(0);
            for (i, (label, v)) in reader.labels().iter().zip(&values).enumerate() {
                match &rates {
                    Some(r) => println!("  {label:<width$} {v:>16} {:>14.1}/s", r[i]),
                    None => println!("  {label:<width$} {v:>16}"),
                }
            }
            println!();
        }
        n += 1;
        if samples.is_some_and(|s| n >= s) {
            return ExitCode::SUCCESS;
        }
        prev = Some((now, values));
        std::thread::sleep(cli.interval);
        if !reader.owner_alive() {
            eprintln!(
                "mdbus-stat: {} (pid {}) has exited; {} is stale now",
                owner.name,
                owner.pid,
                cli.file.display()
            );
            return ExitCode::SUCCESS;
        }
    }
}
