//! Sessions: accept/connect, zero-copy claim and commit, send, poll, close.

use std::ffi::{c_char, c_void};
use std::ptr::NonNull;

use crate::bus::mdbus_bus;
use crate::errors::{guard, Failure, MDBUS_ERR_INVALID_ARGUMENT, MDBUS_ERR_NULL};
use crate::event::{deliver, mdbus_event_cb, message};
use crate::handle::{bytes, give, live, need_out, put, shared, take, text, Tagged, DEAD};

/// One end of a session (opaque). Send, not Sync: one thread at a time.
#[repr(C)]
pub struct mdbus_session {
    tag: u64,
    /// The claim handed out by `mdbus_session_claim` and not yet committed;
    /// it borrows `*session` (see `mdbus_publisher`).
    claim: Option<mdbus::SessionClaim<'static>>,
    session: NonNull<mdbus::Session>,
}

impl Tagged for mdbus_session {
    const TAG: u64 = 0x6d64_6275_735f_7365; // "mdbus_se"
    const WHAT: &'static str = "session";
    fn tag(&self) -> u64 {
        self.tag
    }
    fn wipe(&mut self) {
        self.tag = DEAD;
    }
}

impl Drop for mdbus_session {
    fn drop(&mut self) {
        self.claim = None;
        // SAFETY: `session` came from `Box::into_raw` at open; the claim
        // that borrowed it is gone.
        unsafe { Box::from_raw(self.session.as_ptr()) }.close();
    }
}

impl mdbus_session {
    fn session(&mut self) -> &mut mdbus::Session {
        self.claim = None;
        // SAFETY: owned by this handle; no claim borrows it any more.
        unsafe { self.session.as_mut() }
    }
}

/// A session end's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mdbus_session_counters {
    /// Messages sent.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// Times a send found the peer without room and waited.
    pub backpressured: u64,
}

type Open = fn(&mdbus::Bus, &str) -> mdbus::Result<mdbus::Session>;

/// # Safety
/// As for the two entry points below.
unsafe fn open(
    bus: *mut mdbus_bus,
    name: *const c_char,
    out: *mut *mut mdbus_session,
    how: Open,
) -> i32 {
    guard(|| {
        need_out(out)?;
        // SAFETY: forwarded contracts.
        let (bus, name) = unsafe { (shared(bus)?, text(name, "session name")?) };
        let s = how(&bus.bus, name)?;
        let h = mdbus_session {
            tag: mdbus_session::TAG,
            claim: None,
            session: NonNull::from(Box::leak(Box::new(s))),
        };
        // SAFETY: forwarded contract.
        unsafe { give(out, h) }
    })
}

/// Offers session `name` and waits up to its `connect_timeout` for the
/// peer; stores the handle in `*out`.
///
/// # Safety
/// `bus` is an open bus handle, `name` a NUL-terminated string, `out` valid
/// for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_accept(
    bus: *mut mdbus_bus,
    name: *const c_char,
    out: *mut *mut mdbus_session,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { open(bus, name, out, mdbus::Bus::session_accept) }
}

/// Connects to session `name`, waiting up to its `connect_timeout` for the
/// acceptor; stores the handle in `*out`.
///
/// # Safety
/// As for `mdbus_session_accept`.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_connect(
    bus: *mut mdbus_bus,
    name: *const c_char,
    out: *mut *mut mdbus_session,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { open(bus, name, out, mdbus::Bus::session_connect) }
}

/// # Safety
/// As for `mdbus_session_claim`.
unsafe fn claim(session: *mut mdbus_session, len: usize, buf: *mut *mut u8, wait: bool) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let h = unsafe { live(session) }?;
        if buf.is_null() {
            return Err(Failure::new(
                MDBUS_ERR_NULL,
                "the buffer output pointer is null",
            ));
        }
        let s: *mut mdbus::Session = h.session();
        // SAFETY: the boxed session this handle owns outlives the claim
        // (dropped first) and is touched by nothing else while it exists.
        let s = unsafe { &mut *s };
        let mut c = if wait {
            s.claim(len)?
        } else {
            match s.try_claim(len)? {
                Some(c) => c,
                None => return Ok(0),
            }
        };
        let at = c.as_mut_ptr();
        h.claim = Some(c);
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { buf.write(at) };
        Ok(if wait { 0 } else { 1 })
    })
}

/// Claims `len` bytes in the send buffer, waiting (with the configured wait
/// strategy) while the peer has no room; stores their address in `*buf`.
/// Returns 0, or a negative error (the peer died or closed meanwhile).
///
/// # Safety
/// `session` is an open session handle; `buf` is valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_claim(
    session: *mut mdbus_session,
    len: usize,
    buf: *mut *mut u8,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { claim(session, len, buf, true) }
}

/// Like `mdbus_session_claim` but never waits: returns 1 when it claimed,
/// 0 (leaving `*buf` alone) when the peer has no room.
///
/// # Safety
/// As for `mdbus_session_claim`.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_try_claim(
    session: *mut mdbus_session,
    len: usize,
    buf: *mut *mut u8,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { claim(session, len, buf, false) }
}

/// Sends the claimed message, shortened to `len` bytes (at most the claimed
/// length); stores its sequence number in `*seq` (may be null).
///
/// # Safety
/// `session` is an open session handle; `seq` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_commit(
    session: *mut mdbus_session,
    len: usize,
    seq: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let h = unsafe { live(session) }?;
        let Some(mut c) = h.claim.take() else {
            return Err(Failure::new(
                MDBUS_ERR_INVALID_ARGUMENT,
                "commit without a claim: call mdbus_session_claim first",
            ));
        };
        if len > c.len() {
            return Err(Failure::new(
                MDBUS_ERR_INVALID_ARGUMENT,
                format!("commit of {len} bytes, but only {} were claimed", c.len()),
            ));
        }
        c.truncate(len);
        let s = c.commit()?;
        // SAFETY: forwarded contract.
        unsafe { put(seq, s) };
        Ok(0)
    })
}

/// Copies `len` bytes from `data` into the session and sends them, waiting
/// while the peer has no room; stores the sequence number in `*seq` (may be
/// null).
///
/// # Safety
/// `session` is an open session handle; `data` is valid for `len` bytes
/// (null allowed when `len` is 0); `seq` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_send(
    session: *mut mdbus_session,
    data: *const u8,
    len: usize,
    seq: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contracts.
        let (h, data) = unsafe { (live(session)?, bytes(data, len)?) };
        let s = h.session().send(data)?;
        // SAFETY: forwarded contract.
        unsafe { put(seq, s) };
        Ok(0)
    })
}

/// Delivers received messages (up to the session's `poll_batch`) to `cb`
/// as `MDBUS_EVENT_MESSAGE` events, in order. Returns how many (0: none),
/// or `MDBUS_ERR_PEER_CLOSED` / `MDBUS_ERR_PEER_DIED` once the peer is gone
/// and everything it sent was delivered.
///
/// # Safety
/// `session` is an open session handle; `cb` may be called with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_poll(
    session: *mut mdbus_session,
    cb: mdbus_event_cb,
    ctx: *mut c_void,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let h = unsafe { live(session) }?;
        let Some(cb) = cb else {
            return Err(Failure::new(MDBUS_ERR_NULL, "the poll callback is null"));
        };
        let n = h.session().poll(|m| {
            // SAFETY: the caller's contract on `cb` and `ctx`.
            unsafe { deliver(cb, ctx, &message(&m)) }
        })?;
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// Fills `*out` with the session end's counters.
///
/// # Safety
/// `session` is an open session handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_stats(
    session: *mut mdbus_session,
    out: *mut mdbus_session_counters,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let s = unsafe { live(session) }?.session().stats();
        if out.is_null() {
            return Err(Failure::new(
                MDBUS_ERR_NULL,
                "the stats output pointer is null",
            ));
        }
        let c = mdbus_session_counters {
            sent: s.sent,
            received: s.received,
            backpressured: s.backpressured,
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { put(out, c) };
        Ok(0)
    })
}

/// Closes this end in order (null: nothing): the peer's polls return
/// `MDBUS_ERR_PEER_CLOSED` once it has read everything sent before.
///
/// # Safety
/// `session` is null or an open session handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mdbus_session_close(session: *mut mdbus_session) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        drop(unsafe { take(session) }?);
        Ok(0)
    })
}
