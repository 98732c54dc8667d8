//! Comparing runs of one test: the figures side by side, the change of each against the
//! first run, and, when runs were repeated, whether a change is larger than the runs'
//! own spread explains (Welch's t test over the iterations).

use crate::model::{Report, Summary, Workload};
use crate::stats::{welch, Difference};
use crate::units::{format_count, format_rate, Scale};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// A figure of a test's summary that runs can be compared on.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// The key in `summary` (dotted for nested figures).
    pub key: &'static str,
    pub label: &'static str,
    pub unit: Unit,
    /// Whether a larger value is the better one (goodput) or the worse (latency, CPU).
    pub higher_is_better: bool,
    pub get: fn(&Summary) -> Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    BitsPerSecond,
    PerSecond,
    Percent,
    Microseconds,
    Milliseconds,
    Count,
    MicrosecondsPerKb,
    SecondsPerGbit,
}

impl Unit {
    pub fn format(self, value: f64) -> String {
        match self {
            Unit::BitsPerSecond => format_rate(value, Scale::Adaptive),
            Unit::PerSecond => format!("{}/s", format_count(value)),
            Unit::Percent => format!("{value:.1}%"),
            Unit::Microseconds => crate::units::format_micros(value),
            Unit::Milliseconds => format!("{value:.3} ms"),
            Unit::Count => format!("{value:.0}"),
            Unit::MicrosecondsPerKb => format!("{value:.3} µs/KB"),
            Unit::SecondsPerGbit => format!("{value:.4} CPU s/Gbit"),
        }
    }
}

fn udp(s: &Summary) -> Option<&crate::model::UdpSummary> {
    s.udp.as_ref()
}

fn rr(s: &Summary) -> Option<&crate::model::RrSummary> {
    s.rr.as_ref()
}

/// The figures compared for a test of this kind, the headline first.
// Long: the comparison's metric table, one row per figure compared.
pub fn metrics(config: &crate::model::TestConfig) -> Vec<Metric> {
    let cpu = [
        Metric {
            key: "cpu.local.busy_pct",
            label: "CPU busy, client host",
            unit: Unit::Percent,
            higher_is_better: false,
            get: |s| s.cpu.local.measured().then_some(s.cpu.local.busy_pct),
        },
        Metric {
            key: "cpu.remote.busy_pct",
            label: "CPU busy, server host",
            unit: Unit::Percent,
            higher_is_better: false,
            get: |s| s.cpu.remote.measured().then_some(s.cpu.remote.busy_pct),
        },
    ];
    let mut list = match config.workload {
        Workload::Stream => vec![
            Metric {
                key: "receiver_bps",
                label: "Receiver goodput",
                unit: Unit::BitsPerSecond,
                higher_is_better: true,
                get: |s| Some(s.receiver_bps),
            },
            Metric {
                key: "sender_bps",
                label: "Sender rate",
                unit: Unit::BitsPerSecond,
                higher_is_better: true,
                get: |s| Some(s.sender_bps),
            },
            Metric {
                key: "retransmits",
                label: "Retransmits",
                unit: Unit::Count,
                higher_is_better: false,
                get: |s| Some(s.retransmits as f64),
            },
        ],
        Workload::Rr | Workload::Crr => vec![
            Metric {
                key: "transactions_per_s",
                label: "Transactions",
                unit: Unit::PerSecond,
                higher_is_better: true,
                get: |s| rr(s).map(|r| r.transactions_per_s),
            },
            Metric {
                key: "latency_us.p50",
                label: "Round trip p50",
                unit: Unit::Microseconds,
                higher_is_better: false,
                get: |s| rr(s).map(|r| r.latency_us.p50),
            },
            Metric {
                key: "latency_us.p99",
                label: "Round trip p99",
                unit: Unit::Microseconds,
                higher_is_better: false,
                get: |s| rr(s).map(|r| r.latency_us.p99),
            },
            Metric {
                key: "latency_us.p999",
                label: "Round trip p99.9",
                unit: Unit::Microseconds,
                higher_is_better: false,
                get: |s| rr(s).map(|r| r.latency_us.p999),
            },
        ],
    };
    if config.protocol.traits().datagrams && config.workload == Workload::Stream {
        list.extend([
            Metric {
                key: "receiver_pps",
                label: "Datagrams received",
                unit: Unit::PerSecond,
                higher_is_better: true,
                get: |s| udp(s).map(|u| u.receiver_pps),
            },
            Metric {
                key: "loss_pct",
                label: "Loss",
                unit: Unit::Percent,
                higher_is_better: false,
                get: |s| udp(s).map(|u| u.loss_pct),
            },
            Metric {
                key: "jitter_ms",
                label: "Jitter",
                unit: Unit::Milliseconds,
                higher_is_better: false,
                get: |s| udp(s).map(|u| u.jitter_ms),
            },
        ]);
    }
    list.extend(cpu);
    if config.workload == Workload::Stream {
        list.extend([
            Metric {
                key: "service_demand_us_per_kb.local",
                label: "Service demand, client",
                unit: Unit::MicrosecondsPerKb,
                higher_is_better: false,
                get: |s| {
                    s.cpu
                        .local
                        .measured()
                        .then_some(s.service_demand_us_per_kb.local)
                },
            },
            Metric {
                key: "service_demand_us_per_kb.remote",
                label: "Service demand, server",
                unit: Unit::MicrosecondsPerKb,
                higher_is_better: false,
                get: |s| {
                    s.cpu
                        .remote
                        .measured()
                        .then_some(s.service_demand_us_per_kb.remote)
                },
            },
            // Both ends' test threads per Gbit: what a TLS run and a plain one differ by.
            Metric {
                key: "cpu_s_per_gbit",
                label: "CPU per Gbit, both ends",
                unit: Unit::SecondsPerGbit,
                higher_is_better: false,
                get: |s| {
                    (s.cpu.local.measured() && s.cpu.remote.measured())
                        .then(|| crate::crypto::cpu_per_gbit(s).1)
                },
            },
        ]);
    }
    list
}

/// A figure's samples in one run: every iteration's, or the one run's.
pub fn samples(report: &Report, metric: &Metric) -> Vec<f64> {
    match &report.repetition {
        Some(repetition) => repetition
            .iterations
            .iter()
            .filter_map(|r| (metric.get)(&r.summary))
            .collect(),
        None => (metric.get)(&report.summary).into_iter().collect(),
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// One run in a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedRun {
    pub id: i64,
    pub test: String,
    pub target: String,
    pub started_at: f64,
    pub iterations: usize,
    pub describe: String,
    /// The emulated path the run crossed (docs/impair.md 4), in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// One figure across the runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedMetric {
    pub key: String,
    pub label: String,
    pub unit: Unit,
    pub higher_is_better: bool,
    /// Each run's value: the mean over its iterations when repeated.
    pub values: Vec<Option<f64>>,
    /// Each run's change against the first run, in percent (`None` for the first).
    pub delta_pct: Vec<Option<f64>>,
    /// Each run's test against the first, when both were repeated.
    pub difference: Vec<Option<Difference>>,
}

/// Runs of one test side by side (docs/results.md, `linerate compare --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub test: String,
    pub level_pct: f64,
    pub runs: Vec<ComparedRun>,
    pub metrics: Vec<ComparedMetric>,
}

/// Compares `runs` (id and report), the first as the baseline. Runs of different tests
/// cannot be compared.
pub fn compare(runs: &[(i64, &Report)], level_pct: f64) -> Result<Comparison, String> {
    let Some(&(first_id, first)) = runs.first() else {
        return Err("nothing to compare".into());
    };
    if let Some((id, other)) = runs.iter().find(|(_, r)| r.test != first.test) {
        return Err(format!(
            "run {id} is {} and run {first_id} is {}: compare runs of the same test",
            other.test, first.test
        ));
    }
    let metrics = metrics(&first.config)
        .iter()
        .map(|metric| {
            let samples: Vec<Vec<f64>> = runs.iter().map(|(_, r)| samples(r, metric)).collect();
            let values: Vec<Option<f64>> = samples.iter().map(|s| mean(s)).collect();
            let base = values[0];
            let delta_pct = values
                .iter()
                .enumerate()
                .map(|(i, v)| match (i, base, v) {
                    (0, _, _) => None,
                    (_, Some(b), Some(v)) if b != 0.0 => Some((v - b) / b.abs() * 100.0),
                    _ => None,
                })
                .collect();
            let difference = samples
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if i == 0 {
                        None
                    } else {
                        welch(s, &samples[0], level_pct)
                    }
                })
                .collect();
            ComparedMetric {
                key: metric.key.to_string(),
                label: metric.label.to_string(),
                unit: metric.unit,
                higher_is_better: metric.higher_is_better,
                values,
                delta_pct,
                difference,
            }
        })
        .collect();
    Ok(Comparison {
        test: first.test.clone(),
        level_pct,
        runs: runs
            .iter()
            .map(|(id, r)| ComparedRun {
                id: *id,
                test: r.test.clone(),
                target: r.config.target.clone(),
                started_at: r.started_at,
                iterations: r.repetition.as_ref().map_or(1, |x| x.values.len()),
                describe: r.config.describe(),
                path: r.path().map(|p| p.summary()),
            })
            .collect(),
        metrics,
    })
}

impl Comparison {
    /// The change of run `index` on the headline, in words.
    pub fn verdict(&self, index: usize) -> String {
        let headline = &self.metrics[0];
        let (base, run) = (&self.runs[0], &self.runs[index]);
        let delta = headline.delta_pct[index].map_or("no change measurable".to_string(), |d| {
            format!("{d:+.1}% {}", headline.label.to_lowercase())
        });
        let judged = match headline.difference[index] {
            Some(d) if d.significant => format!(
                "significant at {}% (Welch's t test, p = {:.3})",
                self.level_pct, d.p_value
            ),
            Some(d) => format!(
                "not significant at {}% (p = {:.3}): within the runs' own spread",
                self.level_pct, d.p_value
            ),
            None => {
                let single: Vec<String> = [base, run]
                    .iter()
                    .filter(|r| r.iterations < 2)
                    .map(|r| r.id.to_string())
                    .collect();
                format!(
                    "significance unknown: run {} ran once (repeat with --iterations or --confidence)",
                    single.join(" and ")
                )
            }
        };
        format!("Run {} against run {}: {delta}, {judged}", run.id, base.id)
    }

    /// A table of every figure, then a verdict per run.
    pub fn render_text(&self) -> String {
        let mut table = comfy_table::Table::new();
        table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        let mut header = vec!["".to_string()];
        for (i, run) in self.runs.iter().enumerate() {
            let repeats = if run.iterations > 1 {
                format!(" ({}x)", run.iterations)
            } else {
                String::new()
            };
            header.push(format!("run {}{repeats}\n{}", run.id, run.target));
            if i > 0 {
                header.push(format!("Δ run {}", run.id));
            }
        }
        table.set_header(header);
        for metric in &self.metrics {
            let mut row = vec![metric.label.clone()];
            for (i, value) in metric.values.iter().enumerate() {
                row.push(value.map_or("-".into(), |v| metric.unit.format(v)));
                if i > 0 {
                    let mark = match metric.difference[i] {
                        Some(d) if d.significant => " *",
                        _ => "",
                    };
                    row.push(metric.delta_pct[i].map_or("-".into(), |d| format!("{d:+.1}%{mark}")));
                }
            }
            table.add_row(row);
        }
        let mut out = format!("Comparing {} runs of {}\n", self.runs.len(), self.test);
        for run in &self.runs {
            let _ = writeln!(out, "  run {}: {}", run.id, run.describe);
            if let Some(path) = &run.path {
                let _ = writeln!(out, "    {path}");
            }
        }
        let _ = writeln!(out, "{table}");
        if self.metrics.iter().any(|m| {
            m.difference
                .iter()
                .any(|d| d.is_some_and(|d| d.significant))
        }) {
            let _ = writeln!(
                out,
                "* significant at {}% (Welch's t test over the iterations)",
                self.level_pct
            );
        }
        for index in 1..self.runs.len() {
            let _ = writeln!(out, "{}", self.verdict(index));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Direction, Headline, Repetition};
    use crate::stats::estimate;

    fn run(goodputs: &[f64]) -> Report {
        let config = crate::fixtures::config(Direction::Forward, 1);
        let one = |bps: f64| {
            let mut report = Report {
                tool: "linerate test".into(),
                test: "tcp_stream".into(),
                started_at: 0.0,
                config: config.clone(),
                host: Default::default(),
                intervals: Vec::new(),
                flows: Vec::new(),
                summary: Summary::default(),
                warnings: Vec::new(),
                repetition: None,
                copy: None,
                observe: None,
                interrupted: None,
            };
            report.summary.receiver_bps = bps;
            report
        };
        let mut report = one(goodputs[0]);
        if goodputs.len() > 1 {
            report.repetition = Some(Repetition {
                metric: Headline::ReceiverBps,
                values: goodputs.to_vec(),
                estimate: estimate(goodputs, 95.0),
                confidence: None,
                met: None,
                max_iterations: goodputs.len() as u32,
                representative: 0,
                iterations: goodputs.iter().map(|&g| one(g)).collect(),
            });
        }
        report
    }

    /// Synthetic runs: a clear 10 % gain is significant, noise of the same size as the
    /// change is not, and single runs are not judged.
    #[test]
    fn significance_follows_the_spread() {
        let base = run(&[9.0e9, 9.1e9, 8.9e9, 9.05e9, 8.95e9]);
        let faster = run(&[9.85e9, 9.95e9, 9.9e9, 9.8e9, 10.0e9]);
        let noisy = run(&[8.0e9, 10.5e9, 9.0e9, 10.0e9, 8.5e9]);
        let single = run(&[9.9e9]);
        let c = compare(&[(1, &base), (2, &faster), (3, &noisy), (4, &single)], 95.0).unwrap();
        let headline = &c.metrics[0];
        assert_eq!(headline.key, "receiver_bps");
        assert_eq!(headline.values[0], Some(9.0e9));
        let delta = headline.delta_pct[1].unwrap();
        assert!((delta - 10.0).abs() < 0.01, "{delta}");
        assert!(headline.difference[1].unwrap().significant);
        assert!(!headline.difference[2].unwrap().significant);
        assert!(headline.difference[3].is_none());
        assert!(
            c.verdict(1)
                .contains("+10.0% receiver goodput, significant at 95%"),
            "{}",
            c.verdict(1)
        );
        assert!(c.verdict(2).contains("not significant"), "{}", c.verdict(2));
        assert!(c.verdict(3).contains("run 4 ran once"), "{}", c.verdict(3));
        let text = c.render_text();
        assert!(text.contains("+10.0% *"), "{text}");
    }

    #[test]
    fn different_tests_are_refused() {
        let stream = run(&[1.0]);
        let mut rr = run(&[1.0]);
        rr.test = "tcp_rr".into();
        let error = compare(&[(1, &stream), (2, &rr)], 95.0).unwrap_err();
        assert!(
            error.contains("run 2 is tcp_rr and run 1 is tcp_stream"),
            "{error}"
        );
    }
}
