//! The tools' log output on stderr, through `env_logger`: one line per
//! record with a timestamp, the program's name and the level. Warnings
//! and errors by default, info with the tools' `--verbose`; `RUST_LOG`
//! (such as `RUST_LOG=debug` or `RUST_LOG=mdbus=debug,info`) overrides
//! both.

use std::io::Write;

/// The tools' `-v`/`--verbose` option, flattened into each command line.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Verbosity {
    /// Log what the library reports at info level (core placement, huge
    /// pages, segments) to stderr; warnings are always shown.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

impl Verbosity {
    /// [`init`] at the level this option asks for.
    pub fn init(self, program: &'static str) {
        init(program, self.verbose);
    }
}

/// Sends `log` records to stderr as `TIME PROGRAM: level: message`. Only
/// the first call in a process takes effect.
pub fn init(program: &'static str, verbose: bool) {
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(if verbose {
            log::LevelFilter::Info
        } else {
            log::LevelFilter::Warn
        })
        .parse_env(env_logger::Env::new().filter("RUST_LOG"))
        .target(env_logger::Target::Stderr)
        .format(move |buf, record| {
            writeln!(
                buf,
                "{} {program}: {}: {}",
                buf.timestamp_millis(),
                record.level().as_str().to_lowercase(),
                record.args()
            )
        });
    let _ = builder.try_init();
}
