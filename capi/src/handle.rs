//! Opaque handles: a boxed Rust value behind a type tag, so that a null
//! pointer, a handle of another type or a closed handle (best effort: its
//! tag is wiped at close) is an error code rather than a crash.

use std::ffi::{c_char, CStr};

use crate::errors::{
    Failure, MDBUS_ERR_INVALID_ARGUMENT, MDBUS_ERR_INVALID_HANDLE, MDBUS_ERR_NULL,
};

/// A handle type: its tag, distinct per type.
pub(crate) trait Tagged {
    const TAG: u64;
    const WHAT: &'static str;
    fn tag(&self) -> u64;
    fn wipe(&mut self);
}

/// The tag a closed handle carries until its memory is freed.
pub(crate) const DEAD: u64 = 0xdead_dead_dead_dead;

/// Refuses a null output pointer before any work is done.
pub(crate) fn need_out<T>(out: *mut *mut T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::new(MDBUS_ERR_NULL, "the output pointer is null"));
    }
    Ok(())
}

/// Boxes `value` and stores the pointer in `*out`.
///
/// # Safety
/// `out` is null or valid for a pointer write.
pub(crate) unsafe fn give<T>(out: *mut *mut T, value: T) -> Result<i32, Failure> {
    if out.is_null() {
        return Err(Failure::new(MDBUS_ERR_NULL, "the output pointer is null"));
    }
    let p = Box::into_raw(Box::new(value));
    // SAFETY: `out` is non-null and, by the caller's contract, writable.
    unsafe { out.write(p) };
    Ok(0)
}

/// The live handle behind `p`.
///
/// # Safety
/// `p` is null or a pointer returned by this library's open functions
/// (possibly of another handle type) that has not been freed.
pub(crate) unsafe fn live<'a, T: Tagged>(p: *mut T) -> Result<&'a mut T, Failure> {
    check::<T>(p)?;
    // SAFETY: the tag says `p` is a live `T`; the thread rules (one thread
    // per handle, stated in the header) make this the only reference.
    Ok(unsafe { &mut *p })
}

/// The live handle behind `p`, shared (the bus, which threads share).
///
/// # Safety
/// As for [`live`], except that other threads may hold shared references.
pub(crate) unsafe fn shared<'a, T: Tagged + Sync>(p: *mut T) -> Result<&'a T, Failure> {
    check::<T>(p)?;
    // SAFETY: `check` found a live `T`; only shared references are made.
    Ok(unsafe { &*p })
}

fn check<T: Tagged>(p: *mut T) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::new(
            MDBUS_ERR_NULL,
            format!("the {} handle is null", T::WHAT),
        ));
    }
    if !p.is_aligned() {
        return Err(invalid::<T>());
    }
    // SAFETY: every handle type starts with its `u64` tag (`#[repr(C)]`), and
    // by the callers' contract `p` points into a live allocation of one of
    // them: reading the first word is in bounds whatever its type.
    let tag = unsafe { p.cast::<u64>().read() };
    if tag != T::TAG {
        return Err(invalid::<T>());
    }
    Ok(())
}

fn invalid<T: Tagged>() -> Failure {
    Failure::new(
        MDBUS_ERR_INVALID_HANDLE,
        format!("the pointer passed is not an open {} handle", T::WHAT),
    )
}

/// Wipes the tag of the live handle `p` and frees it; null is a no-op.
///
/// # Safety
/// As for [`live`].
pub(crate) unsafe fn take<T: Tagged>(p: *mut T) -> Result<Option<Box<T>>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded contract.
    let h = unsafe { live(p) }?;
    h.wipe();
    debug_assert_ne!(h.tag(), T::TAG);
    // SAFETY: `p` came from `Box::into_raw` in `give` and is freed only here,
    // once (its tag is now wiped, so a second close is refused while the
    // memory has not been reused).
    Ok(Some(unsafe { Box::from_raw(p) }))
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `s` is null or a NUL-terminated string valid for reads.
pub(crate) unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if s.is_null() {
        return Err(Failure::new(MDBUS_ERR_NULL, format!("the {what} is null")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| {
        Failure::new(
            MDBUS_ERR_INVALID_ARGUMENT,
            format!("the {what} is not valid UTF-8"),
        )
    })
}

/// `len` bytes at `data` (null allowed when `len` is 0).
///
/// # Safety
/// `data` is null or valid for `len` bytes of reads.
pub(crate) unsafe fn bytes<'a>(data: *const u8, len: usize) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Failure::new(
            MDBUS_ERR_NULL,
            format!("the data pointer is null but the length is {len}"),
        ));
    }
    // SAFETY: non-null and valid for `len` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// Stores `v` in `*out` when `out` is not null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(v) };
    }
}
