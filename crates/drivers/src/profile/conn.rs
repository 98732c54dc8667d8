//! A profile connection: a TCP stream or a connected UDP socket, with reads and writes
//! that wait in slices and give up when their caller says so.

use super::SLICE;
use linerate_profile::Endpoint;
use linerate_proto::address_check;
use linerate_proto::preface;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

pub(crate) enum Conn {
    Tcp(TcpStream),
    Udp(UdpSocket),
    /// `protocol=ssl`: TCP through TLS 1.3.
    Tls(Box<linerate_tls::TlsStream<TcpStream>>),
}

/// Why an operation did not complete.
#[derive(Debug)]
pub(crate) enum OpError {
    /// The caller's condition said to stop (a deadline, the peer's count, the stop flag).
    GaveUp,
    /// The peer closed the connection.
    Closed,
    Io(io::Error),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::GaveUp => f.write_str("stopped"),
            OpError::Closed => f.write_str("the peer closed the connection"),
            OpError::Io(e) => write!(f, "{e}"),
        }
    }
}

fn waiting(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Sets up a TCP socket as the endpoint asks, before it connects or after it was accepted.
pub(crate) fn tcp_options(socket: &socket2::Socket, endpoint: &Endpoint) -> io::Result<()> {
    if let Some(window) = endpoint.window {
        let bytes = usize::try_from(window).unwrap_or(usize::MAX);
        socket.set_send_buffer_size(bytes)?;
        socket.set_recv_buffer_size(bytes)?;
    }
    socket.set_nodelay(endpoint.nodelay)?;
    if let Some(marks) = endpoint.marks {
        linerate_engine::sys::set_marks(socket, marks)?;
    }
    if let Some(cc) = &endpoint.congestion {
        socket
            .set_tcp_congestion(cc.as_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("congestion control '{cc}': {e}")))?;
    }
    Ok(())
}

pub(crate) fn udp_options(socket: &socket2::Socket, endpoint: &Endpoint) -> io::Result<()> {
    if let Some(marks) = endpoint.marks {
        linerate_engine::sys::set_marks(socket, marks)?;
    }
    if let Some(window) = endpoint.window {
        let bytes = usize::try_from(window).unwrap_or(usize::MAX);
        socket.set_send_buffer_size(bytes)?;
        socket.set_recv_buffer_size(bytes)?;
    }
    Ok(())
}

/// Dials a TCP connection with the endpoint's options set before the handshake (so a
/// window applies to the window scale), then sends `preface`.
pub(crate) fn dial_tcp(addr: SocketAddr, endpoint: &Endpoint, preface: &[u8]) -> io::Result<Conn> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    tcp_options(&socket, endpoint)?;
    linerate_engine::sys::bind_source(&socket, endpoint.source.as_ref(), addr)?;
    socket.connect_timeout(&addr.into(), Duration::from_secs(5))?;
    let mut stream: TcpStream = socket.into();
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(preface)?;
    Conn::tcp(stream)
}

/// Opens a UDP "connection": the hello (`preface`) goes to the peer's rendezvous port,
/// which answers with a cookie; the hello again with that cookie proves this socket's
/// address, and the peer answers it from the socket that serves this connection, which
/// this socket then connects to. Hellos are repeated while no answer comes.
pub(crate) fn dial_udp(
    addr: SocketAddr,
    endpoint: &Endpoint,
    preface: &[u8; preface::DATA_PREFACE_LEN],
    flow: u32,
    give_up: &mut dyn FnMut() -> bool,
) -> io::Result<Conn> {
    // From the host's `source` where the mesh names one, else any address.
    let socket = linerate_engine::sys::udp_socket_from(endpoint.source.as_ref(), addr)?;
    udp_options(&socket2::SockRef::from(&socket), endpoint)?;
    socket.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut answer = [0u8; 64];
    let mut hello: Vec<u8> = preface.to_vec();
    for _ in 0..25 {
        socket.send_to(&hello, addr)?;
        // Every answer waiting is read before the hello is repeated.
        loop {
            match socket.recv_from(&mut answer) {
                Ok((_, from)) if from.ip() != addr.ip() => {}
                Ok((n, from)) if answer[..n] == *preface => {
                    socket.connect(from)?;
                    return Conn::udp(socket);
                }
                Ok((n, from)) => {
                    if let Some(cookie) = address_check::parse_challenge(&answer[..n], flow) {
                        if from == addr {
                            hello = address_check::validated_hello(preface, &cookie).to_vec();
                            socket.send_to(&hello, addr)?;
                        }
                    }
                }
                Err(e) if waiting(&e) => break,
                Err(e) => return Err(e),
            }
        }
        if give_up() {
            break;
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer to the UDP hello at {addr}"),
    ))
}

impl Conn {
    pub fn tcp(stream: TcpStream) -> io::Result<Conn> {
        stream.set_read_timeout(Some(SLICE))?;
        stream.set_write_timeout(Some(SLICE))?;
        Ok(Conn::Tcp(stream))
    }

    /// A TLS session after its handshake, waiting in slices like a plain stream.
    pub fn tls(stream: linerate_tls::TlsStream<TcpStream>) -> io::Result<Conn> {
        stream.socket().set_read_timeout(Some(SLICE))?;
        stream.socket().set_write_timeout(Some(SLICE))?;
        Ok(Conn::Tls(Box::new(stream)))
    }

    pub fn udp(socket: UdpSocket) -> io::Result<Conn> {
        socket.set_read_timeout(Some(SLICE))?;
        socket.set_write_timeout(Some(SLICE))?;
        Ok(Conn::Udp(socket))
    }

    /// Sends one message of `buf.len()` bytes: all of it on TCP, one datagram on UDP.
    /// `moved` grows by every byte the kernel took, a message given up half way included.
    pub fn send(
        &mut self,
        buf: &[u8],
        moved: &mut u64,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<(), OpError> {
        match self {
            Conn::Tcp(stream) => send_bytes(stream, buf, moved, give_up),
            Conn::Tls(stream) => send_bytes(&mut **stream, buf, moved, give_up),
            Conn::Udp(socket) => loop {
                match socket.send(buf) {
                    Ok(n) => {
                        *moved += n as u64;
                        return Ok(());
                    }
                    Err(e) => keep_waiting(e, give_up)?,
                }
            },
        }
    }

    /// Receives one message: exactly `want` bytes on TCP (or what one read returns, for a
    /// random size whose sender chose fewer), one datagram of at most `want` on UDP.
    /// `moved` grows by every byte received, a message given up half way included.
    pub fn recv(
        &mut self,
        buf: &mut [u8],
        want: usize,
        exact: bool,
        moved: &mut u64,
        give_up: &mut dyn FnMut() -> bool,
    ) -> Result<(), OpError> {
        match self {
            Conn::Tcp(stream) => recv_bytes(stream, buf, want, exact, moved, give_up),
            Conn::Tls(stream) => recv_bytes(&mut **stream, buf, want, exact, moved, give_up),
            Conn::Udp(socket) => loop {
                // A datagram longer than asked is cut short by the kernel, as uperf's
                // recv of `size` bytes would.
                let room = want.min(buf.len()).max(1);
                match socket.recv(&mut buf[..room]) {
                    Ok(n) => {
                        *moved += n as u64;
                        return Ok(());
                    }
                    Err(e) => keep_waiting(e, give_up)?,
                }
            },
        }
    }

    /// Closes the connection in order: a TCP FIN after everything written.
    pub fn is_udp(&self) -> bool {
        matches!(self, Conn::Udp(_))
    }

    pub fn close(self) {
        match self {
            Conn::Tcp(stream) => {
                let _ = stream.shutdown(std::net::Shutdown::Write);
            }
            Conn::Tls(mut stream) => {
                let _ = stream.send_records();
                let _ = stream.socket().shutdown(std::net::Shutdown::Write);
            }
            Conn::Udp(_) => {}
        }
    }
}

/// Sends all of `buf` on a byte stream, then what the stream still holds (a TLS session's
/// last record: the peer may be waiting for it).
fn send_bytes(
    stream: &mut impl Write,
    buf: &[u8],
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    let mut sent = 0;
    while sent < buf.len() {
        match stream.write(&buf[sent..]) {
            Ok(0) => return Err(OpError::Closed),
            Ok(n) => {
                sent += n;
                *moved += n as u64;
            }
            Err(e) => keep_waiting(e, give_up)?,
        }
    }
    loop {
        match stream.flush() {
            Ok(()) => return Ok(()),
            Err(e) => keep_waiting(e, give_up)?,
        }
    }
}

/// Receives `want` bytes from a byte stream (or what one read returns, unless `exact`).
fn recv_bytes(
    stream: &mut impl Read,
    buf: &mut [u8],
    want: usize,
    exact: bool,
    moved: &mut u64,
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), OpError> {
    let mut got = 0;
    while got < want {
        let end = want.min(got + buf.len());
        let chunk = end - got;
        match stream.read(&mut buf[..chunk]) {
            Ok(0) => return Err(OpError::Closed),
            Ok(n) => {
                got += n;
                *moved += n as u64;
                if !exact {
                    return Ok(());
                }
            }
            Err(e) => keep_waiting(e, give_up)?,
        }
    }
    Ok(())
}

/// What a failed read or write means: `Ok` to try again (the socket's wait ran out, or a
/// datagram found the socket buffer full, and the caller does not give up), or how the
/// operation ended (a peer that closed, reset or refused: `Closed`).
pub(crate) fn keep_waiting(e: io::Error, give_up: &mut dyn FnMut() -> bool) -> Result<(), OpError> {
    if waiting(&e) || e.raw_os_error() == Some(libc::ENOBUFS) {
        return if give_up() {
            Err(OpError::GaveUp)
        } else {
            Ok(())
        };
    }
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionRefused
    ) {
        return Err(OpError::Closed);
    }
    Err(OpError::Io(e))
}

/// Waits for `at` in slices, giving up when told; busy spins instead when `busy`.
pub(crate) fn pause_until(at: Instant, busy: bool, give_up: &mut dyn FnMut() -> bool) -> bool {
    loop {
        let now = Instant::now();
        if now >= at {
            return true;
        }
        if give_up() {
            return false;
        }
        if busy {
            std::hint::spin_loop();
        } else {
            std::thread::sleep((at - now).min(SLICE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_engine::sys::int_option;
    use linerate_model::marks::Marks;
    use linerate_profile::Protocol;

    fn endpoint(protocol: Protocol, marks: Option<Marks>) -> Endpoint {
        Endpoint {
            protocol,
            remote: None,
            window: None,
            nodelay: false,
            congestion: None,
            cipher: None,
            engine: None,
            marks,
            source: None,
        }
    }

    /// An endpoint's source (a mesh host's `source`) is the address its connection leaves
    /// from: the listener sees it as the peer.
    #[test]
    fn an_endpoints_source_is_where_its_connection_leaves_from() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut endpoint = endpoint(Protocol::Tcp, None);
        endpoint.source = Some(linerate_model::Source {
            address: Some("127.0.0.2".parse().unwrap()),
            device: None,
            mptcp: false,
        });
        let _conn = dial_tcp(listener.local_addr().unwrap(), &endpoint, b"x").unwrap();
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip().to_string(), "127.0.0.2");
    }

    /// A profile's endpoint with marks sets them on its TCP and UDP sockets, IPv4 and IPv6
    /// (which both ends do, the dialer before it connects and the acceptor after); without
    /// marks a socket keeps the default class.
    #[test]
    fn an_endpoints_marks_are_set_on_its_sockets() {
        let marks = Marks {
            dscp: 46,
            ecn: true,
        };
        for (domain, level, option) in [
            (socket2::Domain::IPV4, libc::IPPROTO_IP, libc::IP_TOS),
            (socket2::Domain::IPV6, libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
        ] {
            let tcp = socket2::Socket::new(domain, socket2::Type::STREAM, None).unwrap();
            tcp_options(&tcp, &endpoint(Protocol::Tcp, Some(marks))).unwrap();
            // On TCP the kernel keeps the ECN bits: the DSCP is what was set.
            assert_eq!(int_option(&tcp, level, option).unwrap() >> 2, 46);
            let udp = socket2::Socket::new(domain, socket2::Type::DGRAM, None).unwrap();
            udp_options(&udp, &endpoint(Protocol::Udp, Some(marks))).unwrap();
            assert_eq!(int_option(&udp, level, option).unwrap(), 0xba);
            let plain = socket2::Socket::new(domain, socket2::Type::DGRAM, None).unwrap();
            udp_options(&plain, &endpoint(Protocol::Udp, None)).unwrap();
            assert_eq!(int_option(&plain, level, option).unwrap(), 0);
        }
    }
}
