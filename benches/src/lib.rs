//! Shared pieces of the mdbus benchmarks: settings, the peer process (on
//! `mdbus_tool_support::process`), shared memory, and the report.
//!
//! Every benchmark runs as two processes pinned to two different cores. The
//! parent re-executes its own binary with [`ROLE_ENV`] naming the role the
//! child plays; the child is killed if the parent dies, and the parent's
//! spin loops stop with an error if the child dies or stops making progress.

use std::ffi::CStr;
use std::fmt;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use mdbus::affinity::{self, Placement};
use mdbus::wait::WaitStrategy;
use mdbus_tool_support::process::{die_with_parent, this_program, PeerError};
use mdbus_tool_support::watchdog::WatchdogError;

pub use mdbus_tool_support::percentiles::{latency_histogram, nanos, Percentiles};
pub use mdbus_tool_support::process::{wait_for_go, DoneSignal, Peer};
pub use mdbus_tool_support::watchdog::Watchdog;

/// Environment variable naming the role of a child process.
pub const ROLE_ENV: &str = "MDBUS_BENCH_ROLE";
/// Environment variable carrying the descriptor of the shared memory region.
pub const FD_ENV: &str = "MDBUS_BENCH_FD";
/// Environment variable carrying the core a child pins itself to.
pub const CORE_ENV: &str = "MDBUS_BENCH_CORE";
/// Environment variable carrying a name unique to this run (service names).
pub const RUN_ENV: &str = "MDBUS_BENCH_RUN";

/// An error that ends a benchmark.
#[derive(Debug)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

impl From<io::Error> for BenchError {
    fn from(e: io::Error) -> Self {
        BenchError(e.to_string())
    }
}

impl From<mdbus::Error> for BenchError {
    fn from(e: mdbus::Error) -> Self {
        BenchError(format!("mdbus: {e}"))
    }
}

impl From<PeerError> for BenchError {
    fn from(e: PeerError) -> Self {
        BenchError(e.to_string())
    }
}

impl From<WatchdogError> for BenchError {
    fn from(e: WatchdogError) -> Self {
        BenchError(e.to_string())
    }
}

impl From<affinity::AffinityError> for BenchError {
    fn from(e: affinity::AffinityError) -> Self {
        BenchError(e.to_string())
    }
}

/// Shorthand for benchmark results.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Builds a [`BenchError`] from format arguments.
#[macro_export]
macro_rules! bench_err {
    ($($arg:tt)*) => { $crate::BenchError(format!($($arg)*)) };
}

/// Reads an unsigned integer from the environment, or `default` when unset.
pub fn env_u64(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| bench_err!("{name}={text:?} is not a non-negative integer")),
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(e) => Err(bench_err!("{name}: {e}")),
    }
}

/// Iterations of a run under `cargo test`.
pub const SMOKE_ITERS: u64 = 2000;

/// The settings every benchmark shares, read from the environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Measured iterations (`MDBUS_BENCH_ITERS`).
    pub iters: u64,
    /// Unmeasured iterations before them (`MDBUS_BENCH_WARMUP`).
    pub warmup: u64,
    /// The two cores: parent on the first, child on the second
    /// (`MDBUS_BENCH_CORES`, a cpulist such as `2,3`).
    pub cores: (usize, usize),
    /// How the cores were chosen.
    pub placement: String,
    /// What the spin loops do between empty polls (`MDBUS_BENCH_WAIT`).
    pub wait: WaitStrategy,
    /// Longest stretch without progress before a run is abandoned
    /// (`MDBUS_BENCH_STALL_SECS`).
    pub stall: Duration,
    /// Started by `cargo test`: counts reduced, figures not meaningful.
    pub smoke: bool,
}

impl Settings {
    /// Reads the settings, with the given defaults for the counts.
    ///
    /// Run by `cargo test` (no `--bench` argument) rather than `cargo
    /// bench`, the default counts shrink to [`SMOKE_ITERS`]: the run checks
    /// that every peer works, quickly, and measures nothing worth quoting.
    pub fn from_env(default_iters: u64, default_warmup: u64) -> Result<Settings> {
        let benching = std::env::args().any(|a| a == "--bench");
        let smoke = !benching && child_role().is_none();
        let (default_iters, default_warmup) = if !smoke {
            (default_iters, default_warmup)
        } else {
            (
                default_iters.min(SMOKE_ITERS),
                default_warmup.min(SMOKE_ITERS / 10),
            )
        };
        let iters = env_u64("MDBUS_BENCH_ITERS", default_iters)?.max(1);
        let warmup = env_u64("MDBUS_BENCH_WARMUP", default_warmup)?;
        let placement = match std::env::var("MDBUS_BENCH_CORES") {
            Ok(list) => Placement::from_cores(
                affinity::parse_cpulist(&list)
                    .map_err(|e| bench_err!("MDBUS_BENCH_CORES={list:?}: {e}"))?,
            ),
            Err(_) => affinity::placement_for(None),
        };
        if placement.cores().len() < 2 {
            return Err(bench_err!(
                "need two cores for the two processes, have {:?} ({}); set MDBUS_BENCH_CORES",
                placement.cores(),
                placement.reason()
            ));
        }
        let wait = match std::env::var("MDBUS_BENCH_WAIT") {
            Ok(text) => text
                .parse()
                .map_err(|e| bench_err!("MDBUS_BENCH_WAIT: {e}"))?,
            Err(_) => WaitStrategy::BusySpin,
        };
        let stall = Duration::from_secs(env_u64("MDBUS_BENCH_STALL_SECS", 30)?.max(1));
        Ok(Settings {
            iters,
            warmup,
            cores: (placement.core(0), placement.core(1)),
            placement: placement.reason().to_string(),
            wait,
            stall,
            smoke,
        })
    }
}

/// The peers MDBUS_BENCH_PEERS names (comma-separated), or all of them;
/// an unknown name is an error that lists the known ones.
pub fn selected_peers<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> Result<Vec<T>> {
    let Ok(list) = std::env::var("MDBUS_BENCH_PEERS") else {
        return Ok(all.to_vec());
    };
    list.split(',')
        .map(|want| {
            all.iter()
                .copied()
                .find(|&t| name(t) == want.trim())
                .ok_or_else(|| {
                    let known: Vec<_> = all.iter().map(|&t| name(t)).collect();
                    bench_err!(
                        "MDBUS_BENCH_PEERS: unknown peer {want:?} ({})",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

/// The role this process was started in, if it is a child.
pub fn child_role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// The `main` of a two-process benchmark: runs `child` with the role in a
/// child process, `parent` otherwise; on failure says why on stderr as
/// `name: why` and exits 1.
pub fn main_of(
    name: &str,
    child: impl FnOnce(&str) -> Result<()>,
    parent: impl FnOnce() -> Result<()>,
) {
    let result = match child_role() {
        Some(role) => child(&role),
        None => parent(),
    };
    if let Err(e) = result {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}

/// Sets up a child process: dies with the parent, pins itself to the core
/// the parent chose, and returns that core.
pub fn child_init() -> Result<usize> {
    die_with_parent()?;
    let core = env_u64(CORE_ENV, 1)? as usize;
    affinity::pin_current_thread(core)?;
    Ok(core)
}

/// A port nothing on the loopback uses right now (UDP or TCP), for a case
/// that needs one: runs side by side then never share a port.
pub fn free_port(udp: bool) -> Result<u16> {
    let any = (std::net::Ipv4Addr::LOCALHOST, 0);
    let addr = if udp {
        std::net::UdpSocket::bind(any)?.local_addr()?
    } else {
        std::net::TcpListener::bind(any)?.local_addr()?
    };
    Ok(addr.port())
}

/// Prints `lines` (JSON objects) on stdout, and appends them to the file
/// named by `MDBUS_BENCH_JSON` when set.
pub fn emit_json(lines: &[String]) -> Result<()> {
    for line in lines {
        println!("{line}");
    }
    if let Ok(path) = std::env::var("MDBUS_BENCH_JSON") {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| bench_err!("MDBUS_BENCH_JSON={path}: {e}"))?;
        for line in lines {
            writeln!(file, "{line}")?;
        }
    }
    Ok(())
}

/// Starting this binary again as a child playing one role of a benchmark.
pub trait PeerExt: Sized {
    /// Starts this binary again as `role`, pinned to the second core of
    /// `settings`, with the same counts, and `region` (if any) inherited.
    /// The child's stdout is captured for its report.
    fn spawn(role: &str, settings: &Settings, region: Option<&SharedRegion>) -> Result<Self> {
        Self::spawn_env(role, settings, region, &[])
    }

    /// As [`spawn`](PeerExt::spawn), with extra environment variables (the
    /// port, size or counts of one case).
    fn spawn_env(
        role: &str,
        settings: &Settings,
        region: Option<&SharedRegion>,
        env: &[(&str, String)],
    ) -> Result<Self>;
}

impl PeerExt for Peer {
    fn spawn_env(
        role: &str,
        settings: &Settings,
        region: Option<&SharedRegion>,
        env: &[(&str, String)],
    ) -> Result<Peer> {
        let mut cmd = this_program()?;
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env(ROLE_ENV, role)
            .env(CORE_ENV, settings.cores.1.to_string())
            .env("MDBUS_BENCH_ITERS", settings.iters.to_string())
            .env("MDBUS_BENCH_WARMUP", settings.warmup.to_string())
            .env(RUN_ENV, run_name());
        if let Some(region) = region {
            cmd.env(FD_ENV, region.fd.as_raw_fd().to_string());
        }
        Ok(Peer::start(format!("the {role} process"), cmd, true)?)
    }
}

/// A watchdog over a spin loop during `what` (the parent's view when
/// `peer` is given), allowing `stall` without progress.
pub fn watchdog<'a>(
    peer: Option<&'a mut Peer>,
    wait: WaitStrategy,
    stall: Duration,
    what: &'static str,
) -> Watchdog<'a> {
    Watchdog::new(peer, wait, stall, what).hint("MDBUS_BENCH_STALL_SECS")
}

/// A name unique to this run: the parent's pid, inherited by children.
pub fn run_name() -> String {
    std::env::var(RUN_ENV).unwrap_or_else(|_| format!("mdbus-bench-{}", std::process::id()))
}

/// An mdbus shared-memory bus whose segments are named for this run, so
/// runs never meet each other's leftovers. `configure` sets up the
/// channels.
pub fn mdbus_bus(configure: impl FnOnce(&mut mdbus::Config)) -> Result<mdbus::Bus> {
    let mut cfg = mdbus::Config {
        transport: mdbus::TransportKind::Shm,
        shm: mdbus::config::ShmConfig {
            prefix: run_name(),
            attach_timeout: Duration::from_secs(30),
            ..Default::default()
        },
        ..Default::default()
    };
    configure(&mut cfg);
    Ok(mdbus::Bus::new(cfg)?)
}

/// Prints the note that marks a `cargo test` run, if this is one.
pub fn note_smoke(settings: &Settings) {
    if settings.smoke {
        println!(
            "(run by cargo test: {} iterations to check every peer works; `cargo bench` measures)",
            settings.iters
        );
    }
}

/// A shared memory region backed by a memfd, inherited by child processes.
pub struct SharedRegion {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

impl SharedRegion {
    /// Creates a zeroed region of `len` bytes, mapped shared and prefaulted.
    pub fn create(len: usize) -> Result<SharedRegion> {
        const NAME: &CStr = c"mdbus-bench";
        // No MFD_CLOEXEC: the child processes inherit the descriptor.
        // SAFETY: NAME is a NUL-terminated string; flags are valid.
        let raw = unsafe { libc::memfd_create(NAME.as_ptr(), 0) };
        if raw < 0 {
            return Err(bench_err!("memfd_create: {}", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor memfd_create just returned to us.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `fd` is an open memfd; the length is a plain integer.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(bench_err!(
                "ftruncate({len}): {}",
                io::Error::last_os_error()
            ));
        }
        Self::map(fd, len)
    }

    /// Maps the region a parent passed down in [`FD_ENV`].
    pub fn inherited(len: usize) -> Result<SharedRegion> {
        let raw = env_u64(FD_ENV, u64::MAX)?;
        let raw = RawFd::try_from(raw)
            .map_err(|_| bench_err!("{FD_ENV} is not set: start this role from its parent"))?;
        // SAFETY: the parent passed this descriptor to this process alone,
        // and nothing else in this process owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<SharedRegion> {
        // SAFETY: a fresh shared mapping of an open descriptor; the kernel
        // picks the address, so no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(bench_err!("mmap({len}): {}", io::Error::last_os_error()));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| bench_err!("mmap returned null"))?;
        Ok(SharedRegion { fd, ptr, len })
    }

    /// Views the start of the region as a `T` (see [`SharedSafe`]): the
    /// region starts zeroed and the other process writes to it concurrently.
    pub fn get<T: SharedSafe>(&self) -> &T {
        assert!(std::mem::size_of::<T>() <= self.len, "region too small");
        assert!(std::mem::align_of::<T>() <= 4096, "alignment above a page");
        // SAFETY: the mapping is page-aligned and at least size_of::<T>()
        // bytes (checked above); `SharedSafe` promises that all-zero bytes
        // are a valid `T` and that `T` is only mutated through interior
        // mutability, so a shared reference is sound even with another
        // process writing; the borrow ends before `self` unmaps the region.
        unsafe { &*self.ptr.as_ptr().cast::<T>() }
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping created in `map`, and every
        // reference handed out by `get` borrowed `self`, so none outlives it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Types that may live in a [`SharedRegion`].
///
/// # Safety
/// All-zero bytes must be a valid value, and all mutation must go through
/// interior mutability whose synchronisation holds across processes:
/// atomics, or cells handed from one process to the other by an
/// acquire/release pair on an atomic in the same region.
pub unsafe trait SharedSafe {}

/// Prints the round-trip table: a row per peer and payload with its
/// percentiles and sample count.
pub fn print_rtt_table<'a>(rows: impl IntoIterator<Item = (&'a str, usize, Percentiles, u64)>) {
    println!();
    println!(
        "{:<12} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "peer", "payload", "p50 ns", "p90 ns", "p99 ns", "p99.9 ns", "max ns", "samples"
    );
    for (peer, payload, p, samples) in rows {
        println!(
            "{peer:<12} {payload:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {samples:>10}",
            p.p50, p.p90, p.p99, p.p999, p.max
        );
    }
}

/// The JSON line of one round-trip result of `bench`: its `iters` samples'
/// percentiles `rtt`, with the run's settings and the clock's cost
/// `clock_ns`; the caller adds what names the peer and payload.
pub fn rtt_json(
    bench: &str,
    settings: &Settings,
    clock_ns: u64,
    iters: u64,
    rtt: Percentiles,
) -> serde_json::Value {
    serde_json::json!({
        "bench": bench,
        "iters": iters,
        "warmup": settings.warmup,
        "ping_core": settings.cores.0,
        "pong_core": settings.cores.1,
        "wait": settings.wait.as_str(),
        "clock_ns": clock_ns,
        "rtt_ns": rtt.to_json(),
    })
}

/// The cost of one `Instant::now()`, measured as the gap between two
/// consecutive calls: every timed iteration includes it once.
pub fn clock_cost() -> Percentiles {
    let mut h = latency_histogram();
    for _ in 0..200_000 {
        let t0 = Instant::now();
        let t1 = Instant::now();
        h.saturating_record((t1 - t0).as_nanos() as u64);
    }
    Percentiles::of(&h)
}
