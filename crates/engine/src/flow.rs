//! The types the data plane's parts share: what a flow is ([`FlowSpec`]), what a worker is
//! given ([`WorkerPlan`]) and sends back ([`Sample`], [`FlowOutcome`]), and the signal
//! that ends a test early ([`EndSignal`]). The stream worker (`worker`), the UDP loop
//! (`udp`) and the request/response loop (`rr`) are siblings that import these and never
//! each other; the plane (`plane`) starts whichever a worker's flows need.

use crate::sys;
use linerate_hostinfo::observe::HostReading;
use linerate_hostinfo::source::Root;
use linerate_hostinfo::{read_udp_counters, thread_cpu_times, CpuSnapshot};
use linerate_model::latency::LatencyHistogram;
use linerate_model::{Direction, Role, TestConfig, UdpCounters, UdpCounts, Workload};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Socket calls per loop turn, across all flows of the worker.
pub const OPS_PER_TURN: usize = 64;
/// Socket calls per flow per visit.
pub const OPS_PER_FLOW: usize = 8;

/// The send pattern's period: byte `i` of an encrypted flow's stream is `i % 251`. A
/// prime, so no write size lines it up with itself.
pub(crate) const PATTERN_PERIOD: usize = 251;

/// Bytes of each read an encrypted flow's receiver compares with the pattern: the first
/// KiB of every read, which through TLS is one record's start.
const CHECK_BYTES: usize = 1024;

/// The send pattern, one period longer than `length` so a write can start at any phase.
pub(crate) fn pattern(length: usize) -> Vec<u8> {
    (0..length + PATTERN_PERIOD)
        .map(|i| (i % PATTERN_PERIOD) as u8)
        .collect()
}

/// Where the sample of `read` (which starts at the stream's byte `offset`) departs from
/// `pattern` (from [`pattern`]), if it does.
pub(crate) fn mismatch(read: &[u8], offset: u64, pattern: &[u8]) -> Option<u64> {
    let phase = (offset % PATTERN_PERIOD as u64) as usize;
    let length = read.len().min(CHECK_BYTES).min(pattern.len() - phase);
    let expected = &pattern[phase..phase + length];
    if read[..length] == *expected {
        return None;
    }
    let first = read
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    Some(offset + first as u64)
}

/// What a receiver says when the check fails.
pub(crate) fn mismatch_error(at: u64) -> String {
    format!("content check failed at byte {at}: what was decrypted is not what was sent")
}

/// A flow handed to the data plane: a connected socket and what to do with it.
#[derive(Debug)]
pub struct FlowSpec {
    pub id: u32,
    pub direction: Direction,
    pub role: Role,
    pub socket: FlowSocket,
}

/// Which end of a test holds a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

impl FlowSpec {
    /// Flow `id` of `config` as `side` runs it: the role follows from the workload and
    /// the flow's direction (the client sends forward flows and requests).
    pub fn new(config: &TestConfig, id: u32, side: Side, socket: FlowSocket) -> FlowSpec {
        let direction = config.flow_direction(id);
        let role = match (config.workload, direction, side) {
            (Workload::Rr | Workload::Crr, _, Side::Client) => Role::Request,
            (Workload::Rr | Workload::Crr, _, Side::Server) => Role::Respond,
            (_, Direction::Reverse, Side::Client)
            | (_, Direction::Forward | Direction::Bidir, Side::Server) => Role::Receive,
            _ => Role::Send,
        };
        FlowSpec {
            id,
            direction,
            role,
            socket,
        }
    }
}

/// A flow's connected socket.
#[derive(Debug)]
pub enum FlowSocket {
    Tcp(std::net::TcpStream),
    Udp(std::net::UdpSocket),
    /// crr requester: opens a new connection to this address per transaction.
    Connect(std::net::SocketAddr),
    /// crr responder: the test's listener, which takes connections from `peer` only.
    Listen {
        listener: std::net::TcpListener,
        peer: std::net::IpAddr,
    },
    /// A TCP connection through TLS, after its handshake (`--tls`).
    Tls(Box<linerate_tls::TlsStream<std::net::TcpStream>>),
    /// A TCP connection whose TLS records the kernel seals and opens (`--ktls`).
    Ktls(std::net::TcpStream, linerate_tls::TlsFacts),
    /// A QUIC stream: every flow of the side names the side's QUIC thread, which holds
    /// the connections and streams (`--quic`).
    Quic(std::sync::Arc<dyn QuicFlows>),
}

/// A side's QUIC workers as the data plane sees them (engine's `quic::QuicSide`): they
/// take a data-plane worker's plan and flows and give back their outcomes. A trait here, not the
/// type, so that this module, which every worker loop imports, imports none of them.
pub trait QuicFlows: Send + Sync + std::fmt::Debug {
    /// Runs `flows` (id, direction, role) on the plan; returns when they end.
    fn run_flows(
        &self,
        plan: WorkerPlan,
        flows: Vec<(u32, Direction, Role)>,
        samples: Sender<Sample>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::io::Result<Vec<FlowOutcome>>;

    /// The side's QUIC workers: flow `i` runs on worker `i % workers`, and a data-plane
    /// worker hands each its flows.
    fn workers(&self) -> usize;
}

impl FlowSocket {
    /// The TCP socket beneath a TCP connection, plain or encrypted.
    pub fn tcp(&self) -> Option<&std::net::TcpStream> {
        match self {
            FlowSocket::Tcp(stream) | FlowSocket::Ktls(stream, _) => Some(stream),
            FlowSocket::Tls(tls) => Some(tls.socket()),
            _ => None,
        }
    }
}

/// One flow's counters at one boundary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowCount {
    pub id: u32,
    pub bytes: u64,
    /// TCP_INFO total retransmits so far (senders; 0 for receivers).
    pub retransmits: u64,
    /// UDP flows: datagram counts so far (jitter as of now).
    pub udp: Option<UdpCounts>,
    /// Sending TCP flows: TCP_INFO's view at the sample.
    pub tcp: Option<linerate_model::TcpSnapshot>,
    /// Request/response flows: transactions completed (requester) or answered
    /// (responder) so far.
    pub transactions: u64,
    /// TLS flows: time spent sealing and opening records so far.
    pub crypto: Duration,
}

/// A requesting worker's timing since its previous sample.
#[derive(Debug, Clone, Default)]
pub struct RrSample {
    /// Round trips of the transactions completed since the previous boundary.
    pub latency: LatencyHistogram,
    /// crr: connect times since the previous boundary.
    pub connect: Option<LatencyHistogram>,
    /// Counts so far (not since the previous boundary): transactions given up for lost,
    /// answers after that, connects refused for want of a local port, and open-loop
    /// requests due but not yet sent.
    pub lost: u64,
    pub late: u64,
    pub port_exhausted: u64,
    pub owed: u64,
}

/// One worker's reading at one boundary of the schedule.
#[derive(Debug, Clone)]
pub struct Sample {
    pub worker: usize,
    /// Boundary index in the plane's schedule of interval boundaries.
    pub index: usize,
    /// When the reading was taken, since the test's start.
    pub at: Duration,
    /// The worker thread's CPU time so far, and the user-mode part of it.
    pub cpu: Duration,
    pub cpu_user: Duration,
    pub flows: Vec<FlowCount>,
    /// `/proc/stat` at the window's edges (worker 0 only).
    pub proc_stat: Option<CpuSnapshot>,
    /// UDP tests: the kernel's UDP counters at the window's edges (worker 0 only).
    pub udp_kernel: Option<UdpCounters>,
    /// Request/response tests, requesting workers: their timing.
    pub rr: Option<Box<RrSample>>,
    /// `--observe`: the host's counters at the window's edges (worker 0 only).
    pub host: Option<Box<HostReading>>,
    /// A served iperf 2 `--trip-times` test over TCP, receiving workers: the client's
    /// writes whose last byte was read since the last sample (its interval's).
    pub writes: Option<WritesInterval>,
}

pub use linerate_proto::iperf2::WritesInterval;

/// What a worker of one kind adds to its samples.
#[derive(Debug, Default)]
pub(crate) struct SampleExtra {
    pub rr: Option<Box<RrSample>>,
    pub writes: Option<WritesInterval>,
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
    /// MPTCP connections (`--mptcp`): subflows, or the fallback to TCP.
    pub mptcp: Option<linerate_model::MptcpFacts>,
    pub error: Option<String>,
    /// UDP flows: datagrams over the flow's life (sent, or distinct received).
    pub datagrams_total: u64,
    /// What the user should know about how the flow ran (an offload the kernel refused).
    pub notes: Vec<String>,
    /// Request/response flows: transactions over the flow's life.
    pub transactions_total: u64,
    /// TLS flows: the suite, the handshake's time, whether the kernel held the records.
    pub tls: Option<linerate_tls::TlsFacts>,
    /// A marked test: the datagrams by the TOS byte they arrived with. UDP: on each
    /// receiving flow. QUIC: on a worker's first flow, everything its socket received
    /// (data, acknowledgements, the handshake), which travelled towards this side whatever
    /// the flow's own role.
    pub classes: Option<Vec<linerate_model::marks::ClassCount>>,
    /// Video flows: the frames sent, or put back together from the datagrams received.
    pub frames: Option<linerate_model::video::FrameCounts>,
    /// A UDP receiver that timed every datagram (a call's): the one-way delays.
    pub one_way_delay_us: Option<linerate_model::latency::LatencySummary>,
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
    /// The boundary the measured window starts at (after `--omit`): receivers' delay
    /// distributions start again there, as their counts are taken from there.
    pub window_start: usize,
    pub length: usize,
    pub rate_bps: Option<u64>,
    /// How long receivers keep draining after the end for the sender's last bytes.
    pub drain: Duration,
    /// UDP tests: the tag every datagram of the test carries.
    pub udp_framing: Option<linerate_proto::datagram::Framing>,
    /// UDP senders: what every datagram begins with (`PlaneSetup::udp_template`).
    pub udp_template: Vec<u8>,
    /// UDP: senders use segmentation offload, receivers coalescing, where the kernel
    /// offers them.
    pub gso: bool,
    pub gro: bool,
    /// Request/response tests: what the flows do.
    pub rr: Option<RrPlan>,
    /// The CPU this worker is pinned to.
    pub cpu: Option<usize>,
    /// Worker 0 reads the host's counters at the window's edges (`--observe`).
    pub observe: bool,
    /// The socket buffer size the user set (`-w`), if any.
    pub window: Option<u64>,
    /// UDP receivers count the marks their datagrams arrived with (`--dscp`, `--ecn`).
    pub count_marks: bool,
    /// Calls (`--pattern voip`): UDP receivers judge each datagram against this jitter
    /// buffer (fixed or adaptive).
    pub playout: Option<linerate_model::call::JitterBuffer>,
    /// A call whose codec sends only while its speaker talks: each sending flow's talk
    /// spurts and pauses (linerate_model::call::TalkSpurts).
    pub voice_activity: bool,
    /// Video tests: UDP senders send frames on this plan, receivers count them.
    pub video: Option<linerate_model::video::VideoSettings>,
    /// The frames the server sends where they differ (`TestConfig::video_back`).
    pub video_back: Option<linerate_model::video::VideoSettings>,
    /// The test's connections are MPTCP: read their subflows at each boundary.
    pub mptcp: bool,
    /// Asks for an end ahead of the schedule; shared by the plane's workers.
    pub end: Arc<EndSignal>,
    /// Flows of this role stop after moving this many bytes each.
    pub budget: Option<(Role, u64)>,
    /// The most the peer's schedule may lead this side's (`PlaneSetup::peer_lead`).
    pub peer_lead: Duration,
    /// iperf 2 `--trip-times` over TCP (`PlaneSetup::trip_times`).
    pub trip_times: Option<TripTimes>,
    /// Sending TCP flows write iperf 2's bursts (`PlaneSetup::tcp_bursts`).
    pub tcp_bursts: Option<crate::bursts::TcpBursts>,
    /// UDP senders with iperf 2's framing end with its final datagram, sent once
    /// (`PlaneSetup::udp_final`).
    pub udp_final: bool,
}

/// Where the receiving TCP flows of a served iperf 2 `--trip-times` test put the latency
/// of the client's writes they followed (`linerate_proto::iperf2::BurstTracker`), each
/// at its end.
pub type TripTimes = Arc<std::sync::Mutex<linerate_proto::iperf2::BurstTracker>>;

impl WorkerPlan {
    /// The worker sends or plays out on a clock of its own (an application pattern's
    /// frames, a call's datagrams and its jitter buffer), where a late wake-up is a late
    /// frame.
    pub fn keeps_a_schedule(&self) -> bool {
        self.video.is_some() || self.video_back.is_some() || self.playout.is_some()
    }

    /// The frames the flows of `direction` carry (`TestConfig::video_of`).
    pub fn video_of(&self, direction: Direction) -> Option<linerate_model::video::VideoSettings> {
        match direction {
            Direction::Reverse => self.video_back.or(self.video),
            _ => self.video,
        }
    }

    /// A plan for one worker that is not worker 0 (no `/proc` reads), running from
    /// `start` to `end` with no intervals; for tests of a worker alone.
    #[cfg(test)]
    pub(crate) fn alone(
        start: Instant,
        end: Duration,
        length: usize,
        drain: Duration,
    ) -> WorkerPlan {
        WorkerPlan {
            index: 1,
            start,
            boundaries: vec![Duration::ZERO, end],
            cpu_boundaries: vec![],
            window_start: 0,
            length,
            rate_bps: None,
            drain,
            udp_framing: None,
            udp_template: Vec::new(),
            gso: false,
            gro: false,
            rr: None,
            cpu: None,
            end: EndSignal::new(0),
            budget: None,
            peer_lead: Duration::ZERO,
            observe: false,
            window: None,
            count_marks: false,
            playout: None,
            voice_activity: false,
            video: None,
            video_back: None,
            mptcp: false,
            trip_times: None,
            tcp_bursts: None,
            udp_final: false,
        }
    }

    /// The boundary that ends the test: the schedule's last, or an earlier one asked for.
    /// How much earlier than this side's end a peer's close still counts as its normal
    /// end: the two ends start their schedules one control-path delay apart, and on a
    /// loaded machine a side's start can lag by tens of milliseconds. A twentieth of the
    /// test, at least 50 ms and at most 1 s, plus the most the peer's start may lead this
    /// side's where this side knows it (a server: since it said the flows were ready).
    pub(crate) fn early_close_tolerance(&self, test_end: Duration) -> Duration {
        (test_end / 20).clamp(Duration::from_millis(50), Duration::from_secs(1)) + self.peer_lead
    }

    pub(crate) fn end_index(&self) -> usize {
        let last = self.boundaries.len() - 1;
        self.end.requested().map_or(last, |at| at.min(last))
    }

    /// Whether boundary `index` is due `since` the start: its time has come, or the test
    /// was asked to end there.
    pub(crate) fn is_due(&self, index: usize, since: Duration) -> bool {
        since >= self.boundaries[index] || self.end.requested() == Some(index)
    }

    /// The bytes a flow of `role` may still move, if it has a budget.
    pub(crate) fn budget_for(&self, role: Role) -> Option<u64> {
        self.budget
            .filter(|(r, _)| *r == role)
            .map(|(_, bytes)| bytes)
    }
}

/// Sends the sample of boundary `index`, taken `since` the test's start. Worker 0 adds
/// the host's counters at the window's edges: the schedule's, and an end asked for
/// earlier (a peer that ended the test).
pub(crate) fn send_sample(
    plan: &WorkerPlan,
    samples: &Sender<Sample>,
    index: usize,
    since: Duration,
    flows: Vec<FlowCount>,
    extra: SampleExtra,
) {
    let at_edge =
        plan.index == 0 && (plan.cpu_boundaries.contains(&index) || index == plan.end_index());
    let proc_stat = at_edge.then(|| CpuSnapshot::read().ok()).flatten();
    let udp_kernel = (at_edge && plan.udp_framing.is_some())
        .then(|| read_udp_counters().ok())
        .flatten();
    let host = (at_edge && plan.observe).then(|| Box::new(HostReading::read(&Root::live())));
    let (user, system) = thread_cpu_times();
    // The coordinator may have gone (an aborted test); the flows still end cleanly.
    let _ = samples.send(Sample {
        worker: plan.index,
        index,
        at: since,
        cpu: user + system,
        cpu_user: user,
        flows,
        proc_stat,
        udp_kernel,
        rr: extra.rr,
        host,
        writes: extra.writes,
    });
}

impl FlowOutcome {
    /// A flow's outcome before it has moved anything.
    pub(crate) fn new(
        id: u32,
        direction: Direction,
        role: Role,
        addrs: (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>),
    ) -> FlowOutcome {
        let text = |a: Option<std::net::SocketAddr>| a.map_or(String::new(), |a| a.to_string());
        FlowOutcome {
            id,
            direction,
            role,
            local_addr: text(addrs.0),
            remote_addr: text(addrs.1),
            bytes_total: 0,
            sndbuf: 0,
            rcvbuf: 0,
            congestion: String::new(),
            info: sys::TcpInfo::default(),
            mptcp: None,
            error: None,
            datagrams_total: 0,
            notes: Vec::new(),
            transactions_total: 0,
            tls: None,
            classes: None,
            frames: None,
            one_way_delay_us: None,
        }
    }
}

/// The facts of a socket known when its flow starts: its addresses (where it has them)
/// and the buffers the kernel granted.
pub(crate) fn outcome_of<S: std::os::fd::AsFd>(
    socket: &S,
    id: u32,
    direction: Direction,
    role: Role,
) -> FlowOutcome {
    let sock = socket2::SockRef::from(socket);
    let addrs = (
        sock.local_addr().ok().and_then(|a| a.as_socket()),
        sock.peer_addr().ok().and_then(|a| a.as_socket()),
    );
    let (sndbuf, rcvbuf) = sys::granted_buffers(socket);
    FlowOutcome {
        sndbuf,
        rcvbuf,
        ..FlowOutcome::new(id, direction, role, addrs)
    }
}

/// Ends a test before its schedule does: an iperf3 client decides when its test ends, and
/// a byte-count test ends when its flows have moved their bytes. Workers check it every
/// loop turn; the first request wins.
#[derive(Debug)]
pub struct EndSignal {
    /// The boundary index that now ends the test; `usize::MAX` until one is asked for.
    at: AtomicUsize,
    /// Flows with a byte budget that have not yet moved it.
    budgeted: AtomicUsize,
}

impl EndSignal {
    pub fn new(budgeted: usize) -> Arc<EndSignal> {
        Arc::new(EndSignal {
            at: AtomicUsize::new(usize::MAX),
            budgeted: AtomicUsize::new(budgeted),
        })
    }

    /// Ends the test at boundary `index`: each worker takes that boundary's sample at
    /// once (or has already taken it) and ends there.
    pub fn request(&self, index: usize) {
        self.at.fetch_min(index, Ordering::SeqCst);
    }

    pub fn requested(&self) -> Option<usize> {
        let at = self.at.load(Ordering::SeqCst);
        (at != usize::MAX).then_some(at)
    }

    /// A flow has moved its budget; true for the last one, whose worker ends the test.
    pub fn budget_spent(&self) -> bool {
        self.budgeted.fetch_sub(1, Ordering::SeqCst) == 1
    }
}

/// What a request/response worker needs beyond the common plan.
#[derive(Debug, Clone)]
pub struct RrPlan {
    pub workload: Workload,
    pub request: usize,
    pub response: usize,
    pub outstanding: usize,
    pub rate_tps: Option<f64>,
    pub busy_poll_us: Option<u32>,
    /// Responders: the test-only fault hook.
    pub fault: Option<FaultHook>,
    /// crr: the options each new connection gets.
    pub config: TestConfig,
}

impl RrPlan {
    /// The plan for a test's configuration; `None` for stream tests.
    pub fn from_config(config: &TestConfig) -> Option<RrPlan> {
        let rr = config.rr.as_ref()?;
        if config.workload == Workload::Stream {
            return None;
        }
        Some(RrPlan {
            workload: config.workload,
            request: rr.request.max(1) as usize,
            response: rr.response.max(1) as usize,
            outstanding: rr.outstanding.max(1) as usize,
            rate_tps: rr.rate_tps,
            busy_poll_us: rr.busy_poll_us,
            fault: FaultHook::from_env(),
            config: config.clone(),
        })
    }
}

/// A test-only fault in a responder, set on the server's process as
/// `LINERATE_FAULT_HOOK`. It is how the tests prove what the report says of a stalled,
/// closed, wrong or silent peer:
/// - `stall:EVERY:MS`: every flow pauses MS milliseconds before answering its EVERY-th
///   request, and every EVERY-th after;
/// - `close:N`, `wrong-size:N`, `silent:N`: flow 0, after answering N requests, closes
///   its connection, answers with one byte too many, or stops answering.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FaultHook {
    Stall { every: u64, pause: Duration },
    Close { after: u64 },
    WrongSize { after: u64 },
    Silent { after: u64 },
}

impl FaultHook {
    pub const ENV: &'static str = "LINERATE_FAULT_HOOK";

    /// The hook set in the environment: only in builds with the `fault-injection`
    /// feature, which the test builds turn on and release builds never carry.
    #[cfg(feature = "fault-injection")]
    pub fn from_env() -> Option<FaultHook> {
        FaultHook::parse(&std::env::var(FaultHook::ENV).ok()?)
    }

    /// Without the `fault-injection` feature no hook is ever set.
    #[cfg(not(feature = "fault-injection"))]
    pub fn from_env() -> Option<FaultHook> {
        None
    }

    pub fn parse(text: &str) -> Option<FaultHook> {
        let mut parts = text.trim().split(':');
        let kind = parts.next()?;
        let count: u64 = parts.next()?.trim().parse().ok()?;
        let hook = match kind {
            "stall" => {
                let ms: f64 = parts.next()?.trim().parse().ok()?;
                if count == 0 || !ms.is_finite() || ms <= 0.0 {
                    return None;
                }
                FaultHook::Stall {
                    every: count,
                    pause: Duration::from_secs_f64(ms / 1e3),
                }
            }
            "close" => FaultHook::Close { after: count },
            "wrong-size" => FaultHook::WrongSize { after: count },
            "silent" => FaultHook::Silent { after: count },
            _ => return None,
        };
        parts.next().is_none().then_some(hook)
    }
}
