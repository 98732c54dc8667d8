//! A TLS connection over any byte stream, for the data plane: application bytes in and
//! out, records through the socket, and the time spent encrypting and decrypting.
//!
//! The session ([`crate::session`]) holds no buffer: records are read into, and sealed
//! into, buffers of the calling thread that its connections take turns with. What a
//! connection keeps between calls is only what the socket would not take or give whole:
//!
//! - **Fast** (the default): a read takes all the socket has, and a record cut short
//!   waits in the stream until the rest comes; a write seals up to its limit, and the
//!   records the socket did not take wait in the stream's queue.
//! - **Frugal** ([`TlsStream::set_frugal`], for thousands of connections): a write seals
//!   no more than the socket's send buffer has room for, so little is left over, and
//!   what is left (and a record cut short on reading) is kept in memory sized to it and
//!   given back once sent (or whole).
//!
//! Reads take whole records only in neither mode: a record cut short left in the kernel
//! (peeked, then the whole records taken with MSG_TRUNC) kept the socket buffer's
//! segment, whose size the receive window counts, and flows stalled with a part queued
//! on one side and megabytes on the other.
//!
//! The crypto's time is the thread's CPU time in the calls that seal and open records,
//! sampled one call in [`SAMPLE_EVERY`] and charged by the byte (`crate::cost::PerByteCost`).

use crate::handshake::{self, Handshaken};
use crate::session::{Buffer, Session, MAX_RECORD};
use crate::{verify, Cipher, TlsError};
use rustls::pki_types::ServerName;
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

/// What a data connection's TLS is: the suite, how long the handshake took, and whether
/// the kernel holds the record layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TlsFacts {
    pub cipher: Cipher,
    pub handshake: Duration,
    pub ktls: bool,
}

/// One call in this many that seal or open records is timed (`crate::cost`).
pub const SAMPLE_EVERY: u64 = 8;

/// The most ciphertext one read takes from the socket.
const MAX_READ: usize = 1 << 20;

/// Application bytes one write seals unless [`TlsStream::set_write_limit`] says otherwise.
const DEFAULT_WRITE_LIMIT: usize = 128 * 1024;

/// What a frugal write seals when the socket's buffer has less room than this: the
/// kernel's EAGAIN, which a later readiness edge needs, comes only from a write it cut
/// short, and what it cuts off waits in the stream.
const SMALLEST_SEAL: usize = 4 * 1024;

/// A thread's buffers for the records its connections read and seal.
#[derive(Default)]
struct Scratch {
    incoming: Buffer,
    outgoing: Buffer,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A TLS session over `S` after its handshake.
pub struct TlsStream<S> {
    session: Session,
    socket: S,
    /// Ciphertext taken from the socket that is not a whole record yet.
    carry: Vec<u8>,
    /// Plaintext opened but not yet returned (a caller's buffer smaller than a record),
    /// from `held_from`.
    held: Vec<u8>,
    held_from: usize,
    /// Sealed records the socket has not taken yet.
    unsent: Buffer,
    /// The peer's close_notify, or the socket's end, has come.
    ended: bool,
    /// Why the records that followed the last bytes returned could not be opened: the
    /// next read says so.
    broken: Option<String>,
    /// Writes seal no more than the socket's buffer has room for, and what waits is kept
    /// in memory sized to it.
    frugal: bool,
    write_limit: usize,
    /// The CPU time of the calls that sealed records and of those that opened them, each
    /// estimated by the byte from its own calls: an exchange of requests and answers
    /// alternates the two, and one call in eight of both together would time only seals.
    sealing: crate::cost::PerByteCost,
    opening: crate::cost::PerByteCost,
    facts: TlsFacts,
    /// What the user should know of how this connection runs (kTLS refused).
    note: Option<String>,
}

impl<S> std::fmt::Debug for TlsStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("facts", &self.facts)
            .finish()
    }
}

fn is_idle(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::TimedOut
    )
}

/// Sends with MSG_NOSIGNAL, so a peer that has gone gives EPIPE rather than a SIGPIPE
/// that ends the process (the binary keeps SIGPIPE's default so that `| head` ends it
/// quietly).
fn send(socket: &impl AsFd, data: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(socket).send_with_flags(data, libc::MSG_NOSIGNAL)
}

/// Bytes the socket's send buffer has room for (SO_MEMINFO: its size less what is
/// queued), or `None` where the kernel does not say.
fn send_room(socket: &impl AsRawFd) -> Option<usize> {
    let mut info = [0u32; 9];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` and `len` are live and sized for the kernel's SK_MEMINFO_VARS.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let size = info[libc::SK_MEMINFO_SNDBUF as usize];
    let queued = info[libc::SK_MEMINFO_WMEM_QUEUED as usize];
    Some(size.saturating_sub(queued) as usize)
}

/// What a frugal write seals given the send buffer's room: an eighth less (the kernel
/// counts its own overhead per segment against the same room), never under
/// [`SMALLEST_SEAL`].
fn frugal_seal(room: usize) -> usize {
    (room - room / 8).max(SMALLEST_SEAL)
}

impl<S: Read + Write + AsFd + AsRawFd> TlsStream<S> {
    pub fn facts(&self) -> TlsFacts {
        self.facts
    }

    /// Time spent sealing and opening records so far.
    pub fn crypto_time(&self) -> Duration {
        self.sealing.estimate() + self.opening.estimate()
    }

    pub fn set_note(&mut self, note: String) {
        self.note = Some(note);
    }

    pub fn take_note(&mut self) -> Option<String> {
        self.note.take()
    }

    pub fn socket(&self) -> &S {
        &self.socket
    }

    pub fn socket_mut(&mut self) -> &mut S {
        &mut self.socket
    }

    /// The same session over another handle to the same socket (a std stream made a mio
    /// one).
    pub fn map_socket<T>(self, f: impl FnOnce(S) -> T) -> TlsStream<T> {
        TlsStream {
            session: self.session,
            socket: f(self.socket),
            carry: self.carry,
            held: self.held,
            held_from: self.held_from,
            unsent: self.unsent,
            ended: self.ended,
            broken: self.broken,
            frugal: self.frugal,
            write_limit: self.write_limit,
            sealing: self.sealing,
            opening: self.opening,
            facts: self.facts,
            note: self.note,
        }
    }

    /// Makes the stream hold as little as it can between calls, for a connection among
    /// thousands (see the module's notes).
    pub fn set_frugal(&mut self, frugal: bool) {
        self.frugal = frugal;
    }

    /// Reads application bytes. `Ok(0)` is the end of the stream (the peer closed, with or
    /// without a close_notify: a measurement's end, not an attack on its integrity).
    /// `WouldBlock` and `TimedOut` come only from the socket, so a readiness edge follows.
    pub fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.held_from < self.held.len() {
                let n = (self.held.len() - self.held_from).min(out.len());
                out[..n].copy_from_slice(&self.held[self.held_from..self.held_from + n]);
                self.held_from += n;
                if self.held_from == self.held.len() {
                    self.held = Vec::new();
                    self.held_from = 0;
                }
                return Ok(n);
            }
            if let Some(why) = &self.broken {
                return Err(io::Error::new(io::ErrorKind::InvalidData, why.clone()));
            }
            if self.ended {
                return Ok(0);
            }
            let read = SCRATCH.with(|scratch| {
                let incoming = &mut scratch.borrow_mut().incoming;
                self.read_records(incoming, out)
            })?;
            if read > 0 {
                return Ok(read);
            }
        }
    }

    /// One read from the socket, and the whole records in it (after any carried part)
    /// opened into `out`, the rest of their plaintext held. Returns the bytes put in
    /// `out`.
    fn read_records(&mut self, incoming: &mut Buffer, out: &mut [u8]) -> io::Result<usize> {
        incoming.clear();
        incoming.extend(&self.carry);
        let want = out
            .len()
            .saturating_sub(self.carry.len())
            .clamp(MAX_RECORD, MAX_READ);
        let room = &mut incoming.spare(want)[..want];
        let got = self.socket.read(room)?;
        incoming.commit(got);
        if got == 0 {
            // The socket's end (a record cut short by it is dropped).
            self.ended = true;
            return Ok(0);
        }
        let mut delivered = 0;
        let held = &mut self.held;
        let mut deliver = |plaintext: &[u8]| {
            let n = plaintext.len().min(out.len() - delivered);
            out[delivered..delivered + n].copy_from_slice(&plaintext[..n]);
            delivered += n;
            held.extend_from_slice(&plaintext[n..]);
        };
        let session = &mut self.session;
        let unsent = &mut self.unsent;
        let ciphertext = incoming.filled().len();
        let opened = self.opening.time(ciphertext, SAMPLE_EVERY, || {
            session.open(incoming.filled_mut(), unsent, &mut deliver)
        });
        let opened = match opened {
            Ok(opened) => opened,
            Err(e) => {
                // The alert that says why goes out if it can; the plaintext opened before
                // the bad record is returned first.
                let _ = self.send_records();
                self.broken = Some(verify::describe(&e));
                self.carry = Vec::new();
                return Ok(delivered);
            }
        };
        self.ended |= opened.closed;
        let rest = &incoming.filled()[opened.used..];
        if self.frugal {
            // Memory sized to the part, none once there is none.
            self.carry = rest.to_vec();
        } else {
            self.carry.clear();
            self.carry.extend_from_slice(rest);
        }
        if !self.unsent.is_empty() {
            // A key update's answer.
            let _ = self.send_records();
        }
        Ok(delivered)
    }

    /// Writes application bytes: seals up to the write limit (frugal: up to the socket's
    /// room) into records and sends what the socket takes. Records the socket did not take
    /// go first next time; `WouldBlock`/`TimedOut` means none of `data` was taken.
    pub fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        self.send_records()?;
        let mut take = data.len().min(self.write_limit);
        if self.frugal {
            if let Some(room) = send_room(&self.socket) {
                take = take.min(frugal_seal(room));
            }
        }
        let plaintext = &data[..take];
        if !self.frugal {
            // Sealed straight into the stream's own queue: what the socket does not take
            // waits there without a copy.
            self.seal(plaintext, None)?;
            return match self.send_records() {
                Err(e) if !is_idle(&e) => Err(e),
                _ => Ok(take),
            };
        }
        SCRATCH.with(|scratch| {
            let outgoing = &mut scratch.borrow_mut().outgoing;
            outgoing.clear();
            self.seal(plaintext, Some(outgoing))?;
            let sent = match send(&self.socket, outgoing.filled()) {
                Ok(n) => n,
                Err(e) if is_idle(&e) => 0,
                Err(e) => return Err(e),
            };
            self.unsent.extend(&outgoing.filled()[sent..]);
            Ok(take)
        })
    }

    /// Seals `plaintext` into `into`, or into the stream's queue of unsent records.
    fn seal(&mut self, plaintext: &[u8], into: Option<&mut Buffer>) -> io::Result<()> {
        let session = &mut self.session;
        let unopened = &mut self.carry;
        let out = into.unwrap_or(&mut self.unsent);
        let sealed = self.sealing.time(plaintext.len(), SAMPLE_EVERY, || {
            session.seal(plaintext, unopened, out)
        });
        sealed.map_err(io::Error::other)
    }

    /// Sends sealed records until none is left or the socket is full.
    pub fn send_records(&mut self) -> io::Result<()> {
        while !self.unsent.is_empty() {
            match send(&self.socket, self.unsent.filled())? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => self.unsent.consume(n),
            }
        }
        if self.frugal {
            self.unsent.release();
        }
        Ok(())
    }

    /// Sealed records not yet handed to the socket.
    pub fn has_unsent(&self) -> bool {
        !self.unsent.is_empty()
    }

    /// Caps the application bytes one [`TlsStream::write`] seals.
    pub fn set_write_limit(&mut self, limit: usize) {
        self.write_limit = limit.max(16 * 1024);
    }

    /// The session, the socket, and how many bytes the stream holds that the session's
    /// new owner would have to take over (records read but not opened, plaintext opened
    /// but not read).
    pub(crate) fn into_parts(self) -> (Session, S, usize) {
        let pending = self.carry.len() + (self.held.len() - self.held_from);
        (self.session, self.socket, pending)
    }
}

/// The session as a byte stream: `flush` sends the sealed records still waiting.
impl<S: Read + Write + AsFd + AsRawFd> Read for TlsStream<S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        TlsStream::read(self, out)
    }
}

impl<S: Read + Write + AsFd + AsRawFd> Write for TlsStream<S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        TlsStream::write(self, data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_records()
    }
}

fn established(
    session: Session,
    socket: TcpStream,
    done: Handshaken,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let cipher = session
        .common()
        .negotiated_cipher_suite()
        .and_then(Cipher::of_suite)
        .ok_or_else(|| TlsError::Handshake("no cipher suite was negotiated".into()))?;
    Ok(TlsStream {
        session,
        socket,
        carry: done.pending,
        held: done.early,
        held_from: 0,
        unsent: Buffer::default(),
        ended: false,
        broken: None,
        frugal: false,
        write_limit: DEFAULT_WRITE_LIMIT,
        sealing: crate::cost::PerByteCost::default(),
        opening: crate::cost::PerByteCost::default(),
        note: None,
        facts: TlsFacts {
            cipher,
            handshake: done.took,
            ktls: false,
        },
    })
}

/// The client's handshake on a connected socket. `name` is the server as the user named
/// it (checked only under [`verify::Trust::Roots`]).
pub fn connect(
    mut socket: TcpStream,
    config: Arc<rustls::ClientConfig>,
    name: &str,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let server = ServerName::try_from(name.to_string())
        .map_err(|_| TlsError::Handshake(format!("'{name}' is not a host name or address")))?;
    let client = rustls::client::UnbufferedClientConnection::new(config, server)
        .map_err(|e| TlsError::Handshake(verify::describe(&e)))?;
    let mut session = Session::Client(client);
    let done = handshake::run(&mut session, &mut socket, timeout)?;
    established(session, socket, done)
}

/// The server's handshake on an accepted socket.
pub fn accept(
    mut socket: TcpStream,
    config: Arc<rustls::ServerConfig>,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let server = rustls::server::UnbufferedServerConnection::new(config)
        .map_err(|e| TlsError::Handshake(verify::describe(&e)))?;
    let mut session = Session::Server(server);
    let done = handshake::run(&mut session, &mut socket, timeout)?;
    established(session, socket, done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frugal_write_seals_less_than_the_room_and_never_under_the_floor() {
        assert_eq!(frugal_seal(0), SMALLEST_SEAL);
        assert_eq!(frugal_seal(1000), SMALLEST_SEAL);
        assert_eq!(frugal_seal(800_000), 700_000);
        assert!(frugal_seal(64 * 1024) < 64 * 1024);
    }
}
