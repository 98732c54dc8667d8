//! Serving iperf 2 clients' UDP tests on iperf 2's port (docs/iperf2.md).
//!
//! An iperf 2 UDP test has no connection: its first datagram carries the client's header,
//! every datagram its number and send time, and the last ones (finals, their numbers
//! negated) ask the server for its report, which the client prints as the server's
//! figures. One thread reads the port's socket; each client address (and port) is a test
//! ([`UdpTest`], sans-IO), counted as the multicast receivers count iperf 2's datagrams.
//!
//! Bounds: the tests under way at once ([`MOST_TESTS`]); each test within the server's
//! limits and places like a TCP test's; a test whose datagrams stop is ended after
//! [`SILENCE`]; the answers to a test's finals never carry more bytes than arrived from
//! its address (no reflection beyond what the source itself sent, docs/security.md).

use crate::access;
use crate::iperf2_kept::{check_limits, config_of, keep_report, plain_flow, Finished};
use crate::served::Served;
use crate::server_state::ServerState;
use linerate_model::clock::UnixTime;
use linerate_model::latency::LatencyBucket;
use linerate_proto::iperf2::{self, Amount, ClientHeader, UdpTest};
use linerate_report::iperf2_text::{histogram_line, Pdf};
use linerate_report::{FlowSide, Role, SideResult, UdpCounts};
use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Tests under way at once; datagrams of more are dropped, counted in the log.
const MOST_TESTS: usize = 64;
/// A test whose datagrams stop for this long has ended without its final.
const SILENCE: Duration = Duration::from_secs(10);
/// How long an ended test stays to answer its client's repeated finals.
const ANSWERING: Duration = Duration::from_secs(5);
/// The longest datagram read.
const MAX_DATAGRAM: usize = 65_536;

/// One client's test, with what it holds of the server.
struct Entry {
    test: UdpTest,
    id: u64,
    served: Served,
    started_at: f64,
    /// When its report was kept (its final, or the silence).
    kept_at: Option<Instant>,
    /// Refused: its datagrams are dropped until it has been silent a while.
    refused: bool,
    /// For a `--trip-times` test: whether the clocks allow its one-way delays (and how),
    /// or why not.
    clocks: Option<Result<String, String>>,
}

/// Binds iperf 2's port for UDP on the server's address.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = crate::sys::dual_stack(addr, socket2::Type::DGRAM)?;
    // Room for a fast test's burst while the thread accounts the last.
    let _ = socket.set_recv_buffer_size(8 << 20);
    // A one-way delay is to the datagram's arrival at this host, not to when a busy host
    // ran this thread to read it (iperf 2 reads the kernel's time too).
    let _ = linerate_stamp::sys::enable_meta(&socket, addr.is_ipv6());
    socket.bind(&addr.into())?;
    // Read without waiting (the receive takes the kernel's arrival time); the loop waits
    // in poll.
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Serves iperf 2's UDP tests on `socket` until the server shuts down.
pub(crate) fn spawn(shared: Arc<ServerState>, socket: UdpSocket) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("linerate-iperf2-udp".into())
        .spawn(move || serve(&shared, &socket))
}

fn serve(shared: &Arc<ServerState>, socket: &UdpSocket) {
    let began = Instant::now();
    let mut tests: BTreeMap<SocketAddr, Entry> = BTreeMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut crowded = 0u64;
    let mut last_tick = Instant::now();
    while !shared.shutdown.load(Ordering::Relaxed) {
        match linerate_stamp::sys::recv(socket, &mut buf) {
            Ok((len, from, meta)) => {
                let mono_ns = began.elapsed().as_nanos() as u64;
                // The kernel says a datagram's whole length even where it was cut short.
                let datagram = &buf[..len.min(buf.len())];
                if !tests.contains_key(&from) {
                    if tests.len() >= MOST_TESTS {
                        crowded += 1;
                        continue;
                    }
                    let Some(entry) = begin(shared, socket, datagram, from, mono_ns) else {
                        continue;
                    };
                    tests.insert(from, entry);
                }
                let entry = tests.get_mut(&from).expect("present");
                if entry.refused {
                    continue;
                }
                let wall_ns = meta
                    .kernel_unix_ns
                    .and_then(|ns| u64::try_from(ns).ok())
                    .unwrap_or_else(|| UnixTime::now().nanos());
                log_intervals(shared, entry, from, mono_ns);
                if let Some(answer) = entry.test.datagram(datagram, mono_ns, wall_ns) {
                    let _ = socket.send_to(&answer, from);
                }
                if entry.test.ended() && entry.kept_at.is_none() {
                    finish(shared, socket, entry, from, None);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                crate::sys::wait_readable(&[socket.as_raw_fd()], Duration::from_millis(100));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                shared.log(&format!("iperf 2 UDP: receive failed: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if last_tick.elapsed() >= Duration::from_millis(100) {
            last_tick = Instant::now();
            let mono_ns = began.elapsed().as_nanos() as u64;
            expire(shared, socket, &mut tests, mono_ns);
            if crowded > 0 {
                shared.log(&format!(
                    "iperf 2 UDP: {crowded} datagrams dropped: {MOST_TESTS} tests under way"
                ));
                crowded = 0;
            }
        }
    }
    for (from, mut entry) in tests {
        if entry.kept_at.is_none() && !entry.refused {
            finish(
                shared,
                socket,
                &mut entry,
                from,
                Some("the server shut down"),
            );
        }
        entry.served.end(shared);
    }
}

/// A new address's first datagram: a test where it carries a header the server serves,
/// else refused (logged once; the address's datagrams dropped until it is silent).
fn begin(
    shared: &Arc<ServerState>,
    socket: &UdpSocket,
    datagram: &[u8],
    from: SocketAddr,
    mono_ns: u64,
) -> Option<Entry> {
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut entry = Entry {
        test: UdpTest::new(ClientHeader::plain(1, Amount::Unsaid), mono_ns),
        id,
        served: Served::default(),
        started_at: UnixTime::now().seconds(),
        kept_at: None,
        refused: true,
        clocks: None,
    };
    if linerate_proto::datagram::Framing::Iperf2.is_final(datagram) {
        // A straggler of a test already forgotten: nothing to answer.
        return None;
    }
    let ip = access::canonical(from.ip());
    if let Err(rule) = shared.gate.policy.permits(ip) {
        shared.refused(from, rule);
        return Some(entry);
    }
    let header = match datagram
        .get(iperf2::UDP_HEADER_AT..)
        .map(ClientHeader::decode)
    {
        Some(Ok(Some(header))) => header,
        Some(Err(e)) => {
            shared.refused(from, &format!("iperf 2 UDP: {e}"));
            return Some(entry);
        }
        _ => {
            shared.refused(from, "iperf 2 UDP: a first datagram without a test header");
            return Some(entry);
        }
    };
    // Video frames (`--isochronous`) are served over UDP: the receiver puts them back
    // together (linerate_proto::video).
    let unserved = header
        .unserved()
        .filter(|u| *u != iperf2::Unserved::Isochronous)
        .map(|u| u.flag())
        .or(header.reverse().then_some("-R (reverse)"));
    if let Some(flag) = unserved {
        let why = format!("iperf 2: asked {flag} over UDP, which this server does not serve");
        shared.refused(from, &why);
        return Some(entry);
    }
    let local_port = socket.local_addr().map(|a| a.port()).unwrap_or(0);
    let accepted = entry
        .served
        .take_place(shared)
        .and_then(|()| check_limits(shared, &mut entry.served, &header, 1, from))
        .and_then(|()| config_of(shared, &header, 1, from, local_port, true).map(|_| ()));
    if let Err(why) = accepted {
        shared.refused(from, &format!("iperf 2 UDP test {id}: {why}"));
        entry.served.end(shared);
        return Some(entry);
    }
    shared.log(&format!(
        "iperf 2 UDP test {id} from {from}: accepted: {}{}",
        match header.amount {
            Amount::Seconds(s) => format!("{s} s"),
            Amount::Bytes(n) => format!("{n} bytes"),
            Amount::Unsaid => "no amount".into(),
        },
        header
            .release()
            .map_or(String::new(), |r| format!(", iperf {r}"))
    ));
    if header.trip_times() {
        entry.clocks = Some(clocks_comparable(shared.config.same_clock, from.ip()));
    }
    let gives = matches!(entry.clocks, Some(Ok(_)));
    let interval_ns = shared
        .config
        .iperf2
        .histogram_interval()
        .map(|every| every.as_nanos() as u64);
    entry.test = UdpTest::new(header, mono_ns)
        .giving_transit(gives)
        .with_intervals(interval_ns);
    entry.refused = false;
    Some(entry)
}

/// Whether this host's clock and `client`'s are on one time scale, as one-way delays need
/// (docs/stamp.md's rule): `Ok` says how, `Err` why not. One clock where the client is
/// one of this host's addresses or the operator says so (`--same-clock`: a lab's
/// namespaces); else this host's clock must be kept by a time source, and the client,
/// asking `--trip-times`, declares its own so (iperf 2 sends no state of its clock).
pub(crate) fn clocks_comparable(
    same_clock: bool,
    client: std::net::IpAddr,
) -> Result<String, String> {
    peers_clock_comparable(same_clock, client, "client")
}

/// [`clocks_comparable`] for a peer that is `who` (the client, or the server whose test
/// back this side receives).
pub(crate) fn peers_clock_comparable(
    same_clock: bool,
    peer: std::net::IpAddr,
    who: &str,
) -> Result<String, String> {
    if same_clock {
        return Ok("both ends read one clock (--same-clock)".into());
    }
    if linerate_stamp::sender::is_local(peer) {
        return Ok(format!("both ends read one clock (the {who} is this host)"));
    }
    match linerate_hostinfo::clock::read() {
        Some(state) if state.synchronised => Ok(format!(
            "this host's clock {}; the {who}'s as its --trip-times declares",
            state.describe()
        )),
        Some(state) => Err(format!("this host's clock is {}", state.describe())),
        None => Err("this host's clock discipline cannot be read".into()),
    }
}

/// The test's flow as this server received it, and as its client sent it (the count its
/// final datagram carried, of datagrams of the length that arrived).
pub(crate) fn flows_of(
    test: &UdpTest,
    report: &iperf2::ServerReport,
    (local, from): (SocketAddr, SocketAddr),
    cut: Option<&str>,
) -> (FlowSide, FlowSide) {
    let seconds = report.duration_ns as f64 / 1e9;
    let counts = test.counts();
    let frames = test.frames();
    let flow = FlowSide {
        frames: frames.map(|f| f.counts()),
        one_way_delay_us: report.transit.and_then(|_| test.delays()),
        udp: Some(UdpCounts {
            received: counts.datagrams,
            lost: report.lost,
            out_of_order: counts.out_of_order,
            duplicates: counts.duplicates,
            foreign: counts.foreign,
            jitter_ms: counts.jitter_ns / 1e6,
            loss_events: counts.loss_events,
            // The one-way delay only where the clocks allow it.
            transit_sum_ms: report.transit.map_or(0.0, |_| counts.transit_sum_ns / 1e6),
            transit_samples: report.transit.map_or(0, |_| counts.transit_samples),
            ..UdpCounts::default()
        }),
        datagrams_total: counts.datagrams,
        ..plain_flow(
            Role::Receive,
            (local, from),
            report.bytes,
            seconds,
            cut.map(str::to_string),
        )
    };
    let length = counts.bytes.checked_div(counts.datagrams).unwrap_or(0);
    let sent = FlowSide {
        role: Role::Send,
        local_addr: from.to_string(),
        remote_addr: local.to_string(),
        window_bytes: report.datagrams * length,
        bytes_total: report.datagrams * length,
        error: None,
        udp: Some(UdpCounts {
            sent: report.datagrams,
            ..UdpCounts::default()
        }),
        datagrams_total: report.datagrams,
        // The frames its numbers say it sent and skipped: iperf 2 says no more.
        frames: frames.map(|f| f.numbered()),
        ..flow.clone()
    };
    (flow, sent)
}

/// An iperf 2 `--isochronous` stream's frames as its run keeps them: the rate its period
/// says, the load its frames' sizes made (iperf 2 sends neither its mean nor its spread);
/// `None` before a frame arrived.
pub(crate) fn frames_asked(
    frames: &linerate_proto::video::FrameTracker,
) -> Option<linerate_model::video::VideoSettings> {
    let period_ns = frames.period_ns();
    if period_ns == 0 {
        return None;
    }
    // Its period is whole microseconds: 30 a second is 33,333 us, 30.0003 a second.
    let fps = (1e12 / period_ns as f64).round() / 1e3;
    let (mean, spread) = frames.declared_load_bps(fps);
    Some(linerate_model::video::VideoSettings {
        fps,
        mean_bps: mean.round() as u64,
        stdev_bps: spread.round() as u64,
        gap_us: 0,
        seed: 0,
        key_frames: None,
    })
}

/// What the kept run says of an `--isochronous` stream's figures.
fn config_video_note(frames: Option<&linerate_proto::video::FrameTracker>) -> Option<String> {
    frames.map(|_| {
        "--isochronous: iperf 2 sends neither its frames' mean nor their spread: the run's are \
         its frames' own sizes; each frame's latency counts from its first datagram's send \
         time (iperf 2's frames carry no first write, and its stream's start lags its frame \
         clock)"
            .to_string()
    })
}

/// Notes joined into one.
fn notes(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// What the kept run says of a `--trip-times` test's one-way delays: the figures and how
/// the clocks were judged, or why they were withheld.
fn trip_times_note(clocks: &Result<String, String>, transit: Option<&iperf2::Transit>) -> String {
    match (clocks, transit) {
        (Ok(how), Some(transit)) => format!(
            "--trip-times: one-way delay {:.3} ms mean ({:.3} to {:.3}, standard deviation {:.3}) over {} datagrams in order; {how}",
            transit.mean_ns / 1e6,
            transit.min_ns / 1e6,
            transit.max_ns / 1e6,
            transit.deviation_ns() / 1e6,
            transit.count
        ),
        (Ok(how), None) => format!("--trip-times: no datagram arrived in order; {how}"),
        (Err(why), _) => format!("--trip-times: one-way delay withheld: {why}"),
    }
}

/// Ends tests silent too long; forgets ended ones once their client has had its answers.
fn expire(
    shared: &Arc<ServerState>,
    socket: &UdpSocket,
    tests: &mut BTreeMap<SocketAddr, Entry>,
    mono_ns: u64,
) {
    let silence = SILENCE.as_nanos() as u64;
    for (from, entry) in tests.iter_mut() {
        let quiet = mono_ns.saturating_sub(entry.test.last_ns()) >= silence;
        if quiet && entry.kept_at.is_none() && !entry.refused {
            let why = format!("no datagram for {} s and no final", SILENCE.as_secs());
            finish(shared, socket, entry, *from, Some(&why));
        }
    }
    tests.retain(|_, entry| {
        let done = match entry.kept_at {
            Some(at) => at.elapsed() >= ANSWERING,
            None => entry.refused && mono_ns.saturating_sub(entry.test.last_ns()) >= silence,
        };
        if done {
            entry.served.end(shared);
        }
        !done
    });
}

/// A UDP test's datagrams' one-way delays over `span` as iperf 2's histogram line has
/// them (`T8`, its one connection): the test's `whole`, or an interval's.
fn datagrams_pdf(span: (f64, f64), delays: &[LatencyBucket], whole: bool) -> Pdf<'_> {
    Pdf {
        id: Some(1),
        span,
        name: "T8",
        whole,
        delays,
        slowest: None,
    }
}

/// `serve --histogram-interval`: the histograms of the intervals of `entry`'s test that
/// ended before a datagram that came at `mono_ns`, as iperf 2's server prints each
/// interval's (`T8-PDF`, no `(f)`); an interval without a datagram has no line.
fn log_intervals(shared: &ServerState, entry: &mut Entry, from: SocketAddr, mono_ns: u64) {
    let Some(bins) = shared.config.iperf2.histograms else {
        return;
    };
    for interval in entry.test.intervals_ended(mono_ns) {
        if let Some(line) =
            histogram_line(&datagrams_pdf(interval.span, &interval.delays, false), bins)
        {
            shared.log_own(&format!(
                "iperf 2 UDP test {} from {from}: {line}",
                entry.id
            ));
        }
    }
}

/// The test's end: logged, its place given back, its run kept.
fn finish(
    shared: &Arc<ServerState>,
    socket: &UdpSocket,
    entry: &mut Entry,
    from: SocketAddr,
    cut: Option<&str>,
) {
    entry.kept_at = Some(Instant::now());
    entry.served.end(shared);
    let report = entry.test.report();
    let seconds = report.duration_ns as f64 / 1e9;
    let bps = if seconds > 0.0 {
        report.bytes as f64 * 8.0 / seconds
    } else {
        0.0
    };
    shared.log(&format!(
        "iperf 2 UDP test {} from {from}: {}, {} bytes in {seconds:.3} s ({:.1} Mbit/s), {} of {} datagrams lost, jitter {:.3} ms",
        entry.id,
        cut.map_or("ended".to_string(), |why| format!("cut: {why}")),
        report.bytes,
        bps / 1e6,
        report.lost,
        report.datagrams,
        report.jitter_ns / 1e6
    ));
    let delays = report.transit.and_then(|_| entry.test.delays());
    if let (Some(bins), Some(delays)) = (shared.config.iperf2.histograms, delays.as_ref()) {
        // iperf 2's server's line for the test's datagrams' one-way delays.
        if let Some(line) = histogram_line(
            &datagrams_pdf((0.0, seconds), &delays.histogram, true),
            bins,
        ) {
            shared.log_own(&format!(
                "iperf 2 UDP test {} from {from}: {line}",
                entry.id
            ));
        }
    }
    let header = &entry.test.header;
    let local = socket.local_addr().unwrap_or(from);
    let Ok(mut config) = config_of(shared, header, 1, from, local.port(), true) else {
        return;
    };
    config.video = entry.test.frames().and_then(frames_asked);
    if let Some(video) = config.video {
        // The load its frames made, not the pace of a plain UDP test (iperf 2's default).
        config.rate_bps = Some(video.mean_bps);
    }
    let (flow, sent) = flows_of(&entry.test, &report, (local, from), cut);
    let ours = SideResult {
        flows: vec![flow],
        host: shared.host.clone(),
        ..SideResult::default()
    };
    let finished = Finished {
        id: entry.id,
        peer: from,
        started_at: entry.started_at,
        theirs: if entry.test.ended() {
            vec![sent]
        } else {
            Vec::new()
        },
        ours,
        note: notes(
            entry
                .clocks
                .as_ref()
                .map(|clocks| trip_times_note(clocks, report.transit.as_ref())),
            config_video_note(entry.test.frames()),
        ),
    };
    keep_report(shared, header, config, finished);
}
