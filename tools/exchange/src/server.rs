//! The re-request server: MoldUDP64 request packets in, the messages asked
//! for out, to whoever asked.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Duration;

use mdbus_feed::moldudp64::{PacketBuilder, Request};

use super::day::Day;
use super::{add, Shared};

pub(super) fn run(shared: &Shared, socket: &UdpSocket, max_packet: usize) {
    let stats = &shared.stats;
    // Requests are 20 bytes; anything longer is malformed whatever its
    // size, so a datagram cut to this buffer is judged the same.
    let mut buf = [0u8; 2048];
    let mut out = vec![0u8; max_packet];
    while !shared.stopping() {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => {
                log::warn!("exchange simulator: re-request socket: {e}");
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        let Ok(request) = Request::decode(&buf[..n]) else {
            add(&stats.requests_malformed, 1);
            continue;
        };
        let day = shared.day();
        let first = request.sequence;
        let end = first
            .saturating_add(u64::from(request.count))
            .min(day.sent_upto());
        if request.session != day.session || first == 0 || first >= end {
            add(&stats.requests_ignored, 1);
            continue;
        }
        let (packets, errors) = answer(&day, first, end, &mut out, max_packet, |p| {
            socket.send_to(p, from).is_ok()
        });
        add(&stats.packets_resent, packets);
        add(&stats.send_errors, errors);
        add(&stats.messages_resent, end - first);
        add(&stats.requests_served, 1);
    }
}

/// Packs messages `first..end` of `day` into packets of at most
/// `max_packet` bytes and hands each to `send`; returns the packets sent
/// and the sends that failed.
fn answer(
    day: &Day,
    first: u64,
    end: u64,
    out: &mut [u8],
    max_packet: usize,
    mut send: impl FnMut(&[u8]) -> bool,
) -> (u64, u64) {
    let (mut sent, mut failed) = (0, 0);
    let mut s = first;
    while s < end {
        let Ok(mut b) = PacketBuilder::with_max_size(out, day.session, s, max_packet) else {
            return (sent, failed);
        };
        while s < end {
            let Some(m) = day.message(s) else { break };
            if b.push(m).is_err() {
                break;
            }
            s += 1;
        }
        if b.is_empty() {
            // Nothing fits or the day lacks the message: cannot happen for
            // a validated max_packet and a range below `sent_upto`.
            return (sent, failed);
        }
        if send(b.finish()) {
            sent += 1;
        } else {
            failed += 1;
        }
    }
    (sent, failed)
}
