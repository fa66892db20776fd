//! What a run prints at the end: the summary as text or as one JSON
//! object. Shared by the relay's command line and the demo, neither of
//! which imports the other for it.

use super::Summary;

/// Prints a run's summary: text on stdout, or one JSON object on stdout.
pub fn print_summary(summary: &Summary, json: bool) {
    if json {
        mdbus_tool_support::output::print_json(summary);
    } else {
        print!("{}", summary_text(summary));
    }
}

/// The text summary: the counters, what was rejected by reason, what a
/// capture skipped by reason, how the run ended and what was lost.
pub fn summary_text(summary: &Summary) -> String {
    let c = &summary.counters;
    let up = &c.upstream;
    let m = &up.malformed_by;
    let mut s = c.summary_text(summary.seconds);
    s.push_str(&format!(
        "  rejected     malformed {} (short header {}, count mismatch {}, bad block length {}, \
         sequence 0 {}, sequence overflow {}), far jumps {} (believed {}), other session {}, \
         after end {}, unconfirmed ends {}\n",
        up.malformed,
        m.short_header,
        m.count_mismatch,
        m.bad_block_length,
        m.sequence_zero,
        m.sequence_overflow,
        up.suspect_jumps,
        up.jumps,
        up.other_session,
        up.after_end,
        up.unconfirmed_ends,
    ));
    if up.unrecoverable > 0 || c.local.source_gaps > 0 {
        s.push_str(&format!(
            "  source gaps  {} notices published ({} feed messages)\n",
            c.local.source_gaps, up.unrecoverable
        ));
    }
    if let Some(k) = &summary.capture {
        s.push_str(&format!(
            "  capture      {} frames, {} UDP datagrams, {} skipped (not IPv4 {}, IPv6 {}, not UDP {}, \
         fragments {}, truncated {}, bad UDP length {}, unparseable {}, unsupported link {}); \
         {} datagrams to neither line\n",
            k.frames,
            k.datagrams,
            k.skipped,
            k.not_ipv4,
            k.ipv6,
            k.not_udp,
            k.fragments,
            k.truncated,
            k.bad_udp_length,
            k.unparseable,
            k.unsupported_link,
            summary.skipped_datagrams,
        ));
    }
    s.push_str(&format!("  ended by     {}\n", summary.ended_by));
    s.push_str(&format!(
        "  data lost    {}\n",
        summary.data_lost.as_deref().unwrap_or("none")
    ));
    s
}
