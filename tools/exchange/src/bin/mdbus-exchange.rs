//! mdbus-exchange: the exchange simulator alone, a synthetic ITCH 5.0
//! session over MoldUDP64 on lines A and B with a re-request server, for a
//! relay in another process or on another host (also `mdbus-relay
//! simulate`).
//!
//! ```text
//! mdbus-exchange --drop-b 0.02
//! mdbus-exchange --group-a 239.192.10.1:26400 --interface 10.0.0.1 --repeat
//! ```

use std::process::ExitCode;

use clap::Parser;
use mdbus_exchange::SimulateArgs;

/// Simulate an exchange's MoldUDP64/ITCH 5.0 feed.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-exchange",
    version,
    about = "Simulate an exchange: a synthetic ITCH 5.0 session over MoldUDP64 on lines A and \
B, with a re-request server",
    after_help = "Exit status: 0 when the session (or --duration) is over or on SIGINT/SIGTERM; \
1 when it cannot start; 2 for a usage error."
)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,

    /// Log at info level to stderr; warnings are always shown (RUST_LOG
    /// overrides).
    #[arg(short, long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    mdbus_tool_support::logging::init("mdbus-exchange", cli.verbose);
    mdbus_exchange::run(&cli.args, "mdbus-exchange")
}
