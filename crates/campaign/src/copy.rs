//! A copy as a result document like every other test's (`test: "copy"`): its goodput is
//! the headline, its rate and resent bytes over time are the intervals, and the copy's own
//! figures sit in `copy`. History, compare, show and the HTML report read it as they read
//! any run.

use std::collections::BTreeMap;
use std::time::SystemTime;

use linerate_report::document::Document;
use linerate_report::{
    CopyReport, Direction, IntervalReport, PerSide, Report, Summary, TestConfig,
};
use linerate_transfer::client::{CopySummary, Direction as CopyDirection};
use linerate_transfer::diagnosis::{diagnose, Diagnosis};
use linerate_transfer::outcome::FileOutcome;

/// Every file's figures summed, as one transfer; its wall time is the whole copy's,
/// set-up included.
pub fn total(summary: &CopySummary) -> FileOutcome {
    let mut total = FileOutcome::default();
    for file in &summary.files {
        total.add(&file.outcome);
    }
    total.wall_s = summary.wall_s.max(total.wall_s);
    total
}

/// The whole copy's diagnosis: its files' figures summed, as one transfer.
pub fn overall(summary: &CopySummary, fixed_rate: bool) -> Diagnosis {
    diagnose(
        &total(summary),
        summary.direction == CopyDirection::Push,
        fixed_rate,
    )
}

/// The copy's result document.
pub fn document(summary: &CopySummary, diagnosis: &Diagnosis, started_at: SystemTime) -> Document {
    let push = summary.direction == CopyDirection::Push;
    let total = total(summary);
    let (bytes, resumed, payload) = (total.bytes, total.resumed_bytes, total.payload_bytes);
    let (resent, lost) = (total.resent_bytes, total.lost_packets);
    let goodput_bps = (bytes - resumed) as f64 * 8.0 / summary.wall_s.max(1e-9);
    let (source, destination) = match summary.files.as_slice() {
        [one] => (one.source.clone(), one.destination.clone()),
        [first, ..] => (
            format!("{} (and {} more)", first.source, summary.files.len() - 1),
            format!(
                "{} (and {} more)",
                first.destination,
                summary.files.len() - 1
            ),
        ),
        [] => (String::new(), String::new()),
    };
    // The intervals: the sender's timeline (on whichever end sent; a pull's comes from
    // the server only as totals, so it has none).
    let mut intervals = Vec::new();
    let mut offset = 0.0;
    for file in &summary.files {
        let mut start = 0.0;
        for point in &file.outcome.timeline {
            let span = point.t_s - start;
            intervals.push(IntervalReport {
                start: offset + start,
                end: offset + point.t_s,
                receiver_bytes: (point.goodput_bps * span / 8.0) as u64,
                receiver_bps: point.goodput_bps,
                sender_bytes: ((point.goodput_bps + point.resent_bps) * span / 8.0) as u64,
                sender_bps: point.goodput_bps + point.resent_bps,
                retransmits: (point.resent_bps * span / 8.0 / f64::from(summary.block.max(1)))
                    as u64,
                ..IntervalReport::default()
            });
            start = point.t_s;
        }
        offset += file.outcome.wall_s;
    }
    let (sender_cpu, receiver_cpu) = (diagnosis.sender_cpu_s, diagnosis.receiver_cpu_s);
    let (sender_disk, receiver_disk) =
        (diagnosis.sender_disk_busy_s, diagnosis.receiver_disk_busy_s);
    let per_side = |sender: f64, receiver: f64| {
        if push {
            PerSide {
                local: sender,
                remote: receiver,
            }
        } else {
            PerSide {
                local: receiver,
                remote: sender,
            }
        }
    };
    let split: BTreeMap<String, f64> = [
        ("network", diagnosis.network_s),
        ("receiver", diagnosis.receiver_s),
        ("sender_disk", diagnosis.sender_disk_s),
        ("tail", diagnosis.tail_s),
        ("busy", diagnosis.busy_s),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let last = summary.files.last().map(|f| &f.outcome);
    let copy = CopyReport {
        direction: if push { "push" } else { "pull" }.into(),
        source,
        destination,
        files: summary.files.len() as u64,
        bytes,
        resumed_bytes: resumed,
        payload_bytes: payload,
        resent_bytes: resent,
        refetched_chunks: total.refetched_chunks,
        corrupted_datagrams: total.local.corrupted_datagrams + total.remote.corrupted_datagrams,
        root: match summary.files.as_slice() {
            [one] => Some(one.outcome.root.clone()),
            _ => None,
        },
        block: summary.block,
        chunk: summary.chunk,
        encrypted: summary.encrypted,
        wall_s: summary.wall_s,
        goodput_bps,
        limit: serde_json::to_value(diagnosis.limit)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        diagnosis: diagnosis.sentence.clone(),
        time_split_s: split,
        cpu_s: per_side(sender_cpu, receiver_cpu),
        disk_busy_s: per_side(sender_disk, receiver_disk),
        min_rtt_ms: last.and_then(|o| o.min_rtt_ms),
        bottleneck_bps: last.and_then(|o| o.bottleneck_bps),
        random_loss: last.and_then(|o| o.random_loss),
    };
    let config = TestConfig {
        quic: None,
        tls: None,
        protocol: linerate_model::Protocol::Udp,
        target: summary.server.clone(),
        port: summary
            .server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
        direction: if push {
            Direction::Forward
        } else {
            Direction::Reverse
        },
        parallel: 1,
        threads: 1,
        time_s: summary.wall_s,
        omit_s: 0.0,
        interval_s: 0.1,
        length: u64::from(summary.block),
        window: None,
        mss: None,
        nodelay: false,
        congestion: None,
        rate_bps: None,
        pps: None,
        gso: false,
        gro: false,
        per_flow: false,
        connect_timeout_s: 10.0,
        workload: Default::default(),
        rr: None,
        observe: true,
    };
    let summary_figures = Summary {
        duration_s: summary.wall_s,
        receiver_bytes: bytes - resumed,
        receiver_bps: goodput_bps,
        sender_bytes: payload,
        sender_bps: payload as f64 * 8.0 / summary.wall_s.max(1e-9),
        retransmits: lost,
        receiver_bytes_total: bytes - resumed,
        sender_bytes_total: payload,
        flows: 1,
        ..Summary::default()
    };
    let report = Report {
        tool: format!("linerate {}", env!("CARGO_PKG_VERSION")),
        test: "copy".into(),
        started_at: started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        config,
        host: PerSide {
            local: linerate_hostinfo::host_facts(),
            remote: Default::default(),
        },
        intervals,
        flows: Vec::new(),
        summary: summary_figures,
        warnings: Vec::new(),
        repetition: None,
        copy: Some(copy),
        observe: None,
    };
    Document::Test(Box::new(report))
}
