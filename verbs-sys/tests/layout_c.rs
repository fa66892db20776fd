//! The checked-in bindings against the rdma-core headers installed here, as
//! a C compiler sees them.
//!
//! bindgen's own layout assertions (compiled into `src/bindings.rs`) prove
//! that Rust lays the types out as the headers did when the file was
//! generated. This test compiles a small C program against the headers of
//! this machine and compares the sizes, offsets and constants that mdbus and
//! the hand-written inline functions rely on, so a header change is caught
//! without bindgen. It is skipped where there is no C compiler or no
//! rdma-core headers (libibverbs-dev, librdmacm-dev).

use mdbus_testkit::Lack;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use verbs_sys::*;

/// `(kind, C expression, value in Rust)`; `kind` picks the printf format.
fn expectations() -> Vec<(&'static str, &'static str, u64)> {
    macro_rules! size {
        ($t:ident) => {
            (
                "size",
                concat!("sizeof(struct ", stringify!($t), ")"),
                size_of::<$t>() as u64,
            )
        };
    }
    macro_rules! offset {
        ($t:ident, $f:ident) => {
            (
                "offset",
                concat!(
                    "offsetof(struct ",
                    stringify!($t),
                    ", ",
                    stringify!($f),
                    ")"
                ),
                offset_of!($t, $f) as u64,
            )
        };
    }
    macro_rules! constant {
        ($c:ident) => {
            ("const", stringify!($c), u64::from($c))
        };
    }
    vec![
        // The ops-table walk of ibv_post_send & co.
        size!(ibv_context),
        offset!(ibv_context, ops),
        offset!(ibv_context, abi_compat),
        offset!(ibv_context_ops, poll_cq),
        offset!(ibv_context_ops, req_notify_cq),
        offset!(ibv_context_ops, post_send),
        offset!(ibv_context_ops, post_recv),
        offset!(ibv_qp, context),
        offset!(ibv_cq, context),
        // query_port through verbs_context.
        size!(verbs_context),
        offset!(verbs_context, query_port),
        offset!(verbs_context, sz),
        offset!(verbs_context, context),
        size!(ibv_port_attr),
        // What the data path fills and reads.
        size!(ibv_sge),
        size!(ibv_send_wr),
        offset!(ibv_send_wr, sg_list),
        offset!(ibv_send_wr, opcode),
        offset!(ibv_send_wr, send_flags),
        offset!(ibv_send_wr, wr),
        size!(ibv_recv_wr),
        size!(ibv_wc),
        offset!(ibv_wc, byte_len),
        offset!(ibv_wc, qp_num),
        offset!(ibv_wc, wc_flags),
        size!(ibv_grh),
        size!(ibv_gid_entry),
        // Set-up.
        size!(ibv_qp_init_attr),
        size!(ibv_qp_attr),
        offset!(ibv_qp_attr, ah_attr),
        size!(ibv_ah_attr),
        size!(ibv_device_attr),
        size!(ibv_mr),
        offset!(ibv_mr, lkey),
        offset!(ibv_mr, rkey),
        size!(ibv_async_event),
        // rdma_cm.
        size!(rdma_cm_id),
        offset!(rdma_cm_id, verbs),
        offset!(rdma_cm_id, qp),
        offset!(rdma_cm_id, route),
        offset!(rdma_cm_id, port_num),
        size!(rdma_cm_event),
        offset!(rdma_cm_event, param),
        size!(rdma_conn_param),
        size!(rdma_ud_param),
        size!(rdma_cm_join_mc_attr_ex),
        // Constants used by the transport.
        constant!(IBV_QPT_RC),
        constant!(IBV_QPT_UD),
        constant!(IBV_QPS_RTS),
        constant!(IBV_QP_STATE),
        constant!(IBV_QP_AV),
        constant!(IBV_QP_QKEY),
        constant!(IBV_QP_MAX_QP_RD_ATOMIC),
        constant!(IBV_SEND_SIGNALED),
        constant!(IBV_SEND_INLINE),
        constant!(IBV_WR_SEND),
        constant!(IBV_WR_SEND_WITH_IMM),
        constant!(IBV_WC_SUCCESS),
        constant!(IBV_WC_RECV),
        constant!(IBV_WC_GRH),
        constant!(IBV_ACCESS_LOCAL_WRITE),
        constant!(IBV_ACCESS_OPTIONAL_RANGE),
        constant!(IBV_MTU_4096),
        constant!(IBV_LINK_LAYER_ETHERNET),
        constant!(IBV_GID_TYPE_ROCE_V2),
        constant!(RDMA_PS_UDP),
        constant!(RDMA_PS_TCP),
        constant!(RDMA_UDP_QKEY),
        constant!(RDMA_CM_EVENT_MULTICAST_JOIN),
        constant!(RDMA_CM_EVENT_ESTABLISHED),
        constant!(RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER),
    ]
}

/// Says on the terminal (not in captured test output) why the test did
/// nothing.
fn skip(why: &str) {
    mdbus_testkit::skip("bindings_match_the_installed_headers", Lack::Tool, why);
}

fn c_program(items: &[(&str, &str, u64)]) -> String {
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n\
         #include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n\
         int main(void) {\n",
    );
    for (_, expr, _) in items {
        src += &format!("  printf(\"%llu\\n\", (unsigned long long)({expr}));\n");
    }
    src + "  return 0;\n}\n"
}

#[test]
fn bindings_match_the_installed_headers() {
    let headers = [
        "/usr/include/infiniband/verbs.h",
        "/usr/include/rdma/rdma_cma.h",
    ];
    if let Some(h) = headers.iter().find(|h| !Path::new(h).exists()) {
        return skip(&format!(
            "no {h} (apt-get install libibverbs-dev librdmacm-dev)"
        ));
    }
    let items = expectations();
    let dir = std::env::temp_dir().join(format!("verbs-sys-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program(&items)).unwrap();

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let compiled = match Command::new(&cc).arg(&src).arg("-o").arg(&exe).output() {
        Ok(out) => out,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return skip(&format!("cannot run {cc}: {e}"));
        }
    };
    assert!(
        compiled.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(run.status.success());

    let stdout = String::from_utf8(run.stdout).unwrap();
    let c_values: Vec<u64> = stdout.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(c_values.len(), items.len());
    let mismatches: Vec<String> = items
        .iter()
        .zip(&c_values)
        .filter(|((_, _, rust), c)| rust != *c)
        .map(|((kind, expr, rust), c)| format!("{kind} {expr}: C {c}, Rust {rust}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "src/bindings.rs is out of date with the installed rdma-core; \
         run scripts/gen-verbs-bindings.sh:\n{}",
        mismatches.join("\n")
    );
}
