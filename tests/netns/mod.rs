//! Test hosts as network namespaces on this machine, joined by bridges
//! ("switches"), with `tc netem` for loss, reordering and duplication.
//!
//! Every name carries the test process id and a counter, so topologies of
//! tests running side by side never meet. Everything is removed on drop.
//! Needs root and iproute2; [`Topology::available`] says why not otherwise.

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs a command, panicking with its output if it fails.
pub fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "{} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A set of hosts on one or two switched networks (lines A and B).
pub struct Topology {
    tag: String,
    /// Namespace names of the hosts, in order.
    pub hosts: Vec<String>,
    lines: usize,
}

impl Topology {
    /// Why namespaces (and, with `netem`, tc netem) cannot be used here,
    /// if they cannot.
    pub fn available(netem: bool) -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        match Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => return Err("iproute2 (`ip`) is not installed".into()),
        }
        match Command::new("tc").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => return Err("`tc` is not installed".into()),
        }
        // The kernel must have veth, bridges and netem: try them in a
        // scratch namespace.
        // Tests probe at once, in threads of one process: a name of its
        // own per probe, or one probe's `ip netns add` fails on another's.
        let ns = format!(
            "mdbprobe{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ok = |args: &[&str]| {
            Command::new(args[0])
                .args(&args[1..])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let result = if !ok(&["ip", "netns", "add", &ns]) {
            Err("cannot create a network namespace".to_string())
        } else if !ok(&[
            "ip", "-n", &ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ]) {
            Err("the kernel has no veth support".into())
        } else if !ok(&["ip", "-n", &ns, "link", "add", "b0", "type", "bridge"]) {
            Err("the kernel has no bridge support".into())
        } else if netem
            && !ok(&[
                "tc", "-n", &ns, "qdisc", "add", "dev", "v0", "root", "netem", "loss", "1%",
            ])
        {
            Err("the kernel has no netem (CONFIG_NET_SCH_NETEM); the RDMA lane's guest kernel has it".into())
        } else {
            Ok(())
        };
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        result
    }

    /// `hosts` hosts, each on `lines` (1 or 2) networks. Host `h` has
    /// address `10.L.T.(h+1)` on line L (1 for A, 2 for B), where T is unique
    /// to this topology, on interface `a0` (line A) and `b0` (line B).
    pub fn new(hosts: usize, lines: usize) -> Topology {
        assert!((1..=2).contains(&lines) && hosts < 250);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}x{n}", std::process::id() % 100_000);
        let t = Topology {
            hosts: (0..hosts).map(|h| format!("mdb{tag}h{h}")).collect(),
            tag,
            lines,
        };
        let sw = t.switch();
        run(&["ip", "netns", "add", &sw]);
        for l in 0..lines {
            let br = format!("br{l}");
            run(&["ip", "-n", &sw, "link", "add", &br, "type", "bridge"]);
            // Flood multicast: no IGMP querier runs on these switches.
            run(&[
                "ip",
                "-n",
                &sw,
                "link",
                "set",
                &br,
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ]);
            run(&["ip", "-n", &sw, "link", "set", &br, "up"]);
        }
        for (h, ns) in t.hosts.iter().enumerate() {
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            for l in 0..lines {
                let ifname = t.ifname(l);
                let peer = format!("p{h}l{l}");
                run(&[
                    "ip", "-n", ns, "link", "add", &ifname, "type", "veth", "peer", "name", &peer,
                    "netns", &sw,
                ]);
                run(&[
                    "ip",
                    "-n",
                    &sw,
                    "link",
                    "set",
                    &peer,
                    "master",
                    &format!("br{l}"),
                ]);
                run(&["ip", "-n", &sw, "link", "set", &peer, "up"]);
                let addr = format!("{}/24", t.addr(h, l));
                run(&["ip", "-n", ns, "addr", "add", &addr, "dev", &ifname]);
                run(&["ip", "-n", ns, "link", "set", &ifname, "up"]);
            }
            // Multicast leaves through line A unless a socket says otherwise.
            run(&[
                "ip",
                "-n",
                ns,
                "route",
                "add",
                "224.0.0.0/4",
                "dev",
                &t.ifname(0),
            ]);
        }
        t
    }

    fn switch(&self) -> String {
        format!("mdb{}sw", self.tag)
    }

    fn subnet(&self) -> u8 {
        // Third octet from the tag's hash: distinct per topology in a run.
        let h = self
            .tag
            .bytes()
            .fold(7u32, |a, b| a.wrapping_mul(31).wrapping_add(b as u32));
        (h % 250) as u8 + 1
    }

    /// Interface name of line `l` inside a host.
    pub fn ifname(&self, l: usize) -> String {
        ["a0", "b0"][l].to_string()
    }

    /// IPv4 address of host `h` on line `l`.
    pub fn addr(&self, h: usize, l: usize) -> String {
        format!("10.{}.{}.{}", 101 + l, self.subnet(), h + 1)
    }

    /// Applies netem to host `h`'s interface on line `l`, e.g.
    /// `"loss 5%"` or `"delay 1ms reorder 25% 50%"`. Affects what the host
    /// sends on that line; for what it receives, impair the switch port.
    pub fn netem_egress(&self, h: usize, l: usize, spec: &str) {
        let ns = &self.hosts[h];
        let mut args = vec!["tc", "-n", ns, "qdisc", "replace", "dev"];
        let ifname = self.ifname(l);
        args.push(&ifname);
        args.extend(["root", "netem"]);
        args.extend(spec.split_whitespace());
        run(&args);
    }

    /// Applies netem to what host `h` receives on line `l` (its switch
    /// port's egress).
    pub fn netem_ingress(&self, h: usize, l: usize, spec: &str) {
        let sw = self.switch();
        let port = format!("p{h}l{l}");
        let mut args = vec![
            "tc", "-n", &sw, "qdisc", "replace", "dev", &port, "root", "netem",
        ];
        args.extend(spec.split_whitespace());
        run(&args);
    }

    /// Counts netem drops and duplicates on host `h`'s switch port of line
    /// `l` (from `tc -s`), as (sent packets, dropped).
    pub fn port_stats(&self, h: usize, l: usize) -> (u64, u64) {
        let sw = self.switch();
        let port = format!("p{h}l{l}");
        let out = Command::new("tc")
            .args(["-n", &sw, "-s", "qdisc", "show", "dev", &port])
            .output()
            .expect("tc -s");
        let text = String::from_utf8_lossy(&out.stdout);
        let num_after = |key: &str| -> u64 {
            text.split(key)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|w| w.trim_end_matches(',').parse().ok())
                .unwrap_or(0)
        };
        (num_after("Sent bytes "), num_after("dropped "))
    }

    /// Drops `per_mille`/1000 of the multicast datagrams host `h` sends,
    /// at its switch port as they enter the switch (nftables, bridge
    /// prerouting, `numgen random`): one drop is lost by every other host,
    /// as when a switch upstream of all the subscribers drops a packet,
    /// and the sender is not told. Unicast is untouched. Needs `nft`.
    pub fn drop_multicast_from(&self, h: usize, per_mille: u32) {
        let rules = format!(
            "table bridge mdbloss {{\n chain pre {{\n  type filter hook prerouting priority 0;\n  \
             iifname \"p{h}l0\" ip daddr 224.0.0.0/4 numgen random mod 1000 < {per_mille} counter drop\n }}\n}}\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.switch(), "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run nft");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "nft rejected {rules}");
    }

    /// Datagrams [`drop_multicast_from`](Self::drop_multicast_from)
    /// dropped so far.
    pub fn multicast_dropped(&self) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.switch(),
                "nft",
                "list",
                "table",
                "bridge",
                "mdbloss",
            ])
            .output()
            .expect("nft list");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split("packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Whether `nft` runs here.
    pub fn have_nft() -> bool {
        Command::new("nft")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// A command line that runs `args` inside host `h`.
    pub fn exec(&self, h: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.hosts[h]]).args(args);
        c
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain(std::iter::once(&self.switch())) {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = self.lines;
    }
}
