//! librdmacm: the function table.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::bindings::*;
use crate::load::{fn_table, DynLib, LoadError};

const INSTALL_HINT: &str = "install rdma-core (Debian: librdmacm1, ibverbs-providers)";

fn_table! {
    /// The librdmacm functions mdbus uses, resolved from `librdmacm.so.1`.
    ///
    /// Get the process-wide table with [`Rdmacm::load`]. Each field is the C
    /// function of the same name; call it as
    /// `(rdmacm.rdma_create_event_channel)()`. librdmacm itself depends on
    /// libibverbs, so the `ibv_context`s and QPs it hands out work with
    /// [`crate::Verbs`] and the crate-level data-path functions.
    pub struct Rdmacm;
    required {
        rdma_create_event_channel @ "RDMACM_1.0": fn() -> *mut rdma_event_channel;
        rdma_destroy_event_channel @ "RDMACM_1.0": fn(channel: *mut rdma_event_channel);
        rdma_create_id @ "RDMACM_1.0": fn(
            channel: *mut rdma_event_channel,
            id: *mut *mut rdma_cm_id,
            context: *mut c_void,
            ps: rdma_port_space,
        ) -> c_int;
        rdma_destroy_id @ "RDMACM_1.0": fn(id: *mut rdma_cm_id) -> c_int;
        rdma_migrate_id @ "RDMACM_1.0":
            fn(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int;
        rdma_bind_addr @ "RDMACM_1.0": fn(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
        rdma_resolve_addr @ "RDMACM_1.0": fn(
            id: *mut rdma_cm_id,
            src_addr: *mut sockaddr,
            dst_addr: *mut sockaddr,
            timeout_ms: c_int,
        ) -> c_int;
        rdma_resolve_route @ "RDMACM_1.0": fn(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
        rdma_create_qp @ "RDMACM_1.0": fn(
            id: *mut rdma_cm_id,
            pd: *mut ibv_pd,
            qp_init_attr: *mut ibv_qp_init_attr,
        ) -> c_int;
        rdma_destroy_qp @ "RDMACM_1.0": fn(id: *mut rdma_cm_id);
        rdma_connect @ "RDMACM_1.0":
            fn(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
        rdma_listen @ "RDMACM_1.0": fn(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
        rdma_accept @ "RDMACM_1.0":
            fn(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
        rdma_reject @ "RDMACM_1.0": fn(
            id: *mut rdma_cm_id,
            private_data: *const c_void,
            private_data_len: u8,
        ) -> c_int;
        rdma_notify @ "RDMACM_1.0": fn(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int;
        rdma_disconnect @ "RDMACM_1.0": fn(id: *mut rdma_cm_id) -> c_int;
        rdma_join_multicast @ "RDMACM_1.0":
            fn(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int;
        rdma_leave_multicast @ "RDMACM_1.0": fn(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
        rdma_get_cm_event @ "RDMACM_1.0":
            fn(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int;
        rdma_ack_cm_event @ "RDMACM_1.0": fn(event: *mut rdma_cm_event) -> c_int;
        rdma_event_str @ "RDMACM_1.0": fn(event: rdma_cm_event_type) -> *const c_char;
        rdma_set_option @ "RDMACM_1.0": fn(
            id: *mut rdma_cm_id,
            level: c_int,
            optname: c_int,
            optval: *mut c_void,
            optlen: usize,
        ) -> c_int;
        rdma_get_src_port @ "RDMACM_1.0": fn(id: *mut rdma_cm_id) -> __be16;
        rdma_get_dst_port @ "RDMACM_1.0": fn(id: *mut rdma_cm_id) -> __be16;
        rdma_get_devices @ "RDMACM_1.0": fn(num_devices: *mut c_int) -> *mut *mut ibv_context;
        rdma_free_devices @ "RDMACM_1.0": fn(list: *mut *mut ibv_context);
        rdma_getaddrinfo @ "RDMACM_1.0": fn(
            node: *const c_char,
            service: *const c_char,
            hints: *const rdma_addrinfo,
            res: *mut *mut rdma_addrinfo,
        ) -> c_int;
        rdma_freeaddrinfo @ "RDMACM_1.0": fn(res: *mut rdma_addrinfo);
    }
    optional {
        /// A join with `RDMA_MC_JOIN_FLAG_*` flags (send-only full member).
        rdma_join_multicast_ex @ "RDMACM_1.1": fn(
            id: *mut rdma_cm_id,
            mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
            context: *mut c_void,
        ) -> c_int;
        rdma_init_qp_attr @ "RDMACM_1.2": fn(
            id: *mut rdma_cm_id,
            qp_attr: *mut ibv_qp_attr,
            qp_attr_mask: *mut c_int,
        ) -> c_int;
        rdma_establish @ "RDMACM_1.2": fn(id: *mut rdma_cm_id) -> c_int;
    }
}

impl Rdmacm {
    /// The library [`Rdmacm::load`] opens.
    pub const LIBRARY: &'static str = "librdmacm.so.1";

    /// The process-wide table, loading `librdmacm.so.1` on the first call.
    ///
    /// The outcome, success or error, is kept for the life of the process.
    pub fn load() -> Result<&'static Rdmacm, LoadError> {
        static RDMACM: OnceLock<Result<Rdmacm, LoadError>> = OnceLock::new();
        RDMACM
            .get_or_init(|| Rdmacm::open_from(Rdmacm::LIBRARY))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads the table from `library` (a name for `dlopen`, or a path),
    /// bypassing the process-wide table. The library stays loaded for the
    /// life of the process.
    pub fn open_from(library: &str) -> Result<Rdmacm, LoadError> {
        let lib = DynLib::open(library, INSTALL_HINT)?;
        Rdmacm::resolve(&lib)
    }
}
