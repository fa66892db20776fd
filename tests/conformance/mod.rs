//! The stream and session contract, written once and run against every
//! transport. A transport's test file defines a [`Fixture`] and expands
//! [`conformance_suite!`].
//!
//! Multi-process cases re-run the test binary itself as the peer: the
//! `child_entry` test (ignored in normal runs) reads its role from the
//! environment. Parent and children synchronise through the children's
//! stdout lines, never through sleeps.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout};

use mdbus::{Bus, Config, Error, Event};

/// How to build an isolated bus on one transport.
pub trait Fixture {
    /// Configuration text for a fresh bus, isolated from every other test,
    /// with `extra` TOML appended (stream and session tables).
    fn config_toml(&self, extra: &str) -> String;

    /// The configuration subscribers use, given the publisher's: the same by
    /// default; another device's address where a transport does not loop
    /// multicast back to the sending device.
    fn subscriber_toml(&self, publisher_toml: &str) -> String {
        publisher_toml.to_string()
    }

    /// Whether a publisher that runs ahead overwrites a ring that slow
    /// subscribers read (shared memory), so overruns are certain, rather
    /// than queueing in the network.
    fn ring(&self) -> bool {
        false
    }
}

/// A bus from fixture text.
/// `extra` (a test's stream and session tables) with a fixture's fields
/// added to each of `tables` (the table made if `extra` has none), except
/// the keys `extra` sets itself: a test may override a fixture default.
pub fn with_fixture_fields(extra: &str, tables: &[(&str, &str)]) -> String {
    let mut extra = extra.to_string();
    for (table, fields) in tables {
        let fields: String = fields
            .lines()
            .filter(|l| {
                let key = l.split('=').next().unwrap_or("").trim();
                !extra
                    .lines()
                    .any(|e| e.split('=').next().unwrap_or("").trim() == key)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        if extra.contains(table) {
            extra = extra.replace(table, &format!("{table}\n{fields}"));
        } else {
            extra.push_str(&format!("\n{table}\n{fields}"));
        }
    }
    extra
}

pub fn bus(toml: &str) -> Bus {
    Bus::new(Config::from_toml_str(toml, "<fixture>").expect("fixture config parses"))
        .expect("bus starts")
}

/// Payload of message `seq`: its sequence number, repeated to `len` bytes.
pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    seq.to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

/// Checks that `p` is the payload of `seq`.
pub fn check_payload(seq: u64, p: &[u8]) -> bool {
    p.iter()
        .zip(seq.to_le_bytes().iter().cycle())
        .all(|(a, b)| a == b)
}

/// Length of message `seq` in tests that vary it (1..=max).
pub fn len_of(seq: u64, max: usize) -> usize {
    1 + (seq as usize * 7919) % max
}

// ---- child processes -------------------------------------------------------

const ROLE: &str = "MDBUS_CONFORMANCE_ROLE";
const CONFIG: &str = "MDBUS_CONFORMANCE_CONFIG";
const ARG: &str = "MDBUS_CONFORMANCE_ARG";

/// A peer process running one role of the suite.
pub struct Peer {
    child: Child,
    out: BufReader<ChildStdout>,
    input: Option<ChildStdin>,
}

impl Peer {
    /// Starts this test binary as a peer with `role`.
    pub fn spawn(role: &str, toml: &str, arg: u64) -> Peer {
        let mut child = mdbus_testkit::child::child_command()
            .env(ROLE, role)
            .env(CONFIG, toml)
            .env(ARG, arg.to_string())
            .spawn()
            .expect("spawn peer");
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        let input = child.stdin.take();
        Peer { child, out, input }
    }

    /// Sends the peer one line on its stdin.
    pub fn say(&mut self, line: &str) {
        let w = self.input.as_mut().expect("stdin open");
        writeln!(w, "{line}").expect("write to peer");
        w.flush().expect("flush to peer");
    }

    /// Reads the peer's report lines on a thread, so the caller can keep
    /// working (servicing a publisher) while it waits.
    pub fn lines_in_background(mut self) -> std::sync::mpsc::Receiver<(String, bool)> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let line = self.line();
            let ok = self.wait_ok();
            let _ = tx.send((line, ok));
        });
        rx
    }

    /// The next line the peer reports (its lines start with `peer:`).
    pub fn line(&mut self) -> String {
        loop {
            let mut l = String::new();
            let n = self.out.read_line(&mut l).expect("read peer stdout");
            assert!(n > 0, "peer exited without reporting");
            if let Some(rest) = l.strip_prefix("peer: ") {
                return rest.trim_end().to_string();
            }
        }
    }

    /// Waits for the peer to exit; returns whether it succeeded.
    pub fn wait_ok(mut self) -> bool {
        self.child.wait().expect("wait peer").success()
    }

    /// Waits for the peer to exit, whatever its status.
    pub fn wait(mut self) {
        let _ = self.child.wait();
    }
}

fn report(msg: &str) {
    let mut o = std::io::stdout().lock();
    writeln!(o, "peer: {msg}").unwrap();
    o.flush().unwrap();
}

/// Entry point of peer processes (run through the `child_entry` test).
pub fn child_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let toml = std::env::var(CONFIG).expect("config in env");
    let arg: u64 = std::env::var(ARG).expect("arg in env").parse().unwrap();
    let bus = bus(&toml);
    match role.as_str() {
        // Subscribe, say so, then read until `arg` messages have arrived or
        // the publisher ends the stream; verify order and content and report
        // what arrived.
        "stream-sub" => {
            let mut sub = bus.subscriber("s").expect("subscribe");
            report("ready");
            let (mut next, mut bad, mut done) = (1u64, 0u64, false);
            while !done {
                sub.poll(|e| match e {
                    Event::Message(m) => {
                        if m.seq() != next || !check_payload(m.seq(), m.payload()) {
                            bad += 1;
                        }
                        next = m.seq() + 1;
                    }
                    Event::Overrun { to, .. } | Event::Gap { to, .. } => next = to,
                    Event::EndOfStream { .. } | Event::PublisherDown { .. } => done = true,
                    Event::PublisherRestarted { .. } => bad += 1,
                    Event::SourceGap { .. } => {}
                })
                .expect("poll");
                done |= next > arg;
            }
            let s = sub.stats();
            report(&format!(
                "received {} lost {} bad {bad} last {}",
                s.received,
                s.overrun_messages + s.gap_messages,
                next - 1
            ));
        }
        // Echo every message back until the acceptor closes.
        "session-echo" => {
            let mut s = bus.session_connect("o").expect("connect");
            report("connected");
            let mut batch: Vec<Vec<u8>> = Vec::new();
            loop {
                batch.clear();
                match s.poll(|m| batch.push(m.payload().to_vec())) {
                    Ok(0) => continue,
                    Ok(_) => {
                        for m in &batch {
                            s.send(m).expect("echo");
                        }
                    }
                    Err(Error::PeerClosed { .. }) => break,
                    Err(e) => panic!("echo peer: {e}"),
                }
            }
            report(&format!("echoed {}", s.stats().sent));
        }
        // Create the stream, wait for "go", publish `arg` messages, then
        // die without closing anything.
        "stream-pub-die" => {
            let mut p = bus.publisher("s").expect("publish");
            report("created");
            let mut l = String::new();
            std::io::stdin().read_line(&mut l).expect("go");
            for seq in 1..=arg {
                p.publish(&payload(seq, 16)).unwrap();
            }
            p.flush().unwrap();
            report("published");
            std::process::abort();
        }
        // Connect, send `arg` messages, then die without closing.
        "session-die" => {
            let mut s = bus.session_connect("o").expect("connect");
            for seq in 1..=arg {
                s.send(&payload(seq, 16)).unwrap();
            }
            report("sent");
            std::process::abort();
        }
        // Own the stream and hold it until stdin closes.
        "stream-hold" => {
            let _p = bus.publisher("s").expect("publish");
            report("holding");
            let mut l = String::new();
            let _ = std::io::stdin().read_line(&mut l);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Expands the whole suite (streams and sessions) for a fixture.
#[macro_export]
macro_rules! conformance_suite {
    ($fixture:expr) => {
        conformance_child_entry!();
        conformance_stream_tests!($fixture);
        conformance_session_tests!($fixture);
    };
}

/// Expands the session half of the suite, for transports that carry
/// sessions only.
#[macro_export]
macro_rules! conformance_session_suite {
    ($fixture:expr) => {
        conformance_child_entry!();
        conformance_session_tests!($fixture);
    };
}

/// Expands the stream half of the suite, for transports that carry streams
/// only.
#[macro_export]
macro_rules! conformance_stream_suite {
    ($fixture:expr) => {
        conformance_child_entry!();
        conformance_stream_tests!($fixture);
    };
}

/// The `child_entry` test that peer processes run.
#[macro_export]
macro_rules! conformance_child_entry {
    () => {
        #[test]
        #[ignore = "entry point of peer processes started by the other tests"]
        fn child_entry() {
            conformance::child_main();
        }
    };
}

/// One test per stream case.
#[macro_export]
macro_rules! conformance_stream_tests {
    ($fixture:expr) => {
        #[test]
        fn stream_delivers_in_order_without_loss() {
            conformance::stream_delivers_in_order_without_loss(&$fixture);
        }

        #[test]
        fn stream_reports_overrun_and_covers_every_sequence() {
            conformance::stream_reports_overrun_and_covers_every_sequence(&$fixture);
        }

        #[test]
        fn stream_late_join_policies() {
            conformance::stream_late_join_policies(&$fixture);
        }

        #[test]
        fn stream_reaches_subscribers_in_several_processes() {
            conformance::stream_reaches_subscribers_in_several_processes(&$fixture);
        }

        #[test]
        fn stream_reports_dead_publisher_and_its_restart() {
            conformance::stream_reports_dead_publisher_and_its_restart(&$fixture);
        }

        #[test]
        fn stream_rejects_oversized_messages() {
            conformance::stream_rejects_oversized_messages(&$fixture);
        }

        #[test]
        fn stream_carries_source_gaps_in_order() {
            conformance::stream_carries_source_gaps_in_order(&$fixture);
        }
    };
}

/// One test per session case.
#[macro_export]
macro_rules! conformance_session_tests {
    ($fixture:expr) => {
        #[test]
        fn session_carries_both_ways_between_processes() {
            conformance::session_carries_both_ways_between_processes(&$fixture);
        }

        #[test]
        fn session_applies_backpressure() {
            conformance::session_applies_backpressure(&$fixture);
        }

        #[test]
        fn session_reports_peer_death_after_draining() {
            conformance::session_reports_peer_death_after_draining(&$fixture);
        }

        #[test]
        fn session_reports_orderly_close() {
            conformance::session_reports_orderly_close(&$fixture);
        }

        #[test]
        fn session_connect_without_acceptor_times_out() {
            conformance::session_connect_without_acceptor_times_out(&$fixture);
        }
    };
}

// ---- the contract ----------------------------------------------------------

pub fn stream_delivers_in_order_without_loss(f: &impl Fixture) {
    let toml = f.config_toml("[streams.s]\nmax_message = 100\ncapacity = 1024\n");
    let mut p = bus(&toml).publisher("s").unwrap();
    let mut s = bus(&f.subscriber_toml(&toml)).subscriber("s").unwrap();
    let total = 100_000u64;
    let (mut next, mut bytes) = (1u64, 0usize);
    let mut sent = 0u64;
    while next <= total {
        // Publish in bursts smaller than the ring, then drain.
        for _ in 0..500 {
            if sent < total {
                sent += 1;
                let len = len_of(sent, 100);
                let mut c = p.claim(len).unwrap();
                c.copy_from_slice(&payload(sent, len));
                assert_eq!(c.commit().unwrap(), sent);
            }
        }
        p.service().unwrap();
        loop {
            let n = s
                .poll(|e| match e {
                    Event::Message(m) => {
                        assert_eq!(m.seq(), next, "out of order");
                        assert_eq!(m.payload().len(), len_of(next, 100));
                        assert!(
                            check_payload(next, m.payload()),
                            "corrupt payload at {next}"
                        );
                        bytes += m.payload().len();
                        next += 1;
                    }
                    other => panic!("unexpected {other:?}"),
                })
                .unwrap();
            if n == 0 {
                break;
            }
        }
    }
    assert_eq!(next - 1, total);
    assert_eq!(bytes, (1..=total).map(|q| len_of(q, 100)).sum::<usize>());
    assert_eq!(s.stats().received, total);
    assert_eq!(s.stats().overruns + s.stats().gaps, 0);
    assert_eq!(p.published(), total);
}

/// A publisher's upstream-loss notices reach subscribers in place, once,
/// as [`Event::SourceGap`] with the range it gave, on a stream whose
/// messages also carry timestamps (so the notice's flag travels beside
/// another).
pub fn stream_carries_source_gaps_in_order(f: &impl Fixture) {
    let toml = f.config_toml(
        "[streams.s]
max_message = 64
timestamps = true
",
    );
    let mut p = bus(&toml).publisher("s").unwrap();
    let mut s = bus(&f.subscriber_toml(&toml)).subscriber("s").unwrap();
    let mut want = Vec::new();
    for i in 1..=200u64 {
        let seq = if i % 50 == 0 {
            let (from, to) = (1_000 * i, 1_000 * i + i % 7 + 1);
            let seq = p.publish_source_gap(from, to).unwrap();
            want.push(format!("source gap {from}..{to}"));
            seq
        } else {
            let seq = p.publish(&payload(i, 8)).unwrap();
            want.push(format!("message {seq}"));
            seq
        };
        assert_eq!(seq, i, "a notice takes a sequence number");
    }
    // An empty range is refused and takes no sequence number.
    let e = p.publish_source_gap(5, 5).unwrap_err();
    assert!(e.to_string().contains("5..5"), "{e}");
    assert_eq!(p.next_seq(), 201);
    p.flush().unwrap();
    let mut got = Vec::new();
    for _ in 0..100_000_000u64 {
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => {
                assert!(check_payload(m.seq(), m.payload()));
                assert!(m.timestamp().is_some());
                got.push(format!("message {}", m.seq()));
            }
            Event::SourceGap { from, to } => got.push(format!("source gap {from}..{to}")),
            other => got.push(format!("{other:?}")),
        })
        .unwrap();
        if got.len() >= want.len() {
            break;
        }
    }
    assert_eq!(got, want);
    let st = s.stats();
    assert_eq!((st.source_gaps, st.source_gap_messages), (4, 2 + 3 + 4 + 5));
    assert_eq!((st.gaps, st.received), (0, 196));
}

pub fn stream_reports_overrun_and_covers_every_sequence(f: &impl Fixture) {
    let toml = f.config_toml("[streams.s]\nmax_message = 16\ncapacity = 64\n");
    let mut p = bus(&toml).publisher("s").unwrap();
    let mut s = bus(&f.subscriber_toml(&toml)).subscriber("s").unwrap();
    for seq in 1..=1000u64 {
        p.publish(&payload(seq, 16)).unwrap();
    }
    let mut covered = Vec::new();
    let mut overruns = Vec::new();
    for _ in 0..10_000_000 {
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => {
                assert!(check_payload(m.seq(), m.payload()));
                covered.push(m.seq());
            }
            Event::Overrun { from, to } | Event::Gap { from, to } => {
                overruns.push((from, to));
                covered.extend(from..to);
            }
            other => panic!("unexpected {other:?}"),
        })
        .unwrap();
        if covered.len() >= 1000 {
            break;
        }
    }
    assert_eq!(
        covered,
        (1..=1000).collect::<Vec<_>>(),
        "every sequence exactly once"
    );
    let st = s.stats();
    assert_eq!(st.overrun_messages + st.gap_messages + st.received, 1000);
    assert_eq!(st.overruns + st.gaps, overruns.len() as u64);
    if f.ring() {
        // A ring of 64 cannot hold 1000: the reader was lapped once, from
        // its first message, and no more than the ring survived.
        assert_eq!(overruns.len(), 1);
        assert_eq!(overruns[0].0, 1);
        assert!(st.received <= 64);
    }
}

pub fn stream_late_join_policies(f: &impl Fixture) {
    let toml = f.config_toml("[streams.s]\ncapacity = 16\nlate_join = \"next\"\n");
    let mut p = bus(&toml).publisher("s").unwrap();
    for seq in 1..=5 {
        p.publish(&payload(seq, 8)).unwrap();
    }
    p.flush().unwrap();
    let sub_toml = f.subscriber_toml(&toml);
    let mut next_sub = bus(&sub_toml).subscriber("s").unwrap();
    let mut oldest_sub = bus(&sub_toml.replace("late_join = \"next\"", "late_join = \"oldest\""))
        .subscriber("s")
        .unwrap();
    p.publish(&payload(6, 8)).unwrap();
    p.flush().unwrap();
    let mut seqs = |s: &mut mdbus::Subscriber, want: usize| {
        let mut v = vec![];
        for _ in 0..10_000_000 {
            p.service().unwrap();
            s.poll(|e| {
                if let Event::Message(m) = e {
                    v.push(m.seq())
                }
            })
            .unwrap();
            if v.len() >= want {
                break;
            }
        }
        v
    };
    assert_eq!(seqs(&mut next_sub, 1), vec![6]);
    assert_eq!(seqs(&mut oldest_sub, 6), vec![1, 2, 3, 4, 5, 6]);
}

pub fn stream_reaches_subscribers_in_several_processes(f: &impl Fixture) {
    // 10,000 requests and 30 s of silence of patience: three subscriber
    // processes and the publisher share the machine, and a descheduled
    // publisher must turn neither a late answer into a reported gap nor
    // a late heartbeat into a dead publisher.
    let toml = f.config_toml(
        "[streams.s]\nmax_message = 64\ncapacity = 65536\nlate_join = \"oldest\"\n\
         retransmit_retries = 10000\nheartbeat_timeout = \"30s\"\n",
    );
    let bus = bus(&toml);
    let total = 50_000u64;
    let mut p = bus.publisher("s").unwrap();
    let mut peers: Vec<Peer> = (0..3)
        .map(|_| Peer::spawn("stream-sub", &f.subscriber_toml(&toml), total))
        .collect();
    for peer in &mut peers {
        assert_eq!(peer.line(), "ready");
    }
    for seq in 1..=total {
        p.publish(&payload(seq, 64)).unwrap();
        if seq % 256 == 0 {
            p.service().unwrap();
        }
    }
    // Keep answering retransmit requests until every subscriber is done.
    let reports: Vec<_> = peers.into_iter().map(Peer::lines_in_background).collect();
    let mut results = vec![None; reports.len()];
    for _ in 0..100_000_000u64 {
        p.service().unwrap();
        for (r, slot) in reports.iter().zip(results.iter_mut()) {
            if slot.is_none() {
                *slot = r.try_recv().ok();
            }
        }
        if results.iter().all(Option::is_some) {
            break;
        }
    }
    for r in results {
        let (line, ok) = r.expect("subscriber finished");
        assert_eq!(line, format!("received {total} lost 0 bad 0 last {total}"));
        assert!(ok);
    }
}

pub fn stream_reports_dead_publisher_and_its_restart(f: &impl Fixture) {
    let toml = f.config_toml("[streams.s]\ncapacity = 64\nlate_join = \"oldest\"\n");
    let bus = bus(&toml);
    let mut dying = Peer::spawn("stream-pub-die", &toml, 10);
    assert_eq!(dying.line(), "created");
    let mut s = self::bus(&f.subscriber_toml(&toml))
        .subscriber("s")
        .unwrap();
    dying.say("go");
    assert_eq!(dying.line(), "published");
    dying.wait();
    let mut events = Vec::new();
    let mut msgs = Vec::new();
    // Poll until the death is reported (bounded, not timed: detection takes
    // a few thousand idle polls on shared memory, a heartbeat timeout on a
    // network).
    for _ in 0..100_000_000u64 {
        s.poll(|e| match e {
            Event::Message(m) => msgs.push(m.seq()),
            other => events.push(format!("{other:?}")),
        })
        .unwrap();
        if !events.is_empty() {
            break;
        }
    }
    assert_eq!(msgs, (1..=10).collect::<Vec<_>>());
    assert_eq!(events, vec!["PublisherDown { last_seq: 10 }".to_string()]);

    // A new incarnation is announced, and its sequence starts again.
    let mut p = bus.publisher("s").unwrap();
    p.publish(&payload(1, 8)).unwrap();
    p.publish(&payload(2, 8)).unwrap();
    p.flush().unwrap();
    msgs.clear();
    events.clear();
    for _ in 0..100_000_000u64 {
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => msgs.push(m.seq()),
            Event::PublisherRestarted { .. } => events.push("restarted".to_string()),
            other => events.push(format!("{other:?}")),
        })
        .unwrap();
        if msgs.len() == 2 {
            break;
        }
    }
    assert_eq!(events, vec!["restarted".to_string()]);
    assert_eq!(msgs, vec![1, 2]);
}

pub fn stream_rejects_oversized_messages(f: &impl Fixture) {
    let bus = bus(&f.config_toml("[streams.s]\nmax_message = 40\n"));
    let mut p = bus.publisher("s").unwrap();
    let e = p.publish(&[0u8; 41]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a 41-byte message is larger than the 40-byte maximum of stream `s`; raise max_message in its configuration"
    );
    assert_eq!(
        p.publish(&[0u8; 40]).unwrap(),
        1,
        "the failed claim used no sequence"
    );
}

pub fn session_carries_both_ways_between_processes(f: &impl Fixture) {
    let toml = f.config_toml("[sessions.o]\nmax_message = 200\ncapacity = 64\n");
    let bus = bus(&toml);
    let mut peer = Peer::spawn("session-echo", &toml, 0);
    let mut s = bus.session_accept("o").unwrap();
    assert_eq!(peer.line(), "connected");
    let total = 20_000u64;
    let (mut sent, mut next) = (0u64, 1u64);
    while next <= total {
        // Keep a window in flight: exercises flow control both ways.
        while sent < total && sent - (next - 1) < 32 {
            sent += 1;
            s.send(&payload(sent, len_of(sent, 200))).unwrap();
        }
        s.poll(|m| {
            assert_eq!(m.seq(), next, "echoes arrive in order");
            assert_eq!(m.payload().len(), len_of(next, 200));
            assert!(check_payload(next, m.payload()));
            next += 1;
        })
        .unwrap();
    }
    s.close();
    assert_eq!(peer.line(), format!("echoed {total}"));
    assert!(peer.wait_ok());
}

pub fn session_applies_backpressure(f: &impl Fixture) {
    let toml = f.config_toml("[sessions.o]\ncapacity = 4\n");
    let bus = bus(&toml);
    let acceptor = std::thread::spawn({
        let bus = bus.clone();
        move || bus.session_accept("o")
    });
    let mut b = bus.session_connect("o").unwrap();
    let mut a = acceptor.join().unwrap().unwrap();
    for seq in 1..=4 {
        let mut c = a.try_claim(8).unwrap().expect("room for four");
        c.copy_from_slice(&payload(seq, 8));
        assert_eq!(c.commit().unwrap(), seq);
    }
    assert!(
        a.try_claim(8).unwrap().is_none(),
        "the fifth must wait for credit"
    );
    let mut got = vec![];
    while got.len() < 4 {
        b.poll(|m| got.push(m.seq())).unwrap();
    }
    assert_eq!(got, vec![1, 2, 3, 4]);
    // Credit may travel back over the network: poll for it, boundedly.
    let mut room = false;
    for _ in 0..1_000_000 {
        if a.try_claim(8).unwrap().is_some() {
            room = true;
            break;
        }
    }
    assert!(room, "credit returned by the reader");
}

pub fn session_reports_peer_death_after_draining(f: &impl Fixture) {
    let toml = f.config_toml("[sessions.o]\ncapacity = 64\n");
    let bus = bus(&toml);
    let mut peer = Peer::spawn("session-die", &toml, 5);
    let mut s = bus.session_accept("o").unwrap();
    assert_eq!(peer.line(), "sent");
    peer.wait();
    let mut got = vec![];
    let mut err = None;
    for _ in 0..10_000_000 {
        match s.poll(|m| got.push(m.seq())) {
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(
        got,
        vec![1, 2, 3, 4, 5],
        "what was sent before death is delivered"
    );
    let err = err.expect("death reported");
    // Shared memory knows the peer's pid; a network transport knows its
    // address and that the connection broke.
    let text = err.to_string();
    match err {
        Error::PeerDied { .. } => {
            assert!(text.starts_with("session `o`: the peer (pid "), "{text}");
            assert!(text.ends_with(") has died"), "{text}");
        }
        Error::PeerLost { .. } => {
            assert!(text.starts_with("session `o`: lost the peer at "), "{text}")
        }
        // RDMA also says how far the exchange got.
        Error::RdmaFault { delivered, .. } => {
            assert!(text.contains("the peer (pid "), "{text}");
            assert_eq!(delivered, 5, "{text}");
        }
        other => panic!("expected the peer's death, got {other}"),
    }
}

pub fn session_reports_orderly_close(f: &impl Fixture) {
    let toml = f.config_toml("");
    let bus = bus(&toml);
    let acceptor = std::thread::spawn({
        let bus = bus.clone();
        move || bus.session_accept("o")
    });
    let mut b = bus.session_connect("o").unwrap();
    let mut a = acceptor.join().unwrap().unwrap();
    a.send(b"last words").unwrap();
    a.close();
    let mut got = vec![];
    let err = loop {
        match b.poll(|m| got.push(m.payload().to_vec())) {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(got, vec![b"last words".to_vec()]);
    assert_eq!(err.to_string(), "session `o`: the peer closed the session");
}

pub fn session_connect_without_acceptor_times_out(f: &impl Fixture) {
    let toml = f.config_toml("[sessions.o]\nconnect_timeout = \"0ms\"\n");
    let bus = bus(&toml);
    let err = bus.session_connect("o").unwrap_err();
    let text = err.to_string();
    match err {
        Error::NotFound { .. } => assert_eq!(
            text,
            "session `o` does not exist yet: start its publisher (or acceptor) first, or raise attach_timeout"
        ),
        Error::NoPeer { .. } => assert!(text.starts_with("session `o`: no peer at "), "{text}"),
        other => panic!("expected no peer, got {other}"),
    }
}
