//! The RDMA device deleted under a streaming RC session
//! (`rdma link delete`): both ends report an `RdmaFault` with their
//! sequences, and the lane's device is re-created afterwards.
//!
//! A binary of its own, with the sessions in a child process: Soft-RoCE
//! cannot take a device away from a process that still has it open, so
//! the deletion completes only once the child has exited, and the parent
//! (which never opens the device through rdma_cm) then re-creates it.
//! Without RDMA the test prints `SKIPPED: no RDMA device` and passes; with
//! `MDBUS_REQUIRE_RDMA=1` that is a failure.

mod verbs_support;

use std::io::{BufRead, BufReader, Write};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use mdbus::config::{SessionConfig, VerbsConfig};
use mdbus::transport::verbs::{self, RcSession};
use mdbus::transport::SessionEnd;
use verbs_support::{addr_a, rdma_or_skip, unique_port};

const ROLE: &str = "MDBUS_VERBS_REMOVAL_ROLE";
/// Only guards against a hang of the whole lane: a child that has not
/// reported by then is killed (which releases the device) and the test
/// fails. Passing never depends on it.
const HANG_GUARD: Duration = Duration::from_secs(300);

fn report(msg: &str) {
    let mut o = std::io::stdout().lock();
    writeln!(o, "peer: {msg}").unwrap();
    o.flush().unwrap();
}

#[test]
#[ignore = "entry point of the child process started by the test"]
fn child_entry() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    let scfg = SessionConfig {
        address: format!("{}:{}", addr_a(), unique_port()),
        capacity: 16,
        max_message: 64,
        ..SessionConfig::default()
    };
    let vcfg = VerbsConfig {
        signal_every: 1,
        keepalive_interval: Duration::from_millis(100),
        keepalive_timeout: Duration::from_secs(2),
        ..VerbsConfig::default()
    };
    let acceptor = std::thread::spawn({
        let (scfg, vcfg) = (scfg.clone(), vcfg.clone());
        move || RcSession::accept("o", &scfg, &vcfg)
    });
    let mut b = RcSession::connect("o", &scfg, &vcfg).unwrap();
    let mut a = acceptor.join().unwrap().unwrap();
    for seq in 1..=5u64 {
        let buf = a.try_claim(8).unwrap();
        buf.copy_from_slice(&seq.to_le_bytes());
        assert_eq!(a.commit(8, 0, 0).unwrap(), seq);
    }
    let mut next = 1u64;
    while next <= 5 {
        b.poll(64, &mut |m: mdbus::Message<'_>| {
            assert_eq!(m.seq(), next);
            next += 1;
        })
        .unwrap();
    }
    report("streaming");
    let (mut ea, mut eb) = (None, None);
    while ea.is_none() || eb.is_none() {
        if ea.is_none() {
            ea = a.check_peer().err();
        }
        if eb.is_none() {
            eb = b
                .poll(64, &mut |m: mdbus::Message<'_>| {
                    panic!("message {} after the removal", m.seq())
                })
                .err();
        }
    }
    report(&format!("a: {}", ea.unwrap()));
    report(&format!("b: {}", eb.unwrap()));
}

#[test]
fn device_deleted_mid_stream_fails_both_ends() {
    if !rdma_or_skip("device_deleted_mid_stream_fails_both_ends") {
        return;
    }
    let device = verbs::detect(&VerbsConfig::default()).unwrap().device;
    let ndevs = format!("/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/1");
    let netdev = std::fs::read_to_string(&ndevs).unwrap().trim().to_string();

    let mut child = mdbus_testkit::child::child_command()
        .env(ROLE, "removal")
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if let Some(rest) = l.strip_prefix("peer: ") {
                if tx.send(rest.to_string()).is_err() {
                    return;
                }
            }
        }
    });
    let next_line = |child: &mut std::process::Child| match rx.recv_timeout(HANG_GUARD) {
        Ok(l) => l,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not report ({e}): a hang");
        }
    };
    assert_eq!(next_line(&mut child), "streaming");
    let mut delete = Command::new("rdma")
        .args(["link", "delete", &device])
        .spawn()
        .unwrap();
    let la = next_line(&mut child);
    let lb = next_line(&mut child);
    eprintln!("{la}\n{lb}");
    let status = child.wait().unwrap();
    let deleted = delete.wait().unwrap();
    // Re-create the device whatever happened, for the tests after this one.
    let _ = Command::new("rdma")
        .args(["link", "add", &device, "type", "rxe", "netdev", &netdev])
        .status();
    verbs_support::wait_port_ready(&device);

    assert!(status.success(), "child: {status}");
    assert!(deleted.success(), "rdma link delete {device}: {deleted}");
    for (line, acked, delivered) in [(&la, 5, 0), (&lb, 0, 5)] {
        assert!(line.contains(" failed: "), "{line}");
        assert!(line.contains(&format!("on {device} port 1 (QP ")), "{line}");
        assert!(
            line.ends_with(&format!(
                "the peer had acknowledged the messages sent up to sequence {acked}, and the messages received up to sequence {delivered} were delivered"
            )),
            "{line}"
        );
    }
}
