//! What one file's transfer measured on this end, and the progress reports the loops
//! give while it runs.

use crate::control::EndStats;

/// Which way a copy went, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Push,
    Pull,
}

/// A progress report, about ten a second.
#[derive(Debug, Clone, Copy, Default)]
pub struct TransferProgress {
    /// File bytes the receiver has (acknowledged or verified).
    pub done: u64,
    pub total: u64,
    /// Payload bytes sent so far and how many were sent again.
    pub sent: u64,
    pub resent: u64,
}

pub use crate::control::Waits;

/// What one file's transfer measured on this end.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileOutcome {
    pub bytes: u64,
    /// Bytes this run did not have to move (already in the `.part`).
    pub resumed_bytes: u64,
    pub wall_s: f64,
    /// Datagram payload bytes the sender sent (its own count, on both ends).
    pub payload_bytes: u64,
    /// Payload bytes the sender sent again, and the datagrams it declared lost: the
    /// sender's own counts on both ends (a receiver has them from the sender's close).
    pub resent_bytes: u64,
    pub lost_packets: u64,
    /// Of the resent bytes, the tail's second copies (see `SenderFigures`).
    #[serde(default)]
    pub tail_copy_bytes: u64,
    /// Receiver: payload bytes that arrived twice (a resend of a datagram that was only
    /// late, not lost); 0 on the sender.
    #[serde(default)]
    pub duplicate_bytes: u64,
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
    /// The rate the sender's search began from, when it resumed from what an earlier
    /// copy over this path found (half of that), bit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_bps: Option<f64>,
    /// A cold start: the packet train's estimate of the path and when it came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_estimate: Option<crate::control::StartEstimate>,
    /// With `--ecn`: data datagrams that arrived marked CE (the receiver's count) and the
    /// sender's rate cuts for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn: Option<crate::control::EcnFigures>,
    /// Per 100 ms: receiver-side goodput and retransmitted bytes (the sender's view).
    pub timeline: Vec<TimelinePoint>,
}

impl FileOutcome {
    /// Takes what only the sender knows (its resends, losses, waits and rate model) from
    /// its figures: its own on the sending end, its close message's on the receiving end.
    pub fn take_sender_figures(&mut self, sent: &crate::control::SenderFigures) {
        self.payload_bytes = sent.payload_bytes;
        self.resent_bytes = sent.resent_bytes;
        self.lost_packets = sent.lost_packets;
        self.tail_copy_bytes = sent.tail_copy_bytes;
        self.waits = sent.waits;
        self.min_rtt_ms = sent.min_rtt_ms;
        self.bottleneck_bps = sent.bottleneck_bps;
        self.random_loss = sent.random_loss;
        self.resumed_from_bps = sent.resumed_bps;
        self.start_estimate = sent.train;
        self.ecn = sent.ecn;
    }

    /// Adds `other`'s figures to these, as one transfer of both files: counts, times,
    /// each end's costs and the sender's waits add up; the rate model's estimates are the
    /// later file's (they describe the path as it was last seen).
    pub fn add(&mut self, other: &FileOutcome) {
        self.bytes += other.bytes;
        self.resumed_bytes += other.resumed_bytes;
        self.wall_s += other.wall_s;
        self.payload_bytes += other.payload_bytes;
        self.resent_bytes += other.resent_bytes;
        self.tail_copy_bytes += other.tail_copy_bytes;
        self.lost_packets += other.lost_packets;
        self.duplicate_bytes += other.duplicate_bytes;
        self.refetched_chunks += other.refetched_chunks;
        for (sum, part) in [
            (&mut self.local, &other.local),
            (&mut self.remote, &other.remote),
        ] {
            sum.disk_busy_s += part.disk_busy_s;
            sum.cpu_s += part.cpu_s;
            sum.wall_s += part.wall_s;
            sum.corrupted_datagrams += part.corrupted_datagrams;
            sum.rcvbuf_errors += part.rcvbuf_errors;
            sum.runqueue_wait_s += part.runqueue_wait_s;
            sum.resume_checked_chunks += part.resume_checked_chunks;
            sum.resume_damaged_chunks += part.resume_damaged_chunks;
            sum.resume_check_s += part.resume_check_s;
        }
        let (waits, more) = (&mut self.waits, &other.waits);
        waits.pacing_s += more.pacing_s;
        waits.window_s += more.window_s;
        waits.receiver_s += more.receiver_s;
        waits.reader_s += more.reader_s;
        waits.tail_s += more.tail_s;
        self.bottleneck_bps = other.bottleneck_bps.or(self.bottleneck_bps);
        self.random_loss = other.random_loss.or(self.random_loss);
        self.min_rtt_ms = other.min_rtt_ms.or(self.min_rtt_ms);
        // The first file's resume is the copy's: later files resume from the earlier ones.
        self.resumed_from_bps = self.resumed_from_bps.or(other.resumed_from_bps);
        self.start_estimate = self.start_estimate.or(other.start_estimate);
        self.ecn = match (self.ecn, other.ecn) {
            (Some(a), Some(b)) => Some(crate::control::EcnFigures {
                ce_marked: a.ce_marked + b.ce_marked,
                ce_rounds: a.ce_rounds + b.ce_rounds,
            }),
            (a, b) => a.or(b),
        };
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TimelinePoint {
    pub t_s: f64,
    /// File bytes acknowledged in this slice, as bits per second.
    pub goodput_bps: f64,
    /// Bytes sent again in this slice, as bits per second.
    pub resent_bps: f64,
}
