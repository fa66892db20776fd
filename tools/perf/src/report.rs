//! What every command prints: one JSON object per run (docs/JSON.md), or
//! tables whose latency columns are ib_send_lat's.

use mdbus_tool_support::output::{json_object, LatencyNs};
use serde::Serialize;
use serde_json::{Map, Value};

/// The JSON object of a run of `mode`: `schema` and `tool` first, then
/// `mode`, the fields of `head` (what holds for the whole run), then the
/// measurement: one result's fields, or with `sweep` (-a) a `results`
/// array of one object per size.
pub fn object(mode: &str, head: &impl Serialize, results: &[impl Serialize], sweep: bool) -> Value {
    let mut m = json_object("mdbus-perf");
    m.insert("mode".into(), mode.into());
    m.extend(fields(head));
    let mut results = results.iter().map(fields);
    if sweep {
        let all: Vec<Value> = results.map(Value::Object).collect();
        m.insert("results".into(), Value::Array(all));
    } else if let Some(one) = results.next() {
        m.extend(one);
    }
    Value::Object(m)
}

fn fields(v: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(v) {
        Ok(Value::Object(m)) => m,
        // Every report is a struct; nothing else is passed.
        _ => Map::new(),
    }
}

/// Prints [`object`] as one line on stdout.
pub fn print(mode: &str, head: &impl Serialize, results: &[impl Serialize], sweep: bool) {
    mdbus_tool_support::output::print_json(&object(mode, head, results, sweep));
}

/// A bandwidth as the report gives it: MB/s (10^6 bytes per second,
/// one decimal) or, with --report_gbits, Gb/s (10^9 bits per second, as
/// perftest's --report_gbits, two decimals). Serialised as the one key
/// `mb_per_sec` or `gbits_per_sec`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Bandwidth {
    /// Megabytes per second.
    #[serde(rename = "mb_per_sec")]
    Mb(f64),
    /// Gigabits per second.
    #[serde(rename = "gbits_per_sec")]
    Gbits(f64),
}

impl Bandwidth {
    /// The bandwidth of `msgs_per_sec` messages of `size` bytes.
    pub fn of(msgs_per_sec: f64, size: u64, gbits: bool) -> Bandwidth {
        let bytes = msgs_per_sec * size as f64;
        if gbits {
            Bandwidth::Gbits((bytes * 8.0 / 1e9 * 100.0).round() / 100.0)
        } else {
            Bandwidth::Mb((bytes / 1e6 * 10.0).round() / 10.0)
        }
    }

    /// The table column's heading.
    pub fn heading(gbits: bool) -> &'static str {
        if gbits {
            "Gb/s"
        } else {
            "MB/s"
        }
    }

    /// The value, in the unit of [`Bandwidth::heading`].
    pub fn value(self) -> f64 {
        match self {
            Bandwidth::Mb(v) | Bandwidth::Gbits(v) => v,
        }
    }
}

/// One row of a latency table: what it is (`half-RTT`, `RTT`,
/// `one-way`), the message size and the distribution.
pub struct LatencyRow<'a> {
    /// What the row measures.
    pub what: &'a str,
    /// Payload bytes.
    pub size: u64,
    /// The distribution, in nanoseconds.
    pub latency: &'a LatencyNs,
}

/// Prints latency rows as ib_send_lat's columns, in microseconds:
/// t_min, t_max, t_typical (the median), t_avg, t_stdev, 99% and 99.9%.
pub fn print_latency_table(rows: &[LatencyRow<'_>]) {
    println!(
        "{:<9} {:>8} {:>12} {:>12} {:>12} {:>16} {:>12} {:>14} {:>10} {:>12}",
        "",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99%[usec]",
        "99.9%[usec]"
    );
    let us = |ns: f64| ns / 1000.0;
    for r in rows {
        let l = r.latency;
        println!(
            "{:<9} {:>8} {:>12} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>10.2} {:>12.2}",
            r.what,
            r.size,
            l.count,
            us(l.min as f64),
            us(l.max as f64),
            us(l.p50 as f64),
            us(l.mean),
            us(l.stddev),
            us(l.p99 as f64),
            us(l.p999 as f64)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdbus_tool_support::output::check_convention;

    #[derive(Serialize)]
    struct Head {
        transport: &'static str,
    }

    #[derive(Serialize)]
    struct One {
        size_bytes: u64,
        #[serde(flatten)]
        bandwidth: Bandwidth,
    }

    #[test]
    fn one_result_is_merged_and_a_sweep_is_an_array() {
        let head = Head { transport: "shm" };
        let one = [One {
            size_bytes: 8,
            bandwidth: Bandwidth::of(1e6, 8, false),
        }];
        let v = object("throughput", &head, &one, false);
        assert_eq!(
            v,
            serde_json::json!({"schema": 1, "tool": "mdbus-perf", "mode": "throughput",
                               "transport": "shm", "size_bytes": 8, "mb_per_sec": 8.0})
        );
        assert_eq!(check_convention(&v), Ok(()));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys[..3], ["schema", "tool", "mode"]);

        let two = [
            One {
                size_bytes: 2,
                bandwidth: Bandwidth::of(1e9, 2, true),
            },
            One {
                size_bytes: 4,
                bandwidth: Bandwidth::of(1e9, 4, true),
            },
        ];
        let v = object("throughput", &head, &two, true);
        assert_eq!(v["results"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["results"][0]["gbits_per_sec"], 16.0);
        assert_eq!(v["results"][1]["gbits_per_sec"], 32.0);
        assert!(v.get("size_bytes").is_none());
        assert_eq!(check_convention(&v), Ok(()));
    }

    #[test]
    fn bandwidth_units() {
        assert_eq!(Bandwidth::of(1_000_000.0, 64, false), Bandwidth::Mb(64.0));
        assert_eq!(Bandwidth::of(1_000_000.0, 64, true), Bandwidth::Gbits(0.51));
        assert_eq!(Bandwidth::heading(true), "Gb/s");
    }
}
