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

/// The verbs work one session end asked of its device over a run (work
/// requests and doorbells posted, completions polled: what a NIC pays
/// for), in total and per message, as `verbs_work` and `work_per_msg`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Work {
    /// Messages the figures are divided by.
    pub messages: u64,
    /// The totals, set-up and close included.
    pub totals: WorkCounts<u64>,
}

/// The five counts of [`mdbus::VerbsWork`], totals or per message.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkCounts<T> {
    /// Send work requests posted.
    pub send_wrs: T,
    /// `ibv_post_send` calls.
    pub send_doorbells: T,
    /// Receive work requests posted.
    pub recv_wrs: T,
    /// `ibv_post_recv` / `ibv_post_srq_recv` calls.
    pub recv_doorbells: T,
    /// Work completions polled.
    pub completions: T,
}

impl Work {
    /// `w` over `messages`.
    pub fn of(w: mdbus::VerbsWork, messages: u64) -> Work {
        Work {
            messages,
            totals: WorkCounts {
                send_wrs: w.send_wrs,
                send_doorbells: w.send_doorbells,
                recv_wrs: w.recv_wrs,
                recv_doorbells: w.recv_doorbells,
                completions: w.completions,
            },
        }
    }

    /// Each count divided by the messages, to three decimals.
    pub fn per_msg(&self) -> WorkCounts<f64> {
        let m = self.messages.max(1) as f64;
        let per = |x: u64| (x as f64 / m * 1000.0).round() / 1000.0;
        let t = &self.totals;
        WorkCounts {
            send_wrs: per(t.send_wrs),
            send_doorbells: per(t.send_doorbells),
            recv_wrs: per(t.recv_wrs),
            recv_doorbells: per(t.recv_doorbells),
            completions: per(t.completions),
        }
    }
}

/// How a report carries [`Work`]: `verbs_work` (messages and totals) and
/// `work_per_msg`, both absent on transports other than verbs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkFields {
    /// This end's totals and the messages they cover.
    pub verbs_work: Work,
    /// The totals per message.
    pub work_per_msg: WorkCounts<f64>,
}

impl WorkFields {
    /// The fields for `w` over `messages`, or `None` without verbs work.
    pub fn of(w: Option<mdbus::VerbsWork>, messages: u64) -> Option<WorkFields> {
        w.map(|w| {
            let verbs_work = Work::of(w, messages);
            WorkFields {
                verbs_work,
                work_per_msg: verbs_work.per_msg(),
            }
        })
    }
}
