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

/// What the reflector did, since it started.
#[derive(Debug, Default)]
pub struct Counters {
    pub answered: AtomicU64,
    pub refused: [AtomicU64; Refusal::ALL.len()],
    pub sessions: AtomicU64,
}

impl Counters {
    fn refuse(&self, refusal: Refusal) {
        if let Some(i) = Refusal::ALL.iter().position(|r| *r == refusal) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (reason, count) for every reason, in a fixed order.
    pub fn refused(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .zip(&self.refused)
            .map(|(r, c)| (r.reason(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// A running reflector; stops when dropped.
pub struct Listener {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Binds `addr` (every IPv6 address falls back to every IPv4 one on a host without
/// IPv6) and answers there until dropped.
pub fn start(
    addr: SocketAddr,
    config: Config,
    permits: Permits,
    log: LogLine,
) -> io::Result<Listener> {
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
    // Room for bursts of probes while the thread is off its CPU.
    let _ = set_receive_buffer(&socket, 4 << 20);
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (thread_counters, thread_stop) = (counters.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("stamp-reflector".into())
        .spawn(move || {
            if let Err(e) = serve(
                &socket,
                v6,
                config,
                &permits,
                &log,
                &thread_counters,
                &thread_stop,
            ) {
                log(&format!("stamp reflector stopped: {e}"));
            }
        })?;
    Ok(Listener {
        addr: local,
        counters,
        stop,
        thread: Some(thread),
    })
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
struct RefusalLog {
    last: Vec<Option<Instant>>,
    since: Vec<u64>,
}

impl RefusalLog {
    fn new() -> RefusalLog {
        RefusalLog {
            last: vec![None; Refusal::ALL.len()],
            since: vec![0; Refusal::ALL.len()],
        }
    }

    fn note(&mut self, refusal: Refusal, from: SocketAddr, log: &LogLine) {
        let i = Refusal::ALL.iter().position(|r| *r == refusal).unwrap_or(0);
        self.since[i] += 1;
        let due = self.last[i].map_or(true, |t| t.elapsed() >= Duration::from_secs(10));
        if due {
            // Short probes are most often a TWAMP-light sender's: say what works.
            let hint = if refusal == Refusal::Malformed(crate::wire::WireError::Short) {
                "; shorter than STAMP's 44 octets (RFC 8762), as a TWAMP-light sender's \
                 14-octet probes are: pad them to 44 (twampy --padding 30, a router's \
                 padding setting), or serve them with --stamp-twamp-light (docs/stamp.md)"
            } else {
                ""
            };
            log(&format!(
                "stamp: refused {} packet{} ({}), the latest from {from}{hint}",
                self.since[i],
                if self.since[i] == 1 { "" } else { "s" },
                refusal.reason()
            ));
            self.since[i] = 0;
            self.last[i] = Some(Instant::now());
        }
    }
}

/// Answers the kernel would not send, told as refusals are: the first at once, then at
/// most one line every ten seconds with the count since.
#[derive(Default)]
struct UnsentLog {
    last: Option<Instant>,
    since: u64,
}

impl UnsentLog {
    fn note(&mut self, answers: u64, error: &io::Error, log: &LogLine) {
        self.since += answers;
        if self
            .last
            .map_or(true, |t| t.elapsed() >= Duration::from_secs(10))
        {
            log(&format!(
                "stamp: could not send {} answer{}: {error}",
                self.since,
                if self.since == 1 { "" } else { "s" }
            ));
            self.since = 0;
            self.last = Some(Instant::now());
        }
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
    let mut refusals = RefusalLog::new();
    let mut unsent = UnsentLog::default();
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
            let received = match inbox.recv(socket) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier answer: nothing to do for it.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                Err(e) => return Err(e),
            };
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
            match outbox.send(socket) {
                Ok(n) => {
                    counters.answered.fetch_add(n as u64, Ordering::Relaxed);
                    if let Some((failed, e)) = outbox.failures() {
                        unsent.note(failed as u64, e, log);
                    }
                }
                Err(e) => unsent.note(1, &e, log),
            }
            if received < BATCH {
                break;
            }
        }
    }
    Ok(())
}
