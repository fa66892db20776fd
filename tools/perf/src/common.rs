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
    /// (sessions on TCP), `verbs` (RDMA: sessions on RC queue pairs,
    /// streams on UD multicast with loss recovery; refused in one line on a
    /// machine without an active RDMA port) or `auto` (the library's
    /// choice: verbs when an RDMA device with an active port is found,
    /// else shm, or udp for mcast). Default: verbs when -d/--device or
    /// -x/--gid-index is given (as perftest users mean them), else shm
    /// (mcast: udp).
    #[arg(id = "transport", long = "transport", value_name = "TRANSPORT",
          value_parser = crate::args::parse_transport)]
    pub transport_arg: Option<TransportKind>,

    /// The transport this run measures: --transport resolved (never
    /// `auto`), set by [`crate::transport::resolve`] before anything else.
    #[arg(skip)]
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

    /// RDMA device (rxe0, mlx5_0), as perftest's -d: without --transport
    /// it selects verbs. verbs: a session binds the device's IPv4 address
    /// (the IPv4-mapped GID at -x/--gid-index, or the first one), and so
    /// does the publisher of mcast; default: the first device with an
    /// active port. With another --transport, an RDMA or network device
    /// (e.g. eth0) whose NUMA node's cores the default --cores come from.
    #[arg(short = 'd', long, value_name = "DEVICE")]
    pub device: Option<String>,

    /// verbs: GID table index whose IPv4-mapped address the run binds, as
    /// perftest's -x (RoCE v2 with IPv4 is usually 1 or 3); without
    /// --transport it selects verbs. Default: the first IPv4-mapped GID of
    /// the device's port.
    #[arg(short = 'x', long, value_name = "N",
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

    /// verbs sessions: how messages travel: send (SEND/RECV), write (RDMA
    /// WRITE into a ring the peer polls) or write-imm (the ring, announced
    /// by WRITE with immediate). Default: the configuration's (send).
    #[arg(long, value_name = "MODE")]
    pub session_mode: Option<mdbus::config::SessionMode>,

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
    /// group (one of this host's: another is refused, as is --interface,
    /// --group or --address on shm). Default: the stream's `interface` in --config, else
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

/// Smallest message a run takes: perftest's -a starts at 2 bytes.
pub const MIN_SIZE: u64 = 2;
/// Largest message a run takes (the library's largest `max_message`):
/// where -a/--all ends.
pub const MAX_SIZE: u64 = mdbus::config::MAX_MESSAGE_LIMIT as u64;

/// How much a run measures: message size(s) and how many messages or for
/// how long, with perftest's short flags. Every command has them.
#[derive(Debug, Clone, clap::Args)]
pub struct Load {
    /// Payload bytes per message, 2 to 1048576 (perftest's -s). The first
    /// 8 (fewer in a smaller message) carry a counter. Default: 32 for
    /// pingpong, 64 for throughput and mcast.
    #[arg(short = 's', long, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(MIN_SIZE..=MAX_SIZE))]
    pub size: Option<u64>,

    /// Messages measured at each size (pingpong: round trips), as
    /// perftest's -n; --count is the same option. Default: pingpong
    /// 1000000; throughput 10000000 on shm, 1000000 elsewhere; mcast
    /// 100000. On udp, give both sides the same count when starting them
    /// by hand: the subscriber stops once it has accounted for this many.
    #[arg(short = 'n', long = "iters", visible_alias = "count", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..u64::MAX / 2))]
    pub iters: Option<u64>,

    /// Every size, as perftest's -a: powers of two from 2 bytes to
    /// 1048576 (the largest message), one measurement and one result each
    /// (with --json, one object whose `results` array has one entry per
    /// size). Rings and windows are made smaller for large messages, so a
    /// sweep fits in memory: pingpong's to at most 4 MiB of messages,
    /// throughput's (unless --capacity is given) to 64 MiB.
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,

    /// Run for this long at each size instead of for -n messages, as
    /// perftest's -D (such as 5, 1.5s, 500ms). The sender stops at the end;
    /// the receiver counts what arrived.
    #[arg(short = 'D', long, value_name = "DURATION", conflicts_with = "iters",
          value_parser = mdbus_tool_support::duration::parse_nonzero)]
    pub duration: Option<Duration>,
}

impl Load {
    /// The sizes to measure: -s (else `default`), or with -a every power
    /// of two from [`MIN_SIZE`] to [`MAX_SIZE`].
    pub fn sizes(&self, default: u64) -> Vec<u64> {
        if self.all {
            std::iter::successors(Some(MIN_SIZE), |s| Some(s * 2))
                .take_while(|s| *s <= MAX_SIZE)
                .collect()
        } else {
            vec![self.size.unwrap_or(default)]
        }
    }

    /// Messages to send at each size: -n, else `default`; `None` with -D.
    pub fn count(&self, default: u64) -> Option<u64> {
        match self.duration {
            Some(_) => None,
            None => Some(self.iters.unwrap_or(default)),
        }
    }

    /// The options that give a spawned peer this load at one `size`.
    pub fn peer_args(&self, size: u64, default_count: u64) -> Vec<String> {
        let mut args = vec!["--size".to_string(), size.to_string()];
        match self.duration {
            Some(d) => args.extend(["--duration".into(), format!("{}ns", d.as_nanos())]),
            None => args.extend([
                "--iters".into(),
                self.iters.unwrap_or(default_count).to_string(),
            ]),
        }
        args
    }

    /// This load at one size: what each measurement of a sweep runs.
    pub fn at(&self, size: u64) -> Load {
        Load {
            size: Some(size),
            all: false,
            ..self.clone()
        }
    }
}

/// The capacity of a ring or window of `size`-byte messages: `capacity`,
/// but at most what fits in `budget` bytes (a power of two, at least 2),
/// so that large messages (-a) do not ask for gigabytes.
pub fn bounded_capacity(capacity: usize, size: u64, budget: u64) -> usize {
    let fit = (budget / (size + 64)).max(2);
    let fit = 1usize << (u64::BITS - 1 - fit.leading_zeros());
    capacity.min(fit)
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
                // Both checked here, before this process is pinned: the
                // peer's core would otherwise fail in the peer, as a
                // runtime failure of this run. (A spawned peer inherits
                // its parent's pinning, so it leaves the check to it.)
                if !self.spawned {
                    check_allowed(list, &[cores[0], second])?;
                }
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

/// Fails unless this process may run on every core of `cores` (online
/// and in its CPU set: taskset, cgroup cpuset), naming the ones it may.
fn check_allowed(list: &str, cores: &[usize]) -> Result<(), Failure> {
    let allowed = allowed_cores()?;
    match cores.iter().find(|c| !allowed.contains(c)) {
        None => Ok(()),
        Some(bad) => Err(Failure::Usage(format!(
            "--cores {list}: core {bad} is not available to this process (it may run on {})",
            cpulist(&allowed)
        ))),
    }
}

/// The cores this process may run on.
fn allowed_cores() -> Result<Vec<usize>, Failure> {
    // SAFETY: cpu_set_t is plain data, for which all zeros is an empty
    // set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()`
    // bytes into `set`, which lives for the call; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(Failure::Run(format!(
            "cannot read this process's CPU set: {}",
            std::io::Error::last_os_error()
        )));
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads bit `c` of `set`, and `c` is below the
    // set's size in bits.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Cores as a list such as "0-3,6".
fn cpulist(cores: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let start = cores[i];
        while i + 1 < cores.len() && cores[i + 1] == cores[i] + 1 {
            i += 1;
        }
        parts.push(if cores[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cores[i])
        });
        i += 1;
    }
    parts.join(",")
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
