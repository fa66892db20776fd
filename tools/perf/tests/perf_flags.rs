//! mdbus-perf's `--check`, `--print-config` and `--version`, on the built
//! binary.

const PERF: &str = env!("CARGO_BIN_EXE_mdbus-perf");

fn run(args: &[&str]) -> (i32, String, String) {
    mdbus_tool_support::process::output_of(PERF, args).unwrap()
}

#[test]
fn check_and_print_config_read_the_file_and_nothing_else() {
    let dir = std::env::temp_dir();
    let good = dir.join(format!("mdbus-perf-flags-{}-good.toml", std::process::id()));
    let bad = dir.join(format!("mdbus-perf-flags-{}-bad.toml", std::process::id()));
    std::fs::write(&good, "[streams.md]\ngroup = \"239.1.1.1:5000\"\n").unwrap();
    std::fs::write(&bad, "[verbs]\njoin_timeout = \"0s\"\n").unwrap();
    let (g, b) = (good.to_str().unwrap(), bad.to_str().unwrap());
    let checked = run(&["pingpong", "--config", g, "--check"]);
    let refused = run(&["throughput", "--config", b, "--check"]);
    let printed = run(&["mcast", "--config", g, "--print-config"]);
    let original = mdbus::Config::from_file(&good).unwrap();
    std::fs::remove_file(&good).unwrap();
    std::fs::remove_file(&bad).unwrap();

    assert_eq!(checked, (0, format!("config OK: {g}\n"), String::new()));
    assert_eq!(refused.0, 2);
    assert_eq!(
        refused.2,
        format!("mdbus-perf: {b}: verbs.join_timeout: 0 is not allowed: give a duration such as \"5s\"\n")
    );
    assert_eq!(printed.0, 0, "{}", printed.2);
    assert!(printed.1.contains("[streams.md]\n"), "{}", printed.1);
    let back = mdbus::Config::from_toml_str(&printed.1, "<printed>").unwrap();
    assert_eq!(back, original);
    // Without a file: the defaults.
    let (code, out, _) = run(&["pingpong", "--print-config"]);
    assert_eq!(code, 0);
    let defaults = mdbus::Config::from_toml_str(&out, "<printed>").unwrap();
    assert_eq!(defaults, mdbus::Config::default());
}

#[test]
fn version_names_the_revision_and_rdma() {
    let version = env!("CARGO_PKG_VERSION");
    let checked = mdbus_tool_support::version::check_program(PERF, "mdbus-perf", version);
    assert_eq!(checked, Ok(()));
}
