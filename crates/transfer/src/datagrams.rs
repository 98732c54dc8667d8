//! The session's datagram side (its connected UDP socket, key and block size) and the
//! clock the sending and receiving loops read.

// An I/O driver: the clock the sending and receiving loops read is read here.
#![allow(clippy::disallowed_methods)]

use std::os::fd::AsRawFd;
use std::time::Instant;

use socket2::Socket;

/// The session's datagram side, set up once per control connection.
pub struct Session {
    /// Connected to the peer's proven address: the kernel drops datagrams from others.
    pub udp: Socket,
    /// The key that tags ACKs and hellos.
    pub key: [u8; 32],
    pub id: u64,
    /// The largest payload a datagram carries on this path.
    pub block: u32,
    /// `--ecn`: the sending end's data datagrams carry ECT(0), and the receiving end
    /// counts those that arrive marked CE and says so in its ACKs. Set when the copy (the
    /// client's options, the server's offer or pull) asks for it.
    pub ecn: std::sync::atomic::AtomicBool,
    /// Lanes 1 and on (`--lanes`), each connected to its own proven port of the peer's:
    /// a file's data datagrams go over `udp` and these by packet number; the ACKs over
    /// `udp` alone. Empty for a session of one lane.
    pub lanes: Vec<Socket>,
}

impl Session {
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.udp.as_raw_fd()
    }

    /// Every lane's socket, lane 0 (`udp`) first.
    pub fn sockets(&self) -> impl Iterator<Item = &Socket> {
        std::iter::once(&self.udp).chain(&self.lanes)
    }

    /// How many UDP flows the data datagrams spread over.
    pub fn lane_count(&self) -> usize {
        1 + self.lanes.len()
    }

    /// Whether this session's copies are ECN-capable.
    pub fn ecn(&self) -> bool {
        self.ecn.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Nanoseconds since the transfer began.
#[derive(Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    pub fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}
