//! `--observe`: two readings of the host's own counters around the measurement window,
//! and what moved between them ([`observe`]), with what is unusual said in words
//! ([`unusual`]). Every reader works on a [`Root`], so another host's files can be
//! fixtures; every parser takes text and bounds what it keeps.

use crate::source::{exists, Root};
use crate::CpuSnapshot;
use linerate_model::observe::{
    Coalescing, CpuNetwork, HostSettings, IdleState, InterfaceView, InterruptSource, Observation,
    QueueView, Rings,
};
use std::collections::BTreeMap;

/// More CPUs, interrupt lines, interfaces or queues than any host has: the rest is not
/// kept (a hostile fixture or a broken file cannot make a reading grow without bound).
const MAX_CPUS: usize = 4096;
const MAX_LINES: usize = 16_384;
const MAX_INTERFACES: usize = 256;
const MAX_QUEUES: u32 = 1024;

/// One interrupt line of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptLine {
    /// The IRQ number or the kernel's name for it (`LOC`, `RES`, ...).
    pub irq: String,
    pub description: String,
    pub per_cpu: Vec<u64>,
}

/// Parses /proc/interrupts: a header naming the CPUs, then a line per source.
pub fn parse_interrupts(text: &str) -> Vec<InterruptLine> {
    let mut lines = text.lines();
    let cpus = lines
        .next()
        .map_or(0, |h| h.split_whitespace().count())
        .min(MAX_CPUS);
    let mut out = Vec::new();
    for line in lines.take(MAX_LINES) {
        let Some((irq, rest)) = line.split_once(':') else {
            continue;
        };
        let irq = irq.trim().to_string();
        let mut words = rest.split_whitespace().peekable();
        let mut per_cpu = Vec::with_capacity(cpus);
        while per_cpu.len() < cpus {
            match words.peek().and_then(|w| w.parse::<u64>().ok()) {
                Some(count) => {
                    per_cpu.push(count);
                    words.next();
                }
                None => break,
            }
        }
        let rest: Vec<&str> = words.collect();
        let description = if irq.bytes().all(|b| b.is_ascii_digit()) {
            // chip, hardware IRQ and trigger, then the action's name: keep the name.
            rest.last().copied().unwrap_or("").to_string()
        } else {
            rest.join(" ")
        };
        out.push(InterruptLine {
            irq,
            description,
            per_cpu,
        });
    }
    out
}

/// Splits an interrupt's name into device and queue: `virtio2-input.0` is
/// (`virtio2-input`, 0), `eth0-TxRx-3` is (`eth0-TxRx`, 3), `mlx5_comp7@pci:0000:08:00.0`
/// is (`mlx5_comp`, 7). A name without a trailing number has no queue.
pub fn device_and_queue(description: &str) -> (String, Option<u32>) {
    let name = description.split('@').next().unwrap_or(description);
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits > 4 || digits == name.len() {
        return (name.to_string(), None);
    }
    let (head, number) = name.split_at(name.len() - digits);
    let device = head.trim_end_matches(['-', '.', '_', ':']);
    if device.is_empty() {
        return (name.to_string(), None);
    }
    (device.to_string(), number.parse().ok())
}

/// /proc/softirqs: NET_RX and NET_TX counts per CPU.
pub fn parse_net_softirqs(text: &str) -> (Vec<u64>, Vec<u64>) {
    let row = |name: &str| -> Vec<u64> {
        text.lines()
            .find_map(|line| {
                let (label, counts) = line.split_once(':')?;
                (label.trim() == name).then(|| {
                    counts
                        .split_whitespace()
                        .take(MAX_CPUS)
                        .filter_map(|c| c.parse().ok())
                        .collect()
                })
            })
            .unwrap_or_default()
    };
    (row("NET_RX"), row("NET_TX"))
}

/// One CPU's row of /proc/net/softnet_stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Softnet {
    pub cpu: u32,
    pub processed: u64,
    pub dropped: u64,
    pub squeezed: u64,
}

/// /proc/net/softnet_stat: hexadecimal columns; the CPU is the 13th column where the
/// kernel prints it (5.10 and later), else the row's position.
pub fn parse_softnet(text: &str) -> Vec<Softnet> {
    text.lines()
        .take(MAX_CPUS)
        .enumerate()
        .filter_map(|(row, line)| {
            let fields: Vec<u64> = line
                .split_whitespace()
                .map(|f| u64::from_str_radix(f, 16))
                .collect::<Result<_, _>>()
                .ok()?;
            let cpu = match fields.get(12) {
                Some(&cpu) if fields.len() >= 13 => u32::try_from(cpu).ok()?,
                _ => row as u32,
            };
            Some(Softnet {
                cpu,
                processed: *fields.first()?,
                dropped: *fields.get(1)?,
                squeezed: *fields.get(2)?,
            })
        })
        .collect()
}

/// /proc/net/snmp and /proc/net/netstat: a names line and a values line per section,
/// named as nstat names them (section + field: `TcpRetransSegs`, `TcpExtTCPTimeouts`).
/// /proc/net/snmp6's `Name value` lines are taken as they are.
pub fn parse_counters(text: &str, into: &mut BTreeMap<String, i64>) {
    let lines: Vec<&str> = text.lines().take(MAX_LINES).collect();
    if lines.iter().all(|l| !l.contains(':')) {
        for line in &lines {
            let mut words = line.split_whitespace();
            if let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) {
                if let Ok(value) = value.parse() {
                    into.insert(name.to_string(), value);
                }
            }
        }
        return;
    }
    for pair in lines.windows(2) {
        let (Some((section, names)), Some((section2, values))) =
            (pair[0].split_once(':'), pair[1].split_once(':'))
        else {
            continue;
        };
        if section != section2 || names.split_whitespace().any(|w| w.parse::<i64>().is_ok()) {
            continue;
        }
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(value) = value.parse() {
                into.insert(format!("{section}{name}"), value);
            }
        }
    }
}

/// A sysctl of three numbers (tcp_rmem).
fn triple(text: &str) -> Option<[u64; 3]> {
    let mut words = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some([words.next()??, words.next()??, words.next()??])
}

/// Which queue of which direction a driver's statistic counts packets of: virtio_net and
/// ixgbe's `rx_queue_0_packets`, mlx5's `rx0_packets`, i40e's `rx-0.packets`, ena's
/// `queue_0_rx_cnt`.
pub fn queue_packets_stat(name: &str) -> Option<(bool, u32)> {
    let name = name.trim().to_ascii_lowercase();
    if let Some(rest) = name.strip_prefix("queue_") {
        let (number, tail) = rest.split_once('_')?;
        let rx = match tail {
            "rx_cnt" => true,
            "tx_cnt" => false,
            _ => return None,
        };
        return Some((rx, number.parse().ok()?));
    }
    let (rx, rest) = if let Some(rest) = name.strip_prefix("rx") {
        (true, rest)
    } else {
        (false, name.strip_prefix("tx")?)
    };
    let rest = rest
        .strip_prefix("_queue_")
        .or_else(|| rest.strip_prefix('-'))
        .unwrap_or(rest);
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let (number, tail) = rest.split_at(digits);
    matches!(tail, "_packets" | ".packets")
        .then(|| number.parse().ok())
        .flatten()
        .map(|queue| (rx, queue))
}

/// One interface's reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InterfaceReading {
    pub name: String,
    pub driver: Option<String>,
    pub mtu: u64,
    pub speed_mbps: Option<u64>,
    /// rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped, rx_errors,
    /// tx_errors.
    pub stats: [u64; 8],
    /// Names that identify the device in /proc/interrupts: the interface's own and its
    /// device's (`virtio2`, a PCI address).
    pub keys: Vec<String>,
    /// (receive?, queue) -> packets, from the driver's statistics.
    pub queue_packets: BTreeMap<(bool, u32), u64>,
    pub rx_queues: Vec<u32>,
    pub tx_queues: Vec<u32>,
    /// (receive?, queue) -> RPS or XPS mask.
    pub steering: BTreeMap<(bool, u32), String>,
    pub offloads: BTreeMap<String, bool>,
    pub rings: Option<[u32; 4]>,
    pub lower: Vec<String>,
    pub qdisc: Option<String>,
    /// The root qdisc caps what the interface sends at this rate, bit/s (tbf, the
    /// default class of an htb, netem's rate).
    pub shaped_bps: Option<u64>,
    /// The root qdisc caps each flow at this rate, bit/s (fq's maxrate).
    pub flow_cap_bps: Option<u64>,
    /// The root qdisc delays and drops what leaves (netem), milliseconds and percent.
    pub added_delay_ms: Option<f64>,
    pub added_loss_pct: Option<f64>,
    pub coalesce: Option<[u32; 3]>,
}

const STAT_FILES: [&str; 8] = [
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "rx_dropped",
    "tx_dropped",
    "rx_errors",
    "tx_errors",
];

fn read_interface(root: &Root, name: &str) -> InterfaceReading {
    let dir = format!("/sys/class/net/{name}");
    let mut stats = [0u64; 8];
    for (slot, file) in stats.iter_mut().zip(STAT_FILES) {
        *slot = root
            .number(&format!("{dir}/statistics/{file}"))
            .unwrap_or(0);
    }
    let mut keys = vec![name.to_string()];
    if let Some(device) = root.link_name(&format!("{dir}/device")) {
        keys.push(device);
    }
    let queue_ids = |prefix: &str| -> Vec<u32> {
        let mut ids: Vec<u32> = root
            .list(&format!("{dir}/queues"))
            .iter()
            .filter_map(|q| q.strip_prefix(prefix)?.parse().ok())
            .filter(|&q| q < MAX_QUEUES)
            .collect();
        ids.sort_unstable();
        ids
    };
    let rx_queues = queue_ids("rx-");
    let tx_queues = queue_ids("tx-");
    let mut steering = BTreeMap::new();
    for &q in &rx_queues {
        if let Some(mask) = root.value(&format!("{dir}/queues/rx-{q}/rps_cpus")) {
            steering.insert((true, q), mask);
        }
    }
    for &q in &tx_queues {
        if let Some(mask) = root.value(&format!("{dir}/queues/tx-{q}/xps_cpus")) {
            steering.insert((false, q), mask);
        }
    }
    let ethtool = root.ethtool(name);
    let queue_packets = ethtool
        .stats
        .iter()
        .filter_map(|(stat, value)| Some((queue_packets_stat(stat)?, *value)))
        .filter(|((_, q), _)| *q < MAX_QUEUES)
        .collect();
    let lower = root
        .list(&dir)
        .iter()
        .filter_map(|entry| entry.strip_prefix("lower_").map(str::to_string))
        .chain(
            // A bridge port names its bridge under brport/bridge.
            exists(root, &format!("{dir}/brport"))
                .then(|| root.link_name(&format!("{dir}/brport/bridge")))
                .flatten(),
        )
        .collect();
    InterfaceReading {
        name: name.to_string(),
        driver: ethtool
            .driver
            .or_else(|| root.link_name(&format!("{dir}/device/driver"))),
        mtu: root.number(&format!("{dir}/mtu")).unwrap_or(0),
        // Virtual devices report -1 or refuse.
        speed_mbps: root
            .value(&format!("{dir}/speed"))
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|s| u64::try_from(s).ok())
            .filter(|&s| s > 0),
        stats,
        keys,
        queue_packets,
        rx_queues,
        tx_queues,
        steering,
        offloads: ethtool.features,
        rings: ethtool.rings,
        lower,
        qdisc: None,
        shaped_bps: None,
        flow_cap_bps: None,
        added_delay_ms: None,
        added_loss_pct: None,
        coalesce: ethtool.coalesce,
    }
}

/// One reading of everything `--observe` compares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostReading {
    pub cpu: Option<CpuSnapshot>,
    pub interrupts: Vec<InterruptLine>,
    pub net_rx: Vec<u64>,
    pub net_tx: Vec<u64>,
    pub softnet: Vec<Softnet>,
    pub counters: BTreeMap<String, i64>,
    pub interfaces: Vec<InterfaceReading>,
    /// How long the reading took: the cost of observing, paid twice per test.
    pub took: std::time::Duration,
}

impl HostReading {
    /// Reads the host under `root`. A file that cannot be read leaves its part empty.
    pub fn read(root: &Root) -> HostReading {
        // The reading's own cost, reported beside the observation.
        let started = std::time::Instant::now();
        let (net_rx, net_tx) = root
            .read("/proc/softirqs")
            .map(|t| parse_net_softirqs(&t))
            .unwrap_or_default();
        let mut counters = BTreeMap::new();
        for file in ["/proc/net/snmp", "/proc/net/netstat", "/proc/net/snmp6"] {
            if let Some(text) = root.read(file) {
                parse_counters(&text, &mut counters);
            }
        }
        HostReading {
            cpu: root.read("/proc/stat").and_then(|t| CpuSnapshot::parse(&t)),
            interrupts: root
                .read("/proc/interrupts")
                .map(|t| parse_interrupts(&t))
                .unwrap_or_default(),
            net_rx,
            net_tx,
            softnet: root
                .read("/proc/net/softnet_stat")
                .map(|t| parse_softnet(&t))
                .unwrap_or_default(),
            counters,
            interfaces: {
                let names: Vec<String> = root
                    .list("/sys/class/net")
                    .into_iter()
                    .take(MAX_INTERFACES)
                    .collect();
                let mut qdiscs = root.qdiscs(&names);
                names
                    .iter()
                    .map(|name| {
                        let root_qdisc = qdiscs.remove(name);
                        InterfaceReading {
                            shaped_bps: root_qdisc.as_ref().and_then(|q| q.rate_bps),
                            flow_cap_bps: root_qdisc.as_ref().and_then(|q| q.flow_rate_bps),
                            added_delay_ms: root_qdisc.as_ref().and_then(|q| q.delay_ms),
                            added_loss_pct: root_qdisc.as_ref().and_then(|q| q.loss_pct),
                            qdisc: root_qdisc.map(|q| q.kind),
                            ..read_interface(root, name)
                        }
                    })
                    .collect()
            },
            took: started.elapsed(),
        }
    }
}

/// The settings that decide a result, as they are now.
pub fn read_settings(root: &Root) -> HostSettings {
    let cpus = root.list("/sys/devices/system/cpu");
    let governors = cpus
        .iter()
        .filter(|c| {
            c.strip_prefix("cpu")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|c| {
            root.value(&format!(
                "/sys/devices/system/cpu/{c}/cpufreq/scaling_governor"
            ))
        })
        .take(MAX_CPUS)
        .collect();
    HostSettings {
        congestion_control: root.value("/proc/sys/net/ipv4/tcp_congestion_control"),
        tcp_rmem: root
            .value("/proc/sys/net/ipv4/tcp_rmem")
            .and_then(|t| triple(&t)),
        tcp_wmem: root
            .value("/proc/sys/net/ipv4/tcp_wmem")
            .and_then(|t| triple(&t)),
        rmem_max: root.number("/proc/sys/net/core/rmem_max"),
        wmem_max: root.number("/proc/sys/net/core/wmem_max"),
        netdev_max_backlog: root.number("/proc/sys/net/core/netdev_max_backlog"),
        governors,
        irqbalance: root.runs("irqbalance"),
        rps_sock_flow_entries: root.number("/proc/sys/net/core/rps_sock_flow_entries"),
        idle_states: root
            .list("/sys/devices/system/cpu/cpu0/cpuidle")
            .iter()
            .filter(|s| s.starts_with("state"))
            .take(32)
            .filter_map(|state| {
                let dir = format!("/sys/devices/system/cpu/cpu0/cpuidle/{state}");
                Some(IdleState {
                    name: root.value(&format!("{dir}/name"))?,
                    latency_us: root.number(&format!("{dir}/latency")).unwrap_or(0),
                    disabled: root.number(&format!("{dir}/disable")) == Some(1),
                })
            })
            .collect(),
    }
}

fn delta_vec(a: &[u64], b: &[u64]) -> Vec<u64> {
    b.iter()
        .enumerate()
        .map(|(i, later)| later.saturating_sub(a.get(i).copied().unwrap_or(0)))
        .collect()
}

/// Whether `description` names the device `key` (not a longer name it prefixes:
/// `virtio2` is not `virtio20`).
fn names_device(description: &str, key: &str) -> bool {
    description.match_indices(key).any(|(at, _)| {
        let before = description[..at].chars().last();
        let after = description[at + key.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

/// Whether an interrupt source serves receive (or transmit) queues, by its name.
fn serves(device: &str, receive: bool) -> bool {
    let lower = device.to_ascii_lowercase();
    let rx = ["rx", "input", "comp", "txrx", "tx-rx", "combined"];
    let tx = ["tx", "output", "comp", "txrx", "tx-rx", "combined"];
    let words = if receive { &rx[..] } else { &tx[..] };
    words.iter().any(|w| lower.contains(w)) || !(lower.contains("rx") || lower.contains("tx"))
}

/// An interrupt source: its device and queue.
type SourceKey = (String, Option<u32>);

/// What moved between two readings taken `window_s` apart, and the settings now.
pub fn observe(
    before: &HostReading,
    after: &HostReading,
    window_s: f64,
    settings: HostSettings,
) -> Observation {
    let interrupts = interrupt_sources(before, after);
    let cpus = cpu_network(before, after);
    let counters = counters_up(before, after);
    let interfaces = interface_views(before, after, &interrupts);
    let mut observation = Observation {
        window_s,
        read_ms: (before.took + after.took).as_secs_f64() * 1e3,
        cpus,
        interrupts,
        interfaces,
        counters,
        settings,
        unusual: Vec::new(),
    };
    observation.unusual = unusual(&observation);
    observation
}

/// Interrupts over the window, grouped by device and queue; only sources that fired.
fn interrupt_sources(before: &HostReading, after: &HostReading) -> Vec<InterruptSource> {
    let mut groups: BTreeMap<SourceKey, (Vec<u64>, Option<String>)> = BTreeMap::new();
    for line in &after.interrupts {
        let earlier = before
            .interrupts
            .iter()
            .find(|l| l.irq == line.irq)
            .map_or(&[][..], |l| &l.per_cpu[..]);
        let moved = delta_vec(earlier, &line.per_cpu);
        if moved.iter().all(|&c| c == 0) {
            continue;
        }
        let (device, queue) = if line.irq.bytes().all(|b| b.is_ascii_digit()) {
            device_and_queue(&line.description)
        } else {
            (format!("{} ({})", line.irq, line.description), None)
        };
        let interface = after
            .interfaces
            .iter()
            .find(|i| i.keys.iter().any(|k| names_device(&line.description, k)))
            .map(|i| i.name.clone());
        let entry = groups
            .entry((device, queue))
            .or_insert_with(|| (vec![0; moved.len()], interface));
        if entry.0.len() < moved.len() {
            entry.0.resize(moved.len(), 0);
        }
        for (sum, count) in entry.0.iter_mut().zip(&moved) {
            *sum += count;
        }
    }
    groups
        .into_iter()
        .map(|((device, queue), (per_cpu, interface))| InterruptSource {
            device,
            queue,
            interface,
            total: per_cpu.iter().sum(),
            per_cpu,
        })
        .collect()
}

/// Each CPU's network work over the window: packets steered to it, its share of time in
/// interrupts and softirqs, and softnet's processed, dropped and squeezed counts.
fn cpu_network(before: &HostReading, after: &HostReading) -> Vec<CpuNetwork> {
    let net_rx = delta_vec(&before.net_rx, &after.net_rx);
    let net_tx = delta_vec(&before.net_tx, &after.net_tx);
    let shares = match (&before.cpu, &after.cpu) {
        (Some(a), Some(b)) => a.irq_shares(b),
        _ => Vec::new(),
    };
    let count = net_rx
        .len()
        .max(net_tx.len())
        .max(shares.len())
        .min(MAX_CPUS);
    (0..count)
        .map(|cpu| {
            let softnet = |reading: &HostReading| {
                reading
                    .softnet
                    .iter()
                    .find(|s| s.cpu as usize == cpu)
                    .copied()
                    .unwrap_or_default()
            };
            let (a, b) = (softnet(before), softnet(after));
            let (irq_pct, softirq_pct) = shares.get(cpu).copied().unwrap_or((0.0, 0.0));
            CpuNetwork {
                cpu: cpu as u32,
                net_rx: net_rx.get(cpu).copied().unwrap_or(0),
                net_tx: net_tx.get(cpu).copied().unwrap_or(0),
                irq_pct,
                softirq_pct,
                processed: b.processed.wrapping_sub(a.processed) & 0xffff_ffff,
                dropped: b.dropped.wrapping_sub(a.dropped) & 0xffff_ffff,
                squeezed: b.squeezed.wrapping_sub(a.squeezed) & 0xffff_ffff,
            }
        })
        .collect()
}

/// Protocol counters that went up over the window.
fn counters_up(before: &HostReading, after: &HostReading) -> BTreeMap<String, u64> {
    after
        .counters
        .iter()
        .filter_map(|(name, &value)| {
            let earlier = *before.counters.get(name)?;
            (value > earlier).then(|| (name.clone(), (value - earlier) as u64))
        })
        .collect()
}

/// Interfaces that moved packets over the window, each queue with its share and the CPU
/// its interrupts landed on.
fn interface_views(
    before: &HostReading,
    after: &HostReading,
    interrupts: &[InterruptSource],
) -> Vec<InterfaceView> {
    after
        .interfaces
        .iter()
        .filter_map(|now| {
            let then = before.interfaces.iter().find(|i| i.name == now.name)?;
            let d: Vec<u64> = delta_vec(&then.stats, &now.stats);
            if d[0] == 0 && d[1] == 0 {
                return None;
            }
            let queues = |receive: bool, ids: &[u32]| -> Vec<QueueView> {
                let packets: BTreeMap<u32, u64> = now
                    .queue_packets
                    .iter()
                    .filter(|((rx, _), _)| *rx == receive)
                    .map(|(&(rx, q), &v)| {
                        let earlier = then.queue_packets.get(&(rx, q)).copied().unwrap_or(0);
                        (q, v.saturating_sub(earlier))
                    })
                    .collect();
                let total: u64 = packets.values().sum();
                let mut ids: Vec<u32> = ids.to_vec();
                for q in packets.keys() {
                    if !ids.contains(q) {
                        ids.push(*q);
                    }
                }
                ids.sort_unstable();
                ids.into_iter()
                    .map(|q| {
                        let irq_cpu = interrupts
                            .iter()
                            .filter(|s| {
                                s.interface.as_deref() == Some(&now.name)
                                    && s.queue == Some(q)
                                    && serves(&s.device, receive)
                            })
                            .max_by_key(|s| s.total)
                            .and_then(InterruptSource::busiest_cpu)
                            .map(|(cpu, _)| cpu);
                        QueueView {
                            queue: q,
                            packets: packets.get(&q).copied(),
                            share: packets
                                .get(&q)
                                .filter(|_| total > 0)
                                .map(|&p| p as f64 / total as f64),
                            irq_cpu,
                            steering: now.steering.get(&(receive, q)).cloned(),
                        }
                    })
                    .collect()
            };
            Some(InterfaceView {
                name: now.name.clone(),
                driver: now.driver.clone(),
                mtu: now.mtu,
                speed_mbps: now.speed_mbps,
                rx_packets: d[0],
                tx_packets: d[1],
                rx_bytes: d[2],
                tx_bytes: d[3],
                rx_dropped: d[4],
                tx_dropped: d[5],
                rx_errors: d[6],
                tx_errors: d[7],
                rx_queues: queues(true, &now.rx_queues),
                tx_queues: queues(false, &now.tx_queues),
                offloads: now.offloads.clone(),
                rings: now.rings.map(|[rx, rx_max, tx, tx_max]| Rings {
                    rx,
                    rx_max,
                    tx,
                    tx_max,
                }),
                lower: now.lower.clone(),
                qdisc: now.qdisc.clone(),
                coalesce: now
                    .coalesce
                    .map(|[rx_usecs, tx_usecs, adaptive]| Coalescing {
                        rx_usecs,
                        tx_usecs,
                        adaptive_rx: adaptive != 0,
                    }),
            })
        })
        .collect()
}

/// Packets below which a queue's share says nothing.
const QUEUE_EVIDENCE: u64 = 1000;
/// The share of an interface's packets one queue carries before it is called out.
const ONE_QUEUE_SHARE: f64 = 0.6;

/// What a reader of the result should be told: one queue carrying most packets, all
/// queues' interrupts on one CPU, drops, squeezes, a CPU saturated by softirqs, counters
/// that mean loss at the host.
pub fn unusual(observation: &Observation) -> Vec<String> {
    let mut out = Vec::new();
    for interface in &observation.interfaces {
        interface_unusual(observation, interface, &mut out);
    }
    for cpu in &observation.cpus {
        if cpu.dropped > 0 {
            out.push(format!(
                "CPU {}: {} packets dropped at the backlog (netdev_max_backlog{})",
                cpu.cpu,
                cpu.dropped,
                observation
                    .settings
                    .netdev_max_backlog
                    .map_or(String::new(), |b| format!(" {b}"))
            ));
        }
        if cpu.squeezed > 0 {
            out.push(format!(
                "CPU {}: the softirq budget ran out {} times with packets left (time_squeeze)",
                cpu.cpu, cpu.squeezed
            ));
        }
        if cpu.softirq_pct + cpu.irq_pct >= 95.0 {
            out.push(format!(
                "CPU {}: {:.0} % of the window in interrupts and softirqs",
                cpu.cpu,
                cpu.softirq_pct + cpu.irq_pct
            ));
        }
    }
    for name in [
        "UdpRcvbufErrors",
        "UdpSndbufErrors",
        "Udp6RcvbufErrors",
        "Udp6SndbufErrors",
        "TcpExtListenOverflows",
        "TcpExtListenDrops",
        "TcpExtTCPTimeouts",
        "TcpExtTCPBacklogDrop",
        "TcpExtTCPRcvQDrop",
    ] {
        // The kernel counts these for the whole host (its network namespace): every
        // process's sockets, not only the test's.
        if let Some(count) = observation.counters.get(name) {
            out.push(format!(
                "{name}: {count} (the host's count: every process's sockets)"
            ));
        }
    }
    out
}

/// What is unusual about one interface: one queue carrying most packets, all its receive
/// queues' interrupts on one CPU, its drops and errors.
fn interface_unusual(
    observation: &Observation,
    interface: &linerate_model::observe::InterfaceView,
    out: &mut Vec<String>,
) {
    for (receive, queues, what) in [
        (true, &interface.rx_queues, "received"),
        (false, &interface.tx_queues, "sent"),
    ] {
        let counted: Vec<&QueueView> = queues.iter().filter(|q| q.packets.is_some()).collect();
        let total: u64 = counted.iter().filter_map(|q| q.packets).sum();
        if counted.len() >= 2 && total >= QUEUE_EVIDENCE {
            if let Some(top) = counted
                .iter()
                .filter(|q| q.share.unwrap_or(0.0) > ONE_QUEUE_SHARE)
                .max_by(|a, b| {
                    a.share
                        .partial_cmp(&b.share)
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
            {
                out.push(format!(
                    "{}: {} queue {} carried {:.0} % of the packets {what} ({} queues)",
                    interface.name,
                    if receive { "rx" } else { "tx" },
                    top.queue,
                    top.share.unwrap_or(0.0) * 100.0,
                    counted.len()
                ));
            }
        }
    }
    let irq_cpus: Vec<u32> = interface
        .rx_queues
        .iter()
        .filter_map(|q| q.irq_cpu)
        .collect();
    if irq_cpus.len() >= 2
        && observation.cpus.len() >= 2
        && irq_cpus.iter().all(|&c| c == irq_cpus[0])
    {
        out.push(format!(
            "{}: the interrupts of all {} receive queues went to CPU {}",
            interface.name,
            irq_cpus.len(),
            irq_cpus[0]
        ));
    }
    for (count, what) in [
        (interface.rx_dropped, "receive drops"),
        (interface.tx_dropped, "transmit drops"),
        (interface.rx_errors, "receive errors"),
        (interface.tx_errors, "transmit errors"),
    ] {
        if count > 0 {
            out.push(format!("{}: {count} {what}", interface.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn interrupt_names_split_into_device_and_queue() {
        let cases = [
            ("virtio2-input.0", ("virtio2-input", Some(0))),
            ("eth0-TxRx-13", ("eth0-TxRx", Some(13))),
            ("mlx5_comp7@pci:0000:08:00.0", ("mlx5_comp", Some(7))),
            ("i40e-ens1f0-TxRx-3", ("i40e-ens1f0-TxRx", Some(3))),
            ("virtio0-config", ("virtio0-config", None)),
            ("timer", ("timer", None)),
            ("1234", ("1234", None)),
        ];
        for (name, (device, queue)) in cases {
            assert_eq!(
                device_and_queue(name),
                (device.to_string(), queue),
                "{name}"
            );
        }
    }

    #[test]
    fn queue_statistics_of_several_drivers_are_recognised() {
        let cases = [
            ("rx_queue_3_packets", Some((true, 3))),
            ("tx_queue_0_packets", Some((false, 0))),
            ("rx12_packets", Some((true, 12))),
            ("tx-2.packets", Some((false, 2))),
            ("queue_5_rx_cnt", Some((true, 5))),
            ("queue_5_tx_cnt", Some((false, 5))),
            ("rx_queue_3_bytes", None),
            ("rx_packets", None),
            ("rx_vport_unicast_packets", None),
        ];
        for (name, expected) in cases {
            assert_eq!(queue_packets_stat(name), expected, "{name}");
        }
    }

    #[test]
    fn names_and_values_lines_are_named_as_nstat_names_them() {
        let mut counters = BTreeMap::new();
        parse_counters(
            "TcpExt: SyncookiesSent TCPTimeouts\nTcpExt: 0 12\nIpExt: InNoECTPkts\nIpExt: 99\n",
            &mut counters,
        );
        parse_counters("Udp6InDatagrams  \t 7\nUdp6RcvbufErrors 2\n", &mut counters);
        assert_eq!(counters.get("TcpExtTCPTimeouts"), Some(&12));
        assert_eq!(counters.get("IpExtInNoECTPkts"), Some(&99));
        assert_eq!(counters.get("Udp6RcvbufErrors"), Some(&2));
    }

    proptest! {
        /// Whatever a /proc file holds, the parsers return, and keep no more than their
        /// bounds.
        #[test]
        fn parsers_never_panic_and_stay_bounded(text in "(?s).{0,2000}") {
            let lines = parse_interrupts(&text);
            prop_assert!(lines.len() <= MAX_LINES);
            prop_assert!(lines.iter().all(|l| l.per_cpu.len() <= MAX_CPUS));
            let (rx, tx) = parse_net_softirqs(&text);
            prop_assert!(rx.len() <= MAX_CPUS && tx.len() <= MAX_CPUS);
            prop_assert!(parse_softnet(&text).len() <= MAX_CPUS);
            let mut counters = BTreeMap::new();
            parse_counters(&text, &mut counters);
            let _ = device_and_queue(&text);
            let _ = queue_packets_stat(&text);
            let _ = crate::source::parse_stats(&text);
            let _ = crate::source::parse_features(&text);
            let _ = crate::source::parse_rings(&text);
        }

        /// Lines shaped like /proc/interrupts keep their counts, whatever the numbers.
        #[test]
        fn interrupt_counts_survive_parsing(counts in proptest::collection::vec(any::<u32>(), 1..8)) {
            let header: String = (0..counts.len()).map(|c| format!(" CPU{c}")).collect();
            let row: String = counts.iter().map(|c| format!(" {c}")).collect();
            let text = format!("{header}\n 42:{row} PCI-MSIX 1-edge eth0-rx-1\n");
            let lines = parse_interrupts(&text);
            prop_assert_eq!(lines.len(), 1);
            let expected: Vec<u64> = counts.iter().map(|&c| u64::from(c)).collect();
            prop_assert_eq!(&lines[0].per_cpu, &expected);
            prop_assert_eq!(lines[0].description.as_str(), "eth0-rx-1");
        }
    }
}
