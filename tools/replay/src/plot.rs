//! SVG plots, drawn with `plotters`' SVG backend (text is SVG text: no
//! font files or image libraries involved).
//!
//! - Latency by percentile, HdrHistogram's usual picture: the x axis is
//!   `1/(1-p)` on a log scale, labelled 0%, 90%, 99%, 99.9%...; latency on
//!   a log scale in microseconds. Several curves overlay for `report`.
//! - Latency over time: p50, p99 and max of each interval.

use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;

use super::error::ReplayError;
use super::hgrm::TICKS_PER_HALF_DISTANCE;

const SIZE: (u32, u32) = (1100, 650);
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One curve of a percentile plot.
#[derive(Debug, Clone)]
pub struct Curve {
    /// Legend text.
    pub label: String,
    /// `(1/(1-p), latency in µs)`, p ascending.
    pub points: Vec<(f64, f64)>,
}

impl Curve {
    /// The percentile curve of `h` (ns), with `label`. The last point, the
    /// maximum, is placed at `1/(1-p)` for p = 1 - 1/count, where the
    /// percentile axis of this many values ends.
    pub fn of(label: impl Into<String>, h: &Histogram<u64>) -> Curve {
        let mut points = Vec::new();
        if !h.is_empty() {
            let end = h.len().max(2) as f64;
            for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
                let q = v.quantile_iterated_to();
                let x = if q < 1.0 {
                    (1.0 / (1.0 - q)).min(end)
                } else {
                    end
                };
                points.push((x, v.value_iterated_to() as f64 / 1000.0));
            }
        }
        Curve {
            label: label.into(),
            points,
        }
    }
}

/// One interval of a timeline: seconds from the start, and p50, p99 and
/// max in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelinePoint {
    /// Start of the interval, seconds from the start of the replay.
    pub t: f64,
    /// Median, µs.
    pub p50: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// Maximum, µs.
    pub max: f64,
}

/// Draws latency by percentile for `curves` into `path`.
///
/// # Errors
/// The file cannot be written.
pub fn percentiles(path: &Path, title: &str, curves: &[Curve]) -> Result<(), ReplayError> {
    draw(path, |root| {
        let xs = curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
        let x_end = xs.fold(100.0f64, f64::max);
        // Up to the next power of ten, so the axis ends on a label.
        let x_end = 10f64.powf(x_end.log10().ceil());
        let (y_lo, y_hi) = y_range(curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)));
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(20)
            // Room for the last percentile label, centred on the edge.
            .margin_right(50)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((1f64..x_end * 1.001).log_scale(), (y_lo..y_hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("latency (µs, log scale)")
            .x_label_formatter(&|x| percentile_label(*x))
            .y_label_formatter(&|y| number_label(*y))
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, c) in curves.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    c.points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(c.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            // Curves rise to the upper right; the lower right stays clear.
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        Ok(())
    })
}

/// Draws p50, p99 and max per interval into `path`.
///
/// # Errors
/// The file cannot be written.
pub fn timeline(
    path: &Path,
    title: &str,
    interval_s: f64,
    points: &[TimelinePoint],
) -> Result<(), ReplayError> {
    draw(path, |root| {
        let t_end = points
            .iter()
            .map(|p| p.t + interval_s)
            .fold(interval_s, f64::max);
        let (y_lo, y_hi) = y_range(points.iter().flat_map(|p| [p.p50, p.max]));
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..t_end, (y_lo..y_hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(format!(
                "time since the start of the replay (s; one point per {} interval)",
                duration_label(interval_s)
            ))
            .y_desc("latency (µs, log scale)")
            .y_label_formatter(&|y| number_label(*y))
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .draw()?;
        // Each interval's point sits at its middle.
        let mid = interval_s / 2.0;
        let series: [Series; 3] = [
            ("max", PALETTE[1], |p| p.max),
            ("p99", PALETTE[3], |p| p.p99),
            ("p50", PALETTE[0], |p| p.p50),
        ];
        for (label, color, value) in series {
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|p| (p.t + mid, value(p))),
                    color.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
                });
            if points.len() <= 200 {
                chart.draw_series(
                    points
                        .iter()
                        .map(|p| Circle::new((p.t + mid, value(p)), 3, color.filled())),
                )?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
        Ok(())
    })
}

/// A timeline series: its legend, colour, and value of a point.
type Series = (&'static str, RGBColor, fn(&TimelinePoint) -> f64);
type Root<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error + 'static>>;

fn draw(path: &Path, body: impl FnOnce(&Root<'_>) -> DrawResult) -> Result<(), ReplayError> {
    let fail = |e: Box<dyn std::error::Error>| {
        ReplayError::output(path, std::io::Error::other(e.to_string()))
    };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(Box::new(e)))?;
    body(&root).map_err(fail)?;
    root.present().map_err(|e| fail(Box::new(e)))?;
    Ok(())
}

/// A log axis range around the values, a little wider than they are.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return (0.1, 10.0);
    }
    // Whole decades, so the axis is labelled at both ends (a hair wider:
    // the axis only labels decades strictly inside its range, in floating
    // point).
    let lo = 10f64.powf((lo / 1.2).log10().floor());
    let hi = 10f64.powf((hi * 1.2).log10().ceil()).max(lo * 10.0);
    (lo * 0.999, hi * 1.001)
}

/// `0%`, `90%`, `99%`, `99.9%`... for `x = 1/(1-p)` at powers of ten;
/// nothing between them.
pub fn percentile_label(x: f64) -> String {
    let decade = x.log10();
    if (decade - decade.round()).abs() > 1e-9 || x < 1.0 {
        return String::new();
    }
    let nines = decade.round() as usize;
    if nines == 0 {
        return "0%".into();
    }
    let decimals = nines.saturating_sub(2);
    format!("{:.*}%", decimals, 100.0 * (1.0 - 1.0 / x))
}

/// `0.01`, `1`, `250`, `10000`: axis numbers without trailing zeros.
fn number_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{}", v.round())
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn duration_label(s: f64) -> String {
    if s >= 1.0 {
        format!("{s} s")
    } else {
        format!("{} ms", (s * 1000.0).round())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis_labels() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e4), "99.99%");
        assert_eq!(percentile_label(1e6), "99.9999%");
        assert_eq!(percentile_label(20.0), "");
    }

    #[test]
    fn numbers() {
        assert_eq!(number_label(1000.0), "1000");
        assert_eq!(number_label(0.1), "0.1");
        assert_eq!(number_label(0.001), "0.001");
    }

    #[test]
    fn curves_end_at_the_count() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        for v in 1..=1000 {
            h.record(v * 100).unwrap();
        }
        let c = Curve::of("x", &h);
        assert_eq!(c.points.first().unwrap(), &(1.0, 0.1));
        let last = c.points.last().unwrap();
        assert_eq!(last.0, 1000.0);
        assert!((last.1 - 100.0).abs() < 0.1, "{last:?}");
        assert!(c
            .points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
