//! SVG of a throughput sweep: requests/s vs connections (top) and p99
//! latency vs connections (bottom), one line per target.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{Measured, TargetOutcome};
use crate::BoxError;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 900;

/// One line: target name and (connections, value) points.
struct Line {
    name: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

fn color_of(index: usize) -> RGBColor {
    const PALETTE: [RGBColor; 4] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    PALETTE[index % PALETTE.len()]
}

fn lines(
    outcomes: &[TargetOutcome],
    value: impl Fn(&crate::throughput::PointResult) -> f64,
) -> Vec<Line> {
    outcomes
        .iter()
        .filter_map(|outcome| match &outcome.measured {
            Ok(Measured::Throughput(points)) => Some((outcome.kind.name(), points)),
            _ => None,
        })
        .enumerate()
        .map(|(index, (name, points))| Line {
            name,
            color: color_of(index),
            points: points
                .iter()
                .filter(|p| p.connected > 0)
                .map(|p| (p.connections as f64, value(p)))
                .collect(),
        })
        .collect()
}

fn draw_chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    lines: &[Line],
) -> Result<(), BoxError> {
    let all = lines.iter().flat_map(|l| l.points.iter());
    let x_min = all.clone().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = all.clone().map(|p| p.0).fold(0.0, f64::max);
    let y_max = all.map(|p| p.1).fold(0.0, f64::max);
    if !x_min.is_finite() {
        return Ok(());
    }
    // Log x axis; widen it so a single connection count still has a range. Ticks at the
    // connection counts measured, not at powers of ten.
    let (x_lo, x_hi) = (x_min / 1.5, x_max * 1.5);
    let mut ticks: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let y_hi = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d((x_lo..x_hi).log_scale().with_key_points(ticks), 0.0..y_hi)?;
    chart
        .configure_mesh()
        .x_desc("connections")
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for line in lines {
        let color = line.color;
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(line.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(PointSeries::of_element(
            line.points.iter().copied(),
            4,
            color.filled(),
            &|coord, size, style| Circle::new(coord, size, style),
        ))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Writes `throughput.svg` into `dir`; returns its path.
pub fn write_throughput_svg(dir: &Path, outcomes: &[TargetOutcome]) -> Result<PathBuf, BoxError> {
    let path = dir.join("throughput.svg");
    {
        let root = SVGBackend::new(&path, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(HEIGHT / 2);
        draw_chart(
            &top,
            "requests/s vs connections",
            "requests/s",
            &lines(outcomes, |p| p.requests_per_sec()),
        )?;
        draw_chart(
            &bottom,
            "p99 latency vs connections",
            "p99 latency (µs)",
            &lines(outcomes, |p| {
                p.tally.latency_us.value_at_quantile(0.99) as f64
            }),
        )?;
        root.present()?;
    }
    Ok(path)
}
