//! `linerate sweep`: one test at every combination of list-valued parameters, a row per
//! point as it completes, and one document holding every point's full result.

use crate::cli::{SweepArgs, SweepTest};
use crate::failure::{Failure, Outcome};
use crate::keep::{self, Storage};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linerate_model::{
    Direction, StreamRequest, StreamTransport, TestKind, TestRequest, TransactionRequest,
};
use linerate_report::document::Document;
use linerate_report::stats::RepeatPlan;
use linerate_report::sweep::{product, SweepAxis, SweepParam, SweepPoint, SweepReport, SweepTable};
use linerate_report::TestConfig;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Seconds a point takes beyond its measured time and warm-up (connecting, the results
/// exchange), for the first time estimate before any point has ended.
const SETUP_ESTIMATE_S: f64 = 1.0;

pub fn run(args: &SweepArgs, storage: &Storage) -> Outcome {
    crate::check_secure_flags(&args.secure, false, false)?;
    let axes = match axes(args) {
        Ok(axes) => axes,
        Err(message) => return Err(Failure::Usage(message).into()),
    };
    let target = match &args.host {
        Some(host) => Some(crate::resolve(host, args.port)?),
        None => None,
    };
    let base_request = base_request(args);
    let base = match crate::resolve_request(&base_request, target) {
        Ok(config) => config,
        Err(message) => return Err(Failure::Usage(message).into()),
    };
    let mut store = storage.open_for_run()?;
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, cancel.clone())
            .context("cannot install signal handlers")?;
    }
    let plan = RepeatPlan::from_flags(args.repeat.iterations, args.repeat.confidence);
    let settings = product(&axes);
    let table = SweepTable::new(&base, &axes);
    let started_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    if !args.json {
        println!("{}", banner(&base, &axes, settings.len(), args));
        println!("{}", table.header());
    }
    let runs_per_point = plan.map_or(1, |p| p.min);
    let per_point_estimate =
        (base.omit_s + base.time_s + SETUP_ESTIMATE_S) * f64::from(runs_per_point);
    let bar = progress_bar(settings.len() as u64);
    let began = Instant::now();
    let mut points: Vec<SweepPoint> = Vec::new();
    let mut warnings = Vec::new();
    for (index, point_settings) in settings.iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            warnings.push(format!(
                "interrupted after {index} of {} points",
                settings.len()
            ));
            break;
        }
        let remaining = (settings.len() - index) as f64;
        let per_point = if index == 0 {
            per_point_estimate
        } else {
            began.elapsed().as_secs_f64() / index as f64
        };
        bar.set_message(format!(
            "about {} left",
            short_duration(remaining * per_point)
        ));
        let mut request = base_request.clone();
        for (param, value) in point_settings {
            param.apply(&mut request, value);
        }
        let outcome = crate::resolve_request(&request, target)
            .map_err(|message| anyhow::anyhow!(message))
            .and_then(|config| {
                keep::repeat(
                    plan,
                    &cancel,
                    |_| run_point(target, &config, &args.secure, &cancel),
                    |_, _, _| {},
                )
            });
        let point = match outcome {
            Ok(report) => SweepPoint {
                settings: point_settings.clone(),
                report: Some(report),
                error: None,
            },
            Err(error) => SweepPoint {
                settings: point_settings.clone(),
                report: None,
                error: Some(format!("{error:#}")),
            },
        };
        if !args.json {
            let row = table.row(&point);
            bar.suspend(|| println!("{row}"));
        }
        points.push(point);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let first = points.iter().find_map(|p| p.report.as_ref());
    let failed = points.iter().filter(|p| p.error.is_some()).count();
    if failed > 0 {
        warnings.push(format!("{failed} of {} points failed", points.len()));
    }
    let sweep = SweepReport {
        tool: first.map_or_else(
            || format!("linerate {}", env!("CARGO_PKG_VERSION")),
            |r| r.tool.clone(),
        ),
        test: linerate_report::document::SWEEP.to_string(),
        sweep_of: base.test_name(),
        started_at,
        host: first.map(|r| r.host.clone()).unwrap_or_default(),
        config: base,
        axes,
        points,
        warnings,
    };
    let text: String = sweep
        .warnings
        .iter()
        .map(|w| format!("warning: {w}\n"))
        .collect();
    keep::finish(
        &Document::Sweep(Box::new(sweep)),
        args.json,
        &text,
        store.as_mut(),
    )?;
    if failed > 0 {
        return Err(
            Failure::Partial(format!("{failed} sweep points failed; their rows say why")).into(),
        );
    }
    Ok(())
}

/// One point's test; failed flows fail the point.
fn run_point(
    target: Option<std::net::SocketAddr>,
    config: &TestConfig,
    secure: &crate::cli::TlsArgs,
    cancel: &Arc<AtomicBool>,
) -> Result<linerate_report::Report> {
    let report = crate::run_once(target, config, secure, cancel, &mut |_| {})?;
    crate::check_flows(&report)?;
    Ok(report)
}

/// A bar with the points done and the time left, on stderr when it is a terminal.
fn progress_bar(points: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(points), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} points, {msg}")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

fn short_duration(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        0..=99 => format!("{seconds} s"),
        100..=5999 => format!("{} min", seconds.div_ceil(60)),
        _ => format!("{:.1} h", seconds as f64 / 3600.0),
    }
}

fn banner(config: &TestConfig, axes: &[SweepAxis], points: usize, args: &SweepArgs) -> String {
    let swept: Vec<String> = axes
        .iter()
        .map(|axis| {
            let values: Vec<String> = axis.values.iter().map(|v| axis.param.show(v)).collect();
            format!("{} {}", axis.param.heading(), values.join(","))
        })
        .collect();
    let place = match &args.host {
        Some(host) => format!("against {host}"),
        None => "over loopback (in-process server)".to_string(),
    };
    let repeats = match (args.repeat.iterations, args.repeat.confidence) {
        (_, Some(c)) => format!(
            ", each repeated until ±{}% at {}% confidence",
            c.half_width_pct, c.level_pct
        ),
        (Some(n), None) if n > 1 => format!(", each {n} times"),
        _ => String::new(),
    };
    format!(
        "Sweeping {} {place}: {} point{} ({}), {} s each{repeats}",
        config.test_name(),
        points,
        if points == 1 { "" } else { "s" },
        if swept.is_empty() {
            "nothing swept".to_string()
        } else {
            swept.join(" x ")
        },
        config.time_s,
    )
}

/// The swept parameters, checked against the test they apply to.
fn axes(args: &SweepArgs) -> std::result::Result<Vec<SweepAxis>, String> {
    let stream = args.test == SweepTest::Stream;
    let test_name = match args.test {
        SweepTest::Stream => "stream",
        SweepTest::Rr => "rr",
        SweepTest::Crr => "crr",
    };
    let only = |given: bool, flag: &str, applies: bool, tests: &str| {
        if given && !applies {
            Err(format!(
                "'{flag}' applies to --test {tests}, not {test_name}"
            ))
        } else {
            Ok(())
        }
    };
    only(!args.length.is_empty(), "--length", stream, "stream")?;
    only(!args.request.is_empty(), "--request", !stream, "rr and crr")?;
    only(
        !args.response.is_empty(),
        "--response",
        !stream,
        "rr and crr",
    )?;
    only(
        !args.outstanding.is_empty(),
        "--outstanding",
        args.test == SweepTest::Rr,
        "rr",
    )?;
    only(
        !args.rate.is_empty(),
        "--rate",
        args.test != SweepTest::Crr,
        "stream and rr",
    )?;
    only(args.reverse, "--reverse", stream, "stream")?;
    only(args.bidir, "--bidir", stream, "stream")?;
    only(args.nodelay, "--nodelay", stream, "stream")?;
    only(
        args.udp,
        "--udp",
        args.test != SweepTest::Crr,
        "stream and rr",
    )?;
    if args.udp {
        only(
            !args.congestion.is_empty(),
            "--congestion",
            false,
            "TCP tests",
        )?;
        let limit = if stream { 16..=65_507 } else { 1..=65_507 };
        for (flag, values) in [
            ("--length", &args.length),
            ("--request", &args.request),
            ("--response", &args.response),
        ] {
            if let Some(bad) = values.iter().find(|v| !limit.contains(*v)) {
                return Err(format!(
                    "invalid value '{bad}' for '{flag}': a UDP datagram carries {} to 65507 bytes",
                    limit.start()
                ));
            }
        }
    }
    let mut axes = Vec::new();
    let mut add = |param: SweepParam, values: Vec<Value>| -> std::result::Result<(), String> {
        let mut seen = Vec::new();
        for value in &values {
            if seen.contains(value) {
                return Err(format!(
                    "'{}' lists {} twice",
                    param.flag(),
                    param.show(value)
                ));
            }
            seen.push(value.clone());
        }
        if !values.is_empty() {
            axes.push(SweepAxis { param, values });
        }
        Ok(())
    };
    add(
        SweepParam::Parallel,
        args.parallel.iter().map(|&v| Value::from(v)).collect(),
    )?;
    add(
        SweepParam::Window,
        args.window
            .iter()
            .map(|v| v.map_or(Value::Null, Value::from))
            .collect(),
    )?;
    add(
        SweepParam::Length,
        args.length.iter().map(|&v| Value::from(v)).collect(),
    )?;
    add(
        SweepParam::Request,
        args.request.iter().map(|&v| Value::from(v)).collect(),
    )?;
    add(
        SweepParam::Response,
        args.response.iter().map(|&v| Value::from(v)).collect(),
    )?;
    add(
        SweepParam::Outstanding,
        args.outstanding.iter().map(|&v| Value::from(v)).collect(),
    )?;
    add(
        SweepParam::Rate,
        args.rate.iter().map(|&v| Value::from(v)).collect(),
    )?;
    add(
        SweepParam::Congestion,
        args.congestion
            .iter()
            .map(|v| Value::from(v.as_str()))
            .collect(),
    )?;
    Ok(axes)
}

/// The request every point starts from: the test's own defaults, as `linerate stream`,
/// `rr` or `crr` would ask, with the sweep's fixed flags and each axis's first value.
fn base_request(args: &SweepArgs) -> TestRequest {
    let first = |values: &[u64]| values.first().copied();
    let kind = match args.test {
        SweepTest::Stream => {
            let length = first(&args.length);
            TestKind::Stream(StreamRequest {
                direction: if args.bidir {
                    Direction::Bidir
                } else if args.reverse {
                    Direction::Reverse
                } else {
                    Direction::Forward
                },
                rate_bps: first(&args.rate),
                transport: if args.udp {
                    StreamTransport::Udp {
                        length,
                        pps: None,
                        gso: false,
                        gro: false,
                    }
                } else {
                    StreamTransport::Tcp {
                        length,
                        mss: None,
                        nodelay: args.nodelay,
                    }
                },
            })
        }
        SweepTest::Rr | SweepTest::Crr => TestKind::Transactions(TransactionRequest {
            connect_each: args.test == SweepTest::Crr,
            udp: args.udp,
            request: first(&args.request).unwrap_or(1),
            response: first(&args.response).unwrap_or(1),
            outstanding: args.outstanding.first().copied(),
            rate_tps: first(&args.rate).filter(|r| *r > 0),
            busy_poll_us: None,
            cpus: Vec::new(),
            load: 0,
            keep_nagle: false,
        }),
    };
    TestRequest {
        tls: args.secure.settings(false),
        target: args.host.clone(),
        port: args.port,
        parallel: args.parallel.first().copied().unwrap_or(1),
        threads: args.threads,
        time_s: args.time,
        omit_s: args.omit,
        // Interval lines are not printed in a sweep; a point's intervals still fill its
        // result, once a second.
        interval_s: 1.0,
        window: args.window.first().copied().flatten(),
        congestion: args.congestion.first().cloned(),
        per_flow: false,
        connect_timeout_s: args.connect_timeout,
        observe: true,
        kind,
    }
}
