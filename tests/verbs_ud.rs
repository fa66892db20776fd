//! The UD multicast link on real RDMA devices: in the Soft-RoCE lane's pair
//! set-up, rxe0 (10.99.0.1) sends to a group and rxe1 (10.99.0.2)
//! receives; replies go back by unicast to the peer a datagram came from.
//!
//! Without RDMA every test prints `SKIPPED: no RDMA device` and passes;
//! with `MDBUS_REQUIRE_RDMA=1` that is a failure. No sleeps: receivers poll
//! until a bounded number of empty polls.

mod verbs_support;

use std::time::Duration;

use mdbus::config::VerbsConfig;
use mdbus::transport::datagram::DatagramLink;
use mdbus::transport::verbs::{self, Membership, UdLink, UdLinkConfig, UdPeer};
use mdbus::Error;
use verbs_support::{addr_a, addr_b, rdma_or_skip, unique_group};

/// Empty polls a receiver makes before giving up on a datagram.
const PATIENCE: u64 = 20_000_000;

fn link_cfg(group: &str, interface: &str) -> UdLinkConfig {
    UdLinkConfig {
        group: group.parse().unwrap(),
        interface: Some(interface.parse().unwrap()),
        max_datagram: 1472,
        recv_depth: 1024,
        send_depth: 256,
        peer_cache: 4,
        join_timeout: Duration::from_secs(10),
        send_only: false,
    }
}

fn join(name: &str, group: &str, interface: &str) -> UdLink {
    UdLink::join(name, &link_cfg(group, interface), &VerbsConfig::default()).unwrap()
}

/// Datagram `i`: its number, then a pattern, `len` bytes in all.
fn datagram(i: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = i.to_le_bytes().to_vec();
    v.extend((0..len.saturating_sub(4)).map(|k| (k as u32).wrapping_mul(31).wrapping_add(i) as u8));
    v.truncate(len.max(4));
    v
}

/// Polls `link` until `want` datagrams not from `skip` arrived, or
/// PATIENCE empty polls in a row.
fn collect(link: &mut UdLink, want: usize, skip: Option<UdPeer>) -> Vec<(UdPeer, Vec<u8>)> {
    let mut got = Vec::new();
    let mut empty = 0u64;
    while got.len() < want && empty < PATIENCE {
        let n = link
            .poll(64, &mut |p: UdPeer, b: &[u8]| {
                if Some(p) != skip {
                    got.push((p, b.to_vec()));
                }
            })
            .unwrap();
        if n == 0 {
            empty += 1;
        } else {
            empty = 0;
        }
    }
    got
}

fn lengths(max: usize) -> impl Fn(u32) -> usize {
    move |i| 4 + (i as usize * 7919) % (max - 3)
}

/// rxe0 sends 2 000 datagrams of every size up to the MTU; two receivers
/// on rxe1 each get every one, intact, from rxe0's QP; nothing is dropped.
#[test]
fn multicast_from_rxe0_reaches_every_receiver_on_rxe1() {
    if !rdma_or_skip("multicast_from_rxe0_reaches_every_receiver_on_rxe1") {
        return;
    }
    let group = unique_group();
    let mut tx = join("tx", &group, &addr_a());
    let mut rx1 = join("rx1", &group, &addr_b());
    let mut rx2 = join("rx2", &group, &addr_b());
    assert_ne!(
        tx.device(),
        rx1.device(),
        "sender and receivers on different devices"
    );
    let mtu = verbs::probe()
        .unwrap()
        .into_iter()
        .find(|d| d.name == tx.device())
        .unwrap()
        .ports[0]
        .active_mtu;
    assert_eq!(tx.max_datagram(), 1472.min(mtu));
    let max = tx.max_datagram();
    let len = lengths(max);
    const ROUNDS: u32 = 40;
    const PER_ROUND: u32 = 50;
    for round in 0..ROUNDS {
        // Rounds smaller than the receive rings: a receiver that polls
        // after the burst still has a buffer for every datagram.
        let first = round * PER_ROUND;
        for i in first..first + PER_ROUND {
            tx.send_group(&datagram(i, len(i))).unwrap();
        }
        for rx in [&mut rx1, &mut rx2] {
            let got = collect(rx, PER_ROUND as usize, None);
            assert_eq!(
                got.len(),
                PER_ROUND as usize,
                "round {round}: lost datagrams"
            );
            for (k, (peer, bytes)) in got.iter().enumerate() {
                let i = first + k as u32;
                assert_eq!(*peer, tx.local(), "sender identified from the GRH");
                assert_eq!(
                    bytes,
                    &datagram(i, len(i)),
                    "datagram {i} intact and in order"
                );
            }
        }
    }
    assert_eq!(tx.sent(), u64::from(ROUNDS * PER_ROUND));
    assert_eq!(tx.dropped(), 0);
    assert_eq!(rx1.dropped(), 0);
    assert_eq!(rx2.received(), u64::from(ROUNDS * PER_ROUND));
}

/// A receiver replies by unicast to the peer a multicast datagram came
/// from, and the sender replies to that reply: both directions arrive, and
/// the cached address handle is reused.
#[test]
fn unicast_replies_reach_the_sender_of_a_datagram() {
    if !rdma_or_skip("unicast_replies_reach_the_sender_of_a_datagram") {
        return;
    }
    let group = unique_group();
    let mut tx = join("tx", &group, &addr_a());
    let mut rx = join("rx", &group, &addr_b());
    for i in 0..20u32 {
        tx.send_group(&datagram(i, 100)).unwrap();
        let got = collect(&mut rx, 1, None);
        assert_eq!(got.len(), 1, "datagram {i} arrived");
        let (from, bytes) = &got[0];
        assert_eq!(bytes, &datagram(i, 100));
        // Reply to the peer the datagram came from (a multicast datagram:
        // the handle is built from its GID).
        let reply = datagram(1000 + i, 60);
        rx.send_to(*from, &reply).unwrap();
        let me = tx.local();
        let back = collect(&mut tx, 1, Some(me));
        assert_eq!(back.len(), 1, "reply {i} arrived");
        assert_eq!(back[0].0, rx.local());
        assert_eq!(back[0].1, reply);
        // And answer the reply (a unicast datagram).
        let again = datagram(2000 + i, 30);
        tx.send_to(back[0].0, &again).unwrap();
        let got = collect(&mut rx, 1, None);
        assert_eq!(got.len(), 1, "answer {i} arrived");
        assert_eq!(got[0], (tx.local(), again));
    }
    assert_eq!(rx.dropped() + tx.dropped(), 0);
}

/// A send-only line (a stream publisher's) gets none of its own datagrams
/// to the group back, while a full member on the same device, and the
/// receiver on the other, get every one; unicast datagrams (retransmit
/// requests) still reach it. A full member that sends gets its own back:
/// one receive completion per datagram sent.
#[test]
fn a_send_only_line_receives_unicast_but_not_its_own_multicast() {
    if !rdma_or_skip("a_send_only_line_receives_unicast_but_not_its_own_multicast") {
        return;
    }
    const N: u32 = 200;
    let group = unique_group();
    let send_only = UdLinkConfig {
        send_only: true,
        ..link_cfg(&group, &addr_a())
    };
    let mut tx = UdLink::join("tx", &send_only, &VerbsConfig::default()).unwrap();
    eprintln!("send-only line: {:?}", tx.membership());
    assert!(!tx.membership().receives_group(), "{:?}", tx.membership());
    let mut local = join("local", &group, &addr_a());
    assert_eq!(local.membership(), Membership::Full);
    let mut rx = join("rx", &group, &addr_b());
    for i in 0..N {
        tx.send_group(&datagram(i, 100)).unwrap();
    }
    for link in [&mut local, &mut rx] {
        let got = collect(link, N as usize, None);
        assert_eq!(got.len(), N as usize, "every datagram reached a member");
        assert!(got.iter().all(|(p, _)| *p == tx.local()));
    }
    // The request is sent after the group's datagrams arrived on tx's own
    // device, so an attached QP would have them queued ahead of it.
    let request = datagram(9999, 24);
    rx.send_to(tx.local(), &request).unwrap();
    let got = collect(&mut tx, 1, None);
    assert_eq!(got, vec![(rx.local(), request)], "only the request");
    assert_eq!(tx.received(), 1, "none of its own {N} datagrams");
    assert_eq!(tx.sent(), u64::from(N));

    // The same on a full member: every datagram comes back to its sender.
    let mut full = join("full", &unique_group(), &addr_a());
    for i in 0..N {
        full.send_group(&datagram(i, 100)).unwrap();
    }
    let own = collect(&mut full, N as usize, None);
    assert_eq!(own.len(), N as usize);
    assert!(own.iter().all(|(p, _)| *p == full.local()));
    eprintln!(
        "receive completions per datagram sent: send-only {}/{}, full member {}/{}",
        tx.received() - 1,
        tx.sent(),
        full.received(),
        full.sent()
    );
}

/// More peers than the cache holds: replies keep working while handles are
/// evicted and recreated.
#[test]
fn replies_to_more_peers_than_the_cache_holds() {
    if !rdma_or_skip("replies_to_more_peers_than_the_cache_holds") {
        return;
    }
    let group = unique_group();
    let mut server = join("server", &group, &addr_b());
    // peer_cache is 4: six clients force evictions.
    let mut clients: Vec<UdLink> = (0..6)
        .map(|k| join(&format!("c{k}"), &group, &addr_a()))
        .collect();
    for round in 0..3u32 {
        for (k, c) in clients.iter_mut().enumerate() {
            let local = c.local();
            let req = datagram(round * 100 + k as u32, 20);
            server.send_to(local, &req).unwrap();
            let got = collect(c, 1, Some(local));
            assert_eq!(got.len(), 1, "round {round} client {k}");
            assert_eq!(got[0], (server.local(), req));
        }
    }
}

/// Drops are counted, never hidden: with a send queue of 4, a burst may
/// find it full; what was not dropped arrives, exactly.
#[test]
fn drops_are_counted_and_everything_else_arrives() {
    if !rdma_or_skip("drops_are_counted_and_everything_else_arrives") {
        return;
    }
    let group = unique_group();
    let small = UdLinkConfig {
        send_depth: 4,
        ..link_cfg(&group, &addr_a())
    };
    let mut tx = UdLink::join("tx", &small, &VerbsConfig::default()).unwrap();
    let mut rx = join("rx", &group, &addr_b());
    let mut total_sent = 0u64;
    for round in 0..10u32 {
        let mut sent = Vec::new();
        let mut dropped = 0u64;
        for i in 0..100u32 {
            let before = (tx.sent(), tx.dropped());
            let d = datagram(round * 100 + i, 200);
            tx.send_group(&d).unwrap();
            match (tx.sent() - before.0, tx.dropped() - before.1) {
                (1, 0) => sent.push(d),
                (0, 1) => dropped += 1,
                other => panic!("datagram {i}: sent and dropped moved by {other:?}"),
            }
        }
        assert_eq!(sent.len() as u64 + dropped, 100);
        let got = collect(&mut rx, sent.len(), None);
        let got: Vec<Vec<u8>> = got.into_iter().map(|(_, b)| b).collect();
        // Exactly the datagrams sent, in order: nothing dropped silently,
        // nothing counted as dropped that arrived.
        assert_eq!(got, sent, "round {round}");
        total_sent += sent.len() as u64;
    }
    assert_eq!(rx.received(), total_sent);
    eprintln!("send-queue drops: {} of 1000", tx.dropped());
}

/// A datagram over the link's maximum is refused, not truncated.
#[test]
fn oversized_datagram_is_refused() {
    if !rdma_or_skip("oversized_datagram_is_refused") {
        return;
    }
    let group = unique_group();
    let mut tx = join("stream `md` line A", &group, &addr_a());
    let max = tx.max_datagram();
    let err = tx.send_group(&vec![0u8; max + 1]).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("a {}-byte message is larger than the {max}-byte maximum of stream `md` line A; raise max_message in its configuration", max + 1)
    );
    tx.send_group(&vec![7u8; max]).unwrap();
}
