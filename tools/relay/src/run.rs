//! The relay's polling loop: one thread reads the input, arbitrates,
//! routes and publishes, and refreshes the counters between datagrams.

use std::io::ErrorKind;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mdbus::affinity::{self, Device};
use mdbus::clock::{monotonic_ns, now_ns};
use mdbus::counters::CountersFile;
use mdbus::wait::WaitStrategy;
use mdbus_feed::arbiter::{Arbiter, Line};
use mdbus_feed::binaryfile::BinaryFileReader;
use mdbus_feed::mdcap::MdcapWriter;
use mdbus_feed::pcap::CaptureReader;
use serde::Serialize;

use super::config::{InputKind, Pace, RelayConfig};
use super::ingest::{self, LiveSockets, Sink};
use super::passthrough::Passthrough;
use super::pipeline::Pipeline;
use super::route::Router;
use super::stats::{self, Snapshot, Upstream};
use super::RelayError;

/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_536;
/// Datagrams read from one socket before looking at the others.
const BATCH: usize = 32;
/// Empty polls between two calls of the publishers' idle duties.
const IDLE_SERVICE_EVERY: u32 = 256;
/// Longest time between two calls of the publishers' duties while the feed
/// keeps the relay busy: a datagram subscriber's retransmit request waits
/// at most this long for its answer.
const SERVICE_EVERY_NS: u64 = 1_000_000;

/// How long a run lasts and how it is stopped.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stop after this long (`None`: until stopped or the input ends).
    pub duration: Option<Duration>,
    /// Set by anyone (a signal handler, a test) to stop the loop; it is
    /// checked between datagrams.
    pub stop: Arc<AtomicBool>,
    /// Print the periodic counters line to stderr.
    pub log: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            duration: None,
            stop: Arc::new(AtomicBool::new(false)),
            log: true,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The input: `moldudp64`, `binaryfile` or `pcap`.
    pub input: &'static str,
    /// Seconds the loop ran.
    pub seconds: f64,
    /// Why the run ended: `end-of-session`, `end-of-file`, `duration` or
    /// `stopped`.
    pub ended_by: &'static str,
    /// Re-requests that could not be sent.
    pub request_errors: u64,
    /// Receive errors on the input's sockets.
    pub recv_errors: u64,
    /// Capture datagrams skipped: sent to neither line's group.
    pub skipped_datagrams: u64,
    /// Every counter.
    #[serde(flatten)]
    pub counters: Snapshot,
}

enum Input {
    Live {
        sockets: LiveSockets,
        arbiter: Box<Arbiter>,
    },
    BinaryFile {
        path: PathBuf,
    },
    Pcap {
        path: PathBuf,
        arbiter: Box<Arbiter>,
        line_a: Option<SocketAddrV4>,
        line_b: Option<SocketAddrV4>,
    },
}

/// A relay, set up and ready to run.
pub struct Relay {
    config: RelayConfig,
    pipeline: Pipeline,
    input: Input,
    counters: Option<CountersFile>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("input", &self.config.input.kind)
            .field("streams", &self.pipeline.names())
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Sets everything up: the bus and one publisher per stream, the
    /// input's sockets (joined) or file (opened), the pass-through socket
    /// and the counters file. `source` names the configuration in errors.
    pub fn new(config: RelayConfig, source: &str) -> Result<Relay, RelayError> {
        config.validate(source)?;
        let input = match config.input.kind {
            InputKind::Moldudp64 => {
                let addrs = config.live_addresses(source)?;
                let sockets = LiveSockets::open(&addrs, config.input.recv_buffer)?;
                Input::Live {
                    sockets,
                    arbiter: Box::new(Arbiter::new(ingest::arbiter_config(
                        &config.input,
                        addrs.session,
                    ))),
                }
            }
            InputKind::Binaryfile => {
                std::fs::File::open(&config.input.path).map_err(|e| RelayError::Setup {
                    what: format!("input file {}", config.input.path.display()),
                    reason: format!("cannot be opened: {e}"),
                })?;
                Input::BinaryFile {
                    path: config.input.path.clone(),
                }
            }
            InputKind::Pcap => {
                CaptureReader::open(&config.input.path)?;
                let parse = |s: &str| s.parse::<SocketAddrV4>().ok();
                let session = config.live_addresses(source).ok().and_then(|a| a.session);
                Input::Pcap {
                    path: config.input.path.clone(),
                    arbiter: Box::new(Arbiter::new(ingest::arbiter_config(&config.input, session))),
                    line_a: parse(&config.input.line_a),
                    line_b: parse(&config.input.line_b),
                }
            }
        };
        let bus = mdbus::Bus::new(config.bus.clone()).map_err(|e| RelayError::Bus {
            stream: "(bus)".into(),
            source: e,
        })?;
        let names = config.stream_names();
        let mut publishers = Vec::with_capacity(names.len());
        for n in &names {
            publishers.push(bus.publisher(n).map_err(|e| RelayError::Bus {
                stream: n.clone(),
                source: e,
            })?);
        }
        let passthrough = if config.passthrough.enabled {
            Some(Passthrough::open(&config.passthrough)?)
        } else {
            None
        };
        let counters = if config.counters.path.as_os_str().is_empty() {
            None
        } else {
            let labels = stats::labels(&names);
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            Some(CountersFile::create(
                &config.counters.path,
                "mdbus-relay",
                &refs,
            )?)
        };
        let router = Router::new(&config.routing, &names);
        let mut pipeline = Pipeline::new(router, publishers, passthrough);
        if !config.record.path.as_os_str().is_empty() {
            pipeline.set_recorder(MdcapWriter::create(&config.record.path)?);
        }
        Ok(Relay {
            pipeline,
            config,
            input,
            counters,
        })
    }

    /// The streams published, in routing order.
    pub fn stream_names(&self) -> &[String] {
        self.pipeline.names()
    }

    /// The counters file, if configured.
    pub fn counters_path(&self) -> Option<PathBuf> {
        self.counters.as_ref().map(|c| c.path().to_path_buf())
    }

    /// The local address answers from the re-request server arrive on.
    pub fn rerequest_local_addr(&self) -> Option<SocketAddr> {
        match &self.input {
            Input::Live { sockets, .. } => sockets
                .rerequest
                .as_ref()
                .and_then(|(s, _)| s.local_addr().ok()),
            _ => None,
        }
    }

    fn pin(&self) -> Result<(), RelayError> {
        let t = &self.config.thread;
        if !t.pin {
            return Ok(());
        }
        if t.core >= 0 {
            affinity::pin_current_thread(t.core as usize)?;
            log::info!("polling thread pinned to core {}", t.core);
            return Ok(());
        }
        let dev = (!t.device.is_empty()).then_some(Device::Net(t.device.as_str()));
        let placement = affinity::placement_for(dev);
        match placement.pin(0) {
            Ok(core) => log::info!(
                "polling thread pinned to core {core} ({})",
                placement.reason()
            ),
            Err(e) => log::warn!("polling thread not pinned: {e}"),
        }
        Ok(())
    }

    /// Runs on the calling thread until the input ends, `opts.duration`
    /// passes or `opts.stop` is set; returns the summary. Publishers close
    /// in order when it returns, so subscribers see the end of their
    /// streams.
    pub fn run(mut self, opts: &RunOptions) -> Result<Summary, RelayError> {
        self.pin()?;
        let kind = self.config.input.kind;
        let start = monotonic_ns();
        let mut state = Loop {
            deadline: opts
                .duration
                .map(|d| start.saturating_add(d.as_nanos() as u64)),
            next_service: start,
            next_refresh: start,
            refresh_ns: self.config.counters.refresh.as_nanos() as u64,
            next_log: start + self.config.counters.log_interval.as_nanos() as u64,
            log_ns: if opts.log {
                self.config.counters.log_interval.as_nanos() as u64
            } else {
                0
            },
            last_log: (start, Snapshot::default()),
            request_errors: 0,
            recv_errors: 0,
            skipped: 0,
            ended: false,
            upstream: Upstream::default(),
        };
        let idle = self.config.thread.idle;
        let ended_by = match std::mem::replace(
            &mut self.input,
            Input::BinaryFile {
                path: PathBuf::new(),
            },
        ) {
            Input::Live {
                sockets,
                mut arbiter,
            } => self.run_live(&sockets, &mut arbiter, &mut state, opts, idle),
            Input::BinaryFile { path } => self.run_binaryfile(&path, &mut state, opts)?,
            Input::Pcap {
                path,
                mut arbiter,
                line_a,
                line_b,
            } => self.run_pcap(&path, &mut arbiter, line_a, line_b, &mut state, opts)?,
        };
        if matches!(ended_by, "end-of-session" | "end-of-file") {
            self.linger(&mut state, opts);
        }
        let secs = (monotonic_ns() - start) as f64 / 1e9;
        self.pipeline.finish_recording()?;
        self.refresh(&state.upstream);
        let counters = self.pipeline.snapshot(&state.upstream);
        Ok(Summary {
            input: kind.name(),
            seconds: secs,
            ended_by,
            request_errors: state.request_errors,
            recv_errors: state.recv_errors,
            skipped_datagrams: state.skipped,
            counters,
        })
    }

    /// After the input ended: keeps answering datagram subscribers'
    /// retransmit requests for `output.linger` (or until stopped), so the
    /// last messages of the feed can still be recovered. Shared memory has
    /// nothing to answer.
    fn linger(&mut self, s: &mut Loop, opts: &RunOptions) {
        let linger = self.config.output.linger.as_nanos() as u64;
        if linger == 0 || !self.pipeline.has_datagram_streams() {
            return;
        }
        let until = monotonic_ns().saturating_add(linger);
        let idle = self.config.thread.idle;
        loop {
            let now = monotonic_ns();
            if now >= until {
                return;
            }
            self.pipeline.idle(now);
            s.next_service = now + SERVICE_EVERY_NS;
            if self.housekeeping(s, opts, now).is_some() {
                return;
            }
            idle_wait(idle);
        }
    }

    fn refresh(&self, up: &Upstream) {
        if let Some(c) = &self.counters {
            self.pipeline.publish_counters(c, up, now_ns());
        }
    }

    /// Between datagrams: counters, log line, stop conditions. Returns
    /// why to stop, if it is time to.
    fn housekeeping(&mut self, s: &mut Loop, opts: &RunOptions, now: u64) -> Option<&'static str> {
        if now >= s.next_service {
            s.next_service = now + SERVICE_EVERY_NS;
            self.pipeline.idle(now);
        }
        if now >= s.next_refresh {
            s.next_refresh = now + s.refresh_ns;
            self.refresh(&s.upstream);
            if s.log_ns > 0 && now >= s.next_log {
                s.next_log = now + s.log_ns;
                let snap = self.pipeline.snapshot(&s.upstream);
                let secs = (now - s.last_log.0) as f64 / 1e9;
                eprintln!("mdbus-relay: {}", snap.log_line(&s.last_log.1, secs));
                s.last_log = (now, snap);
            }
        }
        if opts.stop.load(Ordering::Relaxed) || mdbus_tool_support::signals::requested() {
            return Some("stopped");
        }
        if s.deadline.is_some_and(|d| now >= d) {
            return Some("duration");
        }
        None
    }

    fn run_live(
        &mut self,
        sockets: &LiveSockets,
        arbiter: &mut Arbiter,
        s: &mut Loop,
        opts: &RunOptions,
        idle: WaitStrategy,
    ) -> &'static str {
        let mut buf = vec![0u8; MAX_DATAGRAM].into_boxed_slice();
        let rereq = sockets.rerequest.as_ref().map(|(sock, to)| (sock, *to));
        let mut lines: Vec<(Line, &UdpSocket)> = vec![(Line::A, &sockets.a)];
        if let Some(b) = &sockets.b {
            lines.push((Line::B, b));
        }
        if let Some((sock, _)) = rereq {
            lines.push((Line::Recovery, sock));
        }
        let stop_at_end = self.config.input.stop_at_end_of_session;
        let mut empty_polls: u32 = 0;
        loop {
            let mut got = 0usize;
            // One clock read per datagram: the arbiter's monotonic time is
            // the arrival time's offset from this round's pair of reads.
            let (round_mono, round_real) = (monotonic_ns(), now_ns());
            for &(line, sock) in &lines {
                for _ in 0..BATCH {
                    match sock.recv(&mut buf) {
                        Ok(n) => {
                            got += 1;
                            let arrival = now_ns();
                            let mono = round_mono + arrival.saturating_sub(round_real);
                            self.datagram(arbiter, line, &buf[..n], arrival, mono, rereq, s);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(_) => {
                            s.recv_errors += 1;
                            break;
                        }
                    }
                }
            }
            let now = monotonic_ns();
            if arbiter.next_deadline().is_some_and(|d| d <= now) {
                self.pipeline.begin_packet(now_ns());
                let mut sink = Sink {
                    pipeline: &mut self.pipeline,
                    rerequest: rereq,
                    request_errors: &mut s.request_errors,
                    ended: &mut s.ended,
                };
                arbiter.on_timer(now, &mut sink);
                self.pipeline.end_packet();
            }
            s.upstream = Upstream::from(arbiter.counters());
            if stop_at_end && s.ended {
                return "end-of-session";
            }
            if got == 0 {
                empty_polls = empty_polls.wrapping_add(1);
                if empty_polls % IDLE_SERVICE_EVERY == 0 {
                    self.pipeline.idle(now);
                    s.next_service = now + SERVICE_EVERY_NS;
                }
                idle_wait(idle);
            }
            if let Some(why) = self.housekeeping(s, opts, now) {
                return why;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn datagram(
        &mut self,
        arbiter: &mut Arbiter,
        line: Line,
        data: &[u8],
        arrival: u64,
        mono: u64,
        rereq: Option<(&UdpSocket, SocketAddr)>,
        s: &mut Loop,
    ) {
        self.pipeline.begin_packet(arrival);
        if arbiter.session().is_none() {
            if let Some(sess) = ingest::session_of(data) {
                self.pipeline.set_session(sess);
            }
        }
        let mut sink = Sink {
            pipeline: &mut self.pipeline,
            rerequest: rereq,
            request_errors: &mut s.request_errors,
            ended: &mut s.ended,
        };
        arbiter.on_packet(line, data, mono, &mut sink);
        self.pipeline.end_packet();
        self.pipeline.mark_sent(mono);
    }

    fn run_binaryfile(
        &mut self,
        path: &std::path::Path,
        s: &mut Loop,
        opts: &RunOptions,
    ) -> Result<&'static str, RelayError> {
        let file = std::fs::File::open(path).map_err(|e| RelayError::Setup {
            what: format!("input file {}", path.display()),
            reason: format!("cannot be opened: {e}"),
        })?;
        let mut reader = BinaryFileReader::new(file);
        let pace = Pacer::new(self.config.input.pace, self.config.input.speed);
        let mut pace = pace;
        let mut sequence = 0u64;
        loop {
            let msg = match reader.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok("end-of-file"),
                Err(e) => {
                    return Err(RelayError::BinaryFile {
                        path: path.display().to_string(),
                        source: e,
                    })
                }
            };
            sequence += 1;
            if let Some(ts) = itch_timestamp(msg) {
                pace.wait(ts);
            }
            self.pipeline.begin_packet(now_ns());
            self.pipeline.message(sequence, msg);
            self.pipeline.end_packet();
            if sequence % 1024 == 0 {
                if let Some(why) = self.housekeeping(s, opts, monotonic_ns()) {
                    return Ok(why);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_pcap(
        &mut self,
        path: &std::path::Path,
        arbiter: &mut Arbiter,
        line_a: Option<SocketAddrV4>,
        line_b: Option<SocketAddrV4>,
        s: &mut Loop,
        opts: &RunOptions,
    ) -> Result<&'static str, RelayError> {
        let mut reader = CaptureReader::open(path)?;
        let mut pace = Pacer::new(self.config.input.pace, self.config.input.speed);
        let mut last_ts = 0u64;
        let mut n = 0u64;
        while let Some(d) = reader.next_datagram()? {
            let line = match (line_a, line_b) {
                (_, Some(b)) if d.dst == b => Line::B,
                (Some(a), _) if d.dst != a => {
                    s.skipped += 1;
                    continue;
                }
                _ => Line::A,
            };
            pace.wait(d.timestamp_ns);
            // Capture time is the arbiter's clock: replays are
            // deterministic whatever the pace.
            last_ts = last_ts.max(d.timestamp_ns);
            self.datagram(arbiter, line, d.payload, now_ns(), last_ts, None, s);
            n += 1;
            if n % 256 == 0 {
                s.upstream = Upstream::from(arbiter.counters());
                if let Some(why) = self.housekeeping(s, opts, monotonic_ns()) {
                    return Ok(why);
                }
            }
        }
        // The capture is over: nothing will fill what is still missing, so
        // run the timers out (each gap becomes unrecoverable after its
        // retries) and deliver what was held behind the gaps.
        let mut guard = 0;
        while let Some(due) = arbiter.next_deadline() {
            guard += 1;
            if guard > 1_000_000 {
                break;
            }
            last_ts = last_ts.max(due);
            self.pipeline.begin_packet(now_ns());
            let mut sink = Sink {
                pipeline: &mut self.pipeline,
                rerequest: None,
                request_errors: &mut s.request_errors,
                ended: &mut s.ended,
            };
            arbiter.on_timer(last_ts, &mut sink);
            self.pipeline.end_packet();
        }
        s.upstream = Upstream::from(arbiter.counters());
        Ok(if s.ended {
            "end-of-session"
        } else {
            "end-of-file"
        })
    }
}

struct Loop {
    deadline: Option<u64>,
    next_service: u64,
    next_refresh: u64,
    refresh_ns: u64,
    next_log: u64,
    log_ns: u64,
    last_log: (u64, Snapshot),
    request_errors: u64,
    recv_errors: u64,
    skipped: u64,
    ended: bool,
    upstream: Upstream,
}

#[inline]
fn idle_wait(w: WaitStrategy) {
    match w {
        WaitStrategy::BusySpin => {}
        WaitStrategy::SpinHint => std::hint::spin_loop(),
        WaitStrategy::Yield => std::thread::yield_now(),
    }
}

/// The 6-byte ITCH timestamp (ns since midnight) of a message.
fn itch_timestamp(msg: &[u8]) -> Option<u64> {
    let b = msg.get(5..11)?;
    Some(b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

/// Holds a file's events back to their recorded spacing.
struct Pacer {
    on: bool,
    speed: f64,
    origin: Option<(u64, u64)>,
}

impl Pacer {
    fn new(pace: Pace, speed: f64) -> Pacer {
        Pacer {
            on: pace == Pace::Recorded,
            speed,
            origin: None,
        }
    }

    /// Waits until the event recorded at `ts` is due.
    fn wait(&mut self, ts: u64) {
        if !self.on {
            return;
        }
        let now = monotonic_ns();
        let (t0, w0) = *self.origin.get_or_insert((ts, now));
        let due = w0 + (ts.saturating_sub(t0) as f64 / self.speed) as u64;
        loop {
            let now = monotonic_ns();
            if now >= due {
                return;
            }
            let left = due - now;
            if left > 2_000_000 {
                // Pacing, not synchronisation: give the core away while
                // the next event is far off.
                std::thread::sleep(Duration::from_nanos(left - 1_000_000));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
