//! Opening a copy session (docs/transfer-protocol.md 2): the preface, the key exchange
//! (linerate-proto's `auth`), and the UDP address proof. The client sends tagged hellos
//! from its UDP socket until the server says it has one; the server takes the hello's
//! source address only when its IP is the control connection's, and connects its socket
//! there. A server never sends a datagram to an address a client merely named.

// An I/O driver: the hellos are resent and the proof waited for on the clock.
#![allow(clippy::disallowed_methods)]

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use linerate_proto::auth::{Challenge, ClientAuth, Key, Nonce, Role, ServerAuth};

use crate::channel::Channel;
use crate::control::{Control, COPY_VERSION};
use crate::datagrams::Session;
use crate::error::TransferError;
use crate::sys;
use crate::wire::{self, Datagram, DATA_HEADER, MAX_PAYLOAD};

pub use linerate_proto::preface::COPY_MAGIC;
/// How the datagram key is derived from the session's keys.
const DATAGRAM_KEY_CONTEXT: &str = "linerate copy 2026-12 datagram key";

/// What a copy session's proofs bind: the protocol, its version, and the UDP port and
/// session id the challenge names (a relay that changed them would break both proofs).
fn bound(udp_port: u16, session: u64) -> Vec<u8> {
    format!("linerate copy v{COPY_VERSION} udp {udp_port} session {session:016x}").into_bytes()
}
/// How long each step of the set-up may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::getrandom(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(bytes)
}

/// The largest payload a datagram may carry on a connected socket's path.
fn block_for(udp: &socket2::Socket, ipv4: bool, cap: Option<u32>) -> io::Result<u32> {
    let mtu = sys::path_mtu(udp, ipv4)?;
    let headers = if ipv4 { 20 + 8 } else { 40 + 8 };
    let block = (mtu as usize)
        .saturating_sub(headers + DATA_HEADER)
        .min(MAX_PAYLOAD) as u32;
    Ok(cap.map_or(block, |cap| block.min(cap)).max(64))
}

fn setup_error(what: &str, e: impl std::fmt::Display) -> TransferError {
    TransferError::Peer(format!("{what}: {e}"))
}

/// A client's session: connected and authenticated; its UDP address is proven before
/// the first answer to a request is read ([`ClientSession::prove_udp`]).
pub struct ClientSession {
    pub channel: Channel,
    pub session: Session,
    /// The TCP handshake's duration: the first guess of the path's RTT.
    pub initial_rtt_ns: u64,
    /// The UDP hello not yet answered with `udp_ready`.
    unproven: Option<UdpHello>,
}

/// A client's UDP hello, sent until the server says it arrived.
struct UdpHello {
    datagram: Vec<u8>,
    to: SocketAddr,
    deadline: Instant,
}

impl ClientSession {
    /// Waits for the server's `udp_ready`, sending the UDP hello again every 50 ms (it
    /// may be lost); at once when it has come. The first request goes out before this, so
    /// the server reads it as soon as the hello arrives: set-up costs a round trip less.
    pub fn prove_udp(&mut self) -> Result<(), TransferError> {
        let Some(hello) = self.unproven.take() else {
            return Ok(());
        };
        loop {
            match self.channel.receive(Duration::from_millis(50), None) {
                Ok(Control::UdpReady) => return Ok(()),
                Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
                Ok(other) => return Err(setup_error("unexpected answer", format!("{other:?}"))),
                Err(crate::channel::ChannelError::Timeout(_))
                    if Instant::now() < hello.deadline =>
                {
                    let _ = self.session.udp.send(&hello.datagram);
                }
                Err(e) => {
                    return Err(setup_error(
                        &format!("no UDP path to {} (a firewall?)", hello.to),
                        e,
                    ))
                }
            }
        }
    }
}

impl ClientSession {
    /// Opens lanes 1 to `count` - 1 (`--lanes`): asks the server for their ports, opens a
    /// socket for each (from the control connection's address and device, marked with
    /// `dscp`), and sends each lane's hello until the server says every one came. Before
    /// the first file.
    pub fn open_lanes(
        &mut self,
        count: u8,
        bind: &Bind,
        dscp: Option<u8>,
    ) -> Result<(), TransferError> {
        self.channel
            .send(&Control::Lanes { count })
            .map_err(|e| setup_error("control connection", e))?;
        self.prove_udp()?;
        let ports = match self.channel.receive(SETUP_TIMEOUT, None) {
            Ok(Control::LanePorts { ports }) if ports.len() + 1 == usize::from(count) => ports,
            Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
            Ok(other) => return Err(setup_error("unexpected answer", format!("{other:?}"))),
            Err(e) => return Err(setup_error("no answer to --lanes", e)),
        };
        let hello = wire::encode_hello(self.session.id, &self.session.key);
        for port in ports {
            let udp = sys::udp_socket(SocketAddr::new(self.channel.local.ip(), 0))
                .map_err(|e| TransferError::Local(format!("cannot open a UDP socket: {e}")))?;
            bind.to_device(&udp)?;
            mark(&udp, dscp)?;
            let to = SocketAddr::new(self.channel.peer.ip(), port);
            udp.connect(&to.into())
                .map_err(|e| TransferError::Local(format!("cannot connect the UDP socket: {e}")))?;
            let _ = udp.send(&hello);
            self.session.lanes.push(udp);
        }
        let deadline = Instant::now() + SETUP_TIMEOUT;
        loop {
            match self.channel.receive(Duration::from_millis(50), None) {
                Ok(Control::LanesReady) => return Ok(()),
                Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
                Ok(other) => return Err(setup_error("unexpected answer", format!("{other:?}"))),
                Err(crate::channel::ChannelError::Timeout(_)) if Instant::now() < deadline => {
                    for lane in &self.session.lanes {
                        let _ = lane.send(&hello);
                    }
                }
                Err(e) => return Err(setup_error("the lanes' UDP ports were not reached", e)),
            }
        }
    }
}

/// The server's half of `--lanes`: opens `count` - 1 sockets beside the session's, tells
/// the client their ports, and connects each to the address its hello came from (tagged
/// with the session's key, from the control connection's IP), as the session's own was.
/// A lane without a hello within 10 s fails the session.
pub fn accept_lanes(
    channel: &Channel,
    session: &mut Session,
    count: u8,
) -> Result<(), TransferError> {
    let peer = channel.peer;
    let mut lanes = Vec::new();
    let mut ports = Vec::new();
    for _ in 1..count {
        let udp = sys::udp_socket(SocketAddr::new(channel.local.ip(), 0))
            .map_err(|e| TransferError::Local(format!("cannot open a UDP socket: {e}")))?;
        let port = udp
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .ok_or_else(|| TransferError::Local("the UDP socket has no port".into()))?;
        lanes.push(udp);
        ports.push(port);
    }
    channel
        .send(&Control::LanePorts { ports })
        .map_err(|e| setup_error("control connection", e))?;
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let mut proven = vec![false; lanes.len()];
    while proven.contains(&false) {
        if Instant::now() >= deadline {
            return Err(TransferError::Peer(format!(
                "{} of {} lanes sent no UDP hello within 10 s",
                proven.iter().filter(|p| !**p).count(),
                lanes.len()
            )));
        }
        for (lane, udp) in lanes.iter().enumerate() {
            if proven[lane] {
                continue;
            }
            let _ = sys::wait(udp.as_raw_fd(), libc::POLLIN, Some(5_000_000));
            if let Heard::Hello(from) = heard(udp, &session.key, session.id, peer.ip()) {
                udp.connect(&from.into()).map_err(|e| {
                    TransferError::Local(format!("cannot connect the UDP socket: {e}"))
                })?;
                proven[lane] = true;
            }
        }
    }
    session.lanes = lanes;
    channel
        .send(&Control::LanesReady)
        .map_err(|e| setup_error("control connection", e))
}

/// Where a client's control connection and datagrams leave from (`-B`, `--bind-dev`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bind {
    pub address: Option<std::net::IpAddr>,
    /// An interface or VRF device (SO_BINDTODEVICE).
    pub device: Option<String>,
}

impl Bind {
    /// Keeps `socket` to the device's routes, when one is named.
    pub fn to_device(&self, socket: &socket2::Socket) -> Result<(), TransferError> {
        match &self.device {
            Some(device) => socket
                .bind_device(Some(device.as_bytes()))
                .map_err(|e| TransferError::Local(format!("--bind-dev {device}: {e}"))),
            None => Ok(()),
        }
    }
}

/// `--dscp` on one of the client's sockets.
fn mark(socket: &socket2::Socket, dscp: Option<u8>) -> Result<(), TransferError> {
    match dscp {
        Some(dscp) => sys::set_dscp(socket, dscp)
            .map_err(|e| TransferError::Local(format!("--dscp {dscp}: {e}"))),
        None => Ok(()),
    }
}

/// The control connection to `server`, from `bind` when given, marked with `dscp` from
/// its first packet.
fn dial(server: SocketAddr, bind: &Bind, dscp: Option<u8>) -> Result<TcpStream, TransferError> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(server),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| TransferError::Local(format!("cannot open a socket: {e}")))?;
    bind.to_device(&socket)?;
    mark(&socket, dscp)?;
    if let Some(address) = bind.address {
        if address.is_ipv4() != server.is_ipv4() {
            return Err(TransferError::Local(format!(
                "--bind {address} cannot reach {server} (another IP version)"
            )));
        }
        socket
            .bind(&SocketAddr::new(address, 0).into())
            .map_err(|e| TransferError::Local(format!("--bind {address}: {e}")))?;
    }
    socket
        .connect_timeout(&server.into(), SETUP_TIMEOUT)
        .map_err(|e| TransferError::Peer(format!("cannot connect to {server}: {e}")))?;
    Ok(socket.into())
}

/// Connects to a server's copy service.
/// With `bind`, the control connection leaves from that address, and so do the
/// datagrams, which take the control connection's local address.
pub fn connect(
    server: SocketAddr,
    key: &Key,
    block_cap: Option<u32>,
    bind: &Bind,
    dscp: Option<u8>,
) -> Result<ClientSession, TransferError> {
    let started = Instant::now();
    let stream = dial(server, bind, dscp)?;
    let initial_rtt_ns = started.elapsed().as_nanos() as u64;
    let mut channel =
        Channel::new(stream, &[]).map_err(|e| setup_error("control connection", e))?;
    let mut preface = COPY_MAGIC.to_vec();
    preface.extend_from_slice(&COPY_VERSION.to_be_bytes());
    channel
        .send_raw(&preface)
        .map_err(|e| setup_error("control connection", e))?;
    let client_random = Nonce(random().map_err(|e| TransferError::Local(e.to_string()))?);
    let mut auth = ClientAuth::new(key, &client_random);
    channel
        .send(&Control::Hello {
            nonce: auth.nonce_hex(),
            pake: auth.pake_hex(),
        })
        .map_err(|e| setup_error("control connection", e))?;
    let (challenge, udp_port, id) = match channel.receive(SETUP_TIMEOUT, None) {
        Ok(Control::Challenge {
            nonce,
            pake,
            proof,
            udp_port,
            session,
        }) => (Challenge { nonce, pake, proof }, udp_port, session),
        Ok(Control::Refused { message }) => return Err(TransferError::Remote(message)),
        Ok(other) => return Err(setup_error("unexpected answer", format!("{other:?}"))),
        Err(e) => return Err(setup_error("no answer from the server's copy service", e)),
    };
    // The server's proof covers the UDP port and session it named: checked here, before
    // anything is sent there.
    let (answer, keys) = auth
        .answer(&challenge, &bound(udp_port, id))
        .map_err(|e| TransferError::Peer(e.to_string()))?;
    channel
        .send(&Control::Proof { proof: answer })
        .map_err(|e| setup_error("control connection", e))?;
    // Everything after the proofs is sealed: a relay can neither read nor change what
    // either end asks (`--encrypt` among it).
    channel.seal(keys.seal_for(Role::Client));
    let datagram_key = keys.derive(DATAGRAM_KEY_CONTEXT);
    let udp = sys::udp_socket(SocketAddr::new(channel.local.ip(), 0))
        .map_err(|e| TransferError::Local(format!("cannot open a UDP socket: {e}")))?;
    // The datagrams keep to the control connection's device, as to its address, and carry
    // its marks.
    bind.to_device(&udp)?;
    mark(&udp, dscp)?;
    let server_udp = SocketAddr::new(channel.peer.ip(), udp_port);
    udp.connect(&server_udp.into())
        .map_err(|e| TransferError::Local(format!("cannot connect the UDP socket: {e}")))?;
    let hello = wire::encode_hello(id, &datagram_key);
    let _ = udp.send(&hello);
    // The connected socket knows its path's MTU before any answer comes.
    let block = block_for(&udp, server.is_ipv4() || is_mapped(server.ip()), block_cap)
        .map_err(|e| TransferError::Local(format!("cannot read the path MTU: {e}")))?;
    Ok(ClientSession {
        channel,
        session: Session {
            udp,
            key: datagram_key,
            id,
            block,
            ecn: Default::default(),
            lanes: Vec::new(),
        },
        initial_rtt_ns,
        unproven: Some(UdpHello {
            datagram: hello.to_vec(),
            to: server_udp,
            deadline: Instant::now() + SETUP_TIMEOUT,
        }),
    })
}

/// What one read of a session's unproven UDP socket found.
enum Heard {
    /// The session's hello (tagged with its key, naming its id) from the control
    /// connection's IP: where the client receives.
    Hello(SocketAddr),
    /// A datagram that is not that.
    Other,
    Nothing,
}

/// Reads one datagram waiting on `udp` and says whether it is the session's hello.
fn heard(udp: &socket2::Socket, key: &[u8; 32], id: u64, peer: IpAddr) -> Heard {
    let mut buffer = [0u8; 256];
    // SAFETY: MaybeUninit over initialized bytes; recv_from writes at most its length.
    let uninit =
        unsafe { &mut *(&mut buffer[..] as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    let Ok((n, from)) = udp.recv_from(uninit) else {
        return Heard::Nothing;
    };
    let Some(from) = from.as_socket() else {
        return Heard::Nothing;
    };
    match wire::parse(&buffer[..n], key) {
        Ok(Datagram::Hello { session }) if session == id && from.ip() == peer => Heard::Hello(from),
        _ => Heard::Other,
    }
}

fn is_mapped(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// The server's half: authenticates the client and proves its UDP address; `proven` is
/// called as soon as the key is (the listener stops treating the session as one it may
/// close). A refusal says why, for the caller to count and log (the client was told).
// Long: the server's half of the handshake in its order (key exchange, then the UDP
// address proof), each failure its own message.
pub fn accept(
    mut channel: Channel,
    key: &Key,
    handshake: Duration,
    proven: &dyn Fn(),
) -> Result<(Channel, Session), Unopened> {
    let peer = channel.peer;
    // One deadline for the hello and the proof together: a client that trickles its
    // handshake holds its place no longer than one that sends nothing.
    let deadline = Instant::now() + handshake;
    let left = || deadline.saturating_duration_since(Instant::now());
    let (client_nonce, client_pake) = match channel.receive(left(), None) {
        Ok(Control::Hello { nonce, pake }) => (nonce, pake),
        Ok(other) => {
            return Err(Unopened::Broken(format!(
                "expected a hello, got {}",
                control_name(&other)
            )));
        }
        Err(e) => return Err(Unopened::Broken(format!("no hello: {e}"))),
    };
    let local = |e: String| Unopened::Local(TransferError::Local(e));
    let server_nonce = Nonce(random().map_err(|e| local(e.to_string()))?);
    // The session's UDP socket and id go out with the challenge, so that the client sends
    // its proof, its UDP hello and its first request in one flight (3 round trips of
    // set-up, not 4). The socket receives nothing before the proof is checked, and sends
    // nothing before a hello under the session's key has come from the client.
    let id = u64::from_be_bytes(random().map_err(|e| local(e.to_string()))?);
    let udp = sys::udp_socket(SocketAddr::new(channel.local.ip(), 0))
        .map_err(|e| local(format!("cannot open a UDP socket: {e}")))?;
    let udp_port = udp
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| a.port())
        .ok_or_else(|| local("the UDP socket has no port".into()))?;
    let mut auth = ServerAuth::new(key.clone(), server_nonce);
    let bound = bound(udp_port, id);
    let challenge = match auth.handle_hello(Some(&client_nonce), Some(&client_pake), &bound) {
        Ok(challenge) => challenge,
        Err(e) => {
            let _ = channel.send(&Control::Refused {
                message: e.to_string(),
            });
            return Err(Unopened::Broken(e.to_string()));
        }
    };
    channel
        .send(&Control::Challenge {
            nonce: challenge.nonce,
            pake: challenge.pake,
            proof: challenge.proof,
            udp_port,
            session: id,
        })
        .map_err(|e| Unopened::Broken(format!("control connection: {e}")))?;
    // From here the client holds the server's key confirmation: it has tested one guess
    // of the key whatever it does next, so anything but a good proof is a failed one
    // (an abandoned handshake too, or one connection would test a guess for free).
    let proof = match channel.receive(left(), None) {
        Ok(Control::Proof { proof }) => proof,
        Ok(other) => {
            return Err(Unopened::KeyNotProven(format!(
                "sent {} instead of a proof",
                control_name(&other)
            )))
        }
        Err(crate::channel::ChannelError::Closed) => {
            return Err(Unopened::KeyNotProven(
                "closed without proving the key (it holds another key)".into(),
            ))
        }
        Err(e) => {
            return Err(Unopened::KeyNotProven(format!(
                "did not prove the key: {e}"
            )))
        }
    };
    let keys = match auth.handle_proof(&proof) {
        Ok(keys) => keys,
        Err(e) => {
            let _ = channel.send(&Control::Refused {
                message: e.to_string(),
            });
            return Err(Unopened::KeyNotProven(e.to_string()));
        }
    };
    proven();
    channel.seal(keys.seal_for(Role::Server));
    let datagram_key = keys.derive(DATAGRAM_KEY_CONTEXT);
    // The client's hello: tagged with the session's key, from the control peer's IP.
    let deadline = Instant::now() + SETUP_TIMEOUT;
    // Datagrams that are not the hello (another source, a bad tag) are counted, and
    // named once at the end: a flood of them writes no line each.
    let mut strangers = 0u64;
    let client_udp = loop {
        if Instant::now() >= deadline {
            return Err(Unopened::Broken(format!(
                "no UDP hello within 10 s{}",
                if strangers > 0 {
                    format!(" ({strangers} other datagrams ignored)")
                } else {
                    String::new()
                }
            )));
        }
        let _ = sys::wait(udp.as_raw_fd(), libc::POLLIN, Some(50_000_000));
        match heard(&udp, &datagram_key, id, peer.ip()) {
            Heard::Hello(from) => break from,
            Heard::Other => strangers += 1,
            Heard::Nothing => {}
        }
    };
    udp.connect(&client_udp.into())
        .map_err(|e| local(format!("cannot connect the UDP socket: {e}")))?;
    channel
        .send(&Control::UdpReady)
        .map_err(|e| Unopened::Broken(format!("control connection: {e}")))?;
    let block = block_for(
        &udp,
        client_udp.is_ipv4() || is_mapped(client_udp.ip()),
        None,
    )
    .map_err(|e| local(format!("cannot read the path MTU: {e}")))?;
    Ok((
        channel,
        Session {
            udp,
            key: datagram_key,
            id,
            block,
            ecn: Default::default(),
            lanes: Vec::new(),
        },
    ))
}

/// Why a copy session did not open, as the server counts it.
#[derive(Debug)]
pub enum Unopened {
    /// The client had the server's key confirmation and did not prove the key (a wrong
    /// proof, or none before it closed or the deadline passed): a failed guess, counted
    /// toward the client's lockout.
    KeyNotProven(String),
    /// A handshake that broke or stalled before the challenge, or a UDP hello that never
    /// came: not a guess of the key.
    Broken(String),
    /// This end failed (no randomness, no socket).
    Local(TransferError),
}

impl Unopened {
    /// The reason's name, for counting refusals by reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unopened::KeyNotProven(_) => "key not proven",
            Unopened::Broken(_) => "handshake broken",
            Unopened::Local(_) => "server error",
        }
    }
}

impl std::fmt::Display for Unopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unopened::KeyNotProven(why) | Unopened::Broken(why) => f.write_str(why),
            Unopened::Local(e) => write!(f, "{e}"),
        }
    }
}

/// A control message's type, as the wire names it (never its contents, which a peer
/// chose).
fn control_name(message: &Control) -> String {
    serde_json::to_value(message)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A challenge relayed with another UDP port or session id than the server chose: the
    /// client refuses the server's proof before it sends anything there.
    #[test]
    fn a_challenge_whose_udp_port_or_session_was_changed_is_refused() {
        let key = Key::from_file_contents(b"the copy session test key").unwrap();
        let (port, id) = (40_000u16, 0x1234_5678_9abc_def0u64);
        for (their_port, their_id, holds) in [
            (port, id, true),
            (port + 1, id, false),
            (port, id ^ 1, false),
        ] {
            let mut client = ClientAuth::new(&key, &Nonce([7; 32]));
            let mut server = ServerAuth::new(key.clone(), Nonce([9; 32]));
            let challenge = server
                .handle_hello(
                    Some(&client.nonce_hex()),
                    Some(&client.pake_hex()),
                    &bound(port, id),
                )
                .unwrap();
            let answered = client.answer(&challenge, &bound(their_port, their_id));
            assert_eq!(
                answered.is_ok(),
                holds,
                "port {their_port}, id {their_id:x}"
            );
            if let Ok((proof, _)) = answered {
                assert!(server.handle_proof(&proof).is_ok());
            }
        }
    }
}
