//! mdbus-perf: round-trip latency and one-way throughput of an mdbus
//! transport between two processes, and one-way latency and loss recovery
//! of a multicast stream (see `mdbus-perf --help` and the `mdbus_perf`
//! library).

fn main() -> std::process::ExitCode {
    mdbus_perf::main()
}
