//! `linerate serve`: many tests at once on one port, each isolated.
//!
//! One acceptor thread owns the listening socket and every connection that has not yet
//! said what it is. It reads exactly the preface (linerate-proto's `preface`) and then:
//! a control connection gets a thread of its own for its test; a data connection is handed
//! to the test whose token it presents; anything else is logged and closed. A connection
//! that says nothing is closed after the handshake timeout, so it cannot pin resources.
//!
//! The acceptor knows every handler ([`crate::native_server`], [`crate::iperf3_server`],
//! the agent); they share [`crate::server_state`] and never import this module.

use crate::access::{self, Admission, Held, Stage};
use crate::native_server::serve_test;
use crate::server_state::ServerState;
pub use crate::server_state::{KeepReport, ReportKeeper, ServedTool, ServerConfig};
use linerate_proto::preface::{self, Preface};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A server on an ephemeral loopback port, serving on a thread of its own: the in-process
/// peer of runs that measure this machine.
pub struct LocalServer {
    pub addr: SocketAddr,
    /// Setting it ends the server.
    pub shutdown: Arc<AtomicBool>,
    pub handle: JoinHandle<io::Result<()>>,
}

impl LocalServer {
    /// Starts one, quiet, with `configure` applied to its configuration.
    pub fn start(configure: impl FnOnce(&mut ServerConfig)) -> io::Result<LocalServer> {
        let mut config = ServerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        config.log = false;
        configure(&mut config);
        let server = Server::bind(config)?;
        let addr = server.local_addr()?;
        let shutdown = server.shutdown_flag();
        let handle = std::thread::Builder::new()
            .name("linerate-local-server".into())
            .spawn(move || server.run())?;
        Ok(LocalServer {
            addr,
            shutdown,
            handle,
        })
    }
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    /// iperf 2's port, TCP and UDP, each served by a thread of its own
    /// ([`crate::iperf2_server`], [`crate::iperf2_udp`]).
    iperf2: Option<(std::net::TcpListener, Option<std::net::UdpSocket>)>,
    shared: Arc<ServerState>,
}

struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    bytes: Vec<u8>,
    deadline: Instant,
    /// Its place among the connections the server holds.
    held: Held,
}

impl Server {
    pub fn bind(config: ServerConfig) -> io::Result<Server> {
        // An MPTCP listener takes plain TCP connections too (they fall back), but the
        // kernel's MPTCP code then runs for every connection: asked for, not the default.
        let protocol = config
            .mptcp
            .then(|| socket2::Protocol::from(libc::IPPROTO_MPTCP));
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(config.listen),
            socket2::Type::STREAM,
            protocol,
        )
        .map_err(|e| {
            if config.mptcp {
                io::Error::new(
                    e.kind(),
                    format!("--mptcp: {}", linerate_engine::sys::mptcp_refusal(&e)),
                )
            } else {
                e
            }
        })?;
        socket.set_reuse_address(true)?;
        if config.listen.is_ipv6() {
            // Serve IPv4 too on "::", as iperf3 does.
            let _ = socket.set_only_v6(false);
        }
        socket.bind(&config.listen.into())?;
        // Thousands of data connections arrive at once for a large -P.
        socket.listen(4096)?;
        socket.set_nonblocking(true)?;
        raise_descriptor_limit();
        let listener = TcpListener::from_std(socket.into());
        // iperf3 clients open UDP streams at the server's own port.
        let iperf3_udp = match crate::iperf3_server::bind_udp(listener.local_addr()?) {
            Ok(socket) => Some(socket),
            Err(e) => {
                if config.log {
                    eprintln!(
                        "UDP port {} unavailable for iperf3 clients: {e}",
                        config.listen.port()
                    );
                }
                None
            }
        };
        // iperf 2's port is the operator's to choose and must be had where chosen.
        let iperf2 = match config.iperf2.port {
            Some(port) => {
                let addr = SocketAddr::new(config.listen.ip(), port);
                match crate::iperf2_server::bind(addr) {
                    Ok(listener) => {
                        // UDP on the port TCP got (the one asked, or any for 0).
                        let bound = SocketAddr::new(addr.ip(), listener.local_addr()?.port());
                        let udp = match crate::iperf2_udp::bind(bound) {
                            Ok(socket) => Some(socket),
                            Err(e) => {
                                if config.log {
                                    eprintln!("iperf 2's UDP port {} unavailable; iperf 2's UDP tests are not served: {e}", bound.port());
                                }
                                None
                            }
                        };
                        Some((listener, udp))
                    }
                    Err(e) if config.iperf2.port_chosen => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("--iperf2-port {port}: {e}"),
                        ))
                    }
                    Err(e) => {
                        if config.log {
                            eprintln!("iperf 2's port {port} unavailable; iperf 2 clients are not served: {e}");
                        }
                        None
                    }
                }
            }
            None => None,
        };
        Ok(Server {
            listener,
            iperf2,
            shared: Arc::new(ServerState::new(config, iperf3_udp)),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Setting this flag stops the server: no new connections, running tests are ended.
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        self.shared.shutdown.clone()
    }

    /// Serves until the shutdown flag is set.
    pub fn run(mut self) -> io::Result<()> {
        const LISTENER: mio::Token = mio::Token(usize::MAX);
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        let mut pending: HashMap<usize, Pending> = HashMap::new();
        let mut next_token = 0usize;
        let mut tests: Vec<JoinHandle<()>> = Vec::new();
        // A descriptor kept in reserve: out of descriptors, it is given up to accept and
        // close one waiting connection at a time, so clients hear a close at once instead
        // of hanging in the backlog, and the loop does not spin on a full backlog.
        let mut spare = std::fs::File::open("/dev/null").ok();
        let mut busy_since_trim = false;
        let shared = self.shared.clone();
        let handshake = shared.config.timeouts.handshake;
        shared.log(&format!("listening on {}", self.listener.local_addr()?));
        let mut iperf2 = Vec::new();
        if let Some((listener, udp)) = self.iperf2.take() {
            iperf2.push(crate::iperf2_server::spawn(shared.clone(), listener)?);
            if let Some(socket) = udp {
                iperf2.push(crate::iperf2_udp::spawn(shared.clone(), socket)?);
            }
        }

        while !shared.shutdown.load(Ordering::Relaxed) {
            match poll.poll(&mut events, Some(Duration::from_millis(100))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                if event.token() == LISTENER {
                    self.accept_all(&mut poll, &mut pending, &mut next_token, &mut spare);
                    continue;
                }
                let key = event.token().0;
                let Some(conn) = pending.get_mut(&key) else {
                    continue;
                };
                match read_preface(conn) {
                    PrefaceRead::More => {}
                    PrefaceRead::Closed(why) => {
                        let conn = pending.remove(&key).expect("present");
                        shared.refused(conn.peer, &format!("{why}; closed"));
                    }
                    PrefaceRead::Done(kind) => {
                        let mut conn = pending.remove(&key).expect("present");
                        let _ = poll.registry().deregister(&mut conn.stream);
                        if let Some(handle) = self.dispatch(kind, conn) {
                            tests.push(handle);
                        }
                    }
                }
            }
            let now = Instant::now();
            pending.retain(|_, conn| {
                let keep = conn.deadline > now;
                if !keep {
                    shared.refused(
                        conn.peer,
                        &format!(
                            "sent no preface within {:.0} s; closed",
                            handshake.as_secs_f64()
                        ),
                    );
                }
                keep
            });
            tests.retain(|t| !t.is_finished());
            let idle = tests.is_empty() && pending.is_empty();
            // Idle again after a burst: give the freed heap back to the system, so a
            // burst of connections or a large test does not leave the server's resident
            // size at its peak (glibc keeps freed memory in its arenas otherwise).
            if idle && busy_since_trim {
                release_free_memory();
            }
            busy_since_trim = !idle;
        }
        shared.log("shutting down");
        drop(pending);
        for thread in iperf2 {
            let _ = thread.join();
        }
        for test in tests {
            let _ = test.join();
        }
        Ok(())
    }

    /// Accepts every waiting connection: each is let in by the gate (or refused at once),
    /// and waits in `pending` for its preface.
    fn accept_all(
        &mut self,
        poll: &mut Poll,
        pending: &mut HashMap<usize, Pending>,
        next_token: &mut usize,
        spare: &mut Option<std::fs::File>,
    ) {
        let shared = self.shared.clone();
        let handshake = shared.config.timeouts.handshake;
        loop {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: give up the spare to close one waiting client.
                    *spare = None;
                    if let Ok((_, peer)) = self.listener.accept() {
                        shared.refused(peer, "the server is out of descriptors");
                    }
                    *spare = std::fs::File::open("/dev/null").ok();
                    if spare.is_none() {
                        return;
                    }
                    continue;
                }
                // Something else: log, keep serving what we have.
                Err(e) => {
                    shared.log(&format!("accept failed: {e}"));
                    return;
                }
            };
            let ip = access::canonical(peer.ip());
            let at_cap = shared.gate.held() >= shared.gate.policy.max_connections;
            let waiting: Vec<(usize, IpAddr)> = if at_cap {
                let mut waiting: Vec<(usize, IpAddr)> = pending
                    .iter()
                    .map(|(key, conn)| (*key, shared.gate.policy.client(conn.peer.ip())))
                    .collect();
                waiting.sort_unstable_by_key(|(key, _)| *key);
                waiting
            } else {
                Vec::new()
            };
            match shared.gate.admit(ip, &waiting) {
                Admission::Admit => {}
                Admission::AdmitEvicting(key) => {
                    if let Some(mut evicted) = pending.remove(&key) {
                        let _ = poll.registry().deregister(&mut evicted.stream);
                        shared.refused(
                            evicted.peer,
                            "closed in its preface to make room (--max-connections)",
                        );
                    }
                }
                Admission::AdmitClosedSession(client) => {
                    shared.log(&format!(
                        "closed an unauthenticated or idle session of {client} to make room for {peer} (--max-connections)"
                    ));
                }
                Admission::Refuse(why) => {
                    shared.refused(peer, why);
                    continue;
                }
            }
            *next_token = (*next_token + 1) % (usize::MAX - 1);
            let token = mio::Token(*next_token);
            if poll
                .registry()
                .register(&mut stream, token, Interest::READABLE)
                .is_ok()
            {
                pending.insert(
                    *next_token,
                    Pending {
                        stream,
                        peer,
                        bytes: Vec::with_capacity(preface::IPERF3_COOKIE_LEN),
                        deadline: Instant::now() + handshake,
                        held: shared.gate.hold(ip),
                    },
                );
            }
        }
    }

    /// Serves one connection on a thread of its own; a thread that cannot start is logged
    /// and the connection dropped.
    fn spawn_session(
        &self,
        name: &str,
        peer: SocketAddr,
        serve: impl FnOnce(&Arc<ServerState>) + Send + 'static,
    ) -> Option<JoinHandle<()>> {
        let shared = self.shared.clone();
        match std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(&shared))
        {
            Ok(handle) => Some(handle),
            Err(e) => {
                self.shared
                    .log(&format!("cannot start a thread for {peer}: {e}"));
                None
            }
        }
    }

    fn dispatch(&self, kind: Preface, conn: Pending) -> Option<JoinHandle<()>> {
        let shared = &self.shared;
        let Pending {
            stream,
            peer,
            bytes,
            held,
            ..
        } = conn;
        let stream = match into_std(stream) {
            Ok(stream) => stream,
            Err(e) => {
                shared.log(&format!("connection from {peer}: cannot hand it over: {e}"));
                return None;
            }
        };
        match kind {
            // A session's connection holds its place until the session ends.
            Preface::Control { .. } => self.spawn_session("linerate-test", peer, move |shared| {
                let _held = held;
                serve_test(shared, stream, bytes, peer)
            }),
            Preface::Agent { version } => {
                self.spawn_session("linerate-agent", peer, move |shared| {
                    let _held = held;
                    crate::profile::agent::serve(shared, stream, version, peer)
                })
            }
            Preface::Copy { version } => self.dispatch_copy(version, stream, bytes, peer, held),
            Preface::Data { token, flow } => self.dispatch_data(token, flow, stream, peer, held),
            Preface::Iperf3 { cookie } => {
                let waiting = shared
                    .iperf3_streams
                    .lock()
                    .expect("iperf3 registry lock")
                    .get(&cookie)
                    .cloned();
                if let Some(sender) = waiting {
                    // A TCP stream of an iperf3 test that is creating its streams.
                    if sender.send(stream).is_err() {
                        shared.log(&format!(
                            "refused an iperf3 stream from {peer}: its test has ended"
                        ));
                    }
                    return None;
                }
                self.spawn_session("linerate-iperf3", peer, move |shared| {
                    let _held = held;
                    crate::iperf3_server::serve(shared, stream, cookie, peer)
                })
            }
            // A probe of reachability (doctor's handshakes): closed, nothing to log.
            Preface::Ping => None,
            Preface::Unknown | Preface::NeedBytes(_) => {
                shared.refused(peer, "not a linerate client");
                None
            }
        }
    }

    /// A copy session, when this server serves files and speaks the client's version.
    fn dispatch_copy(
        &self,
        version: u32,
        stream: std::net::TcpStream,
        bytes: Vec<u8>,
        peer: SocketAddr,
        held: Held,
    ) -> Option<JoinHandle<()>> {
        let shared = &self.shared;
        if version != linerate_transfer::control::COPY_VERSION {
            shared.refused(peer, &format!("a copy session of version {version}"));
            linerate_transfer::service::refuse_unserved(
                stream,
                &format!(
                    "this server speaks copy version {}",
                    linerate_transfer::control::COPY_VERSION
                ),
            );
            return None;
        }
        match shared.config.files.clone() {
            Some(service) => {
                // One lockout for every service: failed proofs of a stream, an iperf3
                // login or a copy all count, and all are refused together.
                // Told once per reason every ten seconds (with the count), not a few
                // lines a second: a flood of refused handshakes writes a handful.
                let client = shared.gate.policy.client(peer.ip());
                let refuse = |stream, reason: &'static str, why: String, told: &str| {
                    let line = format!("refused a copy session from {peer}: {why}");
                    if let Some(line) = service.refusals().note(reason, &line, Instant::now()) {
                        shared.log(&line);
                    }
                    linerate_transfer::service::refuse_unserved(stream, told);
                };
                if let Some(left) = shared.failures.blocked(client, Instant::now()) {
                    refuse(
                        stream,
                        "failed proofs",
                        format!(
                            "{} failed proofs within {} s; refused for {:.0} s more",
                            access::MAX_FAILURES,
                            access::FAILURE_WINDOW.as_secs(),
                            left.as_secs_f64()
                        ),
                        "too many failed proofs of the key from this client: try again in a minute",
                    );
                    return None;
                }
                let slot = match shared.copy_handshakes.take(client) {
                    Ok(slot) => slot,
                    Err(limit) => {
                        refuse(
                            stream,
                            limit,
                            limit.to_string(),
                            "too many copy handshakes under way: try again shortly",
                        );
                        return None;
                    }
                };
                // Until its key is proven the session may be closed to make room at
                // --max-connections (docs/security.md), as an agent's is.
                let mark = shared.gate.mark_session(peer.ip(), &stream);
                self.spawn_session("linerate-copy", peer, move |shared| {
                    let _held = held;
                    let proven = || {
                        slot.release();
                        if let Some(mark) = &mark {
                            mark.set(Stage::Busy);
                        }
                    };
                    let admission = linerate_transfer::service::Admission {
                        handshake: shared.config.timeouts.handshake,
                        proven: &proven,
                        failed_proof: &|| shared.failed_proof(peer),
                        log: &|line| shared.log(line),
                    };
                    service.serve(stream, &bytes[12..], &admission);
                })
            }
            None => {
                shared.refused(peer, "a copy session, but no --files");
                linerate_transfer::service::refuse_unserved(
                    stream,
                    "this server serves no files (start it with --files DIR --key FILE)",
                );
                None
            }
        }
    }

    /// A data connection, handed to the test that registered its token (through its TLS
    /// handshake, on a thread of its own, for an encrypted test).
    fn dispatch_data(
        &self,
        token: linerate_proto::Token,
        flow: u32,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        held: Held,
    ) -> Option<JoinHandle<()>> {
        let shared = &self.shared;
        let waiting = shared
            .tls_registry
            .lock()
            .expect("TLS registry lock")
            .get(&token)
            .cloned();
        if let Some(waiting) = waiting {
            // The handshake waits on the client: never on the acceptor's thread.
            return self.spawn_session("linerate-tls", peer, move |shared| {
                // The handshake holds the connection's place until it is done.
                let _held = held;
                let result = crate::secure::accept_data(stream, &waiting);
                if let Err(why) = &result {
                    shared.refused(peer, &format!("data connection {flow}: {why}"));
                }
                let _ = waiting.sender.send((flow, result));
            });
        }
        let sender = shared
            .registry
            .lock()
            .expect("registry lock")
            .get(&token)
            .cloned();
        match sender {
            Some(sender) if sender.send((flow, stream)).is_ok() => {}
            _ => shared.refused(peer, "a data connection with an unknown test token"),
        }
        None
    }
}

/// A connection leaves the event loop blocking, as std streams are made: its consumers
/// wait in blocking calls with timeouts, which a non-blocking socket ignores (every wait
/// would spin), or set the mode they need themselves.
fn into_std(stream: TcpStream) -> io::Result<std::net::TcpStream> {
    // SAFETY: the descriptor comes out of a live mio stream, whose ownership ends here.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) };
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// How far reading a connection's preface got.
enum PrefaceRead {
    More,
    Done(Preface),
    Closed(&'static str),
}

/// Reads no more than the preface needs, and classifies it when complete.
fn read_preface(conn: &mut Pending) -> PrefaceRead {
    loop {
        let want = match preface::classify(&conn.bytes) {
            Preface::NeedBytes(n) => n,
            Preface::Unknown => return PrefaceRead::Done(Preface::Unknown),
            done => return PrefaceRead::Done(done),
        };
        let have = conn.bytes.len();
        conn.bytes.resize(want, 0);
        match conn.stream.read(&mut conn.bytes[have..]) {
            Ok(0) => return PrefaceRead::Closed("closed before finishing its preface"),
            Ok(n) => conn.bytes.truncate(have + n),
            Err(e) => {
                conn.bytes.truncate(have);
                match e.kind() {
                    io::ErrorKind::WouldBlock => return PrefaceRead::More,
                    io::ErrorKind::Interrupted => {}
                    _ => return PrefaceRead::Closed("failed during its preface"),
                }
            }
        }
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit: a server holds
/// one per connection, and the soft default (often 1024) is far below what
/// `--max-connections` and thousands of flows need.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Returns free heap memory to the system where the allocator keeps it (glibc).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
