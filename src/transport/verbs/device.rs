//! Devices and ports: the libibverbs device list, opening a device,
//! querying its ports, and the choice `transport = "auto"` makes.

use std::ffi::{c_int, CStr};
use std::ptr::NonNull;

use verbs_sys::{ibv_context, ibv_device, ibv_gid_entry, ibv_port_attr, Verbs};

use super::errors;
use crate::config::VerbsConfig;
use crate::error::{Error, Result};
use crate::sys::affinity::{Device, Sysfs};

/// One RDMA device as the libibverbs device list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// Its ports, from 1.
    pub ports: Vec<PortInfo>,
}

/// One port of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number, from 1.
    pub port: u8,
    /// The port is `ACTIVE`: it can carry traffic.
    pub active: bool,
    /// Its state as libibverbs names it (`ACTIVE`, `DOWN`, ...).
    pub state: String,
    /// The active MTU in bytes (256 to 4096).
    pub active_mtu: usize,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: &'static str,
}

/// The device and port a verbs bus runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivePort {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Active MTU in bytes: the largest UD datagram.
    pub active_mtu: usize,
    /// NUMA node of the device, when the machine reports one.
    pub numa_node: Option<u32>,
}

/// The MTU enum of verbs in bytes.
pub(crate) fn mtu_bytes(mtu: u32) -> usize {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

/// The array `ibv_get_device_list` returns; freed on drop.
struct DeviceList {
    verbs: &'static Verbs,
    list: NonNull<*mut ibv_device>,
    len: usize,
}

impl DeviceList {
    /// The devices; `Err(errno)` when the call fails (ENOSYS on a kernel
    /// without RDMA support).
    fn get(verbs: &'static Verbs) -> std::result::Result<DeviceList, i32> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed in Drop.
        let list = unsafe { (verbs.ibv_get_device_list)(&mut n) };
        match NonNull::new(list) {
            Some(list) => Ok(DeviceList {
                verbs,
                list,
                len: n.max(0) as usize,
            }),
            None => Err(errors::errno()),
        }
    }

    fn iter(&self) -> impl Iterator<Item = *mut ibv_device> + '_ {
        // SAFETY: the list holds `len` device pointers (ibv_get_device_list's
        // contract) and lives as long as `self`.
        (0..self.len).map(|i| unsafe { *self.list.as_ptr().add(i) })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { (self.verbs.ibv_free_device_list)(self.list.as_ptr()) };
    }
}

/// The name of a device from the list.
///
/// # Safety
/// `dev` must be a device of a live device list or of a live context.
pub(crate) unsafe fn device_name(verbs: &Verbs, dev: *mut ibv_device) -> String {
    // SAFETY: guaranteed by the caller; the name is a NUL-terminated string
    // inside the device structure.
    unsafe { CStr::from_ptr((verbs.ibv_get_device_name)(dev)) }
        .to_string_lossy()
        .into_owned()
}

/// An open device, for probing; closed on drop. (The data path uses the
/// contexts rdma_cm opens, which live as long as the cm ids using them.)
pub(crate) struct Context {
    verbs: &'static Verbs,
    raw: NonNull<ibv_context>,
    name: String,
}

impl Context {
    /// Opens `dev`.
    ///
    /// # Safety
    /// `dev` must come from a live device list.
    unsafe fn open(verbs: &'static Verbs, dev: *mut ibv_device) -> Result<Context> {
        // SAFETY: guaranteed by the caller.
        let name = unsafe { device_name(verbs, dev) };
        // SAFETY: as above; the context is closed in Drop.
        let raw = unsafe { (verbs.ibv_open_device)(dev) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Context { verbs, raw, name }),
            None => Err(errors::last("ibv_open_device", &name, None)),
        }
    }

    /// The number of ports.
    fn port_count(&self) -> Result<u8> {
        let mut attr = verbs_sys::ibv_device_attr::default();
        // SAFETY: the context is live; `attr` is writable.
        let rc = unsafe { (self.verbs.ibv_query_device)(self.raw.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(errors::ret("ibv_query_device", &self.name, None, rc));
        }
        Ok(attr.phys_port_cnt)
    }

    fn port(&self, port: u8) -> Result<PortInfo> {
        // SAFETY: the context is live and belongs to this library.
        let attr = unsafe { query_port(self.verbs, self.raw.as_ptr(), port, &self.name) }?;
        Ok(port_info(port, &attr))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device, closed once; nothing created
        // on it outlives the probe.
        unsafe { (self.verbs.ibv_close_device)(self.raw.as_ptr()) };
    }
}

/// `ibv_query_port`.
///
/// # Safety
/// `ctx` must be a live context of this library.
pub(crate) unsafe fn query_port(
    verbs: &Verbs,
    ctx: *mut ibv_context,
    port: u8,
    device: &str,
) -> Result<ibv_port_attr> {
    let mut attr = ibv_port_attr::default();
    // SAFETY: guaranteed by the caller; `attr` is writable.
    let rc = unsafe { verbs.query_port(ctx, port, &mut attr) };
    if rc != 0 {
        return Err(errors::ret("ibv_query_port", (device, port), None, rc));
    }
    Ok(attr)
}

/// One GID table entry with its type (`IBV_GID_TYPE_ROCE_V2`, ...).
///
/// # Safety
/// `ctx` must be a live context of this library.
pub(crate) unsafe fn query_gid_entry(
    verbs: &Verbs,
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
) -> std::result::Result<ibv_gid_entry, i32> {
    let mut entry = ibv_gid_entry::default();
    // SAFETY: guaranteed by the caller; `entry` is writable; flags 0.
    let rc = unsafe { verbs.query_gid_ex(ctx, port.into(), index, &mut entry, 0) };
    if rc != 0 {
        return Err(rc);
    }
    Ok(entry)
}

fn port_info(port: u8, attr: &ibv_port_attr) -> PortInfo {
    let state = match attr.state {
        1 => "DOWN".to_string(),
        2 => "INIT".to_string(),
        3 => "ARMED".to_string(),
        verbs_sys::IBV_PORT_ACTIVE => "ACTIVE".to_string(),
        verbs_sys::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER".to_string(),
        s => format!("state {s}"),
    };
    PortInfo {
        port,
        active: attr.state == verbs_sys::IBV_PORT_ACTIVE,
        state,
        active_mtu: mtu_bytes(attr.active_mtu),
        link_layer: if u32::from(attr.link_layer) == verbs_sys::IBV_LINK_LAYER_INFINIBAND {
            "InfiniBand"
        } else {
            "Ethernet"
        },
    }
}

/// Lists the RDMA devices and their ports. `Err` says why there is no list
/// at all: libibverbs missing, or a kernel without RDMA support (where
/// `ibv_get_device_list` fails with ENOSYS).
pub fn probe() -> std::result::Result<Vec<DeviceInfo>, String> {
    let verbs = Verbs::load().map_err(|e| e.to_string())?;
    let list = DeviceList::get(verbs).map_err(|e| {
        let why = if e == libc::ENOSYS {
            "the kernel has no RDMA support"
        } else {
            "the call failed"
        };
        format!("{why} (ibv_get_device_list: {})", errors::describe_errno(e))
    })?;
    let mut out = Vec::new();
    for dev in list.iter() {
        // SAFETY: `dev` is from the live list.
        let ctx = match unsafe { Context::open(verbs, dev) } {
            Ok(c) => c,
            Err(e) => {
                log::warn!("RDMA probe: {e}");
                continue;
            }
        };
        let mut ports = Vec::new();
        match ctx.port_count() {
            Ok(n) => {
                for p in 1..=n {
                    match ctx.port(p) {
                        Ok(info) => ports.push(info),
                        Err(e) => log::warn!("RDMA probe: {e}"),
                    }
                }
            }
            Err(e) => log::warn!("RDMA probe: {e}"),
        }
        out.push(DeviceInfo {
            name: ctx.name.clone(),
            ports,
        });
    }
    Ok(out)
}

/// The device and port `transport = "verbs"` (or `"auto"`) uses: the
/// configured `verbs.device` and `verbs.port` when set and active, else the
/// first device whose `verbs.port` is active. `Err` is one sentence saying
/// what was looked for and found.
pub fn detect(cfg: &VerbsConfig) -> std::result::Result<ActivePort, String> {
    const HINT: &str = "load rdma_rxe or install a NIC";
    // Port 1 is the default and the only port of most devices.
    let port = if cfg.port == 1 {
        String::new()
    } else {
        format!(" {}", cfg.port)
    };
    let devices = probe().map_err(|why| {
        format!(
            "no RDMA device with an active port{port} (looked in libibverbs device list: none, {why}; {HINT})"
        )
    })?;
    let seen = if devices.is_empty() {
        "none".to_string()
    } else {
        devices
            .iter()
            .map(|d| {
                let ports: Vec<String> = d
                    .ports
                    .iter()
                    .map(|p| format!("port {} {}", p.port, p.state))
                    .collect();
                format!("{} {}", d.name, ports.join(" "))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let wanted = |d: &&DeviceInfo| cfg.device.is_empty() || d.name == cfg.device;
    let found = devices.iter().filter(wanted).find_map(|d| {
        d.ports
            .iter()
            .find(|p| p.port == cfg.port && p.active)
            .map(|p| (d, p))
    });
    match found {
        Some((d, p)) => Ok(ActivePort {
            device: d.name.clone(),
            port: p.port,
            active_mtu: p.active_mtu,
            numa_node: numa_node(&d.name),
        }),
        None if cfg.device.is_empty() => Err(format!(
            "no RDMA device with an active port{port} (looked in libibverbs device list: {seen}; {HINT})"
        )),
        None => Err(format!(
            "RDMA device {} has no active port {} (looked in libibverbs device list: {seen}; check verbs.device and verbs.port)",
            cfg.device, cfg.port
        )),
    }
}

/// The NUMA node of RDMA device `device` (`/sys/class/infiniband/DEV/device/numa_node`),
/// `None` when the machine does not say (one node, a virtual device, no sysfs).
/// Busy-polling threads belong on this node's cores: see
/// [`crate::sys::affinity::placement_for`].
pub fn numa_node(device: &str) -> Option<u32> {
    numa_node_in(&Sysfs::system(), device)
}

fn numa_node_in(sysfs: &Sysfs, device: &str) -> Option<u32> {
    match sysfs.device_numa_node(Device::Rdma(device)) {
        Ok(node) => node,
        Err(e) => {
            log::debug!("NUMA node of RDMA device {device}: {e}");
            None
        }
    }
}

/// Checks `capacity` against a device limit, as a sentence.
pub(crate) fn check_limit(
    what: &str,
    wanted: usize,
    limit: c_int,
    device: &str,
    key: &str,
) -> Result<()> {
    if limit > 0 && wanted > limit as usize {
        return Err(errors::other(
            format!("sizing {what}"),
            device,
            None,
            format!("{wanted} entries are needed and the device allows {limit}; lower {key}"),
        ));
    }
    Ok(())
}

/// The error of a bus asked for verbs where there is none.
pub(crate) fn unavailable(reason: String) -> Error {
    Error::TransportUnavailable {
        transport: "verbs",
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_enum_maps_to_bytes() {
        assert_eq!(mtu_bytes(verbs_sys::IBV_MTU_256), 256);
        assert_eq!(mtu_bytes(verbs_sys::IBV_MTU_1024), 1024);
        assert_eq!(mtu_bytes(verbs_sys::IBV_MTU_4096), 4096);
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(mtu_bytes(9), 0);
    }

    #[test]
    fn numa_node_of_a_missing_device_is_none() {
        let dir = std::env::temp_dir().join(format!("mdbus-verbs-numa-{}", std::process::id()));
        let dev = dir.join("class/infiniband/mlx5_0/device");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        let sysfs = Sysfs::at(&dir);
        assert_eq!(numa_node_in(&sysfs, "mlx5_0"), Some(1));
        assert_eq!(numa_node_in(&sysfs, "rxe9"), None);
        std::fs::write(dev.join("numa_node"), "-1\n").unwrap();
        assert_eq!(numa_node_in(&sysfs, "mlx5_0"), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}
