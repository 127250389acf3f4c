//! Line charts as hand-written SVG, for the benchmarks' plots (throughput against
//! threads): one line per compared system, no dependency.
//!
//! Invariants:
//! - x values are placed evenly in ascending order (thread counts 1, 2, 4, 8 read as a
//!   log scale), each labelled with its value; y starts at 0, so heights compare.
//! - Every text is XML-escaped; a point is drawn where a value was measured and a
//!   line joins only measured points.

use std::fmt::Write;

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// (x, y) pairs, any order.
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const Y_TICKS: u32 = 5;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick step of 1, 2 or 5 times a power of ten that covers `max` in about
/// [`Y_TICKS`] steps.
fn tick_step(max: f64) -> f64 {
    let raw = max / f64::from(Y_TICKS);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * power)
}

/// "1.2M", "35k", "12": short labels for the y axis.
pub fn short_number(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = format!("{scaled:.1}");
    format!("{}{suffix}", text.trim_end_matches(".0"))
}

/// The SVG document of `chart`.
pub fn svg(chart: &Chart) -> String {
    let mut xs: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let y_max = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let step = if y_max > 0.0 { tick_step(y_max) } else { 1.0 };
    let top = (y_max / step).ceil().max(1.0) * step;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x_at = |x: f64| {
        let i = xs.iter().position(|&v| v == x).expect("x of a point");
        LEFT + plot_w * (i as f64 + 0.5) / xs.len().max(1) as f64
    };
    let y_at = |y: f64| TOP + plot_h * (1.0 - y / top);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(&chart.title)
    );
    axes(&mut out, &xs, step, top, &x_at, &y_at, chart);
    for (i, series) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points = series.points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", x_at(x), y_at(y)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in &points {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"#,
                x_at(x),
                y_at(y)
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = WIDTH - RIGHT + 15.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(&series.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn axes(
    out: &mut String,
    xs: &[f64],
    step: f64,
    top: f64,
    x_at: &dyn Fn(f64) -> f64,
    y_at: &dyn Fn(f64) -> f64,
    chart: &Chart,
) {
    let (x0, x1, y0) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM);
    let _ = writeln!(
        out,
        r#"<path d="M{x0},{TOP} V{y0} H{x1}" fill="none" stroke="black"/>"#
    );
    let ticks = (top / step).round() as u32;
    for t in 0..=ticks {
        let v = f64::from(t) * step;
        let y = y_at(v);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            short_number(v)
        );
    }
    for &x in xs {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x_at(x),
            y0 + 18.0,
            short_number(x)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 10.0,
        escape(&chart.x_label)
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + (y0 - TOP) / 2.0,
        escape(&chart.y_label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_labels_are_round() {
        assert_eq!(tick_step(100.0), 20.0);
        assert_eq!(tick_step(7.0), 2.0);
        assert_eq!(tick_step(1.2e6), 5e5);
        assert_eq!(short_number(1_200_000.0), "1.2M");
        assert_eq!(short_number(35_000.0), "35k");
        assert_eq!(short_number(4.0), "4");
    }

    #[test]
    fn every_series_is_drawn_and_escaped() {
        let chart = Chart {
            title: "create <private>".to_string(),
            x_label: "threads".to_string(),
            y_label: "ops/s".to_string(),
            series: vec![
                Series {
                    name: "api".to_string(),
                    points: vec![(2.0, 150.0), (1.0, 100.0)],
                },
                Series {
                    name: "ext4 & co".to_string(),
                    points: vec![(1.0, 50.0)],
                },
            ],
        };
        let svg = svg(&chart);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("create &lt;private&gt;") && svg.contains("ext4 &amp; co"));
        assert!(!svg.contains("NaN"));
    }
}
