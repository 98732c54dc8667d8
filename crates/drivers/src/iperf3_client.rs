//! `linerate iperf3 -c`: a test against a real iperf3 server.
//!
//! The `Iperf3Client` session speaks iperf3's control protocol; the streams are opened as
//! iperf3 opens them (TCP connections that present the cookie, or UDP sockets that
//! exchange iperf3's connect datagrams) and then run by the same data plane as a native
//! test. This side measures its own figures; the server's come back in iperf3's results
//! exchange and become the report's remote side, so the receiver's figures are the
//! receiver's own whichever end receives.

use crate::client::{connect, connect_error, TestUpdate};
use crate::control::Control;
use crate::iperf3::{budget_of, config_of, results_of, side_from_results};
use linerate_engine::flow::{FlowSocket, FlowSpec, Side};
use linerate_engine::plane::{DataPlane, PlaneSetup};
use linerate_engine::sys;
use linerate_hostinfo::host_facts;
use linerate_model::clock::UnixTime;
use linerate_proto::datagram::Framing;
use linerate_proto::iperf3::client::{Event, Iperf3Client, Iperf3Error};
use linerate_proto::iperf3::{
    cookie_from, Params, Results, Transport, COOKIE_LEN, UDP_CONNECT, UDP_REPLY, UDP_REPLY_LEGACY,
};
use linerate_report::iperf3_json::StreamFacts;
use linerate_report::{Report, SideResult, TestConfig};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a UDP stream waits for the server's answer to its connect datagram.
const UDP_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long receivers read on after the end: none, since the server sends until it reads
/// TEST_END and iperf3 times its side up to then; any wait here would stretch its span.
const DRAIN: Duration = Duration::ZERO;
/// The longest a byte- or block-count test runs before this side ends it.
const MAX_COUNTED_RUN: Duration = Duration::from_secs(3600);

#[derive(Debug, Error)]
pub enum Iperf3ClientError {
    #[error("{0}")]
    Connect(String),
    #[error("cannot open stream {stream} to {addr}: {reason}")]
    Stream {
        stream: usize,
        addr: SocketAddr,
        reason: String,
    },
    #[error("iperf3 server at {addr}: {source}")]
    Session {
        addr: SocketAddr,
        source: Iperf3Error,
    },
    #[error("the test was interrupted")]
    Interrupted,
    /// Parameters linerate cannot run (a value out of range).
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        source: io::Error,
    },
}

/// A finished test against an iperf3 server.
#[derive(Debug, Clone)]
pub struct Iperf3Outcome {
    /// Both sides in linerate's result model.
    pub report: Report,
    /// What the server sent in the results exchange (its output text, if asked for).
    pub server: Results,
    pub params: Params,
    /// The test's cookie, as iperf3 -J's `start.cookie` shows it.
    pub cookie: String,
    /// The control connection's MSS (iperf3's `tcp_mss_default`); 0 if unknown.
    pub control_mss: u32,
}

/// Each stream's addresses and the first one's socket buffers, as iperf3's `start` shows.
fn stream_facts(streams: &[FlowSocket]) -> StreamFacts {
    let text = |addr: std::io::Result<SocketAddr>| addr.map_or(String::new(), |a| a.to_string());
    let mut facts = StreamFacts::default();
    for (index, stream) in streams.iter().enumerate() {
        let (local, remote, sock) = match stream {
            FlowSocket::Tcp(s) => (s.local_addr(), s.peer_addr(), socket2::SockRef::from(s)),
            FlowSocket::Udp(s) => (s.local_addr(), s.peer_addr(), socket2::SockRef::from(s)),
            _ => continue,
        };
        if index == 0 {
            facts.sndbuf = sock.send_buffer_size().unwrap_or(0) as u64;
            facts.rcvbuf = sock.recv_buffer_size().unwrap_or(0) as u64;
        }
        facts.connected.push((text(local), text(remote)));
    }
    facts
}

/// Runs one test against the iperf3 server at `addr`, named `target` in the results.
// Long: the iperf3 client's event loop over iperf3's states (the next to split).
pub fn run(
    addr: SocketAddr,
    target: &str,
    params: &Params,
    connect_timeout: Duration,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<Iperf3Outcome, Iperf3ClientError> {
    let mut config = config_of(params, target, addr.port(), MAX_COUNTED_RUN)
        .map_err(Iperf3ClientError::Usage)?;
    config.connect_timeout_s = connect_timeout.as_secs_f64();
    let stream = connect(addr, connect_timeout, &config, false).map_err(|e| {
        Iperf3ClientError::Connect(
            connect_error(addr, &e, connect_timeout, "an iperf3 server").to_string(),
        )
    })?;
    let mut random = [0u8; 36];
    getrandom::getrandom(&mut random).map_err(|e| Iperf3ClientError::Io {
        context: "drawing a cookie",
        source: io::Error::other(e.to_string()),
    })?;
    let cookie = cookie_from(&random);
    let control_mss = socket2::SockRef::from(&stream).mss().unwrap_or(0);
    let mut control = Control::new(stream).map_err(|source| Iperf3ClientError::Io {
        context: "setting up the control connection",
        source,
    })?;
    let mut session = Iperf3Client::new(Instant::now(), cookie, params.clone());
    // The cookie as iperf3's JSON shows it: without its terminating NUL.
    let cookie_text = String::from_utf8_lossy(&cookie[..COOKIE_LEN - 1]).into_owned();
    let started_at = UnixTime::now().seconds();
    let mut streams: Vec<FlowSocket> = Vec::new();
    // Copies of the streams' sockets, closed only when the test is over: the workers drop
    // theirs at the end, while the server may still be sending until it reads TEST_END,
    // and a closed TCP socket with unread bytes resets its stream (a closed UDP socket
    // answers with port-unreachable), which iperf3 takes for a failed test.
    let mut held: Vec<std::os::fd::OwnedFd> = Vec::new();
    let mut plane: Option<DataPlane> = None;
    let mut local: Option<SideResult> = None;
    let mut theirs: Option<Results> = None;
    let session_error = |source| Iperf3ClientError::Session { addr, source };
    loop {
        while let Some(event) = session.poll_event() {
            match event {
                Event::CreateStreams => match open_streams(addr, &config, params, &cookie) {
                    Ok(opened) => {
                        held = held_copies(&opened);
                        streams = opened;
                    }
                    Err(e) => {
                        session.terminate(e.to_string());
                        control.flush(&mut session);
                        return Err(e);
                    }
                },
                Event::TestStart => {}
                Event::TestRunning => {
                    progress(TestUpdate::Iperf3Streams {
                        cookie: cookie_text.clone(),
                        control_mss,
                        streams: Box::new(stream_facts(&streams)),
                    });
                    match start_plane(&config, params, std::mem::take(&mut streams)) {
                        Ok(started) => plane = Some(started),
                        Err(source) => {
                            session.terminate(format!("cannot start the data plane: {source}"));
                            control.flush(&mut session);
                            return Err(Iperf3ClientError::Io {
                                context: "starting the data plane",
                                source,
                            });
                        }
                    }
                    progress(TestUpdate::Started);
                }
                Event::ServerResults(results) => theirs = Some(results),
                Event::Closed(Ok(())) => {
                    drop(std::mem::take(&mut held));
                    let (Some(local), Some(theirs)) = (local.take(), theirs.take()) else {
                        return Err(session_error(Iperf3Error::Protocol(
                            "the test ended without results".into(),
                        )));
                    };
                    let remote = side_from_results(&theirs, &local, params.transport, "iperf3");
                    let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
                    let (name, config) = (config.test_name(), config.clone());
                    let report = Report::assemble(&name, &tool, started_at, config, local, remote);
                    let (server, params, cookie) = (theirs, params.clone(), cookie_text);
                    return Ok(Iperf3Outcome {
                        report,
                        server,
                        params,
                        cookie,
                        control_mss,
                    });
                }
                Event::Closed(Err(e)) => return Err(session_error(e)),
            }
        }
        if cancel.load(Ordering::Relaxed) {
            session.terminate("interrupted".into());
            control.flush(&mut session);
            return Err(Iperf3ClientError::Interrupted);
        }
        if let Some(side) = poll_plane(&mut plane, progress)? {
            session.end_test(Instant::now(), results_of(&side, params.transport, None));
            local = Some(side);
        }
        let wait = if plane.is_some() {
            Duration::from_millis(20)
        } else {
            Duration::from_millis(200)
        };
        control.step(&mut session, wait);
    }
}

/// The running plane's intervals, passed on as progress; this side's result once the
/// plane has finished.
fn poll_plane(
    plane: &mut Option<DataPlane>,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<Option<SideResult>, Iperf3ClientError> {
    let Some(running) = plane.as_mut() else {
        return Ok(None);
    };
    for interval in running.poll_intervals(Duration::ZERO) {
        progress(TestUpdate::Interval(Box::new(interval)));
    }
    if !running.is_finished() {
        return Ok(None);
    }
    let finished = plane.take().expect("checked");
    let side = finished
        .finish(host_facts())
        .map_err(|source| Iperf3ClientError::Io {
            context: "the data plane",
            source,
        })?;
    Ok(Some(side))
}

/// Copies of the streams' sockets, to close only when the test is over.
fn held_copies(streams: &[FlowSocket]) -> Vec<std::os::fd::OwnedFd> {
    streams
        .iter()
        .filter_map(|s| match s {
            FlowSocket::Tcp(stream) => stream.as_fd().try_clone_to_owned().ok(),
            FlowSocket::Udp(socket) => socket.as_fd().try_clone_to_owned().ok(),
            _ => None,
        })
        .collect()
}

/// The client's data plane over the test's streams, in iperf3's UDP framing for UDP.
fn start_plane(
    config: &TestConfig,
    params: &Params,
    streams: Vec<FlowSocket>,
) -> io::Result<DataPlane> {
    let specs = streams
        .into_iter()
        .enumerate()
        .map(|(i, socket)| FlowSpec::new(config, i as u32, Side::Client, socket))
        .collect();
    let setup = PlaneSetup {
        trip_times: None,
        tcp_bursts: None,
        peer_lead: Duration::ZERO,
        threads: config.threads as usize,
        drain: DRAIN,
        udp_framing: (params.transport == Transport::Udp).then_some(Framing::Iperf3 {
            wide: params.udp_counters_64bit,
        }),
        udp_template: Vec::new(),
        pin_cpus: Vec::new(),
        budget: budget_of(params),
        ..PlaneSetup::default()
    };
    DataPlane::start(Instant::now(), config, specs, setup)
}

/// Opens the test's streams in iperf3's order: in bidir, the sending ones first.
fn open_streams(
    addr: SocketAddr,
    config: &TestConfig,
    params: &Params,
    cookie: &[u8; COOKIE_LEN],
) -> Result<Vec<FlowSocket>, Iperf3ClientError> {
    let timeout = Duration::from_secs_f64(config.connect_timeout_s);
    (0..config.connections() as usize)
        .map(|stream| {
            let failed = |reason: String| Iperf3ClientError::Stream {
                stream,
                addr,
                reason,
            };
            match params.transport {
                Transport::Tcp => {
                    let mut socket: TcpStream =
                        connect(addr, timeout, config, true).map_err(|e| failed(e.to_string()))?;
                    socket
                        .write_all(cookie)
                        .map_err(|e| failed(e.to_string()))?;
                    Ok(FlowSocket::Tcp(socket))
                }
                Transport::Udp => udp_stream(addr, config, params)
                    .map(FlowSocket::Udp)
                    .map_err(|e| failed(e.to_string())),
            }
        })
        .collect()
}

/// A UDP stream: a connected socket whose connect datagram the server has answered.
/// Datagrams of streams already running may arrive first (in reverse mode); up to two
/// blocks' worth are passed over, as iperf3 does.
fn udp_stream(addr: SocketAddr, config: &TestConfig, params: &Params) -> io::Result<UdpSocket> {
    let any: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let socket = UdpSocket::bind(any)?;
    sys::apply_udp_options(&socket, config)?;
    socket.connect(addr)?;
    socket.send(&UDP_CONNECT)?;
    socket.set_read_timeout(Some(UDP_CONNECT_TIMEOUT))?;
    let mut buffer = vec![0u8; params.len as usize + 64];
    let mut passed_over = 0usize;
    loop {
        let n = socket.recv(&mut buffer).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("no answer to the UDP connect datagram: {e}"),
            )
        })?;
        if n == 4 && (buffer[..4] == UDP_REPLY || buffer[..4] == UDP_REPLY_LEGACY) {
            socket.set_read_timeout(None)?;
            socket.set_nonblocking(true)?;
            return Ok(socket);
        }
        passed_over += n;
        if passed_over > 2 * params.len as usize {
            return Err(io::Error::other(
                "the server did not answer the UDP connect datagram",
            ));
        }
    }
}
