//! The Session-Sender's loop (`linerate stamp`): probes paced on a fixed timeline (a late
//! wake-up does not stretch the gaps, and a sender that fell far behind starts the
//! timeline again rather than bursting), answers taken as they arrive with the kernel's
//! time of arrival, then a wait for the last answers.

// A socket loop reads the clock; the sans-IO parts (wire, reflector, tally) take it.
#![allow(clippy::disallowed_methods)]

use crate::sys;
use crate::tally::{Reply, Settings, Tally};
use crate::wire::{self, tlv, ErrorEstimate, Key, Mode, Reflected, TestPacket, Timestamp};
use linerate_model::clock::UnixTime;
use linerate_report::stamp::{Protocol, StampInterval, StampReport};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A run as asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The reflector as named, and where it resolved.
    pub target: String,
    pub addr: SocketAddr,
    pub mode: Mode,
    pub key: Option<Key>,
    pub rate_pps: f64,
    /// Stop after this many probes, or after `duration`, whichever comes first.
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// What the probes ask beyond the base packet (padding, Class of Service, Direct
    /// Measurement).
    pub extensions: tlv::Request,
    /// The DSCP probes leave with (and ask of the answers).
    pub dscp: Option<u8>,
    /// Where the probes leave from (`--bind`, `--bind-dev`); `None`: where the routes say.
    pub source: Option<linerate_model::Source>,
    /// How long to wait for answers after the last probe.
    pub timeout: Duration,
    /// A live line every this often (0: none).
    pub report_every: Duration,
    pub same_clock: bool,
    /// The session's identifier (nonzero; drawn by the caller).
    pub ssid: u16,
    pub started_at: f64,
    /// Another protocol's packets in place of STAMP's (an irtt session's, opened by its
    /// caller); `None`: STAMP.
    pub wire: Option<std::sync::Arc<dyn ForeignWire>>,
    /// The probes are a call's frames: each way scored as a call's (crate::call).
    pub call: Option<linerate_model::CallStream>,
}

/// Another two-way protocol carried by a session (irtt's): its probes written and its
/// answers read as STAMP's fields, so that one loop, one tally and one report serve both.
pub trait ForeignWire: std::fmt::Debug + Send + Sync {
    fn protocol(&self) -> Protocol;
    /// Each probe's length, octets.
    fn size(&self) -> usize;
    /// Writes probe `seq` into `out` (cleared first).
    fn encode(&self, seq: u32, out: &mut Vec<u8>);
    /// Reads an answer: the sender's sequence number and the answerer's times and counts
    /// as a reflected STAMP packet (the sender's time left for the tally to fill from the
    /// probe it sent, where the protocol does not copy it back), or `None` where it is no
    /// answer of this session.
    fn decode(&self, bytes: &[u8]) -> Option<Reflected>;
    /// Whether `bytes` says the answerer ended the session (no more probes are answered).
    fn ends(&self, bytes: &[u8]) -> bool;
    /// The answerer's window of the requests it received before this one (irtt's: bit i
    /// for the request i before), where the answer (already decoded) carries one.
    fn received_window(&self, _bytes: &[u8]) -> Option<u64> {
        None
    }
}

impl Options {
    /// An open session to the reflector `target` (resolved to `addr`) as each caller
    /// starts from: ten probes a second for ten seconds, STAMP's base packet, no marks,
    /// answers awaited 2 s, a live line a second, one clock where `addr` is this host's,
    /// a fresh session identifier, starting now.
    pub fn to(target: String, addr: SocketAddr) -> Options {
        Options {
            target,
            addr,
            mode: Mode::Open,
            key: None,
            rate_pps: 10.0,
            count: None,
            duration: Some(Duration::from_secs(10)),
            extensions: tlv::Request::default(),
            dscp: None,
            source: None,
            timeout: Duration::from_secs(2),
            report_every: Duration::from_secs(1),
            same_clock: is_local(addr.ip()),
            ssid: crate::random_ssid(),
            started_at: UnixTime::now().seconds(),
            wire: None,
            call: None,
        }
    }

    /// The size of each probe, octets of UDP payload.
    pub fn size(&self) -> usize {
        if let Some(wire) = &self.wire {
            return wire.size();
        }
        let mut tlvs = Vec::new();
        self.extensions
            .encode(0, &[0; 4], self.key.as_ref(), &mut tlvs);
        self.mode.base_len() + tlvs.len()
    }

    /// Pads each probe to `size` octets with an Extra Padding TLV: refused, in words, below
    /// the probe's own size, or where the room left is less than a TLV's header.
    pub fn pad_to(&mut self, size: usize) -> Result<(), String> {
        let bare = self.size();
        let padding = size.saturating_sub(bare);
        if size < bare || (padding > 0 && padding < crate::wire::tlv::HEADER) {
            let tlvs = self.extensions.direct_measurement || self.extensions.hmac;
            return Err(format!(
                "at least {bare} octets in {} mode{}, or {} and up",
                self.mode.name(),
                if tlvs {
                    " with its TLVs (--no-tlvs for less)"
                } else {
                    ""
                },
                bare + crate::wire::tlv::HEADER
            ));
        }
        self.extensions.padding = padding;
        Ok(())
    }
}

/// A probe written and not yet known to have left.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub seq: u32,
    timestamp: Timestamp,
    sent_ns: u64,
}

/// A socket for probes of one family and DSCP: nonblocking, with each arrival's TOS,
/// TTL and time asked of the kernel, and each leaving's time where the kernel tells it.
pub fn open_socket(v6: bool, dscp: Option<u8>) -> io::Result<UdpSocket> {
    open_socket_from(v6, dscp, None)
}

/// [`open_socket`], leaving from `source`'s address and through its device when given.
pub fn open_socket_from(
    v6: bool,
    dscp: Option<u8>,
    source: Option<&linerate_model::Source>,
) -> io::Result<UdpSocket> {
    let any: IpAddr = if v6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    };
    let address = source.and_then(|s| s.address).unwrap_or(any);
    if address.is_ipv6() != v6 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--bind {address} cannot reach the reflector (another IP version)"),
        ));
    }
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(SocketAddr::new(address, 0)),
        socket2::Type::DGRAM,
        None,
    )?;
    if let Some(device) = source.and_then(|s| s.device.as_deref()) {
        socket
            .bind_device(Some(device.as_bytes()))
            .map_err(|e| io::Error::new(e.kind(), format!("--bind-dev {device}: {e}")))?;
    }
    socket
        .bind(&SocketAddr::new(address, 0).into())
        .map_err(|e| io::Error::new(e.kind(), format!("--bind {address}: {e}")))?;
    let socket: UdpSocket = socket.into();
    socket.set_nonblocking(true)?;
    sys::enable_meta(&socket, v6)?;
    sys::set_marks(&socket, v6, dscp.map_or(0, |d| d << 2))?;
    // Without it (an old kernel) T1 is the loop's time before the send call.
    let _ = sys::enable_tx_timestamps(&socket);
    Ok(socket)
}

/// Whether `ip` is one of this host's addresses (so both ends read one clock).
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Probes go out; the next is due at this time.
    Sending {
        next_ns: u64,
    },
    /// All sent (or stopped): answers are awaited until this time.
    Waiting {
        until_ns: u64,
    },
    Done,
}

/// One STAMP session as a loop drives it: its probes and their answers. The socket is
/// its driver's: one of the session's own ([`Session::own_socket`], driven with
/// [`Session::tick`] and [`Session::drain`]), or one shared with sessions to other
/// reflectors ([`Session::next_probe`], [`Session::take_answer`]). The times given are
/// monotonic nanoseconds on the driver's clock (`epoch`).
pub struct Session {
    options: Options,
    v6: bool,
    error: ErrorEstimate,
    tally: Tally,
    gap_ns: u64,
    start_ns: u64,
    phase: Phase,
    interrupted: bool,
    /// The answerer said the session is over (an irtt server past the session's
    /// duration): no more probes go.
    ended_by_answerer: bool,
    packet: Vec<u8>,
    tlvs: Vec<u8>,
}

impl Session {
    /// The socket of a session that has one of its own: its family, marks and source.
    pub fn own_socket(options: &Options) -> io::Result<UdpSocket> {
        open_socket_from(
            options.addr.is_ipv6(),
            options.dscp,
            options.source.as_ref(),
        )
    }

    /// A session whose first probe is due at `first_ns` (a shared loop lines sessions of
    /// one rate up on one grid, so one wake-up serves them all).
    pub fn new(options: &Options, now_ns: u64, first_ns: u64) -> Session {
        let v6 = options.addr.is_ipv6();
        let clock = linerate_hostinfo::clock::read();
        let error = clock.map_or(ErrorEstimate::new(false, false, 1.0), |c| {
            ErrorEstimate::new(c.synchronised, false, c.max_error_s)
        });
        let tally = Tally::new(
            Settings {
                target: options.target.clone(),
                address: options.addr.to_string(),
                mode: options.mode,
                protocol: options
                    .wire
                    .as_ref()
                    .map_or(Protocol::Stamp, |w| w.protocol()),
                rate_pps: options.rate_pps,
                size: options.size(),
                dscp: options.dscp,
                ssid: options.ssid,
                same_clock: options.same_clock,
                sender_clock: clock,
                started_at: options.started_at,
                call: options.call.clone(),
            },
            now_ns,
        );
        Session {
            options: options.clone(),
            v6,
            error,
            tally,
            gap_ns: (1e9 / options.rate_pps).max(1.0) as u64,
            start_ns: now_ns,
            phase: Phase::Sending {
                next_ns: first_ns.max(now_ns),
            },
            interrupted: false,
            ended_by_answerer: false,
            packet: Vec::with_capacity(wire::MAX_PACKET),
            tlvs: Vec::with_capacity(wire::MAX_PACKET),
        }
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// When the session next needs its driver, if it does.
    pub fn due_ns(&self) -> Option<u64> {
        match self.phase {
            Phase::Sending { next_ns } => Some(next_ns),
            Phase::Waiting { until_ns } => Some(until_ns),
            Phase::Done => None,
        }
    }

    /// Whether all is sent and the last answers are awaited.
    pub fn is_waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting { .. })
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Stops sending (Ctrl-C, an abort): the answers in flight are still awaited.
    pub fn interrupt(&mut self) {
        if !self.interrupted && self.phase != Phase::Done {
            self.interrupted = true;
            self.phase = Phase::Done;
        }
    }

    /// Does what is due at `now_ns` on the session's own `socket`: the next probe, the
    /// end of sending, the end of the wait for answers.
    pub fn tick(&mut self, socket: &UdpSocket, now_ns: u64, epoch: &Instant) -> io::Result<()> {
        if self.advance(now_ns) {
            self.send_probe(socket, epoch)?;
        }
        Ok(())
    }

    /// Moves the session on to `now_ns`: the end of sending, the end of the wait for
    /// answers. True when a probe is due now: the caller sends it (`tick` on the
    /// session's own socket; a shared loop with [`Session::next_probe`]).
    pub fn advance(&mut self, now_ns: u64) -> bool {
        let mut due = false;
        if let Phase::Sending { next_ns } = self.phase {
            let elapsed = now_ns.saturating_sub(self.start_ns);
            let done = self.ended_by_answerer
                || self.options.count.is_some_and(|c| self.tally.sent() >= c)
                || self
                    .options
                    .duration
                    .is_some_and(|d| elapsed >= d.as_nanos() as u64);
            if done {
                self.phase = Phase::Waiting {
                    until_ns: now_ns + self.options.timeout.as_nanos() as u64,
                };
            } else if now_ns >= next_ns {
                due = true;
                let mut next = next_ns + self.gap_ns;
                // Far behind (the host was busy): start the timeline again, no burst.
                if now_ns > next + 10 * self.gap_ns {
                    next = now_ns + self.gap_ns;
                }
                self.phase = Phase::Sending { next_ns: next };
            }
        }
        if let Phase::Waiting { until_ns } = self.phase {
            if now_ns >= until_ns || self.tally.answered() >= self.tally.sent() {
                self.phase = Phase::Done;
            }
        }
        due
    }

    fn send_probe(&mut self, socket: &UdpSocket, epoch: &Instant) -> io::Result<()> {
        let mut packet = std::mem::take(&mut self.packet);
        let pending = self.next_probe(epoch, &mut packet);
        let sent = sys::send(socket, &packet, self.options.addr, None, self.v6);
        self.packet = packet;
        match sent {
            Ok(_) => self.probe_left(pending),
            // A full send buffer or an ICMP error from an earlier probe: this probe did
            // not leave; it is not counted as sent (or lost).
            Err(e) if retry(&e) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Writes the next probe into `packet` (T1 is now): the caller sends it and, once it
    /// has left, says so with [`Session::probe_left`]. A probe that did not leave is not
    /// counted as sent, and its sequence number goes to the next.
    pub fn next_probe(&mut self, epoch: &Instant, packet: &mut Vec<u8>) -> Pending {
        let seq = self.tally.next_seq();
        if let Some(wire) = &self.options.wire {
            wire.encode(seq, packet);
            return Pending {
                seq,
                timestamp: Timestamp::ntp_from_unix_ns(i128::from(UnixTime::now().nanos())),
                sent_ns: epoch.elapsed().as_nanos() as u64,
            };
        }
        let probe = TestPacket {
            seq,
            timestamp: Timestamp::ntp_from_unix_ns(i128::from(UnixTime::now().nanos())),
            error: self.error,
            ssid: self.options.ssid,
        };
        let key = self.options.key.as_ref();
        self.options.extensions.encode(
            seq.wrapping_add(1),
            &seq.to_be_bytes(),
            key,
            &mut self.tlvs,
        );
        wire::encode_test(&probe, self.options.mode, key, &self.tlvs, packet);
        Pending {
            seq,
            timestamp: probe.timestamp,
            sent_ns: epoch.elapsed().as_nanos() as u64,
        }
    }

    /// Counts a probe of [`Session::next_probe`] as sent.
    pub fn probe_left(&mut self, pending: Pending) {
        self.tally
            .sent_probe(pending.seq, pending.sent_ns, pending.timestamp);
    }

    /// The kernel's time of probe `seq`'s leaving, Unix nanoseconds.
    pub fn left_at(&mut self, seq: u32, unix_ns: i128) {
        self.tally.left_at(seq, unix_ns);
    }

    /// Takes the probes' times of leaving, then every answer waiting on the session's own
    /// `socket` (a probe's time of leaving is queued before its answer can exist).
    pub fn drain(&mut self, socket: &UdpSocket, buf: &mut [u8], epoch: &Instant) -> io::Result<()> {
        let mut left = Vec::new();
        sys::tx_timestamps(socket, &mut left).and_then(|()| {
            for (seq, unix_ns) in left {
                self.tally.left_at(seq, unix_ns);
            }
            loop {
                match sys::recv(socket, buf) {
                    Ok((n, _from, meta)) => {
                        if n <= wire::MAX_PACKET {
                            self.take_answer(&buf[..n], meta, epoch);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    // An ICMP error for an earlier probe (port unreachable): that probe
                    // is lost.
                    Err(e) if retry(&e) => continue,
                    Err(e) => return Err(e),
                }
            }
        })
    }

    /// Takes one datagram from the reflector in: an answer to one of this session's
    /// probes, or not (it is then counted as not of this run, or ignored when it does
    /// not parse). `meta` is what the kernel said of it on arrival.
    pub fn take_answer(&mut self, bytes: &[u8], meta: sys::Meta, epoch: &Instant) {
        let now_unix = i128::from(UnixTime::now().nanos());
        let now_ns = epoch.elapsed().as_nanos() as u64;
        let options = &self.options;
        if let Some(foreign) = &options.wire {
            if foreign.ends(bytes) {
                self.ended_by_answerer = true;
            }
            let Some(mut answer) = foreign.decode(bytes) else {
                self.tally.unreadable_answer();
                return;
            };
            if let Some(sent) = self.tally.probe_timestamp(answer.sender_seq) {
                answer.sender_timestamp = sent;
            }
            let (arrived_unix_ns, arrived_ns) = arrival_times(meta, now_unix, now_ns);
            self.tally.answer(&Reply {
                answer,
                tlvs: tlv::Answer::default(),
                arrived_unix_ns,
                arrived_ns,
                tos: meta.tos,
                received_window: foreign.received_window(bytes),
            });
            return;
        }
        let (answer, area) = match wire::decode_reflected(bytes, options.mode, options.key.as_ref())
        {
            Ok(answer) => (answer, &bytes[options.mode.base_len()..]),
            // A TWAMP-light responder's shorter answer (twampy's 38 octets): every field
            // up to the sender's error estimate is there; the TTL may not be.
            Err(_) => match (options.mode, wire::decode_reflected_short(bytes)) {
                (wire::Mode::Open, Some(answer)) => {
                    self.tally.short_answer();
                    (answer, &[][..])
                }
                _ => {
                    self.tally.unreadable_answer();
                    return;
                }
            },
        };
        let tlvs = tlv::Answer::read(area, &bytes[..4], options.key.as_ref());
        let (arrived_unix_ns, arrived_ns) = arrival_times(meta, now_unix, now_ns);
        self.tally.answer(&Reply {
            answer,
            tlvs,
            arrived_unix_ns,
            arrived_ns,
            tos: meta.tos,
            received_window: None,
        });
    }

    /// Closes the interval ending at `now_ns`.
    pub fn close_interval(&mut self, now_ns: u64) -> StampInterval {
        self.tally.close_interval(now_ns)
    }

    /// The session's figures.
    pub fn finish(&self, now_ns: u64) -> StampReport {
        self.tally.finish(now_ns, self.interrupted)
    }
}

/// Runs the session until its count or time is reached or `stop` is set, then waits for
/// the last answers. `live` gets each interval as it closes.
pub fn run(
    options: &Options,
    stop: &AtomicBool,
    live: &mut dyn FnMut(&StampInterval),
) -> io::Result<StampReport> {
    run_on(&Session::own_socket(options)?, options, stop, live)
}

/// [`run`] on a socket of the caller's ([`open_socket_from`]): one a protocol's session
/// was opened on (irtt's answers go only to the address that opened it).
pub fn run_on(
    socket: &UdpSocket,
    options: &Options,
    stop: &AtomicBool,
    live: &mut dyn FnMut(&StampInterval),
) -> io::Result<StampReport> {
    let epoch = Instant::now();
    let mono = || epoch.elapsed().as_nanos() as u64;
    let mut session = Session::new(options, 0, 0);
    let every_ns = options.report_every.as_nanos() as u64;
    let mut next_report = every_ns;
    let mut buf = vec![0u8; wire::MAX_PACKET + 1];
    while !session.is_done() {
        if stop.load(Ordering::Relaxed) {
            session.interrupt();
            break;
        }
        session.tick(socket, mono(), &epoch)?;
        session.drain(socket, &mut buf, &epoch)?;
        let now = mono();
        if every_ns > 0 && now >= next_report {
            live(&session.close_interval(now));
            next_report += every_ns;
        }
        let Some(due) = session.due_ns() else { break };
        let until = due.min(if every_ns > 0 { next_report } else { u64::MAX });
        // While awaiting the last answers, a wake-up every 20 ms is soon enough.
        let until = if matches!(session.phase, Phase::Waiting { .. }) {
            until.min(now + 20_000_000)
        } else {
            until
        };
        if until > now {
            sys::wait_readable(socket, Duration::from_nanos(until - now))?;
        }
    }
    let end = mono();
    if every_ns > 0 && end > next_report.saturating_sub(every_ns) {
        // The last, partial interval: told where anything happened in it (a run that
        // ends on an interval's edge leaves an empty one).
        let last = session.close_interval(end);
        if last.sent > 0 || last.answered > 0 {
            live(&last);
        }
    }
    Ok(session.finish(end))
}

/// An answer's arrival on both clocks: the kernel's time of arrival, and how long the
/// answer waited in the socket taken off this loop's clock too, so the round trip is the
/// network's and the reflector's, not this loop's wake-up.
fn arrival_times(meta: sys::Meta, now_unix: i128, now_ns: u64) -> (i128, u64) {
    match meta.kernel_unix_ns {
        Some(k) if (0..1_000_000_000).contains(&(now_unix - k)) => {
            (k, now_ns.saturating_sub((now_unix - k) as u64))
        }
        _ => (now_unix, now_ns),
    }
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOBUFS
                | libc::EAGAIN
                | libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
        )
    )
}
