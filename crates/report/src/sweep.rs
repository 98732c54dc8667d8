//! Parameter sweeps: the swept parameters, the Cartesian product of their values, the
//! sweep's result document and its table rows (`#conn wndsz Mbps cpu(usr/sys)`).
//!
//! Points run in a fixed order: the first axis in [`SweepParam`]'s order varies slowest,
//! so a table reads like the hand-made ones (every window size for 8 connections, then
//! every one for 32).

use crate::model::{HostFacts, PerSide, Report, TestConfig, Workload};
use crate::units::{format_count, format_size_compact};
use linerate_model::{StreamTransport, TestKind, TestRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A parameter a sweep can take several values of, in the order points vary (slowest
/// first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepParam {
    /// Flows (`--parallel`).
    Parallel,
    /// Socket buffers (`--window`); `auto` leaves kernel autotuning on.
    Window,
    /// Bytes per write or datagram (`--length`).
    Length,
    /// rr: bytes per request and per response.
    Request,
    Response,
    /// rr: transactions in flight per flow.
    Outstanding,
    /// Per-flow pacing: bit/s for stream, transactions/s for rr; 0 is unpaced.
    Rate,
    /// Congestion control algorithm.
    Congestion,
}

impl SweepParam {
    /// The column heading in sweep tables.
    pub fn heading(self) -> &'static str {
        match self {
            SweepParam::Parallel => "#conn",
            SweepParam::Window => "wndsz",
            SweepParam::Length => "len",
            SweepParam::Request => "req",
            SweepParam::Response => "resp",
            SweepParam::Outstanding => "outst",
            SweepParam::Rate => "rate",
            SweepParam::Congestion => "cc",
        }
    }

    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            SweepParam::Parallel => "--parallel",
            SweepParam::Window => "--window",
            SweepParam::Length => "--length",
            SweepParam::Request => "--request",
            SweepParam::Response => "--response",
            SweepParam::Outstanding => "--outstanding",
            SweepParam::Rate => "--rate",
            SweepParam::Congestion => "--congestion",
        }
    }

    /// Puts `value` into a point's request (resolved afterwards, as any test is).
    pub fn apply(self, request: &mut TestRequest, value: &Value) {
        let number = value.as_u64();
        match (self, &mut request.kind) {
            (SweepParam::Parallel, _) => request.parallel = number.unwrap_or(1) as u32,
            (SweepParam::Window, _) => request.window = number,
            (SweepParam::Congestion, _) => request.congestion = value.as_str().map(str::to_string),
            (SweepParam::Length, TestKind::Stream(stream)) => match &mut stream.transport {
                StreamTransport::Tcp { length, .. }
                | StreamTransport::Udp { length, .. }
                | StreamTransport::Quic { length, .. }
                | StreamTransport::Video(linerate_model::VideoStream { length, .. }) => {
                    *length = number.or(*length)
                }
                // A call's datagrams are its codec's frames.
                StreamTransport::Call(_) => {}
            },
            (SweepParam::Rate, TestKind::Stream(stream)) => stream.rate_bps = number,
            (SweepParam::Rate, TestKind::Transactions(t)) => t.rate_tps = number.filter(|n| *n > 0),
            (SweepParam::Request, TestKind::Transactions(t)) => {
                t.request = number.unwrap_or(t.request)
            }
            (SweepParam::Response, TestKind::Transactions(t)) => {
                t.response = number.unwrap_or(t.response)
            }
            (SweepParam::Outstanding, TestKind::Transactions(t)) => {
                t.outstanding = number.map(|n| n as u32).or(t.outstanding)
            }
            // Parameters of the other kind of test: the sweep's flags refuse them.
            (SweepParam::Length, _)
            | (SweepParam::Request | SweepParam::Response | SweepParam::Outstanding, _) => {}
        }
    }

    /// A value as the table shows it: `8`, `256K`, `auto`, `cubic`.
    pub fn show(self, value: &Value) -> String {
        match (self, value) {
            (SweepParam::Window, Value::Null) => "auto".into(),
            (SweepParam::Rate, Value::Number(n)) if n.as_u64() == Some(0) => "unpaced".into(),
            (SweepParam::Rate, Value::Number(n)) => format_count(n.as_f64().unwrap_or(0.0)),
            (
                SweepParam::Window
                | SweepParam::Length
                | SweepParam::Request
                | SweepParam::Response,
                Value::Number(n),
            ) => format_size_compact(n.as_u64().unwrap_or(0)),
            (_, Value::String(text)) => text.clone(),
            (_, other) => other.to_string(),
        }
    }
}

/// One swept parameter and its values, in the order given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepAxis {
    pub param: SweepParam,
    pub values: Vec<Value>,
}

/// Every combination of the axes' values, the first axis (in [`SweepParam`] order)
/// varying slowest.
pub fn product(axes: &[SweepAxis]) -> Vec<BTreeMap<SweepParam, Value>> {
    let mut axes: Vec<&SweepAxis> = axes.iter().collect();
    axes.sort_by_key(|a| a.param);
    let mut points = vec![BTreeMap::new()];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|point| {
                axis.values.iter().map(move |value| {
                    let mut next = point.clone();
                    next.insert(axis.param, value.clone());
                    next
                })
            })
            .collect();
    }
    points
}

/// One point of a sweep: its settings and what it measured, or why it failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub settings: BTreeMap<SweepParam, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of `linerate sweep` (docs/results.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    pub tool: String,
    /// "sweep".
    pub test: String,
    /// The test at every point: "tcp_stream", "udp_stream", "tcp_rr", "udp_rr", "tcp_crr".
    pub sweep_of: String,
    pub started_at: f64,
    /// The configuration every point starts from, before its settings.
    pub config: TestConfig,
    pub axes: Vec<SweepAxis>,
    pub host: PerSide<HostFacts>,
    pub points: Vec<SweepPoint>,
    pub warnings: Vec<String>,
}

impl SweepReport {
    /// The axes in the order points vary.
    pub fn ordered_axes(&self) -> Vec<&SweepAxis> {
        let mut axes: Vec<&SweepAxis> = self.axes.iter().collect();
        axes.sort_by_key(|a| a.param);
        axes
    }
}

/// Column layout of a sweep table, fixed before the first row so that rows print as
/// their points complete.
#[derive(Debug, Clone)]
pub struct SweepTable {
    workload: Workload,
    udp: bool,
    remote_cpu: bool,
    /// Encrypted streams: a column of CPU seconds per Gbit, both ends together.
    per_gbit: bool,
    columns: Vec<(SweepParam, usize)>,
}

impl SweepTable {
    /// The table for a sweep of `config` over `axes`. Stream tables always show the
    /// connection count and window (as `#conn wndsz Mbps cpu(usr/sys)` tables do);
    /// request/response tables the flows and message sizes.
    pub fn new(config: &TestConfig, axes: &[SweepAxis]) -> SweepTable {
        let mut params: Vec<SweepParam> = match config.workload {
            Workload::Stream => vec![SweepParam::Parallel, SweepParam::Window],
            Workload::Rr | Workload::Crr => vec![
                SweepParam::Parallel,
                SweepParam::Request,
                SweepParam::Response,
            ],
        };
        for axis in axes {
            if !params.contains(&axis.param) {
                params.push(axis.param);
            }
        }
        params.sort();
        let columns = params
            .into_iter()
            .map(|param| {
                let widest = axes
                    .iter()
                    .filter(|a| a.param == param)
                    .flat_map(|a| a.values.iter().map(|v| param.show(v).len()))
                    .max()
                    .unwrap_or(0)
                    .max(param.heading().len())
                    .max(fixed_value(config, param).len());
                (param, widest)
            })
            .collect();
        SweepTable {
            workload: config.workload,
            udp: config.protocol.traits().datagrams,
            remote_cpu: config.target != "loopback",
            per_gbit: config.tls.is_some() && config.workload == Workload::Stream,
            columns,
        }
    }

    /// The heading line.
    pub fn header(&self) -> String {
        let mut line = String::new();
        for (param, width) in &self.columns {
            let _ = write!(line, "{:<width$} ", param.heading());
        }
        match self.workload {
            Workload::Stream => {
                let _ = write!(line, "{:>20}", "Mbps");
                if self.udp {
                    let _ = write!(line, " {:>7}", "loss%");
                }
                if self.per_gbit {
                    let _ = write!(line, " {:>10}", "cpu_s/Gbit");
                }
            }
            Workload::Rr | Workload::Crr => {
                let _ = write!(
                    line,
                    "{:>20} {:>9} {:>9} {:>9}",
                    "tps", "p50us", "p99us", "p99.9us"
                );
            }
        }
        line.push_str(" cpu(usr/sys)");
        if self.remote_cpu {
            line.push_str(" srv(usr/sys)");
        }
        line
    }

    /// The row of one point.
    pub fn row(&self, point: &SweepPoint) -> String {
        let mut line = String::new();
        for (param, width) in &self.columns {
            let value = match point.settings.get(param) {
                Some(value) => param.show(value),
                None => point
                    .report
                    .as_ref()
                    .map(|r| fixed_value(&r.config, *param))
                    .unwrap_or_default(),
            };
            let _ = write!(line, "{value:<width$} ");
        }
        let Some(report) = &point.report else {
            let _ = write!(
                line,
                "failed: {}",
                point.error.as_deref().unwrap_or("no result")
            );
            return line;
        };
        let s = &report.summary;
        let headline = |scale: f64, decimals: usize| match &report.repetition {
            Some(r) => format!(
                "{:.decimals$}±{:.decimals$}",
                r.estimate.mean / scale,
                r.estimate.half_width / scale
            ),
            None => format!("{:.decimals$}", report.headline().1 / scale),
        };
        match self.workload {
            Workload::Stream => {
                let _ = write!(line, "{:>20}", headline(1e6, 2));
                if self.udp {
                    let loss = s.udp.as_ref().map_or(0.0, |u| u.loss_pct);
                    let _ = write!(line, " {loss:>7.3}");
                }
                if self.per_gbit {
                    let (_, total) = crate::crypto::cpu_per_gbit(s);
                    let _ = write!(line, " {total:>10.4}");
                }
            }
            Workload::Rr | Workload::Crr => {
                let latency = s.rr.as_ref().map(|r| &r.latency_us);
                let figure = |f: fn(&crate::latency::LatencySummary) -> f64| {
                    latency.map_or("-".to_string(), |l| format!("{:.1}", f(l)))
                };
                let _ = write!(
                    line,
                    "{:>20} {:>9} {:>9} {:>9}",
                    headline(1.0, 0),
                    figure(|l| l.p50),
                    figure(|l| l.p99),
                    figure(|l| l.p999)
                );
            }
        }
        let cpu = |c: &crate::model::CpuUsage| {
            format!("{:.0} ({:.0}/{:.0})", c.busy_pct, c.user_pct, c.system_pct)
        };
        let _ = write!(line, " {:<12}", cpu(&s.cpu.local));
        if self.remote_cpu {
            let _ = write!(line, " {}", cpu(&s.cpu.remote));
        }
        line.trim_end().to_string()
    }

    /// The whole table: header and every row.
    pub fn render(&self, sweep: &SweepReport) -> String {
        let mut out = format!("{}\n", self.header());
        for point in &sweep.points {
            out.push_str(&self.row(point));
            out.push('\n');
        }
        out
    }
}

/// The value of a parameter that is not swept, as a row shows it.
fn fixed_value(config: &TestConfig, param: SweepParam) -> String {
    let value = match param {
        SweepParam::Parallel => Value::from(config.parallel),
        SweepParam::Window => config.window.map_or(Value::Null, Value::from),
        SweepParam::Length => Value::from(config.length),
        SweepParam::Request => Value::from(config.rr.as_ref().map_or(0, |r| r.request)),
        SweepParam::Response => Value::from(config.rr.as_ref().map_or(0, |r| r.response)),
        SweepParam::Outstanding => Value::from(config.rr.as_ref().map_or(0, |r| r.outstanding)),
        SweepParam::Rate => match config.workload {
            Workload::Stream => Value::from(config.rate_bps.unwrap_or(0)),
            _ => Value::from(
                config
                    .rr
                    .as_ref()
                    .and_then(|r| r.rate_tps)
                    .map_or(0, |r| r as u64),
            ),
        },
        SweepParam::Congestion => config
            .congestion
            .clone()
            .map_or(Value::from("default"), Value::from),
    };
    param.show(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Direction;

    fn axis(param: SweepParam, values: &[Value]) -> SweepAxis {
        SweepAxis {
            param,
            values: values.to_vec(),
        }
    }

    #[test]
    fn the_product_runs_every_combination_slowest_axis_first() {
        // Given in another order, the points still vary parallel slowest.
        let axes = [
            axis(SweepParam::Window, &[Value::from(262_144), Value::Null]),
            axis(SweepParam::Parallel, &[Value::from(8), Value::from(32)]),
            axis(SweepParam::Length, &[Value::from(8192)]),
        ];
        let points = product(&axes);
        assert_eq!(points.len(), 4);
        let shown: Vec<String> = points
            .iter()
            .map(|p| {
                p.iter()
                    .map(|(k, v)| k.show(v))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(
            shown,
            ["8 256K 8K", "8 auto 8K", "32 256K 8K", "32 auto 8K"]
        );
        assert_eq!(product(&[]).len(), 1, "no axes: one point, the base test");
    }

    #[test]
    fn settings_land_in_the_configuration() {
        let mut request = TestRequest::new(TestKind::Stream(linerate_model::StreamRequest {
            direction: Direction::Forward,
            rate_bps: Some(1_000_000),
            transport: StreamTransport::Tcp {
                length: None,
                mss: None,
                nodelay: false,
            },
        }));
        SweepParam::Parallel.apply(&mut request, &Value::from(100));
        SweepParam::Window.apply(&mut request, &Value::from(32768));
        SweepParam::Congestion.apply(&mut request, &Value::from("reno"));
        SweepParam::Rate.apply(&mut request, &Value::from(0));
        SweepParam::Length.apply(&mut request, &Value::from(8192));
        let here = linerate_model::Environment {
            cpus: 2,
            udp_length: None,
        };
        let config = TestConfig::resolve(&request, &here).unwrap();
        assert_eq!(config.parallel, 100);
        assert_eq!(config.window, Some(32768));
        assert_eq!(config.congestion.as_deref(), Some("reno"));
        assert_eq!(config.rate_bps, None);
        assert_eq!(config.length, 8192);
        assert_eq!(config.threads, 2, "threads follow the swept flows");
        SweepParam::Window.apply(&mut request, &Value::Null);
        assert_eq!(request.window, None);
    }
}
