//! Files left by mdbus processes that died: shared-memory segments,
//! counters files and half-built temporary files. Backs `mdbus-stat clean`.
//!
//! [`list`] shows each with its creator's pid and whether that process still
//! runs; [`clean`] removes the stale ones. Only regular files of this user
//! with no group/other access, whose header names a creator that no longer
//! runs, are removed (see [`crate::sys::leftovers`]).
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("mdbus-doc-left-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let live = mdbus::counters::CountersFile::create(dir.join("relay.counters"), "doc", &["a"])?;
//! let found = mdbus::leftovers::clean(&dir)?;
//! assert_eq!(found.len(), 1);
//! assert_eq!(found[0].state, mdbus::sys::leftovers::State::Alive);
//! assert!(!found[0].removed, "a live creator's file stays");
//! # drop(live); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use crate::sys::leftovers::Format;
pub use crate::sys::leftovers::{Leftover, State};

/// The formats mdbus writes: segments and counters files.
pub const FORMATS: [Format; 2] = [
    crate::transport::shm::segment::FORMAT,
    crate::counters::FORMAT,
];

/// The segments, counters files and temporary files in `dir`, with their
/// creators and whether those still run.
pub fn list(dir: &Path) -> std::io::Result<Vec<Leftover>> {
    crate::sys::leftovers::list(dir, &FORMATS)
}

/// [`list`], removing the stale files; `removed` says which went.
pub fn clean(dir: &Path) -> std::io::Result<Vec<Leftover>> {
    crate::sys::leftovers::clean(dir, &FORMATS)
}
