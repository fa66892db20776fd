//! mdbus-doctor against fake sysfs/procfs trees: a tuned two-node RoCE
//! host where everything passes, the same host untuned where each check
//! warns or fails with its fix, and the command line's exit statuses.

use std::path::{Path, PathBuf};
use std::process::Command;

use mdbus_doctor::{run, Item, Options, Report, Status};
use mdbus_tool_support::output::check_convention;

/// A scratch tree laid out like `/`, removed on drop.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self, rel: &str, content: &str) -> &Tree {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
        self
    }

    fn remove(&self, rel: &str) -> &Tree {
        let path = self.root().join(rel);
        if path.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        } else {
            std::fs::remove_file(path).unwrap();
        }
        self
    }

    fn config(&self, text: &str) -> PathBuf {
        let path = self.root().join("mdbus.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A tuned host: two NUMA nodes (cores 0-7 and 8-15), a ConnectX port
    /// mlx5_0/1 on eth2 (node 0, IRQs 40 and 41 on cores 0-1), polling
    /// cores 2-3 isolated, performance governor, deep C-states disabled,
    /// huge pages reserved and mounted, THP madvise, memlock unlimited,
    /// no swap, MTU 9000, a RoCE v2 GID for 10.0.0.1, ECN and PFC on
    /// priority 3.
    fn tuned() -> Tree {
        let t = Tree::new();
        t.file("sys/devices/system/cpu/online", "0-15\n")
            .file("sys/devices/system/node/node0/cpulist", "0-7\n")
            .file("sys/devices/system/node/node1/cpulist", "8-15\n")
            .file("sys/devices/system/cpu/isolated", "2-3\n")
            .file("sys/devices/system/cpu/nohz_full", "2-3\n")
            .file(
                "sys/devices/system/cpu/cpuidle/current_driver",
                "intel_idle\n",
            )
            .file(
                "proc/cmdline",
                "BOOT_IMAGE=/vmlinuz ro isolcpus=2-3 nohz_full=2-3\n",
            );
        for cpu in 0..16 {
            let c = format!("sys/devices/system/cpu/cpu{cpu}");
            t.file(&format!("{c}/cpufreq/scaling_governor"), "performance\n");
            for (i, (name, latency, disable)) in
                [("POLL", 0, 0), ("C1", 2, 0), ("C1E", 10, 1), ("C6", 133, 1)]
                    .iter()
                    .enumerate()
            {
                let s = format!("{c}/cpuidle/state{i}");
                t.file(&format!("{s}/name"), &format!("{name}\n"))
                    .file(&format!("{s}/latency"), &format!("{latency}\n"))
                    .file(&format!("{s}/disable"), &format!("{disable}\n"));
            }
        }
        let ib = "sys/class/infiniband/mlx5_0/ports/1";
        t.file(&format!("{ib}/state"), "4: ACTIVE\n")
            .file(&format!("{ib}/link_layer"), "Ethernet\n")
            .file(
                &format!("{ib}/gids/0"),
                "fe80:0000:0000:0000:0e42:a1ff:fe00:0001\n",
            )
            .file(
                &format!("{ib}/gids/1"),
                "fe80:0000:0000:0000:0e42:a1ff:fe00:0001\n",
            )
            .file(
                &format!("{ib}/gids/2"),
                "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
            )
            .file(
                &format!("{ib}/gids/3"),
                "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
            )
            .file(&format!("{ib}/gid_attrs/types/0"), "IB/RoCE v1\n")
            .file(&format!("{ib}/gid_attrs/types/1"), "RoCE v2\n")
            .file(&format!("{ib}/gid_attrs/types/2"), "IB/RoCE v1\n")
            .file(&format!("{ib}/gid_attrs/types/3"), "RoCE v2\n")
            .file("sys/class/infiniband/mlx5_0/device/numa_node", "0\n");
        for i in 0..4 {
            t.file(&format!("{ib}/gid_attrs/ndevs/{i}"), "eth2\n");
        }
        let net = "sys/class/net/eth2";
        t.file(&format!("{net}/mtu"), "9000\n")
            .file(&format!("{net}/device/numa_node"), "0\n")
            .file(&format!("{net}/device/msi_irqs/40"), "msix\n")
            .file(&format!("{net}/device/msi_irqs/41"), "msix\n")
            .file(&format!("{net}/qos/pfc"), "0,0,0,1,0,0,0,0\n")
            .file("proc/irq/40/smp_affinity_list", "0\n")
            .file("proc/irq/41/smp_affinity_list", "1\n")
            // An IRQ named in /proc/interrupts only.
            .file(
                "proc/interrupts",
                "            CPU0       CPU1\n 40:  10  0  PCI-MSI 1-edge  mlx5_comp0@pci:0000:3b:00.0\n 41:  0  10  PCI-MSI 2-edge  mlx5_comp1@pci:0000:3b:00.0\n 42:  0  0  PCI-MSI 3-edge  eth2-TxRx-0\n 50:  5  5  PCI-MSI 4-edge  eth20-TxRx-0\nNMI:  0  0  Non-maskable interrupts\n",
            )
            .file("proc/irq/42/smp_affinity_list", "0-1\n")
            // The parent's (in sysfs, a PCI bridge's) IRQ is not the NIC's.
            .file(&format!("{net}/msi_irqs/99"), "msi\n")
            .file("proc/irq/99/smp_affinity_list", "2\n")
            .file("proc/irq/50/smp_affinity_list", "0-15\n");
        for p in 0..8 {
            let on = if p == 3 { "1\n" } else { "0\n" };
            t.file(&format!("{net}/ecn/roce_np/enable/{p}"), on)
                .file(&format!("{net}/ecn/roce_rp/enable/{p}"), on);
        }
        t.file("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "1024\n")
            .file("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "1000\n")
            .file("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
            .file(
                "proc/mounts",
                "sysfs /sys sysfs rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
            )
            .file(
                "proc/self/limits",
                "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         unlimited            unlimited            bytes\n",
            )
            .file("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
            .file("proc/sys/vm/swappiness", "60\n")
            .file(
                "proc/net/route",
                "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                 eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                 eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
            );
        t
    }

    fn options(&self, config: Option<&str>) -> Options {
        let mut o = Options {
            root: self.root().to_path_buf(),
            cores: vec![2, 3],
            ..Options::default()
        };
        if let Some(text) = config {
            o.load_config(&self.config(text)).unwrap();
        }
        o
    }
}

/// A verbs bus on mlx5_0 port 1: a stream on 10.0.0.1 with 4096-byte
/// datagrams (a 1 MiB window) and a session (2 x 16384 x 256-byte slots).
const VERBS: &str = r#"
transport = "verbs"
[verbs]
device = "mlx5_0"
port = 1
[streams.md]
max_message = 232
capacity = 4096
group = "239.1.1.1:5000"
interface = "10.0.0.1"
max_datagram = 4096
[sessions.orders]
address = "10.0.0.1:7000"
capacity = 16384
"#;

/// A shared-memory bus that must have huge pages: one 16 MiB ring.
const SHM_REQUIRE: &str = r#"
transport = "shm"
[shm]
huge_pages = "require"
[streams.md]
max_message = 232
capacity = 65536
"#;

fn item<'a>(r: &'a Report, check: &str) -> &'a Item {
    r.items
        .iter()
        .find(|i| i.check == check)
        .unwrap_or_else(|| panic!("no {check} item in\n{}", r.text()))
}

/// Asserts `check`'s status, that its reading contains `found`, and that
/// its fix contains `fix`.
fn expect(r: &Report, check: &str, status: Status, found: &str, fix: Option<&str>) {
    let i = item(r, check);
    assert_eq!(i.status, status, "{check}: {i:?}");
    assert!(
        i.found.contains(found),
        "{check}: found {:?} lacks {found:?}",
        i.found
    );
    match fix {
        Some(f) => {
            let got = i.fix.as_deref().unwrap_or_default();
            assert!(got.contains(f), "{check}: fix {got:?} lacks {f:?}");
        }
        None => assert_eq!(i.fix, None, "{check}: a pass has no fix"),
    }
}

#[test]
fn a_tuned_host_passes_every_check() {
    let t = Tree::tuned();
    let r = run(&t.options(Some(VERBS)));
    assert_eq!(r.devices, ["mlx5_0:1"]);
    assert_eq!(r.interfaces, ["eth2"]);
    expect(&r, "interface_address", Status::Pass, "on eth2", None);
    expect(&r, "cpu_governor", Status::Pass, "performance on 2-3", None);
    expect(
        &r,
        "cpu_cstates",
        Status::Pass,
        "C1 (2 us) on 2-3, POLL (0 us) on 2-3",
        None,
    );
    expect(
        &r,
        "core_isolation",
        Status::Pass,
        "isolated 2-3; nohz_full 2-3",
        None,
    );
    expect(
        &r,
        "irq_numa",
        Status::Pass,
        "node 0 (cores 0-7); all 3 IRQs on it",
        None,
    );
    expect(
        &r,
        "irq_polling_cores",
        Status::Pass,
        "3 IRQs of eth2 off cpu 2-3",
        None,
    );
    expect(
        &r,
        "huge_pages",
        Status::Pass,
        "not used (transport verbs)",
        None,
    );
    expect(&r, "transparent_huge_pages", Status::Pass, "madvise", None);
    expect(&r, "memlock", Status::Pass, "unlimited", None);
    expect(&r, "swap", Status::Pass, "no swap (vm.swappiness 60)", None);
    expect(
        &r,
        "rdma_port",
        Status::Pass,
        "4: ACTIVE, link layer Ethernet",
        None,
    );
    expect(
        &r,
        "roce_mtu",
        Status::Pass,
        "eth2 mtu 9000: active MTU 4096",
        None,
    );
    expect(
        &r,
        "roce_gid_type",
        Status::Pass,
        "10.0.0.1 RoCE v2 at 3",
        None,
    );
    expect(
        &r,
        "roce_pfc_ecn",
        Status::Pass,
        "ECN on priorities 3; PFC on priorities 3",
        None,
    );
    // EEE is not in sysfs: always a warning with the ethtool command.
    expect(
        &r,
        "nic_eee",
        Status::Warn,
        "unknown",
        Some("ethtool --set-eee eth2 eee off"),
    );
    assert_eq!(
        (r.count(Status::Warn), r.count(Status::Fail)),
        (1, 0),
        "{}",
        r.text()
    );
    assert_eq!(r.exit_code(), 0);
    assert_eq!(check_convention(&r.json()), Ok(()));
}

#[test]
fn an_untuned_host_warns_and_fails_with_the_fixes() {
    let t = Tree::tuned();
    t.file(
        "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
        "powersave\n",
    )
    .file("sys/devices/system/cpu/cpu2/cpuidle/state3/disable", "0\n")
    .file("sys/devices/system/cpu/isolated", "\n")
    .file("sys/devices/system/cpu/nohz_full", "(null)\n")
    .file("proc/cmdline", "ro quiet -- isolcpus=2-3\n")
    // IRQ 41 on a polling core, 40 on the other node.
    .file("proc/irq/41/smp_affinity_list", "2\n")
    .file("proc/irq/40/smp_affinity_list", "8\n")
    .file(
        "sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    )
    .file(
        "proc/self/limits",
        "Max locked memory         8388608              8388608              bytes\n",
    )
    .file(
        "proc/swaps",
        "Filename\tType\tSize\tUsed\tPriority\n/swap.img\tfile\t2097148\t0\t-2\n",
    )
    .file("sys/class/net/eth2/mtu", "1500\n")
    .file(
        "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3",
        "IB/RoCE v1\n",
    )
    .file("sys/class/net/eth2/ecn/roce_rp/enable/3", "0\n")
    .remove("sys/class/net/eth2/qos");
    let r = run(&t.options(Some(VERBS)));
    expect(
        &r,
        "cpu_governor",
        Status::Warn,
        "performance on 2; powersave on 3",
        Some("sudo cpupower -c 3 frequency-set -g performance"),
    );
    expect(
        &r,
        "cpu_cstates",
        Status::Warn,
        "C6 (133 us) on 2",
        Some("sudo cpupower -c 2-3 idle-set -D 2"),
    );
    expect(
        &r,
        "core_isolation",
        Status::Warn,
        "isolated none; nohz_full none",
        Some("add `isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3` to the kernel command line"),
    );
    expect(
        &r,
        "irq_numa",
        Status::Warn,
        "1 of 3 IRQs may run off it: irq 40 on 8",
        Some("echo 0-7 | sudo tee /proc/irq/40/smp_affinity_list"),
    );
    expect(
        &r,
        "irq_polling_cores",
        Status::Fail,
        "1 of 3 IRQs of eth2 may run on cpu 2-3: irq 41 on 2",
        Some("echo 0-1,4-15 | sudo tee /proc/irq/41/smp_affinity_list"),
    );
    expect(
        &r,
        "transparent_huge_pages",
        Status::Warn,
        "always",
        Some("echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled"),
    );
    // 4096 x 48 (index entry and kept header) + 4096 x 232 bytes of
    // window, 2 x 16384 x 256 of session rings.
    expect(
        &r,
        "memlock",
        Status::Fail,
        "8388608 bytes (8.0 MiB): registering the channels' 9539584 bytes (9.1 MiB) will fail",
        Some("LimitMEMLOCK=infinity"),
    );
    expect(
        &r,
        "swap",
        Status::Warn,
        "1 swap device(s), 2147479552 bytes (2.0 GiB); vm.swappiness 60",
        Some("sudo sysctl -w vm.swappiness=1"),
    );
    expect(
        &r,
        "roce_mtu",
        Status::Fail,
        "eth2 mtu 1500: active MTU 1024, below the streams' max_datagram 4096",
        Some("lower streams.NAME.max_datagram to 1024, or sudo ip link set eth2 mtu 9000"),
    );
    expect(
        &r,
        "roce_gid_type",
        Status::Warn,
        "10.0.0.1 without a RoCE v2 entry",
        Some("/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode"),
    );
    expect(
        &r,
        "roce_pfc_ecn",
        Status::Warn,
        "ECN on priorities none; PFC unknown (not in sysfs)",
        Some("echo 1 | sudo tee /sys/class/net/eth2/ecn/roce_{np,rp}/enable/3"),
    );
    assert!(item(&r, "roce_pfc_ecn")
        .fix
        .as_deref()
        .unwrap()
        .contains("dcb pfc show dev eth2"));
    assert_eq!(r.exit_code(), 1);
    let text = r.text();
    assert!(text.lines().last().unwrap().starts_with("fail: "), "{text}");
}

#[test]
fn small_mtu_without_a_config_is_a_warning() {
    let t = Tree::tuned();
    t.file("sys/class/net/eth2/mtu", "1500\n");
    let mut o = t.options(None);
    o.devices = vec!["mlx5_0".into()];
    let r = run(&o);
    expect(
        &r,
        "roce_mtu",
        Status::Warn,
        "eth2 mtu 1500: active MTU 1024",
        Some("sudo ip link set eth2 mtu 9000"),
    );
    // Without a configured index every IPv4 GID needs a RoCE v2 entry.
    expect(
        &r,
        "roce_gid_type",
        Status::Pass,
        "10.0.0.1 RoCE v2 at 3",
        None,
    );
    expect(&r, "memlock", Status::Pass, "unlimited", None);
}

#[test]
fn a_down_port_and_missing_names_fail() {
    let t = Tree::tuned();
    t.file("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    let mut o = t.options(Some(VERBS));
    o.devices.push("mlx5_9".into());
    o.interfaces.push("eth7".into());
    o.addresses.push("10.9.9.9".parse().unwrap());
    o.addresses.push("192.168.0.7".parse().unwrap());
    let r = run(&o);
    expect(
        &r,
        "rdma_port",
        Status::Fail,
        "1: DOWN",
        Some("sudo ip link set eth2 up"),
    );
    expect(
        &r,
        "device",
        Status::Fail,
        "not found in",
        Some("ibv_devices"),
    );
    expect(
        &r,
        "interface",
        Status::Fail,
        "not found in",
        Some("ip link"),
    );
    let addrs: Vec<(&str, Status, &str)> = r
        .items
        .iter()
        .filter(|i| i.check == "interface_address")
        .map(|i| (i.subject.as_str(), i.status, i.found.as_str()))
        .collect();
    assert_eq!(
        addrs,
        [
            ("10.0.0.1", Status::Pass, "on eth2"),
            (
                "10.9.9.9",
                Status::Fail,
                "no interface has it (RDMA GID tables, /proc/net/route)"
            ),
            // A directly connected route covers it.
            ("192.168.0.7", Status::Pass, "on eth0"),
        ]
    );
}

#[test]
fn huge_pages_are_checked_against_the_segments() {
    let t = Tree::tuned();
    t.file(
        "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "3\n",
    );
    let r = run(&t.options(Some(SHM_REQUIRE)));
    // 65536 slots of 256 bytes and a 4 KiB header: 9 pages.
    expect(
        &r,
        "huge_pages",
        Status::Fail,
        "1024 reserved, 3 free (2 MiB); the segments need 9",
        Some("sudo sysctl -w vm.nr_hugepages=1030"),
    );
    let try_ = SHM_REQUIRE.replace("require", "try");
    let r = run(&t.options(Some(&try_)));
    assert_eq!(item(&r, "huge_pages").status, Status::Warn);

    t.file(
        "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "9\n",
    )
    .file("proc/mounts", "sysfs /sys sysfs rw 0 0\n");
    let r = run(&t.options(Some(SHM_REQUIRE)));
    expect(
        &r,
        "huge_pages",
        Status::Fail,
        "no hugetlbfs mounted at /dev/hugepages",
        Some("sudo mount -t hugetlbfs hugetlbfs /dev/hugepages"),
    );
    // shm.mlock with a small limit: the lock is best effort, a warning.
    t.file(
        "proc/self/limits",
        "Max locked memory         65536              65536              bytes\n",
    );
    let r = run(&t.options(Some(SHM_REQUIRE)));
    expect(
        &r,
        "memlock",
        Status::Warn,
        "shm.mlock cannot lock the segments' 16781312 bytes (16.0 MiB)",
        Some("LimitMEMLOCK=infinity"),
    );
    let off = SHM_REQUIRE.replace("require", "off");
    let r = run(&t.options(Some(&off)));
    expect(
        &r,
        "huge_pages",
        Status::Pass,
        "not used (shm.huge_pages = \"off\")",
        None,
    );
}

#[test]
fn without_cores_the_placement_is_named() {
    let t = Tree::tuned();
    let mut o = t.options(None);
    o.cores.clear();
    o.interfaces.push("eth2".into());
    let r = run(&o);
    expect(
        &r,
        "core_isolation",
        Status::Warn,
        "no polling cores given; the bus would pick from cpu 0-7 (cores of NUMA node 0, local to RDMA device mlx5_0)",
        Some("--cores"),
    );
    expect(
        &r,
        "cpu_governor",
        Status::Pass,
        "performance on 0-15",
        None,
    );
    assert!(r.items.iter().all(|i| i.check != "irq_polling_cores"));
}

#[test]
fn an_empty_tree_warns_instead_of_failing() {
    let t = Tree::new();
    let r = run(&Options {
        root: t.root().to_path_buf(),
        ..Options::default()
    });
    // Nothing readable: each item says so, no panic, no failure.
    assert_eq!(r.count(Status::Fail), 0, "{}", r.text());
    expect(
        &r,
        "memlock",
        Status::Warn,
        "cannot read",
        Some("LimitMEMLOCK"),
    );
    expect(&r, "swap", Status::Warn, "cannot read", Some("swappiness"));
    expect(
        &r,
        "transparent_huge_pages",
        Status::Pass,
        "not in this kernel",
        None,
    );
}

fn doctor(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mdbus-doctor"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn the_command_line_prints_aligned_lines_and_exits_by_status() {
    let t = Tree::tuned();
    let root = t.root().to_str().unwrap();
    let (code, out, _) = doctor(&["--root", root, "--device", "mlx5_0", "--cores", "2,3"]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    // Columns line up: status (4) and the longest check name
    // (transparent_huge_pages, 22) are padded, so every subject starts at 30.
    for l in &lines[..lines.len() - 1] {
        assert_eq!(&l[28..30], "  ", "{l}");
        assert_ne!(&l[30..31], " ", "{l}");
    }
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("warn: 13 pass, 1 warn, 0 fail"),
        "{out}"
    );

    t.file("proc/irq/41/smp_affinity_list", "3\n");
    let (code, out, _) = doctor(&[
        "--root",
        root,
        "--interface",
        "eth2",
        "--cores",
        "2-3",
        "--json",
    ]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out.lines().count(), 1);
    assert_eq!(check_convention(&v), Ok(()));
    assert_eq!(v["tool"], "mdbus-doctor");
    assert_eq!(v["status"], "fail");
    assert_eq!(v["fail"], 1);
    assert_eq!(v["cores"], serde_json::json!([2, 3]));
    let failed: Vec<&serde_json::Value> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["status"] == "fail")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["check"], "irq_polling_cores");
    assert_eq!(
        failed[0]["fix"],
        "echo 0-1,4-15 | sudo tee /proc/irq/41/smp_affinity_list; stop irqbalance from moving them back (`sudo systemctl disable --now irqbalance`)"
    );
}

#[test]
fn bad_usage_and_bad_configurations_exit_2() {
    let t = Tree::tuned();
    let root = t.root().to_str().unwrap();
    let (code, _, err) = doctor(&["--root", root, "--cores", "3-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("range 3-1 runs backwards"), "{err}");
    let bad = t.config("[streams.md]\ncapcity = 8\n");
    let (code, out, err) = doctor(&["--root", root, "--config", bad.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("unknown field `capcity`"), "{err}");
    let (code, _, err) = doctor(&["--bogus"]);
    assert_eq!(code, 2, "{err}");
    let (code, out, _) = doctor(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Exit status: 0 no item failed (warnings included); 1 an item failed; 2"),
        "{out}"
    );
}

#[test]
fn a_relay_configuration_names_its_core_device_and_interfaces() {
    let t = Tree::tuned();
    let relay = t.config(
        "[input]\nline_a = \"239.1.1.1:26400\"\ninterface = \"10.0.0.1\"\n[bus]\ntransport = \"shm\"\n[thread]\ncore = 3\ndevice = \"eth2\"\n",
    );
    let mut o = Options {
        root: t.root().to_path_buf(),
        ..Options::default()
    };
    o.load_config(&relay).unwrap();
    assert_eq!(o.cores, [3]);
    assert_eq!(o.devices, ["eth2"]);
    assert_eq!(
        o.addresses,
        ["10.0.0.1".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    let bus = o.bus.as_ref().unwrap();
    assert_eq!(bus.transport, mdbus::TransportKind::Shm);
    let r = run(&o);
    assert_eq!(r.interfaces, ["eth2"]);
    expect(&r, "core_isolation", Status::Pass, "isolated 2-3", None);
    let bad = t.config("[input]\nline_a = \"239.1.1.1:26400\"\n[thread]\ncore = -5\n");
    let e = Options::default().load_config(&bad).unwrap_err();
    assert!(e.contains("thread.core: -5 is not a core"), "{e}");
}

/// The live host: the run completes and prints one valid object.
#[test]
fn the_real_host_gives_one_valid_json_object() {
    let (code, out, err) = doctor(&["--json"]);
    assert!(code == 0 || code == 1, "{code}: {err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(check_convention(&v), Ok(()));
    assert!(!v["items"].as_array().unwrap().is_empty());
    assert_eq!(code == 1, v["status"] == "fail");
}

#[test]
fn a_virtio_nic_has_its_pci_parents_irqs() {
    let t = Tree::tuned();
    // virtio-net: device/ is the virtio device, its IRQs are the PCI
    // parent's msi_irqs (and named virtioN-input.0 in /proc/interrupts).
    t.file("sys/class/net/eth5/device/numa_node", "1\n")
        .file("sys/class/net/eth5/msi_irqs/60", "msix\n")
        .file("proc/irq/60/smp_affinity_list", "8-15\n");
    let mut o = t.options(None);
    o.interfaces.push("eth5".into());
    let r = run(&o);
    expect(
        &r,
        "irq_numa",
        Status::Pass,
        "node 1 (cores 8-15); all 1 IRQs on it",
        None,
    );
    expect(
        &r,
        "irq_polling_cores",
        Status::Pass,
        "1 IRQs of eth5 off cpu 2-3",
        None,
    );
}

#[test]
fn each_thp_mode_and_a_missing_governor() {
    let t = Tree::tuned();
    let fix = Some("echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled");
    for (mode, status, found, fix) in [
        ("always [madvise] never", Status::Pass, "madvise", None),
        (
            "[always] madvise never",
            Status::Warn,
            "always: khugepaged",
            fix,
        ),
        (
            "always madvise [never]",
            Status::Warn,
            "never: the verbs pools",
            fix,
        ),
    ] {
        t.file("sys/kernel/mm/transparent_hugepage/enabled", mode);
        expect(
            &run(&t.options(None)),
            "transparent_huge_pages",
            status,
            found,
            fix,
        );
    }
    for cpu in 0..16 {
        t.remove(&format!("sys/devices/system/cpu/cpu{cpu}/cpufreq"));
    }
    expect(
        &run(&t.options(None)),
        "cpu_governor",
        Status::Warn,
        "unknown: no cpufreq/scaling_governor",
        Some("power profile"),
    );
}
