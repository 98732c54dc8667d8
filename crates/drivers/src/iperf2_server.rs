//! Serving iperf 2 clients on iperf 2's port (5001, `serve --iperf2-port`), TCP tests
//! from client to server, from server to client (`-R`), both ways on each connection
//! (`--full-duplex`), and a test back on connections to the client's own address (`-d`,
//! `-r`) (docs/iperf2.md).
//!
//! iperf 2 has its own port and no cookie or control connection: each of a test's `-P`
//! connections opens with the same header, and the listener here gathers the connections
//! of one client address with one header into one test ([`Gathering`]). The test then runs
//! on the same data plane as a native test's, measured at this end (the receiver), and
//! ends when the client has shut down every connection and its bytes are read. iperf 2
//! sends the server none of its own figures: the kept run has this side's only, and says
//! so.
//!
//! The listener has its own thread: the server's gate admits its connections (allow,
//! deny, per-address caps), a header must arrive within the handshake timeout, and the
//! tests gathering at once are bounded.

use crate::access::{self, Admission, Held};
use crate::iperf2_kept::{check_limits, config_of, keep_report, Finished};
use crate::served::{Served, Step};
use crate::server_state::ServerState;
use linerate_engine::flow::{FlowSocket, FlowSpec, Side, TripTimes};
use linerate_engine::plane::{DataPlane, PlaneSetup};
use linerate_engine::sys;
use linerate_model::clock::UnixTime;
use linerate_proto::iperf2::{self, Amount, BurstTracker, ClientHeader, Gathered, Gathering};
use linerate_report::{Role, SideResult, TestConfig};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a test's connections may take to arrive after its first.
const GATHER_WAIT: Duration = Duration::from_secs(2);
/// Tests gathering their connections at once.
const MOST_GATHERING: usize = 64;
/// How long receivers read on once every connection has been shut down.
const DRAIN: Duration = Duration::from_millis(200);
/// How often the listener and a test's loop look again.
const TICK: Duration = Duration::from_millis(10);
/// How often an idle listener looks for a connection (it waits in the backlog meanwhile).
const IDLE_TICK: Duration = Duration::from_millis(100);

/// A connection whose header is still arriving.
struct Arriving {
    stream: TcpStream,
    peer: SocketAddr,
    bytes: Vec<u8>,
    deadline: Instant,
    held: Held,
}

/// A connection of a test, with its place among the server's connections.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    _held: Held,
}

/// Binds iperf 2's port on the server's address.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = crate::sys::dual_stack(addr, socket2::Type::STREAM)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Serves iperf 2 clients on `listener` until the server shuts down.
pub(crate) fn spawn(shared: Arc<ServerState>, listener: TcpListener) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("linerate-iperf2".into())
        .spawn(move || listen(&shared, &listener))
}

fn listen(shared: &Arc<ServerState>, listener: &TcpListener) {
    if let Ok(addr) = listener.local_addr() {
        shared.log(&format!("serving iperf 2 clients on {addr}"));
    }
    let began = Instant::now();
    let mut arriving: Vec<Arriving> = Vec::new();
    let mut gathering: Gathering<Connection> =
        Gathering::new(GATHER_WAIT.as_nanos() as u64, MOST_GATHERING);
    let mut tests: Vec<JoinHandle<()>> = Vec::new();
    while !shared.shutdown.load(Ordering::Relaxed) {
        accept_all(shared, listener, &mut arriving);
        let now_ns = began.elapsed().as_nanos() as u64;
        for (header, bytes, connection) in read_headers(shared, &mut arriving) {
            if header.bounceback() {
                let Connection {
                    stream,
                    peer,
                    _held,
                } = connection;
                let connection = (stream, peer, _held);
                tests.extend(crate::iperf2_bounceback::start(
                    shared, connection, header, bytes,
                ));
                continue;
            }
            let client = access::canonical(connection.peer.ip());
            match gathering.arrive(client, &bytes, header, connection, now_ns) {
                Ok(Some(test)) => tests.extend(start(shared, test)),
                Ok(None) => {}
                Err(connection) => shared.refused(
                    connection.peer,
                    &format!(
                        "iperf 2: {MOST_GATHERING} tests are gathering their connections; closed"
                    ),
                ),
            }
        }
        for test in gathering.expired(now_ns) {
            let (asked, came) = (test.header.threads, test.connections.len());
            if let Some(first) = test.connections.first() {
                shared.log(&format!(
                    "iperf 2 test from {}: {came} of its {asked} connections arrived within {} s; it runs with those",
                    first.peer,
                    GATHER_WAIT.as_secs()
                ));
            }
            tests.extend(start(shared, test));
        }
        tests.retain(|t| !t.is_finished());
        // Idle, the listener looks ten times less often: a hundred servers in one host's
        // namespaces each woke a hundred times a second.
        let idle = arriving.is_empty() && gathering.waiting() == 0;
        wait_for_activity(listener, &arriving, if idle { IDLE_TICK } else { TICK });
    }
    for test in tests {
        let _ = test.join();
    }
}

/// Waits at most `tick` for a connection to arrive or a waiting one's header bytes: a
/// client is not kept waiting a tick (a bounceback's first round trip would carry it),
/// and an idle listener still sleeps.
fn wait_for_activity(listener: &TcpListener, arriving: &[Arriving], tick: Duration) {
    let fds: Vec<_> = std::iter::once(listener.as_raw_fd())
        .chain(arriving.iter().map(|a| a.stream.as_raw_fd()))
        .collect();
    crate::sys::wait_readable(&fds, tick);
}

fn accept_all(shared: &ServerState, listener: &TcpListener, arriving: &mut Vec<Arriving>) {
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                shared.log(&format!("iperf 2: accept failed: {e}"));
                return;
            }
        };
        let ip = access::canonical(peer.ip());
        match shared.gate.admit(ip, &[]) {
            Admission::Refuse(why) => {
                shared.refused(peer, why);
                continue;
            }
            Admission::Admit | Admission::AdmitEvicting(_) | Admission::AdmitClosedSession(_) => {}
        }
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        arriving.push(Arriving {
            stream,
            peer,
            bytes: Vec::with_capacity(iperf2::HEADER_LEN),
            deadline: Instant::now() + shared.config.timeouts.handshake,
            held: shared.gate.hold(ip),
        });
    }
}

/// Reads what has arrived of each waiting connection's header; returns the connections
/// whose header is whole and asks a test served here, each answered with iperf 2's
/// acknowledgement. A header that is malformed, asks what is not served, or does not
/// arrive in time closes its connection, logged.
fn read_headers(
    shared: &ServerState,
    arriving: &mut Vec<Arriving>,
) -> Vec<(ClientHeader, Vec<u8>, Connection)> {
    let mut whole = Vec::new();
    let now = Instant::now();
    let mut i = 0;
    while i < arriving.len() {
        let conn = &mut arriving[i];
        match read_header(conn) {
            Ok(None) if now < conn.deadline => {
                i += 1;
                continue;
            }
            Ok(None) => {
                let why = format!(
                    "iperf 2: no header within {:.0} s; closed",
                    shared.config.timeouts.handshake.as_secs_f64()
                );
                shared.refused(conn.peer, &why);
            }
            Err(why) => shared.refused(conn.peer, &format!("iperf 2: {why}; closed")),
            Ok(Some(header)) => {
                let conn = arriving.swap_remove(i);
                if let Some(taken) = take(shared, conn, header) {
                    whole.push(taken);
                }
                continue;
            }
        }
        arriving.swap_remove(i);
    }
    whole
}

/// The header once it is whole; `Err` for a connection closed or a header refused.
fn read_header(conn: &mut Arriving) -> Result<Option<ClientHeader>, String> {
    let wanted = match iperf2::header_len(&conn.bytes) {
        Some(len) => len,
        None => iperf2::BASE_LEN,
    };
    while conn.bytes.len() < wanted {
        let mut buf = [0u8; iperf2::HEADER_LEN];
        let room = wanted - conn.bytes.len();
        match conn.stream.read(&mut buf[..room]) {
            Ok(0) => return Err("closed before its header".into()),
            Ok(n) => conn.bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    // The base header says whether the extended one follows.
    if conn.bytes.len() == iperf2::BASE_LEN
        && iperf2::header_len(&conn.bytes) == Some(iperf2::HEADER_LEN)
    {
        return read_header(conn);
    }
    match ClientHeader::decode(&conn.bytes) {
        Ok(Some(header)) => Ok(Some(header)),
        // An older client's plain test: what was read is its payload.
        Ok(None) => Ok(Some(ClientHeader::plain(1, Amount::Unsaid))),
        Err(e) => Err(e.to_string()),
    }
}

/// A whole header: refused where it asks what is not served, else acknowledged.
fn take(
    shared: &ServerState,
    conn: Arriving,
    header: ClientHeader,
) -> Option<(ClientHeader, Vec<u8>, Connection)> {
    let Arriving {
        mut stream,
        peer,
        bytes,
        held,
        ..
    } = conn;
    // Over TCP both ends may send on each connection (--full-duplex), this server
    // sends a test back (-d, -r) to the client's own address, and a client's frames
    // (--isochronous) are its writes.
    let served_over_tcp = [
        iperf2::Unserved::FullDuplex,
        iperf2::Unserved::Dual,
        iperf2::Unserved::Tradeoff,
        iperf2::Unserved::Isochronous,
    ];
    if header.isochronous() && !header.client_sends() {
        shared.refused(
            peer,
            "iperf 2: asked --isochronous frames from the server (-R), which sends none; closed",
        );
        return None;
    }
    let unserved = header
        .unserved()
        .filter(|u| !header.bounceback() && !served_over_tcp.contains(u));
    if (header.dual() || header.tradeoff()) && header.port == 0 {
        shared.refused(
            peer,
            "iperf 2: asked a test back (-d, -r) to port 0; closed",
        );
        return None;
    }
    if let Some(unserved) = unserved {
        shared.refused(
            peer,
            &format!(
                "iperf 2: asked {}, which this server does not serve; closed",
                unserved.flag()
            ),
        );
        return None;
    }
    // 28 bytes on a fresh connection: the socket's buffer takes them at once.
    // A test the server sends (-R, --full-duplex) begins with its payload, as 2.1.8's
    // server's does.
    if header.version.is_some() && !header.server_sends() {
        if let Err(e) = stream.write_all(&iperf2::ack()) {
            shared.refused(
                peer,
                &format!("iperf 2: cannot acknowledge its header: {e}"),
            );
            return None;
        }
    }
    let _ = stream.set_nonblocking(false);
    Some((
        header,
        bytes,
        Connection {
            stream,
            peer,
            _held: held,
        },
    ))
}

fn start(shared: &Arc<ServerState>, test: Gathered<Connection>) -> Option<JoinHandle<()>> {
    let peer = test.connections.first()?.peer;
    let ours = shared.clone();
    match std::thread::Builder::new()
        .name("linerate-iperf2-test".into())
        .spawn(move || serve(&ours, test))
    {
        Ok(handle) => Some(handle),
        Err(e) => {
            shared.log(&format!(
                "iperf 2 test from {peer}: cannot start its thread: {e}"
            ));
            None
        }
    }
}

/// Runs one gathered test to its end and keeps its report.
// Long: one test's life in the order it happens: accepted, the test back beside it (-d),
// its writes timed, run, logged, kept, the test back after it (-r).
fn serve(shared: &Arc<ServerState>, test: Gathered<Connection>) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let Gathered {
        header,
        connections,
    } = test;
    let peer = connections[0].peer;
    let label = format!("iperf 2 test {id}");
    let mut served = Served::default();
    let accepted = served
        .take_place(shared)
        .and_then(|()| check_limits(shared, &mut served, &header, connections.len(), peer))
        .and_then(|()| {
            let stream = &connections[0].stream;
            let local = stream.local_addr().map_err(|e| e.to_string())?;
            config_of(
                shared,
                &header,
                connections.len(),
                peer,
                local.port(),
                false,
            )
        });
    let config = match accepted {
        Ok(config) => config,
        Err(why) => {
            shared.refused(peer, &format!("{label}: {why}"));
            served.end(shared);
            return;
        }
    };
    shared.log(&format!(
        "{label} from {peer}: accepted: {} connection(s), {}{}",
        connections.len(),
        match header.amount {
            Amount::Seconds(s) => format!("{s} s"),
            Amount::Bytes(n) => format!("{n} bytes"),
            Amount::Unsaid => "no header (an older client)".into(),
        },
        header
            .release()
            .map_or(String::new(), |r| format!(", iperf {r}"))
    ));
    let started_at = UnixTime::now().seconds();
    let count = connections.len();
    // -d: the test back runs beside this one, on a thread of its own.
    let dual = header.dual().then(|| {
        let (ours, back) = (shared.clone(), header.clone());
        std::thread::Builder::new()
            .name("linerate-iperf2-back".into())
            .spawn(move || serve_back(&ours, &back, count, peer))
    });
    // --trip-times over TCP: the client's writes carry their send times; this side's
    // receiving flows time each to its last byte, where the clocks allow. With
    // --isochronous each write is a frame, counted whatever the clocks.
    let isochronous = header.isochronous() && header.client_sends();
    let clocks = ((header.trip_times() || isochronous) && header.client_sends())
        .then(|| frame_clocks(shared, &header, peer));
    let trip_times: Option<TripTimes> = if isochronous {
        Some(Arc::new(Mutex::new(BurstTracker::isochronous())))
    } else {
        clocks
            .as_ref()
            .filter(|c| c.is_ok())
            .map(|_| Arc::new(Mutex::new(BurstTracker::new())))
    };
    let ran = run(
        shared,
        &mut served,
        (&config, &header, trip_times.clone()),
        connections,
        &label,
        peer,
    );
    if let Some(Ok(back)) = dual {
        let _ = back.join();
    }
    served.end(shared);
    let tracked = trip_times.map(|t| t.lock().unwrap_or_else(|e| e.into_inner()).clone());
    log_histogram(shared, &label, tracked.as_ref(), count, started_at);
    let (mut config, mut ran, mut theirs) = (config, ran, Vec::new());
    let note = match (tracked.as_ref().and_then(|t| t.frames()), &clocks) {
        (Some(frames), Some(clocks)) => {
            theirs = with_frames(&mut config, ran.as_mut().map(|r| &mut r.1), frames, clocks);
            Some(frames_note(clocks))
        }
        _ => clocks.map(|clocks| trip_times_note(&clocks, tracked.as_ref(), "the client's")),
    };
    keep_run(
        shared,
        &header,
        config,
        (id, peer, started_at),
        (ran, theirs, note),
    );
    // -r: the test back once this one has ended.
    if header.tradeoff() {
        serve_back(shared, &header, count, peer);
    }
}

/// `serve --histograms`: a `--trip-times` test's writes' latencies as iperf 2's server
/// prints them at its end (`F8(f)-PDF`), its connections' writes together.
fn log_histogram(
    shared: &ServerState,
    label: &str,
    tracked: Option<&BurstTracker>,
    connections: usize,
    started_at: f64,
) {
    let (Some(bins), Some(delays)) = (
        shared.config.iperf2.histograms,
        tracked
            .filter(|t| t.frames().is_none())
            .and_then(BurstTracker::distribution),
    ) else {
        return;
    };
    let pdf = linerate_report::iperf2_text::Pdf {
        id: (connections == 1).then_some(1),
        span: (0.0, (UnixTime::now().seconds() - started_at).max(0.0)),
        name: "F8",
        whole: true,
        delays: &delays.histogram,
        // iperf 2 ends a TCP test's line with its slowest write and when it was sent.
        slowest: tracked.and_then(BurstTracker::slowest),
    };
    if let Some(line) = linerate_report::iperf2_text::histogram_line(&pdf, bins) {
        shared.log_own(&format!("{label}: {line}"));
    }
}

/// `serve --histogram-interval`: whether a test's timed writes get a line each interval
/// (not an `--isochronous` test's: its writes are frames, and iperf 2 prints none).
fn logs_interval_writes(shared: &ServerState, trip_times: Option<&TripTimes>) -> bool {
    shared.config.iperf2.histogram_interval().is_some()
        && trip_times.is_some_and(|t| {
            t.lock()
                .unwrap_or_else(|e| e.into_inner())
                .frames()
                .is_none()
        })
}

/// `serve --histogram-interval`: the latencies of the writes that ended in each interval
/// the test's plane completed since the last turn, as iperf 2's server prints each
/// interval's (`F8-PDF`, no `(f)`, its slowest write at the end); an interval without a
/// write has no line.
fn log_interval_writes(shared: &ServerState, served: &mut Served, label: &str, connections: u32) {
    let Some(bins) = shared.config.iperf2.histograms else {
        return;
    };
    for (span, writes) in served
        .interval_writes
        .as_mut()
        .map(std::mem::take)
        .unwrap_or_default()
    {
        let pdf = linerate_report::iperf2_text::Pdf {
            id: (connections == 1).then_some(1),
            span,
            name: "F8",
            whole: false,
            delays: &writes.delays,
            slowest: writes.slowest,
        };
        if let Some(line) = linerate_report::iperf2_text::histogram_line(&pdf, bins) {
            shared.log_own(&format!("{label}: {line}"));
        }
    }
}

/// Whether a test's writes may be timed against the client's clock: with `--trip-times`,
/// as for its datagrams (the client declares its clock synchronised); without it (frames
/// alone, `--isochronous`), only where both ends read one clock.
fn frame_clocks(
    shared: &ServerState,
    header: &ClientHeader,
    peer: SocketAddr,
) -> Result<String, String> {
    let same_clock = shared.config.same_clock;
    if header.trip_times() || same_clock || linerate_stamp::sender::is_local(peer.ip()) {
        return crate::iperf2_udp::clocks_comparable(same_clock, peer.ip());
    }
    Err("without --trip-times the client does not say its clock is synchronised".into())
}

/// A served `--isochronous` test over TCP as its run keeps it: the frames on this side's
/// receiving flow (their latencies only where the clocks allow), the load and rate their
/// period and sizes say in the config (iperf 2 sends neither), and the client's side as
/// its frames' numbers show it (frames sent and skipped; the bytes are those that
/// arrived: over TCP every byte written did).
fn with_frames(
    config: &mut TestConfig,
    ours: Option<&mut SideResult>,
    frames: &linerate_proto::video::FrameTracker,
    clocks: &Result<String, String>,
) -> Vec<linerate_report::FlowSide> {
    config.video = crate::iperf2_udp::frames_asked(frames);
    if let Some(video) = config.video {
        config.rate_bps = Some(video.mean_bps);
    }
    let Some(ours) = ours else {
        return Vec::new();
    };
    let mut counts = frames.counts();
    if clocks.is_err() {
        counts.latency_us = Default::default();
        counts.clock_ahead = 0;
    }
    let Some(first) = ours.flows.iter_mut().find(|f| f.role == Role::Receive) else {
        return Vec::new();
    };
    first.frames = Some(counts);
    let bytes: u64 = ours
        .flows
        .iter()
        .filter(|f| f.role == Role::Receive)
        .map(|f| f.bytes_total)
        .sum();
    let first = ours
        .flows
        .iter()
        .find(|f| f.role == Role::Receive)
        .expect("found above");
    vec![linerate_report::FlowSide {
        role: Role::Send,
        local_addr: first.remote_addr.clone(),
        remote_addr: first.local_addr.clone(),
        window_bytes: bytes,
        bytes_total: bytes,
        frames: Some(frames.numbered()),
        ..first.clone()
    }]
}

/// What the kept run says of a served `--isochronous` test over TCP.
fn frames_note(clocks: &Result<String, String>) -> String {
    let latency = match clocks {
        Ok(how) => {
            format!("each frame's latency from its send time to the read of its last byte; {how}")
        }
        Err(why) => format!("the frames' latency withheld: {why}"),
    };
    format!(
        "--isochronous over TCP: each of the client's writes (iperf 2's bursts) a frame, numbered by its frame clock; iperf 2 sends neither its frames' mean nor their spread: the run's are its frames' own sizes; {latency}"
    )
}

/// What the kept run says of a `--trip-times` test over TCP: its writes' latency from
/// each one's send time to the read of its last byte (iperf 2's server's "burst
/// latency"), how the clocks were judged, or why it was withheld.
pub(crate) fn trip_times_note(
    clocks: &Result<String, String>,
    tracked: Option<&BurstTracker>,
    whose: &str,
) -> String {
    let how = match clocks {
        Ok(how) => how,
        Err(why) => return format!("--trip-times: the writes' latency withheld: {why}"),
    };
    match tracked {
        Some(t) if t.lost_track() => format!(
            "--trip-times: {whose} writes did not read as iperf 2's --trip-times writes (a length or time out of range), so no latency is given; {how}"
        ),
        Some(t) => match (t.transit(), t.percentiles()) {
            (Some(transit), Some(p)) => format!(
                "--trip-times: write latency {:.3} ms mean ({:.3} to {:.3}, standard deviation {:.3}; p50 {:.3}, p90 {:.3}, p99 {:.3}) over {} writes, each from its send time to the read of its last byte; {how}",
                transit.mean_ns / 1e6,
                transit.min_ns / 1e6,
                transit.max_ns / 1e6,
                transit.deviation_ns() / 1e6,
                p.p50 / 1e3,
                p.p90 / 1e3,
                p.p99 / 1e3,
                transit.count
            ),
            _ => format!("--trip-times: no write was read whole; {how}"),
        },
        None => format!("--trip-times: no write was followed; {how}"),
    }
}

/// How long the connections of a test back may take to open.
const CONNECT_BACK_WAIT: Duration = Duration::from_secs(3);

/// The test back that `-d` or `-r` asks: `count` connections from this server to the
/// client's listening port at the address the test came from (never another, and once a
/// test), and this side sends on them for the time or count the test asked, at its rate,
/// measured and kept as a test of its own (the server sends, as with `-R`).
fn serve_back(shared: &Arc<ServerState>, header: &ClientHeader, count: usize, peer: SocketAddr) {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let label = format!("iperf 2 test {id} (back)");
    let back = header.back();
    let to = SocketAddr::new(access::canonical(peer.ip()), header.port);
    let mut connections = Vec::with_capacity(count);
    for _ in 0..count {
        match TcpStream::connect_timeout(&to, CONNECT_BACK_WAIT) {
            Ok(stream) => connections.push(Connection {
                stream,
                peer: to,
                _held: shared.gate.hold(to.ip()),
            }),
            Err(e) => {
                shared.log(&format!("{label} to {to}: cannot connect: {e}"));
                return;
            }
        }
    }
    let mut served = Served::default();
    let accepted = served
        .take_place(shared)
        .and_then(|()| config_of(shared, &back, count, to, to.port(), false));
    let config = match accepted {
        Ok(config) => config,
        Err(why) => {
            shared.refused(to, &format!("{label}: {why}"));
            served.end(shared);
            return;
        }
    };
    shared.log(&format!(
        "{label} to {to}: {} connection(s), as the test from {peer} asked",
        count
    ));
    let started_at = UnixTime::now().seconds();
    let ran = run(
        shared,
        &mut served,
        (&config, &back, None),
        connections,
        &label,
        to,
    );
    served.end(shared);
    keep_run(
        shared,
        &back,
        config,
        (id, to, started_at),
        (ran, Vec::new(), None),
    );
}

/// Keeps a run that ended (test `id` with `peer`, started at `started_at`): its
/// connections closed first, so the client reads its end; nothing where it did not run.
/// A test's run on the data plane: its connections, held open until it is kept, and this
/// side's figures; `None` where it did not run.
type Ran = Option<(Vec<Connection>, SideResult)>;

fn keep_run(
    shared: &ServerState,
    header: &ClientHeader,
    config: TestConfig,
    (id, peer, started_at): (u64, SocketAddr, f64),
    (ran, theirs, note): (Ran, Vec<linerate_report::FlowSide>, Option<String>),
) {
    let Some((held, ours)) = ran else {
        return;
    };
    drop(held);
    let finished = Finished {
        id,
        peer,
        started_at,
        theirs,
        ours,
        note,
    };
    keep_report(shared, header, config, finished);
}

/// The data plane over the test's connections until the client has shut them all down
/// (or the schedule, or the server, ends it); this side's figures, and the connections,
/// held open until then so the client reads its end only once the test is over.
fn run(
    shared: &Arc<ServerState>,
    served: &mut Served,
    (config, header, trip_times): (&TestConfig, &ClientHeader, Option<TripTimes>),
    connections: Vec<Connection>,
    label: &str,
    peer: SocketAddr,
) -> Option<(Vec<Connection>, SideResult)> {
    let count = connections.len() as u32;
    let mut specs = Vec::with_capacity(connections.len() * header.ways());
    let mut held = Vec::with_capacity(connections.len());
    for (i, connection) in connections.into_iter().enumerate() {
        let stream = connection.stream.try_clone().ok()?;
        if let Err(e) = sys::apply_options(&stream, config, false) {
            shared.log(&format!("{label} from {peer}: connection options: {e}"));
            return None;
        }
        // Both ways on one connection (--full-duplex): this side's receiving flow i and
        // its sending flow count + i (a both-ways test's second half) on two handles of
        // the one socket.
        if header.full_duplex() {
            let sending = stream.try_clone().ok()?;
            specs.push(FlowSpec::new(
                config,
                count + i as u32,
                Side::Server,
                FlowSocket::Tcp(sending),
            ));
        }
        specs.push(FlowSpec::new(
            config,
            i as u32,
            Side::Server,
            FlowSocket::Tcp(stream),
        ));
        held.push(connection);
    }
    let setup = PlaneSetup {
        trip_times,
        tcp_bursts: None,
        // iperf 2's client ends a test it sends by closing: its close is never early, so
        // the tolerance for one covers the whole schedule. A test this side sends ends on
        // this side's schedule or count.
        peer_lead: if !header.client_sends() {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(config.time_s)
        },
        threads: shared.config.threads.unwrap_or(config.threads as usize),
        drain: DRAIN,
        udp_framing: None,
        udp_template: Vec::new(),
        pin_cpus: Vec::new(),
        budget: match header.amount {
            Amount::Bytes(n) if header.server_sends() => Some((Role::Send, n)),
            _ => None,
        },
        ..PlaneSetup::default()
    };
    if logs_interval_writes(shared, setup.trip_times.as_ref()) {
        served.interval_writes = Some(Vec::new());
    }
    match DataPlane::start(Instant::now(), config, specs, setup) {
        Ok(plane) => served.plane = Some(plane),
        Err(e) => {
            shared.log(&format!(
                "{label} from {peer}: cannot start the data plane: {e}"
            ));
            return None;
        }
    }
    let mut ending = false;
    loop {
        match served.step(shared, label, peer, true) {
            Step::Finished(side) => return Some((held, *side)),
            Step::Stop(why) => {
                shared.log(&format!("{label} from {peer}: stopped: {why}"));
                return None;
            }
            Step::Running => log_interval_writes(shared, served, label, count),
        }
        // A count this side sends too (--full-duplex -n) ends on its own count: the
        // client's close ends this side's reading, not its sending.
        let counted_back = header.server_sends() && matches!(header.amount, Amount::Bytes(_));
        if header.client_sends()
            && !counted_back
            && !ending
            && held.iter().all(|c| shut_down_and_read(&c.stream))
        {
            ending = true;
            if let Some(plane) = &served.plane {
                plane.end_now();
            }
        }
        std::thread::sleep(TICK);
    }
}

/// Whether the client has shut its side of `stream` down and every byte it sent has been
/// read: the end of an iperf 2 test (its client reports once the server closes).
fn shut_down_and_read(stream: &TcpStream) -> bool {
    let mut poll = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call; a zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    if ready <= 0 || poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) == 0 {
        return false;
    }
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int.
    let ok = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut unread) };
    ok == 0 && unread == 0
}
