//! Where the connections a profile thread accepts arrive: each is addressed to one thread
//! and one of its connection operations (its flow number, [`flow`]), presented with the
//! run's token, and waits here until that thread takes it.
//!
//! TCP connections come from the server's data-connection registry (on an agent) or from
//! a listener of the group's host; UDP "connections" start with a hello datagram on the
//! rendezvous UDP socket, answered from a new socket connected to the sender.

use super::conn::Conn;
use super::SLICE;
use linerate_proto::preface::{self, Preface};
use linerate_proto::Token;
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A thread's `ordinal`-th connection operation towards one peer, as one number.
pub(crate) fn flow(thread: u32, ordinal: u32) -> u32 {
    (thread << 12) | (ordinal & 0xfff)
}

pub(crate) enum Arrival {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

pub(crate) struct Rendezvous {
    pub token: Token,
    pub udp_port: u16,
    waiting: Mutex<HashMap<u32, Arrival>>,
    arrived: Condvar,
    stop: Arc<AtomicBool>,
}

impl Rendezvous {
    /// A rendezvous with its UDP socket bound on `ip`; `stop` ends its helper threads.
    pub fn open(
        ip: std::net::IpAddr,
        token: Token,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Arc<Rendezvous>> {
        let udp = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        udp.set_read_timeout(Some(SLICE))?;
        let rendezvous = Arc::new(Rendezvous {
            token,
            udp_port: udp.local_addr()?.port(),
            waiting: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
            stop,
        });
        let serving = rendezvous.clone();
        std::thread::Builder::new()
            .name("linerate-udp-hello".into())
            .spawn(move || serving.serve_udp(udp))?;
        Ok(rendezvous)
    }

    pub fn deliver(&self, flow: u32, arrival: Arrival) {
        self.waiting
            .lock()
            .expect("rendezvous lock")
            .insert(flow, arrival);
        self.arrived.notify_all();
    }

    /// Takes the connection for `flow`, waiting until `give_up` says to stop.
    pub fn take(&self, flow: u32, give_up: &mut dyn FnMut() -> bool) -> io::Result<Conn> {
        let mut waiting = self.waiting.lock().expect("rendezvous lock");
        loop {
            if let Some(arrival) = waiting.remove(&flow) {
                drop(waiting);
                return match arrival {
                    Arrival::Tcp(stream) => Conn::tcp(stream),
                    Arrival::Udp(socket) => Conn::udp(socket),
                };
            }
            if give_up() || self.stop.load(Ordering::Relaxed) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer's connection did not arrive",
                ));
            }
            waiting = self
                .arrived
                .wait_timeout(waiting, SLICE)
                .expect("rendezvous lock")
                .0;
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

    fn serve_udp(&self, socket: UdpSocket) {
        // Answered hellos, so that a repeated hello (the answer was lost) gets the same
        // socket's answer again instead of a second connection.
        let mut answered: HashMap<(SocketAddr, u32), UdpSocket> = HashMap::new();
        let mut buf = [0u8; 64];
        while !self.stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let Preface::Data { token, flow } = preface::classify(&buf[..n]) else {
                continue;
            };
            if token != self.token || n != preface::DATA_PREFACE_LEN {
                continue;
            }
            if let Some(served) = answered.get(&(from, flow)) {
                let _ = served.send(&buf[..n]);
                continue;
            }
            let opened = UdpSocket::bind(SocketAddr::new(
                socket.local_addr().map_or(from.ip(), |a| a.ip()),
                0,
            ))
            .and_then(|s| {
                s.connect(from)?;
                s.send(&buf[..n])?;
                Ok(s)
            });
            if let Ok(served) = opened {
                if let Ok(copy) = served.try_clone() {
                    answered.insert((from, flow), copy);
                }
                self.deliver(flow, Arrival::Udp(served));
            }
        }
    }
}
