//! This process's side of a run, set up the same way by every command.

use crate::common::{pin, Common, Failure};
use crate::peer::die_with_parent;

/// What every command does before it builds its bus: picks the default
/// port when it starts its own peer (`has_role` false), names the channel,
/// pins this thread (the second side, pong or pub, takes the second
/// default core) and, in a spawned peer, arms death with the parent.
/// Returns the channel's name, this side's core and the peer's.
pub fn setup(
    common: &mut Common,
    has_role: bool,
    second_side: bool,
) -> Result<(String, usize, usize), Failure> {
    if !has_role {
        common.default_port = crate::ip::pick_default_port(common)?;
    }
    let name = common.channel_name(has_role)?;
    let (core, peer_core) = common.cores_for(second_side)?;
    pin(core)?;
    if common.spawned {
        die_with_parent()?;
    }
    Ok((name, core, peer_core))
}

/// The channel of the `index`th measurement of a run, at `size`: the
/// run's own, or in a sweep (-a) one per size, its name ending in the
/// size, with (when this process starts the peer: `has_role` false) a
/// port of its own, so no measurement meets the previous one's leftovers.
pub fn size_channel(
    common: &mut Common,
    base: &str,
    size: u64,
    index: usize,
    sweep: bool,
    has_role: bool,
) -> Result<String, Failure> {
    if !sweep {
        return Ok(base.to_string());
    }
    if index > 0 && !has_role {
        common.default_port = None;
        common.default_port = crate::ip::pick_default_port(common)?;
    }
    let name = format!("{base}-{size}");
    mdbus::names::check(&name).map_err(|e| Failure::Usage(format!("--name: {e}")))?;
    Ok(name)
}
