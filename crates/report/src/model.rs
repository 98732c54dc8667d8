//! The result model: one value that every renderer and the store consume.
//!
//! Two kinds of value live here. [`SideResult`] is what one end of a test measured on its
//! own clock (the client's side, or the server's sent back over the control connection).
//! [`Report`] is the merged, user-facing result of a whole test, assembled from both sides
//! by [`Report::assemble`]. The JSON form of `Report` is a documented contract
//! (docs/results.md): fields are added, never renamed.

use linerate_model::observe::Observation;
use serde::{Deserialize, Serialize};

pub use linerate_model::{
    CpuUsage, Direction, FlowInterval, FlowSide, HostFacts, Role, RrConfig, RrInterval, RrSide,
    SideInterval, SideResult, TestConfig, UdpCounters, UdpCounts, Workload,
};

/// A pair of figures, one per end of the test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerSide<T> {
    /// The client (where linerate was run).
    pub local: T,
    /// The server.
    pub remote: T,
}

/// What the CPU time charged to each end for its service demand is (worked out in cpu_basis.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemandBasis {
    /// The host's busy time (each end on its own host, nothing else busy).
    System,
    /// One host for both ends: its busy time split in proportion to each end's threads.
    Split,
    /// The end's own threads only: other work was running.
    Processes,
}

/// How a test's CPU figures are read (worked out in cpu_basis.rs): one host or two, the CPU other
/// work took, and what the service demand charges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuBasis {
    /// Both ends ran on one kernel: `cpu.local` and `cpu.remote` hold the same
    /// system-wide figures.
    pub shared_host: bool,
    /// CPU that the test's own threads do not account for, on each end's host, percent of
    /// one core over the window: other processes, and kernel threads (softirq work in
    /// ksoftirqd included). On one host both sides hold the same figure.
    pub others_pct: PerSide<f64>,
    pub service_demand: DemandBasis,
}

/// Socket facts of one end of a flow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketFacts {
    pub local_addr: String,
    pub remote_addr: String,
    pub sndbuf: u64,
    pub rcvbuf: u64,
    pub congestion: String,
}

/// One flow in the merged report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    pub id: u32,
    pub direction: Option<Direction>,
    pub receiver_bytes: u64,
    pub receiver_bps: f64,
    pub sender_bytes: u64,
    pub sender_bps: f64,
    pub retransmits: u64,
    pub receiver_bytes_total: u64,
    pub sender_bytes_total: u64,
    pub mss: u32,
    pub rtt_us: u32,
    pub client: SocketFacts,
    pub server: SocketFacts,
    pub error: Option<String>,
    /// UDP flows: sender counts from the sender, receiver counts from the receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpFlowReport>,
    /// Request/response flows: transactions the client completed in the window, and per
    /// second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_s: Option<f64>,
}

/// One UDP flow's datagram figures in the merged report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpFlowReport {
    #[serde(flatten)]
    pub counts: UdpCounts,
    pub loss_pct: f64,
    pub receiver_pps: f64,
    pub sender_pps: f64,
    /// Over the whole test: datagrams sent, and distinct datagrams received.
    pub sent_total: u64,
    pub received_total: u64,
    /// Where the receiver timed every datagram (a call's): the one-way delays,
    /// microseconds, with their buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way_delay_us: Option<linerate_model::latency::LatencySummary>,
}

/// One interval of the merged report: receiver figures from the receiving side's clock,
/// sender figures from the sending side's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalReport {
    pub start: f64,
    pub end: f64,
    pub omitted: bool,
    pub receiver_bytes: u64,
    pub receiver_bps: f64,
    pub sender_bytes: u64,
    pub sender_bps: f64,
    pub retransmits: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<Vec<FlowIntervalReport>>,
    /// UDP tests: sender counts from the sending side, receiver counts from the receiving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpIntervalReport>,
    /// Request/response tests: the interval's transactions as the requesters timed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<RrInterval>,
    /// UDP tests: each way's receiver figures in the interval (the way out as the server
    /// counted it, the way back as the client did): what an application run's picture
    /// draws, each way on one time axis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ways: Vec<WayInterval>,
}

/// One way of a UDP test in one interval, from its receiving end's counters and clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WayInterval {
    pub direction: Direction,
    pub receiver_bps: f64,
    pub received: u64,
    pub lost: u64,
    pub loss_pct: f64,
    /// The mean one-way delay of the datagrams it timed in the interval, ms (the clocks as
    /// the summary's `one_way_delay_ms` says); none where it timed none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way_delay_ms: Option<f64>,
    pub jitter_ms: f64,
}

/// One interval's datagram figures in the merged report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpIntervalReport {
    #[serde(flatten)]
    pub counts: UdpCounts,
    pub loss_pct: f64,
    pub receiver_pps: f64,
    pub sender_pps: f64,
}

/// One flow in one interval of the merged report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowIntervalReport {
    pub id: u32,
    pub receiver_bytes: u64,
    pub receiver_bps: f64,
    pub sender_bytes: u64,
    pub sender_bps: f64,
    pub retransmits: u64,
    /// UDP: datagrams the sender sent and the receiver took in the interval.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sender_datagrams: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub receiver_datagrams: u64,
    /// UDP: datagrams the receiver counted lost in the interval, and its jitter.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_datagrams: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub jitter_ms: f64,
    /// TCP: the sender's congestion window, peer window, RTT and path MTU at the end
    /// (the client's own socket's view when the server sends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<linerate_model::TcpSnapshot>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_f64(value: &f64) -> bool {
    *value == 0.0
}

/// Summary figures of one direction (bidir tests carry one per direction).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionSummary {
    pub direction: Option<Direction>,
    pub flows: u32,
    pub receiver_bytes: u64,
    pub receiver_bps: f64,
    pub sender_bytes: u64,
    pub sender_bps: f64,
    pub retransmits: u64,
}

/// The headline figures over the measurement window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The measurement window in seconds, as the receivers' clocks measured it.
    pub duration_s: f64,
    /// Payload bytes that arrived at the receivers inside the window (the headline).
    pub receiver_bytes: u64,
    /// Receiver goodput: the sum over flows of each flow's window bytes over its window.
    pub receiver_bps: f64,
    pub sender_bytes: u64,
    pub sender_bps: f64,
    pub retransmits: u64,
    pub receiver_bytes_total: u64,
    pub sender_bytes_total: u64,
    pub flows: u32,
    pub flows_failed: u32,
    pub cpu: PerSide<CpuUsage>,
    /// CPU microseconds per KiB received, per side: the host's busy time (all cores), or
    /// as `cpu_basis` says when the ends share a host or other work was running.
    pub service_demand_us_per_kb: PerSide<f64>,
    /// How the CPU figures are read; absent in results stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_basis: Option<CpuBasis>,
    /// Per-direction figures; present for bidir tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directions: Option<Vec<DirectionSummary>>,
    /// UDP tests: datagram figures, at the top level of `summary`. Read back by
    /// [`summary_from_json`].
    #[serde(
        default,
        flatten,
        skip_deserializing,
        skip_serializing_if = "Option::is_none"
    )]
    pub udp: Option<UdpSummary>,
    /// Paced tests: how close the senders kept to the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing: Option<Pacing>,
    /// Request/response tests: transactions and round trips, at the top level of
    /// `summary`. Read back by [`summary_from_json`].
    #[serde(
        default,
        flatten,
        skip_deserializing,
        skip_serializing_if = "Option::is_none"
    )]
    pub rr: Option<RrSummary>,
    /// Encrypted tests (`--tls`, `--quic`): what the encryption cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto: Option<CryptoSummary>,
    /// Marked UDP tests (`--dscp`, `--ecn`): per direction, the marks its receivers found
    /// on the datagrams, against those `config.marks` says were sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<MarksSummary>,
    /// MPTCP tests (`--mptcp`): what the client's connections became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpSummary>,
    /// Calls (`linerate app --pattern voip`): each way as its listener hears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<CallSummary>,
    /// Video frames (`--isochronous`, `linerate app --pattern video`): each way's frames
    /// as its sender sent them and its receiver put them back together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoSummary>,
}

/// A video test's frames, each way (`linerate_model::video`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoSummary {
    pub settings: linerate_model::video::VideoSettings,
    /// The server's frames where they differ from `settings` (a game's state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back: Option<linerate_model::video::VideoSettings>,
    /// Each way that carried frames: client to server, then server to client.
    pub ways: Vec<VideoWay>,
}

/// One way's frames: the sender's counts, the receiver's, and what neither saw whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoWay {
    pub direction: Direction,
    /// Frames the sender began, less those whose every byte or some of whose bytes the
    /// receiver had: frames that never arrived at all.
    pub lost: u64,
    /// The sender's counts (sent, skipped, slips, cut, start_late_max_us) and the
    /// receiver's (whole, partial, late, malformed, clock_ahead, latency_us) together.
    #[serde(flatten)]
    pub counts: linerate_model::video::FrameCounts,
    /// What the way's receivers read, bit/s over their window.
    #[serde(default)]
    pub received_bps: f64,
    /// Its Quality of Outcome (draft-ietf-ippm-qoo-09): the frames' latency and those not
    /// shown in time against the run's requirement (`config.qoo`) or the pattern's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qoo: Option<linerate_model::qoo::QooScore>,
    /// No receiver counted this way's frames (an iperf 2 server tells its client none):
    /// the sender's counts alone; `lost` is 0 and the way is not scored, as nothing is
    /// known of what arrived.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unseen: bool,
}

/// A call-shaped test, each way scored by the E-model (`linerate_model::call`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSummary {
    pub codec: linerate_model::call::Codec,
    /// A fixed buffer's size; an adaptive one's most.
    pub jitter_buffer_ms: u32,
    /// The buffer adapted to each way's jitter (`--jitter-buffer adaptive`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adaptive: bool,
    /// Client to server, then server to client.
    pub ways: Vec<CallWay>,
}

/// One way of a call: what its receiver counted in the window and the score it makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallWay {
    pub direction: Direction,
    pub received: u64,
    pub lost: u64,
    /// Arrived after the jitter buffer played their turn (among `received`).
    pub late: u64,
    pub loss_events: u64,
    /// Runs of consecutive datagrams not heard (lost or late; a run of both once): the
    /// burst ratio's runs. 0 where the receiver did not count them (an older peer): each
    /// late datagram then counts as a run of its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unplayed_runs: u64,
    /// A codec with voice activity detection (`g729a`): the frames its sender did not
    /// send while its speaker paused (P.59's talk spurts and pauses); 0 for the others.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub silent: u64,
    /// Mean one-way delay, sender's clock to receiver's (true where they agree).
    pub one_way_delay_ms: Option<f64>,
    /// The one-way delays' distribution, microseconds (its percentiles), where the
    /// receivers timed every datagram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way_delay_us: Option<linerate_model::latency::LatencySummary>,
    /// The way's Quality of Outcome (draft-ietf-ippm-qoo) against a voice call's needs
    /// (`linerate_model::qoo::Requirement::voice`) or the run's `--qoo`: its delays'
    /// percentiles, and the datagrams not played in time over those sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qoo: Option<linerate_model::qoo::QooScore>,
    pub jitter_ms: f64,
    /// An adaptive buffer's mean depth this way, milliseconds: what its listener waited
    /// (the mouth-to-ear delay takes it in place of a fixed size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_buffer_ms: Option<f64>,
    #[serde(flatten)]
    pub score: linerate_model::call::CallScore,
}

/// What an MPTCP test's connections were at the end, as this end's MPTCP_INFO said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MptcpSummary {
    pub connections: u32,
    /// Subflows of every connection together, the first of each among them.
    pub subflows: u32,
    /// The most subflows one connection had.
    pub max_subflows: u8,
    /// Connections that fell back to plain TCP: the server did not take MPTCP.
    pub fell_back: u32,
}

impl MptcpSummary {
    /// `--mptcp`: this end's connections, their subflows and fallbacks; `None` where no
    /// flow is MPTCP.
    pub fn of(local: &linerate_model::SideResult) -> Option<MptcpSummary> {
        let facts: Vec<linerate_model::MptcpFacts> =
            local.flows.iter().filter_map(|f| f.mptcp).collect();
        (!facts.is_empty()).then(|| MptcpSummary {
            connections: facts.len() as u32,
            subflows: facts.iter().map(|f| u32::from(f.subflows)).sum(),
            max_subflows: facts.iter().map(|f| f.subflows).max().unwrap_or(0),
            fell_back: facts.iter().filter(|f| f.fallback).count() as u32,
        })
    }
}

/// What became of a marked test's marks (`--dscp`, `--ecn`), where the ends could tell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarksSummary {
    /// UDP: per direction, what its receivers found on the datagrams they read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrived: Vec<MarksArrived>,
    /// TCP with `--ecn`: the sending connections whose handshake negotiated ECN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn_negotiated: Option<EcnNegotiated>,
}

/// Connections that negotiated ECN, of those that sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EcnNegotiated {
    pub negotiated: u32,
    pub connections: u32,
}

/// What one direction's receivers found on the datagrams they read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarksArrived {
    pub direction: Direction,
    /// The datagrams by the TOS byte (traffic class) they arrived with, over the flows'
    /// lives.
    pub classes: Vec<linerate_model::marks::ClassCount>,
    /// The share of them with another DSCP than was sent, percent.
    pub remarked_pct: f64,
    pub verdict: linerate_model::marks::Verdict,
}

/// Reads a `summary` object. The UDP and request/response figures sit at its top level
/// and share key names (`lost`); serde's flattening would hand each shared key to only
/// the first of them, so each is read from the whole object here instead, when its
/// headline key is present.
pub fn summary_from_json<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Summary, D::Error> {
    use serde::de::Error;
    let value = serde_json::Value::deserialize(deserializer)?;
    let mut summary: Summary = serde_json::from_value(value.clone()).map_err(D::Error::custom)?;
    if value.get("receiver_pps").is_some() {
        summary.udp = Some(serde_json::from_value(value.clone()).map_err(D::Error::custom)?);
    }
    if value.get("transactions_per_s").is_some() {
        summary.rr = Some(serde_json::from_value(value).map_err(D::Error::custom)?);
    }
    Ok(summary)
}

/// The figures of a request/response test over the window (docs/results.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RrSummary {
    /// Transactions completed in the window, and per second over all flows.
    pub transactions: u64,
    pub transactions_per_s: f64,
    /// What the latency figures are: "round_trip" (request sent, or due, to the whole
    /// response received), never half of one.
    pub latency_kind: String,
    /// Round-trip times in microseconds, with the full histogram.
    pub latency_us: crate::latency::LatencySummary,
    /// crr: connect times alone, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_latency_us: Option<crate::latency::LatencySummary>,
    /// Transactions in flight per flow: asked, and achieved by Little's law (the rate
    /// per flow times the mean round trip).
    pub outstanding_asked: u32,
    pub outstanding_achieved: f64,
    /// Open loop: the rate asked per flow, the rate achieved per flow, and requests that
    /// fell due but were never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_asked_tps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_achieved_tps: Option<f64>,
    pub owed: u64,
    /// UDP: transactions given up after the loss timeout, and answers that came later.
    pub lost: u64,
    pub late: u64,
    /// crr: connects that found no free local port, and TIME_WAIT sockets on the
    /// client at the end.
    pub port_exhausted: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_wait: Option<u64>,
    /// CPU microseconds (whole host, all cores) per transaction, per side (netperf's
    /// service demand for request/response tests).
    pub service_demand_us_per_transaction: PerSide<f64>,
    /// `--load`: the bulk flows beside the transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadSummary>,
}

/// The bulk flows of `rr --load`, measured as a stream test of their own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    pub flows: u32,
    pub receiver_bps: f64,
    pub sender_bps: f64,
    pub retransmits: u64,
    /// The transactions' median round trip alone before the load started, microseconds;
    /// what the load added to it (the median under load less that), milliseconds; and
    /// the bufferbloat grade of what it added (`rpm`'s scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_p50_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grade: Option<String>,
}

/// The senders' achieved rate against a pacing target, per flow, over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pacing {
    pub target_bps: f64,
    /// The sending flows' mean rate over the window, and as a percentage of the target.
    pub achieved_bps: f64,
    pub achieved_pct: f64,
    /// The per-flow sender rate in each interval of the window, as a percentage of the
    /// target: lowest, highest and standard deviation.
    pub interval_min_pct: f64,
    pub interval_max_pct: f64,
    pub interval_stddev_pct: f64,
    /// Milliseconds the senders were late past their burst over the window (summed over
    /// flows): the pacer earned credit it could not spend because the sender did not run.
    /// A shortfall this explains is the sending host's, not the pacer's.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub sender_late_ms: f64,
}

/// The datagram figures of a UDP test over the window (docs/results.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpSummary {
    /// Distinct datagrams received per second of the window (the headline for packet
    /// rates), and what the senders handed to the kernel per second.
    pub receiver_pps: f64,
    pub sender_pps: f64,
    pub received: u64,
    pub sent: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub foreign: u64,
    /// Datagrams the sender's socket buffer refused (EAGAIN), each sent again.
    pub send_errors: u64,
    /// Datagrams the sending host's own queue dropped (ENOBUFS), each sent again: never
    /// loss between the hosts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub qdisc_drops: u64,
    pub loss_pct: f64,
    pub jitter_ms: f64,
    /// Mean one-way delay of in-order datagrams (receiver's wall clock at arrival minus
    /// the sender's at sending): true only where both clocks agree, as on one host or in
    /// a `linerate lab`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way_delay_ms: Option<f64>,
    /// The one-way delays' percentiles, microseconds, where the receivers timed every
    /// datagram (calls, a served iperf 2 `--trip-times` test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way_delay_us: Option<linerate_model::latency::LatencySummary>,
    /// Runs of consecutive losses (a gap in the sequence counts once when it opens).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loss_events: u64,
    /// Over the whole test, warm-up and drain included: sent minus distinct received.
    /// Catches datagrams lost after the last one that arrived, which no gap shows.
    pub lost_total: u64,
    /// The kernel's own UDP counters over the window on each host.
    pub kernel: PerSide<UdpCounters>,
}

impl UdpSummary {
    /// The loss a rate trial is judged by: the window's, or the whole test's when more was
    /// lost there. Datagrams sent at the end and never received show in no gap of the
    /// window (`lost_total` catches them); a trial that lost its tail lost them at the
    /// rate it was tried at.
    pub fn trial_loss_pct(&self) -> f64 {
        let whole = self.received + self.lost_total;
        let tail = if whole > 0 {
            self.lost_total as f64 * 100.0 / whole as f64
        } else {
            0.0
        };
        self.loss_pct.max(tail)
    }
}

/// When a test was ended ahead of its schedule by the user.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interruption {
    /// Seconds of the test's window that ran (after any `--omit` warm-up).
    pub after_s: f64,
}

/// The merged result of one test: configuration, hosts, intervals, flows and summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The linerate build that produced the report.
    pub tool: String,
    /// The kind of test: "tcp_stream".
    pub test: String,
    /// Seconds since the Unix epoch when the test started.
    pub started_at: f64,
    pub config: TestConfig,
    pub host: PerSide<HostFacts>,
    pub intervals: Vec<IntervalReport>,
    pub flows: Vec<FlowReport>,
    #[serde(deserialize_with = "summary_from_json")]
    pub summary: Summary,
    pub warnings: Vec<String>,
    /// Repeated runs (`--iterations`, `--confidence`): every iteration's figures and the
    /// confidence interval of the headline. The rest of this report is then the
    /// representative iteration's (the median of the headline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition: Option<Repetition>,
    /// A copy's figures (`test: "copy"`); the rest of the report carries its goodput as
    /// the headline and its rate over time as the intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<CopyReport>,
    /// `--observe`: each end's host over the window (`observe.local`, `observe.remote`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe: Option<PerSide<Option<Observation>>>,
    /// The user interrupted the test (Ctrl-C): the figures cover the part that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
}

/// What a copy moved, how intact, and what limited it (docs/transfer-protocol.md 8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyReport {
    /// "push" or "pull".
    pub direction: String,
    pub source: String,
    pub destination: String,
    pub files: u64,
    /// File bytes at the destination.
    pub bytes: u64,
    /// Bytes already there from an interrupted run (not moved again).
    pub resumed_bytes: u64,
    /// Datagram payload bytes the sender sent, and how many of them again.
    pub payload_bytes: u64,
    pub resent_bytes: u64,
    /// Of the resent bytes, second copies of blocks resent in the tail, sent twice by
    /// design (a lost resend there has nothing after it to reveal it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tail_copy_bytes: u64,
    /// Chunks whose BLAKE3 failed at the receiver and were fetched again.
    pub refetched_chunks: u64,
    /// A resumed copy: the chunks the receiver's journal recorded, each read back from
    /// the `.part` and hashed before it was trusted; those whose bytes did not match
    /// (fetched again); and the seconds the reading took.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resume_checked_chunks: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resume_damaged_chunks: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub resume_check_s: f64,
    /// Datagrams the receiver dropped for a payload CRC that did not match.
    #[serde(default)]
    pub corrupted_datagrams: u64,
    /// Datagrams the receiving host's kernel dropped at a full socket buffer during the
    /// copy (`RcvbufErrors`, host-wide): lost on the host, not on the path.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rcvbuf_errors: u64,
    /// The file's BLAKE3 root both ends agreed on (one file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    pub block: u32,
    pub chunk: u64,
    /// The payloads travelled sealed with ChaCha20-Poly1305 (`--encrypt`).
    #[serde(default)]
    pub encrypted: bool,
    /// The UDP flows the data spread over (`--lanes`); absent for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<u8>,
    /// Wall time of the whole copy, set-up, sync and verification included.
    pub wall_s: f64,
    /// (bytes - resumed_bytes) over the wall time, bit/s.
    pub goodput_bps: f64,
    /// "network", "fixed_rate", "sender_disk", "sender_cpu", "receiver_disk",
    /// "receiver_cpu" or "latency".
    pub limit: String,
    pub diagnosis: String,
    /// Where the sender's time went, seconds: network, receiver, sender_disk, tail, busy.
    pub time_split_s: std::collections::BTreeMap<String, f64>,
    pub cpu_s: PerSide<f64>,
    pub disk_busy_s: PerSide<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_loss: Option<f64>,
    /// The rate the sender's search began from when it resumed from what an earlier copy
    /// over the same path found (half of it), bit/s; absent for a search from scratch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_bps: Option<f64>,
    /// A search from scratch: the rate the first datagrams, sent back to back, arrived
    /// at (the receiver's timing of that packet train, bit/s), how long after the first
    /// datagram the sender had it, and what the search jumped to (a share of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_estimate: Option<CopyStartEstimate>,
    /// `--ecn`: what the path's AQMs said and what the sender did about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<CopyEcn>,
}

/// A cold copy's packet train: the path's rate by its arrival, when the sender had it,
/// and the rate its search jumped to (absent where it already paced above that share).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CopyStartEstimate {
    pub bps: f64,
    pub after_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jumped_to_bps: Option<f64>,
    /// The rate the train left the sender at (absent where it left within one batch of
    /// the sending loop): a train sent slower than the bottleneck reads the sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_bps: Option<f64>,
}

/// A copy with `--ecn`: the data datagrams the receiver found marked CE (congestion
/// experienced), and the rounds the sender cut its rate for marks alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyEcn {
    pub ce_marked: u64,
    pub ce_rounds: u64,
}

/// The figure that answers a test's question, in one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Headline {
    /// Receiver goodput in bit/s (stream tests).
    ReceiverBps,
    /// Transactions per second over all flows (rr and crr tests).
    TransactionsPerS,
    /// Round trips a minute under load (`linerate rpm`; no test's summary has it).
    Rpm,
}

impl Report {
    /// The emulated path the test crossed, as the client's host (or else the server's)
    /// recorded it.
    pub fn path(&self) -> Option<&linerate_model::PathFacts> {
        path_of(&self.host)
    }
}

impl Headline {
    pub fn of(config: &TestConfig) -> Headline {
        match config.workload {
            Workload::Stream => Headline::ReceiverBps,
            Workload::Rr | Workload::Crr => Headline::TransactionsPerS,
        }
    }

    /// The key of the figure in `summary`.
    pub fn key(self) -> &'static str {
        match self {
            Headline::ReceiverBps => "receiver_bps",
            Headline::TransactionsPerS => "transactions_per_s",
            Headline::Rpm => "rpm",
        }
    }

    /// In words, for tables: "receiver goodput", "transactions/s".
    pub fn label(self) -> &'static str {
        match self {
            Headline::ReceiverBps => "receiver goodput",
            Headline::TransactionsPerS => "transactions/s",
            Headline::Rpm => "responsiveness (RPM)",
        }
    }

    /// The figure in `summary`.
    pub fn value(self, summary: &Summary) -> f64 {
        match self {
            Headline::ReceiverBps => summary.receiver_bps,
            Headline::TransactionsPerS => summary.rr.as_ref().map_or(0.0, |r| r.transactions_per_s),
            // A test's summary carries no responsiveness (Headline::of never names it).
            Headline::Rpm => 0.0,
        }
    }

    /// `value` with its unit: "9.41 Gbits/sec", "52.3k transactions/s".
    pub fn format(self, value: f64, scale: crate::units::Scale) -> String {
        match self {
            Headline::ReceiverBps => crate::units::format_rate(value, scale),
            Headline::TransactionsPerS => {
                format!("{} transactions/s", crate::units::format_count(value))
            }
            Headline::Rpm => format!("{value:.0} RPM"),
        }
    }
}

impl Report {
    /// The test's headline figure: the mean over iterations when it was repeated.
    pub fn headline(&self) -> (Headline, f64) {
        let headline = Headline::of(&self.config);
        let value = match &self.repetition {
            Some(repetition) => repetition.estimate.mean,
            None => headline.value(&self.summary),
        };
        (headline, value)
    }
}

/// A test run several times (`--iterations`, `--confidence`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repetition {
    /// The figure judged.
    pub metric: Headline,
    /// The figure of each iteration, in the order they ran.
    pub values: Vec<f64>,
    /// Their mean and its confidence interval.
    pub estimate: crate::stats::Estimate,
    /// The confidence asked for with `--confidence`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<crate::stats::Confidence>,
    /// Whether the interval came within the width asked before the cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
    pub max_iterations: u32,
    /// The iteration (0-based) whose figures fill the rest of the report.
    pub representative: usize,
    /// Every iteration's full report.
    pub iterations: Vec<Report>,
}

/// How one `--find-max` trial went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialVerdict {
    /// Receiver-side loss within the bound, at the rate asked.
    Passed,
    /// Receiver-side loss above the bound.
    Lossy,
    /// The senders fell more than 2 % short of the rate asked.
    SenderShort,
}

/// One trial of a `--find-max` search: a whole UDP test at one offered rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateTrial {
    /// Offered rate over all flows in bit/s; `None` for the unpaced first trial.
    pub offered_bps: Option<f64>,
    pub verdict: TrialVerdict,
    /// The trial's full summary (receiver and sender rates, loss, kernel counters, CPU).
    #[serde(deserialize_with = "summary_from_json")]
    pub summary: Summary,
    pub warnings: Vec<String>,
}

/// The answer of a `--find-max` search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateFound {
    /// The highest offered rate (all flows, bit/s) whose loss stayed within the bound;
    /// `None` when the unpaced trial already did (the sender is the limit).
    pub offered_bps: Option<f64>,
    pub receiver_bps: f64,
    pub receiver_pps: f64,
    pub loss_pct: f64,
    /// "sender": unpaced, the sender could not overload the path; "receiver or path":
    /// loss above this rate.
    pub limited_by: String,
}

/// The result of `linerate stream --udp --find-max` (docs/results.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindMaxReport {
    pub tool: String,
    /// "udp_find_max".
    pub test: String,
    pub started_at: f64,
    /// The configuration of every trial; `time_s` is one trial's length and `rate_bps`
    /// is left out (each trial sets its own).
    pub config: TestConfig,
    pub host: PerSide<HostFacts>,
    pub max_loss_pct: f64,
    pub trials: Vec<RateTrial>,
    /// `None` when no trial kept loss within the bound.
    pub result: Option<RateFound>,
    /// Why the rate could not go higher, in words, from the first failing trial above it.
    pub limit: Option<String>,
    pub warnings: Vec<String>,
}

/// An encrypted test's cost, in `summary.crypto` (its figures are made in `crypto`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CryptoSummary {
    /// "tls" or "quic".
    pub protocol: String,
    /// The negotiated TLS 1.3 suite.
    pub suite: String,
    /// Connections whose records the kernel held (kTLS), on each end, of `connections`.
    pub ktls_connections: PerSide<u32>,
    pub connections: u32,
    /// The client's handshakes: mean and longest, milliseconds.
    pub handshake_ms: f64,
    pub handshake_max_ms: f64,
    /// The test's own threads' CPU seconds per Gbit received, on each end and together.
    pub cpu_s_per_gbit: PerSide<f64>,
    pub cpu_s_per_gbit_total: f64,
    /// Of that, seconds spent sealing and opening records per Gbit (user-space TLS only).
    pub crypto_s_per_gbit: PerSide<Option<f64>>,
    /// `--baseline`: the same test plain over TCP, run just before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// Request/response tests: microseconds spent sealing and opening records per
    /// transaction, on each end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto_us_per_transaction: Option<PerSide<Option<f64>>>,
}

/// The plain run `--baseline` compares with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub receiver_bps: f64,
    pub cpu_s_per_gbit: PerSide<f64>,
    pub cpu_s_per_gbit_total: f64,
    /// Encrypted CPU per Gbit over plain, less one, in percent (both ends together).
    pub extra_cpu_pct: f64,
    /// Encrypted goodput over plain.
    pub goodput_ratio: f64,
}

/// The emulated path either host says it crossed (a lab or `LINERATE_PATH`), the
/// client's first.
pub fn path_of(host: &PerSide<HostFacts>) -> Option<&linerate_model::PathFacts> {
    host.local.path.as_deref().or(host.remote.path.as_deref())
}
