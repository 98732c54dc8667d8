//! The data plane of one side of a test: workers started together on one schedule, their
//! samples gathered into interval figures as they arrive and into a [`SideResult`] at the
//! end.
//!
//! The measurement window (docs/measurement.md 2) is `[omit, omit + time]` on this side's
//! clock, which starts when this side starts its workers. Each flow's window figures use
//! its worker's actual sample times at the two edges, so a late wake-up shifts the window
//! a little but never inflates a rate.

use crate::flow::{
    EndSignal, FlowOutcome, FlowSocket, FlowSpec, RrPlan, Sample, WorkerPlan, WritesInterval,
};
use linerate_hostinfo::source::Root;
use linerate_hostinfo::{observe, usage};
use linerate_model::latency::LatencyHistogram;
use linerate_model::observe::Observation;
use linerate_model::{
    CryptoSide, FlowInterval, FlowSide, HostFacts, Role, RrInterval, RrSide, SideInterval,
    SideResult, TestConfig, UdpCounts, Workload,
};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Workers for `flows` connections on this machine when the user did not say (the rule is
/// linerate-model's [`linerate_model::default_threads`]).
pub fn default_threads(flows: usize) -> usize {
    linerate_model::default_threads(flows, crate::sys::cpus())
}

/// How a side's data plane runs, beyond the test's config.
#[derive(Debug, Clone, Default)]
pub struct PlaneSetup {
    pub threads: usize,
    /// How long receivers wait for a sender's last bytes after the end.
    pub drain: Duration,
    /// UDP tests: how datagrams carry their header.
    pub udp_framing: Option<linerate_proto::datagram::Framing>,
    /// UDP senders: the bytes every datagram begins with before its framing's fields are
    /// written over them (iperf 2's client header rides in every datagram after its
    /// numbers); empty: a constant filler.
    pub udp_template: Vec<u8>,
    /// CPUs the workers are pinned to, in turn; empty: not pinned.
    pub pin_cpus: Vec<usize>,
    /// Flows of this role stop after moving this many bytes each, and the test ends when
    /// all of them have (iperf3's `-n` and `-k`).
    pub budget: Option<(Role, u64)>,
    /// The most the peer's clock may lead this side's (a server: the time from telling
    /// the client its flows were ready to starting here); added to the tolerance for a
    /// peer's close that comes before this side's end.
    pub peer_lead: Duration,
    /// A served iperf 2 `--trip-times` test over TCP: the receiving flows follow the
    /// client's writes and put their latencies here at their end.
    pub trip_times: Option<crate::flow::TripTimes>,
    /// `linerate iperf2 -c` over TCP with `--trip-times` or `--isochronous`: the sending
    /// flows write iperf 2's bursts.
    pub tcp_bursts: Option<crate::bursts::TcpBursts>,
    /// UDP senders end with iperf 2's final datagram (its count, negated), sent once as
    /// their last datagram goes, waiting for no report: `linerate iperf2 -c -u
    /// --full-duplex`, whose server reports nothing and whose receiving flows read on.
    pub udp_final: bool,
}

/// The nominal timeline of a test, relative to its start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub omit: Duration,
    pub time: Duration,
    /// Zero: no interval reports, only the window.
    pub interval: Duration,
}

impl Schedule {
    pub fn from_config(config: &TestConfig) -> Schedule {
        Schedule {
            omit: Duration::from_secs_f64(config.omit_s),
            time: Duration::from_secs_f64(config.time_s),
            interval: Duration::from_secs_f64(config.interval_s),
        }
    }

    /// Every boundary: 0, each interval, the end of the warm-up and the end of the test,
    /// in order and without repeats. The last one ends the test.
    pub fn boundaries(&self) -> Vec<Duration> {
        let end = self.omit + self.time;
        let mut points = vec![Duration::ZERO, self.omit, end];
        if !self.interval.is_zero() {
            let mut t = self.interval;
            while t < end {
                points.push(t);
                t += self.interval;
            }
        }
        points.sort();
        // Boundaries closer than a microsecond are one boundary (float seconds from flags).
        points.dedup_by(|a, b| a.abs_diff(*b) < Duration::from_micros(1));
        points
    }
}

/// The counts between two samples of one flow; jitter is the later one's (a running
/// estimate, not a sum).
fn udp_delta(a: &UdpCounts, b: &UdpCounts) -> UdpCounts {
    UdpCounts {
        sent: b.sent - a.sent,
        send_errors: b.send_errors - a.send_errors,
        qdisc_drops: b.qdisc_drops - a.qdisc_drops,
        received: b.received - a.received,
        // A late datagram takes a loss back: a span's loss can be negative; clamp to zero.
        lost: b.lost.saturating_sub(a.lost),
        out_of_order: b.out_of_order - a.out_of_order,
        duplicates: b.duplicates - a.duplicates,
        foreign: b.foreign - a.foreign,
        jitter_ms: b.jitter_ms,
        transit_sum_ms: b.transit_sum_ms - a.transit_sum_ms,
        transit_samples: b.transit_samples - a.transit_samples,
        loss_events: b.loss_events - a.loss_events,
        late: b.late - a.late,
        unplayed_runs: b.unplayed_runs.saturating_sub(a.unplayed_runs),
        playout_judged: b.playout_judged.saturating_sub(a.playout_judged),
        playout_depth_sum_ms: (b.playout_depth_sum_ms - a.playout_depth_sum_ms).max(0.0),
        sender_late_us: b.sender_late_us.saturating_sub(a.sender_late_us),
        silent: b.silent.saturating_sub(a.silent),
        finals: b.finals.saturating_sub(a.finals),
    }
}

/// Index of the boundary closest to `at`.
fn index_of(boundaries: &[Duration], at: Duration) -> usize {
    boundaries
        .iter()
        .enumerate()
        .min_by_key(|(_, b)| b.abs_diff(at))
        .map_or(0, |(i, _)| i)
}

/// A running data plane.
pub struct DataPlane {
    boundaries: Vec<Duration>,
    omit_index: usize,
    end_index: usize,
    roles: HashMap<u32, Role>,
    per_flow: bool,
    workers: Vec<JoinHandle<io::Result<Vec<FlowOutcome>>>>,
    receiver: Receiver<Sample>,
    stop: Arc<AtomicBool>,
    /// `samples[boundary][worker]`
    samples: Vec<Vec<Option<Sample>>>,
    /// Request/response tests: the round trips (and crr connects) completed in the span
    /// ending at each boundary, merged over workers as their samples arrive (so a sample
    /// keeps its counts but not its histograms).
    spans: Vec<Option<Span>>,
    workload: Workload,
    /// QUIC flows (the crypto is QUIC's).
    quic: bool,
    intervals_done: usize,
    end: Arc<EndSignal>,
    start: Instant,
}

#[derive(Default)]
struct Span {
    latency: LatencyHistogram,
    connect: Option<LatencyHistogram>,
}

impl Span {
    fn merge(&mut self, latency: &LatencyHistogram, connect: Option<&LatencyHistogram>) {
        self.latency.merge(latency);
        if let Some(connect) = connect {
            self.connect
                .get_or_insert_with(LatencyHistogram::new)
                .merge(connect);
        }
    }
}

impl DataPlane {
    /// Spreads `flows` round-robin over up to `threads` workers and starts them; the test's
    /// clock starts at `start`.
    // Long: every worker's plan is the setup's and the config's fields, one by one, in
    // one place, so a field added to either reaches the workers here.
    pub fn start(
        start: Instant,
        config: &TestConfig,
        flows: Vec<FlowSpec>,
        setup: PlaneSetup,
    ) -> io::Result<DataPlane> {
        let PlaneSetup {
            threads,
            drain,
            udp_framing,
            udp_template,
            pin_cpus,
            budget,
            peer_lead,
            trip_times,
            tcp_bursts,
            udp_final,
        } = setup;
        let budgeted = budget.map_or(0, |(role, _)| {
            flows.iter().filter(|f| f.role == role).count()
        });
        let end = EndSignal::new(budgeted);
        let rr = RrPlan::from_config(config);
        let schedule = Schedule::from_config(config);
        let boundaries = schedule.boundaries();
        let omit_index = index_of(&boundaries, schedule.omit);
        let end_index = boundaries.len() - 1;
        let roles = flows.iter().map(|f| (f.id, f.role)).collect();
        // A side's QUIC flows live on its QUIC workers, flow `i` on worker `i % workers`:
        // one data-plane worker hands each QUIC worker its flows' plan.
        let quic_workers = flows.iter().find_map(|f| match &f.socket {
            FlowSocket::Quic(side) => Some(side.workers().max(1)),
            _ => None,
        });
        let count = quic_workers.unwrap_or_else(|| threads.clamp(1, flows.len().max(1)));
        let mut shares: Vec<Vec<FlowSpec>> = (0..count).map(|_| Vec::new()).collect();
        for (i, flow) in flows.into_iter().enumerate() {
            let share = if quic_workers.is_some() {
                flow.id as usize % count
            } else {
                i % count
            };
            shares[share].push(flow);
        }
        let (sender, receiver) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::with_capacity(count);
        for (index, share) in shares.into_iter().enumerate() {
            let plan = WorkerPlan {
                index,
                start,
                boundaries: boundaries.clone(),
                cpu_boundaries: vec![omit_index, end_index],
                window_start: omit_index,
                length: config.length as usize,
                rate_bps: config.rate_bps.filter(|r| *r > 0),
                drain,
                udp_framing,
                udp_template: udp_template.clone(),
                gso: config.gso,
                gro: config.gro,
                rr: rr.clone(),
                cpu: (!pin_cpus.is_empty()).then(|| pin_cpus[index % pin_cpus.len()]),
                end: end.clone(),
                budget,
                peer_lead,
                trip_times: trip_times.clone(),
                tcp_bursts,
                udp_final,
                observe: config.observe,
                window: config.window,
                count_marks: config.marks.is_some(),
                playout: config.call.map(|c| c.buffer()),
                voice_activity: config.call.is_some_and(|c| c.codec.voice_activity()),
                video: config.video,
                video_back: config.video_back,
                mptcp: config.source.as_ref().is_some_and(|s| s.mptcp),
            };
            let sender = sender.clone();
            let stop = stop.clone();
            let handle = std::thread::Builder::new()
                .name(format!("linerate-worker-{index}"))
                .spawn(move || run_worker(plan, share, sender, stop))?;
            workers.push(handle);
        }
        Ok(DataPlane {
            samples: vec![(0..count).map(|_| None).collect(); boundaries.len()],
            spans: (0..boundaries.len()).map(|_| None).collect(),
            workload: config.workload,
            quic: quic_workers.is_some(),
            boundaries,
            omit_index,
            end_index,
            roles,
            per_flow: config.per_flow,
            workers,
            receiver,
            stop,
            intervals_done: 0,
            end,
            start,
        })
    }

    /// Ends the test now, ahead of its schedule: at the first boundary not yet due, whose
    /// sample each worker then takes at once.
    pub fn end_now(&self) {
        let since = self.start.elapsed();
        let index = self
            .boundaries
            .iter()
            .position(|b| *b > since)
            .unwrap_or(self.end_index);
        self.end.request(index);
    }

    /// The boundary that ends the test: the schedule's last, or an earlier one asked for.
    fn last_boundary(&self) -> usize {
        self.end
            .requested()
            .map_or(self.end_index, |at| at.min(self.end_index))
    }

    /// Asks every worker to stop now (an aborted test).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// All workers have ended.
    pub fn is_finished(&self) -> bool {
        self.workers.iter().all(JoinHandle::is_finished)
    }

    fn take_sample(&mut self, mut sample: Sample) {
        if let Some(rr) = sample.rr.as_mut() {
            if let Some(span) = self.spans.get_mut(sample.index) {
                let latency = std::mem::take(&mut rr.latency);
                let connect = rr.connect.take();
                span.get_or_insert_with(Span::default)
                    .merge(&latency, connect.as_ref());
            }
        }
        if let Some(slot) = self
            .samples
            .get_mut(sample.index)
            .and_then(|row| row.get_mut(sample.worker))
        {
            *slot = Some(sample);
        }
    }

    fn complete(&self, boundary: usize) -> bool {
        self.samples[boundary].iter().all(Option::is_some)
    }

    /// Waits up to `wait` for samples and returns the intervals that became complete, for
    /// live display. Returns early as soon as one interval completes.
    pub fn poll_intervals(&mut self, wait: Duration) -> Vec<SideInterval> {
        let deadline = Instant::now() + wait;
        loop {
            while let Ok(sample) = self.receiver.try_recv() {
                self.take_sample(sample);
            }
            let mut done = Vec::new();
            while self.intervals_done < self.last_boundary()
                && self.complete(self.intervals_done + 1)
            {
                let k = self.intervals_done;
                if k + 1 == self.last_boundary() && self.end.requested().is_some() {
                    // Ended ahead of the schedule: the last span closes when its samples
                    // were taken, here as in the result.
                    self.close_at_samples(k + 1);
                }
                done.push(self.interval(k));
                self.intervals_done += 1;
            }
            let now = Instant::now();
            if !done.is_empty() || now >= deadline {
                return done;
            }
            match self.receiver.recv_timeout(deadline - now) {
                Ok(sample) => self.take_sample(sample),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return done,
            }
        }
    }

    /// A served iperf 2 `--trip-times` test over TCP: the client's writes that ended in
    /// interval `k` (between boundaries `k` and `k + 1`), every worker's together; `None`
    /// where the test times no writes or the interval is not complete.
    pub fn writes_in(&self, k: usize) -> Option<WritesInterval> {
        let samples = self.samples.get(k + 1)?;
        let mut writes: Option<WritesInterval> = None;
        for sample in samples {
            let theirs = sample.as_ref()?.writes.as_ref()?;
            writes
                .get_or_insert_with(WritesInterval::default)
                .merge(theirs);
        }
        writes
    }

    /// Moves boundary `index` to when its samples were taken (the latest of them): a
    /// boundary taken ahead of its time, when the test was ended early.
    fn close_at_samples(&mut self, index: usize) {
        let taken = self.samples[index].iter().flatten().map(|s| s.at).max();
        if let Some(at) = taken {
            self.boundaries[index] = at;
        }
    }

    /// The figures between boundary `k` and `k + 1`.
    fn interval(&self, k: usize) -> SideInterval {
        let mut out = SideInterval {
            start: self.boundaries[k].as_secs_f64(),
            end: self.boundaries[k + 1].as_secs_f64(),
            omitted: k < self.omit_index,
            ..Default::default()
        };
        let mut flows = Vec::new();
        let mut udp = UdpCounts::default();
        let mut jitters = Vec::new();
        let mut is_udp = false;
        let mut transactions = 0;
        let mut transactions_per_s = 0.0;
        for (a, b) in self.samples[k].iter().zip(&self.samples[k + 1]) {
            let (Some(a), Some(b)) = (a, b) else { continue };
            is_udp |= b.flows.iter().any(|f| f.udp.is_some());
            let seconds = (b.at.saturating_sub(a.at)).as_secs_f64();
            for (fa, fb) in a.flows.iter().zip(&b.flows) {
                let bytes = fb.bytes - fa.bytes;
                let bps = if seconds > 0.0 {
                    bytes as f64 * 8.0 / seconds
                } else {
                    0.0
                };
                let retransmits = fb.retransmits.saturating_sub(fa.retransmits);
                let done = fb.transactions.saturating_sub(fa.transactions);
                transactions += done;
                if seconds > 0.0 {
                    transactions_per_s += done as f64 / seconds;
                }
                let mut flow = FlowInterval {
                    id: fa.id,
                    retransmits,
                    tcp: fb.tcp,
                    ..Default::default()
                };
                if let (Some(ua), Some(ub)) = (fa.udp, fb.udp) {
                    let delta = udp_delta(&ua, &ub);
                    udp.add(&delta);
                    if delta.received > 0 {
                        jitters.push(delta.jitter_ms);
                    }
                    flow.sent_datagrams = delta.sent;
                    flow.received_datagrams = delta.received;
                    flow.lost_datagrams = delta.lost;
                    flow.jitter_ms = delta.jitter_ms;
                }
                match self.roles.get(&fa.id) {
                    Some(Role::Send) => {
                        out.sent_bytes += bytes;
                        out.sent_bps += bps;
                        flow.sent_bytes = bytes;
                        flow.sent_bps = bps;
                    }
                    _ => {
                        out.received_bytes += bytes;
                        out.received_bps += bps;
                        flow.received_bytes = bytes;
                        flow.received_bps = bps;
                    }
                }
                out.retransmits += retransmits;
                flows.push(flow);
            }
        }
        if self.per_flow {
            flows.sort_by_key(|f| f.id);
            out.flows = Some(flows);
        }
        if let Some(span) = &self.spans[k + 1] {
            let latency = &span.latency;
            out.rr = Some(RrInterval {
                transactions,
                transactions_per_s,
                p50_us: latency.quantile_us(0.5),
                p99_us: latency.quantile_us(0.99),
                max_us: latency.quantile_us(1.0),
                connect_p99_us: span.connect.as_ref().map(|c| c.quantile_us(0.99)),
                // The load's, where there is one, is another test's: joined by its driver.
                load_bps: None,
            });
        }
        if is_udp {
            if !jitters.is_empty() {
                udp.jitter_ms = jitters.iter().sum::<f64>() / jitters.len() as f64;
            }
            out.udp = Some(udp);
        }
        out
    }

    /// Joins the workers and assembles this side's result.
    pub fn finish(mut self, host: HostFacts) -> io::Result<SideResult> {
        let mut outcomes = Vec::new();
        let mut failure = None;
        for handle in std::mem::take(&mut self.workers) {
            match handle.join() {
                Ok(Ok(flows)) => outcomes.extend(flows),
                Ok(Err(error)) => failure = Some(error),
                Err(_) => failure = Some(io::Error::other("a data-plane worker panicked")),
            }
        }
        while let Ok(sample) = self.receiver.try_recv() {
            self.take_sample(sample);
        }
        if let Some(error) = failure {
            return Err(error);
        }
        if self.end_index != self.last_boundary() {
            // Ended ahead of the schedule: the last span closes when its samples were
            // taken, not at its nominal boundary.
            self.end_index = self.last_boundary();
            self.close_at_samples(self.end_index);
        }
        let mut warnings = Vec::new();
        let mut intervals = Vec::new();
        // Intervals not yet shown, up to the last boundary every worker reached.
        let reached = (0..=self.end_index)
            .take_while(|&b| self.complete(b))
            .last();
        if let Some(last) = reached {
            for k in 0..last {
                intervals.push(self.interval(k));
            }
        }
        let window_end = match reached {
            Some(last) if last < self.end_index => {
                warnings.push(format!(
                    "the test ended early, at {:.2} s of {:.2} s",
                    self.boundaries[last].as_secs_f64(),
                    self.boundaries[self.end_index].as_secs_f64()
                ));
                last
            }
            Some(last) => last,
            None => 0,
        };
        for note in outcomes.iter().flat_map(|o| &o.notes) {
            if !warnings.contains(note) {
                warnings.push(note.clone());
            }
        }
        let window_start = self.omit_index.min(window_end);
        let mut flows: Vec<FlowSide> = outcomes
            .iter()
            .map(|o| self.flow_side(o, window_start, window_end))
            .collect();
        flows.sort_by_key(|f| f.id);
        let cpu = self.cpu(window_start, window_end);
        let edge = |b: usize| self.samples[b].first().and_then(|s| s.as_ref()?.udp_kernel);
        let udp_kernel = edge(window_start)
            .zip(edge(window_end))
            .map(|(a, b)| a.delta(&b));
        let rr = self.rr_side(window_start, window_end);
        let observe = self.observation(window_start, window_end);
        let crypto = self.crypto(&outcomes, window_start, window_end);
        Ok(SideResult {
            host,
            cpu,
            intervals,
            flows,
            warnings,
            udp_kernel,
            rr,
            observe,
            crypto,
        })
    }

    /// Encrypted flows: their suite and handshakes, and the time spent sealing and opening
    /// records between the window's edges, summed over flows.
    fn crypto(&self, outcomes: &[FlowOutcome], start: usize, end: usize) -> Option<CryptoSide> {
        let tls: Vec<_> = outcomes.iter().filter_map(|o| o.tls).collect();
        let first = tls.first()?;
        let handshakes: Vec<f64> = tls
            .iter()
            .map(|t| t.handshake.as_secs_f64() * 1e3)
            .collect();
        let ktls = tls.iter().filter(|t| t.ktls).count() as u32;
        let crypto_at = |boundary: usize| -> Duration {
            self.samples[boundary]
                .iter()
                .flatten()
                .flat_map(|s| &s.flows)
                .map(|f| f.crypto)
                .sum()
        };
        let spent = crypto_at(end).saturating_sub(crypto_at(start));
        Some(CryptoSide {
            protocol: if self.quic { "quic" } else { "tls" }.into(),
            suite: first.cipher.suite_name().into(),
            ktls_connections: ktls,
            connections: tls.len() as u32,
            handshake_ms: handshakes.iter().sum::<f64>() / handshakes.len() as f64,
            handshake_max_ms: handshakes.iter().copied().fold(0.0, f64::max),
            crypto_cpu_s: (ktls < tls.len() as u32).then_some(spent.as_secs_f64()),
        })
    }

    /// `--observe`: what moved in the host's counters between the window's edges, as
    /// worker 0 read them, with the settings as they are at the end.
    fn observation(&self, start: usize, end: usize) -> Option<Observation> {
        let edge = |b: usize| self.samples[b].first()?.as_ref();
        let (a, b) = (edge(start)?, edge(end)?);
        let window = b.at.saturating_sub(a.at).as_secs_f64();
        Some(observe::observe(
            a.host.as_deref()?,
            b.host.as_deref()?,
            window,
            observe::read_settings(&Root::live()),
        ))
    }

    /// The requesting side's timing over the window: the spans inside it merged, and
    /// the counts between its edges.
    fn rr_side(&self, start: usize, end: usize) -> Option<RrSide> {
        let requesting = self.samples[end].iter().flatten().any(|s| s.rr.is_some());
        if !requesting {
            return None;
        }
        let mut window = Span::default();
        for span in self.spans[start + 1..=end].iter().flatten() {
            window.merge(&span.latency, span.connect.as_ref());
        }
        let count = |get: fn(&crate::flow::RrSample) -> u64, boundary: usize| -> u64 {
            self.samples[boundary]
                .iter()
                .flatten()
                .filter_map(|s| s.rr.as_deref())
                .map(get)
                .sum()
        };
        let between = |get: fn(&crate::flow::RrSample) -> u64| {
            count(get, end).saturating_sub(count(get, start))
        };
        Some(RrSide {
            latency: window.latency.summary(true),
            connect: window.connect.map(|c| c.summary(true)),
            owed: count(|s| s.owed, end),
            lost: between(|s| s.lost),
            late: between(|s| s.late),
            port_exhausted: between(|s| s.port_exhausted),
            time_wait: (self.workload == Workload::Crr)
                .then(linerate_hostinfo::time_wait_sockets)
                .flatten(),
        })
    }

    fn flow_side(&self, outcome: &FlowOutcome, start: usize, end: usize) -> FlowSide {
        let find = |boundary: usize| {
            self.samples[boundary].iter().flatten().find_map(|s| {
                s.flows
                    .iter()
                    .find(|f| f.id == outcome.id)
                    .map(|f| (s.at, *f))
            })
        };
        let (window_bytes, window_s, retransmits, udp, transactions) =
            match (find(start), find(end)) {
                (Some((ta, a)), Some((tb, b))) => (
                    b.bytes - a.bytes,
                    tb.saturating_sub(ta).as_secs_f64(),
                    b.retransmits.saturating_sub(a.retransmits),
                    a.udp.zip(b.udp).map(|(ua, ub)| udp_delta(&ua, &ub)),
                    b.transactions.saturating_sub(a.transactions),
                ),
                _ => (0, 0.0, 0, None, 0),
            };
        FlowSide {
            id: outcome.id,
            direction: outcome.direction,
            role: outcome.role,
            local_addr: outcome.local_addr.clone(),
            remote_addr: outcome.remote_addr.clone(),
            window_bytes,
            window_s,
            bytes_total: outcome.bytes_total,
            retransmits,
            sndbuf: outcome.sndbuf,
            rcvbuf: outcome.rcvbuf,
            mss: outcome.info.snd_mss,
            rtt_us: outcome.info.rtt_us,
            congestion: outcome.congestion.clone(),
            error: outcome.error.clone(),
            udp,
            datagrams_total: outcome.datagrams_total,
            transactions,
            transactions_total: outcome.transactions_total,
            classes: outcome.classes.clone(),
            frames: outcome.frames.clone(),
            one_way_delay_us: outcome.one_way_delay_us.clone(),
            ecn: outcome.info.ecn,
            mptcp: outcome.mptcp,
        }
    }

    fn cpu(&self, start: usize, end: usize) -> linerate_model::CpuUsage {
        let edge = |boundary: usize| self.samples[boundary].first().cloned().flatten();
        let (Some(a), Some(b)) = (edge(start), edge(end)) else {
            return Default::default();
        };
        let spent = |get: fn(&Sample) -> Duration| -> Duration {
            self.samples[start]
                .iter()
                .zip(&self.samples[end])
                .filter_map(|(a, b)| Some(get(b.as_ref()?).saturating_sub(get(a.as_ref()?))))
                .sum()
        };
        let process = spent(|s| s.cpu);
        let window = b.at.saturating_sub(a.at);
        match (&a.proc_stat, &b.proc_stat) {
            (Some(before), Some(after)) => linerate_model::CpuUsage {
                process_user_pct: if window.is_zero() {
                    0.0
                } else {
                    spent(|s| s.cpu_user).as_secs_f64() / window.as_secs_f64() * 100.0
                },
                ..usage(before, after, process, window)
            },
            _ => Default::default(),
        }
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        // A plane dropped without `finish` (an error path) must not leave workers running.
        self.stop();
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

/// The loop a worker runs: one per kind of flow, each a sibling module that knows nothing
/// of the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkerLoop {
    /// Request/response transactions over any transport (crate rr).
    Transactions,
    /// QUIC streams (crate quic).
    Quic,
    /// UDP datagrams (crate udp).
    Datagrams,
    /// TCP streams, plain or TLS (crate worker).
    Streams,
}

impl WorkerLoop {
    /// The loop for `specs`: a test's flows are all of one kind, so the first one decides;
    /// the match names every kind of socket, so a new one is a compile error here.
    fn of(plan: &WorkerPlan, specs: &[FlowSpec]) -> WorkerLoop {
        if plan.rr.is_some() {
            return WorkerLoop::Transactions;
        }
        match specs.first().map(|spec| &spec.socket) {
            Some(FlowSocket::Quic(_)) => WorkerLoop::Quic,
            Some(FlowSocket::Udp(_)) => WorkerLoop::Datagrams,
            Some(
                FlowSocket::Tcp(_)
                | FlowSocket::Connect(_)
                | FlowSocket::Listen { .. }
                | FlowSocket::Tls(_)
                | FlowSocket::Ktls(..),
            )
            | None => WorkerLoop::Streams,
        }
    }
}

/// One worker thread: pinned where asked, then the loop its flows need.
fn run_worker(
    plan: WorkerPlan,
    specs: Vec<FlowSpec>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<FlowOutcome>> {
    if let Some(cpu) = plan.cpu {
        crate::sys::pin_to(cpu)?;
    }
    if plan.keeps_a_schedule() {
        crate::sys::keep_a_schedule();
    }
    match WorkerLoop::of(&plan, &specs) {
        WorkerLoop::Transactions => crate::rr::run(plan, specs, samples, stop),
        WorkerLoop::Quic => crate::quic::run(plan, specs, samples, stop),
        WorkerLoop::Datagrams => crate::udp::run(plan, specs, samples, stop),
        WorkerLoop::Streams => crate::worker::run(plan, specs, samples, stop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_cover_intervals_omit_and_end() {
        let s = Schedule {
            omit: Duration::from_millis(1500),
            time: Duration::from_secs(2),
            interval: Duration::from_secs(1),
        };
        let secs: Vec<f64> = s.boundaries().iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, vec![0.0, 1.0, 1.5, 2.0, 3.0, 3.5]);
        let none = Schedule {
            omit: Duration::ZERO,
            time: Duration::from_secs(5),
            interval: Duration::ZERO,
        };
        assert_eq!(
            none.boundaries(),
            vec![Duration::ZERO, Duration::from_secs(5)]
        );
    }
}
