//! A responsiveness run (`linerate rpm`, docs/rpm.md): its figures as printed with
//! `--json` and kept in the results database, its text, its CSV rows and its comparison.

use crate::result_kind::{ResultKind, Rows};
use crate::units::Scale;
use linerate_model::measure::Headline as MeshHeadline;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The `test` value of an RPM document.
pub const RPM: &str = "rpm";

/// One interval of a direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmInterval {
    pub end_s: f64,
    pub connections: usize,
    pub goodput_bps: f64,
    /// Responsiveness over the probes of the last intervals (the moving window).
    pub rpm: Option<f64>,
}

/// One direction's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmLeg {
    /// "download" or "upload".
    pub direction: String,
    /// When the direction began, Unix seconds (its intervals count from here).
    pub started_unix_s: f64,
    /// The goodput's moving average at the end, counted where it arrived, bits a second.
    pub capacity_bps: f64,
    pub rpm: Option<f64>,
    pub goodput_saturated: bool,
    pub rpm_saturated: bool,
    pub connections: usize,
    /// Foreign probes' TCP handshake under load (trimmed mean over the last window).
    pub loaded_connect_s: Option<f64>,
    /// Self probes' round trip under load (the same).
    pub loaded_self_s: Option<f64>,
    /// What the load added to a new connection's handshake: the queue the path built.
    pub added_latency_s: Option<f64>,
    pub probes: usize,
    pub failed_probes: usize,
    pub intervals: Vec<RpmInterval>,
    /// The spread of the times behind `loaded_self_s` and `loaded_connect_s` (the same
    /// probes, of the last window): what the latency chart draws. Absent in runs kept
    /// before it was recorded.
    #[serde(default)]
    pub loaded_self_spread: Option<ProbeSpread>,
    #[serde(default)]
    pub loaded_connect_spread: Option<ProbeSpread>,
}

/// The spread of a set of probe times, in seconds: the count, the extremes and the
/// quartiles and 90th percentile by nearest rank. A chart of idle against loaded latency
/// draws it as a box (the middle half), a line (the median) and a whisker (to the 90th).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeSpread {
    pub count: usize,
    pub min_s: f64,
    pub p25_s: f64,
    pub p50_s: f64,
    pub p75_s: f64,
    pub p90_s: f64,
    pub max_s: f64,
}

impl ProbeSpread {
    /// The spread of `times` (seconds); `None` for no finite time.
    pub fn of(times: &[f64]) -> Option<Self> {
        let mut sorted: Vec<f64> = times.iter().copied().filter(|t| t.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        // Nearest rank: the smallest value with at least q of the values at or below it.
        let rank =
            |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Some(Self {
            count: sorted.len(),
            min_s: sorted[0],
            p25_s: rank(0.25),
            p50_s: rank(0.50),
            p75_s: rank(0.75),
            p90_s: rank(0.90),
            max_s: sorted[sorted.len() - 1],
        })
    }
}

impl RpmLeg {
    /// Both figures stopped moving before the time limit.
    pub fn settled(&self) -> bool {
        self.goodput_saturated && self.rpm_saturated
    }
}

/// A run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmReport {
    /// Always [`RPM`]: tells the document's kind.
    pub test: String,
    pub started_at: f64,
    /// The server as the user named it.
    pub target: String,
    pub config_url: String,
    pub tls: bool,
    /// Idle: a small object's round trip over an open connection, and a new
    /// connection's TCP handshake (trimmed means).
    pub idle_latency_s: f64,
    pub idle_connect_s: f64,
    pub download: RpmLeg,
    pub upload: RpmLeg,
    /// The lower of the two directions' responsiveness, and its band.
    pub rpm: Option<f64>,
    pub band: Option<String>,
    /// The larger added latency, and its bufferbloat grade.
    pub added_latency_s: Option<f64>,
    pub grade: Option<String>,
    /// The spread of the idle round trips and handshakes behind `idle_latency_s` and
    /// `idle_connect_s`. Absent in runs kept before it was recorded.
    #[serde(default)]
    pub idle_spread: Option<ProbeSpread>,
    #[serde(default)]
    pub idle_connect_spread: Option<ProbeSpread>,
    /// The measuring host: its CPU, kernel, and the emulated path it crossed in a lab.
    #[serde(default)]
    pub host: Option<linerate_model::HostFacts>,
}

/// Runs side by side: each figure, and each later run's change from the first.
pub fn compare_text(runs: &[(i64, &RpmReport)]) -> String {
    type Pick = fn(&RpmReport) -> Option<f64>;
    let picks: [(&str, Pick); 8] = [
        ("RPM", |r| r.rpm),
        ("download RPM", |r| r.download.rpm),
        ("upload RPM", |r| r.upload.rpm),
        ("download Mbit/s", |r| Some(r.download.capacity_bps / 1e6)),
        ("upload Mbit/s", |r| Some(r.upload.capacity_bps / 1e6)),
        ("idle latency ms", |r| Some(r.idle_latency_s * 1e3)),
        ("added latency ms", |r| r.added_latency_s.map(|a| a * 1e3)),
        ("connections (down + up)", |r| {
            Some((r.download.connections + r.upload.connections) as f64)
        }),
    ];
    let figures = picks
        .into_iter()
        .map(|(name, pick)| {
            (
                name.to_string(),
                runs.iter().map(|(_, r)| pick(r)).collect(),
            )
        })
        .collect();
    let ids: Vec<i64> = runs.iter().map(|(id, _)| *id).collect();
    let mut table = crate::text::side_by_side(&ids, figures, 1);
    let mut grades = vec!["grade".to_string()];
    grades.extend(
        runs.iter()
            .map(|(_, r)| r.grade.clone().unwrap_or("-".into())),
    );
    grades.extend(runs.iter().skip(1).map(|_| String::new()));
    table.add_row(grades);
    format!("{table}\n")
}

impl ResultKind for RpmReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    fn path(&self) -> Option<&linerate_model::PathFacts> {
        self.host.as_ref().and_then(|h| h.path.as_deref())
    }

    fn headline(&self) -> Option<(crate::model::Headline, f64)> {
        self.rpm.map(|rpm| (crate::model::Headline::Rpm, rpm))
    }

    fn mesh_figure(&self, which: MeshHeadline) -> (Option<f64>, String) {
        if which != MeshHeadline::Responsiveness {
            return (None, String::new());
        }
        let text = match (self.rpm, &self.grade) {
            (Some(rpm), Some(grade)) => format!(
                "RPM {rpm:.0} ({}), grade {grade}",
                self.band.as_deref().unwrap_or("-")
            ),
            (Some(rpm), None) => format!("RPM {rpm:.0}"),
            _ => String::new(),
        };
        (self.rpm, text)
    }

    /// "221 RPM (Low), grade C, 46.9 Mbit/s down, 46.5 up".
    fn headline_text(&self, _scale: Scale) -> String {
        let rpm = self.rpm.map_or("no RPM".into(), |r| {
            format!("{r:.0} RPM ({})", self.band.as_deref().unwrap_or("-"))
        });
        let grade = self
            .grade
            .as_deref()
            .map_or(String::new(), |g| format!(", grade {g}"));
        format!(
            "{rpm}{grade}, {:.1} Mbit/s down, {:.1} up",
            self.download.capacity_bps / 1e6,
            self.upload.capacity_bps / 1e6
        )
    }

    /// The result as networkQuality prints it: capacities, responsiveness, idle latency,
    /// the grade.
    fn render_text(&self, _scale: Scale) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "idle latency {:.2} ms (a new connection: {:.2} ms)",
            self.idle_latency_s * 1e3,
            self.idle_connect_s * 1e3
        );
        for leg in [&self.download, &self.upload] {
            let rpm = leg.rpm.map_or("-".into(), |r| format!("{r:.0} RPM"));
            // Loaded below idle is noise in the idle figure (a busy host measured idle
            // slower than loaded), not latency taken away: it reads as none added.
            let added = leg.added_latency_s.map_or("-".into(), |a| {
                if a < 0.0 {
                    format!("none ({:.1} ms below idle)", -a * 1e3)
                } else {
                    format!("+{:.1} ms", a * 1e3)
                }
            });
            let settled = if leg.settled() {
                ""
            } else {
                " (time limit: not settled)"
            };
            let _ = writeln!(
                out,
                "{:<9} {:>9.2} Mbit/s over {:>2} connection{}, {rpm}, added latency {added}{settled}",
                leg.direction,
                leg.capacity_bps / 1e6,
                leg.connections,
                if leg.connections == 1 { "" } else { "s" }
            );
        }
        if let Some(rpm) = self.rpm {
            let _ = writeln!(
                out,
                "responsiveness {rpm:.0} RPM ({})",
                self.band.as_deref().unwrap_or("-")
            );
        }
        if let (Some(added), Some(grade)) = (self.added_latency_s, &self.grade) {
            let _ = writeln!(
                out,
                "bufferbloat grade {grade} (+{:.1} ms under load)",
                added.max(0.0) * 1e3
            );
        }
        out
    }

    /// CSV: a row per interval of each direction.
    fn rows(&self) -> Rows {
        let header = ["direction", "end_s", "connections", "goodput_bps", "rpm"]
            .map(String::from)
            .to_vec();
        let rows = [&self.download, &self.upload]
            .into_iter()
            .flat_map(|leg| {
                leg.intervals.iter().map(move |i| {
                    vec![
                        leg.direction.clone(),
                        format!("{:.3}", i.end_s),
                        i.connections.to_string(),
                        format!("{:.0}", i.goodput_bps),
                        i.rpm.map_or(String::new(), |r| format!("{r:.1}")),
                    ]
                })
            })
            .collect();
        (header, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(direction: &str, connections: usize, added_s: f64) -> RpmLeg {
        RpmLeg {
            direction: direction.into(),
            started_unix_s: 0.0,
            capacity_bps: 1.6e9,
            rpm: Some(2_000.0),
            goodput_saturated: true,
            rpm_saturated: true,
            connections,
            loaded_connect_s: None,
            loaded_self_s: None,
            added_latency_s: Some(added_s),
            probes: 10,
            failed_probes: 0,
            intervals: Vec::new(),
            loaded_self_spread: None,
            loaded_connect_spread: None,
        }
    }

    /// Nearest-rank quartiles: of 1..=10, the 25th is 3, the median 5, the 90th 9; an
    /// empty or all-NaN set has none.
    #[test]
    fn a_spread_is_taken_by_nearest_rank() {
        let times: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let spread = ProbeSpread::of(&times).unwrap();
        assert_eq!(
            (spread.count, spread.min_s, spread.p25_s, spread.p50_s),
            (10, 1.0, 3.0, 5.0)
        );
        assert_eq!((spread.p75_s, spread.p90_s, spread.max_s), (8.0, 9.0, 10.0));
        assert_eq!(ProbeSpread::of(&[f64::NAN]), None);
        assert_eq!(ProbeSpread::of(&[]), None);
        assert_eq!(ProbeSpread::of(&[2.0]).unwrap().p90_s, 2.0);
    }

    /// One loading connection is "1 connection"; a loaded latency below idle (noise in
    /// the idle figure on a busy host) adds none, and says by how much it was below,
    /// instead of "added latency -0.6 ms".
    #[test]
    fn one_connection_and_a_negative_addition_read_as_they_are() {
        let report = RpmReport {
            test: RPM.into(),
            started_at: 0.0,
            target: "t".into(),
            config_url: String::new(),
            tls: false,
            idle_latency_s: 0.004,
            idle_connect_s: 0.004,
            download: leg("download", 1, -0.0006),
            upload: leg("upload", 4, 0.0021),
            rpm: Some(2_000.0),
            band: Some("High".into()),
            added_latency_s: Some(0.0021),
            grade: Some("A+".into()),
            idle_spread: None,
            idle_connect_spread: None,
            host: None,
        };
        let text = report.render_text(Scale::Adaptive);
        assert!(text.contains("over  1 connection, "), "{text}");
        assert!(text.contains("over  4 connections, "), "{text}");
        assert!(
            text.contains("added latency none (0.6 ms below idle)"),
            "{text}"
        );
        assert!(text.contains("added latency +2.1 ms"), "{text}");
        assert!(!text.contains("-0.6"), "{text}");
    }
}
