//! JSON output and exit statuses, the same in every tool.

/// Exit status of a run that failed while running.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of a usage or configuration error (also clap's).
pub const EXIT_USAGE: u8 = 2;

/// Prints `value` as one JSON line on stdout.
pub fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string(value) {
        Ok(line) => println!("{line}"),
        // Only a map with non-string keys fails; the tools print none.
        Err(e) => eprintln!("cannot print the result as JSON: {e}"),
    }
}
