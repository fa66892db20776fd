//! JSON output and exit statuses, the same in every tool. The JSON
//! convention (docs/JSON.md): one object per `--json` run on stdout,
//! snake_case keys with units in their names, a `schema` version, and
//! every latency as a [`LatencyNs`] object under a key ending in `_ns`.

use hdrhistogram::Histogram;

/// Version of the tools' JSON shapes, in every object's `schema` field.
/// Raised when a key is renamed or removed or changes meaning (adding a
/// key does not raise it).
pub const SCHEMA: u32 = 1;

/// A latency distribution in nanoseconds, as every tool prints it:
/// percentiles as HdrHistogram reports them (the highest value equivalent
/// to the one at that rank), and the minimum, mean and standard deviation.
/// An empty histogram gives all zeros.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencyNs {
    /// Values recorded.
    pub count: u64,
    /// Smallest value.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Largest value.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation.
    pub stddev: f64,
}

impl LatencyNs {
    /// The distribution recorded in `h` (any unit the caller chose; the
    /// tools record nanoseconds).
    pub fn of(h: &Histogram<u64>) -> LatencyNs {
        if h.is_empty() {
            return LatencyNs {
                count: 0,
                min: 0,
                p50: 0,
                p90: 0,
                p99: 0,
                p999: 0,
                p9999: 0,
                max: 0,
                mean: 0.0,
                stddev: 0.0,
            };
        }
        let s = mdbus::metrics::summarize(h);
        LatencyNs {
            count: h.len(),
            min: h.min(),
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
            p999: s.p999,
            p9999: s.p9999,
            max: s.max,
            mean: h.mean(),
            stddev: h.stdev(),
        }
    }

    /// The same distribution with every value halved: a round trip's
    /// one-way share, as perftest's latency tests report it.
    pub fn halved(self) -> LatencyNs {
        self.divided(2)
    }

    /// The same distribution with every value divided by `by` (integers
    /// truncated): nanoseconds to microseconds with 1000.
    pub fn divided(self, by: u64) -> LatencyNs {
        let by = by.max(1);
        LatencyNs {
            count: self.count,
            min: self.min / by,
            p50: self.p50 / by,
            p90: self.p90 / by,
            p99: self.p99 / by,
            p999: self.p999 / by,
            p9999: self.p9999 / by,
            max: self.max / by,
            mean: self.mean / by as f64,
            stddev: self.stddev / by as f64,
        }
    }
}

/// Starts a tool's JSON object: `{"schema": SCHEMA, "tool": tool}`, to
/// which the tool adds its fields.
pub fn json_object(tool: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("schema".into(), SCHEMA.into());
    m.insert("tool".into(), tool.into());
    m
}

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

/// The latency object's keys, in order (rule 4 of docs/JSON.md).
pub const LATENCY_KEYS: [&str; 10] = [
    "count", "min", "p50", "p90", "p99", "p999", "p9999", "max", "mean", "stddev",
];

/// Checks one tool's `--json` object against docs/JSON.md: `schema` and
/// `tool` present, snake_case keys at every depth, every object under a
/// key ending in `_ns` (or `_us`) that has a `p50` is a whole latency object, and no
/// latency figure outside one (`p50` and friends appear only inside a
/// `*_ns` object). Returns every violation, one sentence each.
pub fn check_convention(v: &serde_json::Value) -> Result<(), Vec<String>> {
    let mut bad = Vec::new();
    match v.as_object() {
        None => bad.push("the output is not a JSON object".to_string()),
        Some(m) => {
            if m.get("schema").and_then(|s| s.as_u64()) != Some(u64::from(SCHEMA)) {
                bad.push(format!("`schema` is not {SCHEMA}"));
            }
            if !m.get("tool").is_some_and(|t| t.is_string()) {
                bad.push("`tool` is missing".to_string());
            }
        }
    }
    walk(v, "", None, &mut bad);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad)
    }
}

fn snake_case(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !k.starts_with('_')
}

fn walk(v: &serde_json::Value, path: &str, key: Option<&str>, bad: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            let latency_like = m.contains_key("p50") || m.contains_key("p99");
            if latency_like {
                match key {
                    Some(k) if k.ends_with("_ns") || k.ends_with("_us") => {
                        for want in LATENCY_KEYS {
                            if !m.get(want).is_some_and(|x| x.is_number()) {
                                bad.push(format!("{path}: latency object lacks `{want}`"));
                            }
                        }
                    }
                    _ => bad.push(format!(
                        "{path}: percentiles outside a latency object under a `*_ns` key"
                    )),
                }
            }
            for (k, x) in m {
                // Maps keyed by data (labels, stream names) are allowed any
                // key; they sit under keys that say so.
                let free = key.is_some_and(|p| {
                    matches!(
                        p,
                        "streams" | "counters" | "labels" | "by_stream" | "routes"
                    )
                });
                if !free && !snake_case(k) {
                    bad.push(format!("{path}: key `{k}` is not snake_case"));
                }
                walk(x, &format!("{path}.{k}"), Some(k), bad);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, &format!("{path}[{i}]"), key, bad);
            }
        }
        _ => {
            if let Some(k) = key {
                if k.starts_with("latency_") && k.ends_with("_ns") && k != "latency_ns" {
                    bad.push(format!(
                        "{path}: a flat latency figure; use a `latency_ns` object"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_reads_percentiles_min_mean_and_stddev() {
        let mut h = crate::percentiles::latency_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let l = LatencyNs::of(&h);
        assert_eq!(
            (l.count, l.min, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max),
            (1000, 1, 500, 900, 990, 999, 1000, 1000)
        );
        assert!((l.mean - 500.5).abs() < 0.01, "{l:?}");
        assert!((l.stddev - 288.67).abs() < 0.1, "{l:?}");
        let half = l.halved();
        assert_eq!((half.p50, half.max), (250, 500));
        let v = serde_json::to_value(l).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        for k in [
            "count", "min", "p50", "p90", "p99", "p999", "p9999", "max", "mean", "stddev",
        ] {
            assert!(keys.contains(&k), "{k} missing from {v}");
        }
    }

    #[test]
    fn an_empty_histogram_is_all_zeros() {
        let l = LatencyNs::of(&crate::percentiles::latency_histogram());
        assert_eq!((l.count, l.min, l.max, l.mean), (0, 0, 0, 0.0));
    }

    #[test]
    fn the_checker_accepts_the_convention_and_names_each_violation() {
        let mut h = crate::percentiles::latency_histogram();
        h.record(5).unwrap();
        let mut m = json_object("mdbus-perf");
        m.insert(
            "latency_ns".into(),
            serde_json::to_value(LatencyNs::of(&h)).unwrap(),
        );
        m.insert("msgs_per_sec".into(), 1.0.into());
        let good = serde_json::Value::Object(m);
        assert_eq!(check_convention(&good), Ok(()));

        let bad = serde_json::json!({
            "schema": 1, "tool": "x",
            "rtt_ns": {"p50": 1, "p99": 2},
            "latency": {"p50": 1},
            "latency_p50_ns": 3,
            "malformedPackets": 1,
        });
        let errors = check_convention(&bad).unwrap_err();
        let all = errors.join("\n");
        assert!(
            all.contains(".rtt_ns: latency object lacks `p9999`"),
            "{all}"
        );
        assert!(all.contains(".latency: percentiles outside"), "{all}");
        assert!(
            all.contains(".latency_p50_ns: a flat latency figure"),
            "{all}"
        );
        assert!(
            all.contains("key `malformedPackets` is not snake_case"),
            "{all}"
        );
        assert!(check_convention(&serde_json::json!({"tool": "x"}))
            .unwrap_err()
            .contains(&"`schema` is not 1".to_string()));
    }

    #[test]
    fn every_object_starts_with_the_schema_and_the_tool() {
        let m = json_object("mdbus-perf");
        assert_eq!(
            serde_json::Value::Object(m),
            serde_json::json!({"schema": SCHEMA, "tool": "mdbus-perf"})
        );
    }
}
