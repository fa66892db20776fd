//! The counters of an RDMA port, read from sysfs at stat time:
//! `ROOT/class/infiniband/DEV/ports/N/counters/*` (the IB port counters:
//! `port_rcv_errors`, `port_xmit_discards`, `link_downed`...) and
//! `.../hw_counters/*` (the driver's: `rnr_nak_retry_err`, retry counts,
//! PFC pause frames where the device has them). `ROOT` is `/sys`, or a
//! fake tree in tests (`--sysfs-root`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Counters that are settings or levels, not counts.
const GAUGES: [&str; 1] = ["lifespan"];

/// One port's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Device name (`rxe0`, `mlx5_0`).
    pub device: String,
    /// Port number.
    pub port: u8,
    /// `counters/*` by file name, then `hw_counters/*` as `hw_NAME`.
    pub counters: BTreeMap<String, u64>,
}

impl Port {
    /// Whether counter `name` is a gauge (a setting, not a count).
    pub fn is_gauge(name: &str) -> bool {
        GAUGES.contains(&name.trim_start_matches("hw_"))
    }
}

/// A device name as sysfs has them: letters, digits, `_` and `-` only, so
/// it names one directory.
fn plausible(device: &str) -> bool {
    !device.is_empty()
        && device.len() <= 64
        && device
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The port's directory under `root`.
fn port_dir(root: &Path, device: &str, port: u8) -> PathBuf {
    root.join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string())
}

/// Reads the numeric files of `dir` (a missing directory is none).
fn numbers(dir: &Path, prefix: &str, into: &mut BTreeMap<String, u64>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // Counter files are small; anything else (a directory, a file
        // that is not a number) is not a counter and is passed over.
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if let Ok(v) = text.trim().parse::<u64>() {
            into.insert(format!("{prefix}{name}"), v);
        }
    }
    Ok(())
}

/// Reads port `port` of `device` under `root` (`/sys`). An error names
/// the port when the device or port does not exist or cannot be read.
pub fn read_port(root: &Path, device: &str, port: u8) -> Result<Port, String> {
    if !plausible(device) {
        return Err(format!("`{device}` is not an RDMA device name"));
    }
    let dir = port_dir(root, device, port);
    if !dir.is_dir() {
        return Err(format!(
            "RDMA device {device} port {port}: {} does not exist",
            dir.display()
        ));
    }
    let mut counters = BTreeMap::new();
    let read = |sub: &str, prefix: &str, into: &mut BTreeMap<String, u64>| {
        numbers(&dir.join(sub), prefix, into).map_err(|e| {
            format!(
                "RDMA device {device} port {port}: cannot read {}: {e}",
                dir.join(sub).display()
            )
        })
    };
    read("counters", "", &mut counters)?;
    read("hw_counters", "hw_", &mut counters)?;
    Ok(Port {
        device: device.to_string(),
        port,
        counters,
    })
}

/// Parses `DEV` or `DEV/PORT` (port 1 when left out).
pub fn parse_device(s: &str) -> Result<(String, u8), String> {
    let (dev, port) = match s.split_once('/') {
        Some((d, p)) => (
            d,
            p.parse::<u8>()
                .map_err(|_| format!("`{p}` is not a port number (1-255)"))?,
        ),
        None => (s, 1),
    };
    if !plausible(dev) || port == 0 {
        return Err(format!("`{s}` is not DEVICE or DEVICE/PORT (e.g. rxe0/1)"));
    }
    Ok((dev.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_and_hw_counters_of_a_fake_tree() {
        let root = std::env::temp_dir().join(format!("mdbus-stat-sysfs-{}", std::process::id()));
        let port = root.join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(port.join("counters")).unwrap();
        std::fs::create_dir_all(port.join("hw_counters")).unwrap();
        std::fs::write(port.join("counters/port_rcv_errors"), "7\n").unwrap();
        std::fs::write(port.join("counters/link_downed"), "1\n").unwrap();
        std::fs::write(port.join("counters/not_a_number"), "N/A\n").unwrap();
        std::fs::write(port.join("hw_counters/rnr_nak_retry_err"), "3\n").unwrap();
        std::fs::write(port.join("hw_counters/lifespan"), "10\n").unwrap();
        let p = read_port(&root, "mlx5_0", 1).unwrap();
        let got: Vec<(&str, u64)> = p.counters.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            got,
            [
                ("hw_lifespan", 10),
                ("hw_rnr_nak_retry_err", 3),
                ("link_downed", 1),
                ("port_rcv_errors", 7)
            ]
        );
        assert!(Port::is_gauge("hw_lifespan"));
        assert!(!Port::is_gauge("port_rcv_errors"));
        let e = read_port(&root, "mlx5_0", 2).unwrap_err();
        assert!(e.contains("RDMA device mlx5_0 port 2:"), "{e}");
        assert!(read_port(&root, "../etc", 1).is_err());
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn device_arguments() {
        assert_eq!(parse_device("rxe0").unwrap(), ("rxe0".into(), 1));
        assert_eq!(parse_device("mlx5_1/2").unwrap(), ("mlx5_1".into(), 2));
        assert!(parse_device("rxe0/0").is_err());
        assert!(parse_device("a/b/c").is_err());
        assert!(parse_device("../x").is_err());
    }
}
