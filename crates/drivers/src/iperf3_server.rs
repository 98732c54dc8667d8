//! Serving iperf3 clients on a linerate server's port.
//!
//! The acceptor hands over a connection whose first bytes were an iperf3 cookie (and
//! that no test is waiting for as a stream). Its thread drives an `Iperf3Server`
//! session and, once the streams are in, the same data plane as a native test, so an
//! iperf3 client is measured the way a linerate client is: at the receiver, over the
//! window after the warm-up, with CPU from both `/proc/stat` and the test's own threads.
//!
//! Unlike iperf3's own server, tests run side by side: each has its own streams (TCP
//! streams are matched by cookie; UDP streams are taken one test at a time from the
//! port's UDP socket, since iperf3's UDP connect datagram names no test) and its own
//! workers.

use crate::access::RateBook;
use crate::control::Control;
use crate::iperf3::{budget_of, config_of, output_text, results_of, side_from_results};
use crate::served::{Served, Step};
use crate::server_state::{ServedTool, ServerState};
use linerate_engine::flow::{FlowSocket, FlowSpec, Side};
use linerate_engine::plane::{DataPlane, PlaneSetup};
use linerate_engine::sys;
use linerate_model::clock::UnixTime;
use linerate_proto::datagram::Framing;
use linerate_proto::iperf3::server::{Event, Iperf3Server, MAX_COUNTED_RUN};
use linerate_proto::iperf3::{code, Params, Results, Transport, UDP_REPLY};
use linerate_report::units::{format_rate, Scale};
use linerate_report::{Report, Role, SideResult, TestConfig};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a test waits for its turn at the UDP socket, and then for its UDP streams.
const UDP_SETUP: Duration = Duration::from_secs(10);
/// How long receivers read on after the client's TEST_END: its senders have stopped, so
/// only bytes already in flight remain.
const DRAIN: Duration = Duration::from_millis(200);

/// The UDP socket iperf3 clients send their connect datagrams to: the server's port,
/// shared (SO_REUSEADDR) with each stream's socket, which is bound to the same port and
/// connected to its client.
pub(crate) fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = udp_socket(addr)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

fn udp_socket(addr: SocketAddr) -> io::Result<socket2::Socket> {
    let socket = crate::sys::dual_stack(addr, socket2::Type::DGRAM)?;
    socket.set_reuse_address(true)?;
    Ok(socket)
}

/// What a test holds; dropping it frees every resource of the test.
struct Test {
    id: u64,
    peer: SocketAddr,
    cookie: String,
    config: Option<TestConfig>,
    streams_in: Option<Receiver<TcpStream>>,
    streams: Vec<TcpStream>,
    /// Copies of the TCP streams, closed when the test ends: the workers drop theirs at
    /// the end of the drain, before the client has heard the results.
    held: Vec<TcpStream>,
    /// The plane, the test's place among the running tests, its rate share.
    served: Served,
    ending: bool,
}

// Long: the iperf3 test thread's loop: one match over iperf3's states, then the plane's
// step each turn.
pub(crate) fn serve(
    shared: &Arc<ServerState>,
    stream: TcpStream,
    cookie: String,
    peer: SocketAddr,
) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let local = stream
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut control = match Control::new(stream) {
        Ok(control) => control,
        Err(e) => {
            shared.log(&format!(
                "iperf3 test {id} from {peer}: control socket setup failed: {e}"
            ));
            return;
        }
    };
    let mut session = Iperf3Server::new(Instant::now());
    let mut test = Test {
        id,
        peer,
        cookie,
        config: None,
        streams_in: None,
        streams: Vec::new(),
        held: Vec::new(),
        served: Served::default(),
        ending: false,
    };
    // What the report of the test is assembled from once it ends.
    let mut started_at = 0.0;
    let mut served: Option<SideResult> = None;
    let mut client_results: Option<Results> = None;
    let outcome = loop {
        let mut closed = None;
        while let Some(event) = session.poll_event() {
            match event {
                Event::Closed(result) => closed = Some(result),
                Event::Params(params) => {
                    started_at = UnixTime::now().seconds();
                    accept(
                        shared,
                        &mut test,
                        &mut session,
                        &mut control,
                        &params,
                        local,
                    )
                }
                Event::EndRequested => end_requested(&mut test, &mut session),
                Event::ClientResults(theirs) => {
                    let sent: u64 = theirs.streams.iter().map(|s| s.bytes).sum();
                    shared.log(&format!(
                        "iperf3 test {id} from {peer}: the client reports {sent} bytes over its streams"
                    ));
                    client_results = Some(theirs);
                }
            }
        }
        if let Some(result) = closed {
            break result;
        }
        take_streams(shared, &mut test, &mut session);
        match test
            .served
            .step(shared, &format!("iperf3 test {id}"), peer, test.ending)
        {
            Step::Finished(side) => served = Some(finish(&mut session, *side, id, peer)),
            Step::Stop(why) => session.terminate(why),
            Step::Running => {}
        }
        // Short waits while streams arrive or the test ends.
        let busy = test.streams_in.is_some() || test.ending;
        control.step(
            &mut session,
            Duration::from_millis(if busy { 10 } else { 100 }),
        );
    };
    control.flush(&mut session);
    test.served.end(shared);
    unregister(shared, &mut test);
    if let (Ok(()), Some(ours), Some(theirs)) = (&outcome, served, client_results) {
        keep_report(shared, &test, &session, started_at, ours, &theirs);
    }
    match outcome {
        Ok(()) => shared.log(&format!("iperf3 test {id} from {peer}: ended")),
        Err(e) => shared.log(&format!("iperf3 test {id} from {peer}: ended: {e}")),
    }
}

/// The plane finished: the session sends its results (and this side's text, where the
/// client asked for it); the side's figures are kept for the report.
fn finish(session: &mut Iperf3Server, side: SideResult, id: u64, peer: SocketAddr) -> SideResult {
    let params = session.params().cloned().unwrap_or_default();
    let output = params.get_server_output.then(|| {
        output_text(
            &side,
            &format!("linerate server, iperf3 test {id} from {peer}"),
        )
    });
    session.finish(Instant::now(), results_of(&side, params.transport, output));
    side
}

/// The client asked to end the test: the plane ends now, or the test never started.
fn end_requested(test: &mut Test, session: &mut Iperf3Server) {
    test.ending = true;
    match &test.served.plane {
        Some(plane) => plane.end_now(),
        None => session.terminate("the client ended the test before it started".into()),
    }
}

/// Hands the finished test's report to the server's report sink, when it has one: the
/// iperf3 client's side from what it reported, ours from the plane.
fn keep_report(
    shared: &ServerState,
    test: &Test,
    session: &Iperf3Server,
    started_at: f64,
    ours: SideResult,
    theirs: &Results,
) {
    let (Some(sink), Some(mut config)) = (&shared.config.foreign_reports, test.config.clone())
    else {
        return;
    };
    let params = session.params().cloned().unwrap_or_default();
    if params.time == 0 {
        // A counted run (-n, -k) lasted as long as its bytes took.
        config.time_s = ours.flows.iter().map(|f| f.window_s).fold(0.0, f64::max);
    }
    // The iperf3 client is the test's client: its side is `local`, ours `remote`.
    let client = side_from_results(theirs, &ours, params.transport, "iperf3");
    let mut report = Report::assemble(
        &config.test_name(),
        &format!("linerate {}", env!("CARGO_PKG_VERSION")),
        started_at,
        config,
        client,
        ours,
    );
    report.warnings.push(format!(
        "served to an iperf3 client at {}: the client side's figures are what it reported",
        test.peer
    ));
    (sink.0)(ServedTool::Iperf3, test.id, &report);
}

fn unregister(shared: &ServerState, test: &mut Test) {
    if test.streams_in.take().is_some() {
        shared
            .iperf3_streams
            .lock()
            .expect("iperf3 registry lock")
            .remove(&test.cookie);
    }
}

fn accept(
    shared: &Arc<ServerState>,
    test: &mut Test,
    session: &mut Iperf3Server,
    control: &mut Control,
    params: &Params,
    local: SocketAddr,
) {
    let (id, peer) = (test.id, test.peer);
    if let Some(auth) = &shared.config.iperf3_auth {
        if shared.blocked_for_failures(peer) {
            return session
                .refuse_auth("too many failed attempts from this address; try later".into());
        }
        let token = params.authtoken.as_deref();
        match auth.check(
            token,
            params.use_pkcs1_padding,
            UnixTime::now().whole_seconds() as i64,
        ) {
            Ok(user) => shared.log(&format!(
                "iperf3 test {id} from {peer}: authenticated as '{user}'"
            )),
            Err(e) => {
                shared.failed_proof(peer);
                shared.refused(peer, &format!("iperf3 test {id}: {e}"));
                return session.refuse_auth(e.to_string());
            }
        }
    }
    if let Err(why) = test.served.take_place(shared) {
        shared.log(&format!(
            "iperf3 test {id} from {peer}: refused as busy: {why}"
        ));
        return session.busy(why);
    }
    if let Err((code, why)) = check_limits(shared, test, params) {
        shared.refused(peer, &format!("iperf3 test {id}: {why}"));
        return session.refuse(code, why);
    }
    let most = shared.config.limits.max_duration_s;
    let counted_cap = MAX_COUNTED_RUN.min(Duration::from_secs_f64(most));
    let config = match config_of(params, &peer.ip().to_string(), local.port(), counted_cap) {
        Ok(config) => config,
        Err(why) => {
            shared.refused(peer, &format!("iperf3 test {id}: {why}"));
            return session.refuse(code::BLOCK_SIZE, why);
        }
    };
    if params.time == 0 {
        shared.log(&format!(
            "iperf3 test {id} from {peer}: a counted test, cut at {} s if its count is not reached by then",
            counted_cap.as_secs_f64()
        ));
    }
    shared.log(&format!(
        "iperf3 test {id} from {peer}: accepted: {}",
        params.describe()
    ));
    test.config = Some(config.clone());
    match params.transport {
        Transport::Tcp => {
            let (sender, receiver) = channel();
            shared
                .iperf3_streams
                .lock()
                .expect("iperf3 registry lock")
                .insert(test.cookie.clone(), sender);
            test.streams_in = Some(receiver);
            session.accept(Instant::now());
        }
        Transport::Udp => match take_udp_streams(shared, test, session, control, &config) {
            Ok(sockets) => {
                let specs = sockets
                    .into_iter()
                    .enumerate()
                    .map(|(i, socket)| {
                        FlowSpec::new(&config, i as u32, Side::Server, FlowSocket::Udp(socket))
                    })
                    .collect();
                let framing = Framing::Iperf3 {
                    wide: params.udp_counters_64bit,
                };
                start(shared, test, session, specs, Some(framing), params);
            }
            Err(why) => {
                shared.log(&format!("iperf3 test {id} from {peer}: {why}"));
                session.refuse(code::CREATE_STREAM, why);
            }
        },
    }
}

/// The server's limits as they bind an iperf3 client: `--max-duration` (a timed test over
/// it is refused with iperf3's own duration error; a byte- or block-count test is cut
/// there), `--max-flows`, and `--max-rate` and `--max-rate-per-ip` by the bitrate it asks
/// (`-b`, per stream), as iperf3's `--server-bitrate-limit` does. `Err` is iperf3's error
/// code and why.
fn check_limits(
    shared: &ServerState,
    test: &mut Test,
    params: &Params,
) -> Result<(), (i32, String)> {
    let peer = test.peer;
    let most = shared.config.limits.max_duration_s;
    let asked = (params.time + params.omit) as f64;
    if params.time > 0 && asked > most {
        return Err((
            code::DURATION,
            format!("{asked} s asked, the server allows {most} s"),
        ));
    }
    // --max-flows binds iperf3 clients too: streams (both ways for --bidir) per test.
    let streams = u64::from(params.parallel) * if params.bidirectional { 2 } else { 1 };
    let most_flows = u64::from(shared.config.limits.max_flows);
    if streams > most_flows {
        let why = format!("{streams} streams asked, the server allows {most_flows}");
        return Err((code::NUM_STREAMS, why));
    }
    // --max-rate and --max-rate-per-ip bind iperf3 clients by the bitrate they ask (-b,
    // per stream), as iperf3's --server-bitrate-limit does.
    let asked = params.bandwidth.saturating_mul(streams) as f64;
    if let Some(limit) = shared.config.limits.max_rate_bps {
        if params.bandwidth == 0 || asked > limit as f64 {
            let why = format!(
                "{} asked, this server allows at most {} per test (ask with -b per stream)",
                if params.bandwidth == 0 {
                    "an unlimited rate".to_string()
                } else {
                    format!("{asked:.0} bit/s")
                },
                format_rate(limit as f64, Scale::Adaptive)
            );
            return Err((code::UNIMPLEMENTED, why));
        }
    }
    if let Some(limit) = shared.config.max_rate_per_ip {
        let reserved = if params.bandwidth == 0 {
            Err(
                "an unlimited rate asked; this server limits each address's rate (ask with -b)"
                    .to_string(),
            )
        } else {
            RateBook::reserve(
                &shared.rates,
                shared.gate.policy.client(peer.ip()),
                asked,
                limit,
            )
        };
        match reserved {
            Ok(share) => test.served.rate_share = Some(share),
            Err(why) => return Err((code::UNIMPLEMENTED, why)),
        }
    }
    Ok(())
}

/// Takes the test's TCP streams as they arrive, and starts the test when all are in.
fn take_streams(shared: &Arc<ServerState>, test: &mut Test, session: &mut Iperf3Server) {
    let Some(receiver) = &test.streams_in else {
        return;
    };
    let Some(config) = test.config.clone() else {
        return;
    };
    let wanted = config.connections() as usize;
    while let Ok(stream) = receiver.try_recv() {
        if test.streams.len() < wanted {
            test.streams.push(stream);
        } else {
            shared.log(&format!(
                "iperf3 test {}: refused a stream beyond the {wanted} asked for",
                test.id
            ));
        }
    }
    if test.streams.len() < wanted {
        return;
    }
    unregister(shared, test);
    let mut specs = Vec::with_capacity(wanted);
    for (i, stream) in test.streams.drain(..).enumerate() {
        if let Err(e) = sys::apply_options(&stream, &config, false) {
            return session.refuse(code::CREATE_STREAM, format!("stream options: {e}"));
        }
        if let Ok(copy) = stream.try_clone() {
            test.held.push(copy);
        }
        specs.push(FlowSpec::new(
            &config,
            i as u32,
            Side::Server,
            FlowSocket::Tcp(stream),
        ));
    }
    let params = session.params().cloned().unwrap_or_default();
    start(shared, test, session, specs, None, &params);
}

fn start(
    shared: &Arc<ServerState>,
    test: &mut Test,
    session: &mut Iperf3Server,
    specs: Vec<FlowSpec>,
    udp_framing: Option<Framing>,
    params: &Params,
) {
    let config = test.config.as_ref().expect("accepted");
    let setup = PlaneSetup {
        trip_times: None,
        tcp_bursts: None,
        peer_lead: Duration::ZERO,
        threads: shared.config.threads.unwrap_or(config.threads as usize),
        drain: DRAIN,
        udp_framing,
        udp_template: Vec::new(),
        pin_cpus: Vec::new(),
        // The client ends the test; a server sending in reverse stops at the count too.
        budget: budget_of(params).filter(|(role, _)| *role == Role::Send && params.reverse),
        ..PlaneSetup::default()
    };
    match DataPlane::start(Instant::now(), config, specs, setup) {
        Ok(plane) => {
            test.served.plane = Some(plane);
            session.streams_ready(Instant::now());
            shared.log(&format!(
                "iperf3 test {} from {}: started",
                test.id, test.peer
            ));
        }
        Err(e) => session.refuse(
            code::CREATE_STREAM,
            format!("cannot start the data plane: {e}"),
        ),
    }
}

/// Takes the test's UDP streams at the port's UDP socket: each connect datagram from the
/// client's host gets a socket of its own, bound to the port and connected to the
/// datagram's source, which answers it. The test holds the port's socket from before its
/// CREATE_STREAMS until its last stream, so another test's client cannot be sending
/// connect datagrams meanwhile.
fn take_udp_streams(
    shared: &ServerState,
    test: &Test,
    session: &mut Iperf3Server,
    control: &mut Control,
    config: &TestConfig,
) -> Result<Vec<UdpSocket>, String> {
    let deadline = Instant::now() + UDP_SETUP;
    let guard = loop {
        match shared.iperf3_udp.try_lock() {
            Ok(guard) => break guard,
            Err(_) if Instant::now() < deadline && !shared.shutdown.load(Ordering::Relaxed) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => return Err("timed out waiting for another test's UDP streams".into()),
        }
    };
    let listener = guard
        .as_ref()
        .ok_or("this server has no UDP socket on its port for iperf3 streams")?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // Connect datagrams left from a test that gave up must not become this test's streams.
    let mut scratch = [0u8; 64];
    let _ = listener.set_nonblocking(true);
    while listener.recv_from(&mut scratch).is_ok() {}
    let _ = listener.set_nonblocking(false);
    session.accept(Instant::now());
    control.flush(session);
    let wanted = config.connections() as usize;
    let mut sockets = Vec::with_capacity(wanted);
    let peer_ip: IpAddr = canonical(test.peer.ip());
    while sockets.len() < wanted {
        let now = Instant::now();
        if now >= deadline || shared.shutdown.load(Ordering::Relaxed) {
            return Err(format!(
                "timed out waiting for UDP streams: {} of {wanted} arrived",
                sockets.len()
            ));
        }
        let _ = listener.set_read_timeout(Some((deadline - now).min(Duration::from_millis(100))));
        let Ok((_, from)) = listener.recv_from(&mut scratch) else {
            continue;
        };
        if canonical(from.ip()) != peer_ip {
            shared.log(&format!(
                "iperf3 test {}: ignored a UDP datagram from {from}: not the client's host",
                test.id
            ));
            continue;
        }
        let socket = udp_socket(local)
            .and_then(|s| {
                s.bind(&local.into())?;
                s.connect(&from.into())?;
                Ok(UdpSocket::from(s))
            })
            .and_then(|s| {
                sys::apply_udp_options(&s, config)?;
                s.send(&UDP_REPLY)?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .map_err(|e| format!("cannot open a UDP stream to {from}: {e}"))?;
        sockets.push(socket);
    }
    Ok(sockets)
}

/// An IPv4 address as itself whether or not it arrived as IPv4-mapped IPv6.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
