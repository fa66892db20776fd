//! Network interfaces and RDMA ports: which ones the options name, their
//! IRQs and NUMA node, energy-efficient Ethernet, and for RoCE the port
//! state, MTU, GID type and PFC/ECN.

use std::net::Ipv4Addr;

use mdbus::affinity::Device;
use mdbus::TransportKind;
use mdbus_tool_support::rdma::gid_ipv4;

use crate::host::{format_cpulist, valid_name, Host};
use crate::{BusNeeds, Item, Options, Status};

/// The interfaces and RDMA ports a run checks.
#[derive(Debug, Default)]
pub(crate) struct Targets {
    /// Network interfaces, in the order found, without duplicates.
    pub(crate) interfaces: Vec<String>,
    /// RDMA devices and ports.
    pub(crate) rdma: Vec<(String, u8)>,
}

impl Targets {
    fn add_interface(&mut self, name: &str) {
        if !self.interfaces.iter().any(|i| i == name) {
            self.interfaces.push(name.to_string());
        }
    }

    fn add_port(&mut self, dev: &str, port: u8) {
        if !self.rdma.iter().any(|(d, p)| d == dev && *p == port) {
            self.rdma.push((dev.to_string(), port));
        }
    }
}

/// An interface's IRQs and the cores each may run on.
#[derive(Debug)]
pub(crate) struct NicIrqs {
    pub(crate) interface: String,
    pub(crate) irqs: Vec<(u32, Vec<usize>)>,
}

/// The ports of RDMA device `dev`.
fn ports(host: &Host, dev: &str) -> Vec<u8> {
    host.list(&format!("sys/class/infiniband/{dev}/ports"))
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The netdevs of a port's GID table entries, by index (`gid_attrs/ndevs/I`;
/// empty entries are left out).
fn port_ndevs(host: &Host, dev: &str, port: u8) -> Vec<(String, String)> {
    let dir = format!("sys/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs");
    host.list(&dir)
        .into_iter()
        .filter_map(|i| {
            let ndev = host.read_opt(&format!("{dir}/{i}"))?;
            (!ndev.is_empty() && valid_name(&ndev)).then_some((i, ndev))
        })
        .collect()
}

/// The netdev of an RDMA port: its GID table's, else the PCI device's.
fn port_netdev(host: &Host, dev: &str, port: u8) -> Option<String> {
    port_ndevs(host, dev, port)
        .into_iter()
        .map(|(_, n)| n)
        .next()
        .or_else(|| {
            host.list(&format!("sys/class/infiniband/{dev}/device/net"))
                .into_iter()
                .next()
        })
}

/// Every RDMA port whose GID table uses netdev `ifname`.
fn ports_of_interface(host: &Host, ifname: &str) -> Vec<(String, u8)> {
    let mut out = Vec::new();
    for dev in host.list("sys/class/infiniband") {
        for port in ports(host, &dev) {
            if port_ndevs(host, &dev, port)
                .iter()
                .any(|(_, n)| n == ifname)
            {
                out.push((dev.clone(), port));
            }
        }
    }
    out
}

/// The interface that has local address `ip`: an RDMA GID holding it, a
/// directly connected route (`/proc/net/route`) covering it, or `lo`.
fn interface_of(host: &Host, ip: Ipv4Addr) -> Option<String> {
    for dev in host.list("sys/class/infiniband") {
        for port in ports(host, &dev) {
            let base = format!("sys/class/infiniband/{dev}/ports/{port}");
            for (idx, ndev) in port_ndevs(host, &dev, port) {
                let gid = host.read_opt(&format!("{base}/gids/{idx}"));
                if gid.as_deref().and_then(gid_ipv4) == Some(ip) {
                    return Some(ndev);
                }
            }
        }
    }
    if ip.is_loopback() {
        return Some("lo".into());
    }
    let routes = host.read_opt("proc/net/route")?;
    let want = u32::from(ip);
    let mut best: Option<(u32, String)> = None;
    for line in routes.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !valid_name(f[0]) {
            continue;
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let (Some(dest), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else {
            continue;
        };
        // The kernel prints each address as the u32 of its network-order
        // bytes on a little-endian host.
        let as_ip = |v: u32| u32::from(Ipv4Addr::from(v.to_le_bytes()));
        let (dest, mask) = (as_ip(dest), as_ip(mask));
        if gw != 0 || mask == 0 || want & mask != dest {
            continue;
        }
        if best
            .as_ref()
            .map_or(true, |(m, _)| mask.count_ones() > m.count_ones())
        {
            best = Some((mask, f[0].to_string()));
        }
    }
    best.map(|(_, name)| name)
}

/// Finds the interfaces and RDMA ports the options name, with an item for
/// each name that is not on this host and each address found or not.
pub(crate) fn resolve(host: &Host, opts: &Options, items: &mut Vec<Item>) -> Targets {
    let mut t = Targets::default();
    let port = opts.bus.as_ref().map(|b| b.port);
    for name in &opts.devices {
        let item =
            Item::start("device", name.clone()).want("an RDMA or network device of this host");
        if !valid_name(name) {
            items.push(item.fail(
                "not a device name",
                "give the bare name, as `ibv_devices` or `ip link` lists it",
            ));
        } else if host.exists(&format!("sys/class/infiniband/{name}")) {
            let ports: Vec<u8> = match port {
                Some(p) => vec![p],
                None => ports(host, name),
            };
            for p in ports {
                t.add_port(name, p);
                if let Some(ndev) = port_netdev(host, name, p) {
                    t.add_interface(&ndev);
                }
            }
        } else if host.exists(&format!("sys/class/net/{name}")) {
            t.add_interface(name);
            for (d, p) in ports_of_interface(host, name) {
                t.add_port(&d, p);
            }
        } else {
            items.push(item.fail(
                format!(
                    "not found in {} or {}",
                    host.path("sys/class/infiniband").display(),
                    host.path("sys/class/net").display()
                ),
                "check the name with `ibv_devices` or `ip link` (threads.device, verbs.device, thread.device)",
            ));
        }
    }
    for name in &opts.interfaces {
        if valid_name(name) && host.exists(&format!("sys/class/net/{name}")) {
            t.add_interface(name);
            for (d, p) in ports_of_interface(host, name) {
                t.add_port(&d, p);
            }
        } else {
            items.push(
                Item::start("interface", name.clone())
                    .want("a network interface of this host")
                    .fail(
                        format!("not found in {}", host.path("sys/class/net").display()),
                        "check the name with `ip link`",
                    ),
            );
        }
    }
    for ip in &opts.addresses {
        let item = Item::start("interface_address", ip.to_string())
            .want("a local address of an interface");
        match interface_of(host, *ip) {
            Some(ifname) => {
                items.push(item.pass(format!("on {ifname}")));
                t.add_interface(&ifname);
                for (d, p) in ports_of_interface(host, &ifname) {
                    if port.map_or(true, |want| want == p) {
                        t.add_port(&d, p);
                    }
                }
            }
            None => items.push(item.fail(
                "no interface has it (RDMA GID tables, /proc/net/route)",
                format!(
                    "add it to the interface (`sudo ip addr add {ip}/24 dev IFACE`) or configure a local address (`ip -4 addr`)"
                ),
            )),
        }
    }
    t
}

/// Whether `term` appears in `text` as a whole name (not followed or
/// preceded by a letter or digit): `eth0` in `eth0-TxRx-0`, not in `eth01`.
fn names(text: &str, term: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(term).any(|(at, _)| {
        !alnum(text[..at].chars().next_back()) && !alnum(text[at + term.len()..].chars().next())
    })
}

/// The IRQs of `ifname`'s device: its `msi_irqs` (for a virtio device,
/// which has none, its PCI parent's; never a PCI device's parent, a bridge
/// with IRQs of its own) and the `/proc/interrupts` lines naming the
/// interface or the device.
fn irqs_of(host: &Host, ifname: &str) -> Vec<u32> {
    let dev = format!("sys/class/net/{ifname}/device");
    let msi = if host.exists(&format!("{dev}/msi_irqs")) {
        format!("{dev}/msi_irqs")
    } else {
        format!("{dev}/../msi_irqs")
    };
    let mut irqs: Vec<u32> = host
        .list(&msi)
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    let mut terms = vec![ifname.to_string()];
    if let Some(link) = host.link_name(&dev) {
        terms.push(link);
    }
    if let Some(text) = host.read_opt("proc/interrupts") {
        for line in text.lines() {
            let Some((irq, rest)) = line.trim_start().split_once(':') else {
                continue;
            };
            let Ok(irq) = irq.parse::<u32>() else {
                continue;
            };
            // The description follows the per-CPU counts.
            let desc: String = rest
                .split_whitespace()
                .skip_while(|w| w.bytes().all(|b| b.is_ascii_digit()))
                .collect::<Vec<_>>()
                .join(" ");
            if terms.iter().any(|t| names(&desc, t)) {
                irqs.push(irq);
            }
        }
    }
    irqs.sort_unstable();
    irqs.dedup();
    irqs
}

/// At most `n` IRQs as `45 (0-15), 46 (0-15)`, and how many more.
pub(crate) fn irq_list(irqs: &[&(u32, Vec<usize>)], n: usize) -> String {
    let mut s: Vec<String> = irqs
        .iter()
        .take(n)
        .map(|(irq, cpus)| format!("irq {irq} on {}", format_cpulist(cpus)))
        .collect();
    if irqs.len() > n {
        s.push(format!("{} more", irqs.len() - n));
    }
    s.join(", ")
}

/// `/proc/irq/N/smp_affinity_list` for IRQs `45, 46` (`{45,46}` for the
/// shell).
pub(crate) fn irq_paths(irqs: &[u32]) -> String {
    match irqs {
        [one] => format!("/proc/irq/{one}/smp_affinity_list"),
        many => format!(
            "/proc/irq/{{{}}}/smp_affinity_list",
            many.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// EEE and IRQ placement of each interface; returns the IRQs found, for
/// the polling-core check.
pub(crate) fn check_interfaces(host: &Host, t: &Targets, items: &mut Vec<Item>) -> Vec<NicIrqs> {
    let mut out = Vec::new();
    for ifname in &t.interfaces {
        let physical = host.exists(&format!("sys/class/net/{ifname}/device"));
        let eee = Item::start("nic_eee", ifname.clone()).want("off");
        items.push(if physical {
            eee.warn(
                "unknown: sysfs does not show energy-efficient Ethernet",
                format!("check with `ethtool --show-eee {ifname}`; turn it off with `sudo ethtool --set-eee {ifname} eee off`"),
            )
        } else {
            eee.pass("virtual interface, no EEE")
        });
        let item = Item::start("irq_numa", ifname.clone())
            .want("every IRQ of the NIC on its NUMA node's cores");
        if !physical {
            items.push(item.pass("virtual interface, no IRQs"));
            continue;
        }
        let mut irqs = Vec::new();
        let mut unreadable = Vec::new();
        for irq in irqs_of(host, ifname) {
            match host.cpulist(&format!("proc/irq/{irq}/smp_affinity_list")) {
                Ok(cpus) => irqs.push((irq, cpus)),
                Err(_) => unreadable.push(irq),
            }
        }
        if irqs.is_empty() {
            items.push(item.warn(
                format!("no IRQs found in device/msi_irqs or /proc/interrupts{}", if unreadable.is_empty() { String::new() } else { format!(" (unreadable affinity: {unreadable:?})") }),
                format!("find them with `grep {ifname} /proc/interrupts` and check /proc/irq/N/smp_affinity_list"),
            ));
            out.push(NicIrqs {
                interface: ifname.clone(),
                irqs,
            });
            continue;
        }
        let node = host.sysfs().device_numa_node(Device::Net(ifname));
        let nodes = host.sysfs().node_count().unwrap_or(1);
        items.push(match node {
            Err(e) => item.warn(e.to_string(), "check the device in sysfs"),
            Ok(None) => item.pass(format!(
                "{} IRQs; the device reports no NUMA node: every core is local",
                irqs.len()
            )),
            Ok(Some(n)) if nodes <= 1 => item.pass(format!(
                "{} IRQs; node {n} is the only NUMA node: every core is local",
                irqs.len()
            )),
            Ok(Some(n)) => match host.sysfs().node_cpus(n) {
                Err(e) => item.warn(e.to_string(), "check the node's cpulist in sysfs"),
                Ok(local) => {
                    let off: Vec<&(u32, Vec<usize>)> = irqs
                        .iter()
                        .filter(|(_, cpus)| cpus.iter().any(|c| !local.contains(c)))
                        .collect();
                    let found = format!(
                        "node {n} (cores {}); {} of {} IRQs may run off it: {}",
                        format_cpulist(&local),
                        off.len(),
                        irqs.len(),
                        irq_list(&off, 4)
                    );
                    let fix = format!(
                        "echo {} | sudo tee {}; stop irqbalance from moving them back (`sudo systemctl disable --now irqbalance`)",
                        format_cpulist(&local),
                        irq_paths(&off.iter().map(|(i, _)| *i).collect::<Vec<_>>())
                    );
                    if off.is_empty() {
                        item.pass(format!(
                            "node {n} (cores {}); all {} IRQs on it",
                            format_cpulist(&local),
                            irqs.len()
                        ))
                    } else {
                        item.warn(found, fix)
                    }
                }
            },
        });
        out.push(NicIrqs {
            interface: ifname.clone(),
            irqs,
        });
    }
    out
}

/// The RoCE active MTU a netdev MTU gives: the largest IB MTU that fits
/// after the RoCE v2 headers (the kernel's `iboe_get_mtu`: GRH 40, UDP 8,
/// BTH 12, XRC 4, AtomicETH 28 and ICRC 4 bytes).
pub(crate) fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
}

/// Port state, and for RoCE ports the MTU, GID type and PFC/ECN.
pub(crate) fn check_rdma(
    host: &Host,
    bus: Option<&BusNeeds>,
    addresses: &[Ipv4Addr],
    t: &Targets,
    items: &mut Vec<Item>,
) {
    for (dev, port) in &t.rdma {
        let subject = format!("{dev} port {port}");
        let base = format!("sys/class/infiniband/{dev}/ports/{port}");
        let item = Item::start("rdma_port", subject.clone()).want("ACTIVE");
        let link = host
            .read_opt(&format!("{base}/link_layer"))
            .unwrap_or_else(|| "unknown".into());
        let ndev = port_netdev(host, dev, *port);
        match host.read(&format!("{base}/state")) {
            Ok(state) if state.contains("ACTIVE") => {
                items.push(item.pass(format!("{state}, link layer {link}")));
            }
            Ok(state) => items.push(item.fail(
                format!("{state}, link layer {link}"),
                format!(
                    "bring the link up (`sudo ip link set {} up`), check cable and switch; `rdma link show {dev}/{port}`",
                    ndev.as_deref().unwrap_or("IFACE")
                ),
            )),
            Err(e) => items.push(item.fail(e, format!("check the port: `ibv_devinfo -d {dev}`"))),
        }
        if link != "Ethernet" {
            continue;
        }
        let Some(ndev) = ndev else {
            items.push(
                Item::start("roce_mtu", subject.clone())
                    .want("a netdev for the RoCE port")
                    .warn(
                        "no netdev in gid_attrs/ndevs or device/net",
                        format!("`rdma link show {dev}/{port}` names it"),
                    ),
            );
            continue;
        };
        check_mtu(host, bus, &subject, &ndev, items);
        check_gid_type(host, addresses, dev, *port, &subject, items);
        check_pfc_ecn(host, &subject, &ndev, items);
    }
}

fn check_mtu(
    host: &Host,
    bus: Option<&BusNeeds>,
    subject: &str,
    ndev: &str,
    items: &mut Vec<Item>,
) {
    let datagram = bus
        .filter(|b| b.transport == TransportKind::Verbs || b.transport == TransportKind::Auto)
        .and_then(|b| b.max_datagram);
    let item = Item::start("roce_mtu", subject.to_string()).want(match datagram {
        Some(d) => {
            format!("RoCE active MTU 4096 (netdev MTU at least 4200) and at least max_datagram {d}")
        }
        None => "RoCE active MTU 4096 (netdev MTU at least 4200)".to_string(),
    });
    let mtu = match host.read(&format!("sys/class/net/{ndev}/mtu")) {
        Ok(m) => m,
        Err(e) => {
            items.push(item.warn(e, format!("`ip link show {ndev}`")));
            return;
        }
    };
    let Ok(mtu) = mtu.parse::<u32>() else {
        items.push(item.warn(
            format!("{ndev} mtu {mtu:?} is not a number"),
            format!("`ip link show {ndev}`"),
        ));
        return;
    };
    let active = roce_active_mtu(mtu);
    let found = format!(
        "{ndev} mtu {mtu}: active MTU {}",
        active.map_or("none".to_string(), |a| a.to_string())
    );
    let raise =
        format!("sudo ip link set {ndev} mtu 9000 (and the switch ports) for a 4096-byte RoCE MTU");
    items.push(match (active, datagram) {
        (None, _) => item.fail(found, raise),
        (Some(a), Some(d)) if d as u64 > u64::from(a) => item.fail(
            format!("{found}, below the streams' max_datagram {d}"),
            format!("lower streams.NAME.max_datagram to {a}, or {raise}"),
        ),
        (Some(a), _) if a < 4096 => item.warn(found, raise),
        _ => item.pass(found),
    });
}

fn check_gid_type(
    host: &Host,
    addresses: &[Ipv4Addr],
    dev: &str,
    port: u8,
    subject: &str,
    items: &mut Vec<Item>,
) {
    let base = format!("sys/class/infiniband/{dev}/ports/{port}");
    let item = Item::start("roce_gid_type", subject.to_string());
    let entry = |idx: &str| {
        let ty = host.read_opt(&format!("{base}/gid_attrs/types/{idx}"))?;
        let ip = host
            .read_opt(&format!("{base}/gids/{idx}"))
            .as_deref()
            .and_then(gid_ipv4);
        Some((ty, ip))
    };
    let types_fix = format!(
        "list the table: `grep . /sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/*` (or `show_gids`)"
    );
    // The kernel adds a RoCE v1 and a v2 entry for every address; an
    // address is usable when its v2 entry exists.
    let table: Vec<(String, String, Option<Ipv4Addr>)> = host
        .list(&format!("{base}/gid_attrs/types"))
        .into_iter()
        .filter_map(|i| entry(&i).map(|(ty, ip)| (i, ty, ip)))
        .collect();
    let v2 = |ip: &Ipv4Addr| {
        table
            .iter()
            .find(|(_, ty, g)| ty == "RoCE v2" && g.as_ref() == Some(ip))
            .map(|(i, _, _)| i.clone())
    };
    let mine: Vec<Ipv4Addr> = {
        let on_port: Vec<Ipv4Addr> = table.iter().filter_map(|(_, _, ip)| *ip).collect();
        let wanted: Vec<Ipv4Addr> = addresses
            .iter()
            .filter(|a| on_port.contains(a))
            .copied()
            .collect();
        let mut v = if wanted.is_empty() { on_port } else { wanted };
        v.sort();
        v.dedup();
        v
    };
    let item = item.want("a RoCE v2 GID for each IPv4 address");
    if mine.is_empty() {
        items.push(item.warn(
            "no IPv4 address in the GID table",
            "give the port's netdev an IPv4 address (`sudo ip addr add ADDR/24 dev IFACE`)",
        ));
        return;
    }
    let (with, without): (Vec<_>, Vec<_>) = mine.iter().partition(|ip| v2(ip).is_some());
    let found = with
        .iter()
        .map(|ip| format!("{ip} RoCE v2 at {}", v2(ip).unwrap_or_default()))
        .chain(
            without
                .iter()
                .map(|ip| format!("{ip} without a RoCE v2 entry")),
        )
        .collect::<Vec<_>>()
        .join(", ");
    items.push(if without.is_empty() {
        item.pass(found)
    } else {
        item.warn(
            found,
            format!(
                "enable RoCE v2: `echo 'RoCE v2' | sudo tee /sys/kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_mode`; {types_fix}"
            ),
        )
    });
}

/// The priorities (0-7) whose file in `dir` holds 1.
fn enabled_priorities(host: &Host, dir: &str) -> Option<Vec<u8>> {
    let names = host.list(dir);
    if names.is_empty() {
        return None;
    }
    Some(
        names
            .iter()
            .filter_map(|p| {
                let prio: u8 = p.parse().ok()?;
                (host.read_opt(&format!("{dir}/{p}")).as_deref() == Some("1")).then_some(prio)
            })
            .collect(),
    )
}

/// PFC-enabled priorities from MLNX_OFED's `qos/pfc` (`0,0,0,1,0,0,0,0`,
/// or a table whose last line is the eight flags).
fn pfc_priorities(text: &str) -> Option<Vec<u8>> {
    text.lines().rev().find_map(|line| {
        let flags: Vec<&str> = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| *w == "0" || *w == "1")
            .collect();
        (flags.len() == 8).then(|| {
            flags
                .iter()
                .enumerate()
                .filter(|(_, f)| **f == "1")
                .map(|(i, _)| i as u8)
                .collect()
        })
    })
}

fn list_u8(v: &[u8]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
}

fn check_pfc_ecn(host: &Host, subject: &str, ndev: &str, items: &mut Vec<Item>) {
    let item = Item::start("roce_pfc_ecn", subject.to_string())
        .want("PFC and ECN (roce_np and roce_rp) on the RoCE priority");
    let ecn_dir = format!("sys/class/net/{ndev}/ecn");
    let np = enabled_priorities(host, &format!("{ecn_dir}/roce_np/enable"));
    let rp = enabled_priorities(host, &format!("{ecn_dir}/roce_rp/enable"));
    let pfc = host
        .read_opt(&format!("sys/class/net/{ndev}/qos/pfc"))
        .as_deref()
        .and_then(pfc_priorities);
    let ecn = match (&np, &rp) {
        (Some(np), Some(rp)) => {
            let both: Vec<u8> = np.iter().filter(|p| rp.contains(p)).copied().collect();
            Some(both)
        }
        _ => None,
    };
    let found = format!(
        "ECN {}; PFC {}",
        match &ecn {
            Some(p) => format!("on priorities {}", list_u8(p)),
            None => "unknown (no ecn/roce_np, roce_rp in sysfs)".into(),
        },
        match &pfc {
            Some(p) => format!("on priorities {}", list_u8(p)),
            None => "unknown (not in sysfs)".into(),
        }
    );
    let mut fixes = Vec::new();
    match &ecn {
        Some(p) if !p.is_empty() => {}
        Some(_) => fixes.push(format!(
            "echo 1 | sudo tee /sys/class/net/{ndev}/ecn/roce_{{np,rp}}/enable/3 (the RoCE priority)"
        )),
        None => fixes.push(format!("check ECN with `mlnx_qos -i {ndev}` or the NIC's tools")),
    }
    match &pfc {
        Some(p) if !p.is_empty() => {}
        Some(_) => fixes.push(format!("sudo mlnx_qos -i {ndev} --pfc 0,0,0,1,0,0,0,0 (and the switch)")),
        None => fixes.push(format!(
            "check PFC with `dcb pfc show dev {ndev}` or `mlnx_qos -i {ndev}`; enable it on the RoCE priority with `sudo dcb pfc set dev {ndev} prio-pfc 3:on` and on the switch"
        )),
    }
    let status = if fixes.is_empty() {
        Status::Pass
    } else {
        Status::Warn
    };
    items.push(item.status(status, found, fixes.join("; ")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_follows_the_netdev_mtu() {
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(4200), Some(4096));
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(2200), Some(2048));
        assert_eq!(roce_active_mtu(300), None);
        assert_eq!(roce_active_mtu(0), None);
    }

    #[test]
    fn names_match_whole_words() {
        assert!(names("PCI-MSI 1-edge eth0-TxRx-0", "eth0"));
        assert!(names("mlx5_comp0@pci:0000:3b:00.0", "0000:3b:00.0"));
        assert!(names("virtio0-input.0", "virtio0"));
        assert!(!names("eth01-TxRx-0", "eth0"));
        assert!(!names("xeth0", "eth0"));
    }

    #[test]
    fn pfc_flags_are_read_from_either_layout() {
        assert_eq!(pfc_priorities("0,0,0,1,0,0,0,0\n"), Some(vec![3]));
        assert_eq!(
            pfc_priorities("priority 0 1 2 3 4 5 6 7\nenabled  0 0 0 1 1 0 0 0\n"),
            Some(vec![3, 4])
        );
        assert_eq!(pfc_priorities("garbage"), None);
    }

    #[test]
    fn irq_paths_use_braces_for_several() {
        assert_eq!(irq_paths(&[45]), "/proc/irq/45/smp_affinity_list");
        assert_eq!(irq_paths(&[45, 46]), "/proc/irq/{45,46}/smp_affinity_list");
    }
}
