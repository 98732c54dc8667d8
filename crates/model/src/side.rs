//! What one end of a test measured on its own clock (the client's side, or the server's
//! sent back over the control connection), and the host facts that travel with it.

use crate::{Direction, Role};
use serde::{Deserialize, Serialize};

/// Facts about one host that travel with every figure (docs/measurement.md 5).
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
    /// The emulated path the host's traffic crossed, when a `linerate lab` (or a user
    /// beside `linerate impair`) said so through `LINERATE_PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Box<crate::PathFacts>>,
    /// The running kernel's boot id (/proc/sys/kernel/random/boot_id): two ends with the
    /// same one share a kernel and its CPUs (one host, network namespaces included), so
    /// their system-wide CPU figures are one and the same.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot_id: String,
}

impl HostFacts {
    /// What a keyed server tells before its peer proved the key: its software alone.
    pub fn software_only(&self) -> HostFacts {
        HostFacts {
            software: self.software.clone(),
            ..HostFacts::default()
        }
    }

    /// Whether `other` runs on this host's kernel (and so on its CPUs).
    pub fn same_kernel(&self, other: &HostFacts) -> bool {
        !self.boot_id.is_empty() && self.boot_id == other.boot_id
    }
}

/// CPU use on one host over the measurement window (docs/measurement.md 4).
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
    /// Whether anything was read: a run interrupted before its window's last reading has
    /// no CPU figures, and its zeros are not a measurement (a comparison or a line that
    /// showed them would say "0.0 %").
    pub fn measured(&self) -> bool {
        self.window_s > 0.0 || self.process_cpu_s > 0.0 || self.process_pct > 0.0
    }
}

impl CpuUsage {
    /// Busy CPU time on the whole host over the window, in microseconds.
    pub fn busy_us(&self) -> f64 {
        self.busy_pct / 100.0 * f64::from(self.cores) * self.window_s * 1e6
    }
}

/// The kernel's UDP counters (`/proc/net/snmp`, the `Udp:` rows), host-wide.
///
/// Read at the window's edges beside the tool's own counts (docs/measurement.md 9), so a
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
    /// `--load`: the bulk flows' receiver goodput over the same interval, bits a second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_bps: Option<f64>,
}

/// Datagram counts of one side over a span of time (an interval or the window), summed
/// over its flows; each count comes from the side that can know it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpCounts {
    /// Datagrams handed to the kernel by senders.
    pub sent: u64,
    /// Datagrams the kernel refused because the sender's socket buffer was full
    /// (EAGAIN); each was sent again under the same sequence number.
    pub send_errors: u64,
    /// Datagrams the sending host's own queue (qdisc or device) dropped on the way out
    /// (ENOBUFS); each was sent again under the same sequence number, so none of them is
    /// loss between the hosts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub qdisc_drops: u64,
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
    /// Sum of in-order datagrams' transit times (receiver's wall clock at arrival minus
    /// the sender's at sending), milliseconds, and how many were summed: their mean is the
    /// one-way delay where the two clocks agree (one host, or synchronised hosts).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub transit_sum_ms: f64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub transit_samples: u64,
    /// Sequence gaps when they opened: a run of consecutive losses counts once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loss_events: u64,
    /// Calls (`--pattern voip`): datagrams that arrived after the receiver's jitter
    /// buffer would have played them (among `received`; a call counts them lost).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late: u64,
    /// Calls: runs of consecutive datagrams not heard (lost or late), a run of late and
    /// lost together once (0 from a peer that does not count them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unplayed_runs: u64,
    /// Calls: the datagrams the jitter buffer judged and the sum of its depth at each,
    /// milliseconds (an adaptive buffer's mean depth is their quotient).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub playout_judged: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub playout_depth_sum_ms: f64,
    /// Paced senders: microseconds the sender was late past its burst (its pacer's credit
    /// overflowed while it did not run). An interval short of the rate by this much lost
    /// it to the sending host's scheduler, not to the pacer or the path.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sender_late_us: u64,
    /// Calls whose codec has voice activity detection: the frames its sender did not send
    /// because its speaker paused (crate::call::TalkSpurts); not among `sent`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub silent: u64,
    /// iperf 2's framing: the final datagrams (its end marker, numbered negative) the
    /// kernel took after the test's own; not among `sent`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub finals: u64,
}

impl UdpCounts {
    /// Adds another flow's (or side's) counts; jitter is averaged by the caller.
    pub fn add(&mut self, other: &UdpCounts) {
        self.sent += other.sent;
        self.send_errors += other.send_errors;
        self.qdisc_drops += other.qdisc_drops;
        self.received += other.received;
        self.lost += other.lost;
        self.out_of_order += other.out_of_order;
        self.duplicates += other.duplicates;
        self.foreign += other.foreign;
        self.transit_sum_ms += other.transit_sum_ms;
        self.transit_samples += other.transit_samples;
        self.loss_events += other.loss_events;
        self.late += other.late;
        self.unplayed_runs += other.unplayed_runs;
        self.playout_judged += other.playout_judged;
        self.playout_depth_sum_ms += other.playout_depth_sum_ms;
        self.sender_late_us += other.sender_late_us;
        self.silent += other.silent;
        self.finals += other.finals;
    }

    /// The mean one-way delay of the span's in-order datagrams, milliseconds (meaningful
    /// only where both ends' clocks agree).
    pub fn one_way_delay_ms(&self) -> Option<f64> {
        (self.transit_samples > 0).then(|| self.transit_sum_ms / self.transit_samples as f64)
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
    /// UDP: datagrams this side sent or received in the interval.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sent_datagrams: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub received_datagrams: u64,
    /// UDP receivers: datagrams lost in the interval, and the jitter at its end.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_datagrams: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub jitter_ms: f64,
    /// A TCP flow's state at the interval's end (TCP_INFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSnapshot>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn is_zero_f64(value: &f64) -> bool {
    *value == 0.0
}

/// A TCP flow's state as TCP_INFO tells it at one moment: what iperf3 reports per
/// interval (docs/results.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpSnapshot {
    /// The congestion window in bytes (segments times the sender's MSS).
    pub snd_cwnd_bytes: u64,
    /// The peer's advertised receive window in bytes (0 where the kernel does not say).
    pub snd_wnd_bytes: u64,
    /// Smoothed round-trip time and its variation, in microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// The path MTU the connection uses.
    pub pmtu: u32,
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
    /// A marked test (`--dscp`, `--ecn`): the datagrams by the TOS byte or traffic class
    /// they arrived with, over the flow's life. UDP: each receiving flow's. QUIC: a
    /// worker's first flow carries everything its socket received (data,
    /// acknowledgements, handshake), which travelled towards this end, whatever the
    /// flow's role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<crate::marks::ClassCount>>,
    /// Video flows: the frames this end sent or put back together (crate::video).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<crate::video::FrameCounts>,
    /// UDP receivers that time every datagram (a call's, a served iperf 2
    /// `--trip-times` test's): the one-way delays' distribution, microseconds, with its
    /// buckets (true where the two ends' clocks agree, as `udp`'s mean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_way_delay_us: Option<crate::latency::LatencySummary>,
    /// TCP senders: the connection's handshake negotiated ECN (TCP_INFO).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ecn: bool,
    /// MPTCP connections (`--mptcp`): its subflows, or that it fell back to plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpFacts>,
}

/// What an MPTCP connection was at the end (MPTCP_INFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MptcpFacts {
    /// Subflows open besides the first (mptcpi_subflows), plus the first.
    pub subflows: u8,
    /// The peer did not speak MPTCP: a plain TCP connection (mptcpi_flags' fallback).
    pub fallback: bool,
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
    /// `--observe`: this end's host over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe: Option<crate::observe::Observation>,
    /// Encrypted tests (`--tls`, `--quic`): what this end's encryption was and cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crypto: Option<CryptoSide>,
}

/// One end's encryption over a test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CryptoSide {
    /// "tls" (TCP) or "quic".
    pub protocol: String,
    /// The negotiated TLS 1.3 suite, by its IANA name.
    pub suite: String,
    /// Connections whose records the kernel sealed and opened (kTLS), of `connections`.
    pub ktls_connections: u32,
    pub connections: u32,
    /// Handshake time over the connections: mean and longest, in milliseconds.
    pub handshake_ms: f64,
    pub handshake_max_ms: f64,
    /// Seconds this end spent sealing and opening records over the window (user-space
    /// TLS, timed around the calls). `None` where the kernel did it (kTLS: inside system
    /// time) or the stack does not separate it (QUIC).
    pub crypto_cpu_s: Option<f64>,
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

/// A native test a server served to its end: who asked, what, and the server's side of it
/// (what `serve --metrics` shows).
#[derive(Debug, Clone)]
pub struct ServedTest {
    pub peer: std::net::SocketAddr,
    /// The address the test's control connection arrived on.
    pub local: std::net::IpAddr,
    pub config: crate::TestConfig,
    pub side: SideResult,
    /// When it ended, Unix seconds.
    pub ended_at: f64,
}

/// A profile group an agent ran to its end for a controller: a mesh's stream, rr or crr
/// job, or a group of a uperf profile (what `serve --metrics` shows of an agent's work).
/// The agent that runs a group counts it; the peer's mirror does not, so a job is
/// counted once, by its source, with the bytes its peer received.
#[derive(Debug, Clone)]
pub struct ServedGroup {
    /// This host's address on the controller's connection.
    pub local: std::net::IpAddr,
    /// The host the group's connections went to, as the profile names it (`host` or
    /// `host:port`); `None` when it dialled no agent.
    pub peer: Option<String>,
    /// What its timed transaction is: "stream" (bytes one way), "rr" (a request and its
    /// answer on an open connection), "crr" (a connection each), or "profile".
    pub kind: &'static str,
    /// A stream's way: its bytes went to the peer (forward) or came from it (reverse).
    pub sends: bool,
    /// "tcp", "udp" or "ssl", as the profile names its connections.
    pub protocol: &'static str,
    /// Which of `result.transactions` is timed: the one with the most timed iterations.
    pub timed: Option<usize>,
    pub result: crate::profile::GroupResult,
    /// When it ended, Unix seconds.
    pub ended_at: f64,
}

/// Something a server ran to its end, for `serve --metrics`.
#[derive(Debug, Clone, Copy)]
pub enum Served<'a> {
    /// A native test a client asked for.
    Test(&'a ServedTest),
    /// A group an agent ran for a controller.
    Group(&'a ServedGroup),
    /// An ndt7 subtest (`serve --ndt7`), ended at `ended_at` (Unix seconds).
    Ndt7 {
        subtest: &'a crate::ndt7::SubtestResult,
        ended_at: f64,
    },
}
