//! Blocking I/O for one control connection, around a sans-IO session.
//!
//! Control traffic is a handful of small frames per test, so a blocking socket with read
//! timeouts is enough; the timeouts come from the session's own deadlines.

pub use linerate_proto::Machine;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A control connection.
pub struct Control {
    stream: TcpStream,
    buffer: Vec<u8>,
    closed: bool,
}

impl Control {
    pub fn new(stream: TcpStream) -> io::Result<Control> {
        stream.set_nodelay(true)?;
        // A peer that stops reading cannot block a writer for long.
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(Control {
            stream,
            buffer: vec![0; 64 * 1024],
            closed: false,
        })
    }

    /// The peer has closed (or the connection broke).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Sends everything the session has queued. A broken connection is reported to the
    /// session as the peer's end of stream.
    pub fn flush<M: Machine>(&mut self, machine: &mut M) {
        while let Some(bytes) = machine.poll_transmit() {
            if self.closed {
                continue;
            }
            if self.stream.write_all(&bytes).is_err() {
                self.closed = true;
                machine.handle_eof(Instant::now());
            }
        }
    }

    /// Flushes, then waits up to `max_wait` (less if the session has an earlier deadline)
    /// for input, and feeds what happened to the session.
    pub fn step<M: Machine>(&mut self, machine: &mut M, max_wait: Duration) {
        self.flush(machine);
        let now = Instant::now();
        let mut wait = max_wait;
        if let Some(deadline) = machine.poll_timeout() {
            wait = wait.min(deadline.saturating_duration_since(now));
        }
        if self.closed {
            std::thread::sleep(wait);
        } else {
            // A zero read timeout means "block forever" to the kernel; use a floor.
            let _ = self
                .stream
                .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
            match self.stream.read(&mut self.buffer) {
                Ok(0) => {
                    self.closed = true;
                    machine.handle_eof(Instant::now());
                }
                Ok(n) => machine.handle_input(Instant::now(), &self.buffer[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => {
                    self.closed = true;
                    machine.handle_eof(Instant::now());
                }
            }
        }
        machine.handle_timeout(Instant::now());
        self.flush(machine);
    }
}
