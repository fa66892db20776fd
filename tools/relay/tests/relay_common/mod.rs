//! What the relay tests share: scratch directories, configurations,
//! synthetic sessions, and subscribers that collect what the relay
//! published.

#![allow(dead_code)]

pub mod live;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mdbus_feed::synth::{Generator, SynthConfig};
use mdbus_relay::RelayMessage;

/// A directory of its own under /dev/shm (or the temp dir), removed on
/// drop.
pub struct Scratch {
    pub dir: PathBuf,
    pub tag: String,
}

impl Scratch {
    pub fn new(test: &str) -> Scratch {
        let tag = format!("{test}-{}", std::process::id());
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("mdbus-relay-test-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir, tag }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The `[bus]` section: shared memory in this directory.
    pub fn shm_bus(&self, capacity: usize) -> String {
        format!(
            "[bus]\ntransport = \"shm\"\n[bus.shm]\ndir = \"{}\"\nprefix = \"t\"\nhuge_pages = \"off\"\nmlock = false\n\
             [bus.streams.s1]\ncapacity = {capacity}\n[bus.streams.s2]\ncapacity = {capacity}\n\
             [bus.streams.rest]\ncapacity = {capacity}\n[bus.streams.ctl]\ncapacity = {capacity}\n",
            self.dir.display()
        )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Routing used by most tests. The synthetic session's symbols are
/// AAAA, AAAB, ... by locate (1 = AAAA, 27 = AABA), so: locates 1-13 on
/// s1, 14-26 on s2, the rest on `rest`; system messages everywhere; a
/// control stream for unknown locates.
pub const ROUTING: &str = r#"
[routing]
mode = "lists"
system = "all"
control = "ctl"
default = "rest"
[[routing.streams]]
name = "s1"
ranges = [["AAAA", "AAAM"]]
[[routing.streams]]
name = "s2"
ranges = [["AAAN", "AAAZ"]]
"#;

/// The streams of [`ROUTING`], in routing order.
pub const STREAMS: [&str; 4] = ["s1", "s2", "rest", "ctl"];

/// Where [`ROUTING`] sends a message with this locate and type.
pub fn expected_streams(msg: &[u8]) -> Vec<&'static str> {
    let t = msg[0];
    let locate = u16::from_be_bytes([msg[1], msg[2]]);
    if matches!(t, b'S' | b'V' | b'W') || locate == 0 {
        return STREAMS.to_vec();
    }
    match locate {
        1..=13 => vec!["s1"],
        14..=26 => vec!["s2"],
        _ => vec!["rest"],
    }
}

/// A synthetic session's messages.
pub fn session(symbols: u16, order_messages: u64, seed: u64) -> Vec<Vec<u8>> {
    let cfg = SynthConfig {
        seed,
        symbols,
        order_messages,
        ..SynthConfig::default()
    };
    Generator::new(&cfg)
        .unwrap()
        .map(|m| m.bytes().to_vec())
        .collect()
}

/// What one stream delivered: (MoldUDP64 sequence, ITCH bytes), in
/// delivery order, and whether it ended.
#[derive(Debug, Default, Clone)]
pub struct Received {
    pub messages: Vec<(u64, Vec<u8>)>,
    pub stamped: u64,
    pub losses: u64,
    pub ended: bool,
    /// Upstream ranges the relay reported lost (`Event::SourceGap`), with
    /// the number of messages received before each.
    pub source_gaps: Vec<(u64, u64, usize)>,
}

/// Polls `subs` until each has `want[name]` messages (or ended), failing
/// after `deadline` with what it has.
pub fn collect(
    subs: &mut [mdbus::Subscriber],
    want: &BTreeMap<String, usize>,
    deadline: Duration,
) -> BTreeMap<String, Received> {
    collect_with(subs, want, deadline, &String::new)
}

/// [`collect`], adding `context()` (the relay's counters, say) to the
/// failure message.
pub fn collect_with(
    subs: &mut [mdbus::Subscriber],
    want: &BTreeMap<String, usize>,
    deadline: Duration,
    context: &dyn Fn() -> String,
) -> BTreeMap<String, Received> {
    let mut got: BTreeMap<String, Received> = subs
        .iter()
        .map(|s| (s.name().to_string(), Received::default()))
        .collect();
    let until = Instant::now() + deadline;
    loop {
        let mut done = true;
        for s in subs.iter_mut() {
            let name = s.name().to_string();
            let r = got.get_mut(&name).unwrap();
            s.poll(|e| match e {
                mdbus::Event::Message(m) => {
                    let rm = RelayMessage::parse(m.payload()).expect("a relay payload");
                    if m.timestamp().is_some() {
                        r.stamped += 1;
                    }
                    r.messages.push((rm.sequence, rm.itch.to_vec()));
                }
                mdbus::Event::SourceGap { from, to } => {
                    r.source_gaps.push((from, to, r.messages.len()))
                }
                mdbus::Event::Gap { .. } | mdbus::Event::Overrun { .. } => r.losses += 1,
                mdbus::Event::EndOfStream { .. } | mdbus::Event::PublisherDown { .. } => {
                    r.ended = true
                }
                _ => {}
            })
            .unwrap();
            if r.messages.len() < want.get(&name).copied().unwrap_or(0) && !r.ended {
                done = false;
            }
        }
        if done {
            return got;
        }
        if Instant::now() > until {
            let counts: Vec<_> = got
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}: {} messages, {} losses, ended {}",
                        v.messages.len(),
                        v.losses,
                        v.ended
                    )
                })
                .collect();
            panic!(
                "subscribers did not get everything within {deadline:?}: have {counts:?}, want {want:?}; {}",
                context()
            );
        }
        std::thread::yield_now();
    }
}

/// Checks that every stream got exactly the messages [`ROUTING`] sends it
/// out of `sent` (sequence, bytes), in order.
pub fn check_delivery(sent: &[(u64, Vec<u8>)], got: &BTreeMap<String, Received>) {
    let mut want: BTreeMap<&str, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
    for (seq, m) in sent {
        for s in expected_streams(m) {
            want.entry(s).or_default().push((*seq, m.clone()));
        }
    }
    for s in STREAMS {
        let g = &got[s];
        let w = want.remove(s).unwrap_or_default();
        assert_eq!(g.losses, 0, "stream {s} reported losses");
        assert!(
            g.source_gaps.is_empty(),
            "stream {s}: source gaps {:?}",
            g.source_gaps
        );
        assert_eq!(g.messages.len(), w.len(), "stream {s}: message count");
        for (i, (a, b)) in g.messages.iter().zip(&w).enumerate() {
            assert_eq!(a, b, "stream {s}: message {i} differs");
        }
        assert!(
            g.messages.windows(2).all(|p| p[0].0 < p[1].0),
            "stream {s}: sequence numbers not increasing"
        );
    }
}
