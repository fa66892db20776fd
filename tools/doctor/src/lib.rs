//! mdbus-doctor: is this host ready for a low-latency mdbus bus?
//!
//! In the spirit of `mlnx_tune` and Onload's tuning guides, [`run`] reads
//! sysfs and procfs (under [`Options::root`], `/` on a live host, a fake
//! tree in tests), never changes anything, and reports one [`Item`] per
//! fact with a [`Status`], what it read, what passes, and the command
//! that fixes it:
//!
//! | check | what is read |
//! | --- | --- |
//! | `cpu_governor` | `cpuN/cpufreq/scaling_governor` of the polling cores (all online cores without any) |
//! | `cpu_cstates` | `cpuN/cpuidle/stateK/{name,latency,disable}`: idle states deeper than 2 µs exit latency |
//! | `core_isolation` | `/sys/devices/system/cpu/{isolated,nohz_full}`, `isolcpus=`/`nohz_full=` in `/proc/cmdline` |
//! | `irq_polling_cores` | the NIC IRQs' `/proc/irq/N/smp_affinity_list` against the polling cores |
//! | `nic_eee` | energy-efficient Ethernet: not in sysfs, so `unknown` with the `ethtool` command |
//! | `irq_numa` | the NIC's IRQs (`device/msi_irqs`, `/proc/interrupts`) against its `device/numa_node` |
//! | `huge_pages` | `/sys/kernel/mm/hugepages/hugepages-2048kB/{nr,free}_hugepages`, hugetlbfs in `/proc/mounts` |
//! | `transparent_huge_pages` | `/sys/kernel/mm/transparent_hugepage/enabled` |
//! | `memlock` | `Max locked memory` in `/proc/self/limits` against what the configuration registers |
//! | `swap` | `/proc/swaps`, `/proc/sys/vm/swappiness` |
//! | `rdma_port` | `/sys/class/infiniband/DEV/ports/N/{state,link_layer}` |
//! | `roce_mtu` | the netdev's `mtu`, the RoCE active MTU it gives, the streams' `max_datagram` |
//! | `roce_gid_type` | `ports/N/gid_attrs/types/IDX` and `gids/IDX` |
//! | `roce_pfc_ecn` | `/sys/class/net/IF/ecn/roce_{np,rp}/enable/P` (PFC is not in sysfs: the `dcb` command) |
//!
//! Statuses: `fail` is what breaks the configured bus or puts interrupts
//! on its polling cores; `warn` is tuning that costs latency, or a fact
//! sysfs does not show. [`Report::exit_code`] is 1 on any `fail`, else 0.
//!
//! ```no_run
//! let report = mdbus_doctor::run(&mdbus_doctor::Options::default());
//! print!("{}", report.text());
//! std::process::exit(report.exit_code().into());
//! ```

use std::net::Ipv4Addr;
use std::path::PathBuf;

use mdbus::config::HugePages;
use mdbus::TransportKind;
use serde::Serialize;

mod config;
mod cpu;
mod host;
mod memory;
mod net;

pub use host::format_cpulist;

/// The tool's name, in its JSON object and messages.
pub const TOOL: &str = "mdbus-doctor";

/// What to check.
#[derive(Debug, Clone)]
pub struct Options {
    /// Root of the tree holding `sys/` and `proc/`: `/` on a live host.
    pub root: PathBuf,
    /// RDMA or network devices (`mlx5_0`, `rxe0`, `eth2`); each is
    /// checked with its counterpart (an RDMA device's netdev, a netdev's
    /// RDMA device) when sysfs links them.
    pub devices: Vec<String>,
    /// Network interfaces.
    pub interfaces: Vec<String>,
    /// Local IPv4 addresses the bus sends and joins on (from the
    /// configuration), checked through the interface that has them.
    pub addresses: Vec<Ipv4Addr>,
    /// The cores busy-polling threads run on.
    pub cores: Vec<usize>,
    /// What the configuration will allocate, lock and send; `None`
    /// without a configuration.
    pub bus: Option<BusNeeds>,
    /// The configuration file read, for the report.
    pub config: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            root: PathBuf::from("/"),
            devices: Vec::new(),
            interfaces: Vec::new(),
            addresses: Vec::new(),
            cores: Vec::new(),
            bus: None,
            config: None,
        }
    }
}

impl Options {
    /// Adds what the mdbus configuration (or `mdbus-relay` configuration,
    /// with its `[bus]`) at `path` names: devices, cores, interface
    /// addresses, huge pages and memory. The error is a sentence naming
    /// the file and key.
    pub fn load_config(&mut self, path: &std::path::Path) -> Result<(), String> {
        config::load(self, path)
    }
}

/// What a configuration will need from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusNeeds {
    /// Its transport.
    pub transport: TransportKind,
    /// Its huge-page policy (`shm.huge_pages`).
    pub huge_page_policy: HugePages,
    /// Where hugetlbfs should be mounted (`shm.hugetlbfs`).
    pub hugetlbfs: PathBuf,
    /// Whether shared-memory segments are locked (`shm.mlock`).
    pub mlock: bool,
    /// Bytes every listed channel allocates together (registered on verbs).
    pub channel_bytes: u64,
    /// Bytes of shared-memory segments among them.
    pub segment_bytes: u64,
    /// 2 MiB huge pages those segments take (each rounded up).
    pub huge_pages: u64,
    /// The RDMA port (`verbs.port`).
    pub port: u8,
    /// Largest `max_datagram` of a multicast stream, when any has a group.
    pub max_datagram: Option<usize>,
}

/// How one item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As it should be.
    Pass,
    /// Costs latency, or could not be read: look at it.
    Warn,
    /// Breaks the configured bus, or interrupts its polling cores.
    Fail,
}

impl Status {
    /// `pass`, `warn` or `fail`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One fact about the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// Which check (`cpu_governor`, `memlock`, ...; see the crate docs).
    pub check: &'static str,
    /// What it is about: `cpu 2-3`, `eth0`, `rxe0 port 1`, `host`.
    pub subject: String,
    /// How it stands.
    pub status: Status,
    /// What was read.
    pub found: String,
    /// What passes.
    pub want: String,
    /// The command (or setting) that fixes it; `None` when it passes.
    pub fix: Option<String>,
}

impl Item {
    pub(crate) fn start(check: &'static str, subject: impl Into<String>) -> ItemBuilder {
        ItemBuilder {
            check,
            subject: subject.into(),
            want: String::new(),
        }
    }
}

/// Builds an [`Item`]: its check, subject and what passes, then one of
/// [`ItemBuilder::pass`], [`ItemBuilder::warn`], [`ItemBuilder::fail`].
pub(crate) struct ItemBuilder {
    check: &'static str,
    subject: String,
    want: String,
}

impl ItemBuilder {
    pub(crate) fn want(mut self, want: impl Into<String>) -> ItemBuilder {
        self.want = want.into();
        self
    }

    pub(crate) fn pass(self, found: impl Into<String>) -> Item {
        self.finish(Status::Pass, found.into(), None)
    }

    pub(crate) fn warn(self, found: impl Into<String>, fix: impl Into<String>) -> Item {
        self.finish(Status::Warn, found.into(), Some(fix.into()))
    }

    pub(crate) fn fail(self, found: impl Into<String>, fix: impl Into<String>) -> Item {
        self.finish(Status::Fail, found.into(), Some(fix.into()))
    }

    pub(crate) fn status(self, status: Status, found: String, fix: String) -> Item {
        let fix = (status != Status::Pass).then_some(fix);
        self.finish(status, found, fix)
    }

    fn finish(self, status: Status, found: String, fix: Option<String>) -> Item {
        Item {
            check: self.check,
            subject: self.subject,
            status,
            found,
            want: self.want,
            fix,
        }
    }
}

/// Every item of one run, and what was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The root read.
    pub root: PathBuf,
    /// The configuration read, if any.
    pub config: Option<PathBuf>,
    /// The polling cores checked.
    pub cores: Vec<usize>,
    /// The RDMA devices checked (with their port).
    pub devices: Vec<String>,
    /// The network interfaces checked.
    pub interfaces: Vec<String>,
    /// The items, in check order.
    pub items: Vec<Item>,
}

impl Report {
    /// The worst status of any item (`Pass` when there are none).
    pub fn status(&self) -> Status {
        self.items
            .iter()
            .map(|i| i.status)
            .max()
            .unwrap_or(Status::Pass)
    }

    /// How many items have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.items.iter().filter(|i| i.status == status).count()
    }

    /// The exit status: 1 when any item failed, else 0 (warnings too).
    pub fn exit_code(&self) -> u8 {
        match self.status() {
            Status::Fail => mdbus_tool_support::output::EXIT_FAILED,
            _ => 0,
        }
    }

    /// One line per item, in aligned columns (status, check, subject,
    /// what was read, then the fix), and a summary line.
    pub fn text(&self) -> String {
        let w_check = self.items.iter().map(|i| i.check.len()).max().unwrap_or(0);
        let w_subject = self
            .items
            .iter()
            .map(|i| i.subject.chars().count())
            .max()
            .unwrap_or(0);
        let w_found = self
            .items
            .iter()
            .map(|i| i.found.chars().count())
            .max()
            .unwrap_or(0)
            .min(72);
        let mut out = String::new();
        for i in &self.items {
            let mut line = format!(
                "{:<4}  {:<w_check$}  {:<w_subject$}  ",
                i.status.name(),
                i.check,
                i.subject
            );
            match &i.fix {
                Some(fix) => {
                    line.push_str(&format!("{:<w_found$}  fix: {fix}", i.found));
                }
                None => line.push_str(&i.found),
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str(&format!(
            "{}: {} pass, {} warn, {} fail ({} checked)\n",
            self.status().name(),
            self.count(Status::Pass),
            self.count(Status::Warn),
            self.count(Status::Fail),
            self.subjects()
        ));
        out
    }

    /// What was checked, as a phrase for the summary.
    fn subjects(&self) -> String {
        let mut parts = vec![format!("root {}", self.root.display())];
        if let Some(c) = &self.config {
            parts.push(format!("config {}", c.display()));
        }
        if !self.cores.is_empty() {
            parts.push(format!("cores {}", format_cpulist(&self.cores)));
        }
        if !self.devices.is_empty() {
            parts.push(format!("devices {}", self.devices.join(",")));
        }
        if !self.interfaces.is_empty() {
            parts.push(format!("interfaces {}", self.interfaces.join(",")));
        }
        parts.join(", ")
    }

    /// The `--json` object (docs/JSON.md): `schema`, `tool`, `status`,
    /// the counts by status, what was checked, and `items` (each with
    /// `check`, `subject`, `status`, `found`, `want`, `fix`).
    pub fn json(&self) -> serde_json::Value {
        let mut m = mdbus_tool_support::output::json_object(TOOL);
        m.insert("status".into(), self.status().name().into());
        m.insert("pass".into(), self.count(Status::Pass).into());
        m.insert("warn".into(), self.count(Status::Warn).into());
        m.insert("fail".into(), self.count(Status::Fail).into());
        m.insert("root".into(), self.root.display().to_string().into());
        m.insert(
            "config".into(),
            self.config.as_ref().map(|c| c.display().to_string()).into(),
        );
        m.insert("cores".into(), self.cores.clone().into());
        m.insert("devices".into(), self.devices.clone().into());
        m.insert("interfaces".into(), self.interfaces.clone().into());
        m.insert(
            "items".into(),
            serde_json::to_value(&self.items).unwrap_or_default(),
        );
        serde_json::Value::Object(m)
    }
}

/// Checks the host as `opts` says and reports every item. Reads only;
/// never fails: what cannot be read is an item saying so.
pub fn run(opts: &Options) -> Report {
    let host = host::Host::new(&opts.root);
    let mut items = Vec::new();
    let targets = net::resolve(&host, opts, &mut items);
    let polling = cpu::polling_cores(&host, opts, &targets, &mut items);
    cpu::check(&host, &polling, &mut items);
    let irqs = net::check_interfaces(&host, &targets, &mut items);
    cpu::check_isolation(&host, &polling, &irqs, &mut items);
    memory::check(&host, opts.bus.as_ref(), &mut items);
    net::check_rdma(
        &host,
        opts.bus.as_ref(),
        &opts.addresses,
        &targets,
        &mut items,
    );
    Report {
        root: opts.root.clone(),
        config: opts.config.clone(),
        cores: opts.cores.clone(),
        devices: targets
            .rdma
            .iter()
            .map(|(d, p)| format!("{d}:{p}"))
            .collect(),
        interfaces: targets.interfaces.clone(),
        items,
    }
}

/// The command-line options, as a clap argument group: `mdbus-doctor`
/// parses them, and another tool can offer the same check as a
/// subcommand (`#[command(flatten)]` or as a subcommand's arguments)
/// and call [`Args::run`].
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// An mdbus configuration, or an mdbus-relay configuration (its [bus],
    /// [thread] and interfaces): the devices, cores, interface addresses,
    /// huge pages and memory it names are checked.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// An RDMA or network device to check (mlx5_0, rxe0, eth2), with its
    /// counterpart; repeat or separate with commas.
    #[arg(long = "device", value_name = "NAME", value_delimiter = ',')]
    pub devices: Vec<String>,

    /// A network interface to check; repeat or separate with commas.
    #[arg(long = "interface", value_name = "IF", value_delimiter = ',')]
    pub interfaces: Vec<String>,

    /// The cores busy-polling threads run on, as a CPU list (2,3 or 2-5).
    #[arg(long, value_name = "LIST", value_parser = parse_cores)]
    pub cores: Option<Cores>,

    /// Read sysfs and procfs under DIR (DIR/sys, DIR/proc) instead of /.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// Print one JSON object (docs/JSON.md) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A parsed `--cores` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cores(pub Vec<usize>);

fn parse_cores(s: &str) -> Result<Cores, String> {
    let cores = mdbus::affinity::parse_cpulist(s).map_err(|e| e.to_string())?;
    if cores.is_empty() {
        return Err("no cores given".into());
    }
    Ok(Cores(cores))
}

impl Args {
    /// The [`Options`] these arguments ask for; the error (a configuration
    /// that cannot be read or is invalid) is a sentence for the user.
    pub fn options(&self) -> Result<Options, String> {
        let mut o = Options {
            root: self.root.clone(),
            ..Options::default()
        };
        if let Some(c) = &self.config {
            o.load_config(c)?;
        }
        for d in &self.devices {
            if !o.devices.contains(d) {
                o.devices.push(d.clone());
            }
        }
        o.interfaces.extend(self.interfaces.iter().cloned());
        if let Some(Cores(cores)) = &self.cores {
            // Given cores replace the configuration's.
            o.cores = cores.clone();
        }
        Ok(o)
    }

    /// Runs the check, prints the table (or the JSON object) on stdout,
    /// and returns the exit status: 0 when nothing failed (warnings
    /// included), 1 when an item failed, 2 when the configuration is
    /// unusable.
    pub fn run(&self) -> u8 {
        let opts = match self.options() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{TOOL}: {e}");
                return mdbus_tool_support::output::EXIT_USAGE;
            }
        };
        let report = run(&opts);
        if self.json {
            mdbus_tool_support::output::print_json(&report.json());
        } else {
            print!("{}", report.text());
        }
        report.exit_code()
    }
}

/// The `--help` text after the options: what the statuses mean and the
/// exit statuses.
pub const AFTER_HELP: &str = "Each item is pass, warn (costs latency, or sysfs does not show \
it: check by hand with the command given) or fail (breaks the configured bus, or puts the NIC's \
interrupts on a polling core). Nothing is changed: every fix is a command to run yourself.\n\n\
Exit status: 0 no item failed (warnings included); 1 an item failed; 2 bad usage or \
configuration.";
