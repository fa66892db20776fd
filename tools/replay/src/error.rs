//! Why a command failed, and the exit status that says so.

use std::io;
use std::path::Path;

use super::input::InputError;

/// Why an `mdbus-replay` command failed. The message is one sentence that
/// names the file or option at fault.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// An option or the configuration is wrong.
    #[error("{0}")]
    Usage(String),
    /// The transport is not on this machine (verbs without an RDMA port).
    #[error("{0}")]
    Unavailable(String),
    /// The input cannot be replayed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An interval log cannot be read.
    #[error(transparent)]
    Log(#[from] HlogError),
    /// An output file could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The run itself failed: a subscriber died or stalled, the bus failed.
    #[error("{0}")]
    Run(String),
}

impl ReplayError {
    /// The exit status: 2 for bad usage or bad input, 1 for a failed run.
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Usage(_)
            | ReplayError::Unavailable(_)
            | ReplayError::Input(_)
            | ReplayError::Log(_) => mdbus_tool_support::output::EXIT_USAGE,
            ReplayError::Output { .. } | ReplayError::Run(_) => {
                mdbus_tool_support::output::EXIT_FAILED
            }
        }
    }

    /// An error writing `path`.
    pub fn output(path: &Path, source: io::Error) -> ReplayError {
        ReplayError::Output {
            path: path.display().to_string(),
            source,
        }
    }
}

impl From<mdbus::Error> for ReplayError {
    fn from(e: mdbus::Error) -> Self {
        match e {
            e @ mdbus::Error::TransportUnavailable { .. } => {
                ReplayError::Unavailable(e.to_string())
            }
            mdbus::Error::Config(e) => ReplayError::Usage(e.to_string()),
            e => ReplayError::Run(e.to_string()),
        }
    }
}

impl From<mdbus_tool_support::process::PeerError> for ReplayError {
    fn from(e: mdbus_tool_support::process::PeerError) -> Self {
        ReplayError::Run(e.to_string())
    }
}

/// Why an interval log cannot be read. Every message names the file and,
/// where there is one, the line.
#[derive(Debug, thiserror::Error)]
pub enum HlogError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Open {
        /// File name.
        path: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file has no bytes.
    #[error("{path} is empty: an interval log holds at least one histogram line")]
    Empty {
        /// File name.
        path: String,
    },
    /// A line that is neither a comment, a legend, a start or base time,
    /// nor an interval.
    #[error(
        "{path} line {line} is not an interval log line (a #comment, the legend, or \
         StartTimestamp,Interval_Length,Interval_Max,Histogram): {found}"
    )]
    Syntax {
        /// File name.
        path: String,
        /// Line number, from 1.
        line: usize,
        /// The start of the line.
        found: String,
    },
    /// An interval line whose histogram does not decode.
    #[error("{path} line {line}: the interval's histogram does not decode: {what}")]
    Histogram {
        /// File name.
        path: String,
        /// Line number, from 1.
        line: usize,
        /// Why.
        what: String,
    },
    /// A log without a single interval.
    #[error("{path} holds no interval histograms")]
    NoIntervals {
        /// File name.
        path: String,
    },
}
