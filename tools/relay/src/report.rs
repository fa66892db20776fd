//! What a run prints at the end: the summary as text or as one JSON
//! object. Shared by the relay's command line and the demo, neither of
//! which imports the other for it.

use mdbus_tool_support::output;

use super::run::CaptureSkips;
use super::stats::JsonMap;
use super::Summary;

/// Prints a run's summary: text on stdout, or one JSON object on stdout.
pub fn print_summary(summary: &Summary, json: bool) {
    if json {
        output::print_json(&summary_json(summary));
    } else {
        print!("{}", summary_text(summary));
    }
}

/// The summary as the one JSON object of `--json` (docs/JSON.md; the keys
/// are listed in docs/RELAY.md): `schema`, `tool`, how the run went,
/// every counter under its counters-file name, `drops` (packets rejected,
/// by reason), `skipped` (capture frames and datagrams not read, by
/// reason), `streams`, `latency_ns`, and `lost` with `data_lost` saying
/// what.
pub fn summary_json(summary: &Summary) -> JsonMap {
    let mut m = output::json_object("mdbus-relay");
    m.insert("input".into(), summary.input.into());
    m.insert("seconds".into(), summary.seconds.into());
    m.insert("ended_by".into(), summary.ended_by.into());
    m.insert("request_errors".into(), summary.request_errors.into());
    m.insert("recv_errors".into(), summary.recv_errors.into());
    summary.counters.json_fields(&mut m);
    let k = summary.capture.unwrap_or_default();
    m.insert("capture_frames".into(), k.frames.into());
    m.insert("capture_datagrams".into(), k.datagrams.into());
    m.insert(
        "skipped".into(),
        skipped_json(&k, summary.skipped_datagrams).into(),
    );
    m.insert(
        "latency_ns".into(),
        serde_json::to_value(summary.latency).unwrap_or_default(),
    );
    m.insert("lost".into(), summary.data_lost.is_some().into());
    m.insert(
        "data_lost".into(),
        summary
            .data_lost
            .clone()
            .map_or(serde_json::Value::Null, Into::into),
    );
    m
}

/// What a capture input skipped, by reason: the capture reader's frame
/// reasons (as `mdbus-replay` names them) and `other_groups`, datagrams
/// sent to neither line's group.
fn skipped_json(k: &CaptureSkips, other_groups: u64) -> JsonMap {
    let mut m = JsonMap::new();
    for (reason, n) in [
        ("not_ipv4", k.not_ipv4),
        ("ipv6", k.ipv6),
        ("not_udp", k.not_udp),
        ("fragments", k.fragments),
        ("truncated", k.truncated),
        ("bad_udp_length", k.bad_udp_length),
        ("unparseable", k.unparseable),
        ("unsupported_link", k.unsupported_link),
        ("other_groups", other_groups),
    ] {
        m.insert(reason.into(), n.into());
    }
    m
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
