//! The sockets that carry a trace. UDP needs no privilege: a socket per flow (its own
//! source port) whose ICMP errors come back on its error queue (IP_RECVERR) with the
//! payload the router quoted. ICMP and TCP need CAP_NET_RAW: raw sockets send the echo
//! requests and SYNs and read every ICMP message, echo reply and TCP answer, which are
//! matched by identifier, ports and sequence.

// The driver of the sans-IO prober: reading the clock and waiting are its job.
#![allow(clippy::disallowed_methods)]

use crate::prober::{Plan, ProbeId, Prober, Reply};
use crate::sys;
use crate::wire;
use socket2::{Domain, Protocol as SocketProtocol, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Udp,
    Tcp,
    Icmp,
}

impl Protocol {
    /// Where UDP and TCP probes go when no port is named: traceroute's 33434 (no service
    /// listens there, so the destination answers port unreachable), and 80 for SYNs.
    pub fn default_port(self) -> u16 {
        match self {
            Protocol::Tcp => 80,
            Protocol::Udp | Protocol::Icmp => 33434,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            Protocol::Tcp => "tcp",
            Protocol::Icmp => "icmp",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(
        "trace --{protocol} needs CAP_NET_RAW (run as root), since it sends raw packets; \
         UDP probes (the default) need no privilege"
    )]
    NeedsRaw { protocol: &'static str },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> TraceError {
    let what = what.into();
    move |source| TraceError::Io { what, source }
}

pub struct Options {
    pub target: IpAddr,
    pub protocol: Protocol,
    /// The destination port of UDP and TCP probes.
    pub port: u16,
    pub plan: Plan,
    /// The probes leave from this address (`--bind`); `None`: the route's source.
    pub bind: Option<IpAddr>,
    /// And through this interface or VRF device (`--bind-dev`, SO_BINDTODEVICE).
    pub device: Option<String>,
    /// The first flow's source port (UDP, TCP) or ICMP identifier, the next flows' the
    /// ones after it: the same five-tuples trace after trace (a mesh's, which compares
    /// one trace of a pair with the last), so that a load balancer sends each flow the
    /// way it sent it before. `None`: the system's ports (UDP), ones of this process's.
    pub source_port: Option<u16>,
    /// Find each hop's MTU (tracepath's way, with any of the probes): probes as large as
    /// the path allows, with don't-fragment set.
    pub mtu: bool,
}

/// What the sockets did.
pub struct Traced {
    pub prober: Prober,
    /// Each flow's source port (UDP, TCP) or ICMP identifier.
    pub source_ports: Vec<u16>,
    pub elapsed_s: f64,
    /// What did not go as asked (a source port taken, so another was used).
    pub warnings: Vec<String>,
}

/// Sets the TTL (hop limit) the next packets of `socket` leave with.
fn set_ttl(socket: &Socket, v6: bool, ttl: u8) -> io::Result<()> {
    if v6 {
        socket.set_unicast_hops_v6(u32::from(ttl))
    } else {
        socket.set_ttl(u32::from(ttl))
    }
}

/// The source address this host uses towards `target`.
fn source_toward(target: IpAddr) -> io::Result<IpAddr> {
    let any: SocketAddr = match target {
        IpAddr::V4(_) => "0.0.0.0:0".parse().expect("an address"),
        IpAddr::V6(_) => "[::]:0".parse().expect("an address"),
    };
    let probe = std::net::UdpSocket::bind(any)?;
    probe.connect((target, 9))?;
    Ok(probe.local_addr()?.ip())
}

/// The MTU of this host's route towards `target` (through `device` when told): what a
/// socket connected there learns (IP_MTU).
fn route_mtu(target: IpAddr, device: Option<&str>) -> io::Result<u16> {
    let (domain, level, name) = match target {
        IpAddr::V4(_) => (Domain::IPV4, libc::SOL_IP, libc::IP_MTU),
        IpAddr::V6(_) => (Domain::IPV6, libc::SOL_IPV6, libc::IPV6_MTU),
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(SocketProtocol::UDP))?;
    if let Some(device) = device {
        socket.bind_device(Some(device.as_bytes()))?;
    }
    socket.connect(&SocketAddr::new(target, 9).into())?;
    let mut mtu: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: a valid descriptor, and a pointer to an int with its length.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&mut mtu as *mut i32).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(mtu.clamp(0, i32::from(u16::MAX)) as u16)
}

/// The sockets of a trace, open: what needs a privilege has it.
pub struct Opened(Sockets);

/// Opens the trace's sockets: `Err` names a missing privilege before anything is sent.
pub fn open(options: &Options) -> Result<Opened, TraceError> {
    Sockets::open(options).map(Opened)
}

/// Runs the trace until the prober is done or `stop` is set.
pub fn trace(opened: Opened, options: &Options, stop: &AtomicBool) -> Result<Traced, TraceError> {
    let Opened(mut sockets) = opened;
    let mut prober = match sockets.first_mtu {
        Some(mtu) => Prober::with_mtu(options.plan, mtu),
        None => Prober::new(options.plan),
    };
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    while !prober.done(now()) && !stop.load(Ordering::Relaxed) {
        while let Some(id) = prober.poll_send(now()) {
            sockets.send(options, id, prober.size(id.flow))?;
            prober.sent(id, now());
        }
        let wake = prober.poll_timeout(now());
        let wait_ms = (wake.saturating_sub(now()) / 1_000_000).min(100) as i32;
        sockets.wait(wait_ms)?;
        sockets.receive(options, &mut prober, now())?;
    }
    Ok(Traced {
        prober,
        source_ports: sockets.source_ports.clone(),
        elapsed_s: start.elapsed().as_secs_f64(),
        warnings: sockets.warnings.clone(),
    })
}

struct Sockets {
    v6: bool,
    /// UDP: one a flow. TCP: the raw TCP socket. ICMP: the raw ICMP socket.
    senders: Vec<Socket>,
    /// ICMP messages (TCP's time exceeded); absent for UDP and ICMP, whose senders read.
    icmp: Option<Socket>,
    source_ports: Vec<u16>,
    source: IpAddr,
    warnings: Vec<String>,
    /// With `--mtu`: the route's MTU towards the target, the first probes' size.
    first_mtu: Option<u16>,
}

fn raw(v6: bool, protocol: i32, name: &'static str) -> Result<Socket, TraceError> {
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    Socket::new(domain, Type::RAW, Some(SocketProtocol::from(protocol))).map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
            TraceError::NeedsRaw { protocol: name }
        } else {
            TraceError::Io {
                what: format!("cannot open a raw {name} socket"),
                source: e,
            }
        }
    })
}

impl Sockets {
    // Long: the source, then one arm per protocol, each opening and placing its sockets.
    fn open(options: &Options) -> Result<Sockets, TraceError> {
        let v6 = options.target.is_ipv6();
        let flows = options.plan.flows;
        let source = match options.bind {
            Some(address) if address.is_ipv4() != v6 => address,
            Some(address) => {
                return Err(TraceError::Io {
                    what: format!("--bind {address}"),
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("cannot reach {} (another IP version)", options.target),
                    ),
                })
            }
            None => source_toward(options.target)
                .map_err(io_error(format!("no route to {}", options.target)))?,
        };
        // Every socket leaves from the source and, when told, through the device.
        let mut warnings = Vec::new();
        // Every socket leaves from the source and, when told, through the device; a UDP
        // flow's from its port where one is asked and free, else from one the system
        // picks (said once).
        let mut place = |socket: &Socket, bind: bool, port: u16| -> Result<(), TraceError> {
            if let Some(device) = &options.device {
                socket
                    .bind_device(Some(device.as_bytes()))
                    .map_err(io_error(format!("--bind-dev {device}")))?;
            }
            if bind {
                let asked = socket.bind(&SocketAddr::new(source, port).into());
                match asked {
                    Err(e) if port != 0 && e.kind() == io::ErrorKind::AddrInUse => {
                        if warnings.is_empty() {
                            warnings.push(format!(
                                "source port {port} is taken: a port the system picked was used, so this trace's flows may take other branches than the last one's"
                            ));
                        }
                        socket
                            .bind(&SocketAddr::new(source, 0).into())
                            .map_err(io_error(format!("cannot bind to {source}")))?;
                    }
                    other => other.map_err(io_error(format!("cannot bind to {source}")))?,
                }
            }
            Ok(())
        };
        let icmp_protocol = if v6 {
            libc::IPPROTO_ICMPV6
        } else {
            libc::IPPROTO_ICMP
        };
        let mut sockets = match options.protocol {
            Protocol::Udp => {
                let mut senders = Vec::new();
                let mut ports = Vec::new();
                for flow in 0..flows {
                    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
                    let socket = Socket::new(domain, Type::DGRAM, Some(SocketProtocol::UDP))
                        .map_err(io_error("cannot open a UDP socket"))?;
                    let port = options.source_port.map_or(0, |p| p.wrapping_add(flow));
                    place(&socket, true, port)?;
                    // Not connected: a connected socket gets a random flow hash, which its
                    // packets carry over a veth into the next namespace, where a multipath
                    // route hashes it instead of the five-tuple, so a flow's branch would
                    // change from one trace to the next with the same ports. Unconnected,
                    // the routers hash the five-tuple as on a wire.

                    sys::set_recv_errors(&socket, v6).map_err(io_error("IP_RECVERR"))?;
                    socket
                        .set_nonblocking(true)
                        .map_err(io_error("O_NONBLOCK"))?;
                    let port = socket
                        .local_addr()
                        .ok()
                        .and_then(|a| a.as_socket())
                        .map_or(0, |a| a.port());
                    ports.push(port);
                    senders.push(socket);
                }
                Sockets {
                    v6,
                    senders,
                    icmp: None,
                    source_ports: ports,
                    source,
                    warnings: Vec::new(),
                    first_mtu: None,
                }
            }
            Protocol::Icmp => {
                let socket = raw(v6, icmp_protocol, "icmp")?;
                place(&socket, options.bind.is_some(), 0)?;
                socket
                    .set_nonblocking(true)
                    .map_err(io_error("O_NONBLOCK"))?;
                let base = options
                    .source_port
                    .unwrap_or((std::process::id() as u16).wrapping_mul(31));
                Sockets {
                    v6,
                    senders: vec![socket],
                    icmp: None,
                    source_ports: (0..flows).map(|f| base.wrapping_add(f)).collect(),
                    source,
                    warnings: Vec::new(),
                    first_mtu: None,
                }
            }
            Protocol::Tcp => {
                let tcp = raw(v6, libc::IPPROTO_TCP, "tcp")?;
                if v6 {
                    // The kernel fills the checksum at this offset of what is sent.
                    sys::set_ipv6_checksum_offset(&tcp, 16).map_err(io_error("IPV6_CHECKSUM"))?;
                }
                tcp.set_nonblocking(true).map_err(io_error("O_NONBLOCK"))?;
                place(&tcp, options.bind.is_some(), 0)?;
                let icmp = raw(v6, icmp_protocol, "tcp")?;
                icmp.set_nonblocking(true).map_err(io_error("O_NONBLOCK"))?;
                // Source ports above the usual ephemeral range's start, apart per process.
                let base = options
                    .source_port
                    .unwrap_or(33_000 + (std::process::id() % 20_000) as u16);
                Sockets {
                    v6,
                    senders: vec![tcp],
                    icmp: Some(icmp),
                    source_ports: (0..flows).map(|f| base.wrapping_add(f)).collect(),
                    source,
                    warnings: Vec::new(),
                    first_mtu: None,
                }
            }
        };
        sockets.warnings = warnings;
        if options.mtu {
            for socket in &sockets.senders {
                sys::set_path_mtu_probe(socket, v6).map_err(io_error("IP_MTU_DISCOVER"))?;
            }
            sockets.first_mtu = Some(
                route_mtu(options.target, options.device.as_deref()).map_err(io_error(format!(
                    "the MTU of the route to {}",
                    options.target
                )))?,
            );
        }
        Ok(sockets)
    }

    fn send(
        &mut self,
        options: &Options,
        id: ProbeId,
        size: Option<u16>,
    ) -> Result<(), TraceError> {
        let v6 = self.v6;
        let target = SockAddr::from(SocketAddr::new(options.target, 0));
        let result = match options.protocol {
            Protocol::Udp => {
                let socket = &self.senders[usize::from(id.flow)];
                set_ttl(socket, v6, id.ttl).map_err(io_error("IP_TTL"))?;
                let tagged = wire::udp_payload(id.tag());
                // With the MTU probed, padded to the size the path allows (the IP and UDP
                // headers taken off).
                let headers = ip_header(v6) + 8;
                let length = size.map_or(tagged.len(), |s| {
                    usize::from(s).saturating_sub(headers).max(tagged.len())
                });
                let mut payload = vec![0u8; length];
                payload[..tagged.len()].copy_from_slice(&tagged);
                let to = SockAddr::from(SocketAddr::new(options.target, options.port));
                // An ICMP error may also set the socket's pending error, which the next
                // send returns once: send again.
                socket
                    .send_to(&payload, &to)
                    .or_else(|_| socket.send_to(&payload, &to))
            }
            Protocol::Icmp => {
                let socket = &self.senders[0];
                set_ttl(socket, v6, id.ttl).map_err(io_error("IP_TTL"))?;
                // With the MTU probed, as long as the path allows (the IP header taken off).
                let length = size.map_or(0, |s| usize::from(s).saturating_sub(ip_header(v6)));
                let packet = wire::echo_request(
                    v6,
                    self.source_ports[usize::from(id.flow)],
                    id.tag(),
                    length,
                );
                socket.send_to(&packet, &target)
            }
            Protocol::Tcp => {
                let socket = &self.senders[0];
                set_ttl(socket, v6, id.ttl).map_err(io_error("IP_TTL"))?;
                let addresses = match (self.source, options.target) {
                    (IpAddr::V4(a), IpAddr::V4(b)) => Some((a, b)),
                    _ => None,
                };
                let padding = syn_padding(v6, size);
                let segment = wire::tcp_syn(
                    self.source_ports[usize::from(id.flow)],
                    options.port,
                    id.tag(),
                    addresses,
                    padding,
                );
                socket.send_to(&segment, &target)
            }
        };
        match result {
            Ok(_) => Ok(()),
            // Unreachable from here (no route, a local firewall): the probe is unanswered.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            // Larger than this host's own link allows now (a route changed under way):
            // the probe waits out unanswered.
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::ECONNREFUSED | libc::EPERM)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(TraceError::Io {
                what: format!("cannot send a probe to {}", options.target),
                source: e,
            }),
        }
    }

    fn fds(&self) -> Vec<RawFd> {
        self.senders
            .iter()
            .chain(self.icmp.iter())
            .map(|s| s.as_raw_fd())
            .collect()
    }

    /// Waits until a socket has something (an error queued is POLLERR) or `ms` passes.
    fn wait(&self, ms: i32) -> Result<(), TraceError> {
        let mut fds: Vec<libc::pollfd> = self
            .fds()
            .into_iter()
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd of the length given.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms.max(0)) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(TraceError::Io {
                    what: "poll".into(),
                    source: e,
                });
            }
        }
        Ok(())
    }

    fn receive(
        &mut self,
        options: &Options,
        prober: &mut Prober,
        now_ns: u64,
    ) -> Result<(), TraceError> {
        match options.protocol {
            Protocol::Udp => {
                let mut discard = [0u8; 64];
                for (flow, socket) in self.senders.iter().enumerate() {
                    // An unconnected socket takes anyone's datagrams: none is an answer,
                    // and left queued they would wake every wait.
                    while read_from(socket, &mut discard).is_some() {}
                    while let Some((from, origin_error, payload)) =
                        read_error_queue(socket, self.v6)
                    {
                        let Some(tag) = wire::udp_tag(&payload) else {
                            continue;
                        };
                        let ((kind, code), info) = origin_error;
                        let id = ProbeId::from_tag(flow as u16, tag);
                        // Fragmentation needed (ICMPv6: packet too big), with the MTU
                        // of the router's next link: sent again smaller.
                        if wire::too_big(self.v6, kind, code) && self.first_mtu.is_some() {
                            prober.too_big(id, info.min(u32::from(u16::MAX)) as u16);
                            continue;
                        }
                        let outcome = outcome_of(self.v6, kind, code);
                        prober.answered(id, from.to_string(), now_ns, outcome);
                    }
                }
            }
            Protocol::Icmp | Protocol::Tcp => {
                let icmp = self.icmp.as_ref().unwrap_or(&self.senders[0]);
                let mut buffer = [0u8; 1500];
                while let Some((n, from)) = read_from(icmp, &mut buffer) {
                    self.on_icmp(options, prober, &buffer[..n], from, now_ns);
                }
                if options.protocol == Protocol::Tcp {
                    while let Some((n, from)) = read_from(&self.senders[0], &mut buffer) {
                        self.on_tcp(options, prober, &buffer[..n], from, now_ns);
                    }
                }
            }
        }
        Ok(())
    }

    fn flow_of(&self, port: u16) -> Option<u16> {
        self.source_ports
            .iter()
            .position(|p| *p == port)
            .map(|f| f as u16)
    }

    fn on_icmp(
        &self,
        options: &Options,
        prober: &mut Prober,
        packet: &[u8],
        from: IpAddr,
        now_ns: u64,
    ) {
        match wire::parse_icmp(self.v6, packet) {
            Some(wire::IcmpAnswer::EchoReply { id, tag })
                if options.protocol == Protocol::Icmp && from == options.target =>
            {
                if let Some(flow) = self.flow_of(id) {
                    prober.answered(
                        ProbeId::from_tag(flow, tag),
                        from.to_string(),
                        now_ns,
                        Reply::Reached,
                    );
                }
            }
            Some(wire::IcmpAnswer::Error {
                icmp_type,
                code,
                destination,
                protocol,
                transport,
                next_mtu,
            }) => {
                if destination != options.target {
                    return;
                }
                let (flow_key, tag) = match (options.protocol, protocol as i32) {
                    (Protocol::Icmp, libc::IPPROTO_ICMP | libc::IPPROTO_ICMPV6) => (
                        u16::from_be_bytes([transport[4], transport[5]]),
                        u16::from_be_bytes([transport[6], transport[7]]),
                    ),
                    (Protocol::Tcp, libc::IPPROTO_TCP) => {
                        let sequence = u32::from_be_bytes([
                            transport[4],
                            transport[5],
                            transport[6],
                            transport[7],
                        ]);
                        if sequence & 0xffff_0000 != wire::TCP_SEQUENCE_HIGH {
                            return;
                        }
                        (
                            u16::from_be_bytes([transport[0], transport[1]]),
                            sequence as u16,
                        )
                    }
                    _ => return,
                };
                let Some(flow) = self.flow_of(flow_key) else {
                    return;
                };
                let id = ProbeId::from_tag(flow, tag);
                // Fragmentation needed (ICMPv6: packet too big), with the MTU of the
                // router's next link: sent again smaller.
                if wire::too_big(self.v6, icmp_type, code) && self.first_mtu.is_some() {
                    prober.too_big(id, next_mtu.min(u32::from(u16::MAX)) as u16);
                    return;
                }
                let outcome = outcome_of(self.v6, icmp_type, code);
                prober.answered(
                    ProbeId::from_tag(flow, tag),
                    from.to_string(),
                    now_ns,
                    outcome,
                );
            }
            _ => {}
        }
    }

    fn on_tcp(
        &self,
        options: &Options,
        prober: &mut Prober,
        packet: &[u8],
        from: IpAddr,
        now_ns: u64,
    ) {
        let Some(segment) = wire::parse_tcp(self.v6, packet) else {
            return;
        };
        if from != options.target
            || segment.source_port != options.port
            || !(segment.syn || segment.rst)
            || !segment.ack_flag
        {
            return;
        }
        let Some(flow) = self.flow_of(segment.destination_port) else {
            return;
        };
        // A SYN-ACK acknowledges the SYN alone (the data a large probe carries is not
        // taken); a reset acknowledges the data too (RFC 9293 3.10.7.1), of the flow's
        // present size: only probes of that size reach the destination.
        let data = if segment.syn {
            0
        } else {
            syn_padding(self.v6, prober.size(flow)) as u32
        };
        let acked = segment.ack.wrapping_sub(1).wrapping_sub(data);
        if acked & 0xffff_0000 != wire::TCP_SEQUENCE_HIGH {
            return;
        }
        prober.answered(
            ProbeId::from_tag(flow, acked as u16),
            from.to_string(),
            now_ns,
            Reply::Reached,
        );
    }
}

/// The data a TCP probe of `size` octets (the IP packet, `--mtu`) carries after its
/// header; none at the usual size.
fn syn_padding(v6: bool, size: Option<u16>) -> usize {
    size.map_or(0, |s| usize::from(s).saturating_sub(ip_header(v6) + 20))
}

/// The IP header's length on probes this host sends (no options).
fn ip_header(v6: bool) -> usize {
    if v6 {
        40
    } else {
        20
    }
}

/// What an ICMP error of `icmp_type` and `code` says of its probe.
fn outcome_of(v6: bool, icmp_type: u8, code: u8) -> Reply {
    match wire::error_words(v6, icmp_type, code) {
        None => Reply::TimeExceeded,
        Some("reached") => Reply::Reached,
        Some(why) => Reply::Unreachable(why),
    }
}

/// A datagram from a raw socket and its sender; `None` when none is waiting.
fn read_from(socket: &Socket, buffer: &mut [u8]) -> Option<(usize, IpAddr)> {
    // SAFETY: MaybeUninit<u8> has u8's layout; recv_from writes initialised bytes.
    let uninit = unsafe { &mut *(buffer as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    let (n, from) = socket.recv_from(uninit).ok()?;
    Some((n, from.as_socket()?.ip()))
}

/// An ICMP error's type and code, and its information (a "too big"'s MTU).
type IcmpError = ((u8, u8), u32);

/// One message of a UDP socket's error queue: who sent the ICMP error (the offender),
/// its type, code and information, and the payload it quoted; `None` when the queue is
/// empty.
fn read_error_queue(socket: &Socket, v6: bool) -> Option<(IpAddr, IcmpError, Vec<u8>)> {
    loop {
        let mut payload = [0u8; 512];
        let mut control = [0u64; 64];
        let mut iov = libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        };
        // SAFETY: an all-zero msghdr is valid; its pointers are set below to live buffers.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: the descriptor is valid and the message points at buffers that outlive
        // the call.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_ERRQUEUE) };
        if n < 0 {
            return None;
        }
        if let Some((from, kind)) = extended_error(&message, v6) {
            return Some((from, kind, payload[..n as usize].to_vec()));
        }
    }
}

/// The ICMP error of a message from the error queue: its offender, its type and code,
/// and its information.
fn extended_error(message: &libc::msghdr, v6: bool) -> Option<(IpAddr, IcmpError)> {
    let (level, kind, origin) = if v6 {
        (libc::SOL_IPV6, libc::IPV6_RECVERR, libc::SO_EE_ORIGIN_ICMP6)
    } else {
        (libc::SOL_IP, libc::IP_RECVERR, libc::SO_EE_ORIGIN_ICMP)
    };
    // SAFETY: the message was filled by recvmsg; CMSG_* walk its control buffer within
    // msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(message);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == level && (*cmsg).cmsg_type == kind {
                let data = libc::CMSG_DATA(cmsg);
                let error: libc::sock_extended_err = std::ptr::read_unaligned(data.cast());
                if error.ee_origin != origin {
                    return None;
                }
                // The offender's address follows the error (SO_EE_OFFENDER).
                let offender = data.add(std::mem::size_of::<libc::sock_extended_err>());
                let family = std::ptr::read_unaligned(offender.cast::<libc::sa_family_t>());
                let from = match i32::from(family) {
                    libc::AF_INET => {
                        let a: libc::sockaddr_in = std::ptr::read_unaligned(offender.cast());
                        IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes())
                    }
                    libc::AF_INET6 => {
                        let a: libc::sockaddr_in6 = std::ptr::read_unaligned(offender.cast());
                        IpAddr::from(a.sin6_addr.s6_addr)
                    }
                    _ => return None,
                };
                return Some((from, ((error.ee_type, error.ee_code), error.ee_info)));
            }
            cmsg = libc::CMSG_NXTHDR(message, cmsg);
        }
    }
    None
}
