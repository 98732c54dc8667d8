//! What the sending and receiving drivers share: the session's UDP socket and key, the
//! clock, the errors, progress and what one file's transfer measured.

#![allow(clippy::disallowed_methods)]

use std::os::fd::AsRawFd;
use std::time::Instant;

use socket2::Socket;

use crate::control::EndStats;

/// The session's datagram side, set up once per control connection.
pub struct Session {
    /// Connected to the peer's proven address: the kernel drops datagrams from others.
    pub udp: Socket,
    /// The key that tags ACKs and hellos.
    pub key: [u8; 32],
    pub id: u64,
    /// The largest payload a datagram carries on this path.
    pub block: u32,
}

impl Session {
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.udp.as_raw_fd()
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

/// Why a transfer stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// Something on this end (its disk, its socket).
    #[error("{0}")]
    Local(String),
    /// The other end said why it stopped.
    #[error("the other end: {0}")]
    Remote(String),
    /// The other end broke the protocol or went silent.
    #[error("{0}")]
    Peer(String),
    /// Interrupted by the user.
    #[error("interrupted")]
    Interrupted,
}

/// A progress report, about ten a second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// File bytes the receiver has (acknowledged or verified).
    pub done: u64,
    pub total: u64,
    /// Payload bytes sent so far and how many were sent again.
    pub sent: u64,
    pub resent: u64,
}

/// Where the sender's time went, seconds: what held the next datagram back.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Waits {
    /// Sending as fast as the rate allows: the network (or `--rate`) sets the pace.
    pub pacing_s: f64,
    /// The congestion window was full.
    pub window_s: f64,
    /// The receiver's flow-control window was closed (its disk or CPU behind).
    pub receiver_s: f64,
    /// The next chunk had not been read from the disk.
    pub reader_s: f64,
    /// Everything sent, waiting for the last ACKs and the receiver's verdict.
    pub tail_s: f64,
}

/// What one file's transfer measured on this end.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileOutcome {
    pub bytes: u64,
    /// Bytes this run did not have to move (already in the `.part`).
    pub resumed_bytes: u64,
    pub wall_s: f64,
    /// Datagram payload bytes sent (sender) or received (receiver).
    pub payload_bytes: u64,
    /// Payload bytes sent again (sender) or that arrived twice (receiver).
    pub resent_bytes: u64,
    pub lost_packets: u64,
    /// Chunks whose hash failed and that were sent again.
    pub refetched_chunks: u64,
    /// The root hash both ends agreed on, hex.
    pub root: String,
    pub local: EndStats,
    pub remote: EndStats,
    /// The sender's waits (on whichever end sent).
    pub waits: Waits,
    pub min_rtt_ms: Option<f64>,
    /// The rate model's bottleneck estimate at the end, bit/s.
    pub bottleneck_bps: Option<f64>,
    pub random_loss: Option<f64>,
    /// Per 100 ms: receiver-side goodput and retransmitted bytes (the sender's view).
    pub timeline: Vec<TimelinePoint>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TimelinePoint {
    pub t_s: f64,
    /// File bytes acknowledged in this slice, as bits per second.
    pub goodput_bps: f64,
    /// Bytes sent again in this slice, as bits per second.
    pub resent_bps: f64,
}
