//! Queue pairs created through rdma_cm (which moves them through INIT, RTR
//! and RTS as the connection or join proceeds). One per handle, used by one
//! thread: posting needs no lock of ours.

use std::ptr::NonNull;

use verbs_sys::{
    ibv_gid, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_qp_type, ibv_recv_wr, ibv_send_wr, ibv_sge,
    ibv_srq, ibv_wr_opcode, Rdmacm, Verbs, IBV_QPS_ERR, IBV_QP_STATE,
};

use super::cm::CmId;
use super::cq::Cq;
use super::errors;
use super::pd::Pd;
use super::srq::Srq;
use super::VerbsWork;
use crate::error::Result;

/// Requests in a chain of send or receive requests (0 for null).
macro_rules! chain_len {
    ($wr:expr) => {{
        let mut n = 0u64;
        let mut w = $wr;
        while !w.is_null() {
            n += 1;
            // SAFETY: the caller's chain has valid `next` links, as
            // ibv_post_send and ibv_post_recv themselves require.
            w = unsafe { (*w).next };
        }
        n
    }};
}

/// The one scatter/gather entry of a send: `len` bytes at `src`, in the
/// region registered with `lkey` (or copied inline when the request says
/// `IBV_SEND_INLINE`).
#[inline]
pub(crate) fn sge(src: *const u8, len: usize, lkey: u32) -> ibv_sge {
    ibv_sge {
        addr: src as u64,
        length: len as u32,
        lkey,
    }
}

/// A send request `wr_id` of `opcode` over the one entry `sge`, which must
/// stay in place until the request is posted; the caller fills in the
/// opcode's own fields (remote address, address handle).
#[inline]
pub(crate) fn send_request(
    wr_id: u64,
    sge: &mut ibv_sge,
    opcode: ibv_wr_opcode,
    send_flags: u32,
) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags,
        ..Default::default()
    }
}

/// Queue sizes asked for at creation, and what the device granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Send queue entries.
    pub(crate) send_wr: u32,
    /// Receive queue entries.
    pub(crate) recv_wr: u32,
    /// Bytes a send may carry inline (copied into the work request).
    pub(crate) inline: u32,
}

/// A queue pair attached to an rdma_cm id; destroyed with
/// `rdma_destroy_qp` on drop, before the id, its CQs and its PD.
pub(crate) struct CmQp {
    cm: &'static Rdmacm,
    qp: NonNull<ibv_qp>,
    id: NonNull<verbs_sys::rdma_cm_id>,
    /// Work posted through this queue pair (completions are counted by
    /// the owner, which polls the queues).
    posted: VerbsWork,
}

impl CmQp {
    /// Creates a queue pair of `kind` (`IBV_QPT_RC` or `IBV_QPT_UD`) on
    /// `id`, completing sends on `send_cq` and receives on `recv_cq`, one
    /// scatter/gather entry per request. Returns it with the granted sizes.
    ///
    /// # Safety
    /// `id`, `pd` and both queues must outlive the queue pair, and `pd` and
    /// the queues must be on `id`'s device.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn create(
        cm: &'static Rdmacm,
        id: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        kind: ibv_qp_type,
        want: Caps,
        device: &str,
    ) -> Result<(CmQp, Caps)> {
        // SAFETY: the caller's contract; no shared receive queue.
        unsafe {
            Self::create_in(
                cm,
                id,
                pd,
                send_cq,
                recv_cq,
                std::ptr::null_mut(),
                kind,
                want,
                device,
            )
        }
    }

    /// Like [`create`](Self::create), but the queue pair takes its receive
    /// buffers from `srq` (it has no receive queue of its own); receive
    /// completions go to `recv_cq`.
    ///
    /// # Safety
    /// As for `create`; `srq` must be in `pd` and outlive the queue pair.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn create_on_srq(
        cm: &'static Rdmacm,
        id: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: &Srq,
        want: Caps,
        device: &str,
    ) -> Result<(CmQp, Caps)> {
        // SAFETY: the caller's contract.
        unsafe {
            Self::create_in(
                cm,
                id,
                pd,
                send_cq,
                recv_cq,
                srq.as_raw(),
                verbs_sys::IBV_QPT_RC,
                want,
                device,
            )
        }
    }

    /// The body of [`create`](Self::create) and
    /// [`create_on_srq`](Self::create_on_srq).
    ///
    /// # Safety
    /// As for `create`; `srq` is null or a live shared receive queue in
    /// `pd` that outlives the queue pair.
    #[allow(clippy::too_many_arguments)]
    unsafe fn create_in(
        cm: &'static Rdmacm,
        id: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: *mut ibv_srq,
        kind: ibv_qp_type,
        want: Caps,
        device: &str,
    ) -> Result<(CmQp, Caps)> {
        let mut attr = ibv_qp_init_attr {
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            srq,
            qp_type: kind,
            // Completions only where a request asks for one (selective
            // signaling).
            sq_sig_all: 0,
            ..Default::default()
        };
        attr.cap.max_send_wr = want.send_wr;
        // With a shared receive queue the queue pair has none of its own.
        let own_recv = srq.is_null();
        attr.cap.max_recv_wr = if own_recv { want.recv_wr } else { 0 };
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = u32::from(own_recv);
        attr.cap.max_inline_data = want.inline;
        // SAFETY: all objects are live (caller); `attr` is valid and the
        // call writes the granted capabilities back into it.
        let rc = unsafe { (cm.rdma_create_qp)(id.as_raw(), pd.as_raw(), &mut attr) };
        if rc != 0 {
            return Err(errors::ret(
                format!(
                    "rdma_create_qp ({} send, {} receive entries, {} bytes inline)",
                    want.send_wr, want.recv_wr, want.inline
                ),
                device,
                None,
                rc,
            ));
        }
        // SAFETY: on success rdma_create_qp stored the new QP in the id.
        let qp = unsafe { (*id.as_raw()).qp };
        let granted = Caps {
            send_wr: attr.cap.max_send_wr,
            recv_wr: attr.cap.max_recv_wr,
            inline: attr.cap.max_inline_data,
        };
        Ok((
            CmQp {
                cm,
                qp: NonNull::new(qp).expect("rdma_create_qp set id->qp"),
                id: NonNull::new(id.as_raw()).expect("live id"),
                posted: VerbsWork::default(),
            },
            granted,
        ))
    }

    /// The queue pair number.
    pub(crate) fn num(&self) -> u32 {
        // SAFETY: the QP is live while `self` is.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// Posts a chain of send requests; `Err(errno)` on failure.
    ///
    /// # Safety
    /// As [`verbs_sys::ibv_post_send`]: every non-inline request's memory is
    /// registered and stays untouched until its completion (or a later
    /// signaled one) has been polled.
    #[inline]
    pub(crate) unsafe fn post_send(
        &mut self,
        wr: *mut ibv_send_wr,
    ) -> std::result::Result<(), i32> {
        self.posted.send_wrs += chain_len!(wr);
        self.posted.send_doorbells += 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is live; `&mut self` makes this the only poster;
        // the requests are the caller's responsibility.
        let rc = unsafe { verbs_sys::ibv_post_send(self.qp.as_ptr(), wr, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            Err(if rc > 0 { rc } else { errors::errno() })
        }
    }

    /// Posts a chain of receive requests; `Err(errno)` on failure.
    ///
    /// # Safety
    /// As [`verbs_sys::ibv_post_recv`]: the buffers are registered with
    /// local write access and untouched until their completions are polled.
    #[inline]
    pub(crate) unsafe fn post_recv(
        &mut self,
        wr: *mut ibv_recv_wr,
    ) -> std::result::Result<(), i32> {
        self.posted.recv_wrs += chain_len!(wr);
        self.posted.recv_doorbells += 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in post_send.
        let rc = unsafe { verbs_sys::ibv_post_recv(self.qp.as_ptr(), wr, &mut bad) };
        if rc == 0 {
            Ok(())
        } else {
            Err(if rc > 0 { rc } else { errors::errno() })
        }
    }
}

impl CmQp {
    /// Work requests and doorbells posted so far (`completions` is 0).
    pub(crate) fn posted(&self) -> VerbsWork {
        self.posted
    }

    /// Moves the queue pair to the error state (fault injection in tests):
    /// outstanding requests are flushed.
    pub(crate) fn force_error(&mut self, verbs: &Verbs) -> std::result::Result<(), i32> {
        let mut attr = ibv_qp_attr {
            qp_state: IBV_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: the QP is live; only the state is changed.
        let rc = unsafe { (verbs.ibv_modify_qp)(self.qp.as_ptr(), &mut attr, IBV_QP_STATE as i32) };
        if rc == 0 {
            Ok(())
        } else {
            Err(if rc > 0 { rc } else { errors::errno() })
        }
    }
}

impl CmQp {
    /// Detaches the queue pair from multicast group `gid`/`lid`: the group's
    /// datagrams are no longer delivered to it.
    pub(crate) fn detach_mcast(
        &mut self,
        verbs: &Verbs,
        gid: &ibv_gid,
        lid: u16,
    ) -> std::result::Result<(), i32> {
        // SAFETY: the QP is live; the GID is read during the call only.
        let rc = unsafe { (verbs.ibv_detach_mcast)(self.qp.as_ptr(), gid, lid) };
        if rc == 0 {
            Ok(())
        } else {
            Err(if rc > 0 { rc } else { errors::errno() })
        }
    }
}

impl Drop for CmQp {
    fn drop(&mut self) {
        // SAFETY: the id is live (it outlives the QP: owner's field order)
        // and still holds this QP; rdma_destroy_qp destroys it and clears
        // id->qp.
        unsafe { (self.cm.rdma_destroy_qp)(self.id.as_ptr()) };
    }
}
