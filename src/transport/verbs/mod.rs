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
pub use ud_link::{Membership, UdLink, UdLinkConfig, UdPeer};

use verbs_sys::{Rdmacm, Verbs};

use crate::error::Result;

/// Verbs work one handle has asked of its device, counted by the
/// handle's own thread (plain adds, nothing shared): what a NIC pays for
/// per message, comparable with perftest's (docs/PERFORMANCE.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbsWork {
    /// Send work requests posted (messages, credit and close writes,
    /// keep-alives).
    pub send_wrs: u64,
    /// `ibv_post_send` calls: doorbells on the send queue.
    pub send_doorbells: u64,
    /// Receive work requests posted (to the queue pair or, for a session
    /// on a shared receive queue, its buffers reposted to that queue).
    pub recv_wrs: u64,
    /// `ibv_post_recv` and `ibv_post_srq_recv` calls.
    pub recv_doorbells: u64,
    /// Work completions taken by `ibv_poll_cq` (send and receive queues).
    pub completions: u64,
}

impl VerbsWork {
    /// The sum of two counts.
    pub fn plus(self, o: VerbsWork) -> VerbsWork {
        VerbsWork {
            send_wrs: self.send_wrs + o.send_wrs,
            send_doorbells: self.send_doorbells + o.send_doorbells,
            recv_wrs: self.recv_wrs + o.recv_wrs,
            recv_doorbells: self.recv_doorbells + o.recv_doorbells,
            completions: self.completions + o.completions,
        }
    }

    /// The five counts, in the order of the counters file's slots
    /// (`verbs_send_wrs` ... `verbs_completions`).
    pub fn values(self) -> [u64; 5] {
        [
            self.send_wrs,
            self.send_doorbells,
            self.recv_wrs,
            self.recv_doorbells,
            self.completions,
        ]
    }
}

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
