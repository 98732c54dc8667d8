//! The prober, sans-IO: which probe goes out when, what an answer means for the trace,
//! and when the trace is done. Time is the caller's nanoseconds.
//!
//! Probes go out paced (routers rate-limit the ICMP they send), the first query of every
//! distance and flow before the second, nearer distances first, so that once a flow's
//! destination answers its farther probes are not sent at all. The trace ends when every
//! probe that matters (no farther than where its flow's destination answered) has its
//! answer, or has waited [`Plan::wait_ns`].

use linerate_report::trace::{Answer, FlowHop, FlowPath, PathMtu};
use std::collections::{HashMap, VecDeque};

/// The smallest MTU a router may name (IPv4's 68 octets): a smaller one is not believed.
pub const MIN_MTU: u16 = 68;

/// What to probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub flows: u16,
    pub queries: u8,
    pub first_ttl: u8,
    pub max_ttl: u8,
    /// Between two probes.
    pub gap_ns: u64,
    /// How long a probe waits for its answer.
    pub wait_ns: u64,
}

/// One probe: the flow (its socket, its source port) and, on the wire, a 16-bit tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeId {
    pub flow: u16,
    pub ttl: u8,
    pub query: u8,
}

impl ProbeId {
    /// The 16 bits a probe carries (payload tag, ICMP sequence, TCP sequence's low half):
    /// its distance and query. Its flow is told by its socket or source port.
    pub fn tag(self) -> u16 {
        (u16::from(self.ttl) << 8) | u16::from(self.query)
    }

    pub fn from_tag(flow: u16, tag: u16) -> ProbeId {
        ProbeId {
            flow,
            ttl: (tag >> 8) as u8,
            query: tag as u8,
        }
    }
}

/// What an answer says of its probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// A router at this distance: ICMP time exceeded.
    TimeExceeded,
    /// The destination: port unreachable (UDP), echo reply (ICMP), SYN-ACK or RST (TCP).
    Reached,
    /// The path ends here for another reason (host or network unreachable, prohibited).
    Unreachable(&'static str),
}

impl Reply {
    fn words(self) -> String {
        match self {
            Reply::TimeExceeded => "time exceeded".into(),
            Reply::Reached => "reached".into(),
            Reply::Unreachable(why) => why.into(),
        }
    }

    /// Whether the path goes no farther than this answer.
    fn ends(self) -> bool {
        !matches!(self, Reply::TimeExceeded)
    }
}

pub struct Prober {
    plan: Plan,
    /// Every probe in sending order.
    order: Vec<ProbeId>,
    next: usize,
    next_send_ns: u64,
    /// When each probe left, and its size (with the MTU probed; else 0).
    sent: HashMap<ProbeId, (u64, u16)>,
    /// Probes a router refused as too big, to send again smaller, before the next new one.
    retry: VecDeque<ProbeId>,
    /// With the MTU probed: each flow's probe size now, and where it was lowered (the
    /// distance of the first hop beyond the narrower link, and its MTU), the first
    /// entry the first hop's.
    sizes: Vec<u16>,
    mtus: Vec<Vec<PathMtu>>,
    /// Probes sent again after a "too big".
    resent: u64,
    answers: HashMap<ProbeId, (String, u64, Reply)>,
    /// Per flow, the nearest distance at which the path ended.
    ended_at: Vec<Option<u8>>,
    last_sent_ns: u64,
    unmatched: u64,
}

impl Prober {
    pub fn new(plan: Plan) -> Prober {
        let mut order = Vec::new();
        for query in 0..plan.queries {
            for ttl in plan.first_ttl..=plan.max_ttl {
                for flow in 0..plan.flows {
                    order.push(ProbeId { flow, ttl, query });
                }
            }
        }
        Prober {
            ended_at: vec![None; usize::from(plan.flows)],
            plan,
            order,
            next: 0,
            next_send_ns: 0,
            sent: HashMap::new(),
            retry: VecDeque::new(),
            sizes: Vec::new(),
            mtus: Vec::new(),
            resent: 0,
            answers: HashMap::new(),
            last_sent_ns: 0,
            unmatched: 0,
        }
    }

    /// A prober that also finds each hop's MTU (tracepath's way): every probe as large
    /// as the path allows, starting at `first_mtu` (the route's), and a router's "too
    /// big" (fragmentation needed, packet too big) naming a narrower link lowers the
    /// flow's size and sends the probe again.
    pub fn with_mtu(plan: Plan, first_mtu: u16) -> Prober {
        let mut prober = Prober::new(plan);
        let first_mtu = first_mtu.max(MIN_MTU);
        prober.sizes = vec![first_mtu; usize::from(plan.flows)];
        prober.mtus = vec![
            vec![PathMtu {
                ttl: plan.first_ttl,
                mtu: first_mtu,
            }];
            usize::from(plan.flows)
        ];
        prober
    }

    /// The size (IP packet, octets) of `flow`'s next probe when the MTU is probed.
    pub fn size(&self, flow: u16) -> Option<u16> {
        self.sizes.get(usize::from(flow)).copied()
    }

    /// A router refused probe `id` as too big for its next link of `mtu`: the flow's
    /// probes shrink to it from that distance on, and this probe goes again. False when
    /// it matches no probe sent larger than `mtu` and unanswered (a stray or bogus
    /// message).
    pub fn too_big(&mut self, id: ProbeId, mtu: u16) -> bool {
        let flow = usize::from(id.flow);
        let Some(&(_, size)) = self.sent.get(&id) else {
            self.unmatched += 1;
            return false;
        };
        if self.answers.contains_key(&id)
            || flow >= self.sizes.len()
            || mtu >= size
            || mtu < MIN_MTU
        {
            self.unmatched += 1;
            return false;
        }
        if mtu < self.sizes[flow] {
            self.sizes[flow] = mtu;
            self.mtus[flow].push(PathMtu { ttl: id.ttl, mtu });
        } else if let Some(known) = self.mtus[flow].iter_mut().find(|m| m.mtu == mtu) {
            // Another probe of the same narrowing, nearer: the narrowing is there.
            known.ttl = known.ttl.min(id.ttl);
        }
        self.sent.remove(&id);
        self.retry.push_back(id);
        self.resent += 1;
        true
    }

    fn matters(&self, id: ProbeId) -> bool {
        self.ended_at[usize::from(id.flow)].map_or(true, |end| id.ttl <= end)
    }

    /// The probe to send at `now_ns`, if one is due; the caller sends it and calls
    /// [`Prober::sent`].
    pub fn poll_send(&mut self, now_ns: u64) -> Option<ProbeId> {
        if now_ns < self.next_send_ns {
            return None;
        }
        while let Some(id) = self.retry.pop_front() {
            if self.matters(id) {
                return Some(id);
            }
        }
        while let Some(&id) = self.order.get(self.next) {
            self.next += 1;
            if self.matters(id) {
                return Some(id);
            }
        }
        None
    }

    pub fn sent(&mut self, id: ProbeId, at_ns: u64) {
        let size = self.size(id.flow).unwrap_or(0);
        self.sent.insert(id, (at_ns, size));
        self.last_sent_ns = at_ns;
        self.next_send_ns = at_ns + self.plan.gap_ns;
    }

    /// An answer to probe `id` from `from`, arrived at `at_ns`; false when it matches no
    /// probe sent (or one already answered).
    pub fn answered(&mut self, id: ProbeId, from: String, at_ns: u64, outcome: Reply) -> bool {
        let Some(&(sent_at, _)) = self.sent.get(&id) else {
            self.unmatched += 1;
            return false;
        };
        if self.answers.contains_key(&id) {
            self.unmatched += 1;
            return false;
        }
        if outcome.ends() {
            let end = &mut self.ended_at[usize::from(id.flow)];
            *end = Some(end.map_or(id.ttl, |e| e.min(id.ttl)));
        }
        self.answers
            .insert(id, (from, at_ns.saturating_sub(sent_at), outcome));
        true
    }

    /// Whether nothing is left: every probe that matters sent, and answered or waited out.
    pub fn done(&self, now_ns: u64) -> bool {
        if self.order[self.next..].iter().any(|id| self.matters(*id))
            || self.retry.iter().any(|id| self.matters(*id))
        {
            return false;
        }
        self.sent.iter().all(|(id, &(at, _))| {
            !self.matters(*id) || self.answers.contains_key(id) || now_ns >= at + self.plan.wait_ns
        })
    }

    /// When to call again at the latest: the next send, or the next probe's wait ending.
    pub fn poll_timeout(&self, now_ns: u64) -> u64 {
        if self.order[self.next..].iter().any(|id| self.matters(*id))
            || self.retry.iter().any(|id| self.matters(*id))
        {
            return self.next_send_ns.max(now_ns);
        }
        self.sent
            .iter()
            .filter(|(id, _)| self.matters(**id) && !self.answers.contains_key(id))
            .map(|(_, &(at, _))| at + self.plan.wait_ns)
            .min()
            .unwrap_or(now_ns)
    }

    pub fn sent_count(&self) -> u64 {
        self.sent.len() as u64 + self.resent
    }

    pub fn answered_count(&self) -> u64 {
        self.answers.len() as u64
    }

    pub fn unmatched(&self) -> u64 {
        self.unmatched
    }

    /// Each flow's hops, up to where its path ended (or every distance probed).
    pub fn paths(&self, source_ports: &[u16]) -> Vec<FlowPath> {
        (0..self.plan.flows)
            .map(|flow| {
                let end = self.ended_at[usize::from(flow)];
                let last = end.unwrap_or(self.plan.max_ttl);
                let hops = (self.plan.first_ttl..=last)
                    .map(|ttl| FlowHop {
                        ttl,
                        answers: (0..self.plan.queries)
                            .filter_map(|query| {
                                let id = ProbeId { flow, ttl, query };
                                self.sent.contains_key(&id).then(|| {
                                    self.answers
                                        .get(&id)
                                        .map(|(address, rtt_ns, outcome)| Answer {
                                            address: address.clone(),
                                            rtt_ms: *rtt_ns as f64 / 1e6,
                                            kind: outcome.words(),
                                        })
                                })
                            })
                            .collect(),
                    })
                    .collect();
                let reached = (0..self.plan.queries).any(|query| {
                    end.is_some_and(|ttl| {
                        self.answers
                            .get(&ProbeId { flow, ttl, query })
                            .is_some_and(|a| a.2 == Reply::Reached)
                    })
                });
                FlowPath {
                    flow,
                    source_port: source_ports.get(usize::from(flow)).copied().unwrap_or(0),
                    hops,
                    reached_ttl: end.filter(|_| reached),
                    pmtu: self
                        .mtus
                        .get(usize::from(flow))
                        .cloned()
                        .unwrap_or_default(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(flows: u16, queries: u8) -> Plan {
        Plan {
            flows,
            queries,
            first_ttl: 1,
            max_ttl: 30,
            gap_ns: 1_000,
            wait_ns: 1_000_000,
        }
    }

    /// A path of `length` hops: router i at 10.0.i.1, the destination 10.9.9.9.
    fn answer_for(id: ProbeId, length: u8) -> (String, Reply) {
        if id.ttl >= length {
            ("10.9.9.9".into(), Reply::Reached)
        } else {
            (format!("10.0.{}.1", id.ttl), Reply::TimeExceeded)
        }
    }

    #[test]
    fn tags_carry_distance_and_query() {
        for ttl in [1u8, 30, 255] {
            for query in [0u8, 2, 255] {
                let id = ProbeId {
                    flow: 3,
                    ttl,
                    query,
                };
                assert_eq!(ProbeId::from_tag(3, id.tag()), id);
            }
        }
    }

    #[test]
    fn a_reached_destination_stops_the_farther_probes_and_ends_the_trace_early() {
        let mut p = Prober::new(plan(2, 1));
        let mut now = 0;
        let mut sent = Vec::new();
        // Answers come back at once: the probes past hop 4 are never sent.
        while let Some(id) = p.poll_send(now) {
            p.sent(id, now);
            sent.push(id);
            let (from, outcome) = answer_for(id, 4);
            assert!(p.answered(id, from, now + 500, outcome));
            now += 1_000;
        }
        assert_eq!(sent.len(), 8, "{sent:?}");
        assert!(p.done(now), "nothing left to wait for");
        let paths = p.paths(&[40000, 40001]);
        assert_eq!(paths[0].reached_ttl, Some(4));
        assert_eq!(paths[1].hops.len(), 4);
        assert_eq!(
            paths[1].hops[3].answers[0].as_ref().unwrap().kind,
            "reached"
        );
        assert!((paths[0].hops[0].answers[0].as_ref().unwrap().rtt_ms - 0.0005).abs() < 1e-9);
    }

    #[test]
    fn a_silent_hop_is_waited_for_then_shown_unanswered() {
        let mut p = Prober::new(plan(1, 2));
        let mut now = 0;
        while !p.done(now) {
            if let Some(id) = p.poll_send(now) {
                p.sent(id, now);
                // Hop 2 never answers; the destination is at 3.
                if id.ttl != 2 {
                    let (from, outcome) = answer_for(id, 3);
                    p.answered(id, from, now + 100, outcome);
                }
            }
            now = p.poll_timeout(now).max(now + 1);
        }
        // It waited out hop 2's probes, no longer.
        assert!((1_000_000..1_100_000).contains(&now), "{now}");
        let path = &p.paths(&[0])[0];
        assert_eq!(path.reached_ttl, Some(3));
        assert_eq!(path.hops[1].answers, vec![None, None]);
        assert_eq!(p.sent_count(), 6);
        assert_eq!(p.answered_count(), 4);
    }

    #[test]
    fn answers_to_nothing_sent_or_twice_are_unmatched() {
        let mut p = Prober::new(plan(1, 1));
        let id = p.poll_send(0).unwrap();
        assert!(!p.answered(
            ProbeId {
                flow: 0,
                ttl: 9,
                query: 0
            },
            "x".into(),
            5,
            Reply::Reached
        ));
        p.sent(id, 0);
        assert!(p.answered(id, "10.0.1.1".into(), 5, Reply::TimeExceeded));
        assert!(!p.answered(id, "10.0.1.1".into(), 6, Reply::TimeExceeded));
        assert_eq!(p.unmatched(), 2);
    }

    #[test]
    fn an_unreachable_ends_the_path_without_reaching() {
        let mut p = Prober::new(plan(1, 1));
        let mut now = 0;
        while let Some(id) = p.poll_send(now) {
            p.sent(id, now);
            let outcome = if id.ttl == 2 {
                Reply::Unreachable("host unreachable")
            } else {
                Reply::TimeExceeded
            };
            p.answered(id, format!("10.0.{}.1", id.ttl), now + 1, outcome);
            now += 1_000;
        }
        let path = &p.paths(&[0])[0];
        assert_eq!(path.hops.len(), 2);
        assert_eq!(path.reached_ttl, None);
        assert_eq!(
            path.hops[1].answers[0].as_ref().unwrap().kind,
            "host unreachable"
        );
    }

    /// The link into hop 3 carries 1400 octets where the first carries 1500: the router
    /// at hop 2 refuses the farther probes as too big, naming 1400; they go again at
    /// 1400 and are answered, and the flow's MTUs say where it narrowed. A "too big"
    /// that names no smaller size than the probe's, or matches nothing sent, is refused.
    #[test]
    fn a_narrower_link_shrinks_the_probes_from_its_hop_on() {
        let mut p = Prober::with_mtu(plan(1, 1), 1500);
        let mut now = 0;
        let mut sizes = Vec::new();
        while !p.done(now) {
            if let Some(id) = p.poll_send(now) {
                let size = p.size(id.flow).unwrap();
                p.sent(id, now);
                sizes.push((id.ttl, size));
                if id.ttl >= 3 && size > 1400 {
                    assert!(p.too_big(id, 1400));
                } else {
                    let (from, outcome) = answer_for(id, 5);
                    assert!(p.answered(id, from, now + 100, outcome));
                }
            }
            now = p.poll_timeout(now).max(now + 1_000);
        }
        assert_eq!(
            sizes,
            vec![
                (1, 1500),
                (2, 1500),
                (3, 1500),
                (3, 1400),
                (4, 1400),
                (5, 1400)
            ]
        );
        let path = &p.paths(&[0])[0];
        assert_eq!(path.reached_ttl, Some(5));
        assert_eq!(
            path.pmtu,
            vec![PathMtu { ttl: 1, mtu: 1500 }, PathMtu { ttl: 3, mtu: 1400 }]
        );
        assert!(path.hops.iter().all(|h| h.answers[0].is_some()));
        assert_eq!((p.sent_count(), p.answered_count()), (6, 5));
        let id = ProbeId {
            flow: 0,
            ttl: 4,
            query: 0,
        };
        assert!(!p.too_big(id, 1400), "answered already");
        let mut q = Prober::with_mtu(plan(1, 1), 1500);
        let first = q.poll_send(0).unwrap();
        q.sent(first, 0);
        assert!(!q.too_big(first, 1500), "no smaller than the probe");
        assert!(!q.too_big(first, 20), "below any IP MTU");
        assert_eq!(q.unmatched(), 2);
    }
}
