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

/// The two hosts and their switch. Removed on drop.
pub struct Topology {
    tag: String,
    subnet: u8,
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
        if digits.is_empty() || !matches!(suffix, "h0" | "h1" | "sw") {
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
        remove_stale();
        let pid = std::process::id();
        let t = Topology {
            tag: format!("{PREFIX}{pid}"),
            subnet: (pid % 250) as u8 + 1,
            loss: None,
        };
        // Names of an earlier process with this pid (killed outright): this
        // process has not made them yet, so they are stale.
        t.remove();
        // From here on, drop removes whatever was made.
        let sw = t.switch();
        run(&["ip", "netns", "add", &sw])?;
        run(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        // Flood multicast: no IGMP querier runs on this switch.
        run(&[
            "ip",
            "-n",
            &sw,
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
        ])?;
        run(&["ip", "-n", &sw, "link", "set", "br0", "up"])?;
        for h in 0..2 {
            let ns = t.host(h);
            let port = format!("p{h}");
            run(&["ip", "netns", "add", &ns])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            run(&[
                "ip", "-n", &ns, "link", "add", "a0", "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ])?;
            run(&["ip", "-n", &sw, "link", "set", &port, "master", "br0"])?;
            run(&["ip", "-n", &sw, "link", "set", &port, "up"])?;
            let addr = format!("{}/24", t.addr(h));
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "a0"])?;
            run(&["ip", "-n", &ns, "link", "set", "a0", "up"])?;
            run(&["ip", "-n", &ns, "route", "add", "224.0.0.0/4", "dev", "a0"])?;
        }
        Ok(t)
    }

    fn switch(&self) -> String {
        format!("{}sw", self.tag)
    }

    /// Namespace of host `h`: 0 the publisher's, 1 the subscriber's.
    pub fn host(&self, h: usize) -> String {
        format!("{}h{h}", self.tag)
    }

    /// Address of host `h`.
    pub fn addr(&self, h: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, h as u8 + 1)
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
        text.split(key)
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Failure::Run(format!("cannot read the drop count from: {text}")))
    }

    /// Moves this process (its calling thread, the only one that opens
    /// sockets) into host `h`'s network namespace.
    pub fn enter(&self, h: usize) -> Result<(), Failure> {
        let path = std::path::Path::new(NETNS_DIR).join(self.host(h));
        let file = File::open(&path)
            .map_err(|e| Failure::Run(format!("cannot open {}: {e}", path.display())))?;
        // SAFETY: setns takes an open namespace descriptor, which `file`
        // keeps open for the call, and a namespace type; it touches no
        // memory of ours.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(Failure::Run(format!(
                "cannot enter network namespace {}: {}",
                self.host(h),
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.remove();
    }
}

impl Topology {
    /// Deletes the three namespaces (those that exist).
    fn remove(&self) {
        for ns in [self.host(0), self.host(1), self.switch()] {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}
