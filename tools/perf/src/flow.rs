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
    /// The last sequence number the publisher's end of stream named.
    pub end: Option<u64>,
    /// Nanoseconds from the first message received to the last.
    pub ns: u64,
}

/// Polls `subscriber` under a [`watchdog`] until the stream ends or, with
/// `stop_at`, until message `stop_at` was delivered or reported lost;
/// calls `on_message` for each message. A publisher that went down
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
    let mut trouble = None;
    let mut span = Span::default();
    let mut dog = watchdog(peer, common, "waiting for messages");
    while end.is_none() && !reached {
        let n = subscriber.poll(|e| match e {
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
    Ok(Drained { end, ns: span.ns() })
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
    fn messages_are_due_evenly_from_the_first() {
        assert_eq!(due_ns(1, 1000), 0);
        assert_eq!(due_ns(2, 1000), 1_000_000);
        assert_eq!(due_ns(1001, 1000), 1_000_000_000);
    }
}
