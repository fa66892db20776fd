//! Reading the host: every file the checks look at is under one root
//! (`/` on a live host, a fake tree in tests), read-only.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use mdbus::affinity::{parse_cpulist, Sysfs};

/// Largest file read (a sysfs attribute is one page; `/proc/interrupts`
/// of a large host a few hundred KiB): a bigger one is cut, never read
/// whole.
const MAX_FILE: u64 = 4 << 20;

/// The host under `root`.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    root: PathBuf,
    sysfs: Sysfs,
}

impl Host {
    pub(crate) fn new(root: &Path) -> Host {
        Host {
            root: root.to_path_buf(),
            sysfs: Sysfs::at(root.join("sys")),
        }
    }

    /// The sysfs tree, for `mdbus::affinity`'s readers.
    pub(crate) fn sysfs(&self) -> &Sysfs {
        &self.sysfs
    }

    /// Whether the root is the live system's `/` (some facts are then read
    /// from the running process too).
    pub(crate) fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `rel` (such as `sys/kernel/mm/transparent_hugepage/enabled`) under
    /// the root.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The text of `rel`, trimmed; the error names the path.
    pub(crate) fn read(&self, rel: &str) -> Result<String, String> {
        let path = self.path(rel);
        read_capped(&path)
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
    }

    /// The text of `rel`, trimmed, or `None` when it cannot be read.
    pub(crate) fn read_opt(&self, rel: &str) -> Option<String> {
        self.read(rel).ok()
    }

    /// Whether `rel` exists.
    pub(crate) fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// The entry names of directory `rel`, sorted (none when it cannot be
    /// read).
    pub(crate) fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort_by_key(|n| natural(n));
        names
    }

    /// The last component of the target of symlink `rel` (a device's PCI
    /// address or virtio name), when it is a link.
    pub(crate) fn link_name(&self, rel: &str) -> Option<String> {
        let target = std::fs::read_link(self.path(rel)).ok()?;
        target.file_name()?.to_str().map(str::to_owned)
    }

    /// The CPU list in `rel`.
    pub(crate) fn cpulist(&self, rel: &str) -> Result<Vec<usize>, String> {
        let text = self.read(rel)?;
        parse_cpulist(&text).map_err(|e| format!("{}: {e}", self.path(rel).display()))
    }
}

fn read_capped(path: &Path) -> io::Result<String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Sort key that puts `state10` after `state9` and IRQ `100` after `99`.
fn natural(name: &str) -> (String, u64, String) {
    let digits = name
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(name.len());
    let (head, rest) = name.split_at(digits);
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..end].parse().unwrap_or(u64::MAX);
    (head.to_string(), number, rest[end..].to_string())
}

/// Whether `name` can be a sysfs entry (no `/`, not `.` or `..`, not
/// empty): device and interface names are joined to paths.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// A CPU list in the kernel's notation: `[0, 1, 2, 5]` is `0-2,5`; empty
/// is `none`.
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let first = sorted[i];
        let mut last = first;
        while i + 1 < sorted.len() && sorted[i + 1] == last + 1 {
            i += 1;
            last = sorted[i];
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
        i += 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_are_written_as_ranges() {
        assert_eq!(format_cpulist(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(format_cpulist(&[7, 3, 3]), "3,7");
        assert_eq!(format_cpulist(&[]), "none");
        for list in ["0-3,8-11", "5", "1,3-4"] {
            assert_eq!(format_cpulist(&parse_cpulist(list).unwrap()), list);
        }
    }

    #[test]
    fn names_sort_by_their_number() {
        let mut v = vec!["state10", "state2", "state1"];
        v.sort_by_key(|n| natural(n));
        assert_eq!(v, ["state1", "state2", "state10"]);
    }

    #[test]
    fn names_cannot_leave_their_directory() {
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_name("eth0"));
    }
}
