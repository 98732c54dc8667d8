//! An ndt7 run (docs/ndt7.md) as the results database keeps it: a client's subtests
//! (`linerate ndt7`) or one subtest a server ran (`serve --ndt7`), with their text, as
//! M-Lab's clients print them, and CSV rows.

use crate::result_kind::{ResultKind, Rows};
use linerate_model::ndt7::{Subtest, SubtestEnd, SubtestResult};
use linerate_model::units::{format_rate, Scale};
use serde::{Deserialize, Serialize};

/// The `test` value of an ndt7 document.
pub const NDT7: &str = "ndt7";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ndt7Report {
    pub test: String,
    pub started_at: f64,
    /// The server as the client named it, or the client's address on a server.
    pub target: String,
    /// "client" or "server".
    pub side: String,
    pub subtests: Vec<SubtestResult>,
}

impl Ndt7Report {
    pub fn client(target: String, started_at: f64, subtests: Vec<SubtestResult>) -> Ndt7Report {
        Ndt7Report {
            test: NDT7.into(),
            started_at,
            target,
            side: "client".into(),
            subtests,
        }
    }

    /// One subtest a server ran, ending at `ended_at`.
    pub fn served(subtest: SubtestResult, ended_at: f64) -> Ndt7Report {
        Ndt7Report {
            test: NDT7.into(),
            started_at: ended_at - subtest.elapsed_s,
            target: subtest.client.clone(),
            side: "server".into(),
            subtests: vec![subtest],
        }
    }
}

fn ended_word(end: SubtestEnd) -> &'static str {
    match end {
        SubtestEnd::Completed => "completed",
        SubtestEnd::PeerClosed => "peer closed",
        SubtestEnd::Abrupt => "abrupt",
        SubtestEnd::Bounded => "bounded",
        SubtestEnd::Refused => "refused",
    }
}

/// One subtest as M-Lab's clients print it: its figure, latency and retransmission,
/// with where the figure was counted and how the subtest ended.
pub fn subtest_text(s: &SubtestResult) -> String {
    let title = match s.subtest.name() {
        "download" => "Download",
        _ => "Upload",
    };
    let mut out = format!(
        "{title}\n  Throughput: {:>10.2} Mbit/s   ({}, {} bytes in {:.2} s)\n",
        s.goodput_bps / 1e6,
        s.counted_by,
        s.app_bytes,
        s.elapsed_s
    );
    if let Some(rtt) = s.min_rtt_ms {
        out.push_str(&format!("  Latency:    {rtt:>10.3} ms (min RTT)\n"));
    }
    if let Some(retrans) = s.retransmission_pct {
        out.push_str(&format!("  Retransmission: {retrans:>6.2} %\n"));
    }
    if !s.congestion.is_empty() {
        out.push_str(&format!("  Congestion control: {}\n", s.congestion));
    }
    // BBR's estimates are the sender's: the server's in a download.
    let sender_bbr = match s.subtest {
        Subtest::Download => s.server_measurements.last().and_then(|m| m.bbr_info),
        Subtest::Upload => None,
    };
    if let Some(bbr) = sender_bbr {
        out.push_str(&format!(
            "  BBR: bandwidth {}, min RTT {:.3} ms\n",
            format_rate(bbr.bw as f64 * 8.0, Scale::Adaptive),
            bbr.min_rtt_us as f64 / 1000.0
        ));
    }
    if s.ended != SubtestEnd::Completed {
        let why = s.ended_why.as_deref().unwrap_or("");
        out.push_str(&format!("  Ended: {} {why}\n", ended_word(s.ended)));
    }
    out
}

impl ResultKind for Ndt7Report {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    /// The first subtest's goodput.
    fn headline(&self) -> Option<(crate::model::Headline, f64)> {
        self.subtests
            .first()
            .map(|s| (crate::model::Headline::ReceiverBps, s.goodput_bps))
    }

    /// For listings: "download 94.1 Mbits/sec, upload 45.0 Mbits/sec".
    fn headline_text(&self, _scale: Scale) -> String {
        let parts: Vec<String> = self
            .subtests
            .iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s.subtest.name(),
                    format_rate(s.goodput_bps, Scale::Adaptive)
                )
            })
            .collect();
        let served = if self.side == "server" { "served " } else { "" };
        format!("{served}{}", parts.join(", "))
    }

    fn render_text(&self, _scale: Scale) -> String {
        let mut out = String::new();
        if self.side == "server" {
            out.push_str(&format!("ndt7 subtest served to {}\n", self.target));
        } else if let Some(first) = self.subtests.first() {
            out.push_str(&format!(
                "ndt7 against {} ({}), client {}\n",
                self.target, first.server, first.client
            ));
        }
        for s in &self.subtests {
            out.push_str(&subtest_text(s));
        }
        out
    }

    /// `export --format csv`: one row a subtest.
    fn rows(&self) -> Rows {
        let header = [
            "side",
            "subtest",
            "client",
            "server",
            "bps",
            "counted_by",
            "app_bytes",
            "elapsed_s",
            "min_rtt_ms",
            "retransmission_pct",
            "congestion",
            "ended",
        ]
        .map(String::from)
        .to_vec();
        let optional = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
        let rows = self
            .subtests
            .iter()
            .map(|s| {
                vec![
                    self.side.clone(),
                    s.subtest.name().into(),
                    s.client.clone(),
                    s.server.clone(),
                    format!("{:.0}", s.goodput_bps),
                    s.counted_by.clone(),
                    s.app_bytes.to_string(),
                    format!("{:.6}", s.elapsed_s),
                    optional(s.min_rtt_ms),
                    optional(s.retransmission_pct),
                    s.congestion.clone(),
                    ended_word(s.ended).into(),
                ]
            })
            .collect();
        (header, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subtest(which: Subtest, bps: f64) -> SubtestResult {
        SubtestResult {
            subtest: which,
            measured_by: "client".into(),
            client: "10.0.0.2:40000".into(),
            server: "10.0.0.1:4443".into(),
            elapsed_s: 10.0,
            app_bytes: (bps * 10.0 / 8.0) as u64,
            goodput_bps: bps,
            counted_by: "client AppInfo".into(),
            min_rtt_ms: Some(20.1),
            retransmission_pct: Some(0.12),
            congestion: String::new(),
            ended: SubtestEnd::Completed,
            ended_why: None,
            server_measurements: Vec::new(),
            client_last: None,
            metadata: Vec::new(),
        }
    }

    #[test]
    fn a_client_run_prints_each_subtests_figure_latency_and_retransmission() {
        let report = Ndt7Report::client(
            "server:4443".into(),
            0.0,
            vec![
                subtest(Subtest::Download, 94.3e6),
                subtest(Subtest::Upload, 45.1e6),
            ],
        );
        let text = report.render_text(Scale::Adaptive);
        for part in [
            "Download\n  Throughput:      94.30 Mbit/s",
            "Upload\n  Throughput:      45.10 Mbit/s",
            "Latency:        20.100 ms",
            "Retransmission:   0.12 %",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
        assert!(
            report
                .headline_text(Scale::Adaptive)
                .starts_with("download 94.3"),
            "{}",
            report.headline_text(Scale::Adaptive)
        );
        let (header, rows) = report.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[1][header.iter().position(|h| h == "bps").unwrap()],
            "45100000"
        );
        let back: Ndt7Report =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
    }
}
