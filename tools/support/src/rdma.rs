//! The IPv4 address of an RDMA port, read from the GID table sysfs shows
//! (`/sys/class/infiniband/DEV/ports/N/gids/I`): what a tool binds when
//! it runs on verbs and the user named a device rather than an address.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Where sysfs lists RDMA devices.
pub const SYSFS_IB: &str = "/sys/class/infiniband";

/// Why a port has no usable IPv4 address.
#[derive(Debug, thiserror::Error)]
#[error("RDMA device {device} port {port}: {what}")]
pub struct GidError {
    /// The device.
    pub device: String,
    /// The port.
    pub port: u8,
    /// What is wrong, as a phrase.
    pub what: String,
}

/// The IPv4 address in a GID as sysfs prints it
/// (`0000:0000:0000:0000:0000:ffff:0a63:0001`), when it is IPv4-mapped.
pub fn gid_ipv4(text: &str) -> Option<Ipv4Addr> {
    let groups: Vec<u16> = text
        .trim()
        .split(':')
        .map(|g| u16::from_str_radix(g, 16).ok())
        .collect::<Option<_>>()?;
    let groups: [u16; 8] = groups.try_into().ok()?;
    Ipv6Addr::from(groups)
        .to_ipv4_mapped()
        .filter(|a| !a.is_unspecified())
}

/// The GID files of a port, in index order (sysfs lists them as
/// `gids/0`, `gids/1`, ...).
fn gid_files(gids: &Path) -> Vec<(i32, PathBuf)> {
    let mut out: Vec<(i32, PathBuf)> = std::fs::read_dir(gids)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let i = e.file_name().to_str()?.parse().ok()?;
            Some((i, e.path()))
        })
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

/// The IPv4 address of RDMA device `device`, port `port`, under `root`
/// (normally [`SYSFS_IB`]): the GID at `gid_index` when at least 0, else
/// the first IPv4-mapped GID.
///
/// # Errors
/// The GID cannot be read or is not IPv4-mapped, or the port has none.
pub fn device_ipv4(
    root: &Path,
    device: &str,
    port: u8,
    gid_index: i32,
) -> Result<Ipv4Addr, GidError> {
    let gids = root
        .join(device)
        .join("ports")
        .join(port.to_string())
        .join("gids");
    let fail = |what: String| GidError {
        device: device.to_owned(),
        port,
        what,
    };
    if gid_index >= 0 {
        let path = gids.join(gid_index.to_string());
        let text = std::fs::read_to_string(&path)
            .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
        return gid_ipv4(&text).ok_or_else(|| {
            fail(format!(
                "GID {gid_index} ({}) is not an IPv4-mapped address",
                text.trim()
            ))
        });
    }
    gid_files(&gids)
        .into_iter()
        .find_map(|(_, path)| gid_ipv4(&std::fs::read_to_string(path).ok()?))
        .ok_or_else(|| fail(format!("no IPv4-mapped GID in {}", gids.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_gids_give_their_address() {
        assert_eq!(
            gid_ipv4("0000:0000:0000:0000:0000:ffff:0a63:0001\n"),
            Some(Ipv4Addr::new(10, 99, 0, 1))
        );
        assert_eq!(gid_ipv4("fe80:0000:0000:0000:32d8:30ff:feee:9db3"), None);
        assert_eq!(gid_ipv4("0000:0000:0000:0000:0000:0000:0000:0000"), None);
        assert_eq!(gid_ipv4("not a gid"), None);
    }

    #[test]
    fn device_address_comes_from_the_gid_table() {
        let root = std::env::temp_dir().join(format!("mdbus-tool-gids-{}", std::process::id()));
        let gids = root.join("rxe9/ports/1/gids");
        std::fs::create_dir_all(&gids).unwrap();
        let zero = "0000:0000:0000:0000:0000:0000:0000:0000\n";
        std::fs::write(gids.join("0"), "fe80:0000:0000:0000:32d8:30ff:feee:9db3\n").unwrap();
        std::fs::write(gids.join("1"), "0000:0000:0000:0000:0000:ffff:0a63:0002\n").unwrap();
        std::fs::write(gids.join("2"), zero).unwrap();
        let first = device_ipv4(&root, "rxe9", 1, -1);
        let at_1 = device_ipv4(&root, "rxe9", 1, 1);
        let at_0 = device_ipv4(&root, "rxe9", 1, 0).map_err(|e| e.to_string());
        let missing = device_ipv4(&root, "rxe8", 1, -1).map_err(|e| e.to_string());
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(first.unwrap(), Ipv4Addr::new(10, 99, 0, 2));
        assert_eq!(at_1.unwrap(), Ipv4Addr::new(10, 99, 0, 2));
        assert!(at_0.unwrap_err().contains("is not an IPv4-mapped address"));
        let missing = missing.unwrap_err();
        assert!(
            missing.starts_with("RDMA device rxe8 port 1: no IPv4-mapped GID"),
            "{missing}"
        );
    }
}
