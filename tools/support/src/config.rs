//! `--check` and `--print-config`, the same in every tool that reads an
//! mdbus configuration: a flattened clap group and the one call that
//! handles it, before the tool opens any device or socket.
//!
//! ```text
//! mdbus-relay --config relay.toml --check          # config OK: relay.toml (exit 0), or the error (exit 2)
//! mdbus-relay --config relay.toml --print-config   # the effective configuration, every default filled in
//! ```

use std::fmt::Display;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::output::EXIT_USAGE;

/// The options, flattened into a tool's command line next to its
/// `--config`.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct ConfigFlags {
    /// Check the configuration (--config) and exit: everything that can be
    /// checked without opening a device or a socket (values, names,
    /// addresses, sizes against limits.max_memory and the shared-memory
    /// file system, key files). Prints "config OK: FILE" and exits 0, or
    /// the error and exits 2.
    #[arg(long)]
    pub check: bool,

    /// Print the effective configuration as TOML, every default filled in
    /// (durations as they are written in the file), and exit; without
    /// --config, the defaults. The output is itself a valid configuration.
    #[arg(long, conflicts_with = "check")]
    pub print_config: bool,
}

/// What the flags asked for, once the configuration was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Neither flag: the tool goes on.
    Continue,
    /// The text for stdout, exit status 0.
    Print(String),
    /// The text for stderr (without the program's name), exit status 2.
    Fail(String),
}

impl ConfigFlags {
    /// What the flags produce for the configuration at `path` (read with
    /// `load`), or for `defaults` when no file was given; `None` for
    /// `defaults` means the tool needs a file.
    pub fn outcome<'p, C, E>(
        &self,
        path: Option<&'p Path>,
        load: impl FnOnce(&'p Path) -> Result<C, E>,
        defaults: Option<fn() -> C>,
    ) -> Outcome
    where
        C: serde::Serialize,
        E: Display,
    {
        if !self.check && !self.print_config {
            return Outcome::Continue;
        }
        let loaded = match (path, defaults) {
            (Some(p), _) => load(p).map_err(|e| e.to_string()),
            (None, Some(d)) => Ok(d()),
            (None, None) => Err(format!(
                "--{} needs --config FILE",
                if self.check { "check" } else { "print-config" }
            )),
        };
        let config = match loaded {
            Ok(c) => c,
            Err(e) => return Outcome::Fail(e),
        };
        if self.check {
            let name = path.map_or("(defaults)".into(), |p| p.display().to_string());
            return Outcome::Print(format!("config OK: {name}\n"));
        }
        match toml::to_string_pretty(&config) {
            Ok(text) => Outcome::Print(text),
            Err(e) => Outcome::Fail(format!("cannot print the configuration as TOML: {e}")),
        }
    }

    /// Handles the flags for `program`: `None` when neither was given (the
    /// tool goes on), else the exit status after printing what
    /// [`outcome`](Self::outcome) says.
    pub fn handle<'p, C, E>(
        &self,
        program: &str,
        path: Option<&'p Path>,
        load: impl FnOnce(&'p Path) -> Result<C, E>,
        defaults: Option<fn() -> C>,
    ) -> Option<ExitCode>
    where
        C: serde::Serialize,
        E: Display,
    {
        match self.outcome(path, load, defaults) {
            Outcome::Continue => None,
            Outcome::Print(text) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
                Some(ExitCode::SUCCESS)
            }
            Outcome::Fail(e) => {
                eprintln!("{program}: {e}");
                Some(ExitCode::from(EXIT_USAGE))
            }
        }
    }
}

/// Reads an mdbus configuration for `--check` and `--print-config`: the
/// file's checks ([`mdbus::Config::from_file`]) and those of what it names
/// ([`mdbus::Config::check_files`]: the shared-memory directory, key
/// files).
///
/// # Errors
/// The first thing wrong, naming the file and the key.
pub fn load_bus(path: &Path) -> Result<mdbus::Config, mdbus::error::ConfigError> {
    let config = mdbus::Config::from_file(path)?;
    config.check_files(&path.display().to_string(), "")?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(check: bool, print_config: bool) -> ConfigFlags {
        ConfigFlags {
            check,
            print_config,
        }
    }

    fn load(p: &Path) -> Result<mdbus::Config, mdbus::error::ConfigError> {
        load_bus(p)
    }

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("mdbus-flags-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn without_the_flags_the_tool_goes_on() {
        let never = |_: &Path| -> Result<mdbus::Config, String> { panic!("loaded") };
        assert_eq!(
            flags(false, false).outcome(None, never, None),
            Outcome::Continue
        );
    }

    #[test]
    fn check_says_ok_or_gives_the_error() {
        let good = file("good.toml", "[streams.md]\ncapacity = 1024\n");
        let bad = file("bad.toml", "[streams.md]\ncapacity = 1000\n");
        let ok = flags(true, false).outcome(Some(&good), load, Some(mdbus::Config::default));
        let err = flags(true, false).outcome(Some(&bad), load, Some(mdbus::Config::default));
        let none = flags(true, false).outcome(None, load, None);
        let defaults = flags(true, false).outcome(None, load, Some(mdbus::Config::default));
        std::fs::remove_file(&good).unwrap();
        std::fs::remove_file(&bad).unwrap();
        assert_eq!(
            ok,
            Outcome::Print(format!("config OK: {}\n", good.display()))
        );
        assert_eq!(
            err,
            Outcome::Fail(format!(
                "{}: streams.md.capacity: 1000 is not allowed: a power of two from 2 to 16777216",
                bad.display()
            ))
        );
        assert_eq!(none, Outcome::Fail("--check needs --config FILE".into()));
        assert_eq!(defaults, Outcome::Print("config OK: (defaults)\n".into()));
    }

    #[test]
    fn printed_config_has_the_defaults_and_reads_back_equal() {
        let path = file(
            "print.toml",
            "transport = \"udp\"\n[streams.md]\ngroup = \"239.1.1.1:5000\"\nheartbeat_interval = \"250ms\"\n",
        );
        let printed = flags(false, true).outcome(Some(&path), load, Some(mdbus::Config::default));
        let original = load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let Outcome::Print(text) = printed else {
            panic!("{printed:?}")
        };
        for line in [
            "transport = \"udp\"",
            "[streams.md]",
            "heartbeat_interval = \"250ms\"",
            "recv_buffer = 8388608",
            "join_timeout = \"5s\"",
            "attach_timeout = \"5s\"",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        let back = mdbus::Config::from_toml_str(&text, "<printed>").unwrap();
        assert_eq!(back, original);
    }
}
