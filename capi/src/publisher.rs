//! Stream publishers: zero-copy claim and commit, publish, flush, service.

use std::ffi::c_char;
use std::ptr::NonNull;

use crate::bus::mdbus_bus;
use crate::errors::{guard, Failure, MDBUS_ERR_INVALID_ARGUMENT, MDBUS_ERR_NULL};
use crate::handle::{bytes, give, live, need_out, put, shared, take, text, Tagged, DEAD};

/// The publisher of one stream (opaque). Send, not Sync: one thread at a
/// time.
#[repr(C)]
pub struct mdbus_publisher {
    tag: u64,
    /// The claim handed out by `mdbus_publisher_claim` and not yet
    /// committed. It borrows `*publisher`, which is therefore touched only
    /// through it while it exists; declared first so it drops first.
    claim: Option<mdbus::Claim<'static>>,
    publisher: NonNull<mdbus::Publisher>,
}

impl Tagged for mdbus_publisher {
    const TAG: u64 = 0x6d64_6275_735f_7075; // "mdbus_pu"
    const WHAT: &'static str = "publisher";
    fn tag(&self) -> u64 {
        self.tag
    }
    fn wipe(&mut self) {
        self.tag = DEAD;
    }
}

impl Drop for mdbus_publisher {
    fn drop(&mut self) {
        self.claim = None;
        // SAFETY: `publisher` came from `Box::into_raw` at open, and the
        // claim that borrowed it is gone.
        drop(unsafe { Box::from_raw(self.publisher.as_ptr()) });
    }
}

impl mdbus_publisher {
    /// The publisher, with any pending claim dropped (publishing nothing).
    fn publisher(&mut self) -> &mut mdbus::Publisher {
        self.claim = None;
        // SAFETY: owned by this handle (from `Box::into_raw`), and no claim
        // borrows it any more; `&mut self` makes this the only reference.
        unsafe { self.publisher.as_mut() }
    }
}

/// A publisher's counters (the datagram ones are 0 on shared memory).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mdbus_publisher_counters {
    /// Messages published through this handle.
    pub published: u64,
    /// The sequence number the next message will carry.
    pub next_seq: u64,
    /// The largest payload accepted.
    pub max_message: u64,
    /// Datagram transports: heartbeats sent.
    pub heartbeats_sent: u64,
    /// Datagram transports: retransmit requests answered.
    pub requests_served: u64,
    /// Datagram transports: messages sent again.
    pub retransmitted: u64,
    /// Datagram transports: datagrams sent.
    pub datagrams_sent: u64,
}

/// Creates the publisher of stream `name` (only one may exist per stream)
/// and stores its handle in `*out`.
///
/// # Safety
/// `bus` is an open bus handle, `name` a NUL-terminated string, `out` valid
/// for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_open(
    bus: *mut mdbus_bus,
    name: *const c_char,
    out: *mut *mut mdbus_publisher,
) -> i32 {
    guard(|| {
        need_out(out)?;
        // SAFETY: forwarded contracts.
        let (bus, name) = unsafe { (shared(bus)?, text(name, "stream name")?) };
        let p = bus.bus.publisher(name)?;
        let h = mdbus_publisher {
            tag: mdbus_publisher::TAG,
            claim: None,
            publisher: NonNull::from(Box::leak(Box::new(p))),
        };
        // SAFETY: forwarded contract.
        unsafe { give(out, h) }
    })
}

/// Claims `len` bytes in the transport's send buffer and stores their
/// address in `*buf`: write the message there, then `mdbus_publisher_commit`.
/// The buffer is valid until that commit, the next claim or publish (which
/// drop an uncommitted claim, publishing nothing), or close. Never blocks.
///
/// # Safety
/// `publisher` is an open publisher handle; `buf` is valid for a pointer
/// write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_claim(
    publisher: *mut mdbus_publisher,
    len: usize,
    buf: *mut *mut u8,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let h = unsafe { live(publisher) }?;
        if buf.is_null() {
            return Err(Failure::new(
                MDBUS_ERR_NULL,
                "the buffer output pointer is null",
            ));
        }
        let p: *mut mdbus::Publisher = h.publisher();
        // SAFETY: `p` is the boxed publisher this handle owns; it outlives the
        // claim (dropped first in `Drop`) and is touched by nothing else while
        // the claim exists (every other entry point goes through
        // `publisher()`, which drops the claim first).
        let mut claim = unsafe { &mut *p }.claim(len)?;
        let at = claim.as_mut_ptr();
        h.claim = Some(claim);
        // SAFETY: `buf` is non-null and writable by the caller's contract.
        unsafe { buf.write(at) };
        Ok(0)
    })
}

/// Commits the pending claim, shortened to `len` when given.
///
/// # Safety
/// As for the entry points below.
unsafe fn commit(publisher: *mut mdbus_publisher, len: Option<usize>, seq: *mut u64) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let h = unsafe { live(publisher) }?;
        let Some(mut claim) = h.claim.take() else {
            return Err(Failure::new(
                MDBUS_ERR_INVALID_ARGUMENT,
                "commit without a claim: call mdbus_publisher_claim first",
            ));
        };
        if let Some(len) = len {
            if len > claim.len() {
                return Err(Failure::new(
                    MDBUS_ERR_INVALID_ARGUMENT,
                    format!(
                        "commit of {len} bytes, but only {} were claimed",
                        claim.len()
                    ),
                ));
            }
            claim.truncate(len);
        }
        let s = claim.commit()?;
        // SAFETY: forwarded contract.
        unsafe { put(seq, s) };
        Ok(0)
    })
}

/// Publishes the claimed message (all the bytes claimed); stores its
/// sequence number in `*seq` (may be null).
///
/// # Safety
/// `publisher` is an open publisher handle; `seq` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_commit(
    publisher: *mut mdbus_publisher,
    seq: *mut u64,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { commit(publisher, None, seq) }
}

/// Publishes the claimed message shortened to `len` bytes (at most the
/// claimed length, for encoders that claim a maximum); stores its sequence
/// number in `*seq` (may be null).
///
/// # Safety
/// `publisher` is an open publisher handle; `seq` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_commit_len(
    publisher: *mut mdbus_publisher,
    len: usize,
    seq: *mut u64,
) -> i32 {
    // SAFETY: forwarded contract.
    unsafe { commit(publisher, Some(len), seq) }
}

/// Copies `len` bytes from `data` into the stream and publishes them;
/// stores the sequence number in `*seq` (may be null).
///
/// # Safety
/// `publisher` is an open publisher handle; `data` is valid for `len` bytes
/// (null allowed when `len` is 0); `seq` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_publish(
    publisher: *mut mdbus_publisher,
    data: *const u8,
    len: usize,
    seq: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contracts.
        let (h, data) = unsafe { (live(publisher)?, bytes(data, len)?) };
        let s = h.publisher().publish(data)?;
        // SAFETY: forwarded contract.
        unsafe { put(seq, s) };
        Ok(0)
    })
}

/// Sends messages that commits left batched (streams with
/// `autoflush = false`).
///
/// # Safety
/// `publisher` is an open publisher handle.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_flush(publisher: *mut mdbus_publisher) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { live(publisher) }?.publisher().flush()?;
        Ok(0)
    })
}

/// The publisher's duties between messages on datagram transports:
/// flushes, answers retransmit requests, sends heartbeats. Call it when the
/// thread is idle, unless the bus runs a service thread (`[service]`).
///
/// # Safety
/// `publisher` is an open publisher handle.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_service(publisher: *mut mdbus_publisher) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        unsafe { live(publisher) }?.publisher().service()?;
        Ok(0)
    })
}

/// Fills `*out` with the publisher's counters.
///
/// # Safety
/// `publisher` is an open publisher handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_stats(
    publisher: *mut mdbus_publisher,
    out: *mut mdbus_publisher_counters,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let p = unsafe { live(publisher) }?.publisher();
        if out.is_null() {
            return Err(Failure::new(
                MDBUS_ERR_NULL,
                "the stats output pointer is null",
            ));
        }
        let r = p.recovery_counters().unwrap_or_default();
        let s = mdbus_publisher_counters {
            published: p.published(),
            next_seq: p.next_seq(),
            max_message: p.max_message() as u64,
            heartbeats_sent: r.heartbeats_sent,
            requests_served: r.requests_served,
            retransmitted: r.retransmitted,
            datagrams_sent: r.datagrams_sent,
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { put(out, s) };
        Ok(0)
    })
}

/// Closes the publisher (null: nothing): subscribers see end of stream.
///
/// # Safety
/// `publisher` is null or an open publisher handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mdbus_publisher_close(publisher: *mut mdbus_publisher) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        drop(unsafe { take(publisher) }?);
        Ok(0)
    })
}
