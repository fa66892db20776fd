//! Options and plumbing both commands share.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use mdbus::affinity::{self, Device, Placement};
use mdbus::wait::WaitStrategy;
use mdbus::TransportKind;
use mdbus_tool_support::process::{Peer, PeerError};
use mdbus_tool_support::signals;
use mdbus_tool_support::watchdog::{Watchdog, WatchdogError};

/// Options of every command.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Transport to measure: `shm` (shared memory between processes on one
    /// host), `udp` (streams on UDP multicast, with loss recovery), `tcp`
    /// (sessions on TCP) or `verbs` (RDMA: sessions on RC queue pairs,
    /// streams on UD multicast with loss recovery; refused in one line on a
    /// machine without an active RDMA port). `auto` is refused: a
    /// measurement names its transport.
    #[arg(long, default_value = "shm", value_parser = crate::args::parse_transport)]
    pub transport: TransportKind,

    /// Channel name, the same on both sides (1 to 64 characters from
    /// A-Z a-z 0-9 . _ -). Default: a name unique to this run when this
    /// process starts its own peer, "mdbus-perf" with --role.
    #[arg(long)]
    pub name: Option<String>,

    /// Cores to pin to, as a list such as "2,3" or "4-5": this process runs
    /// on the first, the peer it starts on the second. Default: cores of
    /// the NUMA node of --device, or the first two online cores; with
    /// --role, ping and sub take the first of those and pong and pub the
    /// second, so two sides started by hand do not share a core.
    #[arg(long, value_name = "LIST")]
    pub cores: Option<String>,

    /// RDMA or network device (e.g. mlx5_0, eth0) whose NUMA node's cores
    /// the default --cores come from. verbs: the RDMA device (rxe0,
    /// mlx5_0) to use; a session binds its IPv4 address (the IPv4-mapped
    /// GID at --gid-index, or the first one), and so does the publisher of
    /// mcast. Default: the first device with an active port.
    #[arg(long)]
    pub device: Option<String>,

    /// verbs: GID table index whose IPv4-mapped address the run binds
    /// (RoCE v2 with IPv4 is usually 1 or 3). Default: the first
    /// IPv4-mapped GID of the device's port.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(i32).range(0..))]
    pub gid_index: Option<i32>,

    /// verbs mcast: RDMA device of the subscriber (e.g. rxe1, with the
    /// publisher on --device rxe0). Default: the publisher's.
    #[arg(long, value_name = "DEVICE")]
    pub recv_device: Option<String>,

    /// verbs mcast: local IPv4 address the subscriber binds (selects its
    /// device), instead of --recv-device's.
    #[arg(long, value_name = "ADDR")]
    pub recv_interface: Option<Ipv4Addr>,

    /// verbs: never send inline (every message is read by the NIC from the
    /// registered send slot), for comparison with the default, which sends
    /// messages inline when they fit the queue pair's inline limit.
    #[arg(long)]
    pub no_inline: bool,

    /// verbs: inline limit in bytes asked for when the queue pair is
    /// created (the device may grant less). Default: the configuration's
    /// (64).
    #[arg(long, value_name = "BYTES")]
    pub max_inline: Option<u32>,

    /// verbs: ask for a send completion on every Nth send only; 1 signals
    /// every send. Default: the configuration's (16).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub signal_every: Option<u32>,

    /// verbs: receive buffers reposted per batch. Default: the
    /// configuration's (16).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub recv_batch: Option<u32>,

    /// What a polling loop does between empty polls: busy-spin (lowest
    /// latency, burns the core), spin-hint (a pause instruction per poll)
    /// or yield (gives the core to other threads).
    #[arg(long, default_value = "busy-spin", value_name = "STRATEGY")]
    pub wait: WaitStrategy,

    /// mdbus configuration file (TOML): the shared-memory settings
    /// (directory, prefix, huge pages, mlock), and the entry of this run's
    /// channel (`[streams.NAME]` or `[sessions.NAME]`: give --name) for
    /// what the run does not set itself, such as the group, interface,
    /// address, heartbeat and retransmit timing. The transport, sizes and
    /// capacity of the run, and --group, --interface and --address,
    /// override the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// --check and --print-config.
    #[command(flatten)]
    pub config_flags: mdbus_tool_support::config::ConfigFlags,

    /// Seconds to wait for the peer to appear, and the longest a running
    /// measurement may go without progress before it is abandoned.
    #[arg(long, default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,

    /// udp, verbs: multicast group and port of the stream, as
    /// 239.1.1.1:5000, or a group alone for the default port (a
    /// ping-pong's second stream uses the next port). Default: the
    /// stream's `group` in --config, else 239.255.77.1 with a free port
    /// when this process starts its peer, port 47100 with --role.
    #[arg(long, value_name = "GROUP:PORT", value_parser = crate::args::parse_group)]
    pub group: Option<SocketAddrV4>,

    /// udp: local IPv4 address of the interface that sends and joins the
    /// group. Default: the stream's `interface` in --config, else
    /// 127.0.0.1 (loopback, multicast time-to-live 0: the host only).
    /// verbs: the address the publisher (mcast) or the session binds,
    /// instead of --device's.
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<Ipv4Addr>,

    /// tcp, verbs: address the session's acceptor listens on and the other
    /// side connects to, as 10.0.0.1:7000. Default: the session's `address`
    /// in --config, else (tcp) 127.0.0.1 or (verbs) the IPv4 address of the
    /// device, with a free port when this process starts its peer, port
    /// 47100 with --role.
    #[arg(long, value_name = "ADDR:PORT")]
    pub address: Option<SocketAddr>,

    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Set on a peer started by another mdbus-perf: die with the parent,
    /// and (throughput) start publishing when it says so on stdin.
    #[arg(long, hide = true)]
    pub spawned: bool,

    /// Set on a peer started by another mdbus-perf: the port the parent
    /// chose for the default group and address.
    #[arg(long, hide = true)]
    pub default_port: Option<u16>,
}

impl Common {
    /// The channel name: as given, or unique to this run when this process
    /// starts the peer, or the shared default with --role.
    pub fn channel_name(&self, has_role: bool) -> Result<String, Failure> {
        let name = match &self.name {
            Some(name) => name.clone(),
            None if has_role => "mdbus-perf".into(),
            None => format!("mdbus-perf-{}", std::process::id()),
        };
        mdbus::names::check(&name).map_err(|e| Failure::Usage(format!("--name: {e}")))?;
        Ok(name)
    }

    /// Adds the option to change to an error from waiting for the peer.
    pub fn peer_wait(&self, e: mdbus::Error) -> Failure {
        match e {
            mdbus::Error::NotFound { .. }
            | mdbus::Error::Timeout { .. }
            | mdbus::Error::NoPeer { .. } => Failure::Run(format!(
                "{e} (mdbus-perf waits --timeout {} s for its peer)",
                self.timeout
            )),
            e => e.into(),
        }
    }

    /// The stall limit and peer wait.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// The cores for this process and for the peer it starts. The side
    /// that is started second (pong, pub) takes the second default core
    /// when --cores is not given.
    pub fn cores_for(&self, second_side: bool) -> Result<(usize, usize), Failure> {
        let (first, second) = self.cores()?;
        if second_side && self.cores.is_none() {
            Ok((second, first))
        } else {
            Ok((first, second))
        }
    }

    fn cores(&self) -> Result<(usize, usize), Failure> {
        let placement = match &self.cores {
            Some(list) => {
                let cores = affinity::parse_cpulist(list)
                    .map_err(|e| Failure::Usage(format!("--cores {list:?}: {e}")))?;
                if cores.is_empty() {
                    return Err(Failure::Usage(format!("--cores {list:?} lists no core")));
                }
                // Keep the order given: the first is this process's.
                let second = *cores.get(1).unwrap_or(&cores[0]);
                return Ok((cores[0], second));
            }
            None => match self.device.as_deref() {
                Some(dev) => {
                    let is_rdma = self.transport == TransportKind::Verbs
                        || std::path::Path::new("/sys/class/infiniband")
                            .join(dev)
                            .exists();
                    affinity::placement_for(Some(if is_rdma {
                        Device::Rdma(dev)
                    } else {
                        Device::Net(dev)
                    }))
                }
                None => affinity::placement_for(None),
            },
        };
        Ok(two_cores(&placement))
    }
}

/// The first two cores of a placement (the same one twice on a one-core
/// machine, with a warning: the two sides will share it).
fn two_cores(placement: &Placement) -> (usize, usize) {
    if placement.cores().len() < 2 {
        log::warn!(
            "only core {} is available: both sides share it, so the figures are not meaningful",
            placement.core(0)
        );
    }
    (placement.core(0), placement.core(1))
}

/// Pins this process's thread, naming the option to change on failure.
pub fn pin(core: usize) -> Result<(), Failure> {
    affinity::pin_current_thread(core)
        .map_err(|e| Failure::Usage(format!("{e}; choose others with --cores")))
}

/// Why a run failed.
#[derive(Debug)]
pub enum Failure {
    /// The transport is not in this build, or not on this machine: the
    /// whole sentence.
    Unavailable(String),
    /// An option or the configuration is wrong.
    Usage(String),
    /// The run itself failed: a peer died or stalled, the bus failed.
    Run(String),
}

impl Failure {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Unavailable(_) | Failure::Usage(_) => mdbus_tool_support::output::EXIT_USAGE,
            Failure::Run(_) => mdbus_tool_support::output::EXIT_FAILED,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unavailable(msg) | Failure::Usage(msg) | Failure::Run(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Failure {}

impl From<mdbus::Error> for Failure {
    fn from(e: mdbus::Error) -> Self {
        match e {
            e @ mdbus::Error::TransportUnavailable { .. } => Failure::Unavailable(e.to_string()),
            mdbus::Error::Config(e) => Failure::Usage(e.to_string()),
            mdbus::Error::BadName { .. } => Failure::Usage(format!("--name: {e}")),
            e => Failure::Run(e.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Run(e.to_string())
    }
}

impl From<PeerError> for Failure {
    fn from(e: PeerError) -> Self {
        Failure::Run(e.to_string())
    }
}

impl From<WatchdogError> for Failure {
    fn from(e: WatchdogError) -> Self {
        Failure::Run(e.to_string())
    }
}

/// A watchdog over a spin loop during `what`: the peer (if this process
/// started it), a stall longer than `--timeout`, Ctrl-C and SIGTERM.
pub fn watchdog<'a>(
    peer: Option<&'a mut Peer>,
    common: &Common,
    what: &'static str,
) -> Watchdog<'a> {
    Watchdog::new(peer, common.wait, common.timeout(), what)
        .hint("--timeout")
        .on_signals()
}

/// Turns Ctrl-C and SIGTERM into an error from the next [`Watchdog`] check
/// or [`interrupted`] call, so the run unwinds and cleans up what it set
/// up (network namespaces) instead of dying on the spot.
pub fn catch_interrupts() -> Result<(), Failure> {
    signals::install().map_err(|e| Failure::Run(format!("cannot catch SIGINT and SIGTERM: {e}")))
}

/// Fails once Ctrl-C or SIGTERM arrived (after [`catch_interrupts`]).
pub fn interrupted() -> Result<(), Failure> {
    if signals::requested() {
        Err(Failure::Run("interrupted".into()))
    } else {
        Ok(())
    }
}

/// Where the two sides ran, for the human-readable report: `this` side on
/// its core, and the `peer` side on its own when this process started it.
pub fn cores_line(this: (&str, usize), peer: (&str, Option<usize>)) -> String {
    match peer {
        (name, Some(core)) => format!("{} on core {}, {name} on core {core}", this.0, this.1),
        (_, None) => format!("{} on core {}", this.0, this.1),
    }
}

/// Prints percentiles `p` as a header line and one row named `label`.
pub fn print_percentiles(label: &str, p: &mdbus_tool_support::percentiles::Percentiles) {
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>12}",
        label, p.p50, p.p90, p.p99, p.p999, p.max
    );
}
