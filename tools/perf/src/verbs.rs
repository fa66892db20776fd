//! Where a run's channels live on the verbs transport, and its device
//! options.
//!
//! rdma_cm binds an address, and the address picks the device: a session
//! binds the IPv4 address of `--device` (the IPv4-mapped GID at
//! `--gid-index`, or the first such GID of the port), an mcast publisher
//! that of `--device` and its subscriber that of `--recv-device`.
//! `--interface`, `--recv-interface` and `--address` name addresses
//! directly instead.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use mdbus::config::{SessionConfig, StreamConfig, VerbsConfig};
use mdbus::TransportKind;

use mdbus_tool_support::rdma;

use crate::common::{Common, Failure};

/// Fails when a verbs-only option is given with another transport.
pub fn check_options(common: &Common) -> Result<(), Failure> {
    if common.transport == TransportKind::Verbs {
        return Ok(());
    }
    let given = [
        ("--gid-index", common.gid_index.is_some()),
        ("--recv-device", common.recv_device.is_some()),
        ("--recv-interface", common.recv_interface.is_some()),
        ("--no-inline", common.no_inline),
        ("--max-inline", common.max_inline.is_some()),
        ("--signal-every", common.signal_every.is_some()),
        ("--recv-batch", common.recv_batch.is_some()),
        ("--session-mode", common.session_mode.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(Failure::Usage(format!(
            "{flag} applies to --transport verbs only, not {}",
            common.transport.name()
        ))),
        None => Ok(()),
    }
}

/// Sets the `verbs` table from the command line (over --config).
/// `--gid-index` is not among them: rdma_cm takes the GID of the bound
/// address, so the index only chooses that address (see [`session`]).
pub fn configure(common: &Common, v: &mut VerbsConfig) {
    if let Some(dev) = &common.device {
        v.device = dev.clone();
    }
    if common.no_inline {
        v.inline = false;
    }
    if let Some(n) = common.max_inline {
        v.max_inline = n;
    }
    if let Some(n) = common.signal_every {
        v.signal_every = n;
    }
    if let Some(n) = common.recv_batch {
        v.recv_batch = n;
    }
}

/// The IPv4 address of RDMA device `device`, port `port`: the GID at
/// `gid_index` (when at least 0), else the first IPv4-mapped GID.
pub fn device_ipv4(device: &str, port: u8, gid_index: i32) -> Result<Ipv4Addr, Failure> {
    rdma::device_ipv4(Path::new(rdma::SYSFS_IB), device, port, gid_index).map_err(|e| {
        Failure::Usage(format!(
            "{e}; name the address with --interface or --address"
        ))
    })
}

/// The device this process uses: as configured, else the first with an
/// active port.
fn device_in_use(v: &VerbsConfig) -> Result<String, Failure> {
    if !v.device.is_empty() {
        return Ok(v.device.clone());
    }
    mdbus::transport::verbs::detect(v)
        .map(|p| p.device)
        .map_err(|reason| {
            Failure::Unavailable(
                mdbus::Error::TransportUnavailable {
                    transport: "verbs",
                    reason,
                }
                .to_string(),
            )
        })
}

/// The address a side binds: `explicit`, else that of `device` (or of the
/// device in use).
fn bind_address(
    common: &Common,
    explicit: Option<Ipv4Addr>,
    device: Option<&str>,
    v: &VerbsConfig,
) -> Result<Ipv4Addr, Failure> {
    if let Some(a) = explicit {
        return Ok(a);
    }
    let device = match device {
        Some(d) => d.to_string(),
        None => device_in_use(v)?,
    };
    // The GID whose address is bound: --gid-index, else the first
    // IPv4-mapped one (-1).
    device_ipv4(&device, v.port, common.gid_index.unwrap_or(-1))
}

/// Sets up session `s` on verbs: its mode (--session-mode over the file)
/// and its address, from --address, else the file, else the device's IPv4
/// address and the run's port.
pub fn session(
    common: &Common,
    v: &VerbsConfig,
    s: &mut SessionConfig,
    port: u16,
) -> Result<(), Failure> {
    if let Some(mode) = common.session_mode {
        s.mode = mode;
    }
    if let Some(a) = common.address {
        s.address = a.to_string();
    } else if s.address.is_empty() {
        let host = bind_address(common, common.interface, None, v)?;
        s.address = SocketAddrV4::new(host, port).to_string();
    }
    Ok(())
}

/// Sets up the interface of a stream on verbs: the publisher binds
/// --interface or --device's address, the subscriber --recv-interface or
/// --recv-device's (else the publisher's). A file's `interface` is kept
/// unless the command line names one.
pub fn stream_interface(
    common: &Common,
    v: &VerbsConfig,
    s: &mut StreamConfig,
    publisher: bool,
) -> Result<(), Failure> {
    let (explicit, device) = if publisher {
        (common.interface, common.device.as_deref())
    } else if common.recv_interface.is_some() || common.recv_device.is_some() {
        (common.recv_interface, common.recv_device.as_deref())
    } else {
        (common.interface, common.device.as_deref())
    };
    if explicit.is_none() && device.is_none() && !s.interface.is_empty() {
        return Ok(());
    }
    s.interface = bind_address(common, explicit, device, v)?.to_string();
    Ok(())
}

/// The settings a verbs run measures, for the table heading.
pub fn describe(v: &VerbsConfig) -> String {
    let inline = if v.inline {
        format!("inline up to {} bytes asked", v.max_inline)
    } else {
        "inline off".into()
    };
    let device = if v.device.is_empty() {
        "first active device"
    } else {
        &v.device
    };
    format!(
        "verbs: {device} port {}, {inline}, signal every {}, repost batch {}",
        v.port, v.signal_every, v.recv_batch
    )
}
