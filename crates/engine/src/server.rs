//! `linerate serve`: many tests at once on one port, each isolated.
//!
//! One acceptor thread owns the listening socket and every connection that has not yet
//! said what it is. It reads exactly the preface (linerate-proto's `preface`) and then:
//! a control connection gets a thread of its own for its test; a data connection is handed
//! to the test whose token it presents; anything else is logged and closed. A connection
//! that says nothing is closed after the handshake timeout, so it cannot pin resources.
//!
//! Each test thread drives a sans-IO `ServerSession` and, once started, a `DataPlane`.
//! Whatever ends the test (completion, the client vanishing, a protocol error, shutdown),
//! the thread drops the plane and every socket of the test before it exits.

use crate::access::{
    self, AccessPolicy, Admission, Gate, Held, LogFormat, OperatorLog, RateBook, RateShare,
};
use crate::control::Control;
use crate::flow::{FlowSocket, FlowSpec, Side};
use crate::iperf3_auth::Iperf3Auth;
use crate::plane::{default_threads, DataPlane, PlaneSetup};
use crate::sys;
use linerate_hostinfo::host_facts;
use linerate_proto::auth::Key;
use linerate_proto::datagram::{parse_hello, tag_of, Framing};
use linerate_proto::preface::{self, Preface};
use linerate_proto::{
    Limits, RefuseCode, ServerEvent, ServerSession, SessionError, Timeouts, Token,
};
use linerate_report::units::{format_rate, Scale};
use linerate_report::{Direction, HostFacts, Role, SideResult, TestConfig, Workload};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub limits: Limits,
    /// Worker threads per test (capped by its flow count); `None`: [`default_threads`].
    pub threads: Option<usize>,
    pub timeouts: Timeouts,
    /// How long receivers wait for a sender's last bytes after the end.
    pub drain: Duration,
    /// Log test starts and ends to stderr.
    pub log: bool,
    /// Hears the report of every iperf3 test served to its end, to keep it.
    pub iperf3_reports: Option<ReportSink>,
    /// When set, every native client, agent and mirror must prove it holds this key.
    pub key: Option<Key>,
    /// iperf3 clients' RSA authentication (`--rsa-private-key-path`,
    /// `--authorized-users-path`); when set, every iperf3 client must authenticate.
    pub iperf3_auth: Option<Arc<Iperf3Auth>>,
    /// Who may connect, and how many connections each may hold.
    pub access: AccessPolicy,
    /// The most bits per second the running tests of one client address may ask for
    /// together (`--max-rate-per-ip`).
    pub max_rate_per_ip: Option<u64>,
    pub log_format: LogFormat,
}

/// Takes a finished test's report (with the server's test id). An iperf3 client keeps no
/// linerate result of its own, so the server hands its tests over to be kept.
#[derive(Clone)]
pub struct ReportSink(pub Arc<KeepReport>);

/// What a [`ReportSink`] calls: the server's test id and the report.
pub type KeepReport = dyn Fn(u64, &linerate_report::Report) + Send + Sync;

impl std::fmt::Debug for ReportSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReportSink")
    }
}

impl ServerConfig {
    pub fn new(listen: SocketAddr) -> ServerConfig {
        ServerConfig {
            listen,
            limits: Limits::default(),
            threads: None,
            timeouts: Timeouts::default(),
            drain: Duration::from_secs(3),
            log: true,
            iperf3_reports: None,
            key: None,
            iperf3_auth: None,
            access: AccessPolicy::default(),
            max_rate_per_ip: None,
            log_format: LogFormat::Text,
        }
    }
}

type FlowSender = Sender<(u32, std::net::TcpStream)>;

pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) gate: Gate,
    pub(crate) operator_log: OperatorLog,
    pub(crate) rates: Arc<RateBook>,
    pub(crate) host: HostFacts,
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(crate) running: AtomicUsize,
    pub(crate) next_id: AtomicU64,
    /// Live tests waiting for data connections, by token.
    registry: Mutex<HashMap<Token, FlowSender>>,
    /// iperf3 tests waiting for their TCP streams, by cookie.
    pub(crate) iperf3_streams: Mutex<HashMap<String, Sender<std::net::TcpStream>>>,
    /// The UDP socket on the server's port where iperf3 clients open UDP streams; one
    /// test at a time holds it while its streams arrive.
    pub(crate) iperf3_udp: Mutex<Option<UdpSocket>>,
}

impl Shared {
    /// Data connections presenting `token` arrive on the returned channel.
    pub(crate) fn register_flows(&self, token: Token) -> Receiver<(u32, std::net::TcpStream)> {
        let (sender, receiver) = channel();
        self.registry
            .lock()
            .expect("registry lock")
            .insert(token, sender);
        receiver
    }

    pub(crate) fn unregister_flows(&self, token: &Token) {
        self.registry.lock().expect("registry lock").remove(token);
    }

    pub(crate) fn log(&self, message: &str) {
        self.operator_log.line(message);
    }

    /// One line for a refused or limited client, with the reason (a few a second at most).
    pub(crate) fn refused(&self, peer: SocketAddr, reason: &str) {
        self.operator_log.refused(peer, reason);
    }
}

/// A server on an ephemeral loopback port, serving on a thread of its own: the in-process
/// peer of runs that measure this machine.
pub struct LocalServer {
    pub addr: SocketAddr,
    /// Setting it ends the server.
    pub shutdown: Arc<AtomicBool>,
    pub handle: JoinHandle<io::Result<()>>,
}

impl LocalServer {
    /// Starts one, quiet, with `configure` applied to its configuration.
    pub fn start(configure: impl FnOnce(&mut ServerConfig)) -> io::Result<LocalServer> {
        let mut config = ServerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        config.log = false;
        configure(&mut config);
        let server = Server::bind(config)?;
        let addr = server.local_addr()?;
        let shutdown = server.shutdown_flag();
        let handle = std::thread::Builder::new()
            .name("linerate-local-server".into())
            .spawn(move || server.run())?;
        Ok(LocalServer {
            addr,
            shutdown,
            handle,
        })
    }
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    bytes: Vec<u8>,
    deadline: Instant,
    /// Its place among the connections the server holds.
    held: Held,
}

impl Server {
    pub fn bind(config: ServerConfig) -> io::Result<Server> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(config.listen),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_address(true)?;
        if config.listen.is_ipv6() {
            // Serve IPv4 too on "::", as iperf3 does.
            let _ = socket.set_only_v6(false);
        }
        socket.bind(&config.listen.into())?;
        // Thousands of data connections arrive at once for a large -P.
        socket.listen(4096)?;
        socket.set_nonblocking(true)?;
        raise_descriptor_limit();
        let listener = TcpListener::from_std(socket.into());
        // iperf3 clients open UDP streams at the server's own port.
        let iperf3_udp = match crate::iperf3_server::bind_udp(listener.local_addr()?) {
            Ok(socket) => Some(socket),
            Err(e) => {
                if config.log {
                    eprintln!(
                        "UDP port {} unavailable for iperf3 clients: {e}",
                        config.listen.port()
                    );
                }
                None
            }
        };
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                host: host_facts(),
                gate: Gate::new(config.access.clone()),
                operator_log: OperatorLog::new(config.log, config.log_format),
                rates: Arc::new(RateBook::default()),
                config,
                shutdown: Arc::new(AtomicBool::new(false)),
                running: AtomicUsize::new(0),
                next_id: AtomicU64::new(1),
                registry: Mutex::new(HashMap::new()),
                iperf3_streams: Mutex::new(HashMap::new()),
                iperf3_udp: Mutex::new(iperf3_udp),
            }),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Setting this flag stops the server: no new connections, running tests are ended.
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shared.shutdown.clone()
    }

    /// Serves until the shutdown flag is set.
    pub fn run(mut self) -> io::Result<()> {
        const LISTENER: mio::Token = mio::Token(usize::MAX);
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        let mut pending: HashMap<usize, Pending> = HashMap::new();
        let mut next_token = 0usize;
        let mut tests: Vec<JoinHandle<()>> = Vec::new();
        // A descriptor kept in reserve: out of descriptors, it is given up to accept and
        // close one waiting connection at a time, so clients hear a close at once instead
        // of hanging in the backlog, and the loop does not spin on a full backlog.
        let mut spare = std::fs::File::open("/dev/null").ok();
        let mut busy_since_trim = false;
        let shared = self.shared.clone();
        let handshake = shared.config.timeouts.handshake;
        shared.log(&format!("listening on {}", self.listener.local_addr()?));

        while !shared.shutdown.load(Ordering::Relaxed) {
            match poll.poll(&mut events, Some(Duration::from_millis(100))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                if event.token() == LISTENER {
                    self.accept_all(&mut poll, &mut pending, &mut next_token, &mut spare);
                    continue;
                }
                let key = event.token().0;
                let Some(conn) = pending.get_mut(&key) else {
                    continue;
                };
                match read_preface(conn) {
                    Progress::More => {}
                    Progress::Closed(why) => {
                        let conn = pending.remove(&key).expect("present");
                        shared.refused(conn.peer, &format!("{why}; closed"));
                    }
                    Progress::Done(kind) => {
                        let mut conn = pending.remove(&key).expect("present");
                        let _ = poll.registry().deregister(&mut conn.stream);
                        if let Some(handle) = self.dispatch(kind, conn) {
                            tests.push(handle);
                        }
                    }
                }
            }
            let now = Instant::now();
            pending.retain(|_, conn| {
                let keep = conn.deadline > now;
                if !keep {
                    shared.refused(
                        conn.peer,
                        &format!(
                            "sent no preface within {:.0} s; closed",
                            handshake.as_secs_f64()
                        ),
                    );
                }
                keep
            });
            tests.retain(|t| !t.is_finished());
            let idle = tests.is_empty() && pending.is_empty();
            // Idle again after a burst: give the freed heap back to the system, so a
            // burst of connections or a large test does not leave the server's resident
            // size at its peak (glibc keeps freed memory in its arenas otherwise).
            if idle && busy_since_trim {
                release_free_memory();
            }
            busy_since_trim = !idle;
        }
        shared.log("shutting down");
        drop(pending);
        for test in tests {
            let _ = test.join();
        }
        Ok(())
    }

    /// Accepts every waiting connection: each is let in by the gate (or refused at once),
    /// and waits in `pending` for its preface.
    fn accept_all(
        &mut self,
        poll: &mut Poll,
        pending: &mut HashMap<usize, Pending>,
        next_token: &mut usize,
        spare: &mut Option<std::fs::File>,
    ) {
        let shared = self.shared.clone();
        let handshake = shared.config.timeouts.handshake;
        loop {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: give up the spare to close one waiting client.
                    *spare = None;
                    if let Ok((_, peer)) = self.listener.accept() {
                        shared.refused(peer, "the server is out of descriptors");
                    }
                    *spare = std::fs::File::open("/dev/null").ok();
                    if spare.is_none() {
                        return;
                    }
                    continue;
                }
                // Something else: log, keep serving what we have.
                Err(e) => {
                    shared.log(&format!("accept failed: {e}"));
                    return;
                }
            };
            let ip = access::canonical(peer.ip());
            let at_cap = shared.gate.held() >= shared.gate.policy.max_connections;
            let waiting: Vec<(usize, IpAddr)> = if at_cap {
                let mut waiting: Vec<(usize, IpAddr)> = pending
                    .iter()
                    .map(|(key, conn)| (*key, access::canonical(conn.peer.ip())))
                    .collect();
                waiting.sort_unstable_by_key(|(key, _)| *key);
                waiting
            } else {
                Vec::new()
            };
            match shared.gate.admit(ip, &waiting) {
                Admission::Admit => {}
                Admission::AdmitEvicting(key) => {
                    if let Some(mut evicted) = pending.remove(&key) {
                        let _ = poll.registry().deregister(&mut evicted.stream);
                        shared.refused(
                            evicted.peer,
                            "closed in its preface to make room (--max-connections)",
                        );
                    }
                }
                Admission::Refuse(why) => {
                    shared.refused(peer, why);
                    continue;
                }
            }
            *next_token = (*next_token + 1) % (usize::MAX - 1);
            let token = mio::Token(*next_token);
            if poll
                .registry()
                .register(&mut stream, token, Interest::READABLE)
                .is_ok()
            {
                pending.insert(
                    *next_token,
                    Pending {
                        stream,
                        peer,
                        bytes: Vec::with_capacity(preface::IPERF3_COOKIE_LEN),
                        deadline: Instant::now() + handshake,
                        held: shared.gate.hold(ip),
                    },
                );
            }
        }
    }

    /// Serves one connection on a thread of its own; a thread that cannot start is logged
    /// and the connection dropped.
    fn spawn_session(
        &self,
        name: &str,
        peer: SocketAddr,
        serve: impl FnOnce(&Arc<Shared>) + Send + 'static,
    ) -> Option<JoinHandle<()>> {
        let shared = self.shared.clone();
        match std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(&shared))
        {
            Ok(handle) => Some(handle),
            Err(e) => {
                self.shared
                    .log(&format!("cannot start a thread for {peer}: {e}"));
                None
            }
        }
    }

    fn dispatch(&self, kind: Preface, conn: Pending) -> Option<JoinHandle<()>> {
        let shared = &self.shared;
        let Pending {
            stream,
            peer,
            bytes,
            held,
            ..
        } = conn;
        let stream = match into_std(stream) {
            Ok(stream) => stream,
            Err(e) => {
                shared.log(&format!("connection from {peer}: cannot hand it over: {e}"));
                return None;
            }
        };
        match kind {
            // A session's connection holds its place until the session ends.
            Preface::Control { .. } => self.spawn_session("linerate-test", peer, move |shared| {
                let _held = held;
                serve_test(shared, stream, bytes, peer)
            }),
            Preface::Agent { version } => {
                self.spawn_session("linerate-agent", peer, move |shared| {
                    let _held = held;
                    crate::profile::agent::serve(shared, stream, version, peer)
                })
            }
            Preface::Data { token, flow } => {
                let sender = shared
                    .registry
                    .lock()
                    .expect("registry lock")
                    .get(&token)
                    .cloned();
                match sender {
                    Some(sender) if sender.send((flow, stream)).is_ok() => {}
                    _ => shared.refused(peer, "a data connection with an unknown test token"),
                }
                None
            }
            Preface::Iperf3 { cookie } => {
                let waiting = shared
                    .iperf3_streams
                    .lock()
                    .expect("iperf3 registry lock")
                    .get(&cookie)
                    .cloned();
                if let Some(sender) = waiting {
                    // A TCP stream of an iperf3 test that is creating its streams.
                    if sender.send(stream).is_err() {
                        shared.log(&format!(
                            "refused an iperf3 stream from {peer}: its test has ended"
                        ));
                    }
                    return None;
                }
                self.spawn_session("linerate-iperf3", peer, move |shared| {
                    let _held = held;
                    crate::iperf3_server::serve(shared, stream, cookie, peer)
                })
            }
            Preface::Unknown | Preface::NeedBytes(_) => {
                shared.refused(peer, "not a linerate client");
                None
            }
        }
    }
}

/// A connection leaves the event loop blocking, as std streams are made: its consumers
/// wait in blocking calls with timeouts, which a non-blocking socket ignores (every wait
/// would spin), or set the mode they need themselves.
fn into_std(stream: TcpStream) -> io::Result<std::net::TcpStream> {
    // SAFETY: the descriptor comes out of a live mio stream, whose ownership ends here.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) };
    stream.set_nonblocking(false)?;
    Ok(stream)
}

enum Progress {
    More,
    Done(Preface),
    Closed(&'static str),
}

/// Reads no more than the preface needs, and classifies it when complete.
fn read_preface(conn: &mut Pending) -> Progress {
    loop {
        let want = match preface::classify(&conn.bytes) {
            Preface::NeedBytes(n) => n,
            Preface::Unknown => return Progress::Done(Preface::Unknown),
            done => return Progress::Done(done),
        };
        let have = conn.bytes.len();
        conn.bytes.resize(want, 0);
        match conn.stream.read(&mut conn.bytes[have..]) {
            Ok(0) => return Progress::Closed("closed before finishing its preface"),
            Ok(n) => conn.bytes.truncate(have + n),
            Err(e) => {
                conn.bytes.truncate(have);
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Progress::More,
                    io::ErrorKind::Interrupted => {}
                    _ => return Progress::Closed("failed during its preface"),
                }
            }
        }
    }
}

/// What a test thread holds; dropping it frees every resource of the test.
struct TestState {
    token: Option<Token>,
    flows_in: Option<Receiver<(u32, std::net::TcpStream)>>,
    flows: Vec<Option<std::net::TcpStream>>,
    /// UDP tests: one socket per flow, and whether its hello has connected it.
    udp: Vec<(UdpSocket, bool)>,
    udp_token: [u8; 16],
    /// Hellos refused so far (logged once per test).
    udp_refused: u64,
    /// The address the test's control connection arrived on.
    local_ip: std::net::IpAddr,
    /// crr tests: the listener for the test's connections.
    crr_listener: Option<std::net::TcpListener>,
    plane: Option<DataPlane>,
    counted: bool,
    /// The test's share of its address's rate (`--max-rate-per-ip`).
    rate_share: Option<RateShare>,
}

pub(crate) fn random_token() -> io::Result<Token> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(Token(bytes))
}

fn serve_test(
    shared: &Arc<Shared>,
    stream: std::net::TcpStream,
    preface_bytes: Vec<u8>,
    peer: SocketAddr,
) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut session = ServerSession::new(
        Instant::now(),
        shared.config.limits.clone(),
        shared.host.software.clone(),
        shared.host.clone(),
        shared.config.timeouts,
    );
    if let Some(key) = &shared.config.key {
        match crate::profile::link::random_nonce() {
            Ok(nonce) => session = session.with_key(key.clone(), nonce),
            Err(e) => {
                shared.log(&format!(
                    "test {id} from {peer}: no randomness for a nonce: {e}"
                ));
                return;
            }
        }
    }
    session.handle_input(Instant::now(), &preface_bytes);
    let local_ip = stream
        .local_addr()
        .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |a| a.ip());
    let mut control = match Control::new(stream) {
        Ok(control) => control,
        Err(e) => {
            shared.log(&format!(
                "test {id} from {peer}: control socket setup failed: {e}"
            ));
            return;
        }
    };
    let mut state = TestState {
        token: None,
        flows_in: None,
        flows: Vec::new(),
        udp: Vec::new(),
        udp_token: [0; 16],
        udp_refused: 0,
        local_ip,
        crr_listener: None,
        plane: None,
        counted: false,
        rate_share: None,
    };
    let outcome = loop {
        let mut closed = None;
        while let Some(event) = session.poll_event() {
            match event {
                ServerEvent::TestRequested(config) => {
                    accept_test(shared, id, peer, &mut session, &mut state, &config)
                }
                ServerEvent::Start => {
                    if let Err(e) = start_plane(shared, &session, &mut state, peer) {
                        session.abort(format!("cannot start the data plane: {e}"));
                    } else {
                        shared.log(&format!("test {id} from {peer}: started"));
                    }
                }
                ServerEvent::Closed(result) => closed = Some(result),
            }
        }
        if let Some(result) = closed {
            break result;
        }
        if let Some(receiver) = &state.flows_in {
            while let Ok((flow, stream)) = receiver.try_recv() {
                match state.flows.get_mut(flow as usize) {
                    Some(slot @ None) => *slot = Some(stream),
                    _ => shared.log(&format!("test {id}: refused data connection for flow {flow}: out of range or duplicate")),
                }
            }
            if !state.flows.is_empty() && state.flows.iter().all(Option::is_some) {
                unregister(shared, &mut state);
                session.flows_ready(Instant::now());
            }
        }
        if !state.udp.is_empty()
            && state.plane.is_none()
            && take_udp_hellos(shared, id, peer, &mut state)
        {
            session.flows_ready(Instant::now());
        }
        if state.crr_listener.is_some() {
            // crr connections come one per transaction once the test runs; nothing to wait for.
            session.flows_ready(Instant::now());
        }
        if state.plane.as_ref().is_some_and(DataPlane::is_finished) {
            let plane = state.plane.take().expect("checked");
            match plane.finish(shared.host.clone()) {
                Ok(result) => {
                    shared.log(&format!(
                        "test {id} from {peer}: finished, {}",
                        side_figures(&result)
                    ));
                    session.finish(Instant::now(), result);
                }
                Err(e) => session.abort(format!("data plane failed: {e}")),
            }
        }
        if let Some(plane) = state.plane.as_mut() {
            // Keep the sample channel short; the intervals travel in the final result.
            let intervals = plane.poll_intervals(Duration::ZERO);
            if let Some(why) = rate_exceeded(shared, &intervals) {
                shared.refused(peer, &format!("test {id}: {why}"));
                session.abort(why);
            }
        }
        if shared.shutdown.load(Ordering::Relaxed) {
            session.abort("the server is shutting down".into());
        }
        let wait = if state.flows_in.is_some() || (!state.udp.is_empty() && state.plane.is_none()) {
            Duration::from_millis(10)
        } else if state.plane.is_some() {
            Duration::from_millis(50)
        } else {
            Duration::from_millis(200)
        };
        control.step(&mut session, wait);
    };
    control.flush(&mut session);
    if let Some(plane) = state.plane.take() {
        plane.stop();
    }
    unregister(shared, &mut state);
    if state.counted {
        shared.running.fetch_sub(1, Ordering::Relaxed);
    }
    drop(state);
    match outcome {
        Ok(()) => shared.log(&format!("test {id} from {peer}: ended")),
        Err(e @ SessionError::Refused { .. }) => shared.refused(peer, &format!("test {id}: {e}")),
        // A client whose key differs finds the server's proof wrong and hangs up.
        Err(SessionError::PeerClosed(during)) if during.contains("proof of the key") => shared
            .refused(
                peer,
                &format!(
                    "test {id}: closed without proving the key (it holds another key, or none)"
                ),
            ),
        Err(e) => shared.log(&format!("test {id} from {peer}: ended: {e}")),
    }
}

/// Why a running test breaks the server's `--max-rate`, from its latest intervals.
pub(crate) fn rate_exceeded(
    shared: &Shared,
    intervals: &[linerate_report::SideInterval],
) -> Option<String> {
    let most = shared.config.limits.max_rate_bps?;
    intervals
        .iter()
        .find(|i| access::over_rate(i.sent_bps, i.received_bps, most))
        .map(|i| {
            format!(
                "{} moved in an interval, over this server's --max-rate of {}; test ended",
                format_rate(i.sent_bps + i.received_bps, Scale::Adaptive),
                format_rate(most as f64, Scale::Adaptive)
            )
        })
}

/// What a finished test moved, for the log: the directions this side took part in (an
/// empty sum would print as a meaningless zero) and the requests it answered.
pub(crate) fn side_figures(result: &SideResult) -> String {
    let mut figures = Vec::new();
    for (role, verb) in [(Role::Receive, "received"), (Role::Send, "sent")] {
        let rates: Vec<f64> = result
            .flows
            .iter()
            .filter(|f| f.role == role)
            .map(|f| f.window_bps())
            .collect();
        if !rates.is_empty() {
            let total = rates.iter().sum::<f64>();
            figures.push(format!("{verb} {}", format_rate(total, Scale::Adaptive)));
        }
    }
    if result.flows.iter().any(|f| f.role == Role::Respond) {
        let answered: u64 = result
            .flows
            .iter()
            .filter(|f| f.role == Role::Respond)
            .map(|f| f.transactions)
            .sum();
        figures.push(format!("answered {answered} requests in the window"));
    }
    figures.join(", ")
}

fn unregister(shared: &Shared, state: &mut TestState) {
    if let Some(token) = state.token.take() {
        shared
            .registry
            .lock()
            .expect("registry lock")
            .remove(&token);
    }
    state.flows_in = None;
}

fn accept_test(
    shared: &Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    session: &mut ServerSession,
    state: &mut TestState,
    config: &TestConfig,
) {
    let running = shared.running.fetch_add(1, Ordering::Relaxed);
    state.counted = true;
    if running >= shared.config.limits.max_tests as usize {
        session.refuse(
            RefuseCode::Busy,
            format!("the server is running {running} tests, its limit"),
        );
        return;
    }
    if let Some(most) = shared.config.max_rate_per_ip {
        let asked = match linerate_proto::session::asked_rate_bps(config) {
            Some(rate) => rate,
            None if config.workload == Workload::Stream => {
                return session.refuse(
                    RefuseCode::OverLimit,
                    "an unpaced test asked; this server limits each address's rate (--max-rate-per-ip): ask for a rate per flow (-b)".into(),
                )
            }
            // Closed-loop transactions: bounded by their bytes in flight, not a rate.
            None => 0.0,
        };
        match RateBook::reserve(&shared.rates, peer.ip(), asked, most) {
            Ok(share) => state.rate_share = Some(share),
            Err(why) => return session.refuse(RefuseCode::OverLimit, why),
        }
    }
    let token = match random_token() {
        Ok(token) => token,
        Err(e) => return session.abort(format!("no randomness for a token: {e}")),
    };
    let mut udp_ports = Vec::new();
    if config.workload == Workload::Crr {
        let bound = std::net::TcpListener::bind(SocketAddr::new(state.local_ip, 0))
            .and_then(|listener| Ok((listener.local_addr()?.port(), listener)));
        match bound {
            Ok((port, listener)) => {
                state.crr_listener = Some(listener);
                shared.log(&format!(
                    "test {id} from {peer}: accepted: {}",
                    config.describe()
                ));
                return session.accept_crr(Instant::now(), id, token, port);
            }
            Err(e) => return session.abort(format!("cannot open a TCP listener: {e}")),
        }
    }
    if config.protocol == "udp" {
        for _ in 0..config.connections() {
            let bound = UdpSocket::bind(SocketAddr::new(state.local_ip, 0)).and_then(|socket| {
                socket.set_nonblocking(true)?;
                sys::apply_udp_options(&socket, config)?;
                Ok((socket.local_addr()?.port(), socket))
            });
            match bound {
                Ok((port, socket)) => {
                    udp_ports.push(port);
                    state.udp.push((socket, false));
                }
                Err(e) => return session.abort(format!("cannot open a UDP socket: {e}")),
            }
        }
        state.udp_token = token.0;
    } else {
        let (sender, receiver) = channel();
        shared
            .registry
            .lock()
            .expect("registry lock")
            .insert(token, sender);
        state.token = Some(token);
        state.flows_in = Some(receiver);
        state.flows = (0..config.connections()).map(|_| None).collect();
    }
    shared.log(&format!(
        "test {id} from {peer}: accepted: {}",
        config.describe()
    ));
    session.accept_udp(Instant::now(), id, token, udp_ports);
}

fn start_plane(
    shared: &Shared,
    session: &ServerSession,
    state: &mut TestState,
    peer: SocketAddr,
) -> io::Result<()> {
    let config = session
        .config()
        .expect("a started session has a config")
        .clone();
    let mut specs = Vec::with_capacity(state.flows.len().max(state.udp.len()));
    if let Some(listener) = state.crr_listener.take() {
        listener.set_nonblocking(true)?;
        specs.push(FlowSpec {
            id: 0,
            direction: Direction::Forward,
            role: Role::Respond,
            socket: FlowSocket::Listen {
                listener,
                peer: peer.ip(),
            },
        });
    }
    for (id, (socket, _)) in state.udp.drain(..).enumerate() {
        specs.push(FlowSpec::new(
            &config,
            id as u32,
            Side::Server,
            FlowSocket::Udp(socket),
        ));
    }
    for (id, stream) in state.flows.drain(..).enumerate() {
        let stream = stream.expect("all flows arrived before start");
        sys::apply_options(&stream, &config, false)?;
        specs.push(FlowSpec::new(
            &config,
            id as u32,
            Side::Server,
            FlowSocket::Tcp(stream),
        ));
    }
    let setup = PlaneSetup {
        threads: shared
            .config
            .threads
            .unwrap_or_else(|| default_threads(config.connections() as usize)),
        drain: shared.config.drain,
        udp_framing: (config.protocol == "udp").then(|| Framing::Native {
            tag: tag_of(&state.udp_token),
        }),
        pin_cpus: Vec::new(),
        budget: None,
    };
    state.plane = Some(DataPlane::start(Instant::now(), &config, specs, setup)?);
    Ok(())
}

/// Reads the hellos waiting on a UDP test's sockets and connects each flow's socket to
/// the address its hello came from; true when every flow has one. A hello is taken only
/// from the host that holds the control connection, with the test's token and the
/// socket's own flow id, so a forged source cannot aim the test's traffic elsewhere.
fn take_udp_hellos(shared: &Shared, id: u64, peer: SocketAddr, state: &mut TestState) -> bool {
    let mut buffer = [0u8; 64];
    for (flow, (socket, connected)) in state.udp.iter_mut().enumerate() {
        while !*connected {
            let Ok((len, from)) = socket.recv_from(&mut buffer) else {
                break;
            };
            let hello = parse_hello(&buffer[..len]);
            let genuine = hello == Some((state.udp_token, flow as u32)) && from.ip() == peer.ip();
            if genuine && socket.connect(from).is_ok() {
                *connected = true;
            } else {
                state.udp_refused += 1;
                if state.udp_refused == 1 {
                    shared.log(&format!(
                        "test {id}: refused a datagram from {from} on flow {flow}'s port: not a hello of this test from {}",
                        peer.ip()
                    ));
                }
            }
        }
    }
    state.udp.iter().all(|(_, connected)| *connected)
}

/// Raises this process's soft limit on open descriptors to its hard limit: a server holds
/// one per connection, and the soft default (often 1024) is far below what
/// `--max-connections` and thousands of flows need.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Returns free heap memory to the system where the allocator keeps it (glibc).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
