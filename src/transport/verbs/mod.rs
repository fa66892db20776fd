//! The RDMA verbs transport: sessions over RC queue pairs, streams over UD
//! multicast, on libibverbs and librdmacm loaded at run time
//! ([`verbs_sys`]), so one binary runs with or without RDMA.
//!
//! Layers, bottom up:
//! - safe owners of one verbs object each, destroyed on drop: [`device`]
//!   (device list, open, port and GID queries, the `auto` choice), `pd`,
//!   `mr` (one registered region per preallocated pool), `cq`, `qp`, `ah`,
//!   `cm` (rdma_cm event channel and ids, with deadlines);
//! - pure bookkeeping with unit tests and no verbs calls: `send_queue`
//!   (selective signaling, send-queue occupancy) and `credit` (flow
//!   control);
//! - the endpoints: [`RcSession`] (implements
//!   [`SessionEnd`](crate::transport::SessionEnd)) and [`UdLink`]
//!   (implements [`DatagramLink`](crate::transport::datagram::DatagramLink)).
//!
//! A handle owns its objects outright, declared so that they drop in
//! dependency order (queue pair, then completion queues and memory
//! regions, then the protection domain, then the cm id, then its event
//! channel). Handles are `Send`, not `Sync`, and take no locks.
//!
//! See docs/RDMA.md for the design and for running on hardware.

mod ah;
pub(crate) mod async_events;
mod cm;
mod cq;
mod credit;
pub mod device;
mod errors;
mod mr;
mod pd;
mod qp;
mod rc;
mod recv_ring;
mod send_queue;
mod srq;
mod ud_join;
mod ud_link;

pub use device::{detect, numa_node, probe, ActivePort, DeviceInfo, PortInfo};
pub use rc::{RcSession, RNR_RETRY};
pub use ud_link::{UdLink, UdLinkConfig, UdPeer};

use verbs_sys::{Rdmacm, Verbs};

use crate::error::Result;

/// Both loaded libraries.
#[derive(Clone, Copy)]
pub(crate) struct Lib {
    pub(crate) verbs: &'static Verbs,
    pub(crate) cm: &'static Rdmacm,
}

/// Loads libibverbs and librdmacm (once per process).
pub(crate) fn lib() -> Result<Lib> {
    let verbs = Verbs::load().map_err(|e| device::unavailable(e.to_string()))?;
    let cm = Rdmacm::load().map_err(|e| device::unavailable(e.to_string()))?;
    Ok(Lib { verbs, cm })
}

/// Logs the setting rdma_cm overrides: the device (and GID) follow from
/// the address a handle binds, not from `verbs.device`.
pub(crate) fn note_overrides(channel: &str, cfg: &crate::config::VerbsConfig, device: &str) {
    if !cfg.device.is_empty() && cfg.device != device {
        log::warn!(
            "{channel}: runs on {device}, the device of its address, not on verbs.device {}; give an address of {} to use it",
            cfg.device,
            cfg.device
        );
    }
}
