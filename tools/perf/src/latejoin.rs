//! `mdbus-perf latejoin`: a subscriber that joins a running stream late
//! and asks for everything from sequence 1 gets the whole stream exactly
//! once, in order: the archive's range, then the live stream
//! (docs/ARCHIVE.md).
//!
//! One process: a publisher thread publishes --messages at a steady
//! --rate with the stream recorded (a `mdbus::archive::Recorder` on its
//! own thread); when --join-at of them are out, a subscriber with
//! `mdbus::archive::subscribe_from(.., 1)` starts and counts what it gets
//! while the publisher goes on.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use mdbus::archive::{subscribe_from, Recorder, ReplayStats};
use mdbus::{Bus, Config, Event, TransportKind};
use mdbus_tool_support::output::{json_object, EXIT_DATA_LOST, EXIT_FAILED, EXIT_USAGE};

/// Options of `latejoin`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Transport of the stream: shm, udp or verbs (RDMA UD multicast: the
    /// publisher on --device or --interface, the recorder and the late
    /// subscriber on --recv-device or --recv-interface). Default: verbs
    /// when -d/--device or -x/--gid-index is given, else shm.
    #[arg(long = "transport", value_parser = crate::args::parse_transport)]
    pub transport_arg: Option<TransportKind>,
    /// --transport resolved (set by [`main`]).
    #[arg(skip)]
    pub transport: TransportKind,
    /// verbs: RDMA device of the publisher (rxe0, mlx5_0), as perftest's
    /// -d; it binds the device's IPv4 address (the IPv4-mapped GID at
    /// -x/--gid-index, or the first one). Default: the first device with
    /// an active port.
    #[arg(short = 'd', long, value_name = "DEVICE")]
    pub device: Option<String>,
    /// verbs: GID table index whose IPv4-mapped address each side binds,
    /// as perftest's -x. Default: the first IPv4-mapped GID of the port.
    #[arg(short = 'x', long, value_name = "N",
          value_parser = clap::value_parser!(i32).range(0..))]
    pub gid_index: Option<i32>,
    /// verbs: RDMA device of the recorder and the late subscriber (e.g.
    /// rxe1, with the publisher on -d rxe0). Default: the publisher's.
    #[arg(long, value_name = "DEVICE")]
    pub recv_device: Option<String>,
    /// udp: local IPv4 address that sends and joins the group (default
    /// 127.0.0.1, time-to-live 0); verbs: the address the publisher binds,
    /// instead of --device's.
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<std::net::Ipv4Addr>,
    /// verbs: the address the recorder and the late subscriber bind,
    /// instead of --recv-device's.
    #[arg(long, value_name = "ADDR")]
    pub recv_interface: Option<std::net::Ipv4Addr>,
    /// Messages published.
    #[arg(long, short = 'n', default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: u64,
    /// Share of the messages published before the subscriber joins.
    #[arg(long, default_value_t = 0.8)]
    pub join_at: f64,
    /// Messages per second the publisher sends.
    #[arg(long, default_value_t = 500_000)]
    pub rate: u64,
    /// Payload bytes (at least 8: the sequence, checked on receipt).
    #[arg(long, short = 's', default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(8..=1024))]
    pub size: u64,
    /// The stream's ring / retained window, in messages (a power of two).
    #[arg(long, default_value_t = 65_536)]
    pub capacity: u64,
    /// Directory of the archive (emptied first); default: a new one under
    /// the system's temporary directory, removed afterwards.
    #[arg(long)]
    pub archive_dir: Option<PathBuf>,
    /// Multicast group and port of the udp stream.
    #[arg(long, default_value = "239.255.77.1:47000", value_parser = crate::args::parse_group)]
    pub group: std::net::SocketAddrV4,
    /// Give up when the subscriber has not got everything this long after
    /// the last message was published.
    #[arg(long, default_value = "60s", value_parser = mdbus_tool_support::duration::parse)]
    pub timeout: Duration,
    /// Print one JSON object (docs/JSON.md) instead of a line of text.
    #[arg(long)]
    pub json: bool,
    /// Exit 0 even when a message was lost, duplicated or out of order.
    #[arg(long)]
    pub allow_loss: bool,
}

/// What the late subscriber got.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Messages published before the subscriber started.
    pub join_seq: u64,
    /// Messages it received.
    pub received: u64,
    /// Messages it received twice.
    pub duplicates: u64,
    /// Gap or overrun events.
    pub gaps: u64,
    /// Messages that came after a later one.
    pub out_of_order: u64,
    /// From its start to its switch to the live stream (or, when it never
    /// needed to, to its last message).
    pub catchup: Duration,
    /// Its replay counters.
    pub replay: ReplayStats,
    /// Bytes of the archive on disk at the end.
    pub archive_bytes: u64,
    /// Messages the recorder lost to overruns (the archive records them
    /// as gaps).
    pub recorder_lost: u64,
    /// The recorder's counters at the end (its hand-off's high-water mark
    /// and full waits, its subscriber's recovery).
    pub recorder: mdbus::archive::RecorderStats,
    /// The publisher's recovery counters (datagram transports).
    pub publisher: Option<mdbus::recovery::Counters>,
}

impl Outcome {
    fn lost(&self, messages: u64) -> Option<String> {
        let bad = self.received != messages
            || self.duplicates != 0
            || self.gaps != 0
            || self.out_of_order != 0;
        bad.then(|| {
            format!(
                "the late subscriber got {} of {messages} messages ({} duplicates, {} gaps, {} out of order)",
                self.received, self.duplicates, self.gaps, self.out_of_order
            )
        })
    }
}

/// Where one side of the run sits: the RDMA device (verbs) and the
/// address its stream binds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Side {
    device: Option<String>,
    interface: String,
}

/// The publisher's side and the receiving side (the recorder's and the
/// late subscriber's); equal when both are on one bus.
fn sides(a: &Args) -> Result<(Side, Side), String> {
    if a.transport != TransportKind::Verbs {
        let interface = a.interface.map_or("127.0.0.1".into(), |i| i.to_string());
        let side = Side {
            device: None,
            interface,
        };
        return Ok((side.clone(), side));
    }
    let port = mdbus::config::VerbsConfig::default().port;
    let side = |explicit: Option<std::net::Ipv4Addr>, device: Option<&String>| {
        let device = match device {
            Some(d) => d.clone(),
            None => {
                mdbus::transport::verbs::detect(&mdbus::config::VerbsConfig::default())
                    .map_err(|why| format!("no RDMA device: {why}"))?
                    .device
            }
        };
        let interface = match explicit {
            Some(i) => i,
            None => crate::verbs::device_ipv4(&device, port, a.gid_index.unwrap_or(-1))
                .map_err(|e| e.to_string())?,
        };
        Ok::<_, String>(Side {
            device: Some(device),
            interface: interface.to_string(),
        })
    };
    let publisher = side(a.interface, a.device.as_ref())?;
    let receiving = if a.recv_device.is_none() && a.recv_interface.is_none() {
        publisher.clone()
    } else {
        side(
            a.recv_interface,
            a.recv_device.as_ref().or(a.device.as_ref()),
        )?
    };
    Ok((publisher, receiving))
}

fn config(a: &Args, dir: &std::path::Path, side: &Side) -> Result<Config, String> {
    let mut toml = format!("transport = \"{}\"\n", a.transport.name());
    if let Some(device) = &side.device {
        toml.push_str(&format!("[verbs]\ndevice = \"{device}\"\n"));
    }
    toml.push_str(&format!(
        "[shm]\nprefix = \"mdbus-latejoin-{}\"\n[counters]\nenabled = false\n[streams.latejoin]\ncapacity = {}\nmax_message = {}\n",
        std::process::id(),
        a.capacity,
        a.size.max(16)
    ));
    if a.transport != TransportKind::Shm {
        toml.push_str(&format!(
            "group = \"{}\"\ninterface = \"{}\"\nttl = 0\nheartbeat_interval = \"20ms\"\nheartbeat_timeout = \"2s\"\n",
            a.group, side.interface
        ));
    }
    toml.push_str(&format!(
        "[streams.latejoin.archive]\ndir = \"{}\"\nsegment_bytes = 67108864\n",
        dir.display()
    ));
    Config::from_toml_str(&toml, "<latejoin>").map_err(|e| e.to_string())
}

fn payload(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
}

/// Fails on options the run's transport does not take.
fn check_options(a: &Args) -> Result<(), String> {
    if !(0.0..=1.0).contains(&a.join_at) || !a.capacity.is_power_of_two() {
        return Err("--join-at is a share from 0 to 1 and --capacity a power of two".into());
    }
    if !matches!(
        a.transport,
        TransportKind::Shm | TransportKind::Udp | TransportKind::Verbs
    ) {
        return Err(format!(
            "--transport {} is not one latejoin runs on: shm, udp or verbs",
            a.transport.name()
        ));
    }
    let verbs_only = [
        ("--device", a.device.is_some()),
        ("--gid-index", a.gid_index.is_some()),
        ("--recv-device", a.recv_device.is_some()),
        ("--recv-interface", a.recv_interface.is_some()),
    ];
    if a.transport != TransportKind::Verbs {
        if let Some((flag, _)) = verbs_only.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{flag} applies to --transport verbs only, not {}",
                a.transport.name()
            ));
        }
    }
    if a.transport == TransportKind::Shm && a.interface.is_some() {
        return Err("--interface applies to --transport udp and verbs, not shm".into());
    }
    Ok(())
}

/// Runs the measurement.
pub fn measure(a: &Args) -> Result<Outcome, String> {
    let own_dir = a.archive_dir.is_none();
    let dir = a.archive_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("mdbus-latejoin-{}", std::process::id()))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let (pub_side, rx_side) = sides(a)?;
    let pub_bus = Bus::new(config(a, &dir, &pub_side)?).map_err(|e| e.to_string())?;
    // verbs with another receiving device: the recorder and the late
    // subscriber on a bus of their own, as on another host.
    let rx_bus = if rx_side != pub_side {
        Some(Bus::new(config(a, &dir, &rx_side)?).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let bus = rx_bus.as_ref().unwrap_or(&pub_bus);
    let mut publisher = pub_bus.publisher("latejoin").map_err(|e| e.to_string())?;
    let recorder = Recorder::start(bus, "latejoin").map_err(|e| e.to_string())?;
    let n = a.messages;
    let join_at = ((n as f64 * a.join_at) as u64).clamp(1, n);
    let published = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let failed = std::sync::Mutex::new(None::<String>);
    let publisher_counters = std::sync::Mutex::new(None);
    let interval_ns = 1_000_000_000 / a.rate.max(1);
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; a.size as usize];
            let start = Instant::now();
            for seq in 1..=n {
                // Steady pacing: message `seq` leaves at its slot, and the
                // publisher's duties (retransmit requests, heartbeats) are
                // done while it waits, and at least once per message: a
                // publisher behind its pace (an emulated CPU) must still
                // answer the subscribers' requests.
                let due = Duration::from_nanos(interval_ns * (seq - 1));
                loop {
                    if let Err(e) = publisher.service() {
                        *failed.lock().unwrap() = Some(e.to_string());
                    }
                    if start.elapsed() >= due {
                        break;
                    }
                    std::hint::spin_loop();
                }
                payload(&mut buf, seq);
                if let Err(e) = publisher.publish(&buf) {
                    *failed.lock().unwrap() = Some(e.to_string());
                    break;
                }
                published.store(seq, Ordering::Release);
            }
            while !done.load(Ordering::Acquire) {
                let _ = publisher.service();
                std::thread::yield_now();
            }
            *publisher_counters.lock().unwrap() = publisher.recovery_counters();
        });
        let r = subscribe(a, bus, join_at, &published);
        done.store(true, Ordering::Release);
        r
    });
    if let Some(e) = failed.into_inner().unwrap_or(None) {
        return Err(format!("publisher: {e}"));
    }
    let pub_recovery = publisher_counters.into_inner().unwrap_or(None);
    let st = recorder.stop();
    if let Some(e) = st.error {
        return Err(format!("recorder: {e}"));
    }
    let mut out = out?;
    out.recorder_lost = st.overrun_messages + st.gap_messages;
    out.recorder = st;
    out.publisher = pub_recovery;
    out.archive_bytes = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    if own_dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(out)
}

fn subscribe(a: &Args, bus: &Bus, join_at: u64, published: &AtomicU64) -> Result<Outcome, String> {
    let n = a.messages;
    while published.load(Ordering::Acquire) < join_at {
        std::thread::yield_now();
    }
    let mut out = Outcome {
        join_seq: published.load(Ordering::Acquire),
        ..Outcome::default()
    };
    let start = Instant::now();
    let mut sub = subscribe_from(bus, "latejoin", 1).map_err(|e| e.to_string())?;
    let mut next = 1u64;
    let mut last_progress = Instant::now();
    let mut caught_up = None;
    while next <= n {
        let got = sub
            .poll(|e| match e {
                Event::Message(m) => {
                    out.received += 1;
                    let p = m.payload();
                    let seq = u64::from_le_bytes(p[..8].try_into().unwrap_or([0; 8]));
                    if seq != m.seq() {
                        out.out_of_order += 1;
                    }
                    if m.seq() < next {
                        out.duplicates += 1;
                    } else {
                        if m.seq() > next {
                            out.out_of_order += 1;
                        }
                        next = m.seq() + 1;
                    }
                }
                Event::Gap { to, .. } | Event::Overrun { to, .. } => {
                    out.gaps += 1;
                    next = next.max(to);
                }
                _ => {}
            })
            .map_err(|e| e.to_string())?;
        if caught_up.is_none() && sub.replay_stats().is_some_and(|r| r.merge_seq != 0) {
            caught_up = Some(start.elapsed());
        }
        if got > 0 {
            last_progress = Instant::now();
        } else if published.load(Ordering::Acquire) == n && last_progress.elapsed() > a.timeout {
            break;
        }
    }
    out.catchup = caught_up.unwrap_or_else(|| start.elapsed());
    out.replay = sub.replay_stats().unwrap_or_default();
    Ok(out)
}

/// The JSON object of a run.
pub fn object(a: &Args, o: &Outcome) -> serde_json::Value {
    let mut m = json_object("mdbus-perf");
    m.insert("mode".into(), "latejoin".into());
    m.insert("transport".into(), a.transport.name().into());
    m.insert("messages".into(), a.messages.into());
    m.insert("received".into(), o.received.into());
    m.insert("duplicates".into(), o.duplicates.into());
    m.insert("gaps".into(), o.gaps.into());
    m.insert("out_of_order".into(), o.out_of_order.into());
    m.insert(
        "catchup_ms".into(),
        ((o.catchup.as_secs_f64() * 1e6).round() / 1e3).into(),
    );
    m.insert("merge_seq".into(), o.replay.merge_seq.into());
    m.insert("join_seq".into(), o.join_seq.into());
    m.insert("replayed".into(), o.replay.replayed.into());
    m.insert("live_skipped".into(), o.replay.live_skipped.into());
    m.insert("rejoins".into(), o.replay.rejoins.into());
    m.insert("rate_msgs_per_sec".into(), a.rate.into());
    m.insert("size_bytes".into(), a.size.into());
    m.insert("archive_bytes".into(), o.archive_bytes.into());
    m.insert("recorder_lost".into(), o.recorder_lost.into());
    let r = &o.recorder;
    m.insert(
        "recorder_handoff_high_water".into(),
        r.handoff_high_water.into(),
    );
    m.insert("recorder_handoff_full".into(), r.handoff_full.into());
    // Recovery on the datagram transports: what the recorder's subscriber
    // asked for and got back, and what the publisher answered.
    if let Some(c) = r.recovery {
        m.insert("recorder_requests_sent".into(), c.requests_sent.into());
        m.insert("recorder_recovered".into(), c.recovered.into());
        m.insert("recorder_unrecoverable".into(), c.unrecoverable.into());
        m.insert(
            "recorder_not_available".into(),
            c.not_available_received.into(),
        );
        m.insert("recorder_throttled".into(), c.throttled.into());
    }
    if let Some(c) = o.publisher {
        // Everything its lines received (requests; its own multicast too
        // where a device left a line attached), what it sent, and what was
        // dropped.
        m.insert(
            "publisher_datagrams_received".into(),
            c.datagrams_received.into(),
        );
        m.insert("publisher_datagrams_sent".into(), c.datagrams_sent.into());
        m.insert("publisher_drops".into(), c.drops.total().into());
        m.insert(
            "publisher_requests_received".into(),
            c.requests_received.into(),
        );
        m.insert("publisher_retransmitted".into(), c.retransmitted.into());
        m.insert(
            "publisher_not_available_sent".into(),
            c.not_available_sent.into(),
        );
        m.insert(
            "publisher_retransmit_throttled".into(),
            c.retransmit_throttled.into(),
        );
    }
    serde_json::Value::Object(m)
}

/// Runs `latejoin`.
pub fn main(a: &Args) -> ExitCode {
    let mut a = a.clone();
    a.transport = match a.transport_arg {
        Some(t) => t,
        None if a.device.is_some() || a.gid_index.is_some() => TransportKind::Verbs,
        None => TransportKind::Shm,
    };
    let a = &a;
    if let Err(e) = check_options(a) {
        eprintln!("mdbus-perf latejoin: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let o = match measure(a) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mdbus-perf latejoin: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    if a.json {
        mdbus_tool_support::output::print_json(&object(a, &o));
    } else {
        println!(
            "{} messages on {}, joined at {}: received {} (duplicates {}, gaps {}, out of order {}); caught up in {:.1} ms, live from sequence {} ({} replayed)",
            a.messages,
            a.transport.name(),
            o.join_seq,
            o.received,
            o.duplicates,
            o.gaps,
            o.out_of_order,
            o.catchup.as_secs_f64() * 1e3,
            o.replay.merge_seq,
            o.replay.replayed
        );
    }
    match mdbus_tool_support::output::completed(o.lost(a.messages).as_deref(), a.allow_loss) {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_DATA_LOST),
    }
}
