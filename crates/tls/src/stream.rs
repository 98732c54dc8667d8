//! A TLS connection over any byte stream, for the data plane: application bytes in and
//! out, records through the socket, and the time spent encrypting and decrypting.
//!
//! The crypto's time is the thread's CPU time in the two calls that do it (rustls'
//! `writer().write`, which seals records, and `process_new_packets`, which opens them),
//! sampled one call in [`SAMPLE_EVERY`] (`crate::cost`).

use crate::{verify, Cipher, TlsError};
use rustls::pki_types::ServerName;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a data connection's TLS is: the suite, how long the handshake took, and whether
/// the kernel holds the record layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TlsFacts {
    pub cipher: Cipher,
    pub handshake: Duration,
    pub ktls: bool,
}

/// Ciphertext read from the socket per call, when the caller does not say: one full
/// record (16 KiB, its header and tag), so a connection among thousands holds little;
/// rustls takes 4 KiB at a time from this buffer. A lone fast flow is given more.
/// One call in this many that seal or open records is timed (`crate::cost`).
pub const SAMPLE_EVERY: u64 = 8;

pub const DEFAULT_INBOX: usize = 16 * 1024 + 256 + 5;

/// A TLS session over `S` after its handshake.
pub struct TlsStream<S> {
    conn: rustls::Connection,
    socket: S,
    inbox: Vec<u8>,
    start: usize,
    end: usize,
    crypto: Duration,
    /// Calls that sealed or opened records so far (which of them to time).
    crypto_calls: u64,
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

/// The socket as rustls reads and writes it: sends carry MSG_NOSIGNAL, so a peer that has
/// gone gives EPIPE rather than a SIGPIPE that ends the process (rustls writes records
/// with `write_vectored`, which for a std or mio stream is `writev`, which has no flag;
/// the binary keeps SIGPIPE's default so that `| head` ends it quietly).
struct NoSignal<'a, S>(&'a mut S);

impl<S: Read> Read for NoSignal<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<S: AsFd> Write for NoSignal<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        socket2::SockRef::from(&*self.0).send_with_flags(buf, libc::MSG_NOSIGNAL)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        socket2::SockRef::from(&*self.0).send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: Read + Write + AsFd> TlsStream<S> {
    pub fn facts(&self) -> TlsFacts {
        self.facts
    }

    /// Time spent sealing and opening records so far.
    pub fn crypto_time(&self) -> Duration {
        self.crypto
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
    /// one); `inbox` is the ciphertext buffer's size.
    pub fn map_socket<T>(self, inbox: usize, f: impl FnOnce(S) -> T) -> TlsStream<T> {
        let mut buffer = vec![0u8; inbox.max(self.end - self.start).max(4096)];
        let pending = self.end - self.start;
        buffer[..pending].copy_from_slice(&self.inbox[self.start..self.end]);
        TlsStream {
            conn: self.conn,
            socket: f(self.socket),
            inbox: buffer,
            start: 0,
            end: pending,
            crypto: self.crypto,
            crypto_calls: self.crypto_calls,
            facts: self.facts,
            note: self.note,
        }
    }

    /// Reads application bytes. `Ok(0)` is the end of the stream (the peer closed, with or
    /// without a close_notify: a measurement's end, not an attack on its integrity).
    /// `WouldBlock` and `TimedOut` come only from the socket, so a readiness edge follows.
    pub fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if self.start == self.end {
                let n = self.socket.read(&mut self.inbox)?;
                self.start = 0;
                self.end = n;
                if n == 0 {
                    // The socket's EOF: rustls learns of it, and its reader then says
                    // whether a close_notify came first.
                    self.conn.read_tls(&mut io::empty())?;
                    self.open_records()?;
                    continue;
                }
            }
            let mut pending = &self.inbox[self.start..self.end];
            let taken = self.conn.read_tls(&mut pending)?;
            self.start += taken;
            self.open_records()?;
        }
    }

    fn open_records(&mut self) -> io::Result<()> {
        let conn = &mut self.conn;
        let (result, spent) = crate::cost::sampled(self.crypto_calls, SAMPLE_EVERY, || {
            conn.process_new_packets()
        });
        self.crypto_calls += 1;
        self.crypto += spent.unwrap_or_default();
        result.map(|_| ()).map_err(|e| {
            // The alert that says why goes out if it can.
            let _ = self.conn.write_tls(&mut NoSignal(&mut self.socket));
            io::Error::new(io::ErrorKind::InvalidData, verify::describe(&e))
        })
    }

    /// Writes application bytes: seals up to the session's buffer limit into records and
    /// sends what the socket takes. Records the socket did not take go first next time;
    /// `WouldBlock`/`TimedOut` means none of `data` was taken.
    pub fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.send_records()?;
        let conn = &mut self.conn;
        let (taken, spent) = crate::cost::sampled(self.crypto_calls, SAMPLE_EVERY, || {
            conn.writer().write(data)
        });
        self.crypto_calls += 1;
        self.crypto += spent.unwrap_or_default();
        let taken = taken?;
        match self.send_records() {
            Err(e) if !is_idle(&e) => Err(e),
            _ => Ok(taken),
        }
    }

    /// Sends sealed records until none is left or the socket is full.
    pub fn send_records(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut NoSignal(&mut self.socket))? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Sealed records not yet handed to the socket.
    pub fn has_unsent(&self) -> bool {
        self.conn.wants_write()
    }

    /// Caps the application bytes one [`TlsStream::write`] takes (rustls seals them all
    /// before any goes out).
    pub fn set_write_limit(&mut self, limit: usize) {
        self.conn.set_buffer_limit(Some(limit.max(16 * 1024)));
    }

    pub(crate) fn into_parts(self) -> (rustls::Connection, S, Vec<u8>) {
        let pending = self.inbox[self.start..self.end].to_vec();
        (self.conn, self.socket, pending)
    }
}

/// The session as a byte stream: `flush` sends the sealed records still waiting.
impl<S: Read + Write + AsFd> Read for TlsStream<S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        TlsStream::read(self, out)
    }
}

impl<S: Read + Write + AsFd> Write for TlsStream<S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        TlsStream::write(self, data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_records()
    }
}

/// Runs the handshake to its end on a blocking socket, within `timeout`.
fn handshake(
    conn: &mut rustls::Connection,
    socket: &mut TcpStream,
    timeout: Duration,
) -> Result<Duration, TlsError> {
    let began = Instant::now();
    let deadline = began + timeout;
    let fail = |text: String| TlsError::Handshake(text);
    while conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail(format!(
                "no TLS answer within {:.0} s (does the peer speak TLS?)",
                timeout.as_secs_f64()
            )));
        }
        socket
            .set_read_timeout(Some(left))
            .and_then(|()| socket.set_write_timeout(Some(left)))
            .map_err(|e| fail(e.to_string()))?;
        if let Err(e) = conn.complete_io(&mut NoSignal(socket)) {
            if let Some(tls) = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                return Err(fail(verify::describe(tls)));
            }
            return Err(fail(match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
                    "no TLS answer within {:.0} s (does the peer speak TLS?)",
                    timeout.as_secs_f64()
                ),
                io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe => format!(
                    "the peer closed the connection during the handshake ({e}): it may not \
                     speak TLS, or refused our offer"
                ),
                _ => e.to_string(),
            }));
        }
    }
    socket
        .set_read_timeout(None)
        .and_then(|()| socket.set_write_timeout(None))
        .map_err(|e| fail(e.to_string()))?;
    Ok(began.elapsed())
}

fn established(
    mut conn: rustls::Connection,
    socket: TcpStream,
    handshake: Duration,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let cipher = conn
        .negotiated_cipher_suite()
        .and_then(Cipher::of_suite)
        .ok_or_else(|| TlsError::Handshake("no cipher suite was negotiated".into()))?;
    conn.set_buffer_limit(Some(128 * 1024));
    Ok(TlsStream {
        conn,
        socket,
        inbox: vec![0u8; DEFAULT_INBOX],
        start: 0,
        end: 0,
        crypto: Duration::ZERO,
        crypto_calls: 0,
        note: None,
        facts: TlsFacts {
            cipher,
            handshake,
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
    let client = rustls::ClientConnection::new(config, server)
        .map_err(|e| TlsError::Handshake(verify::describe(&e)))?;
    let mut conn = rustls::Connection::Client(client);
    let took = handshake(&mut conn, &mut socket, timeout)?;
    established(conn, socket, took)
}

/// The server's handshake on an accepted socket.
pub fn accept(
    mut socket: TcpStream,
    config: Arc<rustls::ServerConfig>,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, TlsError> {
    let server = rustls::ServerConnection::new(config)
        .map_err(|e| TlsError::Handshake(verify::describe(&e)))?;
    let mut conn = rustls::Connection::Server(server);
    let took = handshake(&mut conn, &mut socket, timeout)?;
    established(conn, socket, took)
}
