//! RC sessions on a real RDMA device (Soft-RoCE in the lane): flow control
//! under a flood, the inline and registered-buffer send paths, the errors
//! for an absent acceptor and a killed peer.
//!
//! Without RDMA every test prints `SKIPPED: no RDMA device` and passes;
//! with `MDBUS_REQUIRE_RDMA=1` that is a failure. Peer processes are this
//! binary re-run through the ignored `child_entry` test; parent and child
//! synchronise through the child's stdout lines, never through sleeps.

mod verbs_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout};

use mdbus::config::{SessionConfig, SessionMode, VerbsConfig};
use mdbus::transport::verbs::{self, RcSession};
use mdbus::transport::SessionEnd;
use mdbus::{Bus, Config, Error};
use verbs_support::{addr_a, hw_counter, rdma_or_skip, unique_port};

const ROLE: &str = "MDBUS_VERBS_RC_ROLE";
const CONFIG: &str = "MDBUS_VERBS_RC_CONFIG";

fn payload(seq: u64, len: usize) -> Vec<u8> {
    seq.to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

fn len_of(seq: u64, max: usize) -> usize {
    1 + (seq as usize * 7919) % max
}

/// A bus config with session `o` on a fresh port, plus `extra` lines in
/// `[sessions.o]` and `verbs` lines in `[verbs]`.
fn toml(extra: &str, verbs: &str) -> String {
    format!(
        "transport = \"verbs\"\n[verbs]\n{verbs}\n[sessions.o]\naddress = \"{}:{}\"\n{extra}\n",
        addr_a(),
        unique_port()
    )
}

fn bus(toml: &str) -> Bus {
    Bus::new(Config::from_toml_str(toml, "<test>").unwrap()).unwrap()
}

/// A peer process running `role` with config `toml`.
struct Peer {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(role: &str, toml: &str) -> Peer {
        let mut child = mdbus_testkit::child::child_command()
            .env(ROLE, role)
            .env(CONFIG, toml)
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Peer { child, out }
    }

    fn line(&mut self) -> String {
        loop {
            let mut l = String::new();
            assert!(
                self.out.read_line(&mut l).unwrap() > 0,
                "peer exited without reporting"
            );
            if let Some(rest) = l.strip_prefix("peer: ") {
                return rest.trim_end().to_string();
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn report(msg: &str) {
    let mut o = std::io::stdout().lock();
    writeln!(o, "peer: {msg}").unwrap();
    o.flush().unwrap();
}

#[test]
#[ignore = "entry point of peer processes started by the other tests"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let bus = bus(&std::env::var(CONFIG).unwrap());
    let mut s = bus.session_connect("o").unwrap();
    match role.as_str() {
        // Send three messages, then wait (without polling) to be killed.
        "send-then-wait" => {
            for seq in 1..=3 {
                s.send(&payload(seq, 16)).unwrap();
            }
            report("sent");
        }
        // Never poll: the acceptor runs out of credit.
        "idle" => report("connected"),
        other => panic!("unknown role {other}"),
    }
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
}

/// 100 000 messages through a session whose receiver has 8 buffers: all
/// arrive, in order, intact; no receiver-not-ready NAK is ever sent (the
/// queue pairs have rnr_retry 0, so one would also fail the sender).
#[test]
fn flood_with_small_capacity_loses_nothing_and_never_hits_rnr() {
    if !rdma_or_skip("flood_with_small_capacity_loses_nothing_and_never_hits_rnr") {
        return;
    }
    flood("send", 100_000);
}

/// The ring modes through an 8-slot ring: every slot reused thousands of
/// times (a stale lap is never taken for a new message), credits never
/// overrun the ring (write-imm: never an RNR), every message intact.
#[test]
fn ring_modes_flood_eight_slots_in_order() {
    if !rdma_or_skip("ring_modes_flood_eight_slots_in_order") {
        return;
    }
    flood("write", 20_000);
    flood("write-imm", 20_000);
}

/// `total` messages of every size up to 64 bytes through a capacity of 8
/// in session mode `mode`: in order, intact, no RNR counted.
/// Sends `done`, then polls until the sender's orderly close.
fn done_then_peer_closed(s: &mut mdbus::Session) {
    s.send(b"done").unwrap();
    let err = loop {
        if let Err(e) = s.poll(|_| panic!("nothing after done")) {
            break e;
        }
    };
    assert!(matches!(err, Error::PeerClosed { .. }), "{err}");
}

fn flood(mode: &str, total: u64) {
    assert_eq!(verbs::RNR_RETRY, 0);
    let device = verbs::detect(&VerbsConfig::default()).unwrap().device;
    let counters = ["send_rnr_err", "rcvd_rnr_err", "retry_rnr_exceeded_err"];
    let before: Vec<Option<u64>> = counters.iter().map(|c| hw_counter(&device, c)).collect();

    const MAX: usize = 64;
    let toml = toml(
        &format!("capacity = 8\nmax_message = {MAX}\nmode = \"{mode}\""),
        "signal_every = 4\nrecv_batch = 16",
    );
    let bus = bus(&toml);
    let receiver = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut s = bus.session_accept("o").unwrap();
            let mut next = 1u64;
            while next <= total {
                s.poll(|m| {
                    assert_eq!(m.seq(), next, "in order");
                    assert_eq!(m.payload().len(), len_of(next, MAX));
                    assert_eq!(m.payload(), payload(next, m.payload().len()), "intact");
                    next += 1;
                })
                .unwrap();
            }
            done_then_peer_closed(&mut s);
            s.stats()
        }
    });
    let mut s = bus.session_connect("o").unwrap();
    for seq in 1..=total {
        let len = len_of(seq, MAX);
        let mut c = s.claim(len).unwrap();
        c.copy_from_slice(&payload(seq, len));
        assert_eq!(c.commit().unwrap(), seq);
    }
    let mut done = Vec::new();
    while done.is_empty() {
        s.poll(|m| done.push(m.payload().to_vec())).unwrap();
    }
    assert_eq!(done, vec![b"done".to_vec()]);
    s.close();
    let rstats = receiver.join().unwrap();
    assert_eq!(rstats.received, total, "{mode}");
    let after: Vec<Option<u64>> = counters.iter().map(|c| hw_counter(&device, c)).collect();
    assert_eq!(
        before, after,
        "{mode}: RNR counters {counters:?} of {device} moved"
    );
    // No vacuous pass: say which counters were checked, and require one
    // where the device is known to have them (rxe: send_rnr_err and
    // rcvd_rnr_err). Without any, rnr_retry 0 still fails a send loudly.
    let checked: Vec<&str> = counters
        .iter()
        .zip(&before)
        .filter(|(_, v)| v.is_some())
        .map(|(c, _)| *c)
        .collect();
    if checked.is_empty() {
        eprintln!(
            "RNR NOT COUNTED: {device} has none of the counters {counters:?}; only rnr_retry 0 (a failed send) guards against RNR"
        );
        assert!(
            !device.starts_with("rxe"),
            "{device} is Soft-RoCE, which has RNR counters, but none was read"
        );
    } else {
        eprintln!("RNR counted on {device}: {checked:?} unchanged");
    }
}

fn pair(scfg: &SessionConfig, vcfg: &VerbsConfig) -> (RcSession, RcSession) {
    let acceptor = std::thread::spawn({
        let (scfg, vcfg) = (scfg.clone(), vcfg.clone());
        move || RcSession::accept("o", &scfg, &vcfg)
    });
    let b = RcSession::connect("o", scfg, vcfg).unwrap();
    let a = acceptor.join().unwrap().unwrap();
    (a, b)
}

fn send(s: &mut RcSession, bytes: &[u8], ts: u64) -> u64 {
    let flags = if ts != 0 {
        mdbus::wire::FLAG_TIMESTAMP
    } else {
        0
    };
    for _ in 0..50_000_000u64 {
        if let Some(buf) = s.try_claim(bytes.len()) {
            buf.copy_from_slice(bytes);
            return s.commit(bytes.len(), flags, ts).unwrap();
        }
        s.check_peer().unwrap();
    }
    panic!("no credit came back");
}

fn receive(s: &mut RcSession) -> (u64, Vec<u8>, Option<u64>) {
    let mut got = None;
    for _ in 0..50_000_000u64 {
        s.poll(1, &mut |m: mdbus::Message<'_>| {
            got = Some((m.seq(), m.payload().to_vec(), m.timestamp()))
        })
        .unwrap();
        if let Some(g) = got.take() {
            return g;
        }
    }
    panic!("nothing arrived");
}

/// Small messages go inline, larger ones from the registered send pool;
/// with inline off everything goes from the pool. Both paths carry every
/// size intact, with header fields.
#[test]
fn inline_and_registered_sends_carry_every_size() {
    if !rdma_or_skip("inline_and_registered_sends_carry_every_size") {
        return;
    }
    // Ring modes: 4000 bytes are four packets on rxe's 1024-byte MTU, so
    // the trailer is placed by the last of them.
    let modes = [SessionMode::Send, SessionMode::Write, SessionMode::WriteImm];
    for (mode, inline) in modes.into_iter().flat_map(|m| [(m, true), (m, false)]) {
        let scfg = SessionConfig {
            address: format!("{}:{}", addr_a(), unique_port()),
            max_message: 4000,
            capacity: 16,
            mode,
            ..SessionConfig::default()
        };
        let vcfg = VerbsConfig {
            inline,
            max_inline: 64,
            ..VerbsConfig::default()
        };
        let (mut a, mut b) = pair(&scfg, &vcfg);
        if inline {
            assert!(a.inline_limit() >= 64, "granted {}", a.inline_limit());
        } else {
            assert_eq!(a.inline_limit(), 0);
        }
        assert_eq!(a.peer_pid(), std::process::id());
        assert_eq!(a.max_message(), 4000);
        let edge = a.inline_limit().saturating_sub(mdbus::wire::HEADER_LEN);
        let sizes = [0usize, 1, edge.max(1), edge + 1, 200, 1000, 4000];
        for (i, &len) in sizes.iter().enumerate() {
            let seq = i as u64 + 1;
            let bytes = payload(seq * 31, len);
            let ts = if i % 2 == 0 {
                1_700_000_000_000_000_000 + seq
            } else {
                0
            };
            assert_eq!(send(&mut a, &bytes, ts), seq);
            let (got_seq, got, got_ts) = receive(&mut b);
            assert_eq!(got_seq, seq);
            assert_eq!(got, bytes, "{mode:?}, inline {inline}, {len} bytes");
            assert_eq!(got_ts, (ts != 0).then_some(ts));
            // And back the other way.
            assert_eq!(send(&mut b, &bytes, 0), seq);
            assert_eq!(receive(&mut a).1, bytes);
        }
    }
}

/// Connecting where nobody listens names the address and what rdma_cm
/// said, after the timeout.
#[test]
fn connect_without_acceptor_names_the_address() {
    if !rdma_or_skip("connect_without_acceptor_names_the_address") {
        return;
    }
    let address = format!("{}:{}", addr_a(), unique_port());
    let scfg = SessionConfig {
        address: address.clone(),
        // Room for several attempts: the connection manager resends a lost
        // request only after seconds.
        connect_timeout: std::time::Duration::from_secs(3),
        ..SessionConfig::default()
    };
    let err = RcSession::connect("o", &scfg, &VerbsConfig::default()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::NoPeer { .. }), "{text}");
    assert!(
        text.starts_with(&format!(
            "session `o`: no peer at {address}: rdma_cm: REJECTED (status "
        )),
        "{text}"
    );
    assert!(text.ends_with(" (tried for 3000 ms)"), "{text}");
}

/// A peer killed with SIGKILL while idle: what it sent is delivered, then
/// an `RdmaFault` with its pid and the last sequence delivered.
#[test]
fn killed_peer_is_reported_after_its_messages() {
    if !rdma_or_skip("killed_peer_is_reported_after_its_messages") {
        return;
    }
    let toml = toml("capacity = 16", "");
    let bus = bus(&toml);
    let mut peer = Peer::spawn("send-then-wait", &toml);
    let mut s = bus.session_accept("o").unwrap();
    assert_eq!(peer.line(), "sent");
    let pid = peer.pid();
    let mut got = vec![];
    while got.len() < 3 {
        s.poll(|m| got.push(m.seq())).unwrap();
    }
    assert_eq!(got, vec![1, 2, 3]);
    peer.kill();
    let mut err = None;
    for _ in 0..50_000_000u64 {
        match s.poll(|m| panic!("unexpected message {}", m.seq())) {
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let err = err.expect("the death is reported");
    let text = err.to_string();
    match err {
        Error::RdmaFault {
            acked, delivered, ..
        } => {
            assert_eq!((acked, delivered), (0, 3), "{text}");
            assert!(
                text.contains(&format!(
                    "the peer (pid {pid}) disconnected without closing"
                )),
                "{text}"
            );
            assert!(
                text.ends_with("the messages received up to sequence 3 were delivered"),
                "{text}"
            );
        }
        other => panic!("expected RdmaFault, got {other}"),
    }
}

/// A sender waiting for credit from a peer that is killed gets an error,
/// not a hang.
#[test]
fn sender_waiting_for_credit_learns_of_the_death() {
    if !rdma_or_skip("sender_waiting_for_credit_learns_of_the_death") {
        return;
    }
    let address = format!("{}:{}", addr_a(), unique_port());
    let toml =
        format!("transport = \"verbs\"\n[sessions.o]\naddress = \"{address}\"\ncapacity = 4\n");
    let scfg = SessionConfig {
        address,
        capacity: 4,
        ..SessionConfig::default()
    };
    let mut peer = Peer::spawn("idle", &toml);
    let mut s = RcSession::accept("o", &scfg, &VerbsConfig::default()).unwrap();
    assert_eq!(peer.line(), "connected");
    for seq in 1..=4 {
        assert_eq!(send(&mut s, &payload(seq, 8), 0), seq);
    }
    assert!(s.try_claim(8).is_none(), "the idle peer returned no credit");
    // Idle checks confirm the unsignaled sends with one signaled write.
    for _ in 0..50_000_000u64 {
        if s.acked() == 4 {
            break;
        }
        s.check_peer().unwrap();
    }
    assert_eq!(s.acked(), 4, "the sends were confirmed");
    peer.kill();
    let mut err = None;
    for _ in 0..50_000_000u64 {
        assert!(s.try_claim(8).is_none(), "no credit from a dead peer");
        if let Err(e) = s.check_peer() {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("the death is reported to the waiting sender");
    match &err {
        // Its device acknowledged all four before it was killed.
        Error::RdmaFault { acked, .. } => assert_eq!(*acked, 4, "{err}"),
        other => panic!("expected RdmaFault, got {other}"),
    }
}

/// Inline is really used: a caller that overwrites its buffer right after
/// committing (before any completion is polled) must not change what
/// arrives, because an inline send was copied into the work request during
/// the post. On Soft-RoCE the device also reads a registered buffer during
/// the post (rxe runs the requester in the post's system call), so there
/// the check that the sends went inline is `inline_limit` covering them;
/// on a NIC that reads by DMA later, removing IBV_SEND_INLINE makes the
/// receiver see the overwritten bytes.
#[test]
fn inline_send_is_copied_at_post_time() {
    if !rdma_or_skip("inline_send_is_copied_at_post_time") {
        return;
    }
    let scfg = SessionConfig {
        address: format!("{}:{}", addr_a(), unique_port()),
        max_message: 32,
        capacity: 64,
        ..SessionConfig::default()
    };
    let vcfg = VerbsConfig {
        inline: true,
        max_inline: 64,
        signal_every: 64,
        ..VerbsConfig::default()
    };
    let (mut a, mut b) = pair(&scfg, &vcfg);
    assert!(
        a.inline_limit() >= mdbus::wire::HEADER_LEN + 32,
        "granted {} bytes inline",
        a.inline_limit()
    );
    for seq in 1..=500u64 {
        let bytes = payload(seq, 32);
        for _ in 0..50_000_000u64 {
            if let Some(buf) = a.try_claim(32) {
                buf.copy_from_slice(&bytes);
                break;
            }
            a.check_peer().unwrap();
        }
        assert_eq!(a.commit(32, 0, 0).unwrap(), seq);
        a.test_scribble_last_send(0xee);
        let (got_seq, got, _) = receive(&mut b);
        assert_eq!(got_seq, seq);
        assert_eq!(got, bytes, "message {seq} changed after its post");
    }
}

/// Selective signaling and credits on a real queue pair: with
/// signal_every 4, 40 sends give exactly 10 completions (every send
/// signaled would give 40, none 0); a receiver that does not poll stops
/// the sender after `capacity` messages, and its polling gives the credit
/// back.
#[test]
fn signaling_and_credits_on_a_real_qp() {
    if !rdma_or_skip("signaling_and_credits_on_a_real_qp") {
        return;
    }
    let scfg = SessionConfig {
        address: format!("{}:{}", addr_a(), unique_port()),
        max_message: 16,
        capacity: 8,
        ..SessionConfig::default()
    };
    let vcfg = VerbsConfig {
        signal_every: 4,
        recv_batch: 2,
        ..VerbsConfig::default()
    };
    let (mut a, mut b) = pair(&scfg, &vcfg);
    // Credits: 8 buffers at the peer, then nothing until it polls.
    for seq in 1..=8u64 {
        let buf = a.try_claim(8).expect("credit for the first 8");
        buf.copy_from_slice(&seq.to_le_bytes());
        assert_eq!(a.commit(8, 0, 0).unwrap(), seq);
    }
    assert!(a.try_claim(8).is_none(), "a 9th message without credit");
    let mut seq = 8u64;
    let mut next = 1u64;
    while seq < 40 {
        b.poll(64, &mut |m: mdbus::Message<'_>| {
            assert_eq!(m.seq(), next);
            next += 1;
        })
        .unwrap();
        while let Some(buf) = a.try_claim(8) {
            seq += 1;
            buf.copy_from_slice(&seq.to_le_bytes());
            assert_eq!(a.commit(8, 0, 0).unwrap(), seq);
            if seq == 40 {
                break;
            }
        }
    }
    while next <= 40 {
        b.poll(64, &mut |m: mdbus::Message<'_>| {
            assert_eq!(m.seq(), next);
            next += 1;
        })
        .unwrap();
    }
    // Every message arrived, so every signaled send completes.
    for _ in 0..50_000_000u64 {
        if a.send_completions() >= 10 {
            break;
        }
        a.test_reap_sends();
    }
    assert_eq!(a.send_completions(), 10, "40 sends, signal every 4");
    assert_eq!(a.acked(), 40);
}

/// The library's own count of verbs work: with `recv_batch` 2, the
/// receiver reposts its 40 buffers two per `ibv_post_recv` and takes one
/// receive completion per message; the sender rings one doorbell per
/// request.
#[test]
fn verbs_work_counts_posts_doorbells_and_completions() {
    if !rdma_or_skip("verbs_work_counts_posts_doorbells_and_completions") {
        return;
    }
    let scfg = SessionConfig {
        address: format!("{}:{}", addr_a(), unique_port()),
        max_message: 16,
        capacity: 8,
        ..SessionConfig::default()
    };
    let vcfg = VerbsConfig {
        signal_every: 4,
        recv_batch: 2,
        ..VerbsConfig::default()
    };
    let (mut a, mut b) = pair(&scfg, &vcfg);
    let (a0, b0) = (a.verbs_work(), b.verbs_work());
    // Set-up posted the receive ring (at least `capacity` buffers).
    assert!(b0.recv_wrs >= 8 && b0.recv_doorbells >= 1, "{b0:?}");
    let mut next = 1u64;
    for seq in 1..=40u64 {
        send(&mut a, &seq.to_le_bytes(), 0);
        while next <= seq {
            b.poll(64, &mut |m: mdbus::Message<'_>| {
                assert_eq!(m.seq(), next);
                next += 1;
            })
            .unwrap();
        }
    }
    let (a1, b1) = (a.verbs_work(), b.verbs_work());
    assert_eq!(b1.recv_wrs - b0.recv_wrs, 40, "{b0:?} -> {b1:?}");
    assert_eq!(
        b1.recv_doorbells - b0.recv_doorbells,
        20,
        "{b0:?} -> {b1:?}"
    );
    assert!(b1.completions - b0.completions >= 40, "{b0:?} -> {b1:?}");
    // Credit writes: one each time the sender is down to half its 8
    // credits, so 10 for 40 messages (keep-alives may add more).
    assert!(b1.send_wrs - b0.send_wrs >= 10, "{b0:?} -> {b1:?}");
    assert!(a1.send_wrs - a0.send_wrs >= 40, "{a0:?} -> {a1:?}");
    // Sessions post one request per doorbell.
    assert_eq!(
        a1.send_wrs - a0.send_wrs,
        a1.send_doorbells - a0.send_doorbells
    );
    assert_eq!(
        b1.send_wrs - b0.send_wrs,
        b1.send_doorbells - b0.send_doorbells
    );
    // The sender has no receive traffic in send mode (its ring was posted
    // at set-up only).
    assert_eq!(a1.recv_wrs, a0.recv_wrs, "{a0:?} -> {a1:?}");
}

/// The counters file carries a `write`-mode session's waiting: the
/// receiver's announced sleeps and the immediate that woke it, and the
/// sender's immediate, as `sess.N.verbs_*` (copied in after each wait).
#[test]
fn write_mode_wake_counts_reach_the_counters_file() {
    if !rdma_or_skip("write_mode_wake_counts_reach_the_counters_file") {
        return;
    }
    let bus = bus(&toml("mode = \"write\"\nmax_message = 64", ""));
    let path = bus
        .counters_path()
        .expect("counters are on by default")
        .to_path_buf();
    let reader = || mdbus::counters::CountersReader::open(&path).unwrap();
    let sum = |label_end: &str| -> u64 {
        let r = reader();
        r.labels()
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with("sess.o") && l.ends_with(label_end))
            .map(|(i, _)| r.value(i).unwrap())
            .sum()
    };
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut s = bus.session_accept("o").unwrap();
            tid_tx.send(mdbus_testkit::threads::tid()).unwrap();
            let mut got = Vec::new();
            while got.is_empty() {
                let n = s.poll(|m| got.push(m.payload().to_vec())).unwrap();
                if n == 0 {
                    // The first wait arms the wake; the next sleeps until
                    // the sender's immediate.
                    s.wait_for_data(std::time::Duration::from_secs(600))
                        .unwrap();
                }
            }
            done_then_peer_closed(&mut s);
            got
        }
    });
    let mut s = bus.session_connect("o").unwrap();
    let tid = tid_rx.recv().unwrap();
    // The receiver announced a sleep (in the file) and sleeps.
    while sum(".verbs_sleeps_armed") < 1 {
        s.poll(|_| panic!("nothing before the message")).unwrap();
        std::thread::yield_now();
    }
    mdbus_testkit::threads::until_blocked_in_wait(tid);
    s.send(b"wake").unwrap();
    let mut done = Vec::new();
    while done.is_empty() {
        s.poll(|m| done.push(m.payload().to_vec())).unwrap();
    }
    assert_eq!(done, vec![b"done".to_vec()]);
    s.close();
    assert_eq!(receiver.join().unwrap(), vec![b"wake".to_vec()]);
    // Both ends closed: their last counts are in the file.
    let sent = sum(".verbs_wake_imms_sent");
    let taken = sum(".verbs_wake_imms_received");
    assert_eq!((sent, taken), (1, 1), "one immediate for the one sleep");
    assert!(sum(".verbs_sleeps_armed") >= 1);
    assert!(sum(".verbs_receive_events") >= 1, "the immediate woke it");
}
