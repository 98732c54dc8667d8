//! `linerate doctor`: what on this host (and on the path to a server) is likely to hold a
//! result down, ranked by likely effect, each with its evidence, the one command that
//! changes it and the figure that would move. A pure function of readings, so each rule
//! is tested on fixtures whose answer is known.

use crate::observe::{HostReading, InterfaceReading};
use linerate_model::observe::{Diagnosis, Finding, HostSettings, PathFacts};

/// Everything the rules look at.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub settings: HostSettings,
    /// One reading of the host: its counters since boot stand for its habits (which CPUs
    /// take a NIC's interrupts, whether the backlog ever overflowed).
    pub reading: HostReading,
    pub cpus: usize,
    pub path: Option<PathFacts>,
    /// A round trip to assume when no server was probed (`--rtt`), milliseconds.
    pub assumed_rtt_ms: Option<f64>,
    /// The rate to hold windows against (`--target`), else a token bucket's rate on the
    /// route's interface, else its link speed, else 10 Gbit/s.
    pub target_bps: Option<f64>,
    /// The share of all CPUs other work kept busy over a short look, percent (doctor
    /// itself runs nothing meanwhile).
    pub others_busy_pct: Option<f64>,
}

impl Facts {
    /// This host as it is now: its settings, one reading of its counters, and how busy
    /// other work keeps its CPUs (half a second of them while doctor runs nothing); with
    /// the path's facts where a server was probed.
    pub fn of_this_host(
        cpus: usize,
        path: Option<PathFacts>,
        assumed_rtt_ms: Option<f64>,
        target_bps: Option<f64>,
    ) -> Facts {
        let root = crate::source::Root::live();
        let window = std::time::Duration::from_millis(500);
        let before = crate::CpuSnapshot::read().ok();
        std::thread::sleep(window);
        let after = crate::CpuSnapshot::read().ok();
        let others_busy_pct = before
            .zip(after)
            .map(|(a, b)| crate::usage(&a, &b, std::time::Duration::ZERO, window).busy_pct);
        Facts {
            settings: crate::observe::read_settings(&root),
            reading: HostReading::read(&root),
            cpus,
            path,
            assumed_rtt_ms,
            target_bps,
            others_busy_pct,
        }
    }
}

/// The share of the receive buffer the kernel offers as window. Linux advertises part of
/// the buffer (tcp_adv_win_scale, and since 6.x a measured payload-to-memory ratio); on
/// 1500-byte frames that is about half. A conservative, documented assumption.
const WINDOW_SHARE: f64 = 0.5;
const DEFAULT_TARGET_BPS: f64 = 10e9;
/// Receive coalescing from which a NIC's hold time shows in round trips.
const COALESCE_US: u32 = 50;
/// Idle-state exit latency from which a sleeping CPU shows in round trips.
const DEEP_IDLE_US: u64 = 50;

impl Facts {
    fn rtt_s(&self) -> Option<f64> {
        self.path
            .as_ref()
            .map(|p| p.rtt_ms)
            .or(self.assumed_rtt_ms)
            .filter(|r| *r > 0.0)
            .map(|ms| ms / 1e3)
    }

    fn route_interface(&self) -> Option<&InterfaceReading> {
        let name = self.path.as_ref()?.interface.as_deref()?;
        self.reading.interfaces.iter().find(|i| i.name == name)
    }

    /// The rate windows are held against: no window need be larger than what the
    /// shaped or physical link carries.
    pub fn target_bps(&self) -> f64 {
        self.target_bps
            .or_else(|| self.shaped().map(|(_, bps)| bps as f64))
            .or_else(|| {
                self.route_interface()?
                    .speed_mbps
                    .map(|mbps| mbps as f64 * 1e6)
            })
            .unwrap_or(DEFAULT_TARGET_BPS)
    }

    /// The interface whose root token bucket caps what leaves: the route's, or without a
    /// probed path the slowest shaped interface that is not loopback.
    fn shaped(&self) -> Option<(&InterfaceReading, u64)> {
        match self.route_interface() {
            Some(route) => route.shaped_bps.map(|bps| (route, bps)),
            None if self.path.is_none() => self
                .reading
                .interfaces
                .iter()
                .filter(|i| i.name != "lo")
                .filter_map(|i| Some((i, i.shaped_bps?)))
                .min_by_key(|(_, bps)| *bps),
            None => None,
        }
    }
}

/// A finding before ranking, with the factor by which it may hold a result down.
struct Scored {
    factor: f64,
    finding: Finding,
}

fn rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.1} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else {
        format!("{:.0} kbit/s", bps / 1e3)
    }
}

fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n >> 10)
    } else if n >= 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} bytes")
    }
}

/// A buffer that holds `window` bytes of window: twice the window (WINDOW_SHARE), up to
/// the next power of two, at least 4 MiB.
fn buffer_for(window: f64) -> u64 {
    ((window / WINDOW_SHARE).ceil() as u64)
        .max(4 << 20)
        .next_power_of_two()
}

/// The receive and send buffer limits against the path's bandwidth-delay product.
/// A token bucket at the root of the egress interface: nothing leaves faster, whatever
/// the link, the windows or the CPUs could do. Ranked by how far below the link it holds.
fn shaping(facts: &Facts, out: &mut Vec<Scored>) {
    let Some((interface, bps)) = facts.shaped() else {
        return;
    };
    let link = interface
        .speed_mbps
        .map_or(DEFAULT_TARGET_BPS, |mbps| mbps as f64 * 1e6);
    let asked = facts.target_bps.unwrap_or(link);
    if bps as f64 >= asked {
        return;
    }
    out.push(Scored {
        factor: asked / bps as f64,
        finding: Finding {
            topic: "egress shaping".into(),
            finding: format!(
                "{} sends through {} {}: no test out of this host over it goes faster",
                interface.name,
                match interface.qdisc.as_deref() {
                    Some("tbf") => "a token bucket (tbf) at",
                    Some("htb") => "an htb whose default class is capped (ceil) at",
                    Some("netem") => "netem at a rate of",
                    _ => "a root qdisc capped at",
                },
                rate(bps as f64)
            ),
            evidence: vec![format!("tc qdisc show dev {} (rtnetlink)", interface.name)],
            command: format!("tc qdisc del dev {} root", interface.name),
            effect: format!("throughput, up to {} (the link)", rate(link)),
            ..Default::default()
        },
    });
}

/// The egress interface's root qdisc caps each flow (fq's maxrate) or emulates a path
/// (netem's delay and loss) for everything this host sends by it.
fn egress_qdisc(facts: &Facts, out: &mut Vec<Scored>) {
    let interfaces: Vec<&InterfaceReading> = match facts.route_interface() {
        Some(route) => vec![route],
        None if facts.path.is_none() => facts
            .reading
            .interfaces
            .iter()
            .filter(|i| i.name != "lo")
            .collect(),
        None => Vec::new(),
    };
    let target = facts.target_bps();
    for interface in interfaces {
        let evidence = vec![format!("tc qdisc show dev {} (rtnetlink)", interface.name)];
        if let Some(cap) = interface.flow_cap_bps.filter(|&c| (c as f64) < target) {
            out.push(Scored {
                factor: target / cap as f64,
                finding: Finding {
                    topic: "per-flow cap".into(),
                    finding: format!(
                        "{}'s fq lets each flow send at most {}: one stream out of it goes no faster (several share nothing of the cap)",
                        interface.name,
                        rate(cap as f64)
                    ),
                    evidence: evidence.clone(),
                    command: format!("tc qdisc replace dev {} root fq", interface.name),
                    effect: format!("one stream's throughput, up to {}", rate(target)),
                    ..Default::default()
                },
            });
        }
        let delay = interface.added_delay_ms.unwrap_or(0.0);
        let loss = interface.added_loss_pct.unwrap_or(0.0);
        if delay > 0.0 || loss > 0.0 {
            // The loss's Mathis bound over the delay netem adds (or the measured round
            // trip, when longer), as path_loss ranks it; delay alone costs windows and
            // round trips, less than a cap.
            let rtt = facts.rtt_s().unwrap_or(0.0).max(delay / 1e3).max(1e-4);
            let factor = if loss > 0.0 {
                (target / (1448.0 * 8.0 / rtt * 1.22 / (loss / 100.0).sqrt())).max(1.1)
            } else {
                1.1
            };
            out.push(Scored {
                factor,
                finding: Finding {
                    topic: "egress emulation".into(),
                    finding: format!(
                        "{}'s root qdisc is netem: it adds {delay:.1} ms and {loss:.2} % loss to everything this host sends by it",
                        interface.name
                    ),
                    evidence,
                    command: format!("tc qdisc del dev {} root", interface.name),
                    effect: "every round trip and loss out of this host by it".into(),
                    ..Default::default()
                },
            });
        }
    }
}

/// Loss on the path, from doctor's probe: a loss-based congestion control (cubic, reno)
/// takes every loss for congestion, so one stream's goodput is bounded near
/// MSS/RTT × 1.22/√p (Mathis et al., 1997) whatever its windows. Ranked by how far that
/// bound sits below the rate the windows are held against.
fn path_loss(facts: &Facts, out: &mut Vec<Scored>) {
    let Some(path) = &facts.path else { return };
    let Some(probe) = &path.loss else { return };
    let each_way = probe.each_way();
    // Below 0.01 % each way (1 in 10,000) a 1,600-transaction probe sees nothing reliable.
    if probe.lost == 0 || each_way < 1e-4 {
        return;
    }
    let rtt = if probe.rtt_median_ms > 0.0 {
        probe.rtt_median_ms / 1e3
    } else {
        path.rtt_ms / 1e3
    };
    if rtt <= 0.0 {
        return;
    }
    let mss = path
        .path_mtu
        .or(path.interface_mtu)
        .map_or(1448, |mtu| mtu.saturating_sub(52).max(536));
    let bound = mss as f64 * 8.0 / rtt * 1.22 / each_way.sqrt();
    let target = facts.target_bps();
    // bbr already the default: the loss bound above is cubic's and reno's; say what is
    // left to try instead of what is already done.
    let bbr_default = facts.settings.congestion_control.as_deref() == Some("bbr");
    let (command, effect) = if bbr_default {
        (
            "linerate stream HOST -P 8   (parallel streams share the losses; bbr, this host's default, already paces past random loss)".to_string(),
            format!("the path's goodput over several streams (up to {} here)", rate(target)),
        )
    } else {
        (
            "linerate stream HOST -C bbr   (or -P 8: parallel streams share the losses)".to_string(),
            format!(
                "one stream's goodput over this path: bbr does not read random loss as congestion (up to {} here)",
                rate(target)
            ),
        )
    };
    out.push(Scored {
        factor: (target / bound).max(1.05),
        finding: Finding {
            topic: "path loss".into(),
            finding: format!(
                "the probe lost {} of {} UDP transactions ({:.2} % each way, were both ways alike): one cubic or reno stream over {:.1} ms with that loss holds near {} (MSS/RTT x 1.22/sqrt(p)), whatever its windows",
                probe.lost,
                probe.lost + probe.answered,
                each_way * 100.0,
                rtt * 1e3,
                rate(bound)
            ),
            evidence: vec![format!(
                "{} paced UDP request/response transactions to {}",
                probe.lost + probe.answered,
                path.target
            )],
            command,
            effect,
            ..Default::default()
        },
    });
}

/// Other work holding the CPUs: a test gets what is left, and its round trips wait for
/// a CPU. Ranked by the share of the CPUs it leaves.
fn other_work(facts: &Facts, out: &mut Vec<Scored>) {
    let Some(busy) = facts.others_busy_pct.filter(|b| *b >= 50.0) else {
        return;
    };
    let left = (100.0 - busy).max(2.0);
    out.push(Scored {
        factor: 100.0 / left,
        finding: Finding {
            topic: "other work".into(),
            finding: format!(
                "other processes kept {busy:.0} % of the {} CPUs busy while doctor looked: a test gets what is left",
                facts.cpus
            ),
            evidence: vec!["/proc/stat over half a second".into()],
            command: "top -o %CPU".into(),
            effect: "throughput, CPU per Gbit and round trips (they wait for a CPU)".into(),
            ..Default::default()
        },
    });
}

fn windows(facts: &Facts, out: &mut Vec<Scored>) {
    let Some(rtt) = facts.rtt_s() else { return };
    let target = facts.target_bps();
    let needed_window = target * rtt / 8.0;
    let measured = if facts.path.is_some() {
        "measured"
    } else {
        "given by --rtt"
    };
    for (name, triple, side, held) in [
        ("tcp_rmem", facts.settings.tcp_rmem, "receive", "of window"),
        ("tcp_wmem", facts.settings.tcp_wmem, "send", "in flight"),
    ] {
        let Some([min, default, max]) = triple else {
            continue;
        };
        let window = max as f64 * WINDOW_SHARE;
        let ceiling = window * 8.0 / rtt;
        if ceiling >= target {
            continue;
        }
        let new_max = buffer_for(needed_window);
        let value = format!("{min} {default} {new_max}");
        let new_ceiling = (new_max as f64 * WINDOW_SHARE * 8.0 / rtt).min(target);
        out.push(Scored {
            factor: target / ceiling,
            finding: Finding {
                topic: format!("{side} window"),
                finding: format!(
                    "{name} lets a TCP {side} buffer grow to {}, about {} {held}: at a {:.1} ms round trip one stream is capped at {}",
                    bytes(max),
                    bytes((window as u64).max(1)),
                    rtt * 1e3,
                    rate(ceiling)
                ),
                evidence: vec![
                    format!("net.ipv4.{name} = {min} {default} {max}"),
                    format!("round trip {:.2} ms ({measured})", rtt * 1e3),
                    format!(
                        "{} at that round trip needs {} in flight (the bandwidth-delay product)",
                        rate(target),
                        bytes(needed_window.ceil() as u64)
                    ),
                ],
                command: format!("sysctl -w net.ipv4.{name}='{value}'"),
                effect: format!(
                    "one stream's ceiling at this round trip: {} -> {}",
                    rate(ceiling),
                    rate(new_ceiling)
                ),
                sysctls: vec![(format!("net.ipv4.{name}"), value)],
                ..Default::default()
            },
        });
    }
    // Applications that size their own buffers (iperf3 -w, linerate -w) stop at the
    // core maxima, whatever tcp_rmem allows.
    for (name, value) in [
        ("rmem_max", facts.settings.rmem_max),
        ("wmem_max", facts.settings.wmem_max),
    ] {
        let Some(max) = value else { continue };
        let ceiling = max as f64 * 8.0 / rtt;
        if ceiling >= target {
            continue;
        }
        let new_max = buffer_for(needed_window * WINDOW_SHARE);
        out.push(Scored {
            // Only tools that set their buffers are held by it: ranked below the
            // autotuning limits.
            factor: (target / ceiling).sqrt(),
            finding: Finding {
                topic: "socket buffer maximum".into(),
                finding: format!(
                    "net.core.{name} is {}: a tool that sets its own buffer (-w) gets at most that, {} per stream at {:.1} ms",
                    bytes(max),
                    rate(ceiling),
                    rtt * 1e3
                ),
                evidence: vec![format!("net.core.{name} = {max}")],
                command: format!("sysctl -w net.core.{name}={new_max}"),
                effect: format!(
                    "a -w stream's ceiling: {} -> {}",
                    rate(ceiling),
                    rate((new_max as f64 * 8.0 / rtt).min(target))
                ),
                sysctls: vec![(format!("net.core.{name}"), new_max.to_string())],
                ..Default::default()
            },
        });
    }
}

/// Whether an interface is a physical device's (it has a device link), not virtual.
fn physical(interface: &InterfaceReading) -> bool {
    interface.keys.len() > 1 && interface.name != "lo"
}

/// Whether an interface carries the probed path: any, when no path was probed or its
/// interface is unknown; else only the path's own (a path over lo crosses no NIC, and a
/// NIC's queues say nothing of it).
fn on_the_path(facts: &Facts, interface: &InterfaceReading) -> bool {
    let Some(first) = facts.path.as_ref().and_then(|p| p.interface.as_deref()) else {
        return true;
    };
    // The path's interface and the devices it is stacked on (a macvlan's NIC, a
    // bond's members), however deep.
    let mut seen = vec![first.to_string()];
    let mut next = 0;
    while next < seen.len() && seen.len() <= facts.reading.interfaces.len() + 1 {
        let name = seen[next].clone();
        next += 1;
        if name == interface.name {
            return true;
        }
        if let Some(reading) = facts.reading.interfaces.iter().find(|i| i.name == name) {
            for lower in &reading.lower {
                if !seen.contains(lower) {
                    seen.push(lower.clone());
                }
            }
        }
    }
    false
}

/// A NIC whose receive work all lands on one CPU: one queue without RPS, or every
/// queue's interrupts on one CPU.
fn queue_spread(facts: &Facts, out: &mut Vec<Scored>) {
    if facts.cpus < 2 {
        return;
    }
    for interface in facts
        .reading
        .interfaces
        .iter()
        .filter(|i| physical(i) && on_the_path(facts, i))
    {
        let sources: Vec<_> = facts
            .reading
            .interrupts
            .iter()
            .filter(|l| {
                interface
                    .keys
                    .iter()
                    .any(|k| l.description.contains(k.as_str()))
                    && crate::observe::device_and_queue(&l.description).1.is_some()
            })
            .collect();
        busy_queue(interface, out);
        let mut per_cpu = vec![0u64; facts.cpus];
        for line in &sources {
            for (cpu, count) in line.per_cpu.iter().enumerate().take(facts.cpus) {
                per_cpu[cpu] += count;
            }
        }
        let total: u64 = per_cpu.iter().sum();
        let rps_off = interface
            .steering
            .iter()
            .filter(|((rx, _), _)| *rx)
            .all(|(_, mask)| mask.trim_start_matches(['0', ',']).is_empty());
        if interface.rx_queues.len() == 1 && rps_off {
            let mask = format!("{:x}", (1u128 << facts.cpus.min(127)) - 1);
            out.push(Scored {
                factor: 1.5,
                finding: Finding {
                    topic: "receive queues".into(),
                    finding: format!(
                        "{} has one receive queue and RPS is off: one CPU of {} does all its receive work",
                        interface.name, facts.cpus
                    ),
                    evidence: vec![
                        format!("/sys/class/net/{}/queues: rx-0 only", interface.name),
                        format!("rps_cpus of rx-0: {}", interface.steering.get(&(true, 0)).map_or("absent", |m| m.as_str())),
                    ],
                    command: format!(
                        "echo {mask} > /sys/class/net/{}/queues/rx-0/rps_cpus",
                        interface.name
                    ),
                    effect: "receive throughput of many flows, once one CPU saturates in softirq".into(),
                    ..Default::default()
                },
            });
        } else if sources.len() >= 2 && total >= 10_000 {
            let (cpu, busiest) = per_cpu
                .iter()
                .enumerate()
                .max_by_key(|(_, c)| **c)
                .map(|(c, n)| (c, *n))
                .unwrap_or((0, 0));
            let share = busiest as f64 / total as f64;
            if share >= 0.9 {
                let command = if facts.settings.irqbalance {
                    format!(
                        "spread them: echo N > /proc/irq/IRQ/smp_affinity_list for each of {}'s {} queue interrupts",
                        interface.name,
                        sources.len()
                    )
                } else {
                    "systemctl start irqbalance".into()
                };
                out.push(Scored {
                    factor: 1.5 + share,
                    finding: Finding {
                        topic: "interrupts".into(),
                        finding: format!(
                            "{:.0} % of {}'s queue interrupts went to CPU {cpu}: its {} queues are served by one CPU",
                            share * 100.0,
                            interface.name,
                            sources.len()
                        ),
                        evidence: vec![
                            format!("/proc/interrupts since boot: {busiest} of {total} on CPU {cpu}"),
                            format!("irqbalance {}", if facts.settings.irqbalance { "runs" } else { "does not run" }),
                        ],
                        command,
                        effect: "receive throughput once that CPU saturates; at 1000 flows the seeds' figure fell until interrupts were spread".into(),
                        ..Default::default()
                    },
                });
            }
        }
    }
}

/// One receive queue that has carried most of a multi-queue NIC's packets since boot:
/// RSS is not spreading the flows (one flow, or a hash or indirection table that sends
/// them all one way).
fn busy_queue(interface: &InterfaceReading, out: &mut Vec<Scored>) {
    let received: Vec<(u32, u64)> = interface
        .queue_packets
        .iter()
        .filter(|((rx, _), _)| *rx)
        .map(|(&(_, q), &p)| (q, p))
        .collect();
    let total: u64 = received.iter().map(|(_, p)| p).sum();
    let Some(&(queue, top)) = received.iter().max_by_key(|(_, p)| *p) else {
        return;
    };
    let share = top as f64 / total.max(1) as f64;
    if received.len() < 2 || total < 10_000 || share <= 0.6 {
        return;
    }
    out.push(Scored {
        factor: 1.5 + share,
        finding: Finding {
            topic: "receive queues".into(),
            finding: format!(
                "rx queue {queue} has carried {:.0} % of {}'s received packets since boot: its {} queues are not sharing the work",
                share * 100.0,
                interface.name,
                received.len()
            ),
            evidence: vec![format!(
                "ethtool statistics: {top} of {total} received packets on queue {queue}"
            )],
            command: format!(
                "ethtool -X {} equal {}   (and check: ethtool -n {} rx-flow-hash tcp4)",
                interface.name,
                received.len(),
                interface.name
            ),
            effect: "receive throughput of many flows: one queue is one CPU's softirq".into(),
            ..Default::default()
        },
    });
}

/// Offloads that are off, rings below their maximum, stacked devices, the path's MTU.
fn interfaces(facts: &Facts, out: &mut Vec<Scored>) {
    for interface in facts
        .reading
        .interfaces
        .iter()
        .filter(|i| physical(i) && on_the_path(facts, i))
    {
        interface_findings(interface, out);
    }
    let Some(path) = &facts.path else { return };
    if let Some(route) = facts.route_interface() {
        if !route.lower.is_empty() {
            out.push(Scored {
                factor: 1.4,
                finding: Finding {
                    topic: "stacked device".into(),
                    finding: format!(
                        "the route to {} leaves by {}, a software device stacked on {}: every packet crosses it",
                        path.target,
                        route.name,
                        route.lower.join(", ")
                    ),
                    evidence: vec![format!("/sys/class/net/{}: lower {}", route.name, route.lower.join(", "))],
                    command: format!("test over {} itself, or give the guest the NIC (SR-IOV, passthrough)", route.lower[0]),
                    effect: "receive spread: the seeds' vnic forced one software ring where the NIC had sixteen, 4.2 -> 9.4 Gbit/s when removed".into(),
                    ..Default::default()
                },
            });
        }
    }
    if let (Some(mtu), Some(pmtu), Some(name)) =
        (path.interface_mtu, path.path_mtu, path.interface.as_deref())
    {
        // No IPv4 packet exceeds 65535 bytes, whatever lo's MTU says.
        if pmtu < mtu.min(65535) {
            out.push(Scored {
                factor: 1.5,
                finding: Finding {
                    topic: "MTU".into(),
                    finding: format!(
                        "{name} sends {mtu}-byte packets but the path to {} carries {pmtu}: larger packets are dropped until path MTU discovery catches up, and blackholed where ICMP is filtered",
                        path.target
                    ),
                    evidence: vec![format!("{name} mtu {mtu}; the kernel's path MTU to {} after a probe: {pmtu}", path.target)],
                    command: format!("ip link set dev {name} mtu {pmtu}"),
                    effect: "stalls and retransmissions of full-sized segments".into(),
                    ..Default::default()
                },
            });
        }
    }
}

/// One interface on the path: its offloads that are off, coalescing that holds packets,
/// a receive ring below its maximum.
fn interface_findings(interface: &InterfaceReading, out: &mut Vec<Scored>) {
    let off: Vec<&str> = [
        ("tcp-segmentation-offload", "tso"),
        ("generic-segmentation-offload", "gso"),
        ("generic-receive-offload", "gro"),
        ("rx-checksumming", "rx"),
        ("tx-checksumming", "tx"),
    ]
    .iter()
    .filter(|(name, _)| interface.offloads.get(*name) == Some(&false))
    .map(|(_, short)| *short)
    .collect();
    if !off.is_empty() {
        out.push(Scored {
            factor: 2.0,
            finding: Finding {
                topic: "offloads".into(),
                finding: format!(
                    "{}: {} off: the CPU segments, checksums or coalesces every packet itself",
                    interface.name,
                    off.join(", ")
                ),
                evidence: vec![format!("ethtool features of {}", interface.name)],
                command: format!(
                    "ethtool -K {} {}",
                    interface.name,
                    off.iter()
                        .map(|o| format!("{o} on"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                effect:
                    "CPU per Gbit; with checksums in software the seeds' UDP test was CPU-bound"
                        .into(),
                ..Default::default()
            },
        });
    }
    if let Some([rx_usecs, _, adaptive]) = interface.coalesce {
        if rx_usecs >= COALESCE_US && adaptive == 0 {
            out.push(Scored {
                factor: 1.15,
                finding: Finding {
                    topic: "interrupt coalescing".into(),
                    finding: format!(
                        "{} holds received packets up to {rx_usecs} us before it interrupts: a round trip can pay that at each end",
                        interface.name
                    ),
                    evidence: vec![format!("ethtool coalescing of {}: rx-usecs {rx_usecs}, adaptive rx off", interface.name)],
                    command: format!("ethtool -C {} adaptive-rx on", interface.name),
                    effect: "request/response round trips (linerate rr), not bulk goodput".into(),
                    ..Default::default()
                },
            });
        }
    }
    if let Some([rx, rx_max, tx, tx_max]) = interface.rings {
        if rx < rx_max {
            out.push(Scored {
                factor: 1.2,
                finding: Finding {
                    topic: "rings".into(),
                    finding: format!(
                        "{}: receive ring {rx} of a possible {rx_max}: bursts overflow it sooner",
                        interface.name
                    ),
                    evidence: vec![format!("ethtool rings: rx {rx}/{rx_max}, tx {tx}/{tx_max}")],
                    command: format!("ethtool -G {} rx {rx_max} tx {tx_max}", interface.name),
                    effect: "receive drops under bursts (rx_dropped, rx_missed)".into(),
                    ..Default::default()
                },
            });
        }
    }
}

/// Backlog drops, the CPU governor, the congestion control.
fn host(facts: &Facts, out: &mut Vec<Scored>) {
    let dropped: u64 = facts.reading.softnet.iter().map(|s| s.dropped).sum();
    if dropped > 0 {
        let backlog = facts.settings.netdev_max_backlog.unwrap_or(1000);
        let value = (backlog * 4).max(4096).to_string();
        out.push(Scored {
            factor: 1.3,
            finding: Finding {
                topic: "backlog".into(),
                finding: format!(
                    "{dropped} packets were dropped since boot because a CPU's input backlog ({backlog}) was full"
                ),
                evidence: vec!["/proc/net/softnet_stat, second column".into()],
                command: format!("sysctl -w net.core.netdev_max_backlog={value}"),
                effect: "drops (and retransmissions) under bursts".into(),
                sysctls: vec![("net.core.netdev_max_backlog".into(), value)],
                ..Default::default()
            },
        });
    }
    let slow: Vec<&String> = facts
        .settings
        .governors
        .iter()
        .filter(|g| *g == "powersave")
        .collect();
    if !slow.is_empty() {
        out.push(Scored {
            factor: 1.2,
            finding: Finding {
                topic: "CPU frequency".into(),
                finding: format!(
                    "{} of {} CPUs run the powersave governor: they clock down between bursts",
                    slow.len(),
                    facts.settings.governors.len()
                ),
                evidence: vec!["/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor".into()],
                command: "cpupower frequency-set -g performance".into(),
                effect: "latency (round trips) and CPU per Gbit".into(),
                ..Default::default()
            },
        });
    }
    if let Some(deep) = facts
        .settings
        .idle_states
        .iter()
        .filter(|s| !s.disabled && s.latency_us >= DEEP_IDLE_US)
        .max_by_key(|s| s.latency_us)
    {
        out.push(Scored {
            factor: 1.15,
            finding: Finding {
                topic: "CPU idle states".into(),
                finding: format!(
                    "CPUs may sleep in {}, which takes {} us to leave: a round trip that finds a CPU asleep pays it",
                    deep.name, deep.latency_us
                ),
                evidence: vec!["/sys/devices/system/cpu/cpu0/cpuidle/state*/{name,latency,disable}".into()],
                command: format!("cpupower idle-set -D {}", DEEP_IDLE_US - 1),
                effect: "request/response latency, the tail (p99) most".into(),
                ..Default::default()
            },
        });
    }
    let long_path = facts.rtt_s().is_some_and(|r| r >= 0.02);
    match facts.settings.congestion_control.as_deref() {
        Some("reno") => out.push(congestion(
            1.3,
            "reno halves its window on every loss and regrows it by one segment per round trip",
        )),
        Some("cubic") if long_path => out.push(congestion(
            1.1,
            "cubic reads random loss on a long path as congestion and backs off",
        )),
        _ => {}
    }
}

fn congestion(factor: f64, why: &str) -> Scored {
    Scored {
        factor,
        finding: Finding {
            topic: "congestion control".into(),
            finding: format!("{why}; bbr paces to the path's measured rate instead"),
            evidence: vec!["net.ipv4.tcp_congestion_control".into()],
            command: "sysctl -w net.ipv4.tcp_congestion_control=bbr".into(),
            effect: "one stream's goodput on a long or lossy path (linerate stream -C bbr shows it first)".into(),
            sysctls: vec![("net.ipv4.tcp_congestion_control".into(), "bbr".into())],
            ..Default::default()
        },
    }
}

/// Every finding, the likeliest to move a result first.
pub fn diagnose(facts: &Facts) -> Vec<Finding> {
    let mut scored = Vec::new();
    shaping(facts, &mut scored);
    path_loss(facts, &mut scored);
    egress_qdisc(facts, &mut scored);
    other_work(facts, &mut scored);
    windows(facts, &mut scored);
    queue_spread(facts, &mut scored);
    interfaces(facts, &mut scored);
    host(facts, &mut scored);
    scored.sort_by(|a, b| b.factor.total_cmp(&a.factor));
    scored
        .into_iter()
        .enumerate()
        .map(|(i, s)| Finding {
            rank: i as u32 + 1,
            ..s.finding
        })
        .collect()
}

/// `linerate doctor`'s findings in text, ranked, each with its evidence, the change and
/// what it moves; `applying` when `--apply` is about to set the sysctls.
pub fn render_text(diagnosis: &Diagnosis, facts: &Facts, applying: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = write!(out, "linerate doctor: this host, {} CPUs", facts.cpus);
    match &diagnosis.path {
        Some(path) => {
            let _ = writeln!(
                out,
                "; the path to {}: round trip {:.2} ms{}{}",
                path.target,
                path.rtt_ms,
                path.interface
                    .as_ref()
                    .map_or(String::new(), |i| format!(", out by {i}")),
                match (path.interface_mtu, path.path_mtu) {
                    (Some(mtu), Some(pmtu)) => format!(" (MTU {mtu}, path MTU {pmtu})"),
                    _ => String::new(),
                }
            );
        }
        None => {
            let _ = writeln!(out);
        }
    }
    if let Some(path) = &diagnosis.path {
        match (&path.loss, &path.loss_unprobed) {
            (Some(probe), _) => {
                let _ = writeln!(
                    out,
                    "Loss: {} of {} paced UDP transactions ({:.2} % each way), median round trip {:.2} ms.",
                    probe.lost,
                    probe.lost + probe.answered,
                    probe.each_way() * 100.0,
                    probe.rtt_median_ms
                );
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "Loss not measured: {why}.");
            }
            (None, None) => {}
        }
    }
    if diagnosis.path.is_none() && facts.assumed_rtt_ms.is_none() {
        let _ = writeln!(
            out,
            "Windows are not judged: name a HOST running 'linerate serve', or give --rtt MS."
        );
    } else {
        let _ = writeln!(
            out,
            "Windows are held against {:.1} Gbit/s{}.",
            diagnosis.target_bps / 1e9,
            if facts.target_bps.is_some() {
                " (--target)"
            } else {
                ""
            }
        );
    }
    if diagnosis.findings.is_empty() {
        let _ = writeln!(out, "Nothing found that is likely to hold a result down.");
        return out;
    }
    for finding in &diagnosis.findings {
        let _ = writeln!(
            out,
            "\n{}. {}: {}",
            finding.rank, finding.topic, finding.finding
        );
        for evidence in &finding.evidence {
            let _ = writeln!(out, "   evidence: {evidence}");
        }
        let _ = writeln!(out, "   change:   {}", finding.command);
        let _ = writeln!(out, "   moves:    {}", finding.effect);
    }
    if !applying {
        let sysctls = diagnosis
            .findings
            .iter()
            .filter(|f| !f.sysctls.is_empty())
            .count();
        let _ = writeln!(
            out,
            "\nNothing was changed.{}",
            if sysctls > 0 {
                " --apply sets the sysctls above and prints the old values for undo."
            } else {
                ""
            }
        );
    }
    out
}

/// One sysctl `apply_sysctls` set (or could not find): its name, the value it had and the
/// value it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlChange {
    pub name: String,
    /// `None`: not set, as it has no file here (a host-wide setting seen from a network
    /// namespace of its own).
    pub old: Option<String>,
    pub new: String,
}

impl SysctlChange {
    /// The change as `doctor --apply` tells it: the old value and how to undo it, or why
    /// it could not be set here.
    pub fn words(&self) -> String {
        let SysctlChange { name, old, new } = self;
        match old {
            Some(old) => format!("{name}: '{old}' -> '{new}'   (undo: sysctl -w {name}='{old}')"),
            None => format!(
                "{name}: not set: it is the host's, not this network namespace's; on the host: sysctl -w {name}='{new}'"
            ),
        }
    }
}

/// Sets every sysctl the findings name (root only), in order; returns each change for
/// the caller to show with its undo. One with no file here is passed over and returned
/// unset; stops at the first that cannot be read or set.
pub fn apply_sysctls(diagnosis: &Diagnosis) -> Result<Vec<SysctlChange>, String> {
    let mut changes = Vec::new();
    for (name, value) in diagnosis.findings.iter().flat_map(|f| &f.sysctls) {
        // Names come from the rules, never from input: dotted sysctl names only.
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
        {
            return Err(format!("refusing an unexpected sysctl name '{name}'"));
        }
        let file = format!("/proc/sys/{}", name.replace('.', "/"));
        let old = match std::fs::read_to_string(&file) {
            Ok(old) => old.split_whitespace().collect::<Vec<_>>().join(" "),
            // A setting of the host's own (net.core.netdev_max_backlog) has no file in a
            // network namespace other than the host's: said, and the others still set.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                changes.push(SysctlChange {
                    name: name.clone(),
                    old: None,
                    new: value.clone(),
                });
                continue;
            }
            Err(e) => return Err(format!("reading {name}: {e}")),
        };
        std::fs::write(&file, value).map_err(|e| format!("setting {name} (needs root): {e}"))?;
        changes.push(SysctlChange {
            name: name.clone(),
            old: Some(old),
            new: value.clone(),
        });
    }
    Ok(changes)
}
