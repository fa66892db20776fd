//! The `static inline` functions of `<infiniband/verbs.h>` and
//! `<rdma/rdma_cma.h>` that mdbus needs, ported by hand. They are not
//! exported by any library: C programs compile them in, so Rust must too.
//!
//! The data-path ones call the provider through the context's ops table,
//! exactly as the header does, and so need no loaded library table.

use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::ptr;

use crate::bindings::*;

/// `ibv_post_send`: posts a list of send work requests to `qp`'s send queue.
///
/// As in `verbs.h`: `qp->context->ops.post_send(qp, wr, bad_wr)`. Returns 0,
/// or an errno value with `*bad_wr` set to the first request not posted.
///
/// # Safety
///
/// - `qp` must be a live queue pair (from `ibv_create_qp` or
///   `rdma_create_qp`), not used concurrently by another thread for posting
///   sends, and `bad_wr` valid for a write.
/// - `wr` must point to a valid, null-terminated `next` list of work
///   requests; each scatter/gather entry must lie in a registered memory
///   region whose `lkey` it carries (inline sends excepted: their data is
///   copied during the call).
/// - The memory named by a non-inline request must stay valid and must not be
///   modified until that request's completion has been polled from the send
///   CQ (for unsignaled requests: a later signaled request's completion).
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller guarantees `qp` is live; a live QP's `context`
    // points to the live context it was created on.
    let op = unsafe { (*(*qp).context).ops.post_send };
    match op {
        // SAFETY: the provider's post_send for this QP, called with the
        // arguments the caller vouched for, exactly as verbs.h does.
        Some(post_send) => unsafe { post_send(qp, wr, bad_wr) },
        // SAFETY: the caller guarantees `bad_wr` is valid for a write.
        None => unsafe { unsupported(bad_wr, wr) },
    }
}

/// `ibv_post_recv`: posts a list of receive work requests to `qp`'s receive
/// queue.
///
/// As in `verbs.h`: `qp->context->ops.post_recv(qp, wr, bad_wr)`. Returns 0,
/// or an errno value with `*bad_wr` set to the first request not posted.
///
/// # Safety
///
/// - `qp` must be a live queue pair without an SRQ, not used concurrently by
///   another thread for posting receives, and `bad_wr` valid for a write.
/// - `wr` must point to a valid, null-terminated `next` list of work
///   requests whose scatter/gather entries lie in registered memory regions
///   with local write access.
/// - That memory is written by the device at any time until the request's
///   completion has been polled: it must stay valid and must not be read or
///   written by the program before then.
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees `qp` is live; a live QP's `context`
    // points to the live context it was created on.
    let op = unsafe { (*(*qp).context).ops.post_recv };
    match op {
        // SAFETY: the provider's post_recv for this QP, called with the
        // arguments the caller vouched for, exactly as verbs.h does.
        Some(post_recv) => unsafe { post_recv(qp, wr, bad_wr) },
        // SAFETY: the caller guarantees `bad_wr` is valid for a write.
        None => unsafe { unsupported(bad_wr, wr) },
    }
}

/// `ibv_post_srq_recv`: posts a list of receive work requests to the shared
/// receive queue `srq`.
///
/// As in `verbs.h`: `srq->context->ops.post_srq_recv(srq, recv_wr, bad_recv_wr)`.
/// Returns 0 on success or an errno value (`EOPNOTSUPP` when the provider
/// has no shared receive queues), with `*bad_recv_wr` set to the first
/// request not posted.
///
/// # Safety
///
/// As [`ibv_post_recv`], with `srq` a live shared receive queue not posted to
/// concurrently by another thread.
#[inline]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees `srq` is live; a live SRQ's `context`
    // points to the live context it was created on.
    let op = unsafe { (*(*srq).context).ops.post_srq_recv };
    match op {
        // SAFETY: the provider's post_srq_recv, called with the arguments
        // the caller vouched for, exactly as verbs.h does.
        Some(post) => unsafe { post(srq, wr, bad_wr) },
        // SAFETY: the caller guarantees `bad_wr` is valid for a write.
        None => unsafe { unsupported(bad_wr, wr) },
    }
}

/// `ibv_poll_cq`: moves up to `num_entries` completions from `cq` into `wc`.
///
/// As in `verbs.h`: `cq->context->ops.poll_cq(cq, num_entries, wc)`. Returns
/// the number of completions written (0 when the CQ is empty), or a negative
/// value on error (`-EOPNOTSUPP` if the provider has no `poll_cq`).
///
/// # Safety
///
/// `cq` must be a live completion queue not polled concurrently by another
/// thread, and `wc` valid for writes of `num_entries` [`ibv_wc`]s.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees `cq` is live; a live CQ's `context`
    // points to the live context it was created on.
    let op = unsafe { (*(*cq).context).ops.poll_cq };
    match op {
        // SAFETY: the provider's poll_cq for this CQ, called with the
        // arguments the caller vouched for, exactly as verbs.h does.
        Some(poll_cq) => unsafe { poll_cq(cq, num_entries, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq`: asks for an event on `cq`'s completion channel when
/// the next completion (with `solicited_only != 0`: the next solicited one)
/// is added.
///
/// As in `verbs.h`: `cq->context->ops.req_notify_cq(cq, solicited_only)`.
/// Returns 0 or an errno value.
///
/// # Safety
///
/// `cq` must be a live completion queue.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller guarantees `cq` is live; a live CQ's `context`
    // points to the live context it was created on.
    let op = unsafe { (*(*cq).context).ops.req_notify_cq };
    match op {
        // SAFETY: the provider's req_notify_cq for this CQ, exactly as
        // verbs.h calls it.
        Some(req_notify_cq) => unsafe { req_notify_cq(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

/// `rdma_get_local_addr`: the local address bound or resolved on `id`
/// (`&id->route.addr.src_addr`).
///
/// # Safety
///
/// `id` must be a live `rdma_cm_id`; the result is valid while it is.
#[inline]
pub unsafe fn rdma_get_local_addr(id: *mut rdma_cm_id) -> *mut sockaddr {
    // SAFETY: the caller guarantees `id` is live; this only computes the
    // address of a field inside it.
    unsafe { ptr::addr_of_mut!((*id).route.addr.__bindgen_anon_1.src_addr) }
}

/// `rdma_get_peer_addr`: the remote address resolved on `id`
/// (`&id->route.addr.dst_addr`).
///
/// # Safety
///
/// `id` must be a live `rdma_cm_id`; the result is valid while it is.
#[inline]
pub unsafe fn rdma_get_peer_addr(id: *mut rdma_cm_id) -> *mut sockaddr {
    // SAFETY: the caller guarantees `id` is live; this only computes the
    // address of a field inside it.
    unsafe { ptr::addr_of_mut!((*id).route.addr.__bindgen_anon_2.dst_addr) }
}

/// What a provider without the op returns: rdma-core's placeholder ops
/// report `EOPNOTSUPP` and name the first request as not posted.
///
/// # Safety
///
/// `bad_wr` must be valid for a write.
#[cold]
unsafe fn unsupported<T>(bad_wr: *mut *mut T, wr: *mut T) -> c_int {
    // SAFETY: guaranteed by the caller.
    unsafe { *bad_wr = wr };
    libc::EOPNOTSUPP
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value of a context that is
/// embedded in a `struct verbs_context`.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// The type of `verbs_context::query_port`.
pub(crate) type QueryPortOp = Option<
    unsafe extern "C" fn(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
        port_attr_len: usize,
    ) -> c_int,
>;

// Fails to compile if the generated field's type ever differs from QueryPortOp.
const _: fn(&verbs_context) -> QueryPortOp = |v| v.query_port;

/// The exported `ibv_query_port` symbol's type.
pub(crate) type CompatQueryPort =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int;

/// `verbs_get_ctx_op(context, query_port)->query_port` from `verbs.h`, or
/// `None` where the header's macro gives NULL.
///
/// The header's `container_of` points at a `struct verbs_context` laid out as
/// this crate's headers know it; a library built from older headers has a
/// shorter one (new ops are added at the front), and `sz` says how long. So
/// only `sz` (just before the `ibv_context`) and, once `sz` shows it exists,
/// the op itself are read, each at its offset from `context`, which keeps
/// every access inside the provider's real allocation.
///
/// # Safety
///
/// `context` must be a live context.
unsafe fn query_port_op(context: *mut ibv_context) -> QueryPortOp {
    // SAFETY: the caller guarantees `context` is live.
    let abi_compat = unsafe { (*context).abi_compat };
    if abi_compat as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    let ctx_off = offset_of!(verbs_context, context);
    let base = context.cast::<u8>();
    // SAFETY: an extended context is the last field of a verbs_context,
    // right after `sz` (verbs.h: "Must be immediately before struct
    // ibv_context"), so `sz` lies in the same allocation, before `context`.
    let sz = unsafe {
        base.sub(ctx_off - offset_of!(verbs_context, sz))
            .cast::<usize>()
            .read()
    };
    let op_off = offset_of!(verbs_context, query_port);
    // The test in verbs_get_ctx_op: the provider's verbs_context, `sz` bytes
    // ending where this crate's does, must reach back to the op.
    if sz < size_of::<verbs_context>() - op_off {
        return None;
    }
    // SAFETY: the check above shows the op's slot lies within the provider's
    // verbs_context; the slot holds a nullable function pointer of this type
    // (see the const assertion beside QueryPortOp) and is pointer-aligned.
    unsafe { base.sub(ctx_off - op_off).cast::<QueryPortOp>().read() }
}

/// `___ibv_query_port` from `verbs.h`, with the exported symbol passed in.
///
/// # Safety
///
/// `context` must be a live context, `port_attr` valid for writes of one
/// [`ibv_port_attr`], and `compat` the exported `ibv_query_port` of the
/// library that made `context`.
pub(crate) unsafe fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    compat: CompatQueryPort,
) -> c_int {
    // SAFETY: the caller guarantees `context` is live.
    match unsafe { query_port_op(context) } {
        // SAFETY: the provider's extended query_port, called as verbs.h does,
        // with the size of the structure these bindings describe.
        Some(op) => unsafe { op(context, port_num, port_attr, size_of::<ibv_port_attr>()) },
        None => {
            // SAFETY: the caller guarantees `port_attr` is writable; the
            // compat layout is a prefix of ibv_port_attr, which the header
            // zeroes first so the fields it lacks read as 0.
            unsafe {
                port_attr.write_bytes(0, 1);
                compat(context, port_num, port_attr.cast())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The ports above against fake providers: an `ibv_context` whose ops
    //! table points at functions that record their arguments.

    use super::*;
    use std::cell::Cell;

    thread_local! {
        static CALLS: Cell<u32> = const { Cell::new(0) };
    }

    unsafe extern "C" fn fake_post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
    ) -> c_int {
        // SAFETY: the tests pass a live fake QP and a valid `bad_wr`.
        unsafe {
            assert_eq!((*qp).qp_num, 7);
            *bad_wr = wr;
        }
        CALLS.set(CALLS.get() + 1);
        11
    }

    unsafe extern "C" fn fake_post_recv(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int {
        // SAFETY: as for fake_post_send.
        unsafe {
            assert_eq!((*qp).qp_num, 7);
            *bad_wr = wr;
        }
        CALLS.set(CALLS.get() + 1);
        12
    }

    unsafe extern "C" fn fake_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        // SAFETY: the test passes a live fake CQ and room for `n` entries.
        unsafe {
            assert_eq!((*cq).cqe, 16);
            for i in 0..n as usize {
                (*wc.add(i)).wr_id = 100 + i as u64;
            }
        }
        n
    }

    unsafe extern "C" fn fake_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
        // SAFETY: the test passes a live fake CQ.
        unsafe { assert_eq!((*cq).cqe, 16) };
        solicited_only + 20
    }

    unsafe extern "C" fn fake_query_port_ext(
        _context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
        port_attr_len: usize,
    ) -> c_int {
        assert_eq!(port_attr_len, size_of::<ibv_port_attr>());
        // SAFETY: query_port's caller passes a writable port_attr.
        unsafe { (*port_attr).active_mtu = IBV_MTU_1024 };
        port_num.into()
    }

    unsafe extern "C" fn fake_query_port_compat(
        _context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut _compat_ibv_port_attr,
    ) -> c_int {
        // SAFETY: query_port passes its writable ibv_port_attr, cast to the
        // opaque compat type; the compat layout is a prefix of it.
        unsafe { (*port_attr.cast::<ibv_port_attr>()).state = IBV_PORT_ACTIVE };
        CALLS.set(CALLS.get() + 1);
        c_int::from(port_num) + 100
    }

    #[test]
    fn data_path_calls_go_through_the_ops_table() {
        let mut ctx = ibv_context::default();
        ctx.ops.post_send = Some(fake_post_send);
        ctx.ops.post_recv = Some(fake_post_recv);
        ctx.ops.poll_cq = Some(fake_poll_cq);
        ctx.ops.req_notify_cq = Some(fake_req_notify_cq);
        let mut qp = ibv_qp {
            context: &mut ctx,
            qp_num: 7,
            ..Default::default()
        };
        let mut cq = ibv_cq {
            context: &mut ctx,
            cqe: 16,
            ..Default::default()
        };
        CALLS.set(0);

        let mut swr = ibv_send_wr::default();
        let mut bad_s = ptr::null_mut();
        // SAFETY: the fake QP points at a context whose ops are the fakes.
        assert_eq!(unsafe { ibv_post_send(&mut qp, &mut swr, &mut bad_s) }, 11);
        assert_eq!(bad_s, ptr::addr_of_mut!(swr));

        let mut rwr = ibv_recv_wr::default();
        let mut bad_r = ptr::null_mut();
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_post_recv(&mut qp, &mut rwr, &mut bad_r) }, 12);
        assert_eq!(bad_r, ptr::addr_of_mut!(rwr));
        assert_eq!(CALLS.get(), 2);

        let mut wc = [ibv_wc::default(); 3];
        // SAFETY: the fake CQ's ops are the fakes; `wc` has room for 3.
        assert_eq!(unsafe { ibv_poll_cq(&mut cq, 3, wc.as_mut_ptr()) }, 3);
        assert_eq!(wc.map(|w| w.wr_id), [100, 101, 102]);
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_req_notify_cq(&mut cq, 1) }, 21);
    }

    unsafe extern "C" fn fake_post_srq_recv(
        srq: *mut ibv_srq,
        wr: *mut ibv_recv_wr,
        bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int {
        // SAFETY: the test passes a live fake SRQ and valid pointers.
        unsafe {
            assert_eq!((*srq).handle, 9);
            *bad_wr = wr;
        }
        13
    }

    #[test]
    fn srq_posts_go_through_the_ops_table() {
        let mut none = ibv_context::default();
        let mut ctx = ibv_context::default();
        ctx.ops.post_srq_recv = Some(fake_post_srq_recv);
        // SAFETY: an all-zero ibv_srq is a valid C struct (pointers null,
        // pthread objects zeroed, as a static initialiser would leave them).
        let mut srq: ibv_srq = unsafe { std::mem::zeroed() };
        srq.context = &mut none;
        srq.handle = 9;
        let mut rwr = ibv_recv_wr::default();
        let mut bad = ptr::null_mut();
        // SAFETY: the fake SRQ's context has no post_srq_recv.
        let rc = unsafe { ibv_post_srq_recv(&mut srq, &mut rwr, &mut bad) };
        assert_eq!(rc, libc::EOPNOTSUPP);
        srq.context = &mut ctx;
        let mut bad = ptr::null_mut();
        // SAFETY: the fake op is installed; all pointers are valid.
        let rc = unsafe { ibv_post_srq_recv(&mut srq, &mut rwr, &mut bad) };
        assert_eq!(rc, 13);
        assert_eq!(bad, ptr::addr_of_mut!(rwr));
    }

    #[test]
    fn a_missing_op_reports_eopnotsupp() {
        let mut ctx = ibv_context::default();
        let mut qp = ibv_qp {
            context: &mut ctx,
            ..Default::default()
        };
        let mut cq = ibv_cq {
            context: &mut ctx,
            ..Default::default()
        };
        let mut swr = ibv_send_wr::default();
        let mut bad = ptr::null_mut();
        // SAFETY: a fake QP whose context has no ops.
        let rc = unsafe { ibv_post_send(&mut qp, &mut swr, &mut bad) };
        assert_eq!(rc, libc::EOPNOTSUPP);
        assert_eq!(bad, ptr::addr_of_mut!(swr));
        // SAFETY: a fake CQ whose context has no ops.
        let rc = unsafe { ibv_poll_cq(&mut cq, 1, ptr::null_mut()) };
        assert_eq!(rc, -libc::EOPNOTSUPP);
    }

    #[test]
    fn query_port_uses_the_extended_op_when_the_context_has_it() {
        let mut vctx = verbs_context {
            query_port: Some(fake_query_port_ext),
            sz: size_of::<verbs_context>(),
            ..Default::default()
        };
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut _;
        let mut attr = ibv_port_attr::default();
        CALLS.set(0);
        // SAFETY: the context is embedded in a verbs_context as rdma-core
        // lays it out; `attr` is writable.
        let rc = unsafe { query_port(&mut vctx.context, 3, &mut attr, fake_query_port_compat) };
        assert_eq!(rc, 3);
        assert_eq!(attr.active_mtu, IBV_MTU_1024);
        assert_eq!(CALLS.get(), 0);
    }

    #[test]
    fn query_port_falls_back_to_the_symbol_for_old_or_plain_contexts() {
        // A context from a library whose verbs_context predates query_port.
        let mut vctx = verbs_context {
            query_port: Some(fake_query_port_ext),
            sz: size_of::<verbs_context>() - offset_of!(verbs_context, query_port) - 8,
            ..Default::default()
        };
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut _;
        // A context that is not extended at all.
        let mut plain = ibv_context::default();
        CALLS.set(0);
        for ctx in [ptr::addr_of_mut!(vctx.context), ptr::addr_of_mut!(plain)] {
            let mut attr = ibv_port_attr {
                lid: 0xffff,
                ..Default::default()
            };
            // SAFETY: live fake contexts; `attr` is writable.
            let rc = unsafe { query_port(ctx, 1, &mut attr, fake_query_port_compat) };
            assert_eq!(rc, 101);
            assert_eq!(attr.state, IBV_PORT_ACTIVE);
            assert_eq!(attr.lid, 0, "zeroed before the compat call");
        }
        assert_eq!(CALLS.get(), 2);
    }
}
