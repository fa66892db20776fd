//! Loss recovery on RDMA UD multicast: in the Soft-RoCE lane's pair set-up
//! the publisher sends on rxe0 (over veth0) and the subscriber receives on
//! rxe1, with `tc netem` dropping RoCE packets on veth0. Every message must
//! still arrive exactly once and in order, recovered by retransmission.
//!
//! Needs the lane's guest (RDMA devices, netem, root). Elsewhere it prints
//! `SKIPPED` and passes; with MDBUS_REQUIRE_RDMA=1 a missing device fails.

mod verbs_support;

use std::process::Command;

use mdbus::{Bus, Config, Event};
use verbs_support::{addr_a, addr_b, rdma_or_skip, unique_group};

/// Removes the netem qdisc again, whatever happens in the test.
struct Netem(&'static str);

impl Netem {
    fn add(dev: &'static str, spec: &str) -> Result<Netem, String> {
        let mut args = vec!["qdisc", "replace", "dev", dev, "root", "netem"];
        args.extend(spec.split_whitespace());
        match Command::new("tc").args(&args).output() {
            Ok(o) if o.status.success() => Ok(Netem(dev)),
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", self.0, "root"])
            .output();
    }
}

fn bus(interface: String, group: &str) -> Bus {
    let toml = format!(
        "transport = \"verbs\"\n[streams.s]\nmax_message = 64\ncapacity = 65536\n\
         group = \"{group}\"\ninterface = \"{interface}\"\nautoflush = false\n\
         retransmit_timeout = \"50ms\"\nretransmit_retries = 40\n\
         heartbeat_interval = \"10ms\"\nheartbeat_timeout = \"5s\"\n"
    );
    Bus::new(Config::from_toml_str(&toml, "<verbs recovery>").unwrap()).unwrap()
}

#[test]
fn ud_multicast_loss_is_recovered_exactly_once_in_order() {
    if !rdma_or_skip("verbs_recovery") {
        return;
    }
    let netem = match Netem::add("veth0", "loss 5%") {
        Ok(n) => n,
        Err(why) if std::env::var("MDBUS_REQUIRE_NETNS").as_deref() == Ok("1") => {
            panic!("netem on veth0 is required here: {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: verbs_recovery: cannot add netem on veth0: {why}");
            return;
        }
    };
    let group = unique_group();
    let mut p = bus(addr_a(), &group).publisher("s").unwrap();
    let mut s = bus(addr_b(), &group).subscriber("s").unwrap();
    let total = 100_000u64;
    let (mut sent, mut next) = (0u64, 1u64);
    for _ in 0..100_000_000u64 {
        // Sixteen 64-byte messages to a datagram, a datagram per round,
        // never more than a few thousand messages ahead of the reader.
        if sent < total && sent < next + 4096 {
            for _ in 0..16 {
                sent += 1;
                p.publish(&sent.to_le_bytes().repeat(8)).unwrap();
            }
            p.flush().unwrap();
        }
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.seq(), next, "in order, exactly once");
                assert_eq!(m.payload(), &next.to_le_bytes().repeat(8)[..]);
                next += 1;
            }
            other => panic!("unexpected {other:?}"),
        })
        .unwrap();
        if next > total {
            break;
        }
    }
    drop(netem);
    let c = s.recovery_counters().unwrap();
    assert_eq!(next - 1, total, "{c:?}");
    assert!(c.recovered > 0, "netem dropped nothing? {c:?}");
    assert_eq!(c.unrecoverable, 0, "{c:?}");
    eprintln!(
        "verbs_recovery: {total} messages, recovered {}, requested {}, duplicates {}",
        c.recovered, c.messages_requested, c.duplicates
    );
}
