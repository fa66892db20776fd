//! The relay's polling loop: one thread reads the input, arbitrates,
//! routes and publishes, and refreshes the counters between datagrams.

use std::io::{BufReader, ErrorKind};
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
use mdbus_feed::pcap::{CaptureReader, CaptureStats};
use mdbus_tool_support::output::LatencyNs;
use serde::Serialize;

use super::archive::Archives;
use super::config::{InputKind, Pace, RelayConfig};
use super::ingest::{self, LiveSockets, RecvBatch, Sink};
use super::input::{self, StopWhen, WakingFile};
use super::passthrough::Passthrough;
use super::pipeline::Pipeline;
use super::route::Router;
use super::stats::{self, Snapshot, Upstream};
use super::RelayError;

/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_536;
/// Unrecoverable ranges are logged at most this often (one line for all
/// since the last).
const GAP_LOG_EVERY_NS: u64 = 1_000_000_000;
/// Read buffer of a file input.
const READ_BUFFER: usize = 1 << 16;
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

/// What a run did (printed by [`super::report`]).
#[derive(Debug, Clone)]
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
    /// A capture input: frames read, datagrams yielded and every frame
    /// skipped, by reason.
    pub capture: Option<CaptureSkips>,
    /// What genuine data was lost, as a sentence (`None`: nothing). Set
    /// by [`Summary::loss`]; the exit status is 3 when set, unless
    /// `--allow-loss`.
    pub data_lost: Option<String>,
    /// Every counter.
    pub counters: Snapshot,
    /// Relay-added latency per datagram (arrival to publish complete), in
    /// full.
    pub latency: LatencyNs,
}

/// What a capture reader read and skipped, each skipped frame under one
/// reason (`mdbus_feed::pcap::CaptureStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[allow(missing_docs)]
pub struct CaptureSkips {
    pub frames: u64,
    pub datagrams: u64,
    pub skipped: u64,
    pub not_ipv4: u64,
    pub ipv6: u64,
    pub not_udp: u64,
    pub fragments: u64,
    pub truncated: u64,
    pub bad_udp_length: u64,
    pub unparseable: u64,
    pub unsupported_link: u64,
}

impl From<&CaptureStats> for CaptureSkips {
    fn from(c: &CaptureStats) -> Self {
        CaptureSkips {
            frames: c.packets,
            datagrams: c.datagrams,
            skipped: c.skipped(),
            not_ipv4: c.not_ipv4,
            ipv6: c.ipv6,
            not_udp: c.not_udp,
            fragments: c.fragments,
            truncated: c.truncated,
            bad_udp_length: c.bad_udp_length,
            unparseable: c.unparseable,
            unsupported_link: c.unsupported_link,
        }
    }
}

impl Summary {
    /// What genuine data the run lost, as a sentence, or `None`.
    ///
    /// Data lost: feed messages that were never published (`unrecoverable`:
    /// gaps nothing filled, what a confirmed jump skipped, a full reorder
    /// store), feed messages that could not be published (`bad_messages`,
    /// `publish_errors`) and a recording that stopped (`record_errors`).
    ///
    /// Input rejected (malformed packets, far jumps not confirmed, other
    /// sessions, data after the end, duplicates, capture frames that are
    /// not UDP datagrams) is counted by reason but is not loss by itself:
    /// the arbiter accounts for every sequence number of the followed
    /// session, so a genuine message a rejected packet carried is either
    /// delivered from another copy or counted in `unrecoverable`.
    pub fn loss(&self) -> Option<String> {
        let c = &self.counters;
        let mut parts = Vec::new();
        if c.upstream.unrecoverable > 0 {
            parts.push(format!(
                "{} feed messages unrecoverable (sent to subscribers as source gaps)",
                c.upstream.unrecoverable
            ));
        }
        if c.local.bad_messages > 0 {
            parts.push(format!(
                "{} ITCH messages of an unknown type or wrong length not published",
                c.local.bad_messages
            ));
        }
        if c.local.publish_errors > 0 {
            parts.push(format!("{} publishes failed", c.local.publish_errors));
        }
        // Every packet was another session's and none the followed one's:
        // the whole input was dropped (a wrong `input.session`, or a feed
        // that changed session and was never confirmed). Not a forgery
        // beside a genuine feed, which leaves messages in.
        if c.local.messages_in == 0 && c.upstream.other_session > 0 {
            parts.push(format!(
                "nothing published, and all {} packets received were of another session than the one followed (is input.session right?)",
                c.upstream.other_session
            ));
        }
        if c.local.record_errors > 0 {
            parts.push(format!(
                "the recording stopped after {} messages (a write failed)",
                c.local.recorded
            ));
        }
        (!parts.is_empty()).then(|| format!("data lost: {}", parts.join("; ")))
    }
}

enum Input {
    Live {
        sockets: LiveSockets,
        arbiter: Box<Arbiter>,
    },
    BinaryFile {
        path: PathBuf,
        file: WakingFile,
    },
    Pcap {
        path: PathBuf,
        file: WakingFile,
        arbiter: Box<Arbiter>,
        line_a: Option<SocketAddrV4>,
        line_b: Option<SocketAddrV4>,
    },
    /// Taken by `run`.
    Used,
}

/// A relay, set up and ready to run.
pub struct Relay {
    config: RelayConfig,
    pipeline: Pipeline,
    input: Input,
    counters: Option<CountersFile>,
    archives: Archives,
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
            InputKind::Binaryfile => Input::BinaryFile {
                path: config.input.path.clone(),
                file: open_input(&config.input.path)?,
            },
            InputKind::Pcap => {
                let file = open_input(&config.input.path)?;
                // A regular file's header is checked now (a usage error);
                // a FIFO's when its writer sends it.
                if file.is_regular() {
                    let mut head = [0u8; 4];
                    let n = file
                        .peek_regular(&mut head)
                        .map_err(|e| RelayError::Setup {
                            what: format!("input file {}", config.input.path.display()),
                            reason: format!("cannot be read: {e}"),
                        })?;
                    if n == 0 {
                        return Err(RelayError::Setup {
                            what: format!("input file {}", config.input.path.display()),
                            reason: "is empty: a pcap or pcapng capture was expected".into(),
                        });
                    }
                    if mdbus_feed::pcap::capture_format(&head[..n]).is_none() {
                        return Err(RelayError::Setup {
                            what: format!("input file {}", config.input.path.display()),
                            reason: format!(
                                "is not a pcap or pcapng capture (it starts with {:02x?})",
                                &head[..n]
                            ),
                        });
                    }
                }
                let parse = |s: &str| s.parse::<SocketAddrV4>().ok();
                let session = config.live_addresses(source).ok().and_then(|a| a.session);
                Input::Pcap {
                    path: config.input.path.clone(),
                    file,
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
        // Recorders start once the publishers exist (they subscribe from
        // the oldest message a stream retains).
        let archives = Archives::start(&bus, &names)?;
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
            pipeline.set_recorder(MdcapWriter::create_with_streams(
                &config.record.path,
                pipeline.names(),
            )?);
        }
        Ok(Relay {
            pipeline,
            config,
            input,
            counters,
            archives,
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
            next_gap_log: start,
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
        let stop = StopWhen {
            flag: Arc::clone(&opts.stop),
            deadline: state.deadline,
        };
        let mut capture = None;
        let ended_by = match std::mem::replace(&mut self.input, Input::Used) {
            Input::Live {
                sockets,
                mut arbiter,
            } => self.run_live(&sockets, &mut arbiter, &mut state, opts, idle),
            Input::BinaryFile { path, mut file } => {
                file.stop_when(stop.clone());
                self.run_binaryfile(&path, file, &stop, &mut state, opts)?
            }
            Input::Pcap {
                path,
                mut file,
                mut arbiter,
                line_a,
                line_b,
            } => {
                file.stop_when(stop.clone());
                let files = PcapInput {
                    path: &path,
                    line_a,
                    line_b,
                };
                let (why, stats) =
                    self.run_pcap(&files, file, &stop, &mut arbiter, &mut state, opts)?;
                capture = Some(CaptureSkips::from(&stats));
                why
            }
            Input::Used => "stopped",
        };
        if matches!(ended_by, "end-of-session" | "end-of-file") {
            self.linger(&mut state, opts);
        }
        let secs = (monotonic_ns() - start) as f64 / 1e9;
        self.pipeline.log_source_gaps();
        self.pipeline.finish_recording()?;
        let pipeline = &self.pipeline;
        let archive_loss = self
            .archives
            .finish(|stream| pipeline.last_seq(stream), &opts.stop);
        self.refresh(&state.upstream);
        let counters = self.pipeline.snapshot(&state.upstream);
        let mut summary = Summary {
            input: kind.name(),
            seconds: secs,
            ended_by,
            request_errors: state.request_errors,
            recv_errors: state.recv_errors,
            skipped_datagrams: state.skipped,
            capture,
            data_lost: None,
            counters,
            latency: LatencyNs::of(self.pipeline.latency().histogram()),
        };
        summary.data_lost = match (summary.loss(), archive_loss) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        Ok(summary)
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

    fn refresh(&mut self, up: &Upstream) {
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
        if now >= s.next_gap_log {
            s.next_gap_log = now + GAP_LOG_EVERY_NS;
            self.pipeline.log_source_gaps();
            self.pipeline.recalibrate_clock();
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
        let mut batch = RecvBatch::new(BATCH, MAX_DATAGRAM);
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
            // The arbiter's monotonic time is the arrival time's offset
            // from this round's pair of reads (never before the round: a
            // kernel stamp is earlier, and the arbiter's clock must not go
            // back).
            let (round_mono, round_real) = (monotonic_ns(), self.pipeline.now_ns());
            for &(line, sock) in &lines {
                // One system call for up to BATCH datagrams.
                let n = match batch.recv(sock) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => 0,
                    Err(_) => {
                        s.recv_errors += 1;
                        0
                    }
                };
                // When the relay picked up the next datagram: the end of
                // the previous one in this batch, or a fresh reading.
                let mut picked: Option<u64> = None;
                for i in 0..n {
                    let Some(d) = batch.get(i) else { break };
                    got += 1;
                    if d.truncated {
                        s.recv_errors += 1;
                        continue;
                    }
                    // The kernel's arrival stamp where the socket has one,
                    // else when the relay picked it up (the TSC clock).
                    let arrival = d
                        .kernel_ns
                        .unwrap_or_else(|| picked.unwrap_or_else(|| self.pipeline.now_ns()));
                    let mono = round_mono + arrival.saturating_sub(round_real);
                    picked = self.datagram(arbiter, line, d.data, arrival, mono, rereq, s);
                    // Not one datagram more after the end: the arbiter
                    // would follow the next session at once (whoever sent
                    // it).
                    if stop_at_end && s.ended {
                        s.upstream = Upstream::from(arbiter.counters());
                        return "end-of-session";
                    }
                }
            }
            let now = monotonic_ns();
            if arbiter.next_deadline().is_some_and(|d| d <= now) {
                self.pipeline.begin_packet(self.pipeline.now_ns());
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
    ) -> Option<u64> {
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
        let done = self.pipeline.end_packet();
        self.pipeline.mark_sent(mono);
        done
    }

    fn run_binaryfile(
        &mut self,
        path: &std::path::Path,
        file: WakingFile,
        stop: &StopWhen,
        s: &mut Loop,
        opts: &RunOptions,
    ) -> Result<&'static str, RelayError> {
        let mut reader = BinaryFileReader::new(BufReader::with_capacity(READ_BUFFER, file));
        let mut pace = Pacer::new(self.config.input.pace, self.config.input.speed);
        let mut sequence = 0u64;
        loop {
            let msg = match reader.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok("end-of-file"),
                Err(e) => {
                    if let Some(why) = input::stopped(&e).or_else(|| stop.why()) {
                        return Ok(why);
                    }
                    return Err(RelayError::BinaryFile {
                        path: path.display().to_string(),
                        source: e,
                    });
                }
            };
            sequence += 1;
            if let Some(ts) = itch_timestamp(msg) {
                if let Some(why) = pace.wait(ts, stop) {
                    return Ok(why);
                }
            }
            self.pipeline.begin_packet(self.pipeline.now_ns());
            self.pipeline.message(sequence, msg);
            self.pipeline.end_packet();
            if sequence % 1024 == 0 {
                if let Some(why) = self.housekeeping(s, opts, monotonic_ns()) {
                    return Ok(why);
                }
            }
        }
    }

    /// Reads a capture through the arbiter; returns why it ended and what
    /// the reader skipped, by reason.
    fn run_pcap(
        &mut self,
        input: &PcapInput<'_>,
        file: WakingFile,
        stop: &StopWhen,
        arbiter: &mut Arbiter,
        s: &mut Loop,
        opts: &RunOptions,
    ) -> Result<(&'static str, CaptureStats), RelayError> {
        let name = input.path.display().to_string();
        let buffered = BufReader::with_capacity(READ_BUFFER, file);
        let mut reader = match CaptureReader::new(name, buffered) {
            Ok(r) => r,
            Err(e) => {
                if let Some(why) = input::stopped(&e).or_else(|| stop.why()) {
                    return Ok((why, CaptureStats::default()));
                }
                return Err(e.into());
            }
        };
        let mut pace = Pacer::new(self.config.input.pace, self.config.input.speed);
        let mut last_ts = 0u64;
        let mut n = 0u64;
        loop {
            let d = match reader.next_datagram() {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(e) => {
                    if let Some(why) = input::stopped(&e).or_else(|| stop.why()) {
                        s.upstream = Upstream::from(arbiter.counters());
                        return Ok((why, *reader.stats()));
                    }
                    return Err(e.into());
                }
            };
            let line = match (input.line_a, input.line_b) {
                (_, Some(b)) if d.dst == b => Line::B,
                (Some(a), _) if d.dst != a => {
                    s.skipped += 1;
                    continue;
                }
                _ => Line::A,
            };
            let (ts, payload) = (d.timestamp_ns, d.payload);
            if let Some(why) = pace.wait(ts, stop) {
                s.upstream = Upstream::from(arbiter.counters());
                return Ok((why, *reader.stats()));
            }
            // Capture time is the arbiter's clock: replays are
            // deterministic whatever the pace.
            last_ts = last_ts.max(ts);
            let arrival = self.pipeline.now_ns();
            self.datagram(arbiter, line, payload, arrival, last_ts, None, s);
            n += 1;
            if n % 256 == 0 {
                s.upstream = Upstream::from(arbiter.counters());
                if let Some(why) = self.housekeeping(s, opts, monotonic_ns()) {
                    return Ok((why, *reader.stats()));
                }
            }
        }
        // The capture is over: nothing will fill what is still missing.
        // Report it unrecoverable (a source gap on every stream) and
        // deliver what was held behind it.
        self.pipeline.begin_packet(self.pipeline.now_ns());
        let mut sink = Sink {
            pipeline: &mut self.pipeline,
            rerequest: None,
            request_errors: &mut s.request_errors,
            ended: &mut s.ended,
        };
        arbiter.finish(&mut sink);
        self.pipeline.end_packet();
        s.upstream = Upstream::from(arbiter.counters());
        let why = if s.ended {
            "end-of-session"
        } else {
            "end-of-file"
        };
        Ok((why, *reader.stats()))
    }
}

/// A capture input's name and lines.
struct PcapInput<'a> {
    path: &'a std::path::Path,
    line_a: Option<SocketAddrV4>,
    line_b: Option<SocketAddrV4>,
}

/// Opens a file input once, without waiting (a FIFO's writer may come
/// later): a missing or unreadable file is a setup error.
fn open_input(path: &std::path::Path) -> Result<WakingFile, RelayError> {
    WakingFile::open(path).map_err(|reason| RelayError::Setup {
        what: format!("input file {}", path.display()),
        reason,
    })
}

struct Loop {
    deadline: Option<u64>,
    next_gap_log: u64,
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
fn idle_wait(mut w: WaitStrategy) {
    // The relay's input sockets have no doorbell of the bus's: "adaptive"
    // spins with the hint here.
    mdbus::wait::Wait::wait(&mut w);
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

    /// Waits until the event recorded at `ts` is due, in slices that look
    /// at `stop` (a jump of hours in the recorded time does not hold off
    /// SIGINT/SIGTERM or `--duration`); returns why to stop, if it is time
    /// to.
    fn wait(&mut self, ts: u64, stop: &StopWhen) -> Option<&'static str> {
        if !self.on {
            return None;
        }
        let now = monotonic_ns();
        let (t0, w0) = *self.origin.get_or_insert((ts, now));
        let offset = (ts.saturating_sub(t0) as f64 / self.speed) as u64;
        stop.sleep_until(w0.saturating_add(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(f: impl FnOnce(&mut Snapshot)) -> Summary {
        let mut counters = Snapshot::default();
        f(&mut counters);
        Summary {
            input: "moldudp64",
            seconds: 1.0,
            ended_by: "stopped",
            request_errors: 0,
            recv_errors: 0,
            skipped_datagrams: 0,
            capture: None,
            data_lost: None,
            counters,
            latency: LatencyNs::of(&mdbus_tool_support::percentiles::latency_histogram()),
        }
    }

    #[test]
    fn loss_names_what_was_lost_and_not_what_was_rejected() {
        assert_eq!(summary(|_| {}).loss(), None);
        // Rejected input beside a genuine feed is not loss.
        let rejected = summary(|c| {
            c.local.messages_in = 10;
            c.upstream.0.other_session = 5;
            c.upstream.0.suspect_jumps = 5;
            c.upstream.0.malformed = 5;
            c.upstream.0.duplicate_messages = 5;
        });
        assert_eq!(rejected.loss(), None);
        let lost = summary(|c| {
            c.local.messages_in = 10;
            c.upstream.0.unrecoverable = 7;
            c.local.bad_messages = 2;
            c.local.publish_errors = 1;
        });
        assert_eq!(
            lost.loss().unwrap(),
            "data lost: 7 feed messages unrecoverable (sent to subscribers as source gaps); \
             2 ITCH messages of an unknown type or wrong length not published; 1 publishes failed"
        );
        let wrong_session = summary(|c| c.upstream.0.other_session = 3);
        assert!(wrong_session
            .loss()
            .unwrap()
            .contains("all 3 packets received were of another session"));
    }
}
