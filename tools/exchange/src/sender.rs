//! The line sender: every packet of the day on A and on B, paced, each
//! copy dropped with its line's probability; heartbeats while idle; the
//! end of session; the next day when repeating.

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use mdbus_feed::moldudp64;

use super::day::Day;
use super::{add, next_session, ExchangeConfig, Rng, Shared};

/// End-of-session packets sent at the end of a day, as exchanges repeat
/// them, this far apart.
const END_OF_SESSION_REPEATS: u32 = 3;
const END_OF_SESSION_SPACING: Duration = Duration::from_millis(10);
/// Pause between two days when repeating.
const OVERNIGHT: Duration = Duration::from_secs(1);
/// Waits shorter than this are not slept: the packet goes out a little
/// early, and the pace (measured from the start) stays exact on average.
const MIN_SLEEP: Duration = Duration::from_micros(100);
/// Longest single sleep, so a stop is noticed promptly.
const MAX_SLEEP: Duration = Duration::from_millis(20);

pub(super) fn run(shared: &Shared, config: &ExchangeConfig, socket: &UdpSocket, first: Arc<Day>) {
    let mut rng = Rng(config.seed);
    let mut day = first;
    let mut synth = config.synth.clone();
    let mut n = 0u64;
    loop {
        if !send_day(shared, config, socket, &day, &mut rng) {
            return;
        }
        add(&shared.stats.sessions_finished, 1);
        if !config.repeat {
            shared.set_finished();
            return;
        }
        if !sleep_unless_stopped(shared, OVERNIGHT) {
            return;
        }
        n += 1;
        synth.seed = config.synth.seed.wrapping_add(n);
        match Day::generate(next_session(day.session), &synth, config.max_packet) {
            Ok(next) => {
                day = Arc::new(next);
                *shared.day.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&day);
            }
            Err(e) => {
                // The first day was generated with the same settings, so
                // this does not happen; stop rather than loop.
                log::error!("exchange simulator: cannot generate the next day: {e}");
                shared.set_finished();
                return;
            }
        }
    }
}

/// Sends one day; false if stopped first.
fn send_day(
    shared: &Shared,
    config: &ExchangeConfig,
    socket: &UdpSocket,
    day: &Day,
    rng: &mut Rng,
) -> bool {
    let stats = &shared.stats;
    let send = |bytes: &[u8], to: SocketAddrV4| {
        if socket.send_to(bytes, to).is_err() {
            add(&stats.send_errors, 1);
            false
        } else {
            true
        }
    };
    let both = |bytes: &[u8]| {
        if send(bytes, config.line_a) {
            add(&stats.packets_a, 1);
        }
        if send(bytes, config.line_b) {
            add(&stats.packets_b, 1);
        }
    };
    let start = Instant::now();
    let mut last_send = start;
    for p in &day.index {
        if shared.stopping() {
            return false;
        }
        if config.messages_per_second > 0 {
            let due_ns =
                u128::from(p.first - 1) * 1_000_000_000 / u128::from(config.messages_per_second);
            let due = start + Duration::from_nanos(u64::try_from(due_ns).unwrap_or(u64::MAX));
            loop {
                let now = Instant::now();
                let heartbeat_due = last_send + config.heartbeat_interval;
                if now >= heartbeat_due && now < due {
                    both(&moldudp64::heartbeat(day.session, p.first));
                    add(&stats.heartbeats, 1);
                    last_send = now;
                    continue;
                }
                let wait = due.min(heartbeat_due).saturating_duration_since(now);
                if wait < MIN_SLEEP {
                    break;
                }
                if !sleep_unless_stopped(shared, wait) {
                    return false;
                }
            }
        }
        let bytes = day.packet(p);
        let drop_a = rng.chance(config.drop_a);
        let drop_b = rng.chance(config.drop_b);
        if drop_a {
            add(&stats.dropped_a, 1);
            add(&stats.dropped_messages_a, p.count);
        } else if send(bytes, config.line_a) {
            add(&stats.packets_a, 1);
            add(&stats.messages_a, p.count);
        }
        if drop_b {
            add(&stats.dropped_b, 1);
            add(&stats.dropped_messages_b, p.count);
        } else if send(bytes, config.line_b) {
            add(&stats.packets_b, 1);
            add(&stats.messages_b, p.count);
        }
        if drop_a && drop_b {
            add(&stats.dropped_both, 1);
        }
        day.mark_sent(p.first + p.count);
        add(&stats.packets, 1);
        add(&stats.messages, p.count);
        last_send = Instant::now();
    }
    let end = moldudp64::end_of_session(day.session, day.end);
    for i in 0..END_OF_SESSION_REPEATS {
        if i > 0 && !sleep_unless_stopped(shared, END_OF_SESSION_SPACING) {
            return false;
        }
        both(&end);
    }
    true
}

/// Sleeps `d` in short steps; false if a stop was requested meanwhile.
fn sleep_unless_stopped(shared: &Shared, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if shared.stopping() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(MAX_SLEEP));
    }
}
