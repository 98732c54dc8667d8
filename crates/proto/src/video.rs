//! A video test's frames on the wire and at the receiver (docs/protocol.md 5, docs/app.md).
//!
//! Every datagram of a video flow (`--isochronous`, `app --pattern video`) carries, after
//! linerate's 24-byte header (docs/protocol.md 5), its frame's fields in network byte order:
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

    /// iperf 2's frame fields in its UDP datagrams (`--isochronous`), after its datagram
    /// header, client header and UDP test header: read from 2.1.8's datagrams on the wire
    /// (`iperf2_isochronous_fields_read_as_2_1_8_writes_them`).
    pub mod iperf2 {
        use std::ops::Range;
        /// The datagram's send time in iperf 2's datagram header (seconds, microseconds
        /// of the wall clock; the datagram framing reads the same words).
        pub const SENT_SECONDS: Range<usize> = 4..8;
        pub const SENT_MICROS: Range<usize> = 8..12;
        pub const PERIOD_US: Range<usize> = 76..80;
        pub const START_SECONDS: Range<usize> = 80..84;
        pub const START_MICROS: Range<usize> = 84..88;
        pub const PREVIOUS: Range<usize> = 88..92;
        pub const ID: Range<usize> = 92..96;
        pub const BYTES: Range<usize> = 96..100;
        pub const REMAINING: Range<usize> = 100..104;
    }

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

/// Whose frame fields a flow's datagrams carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameWire {
    /// linerate's (the table above).
    Native,
    /// iperf 2's (`iperf -u --isochronous`): the frame's number, the previous one's, its
    /// bytes and the bytes left, the period and the stream's start, from which a frame's
    /// due time is the start plus a period a frame before it. iperf 2 says no frame's
    /// first write: its latency counts from its due time, as iperf 2's own server counts
    /// it. Its first datagram (the test's header) carries none (frame 0).
    Iperf2,
}

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

impl FrameWire {
    /// The shortest datagram that carries the fields: linerate's header and its fields,
    /// or iperf 2's numbers, client header and fields.
    pub fn header_len(self) -> usize {
        match self {
            FrameWire::Native => VIDEO_HEADER,
            FrameWire::Iperf2 => field::iperf2::REMAINING.end,
        }
    }
}

impl FrameFields {
    /// Writes the fields into `datagram` as `wire` carries them, for a stream of frames
    /// `period_ns` apart. iperf 2's say the stream's start (frame 1's due time) and the
    /// period in whole microseconds, and no first write.
    pub fn write_on(&self, wire: FrameWire, datagram: &mut [u8], period_ns: u64) {
        use field::iperf2 as at;
        match wire {
            FrameWire::Native => self.write(datagram),
            FrameWire::Iperf2 => {
                let start_ns = self
                    .due_ns
                    .saturating_sub(period_ns * u64::from(self.id.saturating_sub(1)));
                let put = |d: &mut [u8], at: std::ops::Range<usize>, v: u32| {
                    d[at].copy_from_slice(&v.to_be_bytes())
                };
                put(datagram, at::PERIOD_US, (period_ns / 1_000) as u32);
                put(
                    datagram,
                    at::START_SECONDS,
                    (start_ns / 1_000_000_000) as u32,
                );
                put(
                    datagram,
                    at::START_MICROS,
                    ((start_ns % 1_000_000_000) / 1_000) as u32,
                );
                put(datagram, at::PREVIOUS, self.previous);
                put(datagram, at::ID, self.id);
                put(datagram, at::BYTES, self.bytes);
                put(datagram, at::REMAINING, self.remaining);
            }
        }
    }

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
        FrameFields {
            id: u32_at(datagram, field::ID),
            previous: u32_at(datagram, field::PREVIOUS),
            bytes: u32_at(datagram, field::BYTES),
            remaining: u32_at(datagram, field::REMAINING),
            first_write_ns: u64_at(datagram, field::FIRST_WRITE_NS),
            due_ns: u64_at(datagram, field::DUE_NS),
        }
        .sane(datagram.len())
    }

    /// The frame fields of an iperf 2 datagram and its frame period in nanoseconds, if
    /// they make sense as [`FrameFields::read`]'s do and the period is one of a frame
    /// rate linerate sends (1/60 to 1,000 a second); `None` also for iperf 2's first
    /// datagram (frame 0).
    pub fn read_iperf2(datagram: &[u8]) -> Option<(FrameFields, u64)> {
        use field::iperf2 as at;
        if datagram.len() < at::REMAINING.end {
            return None;
        }
        let period_ns = u64::from(u32_at(datagram, at::PERIOD_US)) * 1_000;
        let fastest = (1e9 / linerate_model::video::MAX_FPS) as u64;
        let slowest = (1e9 / linerate_model::video::MIN_FPS) as u64;
        if !(fastest..=slowest).contains(&period_ns) {
            return None;
        }
        let start_ns = u64::from(u32_at(datagram, at::START_SECONDS)) * 1_000_000_000
            + u64::from(u32_at(datagram, at::START_MICROS).min(999_999)) * 1_000;
        let id = u32_at(datagram, at::ID);
        let due_ns = start_ns + period_ns * u64::from(id.saturating_sub(1));
        let (bytes, remaining) = (u32_at(datagram, at::BYTES), u32_at(datagram, at::REMAINING));
        // Every iperf 2 datagram carries its send time: a frame's first (all its bytes
        // still to go) says when the frame began. Not its due time: the stream's start is
        // when 2.1.8 sent its first frame, after its frame clock began, so every later
        // frame is due that much early by it (a CI run read 59 of 60 frames arriving
        // before their due time). Any other datagram says nothing of it.
        let sent_ns = u64::from(u32_at(datagram, at::SENT_SECONDS)) * 1_000_000_000
            + u64::from(u32_at(datagram, at::SENT_MICROS).min(999_999)) * 1_000;
        let fields = FrameFields {
            id,
            previous: u32_at(datagram, at::PREVIOUS),
            bytes,
            remaining,
            first_write_ns: if remaining == bytes {
                sent_ns
            } else {
                u64::MAX
            },
            due_ns,
        };
        Some((fields.sane(datagram.len())?, period_ns))
    }

    fn sane(self, len: usize) -> Option<FrameFields> {
        let fields = self;
        let sane = fields.id > 0
            && fields.previous < fields.id
            && (1..=MAX_FRAME_BYTES).contains(&fields.bytes)
            && fields.remaining <= fields.bytes
            && len as u64 <= u64::from(fields.remaining);
        sane.then_some(fields)
    }
}

fn u32_at(datagram: &[u8], at: std::ops::Range<usize>) -> u32 {
    u32::from_be_bytes(datagram[at].try_into().expect("four bytes"))
}

fn u64_at(datagram: &[u8], at: std::ops::Range<usize>) -> u64 {
    u64::from_be_bytes(datagram[at].try_into().expect("eight bytes"))
}

/// A frame as a byte stream's burst header says it (iperf 2's TCP `--isochronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamFrame {
    /// The sender's frame clock's tick it was sent on, from 1.
    pub id: u32,
    pub period_ns: u64,
    /// The stream's start (Unix ns, the sender's clock): frame N is due N - 1 periods on.
    pub start_ns: u64,
    pub bytes: u32,
    /// Its first write's send time (Unix ns, the sender's clock).
    pub sent_ns: u64,
}

#[derive(Debug, Clone)]
struct OpenFrame {
    /// Its size; 0 for an iperf 2 frame until a piece before its tail says it.
    bytes: u32,
    got: u64,
    first_write_ns: u64,
    due_ns: u64,
    last_arrival_ns: u64,
    /// iperf 2: the pieces before the tail that arrived, their length, and whether the
    /// tail (the datagram whose remaining bytes are its own) has.
    pieces: u32,
    piece_len: u64,
    tail: bool,
    /// Its size is among the sizes declared.
    declared: bool,
}

/// What a datagram did to its frame.
enum Piece {
    Malformed,
    Taken,
    Whole,
}

impl OpenFrame {
    /// Takes one datagram of `len` bytes with `fields` into the frame.
    ///
    /// iperf 2 sends a frame as datagrams of its length while more than one datagram's
    /// worth remains, then a tail that says only itself (2.1.8: a frame of 24,999 bytes
    /// goes as 17 datagrams of 1,470 and one of 108 whose size and remaining bytes are
    /// 108): its frame is whole with the tail and every piece before it, as many as its
    /// size leaves more than a datagram's worth behind. A frame whose pieces all miss but
    /// its tail, or come after it, cannot be told from a frame of the tail's size.
    fn take(&mut self, wire: FrameWire, fields: &FrameFields, len: u64) -> Piece {
        match wire {
            FrameWire::Native => {
                if self.bytes != fields.bytes || self.got + len > u64::from(self.bytes) {
                    return Piece::Malformed;
                }
                self.got += len;
            }
            FrameWire::Iperf2 if u64::from(fields.remaining) == len => {
                if self.tail {
                    return Piece::Malformed;
                }
                self.tail = true;
                self.got += len;
            }
            FrameWire::Iperf2 => {
                if self.piece_len == 0 {
                    (self.bytes, self.piece_len) = (fields.bytes, len);
                }
                if fields.bytes != self.bytes
                    || len != self.piece_len
                    || self.pieces >= self.pieces_before_tail()
                {
                    return Piece::Malformed;
                }
                self.pieces += 1;
                self.got += len;
            }
        }
        let whole = match wire {
            FrameWire::Native => self.got == u64::from(self.bytes),
            FrameWire::Iperf2 => self.tail && self.pieces == self.pieces_before_tail(),
        };
        if whole {
            Piece::Whole
        } else {
            Piece::Taken
        }
    }

    /// iperf 2: the datagrams of its length a frame of `bytes` goes as before its tail.
    fn pieces_before_tail(&self) -> u32 {
        match (u64::from(self.bytes), self.piece_len) {
            (0, _) | (_, 0) => 0,
            (bytes, len) => (bytes.saturating_sub(len).div_ceil(len)) as u32,
        }
    }
}

/// One video flow's frames as they arrive.
#[derive(Debug, Clone)]
pub struct FrameTracker {
    wire: FrameWire,
    /// 0 until an iperf 2 stream's first frame says it.
    period_ns: u64,
    /// The frames as their sender numbered them: the highest number seen, and the numbers
    /// the sender said it skipped (a frame's previous number short of one before it).
    numbered: u32,
    skipped_by_sender: u64,
    /// The sizes the frames declared (their count, sum and sum of squares): an iperf 2
    /// stream's load, which its header does not say.
    declared: (u64, f64, f64),
    open: BTreeMap<u32, OpenFrame>,
    /// Frames closed (whole or given up) within [`WINDOW`] of the newest: a datagram that
    /// names one again is not a new frame.
    closed: BTreeSet<u32>,
    newest: u32,
    /// The player's schedule, set by the first whole frame: its last byte's arrival less
    /// its due time (any offset between the clocks is in it, and cancels).
    playout_ns: Option<i128>,
    latency: LatencyHistogram,
    /// The stream's key frames (`--key-frames`: the frames their numbers make key), and
    /// their own latency beside every frame's.
    key_frames: Option<linerate_model::video::KeyFrames>,
    key_latency: LatencyHistogram,
    counts: FrameCounts,
}

impl FrameTracker {
    pub fn new(period_ns: u64) -> FrameTracker {
        FrameTracker::on(FrameWire::Native, period_ns)
    }

    /// Also counts the key frames `key` makes of the stream's numbers apart: their own
    /// whole count and latency (a key frame is several times the others' size).
    pub fn with_key_frames(
        mut self,
        key: Option<linerate_model::video::KeyFrames>,
    ) -> FrameTracker {
        self.key_frames = key;
        self
    }

    /// Frames of an iperf 2 stream: their period learnt from their first frame.
    pub fn iperf2() -> FrameTracker {
        FrameTracker::on(FrameWire::Iperf2, 0)
    }

    fn on(wire: FrameWire, period_ns: u64) -> FrameTracker {
        FrameTracker {
            wire,
            period_ns,
            numbered: 0,
            skipped_by_sender: 0,
            declared: (0, 0.0, 0.0),
            open: BTreeMap::new(),
            closed: BTreeSet::new(),
            newest: 0,
            playout_ns: None,
            latency: LatencyHistogram::new(),
            key_frames: None,
            key_latency: LatencyHistogram::new(),
            counts: FrameCounts::default(),
        }
    }

    /// Counts one distinct datagram (the sequence tracker has already set duplicates and
    /// other flows' datagrams aside) that arrived at `arrival_ns` (receiver's wall clock).
    pub fn record(&mut self, datagram: &[u8], arrival_ns: u64) {
        let fields = match self.wire {
            FrameWire::Native => FrameFields::read(datagram),
            // iperf 2's first datagram is its test's header, of no frame.
            FrameWire::Iperf2
                if datagram.len() >= field::iperf2::ID.end
                    && u32_at(datagram, field::iperf2::ID) == 0 =>
            {
                return
            }
            FrameWire::Iperf2 => FrameFields::read_iperf2(datagram).map(|(fields, period)| {
                // The period of the stream's first frame is the stream's.
                if self.period_ns == 0 {
                    self.period_ns = period;
                }
                fields
            }),
        };
        let Some(fields) = fields else {
            self.counts.malformed += 1;
            return;
        };
        if self.closed.contains(&fields.id) || fields.id.saturating_add(WINDOW) <= self.newest {
            // A frame already whole or given up: nothing it carries can change it.
            self.counts.malformed += 1;
            return;
        }
        if fields.id > self.numbered {
            let said_skipped = fields.id - 1 - fields.previous.max(self.numbered);
            self.skipped_by_sender += u64::from(said_skipped);
            self.numbered = fields.id;
        }
        let len = datagram.len() as u64;
        let wire = self.wire;
        let frame = self.open.entry(fields.id).or_insert(OpenFrame {
            // An iperf 2 tail says only its own size.
            bytes: match wire {
                FrameWire::Iperf2 if u64::from(fields.remaining) == len => 0,
                _ => fields.bytes,
            },
            got: 0,
            first_write_ns: fields.first_write_ns,
            due_ns: fields.due_ns,
            last_arrival_ns: arrival_ns,
            pieces: 0,
            piece_len: 0,
            tail: false,
            declared: false,
        });
        let piece = frame.take(wire, &fields, len);
        frame.last_arrival_ns = frame.last_arrival_ns.max(arrival_ns);
        // A frame's first write is its first datagram's (iperf 2's others say none).
        frame.first_write_ns = frame.first_write_ns.min(fields.first_write_ns);
        if frame.bytes > 0 && !frame.declared {
            frame.declared = true;
            let bytes = f64::from(frame.bytes);
            self.declared = (
                self.declared.0 + 1,
                self.declared.1 + bytes,
                self.declared.2 + bytes * bytes,
            );
        }
        match piece {
            Piece::Malformed => {
                self.counts.malformed += 1;
                return;
            }
            Piece::Taken => {}
            Piece::Whole => {}
        }
        if let Piece::Whole = piece {
            let whole = self
                .open
                .remove(&fields.id)
                .expect("the frame just counted");
            self.close_whole(fields.id, &whole);
            self.closed.insert(fields.id);
        }
        if fields.id > self.newest {
            self.newest = fields.id;
            self.give_up_before(self.newest.saturating_sub(WINDOW - 1));
        }
    }

    /// A frame that arrived whole over a byte stream (iperf 2's `--isochronous` over TCP:
    /// each frame one burst whose first bytes say its number, size, period, the stream's
    /// start and its first write's send time), its last byte read at `arrival_ns`. The
    /// number is the sender's frame clock's tick, so a number past the next says the
    /// sender skipped the ticks between. A number already seen, or out of the window, is
    /// counted as malformed.
    pub fn whole_frame(&mut self, frame: &StreamFrame, arrival_ns: u64) {
        let fastest = (1e9 / linerate_model::video::MAX_FPS) as u64;
        let slowest = (1e9 / linerate_model::video::MIN_FPS) as u64;
        let sane = frame.id > 0 && (fastest..=slowest).contains(&frame.period_ns);
        if !sane
            || self.closed.contains(&frame.id)
            || frame.id.saturating_add(WINDOW) <= self.newest
        {
            self.counts.malformed += 1;
            return;
        }
        if self.period_ns == 0 {
            self.period_ns = frame.period_ns;
        }
        if frame.id > self.numbered {
            self.skipped_by_sender += u64::from(frame.id - 1 - self.numbered);
            self.numbered = frame.id;
        }
        let bytes = f64::from(frame.bytes);
        self.declared = (
            self.declared.0 + 1,
            self.declared.1 + bytes,
            self.declared.2 + bytes * bytes,
        );
        self.close_whole(
            frame.id,
            &OpenFrame {
                bytes: frame.bytes,
                got: u64::from(frame.bytes),
                first_write_ns: frame.sent_ns,
                due_ns: frame.start_ns + self.period_ns * u64::from(frame.id - 1),
                last_arrival_ns: arrival_ns,
                pieces: 0,
                piece_len: 0,
                tail: true,
                declared: true,
            },
        );
        self.closed.insert(frame.id);
        if frame.id > self.newest {
            self.newest = frame.id;
            self.give_up_before(self.newest.saturating_sub(WINDOW - 1));
        }
    }

    /// A frame of a byte stream begun and never read whole (its connection ended).
    pub fn partial_frame(&mut self) {
        self.counts.partial += 1;
    }

    /// Joins another stream's frames (another connection of the same test, each with its
    /// own numbers) into these, once both have ended: counts and latencies add up.
    pub fn merge(&mut self, other: &FrameTracker) {
        if self.period_ns == 0 {
            self.period_ns = other.period_ns;
        }
        self.numbered += other.numbered;
        self.skipped_by_sender += other.skipped_by_sender;
        self.declared = (
            self.declared.0 + other.declared.0,
            self.declared.1 + other.declared.1,
            self.declared.2 + other.declared.2,
        );
        let theirs = other.counts();
        let c = &mut self.counts;
        c.whole += theirs.whole;
        c.partial += theirs.partial;
        c.late += theirs.late;
        c.malformed += theirs.malformed;
        c.clock_ahead += theirs.clock_ahead;
        c.largest_whole_bytes = c.largest_whole_bytes.max(theirs.largest_whole_bytes);
        c.key_whole += theirs.key_whole;
        self.latency.merge(&other.latency);
        self.key_latency.merge(&other.key_latency);
    }

    fn close_whole(&mut self, id: u32, frame: &OpenFrame) {
        self.counts.whole += 1;
        self.counts.largest_whole_bytes = self.counts.largest_whole_bytes.max(frame.got);
        let key = self.key_frames.is_some_and(|k| k.is_key(id));
        self.counts.key_whole += u64::from(key);
        let latency = i128::from(frame.last_arrival_ns) - i128::from(frame.first_write_ns);
        match u64::try_from(latency) {
            Ok(ns) => {
                self.latency.record(ns);
                if key {
                    self.key_latency.record(ns);
                }
            }
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

    /// The frame period: as set, or as an iperf 2 stream's first frame said (0 before).
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The sender's side as its frames' numbers show it: frames it sent (the highest
    /// number less those it said it skipped) and skipped. For a sender that says nothing
    /// else of itself (iperf 2).
    pub fn numbered(&self) -> FrameCounts {
        FrameCounts {
            sent: u64::from(self.numbered).saturating_sub(self.skipped_by_sender),
            skipped: self.skipped_by_sender,
            ..FrameCounts::default()
        }
    }

    /// The mean and standard deviation of the frames' load, bits a second, from the sizes
    /// they declared, at `fps`.
    pub fn declared_load_bps(&self, fps: f64) -> (f64, f64) {
        let (n, sum, squares) = self.declared;
        if n == 0 {
            return (0.0, 0.0);
        }
        let mean = sum / n as f64;
        let variance = (squares / n as f64 - mean * mean).max(0.0);
        (mean * 8.0 * fps, variance.sqrt() * 8.0 * fps)
    }

    /// The counts so far, frames still open counted as partial; the latencies with their
    /// buckets, so that the ways' figures can be merged from every receiver's.
    pub fn counts(&self) -> FrameCounts {
        FrameCounts {
            partial: self.counts.partial + self.open.len() as u64,
            latency_us: self.latency.summary(true),
            key_latency_us: self.key_latency.summary(true),
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

    /// 2.1.8's stream start is its first frame's send, after its frame clock began: each
    /// later frame goes that lag before start + period x (k - 1). Each frame's latency
    /// counts from its first datagram's send time, so none reads as arriving before it
    /// was sent (counting from the due time read 4 of these 5 so).
    #[test]
    fn iperf2_frames_count_from_their_first_datagrams_send_time() {
        let (period_ns, start_ns, lag_ns) =
            (33_333_000u64, 1_700_000_000_000_000_000u64, 1_000_000);
        let mut t = FrameTracker::iperf2();
        for id in 1..=5u32 {
            let sent_ns = match id {
                1 => start_ns,
                k => start_ns - lag_ns + period_ns * u64::from(k - 1),
            };
            let mut d = vec![0u8; 500];
            let fields = FrameFields {
                id,
                previous: id - 1,
                bytes: 500,
                remaining: 500,
                first_write_ns: 0,
                due_ns: start_ns + period_ns * u64::from(id - 1),
            };
            fields.write_on(FrameWire::Iperf2, &mut d, period_ns);
            d[4..8].copy_from_slice(&((sent_ns / 1_000_000_000) as u32).to_be_bytes());
            d[8..12].copy_from_slice(&(((sent_ns % 1_000_000_000) / 1_000) as u32).to_be_bytes());
            t.record(&d, sent_ns + 200_000);
        }
        let c = t.counts();
        assert_eq!(
            (c.whole, c.clock_ahead, c.latency_us.count),
            (5, 0, 5),
            "{c:?}"
        );
        assert!((c.latency_us.min - 200.0).abs() < 1.0 && (c.latency_us.max - 200.0).abs() < 1.0);
    }

    /// The second datagram of `iperf -c HOST -u --isochronous=10:2m,0 -e` (2.1.8) as it
    /// crossed loopback: frame 1 of 24,999 bytes (2 Mbit/s over 10 frames a second), its
    /// first datagram, the period 100 ms; the first datagram (the header) has frame 0.
    #[test]
    fn iperf2_isochronous_fields_read_as_2_1_8_writes_them() {
        let words = "00000002 6b127542 000bf81d 00000000 680100d8 00000001 000015df 00000000 \
                     00000000 ffffff9c 00000000 00000000 00010000 00020001 00080003 00000000 \
                     00100000 00000000 00000000 000186a0 6b127542 000bf81d 00000000 00000001 \
                     000061a7 000061a7 00000000";
        let mut datagram: Vec<u8> = words
            .split_whitespace()
            .flat_map(|w| u32::from_str_radix(w, 16).unwrap().to_be_bytes())
            .collect();
        datagram.resize(1470, 0);
        let (fields, period_ns) = FrameFields::read_iperf2(&datagram).unwrap();
        assert_eq!(period_ns, 100_000_000);
        // Written back as iperf 2 carries them: the same words.
        let mut written = datagram.clone();
        written[76..104].fill(0);
        fields.write_on(FrameWire::Iperf2, &mut written, period_ns);
        assert_eq!(written, datagram);
        assert_eq!(FrameWire::Iperf2.header_len(), 104);
        let start_ns = 0x6b12_7542_u64 * 1_000_000_000 + 0x000b_f81d * 1_000;
        assert_eq!(
            fields,
            FrameFields {
                id: 1,
                previous: 0,
                bytes: 24_999,
                remaining: 24_999,
                first_write_ns: start_ns,
                due_ns: start_ns,
            }
        );
        // A tracker of iperf 2's frames learns the period, skips the header datagram, and
        // counts the frame whole from its due time; a datagram's forged period is refused.
        let mut t = FrameTracker::iperf2();
        let mut header = datagram.clone();
        header[92..96].copy_from_slice(&0u32.to_be_bytes());
        t.record(&header, start_ns);
        // As 2.1.8 sends it: 17 datagrams of 1,470 while more than 1,470 remain, then a
        // tail of 108 that says 108 of 108.
        let piece = |remaining: u32, bytes: u32, len: usize| {
            let mut d = datagram.clone();
            d.truncate(len);
            d[96..100].copy_from_slice(&bytes.to_be_bytes());
            d[100..104].copy_from_slice(&remaining.to_be_bytes());
            d
        };
        for k in 0..17 {
            t.record(
                &piece(24_999 - k * 1_470, 24_999, 1_470),
                start_ns + 6_000_000,
            );
            assert_eq!(t.counts().whole, 0);
        }
        t.record(&piece(108, 108, 108), start_ns + 7_000_000);
        let c = t.counts();
        assert_eq!((c.whole, c.malformed, t.period_ns()), (1, 0, 100_000_000));
        assert!(
            (c.latency_us.p50 - 7_000.0).abs() < 8.0,
            "{:?}",
            c.latency_us
        );
        assert_eq!((t.numbered().sent, t.numbered().skipped), (1, 0));
        let (mean, spread) = t.declared_load_bps(10.0);
        assert_eq!((mean, spread), (1_999_920.0, 0.0));
        datagram[76..80].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(FrameFields::read_iperf2(&datagram).is_none());
    }

    /// A sender's numbering: frames it said it skipped are not counted as sent.
    #[test]
    fn the_senders_numbering_counts_what_it_sent_and_skipped() {
        let mut t = FrameTracker::new(PERIOD);
        for (id, previous) in [(1, 0), (2, 1), (5, 2), (6, 5)] {
            let mut d = vec![0u8; 100];
            FrameFields {
                id,
                previous,
                bytes: 100,
                remaining: 100,
                first_write_ns: 0,
                due_ns: 0,
            }
            .write(&mut d);
            t.record(&d, 1);
        }
        assert_eq!((t.numbered().sent, t.numbered().skipped), (4, 2));
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
        assert_eq!(c.largest_whole_bytes, 3_000);
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

        /// The same of iperf 2's fields: forged periods, numbers, sizes and tails keep the
        /// tracker within its window, and no frame takes more pieces than its size has.
        #[test]
        fn forged_iperf2_fields_are_bounded_and_never_trusted(
            datagrams in proptest::collection::vec(
                (any::<[u32; 7]>(), 104usize..1500, any::<u64>()),
                1..300,
            )
        ) {
            let mut t = FrameTracker::iperf2();
            for (words, len, arrival) in datagrams {
                let mut d = vec![0u8; len];
                let [period, start, micros, previous, id, bytes, remaining] = words;
                for (at, word) in [period % 2_000_000, start, micros, previous, id % 200, bytes % 8_000, remaining % 8_000]
                    .into_iter()
                    .enumerate()
                {
                    d[76 + 4 * at..80 + 4 * at].copy_from_slice(&word.to_be_bytes());
                }
                t.record(&d, arrival);
                prop_assert!(t.open.len() <= WINDOW as usize);
                prop_assert!(t.open.values().all(|f| f.pieces <= f.pieces_before_tail()));
            }
            let c = t.counts();
            prop_assert_eq!(c.latency_us.count + c.clock_ahead, c.whole);
        }
    }
}
