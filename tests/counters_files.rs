//! Counters files are private, created exclusively, and mdbus never
//! overwrites or removes a file it did not create.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use mdbus::counters::{CountersError, CountersFile, CountersReader};

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mdbus-cntf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_counters_file_is_created_0600() {
    let dir = scratch("mode");
    let path = dir.join("c");
    let _f = CountersFile::create(&path, "t", &["a"]).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unrelated_file_is_an_error_and_stays_untouched() {
    let dir = scratch("unrelated");
    let path = dir.join("important.conf");
    let content = b"this file belongs to someone else\n".repeat(20);
    std::fs::write(&path, &content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = CountersFile::create(&path, "relay", &["a", "b"]).unwrap_err();
    assert!(matches!(e, CountersError::Occupied { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "counters file {}: it exists and is not an mdbus counters file; mdbus never \
             overwrites or removes a file it did not create: choose another counters path or \
             remove that file yourself",
            path.display()
        )
    );
    drop(e);
    // A later successful owner elsewhere, created and dropped, does not
    // touch it either.
    drop(CountersFile::create(dir.join("other"), "relay", &["a"]).unwrap());
    assert_eq!(std::fs::read(&path).unwrap(), content);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_counters_file_is_not_replaced() {
    let dir = scratch("damaged");
    let path = dir.join("c");
    let f = CountersFile::create(&path, "t", &["a"]).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    drop(f);
    bytes[13] ^= 1; // slot count: the checksum no longer matches
    std::fs::write(&path, &bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = CountersFile::create(&path, "t", &["a"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("it cannot be read as one"), "{e}");
    assert!(e.contains("checksum"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn links_and_open_files_are_refused() {
    let dir = scratch("links");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = dir.join("c");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let e = CountersFile::create(&link, "t", &["a"]).unwrap_err();
    assert!(matches!(e, CountersError::Untrusted { .. }), "{e}");
    assert!(e.to_string().contains("is a symbolic link"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    let e = CountersReader::open(&link).unwrap_err();
    assert!(e.to_string().contains("is a symbolic link"), "{e}");

    let open = dir.join("open");
    std::fs::write(&open, b"x").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = CountersFile::create(&open, "t", &["a"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("has mode 0666"), "{e}");
    assert_eq!(std::fs::read(&open).unwrap(), b"x");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dead_owners_file_is_reclaimed() {
    let dir = scratch("dead");
    let path = dir.join("c");
    let f = CountersFile::create(&path, "old", &["a"]).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    drop(f);
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    bytes[24..28].copy_from_slice(&pid.to_le_bytes());
    bytes[32..40].copy_from_slice(&0u64.to_le_bytes());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &bytes[..48] {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    bytes[48..56].copy_from_slice(&h.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = CountersFile::create(&path, "new", &["x", "y"]).unwrap();
    let r = CountersReader::open(&path).unwrap();
    assert_eq!(r.owner().name, "new");
    assert_eq!(r.labels(), ["x", "y"]);
    drop(f);
    assert!(!path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_creators_racing_for_one_path_get_a_file_and_in_use() {
    let dir = scratch("race");
    let path = dir.join("race.counters");
    for round in 0..40 {
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|s| {
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        CountersFile::create(&path, "racer", &["a", "b"])
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, CountersError::InUse { pid, .. } if *pid == std::process::id()),
                    "round {round}: the loser is told who holds the file: {e}"
                );
            }
        }
        drop(results);
        assert!(!path.exists(), "round {round}: the winner removed its file");
    }
}
