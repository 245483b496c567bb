//! The chart, written by hand: success rate per class per second (top) and p99 latency
//! per class per second on a log scale (bottom), fault windows shaded, the single-node
//! baseline dashed beside the cluster.

use std::fmt::Write as _;

use crate::faults::FaultWindow;
use crate::history::Class;
use crate::report::{RunReport, Second};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP_Y: (f64, f64) = (48.0, 248.0);
const LOW_Y: (f64, f64) = (296.0, 476.0);
const HEIGHT: f64 = 540.0;
/// Latency axis: 1 ms … 10 s.
const LAT_MIN: f64 = 1.0;
const LAT_MAX: f64 = 10_000.0;

fn colour(class: Class) -> &'static str {
    match class {
        Class::Read => "#1f77b4",
        Class::Write => "#d62728",
        Class::Invoke => "#2ca02c",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Axes {
    seconds: f64,
}

impl Axes {
    fn x(&self, t: f64) -> f64 {
        LEFT + (WIDTH - LEFT - RIGHT) * (t / self.seconds.max(1.0))
    }
    fn rate_y(rate: f64) -> f64 {
        TOP_Y.1 - (TOP_Y.1 - TOP_Y.0) * rate.clamp(0.0, 1.0)
    }
    fn latency_y(ms: f64) -> f64 {
        let l = (ms.clamp(LAT_MIN, LAT_MAX).log10() - LAT_MIN.log10())
            / (LAT_MAX.log10() - LAT_MIN.log10());
        LOW_Y.1 - (LOW_Y.1 - LOW_Y.0) * l
    }
}

/// Polylines of `value` per second (seconds with no attempts break the line).
fn series(
    out: &mut String,
    axes: &Axes,
    seconds: &[Second],
    class: Class,
    value: impl Fn(&crate::report::Stats) -> f64,
    y: impl Fn(f64) -> f64,
    style: &str,
) {
    let mut points: Vec<String> = Vec::new();
    let flush = |out: &mut String, points: &mut Vec<String>| {
        if points.len() > 1 {
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.6" {style} points="{}"/>"#,
                colour(class),
                points.join(" ")
            );
        }
        points.clear();
    };
    for s in seconds {
        match s.classes.get(class.name()) {
            Some(stats) if stats.attempts > 0 => points.push(format!(
                "{:.1},{:.1}",
                axes.x(s.t as f64 + 0.5),
                y(value(stats))
            )),
            _ => flush(out, &mut points),
        }
    }
    flush(out, &mut points);
}

fn shade(out: &mut String, axes: &Axes, windows: &[FaultWindow], y: (f64, f64), label: bool) {
    for w in windows {
        let (x0, x1) = (
            axes.x(w.injected_s),
            axes.x(w.healed_s.max(w.injected_s + 0.2)),
        );
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#f7c6c6" opacity="0.55"/>"##,
            y.0,
            x1 - x0,
            y.1 - y.0
        );
        if label {
            let _ = writeln!(
                out,
                r##"<text x="{x0:.1}" y="{:.1}" font-size="10" fill="#a33">{}</text>"##,
                y.0 - 3.0,
                escape(&w.name)
            );
        }
    }
}

/// The chart of `cluster`, with `baseline` dashed if given.
pub fn chart(title: &str, cluster: &RunReport, baseline: Option<&RunReport>) -> String {
    let seconds = cluster
        .per_second
        .len()
        .max(baseline.map_or(0, |b| b.per_second.len())) as f64;
    let axes = Axes { seconds };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    shade(
        &mut out,
        &axes,
        &cluster
            .faults
            .iter()
            .map(|f| f.window.clone())
            .collect::<Vec<_>>(),
        TOP_Y,
        true,
    );
    shade(
        &mut out,
        &axes,
        &cluster
            .faults
            .iter()
            .map(|f| f.window.clone())
            .collect::<Vec<_>>(),
        LOW_Y,
        false,
    );
    // Axes and grid.
    for (rate, label) in [(0.0, "0%"), (0.5, "50%"), (0.9, "90%"), (1.0, "100%")] {
        let y = Axes::rate_y(rate);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{label}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 3.0
        );
    }
    for (ms, label) in [
        (1.0, "1 ms"),
        (10.0, "10 ms"),
        (100.0, "100 ms"),
        (1000.0, "1 s"),
        (10_000.0, "10 s"),
    ] {
        let y = Axes::latency_y(ms);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{label}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 3.0
        );
    }
    let step = if seconds > 120.0 {
        20
    } else if seconds > 40.0 {
        10
    } else {
        5
    };
    for t in (0..=seconds as u64).step_by(step) {
        let x = axes.x(t as f64);
        let _ = writeln!(
            out,
            r#"<text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{t}s</text>"#,
            LOW_Y.1 + 14.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{:.1}" font-size="11">success rate per second</text><text x="{LEFT}" y="{:.1}" font-size="11">p99 latency per second (log)</text>"#,
        TOP_Y.0 - 14.0,
        LOW_Y.0 - 8.0
    );
    for class in Class::ALL {
        series(
            &mut out,
            &axes,
            &cluster.per_second,
            class,
            |s| s.rate(),
            Axes::rate_y,
            "",
        );
        series(
            &mut out,
            &axes,
            &cluster.per_second,
            class,
            |s| s.latency.p99_ms,
            Axes::latency_y,
            "",
        );
        if let Some(b) = baseline {
            let dashed = r#"stroke-dasharray="5,3" opacity="0.7""#;
            series(
                &mut out,
                &axes,
                &b.per_second,
                class,
                |s| s.rate(),
                Axes::rate_y,
                dashed,
            );
            series(
                &mut out,
                &axes,
                &b.per_second,
                class,
                |s| s.latency.p99_ms,
                Axes::latency_y,
                dashed,
            );
        }
    }
    // Legend.
    let mut x = LEFT;
    let y = HEIGHT - 22.0;
    for class in Class::ALL {
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            x + 18.0,
            colour(class),
            x + 22.0,
            y + 4.0,
            class.name()
        );
        x += 90.0;
    }
    let _ = writeln!(
        out,
        r##"<text x="{x:.1}" y="{:.1}" font-size="11">solid: cluster ({} nodes); dashed: one node killed on the same schedule; shaded: faults</text>"##,
        y + 4.0,
        cluster.nodes
    );
    let _ = writeln!(out, "</svg>");
    out
}
