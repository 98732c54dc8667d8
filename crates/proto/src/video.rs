//! A video test's frames on the wire and at the receiver (docs/protocol.md 5, docs/app.md).
//!
//! Every datagram of a video flow (`--isochronous`, `app --pattern video`) carries, after
//! linerate's 24-byte header (crate::datagram), its frame's fields in network byte order:
//!
//! | bytes  | field                                                             |
//! |--------|-------------------------------------------------------------------|
//! | 24..28 | frame number, u32, from 1                                         |
//! | 28..32 | the number of the frame sent before it (0: none; the numbers between were skipped by a late sender) |
//! | 32..36 | the frame's bytes, all its datagrams' payloads together           |
//! | 36..40 | the frame's bytes from this datagram's first to its end           |
//! | 40..48 | the frame's first write, u64 ns of the sender's wall clock        |
//! | 48..56 | the frame's due time, u64 ns of the sender's wall clock           |
//!
//! [`FrameTracker`] puts a flow's distinct datagrams back into frames: a frame is whole
//! when its bytes have all come, its latency the last one's arrival less its first write.
//! Everything is bounded where it is read: a frame's size by
//! [`linerate_model::video::MAX_FRAME_BYTES`], the frames open at once by [`WINDOW`].

use std::collections::{BTreeMap, BTreeSet};

use linerate_model::latency::LatencyHistogram;
use linerate_model::video::{FrameCounts, MAX_FRAME_BYTES};

mod field {
    use std::ops::Range;
    pub const ID: Range<usize> = 24..28;
    pub const PREVIOUS: Range<usize> = 28..32;
    pub const BYTES: Range<usize> = 32..36;
    pub const REMAINING: Range<usize> = 36..40;
    pub const FIRST_WRITE_NS: Range<usize> = 40..48;
    pub const DUE_NS: Range<usize> = 48..56;
}

/// The shortest datagram of a video flow: the header and the frame's fields.
pub const VIDEO_HEADER: usize = field::DUE_NS.end;

/// Frames open at once: a frame more than this many numbers behind the newest is given up
/// as partial (at 60 frames a second, about a second of frames).
pub const WINDOW: u32 = 64;

/// One datagram's frame fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFields {
    pub id: u32,
    pub previous: u32,
    pub bytes: u32,
    pub remaining: u32,
    pub first_write_ns: u64,
    pub due_ns: u64,
}

impl FrameFields {
    /// Writes the fields into `datagram` (at least [`VIDEO_HEADER`] bytes).
    pub fn write(&self, datagram: &mut [u8]) {
        datagram[field::ID].copy_from_slice(&self.id.to_be_bytes());
        datagram[field::PREVIOUS].copy_from_slice(&self.previous.to_be_bytes());
        datagram[field::BYTES].copy_from_slice(&self.bytes.to_be_bytes());
        datagram[field::REMAINING].copy_from_slice(&self.remaining.to_be_bytes());
        datagram[field::FIRST_WRITE_NS].copy_from_slice(&self.first_write_ns.to_be_bytes());
        datagram[field::DUE_NS].copy_from_slice(&self.due_ns.to_be_bytes());
    }

    /// Writes the frame's first write into a datagram whose fields are written: the
    /// sender knows it only once the frame's first datagram goes to the kernel.
    pub fn set_first_write(datagram: &mut [u8], first_write_ns: u64) {
        datagram[field::FIRST_WRITE_NS].copy_from_slice(&first_write_ns.to_be_bytes());
    }

    /// The fields of `datagram`, if they make sense: a frame number from 1, a size from 1
    /// to the limit, no more remaining than the frame and no less than this datagram.
    pub fn read(datagram: &[u8]) -> Option<FrameFields> {
        if datagram.len() < VIDEO_HEADER {
            return None;
        }
        let u32_at = |at: std::ops::Range<usize>| {
            u32::from_be_bytes(datagram[at].try_into().expect("four bytes"))
        };
        let u64_at = |at: std::ops::Range<usize>| {
            u64::from_be_bytes(datagram[at].try_into().expect("eight bytes"))
        };
        let fields = FrameFields {
            id: u32_at(field::ID),
            previous: u32_at(field::PREVIOUS),
            bytes: u32_at(field::BYTES),
            remaining: u32_at(field::REMAINING),
            first_write_ns: u64_at(field::FIRST_WRITE_NS),
            due_ns: u64_at(field::DUE_NS),
        };
        let sane = fields.id > 0
            && fields.previous < fields.id
            && (1..=MAX_FRAME_BYTES).contains(&fields.bytes)
            && fields.remaining <= fields.bytes
            && datagram.len() as u64 <= u64::from(fields.remaining);
        sane.then_some(fields)
    }
}

#[derive(Debug, Clone)]
struct OpenFrame {
    bytes: u32,
    got: u64,
    first_write_ns: u64,
    due_ns: u64,
    last_arrival_ns: u64,
}

/// One video flow's frames as they arrive.
#[derive(Debug, Clone)]
pub struct FrameTracker {
    period_ns: u64,
    open: BTreeMap<u32, OpenFrame>,
    /// Frames closed (whole or given up) within [`WINDOW`] of the newest: a datagram that
    /// names one again is not a new frame.
    closed: BTreeSet<u32>,
    newest: u32,
    /// The player's schedule, set by the first whole frame: its last byte's arrival less
    /// its due time (any offset between the clocks is in it, and cancels).
    playout_ns: Option<i128>,
    latency: LatencyHistogram,
    counts: FrameCounts,
}

impl FrameTracker {
    pub fn new(period_ns: u64) -> FrameTracker {
        FrameTracker {
            period_ns,
            open: BTreeMap::new(),
            closed: BTreeSet::new(),
            newest: 0,
            playout_ns: None,
            latency: LatencyHistogram::new(),
            counts: FrameCounts::default(),
        }
    }

    /// Counts one distinct datagram (the sequence tracker has already set duplicates and
    /// other flows' datagrams aside) that arrived at `arrival_ns` (receiver's wall clock).
    pub fn record(&mut self, datagram: &[u8], arrival_ns: u64) {
        let Some(fields) = FrameFields::read(datagram) else {
            self.counts.malformed += 1;
            return;
        };
        if self.closed.contains(&fields.id) || fields.id.saturating_add(WINDOW) <= self.newest {
            // A frame already whole or given up: nothing it carries can change it.
            self.counts.malformed += 1;
            return;
        }
        let frame = self.open.entry(fields.id).or_insert(OpenFrame {
            bytes: fields.bytes,
            got: 0,
            first_write_ns: fields.first_write_ns,
            due_ns: fields.due_ns,
            last_arrival_ns: arrival_ns,
        });
        let fits = frame.bytes == fields.bytes
            && frame.got + datagram.len() as u64 <= u64::from(frame.bytes);
        if !fits {
            self.counts.malformed += 1;
            return;
        }
        frame.got += datagram.len() as u64;
        frame.last_arrival_ns = frame.last_arrival_ns.max(arrival_ns);
        if frame.got == u64::from(frame.bytes) {
            let whole = self
                .open
                .remove(&fields.id)
                .expect("the frame just counted");
            self.close_whole(&whole);
            self.closed.insert(fields.id);
        }
        if fields.id > self.newest {
            self.newest = fields.id;
            self.give_up_before(self.newest.saturating_sub(WINDOW - 1));
        }
    }

    fn close_whole(&mut self, frame: &OpenFrame) {
        self.counts.whole += 1;
        let latency = i128::from(frame.last_arrival_ns) - i128::from(frame.first_write_ns);
        match u64::try_from(latency) {
            Ok(ns) => self.latency.record(ns),
            Err(_) => self.counts.clock_ahead += 1,
        }
        let since_due = i128::from(frame.last_arrival_ns) - i128::from(frame.due_ns);
        let playout = *self.playout_ns.get_or_insert(since_due);
        if since_due > playout + i128::from(self.period_ns) {
            self.counts.late += 1;
        }
    }

    /// Frames numbered below `oldest` still open are partial; closed ones that old are
    /// forgotten.
    fn give_up_before(&mut self, oldest: u32) {
        let kept = self.open.split_off(&oldest);
        self.counts.partial += self.open.len() as u64;
        self.open = kept;
        self.closed = self.closed.split_off(&oldest);
    }

    /// The counts so far, frames still open counted as partial; the latencies with their
    /// buckets, so that the ways' figures can be merged from every receiver's.
    pub fn counts(&self) -> FrameCounts {
        FrameCounts {
            partial: self.counts.partial + self.open.len() as u64,
            latency_us: self.latency.summary(true),
            ..self.counts.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PERIOD: u64 = 10_000_000;

    /// The datagrams of frame `id` of `bytes`, `size` bytes each (the last shorter).
    fn frame(id: u32, bytes: u32, size: u32, first_write_ns: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut remaining = bytes;
        while remaining > 0 {
            let len = remaining.min(size);
            let mut d = vec![0u8; len as usize];
            FrameFields {
                id,
                previous: id - 1,
                bytes,
                remaining,
                first_write_ns,
                due_ns: u64::from(id - 1) * PERIOD,
            }
            .write(&mut d);
            out.push(d);
            remaining -= len;
        }
        out
    }

    #[test]
    fn the_model_knows_the_header_this_module_writes() {
        assert_eq!(
            VIDEO_HEADER as u64,
            linerate_model::video::DATAGRAM_HEADER_BYTES
        );
    }

    #[test]
    fn whole_frames_have_their_latency_and_missing_pieces_leave_them_partial() {
        let mut t = FrameTracker::new(PERIOD);
        // Frame 1: due at 0, written at 100 us, whole 2 ms later.
        for (i, d) in frame(1, 3_000, 1_200, 100_000).iter().enumerate() {
            t.record(d, 1_000_000 + i as u64 * 500_000);
        }
        // Frame 2 loses its middle datagram.
        let two = frame(2, 3_000, 1_200, PERIOD);
        t.record(&two[0], PERIOD + 1_000_000);
        t.record(&two[2], PERIOD + 2_000_000);
        // Frame 3 arrives in reverse order.
        for d in frame(3, 2_400, 1_200, 2 * PERIOD).iter().rev() {
            t.record(d, 2 * PERIOD + 3_000_000);
        }
        let c = t.counts();
        assert_eq!((c.whole, c.partial, c.late, c.malformed), (2, 1, 0, 0));
        assert_eq!(c.latency_us.count, 2);
        assert!(
            (c.latency_us.min - 1_900.0).abs() < 2.0,
            "{:?}",
            c.latency_us
        );
        assert!(
            (c.latency_us.max - 3_000.0).abs() < 3.0,
            "{:?}",
            c.latency_us
        );
    }

    #[test]
    fn a_frame_whole_after_its_turn_is_late() {
        let mut t = FrameTracker::new(PERIOD);
        // The first frame sets the player's schedule: whole 5 ms after its due time.
        for d in frame(1, 1_000, 1_200, 0) {
            t.record(&d, 5_000_000);
        }
        // Frame 2 whole 14 ms after due: within a period of the schedule.
        for d in frame(2, 1_000, 1_200, PERIOD) {
            t.record(&d, PERIOD + 14_000_000);
        }
        // Frame 3 whole 16 ms after due: after the next frame's turn.
        for d in frame(3, 1_000, 1_200, 2 * PERIOD) {
            t.record(&d, 2 * PERIOD + 16_000_000);
        }
        let c = t.counts();
        assert_eq!((c.whole, c.late), (3, 1));
    }

    #[test]
    fn frames_left_behind_by_the_window_are_partial_and_old_numbers_are_not_new_frames() {
        let mut t = FrameTracker::new(PERIOD);
        t.record(&frame(1, 2_400, 1_200, 0)[0], 1);
        for id in 2..=WINDOW + 1 {
            for d in frame(id, 100, 1_200, 0) {
                t.record(&d, 2);
            }
        }
        // Frame 1 is now more than the window behind: given up.
        assert_eq!(t.counts().partial, 1);
        assert_eq!(t.open.len(), 0);
        // Its second half, or a whole frame named again, counts nowhere.
        t.record(&frame(1, 2_400, 1_200, 0)[1], 3);
        t.record(&frame(WINDOW, 100, 1_200, 0)[0], 3);
        let c = t.counts();
        assert_eq!((c.whole, c.partial, c.malformed), (u64::from(WINDOW), 1, 2));
        assert!(t.closed.len() <= WINDOW as usize);
    }

    #[test]
    fn a_first_write_after_the_arrival_is_counted_never_a_negative_latency() {
        let mut t = FrameTracker::new(PERIOD);
        for d in frame(1, 500, 1_200, 9_000_000) {
            t.record(&d, 1_000);
        }
        let c = t.counts();
        assert_eq!((c.whole, c.clock_ahead, c.latency_us.count), (1, 1, 0));
    }

    proptest! {
        /// Whatever a peer writes into the frame fields, the tracker's memory stays within
        /// its window, no frame counts more bytes than it declared, and every datagram is
        /// counted in a frame or as malformed.
        #[test]
        fn forged_fields_are_bounded_and_never_trusted(
            datagrams in proptest::collection::vec(
                (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>(), 56usize..1500, any::<u64>()),
                1..300,
            )
        ) {
            let mut t = FrameTracker::new(PERIOD);
            for (id, previous, bytes, remaining, first, len, arrival) in datagrams {
                let mut d = vec![0u8; len];
                FrameFields { id: id % 200, previous, bytes: bytes % 5_000, remaining: remaining % 5_000, first_write_ns: first, due_ns: first }
                    .write(&mut d);
                t.record(&d, arrival);
                prop_assert!(t.open.len() <= WINDOW as usize);
                prop_assert!(t.closed.len() <= WINDOW as usize + 1);
                prop_assert!(t.open.values().all(|f| f.got <= u64::from(f.bytes)));
            }
            let c = t.counts();
            prop_assert_eq!(c.latency_us.count + c.clock_ahead, c.whole);
        }
    }
}
