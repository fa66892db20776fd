//! mdbus-perf: round-trip latency and one-way throughput of an mdbus
//! transport between two processes, and one-way latency and loss recovery
//! of a multicast stream.
//!
//! ```text
//! mdbus-perf pingpong   -s 32 -n 1000000 --json            # shm
//! mdbus-perf pingpong   -d rxe0 -x 1 -s 32 -n 1000         # verbs, as ib_send_lat
//! mdbus-perf pingpong   --transport tcp -a -n 1000 --json  # every size
//! mdbus-perf throughput -s 64 -n 10000000 --json
//! mdbus-perf throughput --transport udp -D 5s --report_gbits --json
//! mdbus-perf throughput -d rxe0 -s 64 --signal-every 1 --json
//! mdbus-perf mcast      -n 100000 --loss 5 --json
//! mdbus-perf mcast      --transport verbs -d rxe0 --recv-device rxe1 --json
//! ```
//!
//! The flags perftest users type by habit mean what they mean there: `-d`
//! device (and, without `--transport`, verbs), `-x` GID index, `-s` size,
//! `-n` messages (`--iters`, `--count`), `-a` every size, `-D` duration,
//! `--report_gbits`. Latency is reported as the round trip and its half.
//!
//! Each command runs both sides itself, as two processes pinned to two
//! cores (it starts the second by re-executing its own binary with
//! `--role`), or one side only when `--role` is given, for a run across two
//! terminals or two hosts.
//!
//! | module | what it holds |
//! |---|---|
//! | [`pingpong`], [`throughput`], [`mcast`] | the three commands |
//! | [`fanout`], [`latejoin`] | the simulated fan-out, and a late joiner replayed from the archive |
//! | [`flow`] | what throughput and mcast share: the two sides, the payload counter, pacing, serving a stream after its end, the subscriber loop, the loss exit status |
//! | [`common`] | the options every command shares (perftest's -d, -x, -s, -n, -a, -D among them), failures, the watchdog and Ctrl-C, the cores line |
//! | [`report`] | the one JSON object of a run (a sweep's `results`), bandwidth units, ib_send_lat's latency columns |
//! | [`args`] | parsers of the shared options |
//! | [`transport`] | which transports this build measures, and the bus of a run |
//! | [`ip`], [`verbs`] | addresses and devices of the UDP/TCP and RDMA runs |
//! | [`netns`] | network namespaces and loss for `mcast --loss` |
//! | [`side`] | this process's side of a run: port, channel name, core, death with the parent |
//! | [`peer`] | the second process of a run (on `mdbus_tool_support::process`) |

pub mod args;
pub mod common;
pub mod fanout;
pub mod flow;
pub mod ip;
pub mod latejoin;
pub mod mcast;
pub mod netns;
pub mod peer;
pub mod pingpong;
pub mod report;
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
RDMA port: -d/--device names it (and selects verbs); without one the run is refused in one \
line. auto takes verbs when an RDMA port is active, else shm (udp for mcast).\n\nperftest's \
flags: -d device, -x GID index, -s size, -n messages (--iters, --count), -a every size from \
2 bytes to 1 MiB, -D duration, --report_gbits. With --json every run prints one object \
(docs/JSON.md); a sweep (-a) puts one result per size in its `results` array. A side run \
alone with --role pong or pub prints its own, with \"role\" and what it echoed or sent.",
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
    /// the round trip into a histogram and prints it and its half.
    ///
    /// Each round trip is timed with the monotonic clock read just before
    /// the send and just after the echo arrives (a read costs about 20 ns,
    /// included once in every sample), recorded into an HdrHistogram at
    /// three significant digits. Both sides busy-poll. On tcp the round
    /// trip is one TCP session; on verbs one RC session (rdma_cm at the
    /// device's address); on udp, two UDP multicast streams (one each
    /// way), whose publishers answer retransmit requests while their side
    /// waits. The table gives ib_send_lat's columns in microseconds for
    /// the half round trip (half-RTT, what ib_send_lat reports) and the
    /// round trip (RTT). With --json the output is one object: {"schema",
    /// "tool", "mode", "transport", "channel", "size_bytes",
    /// "round_trips", "warmup_round_trips", "seconds", "rtt_ns",
    /// "half_rtt_ns"}, each *_ns a latency object {"count", "min", "p50",
    /// "p90", "p99", "p999", "p9999", "max", "mean", "stddev"}; with -a
    /// the fields from "size_bytes" on are in one "results" entry per
    /// size.
    #[command(after_help = EXIT_CODES_HELP)]
    Pingpong(pingpong::Args),
    /// One-way throughput: a sender sends -n messages (or for -D), a
    /// receiver counts what arrives and what was lost. A stream on shm and
    /// udp, a session on tcp and verbs (RC, selectively signaled sends:
    /// --signal-every).
    ///
    /// The receiver times from its first message to its last. A stream
    /// never waits for its subscribers: on shm a subscriber that falls
    /// more than --capacity messages behind is overrun, on udp datagrams
    /// its socket or the network dropped are fetched again while the
    /// publisher retains them; what it still missed is reported as lost.
    /// A session loses nothing: its sender waits. With --json the output
    /// is one object: {"schema", "tool", "mode", "transport", "channel",
    /// "size_bytes", "sent", "received", "lost", "recovered",
    /// "before_join", "seconds", "msgs_per_sec", "mb_per_sec" (or
    /// "gbits_per_sec" with --report_gbits)}, where sent = received +
    /// lost + before_join (messages published before a --role sub attached)
    /// and recovered counts messages that arrived by retransmission
    /// (udp); with -a the fields from "size_bytes" on are in one "results"
    /// entry per size. A run that lost messages exits with status 3
    /// unless --allow-loss.
    #[command(after_help = EXIT_CODES_HELP)]
    Throughput(throughput::Args),
    /// One-way latency and loss recovery of a multicast stream: a
    /// publisher sends -n stamped messages (or for -D) at --rate, a
    /// subscriber measures each message's latency and counts what was
    /// recovered and what was lost.
    ///
    /// Latency is the subscriber's CLOCK_REALTIME at delivery minus the
    /// send time the message carries, recorded into an HdrHistogram. With
    /// --loss the two sides run in two network namespaces joined by a
    /// bridge that loses PCT% of what the subscriber's host receives. With
    /// --json the output is one object: {"schema", "tool", "mode",
    /// "transport", "target_msgs_per_sec", "size_bytes", "sent",
    /// "received", "lost", "recovered", "seconds", "msgs_per_sec",
    /// "mb_per_sec" (or "gbits_per_sec"), "latency_ns" (a latency object),
    /// "loss": null or {"pct", "by", "dropped"}}, where sent = received +
    /// lost, lost counts messages reported in unrecoverable gaps,
    /// recovered those that arrived by retransmission, and dropped the
    /// packets the impairment dropped; with -a the fields from
    /// "size_bytes" on are in one "results" entry per size. A run that
    /// lost messages exits with status 3 unless --allow-loss.
    #[command(after_help = EXIT_CODES_HELP)]
    Mcast(mcast::Args),
    /// Loss recovery as one stream fans out to many subscribers, in a
    /// deterministic simulation (--simulate): the real publisher and
    /// subscriber protocol cores on a modelled network with loss upstream
    /// of every subscriber (--correlated share, in --burst runs) and loss
    /// per subscriber, NAK suppression (--nak-backoff) and repairs to the
    /// group (--repair). With --transport udp instead, over real UDP
    /// multicast (root): a subscriber process per network namespace on one
    /// bridge, nftables dropping upstream of all of them and on the way to
    /// each; it adds "transport", "pace_datagrams_per_s", "repairs",
    /// "repairs_per_loss_event", "requesters_throttled",
    /// "throttled_notices" and "latency_ns" (every message's delivery time)
    /// to the keys below.
    ///
    /// Reports, per loss event (an upstream drop, or one subscriber's own
    /// drop of a datagram), the requests the subscribers sent and the
    /// datagrams the publisher sent again, and the recovery time of every
    /// lost message. With --json the output is one object: {"schema",
    /// "tool", "mode", "simulated", "subscribers", "messages", "loss_pct",
    /// "correlated", "burst", "seed", "repair", "nak_backoff_ns",
    /// "datagrams", "loss_events", "upstream_loss_events",
    /// "independent_loss_events", "requests", "retransmitted_datagrams",
    /// "group_repair_datagrams", "requests_per_loss_event",
    /// "retransmits_per_loss_event", "lingered_messages",
    /// "suppressed_messages", "recovery_ns", "recovery_us" (latency
    /// objects), "delivered_all", "incomplete_subscribers", "lost"}. A run
    /// in which a subscriber missed a message exits with status 3 unless
    /// --allow-loss.
    #[command(after_help = EXIT_CODES_HELP)]
    Fanout(fanout::Args),
    /// Late join with the whole stream: a subscriber that joins at
    /// --join-at of --messages (published at --rate, recorded to an
    /// archive) and asks for everything from sequence 1 gets the archived
    /// range, then the live stream, exactly once and in order.
    ///
    /// With --json the output is one object: {"schema", "tool", "mode",
    /// "transport", "messages", "received", "duplicates", "gaps",
    /// "out_of_order", "catchup_ms" (from the join to the switch to the
    /// live stream), "merge_seq" (the first sequence delivered live; 0
    /// when the archive delivered everything), "join_seq", "replayed",
    /// "live_skipped", "rejoins", "rate_msgs_per_sec", "size_bytes",
    /// "archive_bytes", "recorder_lost"}. A run in which anything was lost, duplicated or
    /// out of order exits with status 3 unless --allow-loss.
    #[command(after_help = EXIT_CODES_HELP)]
    Latejoin(latejoin::Args),
}

/// The program: parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli: Cli = mdbus_tool_support::version::parse();
    cli.log.init("mdbus-perf");
    let common = match &cli.command {
        Command::Fanout(args) => return fanout::main(args),
        Command::Latejoin(args) => return latejoin::main(args),
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
        Command::Fanout(args) => return fanout::main(args),
        Command::Latejoin(args) => return latejoin::main(args),
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

#[cfg(test)]
mod tests {
    use super::*;
    use mdbus::TransportKind;

    /// The mdbus-perf command lines of scripts/rdma-guest/run-tests's
    /// `perf_check` lines, as that function runs them (with --json).
    fn guest_lines() -> Vec<Vec<String>> {
        let script = include_str!("../../../scripts/rdma-guest/run-tests");
        script
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("perf_check "))
            .map(|l| {
                let mut argv = vec!["mdbus-perf".to_string()];
                // perf_check NAME ARGS...
                argv.extend(l.split_whitespace().skip(2).map(String::from));
                argv.push("--json".into());
                argv
            })
            .collect()
    }

    #[test]
    fn the_guest_lanes_perftest_lines_parse_as_meant() {
        let lines = guest_lines();
        assert_eq!(lines.len(), 4, "{lines:?}");
        let joined: Vec<String> = lines.iter().map(|l| l.join(" ")).collect();
        assert!(
            joined.contains(&"mdbus-perf pingpong -d rxe0 -x 1 -s 32 -n 1000 --json".to_string()),
            "the perftest-style acceptance line is not run: {joined:?}"
        );
        for argv in &lines {
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let (mut common, load) = match cli.command {
                Command::Pingpong(a) => (a.common, a.load),
                Command::Throughput(a) => (a.common, a.load),
                Command::Mcast(a) => (a.common, a.load),
                Command::Latejoin(a) => {
                    // Issue 18's check on verbs: publisher on rxe0, the
                    // recorder and the late subscriber on rxe1.
                    assert_eq!(a.transport_arg, Some(TransportKind::Verbs), "{argv:?}");
                    assert_eq!(a.device.as_deref(), Some("rxe0"), "{argv:?}");
                    assert_eq!(a.recv_device.as_deref(), Some("rxe1"), "{argv:?}");
                    assert!(a.json && a.join_at == 0.8, "{argv:?}");
                    continue;
                }
                Command::Fanout(_) => panic!("a guest line runs fanout: {argv:?}"),
            };
            crate::transport::resolve(&mut common, TransportKind::Shm).unwrap();
            assert_eq!(common.transport, TransportKind::Verbs, "{argv:?}");
            assert_eq!(common.device.as_deref(), Some("rxe0"), "{argv:?}");
            assert!(common.json, "{argv:?}");
            assert!(load.iters.is_some() && load.duration.is_none(), "{argv:?}");
            assert!(!load.all, "{argv:?}");
        }
        let cli = Cli::try_parse_from(&lines[0]).unwrap();
        let Command::Pingpong(a) = cli.command else {
            panic!("the first line is pingpong: {:?}", lines[0]);
        };
        assert_eq!(
            (a.common.gid_index, a.load.size, a.load.iters),
            (Some(1), Some(32), Some(1000))
        );
        assert_eq!(a.role, None);
        let cli = Cli::try_parse_from(&lines[2]).unwrap();
        let Command::Mcast(a) = cli.command else {
            panic!("the third line is mcast: {:?}", lines[2]);
        };
        assert_eq!(a.common.recv_device.as_deref(), Some("rxe1"));
        assert_eq!(a.load.iters, Some(2000));
    }

    #[test]
    fn short_flags_are_perftests_and_clash_with_nothing() {
        // clap's own check of every command: two options with one short
        // flag (or one name) fail it.
        <Cli as clap::CommandFactory>::command().debug_assert();
        for mode in ["pingpong", "throughput", "mcast"] {
            let cli = Cli::try_parse_from([
                "mdbus-perf",
                mode,
                "-d",
                "mlx5_0",
                "-x",
                "3",
                "-s",
                "4096",
                "-n",
                "5",
                "-v",
            ])
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(cli.log.verbose, "{mode}");
            let cli = Cli::try_parse_from(["mdbus-perf", mode, "-a", "-D", "2s"])
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            let load = match cli.command {
                Command::Pingpong(a) => a.load,
                Command::Throughput(a) => a.load,
                Command::Mcast(a) => a.load,
                Command::Fanout(_) | Command::Latejoin(_) => panic!("{mode} parsed as {mode}?"),
            };
            assert!(load.all && load.duration == Some(std::time::Duration::from_secs(2)));
        }
        for mode in ["throughput", "mcast"] {
            assert!(Cli::try_parse_from(["mdbus-perf", mode, "--report_gbits"]).is_ok());
            assert!(Cli::try_parse_from(["mdbus-perf", mode, "--report-gbits"]).is_ok());
        }
        // Latency has no bandwidth to report.
        assert!(Cli::try_parse_from(["mdbus-perf", "pingpong", "--report_gbits"]).is_err());
    }
}
