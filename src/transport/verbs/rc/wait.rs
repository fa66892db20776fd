//! Adaptive waiting for a session's receiver: sleep on the receive
//! completion queue's channel (`send` and `write-imm` modes), or nap
//! (`write` mode, and sessions on an acceptor's shared receive queue).
//!
//! `write` mode delivers a message by a plain RDMA WRITE into the ring: no
//! receive completion, so nothing for a channel to report. Making the
//! sender switch to WRITE_WITH_IMM while the receiver sleeps would need a
//! "sleeping" word the sender reads before every message, a race between
//! that read and the receiver falling asleep, and receive buffers posted
//! for the immediates; a write-mode receiver that wants to sleep naps for
//! [`NAP`](crate::wait::NAP) at most instead, which bounds both its idle cost (one
//! wake-up and one ring peek per nap) and the first message's extra delay.
//! Sessions that must sleep and wake at once use `write-imm` or `send`.

use std::time::Duration;

use super::RcSession;
use crate::config::SessionMode;
use crate::error::Result;
use crate::transport::verbs::cq::Slept;

impl RcSession {
    /// See [`SessionEnd::wait_for_data`](crate::transport::SessionEnd::wait_for_data).
    pub(super) fn sleep_for_data(&mut self, timeout: Duration) -> Result<bool> {
        // The liveness checks run at an idle-poll cadence, which a sleeping
        // receiver would stretch: they run before every sleep instead.
        self.idle_check();
        if self.end.is_some() || self.disconnected {
            // The next poll reports it.
            return Ok(true);
        }
        let slept = if self.mode == SessionMode::Write {
            Slept::NoChannel
        } else {
            match self.recv_cq.sleep(timeout) {
                Ok(s) => s,
                Err(e) => {
                    self.fail_os("waiting on the receive completion channel", e);
                    return Err(self.ended().expect("a failure was recorded"));
                }
            }
        };
        match slept {
            Slept::Event => Ok(true),
            Slept::Armed | Slept::Timeout => Ok(false),
            Slept::NoChannel => {
                crate::wait::nap(timeout.min(crate::wait::NAP));
                Ok(false)
            }
        }
    }

    /// Completion events taken from the receive queue's channel.
    pub fn receive_events(&self) -> u64 {
        self.recv_cq.events_taken()
    }
}
