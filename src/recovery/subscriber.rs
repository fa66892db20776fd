//! The subscriber's side of a datagram stream: sequencing, gap detection,
//! retransmit requests, reordering, A/B line arbitration, reassembly and
//! liveness, without sockets or a clock.
//!
//! A driver owns a [`SubscriberCore`] and:
//! - hands every datagram received on the stream's multicast group to
//!   [`on_datagram`](SubscriberCore::on_datagram) with the [`Line`] it came
//!   on, and every datagram received on its unicast socket (the
//!   publisher's replies) likewise, with either line;
//! - calls [`tick`](SubscriberCore::tick) regularly (retry timers, the
//!   publisher's liveness);
//! - sends each datagram the `request` callback is given to the publisher's
//!   unicast request address.
//!
//! Events reach the `deliver` callback in stream order. Every sequence
//! number from the first delivered on is covered by exactly one
//! [`Event::Message`] or one [`Event::Gap`] range.
//!
//! # Recovery
//! A sequence is *missing* once something later has been seen: a later
//! message on either line, or a heartbeat or end-of-stream marker
//! announcing it. It is requested when every live line has been past it for
//! at least `nak_delay` (so a message merely reordered within a line, or
//! still on its way on the slower line, is never requested), or at the
//! latest `line_grace` after it was noticed (a line that lags that much is
//! not waited for). A line is live while it has delivered something within
//! `line_timeout`. Adjacent missing sequences go in one request. A request
//! unanswered after `request_timeout` is repeated, up to `max_retries`
//! times; then, or when the publisher replies that the range is no longer
//! retained, the sequences are given up and reported as a gap once every
//! earlier message has been delivered.
//!
//! # Trust
//! Nothing in a datagram is believed before it is checked (docs/SECURITY.md):
//! with a key, its MAC; then its form; then its source (each line is bound
//! to one, see [`SubscriberCore::on_datagram_from`]); then its plausibility.
//! A new epoch, or a sequence more than `max_jump` ahead (or beyond the
//! reorder window), needs `confirm` consecutive live datagrams from the
//! source that agree. A heartbeat announcing messages not seen, and an end
//! of stream, need the next live datagram to repeat the claim (the
//! publisher sends each twice in a row, so a genuine one is believed at
//! its second copy). A
//! not-available reply counts only for sequences asked for, and only the
//! second time (the first makes the request go out again at once). Each
//! refusal is a [`DropReason`] with its own counter.
//!
//! # Reordering
//! A message at the delivery point is handed to the application straight
//! from the datagram, without a copy. One that arrives early waits in the
//! reorder window (`reorder_window` sequences, each with room for one
//! unfragmented message). A message more than the window ahead of the
//! delivery point moves it forward: whatever is missing below the new
//! window is reported as a gap.

use std::time::Duration;

use super::counters::Counters;
use super::frame::{
    self, DropReason, Fragment, Frame, Kind, Limits, DATAGRAM_HEADER_LEN, MAX_DATAGRAM,
    MIN_DATAGRAM,
};
use super::mac::{Key, Mac};
use super::packer::Packer;
use super::reassembly::{Acquired, Added, Reassembler};
use super::reorder::{ReorderWindow, State, INLINE, NEVER};
use super::rng::Rng;
use crate::config::LateJoin;
use crate::error::ConfigError;
use crate::message::{Event, Message};
use crate::wire::Header;

/// Which of two redundant feeds a datagram came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Line {
    /// The first feed (the only one without redundancy).
    A,
    /// The second feed.
    B,
}

impl Line {
    /// 0 for A, 1 for B.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Settings of a [`SubscriberCore`]. Memory: about `reorder_window` times
/// the smaller of `max_message` and `max_datagram` bytes, plus
/// `reassembly_buffers` times `max_message`, all allocated at construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberConfig {
    /// The stream to follow; datagrams of others are dropped.
    pub stream_id: u32,
    /// Largest message accepted.
    pub max_message: usize,
    /// Largest datagram accepted; the publisher's `max_datagram`.
    pub max_datagram: usize,
    /// Sequences the reorder window spans; a power of two.
    pub reorder_window: usize,
    /// Fragmented messages that can be in reassembly at once.
    pub reassembly_buffers: usize,
    /// Where to start when joining a running stream: at the first message
    /// seen, or as far back as the publisher retains (at most
    /// `reorder_window / 2` messages before the first one seen). After a
    /// publisher restart the subscriber always starts from the new
    /// incarnation's oldest retained message.
    pub late_join: LateJoin,
    /// How long every live line must have been past a missing message
    /// before it is requested; covers reordering within a line.
    pub nak_delay: Duration,
    /// Longest wait for the other line to catch up before requesting;
    /// covers the skew between lines.
    pub line_grace: Duration,
    /// A line silent for this long is not waited for.
    pub line_timeout: Duration,
    /// Time after a request before it is repeated.
    pub request_timeout: Duration,
    /// Repeats of an unanswered request before its messages are given up.
    pub max_retries: u32,
    /// Silence after which the publisher is reported down.
    pub publisher_timeout: Duration,
    /// Largest step ahead of the highest sequence seen that a datagram is
    /// believed at once; a larger one (or one beyond the reorder window,
    /// which would force a gap) needs `confirm` consecutive datagrams that
    /// agree.
    pub max_jump: u64,
    /// Consecutive datagrams from one source that must agree before a new
    /// epoch, a jump beyond `max_jump` or a change of source is believed.
    /// 1 believes the first one.
    pub confirm: u32,
    /// Stream key: when set, every datagram must carry a MAC made with it
    /// (see [`mac`](super::mac)), checked before anything else.
    pub key: Option<Key>,
    /// Longest random wait added to `nak_delay` before a newly missing
    /// range is requested, and to `request_timeout` before a repeat; 0
    /// adds none. Subscribers that lost the
    /// same datagram draw different waits, the first request's repair
    /// (sent to the group, see [`Repair`](super::Repair)) reaches the
    /// others before their waits end, and they never ask (NAK
    /// suppression).
    pub nak_backoff: Duration,
    /// Subscribers expected on the stream: shapes the wait's distribution
    /// (see [`nak_wait`]).
    pub nak_group_size: u32,
    /// Seed of the wait's random generator; subscribers should differ
    /// (drivers mix in the process id and the time).
    pub nak_seed: u64,
}

/// The random wait before a request, for a uniform `u` in [0, 1): the
/// truncated exponential distribution of Nonnenmacher and Biersack
/// ("Optimal multicast feedback", also Aeron's
/// OptimalMulticastDelayGenerator), `T/λ · ln(1 + u·(e^λ − 1))` with
/// `λ = ln(group_size) + 1`. Most subscribers wait close to `T`, a few
/// wait little, so the first request comes early while the expected
/// number of requests sent before its repair arrives stays small as the
/// group grows.
pub fn nak_wait(backoff_ns: u64, group_size: u32, u: f64) -> u64 {
    if backoff_ns == 0 {
        return 0;
    }
    let lambda = f64::from(group_size.max(1)).ln() + 1.0;
    let t = backoff_ns as f64 / lambda * (u.clamp(0.0, 1.0) * lambda.exp_m1()).ln_1p();
    (t as u64).min(backoff_ns)
}

impl SubscriberConfig {
    /// Defaults for stream `stream_id`: 1472-byte datagrams, 64 KiB
    /// messages, a 4096-message reorder window, 4 reassembly buffers, join
    /// at the next message, nak delay 50 µs, line grace 1 ms, line timeout
    /// 100 ms, request timeout 5 ms, 3 retries, publisher timeout 1 s.
    pub fn new(stream_id: u32) -> SubscriberConfig {
        SubscriberConfig {
            stream_id,
            max_message: 64 * 1024,
            max_datagram: 1472,
            reorder_window: 4096,
            reassembly_buffers: 4,
            late_join: LateJoin::Next,
            nak_delay: Duration::from_micros(50),
            line_grace: Duration::from_millis(1),
            line_timeout: Duration::from_millis(100),
            request_timeout: Duration::from_millis(5),
            max_retries: 3,
            publisher_timeout: Duration::from_secs(1),
            max_jump: 4096,
            confirm: 3,
            key: None,
            nak_backoff: Duration::ZERO,
            nak_group_size: 1,
            nak_seed: 1,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let err = |key: &str, msg: String| Err(ConfigError::new("<subscriber>", key, msg));
        if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&self.max_datagram) {
            return err(
                "max_datagram",
                format!(
                    "{} is out of range: allowed {MIN_DATAGRAM} to {MAX_DATAGRAM} bytes",
                    self.max_datagram
                ),
            );
        }
        if self.max_message == 0 || self.max_message > u32::MAX as usize {
            return err(
                "max_message",
                format!("{} is out of range", self.max_message),
            );
        }
        if !self.reorder_window.is_power_of_two() || self.reorder_window < 2 {
            return err(
                "reorder_window",
                format!(
                    "{} is not allowed: a power of two, at least 2",
                    self.reorder_window
                ),
            );
        }
        if self.confirm == 0 {
            return err("confirm", "0 is not allowed: at least 1".into());
        }
        if self.reassembly_buffers == 0 {
            return err("reassembly_buffers", "0 is not allowed: at least 1".into());
        }
        if self.publisher_timeout.is_zero() || self.request_timeout.is_zero() {
            return err(
                "timeouts",
                "request_timeout and publisher_timeout must not be 0".into(),
            );
        }
        Ok(())
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

#[derive(Debug, Clone, Copy, Default)]
struct LineState {
    /// Delivered something in this epoch.
    heard: bool,
    last_heard: u64,
    /// Every sequence up to this one has been sent on the line before the
    /// last datagram it delivered.
    past: u64,
}

/// A run of given-up sequences, reported as one gap (or, when they predate
/// the join, skipped) once the run ends.
#[derive(Debug, Clone, Copy)]
struct Run {
    from: u64,
    to: u64,
    silent: bool,
}

/// Consecutive suspect datagrams (a new epoch, a far jump, another
/// source) that agree with each other.
#[derive(Debug, Clone, Copy, Default)]
struct Streak {
    source: u64,
    epoch: u64,
    top: u64,
    n: u32,
}

/// The highest sequence a datagram shows exists.
fn top_of(frame: &Frame<'_>) -> u64 {
    match *frame {
        Frame::Messages {
            first_seq,
            messages,
            ..
        } => first_seq + messages.len() as u64 - 1,
        Frame::Fragment { header, .. } => header.seq,
        Frame::Heartbeat { latest, .. } => latest,
        Frame::EndOfStream { last_seq, .. } => last_seq,
        Frame::Request { from, .. }
        | Frame::NotAvailable { from, .. }
        | Frame::Throttled { from, .. } => from,
    }
}

/// The subscriber's protocol state. One thread owns it: every method takes
/// `&mut self`, and nothing is shared.
#[derive(Debug)]
pub struct SubscriberCore {
    limits: Limits,
    late_join: LateJoin,
    nak_ns: u64,
    grace_ns: u64,
    line_timeout_ns: u64,
    request_timeout_ns: u64,
    max_retries: u32,
    publisher_timeout_ns: u64,
    max_jump: u64,
    confirm: u32,
    mac: Option<Mac>,

    window: ReorderWindow,
    reassembly: Reassembler,
    counters: Counters,
    request_buf: [u8; DATAGRAM_HEADER_LEN],

    /// The incarnation followed; `None` until the first datagram.
    epoch: Option<u64>,
    /// Next sequence to deliver. Invariant: `next <= high + 1` and
    /// `high < next + window capacity`.
    next: u64,
    /// Highest sequence known to exist.
    high: u64,
    /// First sequence seen live when this epoch was joined from its oldest
    /// message; below it, not-retained messages are skipped, not lost,
    /// until something has been reported.
    join_until: u64,
    /// A message or a gap has been delivered in this epoch.
    reported: bool,
    lines: [LineState; 2],
    last_heard: u64,
    down_reported: bool,
    end_of_stream: Option<u64>,
    end_reported: bool,
    /// Earliest time a missing sequence may need a request or a verdict.
    next_deadline: u64,
    /// Per line, the source the subscriber takes that line's datagrams
    /// from: the first one seen, or the one a confirmed change moved to.
    bound: [Option<u64>; 2],
    /// Suspect datagrams seen in a row.
    streak: Streak,
    /// The last heartbeat or end-of-stream claim not yet believed: (is end,
    /// sequence).
    claim: Option<(bool, u64)>,
    /// Per line, bound by configuration: never rebound.
    pinned: [bool; 2],
    nak_backoff_ns: u64,
    nak_group_size: u32,
    /// Draws the NAK waits.
    rng: Rng,
}

impl SubscriberCore {
    /// Allocates every buffer the subscriber will use.
    pub fn new(cfg: &SubscriberConfig) -> Result<SubscriberCore, ConfigError> {
        cfg.validate()?;
        Ok(SubscriberCore {
            limits: Limits {
                stream_id: cfg.stream_id,
                max_datagram: cfg.max_datagram,
                max_message: cfg.max_message,
            },
            late_join: cfg.late_join,
            nak_ns: ns(cfg.nak_delay),
            grace_ns: ns(cfg.line_grace),
            line_timeout_ns: ns(cfg.line_timeout),
            request_timeout_ns: ns(cfg.request_timeout),
            max_retries: cfg.max_retries,
            publisher_timeout_ns: ns(cfg.publisher_timeout),
            max_jump: cfg.max_jump,
            confirm: cfg.confirm,
            mac: cfg.key.map(|k| Mac::new(k, 0)),
            nak_backoff_ns: ns(cfg.nak_backoff),
            nak_group_size: cfg.nak_group_size,
            rng: Rng::from_state(cfg.nak_seed),
            // A slot holds an unfragmented message, and decoding refuses
            // any longer than max_message.
            window: ReorderWindow::new(
                cfg.reorder_window,
                Packer::max_unfragmented(cfg.max_datagram).min(cfg.max_message),
            ),
            reassembly: Reassembler::new(cfg.reassembly_buffers, cfg.max_message),
            counters: Counters::default(),
            request_buf: [0; DATAGRAM_HEADER_LEN],
            epoch: None,
            next: 0,
            high: 0,
            join_until: 0,
            reported: false,
            lines: [LineState::default(); 2],
            last_heard: 0,
            down_reported: false,
            end_of_stream: None,
            end_reported: false,
            next_deadline: NEVER,
            bound: [None; 2],
            streak: Streak::default(),
            claim: None,
            pinned: [false; 2],
        })
    }

    /// The source line `line` is bound to, once it has heard one.
    pub fn bound_source(&self, line: Line) -> Option<u64> {
        self.bound[line.index()]
    }

    /// Binds line `line` to `source` before anything is heard (a
    /// configured publisher address): datagrams from any other source are
    /// then dropped, and no change of source is ever followed.
    pub fn bind(&mut self, line: Line, source: u64) {
        self.bound[line.index()] = Some(source);
        self.pinned[line.index()] = true;
    }

    /// Counts a datagram the driver dropped before the core saw it (a
    /// configured source that does not match, a bad MAC).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.counters.datagrams_received += 1;
        self.counters.drops.record(reason);
    }

    /// What the subscriber has done so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Messages delivered so far ([`Counters::messages_delivered`]
    /// without copying every counter).
    #[inline]
    pub fn messages_delivered(&self) -> u64 {
        self.counters.messages_delivered
    }

    /// Throttled notices believed so far ([`Counters::throttled`]).
    #[inline]
    pub fn throttled(&self) -> u64 {
        self.counters.throttled
    }

    /// The publisher incarnation followed, once one has been heard.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// Sequence the next delivered message will have (0 before the first
    /// datagram).
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Sequences known to exist but neither delivered nor given up yet.
    pub fn outstanding(&self) -> u64 {
        match self.epoch {
            Some(_) => (self.high + 1).saturating_sub(self.next),
            None => 0,
        }
    }

    /// Handles one received datagram. Events go to `deliver` in stream
    /// order; retransmit requests that are due go to `request`. Returns why
    /// the datagram (or one of its fragments) was dropped, if it was; the
    /// reason is counted either way.
    pub fn on_datagram<D, R>(
        &mut self,
        line: Line,
        datagram: &[u8],
        now: u64,
        deliver: D,
        request: R,
    ) -> Result<(), DropReason>
    where
        D: FnMut(Event<'_>),
        R: FnMut(&[u8]),
    {
        self.on_datagram_from(line, 0, datagram, now, deliver, request)
    }

    /// [`on_datagram`](Self::on_datagram) for a datagram from `source`
    /// (any value that identifies the sender: a hash of its address and
    /// port, of its GID and QPN). Each line binds to the first source it
    /// hears; datagrams from any other are dropped
    /// ([`DropReason::ForeignSource`]) unless, once the bound source has
    /// been silent for `publisher_timeout`, `confirm` consecutive live
    /// datagrams from one new source agree, which is taken as a restart of
    /// the publisher.
    pub fn on_datagram_from<D, R>(
        &mut self,
        line: Line,
        source: u64,
        datagram: &[u8],
        now: u64,
        mut deliver: D,
        mut request: R,
    ) -> Result<(), DropReason>
    where
        D: FnMut(Event<'_>),
        R: FnMut(&[u8]),
    {
        self.counters.datagrams_received += 1;
        let result = self.handle(line, source, datagram, now, &mut deliver);
        if let Err(r) = result {
            self.counters.drops.record(r);
        }
        if now >= self.next_deadline {
            self.service(now, &mut deliver, &mut request);
        }
        result
    }

    /// The earliest time [`tick`](Self::tick) has a request to send or a
    /// loss to report (`u64::MAX` when none is pending); a driver that
    /// sleeps may sleep until then. Silence from the publisher is checked
    /// at every tick regardless.
    pub fn next_deadline(&self) -> u64 {
        self.next_deadline
    }

    /// The earliest time [`tick`](Self::tick) has anything to do: a
    /// request, a loss to report, or the publisher's silence to report
    /// (`u64::MAX` when nothing can come due). An idle driver that sleeps
    /// past [`next_deadline`](Self::next_deadline) sleeps until then at
    /// most.
    pub fn wake_deadline(&self) -> u64 {
        let silence = if self.epoch.is_none() || self.down_reported || self.end_reported {
            NEVER
        } else {
            self.last_heard.saturating_add(self.publisher_timeout_ns)
        };
        self.next_deadline.min(silence)
    }

    /// Call regularly: sends requests and repeats that are due, gives up
    /// messages whose retries ran out, and reports a silent publisher
    /// (once per silence).
    pub fn tick<D, R>(&mut self, now: u64, mut deliver: D, mut request: R)
    where
        D: FnMut(Event<'_>),
        R: FnMut(&[u8]),
    {
        if self.epoch.is_none() {
            return;
        }
        if now >= self.next_deadline {
            self.service(now, &mut deliver, &mut request);
        }
        if !self.down_reported
            && !self.end_reported
            && now.saturating_sub(self.last_heard) >= self.publisher_timeout_ns
        {
            self.down_reported = true;
            self.counters.publisher_down += 1;
            deliver(Event::PublisherDown {
                last_seq: self.high,
            });
        }
    }

    /// Whether `top` is ahead of what this epoch has shown by more than
    /// the subscriber believes at once.
    fn far(&self, top: u64) -> bool {
        top > self.high.saturating_add(self.max_jump)
            || top >= self.next.saturating_add(self.window.capacity())
    }

    /// Counts a suspect live datagram; true once `confirm` in a row from
    /// `source` agree on the epoch and roughly on the position.
    fn confirmed(&mut self, source: u64, epoch: u64, top: u64) -> bool {
        let s = &mut self.streak;
        let agrees = s.n > 0
            && s.source == source
            && s.epoch == epoch
            && top.saturating_add(self.window.capacity()) >= s.top
            && top <= s.top.saturating_add(self.max_jump);
        if agrees {
            s.n += 1;
            s.top = s.top.max(top);
        } else {
            *s = Streak {
                source,
                epoch,
                top,
                n: 1,
            };
        }
        if s.n >= self.confirm {
            s.n = 0;
            true
        } else {
            false
        }
    }

    fn handle<D: FnMut(Event<'_>)>(
        &mut self,
        line: Line,
        source: u64,
        datagram: &[u8],
        now: u64,
        deliver: &mut D,
    ) -> Result<(), DropReason> {
        if let Some(mac) = &self.mac {
            mac.verify(datagram)?;
        }
        let d = frame::decode(datagram, &self.limits)?;
        if let Frame::Messages {
            retransmit: false,
            first_seq,
            messages,
        } = d.frame
        {
            let top = first_seq + messages.len() as u64 - 1;
            if self.in_order(line, source, d.epoch, first_seq, top) {
                self.deliver_in_order(line, messages, top, now, deliver);
                return Ok(());
            }
        }
        self.handle_decoded(line, source, d, now, deliver)
    }

    /// Whether live messages `first..=top` are the next ones expected,
    /// from the bound source, in the followed epoch, with nothing
    /// outstanding: the case of a healthy stream, where the general rules
    /// of [`handle_decoded`](Self::handle_decoded) reduce to delivering
    /// them.
    #[inline]
    fn in_order(&self, line: Line, source: u64, epoch: u64, first: u64, top: u64) -> bool {
        self.bound[line.index()] == Some(source)
            && self.epoch == Some(epoch)
            && first == self.next
            && self.high.wrapping_add(1) == first
            && self.end_of_stream.is_none()
            && !self.far(top)
    }

    /// What [`handle_decoded`](Self::handle_decoded) does with messages
    /// that pass [`in_order`](Self::in_order), with each step's outcome
    /// known: no source or epoch change, no claim, no hole to mark or fill,
    /// nothing held to deliver after them; counters move once per datagram.
    #[inline]
    fn deliver_in_order<D: FnMut(Event<'_>)>(
        &mut self,
        line: Line,
        messages: frame::Messages<'_>,
        top: u64,
        now: u64,
        deliver: &mut D,
    ) {
        self.streak.n = 0;
        self.claim = None;
        self.last_heard = now;
        self.down_reported = false;
        let l = &mut self.lines[line.index()];
        l.heard = true;
        l.last_heard = now;
        l.past = l.past.max(top);
        self.reported = true;
        let n = top + 1 - self.next;
        self.next = top + 1;
        self.high = top;
        self.counters.messages_delivered += n;
        match line {
            Line::A => self.counters.wins_a += n,
            Line::B => self.counters.wins_b += n,
        }
        for (h, payload) in messages {
            deliver(Event::Message(Message {
                seq: h.seq,
                flags: h.flags,
                timestamp: h.timestamp,
                payload,
            }));
        }
    }

    /// Every rule, for any datagram: sources, epochs, claims, holes,
    /// replies, fragments, control.
    #[inline(never)]
    fn handle_decoded<D: FnMut(Event<'_>)>(
        &mut self,
        line: Line,
        source: u64,
        d: frame::Datagram<'_>,
        now: u64,
        deliver: &mut D,
    ) -> Result<(), DropReason> {
        if let Frame::Request { .. } = d.frame {
            return Err(DropReason::UnexpectedKind);
        }
        let live = d.frame.is_live();
        let top = top_of(&d.frame);
        let li = line.index();
        let foreign = matches!(self.bound[li], Some(b) if b != source);
        if foreign {
            // Replies come from the bound source only; live datagrams from
            // another one count towards a change of source, which must be
            // confirmed, is possible only once the bound source has been
            // silent for the publisher timeout (a live publisher is never
            // displaced), and is taken as a restart.
            let silent = now.saturating_sub(self.last_heard) >= self.publisher_timeout_ns;
            if !live
                || self.pinned[li]
                || !self.confirmed(source, d.epoch, top)
                || (self.epoch.is_some() && !silent)
            {
                return Err(DropReason::ForeignSource);
            }
            self.bound[li] = Some(source);
            self.restart(d.epoch, &d.frame, now, deliver);
        } else {
            // Anything valid from the bound source breaks another
            // source's run.
            if self.streak.source != source {
                self.streak.n = 0;
            }
            match self.epoch {
                Some(e) if d.epoch == e => {
                    if self.far(top) {
                        if !live || !self.confirmed(source, d.epoch, top) {
                            return Err(if live {
                                DropReason::ImplausibleJump
                            } else {
                                DropReason::Unsolicited
                            });
                        }
                    } else if live {
                        self.streak.n = 0;
                    }
                }
                Some(e) if d.epoch < e => return Err(DropReason::OldEpoch),
                _ if !live => return Err(DropReason::Unsolicited),
                Some(_) => {
                    if !self.confirmed(source, d.epoch, top) {
                        return Err(DropReason::ImplausibleEpoch);
                    }
                    self.restart(d.epoch, &d.frame, now, deliver);
                }
                None => {
                    let from_oldest = self.late_join == LateJoin::Oldest;
                    self.start(d.epoch, &d.frame, now, from_oldest);
                }
            }
            self.bound[li] = Some(source);
        }
        // A reply for sequences never asked for (beyond the highest known)
        // is not believed.
        if !live && top > self.high {
            return Err(DropReason::Unsolicited);
        }
        if let Frame::EndOfStream { last_seq, .. } = d.frame {
            // A publisher never takes back a message it announced.
            if last_seq < self.high {
                return Err(DropReason::BadSequence);
            }
        }
        if let Some(last) = self.end_of_stream {
            // Nothing follows the end of a stream but repeats of the marker.
            let beyond = match d.frame {
                Frame::Messages {
                    first_seq,
                    messages,
                    ..
                } => first_seq + messages.len() as u64 - 1 > last,
                Frame::Fragment { header, .. } => header.seq > last,
                Frame::Heartbeat { latest, .. } => latest > last,
                Frame::EndOfStream { last_seq, .. } => last_seq != last,
                Frame::Request { .. } | Frame::NotAvailable { .. } | Frame::Throttled { .. } => {
                    false
                }
            };
            if beyond {
                return Err(DropReason::BadSequence);
            }
        }
        self.last_heard = now;
        self.down_reported = false;
        // A heartbeat or end-of-stream marker that announces messages not
        // seen (or ends the stream) is believed when the next claim agrees:
        // the publisher repeats both, a forger must send two in a row.
        let claim = match d.frame {
            Frame::Heartbeat { latest, .. } if latest > self.high => Some((false, latest)),
            Frame::EndOfStream { last_seq, .. } if self.end_of_stream.is_none() => {
                Some((true, last_seq))
            }
            _ => None,
        };
        if claim.is_none() && live {
            // Claims must follow each other: any other live datagram
            // between breaks a pair.
            self.claim = None;
        }
        if let Some(c) = claim {
            if self.claim != Some(c) && self.confirm > 1 {
                self.claim = Some(c);
                if !c.0 {
                    self.counters.heartbeats_received += 1;
                }
                return Err(DropReason::UnconfirmedClaim);
            }
            self.claim = None;
        }
        if live {
            let l = &mut self.lines[line.index()];
            l.heard = true;
            l.last_heard = now;
        }
        let mut result = Ok(());
        match d.frame {
            Frame::Messages {
                retransmit,
                messages,
                ..
            } => {
                let mut last = 0;
                for (h, payload) in messages {
                    last = h.seq;
                    self.accept(line, retransmit, &h, payload, now, deliver);
                }
                if !retransmit {
                    self.line_past(line, last, now);
                }
            }
            Frame::Fragment {
                retransmit,
                header,
                fragment,
                bytes,
            } => {
                result =
                    self.accept_fragment(line, retransmit, &header, fragment, bytes, now, deliver);
                if !retransmit {
                    // A line is past a fragmented message once it has sent
                    // the last fragment (fragments go out in order).
                    let done = fragment.index + 1 == fragment.count;
                    let past = if done { header.seq } else { header.seq - 1 };
                    self.line_past(line, past, now);
                }
            }
            Frame::Heartbeat { latest, .. } => {
                self.counters.heartbeats_received += 1;
                self.learn_high(latest, now, deliver);
                self.line_past(line, latest, now);
            }
            Frame::EndOfStream { last_seq, .. } => {
                self.learn_high(last_seq, now, deliver);
                self.line_past(line, last_seq, now);
                self.end_of_stream = Some(last_seq);
            }
            Frame::NotAvailable { from, count } => {
                self.counters.not_available_received += 1;
                // Believed for sequences asked for that the publisher said
                // were gone once before: a forged notice alone never turns
                // a hole into a loss. The first one has them asked for
                // again at once.
                let last = (from + count - 1).min(self.high);
                let mut believed = false;
                for s in from.max(self.next)..=last {
                    let slot = self.window.slot_mut(s);
                    if slot.state != State::Missing || slot.tries == 0 {
                        continue;
                    }
                    if slot.not_available || self.confirm == 1 {
                        slot.state = State::NotRetained;
                        believed = true;
                    } else {
                        slot.not_available = true;
                        // Due at once (see `service`).
                        slot.last_request = NEVER;
                        self.next_deadline = now;
                    }
                }
                if !believed {
                    result = Err(DropReason::UnconfirmedNotAvailable);
                }
            }
            Frame::Throttled { from, count } => {
                // Believed for messages this subscriber asked for and
                // still misses; it changes nothing but the count (the
                // driver logs it): the subscriber keeps asking at its
                // usual pace and gives up only after its retries, so a
                // forged notice can neither end nor stall recovery.
                let last = (from + count - 1).min(self.high);
                let asked = (from.max(self.next)..=last).any(|s| {
                    let slot = self.window.slot(s);
                    slot.state == State::Missing && slot.tries > 0
                });
                if asked {
                    self.counters.throttled += 1;
                } else {
                    result = Err(DropReason::Unsolicited);
                }
            }
            Frame::Request { .. } => {}
        }
        self.advance(0, deliver);
        if let Some(last) = self.end_of_stream {
            if !self.end_reported && self.next > last {
                self.end_reported = true;
                deliver(Event::EndOfStream { last_seq: last });
            }
        }
        result
    }

    /// Settles the incarnation followed and begins following `epoch`.
    fn restart<D: FnMut(Event<'_>)>(
        &mut self,
        epoch: u64,
        frame: &Frame<'_>,
        now: u64,
        deliver: &mut D,
    ) {
        // Whatever is known of the old incarnation is settled first, so
        // its losses are reported, not forgotten.
        if self.epoch.is_some() {
            let high = self.high;
            self.advance(high + 1, deliver);
        }
        self.counters.restarts += 1;
        deliver(Event::PublisherRestarted { epoch });
        self.start(epoch, frame, now, true);
    }

    /// Begins following incarnation `epoch`, whose first datagram seen is
    /// `frame`. From the oldest: the messages before it (as far back as the
    /// window reaches) are marked missing, so they are requested.
    fn start(&mut self, epoch: u64, frame: &Frame<'_>, now: u64, from_oldest: bool) {
        self.epoch = Some(epoch);
        self.reported = false;
        self.lines = [LineState::default(); 2];
        self.down_reported = false;
        self.end_of_stream = None;
        self.end_reported = false;
        self.next_deadline = NEVER;
        self.claim = None;
        self.streak.n = 0;
        self.reassembly.clear();
        // Half the window for history, so that live messages arriving
        // while it is fetched still fit beside it.
        let back = self.window.capacity() / 2;
        // `first`: the first sequence this datagram shows; `oldest`: the
        // first the publisher says it retains.
        let (first, oldest) = match *frame {
            Frame::Messages { first_seq, .. } => (first_seq, 1),
            Frame::Fragment { header, .. } => (header.seq, 1),
            Frame::Heartbeat { latest, oldest } => (latest + 1, oldest),
            Frame::EndOfStream { last_seq, oldest } => (last_seq + 1, oldest),
            Frame::Request { .. } | Frame::NotAvailable { .. } | Frame::Throttled { .. } => (1, 1),
        };
        self.next = if from_oldest {
            first.saturating_sub(back).max(oldest).max(1)
        } else {
            first
        };
        self.high = self.next - 1;
        self.join_until = first;
        if self.next < first {
            self.mark_missing(self.next, first - 1, now);
            self.high = first - 1;
        }
    }

    /// Records `from..=to` as missing since `now`, to be requested after
    /// the NAK delay and a random wait drawn for the range.
    fn mark_missing(&mut self, from: u64, to: u64, now: u64) {
        let noticed = now.saturating_add(self.random_wait());
        for s in from..=to {
            let past_at = [0, 1].map(|i| if self.lines[i].past >= s { now } else { NEVER });
            self.window.mark_missing(s, noticed, past_at);
        }
        self.next_deadline = self.next_deadline.min(noticed.saturating_add(self.nak_ns));
    }

    /// A wait drawn from [`nak_wait`]'s distribution (0 without a
    /// backoff).
    fn random_wait(&mut self) -> u64 {
        if self.nak_backoff_ns == 0 {
            return 0;
        }
        let u = self.rng.unit();
        nak_wait(self.nak_backoff_ns, self.nak_group_size, u)
    }

    /// Line `line` has sent everything up to `past`.
    fn line_past(&mut self, line: Line, past: u64, now: u64) {
        let i = line.index();
        let before = self.lines[i].past;
        if past <= before {
            return;
        }
        self.lines[i].past = past;
        let mut touched = false;
        for s in (before + 1).max(self.next)..=past.min(self.high) {
            let slot = self.window.slot_mut(s);
            if slot.state == State::Missing && slot.past_at[i] == NEVER {
                slot.past_at[i] = now;
                touched = true;
            }
        }
        if touched {
            self.next_deadline = self.next_deadline.min(now.saturating_add(self.nak_ns));
        }
    }

    /// The publisher says sequences up to `seq` exist.
    fn learn_high<D: FnMut(Event<'_>)>(&mut self, seq: u64, now: u64, deliver: &mut D) {
        if seq <= self.high {
            return;
        }
        let cap = self.window.capacity();
        if seq - self.next >= cap {
            self.advance(seq - cap + 1, deliver);
        }
        if seq > self.high {
            self.mark_missing(self.high + 1, seq, now);
            self.counters.gaps_detected += 1;
            self.high = seq;
        }
    }

    /// A copy of a whole message arrived.
    fn accept<D: FnMut(Event<'_>)>(
        &mut self,
        line: Line,
        retransmit: bool,
        h: &Header,
        payload: &[u8],
        now: u64,
        deliver: &mut D,
    ) {
        let s = h.seq;
        if !self.admit(s, deliver) {
            return;
        }
        if s <= self.high {
            if self.window.slot(s).state == State::Present {
                self.counters.duplicates += 1;
                return;
            }
            // Filling a hole (possibly one already given up but not yet
            // reported: the message is still welcome).
            if retransmit {
                self.counters.recovered += 1;
                if self.window.slot(s).tries == 0 {
                    self.counters.suppressed += 1;
                }
            }
        } else {
            if s > self.high + 1 {
                self.mark_missing(self.high + 1, s - 1, now);
                self.counters.gaps_detected += 1;
            }
            self.high = s;
        }
        if !retransmit {
            self.win(line);
        }
        if s == self.next {
            // In order: straight from the datagram, no copy.
            self.reported = true;
            self.counters.messages_delivered += 1;
            self.next = s + 1;
            deliver(Event::Message(Message {
                seq: s,
                flags: h.flags,
                timestamp: h.timestamp,
                payload,
            }));
            self.advance(0, deliver);
        } else {
            self.window.store(h, payload);
        }
    }

    /// Drops a copy older than the delivery point, and moves the window
    /// forward when `seq` is beyond it. Returns whether to go on with it.
    fn admit<D: FnMut(Event<'_>)>(&mut self, seq: u64, deliver: &mut D) -> bool {
        let cap = self.window.capacity();
        if seq < self.next {
            if self.next - seq <= cap {
                self.counters.duplicates += 1;
            } else {
                self.counters.stale += 1;
            }
            return false;
        }
        if seq - self.next >= cap {
            self.advance(seq - cap + 1, deliver);
        }
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn accept_fragment<D: FnMut(Event<'_>)>(
        &mut self,
        line: Line,
        retransmit: bool,
        h: &Header,
        f: Fragment,
        bytes: &[u8],
        now: u64,
        deliver: &mut D,
    ) -> Result<(), DropReason> {
        let s = h.seq;
        if !self.admit(s, deliver) {
            return Ok(());
        }
        if s <= self.high {
            if self.window.slot(s).state == State::Present {
                self.counters.duplicates += 1;
                return Ok(());
            }
        } else {
            if s > self.high + 1 {
                self.mark_missing(self.high + 1, s - 1, now);
                self.counters.gaps_detected += 1;
            }
            // Missing until its last fragment is in.
            self.mark_missing(s, s, now);
            self.high = s;
        }
        self.counters.fragments_received += 1;
        let k = match self.reassembly.find(s, self.next) {
            Some(k) => k,
            None => match self.reassembly.acquire(s, self.next, h, f) {
                Acquired::Free(k) => k,
                Acquired::Evicted(k, evicted) => {
                    self.counters.reassembly_evictions += 1;
                    let slot = self.window.slot_mut(evicted);
                    if evicted <= self.high
                        && slot.state == State::Present
                        && slot.reassembly == k as u32
                    {
                        slot.state = State::Missing;
                        slot.reassembly = INLINE;
                        self.next_deadline = now;
                    }
                    k
                }
                Acquired::Full => return Err(DropReason::ReassemblyFull),
            },
        };
        match self.reassembly.add(k, h, f, bytes, retransmit) {
            Err(()) => return Err(DropReason::BadFragment),
            Ok(Added::Duplicate) => self.counters.duplicates += 1,
            Ok(Added::Partial) => {}
            Ok(Added::Complete) => {
                if self.reassembly.retransmitted(k) {
                    self.counters.recovered += 1;
                } else {
                    self.win(line);
                }
                let slot = self.window.slot_mut(s);
                slot.state = State::Present;
                slot.reassembly = k as u32;
                self.advance(0, deliver);
            }
        }
        Ok(())
    }

    fn win(&mut self, line: Line) {
        match line {
            Line::A => self.counters.wins_a += 1,
            Line::B => self.counters.wins_b += 1,
        }
    }

    /// Delivers from the reorder window while the next message is here or
    /// given up; below `force_to`, missing messages are given up too.
    fn advance<D: FnMut(Event<'_>)>(&mut self, force_to: u64, deliver: &mut D) {
        let mut run: Option<Run> = None;
        loop {
            let s = self.next;
            if s > self.high {
                if s < force_to {
                    // Never seen at all: lost as one block.
                    self.push_lost(&mut run, s, force_to, false, deliver);
                    self.next = force_to;
                    self.high = force_to - 1;
                }
                break;
            }
            match self.window.slot(s).state {
                State::Present => {
                    self.flush_run(&mut run, deliver);
                    self.deliver_held(s, deliver);
                }
                State::Lost => self.push_lost(&mut run, s, s + 1, false, deliver),
                State::NotRetained => self.push_lost(&mut run, s, s + 1, true, deliver),
                State::Missing if s < force_to => {
                    self.push_lost(&mut run, s, s + 1, false, deliver)
                }
                State::Missing => break,
            }
            self.next = s + 1;
        }
        self.flush_run(&mut run, deliver);
    }

    /// Hands the held message `seq` to the application.
    fn deliver_held<D: FnMut(Event<'_>)>(&mut self, seq: u64, deliver: &mut D) {
        self.reported = true;
        self.counters.messages_delivered += 1;
        let slot = *self.window.slot(seq);
        if slot.reassembly == INLINE {
            deliver(Event::Message(Message {
                seq,
                flags: slot.flags,
                timestamp: slot.timestamp,
                payload: self.window.payload(seq),
            }));
        } else {
            let k = slot.reassembly as usize;
            let (h, payload) = self.reassembly.message(k);
            deliver(Event::Message(Message {
                seq,
                flags: h.flags,
                timestamp: h.timestamp,
                payload,
            }));
            self.reassembly.release(k);
        }
    }

    /// Adds `from..to` to the run of given-up sequences.
    fn push_lost<D: FnMut(Event<'_>)>(
        &mut self,
        run: &mut Option<Run>,
        from: u64,
        to: u64,
        not_retained: bool,
        deliver: &mut D,
    ) {
        // Messages the publisher no longer had when this subscriber joined
        // predate it: skipped, as long as nothing has been delivered yet.
        let silent = not_retained && !self.reported && from < self.join_until;
        if !silent {
            self.reported = true;
        }
        match run {
            Some(r) if r.to == from && r.silent == silent => r.to = to,
            _ => {
                self.flush_run(run, deliver);
                *run = Some(Run { from, to, silent });
            }
        }
    }

    fn flush_run<D: FnMut(Event<'_>)>(&mut self, run: &mut Option<Run>, deliver: &mut D) {
        if let Some(r) = run.take() {
            let n = r.to - r.from;
            if r.silent {
                self.counters.join_skipped += n;
            } else {
                self.counters.unrecoverable += n;
                self.counters.gap_events += 1;
                deliver(Event::Gap {
                    from: r.from,
                    to: r.to,
                });
            }
        }
    }

    /// Sends the requests that are due, gives up what ran out of retries,
    /// and sets the next deadline.
    fn service<D, R>(&mut self, now: u64, deliver: &mut D, request: &mut R)
    where
        D: FnMut(Event<'_>),
        R: FnMut(&[u8]),
    {
        self.next_deadline = NEVER;
        let live = [0, 1].map(|i| {
            let l = &self.lines[i];
            l.heard && now.saturating_sub(l.last_heard) < self.line_timeout_ns
        });
        let mut run: Option<(u64, u64)> = None;
        let mut s = self.next;
        while s <= self.high {
            let slot = *self.window.slot(s);
            if slot.state != State::Missing {
                self.send_request(&mut run, now, request);
                s += 1;
                continue;
            }
            let due = if slot.tries == 0 {
                let grace_at = slot.noticed.saturating_add(self.grace_ns.max(self.nak_ns));
                let mut lines_at = slot.noticed.saturating_add(self.nak_ns);
                let mut all_past = true;
                for (&live, &past_at) in live.iter().zip(&slot.past_at) {
                    match past_at {
                        _ if !live => {}
                        NEVER => all_past = false,
                        t => lines_at = lines_at.max(t.saturating_add(self.nak_ns)),
                    }
                }
                if all_past {
                    lines_at.min(grace_at)
                } else {
                    grace_at
                }
            } else if slot.last_request == NEVER {
                now
            } else {
                slot.last_request.saturating_add(self.request_timeout_ns)
            };
            if now < due {
                self.send_request(&mut run, now, request);
                self.next_deadline = self.next_deadline.min(due);
            } else if slot.tries > self.max_retries {
                self.send_request(&mut run, now, request);
                self.window.slot_mut(s).state = State::Lost;
            } else {
                match &mut run {
                    Some((_, to)) => *to = s + 1,
                    None => run = Some((s, s + 1)),
                }
            }
            s += 1;
        }
        self.send_request(&mut run, now, request);
        self.advance(0, deliver);
    }

    /// Sends one request for the run `from..to`, if any.
    fn send_request<R: FnMut(&[u8])>(
        &mut self,
        run: &mut Option<(u64, u64)>,
        now: u64,
        request: &mut R,
    ) {
        let Some((from, to)) = run.take() else {
            return;
        };
        let Some(epoch) = self.epoch else {
            return;
        };
        frame::encode_control(
            &mut self.request_buf,
            Kind::Request,
            self.limits.stream_id,
            epoch,
            from,
            to - from,
        );
        request(&self.request_buf);
        self.counters.requests_sent += 1;
        self.counters.datagrams_sent += 1;
        self.counters.messages_requested += to - from;
        // A repeat waits a random extra time too: when a repair to the
        // group is lost upstream, every subscriber times out together.
        let wait = self.random_wait();
        for s in from..to {
            let slot = self.window.slot_mut(s);
            slot.tries += 1;
            slot.last_request = now.saturating_add(wait);
        }
        self.next_deadline = self
            .next_deadline
            .min(now.saturating_add(self.request_timeout_ns));
    }

    /// Start and capacity of every buffer, to show they never move.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> Vec<(usize, usize)> {
        let mut v = self.window.buffers().to_vec();
        v.extend(self.reassembly.buffers());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::frame::DatagramHeader;
    use crate::recovery::publisher::{PublisherConfig, PublisherCore};
    use crate::recovery::sim::{own, Ev};
    use crate::wire::HEADER_LEN;

    const US: u64 = 1_000;

    fn config() -> SubscriberConfig {
        SubscriberConfig {
            max_message: 2000,
            max_datagram: 256,
            reorder_window: 16,
            reassembly_buffers: 2,
            nak_delay: Duration::from_micros(10),
            line_grace: Duration::from_micros(100),
            line_timeout: Duration::from_millis(1),
            request_timeout: Duration::from_micros(200),
            max_retries: 1,
            publisher_timeout: Duration::from_millis(5),
            // These tests pin down recovery itself; the confirmation of
            // suspect datagrams has its own tests below.
            confirm: 1,
            max_jump: u64::MAX,
            ..SubscriberConfig::new(5)
        }
    }

    /// A data datagram holding messages `first..first+n` (payload: the
    /// sequence as 8 bytes).
    fn data(epoch: u64, first: u64, n: u64, retransmit: bool) -> Vec<u8> {
        let mut b = vec![0u8; DATAGRAM_HEADER_LEN];
        for seq in first..first + n {
            let mut h = [0u8; HEADER_LEN];
            Header {
                seq,
                len: 8,
                flags: 0,
                timestamp: 0,
            }
            .encode(&mut h);
            b.extend_from_slice(&h);
            b.extend_from_slice(&seq.to_le_bytes());
        }
        let length = b.len() as u32;
        DatagramHeader {
            kind: if retransmit {
                Kind::Retransmit
            } else {
                Kind::Data
            },
            count: n as u16,
            stream_id: 5,
            length,
            epoch,
            seq: first,
            arg: 0,
        }
        .encode(&mut b);
        b
    }

    fn control(kind: Kind, epoch: u64, seq: u64, arg: u64) -> Vec<u8> {
        let mut b = [0u8; DATAGRAM_HEADER_LEN];
        frame::encode_control(&mut b, kind, 5, epoch, seq, arg);
        b.to_vec()
    }

    fn msg(seq: u64) -> Ev {
        Ev::Msg(seq, seq.to_le_bytes().to_vec())
    }

    /// A subscriber with logs of its events and of the ranges it asked for.
    struct T {
        sub: SubscriberCore,
        events: Vec<Ev>,
        requests: Vec<(u64, u64)>,
    }

    impl T {
        fn new(cfg: SubscriberConfig) -> T {
            T {
                sub: SubscriberCore::new(&cfg).unwrap(),
                events: Vec::new(),
                requests: Vec::new(),
            }
        }

        fn feed(&mut self, line: Line, d: &[u8], now: u64) -> Result<(), DropReason> {
            let (events, requests) = (&mut self.events, &mut self.requests);
            self.sub.on_datagram(
                line,
                d,
                now,
                |e| events.push(own(e)),
                |r| requests.push(parse_request(r)),
            )
        }

        fn tick(&mut self, now: u64) {
            let (events, requests) = (&mut self.events, &mut self.requests);
            self.sub.tick(
                now,
                |e| events.push(own(e)),
                |r| requests.push(parse_request(r)),
            )
        }

        fn take(&mut self) -> Vec<Ev> {
            std::mem::take(&mut self.events)
        }

        /// Line A, from `source`.
        fn from(&mut self, source: u64, d: &[u8], now: u64) -> Result<(), DropReason> {
            let (events, requests) = (&mut self.events, &mut self.requests);
            self.sub.on_datagram_from(
                Line::A,
                source,
                d,
                now,
                |e| events.push(own(e)),
                |r| requests.push(parse_request(r)),
            )
        }
    }

    fn parse_request(r: &[u8]) -> (u64, u64) {
        let limits = Limits {
            stream_id: 5,
            max_datagram: 256,
            max_message: 2000,
        };
        match frame::decode(r, &limits).unwrap().frame {
            Frame::Request { from, count } => (from, from + count),
            f => panic!("{f:?}"),
        }
    }

    #[test]
    fn rejects_unusable_settings_with_the_key_named() {
        let bad = |f: fn(&mut SubscriberConfig)| {
            let mut c = config();
            f(&mut c);
            SubscriberCore::new(&c).unwrap_err().key
        };
        assert_eq!(bad(|c| c.reorder_window = 12), "reorder_window");
        assert_eq!(bad(|c| c.max_datagram = 70_000), "max_datagram");
        assert_eq!(bad(|c| c.reassembly_buffers = 0), "reassembly_buffers");
        assert_eq!(bad(|c| c.max_message = 0), "max_message");
    }

    #[test]
    fn in_order_messages_are_delivered_from_the_datagram_itself() {
        let mut sub = SubscriberCore::new(&config()).unwrap();
        let d = data(1, 1, 3, false);
        let range = d.as_ptr_range();
        let mut seen = Vec::new();
        sub.on_datagram(
            Line::A,
            &d,
            0,
            |e| {
                if let Event::Message(m) = e {
                    assert!(range.contains(&m.payload().as_ptr()), "copied");
                    seen.push(m.seq());
                }
            },
            |_| panic!("no request"),
        )
        .unwrap();
        assert_eq!(seen, [1, 2, 3]);
        assert_eq!(sub.counters().messages_delivered, 3);
        assert_eq!(sub.counters().wins_a, 3);
    }

    #[test]
    fn the_in_order_path_hands_over_to_the_general_one_and_back() {
        let mut t = T::new(config());
        // In order on A: delivered from the datagram.
        t.feed(Line::A, &data(1, 1, 3, false), 0).unwrap();
        // B's copies are duplicates; B then runs ahead past a hole.
        t.feed(Line::B, &data(1, 1, 3, false), US).unwrap();
        t.feed(Line::B, &data(1, 5, 1, false), US).unwrap();
        assert_eq!(t.take(), vec![msg(1), msg(2), msg(3)]);
        // The hole filled on A releases the held message; then in order
        // again.
        t.feed(Line::A, &data(1, 4, 1, false), 2 * US).unwrap();
        t.feed(Line::A, &data(1, 6, 2, false), 2 * US).unwrap();
        assert_eq!(t.take(), vec![msg(4), msg(5), msg(6), msg(7)]);
        let c = t.sub.counters();
        assert_eq!(
            (c.messages_delivered, c.wins_a, c.wins_b, c.duplicates),
            (7, 6, 1, 3)
        );
        assert_eq!((c.gaps_detected, c.requests_sent), (1, 0));
        assert_eq!(t.sub.next_seq(), 8);
        assert_eq!(t.sub.outstanding(), 0);
        assert!(t.requests.is_empty(), "filled within nak_delay");
    }

    #[test]
    fn out_of_order_waits_and_duplicates_are_dropped() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 3, 2, false), US).unwrap();
        assert_eq!(t.take(), vec![msg(1)]);
        t.feed(Line::A, &data(1, 4, 1, false), US).unwrap();
        t.feed(Line::A, &data(1, 2, 1, false), 2 * US).unwrap();
        assert_eq!(t.take(), vec![msg(2), msg(3), msg(4)]);
        t.feed(Line::A, &data(1, 1, 4, false), 3 * US).unwrap();
        let c = t.sub.counters();
        assert_eq!((c.duplicates, c.gaps_detected, c.requests_sent), (5, 1, 0));
        assert!(t.requests.is_empty(), "reordered within nak_delay");
    }

    #[test]
    fn a_gap_is_requested_after_nak_delay_and_recovered() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 4, 1, false), US).unwrap();
        t.tick(10 * US);
        assert!(t.requests.is_empty());
        t.tick(11 * US);
        assert_eq!(t.requests, vec![(2, 4)], "adjacent sequences coalesce");
        t.feed(Line::A, &data(1, 2, 2, true), 20 * US).unwrap();
        assert_eq!(t.take(), vec![msg(1), msg(2), msg(3), msg(4)]);
        let c = t.sub.counters();
        assert_eq!(
            (c.recovered, c.requests_sent, c.messages_requested),
            (2, 1, 2)
        );
        // Nothing more is asked for.
        t.tick(10_000 * US);
        assert_eq!(t.requests.len(), 1);
    }

    /// What an idle driver may sleep until: nothing before the first
    /// datagram, the publisher's silence once one was heard, an earlier
    /// request when a gap is pending, nothing once the silence was
    /// reported.
    #[test]
    fn the_wake_deadline_is_the_next_request_or_the_publishers_silence() {
        let ms = 1_000 * US;
        let mut t = T::new(config());
        assert_eq!(t.sub.wake_deadline(), u64::MAX, "nothing heard");
        t.feed(Line::A, &data(1, 1, 1, false), ms).unwrap();
        assert_eq!(t.sub.wake_deadline(), 6 * ms, "heard at 1 ms, 5 ms timeout");
        t.feed(Line::A, &data(1, 3, 1, false), 2 * ms).unwrap();
        assert_eq!(
            t.sub.wake_deadline(),
            2 * ms + 10 * US,
            "the request after nak_delay"
        );
        t.tick(2 * ms + 10 * US);
        assert_eq!(t.requests, vec![(2, 3)]);
        assert_eq!(t.sub.wake_deadline(), t.sub.next_deadline().min(7 * ms));
        t.tick(7 * ms);
        assert!(t.take().contains(&Ev::Down(3)), "the silence reported");
        assert_eq!(t.sub.wake_deadline(), t.sub.next_deadline());
    }

    #[test]
    fn retries_then_reports_the_gap() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 3, 1, false), 0).unwrap();
        t.tick(10 * US);
        t.tick(209 * US);
        t.tick(210 * US);
        assert_eq!(t.requests, vec![(2, 3), (2, 3)]);
        t.tick(409 * US);
        assert_eq!(t.take(), vec![msg(1)]);
        t.tick(410 * US);
        assert_eq!(t.take(), vec![Ev::Gap(2, 3), msg(3)]);
        let c = t.sub.counters();
        assert_eq!((c.unrecoverable, c.gap_events, c.requests_sent), (1, 1, 2));
        // A late copy is a duplicate, not a second delivery.
        t.feed(Line::A, &data(1, 2, 1, true), 500 * US).unwrap();
        assert!(t.take().is_empty());
        assert_eq!(t.sub.counters().duplicates, 1);
    }

    #[test]
    fn a_throttled_notice_is_counted_and_recovery_goes_on() {
        let mut t = T::new(SubscriberConfig {
            max_retries: 3,
            ..config()
        });
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 5, 1, false), 0).unwrap();
        // Not asked for yet: a notice is not believed.
        assert_eq!(
            t.feed(Line::A, &control(Kind::Throttled, 1, 2, 3), US),
            Err(DropReason::Unsolicited)
        );
        t.tick(10 * US);
        assert_eq!(t.requests, vec![(2, 5)]);
        // For messages asked for: counted, and nothing else changes.
        t.feed(Line::A, &control(Kind::Throttled, 1, 3, 2), 11 * US)
            .unwrap();
        // Beyond what is known, or for messages held: not believed.
        assert_eq!(
            t.feed(Line::A, &control(Kind::Throttled, 1, 9, 2), 12 * US),
            Err(DropReason::Unsolicited)
        );
        assert_eq!(
            t.feed(Line::A, &control(Kind::Throttled, 1, 5, 1), 12 * US),
            Err(DropReason::Unsolicited)
        );
        assert_eq!(t.take(), vec![msg(1)]);
        let c = t.sub.counters();
        assert_eq!((c.throttled, c.drops.unsolicited), (1, 3));
        // The subscriber asks again at its usual pace and recovers.
        t.tick(211 * US);
        assert_eq!(t.requests, vec![(2, 5), (2, 5)]);
        t.feed(Line::A, &data(1, 2, 3, true), 220 * US).unwrap();
        assert_eq!(t.take(), vec![msg(2), msg(3), msg(4), msg(5)]);
        assert_eq!(t.sub.counters().unrecoverable, 0);
    }

    #[test]
    fn not_available_is_reported_as_a_gap_at_once() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 5, 1, false), 0).unwrap();
        t.tick(10 * US);
        assert_eq!(t.requests, vec![(2, 5)]);
        t.feed(Line::A, &control(Kind::NotAvailable, 1, 2, 2), 12 * US)
            .unwrap();
        t.feed(Line::A, &data(1, 4, 1, true), 12 * US).unwrap();
        assert_eq!(t.take(), vec![msg(1), Ev::Gap(2, 4), msg(4), msg(5)]);
        let c = t.sub.counters();
        assert_eq!(
            (c.not_available_received, c.unrecoverable, c.recovered),
            (1, 2, 1)
        );
    }

    #[test]
    fn heartbeat_reveals_a_lost_tail() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 2, false), 0).unwrap();
        t.feed(Line::A, &control(Kind::Heartbeat, 1, 4, 1), 50 * US)
            .unwrap();
        t.tick(60 * US);
        assert_eq!(t.requests, vec![(3, 5)]);
        t.feed(Line::A, &data(1, 3, 2, true), 70 * US).unwrap();
        assert_eq!(t.take(), vec![msg(1), msg(2), msg(3), msg(4)]);
        let c = t.sub.counters();
        assert_eq!(
            (c.heartbeats_received, c.gaps_detected, c.recovered),
            (1, 1, 2)
        );
    }

    #[test]
    fn silence_reports_the_publisher_down_once() {
        let mut t = T::new(config());
        t.tick(100_000 * US);
        assert!(t.take().is_empty(), "nothing to report before a publisher");
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.tick(4_999 * US);
        t.tick(5_000 * US);
        t.tick(6_000 * US);
        assert_eq!(t.take(), vec![msg(1), Ev::Down(1)]);
        // Back again, then silent again: reported again.
        t.feed(Line::A, &control(Kind::Heartbeat, 1, 1, 1), 7_000 * US)
            .unwrap();
        t.tick(12_000 * US);
        assert_eq!(t.take(), vec![Ev::Down(1)]);
        assert_eq!(t.sub.counters().publisher_down, 2);
    }

    #[test]
    fn end_of_stream_comes_after_the_last_message() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &control(Kind::EndOfStream, 1, 2, 1), US)
            .unwrap();
        assert_eq!(t.take(), vec![msg(1)]);
        t.feed(Line::A, &control(Kind::EndOfStream, 1, 2, 1), 2 * US)
            .unwrap();
        t.feed(Line::A, &data(1, 2, 1, false), 3 * US).unwrap();
        assert_eq!(t.take(), vec![msg(2), Ev::End(2)]);
        assert_eq!(
            t.feed(Line::A, &data(1, 3, 1, false), 4 * US),
            Err(DropReason::BadSequence)
        );
        t.tick(1_000_000 * US);
        assert!(t.take().is_empty(), "a closed stream is not down");
    }

    #[test]
    fn a_new_epoch_restarts_and_old_epochs_are_dropped() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(10, 1, 3, false), 0).unwrap();
        t.feed(Line::A, &data(10, 5, 1, false), 0).unwrap();
        // The new incarnation's second datagram arrives first.
        t.feed(Line::A, &data(11, 3, 1, false), US).unwrap();
        assert_eq!(
            t.take(),
            vec![
                msg(1),
                msg(2),
                msg(3),
                Ev::Gap(4, 5),
                msg(5),
                Ev::Restart(11)
            ]
        );
        assert_eq!(
            t.feed(Line::A, &data(10, 6, 1, false), US),
            Err(DropReason::OldEpoch)
        );
        t.feed(Line::A, &data(11, 1, 2, false), 2 * US).unwrap();
        assert_eq!(t.take(), vec![msg(1), msg(2), msg(3)]);
        assert!(t.requests.is_empty());
        let c = t.sub.counters();
        assert_eq!((c.restarts, c.drops.old_epoch), (1, 1));
        // Replies for an incarnation not followed are unsolicited.
        assert_eq!(
            t.feed(Line::A, &data(12, 1, 1, true), 3 * US),
            Err(DropReason::Unsolicited)
        );
    }

    #[test]
    fn a_restart_recovers_the_new_incarnations_first_messages() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(10, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(11, 4, 1, false), US).unwrap();
        t.tick(20 * US);
        assert_eq!(t.requests, vec![(1, 4)]);
        t.feed(Line::A, &data(11, 1, 3, true), 30 * US).unwrap();
        assert_eq!(
            t.take(),
            vec![msg(1), Ev::Restart(11), msg(1), msg(2), msg(3), msg(4)]
        );
    }

    #[test]
    fn late_join_next_starts_at_the_first_message_seen() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 100, 1, false), 0).unwrap();
        t.tick(1_000 * US);
        assert_eq!(t.take(), vec![msg(100)]);
        assert!(t.requests.is_empty());
        // Joining on a heartbeat: start after it.
        let mut t = T::new(config());
        t.feed(Line::A, &control(Kind::Heartbeat, 1, 50, 10), 0)
            .unwrap();
        t.feed(Line::A, &data(1, 51, 1, false), 0).unwrap();
        assert_eq!(t.take(), vec![msg(51)]);
    }

    #[test]
    fn late_join_oldest_fetches_the_retained_window_first() {
        let mut t = T::new(SubscriberConfig {
            late_join: LateJoin::Oldest,
            ..config()
        });
        t.feed(Line::A, &data(1, 100, 1, false), 0).unwrap();
        t.tick(10 * US);
        // As far back as half the 16-message window.
        assert_eq!(t.requests, vec![(92, 100)]);
        // The publisher retains from 95: 92..95 predate the join.
        t.feed(Line::A, &control(Kind::NotAvailable, 1, 92, 3), 20 * US)
            .unwrap();
        t.feed(Line::A, &data(1, 95, 5, true), 20 * US).unwrap();
        let want: Vec<Ev> = (95..=100).map(msg).collect();
        assert_eq!(t.take(), want);
        let c = t.sub.counters();
        assert_eq!((c.join_skipped, c.unrecoverable, c.gap_events), (3, 0, 0));
    }

    #[test]
    fn a_message_beyond_the_window_pushes_it_forward_with_a_gap() {
        let mut t = T::new(config());
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 3, 1, false), 0).unwrap();
        // 16-sequence window from 2: 18 is beyond it.
        t.feed(Line::A, &data(1, 18, 1, false), 0).unwrap();
        assert_eq!(t.take(), vec![msg(1), Ev::Gap(2, 3), msg(3)]);
        t.feed(Line::A, &data(1, 40, 1, false), 0).unwrap();
        assert_eq!(t.take(), vec![Ev::Gap(4, 18), msg(18), Ev::Gap(19, 25)]);
        assert_eq!(t.sub.next_seq(), 25);
        assert_eq!(t.sub.counters().unrecoverable, 1 + 14 + 6);
    }

    #[test]
    fn the_other_lines_copy_fills_the_hole_without_a_request() {
        let mut t = T::new(config());
        // B lags A by 30 µs; A lost 2.
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::B, &data(1, 1, 1, false), 30 * US).unwrap();
        t.feed(Line::A, &data(1, 3, 1, false), 40 * US).unwrap();
        t.tick(60 * US);
        assert!(t.requests.is_empty(), "B is live and not past 2 yet");
        t.feed(Line::B, &data(1, 2, 1, false), 70 * US).unwrap();
        t.feed(Line::B, &data(1, 3, 1, false), 75 * US).unwrap();
        t.tick(90 * US);
        assert!(t.requests.is_empty());
        assert_eq!(t.take(), vec![msg(1), msg(2), msg(3)]);
        let c = t.sub.counters();
        assert_eq!((c.wins_a, c.wins_b, c.duplicates), (2, 1, 2));
        // Both lines lose 4: requested once both are past it (and
        // nak_delay has passed for the later one), before line_grace.
        t.feed(Line::A, &data(1, 5, 1, false), 100 * US).unwrap();
        t.feed(Line::B, &data(1, 5, 1, false), 120 * US).unwrap();
        t.tick(129 * US);
        assert!(t.requests.is_empty());
        t.tick(130 * US);
        assert_eq!(t.requests, vec![(4, 5)]);
    }

    #[test]
    fn a_lagging_line_is_waited_for_only_line_grace() {
        let mut t = T::new(config());
        t.feed(Line::B, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 1, 1, false), 0).unwrap();
        t.feed(Line::A, &data(1, 3, 1, false), 10 * US).unwrap();
        t.tick(109 * US);
        assert!(t.requests.is_empty());
        t.tick(110 * US);
        assert_eq!(t.requests, vec![(2, 3)]);
    }

    #[test]
    fn a_lost_fragment_is_requested_and_the_message_reassembled() {
        let mut p = PublisherCore::new(&PublisherConfig {
            max_message: 2000,
            max_datagram: 256,
            retain_messages: 16,
            retain_bytes: 8192,
            ..PublisherConfig::new(5, 1)
        })
        .unwrap();
        let big: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut out: Vec<Vec<u8>> = Vec::new();
        p.publish(b"one", None, 0, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        p.publish(&big, None, 0, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        p.publish(b"three", None, 0, |d: &[u8]| out.push(d.to_vec()))
            .unwrap();
        p.flush(0, |d: &[u8]| out.push(d.to_vec()));
        // out: [1], six fragments of 2 (192 bytes each, the last 40), [3]
        assert_eq!(out.len(), 8);
        let mut t = T::new(config());
        for (i, d) in out.iter().enumerate() {
            if i != 3 {
                t.feed(Line::A, d, US).unwrap();
            }
        }
        assert_eq!(t.take(), vec![Ev::Msg(1, b"one".to_vec())]);
        t.tick(20 * US);
        assert_eq!(t.requests, vec![(2, 3)]);
        let mut replies: Vec<Vec<u8>> = Vec::new();
        let mut req = [0u8; DATAGRAM_HEADER_LEN];
        frame::encode_control(&mut req, Kind::Request, 5, 1, 2, 1);
        p.on_datagram(&req, 25 * US, |d: &[u8]| replies.push(d.to_vec()))
            .unwrap();
        for d in &replies {
            t.feed(Line::A, d, 30 * US).unwrap();
        }
        assert_eq!(
            t.take(),
            vec![Ev::Msg(2, big.clone()), Ev::Msg(3, b"three".to_vec())]
        );
        let c = t.sub.counters();
        // The resent fragments 0 and 1 are duplicates in reassembly; 3..5
        // arrive after the message was delivered.
        assert_eq!((c.recovered, c.duplicates, c.fragments_received), (1, 5, 8));
    }

    #[test]
    fn malformed_and_misdirected_datagrams_are_counted_not_used() {
        let mut t = T::new(config());
        let good = data(1, 1, 1, false);
        assert_eq!(t.feed(Line::A, &good[..30], 0), Err(DropReason::Truncated));
        let mut other = good.clone();
        other[8] = 6;
        assert_eq!(t.feed(Line::A, &other, 0), Err(DropReason::OtherStream));
        assert_eq!(
            t.feed(Line::A, &control(Kind::Request, 1, 1, 1), 0),
            Err(DropReason::UnexpectedKind)
        );
        assert_eq!(
            t.feed(Line::A, &control(Kind::NotAvailable, 1, 1, 1), 0),
            Err(DropReason::Unsolicited)
        );
        assert!(t.take().is_empty());
        let c = t.sub.counters();
        assert_eq!(c.datagrams_received, 4);
        assert_eq!(c.drops.total(), 4);
        assert_eq!(t.sub.epoch(), None);
    }

    /// Forged and misdirected datagrams: none of them ends, rewinds or jumps a
    /// stream, or turns a hole into a loss, on its own.
    mod hostile {
        use super::*;

        const GENUINE: u64 = 1;
        const FORGER: u64 = 2;

        fn guarded() -> SubscriberConfig {
            SubscriberConfig {
                confirm: 3,
                max_jump: 8,
                ..config()
            }
        }

        /// A subscriber that has delivered 1..=3 from the genuine source.
        fn following() -> T {
            let mut t = T::new(guarded());
            t.from(GENUINE, &data(1, 1, 3, false), 0).unwrap();
            assert_eq!(t.take(), vec![msg(1), msg(2), msg(3)]);
            t
        }

        #[test]
        fn a_forged_epoch_is_not_followed() {
            let mut t = following();
            let forged = control(Kind::Heartbeat, u64::MAX, 3, 1);
            assert_eq!(
                t.from(GENUINE, &forged, US),
                Err(DropReason::ImplausibleEpoch)
            );
            assert_eq!(t.from(FORGER, &forged, US), Err(DropReason::ForeignSource));
            t.from(GENUINE, &data(1, 4, 2, false), 2 * US).unwrap();
            assert_eq!(t.take(), vec![msg(4), msg(5)]);
            assert_eq!(t.sub.epoch(), Some(1));
            let d = t.sub.counters().drops;
            assert_eq!((d.implausible_epoch, d.foreign_source), (1, 1));
        }

        #[test]
        fn a_forged_far_heartbeat_or_sequence_does_not_jump_the_stream() {
            let mut t = following();
            let far = control(Kind::Heartbeat, 1, 1 << 62, 1);
            assert_eq!(t.from(GENUINE, &far, US), Err(DropReason::ImplausibleJump));
            assert_eq!(
                t.from(GENUINE, &data(1, 1 << 40, 1, false), US),
                Err(DropReason::ImplausibleJump)
            );
            t.tick(10_000 * US);
            t.from(GENUINE, &data(1, 4, 1, false), 10_001 * US).unwrap();
            assert_eq!(t.take(), vec![Ev::Down(3), msg(4)]);
            assert!(t.requests.is_empty(), "nothing asked for");
            assert_eq!(t.sub.counters().drops.implausible_jump, 2);
        }

        #[test]
        fn a_far_jump_confirmed_by_consecutive_datagrams_is_followed() {
            let mut t = following();
            // The subscriber was away: the stream really is at 100 now.
            for (i, s) in [100u64, 101, 102].into_iter().enumerate() {
                let r = t.from(GENUINE, &data(1, s, 1, false), (i as u64 + 1) * US);
                assert_eq!(r.is_ok(), i == 2, "{i}: {r:?}");
            }
            // Recovered from the publisher if it can: requested, here lost.
            t.tick(10_000 * US);
            let evs = t.take();
            assert_eq!(evs.first(), Some(&Ev::Gap(4, 87)), "{evs:?}");
            assert_eq!(t.sub.counters().drops.implausible_jump, 2);
        }

        #[test]
        fn one_forged_heartbeat_or_end_of_stream_announces_nothing() {
            let mut t = following();
            assert_eq!(
                t.from(GENUINE, &control(Kind::Heartbeat, 1, 6, 1), US),
                Err(DropReason::UnconfirmedClaim)
            );
            assert_eq!(
                t.from(GENUINE, &control(Kind::EndOfStream, 1, 3, 1), US),
                Err(DropReason::UnconfirmedClaim)
            );
            t.tick(5 * US);
            t.tick(1_000 * US);
            assert!(t.requests.is_empty());
            t.from(GENUINE, &data(1, 4, 1, false), 1_001 * US).unwrap();
            assert_eq!(t.take(), vec![msg(4)]);
            // The genuine publisher repeats both: the second one is believed.
            t.from(GENUINE, &control(Kind::Heartbeat, 1, 5, 1), 1_100 * US)
                .unwrap_err();
            t.from(GENUINE, &control(Kind::Heartbeat, 1, 5, 1), 1_200 * US)
                .unwrap();
            t.tick(1_300 * US);
            assert_eq!(t.requests, vec![(5, 6)]);
            t.from(GENUINE, &data(1, 5, 1, true), 1_301 * US).unwrap();
            for i in 0..2 {
                let r = t.from(GENUINE, &control(Kind::EndOfStream, 1, 5, 1), 1_400 * US);
                assert_eq!(r.is_ok(), i == 1);
            }
            assert_eq!(t.take(), vec![msg(5), Ev::End(5)]);
        }

        #[test]
        fn one_forged_not_available_does_not_lose_a_hole() {
            let mut t = following();
            t.from(GENUINE, &data(1, 6, 1, false), US).unwrap();
            t.tick(20 * US);
            assert_eq!(t.requests, vec![(4, 6)]);
            // Forged notice from the genuine source's address: asked again.
            assert_eq!(
                t.from(GENUINE, &control(Kind::NotAvailable, 1, 4, 2), 21 * US),
                Err(DropReason::UnconfirmedNotAvailable)
            );
            assert_eq!(t.requests, vec![(4, 6), (4, 6)]);
            // ... from another source: dropped outright.
            assert_eq!(
                t.from(FORGER, &control(Kind::NotAvailable, 1, 4, 2), 21 * US),
                Err(DropReason::ForeignSource)
            );
            t.from(GENUINE, &data(1, 4, 2, true), 30 * US).unwrap();
            assert_eq!(t.take(), vec![msg(4), msg(5), msg(6)]);
            assert_eq!(t.sub.counters().unrecoverable, 0);
        }

        #[test]
        fn forged_throttled_notices_neither_end_nor_stall_the_stream() {
            let mut t = following();
            t.from(GENUINE, &data(1, 6, 1, false), US).unwrap();
            t.tick(20 * US);
            assert_eq!(t.requests, vec![(4, 6)]);
            // From another source: dropped; from the genuine address, a
            // counted notice at most, however many.
            assert_eq!(
                t.from(FORGER, &control(Kind::Throttled, 1, 4, 2), 21 * US),
                Err(DropReason::ForeignSource)
            );
            for i in 0..100 {
                t.from(GENUINE, &control(Kind::Throttled, 1, 4, 2), 22 * US + i)
                    .unwrap();
            }
            assert_eq!(t.sub.counters().throttled, 100);
            assert!(t.take().is_empty());
            // The hole is still asked for and filled.
            t.tick(1_000 * US);
            assert_eq!(t.requests, vec![(4, 6), (4, 6)]);
            t.from(GENUINE, &data(1, 4, 2, true), 1_010 * US).unwrap();
            assert_eq!(t.take(), vec![msg(4), msg(5), msg(6)]);
            assert_eq!(t.sub.counters().unrecoverable, 0);
        }

        #[test]
        fn a_genuine_not_available_repeated_is_a_gap() {
            let mut t = following();
            t.from(GENUINE, &data(1, 6, 1, false), US).unwrap();
            t.tick(20 * US);
            let na = control(Kind::NotAvailable, 1, 4, 2);
            t.from(GENUINE, &na, 21 * US).unwrap_err();
            t.from(GENUINE, &na, 22 * US).unwrap();
            assert_eq!(t.take(), vec![Ev::Gap(4, 6), msg(6)]);
        }

        #[test]
        fn foreign_sources_are_dropped_and_a_confirmed_change_is_a_restart() {
            let mut t = following();
            assert_eq!(
                t.from(FORGER, &data(1, 4, 1, false), US),
                Err(DropReason::ForeignSource)
            );
            assert_eq!(
                t.from(FORGER, &data(1, 4, 1, true), US),
                Err(DropReason::ForeignSource)
            );
            // Interleaved with the bound source, the new one never confirms.
            for i in 0..10u64 {
                assert_eq!(
                    t.from(FORGER, &data(9, 1, 1, false), 2 * US + i),
                    Err(DropReason::ForeignSource)
                );
                t.from(GENUINE, &data(1, 4 + i, 1, false), 2 * US + i)
                    .unwrap();
            }
            assert_eq!(t.take(), (4..14).map(msg).collect::<Vec<_>>());
            // While the bound source is alive, even three in a row from a
            // new one change nothing.
            for s in [1u64, 2, 3] {
                assert_eq!(
                    t.from(3, &data(20, s, 1, false), 100 * US),
                    Err(DropReason::ForeignSource)
                );
            }
            // A restarted publisher on a new address, once the old one has
            // been silent for the publisher timeout (5 ms): three in a row.
            for (i, s) in [1u64, 2, 3].into_iter().enumerate() {
                let r = t.from(3, &data(20, s, 1, false), 6_000 * US);
                assert_eq!(r.is_ok(), i == 2, "{r:?}");
            }
            assert_eq!(t.sub.bound_source(Line::A), Some(3));
            t.tick(6_100 * US);
            // The new incarnation's first two are asked of the new source.
            assert_eq!(t.requests, vec![(1, 3)]);
            t.from(3, &data(20, 1, 2, true), 6_110 * US).unwrap();
            assert_eq!(t.take(), vec![Ev::Restart(20), msg(1), msg(2), msg(3)]);
            // The old source is now the foreign one.
            assert_eq!(
                t.from(GENUINE, &data(1, 14, 1, false), 6_200 * US),
                Err(DropReason::ForeignSource)
            );
        }

        #[test]
        fn with_a_key_only_sealed_datagrams_are_believed_even_from_the_bound_source() {
            let key = crate::recovery::mac::Key([9; 32]);
            let mut t = T::new(SubscriberConfig {
                key: Some(key),
                ..guarded()
            });
            let mut seal = crate::recovery::Mac::new(key, 256);
            let mut forge = crate::recovery::Mac::new(crate::recovery::mac::Key([1; 32]), 256);
            t.from(GENUINE, seal.seal(&data(1, 1, 2, false)), 0)
                .unwrap();
            // Spoofed from the bound source: unsealed, or sealed with a guess.
            assert_eq!(
                t.from(GENUINE, &control(Kind::EndOfStream, 1, 2, 1), US),
                Err(DropReason::Unauthenticated)
            );
            for _ in 0..5 {
                assert_eq!(
                    t.from(GENUINE, forge.seal(&control(Kind::Heartbeat, 9, 2, 1)), US),
                    Err(DropReason::BadMac)
                );
            }
            t.from(GENUINE, seal.seal(&data(1, 3, 1, false)), 2 * US)
                .unwrap();
            assert_eq!(t.take(), vec![msg(1), msg(2), msg(3)]);
            let d = t.sub.counters().drops;
            assert_eq!((d.unauthenticated, d.bad_mac), (1, 5));
        }

        #[test]
        fn a_pinned_source_is_never_replaced() {
            let mut t = T::new(guarded());
            t.sub.bind(Line::A, GENUINE);
            for s in 1..=10 {
                assert_eq!(
                    t.from(FORGER, &data(1, s, 1, false), 0),
                    Err(DropReason::ForeignSource)
                );
            }
            assert_eq!(t.sub.epoch(), None);
            t.from(GENUINE, &data(1, 1, 1, false), 0).unwrap();
            assert_eq!(t.take(), vec![msg(1)]);
        }
    }
}
