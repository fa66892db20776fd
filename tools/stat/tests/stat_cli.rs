//! mdbus-stat against buses of other processes: this test binary run again
//! as a child (`MDBUS_STAT_CHILD`), which opens a bus with a publisher and
//! a subscriber, records errors, and either stays up until its stdin
//! closes or exits.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use mdbus_tool_support::output::{check_convention, EXIT_CODES_HELP};

const STAT: &str = env!("CARGO_BIN_EXE_mdbus-stat");

/// A scratch directory: segments in it, counters files in `counters/`.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("mdbus-stat-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn counters(&self) -> PathBuf {
        self.0.join("counters")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The child's side: runs only when this binary is started as a child.
#[test]
fn child() {
    let Ok(dir) = std::env::var("MDBUS_STAT_CHILD") else {
        return;
    };
    let role = std::env::var("MDBUS_STAT_ROLE").unwrap();
    let dir = PathBuf::from(dir);
    let cfg = mdbus::Config::from_toml_str(
        &format!(
            "transport = \"shm\"\n[shm]\ndir = \"{}\"\nprefix = \"stat-{role}\"\n\
             [counters]\ndir = \"{}\"\nname = \"child-{role}\"\n[streams.md]\nmax_message = 64\n",
            dir.display(),
            dir.join("counters").display()
        ),
        "<child>",
    )
    .unwrap();
    let bus = mdbus::Bus::new(cfg).unwrap();
    let mut p = bus.publisher("md").unwrap();
    let mut s = bus.subscriber("md").unwrap();
    for i in 0..5u8 {
        p.publish(&[i; 10]).unwrap();
    }
    let mut got = 0;
    while got < 5 {
        got += s.poll(|_| {}).unwrap();
    }
    let c = bus.counters().unwrap();
    for _ in 0..3 {
        c.record_error("stream `md`: lost the peer at 10.0.0.1:7000: connection reset");
    }
    c.record_error("rxe0 port 1: IBV_EVENT_PORT_ERR");
    if role == "live" {
        // What the verbs transport reports for a failed send and a CQ
        // error event (counted per QP, queue and status; per device).
        use mdbus::counters::registry::{note_cq_overflow, note_qp_completion_error, WcQueue};
        for _ in 0..2 {
            note_qp_completion_error("rxe0", 0x11, WcQueue::Send, 12, "RC send on QP 17: retry");
        }
        note_qp_completion_error(
            "rxe0",
            0x12,
            WcQueue::Receive,
            5,
            "RC receive on QP 18: flush",
        );
        note_cq_overflow("rxe0", "rxe0: a completion queue failed (IBV_EVENT_CQ_ERR)");
    }
    println!("ready {}", bus.counters_path().unwrap().display());
    std::io::stdout().flush().unwrap();
    if role == "live" {
        // Up until the parent closes our stdin.
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    }
    // Exiting with errors logged leaves the file behind.
}

/// Starts a child of `role`; returns it and its counters file once ready.
fn spawn(scratch: &Scratch, role: &str) -> (Child, PathBuf) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env("MDBUS_STAT_CHILD", &scratch.0)
        .env("MDBUS_STAT_ROLE", role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let path = loop {
        let line = lines
            .next()
            .expect("the child ended before it was ready")
            .unwrap();
        // The harness may have printed "test child ... " on the same line.
        if let Some((_, p)) = line.split_once("ready ") {
            break PathBuf::from(p);
        }
    };
    // Keep reading, so the child's last lines do not meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, path)
}

fn stat(args: &[&str]) -> Output {
    Command::new(STAT).args(args).output().unwrap()
}

fn stat_ok(args: &[&str]) -> String {
    let out = stat(args);
    assert!(
        out.status.success(),
        "mdbus-stat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&stat_ok(args)).unwrap();
    assert_eq!(check_convention(&v), Ok(()), "{v}");
    v
}

/// A fake sysfs tree with one RDMA port.
fn fake_sysfs(scratch: &Scratch) -> PathBuf {
    let root = scratch.0.join("sys");
    let port = root.join("class/infiniband/rxe9/ports/1");
    std::fs::create_dir_all(port.join("counters")).unwrap();
    std::fs::create_dir_all(port.join("hw_counters")).unwrap();
    std::fs::write(port.join("counters/port_rcv_errors"), "4\n").unwrap();
    std::fs::write(port.join("counters/port_xmit_discards"), "2\n").unwrap();
    std::fs::write(port.join("counters/link_downed"), "1\n").unwrap();
    std::fs::write(port.join("hw_counters/rnr_nak_retry_err"), "6\n").unwrap();
    std::fs::write(port.join("hw_counters/rx_pause"), "9\n").unwrap();
    root
}

/// A fake /proc with one UDP socket of process `pid`.
fn fake_proc(scratch: &Scratch, pid: u32) -> PathBuf {
    let root = scratch.0.join("proc");
    let p = root.join(pid.to_string());
    std::fs::create_dir_all(p.join("fd")).unwrap();
    std::fs::create_dir_all(p.join("net")).unwrap();
    std::os::unix::fs::symlink("socket:[777]", p.join("fd/5")).unwrap();
    std::fs::write(
        p.join("net/udp"),
        "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
         \x20 1: 030201EF:1F90 00000000:0000 07 00000000:00000100 00:00000000 00000000     0        0 777 2 0000000000000000 5\n",
    )
    .unwrap();
    root
}

#[test]
fn a_live_bus_is_listed_and_shown_as_text_json_and_openmetrics() {
    let scratch = Scratch::new("live");
    let (mut child, file) = spawn(&scratch, "live");
    let dir = scratch.counters();
    let d = dir.to_str().unwrap();
    let pid = child.id();

    // list: the bus, alive, with its name.
    let v = json(&["list", d, "--json"]);
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{v}");
    assert_eq!(files[0]["state"], "alive");
    assert_eq!(files[0]["pid"], pid);
    assert_eq!(files[0]["name"], "child-live");
    assert_eq!(files[0]["path"], file.to_str().unwrap());
    let text = stat_ok(&["list", d]);
    assert!(text.contains("child-live (updated"), "{text}");

    // The default view: every live bus of the directory.
    let v = json(&["--dir", d, "--json"]);
    let bus = &v["buses"][0];
    assert_eq!(bus["name"], "child-live");
    assert_eq!(bus["state"], "alive");
    let c = &bus["counters"];
    assert_eq!(c["sub.md.messages"]["value"], 5, "{v}");
    assert_eq!(c["sub.md.bytes"]["value"], 50);
    assert_eq!(c["pub.md.messages"]["value"], 5);
    assert_eq!(c["pub.md.last_seq"]["kind"], "gauge");
    assert_eq!(c["sub.md.messages"]["kind"], "counter");
    // 4 recorded, 3 completion errors and a CQ error.
    assert_eq!(c["bus.child-live.errors"]["value"], 8);
    assert_eq!(
        c["qp.rxe0/0x11/send/retry_exc_err.completion_errors"]["value"], 2,
        "{v}"
    );
    assert_eq!(
        c["qp.rxe0/0x12/receive/wr_flush_err.completion_errors"]["value"],
        1
    );
    assert_eq!(c["cq.rxe0.overflows"]["value"], 1);
    assert_eq!(c["cq.rxe0.overflows"]["kind"], "counter");
    let text = stat_ok(&["--dir", d, "--filter", r"^(qp|cq)\."]);
    let shown: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(shown.len(), 3, "{text}");
    assert!(
        text.contains("qp.rxe0/0x11/send/retry_exc_err.completion_errors")
            && text.contains("cq.rxe0.overflows"),
        "{text}"
    );

    // --watch: one object per line, rates of counters only.
    let out = stat_ok(&["--dir", d, "--json", "--watch", "10ms", "--count", "2"]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let second = &lines[1]["buses"][0]["counters"];
    assert_eq!(second["sub.md.messages"]["per_sec"], 0.0);
    assert!(
        second["pub.md.last_seq"].get("per_sec").is_none(),
        "no rate of a gauge"
    );
    assert!(lines[0]["buses"][0]["counters"]["sub.md.messages"]
        .get("per_sec")
        .is_none());

    // Text: a timestamped header; --filter keeps matching counters only;
    // --watch --no-clear prints samples one after the other, no ANSI.
    let text = stat_ok(&["--dir", d, "--filter", r"sub\.md\.(messages|bytes)$"]);
    assert!(text.starts_with("mdbus-stat 20"), "{text}");
    let shown: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(shown.len(), 2, "{text}");
    assert!(
        shown[0].trim_start().starts_with("sub.md.messages "),
        "{text}"
    );
    let text = stat_ok(&[
        "--dir",
        d,
        "--watch",
        "10ms",
        "--count",
        "2",
        "--no-clear",
        "--filter",
        "last_seq",
    ]);
    assert_eq!(text.matches("mdbus-stat 20").count(), 2, "{text}");
    assert!(!text.contains('\x1b'));
    assert!(text.contains("(gauge)"), "{text}");
    let text = stat_ok(&[
        "--dir", d, "--watch", "10ms", "--count", "2", "--filter", "messages",
    ]);
    assert!(text.contains("\x1b[H\x1b[2J"), "--watch clears the screen");
    assert!(text.contains("/s"), "rates on the second sample: {text}");
    let out = stat(&["--dir", d, "--filter", "("]);
    assert_eq!(out.status.code(), Some(2));

    // OpenMetrics, with the RDMA port of a fake sysfs tree.
    let sys = fake_sysfs(&scratch);
    let om = stat_ok(&[
        "--dir",
        d,
        "--openmetrics",
        "--device",
        "rxe9/1",
        "--sysfs-root",
        sys.to_str().unwrap(),
    ]);
    assert!(om.ends_with("# EOF\n"), "{om}");
    for want in [
        format!(
            "mdbus_subscriber_messages_total{{bus=\"child-live\",pid=\"{pid}\",stream=\"md\"}} 5"
        ),
        format!("mdbus_publisher_last_seq{{bus=\"child-live\",pid=\"{pid}\",stream=\"md\"}} 5"),
        format!("mdbus_bus_up{{bus=\"child-live\",pid=\"{pid}\"}} 1"),
        "# TYPE mdbus_subscriber_messages counter".to_string(),
        "# TYPE mdbus_publisher_last_seq gauge".to_string(),
        "mdbus_rdma_port_port_rcv_errors_total{device=\"rxe9\",port=\"1\"} 4".to_string(),
        "mdbus_rdma_port_hw_rx_pause_total{device=\"rxe9\",port=\"1\"} 9".to_string(),
        "mdbus_rdma_port_link_downed_total{device=\"rxe9\",port=\"1\"} 1".to_string(),
        format!(
            "mdbus_qp_completion_errors_total{{bus=\"child-live\",pid=\"{pid}\",device=\"rxe0\",qp=\"0x11\",queue=\"send\",status=\"retry_exc_err\"}} 2"
        ),
        format!("mdbus_cq_overflows_total{{bus=\"child-live\",pid=\"{pid}\",device=\"rxe0\"}} 1"),
        "# TYPE mdbus_qp_completion_errors counter".to_string(),
    ] {
        assert!(om.contains(&want), "no `{want}` in\n{om}");
    }
    let v = json(&[
        "--dir",
        d,
        "--json",
        "--device",
        "rxe9",
        "--sysfs-root",
        sys.to_str().unwrap(),
    ]);
    assert_eq!(v["devices"][0]["counters"]["hw_rnr_nak_retry_err"], 6);

    // The kernel's drops at the bus's UDP sockets, from a fake /proc.
    let proc = fake_proc(&scratch, pid);
    let p = proc.to_str().unwrap();
    let v = json(&["--dir", d, "--json", "--proc-root", p]);
    assert_eq!(
        v["buses"][0]["udp_sockets"],
        serde_json::json!([{"local": "239.1.2.3:8080", "drops": 5, "rx_queue_bytes": 256}])
    );
    let om = stat_ok(&["--dir", d, "--openmetrics", "--proc-root", p]);
    let want = format!(
        "mdbus_udp_socket_drops_total{{bus=\"child-live\",pid=\"{pid}\",local=\"239.1.2.3:8080\"}} 5"
    );
    assert!(om.contains(&want), "no `{want}` in\n{om}");
    let text = stat_ok(&["--dir", d, "--proc-root", p]);
    assert!(
        text.contains("udp socket 239.1.2.3:8080: 5 dropped by the kernel, 256 bytes queued"),
        "{text}"
    );

    // --listen serves the same text at GET /metrics.
    let mut server = Command::new(STAT)
        .args(["--dir", d, "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("mdbus-stat: serving OpenMetrics at http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let body = get("/metrics");
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    assert!(
        body.contains("application/openmetrics-text; version=1.0.0"),
        "{body}"
    );
    assert!(body.contains("mdbus_subscriber_messages_total{"), "{body}");
    assert!(body.ends_with("# EOF\n"));
    assert!(get("/other").contains(" 404 "));
    server.kill().unwrap();
    server.wait().unwrap();

    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_error_log_of_a_process_that_exited_is_read_with_first_last_and_count() {
    let scratch = Scratch::new("errors");
    let (mut child, file) = spawn(&scratch, "exit");
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    assert!(file.exists(), "a bus that logged errors leaves its file");
    let d = scratch.counters();
    let d = d.to_str().unwrap();

    let v = json(&["--dir", d, "--errors", "--json"]);
    let bus = &v["buses"][0];
    assert_eq!(bus["state"], "stale");
    assert_eq!(bus["pid"], pid);
    let errors = bus["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{v}");
    assert_eq!(
        errors[0]["text"],
        "stream `md`: lost the peer at 10.0.0.1:7000: connection reset"
    );
    assert_eq!(errors[0]["count"], 3);
    assert!(errors[0]["first_ns"].as_u64().unwrap() <= errors[0]["last_ns"].as_u64().unwrap());
    assert!(errors[0]["first_ns"].as_u64().unwrap() > 0);
    assert_eq!(errors[1]["text"], "rxe0 port 1: IBV_EVENT_PORT_ERR");
    assert_eq!(errors[1]["count"], 1);
    assert_eq!(errors[1]["consistent"], true);
    let text = stat_ok(&["--dir", d, "--errors"]);
    assert!(text.contains("child-exit (pid"), "{text}");
    assert!(text.contains("stale: 2 distinct error(s)"), "{text}");
    assert!(text.contains("       3 x  first 20"), "{text}");

    // The counters view leaves stale buses out; a named stale file is an error.
    let v = json(&["--dir", d, "--json"]);
    assert_eq!(v["buses"].as_array().unwrap().len(), 0);
    let out = stat(&[file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is stale: its owner child-exit"), "{err}");

    // clean removes it.
    let v = json(&["clean", d, "--json"]);
    let removed: Vec<&serde_json::Value> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["removed"] == true)
        .collect();
    assert_eq!(removed.len(), 1, "{v}");
    assert!(!file.exists());
    // The child's segments (in the scratch dir) are stale too.
    let v = json(&["clean", scratch.0.to_str().unwrap(), "--json"]);
    assert!(
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["removed"] == true),
        "{v}"
    );
}

#[test]
fn bad_files_are_errors() {
    let scratch = Scratch::new("bad");
    let missing = scratch.0.join("none");
    let out = stat(&[missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "mdbus-stat: counters file {} does not exist",
            missing.display()
        )),
        "{err}"
    );
    let foreign = scratch.0.join("foreign");
    std::fs::write(&foreign, vec![7u8; 4096]).unwrap();
    let out = stat(&[foreign.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an mdbus counters file"));
    let out = stat(&["--device", "../x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn every_subcommand_lists_the_exit_codes() {
    for args in [&["--help"][..], &["list", "--help"], &["clean", "--help"]] {
        let text = stat_ok(args);
        assert!(text.contains(EXIT_CODES_HELP), "{args:?}: {text}");
    }
}

#[test]
fn version_names_the_revision_and_rdma() {
    let checked = mdbus_tool_support::version::check_program(
        env!("CARGO_BIN_EXE_mdbus-stat"),
        "mdbus-stat",
        env!("CARGO_PKG_VERSION"),
    );
    assert_eq!(checked, Ok(()));
}

#[test]
fn doctor_is_the_readiness_check_as_one_json_object() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mdbus-stat"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    // 0 or 1 by the host's state; never a usage error.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(mdbus_tool_support::output::check_convention(&v), Ok(()));
    assert!(v["items"].as_array().is_some_and(|a| !a.is_empty()), "{v}");
}
