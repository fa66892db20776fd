//! `mdbus-replay`: captures replayed through the bus, latency histograms
//! out.
//!
//! | module | what it holds |
//! |---|---|
//! | [`cli`] | the command line: `synth`, `run`, `report` (and the hidden `subscribe`) |
//! | [`synth`] | a synthetic ITCH 5.0 day written as a BinaryFILE |
//! | [`input`] | the input opened once (file, FIFO, stdin), recognised by content, captures sequenced by the arbiter's rules, skips counted by reason |
//! | [`schedule`] | `--rate` and each message's intended send time |
//! | [`loader`] | reading the input ahead of the replay, on a thread of its own |
//! | [`transport`] | the stream's bus on shm, udp or verbs, the same in every process |
//! | [`run`] | the replaying process: publish, then merge and write the results |
//! | [`subscribe`] | a subscriber process: latency per message into interval histograms |
//! | [`peer`] | starting subscriber processes and talking to them |
//! | [`hlog`] | HdrHistogram interval logs, written and read |
//! | [`hgrm`] | the percentile distribution table |
//! | [`plot`] | SVG plots: latency by percentile, latency over time |
//! | [`summary`] | the summary table and JSON |
//! | [`report`] | comparing interval logs |
//! | [`error`] | errors and exit statuses |
//!
//! See `docs/REPLAY.md` for what the latency means and the file formats.

pub mod cli;
pub mod error;
pub mod hgrm;
pub mod hlog;
pub mod input;
pub mod loader;
pub mod peer;
pub mod plot;
pub mod report;
pub mod run;
pub mod schedule;
pub mod subscribe;
pub mod summary;
pub mod synth;
pub mod transport;

pub use error::ReplayError;
