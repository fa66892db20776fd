//! What the measurements of a stream of messages share: the two sides,
//! the counter in each payload, pacing to a rate, and serving a datagram
//! stream after its last message. `throughput` and `mcast` both use it;
//! neither imports the other.

use std::time::{Duration, Instant};

use mdbus_tool_support::percentiles::nanos;
use mdbus_tool_support::process::DoneSignal;

use crate::common::{interrupted, Common, Failure};

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
