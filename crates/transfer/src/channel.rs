//! The control connection as both ends drive it: framed, checked messages over a TCP
//! stream, a writer that several threads share, reads that give up after a deadline or
//! when the transfer is called off.

// An I/O driver: its reads give up at deadlines read from the clock.
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

    /// The next message, waiting at most `timeout`, and giving up when `cancel` is set
    /// (seen within [`READ_SLICE`]).
    pub fn receive(
        &mut self,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<Control, ChannelError> {
        self.receive_woken(timeout, cancel, None)
    }

    /// As [`receive`](Self::receive), also woken by `wakeup` to see `cancel` at once (a
    /// file's control reader, stopped at the file's end: waiting out the read's slice
    /// cost 100 ms a file, most of a small file's copy).
    pub fn receive_woken(
        &mut self,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
        wakeup: Option<&crate::sys::Wakeup>,
    ) -> Result<Control, ChannelError> {
        use std::os::fd::AsRawFd;
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
            if let Some(wakeup) = wakeup {
                let fds = [self.stream.as_raw_fd(), wakeup.fd()];
                let slice = READ_SLICE.as_nanos() as u64;
                // Nothing to read yet: look at the flags again. Woken: the flag is set.
                if !crate::sys::wait_any(&fds, libc::POLLIN, Some(slice)).unwrap_or(true)
                    || cancel.is_some_and(|c| c.load(Ordering::Relaxed))
                {
                    continue;
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A control reader told to stop at a file's end and woken sees it at once, even
    /// where its reads would block for ever (here the read's slice is taken away: were
    /// the wake-up not heard, the reader would never return and the test would fail at
    /// its 30 s limit).
    #[test]
    fn a_woken_reader_stops_without_waiting_for_its_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut channel = Channel::new(stream, &[]).unwrap();
        channel.stream.set_read_timeout(None).unwrap();
        let stop = AtomicBool::new(false);
        let wakeup = crate::sys::Wakeup::new().unwrap();
        let (done_tx, done) = std::sync::mpsc::channel();
        let (early, stopped) = std::thread::scope(|scope| {
            scope.spawn(|| {
                let result =
                    channel.receive_woken(Duration::from_secs(3600), Some(&stop), Some(&wakeup));
                let _ = done_tx.send(matches!(result, Err(ChannelError::Cancelled)));
            });
            // Nothing comes while the flag is down.
            let early = done.recv_timeout(Duration::from_millis(300)).ok();
            stop.store(true, Ordering::Relaxed);
            wakeup.wake();
            let stopped = done.recv_timeout(Duration::from_secs(30)).ok();
            // A reader that did not hear the wake-up returns once the peer closes.
            drop(peer);
            (early, stopped)
        });
        assert_eq!(
            early, None,
            "the reader returned before it was told to stop"
        );
        assert_eq!(stopped, Some(true), "the woken reader did not stop");
    }
}
