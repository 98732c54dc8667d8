//! What the host's kernel saw over a test's measurement window (`--observe`): deltas of
//! its own counters, beside the settings that decide a result. One end's view; a report
//! carries the client's as `observe.local` and the server's as `observe.remote`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One end's host over the measurement window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Seconds between the two readings (the measurement window).
    pub window_s: f64,
    /// Milliseconds the two readings took on the measuring thread: the cost of observing.
    #[serde(default)]
    pub read_ms: f64,
    /// Per CPU: network softirqs, interrupt and softirq time, softnet drops.
    pub cpus: Vec<CpuNetwork>,
    /// Interrupt sources that fired in the window, grouped by device and queue.
    pub interrupts: Vec<InterruptSource>,
    /// Network interfaces that moved packets in the window (loopback included).
    pub interfaces: Vec<InterfaceView>,
    /// Protocol counters (nstat's names, e.g. `TcpRetransSegs`) that moved: the delta.
    pub counters: BTreeMap<String, u64>,
    pub settings: HostSettings,
    /// What is unusual, in words (the text report's "Host" block).
    pub unusual: Vec<String>,
}

/// One CPU over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuNetwork {
    pub cpu: u32,
    /// NET_RX and NET_TX softirqs raised (/proc/softirqs).
    pub net_rx: u64,
    pub net_tx: u64,
    /// Share of the window in hard interrupts and in softirqs (/proc/stat), percent.
    pub irq_pct: f64,
    pub softirq_pct: f64,
    /// /proc/net/softnet_stat: packets processed, dropped (backlog full) and the times
    /// the budget ran out with work left (time_squeeze).
    pub processed: u64,
    pub dropped: u64,
    pub squeezed: u64,
}

/// Interrupts of one source (a device's queue, or a system interrupt) in the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterruptSource {
    /// The kernel's description, less the queue number (e.g. `virtio2-input`).
    pub device: String,
    /// The queue number, where the description ends in one.
    pub queue: Option<u32>,
    /// The interface the source belongs to, where one matches.
    pub interface: Option<String>,
    pub total: u64,
    /// Indexed by CPU.
    pub per_cpu: Vec<u64>,
}

impl InterruptSource {
    /// The CPU that took most of this source's interrupts, and its share.
    pub fn busiest_cpu(&self) -> Option<(u32, f64)> {
        let (cpu, count) = self.per_cpu.iter().enumerate().max_by_key(|(_, c)| **c)?;
        (self.total > 0).then(|| (cpu as u32, *count as f64 / self.total as f64))
    }
}

/// One interface over the window, and its settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceView {
    pub name: String,
    /// The driver (from the device's `driver` link), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    pub mtu: u64,
    /// Link speed in Mbit/s, where the driver reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<u64>,
    /// /sys/class/net/IF/statistics deltas.
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// Receive and transmit queues: packets per queue where the driver counts them
    /// (ethtool statistics), the share of the interface's packets, the CPU that served
    /// the queue's interrupts, RPS/XPS masks.
    pub rx_queues: Vec<QueueView>,
    pub tx_queues: Vec<QueueView>,
    /// Offloads by ethtool's feature names (`tcp-segmentation-offload`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub offloads: BTreeMap<String, bool>,
    /// Ring sizes: current and maximum, receive and transmit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rings: Option<Rings>,
    /// Interfaces this one sits on (a bridge port, a vlan's or macvlan's parent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lower: Vec<String>,
    /// The root qdisc (`tc qdisc show`'s first word after "qdisc").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qdisc: Option<String>,
    /// Interrupt coalescing (ethtool's `-c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<Coalescing>,
}

/// How long a NIC holds packets before it interrupts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coalescing {
    pub rx_usecs: u32,
    pub tx_usecs: u32,
    pub adaptive_rx: bool,
}

/// One CPU idle state (cpuidle): a deeper state saves power and takes longer to leave.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleState {
    pub name: String,
    /// Exit latency, microseconds.
    pub latency_us: u64,
    pub disabled: bool,
}

/// One queue of an interface over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueView {
    pub queue: u32,
    /// Packets in the window, where the driver counts per queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// This queue's share of the interface's per-queue packets, 0..1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// The CPU that took most of this queue's interrupts in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_cpu: Option<u32>,
    /// RPS (receive) or XPS (transmit) CPU mask as the kernel prints it; "0" is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<String>,
}

/// NIC ring sizes (ethtool's ring parameters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rings {
    pub rx: u32,
    pub rx_max: u32,
    pub tx: u32,
    pub tx_max: u32,
}

/// Host settings that decide a network result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSettings {
    /// net.ipv4.tcp_congestion_control.
    pub congestion_control: Option<String>,
    /// net.ipv4.tcp_rmem and tcp_wmem: min, default, max bytes.
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_wmem: Option<[u64; 3]>,
    /// net.core.rmem_max and wmem_max: the most SO_RCVBUF/SO_SNDBUF may ask.
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    /// net.core.netdev_max_backlog.
    pub netdev_max_backlog: Option<u64>,
    /// Each CPU's frequency governor, where cpufreq is present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub governors: Vec<String>,
    /// Whether an irqbalance process runs.
    pub irqbalance: bool,
    /// net.core.rps_sock_flow_entries: RFS's table (0: RFS off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps_sock_flow_entries: Option<u64>,
    /// CPU 0's idle states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle_states: Vec<IdleState>,
}

/// One thing `linerate doctor` found, ranked by its likely effect on a result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// 1 is the finding most likely to move a result.
    pub rank: u32,
    /// A short name: "receive window", "offloads", ...
    pub topic: String,
    /// What was found, in one sentence.
    pub finding: String,
    /// The readings it rests on.
    pub evidence: Vec<String>,
    /// The one command that changes it.
    pub command: String,
    /// The figure that would move, and how far.
    pub effect: String,
    /// Sysctls `--apply` would set: (name as sysctl spells it, new value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sysctls: Vec<(String, String)>,
}

/// What `linerate doctor` knows of the path to a server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PathFacts {
    /// The server as named, and its address.
    pub target: String,
    /// The least of several TCP handshake times: one round trip, milliseconds.
    pub rtt_ms: f64,
    /// The interface the route to it leaves by, and that interface's MTU.
    pub interface: Option<String>,
    pub interface_mtu: Option<u64>,
    /// The path MTU the kernel holds for the route after a probe (IP_MTU).
    pub path_mtu: Option<u64>,
    /// What a short exchange of small UDP requests and answers lost on the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<LossProbe>,
    /// Why the path's loss was not measured, when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_unprobed: Option<String>,
}

/// A loss probe: paced UDP transactions (a small request, a small answer) to the server,
/// counted by the client; a transaction is lost when either datagram is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LossProbe {
    /// Transactions answered, and given up after the loss timeout and never answered.
    pub answered: u64,
    pub lost: u64,
    /// Answered after the loss timeout: not lost, only late (a busy host's stall).
    #[serde(default)]
    pub late: u64,
    /// The median round trip of the answered ones, milliseconds.
    pub rtt_median_ms: f64,
}

impl LossProbe {
    /// The share of transactions lost.
    pub fn transaction_loss(&self) -> f64 {
        let sent = self.answered + self.late + self.lost;
        if sent == 0 {
            0.0
        } else {
            self.lost as f64 / sent as f64
        }
    }

    /// The loss each way, were both ways to lose alike: a transaction survives when both
    /// of its datagrams do, so (1 - p)² = 1 - transaction loss.
    pub fn each_way(&self) -> f64 {
        1.0 - (1.0 - self.transaction_loss()).sqrt()
    }
}

/// `linerate doctor`'s answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathFacts>,
    /// The rate the window findings are held against, bits per second.
    pub target_bps: f64,
    pub findings: Vec<Finding>,
}
