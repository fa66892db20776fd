//! Segments that cannot be trusted get a clear error, never a panic or a
//! hang; stale ones are replaced; live ones are protected.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
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

/// Writes `bytes` at `path` as the segment's owner would: mode 0600.
fn plant(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Re-seals the header checksum over the first 72 bytes (FNV-1a), as a
/// forger who knows the layout would.
fn reseal(bytes: &mut [u8]) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &bytes[..72] {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    bytes[72..80].copy_from_slice(&h.to_le_bytes());
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
    plant(&path, &flipped);
    assert_eq!(
        subscribe_err(&bus),
        format!("shared-memory segment {shown}: corrupt header: header checksum does not match")
    );

    plant(&path, &good[..good.len() / 2]);
    let e = subscribe_err(&bus);
    assert!(
        e.starts_with(&format!("shared-memory segment {shown}: truncated: ")),
        "{e}"
    );

    plant(&path, &good[..100]);
    assert_eq!(
        subscribe_err(&bus),
        format!("shared-memory segment {shown}: truncated: 100 bytes, at least 4096 needed")
    );

    plant(&path, &[0x5a; 8192]);
    assert_eq!(
        subscribe_err(&bus),
        format!("shared-memory segment {shown}: not an mdbus segment (bad magic)")
    );

    let mut v9 = good.clone();
    v9[8] = 9;
    plant(&path, &v9);
    assert_eq!(
        subscribe_err(&bus),
        format!(
            "shared-memory segment {shown}: layout version 9, this build reads version {}; \
             restart both sides with the same mdbus version",
            mdbus::transport::shm::segment::VERSION
        )
    );

    plant(&path, b"");
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
    plant(&dir.join("mdbus.session.s"), &good);
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
    reseal(&mut bytes);
    plant(&path, &bytes);
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

/// The pid of a process that has exited (and been reaped).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_segment_open_to_other_users_is_refused_and_left_alone() {
    let (bus, dir) = setup("0666");
    let good = valid_stream_bytes(&bus, &dir);
    let path = dir.join("mdbus.stream.s");
    std::fs::write(&path, &good).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let uid = std::fs::metadata(&path).unwrap().uid();
    let e = subscribe_err(&bus);
    assert_eq!(
        e,
        format!(
            "shared-memory segment {}: has mode 0666 (owner uid {uid}): group or other users \
             could write it, only its owner may have access; remove it or chmod 600 it if you created it",
            path.display()
        )
    );
    // A publisher does not replace (or delete) it either.
    let e = bus.publisher("s").unwrap_err().to_string();
    assert!(e.contains("has mode 0666"), "{e}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        good,
        "the planted file is untouched"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_symlinked_segment_is_refused() {
    let (bus, dir) = setup("link");
    let good = valid_stream_bytes(&bus, &dir);
    let target = dir.join("elsewhere");
    plant(&target, &good);
    let path = dir.join("mdbus.stream.s");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    assert_eq!(
        subscribe_err(&bus),
        format!(
            "shared-memory segment {}: is a symbolic link; refusing to follow it \
             (another user may have planted it): remove it",
            path.display()
        )
    );
    assert!(bus.publisher("s").is_err());
    assert!(path.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), good);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_segment_of_another_user_is_refused_naming_the_owner() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        mdbus_testkit::skip(
            "a_segment_of_another_user_is_refused_naming_the_owner",
            mdbus_testkit::Lack::Tool,
            "needs root to chown a file to uid 65534",
        );
        return;
    }
    let (bus, dir) = setup("owner65534");
    let good = valid_stream_bytes(&bus, &dir);
    let path = dir.join("mdbus.stream.s");
    plant(&path, &good);
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    assert_eq!(
        subscribe_err(&bus),
        format!(
            "shared-memory segment {}: is owned by uid 65534 (mode 0600), not by this user (uid 0); \
             refusing a file another user controls: remove it",
            path.display()
        )
    );
    assert!(bus
        .publisher("s")
        .unwrap_err()
        .to_string()
        .contains("owned by uid 65534"));
    assert_eq!(
        std::fs::metadata(&path).unwrap().uid(),
        65534,
        "left in place"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_header_claiming_more_than_the_file_is_refused_before_mapping() {
    let (bus, dir) = setup("huge");
    let good = valid_stream_bytes(&bus, &dir);
    let path = dir.join("mdbus.stream.s");
    // Largest legal geometry: 2^24 slots of the largest slot, ~17.6 TB,
    // in a file of a few KiB. Mapping (and prefaulting) it first would
    // exhaust memory; the header check must refuse it from the file size.
    let mut forged = good[..8192].to_vec();
    let slot: u32 = (24 + (1u32 << 20)).div_ceil(64) * 64;
    let capacity: u64 = 1 << 24;
    let total = 4096 + capacity * slot as u64;
    forged[16..20].copy_from_slice(&slot.to_le_bytes());
    forged[24..32].copy_from_slice(&capacity.to_le_bytes());
    forged[32..40].copy_from_slice(&total.to_le_bytes());
    reseal(&mut forged);
    plant(&path, &forged);
    assert_eq!(
        subscribe_err(&bus),
        format!(
            "shared-memory segment {}: truncated: 8192 bytes, at least {total} needed",
            path.display()
        )
    );
    // A stated size that is not its rings' size is refused too.
    let mut padded = good.clone();
    let stated = u64::from_le_bytes(padded[32..40].try_into().unwrap()) + 4096;
    padded[32..40].copy_from_slice(&stated.to_le_bytes());
    padded.resize(stated as usize, 0);
    reseal(&mut padded);
    plant(&path, &padded);
    assert_eq!(
        subscribe_err(&bus),
        format!(
            "shared-memory segment {}: corrupt header: stated size does not match its rings",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_stale_segment_of_a_dead_process_is_reclaimed() {
    let (bus, dir) = setup("dead");
    let mut bytes = valid_stream_bytes(&bus, &dir);
    let pid = dead_pid();
    bytes[48..52].copy_from_slice(&pid.to_le_bytes());
    bytes[56..64].copy_from_slice(&0u64.to_le_bytes());
    reseal(&mut bytes);
    let path = dir.join("mdbus.stream.s");
    plant(&path, &bytes);
    let listed = mdbus::leftovers::list(&dir).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].creator.map(|c| c.pid), Some(pid));
    assert_eq!(listed[0].state, mdbus::leftovers::State::Stale);

    let mut p = bus.publisher("s").expect("the stale segment is reclaimed");
    let now = std::fs::read(&path).unwrap();
    assert_eq!(
        u32::from_le_bytes(now[48..52].try_into().unwrap()),
        std::process::id(),
        "the new segment is ours"
    );
    let mut sub = bus.subscriber("s").unwrap();
    assert_eq!(p.publish(b"x").unwrap(), 1);
    let mut got = Vec::new();
    sub.poll(|e| {
        if let mdbus::Event::Message(m) = e {
            got.push(m.payload().to_vec())
        }
    })
    .unwrap();
    assert_eq!(got, [b"x".to_vec()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn leftovers_are_listed_and_only_stale_ones_cleaned() {
    let (bus, dir) = setup("clean");
    let _live = bus.publisher("live").unwrap();
    let mut stale = valid_stream_bytes(&bus, &dir);
    let pid = dead_pid();
    stale[48..52].copy_from_slice(&pid.to_le_bytes());
    reseal(&mut stale);
    plant(&dir.join("mdbus.stream.gone"), &stale);
    // A stale segment open to others: not trusted, so neither listed nor removed.
    std::fs::write(dir.join("mdbus.stream.open"), &stale).unwrap();
    std::fs::set_permissions(
        dir.join("mdbus.stream.open"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    // A damaged segment: listed as unreadable, kept.
    let mut damaged = stale.clone();
    damaged[30] ^= 1;
    plant(&dir.join("mdbus.stream.damaged"), &damaged);
    // Half-built file of a dead creator, and another program's file.
    plant(
        &dir.join(format!(".mdbus.stream.x.{pid}.0.tmp")),
        b"partial",
    );
    plant(&dir.join("notes.txt"), b"keep me");
    // A counters file of a dead owner.
    let cnt = dir.join("relay.counters");
    let f = mdbus::counters::CountersFile::create(&cnt, "relay", &["a"]).unwrap();
    let mut cbytes = std::fs::read(&cnt).unwrap();
    drop(f);
    cbytes[24..28].copy_from_slice(&pid.to_le_bytes());
    cbytes[32..40].copy_from_slice(&0u64.to_le_bytes());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &cbytes[..48] {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    cbytes[48..56].copy_from_slice(&h.to_le_bytes());
    plant(&cnt, &cbytes);

    use mdbus::leftovers::State;
    let summary = |l: &[mdbus::leftovers::Leftover]| {
        l.iter()
            .map(|l| {
                (
                    l.path.file_name().unwrap().to_string_lossy().into_owned(),
                    l.what,
                    l.state,
                    l.removed,
                )
            })
            .collect::<Vec<_>>()
    };
    let tmp = format!(".mdbus.stream.x.{pid}.0.tmp");
    let listed = mdbus::leftovers::list(&dir).unwrap();
    assert_eq!(
        summary(&listed),
        [
            (tmp.clone(), "temporary file", State::Stale, false),
            (
                "mdbus.stream.damaged".into(),
                "shared-memory segment",
                State::Unreadable,
                false
            ),
            (
                "mdbus.stream.gone".into(),
                "shared-memory segment",
                State::Stale,
                false
            ),
            (
                "mdbus.stream.live".into(),
                "shared-memory segment",
                State::Alive,
                false
            ),
            (
                "relay.counters".into(),
                "counters file",
                State::Stale,
                false
            ),
        ]
    );
    let cleaned = mdbus::leftovers::clean(&dir).unwrap();
    assert_eq!(
        summary(&cleaned),
        [
            (tmp, "temporary file", State::Stale, true),
            (
                "mdbus.stream.damaged".into(),
                "shared-memory segment",
                State::Unreadable,
                false
            ),
            (
                "mdbus.stream.gone".into(),
                "shared-memory segment",
                State::Stale,
                true
            ),
            (
                "mdbus.stream.live".into(),
                "shared-memory segment",
                State::Alive,
                false
            ),
            ("relay.counters".into(), "counters file", State::Stale, true),
        ]
    );
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "mdbus.stream.damaged",
            "mdbus.stream.live",
            "mdbus.stream.open",
            "notes.txt"
        ]
    );
    assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"keep me");
    std::fs::remove_dir_all(&dir).unwrap();
}
