//! What the C tests share: finding the compilers and the built library,
//! installing it under a prefix, compiling examples, and running example
//! processes with a line protocol on stdin/stdout.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long any one expected line may take before the test gives up (a
/// guard against a hung child, not a synchronisation).
pub const LINE_DEADLINE: Duration = Duration::from_secs(60);

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The directory holding libmdbus.so and libmdbus.a of this build (the
/// test binary lives in its `deps/`).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/PROFILE/deps")
        .to_path_buf();
    for f in ["libmdbus.so", "libmdbus.a"] {
        assert!(
            dir.join(f).exists(),
            "{} is missing: `cargo build -p mdbus-capi` builds it (scripts/test-all does, before the tests)",
            dir.join(f).display()
        );
    }
    dir
}

/// The compiler named by `var` (CC, CXX) or `default`, when it runs;
/// otherwise the skip-or-fail rule decides and `None` comes back.
pub fn compiler(test: &str, var: &str, default: &str) -> Option<String> {
    let cc = std::env::var(var).unwrap_or_else(|_| default.to_string());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => Some(cc),
        _ => {
            mdbus_testkit::skip(
                test,
                mdbus_testkit::Lack::Tool,
                &format!("no working C/C++ compiler `{cc}` (set {var}, or install gcc/g++)"),
            );
            None
        }
    }
}

/// Runs `cmd`, failing the test with its output when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh directory under the build's target directory. Earlier runs'
/// directories of the same name are removed first (each holds an installed
/// copy of the libraries, tens of MB): cargo runs one test binary at a
/// time, so none of them is in use.
pub fn scratch(name: &str) -> PathBuf {
    let base = lib_dir().join("capi-tests");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = base.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Installs the library of this build under `prefix` with capi/install-c.
pub fn install(prefix: &Path) {
    run(Command::new(root().join("capi/install-c"))
        .arg(prefix)
        .arg(lib_dir()));
}

/// The compiler flags pkg-config gives for `package` under `prefix`.
pub fn pkg_config(prefix: &Path, package: &str) -> Vec<String> {
    let out = run(Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .args(["--cflags", "--libs", package]));
    out.split_whitespace().map(str::to_string).collect()
}

/// Compiles `source` (C or C++ by extension) to `out` with `flags`, with
/// warnings as errors.
pub fn compile(cc: &str, source: &Path, out: &Path, flags: &[String]) {
    let std = if source.extension().is_some_and(|e| e == "cpp") {
        "-std=c++17"
    } else {
        "-std=c11"
    };
    run(Command::new(cc)
        .args([std, "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(source)
        .arg("-o")
        .arg(out)
        .args(flags));
}

/// A running example: its stdin, and its stdout lines as they come.
pub struct Proc {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    pub fn spawn(exe: &Path, args: &[&str]) -> Proc {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            name: exe.file_name().unwrap().to_string_lossy().into_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The next line of output; fails the test when the process ends first
    /// or nothing comes within [`LINE_DEADLINE`].
    pub fn line(&mut self) -> String {
        match self.lines.recv_timeout(LINE_DEADLINE) {
            Ok(l) => l,
            Err(e) => {
                let _ = self.child.kill();
                panic!(
                    "{}: no output line ({e:?}); exit: {:?}",
                    self.name,
                    self.child.wait()
                );
            }
        }
    }

    /// Waits for a line starting with `prefix` and returns it.
    pub fn expect(&mut self, prefix: &str) -> String {
        let l = self.line();
        assert!(
            l.starts_with(prefix),
            "{}: expected `{prefix}...`, got `{l}`",
            self.name
        );
        l
    }

    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("flush child stdin");
    }

    /// Closes stdin (the examples' signal to finish).
    pub fn hang_up(&mut self) {
        self.stdin = None;
    }

    /// Waits for a successful exit.
    pub fn finish(mut self) {
        self.stdin = None;
        let status = self.child.wait().expect("wait for child");
        assert!(status.success(), "{} exited with {status}", self.name);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A bus configuration file for `transport` ("shm" or "udp") in `dir`:
/// stream `md` and session `orders`, with addresses unique to this process
/// and `salt`.
pub fn config(dir: &Path, transport: &str, salt: u32) -> PathBuf {
    let pid = std::process::id();
    let port = 40_000 + (pid % 500) * 40 + salt;
    // Each shared-memory configuration gets its own segment directory, so
    // tests running side by side never share a channel.
    let shm_dir = dir.join(format!("shm-{salt}"));
    std::fs::create_dir_all(&shm_dir).expect("create segment dir");
    let body = match transport {
        "shm" => format!(
            "transport = \"shm\"\n[shm]\ndir = \"{}\"\n\
             [streams.md]\nmax_message = 256\ncapacity = 65536\n[sessions.orders]\n",
            shm_dir.display()
        ),
        "udp" => format!(
            "transport = \"udp\"\n[streams.md]\nmax_message = 256\ncapacity = 65536\n\
             group = \"239.255.{}.{}:{port}\"\ninterface = \"127.0.0.1\"\nttl = 0\n\
             heartbeat_interval = \"20ms\"\nheartbeat_timeout = \"5s\"\n\
             [sessions.orders]\naddress = \"127.0.0.1:{port}\"\n",
            1 + pid % 250,
            1 + salt % 250
        ),
        other => panic!("no test configuration for transport {other}"),
    };
    let path = dir.join(format!("{transport}-{salt}.toml"));
    std::fs::write(&path, body).expect("write config");
    path
}
