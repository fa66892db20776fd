//! The polling cores: frequency governor, idle states, isolation from the
//! scheduler, and interrupts of the NIC kept off them.

use std::collections::BTreeMap;

use mdbus::affinity::{parse_cpulist, Device};

use crate::host::{format_cpulist, Host};
use crate::net::{irq_list, irq_paths, NicIrqs, Targets};
use crate::{Item, Options};

/// An idle state with a longer exit latency than this (µs) costs a
/// polling thread's neighbours wake-up time: C1 (1-2 µs) passes, C1E and
/// deeper do not (the `intel_idle.max_cstate=1` advice of tuning guides).
const MAX_EXIT_LATENCY_US: u64 = 2;

/// The cores the CPU checks cover.
#[derive(Debug)]
pub(crate) struct Polling {
    /// The cores.
    pub(crate) cores: Vec<usize>,
    /// Whether they were given (options or configuration); otherwise they
    /// are all online cores and isolation is not checked.
    pub(crate) explicit: bool,
    /// When not given: a device to ask `mdbus::affinity` about.
    device: Option<String>,
}

/// The polling cores of the options (each must be online), or every
/// online core.
pub(crate) fn polling_cores(
    host: &Host,
    opts: &Options,
    t: &Targets,
    items: &mut Vec<Item>,
) -> Polling {
    let online = host.sysfs().online_cpus();
    let device = t
        .rdma
        .first()
        .map(|(d, _)| d.clone())
        .or_else(|| t.interfaces.first().cloned());
    if opts.cores.is_empty() {
        let cores = match online {
            Ok(c) => c,
            Err(e) => {
                items.push(
                    Item::start("cores", "host")
                        .want("the online cores listed")
                        .warn(e.to_string(), "check /sys/devices/system/cpu/online"),
                );
                Vec::new()
            }
        };
        return Polling {
            cores,
            explicit: false,
            device,
        };
    }
    let mut cores = opts.cores.clone();
    cores.sort_unstable();
    cores.dedup();
    if let Ok(online) = online {
        let offline: Vec<usize> = cores
            .iter()
            .filter(|c| !online.contains(c))
            .copied()
            .collect();
        if !offline.is_empty() {
            items.push(
                Item::start("cores", format!("cpu {}", format_cpulist(&cores)))
                    .want("online cores")
                    .fail(
                        format!(
                            "cpu {} not online (online: {})",
                            format_cpulist(&offline),
                            format_cpulist(&online)
                        ),
                        "choose online cores (`lscpu`) for --cores, thread.core or service.core",
                    ),
            );
            cores.retain(|c| online.contains(c));
        }
    }
    Polling {
        cores,
        explicit: true,
        device,
    }
}

/// `value on cores; value on cores` for a per-core reading.
fn by_value(values: &BTreeMap<usize, String>) -> String {
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (core, v) in values {
        groups.entry(v).or_default().push(*core);
    }
    groups
        .iter()
        .map(|(v, cores)| format!("{v} on {}", format_cpulist(cores)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The governor and idle-state items of the polling cores.
pub(crate) fn check(host: &Host, polling: &Polling, items: &mut Vec<Item>) {
    if polling.cores.is_empty() {
        return;
    }
    let list = format_cpulist(&polling.cores);
    let subject = format!("cpu {list}");

    let item = Item::start("cpu_governor", subject.clone()).want("performance");
    let mut governors = BTreeMap::new();
    for c in &polling.cores {
        if let Some(g) = host.read_opt(&format!(
            "sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
        )) {
            governors.insert(*c, g);
        }
    }
    let slow: Vec<usize> = governors
        .iter()
        .filter(|(_, g)| *g != "performance")
        .map(|(c, _)| *c)
        .collect();
    items.push(if governors.is_empty() {
        item.warn(
            "unknown: no cpufreq/scaling_governor (no frequency driver: a virtual machine, or the firmware decides)",
            "set the firmware's power profile to maximum performance (and the hypervisor's, for a VM)",
        )
    } else if slow.is_empty() && governors.len() == polling.cores.len() {
        item.pass(by_value(&governors))
    } else {
        let fix_cores = if slow.is_empty() {
            list.clone()
        } else {
            format_cpulist(&slow)
        };
        item.warn(
            by_value(&governors),
            format!(
                "sudo cpupower -c {fix_cores} frequency-set -g performance (persist: `tuned-adm profile latency-performance`)"
            ),
        )
    });

    let item = Item::start("cpu_cstates", subject.clone()).want(format!(
        "no idle state deeper than {MAX_EXIT_LATENCY_US} us exit latency enabled"
    ));
    let driver = host
        .read_opt("sys/devices/system/cpu/cpuidle/current_driver")
        .unwrap_or_else(|| "none".into());
    // Deep enabled states by name and latency, with the cores that have them.
    let mut deep: BTreeMap<(u64, String), Vec<usize>> = BTreeMap::new();
    let mut shallow: BTreeMap<(u64, String), Vec<usize>> = BTreeMap::new();
    for c in &polling.cores {
        let dir = format!("sys/devices/system/cpu/cpu{c}/cpuidle");
        for state in host.list(&dir) {
            if !state.starts_with("state") {
                continue;
            }
            let read = |f: &str| host.read_opt(&format!("{dir}/{state}/{f}"));
            let name = read("name").unwrap_or_else(|| state.clone());
            let latency: u64 = read("latency").and_then(|l| l.parse().ok()).unwrap_or(0);
            let disabled = read("disable").as_deref() == Some("1");
            if disabled {
                continue;
            }
            let map = if latency > MAX_EXIT_LATENCY_US {
                &mut deep
            } else {
                &mut shallow
            };
            map.entry((latency, name)).or_default().push(*c);
        }
    }
    let describe = |m: &BTreeMap<(u64, String), Vec<usize>>| {
        m.iter()
            .rev()
            .map(|((lat, name), cores)| format!("{name} ({lat} us) on {}", format_cpulist(cores)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    items.push(if deep.is_empty() {
        item.pass(if shallow.is_empty() {
            format!("no idle states (cpuidle driver {driver})")
        } else {
            format!("driver {driver}; enabled: {}", describe(&shallow))
        })
    } else {
        item.warn(
            format!("driver {driver}; enabled: {}", describe(&deep)),
            format!(
                "sudo cpupower -c {list} idle-set -D {MAX_EXIT_LATENCY_US} (persist: kernel parameters intel_idle.max_cstate=1 processor.max_cstate=1, or `tuned-adm profile latency-performance`)"
            ),
        )
    });
}

/// The CPUs a kernel parameter lists (`isolcpus=nohz,domain,2-3` gives
/// 2-3: flags dropped); `None` when the parameter is absent. Parameters
/// after `--` belong to init and are not read.
fn cmdline_cpus(cmdline: &str, key: &str) -> Option<Vec<usize>> {
    let value = cmdline
        .split_whitespace()
        .take_while(|w| *w != "--")
        .filter_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .last()?;
    let list: Vec<&str> = value
        .split(',')
        .filter(|p| p.bytes().next().is_some_and(|b| b.is_ascii_digit()))
        .collect();
    parse_cpulist(&list.join(",")).ok()
}

/// A sysfs CPU list that may be empty or `(null)`.
fn sys_cpus(host: &Host, rel: &str) -> Vec<usize> {
    host.read_opt(rel)
        .and_then(|t| parse_cpulist(&t).ok())
        .unwrap_or_default()
}

/// Whether the polling cores are isolated and free of the NIC's IRQs.
pub(crate) fn check_isolation(
    host: &Host,
    polling: &Polling,
    nics: &[NicIrqs],
    items: &mut Vec<Item>,
) {
    if !polling.explicit {
        let placement = host.sysfs().placement(polling.device.as_deref().map(|d| {
            if host.exists(&format!("sys/class/infiniband/{d}")) {
                Device::Rdma(d)
            } else {
                Device::Net(d)
            }
        }));
        items.push(
            Item::start("core_isolation", "polling cores")
                .want("polling cores named and isolated")
                .warn(
                    format!(
                        "no polling cores given; the bus would pick from cpu {} ({})",
                        format_cpulist(placement.cores()),
                        placement.reason()
                    ),
                    "name them (--cores, or thread.core / service.core in the configuration) and isolate them",
                ),
        );
        return;
    }
    if polling.cores.is_empty() {
        return;
    }
    let list = format_cpulist(&polling.cores);
    let subject = format!("cpu {list}");
    let cmdline = host.read_opt("proc/cmdline").unwrap_or_default();
    let mut isolated = sys_cpus(host, "sys/devices/system/cpu/isolated");
    isolated.extend(cmdline_cpus(&cmdline, "isolcpus").unwrap_or_default());
    let mut nohz = sys_cpus(host, "sys/devices/system/cpu/nohz_full");
    nohz.extend(cmdline_cpus(&cmdline, "nohz_full").unwrap_or_default());
    let missing = |set: &[usize]| -> Vec<usize> {
        polling
            .cores
            .iter()
            .filter(|c| !set.contains(c))
            .copied()
            .collect()
    };
    let (not_isolated, not_nohz) = (missing(&isolated), missing(&nohz));
    let found = format!(
        "isolated {}; nohz_full {}",
        format_cpulist(&isolated),
        format_cpulist(&nohz)
    );
    let item = Item::start("core_isolation", subject.clone())
        .want("every polling core in isolcpus and nohz_full");
    items.push(if not_isolated.is_empty() && not_nohz.is_empty() {
        item.pass(found)
    } else {
        let mut params = Vec::new();
        if !not_isolated.is_empty() {
            params.push(format!("isolcpus={list}"));
        }
        if !not_nohz.is_empty() {
            params.push(format!("nohz_full={list} rcu_nocbs={list}"));
        }
        item.warn(
            found,
            format!(
                "add `{}` to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, `sudo update-grub`, reboot)",
                params.join(" ")
            ),
        )
    });

    let item =
        Item::start("irq_polling_cores", subject).want("no NIC IRQ allowed on a polling core");
    let mut on_polling: Vec<&(u32, Vec<usize>)> = Vec::new();
    let mut total = 0;
    let mut names = Vec::new();
    for nic in nics {
        total += nic.irqs.len();
        names.push(nic.interface.as_str());
        on_polling.extend(
            nic.irqs
                .iter()
                .filter(|(_, cpus)| cpus.iter().any(|c| polling.cores.contains(c))),
        );
    }
    if nics.is_empty() {
        items.push(item.pass("no NIC to check (no --device, --interface or configured address)"));
        return;
    }
    let others: Vec<usize> = host
        .sysfs()
        .online_cpus()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !polling.cores.contains(c))
        .collect();
    items.push(if on_polling.is_empty() {
        item.pass(format!(
            "{total} IRQs of {} off cpu {list}",
            names.join(",")
        ))
    } else {
        item.fail(
            format!(
                "{} of {total} IRQs of {} may run on cpu {list}: {}",
                on_polling.len(),
                names.join(","),
                irq_list(&on_polling, 4)
            ),
            format!(
                "echo {} | sudo tee {}; stop irqbalance from moving them back (`sudo systemctl disable --now irqbalance`)",
                format_cpulist(&others),
                irq_paths(&on_polling.iter().map(|(i, _)| *i).collect::<Vec<_>>())
            ),
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_parameters_give_their_cpus() {
        let line = "ro quiet isolcpus=nohz,domain,2-3,6 nohz_full=2-3 -- isolcpus=9";
        assert_eq!(cmdline_cpus(line, "isolcpus"), Some(vec![2, 3, 6]));
        assert_eq!(cmdline_cpus(line, "nohz_full"), Some(vec![2, 3]));
        assert_eq!(cmdline_cpus(line, "rcu_nocbs"), None);
        assert_eq!(
            cmdline_cpus("isolcpus=managed_irq", "isolcpus"),
            Some(vec![])
        );
    }
}
