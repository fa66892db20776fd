//! Adaptive waiting through the public API: a subscriber that sleeps on its
//! transport's event source is woken by the next message (shared memory:
//! the segment's doorbell; UDP: epoll on the sockets), by the publisher's
//! end, and every block ends within `max_block` so that a loop checking a
//! stop flag set by SIGTERM exits. Sessions likewise: TCP sleeps in
//! poll(2) on the socket, RDMA on the receive completion channel (in
//! `write` mode woken by one immediate per sleep); an RDMA UD subscriber
//! on its receive
//! completion channel. The RDMA tests run in the Soft-RoCE guest
//! (scripts/guest-tests) and skip elsewhere (verbs_support).

mod verbs_support;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use mdbus::config::{SessionConfig, SessionMode, VerbsConfig};
use mdbus::transport::verbs::RcSession;
use mdbus::transport::SessionEnd;
use mdbus::wait::{Adaptive, AdaptiveConfig};
use mdbus::{Bus, Config, Event};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A shared-memory bus of its own (prefix per test) and the path of its
/// stream `s`'s segment.
fn shm_bus() -> (Bus, PathBuf) {
    let prefix = format!(
        "mdbus-adaptive-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let text = format!(
        "transport = \"shm\"\n[shm]\nprefix = \"{prefix}\"\nhuge_pages = \"off\"\nmlock = false\n\
         [threads]\nwait = \"adaptive\"\n"
    );
    let cfg = Config::from_toml_str(&text, "test.toml").unwrap();
    let path = cfg.shm.dir.join(format!("{prefix}.stream.s"));
    (Bus::new(cfg).unwrap(), path)
}

/// The segment's "a reader sleeps" flag (segment header, offset 3584).
fn asleep_flag(path: &PathBuf) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, 3584).unwrap();
    u64::from_ne_bytes(b)
}

/// Blocks only on the event source, for as long as a test can last: a
/// wake-up that does not come shows as a hung test, not a late success.
fn block_at_once(max_block: Duration) -> Adaptive {
    Adaptive::new(AdaptiveConfig {
        spin_polls: 1,
        quiet: Duration::ZERO,
        quiet_max: Duration::ZERO,
        max_block,
    })
}

#[test]
fn a_sleeping_shm_subscriber_is_woken_by_the_next_message() {
    let (bus, path) = shm_bus();
    let mut publisher = bus.publisher("s").unwrap();
    let mut subscriber = bus.subscriber("s").unwrap();
    let reader = std::thread::spawn(move || {
        let mut wait = block_at_once(Duration::from_secs(600));
        let mut got = Vec::new();
        while got.len() < 3 {
            subscriber
                .poll_wait(&mut wait, |e| {
                    if let Event::Message(m) = e {
                        got.push((m.seq(), m.payload().to_vec()));
                    }
                })
                .unwrap();
        }
        (got, wait.stats())
    });
    for i in 0..3u8 {
        // Publish only while the reader has announced its sleep.
        while asleep_flag(&path) == 0 {
            std::thread::yield_now();
        }
        publisher.publish(&[i; 4]).unwrap();
    }
    let (got, stats) = reader.join().unwrap();
    assert_eq!(got, vec![(1, vec![0; 4]), (2, vec![1; 4]), (3, vec![2; 4])]);
    // Every block ended with the bell (or with data already there), none
    // with the ten-minute timeout.
    assert!(stats.blocks >= 3, "{stats:?}");
    assert_eq!(stats.woken, stats.blocks, "{stats:?}");
    // The bell took the flag down.
    assert_eq!(asleep_flag(&path), 0);
}

#[test]
fn a_sleeping_shm_subscriber_is_woken_by_the_publishers_end() {
    let (bus, path) = shm_bus();
    let mut publisher = bus.publisher("s").unwrap();
    let mut subscriber = bus.subscriber("s").unwrap();
    publisher.publish(b"last").unwrap();
    let reader = std::thread::spawn(move || {
        let mut wait = block_at_once(Duration::from_secs(600));
        let mut end = None;
        while end.is_none() {
            subscriber
                .poll_wait(&mut wait, |e| {
                    if let Event::EndOfStream { last_seq } = e {
                        end = Some(last_seq);
                    }
                })
                .unwrap();
        }
        (end, wait.stats())
    });
    while asleep_flag(&path) == 0 {
        std::thread::yield_now();
    }
    drop(publisher);
    let (end, stats) = reader.join().unwrap();
    assert_eq!(end, Some(1));
    assert_eq!(stats.woken, stats.blocks, "{stats:?}");
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

#[test]
fn a_blocked_wait_lets_the_loop_see_sigterm() {
    // The handler sets a flag, as the tools' does; the signal goes to this
    // thread, not to the sleeping one, so only the bounded block lets the
    // sleeper see it.
    // SAFETY: installs an async-signal-safe handler (one atomic store).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_term as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut()), 0);
    }
    let (bus, path) = shm_bus();
    let _publisher = bus.publisher("s").unwrap();
    let mut subscriber = bus.subscriber("s").unwrap();
    let reader = std::thread::spawn(move || {
        let mut wait = block_at_once(Duration::from_millis(20));
        let mut polls = 0u64;
        while !STOP.load(Ordering::Relaxed) {
            subscriber.poll_wait(&mut wait, |_| {}).unwrap();
            polls += 1;
        }
        (polls, wait.stats())
    });
    while asleep_flag(&path) == 0 {
        std::thread::yield_now();
    }
    // SAFETY: raises a signal whose handler was installed above.
    assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
    let (polls, stats) = reader.join().unwrap();
    assert!(polls >= 1);
    // It slept (no message ever came, so no block ended with an event).
    assert!(stats.blocks >= 1, "{stats:?}");
    assert_eq!(stats.woken, 0, "{stats:?}");
}

/// A UDP bus with stream `s` on a loopback multicast group of its own.
fn udp_bus() -> Bus {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let port = 40_000 + (std::process::id() % 1_000) * 16 + n;
    let group = format!("239.255.{}.{}", 1 + std::process::id() % 250, 100 + n % 100);
    let text = format!(
        "transport = \"udp\"\n[threads]\nwait = \"adaptive\"\n[streams.s]\n\
         group = \"{group}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\n"
    );
    Bus::new(Config::from_toml_str(&text, "test.toml").unwrap()).unwrap()
}

#[test]
fn a_waiting_udp_subscriber_is_woken_by_the_next_datagram() {
    let bus = udp_bus();
    let mut publisher = bus.publisher("s").unwrap();
    let mut subscriber = bus.subscriber("s").unwrap();
    let reader = std::thread::spawn(move || {
        let mut wait = block_at_once(Duration::from_secs(600));
        let mut got = Vec::new();
        while got.is_empty() {
            subscriber
                .poll_wait(&mut wait, |e| {
                    if let Event::Message(m) = e {
                        got.push(m.payload().to_vec());
                    }
                })
                .unwrap();
        }
        (got, wait.stats())
    });
    publisher.publish(b"wake").unwrap();
    let (got, stats) = reader.join().unwrap();
    assert_eq!(got, vec![b"wake".to_vec()]);
    // Whether it slept before the datagram came or found it readable at
    // once, no block ended by the ten-minute timeout.
    assert_eq!(stats.woken, stats.blocks, "{stats:?}");
}

#[test]
fn the_adaptive_thresholds_are_checked_with_their_key() {
    for (line, key) in [
        ("adaptive_spin_polls = 0", "threads.adaptive_spin_polls"),
        ("adaptive_max_block = \"2s\"", "threads.adaptive_max_block"),
        ("adaptive_quiet = \"2m\"", "threads.adaptive_quiet"),
        ("adaptive_quiet_max = \"61s\"", "threads.adaptive_quiet_max"),
    ] {
        let text = format!("[threads]\nwait = \"adaptive\"\n{line}\n");
        let err = Config::from_toml_str(&text, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{err}");
        assert!(err.starts_with("f.toml"), "{err}");
    }
    let ok = Config::from_toml_str(
        "[threads]\nwait = \"adaptive\"\nadaptive_spin_polls = 5\nadaptive_quiet = \"1ms\"\nadaptive_quiet_max = \"8ms\"\nadaptive_max_block = \"10ms\"\n",
        "f.toml",
    )
    .unwrap();
    assert_eq!(
        ok.threads.adaptive(),
        AdaptiveConfig {
            spin_polls: 5,
            quiet: Duration::from_millis(1),
            quiet_max: Duration::from_millis(8),
            max_block: Duration::from_millis(10),
        }
    );
}

/// Session `o` on `transport` at `address` (TCP, or RDMA in `mode`).
fn session_bus(transport: &str, address: &str, mode: &str) -> Bus {
    let text = format!(
        "transport = \"{transport}\"\n[threads]\nwait = \"adaptive\"\n[sessions.o]\n\
         address = \"{address}\"\n{mode}\n"
    );
    Bus::new(Config::from_toml_str(&text, "test.toml").unwrap()).unwrap()
}

fn tcp_session_bus() -> Bus {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let port = 20_000 + (std::process::id() % 1_000) * 16 + n;
    session_bus("tcp", &format!("127.0.0.1:{port}"), "")
}

/// `count` messages, each sent only once the accepting end sleeps in its
/// wait (poll(2) or epoll_wait(2), read from /proc): all arrive, in order,
/// intact. Blocks last ten minutes: a wake-up that does not come hangs the
/// test. Returns the receiver's wait counts. Both ends are dropped before
/// it returns: a completion queue whose events were not all acknowledged
/// would hang there.
fn session_woken_by_each_message(bus: Bus, count: u64) -> mdbus::wait::AdaptiveStats {
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut s = bus.session_accept("o").unwrap();
            tx.send(mdbus_testkit::threads::tid()).unwrap();
            let mut wait = block_at_once(Duration::from_secs(600));
            let mut got = Vec::new();
            while (got.len() as u64) < count {
                s.poll_wait(&mut wait, |m| got.push((m.seq(), m.payload().to_vec())))
                    .unwrap();
            }
            (got, wait.stats())
        }
    });
    let mut c = bus.session_connect("o").unwrap();
    let tid = rx.recv().unwrap();
    for i in 0..count {
        mdbus_testkit::threads::until_blocked_in_wait(tid);
        c.send(&i.to_le_bytes()).unwrap();
    }
    let (got, stats) = receiver.join().unwrap();
    let want: Vec<_> = (0..count)
        .map(|i| (i + 1, i.to_le_bytes().to_vec()))
        .collect();
    assert_eq!(got, want);
    drop(c);
    stats
}

thread_local! {
    /// SIGUSR1 reached this thread: per thread, since tests run at once
    /// and each signals only its own sleeper (const-initialised, so the
    /// handler's access allocates nothing).
    static USR1: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

extern "C" fn on_usr1(_: libc::c_int) {
    USR1.with(|f| f.set(true));
}

/// The accepting end sleeps (ten-minute blocks, nothing sent); SIGUSR1
/// sent to its thread ends the block at once, and the loop sees the flag
/// the handler set. Returns the receiver's wait counts.
fn signal_wakes_a_sleeping_session(bus: Bus) -> mdbus::wait::AdaptiveStats {
    // SAFETY: installs an async-signal-safe handler (one atomic store);
    // SA_RESTART as the tools use it: poll(2) is interrupted regardless.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn({
        let bus = bus.clone();
        move || {
            let mut s = bus.session_accept("o").unwrap();
            // SAFETY: pthread_self has no preconditions.
            tx.send((mdbus_testkit::threads::tid(), unsafe {
                libc::pthread_self()
            }))
            .unwrap();
            let mut wait = block_at_once(Duration::from_secs(600));
            while !USR1.with(|f| f.get()) {
                assert_eq!(
                    s.poll_wait(&mut wait, |_| panic!("nothing was sent"))
                        .unwrap(),
                    0
                );
            }
            wait.stats()
        }
    });
    let c = bus.session_connect("o").unwrap();
    let (tid, thread) = rx.recv().unwrap();
    mdbus_testkit::threads::until_blocked_in_wait(tid);
    // SAFETY: the thread is alive: it returns only after the signal.
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
    let stats = receiver.join().unwrap();
    drop(c);
    // It slept, and no block ended with an event.
    assert!(stats.blocks >= 1, "{stats:?}");
    assert_eq!(stats.woken, 0, "{stats:?}");
    stats
}

#[test]
fn a_sleeping_tcp_session_is_woken_by_each_message() {
    let stats = session_woken_by_each_message(tcp_session_bus(), 3);
    // The socket needs no arming: every block ended with input.
    assert!(stats.woken >= 3, "{stats:?}");
    assert_eq!(stats.woken, stats.blocks, "{stats:?}");
}

#[test]
fn a_signal_ends_a_sleeping_tcp_sessions_wait() {
    signal_wakes_a_sleeping_session(tcp_session_bus());
}

/// The accepting end of an RDMA session in `mode` on the lane's first
/// device (verbs_support); None (skipped) without RDMA.
fn rc_bus(test: &str, mode: &str) -> Option<Bus> {
    if !verbs_support::rdma_or_skip(test) {
        return None;
    }
    let address = format!(
        "{}:{}",
        verbs_support::addr_a(),
        verbs_support::unique_port()
    );
    Some(session_bus(
        "verbs",
        &address,
        &format!("mode = \"{mode}\""),
    ))
}

#[test]
fn a_sleeping_rdma_session_is_woken_by_each_message_in_send_and_write_imm_modes() {
    for mode in ["send", "write-imm"] {
        let Some(bus) = rc_bus("rdma_session_woken", mode) else {
            return;
        };
        // Each message completes a receive while the receiver sleeps on the
        // channel: each wake is an event (the other blocks only arm).
        let stats = session_woken_by_each_message(bus, 3);
        assert!(stats.woken >= 3, "{mode}: {stats:?}");
    }
}

#[test]
fn a_session_woken_more_often_than_one_ack_batch_is_dropped_without_hanging() {
    // 70 events: 64 acknowledged in one batch, 6 left for the drop, which
    // must acknowledge them before destroying the queue (or hang).
    let Some(bus) = rc_bus("rdma_session_acks_events_on_drop", "send") else {
        return;
    };
    let stats = session_woken_by_each_message(bus, 70);
    assert!(stats.woken >= 70, "{stats:?}");
}

#[test]
fn a_sleeping_write_mode_session_is_woken_by_each_messages_immediate() {
    // No receive completion for a plain WRITE: the sleeping receiver asked
    // for a wake (its sleep generation in the sender's control block), and
    // the sender followed each message with a WRITE_WITH_IMM.
    let Some(bus) = rc_bus("rdma_write_mode_wakes", "write") else {
        return;
    };
    let stats = session_woken_by_each_message(bus, 3);
    assert!(stats.woken >= 3, "{stats:?}");
}

/// A `write`-mode session on the lane's first device: (acceptor,
/// initiator).
fn write_pair() -> (RcSession, RcSession) {
    let scfg = SessionConfig {
        address: format!(
            "{}:{}",
            verbs_support::addr_a(),
            verbs_support::unique_port()
        ),
        mode: SessionMode::Write,
        max_message: 64,
        capacity: 16,
        ..SessionConfig::default()
    };
    let vcfg = VerbsConfig::default();
    let acceptor = std::thread::spawn({
        let (scfg, vcfg) = (scfg.clone(), vcfg.clone());
        move || RcSession::accept("o", &scfg, &vcfg).unwrap()
    });
    let b = RcSession::connect("o", &scfg, &vcfg).unwrap();
    (acceptor.join().unwrap(), b)
}

fn send_one(s: &mut RcSession, seq: u64) {
    loop {
        if let Some(buf) = s.try_claim(8) {
            buf.copy_from_slice(&seq.to_le_bytes());
            assert_eq!(s.commit(8, 0, 0).unwrap(), seq);
            return;
        }
        // Out of credit: the receiver's count rides on its writes.
        s.check_peer().unwrap();
    }
}

/// A `write`-mode receiver left idle sleeps on its completion channel
/// after announcing a sleep generation; the next message wakes it with
/// one immediate (a channel event). While it then polls busily, the
/// messages are plain WRITEs: no more immediates. Its next sleep asks
/// for, and gets, exactly one more.
#[test]
fn a_sleeping_write_mode_receiver_is_woken_by_one_immediate_per_sleep() {
    if !verbs_support::rdma_or_skip("write_mode_one_wake_per_sleep") {
        return;
    }
    const BUSY: u64 = 300;
    let (mut rx, mut tx) = write_pair();
    // The receiver's sleep generations, published after each wait.
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn({
        let armed = armed.clone();
        move || {
            tid_tx.send(mdbus_testkit::threads::tid()).unwrap();
            let mut wait = block_at_once(Duration::from_secs(600));
            let mut got = Vec::new();
            let mut counts = Vec::new();
            // Sleeps until one message came, then polls busily for BUSY
            // more, then sleeps until the last one.
            for (want, sleep) in [(1, true), (1 + BUSY, false), (2 + BUSY, true)] {
                while (got.len() as u64) < want {
                    let n = rx
                        .poll(64, &mut |m: mdbus::Message<'_>| {
                            got.push((m.seq(), u64::from_le_bytes(m.payload().try_into().unwrap())))
                        })
                        .unwrap();
                    if !sleep {
                        continue;
                    }
                    if let Some(limit) = wait.after_poll(n) {
                        let event = rx.wait_idle(limit).unwrap();
                        wait.woke(event);
                    }
                    armed.store(rx.sleeps_armed(), Ordering::SeqCst);
                }
                counts.push((rx.receive_events(), rx.wake_imms_received()));
            }
            (got, counts, wait.stats(), rx)
        }
    });
    let tid = tid_rx.recv().unwrap();
    // Only once the receiver's first generation is in our memory and it
    // sleeps.
    while armed.load(Ordering::SeqCst) < 1 {
        std::thread::yield_now();
    }
    mdbus_testkit::threads::until_blocked_in_wait(tid);
    send_one(&mut tx, 1);
    let after_wake = tx.wake_imms_sent();
    for seq in 2..=1 + BUSY {
        send_one(&mut tx, seq);
    }
    let after_busy = tx.wake_imms_sent();
    while armed.load(Ordering::SeqCst) < 2 {
        // Reaps our sends, so credit and the send queue keep moving.
        tx.check_peer().unwrap();
        std::thread::yield_now();
    }
    mdbus_testkit::threads::until_blocked_in_wait(tid);
    send_one(&mut tx, 2 + BUSY);
    let (got, counts, stats, rx) = receiver.join().unwrap();
    let want: Vec<(u64, u64)> = (1..=2 + BUSY).map(|s| (s, s)).collect();
    assert_eq!(got, want);
    // One immediate for the first sleep, none while the receiver polled,
    // one for the second sleep.
    assert_eq!((after_wake, after_busy), (1, 1));
    assert_eq!(tx.wake_imms_sent(), 2);
    // The receiver: woken by a channel event holding the immediate, both
    // times; none taken while it polled busily.
    assert_eq!(counts, vec![(1, 1), (1, 1), (2, 2)], "{stats:?}");
    assert_eq!(rx.sleeps_armed(), 2);
    assert!(stats.woken >= 2, "{stats:?}");
    drop((rx, tx));
}

#[test]
fn a_signal_ends_a_sleeping_rdma_sessions_wait() {
    if let Some(bus) = rc_bus("rdma_session_signal", "send") {
        signal_wakes_a_sleeping_session(bus);
    }
}

#[test]
fn a_sleeping_ud_subscriber_is_woken_by_each_message() {
    if !verbs_support::rdma_or_skip("ud_subscriber_woken") {
        return;
    }
    let group = verbs_support::unique_group();
    // Heartbeats wake the subscriber too: rare enough not to matter, and
    // the subscriber's loop takes them in stride.
    let bus = |interface: String| {
        let text = format!(
            "transport = \"verbs\"\n[threads]\nwait = \"adaptive\"\n[streams.s]\n\
             group = \"{group}\"\ninterface = \"{interface}\"\nheartbeat_interval = \"1s\"\n\
             heartbeat_max_interval = \"1s\"\nheartbeat_timeout = \"5s\"\n"
        );
        Bus::new(Config::from_toml_str(&text, "test.toml").unwrap()).unwrap()
    };
    let mut publisher = bus(verbs_support::addr_a()).publisher("s").unwrap();
    let mut subscriber = bus(verbs_support::addr_b()).subscriber("s").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        tx.send(mdbus_testkit::threads::tid()).unwrap();
        let mut wait = block_at_once(Duration::from_secs(600));
        let mut got = Vec::new();
        while got.len() < 3 {
            subscriber
                .poll_wait(&mut wait, |e| {
                    if let Event::Message(m) = e {
                        got.push((m.seq(), m.payload().to_vec()));
                    }
                })
                .unwrap();
        }
        (got, wait.stats())
    });
    let tid = rx.recv().unwrap();
    for i in 0..3u8 {
        mdbus_testkit::threads::until_blocked_in_wait(tid);
        publisher.publish(&[i; 4]).unwrap();
    }
    let (got, stats) = reader.join().unwrap();
    assert_eq!(got, vec![(1, vec![0; 4]), (2, vec![1; 4]), (3, vec![2; 4])]);
    assert!(stats.woken >= 3, "{stats:?}");
}

/// Set before `stop_waits`, as a SIGTERM handler would set the tools' flag.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Sleeps in ten-minute blocks, on a thread of its own, until
/// [`STOPPING`]; returns the thread's id and its wait counts at the end.
fn sleeper(
    mut poll_wait: impl FnMut(&mut Adaptive) + Send + 'static,
) -> (u32, std::thread::JoinHandle<mdbus::wait::AdaptiveStats>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(mdbus_testkit::threads::tid()).unwrap();
        let mut wait = block_at_once(Duration::from_secs(600));
        while !STOPPING.load(Ordering::Relaxed) {
            poll_wait(&mut wait);
        }
        wait.stats()
    });
    (rx.recv().unwrap(), t)
}

/// `stop_waits` (after `wake_on_stop`) ends every sleeping wait at once,
/// on threads no signal reached: a TCP session's poll(2), a UDP
/// subscriber's epoll_wait(2) and, where the lane has a device, an RDMA
/// session's completion channel (whose idle blocks then outlast
/// `adaptive_max_block`); and every wait after it returns at once. The
/// stop descriptor is process-wide, so this runs alone in a child process
/// (the other tests count their wake-ups).
#[test]
fn stop_waits_ends_every_sleeping_wait_on_every_thread() {
    const NAME: &str = "stop_waits_ends_every_sleeping_wait_on_every_thread";
    if std::env::var_os("MDBUS_STOP_WAITS_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--test-threads=1"])
            .env("MDBUS_STOP_WAITS_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    mdbus::wait::wake_on_stop().unwrap();
    let mut buses = vec![tcp_session_bus()];
    buses.extend(rc_bus("stop_waits", "send"));
    let mut sleepers = Vec::new();
    let mut peers = Vec::new();
    for bus in &buses {
        let accepted = std::thread::spawn({
            let bus = bus.clone();
            move || bus.session_accept("o").unwrap()
        });
        peers.push(bus.session_connect("o").unwrap());
        let mut s = accepted.join().unwrap();
        sleepers.push(sleeper(move |w| {
            s.poll_wait(w, |_| {}).unwrap();
        }));
    }
    // No publisher: no heartbeat can wake it.
    let udp = udp_bus();
    let mut subscriber = udp.subscriber("s").unwrap();
    sleepers.push(sleeper(move |w| {
        subscriber.poll_wait(w, |_| {}).unwrap();
    }));
    for (tid, _) in &sleepers {
        mdbus_testkit::threads::until_blocked_in_wait(*tid);
    }
    STOPPING.store(true, Ordering::Relaxed);
    mdbus::wait::stop_waits();
    for (_, t) in sleepers {
        let stats = t.join().unwrap();
        // It slept, and nothing but the stop ended its last block.
        assert!(stats.blocks >= 1, "{stats:?}");
        assert_eq!(stats.woken, 0, "{stats:?}");
    }
    // Every wait from now on returns at once (the process is stopping),
    // even on an event source made after the stop.
    let mut late = udp_bus().subscriber("s").unwrap();
    for _ in 0..3 {
        assert!(!late.wait_for_data(Duration::from_secs(600)).unwrap());
    }
    drop(peers);
}
