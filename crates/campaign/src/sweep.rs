//! A sweep: one test at every combination of list-valued parameters, a row per point as
//! it ends, and one document holding every point's full result.

use crate::repeat::{check_flows, repeat};
use crate::sink::{Discard, Event, Sink};
use anyhow::Result;
use linerate_model::clock::UnixTime;
use linerate_model::{
    Direction, StreamRequest, StreamTransport, TestKind, TestRequest, TlsSettings,
    TransactionRequest,
};
use linerate_report::stats::RepeatPlan;
use linerate_report::sweep::{product, SweepAxis, SweepParam, SweepPoint, SweepReport};
use linerate_report::{Report, TestConfig};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Seconds a point takes beyond its measured time and warm-up (connecting, the results
/// exchange), for the first time estimate before any point has ended.
const SETUP_ESTIMATE_S: f64 = 1.0;

/// Which kind of test a sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepTest {
    Stream,
    Rr,
    Crr,
}

impl SweepTest {
    fn name(self) -> &'static str {
        match self {
            SweepTest::Stream => "stream",
            SweepTest::Rr => "rr",
            SweepTest::Crr => "crr",
        }
    }
}

/// What a sweep asks for: the swept lists (an empty list is not swept) and the settings
/// every point shares.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    pub test: SweepTest,
    pub host: Option<String>,
    /// Where the client's sockets leave from (`--bind`, `--bind-dev`).
    pub source: Option<linerate_model::Source>,
    /// The DSCP and ECN every point's packets carry (`--dscp`, `--ecn`).
    pub marks: Option<linerate_model::marks::Marks>,
    pub port: u16,
    pub parallel: Vec<u32>,
    /// `None` is `auto`: kernel autotuning left on.
    pub window: Vec<Option<u64>>,
    pub length: Vec<u64>,
    pub request: Vec<u64>,
    pub response: Vec<u64>,
    pub outstanding: Vec<u32>,
    pub rate: Vec<u64>,
    pub congestion: Vec<String>,
    pub udp: bool,
    pub reverse: bool,
    pub bidir: bool,
    pub nodelay: bool,
    pub threads: Option<u32>,
    pub time_s: f64,
    pub omit_s: f64,
    pub connect_timeout_s: f64,
    pub tls: Option<TlsSettings>,
    pub plan: Option<RepeatPlan>,
}

/// A sweep ready to run: its axes, the request every point starts from, and that
/// request resolved.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub axes: Vec<SweepAxis>,
    pub base_request: TestRequest,
    pub base: TestConfig,
    pub plan: Option<RepeatPlan>,
}

impl Sweep {
    /// Checks `spec` (each list applies to the test swept, no value twice) and resolves
    /// its first point with `resolve`; `Err` is the user's mistake, in one line.
    pub fn new(
        spec: &SweepSpec,
        resolve: impl Fn(&TestRequest) -> Result<TestConfig, String>,
    ) -> Result<Sweep, String> {
        let axes = axes(spec)?;
        let base_request = base_request(spec);
        let base = resolve(&base_request)?;
        Ok(Sweep {
            axes,
            base_request,
            base,
            plan: spec.plan,
        })
    }

    /// The points' settings, in the order they run.
    pub fn settings(&self) -> Vec<std::collections::BTreeMap<SweepParam, Value>> {
        product(&self.axes)
    }

    /// What the sweep is about to do, in one line; `place` says where ("against HOST").
    pub fn banner(&self, place: &str) -> String {
        let points = self.settings().len();
        let swept: Vec<String> = self
            .axes
            .iter()
            .map(|axis| {
                let values: Vec<String> = axis.values.iter().map(|v| axis.param.show(v)).collect();
                format!("{} {}", axis.param.heading(), values.join(","))
            })
            .collect();
        let repeats = match self.plan {
            Some(RepeatPlan {
                confidence: Some(c),
                ..
            }) => format!(
                ", each repeated until ±{}% at {}% confidence",
                c.half_width_pct, c.level_pct
            ),
            Some(plan) if plan.max > 1 => format!(", each {} times", plan.max),
            _ => String::new(),
        };
        format!(
            "Sweeping {} {place}: {} point{} ({}), {} s each{repeats}",
            self.base.test_name(),
            points,
            if points == 1 { "" } else { "s" },
            if swept.is_empty() {
                "nothing swept".to_string()
            } else {
                swept.join(" x ")
            },
            self.base.time_s,
        )
    }

    /// Runs every point in order: `resolve` turns a point's request into its test,
    /// `run_point` runs one test. A point that fails is kept with why, and the sweep goes
    /// on; `cancel` ends it between points. `sink` hears each point start and end.
    pub fn run(
        &self,
        cancel: &AtomicBool,
        sink: &mut dyn Sink,
        resolve: impl Fn(&TestRequest) -> Result<TestConfig, String>,
        mut run_point: impl FnMut(&TestConfig) -> Result<Report>,
    ) -> SweepReport {
        let settings = self.settings();
        let started_at = UnixTime::now().seconds();
        let runs_per_point = self.plan.map_or(1, |p| p.min);
        let first_estimate =
            (self.base.omit_s + self.base.time_s + SETUP_ESTIMATE_S) * f64::from(runs_per_point);
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
            let per_point = if index == 0 {
                first_estimate
            } else {
                began.elapsed().as_secs_f64() / index as f64
            };
            sink.event(&Event::PointStarting {
                index,
                of: settings.len(),
                left_s: (settings.len() - index) as f64 * per_point,
            });
            let mut request = self.base_request.clone();
            for (param, value) in point_settings {
                param.apply(&mut request, value);
            }
            let outcome = resolve(&request)
                .map_err(|message| anyhow::anyhow!(message))
                .and_then(|config| {
                    repeat(self.plan, cancel, &mut Discard, |_, _| {
                        let report = run_point(&config)?;
                        check_flows(&report)?;
                        Ok(report)
                    })
                });
            let (report, error) = match outcome {
                Ok(report) => (Some(report), None),
                Err(error) => (None, Some(format!("{error:#}"))),
            };
            let point = SweepPoint {
                settings: point_settings.clone(),
                report,
                error,
            };
            sink.event(&Event::Point(&point));
            points.push(point);
        }
        let first = points.iter().find_map(|p| p.report.as_ref());
        let failed = failed_points(&points);
        if failed > 0 {
            warnings.push(format!("{failed} of {} points failed", points.len()));
        }
        SweepReport {
            tool: first.map_or_else(
                || format!("linerate {}", env!("CARGO_PKG_VERSION")),
                |r| r.tool.clone(),
            ),
            test: linerate_report::document::SWEEP.to_string(),
            sweep_of: self.base.test_name(),
            started_at,
            host: first.map(|r| r.host.clone()).unwrap_or_default(),
            config: self.base.clone(),
            axes: self.axes.clone(),
            points,
            warnings,
        }
    }
}

/// Points that failed.
pub fn failed_points(points: &[SweepPoint]) -> usize {
    points.iter().filter(|p| p.error.is_some()).count()
}

/// The swept parameters, checked against the test they apply to.
fn axes(spec: &SweepSpec) -> Result<Vec<SweepAxis>, String> {
    let stream = spec.test == SweepTest::Stream;
    let only = |given: bool, flag: &str, applies: bool, tests: &str| {
        if given && !applies {
            Err(format!(
                "'{flag}' applies to --test {tests}, not {}",
                spec.test.name()
            ))
        } else {
            Ok(())
        }
    };
    only(!spec.length.is_empty(), "--length", stream, "stream")?;
    only(!spec.request.is_empty(), "--request", !stream, "rr and crr")?;
    only(
        !spec.response.is_empty(),
        "--response",
        !stream,
        "rr and crr",
    )?;
    let rr = spec.test == SweepTest::Rr;
    only(!spec.outstanding.is_empty(), "--outstanding", rr, "rr")?;
    let not_crr = spec.test != SweepTest::Crr;
    only(!spec.rate.is_empty(), "--rate", not_crr, "stream and rr")?;
    only(spec.reverse, "--reverse", stream, "stream")?;
    only(spec.bidir, "--bidir", stream, "stream")?;
    only(spec.nodelay, "--nodelay", stream, "stream")?;
    only(spec.udp, "--udp", not_crr, "stream and rr")?;
    if spec.udp {
        only(
            !spec.congestion.is_empty(),
            "--congestion",
            false,
            "TCP tests",
        )?;
        let limit = if stream { 16..=65_507 } else { 1..=65_507 };
        for (flag, values) in [
            ("--length", &spec.length),
            ("--request", &spec.request),
            ("--response", &spec.response),
        ] {
            if let Some(bad) = values.iter().find(|v| !limit.contains(*v)) {
                return Err(format!(
                    "invalid value '{bad}' for '{flag}': a UDP datagram carries {} to 65507 bytes",
                    limit.start()
                ));
            }
        }
    }
    let numbers = |values: &[u64]| values.iter().map(|&v| Value::from(v)).collect();
    let lists: [(SweepParam, Vec<Value>); 8] = [
        (
            SweepParam::Parallel,
            spec.parallel.iter().map(|&v| Value::from(v)).collect(),
        ),
        (
            SweepParam::Window,
            spec.window
                .iter()
                .map(|v| v.map_or(Value::Null, Value::from))
                .collect(),
        ),
        (SweepParam::Length, numbers(&spec.length)),
        (SweepParam::Request, numbers(&spec.request)),
        (SweepParam::Response, numbers(&spec.response)),
        (
            SweepParam::Outstanding,
            spec.outstanding.iter().map(|&v| Value::from(v)).collect(),
        ),
        (SweepParam::Rate, numbers(&spec.rate)),
        (
            SweepParam::Congestion,
            spec.congestion
                .iter()
                .map(|v| Value::from(v.as_str()))
                .collect(),
        ),
    ];
    let mut axes = Vec::new();
    for (param, values) in lists {
        if let Some(twice) = values
            .iter()
            .enumerate()
            .find(|(i, v)| values[..*i].contains(v))
        {
            return Err(format!(
                "'{}' lists {} twice",
                param.flag(),
                param.show(twice.1)
            ));
        }
        if !values.is_empty() {
            axes.push(SweepAxis { param, values });
        }
    }
    Ok(axes)
}

/// The request every point starts from: the test's own defaults, as `linerate stream`,
/// `rr` or `crr` would ask, with the sweep's fixed settings and each axis's first value.
fn base_request(spec: &SweepSpec) -> TestRequest {
    let first = |values: &[u64]| values.first().copied();
    let kind = match spec.test {
        SweepTest::Stream => {
            let length = first(&spec.length);
            TestKind::Stream(StreamRequest {
                direction: Direction::from_flags(spec.reverse, spec.bidir),
                rate_bps: first(&spec.rate),
                transport: StreamTransport::plain(spec.udp, length, None, spec.nodelay),
            })
        }
        SweepTest::Rr | SweepTest::Crr => TestKind::Transactions(TransactionRequest {
            connect_each: spec.test == SweepTest::Crr,
            udp: spec.udp,
            request: first(&spec.request).unwrap_or(1),
            response: first(&spec.response).unwrap_or(1),
            outstanding: spec.outstanding.first().copied(),
            rate_tps: first(&spec.rate).filter(|r| *r > 0),
            busy_poll_us: None,
            cpus: Vec::new(),
            load: 0,
            keep_nagle: false,
        }),
    };
    TestRequest {
        tls: spec.tls.clone(),
        target: spec.host.clone(),
        port: spec.port,
        parallel: spec.parallel.first().copied().unwrap_or(1),
        threads: spec.threads,
        time_s: spec.time_s,
        omit_s: spec.omit_s,
        // Interval lines are not printed in a sweep; a point's intervals still fill its
        // result, once a second.
        interval_s: 1.0,
        window: spec.window.first().copied().flatten(),
        congestion: spec.congestion.first().cloned(),
        per_flow: false,
        connect_timeout_s: spec.connect_timeout_s,
        observe: true,
        source: spec.source.clone(),
        marks: spec.marks,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::report_of;

    fn spec(test: SweepTest) -> SweepSpec {
        SweepSpec {
            source: None,
            marks: None,
            test,
            host: None,
            port: 5201,
            parallel: Vec::new(),
            window: Vec::new(),
            length: Vec::new(),
            request: Vec::new(),
            response: Vec::new(),
            outstanding: Vec::new(),
            rate: Vec::new(),
            congestion: Vec::new(),
            udp: false,
            reverse: false,
            bidir: false,
            nodelay: false,
            threads: None,
            time_s: 2.0,
            omit_s: 0.0,
            connect_timeout_s: 5.0,
            tls: None,
            plan: None,
        }
    }

    fn resolve(request: &TestRequest) -> Result<TestConfig, String> {
        let here = linerate_model::Environment {
            cpus: 2,
            udp_length: Some(1472),
        };
        TestConfig::resolve(request, &here)
    }

    #[test]
    fn a_list_for_another_test_is_named() {
        let mut s = spec(SweepTest::Crr);
        s.outstanding = vec![1, 8];
        let error = Sweep::new(&s, resolve).unwrap_err();
        assert_eq!(error, "'--outstanding' applies to --test rr, not crr");
        let mut s = spec(SweepTest::Stream);
        s.parallel = vec![1, 2, 1];
        assert_eq!(
            Sweep::new(&s, resolve).unwrap_err(),
            "'--parallel' lists 1 twice"
        );
        let mut s = spec(SweepTest::Rr);
        s.udp = true;
        s.request = vec![1, 70_000];
        assert!(Sweep::new(&s, resolve).unwrap_err().contains("'70000'"));
    }

    #[test]
    fn every_point_runs_with_its_settings_and_a_failure_is_kept() {
        let mut s = spec(SweepTest::Stream);
        s.parallel = vec![1, 2];
        s.window = vec![None, Some(65536)];
        let sweep = Sweep::new(&s, resolve).unwrap();
        assert_eq!(sweep.base.parallel, 1);
        assert!(sweep.banner("over loopback").starts_with(
            "Sweeping tcp_stream over loopback: 4 points (#conn 1,2 x wndsz auto,64K), 2 s each"
        ), "{}", sweep.banner("over loopback"));
        let mut ran = Vec::new();
        let report = sweep.run(&AtomicBool::new(false), &mut Discard, resolve, |config| {
            ran.push((config.parallel, config.window));
            if config.parallel == 2 && config.window.is_none() {
                anyhow::bail!("refused");
            }
            Ok(report_of(config.clone(), 1e9))
        });
        assert_eq!(
            ran,
            [(1, None), (1, Some(65536)), (2, None), (2, Some(65536))]
        );
        assert_eq!(failed_points(&report.points), 1);
        assert_eq!(report.points[2].error.as_deref(), Some("refused"));
        assert_eq!(report.warnings, ["1 of 4 points failed"]);
    }

    #[test]
    fn a_cancelled_sweep_says_how_far_it_got() {
        let mut s = spec(SweepTest::Rr);
        s.request = vec![1, 100];
        let sweep = Sweep::new(&s, resolve).unwrap();
        let report = sweep.run(&AtomicBool::new(true), &mut Discard, resolve, |c| {
            Ok(report_of(c.clone(), 1.0))
        });
        assert!(report.points.is_empty());
        assert_eq!(report.warnings, ["interrupted after 0 of 2 points"]);
    }
}
