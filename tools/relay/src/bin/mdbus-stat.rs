//! mdbus-stat: prints the counters of a running mdbus process (such as
//! `mdbus-relay`) from its counters file, with rates per second.
//!
//! ```text
//! mdbus-stat                                   # /dev/shm/mdbus-relay.counters, every second
//! mdbus-stat /dev/shm/feed.counters --interval 5s
//! mdbus-stat --once --json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use mdbus::counters::CountersReader;
use mdbus_tool_support::duration::parse_nonzero;

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
that is not a counters file, or one whose owner has exited (stale) is an error.",
    after_help = "Exit status: 0 on success, or when the owner exits while being watched; 1 \
when the file is missing, not a counters file, or stale; 2 for a usage error."
)]
struct Cli {
    /// The counters file (mdbus-relay: `counters.path` in its configuration).
    #[arg(default_value = "/dev/shm/mdbus-relay.counters")]
    file: PathBuf,

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let reader = match CountersReader::open(&cli.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mdbus-stat: {e}");
            return ExitCode::from(1);
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
