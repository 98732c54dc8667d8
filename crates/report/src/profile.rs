//! The result of a profile run (`linerate run`): figures per operation and per transaction,
//! per thread, per group, per host and in total (docs/results.md, "Profile runs").
//!
//! Bytes are counted where they arrive: a group's writes are counted by the peer that
//! read them, its reads by the group itself. Latencies are per execution: one operation
//! (all `count` messages of it) or one iteration of a transaction.

use crate::model::Headline;
use crate::result_kind::{number, ResultKind, Rows};
use crate::units::{format_bytes, format_count, format_rate, Scale};
use crate::HostFacts;
use linerate_model::measure::Headline as MeshHeadline;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The `test` value of a profile run's document.
pub const PROFILE: &str = "profile";

pub use linerate_model::profile::{GroupResult, OpFigures, ThreadFigures, TransactionFigures};

/// One host's share of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostResult {
    /// The agent's address, or "local" for the controller.
    pub host: String,
    pub groups: Vec<String>,
    pub received_bytes: u64,
    /// `received_bytes` over the run's duration: the per-host figures sum to the total.
    pub received_bps: f64,
    pub iterations: u64,
    /// The agent's clock minus the controller's, as estimated before the start.
    pub clock_offset_ms: f64,
    /// The round trip of the best clock sample (the offset's uncertainty is half of it).
    pub clock_rtt_ms: f64,
    /// When the host released its first thread, on the controller's clock, after the
    /// announced start.
    pub start_delay_ms: f64,
    /// Why the host's part did not finish, if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<HostFacts>,
    /// The host's own counters over its part of the run (docs/observe.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe: Option<linerate_model::observe::Observation>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    /// From the synchronized start to the last group's end.
    pub duration_s: f64,
    pub received_bytes: u64,
    pub sent_bytes: u64,
    /// Received bytes over the duration: the sum of the hosts' `received_bps`.
    pub received_bps: f64,
    pub iterations: u64,
    pub iterations_per_s: f64,
    pub errors: u64,
    /// The spread of the hosts' achieved start times (latest minus earliest); a host
    /// starts when its first thread is released.
    pub start_skew_ms: f64,
    /// False when a host was lost or a group did not finish: the figures are partial.
    pub complete: bool,
}

/// What was run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileConfig {
    /// The hosts that took part, or "loopback".
    pub target: String,
    pub name: String,
    /// The profile file as given.
    pub source: String,
    /// "toml" or "uperf-xml".
    pub format: String,
    /// The `--set` values.
    pub set: BTreeMap<String, String>,
    /// The resolved profile (every reference filled).
    pub profile: serde_json::Value,
}

/// The document of a profile run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    /// Always "profile".
    pub test: String,
    pub started_at: f64,
    pub config: ProfileConfig,
    pub summary: ProfileSummary,
    pub hosts: Vec<HostResult>,
    pub groups: Vec<GroupResult>,
    /// Why the run is partial, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What a compact copy (a mesh job's, as stored) left out of the run's detail; empty
    /// for a whole document.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_kept: Vec<String>,
}

impl ProfileReport {
    /// A copy with the run's figures (every repeated transaction's and its operations'
    /// percentiles, the groups' and hosts' totals, the clock figures, failures and
    /// warnings) and without its bulk: the latency histograms' buckets, the one-off
    /// transactions around the timed one, the per-thread figures, the hosts' own
    /// counters and facts, and the resolved profile (the mesh file says it).
    /// What was left out is named in `not_kept`, for `show` to say.
    pub fn compact(&self) -> ProfileReport {
        let mut copy = self.clone();
        let mut not_kept = Vec::new();
        let mut note = |what: &str, dropped: bool| {
            if dropped && !not_kept.iter().any(|n| n == what) {
                not_kept.push(what.to_string());
            }
        };
        for group in &mut copy.groups {
            // The one-off transactions around the timed one (a connect before, a
            // disconnect after) go, unless they failed or nothing else ran.
            let repeated =
                |t: &linerate_model::profile::TransactionFigures| t.iterations > 1 || t.errors > 0;
            if group.transactions.iter().any(repeated) {
                let before = group.transactions.len();
                group.transactions.retain(repeated);
                note(
                    "the one-off transactions (a connect before, a disconnect after)",
                    group.transactions.len() < before,
                );
            }
            for t in &mut group.transactions {
                note("latency histograms", !t.latency_us.histogram.is_empty());
                t.latency_us.histogram.clear();
                for op in &mut t.ops {
                    note("latency histograms", !op.latency_us.histogram.is_empty());
                    op.latency_us.histogram.clear();
                }
            }
            note("per-thread figures", !group.per_thread.is_empty());
            group.per_thread.clear();
        }
        for host in &mut copy.hosts {
            note(
                "the hosts' counters (observe)",
                host.observe.take().is_some(),
            );
            note("the hosts' facts", host.facts.take().is_some());
        }
        note("the resolved profile", !copy.config.profile.is_null());
        copy.config.profile = serde_json::Value::Null;
        copy.not_kept.extend(not_kept);
        copy
    }

    /// Totals from the groups and hosts; `duration_s` is the run's length.
    pub fn summarize(&mut self, skew_ms: f64) {
        let duration = self.groups.iter().map(|g| g.elapsed_s).fold(0.0, f64::max);
        let per_second = |n: f64| if duration > 0.0 { n / duration } else { 0.0 };
        for host in &mut self.hosts {
            let groups: Vec<&GroupResult> =
                self.groups.iter().filter(|g| g.host == host.host).collect();
            host.groups = groups.iter().map(|g| g.name.clone()).collect();
            host.received_bytes = groups.iter().map(|g| g.received_bytes).sum();
            host.iterations = groups.iter().map(|g| g.iterations).sum();
            host.received_bps = per_second(host.received_bytes as f64 * 8.0);
        }
        let received: u64 = self.groups.iter().map(|g| g.received_bytes).sum();
        let iterations: u64 = self.groups.iter().map(|g| g.iterations).sum();
        self.summary = ProfileSummary {
            duration_s: duration,
            received_bytes: received,
            sent_bytes: self.groups.iter().map(|g| g.sent_bytes).sum(),
            received_bps: self.hosts.iter().map(|h| h.received_bps).sum(),
            iterations,
            iterations_per_s: per_second(iterations as f64),
            errors: self.groups.iter().map(|g| g.errors).sum(),
            start_skew_ms: skew_ms,
            complete: self.incomplete.is_none(),
        };
    }
}

/// One group's lines: its totals, each transaction and its operations, its failures.
fn group_text(group: &GroupResult, scale: Scale) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nGroup '{}' on {}: {} thread(s), {} received, {} iterations, {} errors, {:.2} s",
        group.name,
        group.host,
        group.threads,
        format_bytes(group.received_bytes as f64, scale),
        group.iterations,
        group.errors,
        group.elapsed_s
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>14} {:>16} {:>10} {:>10} {:>10}",
        "txn/op", "count", "bytes", "rate", "p50 us", "p99 us", "max us"
    );
    for (index, txn) in group.transactions.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:<16} {:>10} {:>14} {:>16} {:>10.1} {:>10.1} {:>10.1}",
            format!("txn {}", index + 1),
            txn.iterations,
            format_bytes(txn.received_bytes as f64, scale),
            format!("{}/s", format_count(txn.iterations_per_s)),
            txn.latency_us.p50,
            txn.latency_us.p99,
            txn.latency_us.max
        );
        for op in &txn.ops {
            out.push_str(&op_line(op, txn, scale));
        }
    }
    for failure in &group.failures {
        let _ = writeln!(out, "  failure: {failure}");
    }
    let failed: Vec<&ThreadFigures> = group
        .per_thread
        .iter()
        .filter(|t| t.failure.is_some())
        .collect();
    if let Some(first) = failed.first() {
        let _ = writeln!(
            out,
            "  {} thread(s) stopped early; thread {}: {}",
            failed.len(),
            first.thread,
            first.failure.as_deref().unwrap_or_default()
        );
    }
    out
}

/// One operation's line under its transaction.
fn op_line(op: &OpFigures, txn: &TransactionFigures, scale: Scale) -> String {
    let mut out = String::new();
    let name = match &op.conn {
        Some(conn) => format!("  {} [{conn}]", op.op),
        None => format!("  {}", op.op),
    };
    // Counted where the bytes arrived: the peer for a write, here for a read.
    let moved = if matches!(op.op.as_str(), "write" | "sendto") {
        op.peer_bytes
    } else {
        op.bytes
    };
    let rate = if txn.elapsed_s > 0.0 && moved > 0 {
        format_rate(moved as f64 * 8.0 / txn.elapsed_s, scale)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>14} {:>16} {:>10.1} {:>10.1} {:>10.1}{}",
        name,
        op.count,
        if moved > 0 {
            format_bytes(moved as f64, scale)
        } else {
            String::new()
        },
        rate,
        op.latency_us.p50,
        op.latency_us.p99,
        op.latency_us.max,
        if op.errors > 0 {
            format!("  {} errors", op.errors)
        } else {
            String::new()
        }
    );
    out
}

/// Profile runs side by side: the totals, then each transaction's rate and latency, with
/// the change against the first run. Profile runs are not repeated, so no significance is
/// claimed.
pub fn compare_text(runs: &[(i64, &ProfileReport)]) -> String {
    let mut figures: Vec<(String, Vec<Option<f64>>)> = vec![
        (
            "received Mbit/s".into(),
            runs.iter()
                .map(|(_, r)| Some(r.summary.received_bps / 1e6))
                .collect(),
        ),
        (
            "iterations/s".into(),
            runs.iter()
                .map(|(_, r)| Some(r.summary.iterations_per_s))
                .collect(),
        ),
        (
            "errors".into(),
            runs.iter()
                .map(|(_, r)| Some(r.summary.errors as f64))
                .collect(),
        ),
    ];
    let first = runs.first().map(|(_, r)| *r);
    for group in first.map(|r| r.groups.as_slice()).unwrap_or_default() {
        for (ti, _) in group.transactions.iter().enumerate() {
            let pick = |f: fn(&TransactionFigures) -> f64| -> Vec<Option<f64>> {
                runs.iter()
                    .map(|(_, r)| {
                        r.groups
                            .iter()
                            .find(|g| g.name == group.name)
                            .and_then(|g| g.transactions.get(ti))
                            .map(f)
                    })
                    .collect()
            };
            let label = format!("{} txn {}", group.name, ti + 1);
            figures.push((
                format!("{label} iterations/s"),
                pick(|t| t.iterations_per_s),
            ));
            figures.push((format!("{label} p50 us"), pick(|t| t.latency_us.p50)));
            figures.push((format!("{label} p99 us"), pick(|t| t.latency_us.p99)));
        }
    }
    let ids: Vec<i64> = runs.iter().map(|(id, _)| *id).collect();
    let table = crate::text::side_by_side(&ids, figures, 2);
    format!("{table}\nProfile runs ran once each: differences are not judged for significance.\n")
}

impl ResultKind for ProfileReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn kind(&self) -> String {
        format!("profile {}", self.config.name)
    }

    fn target(&self) -> &str {
        &self.config.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    /// The goodput where the profile moved data, else its transactions a second.
    fn headline(&self) -> Option<(Headline, f64)> {
        Some(if self.summary.received_bytes > 0 {
            (Headline::ReceiverBps, self.summary.received_bps)
        } else {
            (Headline::TransactionsPerS, self.summary.iterations_per_s)
        })
    }

    fn headline_text(&self, scale: Scale) -> String {
        let figure = self
            .headline()
            .map(|(h, v)| h.format(v, scale))
            .unwrap_or_default();
        if self.summary.complete {
            figure
        } else {
            format!("{figure} (incomplete)")
        }
    }

    fn mesh_figure(&self, which: MeshHeadline) -> (Option<f64>, String) {
        match which {
            MeshHeadline::Goodput => (
                Some(self.summary.received_bps),
                format_rate(self.summary.received_bps, Scale::Adaptive),
            ),
            MeshHeadline::Transaction { index, label } => {
                let timed = self
                    .groups
                    .first()
                    .and_then(|g| g.transactions.get(index))
                    .map(|t| (t.latency_us.p50, t.iterations_per_s));
                match timed {
                    Some((p50, rate)) => (
                        Some(p50 / 1e6),
                        format!(
                            "{label} p50 {} ({rate:.0}/s)",
                            linerate_model::units::format_micros(p50)
                        ),
                    ),
                    None => (None, String::new()),
                }
            }
            MeshHeadline::Responsiveness
            | MeshHeadline::Loss
            | MeshHeadline::Hops
            | MeshHeadline::Mos => (None, String::new()),
        }
    }

    /// The end-of-run text.
    fn render_text(&self, scale: Scale) -> String {
        let mut out = String::new();
        let s = &self.summary;
        let _ = writeln!(
            out,
            "Profile '{}' ({}), {} group(s) on {} host(s), {:.2} s",
            self.config.name,
            self.config.format,
            self.groups.len(),
            self.hosts.len(),
            s.duration_s
        );
        for group in &self.groups {
            out.push_str(&group_text(group, scale));
        }
        let _ = writeln!(
            out,
            "\n{:<22} {:>14} {:>16} {:>12} {:>10} {:>10} {:>10}",
            "host", "received", "goodput", "iterations", "offset ms", "rtt ms", "start ms"
        );
        for host in &self.hosts {
            let _ = writeln!(
                out,
                "{:<22} {:>14} {:>16} {:>12} {:>10.3} {:>10.3} {:>10.3}{}",
                host.host,
                format_bytes(host.received_bytes as f64, scale),
                format_rate(host.received_bps, scale),
                host.iterations,
                host.clock_offset_ms,
                host.clock_rtt_ms,
                host.start_delay_ms,
                host.failure
                    .as_ref()
                    .map_or(String::new(), |f| format!("  LOST: {f}"))
            );
        }
        let _ = writeln!(
            out,
            "{:<22} {:>14} {:>16} {:>12}",
            "total",
            format_bytes(s.received_bytes as f64, scale),
            format_rate(s.received_bps, scale),
            s.iterations
        );
        let _ = writeln!(
            out,
            "\n{} iterations/s, {} errors, start skew {:.3} ms",
            format_count(s.iterations_per_s),
            s.errors,
            s.start_skew_ms
        );
        if let Some(why) = &self.incomplete {
            let _ = writeln!(out, "INCOMPLETE: {why}");
        }
        for host in &self.hosts {
            for line in host.observe.iter().flat_map(|o| &o.unusual) {
                let _ = writeln!(out, "Host ({}): {line}", host.host);
            }
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        if !self.not_kept.is_empty() {
            let _ = writeln!(
                out,
                "Not kept (a mesh job's compact result; [store] detail in the mesh file keeps them): {}",
                self.not_kept.join(", ")
            );
        }
        out
    }

    fn rows(&self) -> Rows {
        profile_rows(self)
    }
}

/// One row per operation of every transaction of every group, then one per transaction
/// (its `op` empty).
fn profile_rows(run: &ProfileReport) -> Rows {
    let header = [
        "group",
        "host",
        "transaction",
        "op",
        "conn",
        "count",
        "bytes",
        "peer_bytes",
        "errors",
        "p50_us",
        "p99_us",
        "max_us",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = Vec::new();
    for group in &run.groups {
        for (index, txn) in group.transactions.iter().enumerate() {
            rows.push(vec![
                group.name.clone(),
                group.host.clone(),
                (index + 1).to_string(),
                String::new(),
                String::new(),
                txn.iterations.to_string(),
                txn.received_bytes.to_string(),
                String::new(),
                txn.errors.to_string(),
                number(txn.latency_us.p50),
                number(txn.latency_us.p99),
                number(txn.latency_us.max),
            ]);
            for op in &txn.ops {
                rows.push(vec![
                    group.name.clone(),
                    group.host.clone(),
                    (index + 1).to_string(),
                    op.op.clone(),
                    op.conn.clone().unwrap_or_default(),
                    op.count.to_string(),
                    op.bytes.to_string(),
                    op.peer_bytes.to_string(),
                    op.errors.to_string(),
                    number(op.latency_us.p50),
                    number(op.latency_us.p99),
                    number(op.latency_us.max),
                ]);
            }
        }
    }
    (header, rows)
}
