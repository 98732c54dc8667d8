//! Request/response reports: merging the two sides of an `rr` or `crr` test, and their
//! text.
//!
//! The requesting side (the client) is the one that can time a transaction, so every
//! transaction count, rate and round trip comes from it; the responding side adds what it
//! received and its CPU. Bytes are counted where they arrive, in both directions:
//! responses at the client, requests at the server.

use crate::latency::LatencySummary;
use crate::model::*;
use crate::sides::{observed, per_second, side_warnings, socket_facts};
use crate::units::format_count;
use std::fmt::Write;

/// The column header above request/response interval lines.
pub const RR_INTERVAL_HEADER: &str =
    "[ ID] Interval           Transactions       Trans/s     p50 RTT     p99 RTT     max RTT";

/// Builds the report of a request/response test.
pub(crate) fn assemble(
    tool: &str,
    started_at: f64,
    config: TestConfig,
    local: SideResult,
    remote: SideResult,
) -> Report {
    let crr = config.workload == Workload::Crr;
    let intervals = local
        .intervals
        .iter()
        .zip(&remote.intervals)
        .map(|(l, r)| IntervalReport {
            start: l.start,
            end: l.end,
            omitted: l.omitted,
            receiver_bytes: l.received_bytes + r.received_bytes,
            receiver_bps: l.received_bps + r.received_bps,
            rr: l.rr,
            ..Default::default()
        })
        .collect();
    let flows: Vec<FlowReport> = local
        .flows
        .iter()
        .map(|client| {
            // crr connections carry no flow id, so the server's counts are not per flow.
            let server = (!crr)
                .then(|| remote.flows.iter().find(|f| f.id == client.id))
                .flatten();
            let error = client
                .error
                .clone()
                .map(|e| format!("client: {e}"))
                .or_else(|| server.and_then(|f| f.error.clone().map(|e| format!("server: {e}"))));
            FlowReport {
                id: client.id,
                direction: Some(Direction::Forward),
                receiver_bytes: client.window_bytes + server.map_or(0, |f| f.window_bytes),
                receiver_bps: client.window_bps() + server.map_or(0.0, FlowSide::window_bps),
                receiver_bytes_total: client.bytes_total + server.map_or(0, |f| f.bytes_total),
                mss: client.mss,
                rtt_us: client.rtt_us,
                client: socket_facts(Some(client)),
                server: socket_facts(server),
                error,
                transactions: Some(client.transactions),
                transactions_per_s: Some(per_second(client.transactions, client.window_s)),
                ..Default::default()
            }
        })
        .collect();
    let mut summary = summarize(&config, &flows, &local, &remote);
    summary.crypto = crate::crypto::summarize(&local, &remote, &summary);
    if let (Some(crypto), Some(rr)) = (summary.crypto.as_mut(), summary.rr.as_ref()) {
        crypto.crypto_us_per_transaction = Some(crate::crypto::per_transaction(
            &local,
            &remote,
            rr.transactions,
        ));
    }
    let mut warnings = side_warnings(&local, &remote);
    warnings.extend(summary.cpu_basis.as_ref().and_then(CpuBasis::warning));
    if let Some(rr) = &summary.rr {
        warnings.extend(shortfalls(&config, rr));
    }
    if crr {
        // The server's failures are not any one flow's: count them as a warning.
        for flow in remote.flows.iter().filter_map(|f| f.error.as_ref()) {
            warnings.push(format!("server: {flow}"));
        }
    }
    summary.flows_failed = flows.iter().filter(|f| f.error.is_some()).count() as u32;
    let observe = observed(&local, &remote);
    Report {
        tool: tool.to_string(),
        test: config.test_name(),
        started_at,
        config,
        host: PerSide {
            local: local.host,
            remote: remote.host,
        },
        intervals,
        flows,
        summary,
        warnings,
        repetition: None,
        copy: None,
        observe,
        interrupted: None,
    }
}

fn summarize(
    config: &TestConfig,
    flows: &[FlowReport],
    local: &SideResult,
    remote: &SideResult,
) -> Summary {
    let rr_config = config.rr.clone().unwrap_or(RrConfig {
        request: 1,
        response: 1,
        outstanding: 1,
        rate_tps: None,
        busy_poll_us: None,
        cpus: Vec::new(),
        load: 0,
    });
    let side = local.rr.clone().unwrap_or_default();
    let windows: Vec<f64> = local.flows.iter().map(|f| f.window_s).collect();
    let duration_s = if windows.is_empty() {
        0.0
    } else {
        windows.iter().sum::<f64>() / windows.len() as f64
    };
    let transactions: u64 = flows.iter().filter_map(|f| f.transactions).sum();
    let transactions_per_s: f64 = flows.iter().filter_map(|f| f.transactions_per_s).sum();
    let working = flows.iter().filter(|f| f.error.is_none()).count().max(1) as f64;
    let per_flow = transactions_per_s / working;
    let receiver_bytes: u64 = local
        .flows
        .iter()
        .chain(&remote.flows)
        .map(|f| f.window_bytes)
        .sum();
    let receiver_bps: f64 = local
        .flows
        .iter()
        .chain(&remote.flows)
        .map(FlowSide::window_bps)
        .sum();
    let kib = receiver_bytes as f64 / 1024.0;
    let basis = crate::model::CpuBasis::of(local, remote);
    let charged = basis.charged_us(&local.cpu, &remote.cpu);
    let per_kib = |us: f64| if kib > 0.0 { us / kib } else { 0.0 };
    let per_transaction = |us: f64| {
        if transactions > 0 {
            us / transactions as f64
        } else {
            0.0
        }
    };
    let rr = RrSummary {
        transactions,
        transactions_per_s,
        latency_kind: "round_trip".to_string(),
        outstanding_asked: rr_config.outstanding,
        outstanding_achieved: per_flow * side.latency.mean / 1e6,
        rate_asked_tps: rr_config.rate_tps,
        rate_achieved_tps: rr_config.rate_tps.map(|_| per_flow),
        owed: side.owed,
        lost: side.lost,
        late: side.late,
        port_exhausted: side.port_exhausted,
        time_wait: side.time_wait,
        connect_latency_us: side.connect,
        latency_us: side.latency,
        service_demand_us_per_transaction: PerSide {
            local: per_transaction(charged.local),
            remote: per_transaction(charged.remote),
        },
        load: None,
    };
    Summary {
        duration_s,
        receiver_bytes,
        receiver_bps,
        receiver_bytes_total: flows.iter().map(|f| f.receiver_bytes_total).sum(),
        flows: flows.len() as u32,
        cpu: PerSide {
            local: local.cpu.clone(),
            remote: remote.cpu.clone(),
        },
        service_demand_us_per_kb: PerSide {
            local: per_kib(charged.local),
            remote: per_kib(charged.remote),
        },
        cpu_basis: Some(basis),
        rr: Some(rr),
        mptcp: crate::model::MptcpSummary::of(local),
        ..Default::default()
    }
}

/// What the test asked for and the flows could not honour, said with both figures.
fn shortfalls(config: &TestConfig, rr: &RrSummary) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(asked), Some(achieved)) = (rr.rate_asked_tps, rr.rate_achieved_tps) {
        if achieved < asked * 0.99 {
            out.push(format!(
                "asked {} transactions/s per flow, achieved {} ({:.1} %); {} requests fell due and were never sent",
                format_count(asked),
                format_count(achieved),
                achieved / asked * 100.0,
                rr.owed
            ));
        }
    } else if rr.outstanding_asked > 1
        && rr.outstanding_achieved < f64::from(rr.outstanding_asked) * 0.9
    {
        out.push(format!(
            "asked {} transactions in flight per flow, achieved {:.2} on average",
            rr.outstanding_asked, rr.outstanding_achieved
        ));
    }
    if rr.lost > 0 {
        let asked = rr.transactions + rr.lost;
        out.push(format!(
            "{} of {asked} transactions ({:.3}%) got no answer within the loss timeout and were given up ({} came later)",
            rr.lost,
            rr.lost as f64 * 100.0 / asked.max(1) as f64,
            crate::units::counted(rr.late, "answer", None)
        ));
    }
    if rr.port_exhausted > 0 {
        let tw = rr
            .time_wait
            .map_or(String::new(), |tw| format!(", {tw} sockets in TIME_WAIT"));
        out.push(format!(
            "ephemeral ports exhausted: {} connects found no free local port{tw}; the rate is limited by TIME_WAIT, not the network",
            rr.port_exhausted
        ));
    }
    if config.protocol.traits().datagrams && rr.transactions == 0 && rr.lost > 0 {
        out.push("no UDP transaction completed: is the path dropping datagrams?".to_string());
    }
    out
}

fn micros(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else if us >= 1_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.1} us")
    }
}

/// One interval line of a request/response test.
pub fn rr_interval_line(label: &str, interval: &SideInterval) -> Option<String> {
    let rr = interval.rr?;
    let span = format!("{:.2}-{:.2}", interval.start, interval.end);
    let connect = rr
        .connect_p99_us
        .map_or(String::new(), |us| format!("  connect p99 {}", micros(us)));
    let omitted = if interval.omitted { "  (omitted)" } else { "" };
    Some(format!(
        "[{label:>3}] {span:>12} sec  {:>12}  {:>12}  {:>10}  {:>10}  {:>10}{connect}{omitted}",
        rr.transactions,
        format_count(rr.transactions_per_s),
        micros(rr.p50_us),
        micros(rr.p99_us),
        micros(rr.max_us),
    ))
}

fn latency_lines(out: &mut String, name: &str, l: &LatencySummary) {
    if l.count == 0 {
        // A served test whose client times its own round trips (iperf 2's bounceback)
        // leaves none here: said so, never printed as zeros.
        let _ = writeln!(out, "{name} (round trip): none timed on this side");
        return;
    }
    let _ = writeln!(
        out,
        "{name} (round trip, {} samples): mean {} +/- {}, min {}, max {}",
        l.count,
        micros(l.mean),
        micros(l.stddev),
        micros(l.min),
        micros(l.max)
    );
    let _ = writeln!(
        out,
        "  p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}",
        micros(l.p50),
        micros(l.p90),
        micros(l.p99),
        micros(l.p999),
        micros(l.p9999)
    );
}

/// The end-of-test section of a request/response test.
pub fn render_rr_summary(report: &Report, per_flow: bool) -> String {
    let mut out = String::new();
    let Some(rr) = &report.summary.rr else {
        return out;
    };
    let _ = writeln!(out, "- - - - - - - - - - - - - - - - - - - - - - - - -");
    if per_flow {
        for flow in &report.flows {
            let _ = writeln!(
                out,
                "[{:>3}] {} transactions, {}/s{}",
                flow.id,
                flow.transactions.unwrap_or(0),
                format_count(flow.transactions_per_s.unwrap_or(0.0)),
                flow.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  FAILED: {e}"))
            );
        }
    }
    let noun = if report.config.workload == Workload::Crr {
        "Connections"
    } else {
        "Transactions"
    };
    let _ = writeln!(
        out,
        "{noun}: {} in {:.2} s = {}/s over {} flow{}",
        rr.transactions,
        report.summary.duration_s,
        format_count(rr.transactions_per_s),
        report.summary.flows,
        if report.summary.flows == 1 { "" } else { "s" }
    );
    latency_lines(&mut out, "Latency", &rr.latency_us);
    if let Some(connect) = &rr.connect_latency_us {
        latency_lines(&mut out, "Connect", connect);
    }
    out.push_str(&loop_lines(rr));
    let demand = PerSide {
        local: format!(
            "{:.2} us/transaction",
            rr.service_demand_us_per_transaction.local
        ),
        remote: format!(
            "{:.2} us/transaction",
            rr.service_demand_us_per_transaction.remote
        ),
    };
    let summary = &report.summary;
    for line in crate::text::cpu_lines(&summary.cpu, summary.cpu_basis.as_ref(), &demand) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(crypto) = &report.summary.crypto {
        out.push_str(&crypto_line(crypto));
    }
    if let Some(mptcp) = &report.summary.mptcp {
        let _ = writeln!(out, "{}", crate::text::mptcp_line(mptcp));
    }
    for flow in report.flows.iter().filter(|f| f.error.is_some()) {
        let _ = writeln!(
            out,
            "Flow {} failed: {}",
            flow.id,
            flow.error.as_deref().unwrap_or_default()
        );
    }
    if let Some(path) = report.path() {
        let _ = writeln!(out, "Path: {}", path.summary());
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// How the transactions were driven: the open loop's rate asked and achieved, or the
/// closed loop's requests in flight, and the bulk load beside them.
fn loop_lines(rr: &RrSummary) -> String {
    let mut out = String::new();
    match (rr.rate_asked_tps, rr.rate_achieved_tps) {
        (Some(asked), Some(achieved)) => {
            let _ = writeln!(
                out,
                "Open loop: asked {}/s per flow, achieved {}/s; latency counted from each request's due time",
                format_count(asked),
                format_count(achieved)
            );
        }
        _ if rr.latency_us.count == 0 => {}
        _ => {
            let _ = writeln!(
                out,
                "Closed loop: {} in flight per flow asked, {:.2} achieved (rate x mean round trip)",
                rr.outstanding_asked, rr.outstanding_achieved
            );
        }
    }
    if let Some(load) = &rr.load {
        let _ = writeln!(
            out,
            "Load: {} bulk TCP flow{} beside, receiver goodput {}, {} retransmits",
            load.flows,
            if load.flows == 1 { "" } else { "s" },
            crate::units::format_rate(load.receiver_bps, crate::units::Scale::Adaptive),
            load.retransmits
        );
        if let (Some(idle), Some(added), Some(grade)) =
            (load.idle_p50_us, load.added_ms, load.grade.as_ref())
        {
            let _ = writeln!(
                out,
                "Under load: round trip p50 {} against {} idle, {added:+.2} ms: bufferbloat grade {grade}",
                crate::units::format_micros(rr.latency_us.p50),
                crate::units::format_micros(idle),
            );
        }
    }
    out
}

/// The encryption's cost per transaction (a transaction's records are small: per Gbit
/// would say nothing).
fn crypto_line(crypto: &crate::model::CryptoSummary) -> String {
    let mut out = String::new();
    // Per transaction, not per Gbit: a transaction's records are small.
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let sealing = crypto
        .crypto_us_per_transaction
        .as_ref()
        .map(|p| {
            format!(
                "; sealing and opening records client {} us, server {} us per transaction",
                show(p.local),
                show(p.remote)
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "Crypto: {}, handshake {:.2} ms (longest {:.2}){sealing}",
        crypto.name(),
        crypto.handshake_ms,
        crypto.handshake_max_ms
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{config, flow};
    use crate::latency::LatencyHistogram;

    fn rr_config(outstanding: u32, rate_tps: Option<f64>) -> TestConfig {
        let mut config = config(Direction::Forward, 2);
        config.workload = Workload::Rr;
        config.rr = Some(RrConfig {
            request: 100,
            response: 1000,
            outstanding,
            rate_tps,
            busy_poll_us: None,
            cpus: Vec::new(),
            load: 0,
        });
        config
    }

    fn requester(id: u32, transactions: u64, seconds: f64) -> FlowSide {
        FlowSide {
            transactions,
            ..flow(id, Role::Request, transactions * 1000, seconds, 0)
        }
    }

    fn responder(id: u32, transactions: u64, seconds: f64) -> FlowSide {
        FlowSide {
            transactions,
            ..flow(id, Role::Respond, transactions * 100, seconds, 0)
        }
    }

    /// Two flows of 10,000 and 30,000 transactions in 2 s, every round trip 100 us.
    fn sides(mean_ns: u64) -> (SideResult, SideResult) {
        let mut latency = LatencyHistogram::new();
        for _ in 0..40_000 {
            latency.record(mean_ns);
        }
        let local = SideResult {
            flows: vec![requester(0, 10_000, 2.0), requester(1, 30_000, 2.0)],
            rr: Some(RrSide {
                latency: latency.summary(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![responder(0, 10_000, 2.0), responder(1, 30_000, 2.0)],
            ..Default::default()
        };
        (local, remote)
    }

    #[test]
    fn transactions_come_from_the_requester_and_bytes_from_both_ends() {
        let (local, remote) = sides(100_000);
        let report = Report::assemble("t", "t", 0.0, rr_config(2, None), local, remote);
        assert_eq!(report.test, "tcp_rr");
        let rr = report.summary.rr.as_ref().unwrap();
        assert_eq!(rr.transactions, 40_000);
        assert_eq!(rr.transactions_per_s, 20_000.0);
        // 10,000 transactions/s per flow x 100 us = 1 in flight of the 2 asked.
        assert!((rr.outstanding_achieved - 1.0).abs() < 0.01);
        assert!(report
            .warnings
            .iter()
            .any(|w| w.contains("asked 2 transactions in flight")));
        // Responses (1000 B) at the client, requests (100 B) at the server.
        assert_eq!(report.summary.receiver_bytes, 40_000 * 1100);
        assert_eq!(report.flows[1].transactions, Some(30_000));
        assert_eq!(report.flows[1].transactions_per_s, Some(15_000.0));
    }

    /// A served test whose client keeps its round trips (iperf 2's bounceback) has none
    /// on this side: the text says so instead of printing zeros and a loop achieved of 0.
    #[test]
    fn round_trips_not_timed_here_are_said_so_not_printed_as_zeros() {
        let (mut local, remote) = sides(100_000);
        local.rr = None;
        let report = Report::assemble("t", "t", 0.0, rr_config(1, None), local, remote);
        let text = render_rr_summary(&report, false);
        assert!(
            text.contains("Latency (round trip): none timed on this side"),
            "{text}"
        );
        assert!(!text.contains("Closed loop"), "{text}");
        let (local, remote) = sides(100_000);
        let report = Report::assemble("t", "t", 0.0, rr_config(1, None), local, remote);
        let text = render_rr_summary(&report, false);
        assert!(
            text.contains("Latency (round trip, 40000 samples)"),
            "{text}"
        );
    }

    #[test]
    fn an_open_loop_rate_not_reached_is_a_warning_with_both_figures() {
        let (local, remote) = sides(100_000);
        let report = Report::assemble("t", "t", 0.0, rr_config(1, Some(20_000.0)), local, remote);
        let rr = report.summary.rr.as_ref().unwrap();
        assert_eq!(rr.rate_asked_tps, Some(20_000.0));
        assert_eq!(rr.rate_achieved_tps, Some(10_000.0));
        let warning = report
            .warnings
            .iter()
            .find(|w| w.starts_with("asked 20.0k transactions/s"))
            .expect("a shortfall warning");
        assert!(warning.contains("achieved 10.0k (50.0 %)"), "{warning}");
    }
}
