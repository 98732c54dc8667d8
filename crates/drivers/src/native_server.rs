//! A linerate client's test on the server: the thread that drives a sans-IO
//! `ServerSession` for one control connection and, once the test starts, a `DataPlane`.
//! Whatever ends the test (completion, the client vanishing, a protocol error, shutdown),
//! the thread drops the plane and every socket of the test before it exits.

use crate::access::canonical;
use crate::access::RateBook;
use crate::control::Control;
use linerate_engine::flow::{FlowSocket, FlowSpec, Side};
use linerate_engine::plane::{default_threads, DataPlane, PlaneSetup};
use linerate_engine::sys;
use linerate_model::clock::UnixTime;
use linerate_model::Protocol;
use linerate_proto::datagram::{parse_hello, parse_validated_hello, tag_of, Framing};
use linerate_proto::{Machine, Offer, RefuseCode, ServerEvent, ServerSession, SessionError, Token};
use linerate_report::{Direction, Role, TestConfig, Workload};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::served::{Served, Step};
use crate::server_state::{random_token, ServerState};

/// A test's data flows on the server, from its acceptance until its plane takes them:
/// one variant per way a protocol's flows arrive, each with what it needs, so that adding
/// a protocol is a compile error wherever flows are handled.
enum Flows {
    /// No test accepted yet.
    None,
    /// TCP (plain or TLS): connections handed over by the acceptor, each in its flow's
    /// slot as it comes.
    Tcp {
        from: FlowsIn,
        slots: Vec<Option<FlowSocket>>,
    },
    /// UDP: a socket per flow, connected once its hello has proven its address.
    Udp(UdpFlows),
    /// crr: the listener each transaction's connection arrives at, once the test runs.
    Crr(std::net::TcpListener),
    /// QUIC: this side's QUIC thread, until its streams are open.
    Quic(Arc<linerate_engine::quic::QuicSide>),
    /// Every flow is in: what the plane starts with.
    Ready(Ready),
    /// The plane has them.
    Started,
}

/// A test's flows once all are in.
enum Ready {
    /// Connections and sockets, one per flow, with the framing of a UDP test's datagrams.
    Sockets {
        sockets: Vec<FlowSocket>,
        framing: Option<Framing>,
    },
    Crr(std::net::TcpListener),
    Quic(Arc<linerate_engine::quic::QuicSide>),
}

/// A UDP test's flows as their hellos arrive.
struct UdpFlows {
    /// One socket per flow, and whether its hello has connected it.
    sockets: Vec<(UdpSocket, bool)>,
    /// The cookies the hellos must carry back (crate address_check).
    cookies: linerate_proto::address_check::AddressCookies,
    token: [u8; 16],
    /// Hellos refused so far (logged once per test).
    refused: u64,
}

/// What a test thread holds; dropping it frees every resource of the test.
struct TestState {
    /// The token the acceptor hands this test's connections by, while registered there.
    registered: Option<Token>,
    flows: Flows,
    /// The address the test's control connection arrived on.
    local_ip: std::net::IpAddr,
    /// The plane, the test's place among the running tests, its rate share.
    served: Served,
    /// When the server said the flows were ready: the client starts its clock after
    /// hearing it, so the client's lead over this side is at most the time since.
    ready_at: Option<Instant>,
    /// The test asked for, once asked.
    config: Option<linerate_model::TestConfig>,
}

impl TestState {
    fn new(local_ip: std::net::IpAddr) -> TestState {
        TestState {
            registered: None,
            flows: Flows::None,
            local_ip,
            served: Served::default(),
            ready_at: None,
            config: None,
        }
    }

    /// Takes in the flows' connections, hellos or streams that arrived; `Some` once, when
    /// they are all in (`Err`: one could not be taken). A crr test has none to wait for.
    fn take_flows(
        &mut self,
        shared: &Arc<ServerState>,
        id: u64,
        peer: SocketAddr,
    ) -> Option<Result<(), String>> {
        // Take in what arrived, and see whether every flow is in.
        let all_in = match &mut self.flows {
            Flows::None | Flows::Ready(_) | Flows::Started => return None,
            Flows::Tcp { from, slots } => {
                while let Some((flow, arrived)) = from.try_recv() {
                    let socket = match arrived {
                        Ok(socket) => socket,
                        Err(why) => return Some(Err(format!("data connection {flow}: {why}"))),
                    };
                    // The test's options (its marks among them) hold from here: the
                    // client sends once told the flows are ready, before this side's
                    // plane starts, and the acknowledgements of that data carry them.
                    if let (Some(stream), Some(config)) = (socket.tcp(), &self.config) {
                        if let Err(e) = sys::apply_options(stream, config, false) {
                            return Some(Err(format!("data connection {flow}: {e}")));
                        }
                    }
                    match slots.get_mut(flow as usize) {
                        Some(slot @ None) => *slot = Some(socket),
                        _ => shared.log(&format!("test {id}: refused data connection for flow {flow}: out of range or duplicate")),
                    }
                }
                slots.iter().all(Option::is_some)
            }
            Flows::Udp(udp) => take_udp_hellos(shared, id, peer, udp),
            Flows::Quic(side) => match side.poll_ready() {
                None => false,
                Some(Ok(())) => true,
                Some(Err(why)) => {
                    shared.refused(peer, &format!("test {id}: {why}"));
                    return Some(Err(why));
                }
            },
            // crr connections come one per transaction once the test runs.
            Flows::Crr(_) => true,
        };
        if !all_in {
            return None;
        }
        let ready = match std::mem::replace(&mut self.flows, Flows::Started) {
            Flows::Tcp { slots, .. } => Ready::Sockets {
                sockets: slots.into_iter().flatten().collect(),
                framing: None,
            },
            Flows::Udp(udp) => Ready::Sockets {
                framing: Some(Framing::Native {
                    tag: tag_of(&udp.token),
                }),
                sockets: udp
                    .sockets
                    .into_iter()
                    .map(|(socket, _)| FlowSocket::Udp(socket))
                    .collect(),
            },
            Flows::Quic(side) => Ready::Quic(side),
            Flows::Crr(listener) => Ready::Crr(listener),
            other @ (Flows::None | Flows::Ready(_) | Flows::Started) => {
                self.flows = other;
                return None;
            }
        };
        unregister(shared, self);
        self.flows = Flows::Ready(ready);
        Some(Ok(()))
    }

    /// How long the control connection may wait: short while flows arrive, longer while
    /// the plane runs, longest while nothing is due.
    fn wait(&self) -> Duration {
        match self.flows {
            Flows::Tcp { .. } | Flows::Udp(_) => Duration::from_millis(10),
            _ if self.served.plane.is_some() => Duration::from_millis(50),
            _ => Duration::from_millis(200),
        }
    }
}

// Long: the test thread's loop: one match over the session's events, then the flows' and
// the plane's steps each turn.
pub(crate) fn serve_test(
    shared: &Arc<ServerState>,
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
        if shared.blocked_for_failures(peer) {
            return;
        }
        match crate::server_state::random_nonce() {
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
    let mut state = TestState::new(local_ip);
    let outcome = loop {
        let mut closed = None;
        while let Some(event) = session.poll_event() {
            match event {
                ServerEvent::TestRequested(config) => {
                    accept_test(shared, id, peer, &mut session, &mut state, &config);
                    state.config = Some(*config);
                }
                ServerEvent::Start(config) => {
                    if let Err(e) = start_plane(shared, &config, &mut state, peer) {
                        session.abort(format!("cannot start the data plane: {e}"));
                    } else {
                        shared.log(&format!("test {id} from {peer}: started"));
                    }
                }
                ServerEvent::EndRequested => {
                    if let Some(plane) = &state.served.plane {
                        shared.log(&format!("test {id} from {peer}: ended early by the client"));
                        plane.end_now();
                    }
                }
                ServerEvent::Closed(result) => closed = Some(result),
            }
        }
        if let Some(result) = closed {
            break result;
        }
        match state.take_flows(shared, id, peer) {
            Some(Ok(())) => {
                session.flows_ready(Instant::now());
                state.ready_at.get_or_insert_with(Instant::now);
            }
            Some(Err(why)) => session.abort(why),
            None => {}
        }
        match state.served.step(shared, &format!("test {id}"), peer, true) {
            Step::Finished(result) => {
                if let (Some(sink), Some(config)) = (&shared.config.served_tests, &state.config) {
                    (sink.0)(crate::server_state::Served::Test(
                        &crate::server_state::ServedTest {
                            peer,
                            local: state.local_ip,
                            config: config.clone(),
                            side: (*result).clone(),
                            ended_at: UnixTime::now().seconds(),
                        },
                    ));
                }
                session.finish(Instant::now(), *result)
            }
            Step::Stop(why) => session.abort(why),
            Step::Running => {}
        }
        control.step(&mut session, state.wait());
    };
    control.flush(&mut session);
    state.served.end(shared);
    unregister(shared, &mut state);
    drop(state);
    match outcome {
        Ok(()) => shared.log(&format!("test {id} from {peer}: ended")),
        Err(e @ (SessionError::Refused { .. } | SessionError::Auth(_))) => {
            if matches!(
                e,
                SessionError::Auth(_)
                    | SessionError::Refused {
                        code: RefuseCode::Unauthorized,
                        ..
                    }
            ) {
                shared.failed_proof(peer);
            }
            shared.refused(peer, &format!("test {id}: {e}"))
        }
        Err(e) => shared.log(&format!("test {id} from {peer}: ended: {e}")),
    }
}

fn unregister(shared: &ServerState, state: &mut TestState) {
    if let Some(token) = state.registered.take() {
        shared
            .registry
            .lock()
            .expect("registry lock")
            .remove(&token);
        shared
            .tls_registry
            .lock()
            .expect("TLS registry lock")
            .remove(&token);
    }
}

/// Where a test's data connections arrive: plain from the acceptor, or encrypted from
/// their handshake threads (with the reason when a handshake failed).
enum FlowsIn {
    Plain(Receiver<(u32, std::net::TcpStream)>),
    Tls(Receiver<(u32, Result<FlowSocket, String>)>),
}

impl FlowsIn {
    fn try_recv(&self) -> Option<(u32, Result<FlowSocket, String>)> {
        match self {
            FlowsIn::Plain(r) => r.try_recv().ok().map(|(f, s)| (f, Ok(FlowSocket::Tcp(s)))),
            FlowsIn::Tls(r) => r.try_recv().ok(),
        }
    }
}

/// Whether this server runs the test's encryption, and with which certificate: `Err` is
/// the reason to refuse it.
fn tls_for(
    shared: &ServerState,
    config: &TestConfig,
) -> Result<Option<Arc<crate::secure::ServerTls>>, (RefuseCode, String)> {
    use crate::secure::TlsMode;
    match (&config.tls, shared.config.tls_mode) {
        (Some(_), TlsMode::Off) => Err((
            RefuseCode::Invalid,
            "this server runs no encrypted tests (it was started with --no-tls)".into(),
        )),
        (None, TlsMode::Required) => Err((
            RefuseCode::Invalid,
            "this server runs only encrypted tests (--require-tls): add --tls".into(),
        )),
        (None, _) => Ok(None),
        (Some(_), _)
            if config.protocol == linerate_model::Protocol::Udp
                || config.workload == Workload::Crr =>
        {
            Err((
                RefuseCode::Invalid,
                "TLS runs over TCP streams and rr connections, not UDP or crr".into(),
            ))
        }
        (Some(settings), _) => {
            if let Err(why) = settings.cipher.parse::<linerate_tls::Cipher>() {
                return Err((RefuseCode::Invalid, why));
            }
            shared.config.tls_identity.load().map(Some).map_err(|why| {
                (
                    RefuseCode::Invalid,
                    format!("the server has no usable certificate: {why}"),
                )
            })
        }
    }
}

fn accept_test(
    shared: &Arc<ServerState>,
    id: u64,
    peer: SocketAddr,
    session: &mut ServerSession,
    state: &mut TestState,
    config: &TestConfig,
) {
    if let Err(why) = state.served.take_place(shared) {
        return session.refuse(RefuseCode::Busy, why);
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
        match RateBook::reserve(
            &shared.rates,
            shared.gate.policy.client(peer.ip()),
            asked,
            most,
        ) {
            Ok(share) => state.served.rate_share = Some(share),
            Err(why) => return session.refuse(RefuseCode::OverLimit, why),
        }
    }
    let tls = match tls_for(shared, config) {
        Ok(tls) => tls,
        Err((code, why)) => return session.refuse(code, why),
    };
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
                state.flows = Flows::Crr(listener);
                shared.log(&format!(
                    "test {id} from {peer}: accepted: {}",
                    config.describe()
                ));
                return session.accept_crr(Instant::now(), id, token, port);
            }
            Err(e) => return session.abort(format!("cannot open a TCP listener: {e}")),
        }
    }
    let mut quic_ports = Vec::new();
    // Each protocol's flows arrive their own way: the match names every protocol.
    match config.protocol {
        Protocol::Quic => {
            let Some(tls) = &tls else {
                return session.abort("a QUIC test without TLS".into());
            };
            match open_quic(shared, config, state, peer, token, tls) {
                Ok(ports) => quic_ports = ports,
                Err(e) => return session.abort(format!("cannot open the QUIC endpoint: {e}")),
            }
        }
        Protocol::Udp => match open_udp(config, state, token) {
            Ok(ports) => udp_ports = ports,
            Err(why) => return session.abort(why),
        },
        Protocol::Tcp => wait_for_tcp(shared, config, state, token, tls.as_ref()),
    }
    shared.log(&format!(
        "test {id} from {peer}: accepted: {}",
        config.describe()
    ));
    let offer = Offer {
        udp_ports,
        tls_fingerprint: tls.map(|t| t.fingerprint.clone()),
        quic_ports,
        ..Offer::default()
    };
    session.accept_offer(Instant::now(), id, token, offer);
}

/// A UDP test: a socket per flow on the control connection's address, and the cookies
/// that prove each client hello's address; the ports to announce.
fn open_udp(config: &TestConfig, state: &mut TestState, token: Token) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    let mut sockets = Vec::new();
    for _ in 0..config.connections() {
        let bound = UdpSocket::bind(SocketAddr::new(state.local_ip, 0)).and_then(|socket| {
            socket.set_nonblocking(true)?;
            sys::apply_udp_options(&socket, config)?;
            sys::apply_udp_receive_default(&socket, config)?;
            Ok((socket.local_addr()?.port(), socket))
        });
        match bound {
            Ok((port, socket)) => {
                ports.push(port);
                sockets.push((socket, false));
            }
            Err(e) => return Err(format!("cannot open a UDP socket: {e}")),
        }
    }
    let cookies = crate::server_state::random_cookies()
        .map_err(|e| format!("no randomness for the UDP cookies: {e}"))?;
    state.flows = Flows::Udp(UdpFlows {
        sockets,
        cookies,
        token: token.0,
        refused: 0,
    });
    Ok(ports)
}

/// A TCP test: its data connections, plain or TLS, will arrive at the acceptor with the
/// token, which hands them to this test.
fn wait_for_tcp(
    shared: &ServerState,
    config: &TestConfig,
    state: &mut TestState,
    token: Token,
    tls: Option<&Arc<crate::secure::ServerTls>>,
) {
    let from = match tls {
        Some(tls) => {
            let (sender, receiver) = channel();
            let waiting = crate::secure::TlsWaiting {
                sender,
                tls: tls.clone(),
                ktls: config.tls.as_ref().is_some_and(|t| t.ktls),
                marks: config.marks,
            };
            shared
                .tls_registry
                .lock()
                .expect("TLS registry lock")
                .insert(token, waiting);
            FlowsIn::Tls(receiver)
        }
        None => {
            let (sender, receiver) = channel();
            shared
                .registry
                .lock()
                .expect("registry lock")
                .insert(token, sender);
            FlowsIn::Plain(receiver)
        }
    };
    state.registered = Some(token);
    state.flows = Flows::Tcp {
        from,
        slots: (0..config.connections()).map(|_| None).collect(),
    };
}

/// A QUIC test: a QUIC worker per worker the client asked for, up to this side's
/// threads for the test and its CPUs, each with a UDP socket on the control connection's
/// address and a thread that takes the client's connections there (from its host only);
/// the ports to announce, in the workers' order.
fn open_quic(
    shared: &ServerState,
    config: &TestConfig,
    state: &mut TestState,
    peer: SocketAddr,
    token: Token,
    tls: &crate::secure::ServerTls,
) -> io::Result<Vec<u16>> {
    let asked = config.quic.as_ref().map_or(1, |q| q.workers);
    let threads = shared
        .config
        .threads
        .unwrap_or_else(|| default_threads(config.connections() as usize));
    let workers = linerate_model::quic_workers(
        asked.min(config.connections()),
        u32::try_from(threads).unwrap_or(u32::MAX),
        linerate_engine::sys::cpus(),
    );
    let mut sockets = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..workers {
        let socket = UdpSocket::bind(SocketAddr::new(state.local_ip, 0))?;
        ports.push(socket.local_addr()?.port());
        sockets.push(socket);
    }
    let plan = linerate_engine::quic::QuicPlan::of(config, token, shared.config.timeouts.flows);
    let side =
        linerate_engine::quic::QuicSide::serve(sockets, tls.config.clone(), peer.ip(), plan)?;
    state.flows = Flows::Quic(Arc::new(side));
    Ok(ports)
}

/// Starts the test's plane with its flows, all in.
fn start_plane(
    shared: &ServerState,
    config: &TestConfig,
    state: &mut TestState,
    peer: SocketAddr,
) -> io::Result<()> {
    let ready = match std::mem::replace(&mut state.flows, Flows::Started) {
        Flows::Ready(ready) => ready,
        other => {
            state.flows = other;
            return Err(io::Error::other("the flows are not all in"));
        }
    };
    let mut specs = Vec::new();
    let mut udp_framing = None;
    match ready {
        Ready::Crr(listener) => {
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
        Ready::Quic(side) => {
            for id in 0..config.connections() {
                specs.push(FlowSpec::new(
                    config,
                    id,
                    Side::Server,
                    FlowSocket::Quic(side.clone()),
                ));
            }
        }
        Ready::Sockets { sockets, framing } => {
            udp_framing = framing;
            // A TCP flow's options were set when it was taken in (take_flows).
            for (id, socket) in sockets.into_iter().enumerate() {
                specs.push(FlowSpec::new(config, id as u32, Side::Server, socket));
            }
        }
    }
    let setup = PlaneSetup {
        trip_times: None,
        tcp_bursts: None,
        threads: shared
            .config
            .threads
            .unwrap_or_else(|| default_threads(config.connections() as usize)),
        drain: shared.config.drain,
        udp_framing,
        udp_template: Vec::new(),
        pin_cpus: Vec::new(),
        budget: None,
        peer_lead: state.ready_at.map_or(Duration::ZERO, |at| at.elapsed()),
        ..PlaneSetup::default()
    };
    state.served.plane = Some(DataPlane::start(Instant::now(), config, specs, setup)?);
    Ok(())
}

/// Reads the hellos waiting on a UDP test's sockets and connects each flow's socket to
/// the address its hello came from; true when every flow has one. A hello is taken only
/// from the host that holds the control connection, with the test's token and the
/// socket's own flow id, and only once its address has proven it receives there: a plain
/// hello is answered with a cookie alone, no larger than itself, and the hello that
/// carries the cookie back connects the flow (crate address_check). A forged source gets
/// the cookie at most, never the test's traffic.
fn take_udp_hellos(shared: &ServerState, id: u64, peer: SocketAddr, udp: &mut UdpFlows) -> bool {
    let mut buffer = [0u8; 64];
    let cookies = &udp.cookies;
    for (flow, (socket, connected)) in udp.sockets.iter_mut().enumerate() {
        let flow = flow as u32;
        while !*connected {
            let Ok((len, from)) = socket.recv_from(&mut buffer) else {
                break;
            };
            let datagram = &buffer[..len];
            let ours = |token: [u8; 16], said: u32| {
                token == udp.token && said == flow && canonical(from.ip()) == canonical(peer.ip())
            };
            if parse_hello(datagram).is_some_and(|(token, said)| ours(token, said)) {
                let _ = socket.send_to(&cookies.challenge(from, flow), from);
                continue;
            }
            let proven = parse_validated_hello(datagram).is_some_and(|(token, said, cookie)| {
                ours(token, said) && cookies.verify(from, flow, &cookie)
            });
            if proven && socket.connect(from).is_ok() {
                *connected = true;
            } else {
                udp.refused += 1;
                if udp.refused == 1 {
                    shared.log(&format!(
                        "test {id}: refused a datagram from {from} on flow {flow}'s port: not a hello of this test from {} with its cookie",
                        peer.ip()
                    ));
                }
            }
        }
    }
    udp.sockets.iter().all(|(_, connected)| *connected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_state::ServerConfig;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    fn shared() -> Arc<ServerState> {
        let mut config = ServerConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        config.log = false;
        Arc::new(ServerState::new(config, None))
    }

    fn config(parallel: u32) -> TestConfig {
        TestConfig {
            quic: None,
            source: None,
            marks: None,
            call: None,
            video: None,
            video_back: None,
            qoo: None,
            tls: None,
            protocol: Protocol::Tcp,
            target: "test".into(),
            port: 5201,
            direction: Direction::Forward,
            parallel,
            threads: 1,
            time_s: 1.0,
            omit_s: 0.0,
            interval_s: 1.0,
            length: 1400,
            window: None,
            mss: None,
            nodelay: false,
            congestion: None,
            rate_bps: None,
            pps: None,
            gso: false,
            gro: false,
            per_flow: false,
            connect_timeout_s: 5.0,
            workload: Workload::Stream,
            rr: None,
            observe: false,
        }
    }

    /// A connected pair of loopback streams: the end a data connection arrives as.
    fn arriving() -> TcpStream {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        listener.accept().unwrap().0
    }

    const PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 1);

    /// A TCP test's connections arrive in any order, a duplicate is refused, and the
    /// flows are ready once, when the last is in: the token is then unregistered (no
    /// later connection can join) and the plane gets every flow in its slot.
    #[test]
    fn a_tcp_test_is_ready_once_when_its_last_connection_arrives() {
        let shared = shared();
        let mut state = TestState::new(Ipv4Addr::LOCALHOST.into());
        let token = Token([7; 16]);
        wait_for_tcp(&shared, &config(2), &mut state, token, None);
        let sender = shared.registry.lock().unwrap()[&token].clone();
        assert_eq!(state.take_flows(&shared, 1, PEER), None);
        sender.send((1, arriving())).unwrap();
        sender.send((1, arriving())).unwrap();
        assert_eq!(
            state.take_flows(&shared, 1, PEER),
            None,
            "flow 0 is missing"
        );
        sender.send((0, arriving())).unwrap();
        assert_eq!(state.take_flows(&shared, 1, PEER), Some(Ok(())));
        assert!(shared.registry.lock().unwrap().is_empty());
        assert_eq!(state.take_flows(&shared, 1, PEER), None, "ready only once");
        let Flows::Ready(Ready::Sockets { sockets, framing }) = &state.flows else {
            panic!("the flows are ready")
        };
        assert_eq!((sockets.len(), framing.is_none()), (2, true));
    }

    /// A crr test has no flows to wait for: ready at once, its listener handed to the
    /// plane; a plane started before the flows are in is refused, not run short.
    #[test]
    fn a_crr_test_is_ready_at_once_and_a_plane_waits_for_its_flows() {
        let shared = shared();
        let mut state = TestState::new(Ipv4Addr::LOCALHOST.into());
        let early = start_plane(&shared, &config(1), &mut state, PEER).unwrap_err();
        assert!(early.to_string().contains("not all in"), "{early}");
        state.flows = Flows::Crr(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
        assert_eq!(state.take_flows(&shared, 2, PEER), Some(Ok(())));
        assert!(matches!(state.flows, Flows::Ready(Ready::Crr(_))));
        assert_eq!(state.take_flows(&shared, 2, PEER), None);
    }

    /// A UDP test's socket is connected only by a hello that carries its cookie back from
    /// the control connection's host: a plain hello gets the cookie, a hello from another
    /// flow's id is refused, and the flows are ready with the test's framing.
    #[test]
    fn a_udp_flow_is_ready_only_after_its_address_proves_itself() {
        let shared = shared();
        let mut state = TestState::new(Ipv4Addr::LOCALHOST.into());
        let token = Token([9; 16]);
        let ports = open_udp(&config(1), &mut state, token).unwrap();
        let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        client.connect((Ipv4Addr::LOCALHOST, ports[0])).unwrap();
        let peer = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 40_000);
        let wait = |state: &mut TestState| {
            let until = Instant::now() + Duration::from_secs(2);
            loop {
                if let Some(ready) = state.take_flows(&shared, 3, peer) {
                    return Some(ready);
                }
                if Instant::now() > until {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        client
            .send(&linerate_proto::datagram::hello(&token.0, 1))
            .unwrap();
        let plain = linerate_proto::datagram::hello(&token.0, 0);
        client.send(&plain).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(state.take_flows(&shared, 3, peer), None, "no proof yet");
        // The answer is the cookie for flow 0; flow 1's hello was refused.
        let mut buffer = [0u8; 64];
        let n = client.recv(&mut buffer).unwrap();
        let cookie = linerate_proto::address_check::parse_challenge(&buffer[..n], 0)
            .expect("a cookie for flow 0");
        assert!(matches!(&state.flows, Flows::Udp(udp) if udp.refused == 1));
        client
            .send(&linerate_proto::datagram::validated_hello(&plain, &cookie))
            .unwrap();
        assert_eq!(wait(&mut state), Some(Ok(())));
        let Flows::Ready(Ready::Sockets { sockets, framing }) = &state.flows else {
            panic!("the flow is ready")
        };
        assert_eq!(sockets.len(), 1);
        assert_eq!(
            *framing,
            Some(Framing::Native {
                tag: tag_of(&token.0)
            })
        );
    }
}
