//! iperf 2's bursts over TCP, sans IO (`linerate iperf2 -c` with `--trip-times` or
//! `--isochronous`, docs/iperf2.md): each write a sending flow makes begins with its send
//! time and its size, and under `--isochronous` each frame is one such write, begun at its
//! due time with its number and period, its size drawn as a UDP frame's is
//! ([`linerate_proto::iperf2::BurstWriter`] writes the fields). The worker asks which bytes
//! go next and says how many the socket took; a burst is never cut by the next: a frame
//! still going at the next's due time delays it, and one whose time passed is skipped
//! (iperf 2's slips).

use linerate_model::video::{FrameClock, FrameCounts, FrameSizes, VideoSettings};
use linerate_proto::iperf2::{BurstWriter, BURST_FIELDS_LEN};

/// What a test's sending flows write as iperf 2's bursts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpBursts {
    /// `--isochronous`: a frame each period, a burst each; `None`: each write of the
    /// test's length a burst (`--trip-times`).
    pub frames: Option<VideoSettings>,
}

struct Frames {
    clock: FrameClock,
    sizes: FrameSizes,
    sent: u64,
}

pub(crate) struct BurstSender {
    writer: BurstWriter,
    frames: Option<Frames>,
    /// A plain write's size.
    length: usize,
    /// The burst under way, and how much of it the socket took.
    buffer: Vec<u8>,
    written: usize,
}

impl BurstSender {
    /// A sender of `bursts` whose frame clock starts at `wall_start_ns` (the wall clock at
    /// the test's start, carried in every burst), plain writes of `length` bytes.
    pub(crate) fn new(bursts: &TcpBursts, length: usize, wall_start_ns: u64) -> BurstSender {
        let frames = bursts.frames.map(|settings| Frames {
            clock: FrameClock::new(settings.period_ns()),
            sizes: FrameSizes::new(&settings, BURST_FIELDS_LEN as u32),
            sent: 0,
        });
        let period_us = bursts.frames.map_or(0, |f| {
            (f.period_ns() / 1_000).min(u64::from(u32::MAX)) as u32
        });
        BurstSender {
            writer: BurstWriter::new(wall_start_ns, period_us),
            frames,
            length: length.max(BURST_FIELDS_LEN),
            buffer: Vec::new(),
            written: 0,
        }
    }

    fn under_way(&self) -> bool {
        self.written < self.buffer.len()
    }

    /// When the next burst may begin, nanoseconds from the start, where that is after
    /// `elapsed_ns` (frames wait for their due time); `None`: bytes may go now.
    pub(crate) fn not_before(&self, elapsed_ns: u64) -> Option<u64> {
        if self.under_way() {
            return None;
        }
        let next = self.frames.as_ref()?.clock.next_due_ns();
        (elapsed_ns < next).then_some(next)
    }

    /// The bytes to write next: the rest of the burst under way, or a new one begun at
    /// `write_ns` (wall clock) where one is due at `elapsed_ns`; empty when none is.
    pub(crate) fn pending(&mut self, elapsed_ns: u64, write_ns: u64) -> &[u8] {
        if !self.under_way() {
            let (id, size) = match self.frames.as_mut() {
                Some(frames) => match frames.clock.due(elapsed_ns) {
                    Some(due) => {
                        frames.sent += 1;
                        (Some(due.id), frames.sizes.next_bytes(due.id) as usize)
                    }
                    None => return &[],
                },
                None => (None, self.length),
            };
            let size = size.max(BURST_FIELDS_LEN);
            self.buffer.resize(size, 0);
            let fields = self
                .writer
                .fields(id, u32::try_from(size).unwrap_or(u32::MAX), write_ns);
            self.buffer[..BURST_FIELDS_LEN].copy_from_slice(&fields);
            self.written = 0;
        }
        &self.buffer[self.written..]
    }

    /// The socket took `n` of the bytes [`BurstSender::pending`] gave.
    pub(crate) fn wrote(&mut self, n: usize) {
        self.written = (self.written + n).min(self.buffer.len());
    }

    /// The frames sent, skipped and slipped (`--isochronous`).
    pub(crate) fn counts(&self) -> Option<FrameCounts> {
        self.frames.as_ref().map(|frames| FrameCounts {
            sent: frames.sent,
            skipped: frames.clock.skipped,
            slips: frames.clock.slips,
            cut: frames.sizes.cut,
            ..FrameCounts::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_proto::iperf2::BurstTracker;

    const MS: u64 = 1_000_000;

    /// Plain writes: each of the test's length, begun with its fields, its send time the
    /// one given as it began; a write the socket took in pieces is one burst.
    #[test]
    fn each_write_is_a_burst_of_the_tests_length() {
        let start = 1_796_000_000_000_000_000u64;
        let mut sender = BurstSender::new(&TcpBursts { frames: None }, 1_000, start);
        assert_eq!(sender.not_before(0), None);
        let mut stream = linerate_proto::iperf2::start_extension(start).to_vec();
        let first = sender.pending(0, start + MS).to_vec();
        assert_eq!(first.len(), 1_000);
        stream.extend(&first[..400]);
        sender.wrote(400);
        let rest = sender.pending(5 * MS, start + 5 * MS).to_vec();
        assert_eq!(rest.len(), 600, "the rest of the same burst");
        stream.extend(&rest);
        sender.wrote(600);
        stream.extend(sender.pending(6 * MS, start + 6 * MS).to_vec());
        sender.wrote(1_000);
        let mut served = BurstTracker::after_header();
        served.feed(&stream, start + 10 * MS);
        let transit = served.transit().expect("two writes timed");
        assert_eq!(transit.count, 2);
        // Timed from when each began: 9 ms and 4 ms.
        assert!((transit.max_ns - 9e6).abs() < 1.0, "{transit:?}");
        assert!((transit.min_ns - 4e6).abs() < 1.0, "{transit:?}");
        assert_eq!(sender.counts(), None);
    }

    /// Frames: one burst each at its due time, nothing between; a frame still going at
    /// the next's due time holds it back, and a sender back after two periods skips the
    /// frame whose time passed (a slip); a served tracker reads them back as frames.
    #[test]
    fn frames_go_at_their_due_times_and_a_late_sender_skips() {
        let start = 1_796_000_000_000_000_000u64;
        let frames = VideoSettings::parse("100:2m").unwrap();
        let mut sender = BurstSender::new(
            &TcpBursts {
                frames: Some(frames),
            },
            128 * 1024,
            start,
        );
        let mut stream = linerate_proto::iperf2::start_extension(start).to_vec();
        let one = sender.pending(0, start).to_vec();
        assert_eq!(one.len(), 2_500, "2 Mbit/s at 100 a second");
        stream.extend(&one[..1_000]);
        sender.wrote(1_000);
        // At the next frame's time the first is still going: its rest, no new frame.
        let rest = sender.pending(10 * MS, start + 10 * MS).to_vec();
        assert_eq!(rest.len(), 1_500);
        stream.extend(&rest);
        sender.wrote(1_500);
        assert_eq!(sender.not_before(10 * MS), None, "frame 2 is due");
        let two = sender.pending(10 * MS, start + 10 * MS).to_vec();
        stream.extend(&two);
        sender.wrote(two.len());
        assert_eq!(sender.not_before(12 * MS), Some(20 * MS));
        assert!(sender.pending(12 * MS, start + 12 * MS).is_empty());
        // Back at 41 ms: frames 3 and 4's times passed; frame 5 goes.
        let five = sender.pending(41 * MS, start + 41 * MS).to_vec();
        stream.extend(&five);
        sender.wrote(five.len());
        let counts = sender.counts().unwrap();
        assert_eq!((counts.sent, counts.skipped, counts.slips), (3, 2, 1));
        let test = BurstTracker::isochronous();
        let mut served = test.for_a_connection();
        served.feed(&stream, start + 45 * MS);
        let read = served.frames().unwrap().counts();
        assert_eq!(read.whole, 3, "{read:?}");
    }
}
