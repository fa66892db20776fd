//! mdbus-relay as an operator runs it: the built binary, a configuration
//! file, signals, and its errors for bad configurations and interfaces.

mod relay_common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use relay_common::Scratch;

const RELAY: &str = env!("CARGO_BIN_EXE_mdbus-relay");
/// A guard against a hang, not a timing assertion.
const DEADLINE: Duration = Duration::from_secs(120);

/// A live configuration on loopback multicast that nobody sends to: the
/// relay runs until stopped.
pub fn idle_live_config(scratch: &Scratch, port: u16) -> String {
    format!(
        "[input]\nline_a = \"239.192.77.1:{port}\"\nline_b = \"239.192.77.2:{port}\"\ninterface = \"127.0.0.1\"\n\
         [counters]\npath = \"{}\"\nlog_interval = \"0s\"\nrefresh = \"10ms\"\n\
         [thread]\npin = false\nidle = \"yield\"\n{}\n[routing]\ndefault = \"s1\"\ncontrol = \"ctl\"\n",
        scratch.path("counters").display(),
        scratch.shm_bus(1024),
    )
}

fn port() -> u16 {
    30_000 + (std::process::id() % 20_000) as u16
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !f() {
        assert!(
            Instant::now() < until,
            "{what} did not happen within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn output(mut child: Child) -> (i32, String, String) {
    let until = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("mdbus-relay did not exit within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), out, err)
}

fn spawn(args: &[&str]) -> Child {
    Command::new(RELAY)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn sigterm_stops_the_relay_cleanly_with_a_summary() {
    let scratch = Scratch::new("sigterm");
    let cfg = scratch.path("relay.toml");
    std::fs::write(&cfg, idle_live_config(&scratch, port())).unwrap();
    let child = spawn(&["--config", cfg.to_str().unwrap()]);
    let counters = scratch.path("counters");
    wait_for("the counters file to appear", || counters.exists());
    // SAFETY: kill with a valid pid of our own child and a valid signal.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let (code, out, err) = output(child);
    assert_eq!(code, 0, "stderr: {err}");
    assert!(out.contains("relay summary after"), "{out}");
    assert!(out.contains("ended by     stopped"), "{out}");
    assert!(out.contains("messages in  0"), "{out}");
    assert!(
        !counters.exists(),
        "the counters file is removed on a clean exit"
    );
}

#[test]
fn sigint_does_the_same_and_json_prints_one_object() {
    let scratch = Scratch::new("sigint");
    let cfg = scratch.path("relay.toml");
    std::fs::write(&cfg, idle_live_config(&scratch, port() + 1)).unwrap();
    let child = spawn(&["--config", cfg.to_str().unwrap(), "--json"]);
    let counters = scratch.path("counters");
    wait_for("the counters file to appear", || counters.exists());
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let (code, out, err) = output(child);
    assert_eq!(code, 0, "stderr: {err}");
    // All of stdout is the one object.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        mdbus_tool_support::output::check_convention(&v),
        Ok(()),
        "{v}"
    );
    assert_eq!(v["tool"], "mdbus-relay");
    assert_eq!(v["ended_by"], "stopped");
    assert_eq!(v["input"], "moldudp64");
    assert_eq!(v["messages_in"], 0);
    assert_eq!(v["lost"], false);
    assert_eq!(v["streams"][0]["name"], "s1");
    assert_eq!(v["latency_ns"]["count"], 0);
}

#[test]
fn duration_ends_a_run() {
    let scratch = Scratch::new("duration");
    let cfg = scratch.path("relay.toml");
    std::fs::write(&cfg, idle_live_config(&scratch, port() + 2)).unwrap();
    let (code, out, err) = output(spawn(&[
        "--config",
        cfg.to_str().unwrap(),
        "--duration",
        "200ms",
    ]));
    assert_eq!(code, 0, "stderr: {err}");
    assert!(out.contains("ended by     duration"), "{out}");
}

#[test]
fn a_bad_config_is_refused_naming_file_and_key() {
    let scratch = Scratch::new("badcfg");
    let cfg = scratch.path("relay.toml");
    std::fs::write(&cfg, "[input]\nline_a = \"1.2.3.4:5\"\n").unwrap();
    let (code, _, err) = output(spawn(&["--config", cfg.to_str().unwrap()]));
    assert_eq!(code, 2);
    assert_eq!(
        err.trim(),
        format!(
            "mdbus-relay: {}: input.line_a: `1.2.3.4:5` is not an IPv4 multicast group and port such as 239.192.10.1:26400",
            cfg.display()
        )
    );
    let (code, _, err) = output(spawn(&["--config", "/nonexistent/relay.toml"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/relay.toml: (file): cannot be read"),
        "{err}"
    );
    let (code, _, err) = output(spawn(&[]));
    assert_eq!(code, 2);
    assert!(err.contains("give --config FILE"), "{err}");
}

#[test]
fn an_interface_that_is_not_on_this_host_is_refused() {
    let scratch = Scratch::new("badif");
    let cfg = scratch.path("relay.toml");
    let text = idle_live_config(&scratch, port() + 3)
        .replace("interface = \"127.0.0.1\"", "interface = \"192.0.2.77\"");
    std::fs::write(&cfg, text).unwrap();
    let (code, _, err) = output(spawn(&["--config", cfg.to_str().unwrap()]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "line A: cannot join group 239.192.77.1:{} on interface 192.0.2.77: IP_ADD_MEMBERSHIP",
            port() + 3
        )),
        "{err}"
    );
    assert!(
        err.contains("is 192.0.2.77 an address of an interface of this host"),
        "{err}"
    );
}

#[test]
fn help_explains_the_relay() {
    let (code, out, _) = output(spawn(&["--help"]));
    assert_eq!(code, 0);
    for needle in [
        "--config",
        "--demo",
        "--duration",
        "--json",
        "simulate",
        "mdbus-stat",
        "SIGTERM",
    ] {
        assert!(
            out.contains(needle),
            "--help does not mention {needle}: {out}"
        );
    }
}

/// A capture input that is a FIFO nobody writes to: the relay starts (the
/// open does not wait for a writer), waits for data, and SIGTERM still
/// ends it with the summary and exit 0.
#[test]
fn sigterm_stops_a_relay_waiting_on_a_fifo() {
    use std::os::unix::ffi::OsStrExt as _;
    let scratch = Scratch::new("sigterm-fifo");
    let fifo = scratch.path("feed.fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let cfg = scratch.path("relay.toml");
    std::fs::write(
        &cfg,
        format!(
            "[input]\nkind = \"pcap\"\npath = \"{}\"\n[counters]\npath = \"{}\"\nlog_interval = \"0s\"\n\
             refresh = \"10ms\"\n[thread]\npin = false\n{}\n[routing]\ndefault = \"s1\"\ncontrol = \"ctl\"\n",
            fifo.display(),
            scratch.path("counters").display(),
            scratch.shm_bus(1024),
        ),
    )
    .unwrap();
    let child = spawn(&["--config", cfg.to_str().unwrap()]);
    let counters = scratch.path("counters");
    wait_for("the counters file to appear", || counters.exists());
    // SAFETY: kill with a valid pid of our own child and a valid signal.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let (code, out, err) = output(child);
    assert_eq!(code, 0, "stderr: {err}");
    assert!(out.contains("ended by     stopped"), "{out}");
    assert!(out.contains("data lost    none"), "{out}");
}

/// A capture input that is empty or not a capture is refused at start-up
/// with a sentence naming it (exit 2); a missing one too.
#[test]
fn a_file_input_that_is_not_a_capture_is_refused() {
    let scratch = Scratch::new("not-capture");
    for (name, bytes, want) in [
        (
            "empty.pcap",
            &b""[..],
            "is empty: a pcap or pcapng capture was expected",
        ),
        (
            "text.pcap",
            &b"hello, world"[..],
            "is not a pcap or pcapng capture",
        ),
    ] {
        let file = scratch.path(name);
        std::fs::write(&file, bytes).unwrap();
        let cfg = scratch.path("relay.toml");
        std::fs::write(
            &cfg,
            format!(
                "[input]\nkind = \"pcap\"\npath = \"{}\"\n[counters]\npath = \"\"\n{}\n[routing]\ndefault = \"s1\"\n",
                file.display(),
                scratch.shm_bus(1024),
            ),
        )
        .unwrap();
        let (code, _, err) = output(spawn(&["--config", cfg.to_str().unwrap()]));
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("input file {}: {want}", file.display())),
            "{err}"
        );
    }
}
