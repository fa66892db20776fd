//! The bus a replay runs on: one stream over shm, UDP multicast or verbs
//! (UD multicast), configured the same way in the publishing process and
//! in every subscriber process from the options both are given.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mdbus::config::{LateJoin, StreamConfig};
use mdbus::wait::WaitStrategy;
use mdbus::{Bus, Config, TransportKind};
use mdbus_tool_support::rdma::{self, SYSFS_IB};

use super::error::ReplayError;

/// Multicast group of the stream unless told otherwise.
const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 2);

/// A transport the replay can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Shared memory, one host.
    Shm,
    /// UDP multicast with loss recovery (the loopback by default).
    Udp,
    /// RDMA UD multicast with loss recovery (needs an RDMA device).
    Verbs,
}

impl Transport {
    /// The library's transport.
    pub fn kind(self) -> TransportKind {
        match self {
            Transport::Shm => TransportKind::Shm,
            Transport::Udp => TransportKind::Udp,
            Transport::Verbs => TransportKind::Verbs,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        self.kind().name()
    }

    /// Whether the stream runs on datagrams: the publisher must call
    /// `service` (retransmissions, heartbeats).
    pub fn is_datagram(self) -> bool {
        self != Transport::Shm
    }
}

/// Where and how the stream runs; the same options go to the publisher
/// and to every subscriber process.
#[derive(Debug, Clone, clap::Args)]
pub struct BusOptions {
    /// Transport: shm (shared memory, this host), udp (UDP multicast with
    /// loss recovery; on the loopback unless --interface names another
    /// address) or verbs (RDMA UD multicast with loss recovery; needs an
    /// active RDMA port, e.g. Soft-RoCE's rxe0, and is refused in one line
    /// without one).
    #[arg(long, value_enum, default_value = "shm")]
    pub transport: Transport,

    /// mdbus configuration file (TOML): shared-memory settings (directory,
    /// huge pages), the `verbs` table, and `[streams.NAME]` settings
    /// (heartbeats, retransmission) for the stream --name. The options
    /// given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// --check and --print-config.
    #[command(flatten)]
    pub config_flags: mdbus_tool_support::config::ConfigFlags,

    /// Stream name (1 to 64 characters from A-Z a-z 0-9 . _ -). Default:
    /// one unique to this run.
    #[arg(long)]
    pub name: Option<String>,

    /// Messages the stream holds: on shm, how far a subscriber may fall
    /// behind before it is overrun (and loses messages); on udp and verbs,
    /// the publisher's retransmission window. A power of two. Default: on
    /// shm the number of messages when the input fits the preload budget
    /// (so nothing can be overrun), between 4096 and 1048576; 65536 on udp
    /// and verbs.
    #[arg(long, value_name = "N")]
    pub capacity: Option<usize>,

    /// Largest message the stream carries, in bytes. Default: the longest
    /// message of the input when it fits the preload budget, else 1500.
    #[arg(long, value_name = "BYTES")]
    pub max_message: Option<usize>,

    /// udp, verbs: multicast group and port, as 239.1.1.1:5000. Default:
    /// the stream's `group` in --config, else 239.255.77.2 on a free port.
    #[arg(long, value_name = "GROUP:PORT")]
    pub group: Option<SocketAddrV4>,

    /// udp: local IPv4 address of the interface that sends and joins the
    /// group (default 127.0.0.1: the loopback, time-to-live 0). verbs: the
    /// address the publisher binds (default: that of --device).
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<Ipv4Addr>,

    /// verbs: the address the subscribers bind (default: that of
    /// --recv-device, else the publisher's).
    #[arg(long, value_name = "ADDR")]
    pub recv_interface: Option<Ipv4Addr>,

    /// RDMA or network device whose NUMA node's cores the processes are
    /// pinned to. verbs: the RDMA device to use (rxe0, mlx5_0); default:
    /// the first with an active port.
    #[arg(long)]
    pub device: Option<String>,

    /// verbs: the subscribers' RDMA device (default: --device).
    #[arg(long, value_name = "DEVICE")]
    pub recv_device: Option<String>,

    /// verbs: GID table index whose IPv4-mapped address is bound (RoCE v2
    /// with IPv4 is usually 1 or 3). Default: the first IPv4-mapped GID.
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,

    /// What waiting loops do between empty polls: busy-spin (lowest
    /// latency, burns the core), spin-hint or yield (shares the core), or
    /// adaptive (subscribers spin, then sleep on the transport's event
    /// source after a quiet period; default thresholds).
    #[arg(long, default_value = "busy-spin", value_name = "STRATEGY")]
    pub wait: WaitStrategy,

    /// Seconds to wait for a subscriber to start, and the longest a
    /// subscriber may go without a message before the run is abandoned.
    #[arg(long, default_value_t = 30, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,

    /// Set on subscriber processes: the port the publisher chose for the
    /// default group.
    #[arg(long, hide = true)]
    pub default_port: Option<u16>,
}

/// Which end of the stream a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The replaying process.
    Publisher,
    /// A measuring process.
    Subscriber,
}

impl BusOptions {
    /// The options as arguments for a subscriber process (with the
    /// stream's final name, size and capacity).
    pub fn to_args(&self, name: &str, max_message: usize, capacity: usize) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--transport".into(),
            self.transport.name().into(),
            "--name".into(),
            name.into(),
            "--max-message".into(),
            max_message.to_string(),
            "--capacity".into(),
            capacity.to_string(),
            "--wait".into(),
            self.wait.as_str().into(),
            "--timeout".into(),
            self.timeout.to_string(),
        ];
        let mut opt = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                a.push(flag.into());
                a.push(v);
            }
        };
        opt(
            "--config",
            self.config.as_ref().map(|p| p.display().to_string()),
        );
        opt("--group", self.group.map(|g| g.to_string()));
        opt("--interface", self.interface.map(|i| i.to_string()));
        opt(
            "--recv-interface",
            self.recv_interface.map(|i| i.to_string()),
        );
        opt("--device", self.device.clone());
        opt("--recv-device", self.recv_device.clone());
        opt("--gid-index", self.gid_index.map(|i| i.to_string()));
        opt("--default-port", self.default_port.map(|p| p.to_string()));
        a
    }

    /// Fails when an option of another transport is given, or verbs has
    /// no device on this machine.
    pub fn check(&self) -> Result<(), ReplayError> {
        let verbs_only = [
            ("--recv-interface", self.recv_interface.is_some()),
            ("--recv-device", self.recv_device.is_some()),
            ("--gid-index", self.gid_index.is_some()),
        ];
        if self.transport != Transport::Verbs {
            if let Some((flag, _)) = verbs_only.iter().find(|(_, set)| *set) {
                return Err(ReplayError::Usage(format!(
                    "{flag} applies to --transport verbs only, not {}",
                    self.transport.name()
                )));
            }
        }
        if self.transport == Transport::Shm && (self.group.is_some() || self.interface.is_some()) {
            return Err(ReplayError::Usage(
                "--group and --interface apply to --transport udp and verbs, not shm".into(),
            ));
        }
        if let Some(name) = &self.name {
            mdbus::names::check(name).map_err(|e| ReplayError::Usage(format!("--name: {e}")))?;
        }
        if self.transport == Transport::Verbs {
            let cfg = self.load()?;
            mdbus::transport::verbs::detect(&cfg.verbs).map_err(|reason| {
                ReplayError::Unavailable(
                    mdbus::Error::TransportUnavailable {
                        transport: "verbs",
                        reason,
                    }
                    .to_string(),
                )
            })?;
        }
        Ok(())
    }

    /// For the publishing process: a free port for the default group, so
    /// runs side by side never share a stream.
    pub fn pick_port(&mut self) -> Result<(), ReplayError> {
        if !self.transport.is_datagram() || self.default_port.is_some() || self.group.is_some() {
            return Ok(());
        }
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|s| s.local_addr())
            .map_err(|e| ReplayError::Run(format!("cannot find a free UDP port: {e}")))?
            .port();
        self.default_port = Some(port);
        Ok(())
    }

    fn load(&self) -> Result<Config, ReplayError> {
        match &self.config {
            Some(path) => Config::from_file(path).map_err(|e| ReplayError::Usage(e.to_string())),
            None => Ok(Config::default()),
        }
    }

    /// The bus of `end`, with stream `name` sized and placed for the run.
    pub fn bus(
        &self,
        end: End,
        name: &str,
        max_message: usize,
        capacity: usize,
    ) -> Result<Bus, ReplayError> {
        let mut cfg = self.load()?;
        cfg.transport = self.transport.kind();
        cfg.shm.attach_timeout = Duration::from_secs(self.timeout);
        cfg.threads.wait = self.wait;
        if let Some(dev) = &self.device {
            cfg.threads.device = dev.clone();
            if self.transport == Transport::Verbs {
                cfg.verbs.device = dev.clone();
            }
        }
        let mut stream = StreamConfig {
            max_message,
            capacity,
            // Each message carries its intended send time instead
            // (`commit_with_timestamp`).
            timestamps: false,
            late_join: LateJoin::Oldest,
            ..cfg.stream(name)
        };
        if self.transport.is_datagram() {
            if let Some(g) = self.group {
                stream.group = g.to_string();
            } else if stream.group.is_empty() {
                let port = self.default_port.unwrap_or(47_200);
                stream.group = SocketAddrV4::new(DEFAULT_GROUP, port).to_string();
            }
        }
        match self.transport {
            Transport::Shm => {}
            Transport::Udp => {
                if let Some(i) = self.interface {
                    stream.interface = i.to_string();
                } else if stream.interface.is_empty() {
                    stream.interface = Ipv4Addr::LOCALHOST.to_string();
                }
                if stream
                    .interface
                    .parse::<Ipv4Addr>()
                    .is_ok_and(|i| i.is_loopback())
                {
                    stream.ttl = 0;
                }
            }
            Transport::Verbs => {
                let (explicit, device) = match end {
                    End::Publisher => (self.interface, self.device.as_deref()),
                    End::Subscriber
                        if self.recv_interface.is_some() || self.recv_device.is_some() =>
                    {
                        (self.recv_interface, self.recv_device.as_deref())
                    }
                    End::Subscriber => (self.interface, self.device.as_deref()),
                };
                if let (End::Subscriber, Some(dev)) = (end, &self.recv_device) {
                    cfg.verbs.device = dev.clone();
                }
                if explicit.is_some() || device.is_some() || stream.interface.is_empty() {
                    let addr = match explicit {
                        Some(a) => a,
                        None => {
                            let dev = match device {
                                Some(d) => d.to_owned(),
                                None => mdbus::transport::verbs::detect(&cfg.verbs)
                                    .map(|p| p.device)
                                    .map_err(ReplayError::Unavailable)?,
                            };
                            let gid = self.gid_index.map_or(-1, |g| g as i32);
                            device_ipv4(Path::new(SYSFS_IB), &dev, cfg.verbs.port, gid)?
                        }
                    };
                    stream.interface = addr.to_string();
                }
            }
        }
        cfg.streams.insert(name.to_owned(), stream);
        Ok(Bus::new(cfg)?)
    }
}

/// The IPv4 address of an RDMA port: the IPv4-mapped GID at `gid_index`
/// (when at least 0), else the first IPv4-mapped GID of the port.
pub fn device_ipv4(
    root: &Path,
    device: &str,
    port: u8,
    gid_index: i32,
) -> Result<Ipv4Addr, ReplayError> {
    rdma::device_ipv4(root, device, port, gid_index)
        .map_err(|e| ReplayError::Usage(format!("{e}; name the address with --interface")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_without_an_address_names_the_option() {
        let root = std::env::temp_dir().join(format!("mdbus-replay-gids-{}", std::process::id()));
        let e = device_ipv4(&root, "rxe8", 1, -1).unwrap_err().to_string();
        assert!(e.starts_with("RDMA device rxe8 port 1: "), "{e}");
        assert!(e.ends_with("; name the address with --interface"), "{e}");
    }

    #[test]
    fn options_of_other_transports_are_refused() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            bus: BusOptions,
        }
        let t = T::parse_from(["t", "--transport", "shm", "--gid-index", "1"]);
        assert_eq!(
            t.bus.check().unwrap_err().to_string(),
            "--gid-index applies to --transport verbs only, not shm"
        );
        let t = T::parse_from(["t", "--group", "239.1.1.1:5000"]);
        assert!(t.bus.check().unwrap_err().to_string().contains("not shm"));
        let t = T::parse_from(["t", "--transport", "udp", "--name", "a/b"]);
        assert!(t
            .bus
            .check()
            .unwrap_err()
            .to_string()
            .starts_with("--name: "));
    }
}
