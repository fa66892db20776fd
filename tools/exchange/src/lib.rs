//! An exchange simulator: an ITCH 5.0 session over MoldUDP64 on A and B
//! multicast lines, with a re-request server.
//!
//! [`Exchange::start`] generates a synthetic trading day
//! ([`mdbus_feed::synth::Generator`], packed by
//! [`MoldPacker`](mdbus_feed::synth::MoldPacker)) and starts two threads:
//!
//! - the **sender** sends every packet on line A and on line B, each copy
//!   dropped independently with the line's probability (a seeded PRNG, so
//!   a run is reproducible), paced to `messages_per_second`; heartbeats
//!   while it waits longer than `heartbeat_interval`; the end-of-session
//!   packet three times at the end. With `repeat`, another day follows
//!   under the next session name, until [`Exchange::stop`].
//! - the **re-request server** answers MoldUDP64 request packets on a
//!   unicast socket with the messages asked for (only those already sent
//!   on the lines), packed into packets of at most `max_packet` bytes and
//!   sent to the requester's address. Malformed requests and requests for
//!   another session or for nothing that exists are counted and ignored.
//!
//! Loss applies to message packets only: heartbeats and end-of-session
//! packets always go out on both lines.
//!
//! The `mdbus-exchange` binary, and `mdbus-relay simulate`, run it from the
//! command line ([`SimulateArgs`], [`run`], [`run_simulate`]).

mod cli;
mod day;
mod sender;
mod server;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mdbus_feed::moldudp64::{Session, BLOCK_PREFIX_LEN, HEADER_LEN};
use mdbus_feed::synth::{SynthConfig, SynthError};
use socket2::{Domain, Protocol, Socket, Type};

pub use cli::{run, run_simulate, SimulateArgs};

use day::Day;

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeConfig {
    /// Session name of the (first) day.
    pub session: Session,
    /// Line A's multicast group and port.
    pub line_a: SocketAddrV4,
    /// Line B's multicast group and port.
    pub line_b: SocketAddrV4,
    /// Address of the interface to send from (`127.0.0.1`: loopback
    /// multicast, this host only).
    pub interface: Ipv4Addr,
    /// Multicast time-to-live.
    pub ttl: u32,
    /// Probability that line A's copy of a packet is not sent (0..=1).
    pub drop_a: f64,
    /// Probability that line B's copy of a packet is not sent (0..=1).
    pub drop_b: f64,
    /// Seed of the drop decisions (the session's own seed is
    /// `synth.seed`).
    pub seed: u64,
    /// The session to generate.
    pub synth: SynthConfig,
    /// Pace: messages per second (0: as fast as the sockets take them).
    pub messages_per_second: u64,
    /// Largest MoldUDP64 packet sent, on the lines and in answers.
    pub max_packet: usize,
    /// Where the re-request server listens (port 0: any free port; see
    /// [`Exchange::rerequest_addr`]).
    pub rerequest_bind: SocketAddrV4,
    /// A heartbeat goes out on both lines after this long without a packet.
    pub heartbeat_interval: Duration,
    /// Loop forever: after each end of session, a new day under the next
    /// session name ([`next_session`]) and the next seed.
    pub repeat: bool,
}

impl Default for ExchangeConfig {
    /// Session `MDBUS00001` on 239.192.10.1:26400 (A) and
    /// 239.192.10.2:26400 (B) over loopback, no loss, 100,000 messages a
    /// second, 1,400-byte packets, re-requests on any free loopback port,
    /// heartbeats every second.
    fn default() -> Self {
        Self {
            session: Session::new("MDBUS00001").unwrap_or(Session::BLANK),
            line_a: SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 1), 26400),
            line_b: SocketAddrV4::new(Ipv4Addr::new(239, 192, 10, 2), 26400),
            interface: Ipv4Addr::LOCALHOST,
            ttl: 1,
            drop_a: 0.0,
            drop_b: 0.0,
            seed: 1,
            synth: SynthConfig::default(),
            messages_per_second: 100_000,
            max_packet: 1400,
            rerequest_bind: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
            heartbeat_interval: Duration::from_secs(1),
            repeat: false,
        }
    }
}

/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

/// Why the simulator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// A line's address is not a multicast group.
    #[error("line {line} address {addr} is not an IPv4 multicast group (224.0.0.0/4)")]
    NotMulticast {
        /// `A` or `B`.
        line: char,
        /// The address given.
        addr: SocketAddrV4,
    },
    /// Both lines have the same address.
    #[error("lines A and B are both {addr}: give them different groups or ports")]
    SameLines {
        /// The address given twice.
        addr: SocketAddrV4,
    },
    /// A drop probability outside 0..=1.
    #[error("the drop probability of line {line} is {value}; it must be between 0 and 1")]
    DropProbability {
        /// `A` or `B`.
        line: char,
        /// The value given.
        value: f64,
    },
    /// The packet size cannot hold the largest ITCH message, or exceeds a
    /// UDP datagram.
    #[error("a maximum packet size of {max} bytes cannot be used: {reason}")]
    MaxPacket {
        /// The size given.
        max: usize,
        /// Why.
        reason: String,
    },
    /// The session cannot be generated.
    #[error("cannot generate the session: {0}")]
    Synth(#[from] SynthError),
    /// Multicast cannot be sent from the interface.
    #[error("cannot send multicast from interface {interface}: {reason}")]
    Interface {
        /// The interface address given.
        interface: Ipv4Addr,
        /// What failed, and a hint.
        reason: String,
    },
    /// The re-request server's socket cannot be bound.
    #[error("cannot bind the re-request server to {addr}: {source}")]
    Rerequest {
        /// The address given.
        addr: SocketAddrV4,
        /// The error.
        source: io::Error,
    },
    /// A thread cannot be started.
    #[error("cannot start the simulator's {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// What the simulator has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeCounters {
    /// Messages sent (once per message, whichever lines carried it).
    pub messages: u64,
    /// Message packets sent (once per packet).
    pub packets: u64,
    /// Packets that went out on line A (heartbeats and end of session
    /// included).
    pub packets_a: u64,
    /// Packets that went out on line B.
    pub packets_b: u64,
    /// Messages that went out on line A.
    pub messages_a: u64,
    /// Messages that went out on line B.
    pub messages_b: u64,
    /// Message packets line A dropped.
    pub dropped_a: u64,
    /// Message packets line B dropped.
    pub dropped_b: u64,
    /// Messages in the packets line A dropped.
    pub dropped_messages_a: u64,
    /// Messages in the packets line B dropped.
    pub dropped_messages_b: u64,
    /// Message packets both lines dropped.
    pub dropped_both: u64,
    /// Heartbeats sent (each on both lines).
    pub heartbeats: u64,
    /// Datagrams the lines failed to send (socket errors).
    pub send_errors: u64,
    /// Requests answered.
    pub requests_served: u64,
    /// Datagrams on the re-request socket that are not request packets.
    pub requests_malformed: u64,
    /// Requests for another session, for nothing, or for messages not
    /// sent yet.
    pub requests_ignored: u64,
    /// Messages sent in answers.
    pub messages_resent: u64,
    /// Answer packets sent.
    pub packets_resent: u64,
    /// Sessions whose end-of-session packets have been sent.
    pub sessions_finished: u64,
    /// The session is over (without `repeat`: the simulator has nothing
    /// left to send, and keeps answering requests until stopped).
    pub finished: bool,
}

/// The counters, shared by the threads.
#[derive(Debug, Default)]
struct Stats {
    messages: AtomicU64,
    packets: AtomicU64,
    packets_a: AtomicU64,
    packets_b: AtomicU64,
    messages_a: AtomicU64,
    messages_b: AtomicU64,
    dropped_a: AtomicU64,
    dropped_b: AtomicU64,
    dropped_messages_a: AtomicU64,
    dropped_messages_b: AtomicU64,
    dropped_both: AtomicU64,
    heartbeats: AtomicU64,
    send_errors: AtomicU64,
    requests_served: AtomicU64,
    requests_malformed: AtomicU64,
    requests_ignored: AtomicU64,
    messages_resent: AtomicU64,
    packets_resent: AtomicU64,
    sessions_finished: AtomicU64,
}

/// Adds to a counter read by other threads; nothing else rides on it.
fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// What the threads share.
#[derive(Debug)]
struct Shared {
    stats: Stats,
    stop: AtomicBool,
    /// The day being sent (replaced at each new day with `repeat`).
    day: Mutex<Arc<Day>>,
    finished: Mutex<bool>,
    finished_cv: Condvar,
}

impl Shared {
    fn day(&self) -> Arc<Day> {
        Arc::clone(&self.day.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn set_finished(&self) {
        *self.finished.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.finished_cv.notify_all();
    }

    fn counters(&self) -> ExchangeCounters {
        let s = &self.stats;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ExchangeCounters {
            messages: g(&s.messages),
            packets: g(&s.packets),
            packets_a: g(&s.packets_a),
            packets_b: g(&s.packets_b),
            messages_a: g(&s.messages_a),
            messages_b: g(&s.messages_b),
            dropped_a: g(&s.dropped_a),
            dropped_b: g(&s.dropped_b),
            dropped_messages_a: g(&s.dropped_messages_a),
            dropped_messages_b: g(&s.dropped_messages_b),
            dropped_both: g(&s.dropped_both),
            heartbeats: g(&s.heartbeats),
            send_errors: g(&s.send_errors),
            requests_served: g(&s.requests_served),
            requests_malformed: g(&s.requests_malformed),
            requests_ignored: g(&s.requests_ignored),
            messages_resent: g(&s.messages_resent),
            packets_resent: g(&s.packets_resent),
            sessions_finished: g(&s.sessions_finished),
            finished: *self.finished.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }
}

/// A running simulator: its threads stop when it is stopped or dropped.
#[derive(Debug)]
pub struct Exchange {
    shared: Arc<Shared>,
    sender: Option<JoinHandle<()>>,
    server: Option<JoinHandle<()>>,
    rerequest_addr: SocketAddrV4,
    first_day: Arc<Day>,
}

impl Exchange {
    /// Checks the configuration, opens the sockets, generates the first
    /// day and starts sending.
    ///
    /// # Errors
    /// An address that is not a multicast group, an interface that cannot
    /// send multicast, a re-request address that cannot be bound, a
    /// probability or packet size out of range, a session that cannot be
    /// generated.
    pub fn start(config: ExchangeConfig) -> Result<Exchange, ExchangeError> {
        validate(&config)?;
        let lines = open_line_socket(&config)?;
        let rerequest =
            UdpSocket::bind(config.rerequest_bind).map_err(|source| ExchangeError::Rerequest {
                addr: config.rerequest_bind,
                source,
            })?;
        let rerequest_addr = match rerequest.local_addr() {
            Ok(std::net::SocketAddr::V4(a)) => a,
            _ => config.rerequest_bind,
        };
        // The server wakes this often to see whether it should stop.
        rerequest
            .set_read_timeout(Some(Duration::from_millis(20)))
            .map_err(|source| ExchangeError::Rerequest {
                addr: rerequest_addr,
                source,
            })?;
        let day = Arc::new(Day::generate(
            config.session,
            &config.synth,
            config.max_packet,
        )?);
        let shared = Arc::new(Shared {
            stats: Stats::default(),
            stop: AtomicBool::new(false),
            day: Mutex::new(Arc::clone(&day)),
            finished: Mutex::new(false),
            finished_cv: Condvar::new(),
        });
        let server = {
            let shared = Arc::clone(&shared);
            let max_packet = config.max_packet;
            std::thread::Builder::new()
                .name("exchange-rereq".into())
                .spawn(move || server::run(&shared, &rerequest, max_packet))
                .map_err(|source| ExchangeError::Thread {
                    what: "re-request server",
                    source,
                })?
        };
        let mut exchange = Exchange {
            shared: Arc::clone(&shared),
            sender: None,
            server: Some(server),
            rerequest_addr,
            first_day: Arc::clone(&day),
        };
        let sender = std::thread::Builder::new()
            .name("exchange-lines".into())
            .spawn(move || sender::run(&shared, &config, &lines, day))
            .map_err(|source| ExchangeError::Thread {
                what: "line sender",
                source,
            })?;
        exchange.sender = Some(sender);
        Ok(exchange)
    }

    /// What has been sent and served so far.
    pub fn counters(&self) -> ExchangeCounters {
        self.shared.counters()
    }

    /// The re-request server's address (with the port the system chose
    /// when the configured port was 0).
    pub fn rerequest_addr(&self) -> SocketAddrV4 {
        self.rerequest_addr
    }

    /// The session being sent now.
    pub fn session(&self) -> Session {
        self.shared.day().session
    }

    /// Messages in the first day's session (sequence numbers
    /// `1..=session_messages()`).
    pub fn session_messages(&self) -> u64 {
        self.first_day.messages()
    }

    /// Waits until the session is over ([`ExchangeCounters::finished`]),
    /// at most `timeout`. True if it is.
    pub fn wait_finished(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut done = self
            .shared
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while !*done {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            done = self
                .shared
                .finished_cv
                .wait_timeout(done, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Stops both threads and returns the final counters.
    pub fn stop(mut self) -> ExchangeCounters {
        self.shutdown();
        self.shared.counters()
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in [self.sender.take(), self.server.take()]
            .into_iter()
            .flatten()
        {
            if t.join().is_err() {
                log::error!("a simulator thread panicked");
            }
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn validate(c: &ExchangeConfig) -> Result<(), ExchangeError> {
    for (line, addr) in [('A', c.line_a), ('B', c.line_b)] {
        if !addr.ip().is_multicast() {
            return Err(ExchangeError::NotMulticast { line, addr });
        }
    }
    if c.line_a == c.line_b {
        return Err(ExchangeError::SameLines { addr: c.line_a });
    }
    for (line, value) in [('A', c.drop_a), ('B', c.drop_b)] {
        if !(0.0..=1.0).contains(&value) {
            return Err(ExchangeError::DropProbability { line, value });
        }
    }
    let min = HEADER_LEN + BLOCK_PREFIX_LEN + mdbus_feed::itch::MAX_MESSAGE_LEN;
    if c.max_packet < min || c.max_packet > MAX_DATAGRAM {
        return Err(ExchangeError::MaxPacket {
            max: c.max_packet,
            reason: format!(
                "it must be between {min} (a header and the longest ITCH message) and \
                 {MAX_DATAGRAM} (the largest UDP datagram)"
            ),
        });
    }
    Ok(())
}

/// The socket both lines send from: bound to the interface, multicast
/// out of it, looped back to this host, with the configured TTL.
fn open_line_socket(c: &ExchangeConfig) -> Result<UdpSocket, ExchangeError> {
    let err = |op: &str, e: io::Error| {
        let hint = match e.raw_os_error() {
            Some(libc::EADDRNOTAVAIL) | Some(libc::ENODEV) => {
                " (is it the address of an interface of this host that is up?)"
            }
            Some(libc::ENETUNREACH) => " (does the interface have a multicast route?)",
            _ => "",
        };
        ExchangeError::Interface {
            interface: c.interface,
            reason: format!("{op}: {e}{hint}"),
        }
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| err("socket", e))?;
    s.bind(&SocketAddrV4::new(c.interface, 0).into())
        .map_err(|e| err("bind", e))?;
    s.set_multicast_if_v4(&c.interface)
        .map_err(|e| err("IP_MULTICAST_IF", e))?;
    s.set_multicast_loop_v4(true)
        .map_err(|e| err("IP_MULTICAST_LOOP", e))?;
    s.set_multicast_ttl_v4(c.ttl)
        .map_err(|e| err("IP_MULTICAST_TTL", e))?;
    // A larger send buffer rides out the receivers' scheduling hiccups
    // at high rates; the kernel caps it (best effort).
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(s.into())
}

/// The session name after `s`: its trailing digits incremented (with
/// carry, wrapping within their width), or a `2` appended (or put in the
/// last place) when it has none. `MDBUS00001` → `MDBUS00002`.
pub fn next_session(s: Session) -> Session {
    let mut b = *s.as_bytes();
    let len = b.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
    let digits = b[..len]
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if digits == 0 {
        let at = len.min(b.len() - 1);
        b[at] = b'2';
        return mdbus_feed::alpha::Alpha(b);
    }
    for i in (len - digits..len).rev() {
        if b[i] == b'9' {
            b[i] = b'0';
        } else {
            b[i] += 1;
            break;
        }
    }
    mdbus_feed::alpha::Alpha(b)
}

/// A small deterministic PRNG (splitmix64) for the drop decisions.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (never for 0, always for 1).
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_follow_each_other() {
        let s = |t: &str| Session::new(t).unwrap();
        assert_eq!(next_session(s("MDBUS00001")), s("MDBUS00002"));
        assert_eq!(next_session(s("DAY0999")), s("DAY1000"));
        assert_eq!(next_session(s("D99")), s("D00"));
        assert_eq!(next_session(s("DEMO")), s("DEMO2"));
        assert_eq!(next_session(s("ABCDEFGHIJ")), s("ABCDEFGHI2"));
    }

    #[test]
    fn drop_chances_are_exact_at_the_ends_and_close_between() {
        let mut r = Rng(3);
        assert!((0..10_000).all(|_| !r.chance(0.0)));
        assert!((0..10_000).all(|_| r.chance(1.0)));
        let hits = (0..100_000).filter(|_| r.chance(0.25)).count();
        assert!((24_000..26_000).contains(&hits), "{hits}");
    }
}
