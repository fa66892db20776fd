//! The bus: opened from a TOML file or text.

use std::ffi::c_char;

use crate::errors::guard;
use crate::handle::{give, need_out, shared, take, text, Tagged, DEAD};

/// A configured bus (opaque). Unlike the channel handles it may be used
/// from several threads at once; close it after every handle opened from
/// it is closed.
#[repr(C)]
pub struct mdbus_bus {
    tag: u64,
    pub(crate) bus: mdbus::Bus,
}

impl Tagged for mdbus_bus {
    const TAG: u64 = 0x6d64_6275_735f_6275; // "mdbus_bu"
    const WHAT: &'static str = "bus";
    fn tag(&self) -> u64 {
        self.tag
    }
    fn wipe(&mut self) {
        self.tag = DEAD;
    }
}

fn open(cfg: mdbus::Config, out: *mut *mut mdbus_bus) -> Result<i32, crate::errors::Failure> {
    let bus = mdbus::Bus::new(cfg)?;
    // SAFETY: forwarded from the caller's contract on `out`.
    unsafe {
        give(
            out,
            mdbus_bus {
                tag: mdbus_bus::TAG,
                bus,
            },
        )
    }
}

/// Opens a bus from the TOML configuration file at `path` (the format of
/// docs/OPERATIONS.md) and stores its handle in `*out`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_bus_open_file(path: *const c_char, out: *mut *mut mdbus_bus) -> i32 {
    guard(|| {
        need_out(out)?;
        // SAFETY: forwarded contract.
        let path = unsafe { text(path, "configuration path") }?;
        open(mdbus::Config::from_file(path)?, out)
    })
}

/// Opens a bus from TOML configuration text and stores its handle in
/// `*out`.
///
/// # Safety
/// `toml` is a NUL-terminated string; `out` is valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_bus_open_toml(toml: *const c_char, out: *mut *mut mdbus_bus) -> i32 {
    guard(|| {
        need_out(out)?;
        // SAFETY: forwarded contract.
        let toml = unsafe { text(toml, "configuration text") }?;
        open(mdbus::Config::from_toml_str(toml, "<toml>")?, out)
    })
}

/// The transport the bus resolved to ("shm", "udp", "tcp", "verbs"), or
/// null for an invalid handle. Static storage.
///
/// # Safety
/// `bus` is null or a handle from `mdbus_bus_open_*` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn mdbus_bus_transport(bus: *mut mdbus_bus) -> *const c_char {
    // SAFETY: forwarded contract.
    match unsafe { shared(bus) } {
        Ok(b) => match b.bus.transport().name() {
            "shm" => c"shm".as_ptr(),
            "udp" => c"udp".as_ptr(),
            "tcp" => c"tcp".as_ptr(),
            "verbs" => c"verbs".as_ptr(),
            _ => c"auto".as_ptr(),
        },
        Err(_) => std::ptr::null(),
    }
}

/// Closes the bus (null: nothing). Handles opened from it stay usable, but
/// close them first by convention.
///
/// # Safety
/// `bus` is null or a handle from `mdbus_bus_open_*` not yet closed; no
/// other thread uses it meanwhile.
#[no_mangle]
pub unsafe extern "C" fn mdbus_bus_close(bus: *mut mdbus_bus) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        drop(unsafe { take(bus) }?);
        Ok(0)
    })
}

/// The library's version, e.g. "0.1.0". Static storage.
#[no_mangle]
pub extern "C" fn mdbus_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
