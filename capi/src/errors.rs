//! Error codes, the per-thread last error sentence, and the guard that keeps
//! panics on the Rust side of the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const MDBUS_OK: i32 = 0;
/// A required pointer argument was null.
pub const MDBUS_ERR_NULL: i32 = -1;
/// A handle argument is not a live handle of the expected type (for example
/// a subscriber passed where a publisher is expected).
pub const MDBUS_ERR_INVALID_HANDLE: i32 = -2;
/// An argument is invalid (a string that is not UTF-8, a commit without a
/// claim, a length beyond the claim).
pub const MDBUS_ERR_INVALID_ARGUMENT: i32 = -3;
/// The library panicked; the handle involved should be closed.
pub const MDBUS_ERR_PANIC: i32 = -4;
/// The configuration (file, text or value) is wrong.
pub const MDBUS_ERR_CONFIG: i32 = -10;
/// A shared-memory segment could not be created, opened or trusted.
pub const MDBUS_ERR_SEGMENT: i32 = -11;
/// An operating-system call failed.
pub const MDBUS_ERR_IO: i32 = -12;
/// A message is larger than the channel's `max_message`.
pub const MDBUS_ERR_MESSAGE_TOO_LARGE: i32 = -13;
/// The session's peer process died.
pub const MDBUS_ERR_PEER_DIED: i32 = -14;
/// The session's peer closed it (after everything it sent was delivered).
pub const MDBUS_ERR_PEER_CLOSED: i32 = -15;
/// The network peer was lost (connection reset, silence).
pub const MDBUS_ERR_PEER_LOST: i32 = -16;
/// Nobody listens at the session's address.
pub const MDBUS_ERR_NO_PEER: i32 = -17;
/// Something did not happen in time (attach, connect, accept).
pub const MDBUS_ERR_TIMEOUT: i32 = -18;
/// The channel is owned by another live process.
pub const MDBUS_ERR_IN_USE: i32 = -19;
/// The channel does not exist yet.
pub const MDBUS_ERR_NOT_FOUND: i32 = -20;
/// The transport is not available here, or carries no such channel.
pub const MDBUS_ERR_TRANSPORT_UNAVAILABLE: i32 = -21;
/// A peer broke the protocol.
pub const MDBUS_ERR_PROTOCOL: i32 = -22;
/// A configuration key the transport needs is not set.
pub const MDBUS_ERR_MISSING: i32 = -23;
/// A channel name is not valid.
pub const MDBUS_ERR_BAD_NAME: i32 = -24;
/// An RDMA verbs call failed.
pub const MDBUS_ERR_VERBS: i32 = -25;
/// Any other failure; the message says what.
pub const MDBUS_ERR_OTHER: i32 = -99;

/// A failure on its way to C: the code and the sentence.
pub(crate) struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<mdbus::Error> for Failure {
    fn from(e: mdbus::Error) -> Failure {
        use mdbus::Error as E;
        let code = match &e {
            E::Config(_) => MDBUS_ERR_CONFIG,
            E::Segment { .. } => MDBUS_ERR_SEGMENT,
            E::Io { .. } => MDBUS_ERR_IO,
            E::MessageTooLarge { .. } => MDBUS_ERR_MESSAGE_TOO_LARGE,
            E::PeerDied { .. } => MDBUS_ERR_PEER_DIED,
            E::PeerLost { .. } => MDBUS_ERR_PEER_LOST,
            E::NoPeer { .. } => MDBUS_ERR_NO_PEER,
            E::Protocol { .. } => MDBUS_ERR_PROTOCOL,
            E::Missing { .. } => MDBUS_ERR_MISSING,
            E::PeerClosed { .. } => MDBUS_ERR_PEER_CLOSED,
            E::Timeout { .. } => MDBUS_ERR_TIMEOUT,
            E::InUse { .. } => MDBUS_ERR_IN_USE,
            E::NotFound { .. } => MDBUS_ERR_NOT_FOUND,
            E::TransportUnavailable { .. } => MDBUS_ERR_TRANSPORT_UNAVAILABLE,
            E::BadName { .. } => MDBUS_ERR_BAD_NAME,
            E::Verbs { .. } => MDBUS_ERR_VERBS,
            _ => MDBUS_ERR_OTHER,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<mdbus::error::ConfigError> for Failure {
    fn from(e: mdbus::error::ConfigError) -> Failure {
        Failure::new(MDBUS_ERR_CONFIG, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: String) {
    // A sentence with an interior NUL (from a file name) is cut there.
    let c = CString::new(message).unwrap_or_else(|e| {
        let at = e.nul_position();
        let mut bytes = e.into_vec();
        bytes.truncate(at);
        CString::new(bytes).unwrap_or_default()
    });
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs one entry point: its result, a failure as a code (remembering the
/// sentence), or a panic as `MDBUS_ERR_PANIC`.
pub(crate) fn guard(f: impl FnOnce() -> Result<i32, Failure>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(fail)) => {
            set_last_error(fail.message);
            fail.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("mdbus panicked (a bug, please report it): {what}"));
            MDBUS_ERR_PANIC
        }
    }
}

/// The sentence of the last failure on the calling thread ("" when none).
/// Valid until the next failing call on this thread; never null.
#[no_mangle]
pub extern "C" fn mdbus_last_error_message() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// A short name of an error code ("MDBUS_ERR_TIMEOUT"); never null.
#[no_mangle]
pub extern "C" fn mdbus_error_name(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        MDBUS_OK => b"MDBUS_OK\0",
        MDBUS_ERR_NULL => b"MDBUS_ERR_NULL\0",
        MDBUS_ERR_INVALID_HANDLE => b"MDBUS_ERR_INVALID_HANDLE\0",
        MDBUS_ERR_INVALID_ARGUMENT => b"MDBUS_ERR_INVALID_ARGUMENT\0",
        MDBUS_ERR_PANIC => b"MDBUS_ERR_PANIC\0",
        MDBUS_ERR_CONFIG => b"MDBUS_ERR_CONFIG\0",
        MDBUS_ERR_SEGMENT => b"MDBUS_ERR_SEGMENT\0",
        MDBUS_ERR_IO => b"MDBUS_ERR_IO\0",
        MDBUS_ERR_MESSAGE_TOO_LARGE => b"MDBUS_ERR_MESSAGE_TOO_LARGE\0",
        MDBUS_ERR_PEER_DIED => b"MDBUS_ERR_PEER_DIED\0",
        MDBUS_ERR_PEER_CLOSED => b"MDBUS_ERR_PEER_CLOSED\0",
        MDBUS_ERR_PEER_LOST => b"MDBUS_ERR_PEER_LOST\0",
        MDBUS_ERR_NO_PEER => b"MDBUS_ERR_NO_PEER\0",
        MDBUS_ERR_TIMEOUT => b"MDBUS_ERR_TIMEOUT\0",
        MDBUS_ERR_IN_USE => b"MDBUS_ERR_IN_USE\0",
        MDBUS_ERR_NOT_FOUND => b"MDBUS_ERR_NOT_FOUND\0",
        MDBUS_ERR_TRANSPORT_UNAVAILABLE => b"MDBUS_ERR_TRANSPORT_UNAVAILABLE\0",
        MDBUS_ERR_PROTOCOL => b"MDBUS_ERR_PROTOCOL\0",
        MDBUS_ERR_MISSING => b"MDBUS_ERR_MISSING\0",
        MDBUS_ERR_BAD_NAME => b"MDBUS_ERR_BAD_NAME\0",
        MDBUS_ERR_VERBS => b"MDBUS_ERR_VERBS\0",
        _ => b"MDBUS_ERR_OTHER\0",
    };
    s.as_ptr().cast()
}
