//! A TLS session's record layer without I/O: records in a caller's buffer are opened and
//! their plaintext handed on, plaintext is sealed into a caller's buffer. The session
//! holds no buffer of its own (rustls' unbuffered API), so a connection among thousands
//! costs its keys and state, and the bytes in flight wait in the caller's buffers or in
//! the kernel's.

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, InsufficientSizeError,
    UnbufferedStatus,
};
use rustls::CommonState;

/// The largest record on the wire: a header, 16 KiB of plaintext, and what TLS 1.3 allows
/// on top (its content type, tag and padding: 256 bytes).
pub const MAX_RECORD: usize = 5 + 16 * 1024 + 256;

/// Either side's session.
pub enum Session {
    Client(UnbufferedClientConnection),
    Server(UnbufferedServerConnection),
}

/// rustls gives each side its own `process_tls_records`; this lets one body of code drive
/// both.
pub(crate) trait Records {
    type Data;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

impl Records for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
}

impl Records for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
}

/// Runs `$body` with `$conn` bound to the side's connection.
macro_rules! either_side {
    ($session:expr, $conn:ident => $body:expr) => {
        match $session {
            Session::Client($conn) => $body,
            Session::Server($conn) => $body,
        }
    };
}

/// What opening the records at the front of a buffer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// Bytes from the buffer's front that are done with (whole records).
    pub used: usize,
    /// The peer's close_notify came: no record follows.
    pub closed: bool,
}

/// What one step of the state machine asks of the loop that drives it.
enum Next {
    Again,
    /// The buffer holds no further whole record (or the handshake waits for the peer).
    Wanting,
    Closed,
    /// The handshake is over and the session can send.
    Sending,
}

/// A byte queue that keeps its bytes initialised, so handing out room to write into costs
/// no clearing once it has grown, and taking bytes from its front moves none.
#[derive(Debug, Default)]
pub struct Buffer {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

impl Buffer {
    pub fn filled(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    pub fn filled_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.end]
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Empties the buffer and gives its memory back.
    pub fn release(&mut self) {
        *self = Buffer::default();
    }

    /// At least `at_least` bytes of room after what is filled.
    pub fn spare(&mut self, at_least: usize) -> &mut [u8] {
        if self.bytes.len() - self.end < at_least {
            if self.start > 0 {
                self.bytes.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.bytes.len() - self.end < at_least {
                self.bytes.resize(self.end + at_least, 0);
            }
        }
        &mut self.bytes[self.end..]
    }

    /// Counts `n` bytes of the spare room as filled.
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.bytes.len());
    }

    pub fn extend(&mut self, data: &[u8]) {
        self.spare(data.len())[..data.len()].copy_from_slice(data);
        self.commit(data.len());
    }

    /// Drops the first `n` filled bytes.
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
        if self.start == self.end {
            self.clear();
        }
    }
}

/// Encodes a handshake or alert record rustls has ready into `out`.
fn encode<Data>(data: &mut EncodeTlsData<'_, Data>, out: &mut Buffer) -> Result<(), String> {
    let mut room = 2048;
    loop {
        match data.encode(out.spare(room)) {
            Ok(n) => {
                out.commit(n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                room = required_size
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One step of the state machine on `incoming`: plaintext goes to `deliver`, records to
/// send (handshake, key update, alert) to `outgoing`. Returns the bytes of `incoming` done
/// with, and what to do next or the error.
fn step<C: Records>(
    conn: &mut C,
    incoming: &mut [u8],
    outgoing: &mut Buffer,
    deliver: &mut dyn FnMut(&[u8]),
) -> (usize, Result<Next, rustls::Error>) {
    let status = conn.process(incoming);
    let mut discard = status.discard;
    let next = step_state(status.state, &mut discard, outgoing, deliver);
    (discard, next)
}

fn step_state<Data>(
    state: Result<ConnectionState<'_, '_, Data>, rustls::Error>,
    discard: &mut usize,
    outgoing: &mut Buffer,
    deliver: &mut dyn FnMut(&[u8]),
) -> Result<Next, rustls::Error> {
    Ok(match state? {
        ConnectionState::ReadTraffic(mut traffic) => {
            while let Some(record) = traffic.next_record() {
                let record = record?;
                *discard += record.discard;
                deliver(record.payload);
            }
            Next::Again
        }
        ConnectionState::EncodeTlsData(mut data) => {
            encode(&mut data, outgoing).map_err(rustls::Error::General)?;
            Next::Again
        }
        // The caller sends `outgoing` before anything sealed later.
        ConnectionState::TransmitTlsData(data) => {
            data.done();
            Next::Again
        }
        ConnectionState::BlockedHandshake => Next::Wanting,
        ConnectionState::WriteTraffic(_) => Next::Sending,
        ConnectionState::PeerClosed | ConnectionState::Closed => Next::Closed,
        // Early data is never offered.
        _ => return Err(rustls::Error::General("unexpected early data".into())),
    })
}

/// The record rustls has queued after an error (the alert that says why), into `out`.
/// `incoming` is the buffer as the failed call left it (rustls keeps positions in it).
/// One call only: a second would parse the bad bytes again and raise a second alert,
/// which rustls refuses.
fn queued_alert<C: Records>(conn: &mut C, incoming: &mut [u8], out: &mut Buffer) {
    let status = conn.process(incoming);
    if let Ok(ConnectionState::EncodeTlsData(mut data)) = status.state {
        let _ = encode(&mut data, out);
    }
}

/// Where a handshake stands after [`Session::advance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// `outgoing` may hold records to send; more from the peer is needed after them.
    Wanting { used: usize },
    /// Done; `used` bytes of `incoming` were the handshake's, the rest is the stream's.
    Done { used: usize },
}

impl Session {
    pub fn common(&self) -> &CommonState {
        either_side!(self, conn => conn)
    }

    /// Runs the handshake as far as `incoming` allows. Records to send are appended to
    /// `outgoing`; application data that came with the handshake's last flight to `early`.
    /// On an error, `outgoing` holds the alert that tells the peer why.
    pub fn advance(
        &mut self,
        incoming: &mut [u8],
        outgoing: &mut Buffer,
        early: &mut Buffer,
    ) -> Result<Handshake, rustls::Error> {
        either_side!(self, conn => advance(conn, incoming, outgoing, early))
    }

    /// Opens the whole records at the front of `incoming`, handing their plaintext to
    /// `deliver` in order. Records rustls answers with (a key update) go to `outgoing`.
    /// On an error, `outgoing` holds the alert that tells the peer why.
    pub fn open(
        &mut self,
        incoming: &mut [u8],
        outgoing: &mut Buffer,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<Opened, rustls::Error> {
        either_side!(self, conn => open(conn, incoming, outgoing, deliver))
    }

    /// Seals `plaintext` into records appended to `out` (after any record the session
    /// must send first, such as a key update). `unopened` is what was received and not
    /// yet opened, as the last [`Session::open`] left it: rustls keeps positions in it
    /// (a handshake message split across records), so it is passed again, unchanged.
    pub fn seal(
        &mut self,
        plaintext: &[u8],
        unopened: &mut [u8],
        out: &mut Buffer,
    ) -> Result<(), String> {
        either_side!(self, conn => seal(conn, plaintext, unopened, out))
    }

    /// The session's secrets, for the kernel to take the record layer (rustls' own
    /// handle on the kernel's session is not kept: no session tickets are sent and key
    /// updates are not asked of it).
    pub fn dangerous_extract_secrets(self) -> Result<rustls::ExtractedSecrets, rustls::Error> {
        match self {
            Session::Client(conn) => conn.dangerous_into_kernel_connection().map(|(s, _)| s),
            Session::Server(conn) => conn.dangerous_into_kernel_connection().map(|(s, _)| s),
        }
    }
}

/// Steps the state machine over `incoming` until it waits or is done: returns where it
/// stopped and the bytes of `incoming` done with. On an error, `outgoing` holds the alert.
fn run_steps<C: Records>(
    conn: &mut C,
    incoming: &mut [u8],
    outgoing: &mut Buffer,
    deliver: &mut dyn FnMut(&[u8]),
) -> Result<(Next, usize), rustls::Error> {
    let mut used = 0;
    loop {
        let (discard, next) = step(conn, &mut incoming[used..], outgoing, deliver);
        used += discard;
        match next {
            Ok(Next::Again) => {}
            Ok(next) => return Ok((next, used)),
            Err(e) => {
                queued_alert(conn, &mut incoming[used..], outgoing);
                return Err(e);
            }
        }
    }
}

fn advance<C: Records>(
    conn: &mut C,
    incoming: &mut [u8],
    outgoing: &mut Buffer,
    early: &mut Buffer,
) -> Result<Handshake, rustls::Error> {
    let mut keep = |plaintext: &[u8]| early.extend(plaintext);
    match run_steps(conn, incoming, outgoing, &mut keep)? {
        (Next::Sending, used) => Ok(Handshake::Done { used }),
        (Next::Closed, _) => Err(rustls::Error::General(
            "the peer closed the session during the handshake".into(),
        )),
        (_, used) => Ok(Handshake::Wanting { used }),
    }
}

fn open<C: Records>(
    conn: &mut C,
    incoming: &mut [u8],
    outgoing: &mut Buffer,
    deliver: &mut dyn FnMut(&[u8]),
) -> Result<Opened, rustls::Error> {
    let (next, used) = run_steps(conn, incoming, outgoing, deliver)?;
    Ok(Opened {
        used,
        closed: matches!(next, Next::Closed),
    })
}

/// Room for `plaintext` bytes sealed: each record adds its header, content type and tag.
fn sealed_size(plaintext: usize) -> usize {
    plaintext + plaintext.div_ceil(16 * 1024).max(1) * 64
}

fn seal<C: Records>(
    conn: &mut C,
    plaintext: &[u8],
    unopened: &mut [u8],
    out: &mut Buffer,
) -> Result<(), String> {
    // A few steps at most: a key update to encode and mark sent, then the data. Nothing
    // in `unopened` is a whole record (the last read opened them all), so none is taken.
    for _ in 0..8 {
        let status = conn.process(unopened);
        match status.state.map_err(|e| e.to_string())? {
            ConnectionState::WriteTraffic(mut traffic) => {
                let mut room = sealed_size(plaintext.len());
                loop {
                    match traffic.encrypt(plaintext, out.spare(room)) {
                        Ok(n) => {
                            out.commit(n);
                            return Ok(());
                        }
                        Err(EncryptError::InsufficientSize(InsufficientSizeError {
                            required_size,
                        })) if required_size > room => room = required_size,
                        Err(e) => return Err(e.to_string()),
                    }
                }
            }
            ConnectionState::EncodeTlsData(mut data) => encode(&mut data, out)?,
            ConnectionState::TransmitTlsData(data) => data.done(),
            // The peer's half is closed; ours stays open.
            ConnectionState::PeerClosed => {}
            ConnectionState::Closed => return Err("the session is closed".into()),
            ConnectionState::ReadTraffic(_) => {
                return Err("received records were left unread".into())
            }
            _ => return Err("the handshake is not over".into()),
        }
    }
    Err("the session did not become ready to send".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_hands_out_room_keeps_what_is_committed_and_consumes_from_the_front() {
        let mut buffer = Buffer::default();
        assert!(buffer.spare(10).len() >= 10);
        buffer.spare(3)[..3].copy_from_slice(b"abc");
        buffer.commit(3);
        buffer.extend(b"defg");
        assert_eq!(buffer.filled(), b"abcdefg");
        buffer.consume(2);
        assert_eq!(buffer.filled(), b"cdefg");
        // Room after a consumed front reuses it.
        buffer.spare(buffer.bytes.len() - 3);
        assert_eq!(buffer.filled(), b"cdefg");
        buffer.consume(99);
        assert!(buffer.is_empty());
        // Committing more than was handed out counts only the room there is.
        let room = buffer.spare(4).len();
        buffer.commit(room + 100);
        assert_eq!(buffer.len(), room);
    }

    #[test]
    fn room_for_sealing_covers_every_record_overhead() {
        assert!(sealed_size(0) >= 22);
        assert!(sealed_size(16 * 1024) >= 16 * 1024 + 22);
        assert!(sealed_size(16 * 1024 + 1) >= 16 * 1024 + 1 + 2 * 22);
        assert!(sealed_size(1 << 20) >= (1 << 20) + 64 * 22);
    }
}
