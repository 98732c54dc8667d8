//! `serve --stamp`: a Session-Reflector on its own thread. One socket, one loop: a
//! datagram in, the access rules asked, the reflector's decision, the answer out with the
//! TOS asked. Refusals are counted by reason and logged at most once per reason every ten
//! seconds (with how many since), so a flood cannot fill the log.

// A socket loop reads the clock; the sans-IO parts (wire, reflector, tally) take it.
#![allow(clippy::disallowed_methods)]

use crate::reflector::{Arrival, Config, Reflector, Refusal};
use crate::sys;
use crate::wire::{self, ErrorEstimate, Timestamp};
use linerate_model::clock::UnixTime;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Who may be answered: `Err` names the rule that refuses an address.
pub type Permits = Arc<dyn Fn(IpAddr) -> Result<(), &'static str> + Send + Sync>;
/// Datagrams read, and answers sent, per system call.
const BATCH: usize = 64;

/// Where the operator's log lines go.
pub type LogLine = Arc<dyn Fn(&str) + Send + Sync>;

/// The reasons a UDP service refuses a datagram, every one in a fixed order.
pub trait Reasons: Copy + PartialEq + Send + Sync + 'static {
    const EVERY: &'static [Self];
    /// The reason as the log says it.
    fn reason(self) -> &'static str;
    /// The reason as a metric label (`snake_case`).
    fn label(self) -> &'static str {
        self.reason()
    }
    /// What the log line of such a refusal adds (what works instead), if anything.
    fn hint(self) -> &'static str {
        ""
    }
    fn index(self) -> usize {
        Self::EVERY.iter().position(|r| *r == self).unwrap_or(0)
    }
}

impl Reasons for Refusal {
    const EVERY: &'static [Refusal] = &Refusal::ALL;
    fn reason(self) -> &'static str {
        Refusal::reason(self)
    }
    fn hint(self) -> &'static str {
        // Short probes are most often a TWAMP-light sender's: say what works.
        if self == Refusal::Malformed(crate::wire::WireError::Short) {
            "; shorter than STAMP's 44 octets (RFC 8762), as a TWAMP-light sender's \
             14-octet probes are: pad them to 44 (twampy --padding 30, a router's \
             padding setting), or serve them with --stamp-twamp-light (docs/stamp.md)"
        } else {
            ""
        }
    }
}

/// What a UDP service did, since it started.
#[derive(Debug)]
pub struct Counters<R = Refusal> {
    pub answered: AtomicU64,
    refused: Vec<AtomicU64>,
    /// Sessions held now, and ended since the start.
    pub sessions: AtomicU64,
    pub ended: AtomicU64,
    reasons: std::marker::PhantomData<R>,
}

impl<R: Reasons> Default for Counters<R> {
    fn default() -> Counters<R> {
        Counters {
            answered: AtomicU64::new(0),
            refused: R::EVERY.iter().map(|_| AtomicU64::new(0)).collect(),
            sessions: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            reasons: std::marker::PhantomData,
        }
    }
}

impl<R: Reasons> Counters<R> {
    pub fn refuse(&self, refusal: R) {
        self.refused[refusal.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// (reason, count) for every reason, in a fixed order.
    pub fn refused(&self) -> Vec<(&'static str, u64)> {
        R::EVERY
            .iter()
            .zip(&self.refused)
            .map(|(r, c)| (r.label(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// A UDP service on a thread of its own (the STAMP reflector, an irtt server): its
/// address, its counters; it stops when dropped.
pub struct Running<C> {
    pub addr: SocketAddr,
    pub counters: Arc<C>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<C> Drop for Running<C> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A running reflector.
pub type Listener = Running<Counters>;

/// The body of a UDP service's thread: its socket (bound, with each datagram's metadata
/// asked), whether it is IPv6, its counters and the flag that stops it.
pub type Serve<C> = Box<dyn FnOnce(&UdpSocket, bool, &C, &AtomicBool) -> io::Result<()> + Send>;

/// Binds `addr` (every IPv6 address falls back to every IPv4 one on a host without
/// IPv6) with each datagram's metadata asked and room for bursts while the thread is off
/// its CPU, and runs `serve` on a thread named `name` until dropped; an error that ends
/// it goes to `log`.
pub fn run_udp<C: Default + Send + Sync + 'static>(
    addr: SocketAddr,
    name: &str,
    log: LogLine,
    serve: Serve<C>,
) -> io::Result<Running<C>> {
    let socket = UdpSocket::bind(addr).or_else(|e| match addr.ip() {
        IpAddr::V6(ip) if ip.is_unspecified() => UdpSocket::bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            addr.port(),
        )),
        _ => Err(e),
    })?;
    let local = socket.local_addr()?;
    let v6 = local.is_ipv6();
    sys::enable_meta(&socket, v6)?;
    let _ = set_receive_buffer(&socket, 4 << 20);
    let counters = Arc::new(C::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (thread_counters, thread_stop) = (counters.clone(), stop.clone());
    let what = name.to_string();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(e) = serve(&socket, v6, &thread_counters, &thread_stop) {
                log(&format!("{what} stopped: {e}"));
            }
        })?;
    Ok(Running {
        addr: local,
        counters,
        stop,
        thread: Some(thread),
    })
}

/// Binds `addr` and answers there until dropped.
pub fn start(
    addr: SocketAddr,
    config: Config,
    permits: Permits,
    log: LogLine,
) -> io::Result<Listener> {
    let line = log.clone();
    run_udp(
        addr,
        "stamp-reflector",
        log,
        Box::new(move |socket, v6, counters, stop| {
            serve(socket, v6, config, &permits, &line, counters, stop)
        }),
    )
}

fn set_receive_buffer(socket: &UdpSocket, bytes: usize) -> io::Result<()> {
    socket2::SockRef::from(socket).set_recv_buffer_size(bytes)
}

/// The clock's error estimate as answers declare it.
fn clock_estimate() -> ErrorEstimate {
    linerate_hostinfo::clock::read().map_or(ErrorEstimate::new(false, false, 1.0), |c| {
        ErrorEstimate::new(c.synchronised, false, c.max_error_s)
    })
}

/// Refusals told in the log: the first of a reason at once, then at most one line per
/// reason every ten seconds with the count since.
pub struct RefusalLog<R> {
    /// The service, as its lines begin ("stamp", "irtt").
    what: &'static str,
    last: Vec<Option<Instant>>,
    since: Vec<u64>,
    reasons: std::marker::PhantomData<R>,
}

impl<R: Reasons> RefusalLog<R> {
    pub fn new(what: &'static str) -> RefusalLog<R> {
        RefusalLog {
            what,
            last: vec![None; R::EVERY.len()],
            since: vec![0; R::EVERY.len()],
            reasons: std::marker::PhantomData,
        }
    }

    pub fn note(&mut self, refusal: R, from: SocketAddr, log: &LogLine) {
        let i = refusal.index();
        self.since[i] += 1;
        let due = self.last[i].map_or(true, |t| t.elapsed() >= Duration::from_secs(10));
        if due {
            log(&format!(
                "{}: refused {} packet{} ({}), the latest from {from}{}",
                self.what,
                self.since[i],
                if self.since[i] == 1 { "" } else { "s" },
                refusal.reason(),
                refusal.hint()
            ));
            self.since[i] = 0;
            self.last[i] = Some(Instant::now());
        }
    }
}

/// Answers the kernel would not send, told as refusals are: the first at once, then at
/// most one line every ten seconds with the count since.
pub struct UnsentLog {
    /// The service, as its lines begin.
    what: &'static str,
    last: Option<Instant>,
    since: u64,
}

impl UnsentLog {
    pub fn new(what: &'static str) -> UnsentLog {
        UnsentLog {
            what,
            last: None,
            since: 0,
        }
    }

    fn note(&mut self, answers: u64, error: &io::Error, log: &LogLine) {
        self.since += answers;
        if self
            .last
            .map_or(true, |t| t.elapsed() >= Duration::from_secs(10))
        {
            log(&format!(
                "{}: could not send {} answer{}: {error}",
                self.what,
                self.since,
                if self.since == 1 { "" } else { "s" }
            ));
            self.since = 0;
            self.last = Some(Instant::now());
        }
    }
}

/// Sends a batch's answers: those that left counted, those the kernel would not send
/// told.
pub fn send_answers<R: Reasons>(
    outbox: &mut sys::SendBatch,
    socket: &UdpSocket,
    counters: &Counters<R>,
    unsent: &mut UnsentLog,
    log: &LogLine,
) {
    match outbox.send(socket) {
        Ok(n) => {
            counters.answered.fetch_add(n as u64, Ordering::Relaxed);
            if let Some((failed, e)) = outbox.failures() {
                unsent.note(failed as u64, e, log);
            }
        }
        Err(e) => unsent.note(1, &e, log),
    }
}

fn serve(
    socket: &UdpSocket,
    v6: bool,
    config: Config,
    permits: &Permits,
    log: &LogLine,
    counters: &Counters,
    stop: &AtomicBool,
) -> io::Result<()> {
    let epoch = Instant::now();
    let mut reflector = Reflector::new(config, 0);
    reflector.set_clock(clock_estimate());
    let mut clock_read = Instant::now();
    // A batch of datagrams in, their answers out together: two system calls for up to
    // BATCH probes.
    let mut inbox = sys::ReceiveBatch::new(BATCH, wire::MAX_PACKET + 1);
    let mut outbox = sys::SendBatch::new(
        BATCH,
        wire::MAX_PACKET,
        v6,
        sys::supports_segmentation(socket),
    );
    let mut refusals = RefusalLog::new("stamp");
    let mut unsent = UnsentLog::new("stamp");
    while !stop.load(Ordering::Relaxed) {
        if clock_read.elapsed() >= Duration::from_secs(1) {
            reflector.set_clock(clock_estimate());
            counters
                .sessions
                .store(reflector.sessions() as u64, Ordering::Relaxed);
            clock_read = Instant::now();
        }
        if !sys::wait_readable(socket, Duration::from_millis(200))? {
            continue;
        }
        loop {
            let received = inbox.recv_waiting(socket)?;
            if received == 0 {
                break;
            }
            for i in 0..received {
                let Some((bytes, truncated, from, meta)) = inbox.datagram(i) else {
                    continue;
                };
                let now_unix = i128::from(UnixTime::now().nanos());
                let answer = outbox.next_buffer().expect("a slot per datagram received");
                let decision = if truncated {
                    Err(Refusal::Malformed(wire::WireError::Long))
                } else {
                    match permits(from.ip()) {
                        Err(_) => Err(Refusal::Denied),
                        Ok(()) => reflector.reflect(
                            &Arrival {
                                from,
                                bytes,
                                received: Timestamp::ntp_from_unix_ns(
                                    meta.kernel_unix_ns.unwrap_or(now_unix),
                                ),
                                // The answer leaves at once: its send time is now too.
                                now: Timestamp::ntp_from_unix_ns(now_unix),
                                now_ns: epoch.elapsed().as_nanos() as u64,
                                tos: meta.tos.unwrap_or(0),
                                ttl: meta.ttl.unwrap_or(0),
                            },
                            answer,
                        ),
                    }
                };
                match decision {
                    Ok(reply) => {
                        outbox.push(reply.len, from, (reply.tos != 0).then_some(reply.tos))
                    }
                    Err(refusal) => {
                        counters.refuse(refusal);
                        refusals.note(refusal, from, log);
                    }
                }
            }
            send_answers(&mut outbox, socket, counters, &mut unsent, log);
            if received < BATCH {
                break;
            }
        }
    }
    Ok(())
}
