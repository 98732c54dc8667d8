//! One data-plane worker: a thread with its own poll set and its share of the flows.
//!
//! Workers share nothing on the hot path: counters are plain fields of the worker's own
//! flows, read out at interval boundaries into a [`Sample`] sent over a channel
//! (docs/measurement.md 7). The clock is read once per loop turn, never per write; a turn
//! does at most [`OPS_PER_TURN`] socket calls, so a boundary is noticed within one turn and
//! the sample records the time it was actually taken.
//!
//! Readiness follows mio's edge-triggered rules: a flow is "ready" from an event until a
//! call returns `WouldBlock`. Ready flows wait in a FIFO and each gets [`OPS_PER_FLOW`]
//! calls per visit, so thousands of flows on one worker are served fairly.

use crate::bursts::BurstSender;
use crate::conn::Stream;
use crate::flow::{
    mismatch, outcome_of, send_sample, FlowCount, FlowOutcome, FlowSpec, Sample, SampleExtra,
    WorkerPlan, WritesInterval, OPS_PER_FLOW, OPS_PER_TURN, PATTERN_PERIOD,
};
use crate::pacer::Pacer;
use crate::sys;
use linerate_model::Role;
use mio::{Events, Interest, Poll, Token};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Flow {
    id: u32,
    role: Role,
    stream: Stream,
    bytes: u64,
    /// Encrypted flows: the sender writes the pattern continuously from the stream's first
    /// byte, and the receiver compares a sample of what it decrypted against it.
    checked: bool,
    ready: bool,
    /// The peer's FIN (or an error) has been signalled: no further edge will come, so
    /// reads go on until they return 0 or fail.
    read_closed: bool,
    queued: bool,
    parked: bool,
    done: bool,
    /// A TLS sender past its last write (the end, or its byte budget) whose sealed records
    /// the socket has not taken yet: it sends them before it is done (and, after the end,
    /// before its FIN), so that every byte it counted reaches the receiver.
    closing: bool,
    /// Bytes this flow moves before it stops (iperf3's `-n`), and whether it has.
    budget: Option<u64>,
    spent: bool,
    pacer: Option<Pacer>,
    /// A receiving TCP flow of a served iperf 2 `--trip-times` test: the client's writes
    /// followed, and where their latencies go at the end.
    trip_times: Option<(linerate_proto::iperf2::BurstTracker, crate::flow::TripTimes)>,
    /// A sending flow of `linerate iperf2 -c` under `--trip-times` or `--isochronous`:
    /// its writes are iperf 2's bursts.
    bursts: Option<BurstSender>,
    outcome: FlowOutcome,
}

impl Flow {
    /// A write took `n` bytes: counted, and charged to the pacer (`-b` paces timed
    /// writes as it paces plain ones).
    fn sent(&mut self, n: usize) {
        self.bytes += n as u64;
        if let Some(pacer) = self.pacer.as_mut() {
            pacer.charge(n);
        }
    }

    /// `alone`: the worker's only flow (buffers sized for speed, not for thousands).
    fn new(spec: FlowSpec, plan: &WorkerPlan, alone: bool) -> Flow {
        let (mut stream, tls, note) = Stream::of(spec.socket, !alone);
        if spec.role == Role::Send {
            // Sealed records wait in user space until the socket takes them: at most one
            // write's worth for a lone flow, two records' worth each among many.
            stream.set_write_limit(if alone {
                plan.length
            } else {
                plan.length.min(MANY_FLOWS_WRITE_LIMIT)
            });
        }
        let mut outcome = outcome_of(&stream, spec.id, spec.direction, spec.role);
        outcome.congestion = sys::congestion(&stream);
        outcome.tls = tls;
        outcome.notes.extend(note);
        let pacer = match (spec.role, plan.rate_bps) {
            // Credit for a few milliseconds or one write, whichever is larger.
            (Role::Send, Some(rate)) => Some(Pacer::new(
                plan.start,
                rate,
                (rate / 8 / 200).max(plan.length as u64),
            )),
            _ => None,
        };
        Flow {
            id: spec.id,
            role: spec.role,
            stream,
            bytes: 0,
            checked: tls.is_some(),
            // A fresh socket is writable (and may already be readable); try it at once.
            ready: true,
            read_closed: false,
            queued: true,
            parked: false,
            done: false,
            closing: false,
            budget: plan.budget_for(spec.role),
            spent: false,
            pacer,
            trip_times: plan
                .trip_times
                .clone()
                .filter(|_| spec.role == Role::Receive)
                .map(|shared| {
                    // The test's tracker says what a connection's follows (frames or not).
                    let test = shared.lock().unwrap_or_else(|e| e.into_inner());
                    let ours = test.for_a_connection();
                    drop(test);
                    (ours, shared)
                }),
            bursts: plan
                .tcp_bursts
                .filter(|_| spec.role == Role::Send)
                .map(|bursts| BurstSender::new(&bursts, plan.length, wall_at(plan.start))),
            outcome,
        }
    }

    /// How long this flow must wait before it may write again: its pace, or (iperf 2's
    /// frames) the next frame's due time.
    fn wait(&mut self, now: Instant, start: Instant) -> Option<Duration> {
        if let Some(wait) = self.pacer.as_mut().and_then(|p| p.delay(now)) {
            return Some(wait);
        }
        let elapsed = now.saturating_duration_since(start).as_nanos() as u64;
        let next = self.bursts.as_ref()?.not_before(elapsed)?;
        Some(Duration::from_nanos(next - elapsed))
    }

    /// What a failed call means: nothing to do now (the socket would block), or the
    /// flow's end, recorded.
    fn failed(&mut self, at: Duration, what: &str, error: &io::Error) -> Step {
        if is_idle(error) {
            return Step::Idle;
        }
        self.fail(at, what, error);
        Step::Ended
    }

    fn fail(&mut self, at: Duration, what: &str, error: &io::Error) {
        if self.outcome.error.is_none() {
            self.outcome.error = Some(format!(
                "{what} failed at {:.3} s: {error}",
                at.as_secs_f64()
            ));
        }
        self.done = true;
    }
}

/// What one socket call did.
enum Step {
    /// Bytes moved; `short` when fewer than asked (the queue or buffer ran out).
    Moved { short: bool },
    /// Nothing to do now (EAGAIN, EINTR, a blocking call's timeout).
    Idle,
    /// The flow ended (EOF or an error, recorded in its outcome).
    Ended,
}

/// The state a worker keeps whichever loop drives its flows.
struct Worker {
    plan: WorkerPlan,
    flows: Vec<Flow>,
    samples: Sender<Sample>,
    send_buffer: Vec<u8>,
    receive_buffer: Vec<u8>,
    next_boundary: usize,
    early_close_tolerance: Duration,
    /// Set when the end boundary passes.
    drain_deadline: Option<Instant>,
}

impl Worker {
    fn new(plan: WorkerPlan, specs: Vec<FlowSpec>, samples: Sender<Sample>) -> Worker {
        let alone = specs.len() == 1;
        let flows = specs
            .into_iter()
            .map(|s| Flow::new(s, &plan, alone))
            .collect();
        let end_index = plan.boundaries.len() - 1;
        let test_end = plan.boundaries[end_index];
        Worker {
            // The send buffer holds a recognisable pattern; the receive buffer is scratch
            // of one size whatever the sender's writes are (see RECEIVE_BUFFER).
            // It is one period longer than a write, so a write can start at any phase.
            send_buffer: crate::flow::pattern(plan.length),
            receive_buffer: vec![0u8; receive_read_size(sys::l2_cache_bytes())],
            next_boundary: 0,
            early_close_tolerance: plan.early_close_tolerance(test_end),
            drain_deadline: None,
            plan,
            flows,
            samples,
        }
    }

    fn since(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.plan.start)
    }

    /// When the next boundary is due, if one is left: now, if the test was asked to end
    /// there.
    fn next_boundary_at(&self) -> Option<Instant> {
        let next = self.next_boundary;
        if next > self.plan.end_index() {
            return None;
        }
        if self.plan.end.requested() == Some(next) {
            return Some(Instant::now());
        }
        Some(self.plan.start + self.plan.boundaries[next])
    }

    /// Takes a sample at every boundary that has passed. At the end boundary senders
    /// close their half (the receiver's EOF) and the drain begins; returns the indices of
    /// receiving flows still open, which must be read on for the sender's tail.
    fn sample_due(&mut self, now: Instant) -> Vec<usize> {
        let since = self.since(now);
        let mut draining = Vec::new();
        loop {
            let end_index = self.plan.end_index();
            if self.next_boundary > end_index {
                // Asked to end at a boundary this worker has already sampled.
                if self.drain_deadline.is_none() {
                    self.begin_drain(now, &mut draining);
                }
                break;
            }
            if !self.plan.is_due(self.next_boundary, since) {
                break;
            }
            let index = self.next_boundary;
            let flows = self
                .flows
                .iter_mut()
                .map(|flow| {
                    let sends = flow.role == Role::Send;
                    // Every flow's TCP_INFO, as iperf3 keeps it per interval: a receiver's
                    // socket has its own RTT estimate too.
                    let info = if flow.done {
                        flow.outcome.info
                    } else {
                        sys::tcp_info(&flow.stream)
                    };
                    if sends {
                        flow.outcome.info = info;
                    }
                    if self.plan.mptcp && !flow.done {
                        flow.outcome.mptcp = Some(sys::mptcp_info(&flow.stream));
                    }
                    FlowCount {
                        id: flow.id,
                        bytes: flow.bytes,
                        retransmits: if sends {
                            u64::from(info.total_retrans)
                        } else {
                            0
                        },
                        udp: None,
                        tcp: Some(info.snapshot()),
                        transactions: 0,
                        crypto: flow.stream.crypto_time(),
                    }
                })
                .collect();
            // A served iperf 2 test's timed writes: this interval's, all flows' together.
            let writes = self.plan.trip_times.is_some().then(|| {
                let mut writes = WritesInterval::default();
                for (bursts, _) in self.flows.iter_mut().filter_map(|f| f.trip_times.as_mut()) {
                    writes.merge(&bursts.interval());
                }
                writes
            });
            let extra = SampleExtra {
                writes,
                ..SampleExtra::default()
            };
            send_sample(&self.plan, &self.samples, index, since, flows, extra);
            self.next_boundary += 1;
            if index == end_index {
                self.begin_drain(now, &mut draining);
                break;
            }
        }
        draining
    }

    /// The test's end: senders close their half, receivers still open read on for the
    /// sender's tail until the drain deadline.
    fn begin_drain(&mut self, now: Instant, draining: &mut Vec<usize>) {
        for (i, flow) in self.flows.iter_mut().enumerate() {
            match flow.role {
                // Sealed records the socket could not take yet go out during the drain,
                // then the FIN; the receivers read on until it comes.
                Role::Send if !flow.done && flow.stream.send_sealed().is_err() => {
                    flow.closing = true;
                    draining.push(i);
                }
                Role::Send => {
                    let _ = flow.stream.shutdown_write();
                    flow.done = true;
                }
                // Bytes still arriving are the sender's tail: counted in the total only.
                _ if !flow.done => draining.push(i),
                _ => {}
            }
        }
        self.drain_deadline = Some(now + self.plan.drain);
    }

    /// The drain is over: its deadline passed or every flow has ended.
    fn drained(&self, now: Instant) -> bool {
        self.drain_deadline
            .is_some_and(|deadline| now >= deadline || self.flows.iter().all(|f| f.done))
    }

    /// One write or read on flow `i`.
    // Long: one write or read on the hot path, every role and socket kind matched in one
    // frame; a split would cost calls per write.
    fn step(&mut self, i: usize, since: Duration) -> Step {
        let flow = &mut self.flows[i];
        let step = match flow.role {
            Role::Send if flow.closing => match flow.stream.send_sealed() {
                Ok(()) => {
                    flow.closing = false;
                    flow.done = true;
                    if self.drain_deadline.is_some() {
                        let _ = flow.stream.shutdown_write();
                    }
                    Step::Ended
                }
                Err(e) if is_idle(&e) => Step::Idle,
                Err(e) => {
                    flow.closing = false;
                    flow.fail(since, "send", &e);
                    Step::Ended
                }
            },
            Role::Send if flow.bursts.is_some() => {
                let bursts = flow.bursts.as_mut().expect("a burst sender");
                // Each burst carries the wall clock as its first byte goes.
                let elapsed = self.plan.start.elapsed().as_nanos() as u64;
                let write_ns = linerate_model::clock::UnixTime::now().nanos();
                let bytes = bursts.pending(elapsed, write_ns);
                if bytes.is_empty() {
                    return Step::Idle;
                }
                let length = bytes.len();
                match flow.stream.write(bytes) {
                    Ok(n) => {
                        bursts.wrote(n);
                        flow.sent(n);
                        Step::Moved {
                            short: n < length && flow.stream.short_means_drained(),
                        }
                    }
                    Err(e) => flow.failed(since, "send", &e),
                }
            }
            Role::Send => {
                let left = flow
                    .budget
                    .map_or(u64::MAX, |b| b.saturating_sub(flow.bytes));
                let length = self.plan.length.min(left as usize);
                let phase = if flow.checked {
                    (flow.bytes % PATTERN_PERIOD as u64) as usize
                } else {
                    0
                };
                match flow.stream.write(&self.send_buffer[phase..phase + length]) {
                    Ok(n) => {
                        flow.sent(n);
                        if n as u64 == left {
                            // The budget is sent (once its sealed records are); the peer's
                            // end of the test closes the flow.
                            if flow.stream.send_sealed().is_ok() {
                                flow.done = true;
                            } else {
                                flow.closing = true;
                            }
                        }
                        Step::Moved {
                            short: n < length && flow.stream.short_means_drained(),
                        }
                    }
                    Err(e) => flow.failed(since, "send", &e),
                }
            }
            _ => match flow.stream.read(&mut self.receive_buffer) {
                Ok(0) => {
                    // The sender's clock started one control-path delay before ours, so
                    // its normal end arrives a little before our end boundary. The time is
                    // read now: the turn's own reading can be a whole turn old (200 flows
                    // on a busy host: over 100 ms), which once called normal ends early.
                    let at = Instant::now().saturating_duration_since(self.plan.start);
                    let test_end = self.plan.boundaries[self.plan.end_index()];
                    if self.drain_deadline.is_none() && at + self.early_close_tolerance < test_end {
                        flow.outcome.error = Some(format!(
                            "peer closed the connection early, at {:.3} s",
                            at.as_secs_f64()
                        ));
                    }
                    flow.done = true;
                    Step::Ended
                }
                Ok(n) => {
                    if flow.checked {
                        if let Some(at) =
                            mismatch(&self.receive_buffer[..n], flow.bytes, &self.send_buffer)
                        {
                            flow.outcome.error = Some(crate::flow::mismatch_error(at));
                            flow.done = true;
                            return Step::Ended;
                        }
                    }
                    flow.bytes += n as u64;
                    if let Some((bursts, _)) = flow.trip_times.as_mut() {
                        // The read's time on the wall clock, as the writes' send times are.
                        let now = linerate_model::clock::UnixTime::now().nanos();
                        bursts.feed(&self.receive_buffer[..n], now);
                    }
                    Step::Moved {
                        short: n < self.receive_buffer.len() && flow.stream.short_means_drained(),
                    }
                }
                Err(e) => flow.failed(since, "receive", &e),
            },
        };
        if !flow.spent && flow.budget.is_some_and(|b| flow.bytes >= b) {
            flow.spent = true;
            if self.plan.end.budget_spent() {
                // The last budget is moved: the test ends at the boundary ahead.
                self.plan.end.request(self.next_boundary);
            }
        }
        step
    }

    fn outcomes(self) -> Vec<FlowOutcome> {
        self.flows
            .into_iter()
            .map(|mut flow| {
                flow.outcome.bytes_total = flow.bytes;
                if let Some(bursts) = &flow.bursts {
                    flow.outcome.frames = bursts.counts();
                }
                if let Some((bursts, shared)) = &flow.trip_times {
                    shared
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .merge(bursts);
                }
                if flow.closing && flow.outcome.error.is_none() {
                    flow.outcome.error = Some(
                        "the receiver took no more data during the drain: the last sealed \
                         TLS records were never sent, so the receiver got less than was counted"
                            .to_string(),
                    );
                }
                flow.outcome
            })
            .collect()
    }
}

/// The wall clock (Unix ns) at `start`, which may be ahead: iperf 2's frames are due
/// from it.
fn wall_at(start: Instant) -> u64 {
    let (mono_now, wall_now) = (
        Instant::now(),
        linerate_model::clock::UnixTime::now().nanos(),
    );
    if start >= mono_now {
        wall_now + (start - mono_now).as_nanos() as u64
    } else {
        wall_now.saturating_sub((mono_now - start).as_nanos() as u64)
    }
}

fn is_idle(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::TimedOut
    )
}

/// Runs one worker to the end of the schedule (or until `stop`), sending a sample at each
/// boundary, and returns its flows' outcomes.
///
/// A worker that owns one flow runs it with blocking calls, as a thread-per-flow tool
/// does: the thread sleeps in the socket itself, and the kernel wakes it only when it
/// waits. An event loop's poll set stays on the socket's wait queue and is called back for
/// every segment; on loopback at 8 flows that cost about a quarter of the goodput
/// (docs/performance.md). Many flows share a worker through the event loop.
pub fn run(
    plan: WorkerPlan,
    specs: Vec<FlowSpec>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<FlowOutcome>> {
    let mut worker = Worker::new(plan, specs, samples);
    if worker.flows.len() == 1 {
        run_blocking(&mut worker, &stop)?;
    } else {
        run_event_loop(&mut worker, &stop)?;
    }
    Ok(worker.outcomes())
}

/// The most bytes a receiving worker asks for per read, whatever the sender's write size
/// (`-l` is the sender's setting). One large read holds the socket while it copies, and
/// segments arriving meanwhile go to the socket's backlog, which this thread then
/// processes: TCP's receive work moves from the sender's CPU (where loopback and a busy
/// NIC queue run it in softirq) to the receiver's. 1 MiB reads took one loopback flow
/// from 15 to 16 Gbit/s alone and to 21-24 with [`RECEIVE_LOW_WATER`]
/// (docs/performance.md). One buffer per worker, not per flow; its size is
/// [`receive_read_size`].
pub const RECEIVE_BUFFER: usize = 1 << 20;

/// Bytes a receiving worker reads per call on a CPU with `l2` bytes of level 2 cache: half
/// of it (the kernel's copy into the buffer then stays in the core's L2 beside the
/// segments it copies from), at least 64 KiB and at most [`RECEIVE_BUFFER`]; that where
/// the size is unknown. On a 512 KiB-L2 AMD EPYC, 256 KiB reads moved one loopback flow
/// of 128 KiB writes at 24-31 Gbit/s against 13-14 with 1 MiB reads (docs/performance.md).
pub fn receive_read_size(l2: Option<usize>) -> usize {
    l2.map_or(RECEIVE_BUFFER, |l2| {
        (l2 / 2).clamp(64 << 10, RECEIVE_BUFFER)
    })
}

/// SO_RCVLOWAT of a flow read with blocking calls: the kernel wakes the reader only once
/// this much has queued (or the peer closed, or the read's timeout passed), so a fast
/// flow wakes its reader about every 256 KiB instead of every segment. Each wake-up is
/// paid by the sender's CPU (it runs the receive path on loopback), where it cost about
/// a tenth of the time. A slow flow is still read every [`BLOCKING_TIMEOUT`]. Set only on
/// short paths (below [`LOW_WATER_MAX_RTT_US`]) with autotuned buffers: bytes left unread
/// shrink the advertised window, which is what limits a long path. Not set on event-loop
/// flows: readiness there has no timeout to bound a slow flow's wait.
const RECEIVE_LOW_WATER: usize = 256 * 1024;

/// The longest handshake round trip at which a receiver sets [`RECEIVE_LOW_WATER`].
const LOW_WATER_MAX_RTT_US: u32 = 1000;

/// The most application bytes a TLS flow among many seals per write: two records, so
/// thousands of flows with full sockets hold tens, not hundreds, of megabytes.
const MANY_FLOWS_WRITE_LIMIT: usize = 32 * 1024;

/// How long an idle event loop sleeps at most before it looks for an early end.
const END_CHECK: Duration = Duration::from_millis(20);

/// How long a blocking call may wait before the loop looks at the clock again: the
/// latest a boundary sample can be taken on an idle flow (its time is recorded as taken).
const BLOCKING_TIMEOUT: Duration = Duration::from_millis(5);

fn run_blocking(worker: &mut Worker, stop: &AtomicBool) -> io::Result<()> {
    {
        let socket = socket2::SockRef::from(&worker.flows[0].stream);
        socket.set_nonblocking(false)?;
        socket.set_read_timeout(Some(BLOCKING_TIMEOUT))?;
        socket.set_write_timeout(Some(BLOCKING_TIMEOUT))?;
        // Only where wake-ups, not the window, are the limit: a short path whose window
        // the kernel sizes. Unread bytes held back by the mark shrink the window the
        // receiver advertises, which on a long path, or under a window the user set
        // (`-w`), costs goodput (a 1 MiB window at 100 ms lost 6 %).
        // Nor where each write's arrival is timed (iperf 2's --trip-times and frames):
        // the mark would hold a write's last bytes unread for the next's.
        let short_path = sys::tcp_info(&*socket).rtt_us < LOW_WATER_MAX_RTT_US;
        let timed = worker.plan.trip_times.is_some();
        if worker.flows[0].role != Role::Send
            && worker.plan.window.is_none()
            && short_path
            && !timed
        {
            sys::set_receive_low_water(&*socket, RECEIVE_LOW_WATER)?;
        }
    }
    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        worker.sample_due(now);
        if worker.drained(now) {
            return Ok(());
        }
        if worker.flows[0].done {
            // Ended before the schedule did (the peer's clock runs a little ahead, or the
            // flow failed): the remaining boundaries still get their samples. An end
            // asked for meanwhile (the peer closed first) must not wait for a boundary
            // far ahead.
            match worker.next_boundary_at() {
                Some(at) => std::thread::sleep(at.saturating_duration_since(now).min(END_CHECK)),
                None => return Ok(()),
            }
            continue;
        }
        let start = worker.plan.start;
        if let Some(wait) = worker.flows[0].wait(now, start) {
            let boundary = worker.next_boundary_at().unwrap_or(now);
            std::thread::sleep(wait.min(boundary.saturating_duration_since(now)));
            continue;
        }
        let since = worker.since(now);
        worker.step(0, since);
    }
}

// Long: the TCP data plane's hot loop keeps its state in one frame; a split would cost
// calls per event.
fn run_event_loop(worker: &mut Worker, stop: &AtomicBool) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    for (i, flow) in worker.flows.iter_mut().enumerate() {
        socket2::SockRef::from(&flow.stream).set_nonblocking(true)?;
        let interest = match flow.role {
            Role::Send => Interest::WRITABLE,
            _ => Interest::READABLE,
        };
        poll.registry()
            .register(&mut flow.stream, Token(i), interest)?;
    }
    let mut ready: VecDeque<usize> = (0..worker.flows.len()).collect();
    let mut timers: BinaryHeap<Reverse<(Instant, usize)>> = BinaryHeap::new();

    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for i in worker.sample_due(now) {
            let flow = &mut worker.flows[i];
            flow.ready = true;
            if !flow.queued {
                flow.queued = true;
                ready.push_back(i);
            }
        }
        if worker.drained(now) {
            break;
        }
        while let Some(&Reverse((when, i))) = timers.peek() {
            if when > now {
                break;
            }
            timers.pop();
            let flow = &mut worker.flows[i];
            flow.parked = false;
            if flow.ready && !flow.queued && !flow.done {
                flow.queued = true;
                ready.push_back(i);
            }
        }

        let timeout = if !ready.is_empty() {
            Duration::ZERO
        } else {
            let mut wake = worker.drain_deadline.or(worker.next_boundary_at());
            if let Some(&Reverse((when, _))) = timers.peek() {
                wake = Some(wake.map_or(when, |w| w.min(when)));
            }
            // An end asked for by the plane or another worker must not wait for a
            // boundary far ahead.
            wake.map_or(Duration::ZERO, |w| w.saturating_duration_since(now))
                .min(END_CHECK)
        };
        match poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for event in events.iter() {
            let i = event.token().0;
            let flow = &mut worker.flows[i];
            flow.ready = true;
            if event.is_read_closed() || event.is_error() {
                flow.read_closed = true;
            }
            if !flow.queued && !flow.parked && !flow.done {
                flow.queued = true;
                ready.push_back(i);
            }
        }

        let since = worker.since(now);
        let mut ops = 0;
        let mut visits = ready.len();
        while ops < OPS_PER_TURN && visits > 0 {
            visits -= 1;
            let Some(i) = ready.pop_front() else { break };
            worker.flows[i].queued = false;
            let mut calls = 0;
            while calls < OPS_PER_FLOW && worker.flows[i].ready && !worker.flows[i].done {
                let start = worker.plan.start;
                if let Some(wait) = worker.flows[i].wait(now, start) {
                    worker.flows[i].parked = true;
                    timers.push(Reverse((now + wait, i)));
                    break;
                }
                calls += 1;
                match worker.step(i, since) {
                    // A partial write means the send buffer is full and the kernel has
                    // flagged it (SOCK_NOSPACE), so an edge-triggered writable event will
                    // follow; a short read drained the queue and data arriving later raises
                    // a new edge. Either way the EAGAIN call can be skipped, except after
                    // the FIN's edge: the next read returns 0 and nothing else will wake us.
                    Step::Moved { short: true } if !worker.flows[i].read_closed => {
                        worker.flows[i].ready = false;
                    }
                    Step::Moved { .. } => {}
                    Step::Idle => worker.flows[i].ready = false,
                    Step::Ended => {}
                }
            }
            ops += calls;
            let flow = &mut worker.flows[i];
            if flow.done {
                let _ = poll.registry().deregister(&mut flow.stream);
            } else if flow.ready && !flow.parked {
                flow.queued = true;
                ready.push_back(i);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::FlowSocket;
    use linerate_model::Direction;
    use std::net::Shutdown;
    use std::net::{TcpListener, TcpStream as StdStream};
    use std::sync::mpsc::channel;

    #[test]
    fn reads_are_half_the_l2_cache_within_bounds() {
        assert_eq!(receive_read_size(Some(512 << 10)), 256 << 10);
        assert_eq!(receive_read_size(Some(2 << 20)), 1 << 20);
        assert_eq!(receive_read_size(Some(32 << 20)), RECEIVE_BUFFER);
        assert_eq!(receive_read_size(Some(64 << 10)), 64 << 10);
        assert_eq!(receive_read_size(None), RECEIVE_BUFFER);
    }

    /// The peer's last bytes and its FIN arrive in one segment after the test's end, so
    /// one edge reports both: the short read of those bytes must not stop the worker from
    /// reading on to the FIN, or it idles until the drain deadline.
    #[test]
    fn a_fin_riding_on_the_last_bytes_ends_the_drain_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = StdStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        let start = Instant::now();
        let drain = Duration::from_secs(20);
        let plan = WorkerPlan::alone(start, Duration::from_millis(50), 128 * 1024, drain);
        let spec = FlowSpec {
            id: 0,
            direction: Direction::Forward,
            role: Role::Receive,
            socket: FlowSocket::Tcp(ours),
        };
        let (samples, _keep) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = std::thread::spawn(move || run(plan, vec![spec], samples, stop));

        std::thread::sleep(Duration::from_millis(300));
        // Corked, the bytes wait in the queue and the FIN joins their segment.
        socket2::SockRef::from(&peer).set_cork(true).unwrap();
        peer.write_all(&[7u8; 1000]).unwrap();
        peer.shutdown(Shutdown::Write).unwrap();

        let outcomes = worker.join().unwrap().unwrap();
        assert!(
            start.elapsed() < drain / 2,
            "the worker waited {:?} for a FIN it had already been told of",
            start.elapsed()
        );
        assert_eq!(outcomes[0].bytes_total, 1000);
    }

    /// A TLS pair on loopback: the worker's end (server) and the test's end (client).
    fn tls_pair() -> (
        linerate_tls::TlsStream<StdStream>,
        linerate_tls::TlsStream<StdStream>,
    ) {
        use linerate_tls::{client_config, server_config, stream, verify::Trust, Cipher};
        let identity = linerate_tls::Identity::self_signed(&["localhost".into()]).unwrap();
        let trust = Trust::Pinned(identity.fingerprint.clone());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = StdStream::connect(listener.local_addr().unwrap()).unwrap();
        let config = server_config(&identity).unwrap();
        let server = std::thread::spawn(move || {
            stream::accept(listener.accept().unwrap().0, config, Duration::from_secs(5))
        });
        let client = stream::connect(
            socket,
            client_config(Cipher::Aes128Gcm, &trust).unwrap(),
            "localhost",
            Duration::from_secs(5),
        )
        .unwrap();
        (server.join().unwrap().unwrap(), client)
    }

    /// Receives what `bytes` holds through TLS in a worker and returns its outcome.
    fn receive_through_tls(bytes: &[u8]) -> FlowOutcome {
        let (ours, mut peer) = tls_pair();
        let start = Instant::now();
        let plan = WorkerPlan::alone(
            start,
            Duration::from_millis(300),
            1000,
            Duration::from_secs(5),
        );
        let spec = FlowSpec {
            id: 0,
            direction: Direction::Forward,
            role: Role::Receive,
            socket: FlowSocket::Tls(Box::new(ours)),
        };
        let (samples, _keep) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = std::thread::spawn(move || run(plan, vec![spec], samples, stop));
        let mut sent = 0;
        while sent < bytes.len() {
            sent += peer.write(&bytes[sent..]).unwrap();
        }
        peer.send_records().unwrap();
        // Past the test's end, so the close is the normal one.
        std::thread::sleep(Duration::from_millis(400));
        peer.socket().shutdown(Shutdown::Write).unwrap();
        worker.join().unwrap().unwrap().remove(0)
    }

    #[test]
    fn a_tls_receiver_checks_what_it_decrypted_against_the_pattern() {
        let pattern: Vec<u8> = (0..200_000).map(|i| (i % PATTERN_PERIOD) as u8).collect();
        let good = receive_through_tls(&pattern);
        assert_eq!(good.error, None);
        assert_eq!(good.bytes_total, pattern.len() as u64);
        assert!(good.tls.is_some());

        let mut bad = pattern.clone();
        bad[500] ^= 0x5a;
        let outcome = receive_through_tls(&bad);
        let error = outcome.error.expect("a changed byte must fail the check");
        assert!(
            error.contains("content check failed at byte 500"),
            "{error}"
        );
    }

    /// A TLS sender whose receiver is not reading when the test ends holds sealed records
    /// the socket cannot take: they go out during the drain, before the FIN, so what the
    /// receiver decrypts is exactly what the sender counted (CI once saw one 128 KiB write
    /// counted and never delivered). Both one flow (blocking calls) and two (event loop).
    #[test]
    fn a_tls_sender_delivers_every_byte_it_counted_when_the_receiver_lags_at_the_end() {
        for flows in [1, 2] {
            let mut specs = Vec::new();
            let mut peers = Vec::new();
            for id in 0..flows {
                let (ours, peer) = tls_pair();
                // Small buffers, so the socket is full when the test ends.
                socket2::SockRef::from(ours.socket())
                    .set_send_buffer_size(16 * 1024)
                    .unwrap();
                socket2::SockRef::from(peer.socket())
                    .set_recv_buffer_size(16 * 1024)
                    .unwrap();
                specs.push(FlowSpec {
                    id,
                    direction: Direction::Forward,
                    role: Role::Send,
                    socket: FlowSocket::Tls(Box::new(ours)),
                });
                peers.push(peer);
            }
            let start = Instant::now();
            let plan = WorkerPlan::alone(
                start,
                Duration::from_millis(200),
                128 * 1024,
                Duration::from_secs(5),
            );
            let (samples, _keep) = channel();
            let stop = Arc::new(AtomicBool::new(false));
            let worker = std::thread::spawn(move || run(plan, specs, samples, stop));
            // Read nothing until well past the end, then everything to the FIN.
            std::thread::sleep(Duration::from_millis(500));
            let readers: Vec<_> = peers
                .into_iter()
                .map(|mut peer| {
                    std::thread::spawn(move || {
                        let mut buffer = vec![0u8; 64 * 1024];
                        let mut total = 0u64;
                        loop {
                            match peer.read(&mut buffer) {
                                Ok(0) => return total,
                                Ok(n) => total += n as u64,
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                Err(e) => panic!("the receiver failed: {e}"),
                            }
                        }
                    })
                })
                .collect();
            let outcomes = worker.join().unwrap().unwrap();
            for (outcome, reader) in outcomes.iter().zip(readers) {
                let received = reader.join().unwrap();
                assert_eq!(outcome.error, None, "{flows} flows");
                assert!(outcome.bytes_total > 0);
                assert_eq!(
                    received, outcome.bytes_total,
                    "{flows} flows: the receiver decrypted {received}, the sender counted {}",
                    outcome.bytes_total
                );
            }
        }
    }

    #[test]
    fn a_mismatch_is_placed_at_its_stream_offset() {
        let pattern: Vec<u8> = (0..4096).map(|i| (i % PATTERN_PERIOD) as u8).collect();
        let at = 10_000u64;
        let phase = (at % PATTERN_PERIOD as u64) as usize;
        let mut read = pattern[phase..phase + 100].to_vec();
        assert_eq!(mismatch(&read, at, &pattern), None);
        read[42] = read[42].wrapping_add(1);
        assert_eq!(mismatch(&read, at, &pattern), Some(at + 42));
    }
}
