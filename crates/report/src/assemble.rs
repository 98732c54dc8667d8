//! Merging the two sides of a test into one [`Report`].
//!
//! Each figure comes from the side that can know it: receiver figures from the receiving
//! end's counters and clock, sender figures and retransmits from the sending end. Nothing
//! is inferred from the other side's numbers (docs/measurement.md 1).

use crate::model::*;
use crate::sides::{observed, per_second, side_warnings, socket_facts};
use linerate_model::call::{CallSettings, CallWayCounts};

impl Report {
    /// Builds the report of a test from the client's (`local`) and the server's (`remote`)
    /// measurements.
    pub fn assemble(
        test: &str,
        tool: &str,
        started_at: f64,
        config: TestConfig,
        local: SideResult,
        remote: SideResult,
    ) -> Report {
        if config.workload != Workload::Stream {
            return crate::rr::assemble(tool, started_at, config, local, remote);
        }
        let mut intervals = merge_intervals(&local.intervals, &remote.intervals);
        add_ways(
            &mut intervals,
            config.direction,
            &local.intervals,
            &remote.intervals,
        );
        let flows = merge_flows(&config, &local.flows, &remote.flows);
        let mut summary = summarize(&config, &flows, &local, &remote);
        // Pacing is the senders' to say: none where the sending side told nothing of its
        // flows (an iperf 2 server that sent tells its client nothing).
        let senders_told = match config.direction {
            Direction::Forward => !local.flows.is_empty(),
            Direction::Reverse => !remote.flows.is_empty(),
            Direction::Bidir => true,
        };
        // A video's frames pace themselves: their sizes are drawn, not a rate kept to; a
        // call with voice activity sends only while its speakers talk.
        let paced =
            config.video.is_none() && !config.call.is_some_and(|c| c.codec.voice_activity());
        summary.pacing = if senders_told && paced {
            pacing(&config, &flows, &intervals)
        } else {
            None
        };
        summary.crypto = crate::crypto::summarize(&local, &remote, &summary);
        let mut warnings = side_warnings(&local, &remote);
        warnings.extend(pacing_shortfall(&summary));
        warnings.extend(summary.cpu_basis.as_ref().and_then(CpuBasis::warning));
        let observe = observed(&local, &remote);
        Report {
            tool: tool.to_string(),
            test: test.to_string(),
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
}

/// A pacing target the senders fell short of by more than 1 %, said with what the sender
/// saw (send errors, its busiest core), never silently.
fn pacing_shortfall(summary: &Summary) -> Option<String> {
    let pacing = summary.pacing.as_ref()?;
    let (asked, achieved) = (pacing.target_bps, pacing.achieved_bps);
    if achieved >= asked * 0.99 {
        return None;
    }
    let send_errors = summary.udp.as_ref().map_or(0, |u| u.send_errors);
    let qdisc_drops = summary.udp.as_ref().map_or(0, |u| u.qdisc_drops);
    let queue = if qdisc_drops > 0 {
        format!(", {qdisc_drops} datagrams dropped by the sending host's own qdisc (the link out of it is full)")
    } else {
        String::new()
    };
    let busiest = summary
        .cpu
        .local
        .busiest_core_pct
        .max(summary.cpu.remote.busiest_core_pct);
    let late = if pacing.sender_late_ms > 0.0 {
        format!(
            ", senders late past their burst for {:.1} ms (not run by the host)",
            pacing.sender_late_ms
        )
    } else {
        String::new()
    };
    Some(format!(
        "asked {:.1} Mbit/s per flow, the senders achieved {:.1} Mbit/s on average ({:.1} %); \
         send errors {send_errors}{queue}{late}, busiest core {busiest:.0} %",
        asked / 1e6,
        achieved / 1e6,
        achieved / asked * 100.0
    ))
}

/// How close paced senders kept to their target, over the window and per interval.
fn pacing(
    config: &TestConfig,
    flows: &[FlowReport],
    intervals: &[IntervalReport],
) -> Option<Pacing> {
    let target = config.rate_bps? as f64;
    // A flow whose sender told nothing (an iperf 2 server sending both ways) is no pacing
    // this run did: it received bytes that no sender here counted.
    let rates: Vec<f64> = flows
        .iter()
        .filter(|f| f.error.is_none())
        .filter(|f| !(f.sender_bytes_total == 0 && f.receiver_bytes_total > 0))
        .map(|f| f.sender_bps)
        .collect();
    if rates.is_empty() {
        return None;
    }
    let senders = rates.len();
    let achieved = rates.iter().sum::<f64>() / senders as f64;
    let shares: Vec<f64> = intervals
        .iter()
        .filter(|i| !i.omitted)
        .map(|i| i.sender_bps / senders as f64 / target * 100.0)
        .collect();
    let (min, max, stddev) = if shares.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        let variance = shares.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / shares.len() as f64;
        (
            shares.iter().cloned().fold(f64::INFINITY, f64::min),
            shares.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            variance.sqrt(),
        )
    };
    let late_us: u64 = intervals
        .iter()
        .filter(|i| !i.omitted)
        .filter_map(|i| i.udp.as_ref())
        .map(|u| u.counts.sender_late_us)
        .sum();
    Some(Pacing {
        sender_late_ms: late_us as f64 / 1e3,
        target_bps: target,
        achieved_bps: achieved,
        achieved_pct: achieved / target * 100.0,
        interval_min_pct: min,
        interval_max_pct: max,
        interval_stddev_pct: stddev,
    })
}

/// Sums counts of several flows or sides; jitter is the mean over those that received.
fn merge_udp(parts: &[UdpCounts]) -> UdpCounts {
    let mut total = UdpCounts::default();
    for part in parts {
        total.add(part);
    }
    let receiving: Vec<f64> = parts
        .iter()
        .filter(|p| p.received > 0)
        .map(|p| p.jitter_ms)
        .collect();
    if !receiving.is_empty() {
        total.jitter_ms = receiving.iter().sum::<f64>() / receiving.len() as f64;
    }
    total
}

/// One side's interval alone, as a merged interval (the other side adds nothing): what a
/// client shows live before the server's side arrives.
pub fn one_side(side: &SideInterval) -> IntervalReport {
    merge_intervals(std::slice::from_ref(side), &[])
        .pop()
        .expect("one interval in, one out")
}

fn merge_intervals(local: &[SideInterval], remote: &[SideInterval]) -> Vec<IntervalReport> {
    // Both sides run the same nominal schedule; a side that stopped early (a failed test)
    // has fewer intervals, and only intervals both sides reached are merged. A side that
    // reports no intervals at all (an iperf3 server's results carry none) adds nothing
    // to the other side's.
    let silent = |other: &[SideInterval]| -> Vec<SideInterval> {
        other
            .iter()
            .map(|o| SideInterval {
                start: o.start,
                end: o.end,
                omitted: o.omitted,
                flows: o.flows.as_ref().map(|_| Vec::new()),
                ..Default::default()
            })
            .collect()
    };
    let (padded_local, padded_remote);
    let (local, remote) = match (local.is_empty(), remote.is_empty()) {
        (false, true) => {
            padded_remote = silent(local);
            (local, padded_remote.as_slice())
        }
        (true, false) => {
            padded_local = silent(remote);
            (padded_local.as_slice(), remote)
        }
        _ => (local, remote),
    };
    local
        .iter()
        .zip(remote)
        .map(|(l, r)| {
            let flows = match (&l.flows, &r.flows) {
                (Some(lf), Some(rf)) => Some(merge_flow_intervals(lf, rf)),
                _ => None,
            };
            let udp = (l.udp.is_some() || r.udp.is_some()).then(|| {
                let seconds = l.end - l.start;
                let counts = merge_udp(&[l.udp.unwrap_or_default(), r.udp.unwrap_or_default()]);
                UdpIntervalReport {
                    loss_pct: counts.loss_pct(),
                    receiver_pps: per_second(counts.received, seconds),
                    sender_pps: per_second(counts.sent, seconds),
                    counts,
                }
            });
            IntervalReport {
                udp,
                start: l.start,
                end: l.end,
                omitted: l.omitted,
                receiver_bytes: l.received_bytes + r.received_bytes,
                receiver_bps: l.received_bps + r.received_bps,
                sender_bytes: l.sent_bytes + r.sent_bytes,
                sender_bps: l.sent_bps + r.sent_bps,
                retransmits: l.retransmits + r.retransmits,
                flows,
                rr: None,
                ways: Vec::new(),
            }
        })
        .collect()
}

/// Each UDP interval's ways, from their receivers' own intervals: the way out from the
/// server's (`remote`), the way back from the client's (`local`); a way whose receiver
/// told no datagram counts (an iperf3 server keeps no intervals) is left out.
fn add_ways(
    intervals: &mut [IntervalReport],
    direction: Direction,
    local: &[SideInterval],
    remote: &[SideInterval],
) {
    let ways: &[(Direction, &[SideInterval])] = match direction {
        Direction::Forward => &[(Direction::Forward, remote)],
        Direction::Reverse => &[(Direction::Reverse, local)],
        Direction::Bidir => &[(Direction::Forward, remote), (Direction::Reverse, local)],
    };
    for (i, interval) in intervals.iter_mut().enumerate() {
        if interval.udp.is_none() {
            continue;
        }
        interval.ways = ways
            .iter()
            .filter_map(|&(direction, receiver)| {
                let side = receiver.get(i)?;
                let udp = side.udp?;
                Some(WayInterval {
                    direction,
                    receiver_bps: side.received_bps,
                    received: udp.received,
                    lost: udp.lost,
                    loss_pct: udp.loss_pct(),
                    one_way_delay_ms: (udp.transit_samples > 0)
                        .then(|| udp.transit_sum_ms / udp.transit_samples as f64),
                    jitter_ms: udp.jitter_ms,
                })
            })
            .collect();
    }
}

fn merge_flow_intervals(
    local: &[FlowInterval],
    remote: &[FlowInterval],
) -> Vec<FlowIntervalReport> {
    // A flow has one sending and one receiving end; each side's entry carries only its own
    // role's figures, so adding the two entries of a flow gives both.
    local
        .iter()
        .map(|l| {
            let r = remote
                .iter()
                .find(|r| r.id == l.id)
                .cloned()
                .unwrap_or_default();
            FlowIntervalReport {
                id: l.id,
                receiver_bytes: l.received_bytes + r.received_bytes,
                receiver_bps: l.received_bps + r.received_bps,
                sender_bytes: l.sent_bytes + r.sent_bytes,
                sender_bps: l.sent_bps + r.sent_bps,
                retransmits: l.retransmits + r.retransmits,
                sender_datagrams: l.sent_datagrams + r.sent_datagrams,
                receiver_datagrams: l.received_datagrams + r.received_datagrams,
                lost_datagrams: l.lost_datagrams + r.lost_datagrams,
                jitter_ms: l.jitter_ms.max(r.jitter_ms),
                // The sender's view; one side alone (an iperf3 peer) gives its own.
                tcp: if r.sent_bytes > l.sent_bytes {
                    r.tcp.or(l.tcp)
                } else {
                    l.tcp.or(r.tcp)
                },
            }
        })
        .collect()
}

fn merge_flows(config: &TestConfig, local: &[FlowSide], remote: &[FlowSide]) -> Vec<FlowReport> {
    (0..config.connections())
        .map(|id| {
            let client = local.iter().find(|f| f.id == id);
            let server = remote.iter().find(|f| f.id == id);
            let (sender, receiver) = match config.flow_direction(id) {
                Direction::Reverse => (server, client),
                _ => (client, server),
            };
            let error = client
                .and_then(|f| f.error.clone().map(|e| format!("client: {e}")))
                .or_else(|| server.and_then(|f| f.error.clone().map(|e| format!("server: {e}"))));
            let udp = (client.is_some_and(|f| f.udp.is_some())
                || server.is_some_and(|f| f.udp.is_some()))
            .then(|| {
                let sent = sender.and_then(|f| f.udp).unwrap_or_default();
                let received = receiver.and_then(|f| f.udp).unwrap_or_default();
                let counts = UdpCounts {
                    sent: sent.sent,
                    send_errors: sent.send_errors,
                    qdisc_drops: sent.qdisc_drops,
                    silent: sent.silent,
                    finals: sent.finals,
                    ..received
                };
                UdpFlowReport {
                    loss_pct: counts.loss_pct(),
                    receiver_pps: per_second(counts.received, receiver.map_or(0.0, |f| f.window_s)),
                    sender_pps: per_second(counts.sent, sender.map_or(0.0, |f| f.window_s)),
                    sent_total: sender.map_or(0, |f| f.datagrams_total),
                    received_total: receiver.map_or(0, |f| f.datagrams_total),
                    one_way_delay_us: receiver.and_then(|f| f.one_way_delay_us.clone()),
                    counts,
                }
            });
            FlowReport {
                udp,
                id,
                direction: Some(config.flow_direction(id)),
                receiver_bytes: receiver.map_or(0, |f| f.window_bytes),
                receiver_bps: receiver.map_or(0.0, FlowSide::window_bps),
                sender_bytes: sender.map_or(0, |f| f.window_bytes),
                sender_bps: sender.map_or(0.0, FlowSide::window_bps),
                retransmits: sender.map_or(0, |f| f.retransmits),
                receiver_bytes_total: receiver.map_or(0, |f| f.bytes_total),
                sender_bytes_total: sender.map_or(0, |f| f.bytes_total),
                mss: sender.map_or(0, |f| f.mss),
                rtt_us: sender.map_or(0, |f| f.rtt_us),
                client: socket_facts(client),
                server: socket_facts(server),
                error,
                transactions: None,
                transactions_per_s: None,
            }
        })
        .collect()
}

fn direction_summary(direction: Option<Direction>, flows: &[&FlowReport]) -> DirectionSummary {
    DirectionSummary {
        direction,
        flows: flows.len() as u32,
        receiver_bytes: flows.iter().map(|f| f.receiver_bytes).sum(),
        receiver_bps: flows.iter().map(|f| f.receiver_bps).sum(),
        sender_bytes: flows.iter().map(|f| f.sender_bytes).sum(),
        sender_bps: flows.iter().map(|f| f.sender_bps).sum(),
        retransmits: flows.iter().map(|f| f.retransmits).sum(),
    }
}

fn summarize(
    config: &TestConfig,
    flows: &[FlowReport],
    local: &SideResult,
    remote: &SideResult,
) -> Summary {
    let all: Vec<&FlowReport> = flows.iter().collect();
    let total = direction_summary(None, &all);
    let receiving: Vec<&FlowSide> = local
        .flows
        .iter()
        .chain(&remote.flows)
        .filter(|f| f.role == Role::Receive)
        .collect();
    let duration_s = if receiving.is_empty() {
        0.0
    } else {
        receiving.iter().map(|f| f.window_s).sum::<f64>() / receiving.len() as f64
    };
    let kib = total.receiver_bytes as f64 / 1024.0;
    let basis = CpuBasis::of(local, remote);
    let charged = basis.charged_us(&local.cpu, &remote.cpu);
    let demand = |us: f64| if kib > 0.0 { us / kib } else { 0.0 };
    let directions = (config.direction == Direction::Bidir).then(|| {
        [Direction::Forward, Direction::Reverse]
            .into_iter()
            .map(|d| {
                let part: Vec<&FlowReport> =
                    flows.iter().filter(|f| f.direction == Some(d)).collect();
                direction_summary(Some(d), &part)
            })
            .collect()
    });
    let udp_flows: Vec<&UdpFlowReport> = flows.iter().filter_map(|f| f.udp.as_ref()).collect();
    let udp = (!udp_flows.is_empty()).then(|| {
        let counts: Vec<UdpCounts> = udp_flows.iter().map(|f| f.counts).collect();
        let total = merge_udp(&counts);
        UdpSummary {
            receiver_pps: udp_flows.iter().map(|f| f.receiver_pps).sum(),
            sender_pps: udp_flows.iter().map(|f| f.sender_pps).sum(),
            received: total.received,
            sent: total.sent,
            lost: total.lost,
            out_of_order: total.out_of_order,
            duplicates: total.duplicates,
            foreign: total.foreign,
            send_errors: total.send_errors,
            qdisc_drops: total.qdisc_drops,
            loss_pct: total.loss_pct(),
            jitter_ms: total.jitter_ms,
            one_way_delay_ms: total.one_way_delay_ms(),
            one_way_delay_us: delays_of(udp_flows.iter().copied()),
            loss_events: total.loss_events,
            lost_total: udp_flows
                .iter()
                .map(|f| f.sent_total.saturating_sub(f.received_total))
                .sum(),
            kernel: PerSide {
                local: local.udp_kernel.unwrap_or_default(),
                remote: remote.udp_kernel.unwrap_or_default(),
            },
        }
    });
    Summary {
        call: config
            .call
            .map(|call| call_summary(call, flows, config.qoo.as_ref())),
        video: config
            .video
            .map(|settings| scored_video(settings, config, local, remote)),
        crypto: None,
        mptcp: crate::model::MptcpSummary::of(local),
        marks: config
            .marks
            .and_then(|sent| marks_summary(sent, local, remote)),
        udp,
        duration_s,
        receiver_bytes: total.receiver_bytes,
        receiver_bps: total.receiver_bps,
        sender_bytes: total.sender_bytes,
        sender_bps: total.sender_bps,
        retransmits: total.retransmits,
        receiver_bytes_total: flows.iter().map(|f| f.receiver_bytes_total).sum(),
        sender_bytes_total: flows.iter().map(|f| f.sender_bytes_total).sum(),
        flows: flows.len() as u32,
        flows_failed: flows.iter().filter(|f| f.error.is_some()).count() as u32,
        service_demand_us_per_kb: PerSide {
            local: demand(charged.local),
            remote: demand(charged.remote),
        },
        cpu_basis: Some(basis),
        cpu: PerSide {
            local: local.cpu.clone(),
            remote: remote.cpu.clone(),
        },
        directions,
        pacing: None,
        rr: None,
    }
}

/// A marked test's marks as its receivers found them and its connections negotiated
/// ECN; `None` where no end could tell.
fn marks_summary(
    sent: linerate_model::marks::Marks,
    local: &SideResult,
    remote: &SideResult,
) -> Option<MarksSummary> {
    let summary = MarksSummary {
        arrived: marks_arrived(sent, local, remote).unwrap_or_default(),
        ecn_negotiated: ecn_negotiated(sent, local, remote),
    };
    (!summary.arrived.is_empty() || summary.ecn_negotiated.is_some()).then_some(summary)
}

/// The one-way delays of the flows whose receivers timed every datagram, as one
/// distribution (each flow's travels as buckets); `None` where none did.
fn delays_of<'a>(
    flows: impl Iterator<Item = &'a UdpFlowReport>,
) -> Option<linerate_model::latency::LatencySummary> {
    let mut all: Option<linerate_model::latency::LatencyHistogram> = None;
    for delays in flows.filter_map(|f| f.one_way_delay_us.as_ref()) {
        all.get_or_insert_with(linerate_model::latency::LatencyHistogram::new)
            .merge(&linerate_model::latency::LatencyHistogram::from_buckets(
                &delays.histogram,
            ));
    }
    all.map(|h| h.summary(false))
}

/// A call's two ways, each from its receiving flows' window counts, scored.
fn call_summary(
    call: CallSettings,
    flows: &[FlowReport],
    given: Option<&linerate_model::qoo::Requirement>,
) -> CallSummary {
    let ways = [Direction::Forward, Direction::Reverse]
        .into_iter()
        .map(|direction| {
            let way = || {
                flows
                    .iter()
                    .filter(move |f| f.direction == Some(direction))
                    .filter_map(|f| f.udp.as_ref())
            };
            let counts: Vec<UdpCounts> = way().map(|u| u.counts).collect();
            let c = merge_udp(&counts);
            let one_way_delay_us = delays_of(way());
            let qoo = one_way_delay_us.as_ref().map(|latency_us| {
                let (sent, missed) = (c.received + c.lost, c.lost + c.late);
                linerate_model::qoo::Requirement::score_call(given, latency_us, sent, missed)
            });
            let one_way_delay_ms = c.one_way_delay_ms();
            // An adaptive buffer's mean depth over the datagrams it judged.
            let adapted_ms = (call.adaptive && c.playout_judged > 0)
                .then(|| c.playout_depth_sum_ms / c.playout_judged as f64);
            let score = linerate_model::call::score(
                &call,
                &CallWayCounts {
                    one_way_delay_ms: one_way_delay_ms.unwrap_or(0.0),
                    received: c.received,
                    lost: c.lost,
                    late: c.late,
                    loss_events: c.loss_events,
                    unplayed_runs: c.unplayed_runs,
                    jitter_buffer_ms: adapted_ms.unwrap_or(f64::from(call.jitter_buffer_ms)),
                },
            );
            CallWay {
                direction,
                received: c.received,
                lost: c.lost,
                late: c.late,
                loss_events: c.loss_events,
                unplayed_runs: c.unplayed_runs,
                silent: c.silent,
                one_way_delay_ms,
                one_way_delay_us,
                qoo,
                jitter_ms: c.jitter_ms,
                jitter_buffer_ms: adapted_ms,
                score,
            }
        })
        .collect();
    CallSummary {
        codec: call.codec,
        jitter_buffer_ms: call.jitter_buffer_ms,
        adaptive: call.adaptive,
        ways,
    }
}

/// A video test's ways, each scored.
fn scored_video(
    settings: linerate_model::video::VideoSettings,
    config: &TestConfig,
    local: &SideResult,
    remote: &SideResult,
) -> VideoSummary {
    let mut video = VideoSummary {
        back: config.video_back,
        ..video_summary(settings, local, remote)
    };
    score_ways(&mut video, config.qoo.as_ref());
    video
}

/// Each way's Quality of Outcome: its frames' latency, and those not shown in time (never
/// whole, or late) over those sent, against the run's requirement (`--qoo`) or the
/// pattern's own: a game's where the server sends its own frames back, else a video
/// call's (linerate_model::qoo).
fn score_ways(video: &mut VideoSummary, given: Option<&linerate_model::qoo::Requirement>) {
    use linerate_model::qoo::{Measured, Requirement};
    let requirement = given.cloned().unwrap_or_else(|| match video.back {
        Some(_) => Requirement::game(0.0),
        None => Requirement::interactive_video(0.0),
    });
    for way in video.ways.iter_mut().filter(|w| !w.unseen) {
        let c = &way.counts;
        let sent = c.sent.max(c.whole + c.partial);
        let shown = c.whole.saturating_sub(c.late);
        let loss = match sent {
            0 => 1.0,
            sent => 1.0 - shown as f64 / sent as f64,
        };
        way.qoo = Some(requirement.score(&Measured {
            latency_us: &c.latency_us,
            loss,
            bps: way.received_bps,
        }));
    }
}

/// A video test's ways: per direction, its sending flows' frame counts beside its
/// receiving flows' (each end counts only what it can know).
fn video_summary(
    settings: linerate_model::video::VideoSettings,
    local: &SideResult,
    remote: &SideResult,
) -> VideoSummary {
    let ways = [Direction::Forward, Direction::Reverse]
        .into_iter()
        .filter_map(|direction| {
            let counts_of = |role: Role| {
                local
                    .flows
                    .iter()
                    .chain(&remote.flows)
                    .filter(move |f| f.role == role && f.direction == direction)
                    .filter_map(|f| f.frames.clone())
            };
            let mut sent = counts_of(Role::Send).peekable();
            let mut received = counts_of(Role::Receive).peekable();
            if sent.peek().is_none() && received.peek().is_none() {
                return None;
            }
            let unseen = received.peek().is_none();
            let mut counts = linerate_model::video::FrameCounts::default();
            let mut lateness = linerate_model::latency::LatencyHistogram::new();
            for s in sent {
                lateness.merge(&linerate_model::latency::LatencyHistogram::from_buckets(
                    &s.start_late_us.histogram,
                ));
                counts.sent += s.sent;
                counts.skipped += s.skipped;
                counts.slips += s.slips;
                counts.cut += s.cut;
                counts.start_late_max_us = counts.start_late_max_us.max(s.start_late_max_us);
            }
            let mut latency = linerate_model::latency::LatencyHistogram::new();
            let mut key_latency = linerate_model::latency::LatencyHistogram::new();
            for r in received {
                counts.key_whole += r.key_whole;
                key_latency.merge(&linerate_model::latency::LatencyHistogram::from_buckets(
                    &r.key_latency_us.histogram,
                ));
                counts.whole += r.whole;
                counts.partial += r.partial;
                counts.late += r.late;
                counts.malformed += r.malformed;
                counts.clock_ahead += r.clock_ahead;
                counts.largest_whole_bytes = counts.largest_whole_bytes.max(r.largest_whole_bytes);
                // Each receiver's latencies travel as buckets: the way's are all of them.
                latency.merge(&linerate_model::latency::LatencyHistogram::from_buckets(
                    &r.latency_us.histogram,
                ));
            }
            // With its buckets: the metrics' histogram of frame latency is made of them.
            counts.latency_us = latency.summary(true);
            counts.key_latency_us = key_latency.summary(false);
            counts.start_late_us = lateness.summary(false);
            let receivers = || {
                local
                    .flows
                    .iter()
                    .chain(&remote.flows)
                    .filter(move |f| f.role == Role::Receive && f.direction == direction)
            };
            let window = receivers().map(|f| f.window_s).fold(0.0, f64::max);
            let read: u64 = receivers().map(|f| f.window_bytes).sum();
            Some(VideoWay {
                direction,
                lost: if unseen {
                    0
                } else {
                    counts.sent.saturating_sub(counts.whole + counts.partial)
                },
                counts,
                received_bps: read as f64 * 8.0 / window.max(1e-9),
                qoo: None,
                unseen,
            })
        })
        .collect();
    VideoSummary {
        settings,
        back: None,
        ways,
    }
}

/// `--ecn` over TCP: the sending connections of both ends whose handshake negotiated it;
/// `None` without `--ecn` or where no TCP sender said (UDP, a peer that does not).
fn ecn_negotiated(
    sent: linerate_model::marks::Marks,
    local: &SideResult,
    remote: &SideResult,
) -> Option<EcnNegotiated> {
    let senders: Vec<&FlowSide> = local
        .flows
        .iter()
        .chain(&remote.flows)
        .filter(|f| f.role == Role::Send && f.udp.is_none() && f.mss > 0)
        .collect();
    (sent.ecn && !senders.is_empty()).then(|| EcnNegotiated {
        negotiated: senders.iter().filter(|f| f.ecn).count() as u32,
        connections: senders.len() as u32,
    })
}

/// The way the datagrams a flow's end counted had travelled: a UDP receiver's came its
/// flow's way; a QUIC worker's socket counts all it received, so on a sending flow they
/// are what came back (acknowledgements).
fn arrived_way(flow: &FlowSide) -> Direction {
    match (flow.role, flow.direction) {
        (Role::Receive, way) => way,
        (_, Direction::Forward) => Direction::Reverse,
        (_, Direction::Reverse) => Direction::Forward,
        (_, way) => way,
    }
}

/// Per direction, what the receivers of a marked test found on their datagrams; `None`
/// where no receiver could read them (TCP, or a peer that does not count them).
fn marks_arrived(
    sent: linerate_model::marks::Marks,
    local: &SideResult,
    remote: &SideResult,
) -> Option<Vec<MarksArrived>> {
    use linerate_model::marks::{verdict, ClassTally};
    let mut arrived = Vec::new();
    for direction in [Direction::Forward, Direction::Reverse] {
        let mut tally: Option<ClassTally> = None;
        for flow in local.flows.iter().chain(&remote.flows) {
            if let Some(classes) = &flow.classes {
                if arrived_way(flow) == direction {
                    let tally = tally.get_or_insert_with(ClassTally::default);
                    for class in classes {
                        tally.add(class.tos, class.datagrams);
                    }
                }
            }
        }
        if let Some(tally) = tally {
            let classes = tally.counts();
            let total: u64 = classes.iter().map(|c| c.datagrams).sum();
            let remarked: u64 = classes
                .iter()
                .filter(|c| c.tos >> 2 != sent.dscp)
                .map(|c| c.datagrams)
                .sum();
            arrived.push(MarksArrived {
                direction,
                remarked_pct: if total > 0 {
                    remarked as f64 * 100.0 / total as f64
                } else {
                    0.0
                },
                verdict: verdict(sent, &classes),
                classes,
            });
        }
    }
    (!arrived.is_empty()).then_some(arrived)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{config, flow};

    /// A way no receiver counted (an iperf 2 server's, which tells its client none): the
    /// sender's counts alone, none said lost, not scored.
    #[test]
    fn a_video_way_no_receiver_counted_is_unseen_not_lost() {
        use linerate_model::video::{FrameCounts, VideoSettings};
        let settings = VideoSettings::parse("60:8m,2m").unwrap();
        let local = SideResult {
            flows: vec![FlowSide {
                frames: Some(FrameCounts {
                    sent: 120,
                    skipped: 1,
                    ..Default::default()
                }),
                ..flow(0, Role::Send, 1000, 1.0, 0)
            }],
            ..Default::default()
        };
        // An iperf 2 server's side: no frames counted.
        let mut video = video_summary(settings, &local, &SideResult::default());
        score_ways(&mut video, None);
        let way = &video.ways[0];
        assert!(way.unseen && way.lost == 0 && way.qoo.is_none(), "{way:?}");
        assert_eq!((way.counts.sent, way.counts.skipped), (120, 1));
    }

    /// A video test's way joins the sender's frame counts with the receivers' (two flows,
    /// their latencies merged from their buckets), counts as lost the frames neither
    /// whole nor in part, and heads a mesh row with the median frame's latency.
    #[test]
    fn a_video_way_joins_the_senders_frames_with_the_receivers() {
        use linerate_model::latency::LatencyHistogram;
        use linerate_model::video::{FrameCounts, VideoSettings};
        let settings = VideoSettings::parse("30:4m,1m").unwrap();
        let mut config = config(Direction::Forward, 2);
        config.protocol = linerate_model::Protocol::Udp;
        config.video = Some(settings);
        let latencies = |ms: &[u64]| {
            let mut h = LatencyHistogram::new();
            ms.iter().for_each(|ms| h.record(ms * 1_000_000));
            h.summary(true)
        };
        let sender = |id, sent, skipped| FlowSide {
            frames: Some(FrameCounts {
                sent,
                skipped,
                start_late_max_us: 100 * u64::from(id + 1),
                ..Default::default()
            }),
            ..flow(id, Role::Send, 1000, 1.0, 0)
        };
        let receiver = |id, whole, partial, late, ms: &[u64]| FlowSide {
            frames: Some(FrameCounts {
                whole,
                partial,
                late,
                latency_us: latencies(ms),
                ..Default::default()
            }),
            ..flow(id, Role::Receive, 1000, 1.0, 0)
        };
        let local = SideResult {
            flows: vec![sender(0, 60, 1), sender(1, 60, 0)],
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![
                receiver(0, 57, 1, 2, &[10, 11, 12]),
                receiver(1, 60, 0, 0, &[20, 21]),
            ],
            ..Default::default()
        };
        let mut video = video_summary(settings, &local, &remote);
        score_ways(&mut video, None);
        assert_eq!(video.ways.len(), 1, "one way carried frames");
        let way = &video.ways[0];
        let c = &way.counts;
        assert_eq!((c.sent, c.skipped, c.start_late_max_us), (120, 1, 200));
        assert_eq!((c.whole, c.partial, c.late, way.lost), (117, 1, 2, 2));
        assert_eq!(c.latency_us.count, 5);
        assert!(
            (c.latency_us.max / 1e3 - 21.0).abs() < 0.05,
            "{:?}",
            c.latency_us
        );
        assert!(
            (c.latency_us.p50 / 1e3 - 12.0).abs() < 0.05,
            "{:?}",
            c.latency_us
        );
        // Scored as a video call's frames: 21 ms at p99 is within 150 ms; not shown in
        // time: 3 never whole and 2 late of 120, 4.2 %, a fifth of the way from the 5 %
        // unacceptable to the 1 % optimal; the receivers read 2,000 bytes over a second.
        let qoo = way.qoo.as_ref().expect("a score");
        assert_eq!(qoo.latency, 100.0);
        let loss = 5.0 / 120.0;
        assert!(
            (qoo.loss - (1.0 - (loss - 0.01) / 0.04) * 100.0).abs() < 1e-9,
            "{qoo:?}"
        );
        assert_eq!(qoo.score, qoo.loss);
        assert!(
            (way.received_bps - 16_000.0).abs() < 1e-6,
            "{}",
            way.received_bps
        );
        assert!(!way.unseen);
        let mut report = crate::fixtures::report(config);
        report.summary.video = Some(video);
        let text = crate::text::render_summary(&report, crate::units::Scale::Adaptive, false);
        assert!(
            text.contains(
                "client→server   120 sent: 117 whole, 1 in part, 2 lost, 2 late; frame latency"
            ),
            "{text}"
        );
        let headline = linerate_model::measure::Headline::Transaction {
            index: 0,
            label: "frame",
        };
        let document = crate::document::Document::Test(Box::new(report));
        let (value, words) = crate::headline::of(&document, headline);
        assert!((value.unwrap() - 0.012).abs() < 1e-4, "{value:?}");
        assert!(
            words.starts_with("frame p50 12.0") && words.ends_with("(2 late, 3 not whole of 120)"),
            "{words}"
        );
    }

    /// A bidir UDP test's receivers' marks add up per direction across both ends, each
    /// judged against what was sent, and the text says it in one line a direction.
    #[test]
    fn marks_arrived_are_summed_per_direction_and_judged() {
        use linerate_model::marks::{ClassCount, Marks, Verdict};
        let mut config = config(Direction::Bidir, 2);
        config.protocol = linerate_model::Protocol::Udp;
        config.marks = Some(Marks {
            dscp: 46,
            ecn: true,
        });
        let class = |tos, datagrams| ClassCount { tos, datagrams };
        let receiver = |id, direction, classes: Vec<ClassCount>| FlowSide {
            direction,
            classes: Some(classes),
            ..flow(id, Role::Receive, 1000, 1.0, 0)
        };
        // The server receives forward: one flow re-marked to BE, one kept with a CE.
        let remote = SideResult {
            flows: vec![
                receiver(0, Direction::Forward, vec![class(0x02, 300)]),
                receiver(
                    1,
                    Direction::Forward,
                    vec![class(0xba, 90), class(0xbb, 10)],
                ),
            ],
            ..Default::default()
        };
        // The client receives the way back, kept.
        let local = SideResult {
            flows: vec![receiver(2, Direction::Reverse, vec![class(0xba, 400)])],
            ..Default::default()
        };
        let arrived = marks_arrived(config.marks.unwrap(), &local, &remote).unwrap();
        assert_eq!(arrived.len(), 2);
        assert_eq!(arrived[0].direction, Direction::Forward);
        assert_eq!(arrived[0].verdict, Verdict::Remarked);
        assert_eq!(arrived[0].remarked_pct, 75.0);
        assert_eq!(arrived[0].classes.len(), 3);
        assert_eq!(arrived[1].verdict, Verdict::Kept);
        let mut report = crate::fixtures::report(config);
        report.summary.marks = Some(MarksSummary {
            arrived,
            ecn_negotiated: None,
        });
        let text = crate::text::render_summary(&report, crate::units::Scale::Adaptive, false);
        assert!(
            text.contains("Marks:            sent EF ECT(0) both ways"),
            "{text}"
        );
        assert!(
            text.contains("Marks forward:    received BE ECT(0) on 75.0 %, EF ECT(0) on 22.5 %, EF CE on 2.5 % (re-marked: 75.0 %)"),
            "{text}"
        );
        assert!(
            text.contains("Marks reverse:    received EF ECT(0) on 100.0 % (kept)"),
            "{text}"
        );
        // Nothing read (a TCP test): no summary, and the text says why.
        assert!(marks_arrived(
            Marks {
                dscp: 46,
                ecn: false
            },
            &SideResult::default(),
            &SideResult::default()
        )
        .is_none());
    }

    /// A forward QUIC test's marks: the server's socket counted the data (forward), the
    /// client's sending flow carries its socket's count of what came back (reverse).
    #[test]
    fn a_quic_senders_count_is_of_the_way_back() {
        use linerate_model::marks::{ClassCount, Marks, Verdict};
        let mut config = config(Direction::Forward, 1);
        config.protocol = linerate_model::Protocol::Quic;
        let sent = Marks {
            dscp: 46,
            ecn: false,
        };
        config.marks = Some(sent);
        let counted = |role, tos, datagrams| FlowSide {
            direction: Direction::Forward,
            classes: Some(vec![ClassCount { tos, datagrams }]),
            ..flow(0, role, 1000, 1.0, 0)
        };
        let local = SideResult {
            flows: vec![counted(Role::Send, 0x00, 40)],
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![counted(Role::Receive, 0xba, 900)],
            ..Default::default()
        };
        let arrived = marks_arrived(sent, &local, &remote).unwrap();
        assert_eq!(arrived.len(), 2);
        assert_eq!(arrived[0].direction, Direction::Forward);
        assert_eq!(arrived[0].verdict, Verdict::Kept);
        assert_eq!(arrived[0].classes[0].datagrams, 900);
        assert_eq!(arrived[1].direction, Direction::Reverse);
        assert_eq!(arrived[1].verdict, Verdict::Remarked);
        assert_eq!(arrived[1].remarked_pct, 100.0);
    }

    #[test]
    fn a_pacing_target_not_reached_is_said_with_the_reason() {
        let mut config = config(Direction::Forward, 1);
        config.rate_bps = Some(8000);
        let local = SideResult {
            flows: vec![flow(0, Role::Send, 500, 1.0, 0)],
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![flow(0, Role::Receive, 500, 1.0, 0)],
            ..Default::default()
        };
        let report = Report::assemble("t", "t", 0.0, config.clone(), local.clone(), remote.clone());
        let warning = report.warnings.iter().find(|w| w.starts_with("asked"));
        assert!(
            warning.is_some_and(|w| w.contains("50.0 %")),
            "{:?}",
            report.warnings
        );
        // Met within 1 %: nothing to say.
        config.rate_bps = Some(4000);
        let report = Report::assemble("t", "t", 0.0, config, local, remote);
        assert!(report.warnings.iter().all(|w| !w.starts_with("asked")));
    }

    #[test]
    fn udp_counts_come_from_the_side_that_knows_them() {
        let mut config = config(Direction::Forward, 1);
        config.protocol = linerate_model::Protocol::Udp;
        let mut sent = flow(0, Role::Send, 1000, 1.0, 0);
        sent.udp = Some(UdpCounts {
            sent: 100,
            send_errors: 2,
            // A sender's receive-side fields are meaningless and must not leak through.
            received: 999,
            ..Default::default()
        });
        sent.datagrams_total = 110;
        let mut received = flow(0, Role::Receive, 900, 2.0, 0);
        received.udp = Some(UdpCounts {
            received: 90,
            lost: 10,
            out_of_order: 3,
            duplicates: 1,
            jitter_ms: 0.25,
            ..Default::default()
        });
        received.datagrams_total = 95;
        let local = SideResult {
            flows: vec![sent],
            udp_kernel: Some(UdpCounters {
                sndbuf_errors: 4,
                ..Default::default()
            }),
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![received],
            ..Default::default()
        };
        let report = Report::assemble("udp_stream", "t", 0.0, config, local, remote);
        let udp = report.summary.udp.clone().expect("udp summary");
        assert_eq!((udp.sent, udp.send_errors, udp.received), (100, 2, 90));
        assert_eq!((udp.lost, udp.out_of_order, udp.duplicates), (10, 3, 1));
        assert!((udp.loss_pct - 10.0).abs() < 1e-9);
        assert!((udp.receiver_pps - 45.0).abs() < 1e-9);
        assert!((udp.sender_pps - 100.0).abs() < 1e-9);
        assert_eq!(udp.lost_total, 15);
        assert_eq!(udp.jitter_ms, 0.25);
        assert_eq!(udp.kernel.local.sndbuf_errors, 4);
        let doc = serde_json::to_value(&report).unwrap();
        for key in [
            "receiver_pps",
            "sender_pps",
            "lost",
            "out_of_order",
            "duplicates",
            "jitter_ms",
            "loss_pct",
        ] {
            assert!(doc["summary"][key].is_number(), "summary.{key}");
        }
        assert!(doc["summary"]["kernel"]["local"]["rcvbuf_errors"].is_number());
        assert!(doc["summary"]["kernel"]["remote"]["in_errors"].is_number());
    }

    #[test]
    fn receiver_figures_come_from_the_receiving_side() {
        let config = config(Direction::Forward, 2);
        let local = SideResult {
            flows: vec![
                flow(0, Role::Send, 2_000, 1.0, 3),
                flow(1, Role::Send, 2_000, 1.0, 1),
            ],
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![
                flow(0, Role::Receive, 1_000, 1.0, 0),
                flow(1, Role::Receive, 500, 0.5, 0),
            ],
            cpu: CpuUsage {
                cores: 2,
                window_s: 1.0,
                busy_pct: 50.0,
                // The test's threads: all but a tenth of a core of the busy time.
                process_cpu_s: 0.9,
                ..Default::default()
            },
            ..Default::default()
        };
        let report = Report::assemble("tcp_stream", "t", 0.0, config, local, remote);
        let s = &report.summary;
        assert_eq!(s.receiver_bytes, 1_500);
        // Each flow's bytes over its own window, summed: 8000 + 8000 bit/s.
        assert!((s.receiver_bps - 16_000.0).abs() < 1e-9);
        assert_eq!(s.sender_bytes, 4_000);
        assert_eq!(s.retransmits, 4);
        assert!((s.duration_s - 0.75).abs() < 1e-9);
        // 1 s of one core (50 % of 2 cores) per 1500/1024 KiB.
        let expected = 1e6 / (1500.0 / 1024.0);
        assert!((s.service_demand_us_per_kb.remote - expected).abs() < 1e-6);
        assert_eq!(s.service_demand_us_per_kb.local, 0.0);
        assert!(s.directions.is_none());
    }

    /// An end that learned of the end later (an interruption seen late by the server)
    /// measured over a longer window: the report says so, naming both windows; windows
    /// that agree say nothing.
    #[test]
    fn ends_that_measured_over_different_windows_are_named() {
        let sides = |sent_s: f64, received_s: f64| {
            let local = SideResult {
                flows: vec![flow(0, Role::Send, 10_000, sent_s, 0)],
                ..Default::default()
            };
            let remote = SideResult {
                flows: vec![flow(0, Role::Receive, 10_000, received_s, 0)],
                ..Default::default()
            };
            let config = config(Direction::Forward, 1);
            Report::assemble("tcp_stream", "t", 0.0, config, local, remote).warnings
        };
        let warnings = sides(3.53, 3.99);
        assert!(
            warnings.iter().any(|w| w.contains("3.53 s")
                && w.contains("3.99 s")
                && w.contains("0.46 s after the other")),
            "{warnings:?}"
        );
        let warnings = sides(3.47, 3.48);
        assert!(
            warnings.iter().all(|w| !w.contains("learned of the end")),
            "{warnings:?}"
        );
    }

    #[test]
    fn reverse_and_bidir_flows_take_sender_and_receiver_from_the_right_end() {
        let config = config(Direction::Bidir, 1);
        let local = SideResult {
            flows: vec![
                flow(0, Role::Send, 10, 1.0, 2),
                flow(1, Role::Receive, 7, 1.0, 0),
            ],
            ..Default::default()
        };
        let remote = SideResult {
            flows: vec![
                flow(0, Role::Receive, 9, 1.0, 0),
                flow(1, Role::Send, 8, 1.0, 5),
            ],
            ..Default::default()
        };
        let report = Report::assemble("tcp_stream", "t", 0.0, config, local, remote);
        assert_eq!(report.flows[0].receiver_bytes, 9);
        assert_eq!(report.flows[0].retransmits, 2);
        assert_eq!(report.flows[1].receiver_bytes, 7);
        assert_eq!(report.flows[1].sender_bytes, 8);
        assert_eq!(report.flows[1].retransmits, 5);
        let directions = report.summary.directions.expect("bidir has directions");
        assert_eq!(directions[0].receiver_bytes, 9);
        assert_eq!(directions[1].receiver_bytes, 7);
        assert_eq!(report.summary.receiver_bytes, 16);
    }

    #[test]
    fn intervals_add_both_sides() {
        let a = SideInterval {
            start: 0.0,
            end: 1.0,
            sent_bytes: 10,
            sent_bps: 80.0,
            ..Default::default()
        };
        let b = SideInterval {
            start: 0.0,
            end: 1.0,
            received_bytes: 9,
            received_bps: 72.0,
            ..Default::default()
        };
        let merged = merge_intervals(&[a.clone(), a], &[b]);
        assert_eq!(merged.len(), 1, "only intervals both sides reached");
        assert_eq!(merged[0].receiver_bytes, 9);
        assert_eq!(merged[0].sender_bytes, 10);
    }

    /// A UDP interval's ways each come from their receiver: the way out from the server's
    /// counts and clock, the way back from the client's; a way a receiver told nothing of
    /// (an iperf3 server keeps no intervals) is left out, and a TCP interval has none.
    #[test]
    fn each_way_of_an_interval_is_its_receivers() {
        let side = |received_bps: f64, received: u64, lost: u64, transit_ms: f64| SideInterval {
            start: 0.0,
            end: 1.0,
            received_bps,
            udp: Some(UdpCounts {
                received,
                lost,
                transit_sum_ms: transit_ms * received as f64,
                transit_samples: received,
                ..Default::default()
            }),
            ..Default::default()
        };
        let client = side(600_000.0, 60, 0, 40.0);
        let server = side(60_000.0, 95, 5, 10.0);
        let (clients, servers) = (std::slice::from_ref(&client), std::slice::from_ref(&server));
        let mut intervals = merge_intervals(clients, servers);
        add_ways(&mut intervals, Direction::Bidir, clients, servers);
        let ways = &intervals[0].ways;
        assert_eq!(ways.len(), 2);
        assert_eq!(
            (
                ways[0].direction,
                ways[0].receiver_bps,
                ways[0].received,
                ways[0].lost
            ),
            (Direction::Forward, 60_000.0, 95, 5)
        );
        assert_eq!(ways[0].loss_pct, 5.0);
        assert!((ways[0].one_way_delay_ms.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(
            (ways[1].direction, ways[1].received),
            (Direction::Reverse, 60)
        );
        assert!((ways[1].one_way_delay_ms.unwrap() - 40.0).abs() < 1e-9);
        // Only the server counted the way out, and it kept no intervals.
        let mut intervals = merge_intervals(clients, &[]);
        add_ways(&mut intervals, Direction::Forward, clients, &[]);
        assert!(intervals[0].ways.is_empty());
        // TCP: no datagram counts, no ways.
        let tcp = [SideInterval {
            udp: None,
            ..server.clone()
        }];
        let mut intervals = merge_intervals(&tcp, &tcp);
        add_ways(&mut intervals, Direction::Bidir, &tcp, &tcp);
        assert!(intervals[0].ways.is_empty());
    }
}
