//! The C and C++ examples, compiled against the installed library (through
//! its pkg-config files, shared and static) and run as processes: market
//! data over shared memory and UDP multicast on loopback, order sessions
//! over shared memory and TCP, and with the Rust API on the other end.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use support::{compile, compiler, config, install, pkg_config, run, scratch, Proc};

static SALT: AtomicU32 = AtomicU32::new(0);

fn salt() -> u32 {
    SALT.fetch_add(1, Ordering::Relaxed)
}

/// The examples, built once per linkage.
struct Examples {
    md_publisher: PathBuf,
    md_subscriber: PathBuf,
    cpp_publisher: PathBuf,
    cpp_subscriber: PathBuf,
    order_server: PathBuf,
    order_client: PathBuf,
}

struct Build {
    dir: PathBuf,
    shared: Examples,
    r#static: Examples,
}

/// Installs the library, compiles every example twice; `None` when a
/// compiler is missing (and the run may skip).
fn build(test: &str) -> Option<&'static Build> {
    static BUILD: OnceLock<Option<Build>> = OnceLock::new();
    BUILD
        .get_or_init(|| {
            let cc = compiler(test, "CC", "cc")?;
            let cxx = compiler(test, "CXX", "c++")?;
            let dir = scratch("examples");
            let prefix = dir.join("prefix");
            install(&prefix);
            let ex = support::root().join("examples");
            let make = |package: &str| {
                let flags = pkg_config(&prefix, package);
                let out = |n: &str| dir.join(format!("{n}-{package}"));
                let c = |src: &str, n: &str| {
                    compile(&cc, &ex.join("c").join(src), &out(n), &flags);
                    out(n)
                };
                let cpp = |src: &str, n: &str| {
                    compile(&cxx, &ex.join("cpp").join(src), &out(n), &flags);
                    out(n)
                };
                Examples {
                    md_publisher: c("md_publisher.c", "md_publisher"),
                    md_subscriber: c("md_subscriber.c", "md_subscriber"),
                    order_server: c("order_server.c", "order_server"),
                    order_client: c("order_client.c", "order_client"),
                    cpp_publisher: cpp("publisher.cpp", "cpp_publisher"),
                    cpp_subscriber: cpp("subscriber.cpp", "cpp_subscriber"),
                }
            };
            Some(Build {
                shared: make("mdbus"),
                r#static: make("mdbus-static"),
                dir,
            })
        })
        .as_ref()
}

const COUNT: u64 = 20_000;
const SIZE: u64 = 100;

/// `publisher` publishes COUNT messages of SIZE bytes; `subscriber` must
/// receive each, intact, with nothing lost.
fn stream(publisher: &Path, subscriber: &Path, cfg: &Path) {
    let cfg = cfg.to_str().unwrap();
    let (count, size) = (COUNT.to_string(), SIZE.to_string());
    let mut p = Proc::spawn(publisher, &[cfg, "md", &count, &size]);
    p.expect("ready");
    let mut s = Proc::spawn(subscriber, &[cfg, "md", &count]);
    s.expect("ready");
    p.say("go");
    assert_eq!(p.line(), format!("published {COUNT} last_seq={COUNT}"));
    assert_eq!(
        s.line(),
        format!(
            "messages={COUNT} bytes={} bad=0 lost=0 ended=0",
            COUNT * SIZE
        )
    );
    s.finish();
    p.hang_up();
    assert_eq!(p.line(), format!("closed published={COUNT}"));
    p.finish();
}

/// The client sends `n` orders, the server acks each; both count.
fn session(ex: &Examples, cfg: &Path, n: u64) {
    let cfg = cfg.to_str().unwrap();
    let server = Proc::spawn(&ex.order_server, &[cfg, "orders"]);
    let mut client = Proc::spawn(&ex.order_client, &[cfg, "orders", &n.to_string()]);
    assert_eq!(client.line(), format!("acks={n} bad=0"));
    client.finish();
    let bytes: u64 = (1..=n).map(|i| format!("order {i}").len() as u64).sum();
    let mut server = server;
    assert_eq!(server.line(), format!("orders={n} bytes={bytes}"));
    server.finish();
}

fn streams(test: &str, transport: &str, pick: fn(&Build) -> &Examples) {
    let Some(b) = build(test) else { return };
    let ex = pick(b);
    let cfg = |_: ()| config(&b.dir, transport, salt());
    stream(&ex.md_publisher, &ex.md_subscriber, &cfg(()));
    stream(&ex.cpp_publisher, &ex.cpp_subscriber, &cfg(()));
    // C++ to C and back: one wire, whatever the language.
    stream(&ex.cpp_publisher, &ex.md_subscriber, &cfg(()));
    stream(&ex.md_publisher, &ex.cpp_subscriber, &cfg(()));
}

#[test]
fn streams_over_shm_shared_library() {
    streams("streams_over_shm_shared_library", "shm", |b| &b.shared);
}

#[test]
fn streams_over_shm_static_library() {
    streams("streams_over_shm_static_library", "shm", |b| &b.r#static);
}

#[test]
fn streams_over_udp_shared_library() {
    streams("streams_over_udp_shared_library", "udp", |b| &b.shared);
}

#[test]
fn streams_over_udp_static_library() {
    streams("streams_over_udp_static_library", "udp", |b| &b.r#static);
}

#[test]
fn sessions_over_shm_and_tcp_shared_and_static() {
    let Some(b) = build("sessions_over_shm_and_tcp_shared_and_static") else {
        return;
    };
    for ex in [&b.shared, &b.r#static] {
        for transport in ["shm", "udp"] {
            session(ex, &config(&b.dir, transport, salt()), 2_000);
        }
    }
}

/// A C publisher and a subscriber on the Rust API (and the reverse): the
/// C library speaks the same channels as any Rust program.
#[test]
fn c_examples_and_the_rust_api_talk_both_ways() {
    let Some(b) = build("c_examples_and_the_rust_api_talk_both_ways") else {
        return;
    };
    for transport in ["shm", "udp"] {
        // Rust publisher -> C subscriber.
        let cfg = config(&b.dir, transport, salt());
        let bus = mdbus::Bus::new(mdbus::Config::from_file(&cfg).unwrap()).unwrap();
        let mut publisher = bus.publisher("md").unwrap();
        let count = COUNT.to_string();
        let mut s = Proc::spawn(
            &b.shared.md_subscriber,
            &[cfg.to_str().unwrap(), "md", &count],
        );
        s.expect("ready");
        for seq in 1..=COUNT {
            let mut c = publisher.claim(SIZE as usize).unwrap();
            for (k, byte) in c.iter_mut().enumerate() {
                *byte = (seq as usize * 31 + k) as u8;
            }
            assert_eq!(c.commit().unwrap(), seq);
        }
        // Serve retransmissions (UDP) until the subscriber has everything.
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let line = s.line();
            s.finish();
            tx.send(()).unwrap();
            line
        });
        while rx.try_recv().is_err() {
            publisher.service().unwrap();
        }
        assert_eq!(
            waiter.join().unwrap(),
            format!(
                "messages={COUNT} bytes={} bad=0 lost=0 ended=0",
                COUNT * SIZE
            )
        );
        drop(publisher);

        // C publisher -> Rust subscriber, to the end of the stream.
        let cfg = config(&b.dir, transport, salt());
        let mut p = Proc::spawn(
            &b.r#static.md_publisher,
            &[cfg.to_str().unwrap(), "md", &count, &SIZE.to_string()],
        );
        p.expect("ready");
        let bus = mdbus::Bus::new(mdbus::Config::from_file(&cfg).unwrap()).unwrap();
        let mut subscriber = bus.subscriber("md").unwrap();
        p.say("go");
        p.expect("published");
        let (mut got, mut bad, mut ended) = (0u64, 0u64, None);
        while ended.is_none() {
            subscriber
                .poll(|e| match e {
                    mdbus::Event::Message(m) => {
                        got += 1;
                        let ok = m.payload().len() == SIZE as usize
                            && m.payload()
                                .iter()
                                .enumerate()
                                .all(|(k, &b)| b == (m.seq() as usize * 31 + k) as u8);
                        bad += u64::from(!ok);
                        if got == COUNT {
                            p.hang_up();
                        }
                    }
                    mdbus::Event::EndOfStream { last_seq } => ended = Some(last_seq),
                    other => panic!("unexpected {other:?}"),
                })
                .unwrap();
        }
        assert_eq!((got, bad, ended), (COUNT, 0, Some(COUNT)));
        assert_eq!(p.line(), format!("closed published={COUNT}"));
        p.finish();
    }
}

/// CMake's find_package finds the installed library in one line; the C++
/// examples build with it (shared and static imported targets).
#[test]
fn cmake_find_package_builds_the_cpp_examples() {
    let test = "cmake_find_package_builds_the_cpp_examples";
    let Some(b) = build(test) else { return };
    if Command::new("cmake").arg("--version").output().is_err() {
        mdbus_testkit::skip(test, mdbus_testkit::Lack::Tool, "cmake is not installed");
        return;
    }
    let out = b.dir.join("cmake-build");
    run(Command::new("cmake")
        .arg("-S")
        .arg(support::root().join("examples/cpp"))
        .arg("-B")
        .arg(&out)
        .arg(format!(
            "-DCMAKE_PREFIX_PATH={}",
            b.dir.join("prefix").display()
        )));
    run(Command::new("cmake").arg("--build").arg(&out));
    stream(
        &out.join("publisher"),
        &out.join("subscriber"),
        &config(&b.dir, "shm", salt()),
    );
}
