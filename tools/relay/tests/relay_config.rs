//! config/relay.toml parses and says what it says; wrong configurations
//! are refused with the file, the key and what is allowed.

use mdbus_relay::config::{InputKind, RoutingMode, SystemRoute};
use mdbus_relay::RelayConfig;

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/relay.toml")
}

#[test]
fn the_checked_in_example_parses() {
    let c = RelayConfig::from_file(example()).unwrap();
    assert_eq!(c.input.kind, InputKind::Moldudp64);
    assert_eq!(c.input.start_sequence, 1);
    assert_eq!(c.bus.transport, mdbus::TransportKind::Shm);
    assert_eq!(c.routing.mode, RoutingMode::Lists);
    assert_eq!(c.routing.system, SystemRoute::All);
    assert_eq!(c.stream_names(), ["md-1", "md-2", "md-other", "ctl"]);
    let a = c.live_addresses("relay.toml").unwrap();
    assert_eq!(a.line_a.to_string(), "239.192.10.1:26400");
    assert_eq!(a.line_b.unwrap().to_string(), "239.192.10.2:26400");
    assert_eq!(a.rerequest.unwrap().to_string(), "127.0.0.1:26410");
    assert_eq!(c.input.arbiter.request_timeout.as_millis(), 20);
    assert_eq!(c.input.arbiter.confirm_packets, 64);
    assert_eq!(c.input.arbiter.confirm_quiet.as_secs(), 5);
    assert!(!c.passthrough.enabled);
    assert_eq!(
        c.counters.path.to_str(),
        Some("/dev/shm/mdbus-relay.counters")
    );
}

/// Every key of every section is written out in the example, so the
/// file documents them all: its sections parse into the same values as
/// a file that leaves them out wherever it gives the defaults.
#[test]
fn the_example_names_every_key() {
    let text = std::fs::read_to_string(example()).unwrap();
    for key in [
        "kind",
        "line_a",
        "line_b",
        "interface",
        "interface_b",
        "rerequest",
        "session",
        "start_sequence",
        "recv_buffer",
        "stop_at_end_of_session",
        "path",
        "pace",
        "speed",
        "reorder_bytes",
        "max_reorder_packets",
        "gap_wait",
        "request_timeout",
        "max_retries",
        "max_request_messages",
        "requests_per_second",
        "max_jump",
        "confirm_packets",
        "confirm_quiet",
        "mode",
        "system",
        "control",
        "unknown",
        "default",
        "hash_streams",
        "hash_prefix",
        "symbols",
        "ranges",
        "enabled",
        "group",
        "ttl",
        "loopback",
        "max_packet",
        "heartbeat_interval",
        "refresh",
        "log_interval",
        "pin",
        "core",
        "device",
        "idle",
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{key} ="))),
            "config/relay.toml does not show `{key}`"
        );
    }
}

fn err(text: &str) -> String {
    RelayConfig::from_toml_str(text, "relay.toml")
        .unwrap_err()
        .to_string()
}

const LIVE: &str = "[input]\nline_a = \"239.1.1.1:5000\"\n";

#[test]
fn errors_name_the_file_the_key_and_what_is_allowed() {
    assert_eq!(
        err("[input]\nkind = \"moldudp64\"\n"),
        "relay.toml: input.line_a: must be set for input kind moldudp64: a multicast group and port such as 239.192.10.1:26400"
    );
    assert_eq!(
        err("[input]\nline_a = \"10.0.0.1:5000\"\n"),
        "relay.toml: input.line_a: `10.0.0.1:5000` is not an IPv4 multicast group and port such as 239.192.10.1:26400"
    );
    assert_eq!(
        err(&format!("{LIVE}interface = \"eth0\"\n")),
        "relay.toml: input.interface: `eth0` is not a local IPv4 address such as 10.0.0.1"
    );
    assert_eq!(
        err(&format!("{LIVE}rerequest = \"239.1.1.9:7\"\n")),
        "relay.toml: input.rerequest: `239.1.1.9:7` is not a unicast IPv4 address and port such as 10.0.0.5:26410"
    );
    assert_eq!(
        err("[input]\nkind = \"pcap\"\n"),
        "relay.toml: input.path: must be set for input kind pcap"
    );
    assert!(err("[input]\nkind = \"tcp\"\n")
        .contains("unknown variant `tcp`, expected one of `moldudp64`, `binaryfile`, `pcap`"));
    assert_eq!(
        err(&format!("{LIVE}[input.arbiter]\nmax_retries = 0\n")),
        "relay.toml: input.arbiter.max_retries: 0 is not allowed: at least 1"
    );
    assert!(err(&format!("{LIVE}[input.arbiter]\ngap_wait = \"5\"\n")).contains("has no unit"));
    assert_eq!(
        err(&format!("{LIVE}[input.arbiter]\nconfirm_packets = 0\n")),
        "relay.toml: input.arbiter.confirm_packets: 0 is not allowed: at least 1"
    );
    assert!(
        err(&format!("{LIVE}[input.arbiter]\nconfirm_quiet = \"5\"\n")).contains("has no unit")
    );
    assert_eq!(
        err(&format!("{LIVE}[routing]\nsystem = \"control\"\n")),
        "relay.toml: routing.control: must name a stream when routing.system = \"control\""
    );
    assert_eq!(
        err(&format!(
            "{LIVE}[[routing.streams]]\nname = \"a\"\nranges = [[\"M\", \"C\"]]\n"
        )),
        "relay.toml: routing.streams[0].ranges: [\"M\", \"C\"] runs backwards: the first symbol must come before the last"
    );
    assert_eq!(
        err(&format!("{LIVE}[[routing.streams]]\nname = \"a\"\n")),
        "relay.toml: routing.streams[0]: stream `a` has neither symbols nor ranges"
    );
    assert_eq!(
        err(&format!(
            "{LIVE}[[routing.streams]]\nname = \"a\"\nsymbols = [\"toolongsymbol\"]\n"
        )),
        "relay.toml: routing.streams[0].symbols: `toolongsymbol` is not a symbol: 1 to 8 characters A-Z 0-9 . - and space"
    );
    assert_eq!(
        err(&format!(
            "{LIVE}[[routing.streams]]\nname = \"a\"\nsymbols = [\"X\"]\n[[routing.streams]]\nname = \"a\"\nsymbols = [\"Y\"]\n"
        )),
        "relay.toml: routing.streams[1].name: stream `a` is listed twice: merge its symbols into one entry"
    );
    assert_eq!(
        err(&format!(
            "{LIVE}[routing]\nmode = \"hash\"\nhash_streams = 0\n"
        )),
        "relay.toml: routing.hash_streams: 0 is out of range: 1 to 1024"
    );
    assert_eq!(
        err(&format!("{LIVE}[passthrough]\nenabled = true\n")),
        "relay.toml: passthrough.group: `` is not an IPv4 multicast group and port such as 239.192.20.1:26400"
    );
    assert_eq!(
        err(&format!("{LIVE}[thread]\ncore = -5\n")),
        "relay.toml: thread.core: -5 is not a core: -1 (automatic) or a core number"
    );
}

#[test]
fn bus_errors_are_named_under_bus() {
    assert_eq!(
        err(&format!("{LIVE}[bus.streams.md]\ncapacity = 1000\n")),
        "relay.toml: bus.streams.md.capacity: 1000 is not allowed: a power of two from 2 to 16777216"
    );
    assert_eq!(
        err(&format!("{LIVE}[bus.streams.md]\nmax_message = 40\n")),
        "relay.toml: bus.streams.md.max_message: 40 is too small: a relayed message takes up to 58 bytes"
    );
    assert_eq!(
        err(&format!("{LIVE}[bus]\ntransport = \"tcp\"\n")),
        "relay.toml: bus.transport: tcp carries sessions, not streams: use shm, udp or verbs"
    );
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    let e = err(&format!("{LIVE}[routing]\nmdoe = \"hash\"\n"));
    assert!(
        e.starts_with("relay.toml: line 4: unknown field `mdoe`"),
        "{e}"
    );
    let e = err(&format!("{LIVE}[bus]\ntransprot = \"shm\"\n"));
    assert!(
        e.starts_with("relay.toml: line 4: unknown field `transprot`"),
        "{e}"
    );
}

#[test]
fn a_missing_file_is_named() {
    let e = RelayConfig::from_file("/nonexistent/relay.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/nonexistent/relay.toml: (file): cannot be read: "),
        "{e}"
    );
}

/// A reorder store larger than the memory ceiling is a configuration
/// error naming the key and the bytes, not an allocation abort at start.
#[test]
fn a_reorder_store_beyond_the_memory_ceiling_is_refused() {
    assert_eq!(
        err(&format!("{LIVE}[input.arbiter]\nreorder_bytes = 1099511627776\n")),
        "relay.toml: input.arbiter.reorder_bytes: a reorder store of 1099511627776 bytes (1024.0 GiB) is more than limits.max_memory (8589934592 bytes (8.0 GiB)): lower input.arbiter.reorder_bytes or raise limits.max_memory"
    );
    // The ceiling is the bus's: raising it admits the store.
    let text = format!(
        "{LIVE}[input.arbiter]\nreorder_bytes = 1099511627776\n[bus.limits]\nmax_memory = 2199023255552\n"
    );
    let c = RelayConfig::from_toml_str(&text, "relay.toml").unwrap();
    assert_eq!(c.input.arbiter.reorder_bytes, 1 << 40);
}
