//! Files left behind by processes that died: listing them and removing the
//! stale ones (what `mdbus-stat clean` runs).
//!
//! This module knows no file layout: each kind of file describes itself
//! with a [`Format`] (its magic and how to read its creator from its first
//! bytes); [`crate::leftovers`] passes the formats of segments and counters
//! files. A file is removed only when all of these hold:
//! - it is a regular file of this user with no group/other access
//!   ([`check_private`](super::file::check_private)), not a link;
//! - it starts with a known magic and its header names its creator
//!   (checksum intact), or it is a temporary file `.NAME.PID.N.tmp`;
//! - that creator (pid and start time) no longer runs;
//! - the path still names the very file that was examined.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::file::{self, FileId};
use super::map::Access;
use super::process::{process_alive, Creator};

/// How a kind of file names its creator.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    /// What the file is, for people ("shared-memory segment").
    pub what: &'static str,
    /// Its first eight bytes.
    pub magic: [u8; 8],
    /// The creator recorded in the first [`HEADER_PEEK`] bytes (fewer when
    /// the file is shorter), or `None` when the header is not intact.
    pub creator: fn(&[u8]) -> Option<Creator>,
}

/// Bytes of a file's start handed to [`Format::creator`].
pub const HEADER_PEEK: usize = 128;

/// Whether a leftover's creator still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The creator runs: the file is in use.
    Alive,
    /// The creator is gone: the file can be removed.
    Stale,
    /// The header is damaged, so the creator is unknown; left alone.
    Unreadable,
}

/// One file found by [`list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The file.
    pub path: PathBuf,
    /// What it is ([`Format::what`], or "temporary file").
    pub what: &'static str,
    /// Its creator, when the header names one.
    pub creator: Option<Creator>,
    /// Alive, stale or unreadable.
    pub state: State,
    /// Set by [`clean`] when it removed the file.
    pub removed: bool,
    id: FileId,
}

/// The mdbus files in `dir` (known formats and temporary files), in name
/// order, with their creators' state. Files of other users, links, files
/// with group/other access and unknown files are not listed.
pub fn list(dir: &Path, formats: &[Format]) -> std::io::Result<Vec<Leftover>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if file::check_private(&meta).is_err() {
            continue;
        }
        if let Some(pid) = entry.file_name().to_str().and_then(file::temp_creator) {
            let creator = Creator { pid, start: 0 };
            found.push(Leftover {
                path,
                what: "temporary file",
                creator: Some(creator),
                state: if creator.alive() {
                    State::Alive
                } else {
                    State::Stale
                },
                removed: false,
                id: FileId::of(&meta),
            });
            continue;
        }
        if let Some(l) = examine(&path, formats) {
            found.push(l);
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn examine(path: &Path, formats: &[Format]) -> Option<Leftover> {
    let (mut f, id, _) = file::open_private(path, Access::ReadOnly).ok()?;
    let mut head = [0u8; HEADER_PEEK];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    let format = formats.iter().find(|fm| n >= 8 && head[..8] == fm.magic)?;
    let creator = (format.creator)(&head[..n]);
    let state = match creator {
        None => State::Unreadable,
        Some(c) if process_alive(c.pid, c.start) => State::Alive,
        Some(_) => State::Stale,
    };
    Some(Leftover {
        path: path.to_path_buf(),
        what: format.what,
        creator,
        state,
        removed: false,
        id,
    })
}

/// [`list`], then removes every stale file that is still the one examined;
/// returns the whole list with `removed` set on what went.
pub fn clean(dir: &Path, formats: &[Format]) -> std::io::Result<Vec<Leftover>> {
    let mut all = list(dir, formats)?;
    for l in &mut all {
        if l.state == State::Stale && l.id.is_at(&l.path) {
            l.removed = std::fs::remove_file(&l.path).is_ok();
        }
    }
    Ok(all)
}
