//! Two hosts on one switch, built from network namespaces, for a run
//! across a lossy network on one machine (`mcast --loss`).
//!
//! ```text
//!   mdbpPIDh0 (publisher)          mdbpPIDsw (switch)          mdbpPIDh1 (subscriber)
//!   a0 10.77.T.1/24  ---veth---  p0 [bridge br0] p1  ---veth---  a0 10.77.T.2/24
//! ```
//!
//! Loss is injected on what the subscriber's host receives: `tc netem loss`
//! on the switch port towards it, or, on a kernel without netem, an
//! nftables rule in the subscriber's host that drops that share of its
//! incoming UDP at random. Every name carries this process's id; the
//! namespaces are removed when the [`Topology`] is dropped (also on an
//! error or Ctrl-C, which unwind to it), and namespaces left behind by a
//! run that was killed outright are removed by the next run.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use crate::common::Failure;

/// Prefix of every namespace this tool creates.
const PREFIX: &str = "mdbp";

/// Where the network namespaces' names are mounted.
const NETNS_DIR: &str = "/var/run/netns";

/// How loss is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LossBy {
    /// `tc qdisc ... netem loss PCT%` on the switch port to the subscriber.
    Netem,
    /// An nftables rule in the subscriber's host: `numgen random` drops.
    Nftables,
}

impl LossBy {
    /// As printed.
    pub fn name(self) -> &'static str {
        match self {
            LossBy::Netem => "tc netem",
            LossBy::Nftables => "nftables",
        }
    }
}

/// Hosts on one switch, each its own namespace. Removed on drop.
struct Switch {
    tag: String,
    /// Second octet of the hosts' addresses (one per kind of topology).
    net: u8,
    subnet: u8,
    hosts: usize,
}

impl Switch {
    /// Builds the switch and `hosts` hosts named `PREFIX PID kind`.
    fn create(kind: &str, net: u8, hosts: usize) -> Result<Switch, Failure> {
        remove_stale();
        let pid = std::process::id();
        let t = Switch {
            tag: format!("{PREFIX}{pid}{kind}"),
            net,
            subnet: (pid % 250) as u8 + 1,
            hosts,
        };
        // Names of an earlier process with this pid (killed outright): this
        // process has not made them yet, so they are stale.
        t.remove();
        // From here on, drop removes whatever was made.
        add_switch(&t.switch())?;
        for h in 0..hosts {
            add_host(&t.switch(), &t.host(h), h, t.addr(h))?;
        }
        Ok(t)
    }

    fn switch(&self) -> String {
        format!("{}sw", self.tag)
    }

    fn host(&self, h: usize) -> String {
        format!("{}h{h}", self.tag)
    }

    fn addr(&self, h: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, self.subnet, h as u8 + 1)
    }

    /// Deletes the namespaces (those that exist).
    fn remove(&self) {
        let names = (0..self.hosts).map(|h| self.host(h));
        for ns in names.chain(std::iter::once(self.switch())) {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The number after the first `key` in `text` (a drop counter in `tc -s`
/// or `nft list` output).
fn count_after(text: &str, key: &str) -> Result<u64, Failure> {
    text.split(key)
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Failure::Run(format!("cannot read the drop count from: {text}")))
}

/// The two hosts and their switch. Removed on drop.
pub struct Topology {
    net: Switch,
    loss: Option<LossBy>,
}

/// Runs `args`, failing with its stderr.
fn run(args: &[&str]) -> Result<(), Failure> {
    run_input(args, None)
}

fn run_input(args: &[&str], input: Option<&str>) -> Result<(), Failure> {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..])
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::Run(format!("cannot run `{}`: {e}", args[0])))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| Failure::Run(format!("`{}`: {e}", args.join(" "))))?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Failure::Run(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn output(args: &[&str]) -> Result<String, Failure> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Failure::Run(format!("cannot run `{}`: {e}", args[0])))?;
    if !out.status.success() {
        return Err(Failure::Run(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn have(tool: &str, version_flag: &str) -> bool {
    Command::new(tool)
        .arg(version_flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fails with the reason when this process cannot build namespaces.
pub fn check_available() -> Result<(), Failure> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Failure::Usage(
            "--loss needs root: it builds network namespaces and impairs a link between them \
             (run as root, or leave out --loss)"
                .into(),
        ));
    }
    if !have("ip", "-V") {
        return Err(Failure::Usage(
            "--loss needs iproute2 (`ip`, Debian package iproute2)".into(),
        ));
    }
    Ok(())
}

/// Removes namespaces of earlier runs whose process is gone (a run killed
/// outright cannot clean up after itself).
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let suffix = &rest[digits.len()..];
        // Two-host topologies: h0, h1, sw; stars (fan-out): fsw, fhN.
        let star_host = suffix
            .strip_prefix("fh")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if digits.is_empty() || !(matches!(suffix, "h0" | "h1" | "sw" | "fsw") || star_host) {
            continue;
        }
        if !std::path::Path::new("/proc").join(&digits).exists() {
            log::info!("removing network namespace {name} left by an earlier run");
            let _ = run(&["ip", "netns", "del", &name]);
        }
    }
}

impl Topology {
    /// Builds the two hosts and the switch.
    pub fn create() -> Result<Topology, Failure> {
        Ok(Topology {
            net: Switch::create("", 77, 2)?,
            loss: None,
        })
    }

    fn switch(&self) -> String {
        self.net.switch()
    }

    /// Namespace of host `h`: 0 the publisher's, 1 the subscriber's.
    pub fn host(&self, h: usize) -> String {
        self.net.host(h)
    }

    /// Address of host `h`.
    pub fn addr(&self, h: usize) -> Ipv4Addr {
        self.net.addr(h)
    }

    /// Makes the subscriber's host (1) lose `pct` percent of what it
    /// receives: with netem when the kernel has it, else with nftables.
    pub fn impair(&mut self, pct: f64) -> Result<LossBy, Failure> {
        let sw = self.switch();
        let loss = format!("{pct}%");
        let netem = if have("tc", "-V") {
            run(&[
                "tc", "-n", &sw, "qdisc", "replace", "dev", "p1", "root", "netem", "loss", &loss,
            ])
        } else {
            Err(Failure::Run("`tc` is not installed".into()))
        };
        let why_not_netem = match netem {
            Ok(()) => {
                self.loss = Some(LossBy::Netem);
                return Ok(LossBy::Netem);
            }
            Err(e) => e.to_string(),
        };
        if !have("nft", "-v") {
            return Err(Failure::Usage(format!(
                "--loss: cannot inject loss: tc netem is not usable here ({why_not_netem}), \
                 and nftables (`nft`, Debian package nftables) is not installed"
            )));
        }
        log::info!("tc netem is not usable here ({why_not_netem}); injecting loss with nftables");
        // numgen draws 0..10000 per packet: hundredths of a percent.
        let threshold = (pct * 100.0).round() as u32;
        let rules = format!(
            "table ip mdbus_perf {{\n chain loss {{\n  type filter hook prerouting priority -300; policy accept;\n  \
             meta l4proto udp numgen random mod 10000 < {threshold} counter drop\n }}\n}}\n"
        );
        run_input(
            &["ip", "netns", "exec", &self.host(1), "nft", "-f", "-"],
            Some(&rules),
        )?;
        self.loss = Some(LossBy::Nftables);
        Ok(LossBy::Nftables)
    }

    /// Packets the impairment has dropped so far.
    pub fn dropped(&self) -> Result<u64, Failure> {
        let (text, key) = match self.loss {
            None => return Ok(0),
            Some(LossBy::Netem) => (
                output(&[
                    "tc",
                    "-n",
                    &self.switch(),
                    "-s",
                    "qdisc",
                    "show",
                    "dev",
                    "p1",
                ])?,
                "dropped ",
            ),
            Some(LossBy::Nftables) => (
                output(&[
                    "ip",
                    "netns",
                    "exec",
                    &self.host(1),
                    "nft",
                    "list",
                    "chain",
                    "ip",
                    "mdbus_perf",
                    "loss",
                ])?,
                "packets ",
            ),
        };
        count_after(&text, key)
    }

    /// Moves this process (its calling thread, the only one that opens
    /// sockets) into host `h`'s network namespace.
    pub fn enter(&self, h: usize) -> Result<(), Failure> {
        enter(&self.host(h))
    }
}

/// Namespace `sw` with bridge `br0`, flooding multicast.
fn add_switch(sw: &str) -> Result<(), Failure> {
    run(&["ip", "netns", "add", sw])?;
    run(&["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])?;
    // Flood multicast: no IGMP querier runs on this switch.
    run(&[
        "ip",
        "-n",
        sw,
        "link",
        "set",
        "br0",
        "type",
        "bridge",
        "mcast_snooping",
        "0",
    ])?;
    run(&["ip", "-n", sw, "link", "set", "br0", "up"])
}

/// Namespace `ns` as host `h` on switch `sw`: interface `a0` with `addr`,
/// its other end `pH` on the bridge, multicast routed out of it.
fn add_host(sw: &str, ns: &str, h: usize, addr: Ipv4Addr) -> Result<(), Failure> {
    let port = format!("p{h}");
    run(&["ip", "netns", "add", ns])?;
    run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
    run(&[
        "ip", "-n", ns, "link", "add", "a0", "type", "veth", "peer", "name", &port, "netns", sw,
    ])?;
    run(&["ip", "-n", sw, "link", "set", &port, "master", "br0"])?;
    run(&["ip", "-n", sw, "link", "set", &port, "up"])?;
    let addr = format!("{addr}/24");
    run(&["ip", "-n", ns, "addr", "add", &addr, "dev", "a0"])?;
    run(&["ip", "-n", ns, "link", "set", "a0", "up"])?;
    run(&["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", "a0"])
}

/// Moves the calling thread into network namespace `name`.
fn enter(name: &str) -> Result<(), Failure> {
    let path = std::path::Path::new(NETNS_DIR).join(name);
    let file = File::open(&path)
        .map_err(|e| Failure::Run(format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: setns takes an open namespace descriptor, which `file` keeps
    // open for the call, and a namespace type; it touches no memory of ours.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(Failure::Run(format!(
            "cannot enter network namespace {name}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// One switch and `hosts` hosts (host 0 the publisher's), for
/// `fanout --transport udp`: loss upstream of every subscriber is an
/// nftables rule on the bridge dropping the publisher's multicast as it
/// comes in (one drop, lost by all), loss of one subscriber a rule on the
/// bridge dropping multicast on its way out to that subscriber's port.
/// Removed on drop.
pub struct Star {
    net: Switch,
}

impl Star {
    /// Builds the switch and the hosts (at most 250).
    pub fn create(hosts: usize) -> Result<Star, Failure> {
        if !(2..=250).contains(&hosts) {
            return Err(Failure::Usage(format!(
                "{} hosts: a star has 2 to 250",
                hosts
            )));
        }
        if !have("nft", "-v") {
            return Err(Failure::Usage(
                "fanout --transport udp needs nftables (`nft`, Debian package nftables) to \
                 drop datagrams on the bridge"
                    .into(),
            ));
        }
        Ok(Star {
            net: Switch::create("f", 78, hosts)?,
        })
    }

    fn switch(&self) -> String {
        self.net.switch()
    }

    /// Namespace of host `h`.
    pub fn host(&self, h: usize) -> String {
        self.net.host(h)
    }

    /// Address of host `h`.
    pub fn addr(&self, h: usize) -> Ipv4Addr {
        self.net.addr(h)
    }

    /// Moves the calling thread into host `h`.
    pub fn enter(&self, h: usize) -> Result<(), Failure> {
        enter(&self.host(h))
    }

    /// A command that runs `program` inside host `h`.
    pub fn exec(&self, h: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host(h), program]);
        c
    }

    /// Drops `upstream` hundredths of a percent of the multicast host 0
    /// sends, as it enters the switch, and `each` hundredths of a percent
    /// of the multicast on its way to every other host, independently.
    pub fn impair(&self, upstream: u32, each: u32) -> Result<(), Failure> {
        let mut rules = String::from(
            "table bridge mdbus_fanout {\n chain up {\n  type filter hook prerouting priority 0;\n",
        );
        rules.push_str(&format!(
            "  iifname \"p0\" ip daddr 224.0.0.0/4 numgen random mod 10000 < {upstream} counter drop\n }}\n"
        ));
        rules.push_str(" chain down {\n  type filter hook postrouting priority 0;\n");
        for h in 1..self.net.hosts {
            rules.push_str(&format!(
                "  oifname \"p{h}\" ip daddr 224.0.0.0/4 numgen random mod 10000 < {each} counter drop\n"
            ));
        }
        rules.push_str(" }\n}\n");
        run_input(
            &["ip", "netns", "exec", &self.switch(), "nft", "-f", "-"],
            Some(&rules),
        )
    }

    /// Datagrams dropped so far: (upstream, per host 1.. in order).
    pub fn dropped(&self) -> Result<(u64, Vec<u64>), Failure> {
        let text = output(&[
            "ip",
            "netns",
            "exec",
            &self.switch(),
            "nft",
            "list",
            "table",
            "bridge",
            "mdbus_fanout",
        ])?;
        // One counter per rule, in the order they were added.
        let counts: Vec<u64> = text
            .split("packets ")
            .skip(1)
            .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
            .collect();
        if counts.len() != self.net.hosts {
            return Err(Failure::Run(format!(
                "cannot read {} drop counters from: {text}",
                self.net.hosts
            )));
        }
        Ok((counts[0], counts[1..].to_vec()))
    }
}

/// `tc netem loss` on one netdev of this host (the RDMA lane's veth0, on
/// which the publisher's device sends): every drop there is lost by every
/// subscriber behind it. Removed on drop.
pub struct Netem {
    dev: String,
}

impl Netem {
    /// Drops `pct` percent of what `dev` sends.
    pub fn add(dev: &str, pct: f64) -> Result<Netem, Failure> {
        let loss = format!("{pct}%");
        run(&[
            "tc", "qdisc", "replace", "dev", dev, "root", "netem", "loss", &loss,
        ])?;
        Ok(Netem { dev: dev.into() })
    }

    /// Datagrams dropped so far.
    pub fn dropped(&self) -> Result<u64, Failure> {
        let text = output(&["tc", "-s", "qdisc", "show", "dev", &self.dev])?;
        count_after(&text, "dropped ")
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", &self.dev, "root"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
