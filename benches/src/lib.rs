//! Shared pieces of the mdbus benchmarks: the peer process, shared memory,
//! a watchdog for spin loops, and the report.
//!
//! Every benchmark runs as two processes pinned to two different cores. The
//! parent re-executes its own binary with [`ROLE_ENV`] naming the role the
//! child plays; the child is killed if the parent dies, and the parent's
//! spin loops stop with an error if the child dies or stops making progress.

use std::ffi::CStr;
use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mdbus::affinity::{self, Placement};
use mdbus::wait::{Wait, WaitStrategy};

/// Environment variable naming the role of a child process.
pub const ROLE_ENV: &str = "MDBUS_BENCH_ROLE";
/// Environment variable carrying the descriptor of the shared memory region.
pub const FD_ENV: &str = "MDBUS_BENCH_FD";
/// Environment variable carrying the core a child pins itself to.
pub const CORE_ENV: &str = "MDBUS_BENCH_CORE";
/// Environment variable carrying the parent's pid, so the child can check
/// it was not orphaned before it armed its death signal.
pub const PARENT_ENV: &str = "MDBUS_BENCH_PARENT";
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

/// Sets up a child process: dies with the parent, pins itself to the core
/// the parent chose, and returns that core.
pub fn child_init() -> Result<usize> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no
    // memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if rc != 0 {
        return Err(bench_err!(
            "prctl(PR_SET_PDEATHSIG): {}",
            io::Error::last_os_error()
        ));
    }
    let parent = env_u64(PARENT_ENV, 0)?;
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    if parent != 0 && u64::try_from(ppid).ok() != Some(parent) {
        return Err(bench_err!(
            "parent {parent} exited before the child started"
        ));
    }
    let core = env_u64(CORE_ENV, 1)? as usize;
    affinity::pin_current_thread(core)?;
    Ok(core)
}

/// Blocks the child until its parent calls [`Peer::go`]; fails if the
/// parent goes away first.
pub fn wait_for_go() -> Result<()> {
    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    if line.trim() == "go" {
        Ok(())
    } else {
        Err(bench_err!("the parent process went away before the start"))
    }
}

/// For a child past [`wait_for_go`]: learns, from a thread reading stdin,
/// when the parent calls [`Peer::done`] (or goes away), while the child
/// keeps working (a stream publisher answering retransmit requests).
pub struct DoneSignal(Arc<AtomicBool>);

impl DoneSignal {
    /// Starts listening.
    pub fn listen() -> DoneSignal {
        let flag = Arc::new(AtomicBool::new(false));
        let set = Arc::clone(&flag);
        std::thread::spawn(move || {
            let mut line = String::new();
            // `done`, end of file or an error: the parent needs nothing
            // more either way.
            while io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.trim() == "done" {
                    break;
                }
                line.clear();
            }
            // Relaxed: the flag hands over no data, only "stop".
            set.store(true, Ordering::Relaxed);
        });
        DoneSignal(flag)
    }

    /// Whether the parent said `done`.
    #[inline]
    pub fn is_done(&self) -> bool {
        // Relaxed: pairs with the store above; no data depends on it.
        self.0.load(Ordering::Relaxed)
    }
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

/// A child process running one role of a benchmark.
pub struct Peer {
    child: Child,
    role: String,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
}

impl Peer {
    /// Starts this binary again as `role`, pinned to the second core of
    /// `settings`, with the same counts, and `region` (if any) inherited.
    /// The child's stdout is captured for its report.
    pub fn spawn(role: &str, settings: &Settings, region: Option<&SharedRegion>) -> Result<Peer> {
        Self::spawn_env(role, settings, region, &[])
    }

    /// As [`spawn`](Peer::spawn), with extra environment variables (the
    /// port, size or counts of one case).
    pub fn spawn_env(
        role: &str,
        settings: &Settings,
        region: Option<&SharedRegion>,
        env: &[(&str, String)],
    ) -> Result<Peer> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env(ROLE_ENV, role)
            .env(CORE_ENV, settings.cores.1.to_string())
            .env("MDBUS_BENCH_ITERS", settings.iters.to_string())
            .env("MDBUS_BENCH_WARMUP", settings.warmup.to_string())
            .env(PARENT_ENV, std::process::id().to_string())
            .env(RUN_ENV, run_name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(region) = region {
            cmd.env(FD_ENV, region.fd.as_raw_fd().to_string());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| bench_err!("cannot start the {role} process: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        Ok(Peer {
            child,
            role: role.to_owned(),
            stdin,
            stdout,
        })
    }

    /// Tells the child to go on past [`wait_for_go`].
    pub fn go(&mut self) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| bench_err!("the {} process was already told to go", self.role))?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| bench_err!("the {} process is gone: {e}", self.role))
    }

    /// Tells a child watching a [`DoneSignal`] that this side is done.
    pub fn done(&mut self) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| bench_err!("the {} process was already told to stop", self.role))?;
        stdin
            .write_all(b"done\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| bench_err!("the {} process is gone: {e}", self.role))
    }

    /// Fails if the child has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(bench_err!(
                "the {} process exited early ({})",
                self.role,
                describe(status)
            )),
        }
    }

    /// Whether the child has exited.
    pub fn has_exited(&mut self) -> Result<bool> {
        Ok(self.child.try_wait()?.is_some())
    }

    /// Waits for the child to exit and returns what it printed; fails if it
    /// did not exit successfully.
    pub fn finish(mut self) -> Result<String> {
        drop(self.stdin.take());
        let mut out = String::new();
        if let Some(mut stdout) = self.stdout.take() {
            stdout.read_to_string(&mut out)?;
        }
        let status = self.child.wait()?;
        if status.success() {
            Ok(out)
        } else {
            Err(bench_err!(
                "the {} process failed ({})",
                self.role,
                describe(status)
            ))
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
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

/// Detects a dead peer or a stalled run from inside a spin loop.
///
/// [`Watchdog::idle`] is called once per empty poll; every 2^14 calls it
/// checks the peer (a `waitpid` in the parent, `getppid` in the child) and
/// the time since the last [`Watchdog::progress`]. The common path is a
/// counter increment.
pub struct Watchdog<'a> {
    peer: Option<&'a mut Peer>,
    wait: WaitStrategy,
    spins: u64,
    last_progress: Instant,
    stall: Duration,
    what: &'static str,
}

impl<'a> Watchdog<'a> {
    const CHECK_EVERY: u64 = 1 << 14;

    /// A watchdog over `peer` (the parent's view) or over the parent (the
    /// child's view, `peer == None`).
    pub fn new(
        peer: Option<&'a mut Peer>,
        wait: WaitStrategy,
        stall: Duration,
        what: &'static str,
    ) -> Self {
        Watchdog {
            peer,
            wait,
            spins: 0,
            last_progress: Instant::now(),
            stall,
            what,
        }
    }

    /// One empty poll: waits per the strategy, and now and then checks the
    /// peer and the clock.
    #[inline(always)]
    pub fn idle(&mut self) -> Result<()> {
        self.wait.wait();
        self.spins += 1;
        if self.spins % Self::CHECK_EVERY == 0 {
            self.check()
        } else {
            Ok(())
        }
    }

    /// Notes that the run moved forward (used only for stall detection;
    /// cheap enough to call once per message).
    #[inline(always)]
    pub fn progress(&mut self) {
        self.spins = 0;
    }

    #[cold]
    fn check(&mut self) -> Result<()> {
        match &mut self.peer {
            Some(peer) => peer.check_alive()?,
            None => {
                // SAFETY: getppid has no preconditions.
                if unsafe { libc::getppid() } == 1 {
                    return Err(bench_err!("the parent process exited"));
                }
            }
        }
        // `spins` restarts at 0 on progress, so this is the first check
        // since the last progress: restart the stall clock there.
        if self.spins == Self::CHECK_EVERY {
            self.last_progress = Instant::now();
        } else if self.last_progress.elapsed() > self.stall {
            return Err(bench_err!(
                "no progress for {:?} while {}; is the peer stuck? (MDBUS_BENCH_STALL_SECS)",
                self.stall,
                self.what
            ));
        }
        Ok(())
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

/// A latency histogram in nanoseconds, 1 ns to 100 s at 3 significant
/// digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// The percentiles the reports quote, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value recorded.
    pub max: u64,
}

impl Percentiles {
    /// Reads the percentiles from a histogram.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }

    /// As a JSON object.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "p50": self.p50, "p90": self.p90, "p99": self.p99, "p999": self.p999, "max": self.max,
        })
    }
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

/// Nanoseconds in a duration, saturating.
#[inline]
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
