//! One self-contained HTML file for stored runs: every chart is inline SVG drawn with
//! plotters, the style sheet is inline, and nothing is fetched when it opens.
//!
//! Charts: goodput (or transactions) over time per flow and in sum, latency percentile
//! curves, sweep curves (the headline and CPU against the swept parameter), the
//! iterations of a repeated run, and comparison bars across runs.

use crate::compare::compare;
use crate::document::Document;
use crate::model::{Headline, Report};
use crate::sweep::SweepReport;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::fmt::Write as _;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 340;

/// A named line of (x, y) points.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// How an x axis labels its ticks.
enum XAxis {
    Linear,
    /// Categories at 0, 1, 2, ... named by these labels.
    Categories(Vec<String>),
    /// "Nines": x = -log10(1 - q), labelled as the percentile.
    Nines,
}

pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A divisor and unit that keep the figures readable.
fn rate_unit(max_bps: f64) -> (f64, &'static str) {
    if max_bps >= 1e9 {
        (1e9, "Gbit/s")
    } else if max_bps >= 1e6 {
        (1e6, "Mbit/s")
    } else {
        (1e3, "kbit/s")
    }
}

fn headline_unit(headline: Headline, max: f64) -> (f64, &'static str) {
    match headline {
        Headline::ReceiverBps => rate_unit(max),
        Headline::TransactionsPerS => (1.0, "transactions/s"),
        Headline::Rpm => (1.0, "RPM"),
    }
}

fn x_label(axis: &XAxis, x: f64) -> String {
    match axis {
        XAxis::Linear => {
            if x == x.trunc() {
                format!("{x:.0}")
            } else {
                format!("{x:.1}")
            }
        }
        XAxis::Categories(labels) => {
            let index = x.round();
            if (x - index).abs() > 1e-6 || index < 0.0 {
                return String::new();
            }
            labels.get(index as usize).cloned().unwrap_or_default()
        }
        XAxis::Nines => {
            let pct = 100.0 * (1.0 - 10f64.powf(-x));
            let text = format!("{pct:.4}");
            format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
        }
    }
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
type DrawResult<'b> =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'b> as DrawingBackend>::ErrorType>>;

/// One chart as an SVG element: a white canvas with its caption and axes over `x` and
/// 0 to `y_max`, drawn into by `draw`, with a legend of the labelled series when there
/// is more than one; an empty string if drawing fails.
fn svg_chart(
    title: &str,
    x: std::ops::Range<f64>,
    y_max: f64,
    series: usize,
    draw: impl for<'a, 'b> FnOnce(&mut Chart<'a, 'b>) -> DrawResult<'b>,
) -> String {
    let mut svg = String::new();
    let drawn = (|| -> DrawResult<'_> {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x, 0.0..y_max)?;
        draw(&mut chart)?;
        if series > 1 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .position(SeriesLabelPosition::LowerRight)
                .draw()?;
        }
        root.present()
    })();
    match drawn {
        Ok(()) => svg,
        Err(_) => String::new(),
    }
}

/// A line chart as an SVG element; an empty string when there is nothing to draw.
fn line_chart(title: &str, x_desc: &str, y_desc: &str, axis: XAxis, series: &[Series]) -> String {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    if all.is_empty() {
        return String::new();
    }
    let (mut x_min, mut x_max) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    match &axis {
        XAxis::Categories(labels) => {
            x_min = -0.3;
            x_max = labels.len() as f64 - 0.7;
        }
        // Time and percentiles start at zero.
        XAxis::Linear | XAxis::Nines => x_min = x_min.min(0.0),
    }
    if x_max <= x_min {
        x_max = x_min + 1.0;
    }
    let y_max = all.iter().map(|p| p.1).fold(0.0, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    svg_chart(title, x_min..x_max, y_max, series.len(), |chart| {
        let ticks = match &axis {
            XAxis::Categories(labels) => labels.len().max(2),
            _ => 10,
        };
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_labels(ticks)
            .x_label_formatter(&|x| x_label(&axis, *x))
            .y_label_formatter(&|y| {
                format!("{y:.3}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_string()
            })
            .draw()?;
        for (i, line) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(line.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            if line.points.len() <= 40 {
                chart.draw_series(
                    line.points
                        .iter()
                        .map(|&p| Circle::new(p, 3, color.filled())),
                )?;
            }
        }
        Ok(())
    })
}

/// A bar chart, with error bars where a half-width is given.
fn bar_chart(title: &str, y_desc: &str, bars: &[(String, f64, Option<f64>)]) -> String {
    if bars.is_empty() {
        return String::new();
    }
    let y_max = bars
        .iter()
        .map(|(_, v, hw)| v + hw.unwrap_or(0.0))
        .fold(0.0, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let axis = XAxis::Categories(labels);
    svg_chart(title, -0.6..(bars.len() as f64 - 0.4), y_max, 0, |chart| {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(y_desc)
            .x_labels(bars.len().max(2))
            .x_label_formatter(&|x| x_label(&axis, *x))
            .draw()?;
        for (i, (_, value, half_width)) in bars.iter().enumerate() {
            let x = i as f64;
            let color = Palette99::pick(i).to_rgba();
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.3, 0.0), (x + 0.3, *value)],
                color.filled(),
            )))?;
            if let Some(hw) = half_width.filter(|hw| hw.is_finite()) {
                chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                    x,
                    value - hw,
                    *value,
                    value + hw,
                    BLACK.stroke_width(2),
                    12,
                )))?;
            }
        }
        Ok(())
    })
}

const STYLE: &str = "
body { font-family: sans-serif; margin: 2em auto; max-width: 820px; color: #222; background: #fff; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
td, th { border: 1px solid #ccc; padding: .25em .6em; text-align: left; }
th { background: #f0f0f0; }
figure { margin: 1em 0; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; font-size: .85em; }
.note { color: #555; font-size: .9em; }
";

/// The report for `runs` (id and document), in the order given.
pub fn render(runs: &[(i64, &Document)], tool: &str) -> String {
    let ids: Vec<String> = runs.iter().map(|(id, _)| id.to_string()).collect();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>linerate report: run{} {}</h1>",
        if runs.len() == 1 { "" } else { "s" },
        ids.join(", ")
    );
    let _ = writeln!(body, "<p class=\"note\">Drawn by {} from the results database. Figures are receiver-side over each run's measurement window.</p>", escape(tool));
    let tests: Vec<(i64, &Report)> = runs
        .iter()
        .filter_map(|(id, d)| match d {
            Document::Test(r) => Some((*id, r.as_ref())),
            _ => None,
        })
        .collect();
    if tests.len() >= 2 {
        body.push_str(&comparison_section(&tests));
    }
    let sweeps: Vec<(i64, &SweepReport)> = runs
        .iter()
        .filter_map(|(id, d)| match d {
            Document::Sweep(s) => Some((*id, s.as_ref())),
            _ => None,
        })
        .collect();
    // Sweeps of one test over the same first parameter share a chart.
    let mut groups: Vec<Vec<(i64, &SweepReport)>> = Vec::new();
    for (id, sweep) in sweeps {
        let key = |s: &SweepReport| {
            (
                s.sweep_of.clone(),
                s.ordered_axes().first().map(|a| a.param),
            )
        };
        match groups.iter_mut().find(|g| key(g[0].1) == key(sweep)) {
            Some(group) => group.push((id, sweep)),
            None => groups.push(vec![(id, sweep)]),
        }
    }
    for group in groups.iter().filter(|g| g.len() >= 2) {
        body.push_str(&sweep_overlay(group));
    }
    for (id, document) in runs {
        body.push_str(&run_section(*id, document));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>linerate report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        ids.join(", ")
    )
}

fn figure(svg: String) -> String {
    if svg.is_empty() {
        String::new()
    } else {
        format!("<figure>\n{svg}\n</figure>\n")
    }
}

fn comparison_section(tests: &[(i64, &Report)]) -> String {
    let mut out = String::from("<section id=\"comparison\">\n<h2>Comparison</h2>\n");
    let first = tests[0].1;
    let same_test: Vec<(i64, &Report)> = tests
        .iter()
        .filter(|(_, r)| r.test == first.test)
        .copied()
        .collect();
    let (headline, _) = first.headline();
    // Runs of another test have another headline: they are named, not dropped unsaid.
    let others: Vec<String> = tests
        .iter()
        .filter(|(_, r)| r.test != first.test)
        .map(|(id, r)| format!("run {id} ({})", escape(&r.test)))
        .collect();
    if !others.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"note\">Not in this chart, which compares {} runs: {}. Each has its own section below.</p>",
            escape(&first.test),
            others.join(", ")
        );
    }
    let max = same_test
        .iter()
        .map(|(_, r)| r.headline().1)
        .fold(0.0, f64::max);
    let (divisor, unit) = headline_unit(headline, max);
    let bars: Vec<(String, f64, Option<f64>)> = same_test
        .iter()
        .map(|(id, r)| {
            let (_, value) = r.headline();
            let half_width = r
                .repetition
                .as_ref()
                .map(|x| x.estimate.half_width / divisor);
            (format!("run {id}"), value / divisor, half_width)
        })
        .collect();
    out.push_str(&figure(bar_chart(
        &format!("{} ({})", headline.label(), first.test),
        unit,
        &bars,
    )));
    if let Ok(comparison) = compare(&same_test, 95.0) {
        out.push_str("<table>\n<tr><th></th>");
        for run in &comparison.runs {
            let _ = write!(out, "<th>run {}</th>", run.id);
        }
        out.push_str("</tr>\n");
        for metric in &comparison.metrics {
            let _ = write!(out, "<tr><td>{}</td>", escape(&metric.label));
            for (i, value) in metric.values.iter().enumerate() {
                let delta = metric.delta_pct[i].map_or(String::new(), |d| format!(" ({d:+.1}%)"));
                let _ = write!(
                    out,
                    "<td>{}{}</td>",
                    escape(&value.map_or("-".into(), |v| metric.unit.format(v))),
                    delta
                );
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        for index in 1..comparison.runs.len() {
            let _ = writeln!(out, "<p>{}</p>", escape(&comparison.verdict(index)));
        }
    }
    out.push_str("</section>\n");
    out
}

/// Several sweeps' curves on one chart, matched by the first swept parameter's values.
fn sweep_overlay(sweeps: &[(i64, &SweepReport)]) -> String {
    let mut series = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    let mut headline = Headline::ReceiverBps;
    for (id, sweep) in sweeps {
        for line in sweep_series(sweep, |r| r.headline().1) {
            headline = line.1;
            for label in &line.2 {
                if !labels.contains(label) {
                    labels.push(label.clone());
                }
            }
            series.push((format!("run {id} {}", line.0.name), line.0.points, line.2));
        }
    }
    // Put every series on the shared category positions.
    let series: Vec<Series> = series
        .into_iter()
        .map(|(name, points, own)| Series {
            name,
            points: points
                .into_iter()
                .filter_map(|(x, y)| {
                    let label = own.get(x as usize)?;
                    let at = labels.iter().position(|l| l == label)?;
                    Some((at as f64, y))
                })
                .collect(),
        })
        .collect();
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let (divisor, unit) = headline_unit(headline, max);
    let scaled: Vec<Series> = series
        .into_iter()
        .map(|s| Series {
            name: s.name,
            points: s
                .points
                .into_iter()
                .map(|(x, y)| (x, y / divisor))
                .collect(),
        })
        .collect();
    let param = sweeps[0]
        .1
        .ordered_axes()
        .first()
        .map_or("point", |a| a.param.heading());
    format!(
        "<section class=\"sweep-comparison\">\n<h2>Sweeps of {} compared</h2>\n{}</section>\n",
        escape(&sweeps[0].1.sweep_of),
        figure(line_chart(
            &format!("{} by {param}", headline.label()),
            param,
            unit,
            XAxis::Categories(labels),
            &scaled
        ))
    )
}

/// A sweep's curves against its first (slowest) parameter, one per combination of the
/// others: the series, the headline kind, and the category labels.
fn sweep_series(
    sweep: &SweepReport,
    figure: impl Fn(&Report) -> f64,
) -> Vec<(Series, Headline, Vec<String>)> {
    let axes = sweep.ordered_axes();
    let Some(x_axis) = axes.first() else {
        return Vec::new();
    };
    let labels: Vec<String> = x_axis.values.iter().map(|v| x_axis.param.show(v)).collect();
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut headline = Headline::ReceiverBps;
    for point in &sweep.points {
        let Some(report) = &point.report else {
            continue;
        };
        headline = Headline::of(&report.config);
        let Some(x) = point
            .settings
            .get(&x_axis.param)
            .and_then(|v| x_axis.values.iter().position(|a| a == v))
        else {
            continue;
        };
        let name: Vec<String> = point
            .settings
            .iter()
            .filter(|(p, _)| **p != x_axis.param)
            .map(|(p, v)| format!("{} {}", p.heading(), p.show(v)))
            .collect();
        let name = if name.is_empty() {
            "all".to_string()
        } else {
            name.join(", ")
        };
        match lines.iter_mut().find(|l| l.0 == name) {
            Some(line) => line.1.push((x as f64, figure(report))),
            None => lines.push((name, vec![(x as f64, figure(report))])),
        }
    }
    lines
        .into_iter()
        .map(|(name, points)| (Series { name, points }, headline, labels.clone()))
        .collect()
}

fn facts_table(report: &Report) -> String {
    let mut out = String::from("<table>\n<tr><th></th><th>client</th><th>server</th></tr>\n");
    let h = &report.host;
    for (label, local, remote) in [
        ("host", h.local.hostname.clone(), h.remote.hostname.clone()),
        ("kernel", h.local.kernel.clone(), h.remote.kernel.clone()),
        (
            "CPU",
            format!("{} x {}", h.local.cores, h.local.cpu_model),
            format!("{} x {}", h.remote.cores, h.remote.cpu_model),
        ),
        (
            "software",
            h.local.software.clone(),
            h.remote.software.clone(),
        ),
    ] {
        let _ = writeln!(
            out,
            "<tr><td>{label}</td><td>{}</td><td>{}</td></tr>",
            escape(&local),
            escape(&remote)
        );
    }
    if let Some(path) = report.path() {
        let _ = writeln!(
            out,
            "<tr><td>path</td><td colspan=\"2\">{}</td></tr>",
            escape(&path.summary())
        );
    }
    out.push_str("</table>\n");
    out
}

fn run_section(id: i64, document: &Document) -> String {
    let mut out = format!(
        "<section class=\"run\" id=\"run-{id}\">\n<h2>Run {id}: {} against {}</h2>\n",
        escape(&document.kind()),
        escape(document.target())
    );
    let _ = writeln!(
        out,
        "<p>{}</p>",
        escape(&document.headline_text(crate::units::Scale::Adaptive))
    );
    match document {
        Document::Test(report) => out.push_str(&test_charts(report)),
        Document::Sweep(sweep) => out.push_str(&sweep_charts(sweep)),
        Document::Profile(run) => {
            let hosts: Vec<(String, f64, Option<f64>)> = run
                .hosts
                .iter()
                .map(|h| (h.host.clone(), h.received_bps / 1e6, None))
                .collect();
            out.push_str(&figure(bar_chart(
                "Goodput received per host",
                "Mbit/s",
                &hosts,
            )));
            let transactions: Vec<(String, f64, Option<f64>)> = run
                .groups
                .iter()
                .flat_map(|g| {
                    g.transactions.iter().enumerate().map(move |(i, t)| {
                        (format!("{} txn {}", g.name, i + 1), t.latency_us.p99, None)
                    })
                })
                .collect();
            out.push_str(&figure(bar_chart(
                "Transaction time, 99th percentile",
                "µs",
                &transactions,
            )));
        }
        Document::FindMax(search) => {
            let bars: Vec<(String, f64, Option<f64>)> = search
                .trials
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("{}", i + 1), t.summary.receiver_bps / 1e6, None))
                .collect();
            out.push_str(&figure(bar_chart(
                "Received rate per trial",
                "Mbit/s",
                &bars,
            )));
        }
        Document::Rpm(run) => out.push_str(&rpm_charts(run)),
        Document::Stamp(run) => out.push_str(&stamp_charts(run)),
        // A trace is its hop table, a multicast run its counts: the text below.
        Document::Trace(_) | Document::Multicast(_) | Document::Ndt7(_) => {}
    }
    let _ = writeln!(
        out,
        "<pre>{}</pre>",
        escape(&document.render_text(crate::units::Scale::Adaptive))
    );
    out.push_str("</section>\n");
    out
}

/// An RPM run's charts: goodput and responsiveness over each direction's seconds, and the
/// latency idle against loaded.
fn rpm_charts(run: &crate::rpm::RpmReport) -> String {
    let mut out = String::new();
    // A line per direction, of one figure of its intervals.
    let lines = |pick: fn(&crate::rpm::RpmInterval) -> Option<f64>| -> Vec<Series> {
        [&run.download, &run.upload]
            .iter()
            .map(|leg| Series {
                name: leg.direction.clone(),
                points: leg
                    .intervals
                    .iter()
                    .filter_map(|i| Some((i.end_s, pick(i)?)))
                    .collect(),
            })
            .collect()
    };
    out.push_str(&figure(line_chart(
        "Goodput as load-generating connections were added",
        "seconds into the direction",
        "Mbit/s",
        XAxis::Linear,
        &lines(|i| Some(i.goodput_bps / 1e6)),
    )));
    out.push_str(&figure(line_chart(
        "Responsiveness over the moving window",
        "seconds into the direction",
        "RPM",
        XAxis::Linear,
        &lines(|i| i.rpm),
    )));
    let spreads = rpm_spreads(run);
    if !spreads.is_empty() {
        out.push_str(&figure(spread_chart(
            "Latency idle and under load",
            "ms",
            &spreads,
        )));
        out.push_str(
            "<p class=\"note\">Each box spans the middle half of the probes' times, \
             the line across it is the median, the whisker runs from the least to the \
             90th percentile. Under load: the probes of the last moving window, the \
             ones the figures are taken from.</p>\n",
        );
    }

    out
}

/// An RPM run's latency spreads, idle and under each direction's load: the round trip of a
/// small object over an open connection and a new connection's handshake, each where kept.
fn rpm_spreads(run: &crate::rpm::RpmReport) -> Vec<(String, crate::rpm::ProbeSpread)> {
    [
        ("idle round trip", run.idle_spread),
        ("idle handshake", run.idle_connect_spread),
        ("download round trip", run.download.loaded_self_spread),
        ("download handshake", run.download.loaded_connect_spread),
        ("upload round trip", run.upload.loaded_self_spread),
        ("upload handshake", run.upload.loaded_connect_spread),
    ]
    .into_iter()
    .filter_map(|(label, spread)| Some((label.to_string(), spread?)))
    .collect()
}

/// Spreads side by side, in milliseconds: a box over the middle half, a line at the median,
/// a whisker from the least to the 90th percentile; round trips in one colour and
/// handshakes in another. An empty string when there is none (a run kept before spreads
/// were recorded).
fn spread_chart(
    title: &str,
    y_desc: &str,
    spreads: &[(String, crate::rpm::ProbeSpread)],
) -> String {
    if spreads.is_empty() {
        return String::new();
    }
    let ms = |s: f64| s * 1e3;
    let y_max = spreads.iter().map(|(_, s)| ms(s.p90_s)).fold(0.0, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let labels: Vec<String> = spreads.iter().map(|(label, _)| label.clone()).collect();
    let axis = XAxis::Categories(labels);
    svg_chart(
        title,
        -0.6..(spreads.len() as f64 - 0.4),
        y_max,
        0,
        |chart| {
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc(y_desc)
                .x_labels(spreads.len().max(2))
                .x_label_formatter(&|x| x_label(&axis, *x))
                .draw()?;
            for (i, (label, spread)) in spreads.iter().enumerate() {
                let x = i as f64;
                let color = Palette99::pick(usize::from(label.ends_with("handshake"))).to_rgba();
                chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                    x,
                    ms(spread.min_s),
                    ms(spread.p50_s),
                    ms(spread.p90_s),
                    BLACK.stroke_width(1),
                    10,
                )))?;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x - 0.3, ms(spread.p25_s)), (x + 0.3, ms(spread.p75_s))],
                    color.filled(),
                )))?;
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x - 0.3, ms(spread.p50_s)), (x + 0.3, ms(spread.p50_s))],
                    BLACK.stroke_width(3),
                )))?;
            }
            Ok(())
        },
    )
}

/// A STAMP run's charts: the delays over the run and the probes unanswered.
fn stamp_charts(run: &crate::stamp::StampReport) -> String {
    let mut out = String::new();
    let lines = |pick: fn(&crate::stamp::StampInterval) -> Option<f64>, name: &str| Series {
        name: name.into(),
        points: run
            .intervals
            .iter()
            .filter_map(|i| Some((i.end_s, pick(i)? / 1e3)))
            .collect(),
    };
    out.push_str(&figure(line_chart(
        "Delay over the run (medians per interval)",
        "seconds",
        "ms",
        XAxis::Linear,
        &[
            lines(|i| i.rtt_p50_us, "round trip"),
            lines(|i| i.forward_added_p50_us, "added out"),
            lines(|i| i.reverse_added_p50_us, "added back"),
        ],
    )));
    let lost = Series {
        name: "unanswered".into(),
        points: run
            .intervals
            .iter()
            .map(|i| (i.end_s, i.sent.saturating_sub(i.answered) as f64))
            .collect(),
    };
    out.push_str(&figure(line_chart(
        "Probes unanswered per interval",
        "seconds",
        "probes",
        XAxis::Linear,
        &[lost],
    )));
    out
}

fn test_charts(report: &Report) -> String {
    let mut out = format!("<p>{}</p>\n", escape(&report.config.describe()));
    out.push_str(&facts_table(report));
    let intervals = &report.intervals;
    match report.summary.rr.as_ref() {
        None => {
            let max = intervals.iter().map(|i| i.receiver_bps).fold(0.0, f64::max);
            let (divisor, unit) = rate_unit(max);
            let mut series = vec![Series {
                name: "sum".into(),
                points: intervals
                    .iter()
                    .map(|i| (i.end, i.receiver_bps / divisor))
                    .collect(),
            }];
            let flow_ids: Vec<u32> = intervals
                .first()
                .and_then(|i| i.flows.as_ref())
                .map(|f| f.iter().map(|f| f.id).collect())
                .unwrap_or_default();
            for id in flow_ids.iter().take(16) {
                series.push(Series {
                    name: format!("flow {id}"),
                    points: intervals
                        .iter()
                        .filter_map(|i| {
                            let flow = i.flows.as_ref()?.iter().find(|f| f.id == *id)?;
                            Some((i.end, flow.receiver_bps / divisor))
                        })
                        .collect(),
                });
            }
            let title = if flow_ids.is_empty() {
                "Receiver goodput over time (per-flow lines need --per-flow)"
            } else {
                "Receiver goodput over time, per flow and in sum"
            };
            out.push_str(&figure(line_chart(
                title,
                "seconds",
                unit,
                XAxis::Linear,
                &series,
            )));
        }
        Some(rr) => {
            let series = [Series {
                name: "transactions/s".into(),
                points: intervals
                    .iter()
                    .filter_map(|i| Some((i.end, i.rr?.transactions_per_s)))
                    .collect(),
            }];
            out.push_str(&figure(line_chart(
                "Transactions over time",
                "seconds",
                "transactions/s",
                XAxis::Linear,
                &series,
            )));
            out.push_str(&load_picture(report));
            let mut curves = vec![percentile_curve("round trip", &rr.latency_us)];
            if let Some(connect) = &rr.connect_latency_us {
                curves.push(percentile_curve("connect", connect));
            }
            out.push_str(&figure(line_chart(
                "Latency by percentile",
                "percentile",
                "µs",
                XAxis::Nines,
                &curves,
            )));
        }
    }
    out.push_str(&ways_picture(report));
    if let Some(video) = &report.summary.video {
        out.push_str(&video_chart(video));
    }
    if let Some(repetition) = &report.repetition {
        out.push_str(&repetition_chart(repetition));
    }
    out
}

/// A repeated test's headline per iteration, and their mean with its interval.
fn repetition_chart(repetition: &crate::model::Repetition) -> String {
    let max = repetition.values.iter().copied().fold(0.0, f64::max);
    let (divisor, unit) = headline_unit(repetition.metric, max);
    let bars: Vec<(String, f64, Option<f64>)> = repetition
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("{}", i + 1), v / divisor, None))
        .chain(std::iter::once((
            "mean".to_string(),
            repetition.estimate.mean / divisor,
            Some(repetition.estimate.half_width / divisor),
        )))
        .collect();
    figure(bar_chart(
        &format!(
            "{} per iteration, mean with its {}% interval",
            repetition.metric.label(),
            repetition.estimate.level_pct
        ),
        unit,
        &bars,
    ))
}

/// How a way is named in a chart: from the client's side.
fn way_name(direction: linerate_model::Direction) -> &'static str {
    match direction {
        linerate_model::Direction::Reverse => "server→client",
        _ => "client→server",
    }
}

/// A UDP run (an application's above all) as one picture, flent's and crusader's: what
/// each way scored above it (a call's MOS, each way's Quality of Outcome), then each way's
/// throughput, one-way delay and loss over the same seconds, one chart under the other on
/// one time axis; empty where the intervals carry no ways.
fn ways_picture(report: &Report) -> String {
    let intervals = &report.intervals;
    let mut directions: Vec<linerate_model::Direction> = Vec::new();
    for way in intervals.iter().flat_map(|i| &i.ways) {
        if !directions.contains(&way.direction) {
            directions.push(way.direction);
        }
    }
    if directions.is_empty() {
        return String::new();
    }
    let series = |read: &dyn Fn(&crate::model::WayInterval) -> Option<f64>| -> Vec<Series> {
        directions
            .iter()
            .map(|&direction| Series {
                name: way_name(direction).into(),
                points: intervals
                    .iter()
                    .filter_map(|i| {
                        let way = i.ways.iter().find(|w| w.direction == direction)?;
                        Some((i.end, read(way)?))
                    })
                    .collect(),
            })
            .collect()
    };
    let max_bps = intervals
        .iter()
        .flat_map(|i| &i.ways)
        .map(|w| w.receiver_bps)
        .fold(0.0, f64::max);
    let (divisor, unit) = rate_unit(max_bps);
    let mut out = String::from("<h3>Each way over time</h3>\n");
    let scores = way_scores(report);
    if !scores.is_empty() {
        out.push_str(&format!(
            "<p class=\"score\">{}</p>\n",
            escape(&scores.join("; "))
        ));
    }
    for (title, unit, read) in [
        (
            "Throughput each way, as its receiver counted it",
            unit,
            &(|w: &crate::model::WayInterval| Some(w.receiver_bps / divisor))
                as &dyn Fn(&crate::model::WayInterval) -> Option<f64>,
        ),
        (
            "One-way delay each way, the interval's mean",
            "ms",
            &|w: &crate::model::WayInterval| w.one_way_delay_ms,
        ),
        (
            "Loss each way",
            "% of datagrams",
            &|w: &crate::model::WayInterval| Some(w.loss_pct),
        ),
    ] {
        out.push_str(&figure(line_chart(
            title,
            "seconds",
            unit,
            XAxis::Linear,
            &series(read),
        )));
    }
    out
}

/// A request/response run under `--load` as one picture: the grade of what the load added
/// above it, then the round trip's median and 99th percentile and the load's goodput over
/// the same seconds; empty without a load.
fn load_picture(report: &Report) -> String {
    let Some(load) = report.summary.rr.as_ref().and_then(|rr| rr.load.as_ref()) else {
        return String::new();
    };
    let intervals = &report.intervals;
    let mut out = String::from("<h3>Under load over time</h3>\n");
    if let (Some(idle), Some(added), Some(grade)) =
        (load.idle_p50_us, load.added_ms, load.grade.as_ref())
    {
        out.push_str(&format!(
            "<p class=\"score\">Bufferbloat grade {} (round trip p50 {:+.2} ms under load, {:.3} ms idle)</p>\n",
            escape(grade),
            added,
            idle / 1e3
        ));
    }
    let round_trip = |name: &str, read: fn(&linerate_model::RrInterval) -> f64| Series {
        name: name.into(),
        points: intervals
            .iter()
            .filter_map(|i| Some((i.end, read(i.rr.as_ref()?) / 1e3)))
            .collect(),
    };
    out.push_str(&figure(line_chart(
        "Round trip under load",
        "seconds",
        "ms",
        XAxis::Linear,
        &[
            round_trip("p50", |r| r.p50_us),
            round_trip("p99", |r| r.p99_us),
        ],
    )));
    let max = intervals
        .iter()
        .filter_map(|i| i.rr.as_ref()?.load_bps)
        .fold(0.0, f64::max);
    let (divisor, unit) = rate_unit(max);
    out.push_str(&figure(line_chart(
        "Goodput of the load",
        "seconds",
        unit,
        XAxis::Linear,
        &[Series {
            name: format!("{} bulk flows", load.flows),
            points: intervals
                .iter()
                .filter_map(|i| Some((i.end, i.rr.as_ref()?.load_bps? / divisor)))
                .collect(),
        }],
    )));
    out
}

/// What each way scored, in words: a call's MOS and Quality of Outcome, a video's (or a
/// game's) Quality of Outcome.
fn way_scores(report: &Report) -> Vec<String> {
    let mut scores = Vec::new();
    for way in report.summary.call.iter().flat_map(|c| &c.ways) {
        let qoo = way
            .qoo
            .as_ref()
            .map(|q| {
                format!(
                    ", Quality of Outcome {:.0} % for {}",
                    q.score, q.requirement.name
                )
            })
            .unwrap_or_default();
        scores.push(format!(
            "call {}: {}{qoo}",
            way_name(way.direction),
            way.score.rating()
        ));
    }
    for way in report.summary.video.iter().flat_map(|v| &v.ways) {
        if let Some(q) = &way.qoo {
            scores.push(format!(
                "frames {}: Quality of Outcome {:.0} % for {}",
                way_name(way.direction),
                q.score,
                q.requirement.name
            ));
        }
    }
    scores
}

/// Each way's frames: how long a frame took from its first write to its last byte, by
/// percentile; empty where no frame was whole.
fn video_chart(video: &crate::model::VideoSummary) -> String {
    let curves: Vec<Series> = video
        .ways
        .iter()
        .filter(|w| w.counts.latency_us.count > 0)
        .map(|w| percentile_curve(way_name(w.direction), &w.counts.latency_us))
        .collect();
    if curves.is_empty() {
        return String::new();
    }
    figure(line_chart(
        "Frame latency by percentile, first write to last byte",
        "percentile",
        "µs",
        XAxis::Nines,
        &curves,
    ))
}

/// The latency at each percentile, from the full histogram when it was kept.
fn percentile_curve(name: &str, latency: &crate::latency::LatencySummary) -> Series {
    // Beyond five nines a histogram of a few seconds' transactions has no data.
    const MAX_NINES: f64 = 5.0;
    let total: u64 = latency.histogram.iter().map(|b| b.count).sum();
    let points = if total > 0 {
        let mut seen = 0u64;
        let mut points = Vec::new();
        for bucket in &latency.histogram {
            seen += bucket.count;
            let below = 1.0 - seen as f64 / total as f64;
            let nines = if below <= 0.0 {
                MAX_NINES
            } else {
                (-below.log10()).min(MAX_NINES)
            };
            points.push((nines, bucket.le_us));
            if below <= 0.0 {
                break;
            }
        }
        points
    } else {
        [
            (0.0, latency.min),
            (0.301, latency.p50),
            (1.0, latency.p90),
            (2.0, latency.p99),
            (3.0, latency.p999),
            (4.0, latency.p9999),
        ]
        .to_vec()
    };
    Series {
        name: name.to_string(),
        points,
    }
}

fn sweep_charts(sweep: &SweepReport) -> String {
    let mut out = format!(
        "<p>Sweep of {} over {} points</p>\n",
        escape(&sweep.sweep_of),
        sweep.points.len()
    );
    let headline_lines = sweep_series(sweep, |r| r.headline().1);
    let Some((headline, labels)) = headline_lines.first().map(|l| (l.1, l.2.clone())) else {
        return out;
    };
    let param = sweep
        .ordered_axes()
        .first()
        .map_or("point", |a| a.param.heading());
    let max = headline_lines
        .iter()
        .flat_map(|l| l.0.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let (divisor, unit) = headline_unit(headline, max);
    let scaled: Vec<Series> = headline_lines
        .into_iter()
        .map(|(s, _, _)| Series {
            name: s.name,
            points: s
                .points
                .into_iter()
                .map(|(x, y)| (x, y / divisor))
                .collect(),
        })
        .collect();
    out.push_str(&figure(line_chart(
        &format!("{} by {param}", headline.label()),
        param,
        unit,
        XAxis::Categories(labels.clone()),
        &scaled,
    )));
    let cpu: Vec<Series> = sweep_series(sweep, |r| r.summary.cpu.local.busy_pct)
        .into_iter()
        .map(|(s, _, _)| s)
        .collect();
    out.push_str(&figure(line_chart(
        &format!("CPU busy on the client host by {param}"),
        param,
        "% of all cores",
        XAxis::Categories(labels),
        &cpu,
    )));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_read_as_percentiles() {
        assert_eq!(x_label(&XAxis::Nines, 0.0), "0%");
        assert_eq!(x_label(&XAxis::Nines, 1.0), "90%");
        assert_eq!(x_label(&XAxis::Nines, 2.0), "99%");
        assert_eq!(x_label(&XAxis::Nines, 3.0), "99.9%");
        let categories = XAxis::Categories(vec!["8".into(), "32".into()]);
        assert_eq!(x_label(&categories, 1.0), "32");
        assert_eq!(x_label(&categories, 0.5), "");
    }

    /// A video run draws each way's frame latency by percentile, from its buckets.
    #[test]
    fn a_video_run_draws_each_ways_frame_latency() {
        use crate::model::{VideoSummary, VideoWay};
        use linerate_model::video::{FrameCounts, VideoSettings};
        let mut latency = linerate_model::latency::LatencyHistogram::new();
        (1..=100).for_each(|ms| latency.record(ms * 1_000_000));
        let way = |direction| VideoWay {
            direction,
            lost: 0,
            counts: FrameCounts {
                sent: 100,
                whole: 100,
                latency_us: latency.summary(true),
                ..Default::default()
            },
            received_bps: 0.0,
            qoo: None,
            unseen: false,
        };
        let mut report =
            crate::fixtures::report(crate::fixtures::config(linerate_model::Direction::Bidir, 1));
        report.summary.video = Some(VideoSummary {
            settings: VideoSettings::parse("64:61440").unwrap(),
            back: None,
            ways: vec![
                way(linerate_model::Direction::Forward),
                way(linerate_model::Direction::Reverse),
            ],
        });
        let html = test_charts(&report);
        assert!(html.contains("Frame latency by percentile"), "{html}");
        assert!(html.contains("client→server") && html.contains("server→client"));
    }

    /// A UDP run whose intervals carry its ways is drawn as one picture: what each way
    /// scored above, then each way's throughput, delay and loss on one time axis.
    #[test]
    fn an_application_run_draws_each_way_over_time_under_its_scores() {
        use crate::model::{CallSummary, WayInterval};
        use linerate_model::Direction;
        let mut report = crate::fixtures::report(crate::fixtures::config(Direction::Bidir, 1));
        let way = |direction, ms| WayInterval {
            direction,
            receiver_bps: 87_200.0,
            received: 50,
            lost: 1,
            loss_pct: 2.0,
            one_way_delay_ms: Some(ms),
            jitter_ms: 0.1,
        };
        report.intervals = (1..=3)
            .map(|s| crate::model::IntervalReport {
                start: f64::from(s) - 1.0,
                end: f64::from(s),
                ways: vec![way(Direction::Forward, 20.1), way(Direction::Reverse, 40.2)],
                ..Default::default()
            })
            .collect();
        let call: CallSummary = serde_json::from_value(serde_json::json!({
            "codec": "g711", "jitter_buffer_ms": 60, "ways": [{
                "direction": "forward", "received": 150, "lost": 3, "late": 0,
                "loss_events": 3, "one_way_delay_ms": 20.1, "jitter_ms": 0.1,
                "mouth_to_ear_ms": 100.1, "loss_pct": 2.0, "burst_ratio": 1.0,
                "delay_impairment": 0.5, "loss_impairment": 7.2, "r": 85.3, "mos": 4.12,
            }],
        }))
        .unwrap();
        report.summary.call = Some(call);
        let html = test_charts(&report);
        for title in [
            "Each way over time",
            "Throughput each way",
            "One-way delay each way",
            "Loss each way",
            "call client→server: MOS 4.12 (R 85.3)",
        ] {
            assert!(html.contains(title), "{title}: {html}");
        }
        let scores_at = html.find("MOS 4.12").unwrap();
        assert!(scores_at < html.find("Throughput each way").unwrap());
        // An Opus call has no MOS (G.113 gives no values): the page and the text say so
        // and why, and print no number where one would be invented.
        let mut opus = report.summary.call.clone().unwrap();
        opus.codec = linerate_model::call::Codec::Opus { bps: 24_000 };
        let way = &mut opus.ways[0].score;
        (way.loss_impairment, way.r, way.mos) = (None, None, None);
        report.summary.call = Some(opus.clone());
        assert!(test_charts(&report).contains("call client→server: no MOS"));
        let text = crate::text::call_lines(&opus);
        assert!(
            text.starts_with(
                "Call:             opus:24k, 60 ms jitter buffer (no MOS: ITU-T G.113"
            ) && text.contains("client→server   no MOS: mouth to ear 100.1 ms"),
            "{text}"
        );
        // Without ways (a TCP run), no picture.
        report.intervals.iter_mut().for_each(|i| i.ways.clear());
        assert!(!test_charts(&report).contains("Each way over time"));
    }

    /// A run under `--load` draws its round trip and its load over time under the grade
    /// of what the load added; a run without one, none of it.
    #[test]
    fn a_run_under_load_draws_its_round_trip_and_load_under_its_grade() {
        use crate::model::{LoadSummary, RrSummary};
        let mut config = crate::fixtures::config(linerate_model::Direction::Forward, 1);
        config.workload = linerate_model::Workload::Rr;
        let mut report = crate::fixtures::report(config);
        report.intervals = (1..=3)
            .map(|s| crate::model::IntervalReport {
                start: f64::from(s) - 1.0,
                end: f64::from(s),
                rr: Some(linerate_model::RrInterval {
                    transactions: 40,
                    transactions_per_s: 40.0,
                    p50_us: 55_000.0,
                    p99_us: 62_000.0,
                    max_us: 64_000.0,
                    connect_p99_us: None,
                    load_bps: Some(19e6),
                }),
                ..Default::default()
            })
            .collect();
        let load = LoadSummary {
            flows: 2,
            receiver_bps: 19e6,
            idle_p50_us: Some(20_400.0),
            added_ms: Some(34.6),
            grade: Some("B".into()),
            ..Default::default()
        };
        report.summary.rr = Some(RrSummary {
            load: Some(load),
            ..Default::default()
        });
        let html = test_charts(&report);
        for text in [
            "Under load over time",
            "Bufferbloat grade B (round trip p50 +34.60 ms under load, 20.400 ms idle)",
            "Round trip under load",
            "Goodput of the load",
        ] {
            assert!(html.contains(text), "{text}: {html}");
        }
        report.summary.rr.as_mut().unwrap().load = None;
        assert!(!test_charts(&report).contains("Under load over time"));
    }

    #[test]
    fn charts_are_svg_with_their_labels() {
        let svg = line_chart(
            "Goodput",
            "seconds",
            "Gbit/s",
            XAxis::Linear,
            &[Series {
                name: "sum".into(),
                points: vec![(1.0, 9.0), (2.0, 9.5)],
            }],
        );
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("Goodput") && svg.contains("Gbit/s"));
        assert_eq!(line_chart("t", "x", "y", XAxis::Linear, &[]), "");
        let bars = bar_chart("Runs", "Gbit/s", &[("run 1".into(), 9.0, Some(0.2))]);
        assert!(bars.contains("run 1") && bars.contains("<rect"), "{bars}");
        assert_eq!(escape("<a&\"b\">"), "&lt;a&amp;&quot;b&quot;&gt;");
    }

    #[test]
    fn a_run_of_another_test_is_named_not_dropped_from_the_comparison() {
        let stream = crate::fixtures::report(crate::fixtures::config(crate::Direction::Forward, 1));
        let mut rr = stream.clone();
        rr.test = "tcp_rr".into();
        let html = comparison_section(&[(1, &stream), (2, &stream), (3, &rr)]);
        assert!(html.contains("run 3 (tcp_rr)"), "{html}");
        assert!(!html.contains("run 1 (tcp_stream)"), "{html}");
    }
}
