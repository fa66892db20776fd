//! Completion queues, polled by their owning handle only. The data path
//! busy-polls; a queue created [`Cq::with_channel`] can also put its poller
//! to sleep (adaptive waiting): [`Cq::sleep`] arms the queue with
//! `ibv_req_notify_cq` only when the poller is about to block, has it poll
//! once more after arming (a completion that arrived in between raises no
//! event), then blocks in poll(2) on the channel's non-blocking descriptor
//! and takes the event with `ibv_get_cq_event`. Events are acknowledged in
//! batches, and all of them before the queue is destroyed (which otherwise
//! waits forever for them).

use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::time::Duration;

use verbs_sys::{ibv_comp_channel, ibv_context, ibv_cq, ibv_wc, Verbs};

use super::errors;
use crate::error::Result;

/// Events taken but not yet acknowledged before they are acknowledged in
/// one `ibv_ack_cq_events` (which takes a lock in libibverbs).
const ACK_BATCH: u32 = 64;

/// A completion channel: the descriptor a sleeping poller blocks on.
/// Destroyed on drop, which must come after every queue created on it
/// ([`Cq`] owns its channel and drops it last).
pub(crate) struct CompChannel {
    verbs: &'static Verbs,
    raw: NonNull<ibv_comp_channel>,
}

impl CompChannel {
    /// Creates a channel whose descriptor does not block, so that taking
    /// an event never hangs when poll(2) was woken by something else.
    ///
    /// # Safety
    /// `ctx` must be a live context of `verbs` that outlives the channel.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        ctx: *mut ibv_context,
        device: &str,
    ) -> Result<CompChannel> {
        // SAFETY: guaranteed by the caller.
        let raw = unsafe { (verbs.ibv_create_comp_channel)(ctx) };
        let Some(raw) = NonNull::new(raw) else {
            return Err(errors::last("ibv_create_comp_channel", device, None));
        };
        let ch = CompChannel { verbs, raw };
        let fd = ch.fd();
        // SAFETY: plain fcntl calls on the channel's own descriptor.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(errors::last(
                "fcntl(O_NONBLOCK) on a completion channel",
                device,
                None,
            ));
        }
        Ok(ch)
    }

    /// The descriptor that becomes readable when an armed queue completes.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel is live; `fd` is set at creation and constant.
        unsafe { (*self.raw.as_ptr()).fd }
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel, destroyed once, after
        // the queues on it (Cq drops its channel after destroying itself).
        let rc = unsafe { (self.verbs.ibv_destroy_comp_channel)(self.raw.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_comp_channel: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}

/// How a queue's poller sleeps: its channel and the arming state.
struct Events {
    channel: CompChannel,
    /// `ibv_req_notify_cq` was called and no event was taken since.
    armed: bool,
    /// Events taken and not yet acknowledged.
    unacked: u32,
    /// Events taken in all.
    taken: u64,
}

/// What [`Cq::sleep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slept {
    /// Armed the queue and returned without blocking: the caller polls once
    /// more, and sleeps on its next call if that poll is empty.
    Armed,
    /// Blocked and took an event: completions are there.
    Event,
    /// Blocked until the timeout or a signal.
    Timeout,
    /// The queue has no channel: nothing to sleep on.
    NoChannel,
}

/// A completion queue; destroyed on drop (after the queue pair using it).
pub(crate) struct Cq {
    verbs: &'static Verbs,
    raw: NonNull<ibv_cq>,
    /// Destroyed on drop; false for a handle on a queue owned elsewhere.
    owned: bool,
    /// The completion channel, when the queue was made to be slept on.
    /// Dropped after the queue (fields drop after `Drop::drop`).
    events: Option<Events>,
}

impl Cq {
    /// Creates a queue with room for at least `cqe` completions.
    ///
    /// # Safety
    /// `ctx` must be a live context of `verbs` that outlives the queue.
    pub(crate) unsafe fn new(
        verbs: &'static Verbs,
        ctx: *mut ibv_context,
        cqe: usize,
        device: &str,
    ) -> Result<Cq> {
        let n = i32::try_from(cqe).unwrap_or(i32::MAX);
        // SAFETY: guaranteed by the caller; no channel, vector 0.
        let raw =
            unsafe { (verbs.ibv_create_cq)(ctx, n, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Cq {
                verbs,
                raw,
                owned: true,
                events: None,
            }),
            None => Err(errors::last(
                format!("ibv_create_cq of {cqe} entries"),
                device,
                None,
            )),
        }
    }

    /// Creates a queue with room for at least `cqe` completions on a
    /// completion channel of its own, so that its poller can [`sleep`](Cq::sleep).
    ///
    /// # Safety
    /// `ctx` must be a live context of `verbs` that outlives the queue.
    pub(crate) unsafe fn with_channel(
        verbs: &'static Verbs,
        ctx: *mut ibv_context,
        cqe: usize,
        device: &str,
    ) -> Result<Cq> {
        // SAFETY: guaranteed by the caller.
        let channel = unsafe { CompChannel::new(verbs, ctx, device) }?;
        let n = i32::try_from(cqe).unwrap_or(i32::MAX);
        // SAFETY: guaranteed by the caller; the channel is live and is
        // dropped after the queue; vector 0.
        let raw =
            unsafe { (verbs.ibv_create_cq)(ctx, n, std::ptr::null_mut(), channel.raw.as_ptr(), 0) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Cq {
                verbs,
                raw,
                owned: true,
                events: Some(Events {
                    channel,
                    armed: false,
                    unacked: 0,
                    taken: 0,
                }),
            }),
            None => Err(errors::last(
                format!("ibv_create_cq of {cqe} entries on a completion channel"),
                device,
                None,
            )),
        }
    }

    /// The descriptor a sleeping poller blocks on, when the queue has a
    /// channel.
    pub(crate) fn wait_fd(&self) -> Option<RawFd> {
        self.events.as_ref().map(|e| e.channel.fd())
    }

    /// Completion events taken from the channel so far.
    pub(crate) fn events_taken(&self) -> u64 {
        self.events.as_ref().map_or(0, |e| e.taken)
    }

    /// Arms the queue before its poller sleeps: the next completion raises
    /// an event on the channel. True when it was not armed yet: the caller
    /// must then poll once more before blocking, since a completion that
    /// arrived before arming raises no event. False when it stays armed
    /// from an earlier call (or has no channel). `Err(errno)` on failure.
    pub(crate) fn arm(&mut self) -> std::result::Result<bool, i32> {
        let raw = self.raw.as_ptr();
        let Some(ev) = self.events.as_mut().filter(|e| !e.armed) else {
            return Ok(false);
        };
        // SAFETY: the queue is live and was created on a channel; any
        // completion, solicited or not, raises the event.
        let rc = unsafe { verbs_sys::ibv_req_notify_cq(raw, 0) };
        if rc != 0 {
            return Err(if rc > 0 { rc } else { errors::errno() });
        }
        ev.armed = true;
        Ok(true)
    }

    /// Takes the events waiting on the channel (without blocking: its
    /// descriptor does not block) and acknowledges them in batches. True
    /// when there was one: the queue is then disarmed.
    pub(crate) fn take_events(&mut self) -> std::result::Result<bool, i32> {
        let raw = self.raw.as_ptr();
        let Some(ev) = self.events.as_mut() else {
            return Ok(false);
        };
        let mut took = false;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: the channel is live and its descriptor does not block;
            // the out-pointers are valid.
            let rc = unsafe {
                (self.verbs.ibv_get_cq_event)(ev.channel.raw.as_ptr(), &mut cq, &mut ctx)
            };
            if rc != 0 {
                let e = errors::errno();
                if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                    return Ok(took);
                }
                return Err(e);
            }
            // Only this queue is on the channel.
            took = true;
            ev.armed = false;
            ev.taken += 1;
            ev.unacked += 1;
            if ev.unacked >= ACK_BATCH {
                // SAFETY: acknowledges events taken from this queue.
                unsafe { (self.verbs.ibv_ack_cq_events)(raw, ev.unacked) };
                ev.unacked = 0;
            }
        }
    }

    /// Puts the poller to sleep until a completion arrives or `timeout`
    /// passes; call it only after a poll found the queue empty. The first
    /// call arms the queue and returns [`Slept::Armed`] without blocking
    /// (the caller polls once more, see [`arm`](Cq::arm)); the next one
    /// blocks in poll(2) on the channel, which a signal interrupts.
    pub(crate) fn sleep(&mut self, timeout: Duration) -> std::result::Result<Slept, i32> {
        let Some(fd) = self.wait_fd() else {
            return Ok(Slept::NoChannel);
        };
        if self.arm()? {
            return Ok(Slept::Armed);
        }
        let woke = crate::wait::poll_fd(fd, libc::POLLIN, timeout)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        if woke && self.take_events()? {
            return Ok(Slept::Event);
        }
        Ok(Slept::Timeout)
    }

    /// A handle on `other`'s queue that does not destroy it: for a session
    /// whose receives complete on its acceptor's shared queue, which is
    /// polled through the acceptor only.
    ///
    /// # Safety
    /// `other` must outlive the handle.
    pub(crate) unsafe fn alias(other: &Cq) -> Cq {
        Cq {
            verbs: other.verbs,
            raw: other.raw,
            owned: false,
            // The owner sleeps on the channel, if any.
            events: None,
        }
    }

    /// The raw pointer, for queue pair creation.
    pub(crate) fn as_raw(&self) -> *mut ibv_cq {
        self.raw.as_ptr()
    }

    /// Moves up to `wc.len()` completions into `wc` and returns them;
    /// `Err(errno)` when the provider fails. `wc` may be uninitialised:
    /// the data path keeps it on the stack.
    #[inline]
    pub(crate) fn poll<'w>(
        &mut self,
        wc: &'w mut [MaybeUninit<ibv_wc>],
    ) -> std::result::Result<&'w [ibv_wc], i32> {
        let n = i32::try_from(wc.len()).unwrap_or(i32::MAX);
        // SAFETY: the queue is live; `&mut self` makes this the only poller;
        // `wc` has room for `n` entries (MaybeUninit<T> has T's layout).
        let got = unsafe { verbs_sys::ibv_poll_cq(self.raw.as_ptr(), n, wc.as_mut_ptr().cast()) };
        if got < 0 {
            return Err(if got == -1 { libc::EIO } else { -got });
        }
        // SAFETY: the provider initialised the first `got <= n` entries.
        Ok(unsafe { std::slice::from_raw_parts(wc.as_ptr().cast::<ibv_wc>(), got as usize) })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Some(ev) = self.events.as_mut().filter(|e| e.unacked > 0) {
            // SAFETY: acknowledges events taken from this queue; destroying
            // it with events unacknowledged would wait for them forever.
            unsafe { (self.verbs.ibv_ack_cq_events)(self.raw.as_ptr(), ev.unacked) };
            ev.unacked = 0;
        }
        // SAFETY: created by ibv_create_cq, destroyed once, after the queue
        // pair that used it (owner's field order).
        let rc = unsafe { (self.verbs.ibv_destroy_cq)(self.raw.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_cq: {}",
                errors::describe_errno(if rc > 0 { rc } else { errors::errno() })
            );
        }
    }
}
