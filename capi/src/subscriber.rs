//! Stream subscribers: poll with a callback that sees payloads in place.

use std::ffi::{c_char, c_void};

use crate::bus::mdbus_bus;
use crate::errors::{guard, Failure, MDBUS_ERR_NULL};
use crate::event::{deliver, from_event, mdbus_event_cb};
use crate::handle::{give, live, need_out, put, shared, take, text, Tagged, DEAD};

/// A subscriber of one stream (opaque). Send, not Sync: one thread at a
/// time.
#[repr(C)]
pub struct mdbus_subscriber {
    tag: u64,
    subscriber: mdbus::Subscriber,
}

impl Tagged for mdbus_subscriber {
    const TAG: u64 = 0x6d64_6275_735f_7375; // "mdbus_su"
    const WHAT: &'static str = "subscriber";
    fn tag(&self) -> u64 {
        self.tag
    }
    fn wipe(&mut self) {
        self.tag = DEAD;
    }
}

/// A subscriber's counters (the datagram ones are 0 on shared memory).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mdbus_subscriber_counters {
    /// Messages delivered.
    pub received: u64,
    /// Overrun events.
    pub overruns: u64,
    /// Messages lost to overruns.
    pub overrun_messages: u64,
    /// Unrecoverable gap events.
    pub gaps: u64,
    /// Messages lost in unrecoverable gaps.
    pub gap_messages: u64,
    /// Source-gap notices delivered (upstream loss, not loss here).
    pub source_gaps: u64,
    /// Upstream messages those notices cover.
    pub source_gap_messages: u64,
    /// Datagram transports: messages recovered by retransmission.
    pub recovered: u64,
    /// Datagram transports: duplicate copies dropped (A/B, retransmits).
    pub duplicates: u64,
    /// Datagram transports: retransmit requests sent.
    pub requests_sent: u64,
    /// Datagram transports: heartbeats received.
    pub heartbeats_received: u64,
}

/// Subscribes to stream `name` (waiting up to `shm.attach_timeout` for its
/// publisher on shared memory) and stores the handle in `*out`.
///
/// # Safety
/// `bus` is an open bus handle, `name` a NUL-terminated string, `out` valid
/// for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn mdbus_subscriber_open(
    bus: *mut mdbus_bus,
    name: *const c_char,
    out: *mut *mut mdbus_subscriber,
) -> i32 {
    guard(|| {
        need_out(out)?;
        // SAFETY: forwarded contracts.
        let (bus, name) = unsafe { (shared(bus)?, text(name, "stream name")?) };
        let subscriber = bus.bus.subscriber(name)?;
        let h = mdbus_subscriber {
            tag: mdbus_subscriber::TAG,
            subscriber,
        };
        // SAFETY: forwarded contract.
        unsafe { give(out, h) }
    })
}

/// Delivers what has arrived (up to the stream's `poll_batch` messages) to
/// `cb`, one call per event, in stream order, with events for anything lost
/// or any change of publisher. Returns the number of events delivered (0:
/// nothing arrived), or a negative error code. Never blocks.
///
/// # Safety
/// `subscriber` is an open subscriber handle; `cb` is a function that may
/// be called with `ctx` (see `mdbus_event_cb`).
#[no_mangle]
pub unsafe extern "C" fn mdbus_subscriber_poll(
    subscriber: *mut mdbus_subscriber,
    cb: mdbus_event_cb,
    ctx: *mut c_void,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let h = unsafe { live(subscriber) }?;
        let Some(cb) = cb else {
            return Err(Failure::new(MDBUS_ERR_NULL, "the poll callback is null"));
        };
        let mut events = 0i32;
        h.subscriber.poll(|e| {
            events = events.saturating_add(1);
            // SAFETY: the caller's contract on `cb` and `ctx`.
            unsafe { deliver(cb, ctx, &from_event(&e)) }
        })?;
        Ok(events)
    })
}

/// Fills `*out` with the subscriber's counters.
///
/// # Safety
/// `subscriber` is an open subscriber handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mdbus_subscriber_stats(
    subscriber: *mut mdbus_subscriber,
    out: *mut mdbus_subscriber_counters,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        let sub = &unsafe { live(subscriber) }?.subscriber;
        if out.is_null() {
            return Err(Failure::new(
                MDBUS_ERR_NULL,
                "the stats output pointer is null",
            ));
        }
        let s = sub.stats();
        let r = sub.recovery_counters().unwrap_or_default();
        let c = mdbus_subscriber_counters {
            received: s.received,
            overruns: s.overruns,
            overrun_messages: s.overrun_messages,
            gaps: s.gaps,
            gap_messages: s.gap_messages,
            source_gaps: s.source_gaps,
            source_gap_messages: s.source_gap_messages,
            recovered: r.recovered,
            duplicates: r.duplicates,
            requests_sent: r.requests_sent,
            heartbeats_received: r.heartbeats_received,
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { put(out, c) };
        Ok(0)
    })
}

/// Closes the subscriber (null: nothing).
///
/// # Safety
/// `subscriber` is null or an open subscriber handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mdbus_subscriber_close(subscriber: *mut mdbus_subscriber) -> i32 {
    guard(|| {
        // SAFETY: forwarded contract.
        drop(unsafe { take(subscriber) }?);
        Ok(0)
    })
}
