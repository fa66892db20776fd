//! `mdbus-replay report`: interval logs side by side, to compare two
//! transports, hosts or builds: each log's intervals summed, its
//! percentiles, their ratios to the first log's, and one overlaid
//! percentile plot.

use std::path::PathBuf;

use serde::Serialize;

use super::error::ReplayError;
use super::hlog::read_hlog;
use super::plot::{self, Curve};
use super::subscribe::new_histogram;
use super::summary::micros;
use mdbus_tool_support::output::LatencyNs;

/// Options of `mdbus-replay report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Interval logs (.hlog) to compare; ratios are to the first.
    #[arg(required = true, value_name = "HLOG")]
    pub logs: Vec<PathBuf>,

    /// Directory for report.svg (created if missing).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub out: PathBuf,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One log's line of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct LogSummary {
    /// The file.
    pub file: String,
    /// Intervals in it.
    pub intervals: usize,
    /// Its latency.
    pub latency_ns: LatencyNs,
    /// Each percentile divided by the first log's (`null` where that is 0).
    pub ratio_to_first: Ratios,
}

/// Percentiles of one log over the first log's, named `at_` and the
/// percentile (the convention keeps `p50` and the like for latency
/// objects).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Ratios {
    /// p50 ratio.
    pub at_p50: Option<f64>,
    /// p90 ratio.
    pub at_p90: Option<f64>,
    /// p99 ratio.
    pub at_p99: Option<f64>,
    /// p99.9 ratio.
    pub at_p999: Option<f64>,
    /// p99.99 ratio.
    pub at_p9999: Option<f64>,
    /// max ratio.
    pub at_max: Option<f64>,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// One entry per log, in the order given.
    pub logs: Vec<LogSummary>,
    /// The plot.
    pub plot: String,
}

/// Reads the logs, writes the plot, returns the comparison.
///
/// # Errors
/// A log cannot be read or is not an interval log (the error names the
/// file and line), or the plot cannot be written.
pub fn run(args: &ReportArgs) -> Result<Report, ReplayError> {
    let mut logs = Vec::new();
    let mut curves = Vec::new();
    for path in &args.logs {
        let mut total = new_histogram();
        let mut intervals = 0;
        read_hlog(path, |i| {
            intervals += 1;
            if total.add(&i.histogram).is_err() {
                for v in i.histogram.iter_recorded() {
                    total.saturating_record_n(v.value_iterated_to(), v.count_at_value());
                }
            }
            Ok(())
        })?;
        let latency = LatencyNs::of(&total);
        curves.push(Curve::of(
            format!(
                "{}: p99 {} µs, max {} µs",
                path.display(),
                micros(latency.p99),
                micros(latency.max)
            ),
            &total,
        ));
        logs.push(LogSummary {
            file: path.display().to_string(),
            intervals,
            latency_ns: latency,
            ratio_to_first: Ratios::default(),
        });
    }
    let base = logs[0].latency_ns;
    for l in &mut logs {
        let r = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        let p = l.latency_ns;
        l.ratio_to_first = Ratios {
            at_p50: r(p.p50, base.p50),
            at_p90: r(p.p90, base.p90),
            at_p99: r(p.p99, base.p99),
            at_p999: r(p.p999, base.p999),
            at_p9999: r(p.p9999, base.p9999),
            at_max: r(p.max, base.max),
        };
    }
    std::fs::create_dir_all(&args.out).map_err(|e| ReplayError::output(&args.out, e))?;
    let svg = args.out.join("report.svg");
    plot::percentiles(
        &svg,
        "mdbus-replay report: one-way latency by percentile",
        &curves,
    )?;
    Ok(Report {
        logs,
        plot: svg.display().to_string(),
    })
}

impl Report {
    /// The side-by-side table: a column per log, µs, with the ratio to the
    /// first log in parentheses.
    pub fn table(&self) -> String {
        let width = self
            .logs
            .iter()
            .map(|l| l.file.len())
            .max()
            .unwrap_or(0)
            .clamp(22, 48);
        let mut s = String::from("one-way latency, µs (ratio to the first log)\n");
        s.push_str(&format!("{:>8}", ""));
        for l in &self.logs {
            s.push_str(&format!("  {:>width$}", shorten(&l.file, width)));
        }
        s.push('\n');
        s.push_str(&format!("{:>8}", "count"));
        for l in &self.logs {
            s.push_str(&format!("  {:>width$}", l.latency_ns.count));
        }
        s.push('\n');
        for (row, name) in ROWS.iter().enumerate() {
            s.push_str(&format!("{name:>8}"));
            for (i, l) in self.logs.iter().enumerate() {
                let v = rows(&l.latency_ns)[row];
                let cell = if i == 0 {
                    micros(v)
                } else {
                    let ratio = ratio_row(&l.ratio_to_first, row)
                        .map_or_else(|| "-".to_string(), |r| format!("{}x", ratio_text(r)));
                    format!("{} ({ratio})", micros(v))
                };
                s.push_str(&format!("  {cell:>width$}"));
            }
            s.push('\n');
        }
        s.push_str(&format!("\nwritten: {}\n", self.plot));
        s
    }
}

/// A ratio to three significant digits: `0.00123`, `1.23`, `123`.
fn ratio_text(r: f64) -> String {
    if r <= 0.0 || !r.is_finite() {
        return format!("{r}");
    }
    let decimals = (2 - r.log10().floor() as i32).clamp(0, 9) as usize;
    format!("{r:.decimals$}")
}

/// The table's rows: p50 to p99.99, then max.
const ROWS: [&str; 6] = ["p50", "p90", "p99", "p99.9", "p99.99", "max"];

fn rows(l: &LatencyNs) -> [u64; 6] {
    [l.p50, l.p90, l.p99, l.p999, l.p9999, l.max]
}

fn ratio_row(r: &Ratios, row: usize) -> Option<f64> {
    [
        r.at_p50, r.at_p90, r.at_p99, r.at_p999, r.at_p9999, r.at_max,
    ]
    .get(row)
    .copied()
    .flatten()
}

fn shorten(s: &str, width: usize) -> String {
    // Keeps the end of a long path: the file name tells logs apart.
    let n = s.chars().count();
    if n <= width {
        s.to_owned()
    } else {
        let tail: String = s.chars().skip(n - (width - 3)).collect();
        format!("...{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_keep_three_significant_digits() {
        assert_eq!(ratio_text(1.0), "1.00");
        assert_eq!(ratio_text(0.001234), "0.00123");
        assert_eq!(ratio_text(123.4), "123");
        assert_eq!(ratio_text(9.876), "9.88");
    }

    #[test]
    fn long_names_keep_their_end() {
        assert_eq!(shorten("abc", 10), "abc");
        assert_eq!(
            shorten("/very/long/path/to/latency.hlog", 16),
            ".../latency.hlog"
        );
    }
}
