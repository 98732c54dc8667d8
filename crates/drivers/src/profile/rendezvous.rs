//! Where the connections a profile thread accepts arrive: each is addressed to one thread
//! and one of its connection operations (its flow number, [`flow`]), presented with the
//! run's token, and waits here until that thread takes it.
//!
//! TCP connections come from the server's data-connection registry (on an agent) or from
//! a listener of the group's host; UDP "connections" start with a hello datagram on the
//! rendezvous UDP socket. Only the rendezvous's one peer host may open either, and a UDP
//! hello must first prove its source address: it is answered with a cookie alone
//! ([`linerate_proto::address_check`]), and only the hello that carries the cookie back
//! is answered from a new socket connected to the sender.

use super::conn::Conn;
use super::SLICE;
use crate::access::canonical;
use linerate_proto::address_check::{AddressCookies, RendezvousHello};
use linerate_proto::preface::{self, Preface};
use linerate_proto::Token;
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections that arrived and that no thread took yet, at most: more are closed. A
/// thread has at most 4,096 flows towards one peer, and takes each as it comes to it.
const MOST_WAITING: usize = 4096;
/// How long an answered UDP hello is remembered, to answer its repeats from the same
/// socket: the dialer repeats for at most five seconds.
const HELLO_MEMORY: Duration = Duration::from_secs(6);

/// A thread's `ordinal`-th connection operation towards one peer, as one number.
pub(crate) fn flow(thread: u32, ordinal: u32) -> u32 {
    (thread << 12) | (ordinal & 0xfff)
}

fn into_conn(arrival: Arrival) -> io::Result<Conn> {
    match arrival {
        Arrival::Tcp(stream) => Conn::tcp(stream),
        Arrival::Udp(socket) => Conn::udp(socket),
    }
}

pub(crate) enum Arrival {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// A flow's place at the rendezvous: its connection, or the thread waiting for it.
enum Slot {
    Arrived(Arrival),
    Waiting(SyncSender<Arrival>),
}

pub(crate) struct Rendezvous {
    pub token: Token,
    pub udp_port: u16,
    /// The one host whose connections are taken: the group host a mirror serves, or the
    /// agent a group host asked for a mirror.
    peer: IpAddr,
    /// Each waiting thread has a channel of its own, so an arrival wakes only the thread
    /// it is for: with one shared condition, thousands of threads would all wake for
    /// every one of thousands of connections.
    slots: Mutex<HashMap<u32, Slot>>,
    stop: Arc<AtomicBool>,
}

impl Rendezvous {
    /// A rendezvous with its UDP socket bound on `ip`, taking connections from `peer`
    /// only; `stop` ends its helper threads.
    pub fn open(
        ip: IpAddr,
        token: Token,
        peer: IpAddr,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Arc<Rendezvous>> {
        let udp = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        udp.set_read_timeout(Some(SLICE))?;
        let cookies = crate::server_state::random_cookies()?;
        let rendezvous = Arc::new(Rendezvous {
            token,
            udp_port: udp.local_addr()?.port(),
            peer: canonical(peer),
            slots: Mutex::new(HashMap::new()),
            stop,
        });
        let serving = rendezvous.clone();
        std::thread::Builder::new()
            .name("linerate-udp-hello".into())
            .spawn(move || serving.serve_udp(udp, &cookies))?;
        Ok(rendezvous)
    }

    fn is_peer(&self, from: &SocketAddr) -> bool {
        canonical(from.ip()) == self.peer
    }

    pub fn deliver(&self, flow: u32, arrival: Arrival) {
        let mut slots = self.slots.lock().expect("rendezvous lock");
        let waiting = slots
            .values()
            .filter(|slot| matches!(slot, Slot::Arrived(_)))
            .count();
        if waiting >= MOST_WAITING && !matches!(slots.get(&flow), Some(Slot::Waiting(_))) {
            return;
        }
        let arrival = match slots.remove(&flow) {
            Some(Slot::Waiting(waiter)) => match waiter.try_send(arrival) {
                Ok(()) => return,
                // The waiter gave up in the meantime: keep the connection for a later take.
                Err(TrySendError::Disconnected(arrival) | TrySendError::Full(arrival)) => arrival,
            },
            _ => arrival,
        };
        slots.insert(flow, Slot::Arrived(arrival));
    }

    /// Takes the connection for `flow`, waiting until `give_up` says to stop.
    pub fn take(&self, flow: u32, give_up: &mut dyn FnMut() -> bool) -> io::Result<Conn> {
        let arrivals = {
            let mut slots = self.slots.lock().expect("rendezvous lock");
            if let Some(Slot::Arrived(arrival)) = slots.remove(&flow) {
                return into_conn(arrival);
            }
            let (waiter, arrivals) = sync_channel(1);
            slots.insert(flow, Slot::Waiting(waiter));
            arrivals
        };
        loop {
            match arrivals.recv_timeout(SLICE) {
                Ok(arrival) => return into_conn(arrival),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
            }
            if give_up() || self.stop.load(Ordering::Relaxed) {
                let mut slots = self.slots.lock().expect("rendezvous lock");
                if matches!(slots.get(&flow), Some(Slot::Waiting(_))) {
                    slots.remove(&flow);
                }
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer's connection did not arrive",
                ));
            }
        }
    }

    /// Feeds TCP connections from the server's registry until the sender side is dropped
    /// or the run stops.
    pub fn feed(
        self: &Arc<Rendezvous>,
        incoming: std::sync::mpsc::Receiver<(u32, std::net::TcpStream)>,
    ) {
        let rendezvous = self.clone();
        let _ = std::thread::Builder::new()
            .name("linerate-rendezvous".into())
            .spawn(move || loop {
                match incoming.recv_timeout(SLICE) {
                    Ok((flow, stream)) => rendezvous.deliver(flow, Arrival::Tcp(stream)),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if rendezvous.stop.load(Ordering::Relaxed) {
                            return;
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                }
            });
    }

    /// Serves a listener of its own (the group host's, for its accept operations): each
    /// connection must present the token in a data preface within a second.
    pub fn listen(self: &Arc<Rendezvous>, listener: TcpListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let rendezvous = self.clone();
        std::thread::Builder::new()
            .name("linerate-listen".into())
            .spawn(move || {
                while !rendezvous.stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((_, from)) if !rendezvous.is_peer(&from) => {}
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
                            let mut bytes = [0u8; preface::DATA_PREFACE_LEN];
                            if stream.read_exact(&mut bytes).is_ok() {
                                if let Preface::Data { token, flow } = preface::classify(&bytes) {
                                    if token == rendezvous.token {
                                        rendezvous.deliver(flow, Arrival::Tcp(stream));
                                    }
                                }
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })?;
        Ok(())
    }

    /// Answers UDP hellos from the peer: a cookie to a hello without one, and the flow's
    /// own socket, connected to the sender, to one that carries its cookie back.
    fn serve_udp(&self, socket: UdpSocket, cookies: &AddressCookies) {
        // Answered flows, so that a repeated hello (the answer was lost) gets the same
        // socket's answer again instead of a second connection; forgotten after a while.
        let mut answered: HashMap<u32, (SocketAddr, UdpSocket, Instant)> = HashMap::new();
        let mut buf = [0u8; 64];
        while !self.stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                answered.retain(|_, (_, _, at)| at.elapsed() < HELLO_MEMORY);
                continue;
            };
            if !self.is_peer(&from) {
                continue;
            }
            let flow = match cookies.classify(&self.token, from, &buf[..n]) {
                RendezvousHello::Unproven { flow } => {
                    let _ = socket.send_to(&cookies.challenge(from, flow), from);
                    continue;
                }
                RendezvousHello::Proven { flow } => flow,
                RendezvousHello::Foreign => continue,
            };
            let hello = &buf[..preface::DATA_PREFACE_LEN];
            if let Some((to, served, _)) = answered.get(&flow) {
                // One socket per flow: a second address for it is refused.
                if *to == from {
                    let _ = served.send(hello);
                }
                continue;
            }
            let opened = UdpSocket::bind(SocketAddr::new(
                socket.local_addr().map_or(from.ip(), |a| a.ip()),
                0,
            ))
            .and_then(|s| {
                s.connect(from)?;
                s.send(hello)?;
                Ok(s)
            });
            if let Ok(served) = opened {
                if let Ok(copy) = served.try_clone() {
                    answered.insert(flow, (from, copy, Instant::now()));
                }
                self.deliver(flow, Arrival::Udp(served));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendezvous() -> Arc<Rendezvous> {
        let token = Token::from_hex(&"ab".repeat(16)).expect("token");
        Rendezvous::open(
            "127.0.0.1".parse().unwrap(),
            token,
            "127.0.0.1".parse().unwrap(),
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap()
    }

    /// A UDP socket stands for any connection; its port tells which one a thread got.
    fn arrival() -> (Arrival, u16) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        (Arrival::Udp(socket), port)
    }

    fn port_of(conn: Conn) -> u16 {
        match conn {
            Conn::Udp(socket) => socket.local_addr().unwrap().port(),
            Conn::Tcp(stream) => stream.local_addr().unwrap().port(),
            Conn::Tls(stream) => stream.socket().local_addr().unwrap().port(),
        }
    }

    #[test]
    fn every_waiting_thread_gets_the_connection_for_its_own_flow() {
        let rendezvous = rendezvous();
        // Half the connections arrive before their threads ask, half after.
        let early: Vec<(u32, u16)> = (0..50)
            .map(|flow| {
                let (conn, port) = arrival();
                rendezvous.deliver(flow, conn);
                (flow, port)
            })
            .collect();
        let waiters: Vec<_> = (0..100u32)
            .map(|flow| {
                let rendezvous = rendezvous.clone();
                std::thread::spawn(move || {
                    let conn = rendezvous.take(flow, &mut || false).unwrap();
                    (flow, port_of(conn))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let mut expected: HashMap<u32, u16> = early.into_iter().collect();
        for flow in (50..100).rev() {
            let (conn, port) = arrival();
            rendezvous.deliver(flow, conn);
            expected.insert(flow, port);
        }
        for waiter in waiters {
            let (flow, port) = waiter.join().unwrap();
            assert_eq!(port, expected[&flow], "flow {flow}");
        }
        assert!(rendezvous.slots.lock().unwrap().is_empty());
    }

    #[test]
    fn a_connection_that_comes_after_its_thread_gave_up_is_kept() {
        let rendezvous = rendezvous();
        let error = match rendezvous.take(7, &mut || true) {
            Err(e) => e,
            Ok(_) => panic!("nothing was delivered"),
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(rendezvous.slots.lock().unwrap().is_empty());
        let (conn, port) = arrival();
        rendezvous.deliver(7, conn);
        assert_eq!(port_of(rendezvous.take(7, &mut || true).unwrap()), port);
    }
}
