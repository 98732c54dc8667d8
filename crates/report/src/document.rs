//! A result document of any kind, as printed with `--json` and kept in the results
//! database: one test (possibly repeated), a sweep, or a `--find-max` search.
//!
//! The kind is told by the document's `test` key, so a stored run reads back as what it
//! was, and every consumer (`show`, `history`, `compare`, `export`, `report`) starts here.

use crate::model::{FindMaxReport, Headline, Report, Workload};
use crate::sweep::{SweepReport, SweepTable};
use crate::text::{self, TRIAL_HEADER};
use crate::units::Scale;
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    Test(Box<Report>),
    Sweep(Box<SweepReport>),
    FindMax(Box<FindMaxReport>),
    Profile(Box<crate::profile::ProfileReport>),
    Rpm(Box<crate::rpm::RpmReport>),
    Stamp(Box<crate::stamp::StampReport>),
    Trace(Box<crate::trace::TraceReport>),
    Multicast(Box<crate::multicast::MulticastReport>),
    Ndt7(Box<crate::ndt7::Ndt7Report>),
}

/// The `test` value of a sweep document, and of a `--find-max` search.
pub const SWEEP: &str = "sweep";
pub const FIND_MAX: &str = "udp_find_max";

impl Document {
    /// Reads a document from its JSON text.
    pub fn from_json(text: &str) -> Result<Document, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        Document::from_value(value)
    }

    pub fn from_value(value: serde_json::Value) -> Result<Document, serde_json::Error> {
        Ok(match value.get("test").and_then(|t| t.as_str()) {
            Some(SWEEP) => Document::Sweep(Box::new(serde_json::from_value(value)?)),
            Some(FIND_MAX) => Document::FindMax(Box::new(serde_json::from_value(value)?)),
            Some(crate::profile::PROFILE) => {
                Document::Profile(Box::new(serde_json::from_value(value)?))
            }
            Some(crate::rpm::RPM) => Document::Rpm(Box::new(serde_json::from_value(value)?)),
            Some(crate::stamp::STAMP) => Document::Stamp(Box::new(serde_json::from_value(value)?)),
            Some(crate::trace::TRACE) => Document::Trace(Box::new(serde_json::from_value(value)?)),
            Some(crate::multicast::MULTICAST) => {
                Document::Multicast(Box::new(serde_json::from_value(value)?))
            }
            Some(crate::ndt7::NDT7) => Document::Ndt7(Box::new(serde_json::from_value(value)?)),
            _ => Document::Test(Box::new(serde_json::from_value(value)?)),
        })
    }

    /// The document as `--json` prints it.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        match self {
            Document::Test(report) => serde_json::to_string_pretty(report),
            Document::Sweep(sweep) => serde_json::to_string_pretty(sweep),
            Document::FindMax(search) => serde_json::to_string_pretty(search),
            Document::Profile(run) => serde_json::to_string_pretty(run),
            Document::Rpm(run) => serde_json::to_string_pretty(run),
            Document::Stamp(run) => serde_json::to_string_pretty(run),
            Document::Trace(run) => serde_json::to_string_pretty(run),
            Document::Multicast(run) => serde_json::to_string_pretty(run),
            Document::Ndt7(run) => serde_json::to_string_pretty(run),
        }
    }

    /// The document as the results database keeps it: JSON without indentation (half
    /// the size of `--json`'s), read back alike.
    pub fn to_stored_json(&self) -> Result<String, serde_json::Error> {
        match self {
            Document::Test(report) => serde_json::to_string(report),
            Document::Sweep(sweep) => serde_json::to_string(sweep),
            Document::FindMax(search) => serde_json::to_string(search),
            Document::Profile(run) => serde_json::to_string(run),
            Document::Rpm(run) => serde_json::to_string(run),
            Document::Stamp(run) => serde_json::to_string(run),
            Document::Trace(run) => serde_json::to_string(run),
            Document::Multicast(run) => serde_json::to_string(run),
            Document::Ndt7(run) => serde_json::to_string(run),
        }
    }

    /// A copy without the bulk a mesh need not keep for every job (a profile run's
    /// histograms, per-thread figures, host counters and facts; see
    /// [`crate::profile::ProfileReport::compact`]). The other kinds are small already and
    /// come back whole.
    pub fn compact(&self) -> Document {
        match self {
            Document::Profile(run) => Document::Profile(Box::new(run.compact())),
            other => other.clone(),
        }
    }

    /// What a compact copy left out (empty for a whole document).
    pub fn not_kept(&self) -> &[String] {
        match self {
            Document::Profile(run) => &run.not_kept,
            _ => &[],
        }
    }

    /// "tcp_stream", "sweep", "udp_find_max".
    pub fn test(&self) -> &str {
        match self {
            Document::Test(report) => &report.test,
            Document::Sweep(sweep) => &sweep.test,
            Document::FindMax(search) => &search.test,
            Document::Profile(run) => &run.test,
            Document::Rpm(run) => &run.test,
            Document::Stamp(run) => &run.test,
            Document::Trace(run) => &run.test,
            Document::Multicast(run) => &run.test,
            Document::Ndt7(run) => &run.test,
        }
    }

    /// What was measured, for listings: "tcp_stream", "sweep of tcp_rr".
    pub fn kind(&self) -> String {
        match self {
            Document::Sweep(sweep) => format!("sweep of {}", sweep.sweep_of),
            Document::Profile(run) => format!("profile {}", run.config.name),
            other => other.test().to_string(),
        }
    }

    /// The emulated path the run crossed, in brief ("lab NAME: rtt +20 ms, loss 2% each
    /// way"), or "direct".
    pub fn path_brief(&self) -> String {
        let path = match self {
            Document::Test(report) => report.path(),
            Document::Sweep(sweep) => crate::model::path_of(&sweep.host),
            Document::FindMax(search) => crate::model::path_of(&search.host),
            Document::Profile(_) => None,
            Document::Rpm(run) => run.host.as_ref().and_then(|h| h.path.as_deref()),
            Document::Stamp(run) => run.host.as_ref().and_then(|h| h.path.as_deref()),
            Document::Trace(run) => run.host.as_ref().and_then(|h| h.path.as_deref()),
            Document::Multicast(_) | Document::Ndt7(_) => None,
        };
        path.map_or("direct".into(), |p| p.brief())
    }

    /// The server as the user named it, or "loopback".
    pub fn target(&self) -> &str {
        match self {
            Document::Test(report) => &report.config.target,
            Document::Sweep(sweep) => &sweep.config.target,
            Document::FindMax(search) => &search.config.target,
            Document::Profile(run) => &run.config.target,
            Document::Rpm(run) => &run.target,
            Document::Stamp(run) => &run.target,
            Document::Trace(run) => &run.target,
            Document::Multicast(run) => &run.target,
            Document::Ndt7(run) => &run.target,
        }
    }

    pub fn started_at(&self) -> f64 {
        match self {
            Document::Test(report) => report.started_at,
            Document::Sweep(sweep) => sweep.started_at,
            Document::FindMax(search) => search.started_at,
            Document::Profile(run) => run.started_at,
            Document::Rpm(run) => run.started_at,
            Document::Stamp(run) => run.started_at,
            Document::Trace(run) => run.started_at,
            Document::Multicast(run) => run.started_at,
            Document::Ndt7(run) => run.started_at,
        }
    }

    /// The figure a listing shows: a test's headline (the mean when repeated), a sweep's
    /// best point, a search's highest clean rate.
    pub fn headline(&self) -> Option<(Headline, f64)> {
        match self {
            Document::Test(report) => Some(report.headline()),
            Document::Sweep(sweep) => sweep
                .points
                .iter()
                .filter_map(|p| p.report.as_ref().map(|r| r.headline()))
                .max_by(|a, b| a.1.total_cmp(&b.1)),
            Document::FindMax(search) => search
                .result
                .as_ref()
                .map(|found| (Headline::ReceiverBps, found.receiver_bps)),
            Document::Profile(run) => Some(if run.summary.received_bytes > 0 {
                (Headline::ReceiverBps, run.summary.received_bps)
            } else {
                (Headline::TransactionsPerS, run.summary.iterations_per_s)
            }),
            Document::Rpm(run) => run.rpm.map(|rpm| (Headline::Rpm, rpm)),
            // Loss and delay have no one figure that ranks runs: listings use the text.
            Document::Ndt7(run) => run
                .subtests
                .first()
                .map(|s| (Headline::ReceiverBps, s.goodput_bps)),
            Document::Stamp(_) | Document::Trace(_) | Document::Multicast(_) => None,
        }
    }

    /// The headline in words: "9.41 Gbits/sec", "best 31.9 Gbits/sec of 6 points".
    pub fn headline_text(&self, scale: Scale) -> String {
        let figure = self.headline().map(|(h, v)| h.format(v, scale));
        match self {
            Document::Test(report) => {
                let figure = figure.unwrap_or_default();
                let text = match &report.repetition {
                    Some(r) => format!(
                        "{figure} ±{:.1}% ({} iterations)",
                        r.estimate.half_width_pct,
                        r.values.len()
                    ),
                    None => figure,
                };
                // A listing says which runs were cut short, so a comparison is chosen
                // knowing it.
                match &report.interrupted {
                    Some(cut) => format!("{text} (interrupted after {:.2} s)", cut.after_s),
                    None => text,
                }
            }
            Document::Sweep(sweep) => match figure {
                Some(figure) => format!("best {figure} of {} points", sweep.points.len()),
                None => format!("{} points, none measured", sweep.points.len()),
            },
            Document::FindMax(_) => figure.map_or("no clean rate".into(), |f| format!("{f} clean")),
            Document::Profile(run) => {
                let figure = figure.unwrap_or_default();
                if run.summary.complete {
                    figure
                } else {
                    format!("{figure} (incomplete)")
                }
            }
            Document::Rpm(run) => run.headline_text(),
            Document::Stamp(run) => run.headline_text(),
            Document::Trace(run) => run.headline_text(),
            Document::Multicast(run) => run.headline_text(),
            Document::Ndt7(run) => run.headline_text(),
        }
    }

    /// The end-of-run text: what the run printed after its live lines, and what `show`
    /// prints.
    pub fn render_text(&self, scale: Scale) -> String {
        match self {
            Document::Test(report) => render_test(report, scale),
            Document::Sweep(sweep) => {
                SweepTable::new(&sweep.config, &sweep.axes).render(sweep)
                    + &warnings(&sweep.warnings)
            }
            Document::FindMax(search) => {
                let mut out = format!("{TRIAL_HEADER}\n");
                for (index, trial) in search.trials.iter().enumerate() {
                    let _ = writeln!(out, "{}", text::trial_line(index + 1, trial, scale));
                }
                out + &text::render_find_max(search, scale)
            }
            Document::Profile(run) => run.render_text(scale),
            Document::Rpm(run) => run.render_text(),
            Document::Stamp(run) => run.render_text(),
            Document::Trace(run) => run.render_text(),
            Document::Multicast(run) => run.render_text(),
            Document::Ndt7(run) => run.render_text(),
        }
    }
}

impl Document {
    /// What is left to print after a run's live lines: a test's summary (its intervals
    /// and iterations were shown as they came), a search's answer after its trial lines,
    /// a sweep's warnings after its rows.
    /// The text as a run printed it, for `show`: a stream test's interval lines first
    /// (from the kept intervals, as the receiver counted them), then its summary.
    pub fn render_text_as_run(&self, scale: Scale) -> String {
        match self {
            Document::Test(report)
                if report.config.workload == Workload::Stream
                    && report.config.interval_s > 0.0
                    && !report.intervals.is_empty() =>
            {
                text::kept_interval_lines(report, scale) + &self.render_text(scale)
            }
            _ => self.render_text(scale),
        }
    }

    pub fn render_text_after_live(&self, scale: Scale) -> String {
        match self {
            Document::Sweep(sweep) => warnings(&sweep.warnings),
            Document::FindMax(search) => text::render_find_max(search, scale),
            Document::Test(_)
            | Document::Profile(_)
            | Document::Rpm(_)
            | Document::Stamp(_)
            | Document::Trace(_)
            | Document::Multicast(_)
            | Document::Ndt7(_) => self.render_text(scale),
        }
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
pub fn render_repetition(repetition: &crate::model::Repetition, scale: Scale) -> String {
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
