//! The optional service thread of a bus (`[service] thread = true`): it does
//! `service()` (heartbeats, retransmissions, flushes) for the bus's
//! datagram publishers, so that applications only publish.
//!
//! A publisher stays owned by its application thread; the service thread
//! borrows it only while that thread is outside the publisher. The hand-off
//! is an asymmetric Dekker handshake on two flags per publisher, `app`
//! ("the owner is inside") and `svc` ("the service thread wants in"):
//!
//! | owner, entering (every call) | service thread, every `interval` |
//! | --- | --- |
//! | store `app = true` (relaxed) | store `svc = true` (relaxed), for every publisher |
//! | compiler fence | `membarrier(PRIVATE_EXPEDITED)`: a full fence on every thread of the process |
//! | load `svc` (acquire): false? go on | load `app` (acquire): false? call `service()`, then store `svc = false` (release) |
//! | true? store `app = false`, wait for `svc` to clear, retry | true? store `svc = false`: the owner is busy, try next round |
//! | leaving: store `app = false` (release) | |
//!
//! The heavy barrier is on the service thread's side: the membarrier system
//! call interrupts the process's running threads once per round, so the
//! owner's path is a plain store, a compiler fence and a load of a flag on
//! its own cache line, and it never locks; it waits only while a
//! `service()` that began before it arrived finishes. Where the kernel has
//! no membarrier (before Linux 4.14, or seccomp), both sides use a full
//! fence instead (`mfence` on the owner's path, ~20 ns).

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::ServiceConfig;
use crate::transport::datagram_stream::DatagramPublisher;
use crate::transport::udp::UdpLink;
use crate::transport::verbs::UdLink;
use crate::transport::StreamSend;

/// A datagram publisher the service thread may serve.
#[derive(Debug)]
pub(crate) enum Datagram {
    Udp(DatagramPublisher<UdpLink>),
    Ud(DatagramPublisher<UdLink>),
}

impl Datagram {
    fn service(&mut self) -> crate::Result<()> {
        match self {
            Datagram::Udp(p) => p.service(),
            Datagram::Ud(p) => p.service(),
        }
    }
}

/// One publisher shared between its owner and the service thread.
#[derive(Debug)]
struct Slot {
    /// The owner is inside the publisher.
    app: AtomicBool,
    /// The service thread is, or is about to be, inside the publisher.
    svc: AtomicBool,
    /// The owner dropped the publisher; the thread forgets the slot.
    closed: AtomicBool,
    /// Whether the service thread's barrier is membarrier (the owner then
    /// needs only a compiler fence).
    asymmetric: bool,
    /// `Some` until the owner drops the publisher. Touched only by whoever
    /// holds the handshake.
    publisher: UnsafeCell<Option<Datagram>>,
}

// SAFETY: `publisher` is touched only by the side that holds the handshake
// (module doc), which orders every access with acquire/release pairs; the
// rest are atomics. `Datagram` itself is `Send`.
unsafe impl Sync for Slot {}

/// The owner's side of a served publisher: what `Publisher` holds instead
/// of the transport endpoint.
#[derive(Debug)]
pub(crate) struct Served {
    slot: Arc<Slot>,
    /// The owner is inside (its `app` flag is set); owner-local.
    entered: Cell<bool>,
}

impl Served {
    /// Enters the publisher (idempotent) and returns it. Call
    /// [`Served::leave`] when the call that entered is done.
    #[inline]
    // `&self` because `Publisher`'s `&self` getters enter too; exclusivity
    // comes from the handshake and `Served` not being `Sync`.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn enter(&self) -> &mut Datagram {
        if !self.entered.get() {
            let s = &self.slot;
            loop {
                // Pairs with the service thread's membarrier (or fence) and
                // its load of `app`: one of the two sees the other's flag.
                s.app.store(true, Ordering::Relaxed);
                if s.asymmetric {
                    compiler_fence(Ordering::SeqCst);
                } else {
                    fence(Ordering::SeqCst);
                }
                // Acquire: pairs with the release that ended the last
                // service(), so its writes are visible here.
                if !s.svc.load(Ordering::Acquire) {
                    break;
                }
                s.app.store(false, Ordering::Release);
                while s.svc.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            }
            self.entered.set(true);
        }
        // SAFETY: the handshake above keeps the service thread out until
        // `leave`; `Served` is not `Sync`, so this owner thread is the only
        // other user, and each `&mut` it takes ends before the next call
        // (the callers in `stream.rs` hold it only within one method, or
        // within one claim that borrows the publisher mutably).
        let p = unsafe { &mut *self.slot.publisher.get() };
        p.as_mut()
            .expect("a served publisher is present until its owner drops it")
    }

    /// Leaves the publisher: the service thread may serve it again.
    #[inline]
    pub(crate) fn leave(&self) {
        if self.entered.get() {
            self.entered.set(false);
            // Release: pairs with the service thread's acquire load of
            // `app`, publishing what this owner wrote.
            self.slot.app.store(false, Ordering::Release);
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // Take the publisher out under the handshake and drop it here, on
        // the owner's thread, so that its end of stream goes out now.
        self.enter();
        // SAFETY: entered: exclusive, as in `enter`.
        let publisher = unsafe { &mut *self.slot.publisher.get() }.take();
        self.slot.closed.store(true, Ordering::Release);
        self.leave();
        drop(publisher);
    }
}

/// The running service thread of a bus; stops (and is joined) when the
/// last `Bus` clone is dropped. Publishers it served keep working and fall
/// back to their owner's `service()` calls.
#[derive(Debug)]
pub(crate) struct ServiceThread {
    new: Mutex<Sender<Arc<Slot>>>,
    stop: Arc<AtomicBool>,
    asymmetric: bool,
    thread: Option<JoinHandle<()>>,
}

impl ServiceThread {
    /// Starts the thread, pinned to `cfg.core` when set.
    pub(crate) fn start(cfg: &ServiceConfig) -> crate::Result<ServiceThread> {
        let asymmetric = membarrier::register();
        if !asymmetric {
            log::info!(
                "service thread: membarrier(PRIVATE_EXPEDITED) unavailable; owners use a full fence"
            );
        }
        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (core, interval) = (cfg.core, cfg.interval);
        let thread = std::thread::Builder::new()
            .name("mdbus-service".into())
            .spawn({
                let stop = stop.clone();
                move || run(rx, &stop, core, interval, asymmetric)
            })
            .map_err(|e| crate::Error::Io {
                op: "spawn",
                target: "the bus's service thread".into(),
                source: e,
            })?;
        Ok(ServiceThread {
            new: Mutex::new(tx),
            stop,
            asymmetric,
            thread: Some(thread),
        })
    }

    /// Hands `publisher` to the thread; its owner keeps the returned side.
    pub(crate) fn serve(&self, publisher: Datagram) -> Served {
        let slot = Arc::new(Slot {
            app: AtomicBool::new(false),
            svc: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            asymmetric: self.asymmetric,
            publisher: UnsafeCell::new(Some(publisher)),
        });
        // Control plane (publisher creation): a lock here costs nothing on
        // the publish path. A thread that has stopped just never serves it.
        if let Ok(tx) = self.new.lock() {
            let _ = tx.send(slot.clone());
        }
        Served {
            slot,
            entered: Cell::new(false),
        }
    }
}

impl Drop for ServiceThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run(
    rx: Receiver<Arc<Slot>>,
    stop: &AtomicBool,
    core: Option<usize>,
    interval: Duration,
    asymmetric: bool,
) {
    if let Some(c) = core {
        match crate::affinity::Placement::from_cores([c]).pin(0) {
            Ok(_) => log::info!("service thread pinned to core {c}"),
            Err(e) => log::warn!("service thread: cannot pin to core {c}: {e}"),
        }
    }
    let mut slots: Vec<Arc<Slot>> = Vec::new();
    let mut failures = 0u64;
    while !stop.load(Ordering::Acquire) {
        slots.extend(rx.try_iter());
        slots.retain(|s| !s.closed.load(Ordering::Acquire));
        if !slots.is_empty() {
            for s in &slots {
                s.svc.store(true, Ordering::Relaxed);
            }
            // One barrier for the whole round: after it, every owner either
            // has its `app` flag visible here or will see its `svc` flag.
            if asymmetric {
                if let Err(e) = membarrier::expedited() {
                    // Owners rely on this barrier: serve no more (they fall
                    // back to their own service() calls).
                    log::error!("service thread stops: membarrier failed: {e}");
                    for s in &slots {
                        s.svc.store(false, Ordering::Release);
                    }
                    return;
                }
            } else {
                fence(Ordering::SeqCst);
            }
            for s in &slots {
                // Acquire: pairs with the owner's release in `leave`.
                if !s.app.load(Ordering::Acquire) {
                    // SAFETY: the handshake keeps the owner out until `svc`
                    // clears below; `closed` was false, and the owner clears
                    // the publisher only under the handshake.
                    if let Some(p) = unsafe { &mut *s.publisher.get() } {
                        if let Err(e) = p.service() {
                            failures += 1;
                            // The first, then every 1000th: a dead link must
                            // not flood the log.
                            if failures % 1000 == 1 {
                                log::warn!("service thread: {e} ({failures} failures so far)");
                            }
                        }
                    }
                }
                // Release: pairs with the owner's acquire load of `svc`.
                s.svc.store(false, Ordering::Release);
            }
        }
        std::thread::park_timeout(interval);
    }
}

/// membarrier(2), the heavy half of the asymmetric handshake.
mod membarrier {
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Registers the process for private expedited barriers; false when the
    /// kernel cannot.
    pub(super) fn register() -> bool {
        // SAFETY: membarrier takes two integer arguments and touches no
        // memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0 }
    }

    /// A full memory barrier on every running thread of this process.
    pub(super) fn expedited() -> std::io::Result<()> {
        // SAFETY: as above.
        let rc = unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::{Bus, Config, Event};

    /// A UDP bus on loopback with the service thread on; `n` picks the
    /// group and port.
    fn bus(n: u32, extra: &str) -> Bus {
        let pid = std::process::id();
        let port = 47_000 + (pid % 300) * 8 + n;
        let toml = format!(
            "transport = \"udp\"\n[service]\nthread = true\ninterval = \"1ms\"\n\
             [streams.md]\nmax_message = 64\ncapacity = 65536\n\
             group = \"239.254.{}.{}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\n\
             heartbeat_interval = \"10ms\"\nheartbeat_timeout = \"30s\"\n\
             retransmit_timeout = \"5ms\"\n{extra}",
            1 + pid % 250,
            1 + n
        );
        Bus::new(Config::from_toml_str(&toml, "<test>").unwrap()).unwrap()
    }

    fn payload(seq: u64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&seq.to_le_bytes());
        b[8..].copy_from_slice(&(!seq).to_le_bytes());
        b
    }

    /// Polls until `want` messages arrived in order; fails on any loss or
    /// after a minute (a hang guard, not a timing assertion).
    fn receive(s: &mut crate::Subscriber, from: u64, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut next = from;
        while next < from + want {
            assert!(
                Instant::now() < deadline,
                "stuck at {next} of {}",
                from + want
            );
            s.poll(|e| match e {
                Event::Message(m) => {
                    assert_eq!(m.seq(), next);
                    assert_eq!(m.payload(), payload(next));
                    next += 1;
                }
                other => panic!("unexpected {other:?} at {next}"),
            })
            .unwrap();
        }
    }

    #[test]
    fn the_owner_side_is_fence_free_where_the_kernel_has_membarrier() {
        // MEMBARRIER_CMD_QUERY: the commands this kernel supports.
        // SAFETY: integer arguments only.
        let supported = unsafe { libc::syscall(libc::SYS_membarrier, 0 as libc::c_long, 0) };
        let expedited = supported > 0 && supported & (1 << 4) != 0;
        assert_eq!(
            super::membarrier::register(),
            expedited,
            "query said {supported:#x}"
        );
        if expedited {
            assert!(super::membarrier::expedited().is_ok());
        }
    }

    #[test]
    fn an_owner_that_never_calls_service_still_serves_a_late_joiner() {
        let bus = bus(0, "late_join = \"oldest\"\n");
        let mut p = bus.publisher("md").unwrap();
        for seq in 1..=1000 {
            assert_eq!(p.publish(&payload(seq)).unwrap(), seq);
        }
        // The subscriber joins after the fact: it learns of the history
        // from a heartbeat and fetches it by retransmission, both of which
        // only the service thread sends (this test never calls service()).
        let mut s = bus.subscriber("md").unwrap();
        receive(&mut s, 1, 1000);
        // The owner still publishes as usual meanwhile.
        assert_eq!(p.publish(&payload(1001)).unwrap(), 1001);
        receive(&mut s, 1001, 1);
        let c = p.recovery_counters().unwrap();
        assert!(c.heartbeats_sent > 0, "{c:?}");
        assert!(c.requests_served > 0 && c.retransmitted >= 1000, "{c:?}");
        assert!(s.recovery_counters().unwrap().heartbeats_received > 0);
    }

    #[test]
    fn publishing_flat_out_while_the_service_thread_runs_loses_nothing() {
        // Patience of 10,000 requests (50 s): on a loaded machine the
        // service thread may be descheduled for longer than the default
        // ten requests wait, and this test is about it answering at all.
        let bus = bus(1, "retransmit_retries = 10000\n");
        let mut s = bus.subscriber("md").unwrap();
        let mut p = bus.publisher("md").unwrap();
        const N: u64 = 50_000;
        let receiver = std::thread::spawn(move || {
            receive(&mut s, 1, N);
            s.stats()
        });
        for seq in 1..=N {
            let mut c = p.claim(16).unwrap();
            c.copy_from_slice(&payload(seq));
            assert_eq!(c.commit().unwrap(), seq);
        }
        // The subscriber may still be fetching what the kernel dropped: the
        // service thread answers while this owner does nothing.
        let stats = receiver.join().unwrap();
        assert_eq!((stats.received, stats.gaps, stats.overruns), (N, 0, 0));
        assert_eq!(p.published(), N);
    }

    #[test]
    fn a_dropped_publisher_ends_its_stream_at_once() {
        let bus = bus(2, "");
        let mut s = bus.subscriber("md").unwrap();
        let mut p = bus.publisher("md").unwrap();
        p.publish(&payload(1)).unwrap();
        drop(p);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut events: Vec<String> = Vec::new();
        while !events.last().is_some_and(|e| e.starts_with("EndOfStream")) {
            assert!(Instant::now() < deadline, "no end of stream: {events:?}");
            s.poll(|e| {
                events.push(match e {
                    Event::Message(m) => format!("message {}", m.seq()),
                    other => format!("{other:?}"),
                })
            })
            .unwrap();
        }
        assert_eq!(events, ["message 1", "EndOfStream { last_seq: 1 }"]);
    }
}
