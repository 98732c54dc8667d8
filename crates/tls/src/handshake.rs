//! The handshake on a blocking socket, within a time limit, and the errors it ends with
//! in the user's terms.

use crate::session::{Buffer, Handshake, Session, MAX_RECORD};
use crate::{verify, TlsError};
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A handshake's largest flight we take (a certificate chain spans records; rustls
/// itself refuses a handshake message over 64 KiB).
const MAX_FLIGHT: usize = 80 * 1024;

/// A finished handshake: how long it took, and what the peer sent after it in the same
/// reads (records not yet opened, and plaintext already opened).
pub struct Handshaken {
    pub took: Duration,
    pub pending: Vec<u8>,
    pub early: Vec<u8>,
}

fn fail(text: String) -> TlsError {
    TlsError::Handshake(text)
}

fn silence(timeout: Duration) -> TlsError {
    fail(format!(
        "no TLS answer within {:.0} s (does the peer speak TLS?)",
        timeout.as_secs_f64()
    ))
}

fn io_failure(e: io::Error, timeout: Duration) -> TlsError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => silence(timeout),
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe => fail(format!(
            "the peer closed the connection during the handshake ({e}): it may not speak \
             TLS, or refused our offer"
        )),
        _ => fail(e.to_string()),
    }
}

/// Sends all of `data` before `deadline` (MSG_NOSIGNAL: a peer that has gone is an error,
/// not a SIGPIPE).
fn send_all(socket: &TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    let sock = socket2::SockRef::from(socket);
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        socket.set_write_timeout(Some(left))?;
        match sock.send_with_flags(data, libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs `session`'s handshake on `socket` to its end within `timeout`.
pub fn run(
    session: &mut Session,
    socket: &mut TcpStream,
    timeout: Duration,
) -> Result<Handshaken, TlsError> {
    let began = Instant::now();
    let deadline = began + timeout;
    let mut incoming = vec![0u8; MAX_RECORD];
    let mut filled = 0;
    let mut outgoing = Buffer::default();
    let mut early = Buffer::default();
    loop {
        let advanced = session.advance(&mut incoming[..filled], &mut outgoing, &mut early);
        // What rustls has to say goes out first, the alert of a failure included.
        if !outgoing.is_empty() {
            let sent = send_all(socket, outgoing.filled(), deadline);
            outgoing.clear();
            if let (Ok(_), Err(e)) = (&advanced, sent) {
                return Err(io_failure(e, timeout));
            }
        }
        let used = match advanced.map_err(|e| fail(verify::describe(&e)))? {
            Handshake::Done { used } => {
                socket
                    .set_read_timeout(None)
                    .and_then(|()| socket.set_write_timeout(None))
                    .map_err(|e| fail(e.to_string()))?;
                return Ok(Handshaken {
                    took: began.elapsed(),
                    pending: incoming[used..filled].to_vec(),
                    early: early.filled().to_vec(),
                });
            }
            Handshake::Wanting { used } => used,
        };
        incoming.copy_within(used..filled, 0);
        filled -= used;
        if filled == incoming.len() {
            if incoming.len() >= MAX_FLIGHT {
                return Err(fail(format!(
                    "the peer's handshake flight is over {} KiB",
                    MAX_FLIGHT / 1024
                )));
            }
            incoming.resize((incoming.len() * 2).min(MAX_FLIGHT), 0);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(silence(timeout));
        }
        socket
            .set_read_timeout(Some(left))
            .map_err(|e| fail(e.to_string()))?;
        match socket.read(&mut incoming[filled..]) {
            Ok(0) => return Err(io_failure(io::ErrorKind::UnexpectedEof.into(), timeout)),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_failure(e, timeout)),
        }
    }
}
