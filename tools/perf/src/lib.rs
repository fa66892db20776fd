//! mdbus-perf: round-trip latency and one-way throughput of an mdbus
//! transport between two processes, and one-way latency and loss recovery
//! of a multicast stream.
//!
//! ```text
//! mdbus-perf pingpong   --transport shm --size 32 --iters 1000000 --json
//! mdbus-perf pingpong   --transport tcp --json
//! mdbus-perf throughput --transport shm --size 64 --count 10000000 --json
//! mdbus-perf throughput --transport udp --json
//! mdbus-perf mcast      --transport udp --count 100000 --json
//! mdbus-perf mcast      --transport udp --count 100000 --loss 5 --json
//! mdbus-perf pingpong   --transport verbs --device rxe0 --gid-index 1 --size 32 --json
//! mdbus-perf throughput --transport verbs --device rxe0 --size 64 --signal-every 1 --json
//! mdbus-perf mcast      --transport verbs --device rxe0 --recv-device rxe1 --json
//! ```
//!
//! Each command runs both sides itself, as two processes pinned to two
//! cores (it starts the second by re-executing its own binary with
//! `--role`), or one side only when `--role` is given, for a run across two
//! terminals or two hosts.
//!
//! | module | what it holds |
//! |---|---|
//! | [`pingpong`], [`throughput`], [`mcast`] | the three commands |
//! | [`flow`] | what throughput and mcast share: the two sides, the payload counter, pacing, serving a stream after its end, the subscriber loop, the loss exit status |
//! | [`common`] | the options every command shares, failures, the watchdog and Ctrl-C, the report lines all three print (cores, percentiles) |
//! | [`args`] | parsers of the shared options |
//! | [`transport`] | which transports this build measures, and the bus of a run |
//! | [`ip`], [`verbs`] | addresses and devices of the UDP/TCP and RDMA runs |
//! | [`netns`] | network namespaces and loss for `mcast --loss` |
//! | [`side`] | this process's side of a run: port, channel name, core, death with the parent |
//! | [`peer`] | the second process of a run (on `mdbus_tool_support::process`) |

pub mod args;
pub mod common;
pub mod flow;
pub mod ip;
pub mod mcast;
pub mod netns;
pub mod peer;
pub mod pingpong;
pub mod side;
pub mod throughput;
pub mod transport;
pub mod verbs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mdbus_tool_support::output::EXIT_CODES_HELP;

/// Measure an mdbus transport between two processes.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-perf",
    version,
    about = "Measure mdbus round-trip latency and throughput between two processes",
    long_about = "Measure mdbus round-trip latency and one-way throughput between two \
processes, and one-way latency and loss recovery of a multicast stream.\n\nEach command \
runs both sides itself: this process plays one side and starts the other by running this \
binary again with --role, each pinned to its own core. With --role, only that side runs, so \
the two sides can be started in two terminals (or, for the IP transport, on two hosts) with \
the same --name and addresses.\n\nTransports: shm (shared memory, one host), udp (streams on \
UDP multicast with loss recovery), tcp (sessions on TCP). On udp and tcp the defaults run on \
the loopback of one host. verbs (RDMA: RC sessions, UD multicast streams) needs an active \
RDMA port: --device names it; without one the run is refused in one line.",
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
    /// Round-trip time: ping sends a message, pong echoes it, ping times
    /// the round trip into a histogram and prints its percentiles.
    ///
    /// Each round trip is timed with the monotonic clock read just before
    /// the send and just after the echo arrives (a read costs about 20 ns,
    /// included once in every sample), recorded into an HdrHistogram at
    /// three significant digits. Both sides busy-poll. On tcp the round
    /// trip is one TCP session; on verbs one RC session (rdma_cm at the
    /// device's address); on udp, two UDP multicast streams (one each
    /// way), whose publishers answer retransmit requests while their side
    /// waits. With --json the output is one object:
    /// {"transport", "channel", "size", "iters", "warmup",
    ///  "rtt_ns": {"p50", "p90", "p99", "p999", "max"}}.
    #[command(after_help = EXIT_CODES_HELP)]
    Pingpong(pingpong::Args),
    /// One-way throughput: a sender sends --count messages, a receiver
    /// counts what arrives and what was lost. A stream on shm and udp, a
    /// session on tcp and verbs (RC, selectively signaled sends:
    /// --signal-every).
    ///
    /// The receiver times from its first message to its last. A stream
    /// never waits for its subscribers: on shm a subscriber that falls
    /// more than --capacity messages behind is overrun, on udp datagrams
    /// its socket or the network dropped are fetched again while the
    /// publisher retains them; what it still missed is reported as lost.
    /// A session loses nothing: its sender waits. With --json the output
    /// is one object: {"transport", "channel", "size", "sent", "received",
    /// "lost", "recovered", "before_join", "msgs_per_sec", "mb_per_sec"},
    /// where sent = received + lost + before_join (messages published
    /// before a --role sub attached) and recovered counts messages that
    /// arrived by retransmission (udp). A run that lost messages exits
    /// with status 3 unless --allow-loss.
    #[command(after_help = EXIT_CODES_HELP)]
    Throughput(throughput::Args),
    /// One-way latency and loss recovery of a multicast stream: a
    /// publisher sends --count stamped messages at --rate, a subscriber
    /// measures each message's latency and counts what was recovered and
    /// what was lost.
    ///
    /// Latency is the subscriber's CLOCK_REALTIME at delivery minus the
    /// send time the message carries, recorded into an HdrHistogram. With
    /// --loss the two sides run in two network namespaces joined by a
    /// bridge that loses PCT% of what the subscriber's host receives. With
    /// --json the output is one object: {"transport", "size", "rate",
    /// "sent", "received", "lost", "recovered", "msgs_per_sec",
    /// "latency_ns": {"p50", "p90", "p99", "p999", "max"}, "loss": null or
    /// {"pct", "by", "dropped"}}, where sent = received + lost, lost counts
    /// messages reported in unrecoverable gaps, recovered those that
    /// arrived by retransmission, and dropped the packets the impairment
    /// dropped. A run that lost messages exits with status 3 unless
    /// --allow-loss.
    #[command(after_help = EXIT_CODES_HELP)]
    Mcast(mcast::Args),
}

/// The program: parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli: Cli = mdbus_tool_support::version::parse();
    cli.log.init("mdbus-perf");
    let common = match &cli.command {
        Command::Pingpong(a) => &a.common,
        Command::Throughput(a) => &a.common,
        Command::Mcast(a) => &a.common,
    };
    let (path, load) = (
        common.config.as_deref(),
        mdbus_tool_support::config::load_bus,
    );
    let defaults: fn() -> mdbus::Config = Default::default;
    if let Some(code) = common
        .config_flags
        .handle("mdbus-perf", path, load, Some(defaults))
    {
        return code;
    }
    let (role, result) = match &cli.command {
        Command::Pingpong(args) => (args.role_name(), pingpong::run(args).map(|()| 0)),
        Command::Throughput(args) => (args.role_name(), throughput::run(args)),
        Command::Mcast(args) => (args.role_name(), mcast::run(args)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            match role {
                Some(role) => eprintln!("mdbus-perf ({role}): {e}"),
                None => eprintln!("mdbus-perf: {e}"),
            }
            ExitCode::from(e.exit_code())
        }
    }
}
