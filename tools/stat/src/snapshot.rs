//! The buses of a host: their counters files, read without locks while
//! the owners run (and the error logs of those that died).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mdbus::counters::errorlog::Entry;
use mdbus::counters::{CountersError, CountersReader, Kind};

/// One counter of a bus.
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    /// Its label in the file (`sub.md.messages`).
    pub label: String,
    /// Counter or gauge.
    pub kind: Kind,
    /// Its value.
    pub value: u64,
    /// Per second since the previous sample (counters only, from the
    /// second sample on).
    pub per_sec: Option<f64>,
}

/// One bus (one counters file).
#[derive(Debug, Clone)]
pub struct Bus {
    /// The counters file.
    pub path: PathBuf,
    /// The owner's name.
    pub name: String,
    /// The owner's pid.
    pub pid: u32,
    /// Whether the owner still runs.
    pub alive: bool,
    /// When the owner started, ns since the Unix epoch.
    pub start_ns: u64,
    /// The owner's last refresh, ns since the Unix epoch (0: never).
    pub updated_ns: u64,
    /// Every counter, in slot order.
    pub counters: Vec<Counter>,
    /// The error log.
    pub errors: Vec<Entry>,
    /// Distinct errors the full log could not keep.
    pub errors_lost: u64,
    /// The UDP sockets of the owner process (filled by
    /// [`Bus::read_udp`]).
    pub udp: Vec<crate::procfs::UdpSocket>,
}

impl Bus {
    /// Reads the kernel's figures of the owner's UDP sockets from `proc`
    /// (`/proc`), for a live owner.
    pub fn read_udp(&mut self, proc: &Path) {
        if self.alive {
            self.udp = crate::procfs::udp_sockets(proc, self.pid);
        }
    }

    /// "alive" or "stale".
    pub fn state(&self) -> &'static str {
        if self.alive {
            "alive"
        } else {
            "stale"
        }
    }

    /// The value of `label`.
    pub fn value(&self, label: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|c| c.label == label)
            .map(|c| c.value)
    }
}

/// The counters files in `dirs` (what `mdbus::leftovers` recognises as
/// one), sorted by path.
pub fn counters_files(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        // A directory that does not exist holds no buses.
        if let Ok(found) = mdbus::leftovers::list(dir) {
            files.extend(
                found
                    .into_iter()
                    .filter(|l| l.what == mdbus::counters::FORMAT.what)
                    .map(|l| l.path),
            );
        }
    }
    files.sort();
    files.dedup();
    files
}

/// Samples counters files again and again, keeping each file open and the
/// previous values for rates.
#[derive(Debug, Default)]
pub struct Sampler {
    readers: HashMap<PathBuf, CountersReader>,
    previous: HashMap<PathBuf, (Instant, Vec<u64>)>,
}

impl Sampler {
    /// A sampler with nothing open.
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// Reads `path` (its owner alive or not).
    pub fn sample(&mut self, path: &Path) -> Result<Bus, CountersError> {
        if !self.readers.contains_key(path) {
            let r = CountersReader::open_unchecked(path)?;
            self.readers.insert(path.to_path_buf(), r);
        }
        let r = self.readers.get_mut(path).expect("inserted above");
        r.refresh()?;
        let now = Instant::now();
        let values = r.values();
        let owner = r.owner();
        let prev = self.previous.get(path);
        let counters = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let kind = r.kind(i).unwrap_or(Kind::Counter);
                let per_sec = match (kind, prev) {
                    (Kind::Counter, Some((t, old))) => old.get(i).map(|o| {
                        v.saturating_sub(*o) as f64 / now.duration_since(*t).as_secs_f64().max(1e-9)
                    }),
                    _ => None,
                };
                Counter {
                    label: r.label(i).unwrap_or_default().to_string(),
                    kind,
                    value: *v,
                    per_sec,
                }
            })
            .collect();
        let bus = Bus {
            path: path.to_path_buf(),
            name: owner.name,
            pid: owner.pid,
            alive: r.owner_alive(),
            start_ns: owner.start_time_ns,
            updated_ns: r.updated_ns(),
            counters,
            errors: r.errors(),
            errors_lost: r.errors_lost(),
            udp: Vec::new(),
        };
        self.previous.insert(path.to_path_buf(), (now, values));
        Ok(bus)
    }

    /// Forgets files no longer sampled (their owners' files were removed).
    pub fn retain(&mut self, paths: &[PathBuf]) {
        self.readers.retain(|p, _| paths.contains(p));
        self.previous.retain(|p, _| paths.contains(p));
    }
}

/// The RDMA ports buses say they use (`port.DEV/PORT.open` set to 1).
pub fn ports_in_use(buses: &[Bus]) -> Vec<(String, u8)> {
    let mut ports = Vec::new();
    for b in buses.iter().filter(|b| b.alive) {
        for c in &b.counters {
            let Some(rest) = c.label.strip_prefix("port.") else {
                continue;
            };
            let Some(name) = rest.strip_suffix(".open") else {
                continue;
            };
            if c.value == 0 {
                continue;
            }
            if let Ok(p) = crate::sysfs::parse_device(name) {
                if !ports.contains(&p) {
                    ports.push(p);
                }
            }
        }
    }
    ports
}
