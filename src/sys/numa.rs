//! Memory on the NIC's NUMA node, by memory policy.
//!
//! Pinning the polling thread to the device's node and relying on first
//! touch places memory right only when the first touch happens on that
//! node, after the pinning; a pool touched at start-up by the main thread
//! lands wherever that thread ran. A memory policy set on the mapping with
//! `mbind(2)` before the first touch places it whoever touches it, and
//! `MPOL_MF_MOVE` migrates pages already touched.
//!
//! The policy is `MPOL_PREFERRED`: the kernel takes pages from the device's
//! node while it has free ones and from another node otherwise, so a full
//! node slows the bus instead of failing it, and a single-node host works
//! unchanged. `/proc/self/numa_maps` shows it as `prefer:N` on the mapping.

use std::io;
use std::path::Path;

use crate::sys::affinity::{Device, Sysfs};
use crate::sys::map::Mapping;

/// `MPOL_PREFERRED` of `<linux/mempolicy.h>`.
const MPOL_PREFERRED: libc::c_int = 1;
/// `MPOL_MF_MOVE`: migrate pages of this process that break the policy.
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;
/// 64-bit words of the node mask passed to the kernel (1 024 nodes).
const MASK_WORDS: usize = 16;

/// The NUMA node of `dev` read from `sysfs`, or `None` when the device is
/// unknown, reports no node (`-1`, or no `numa_node` file) or the value is
/// malformed; why is logged at debug level, since placement is best
/// effort.
pub fn device_node(sysfs: &Sysfs, dev: Device<'_>) -> Option<u32> {
    match sysfs.device_numa_node(dev) {
        Ok(node) => node,
        Err(e) => {
            log::debug!("no NUMA placement for {dev}: {e}");
            None
        }
    }
}

/// Sets `MPOL_PREFERRED` for `node` on all of `map` and migrates its pages
/// already touched elsewhere. Call it before touching the memory.
pub fn prefer(map: &Mapping, node: u32) -> io::Result<()> {
    let word = node as usize / 64;
    if word >= MASK_WORDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "NUMA node {node} is beyond the {} nodes a mask holds",
                MASK_WORDS * 64
            ),
        ));
    }
    let mut mask = [0u64; MASK_WORDS];
    mask[word] = 1 << (node % 64);
    // SAFETY: `map` is a live mapping of `len` bytes starting page-aligned;
    // mbind only changes its policy (and may move its pages, which keeps
    // their contents). The mask holds MASK_WORDS * 64 bits, as stated.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            map.as_ptr(),
            map.len(),
            MPOL_PREFERRED,
            mask.as_ptr(),
            (MASK_WORDS * 64) as libc::c_ulong,
            MPOL_MF_MOVE,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Places `map` on the NUMA node of `dev` (read from `sysfs`), when it has
/// one; returns the node. A refused policy (a kernel without NUMA support)
/// is logged and ignored: placement is an optimisation.
pub fn place(map: &Mapping, sysfs: &Sysfs, dev: Device<'_>) -> Option<u32> {
    let node = device_node(sysfs, dev)?;
    match prefer(map, node) {
        Ok(()) => Some(node),
        Err(e) => {
            log::debug!(
                "mbind of {} bytes to NUMA node {node} (for {dev}) failed: {e}",
                map.len()
            );
            None
        }
    }
}

/// The policy `numa_maps` states for the mapping that starts at `addr`
/// (`prefer:0`, `bind:0-1`, `default`...), from the text of a
/// `/proc/PID/numa_maps` file.
pub fn policy_in(numa_maps: &str, addr: usize) -> Option<&str> {
    let start = format!("{addr:x} ");
    numa_maps
        .lines()
        .find(|l| l.starts_with(&start))?
        .split_whitespace()
        .nth(1)
}

/// The policy of this process's mapping that starts at `addr`, read from
/// `/proc/self/numa_maps` (or `path`, for tests).
pub fn policy_of(path: &Path, addr: usize) -> io::Result<Option<String>> {
    let text = std::fs::read_to_string(path)?;
    Ok(policy_in(&text, addr).map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_policy_of_a_mapping() {
        let text = "\
7f00aa000000 default anon=1 dirty=1 N0=1 kernelpagesize_kB=4
7f00bb000000 prefer:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4
7f00bb000 bind:0 file=/x
";
        assert_eq!(policy_in(text, 0x7f00_bb00_0000), Some("prefer:1"));
        assert_eq!(policy_in(text, 0x7f00_aa00_0000), Some("default"));
        // The address must match the whole first field.
        assert_eq!(policy_in(text, 0x7f00_bb00), None);
        assert_eq!(policy_in(text, 0x1000), None);
    }

    #[test]
    fn a_node_beyond_the_mask_is_refused() {
        let map = Mapping::anonymous(4096, false).unwrap();
        let e = prefer(&map, 5000).unwrap_err();
        assert!(e.to_string().contains("node 5000"), "{e}");
    }
}
