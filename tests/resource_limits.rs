//! Sizes are checked as the products that get allocated, at configuration
//! load, against `limits.max_memory` and the shared-memory file system:
//! a configuration that would fill /dev/shm or abort on allocation is an
//! error naming the keys and the bytes, and nothing is created.

use mdbus::{Bus, Config};

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mdbus-limits-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_terabyte_ring_is_refused_naming_both_keys_and_the_total() {
    let dir = temp_dir("tib");
    let text = format!(
        "transport = \"shm\"\n[shm]\ndir = \"{}\"\n[streams.md]\ncapacity = 16777216\nmax_message = 65535\n",
        dir.display()
    );
    let e = Config::from_toml_str(&text, "bus.toml").unwrap_err();
    assert_eq!(e.key, "streams.md.capacity");
    assert_eq!(
        e.to_string(),
        "bus.toml: streams.md.capacity: streams.md.capacity 16777216 x 65600-byte slots \
         (streams.md.max_message 65535 + 24-byte header, in whole cache lines) = a ring of \
         1100585373696 bytes (1025.0 GiB), more than limits.max_memory (8589934592 bytes (8.0 GiB)): \
         lower streams.md.capacity or raise limits.max_memory"
    );
    // A configuration built in code is checked by Bus::new the same way,
    // before any segment exists.
    let mut cfg = Config {
        transport: mdbus::TransportKind::Shm,
        ..Default::default()
    };
    cfg.shm.dir = dir.clone();
    let mut s = cfg.stream("md");
    s.capacity = 1 << 24;
    s.max_message = 65535;
    cfg.streams.insert("md".into(), s);
    let e = Bus::new(cfg).unwrap_err().to_string();
    assert!(e.contains("1100585373696 bytes"), "{e}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing created"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn each_channel_fits_yet_together_they_exceed_the_ceiling() {
    let text = "transport = \"shm\"\n[limits]\nmax_memory = 40000000\n\
                [streams.a]\ncapacity = 65536\nmax_message = 232\n\
                [streams.b]\ncapacity = 65536\nmax_message = 232\n\
                [streams.c]\ncapacity = 65536\nmax_message = 232\n";
    let e = Config::from_toml_str(text, "bus.toml").unwrap_err();
    assert_eq!(e.key, "limits.max_memory");
    // 3 x (65536 x 256 + 4096).
    assert!(
        e.message
            .starts_with("the 3 listed channels need 50343936 bytes (48.0 MiB) together"),
        "{e}"
    );
}

#[test]
fn the_ceiling_applies_per_transport_product() {
    // TCP buffers: (65535 + 24) x (1024 + 4) bytes.
    let text = "transport = \"tcp\"\n[limits]\nmax_memory = 1000000\n\
                [sessions.o]\nmax_message = 65535\naddress = \"127.0.0.1:7000\"\n";
    let e = Config::from_toml_str(text, "bus.toml").unwrap_err();
    assert_eq!(e.key, "sessions.o.max_message");
    assert!(e.message.contains("67394652 bytes"), "{e}");
    // A zero ceiling admits nothing, and says so.
    let e = Config::from_toml_str("[limits]\nmax_memory = 0\n", "bus.toml").unwrap_err();
    assert_eq!(e.key, "limits.max_memory");
}

#[test]
fn a_ring_larger_than_the_free_space_of_shm_dir_is_refused() {
    // Within the memory ceiling, but not within the file system: ask it
    // how much is free and configure more than that.
    let dir = temp_dir("space");
    let free = free_bytes(&dir);
    let slot = 1 << 20; // max_message 1 MiB - 64: 1 MiB slots
    let capacity = (free / slot + 1).next_power_of_two();
    let text = format!(
        "transport = \"shm\"\n[shm]\ndir = \"{}\"\nhuge_pages = \"off\"\n[limits]\nmax_memory = 18446744073709551615\n\
         [streams.md]\ncapacity = {capacity}\nmax_message = {}\n",
        dir.display(),
        slot - 64
    );
    match Config::from_toml_str(&text, "bus.toml") {
        Err(e) => {
            assert_eq!(e.key, "streams.md.capacity");
            assert!(e.message.contains("of shared memory, but"), "{e}");
            assert!(e.message.contains(&dir.display().to_string()), "{e}");
        }
        // Only when the capacity needed exceeds the largest allowed one
        // (a file system with more than 16 TiB free).
        Ok(_) => assert!(capacity > 1 << 24, "accepted {capacity} slots"),
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn free_bytes(dir: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .expect("df runs");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn a_segment_larger_than_the_free_space_is_refused_before_its_file_exists() {
    // A channel not listed in the configuration is checked when created.
    use mdbus::config::{HugePages, ShmConfig, StreamConfig};
    use mdbus::transport::shm::ShmPublisher;
    let dir = temp_dir("create");
    let shm = ShmConfig {
        dir: dir.clone(),
        huge_pages: HugePages::Off,
        mlock: false,
        ..Default::default()
    };
    let huge = StreamConfig {
        capacity: 1 << 24,
        max_message: 1 << 20,
        ..Default::default()
    };
    let e = ShmPublisher::create(&shm, "md", &huge)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("stream `md`: streams.md.capacity: the segment of stream `md` (16777216 slots of 1048640 bytes): 17593259790336 bytes (16385.0 GiB) of shared memory, but "),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing created"
    );
    std::fs::remove_dir_all(&dir).ok();
}
