//! What every iperf 2 test served here shares, whichever way it came (TCP, UDP,
//! bounceback): the server's limits as they bind an iperf 2 client, the test as linerate
//! describes it, and its kept run.

use crate::access::{self, RateBook};
use crate::served::Served;
use crate::server_state::{ServedTool, ServerState};
use linerate_engine::sys;
use linerate_proto::iperf2::{self, Amount, ClientHeader};
use linerate_proto::iperf3::server::MAX_COUNTED_RUN;
use linerate_report::units::{format_rate, Scale};
use linerate_report::{HostFacts, Report, SideResult, TestConfig};
use std::net::SocketAddr;

/// A timed test's schedule runs this far past the time it asked: the client's shutdown
/// ends it, and the schedule only bounds a client that never shuts down.
const SCHEDULE_SLACK_S: f64 = 5.0;

/// The server's limits as they bind an iperf 2 client: `--max-duration` (a timed test
/// over it is refused; a counted one is cut there), `--max-flows`, `--max-rate` and
/// `--max-rate-per-ip` by the rate it asks (`-b`; an unlimited test is refused where a
/// rate limit is set).
pub(crate) fn check_limits(
    shared: &ServerState,
    served: &mut Served,
    header: &ClientHeader,
    connections: usize,
    peer: SocketAddr,
) -> Result<(), String> {
    let limits = &shared.config.limits;
    if let Amount::Seconds(asked) = header.amount {
        if asked > limits.max_duration_s {
            return Err(format!(
                "{asked} s asked, the server allows {} s",
                limits.max_duration_s
            ));
        }
    }
    // Both ends send on each connection of a --full-duplex test: two flows each.
    let flows = connections * header.ways();
    if flows as u64 > u64::from(limits.max_flows) {
        return Err(format!(
            "{flows} flows asked ({connections} connections), the server allows {}",
            limits.max_flows
        ));
    }
    let pps = header.ext_flags & iperf2::ext_flag::UNITS_PPS != 0;
    let asked_bps = if pps {
        0
    } else {
        header.rate.saturating_mul(flows as u64)
    };
    let unlimited = header.rate == 0 || pps;
    if let Some(limit) = limits.max_rate_bps {
        if unlimited || asked_bps > limit {
            return Err(format!(
                "{} asked, this server allows at most {} per test (ask with -b)",
                if unlimited {
                    "an unlimited rate".to_string()
                } else {
                    format!("{asked_bps} bit/s")
                },
                format_rate(limit as f64, Scale::Adaptive)
            ));
        }
    }
    if let Some(limit) = shared.config.max_rate_per_ip {
        if unlimited {
            return Err(
                "an unlimited rate asked; this server limits each address's rate (ask with -b)"
                    .into(),
            );
        }
        let client = shared.gate.policy.client(peer.ip());
        served.rate_share = Some(RateBook::reserve(
            &shared.rates,
            client,
            asked_bps as f64,
            limit,
        )?);
    }
    Ok(())
}

/// The test as linerate describes it: TCP (or UDP) from the client to this server, as
/// many flows as connections arrived, scheduled past the time asked (the client's end
/// ends it) or, for a count, to the server's cap.
pub(crate) fn config_of(
    shared: &ServerState,
    header: &ClientHeader,
    connections: usize,
    peer: SocketAddr,
    local_port: u16,
    udp: bool,
) -> Result<TestConfig, String> {
    use linerate_model::{Environment, StreamRequest, StreamTransport, TestKind, TestRequest};
    use linerate_report::Direction;
    let cap = MAX_COUNTED_RUN
        .as_secs_f64()
        .min(shared.config.limits.max_duration_s);
    let time_s = match header.amount {
        Amount::Seconds(s) if !header.client_sends() => s,
        Amount::Seconds(s) => (s + SCHEDULE_SLACK_S).min(cap.max(s)),
        Amount::Bytes(_) | Amount::Unsaid => cap,
    };
    let pps = header.ext_flags & iperf2::ext_flag::UNITS_PPS != 0;
    let length = (header.write_len > 0).then_some(u64::from(header.write_len));
    let request = TestRequest {
        tls: None,
        target: Some(access::canonical(peer.ip()).to_string()),
        port: local_port,
        parallel: connections as u32,
        threads: None,
        time_s,
        omit_s: 0.0,
        // The server's intervals, as `iperf -s -i` sets them (`--histogram-interval`).
        interval_s: shared
            .config
            .iperf2
            .histogram_interval()
            .map_or(1.0, |every| every.as_secs_f64()),
        window: None,
        congestion: None,
        per_flow: true,
        connect_timeout_s: 10.0,
        // iperf 2's client reports nothing of its host.
        observe: false,
        source: None,
        marks: None,
        kind: TestKind::Stream(StreamRequest {
            direction: match (header.full_duplex(), header.reverse()) {
                (true, _) => Direction::Bidir,
                (false, true) => Direction::Reverse,
                (false, false) => Direction::Forward,
            },
            rate_bps: (header.rate > 0 && !pps).then_some(header.rate),
            transport: StreamTransport::plain(udp, length, pps.then_some(header.rate), false),
        }),
    };
    let environment = Environment {
        cpus: sys::cpus(),
        udp_length: None,
    };
    TestConfig::resolve(&request, &environment)
}

/// A test at its end: the server's id for it, its client, when it started, the client's
/// flows as far as iperf 2 tells them, and this side's figures.
pub(crate) struct Finished {
    pub id: u64,
    pub peer: SocketAddr,
    pub started_at: f64,
    pub theirs: Vec<linerate_report::FlowSide>,
    pub ours: SideResult,
    /// What the kept run says of the test besides its figures: what became of
    /// `--trip-times`'s one-way delays, a bounceback's turnaround.
    pub note: Option<String>,
}

/// Hands the finished test's report to the server's report sink, when it has one.
pub(crate) fn keep_report(
    shared: &ServerState,
    header: &ClientHeader,
    mut config: TestConfig,
    finished: Finished,
) {
    let Finished {
        id,
        peer,
        started_at,
        theirs,
        ours,
        note,
    } = finished;
    // The test lasted as long as the client sent, not as long as its schedule allowed.
    config.time_s = ours.flows.iter().map(|f| f.window_s).fold(0.0, f64::max);
    let Some(sink) = &shared.config.foreign_reports else {
        return;
    };
    let told = if header.bounceback() {
        "the client's side is what its requests showed: iperf 2 keeps its round trips to itself"
    } else if theirs.is_empty() {
        "iperf 2 told the server none of its own figures, so only this side's (the receiver's) are here"
    } else {
        "the sender's figures are the count its final datagram carried"
    };
    let mut report = Report::assemble(
        &config.test_name(),
        &format!("linerate {}", env!("CARGO_PKG_VERSION")),
        started_at,
        config,
        // The client's side: its software, and what its datagrams told.
        SideResult {
            host: HostFacts {
                software: format!("iperf {}", header.release().as_deref().unwrap_or("2")),
                ..HostFacts::default()
            },
            flows: theirs,
            ..SideResult::default()
        },
        ours,
    );
    report.warnings.push(format!(
        "served to an iperf 2 client{} at {peer}: {told}",
        header
            .release()
            .map_or(String::new(), |r| format!(" ({r})"))
    ));
    if let Some(note) = note {
        report.warnings.push(note);
    }
    (sink.0)(ServedTool::Iperf2, id, &report);
}

/// One side of a served iperf 2 test's one flow: its role, its addresses (`local`,
/// `remote` as this side sees them), the bytes it counted over `seconds`, and how it
/// ended; no socket facts, transactions or datagrams (the caller adds what it has).
pub(crate) fn plain_flow(
    role: linerate_report::Role,
    (local, remote): (SocketAddr, SocketAddr),
    bytes: u64,
    seconds: f64,
    error: Option<String>,
) -> linerate_report::FlowSide {
    linerate_report::FlowSide {
        id: 0,
        direction: linerate_report::Direction::Forward,
        role,
        local_addr: local.to_string(),
        remote_addr: remote.to_string(),
        window_bytes: bytes,
        window_s: seconds,
        bytes_total: bytes,
        retransmits: 0,
        sndbuf: 0,
        rcvbuf: 0,
        mss: 0,
        rtt_us: 0,
        congestion: String::new(),
        error,
        udp: None,
        datagrams_total: 0,
        transactions: 0,
        transactions_total: 0,
        classes: None,
        frames: None,
        one_way_delay_us: None,
        ecn: false,
        mptcp: None,
    }
}
