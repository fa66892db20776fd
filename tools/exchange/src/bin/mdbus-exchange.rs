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
use mdbus_tool_support::output::EXIT_CODES_HELP;

/// Simulate an exchange's MoldUDP64/ITCH 5.0 feed.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-exchange",
    version,
    about = "Simulate an exchange: a synthetic ITCH 5.0 session over MoldUDP64 on lines A and \
B, with a re-request server",
    long_about = "Simulate an exchange: a synthetic ITCH 5.0 session over MoldUDP64 on lines \
A and B, with a re-request server.\n\nExits 0 when the session (or --duration) is over or on \
SIGINT/SIGTERM; 2 for arguments that cannot be used (not a multicast group, not a local \
interface, a port in use); 1 when a thread cannot start; 3 when datagrams could not be sent \
(the drops asked for are not loss).",
    after_help = EXIT_CODES_HELP
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
    let cli: Cli = mdbus_tool_support::version::parse();
    mdbus_tool_support::logging::init("mdbus-exchange", cli.verbose);
    mdbus_exchange::run(&cli.args, "mdbus-exchange")
}
