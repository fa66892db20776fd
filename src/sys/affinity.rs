//! Core placement for busy-polling threads.
//!
//! A thread that busy-polls a NIC's completion queue, or a shared-memory
//! ring, should run on a core of the NUMA node the NIC is attached to: its
//! DMA writes land in that node's memory and its doorbells cross no socket
//! interconnect. This module finds that node from sysfs and pins threads:
//!
//! 1. the NUMA node of the device, read from
//!    `/sys/class/infiniband/DEV/device/numa_node` (RDMA) or
//!    `/sys/class/net/DEV/device/numa_node` (network);
//! 2. the cores of that node, read from
//!    `/sys/devices/system/node/nodeN/cpulist` (a list such as `0-3,8-11`);
//! 3. [`Placement::core`] hands those cores out round robin, and
//!    [`pin_current_thread`] pins the calling thread to one of them.
//!
//! When there is no device, the device reports no node (`numa_node` is `-1`,
//! as on single-socket machines and most virtual machines), the machine has
//! a single node, or sysfs cannot be read, the placement falls back to every
//! online core and [`Placement::reason`] says why; the fallback is also
//! logged (`log::info!` when it is expected, `log::warn!` when something
//! could not be read).
//!
//! The sysfs root is a parameter of [`Sysfs`], so the lookup can be tested
//! against a fake tree.
//!
//! ```no_run
//! use mdbus::affinity::{placement_for, pin_current_thread, Device};
//!
//! let placement = placement_for(Some(Device::Rdma("mlx5_0")));
//! println!("{}", placement.reason());
//! pin_current_thread(placement.core(0)).expect("pin the polling thread");
//! ```

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Highest CPU number accepted from a cpulist; the kernel's own limit
/// (`NR_CPUS`) is 8192 at most.
const MAX_CPU: usize = 8191;

/// A device whose NUMA node decides where polling threads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device<'a> {
    /// An RDMA device as named in `/sys/class/infiniband` (`mlx5_0`, `rxe0`).
    Rdma(&'a str),
    /// A network interface as named in `/sys/class/net` (`eth0`, `ens1f0`).
    Net(&'a str),
}

impl Device<'_> {
    /// The device's name, without its kind.
    pub fn name(&self) -> &str {
        match self {
            Device::Rdma(name) | Device::Net(name) => name,
        }
    }

    /// The sysfs class directory of this kind of device, relative to the
    /// sysfs root.
    fn class_dir(&self) -> &'static str {
        match self {
            Device::Rdma(_) => "class/infiniband",
            Device::Net(_) => "class/net",
        }
    }
}

impl fmt::Display for Device<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Rdma(name) => write!(f, "RDMA device {name}"),
            Device::Net(name) => write!(f, "network device {name}"),
        }
    }
}

/// A malformed CPU list such as the content of `nodeN/cpulist`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// Two commas with nothing between them, or a leading or trailing comma.
    #[error("empty entry at position {position} (a list looks like \"0-3,8-11\")")]
    EmptyEntry {
        /// Zero-based index of the entry.
        position: usize,
    },
    /// An entry that is neither a number nor a `first-last` range.
    #[error("{entry:?} is not a CPU number or a range \"first-last\"")]
    NotANumber {
        /// The offending entry.
        entry: String,
    },
    /// A range whose end is below its start.
    #[error("range {first}-{last} runs backwards")]
    Reversed {
        /// Start of the range.
        first: usize,
        /// End of the range.
        last: usize,
    },
    /// A CPU number beyond any kernel's limit.
    #[error("CPU {cpu} is above the largest possible CPU number {max}", max = MAX_CPU)]
    TooLarge {
        /// The offending CPU number.
        cpu: usize,
    },
}

/// Why a device's node or cores could not be found, or a thread not pinned.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// The device name could not be a sysfs entry (empty, or has a `/`).
    #[error("{device:?} is not a valid device name: give the bare name, as listed in /sys/class/net or /sys/class/infiniband")]
    InvalidDeviceName {
        /// The name as given.
        device: String,
    },
    /// The device has no directory in sysfs.
    #[error(
        "{device} not found: {path} does not exist (check the name in `ip link` or `ibv_devices`)"
    )]
    DeviceNotFound {
        /// The device, with its kind.
        device: String,
        /// The directory that was looked for.
        path: PathBuf,
    },
    /// A sysfs file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A device's `numa_node` file does not hold an integer.
    #[error("{device}: {path} holds {value:?}, expected a node number or -1")]
    BadNumaNode {
        /// The device, with its kind.
        device: String,
        /// The `numa_node` file.
        path: PathBuf,
        /// Its content.
        value: String,
    },
    /// A cpulist file is malformed.
    #[error("{path}: {source}")]
    BadCpuList {
        /// The cpulist file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: CpuListError,
    },
    /// The operating system refused to pin the thread.
    #[error("cannot pin the current thread to core {core}: {source} (is the core online and in this process's allowed CPU set? see `taskset -p $$`)")]
    Pin {
        /// The core asked for.
        core: usize,
        /// The error reported by `sched_setaffinity`.
        #[source]
        source: io::Error,
    },
}

/// Parses a kernel CPU list such as `0-3,8-11` into sorted, distinct CPU
/// numbers.
///
/// Surrounding whitespace (the trailing newline of a sysfs file) is ignored.
/// An empty list, as found in the `cpulist` of a memory-only node, yields no
/// CPUs.
///
/// ```
/// assert_eq!(mdbus::affinity::parse_cpulist("0-2,8\n").unwrap(), vec![0, 1, 2, 8]);
/// ```
pub fn parse_cpulist(list: &str) -> Result<Vec<usize>, CpuListError> {
    let list = list.trim();
    let mut cpus = Vec::new();
    if list.is_empty() {
        return Ok(cpus);
    }
    for (position, entry) in list.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(CpuListError::EmptyEntry { position });
        }
        let (first, last) = match entry.split_once('-') {
            Some((first, last)) => (parse_cpu(first, entry)?, parse_cpu(last, entry)?),
            None => {
                let cpu = parse_cpu(entry, entry)?;
                (cpu, cpu)
            }
        };
        if last < first {
            return Err(CpuListError::Reversed { first, last });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn parse_cpu(text: &str, entry: &str) -> Result<usize, CpuListError> {
    let text = text.trim();
    // `usize::from_str` accepts a leading `+`; a cpulist never has one.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::NotANumber {
            entry: entry.to_owned(),
        });
    }
    match text.parse::<usize>() {
        Ok(cpu) if cpu <= MAX_CPU => Ok(cpu),
        Ok(cpu) => Err(CpuListError::TooLarge { cpu }),
        Err(_) => Err(CpuListError::TooLarge { cpu: usize::MAX }),
    }
}

/// Why a [`Placement`] holds the cores it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementReason {
    /// The cores of the NUMA node the device is attached to.
    DeviceNode {
        /// The device, with its kind.
        device: String,
        /// Its node.
        node: u32,
    },
    /// No device was given: all online cores.
    NoDevice,
    /// The device reports no NUMA node (`numa_node` is `-1` or absent, as on
    /// single-socket machines, virtual machines and virtual interfaces): all
    /// online cores.
    NoNumaNode {
        /// The device, with its kind.
        device: String,
    },
    /// The machine has a single NUMA node, so every core is local to the
    /// device: all online cores.
    SingleNode {
        /// The device, with its kind.
        device: String,
    },
    /// The device's node lists no CPUs (a memory-only node): all online cores.
    NodeWithoutCpus {
        /// The device, with its kind.
        device: String,
        /// Its node.
        node: u32,
    },
    /// Sysfs could not tell: all online cores, or the cores this thread may
    /// run on when even the online list is unreadable.
    Unavailable {
        /// What went wrong, naming the device and path.
        detail: String,
    },
    /// Cores given explicitly, for example from configuration.
    Explicit,
}

impl fmt::Display for PlacementReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementReason::DeviceNode { device, node } => {
                write!(f, "cores of NUMA node {node}, local to {device}")
            }
            PlacementReason::NoDevice => write!(f, "no device given: using all online cores"),
            PlacementReason::NoNumaNode { device } => {
                write!(f, "{device} reports no NUMA node: using all online cores")
            }
            PlacementReason::SingleNode { device } => write!(
                f,
                "single NUMA node, every core is local to {device}: using all online cores"
            ),
            PlacementReason::NodeWithoutCpus { device, node } => write!(
                f,
                "NUMA node {node} of {device} has no CPUs: using all online cores"
            ),
            PlacementReason::Unavailable { detail } => {
                write!(f, "{detail}: using all usable cores")
            }
            PlacementReason::Explicit => write!(f, "cores given explicitly"),
        }
    }
}

/// The cores busy-polling threads should run on, and why.
///
/// Never empty: every constructor falls back to at least one core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The device's NUMA node, when known.
    node: Option<u32>,
    /// Sorted, distinct, non-empty.
    cores: Vec<usize>,
    reason: PlacementReason,
}

impl Placement {
    /// A placement on the given cores, for example from configuration.
    /// Duplicates are dropped; an empty list means core 0.
    pub fn from_cores(cores: impl IntoIterator<Item = usize>) -> Placement {
        Placement::new(None, cores.into_iter().collect(), PlacementReason::Explicit)
    }

    fn new(node: Option<u32>, mut cores: Vec<usize>, reason: PlacementReason) -> Placement {
        cores.sort_unstable();
        cores.dedup();
        if cores.is_empty() {
            cores.push(0);
        }
        Placement {
            node,
            cores,
            reason,
        }
    }

    /// The device's NUMA node, or `None` when unknown or not used.
    pub fn node(&self) -> Option<u32> {
        self.node
    }

    /// The cores, in ascending order; never empty.
    pub fn cores(&self) -> &[usize] {
        &self.cores
    }

    /// Why these cores were chosen; its `Display` is a sentence for logs.
    pub fn reason(&self) -> &PlacementReason {
        &self.reason
    }

    /// The core for the `i`-th polling thread: the cores in ascending order,
    /// round robin, so threads 0 and 1 get different cores whenever there
    /// are two.
    pub fn core(&self, i: usize) -> usize {
        self.cores[i % self.cores.len()]
    }

    /// Pins the calling thread to [`Placement::core`]`(i)` and returns that
    /// core.
    pub fn pin(&self, i: usize) -> Result<usize, AffinityError> {
        let core = self.core(i);
        pin_current_thread(core)?;
        Ok(core)
    }
}

/// A sysfs tree: `/sys` on a live system, any directory in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::system()
    }
}

impl Sysfs {
    /// The live system's `/sys`.
    pub fn system() -> Sysfs {
        Sysfs::at("/sys")
    }

    /// A sysfs tree rooted at `root`, laid out like `/sys`.
    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The NUMA node of `dev`: `Ok(None)` when the device exists but reports
    /// no node (`numa_node` is `-1`, or there is no `device/numa_node`, as
    /// for virtual interfaces).
    pub fn device_numa_node(&self, dev: Device<'_>) -> Result<Option<u32>, AffinityError> {
        let name = dev.name();
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(AffinityError::InvalidDeviceName {
                device: name.to_owned(),
            });
        }
        let dir = self.root.join(dev.class_dir()).join(name);
        if !dir.exists() {
            return Err(AffinityError::DeviceNotFound {
                device: dev.to_string(),
                path: dir,
            });
        }
        let path = dir.join("device/numa_node");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(AffinityError::Read { path, source }),
        };
        match text.trim().parse::<i64>() {
            Ok(node) if node < 0 => Ok(None),
            Ok(node) => u32::try_from(node)
                .map(Some)
                .map_err(|_| AffinityError::BadNumaNode {
                    device: dev.to_string(),
                    path,
                    value: text.trim().to_owned(),
                }),
            Err(_) => Err(AffinityError::BadNumaNode {
                device: dev.to_string(),
                path,
                value: text.trim().to_owned(),
            }),
        }
    }

    /// The CPUs of NUMA node `node`, from `devices/system/node/nodeN/cpulist`.
    pub fn node_cpus(&self, node: u32) -> Result<Vec<usize>, AffinityError> {
        self.read_cpulist(&format!("devices/system/node/node{node}/cpulist"))
    }

    /// The online CPUs, from `devices/system/cpu/online`.
    pub fn online_cpus(&self) -> Result<Vec<usize>, AffinityError> {
        self.read_cpulist("devices/system/cpu/online")
    }

    /// The number of NUMA nodes: the `nodeN` directories under
    /// `devices/system/node`.
    pub fn node_count(&self) -> Result<usize, AffinityError> {
        let path = self.root.join("devices/system/node");
        let entries = std::fs::read_dir(&path).map_err(|source| AffinityError::Read {
            path: path.clone(),
            source,
        })?;
        let mut count = 0;
        for entry in entries {
            let entry = entry.map_err(|source| AffinityError::Read {
                path: path.clone(),
                source,
            })?;
            let name = entry.file_name();
            let is_node = name.to_str().is_some_and(|n| {
                n.strip_prefix("node")
                    .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
            });
            if is_node {
                count += 1;
            }
        }
        Ok(count)
    }

    fn read_cpulist(&self, relative: &str) -> Result<Vec<usize>, AffinityError> {
        let path = self.root.join(relative);
        let text = std::fs::read_to_string(&path).map_err(|source| AffinityError::Read {
            path: path.clone(),
            source,
        })?;
        parse_cpulist(&text).map_err(|source| AffinityError::BadCpuList { path, source })
    }

    /// The cores for polling threads serving `dev`: the cores of its NUMA
    /// node, or all online cores with the reason when that cannot be used.
    /// The choice is logged.
    pub fn placement(&self, dev: Option<Device<'_>>) -> Placement {
        let Some(dev) = dev else {
            log::info!("core placement: no device given, using all online cores");
            return self.fallback(None, PlacementReason::NoDevice);
        };
        let device = dev.to_string();
        let node = match self.device_numa_node(dev) {
            Ok(Some(node)) => node,
            Ok(None) => {
                log::info!("core placement: {device} reports no NUMA node, using all online cores");
                return self.fallback(None, PlacementReason::NoNumaNode { device });
            }
            Err(e) => {
                log::warn!("core placement: {e}; using all online cores");
                let detail = e.to_string();
                return self.fallback(None, PlacementReason::Unavailable { detail });
            }
        };
        match self.node_count() {
            Ok(count) if count <= 1 => {
                log::info!(
                    "core placement: {device} is on the only NUMA node, using all online cores"
                );
                return self.fallback(Some(node), PlacementReason::SingleNode { device });
            }
            Ok(_) => {}
            Err(e) => {
                log::warn!("core placement: {e}; using all online cores");
                let detail = e.to_string();
                return self.fallback(Some(node), PlacementReason::Unavailable { detail });
            }
        }
        match self.node_cpus(node) {
            Ok(cores) if !cores.is_empty() => {
                log::info!("core placement: {device} is on NUMA node {node}, cores {cores:?}");
                Placement::new(
                    Some(node),
                    cores,
                    PlacementReason::DeviceNode { device, node },
                )
            }
            Ok(_) => {
                log::warn!(
                    "core placement: NUMA node {node} of {device} has no CPUs, using all online cores"
                );
                self.fallback(
                    Some(node),
                    PlacementReason::NodeWithoutCpus { device, node },
                )
            }
            Err(e) => {
                log::warn!("core placement: {e}; using all online cores");
                let detail = e.to_string();
                self.fallback(Some(node), PlacementReason::Unavailable { detail })
            }
        }
    }

    /// All online cores; if even those cannot be read, the cores this thread
    /// may run on, and core 0 as the last resort.
    fn fallback(&self, node: Option<u32>, reason: PlacementReason) -> Placement {
        let detail = match self.online_cpus() {
            Ok(cores) if !cores.is_empty() => return Placement::new(node, cores, reason),
            Ok(_) => format!(
                "{} lists no CPUs",
                self.root.join("devices/system/cpu/online").display()
            ),
            Err(e) => e.to_string(),
        };
        log::warn!("core placement: {detail}; using the cores this thread may run on");
        let reason = match reason {
            PlacementReason::NoDevice => PlacementReason::Unavailable { detail },
            other => other,
        };
        Placement::new(node, allowed_cores(), reason)
    }
}

/// The cores the calling thread may run on (its affinity mask).
fn allowed_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|id| id.id).collect())
        .unwrap_or_default()
}

/// The cores for polling threads serving `dev`, read from the live `/sys`.
/// See [`Sysfs::placement`].
pub fn placement_for(dev: Option<Device<'_>>) -> Placement {
    Sysfs::system().placement(dev)
}

/// Pins the calling thread to `core`.
///
/// Fails when the core is offline or outside the process's allowed CPU set
/// (taskset, cgroup cpuset).
pub fn pin_current_thread(core: usize) -> Result<(), AffinityError> {
    if core > MAX_CPU {
        return Err(AffinityError::Pin {
            core,
            source: io::Error::new(io::ErrorKind::InvalidInput, "core number out of range"),
        });
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(AffinityError::Pin {
            core,
            // `set_for_current` returns right after `sched_setaffinity`
            // fails, so errno is still that call's.
            source: io::Error::last_os_error(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch sysfs tree, removed on drop.
    struct FakeSysfs {
        root: PathBuf,
    }

    impl FakeSysfs {
        fn new(test: &str) -> FakeSysfs {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let root = std::env::temp_dir().join(format!(
                "mdbus-affinity-{test}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            FakeSysfs { root }
        }

        fn file(&self, relative: &str, content: &str) -> &FakeSysfs {
            let path = self.root.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
            self
        }

        fn dir(&self, relative: &str) -> &FakeSysfs {
            std::fs::create_dir_all(self.root.join(relative)).unwrap();
            self
        }

        /// Two nodes: 0 has cores 0-3,8-11; 1 has 4-7,12-15.
        fn two_nodes(test: &str) -> FakeSysfs {
            let fake = FakeSysfs::new(test);
            fake.file("devices/system/cpu/online", "0-15\n")
                .file("devices/system/node/node0/cpulist", "0-3,8-11\n")
                .file("devices/system/node/node1/cpulist", "4-7,12-15\n")
                .file("devices/system/node/online", "0-1\n");
            fake
        }

        fn sysfs(&self) -> Sysfs {
            Sysfs::at(&self.root)
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn cpulist_ranges_and_singles() {
        assert_eq!(
            parse_cpulist("0-3,8-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 9, 10, 11]
        );
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        assert_eq!(parse_cpulist("7,2-3,2").unwrap(), vec![2, 3, 7]);
        assert_eq!(parse_cpulist("4-4").unwrap(), vec![4]);
        assert_eq!(parse_cpulist(" 1 , 3 - 4 ").unwrap(), vec![1, 3, 4]);
    }

    #[test]
    fn cpulist_empty_means_no_cpus() {
        assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn cpulist_rejects_bad_input() {
        assert_eq!(
            parse_cpulist("0,,2"),
            Err(CpuListError::EmptyEntry { position: 1 })
        );
        assert_eq!(
            parse_cpulist("0-3,"),
            Err(CpuListError::EmptyEntry { position: 1 })
        );
        assert_eq!(
            parse_cpulist("a-3"),
            Err(CpuListError::NotANumber {
                entry: "a-3".into()
            })
        );
        assert_eq!(
            parse_cpulist("1-"),
            Err(CpuListError::NotANumber { entry: "1-".into() })
        );
        assert_eq!(
            parse_cpulist("-1"),
            Err(CpuListError::NotANumber { entry: "-1".into() })
        );
        assert_eq!(
            parse_cpulist("+1"),
            Err(CpuListError::NotANumber { entry: "+1".into() })
        );
        assert_eq!(
            parse_cpulist("0-7:2"),
            Err(CpuListError::NotANumber {
                entry: "0-7:2".into()
            })
        );
        assert_eq!(
            parse_cpulist("1-2-3"),
            Err(CpuListError::NotANumber {
                entry: "1-2-3".into()
            })
        );
        assert_eq!(
            parse_cpulist("5-2"),
            Err(CpuListError::Reversed { first: 5, last: 2 })
        );
        assert_eq!(
            parse_cpulist("0-100000"),
            Err(CpuListError::TooLarge { cpu: 100000 })
        );
        assert_eq!(
            parse_cpulist("99999999999999999999999"),
            Err(CpuListError::TooLarge { cpu: usize::MAX })
        );
    }

    #[test]
    fn numa_node_of_net_and_rdma_devices() {
        let fake = FakeSysfs::two_nodes("numa-node");
        fake.file("class/net/eth1/device/numa_node", "1\n")
            .file("class/infiniband/mlx5_0/device/numa_node", "0\n")
            .file("class/net/eth2/device/numa_node", "-1\n")
            .dir("class/net/lo");
        let sysfs = fake.sysfs();
        assert_eq!(
            sysfs.device_numa_node(Device::Net("eth1")).unwrap(),
            Some(1)
        );
        assert_eq!(
            sysfs.device_numa_node(Device::Rdma("mlx5_0")).unwrap(),
            Some(0)
        );
        assert_eq!(sysfs.device_numa_node(Device::Net("eth2")).unwrap(), None);
        assert_eq!(sysfs.device_numa_node(Device::Net("lo")).unwrap(), None);
        assert_eq!(sysfs.node_count().unwrap(), 2);
        assert_eq!(
            sysfs.node_cpus(1).unwrap(),
            vec![4, 5, 6, 7, 12, 13, 14, 15]
        );
    }

    #[test]
    fn missing_device_names_device_and_path() {
        let fake = FakeSysfs::two_nodes("missing-device");
        let err = fake
            .sysfs()
            .device_numa_node(Device::Rdma("mlx5_9"))
            .unwrap_err();
        assert!(
            matches!(err, AffinityError::DeviceNotFound { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("RDMA device mlx5_9"), "{text}");
        assert!(text.contains("class/infiniband/mlx5_9"), "{text}");
    }

    #[test]
    fn device_names_cannot_leave_their_class_directory() {
        let fake = FakeSysfs::two_nodes("bad-name");
        for name in ["", "..", "../net/eth0", "a/b"] {
            let err = fake
                .sysfs()
                .device_numa_node(Device::Net(name))
                .unwrap_err();
            assert!(
                matches!(err, AffinityError::InvalidDeviceName { .. }),
                "{name:?}: {err:?}"
            );
        }
    }

    #[test]
    fn garbage_numa_node_is_an_error() {
        let fake = FakeSysfs::two_nodes("bad-numa");
        fake.file("class/net/eth1/device/numa_node", "zero\n");
        let err = fake
            .sysfs()
            .device_numa_node(Device::Net("eth1"))
            .unwrap_err();
        match &err {
            AffinityError::BadNumaNode { value, path, .. } => {
                assert_eq!(value, "zero");
                assert!(path.ends_with("class/net/eth1/device/numa_node"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn placement_uses_the_device_node() {
        let fake = FakeSysfs::two_nodes("device-node");
        fake.file("class/net/eth1/device/numa_node", "1\n");
        let placement = fake.sysfs().placement(Some(Device::Net("eth1")));
        assert_eq!(placement.node(), Some(1));
        assert_eq!(placement.cores(), &[4, 5, 6, 7, 12, 13, 14, 15]);
        assert_eq!(
            placement.reason(),
            &PlacementReason::DeviceNode {
                device: "network device eth1".into(),
                node: 1
            }
        );
        assert_eq!(placement.core(0), 4);
        assert_eq!(placement.core(1), 5);
        assert_eq!(placement.core(8), 4, "round robin wraps");
        assert_eq!(placement.core(15), 15);
    }

    #[test]
    fn placement_without_device_uses_all_online_cores() {
        let fake = FakeSysfs::two_nodes("no-device");
        let placement = fake.sysfs().placement(None);
        assert_eq!(placement.reason(), &PlacementReason::NoDevice);
        assert_eq!(placement.cores(), (0..16).collect::<Vec<_>>().as_slice());
        assert_eq!(placement.node(), None);
    }

    #[test]
    fn placement_falls_back_when_device_has_no_node() {
        let fake = FakeSysfs::two_nodes("minus-one");
        fake.file("class/infiniband/rxe0/device/numa_node", "-1\n");
        let placement = fake.sysfs().placement(Some(Device::Rdma("rxe0")));
        assert_eq!(
            placement.reason(),
            &PlacementReason::NoNumaNode {
                device: "RDMA device rxe0".into()
            }
        );
        assert_eq!(placement.cores().len(), 16);
        assert!(placement.reason().to_string().contains("all online cores"));
    }

    #[test]
    fn placement_falls_back_on_a_single_node() {
        let fake = FakeSysfs::new("single-node");
        fake.file("devices/system/cpu/online", "0-1\n")
            .file("devices/system/node/node0/cpulist", "0-1\n")
            .file("class/net/eth0/device/numa_node", "0\n");
        let placement = fake.sysfs().placement(Some(Device::Net("eth0")));
        assert_eq!(
            placement.reason(),
            &PlacementReason::SingleNode {
                device: "network device eth0".into()
            }
        );
        assert_eq!(placement.node(), Some(0));
        assert_eq!(placement.cores(), &[0, 1]);
    }

    #[test]
    fn placement_falls_back_on_a_memory_only_node() {
        let fake = FakeSysfs::two_nodes("memory-only");
        fake.file("devices/system/node/node2/cpulist", "\n")
            .file("class/net/eth3/device/numa_node", "2\n");
        let placement = fake.sysfs().placement(Some(Device::Net("eth3")));
        assert_eq!(
            placement.reason(),
            &PlacementReason::NodeWithoutCpus {
                device: "network device eth3".into(),
                node: 2
            }
        );
        assert_eq!(placement.cores().len(), 16);
    }

    #[test]
    fn placement_reports_a_missing_device() {
        let fake = FakeSysfs::two_nodes("placement-missing");
        let placement = fake.sysfs().placement(Some(Device::Net("eth7")));
        match placement.reason() {
            PlacementReason::Unavailable { detail } => {
                assert!(detail.contains("network device eth7"), "{detail}");
                assert!(detail.contains("class/net/eth7"), "{detail}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(placement.cores().len(), 16);
    }

    #[test]
    fn placement_reports_a_bad_cpulist() {
        let fake = FakeSysfs::two_nodes("bad-cpulist");
        fake.file("devices/system/node/node1/cpulist", "4-x\n")
            .file("class/net/eth1/device/numa_node", "1\n");
        let placement = fake.sysfs().placement(Some(Device::Net("eth1")));
        match placement.reason() {
            PlacementReason::Unavailable { detail } => {
                assert!(detail.contains("node1/cpulist"), "{detail}");
                assert!(detail.contains("\"4-x\""), "{detail}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(placement.node(), Some(1));
    }

    #[test]
    fn placement_without_sysfs_still_has_cores() {
        let fake = FakeSysfs::new("empty-tree");
        let placement = fake.sysfs().placement(None);
        match placement.reason() {
            PlacementReason::Unavailable { detail } => {
                assert!(detail.contains("devices/system/cpu/online"), "{detail}")
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(!placement.cores().is_empty());
        let placement = fake.sysfs().placement(Some(Device::Net("eth0")));
        assert!(matches!(
            placement.reason(),
            PlacementReason::Unavailable { .. }
        ));
        assert!(!placement.cores().is_empty());
    }

    #[test]
    fn explicit_cores_are_sorted_and_never_empty() {
        let placement = Placement::from_cores([3, 1, 3]);
        assert_eq!(placement.cores(), &[1, 3]);
        assert_eq!(placement.reason(), &PlacementReason::Explicit);
        assert_eq!(Placement::from_cores([]).cores(), &[0]);
    }

    #[test]
    fn pinning_to_an_impossible_core_fails_with_the_core_number() {
        let err = pin_current_thread(MAX_CPU + 1).unwrap_err();
        assert!(err.to_string().contains(&format!("core {}", MAX_CPU + 1)));
        // A core that exists in the mask type but not on this machine.
        let err = pin_current_thread(1023).unwrap_err();
        assert!(matches!(err, AffinityError::Pin { core: 1023, .. }));
    }

    #[test]
    fn pinning_to_an_allowed_core_succeeds() {
        let allowed = allowed_cores();
        let core = *allowed.last().expect("this thread may run somewhere");
        std::thread::spawn(move || {
            pin_current_thread(core).unwrap();
            assert_eq!(allowed_cores(), vec![core]);
        })
        .join()
        .unwrap();
    }
}
