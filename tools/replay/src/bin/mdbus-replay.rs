//! mdbus-replay: replays a market-data capture through an mdbus stream and
//! measures one-way latency (see `mdbus-replay --help` and docs/REPLAY.md).

fn main() -> std::process::ExitCode {
    mdbus_replay::cli::main()
}
