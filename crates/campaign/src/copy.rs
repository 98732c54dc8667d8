//! A copy as a result document like every other test's (`test: "copy"`): its goodput is
//! the headline, its rate and resent bytes over time are the intervals, and the copy's own
//! figures sit in `copy`. History, compare, show and the HTML report read it as they read
//! any run.

use linerate_model::clock::UnixTime;
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

/// The copy's result document; `host` is the server as the user named it.
pub fn document(
    summary: &CopySummary,
    host: &str,
    diagnosis: &Diagnosis,
    started_at: SystemTime,
) -> Document {
    let total = total(summary);
    let moved = total.bytes - total.resumed_bytes;
    let wall = summary.wall_s.max(1e-9);
    let summary_figures = Summary {
        duration_s: summary.wall_s,
        receiver_bytes: moved,
        receiver_bps: moved as f64 * 8.0 / wall,
        sender_bytes: total.payload_bytes,
        sender_bps: total.payload_bytes as f64 * 8.0 / wall,
        retransmits: total.lost_packets,
        receiver_bytes_total: moved,
        sender_bytes_total: total.payload_bytes,
        flows: 1,
        ..Summary::default()
    };
    let report = Report {
        tool: format!("linerate {}", env!("CARGO_PKG_VERSION")),
        test: "copy".into(),
        started_at: UnixTime::from_system(started_at).seconds(),
        config: config_of(summary, host),
        host: PerSide {
            local: linerate_hostinfo::host_facts(),
            remote: Default::default(),
        },
        intervals: intervals(summary),
        flows: Vec::new(),
        summary: summary_figures,
        warnings: Vec::new(),
        repetition: None,
        copy: Some(copy_report(summary, &total, diagnosis)),
        observe: None,
        interrupted: None,
    };
    Document::Test(Box::new(report))
}

/// "first (and N more)" for a copy of several files.
fn names(summary: &CopySummary) -> (String, String) {
    match summary.files.as_slice() {
        [one] => (one.source.clone(), one.destination.clone()),
        [first, ..] => {
            let more = summary.files.len() - 1;
            (
                format!("{} (and {more} more)", first.source),
                format!("{} (and {more} more)", first.destination),
            )
        }
        [] => (String::new(), String::new()),
    }
}

/// The intervals: the sender's timeline, file after file (on whichever end sent; a
/// pull's comes from the server only as totals, so it has none).
fn intervals(summary: &CopySummary) -> Vec<IntervalReport> {
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
    intervals
}

/// The copy's own figures: what moved, what limited it, where its time went.
fn copy_report(summary: &CopySummary, total: &FileOutcome, diagnosis: &Diagnosis) -> CopyReport {
    let push = summary.direction == CopyDirection::Push;
    // Sender and receiver figures as this end (local) and the server (remote) saw them.
    let per_side = |sender: f64, receiver: f64| {
        let (local, remote) = if push {
            (sender, receiver)
        } else {
            (receiver, sender)
        };
        PerSide { local, remote }
    };
    let time_split_s: BTreeMap<String, f64> = [
        ("network", diagnosis.network_s),
        ("receiver", diagnosis.receiver_s),
        ("sender_disk", diagnosis.sender_disk_s),
        ("tail", diagnosis.tail_s),
        ("busy", diagnosis.busy_s),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let (source, destination) = names(summary);
    let last = summary.files.last().map(|f| &f.outcome);
    CopyReport {
        direction: if push { "push" } else { "pull" }.into(),
        source,
        destination,
        files: summary.files.len() as u64,
        bytes: total.bytes,
        resumed_bytes: total.resumed_bytes,
        payload_bytes: total.payload_bytes,
        resent_bytes: total.resent_bytes,
        tail_copy_bytes: total.tail_copy_bytes,
        refetched_chunks: total.refetched_chunks,
        resume_checked_chunks: total.local.resume_checked_chunks
            + total.remote.resume_checked_chunks,
        resume_damaged_chunks: total.local.resume_damaged_chunks
            + total.remote.resume_damaged_chunks,
        resume_check_s: total.local.resume_check_s + total.remote.resume_check_s,
        corrupted_datagrams: total.local.corrupted_datagrams + total.remote.corrupted_datagrams,
        rcvbuf_errors: total.local.rcvbuf_errors + total.remote.rcvbuf_errors,
        root: match summary.files.as_slice() {
            [one] => Some(one.outcome.root.clone()),
            _ => None,
        },
        block: summary.block,
        chunk: summary.chunk,
        encrypted: summary.encrypted,
        lanes: (summary.lanes > 1).then_some(summary.lanes),
        wall_s: summary.wall_s,
        goodput_bps: (total.bytes - total.resumed_bytes) as f64 * 8.0 / summary.wall_s.max(1e-9),
        limit: serde_json::to_value(diagnosis.limit)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        diagnosis: diagnosis.sentence.clone(),
        time_split_s,
        cpu_s: per_side(diagnosis.sender_cpu_s, diagnosis.receiver_cpu_s),
        disk_busy_s: per_side(diagnosis.sender_disk_busy_s, diagnosis.receiver_disk_busy_s),
        min_rtt_ms: last.and_then(|o| o.min_rtt_ms),
        bottleneck_bps: last.and_then(|o| o.bottleneck_bps),
        random_loss: last.and_then(|o| o.random_loss),
        resumed_from_bps: summary
            .files
            .first()
            .and_then(|f| f.outcome.resumed_from_bps),
        start_estimate: summary
            .files
            .first()
            .and_then(|f| f.outcome.start_estimate)
            .map(|t| linerate_report::model::CopyStartEstimate {
                bps: t.bps,
                after_ms: t.after_ms,
                jumped_to_bps: t.jumped_to_bps,
                sent_bps: t.sent_bps,
            }),
        ecn: total.ecn.map(|e| linerate_report::model::CopyEcn {
            ce_marked: e.ce_marked,
            ce_rounds: e.ce_rounds,
        }),
    }
}

/// The configuration a copy is stored under: a UDP flow from the sender, its block as
/// the length, its wall time as the test's, the server as the user named it.
fn config_of(summary: &CopySummary, host: &str) -> TestConfig {
    let push = summary.direction == CopyDirection::Push;
    TestConfig {
        quic: None,
        tls: None,
        source: None,
        marks: None,
        call: None,
        video: None,
        video_back: None,
        qoo: None,
        protocol: linerate_model::Protocol::Udp,
        target: host.to_string(),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_transfer::client::CopiedFile;
    use linerate_transfer::outcome::TimelinePoint;

    fn file(bytes: u64, lost: u64, wait_s: f64) -> CopiedFile {
        let mut outcome = FileOutcome {
            bytes,
            payload_bytes: bytes + 1000,
            resent_bytes: 1000,
            lost_packets: lost,
            wall_s: 1.0,
            timeline: vec![TimelinePoint {
                t_s: 0.5,
                goodput_bps: 8e6,
                resent_bps: 0.0,
            }],
            ..FileOutcome::default()
        };
        outcome.local.runqueue_wait_s = wait_s;
        CopiedFile {
            source: format!("f{bytes}"),
            destination: format!("d/f{bytes}"),
            outcome,
        }
    }

    fn summary() -> CopySummary {
        CopySummary {
            direction: CopyDirection::Push,
            server: "192.0.2.1:5201".into(),
            block: 1400,
            chunk: 1 << 20,
            wall_s: 2.5,
            encrypted: false,
            lanes: 1,
            files: vec![file(3_000_000, 5, 0.25), file(2_000_000, 7, 0.5)],
        }
    }

    #[test]
    fn every_field_of_every_file_adds_up() {
        let total = total(&summary());
        assert_eq!(total.bytes, 5_000_000);
        assert_eq!(total.lost_packets, 12);
        assert_eq!(total.local.runqueue_wait_s, 0.75);
        // The copy's wall time (set-up included) over the files' own.
        assert_eq!(total.wall_s, 2.5);
    }

    #[test]
    fn a_copy_is_a_test_document_with_its_goodput_as_the_headline() {
        let summary = summary();
        let diagnosis = overall(&summary, false);
        let Document::Test(report) =
            document(&summary, "server1", &diagnosis, SystemTime::UNIX_EPOCH)
        else {
            panic!("a copy is a test document");
        };
        assert_eq!(report.test, "copy");
        assert_eq!(report.config.port, 5201);
        assert_eq!(report.config.target, "server1");
        assert_eq!(report.summary.receiver_bytes, 5_000_000);
        assert_eq!(report.summary.receiver_bps, 5_000_000.0 * 8.0 / 2.5);
        assert_eq!(report.summary.retransmits, 12);
        // One interval per timeline point, the second file's after the first's.
        let starts: Vec<f64> = report.intervals.iter().map(|i| i.start).collect();
        assert_eq!(starts, [0.0, 1.0]);
        let copy = report.copy.unwrap();
        assert_eq!(copy.files, 2);
        assert_eq!(copy.source, "f3000000 (and 1 more)");
        assert_eq!(copy.direction, "push");
        assert!(copy.root.is_none());
    }
}
