//! Faults injected into RC sessions on a real RDMA device (Soft-RoCE in the
//! lane), each in the middle of a stream: the queue pair forced into the
//! error state, the netdev under the device taken down, a peer killed, a
//! remote write outside the registered credit words, and peers the
//! acceptor does not allow. Each must end in an `RdmaFault` (or a named
//! refusal) that says how far the exchange got: never a hang, never an
//! `Ok` after the fault is known. The faults of the data path run in every
//! session mode (send, write, write-imm); the ring modes also face a peer
//! writing past the ring and forging slot contents.
//!
//! Deleting the device is in `verbs_device_removal` (its own process).
//! Without RDMA every test prints `SKIPPED: no RDMA device` and passes;
//! with `MDBUS_REQUIRE_RDMA=1` that is a failure.

mod verbs_support;

use std::io::BufReader;
use std::process::{Child, ChildStdout, Command};
use std::time::Duration;

use mdbus::config::{SessionConfig, SessionMode, VerbsConfig};
use mdbus::transport::verbs::RcSession;
use mdbus::transport::SessionEnd;
use mdbus::Error;
use verbs_support::{addr_a, addr_b, rdma_or_skip, unique_port};

const ROLE: &str = "MDBUS_VERBS_FAULTS_ROLE";
const ADDRESS: &str = "MDBUS_VERBS_FAULTS_ADDRESS";
const MODE: &str = "MDBUS_VERBS_FAULTS_MODE";

/// Turns a hang into a failure: every fault here surfaces within the
/// 2 s keep-alive timeout plus an idle check, so a wait that passes this
/// means the mechanism under test is missing. No test passes because of
/// it; it only keeps a broken build from stalling the lane.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Calls `f` until it returns something; panics with `what` after
/// [`HANG_GUARD`].
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    let mut spins = 0u32;
    loop {
        if let Some(v) = f() {
            return v;
        }
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 && std::time::Instant::now() > deadline {
            panic!("{what} (waited {} s: a hang)", HANG_GUARD.as_secs());
        }
    }
}

fn scfg(address: String) -> SessionConfig {
    scfg_in(address, SessionMode::Send)
}

fn scfg_in(address: String, mode: SessionMode) -> SessionConfig {
    SessionConfig {
        address,
        mode,
        capacity: 16,
        max_message: 64,
        connect_timeout: Duration::from_secs(5),
        ..SessionConfig::default()
    }
}

/// Signal every send (so the acknowledged sequence is exact) and a short
/// keep-alive, so a silent peer is noticed within 2 s.
fn vcfg() -> VerbsConfig {
    VerbsConfig {
        signal_every: 1,
        keepalive_interval: Duration::from_millis(100),
        keepalive_timeout: Duration::from_secs(2),
        ..VerbsConfig::default()
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

fn send(s: &mut RcSession, seq: u64) {
    until("no credit came back", || {
        if let Some(buf) = s.try_claim(8) {
            buf.copy_from_slice(&seq.to_le_bytes());
            assert_eq!(s.commit(8, 0, 0).unwrap(), seq);
            return Some(());
        }
        s.check_peer().unwrap();
        None
    })
}

/// Receives exactly `n` messages, numbered from `first`.
fn receive(s: &mut RcSession, first: u64, n: u64) {
    let mut next = first;
    until("not every message arrived", || {
        s.poll(64, &mut |m: mdbus::Message<'_>| {
            assert_eq!(m.seq(), next);
            assert_eq!(m.payload(), next.to_le_bytes());
            next += 1;
        })
        .unwrap();
        (next == first + n).then_some(())
    })
}

/// Polls until an error; a message arriving after the fault fails.
fn poll_error(s: &mut RcSession) -> Error {
    until("the fault never surfaced in poll", || {
        s.poll(64, &mut |m: mdbus::Message<'_>| {
            panic!("message {} after the fault", m.seq())
        })
        .err()
    })
}

/// Checks the peer until an error, claiming nothing in between.
fn check_error(s: &mut RcSession) -> Error {
    until("the fault never surfaced in check_peer", || {
        s.check_peer().err()
    })
}

/// After an error every call reports one: no claim, no Ok.
fn stays_failed(s: &mut RcSession) {
    assert!(s.try_claim(8).is_none(), "claim after the fault");
    assert!(s.check_peer().is_err(), "check_peer Ok after the fault");
    assert!(
        s.poll(64, &mut |_: mdbus::Message<'_>| panic!(
            "message after the fault"
        ))
        .is_err(),
        "poll Ok after the fault"
    );
}

fn fault_fields(e: &Error) -> (String, u64, u64) {
    eprintln!("fault: {e}");
    match e {
        Error::RdmaFault {
            cause,
            acked,
            delivered,
            ..
        } => (cause.clone(), *acked, *delivered),
        other => panic!("expected RdmaFault, got {other}"),
    }
}

/// The queue pair of one end forced into the error state mid-stream: that
/// end reports its flushed receives with every sequence it sent
/// acknowledged; the other end, whose keep-alive is never acknowledged,
/// reports within the keep-alive timeout with every message delivered.
#[test]
fn qp_forced_to_error_fails_both_ends_with_their_sequences() {
    qp_forced_to_error(SessionMode::Send);
}

#[test]
fn qp_forced_to_error_in_write_mode() {
    qp_forced_to_error(SessionMode::Write);
}

#[test]
fn qp_forced_to_error_in_write_imm_mode() {
    qp_forced_to_error(SessionMode::WriteImm);
}

fn qp_forced_to_error(mode: SessionMode) {
    if !rdma_or_skip(&format!("qp_forced_to_error ({})", mode.as_str())) {
        return;
    }
    let (mut a, mut b) = pair(
        &scfg_in(format!("{}:{}", addr_a(), unique_port()), mode),
        &vcfg(),
    );
    for seq in 1..=10 {
        send(&mut a, seq);
    }
    receive(&mut b, 1, 10);
    for seq in 1..=3 {
        send(&mut b, seq);
    }
    receive(&mut a, 1, 3);
    a.test_force_qp_error().unwrap();

    let err = poll_error(&mut a);
    let text = err.to_string();
    let (cause, acked, delivered) = fault_fields(&err);
    // Write mode has no receives to flush: its keep-alive write is.
    assert!(cause.contains("flushed"), "{text}");
    assert_eq!((acked, delivered), (10, 3), "{text}");
    assert!(
        text.starts_with(&format!(
            "session `o` on {} port 1 (QP {:#x}) failed: ",
            a.device(),
            a.qp_num()
        )),
        "{text}"
    );
    stays_failed(&mut a);

    let err = poll_error(&mut b);
    let text = err.to_string();
    let (_, acked, delivered) = fault_fields(&err);
    assert_eq!((acked, delivered), (3, 10), "{text}");
    stays_failed(&mut b);
}

/// The peer's credit words are registered on their own: a write 64 bytes
/// into the same page completes with a remote access error, one into the
/// words does not.
#[test]
fn remote_write_outside_the_credit_words_is_refused() {
    if !rdma_or_skip("remote_write_outside_the_credit_words_is_refused") {
        return;
    }
    // A counters file of this process, as every Bus has: the failed
    // write is counted there per queue pair, queue and status.
    let dir = std::env::temp_dir().join(format!("mdbus-faults-ctr-{}", std::process::id()));
    let counters = mdbus::counters::registry::BusCounters::create(
        &mdbus::config::CountersConfig {
            dir: dir.clone(),
            name: "faults".into(),
            ..Default::default()
        },
        "faults",
    )
    .unwrap();
    let (mut a, mut b) = pair(&scfg(format!("{}:{}", addr_a(), unique_port())), &vcfg());
    send(&mut a, 1);
    receive(&mut b, 1, 1);
    // Inside: offset 4 of the 24 registered bytes (unused padding).
    assert!(a.test_remote_write(4, 4));
    let before = a.send_completions();
    until("the write inside never completed", || {
        a.check_peer().unwrap();
        (a.send_completions() > before).then_some(())
    });
    assert!(a.send_completions() > before, "the write inside completed");
    // Outside: byte 64 of the page, not registered for remote access.
    assert!(a.test_remote_write(64, 8));
    let err = check_error(&mut a);
    let text = err.to_string();
    let (cause, acked, _) = fault_fields(&err);
    assert!(cause.contains("remote access error"), "{text}");
    assert!(cause.contains("refused a remote write"), "{text}");
    assert_eq!(acked, 1, "{text}");
    stays_failed(&mut a);
    let r = mdbus::counters::CountersReader::open(counters.file().path()).unwrap();
    let label = format!(
        "qp.{}/{:#x}/send/rem_access_err.completion_errors",
        a.device(),
        a.qp_num()
    );
    let i = r
        .index_of(&label)
        .unwrap_or_else(|| panic!("no {label} in {:?}", r.labels()));
    assert_eq!(r.value(i), Some(1), "{label}");
    drop((a, b, counters));
    std::fs::remove_dir_all(&dir).ok();
}

/// The message ring is registered to the byte: a write with the ring's
/// rkey inside it completes, one at its end completes with a remote
/// access error, in both ring modes.
#[test]
fn remote_write_past_the_ring_is_refused() {
    if !rdma_or_skip("remote_write_past_the_ring_is_refused") {
        return;
    }
    for mode in [SessionMode::Write, SessionMode::WriteImm] {
        let (mut a, mut b) = pair(
            &scfg_in(format!("{}:{}", addr_a(), unique_port()), mode),
            &vcfg(),
        );
        send(&mut a, 1);
        receive(&mut b, 1, 1);
        let ring = a.test_ring_len();
        assert_eq!(ring, 16 * 128, "16 slots of 128 bytes (64-byte payloads)");
        // Inside: the first bytes of a slot, not its sequence word.
        assert!(a.test_ring_write(0, 8));
        let before = a.send_completions();
        until("the write inside never completed", || {
            a.check_peer().unwrap();
            (a.send_completions() > before).then_some(())
        });
        // The last byte inside, then the first byte past the end.
        assert!(a.test_ring_write(ring - 8, 8));
        assert!(a.test_ring_write(ring, 8));
        let err = check_error(&mut a);
        let text = err.to_string();
        let (cause, acked, _) = fault_fields(&err);
        assert!(cause.contains("remote access error"), "{mode:?}: {text}");
        assert_eq!(acked, 1, "{mode:?}: {text}");
        stays_failed(&mut a);
    }
}

/// A peer that forges its slot's trailer, in both ring modes: a sequence
/// other than the expected one, or a length beyond max_message, ends the
/// session with a protocol error naming the message; nothing is delivered.
#[test]
fn forged_ring_slots_end_the_session() {
    if !rdma_or_skip("forged_ring_slots_end_the_session") {
        return;
    }
    for mode in [SessionMode::Write, SessionMode::WriteImm] {
        for (seq, len, want) in [
            (7u64, 8u32, "its ring slot for message 2 holds sequence 7"),
            (2, 65, "its message 2 claims 65 payload bytes"),
            (2, u32::MAX, "claims 4294967295 payload bytes"),
        ] {
            let (mut a, mut b) = pair(
                &scfg_in(format!("{}:{}", addr_a(), unique_port()), mode),
                &vcfg(),
            );
            send(&mut a, 1);
            receive(&mut b, 1, 1);
            assert!(a.test_forge_slot(seq, len));
            let err = poll_error(&mut b);
            let text = err.to_string();
            assert!(matches!(err, Error::Protocol { .. }), "{mode:?}: {text}");
            assert!(text.contains(want), "{mode:?}: {text}");
            stays_failed(&mut b);
        }
    }
}

/// Both ends must run the same mode: the acceptor refuses an initiator
/// in another one, and says why in its log; the initiator hears the
/// refusal.
#[test]
fn a_peer_in_another_mode_is_refused() {
    if !rdma_or_skip("a_peer_in_another_mode_is_refused") {
        return;
    }
    let address = format!("{}:{}", addr_a(), unique_port());
    let mut s = scfg_in(address.clone(), SessionMode::Write);
    s.connect_timeout = Duration::from_secs(2);
    let acceptor = std::thread::spawn({
        let s = s.clone();
        move || RcSession::accept("o", &s, &vcfg())
    });
    let err = RcSession::connect("o", &scfg_in(address, SessionMode::Send), &vcfg()).unwrap_err();
    assert!(err.to_string().contains("refused by the acceptor"), "{err}");
    let err = acceptor.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
}

/// An acceptor that allows only another address refuses the initiator
/// (rdma_reject: the initiator hears `refused by the acceptor` at once) and
/// keeps waiting; one that allows the initiator's GID, written as IPv6,
/// takes it.
#[test]
fn acceptor_takes_only_allowed_peers() {
    if !rdma_or_skip("acceptor_takes_only_allowed_peers") {
        return;
    }
    let address = format!("{}:{}", addr_a(), unique_port());
    let mut s = scfg(address.clone());
    s.connect_timeout = Duration::from_secs(3);
    let deny = VerbsConfig {
        allow_peers: vec![addr_b()],
        ..vcfg()
    };
    let acceptor = std::thread::spawn({
        let (s, deny) = (s.clone(), deny.clone());
        move || RcSession::accept("o", &s, &deny)
    });
    let err = RcSession::connect("o", &s, &vcfg()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::NoPeer { .. }), "{text}");
    assert!(text.contains("refused by the acceptor"), "{text}");
    let err = acceptor.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");

    let allow = VerbsConfig {
        allow_peers: vec![format!("::ffff:{}", addr_a())],
        ..vcfg()
    };
    let s = scfg(format!("{}:{}", addr_a(), unique_port()));
    let acceptor = std::thread::spawn({
        let (s, allow) = (s.clone(), allow.clone());
        move || RcSession::accept("o", &s, &allow)
    });
    let mut b = RcSession::connect("o", &s, &vcfg()).unwrap();
    let mut a = acceptor.join().unwrap().unwrap();
    assert_eq!(a.rejected_peers(), 0);
    send(&mut b, 1);
    receive(&mut a, 1, 1);
}

/// A peer process killed while it streams: the receiver delivers what
/// arrived, in order, then reports the death with the last sequence it
/// delivered, which is what it counted.
#[test]
fn peer_killed_mid_stream_is_reported_with_the_last_delivered() {
    peer_killed_mid_stream(SessionMode::Send);
}

#[test]
fn peer_killed_mid_stream_in_write_mode() {
    peer_killed_mid_stream(SessionMode::Write);
}

#[test]
fn peer_killed_mid_stream_in_write_imm_mode() {
    peer_killed_mid_stream(SessionMode::WriteImm);
}

fn peer_killed_mid_stream(mode: SessionMode) {
    if !rdma_or_skip(&format!("peer_killed_mid_stream ({})", mode.as_str())) {
        return;
    }
    let address = format!("{}:{}", addr_a(), unique_port());
    let peer = Peer::spawn("stream", &address, mode);
    let mut s = RcSession::accept("o", &scfg_in(address, mode), &vcfg()).unwrap();
    // Let some of the stream arrive, then kill it while it sends.
    let mut next = 1u64;
    while next <= 100 {
        s.poll(64, &mut |m: mdbus::Message<'_>| {
            assert_eq!(m.seq(), next);
            next += 1;
        })
        .unwrap();
    }
    peer.kill();
    let err = until("the death never surfaced", || {
        s.poll(64, &mut |m: mdbus::Message<'_>| {
            assert_eq!(m.seq(), next, "in order up to the death");
            next += 1;
        })
        .err()
    });
    let text = err.to_string();
    let (cause, _, delivered) = fault_fields(&err);
    assert_eq!(delivered, next - 1, "{text}");
    assert!(cause.contains("disconnected without closing"), "{text}");
    stays_failed(&mut s);
}

/// The netdev under the device taken down mid-stream: the port-error
/// event ends both ends with their sequences. The netdev (and the
/// multicast route the lane puts on it) are restored afterwards, and the
/// port waited for, so later tests find the device as it was.
#[test]
fn netdev_down_mid_stream_fails_both_ends() {
    netdev_down_mid_stream(SessionMode::Send);
}

#[test]
fn netdev_down_mid_stream_in_write_mode() {
    netdev_down_mid_stream(SessionMode::Write);
}

#[test]
fn netdev_down_mid_stream_in_write_imm_mode() {
    netdev_down_mid_stream(SessionMode::WriteImm);
}

fn netdev_down_mid_stream(mode: SessionMode) {
    if !rdma_or_skip(&format!("netdev_down_mid_stream ({})", mode.as_str())) {
        return;
    }
    let (mut a, mut b) = pair(
        &scfg_in(format!("{}:{}", addr_a(), unique_port()), mode),
        &vcfg(),
    );
    let device = a.device().to_string();
    let netdev = netdev_of(&device);
    for seq in 1..=5 {
        send(&mut a, seq);
    }
    receive(&mut b, 1, 5);
    let restore = LinkDown::new(&device, &netdev);
    let ea = check_error(&mut a);
    let eb = poll_error(&mut b);
    drop(restore);
    let (cause_a, acked_a, _) = fault_fields(&ea);
    let (_, _, delivered_b) = fault_fields(&eb);
    assert!(cause_a.contains("IBV_EVENT_PORT_ERR"), "{ea}");
    assert_eq!(acked_a, 5, "{ea}");
    assert_eq!(delivered_b, 5, "{eb}");
    stays_failed(&mut a);
    stays_failed(&mut b);
}

/// The netdev of `device`'s port 1 (GID 1's), e.g. veth0 or d0.
fn netdev_of(device: &str) -> String {
    let p = format!("/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/1");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .to_string()
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Takes a netdev down; brings it back up on drop with its multicast
/// route, and waits for the device's port to be ACTIVE with its IPv4 GID.
struct LinkDown {
    device: String,
    netdev: String,
    mcast_route: bool,
}

impl LinkDown {
    fn new(device: &str, netdev: &str) -> LinkDown {
        let routes = run("ip", &["route", "show", "224.0.0.0/4"]);
        let mcast_route = routes.contains(&format!("dev {netdev}"));
        run("ip", &["link", "set", netdev, "down"]);
        LinkDown {
            device: device.into(),
            netdev: netdev.into(),
            mcast_route,
        }
    }
}

impl Drop for LinkDown {
    fn drop(&mut self) {
        run("ip", &["link", "set", &self.netdev, "up"]);
        if self.mcast_route {
            run(
                "ip",
                &["route", "replace", "224.0.0.0/4", "dev", &self.netdev],
            );
        }
        verbs_support::wait_port_ready(&self.device);
    }
}

/// A peer process running `role`.
struct Peer {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(role: &str, address: &str, mode: SessionMode) -> Peer {
        let mut child = mdbus_testkit::child::child_command()
            .env(ROLE, role)
            .env(ADDRESS, address)
            .env(MODE, mode.as_str())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Peer { child, out }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        drop(self.out);
    }
}

#[test]
#[ignore = "entry point of peer processes started by the other tests"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let address = std::env::var(ADDRESS).unwrap();
    let mode = std::env::var(MODE).unwrap().parse().unwrap();
    let mut s = RcSession::connect("o", &scfg_in(address, mode), &vcfg()).unwrap();
    match role.as_str() {
        // Send until killed.
        "stream" => {
            let mut seq = 1u64;
            loop {
                send(&mut s, seq);
                seq += 1;
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// The failure-detection and admission keys are checked at load, each
/// error naming its key (runs without RDMA).
#[test]
fn liveness_and_admission_keys_are_checked() {
    let load = |verbs: &str| {
        mdbus::Config::from_toml_str(&format!("[verbs]\n{verbs}\n"), "<test>")
            .map_err(|e| e.to_string())
    };
    let c = load("").unwrap();
    assert_eq!(c.verbs.keepalive_interval, Duration::from_secs(1));
    assert_eq!(c.verbs.keepalive_timeout, Duration::from_secs(5));
    assert!(c.verbs.allow_peers.is_empty());
    let c = load("allow_peers = [\"10.0.0.2\", \"::ffff:10.0.0.3\"]\nkeepalive_interval = \"200ms\"\nkeepalive_timeout = \"1s\"").unwrap();
    assert_eq!(c.verbs.allow_peers.len(), 2);
    let e = load("keepalive_interval = \"0s\"").unwrap_err();
    assert!(e.contains("verbs.keepalive_interval"), "{e}");
    let e = load("keepalive_interval = \"5s\"\nkeepalive_timeout = \"5s\"").unwrap_err();
    assert!(e.contains("verbs.keepalive_timeout"), "{e}");
    let e = load("allow_peers = [\"10.0.0.2\", \"host-b\"]").unwrap_err();
    assert!(e.contains("verbs.allow_peers[1]"), "{e}");
    assert!(e.contains("`host-b` is not an IP address"), "{e}");
}

/// Two initiators for one session: one gets it, the other fails, never
/// left pending. When its request reached the acceptor while the first was
/// being set up, it was refused (`rdma_reject`, status 28) and counted;
/// when it came after the listener was gone, nobody listened.
#[test]
fn a_second_initiator_is_refused_not_left_pending() {
    if !rdma_or_skip("a_second_initiator_is_refused_not_left_pending") {
        return;
    }
    let mut s = scfg(format!("{}:{}", addr_a(), unique_port()));
    s.connect_timeout = Duration::from_secs(3);
    let acceptor = std::thread::spawn({
        let s = s.clone();
        move || RcSession::accept("o", &s, &vcfg())
    });
    let initiators: Vec<_> = (0..2)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || RcSession::connect("o", &s, &vcfg()))
        })
        .collect();
    let results: Vec<_> = initiators.into_iter().map(|t| t.join().unwrap()).collect();
    let mut a = acceptor.join().unwrap().unwrap();
    let (ok, err): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
    assert_eq!(
        (ok.len(), err.len()),
        (1, 1),
        "one initiator gets the session"
    );
    let err = err.into_iter().next().unwrap().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::NoPeer { .. }), "{text}");
    a.check_peer().unwrap();
    if text.contains("refused by the acceptor") {
        assert_eq!(a.rejected_peers(), 1, "the refusal is counted: {text}");
    } else {
        assert!(a.rejected_peers() <= 1, "{text}");
    }
    let mut b = ok.into_iter().next().unwrap().unwrap();
    send(&mut b, 1);
    receive(&mut a, 1, 1);
}
