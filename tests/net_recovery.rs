//! Loss recovery on real network stacks: hosts are network namespaces
//! joined by bridges, `tc netem` drops, duplicates and reorders datagrams on
//! the subscribers' links, and every process is a real process inside its
//! host. Needs root (as in CI); elsewhere each test prints a loud SKIPPED
//! line, and with CI=true a missing prerequisite fails the test.
//!
//! The publisher and subscribers are this test binary re-run inside a
//! namespace (`ip netns exec`) in a role; they report one line each on
//! stdout and take orders on stdin.

mod netns;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use mdbus::{Bus, Config, Event};
use mdbus_testkit::Lack;
use netns::Topology;

const ROLE: &str = "MDBUS_NET_ROLE";
const CONFIG: &str = "MDBUS_NET_CONFIG";
const COUNT: &str = "MDBUS_NET_COUNT";

/// Whether the tests can run here. Where they must (the test command sets
/// MDBUS_REQUIRE_NETNS=1 inside the RDMA lane's guest, whose kernel has
/// netem) a missing prerequisite is a failure; elsewhere a loud skip.
fn prerequisites(netem: bool) -> bool {
    match Topology::available(netem) {
        Ok(()) => true,
        Err(why) => {
            // Without netem the host's kernel lacks it (the guest has it);
            // without namespaces, iproute2 or root is missing.
            let lack = if netem { Lack::Kernel } else { Lack::Tool };
            mdbus_testkit::skip("net_recovery", lack, &why);
            false
        }
    }
}

/// Datagrams per second the publisher sends: MDBUS_NET_PACE, default
/// 20000 (an emulated CPU wants less).
fn pace() -> u64 {
    std::env::var("MDBUS_NET_PACE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// Payload of message `seq`: its sequence number, repeated.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    seq.to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

fn check_payload(seq: u64, p: &[u8]) -> bool {
    p.iter()
        .zip(seq.to_le_bytes().iter().cycle())
        .all(|(a, b)| a == b)
}

/// One process in a host.
struct Proc {
    child: Child,
    out: BufReader<ChildStdout>,
    input: ChildStdin,
}

impl Proc {
    fn spawn(t: &Topology, host: usize, role: &str, toml: &str, count: u64) -> Proc {
        let exe = std::env::current_exe().unwrap();
        let mut child = t
            .exec(
                host,
                &[exe.to_str().unwrap()]
                    .into_iter()
                    .chain(mdbus_testkit::child::CHILD_ENTRY_ARGS)
                    .collect::<Vec<_>>(),
            )
            .env(ROLE, role)
            .env(CONFIG, toml)
            .env(COUNT, count.to_string())
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn in namespace");
        let out = BufReader::new(child.stdout.take().unwrap());
        let input = child.stdin.take().unwrap();
        Proc { child, out, input }
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

    fn say(&mut self, l: &str) {
        writeln!(self.input, "{l}").unwrap();
        self.input.flush().unwrap();
    }

    fn finish(mut self) -> bool {
        drop(self.input);
        self.child.wait().unwrap().success()
    }
}

fn report(msg: &str) {
    let mut o = std::io::stdout().lock();
    writeln!(o, "peer: {msg}").unwrap();
    o.flush().unwrap();
}

/// What a subscriber saw, parsed from its report line.
#[derive(Debug, Default)]
struct Seen {
    received: u64,
    bad: u64,
    gap_messages: u64,
    down_at: Option<u64>,
    recovered: u64,
    duplicates: u64,
    requested: u64,
    wins_a: u64,
    wins_b: u64,
    /// Request datagrams sent.
    requests_sent: u64,
    /// Messages a repair brought before this subscriber asked.
    suppressed: u64,
    /// First sequence delivered or reported lost.
    first: u64,
    join_skipped: u64,
    timed_out: bool,
}

fn parse_seen(line: &str) -> Seen {
    let mut s = Seen::default();
    for kv in line.split_whitespace() {
        let (k, v) = kv.split_once('=').expect("key=value");
        let v: u64 = v.parse().unwrap();
        match k {
            "received" => s.received = v,
            "requests_sent" => s.requests_sent = v,
            "suppressed" => s.suppressed = v,
            "not_available" => {}
            "bad" => s.bad = v,
            "gap_messages" => s.gap_messages = v,
            "down_at" => s.down_at = Some(v),
            "recovered" => s.recovered = v,
            "duplicates" => s.duplicates = v,
            "requested" => s.requested = v,
            "wins_a" => s.wins_a = v,
            "wins_b" => s.wins_b = v,
            "first" => s.first = v,
            "join_skipped" => s.join_skipped = v,
            "timed_out" => s.timed_out = v != 0,
            _ => {}
        }
    }
    assert!(!s.timed_out, "a subscriber ran out of time: {line}");
    s
}

/// One round of the publisher's duties. When it found no request to
/// answer it pauses briefly: pacing, not synchronisation; several hosts'
/// processes share two (possibly emulated) CPUs here, and a spinning
/// publisher would starve its subscribers.
fn serve(p: &mut mdbus::Publisher) {
    let before = p.recovery_counters().unwrap().requests_received;
    p.service().unwrap();
    if p.recovery_counters().unwrap().requests_received == before {
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

#[test]
#[ignore = "entry point of processes started inside network namespaces"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let toml = std::env::var(CONFIG).unwrap();
    let count: u64 = std::env::var(COUNT).unwrap().parse().unwrap();
    let bus = Bus::new(Config::from_toml_str(&toml, "<net test>").unwrap()).unwrap();
    match role.as_str() {
        // Publish `count` 32-byte messages, twenty to a datagram, paced;
        // then keep answering requests until told to stop (or, for
        // "pub-die", until killed).
        "pub" | "pub-die" => {
            let mut p = bus.publisher("s").unwrap();
            report("ready");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
            let start = mdbus::clock::monotonic_ns();
            let per_batch_ns = 1_000_000_000 / pace().max(1);
            let mut batch = 0u64;
            for seq in 1..=count {
                p.publish(&payload(seq, 32)).unwrap();
                if seq % 20 == 0 || seq == count {
                    p.flush().unwrap();
                    batch += 1;
                    // At least once per datagram, even when behind the
                    // pace (a starved publisher catching up must still
                    // answer requests before they time out).
                    serve(&mut p);
                    while mdbus::clock::monotonic_ns() - start < batch * per_batch_ns {
                        serve(&mut p);
                    }
                }
            }
            report(&format!("published {count}"));
            // Serve until stdin says stop (closing stdin also stops).
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut l = String::new();
                let _ = std::io::stdin().read_line(&mut l);
                let _ = tx.send(());
            });
            while rx.try_recv().is_err() {
                serve(&mut p);
            }
            let c = p.recovery_counters().unwrap();
            report(&format!(
                "served={} retransmitted={} not_available={} requests={} to_group={} lingered={} drops={:?}",
                c.requests_served,
                c.retransmitted,
                c.not_available_sent,
                c.requests_received,
                c.repairs_to_group,
                c.requests_lingered,
                c.drops
            ));
        }
        // Read until `count` messages are accounted for (delivered or in a
        // gap), or the publisher is down; check order and content.
        "sub" => {
            let mut s = bus.subscriber("s").unwrap();
            report("ready");
            // Sequences are followed from the first one delivered or
            // reported lost: a subscriber whose first datagram was lost
            // joins late (what it skips is counted as `join_skipped`).
            let (mut next, mut bad, mut first) = (None::<u64>, 0u64, None::<u64>);
            let mut down_at = None;
            let mut first_bad = String::new();
            // A bound on the run, so that a stuck subscriber reports where
            // it stands instead of hanging the suite.
            let deadline = mdbus::clock::monotonic_ns() + 300_000_000_000;
            let mut timed_out = false;
            while next.is_none_or(|n| n <= count) && down_at.is_none() {
                if mdbus::clock::monotonic_ns() > deadline {
                    timed_out = true;
                    break;
                }
                let n = s
                    .poll(|e| {
                        let ok = match e {
                            Event::Message(m) => {
                                first.get_or_insert(m.seq());
                                let ok = next.is_none_or(|n| m.seq() == n)
                                    && check_payload(m.seq(), m.payload());
                                next = Some(m.seq() + 1);
                                ok
                            }
                            Event::Gap { from, to } => {
                                first.get_or_insert(from);
                                let ok = next.is_none_or(|n| from == n);
                                next = Some(to);
                                ok
                            }
                            Event::PublisherDown { last_seq } => {
                                down_at = Some(last_seq);
                                true
                            }
                            _ => false,
                        };
                        if !ok {
                            bad += 1;
                            if first_bad.is_empty() {
                                first_bad = format!("{e:?} at {next:?}");
                            }
                        }
                    })
                    .unwrap();
                if n == 0 {
                    // Sharing two (possibly emulated) CPUs with the other
                    // hosts' processes; the socket buffers hold what
                    // arrives meanwhile.
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            let st = s.stats();
            let c = s.recovery_counters().unwrap();
            let mut line = format!(
                "received={} bad={bad} gap_messages={} recovered={} duplicates={} requested={} wins_a={} wins_b={} requests_sent={} not_available={} suppressed={} first={} join_skipped={} timed_out={}",
                st.received, st.gap_messages, c.recovered, c.duplicates, c.messages_requested, c.wins_a, c.wins_b, c.requests_sent, c.not_available_received, c.suppressed,
                first.unwrap_or(0), c.join_skipped, u64::from(timed_out)
            );
            if let Some(d) = down_at {
                line.push_str(&format!(" down_at={d}"));
            }
            if !first_bad.is_empty() {
                eprintln!("net_recovery: first unexpected event: {first_bad}");
            }
            report(&line);
        }
        other => panic!("unknown role {other}"),
    }
}

/// A stream configuration for a topology: group on each line, the host's
/// own interface addresses filled in per host. Requests are repeated for
/// up to 50 s: the guest's CPUs are emulated and may be starved by the
/// host, and a publisher that cannot answer for a while must not turn
/// recoverable losses into gaps.
fn config(t: &Topology, host: usize, lines: usize, capacity: usize, extra: &str) -> String {
    let mut s = format!(
        "transport = \"udp\"\n[streams.s]\nmax_message = 32\ncapacity = {capacity}\n\
         group = \"239.77.0.1:40001\"\ninterface = \"{}\"\n\
         autoflush = false\nheartbeat_interval = \"10ms\"\nheartbeat_timeout = \"500ms\"\n\
         retransmit_timeout = \"500ms\"\nretransmit_retries = 100\nlate_join = \"oldest\"\n",
        t.addr(host, 0)
    );
    if lines == 2 {
        s.push_str(&format!(
            "group_b = \"239.77.0.2:40002\"\ninterface_b = \"{}\"\n",
            t.addr(host, 1)
        ));
    }
    s.push_str(extra);
    s
}

/// Runs one publisher (host 0) and a subscriber on every other host, each
/// after `impair` set up its links; returns what each subscriber saw and
/// what the publisher reported.
fn run(t: &Topology, lines: usize, capacity: usize, count: u64) -> (Vec<Seen>, String) {
    run_with(t, lines, capacity, count, "")
}

/// [`run`] with `extra` keys in every process's stream configuration.
fn run_with(
    t: &Topology,
    lines: usize,
    capacity: usize,
    count: u64,
    extra: &str,
) -> (Vec<Seen>, String) {
    let mut publisher = Proc::spawn(t, 0, "pub", &config(t, 0, lines, capacity, extra), count);
    assert_eq!(publisher.line(), "ready");
    let mut subs: Vec<Proc> = (1..t.hosts.len())
        .map(|h| Proc::spawn(t, h, "sub", &config(t, h, lines, capacity, extra), count))
        .collect();
    for s in &mut subs {
        assert_eq!(s.line(), "ready");
    }
    publisher.say("go");
    assert_eq!(publisher.line(), format!("published {count}"));
    let seen: Vec<Seen> = subs
        .into_iter()
        .map(|mut s| {
            let l = s.line();
            assert!(s.finish(), "subscriber failed");
            parse_seen(&l)
        })
        .collect();
    publisher.say("stop");
    let served = publisher.line();
    assert!(publisher.finish());
    (seen, served)
}

#[test]
fn loss_reordering_and_duplication_cost_nothing_but_retransmissions() {
    if !prerequisites(true) {
        return;
    }
    let t = Topology::new(4, 1);
    // What each subscriber's host receives is impaired on its switch port.
    t.netem_ingress(1, 0, "loss 1%");
    t.netem_ingress(2, 0, "loss 5%");
    t.netem_ingress(3, 0, "delay 200us 100us loss 1% duplicate 2%");
    let count = 1_000_000;
    // The publisher retains the whole run: every loss is recoverable.
    let (seen, served) = run(&t, 1, 1 << 20, count);
    eprintln!("net_recovery: loss/reorder/dup: {seen:?}; publisher {served}");
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(
            s.received,
            count,
            "subscriber {} missed messages: {s:?}",
            i + 1
        );
        assert_eq!(s.bad, 0, "subscriber {} saw disorder: {s:?}", i + 1);
        assert_eq!(s.gap_messages, 0, "subscriber {} had gaps: {s:?}", i + 1);
        assert!(
            s.recovered > 0,
            "subscriber {} recovered nothing: {s:?}",
            i + 1
        );
    }
    // More loss injected, more recovered.
    assert!(seen[1].recovered > seen[0].recovered, "{seen:?}");
    // Duplicates injected on host 3 were dropped, not delivered.
    assert!(seen[2].duplicates > 0, "{seen:?}");
    assert!(served.starts_with("served="), "{served}");
}

#[test]
fn a_window_too_small_turns_loss_into_reported_gaps() {
    if !prerequisites(true) {
        return;
    }
    let t = Topology::new(2, 1);
    t.netem_ingress(1, 0, "loss 5%");
    let count = 100_000;
    // The publisher retains 32 messages: fewer than two datagrams.
    let (seen, served) = run(&t, 1, 32, count);
    let s = &seen[0];
    assert_eq!(s.bad, 0, "{s:?}");
    assert!(s.gap_messages > 0, "{s:?}");
    // Every message from the first one followed is delivered or in a gap
    // (a subscriber whose first datagram was lost joins late).
    assert!(s.first >= 1, "{s:?}");
    assert_eq!(
        s.first - 1 + s.received + s.gap_messages,
        count,
        "every message delivered or in a gap: {s:?}"
    );
    assert!(served.contains("not_available="), "{served}");
    eprintln!("net_recovery: small window: {s:?}; publisher {served}");
}

#[test]
fn ab_lines_mask_independent_loss() {
    if !prerequisites(true) {
        return;
    }
    let t = Topology::new(2, 2);
    t.netem_ingress(1, 0, "loss 5%");
    t.netem_ingress(1, 1, "loss 5%");
    let count = 200_000;
    let (seen, _) = run(&t, 2, 1 << 20, count);
    let s = &seen[0];
    assert_eq!(s.received, count, "{s:?}");
    assert_eq!((s.bad, s.gap_messages), (0, 0), "{s:?}");
    assert!(
        s.wins_a > 0 && s.wins_b > 0,
        "both lines delivered first sometimes: {s:?}"
    );
    // Each line alone loses about 5% of datagrams; only datagrams lost on
    // both (about 0.25%) need a request. Requests count retries too, so the
    // bound is half of one line's loss: far above 0.25%, far below what a
    // single line would have needed.
    assert!(
        s.requested < count * 5 / 100 / 2,
        "requested {} of {count}: {s:?}",
        s.requested
    );
    assert!(s.recovered < count * 5 / 100 / 4, "{s:?}");
    eprintln!("net_recovery: A/B: {s:?}");
}

#[test]
fn a_killed_publisher_is_reported_down() {
    if !prerequisites(true) {
        return;
    }
    let t = Topology::new(3, 1);
    let count = 10_000;
    let mut publisher = Proc::spawn(&t, 0, "pub-die", &config(&t, 0, 1, 65536, ""), count);
    assert_eq!(publisher.line(), "ready");
    // Subscribers wait for more than the publisher will send.
    let mut subs: Vec<Proc> = (1..3)
        .map(|h| Proc::spawn(&t, h, "sub", &config(&t, h, 1, 65536, ""), count * 10))
        .collect();
    for s in &mut subs {
        assert_eq!(s.line(), "ready");
    }
    publisher.say("go");
    assert_eq!(publisher.line(), format!("published {count}"));
    publisher.child.kill().unwrap();
    publisher.child.wait().unwrap();
    for s in subs {
        let mut s = s;
        let seen = parse_seen(&s.line());
        assert!(s.finish());
        assert_eq!(seen.received, count, "{seen:?}");
        assert_eq!(seen.down_at, Some(count), "{seen:?}");
    }
}

#[test]
fn a_late_joiner_on_another_host_recovers_the_retained_history() {
    if !prerequisites(false) {
        return;
    }
    let t = Topology::new(2, 1);
    // Within half the subscriber's reorder window (4096): the history a
    // late joiner fetches.
    let count = 2_000;
    let mut publisher = Proc::spawn(&t, 0, "pub", &config(&t, 0, 1, 65536, ""), count);
    assert_eq!(publisher.line(), "ready");
    publisher.say("go");
    assert_eq!(publisher.line(), format!("published {count}"));
    // Joins after everything was sent: all of it comes by retransmission.
    let mut sub = Proc::spawn(&t, 1, "sub", &config(&t, 1, 1, 65536, ""), count);
    assert_eq!(sub.line(), "ready");
    let seen = parse_seen(&sub.line());
    assert!(sub.finish());
    publisher.say("stop");
    let served = publisher.line();
    assert!(publisher.finish());
    assert_eq!(
        (seen.received, seen.bad, seen.gap_messages),
        (count, 0, 0),
        "{seen:?}; {served}"
    );
    assert_eq!(seen.recovered, count, "{seen:?}");
}

/// The number after `key=` in a report line.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

#[test]
fn upstream_loss_is_asked_for_by_few_of_many_subscribers_and_repaired_to_the_group() {
    if !prerequisites(false) {
        return;
    }
    if !netns::Topology::have_nft() {
        mdbus_testkit::skip(
            "net_recovery",
            Lack::Tool,
            "nftables (`nft`) is not installed",
        );
        return;
    }
    // Twelve subscriber hosts; the switch drops 2% of what the publisher
    // sends to the group as it comes in, so every drop is lost by all
    // twelve.
    let subscribers = 12u64;
    let count = 20_000;
    let mut per_drop = Vec::new();
    for suppress in [false, true] {
        let t = Topology::new(subscribers as usize + 1, 1);
        t.drop_multicast_from(0, 20);
        // The random wait and the linger are scaled to this machine, where
        // thirteen processes share two cores and a poll can be late by
        // milliseconds: 20 ms of spread, a 20 ms linger.
        let extra = if suppress {
            "nak_backoff = \"20ms\"\nnak_group_size = 12\nrepair = \"auto\"\nrepair_linger = \"20ms\"\n"
        } else {
            "nak_backoff = \"0s\"\nrepair = \"requester\"\n"
        };
        let (seen, served) = run_with(&t, 1, 1 << 20, count, extra);
        let dropped = t.multicast_dropped();
        for (i, s) in seen.iter().enumerate() {
            assert_eq!(
                (s.received, s.bad, s.gap_messages),
                (count, 0, 0),
                "subscriber {}: {s:?}; publisher {served}",
                i + 1
            );
        }
        let requests: u64 = seen.iter().map(|s| s.requests_sent).sum();
        let suppressed: u64 = seen.iter().map(|s| s.suppressed).sum();
        eprintln!(
            "net_recovery: fan-out, suppression {suppress}: {dropped} datagrams dropped upstream, \
             {requests} requests, {suppressed} messages repaired unasked; publisher {served}"
        );
        assert!(dropped > 0, "nothing was dropped: {served}");
        if suppress {
            assert!(field(&served, "to_group") > 0, "{served}");
            assert!(suppressed > 0, "{seen:?}");
        } else {
            assert_eq!(field(&served, "to_group"), 0, "{served}");
        }
        per_drop.push(requests as f64 / dropped as f64);
    }
    // Without suppression every subscriber asks for every drop; with it,
    // far fewer do.
    assert!(per_drop[0] >= subscribers as f64 * 0.8, "{per_drop:?}");
    assert!(per_drop[1] < per_drop[0] / 2.0, "{per_drop:?}");
}
