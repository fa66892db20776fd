//! What the kernel says about a bus's UDP sockets: for each socket the
//! process holds, the bytes waiting in its receive buffer and the
//! datagrams dropped because that buffer was full (`drops` of
//! `/proc/PID/net/udp` and `udp6`). Read at stat time from `ROOT/PID/...`
//! (`ROOT` is `/proc`, or a fake tree in tests: `--proc-root`).

use std::collections::HashSet;
use std::path::Path;

/// One UDP socket of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpSocket {
    /// Local address, `IP:PORT` (IPv6 in brackets).
    pub local: String,
    /// Bytes in the receive queue now.
    pub rx_queue_bytes: u64,
    /// Datagrams the kernel dropped (receive buffer full, or filtered).
    pub drops: u64,
}

/// The socket inodes process `pid` holds open.
fn socket_inodes(root: &Path, pid: u32) -> HashSet<u64> {
    let mut set = HashSet::new();
    let Ok(fds) = std::fs::read_dir(root.join(pid.to_string()).join("fd")) else {
        return set;
    };
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let t = target.to_string_lossy();
        if let Some(n) = t
            .strip_prefix("socket:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|n| n.parse().ok())
        {
            set.insert(n);
        }
    }
    set
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), as the
/// kernel prints them (each 32-bit word in host order, little-endian here).
fn address(hex: &str) -> Option<String> {
    let (ip, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..ip.len() / 8)
        .map(|i| {
            ip.get(8 * i..8 * i + 8)
                .and_then(|w| u32::from_str_radix(w, 16).ok())
        })
        .collect::<Option<_>>()?;
    match words.as_slice() {
        [w] => Some(format!(
            "{}:{port}",
            std::net::Ipv4Addr::from(w.to_le_bytes())
        )),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].iter().enumerate() {
                bytes[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            Some(format!("[{}]:{port}", std::net::Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// One line of `/proc/net/udp`: (inode, socket), or none for the header or
/// a line that does not parse.
fn parse_line(line: &str) -> Option<(u64, UdpSocket)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 13 || !f[0].ends_with(':') {
        return None;
    }
    let rx = f[4].split_once(':').map(|(_, rx)| rx)?;
    Some((
        f[9].parse().ok()?,
        UdpSocket {
            local: address(f[1])?,
            rx_queue_bytes: u64::from_str_radix(rx, 16).ok()?,
            drops: f[12].parse().ok()?,
        },
    ))
}

/// The UDP sockets of process `pid` under `root` (`/proc`), in the order
/// the kernel lists them; none when it cannot be read (another user's
/// process, or gone).
pub fn udp_sockets(root: &Path, pid: u32) -> Vec<UdpSocket> {
    let inodes = socket_inodes(root, pid);
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for table in ["udp", "udp6"] {
        let path = root.join(pid.to_string()).join("net").join(table);
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        out.extend(
            text.lines()
                .filter_map(parse_line)
                .filter(|(inode, _)| inodes.contains(inode))
                .map(|(_, s)| s),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_sockets_a_process_holds_from_a_fake_proc() {
        let root = std::env::temp_dir().join(format!("mdbus-stat-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let p = root.join("4242");
        std::fs::create_dir_all(p.join("fd")).unwrap();
        std::fs::create_dir_all(p.join("net")).unwrap();
        std::os::unix::fs::symlink("socket:[1001]", p.join("fd/3")).unwrap();
        std::os::unix::fs::symlink("socket:[1003]", p.join("fd/4")).unwrap();
        std::os::unix::fs::symlink("/dev/null", p.join("fd/0")).unwrap();
        std::fs::write(
            p.join("net/udp"),
            "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
             \x20 1: 0100007F:1F90 00000000:0000 07 00000000:00000200 00:00000000 00000000     0        0 1001 2 0000000000000000 17\n\
             \x20 2: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1002 2 0000000000000000 99\n\
             garbage line\n",
        )
        .unwrap();
        std::fs::write(
            p.join("net/udp6"),
            "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
             \x20 3: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1003 2 0000000000000000 0\n",
        )
        .unwrap();
        let got = udp_sockets(&root, 4242);
        assert_eq!(
            got,
            [
                UdpSocket {
                    local: "127.0.0.1:8080".into(),
                    rx_queue_bytes: 512,
                    drops: 17
                },
                UdpSocket {
                    local: "[::1]:8081".into(),
                    rx_queue_bytes: 0,
                    drops: 0
                },
            ]
        );
        assert!(udp_sockets(&root, 1).is_empty(), "an unknown pid has none");
        std::fs::remove_dir_all(&root).ok();
    }
}
