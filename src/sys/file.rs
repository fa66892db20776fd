//! Private files: created exclusively by this user, opened only when
//! nobody else could have written them.
//!
//! [`create_published`] is the one "temporary name, size, map, fill,
//! publish" routine behind shared-memory segments and counters files;
//! [`open_private`] is the matching open, which refuses symbolic links,
//! files of other users and files with any group or other permission bit.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::map::{Access, Mapping};

/// A system call on a file failed: what was done, to which file, and the
/// error the system returned.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct FileError {
    /// What was being done ("create", "size", "mmap", "publish"...).
    pub op: &'static str,
    /// The file.
    pub path: PathBuf,
    /// The system's error.
    #[source]
    pub source: io::Error,
}

impl FileError {
    fn new(op: &'static str, path: &Path, source: io::Error) -> FileError {
        FileError {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Identity of a file: device and inode. A path that later holds another
/// identity was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
}

impl FileId {
    /// Identity of an open file's metadata.
    pub fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }

    /// Whether the file at `path` (following no symbolic link) is this one.
    pub fn is_at(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|m| FileId::of(&m) == *self)
    }
}

/// Why a file is not trusted. Each is a clause naming the owner and mode,
/// for a sentence that starts with the file's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Distrust {
    /// The path is a symbolic link (`O_NOFOLLOW` refused it).
    #[error(
        "is a symbolic link; refusing to follow it (another user may have planted it): remove it"
    )]
    Symlink,
    /// Not a regular file.
    #[error("is not a regular file (owner uid {uid}, mode {mode:04o}); remove it")]
    NotRegular {
        /// Owner.
        uid: u32,
        /// Permission bits.
        mode: u32,
    },
    /// Owned by another user.
    #[error("is owned by uid {uid} (mode {mode:04o}), not by this user (uid {me}); refusing a file another user controls: remove it")]
    Owner {
        /// Owner.
        uid: u32,
        /// Permission bits.
        mode: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Group or other users have some access.
    #[error("has mode {mode:04o} (owner uid {uid}): group or other users could write it, only its owner may have access; remove it or chmod 600 it if you created it")]
    Mode {
        /// Owner.
        uid: u32,
        /// Permission bits.
        mode: u32,
    },
}

/// Why [`open_private`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file could not be opened or examined.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file is there but not trusted.
    #[error("{} {reason}", path.display())]
    Distrusted {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: Distrust,
    },
}

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `m` (from `fstat`/`lstat`) is a file this user may trust: a
/// regular file owned by the effective uid with no group/other bits.
pub fn check_private(m: &std::fs::Metadata) -> Result<(), Distrust> {
    let (uid, mode) = (m.uid(), m.mode() & 0o7777);
    if m.file_type().is_symlink() {
        return Err(Distrust::Symlink);
    }
    if !m.file_type().is_file() {
        return Err(Distrust::NotRegular { uid, mode });
    }
    let me = euid();
    if uid != me {
        return Err(Distrust::Owner { uid, mode, me });
    }
    if mode & 0o077 != 0 {
        return Err(Distrust::Mode { uid, mode });
    }
    Ok(())
}

/// Opens `path` without following a symbolic link (`O_NOFOLLOW|O_CLOEXEC`)
/// and checks it with [`check_private`]; returns the file and its size.
/// A missing file is `OpenError::Io` with `ErrorKind::NotFound`.
pub fn open_private(path: &Path, access: Access) -> Result<(File, FileId, u64), OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .write(access == Access::ReadWrite)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                OpenError::Distrusted {
                    path: path.to_path_buf(),
                    reason: Distrust::Symlink,
                }
            } else {
                OpenError::Io(FileError::new("open", path, e))
            }
        })?;
    let m = file
        .metadata()
        .map_err(|e| FileError::new("stat", path, e))?;
    check_private(&m).map_err(|reason| OpenError::Distrusted {
        path: path.to_path_buf(),
        reason,
    })?;
    Ok((file, FileId::of(&m), m.len()))
}

/// How [`create_published`] maps the new file.
#[derive(Debug, Clone, Copy, Default)]
pub struct MapOptions {
    /// Touch every page before publishing, so the first use never faults.
    pub prefault: bool,
    /// `mlock` the pages (failure is reported, not fatal).
    pub lock: bool,
}

/// A file made by [`create_published`].
#[derive(Debug)]
pub struct Published {
    /// The read-write mapping of the whole file.
    pub mapping: Mapping,
    /// The file's identity, to tell later whether the path is still ours.
    pub id: FileId,
    /// Why `mlock` failed, when it was asked for and failed.
    pub lock_error: Option<io::Error>,
}

/// Creates the file `path` privately and publishes it complete:
/// 1. creates `.NAME.PID.N.tmp` beside it, exclusively (`O_CREAT|O_EXCL|
///    O_NOFOLLOW|O_CLOEXEC`, mode 0600), so no existing file or planted
///    link is ever opened;
/// 2. sizes it to `len` and maps it read-write (in a hugetlbfs directory
///    the pages are huge pages), prefaulting and locking as `opts` says;
/// 3. lets `fill` write the contents while nobody else can see the file;
/// 4. renames it to `path` without replacing anything (`RENAME_NOREPLACE`):
///    a file that appeared at `path` meanwhile is an `AlreadyExists` error
///    with op "publish", and is left alone.
///
/// On any error the temporary file is removed; `path` is never touched.
pub fn create_published<E: From<FileError>>(
    path: &Path,
    len: usize,
    opts: MapOptions,
    fill: impl FnOnce(&Mapping) -> Result<(), E>,
) -> Result<Published, E> {
    let (tmp, file) = create_temp(path)?;
    let built = (|| {
        file.set_len(len as u64)
            .map_err(|e| FileError::new("size", &tmp, e))?;
        let mapping = Mapping::shared(
            std::os::fd::AsFd::as_fd(&file),
            len,
            Access::ReadWrite,
            false,
        )
        .map_err(|e| FileError::new("mmap", &tmp, e))?;
        if opts.prefault {
            // SAFETY: the file was created empty by us a moment ago and is
            // still under its private temporary name: all zero, unseen.
            unsafe { mapping.touch_pages() };
        }
        let lock_error = if opts.lock {
            mapping.lock().err()
        } else {
            None
        };
        fill(&mapping)?;
        let id = file
            .metadata()
            .map(|m| FileId::of(&m))
            .map_err(|e| FileError::new("stat", &tmp, e))?;
        rename_noreplace(&tmp, path).map_err(|e| FileError::new("publish", path, e))?;
        Ok(Published {
            mapping,
            id,
            lock_error,
        })
    })();
    if built.is_err() {
        // Ours: created exclusively above, and not renamed.
        let _ = std::fs::remove_file(&tmp);
    }
    built
}

/// A fresh temporary file beside `path`, created exclusively.
fn create_temp(path: &Path) -> Result<(PathBuf, File), FileError> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let pid = std::process::id();
    let mut attempt = 0;
    loop {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".{name}.{pid}.{n}{TEMP_SUFFIX}"));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            // A leftover of an earlier process with our pid: not ours to
            // remove, so take another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(FileError::new("create", &tmp, e)),
        }
    }
}

/// The checksum that seals the header of a published file (64-bit FNV-1a):
/// it catches torn or hand-edited headers, not forgery (the owner and mode
/// checks of [`open_private`] keep other users out).
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Suffix of [`create_published`]'s temporary files.
pub const TEMP_SUFFIX: &str = ".tmp";

/// The pid in a temporary file name `.NAME.PID.N.tmp`, if it is one.
pub fn temp_creator(file_name: &str) -> Option<u32> {
    let stem = file_name.strip_prefix('.')?.strip_suffix(TEMP_SUFFIX)?;
    let mut parts = stem.rsplitn(3, '.');
    let _n: u32 = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    parts.next().filter(|name| !name.is_empty())?;
    Some(pid)
}

/// `renameat2(from, to, RENAME_NOREPLACE)`, or `link` + `unlink` where the
/// file system lacks the flag: either way an existing `to` is kept.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let cfrom = cstring(from)?;
    let cto = cstring(to)?;
    // SAFETY: both paths are NUL-terminated; AT_FDCWD resolves them as
    // plain paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cfrom.as_ptr(),
            libc::AT_FDCWD,
            cto.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
        return Err(e);
    }
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

fn cstring(p: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mdbus-sysfile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn published_file_is_private_complete_and_never_replaces() {
        let dir = scratch("pub");
        let path = dir.join("f");
        let p = create_published::<FileError>(
            &path,
            4096,
            MapOptions {
                prefault: true,
                lock: false,
            },
            |m| {
                // SAFETY: the fresh mapping is 4096 bytes and ours alone.
                unsafe { m.as_ptr().write(7) };
                Ok(())
            },
        )
        .unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 4096);
        assert_eq!(std::fs::read(&path).unwrap()[0], 7);
        assert!(p.id.is_at(&path));
        // A second publish at the same path keeps the first file.
        let e = create_published::<FileError>(&path, 4096, MapOptions::default(), |_| Ok(()))
            .unwrap_err();
        assert_eq!(e.op, "publish");
        assert_eq!(e.source.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap()[0], 7);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f"], "no temporary file is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn open_refuses_links_open_modes_and_other_files() {
        let dir = scratch("open");
        let good = dir.join("good");
        std::fs::write(&good, b"x").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (_, _, len) = open_private(&good, Access::ReadOnly).unwrap();
        assert_eq!(len, 1);

        let link = dir.join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let e = open_private(&link, Access::ReadOnly).unwrap_err();
        assert!(
            matches!(
                e,
                OpenError::Distrusted {
                    reason: Distrust::Symlink,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e
            .to_string()
            .starts_with(&format!("{} is a symbolic link", link.display())));

        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = open_private(&good, Access::ReadOnly)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "{} has mode 0666 (owner uid {})",
                good.display(),
                euid()
            )),
            "{e}"
        );

        let e = open_private(&dir, Access::ReadOnly)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a regular file"), "{e}");
        let e = open_private(&dir.join("none"), Access::ReadOnly).unwrap_err();
        assert!(
            matches!(&e, OpenError::Io(f) if f.source.kind() == io::ErrorKind::NotFound),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_carry_the_creator() {
        assert_eq!(temp_creator(".mdbus.stream.md.123.4.tmp"), Some(123));
        assert_eq!(temp_creator(".c.9.0.tmp"), Some(9));
        assert_eq!(temp_creator("mdbus.stream.md"), None);
        assert_eq!(temp_creator("..1.2.tmp"), None);
        assert_eq!(temp_creator(".x.y.2.tmp"), None);
    }
}
