//! What the measurements of a stream of messages share: the two sides,
//! the counter in each payload, pacing to a rate, serving a datagram
//! stream after its last message, the subscriber's receive loop and the
//! exit status of a run that lost messages. `throughput` and `mcast` both use it;
//! neither imports the other.

use std::time::{Duration, Instant};

use mdbus::Event;
use mdbus_tool_support::percentiles::{nanos, Span};
use mdbus_tool_support::process::{wait_for_go, DoneSignal};

use crate::common::{interrupted, watchdog, Common, Failure};
use crate::peer::Peer;

/// The two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Publishes (sends).
    #[value(name = "pub")]
    Pub,
    /// Subscribes (receives), counts and prints.
    #[value(name = "sub")]
    Sub,
}

/// The message counter a one-way or round-trip measurement writes into
/// the first eight bytes of each payload (little endian; short payloads
/// read as zero-padded).
#[inline(always)]
pub fn counter(payload: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = payload.len().min(8);
    bytes[..n].copy_from_slice(&payload[..n]);
    u64::from_le_bytes(bytes)
}

/// The largest counter a `len`-byte payload carries (all ones in its
/// first min(len, 8) bytes): reserved for [`write_end`].
fn all_ones(len: usize) -> u64 {
    match len.min(8) {
        8 => u64::MAX,
        w => (1u64 << (8 * w)) - 1,
    }
}

/// Writes message number `i` (from 1) as the counter of `payload`: its
/// first min(len, 8) bytes, little endian, wrapped below the all-ones
/// value [`write_end`] reserves (a 2-byte message counts 0 to 65534 and
/// round again). [`counter`] reads back [`counter_of`]`(len, i)`.
#[inline(always)]
pub fn write_counter(payload: &mut [u8], i: u64) {
    let (len, n) = (payload.len(), payload.len().min(8));
    payload[..n].copy_from_slice(&counter_of(len, i).to_le_bytes()[..n]);
}

/// What [`counter`] reads from a `len`-byte payload written by
/// [`write_counter`] with message number `i`.
#[inline(always)]
pub fn counter_of(len: usize, i: u64) -> u64 {
    match len {
        // Message numbers stay below u64::MAX / 2: never the end mark, and
        // no division on the hot path of the usual sizes.
        8.. => i,
        0 => 0,
        _ => i % all_ones(len),
    }
}

/// Marks `payload` as the end of a run (the all-ones counter): ping's
/// last message, and a timed (-D) stream's, after which the receiver
/// stops.
pub fn write_end(payload: &mut [u8]) {
    let n = payload.len().min(8);
    payload[..n].fill(0xff);
}

/// Whether `payload` is the end mark of [`write_end`].
#[inline(always)]
pub fn is_end(payload: &[u8]) -> bool {
    !payload.is_empty() && counter(payload) == all_ones(payload.len())
}

/// Whether a loop running since `t0` for `duration` (-D) should stop
/// before message `i`: at every message when `paced` (pacing reads the
/// clock anyway), else every 256, so a loop sending flat out does not
/// read the clock on every send.
#[inline(always)]
pub fn time_is_up(duration: Option<Duration>, paced: bool, t0: Instant, i: u64) -> bool {
    match duration {
        Some(d) => (paced || i % 256 == 0) && t0.elapsed() >= d,
        None => false,
    }
}

/// Spins until `due` ns after `t0`; `duty` runs every 64 spins.
#[inline(always)]
pub fn pace(
    t0: Instant,
    due: u64,
    mut duty: impl FnMut() -> Result<(), Failure>,
) -> Result<(), Failure> {
    let mut spins = 0u32;
    while nanos(t0.elapsed()) < due {
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 {
            duty()?;
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// When message `i` (from 1) is due at `rate` per second, in ns from the
/// start.
pub fn due_ns(i: u64, rate: u64) -> u64 {
    (u128::from(i - 1) * 1_000_000_000 / u128::from(rate)) as u64
}

/// After the last message of a datagram stream: answers retransmit
/// requests and sends heartbeats until the parent says the subscriber is
/// done, or for `linger` when this side runs alone.
pub fn serve(
    publisher: &mut mdbus::Publisher,
    done: Option<&DoneSignal>,
    common: &Common,
    linger: Duration,
) -> Result<(), Failure> {
    use mdbus::wait::Wait;
    let mut wait = common.wait;
    let t0 = Instant::now();
    loop {
        publisher.service()?;
        match done {
            Some(done) if done.is_done() => return Ok(()),
            None if t0.elapsed() >= linger => return Ok(()),
            _ => {}
        }
        interrupted()?;
        wait.wait();
    }
}

impl Role {
    /// The name `--role` takes, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Pub => "pub",
            Role::Sub => "sub",
        }
    }
}

/// The publisher's start: when spawned, waits for the parent's go (it
/// subscribes first, so nothing is published unseen) and listens for its
/// done signal; run by hand, says so on stderr.
pub fn start_publishing(common: &Common, name: &str) -> Result<Option<DoneSignal>, Failure> {
    if common.spawned {
        wait_for_go()?;
        Ok(Some(DoneSignal::listen()))
    } else {
        eprintln!("mdbus-perf (pub): publishing on `{name}`");
        Ok(None)
    }
}

/// How a subscriber's run ended: [`drain_stream`]'s answer.
pub struct Drained {
    /// The last sequence number the publisher's end of stream (or its end
    /// mark) named.
    pub end: Option<u64>,
    /// Whether the stream ended with an end mark ([`write_end`]), which
    /// the subscriber's count of received messages includes.
    pub end_mark: bool,
    /// Nanoseconds from the first message received to the last.
    pub ns: u64,
}

/// Polls `subscriber` under a [`watchdog`] until the stream ends (or a
/// message carries the end mark of a timed run) or, with `stop_at`, until
/// message `stop_at` was delivered or reported lost; calls `on_message`
/// for each message but the end mark. A publisher that went down
/// (described by `down`, given its last sequence number) or restarted, or
/// a source gap (these tools publish none), fails the run.
pub fn drain_stream(
    subscriber: &mut mdbus::Subscriber,
    peer: Option<&mut Peer>,
    common: &Common,
    name: &str,
    stop_at: Option<u64>,
    down: fn(u64) -> String,
    mut on_message: impl FnMut(&mdbus::Message<'_>),
) -> Result<Drained, Failure> {
    let mut reached = false;
    let mut end = None;
    let mut end_mark = false;
    let mut trouble = None;
    let mut span = Span::default();
    let mut dog = watchdog(peer, common, "waiting for messages");
    while end.is_none() && !reached {
        let n = subscriber.poll(|e| match e {
            Event::Message(m) if is_end(m.payload()) => {
                end = Some(m.seq().saturating_sub(1));
                end_mark = true;
            }
            Event::Message(m) => {
                on_message(&m);
                reached |= stop_at.is_some_and(|count| m.seq() >= count);
            }
            Event::Gap { to, .. } | Event::Overrun { to, .. } => {
                reached |= stop_at.is_some_and(|count| to > count)
            }
            Event::EndOfStream { last_seq } => end = Some(last_seq),
            Event::PublisherDown { last_seq } => trouble = Some(down(last_seq)),
            Event::PublisherRestarted { epoch } => {
                trouble = Some(format!("the publisher restarted (epoch {epoch})"))
            }
            Event::SourceGap { from, to } => {
                trouble = Some(format!("unexpected source gap {from}..{to}"))
            }
        })?;
        if let Some(what) = trouble.take() {
            return Err(Failure::Run(format!("stream `{name}`: {what}")));
        }
        if n > 0 {
            span.mark();
            dog.progress();
        } else if end.is_none() && !reached {
            dog.idle()?;
        }
    }
    Ok(Drained {
        end,
        end_mark,
        ns: span.ns(),
    })
}

/// The exit status of a run that sent `sent` messages and lost `lost` of
/// them (for the reasons `why` names): [`EXIT_DATA_LOST`](mdbus_tool_support::output::EXIT_DATA_LOST)
/// when any were lost and loss is not allowed; says what on stderr.
pub fn loss_exit_code(lost: u64, sent: u64, why: &str, allow_loss: bool) -> u8 {
    let lost = (lost > 0).then(|| format!("{lost} of {sent} messages lost ({why})"));
    mdbus_tool_support::output::completed(lost.as_deref(), allow_loss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_reads_the_first_eight_bytes_little_endian() {
        let mut payload = [0xffu8; 32];
        payload[..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(counter(&payload), 0x0102_0304_0506_0708);
        assert_eq!(counter(&[1, 0]), 1);
    }

    #[test]
    fn short_counters_wrap_below_the_end_mark() {
        let mut two = [0u8; 2];
        for i in [1u64, 2, 65_534, 65_535, 65_536, 1 << 40] {
            write_counter(&mut two, i);
            assert_eq!(counter(&two), counter_of(2, i), "{i}");
            assert!(!is_end(&two), "{i}");
        }
        write_counter(&mut two, 65_535);
        assert_eq!(counter(&two), 0);
        write_end(&mut two);
        assert!(is_end(&two));

        let mut eight = [0u8; 32];
        write_counter(&mut eight, 12_345);
        assert_eq!(counter(&eight), 12_345);
        assert!(!is_end(&eight));
        write_end(&mut eight);
        assert!(is_end(&eight));
        assert_eq!(counter(&eight), u64::MAX);
        assert!(!is_end(&[]));
    }

    #[test]
    fn a_timed_loop_reads_the_clock_every_message_only_when_paced() {
        let (t0, zero) = (Instant::now(), Some(Duration::ZERO));
        assert!(!time_is_up(None, true, t0, 256));
        assert!(time_is_up(zero, true, t0, 1));
        assert!(!time_is_up(zero, false, t0, 1));
        assert!(time_is_up(zero, false, t0, 256));
        assert!(!time_is_up(Some(Duration::from_secs(3600)), true, t0, 256));
    }

    #[test]
    fn messages_are_due_evenly_from_the_first() {
        assert_eq!(due_ns(1, 1000), 0);
        assert_eq!(due_ns(2, 1000), 1_000_000);
        assert_eq!(due_ns(1001, 1000), 1_000_000_000);
    }
}
