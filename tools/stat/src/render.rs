//! The views: a text table, one JSON object, the error log.

use std::fmt::Write;
use std::time::{Duration, UNIX_EPOCH};

use mdbus::counters::Kind;
use mdbus_tool_support::output::json_object;
use serde_json::{json, Map, Value};

use crate::snapshot::Bus;
use crate::sysfs::Port;

/// The tool's name in JSON objects.
pub const TOOL: &str = "mdbus-stat";

/// `ns` since the Unix epoch as RFC 3339 (UTC, milliseconds).
pub fn time(ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

/// "3.2 s ago" for a time in ns since the epoch, from `now_ns`.
fn ago(ns: u64, now_ns: u64) -> String {
    if ns == 0 {
        return "never".into();
    }
    format!("{:.1} s ago", now_ns.saturating_sub(ns) as f64 / 1e9)
}

/// The text view: a header with the time, then per bus its counters (and
/// rates of counters), then the RDMA ports.
pub fn text(buses: &[Bus], ports: &[Port], now_ns: u64) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "mdbus-stat {}  {} bus(es), {} RDMA port(s)",
        time(now_ns),
        buses.len(),
        ports.len()
    );
    for b in buses {
        let _ = writeln!(
            out,
            "\n{} (pid {}) {}, updated {}, {} error(s) logged — {}",
            b.name,
            b.pid,
            b.state(),
            ago(b.updated_ns.max(b.start_ns), now_ns),
            b.errors.len(),
            b.path.display()
        );
        let width = b.counters.iter().map(|c| c.label.len()).max().unwrap_or(0);
        for c in &b.counters {
            match (c.kind, c.per_sec) {
                (Kind::Counter, Some(r)) => {
                    let _ = writeln!(out, "  {:<width$} {:>16} {r:>14.1}/s", c.label, c.value);
                }
                (Kind::Gauge, _) => {
                    let _ = writeln!(out, "  {:<width$} {:>16} (gauge)", c.label, c.value);
                }
                _ => {
                    let _ = writeln!(out, "  {:<width$} {:>16}", c.label, c.value);
                }
            }
        }
        for u in &b.udp {
            let _ = writeln!(
                out,
                "  udp socket {}: {} dropped by the kernel, {} bytes queued",
                u.local, u.drops, u.rx_queue_bytes
            );
        }
    }
    for p in ports {
        let _ = writeln!(out, "\nRDMA {} port {} (sysfs)", p.device, p.port);
        let width = p.counters.keys().map(String::len).max().unwrap_or(0);
        for (k, v) in &p.counters {
            let _ = writeln!(out, "  {k:<width$} {v:>16}");
        }
    }
    out
}

fn bus_head(b: &Bus) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("path".into(), b.path.display().to_string().into());
    m.insert("name".into(), b.name.clone().into());
    m.insert("pid".into(), b.pid.into());
    m.insert("state".into(), b.state().into());
    m.insert("start_ns".into(), b.start_ns.into());
    m.insert("updated_ns".into(), b.updated_ns.into());
    m
}

/// One JSON object: `{"schema", "tool", "time_ns", "buses": [{"path",
/// "name", "pid", "state", "start_ns", "updated_ns", "counters": {LABEL:
/// {"value", "kind", "per_sec"}}, "udp_sockets": [{"local", "drops",
/// "rx_queue_bytes"}]}], "devices": [{"device", "port",
/// "counters": {NAME: VALUE}}]}` (`per_sec` only for counters, from the
/// second sample).
pub fn json(buses: &[Bus], ports: &[Port], now_ns: u64) -> Value {
    let mut o = json_object(TOOL);
    o.insert("time_ns".into(), now_ns.into());
    let buses: Vec<Value> = buses
        .iter()
        .map(|b| {
            let mut m = bus_head(b);
            let counters: Map<String, Value> = b
                .counters
                .iter()
                .map(|c| {
                    let mut v = json!({
                        "value": c.value,
                        "kind": match c.kind { Kind::Counter => "counter", Kind::Gauge => "gauge" },
                    });
                    if let Some(r) = c.per_sec {
                        v["per_sec"] = json!(r);
                    }
                    (c.label.clone(), v)
                })
                .collect();
            m.insert("counters".into(), Value::Object(counters));
            let udp: Vec<Value> = b
                .udp
                .iter()
                .map(|u| json!({"local": u.local, "drops": u.drops, "rx_queue_bytes": u.rx_queue_bytes}))
                .collect();
            m.insert("udp_sockets".into(), Value::Array(udp));
            Value::Object(m)
        })
        .collect();
    o.insert("buses".into(), Value::Array(buses));
    let devices: Vec<Value> = ports
        .iter()
        .map(|p| json!({"device": p.device, "port": p.port, "counters": p.counters}))
        .collect();
    o.insert("devices".into(), Value::Array(devices));
    Value::Object(o)
}

/// The error logs as text: per bus, each distinct error with its count,
/// first and last time.
pub fn errors_text(buses: &[Bus]) -> String {
    let mut out = String::new();
    for b in buses {
        let _ = writeln!(
            out,
            "{} (pid {}) {}: {} distinct error(s){} — {}",
            b.name,
            b.pid,
            b.state(),
            b.errors.len(),
            if b.errors_lost > 0 {
                format!(", {} more not logged (log full)", b.errors_lost)
            } else {
                String::new()
            },
            b.path.display()
        );
        for e in &b.errors {
            let _ = writeln!(
                out,
                "  {:>8} x  first {}  last {}{}  {}",
                e.count,
                time(e.first_ns),
                time(e.last_ns),
                if e.consistent { "" } else { " (torn)" },
                e.text
            );
        }
    }
    out
}

/// The error logs as one JSON object: `{"schema", "tool", "buses":
/// [{"path", "name", "pid", "state", "start_ns", "updated_ns",
/// "errors_lost", "errors": [{"text", "count", "first_ns", "last_ns",
/// "consistent"}]}]}`.
pub fn errors_json(buses: &[Bus]) -> Value {
    let mut o = json_object(TOOL);
    let buses: Vec<Value> = buses
        .iter()
        .map(|b| {
            let mut m = bus_head(b);
            m.insert("errors_lost".into(), b.errors_lost.into());
            let errors: Vec<Value> = b
                .errors
                .iter()
                .map(|e| {
                    json!({"text": e.text, "count": e.count, "first_ns": e.first_ns,
                           "last_ns": e.last_ns, "consistent": e.consistent})
                })
                .collect();
            m.insert("errors".into(), Value::Array(errors));
            Value::Object(m)
        })
        .collect();
    o.insert("buses".into(), Value::Array(buses));
    Value::Object(o)
}
