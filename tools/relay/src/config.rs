//! The relay's configuration file (`config/relay.toml`): where the feed
//! comes from, the bus it is published on, how messages are routed to
//! streams, the optional MoldUDP64 pass-through, the counters file and the
//! polling thread.
//!
//! Every key has a default except the input's addresses or path. Unknown
//! keys are rejected and every value is checked at load time; an error
//! names the file, the key and what is allowed, as the bus's own
//! configuration does (`mdbus::config`), whose [`Config`] the `[bus]`
//! section is.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mdbus::error::ConfigError;
use mdbus::wait::WaitStrategy;
use mdbus::{Config, TransportKind};
use mdbus_feed::alpha::Stock;
use mdbus_feed::moldudp64::Session;
use mdbus_tool_support::duration as duration_str;
use serde::{Deserialize, Serialize};

use super::payload;

/// The whole relay configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Where the feed comes from.
    pub input: InputConfig,
    /// The bus the streams are published on (an mdbus configuration).
    #[serde(default = "default_bus")]
    pub bus: Config,
    /// Which stream each message goes to.
    #[serde(default)]
    pub routing: RoutingConfig,
    /// Optional MoldUDP64 re-publication of the arbitrated feed.
    #[serde(default)]
    pub passthrough: PassthroughConfig,
    /// The counters file and the periodic log line.
    #[serde(default)]
    pub counters: CountersConfig,
    /// Optional recording of what is relayed, for `mdbus-replay`.
    #[serde(default)]
    pub record: RecordConfig,
    /// The published streams' behaviour at the end of the input.
    #[serde(default)]
    pub output: OutputConfig,
    /// The polling thread.
    #[serde(default)]
    pub thread: ThreadConfig,
}

fn default_bus() -> Config {
    Config {
        transport: TransportKind::Shm,
        ..Config::default()
    }
}

/// What kind of input feeds the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputKind {
    /// MoldUDP64 over UDP multicast, lines A and B, live.
    Moldudp64,
    /// An ITCH BinaryFILE (2-byte length before each message).
    Binaryfile,
    /// A pcap or pcapng capture of MoldUDP64 datagrams.
    Pcap,
}

impl InputKind {
    /// The name used in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            InputKind::Moldudp64 => "moldudp64",
            InputKind::Binaryfile => "binaryfile",
            InputKind::Pcap => "pcap",
        }
    }
}

/// How a file input is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pace {
    /// As fast as the relay can go.
    #[default]
    None,
    /// At the recorded rate (capture timestamps; the ITCH timestamps of a
    /// BinaryFILE), divided by `speed`.
    Recorded,
}

/// `[input]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputConfig {
    /// `moldudp64`, `binaryfile` or `pcap`.
    pub kind: InputKind,
    /// Line A's multicast group and port.
    pub line_a: String,
    /// Line B's multicast group and port; empty for a single line.
    pub line_b: String,
    /// Local IPv4 address of the interface that joins line A.
    pub interface: String,
    /// Local IPv4 address of the interface that joins line B; empty: the
    /// same as line A's.
    pub interface_b: String,
    /// The upstream re-request server (unicast IPv4 address and port);
    /// empty: gaps are not requested and become unrecoverable after
    /// `arbiter.gap_wait`.
    pub rerequest: String,
    /// Expected MoldUDP64 session name; empty: the first one seen.
    pub session: String,
    /// First sequence number wanted: 0 starts at the first one seen (late
    /// join); 1 requests the whole session from the start.
    pub start_sequence: u64,
    /// Receive buffer of each line's socket, in bytes (`SO_RCVBUF`).
    pub recv_buffer: usize,
    /// The file of a `binaryfile` or `pcap` input.
    pub path: PathBuf,
    /// How a file is paced.
    pub pace: Pace,
    /// Speed-up of `pace = "recorded"`.
    pub speed: f64,
    /// Stop the relay once the end-of-session packet has been reached in
    /// sequence (live input); otherwise it keeps running and follows the
    /// next session.
    pub stop_at_end_of_session: bool,
    /// Arbitration and recovery settings.
    pub arbiter: ArbiterSettings,
}

impl Default for InputConfig {
    fn default() -> Self {
        InputConfig {
            kind: InputKind::Moldudp64,
            line_a: String::new(),
            line_b: String::new(),
            interface: String::new(),
            interface_b: String::new(),
            rerequest: String::new(),
            session: String::new(),
            start_sequence: 0,
            recv_buffer: 4 << 20,
            path: PathBuf::new(),
            pace: Pace::None,
            speed: 1.0,
            stop_at_end_of_session: false,
            arbiter: ArbiterSettings::default(),
        }
    }
}

/// `[input.arbiter]`: A/B arbitration and gap recovery.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArbiterSettings {
    /// Bytes kept for packets that arrive ahead of a gap.
    pub reorder_bytes: usize,
    /// Packets kept ahead of a gap.
    pub max_reorder_packets: usize,
    /// A request not answered within this is sent again.
    #[serde(with = "duration_str")]
    pub request_timeout: Duration,
    /// Requests for one gap before it is declared unrecoverable.
    pub max_retries: u32,
    /// Largest request, in messages; bigger gaps are split.
    pub max_request_messages: u16,
    /// Most requests per second.
    pub requests_per_second: u32,
    /// How long the other line may take to fill a gap before it is
    /// requested.
    #[serde(with = "duration_str")]
    pub gap_wait: Duration,
    /// A packet more than this many messages ahead of the next expected
    /// one is taken for damaged or forged and dropped (counted in
    /// `suspect_jumps`) until `confirm_packets` such packets, continuing
    /// one another on both lines while the genuine sequence stays silent
    /// for `confirm_quiet`, confirm the jump; 0: no limit.
    pub max_jump: u64,
    /// Packets that confirm another session or a far jump (continuing one
    /// another, at least half on each line that carried the session).
    pub confirm_packets: u32,
    /// How long the followed session must make no progress before such a
    /// change is believed.
    #[serde(with = "duration_str")]
    pub confirm_quiet: Duration,
}

impl Default for ArbiterSettings {
    fn default() -> Self {
        ArbiterSettings {
            reorder_bytes: 4 << 20,
            max_reorder_packets: 4096,
            request_timeout: Duration::from_millis(20),
            max_retries: 5,
            max_request_messages: 1000,
            requests_per_second: 1000,
            gap_wait: Duration::from_micros(200),
            max_jump: 10_000_000,
            confirm_packets: 64,
            confirm_quiet: Duration::from_secs(5),
        }
    }
}

/// How symbols are assigned to streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    /// Each `[[routing.streams]]` lists its symbols and symbol ranges.
    #[default]
    Lists,
    /// `hash_streams` streams; a symbol's stream is a stable hash of it.
    Hash,
}

/// Where system-wide messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SystemRoute {
    /// To every stream.
    #[default]
    All,
    /// To the control stream only.
    Control,
}

/// What happens to a message whose stock locate no Stock Directory
/// message has named (and that carries no symbol to learn it from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownRoute {
    /// To the control stream.
    #[default]
    Control,
    /// Dropped (and counted).
    Drop,
}

/// `[routing]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// `lists` or `hash`.
    pub mode: RoutingMode,
    /// Where system-wide messages go: `all` or `control`.
    pub system: SystemRoute,
    /// Name of the control stream; empty for none.
    pub control: String,
    /// Messages of a locate not yet named: `control` or `drop`.
    pub unknown: UnknownRoute,
    /// `lists`: the stream of symbols no list claims; empty drops them
    /// (counted).
    pub default: String,
    /// `hash`: number of streams.
    pub hash_streams: u16,
    /// `hash`: stream names are this prefix, a dash and the partition
    /// number (`md-0`, `md-1`...).
    pub hash_prefix: String,
    /// `lists`: the streams.
    pub streams: Vec<StreamRoute>,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            mode: RoutingMode::Lists,
            system: SystemRoute::All,
            control: String::new(),
            unknown: UnknownRoute::Control,
            default: "md".into(),
            hash_streams: 4,
            hash_prefix: "md".into(),
            streams: Vec::new(),
        }
    }
}

/// One `[[routing.streams]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StreamRoute {
    /// The stream's name on the bus.
    pub name: String,
    /// Symbols, exactly.
    #[serde(default)]
    pub symbols: Vec<String>,
    /// Symbol ranges `[first, last]`, inclusive, compared on the first
    /// `len(last)` characters: `["A", "F"]` holds every symbol from `A` up
    /// to and including those starting with `F`.
    #[serde(default)]
    pub ranges: Vec<[String; 2]>,
}

/// `[passthrough]`: MoldUDP64 out, for consumers that speak it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PassthroughConfig {
    /// Re-publish the arbitrated feed as MoldUDP64.
    pub enabled: bool,
    /// Multicast group and port to send to.
    pub group: String,
    /// Local IPv4 address of the sending interface; empty: the system's
    /// choice.
    pub interface: String,
    /// Multicast time-to-live.
    pub ttl: u32,
    /// Deliver to receivers on this host too.
    pub loopback: bool,
    /// Largest packet, in bytes.
    pub max_packet: usize,
    /// A heartbeat is sent after this much silence.
    #[serde(with = "duration_str")]
    pub heartbeat_interval: Duration,
}

impl Default for PassthroughConfig {
    fn default() -> Self {
        PassthroughConfig {
            enabled: false,
            group: String::new(),
            interface: String::new(),
            ttl: 1,
            loopback: true,
            max_packet: 1400,
            heartbeat_interval: Duration::from_secs(1),
        }
    }
}

/// `[counters]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CountersConfig {
    /// The counters file `mdbus-stat` reads; empty: none.
    pub path: PathBuf,
    /// How often the counters file is refreshed.
    #[serde(with = "duration_str")]
    pub refresh: Duration,
    /// How often a counters line is logged; `0s`: never.
    #[serde(with = "duration_str")]
    pub log_interval: Duration,
}

impl Default for CountersConfig {
    fn default() -> Self {
        CountersConfig {
            path: PathBuf::from("/dev/shm/mdbus-relay.counters"),
            refresh: Duration::from_millis(100),
            log_interval: Duration::from_secs(1),
        }
    }
}

/// `[record]`: every message the relay routes, in sequence order, with the
/// arrival time of its datagram and its MoldUDP64 sequence number, written
/// to an `.mdcap` file that `mdbus-replay run` replays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordConfig {
    /// The `.mdcap` file to write (replaced if it exists); empty: no
    /// recording. Recording copies each message into a 64 KiB buffer on the
    /// polling thread and writes the buffer out when it fills.
    pub path: PathBuf,
}

/// `[output]`: the end of the published streams.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// When the input ends (end of file, or end of session with
    /// `input.stop_at_end_of_session`), keep answering retransmit requests
    /// on UDP and verbs streams this long before closing them, so
    /// subscribers that lost the last datagrams can still recover them.
    #[serde(with = "duration_str")]
    pub linger: Duration,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            linger: Duration::from_secs(1),
        }
    }
}

/// `[thread]`: the polling thread.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadConfig {
    /// Pin the polling thread.
    pub pin: bool,
    /// The core to pin to; -1: a core of `device`'s NUMA node (or any
    /// online core when it has none).
    pub core: i64,
    /// The network device (as in `ip link`) whose NUMA node the core
    /// comes from; empty: none.
    pub device: String,
    /// What the loop does when nothing arrived: `busy-spin`, `spin-hint`
    /// or `yield`.
    pub idle: WaitStrategy,
}

impl Default for ThreadConfig {
    fn default() -> Self {
        ThreadConfig {
            pin: true,
            core: -1,
            device: String::new(),
            idle: WaitStrategy::default(),
        }
    }
}

/// The live input's addresses, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveAddresses {
    /// Line A's group.
    pub line_a: SocketAddrV4,
    /// Line B's group, if any.
    pub line_b: Option<SocketAddrV4>,
    /// Interface of line A.
    pub interface_a: Ipv4Addr,
    /// Interface of line B.
    pub interface_b: Ipv4Addr,
    /// The re-request server, if any.
    pub rerequest: Option<SocketAddrV4>,
    /// The expected session, if any.
    pub session: Option<Session>,
}

impl RelayConfig {
    /// Reads and checks a TOML file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<RelayConfig, ConfigError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = mdbus::config::read_config_text(path).map_err(|e| cerr(&name, "(file)", e))?;
        RelayConfig::from_toml_str(&text, &name)
    }

    /// Parses and checks TOML text; `source_name` names it in errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<RelayConfig, ConfigError> {
        let cfg: RelayConfig = toml::from_str(text).map_err(|e| {
            let key = e
                .span()
                .map(|s| format!("line {}", 1 + text[..s.start].matches('\n').count()))
                .unwrap_or_else(|| "(document)".into());
            cerr(source_name, key, e.message().trim().to_string())
        })?;
        cfg.validate(source_name)?;
        Ok(cfg)
    }

    /// Checks every value; an error names the key and what is allowed.
    pub fn validate(&self, src: &str) -> Result<(), ConfigError> {
        self.bus
            .validate(src)
            .map_err(|e| cerr(src, format!("bus.{}", e.key), e.message))?;
        if self.bus.transport == TransportKind::Tcp {
            return Err(cerr(
                src,
                "bus.transport",
                "tcp carries sessions, not streams: use shm, udp or verbs",
            ));
        }
        self.validate_input(src)?;
        self.validate_routing(src)?;
        self.validate_passthrough(src)?;
        if self.counters.refresh.is_zero() {
            return Err(cerr(
                src,
                "counters.refresh",
                "0s is not allowed: at least 1ms",
            ));
        }
        if self.thread.core < -1 {
            return Err(cerr(
                src,
                "thread.core",
                format!(
                    "{} is not a core: -1 (automatic) or a core number",
                    self.thread.core
                ),
            ));
        }
        for name in self.stream_names() {
            let s = self.bus.stream(&name);
            if s.max_message < payload::MAX_LEN {
                return Err(cerr(
                    src,
                    format!("bus.streams.{name}.max_message"),
                    format!(
                        "{} is too small: a relayed message takes up to {} bytes",
                        s.max_message,
                        payload::MAX_LEN
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_input(&self, src: &str) -> Result<(), ConfigError> {
        let i = &self.input;
        match i.kind {
            InputKind::Moldudp64 => {
                self.live_addresses(src)?;
            }
            InputKind::Binaryfile | InputKind::Pcap => {
                if i.path.as_os_str().is_empty() {
                    return Err(cerr(
                        src,
                        "input.path",
                        format!("must be set for input kind {}", i.kind.name()),
                    ));
                }
            }
        }
        if !(i.speed.is_finite() && i.speed > 0.0) {
            return Err(cerr(
                src,
                "input.speed",
                format!(
                    "{} is not allowed: a positive number such as 1.0 or 10",
                    i.speed
                ),
            ));
        }
        if !(64 << 10..=1 << 30).contains(&i.recv_buffer) {
            return Err(cerr(
                src,
                "input.recv_buffer",
                format!(
                    "{} is out of range: 65536 to 1073741824 bytes",
                    i.recv_buffer
                ),
            ));
        }
        let a = &i.arbiter;
        for (key, v) in [
            ("input.arbiter.max_retries", a.max_retries as u64),
            (
                "input.arbiter.max_request_messages",
                a.max_request_messages as u64,
            ),
            (
                "input.arbiter.requests_per_second",
                a.requests_per_second as u64,
            ),
            (
                "input.arbiter.max_reorder_packets",
                a.max_reorder_packets as u64,
            ),
            (
                "input.arbiter.confirm_packets",
                u64::from(a.confirm_packets),
            ),
        ] {
            if v == 0 {
                return Err(cerr(src, key, "0 is not allowed: at least 1"));
            }
        }
        if a.reorder_bytes < 64 << 10 {
            return Err(cerr(
                src,
                "input.arbiter.reorder_bytes",
                format!("{} is too small: at least 65536 bytes", a.reorder_bytes),
            ));
        }
        // Allocated whole at start: checked before, not aborted on.
        self.bus.limits.check(
            src,
            "input.arbiter.reorder_bytes",
            "a reorder store",
            a.reorder_bytes as u64,
        )?;
        if a.request_timeout.is_zero() {
            return Err(cerr(
                src,
                "input.arbiter.request_timeout",
                "0s is not allowed: at least 1ms",
            ));
        }
        Ok(())
    }

    /// The live input's addresses, checked (`input.kind = "moldudp64"`).
    pub fn live_addresses(&self, src: &str) -> Result<LiveAddresses, ConfigError> {
        let i = &self.input;
        let group = |key: &str, v: &str| -> Result<SocketAddrV4, ConfigError> {
            match v.parse::<SocketAddrV4>() {
                Ok(a) if a.ip().is_multicast() && a.port() != 0 => Ok(a),
                _ if v.is_empty() => Err(cerr(
                    src,
                    key,
                    "must be set for input kind moldudp64: a multicast group and port such as 239.192.10.1:26400",
                )),
                _ => Err(cerr(
                    src,
                    key,
                    format!("`{v}` is not an IPv4 multicast group and port such as 239.192.10.1:26400"),
                )),
            }
        };
        let addr = |key: &str, v: &str, default: Ipv4Addr| -> Result<Ipv4Addr, ConfigError> {
            if v.is_empty() {
                return Ok(default);
            }
            v.parse().map_err(|_| {
                cerr(
                    src,
                    key,
                    format!("`{v}` is not a local IPv4 address such as 10.0.0.1"),
                )
            })
        };
        let line_a = group("input.line_a", &i.line_a)?;
        let line_b = if i.line_b.is_empty() {
            None
        } else {
            Some(group("input.line_b", &i.line_b)?)
        };
        let interface_a = addr("input.interface", &i.interface, Ipv4Addr::UNSPECIFIED)?;
        let interface_b = addr("input.interface_b", &i.interface_b, interface_a)?;
        let rerequest = if i.rerequest.is_empty() {
            None
        } else {
            match i.rerequest.parse::<SocketAddrV4>() {
                Ok(a) if !a.ip().is_multicast() && !a.ip().is_unspecified() && a.port() != 0 => {
                    Some(a)
                }
                _ => {
                    return Err(cerr(
                        src,
                        "input.rerequest",
                        format!(
                            "`{}` is not a unicast IPv4 address and port such as 10.0.0.5:26410",
                            i.rerequest
                        ),
                    ))
                }
            }
        };
        let session = if i.session.is_empty() {
            None
        } else {
            Some(Session::new(&i.session).map_err(|_| {
                cerr(
                    src,
                    "input.session",
                    format!(
                        "`{}` is not a session name: 1 to 10 printable ASCII characters",
                        i.session
                    ),
                )
            })?)
        };
        Ok(LiveAddresses {
            line_a,
            line_b,
            interface_a,
            interface_b,
            rerequest,
            session,
        })
    }

    fn validate_routing(&self, src: &str) -> Result<(), ConfigError> {
        let r = &self.routing;
        let check_name = |key: &str, name: &str| -> Result<(), ConfigError> {
            mdbus::names::check(name).map_err(|_| {
                cerr(
                    src,
                    key,
                    format!(
                        "`{name}` is not a stream name: 1 to 64 characters from A-Z a-z 0-9 . _ -"
                    ),
                )
            })
        };
        if !r.control.is_empty() {
            check_name("routing.control", &r.control)?;
        }
        let needs_control = r.system == SystemRoute::Control || r.unknown == UnknownRoute::Control;
        if r.control.is_empty() && r.system == SystemRoute::Control {
            return Err(cerr(
                src,
                "routing.control",
                "must name a stream when routing.system = \"control\"",
            ));
        }
        let _ = needs_control;
        match r.mode {
            RoutingMode::Hash => {
                if r.hash_streams == 0 || r.hash_streams > 1024 {
                    return Err(cerr(
                        src,
                        "routing.hash_streams",
                        format!("{} is out of range: 1 to 1024", r.hash_streams),
                    ));
                }
                check_name("routing.hash_prefix", &format!("{}-0", r.hash_prefix))?;
                if !r.streams.is_empty() {
                    return Err(cerr(
                        src,
                        "routing.streams",
                        "mode = \"hash\" names its streams itself: remove [[routing.streams]] or use mode = \"lists\"",
                    ));
                }
            }
            RoutingMode::Lists => {
                if !r.default.is_empty() {
                    check_name("routing.default", &r.default)?;
                }
                if r.streams.is_empty() && r.default.is_empty() {
                    return Err(cerr(
                        src,
                        "routing.streams",
                        "no stream: add a [[routing.streams]] entry or set routing.default",
                    ));
                }
                let mut seen = std::collections::BTreeSet::new();
                for (n, s) in r.streams.iter().enumerate() {
                    let key = format!("routing.streams[{n}]");
                    check_name(&format!("{key}.name"), &s.name)?;
                    if !seen.insert(s.name.as_str()) {
                        return Err(cerr(
                            src,
                            format!("{key}.name"),
                            format!(
                                "stream `{}` is listed twice: merge its symbols into one entry",
                                s.name
                            ),
                        ));
                    }
                    if s.symbols.is_empty() && s.ranges.is_empty() {
                        return Err(cerr(
                            src,
                            key,
                            format!("stream `{}` has neither symbols nor ranges", s.name),
                        ));
                    }
                    for sym in &s.symbols {
                        parse_symbol(sym).ok_or_else(|| {
                            cerr(
                                src,
                                format!("{key}.symbols"),
                                format!("`{sym}` is not a symbol: 1 to 8 characters A-Z 0-9 . - and space"),
                            )
                        })?;
                    }
                    for [lo, hi] in &s.ranges {
                        let (Some(_), Some(_)) = (parse_symbol(lo), parse_symbol(hi)) else {
                            return Err(cerr(
                                src,
                                format!("{key}.ranges"),
                                format!("[\"{lo}\", \"{hi}\"] is not a range of symbols: each end 1 to 8 characters"),
                            ));
                        };
                        let hi_prefix = &lo.as_bytes()[..lo.len().min(hi.len())];
                        if hi_prefix > hi.as_bytes() {
                            return Err(cerr(
                                src,
                                format!("{key}.ranges"),
                                format!("[\"{lo}\", \"{hi}\"] runs backwards: the first symbol must come before the last"),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn validate_passthrough(&self, src: &str) -> Result<(), ConfigError> {
        let p = &self.passthrough;
        if !p.enabled {
            return Ok(());
        }
        match p.group.parse::<SocketAddrV4>() {
            Ok(a) if a.ip().is_multicast() && a.port() != 0 => {}
            _ => {
                return Err(cerr(
                    src,
                    "passthrough.group",
                    format!(
                        "`{}` is not an IPv4 multicast group and port such as 239.192.20.1:26400",
                        p.group
                    ),
                ))
            }
        }
        if !p.interface.is_empty() && p.interface.parse::<Ipv4Addr>().is_err() {
            return Err(cerr(
                src,
                "passthrough.interface",
                format!(
                    "`{}` is not a local IPv4 address such as 10.0.0.1",
                    p.interface
                ),
            ));
        }
        if !(128..=65_000).contains(&p.max_packet) {
            return Err(cerr(
                src,
                "passthrough.max_packet",
                format!("{} is out of range: 128 to 65000 bytes", p.max_packet),
            ));
        }
        Ok(())
    }

    /// The stream names this configuration publishes, in routing order
    /// (lists: the listed streams, then the default and control streams;
    /// hash: the partitions, then the control stream).
    pub fn stream_names(&self) -> Vec<String> {
        let r = &self.routing;
        let mut names: Vec<String> = match r.mode {
            RoutingMode::Lists => {
                let mut v: Vec<String> = r.streams.iter().map(|s| s.name.clone()).collect();
                if !r.default.is_empty() {
                    v.push(r.default.clone());
                }
                v
            }
            RoutingMode::Hash => (0..r.hash_streams)
                .map(|i| format!("{}-{i}", r.hash_prefix))
                .collect(),
        };
        if !r.control.is_empty() {
            names.push(r.control.clone());
        }
        let mut seen = std::collections::BTreeSet::new();
        names.retain(|n| seen.insert(n.clone()));
        names
    }
}

/// A symbol as the feed writes it (8 bytes, space-padded), if `s` can be
/// one.
pub fn parse_symbol(s: &str) -> Option<Stock> {
    let ok = !s.trim().is_empty()
        && s.len() <= 8
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b" .-*+=^".contains(&b));
    if ok {
        Stock::new(s).ok()
    } else {
        None
    }
}

fn cerr(src: &str, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        source_name: src.into(),
        key: key.into(),
        message: message.into(),
    }
}
