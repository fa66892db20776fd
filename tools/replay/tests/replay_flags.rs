//! mdbus-replay's `run --check`, `run --print-config` (no capture or
//! output directory needed) and `--version`, on the built binary.

const REPLAY: &str = env!("CARGO_BIN_EXE_mdbus-replay");

fn run(args: &[&str]) -> (i32, String, String) {
    mdbus_tool_support::process::output_of(REPLAY, args).unwrap()
}

#[test]
fn run_checks_and_prints_its_configuration() {
    let path = std::env::temp_dir().join(format!("mdbus-replay-flags-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[shm]\nhuge_pages = \"on\"\n[streams.md]\ncapacity = 3\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let refused = run(&["run", "--config", p, "--check"]);
    std::fs::write(&path, "[shm]\nhuge_pages = \"on\"\n").unwrap();
    let checked = run(&["run", "--config", p, "--check"]);
    let printed = run(&["run", "--config", p, "--print-config"]);
    let original = mdbus::Config::from_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();

    assert_eq!(refused.0, 2);
    assert!(
        refused.2.contains("streams.md.capacity: 3 is not allowed"),
        "{}",
        refused.2
    );
    assert_eq!(checked, (0, format!("config OK: {p}\n"), String::new()));
    assert_eq!(printed.0, 0, "{}", printed.2);
    assert!(printed.1.contains("huge_pages = \"on\""), "{}", printed.1);
    let back = mdbus::Config::from_toml_str(&printed.1, "<printed>").unwrap();
    assert_eq!(back, original);
    // A run still needs its capture and --out.
    let (code, _, err) = run(&["run"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--out <DIR>") && err.contains("<INPUT>"),
        "{err}"
    );
}

#[test]
fn version_names_the_revision_and_rdma() {
    let version = env!("CARGO_PKG_VERSION");
    let checked = mdbus_tool_support::version::check_program(REPLAY, "mdbus-replay", version);
    assert_eq!(checked, Ok(()));
}
