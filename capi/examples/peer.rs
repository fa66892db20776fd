//! A Rust process on the other end of a channel, for tests of the bindings
//! (python/tests): it publishes, subscribes, accepts or connects a session
//! on the bus a TOML file describes, and reports what it saw on stdout, one
//! line per fact, so the test on the other side can assert counts, order
//! and bytes.
//!
//! ```sh
//! cargo build --release -p mdbus-capi --example peer
//! peer publish CONFIG STREAM COUNT   # "ready"; waits for "go" on stdin; publishes
//!                                    # COUNT messages (payload_of); "published LAST";
//!                                    # waits for "done" (or EOF), then closes the stream
//! peer subscribe CONFIG STREAM       # "ready"; then every event to end of stream:
//!                                    # "message SEQ HEX", "gap FROM TO", ..., "end LAST"
//! peer accept CONFIG SESSION         # "accepted"; answers every message M with
//!                                    # "ACK " + M; "closed after N" once the peer closed
//! peer connect CONFIG SESSION COUNT  # "connected"; sends "order I" for I in 1..=COUNT,
//!                                    # checks the COUNT acks, "acked COUNT", closes
//! ```
//!
//! Readiness is the printed line: the other side waits for it instead of
//! sleeping. Exit status 0 on success, 1 with the error on stderr.

use std::io::{BufRead, Write};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Payload of the `i`th message (from 1) that `publish` sends: `"{i}:"`
/// then `i % 40` bytes `(i * 7 + k) % 256`, so lengths and bytes vary and a
/// test can compute every one.
fn payload_of(i: u64) -> Vec<u8> {
    let mut p = format!("{i}:").into_bytes();
    p.extend((0..i % 40).map(|k| ((i * 7 + k) % 256) as u8));
    p
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Blocks until stdin has `word` on a line (Ok(true)) or ends (Ok(false)).
fn wait_for(word: &str) -> Result<bool> {
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == word {
            return Ok(true);
        }
    }
    Ok(false)
}

fn bus(path: &str) -> Result<mdbus::Bus> {
    Ok(mdbus::Bus::new(mdbus::Config::from_file(path)?)?)
}

fn publish(bus: &mdbus::Bus, stream: &str, count: u64) -> Result<()> {
    let mut p = bus.publisher(stream)?;
    say("ready")?;
    if !wait_for("go")? {
        return Err("stdin ended before \"go\"".into());
    }
    let mut last = 0;
    for i in 1..=count {
        last = p.publish(&payload_of(i))?;
    }
    p.flush()?;
    say(&format!("published {last}"))?;
    // Retransmissions (datagram transports) come from the bus's service
    // thread or from here: serve until told the subscriber has everything.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let r = wait_for("done");
            done.store(true, std::sync::atomic::Ordering::Release);
            r.map(drop).map_err(|e| e.to_string())
        })
    };
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        p.service()?;
        std::thread::yield_now();
    }
    reader.join().map_err(|_| "stdin reader panicked")??;
    drop(p);
    Ok(())
}

fn subscribe(bus: &mdbus::Bus, stream: &str) -> Result<()> {
    let mut s = bus.subscriber(stream)?;
    say("ready")?;
    let mut lines = Vec::new();
    let mut end = false;
    while !end {
        s.poll(|e| {
            lines.push(match e {
                mdbus::Event::Message(m) => format!("message {} {}", m.seq(), hex(m.payload())),
                mdbus::Event::Overrun { from, to } => format!("overrun {from} {to}"),
                mdbus::Event::Gap { from, to } => format!("gap {from} {to}"),
                mdbus::Event::SourceGap { from, to } => format!("source_gap {from} {to}"),
                mdbus::Event::PublisherRestarted { epoch } => format!("restarted {epoch}"),
                mdbus::Event::PublisherDown { last_seq } => {
                    end = true;
                    format!("down {last_seq}")
                }
                mdbus::Event::EndOfStream { last_seq } => {
                    end = true;
                    format!("end {last_seq}")
                }
            })
        })?;
        for l in lines.drain(..) {
            say(&l)?;
        }
    }
    Ok(())
}

fn accept(bus: &mdbus::Bus, name: &str) -> Result<()> {
    let mut s = bus.session_accept(name)?;
    say("accepted")?;
    let mut got = Vec::new();
    let mut n = 0u64;
    loop {
        match s.poll(|m| got.push([b"ACK ", m.payload()].concat())) {
            Ok(_) => {}
            Err(mdbus::Error::PeerClosed { .. }) => break,
            Err(e) => return Err(e.into()),
        }
        for ack in got.drain(..) {
            s.send(&ack)?;
            n += 1;
        }
    }
    say(&format!("closed after {n}"))?;
    s.close();
    Ok(())
}

fn connect(bus: &mdbus::Bus, name: &str, count: u64) -> Result<()> {
    let mut s = bus.session_connect(name)?;
    say("connected")?;
    for i in 1..=count {
        s.send(format!("order {i}").as_bytes())?;
    }
    let mut acks = Vec::new();
    while (acks.len() as u64) < count {
        s.poll(|m| acks.push(m.payload().to_vec()))?;
    }
    for (i, ack) in (1..).zip(&acks) {
        let want = format!("ACK order {i}");
        if ack != want.as_bytes() {
            return Err(format!(
                "ack {i} is {:?}, expected {want:?}",
                String::from_utf8_lossy(ack)
            )
            .into());
        }
    }
    say(&format!("acked {count}"))?;
    s.close();
    Ok(())
}

fn run(args: &[String]) -> Result<()> {
    let count = |s: &str| -> Result<u64> {
        s.parse()
            .map_err(|_| format!("COUNT {s:?} is not a number").into())
    };
    match args {
        [cmd, cfg, stream, n] if cmd == "publish" => publish(&bus(cfg)?, stream, count(n)?),
        [cmd, cfg, stream] if cmd == "subscribe" => subscribe(&bus(cfg)?, stream),
        [cmd, cfg, name] if cmd == "accept" => accept(&bus(cfg)?, name),
        [cmd, cfg, name, n] if cmd == "connect" => connect(&bus(cfg)?, name, count(n)?),
        _ => Err(
            "usage: peer publish CONFIG STREAM COUNT | subscribe CONFIG STREAM | \
                  accept CONFIG SESSION | connect CONFIG SESSION COUNT"
                .into(),
        ),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("peer: {e}");
        std::process::exit(1);
    }
}
