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
    let rust_log = std::env::var("RUST_LOG").ok();
    let _ = builder(program, verbose, rust_log.as_deref()).try_init();
}

/// The logger [`init`] installs, with `rust_log` standing for the
/// environment's `RUST_LOG`.
fn builder(program: &'static str, verbose: bool, rust_log: Option<&str>) -> env_logger::Builder {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(if verbose {
        log::LevelFilter::Info
    } else {
        log::LevelFilter::Warn
    });
    if let Some(filters) = rust_log {
        builder.parse_filters(filters);
    }
    builder
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
    builder
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::{Level, LevelFilter, Log, Record};
    use std::sync::{Arc, Mutex};

    /// A log target the test reads back.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logger(verbose: bool, rust_log: Option<&str>) -> (env_logger::Logger, Capture) {
        let out = Capture::default();
        let logger = builder("mdbus-t", verbose, rust_log)
            .target(env_logger::Target::Pipe(Box::new(out.clone())))
            .build();
        (logger, out)
    }

    fn emit(logger: &env_logger::Logger, level: Level, target: &str, text: &str) {
        logger.log(
            &Record::builder()
                .level(level)
                .target(target)
                .args(format_args!("{text}"))
                .build(),
        );
    }

    #[test]
    fn lines_carry_a_timestamp_the_program_and_the_level() {
        let (logger, out) = logger(false, None);
        emit(&logger, Level::Warn, "mdbus::bus", "huge pages not used");
        emit(&logger, Level::Info, "mdbus::bus", "not shown");
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let (time, rest) = text.split_once(' ').unwrap();
        assert_eq!(rest, "mdbus-t: warn: huge pages not used\n");
        // RFC 3339 in UTC with milliseconds: 2026-12-01T19:22:33.123Z.
        assert_eq!(time.len(), 24, "{time}");
        assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
    }

    #[test]
    fn verbose_shows_info_and_rust_log_overrides_both() {
        assert_eq!(logger(false, None).0.filter(), LevelFilter::Warn);
        assert_eq!(logger(true, None).0.filter(), LevelFilter::Info);
        assert_eq!(logger(false, Some("debug")).0.filter(), LevelFilter::Debug);
        let (logger, out) = logger(true, Some("mdbus=debug,error"));
        emit(&logger, Level::Debug, "mdbus::config", "kept");
        emit(&logger, Level::Warn, "other", "dropped");
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(text.ends_with(" mdbus-t: debug: kept\n"), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}
