//! Blocking framed JSON over an agent connection, with bounded waits.

use crate::server_state::random_nonce;
use linerate_proto::agent::{agent_preface, AgentReply, AGENT_VERSION};
use linerate_proto::agent_session::DialerHandshake;
use linerate_proto::auth::{encode_with, open_with, ControlSeal, Key};
use linerate_proto::frame::FrameDecoder;
use linerate_report::HostFacts;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest agent frame once the handshake is through: results of thousands of threads.
const MAX_FRAME: usize = 64 << 20;
/// The largest frame before it (a welcome, an error): whatever answers an agent's address
/// says it within this bound, as a server takes a client's frames (docs/security.md).
const MAX_HANDSHAKE_FRAME: usize = linerate_proto::frame::MAX_CLIENT_FRAME;

pub(crate) struct Link {
    pub stream: TcpStream,
    decoder: FrameDecoder,
    /// Every frame after a keyed handshake is sealed; shared with the link's writers,
    /// which must seal and write in one step for the frames to go in their order.
    seal: Arc<Mutex<Option<ControlSeal>>>,
}

/// Sends on a link from another thread: a clone of its stream and its seal.
pub(crate) struct LinkWriter {
    stream: TcpStream,
    seal: Arc<Mutex<Option<ControlSeal>>>,
}

impl LinkWriter {
    pub fn send<T: Serialize>(&self, message: &T) -> io::Result<()> {
        let mut seal = self.seal.lock().expect("seal lock");
        (&self.stream).write_all(&encode_with(&mut seal, message))
    }
}

impl Link {
    pub fn new(stream: TcpStream) -> io::Result<Link> {
        stream.set_nodelay(true)?;
        Ok(Link {
            stream,
            decoder: FrameDecoder::new(MAX_HANDSHAKE_FRAME),
            seal: Arc::new(Mutex::new(None)),
        })
    }

    pub fn writer(&self) -> io::Result<LinkWriter> {
        Ok(LinkWriter {
            stream: self.stream.try_clone()?,
            seal: self.seal.clone(),
        })
    }

    /// Dials an agent, says hello and, holding `key`, proves it and checks the agent's
    /// proof (linerate-proto's `auth`). Returns the link and the agent's host facts.
    pub fn dial(
        addr: SocketAddr,
        timeout: Duration,
        key: Option<&Key>,
    ) -> io::Result<(Link, HostFacts)> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(&agent_preface(AGENT_VERSION))?;
        let mut link = Link::new(stream)?;
        let keyed = match key {
            Some(key) => Some((key.clone(), random_nonce()?)),
            None => None,
        };
        let mut handshake = DialerHandshake::new(keyed);
        link.send(&handshake.hello())?;
        let (host, challenge) = match link.recv::<AgentReply>(timeout)? {
            Some(AgentReply::Welcome { host, auth, .. }) => (host, auth),
            Some(AgentReply::Error { reason, .. }) => {
                return Err(io::Error::other(reason.into_string()))
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "did not answer as a linerate agent",
                ))
            }
        };
        let proof = handshake
            .handle_welcome(challenge.as_ref())
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
        let mut host = host;
        if let Some((proof, seal)) = proof {
            link.send(&proof)?;
            *link.seal.lock().expect("seal lock") = Some(seal);
            // A keyed agent's facts come sealed, after the proofs.
            host = match link.recv::<AgentReply>(timeout)? {
                Some(AgentReply::Welcome { host, .. }) => host,
                Some(AgentReply::Error { reason, .. }) => {
                    return Err(io::Error::other(reason.into_string()))
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the agent did not confirm the key",
                    ))
                }
            };
        }
        link.decoder.set_limit(MAX_FRAME);
        Ok((link, host))
    }

    pub fn send<T: Serialize>(&mut self, message: &T) -> io::Result<()> {
        let mut seal = self.seal.lock().expect("seal lock");
        self.stream.write_all(&encode_with(&mut seal, message))
    }

    /// The next message, waiting at most `wait`; `Ok(None)` when none came in time.
    pub fn recv<T: DeserializeOwned>(&mut self, wait: Duration) -> io::Result<Option<T>> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(body) = self
                .decoder
                .next_frame()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                let body = open_with(&mut self.seal.lock().expect("seal lock"), body)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                return serde_json::from_slice(&body).map(Some).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("bad message: {e}"))
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            let mut buf = [0u8; 16 * 1024];
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the connection closed",
                    ))
                }
                Ok(n) => self.decoder.push(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Links to agents kept open between jobs, so that a job that comes back to the same
/// agent again and again (a mesh's STAMP windows, back to back, each pair all the time)
/// does not pay each time for a connection, a thread on the agent and a key exchange.
/// A link is taken by one job at a time and given back after a job that ended well.
#[derive(Default)]
pub struct LinkPool {
    idle: Mutex<std::collections::HashMap<SocketAddr, Vec<(Link, Instant)>>>,
}

impl LinkPool {
    /// How long a link may wait unused and still be taken: well inside an agent's idle
    /// deadline (120 s by default), after which the agent closes it.
    const FRESH: Duration = Duration::from_secs(30);
    /// Links kept per agent: as many as jobs run to it at once, in a mesh a handful.
    const PER_AGENT: usize = 8;

    /// An open link to `addr` given back less than [`Self::FRESH`] ago, if there is one.
    pub(crate) fn take(&self, addr: SocketAddr) -> Option<Link> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let links = idle.get_mut(&addr)?;
        links.retain(|(_, since)| since.elapsed() < Self::FRESH);
        let link = links.pop().map(|(link, _)| link);
        if links.is_empty() {
            idle.remove(&addr);
        }
        link
    }

    /// Keeps `link` to `addr` for the next job; beyond [`Self::PER_AGENT`] it is closed.
    pub(crate) fn give_back(&self, addr: SocketAddr, link: Link) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let links = idle.entry(addr).or_default();
        links.retain(|(_, since)| since.elapsed() < Self::FRESH);
        if links.len() < Self::PER_AGENT {
            links.push((link, Instant::now()));
        }
    }
}

impl std::fmt::Debug for LinkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        write!(f, "LinkPool({} agents)", idle.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A link given back is taken by the next job to the same agent, once; another
    /// agent's job finds none; an agent keeps at most PER_AGENT idle links.
    #[test]
    fn the_pool_gives_a_link_back_to_the_next_job_to_its_agent() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let link = || Link::new(TcpStream::connect(addr).unwrap()).unwrap();
        let pool = LinkPool::default();
        assert!(pool.take(addr).is_none());
        let first = link();
        let port = first.stream.local_addr().unwrap().port();
        pool.give_back(addr, first);
        assert!(pool.take(other).is_none());
        let taken = pool.take(addr).expect("the link given back");
        assert_eq!(taken.stream.local_addr().unwrap().port(), port);
        assert!(pool.take(addr).is_none(), "taken once");
        for _ in 0..LinkPool::PER_AGENT + 3 {
            pool.give_back(addr, link());
        }
        let mut kept = 0;
        while pool.take(addr).is_some() {
            kept += 1;
        }
        assert_eq!(kept, LinkPool::PER_AGENT);
    }

    /// A squatter on an agent's address: answers the hello with `answer`'s bytes.
    fn squatter(answer: Vec<u8>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            // The preface and the hello, which may come apart; then the answer, and the
            // connection held open until the dialer closes it (closed with the hello
            // unread, it would be reset and the answer lost).
            stream
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut hello = [0u8; 4096];
            while stream.read(&mut hello).is_ok_and(|n| n > 0) {}
            let _ = stream.write_all(&answer);
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            while stream.read(&mut hello).is_ok_and(|n| n > 0) {}
        });
        addr
    }

    #[test]
    fn a_squatters_reason_reaches_the_dialer_cut_and_escaped() {
        let forged = "\u{1b}[2J\r\nFAKE LOG LINE: ok\r\n".to_string() + &"x".repeat(4096);
        let reason = forged.repeat(200);
        let body = serde_json::json!({"type": "error", "reason": reason}).to_string();
        let addr = squatter(linerate_proto::frame::encode(body.as_bytes()));
        let error = Link::dial(addr, Duration::from_secs(5), None)
            .err()
            .expect("an error frame is an error")
            .to_string();
        assert!(!error.chars().any(char::is_control), "{error:?}");
        assert!(error.contains("\\u{1b}[2J\\r\\nFAKE LOG LINE"), "{error}");
        assert!(error.chars().count() <= 2003, "{}", error.chars().count());
    }

    #[test]
    fn a_squatters_frame_over_a_mebibyte_is_refused_at_its_length() {
        // Only the length: the dialer must refuse before the body would come.
        let addr = squatter(60_000_000u32.to_be_bytes().to_vec());
        let error = Link::dial(addr, Duration::from_secs(5), None)
            .err()
            .expect("refused")
            .to_string();
        assert!(error.contains("over the limit of 1048576 bytes"), "{error}");
    }
}
