//! How a session ends: failed completions and posts, rdma_cm events, the
//! peer's close word, and the orderly close of this end.

use std::time::{Duration, Instant};

use verbs_sys::{
    ibv_wc, Rdmacm, IBV_WC_REM_ACCESS_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
    IBV_WC_WR_FLUSH_ERR, RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_DISCONNECTED,
};

use super::super::cm::CmId;
use super::super::errors;
use super::connect::refuse;
use super::{RcSession, CTRL_CLOSE, CTRL_CREDIT};
use crate::counters::registry::WcQueue;
use crate::error::{Error, Result};

/// Quiet time after which unsignaled requests are confirmed with one
/// signaled write: far longer than a request/response round trip (a few
/// µs on hardware), so an exchange in progress never pays for it.
const CONFIRM_AFTER: Duration = Duration::from_millis(1);

/// How a session came to an end, kept so every later call reports it.
#[derive(Debug, Clone)]
pub(super) enum End {
    /// A work request, completion or event failed the session: why.
    Fault(String),
    /// The peer broke the protocol.
    Protocol(String),
    /// This end was closed.
    Closed,
}

impl RcSession {
    /// Records the first reason the session ended, then takes the send
    /// completions still queued, so the acknowledged sequence it reports is
    /// as recent as the device knows.
    pub(super) fn fail(&mut self, why: End) {
        if self.end.is_none() {
            self.end = Some(why);
            self.reap_sends();
        }
    }

    /// An operation failed with errno `e`.
    pub(super) fn fail_os(&mut self, op: &str, e: i32) {
        self.fail(End::Fault(format!(
            "{op} failed: {}",
            errors::describe_errno(e)
        )));
    }

    /// The fault error of this session, with how far it got.
    pub(super) fn fault(&self, cause: String) -> Error {
        Error::RdmaFault {
            channel: self.cold.channel.clone(),
            device: self.cold.device.clone(),
            port: self.cold.port,
            qp: self.qpn,
            cause,
            acked: self.acked,
            delivered: self.expect_seq - 1,
        }
    }

    pub(super) fn end_error(&self, why: &End) -> Error {
        match why {
            End::Fault(cause) => self.fault(cause.clone()),
            End::Protocol(reason) => Error::Protocol {
                channel: self.cold.channel.clone(),
                peer: self.cold.peer_addr.clone(),
                reason: reason.clone(),
            },
            End::Closed => Error::Verbs {
                op: format!("{} used after close", self.cold.channel),
                device: self.cold.device.clone(),
                port: Some(self.cold.port),
                qp: Some(self.qpn),
                errno: None,
                detail: "this end was closed".into(),
            },
        }
    }

    /// Records a failed work completion. A flush is the consequence of
    /// the queue pair entering the error state: after the peer's
    /// disconnect or our own close that is the normal end, reported as
    /// such; otherwise it is a fault, named by the async event that caused
    /// it when there was one.
    #[cold]
    pub(super) fn wc_failed(&mut self, wc: &ibv_wc, what: &'static str) {
        let queue = if what == "send" {
            WcQueue::Send
        } else {
            WcQueue::Receive
        };
        crate::counters::registry::note_qp_completion_error(
            &self.cold.device,
            wc.qp_num,
            queue,
            wc.status,
            &format!(
                "RC {what} on QP {}: {}",
                wc.qp_num,
                errors::wc_status(wc.status)
            ),
        );
        if self.end.is_some() {
            return;
        }
        if wc.status == IBV_WC_WR_FLUSH_ERR {
            self.refresh_events();
            if self.disconnected || self.closed || self.end.is_some() {
                return;
            }
            let cause = match self.cold.watch.check() {
                Some(event) => format!("{event}; its {what} requests were flushed"),
                None => format!(
                    "the queue pair entered the error state: a {what} request was flushed ({})",
                    errors::wc_status(wc.status)
                ),
            };
            self.fail(End::Fault(cause));
            return;
        }
        let cause = match wc.status {
            IBV_WC_RETRY_EXC_ERR => format!(
                "no acknowledgement of a {what} within the transport retries, the peer's host, device or the network failed ({})",
                errors::wc_status(wc.status)
            ),
            IBV_WC_RNR_RETRY_EXC_ERR => format!(
                "{}: the peer had no receive buffer posted, which credit flow control should prevent",
                errors::wc_status(wc.status)
            ),
            IBV_WC_REM_ACCESS_ERR => format!(
                "the peer's device refused a remote write outside the words it registered for it ({})",
                errors::wc_status(wc.status)
            ),
            s => format!("a {what} completed with an error ({})", errors::wc_status(s)),
        };
        self.fail(End::Fault(cause));
    }

    /// Reads rdma_cm events without blocking, and the device's async
    /// events.
    pub(super) fn refresh_events(&mut self) {
        loop {
            match self.cold.events.try_next() {
                Ok(Some(ev)) => match ev.kind {
                    RDMA_CM_EVENT_DISCONNECTED => self.disconnected = true,
                    RDMA_CM_EVENT_DEVICE_REMOVAL => {
                        self.disconnected = true;
                        self.fail(End::Fault(
                            "the device was removed (rdma_cm DEVICE_REMOVAL)".into(),
                        ));
                    }
                    // A request that reached the listener before it was
                    // destroyed: refused and destroyed, never left pending.
                    RDMA_CM_EVENT_CONNECT_REQUEST => {
                        if let Ok(cm) = Rdmacm::load() {
                            // SAFETY: a connect request's id is new and ours
                            // to own; its channel outlives it.
                            if let Some(id) = unsafe { CmId::adopt(cm, ev.id) } {
                                refuse(
                                    id,
                                    &self.cold.channel,
                                    "the session already has its peer",
                                    &mut self.rejected,
                                );
                            }
                        }
                    }
                    _ => log::debug!("{}: rdma_cm {}", self.cold.channel, ev.name()),
                },
                Ok(None) => break,
                Err(e) => {
                    log::warn!("{}: {e}", self.cold.channel);
                    break;
                }
            }
        }
        if self.end.is_none() && !self.closed {
            if let Some(cause) = self.cold.watch.check() {
                self.fail(End::Fault(cause));
            }
        }
    }

    /// What the idle cadence does: events, send completions, keep-alive.
    #[cold]
    pub(super) fn idle_check(&mut self) {
        self.last_check = crate::clock::monotonic_ns();
        self.refresh_events();
        self.reap_sends();
        if self.wake_owed {
            self.wake_peer(false);
        }
        self.keep_alive();
    }

    /// Writes a zero-length keep-alive when nothing was posted for
    /// `keepalive_interval`, or after [`CONFIRM_AFTER`] of quiet following
    /// unsignaled requests (so their acknowledgement is known), and fails the session when one (or anything
    /// posted before it) stays unacknowledged for `keepalive_timeout`.
    /// Under load nothing extra is sent: the messages are acknowledged.
    fn keep_alive(&mut self) {
        if self.end.is_some() || self.disconnected || self.closed {
            return;
        }
        let now = Instant::now();
        if let Some((index, at)) = self.keepalive.pending {
            if self.sq.completed() > index {
                self.keepalive.pending = None;
            } else {
                if now.saturating_duration_since(at) >= self.keepalive.timeout {
                    self.fail(End::Fault(format!(
                        "the peer did not acknowledge a keep-alive within {} ms (its host, its device or the network is gone)",
                        self.keepalive.timeout.as_millis()
                    )));
                }
                return;
            }
        }
        let posted = self.sq.next_index();
        if posted != self.keepalive.mark {
            self.keepalive.mark = posted;
            self.keepalive.since = now;
            return;
        }
        // Requests posted unsignaled and not yet known complete: one
        // signaled write confirms them (and so the acknowledged sequence)
        // once the session has been quiet for CONFIRM_AFTER. Not at the
        // first empty poll: in a request/response exchange every wait for
        // the reply is such a spell, and a write per round trip would add
        // wire packets to every message.
        let quiet = now.saturating_duration_since(self.keepalive.since);
        let unconfirmed = self.sq.completed() < posted;
        if (unconfirmed && quiet >= CONFIRM_AFTER.min(self.keepalive.interval))
            || quiet >= self.keepalive.interval
        {
            // Zero bytes into the credit word: no memory changes, but the
            // peer's device must acknowledge it.
            if let Some(index) = self.write_ctrl(CTRL_CREDIT, &[], true) {
                self.keepalive.pending = Some((index, now));
            }
            self.keepalive.mark = self.sq.next_index();
            self.keepalive.since = now;
        }
    }

    /// How long until [`keep_alive`](Self::keep_alive) has something to do:
    /// the next keep-alive (or confirming write) to send, or the deadline
    /// of the one outstanding. A sleeping receiver whose blocks may outlast
    /// `adaptive_max_block` blocks this long.
    pub(super) fn next_timer(&self, now: Instant) -> Duration {
        let k = &self.keepalive;
        let unconfirmed = self.sq.completed() < self.sq.next_index();
        let send_at = k.since
            + if k.pending.is_none() && unconfirmed {
                CONFIRM_AFTER.min(k.interval)
            } else {
                k.interval
            };
        let due = match k.pending {
            Some((_, at)) => send_at.min(at + k.timeout),
            None => send_at,
        };
        due.saturating_duration_since(now)
    }

    /// The error that ends the session, once nothing more can be delivered.
    pub(super) fn ended(&self) -> Option<Error> {
        let close = self.close_word();
        let delivered = self.expect_seq - 1;
        if close != 0 && delivered + 1 >= close {
            return Some(Error::PeerClosed {
                channel: self.cold.channel.clone(),
            });
        }
        if let Some(why) = &self.end {
            return Some(self.end_error(why));
        }
        if self.disconnected {
            return Some(self.disconnect_error(close));
        }
        None
    }

    /// A disconnect the peer did not announce with its close word, or
    /// one that came before all it sent arrived.
    fn disconnect_error(&self, close: u64) -> Error {
        if close != 0 {
            return self.fault(format!(
                "the peer closed after sending {} messages, of which {} arrived",
                close - 1,
                self.expect_seq - 1
            ));
        }
        self.fault(format!(
            "the peer (pid {}) disconnected without closing the session: it died, or its host tore the connection down",
            self.peer_pid
        ))
    }

    /// The state of the peer, checked when idle: the recorded end, a close
    /// or a disconnect.
    #[cold]
    pub(super) fn peer_state(&mut self) -> Result<()> {
        self.idle_check();
        if let Some(why) = &self.end {
            return Err(self.end_error(why));
        }
        if self.close_word() != 0 {
            return Err(Error::PeerClosed {
                channel: self.cold.channel.clone(),
            });
        }
        if self.disconnected {
            return Err(self.disconnect_error(0));
        }
        Ok(())
    }

    /// Closes in order: the close word after every message, waited for,
    /// then the disconnect.
    pub(super) fn close_in_order(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.refresh_events();
        if !self.disconnected && self.end.is_none() {
            // The close word goes after every message sent (same queue
            // pair, in order); waiting for its completion means all of them
            // reached the peer before the disconnect flushes the queue.
            let deadline = Instant::now() + self.close_timeout;
            let word = self.next_seq.to_le_bytes();
            let mut posted = None;
            while posted.is_none() && self.end.is_none() && Instant::now() < deadline {
                posted = self.write_ctrl(CTRL_CLOSE, &word, true);
            }
            // A sleeping write-mode peer learns of the close from a wake
            // behind the close word, not at the end of its block; waiting
            // for the wake's completion covers the close word's too.
            if posted.is_some() && self.mode == crate::config::SessionMode::Write {
                posted = self.wake_peer(true).or(posted);
            }
            // A peer that has already gone (its disconnect arrived) will not
            // acknowledge: stop waiting then instead of at the deadline.
            let mut spins = 0u32;
            if let Some(index) = posted {
                while self.sq.completed() <= index
                    && self.end.is_none()
                    && !self.disconnected
                    && Instant::now() < deadline
                {
                    self.reap_sends();
                    spins = spins.wrapping_add(1);
                    if spins % 1024 == 0 {
                        self.refresh_events();
                    }
                    std::hint::spin_loop();
                }
            }
            if self.sq.completed() <= posted.unwrap_or(u64::MAX) && !self.disconnected {
                log::warn!(
                    "{}: the close was not acknowledged by the peer within {} ms",
                    self.cold.channel,
                    self.close_timeout.as_millis()
                );
            }
        }
        self.cold.id.disconnect();
        self.disconnected = true;
        // Later calls report this, not the disconnect as the peer's death.
        self.fail(End::Closed);
    }
}
