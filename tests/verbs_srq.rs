//! Many RC sessions to one acceptor with a shared receive queue
//! (`receive = "shared"`): 1, 16, 64 and 256 sessions, every message
//! delivered in order and exactly once per session, from one acceptor
//! thread polling them all through `bus.session_accept` handles; and the
//! benchmark behind docs/SCALING.md's "Sessions" table (ignored: run it
//! with `--ignored srq_bench --nocapture`).
//!
//! Without RDMA every test prints `SKIPPED: no RDMA device` and passes;
//! with `MDBUS_REQUIRE_RDMA=1` that is a failure.

mod verbs_support;

use std::time::Instant;

use mdbus::config::{ReceiveMode, SessionConfig, VerbsConfig};
use mdbus::transport::verbs::RcSession;
use mdbus::transport::SessionEnd;
use mdbus::{Bus, Config, Error};
use verbs_support::{addr_a, rdma_or_skip, unique_port};

/// Payload of message `seq` of session `s`: both numbers, repeated.
fn payload(s: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut word = [0u8; 12];
    word[..4].copy_from_slice(&(s as u32).to_le_bytes());
    word[4..].copy_from_slice(&seq.to_le_bytes());
    word.iter().copied().cycle().take(len).collect()
}

fn len_of(seq: u64) -> usize {
    12 + (seq as usize * 7919) % 100
}

/// A bus config with sessions s0..s{n-1} on one address.
fn config(n: usize, receive: &str, capacity: usize, pool: u32) -> Config {
    let port = unique_port();
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[sessions.s{i}]\naddress = \"{}:{port}\"\nreceive = \"{receive}\"\ncapacity = {capacity}\nmax_message = 128\nconnect_timeout = \"60s\"\n",
            addr_a()
        ));
    }
    Config::from_toml_str(
        &format!("transport = \"verbs\"\n[verbs]\nshared_receive_buffers = {pool}\n{text}"),
        "<test>",
    )
    .unwrap()
}

/// `n` sessions to one acceptor; each initiator sends `per` messages,
/// round-robin over the sessions, then closes. The acceptor thread polls
/// every session until each has delivered all `per` in order and then
/// reports the close.
fn many_sessions(n: usize, per: u64) {
    let cfg = config(n, "shared", 16, 4096);
    let bus = Bus::new(cfg).unwrap();
    let sender = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut ends: Vec<_> = (0..n)
                .map(|i| bus.session_connect(&format!("s{i}")).unwrap())
                .collect();
            for seq in 1..=per {
                for (i, e) in ends.iter_mut().enumerate() {
                    let sent = e.send(&payload(i, seq, len_of(seq))).unwrap();
                    assert_eq!(sent, seq);
                }
            }
            for e in ends {
                e.close();
            }
        }
    });
    let mut ends: Vec<_> = (0..n)
        .map(|i| bus.session_accept(&format!("s{i}")).unwrap())
        .collect();
    let mut next = vec![1u64; n];
    let mut closed = vec![false; n];
    while closed.iter().any(|c| !c) {
        for (i, e) in ends.iter_mut().enumerate() {
            if closed[i] {
                continue;
            }
            let want = &mut next[i];
            match e.poll(|m| {
                assert_eq!(m.seq(), *want, "session s{i} out of order");
                assert_eq!(
                    m.payload(),
                    &payload(i, *want, len_of(*want))[..],
                    "session s{i} message {want}"
                );
                *want += 1;
            }) {
                Ok(_) => {}
                Err(Error::PeerClosed { .. }) => closed[i] = true,
                Err(e) => panic!("session s{i}: {e}"),
            }
        }
    }
    sender.join().unwrap();
    for (i, got) in next.iter().enumerate() {
        assert_eq!(*got, per + 1, "session s{i} delivered {} of {per}", got - 1);
    }
}

#[test]
fn one_session() {
    if rdma_or_skip("one_session") {
        many_sessions(1, 2_000);
    }
}

#[test]
fn sixteen_sessions() {
    if rdma_or_skip("sixteen_sessions") {
        many_sessions(16, 300);
    }
}

#[test]
fn sixty_four_sessions() {
    if rdma_or_skip("sixty_four_sessions") {
        many_sessions(64, 100);
    }
}

#[test]
fn two_hundred_fifty_six_sessions() {
    if rdma_or_skip("two_hundred_fifty_six_sessions") {
        many_sessions(256, 40);
    }
}

/// Capacities beyond the shared pool are refused at accept, naming the
/// keys; the sessions already accepted keep working.
#[test]
fn a_session_beyond_the_pool_is_refused() {
    if !rdma_or_skip("a_session_beyond_the_pool_is_refused") {
        return;
    }
    // Two sessions of 16 on a pool of 16: the second does not fit.
    let cfg = config(2, "shared", 16, 16);
    let bus = Bus::new(cfg).unwrap();
    let sender = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut e = bus.session_connect("s0").unwrap();
            for seq in 1..=100u64 {
                e.send(&payload(0, seq, len_of(seq))).unwrap();
            }
            e.close();
        }
    });
    let mut s0 = bus.session_accept("s0").unwrap();
    let e = bus.session_accept("s1").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("sessions.s1.capacity 16 does not fit")
            && text.contains("verbs.shared_receive_buffers 16"),
        "{text}"
    );
    let mut want = 1u64;
    loop {
        match s0.poll(|m| {
            assert_eq!(m.seq(), want);
            want += 1;
        }) {
            Ok(_) => {}
            Err(Error::PeerClosed { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(want, 101);
    sender.join().unwrap();
}

/// Sessions of a shared acceptor belong to the thread that made it: a
/// poll from another thread fails with an error instead of racing.
#[test]
fn a_shared_session_polled_on_another_thread_fails() {
    if !rdma_or_skip("a_shared_session_polled_on_another_thread_fails") {
        return;
    }
    let cfg = config(1, "shared", 16, 64);
    let bus = Bus::new(cfg).unwrap();
    let sender = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut e = bus.session_connect("s0").unwrap();
            e.send(b"hello").unwrap();
            e
        }
    });
    let s0 = bus.session_accept("s0").unwrap();
    let peer = sender.join().unwrap();
    let text = std::thread::spawn(move || {
        let mut s0 = s0;
        let e = s0.poll(|_| {}).unwrap_err().to_string();
        // Dropped on this thread too: logged, nothing touched.
        drop(s0);
        e
    })
    .join()
    .unwrap();
    assert!(
        text.contains("belong to the thread that accepted"),
        "{text}"
    );
    drop(peer);
}

/// One benchmark run: `n` sessions, `per` messages each, acceptor polling
/// all. Returns (receive-side registered bytes of the acceptor, all its
/// registered bytes, messages per second).
fn bench_run(
    n: usize,
    per: u64,
    receive: ReceiveMode,
    capacity: usize,
    pool: u32,
) -> (u64, u64, f64) {
    // A block of ports per run: per-session acceptors use n of them.
    static RUN: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    // Below the ephemeral range, where the initiators' own ports are.
    let port = 20_000 + 300 * RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scfg = SessionConfig {
        address: format!("{}:{port}", addr_a()),
        receive,
        capacity,
        max_message: 32,
        connect_timeout: std::time::Duration::from_secs(120),
        ..SessionConfig::default()
    };
    let vcfg = VerbsConfig {
        shared_receive_buffers: pool,
        ..VerbsConfig::default()
    };
    // Per-session acceptors each listen on an address of their own (one
    // listener serves one session at a time); shared ones on one.
    let cfg_of = move |i: usize| {
        let mut c = scfg.clone();
        if receive == ReceiveMode::PerSession {
            c.address = format!("{}:{}", addr_a(), port + i as u16);
        }
        c
    };
    let sender = std::thread::spawn({
        let vcfg = vcfg.clone();
        let cfg_of = cfg_of.clone();
        move || {
            let mut ends: Vec<RcSession> = (0..n)
                .map(|i| RcSession::connect(&format!("b{i}"), &cfg_of(i), &vcfg).unwrap())
                .collect();
            let msg = [7u8; 32];
            for _ in 0..per {
                for e in ends.iter_mut() {
                    loop {
                        if let Some(b) = e.try_claim(msg.len()) {
                            b.copy_from_slice(&msg);
                            e.commit(msg.len(), 0, 0).unwrap();
                            break;
                        }
                        // Credits come back as the acceptor reposts.
                        e.poll(1, &mut |_| {}).unwrap();
                    }
                }
            }
            for mut e in ends {
                e.close();
            }
        }
    });
    let mut ends: Vec<RcSession> = (0..n)
        .map(|i| RcSession::accept(&format!("b{i}"), &cfg_of(i), &vcfg).unwrap())
        .collect();
    let (mut recv_bytes, mut all_bytes) = (0u64, 0u64);
    for (i, e) in ends.iter().enumerate() {
        assert_eq!(e.receives_shared(), receive == ReceiveMode::Shared);
        let (send, ring, pool) = e.registered_bytes();
        // The shared pool once: every session reports the same one.
        let pool = if i == 0 { pool } else { 0 };
        recv_bytes += ring + pool;
        all_bytes += send + ring + pool;
    }
    let total = n as u64 * per;
    let mut got = 0u64;
    let t0 = Instant::now();
    let mut closed = vec![false; n];
    while closed.iter().any(|c| !c) {
        for (i, e) in ends.iter_mut().enumerate() {
            if closed[i] {
                continue;
            }
            match e.poll(256, &mut |_| got += 1) {
                Ok(_) => {}
                Err(Error::PeerClosed { .. }) => closed[i] = true,
                Err(e) => panic!("b{i}: {e}"),
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    sender.join().unwrap();
    assert_eq!(got, total);
    (recv_bytes, all_bytes, total as f64 / secs)
}

/// Registered bytes and message rate at 1, 16, 64 and 256 sessions: one
/// shared receive queue of 4096 buffers split evenly (each session's
/// capacity 4096 / sessions) against a receive ring per session of the
/// same capacity, and of the default capacity 4096 (up to 16 sessions:
/// more do not fit the guest's memory). Prints one JSON object per run.
#[test]
#[ignore]
fn srq_bench() {
    if !rdma_or_skip("srq_bench") {
        return;
    }
    let total: u64 = std::env::var("MDBUS_SRQ_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    for n in [1usize, 16, 64, 256] {
        let per = total / n as u64;
        let split = 4096 / n;
        for (mode, receive, capacity) in [
            ("shared", ReceiveMode::Shared, split),
            ("per-session", ReceiveMode::PerSession, split),
            ("per-session", ReceiveMode::PerSession, 4096),
        ] {
            // The default capacity: at one session that is the row above.
            if mode == "per-session" && capacity == 4096 && (n > 16 || split == 4096) {
                continue;
            }
            let (recv, all, rate) = bench_run(n, per, receive, capacity, 4096);
            println!(
                "{{\"sessions\":{n},\"receive\":\"{mode}\",\"capacity\":{capacity},\"messages\":{},\"receive_registered_bytes\":{recv},\"registered_bytes\":{all},\"messages_per_s\":{rate:.0}}}",
                n as u64 * per
            );
        }
    }
}
