//! The tools' log output: `log` records on stderr, one line each, prefixed
//! with the program's name and the level.

use std::sync::OnceLock;

static PROGRAM: OnceLock<&'static str> = OnceLock::new();

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!(
                "{}: {}: {}",
                PROGRAM.get().copied().unwrap_or("mdbus"),
                r.level().as_str().to_lowercase(),
                r.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Sends `log` records to stderr as `PROGRAM: level: message`: warnings
/// and errors always, info with `verbose`. Only the first call in a
/// process takes effect.
pub fn init(program: &'static str, verbose: bool) {
    let _ = PROGRAM.set(program);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(if verbose {
            log::LevelFilter::Info
        } else {
            log::LevelFilter::Warn
        });
    }
}
