//! `--version` of every tool: the package version, the git revision it was
//! built from and whether RDMA is usable here, found when asked:
//!
//! ```text
//! mdbus-relay 0.1.0 (git 1a2b3c4) rdma: 2 devices (rxe0, rxe1)
//! mdbus-relay 0.1.0 (git 1a2b3c4) rdma: not available (libibverbs.so.1 not found: ...)
//! ```
//!
//! A tool parses its command line with [`parse`] instead of
//! `Cli::parse()`; nothing else changes.

use std::ffi::OsString;

/// The git revision the tools were built from (`git rev-parse --short
/// HEAD`), or "unknown" when built without git.
pub const GIT_REVISION: &str = env!("MDBUS_GIT_REVISION");

/// What `--version` prints after the program's name: `version`, the
/// revision and the RDMA part from `rdma` (the device names, or why there
/// are none).
pub fn line(version: &str, revision: &str, rdma: &Result<Vec<String>, String>) -> String {
    let rdma = match rdma {
        Ok(names) if names.is_empty() => {
            "no devices (libibverbs loaded, its device list is empty)".to_string()
        }
        Ok(names) => format!(
            "{} device{} ({})",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", ")
        ),
        Err(why) => format!("not available ({why})"),
    };
    format!("{version} (git {revision}) rdma: {rdma}")
}

/// The RDMA devices libibverbs lists on this machine, or why it lists
/// none (library missing, kernel without RDMA).
pub fn rdma_devices() -> Result<Vec<String>, String> {
    mdbus::transport::verbs::probe().map(|d| d.into_iter().map(|d| d.name).collect())
}

/// Checks what a tool printed for `--version`: `PROGRAM VERSION (git
/// REVISION) rdma: ...` with this build's revision and an RDMA part that
/// names devices or why there are none. For the tools' tests.
///
/// # Errors
/// What does not match, as a sentence quoting the output.
pub fn check_output(program: &str, version: &str, out: &str) -> Result<(), String> {
    let head = format!("{program} {version} (git {GIT_REVISION}) rdma: ");
    let Some(rdma) = out.strip_prefix(&head) else {
        return Err(format!("`{out}` does not start with `{head}`"));
    };
    let rdma = rdma.strip_suffix('\n').unwrap_or(rdma);
    let names_devices = rdma
        .split_once(" device")
        .is_some_and(|(n, rest)| n.parse::<usize>().is_ok() && rest.contains(" ("));
    if names_devices || rdma.starts_with("not available (") || rdma.starts_with("no devices") {
        Ok(())
    } else {
        Err(format!(
            "`{out}`: the RDMA part is neither devices nor why there are none"
        ))
    }
}

/// Runs the tool at `path` with `--version` and checks what it printed
/// with [`check_output`]; `name` and `version` are the tool's. For the
/// tools' tests.
///
/// # Errors
/// It cannot be run, fails, or prints something else.
pub fn check_program(path: &str, name: &str, version: &str) -> Result<(), String> {
    let (code, out, err) = crate::process::output_of(path, &["--version"])
        .map_err(|e| format!("cannot run {path}: {e}"))?;
    if code != 0 {
        return Err(format!("{name} --version exited with {code}: {err}"));
    }
    check_output(name, version, &out)
}

/// Whether the arguments ask for the version (before any `--`): only
/// then is the RDMA library loaded, so an ordinary run does not pay for
/// it or see its messages.
fn asks_version(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--version" || a == "-V")
}

/// `P::parse()` with the version line above for `-V` and `--version`.
pub fn parse<P: clap::Parser>() -> P {
    let mut cmd = P::command();
    if asks_version(std::env::args_os()) {
        let text = line(
            cmd.get_version().unwrap_or(env!("CARGO_PKG_VERSION")),
            GIT_REVISION,
            &rdma_devices(),
        );
        // Once per process, which then prints it and exits.
        cmd = cmd.version(&*Box::leak(text.into_boxed_str()));
    }
    let mut matches = cmd.get_matches();
    P::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.exit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_revision_and_the_rdma_devices() {
        let two = Ok(vec!["rxe0".to_string(), "rxe1".to_string()]);
        assert_eq!(
            line("0.1.0", "1a2b3c4", &two),
            "0.1.0 (git 1a2b3c4) rdma: 2 devices (rxe0, rxe1)"
        );
        let one = Ok(vec!["mlx5_0".to_string()]);
        assert_eq!(
            line("0.1.0", "1a2b3c4", &one),
            "0.1.0 (git 1a2b3c4) rdma: 1 device (mlx5_0)"
        );
        let missing = Err("libibverbs.so.1 not found".to_string());
        assert_eq!(
            line("0.1.0", "unknown", &missing),
            "0.1.0 (git unknown) rdma: not available (libibverbs.so.1 not found)"
        );
    }

    #[test]
    fn printed_lines_are_checked() {
        let good = format!("t 0.1.0 (git {GIT_REVISION}) rdma: 2 devices (rxe0, rxe1)\n");
        assert_eq!(check_output("t", "0.1.0", &good), Ok(()));
        let missing = format!(
            "t 0.1.0 (git {GIT_REVISION}) rdma: not available (libibverbs.so.1 not found)\n"
        );
        assert_eq!(check_output("t", "0.1.0", &missing), Ok(()));
        assert!(check_output("t", "0.1.0", "t 0.1.0\n").is_err());
        let other_rev = "t 0.1.0 (git 0000000) rdma: 1 device (x)\n";
        assert!(check_output("t", "0.1.0", other_rev).is_err() || GIT_REVISION == "0000000");
        let no_rdma = format!("t 0.1.0 (git {GIT_REVISION}) rdma: \n");
        assert!(check_output("t", "0.1.0", &no_rdma).is_err());
    }

    #[test]
    fn the_revision_is_the_checkouts() {
        let now = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        // Without git (a source tarball) the build says so.
        assert_eq!(GIT_REVISION, now.as_deref().unwrap_or("unknown"));
    }

    #[test]
    fn only_a_version_request_loads_the_rdma_library() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(asks_version(args(&["t", "--version"])));
        assert!(asks_version(args(&["t", "-V"])));
        assert!(!asks_version(args(&["t", "run", "--", "--version"])));
        assert!(!asks_version(args(&["--version"])));
        assert!(!asks_version(args(&["t", "--config", "x.toml"])));
    }
}
