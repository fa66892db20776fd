//! What the datagram MAC costs: per 1,024-byte datagram, the time to
//! decode it without a MAC, and to seal it (publisher), verify it and
//! decode it (subscriber) with one. Prints HdrHistogram percentiles of
//! each, in ns per datagram, measured over batches of 64 datagrams (so the
//! clock's own cost is spread over 64).
//!
//! ```sh
//! cargo run --release -p mdbus --example mac_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use mdbus::recovery::frame::{self, DatagramHeader, Kind, Limits, DATAGRAM_HEADER_LEN, MAC_LEN};
use mdbus::recovery::mac::{Key, Mac};
use mdbus::wire::{Header, HEADER_LEN};

const BATCH: u64 = 64;
const ROUNDS: u64 = 100_000;

/// A data datagram of exactly `len` bytes: one message filling it.
fn datagram(len: usize) -> Vec<u8> {
    let mut b = vec![0u8; DATAGRAM_HEADER_LEN + HEADER_LEN];
    let payload = len - b.len();
    Header {
        seq: 7,
        len: payload as u32,
        flags: 0,
        timestamp: 0,
    }
    .encode(&mut b[DATAGRAM_HEADER_LEN..]);
    b.extend((0..payload).map(|i| i as u8));
    DatagramHeader {
        kind: Kind::Data,
        count: 1,
        stream_id: 1,
        length: len as u32,
        epoch: 1,
        seq: 7,
        arg: 0,
    }
    .encode(&mut b);
    b
}

fn measure(name: &str, mut one: impl FnMut()) {
    let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    for _ in 0..ROUNDS / 10 {
        one(); // warm up
    }
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..BATCH {
            one();
        }
        let per = (t.elapsed().as_nanos() as u64 / BATCH).max(1);
        h.record(per).unwrap();
    }
    println!(
        "{name:<40} p50 {:>6} ns  p99 {:>6} ns  p99.9 {:>6} ns  max {:>7} ns",
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
}

fn main() {
    let limits = Limits {
        stream_id: 1,
        max_datagram: 2048,
        max_message: 2048,
    };
    let plain = datagram(1024);
    let key = Key([0x5A; 32]);
    let mut sealer = Mac::new(key, 2048);
    let checker = Mac::new(key, 0);
    // The sealed datagram is the same content plus the 16-byte MAC.
    let sealed = sealer.seal(&datagram(1024 - MAC_LEN)).to_vec();
    assert_eq!(sealed.len(), 1024);
    println!(
        "{ROUNDS} batches of {BATCH} datagrams of 1,024 bytes, ns per datagram (BLAKE3 keyed, 16-byte MAC)"
    );
    measure("decode, no MAC", || {
        black_box(frame::decode(black_box(&plain), &limits).is_ok());
    });
    let unsealed = datagram(1024 - MAC_LEN);
    measure("seal (publisher)", || {
        black_box(sealer.seal(black_box(&unsealed)).len());
    });
    measure("verify + decode (subscriber)", || {
        let d = black_box(&sealed);
        black_box(checker.verify(d).is_ok() && frame::decode(d, &limits).is_ok());
    });
    let mut sealer2 = Mac::new(key, 2048);
    measure("seal + verify + decode (both ends)", || {
        let s = sealer2.seal(black_box(&unsealed));
        black_box(checker.verify(s).is_ok() && frame::decode(s, &limits).is_ok());
    });
}
