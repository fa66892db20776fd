//! The relay's per-message path, without I/O of its own: messages in
//! sequence order are checked, routed and published; each inbound datagram
//! is timed from its arrival to the end of its publishing.
//!
//! Nothing here allocates per message: publishers write into their
//! preallocated rings or send buffers, the router indexes its table, the
//! counters are plain integers and the histogram is allocated once.

use std::fs::File;
use std::io::BufWriter;

use mdbus::metrics::Latency;
use mdbus::Publisher;
use mdbus_feed::itch;
use mdbus_feed::mdcap::{self, MdcapError, MdcapWriter};
use mdbus_feed::moldudp64::Session;

use super::passthrough::Passthrough;
use super::payload;
use super::route::{Route, Router};
use super::stats::{self, Local, Snapshot, Upstream};

/// Highest latency the histogram resolves (larger values are clamped and
/// counted): 10 s.
const LATENCY_MAX_NS: u64 = 10_000_000_000;

/// Datagrams after which the publishers' counters-file entries are
/// brought up to date at the latest (they also are at every
/// [`Pipeline::idle`], about once a millisecond, and when the pipeline
/// goes): updating them costs about as much as relaying a message.
pub const COUNTERS_EVERY_PACKETS: u32 = 64;

/// Length of each ITCH message type (type byte included) by its type
/// byte, 0 for a type the specification does not define: one load per
/// message instead of `itch::len_for`'s branches.
const ITCH_LEN: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        if let Some(n) = itch::len_for(i as u8) {
            assert!(n > 0 && n <= u8::MAX as usize);
            t[i] = n as u8;
        }
        i += 1;
    }
    t
};

/// Relay-added latencies under this many ns are counted in
/// [`QuickLatency`]'s own slots.
const QUICK_NS: u64 = 4096;

/// Slots for latencies under [`QUICK_NS`]: one per ns under 2,048, one
/// per 2 ns from 2,048 (the histogram's own resolution there).
const QUICK_SLOTS: usize = 3072;

/// The front of the latency histogram: a latency under [`QUICK_NS`] is one
/// increment of a slot that holds exactly the values the histogram itself
/// does not tell apart (HdrHistogram at 3 significant digits resolves
/// 1 ns under 2,048 ns and 2 ns from 2,048 to 4,095 ns), instead of the
/// histogram's own index computation and bookkeeping (about 50
/// instructions). The slots are merged into the histogram before anyone
/// reads it, so every percentile, the count and the largest value are
/// those of recording each value directly. If the histogram's layout is
/// not that one (a different precision), every value goes to it directly.
#[derive(Debug)]
struct QuickLatency {
    slots: Box<[u64; QUICK_SLOTS]>,
    /// [`QUICK_NS`], or 0 when the histogram's layout differs.
    limit: u64,
    /// Values in the slots.
    pending: u64,
}

impl QuickLatency {
    fn new(latency: &Latency) -> QuickLatency {
        let h = latency.histogram();
        let fits = (0..QUICK_NS).all(|v| {
            let first = Self::value_of(Self::slot(v));
            // Same histogram slot as the slot's own value, and a new slot
            // exactly where the histogram starts one.
            h.lowest_equivalent(v.max(1)) == h.lowest_equivalent(first.max(1))
                && (v == 0 || (Self::slot(v) != Self::slot(v - 1)) == (h.lowest_equivalent(v) == v))
        });
        QuickLatency {
            slots: Box::new([0; QUICK_SLOTS]),
            limit: if fits { QUICK_NS } else { 0 },
            pending: 0,
        }
    }

    /// The slot of `ns` (under [`QUICK_NS`]).
    #[inline]
    fn slot(ns: u64) -> usize {
        (if ns < 2048 { ns } else { 1024 + ns / 2 }) as usize
    }

    /// The lowest value of slot `i`.
    fn value_of(i: usize) -> u64 {
        let i = i as u64;
        if i < 2048 {
            i
        } else {
            (i - 1024) * 2
        }
    }

    /// Records `ns` here or, when it is out of the slots' range, in
    /// `latency`.
    #[inline]
    fn record(&mut self, latency: &mut Latency, ns: u64) {
        if ns < self.limit {
            if let Some(c) = self.slots.get_mut(Self::slot(ns)) {
                *c += 1;
                self.pending += 1;
                return;
            }
        }
        latency.record(ns);
    }

    /// Moves the slots' counts into `latency`.
    fn merge_into(&mut self, latency: &mut Latency) {
        if self.pending == 0 {
            return;
        }
        self.pending = 0;
        for (i, c) in self.slots.iter_mut().enumerate() {
            if *c > 0 {
                latency.record_n(Self::value_of(i), std::mem::take(c));
            }
        }
    }
}

/// `CLOCK_REALTIME` in ns, read from the TSC: quanta calibrates the TSC's
/// rate against the OS clock, and [`ArrivalClock::recalibrate`] (once a
/// second, off the message path) re-anchors it to `CLOCK_REALTIME` so
/// that clock steps and slewing do not accumulate. Where the TSC is not
/// usable, quanta reads the OS's monotonic clock instead.
#[derive(Debug, Clone)]
pub struct ArrivalClock {
    clock: quanta::Clock,
    raw0: u64,
    real0: u64,
}

impl Default for ArrivalClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ArrivalClock {
    /// A clock anchored now.
    pub fn new() -> ArrivalClock {
        let clock = quanta::Clock::new();
        let raw0 = clock.raw();
        ArrivalClock {
            clock,
            raw0,
            real0: mdbus::clock::now_ns(),
        }
    }

    /// Nanoseconds since the Unix epoch.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.real0
            .wrapping_add(self.clock.delta_as_nanos(self.raw0, self.clock.raw()))
    }

    /// Anchors the clock to `CLOCK_REALTIME` again.
    pub fn recalibrate(&mut self) {
        self.raw0 = self.clock.raw();
        self.real0 = mdbus::clock::now_ns();
    }
}

/// Routing and publishing of messages in sequence order.
#[derive(Debug)]
pub struct Pipeline {
    router: Router,
    publishers: Vec<Publisher>,
    names: Vec<String>,
    per_stream: Vec<u64>,
    local: Local,
    /// Complete only after [`Pipeline::merge_latency`].
    latency: Latency,
    quick: QuickLatency,
    /// A pass-through or a recording is attached: the per-message path
    /// checks this one flag instead of both.
    taps: bool,
    passthrough: Option<Passthrough>,
    /// Arrival of the datagram being handled (`CLOCK_REALTIME`, ns).
    arrival_ns: u64,
    /// Messages published for the datagram being handled.
    published_in_packet: u64,
    /// `per_stream` when the publishers' counters-file entries were last
    /// brought up to date: a stream whose count moved since published in
    /// a run (compared there, not marked per message).
    synced_per_stream: Vec<u64>,
    /// Datagrams that published since then.
    unsynced_packets: u32,
    /// Session of the datagrams being handled (for the pass-through).
    session: Session,
    warned_publish: bool,
    /// Whether any publisher batches sends (datagram transports); shared
    /// memory has nothing to flush.
    flush_needed: bool,
    /// The `.mdcap` recording, if any.
    recorder: Option<MdcapWriter<BufWriter<File>>>,
    /// Unrecoverable ranges not yet logged: how many, their messages, and
    /// the latest (logged off the message path, at most once a second).
    unlogged_gaps: (u64, u64, (u64, u64)),
    /// Arrival and completion times.
    clock: ArrivalClock,
}

impl Pipeline {
    /// A pipeline publishing on `publishers` (one per stream, in the order
    /// the router numbers them).
    pub fn new(
        router: Router,
        publishers: Vec<Publisher>,
        passthrough: Option<Passthrough>,
    ) -> Self {
        let names: Vec<String> = publishers.iter().map(|p| p.name().to_string()).collect();
        let flush_needed = publishers.iter().any(|p| p.recovery_counters().is_some());
        let latency = Latency::new(LATENCY_MAX_NS);
        Pipeline {
            quick: QuickLatency::new(&latency),
            taps: passthrough.is_some(),
            router,
            per_stream: vec![0; publishers.len()],
            synced_per_stream: vec![0; publishers.len()],
            publishers,
            names,
            local: Local::default(),
            latency,
            passthrough,
            arrival_ns: 0,
            published_in_packet: 0,
            unsynced_packets: 0,
            session: Session::BLANK,
            warned_publish: false,
            flush_needed,
            recorder: None,
            unlogged_gaps: (0, 0, (0, 0)),
            clock: ArrivalClock::new(),
        }
    }

    /// Now, by the pipeline's clock (`CLOCK_REALTIME` ns, from the TSC):
    /// the arrival time of a datagram the kernel did not stamp.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Re-anchors the pipeline's clock to `CLOCK_REALTIME` (between
    /// datagrams, about once a second).
    pub fn recalibrate_clock(&mut self) {
        self.clock.recalibrate();
    }

    /// Records every routed message into `writer` from now on.
    pub fn set_recorder(&mut self, writer: MdcapWriter<BufWriter<File>>) {
        self.recorder = Some(writer);
        self.taps = true;
    }

    /// Writes out the rest of the recording and closes it. Returns how many
    /// messages it holds (`None`: no recording).
    pub fn finish_recording(&mut self) -> Result<Option<u64>, MdcapError> {
        match self.recorder.take() {
            Some(w) => {
                self.taps = self.passthrough.is_some();
                w.finish().map(|_| Some(self.local.recorded))
            }
            None => Ok(None),
        }
    }

    /// Whether any stream runs on a datagram transport (UDP or verbs UD),
    /// whose subscribers may ask for retransmissions.
    pub fn has_datagram_streams(&self) -> bool {
        self.flush_needed
    }

    /// The streams' names, in routing order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The last sequence published on stream `name` (0: none, or no such
    /// stream).
    pub fn last_seq(&self, name: &str) -> u64 {
        self.publishers
            .iter()
            .find(|p| p.name() == name)
            .map_or(0, |p| p.next_seq().saturating_sub(1))
    }

    /// Starts a datagram that arrived at `arrival_ns` (`CLOCK_REALTIME`).
    #[inline]
    pub fn begin_packet(&mut self, arrival_ns: u64) {
        self.arrival_ns = arrival_ns;
        self.published_in_packet = 0;
    }

    /// Sets the session whose messages follow (pass-through only).
    #[inline]
    pub fn set_session(&mut self, session: Session) {
        self.session = session;
    }

    /// The session of the messages being handled.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Ends the datagram: flushes batched sends and records the latency
    /// from its arrival, if any of its messages was published. Returns the
    /// time it read for that (`None`: nothing published, no clock read),
    /// which is also when the next datagram of a batch is picked up: a
    /// caller without a kernel stamp for it uses it as its arrival instead
    /// of reading the clock again.
    #[inline]
    pub fn end_packet(&mut self) -> Option<u64> {
        if self.published_in_packet == 0 {
            return None;
        }
        self.unsynced_packets += 1;
        if self.unsynced_packets >= COUNTERS_EVERY_PACKETS {
            self.end_runs();
        }
        if self.flush_needed {
            for p in &mut self.publishers {
                if p.flush().is_err() {
                    self.local.publish_errors += 1;
                }
            }
        }
        if let Some(pt) = &mut self.passthrough {
            pt.flush();
        }
        let done = self.clock.now_ns();
        self.quick
            .record(&mut self.latency, done.saturating_sub(self.arrival_ns));
        self.local.timed_packets += 1;
        Some(done)
    }

    /// One message, in sequence order.
    #[inline(always)]
    pub fn message(&mut self, sequence: u64, data: &[u8]) {
        self.local.messages_in += 1;
        // A known type's length is never 0, so an unknown type never
        // matches.
        let ok = data
            .first()
            .is_some_and(|&t| usize::from(ITCH_LEN[usize::from(t)]) == data.len());
        if !ok {
            self.local.bad_messages += 1;
            return;
        }
        let route = self.router.route(data);
        if self.taps {
            self.tap(sequence, data, route);
        }
        match route {
            Route::Stream(s) => self.publish_inline(usize::from(s), sequence, data),
            Route::All => {
                for s in 0..self.publishers.len() {
                    self.publish(s, sequence, data);
                }
            }
            Route::DropUnknown | Route::DropUnmatched => self.local.unrouted += 1,
        }
    }

    /// The pass-through and the recording, for a message routed `route`.
    #[inline(never)]
    fn tap(&mut self, sequence: u64, data: &[u8], route: Route) {
        if let Some(pt) = &mut self.passthrough {
            pt.push(self.session, sequence, data);
        }
        if let Some(rec) = &mut self.recorder {
            let stream = match route {
                // Streams are numbered as the recording's stream table.
                Route::Stream(s) => s,
                Route::All => mdcap::STREAM_ALL,
                Route::DropUnknown | Route::DropUnmatched => mdcap::STREAM_NONE,
            };
            match rec.write_on(self.arrival_ns, sequence, stream, data) {
                Ok(()) => self.local.recorded += 1,
                Err(e) => {
                    // A full disk must not stop the feed: stop recording,
                    // say so once, count it.
                    self.local.record_errors += 1;
                    self.recorder = None;
                    self.taps = self.passthrough.is_some();
                    log::warn!("recording stopped (counted in record_errors): {e}");
                }
            }
        }
    }

    /// [`Pipeline::publish`] outlined, for the rare messages that go to
    /// every stream.
    #[inline(never)]
    fn publish(&mut self, stream: usize, sequence: u64, data: &[u8]) {
        self.publish_inline(stream, sequence, data);
    }

    /// One message on one stream; inlined into the per-message path,
    /// where a call cost about a fifth of the work.
    #[inline(always)]
    fn publish_inline(&mut self, stream: usize, sequence: u64, data: &[u8]) {
        let Some(p) = self.publishers.get_mut(stream) else {
            self.local.unrouted += 1;
            return;
        };
        // The counters file is updated once per datagram (`end_runs`).
        let result = p.publish_in_run(payload::HEADER_LEN + data.len(), self.arrival_ns, |b| {
            payload::write(b, sequence, data);
        });
        match result {
            Ok(_) => {
                // `messages_out` is their sum (`Pipeline::local`).
                self.per_stream[stream] += 1;
                self.published_in_packet += 1;
            }
            Err(e) => {
                self.local.publish_errors += 1;
                if !self.warned_publish {
                    self.warned_publish = true;
                    log::warn!("publishing failed (counted in publish_errors; reported once): {e}");
                }
            }
        }
    }

    /// Ends the publishers' runs since the last call: their counters-file
    /// entries catch up.
    #[inline]
    fn end_runs(&mut self) {
        self.unsynced_packets = 0;
        // `per_stream` counts exactly the messages published in runs, so a
        // stream whose count moved is one with a run to end.
        for ((p, &n), synced) in self
            .publishers
            .iter_mut()
            .zip(&self.per_stream)
            .zip(&mut self.synced_per_stream)
        {
            if n != *synced {
                *synced = n;
                p.end_run();
            }
        }
    }

    /// Feed messages `from..to` (end exclusive) cannot be recovered: every
    /// stream gets a source-gap notice carrying the range, which its
    /// subscribers receive as `Event::SourceGap`, so none of them mistakes
    /// its contiguous stream for a complete feed. Allocation-free.
    pub fn source_gap(&mut self, from: u64, to: u64) {
        if from >= to {
            return;
        }
        let g = &mut self.unlogged_gaps;
        g.0 += 1;
        g.1 = g.1.saturating_add(to - from);
        g.2 = (from, to);
        for p in &mut self.publishers {
            match p.publish_source_gap(from, to) {
                Ok(_) => {
                    self.local.source_gaps += 1;
                    self.published_in_packet += 1;
                }
                Err(e) => {
                    self.local.publish_errors += 1;
                    if !self.warned_publish {
                        self.warned_publish = true;
                        log::warn!(
                            "publishing failed (counted in publish_errors; reported once): {e}"
                        );
                    }
                }
            }
        }
    }

    /// Logs the unrecoverable ranges seen since the last call, if any, in
    /// one warning (called between datagrams, rate-limited by the caller).
    pub fn log_source_gaps(&mut self) {
        let (ranges, messages, (from, to)) = self.unlogged_gaps;
        if ranges == 0 {
            return;
        }
        self.unlogged_gaps = (0, 0, (0, 0));
        log::warn!(
            "{messages} messages in {ranges} range(s) of session {} cannot be recovered (the latest {from}..{to}): skipped, a source gap sent on every stream",
            self.session.as_str().unwrap_or("?")
        );
    }

    /// Publishers' idle duties (datagram transports: retransmissions and
    /// heartbeats) and the pass-through heartbeat; `now_ns` is monotonic.
    pub fn idle(&mut self, now_ns: u64) {
        self.end_runs();
        for p in &mut self.publishers {
            if p.service().is_err() {
                self.local.publish_errors += 1;
            }
        }
        if let Some(pt) = &mut self.passthrough {
            pt.idle(now_ns);
        }
    }

    /// Notes a pass-through send time (monotonic) after a datagram.
    pub fn mark_sent(&mut self, now_ns: u64) {
        if let Some(pt) = &mut self.passthrough {
            if self.published_in_packet > 0 {
                pt.sent_at(now_ns);
            }
        }
    }

    /// The upstream session ended.
    pub fn end_of_session(&mut self, now_ns: u64) {
        if let Some(pt) = &mut self.passthrough {
            pt.end_of_session(now_ns);
        }
    }

    /// A new session began: locates are named again.
    pub fn new_session(&mut self, session: Session) {
        self.session = session;
        self.router.clear();
    }

    /// The relay's own counters, with the pass-through's.
    pub fn local(&self) -> Local {
        let mut l = self.local;
        l.messages_out = self.per_stream.iter().sum();
        if let Some(pt) = &self.passthrough {
            l.passthrough_packets = pt.packets;
            l.passthrough_errors = pt.errors;
        }
        l
    }

    /// Messages published per stream.
    pub fn per_stream(&self) -> &[u64] {
        &self.per_stream
    }

    /// Moves the latencies counted in the quick slots into the histogram.
    fn merge_latency(&mut self) {
        self.quick.merge_into(&mut self.latency);
    }

    /// The latency histogram, complete.
    pub fn latency(&mut self) -> &Latency {
        self.merge_latency();
        &self.latency
    }

    /// Writes every counter into `file`. No allocation.
    pub fn publish_counters(
        &mut self,
        file: &mdbus::counters::CountersFile,
        up: &Upstream,
        now_ns: u64,
    ) {
        self.merge_latency();
        stats::publish(
            file,
            up,
            &self.local(),
            &self.per_stream,
            &self.latency,
            now_ns,
        );
    }

    /// A snapshot of every counter.
    pub fn snapshot(&mut self, up: &Upstream) -> Snapshot {
        self.merge_latency();
        stats::snapshot(
            up,
            &self.local(),
            &self.names,
            &self.per_stream,
            &self.latency,
        )
    }

    /// The publishers, e.g. to close them in order.
    pub fn into_publishers(mut self) -> Vec<Publisher> {
        self.end_runs();
        std::mem::take(&mut self.publishers)
    }
}

impl Drop for Pipeline {
    /// The publishers' counters-file entries end complete.
    fn drop(&mut self) {
        self.end_runs();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RelayConfig;
    use mdbus::counters::CountersReader;

    /// An ITCH message of type `t` for `locate`, zeroed elsewhere, with
    /// `stock` at the type's symbol offset when given.
    fn itch_msg(t: u8, locate: u16, stock: Option<(usize, &[u8; 8])>) -> Vec<u8> {
        let mut m = vec![0u8; itch::len_for(t).unwrap()];
        m[0] = t;
        m[1..3].copy_from_slice(&locate.to_be_bytes());
        if let Some((off, s)) = stock {
            m[off..off + 8].copy_from_slice(s);
        }
        m
    }

    /// Latencies counted in the quick slots and merged give the same
    /// histogram as recording each directly: every value from 0 to past
    /// the slots' range, values far above it, and values above the
    /// histogram's bound (clamped and counted).
    #[test]
    fn the_quick_latency_slots_merge_into_exactly_the_directly_recorded_histogram() {
        let mut direct = Latency::new(LATENCY_MAX_NS);
        let mut merged = Latency::new(LATENCY_MAX_NS);
        let mut quick = QuickLatency::new(&merged);
        // The histogram's layout is the one the slots assume: the quick
        // path is taken.
        assert_eq!(quick.limit, QUICK_NS);
        let mut values: Vec<u64> = (0..2 * QUICK_NS).collect();
        values.extend([
            0,
            1,
            2047,
            2048,
            2049,
            4094,
            4095,
            4096,
            4097,
            1 << 20,
            u64::MAX,
        ]);
        values.extend([LATENCY_MAX_NS, LATENCY_MAX_NS + 1, 7_777_777]);
        // Some values many times, so the percentiles move.
        values.extend(std::iter::repeat(3001).take(5000));
        values.extend(std::iter::repeat(61).take(9000));
        for &v in &values {
            direct.record(v);
            quick.record(&mut merged, v);
        }
        assert!(quick.pending > 0);
        quick.merge_into(&mut merged);
        assert_eq!(quick.pending, 0);
        assert!(quick.slots.iter().all(|&c| c == 0));
        assert_eq!(merged.histogram(), direct.histogram());
        assert_eq!(merged.summary(), direct.summary());
        assert_eq!(merged.clamped(), direct.clamped());
        assert_eq!(merged.clamped(), 2);
        assert_eq!(merged.histogram().len(), values.len() as u64);
        // Merging again adds nothing.
        quick.merge_into(&mut merged);
        assert_eq!(merged.histogram(), direct.histogram());
    }

    /// The per-message length table agrees with `itch::len_for` on every
    /// type byte.
    #[test]
    fn the_length_table_is_len_for() {
        for t in 0..=255u8 {
            let table = Some(usize::from(ITCH_LEN[usize::from(t)])).filter(|&n| n > 0);
            assert_eq!(table, itch::len_for(t), "type {t}");
        }
    }

    /// Messages published in runs reach the bus's counters file at the
    /// next idle call, after `COUNTERS_EVERY_PACKETS` datagrams at the
    /// latest, and when the pipeline goes: every stream's message count
    /// and last sequence there equal what the pipeline published.
    #[test]
    fn the_counters_file_catches_up_at_idle_every_n_datagrams_and_at_the_end() {
        let dir = std::env::temp_dir().join(format!("mdbus-relay-runs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = format!(
            "[input]\nline_a = \"239.1.1.1:5000\"\n\
             [bus]\ntransport = \"shm\"\n[bus.shm]\ndir = \"{d}\"\nprefix = \"runs\"\n\
             [bus.counters]\ndir = \"{d}\"\n\
             [routing]\nmode = \"hash\"\nhash_streams = 4\nhash_prefix = \"md\"\ncontrol = \"ctl\"\nsystem = \"all\"\n",
            d = dir.display()
        );
        let cfg = RelayConfig::from_toml_str(&text, "<test>").unwrap();
        let bus = mdbus::Bus::new(cfg.bus.clone()).unwrap();
        let names = cfg.stream_names();
        let publishers: Vec<_> = names.iter().map(|n| bus.publisher(n).unwrap()).collect();
        let mut p = Pipeline::new(Router::new(&cfg.routing, &names), publishers, None);
        let path = bus.counters_path().unwrap().to_path_buf();
        let check = |names: &[String], per_stream: &[u64], last: &[u64], expect_total: u64| {
            let r = CountersReader::open(&path).unwrap();
            let labels = r.labels();
            let value = |name: &str, what: &str| {
                let want = format!("pub.{name}.{what}");
                let i = labels.iter().position(|l| *l == want).unwrap_or_else(|| {
                    panic!("no counter {want} in {labels:?}");
                });
                r.value(i).unwrap()
            };
            let mut total = 0;
            for (i, name) in names.iter().enumerate() {
                assert_eq!(value(name, "messages"), per_stream[i], "{name}");
                assert_eq!(value(name, "last_seq"), last[i], "{name}");
                total += per_stream[i];
            }
            assert_eq!(total, expect_total);
        };
        let state = |p: &Pipeline| {
            let last: Vec<u64> = p.names().iter().map(|n| p.last_seq(n)).collect();
            (p.names().to_vec(), p.per_stream().to_vec(), last)
        };
        let mut sequence = 0;
        let mut datagram = |p: &mut Pipeline, msgs: &[Vec<u8>]| {
            p.begin_packet(p.now_ns());
            for m in msgs {
                sequence += 1;
                p.message(sequence, m);
            }
            assert!(p.end_packet().is_some());
        };
        // A system event (to all five streams), then a datagram naming
        // three symbols with orders for them.
        datagram(&mut p, &[itch_msg(b'S', 0, None)]);
        p.idle(0);
        let (n, per, last) = state(&p);
        check(&n, &per, &last, 5);
        let mut second = Vec::new();
        for (locate, sym) in [(1u16, b"AAPL    "), (2, b"MSFT    "), (3, b"ZVZZT   ")] {
            second.push(itch_msg(b'R', locate, Some((11, sym))));
            second.push(itch_msg(b'A', locate, Some((24, sym))));
            second.push(itch_msg(b'E', locate, None));
        }
        datagram(&mut p, &second);
        p.idle(0);
        let (n, per, last) = state(&p);
        check(&n, &per, &last, 14);
        // Without idle calls: complete after COUNTERS_EVERY_PACKETS.
        for _ in 0..COUNTERS_EVERY_PACKETS {
            datagram(&mut p, &[itch_msg(b'E', 2, None)]);
        }
        let (n, per, last) = state(&p);
        check(&n, &per, &last, 14 + u64::from(COUNTERS_EVERY_PACKETS));
        // And when the pipeline goes, whatever was pending.
        datagram(&mut p, &[itch_msg(b'E', 3, None), itch_msg(b'S', 0, None)]);
        let (n, per, last) = state(&p);
        drop(p);
        check(&n, &per, &last, 14 + u64::from(COUNTERS_EVERY_PACKETS) + 6);
        drop(bus);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
