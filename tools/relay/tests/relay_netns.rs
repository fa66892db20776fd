//! End to end across network namespaces: the exchange simulator on one
//! host (lines A and B, each losing packets independently, and its
//! re-request server), the relay on a second, publishing four streams on
//! UDP multicast, and three subscriber hosts that each read every stream:
//! every message delivered, in order, per stream, on every host.
//!
//! Each host is a network namespace on one switched network
//! (tests/netns); each role is a thread of this process that enters its
//! host's namespace (`setns`) before it creates its sockets. The loss is
//! the network's: nftables rules at the relay host's ingress drop 3% of
//! line A and, drawing their own random numbers, 3% of line B. Where `nft`
//! is missing the simulator drops the same shares itself, independently
//! per line. Needs root and iproute2; prints SKIPPED otherwise (fails under CI).

#[path = "../../../tests/netns/mod.rs"]
mod netns;
mod relay_common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use mdbus_exchange::{Exchange, ExchangeConfig};
use mdbus_feed::moldudp64::Session;
use mdbus_feed::synth::{Generator, SynthConfig};
use mdbus_relay::{Relay, RelayConfig, RunOptions};
use netns::Topology;
use relay_common::*;

const DEADLINE: Duration = Duration::from_secs(240);
const SIM: usize = 0;
const RELAY: usize = 1;
const SUBSCRIBERS: [usize; 3] = [2, 3, 4];

/// Moves the calling thread into network namespace `name`.
fn enter(name: &str) {
    let f = std::fs::File::open(format!("/run/netns/{name}")).expect("namespace file");
    // SAFETY: a valid namespace file descriptor and CLONE_NEWNET; it
    // changes only the calling thread's network namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {name}: {}", std::io::Error::last_os_error());
}

fn synth() -> SynthConfig {
    SynthConfig {
        seed: 31,
        symbols: 30,
        order_messages: 15_000,
        ..SynthConfig::default()
    }
}

/// The bus of host `h`: four streams on UDP multicast, sent and joined on
/// the host's own address.
fn bus(t: &Topology, h: usize, port: u16) -> String {
    let mut s = String::from("[bus]\ntransport = \"udp\"\n");
    for (i, name) in STREAMS.iter().enumerate() {
        s.push_str(&format!(
            "[bus.streams.{name}]\ngroup = \"239.192.84.{}:{port}\"\ninterface = \"{}\"\nttl = 1\ncapacity = 65536\nlate_join = \"oldest\"\nloopback = false\n",
            i + 1,
            t.addr(h, 0)
        ));
    }
    s
}

/// Table and chain of the loss rules.
const LOSS_CHAIN: [&str; 2] = ["relay_loss", "lines"];

/// Drops `per_mille` of the datagrams to `a` and, independently, of those
/// to `b` as they enter the relay host. False when nftables is missing.
fn lose_on_each_line(t: &Topology, a: SocketAddrV4, b: SocketAddrV4, per_mille: u32) -> bool {
    let have_nft = std::process::Command::new("nft")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_nft {
        return false;
    }
    let rule = |g: SocketAddrV4| {
        format!(
            "  ip daddr {} udp dport {} numgen random mod 1000 < {per_mille} counter drop\n",
            g.ip(),
            g.port()
        )
    };
    let rules = format!(
        "table ip {} {{\n chain {} {{\n  type filter hook prerouting priority -300; policy accept;\n{}{} }}\n}}\n",
        LOSS_CHAIN[0],
        LOSS_CHAIN[1],
        rule(a),
        rule(b)
    );
    let mut nft = t
        .exec(RELAY, &["nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("nft runs");
    nft.stdin
        .take()
        .expect("nft's stdin")
        .write_all(rules.as_bytes())
        .expect("rules written to nft");
    assert!(
        nft.wait().expect("nft ends").success(),
        "nft took the rules:\n{rules}"
    );
    true
}

/// Datagrams the two loss rules dropped, line A's then line B's.
fn dropped_per_line(t: &Topology) -> Vec<u64> {
    let out = t
        .exec(
            RELAY,
            &["nft", "list", "chain", "ip", LOSS_CHAIN[0], LOSS_CHAIN[1]],
        )
        .output()
        .expect("nft lists the chain");
    String::from_utf8_lossy(&out.stdout)
        .split("packets ")
        .skip(1)
        .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

#[test]
fn simulator_relay_and_three_subscriber_hosts() {
    if let Err(why) = Topology::available(false) {
        mdbus_testkit::skip(
            "simulator_relay_and_three_subscriber_hosts",
            mdbus_testkit::Lack::Tool,
            &why,
        );
        return;
    }
    let t = Topology::new(5, 1);
    let port = 41_000 + (std::process::id() % 10_000) as u16;
    let sim_addr: Ipv4Addr = t.addr(SIM, 0).parse().unwrap();
    let line_a = SocketAddrV4::new(Ipv4Addr::new(239, 192, 85, 1), port);
    let line_b = SocketAddrV4::new(Ipv4Addr::new(239, 192, 85, 2), port);
    let rerequest = SocketAddrV4::new(sim_addr, port + 1);
    let sent: Vec<(u64, Vec<u8>)> = (1..)
        .zip(
            Generator::new(&synth())
                .unwrap()
                .map(|m| m.bytes().to_vec()),
        )
        .collect();
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for (_, m) in &sent {
        for s in expected_streams(m) {
            *want.entry(s.to_string()).or_default() += 1;
        }
    }

    // Subscribers first, so they hear the first message.
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut subscribers = Vec::new();
    for h in SUBSCRIBERS {
        let ns = t.hosts[h].clone();
        let cfg = bus(&t, h, port) + ROUTING + "[input]\nline_a = \"239.1.1.1:1\"\n";
        let cfg = RelayConfig::from_toml_str(&cfg, "<sub>").unwrap();
        let want = want.clone();
        let ready = ready_tx.clone();
        subscribers.push(std::thread::spawn(move || {
            enter(&ns);
            let b = mdbus::Bus::new(cfg.bus).unwrap();
            let mut subs: Vec<_> = STREAMS.iter().map(|s| b.subscriber(s).unwrap()).collect();
            ready.send(()).unwrap();
            collect(&mut subs, &want, DEADLINE)
        }));
    }
    for _ in SUBSCRIBERS {
        ready_rx
            .recv_timeout(DEADLINE)
            .expect("a subscriber started");
    }

    // The relay joins before the simulator sends.
    let relay_cfg = format!(
        "[input]\nline_a = \"{line_a}\"\nline_b = \"{line_b}\"\ninterface = \"{}\"\nrerequest = \"{rerequest}\"\n\
         start_sequence = 1\nstop_at_end_of_session = true\n\
         [counters]\npath = \"\"\nlog_interval = \"0s\"\n[thread]\npin = false\nidle = \"yield\"\n{}{ROUTING}",
        t.addr(RELAY, 0),
        bus(&t, RELAY, port),
    );
    let relay_cfg = RelayConfig::from_toml_str(&relay_cfg, "<relay>").unwrap();
    let relay_ns = t.hosts[RELAY].clone();
    let (relay_ready_tx, relay_ready_rx) = mpsc::channel();
    let relay = std::thread::spawn(move || {
        enter(&relay_ns);
        let r = Relay::new(relay_cfg, "<relay>").unwrap();
        relay_ready_tx.send(()).unwrap();
        r.run(&RunOptions {
            duration: Some(DEADLINE),
            log: false,
            ..RunOptions::default()
        })
        .unwrap()
    });
    relay_ready_rx
        .recv_timeout(DEADLINE)
        .expect("the relay started");

    // 3% loss on each line, independently: in the network when nftables
    // is here, else at the simulator.
    let network_loss = lose_on_each_line(&t, line_a, line_b, 30);
    let sim_drop = if network_loss { 0.0 } else { 0.03 };
    let sim_ns = t.hosts[SIM].clone();
    let exchange = std::thread::spawn(move || {
        enter(&sim_ns);
        let ex = Exchange::start(ExchangeConfig {
            session: Session::new("NETNS00001").unwrap(),
            line_a,
            line_b,
            interface: sim_addr,
            ttl: 1,
            drop_a: sim_drop,
            drop_b: sim_drop,
            seed: 5,
            synth: synth(),
            messages_per_second: 50_000,
            max_packet: 1400,
            rerequest_bind: rerequest,
            heartbeat_interval: Duration::from_millis(50),
            repeat: false,
        })
        .unwrap();
        assert!(ex.wait_finished(DEADLINE), "the simulator finished its day");
        ex
    });

    let summary = relay.join().expect("relay thread");
    let got: Vec<_> = subscribers
        .into_iter()
        .map(|s| s.join().expect("subscriber thread"))
        .collect();
    let ex = exchange.join().expect("simulator thread").stop();

    assert_eq!(summary.ended_by, "end-of-session", "{summary:?}");
    let c = &summary.counters;
    assert_eq!(c.local.messages_in, sent.len() as u64);
    assert_eq!(c.upstream.unrecoverable, 0);
    if network_loss {
        let dropped = dropped_per_line(&t);
        assert_eq!(dropped.len(), 2, "two loss rules");
        assert!(
            dropped.iter().all(|&d| d > 0),
            "both lines lost: {dropped:?}"
        );
        assert!(c.upstream.gaps > 0, "{c:?}");
        eprintln!(
            "lost in the network: A {}, B {} datagrams; relay: {} gaps, {} recovered from the server",
            dropped[0], dropped[1], c.upstream.gaps, c.upstream.wins_recovery
        );
    } else {
        assert!(ex.dropped_a > 0 && ex.dropped_b > 0, "{ex:?}");
        if ex.dropped_both > 0 {
            assert!(c.upstream.wins_recovery > 0, "{c:?}");
        }
    }
    // Every message either line lost came from the other line or from
    // the re-request server.
    assert_eq!(
        c.upstream.wins_a + c.upstream.wins_b + c.upstream.wins_recovery,
        c.local.messages_in
    );
    for (h, g) in SUBSCRIBERS.iter().zip(&got) {
        eprintln!(
            "host {h}: {:?}",
            g.iter()
                .map(|(k, v)| (k, v.messages.len()))
                .collect::<Vec<_>>()
        );
        check_delivery(&sent, g);
    }
}
