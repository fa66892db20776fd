//! Adaptive waiting for a session's receiver: sleep on the receive
//! completion queue's channel (every mode), or nap (sessions on an
//! acceptor's shared receive queue, and a `write`-mode receiver that could
//! not arm its wake).
//!
//! `write` mode delivers a message by a plain RDMA WRITE into the ring: no
//! receive completion, so nothing for a channel to report while traffic
//! flows. A receiver about to sleep arms a wake instead, which only costs
//! while it sleeps:
//!
//! - It keeps one receive request without buffer posted ([`Wake`]),
//!   RDMA-writes a new sleep generation `g + 1` into the sender's control
//!   block (`CTRL_SLEEP`), signaled, and arms the receive queue. It
//!   writes no newer generation until the immediate of this one has been
//!   taken, so the sender never sends more immediates than receives are
//!   posted (an RNR is fatal with `rnr_retry` 0).
//! - Until that write's completion says the word is in the sender's
//!   memory it blocks on the channel in naps' lengths (1 ms, doubling),
//!   not spinning: on an emulated host the device's work needs the CPU a
//!   spin would hold. Once it has completed, the caller polls the ring
//!   once more, then the receiver blocks on the channel.
//! - The sender, after posting each message, loads that word (local
//!   memory, one load); when it differs from the generation it last woke,
//!   it posts a zero-length WRITE_WITH_IMM (immediate: the generation)
//!   behind the message and records the generation. Loading after the
//!   post closes the race: a message whose load missed the new generation
//!   was posted before the word landed, so before the receiver's write
//!   completed, and lands within network time of it; the first block
//!   after arming is therefore short (`adaptive_max_block`, the caller's
//!   `timeout`), only later blocks long (`block_length`: until the next
//!   keep-alive under `stop_wakes`). A message posted after the word
//!   landed is followed by the immediate, whose completion wakes the
//!   receiver at once.
//! - On waking the receiver takes the immediate's completion, reposts the
//!   request and polls busily again; the next sleep arms generation
//!   `g + 2`. The sender keeps nothing to reset.
//!
//! So a `write` session costs its sender one load per message while its
//! peer is awake, and one extra work request per sleep of the peer. A
//! `write`-mode receiver that cannot arm (its send queue full) naps this
//! once: [`NAP`](crate::wait::NAP) (1 ms) first, twice as long after each
//! nap that brought nothing, up to the block's timeout. Sessions on an
//! acceptor's shared receive queue (`send` mode only) always nap, as
//! their completions arrive on the acceptor's queue.

use std::mem::MaybeUninit;
use std::time::Duration;

use verbs_sys::{ibv_wc, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SUCCESS};

use super::end::End;
use super::ring::ImmRecvs;
use super::{RcSession, CTRL_SLEEP};
use crate::config::SessionMode;
use crate::error::Result;
use crate::transport::verbs::cq::Slept;

/// The receiving side of `write` mode's wake-on-immediate.
pub(crate) struct Wake {
    /// The one receive request an immediate consumes.
    recv: ImmRecvs,
    /// The last sleep generation written into the peer's control block.
    gen: u64,
    /// `gen` was written and its immediate not taken yet: no newer
    /// generation may be written (one receive is posted).
    armed: bool,
    /// The request index of `gen`'s write until its completion is seen.
    landing: Option<u64>,
    /// No block since `gen` landed: the next one is short.
    fresh: bool,
    /// Wake immediates taken.
    taken: u64,
}

impl Wake {
    /// With `recv`'s one request already posted.
    pub(crate) fn new(recv: ImmRecvs) -> Wake {
        Wake {
            recv,
            gen: 0,
            armed: false,
            landing: None,
            fresh: false,
            taken: 0,
        }
    }
}

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
            match self.sleep_write(timeout, idle)? {
                Some(woke) => return Ok(woke),
                None => Slept::NoChannel,
            }
        } else {
            let length = if idle {
                self.block_length(timeout)
            } else {
                timeout
            };
            self.sleep_on_channel(length)?
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

    fn sleep_on_channel(&mut self, length: Duration) -> Result<Slept> {
        match self.recv_cq.sleep(length) {
            Ok(s) => Ok(s),
            Err(e) => {
                self.fail_os("waiting on the receive completion channel", e);
                Err(self.ended().expect("a failure was recorded"))
            }
        }
    }

    /// `write` mode's sleep (see the module comment): `Some(woken)`, or
    /// `None` when no wake could be armed and the caller naps instead.
    fn sleep_write(&mut self, timeout: Duration, idle: bool) -> Result<Option<bool>> {
        let Some(w) = self.wake.as_ref() else {
            return Ok(None);
        };
        let (armed, landing) = (w.armed, w.landing);
        // An immediate already there: the message before it is in the ring.
        if self.take_wakes()? {
            return Ok(Some(true));
        }
        if !armed {
            // Nothing may take the receive before this generation is out.
            let gen = self.wake.as_ref().map_or(0, |w| w.gen) + 1;
            let Some(index) = self.write_ctrl(CTRL_SLEEP, &gen.to_le_bytes(), true) else {
                // Send queue full: nap this once.
                return Ok(None);
            };
            if let Some(w) = self.wake.as_mut() {
                w.gen = gen;
                w.armed = true;
                w.landing = Some(index);
                w.fresh = true;
            }
            self.arm_receives()?;
            return Ok(Some(false));
        }
        if let Some(index) = landing {
            if self.sq.completed() > index {
                // In the peer's memory now (the liveness checks reaped the
                // completion): the caller polls the ring once more, and
                // the next block is the short one.
                if let Some(w) = self.wake.as_mut() {
                    w.landing = None;
                }
                self.arm_receives()?;
                return Ok(Some(false));
            }
            // Not acknowledged yet. Short blocks, not a spin: on an
            // emulated host the device's work runs on the CPUs a spin
            // would hold.
            let length = nap_length(self.naps, timeout);
            self.naps = self.naps.saturating_add(1);
            return self.block_write(length);
        }
        let fresh = self.wake.as_ref().is_some_and(|w| w.fresh);
        let length = if fresh || !idle {
            timeout
        } else {
            self.block_length(timeout)
        };
        match self.sleep_on_channel(length)? {
            // Armed just now: the caller polls the ring once more first.
            Slept::Armed => Ok(Some(false)),
            Slept::Event => {
                self.take_wakes()?;
                Ok(Some(true))
            }
            Slept::Timeout => {
                if let Some(w) = self.wake.as_mut() {
                    w.fresh = false;
                }
                Ok(Some(false))
            }
            Slept::NoChannel => Ok(None),
        }
    }

    /// One block on the receive channel for `write` mode.
    fn block_write(&mut self, length: Duration) -> Result<Option<bool>> {
        match self.sleep_on_channel(length)? {
            // Armed just now: the caller polls the ring once more first.
            Slept::Armed => Ok(Some(false)),
            Slept::Event => {
                self.take_wakes()?;
                Ok(Some(true))
            }
            Slept::Timeout => Ok(Some(false)),
            Slept::NoChannel => Ok(None),
        }
    }

    /// Asks for an event on the next receive completion.
    fn arm_receives(&mut self) -> Result<()> {
        if let Err(e) = self.recv_cq.arm() {
            self.fail_os("ibv_req_notify_cq", e);
            return Err(self.ended().expect("a failure was recorded"));
        }
        Ok(())
    }

    /// Takes the wake immediates completed on the receive queue, reposts
    /// the request and clears the channel's event. True when one was
    /// taken.
    fn take_wakes(&mut self) -> Result<bool> {
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; 4];
        let mut took = false;
        loop {
            let done = match self.recv_cq.poll(&mut wcs) {
                Ok(d) => d,
                Err(e) => {
                    self.fail_os("ibv_poll_cq (receives)", e);
                    return Err(self.ended().expect("a failure was recorded"));
                }
            };
            if done.is_empty() {
                break;
            }
            self.completions += done.len() as u64;
            for wc in done {
                if wc.status != IBV_WC_SUCCESS {
                    self.wc_failed(wc, "receive");
                    continue;
                }
                // SAFETY: a successful receive completion of RDMA WRITE
                // with immediate carries the immediate in this union arm.
                let imm = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
                let w = self.wake.as_mut().expect("write mode");
                if wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !w.armed || imm != w.gen as u32 {
                    let reason = format!(
                        "a receive completion (opcode {}, immediate {imm}) arrived where only the wake for sleep generation {} could",
                        wc.opcode, w.gen
                    );
                    self.fail(End::Protocol(reason));
                    return Err(self.ended().expect("a failure was recorded"));
                }
                w.armed = false;
                w.landing = None;
                w.fresh = false;
                w.taken += 1;
                took = true;
                if let Err(e) = w.recv.post(&mut self.qp, 1) {
                    self.fail_os("ibv_post_recv (wake)", e);
                    return Err(self.ended().expect("a failure was recorded"));
                }
            }
        }
        if took {
            // The completion raised an event if the queue was armed: take
            // it, or the next block would end at once for nothing.
            if let Err(e) = self.recv_cq.take_events() {
                self.fail_os("ibv_get_cq_event", e);
                return Err(self.ended().expect("a failure was recorded"));
            }
        }
        if let Some(e) = self.ended() {
            return Err(e);
        }
        Ok(took)
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

    /// `write` mode: sleep generations this end announced to its peer
    /// (each asks for one wake immediate).
    pub fn sleeps_armed(&self) -> u64 {
        self.wake.as_ref().map_or(0, |w| w.gen)
    }

    /// `write` mode: wake immediates this end took (each ended or
    /// preceded one of its sleeps).
    pub fn wake_imms_received(&self) -> u64 {
        self.wake.as_ref().map_or(0, |w| w.taken)
    }

    /// `write` mode: wake immediates this end sent its sleeping peer.
    pub fn wake_imms_sent(&self) -> u64 {
        self.wake_imms_sent
    }

    /// [`receive_events`](Self::receive_events),
    /// [`sleeps_armed`](Self::sleeps_armed),
    /// [`wake_imms_sent`](Self::wake_imms_sent) and
    /// [`wake_imms_received`](Self::wake_imms_received), in the counters
    /// file's order.
    pub fn wait_counts(&self) -> [u64; 4] {
        [
            self.receive_events(),
            self.sleeps_armed(),
            self.wake_imms_sent(),
            self.wake_imms_received(),
        ]
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
