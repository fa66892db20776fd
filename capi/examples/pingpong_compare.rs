//! Ping-pong over shared memory through the C API and through the Rust API,
//! in one run, so the cost the C boundary adds is measured on one machine
//! under one load:
//!
//! ```sh
//! cargo build --release -p mdbus-capi     # libmdbus.a, which the C side links
//! cargo run --release -p mdbus-capi --example pingpong_compare -- [ITERS] [ROUNDS]
//! ```
//!
//! Both sides run the same loop: two threads pinned to cores 0 and 1,
//! stream `ping` one way and `pong` back, 32-byte messages written with
//! claim/commit and read in place. The C side is examples/c/pingpong.c,
//! compiled here with `cc -O2` against the static library of this build.
//! Rounds alternate C and Rust; the table gives HdrHistogram percentiles of
//! the round-trip time for each language over all rounds, and the ratio.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;

const SIZE: usize = 32;
const WARMUP: u64 = 20_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let iters: u64 = args.next().map_or(200_000, |a| a.parse().expect("ITERS"));
    let rounds: u32 = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));

    let build = std::env::current_exe()
        .expect("exe path")
        .parent()
        .and_then(Path::parent)
        .expect("target/PROFILE/examples")
        .to_path_buf();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = build.join(format!("pingpong-compare-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("work dir");
    let exe = work.join("pingpong");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-O2", "-Wall", "-Werror", "-pthread"])
        .arg(format!("-I{}", root.join("include").display()))
        .arg(root.join("examples/c/pingpong.c"))
        .arg(build.join("libmdbus.a"))
        .args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
            "-o",
        ])
        .arg(&exe)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling examples/c/pingpong.c failed");

    let mut c = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    let mut rust = c.clone();
    for round in 0..rounds {
        let cfg = work.join(format!("round-{round}"));
        std::fs::create_dir_all(&cfg).expect("segment dir");
        let toml = cfg.join("bus.toml");
        std::fs::write(
            &toml,
            format!(
                "transport = \"shm\"\n[shm]\ndir = \"{}\"\n\
                 [streams.ping]\nmax_message = 64\n[streams.pong]\nmax_message = 64\n",
                cfg.display()
            ),
        )
        .expect("write config");
        let samples = work.join("samples.bin");
        let status = Command::new(&exe)
            .arg(&toml)
            .args([iters.to_string(), WARMUP.to_string()])
            .arg(&samples)
            .args(["0", "1"])
            .status()
            .expect("run pingpong");
        assert!(status.success(), "C pingpong failed");
        let raw = std::fs::read(&samples).expect("read samples");
        assert_eq!(
            raw.len() as u64,
            iters * 8,
            "C pingpong wrote too few samples"
        );
        for s in raw.chunks_exact(8) {
            c.saturating_record(u64::from_ne_bytes(s.try_into().unwrap()));
        }
        let bus = mdbus::Bus::new(mdbus::Config::from_file(&toml).expect("config")).expect("bus");
        rust_pingpong(&bus, iters, &mut rust);
    }
    std::fs::remove_dir_all(&work).ok();

    println!(
        "ping-pong over shm, {SIZE}-byte messages, {rounds} rounds x {iters} round trips \
         per language (after {WARMUP} warm-up), cores 0 and 1; round-trip time in ns"
    );
    println!("| percentile | C API | Rust API | C - Rust | C / Rust |");
    println!("| --- | --- | --- | --- | --- |");
    for q in [50.0, 90.0, 99.0, 99.9, 99.99] {
        let (a, b) = (c.value_at_percentile(q), rust.value_at_percentile(q));
        println!(
            "| p{q} | {a} | {b} | {} | {:.3} |",
            a as i64 - b as i64,
            a as f64 / b as f64
        );
    }
    println!("| max | {} | {} | | |", c.max(), rust.max());
}

/// The loop of examples/c/pingpong.c on the Rust API.
fn rust_pingpong(bus: &mdbus::Bus, iters: u64, h: &mut Histogram<u64>) {
    let ready = Arc::new(AtomicU32::new(0));
    let ponger = {
        let (bus, ready) = (bus.clone(), ready.clone());
        std::thread::spawn(move || {
            mdbus::affinity::Placement::from_cores([1]).pin(0).ok();
            let mut pong = bus.publisher("pong").expect("pong publisher");
            while ready.load(Ordering::Acquire) == 0 {}
            let mut ping = bus.subscriber("ping").expect("ping subscriber");
            ready.store(2, Ordering::Release);
            for _ in 0..iters + WARMUP {
                let v = wait_value(&mut ping);
                send_value(&mut pong, v);
            }
        })
    };
    mdbus::affinity::Placement::from_cores([0]).pin(0).ok();
    let mut ping = bus.publisher("ping").expect("ping publisher");
    ready.store(1, Ordering::Release);
    while ready.load(Ordering::Acquire) != 2 {}
    let mut pong = bus.subscriber("pong").expect("pong subscriber");
    for i in 0..iters + WARMUP {
        let t0 = Instant::now();
        send_value(&mut ping, i);
        let back = wait_value(&mut pong);
        let rtt = t0.elapsed().as_nanos() as u64;
        assert_eq!(back, i);
        if i >= WARMUP {
            h.saturating_record(rtt);
        }
    }
    ponger.join().expect("ponger");
}

fn send_value(p: &mut mdbus::Publisher, v: u64) {
    let mut c = p.claim(SIZE).expect("claim");
    c[..8].copy_from_slice(&v.to_ne_bytes());
    c.commit().expect("commit");
}

fn wait_value(s: &mut mdbus::Subscriber) -> u64 {
    let mut got = None;
    while got.is_none() {
        s.poll(|e| {
            if let mdbus::Event::Message(m) = e {
                if m.payload().len() == SIZE {
                    got = Some(u64::from_ne_bytes(m.payload()[..8].try_into().unwrap()));
                }
            }
        })
        .expect("poll");
    }
    got.unwrap_or_default()
}
