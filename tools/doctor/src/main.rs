//! mdbus-doctor: checks that a host is ready for a low-latency mdbus bus
//! (CPU power management, core isolation, NIC interrupts, huge pages,
//! memlock, swap, RoCE settings), reading sysfs and procfs only.
//!
//! ```text
//! mdbus-doctor --config /etc/mdbus/relay.toml
//! mdbus-doctor --device mlx5_0 --cores 2,3 --json
//! ```

use std::process::ExitCode;

use clap::Parser;

/// Check this host's readiness for mdbus.
#[derive(Debug, Parser)]
#[command(
    name = "mdbus-doctor",
    version,
    about = "Check this host's readiness for a low-latency mdbus bus, reading sysfs and procfs only",
    long_about = "Check this host's readiness for a low-latency mdbus bus, in the spirit of \
mlnx_tune: for the configured devices and polling cores, the CPU frequency governor and idle \
states, core isolation, the NIC's interrupts (on its NUMA node, off the polling cores), \
energy-efficient Ethernet, huge pages, transparent huge pages, the memlock limit against what the \
configuration registers, swap, and for RoCE the port state, MTU, GID type and PFC/ECN. One line \
per item with pass, warn or fail, what was read, and the command that fixes it.",
    after_help = mdbus_doctor::AFTER_HELP
)]
struct Cli {
    #[command(flatten)]
    args: mdbus_doctor::Args,
}

fn main() -> ExitCode {
    ExitCode::from(Cli::parse().args.run())
}
