//! libibverbs: the function table and the header wrappers that need it.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::bindings::*;
use crate::load::{fn_table, DynLib, LoadError};

const INSTALL_HINT: &str = "install rdma-core (Debian: ibverbs-providers, libibverbs1)";

fn_table! {
    /// The libibverbs functions mdbus uses, resolved from `libibverbs.so.1`.
    ///
    /// Get the process-wide table with [`Verbs::load`]. Each field is the C
    /// function of the same name; call it as `(verbs.ibv_open_device)(dev)`.
    /// The C `ibv_query_port`, `ibv_reg_mr` and `ibv_query_gid_ex` are header
    /// wrappers around the exported symbols: use [`Verbs::query_port`],
    /// [`Verbs::reg_mr`] and [`Verbs::query_gid_ex`] for the C behaviour. The
    /// data-path calls (`ibv_post_send`, `ibv_poll_cq`, ...) are not symbols
    /// at all: they are the crate-level functions [`crate::ibv_post_send`] etc.
    pub struct Verbs;
    required {
        ibv_get_device_list @ "IBVERBS_1.1": fn(num_devices: *mut c_int) -> *mut *mut ibv_device;
        ibv_free_device_list @ "IBVERBS_1.1": fn(list: *mut *mut ibv_device);
        ibv_get_device_name @ "IBVERBS_1.1": fn(device: *mut ibv_device) -> *const c_char;
        ibv_get_device_guid @ "IBVERBS_1.1": fn(device: *mut ibv_device) -> __be64;
        ibv_open_device @ "IBVERBS_1.1": fn(device: *mut ibv_device) -> *mut ibv_context;
        ibv_close_device @ "IBVERBS_1.1": fn(context: *mut ibv_context) -> c_int;
        ibv_get_async_event @ "IBVERBS_1.1":
            fn(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
        ibv_ack_async_event @ "IBVERBS_1.1": fn(event: *mut ibv_async_event);
        ibv_query_device @ "IBVERBS_1.1":
            fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int;
        /// The exported symbol fills the old `_compat_ibv_port_attr` layout
        /// only; [`Verbs::query_port`] is what C's `ibv_query_port()` does.
        ibv_query_port @ "IBVERBS_1.1":
            fn(context: *mut ibv_context, port_num: u8, port_attr: *mut _compat_ibv_port_attr) -> c_int;
        ibv_query_gid @ "IBVERBS_1.1":
            fn(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
        ibv_query_pkey @ "IBVERBS_1.1":
            fn(context: *mut ibv_context, port_num: u8, index: c_int, pkey: *mut __be16) -> c_int;
        ibv_alloc_pd @ "IBVERBS_1.1": fn(context: *mut ibv_context) -> *mut ibv_pd;
        ibv_dealloc_pd @ "IBVERBS_1.1": fn(pd: *mut ibv_pd) -> c_int;
        /// Prefer [`Verbs::reg_mr`], which picks this or `ibv_reg_mr_iova2`
        /// the way the C macro `ibv_reg_mr()` does.
        ibv_reg_mr @ "IBVERBS_1.1":
            fn(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
        ibv_dereg_mr @ "IBVERBS_1.1": fn(mr: *mut ibv_mr) -> c_int;
        ibv_create_comp_channel @ "IBVERBS_1.0":
            fn(context: *mut ibv_context) -> *mut ibv_comp_channel;
        ibv_destroy_comp_channel @ "IBVERBS_1.0": fn(channel: *mut ibv_comp_channel) -> c_int;
        ibv_create_cq @ "IBVERBS_1.1": fn(
            context: *mut ibv_context,
            cqe: c_int,
            cq_context: *mut c_void,
            channel: *mut ibv_comp_channel,
            comp_vector: c_int,
        ) -> *mut ibv_cq;
        ibv_destroy_cq @ "IBVERBS_1.1": fn(cq: *mut ibv_cq) -> c_int;
        ibv_get_cq_event @ "IBVERBS_1.1": fn(
            channel: *mut ibv_comp_channel,
            cq: *mut *mut ibv_cq,
            cq_context: *mut *mut c_void,
        ) -> c_int;
        ibv_ack_cq_events @ "IBVERBS_1.1": fn(cq: *mut ibv_cq, nevents: c_uint);
        ibv_create_srq @ "IBVERBS_1.1":
            fn(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
        ibv_destroy_srq @ "IBVERBS_1.1": fn(srq: *mut ibv_srq) -> c_int;
        ibv_create_qp @ "IBVERBS_1.1":
            fn(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
        ibv_destroy_qp @ "IBVERBS_1.1": fn(qp: *mut ibv_qp) -> c_int;
        ibv_modify_qp @ "IBVERBS_1.1":
            fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
        ibv_query_qp @ "IBVERBS_1.1": fn(
            qp: *mut ibv_qp,
            attr: *mut ibv_qp_attr,
            attr_mask: c_int,
            init_attr: *mut ibv_qp_init_attr,
        ) -> c_int;
        ibv_create_ah @ "IBVERBS_1.1": fn(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
        ibv_destroy_ah @ "IBVERBS_1.1": fn(ah: *mut ibv_ah) -> c_int;
        ibv_init_ah_from_wc @ "IBVERBS_1.1": fn(
            context: *mut ibv_context,
            port_num: u8,
            wc: *mut ibv_wc,
            grh: *mut ibv_grh,
            ah_attr: *mut ibv_ah_attr,
        ) -> c_int;
        ibv_create_ah_from_wc @ "IBVERBS_1.1":
            fn(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port_num: u8) -> *mut ibv_ah;
        ibv_attach_mcast @ "IBVERBS_1.1":
            fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
        ibv_detach_mcast @ "IBVERBS_1.1":
            fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
        ibv_wc_status_str @ "IBVERBS_1.1": fn(status: ibv_wc_status) -> *const c_char;
        ibv_event_type_str @ "IBVERBS_1.1": fn(event: ibv_event_type) -> *const c_char;
        ibv_port_state_str @ "IBVERBS_1.1": fn(port_state: ibv_port_state) -> *const c_char;
        ibv_node_type_str @ "IBVERBS_1.1": fn(node_type: ibv_node_type) -> *const c_char;
    }
    optional {
        ibv_reg_mr_iova2 @ "IBVERBS_1.8": fn(
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            iova: u64,
            access: c_uint,
        ) -> *mut ibv_mr;
        /// Call it through [`Verbs::query_gid_ex`].
        _ibv_query_gid_ex @ "IBVERBS_1.11": fn(
            context: *mut ibv_context,
            port_num: u32,
            gid_index: u32,
            entry: *mut ibv_gid_entry,
            flags: u32,
            entry_size: usize,
        ) -> c_int;
    }
}

impl Verbs {
    /// The library [`Verbs::load`] opens.
    pub const LIBRARY: &'static str = "libibverbs.so.1";

    /// The process-wide table, loading `libibverbs.so.1` on the first call.
    ///
    /// The outcome, success or error, is kept for the life of the process:
    /// later calls return it without touching the dynamic loader again.
    /// A machine without RDMA devices still loads: devices are found later by
    /// `ibv_get_device_list`.
    pub fn load() -> Result<&'static Verbs, LoadError> {
        static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();
        VERBS
            .get_or_init(|| Verbs::open_from(Verbs::LIBRARY))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads the table from `library` (a name for `dlopen`, or a path),
    /// bypassing the process-wide table. The library stays loaded for the
    /// life of the process.
    pub fn open_from(library: &str) -> Result<Verbs, LoadError> {
        let lib = DynLib::open(library, INSTALL_HINT)?;
        Verbs::resolve(&lib)
    }

    /// What C's `ibv_query_port()` does: the header makes it an inline that
    /// asks the provider's extended `query_port` op for the full
    /// [`ibv_port_attr`], and falls back to the exported `ibv_query_port`
    /// symbol (which fills only the older, shorter layout) after zeroing
    /// `port_attr`.
    ///
    /// Returns 0 or an errno value, as in C.
    ///
    /// # Safety
    ///
    /// `context` must be a live context from [`Verbs::ibv_open_device`] of
    /// this library (or one from `rdma_cm`), and `port_attr` must be valid
    /// for writes of one [`ibv_port_attr`].
    pub unsafe fn query_port(
        &self,
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
    ) -> c_int {
        // SAFETY: forwarded from this function's contract; the fallback is
        // the exported ibv_query_port of the same library.
        unsafe { crate::inline::query_port(context, port_num, port_attr, self.ibv_query_port) }
    }

    /// What C's `ibv_reg_mr()` macro does: access flags without
    /// `IBV_ACCESS_OPTIONAL_RANGE` bits go to the exported `ibv_reg_mr`;
    /// with them, to `ibv_reg_mr_iova2` with `iova = addr`, which drops the
    /// optional flags a device does not support. When the library has no
    /// `ibv_reg_mr_iova2` those flags are refused: null is returned and
    /// `errno` is set to `EOPNOTSUPP`.
    ///
    /// Returns the new memory region, or null with `errno` set.
    ///
    /// # Safety
    ///
    /// `pd` must be a live protection domain from this library, and
    /// `addr..addr + length` must stay mapped until the region is
    /// deregistered with `ibv_dereg_mr`. With any `IBV_ACCESS_REMOTE_*` or
    /// local-write flag the device may write that memory at any time while
    /// the region exists, so it must not be memory Rust assumes unchanged.
    pub unsafe fn reg_mr(
        &self,
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        access: c_uint,
    ) -> *mut ibv_mr {
        if access & IBV_ACCESS_OPTIONAL_RANGE == 0 {
            // The C macro passes `(int)access` here too.
            let access = access as c_int;
            // SAFETY: forwarded from this function's contract.
            return unsafe { (self.ibv_reg_mr)(pd, addr, length, access) };
        }
        match self.ibv_reg_mr_iova2 {
            // SAFETY: forwarded from this function's contract; iova = addr as
            // in the header.
            Some(reg) => unsafe { reg(pd, addr, length, addr as u64, access) },
            None => {
                // SAFETY: __errno_location returns this thread's errno slot.
                unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
                std::ptr::null_mut()
            }
        }
    }

    /// What C's `ibv_query_gid_ex()` does: reads one GID table entry, with
    /// its type (`IBV_GID_TYPE_ROCE_V2`, ...) and net device. `flags` must be
    /// 0. Returns 0 or an errno value; `EOPNOTSUPP` when the library predates
    /// `_ibv_query_gid_ex`.
    ///
    /// # Safety
    ///
    /// `context` must be a live context of this library and `entry` valid for
    /// writes of one [`ibv_gid_entry`].
    pub unsafe fn query_gid_ex(
        &self,
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
    ) -> c_int {
        match self._ibv_query_gid_ex {
            // SAFETY: forwarded from this function's contract; entry_size is
            // the size of the entry type these bindings were generated with,
            // as in the header.
            Some(query) => unsafe {
                query(
                    context,
                    port_num,
                    gid_index,
                    entry,
                    flags,
                    std::mem::size_of::<ibv_gid_entry>(),
                )
            },
            None => libc::EOPNOTSUPP,
        }
    }
}
