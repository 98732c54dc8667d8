//! CSV forms of a result document, one row per measured thing: per interval for a test,
//! per iteration for a repeated test, per point for a sweep, per trial for a search.

use crate::compare::metrics;
use crate::document::Document;
use crate::model::{Report, Summary, TestConfig};

type Rows = (Vec<String>, Vec<Vec<String>>);

fn number(value: f64) -> String {
    // Shortest text that reads back as the same number.
    format!("{value}")
}

/// The document as CSV text with a header row.
pub fn csv(document: &Document) -> Result<String, csv::Error> {
    let (header, rows) = match document {
        Document::Profile(run) => profile_rows(run),
        Document::Test(report) => match &report.repetition {
            Some(_) => iterations(report),
            None => intervals(report),
        },
        Document::Sweep(sweep) => sweep_rows(sweep),
        Document::FindMax(search) => trial_rows(search),
        Document::Rpm(run) => run.rows(),
        Document::Stamp(run) => run.rows(),
        Document::Trace(run) => run.rows(),
        Document::Multicast(run) => run.rows(),
        Document::Ndt7(run) => run.rows(),
    };
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(&header)?;
    for row in rows {
        writer.write_record(&row)?;
    }
    let bytes = writer.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
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

/// One row per operation of every transaction of every group, then one per transaction
/// (its `op` empty).
fn profile_rows(run: &crate::profile::ProfileReport) -> (Vec<String>, Vec<Vec<String>>) {
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
