//! Asynchronous events of the device contexts: fatal queue-pair errors,
//! ports going down, a device failing.
//!
//! rdma_cm opens one context per device for the whole process, so every
//! handle on a device shares one async event queue, and an event read by
//! one handle may concern another. The queue is therefore read in one
//! place: [`Watch::check`] drains the context's (non-blocking) async fd
//! under a process-wide lock, acknowledges every event at once, and
//! records what it saw per context; each handle then looks for what
//! concerns it (its queue pair, its port, its completion queues, the
//! device). Handles call it at their idle cadence (every few thousand
//! empty polls) and when something already failed, never per message: the
//! lock is off the data path.
//!
//! A handle registers with [`Watch::new`] once its queue pair exists and
//! deregisters when the watch drops; the context's record goes with the
//! last watch of a context, so a context is only read while a live handle
//! holds it open.

use std::sync::Mutex;

use verbs_sys::{
    ibv_async_event, ibv_context, Verbs, IBV_EVENT_CQ_ERR, IBV_EVENT_DEVICE_FATAL,
    IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_QP_FATAL,
    IBV_EVENT_QP_REQ_ERR,
};

/// What one context has reported since its first watch.
struct Record {
    ctx: usize,
    watches: u32,
    device_fatal: bool,
    /// Port-error events seen, per port number (index 0 unused).
    port_errors: [u32; 4],
    /// Fatal events of queue pairs: (QP number, event type).
    qps: Vec<(u32, u32)>,
    /// Completion queues that overflowed or failed.
    cqs: Vec<usize>,
}

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

fn records() -> std::sync::MutexGuard<'static, Vec<Record>> {
    // A panic while holding the lock leaves consistent data: carry on.
    RECORDS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The name of an event type, for messages.
fn event_name(kind: u32) -> &'static str {
    match kind {
        IBV_EVENT_QP_FATAL => "IBV_EVENT_QP_FATAL",
        IBV_EVENT_QP_REQ_ERR => "IBV_EVENT_QP_REQ_ERR",
        IBV_EVENT_QP_ACCESS_ERR => "IBV_EVENT_QP_ACCESS_ERR",
        IBV_EVENT_CQ_ERR => "IBV_EVENT_CQ_ERR",
        IBV_EVENT_DEVICE_FATAL => "IBV_EVENT_DEVICE_FATAL",
        IBV_EVENT_PORT_ERR => "IBV_EVENT_PORT_ERR",
        _ => "an asynchronous event",
    }
}

/// One handle's interest in the events of its device context.
pub(crate) struct Watch {
    verbs: &'static Verbs,
    ctx: *mut ibv_context,
    port: u8,
    qpn: u32,
    cqs: [usize; 2],
    /// Port errors already counted when the watch began.
    port_errors_before: u32,
}

// SAFETY: the context pointer is only used under the records lock, and
// the owner keeps the context open while the watch lives.
unsafe impl Send for Watch {}

impl Watch {
    /// Watches the events of queue pair `qpn`, its completion queues
    /// `cqs`, port `port` and the device of `ctx`. Sets the context's async
    /// fd non-blocking (the first watch of a context does).
    ///
    /// # Safety
    /// `ctx` must stay open while the watch lives.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        ctx: *mut ibv_context,
        port: u8,
        qpn: u32,
        cqs: [usize; 2],
    ) -> Watch {
        let mut recs = records();
        let key = ctx as usize;
        let port_errors_before = match recs.iter_mut().find(|r| r.ctx == key) {
            Some(r) => {
                r.watches += 1;
                r.port_errors.get(usize::from(port)).copied().unwrap_or(0)
            }
            None => {
                // SAFETY: the context is open (caller); async_fd is a field
                // libibverbs set at open.
                let fd = unsafe { (*ctx).async_fd };
                // SAFETY: fcntl on a descriptor we do not close.
                let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
                let set = flags >= 0 && {
                    // SAFETY: as above.
                    unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0 }
                };
                if !set {
                    log::warn!(
                        "cannot make the async event fd {fd} non-blocking: {}; device events are not watched",
                        super::errors::describe_errno(super::errors::errno())
                    );
                }
                recs.push(Record {
                    ctx: key,
                    watches: 1,
                    device_fatal: false,
                    port_errors: [0; 4],
                    qps: Vec::new(),
                    cqs: Vec::new(),
                });
                0
            }
        };
        drop(recs);
        Watch {
            verbs,
            ctx,
            port,
            qpn,
            cqs,
            port_errors_before,
        }
    }

    /// Reads every pending event of the context, then says what ended
    /// this handle's queue pair, if anything did: "the port went down
    /// (IBV_EVENT_PORT_ERR)".
    #[cold]
    pub(crate) fn check(&self) -> Option<String> {
        let mut recs = records();
        let key = self.ctx as usize;
        let rec = recs.iter_mut().find(|r| r.ctx == key)?;
        // SAFETY: the context is open (Watch::new's contract); the fd is
        // non-blocking, so this returns at once when nothing is pending.
        unsafe { drain(self.verbs, self.ctx, rec) };
        if rec.device_fatal {
            return Some(format!(
                "the device failed ({})",
                event_name(IBV_EVENT_DEVICE_FATAL)
            ));
        }
        let port_errors = rec
            .port_errors
            .get(usize::from(self.port))
            .copied()
            .unwrap_or(0);
        if port_errors != self.port_errors_before {
            return Some(format!(
                "port {} went down ({})",
                self.port,
                event_name(IBV_EVENT_PORT_ERR)
            ));
        }
        if let Some(&(_, kind)) = rec.qps.iter().find(|(q, _)| *q == self.qpn) {
            return Some(format!(
                "the queue pair entered the error state ({})",
                event_name(kind)
            ));
        }
        if rec.cqs.iter().any(|c| self.cqs.contains(c)) {
            return Some(format!(
                "a completion queue failed ({})",
                event_name(IBV_EVENT_CQ_ERR)
            ));
        }
        None
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut recs = records();
        let key = self.ctx as usize;
        if let Some(i) = recs.iter().position(|r| r.ctx == key) {
            let r = &mut recs[i];
            r.watches -= 1;
            r.qps.retain(|(q, _)| *q != self.qpn);
            r.cqs.retain(|c| !self.cqs.contains(c));
            if r.watches == 0 {
                recs.swap_remove(i);
            }
        }
    }
}

/// Reads and acknowledges every pending event of `ctx` into `rec`.
///
/// # Safety
/// `ctx` is open, its async fd non-blocking.
unsafe fn drain(verbs: &Verbs, ctx: *mut ibv_context, rec: &mut Record) {
    loop {
        let mut ev = ibv_async_event::default();
        // SAFETY: the context is open; with O_NONBLOCK this fails with
        // EAGAIN when nothing is pending instead of waiting.
        if unsafe { (verbs.ibv_get_async_event)(ctx, &mut ev) } != 0 {
            return;
        }
        let kind = ev.event_type;
        match kind {
            IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR => {
                // SAFETY: for QP events the element is the QP, live until
                // the event is acknowledged (below).
                let qpn = unsafe { (*ev.element.qp).qp_num };
                log::warn!("queue pair {qpn:#x}: {}", event_name(kind));
                crate::counters::registry::note_async_event(&format!(
                    "queue pair {qpn:#x}: {}",
                    event_name(kind)
                ));
                rec.qps.push((qpn, kind));
            }
            IBV_EVENT_CQ_ERR => {
                // SAFETY: for CQ events the element is the CQ.
                rec.cqs.push(unsafe { ev.element.cq } as usize);
                // SAFETY: the context is open; its device pointer is the
                // device it was opened from.
                let device = unsafe { super::device::device_name(verbs, (*ctx).device) };
                log::warn!("{device}: {}", event_name(kind));
                crate::counters::registry::note_cq_overflow(
                    &device,
                    &format!(
                        "{device}: a completion queue failed (IBV_EVENT_CQ_ERR: overflow or error)"
                    ),
                );
            }
            IBV_EVENT_PORT_ERR => {
                // SAFETY: for port events the element is the port number.
                let port = unsafe { ev.element.port_num };
                log::warn!("port {port}: {}", event_name(kind));
                crate::counters::registry::note_async_event(&format!(
                    "port {port}: {}",
                    event_name(kind)
                ));
                if let Some(n) = usize::try_from(port)
                    .ok()
                    .and_then(|p| rec.port_errors.get_mut(p))
                {
                    *n = n.wrapping_add(1);
                }
            }
            IBV_EVENT_DEVICE_FATAL => {
                log::warn!("{}", event_name(kind));
                crate::counters::registry::note_async_event(event_name(kind));
                rec.device_fatal = true;
            }
            IBV_EVENT_PORT_ACTIVE => log::info!("a port became active again"),
            other => log::debug!("async event {other}"),
        }
        // SAFETY: acknowledged once, after its element was read.
        unsafe { (verbs.ibv_ack_async_event)(&mut ev) };
    }
}
