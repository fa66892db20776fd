//! Replay then live: a subscriber that joins at 80% of the stream and asks
//! for everything from sequence 1 receives every message exactly once, in
//! order, the archived range first and then the live stream, while the
//! publisher keeps publishing; on shared memory and on UDP.

use mdbus::archive::Recorder;
use mdbus::{Bus, Config, Event};

mod archive_support;
use archive_support::{check, late_join_day, payload, Seen, CAPACITY};

fn dir(name: &str) -> std::path::PathBuf {
    archive_support::dir("archive-replay", name)
}

fn shm_toml() -> String {
    archive_support::shm_toml("rpl")
}

fn udp_toml() -> String {
    let n = archive_support::unique();
    let port = 40_000 + (std::process::id() % 1_000) * 16 + n;
    let group = format!("239.254.{}.{}", 1 + std::process::id() % 250, 1 + n % 250);
    format!(
        "transport = \"udp\"\n[streams.md]\ngroup = \"{group}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\n\
         heartbeat_interval = \"20ms\"\nheartbeat_timeout = \"2s\"\n"
    )
}

/// Publishes N messages (never more than half the ring ahead of the
/// recorder, so the archive is whole), joins a subscriber at 80% and
/// checks what it receives while publishing goes on.
fn whole_day(
    transport_toml: String,
    name: &str,
    configured: bool,
) -> (Seen, mdbus::archive::ReplayStats) {
    whole_day_on(transport_toml, name, configured, |t| t.to_string())
}

/// The same, with the recorder and the subscriber on a bus of their own
/// whose configuration `receiving` makes from the publisher's (verbs:
/// received on the second device, as on another host).
fn whole_day_on(
    transport_toml: String,
    name: &str,
    configured: bool,
    receiving: impl Fn(&str) -> String,
) -> (Seen, mdbus::archive::ReplayStats) {
    let d = dir(name);
    let mut toml = transport_toml;
    if !toml.contains("[streams.md]") {
        toml.push_str("[streams.md]\n");
    }
    toml.push_str(&format!("capacity = {CAPACITY}\nmax_message = 64\n"));
    if configured {
        toml.push_str("late_join = \"archive\"\narchive_from = 1\n");
    }
    toml.push_str(&format!(
        "[streams.md.archive]\ndir = \"{}\"\nsegment_bytes = 1048576\n[counters]\nenabled = false\n",
        d.display()
    ));
    let pub_bus = Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap();
    let mut publisher = pub_bus.publisher("md").unwrap();
    let bus = if receiving(&toml) == toml {
        None
    } else {
        Some(Bus::new(Config::from_toml_str(&receiving(&toml), "<test>").unwrap()).unwrap())
    };
    let bus = bus.as_ref().unwrap_or(&pub_bus);
    let recorder = Recorder::start(bus, "md").unwrap();
    let (seen, stats, _) = late_join_day(
        &mut publisher,
        &recorder,
        || {
            if configured {
                bus.subscriber("md").unwrap()
            } else {
                mdbus::archive::subscribe_from(bus, "md", 1).unwrap()
            }
        },
        String::new,
    );
    drop(recorder);
    std::fs::remove_dir_all(&d).unwrap();
    (seen, stats)
}

#[test]
fn shm_late_joiner_configured_with_late_join_archive_gets_the_whole_day_once_in_order() {
    let (seen, stats) = whole_day(shm_toml(), "shm", true);
    check(seen, stats);
}

#[test]
fn udp_late_joiner_from_sequence_1_gets_the_whole_day_once_in_order() {
    let (seen, stats) = whole_day(udp_toml(), "udp", false);
    check(seen, stats);
}

#[test]
fn a_range_the_archive_does_not_hold_is_one_gap_with_its_exact_range() {
    let d = dir("gap");
    let toml = format!(
        "{}[streams.md]\ncapacity = {CAPACITY}\nmax_message = 64\n[streams.md.archive]\ndir = \"{}\"\nsegment_bytes = 1048576\n[counters]\nenabled = false\n",
        shm_toml(),
        d.display()
    );
    let bus = Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap();
    let (mut publisher, recorder, first) = archive_support::archive_missing_its_start(&bus, &d);
    let mut sub = mdbus::archive::subscribe_from(&bus, "md", 5).unwrap();
    let mut events = Vec::new();
    let mut next = 0;
    for seq in 3001..=3100 {
        publisher.publish(&payload(seq)).unwrap();
        sub.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.seq(), next, "in order, once");
                next += 1;
            }
            Event::Gap { from, to } => {
                events.push((from, to));
                next = to;
            }
            other => panic!("{other:?}"),
        })
        .unwrap();
    }
    let start = std::time::Instant::now();
    while next <= 3100 {
        assert!(start.elapsed().as_secs() < 60, "watchdog at {next}");
        sub.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.seq(), next, "in order, once");
                next += 1;
            }
            other => panic!("{other:?}"),
        })
        .unwrap();
    }
    assert_eq!(events, vec![(5, first)]);
    assert_eq!(sub.stats().gap_messages, first - 5);
    drop(recorder);
    std::fs::remove_dir_all(&d).unwrap();
}

/// The stream ends while the late joiner is still replaying: it gets
/// every message first, from the archive, and the end last.
#[test]
fn the_end_of_the_stream_comes_after_the_archived_messages_before_it() {
    let d = dir("end");
    let toml = format!(
        "{}[streams.md]\ncapacity = {CAPACITY}\nmax_message = 64\npoll_batch = {}\n[streams.md.archive]\ndir = \"{}\"\nsegment_bytes = 1048576\n[counters]\nenabled = false\n",
        shm_toml(),
        // Polls that could take the whole ring at once.
        4 * CAPACITY,
        d.display()
    );
    let bus = Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap();
    let mut publisher = bus.publisher("md").unwrap();
    let recorder = Recorder::start(&bus, "md").unwrap();
    let n = 3 * CAPACITY;
    for seq in 1..=n {
        while recorder.stats().last_seq + CAPACITY / 2 < seq {
            std::thread::yield_now();
        }
        publisher.publish(&payload(seq)).unwrap();
    }
    // Joined (its live part at the ring's oldest), then the stream ends.
    let mut sub = mdbus::archive::subscribe_from(&bus, "md", 1).unwrap();
    drop(publisher);
    while recorder.stats().last_seq < n {
        std::thread::yield_now();
    }
    let (mut next, mut ended) = (1, None);
    let start = std::time::Instant::now();
    while ended.is_none() {
        assert!(
            start.elapsed().as_secs() < 60,
            "watchdog at {next}: {:?}, recorder {:?}",
            sub.replay_stats(),
            recorder.stats()
        );
        sub.poll(|e| match e {
            Event::Message(m) => {
                assert!(ended.is_none(), "message {} after the end", m.seq());
                assert_eq!(m.seq(), next, "in order, once");
                assert_eq!(m.payload(), payload(m.seq()));
                next += 1;
            }
            Event::EndOfStream { last_seq } => ended = Some((last_seq, next)),
            other => panic!("{other:?}"),
        })
        .unwrap();
    }
    assert_eq!(ended, Some((n, n + 1)), "the end after message {n}");
    drop(recorder);
    std::fs::remove_dir_all(&d).unwrap();
}

mod verbs_support;

/// On RDMA verbs (UD multicast), publisher on the first device, recorder
/// and subscriber on the second; in the RDMA guest (`scripts/guest-tests
/// archive_replay`), elsewhere skipped as every verbs test is.
#[test]
fn verbs_late_joiner_from_sequence_1_gets_the_whole_day_once_in_order() {
    if !verbs_support::rdma_or_skip(
        "verbs_late_joiner_from_sequence_1_gets_the_whole_day_once_in_order",
    ) {
        return;
    }
    let (a, b) = (verbs_support::addr_a(), verbs_support::addr_b());
    let toml = format!(
        "transport = \"verbs\"\n[streams.md]\ngroup = \"{}\"\ninterface = \"{a}\"\nheartbeat_interval = \"20ms\"\nheartbeat_timeout = \"2s\"\n",
        verbs_support::unique_group()
    );
    let (seen, stats) = whole_day_on(toml, "verbs", false, |t| {
        t.replace(
            &format!("interface = \"{a}\""),
            &format!("interface = \"{b}\""),
        )
    });
    check(seen, stats);
}
