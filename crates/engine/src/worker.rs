//! One data-plane worker: a thread with its own poll set and its share of the flows.
//!
//! Workers share nothing on the hot path: counters are plain fields of the worker's own
//! flows, read out at interval boundaries into a [`Sample`] sent over a channel
//! (MEASUREMENT.md rule 11). The clock is read once per loop turn, never per write; a turn
//! does at most [`OPS_PER_TURN`] socket calls, so a boundary is noticed within one turn and
//! the sample records the time it was actually taken.
//!
//! Readiness follows mio's edge-triggered rules: a flow is "ready" from an event until a
//! call returns `WouldBlock`. Ready flows wait in a FIFO and each gets [`OPS_PER_FLOW`]
//! calls per visit, so thousands of flows on one worker are served fairly.

use crate::pacer::Pacer;
use crate::sys;
use linerate_hostinfo::{thread_cpu_time, CpuSnapshot};
use linerate_report::{Direction, Role};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Socket calls per loop turn, across all flows of the worker.
pub const OPS_PER_TURN: usize = 64;
/// Socket calls per flow per visit.
pub const OPS_PER_FLOW: usize = 8;

/// A flow handed to the data plane: a connected socket and what to do with it.
#[derive(Debug)]
pub struct FlowSpec {
    pub id: u32,
    pub direction: Direction,
    pub role: Role,
    pub stream: std::net::TcpStream,
}

/// One flow's counters at one boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowCount {
    pub id: u32,
    pub bytes: u64,
    /// TCP_INFO total retransmits so far (senders; 0 for receivers).
    pub retransmits: u64,
}

/// One worker's reading at one boundary of the schedule.
#[derive(Debug, Clone)]
pub struct Sample {
    pub worker: usize,
    /// Boundary index in [`Schedule::boundaries`](crate::plane::Schedule::boundaries).
    pub index: usize,
    /// When the reading was taken, since the test's start.
    pub at: Duration,
    /// The worker thread's CPU time so far.
    pub cpu: Duration,
    pub flows: Vec<FlowCount>,
    /// `/proc/stat` at the window's edges (worker 0 only).
    pub proc_stat: Option<CpuSnapshot>,
}

/// What a worker knows of a flow when it ends.
#[derive(Debug, Clone)]
pub struct FlowOutcome {
    pub id: u32,
    pub direction: Direction,
    pub role: Role,
    pub local_addr: String,
    pub remote_addr: String,
    pub bytes_total: u64,
    pub sndbuf: u64,
    pub rcvbuf: u64,
    pub congestion: String,
    pub info: sys::TcpInfo,
    pub error: Option<String>,
}

/// Everything a worker needs, read-only.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    pub index: usize,
    pub start: Instant,
    /// Nominal boundaries since start; the last one ends the test.
    pub boundaries: Vec<Duration>,
    /// Boundaries at which worker 0 reads `/proc/stat`.
    pub cpu_boundaries: Vec<usize>,
    pub length: usize,
    pub rate_bps: Option<u64>,
    /// How long receivers keep draining after the end for the sender's last bytes.
    pub drain: Duration,
}

struct Flow {
    id: u32,
    role: Role,
    stream: TcpStream,
    bytes: u64,
    ready: bool,
    /// The peer's FIN (or an error) has been signalled: no further edge will come, so
    /// reads go on until they return 0 or fail.
    read_closed: bool,
    queued: bool,
    parked: bool,
    done: bool,
    pacer: Option<Pacer>,
    outcome: FlowOutcome,
}

impl Flow {
    fn fail(&mut self, poll: &Poll, at: Duration, what: &str, error: &io::Error) {
        if self.outcome.error.is_none() {
            self.outcome.error = Some(format!(
                "{what} failed at {:.3} s: {error}",
                at.as_secs_f64()
            ));
        }
        self.finish(poll);
    }

    fn finish(&mut self, poll: &Poll) {
        if !self.done {
            self.done = true;
            let _ = poll.registry().deregister(&mut self.stream);
        }
    }
}

/// Runs one worker to the end of the schedule (or until `stop`), sending a sample at each
/// boundary, and returns its flows' outcomes.
pub fn run(
    plan: WorkerPlan,
    specs: Vec<FlowSpec>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<FlowOutcome>> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut flows: Vec<Flow> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        spec.stream.set_nonblocking(true)?;
        let (sndbuf, rcvbuf) = sys::granted_buffers(&spec.stream);
        let outcome = FlowOutcome {
            id: spec.id,
            direction: spec.direction,
            role: spec.role,
            local_addr: spec
                .stream
                .local_addr()
                .map_or(String::new(), |a| a.to_string()),
            remote_addr: spec
                .stream
                .peer_addr()
                .map_or(String::new(), |a| a.to_string()),
            bytes_total: 0,
            sndbuf,
            rcvbuf,
            congestion: sys::congestion(&spec.stream),
            info: sys::TcpInfo::default(),
            error: None,
        };
        let mut stream = TcpStream::from_std(spec.stream);
        let interest = match spec.role {
            Role::Send => Interest::WRITABLE,
            Role::Receive => Interest::READABLE,
        };
        poll.registry().register(&mut stream, Token(i), interest)?;
        let pacer = match (spec.role, plan.rate_bps) {
            // Credit for a few milliseconds or one write, whichever is larger.
            (Role::Send, Some(rate)) => Some(Pacer::new(
                plan.start,
                rate,
                (rate / 8 / 200).max(plan.length as u64),
            )),
            _ => None,
        };
        flows.push(Flow {
            id: spec.id,
            role: spec.role,
            stream,
            bytes: 0,
            // A fresh socket is writable (and may already be readable); try it at once.
            ready: true,
            read_closed: false,
            queued: true,
            parked: false,
            done: false,
            pacer,
            outcome,
        });
    }
    let mut ready: VecDeque<usize> = (0..flows.len()).collect();
    let mut timers: BinaryHeap<Reverse<(Instant, usize)>> = BinaryHeap::new();
    // The send buffer holds a recognisable pattern; the receive buffer is scratch.
    let send_buffer: Vec<u8> = (0..plan.length).map(|i| (i % 251) as u8).collect();
    // Reads of at least 128 KiB, and at most 4 MiB however large the writes are.
    let mut receive_buffer = vec![0u8; plan.length.clamp(128 * 1024, 4 << 20)];
    let end_index = plan.boundaries.len() - 1;
    let test_end = plan.boundaries[end_index];
    let early_close_tolerance = (test_end / 20).min(Duration::from_secs(1));
    let mut next_boundary = 0usize;
    let mut drain_deadline: Option<Instant> = None;

    loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let since = now.saturating_duration_since(plan.start);
        while next_boundary <= end_index && since >= plan.boundaries[next_boundary] {
            let is_end = next_boundary == end_index;
            let proc_stat = (plan.index == 0 && plan.cpu_boundaries.contains(&next_boundary))
                .then(|| CpuSnapshot::read().ok())
                .flatten();
            let counts = flows
                .iter_mut()
                .map(|flow| {
                    let retransmits = if flow.role == Role::Send {
                        if !flow.done {
                            flow.outcome.info = sys::tcp_info(&flow.stream);
                        }
                        u64::from(flow.outcome.info.total_retrans)
                    } else {
                        0
                    };
                    FlowCount {
                        id: flow.id,
                        bytes: flow.bytes,
                        retransmits,
                    }
                })
                .collect();
            let sample = Sample {
                worker: plan.index,
                index: next_boundary,
                at: since,
                cpu: thread_cpu_time(),
                flows: counts,
                proc_stat,
            };
            // The coordinator may have gone (an aborted test); the flows still end cleanly.
            let _ = samples.send(sample);
            next_boundary += 1;
            if is_end {
                for (i, flow) in flows.iter_mut().enumerate() {
                    match flow.role {
                        Role::Send => {
                            let _ = flow.stream.shutdown(Shutdown::Write);
                            flow.finish(&poll);
                        }
                        // Bytes still arriving are the sender's tail: counted in the total only.
                        Role::Receive if !flow.done && !flow.queued => {
                            flow.ready = true;
                            flow.queued = true;
                            ready.push_back(i);
                        }
                        Role::Receive => {}
                    }
                }
                drain_deadline = Some(now + plan.drain);
            }
        }
        if let Some(deadline) = drain_deadline {
            if now >= deadline || flows.iter().all(|f| f.done) {
                break;
            }
        }
        while let Some(&Reverse((when, i))) = timers.peek() {
            if when > now {
                break;
            }
            timers.pop();
            let flow = &mut flows[i];
            flow.parked = false;
            if flow.ready && !flow.queued && !flow.done {
                flow.queued = true;
                ready.push_back(i);
            }
        }

        let timeout = if !ready.is_empty() {
            Some(Duration::ZERO)
        } else {
            let mut wake = drain_deadline
                .unwrap_or(plan.start + plan.boundaries[next_boundary.min(end_index)]);
            if next_boundary <= end_index {
                wake = wake.min(plan.start + plan.boundaries[next_boundary]);
            }
            if let Some(&Reverse((when, _))) = timers.peek() {
                wake = wake.min(when);
            }
            Some(wake.saturating_duration_since(now))
        };
        match poll.poll(&mut events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for event in events.iter() {
            let i = event.token().0;
            let flow = &mut flows[i];
            flow.ready = true;
            if event.is_read_closed() || event.is_error() {
                flow.read_closed = true;
            }
            if !flow.queued && !flow.parked && !flow.done {
                flow.queued = true;
                ready.push_back(i);
            }
        }

        let mut ops = 0;
        let mut visits = ready.len();
        while ops < OPS_PER_TURN && visits > 0 {
            visits -= 1;
            let Some(i) = ready.pop_front() else { break };
            let flow = &mut flows[i];
            flow.queued = false;
            if flow.done {
                continue;
            }
            let draining = drain_deadline.is_some();
            let mut calls = 0;
            while calls < OPS_PER_FLOW && flow.ready && !flow.done {
                calls += 1;
                match flow.role {
                    Role::Send => {
                        if let Some(pacer) = flow.pacer.as_mut() {
                            if let Some(wait) = pacer.delay(now) {
                                flow.parked = true;
                                timers.push(Reverse((now + wait, i)));
                                break;
                            }
                        }
                        match flow.stream.write(&send_buffer) {
                            Ok(n) => {
                                flow.bytes += n as u64;
                                if let Some(pacer) = flow.pacer.as_mut() {
                                    pacer.charge(n);
                                }
                                // A partial write means the send buffer is full and the
                                // kernel has flagged it (SOCK_NOSPACE), so an edge-triggered
                                // writable event will follow: skip the EAGAIN call.
                                if n < send_buffer.len() {
                                    flow.ready = false;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => flow.ready = false,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => flow.fail(&poll, since, "send", &e),
                        }
                    }
                    Role::Receive => match flow.stream.read(&mut receive_buffer) {
                        Ok(0) => {
                            // The sender's clock started one control-path delay before ours,
                            // so its normal end arrives a little before our end boundary.
                            if !draining && since + early_close_tolerance < test_end {
                                flow.outcome.error = Some(format!(
                                    "peer closed the connection early, at {:.3} s",
                                    since.as_secs_f64()
                                ));
                            }
                            flow.finish(&poll);
                        }
                        Ok(n) => {
                            flow.bytes += n as u64;
                            // A short read drained the queue; data arriving later raises a
                            // new edge, so the EAGAIN call can be skipped. Not after the FIN's
                            // edge: the next read returns 0 and nothing else will wake us.
                            if n < receive_buffer.len() && !flow.read_closed {
                                flow.ready = false;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => flow.ready = false,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => flow.fail(&poll, since, "receive", &e),
                    },
                }
            }
            ops += calls;
            if flow.ready && !flow.parked && !flow.done {
                flow.queued = true;
                ready.push_back(i);
            }
        }
    }
    Ok(flows
        .into_iter()
        .map(|mut flow| {
            flow.outcome.bytes_total = flow.bytes;
            flow.outcome
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream as StdStream};
    use std::sync::mpsc::channel;

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
        let plan = WorkerPlan {
            index: 1,
            start,
            boundaries: vec![Duration::ZERO, Duration::from_millis(50)],
            cpu_boundaries: vec![],
            length: 128 * 1024,
            rate_bps: None,
            drain,
        };
        let spec = FlowSpec {
            id: 0,
            direction: Direction::Forward,
            role: Role::Receive,
            stream: ours,
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
}
