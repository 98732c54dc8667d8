//! A path trace (`linerate trace`, docs/trace.md): the hops each flow's probes met, the
//! addresses seen at each distance across flows (the equal-cost branches a multi-flow test
//! takes), its text and CSV rows.

use crate::result_kind::{ResultKind, Rows};
use crate::units::Scale;
use linerate_model::measure::Headline as MeshHeadline;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The `test` value of a trace document.
pub const TRACE: &str = "trace";

/// What answered one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The address the answer came from.
    pub address: String,
    /// From the probe's leaving to the answer's arrival, milliseconds.
    pub rtt_ms: f64,
    /// "time exceeded" (a router on the way), "reached" (the destination: a port
    /// unreachable, an echo reply, a SYN-ACK or RST), or why the path ended there
    /// ("host unreachable", "network unreachable", "administratively prohibited", ...).
    pub kind: String,
}

/// One distance (TTL or hop limit) of one flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowHop {
    pub ttl: u8,
    /// Each query's answer, `None` for one that timed out.
    pub answers: Vec<Option<Answer>>,
}

/// The hops one flow's probes met: every probe of a flow has the same five-tuple, so a
/// load balancer sends them all one way (Paris traceroute).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowPath {
    pub flow: u16,
    /// The flow's source port (UDP, TCP) or ICMP identifier.
    pub source_port: u16,
    pub hops: Vec<FlowHop>,
    /// The distance at which the destination answered; `None`: not reached.
    pub reached_ttl: Option<u8>,
    /// With the MTU probed (`--mtu`): the first hop's MTU, then each narrowing: the
    /// distance of the first hop beyond the narrower link, and its MTU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pmtu: Vec<PathMtu>,
}

/// Probes from this distance on cross a link of at most this MTU (octets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathMtu {
    pub ttl: u8,
    pub mtu: u16,
}

/// An address seen at one distance and the flows that met it there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopAddress {
    pub address: String,
    pub flows: Vec<u16>,
    pub rtt_min_ms: f64,
    pub rtt_median_ms: f64,
    pub rtt_max_ms: f64,
}

/// One distance across every flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub ttl: u8,
    /// Sorted by address; empty when nothing answered at this distance.
    pub addresses: Vec<HopAddress>,
    /// Probes at this distance that got no answer.
    pub unanswered: u64,
    /// With the MTU probed: the path's MTU from this distance on, where a flow found it
    /// changed here (the smallest among flows), the first hop's too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceReport {
    /// Always [`TRACE`].
    pub test: String,
    pub started_at: f64,
    pub target: String,
    pub address: String,
    /// "udp", "tcp" or "icmp".
    pub protocol: String,
    /// The destination port of UDP and TCP probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub flows: u16,
    pub queries: u8,
    pub first_ttl: u8,
    pub max_ttl: u8,
    pub duration_s: f64,
    pub sent: u64,
    pub answered: u64,
    /// Answers that matched no probe of this run (another program's, or too late).
    pub unmatched: u64,
    pub paths: Vec<FlowPath>,
    pub hops: Vec<Hop>,
    /// Whether every flow reached the destination.
    pub reached: bool,
    /// Distinct hop lists among the flows (unanswered hops are wildcards).
    pub distinct_paths: usize,
    #[serde(default)]
    pub warnings: Vec<String>,
    #[serde(default)]
    pub host: Option<linerate_model::HostFacts>,
}

/// The addresses met at one distance: each with its flows and round trips.
type AddressesAt = BTreeMap<String, (Vec<u16>, Vec<f64>)>;

fn median(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

impl TraceReport {
    /// The per-distance view from the flows' paths: at each TTL, every address with the
    /// flows that met it; and how many distinct paths the flows took.
    pub fn merge(paths: &[FlowPath]) -> (Vec<Hop>, usize) {
        let mut by_ttl: BTreeMap<u8, (AddressesAt, u64)> = BTreeMap::new();
        for path in paths {
            for hop in &path.hops {
                let (addresses, unanswered) = by_ttl.entry(hop.ttl).or_default();
                for answer in &hop.answers {
                    match answer {
                        None => *unanswered += 1,
                        Some(a) => {
                            let (flows, rtts) = addresses.entry(a.address.clone()).or_default();
                            if !flows.contains(&path.flow) {
                                flows.push(path.flow);
                            }
                            rtts.push(a.rtt_ms);
                        }
                    }
                }
            }
        }
        let mtu_at = |ttl: u8| {
            paths
                .iter()
                .flat_map(|p| &p.pmtu)
                .filter(|m| m.ttl == ttl)
                .map(|m| m.mtu)
                .min()
        };
        let hops = by_ttl
            .into_iter()
            .map(|(ttl, (addresses, unanswered))| Hop {
                ttl,
                unanswered,
                mtu: mtu_at(ttl),
                addresses: addresses
                    .into_iter()
                    .map(|(address, (flows, mut rtts))| {
                        rtts.sort_by(f64::total_cmp);
                        HopAddress {
                            address,
                            flows,
                            rtt_min_ms: rtts[0],
                            rtt_median_ms: median(&rtts),
                            rtt_max_ms: rtts[rtts.len() - 1],
                        }
                    })
                    .collect(),
            })
            .collect();
        (hops, distinct_paths(paths))
    }

    /// The way each flow went, as a later trace of the same pair is compared with it.
    pub fn route(&self) -> Route {
        Route {
            address: self.address.clone(),
            flows: self
                .paths
                .iter()
                .map(|path| {
                    let last = path.reached_ttl.unwrap_or(u8::MAX);
                    FlowRoute {
                        source_port: path.source_port,
                        reached_ttl: path.reached_ttl,
                        pmtu: path.pmtu.clone(),
                        hops: path
                            .hops
                            .iter()
                            .filter(|h| h.ttl <= last)
                            .map(|h| {
                                let mut seen: Vec<String> = h
                                    .answers
                                    .iter()
                                    .flatten()
                                    .map(|a| a.address.clone())
                                    .collect();
                                seen.sort();
                                seen.dedup();
                                (h.ttl, seen)
                            })
                            .collect(),
                    }
                })
                .collect(),
        }
    }
}

/// The way a trace's flows went: what a mesh keeps of each pair's last trace, to tell
/// whether the next one went another way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// The destination's address.
    pub address: String,
    pub flows: Vec<FlowRoute>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRoute {
    pub source_port: u16,
    /// Each distance and the addresses that answered there (none: nothing did).
    pub hops: Vec<(u8, Vec<String>)>,
    pub reached_ttl: Option<u8>,
    /// Where the MTU was probed: the first hop's and each narrowing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pmtu: Vec<PathMtu>,
}

/// Where a trace went another way than the last one of its pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathChange {
    /// The nearest distance at which the first changed flow met other routers (or, where
    /// its way only got longer or shorter, the nearer of the two ends).
    pub ttl: u8,
    /// The distance the hop lists start at.
    pub first_ttl: u8,
    /// The flows that changed, by their number in the trace.
    pub flows: Vec<u16>,
    /// The first changed flow's hop list before and after ("*" for a distance where
    /// nothing answered), to the destination.
    pub before: Vec<String>,
    pub after: Vec<String>,
    /// Where the way is the same but the path's MTU is not: before and now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<(u16, u16)>,
}

impl PathChange {
    /// "hop 2: 10.0.2.2 -> 10.0.3.2 (1 of 4 flows); was ..., now ...", or "path MTU
    /// 1500 -> 1400 from hop 3 (4 of 4 flows)".
    pub fn words(&self, flows: usize) -> String {
        if let Some((was, now)) = self.mtu {
            return format!(
                "path MTU {was} -> {now} from hop {} ({} of {flows} flow{}); the way {}",
                self.ttl,
                self.flows.len(),
                if flows == 1 { "" } else { "s" },
                self.after.join(" ")
            );
        }
        let at = usize::from(self.ttl.saturating_sub(self.first_ttl));
        let hop = |list: &[String]| list.get(at).cloned().unwrap_or_else(|| "(none)".into());
        format!(
            "hop {}: {} -> {} ({} of {flows} flow{}); was {}, now {}",
            self.ttl,
            hop(&self.before),
            hop(&self.after),
            self.flows.len(),
            if flows == 1 { "" } else { "s" },
            self.before.join(" "),
            self.after.join(" "),
        )
    }
}

impl FlowRoute {
    /// Where both traces probed the MTU and the path's (the narrowest link's) differs:
    /// the distance it now narrows at (or did), and the MTU before and now.
    fn mtu_change_from(&self, before: &FlowRoute) -> Option<(u8, (u16, u16))> {
        let narrowest = |route: &FlowRoute| route.pmtu.iter().min_by_key(|m| m.mtu).copied();
        let (now, was) = (narrowest(self)?, narrowest(before)?);
        (now.mtu != was.mtu).then(|| {
            let ttl = if now.mtu < was.mtu { now.ttl } else { was.ttl };
            (ttl, (was.mtu, now.mtu))
        })
    }

    fn list(&self) -> Vec<String> {
        self.hops
            .iter()
            .map(|(_, seen)| seen.first().cloned().unwrap_or_else(|| "*".into()))
            .collect()
    }

    /// The nearest distance at which this flow went another way than `before` did: routers
    /// that answered at the same distance in both and share no address, or a destination
    /// reached in both at another distance. A distance unanswered in either proves
    /// nothing (a router that rate-limits its answers), nor does a trace that did not
    /// reach (a lost answer).
    fn differs_from(&self, before: &FlowRoute) -> Option<u8> {
        let before_at: BTreeMap<u8, &Vec<String>> =
            before.hops.iter().map(|(ttl, seen)| (*ttl, seen)).collect();
        let routers = |route: &FlowRoute, ttl: u8| route.reached_ttl.is_none_or(|r| ttl < r);
        for (ttl, seen) in &self.hops {
            let Some(was) = before_at.get(ttl) else {
                continue;
            };
            if seen.is_empty() || was.is_empty() {
                continue;
            }
            // Where one trace met a router and the other the destination, the lengths
            // below tell it.
            if routers(self, *ttl) != routers(before, *ttl) {
                continue;
            }
            if !seen.iter().any(|a| was.contains(a)) {
                return Some(*ttl);
            }
        }
        match (self.reached_ttl, before.reached_ttl) {
            (Some(now), Some(was)) if now != was => Some(now.min(was)),
            _ => None,
        }
    }
}

impl Route {
    /// Where this route (a pair's newest trace) went another way than `before` (the
    /// pair's last), flow by flow: `None` when no flow did, or when the two cannot be
    /// compared (another destination address). Flows are matched by their number; where
    /// a flow's source port changed, the load balancers may send it elsewhere by right,
    /// and it is left out.
    pub fn change_from(&self, before: &Route) -> Option<PathChange> {
        if self.address != before.address {
            return None;
        }
        let mut change: Option<PathChange> = None;
        for (flow, (now, was)) in self.flows.iter().zip(&before.flows).enumerate() {
            if now.source_port != was.source_port {
                continue;
            }
            let (ttl, mtu) = match (now.differs_from(was), now.mtu_change_from(was)) {
                (Some(ttl), _) => (ttl, None),
                (None, Some((ttl, mtu))) => (ttl, Some(mtu)),
                (None, None) => continue,
            };
            let flow = flow as u16;
            match change.as_mut() {
                Some(c) => c.flows.push(flow),
                None => {
                    change = Some(PathChange {
                        ttl,
                        first_ttl: now.hops.first().map_or(1, |(ttl, _)| *ttl),
                        flows: vec![flow],
                        before: was.list(),
                        after: now.list(),
                        mtu,
                    })
                }
            }
        }
        change
    }
}

fn hop_list(path: &FlowPath) -> Vec<Option<String>> {
    let last = path.reached_ttl.unwrap_or(u8::MAX);
    path.hops
        .iter()
        .filter(|h| h.ttl <= last)
        .map(|h| h.answers.iter().flatten().next().map(|a| a.address.clone()))
        .collect()
}

/// Distinct hop lists, an unanswered hop matching any address.
fn distinct_paths(paths: &[FlowPath]) -> usize {
    let lists: Vec<Vec<Option<String>>> = paths.iter().map(hop_list).collect();
    let mut distinct: Vec<&Vec<Option<String>>> = Vec::new();
    for list in &lists {
        let same = |other: &&Vec<Option<String>>| {
            other.len() == list.len()
                && other
                    .iter()
                    .zip(list.iter())
                    .all(|(a, b)| a.is_none() || b.is_none() || a == b)
        };
        if !distinct.iter().any(same) {
            distinct.push(list);
        }
    }
    distinct.len()
}

impl ResultKind for TraceReport {
    fn test(&self) -> &str {
        &self.test
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn started_at(&self) -> f64 {
        self.started_at
    }

    fn path(&self) -> Option<&linerate_model::PathFacts> {
        self.host.as_ref().and_then(|h| h.path.as_deref())
    }

    fn mesh_figure(&self, which: MeshHeadline) -> (Option<f64>, String) {
        if which != MeshHeadline::Hops {
            return (None, String::new());
        }
        let farthest = self.paths.iter().filter_map(|p| p.reached_ttl).max();
        (farthest.map(f64::from), self.headline_text(Scale::Adaptive))
    }

    /// "3 hops, 2 paths over 8 flows" or "not reached after 30 hops".
    fn headline_text(&self, _scale: Scale) -> String {
        let longest = self.paths.iter().filter_map(|p| p.reached_ttl).max();
        let hops = |n: u8| format!("{n} hop{}", if n == 1 { "" } else { "s" });
        let reach = match (self.reached, longest) {
            (true, Some(ttl)) => hops(ttl),
            (false, Some(ttl)) => format!("{}, not every flow reached it", hops(ttl)),
            _ => format!("not reached within {} hops", self.max_ttl),
        };
        let plural = if self.distinct_paths == 1 { "" } else { "s" };
        format!(
            "{reach}, {} path{plural} over {} flow{}",
            self.distinct_paths,
            self.flows,
            if self.flows == 1 { "" } else { "s" }
        )
    }

    /// traceroute's layout: a line per distance, an address a line where flows split.
    fn render_text(&self, _scale: Scale) -> String {
        let mut out = format!(
            "trace to {} ({}), {} {}{}, {} flow{}, {} quer{} a hop\n",
            self.target,
            self.address,
            self.protocol.to_uppercase(),
            match self.port {
                Some(port) => format!("port {port}"),
                None => "echo".into(),
            },
            format_args!(", {} hops max", self.max_ttl),
            self.flows,
            if self.flows == 1 { "" } else { "s" },
            self.queries,
            if self.queries == 1 { "y" } else { "ies" },
        );
        let last = self
            .paths
            .iter()
            .map(|p| p.reached_ttl.unwrap_or(self.max_ttl))
            .max()
            .unwrap_or(self.max_ttl);
        for hop in self.hops.iter().filter(|h| h.ttl <= last) {
            if hop.addresses.is_empty() {
                let mtu = hop.mtu.map_or(String::new(), |m| format!("  pmtu {m}"));
                let _ = writeln!(out, "{:>3}  *{mtu}", hop.ttl);
                continue;
            }
            for (i, a) in hop.addresses.iter().enumerate() {
                let ttl = if i == 0 {
                    format!("{:>3}", hop.ttl)
                } else {
                    "   ".into()
                };
                let flows = if self.flows > 1 && a.flows.len() < usize::from(self.flows) {
                    let list: Vec<String> = a.flows.iter().map(u16::to_string).collect();
                    format!("  [flows {}]", list.join(","))
                } else {
                    String::new()
                };
                let mtu = match hop.mtu {
                    Some(mtu) if i == 0 => format!("  pmtu {mtu}"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "{ttl}  {:<39} {:.3} ms (min {:.3}, max {:.3}){flows}{mtu}",
                    a.address, a.rtt_median_ms, a.rtt_min_ms, a.rtt_max_ms
                );
            }
            if hop.unanswered > 0 {
                let _ = writeln!(out, "     {} probe(s) unanswered", hop.unanswered);
            }
        }
        let _ = writeln!(out, "{}", self.headline_text(Scale::Adaptive));
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }

    /// CSV: a row per flow, distance and query.
    fn rows(&self) -> Rows {
        let header = [
            "flow",
            "source_port",
            "ttl",
            "query",
            "address",
            "rtt_ms",
            "kind",
        ]
        .map(String::from)
        .to_vec();
        let mut rows = Vec::new();
        for path in &self.paths {
            for hop in &path.hops {
                for (query, answer) in hop.answers.iter().enumerate() {
                    let (address, rtt, kind) = match answer {
                        Some(a) => (
                            a.address.clone(),
                            format!("{:.3}", a.rtt_ms),
                            a.kind.clone(),
                        ),
                        None => (String::new(), String::new(), "timeout".into()),
                    };
                    rows.push(vec![
                        path.flow.to_string(),
                        path.source_port.to_string(),
                        hop.ttl.to_string(),
                        query.to_string(),
                        address,
                        rtt,
                        kind,
                    ]);
                }
            }
        }
        (header, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(address: &str, rtt_ms: f64) -> Option<Answer> {
        Some(Answer {
            address: address.into(),
            rtt_ms,
            kind: "time exceeded".into(),
        })
    }

    fn path(flow: u16, middle: &str) -> FlowPath {
        FlowPath {
            flow,
            source_port: 40000 + flow,
            hops: vec![
                FlowHop {
                    ttl: 1,
                    answers: vec![answer("10.0.0.1", 0.1)],
                },
                FlowHop {
                    ttl: 2,
                    answers: vec![answer(middle, 0.2)],
                },
                FlowHop {
                    ttl: 3,
                    answers: vec![None],
                },
                FlowHop {
                    ttl: 4,
                    answers: vec![Some(Answer {
                        address: "10.0.9.2".into(),
                        rtt_ms: 0.4,
                        kind: "reached".into(),
                    })],
                },
            ],
            reached_ttl: Some(4),
            pmtu: Vec::new(),
        }
    }

    #[test]
    fn flows_that_split_are_two_paths_and_each_address_names_its_flows() {
        let paths = vec![
            path(0, "10.0.1.2"),
            path(1, "10.0.2.2"),
            path(2, "10.0.1.2"),
        ];
        let (hops, distinct) = TraceReport::merge(&paths);
        assert_eq!(distinct, 2);
        assert_eq!(hops.len(), 4);
        assert_eq!(hops[0].addresses.len(), 1);
        assert_eq!(hops[0].addresses[0].flows, vec![0, 1, 2]);
        let split: Vec<(&str, &Vec<u16>)> = hops[1]
            .addresses
            .iter()
            .map(|a| (a.address.as_str(), &a.flows))
            .collect();
        assert_eq!(
            split,
            vec![("10.0.1.2", &vec![0, 2]), ("10.0.2.2", &vec![1])]
        );
        assert_eq!(hops[2].unanswered, 3);
        let report = TraceReport {
            test: TRACE.into(),
            started_at: 0.0,
            target: "server".into(),
            address: "10.0.9.2".into(),
            protocol: "udp".into(),
            port: Some(33434),
            flows: 3,
            queries: 1,
            first_ttl: 1,
            max_ttl: 30,
            duration_s: 0.1,
            sent: 12,
            answered: 9,
            unmatched: 0,
            paths,
            hops,
            reached: true,
            distinct_paths: distinct,
            warnings: Vec::new(),
            host: None,
        };
        let text = report.render_text(Scale::Adaptive);
        assert!(text.contains("  2  10.0.1.2"), "{text}");
        assert!(text.contains("[flows 0,2]"), "{text}");
        assert!(text.contains("  3  *"), "{text}");
        assert!(text.contains("4 hops, 2 paths over 3 flows"), "{text}");
        let (header, rows) = report.rows();
        assert_eq!(header.len(), rows[0].len());
        assert_eq!(rows.len(), 12);
        let back: TraceReport =
            serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn an_unanswered_hop_matches_any_address() {
        let mut quiet = path(1, "10.0.1.2");
        quiet.hops[1].answers = vec![None];
        let (_, distinct) = TraceReport::merge(&[path(0, "10.0.1.2"), quiet]);
        assert_eq!(distinct, 1);
    }

    fn route_of(paths: Vec<FlowPath>) -> Route {
        let (hops, distinct_paths) = TraceReport::merge(&paths);
        TraceReport {
            test: TRACE.into(),
            started_at: 0.0,
            target: "server".into(),
            address: "10.0.9.2".into(),
            protocol: "udp".into(),
            port: Some(33434),
            flows: paths.len() as u16,
            queries: 1,
            first_ttl: 1,
            max_ttl: 30,
            duration_s: 0.1,
            sent: 0,
            answered: 0,
            unmatched: 0,
            paths,
            hops,
            reached: true,
            distinct_paths,
            warnings: Vec::new(),
            host: None,
        }
        .route()
    }

    /// Another router at a distance where both traces met one is a change, named by its
    /// distance, its flows and both hop lists; the same way is none.
    #[test]
    fn another_router_at_a_distance_is_a_path_change() {
        let before = route_of(vec![path(0, "10.0.1.2"), path(1, "10.0.2.2")]);
        assert_eq!(before.change_from(&before), None);
        let after = route_of(vec![path(0, "10.0.1.2"), path(1, "10.0.3.2")]);
        let change = after.change_from(&before).expect("a change");
        assert_eq!((change.ttl, change.flows.clone()), (2, vec![1]));
        assert_eq!(change.before, ["10.0.0.1", "10.0.2.2", "*", "10.0.9.2"]);
        assert_eq!(change.after, ["10.0.0.1", "10.0.3.2", "*", "10.0.9.2"]);
        let words = change.words(2);
        assert!(
            words.starts_with("hop 2: 10.0.2.2 -> 10.0.3.2 (1 of 2 flows)"),
            "{words}"
        );
    }

    /// What proves nothing is no change: a distance unanswered either time (a router
    /// that rate-limits), a trace that did not reach (an answer lost), a flow whose
    /// source port changed (a balancer may send it elsewhere by right), another
    /// destination address.
    #[test]
    fn silence_a_lost_answer_or_another_five_tuple_is_no_change() {
        let before = route_of(vec![path(0, "10.0.1.2")]);
        let mut quiet = path(0, "10.0.1.2");
        quiet.hops[1].answers = vec![None];
        assert_eq!(route_of(vec![quiet]).change_from(&before), None);
        let mut short = path(0, "10.0.1.2");
        short.hops.truncate(3);
        short.reached_ttl = None;
        assert_eq!(route_of(vec![short]).change_from(&before), None);
        let mut moved = path(0, "10.0.7.2");
        moved.source_port += 100;
        assert_eq!(route_of(vec![moved]).change_from(&before), None);
        let mut elsewhere = route_of(vec![path(0, "10.0.7.2")]);
        elsewhere.address = "10.0.9.3".into();
        assert_eq!(elsewhere.change_from(&before), None);
    }

    /// A destination reached at another distance is a change even where every router
    /// that answered is the same (a hop added that did not answer).
    #[test]
    fn a_longer_way_to_the_destination_is_a_change() {
        let before = route_of(vec![path(0, "10.0.1.2")]);
        let mut longer = path(0, "10.0.1.2");
        let last = longer.hops.pop().unwrap();
        longer.hops.push(FlowHop {
            ttl: 4,
            answers: vec![None],
        });
        longer.hops.push(FlowHop { ttl: 5, ..last });
        longer.reached_ttl = Some(5);
        let change = route_of(vec![longer])
            .change_from(&before)
            .expect("a change");
        assert_eq!(change.ttl, 4);
        assert_eq!(change.after.len(), 5);
    }

    /// The same routers with a narrower link on the way is a change of the path's MTU,
    /// named with the hop it narrows at; where one trace did not probe the MTU nothing is
    /// compared.
    #[test]
    fn a_narrower_link_on_the_same_way_is_a_change_of_mtu() {
        let probed = |mtus: &[(u8, u16)]| {
            let mut p = path(0, "10.0.1.2");
            p.pmtu = mtus
                .iter()
                .map(|&(ttl, mtu)| PathMtu { ttl, mtu })
                .collect();
            route_of(vec![p])
        };
        let before = probed(&[(1, 1500)]);
        let after = probed(&[(1, 1500), (3, 1400)]);
        let change = after.change_from(&before).expect("a change");
        assert_eq!((change.ttl, change.mtu), (3, Some((1500, 1400))));
        assert!(
            change
                .words(1)
                .starts_with("path MTU 1500 -> 1400 from hop 3 (1 of 1 flow)"),
            "{}",
            change.words(1)
        );
        assert_eq!(after.change_from(&after), None);
        assert_eq!(after.change_from(&probed(&[])), None);
        let back = before.change_from(&after).expect("wider again");
        assert_eq!((back.ttl, back.mtu), (3, Some((1400, 1500))));
    }
}
