//! The percentile distribution (.hgrm): the table HdrHistogram's
//! `outputPercentileDistribution` prints, line for line in its format.
//!
//! ```text
//!        Value     Percentile TotalCount 1/(1-Percentile)
//!
//!        0.250 0.000000000000          1           1.00
//!        ...
//! #[Mean    =        0.312, StdDeviation   =        0.101]
//! #[Max     =       12.345, Total count    =      1000000]
//! #[Buckets =           31, SubBuckets     =         2048]
//! ```
//!
//! Values are printed divided by a scaling ratio, as the reference does
//! (its `outputValueUnitScalingRatio`); mdbus-replay records nanoseconds
//! and prints microseconds (ratio 1000). Five percentile ticks per half
//! distance, the reference's default.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// Nanoseconds to microseconds.
pub const MICROSECONDS: f64 = 1000.0;
/// Percentile steps per halving of the distance to 100%.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// The distribution of `h` as the reference prints it, values divided by
/// `scaling_ratio`.
pub fn percentile_distribution(h: &Histogram<u64>, scaling_ratio: f64) -> String {
    let digits = usize::from(h.sigfig());
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    if !h.is_empty() {
        let mut total = 0u64;
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / scaling_ratio;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:12.digits$} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:12.digits$} {q:2.12} {total:10}");
            }
        }
    }
    let (mean, stdev) = if h.is_empty() {
        (0.0, 0.0)
    } else {
        (h.mean() / scaling_ratio, h.stdev() / scaling_ratio)
    };
    let _ = writeln!(
        out,
        "#[Mean    = {mean:12.digits$}, StdDeviation   = {stdev:12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.digits$}, Total count    = {:12}]",
        h.max() as f64 / scaling_ratio,
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_bucket_count(h.sigfig())
    );
    out
}

/// Sub-buckets per bucket for `sigfig` significant digits: the power of
/// two that resolves 2 * 10^sigfig values (2048 for 3 digits).
pub fn sub_bucket_count(sigfig: u8) -> u64 {
    let largest = 2 * 10u64.pow(u32::from(sigfig));
    largest.next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_layout() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let text = percentile_distribution(&h, MICROSECONDS);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "       1.000 0.000000000000          1           1.00"
        );
        assert!(lines.contains(&"     500.223 0.500000000000        500           2.00"));
        let last = lines[lines.len() - 4];
        assert_eq!(last, "    1000.447 1.000000000000       1000");
        assert!(lines.contains(&"     999.423 0.998046875000        999         512.00"));
        assert_eq!(
            lines[lines.len() - 3],
            "#[Mean    =      500.505, StdDeviation   =      288.676]"
        );
        assert_eq!(
            lines[lines.len() - 2],
            "#[Max     =     1000.447, Total count    =         1000]"
        );
        assert_eq!(
            lines[lines.len() - 1],
            format!(
                "#[Buckets = {:12}, SubBuckets     =         2048]",
                h.buckets()
            )
        );
    }

    #[test]
    fn sub_buckets() {
        assert_eq!(sub_bucket_count(1), 32);
        assert_eq!(sub_bucket_count(2), 256);
        assert_eq!(sub_bucket_count(3), 2048);
    }
}
