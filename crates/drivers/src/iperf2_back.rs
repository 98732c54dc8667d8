//! `linerate iperf2 -c -d` and `-r`: the test back. The client's header names a port
//! (`-L`, iperf 2's 5001 by default) and asks the server to connect to it, at once (`-d`,
//! beside the test out) or once the test out has ended (`-r`), with as many connections
//! as the test's, and to send on them for the test's time or count. This side listens
//! before the header goes, takes connections from the server's address alone (any other
//! is closed and counted), reads the header each begins with, and receives on them with
//! the data plane as a `-R` test does: a run of its own, the server's sending figures
//! being its own to keep.

use crate::iperf2_client::{Iperf2Ask, Iperf2ClientError, Iperf2Outcome};
use linerate_engine::flow::FlowSocket;
use linerate_proto::iperf2;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// iperf 2's listening port for a test back where `-L` does not say.
pub const DEFAULT_LISTEN_PORT: u16 = 5001;
/// How long each connection back may take to say its header once it is open.
const HEADER_WAIT: Duration = Duration::from_secs(3);
/// How long the connections back may take to arrive: past the test out's end for `-r`
/// (the server connects once its side of the test has ended), from the start for `-d`.
const ARRIVAL_WAIT: Duration = Duration::from_secs(5);

/// The test back a client asks (`-d` or `-r`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Back {
    /// `-d`: at once, beside the test out; `-r`: once it has ended.
    pub dual: bool,
    /// Where this side listens (`-L`).
    pub port: u16,
}

/// The listener the server's connections back arrive at, open before the header goes.
pub struct BackListener {
    listener: TcpListener,
    server: IpAddr,
    count: u32,
    /// Connections from any other address, closed unread.
    pub refused: u32,
}

impl BackListener {
    /// Listens on `back.port` of every address of the server's family, for `count`
    /// connections from `server`.
    pub fn bind(
        back: Back,
        server: SocketAddr,
        count: u32,
    ) -> Result<BackListener, Iperf2ClientError> {
        let any: IpAddr = if server.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        let listener = TcpListener::bind((any, back.port)).map_err(|e| {
            Iperf2ClientError::Usage(format!(
                "-L {}: cannot listen there for the test back: {e}",
                back.port
            ))
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| Iperf2ClientError::Io {
                context: "the listener for the test back",
                source,
            })?;
        Ok(BackListener {
            listener,
            server: canonical(server.ip()),
            count,
            refused: 0,
        })
    }

    /// Takes the server's connections (until `until`), reads each one's header, and
    /// receives the test back on them as a `-R` test (`ask` as the test out asked it);
    /// its outcome, or why it had none.
    pub fn receive(
        mut self,
        ask: &Iperf2Ask,
        until: Instant,
        cancel: &AtomicBool,
    ) -> Result<Iperf2Outcome, Iperf2ClientError> {
        let mut streams = Vec::with_capacity(self.count as usize);
        while streams.len() < self.count as usize {
            if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(Iperf2ClientError::Interrupted);
            }
            match self.listener.accept() {
                Ok((stream, peer)) if canonical(peer.ip()) == self.server => {
                    streams.push((stream, peer));
                }
                // Not the server: closed unread.
                Ok(_) => self.refused += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= until {
                        return Err(Iperf2ClientError::Connect(format!(
                            "the server connected back {} of {} times by the deadline (is -L {} reachable from it?)",
                            streams.len(),
                            self.count,
                            self.listener.local_addr().map_or(0, |a| a.port())
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(Iperf2ClientError::Io {
                        context: "accepting the test back",
                        source,
                    })
                }
            }
        }
        let mut sockets = Vec::with_capacity(streams.len());
        let mut connected = Vec::with_capacity(streams.len());
        for (mut stream, peer) in streams {
            read_header(&mut stream).map_err(|source| Iperf2ClientError::Io {
                context: "reading the test back's header",
                source,
            })?;
            connected.push((stream.local_addr().unwrap_or(peer), peer));
            sockets.push(FlowSocket::Tcp(stream));
        }
        let back = Iperf2Ask {
            reverse: true,
            back: None,
            ..ask.clone()
        };
        crate::iperf2_client::received_on(&back, sockets, connected, cancel)
    }

    /// The latest the connections back may arrive: for `-d` from now, over the test's time;
    /// for `-r` from the end of the test out.
    pub fn deadline(&self, ask: &Iperf2Ask) -> Instant {
        let time = match ask.amount {
            iperf2::Amount::Seconds(s) => Duration::from_secs_f64(s),
            _ => Duration::ZERO,
        };
        Instant::now() + ask.connect_timeout.max(ARRIVAL_WAIT) + time / 2
    }
}

/// The header a connection back may begin with: where the first bytes are iperf 2's base
/// header, it and (where its flags say so) the extended one are read and set aside; where
/// they are payload (2.1.8's server connects back sending payload alone), they are left
/// for the data plane to count.
fn read_header(stream: &mut TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(HEADER_WAIT))?;
    let mut base = [0u8; iperf2::BASE_LEN];
    let until = Instant::now() + HEADER_WAIT;
    // A test back of fewer bytes than a header is payload alone.
    let mut seen = stream.peek(&mut base)?;
    while seen < base.len() && seen > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
        seen = stream.peek(&mut base)?;
    }
    let whole = match seen {
        n if n == base.len() => iperf2::header_len(&base).unwrap_or(0),
        _ => 0,
    };
    if whole > 0 {
        let mut header = vec![0u8; whole];
        stream.read_exact(&mut header)?;
    }
    stream.set_read_timeout(None)
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}
