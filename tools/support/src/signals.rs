//! SIGINT and SIGTERM as a flag: the handler (installed by the
//! `signal-hook` crate) only stores `true` to an atomic and ends the
//! library's sleeping waits (`mdbus::wait::stop_waits`), both
//! async-signal-safe; every polling loop checks [`requested`] between
//! units of work and then shuts down in order (publishers closed, shared
//! memory removed, summary printed).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM};

/// The flag both handlers set; present once [`install`] succeeded.
static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Installs the handler for SIGINT and SIGTERM (once per process; later
/// calls do nothing).
///
/// # Errors
/// The system refused a handler.
pub fn install() -> io::Result<()> {
    if FLAG.get().is_some() {
        return Ok(());
    }
    let flag = Arc::new(AtomicBool::new(false));
    // Sleeping adaptive waits on every thread wake at once, not after
    // their block: see mdbus::wait::wake_on_stop.
    mdbus::wait::wake_on_stop()?;
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&flag))?;
        // SAFETY: stop_waits is async-signal-safe (an atomic load and one
        // write(2)), allocates nothing and never panics.
        unsafe { signal_hook::low_level::register(signal, mdbus::wait::stop_waits) }?;
    }
    // Two threads racing here both registered handlers; the flag that
    // loses is still set by its handler but never read, which is harmless
    // as the winner's handler sets the winner's flag as well.
    let _ = FLAG.set(flag);
    Ok(())
}

/// True once SIGINT or SIGTERM has arrived (after [`install`]).
#[inline]
pub fn requested() -> bool {
    // Relaxed: the flag carries no data, and a loop only needs to see it
    // eventually.
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_the_flag() {
        install().unwrap();
        install().unwrap();
        assert!(!requested());
        signal_hook::low_level::raise(SIGTERM).unwrap();
        assert!(requested());
    }
}
