//! The operator's flags of mdbus-relay and mdbus-stat: `--check`,
//! `--print-config` (which prints a configuration that reads back equal)
//! and `--version`, run on the built binaries.

use std::path::PathBuf;

use mdbus_relay::RelayConfig;

const RELAY: &str = env!("CARGO_BIN_EXE_mdbus-relay");

fn example() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/relay.toml")
}

fn run(program: &str, args: &[&str]) -> (i32, String, String) {
    mdbus_tool_support::process::output_of(program, args).unwrap()
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mdbus-relay-flags-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_accepts_the_example_and_names_the_key_of_a_bad_file() {
    let example = example();
    let (code, out, _) = run(RELAY, &["--config", example.to_str().unwrap(), "--check"]);
    assert_eq!(code, 0);
    assert_eq!(out, format!("config OK: {}\n", example.display()));

    // A bus value the library refuses, found without opening a socket.
    let text = std::fs::read_to_string(&example).unwrap();
    let bad_bus = scratch(
        "bad-bus.toml",
        &text.replace("capacity = 4096", "capacity = 4000"),
    );
    let (code, out, err) = run(RELAY, &["--config", bad_bus.to_str().unwrap(), "--check"]);
    std::fs::remove_file(&bad_bus).unwrap();
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("bus.streams.ctl.capacity: 4000 is not allowed: a power of two"),
        "{err}"
    );

    let gid = scratch(
        "gid.toml",
        &text.replace("[bus.shm]", "[bus.verbs]\ngid_index = 1\n\n[bus.shm]"),
    );
    let (code, _, err) = run(RELAY, &["--config", gid.to_str().unwrap(), "--check"]);
    std::fs::remove_file(&gid).unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bus.verbs.gid_index: was removed"), "{err}");

    let (code, _, err) = run(RELAY, &["--check"]);
    assert_eq!(code, 2);
    assert_eq!(err, "mdbus-relay: --check needs --config FILE\n");
}

#[test]
fn printed_config_reads_back_equal_with_every_default() {
    let example = example();
    let (code, out, err) = run(
        RELAY,
        &["--config", example.to_str().unwrap(), "--print-config"],
    );
    assert_eq!(code, 0, "{err}");
    let printed = RelayConfig::from_toml_str(&out, "<printed>").unwrap();
    assert_eq!(printed, RelayConfig::from_file(&example).unwrap());
    // Defaults the example leaves out are written, durations as the file
    // takes them.
    for line in [
        "[bus.verbs]",
        "join_timeout = \"5s\"",
        "recv_buffer = 8388608",
        "[counters]",
        "gap_wait = \"200us\"",
        "attach_timeout = \"5s\"",
    ] {
        assert!(out.contains(line), "{line} missing from\n{out}");
    }
}

#[test]
fn version_names_the_revision_and_rdma() {
    let version = env!("CARGO_PKG_VERSION");
    let checked = mdbus_tool_support::version::check_program(RELAY, "mdbus-relay", version);
    assert_eq!(checked, Ok(()));
}
