//! The native tests' documents as kinds of result: one test (possibly repeated), a
//! sweep of tests, and a `--find-max` search of rates.

use crate::compare::metrics;
use crate::model::{FindMaxReport, Headline, Report, Summary, TestConfig, Workload};
use crate::result_kind::{number, ResultKind, Rows};
use crate::sweep::{SweepReport, SweepTable};
use crate::text::{self, TRIAL_HEADER};
use crate::units::Scale;
use linerate_model::PathFacts;
use std::fmt::Write as _;

impl ResultKind for Report {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.config.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    fn path(&self) -> Option<&PathFacts> {
        Report::path(self)
    }

    /// The test's headline (the mean when repeated).
    fn headline(&self) -> Option<(Headline, f64)> {
        Some(Report::headline(self))
    }

    fn headline_text(&self, scale: Scale) -> String {
        let (headline, value) = Report::headline(self);
        let figure = headline.format(value, scale);
        let text = match &self.repetition {
            Some(r) => format!(
                "{figure} ±{:.1}% ({} iterations)",
                r.estimate.half_width_pct,
                r.values.len()
            ),
            None => figure,
        };
        // A listing says which runs were cut short, so a comparison is chosen knowing it.
        match &self.interrupted {
            Some(cut) => format!("{text} (interrupted after {:.2} s)", cut.after_s),
            None => text,
        }
    }

    /// A call's worse way's MOS, both ways in words ("MOS 4.21 out, 4.35 back"); video
    /// frames' median latency; a stream's goodput.
    fn mesh_figure(&self, which: linerate_model::measure::Headline) -> (Option<f64>, String) {
        use linerate_model::measure::Headline as MeshHeadline;
        let call = self.summary.call.as_ref().filter(|c| !c.ways.is_empty());
        match (which, call) {
            (MeshHeadline::Mos, Some(call)) => {
                // A codec without a MOS (Opus) heads its row with none.
                let worse = call
                    .ways
                    .iter()
                    .map(|w| w.score.mos)
                    .try_fold(f64::MAX, |worse, mos| mos.map(|m| worse.min(m)));
                let ways: Vec<String> = call
                    .ways
                    .iter()
                    .map(|w| {
                        let way = match w.direction {
                            linerate_model::Direction::Reverse => "back",
                            _ => "out",
                        };
                        match w.score.mos {
                            Some(mos) => format!("{mos:.2} {way}"),
                            None => format!("none {way}"),
                        }
                    })
                    .collect();
                (worse, format!("MOS {}", ways.join(", ")))
            }
            // Video frames: the median frame's latency, with the frames that were not
            // shown in time beside it; of frames both ways (a game's), the worse way's.
            (MeshHeadline::Transaction { label, .. }, None) => {
                let way = self.summary.video.as_ref().and_then(|v| {
                    v.ways
                        .iter()
                        .filter(|w| w.counts.latency_us.count > 0)
                        .max_by(|a, b| a.counts.latency_us.p50.total_cmp(&b.counts.latency_us.p50))
                });
                match way {
                    Some(w) => {
                        let c = &w.counts;
                        (
                            Some(c.latency_us.p50 / 1e6),
                            format!(
                                "{label} p50 {} ({} late, {} not whole of {})",
                                crate::units::format_micros(c.latency_us.p50),
                                c.late,
                                w.lost + c.partial,
                                c.sent
                            ),
                        )
                    }
                    None => (None, String::new()),
                }
            }
            // A stream's goodput, counted at its receivers (a client test an agent ran).
            (MeshHeadline::Goodput, None) if self.config.workload == Workload::Stream => (
                Some(self.summary.receiver_bps),
                crate::units::format_rate(self.summary.receiver_bps, Scale::Adaptive),
            ),
            _ => (None, String::new()),
        }
    }

    fn render_text(&self, scale: Scale) -> String {
        render_test(self, scale)
    }

    /// A stream test's interval lines first (from the kept intervals, as the receiver
    /// counted them), then its summary.
    fn render_text_as_run(&self, scale: Scale) -> String {
        if self.config.workload == Workload::Stream
            && self.config.interval_s > 0.0
            && !self.intervals.is_empty()
        {
            text::kept_interval_lines(self, scale) + &render_test(self, scale)
        } else {
            render_test(self, scale)
        }
    }

    /// A row per interval; per iteration for a repeated test.
    fn rows(&self) -> Rows {
        match &self.repetition {
            Some(_) => iterations(self),
            None => intervals(self),
        }
    }
}

impl ResultKind for SweepReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn kind(&self) -> String {
        format!("sweep of {}", self.sweep_of)
    }

    fn target(&self) -> &str {
        &self.config.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    fn path(&self) -> Option<&PathFacts> {
        crate::model::path_of(&self.host)
    }

    /// The best point's headline.
    fn headline(&self) -> Option<(Headline, f64)> {
        self.points
            .iter()
            .filter_map(|p| p.report.as_ref().map(|r| r.headline()))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn headline_text(&self, scale: Scale) -> String {
        match self.headline() {
            Some((headline, value)) => format!(
                "best {} of {} points",
                headline.format(value, scale),
                self.points.len()
            ),
            None => format!("{} points, none measured", self.points.len()),
        }
    }

    fn render_text(&self, _scale: Scale) -> String {
        SweepTable::new(&self.config, &self.axes).render(self) + &warnings(&self.warnings)
    }

    /// The rows were printed as they came: the warnings are left.
    fn render_text_after_live(&self, _scale: Scale) -> String {
        warnings(&self.warnings)
    }

    fn rows(&self) -> Rows {
        sweep_rows(self)
    }
}

impl ResultKind for FindMaxReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.config.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    fn path(&self) -> Option<&PathFacts> {
        crate::model::path_of(&self.host)
    }

    /// The highest clean rate.
    fn headline(&self) -> Option<(Headline, f64)> {
        self.result
            .as_ref()
            .map(|found| (Headline::ReceiverBps, found.receiver_bps))
    }

    fn headline_text(&self, scale: Scale) -> String {
        self.headline().map_or("no clean rate".into(), |(h, v)| {
            format!("{} clean", h.format(v, scale))
        })
    }

    fn render_text(&self, scale: Scale) -> String {
        let mut out = format!("{TRIAL_HEADER}\n");
        for (index, trial) in self.trials.iter().enumerate() {
            let _ = writeln!(out, "{}", text::trial_line(index + 1, trial, scale));
        }
        out + &text::render_find_max(self, scale)
    }

    /// The trial lines were printed as they came: the answer is left.
    fn render_text_after_live(&self, scale: Scale) -> String {
        text::render_find_max(self, scale)
    }

    fn rows(&self) -> Rows {
        trial_rows(self)
    }
}

fn warnings(list: &[String]) -> String {
    list.iter().map(|w| format!("warning: {w}\n")).collect()
}

/// One test's summary, with the iterations when it was repeated.
fn render_test(report: &Report, scale: Scale) -> String {
    let mut out = match report.config.workload {
        Workload::Stream => stream_summary(report, scale),
        Workload::Rr | Workload::Crr => {
            crate::rr::render_rr_summary(report, report.config.per_flow)
        }
    };
    out.push_str(&host_block(report));
    if let Some(repetition) = &report.repetition {
        out.push_str(&render_repetition(repetition, scale));
    }
    out
}

/// `--observe`: the "Host" block, only what is unusual on either end (the JSON has all).
/// Both ends on one host (one kernel, the same counters) are said once; a protocol's
/// counters are shown only for a test of that protocol: a TCP test's report does not
/// show UDP drops, which were other processes' (the JSON keeps every counter).
fn host_block(report: &Report) -> String {
    let Some(observe) = &report.observe else {
        return String::new();
    };
    let datagrams = report.config.protocol.traits().datagrams;
    let shown = |line: &&String| {
        let udp_counter = line.starts_with("Udp");
        let tcp_counter = line.starts_with("Tcp");
        !(udp_counter && !datagrams || tcp_counter && datagrams)
    };
    let lines = |o: &Option<linerate_model::observe::Observation>| -> Vec<String> {
        o.iter()
            .flat_map(|o| &o.unusual)
            .filter(shown)
            .cloned()
            .collect()
    };
    let (client, server) = (lines(&observe.local), lines(&observe.remote));
    let one_host = report.host.local.same_kernel(&report.host.remote)
        && observe.local.as_ref().map(|o| &o.counters)
            == observe.remote.as_ref().map(|o| &o.counters);
    let mut out = String::new();
    if one_host {
        for line in client
            .iter()
            .chain(server.iter().filter(|l| !client.contains(l)))
        {
            let _ = writeln!(out, "Host (client and server, one host): {line}");
        }
        return out;
    }
    for (side, said) in [("client", &client), ("server", &server)] {
        for line in said {
            let _ = writeln!(out, "Host ({side}): {line}");
        }
    }
    out
}

fn stream_summary(report: &Report, scale: Scale) -> String {
    let mut out = text::render_summary(report, scale, report.config.per_flow);
    let udp = report.config.protocol.traits().datagrams;
    // UDP has no autotuning: the granted buffers decide how much burst a receiver
    // absorbs, so UDP results always show them.
    // A copy has no flows of its own sockets to show (its summary says what it used).
    if (report.config.window.is_some() || udp) && report.copy.is_none() {
        let flow = report.flows.first();
        let _ = writeln!(
            out,
            "Socket buffers granted (send/receive): client {}/{}, server {}/{} bytes{}",
            flow.map_or(0, |f| f.client.sndbuf),
            flow.map_or(0, |f| f.client.rcvbuf),
            flow.map_or(0, |f| f.server.sndbuf),
            flow.map_or(0, |f| f.server.rcvbuf),
            if report.config.window.is_some() && !udp {
                "; kernel autotuning is off"
            } else {
                ""
            }
        );
    }
    out
}

/// The iterations' figures and the confidence interval of their mean.
fn render_repetition(repetition: &crate::model::Repetition, scale: Scale) -> String {
    let metric = repetition.metric;
    let e = &repetition.estimate;
    let mut out = String::new();
    let _ = writeln!(out, "- - - - - - - - - - - - - - - - - - - - - - - - -");
    let _ = writeln!(
        out,
        "{} iterations, {}: mean {} ± {} ({:.1}%) at {}% confidence",
        repetition.values.len(),
        metric.label(),
        metric.format(e.mean, scale),
        metric.format(e.half_width, scale),
        e.half_width_pct,
        e.level_pct,
    );
    let each: Vec<String> = repetition
        .values
        .iter()
        .map(|v| metric.format(*v, scale))
        .collect();
    let _ = writeln!(out, "Each: {}", each.join(", "));
    match (repetition.confidence, repetition.met) {
        (Some(asked), Some(true)) => {
            let _ = writeln!(
                out,
                "The interval is within the ±{}% asked.",
                asked.half_width_pct
            );
        }
        (Some(asked), _) => {
            let _ = writeln!(
                out,
                "warning: after {} iterations (the cap) the interval is still wider than the ±{}% asked",
                repetition.max_iterations, asked.half_width_pct
            );
        }
        (None, _) => {}
    }
    let _ = writeln!(
        out,
        "The figures above are iteration {}'s, the median.",
        repetition.representative + 1
    );
    out
}

/// A sweep: a row per point, its settings, its figures (averaged over its iterations)
/// and why it failed, if it did.
fn sweep_rows(sweep: &crate::sweep::SweepReport) -> Rows {
    let axes = sweep.ordered_axes();
    let figures = metrics(&sweep.config);
    let mut header: Vec<String> = axes
        .iter()
        .map(|a| format!("{:?}", a.param).to_lowercase())
        .collect();
    header.extend(figures.iter().map(|m| m.key.to_string()));
    header.extend([
        "half_width".to_string(),
        "iterations".into(),
        "error".into(),
    ]);
    let rows = sweep
        .points
        .iter()
        .map(|point| {
            let mut row: Vec<String> = axes
                .iter()
                .map(|a| {
                    point
                        .settings
                        .get(&a.param)
                        .map_or(String::new(), |v| match v {
                            serde_json::Value::Null => "auto".into(),
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                })
                .collect();
            match &point.report {
                Some(report) => {
                    row.extend(figures.iter().map(|m| {
                        let samples = crate::compare::samples(report, m);
                        if samples.is_empty() {
                            String::new()
                        } else {
                            number(samples.iter().sum::<f64>() / samples.len() as f64)
                        }
                    }));
                    let repetition = report.repetition.as_ref();
                    row.push(repetition.map_or(String::new(), |r| number(r.estimate.half_width)));
                    row.push(repetition.map_or(1, |r| r.values.len()).to_string());
                    row.push(String::new());
                }
                None => {
                    row.extend(figures.iter().map(|_| String::new()));
                    row.extend([String::new(), "0".into()]);
                    row.push(point.error.clone().unwrap_or_default());
                }
            }
            row
        })
        .collect();
    (header, rows)
}

/// A rate search: a row per trial.
fn trial_rows(search: &crate::model::FindMaxReport) -> Rows {
    let header = [
        "trial",
        "offered_bps",
        "verdict",
        "receiver_bps",
        "sender_bps",
        "receiver_pps",
        "loss_pct",
    ]
    .map(String::from)
    .to_vec();
    let rows = search
        .trials
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let udp = t.summary.udp.clone().unwrap_or_default();
            vec![
                (i + 1).to_string(),
                t.offered_bps.map_or("unpaced".into(), number),
                format!("{:?}", t.verdict).to_lowercase(),
                number(t.summary.receiver_bps),
                number(t.summary.sender_bps),
                number(udp.receiver_pps),
                number(udp.loss_pct),
            ]
        })
        .collect();
    (header, rows)
}

fn summary_row(config: &TestConfig, summary: &Summary) -> Vec<String> {
    metrics(config)
        .iter()
        .map(|m| (m.get)(summary).map_or(String::new(), number))
        .collect()
}

fn iterations(report: &Report) -> Rows {
    let mut header = vec!["iteration".to_string()];
    header.extend(metrics(&report.config).iter().map(|m| m.key.to_string()));
    let rows = report
        .repetition
        .iter()
        .flat_map(|r| r.iterations.iter())
        .enumerate()
        .map(|(i, iteration)| {
            let mut row = vec![(i + 1).to_string()];
            row.extend(summary_row(&iteration.config, &iteration.summary));
            row
        })
        .collect();
    (header, rows)
}

fn intervals(report: &Report) -> Rows {
    let rr = report.summary.rr.is_some();
    let udp = report.summary.udp.is_some();
    let mut header: Vec<String> = [
        "start",
        "end",
        "omitted",
        "receiver_bytes",
        "receiver_bps",
        "sender_bytes",
        "sender_bps",
        "retransmits",
    ]
    .map(String::from)
    .to_vec();
    if udp {
        header.extend(["received", "lost", "loss_pct", "jitter_ms"].map(String::from));
    }
    if rr {
        header.extend(
            [
                "transactions",
                "transactions_per_s",
                "p50_us",
                "p99_us",
                "max_us",
            ]
            .map(String::from),
        );
    }
    let rows = report
        .intervals
        .iter()
        .map(|i| {
            let mut row = vec![
                number(i.start),
                number(i.end),
                i.omitted.to_string(),
                i.receiver_bytes.to_string(),
                number(i.receiver_bps),
                i.sender_bytes.to_string(),
                number(i.sender_bps),
                i.retransmits.to_string(),
            ];
            if udp {
                let u = i.udp.clone().unwrap_or_default();
                row.extend([
                    u.counts.received.to_string(),
                    u.counts.lost.to_string(),
                    number(u.loss_pct),
                    number(u.counts.jitter_ms),
                ]);
            }
            if rr {
                let r = i.rr.unwrap_or_default();
                row.extend([
                    r.transactions.to_string(),
                    number(r.transactions_per_s),
                    number(r.p50_us),
                    number(r.p99_us),
                    number(r.max_us),
                ]);
            }
            row
        })
        .collect();
    (header, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PerSide;
    use linerate_model::observe::Observation;
    use linerate_model::{Direction, Protocol};

    fn observed(lines: &[&str], counters: &[(&str, u64)]) -> Option<Observation> {
        Some(Observation {
            unusual: lines.iter().map(|l| l.to_string()).collect(),
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..Observation::default()
        })
    }

    /// The "Host" block names whose counters it shows: one host's said once, another
    /// protocol's counters left out of the text (they were other processes').
    #[test]
    fn the_host_block_says_each_hosts_counters_once_and_only_the_tests_protocols() {
        let udp_line = "UdpRcvbufErrors: 2187165 (the host's count: every process's sockets)";
        let drops = "eth0: 12 receive drops";
        let mut report = crate::fixtures::report(crate::fixtures::config(Direction::Forward, 1));
        report.host.local.boot_id = "b1".into();
        report.host.remote.boot_id = "b1".into();
        let counters = [("UdpRcvbufErrors", 2_187_165)];
        report.observe = Some(PerSide {
            local: observed(&[udp_line, drops], &counters),
            remote: observed(&[udp_line, drops], &counters),
        });
        // A TCP test on one host: the drop once, the UDP counter not at all.
        assert_eq!(
            host_block(&report),
            "Host (client and server, one host): eth0: 12 receive drops\n"
        );
        // A UDP test: its protocol's counter, once, with its owner.
        report.config.protocol = Protocol::Udp;
        let block = host_block(&report);
        assert_eq!(block.matches("UdpRcvbufErrors").count(), 1, "{block}");
        assert!(block.contains("every process's sockets"), "{block}");
        // Two hosts (or two namespaces' counters): each end's own.
        report.host.remote.boot_id = "b2".into();
        let block = host_block(&report);
        assert!(block.contains("Host (client): UdpRcvbufErrors"), "{block}");
        assert!(block.contains("Host (server): UdpRcvbufErrors"), "{block}");
    }
}
