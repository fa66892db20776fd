//! How a session ends: failed completions and posts, rdma_cm events, the
//! peer's close word, and the orderly close of this end.

use std::time::Instant;

use verbs_sys::{
    ibv_wc, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR,
    RDMA_CM_EVENT_DEVICE_REMOVAL, RDMA_CM_EVENT_DISCONNECTED,
};

use super::super::errors;
use super::{RcSession, CTRL_CLOSE};
use crate::error::{Error, Result};

/// How a session came to an end, kept so every later call reports it.
#[derive(Debug, Clone)]
pub(super) enum End {
    /// A work completion or post failed.
    Failed {
        op: &'static str,
        detail: String,
        errno: Option<i32>,
    },
    /// The transport gave up on the peer (no acknowledgements).
    Lost(String),
    /// The peer broke the protocol.
    Protocol(String),
}

impl RcSession {
    pub(super) fn fail(&mut self, why: End) {
        if self.end.is_none() {
            self.end = Some(why);
        }
    }

    pub(super) fn end_error(&self, why: &End) -> Error {
        match why {
            End::Failed { op, detail, errno } => Error::Verbs {
                op: format!("{} {op}", self.cold.channel),
                device: self.cold.device.clone(),
                port: Some(self.cold.port),
                qp: Some(self.qpn),
                errno: *errno,
                detail: detail.clone(),
            },
            End::Lost(reason) => Error::PeerLost {
                channel: self.cold.channel.clone(),
                peer: self.cold.peer_addr.clone(),
                reason: reason.clone(),
            },
            End::Protocol(reason) => Error::Protocol {
                channel: self.cold.channel.clone(),
                peer: self.cold.peer_addr.clone(),
                reason: reason.clone(),
            },
        }
    }

    /// Records a failed work completion.
    #[cold]
    pub(super) fn wc_failed(&mut self, wc: &ibv_wc, what: &'static str) {
        match wc.status {
            // A consequence of a disconnect or of an earlier error.
            IBV_WC_WR_FLUSH_ERR => {}
            IBV_WC_RETRY_EXC_ERR => self.fail(End::Lost(
                "no acknowledgement within the transport retries (the peer's host or the network failed)".into(),
            )),
            IBV_WC_RNR_RETRY_EXC_ERR => self.fail(End::Failed {
                op: what,
                detail: format!(
                    "{}: the peer had no receive buffer posted, which credit flow control should prevent",
                    errors::wc_status(wc.status)
                ),
                errno: None,
            }),
            s => self.fail(End::Failed {
                op: what,
                detail: errors::wc_status(s),
                errno: None,
            }),
        }
    }

    /// Reads rdma_cm events without blocking.
    pub(super) fn refresh_events(&mut self) {
        loop {
            match self.cold.events.try_next() {
                Ok(Some(ev)) => match ev.kind {
                    RDMA_CM_EVENT_DISCONNECTED => self.disconnected = true,
                    RDMA_CM_EVENT_DEVICE_REMOVAL => {
                        self.disconnected = true;
                        self.fail(End::Failed {
                            op: "rdma_cm",
                            detail: "the device was removed".into(),
                            errno: None,
                        });
                    }
                    _ => log::debug!("{}: rdma_cm {}", self.cold.channel, ev.name()),
                },
                Ok(None) => return,
                Err(e) => {
                    log::warn!("{}: {e}", self.cold.channel);
                    return;
                }
            }
        }
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
            if close != 0 {
                return Some(Error::PeerLost {
                    channel: self.cold.channel.clone(),
                    peer: self.cold.peer_addr.clone(),
                    reason: format!(
                        "it closed after sending {} messages, of which {delivered} arrived",
                        close - 1
                    ),
                });
            }
            return Some(Error::PeerDied {
                channel: self.cold.channel.clone(),
                pid: self.peer_pid,
            });
        }
        None
    }

    /// The state of the peer, checked when idle: the recorded end, a close
    /// or a disconnect.
    #[cold]
    pub(super) fn peer_state(&mut self) -> Result<()> {
        self.refresh_events();
        self.reap_sends();
        if let Some(why) = &self.end {
            return Err(self.end_error(why));
        }
        if self.close_word() != 0 {
            return Err(Error::PeerClosed {
                channel: self.cold.channel.clone(),
            });
        }
        if self.disconnected {
            return Err(Error::PeerDied {
                channel: self.cold.channel.clone(),
                pid: self.peer_pid,
            });
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
        self.fail(End::Failed {
            op: "used after close",
            detail: "this end was closed".into(),
            errno: None,
        });
    }
}
