//! The control connection as both ends drive it: framed, checked messages over a TCP
//! stream, a writer that several threads share, reads that give up after a deadline or
//! when the transfer is called off.

#![allow(clippy::disallowed_methods)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use linerate_proto::auth::{encode_with, open_with, ControlSeal};
use linerate_proto::frame::FrameDecoder;

use crate::control::{self, Control, MAX_FRAME};

/// Why the control connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the control connection closed")]
    Closed,
    #[error("no message from the other end within {0:.0} s")]
    Timeout(f64),
    #[error("the transfer was called off")]
    Cancelled,
    #[error("the other end broke the protocol: {0}")]
    Protocol(String),
    #[error("the control connection failed: {0}")]
    Io(#[from] io::Error),
}

/// A writer several threads may send on.
#[derive(Clone)]
pub struct ControlWriter {
    stream: Arc<Mutex<TcpStream>>,
    /// Every frame after the key exchange is sealed (linerate-proto's `auth`): sealed and
    /// written under this one lock, so frames go in the order of their numbers.
    seal: Arc<Mutex<Option<ControlSeal>>>,
}

impl ControlWriter {
    pub fn send(&self, message: &Control) -> io::Result<()> {
        let mut seal = self.seal.lock().expect("control seal");
        let frame = encode_with(&mut seal, message);
        self.stream
            .lock()
            .expect("control writer")
            .write_all(&frame)
    }
}

/// One end of a control connection.
pub struct Channel {
    stream: TcpStream,
    decoder: FrameDecoder,
    sink: ControlWriter,
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// How often a blocked read looks at the cancel flag.
const READ_SLICE: Duration = Duration::from_millis(100);

impl Channel {
    /// Marks what this end of the control connection sends with `dscp`.
    pub fn set_dscp(&self, dscp: u8) -> std::io::Result<()> {
        crate::sys::set_dscp(&self.stream, dscp)
    }

    /// `already` holds bytes read past the preface.
    pub fn new(stream: TcpStream, already: &[u8]) -> io::Result<Channel> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(READ_SLICE))?;
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        let mut decoder = FrameDecoder::new(MAX_FRAME);
        decoder.push(already);
        let writer = stream.try_clone()?;
        Ok(Channel {
            stream,
            decoder,
            sink: ControlWriter {
                stream: Arc::new(Mutex::new(writer)),
                seal: Arc::new(Mutex::new(None)),
            },
            peer,
            local,
        })
    }

    /// The kernel's smoothed RTT of the control connection (a first guess of the path's
    /// delay for a sender that did not open the connection), 10 ms when unknown.
    pub fn handshake_rtt_ns(&self) -> u64 {
        use std::os::fd::AsRawFd;
        // SAFETY: tcp_info is plain data, filled by the call up to `len`.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: getsockopt into a live tcp_info of the stated length.
        let result = unsafe {
            libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        if result != 0 || info.tcpi_rtt == 0 {
            return 10_000_000;
        }
        u64::from(info.tcpi_rtt) * 1000
    }

    /// Seals every frame from here on, both ways.
    pub fn seal(&self, seal: ControlSeal) {
        *self.sink.seal.lock().expect("control seal") = Some(seal);
    }

    pub fn sink(&self) -> ControlWriter {
        self.sink.clone()
    }

    pub fn send(&self, message: &Control) -> io::Result<()> {
        self.sink.send(message)
    }

    /// Writes raw bytes (the preface).
    pub fn send_raw(&self, bytes: &[u8]) -> io::Result<()> {
        self.sink
            .stream
            .lock()
            .expect("control writer")
            .write_all(bytes)
    }

    /// The next message, waiting at most `timeout`, and giving up when `cancel` is set.
    pub fn receive(
        &mut self,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<Control, ChannelError> {
        let deadline = Instant::now() + timeout;
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match self.decoder.next_frame() {
                Ok(Some(body)) => {
                    let body = open_with(&mut self.sink.seal.lock().expect("control seal"), body)
                        .map_err(|e| ChannelError::Protocol(e.to_string()))?;
                    return control::decode(&body).map_err(|e| ChannelError::Protocol(e.0));
                }
                Ok(None) => {}
                Err(e) => return Err(ChannelError::Protocol(e.to_string())),
            }
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(ChannelError::Cancelled);
            }
            if Instant::now() >= deadline {
                return Err(ChannelError::Timeout(timeout.as_secs_f64()));
            }
            match self.stream.read(&mut buffer) {
                Ok(0) => return Err(ChannelError::Closed),
                Ok(n) => self.decoder.push(&buffer[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(ChannelError::Io(e)),
            }
        }
    }
}
