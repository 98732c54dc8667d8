//! Many STAMP sessions on one thread: an agent probing every peer of a mesh at once. The
//! sessions of one rate send on one grid (their probes are due at the same instants), so
//! one wake-up sends a probe for each, and their answers come back together: a hundred
//! peers at 10/s wake the thread about twenty times a second, not two thousand.
//!
//! Sessions to different reflectors share a socket where the kernel can time each send
//! apart (Linux 6.13's SCM_TS_OPT_ID): one call sends a wake-up's probes, one brings
//! their answers. Elsewhere each session keeps its own socket. A reflector tells
//! sessions apart by address and port (RFC 8762), so two sessions to one reflector never
//! share one. Each session keeps its own figures; the loop decides when each is looked
//! at and carries its packets.

// A socket loop reads the clock; the sans-IO parts (wire, reflector, tally) take it.
#![allow(clippy::disallowed_methods)]

use crate::sender::{open_socket_from, Options, Pending, Session};
use crate::sys::{self, ReceiveBatch, SendBatch};
use crate::wire::{self, Mode};
use linerate_report::stamp::StampReport;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A session's outcome, sent once.
pub type SessionResult = io::Result<StampReport>;

struct Start {
    options: Options,
    cancel: Arc<AtomicBool>,
    done: Sender<SessionResult>,
}

/// The loop's mailbox and the descriptor that wakes it.
pub struct Prober {
    commands: Mutex<Sender<Start>>,
    wake: RawFd,
}

/// The process's prober, started on first use.
pub fn shared() -> io::Result<&'static Prober> {
    static PROBER: OnceLock<Prober> = OnceLock::new();
    if let Some(prober) = PROBER.get() {
        return Ok(prober);
    }
    let started = Prober::start(sys::has_send_timestamp_ids())?;
    Ok(PROBER.get_or_init(|| started))
}

impl Prober {
    /// Starts a prober's thread; `share`: sessions to different reflectors share sockets
    /// (the kernel must take a timestamp id per send).
    pub(crate) fn start(share: bool) -> io::Result<Prober> {
        // SAFETY: eventfd with valid flags; the descriptor lives as long as the process
        // (the prober is never dropped: it is the process's).
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        let (commands, inbox) = channel();
        std::thread::Builder::new()
            .name("stamp-prober".into())
            .spawn(move || run(&inbox, wake, share))?;
        Ok(Prober {
            commands: Mutex::new(commands),
            wake,
        })
    }

    /// Starts a session; its report (or why not) arrives on the receiver once. `cancel`
    /// stops it early (its report then says interrupted).
    pub fn probe(
        &self,
        options: Options,
        cancel: Arc<AtomicBool>,
    ) -> io::Result<Receiver<SessionResult>> {
        let (done, outcome) = channel();
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Start {
                options,
                cancel,
                done,
            })
            .map_err(|_| io::Error::other("the STAMP prober has stopped"))?;
        let one: u64 = 1;
        // SAFETY: writes 8 octets from a live u64 to the eventfd.
        unsafe { libc::write(self.wake, (&one as *const u64).cast(), 8) };
        Ok(outcome)
    }
}

struct Running {
    session: Session,
    via: Via,
    cancel: Arc<AtomicBool>,
    done: Sender<SessionResult>,
}

/// The socket a session's probes go through.
enum Via {
    /// A socket of its own.
    Own(std::net::UdpSocket),
    /// A socket shared with sessions to other reflectors: an index into the ports.
    Port(usize),
}

impl Via {
    fn port(&self) -> Option<usize> {
        match self {
            Via::Own(_) => None,
            Via::Port(index) => Some(*index),
        }
    }
}

/// The first instant on the grid of `gap_ns` at or after `now_ns`.
fn on_grid(now_ns: u64, gap_ns: u64) -> u64 {
    now_ns.div_ceil(gap_ns.max(1)) * gap_ns.max(1)
}

/// Probes to many reflectors, one socket: one `sendmmsg` carries a wake-up's probes,
/// `recvmmsg` brings their answers (told apart by the reflector's address) and their
/// times of leaving (told apart by the id each send gave, SCM_TS_OPT_ID). A hundred peers
/// cost a few system calls a wake-up instead of five a probe. Sessions to one reflector
/// address (two tests to one router) take different ports, as the reflector tells
/// sessions apart by address and port.
struct Port {
    socket: UdpSocket,
    v6: bool,
    dscp: Option<u8>,
    mode: Mode,
    /// Where the port's probes leave from (a mesh host's source), as the socket is bound.
    source: Option<linerate_model::Source>,
    /// The reflector each session of this port probes, and the session's key.
    sessions: HashMap<SocketAddr, u64>,
    /// Each session's SSID, distinct on the port: a reflector answering from another of
    /// its addresses than the one probed (a host bound to every address, a router) is
    /// still matched to the session by it.
    by_ssid: HashMap<u16, u64>,
    out: SendBatch,
    inbox: ReceiveBatch,
    /// Sends not yet timed: (the send's id, the session's key, the probe's seq), in the
    /// order sent.
    unstamped: VecDeque<(u32, u64, u32)>,
    next_id: u32,
}

/// The most sends a port waits on the kernel's times for; older ones are forgotten (a
/// kernel that stopped telling them).
const MOST_UNSTAMPED: usize = 65_536;
/// The most probes a port sends in one call.
const BATCH: usize = 128;

impl Port {
    fn open(
        v6: bool,
        dscp: Option<u8>,
        mode: Mode,
        source: Option<&linerate_model::Source>,
    ) -> io::Result<Port> {
        Ok(Port {
            socket: open_socket_from(v6, dscp, source)?,
            v6,
            dscp,
            mode,
            source: source.cloned(),
            sessions: HashMap::new(),
            by_ssid: HashMap::new(),
            out: SendBatch::new(BATCH, wire::MAX_PACKET, v6, false),
            inbox: ReceiveBatch::new(64, wire::MAX_PACKET + 1),
            unstamped: VecDeque::new(),
            next_id: 0,
        })
    }

    /// Whether a session to `addr` with these marks can use this port: one probe each of
    /// its sessions fits one batch.
    fn fits(
        &self,
        addr: SocketAddr,
        dscp: Option<u8>,
        mode: Mode,
        source: Option<&linerate_model::Source>,
    ) -> bool {
        self.v6 == addr.is_ipv6()
            && self.dscp == dscp
            && self.mode == mode
            && self.source.as_ref() == source
            && self.sessions.len() < BATCH
            && !self.sessions.contains_key(&addr)
    }
}

/// The loop's state: the sessions and the sockets they share.
struct Loop {
    epoch: Instant,
    sessions: HashMap<u64, Running>,
    ports: Vec<Option<Port>>,
    next_key: u64,
    /// Whether sessions may share sockets (the kernel takes a timestamp id per send).
    share: bool,
}

impl Loop {
    fn mono(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn start(&mut self, mut start: Start) {
        let now = self.mono();
        let gap = (1e9 / start.options.rate_pps).max(1.0) as u64;
        let first = on_grid(now, gap);
        let options = &mut start.options;
        let via = if self.share {
            match self.port_for(options) {
                Ok(port) => {
                    // An SSID already on the port is drawn again (the next free one).
                    if let Some(p) = self.ports[port].as_ref() {
                        while options.ssid == 0 || p.by_ssid.contains_key(&options.ssid) {
                            options.ssid = options.ssid.wrapping_add(1);
                        }
                    }
                    Ok(Via::Port(port))
                }
                Err(e) => Err(e),
            }
        } else {
            Session::own_socket(options).map(Via::Own)
        };
        match via {
            Ok(via) => {
                let session = Session::new(options, now, first);
                let key = self.next_key;
                self.next_key += 1;
                if let Some(p) = via.port().and_then(|p| self.ports[p].as_mut()) {
                    p.sessions.insert(start.options.addr, key);
                    p.by_ssid.insert(start.options.ssid, key);
                }
                self.sessions.insert(
                    key,
                    Running {
                        session,
                        via,
                        cancel: start.cancel,
                        done: start.done,
                    },
                );
            }
            Err(e) => {
                let _ = start.done.send(Err(e));
            }
        }
    }

    /// The shared socket a new session uses: one of its family, marks, mode and source
    /// that has no session to its reflector's address yet, or a new one.
    fn port_for(&mut self, options: &Options) -> io::Result<usize> {
        let (addr, dscp, mode) = (options.addr, options.dscp, options.mode);
        let source = options.source.as_ref();
        if let Some(i) = self
            .ports
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.fits(addr, dscp, mode, source)))
        {
            return Ok(i);
        }
        let port = Port::open(addr.is_ipv6(), dscp, mode, source)?;
        match self.ports.iter().position(Option::is_none) {
            Some(i) => {
                self.ports[i] = Some(port);
                Ok(i)
            }
            None => {
                self.ports.push(Some(port));
                Ok(self.ports.len() - 1)
            }
        }
    }

    /// Sends what is due: sessions with their own socket one by one, the others a batch
    /// per shared socket.
    fn send_due(&mut self) {
        let now = self.mono();
        let mut batched: Vec<(usize, u64, Pending)> = Vec::new();
        let mut failed = Vec::new();
        for (&key, running) in &mut self.sessions {
            if running.cancel.load(Ordering::Relaxed) {
                running.session.interrupt();
            }
            let index = match &running.via {
                Via::Own(socket) => {
                    if let Err(e) = running.session.tick(socket, now, &self.epoch) {
                        failed.push((key, e));
                    }
                    continue;
                }
                Via::Port(index) => *index,
            };
            let Some(port) = self.ports[index].as_mut() else {
                continue;
            };
            if !running.session.advance(now) {
                continue;
            }
            // A port has no more sessions than a batch holds.
            let Some(buffer) = port.out.next_buffer() else {
                continue;
            };
            let pending = running.session.next_probe(&self.epoch, buffer);
            let len = buffer.len();
            let id = port.next_id;
            port.next_id = port.next_id.wrapping_add(1);
            port.out
                .push_stamped(len, running.session.options().addr, None, Some(id));
            batched.push((index, key, pending));
        }
        for (key, e) in failed {
            self.fail(key, e);
        }
        for (index, slot) in self.ports.iter_mut().enumerate() {
            let Some(port) = slot.as_mut() else { continue };
            let first_id = port
                .next_id
                .wrapping_sub(batched.iter().filter(|(p, _, _)| *p == index).count() as u32);
            if let Err(e) = port.out.send(&port.socket) {
                // A socket that cannot send at all: its sessions end with the error.
                let keys: Vec<u64> = port.sessions.values().copied().collect();
                let text = e.to_string();
                for key in keys {
                    if let Some(running) = self.sessions.get_mut(&key) {
                        running.session.interrupt();
                        let _ = running
                            .done
                            .send(Err(io::Error::new(e.kind(), text.clone())));
                    }
                }
                continue;
            }
            for (i, (_, key, pending)) in batched.iter().filter(|(p, _, _)| *p == index).enumerate()
            {
                if !port.out.left(i) {
                    continue;
                }
                if let Some(running) = self.sessions.get_mut(key) {
                    running.session.probe_left(*pending);
                }
                port.unstamped
                    .push_back((first_id.wrapping_add(i as u32), *key, pending.seq));
                if port.unstamped.len() > MOST_UNSTAMPED {
                    port.unstamped.pop_front();
                }
            }
        }
    }

    fn fail(&mut self, key: u64, e: io::Error) {
        if let Some(running) = self.sessions.get_mut(&key) {
            running.session.interrupt();
            let _ = running.done.send(Err(e));
        }
    }

    /// Takes in what a shared socket holds: the times its probes left, then the answers.
    /// True when a session that was awaiting its last answers got one.
    fn receive(&mut self, index: usize) -> bool {
        let mut ending = false;
        let Some(port) = self.ports[index].as_mut() else {
            return false;
        };
        let mut stamps = Vec::new();
        let _ = port.inbox.tx_timestamps(&port.socket, &mut stamps);
        for (id, unix_ns) in stamps {
            // Times come in the order of the sends: those before this one that never got
            // a time are forgotten.
            while let Some(&(front, key, seq)) = port.unstamped.front() {
                let behind = id.wrapping_sub(front);
                if behind > u32::MAX / 2 {
                    break; // a time for a send already forgotten
                }
                port.unstamped.pop_front();
                if behind == 0 {
                    if let Some(running) = self.sessions.get_mut(&key) {
                        running.session.left_at(seq, unix_ns);
                    }
                    break;
                }
            }
        }
        // Bounded: a socket flooded by strangers yields the loop after a few batches.
        for _ in 0..64 {
            let n = match port.inbox.recv(&port.socket) {
                Ok(n) => n,
                // An ICMP error queued for an earlier probe: read past it.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
                    ) =>
                {
                    continue
                }
                Err(_) => break,
            };
            for i in 0..n {
                let Some((bytes, truncated, from, meta)) = port.inbox.datagram(i) else {
                    continue;
                };
                let key = port
                    .sessions
                    .get(&from)
                    .or_else(|| {
                        // An IPv4 reflector answering an IPv6 socket arrives mapped.
                        match from {
                            SocketAddr::V6(v6) => v6.ip().to_ipv4_mapped().and_then(|ip| {
                                port.sessions.get(&SocketAddr::new(ip.into(), v6.port()))
                            }),
                            SocketAddr::V4(_) => None,
                        }
                    })
                    // From another address of the reflector: its SSID says whose.
                    .or_else(|| {
                        wire::reflected_ssid(bytes, port.mode).and_then(|s| port.by_ssid.get(&s))
                    });
                if let (Some(key), false) = (key, truncated) {
                    if let Some(running) = self.sessions.get_mut(key) {
                        running.session.take_answer(bytes, meta, &self.epoch);
                        ending |= running.session.is_waiting();
                    }
                }
            }
            if n < 64 {
                break;
            }
        }
        ending
    }

    /// Finished sessions leave with their figures; a shared socket with none left closes.
    fn retire(&mut self) {
        let now = self.mono();
        let done: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, r)| r.session.is_done())
            .map(|(&k, _)| k)
            .collect();
        for key in done {
            let Some(running) = self.sessions.remove(&key) else {
                continue;
            };
            let _ = running.done.send(Ok(running.session.finish(now)));
            if let Some(index) = running.via.port() {
                let options = running.session.options();
                if let Some(port) = self.ports[index].as_mut() {
                    port.sessions.remove(&options.addr);
                    port.by_ssid.remove(&options.ssid);
                    if port.sessions.is_empty() {
                        self.ports[index] = None;
                    }
                }
            }
        }
    }
}

/// Waits up to `wait_ns` for any of `fds` to be readable (or to have an error queued);
/// how many are.
fn poll(fds: &mut [libc::pollfd], wait_ns: u64) -> i32 {
    for fd in fds.iter_mut() {
        fd.revents = 0;
    }
    let ts = libc::timespec {
        tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `fds` is a live array of its length; a live timespec; no signal mask.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    }
}

/// The prober's loop: its one wait over every descriptor and what each wake-up does,
/// read in the order it happens.
fn run(inbox: &Receiver<Start>, wake: RawFd, share: bool) {
    let mut state = Loop {
        epoch: Instant::now(),
        sessions: HashMap::new(),
        ports: Vec::new(),
        next_key: 0,
        share,
    };
    let mut buf = vec![0u8; wire::MAX_PACKET + 1];
    // What each polled descriptor is: the wake-up, a shared socket, a session's own.
    enum Polled {
        Wake,
        Port(usize),
        Own(u64),
    }
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut polled: Vec<Polled> = Vec::new();
    // A full pass (every session looked at, sends, retirements, the descriptors to
    // watch) runs when something is due, when a session was added or may have ended,
    // and at least once a second (a cancel); a wake-up for answers alone only reads.
    let (mut due, mut full, mut last_full) = (0u64, true, 0u64);
    loop {
        while let Ok(start) = inbox.try_recv() {
            state.start(start);
            full = true;
        }
        let now = state.mono();
        if full || now >= due || now >= last_full + 1_000_000_000 {
            state.send_due();
            state.retire();
            let now = state.mono();
            due = state
                .sessions
                .values()
                .filter_map(|r| r.session.due_ns())
                .min()
                .unwrap_or(now + 1_000_000_000);
            fds.clear();
            polled.clear();
            let mut watch = |fd: RawFd, what: Polled| {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                polled.push(what);
            };
            watch(wake, Polled::Wake);
            for (i, port) in state.ports.iter().enumerate() {
                if let Some(port) = port {
                    watch(port.socket.as_raw_fd(), Polled::Port(i));
                }
            }
            for (&key, running) in &state.sessions {
                if let Via::Own(socket) = &running.via {
                    watch(socket.as_raw_fd(), Polled::Own(key));
                }
            }
            (full, last_full) = (false, now);
        }
        let now = state.mono();
        // Nothing waits past a second without a look.
        let wait_ns = due.saturating_sub(now).min(1_000_000_000);
        if poll(&mut fds, wait_ns) <= 0 {
            continue;
        }
        for (fd, what) in fds.iter().zip(&polled) {
            // POLLERR: the probes' times of leaving wait on the error queue.
            if fd.revents & (libc::POLLIN | libc::POLLERR) == 0 {
                continue;
            }
            match *what {
                Polled::Wake => {
                    let mut count = 0u64;
                    // SAFETY: reads 8 octets into a live u64 (clears the eventfd).
                    unsafe { libc::read(wake, (&mut count as *mut u64).cast(), 8) };
                }
                // An answer to a session awaiting its last ones may end it.
                Polled::Port(i) => full |= state.receive(i),
                Polled::Own(key) => {
                    full = true;
                    let epoch = state.epoch;
                    let Some(running) = state.sessions.get_mut(&key) else {
                        continue;
                    };
                    let Via::Own(socket) = &running.via else {
                        continue;
                    };
                    if let Err(e) = running.session.drain(socket, &mut buf, &epoch) {
                        state.fail(key, e);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::on_grid;

    /// Sessions of one rate line up on one grid, whenever they start.
    #[test]
    fn sessions_of_one_rate_share_one_grid() {
        let gap = 100_000_000;
        assert_eq!(on_grid(0, gap), 0);
        assert_eq!(on_grid(1, gap), gap);
        assert_eq!(on_grid(250_000_000, gap), 300_000_000);
        assert_eq!(on_grid(300_000_000, gap), 300_000_000);
    }
}
