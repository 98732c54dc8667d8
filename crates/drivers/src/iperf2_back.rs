//! `linerate iperf2 -c -d` and `-r`: the test back. The client's header names a port
//! (`-L`, iperf 2's 5001 by default) and asks the server to connect to it, at once (`-d`,
//! beside the test out) or once the test out has ended (`-r`), with as many connections
//! as the test's, and to send on them for the test's time or count. This side listens
//! before the header goes, takes connections from the server's address alone (any other
//! is closed and counted), reads the header each begins with, and receives on them with
//! the data plane as a `-R` test does: a run of its own, the server's sending figures
//! being its own to keep. Over UDP the server sends its datagrams to the port instead,
//! from the server's address alone, and this side counts them as `serve` counts a UDP
//! test (`linerate_proto::iperf2::UdpTest`), answering the server's final datagrams with
//! its report, as iperf 2's client does.

use crate::client::TestUpdate;
use crate::iperf2_client::{Back, Iperf2Ask, Iperf2ClientError, Iperf2Outcome, Iperf2Test};
use linerate_engine::flow::FlowSocket;
use linerate_model::clock::UnixTime;
use linerate_proto::iperf2::{self, BurstTracker, ClientHeader, UdpTest};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// iperf 2's listening port for a test back where `-L` does not say.
pub const DEFAULT_LISTEN_PORT: u16 = 5001;
/// How long each connection back may take to say its header once it is open.
const HEADER_WAIT: Duration = Duration::from_secs(3);
/// How long the connections back may take to arrive: past the test out's end for `-r`
/// (the server connects once its side of the test has ended), from the start for `-d`.
const ARRIVAL_WAIT: Duration = Duration::from_secs(5);

/// A test against an iperf 2 server and, where it asks one (`-d`, `-r`), the listener its
/// test back arrives at: bound before the test's header goes.
pub struct Iperf2Tests {
    out: Iperf2Test,
    ask: Iperf2Ask,
    listener: Option<BackListener>,
}

/// Opens the test (`crate::iperf2_client::open`), its test back's listener first.
pub fn open(ask: &Iperf2Ask) -> Result<Iperf2Tests, Iperf2ClientError> {
    // The header is refused before anything listens.
    crate::iperf2_client::config_of(ask).map_err(Iperf2ClientError::Usage)?;
    let listener = ask
        .back
        .map(|back| BackListener::bind(back, ask.addr, (ask.parallel, ask.udp)))
        .transpose()?;
    Ok(Iperf2Tests {
        out: crate::iperf2_client::open(ask)?,
        ask: ask.clone(),
        listener,
    })
}

impl Iperf2Tests {
    /// The test out's connections, (local, remote), in flow order.
    pub fn connected(&self) -> &[(SocketAddr, SocketAddr)] {
        self.out.connected()
    }

    /// The test out's first socket buffer (`Iperf2Test::buffer_bytes`).
    pub fn buffer_bytes(&self) -> Option<u64> {
        self.out.buffer_bytes()
    }

    /// Runs the test out to its end, with `-d` the test back beside it, with `-r` after
    /// it; the test back's outcome (or why it had none) in the outcome's `back`.
    pub fn run(
        self,
        cancel: &AtomicBool,
        progress: &mut dyn FnMut(TestUpdate),
    ) -> Result<Iperf2Outcome, Iperf2ClientError> {
        let Iperf2Tests { out, ask, listener } = self;
        let Some(listener) = listener else {
            return out.run(cancel, progress);
        };
        let told = |back: Result<Iperf2Outcome, Iperf2ClientError>| {
            Some(back.map(Box::new).map_err(|e| e.to_string()))
        };
        if ask.back.is_some_and(|b| b.dual) {
            let until = listener.deadline(&ask);
            return std::thread::scope(|scope| {
                let back = scope.spawn(|| listener.receive(&ask, until, cancel));
                let ran = out.run(cancel, progress);
                let back = back.join().unwrap_or(Err(Iperf2ClientError::Interrupted));
                ran.map(|ran| Iperf2Outcome {
                    back: told(back),
                    ..ran
                })
            });
        }
        let ran = out.run(cancel, progress)?;
        let until = listener.deadline(&ask);
        Ok(Iperf2Outcome {
            back: told(listener.receive(&ask, until, cancel)),
            ..ran
        })
    }
}

/// How long a UDP test back may fall silent, once begun, before it is taken as ended (its
/// finals lost).
const UDP_SILENCE: Duration = Duration::from_secs(3);

/// The listener the server's connections back arrive at, open before the header goes.
pub struct BackListener {
    listener: Listening,
    server: IpAddr,
    count: u32,
}

enum Listening {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

impl BackListener {
    /// Listens on `back.port` of every address of the server's family, for `count`
    /// connections from `server` (TCP), or its datagrams (`udp`).
    pub fn bind(
        back: Back,
        server: SocketAddr,
        (count, udp): (u32, bool),
    ) -> Result<BackListener, Iperf2ClientError> {
        let any: IpAddr = if server.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        let cannot = |e: io::Error| {
            Iperf2ClientError::Usage(format!(
                "-L {}: cannot listen there for the test back: {e}",
                back.port
            ))
        };
        let listener = if udp {
            let socket = crate::iperf2_udp::bind(SocketAddr::new(any, back.port));
            Listening::Udp(socket.map_err(cannot)?)
        } else {
            let listener = TcpListener::bind((any, back.port)).map_err(cannot)?;
            listener.set_nonblocking(true).map_err(cannot)?;
            Listening::Tcp(listener)
        };
        Ok(BackListener {
            listener,
            server: canonical(server.ip()),
            count,
        })
    }

    /// Receives the test back (`ask` as the test out asked it) until `until` at the
    /// latest for its start: its outcome, or why it had none.
    pub fn receive(
        self,
        ask: &Iperf2Ask,
        until: Instant,
        cancel: &AtomicBool,
    ) -> Result<Iperf2Outcome, Iperf2ClientError> {
        // This side receives: with --trip-times the server's writes back carry their
        // send times, which `receive_tcp`'s tracker follows; none of this side's writes
        // are timed.
        let back = Iperf2Ask {
            reverse: true,
            back: None,
            trip_times: false,
            ..ask.clone()
        };
        let BackListener {
            listener,
            server,
            count,
        } = self;
        match listener {
            Listening::Tcp(listener) => {
                receive_tcp(&listener, (server, count), &back, until, cancel)
            }
            Listening::Udp(socket) => receive_udp(&socket, server, &back, until, cancel),
        }
    }

    /// The latest the connections back may arrive: for `-d` from now, over the test's time;
    /// for `-r` from the end of the test out.
    pub fn deadline(&self, ask: &Iperf2Ask) -> Instant {
        let time = match ask.amount {
            iperf2::Amount::Seconds(s) => Duration::from_secs_f64(s),
            _ => Duration::ZERO,
        };
        Instant::now() + ask.connect_timeout.max(ARRIVAL_WAIT) + time / 2
    }
}

/// Takes the server's `count` connections (until `until`; any other address's are closed
/// unread), reads each one's header, and receives the test back on them as a `-R` test.
fn receive_tcp(
    listener: &TcpListener,
    (server, count): (IpAddr, u32),
    back: &Iperf2Ask,
    until: Instant,
    cancel: &AtomicBool,
) -> Result<Iperf2Outcome, Iperf2ClientError> {
    let mut streams = Vec::with_capacity(count as usize);
    while streams.len() < count as usize {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Iperf2ClientError::Interrupted);
        }
        match listener.accept() {
            Ok((stream, peer)) if canonical(peer.ip()) == server => {
                streams.push((stream, peer));
            }
            // Not the server: closed unread.
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return Err(Iperf2ClientError::Connect(format!(
                            "the server connected back {} of {} times by the deadline (is -L {} reachable from it?)",
                            streams.len(),
                            count,
                            listener.local_addr().map_or(0, |a| a.port())
                        )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Iperf2ClientError::Io {
                    context: "accepting the test back",
                    source,
                })
            }
        }
    }
    let mut sockets = Vec::with_capacity(streams.len());
    let mut connected = Vec::with_capacity(streams.len());
    let mut timed = false;
    for (mut stream, peer) in streams {
        let header = read_header(&mut stream).map_err(|source| Iperf2ClientError::Io {
            context: "reading the test back's header",
            source,
        })?;
        timed |= header.is_some_and(|h| h.trip_times());
        connected.push((stream.local_addr().unwrap_or(peer), peer));
        sockets.push(FlowSocket::Tcp(stream));
    }
    // The server's writes carry their send times (it sends with --trip-times, as 2.1.8
    // does for a --trip-times test's -d or -r): each is timed to its last byte, where the
    // clocks allow.
    let clocks = timed.then(|| crate::iperf2_udp::peers_clock_comparable(false, server, "server"));
    let tracker = clocks
        .as_ref()
        .filter(|c| c.is_ok())
        .map(|_| Arc::new(Mutex::new(BurstTracker::new())));
    let mut outcome =
        crate::iperf2_client::received_on(back, (sockets, connected), tracker.clone(), cancel)?;
    if let Some(clocks) = clocks {
        let tracked = tracker.map(|t| t.lock().unwrap_or_else(|e| e.into_inner()).clone());
        outcome
            .report
            .warnings
            .push(crate::iperf2_server::trip_times_note(
                &clocks,
                tracked.as_ref(),
                "the server's",
            ));
    }
    Ok(outcome)
}

/// A UDP test back: the server's datagrams to the socket, counted from the first (its
/// header) until its finals, answered with this side's report, or its silence; datagrams
/// from any other address are dropped unread.
fn receive_udp(
    socket: &UdpSocket,
    server: IpAddr,
    back: &Iperf2Ask,
    until: Instant,
    cancel: &AtomicBool,
) -> Result<Iperf2Outcome, Iperf2ClientError> {
    let began = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut test: Option<(UdpTest, SocketAddr, f64)> = None;
    let mut last = Instant::now();
    let io = |source| Iperf2ClientError::Io {
        context: "receiving the test back",
        source,
    };
    loop {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Iperf2ClientError::Interrupted);
        }
        let ended = test.as_ref().is_some_and(|(t, _, _)| t.ended());
        if ended || (test.is_some() && last.elapsed() >= UDP_SILENCE) {
            break;
        }
        if test.is_none() && Instant::now() >= until {
            return Err(Iperf2ClientError::Connect(format!(
                "no datagram of the test back came to -L {} by the deadline",
                socket.local_addr().map_or(0, |a| a.port())
            )));
        }
        let (len, from, meta) = match linerate_stamp::sys::recv(socket, &mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                crate::sys::wait_readable(&[socket.as_raw_fd()], Duration::from_millis(50));
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        if canonical(from.ip()) != server {
            continue;
        }
        let datagram = &buf[..len.min(buf.len())];
        let mono_ns = began.elapsed().as_nanos() as u64;
        let wall_ns = meta
            .kernel_unix_ns
            .and_then(|ns| u64::try_from(ns).ok())
            .unwrap_or_else(|| UnixTime::now().nanos());
        let (counting, to, _) = test.get_or_insert_with(|| {
            let header = datagram
                .get(iperf2::UDP_HEADER_AT..)
                .and_then(|h| ClientHeader::decode(h).ok().flatten())
                .unwrap_or_else(|| ClientHeader::plain(1, iperf2::Amount::Unsaid));
            (
                UdpTest::new(header, mono_ns),
                from,
                UnixTime::now().seconds(),
            )
        });
        last = Instant::now();
        if let Some(answer) = counting.datagram(datagram, mono_ns, wall_ns) {
            let _ = socket.send_to(&answer, *to);
        }
    }
    let (counted, from, started_at) = test.expect("the loop ends with a test");
    kept_udp(
        back,
        &counted,
        (socket.local_addr().map_err(io)?, from),
        started_at,
    )
}

/// A UDP test back as its run keeps it: this side's receiving flow, and the server's
/// sending one as its final datagrams said it (where they came).
fn kept_udp(
    back: &Iperf2Ask,
    counted: &UdpTest,
    (local, from): (SocketAddr, SocketAddr),
    started_at: f64,
) -> Result<Iperf2Outcome, Iperf2ClientError> {
    let report = counted.report();
    let cut = (!counted.ended()).then_some("its final datagrams did not come");
    let (flow, sent) = crate::iperf2_udp::flows_of(counted, &report, (local, from), cut);
    let config = crate::iperf2_client::config_of(back).map_err(Iperf2ClientError::Usage)?;
    let ours = linerate_report::SideResult {
        flows: vec![flow.clone()],
        host: linerate_hostinfo::host_facts(),
        ..Default::default()
    };
    let theirs = linerate_report::SideResult {
        flows: if counted.ended() {
            vec![sent]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
    let report = linerate_report::Report::assemble(
        &config.test_name(),
        &tool,
        started_at,
        config,
        ours,
        theirs,
    );
    Ok(Iperf2Outcome {
        report,
        connected: vec![(local, from)],
        flows: vec![flow],
        server_reports: Vec::new(),
        datagrams_sent: Vec::new(),
        finals_sent: Vec::new(),
        back: None,
    })
}

/// The header a connection back may begin with: where the first bytes are iperf 2's base
/// header, it and (where its flags say so) the extended one are read and set aside, and
/// returned where they decode; where they are payload (2.1.8's server connects back
/// sending payload alone), they are left for the data plane to count.
fn read_header(stream: &mut TcpStream) -> io::Result<Option<ClientHeader>> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HEADER_WAIT))?;
    let mut base = [0u8; iperf2::BASE_LEN];
    let until = Instant::now() + HEADER_WAIT;
    // A test back of fewer bytes than a header is payload alone.
    let mut seen = stream.peek(&mut base)?;
    while seen < base.len() && seen > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
        seen = stream.peek(&mut base)?;
    }
    let whole = match seen {
        n if n == base.len() => iperf2::header_len(&base).unwrap_or(0),
        _ => 0,
    };
    let mut decoded = None;
    if whole > 0 {
        let mut header = vec![0u8; whole];
        stream.read_exact(&mut header)?;
        decoded = ClientHeader::decode(&header).ok().flatten();
    }
    stream.set_read_timeout(None)?;
    Ok(decoded)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
