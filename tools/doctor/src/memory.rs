//! Memory: huge pages, transparent huge pages, the memlock limit, swap.

use mdbus::config::{bytes_text as bytes, HugePages};
use mdbus::TransportKind;

use crate::host::Host;
use crate::{BusNeeds, Item};

/// The huge page size the shared-memory segments use.
const HUGE_PAGE: u64 = mdbus::sys::hugepages::HUGE_PAGE as u64;

/// Swappiness at or below which swap only happens under real pressure.
const MAX_SWAPPINESS: u64 = 10;

pub(crate) fn check(host: &Host, bus: Option<&BusNeeds>, items: &mut Vec<Item>) {
    huge_pages(host, bus, items);
    transparent_huge_pages(host, items);
    memlock(host, bus, items);
    swap(host, items);
}

/// Whether the configuration puts segments in shared memory.
fn uses_shm(bus: &BusNeeds) -> bool {
    matches!(bus.transport, TransportKind::Shm | TransportKind::Auto)
}

fn huge_pages(host: &Host, bus: Option<&BusNeeds>, items: &mut Vec<Item>) {
    let dir = format!("sys/kernel/mm/hugepages/hugepages-{}kB", HUGE_PAGE >> 10);
    let item = Item::start("huge_pages", "host");
    if let Some(b) = bus {
        if !uses_shm(b) || b.huge_page_policy == HugePages::Off || b.segment_bytes == 0 {
            let why = if b.huge_page_policy == HugePages::Off {
                "shm.huge_pages = \"off\"".to_string()
            } else if !uses_shm(b) {
                format!("transport {}", b.transport.name())
            } else {
                "no shared-memory channel listed".to_string()
            };
            items.push(item.want("none needed").pass(format!("not used ({why})")));
            return;
        }
    }
    let need = bus.map(|b| b.huge_pages);
    let item = item.want(match need {
        Some(n) => format!("at least {n} free 2 MiB pages for the segments, hugetlbfs mounted"),
        None => "2 MiB pages reserved".into(),
    });
    let sysctl = |n: u64| {
        format!(
            "sudo sysctl -w vm.nr_hugepages={n} (persist: vm.nr_hugepages = {n} in /etc/sysctl.d/80-mdbus.conf)"
        )
    };
    let read = |f: &str| -> Result<u64, String> {
        let t = host.read(&format!("{dir}/{f}"))?;
        t.parse()
            .map_err(|_| format!("{dir}/{f} holds {t:?}, not a count"))
    };
    let (nr, free) = match (read("nr_hugepages"), read("free_hugepages")) {
        (Ok(nr), Ok(free)) => (nr, free),
        (Err(e), _) | (_, Err(e)) => {
            items.push(item.warn(e, sysctl(need.unwrap_or(1024))));
            return;
        }
    };
    let found = format!("{nr} reserved, {free} free (2 MiB)");
    let Some(b) = bus else {
        items.push(if nr > 0 {
            item.pass(found)
        } else {
            item.warn(found, sysctl(1024))
        });
        return;
    };
    let need = need.unwrap_or(0);
    let short = if b.huge_page_policy == HugePages::Require {
        crate::Status::Fail
    } else {
        crate::Status::Warn
    };
    if free < need {
        let fix = sysctl(nr + need - free);
        items.push(item.status(
            short,
            format!(
                "{found}; the segments need {need} for {}",
                bytes(b.segment_bytes)
            ),
            fix,
        ));
        return;
    }
    let mount = b.hugetlbfs.display().to_string();
    let mounted = host.read_opt("proc/mounts").is_some_and(|m| {
        m.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 2 && f[1] == mount && f[2] == "hugetlbfs"
        })
    });
    items.push(if mounted {
        item.pass(format!("{found}; hugetlbfs at {mount}"))
    } else {
        item.status(
            short,
            format!("{found}; no hugetlbfs mounted at {mount} (shm.hugetlbfs)"),
            format!("sudo mkdir -p {mount} && sudo mount -t hugetlbfs hugetlbfs {mount} (persist in /etc/fstab)"),
        )
    });
}

fn transparent_huge_pages(host: &Host, items: &mut Vec<Item>) {
    let rel = "sys/kernel/mm/transparent_hugepage/enabled";
    let item = Item::start("transparent_huge_pages", "host")
        .want("madvise (the verbs pools ask for them; nothing else is compacted for them)");
    let Some(text) = host.read_opt(rel) else {
        items.push(item.pass("not in this kernel"));
        return;
    };
    let mode = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or(&text)
        .to_string();
    let fix = "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled (persist: kernel parameter transparent_hugepage=madvise)";
    items.push(match mode.as_str() {
        "madvise" => item.pass(mode),
        "always" => item.warn(
            "always: khugepaged and compaction can stall any thread that allocates",
            fix,
        ),
        "never" => item.warn("never: the verbs pools' huge-page advice does nothing", fix),
        other => item.warn(format!("{other:?}"), fix),
    });
}

/// The soft `Max locked memory` limit of `/proc/self/limits`: `None` for
/// unlimited.
fn memlock_limit(limits: &str) -> Result<Option<u64>, String> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .ok_or("no `Max locked memory` line")?;
    let soft = line["Max locked memory".len()..]
        .split_whitespace()
        .next()
        .ok_or("an empty `Max locked memory` line")?;
    if soft == "unlimited" {
        return Ok(None);
    }
    soft.parse()
        .map(Some)
        .map_err(|_| format!("`Max locked memory` soft limit {soft:?} is not a number"))
}

fn memlock(host: &Host, bus: Option<&BusNeeds>, items: &mut Vec<Item>) {
    let item = Item::start("memlock", "limit");
    // What the bus locks: every channel when verbs registers them (auto
    // may pick verbs), the segments when shm.mlock locks them.
    let need = bus.and_then(|b| match b.transport {
        TransportKind::Verbs | TransportKind::Auto => Some((b.channel_bytes, true)),
        TransportKind::Shm if b.mlock => Some((b.segment_bytes, false)),
        _ => None,
    });
    let item = item.want(match need {
        Some((n, _)) => format!("unlimited, or at least {} for the channels", bytes(n)),
        None => "unlimited (RDMA registers every ring and pool)".into(),
    });
    let fix = "LimitMEMLOCK=infinity in the service's unit (packaging/mdbus-relay.service has it); for a login shell, `mdbus - memlock unlimited` in /etc/security/limits.d/mdbus.conf";
    let whose = if host.is_live() {
        " (of this process: a service gets its unit's LimitMEMLOCK)"
    } else {
        ""
    };
    let limit = host
        .read("proc/self/limits")
        .and_then(|t| memlock_limit(&t));
    items.push(match limit {
        Err(e) => item.warn(e, fix),
        Ok(None) => item.pass(format!("unlimited{whose}")),
        Ok(Some(limit)) => {
            let found = format!("{}{whose}", bytes(limit));
            match (bus.is_some(), need) {
                (_, Some((n, _))) if n <= limit => {
                    item.pass(format!("{found}, channels need {}", bytes(n)))
                }
                (_, Some((n, true))) => item.fail(
                    format!(
                        "{found}: registering the channels' {} will fail (ENOMEM)",
                        bytes(n)
                    ),
                    fix,
                ),
                (_, Some((n, false))) => item.warn(
                    format!("{found}: shm.mlock cannot lock the segments' {}", bytes(n)),
                    fix,
                ),
                (true, None) => item.pass(format!("{found}; this transport locks nothing")),
                (false, None) => item.warn(
                    format!("{found}; what the bus needs is unknown without --config"),
                    fix,
                ),
            }
        }
    });
}

fn swap(host: &Host, items: &mut Vec<Item>) {
    let item = Item::start("swap", "host").want(format!(
        "no swap, or vm.swappiness at most {MAX_SWAPPINESS}"
    ));
    let fix = "sudo sysctl -w vm.swappiness=1 (persist in /etc/sysctl.d/80-mdbus.conf), or `sudo swapoff -a`";
    let swaps = match host.read("proc/swaps") {
        Ok(s) => s,
        Err(e) => {
            items.push(item.warn(e, fix));
            return;
        }
    };
    let mut devices = 0;
    let mut kib = 0u64;
    for line in swaps.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 3 {
            devices += 1;
            kib = kib.saturating_add(f[2].parse().unwrap_or(0));
        }
    }
    let swappiness = host
        .read_opt("proc/sys/vm/swappiness")
        .and_then(|s| s.parse::<u64>().ok());
    let sw = swappiness.map_or("unknown".into(), |s| s.to_string());
    if devices == 0 {
        items.push(item.pass(format!("no swap (vm.swappiness {sw})")));
        return;
    }
    let found = format!(
        "{devices} swap device(s), {}; vm.swappiness {sw}",
        bytes(kib.saturating_mul(1024))
    );
    items.push(match swappiness {
        Some(s) if s <= MAX_SWAPPINESS => item.pass(found),
        _ => item.warn(found, fix),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_lines_give_the_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max locked memory         8388608              8388608              bytes\n";
        assert_eq!(memlock_limit(limits), Ok(Some(8 << 20)));
        let unlimited =
            "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(memlock_limit(unlimited), Ok(None));
        assert!(memlock_limit("Max open files 1024 1024 files\n").is_err());
        assert!(memlock_limit("Max locked memory   lots  lots bytes\n")
            .unwrap_err()
            .contains("\"lots\""));
    }
}
