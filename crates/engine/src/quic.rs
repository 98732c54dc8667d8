//! QUIC streams (`--quic`): quinn over one UDP socket per side, one connection carrying a
//! stream per flow or one connection per flow (`--connections`).
//!
//! quinn is asynchronous, and a QUIC connection is driven by one task, so a side runs
//! its flows on QUIC workers: each a thread of its own with a single-threaded tokio
//! runtime, its own UDP socket, endpoint and connection (or one per flow), sharing
//! nothing with the others, so flows spread over cores as TCP's do. Flow `i` runs on
//! worker `i % workers`; the server has a port per worker, and the client's worker `k`
//! connects to the server's `k`. A worker sets its connections and streams up (and says
//! when they are ready), keeps them alive while the control connection starts the test,
//! then runs the measurement when the data plane's worker for its flows hands it the
//! plan. Everything QUIC does for those flows (packet protection, acknowledgements,
//! congestion control, the UDP system calls) happens on that thread, so its CPU time is
//! theirs; samples are taken there, on the same schedule as every other worker's.
//!
//! The crypto's share: quinn's packet keys are wrapped so sealing and opening packets is
//! timed in each worker thread's CPU time, sampled as the TLS stream samples its records.

use crate::flow::{
    send_sample, FlowCount, FlowOutcome, FlowSocket, FlowSpec, Sample, SampleExtra, WorkerPlan,
    PATTERN_PERIOD,
};
use bytes::Bytes;
use linerate_model::marks::ClassTally;
use linerate_model::{Direction, Role};
use linerate_proto::preface::{classify, data_preface, Preface, DATA_PREFACE_LEN};
use linerate_proto::Token;
use linerate_tls::{Cipher, TlsFacts};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The congestion controllers quinn offers, by the names `-C` takes.
pub const CONGESTION: [&str; 3] = ["cubic", "bbr", "newreno"];

/// What shapes a side's QUIC transport.
#[derive(Debug, Clone)]
pub struct QuicPlan {
    pub token: Token,
    /// Flows (streams) of the test.
    pub flows: u32,
    pub connection_per_flow: bool,
    /// "cubic" (quinn's default), "bbr" or "newreno".
    pub congestion: String,
    /// The socket buffer size asked for (`-w`); otherwise [`SOCKET_BUFFER`].
    pub window: Option<u64>,
    pub cipher: Cipher,
    /// How long the connections and streams may take to be set up.
    pub timeout: Duration,
    /// This side's QUIC workers, and which of them a plan is for: the worker runs flows
    /// `worker`, `worker + workers`, ...
    workers: u32,
    worker: u32,
    /// Where the client's sockets leave from (`--bind`, `--bind-dev`).
    pub source: Option<linerate_model::Source>,
    /// `--dscp`/`--ecn`: the endpoints send through [`crate::quic_socket::MarkedSocket`],
    /// which marks every datagram and counts what arrives.
    pub marks: Option<linerate_model::marks::Marks>,
}

impl QuicPlan {
    /// The plan `config` asks for, for the test with `token`, set up within `timeout`.
    pub fn of(config: &linerate_model::TestConfig, token: Token, timeout: Duration) -> QuicPlan {
        QuicPlan {
            token,
            flows: config.connections(),
            connection_per_flow: config.quic.as_ref().is_some_and(|q| q.connection_per_flow),
            congestion: config.congestion.clone().unwrap_or_else(|| "cubic".into()),
            window: config.window,
            cipher: config
                .tls
                .as_ref()
                .and_then(|t| t.cipher.parse().ok())
                .unwrap_or_default(),
            timeout,
            workers: 1,
            worker: 0,
            source: config.source.clone(),
            marks: config.marks,
        }
    }

    /// The plan of worker `worker` of `workers`.
    fn for_worker(&self, worker: usize, workers: usize) -> QuicPlan {
        QuicPlan {
            worker: worker as u32,
            workers: workers.max(1) as u32,
            ..self.clone()
        }
    }

    /// The flows this plan's worker runs, in order.
    fn worker_flows(&self) -> Vec<u32> {
        (0..self.flows)
            .filter(|id| id % self.workers == self.worker)
            .collect()
    }
}

/// UDP socket buffers when `-w` is not given: a burst of datagrams at 10 Gbit/s for a few
/// milliseconds (the kernel caps it at rmem_max/wmem_max).
const SOCKET_BUFFER: usize = 8 << 20;
/// Flow-control windows: enough for a long fat path without holding the sender back.
const STREAM_WINDOW: u32 = 32 << 20;
const CONNECTION_WINDOW: u32 = 128 << 20;

/// One side of a QUIC test: its QUIC workers.
pub struct QuicSide {
    workers: Vec<QuicWorker>,
}

/// A worker's set-up: its flows' streams all open, or why not.
type SetUpAnswer = Result<(), String>;

/// One QUIC worker: its driving thread, its flows, and the way to start its measurement.
struct QuicWorker {
    flows: Vec<u32>,
    /// Taken on drop: the driver sees its channel close and ends.
    go: Option<tokio::sync::mpsc::UnboundedSender<Go>>,
    /// Where the set-up's answer comes, and the answer once it came.
    ready: Mutex<(Receiver<SetUpAnswer>, Option<SetUpAnswer>)>,
    outcomes: Mutex<Receiver<io::Result<Vec<FlowOutcome>>>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for QuicSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QuicSide({} workers)", self.workers.len())
    }
}

impl Drop for QuicSide {
    fn drop(&mut self) {
        // A driver ends when its channel closes (a test that never started); every
        // channel closes before the first join, so the workers end together.
        for worker in &mut self.workers {
            worker.go = None;
        }
        for worker in &mut self.workers {
            if let Some(thread) = worker.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// The measurement's start, from the data plane's worker.
struct Go {
    plan: WorkerPlan,
    flows: Vec<(u32, Direction, Role)>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
}

/// One flow's stream.
struct FlowStream {
    id: u32,
    connection: usize,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
}

/// What setting up gave: the endpoint, its connections with their handshake times, and
/// every flow's stream.
struct Setup {
    endpoint: quinn::Endpoint,
    connections: Vec<(quinn::Connection, Duration)>,
    streams: Vec<FlowStream>,
    crypto: Arc<AtomicU64>,
    cipher: Cipher,
    congestion: String,
    /// A marked test's count of the datagrams the endpoint received, by TOS byte.
    arrived: Option<Arc<Mutex<ClassTally>>>,
}

fn transport(plan: &QuicPlan) -> Result<Arc<quinn::TransportConfig>, String> {
    use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
    let mut transport = quinn::TransportConfig::default();
    let streams = if plan.connection_per_flow {
        1
    } else {
        plan.flows
    };
    transport
        .max_concurrent_bidi_streams(quinn::VarInt::from_u32(streams.max(1)))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(0))
        .stream_receive_window(quinn::VarInt::from_u32(STREAM_WINDOW))
        .receive_window(quinn::VarInt::from_u32(CONNECTION_WINDOW))
        .send_window(u64::from(CONNECTION_WINDOW))
        .keep_alive_interval(Some(Duration::from_secs(5)))
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(Duration::from_secs(60)).expect("60 s is a valid timeout"),
        ));
    match plan.congestion.as_str() {
        "cubic" => transport.congestion_controller_factory(Arc::new(CubicConfig::default())),
        "bbr" => transport.congestion_controller_factory(Arc::new(BbrConfig::default())),
        "newreno" | "reno" => {
            transport.congestion_controller_factory(Arc::new(NewRenoConfig::default()))
        }
        other => {
            return Err(format!(
                "QUIC has no congestion control '{other}' (one of: {})",
                CONGESTION.join(", ")
            ))
        }
    };
    Ok(Arc::new(transport))
}

fn socket_buffers(socket: &UdpSocket, plan: &QuicPlan) {
    let size = plan.window.map_or(SOCKET_BUFFER, |w| w as usize);
    let socket = socket2::SockRef::from(socket);
    // Best effort: the kernel caps both at its maxima.
    let _ = socket.set_recv_buffer_size(size);
    let _ = socket.set_send_buffer_size(size);
}

fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

impl QuicSide {
    /// The server's side: a QUIC worker per socket in `sockets` (the ports offered, in
    /// order), each taking its flows' connections from `peer` only, with `tls`; each
    /// stream must open with the test's data preface. Ready when every flow's stream has
    /// arrived (see [`QuicSide::poll_ready`]).
    pub fn serve(
        sockets: Vec<UdpSocket>,
        tls: Arc<rustls::ServerConfig>,
        peer: IpAddr,
        plan: QuicPlan,
    ) -> io::Result<QuicSide> {
        let transport = transport(&plan).map_err(io::Error::other)?;
        let quic_tls: Arc<dyn quinn::crypto::ServerConfig> =
            Arc::new(QuicServerConfig::try_from(tls).map_err(io::Error::other)?);
        let late = format!(
            "the client's QUIC connections and streams did not all arrive within {:.0} s",
            plan.timeout.as_secs_f64()
        );
        let count = sockets.len();
        let mut workers = Vec::with_capacity(count);
        for (index, socket) in sockets.into_iter().enumerate() {
            socket_buffers(&socket, &plan);
            let crypto = Arc::new(AtomicU64::new(0));
            let timed: Arc<dyn quinn::crypto::ServerConfig> = Arc::new(timing::Server {
                inner: quic_tls.clone(),
                spent: crypto.clone(),
            });
            let mut server = quinn::ServerConfig::with_crypto(timed);
            server.transport_config(transport.clone());
            let plan = plan.for_worker(index, count);
            let late = late.clone();
            let flows = plan.worker_flows();
            let setup = move || {
                let endpoint = Endpoints {
                    socket,
                    server: Some(server),
                    client: None,
                };
                set_up(
                    endpoint,
                    plan,
                    crypto,
                    late,
                    move |endpoint, plan| async move { accept_all(&endpoint, peer, &plan).await },
                )
            };
            workers.push(QuicWorker::start(flows, setup)?);
        }
        Ok(QuicSide { workers })
    }

    /// The client's side: a QUIC worker per address in `servers` (the server's ports, in
    /// order), each connecting with `tls` and opening a stream per flow of its own, each
    /// starting with the test's data preface. Returns once they are all open.
    pub fn connect(
        servers: &[SocketAddr],
        tls: Arc<rustls::ClientConfig>,
        name: String,
        plan: QuicPlan,
    ) -> Result<QuicSide, String> {
        let within = plan.timeout + Duration::from_secs(5);
        let transport = transport(&plan)?;
        let quic_tls: Arc<dyn quinn::crypto::ClientConfig> =
            Arc::new(QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?);
        let mut workers = Vec::with_capacity(servers.len());
        for (index, &server) in servers.iter().enumerate() {
            let socket = crate::sys::udp_socket_from(plan.source.as_ref(), server)
                .map_err(|e| e.to_string())?;
            socket_buffers(&socket, &plan);
            let crypto = Arc::new(AtomicU64::new(0));
            let timed: Arc<dyn quinn::crypto::ClientConfig> = Arc::new(timing::Client {
                inner: quic_tls.clone(),
                spent: crypto.clone(),
            });
            let mut client = quinn::ClientConfig::new(timed);
            client.transport_config(transport.clone());
            let late = format!(
                "no QUIC answer from {server} within {:.0} s",
                plan.timeout.as_secs_f64()
            );
            let plan = plan.for_worker(index, servers.len());
            let flows = plan.worker_flows();
            let name = name.clone();
            let setup = move || {
                let endpoint = Endpoints {
                    socket,
                    server: None,
                    client: Some(client),
                };
                set_up(
                    endpoint,
                    plan,
                    crypto,
                    late,
                    move |endpoint, plan| async move {
                        connect_all(&endpoint, server, &name, &plan).await
                    },
                )
            };
            workers.push(QuicWorker::start(flows, setup).map_err(|e| e.to_string())?);
        }
        let side = QuicSide { workers };
        let deadline = Instant::now() + within;
        for worker in &side.workers {
            worker.wait_ready(deadline)?;
        }
        Ok(side)
    }

    /// `Some(Ok)` once every flow's stream is open, `Some(Err)` with why one could not
    /// be, `None` while they are being set up.
    pub fn poll_ready(&self) -> Option<Result<(), String>> {
        let mut all = true;
        for worker in &self.workers {
            match worker.poll_ready() {
                Some(Err(why)) => return Some(Err(why)),
                Some(Ok(())) => {}
                None => all = false,
            }
        }
        all.then_some(Ok(()))
    }

    /// This side's QUIC workers.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }
}

impl QuicWorker {
    fn start<F, Fut>(flows: Vec<u32>, setup: F) -> io::Result<QuicWorker>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Setup, String>>,
    {
        let (go_tx, mut go_rx) = tokio::sync::mpsc::unbounded_channel::<Go>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (outcomes_tx, outcomes_rx) = std::sync::mpsc::channel();
        let runtime = runtime()?;
        let thread = std::thread::Builder::new()
            .name("linerate-quic".into())
            .spawn(move || {
                runtime.block_on(async move {
                    // A side dropped during its set-up (a test aborted) ends it at once.
                    let outcome = tokio::select! {
                        outcome = setup() => outcome,
                        _ = go_rx.recv() => return,
                    };
                    let setup = match outcome {
                        Ok(setup) => {
                            let _ = ready_tx.send(Ok(()));
                            setup
                        }
                        Err(why) => {
                            let _ = ready_tx.send(Err(why));
                            return;
                        }
                    };
                    // Keeps the connections alive until the test starts or is dropped.
                    let Some(go) = go_rx.recv().await else {
                        setup.endpoint.close(0u32.into(), b"test ended");
                        return;
                    };
                    let endpoint = setup.endpoint.clone();
                    let result = measure(go, setup).await;
                    let _ = outcomes_tx.send(result);
                    endpoint.close(0u32.into(), b"done");
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
                });
            })?;
        Ok(QuicWorker {
            flows,
            go: Some(go_tx),
            ready: Mutex::new((ready_rx, None)),
            outcomes: Mutex::new(outcomes_rx),
            thread: Some(thread),
        })
    }

    fn poll_ready(&self) -> Option<Result<(), String>> {
        let mut ready = self.ready.lock().ok()?;
        if ready.1.is_none() {
            ready.1 = match ready.0.try_recv() {
                Ok(result) => Some(result),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    Some(Err("a QUIC worker's thread ended".into()))
                }
            };
        }
        ready.1.clone()
    }

    fn wait_ready(&self, deadline: Instant) -> Result<(), String> {
        let mut ready = self
            .ready
            .lock()
            .map_err(|_| "QUIC state poisoned".to_string())?;
        if ready.1.is_none() {
            let within = deadline.saturating_duration_since(Instant::now());
            let answer = ready
                .0
                .recv_timeout(within)
                .map_err(|_| "the QUIC set-up did not finish".to_string())?;
            ready.1 = Some(answer);
        }
        ready.1.clone().unwrap_or(Ok(()))
    }

    /// Hands the plan to the worker's thread and waits for its flows' outcomes.
    fn run(
        &self,
        plan: WorkerPlan,
        flows: Vec<(u32, Direction, Role)>,
        samples: Sender<Sample>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Vec<FlowOutcome>> {
        self.go
            .as_ref()
            .ok_or_else(|| io::Error::other("the QUIC side was closed"))?
            .send(Go {
                plan,
                flows,
                samples,
                stop,
            })
            .map_err(|_| io::Error::other("the QUIC thread ended before the test started"))?;
        let outcomes = self
            .outcomes
            .lock()
            .map_err(|_| io::Error::other("QUIC state poisoned"))?;
        outcomes
            .recv()
            .map_err(|_| io::Error::other("the QUIC thread ended during the test"))?
    }
}

/// A side's connections, with their handshake times, and every flow's stream.
type Opened = (Vec<(quinn::Connection, Duration)>, Vec<FlowStream>);

/// What a side's endpoint is made of: its socket and the configuration of its role.
struct Endpoints {
    socket: UdpSocket,
    server: Option<quinn::ServerConfig>,
    client: Option<quinn::ClientConfig>,
}

/// Opens the side's endpoint and its connections and streams (`open`: the server's
/// accepts or the client's connects), giving up with `late` after the plan's timeout.
async fn set_up<Fut>(
    parts: Endpoints,
    plan: QuicPlan,
    crypto: Arc<AtomicU64>,
    late: String,
    open: impl FnOnce(quinn::Endpoint, QuicPlan) -> Fut,
) -> Result<Setup, String>
where
    Fut: std::future::Future<Output = Result<Opened, String>>,
{
    let cannot = |e: io::Error| format!("cannot open the QUIC endpoint: {e}");
    let (mut endpoint, arrived) = match plan.marks {
        Some(marks) => {
            let arrived = Arc::new(Mutex::new(ClassTally::default()));
            let socket =
                crate::quic_socket::MarkedSocket::new(parts.socket, marks.dscp, arrived.clone())
                    .map_err(cannot)?;
            let endpoint = quinn::Endpoint::new_with_abstract_socket(
                quinn::EndpointConfig::default(),
                parts.server,
                Arc::new(socket),
                Arc::new(quinn::TokioRuntime),
            )
            .map_err(cannot)?;
            (endpoint, Some(arrived))
        }
        None => {
            let endpoint = quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                parts.server,
                parts.socket,
                Arc::new(quinn::TokioRuntime),
            )
            .map_err(cannot)?;
            (endpoint, None)
        }
    };
    if let Some(client) = parts.client {
        endpoint.set_default_client_config(client);
    }
    let (connections, streams) =
        tokio::time::timeout(plan.timeout, open(endpoint.clone(), plan.clone()))
            .await
            .unwrap_or(Err(late))?;
    Ok(Setup {
        endpoint,
        connections,
        streams,
        crypto,
        cipher: plan.cipher,
        congestion: plan.congestion,
        arrived,
    })
}

/// A worker's client connections (one, or one per flow) and a stream per flow.
async fn connect_all(
    endpoint: &quinn::Endpoint,
    server: SocketAddr,
    name: &str,
    plan: &QuicPlan,
) -> Result<Opened, String> {
    let flows = plan.worker_flows();
    let count = if plan.connection_per_flow {
        flows.len()
    } else {
        1
    };
    let mut connections = Vec::new();
    for _ in 0..count {
        let began = Instant::now();
        let connecting = endpoint
            .connect(server, name)
            .map_err(|e| format!("cannot connect over QUIC: {e}"))?;
        let connection = connecting.await.map_err(|e| describe_connection(&e))?;
        connections.push((connection, began.elapsed()));
    }
    let mut streams = Vec::new();
    for (index, &id) in flows.iter().enumerate() {
        let connection = if plan.connection_per_flow { index } else { 0 };
        let (mut send, recv) = connections[connection]
            .0
            .open_bi()
            .await
            .map_err(|e| describe_connection(&e))?;
        send.write_all(&data_preface(plan.token, id))
            .await
            .map_err(|e| format!("QUIC stream {id}: {e}"))?;
        streams.push(FlowStream {
            id,
            connection,
            send,
            recv,
        });
    }
    Ok((connections, streams))
}

/// A worker's server connections, from the control connection's host only, and their
/// streams, each proven by the test's data preface and for one of the worker's flows.
async fn accept_all(
    endpoint: &quinn::Endpoint,
    peer: IpAddr,
    plan: &QuicPlan,
) -> Result<Opened, String> {
    let flows = plan.worker_flows();
    let count = if plan.connection_per_flow {
        flows.len()
    } else {
        1
    };
    let mut connections = Vec::new();
    while connections.len() < count {
        let Some(incoming) = endpoint.accept().await else {
            return Err("the QUIC endpoint closed".into());
        };
        if incoming.remote_address().ip().to_canonical() != peer.to_canonical() {
            // Another host: it learnt the port, not the test. It gets nothing, not even a
            // refusal: a server sends only to the host that holds the control connection.
            incoming.ignore();
            continue;
        }
        let began = Instant::now();
        let connection = incoming.await.map_err(|e| describe_connection(&e))?;
        connections.push((connection, began.elapsed()));
    }
    let mut slots: Vec<Option<FlowStream>> = flows.iter().map(|_| None).collect();
    for (index, (connection, _)) in connections.iter().enumerate() {
        let streams = if plan.connection_per_flow {
            1
        } else {
            flows.len()
        };
        for _ in 0..streams {
            let (send, mut recv) = connection
                .accept_bi()
                .await
                .map_err(|e| describe_connection(&e))?;
            let mut preface = [0u8; DATA_PREFACE_LEN];
            recv.read_exact(&mut preface)
                .await
                .map_err(|e| format!("a QUIC stream closed in its preface: {e}"))?;
            let id = match classify(&preface) {
                Preface::Data { token, flow } if token == plan.token && flow < plan.flows => flow,
                _ => return Err("a QUIC stream did not present this test's token".into()),
            };
            let Some(position) = flows.iter().position(|f| *f == id) else {
                return Err(format!(
                    "QUIC stream for flow {id} arrived at worker {} of {}, which runs other flows",
                    plan.worker + 1,
                    plan.workers
                ));
            };
            let slot = &mut slots[position];
            if slot.is_some() {
                return Err(format!("two QUIC streams claimed flow {id}"));
            }
            *slot = Some(FlowStream {
                id,
                connection: index,
                send,
                recv,
            });
        }
    }
    Ok((connections, slots.into_iter().flatten().collect()))
}

fn describe_connection(error: &quinn::ConnectionError) -> String {
    match error {
        quinn::ConnectionError::TransportError(e) if e.code.to_string().contains("crypto") => {
            format!("the QUIC handshake failed: {e}")
        }
        quinn::ConnectionError::TimedOut => {
            "no QUIC answer (is the port reachable over UDP?)".into()
        }
        other => format!("QUIC connection failed: {other}"),
    }
}

/// Runs the measurement on this side's flows: senders write the pattern, receivers read
/// and check it, and a sample is taken at every boundary of the plan.
// Long: the QUIC data plane's loop keeps its state in one frame; a split would cost calls
// per packet.
async fn measure(go: Go, setup: Setup) -> io::Result<Vec<FlowOutcome>> {
    let Go {
        plan,
        flows,
        samples,
        stop,
    } = go;
    let Setup {
        connections,
        streams,
        crypto,
        cipher,
        congestion,
        arrived,
        ..
    } = setup;
    let pattern = Bytes::from(crate::flow::pattern(plan.length));
    let ended = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut counters = Vec::new();
    for stream in streams {
        let Some(&(_, direction, role)) = flows.iter().find(|(id, _, _)| *id == stream.id) else {
            continue;
        };
        let bytes = Arc::new(AtomicU64::new(0));
        counters.push((stream.id, stream.connection, role, bytes.clone()));
        let task = match role {
            Role::Send => tokio::spawn(send_flow(
                stream.send,
                pattern.clone(),
                plan.length,
                // `-b`: the same token bucket as a TCP flow's, credit for a few
                // milliseconds or one write.
                plan.rate_bps.map(|rate| {
                    crate::pacer::Pacer::new(
                        plan.start,
                        rate,
                        (rate / 8 / 200).max(plan.length as u64),
                    )
                }),
                bytes,
                ended.clone(),
            )),
            _ => tokio::spawn(receive_flow(stream.recv, pattern.clone(), bytes)),
        };
        tasks.push((stream.id, direction, role, stream.connection, task));
    }
    // The boundaries, sampled on time.
    let end_index = plan.boundaries.len() - 1;
    let start = tokio::time::Instant::from_std(plan.start);
    let mut first_sender = std::collections::HashMap::new();
    for (id, connection, role, _) in &counters {
        if *role == Role::Send {
            first_sender.entry(*connection).or_insert(*id);
        }
    }
    let first_id = counters.iter().map(|c| c.0).min();
    for index in 0..=end_index {
        let due = start + plan.boundaries[index];
        while tokio::time::Instant::now() < due {
            if stop.load(Ordering::Relaxed) {
                return Ok(Vec::new());
            }
            let wake = due.min(tokio::time::Instant::now() + Duration::from_millis(50));
            tokio::time::sleep_until(wake).await;
        }
        let since = plan.start.elapsed();
        let flows: Vec<FlowCount> = counters
            .iter()
            .map(|(id, connection, _, bytes)| FlowCount {
                id: *id,
                bytes: bytes.load(Ordering::Relaxed),
                // Lost packets are the connection's: counted once, on its first sender.
                retransmits: if first_sender.get(connection) == Some(id) {
                    connections[*connection].0.stats().path.lost_packets
                } else {
                    0
                },
                udp: None,
                tcp: None,
                transactions: 0,
                crypto: if Some(*id) == first_id {
                    Duration::from_nanos(crypto.load(Ordering::Relaxed))
                } else {
                    Duration::ZERO
                },
            })
            .collect();
        send_sample(&plan, &samples, index, since, flows, SampleExtra::default());
        if index == end_index {
            ended.store(true, Ordering::Relaxed);
        }
    }
    // Senders finish their streams; receivers read on to each stream's end.
    let drain_until = tokio::time::Instant::now() + plan.drain;
    let mut outcomes = Vec::new();
    let mut described = std::collections::HashSet::new();
    for (id, direction, role, connection, task) in tasks {
        let (local, remote) = (
            connections[connection]
                .0
                .local_ip()
                .map(|ip| SocketAddr::new(ip, 0)),
            Some(connections[connection].0.remote_address()),
        );
        let mut outcome = FlowOutcome::new(id, direction, role, (local, remote));
        // The drain goes on past its deadline while the connection still moves packets
        // (QUIC's loss recovery on a busy host can take seconds to deliver the last
        // window), up to four drains in all: every byte a sender counted is then
        // delivered unless the path really stopped.
        let link = &connections[connection].0;
        let moved = || {
            let stats = link.stats();
            stats.udp_rx.bytes + stats.udp_tx.bytes
        };
        let last_call = drain_until + plan.drain * 3;
        let (mut deadline, mut last_moved, mut task) = (drain_until, moved(), task);
        let ended_in_time = loop {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(result) => break Some(result),
                Err(_) if deadline < last_call => {
                    let now_moved = moved();
                    if now_moved == last_moved {
                        break None;
                    }
                    last_moved = now_moved;
                    deadline =
                        (tokio::time::Instant::now() + Duration::from_secs(1)).min(last_call);
                }
                Err(_) => break None,
            }
        };
        match ended_in_time {
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(why))) => outcome.error = Some(why),
            Some(Err(_)) => outcome.error = Some("the flow's task failed".into()),
            None if role == Role::Send => {}
            None => {
                outcome.notes.push(format!(
                    "flow {id}: the sender's last bytes did not all arrive within the drain \
                     ({:.0} s, and as long again while packets still moved, up to {:.0} s)",
                    plan.drain.as_secs_f64(),
                    plan.drain.as_secs_f64() * 4.0
                ));
            }
        }
        // Read once the flow has ended: a receiver's drain counts in its total.
        outcome.bytes_total = counters
            .iter()
            .find(|c| c.0 == id)
            .map_or(0, |c| c.3.load(Ordering::Relaxed));
        outcome.congestion = congestion.clone();
        let rtt = connections[connection].0.rtt();
        outcome.info.rtt_us = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        // The UDP payload QUIC's packets use on the path (what `mss` is for TCP).
        let mtu = u32::from(connections[connection].0.stats().path.current_mtu);
        outcome.info.pmtu = mtu;
        outcome.info.snd_mss = mtu;
        // A connection's facts once, on its first flow: the report counts connections and
        // averages handshakes over them, not over the streams they carry.
        if described.insert(connection) {
            outcome.tls = Some(TlsFacts {
                cipher,
                handshake: connections[connection].1,
                ktls: false,
            });
        }
        outcomes.push(outcome);
    }
    // What arrived at the socket, once, on the worker's first flow: every datagram this
    // side received travelled towards it (see `FlowOutcome::classes`).
    if let (Some(arrived), Some(first)) = (arrived, outcomes.first_mut()) {
        let counts = arrived
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .counts();
        first.classes = Some(counts);
    }
    Ok(outcomes)
}

async fn send_flow(
    mut send: quinn::SendStream,
    pattern: Bytes,
    length: usize,
    mut pacer: Option<crate::pacer::Pacer>,
    bytes: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
) -> Result<(), String> {
    let mut sent: u64 = 0;
    while !ended.load(Ordering::Relaxed) {
        if let Some(wait) = pacer.as_mut().and_then(|p| p.delay(Instant::now())) {
            // Short waits, so the end is noticed within a few milliseconds.
            tokio::time::sleep(wait.min(Duration::from_millis(5))).await;
            continue;
        }
        if let Some(pacer) = pacer.as_mut() {
            pacer.charge(length);
        }
        let phase = (sent % PATTERN_PERIOD as u64) as usize;
        send.write_chunk(pattern.slice(phase..phase + length))
            .await
            .map_err(|e| format!("send failed: {e}"))?;
        sent += length as u64;
        bytes.store(sent, Ordering::Relaxed);
    }
    send.finish()
        .map_err(|e| format!("cannot finish the stream: {e}"))?;
    // The stream's data must be acknowledged before the connection closes.
    let _ = send.stopped().await;
    Ok(())
}

async fn receive_flow(
    mut recv: quinn::RecvStream,
    pattern: Bytes,
    bytes: Arc<AtomicU64>,
) -> Result<(), String> {
    let mut received: u64 = 0;
    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                let data = chunk.bytes;
                if let Some(at) = crate::flow::mismatch(&data, received, &pattern) {
                    return Err(crate::flow::mismatch_error(at));
                }
                received += data.len() as u64;
                bytes.store(received, Ordering::Relaxed);
            }
            Ok(None) => return Ok(()),
            Err(quinn::ReadError::ConnectionLost(quinn::ConnectionError::LocallyClosed)) => {
                return Ok(())
            }
            Err(e) => return Err(format!("receive failed: {e}")),
        }
    }
}

/// Runs a data-plane worker's QUIC flows: hands the plan to the QUIC worker that holds
/// them and waits for its outcomes.
pub(crate) fn run(
    plan: WorkerPlan,
    specs: Vec<FlowSpec>,
    samples: Sender<Sample>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<FlowOutcome>> {
    let Some(FlowSocket::Quic(side)) = specs.first().map(|s| &s.socket) else {
        return Err(io::Error::other("a QUIC worker without QUIC flows"));
    };
    let flows = specs.iter().map(|s| (s.id, s.direction, s.role)).collect();
    side.run_flows(plan, flows, samples, stop)
}

impl crate::flow::QuicFlows for QuicSide {
    fn run_flows(
        &self,
        plan: WorkerPlan,
        flows: Vec<(u32, Direction, Role)>,
        samples: Sender<Sample>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Vec<FlowOutcome>> {
        let first = flows.first().map_or(0, |f| f.0);
        let worker = self
            .workers
            .iter()
            .find(|w| w.flows.contains(&first))
            .ok_or_else(|| io::Error::other(format!("no QUIC worker runs flow {first}")))?;
        if let Some((id, _, _)) = flows.iter().find(|f| !worker.flows.contains(&f.0)) {
            return Err(io::Error::other(format!(
                "flows {first} and {id} run on different QUIC workers"
            )));
        }
        worker.run(plan, flows, samples, stop)
    }

    fn workers(&self) -> usize {
        self.workers.len()
    }
}

/// quinn's crypto with each 1-RTT packet's sealing and opening timed.
mod timing {
    use quinn::crypto::{
        self, CryptoError, ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey,
        UnsupportedVersion,
    };
    use quinn::{ConnectionId, Side};
    use quinn_proto::transport_parameters::TransportParameters;
    use quinn_proto::TransportError;
    use std::any::Any;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    pub(super) struct Server {
        pub(super) inner: Arc<dyn crypto::ServerConfig>,
        pub(super) spent: Arc<AtomicU64>,
    }

    pub(super) struct Client {
        pub(super) inner: Arc<dyn crypto::ClientConfig>,
        pub(super) spent: Arc<AtomicU64>,
    }

    impl crypto::ServerConfig for Server {
        fn initial_keys(
            &self,
            version: u32,
            dst_cid: &ConnectionId,
        ) -> Result<Keys, UnsupportedVersion> {
            self.inner.initial_keys(version, dst_cid)
        }

        fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
            self.inner.retry_tag(version, orig_dst_cid, packet)
        }

        fn start_session(
            self: Arc<Self>,
            version: u32,
            params: &TransportParameters,
        ) -> Box<dyn crypto::Session> {
            Box::new(Session {
                inner: self.inner.clone().start_session(version, params),
                spent: self.spent.clone(),
            })
        }
    }

    impl crypto::ClientConfig for Client {
        fn start_session(
            self: Arc<Self>,
            version: u32,
            server_name: &str,
            params: &TransportParameters,
        ) -> Result<Box<dyn crypto::Session>, quinn::ConnectError> {
            Ok(Box::new(Session {
                inner: self
                    .inner
                    .clone()
                    .start_session(version, server_name, params)?,
                spent: self.spent.clone(),
            }))
        }
    }

    struct Session {
        inner: Box<dyn crypto::Session>,
        spent: Arc<AtomicU64>,
    }

    impl crypto::Session for Session {
        fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
            self.inner.initial_keys(dst_cid, side)
        }
        fn handshake_data(&self) -> Option<Box<dyn Any>> {
            self.inner.handshake_data()
        }
        fn peer_identity(&self) -> Option<Box<dyn Any>> {
            self.inner.peer_identity()
        }
        fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
            self.inner.early_crypto()
        }
        fn early_data_accepted(&self) -> Option<bool> {
            self.inner.early_data_accepted()
        }
        fn is_handshaking(&self) -> bool {
            self.inner.is_handshaking()
        }
        fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
            self.inner.read_handshake(buf)
        }
        fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
            self.inner.transport_parameters()
        }
        fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
            let keys = self.inner.write_handshake(buf)?;
            // 1-RTT keys come with the handshake's last flight on a client.
            Some(Keys {
                header: keys.header,
                packet: self.timed(keys.packet),
            })
        }
        fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
            let keys = self.inner.next_1rtt_keys()?;
            Some(self.timed(keys))
        }
        fn is_valid_retry(
            &self,
            orig_dst_cid: &ConnectionId,
            header: &[u8],
            payload: &[u8],
        ) -> bool {
            self.inner.is_valid_retry(orig_dst_cid, header, payload)
        }
        fn export_keying_material(
            &self,
            output: &mut [u8],
            label: &[u8],
            context: &[u8],
        ) -> Result<(), ExportKeyingMaterialError> {
            self.inner.export_keying_material(output, label, context)
        }
    }

    impl Session {
        fn timed(&self, keys: KeyPair<Box<dyn PacketKey>>) -> KeyPair<Box<dyn PacketKey>> {
            let wrap = |key: Box<dyn PacketKey>| -> Box<dyn PacketKey> {
                Box::new(Timed {
                    inner: key,
                    spent: self.spent.clone(),
                    calls: AtomicU64::new(0),
                })
            };
            KeyPair {
                local: wrap(keys.local),
                remote: wrap(keys.remote),
            }
        }
    }

    /// One packet in this many that are sealed or opened is timed (linerate-tls's `cost`):
    /// packets are ten times as many as TLS records for the same bytes.
    const SAMPLE_EVERY: u64 = 32;

    struct Timed {
        inner: Box<dyn PacketKey>,
        spent: Arc<AtomicU64>,
        calls: AtomicU64,
    }

    impl Timed {
        fn timed<R>(&self, work: impl FnOnce() -> R) -> R {
            let call = self.calls.fetch_add(1, Ordering::Relaxed);
            let (result, spent) = linerate_tls::cost::sampled(call, SAMPLE_EVERY, work);
            if let Some(spent) = spent {
                let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
                self.spent.fetch_add(nanos, Ordering::Relaxed);
            }
            result
        }
    }

    impl PacketKey for Timed {
        fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
            self.timed(|| self.inner.encrypt(packet, buf, header_len));
        }
        fn decrypt(
            &self,
            packet: u64,
            header: &[u8],
            payload: &mut bytes::BytesMut,
        ) -> Result<(), CryptoError> {
            self.timed(|| self.inner.decrypt(packet, header, payload))
        }
        fn tag_len(&self) -> usize {
            self.inner.tag_len()
        }
        fn confidentiality_limit(&self) -> u64 {
            self.inner.confidentiality_limit()
        }
        fn integrity_limit(&self) -> u64 {
            self.inner.integrity_limit()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_tls::verify::Trust;

    fn plan(token: [u8; 16], timeout: Duration, flows: u32) -> QuicPlan {
        QuicPlan {
            token: Token(token),
            flows,
            connection_per_flow: false,
            congestion: "cubic".into(),
            window: None,
            cipher: Cipher::Aes128Gcm,
            timeout,
            workers: 1,
            worker: 0,
            source: None,
            marks: None,
        }
    }

    /// A server of `workers` QUIC workers whose control connection came from `peer`, on
    /// loopback ports, for `flows` flows.
    fn serve_workers(
        peer: &str,
        token: [u8; 16],
        workers: usize,
        flows: u32,
    ) -> (QuicSide, Vec<SocketAddr>, String) {
        let identity = linerate_tls::Identity::self_signed(&["localhost".into()]).unwrap();
        let tls = linerate_tls::server_config(&identity).unwrap();
        let sockets: Vec<UdpSocket> = (0..workers)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
        let side = QuicSide::serve(
            sockets,
            tls,
            peer.parse().unwrap(),
            plan(token, Duration::from_secs(5), flows),
        )
        .unwrap();
        (side, addrs, identity.fingerprint)
    }

    fn serve(peer: &str, token: [u8; 16]) -> (QuicSide, SocketAddr, String) {
        let (side, addrs, fingerprint) = serve_workers(peer, token, 1, 2);
        (side, addrs[0], fingerprint)
    }

    fn connect_workers(
        addrs: &[SocketAddr],
        fingerprint: &str,
        token: [u8; 16],
        flows: u32,
    ) -> Result<QuicSide, String> {
        let trust = Trust::Pinned(fingerprint.to_string());
        let tls = linerate_tls::quic_client_config(Cipher::Aes128Gcm, &trust).unwrap();
        QuicSide::connect(
            addrs,
            tls,
            "localhost".into(),
            plan(token, Duration::from_millis(800), flows),
        )
    }

    fn connect(addr: SocketAddr, fingerprint: &str, token: [u8; 16]) -> Result<QuicSide, String> {
        connect_workers(&[addr], fingerprint, token, 2)
    }

    fn ready(side: &QuicSide) -> Result<(), String> {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Some(result) = side.poll_ready() {
                return result;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("not ready within 5 s".into())
    }

    #[test]
    fn a_server_answers_only_the_control_connections_host() {
        // The test's control connection came from 127.0.0.2: a client on 127.0.0.1 that
        // learnt the port gets no answer at all, not even a refusal.
        let (_side, addr, fingerprint) = serve("127.0.0.2", [7; 16]);
        let error = connect(addr, &fingerprint, [7; 16]).err().unwrap();
        assert!(error.contains("no QUIC answer"), "{error}");

        // From the control connection's host, both streams open and the server is ready.
        let (side, addr, fingerprint) = serve("127.0.0.1", [7; 16]);
        let _client = connect(addr, &fingerprint, [7; 16]).unwrap();
        assert_eq!(ready(&side), Ok(()));
    }

    #[test]
    fn a_stream_without_the_tests_token_ends_the_set_up() {
        let (side, addr, fingerprint) = serve("127.0.0.1", [7; 16]);
        let _client = connect(addr, &fingerprint, [8; 16]).unwrap();
        let error = ready(&side).unwrap_err();
        assert!(
            error.contains("did not present this test's token"),
            "{error}"
        );
    }

    #[test]
    fn flows_spread_over_the_workers_each_with_its_own_connection() {
        // Three workers, five flows: worker 0 runs flows 0 and 3, worker 1 flows 1 and 4,
        // worker 2 flow 2, each over its own connection to the server's worker of the
        // same rank.
        let (side, addrs, fingerprint) = serve_workers("127.0.0.1", [9; 16], 3, 5);
        let client = connect_workers(&addrs, &fingerprint, [9; 16], 5).unwrap();
        assert_eq!(ready(&side), Ok(()));
        assert_eq!((side.workers(), client.workers()), (3, 3));
        let flows: Vec<Vec<u32>> = client.workers.iter().map(|w| w.flows.clone()).collect();
        assert_eq!(flows, vec![vec![0, 3], vec![1, 4], vec![2]]);
        let served: Vec<Vec<u32>> = side.workers.iter().map(|w| w.flows.clone()).collect();
        assert_eq!(served, flows);
    }

    #[test]
    fn a_flow_at_another_workers_port_ends_the_set_up() {
        // A client whose workers dial the server's ports in the wrong order sends flow 0
        // to the worker that runs flow 1: it is refused there, not taken by the wrong
        // worker.
        let (side, mut addrs, fingerprint) = serve_workers("127.0.0.1", [5; 16], 2, 2);
        addrs.reverse();
        let _client = connect_workers(&addrs, &fingerprint, [5; 16], 2);
        let error = ready(&side).unwrap_err();
        assert!(error.contains("runs other flows"), "{error}");
    }
}
