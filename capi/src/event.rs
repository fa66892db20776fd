//! What a poll callback sees: one struct for every event kind, built on the
//! stack per event (nothing allocates).

use std::ffi::c_void;

/// A message: `seq`, `payload`, `len`, `timestamp_ns` are set.
pub const MDBUS_EVENT_MESSAGE: u32 = 1;
/// The subscriber fell more than the stream's capacity behind: messages
/// `from`..`to` (end exclusive) are lost to it.
pub const MDBUS_EVENT_OVERRUN: u32 = 2;
/// Messages `from`..`to` (end exclusive) were lost on the network and could
/// not be recovered.
pub const MDBUS_EVENT_GAP: u32 = 3;
/// The publisher closed the stream; `seq` is its last message.
pub const MDBUS_EVENT_END_OF_STREAM: u32 = 4;
/// The publisher stopped without closing (died, or fell silent beyond the
/// heartbeat timeout); `seq` is the last message received.
pub const MDBUS_EVENT_PUBLISHER_DOWN: u32 = 5;
/// A new incarnation of the publisher started (`epoch` is set); sequences
/// start again from 1, and when its oldest retained message is past 1 an
/// `MDBUS_EVENT_OVERRUN` for the rest follows at once.
pub const MDBUS_EVENT_PUBLISHER_RESTARTED: u32 = 6;
/// Upstream loss, not loss on this stream: the publisher (a feed relay)
/// reports that messages `from`..`to` of its own source feed never reached
/// it. Takes one stream sequence number, delivered in order.
pub const MDBUS_EVENT_SOURCE_GAP: u32 = 7;

/// One event, valid (with its payload) only during the callback call.
/// Fields that do not apply to `kind` are 0 (and `payload` null).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mdbus_event {
    /// One of the `MDBUS_EVENT_*` constants.
    pub kind: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// MESSAGE: its sequence number; END_OF_STREAM and PUBLISHER_DOWN: the
    /// last sequence.
    pub seq: u64,
    /// MESSAGE: the payload, in the transport's buffer (read only, do not
    /// keep the pointer past the callback).
    pub payload: *const u8,
    /// MESSAGE: payload length in bytes.
    pub len: usize,
    /// OVERRUN, GAP, SOURCE_GAP: first lost sequence.
    pub from: u64,
    /// OVERRUN, GAP, SOURCE_GAP: sequence delivery resumes at.
    pub to: u64,
    /// PUBLISHER_RESTARTED: the new incarnation's epoch.
    pub epoch: u64,
    /// MESSAGE: send time in ns since the Unix epoch when the sender
    /// stamped it, else 0.
    pub timestamp_ns: u64,
}

/// A poll callback: called once per event, in order, on the polling
/// thread. It must not call back into the handle being polled, and must not
/// unwind (throw a C++ exception or `longjmp`) through the library.
pub type mdbus_event_cb = Option<unsafe extern "C" fn(ctx: *mut c_void, event: *const mdbus_event)>;

const EMPTY: mdbus_event = mdbus_event {
    kind: 0,
    reserved: 0,
    seq: 0,
    payload: std::ptr::null(),
    len: 0,
    from: 0,
    to: 0,
    epoch: 0,
    timestamp_ns: 0,
};

pub(crate) fn message(m: &mdbus::Message<'_>) -> mdbus_event {
    mdbus_event {
        kind: MDBUS_EVENT_MESSAGE,
        seq: m.seq(),
        payload: m.payload().as_ptr(),
        len: m.payload().len(),
        timestamp_ns: m.timestamp().unwrap_or(0),
        ..EMPTY
    }
}

pub(crate) fn from_event(e: &mdbus::Event<'_>) -> mdbus_event {
    use mdbus::Event as E;
    let range = |kind, from, to| mdbus_event {
        kind,
        from,
        to,
        ..EMPTY
    };
    match *e {
        E::Message(ref m) => message(m),
        E::Overrun { from, to } => range(MDBUS_EVENT_OVERRUN, from, to),
        E::Gap { from, to } => range(MDBUS_EVENT_GAP, from, to),
        E::SourceGap { from, to } => range(MDBUS_EVENT_SOURCE_GAP, from, to),
        E::EndOfStream { last_seq } => mdbus_event {
            kind: MDBUS_EVENT_END_OF_STREAM,
            seq: last_seq,
            ..EMPTY
        },
        E::PublisherDown { last_seq } => mdbus_event {
            kind: MDBUS_EVENT_PUBLISHER_DOWN,
            seq: last_seq,
            ..EMPTY
        },
        E::PublisherRestarted { epoch } => mdbus_event {
            kind: MDBUS_EVENT_PUBLISHER_RESTARTED,
            epoch,
            ..EMPTY
        },
    }
}

/// Calls `cb` with `ev`.
///
/// # Safety
/// `cb` and `ctx` are what the caller of a poll passed, under its contract.
#[inline]
pub(crate) unsafe fn deliver(
    cb: unsafe extern "C" fn(*mut c_void, *const mdbus_event),
    ctx: *mut c_void,
    ev: &mdbus_event,
) {
    // SAFETY: `ev` lives for the call; the callback's own contract (no
    // unwinding, no re-entry into this handle) is the caller's.
    unsafe { cb(ctx, ev) }
}
