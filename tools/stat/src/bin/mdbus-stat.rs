//! mdbus-stat: every mdbus bus on a host, its counters, error log and RDMA
//! port counters (in the spirit of Aeron's AeronStat and ErrorStat).
//!
//! ```text
//! mdbus-stat                                   # every bus in /dev/shm/mdbus, once
//! mdbus-stat --watch 1s --filter 'sub\.md'     # refresh in place, only matching counters
//! mdbus-stat /dev/shm/mdbus-relay.counters     # one file (mdbus-relay's own counters)
//! mdbus-stat --errors                          # the error logs, stale files included
//! mdbus-stat --openmetrics                     # Prometheus/OpenMetrics text
//! mdbus-stat --listen 0.0.0.0:9464             # ... served at GET /metrics
//! mdbus-stat list                              # buses and leftovers: pid, name, alive/stale
//! mdbus-stat clean                             # remove the stale ones
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mdbus::leftovers::State;
use mdbus_stat::snapshot::{self, Bus, Sampler};
use mdbus_stat::sysfs::{self, Port};
use mdbus_stat::{metrics, render, DEFAULT_DIR};
use mdbus_tool_support::duration::parse_nonzero;
use mdbus_tool_support::output::{json_object, EXIT_CODES_HELP, EXIT_FAILED, EXIT_USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "mdbus-stat",
    version,
    about = "Show every mdbus bus on this host: counters, error log, RDMA port counters",
    long_about = "Show every mdbus bus on this host. Each bus (a library user or a tool) keeps its \
counters and an error log in a small shared-memory file in the counters directory (default \
/dev/shm/mdbus, `[counters] dir`), updated with atomic stores and read here without locks. \
Without FILE, every bus of the directory whose process runs is shown; FILE names counters files \
(such as mdbus-relay's own, /dev/shm/mdbus-relay.counters). Rates per second are shown for \
counters, never for gauges. The RDMA ports the buses use (and those named with --device) are \
read from sysfs, the kernel's drops at the buses' UDP sockets from /proc. A named FILE that is \
missing, not a counters file, or whose owner has exited (stale) is an error (exit status 1), except with --errors, which reads stale files too.",
    after_help = EXIT_CODES_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Counters files to show (default: every bus in --dir).
    files: Vec<PathBuf>,

    #[command(subcommand)]
    command: Option<Command>,

    /// The counters directory.
    #[arg(long, default_value = DEFAULT_DIR)]
    dir: PathBuf,

    /// Refresh every INTERVAL (default 1s) in place, with a timestamp,
    /// until interrupted.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1s", value_parser = parse_nonzero)]
    watch: Option<Duration>,

    /// With --watch: print each sample below the last instead of clearing
    /// the screen (for logs).
    #[arg(long)]
    no_clear: bool,

    /// With --watch: stop after N samples.
    #[arg(long, value_name = "N")]
    count: Option<u64>,

    /// Only counters whose bus name or label matches this regular
    /// expression (a plain substring is one).
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,

    /// Print the error logs (each distinct error with count, first and
    /// last time), of stale files too.
    #[arg(long)]
    errors: bool,

    /// One JSON object (see docs/JSON.md); with --watch, one per line.
    #[arg(long, conflicts_with = "openmetrics")]
    json: bool,

    /// Print the OpenMetrics text format (stable names: see
    /// docs/OPERATIONS.md).
    #[arg(long)]
    openmetrics: bool,

    /// Serve the OpenMetrics text at http://ADDR/metrics until
    /// interrupted (e.g. 0.0.0.0:9464).
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["watch", "json", "errors"])]
    listen: Option<String>,

    /// Also read the counters of these RDMA ports (DEVICE or DEVICE/PORT).
    #[arg(long, value_name = "DEV[/PORT]", value_parser = sysfs::parse_device)]
    device: Vec<(String, u8)>,

    /// Root of the sysfs tree the RDMA counters are read from.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,

    /// Root of the procfs tree the buses' UDP socket figures (kernel
    /// drops, receive queue) are read from.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    proc_root: PathBuf,

    /// Accepted for compatibility: one sample is the default.
    #[arg(long, hide = true)]
    once: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the buses (counters files) and the shared-memory segments and
    /// temporary files mdbus processes left, with each creator's pid and
    /// name, whether it still runs (alive, stale, unreadable) and a bus's
    /// last update.
    #[command(after_help = EXIT_CODES_HELP)]
    List(DirArgs),
    /// Remove the stale ones: files of this user, private (0600), whose
    /// creator no longer runs. Files of live processes, of other users,
    /// with damaged headers or unknown formats are left alone.
    #[command(after_help = EXIT_CODES_HELP)]
    Clean(DirArgs),
    /// Check this host's readiness for the configured devices and cores
    /// (the same as mdbus-doctor): each item pass, warn or fail, with
    /// what was read and the command that fixes it. Reads sysfs and procfs
    /// only; changes nothing. Exit status 1 when an item failed.
    #[command(after_help = EXIT_CODES_HELP)]
    Doctor(mdbus_doctor::Args),
}

#[derive(Debug, clap::Args)]
struct DirArgs {
    /// The directories (default: the counters directory /dev/shm/mdbus
    /// and /dev/shm, where segments live).
    #[arg(conflicts_with = "config")]
    dirs: Vec<PathBuf>,

    /// Take the directories from a relay configuration instead: its
    /// `bus.shm.dir`, `bus.counters.dir` and the directory of its
    /// `counters.path`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// One JSON object: {"schema", "tool", "dirs", "files": [{"path",
    /// "what", "pid", "state", "removed", "name", "updated_ns"}]}.
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
        None if args.dirs.is_empty() => vec![PathBuf::from(DEFAULT_DIR), PathBuf::from("/dev/shm")],
        None => args.dirs.clone(),
        Some(path) => match mdbus_relay::RelayConfig::from_file(path) {
            Ok(c) => {
                let mut d = vec![c.bus.shm.dir.clone(), c.bus.counters.dir.clone()];
                if let Some(p) = c.counters.path.parent() {
                    if !p.as_os_str().is_empty() {
                        d.push(p.to_path_buf());
                    }
                }
                d.dedup();
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
        if !dir.exists() && args.dirs.is_empty() {
            // A default directory no bus created yet: nothing there.
            continue;
        }
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
    // The owner name and last update of counters files still there.
    let mut sampler = Sampler::new();
    let bus_of =
        |path: &PathBuf, sampler: &mut Sampler| -> Option<Bus> { sampler.sample(path).ok() };
    let details: Vec<Option<Bus>> = found
        .iter()
        .map(|l| {
            (l.what == mdbus::counters::FORMAT.what && !l.removed)
                .then(|| bus_of(&l.path, &mut sampler))
                .flatten()
        })
        .collect();
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    if args.json {
        let files: Vec<serde_json::Value> = found
            .iter()
            .zip(&details)
            .map(|(l, b)| {
                serde_json::json!({
                    "path": l.path.display().to_string(),
                    "what": l.what,
                    "pid": l.creator.map(|c| c.pid),
                    "state": state_name(l.state),
                    "removed": l.removed,
                    "name": b.as_ref().map(|b| b.name.clone()),
                    "updated_ns": b.as_ref().map(|b| b.updated_ns),
                })
            })
            .collect();
        let mut o = json_object(render::TOOL);
        o.insert("dirs".into(), shown.into());
        o.insert("files".into(), files.into());
        println!("{}", serde_json::Value::Object(o));
        return ExitCode::SUCCESS;
    }
    let now = mdbus::clock::now_ns();
    for (l, b) in found.iter().zip(&details) {
        let pid = l
            .creator
            .map_or_else(|| "?".to_string(), |c| c.pid.to_string());
        let bus = match b {
            Some(b) => format!(
                "  {} (updated {})",
                b.name,
                if b.updated_ns == 0 {
                    "never".to_string()
                } else {
                    format!("{:.1} s ago", now.saturating_sub(b.updated_ns) as f64 / 1e9)
                }
            ),
            None => String::new(),
        };
        println!(
            "{:<10} pid {:>7}  {}{bus}  {}{}",
            state_name(l.state),
            pid,
            l.what,
            l.path.display(),
            if l.removed { "  (removed)" } else { "" }
        );
    }
    let removed = found.iter().filter(|l| l.removed).count();
    let stale = found.iter().filter(|l| l.state == State::Stale).count();
    let shown = shown.join(", ");
    if clean {
        println!("{} files in {shown}, {removed} stale removed", found.len());
    } else {
        println!(
            "{} files in {shown}, {stale} stale (remove them with mdbus-stat clean)",
            found.len()
        );
    }
    ExitCode::SUCCESS
}

/// What to read each sample.
struct Source {
    files: Vec<PathBuf>,
    dir: PathBuf,
    /// Files named on the command line must be live (unless --errors).
    named: bool,
    with_stale: bool,
    filter: Option<regex::Regex>,
    devices: Vec<(String, u8)>,
    sysfs_root: PathBuf,
    proc_root: PathBuf,
}

impl Source {
    /// One sample: the buses (filtered) and the RDMA ports.
    fn sample(&self, sampler: &mut Sampler) -> Result<(Vec<Bus>, Vec<Port>), String> {
        let paths = if self.named {
            self.files.clone()
        } else {
            snapshot::counters_files(std::slice::from_ref(&self.dir))
        };
        sampler.retain(&paths);
        let mut buses = Vec::new();
        for p in &paths {
            match sampler.sample(p) {
                Ok(b) if b.alive || self.with_stale => buses.push(b),
                Ok(b) if self.named => {
                    return Err(format!(
                        "counters file {} is stale: its owner {} (pid {}) is no longer running",
                        p.display(),
                        b.name,
                        b.pid
                    ))
                }
                Ok(_) => {}
                Err(e) if self.named => return Err(e.to_string()),
                // A file of the directory that vanished meanwhile, or is
                // damaged: `list` names it; the view goes on without it.
                Err(_) => {}
            }
        }
        for b in &mut buses {
            b.read_udp(&self.proc_root);
        }
        let mut ports = snapshot::ports_in_use(&buses);
        for d in &self.devices {
            if !ports.contains(d) {
                ports.push(d.clone());
            }
        }
        let mut read = Vec::new();
        for (dev, port) in &ports {
            match sysfs::read_port(&self.sysfs_root, dev, *port) {
                Ok(p) => read.push(p),
                Err(e) => eprintln!("mdbus-stat: {e}"),
            }
        }
        if let Some(f) = &self.filter {
            for b in &mut buses {
                if !f.is_match(&b.name) {
                    b.counters.retain(|c| f.is_match(&c.label));
                }
            }
            buses.retain(|b| f.is_match(&b.name) || !b.counters.is_empty());
        }
        Ok((buses, read))
    }
}

/// `--listen`: serves GET /metrics until the process is stopped.
fn serve(addr: &str, source: &Source) -> ExitCode {
    let server = match tiny_http::Server::http(addr) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mdbus-stat: cannot listen on {addr}: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match server.server_addr().to_ip() {
        Some(a) => eprintln!("mdbus-stat: serving OpenMetrics at http://{a}/metrics"),
        None => eprintln!("mdbus-stat: serving OpenMetrics on {addr}"),
    }
    let mut sampler = Sampler::new();
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let response = if *request.method() != tiny_http::Method::Get || path != "/metrics" {
            tiny_http::Response::from_string("only GET /metrics is served here\n")
                .with_status_code(404)
        } else {
            match source.sample(&mut sampler) {
                Ok((buses, ports)) => {
                    let header = tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                    )
                    .expect("a valid header");
                    tiny_http::Response::from_string(metrics::openmetrics(&buses, &ports))
                        .with_header(header)
                }
                Err(e) => tiny_http::Response::from_string(format!("{e}\n")).with_status_code(500),
            }
        };
        // A scraper that hung up gets nothing more; the next one is served.
        let _ = request.respond(response);
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli: Cli = mdbus_tool_support::version::parse();
    mdbus_tool_support::logging::init("mdbus-stat", false);
    match &cli.command {
        Some(Command::List(a)) => return leftovers(a, false),
        Some(Command::Clean(a)) => return leftovers(a, true),
        Some(Command::Doctor(a)) => return ExitCode::from(a.run()),
        None => {}
    }
    let filter = match cli.filter.as_deref().map(regex::Regex::new).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mdbus-stat: --filter: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let source = Source {
        named: !cli.files.is_empty(),
        files: cli.files.clone(),
        dir: cli.dir.clone(),
        with_stale: cli.errors,
        filter,
        devices: cli.device.clone(),
        sysfs_root: cli.sysfs_root.clone(),
        proc_root: cli.proc_root.clone(),
    };
    if let Some(addr) = &cli.listen {
        return serve(addr, &source);
    }
    let mut sampler = Sampler::new();
    let clear = cli.watch.is_some() && !cli.no_clear && !cli.json && !cli.openmetrics;
    let mut n = 0u64;
    loop {
        let (buses, ports) = match source.sample(&mut sampler) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("mdbus-stat: {e}");
                return ExitCode::from(EXIT_FAILED);
            }
        };
        let now = mdbus::clock::now_ns();
        let text = if cli.errors {
            if cli.json {
                format!("{}\n", render::errors_json(&buses))
            } else {
                render::errors_text(&buses)
            }
        } else if cli.openmetrics {
            metrics::openmetrics(&buses, &ports)
        } else if cli.json {
            format!("{}\n", render::json(&buses, &ports, now))
        } else {
            render::text(&buses, &ports, now)
        };
        let mut out = std::io::stdout().lock();
        let written = if clear {
            write!(out, "\x1b[H\x1b[2J{text}")
        } else {
            write!(out, "{text}")
        }
        .and_then(|()| out.flush());
        if written.is_err() {
            // The reader went away (a closed pipe): nothing left to do.
            return ExitCode::SUCCESS;
        }
        drop(out);
        n += 1;
        let Some(interval) = cli.watch else {
            return ExitCode::SUCCESS;
        };
        if cli.count.is_some_and(|c| n >= c) {
            return ExitCode::SUCCESS;
        }
        if !cli.json && !clear {
            println!();
        }
        std::thread::sleep(interval);
    }
}
