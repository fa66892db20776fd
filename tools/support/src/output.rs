//! JSON output and exit statuses, the same in every tool.

/// Exit status of a run that failed while running.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of a usage or configuration error (also clap's).
pub const EXIT_USAGE: u8 = 2;
/// Exit status of a run that finished but lost, dropped or could not
/// recover data (and was not given `--allow-loss`).
pub const EXIT_DATA_LOST: u8 = 3;

/// The exit statuses, as every tool's `--help` lists them.
pub const EXIT_CODES_HELP: &str = "Exit status: 0 success; 1 runtime failure; 2 bad usage or \
configuration; 3 data lost, dropped or unrecoverable (unless --allow-loss).";

/// The exit status of a run that completed: [`EXIT_DATA_LOST`] when it
/// lost anything and loss was not allowed, else 0. `lost` is a sentence
/// saying what was lost, printed on stderr either way.
pub fn completed(lost: Option<&str>, allow_loss: bool) -> u8 {
    match lost {
        None => 0,
        Some(what) if allow_loss => {
            eprintln!("warning: {what} (allowed by --allow-loss)");
            0
        }
        Some(what) => {
            eprintln!(
                "error: {what}; exit status {EXIT_DATA_LOST} (pass --allow-loss to accept loss)"
            );
            EXIT_DATA_LOST
        }
    }
}

/// Prints `value` as one JSON line on stdout.
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string(value) {
        Ok(line) => println!("{line}"),
        // Only a map with non-string keys fails; the tools print none.
        Err(e) => eprintln!("cannot print the result as JSON: {e}"),
    }
}
