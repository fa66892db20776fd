//! Loading the libraries at run time: the error when one is missing, and
//! real calls when rdma-core is installed. None of this needs an RDMA device.

use mdbus_testkit::Lack;
use std::ffi::{c_int, CStr};

use verbs_sys::*;

/// Says on the terminal (not in captured test output) why a test did
/// nothing.
fn skip(test: &str, why: &LoadError) {
    mdbus_testkit::skip(test, Lack::Tool, &why.to_string());
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[test]
fn an_absent_libibverbs_is_a_clear_error() {
    let err = Verbs::open_from("libdoesnotexist.so.1").unwrap_err();
    match &err {
        LoadError::LibraryNotFound {
            library, detail, ..
        } => {
            assert_eq!(library, "libdoesnotexist.so.1");
            assert!(detail.contains("libdoesnotexist.so.1"), "{detail}");
        }
        other => panic!("wrong error: {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "libdoesnotexist.so.1 not found: install rdma-core (Debian: ibverbs-providers, libibverbs1)"
        ),
        "{msg}"
    );
}

#[test]
fn an_absent_librdmacm_is_a_clear_error() {
    let err = Rdmacm::open_from("libdoesnotexist.so.1").unwrap_err();
    assert!(matches!(err, LoadError::LibraryNotFound { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("libdoesnotexist.so.1 not found: install rdma-core (Debian: librdmacm1"),
        "{err}"
    );
}

#[test]
fn a_library_without_the_symbols_names_the_missing_one() {
    // glibc is always there and exports none of the verbs.
    let err = Verbs::open_from("libc.so.6").unwrap_err();
    match &err {
        LoadError::SymbolNotFound {
            library,
            symbol,
            version,
            ..
        } => {
            assert_eq!(library, "libc.so.6");
            assert_eq!(*symbol, Verbs::SYMBOLS[0].0);
            assert_eq!(*version, Verbs::SYMBOLS[0].1);
        }
        other => panic!("wrong error: {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("libc.so.6 has no ibv_get_device_list@IBVERBS_1.1"),
        "{err}"
    );
    let err = Rdmacm::open_from("libc.so.6").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("libc.so.6 has no rdma_create_event_channel@RDMACM_1.0"),
        "{err}"
    );
}

#[test]
fn libibverbs_loads_once_and_lists_devices() {
    let verbs = match Verbs::load() {
        Ok(v) => v,
        Err(e) => return skip("libibverbs_loads_once_and_lists_devices", &e),
    };
    assert!(std::ptr::eq(verbs, Verbs::load().unwrap()), "loaded once");

    let mut num: c_int = -1;
    // SAFETY: `num` is a valid out-pointer; the list is freed below.
    let list = unsafe { (verbs.ibv_get_device_list)(&mut num) };
    if list.is_null() {
        // A kernel without RDMA support (no /sys/class/infiniband_verbs):
        // libibverbs reports ENOSYS rather than an empty list.
        assert_eq!(errno(), libc::ENOSYS);
        assert_eq!(num, 0);
        return;
    }
    assert!(num >= 0);
    for i in 0..num as usize {
        // SAFETY: the list holds `num` devices followed by a null.
        let dev = unsafe { *list.add(i) };
        assert!(!dev.is_null());
        // SAFETY: `dev` is a device of the live list.
        let name = unsafe { CStr::from_ptr((verbs.ibv_get_device_name)(dev)) };
        assert!(!name.to_bytes().is_empty());
    }
    // SAFETY: as above; then the list is freed once.
    unsafe {
        assert!((*list.add(num as usize)).is_null());
        (verbs.ibv_free_device_list)(list);
    }
}

#[test]
fn libibverbs_strings_come_from_the_library() {
    let verbs = match Verbs::load() {
        Ok(v) => v,
        Err(e) => return skip("libibverbs_strings_come_from_the_library", &e),
    };
    // SAFETY: these return pointers to static strings for any value.
    let (wc, port) = unsafe {
        (
            CStr::from_ptr((verbs.ibv_wc_status_str)(IBV_WC_SUCCESS)),
            CStr::from_ptr((verbs.ibv_port_state_str)(IBV_PORT_ACTIVE)),
        )
    };
    assert_eq!(wc.to_str(), Ok("success"));
    assert_eq!(port.to_str(), Ok("active"));
}

#[test]
fn librdmacm_loads_and_names_events() {
    let rdmacm = match Rdmacm::load() {
        Ok(r) => r,
        Err(e) => return skip("librdmacm_loads_and_names_events", &e),
    };
    assert!(std::ptr::eq(rdmacm, Rdmacm::load().unwrap()), "loaded once");
    // SAFETY: rdma_event_str returns a static string for any value.
    let s = unsafe { CStr::from_ptr((rdmacm.rdma_event_str)(RDMA_CM_EVENT_MULTICAST_JOIN)) };
    assert_eq!(s.to_str(), Ok("RDMA_CM_EVENT_MULTICAST_JOIN"));
}
