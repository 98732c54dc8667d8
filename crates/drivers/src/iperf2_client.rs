//! `linerate iperf2 -c`: a test against a real iperf 2 server, on iperf 2's wire.
//!
//! Each TCP connection begins with the client header a 2.1 client writes (the base and
//! extended headers, [`ClientHeader::encode`]) and then carries the test's writes; each UDP
//! datagram carries iperf 2's numbers and send time, then the same header (written once
//! into the data plane's buffers, `PlaneSetup::udp_template`). The data plane is the one
//! a native test runs. At the end a UDP flow sends iperf 2's final datagram (its count,
//! negated) until the server answers with its report, as iperf 2's client does; a TCP
//! server tells its client nothing, so a TCP run holds this side's figures alone. With
//! `-R` (TCP) the header asks the server to send on the same connection: it begins with
//! its payload (no acknowledgement) and ends the test by closing, and this side counts
//! what it received to the server's close; with `--full-duplex` both at once, a sending
//! and a receiving flow on each connection. A UDP `-R` test begins with the header
//! datagram, sent again every [`REQUEST_EVERY`] until the server's first datagram is
//! waiting (as 2.1.8's client does), and ends on this side's schedule; a UDP server that
//! sends does not exchange finals (2.1.8 logs it "no-udp-fin"), so the receiver's
//! figures, loss and jitter among them, are this side's.

use crate::client::{connect, connect_error, TestUpdate};
use crate::iperf2_kept::plain_flow;
use linerate_engine::bursts::TcpBursts;
use linerate_engine::flow::{FlowSocket, FlowSpec, Side};
use linerate_engine::plane::{DataPlane, PlaneSetup};
use linerate_engine::sys;
use linerate_hostinfo::host_facts;
use linerate_model::clock::UnixTime;
use linerate_proto::datagram::{Framing, IPERF2_SEQNO64, IPERF2_UDP_TESTS};
use linerate_proto::iperf2::{
    self, ext_flag, Amount, ClientHeader, ServerReport, REPORT_LEN, UDP_HEADER_AT,
};
use linerate_report::{FlowSide, HostFacts, Report, Role, SideResult, TestConfig, UdpCounts};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The longest a byte-count test (`-n`) runs before this side ends it.
const MAX_COUNTED_RUN: Duration = Duration::from_secs(3600);
/// How often a UDP flow's final datagram goes out, and how long it waits each time for
/// the server's report (iperf 2's client: ten tries, a quarter of a second apart).
const FINAL_TRIES: u32 = 10;
const FINAL_WAIT: Duration = Duration::from_millis(250);
/// How long the end waits for a TCP server's acknowledgement of the header, where it has
/// not come yet (2.1 servers send one; older ones none).
const ACK_WAIT: Duration = Duration::from_millis(200);
/// How often a UDP `-R` test's header datagram goes out until the server sends.
const REQUEST_EVERY: Duration = Duration::from_millis(25);
/// How long a reverse test (`-R`) waits past its end for the server's last bytes.
const REVERSE_DRAIN: Duration = Duration::from_secs(3);

/// A rate as iperf 2's `-b` takes it: bits a second, or packets a second (`pps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iperf2Rate {
    Bits(u64),
    Packets(u64),
}

/// iperf 2's UDP rate where `-b` is not given: 1 Mbit/s.
pub const DEFAULT_UDP_RATE: u64 = 1_000_000;

/// iperf 2's write or datagram where `-l` is not given: 128 KiB a TCP write; datagrams of
/// 1,470 bytes over IPv4 and 1,450 over IPv6 (each fits an Ethernet frame).
pub fn default_length(udp: bool, ipv6: bool) -> u64 {
    match (udp, ipv6) {
        (false, _) => 128 * 1024,
        (true, false) => 1470,
        (true, true) => 1450,
    }
}

/// One test as `linerate iperf2 -c` asks it.
#[derive(Debug, Clone)]
pub struct Iperf2Ask {
    pub addr: SocketAddr,
    /// The server as the user named it.
    pub target: String,
    pub udp: bool,
    /// Connections (`-P`).
    pub parallel: u32,
    /// `-t` seconds, or `-n` bytes per connection.
    pub amount: Amount,
    /// Bytes a write or a datagram (`-l`).
    pub length: u32,
    pub rate: Option<Iperf2Rate>,
    /// `--trip-times`: the server may read one-way delays from the send times (UDP).
    pub trip_times: bool,
    /// `--isochronous`: video frames (UDP), their fields as iperf 2 carries them.
    pub isochronous: Option<linerate_model::video::VideoSettings>,
    /// `-R`: the server sends and this side receives (TCP).
    pub reverse: bool,
    /// `--full-duplex`: both ends send on each connection at once (TCP).
    pub full_duplex: bool,
    /// Seconds between interval figures (`-i`); 0 for none.
    pub interval_s: f64,
    /// `-w`: socket buffers.
    pub window: Option<u64>,
    /// `-N`: TCP_NODELAY.
    pub nodelay: bool,
    pub connect_timeout: Duration,
    /// `-d` or `-r`: the server connects back (TCP) or sends back (UDP) a test of its
    /// own (`iperf2_back` runs it).
    pub back: Option<Back>,
}

/// The test back a client asks (`-d` or `-r`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Back {
    /// `-d`: at once, beside the test out; `-r`: once it has ended.
    pub dual: bool,
    /// Where this side listens (`-L`).
    pub port: u16,
}

#[derive(Debug, Error)]
pub enum Iperf2ClientError {
    #[error("{0}")]
    Connect(String),
    #[error("cannot open connection {flow} to {addr}: {reason}")]
    Stream {
        flow: usize,
        addr: SocketAddr,
        reason: String,
    },
    #[error("the test was interrupted")]
    Interrupted,
    /// Settings linerate cannot run (a value out of range, a mode not sent yet).
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        source: io::Error,
    },
}

/// A finished test against an iperf 2 server.
#[derive(Debug, Clone)]
pub struct Iperf2Outcome {
    pub report: Report,
    /// Each connection's addresses, (local, remote), in flow order.
    pub connected: Vec<(SocketAddr, SocketAddr)>,
    /// This side's flows as it counted them: sent, or received with `-R`, or both with
    /// `--full-duplex` (the sending flows first).
    pub flows: Vec<FlowSide>,
    /// UDP: each flow's server report, where the server answered its final datagram.
    pub server_reports: Vec<Option<ServerReport>>,
    /// UDP: the test's datagrams each flow sent.
    pub datagrams_sent: Vec<u64>,
    /// UDP: the final datagrams each flow sent before its server answered (iperf 2's
    /// client counts them among those it sent; its server counts the first among the
    /// test's, linerate's server none).
    pub finals_sent: Vec<u64>,
    /// `-d`, `-r`: the test the server sent back, as this side received it, or why it
    /// did not come.
    pub back: Option<Result<Box<Iperf2Outcome>, String>>,
}

/// The header every connection or datagram of the test carries.
pub fn header_of(ask: &Iperf2Ask) -> ClientHeader {
    let mut header = ClientHeader::plain(ask.parallel, ask.amount);
    header.write_len = ask.length;
    header.version = Some((2, 1, 8));
    if ask.udp {
        header.flags |= IPERF2_UDP_TESTS | IPERF2_SEQNO64;
    }
    match ask.rate {
        Some(Iperf2Rate::Bits(bits)) => header.rate = bits,
        Some(Iperf2Rate::Packets(packets)) => {
            header.rate = packets;
            header.ext_flags |= ext_flag::UNITS_PPS;
        }
        None => {}
    }
    if ask.trip_times {
        header.ext_flags |= ext_flag::TRIP_TIMES;
    }
    if let Some(frames) = ask.isochronous {
        header.ext_flags |= ext_flag::ISOCHRONOUS;
        header.rate = frames.mean_bps;
    }
    if ask.reverse {
        header.flags |= iperf2::flag::VERSION2;
        header.ext_flags |= ext_flag::REVERSE;
    }
    if ask.full_duplex {
        header.flags |= iperf2::flag::VERSION2;
        header.ext_flags |= ext_flag::FULL_DUPLEX;
        if ask.udp {
            // As 2.1.8's own client asks it: each end's final goes once, unanswered.
            header.ext_flags |= ext_flag::NO_UDP_FIN;
        }
    }
    if let Some(back) = ask.back {
        header.flags |= iperf2::flag::VERSION1;
        if back.dual {
            header.flags |= iperf2::flag::RUN_NOW;
        }
        header.port = back.port;
    }
    header
}

/// Whether the test's TCP writes are iperf 2's bursts, each beginning with its send time
/// and size (`--trip-times`, `--isochronous`), after a header that carries the test's
/// start.
fn tcp_bursts(ask: &Iperf2Ask) -> bool {
    !ask.udp && (ask.trip_times || ask.isochronous.is_some())
}

/// Why the combination of modes a test asks is not sent, in one line naming the flags.
fn refused_modes(ask: &Iperf2Ask) -> Result<(), String> {
    let timed = if ask.isochronous.is_some() {
        "--isochronous"
    } else {
        "--trip-times"
    };
    if tcp_bursts(ask) && (ask.reverse || ask.full_duplex) {
        return Err(format!(
            "{timed} over TCP with {}: linerate times the writes it sends, not the server's",
            if ask.reverse { "-R" } else { "--full-duplex" }
        ));
    }
    if !ask.udp && ask.isochronous.is_some() && ask.back.is_some() {
        return Err(
            "--isochronous over TCP with -d or -r: a test back of frames has not been checked against iperf 2's server; ask it without"
                .into(),
        );
    }
    if tcp_bursts(ask) && matches!(ask.amount, Amount::Bytes(_)) {
        return Err(format!(
            "{timed} over TCP with -n: each write goes whole with its fields; give a time (-t)"
        ));
    }
    if ask.full_duplex && ask.reverse {
        return Err("--full-duplex with -R: both ends send on each connection already".into());
    }
    if ask.full_duplex && ask.udp && matches!(ask.amount, Amount::Bytes(_)) {
        return Err(
            "-n with -u --full-duplex: a datagram lost on the way back would leave the count unmet; give a time (-t)"
                .into(),
        );
    }
    if let (Some(back), true) = (ask.back, ask.reverse || ask.full_duplex) {
        return Err(format!(
            "{} with {}: the server sends a test back beside or after one this side sends",
            if back.dual { "-d" } else { "-r" },
            if ask.reverse { "-R" } else { "--full-duplex" }
        ));
    }
    if let (Some(_), true, Amount::Bytes(_)) = (ask.back, ask.udp, ask.amount) {
        return Err(
            "-n with -u and -d or -r: a datagram of the test back lost would leave its count unmet; give a time (-t)"
                .into(),
        );
    }
    if ask.back.is_some() && ask.udp && ask.parallel > 1 {
        return Err("-P with -u and -d or -r: the test back comes to one port; one flow".into());
    }
    if ask.reverse && ask.udp && matches!(ask.amount, Amount::Bytes(_)) {
        return Err(
            "-n with -u -R: a datagram lost on the way would leave the count unmet and the test waiting; give a time (-t)"
                .into(),
        );
    }
    Ok(())
}

/// The test's configuration as linerate's data plane runs it.
pub fn config_of(ask: &Iperf2Ask) -> Result<TestConfig, String> {
    use linerate_model::{Environment, StreamRequest, StreamTransport, TestKind, TestRequest};
    refused_modes(ask)?;
    if ask.length > iperf2::MAX_WRITE {
        return Err(format!(
            "-l {}: iperf 2 servers take writes of at most {} bytes",
            ask.length,
            iperf2::MAX_WRITE
        ));
    }
    let least = if ask.trip_times {
        UDP_HEADER_AT + (START_WORD + 2) * 4
    } else if ask.isochronous.is_some() {
        linerate_proto::video::FrameWire::Iperf2.header_len()
    } else {
        UDP_HEADER_AT + iperf2::HEADER_LEN
    } as u32;
    if ask.udp && ask.length < least {
        return Err(format!(
            "-l {}: a UDP datagram of iperf 2's needs at least {least} bytes for its numbers and header",
            ask.length
        ));
    }
    let time_s = match ask.amount {
        Amount::Seconds(s) => s,
        Amount::Bytes(_) | Amount::Unsaid => MAX_COUNTED_RUN.as_secs_f64(),
    };
    let (rate_bps, pps) = match ask.rate {
        Some(Iperf2Rate::Bits(bits)) => (Some(bits), None),
        Some(Iperf2Rate::Packets(packets)) => (None, Some(packets)),
        None => (None, None),
    };
    let length = Some(u64::from(ask.length));
    let transport = match ask.isochronous {
        Some(frames) if ask.udp => StreamTransport::Video(linerate_model::VideoStream {
            length,
            ..linerate_model::VideoStream::of(iperf2_frames(frames, ask)?)
        }),
        // Over TCP each frame is one write of its size (the data plane's bursts).
        Some(frames) => {
            iperf2_frames(frames, ask)?;
            StreamTransport::plain(false, length, None, ask.nodelay)
        }
        None => StreamTransport::plain(ask.udp, length, pps, ask.nodelay),
    };
    let request = TestRequest {
        tls: None,
        target: Some(ask.target.clone()),
        port: ask.addr.port(),
        parallel: ask.parallel,
        threads: None,
        time_s,
        omit_s: 0.0,
        interval_s: ask.interval_s,
        window: ask.window,
        congestion: None,
        per_flow: true,
        connect_timeout_s: ask.connect_timeout.as_secs_f64(),
        observe: false,
        source: None,
        marks: None,
        kind: TestKind::Stream(StreamRequest {
            direction: match (ask.full_duplex, ask.reverse) {
                (true, _) => linerate_report::Direction::Bidir,
                (false, true) => linerate_report::Direction::Reverse,
                (false, false) => linerate_report::Direction::Forward,
            },
            rate_bps: rate_bps.filter(|_| ask.isochronous.is_none()),
            transport,
        }),
    };
    let environment = Environment {
        cpus: sys::cpus(),
        udp_length: None,
    };
    let mut config = TestConfig::resolve(&request, &environment)?;
    if let (Some(frames), false) = (ask.isochronous, ask.udp) {
        // Frames over TCP, a write each: the run keeps them as a video's (the sender's
        // counts; iperf 2's server tells nothing back).
        config.video = Some(iperf2_frames(frames, ask)?);
    }
    Ok(config)
}

/// `--isochronous` frames as iperf 2 carries them: this way, for a time, their period
/// whole microseconds (its frame fields say the period so: 30 a second is 33,333 us, as
/// iperf 2's own client sends it), the frames' load its rate; over UDP in datagrams, over
/// TCP a write each.
fn iperf2_frames(
    frames: linerate_model::video::VideoSettings,
    ask: &Iperf2Ask,
) -> Result<linerate_model::video::VideoSettings, String> {
    let refused = |why: &str| Err(format!("--isochronous {why}"));
    if ask.reverse || ask.full_duplex {
        return refused(
            "with -R or --full-duplex: linerate sends frames to an iperf 2 server, not back",
        );
    }
    if matches!(ask.amount, Amount::Bytes(_)) {
        return refused("with -n: frames are sent for a time (-t)");
    }
    let period_us = (1e6 / frames.fps).round().max(1.0);
    linerate_model::video::VideoSettings {
        fps: 1e6 / period_us,
        ..frames
    }
    .checked()
    .map_err(|why| format!("--isochronous {}: {why}", frames.spec()))
}

/// A test whose connections are open (TCP: each has sent the header) and not started.
pub struct Iperf2Test {
    ask: Iperf2Ask,
    config: TestConfig,
    header: ClientHeader,
    streams: Vec<FlowSocket>,
    connected: Vec<(SocketAddr, SocketAddr)>,
    /// A test back whose writes carry their send times (the server's `--trip-times`):
    /// the receiving flows time each to its last byte.
    trip_times: Option<linerate_engine::flow::TripTimes>,
}

/// Opens the test's connections to the iperf 2 server at `ask.addr` (a test back's
/// listener, where `ask.back` asks one, is `iperf2_back::open`'s).
pub fn open(ask: &Iperf2Ask) -> Result<Iperf2Test, Iperf2ClientError> {
    let config = config_of(ask).map_err(Iperf2ClientError::Usage)?;
    let header = header_of(ask);
    let (streams, connected) = open_streams(ask, &config, &header)?;
    Ok(Iperf2Test {
        ask: ask.clone(),
        config,
        header,
        streams,
        connected,
        trip_times: None,
    })
}

/// A test the server sends on connections this side already holds (the test back),
/// received as a `-R` test is; where its writes carry their send times (`trip_times`),
/// each is timed to its last byte.
pub(crate) fn received_on(
    ask: &Iperf2Ask,
    (streams, connected): (Vec<FlowSocket>, Vec<(SocketAddr, SocketAddr)>),
    trip_times: Option<linerate_engine::flow::TripTimes>,
    cancel: &AtomicBool,
) -> Result<Iperf2Outcome, Iperf2ClientError> {
    let test = Iperf2Test {
        config: config_of(ask).map_err(Iperf2ClientError::Usage)?,
        header: header_of(ask),
        ask: ask.clone(),
        streams,
        connected,
        trip_times,
    };
    test.run(cancel, &mut |_| {})
}

impl Iperf2Test {
    /// Each connection's addresses, (local, remote), in flow order.
    pub fn connected(&self) -> &[(SocketAddr, SocketAddr)] {
        &self.connected
    }

    /// The first connection's socket buffer as the kernel granted it: the receive buffer
    /// of a TCP connection (iperf 2's "TCP window size"), the send buffer of a UDP socket.
    pub fn buffer_bytes(&self) -> Option<u64> {
        let (send, receive) = match self.streams.first()? {
            FlowSocket::Tcp(stream) => sys::granted_buffers(stream),
            FlowSocket::Udp(socket) => sys::granted_buffers(socket),
            _ => return None,
        };
        Some(if self.ask.udp { send } else { receive })
    }

    /// Runs the test to its end: the data plane, then each UDP flow's final exchange.
    pub fn run(
        self,
        cancel: &AtomicBool,
        progress: &mut dyn FnMut(TestUpdate),
    ) -> Result<Iperf2Outcome, Iperf2ClientError> {
        let Iperf2Test {
            ask,
            config,
            header,
            streams,
            connected,
            trip_times,
        } = self;
        let started_at = UnixTime::now().seconds();
        // Copies of the sockets, kept past the plane's end: a UDP flow's final datagrams
        // and the server's report go through them, and a TCP server's acknowledgement is
        // read.
        let held: Vec<OwnedFd> = streams
            .iter()
            .filter_map(|s| match s {
                FlowSocket::Tcp(stream) => stream.as_fd().try_clone_to_owned().ok(),
                FlowSocket::Udp(socket) => socket.as_fd().try_clone_to_owned().ok(),
                _ => None,
            })
            .collect();
        let template = udp_template(&header, UnixTime::now().nanos());
        if ask.udp && ask.reverse {
            for stream in &streams {
                if let FlowSocket::Udp(socket) = stream {
                    ask_to_send(socket, &template, ask.length, ask.connect_timeout)?;
                }
            }
        }
        progress(TestUpdate::Started);
        let mut plane =
            start_plane(&ask, &config, &template, streams, trip_times).map_err(|source| {
                Iperf2ClientError::Io {
                    context: "starting the data plane",
                    source,
                }
            })?;
        while !plane.is_finished() {
            if cancel.load(Ordering::Relaxed) {
                return Err(Iperf2ClientError::Interrupted);
            }
            for interval in plane.poll_intervals(Duration::from_millis(50)) {
                progress(TestUpdate::Interval(Box::new(interval)));
            }
        }
        for interval in plane.poll_intervals(Duration::ZERO) {
            progress(TestUpdate::Interval(Box::new(interval)));
        }
        let local = plane
            .finish(host_facts())
            .map_err(|source| Iperf2ClientError::Io {
                context: "the data plane",
                source,
            })?;
        // The sending flows' (ids below -P; with --full-duplex the receiving ones follow).
        let mut sending: Vec<&FlowSide> =
            local.flows.iter().filter(|f| f.id < ask.parallel).collect();
        sending.sort_by_key(|f| f.id);
        let datagrams_sent: Vec<u64> = sending
            .iter()
            .map(|f| f.udp.as_ref().map_or(0, |u| u.sent))
            .collect();
        // Over UDP both ways the data plane sent each flow's final, and counted it.
        let finals_of_the_plane: Vec<u64> = sending
            .iter()
            .map(|f| f.udp.as_ref().map_or(0, |u| u.finals))
            .collect();
        let (server_reports, finals_sent) = close(
            &ask,
            held,
            &template,
            (&datagrams_sent, finals_of_the_plane),
        );
        let remote = server_side(&local, &connected, &server_reports);
        let flows = local.flows.clone();
        let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
        let mut report = Report::assemble(
            &config.test_name(),
            &tool,
            started_at,
            config.clone(),
            local,
            remote,
        );
        report.warnings.push(whose_figures(&ask).into());
        Ok(Iperf2Outcome {
            report,
            connected,
            flows,
            server_reports,
            datagrams_sent,
            finals_sent,
            back: None,
        })
    }
}

/// Opens the test's connections (TCP, each beginning with the header) or its sockets
/// (UDP, connected to the server).
#[allow(clippy::type_complexity)]
fn open_streams(
    ask: &Iperf2Ask,
    config: &TestConfig,
    header: &ClientHeader,
) -> Result<(Vec<FlowSocket>, Vec<(SocketAddr, SocketAddr)>), Iperf2ClientError> {
    let mut streams = Vec::new();
    let mut connected = Vec::new();
    for flow in 0..ask.parallel as usize {
        let failed = |reason: String| Iperf2ClientError::Stream {
            flow,
            addr: ask.addr,
            reason,
        };
        if ask.udp {
            let socket = udp_socket(ask.addr, config).map_err(|e| failed(e.to_string()))?;
            connected.push((
                socket.local_addr().map_err(|e| failed(e.to_string()))?,
                ask.addr,
            ));
            streams.push(FlowSocket::Udp(socket));
        } else {
            let mut stream = connect(ask.addr, ask.connect_timeout, config, true).map_err(|e| {
                if flow == 0 {
                    Iperf2ClientError::Connect(
                        connect_error(ask.addr, &e, ask.connect_timeout, "an iperf 2 server")
                            .to_string(),
                    )
                } else {
                    failed(e.to_string())
                }
            })?;
            let start = tcp_bursts(ask).then(|| UnixTime::now().nanos());
            let opening = iperf2::tcp_opening(header, start);
            stream
                .write_all(&opening)
                .map_err(|e| failed(format!("sending the test header: {e}")))?;
            connected.push((
                stream.local_addr().map_err(|e| failed(e.to_string()))?,
                ask.addr,
            ));
            streams.push(FlowSocket::Tcp(stream));
        }
    }
    Ok((streams, connected))
}

fn udp_socket(addr: SocketAddr, config: &TestConfig) -> io::Result<UdpSocket> {
    let any: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let socket = UdpSocket::bind(any)?;
    sys::apply_udp_options(&socket, config)?;
    socket.connect(addr)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Where a UDP test's client header carries the test's start (seconds, microseconds of the
/// wall clock), in words after the datagram's numbers: a 2.1.8 server takes `--trip-times`
/// only with a start within 600 s of its clock (learned from a capture of 2.1.8's client).
const START_WORD: usize = 24;

/// The bytes every UDP datagram begins with: the numbers' room, then the header, and
/// with `--trip-times` the test's start.
fn udp_template(header: &ClientHeader, start_ns: u64) -> Vec<u8> {
    let mut template = vec![0u8; UDP_HEADER_AT];
    template.extend_from_slice(&header.encode());
    if header.trip_times() {
        let at = UDP_HEADER_AT + START_WORD * 4;
        template.resize(at + 8, 0);
        let seconds = (start_ns / 1_000_000_000) as u32;
        let micros = ((start_ns % 1_000_000_000) / 1_000) as u32;
        template[at..at + 4].copy_from_slice(&seconds.to_be_bytes());
        template[at + 4..at + 8].copy_from_slice(&micros.to_be_bytes());
    }
    template
}

fn start_plane(
    ask: &Iperf2Ask,
    config: &TestConfig,
    template: &[u8],
    streams: Vec<FlowSocket>,
    trip_times: Option<linerate_engine::flow::TripTimes>,
) -> io::Result<DataPlane> {
    let count = streams.len() as u32;
    let mut specs = Vec::with_capacity(streams.len() * 2);
    for (i, socket) in streams.into_iter().enumerate() {
        // Both ways on each connection or socket (--full-duplex): this side's sending
        // flow i and its receiving flow count + i on two handles of the one socket.
        let receiving = match (ask.full_duplex, &socket) {
            (true, FlowSocket::Tcp(stream)) => Some(FlowSocket::Tcp(stream.try_clone()?)),
            (true, FlowSocket::Udp(udp)) => Some(FlowSocket::Udp(udp.try_clone()?)),
            _ => None,
        };
        if let Some(receiving) = receiving {
            specs.push(FlowSpec::new(
                config,
                count + i as u32,
                Side::Client,
                receiving,
            ));
        }
        specs.push(FlowSpec::new(config, i as u32, Side::Client, socket));
    }
    let this_side = if ask.reverse {
        Role::Receive
    } else {
        Role::Send
    };
    let budget = match ask.amount {
        Amount::Bytes(bytes) => Some((this_side, bytes)),
        Amount::Seconds(_) | Amount::Unsaid => None,
    };
    let frames = ask
        .isochronous
        .map(|frames| iperf2_frames(frames, ask))
        .transpose()
        .map_err(io::Error::other)?;
    let setup = PlaneSetup {
        trip_times,
        tcp_bursts: tcp_bursts(ask).then_some(TcpBursts { frames }),
        // Both ways over UDP: each sending flow ends with its final, as 2.1.8's own
        // client's does, while its receiving flow reads on.
        udp_final: ask.udp && ask.full_duplex,
        threads: config.threads as usize,
        // A server that sends ends its test on its own clock, which started when its
        // header came: its last bytes are waited for, and its close is never early.
        drain: if ask.reverse || ask.full_duplex {
            REVERSE_DRAIN
        } else {
            Duration::ZERO
        },
        udp_framing: ask.udp.then_some(Framing::Iperf2),
        udp_template: if ask.udp {
            template.to_vec()
        } else {
            Vec::new()
        },
        pin_cpus: Vec::new(),
        budget,
        peer_lead: if ask.reverse || ask.full_duplex {
            Duration::from_secs_f64(config.time_s)
        } else {
            Duration::ZERO
        },
    };
    DataPlane::start(Instant::now(), config, specs, setup)
}

/// The test's end after the data plane's: a UDP flow this side sent exchanges finals for
/// the server's report (the reports and the finals sent); a TCP connection this side sent
/// on reads the server's acknowledgement. A test the server sent (`-R`, `--full-duplex`:
/// its payload came instead of an acknowledgement) ends with its close.
fn close(
    ask: &Iperf2Ask,
    held: Vec<OwnedFd>,
    template: &[u8],
    (datagrams_sent, finals_of_the_plane): (&[u64], Vec<u64>),
) -> (Vec<Option<ServerReport>>, Vec<u64>) {
    if ask.udp && ask.full_duplex {
        // Both ends end as 2.1.8's own do over UDP both ways ("no-udp-fin"): each sending
        // flow sent its final once as its last datagram went (the data plane's
        // `udp_final`, which counts what the kernel took) and waits for no report.
        return (Vec::new(), finals_of_the_plane);
    }
    if ask.reverse || ask.full_duplex {
        return (Vec::new(), Vec::new());
    }
    if !ask.udp {
        for fd in held {
            read_acknowledgement(TcpStream::from(fd));
        }
        return (Vec::new(), Vec::new());
    }
    held.into_iter()
        .zip(datagrams_sent)
        .map(|(fd, &sent)| final_exchange(UdpSocket::from(fd), template, ask.length, sent))
        .unzip()
}

/// Whose figures the report holds: an iperf 2 server tells its client only a UDP test's
/// receiver figures, and only for a test the client sent.
fn whose_figures(ask: &Iperf2Ask) -> &'static str {
    if ask.full_duplex {
        return "against an iperf 2 server: it tells its client nothing of a test both ways, so only this side's figures are here, both ways (what it sent and what it received)";
    }
    match (ask.udp, ask.reverse) {
        (true, false) => "against an iperf 2 server: the receiver's figures are its server reports",
        (true, true) => "against an iperf 2 server: it tells its client nothing of what it sent, so only this side's (the receiver's) figures are here",
        (false, true) => "against an iperf 2 server: it tells its client nothing over TCP, so only this side's (the receiver's) figures are here",
        (false, false) => "against an iperf 2 server: it tells its client nothing over TCP, so only this side's (the sender's) figures are here",
    }
}

/// Asks the server to send a UDP test (`-R`): the header datagram (number 1, as 2.1.8's
/// client numbers it), again every [`REQUEST_EVERY`] until a datagram from the server is
/// waiting (left in the socket for the data plane to count) or `timeout` has passed.
fn ask_to_send(
    socket: &UdpSocket,
    template: &[u8],
    length: u32,
    timeout: Duration,
) -> Result<(), Iperf2ClientError> {
    let mut request = template.to_vec();
    request.resize((length as usize).max(request.len()), 0);
    let began = Instant::now();
    loop {
        Framing::Iperf2.write(&mut request, 0, UnixTime::now().nanos(), 0);
        match socket.send(&request) {
            Ok(_) => {}
            // Port unreachable, from an earlier try: no server there.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Err(closed(socket)),
            Err(e) => {
                return Err(Iperf2ClientError::Io {
                    context: "sending the UDP test's header",
                    source: e,
                })
            }
        }
        if crate::sys::wait_readable(&[socket.as_raw_fd()], REQUEST_EVERY) {
            // Readable for an error too: an earlier header met a closed port.
            match socket.take_error() {
                Ok(Some(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    return Err(closed(socket))
                }
                _ => return Ok(()),
            }
        }
        if began.elapsed() >= timeout {
            return Err(Iperf2ClientError::Connect(format!(
                "the iperf 2 server at {} sent nothing within {:.1} s of the UDP test's header (-R)",
                socket.peer_addr().map_or("?".into(), |a| a.to_string()),
                timeout.as_secs_f64()
            )));
        }
    }
}

fn closed(socket: &UdpSocket) -> Iperf2ClientError {
    Iperf2ClientError::Connect(format!(
        "no iperf 2 UDP server at {}: the port is closed",
        socket.peer_addr().map_or("?".into(), |a| a.to_string())
    ))
}

/// Sends a UDP flow's final datagram (its count of `sent`, negated) until the server
/// answers with its report, at most [`FINAL_TRIES`] times: the report (`None` where none
/// came) and the finals sent.
fn final_exchange(
    socket: UdpSocket,
    template: &[u8],
    length: u32,
    sent: u64,
) -> (Option<ServerReport>, u64) {
    let mut last = template.to_vec();
    last.resize((length as usize).max(last.len()), 0);
    let _ = socket.set_nonblocking(false);
    let _ = socket.set_read_timeout(Some(FINAL_WAIT));
    let mut answer = vec![0u8; (length as usize).max(REPORT_LEN) + 64];
    let mut finals = 0;
    for _ in 0..FINAL_TRIES {
        Framing::write_iperf2_final(&mut last, sent, UnixTime::now().nanos());
        if socket.send(&last).is_err() {
            return (None, finals);
        }
        finals += 1;
        let deadline = Instant::now() + FINAL_WAIT;
        while Instant::now() < deadline {
            match socket.recv(&mut answer) {
                Ok(n) => {
                    if let Some(report) = ServerReport::decode(&answer[..n]) {
                        return (Some(report), finals);
                    }
                }
                // Port unreachable: no server there any more.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return (None, finals),
                Err(_) => break,
            }
        }
    }
    (None, finals)
}

/// Reads a TCP server's acknowledgement of the header where one comes (a 2.1 server's),
/// so that the connection closes without unread bytes, which would reset it.
fn read_acknowledgement(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(ACK_WAIT));
    let mut ack = [0u8; iperf2::ACK_LEN];
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.read(&mut ack);
}

/// The server's side as it told it: for UDP, each flow's server report as a receiving
/// flow; for TCP, nothing but its software.
fn server_side(
    local: &SideResult,
    connected: &[(SocketAddr, SocketAddr)],
    reports: &[Option<ServerReport>],
) -> SideResult {
    let flows = reports
        .iter()
        .zip(connected)
        .zip(&local.flows)
        .filter_map(|((report, (ours, theirs)), sent)| {
            let report = report.as_ref()?;
            let received = report.datagrams.saturating_sub(report.lost);
            Some(FlowSide {
                id: sent.id,
                udp: Some(UdpCounts {
                    received,
                    lost: report.lost,
                    out_of_order: report.out_of_order,
                    jitter_ms: report.jitter_ns / 1e6,
                    transit_sum_ms: report.transit.map_or(0.0, |t| t.sum_ns / 1e6),
                    transit_samples: report.transit.map_or(0, |t| t.count),
                    ..UdpCounts::default()
                }),
                datagrams_total: received,
                ..plain_flow(
                    Role::Receive,
                    (*theirs, *ours),
                    report.bytes,
                    report.duration_ns as f64 / 1e9,
                    None,
                )
            })
        })
        .collect();
    SideResult {
        host: HostFacts {
            software: "iperf 2".into(),
            ..HostFacts::default()
        },
        flows,
        ..SideResult::default()
    }
}
