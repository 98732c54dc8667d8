//! The result model: one value that every renderer and the store consume.
//!
//! Two kinds of value live here. [`SideResult`] is what one end of a test measured on its
//! own clock (the client's side, or the server's sent back over the control connection).
//! [`Report`] is the merged, user-facing result of a whole test, assembled from both sides
//! by [`Report::assemble`]. The JSON form of `Report` is a documented contract
//! (docs/results.md): fields are added, never renamed.

use serde::{Deserialize, Serialize};

/// Which way the bytes go, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client sends, the server receives (iperf3's default).
    Forward,
    /// The server sends, the client receives (iperf3 `-R`).
    Reverse,
    /// Both at once, on separate connections (iperf3 `--bidir`).
    Bidir,
}

/// What one end does on one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Send,
    Receive,
    /// Request/response: sends requests and times the answers (the client).
    Request,
    /// Request/response: answers requests (the server).
    Respond,
}

/// What a test does on its flows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Bulk transfer: bytes as fast as the flow takes them (or paced).
    #[default]
    Stream,
    /// Request/response on long-lived flows (`linerate rr`).
    Rr,
    /// Connect, request, response, close, per transaction (`linerate crr`).
    Crr,
}

/// The parameters of a request/response test (`rr`, `crr`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RrConfig {
    /// Bytes per request and per response.
    pub request: u64,
    pub response: u64,
    /// Closed loop: transactions kept in flight per flow.
    pub outstanding: u32,
    /// Open loop: transactions due per second per flow, each timed from when it was due;
    /// `outstanding` then caps the transactions in flight.
    pub rate_tps: Option<f64>,
    /// SO_BUSY_POLL in microseconds on every socket of the test, both ends.
    pub busy_poll_us: Option<u32>,
    /// CPUs the client's workers are pinned to, worker i on `cpus[i % len]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<usize>,
    /// Bulk TCP flows run beside the transactions, client to server (`--load`).
    #[serde(default)]
    pub load: u32,
}

/// The fully resolved configuration of a stream test: every parameter that shaped the
/// figures, defaults filled in. Sent to the server as the test specification and kept in
/// the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestConfig {
    /// "tcp" or "udp".
    pub protocol: String,
    /// The server as the user named it, or "loopback" for the in-process server.
    pub target: String,
    pub port: u16,
    pub direction: Direction,
    /// Flows per direction (bidir opens twice this many connections).
    pub parallel: u32,
    /// Client worker threads.
    pub threads: u32,
    /// Measured seconds, after the omitted warm-up.
    pub time_s: f64,
    /// Warm-up seconds excluded from the summary.
    pub omit_s: f64,
    /// Interval report period in seconds; 0 turns interval reports off.
    pub interval_s: f64,
    /// Bytes per write call.
    pub length: u64,
    /// Requested socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends; `None` leaves
    /// the kernel's autotuning on.
    pub window: Option<u64>,
    /// Requested TCP maximum segment size (TCP_MAXSEG) on the client's sockets.
    pub mss: Option<u32>,
    pub nodelay: bool,
    /// Congestion control algorithm asked for on both ends.
    pub congestion: Option<String>,
    /// Per-flow pacing target in bits per second; `None` sends as fast as possible.
    pub rate_bps: Option<u64>,
    /// UDP: per-flow pacing target in datagrams per second (sets `rate_bps` from the
    /// datagram size when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<u64>,
    /// UDP: senders hand the kernel runs of datagrams in one buffer to segment (UDP GSO).
    #[serde(default)]
    pub gso: bool,
    /// UDP: receivers take runs of datagrams the kernel coalesced, in one buffer (UDP GRO).
    #[serde(default)]
    pub gro: bool,
    /// Keep per-flow interval figures.
    pub per_flow: bool,
    pub connect_timeout_s: f64,
    /// Stream (bulk), rr or crr.
    #[serde(default)]
    pub workload: Workload,
    /// Request/response parameters (rr and crr tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<RrConfig>,
}

impl TestConfig {
    /// Connections the test opens: `parallel`, or twice that for bidir.
    pub fn connections(&self) -> u32 {
        match self.direction {
            Direction::Bidir => self.parallel * 2,
            _ => self.parallel,
        }
    }

    /// The test's name in results: "tcp_stream", "udp_stream", "tcp_rr", "udp_rr", "tcp_crr".
    pub fn test_name(&self) -> String {
        let kind = match self.workload {
            Workload::Stream => "stream",
            Workload::Rr => "rr",
            Workload::Crr => "crr",
        };
        format!("{}_{kind}", self.protocol)
    }

    /// One line for logs and banners: "TCP, 4 flows, client sends, 10 s, 128K writes".
    pub fn describe(&self) -> String {
        if let Some(rr) = self
            .rr
            .as_ref()
            .filter(|_| self.workload != Workload::Stream)
        {
            return self.describe_rr(rr);
        }
        let direction = match self.direction {
            Direction::Forward => "client sends",
            Direction::Reverse => "server sends",
            Direction::Bidir => "both send",
        };
        let warm_up = if self.omit_s > 0.0 {
            format!(" after {} s warm-up", self.omit_s)
        } else {
            String::new()
        };
        let size = if self.protocol == "udp" {
            let pace = match self.rate_bps {
                Some(rate) => format!(
                    " at {} per flow",
                    crate::units::format_rate(rate as f64, crate::units::Scale::Adaptive)
                ),
                None => " unpaced".to_string(),
            };
            let offload = match (self.gso, self.gro) {
                (true, true) => ", GSO and GRO",
                (true, false) => ", GSO",
                (false, true) => ", GRO",
                (false, false) => "",
            };
            format!("{}-byte datagrams{pace}{offload}", self.length)
        } else {
            format!("{} writes", crate::units::format_size_compact(self.length))
        };
        format!(
            "{}, {} flow{}, {direction}, {} s{warm_up}, {size}",
            self.protocol.to_uppercase(),
            self.parallel,
            if self.parallel == 1 { "" } else { "s" },
            self.time_s,
        )
    }

    fn describe_rr(&self, rr: &RrConfig) -> String {
        let pacing = match rr.rate_tps {
            Some(rate) => format!(
                "open loop at {} transactions/s per flow (at most {} in flight)",
                crate::units::format_count(rate),
                rr.outstanding
            ),
            None => format!("closed loop, {} in flight per flow", rr.outstanding),
        };
        let kind = if self.workload == Workload::Crr {
            "connect/request/response/close"
        } else {
            "request/response"
        };
        let warm_up = if self.omit_s > 0.0 {
            format!(" after {} s warm-up", self.omit_s)
        } else {
            String::new()
        };
        let load = if rr.load > 0 {
            format!(
                ", beside {} bulk TCP flow{}",
                rr.load,
                if rr.load == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        format!(
            "{} {kind}, {}-byte requests, {}-byte responses, {} flow{}, {pacing}, {} s{warm_up}{load}",
            self.protocol.to_uppercase(),
            rr.request,
            rr.response,
            self.parallel,
            if self.parallel == 1 { "" } else { "s" },
            self.time_s,
        )
    }

    /// The direction of connection `index` (0-based, in opening order).
    pub fn flow_direction(&self, index: u32) -> Direction {
        match self.direction {
            Direction::Bidir if index >= self.parallel => Direction::Reverse,
            Direction::Bidir => Direction::Forward,
            other => other,
        }
    }
}

/// Facts about one host that travel with every figure (MEASUREMENT.md rule 13).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cores: u32,
    /// Nominal CPU frequency in MHz where the kernel tells it.
    pub cpu_mhz: Option<f64>,
    /// The linerate build on that host.
    pub software: String,
}

/// CPU use on one host over the measurement window (MEASUREMENT.md rule 4).
///
/// The `*_pct` system-wide figures are percentages of all cores together (as `mpstat`'s
/// "all" row); `busiest_core_pct` is of one core; `process_pct` is the test's own threads
/// on that host as a percentage of one core (as `top` shows a process).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUsage {
    pub cores: u32,
    pub window_s: f64,
    pub user_pct: f64,
    pub nice_pct: f64,
    pub system_pct: f64,
    pub irq_pct: f64,
    pub softirq_pct: f64,
    pub steal_pct: f64,
    pub iowait_pct: f64,
    /// Everything but idle and iowait.
    pub busy_pct: f64,
    pub busiest_core: u32,
    pub busiest_core_pct: f64,
    pub per_core_busy_pct: Vec<f64>,
    pub process_pct: f64,
    /// CPU seconds of the test's own threads (user + system).
    pub process_cpu_s: f64,
    /// The user-mode part of `process_pct` (the rest is system time).
    #[serde(default)]
    pub process_user_pct: f64,
}

impl CpuUsage {
    /// Busy CPU time on the whole host over the window, in microseconds.
    pub fn busy_us(&self) -> f64 {
        self.busy_pct / 100.0 * f64::from(self.cores) * self.window_s * 1e6
    }
}

/// The kernel's UDP counters (`/proc/net/snmp`, the `Udp:` rows), host-wide.
///
/// Read at the window's edges beside the tool's own counts (MEASUREMENT.md rule 7), so a
/// user can tell a receiver that overflowed its socket buffer (`RcvbufErrors`) from a
/// lossy path, and a sender whose datagrams the kernel refused (`SndbufErrors`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpCounters {
    pub in_datagrams: u64,
    pub no_ports: u64,
    pub in_errors: u64,
    pub out_datagrams: u64,
    pub rcvbuf_errors: u64,
    pub sndbuf_errors: u64,
}

impl UdpCounters {
    /// The counts between `self` (earlier) and `later`.
    pub fn delta(&self, later: &UdpCounters) -> UdpCounters {
        UdpCounters {
            in_datagrams: later.in_datagrams.saturating_sub(self.in_datagrams),
            no_ports: later.no_ports.saturating_sub(self.no_ports),
            in_errors: later.in_errors.saturating_sub(self.in_errors),
            out_datagrams: later.out_datagrams.saturating_sub(self.out_datagrams),
            rcvbuf_errors: later.rcvbuf_errors.saturating_sub(self.rcvbuf_errors),
            sndbuf_errors: later.sndbuf_errors.saturating_sub(self.sndbuf_errors),
        }
    }
}

/// Figures of one nominal interval as one side counted them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideInterval {
    pub start: f64,
    pub end: f64,
    /// Inside the `--omit` warm-up.
    pub omitted: bool,
    pub sent_bytes: u64,
    pub sent_bps: f64,
    pub received_bytes: u64,
    pub received_bps: f64,
    pub retransmits: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<Vec<FlowInterval>>,
    /// UDP tests: datagram counts in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpCounts>,
    /// Request/response tests, on the requesting side: the interval's transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<RrInterval>,
}

/// The transactions of one interval, as the requesting side timed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RrInterval {
    pub transactions: u64,
    pub transactions_per_s: f64,
    /// Round-trip percentiles of the interval's transactions, in microseconds.
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// crr: the 99th percentile of the connects alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_p99_us: Option<f64>,
}

/// Datagram counts of one side over a span of time (an interval or the window), summed
/// over its flows; each count comes from the side that can know it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpCounts {
    /// Datagrams handed to the kernel by senders.
    pub sent: u64,
    /// Send calls the kernel refused (EAGAIN, ENOBUFS), counted per call.
    pub send_errors: u64,
    /// Distinct test datagrams received.
    pub received: u64,
    /// Sequence gaps not filled by a late datagram.
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// Datagrams that were not the flow's own (too short, another flow or test).
    pub foreign: u64,
    /// RFC 3550 jitter in milliseconds: the mean over receiving flows of each flow's
    /// jitter at the end of the span.
    pub jitter_ms: f64,
}

impl UdpCounts {
    /// Adds another flow's (or side's) counts; jitter is averaged by the caller.
    pub fn add(&mut self, other: &UdpCounts) {
        self.sent += other.sent;
        self.send_errors += other.send_errors;
        self.received += other.received;
        self.lost += other.lost;
        self.out_of_order += other.out_of_order;
        self.duplicates += other.duplicates;
        self.foreign += other.foreign;
    }

    /// Lost as a percentage of the datagrams that should have arrived.
    pub fn loss_pct(&self) -> f64 {
        let expected = self.received + self.lost;
        if expected > 0 {
            self.lost as f64 * 100.0 / expected as f64
        } else {
            0.0
        }
    }
}

/// One flow's figures in one interval, from one side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowInterval {
    pub id: u32,
    pub sent_bytes: u64,
    pub sent_bps: f64,
    pub received_bytes: u64,
    pub received_bps: f64,
    pub retransmits: u64,
}

/// What one side saw of one flow (one TCP connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSide {
    pub id: u32,
    pub direction: Direction,
    pub role: Role,
    pub local_addr: String,
    pub remote_addr: String,
    /// Bytes moved inside the measurement window.
    pub window_bytes: u64,
    /// The window as this side's clock measured it, in seconds.
    pub window_s: f64,
    /// Bytes over the connection's whole life: warm-up, window and the drain after it.
    pub bytes_total: u64,
    /// Segments retransmitted inside the window (TCP_INFO, sender only).
    pub retransmits: u64,
    /// Socket buffer sizes the kernel granted (it doubles requests and caps them).
    pub sndbuf: u64,
    pub rcvbuf: u64,
    /// TCP_INFO's send MSS at the end of the window.
    pub mss: u32,
    /// Smoothed RTT in microseconds (TCP_INFO) at the end of the window.
    pub rtt_us: u32,
    pub congestion: String,
    /// Why the flow failed, if it did.
    pub error: Option<String>,
    /// UDP flows: datagram counts over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpCounts>,
    /// UDP flows: datagrams over the flow's whole life (sent, or distinct received).
    #[serde(default)]
    pub datagrams_total: u64,
    /// Request/response flows: transactions completed (requester) or answered
    /// (responder) inside the window, and over the flow's life.
    #[serde(default)]
    pub transactions: u64,
    #[serde(default)]
    pub transactions_total: u64,
}

impl FlowSide {
    pub fn window_bps(&self) -> f64 {
        if self.window_s > 0.0 {
            self.window_bytes as f64 * 8.0 / self.window_s
        } else {
            0.0
        }
    }
}

/// Everything one side measured, on its own clock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    pub host: HostFacts,
    pub cpu: CpuUsage,
    pub intervals: Vec<SideInterval>,
    pub flows: Vec<FlowSide>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// UDP tests: the host's kernel UDP counters over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_kernel: Option<UdpCounters>,
    /// Request/response tests, on the requesting side: what the requesters timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr: Option<RrSide>,
}

/// The requesting side's timing of a request/response test over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RrSide {
    /// Round trips of the window's transactions, merged over workers.
    pub latency: crate::latency::LatencySummary,
    /// crr: the connects alone.
    pub connect: Option<crate::latency::LatencySummary>,
    /// Open loop: requests that fell due but were never sent (held back by the cap on
    /// transactions in flight), over the test.
    pub owed: u64,
    /// UDP: transactions given up after no answer within the loss timeout, in the window;
    /// answers that came after that.
    pub lost: u64,
    pub late: u64,
    /// crr: connects refused with EADDRNOTAVAIL (no free local port), and the sockets
    /// in TIME_WAIT on this host at the end of the window.
    pub port_exhausted: u64,
    pub time_wait: Option<u64>,
}

/// A pair of figures, one per end of the test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerSide<T> {
    /// The client (where linerate was run).
    pub local: T,
    /// The server.
    pub remote: T,
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
    /// CPU microseconds (whole host, all cores) per KiB received, per side.
    pub service_demand_us_per_kb: PerSide<f64>,
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
    pub send_errors: u64,
    pub loss_pct: f64,
    pub jitter_ms: f64,
    /// Over the whole test, warm-up and drain included: sent minus distinct received.
    /// Catches datagrams lost after the last one that arrived, which no gap shows.
    pub lost_total: u64,
    /// The kernel's own UDP counters over the window on each host.
    pub kernel: PerSide<UdpCounters>,
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
}

/// The figure that answers a test's question, in one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Headline {
    /// Receiver goodput in bit/s (stream tests).
    ReceiverBps,
    /// Transactions per second over all flows (rr and crr tests).
    TransactionsPerS,
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
        }
    }

    /// In words, for tables: "receiver goodput", "transactions/s".
    pub fn label(self) -> &'static str {
        match self {
            Headline::ReceiverBps => "receiver goodput",
            Headline::TransactionsPerS => "transactions/s",
        }
    }

    /// The figure in `summary`.
    pub fn value(self, summary: &Summary) -> f64 {
        match self {
            Headline::ReceiverBps => summary.receiver_bps,
            Headline::TransactionsPerS => summary.rr.as_ref().map_or(0.0, |r| r.transactions_per_s),
        }
    }

    /// `value` with its unit: "9.41 Gbits/sec", "52.3k transactions/s".
    pub fn format(self, value: f64, scale: crate::units::Scale) -> String {
        match self {
            Headline::ReceiverBps => crate::units::format_rate(value, scale),
            Headline::TransactionsPerS => {
                format!("{} transactions/s", crate::units::format_count(value))
            }
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
