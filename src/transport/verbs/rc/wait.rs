//! Adaptive waiting for a session's receiver: sleep on the receive
//! completion queue's channel (`send` and `write-imm` modes), or nap
//! (`write` mode, and sessions on an acceptor's shared receive queue).
//!
//! `write` mode delivers a message by a plain RDMA WRITE into the ring: no
//! receive completion, so nothing for a channel to report. Making the
//! sender switch to WRITE_WITH_IMM while the receiver sleeps would need a
//! "sleeping" word the sender reads before every message, a race between
//! that read and the receiver falling asleep, and receive buffers posted
//! for the immediates; a write-mode receiver that wants to sleep naps
//! instead: [`NAP`](crate::wait::NAP) (1 ms) first, twice as long after
//! each nap that brought nothing, up to the block's timeout
//! (`adaptive_max_block`). A short quiet spell costs at most a
//! millisecond or so on the first message after it; a long one costs
//! what an RC receiver's timeout wakes cost (one wake-up and one ring peek
//! per `adaptive_max_block`), and the first message after it waits up to
//! `adaptive_max_block` (on average half) for the nap to end. Sessions
//! that must sleep and wake at once use `write-imm` or `send`.

use std::time::Duration;

use super::RcSession;
use crate::config::SessionMode;
use crate::error::Result;
use crate::transport::verbs::cq::Slept;

impl RcSession {
    /// See [`SessionEnd::wait_for_data`](crate::transport::SessionEnd::wait_for_data).
    /// `idle`: the caller only waits for data (adaptive waiting's block),
    /// so the sleep may outlast `timeout` (see `block_length`).
    pub(super) fn sleep_for_data(&mut self, timeout: Duration, idle: bool) -> Result<bool> {
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
            let length = if idle {
                self.block_length(timeout)
            } else {
                timeout
            };
            match self.recv_cq.sleep(length) {
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
                crate::wait::nap(nap_length(self.naps, timeout));
                self.naps = self.naps.saturating_add(1);
                Ok(false)
            }
        }
    }

    /// How long one sleep on the channel lasts: `timeout`
    /// (`adaptive_max_block`), or, once [`stop_waits`](crate::wait::stop_waits)
    /// can end it, until the liveness checks are due (the next keep-alive),
    /// at most [`LONG_BLOCK`](crate::wait::LONG_BLOCK): an idle receiver then wakes about once per
    /// `verbs.keepalive_interval` instead of once per `adaptive_max_block`.
    fn block_length(&self, timeout: Duration) -> Duration {
        if !crate::wait::stop_wakes() {
            return timeout;
        }
        self.next_timer(std::time::Instant::now())
            .min(crate::wait::LONG_BLOCK)
            .max(timeout)
    }

    /// Completion events taken from the receive queue's channel.
    pub fn receive_events(&self) -> u64 {
        self.recv_cq.events_taken()
    }
}

/// The nap after `naps` naps in a row without data: 1 ms doubled per nap,
/// at most `timeout`.
fn nap_length(naps: u32, timeout: Duration) -> Duration {
    crate::wait::NAP
        .saturating_mul(1u32.checked_shl(naps.min(31)).unwrap_or(u32::MAX))
        .min(timeout)
}

#[cfg(test)]
mod tests {
    use super::nap_length;
    use std::time::Duration;

    #[test]
    fn naps_double_while_nothing_comes_up_to_the_timeout() {
        let ms = Duration::from_millis;
        let lengths: Vec<Duration> = (0..8).map(|k| nap_length(k, ms(50))).collect();
        assert_eq!(
            lengths,
            [ms(1), ms(2), ms(4), ms(8), ms(16), ms(32), ms(50), ms(50)]
        );
        assert_eq!(nap_length(u32::MAX, ms(50)), ms(50));
        // A timeout under the first nap bounds it too.
        assert_eq!(
            nap_length(0, Duration::from_micros(300)),
            Duration::from_micros(300)
        );
    }
}
