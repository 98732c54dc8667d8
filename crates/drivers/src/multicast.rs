//! Multicast tests over real sockets (docs/multicast.md): a paced sender to a group, and
//! the receivers `serve --join` runs, one socket a joined group, each group's accounting
//! in `linerate_proto::multicast`.
//!
//! The datagrams are iperf 2's (packet number, wall-clock send time, final datagrams
//! negated), so iperf 2's receivers count linerate's streams and linerate's receivers
//! count iperf 2's. A receiver only ever joins the groups its operator named: what
//! arrives cannot make it join, send or connect anywhere.

use crate::sys::{interface_index, join_source_group};
use linerate_engine::pacer::Pacer;
use linerate_model::clock::UnixTime;
use linerate_model::multicast::{Join, MulticastSent, MulticastStream};
use linerate_proto::datagram::Framing;
use linerate_proto::multicast::GroupReceiver;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The shortest datagram that carries iperf 2's header with its 64-bit flag.
pub const MIN_LENGTH: usize = 20;
/// The longest UDP payload over IPv4.
pub const MAX_LENGTH: usize = 65_507;
/// How often a sender repeats its final datagram, and how far apart: a receiver that
/// misses one still learns the stream's end and count.
const FINALS: u32 = 10;
const FINAL_GAP: Duration = Duration::from_millis(10);
/// After the kernel refused a send (a full queue), how long before the next.
const REFUSED_PAUSE: Duration = Duration::from_micros(200);

/// What a multicast sender is asked.
#[derive(Debug, Clone)]
pub struct SendSpec {
    /// The (first) group and port.
    pub group: SocketAddr,
    /// Groups from `group` on (239.1.1.1, 239.1.1.2, ...), each sent `rate_bps`: one
    /// stream per group, from one socket, taking turns.
    pub groups: u32,
    pub ttl: u32,
    /// Leave through this interface (SO_BINDTODEVICE; for IPv6 also IPV6_MULTICAST_IF).
    pub interface: Option<String>,
    /// Leave from this address.
    pub bind: Option<IpAddr>,
    /// Payload bytes per datagram.
    pub length: usize,
    pub rate_bps: u64,
    /// The DSCP and ECN its datagrams carry (`--dscp`, `--ecn`).
    pub marks: Option<linerate_model::marks::Marks>,
    pub duration: Duration,
}

impl SendSpec {
    /// Why the spec cannot be sent, naming the flag: a datagram too short for iperf 2's
    /// header or longer than UDP takes, groups that run past the multicast range.
    pub fn check(&self) -> Result<(), String> {
        if !(MIN_LENGTH..=MAX_LENGTH).contains(&self.length) {
            return Err(format!(
                "'-l {}': a multicast datagram carries {MIN_LENGTH} to {MAX_LENGTH} bytes",
                self.length
            ));
        }
        groups_from(self.group, self.groups)
            .map(|_| ())
            .map_err(|e| format!("'--groups {}': {e}", self.groups))
    }
}

/// The socket a sender sends from.
fn sender_socket(spec: &SendSpec) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(spec.group),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    if let Some(name) = &spec.interface {
        let index = interface_index(name)?;
        socket.bind_device(Some(name.as_bytes()))?;
        if spec.group.is_ipv6() {
            socket.set_multicast_if_v6(index)?;
        }
    }
    if let Some(address) = spec.bind {
        socket.bind(&SockAddr::from(SocketAddr::new(address, 0)))?;
    }
    let tos = spec.marks.map_or(0, |marks| u32::from(marks.tos()));
    if spec.group.is_ipv4() {
        socket.set_multicast_ttl_v4(spec.ttl)?;
        if tos != 0 {
            socket.set_tos(tos)?;
        }
    } else {
        socket.set_multicast_hops_v6(spec.ttl)?;
        if tos != 0 {
            socket.set_tclass_v6(tos)?;
        }
    }
    Ok(socket)
}

/// The address the stream will leave from, as the sender's socket would take it (its
/// `bind`, else the route's to the group through its interface): what a receiver asked to
/// count this sender's stream is told to look for. `None` where no route takes it.
pub fn source_address(spec: &SendSpec) -> Option<IpAddr> {
    let socket = sender_socket(spec).ok()?;
    // A datagram socket's connect sends nothing: it only asks the route.
    socket.connect(&SockAddr::from(spec.group)).ok()?;
    let local = socket.local_addr().ok()?.as_socket()?.ip();
    (!local.is_unspecified()).then_some(local)
}

/// The `count` groups from `first` on, each a multicast address (an error names the one
/// past the range).
pub fn groups_from(first: SocketAddr, count: u32) -> io::Result<Vec<SockAddr>> {
    (0..count)
        .map(|i| {
            let ip = match first.ip() {
                IpAddr::V4(ip) => IpAddr::from((u32::from(ip)).wrapping_add(i).to_be_bytes()),
                IpAddr::V6(ip) => {
                    IpAddr::from((u128::from(ip)).wrapping_add(u128::from(i)).to_be_bytes())
                }
            };
            if ip.is_multicast() {
                Ok(SockAddr::from(SocketAddr::new(ip, first.port())))
            } else {
                Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{count} groups from {} run past the multicast range ({ip})",
                        first.ip()
                    ),
                ))
            }
        })
        .collect()
}

/// Whether a send error is the kernel's queue being full (counted, not fatal).
fn queue_full(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::WouldBlock || error.raw_os_error() == Some(libc::ENOBUFS)
}

/// Sends `spec.rate_bps` of iperf 2 datagrams to the group for `spec.duration` (or until
/// `stop`), then its final datagram; what it sent.
pub fn send(spec: &SendSpec, stop: &AtomicBool) -> io::Result<MulticastSent> {
    let socket = sender_socket(spec)?;
    let targets = groups_from(spec.group, spec.groups.max(1))?;
    let mut datagram = vec![0x5a_u8; spec.length.clamp(MIN_LENGTH, MAX_LENGTH)];
    let length = datagram.len();
    let start = Instant::now();
    let end = start + spec.duration;
    // The groups take turns under one pacer of their summed rate, so each gets its share
    // exactly. Credit for 4 ms (two datagrams at least): a sleep's overshoot is made up
    // after it, and a sender held off the CPU longer does not burst.
    let rate = spec.rate_bps.saturating_mul(targets.len() as u64);
    let burst = (rate / 8 / 250).max(2 * length as u64);
    let mut pacer = Pacer::new(start, rate, burst);
    let (mut sent, mut errors) = (0u64, 0u64);
    let mut last_send = start;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if let Some(wait) = pacer.delay(now) {
            std::thread::sleep(wait.min(end - now));
            continue;
        }
        let turn = (sent % targets.len() as u64) as usize;
        let sequence = sent / targets.len() as u64;
        Framing::Iperf2.write(&mut datagram, sequence, UnixTime::now().nanos(), 0);
        match socket.send_to(&datagram, &targets[turn]) {
            Ok(_) => {
                sent += 1;
                pacer.charge(length);
                last_send = Instant::now();
            }
            Err(e) if queue_full(&e) => {
                errors += 1;
                std::thread::sleep(REFUSED_PAUSE);
            }
            Err(e) => return Err(e),
        }
    }
    // An unbound socket reads as the unspecified address: say the route's source.
    let local = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(
            |local| match source_address(spec).filter(|_| local.ip().is_unspecified()) {
                Some(ip) => SocketAddr::new(ip, local.port()),
                None => local,
            },
        );
    let duration_s = last_send.duration_since(start).as_secs_f64();
    // Each group's final carries its own count: the turns it had.
    let mut finals = 0;
    for _ in 0..FINALS {
        let mut all = true;
        for (turn, target) in targets.iter().enumerate() {
            let count = sent / targets.len() as u64
                + u64::from((turn as u64) < sent % targets.len() as u64);
            Framing::write_iperf2_final(&mut datagram, count, UnixTime::now().nanos());
            all &= socket.send_to(&datagram, target).is_ok();
        }
        finals += u32::from(all);
        std::thread::sleep(FINAL_GAP);
    }
    Ok(MulticastSent {
        group: spec.group.ip(),
        groups: targets.len() as u32,
        port: spec.group.port(),
        ttl: spec.ttl,
        marks: spec.marks,
        interface: spec.interface.clone(),
        local,
        length,
        rate_bps: spec.rate_bps,
        datagrams: sent,
        bytes: sent * length as u64,
        send_errors: errors,
        duration_s,
        sent_bps: if duration_s > 0.0 {
            (sent * length as u64) as f64 * 8.0 / duration_s
        } else {
            0.0
        },
        finals,
    })
}

/// How receivers run.
#[derive(Debug, Clone)]
pub struct ReceiveOptions {
    pub port: u16,
    /// A stream ends after this long without a datagram.
    pub silence: Duration,
    /// The senders read this host's clock (one host, a lab): one-way delay is given.
    pub same_clock: bool,
}

/// What receivers tell whoever runs them.
#[derive(Debug, Clone)]
pub enum ReceiverEvent {
    /// A group is joined; its datagrams may come.
    Joined { join: Join, port: u16 },
    /// A sender's stream to a group ended: its figures.
    Stream(Box<MulticastStream>),
    /// Datagrams a group refused (senders beyond its bound, another source than a
    /// source-specific join's), told once a second at most.
    Refused { join: Join, datagrams: u64 },
}

/// One joined group's socket, bound to the group's address and port so that it hears
/// that group alone (a socket bound to the wildcard would hear every group joined on the
/// host at that port).
fn joined_socket(join: &Join, port: u16) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(SocketAddr::new(join.group, port)),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    // Several receivers (another serve, iperf 2) may listen to one group on one host.
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    let index = match &join.interface {
        Some(name) => {
            socket.bind_device(Some(name.as_bytes()))?;
            interface_index(name)?
        }
        None => 0,
    };
    socket.bind(&SockAddr::from(SocketAddr::new(join.group, port)))?;
    match (join.group, join.source) {
        (group, Some(source)) => join_source_group(&socket, group, source, index)?,
        (IpAddr::V4(group), None) => {
            socket.join_multicast_v4_n(&group, &socket2::InterfaceIndexOrAddress::Index(index))?
        }
        (IpAddr::V6(group), None) => socket.join_multicast_v6(&group, index)?,
    }
    socket.set_nonblocking(true)?;
    // The kernel's receive time on every datagram: delay and jitter are the path's.
    linerate_stamp::sys::enable_meta(&socket, join.group.is_ipv6())?;
    // Room for a burst while the loop is away: 4 MiB, as far as the kernel allows.
    let _ = socket.set_recv_buffer_size(4 << 20);
    Ok(socket)
}

/// Receivers of the groups `serve --join` named, on a thread of their own until dropped.
pub struct Receivers {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receivers {
    /// Joins every group (an error names the one that could not be joined) and receives
    /// on a thread; `report` hears each event.
    pub fn start(
        joins: &[Join],
        options: ReceiveOptions,
        mut report: impl FnMut(ReceiverEvent) + Send + 'static,
    ) -> io::Result<Receivers> {
        let clock = Instant::now();
        let mut groups = Vec::with_capacity(joins.len());
        for join in joins {
            let socket = joined_socket(join, options.port).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot join {} on port {}: {e}",
                        join.describe(),
                        options.port
                    ),
                )
            })?;
            let joined_ns = clock.elapsed().as_nanos() as u64;
            let receiver = GroupReceiver::new(
                join.clone(),
                options.port,
                joined_ns,
                options.silence.as_nanos() as u64,
                options.same_clock,
            );
            report(ReceiverEvent::Joined {
                join: join.clone(),
                port: options.port,
            });
            groups.push((socket, receiver));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("multicast".into())
            .spawn({
                let stop = stop.clone();
                move || receive(groups, clock, &stop, &mut report)
            })?;
        Ok(Receivers {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Receivers {
    /// Stops receiving: the streams under way are reported as stopped, the groups left
    /// (their sockets closed).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The receive loop: waits on every group's socket, hands each datagram to its group's
/// accounting with its arrival times, ends quiet streams, and at the stop the rest.
fn receive(
    mut groups: Vec<(Socket, GroupReceiver)>,
    clock: Instant,
    stop: &AtomicBool,
    report: &mut impl FnMut(ReceiverEvent),
) {
    const WAIT_MS: i32 = 100;
    let mut buffer = vec![0u8; 65_536];
    let mut refused_told: Vec<u64> = vec![0; groups.len()];
    let mut last_told = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let mut polled: Vec<libc::pollfd> = groups
            .iter()
            .map(|(socket, _)| libc::pollfd {
                fd: socket.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: the array holds as many pollfd as its length says.
        unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, WAIT_MS) };
        for (i, (socket, group)) in groups.iter_mut().enumerate() {
            if polled[i].revents == 0 {
                continue;
            }
            // A bounded batch a turn, so one busy group cannot starve the others.
            for _ in 0..256 {
                let Ok((len, from, meta)) = linerate_stamp::sys::recv(socket, &mut buffer) else {
                    break;
                };
                let mono_ns = clock.elapsed().as_nanos() as u64;
                let wall_ns = meta
                    .kernel_unix_ns
                    .and_then(|ns| u64::try_from(ns).ok())
                    .unwrap_or_else(|| UnixTime::now().nanos());
                if let Some(stream) =
                    group.datagram(from, &buffer[..len.min(buffer.len())], mono_ns, wall_ns)
                {
                    report(ReceiverEvent::Stream(Box::new(stream)));
                }
            }
        }
        let mono_ns = clock.elapsed().as_nanos() as u64;
        for (_, group) in groups.iter_mut() {
            for stream in group.tick(mono_ns) {
                report(ReceiverEvent::Stream(Box::new(stream)));
            }
        }
        if last_told.elapsed() >= Duration::from_secs(1) {
            last_told = Instant::now();
            for (i, (_, group)) in groups.iter().enumerate() {
                if group.refused > refused_told[i] {
                    report(ReceiverEvent::Refused {
                        join: group.join().clone(),
                        datagrams: group.refused - refused_told[i],
                    });
                    refused_told[i] = group.refused;
                }
            }
        }
    }
    let mono_ns = clock.elapsed().as_nanos() as u64;
    for (_, group) in groups.iter_mut() {
        for stream in group.stop(mono_ns) {
            report(ReceiverEvent::Stream(Box::new(stream)));
        }
    }
}
