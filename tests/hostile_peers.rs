//! Peers that lie: a TCP peer speaking the hello and then sending
//! impossible credits, frames and sequences, and another process
//! scribbling impossible words into a shared-memory ring. Each ends in a
//! Protocol error naming the channel and what was wrong, or in a reported
//! loss; never a panic, a wrap or a stall. The loops below are bounded by
//! a generous deadline only so that a regression fails instead of hanging.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mdbus::transport::shm::segment::{Kind, Segment};
use mdbus::wire::{self, Header, FLAG_CREDIT, FLAG_HELLO, HEADER_LEN};
use mdbus::{Bus, Config, Error, Event, Session};

const HANG_GUARD: Duration = Duration::from_secs(60);

// ---- TCP -------------------------------------------------------------

fn frame(seq: u64, len: u32, flags: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    Header {
        seq,
        len,
        flags,
        timestamp: 0,
    }
    .encode(&mut out);
    out.extend_from_slice(payload);
    out
}

/// A TCP session end accepting on a free port, and a raw socket that
/// spoke the hello to it (granting `capacity` messages).
fn lying_peer(capacity: u32) -> (Session, TcpStream) {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let cfg = Config::from_toml_str(
        &format!("transport = \"tcp\"\n[sessions.o]\ncapacity = 4\naddress = \"{addr}\"\n"),
        "<test>",
    )
    .unwrap();
    let bus = Bus::new(cfg).unwrap();
    let peer = std::thread::spawn(move || {
        let deadline = Instant::now() + HANG_GUARD;
        let mut sock = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("connect to {addr}: {e}"),
            }
        };
        let hello = wire::hello("o", 232, capacity);
        sock.write_all(&frame(0, hello.len() as u32, FLAG_HELLO, &hello))
            .unwrap();
        let mut head = [0u8; HEADER_LEN];
        sock.read_exact(&mut head).unwrap();
        let len = u32::from_le_bytes(head[8..12].try_into().unwrap());
        let mut body = vec![0u8; len as usize];
        sock.read_exact(&mut body).unwrap();
        assert!(wire::parse_hello(&body).is_some(), "the session's hello");
        sock
    });
    let s = bus.session_accept("o").unwrap();
    (s, peer.join().unwrap())
}

/// Polls until an error, which it returns (the hang guard fails the test).
fn poll_until_error(s: &mut Session) -> Error {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Err(e) = s.poll(|_| {}) {
            return e;
        }
        assert!(Instant::now() < deadline, "no error: the session stalled");
    }
}

fn assert_protocol(e: &Error, reason: &str) {
    match e {
        Error::Protocol {
            channel,
            peer,
            reason: r,
        } => {
            assert_eq!(channel, "session `o`");
            assert!(peer.starts_with("127.0.0.1:"), "{peer}");
            assert_eq!(r, reason);
        }
        other => panic!("not a protocol error: {other}"),
    }
}

#[test]
fn a_credit_for_messages_never_sent_is_a_protocol_error() {
    let (mut s, mut liar) = lying_peer(8);
    liar.write_all(&frame(u64::MAX, 0, FLAG_CREDIT, &[]))
        .unwrap();
    let e = poll_until_error(&mut s);
    assert_protocol(
        &e,
        "a credit for 18446744073709551615 consumed messages, but only 0 were sent",
    );
    assert!(
        e.to_string()
            .starts_with("session `o`: protocol error from 127.0.0.1:"),
        "{e}"
    );
    // Nothing after a lie is trusted: the session stays failed.
    assert!(matches!(s.poll(|_| {}), Err(Error::Protocol { .. })));
}

#[test]
fn an_absurd_credit_while_the_sender_waits_fails_the_send_instead_of_stalling_it() {
    let (mut s, mut liar) = lying_peer(2);
    s.send(b"one").unwrap();
    s.send(b"two").unwrap();
    // Out of credit now; the lie arrives while the third send waits.
    liar.write_all(&frame(1 << 62, 0, FLAG_CREDIT, &[]))
        .unwrap();
    let e = s.send(b"three").unwrap_err();
    assert_protocol(
        &e,
        "a credit for 4611686018427387904 consumed messages, but only 2 were sent",
    );
}

#[test]
fn a_credit_going_back_is_a_protocol_error() {
    let (mut s, mut liar) = lying_peer(8);
    s.send(b"one").unwrap();
    s.send(b"two").unwrap();
    liar.write_all(&frame(2, 0, FLAG_CREDIT, &[])).unwrap();
    liar.write_all(&frame(1, 0, FLAG_CREDIT, &[])).unwrap();
    let e = poll_until_error(&mut s);
    assert_protocol(
        &e,
        "a credit for 1 consumed messages after one for 2: credits never go back",
    );
}

#[test]
fn a_frame_longer_than_max_message_is_a_protocol_error() {
    let (mut s, mut liar) = lying_peer(8);
    // Only the header: the length alone is the lie, no 100 kB follow.
    liar.write_all(&frame(1, 100_000, 0, &[])).unwrap();
    let e = poll_until_error(&mut s);
    assert_protocol(&e, "a frame of 100000 bytes, larger than max_message 232");
}

#[test]
fn sequences_that_go_back_or_skip_are_protocol_errors() {
    let (mut s, mut liar) = lying_peer(8);
    liar.write_all(&frame(1, 2, 0, b"ok")).unwrap();
    liar.write_all(&frame(1, 2, 0, b"ok")).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + HANG_GUARD;
    let e = loop {
        match s.poll(|m| got.push(m.seq())) {
            Ok(_) => assert!(Instant::now() < deadline, "stalled"),
            Err(e) => break e,
        }
    };
    assert_eq!(got, [1], "the good frame is delivered, the repeat is not");
    assert_protocol(
        &e,
        "frame with sequence 1 and length 2, expected sequence 2: the sequence goes backwards",
    );

    let (mut s, mut liar) = lying_peer(8);
    liar.write_all(&frame(1, 0, 0, &[])).unwrap();
    liar.write_all(&frame(5, 0, 0, &[])).unwrap();
    let e = poll_until_error(&mut s);
    assert_protocol(
        &e,
        "frame with sequence 5 and length 0, expected sequence 2: the sequence skips ahead",
    );
}

#[test]
fn a_credit_frame_with_a_payload_is_a_protocol_error() {
    let (mut s, mut liar) = lying_peer(8);
    liar.write_all(&frame(0, 3, FLAG_CREDIT, b"abc")).unwrap();
    let e = poll_until_error(&mut s);
    assert_protocol(&e, "a credit frame with 3 payload bytes, where none belong");
}

// ---- Shared memory ---------------------------------------------------

struct Shm {
    bus: Bus,
    dir: PathBuf,
}

impl Drop for Shm {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn shm(tag: &str, extra: &str) -> Shm {
    let dir = std::env::temp_dir().join(format!("mdbus-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "transport = \"shm\"\n[shm]\ndir = \"{}\"\nhuge_pages = \"off\"\nmlock = false\n{extra}",
        dir.display()
    );
    Shm {
        bus: Bus::new(Config::from_toml_str(&text, "<test>").unwrap()).unwrap(),
        dir,
    }
}

/// A second mapping of a live segment, as another process would have.
struct Scribbler(Segment);

impl Scribbler {
    fn open(env: &Shm, kind: &str, name: &str) -> Scribbler {
        let k = if kind == "stream" {
            Kind::Stream
        } else {
            Kind::Session
        };
        let path = env.dir.join(format!("mdbus.{kind}.{name}"));
        Scribbler(Segment::open(&path, k).unwrap())
    }

    /// Word `i` of the slot that holds sequence `seq` in ring `r`.
    fn slot_word(&self, r: usize, seq: u64, i: usize) -> &std::sync::atomic::AtomicU64 {
        let f = self.0.fields();
        let words = f.slot_size as usize / 8;
        let at = (seq & (f.capacity - 1)) as usize * words + i;
        // SAFETY: `at` lies inside ring `r` of the mapping, which lives as
        // long as `self`.
        unsafe { &*self.0.slots(r).add(at) }
    }

    fn tail(&self) -> &std::sync::atomic::AtomicU64 {
        self.0.producer_word(0)
    }

    fn path(&self) -> String {
        self.0.path().display().to_string()
    }
}

const RELAXED: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

fn stream_error(sub: &mut mdbus::Subscriber) -> (Vec<String>, Error) {
    let mut events = Vec::new();
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let r = sub.poll(|e| events.push(format!("{e:?}")));
        if let Err(e) = r {
            return (events, e);
        }
        assert!(Instant::now() < deadline, "no error: {events:?}");
    }
}

#[test]
fn a_slot_length_larger_than_the_slot_is_a_protocol_error() {
    let env = shm("len", "[streams.s]\ncapacity = 64\n");
    let mut p = env.bus.publisher("s").unwrap();
    let mut sub = env.bus.subscriber("s").unwrap();
    p.publish(b"hello").unwrap();
    let w = Scribbler::open(&env, "stream", "s");
    w.slot_word(0, 1, 1).store(1_000_000, RELAXED);
    let (events, e) = stream_error(&mut sub);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "stream `s`: protocol error from the segment {}: the slot of sequence 1 states a length of 1000000 bytes, more than its 232",
            w.path()
        )
    );
}

#[test]
fn a_tail_beyond_any_sequence_is_a_protocol_error() {
    let env = shm("tail", "[streams.s]\ncapacity = 64\n");
    let mut p = env.bus.publisher("s").unwrap();
    let mut sub = env.bus.subscriber("s").unwrap();
    p.publish(b"hello").unwrap();
    let w = Scribbler::open(&env, "stream", "s");
    // The slot claims the writer lapped the reader; the tail is absurd.
    w.slot_word(0, 1, 0).store(1 + 3 * 64, RELAXED);
    w.tail().store(u64::MAX, RELAXED);
    let (_, e) = stream_error(&mut sub);
    assert_eq!(
        e.to_string(),
        format!(
            "stream `s`: protocol error from the segment {}: its tail word holds 18446744073709551615, beyond any sequence (reading 1)",
            w.path()
        )
    );
    // A subscriber attaching now refuses the segment at once.
    let e = env.bus.subscriber("s").unwrap_err().to_string();
    assert!(
        e.ends_with("its tail word holds 18446744073709551615, beyond any sequence"),
        "{e}"
    );
}

#[test]
fn a_slot_claiming_a_lap_is_reported_as_loss_and_reading_goes_on() {
    let env = shm("lap", "[streams.s]\ncapacity = 64\n");
    let mut p = env.bus.publisher("s").unwrap();
    let mut sub = env.bus.subscriber("s").unwrap();
    p.publish(b"one").unwrap();
    p.publish(b"two").unwrap();
    let w = Scribbler::open(&env, "stream", "s");
    w.slot_word(0, 1, 0).store(1 + 3 * 64, RELAXED);
    let mut events = Vec::new();
    for _ in 0..10 {
        sub.poll(|e| {
            events.push(match e {
                Event::Message(m) => format!("message {}", m.seq()),
                other => format!("{other:?}"),
            })
        })
        .unwrap();
    }
    // Taken for a lap: the reader resumes a margin ahead of the oldest
    // retained message, never beyond the tail, and says what it skipped.
    assert_eq!(events, ["Overrun { from: 1, to: 3 }"]);
    assert_eq!(sub.stats().overrun_messages, 2);
    p.publish(b"three").unwrap();
    sub.poll(|e| events.push(format!("{e:?}"))).unwrap();
    assert_eq!(events.len(), 2);
    assert!(events[1].contains("seq: 3"), "{events:?}");
}

#[test]
fn a_tail_running_backwards_is_a_protocol_error() {
    let env = shm("back", "[streams.s]\ncapacity = 64\n");
    let mut p = env.bus.publisher("s").unwrap();
    let mut sub = env.bus.subscriber("s").unwrap();
    for i in 0..10u8 {
        p.publish(&[i]).unwrap();
    }
    let mut n = 0;
    while n < 10 {
        n += sub.poll(|_| {}).unwrap();
    }
    let w = Scribbler::open(&env, "stream", "s");
    w.tail().store(3, RELAXED);
    let (events, e) = stream_error(&mut sub);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "stream `s`: protocol error from the segment {}: its tail word holds 3, behind this subscriber's position 11 or beyond any sequence",
            w.path()
        )
    );
}

#[test]
fn a_stopped_publisher_whose_tail_promises_unwritten_messages_reports_them_lost() {
    let env = shm("promise", "[streams.s]\ncapacity = 64\n");
    let mut p = env.bus.publisher("s").unwrap();
    let mut sub = env.bus.subscriber("s").unwrap();
    p.publish(b"one").unwrap();
    p.publish(b"two").unwrap();
    let w = Scribbler::open(&env, "stream", "s");
    // The tail says 49 were published; slots 3..=49 were never written.
    w.tail().store(50, RELAXED);
    drop(p);
    let mut events = Vec::new();
    let deadline = Instant::now() + HANG_GUARD;
    while !events.iter().any(|e: &String| e.starts_with("EndOfStream")) {
        sub.poll(|e| {
            events.push(match e {
                Event::Message(m) => format!("message {}", m.seq()),
                other => format!("{other:?}"),
            })
        })
        .unwrap();
        assert!(Instant::now() < deadline, "stalled: {events:?}");
    }
    assert_eq!(
        events,
        [
            "message 1",
            "message 2",
            "Overrun { from: 3, to: 50 }",
            "EndOfStream { last_seq: 49 }"
        ]
    );
}

/// Acceptor and initiator of shared-memory session `o`, in this process.
fn session_pair(env: &Shm) -> (Session, Session) {
    let bus = env.bus.clone();
    let t = std::thread::spawn(move || bus.session_accept("o").unwrap());
    let c = env.bus.session_connect("o").unwrap();
    (t.join().unwrap(), c)
}

#[test]
fn a_session_head_ahead_of_what_was_sent_fails_the_send() {
    let env = shm("head", "[sessions.o]\ncapacity = 4\n");
    let (mut a, _c) = session_pair(&env);
    for i in 0..4u8 {
        a.send(&[i]).unwrap();
    }
    let w = Scribbler::open(&env, "session", "o");
    // The acceptor sends on ring 0; its consumer's head says 1000 consumed.
    w.0.consumer_word(0).store(1000, RELAXED);
    let e = a.send(b"fifth").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "session `o`: protocol error from the segment {}: the peer's head word holds 1000: it consumed more than the 4 messages sent, or went back",
            w.path()
        )
    );
}

#[test]
fn a_session_slot_with_a_foreign_sequence_is_a_protocol_error() {
    let env = shm("seq", "[sessions.o]\ncapacity = 4\n");
    let (mut a, _c) = session_pair(&env);
    let w = Scribbler::open(&env, "session", "o");
    // The acceptor receives on ring 1.
    w.slot_word(1, 1, 0).store(77, RELAXED);
    let e = poll_until_error(&mut a);
    assert_eq!(
        e.to_string(),
        format!(
            "session `o`: protocol error from the segment {}: the slot of sequence 1 holds 77 in its sequence word, which its writer cannot have written",
            w.path()
        )
    );
}

// ---- Loss across a publisher restart -----------------------------------

#[test]
fn a_restart_reports_exactly_what_the_new_incarnation_no_longer_retains() {
    let env = shm("restart", "[streams.s]\ncapacity = 64\n");
    let mut p = env.bus.publisher("s").unwrap();
    let mut sub = env.bus.subscriber("s").unwrap();
    for i in 0..5u8 {
        p.publish(&[i]).unwrap();
    }
    drop(p);
    let deadline = Instant::now() + HANG_GUARD;
    let mut ended = false;
    let mut first = Vec::new();
    while !ended {
        sub.poll(|e| match e {
            Event::Message(m) => first.push(m.seq()),
            Event::EndOfStream { last_seq } => {
                assert_eq!(last_seq, 5);
                ended = true;
            }
            other => panic!("unexpected {other:?}"),
        })
        .unwrap();
        assert!(Instant::now() < deadline, "no end of stream");
    }
    assert_eq!(first, [1, 2, 3, 4, 5]);

    // The new incarnation publishes three rings' worth before the
    // subscriber looks.
    let total: u64 = 3 * 64 + 7;
    let mut p = env.bus.publisher("s").unwrap();
    for seq in 1..=total {
        p.publish(&seq.to_le_bytes()).unwrap();
    }
    let mut events: Vec<String> = Vec::new();
    // How many times each sequence is covered, by a message or a loss.
    let mut covered = vec![0u32; total as usize + 1];
    let deadline = Instant::now() + HANG_GUARD;
    while covered[total as usize] == 0 {
        sub.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.payload(), m.seq().to_le_bytes());
                covered[m.seq() as usize] += 1;
            }
            Event::Overrun { from, to } => {
                events.push(format!("Overrun {{ from: {from}, to: {to} }}"));
                for s in from..to {
                    covered[s as usize] += 1;
                }
            }
            Event::PublisherRestarted { .. } => events.push("PublisherRestarted".into()),
            other => panic!("unexpected {other:?}"),
        })
        .unwrap();
        assert!(Instant::now() < deadline, "the restart was not seen");
    }
    // The oldest message certainly intact is tail + 1 - capacity.
    let first_retained = total + 2 - 64;
    assert_eq!(
        events,
        [
            "PublisherRestarted".to_string(),
            format!("Overrun {{ from: 1, to: {first_retained} }}")
        ]
    );
    assert!(
        covered[1..].iter().all(|&c| c == 1),
        "covered other than once: {:?}",
        covered
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, &c)| c != 1)
            .collect::<Vec<_>>()
    );
    assert_eq!(sub.stats().overrun_messages, first_retained - 1);
}

// ---- Claims beyond the maximum ---------------------------------------

/// The transports' own claim paths are public and safe: a length beyond
/// the maximum is refused in every build, never an out-of-bounds slice.
#[test]
fn transport_claims_refuse_lengths_beyond_the_maximum() {
    use mdbus::transport::shm::{ShmPublisher, ShmSession};
    use mdbus::transport::{SessionEnd, StreamSend};
    let env = shm("claim", "");
    let cfg = mdbus::config::StreamConfig {
        max_message: 100,
        ..Default::default()
    };
    let shm_cfg = mdbus::config::ShmConfig {
        dir: env.dir.clone(),
        huge_pages: mdbus::config::HugePages::Off,
        mlock: false,
        ..Default::default()
    };
    let mut p = ShmPublisher::create(&shm_cfg, "big", &cfg).unwrap();
    match p.claim(1 << 30) {
        Err(Error::MessageTooLarge { len, max, channel }) => {
            assert_eq!((len, max, channel.as_str()), (1 << 30, 100, "stream `big`"))
        }
        other => panic!("claimed {:?}", other.map(|b| b.len())),
    }
    assert_eq!(p.claim(100).unwrap().len(), 100);
    assert!(matches!(
        p.commit(101, 0, 0),
        Err(Error::MessageTooLarge { len: 101, .. })
    ));

    let scfg = mdbus::config::SessionConfig {
        max_message: 100,
        capacity: 4,
        ..Default::default()
    };
    let (c1, s1) = (shm_cfg.clone(), scfg.clone());
    let t = std::thread::spawn(move || ShmSession::accept(&c1, "big", &s1).unwrap());
    let _c = ShmSession::connect(&shm_cfg, "big", &scfg).unwrap();
    let mut a = t.join().unwrap();
    assert!(a.try_claim(1 << 30).is_none());
    assert_eq!(a.try_claim(100).map(|b| b.len()), Some(100));

    // And the public handles name the channel and both lengths.
    let (mut s, _liar) = lying_peer(8);
    let e = s.send(&[0u8; 233]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a 233-byte message is larger than the 232-byte maximum of session `o`; raise max_message in its configuration"
    );
}
