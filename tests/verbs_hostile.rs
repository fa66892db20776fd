//! Forged datagrams on RDMA UD multicast: in the Soft-RoCE lane's pair
//! set-up the publisher sends on rxe0 and the subscriber receives on rxe1;
//! a forger with its own queue pair on rxe0 (the publisher's GID, another
//! QPN) sends heartbeats with epoch 2^64-1 and `latest` 2^62, not-available
//! notices and ends of stream, with the stream id and epoch a listener on
//! rxe1 learned from the genuine traffic. The subscriber is bound to the
//! publisher's GID and QPN: every genuine message arrives once, in order,
//! and every forgery is counted as a foreign source.
//!
//! Without RDMA every test prints `SKIPPED: no RDMA device` and passes;
//! with `MDBUS_REQUIRE_RDMA=1` that is a failure.

mod verbs_support;

use std::time::Duration;

use mdbus::config::VerbsConfig;
use mdbus::recovery::frame::{encode_control, Kind, DATAGRAM_HEADER_LEN};
use mdbus::transport::datagram::DatagramLink;
use mdbus::transport::verbs::{UdLink, UdLinkConfig, UdPeer};
use mdbus::{Bus, Config, Event};
use verbs_support::{addr_a, addr_b, rdma_or_skip, unique_group};

fn link(name: &str, group: &str, interface: &str) -> UdLink {
    let cfg = UdLinkConfig {
        group: group.parse().unwrap(),
        interface: Some(interface.parse().unwrap()),
        max_datagram: 1024,
        recv_depth: 256,
        send_depth: 64,
        peer_cache: 4,
        join_timeout: Duration::from_secs(10),
        send_only: false,
    };
    UdLink::join(name, &cfg, &VerbsConfig::default()).unwrap()
}

fn bus(interface: String, group: &str) -> Bus {
    let toml = format!(
        "transport = \"verbs\"\n[streams.s]\nmax_message = 64\ngroup = \"{group}\"\n\
         interface = \"{interface}\"\nretransmit_timeout = \"20ms\"\n\
         heartbeat_interval = \"10ms\"\nheartbeat_timeout = \"5s\"\nlate_join = \"oldest\"\n"
    );
    Bus::new(Config::from_toml_str(&toml, "<verbs hostile>").unwrap()).unwrap()
}

#[test]
fn ud_forgeries_from_another_queue_pair_change_nothing() {
    if !rdma_or_skip("ud_forgeries_from_another_queue_pair_change_nothing") {
        return;
    }
    let group = unique_group();
    let mut listener = link("listener", &group, &addr_b());
    let mut forger = link("forger", &group, &addr_a());
    let mut p = bus(addr_a(), &group).publisher("s").unwrap();
    let mut s = bus(addr_b(), &group).subscriber("s").unwrap();
    p.publish(&1u64.to_le_bytes()).unwrap();
    p.flush().unwrap();
    // Learn what any host on the fabric can: stream id, epoch, source.
    let mut heard: Option<(UdPeer, u32, u64)> = None;
    for _ in 0..100_000_000u64 {
        p.service().unwrap();
        listener
            .poll(8, &mut |from: UdPeer, b: &[u8]| {
                if b.len() >= DATAGRAM_HEADER_LEN && heard.is_none() {
                    let id = u32::from_le_bytes(b[8..12].try_into().unwrap());
                    let epoch = u64::from_le_bytes(b[16..24].try_into().unwrap());
                    heard = Some((from, id, epoch));
                }
            })
            .unwrap();
        if heard.is_some() {
            break;
        }
    }
    let (genuine, id, epoch) = heard.expect("heard the publisher");
    assert_ne!(genuine.qpn, forger.local().qpn);
    let total = 10_000u64;
    let (mut next, mut seq, mut forged) = (1u64, 1u64, 0u64);
    let mut other = Vec::new();
    for _ in 0..200_000_000u64 {
        if seq < total {
            seq += 1;
            p.publish(&seq.to_le_bytes()).unwrap();
            if seq % 100 == 0 {
                forged += 1;
                let mut d = [0u8; DATAGRAM_HEADER_LEN];
                match forged % 4 {
                    0 => encode_control(&mut d, Kind::Heartbeat, id, u64::MAX, seq, 1),
                    1 => encode_control(&mut d, Kind::Heartbeat, id, epoch, 1 << 62, 1),
                    2 => encode_control(&mut d, Kind::NotAvailable, id, epoch, seq - 50, 50),
                    _ => encode_control(&mut d, Kind::EndOfStream, id, epoch, seq, 1),
                }
                forger.send_group(&d).unwrap();
            }
        }
        p.service().unwrap();
        s.poll(|e| match e {
            Event::Message(m) => {
                assert_eq!(m.seq(), next, "in order, exactly once");
                assert_eq!(m.payload(), next.to_le_bytes());
                next += 1;
            }
            e => other.push(format!("{e:?}")),
        })
        .unwrap();
        if next > total {
            break;
        }
    }
    assert_eq!(next - 1, total, "{other:?}");
    assert!(other.is_empty(), "{other:?}");
    let c = s.recovery_counters().unwrap();
    // UD multicast may lose a forgery like any datagram; none is believed.
    assert!(
        c.drops.foreign_source > 0 && c.drops.foreign_source <= forged,
        "{c:?}"
    );
    assert_eq!(
        (c.gap_events, c.restarts, c.unrecoverable),
        (0, 0, 0),
        "{c:?}"
    );
}
