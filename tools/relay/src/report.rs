//! What a run prints at the end: the summary as text or as one JSON
//! object. Shared by the relay's command line and the demo, neither of
//! which imports the other for it.

use super::Summary;

/// Prints a run's summary: text on stdout, or one JSON object on stdout.
pub fn print_summary(summary: &Summary, json: bool) {
    if json {
        mdbus_tool_support::output::print_json(summary);
    } else {
        print!("{}", summary.counters.summary_text(summary.seconds));
        println!("  ended by     {}", summary.ended_by);
    }
}
