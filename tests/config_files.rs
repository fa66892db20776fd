//! Every example configuration in config/ parses and passes validation.

#[test]
fn every_example_config_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // relay.toml configures mdbus-relay, not a bus: bin/tests/relay_config.rs checks it.
        if path.extension().is_some_and(|e| e == "toml") && !path.ends_with("relay.toml") {
            if let Err(e) = mdbus::Config::from_file(&path) {
                panic!("{e}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 2, "config/ holds the example files");
}

#[test]
fn the_shm_example_says_what_it_says() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/shm.toml");
    let c = mdbus::Config::from_file(path).unwrap();
    assert_eq!(c.transport, mdbus::TransportKind::Shm);
    assert!(c.stream("md").timestamps);
    assert_eq!(c.session("orders").capacity, 4096);
    assert_eq!(c.limits.max_memory, 8 << 30);
}

#[test]
fn a_missing_file_is_named() {
    let e = mdbus::Config::from_file("/nonexistent/mdbus.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/mdbus.toml: (file): cannot be read: "),
        "{e}"
    );
}
