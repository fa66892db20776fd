//! mdbus-relay lists the exit statuses in its --help. (mdbus-stat and its
//! tests moved to tools/stat.)

use std::process::Command;

const RELAY: &str = env!("CARGO_BIN_EXE_mdbus-relay");

/// Every subcommand lists the exit statuses in its --help.
#[test]
fn every_tool_lists_its_exit_codes() {
    for args in [&["--help"][..], &["simulate", "--help"][..]] {
        let out = Command::new(RELAY).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(mdbus_tool_support::output::EXIT_CODES_HELP),
            "mdbus-relay {args:?}: {text}"
        );
    }
}
