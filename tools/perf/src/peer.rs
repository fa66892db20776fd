//! The second process of a run: this binary again, with `--role`
//! (started, talked to and watched by [`mdbus_tool_support::process`]).

pub use mdbus_tool_support::process::{die_with_parent, wait_for_go, DoneSignal, Peer};

use std::process::Command;

use crate::common::{Common, Failure};

/// Runs this binary as `subcommand ... --role role`, pinned to `core`,
/// with `args` (the subcommand's own options) and the shared options of
/// `common`, on channel `name`; inside network namespace `netns` when
/// given (through `ip netns exec`, which runs this binary in place: the
/// peer is still this process's child).
pub fn spawn(
    netns: Option<&str>,
    subcommand: &str,
    role: &'static str,
    args: &[String],
    common: &Common,
    name: &str,
    core: usize,
) -> Result<Peer, Failure> {
    let exe = std::env::current_exe()?;
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.arg(subcommand)
        .args(["--role", role, "--spawned", "--name", name])
        .args(["--transport", common.transport.name()])
        .args(["--cores", &core.to_string()])
        .args(["--wait", common.wait.as_str()])
        .args(["--timeout", &common.timeout.to_string()])
        .args(args);
    if let Some(config) = &common.config {
        cmd.arg("--config").arg(config);
    }
    if let Some(group) = common.group {
        cmd.args(["--group", &group.to_string()]);
    }
    if let Some(interface) = common.interface {
        cmd.args(["--interface", &interface.to_string()]);
    }
    if let Some(address) = common.address {
        cmd.args(["--address", &address.to_string()]);
    }
    if let Some(port) = common.default_port {
        cmd.args(["--default-port", &port.to_string()]);
    }
    if let Some(device) = &common.device {
        cmd.args(["--device", device]);
    }
    if let Some(i) = common.gid_index {
        cmd.args(["--gid-index", &i.to_string()]);
    }
    if let Some(device) = &common.recv_device {
        cmd.args(["--recv-device", device]);
    }
    if let Some(interface) = common.recv_interface {
        cmd.args(["--recv-interface", &interface.to_string()]);
    }
    if common.no_inline {
        cmd.arg("--no-inline");
    }
    if let Some(mode) = common.session_mode {
        cmd.args(["--session-mode", mode.as_str()]);
    }
    for (flag, value) in [
        ("--max-inline", common.max_inline),
        ("--signal-every", common.signal_every),
        ("--recv-batch", common.recv_batch),
    ] {
        if let Some(n) = value {
            cmd.args([flag, &n.to_string()]);
        }
    }
    Ok(Peer::start(format!("the {role} process"), cmd, false)?)
}

/// Runs this side's part of a measurement against `peer`, then waits for
/// the peer to finish; a failure the peer's exit explains better (it died
/// first) is reported as the peer's.
pub fn measure<T>(
    mut peer: Peer,
    this_side: impl FnOnce(&mut Peer) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let result = this_side(&mut peer).map_err(|e| explain(&mut peer, e))?;
    peer.finish()?;
    Ok(result)
}

/// Turns a failure seen by this process into the peer's, when the peer's
/// exit explains it better (it died first).
fn explain(peer: &mut Peer, failure: Failure) -> Failure {
    match peer.check_alive() {
        Err(peer_failure) => peer_failure.into(),
        Ok(()) => failure,
    }
}
