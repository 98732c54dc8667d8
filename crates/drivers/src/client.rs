//! Running a stream test against a server: the client's control driver.
//!
//! The client opens the control connection, lets its `ClientSession` negotiate the test,
//! opens the data connections with the server's token, starts the server and its own data
//! plane together, shows intervals as its workers report them, and merges its own side with
//! the server's results into one [`Report`].

use crate::control::Control;
use crate::server::LocalServer;
use linerate_engine::flow::{FlowSocket, FlowSpec, Side};
use linerate_engine::plane::{DataPlane, PlaneSetup};
use linerate_engine::sys;
use linerate_hostinfo::host_facts;
use linerate_model::clock::UnixTime;
use linerate_model::Protocol;
use linerate_proto::datagram::{hello, tag_of, validated_hello, Framing, HELLO_LEN};
use linerate_proto::preface::data_preface;
use linerate_proto::{ClientEvent, ClientSession, SessionError, Timeouts, Token, PROTOCOL_VERSION};
use linerate_report::{HostFacts, Report, SideResult, TestConfig};
use socket2::{Domain, Socket, Type};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a test could not run or finish.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    #[error("cannot open data connection {flow} to {addr}: {source}")]
    DataConnect {
        flow: u32,
        addr: SocketAddr,
        source: io::Error,
    },
    #[error("data connection {flow}: {reason}")]
    Tls { flow: u32, reason: String },
    #[error("QUIC: {0}")]
    Quic(String),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("the test was interrupted")]
    Interrupted,
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        source: io::Error,
    },
    #[error("cannot start the in-process server: {0}")]
    LocalServer(io::Error),
    /// The bulk load beside a request/response test (`--load`).
    #[error("the bulk load beside the transactions failed: {0}")]
    Load(Box<ClientError>),
    /// The test beside another (a conference's calls beside its video) that did not start.
    #[error("{what} did not start: {error}")]
    Beside {
        what: &'static str,
        error: Box<ClientError>,
    },
    /// A configuration no server would run (linerate-model's resolver or proto's bounds).
    #[error("{0}")]
    Config(String),
}

impl From<crate::secure::QuicOpenError> for ClientError {
    fn from(error: crate::secure::QuicOpenError) -> ClientError {
        match error {
            crate::secure::QuicOpenError::Config(why) => ClientError::Config(why),
            crate::secure::QuicOpenError::Quic(why) => ClientError::Quic(why),
        }
    }
}

pub use linerate_report::live::TestUpdate;

/// A test to run.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub config: TestConfig,
    pub timeouts: Timeouts,
    pub drain: Duration,
    /// The server's key, proven to it (and required of it); also held by the in-process
    /// server of [`run_local`].
    pub key: Option<linerate_proto::auth::Key>,
    /// Encrypted tests: trust certificates that chain to these roots and name the server
    /// (`--ca`), instead of the one the server announces.
    pub ca: Option<std::path::PathBuf>,
    /// The in-process server's certificate and key (`--cert`, `--cert-key`).
    pub local_identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl ClientOptions {
    pub fn new(config: TestConfig) -> ClientOptions {
        ClientOptions {
            config,
            timeouts: Timeouts::default(),
            drain: Duration::from_secs(3),
            key: None,
            ca: None,
            local_identity: None,
        }
    }
}

pub(crate) fn connect(
    addr: SocketAddr,
    timeout: Duration,
    config: &TestConfig,
    data: bool,
) -> io::Result<TcpStream> {
    let mptcp = data && config.source.as_ref().is_some_and(|s| s.mptcp);
    let socket = if mptcp {
        Socket::new(
            Domain::for_address(addr),
            Type::STREAM,
            Some(socket2::Protocol::from(libc::IPPROTO_MPTCP)),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("--mptcp: {}", sys::mptcp_refusal(&e))))?
    } else {
        Socket::new(Domain::for_address(addr), Type::STREAM, None)?
    };
    if data {
        sys::apply_options(&socket, config, true)?;
    }
    sys::bind_source(&socket, config.source.as_ref(), addr)?;
    socket.connect_timeout(&addr.into(), timeout)?;
    Ok(socket.into())
}

/// Why a connect to `addr` failed; `server` names what should be listening there.
pub(crate) fn connect_error(
    addr: SocketAddr,
    error: &io::Error,
    timeout: Duration,
    server: &str,
) -> ClientError {
    let reason = match error.kind() {
        io::ErrorKind::ConnectionRefused => {
            format!("connection refused (is {server} running there?)")
        }
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!("no answer within {:.0} s", timeout.as_secs_f64())
        }
        _ => error.to_string(),
    };
    ClientError::Connect { addr, reason }
}

/// How long an interrupted test may take to end both sides and exchange their results
/// before it is given up.
const END_GRACE: Duration = Duration::from_secs(10);

/// Runs one test against the server at `addr`. `cancel` (Ctrl-C) ends a running test
/// early, as iperf3 does: both sides end at once and the report covers the part that ran,
/// marked `interrupted`. Before the test runs (or when ending takes longer than
/// `END_GRACE`) it gives up instead: the server is told and frees the test.
pub fn run(
    addr: SocketAddr,
    options: &ClientOptions,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<Report, ClientError> {
    let started_at = UnixTime::now().seconds();
    let mut test = ClientTest::open(addr, options)?;
    let mut ended: Option<Instant> = None;
    loop {
        while let Some(event) = test.session.poll_event() {
            test.handle_event(event, progress)?;
        }
        if let Stage::Opening(Flows::Udp { sockets, .. }) = &mut test.stage {
            for (flow, (socket, hello)) in sockets.iter_mut().enumerate() {
                take_cookie(socket, flow as u32, hello);
                let _ = socket.send(hello);
            }
        }
        if cancel.load(Ordering::Relaxed) {
            match (ended, &test.stage) {
                (None, Stage::Running(plane)) => {
                    plane.end_now();
                    test.session.end();
                    ended = Some(Instant::now());
                }
                (Some(at), _) if at.elapsed() < END_GRACE => {}
                _ => return Err(test.give_up("interrupted by the user", ClientError::Interrupted)),
            }
        }
        test.poll_plane(progress)?;
        if let (Stage::Finished(_), Some(_)) = (&test.stage, &test.remote) {
            test.session.done();
            test.control.flush(&mut test.session);
            break;
        }
        // While the test runs, the control connection is quiet; waking every 50 ms is enough
        // to show intervals on time and costs the data plane nothing measurable.
        let wait = match test.stage {
            Stage::Running(_) => Duration::from_millis(50),
            Stage::Opening(_) | Stage::Finished(_) => Duration::from_millis(100),
        };
        test.control.step(&mut test.session, wait);
    }
    let (Stage::Finished(local), Some(remote)) = (test.stage, test.remote) else {
        unreachable!("the loop ends only with both results")
    };
    let config = &options.config;
    let mut report = Report::assemble(
        &config.test_name(),
        &test.host.software,
        started_at,
        config.clone(),
        *local,
        remote,
    );
    if ended.is_some() {
        let after_s = report.summary.duration_s;
        report.interrupted = Some(linerate_report::Interruption { after_s });
        report.warnings.push(format!(
            "interrupted after {after_s:.2} s: the figures cover the part that ran"
        ));
    }
    Ok(report)
}

/// A test's data flows as the server's acceptance opened them: one variant per way a
/// protocol's flows open, each with what its data plane needs.
enum Flows {
    /// The server has not accepted the test yet.
    Pending,
    /// TCP (plain or TLS): one connection per flow, open.
    Tcp(Vec<FlowSocket>),
    /// crr: each transaction connects anew to this address.
    Crr(SocketAddr),
    /// UDP: one connected socket per flow with the hello it repeats until the server
    /// reports the flows ready (a hello may be lost like any datagram), and the tag that
    /// frames the test's datagrams.
    Udp {
        sockets: Vec<(UdpSocket, Vec<u8>)>,
        framing: Framing,
    },
    /// QUIC: this side's QUIC thread, its streams open.
    Quic(Arc<linerate_engine::quic::QuicSide>),
}

/// Where this side of the test is: opening its flows, running its data plane, or done
/// with its result.
enum Stage {
    Opening(Flows),
    Running(DataPlane),
    Finished(Box<SideResult>),
}

/// One test in progress on the client: the control session and its socket, this side's
/// stage, and the server's result once it comes.
struct ClientTest<'a> {
    addr: SocketAddr,
    options: &'a ClientOptions,
    host: HostFacts,
    session: ClientSession,
    control: Control,
    stage: Stage,
    remote: Option<SideResult>,
}

impl<'a> ClientTest<'a> {
    /// Connects the control connection and opens the session (with the key, if any).
    fn open(addr: SocketAddr, options: &'a ClientOptions) -> Result<Self, ClientError> {
        let config = &options.config;
        let connect_timeout = Duration::from_secs_f64(config.connect_timeout_s);
        let host = host_facts();
        let stream = connect(addr, connect_timeout, config, false)
            .map_err(|e| connect_error(addr, &e, connect_timeout, "`linerate serve`"))?;
        let control = Control::new(stream).map_err(|source| ClientError::Io {
            context: "control connection setup",
            source,
        })?;
        let mut session = ClientSession::new(
            Instant::now(),
            PROTOCOL_VERSION,
            host.clone(),
            config.clone(),
            options.timeouts,
        );
        if let Some(key) = &options.key {
            let nonce = crate::server_state::random_nonce().map_err(|source| ClientError::Io {
                context: "drawing a nonce",
                source,
            })?;
            session = session.with_key(key.clone(), nonce);
        }
        Ok(ClientTest {
            addr,
            options,
            host,
            session,
            control,
            stage: Stage::Opening(Flows::Pending),
            remote: None,
        })
    }

    /// Tells the server why the client gives up (so it frees the test at once), then
    /// hands back the error.
    fn give_up(&mut self, reason: &str, error: ClientError) -> ClientError {
        give_up(&mut self.session, &mut self.control, reason, error)
    }

    fn handle_event(
        &mut self,
        event: ClientEvent,
        progress: &mut dyn FnMut(TestUpdate),
    ) -> Result<(), ClientError> {
        let config = &self.options.config;
        match event {
            ClientEvent::Welcomed { host, .. } => progress(TestUpdate::Connected { server: host }),
            ClientEvent::Accepted {
                crr_port: Some(port),
                ..
            } => self.stage = Stage::Opening(Flows::Crr(SocketAddr::new(self.addr.ip(), port))),
            ClientEvent::Accepted {
                token,
                udp_ports,
                tls_fingerprint,
                quic_ports,
                ..
            } => {
                // Each protocol's flows open their own way: the match names every one.
                let opened = match config.protocol {
                    Protocol::Udp => self.open_udp(token, &udp_ports),
                    Protocol::Quic => {
                        self.open_quic(token, &quic_ports, tls_fingerprint.as_deref())
                    }
                    Protocol::Tcp => self.open_tcp(token, tls_fingerprint.as_deref()),
                };
                match opened {
                    Ok(flows) => self.stage = Stage::Opening(flows),
                    Err(error) => return Err(self.abort(error)),
                }
            }
            ClientEvent::FlowsReady => {
                self.start_plane()?;
                progress(TestUpdate::Started);
            }
            ClientEvent::Results(result) => self.remote = Some(*result),
            ClientEvent::Failed(error) => {
                let stage = std::mem::replace(&mut self.stage, Stage::Opening(Flows::Pending));
                if let Stage::Running(plane) = stage {
                    plane.stop();
                }
                return Err(error.into());
            }
        }
        Ok(())
    }

    /// A UDP test's flows: a socket per port the server offered, each proving its
    /// address with the server's cookie.
    fn open_udp(&self, token: Token, ports: &[u16]) -> Result<Flows, ClientError> {
        let config = &self.options.config;
        if ports.len() != config.connections() as usize {
            return Err(ClientError::Config(format!(
                "the server offered {} UDP ports for {} flows",
                ports.len(),
                config.connections()
            )));
        }
        Ok(Flows::Udp {
            sockets: open_udp_flows(self.addr, config, token, ports)?,
            framing: Framing::Native {
                tag: tag_of(&token.0),
            },
        })
    }

    /// A QUIC test's connections (one per QUIC worker, or one per flow) to the ports the
    /// server offered, one per worker.
    fn open_quic(
        &self,
        token: Token,
        ports: &[u16],
        fingerprint: Option<&str>,
    ) -> Result<Flows, ClientError> {
        if ports.is_empty() {
            return Err(ClientError::Quic("the server offered no QUIC port".into()));
        }
        let servers: Vec<SocketAddr> = ports
            .iter()
            .map(|port| SocketAddr::new(self.addr.ip(), *port))
            .collect();
        let side = crate::secure::open_quic(
            &self.options.config,
            &servers,
            token,
            fingerprint,
            self.options.ca.as_deref(),
        )?;
        Ok(Flows::Quic(Arc::new(side)))
    }

    /// A TCP test's data connections, through TLS when the test is encrypted.
    fn open_tcp(&self, token: Token, fingerprint: Option<&str>) -> Result<Flows, ClientError> {
        let config = &self.options.config;
        let connect_timeout = Duration::from_secs_f64(config.connect_timeout_s);
        let tls = crate::secure::ClientTls::new(
            config,
            fingerprint,
            self.options.ca.as_deref(),
            &crate::secure::server_name(config),
        )
        .map_err(|e| ClientError::Config(e.to_string()))?;
        Ok(Flows::Tcp(open_flows(
            self.addr,
            config,
            token,
            connect_timeout,
            tls.as_ref(),
        )?))
    }

    fn abort(&mut self, error: ClientError) -> ClientError {
        self.session.abort(&error.to_string());
        self.control.flush(&mut self.session);
        error
    }

    /// Every data connection is in: start the test and this side's data plane.
    fn start_plane(&mut self) -> Result<(), ClientError> {
        let config = &self.options.config;
        let flows = match std::mem::replace(&mut self.stage, Stage::Opening(Flows::Pending)) {
            Stage::Opening(flows) => flows,
            other => {
                self.stage = other;
                let error = ClientError::Config("the server reported the flows ready twice".into());
                return Err(self.abort(error));
            }
        };
        let (sockets, udp_framing): (Vec<FlowSocket>, _) = match flows {
            Flows::Pending => {
                let error = ClientError::Config(
                    "the server reported the flows ready before accepting the test".into(),
                );
                return Err(self.abort(error));
            }
            Flows::Tcp(sockets) => (sockets, None),
            Flows::Crr(target) => (
                (0..config.parallel)
                    .map(|_| FlowSocket::Connect(target))
                    .collect(),
                None,
            ),
            Flows::Udp { sockets, framing } => (
                sockets
                    .into_iter()
                    .map(|(s, _)| FlowSocket::Udp(s))
                    .collect(),
                Some(framing),
            ),
            Flows::Quic(side) => (
                (0..config.connections())
                    .map(|_| FlowSocket::Quic(side.clone()))
                    .collect(),
                None,
            ),
        };
        let start = Instant::now();
        self.session.start(start);
        self.control.flush(&mut self.session);
        let specs = flow_specs(config, sockets);
        let pin: &[usize] = config.rr.as_ref().map_or(&[], |rr| &rr.cpus);
        let setup = PlaneSetup {
            trip_times: None,
            tcp_bursts: None,
            peer_lead: Duration::ZERO,
            threads: config.threads as usize,
            drain: self.options.drain,
            udp_framing,
            udp_template: Vec::new(),
            pin_cpus: pin.to_vec(),
            budget: None,
            ..PlaneSetup::default()
        };
        match DataPlane::start(start, config, specs, setup) {
            Ok(plane) => {
                self.stage = Stage::Running(plane);
                Ok(())
            }
            Err(source) => {
                let error = ClientError::Io {
                    context: "starting the data plane",
                    source,
                };
                Err(self.give_up("the client could not start its data plane", error))
            }
        }
    }

    /// Shows the intervals that completed, and takes this side's result once the plane
    /// is done.
    fn poll_plane(&mut self, progress: &mut dyn FnMut(TestUpdate)) -> Result<(), ClientError> {
        let mut plane = match std::mem::replace(&mut self.stage, Stage::Opening(Flows::Pending)) {
            Stage::Running(plane) => plane,
            other => {
                self.stage = other;
                return Ok(());
            }
        };
        for interval in plane.poll_intervals(Duration::ZERO) {
            progress(TestUpdate::Interval(Box::new(interval)));
        }
        if !plane.is_finished() {
            self.stage = Stage::Running(plane);
            return Ok(());
        }
        // The workers are gone, so every sample is in the channel: show the rest.
        for interval in plane.poll_intervals(Duration::ZERO) {
            progress(TestUpdate::Interval(Box::new(interval)));
        }
        match plane.finish(self.host.clone()) {
            Ok(result) => {
                self.stage = Stage::Finished(Box::new(result));
                Ok(())
            }
            Err(source) => {
                let error = ClientError::Io {
                    context: "data plane",
                    source,
                };
                Err(self.give_up("the client's data plane failed", error))
            }
        }
    }
}

/// Tells the server why the client gives up (so it frees the test at once), then hands
/// back the error.
fn give_up(
    session: &mut ClientSession,
    control: &mut Control,
    reason: &str,
    error: ClientError,
) -> ClientError {
    session.abort(reason);
    control.flush(session);
    error
}

/// Opens the test's TCP data connections, each with its preface and, for an encrypted
/// test, its TLS handshake.
fn open_flows(
    addr: SocketAddr,
    config: &TestConfig,
    token: Token,
    timeout: Duration,
    tls: Option<&crate::secure::ClientTls>,
) -> Result<Vec<FlowSocket>, ClientError> {
    (0..config.connections())
        .map(|flow| {
            let fail = |source| ClientError::DataConnect { flow, addr, source };
            let mut stream = connect(addr, timeout, config, true).map_err(fail)?;
            stream.write_all(&data_preface(token, flow)).map_err(fail)?;
            match tls {
                None => Ok(FlowSocket::Tcp(stream)),
                Some(tls) => tls
                    .connect(stream)
                    .map_err(|reason| ClientError::Tls { flow, reason }),
            }
        })
        .collect()
}

/// Reads the server's answers to a flow's hellos: a cookie turns the hello repeated into
/// one that carries it back, which proves this socket's address to the server.
fn take_cookie(socket: &UdpSocket, flow: u32, hello: &mut Vec<u8>) {
    let mut buffer = [0u8; 64];
    while let Ok(n) = socket.recv(&mut buffer) {
        if let Some(cookie) = linerate_proto::address_check::parse_challenge(&buffer[..n], flow) {
            if let Ok(plain) = <[u8; HELLO_LEN]>::try_from(&hello[..HELLO_LEN]) {
                *hello = validated_hello(&plain, &cookie).to_vec();
            }
        }
    }
}

/// Opens one UDP socket per flow, connected to the server's port for that flow, and
/// sends each flow's first hello.
fn open_udp_flows(
    addr: SocketAddr,
    config: &TestConfig,
    token: Token,
    ports: &[u16],
) -> Result<Vec<(UdpSocket, Vec<u8>)>, ClientError> {
    ports
        .iter()
        .enumerate()
        .map(|(flow, &port)| {
            let flow = flow as u32;
            let target = SocketAddr::new(addr.ip(), port);
            let fail = |source| ClientError::DataConnect {
                flow,
                addr: target,
                source,
            };
            let socket = sys::udp_socket_from(config.source.as_ref(), target).map_err(fail)?;
            sys::apply_udp_options(&socket, config).map_err(fail)?;
            sys::apply_udp_receive_default(&socket, config).map_err(fail)?;
            socket.connect(target).map_err(fail)?;
            // Non-blocking while the hellos go: the cookie is read between them.
            socket.set_nonblocking(true).map_err(fail)?;
            let greeting = hello(&token.0, flow);
            socket.send(&greeting).map_err(fail)?;
            Ok((socket, greeting.to_vec()))
        })
        .collect()
}

fn flow_specs(config: &TestConfig, sockets: Vec<FlowSocket>) -> Vec<FlowSpec> {
    sockets
        .into_iter()
        .enumerate()
        .map(|(id, socket)| FlowSpec::new(config, id as u32, Side::Client, socket))
        .collect()
}

/// Runs a test against `target`, or against an in-process server when there is none.
pub fn run_test(
    target: Option<SocketAddr>,
    options: &ClientOptions,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<Report, ClientError> {
    let mut report = match target {
        Some(addr) => run(addr, options, cancel, progress),
        None => run_local(options, cancel, progress),
    }?;
    if let Some(warning) = target.and_then(|addr| fragmented_datagrams(&options.config, addr)) {
        report.warnings.push(warning);
    }
    Ok(report)
}

/// A UDP stream whose datagrams exceed what the route to `target` carries in one packet:
/// each leaves as IP fragments, so the path sees more, smaller frames, and losing any
/// fragment loses the datagram (an IPv6 route carries 20 bytes less than an IPv4 one, so
/// `-l 1472` fragments there).
fn fragmented_datagrams(config: &TestConfig, target: SocketAddr) -> Option<String> {
    if config.protocol != linerate_model::Protocol::Udp {
        return None;
    }
    let largest = linerate_engine::sys::udp_payload_for(target).ok()?;
    fragmented_warning(config.length, largest, target)
}

fn fragmented_warning(length: u64, largest: u64, target: SocketAddr) -> Option<String> {
    if largest == 0 || length <= largest {
        return None;
    }
    let fragments = length.div_ceil(largest);
    let family = if target.is_ipv4() { "IPv4" } else { "IPv6" };
    Some(format!(
        "datagrams of {length} bytes exceed the {largest} bytes the route to {} ({family}) \
         carries in one packet: each left as {fragments} IP fragments, and losing any \
         fragment lost the datagram (-l {largest} or less keeps them whole)",
        target.ip()
    ))
}

/// Runs a test against an in-process server on loopback: "measure this machine" with no
/// server to start by hand.
pub fn run_local(
    options: &ClientOptions,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<Report, ClientError> {
    let local = LocalServer::start(|config| {
        config.drain = options.drain;
        config.key = options.key.clone();
        config.tls_identity = Arc::new(crate::secure::ServerIdentity::new(
            options.local_identity.clone(),
        ));
        config.mptcp = options.config.source.as_ref().is_some_and(|s| s.mptcp);
    })
    .map_err(ClientError::LocalServer)?;
    let result = run(local.addr, options, cancel, progress);
    local.shutdown.store(true, Ordering::Relaxed);
    let _ = local.handle.join();
    result
}

#[cfg(test)]
mod tests {
    use super::fragmented_warning;
    use std::net::SocketAddr;

    #[test]
    fn a_datagram_over_the_routes_payload_is_named_as_fragmented() {
        let v6: SocketAddr = "[fd00::2]:5201".parse().unwrap();
        let warning = fragmented_warning(1472, 1452, v6).expect("1472 > 1452 fragments");
        assert!(warning.contains("1472 bytes exceed the 1452"), "{warning}");
        assert!(
            warning.contains("IPv6") && warning.contains("2 IP fragments"),
            "{warning}"
        );
        let v4: SocketAddr = "10.0.0.2:5201".parse().unwrap();
        assert_eq!(fragmented_warning(1472, 1472, v4), None);
        assert_eq!(fragmented_warning(1400, 1472, v4), None);
        // A route whose MTU could not be read says nothing rather than a wrong figure.
        assert_eq!(fragmented_warning(1472, 0, v4), None);
    }
}
