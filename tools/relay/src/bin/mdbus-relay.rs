//! mdbus-relay: a NASDAQ MoldUDP64/ITCH 5.0 feed in, routed mdbus streams
//! out. `mdbus-relay --help` explains; config/relay.toml documents every
//! setting; docs/RELAY.md is the operator's guide.
//!
//! ```text
//! mdbus-relay --demo --duration 10s
//! mdbus-relay --config config/relay.toml
//! mdbus-relay simulate --drop-b 0.02
//! ```

fn main() -> std::process::ExitCode {
    mdbus_relay::cli::main()
}
