//! What the service thread's hand-off costs on the publish path: a UDP
//! publisher on loopback, with and without `[service] thread = true`, in
//! one run.
//!
//! ```sh
//! cargo run --release -p mdbus-capi --example service_handoff
//! ```
//!
//! Three loops per setting, each the median of 5 batches: `next_seq()`
//! (the handshake alone: enter, read a field, leave), `claim` then drop (no
//! send) and `publish` of 32 bytes (with the sendto system call). The service thread
//! runs with a round every 1 ms (the default) and every 1 s, which tells
//! the handshake's own cost from that of the rounds (membarrier's
//! interruptions, the thread's own work on a shared machine).

use std::time::Instant;

const CLAIMS: u32 = 2_000_000;
const PUBLISHES: u32 = 100_000;

fn bus(service: Option<&str>, port: u32) -> mdbus::Bus {
    let service = match service {
        Some(interval) => format!("thread = true\ninterval = \"{interval}\""),
        None => "thread = false".into(),
    };
    let toml = format!(
        "transport = \"udp\"\n[service]\n{service}\n\
         [streams.md]\nmax_message = 64\ncapacity = 65536\n\
         group = \"239.253.{}.1:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\n",
        1 + std::process::id() % 250
    );
    mdbus::Bus::new(mdbus::Config::from_toml_str(&toml, "<bench>").unwrap()).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(service: Option<&str>, port: u32) -> (f64, f64, f64) {
    let bus = bus(service, port);
    let mut p = bus.publisher("md").unwrap();
    // The handshake alone: enter, read a field, leave.
    let getters = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..CLAIMS {
                std::hint::black_box(p.next_seq());
            }
            t.elapsed().as_nanos() as f64 / f64::from(CLAIMS)
        })
        .collect();
    let claims = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..CLAIMS {
                let c = p.claim(32).unwrap();
                std::hint::black_box(&c);
            }
            t.elapsed().as_nanos() as f64 / f64::from(CLAIMS)
        })
        .collect();
    let payload = [7u8; 32];
    let publishes = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..PUBLISHES {
                p.publish(&payload).unwrap();
            }
            t.elapsed().as_nanos() as f64 / f64::from(PUBLISHES)
        })
        .collect();
    (median(claims), median(publishes), median(getters))
}

fn main() {
    let port = 43_000 + std::process::id() % 1000;
    let off = measure(None, port);
    let on = measure(Some("1ms"), port + 1);
    let slow = measure(Some("1s"), port + 2);
    println!("UDP publisher on loopback, ns per operation (median of 5 batches)");
    println!("| operation | no service thread | service thread, interval 1ms | interval 1s |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| next_seq() | {:.1} | {:.1} | {:.1} |",
        off.2, on.2, slow.2
    );
    println!(
        "| claim + drop | {:.1} | {:.1} | {:.1} |",
        off.0, on.0, slow.0
    );
    println!(
        "| publish 32 B | {:.0} | {:.0} | {:.0} |",
        off.1, on.1, slow.1
    );
}
