//! Segments that cannot be trusted get a clear error, never a panic or a
//! hang; stale ones are replaced; live ones are protected.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use mdbus::{Bus, Config, Error};

fn setup(tag: &str) -> (Bus, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mdbus-bad-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = Config {
        transport: mdbus::TransportKind::Shm,
        ..Default::default()
    };
    cfg.shm.dir = dir.clone();
    cfg.shm.huge_pages = mdbus::config::HugePages::Off;
    cfg.shm.attach_timeout = std::time::Duration::ZERO;
    (Bus::new(cfg).unwrap(), dir)
}

/// A valid segment's bytes, captured while its publisher is alive.
fn valid_stream_bytes(bus: &Bus, dir: &std::path::Path) -> Vec<u8> {
    let _p = bus.publisher("s").unwrap();
    std::fs::read(dir.join("mdbus.stream.s")).unwrap()
}

fn subscribe_err(bus: &Bus) -> String {
    bus.subscriber("s").unwrap_err().to_string()
}

#[test]
fn segment_is_private_to_its_owner() {
    let (bus, dir) = setup("mode");
    let _p = bus.publisher("s").unwrap();
    let mode = std::fs::metadata(dir.join("mdbus.stream.s"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn corrupt_truncated_foreign_and_wrong_version_segments_are_named() {
    let (bus, dir) = setup("corrupt");
    let good = valid_stream_bytes(&bus, &dir);
    let path = dir.join("mdbus.stream.s");
    let shown = path.display().to_string();

    let mut flipped = good.clone();
    flipped[30] ^= 0xff;
    std::fs::write(&path, &flipped).unwrap();
    assert_eq!(
        subscribe_err(&bus),
        format!("shared-memory segment {shown}: corrupt header: header checksum does not match")
    );

    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    let e = subscribe_err(&bus);
    assert!(
        e.starts_with(&format!("shared-memory segment {shown}: truncated: ")),
        "{e}"
    );

    std::fs::write(&path, &good[..100]).unwrap();
    assert_eq!(
        subscribe_err(&bus),
        format!("shared-memory segment {shown}: truncated: 100 bytes, at least 4096 needed")
    );

    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    assert_eq!(
        subscribe_err(&bus),
        format!("shared-memory segment {shown}: not an mdbus segment (bad magic)")
    );

    let mut v9 = good.clone();
    v9[8] = 9;
    std::fs::write(&path, &v9).unwrap();
    assert_eq!(
        subscribe_err(&bus),
        format!(
            "shared-memory segment {shown}: layout version 9, this build reads version 1; \
             restart both sides with the same mdbus version"
        )
    );

    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        bus.subscriber("s").unwrap_err(),
        Error::Segment { .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_session_segment_is_not_a_stream() {
    let (bus, dir) = setup("kind");
    let good = valid_stream_bytes(&bus, &dir);
    std::fs::write(dir.join("mdbus.session.s"), &good).unwrap();
    let mut cfg = bus.config().clone();
    cfg.sessions.insert(
        "s".into(),
        mdbus::config::SessionConfig {
            connect_timeout: std::time::Duration::ZERO,
            ..Default::default()
        },
    );
    let e = Bus::new(cfg).unwrap().session_connect("s").unwrap_err();
    assert!(
        e.to_string().ends_with("holds a stream, not a session"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_live_owner_is_protected_and_a_dead_ones_segment_replaced() {
    let (bus, dir) = setup("owner");
    let p = bus.publisher("s").unwrap();
    let e = bus.publisher("s").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "stream `s` is already owned by live process {}; stop it or choose another name",
            std::process::id()
        )
    );
    // Leave the segment behind as a crashed process would, with a pid that
    // cannot be running (above pid_max).
    let path = dir.join("mdbus.stream.s");
    let mut bytes = std::fs::read(&path).unwrap();
    drop(p);
    bytes[48..52].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    // Re-seal the checksum over the first 72 bytes (FNV-1a).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &bytes[..72] {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    bytes[72..80].copy_from_slice(&h.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let mut p2 = bus.publisher("s").expect("stale segment is replaced");
    assert_eq!(p2.publish(b"x").unwrap(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_stream_and_bad_names_are_explained() {
    let (bus, dir) = setup("missing");
    assert_eq!(
        subscribe_err(&bus),
        "stream `s` does not exist yet: start its publisher (or acceptor) first, or raise attach_timeout"
    );
    assert_eq!(
        bus.publisher("../etc").unwrap_err().to_string(),
        "`../etc` is not a valid channel name: use 1 to 64 characters from A-Z a-z 0-9 . _ -"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unavailable_transport_is_one_sentence() {
    let cfg = Config {
        transport: mdbus::TransportKind::Verbs,
        ..Default::default()
    };
    let e = Bus::new(cfg).unwrap_err().to_string();
    assert!(e.starts_with("transport verbs is not available: "), "{e}");
}

#[test]
fn required_huge_pages_that_cannot_be_had_are_an_error() {
    let (bus, dir) = setup("huge");
    let mut cfg = bus.config().clone();
    cfg.shm.huge_pages = mdbus::config::HugePages::Require;
    cfg.shm.hugetlbfs = dir.join("no-hugetlbfs-here");
    let e = Bus::new(cfg)
        .unwrap()
        .publisher("s")
        .unwrap_err()
        .to_string();
    assert!(e.contains(": huge pages required but unavailable: "), "{e}");
    assert!(e.contains("no-hugetlbfs-here is not mounted"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
