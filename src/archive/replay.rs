//! Replay then live: a subscriber that delivers a stream from any
//! sequence, the archived range first, then the live stream from exactly
//! the next sequence, with no gap and no duplicate at the seam.
//!
//! The merge rule: replay from the archive until the next sequence needed
//! is one the live subscription can still deliver (the shm ring, or the
//! publisher's retained window on datagram transports, which the live
//! subscriber starts from, as with `late_join = "oldest"`); then take the
//! live stream from that sequence, dropping what it delivers before it.
//! When the live stream has moved past the next sequence needed (an
//! overrun, a gap, or a first message beyond it), keep replaying until
//! the archive reaches it. The archive is read from its directory, so the
//! subscriber must see the recorder's files (same host, or a shared
//! filesystem), or, with `replay_service` set, from a replay service over
//! a session of the bus (docs/ARCHIVE.md).

use std::time::{Duration, Instant};

use super::{ArchiveError, ArchiveReader, Item, RemoteSource, ReplaySource};
use crate::config::LateJoin;
use crate::message::{Event, Message};
use crate::stream::SubscriberImpl;
use crate::transport::StreamReceive;
use crate::{Bus, Subscriber};

/// Messages replayed between two tries of the live stream.
const PROBE_EVERY: u64 = 256;

/// How a replay went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Messages delivered from the archive.
    pub replayed: u64,
    /// Gaps the archive reported (ranges it does not hold).
    pub replay_gaps: u64,
    /// Messages the live stream delivered that the archive had already
    /// delivered (dropped: no duplicate reaches the application).
    pub live_skipped: u64,
    /// Times the live stream was found past the next sequence needed, so
    /// replaying went on.
    pub rejoins: u64,
    /// First sequence delivered from the live subscription (the seam:
    /// everything before it came from the archive); 0 while replaying.
    pub merge_seq: u64,
    /// Times the archive made no progress for the stream's
    /// `heartbeat_timeout` while the live stream was ahead: the range
    /// between was reported as a gap.
    pub stalls: u64,
    /// Index entries of the archive that did not point at their record.
    pub index_fallbacks: u64,
    /// Publisher restarts heard before the merge: each was passed on as
    /// [`Event::PublisherRestarted`] and ended the replay, the new epoch
    /// taken live (its sequences are not the archived epoch's).
    pub restarts: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Replay,
    Joining,
    Live,
}

/// A live message taken beyond the next sequence needed, kept until the
/// archive reaches it.
#[derive(Debug)]
struct Pending {
    seq: u64,
    flags: u32,
    timestamp: u64,
    payload: Vec<u8>,
}

/// The transport end of a subscriber with `late_join = "archive"`.
#[derive(Debug)]
pub struct ReplaySubscriber {
    reader: ReplaySource,
    live: SubscriberImpl,
    phase: Phase,
    /// Next sequence to deliver.
    next: u64,
    /// The sequence the live subscription delivers next, once known.
    live_at: u64,
    /// Live messages taken beyond `next`, in order.
    pending: Vec<Pending>,
    /// Messages replayed since the live stream was last tried.
    since_probe: u64,
    /// The archive had nothing more at the last look.
    exhausted: bool,
    stall_timeout: Duration,
    stalled_since: Option<Instant>,
    /// The stream ended (its last sequence) while the replay was still
    /// behind: the end is delivered once the archive has delivered up to
    /// it.
    end_at: Option<u64>,
    /// The publisher epoch of the archived records delivered so far (0:
    /// none delivered, or not known).
    replay_epoch: u64,
    /// The publisher epoch of the archive's next records (0: not known).
    source_epoch: u64,
    /// Until when the first replay waits for a datagram subscription to
    /// learn the live epoch (see `replay_step`).
    epoch_wait: Option<Instant>,
    /// How long: the stream's `heartbeat_timeout`, after which a silent
    /// publisher is taken for down anyway (a live one sends a heartbeat
    /// at least every `heartbeat_max_interval`).
    epoch_wait_for: Duration,
    stats: ReplayStats,
}

/// Subscribes to stream `name` of `bus` from sequence `from`: the range
/// the stream's archive holds, then the live stream (see the module
/// documentation). The same as a subscriber configured with
/// `late_join = "archive"` and `archive_from = from`.
pub fn subscribe_from(bus: &Bus, name: &str, from: u64) -> crate::Result<Subscriber> {
    let cfg = bus.config().stream(name);
    let archive = super::configured(bus, name, "to replay from")?;
    let live_cfg = crate::config::StreamConfig {
        late_join: LateJoin::Oldest,
        ..cfg.clone()
    };
    // The archive opened first: a missing one fails before joining.
    let mut reader = if archive.replay_service.is_empty() {
        ReplaySource::Local(ArchiveReader::open(&archive.dir)?)
    } else {
        ReplaySource::Remote(Box::new(RemoteSource::connect(
            bus,
            &archive.replay_service,
        )?))
    };
    reader.seek(from)?;
    let live = bus.subscriber_impl(name, &live_cfg)?;
    let r = ReplaySubscriber {
        reader,
        live,
        phase: Phase::Replay,
        next: from.max(1),
        live_at: 0,
        pending: Vec::new(),
        since_probe: 0,
        exhausted: false,
        stall_timeout: cfg.heartbeat_timeout,
        stalled_since: None,
        end_at: None,
        replay_epoch: 0,
        source_epoch: 0,
        epoch_wait: None,
        epoch_wait_for: cfg.heartbeat_timeout,
        stats: ReplayStats::default(),
    };
    Ok(bus.wrap_subscriber(SubscriberImpl::Replay(Box::new(r)), name, cfg.poll_batch))
}

impl ReplaySubscriber {
    /// Counters.
    pub fn stats(&self) -> ReplayStats {
        ReplayStats {
            index_fallbacks: self.reader.stats().index_fallbacks,
            ..self.stats
        }
    }

    /// The live subscription, once the replay has merged into it.
    pub(crate) fn live_mut(&mut self) -> Option<&mut SubscriberImpl> {
        (self.phase == Phase::Live).then_some(&mut self.live)
    }

    /// The live stream's publisher epoch, once known.
    pub(crate) fn live_epoch(&self) -> Option<u64> {
        self.live.epoch()
    }

    /// Whether the archive's next records are another publisher epoch's
    /// than the live stream's (both known): then the archive holds
    /// nothing of this stream. Having delivered some of them already
    /// (the live epoch was learnt late), the restart is reported as a
    /// live subscriber sees it, and delivery begins again at 1.
    fn other_epoch<F: FnMut(Event<'_>)>(&mut self, f: &mut F) -> Result<bool, ArchiveError> {
        let archived = self.reader.epoch()?;
        self.source_epoch = archived.unwrap_or(0);
        let Some(live) = self.live.epoch() else {
            return Ok(false);
        };
        if archived.map_or(true, |a| a == live) {
            return Ok(false);
        }
        if self.replay_epoch != 0 && self.replay_epoch != live {
            self.replay_epoch = 0;
            self.stats.restarts += 1;
            self.pending.clear();
            self.live_at = 0;
            self.end_at = None;
            self.next = 1;
            f(Event::PublisherRestarted { epoch: live });
        }
        Ok(true)
    }

    pub(crate) fn live_recovery_counters(&self) -> Option<crate::recovery::Counters> {
        self.live.recovery_counters()
    }

    /// Delivers the live messages kept while the replay caught up with
    /// them; then the live stream is checked again before going live.
    fn deliver_pending<F: FnMut(Event<'_>)>(&mut self, f: &mut F) -> usize {
        let mut n = 0;
        while self.pending.first().is_some_and(|p| p.seq == self.next) {
            let p = self.pending.remove(0);
            if self.stats.merge_seq == 0 {
                self.stats.merge_seq = p.seq;
            }
            f(Event::Message(Message {
                seq: p.seq,
                flags: p.flags,
                timestamp: p.timestamp,
                payload: &p.payload,
            }));
            self.next = p.seq + 1;
            n += 1;
        }
        if self.pending.is_empty() {
            self.live_at = 0;
            self.phase = Phase::Joining;
        }
        n
    }

    /// One step of replaying; returns messages delivered, or None when
    /// the archive has nothing more now.
    fn replay_step<F: FnMut(Event<'_>)>(
        &mut self,
        f: &mut F,
    ) -> Result<Option<usize>, ArchiveError> {
        if let Some(last_seq) = self.end_at.filter(|&l| self.next > l) {
            // Everything up to the end came from the archive: now the end.
            self.end_at = None;
            self.live_at = 0;
            self.phase = Phase::Live;
            f(Event::EndOfStream { last_seq });
            return Ok(Some(0));
        }
        if self.live_at != 0 && self.next >= self.live_at {
            if !self.pending.is_empty() {
                return Ok(Some(self.deliver_pending(f)));
            }
            self.live_at = 0;
            self.phase = Phase::Joining;
            return Ok(Some(0));
        }
        if self.reader.position() != self.next {
            // Back from a join that found the live stream ahead: the
            // reader resumes where the delivery stands.
            self.reader.seek(self.next)?;
        }
        let live_at = self.live_at;
        let other = self.other_epoch(f)?;
        if !other && self.replay_epoch == 0 && self.source_epoch != 0 && self.live.epoch().is_none()
        {
            // Nothing replayed yet and the live epoch not known (a
            // datagram subscription learns it from its first datagram):
            // the live stream is tried for a while first, so that an
            // archive of another epoch is recognised before anything of
            // it is delivered. A silent publisher only delays the replay.
            let until = *self
                .epoch_wait
                .get_or_insert_with(|| Instant::now() + self.epoch_wait_for);
            if Instant::now() < until {
                self.phase = Phase::Joining;
                self.exhausted = true;
                return Ok(Some(0));
            }
        }
        let item = match other {
            // Nothing of this epoch there (yet: a recorder seals the old
            // one when it hears the new), as an archive that has nothing.
            true => None,
            false => self.reader.next_item()?,
        };
        match item {
            Some(Item::Message(m)) => {
                self.stalled_since = None;
                self.replay_epoch = self.source_epoch;
                self.next = m.seq + 1;
                self.stats.replayed += 1;
                f(Event::Message(m));
                self.since_probe += 1;
                if live_at == 0 && self.since_probe >= PROBE_EVERY {
                    // Perhaps the live stream can take over already.
                    self.since_probe = 0;
                    self.phase = Phase::Joining;
                }
                Ok(Some(1))
            }
            Some(Item::Gap { from, to }) => {
                self.stalled_since = None;
                self.replay_epoch = self.source_epoch;
                // The part the live stream can deliver is taken from it.
                let to = if live_at > from && live_at < to {
                    live_at
                } else {
                    to
                };
                self.next = to;
                self.stats.replay_gaps += 1;
                f(Event::Gap { from, to });
                Ok(Some(0))
            }
            None if live_at == 0 => {
                self.phase = Phase::Joining;
                self.exhausted = true;
                Ok(Some(0))
            }
            None => {
                // The live stream is ahead of what the archive holds: wait
                // for the recorder, but not for ever.
                let since = *self.stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.stall_timeout {
                    self.stats.stalls += 1;
                    self.stalled_since = None;
                    if live_at > self.next {
                        f(Event::Gap {
                            from: self.next,
                            to: live_at,
                        });
                    }
                    self.next = live_at;
                    self.reader.seek(live_at)?;
                    return Ok(Some(0));
                }
                Ok(None)
            }
        }
    }

    /// One poll of the live stream while joining; returns messages
    /// delivered, or None when it had nothing.
    /// After a publisher restart the archive's range is another epoch's:
    /// nothing more is merged from it, and the new epoch is taken live.
    fn go_live_after_restart(&mut self) {
        self.stats.restarts += 1;
        self.end_at = None;
        self.live_at = 0;
        self.pending.clear();
        self.reader.pause();
        self.phase = Phase::Live;
    }

    fn join_step<F: FnMut(Event<'_>)>(
        &mut self,
        max: usize,
        f: &mut F,
    ) -> crate::Result<Option<usize>> {
        let mut cur = self.next;
        let mut live = self.phase == Phase::Live;
        let mut delivered = 0usize;
        let mut heard = false;
        let mut ahead = false;
        let mut live_at = self.live_at;
        let mut pending = Vec::new();
        let mut skipped = 0u64;
        let mut end = None;
        let mut restarted = false;
        // A datagram subscription learns its epoch from its first
        // datagram: until then its messages are kept, not merged, in case
        // they are another epoch's than the archive's.
        let hold = !live && self.live.epoch().is_none();
        {
            let mut step = |e: Event<'_>| {
                heard = true;
                if live {
                    // In order from here: the live stream as it comes,
                    // unless it loses messages the archive may hold.
                    match e {
                        Event::Overrun { from, to } | Event::Gap { from, to }
                            if from <= cur && to > cur =>
                        {
                            live = false;
                            live_at = to;
                            ahead = true;
                        }
                        Event::Message(m) => {
                            cur = m.seq + 1;
                            delivered += 1;
                            f(Event::Message(m));
                        }
                        other => f(other),
                    }
                    return;
                }
                match e {
                    Event::Message(m) if ahead || hold => pending.push(Pending::of(&m)),
                    Event::Message(m) if m.seq < cur => skipped += 1,
                    Event::Message(m) if m.seq == cur => {
                        f(Event::Message(m));
                        cur += 1;
                        delivered += 1;
                        live = true;
                    }
                    Event::Message(m) => {
                        // Past the next one needed: kept until the archive
                        // reaches it.
                        pending.push(Pending::of(&m));
                        live_at = m.seq;
                        ahead = true;
                    }
                    Event::Overrun { to, .. } | Event::Gap { to, .. } => {
                        if to > cur {
                            // The archive holds what the live stream lost.
                            pending.clear();
                            live_at = to;
                            ahead = true;
                        }
                    }
                    // The stream ended before the merge: what is left up
                    // to its end comes from the archive, then the end.
                    Event::EndOfStream { last_seq } if last_seq >= cur => end = Some(last_seq),
                    // A new epoch numbers from 1 again: its sequences are
                    // not the range being merged. Reported as the live
                    // path reports it, and the new epoch taken live.
                    Event::PublisherRestarted { epoch } => {
                        pending.clear();
                        ahead = false;
                        live = true;
                        restarted = true;
                        cur = 1;
                        f(Event::PublisherRestarted { epoch });
                    }
                    // Not about the range being merged: passed on.
                    other => f(other),
                }
            };
            // A `dyn` callback, so that the live end's poll is not
            // instantiated again for every caller's closure.
            let step: &mut dyn FnMut(Event<'_>) = &mut step;
            match &mut self.live {
                SubscriberImpl::Shm(t) => t.poll(max, &mut &mut *step)?,
                SubscriberImpl::Udp(t) => t.poll(max, &mut &mut *step)?,
                SubscriberImpl::Ud(t) => t.poll(max, &mut &mut *step)?,
                SubscriberImpl::Replay(_) => {
                    return Err(crate::Error::Protocol {
                        channel: "archive replay".into(),
                        peer: "this process".into(),
                        reason: "a replay cannot be fed by another replay".into(),
                    })
                }
            };
        }
        self.stats.live_skipped += skipped;
        let first = self.next;
        self.next = cur;
        if restarted {
            self.go_live_after_restart();
            return Ok(Some(delivered));
        }
        if hold && !ahead && !pending.is_empty() {
            if let Some(live_epoch) = self.live.epoch() {
                if self.replay_epoch != 0 && self.replay_epoch != live_epoch {
                    // What was replayed is another epoch's: the restart,
                    // then the live stream as it comes.
                    self.replay_epoch = 0;
                    f(Event::PublisherRestarted { epoch: live_epoch });
                    let mut at = 1;
                    for p in pending {
                        if p.seq > at {
                            f(Event::Gap {
                                from: at,
                                to: p.seq,
                            });
                        }
                        f(Event::Message(Message {
                            seq: p.seq,
                            flags: p.flags,
                            timestamp: p.timestamp,
                            payload: &p.payload,
                        }));
                        delivered += 1;
                        at = p.seq + 1;
                    }
                    self.next = at;
                    self.go_live_after_restart();
                    return Ok(Some(delivered));
                }
            }
            // The same epoch: merged by the rule, from the archive up to
            // the first kept message.
            let before = pending.len();
            pending.retain(|p| p.seq >= cur);
            self.stats.live_skipped += (before - pending.len()) as u64;
            if let Some(p) = pending.first() {
                live_at = p.seq;
                ahead = true;
            }
        }
        if let Some(last_seq) = end {
            self.end_at = Some(last_seq);
            self.live_at = last_seq.saturating_add(1);
            self.pending.clear();
            self.phase = Phase::Replay;
            return Ok(Some(delivered));
        }
        if ahead {
            self.stats.rejoins += 1;
            self.live_at = live_at;
            self.pending = pending;
            self.phase = Phase::Replay;
        } else if live {
            if self.phase != Phase::Live {
                self.reader.pause();
            }
            self.phase = Phase::Live;
            if self.stats.merge_seq == 0 {
                self.stats.merge_seq = first;
            }
        } else if !heard {
            // Nothing live yet: back to the archive.
            self.phase = Phase::Replay;
            return Ok(None);
        }
        Ok(Some(delivered))
    }
}

impl Pending {
    fn of(m: &Message<'_>) -> Pending {
        Pending {
            seq: m.seq,
            flags: m.flags,
            timestamp: m.timestamp,
            payload: m.payload.to_vec(),
        }
    }
}

impl StreamReceive for ReplaySubscriber {
    fn poll<F: FnMut(Event<'_>)>(&mut self, max: usize, f: &mut F) -> crate::Result<usize> {
        let mut n = 0;
        // Bounds the work of one call (skipped live messages and gaps
        // deliver nothing but cost a step).
        let mut steps = 0;
        while n < max && steps < 4 * max {
            steps += 1;
            let r = match self.phase {
                Phase::Live => match self.join_step(max - n, f)? {
                    // The live stream lost messages: back to the archive.
                    Some(k) if self.phase == Phase::Replay => Some(k),
                    Some(k) => return Ok(n + k),
                    None => {
                        self.phase = Phase::Live;
                        None
                    }
                },
                Phase::Replay => {
                    self.exhausted = false;
                    self.replay_step(f)?
                }
                Phase::Joining => match self.join_step(max - n, f)? {
                    // Neither has anything now.
                    None if self.exhausted => None,
                    None => Some(0),
                    some => some,
                },
            };
            match r {
                Some(k) => n += k,
                None => break,
            }
        }
        Ok(n)
    }
}
