//! What every mdbus tool shares, each in one place.
//!
//! | module | what it holds |
//! |---|---|
//! | [`logging`] | the tools' log lines on stderr (`env_logger`, `RUST_LOG`) |
//! | [`signals`] | SIGINT/SIGTERM as a flag every loop checks (`signal-hook`) |
//! | [`duration`] | the one duration syntax of options and configuration (`humantime`) |
//! | [`process`] | child processes: start, talk, die with the parent, describe an exit |
//! | [`watchdog`] | a dead peer or a stall noticed from inside a spin loop |
//! | [`percentiles`] | percentile summaries of latency histograms, rates |
//! | [`output`] | JSON lines on stdout, exit statuses |
//! | [`readiness`] | waiting a bounded time for a file or FIFO to be readable (`poll`) |
//! | [`rdma`] | the IPv4 address of an RDMA port, from its GID table |
//! | [`config`] | `--check` and `--print-config` of the tools that read a configuration |
//! | [`version`] | `--version`: package version, git revision, RDMA found at run time |

pub mod config;
pub mod duration;
pub mod logging;
pub mod output;
pub mod percentiles;
pub mod process;
pub mod rdma;
pub mod readiness;
pub mod signals;
pub mod version;
pub mod watchdog;
