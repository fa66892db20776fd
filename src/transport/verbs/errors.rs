//! Turning verbs and rdma_cm failures into [`Error::Verbs`] sentences that
//! name the call, the device, the queue pair and the errno.

use std::ffi::{c_int, CStr};

use verbs_sys::{ibv_wc_status, rdma_cm_event_type};

use crate::error::Error;

/// This thread's errno.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// "Invalid argument (errno 22)".
pub(crate) fn describe_errno(e: i32) -> String {
    let text = std::io::Error::from_raw_os_error(e).to_string();
    // std appends " (os error N)"; the errno is written our way below.
    let text = match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    format!("{text} (errno {e})")
}

/// Where a failure happened: a device, and its port when known.
#[derive(Clone, Copy)]
pub(crate) struct Place<'a> {
    device: &'a str,
    port: Option<u8>,
}

impl<'a> From<&'a str> for Place<'a> {
    fn from(device: &'a str) -> Self {
        Place { device, port: None }
    }
}

impl<'a> From<&'a String> for Place<'a> {
    fn from(device: &'a String) -> Self {
        Place { device, port: None }
    }
}

impl<'a> From<(&'a str, u8)> for Place<'a> {
    fn from((device, port): (&'a str, u8)) -> Self {
        Place {
            device,
            port: Some(port),
        }
    }
}

/// An error from errno value `e`.
pub(crate) fn os<'a>(
    op: impl Into<String>,
    at: impl Into<Place<'a>>,
    qp: Option<u32>,
    e: i32,
) -> Error {
    verbs(op.into(), at.into(), qp, Some(e), describe_errno(e))
}

/// An error from this thread's errno, for calls that return null or -1.
pub(crate) fn last<'a>(op: impl Into<String>, at: impl Into<Place<'a>>, qp: Option<u32>) -> Error {
    os(op, at, qp, errno())
}

/// An error from a call that returns an errno value (ibv_modify_qp,
/// ibv_post_send...) or -1 with errno set (librdmacm).
pub(crate) fn ret<'a>(
    op: impl Into<String>,
    at: impl Into<Place<'a>>,
    qp: Option<u32>,
    rc: c_int,
) -> Error {
    let e = if rc > 0 { rc } else { errno() };
    os(op, at, qp, e)
}

/// An error without an errno.
pub(crate) fn other<'a>(
    op: impl Into<String>,
    at: impl Into<Place<'a>>,
    qp: Option<u32>,
    detail: impl Into<String>,
) -> Error {
    verbs(op.into(), at.into(), qp, None, detail.into())
}

/// The one place an [`Error::Verbs`] is put together.
fn verbs(op: String, at: Place<'_>, qp: Option<u32>, errno: Option<i32>, detail: String) -> Error {
    Error::Verbs {
        op,
        device: at.device.into(),
        port: at.port,
        qp,
        errno,
        detail,
    }
}

/// libibverbs' text for a work-completion status ("transport retry counter
/// exceeded"), with the number.
pub(crate) fn wc_status(status: ibv_wc_status) -> String {
    let text = match verbs_sys::Verbs::load() {
        // SAFETY: ibv_wc_status_str accepts any value and returns a static
        // NUL-terminated string.
        Ok(v) => unsafe { CStr::from_ptr((v.ibv_wc_status_str)(status)) }
            .to_string_lossy()
            .into_owned(),
        Err(_) => "unknown".into(),
    };
    format!("work completion status {status} ({text})")
}

/// librdmacm's name of an event ("RDMA_CM_EVENT_REJECTED"), shortened to
/// "REJECTED".
pub(crate) fn cm_event_name(kind: rdma_cm_event_type) -> String {
    let text = match verbs_sys::Rdmacm::load() {
        // SAFETY: rdma_event_str accepts any value and returns a static
        // NUL-terminated string.
        Ok(cm) => unsafe { CStr::from_ptr((cm.rdma_event_str)(kind)) }
            .to_string_lossy()
            .into_owned(),
        Err(_) => format!("event {kind}"),
    };
    text.trim_start_matches("RDMA_CM_EVENT_").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_sentences_with_device_qp_and_errno() {
        let e = os("ibv_modify_qp to RTR", "rxe0", Some(0x11), libc::EINVAL);
        assert_eq!(
            e.to_string(),
            "ibv_modify_qp to RTR on rxe0 (QP 0x11): Invalid argument (errno 22)"
        );
        let e = os("ibv_post_send", ("mlx5_0", 2), Some(0x1a2), libc::ENOMEM);
        assert_eq!(
            e.to_string(),
            "ibv_post_send on mlx5_0 port 2 (QP 0x1a2): Cannot allocate memory (errno 12)"
        );
        let e = os("rdma_bind_addr 10.0.0.1:7000", "", None, libc::EADDRINUSE);
        assert_eq!(
            e.to_string(),
            "rdma_bind_addr 10.0.0.1:7000: Address already in use (errno 98)"
        );
        let e = other("send", "rxe0", Some(1), "work completion status 13");
        assert_eq!(
            e.to_string(),
            "send on rxe0 (QP 0x1): work completion status 13"
        );
    }
}
