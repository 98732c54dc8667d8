//! A video sender's schedule: which frame is due, how large it is, and which of its
//! datagrams may go now (`--isochronous`, `app --pattern video`).
//!
//! Sans IO: the UDP loop gives it the time since the test's start and sends
//! what it plans; it is told how many the kernel took. A frame goes as a burst of
//! datagrams as large as the test's (the last shorter), or with the settings' gap between
//! them; a sender that comes back after a frame's time has passed skips it
//! (`linerate_model::video::FrameClock`).

use linerate_model::video::{FrameClock, FrameCounts, FrameSizes, VideoSettings};
use linerate_proto::video::{FrameFields, VIDEO_HEADER};

/// The frame being sent: its fields (`remaining` counts down as datagrams go) and when
/// its next datagram may go, nanoseconds from the start.
struct Current {
    fields: FrameFields,
    next_ns: u64,
    /// Its first datagram has gone to the kernel: `fields.first_write_ns` is when.
    written: bool,
}

pub(crate) struct FrameSender {
    clock: FrameClock,
    sizes: FrameSizes,
    gap_ns: u64,
    /// Bytes per datagram (the last of a frame may be shorter)...
    size: usize,
    /// ...but never shorter than the header and the frame's fields (iperf 2's, and with
    /// its `--trip-times` the test's start after them).
    least: usize,
    /// The sender's wall clock at the start, for the frames' due times.
    wall_base_ns: u64,
    /// When the schedule began, nanoseconds from the start: the sender's first turn. The
    /// test's start is also when worker 0 takes its first readings of the host (`/proc`),
    /// which would make every first frame late by what they cost.
    origin_ns: Option<u64>,
    current: Option<Current>,
    counts: FrameCounts,
    /// Each frame's first write after its due time.
    lateness: linerate_model::latency::LatencyHistogram,
}

impl FrameSender {
    /// A sender of `settings`' frames in datagrams of `size` bytes, none shorter than
    /// `least` (at least [`VIDEO_HEADER`]).
    pub(crate) fn new(
        settings: &VideoSettings,
        size: usize,
        least: usize,
        wall_base_ns: u64,
    ) -> FrameSender {
        let least = least.max(VIDEO_HEADER);
        let size = size.max(least);
        FrameSender {
            clock: FrameClock::new(settings.period_ns()),
            // A frame is at least one datagram's header.
            sizes: FrameSizes::new(settings, least as u32),
            gap_ns: u64::from(settings.gap_us) * 1_000,
            size,
            least,
            wall_base_ns,
            origin_ns: None,
            current: None,
            counts: FrameCounts::default(),
            lateness: linerate_model::latency::LatencyHistogram::new(),
        }
    }

    /// The datagrams that may go at `elapsed_ns` from the start, at most `most`: each one's
    /// length and frame fields, into `out`. `Err` with the time (from the start) at which
    /// the next may go when none may now.
    pub(crate) fn plan(
        &mut self,
        elapsed_ns: u64,
        most: usize,
        out: &mut Vec<(usize, FrameFields)>,
    ) -> Result<(), u64> {
        out.clear();
        let origin = *self.origin_ns.get_or_insert(elapsed_ns);
        if self.current.is_none() {
            let Some(mut due) = self.clock.due(elapsed_ns - origin) else {
                return Err(origin + self.clock.next_due_ns());
            };
            due.due_ns += origin;
            let bytes = self.sizes.next_bytes(due.id);
            self.counts.sent += 1;
            self.current = Some(Current {
                fields: FrameFields {
                    id: due.id,
                    previous: due.previous,
                    bytes,
                    remaining: bytes,
                    first_write_ns: self.wall_base_ns + elapsed_ns,
                    due_ns: self.wall_base_ns + due.due_ns,
                },
                next_ns: elapsed_ns,
                written: false,
            });
        }
        let current = self.current.as_ref().expect("a frame is being sent");
        if elapsed_ns < current.next_ns {
            return Err(current.next_ns);
        }
        let most = if self.gap_ns > 0 { 1 } else { most };
        let mut fields = current.fields;
        while out.len() < most && fields.remaining > 0 {
            // Every datagram carries the frame's fields: one that would leave a last
            // shorter than them leaves exactly them instead (a frame is never shorter).
            let remaining = fields.remaining as usize;
            let len = if remaining <= self.size {
                remaining
            } else {
                self.size.min(remaining - self.least)
            };
            out.push((len, fields));
            fields.remaining -= len as u32;
        }
        Ok(())
    }

    /// The datagrams planned are about to go to the kernel at `write_ns` (wall clock):
    /// where they begin their frame, that is its first write, and `true` says the
    /// planned datagrams must carry it.
    pub(crate) fn first_written(&mut self, write_ns: u64) -> bool {
        match self.current.as_mut() {
            Some(current) if !current.written => {
                current.fields.first_write_ns = write_ns;
                current.written = true;
                let late_ns = write_ns.saturating_sub(current.fields.due_ns);
                self.lateness.record(late_ns);
                let late_us = late_ns / 1_000;
                self.counts.start_late_max_us = self.counts.start_late_max_us.max(late_us);
                true
            }
            _ => false,
        }
    }

    /// The first `taken` of the datagrams last planned went at `elapsed_ns`.
    pub(crate) fn sent(&mut self, planned: &[(usize, FrameFields)], taken: usize, elapsed_ns: u64) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        let bytes: usize = planned[..taken].iter().map(|(len, _)| len).sum();
        current.fields.remaining -= bytes as u32;
        current.next_ns = elapsed_ns + self.gap_ns;
        if current.fields.remaining == 0 {
            self.current = None;
        }
    }

    /// Nanoseconds from one frame's due time to the next's.
    pub(crate) fn period_ns(&self) -> u64 {
        self.clock.period_ns()
    }

    pub(crate) fn counts(&self) -> FrameCounts {
        FrameCounts {
            skipped: self.clock.skipped,
            slips: self.clock.slips,
            cut: self.sizes.cut,
            start_late_us: self.lateness.summary(true),
            ..self.counts.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(spec: &str, gap_us: u32) -> VideoSettings {
        VideoSettings {
            gap_us,
            ..VideoSettings::parse(spec).unwrap()
        }
    }

    /// 100 frames a second of 2,500 bytes (2 Mbit/s) in 1,000-byte datagrams: each frame
    /// is two full datagrams and one of 500 at its due time, its fields counting down.
    #[test]
    fn a_frame_goes_as_a_burst_at_its_due_time() {
        let mut sender = FrameSender::new(&settings("100:2m", 0), 1_000, VIDEO_HEADER, 5_000);
        let mut out = Vec::new();
        sender.plan(0, 64, &mut out).unwrap();
        let lens: Vec<usize> = out.iter().map(|(l, _)| *l).collect();
        assert_eq!(lens, [1_000, 1_000, 500]);
        let remaining: Vec<u32> = out.iter().map(|(_, f)| f.remaining).collect();
        assert_eq!(remaining, [2_500, 1_500, 500]);
        assert!(out
            .iter()
            .all(|(_, f)| f.id == 1 && f.bytes == 2_500 && f.due_ns == 5_000));
        let planned = out.clone();
        // Its first write is when the first datagram goes, once; the rest carry it.
        assert!(sender.first_written(5_010));
        assert!(!sender.first_written(5_020));
        sender.sent(&planned, 3, 10);
        assert_eq!(sender.plan(20, 64, &mut out), Err(10_000_000));
        sender.plan(10_000_100, 64, &mut out).unwrap();
        assert_eq!((out[0].1.id, out[0].1.previous), (2, 1));
        assert_eq!(out[0].1.first_write_ns, 5_000 + 10_000_100);
        assert_eq!(sender.counts().start_late_max_us, 0);
        assert!(sender.first_written(5_000 + 10_300_000));
        assert_eq!(sender.counts().start_late_max_us, 300);
    }

    /// A frame that would end in a datagram shorter than the frame fields ends in one that
    /// holds them: 2,030 bytes in 1,000-byte datagrams go as 1,000, 974 and 56.
    #[test]
    fn every_datagram_of_a_frame_holds_its_fields() {
        let mut sender = FrameSender::new(&settings("100:1624k", 0), 1_000, VIDEO_HEADER, 0);
        let mut out = Vec::new();
        sender.plan(0, 64, &mut out).unwrap();
        let lens: Vec<usize> = out.iter().map(|(l, _)| *l).collect();
        assert_eq!(lens, [1_000, 974, 56]);
    }

    /// The schedule begins at the sender's first turn (7 ms after the test's start here):
    /// frame 1 is due then, frame 2 a period later, and neither is late.
    #[test]
    fn the_schedule_begins_at_the_senders_first_turn() {
        let mut sender = FrameSender::new(&settings("100:2m", 0), 3_000, VIDEO_HEADER, 0);
        let mut out = Vec::new();
        sender.plan(7_000_000, 64, &mut out).unwrap();
        assert_eq!(out[0].1.due_ns, 7_000_000);
        assert!(sender.first_written(7_000_000));
        let planned = out.clone();
        sender.sent(&planned, 1, 7_000_000);
        assert_eq!(sender.plan(16_000_000, 64, &mut out), Err(17_000_000));
        sender.plan(17_000_000, 64, &mut out).unwrap();
        assert_eq!((out[0].1.id, out[0].1.due_ns), (2, 17_000_000));
        assert_eq!(sender.counts().start_late_max_us, 0);
    }

    /// A kernel that takes part of a burst leaves the rest for the next call; a gap sends
    /// one datagram at a time.
    #[test]
    fn a_partly_taken_burst_goes_on_and_a_gap_spaces_the_datagrams() {
        let mut sender = FrameSender::new(&settings("100:2m", 0), 1_000, VIDEO_HEADER, 0);
        let mut out = Vec::new();
        sender.plan(0, 64, &mut out).unwrap();
        let planned = out.clone();
        sender.sent(&planned, 1, 0);
        sender.plan(1, 64, &mut out).unwrap();
        assert_eq!(
            out.iter().map(|(_, f)| f.remaining).collect::<Vec<_>>(),
            [1_500, 500]
        );

        let mut spaced = FrameSender::new(&settings("100:2m", 300), 1_000, VIDEO_HEADER, 0);
        spaced.plan(0, 64, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let planned = out.clone();
        spaced.sent(&planned, 1, 0);
        assert_eq!(spaced.plan(100_000, 64, &mut out), Err(300_000));
        spaced.plan(300_000, 64, &mut out).unwrap();
        assert_eq!(out[0].1.remaining, 1_500);
    }

    /// A sender back 35 ms into a 10 ms schedule skips frames 2 to 3 and sends frame 4;
    /// its lateness is its first write's, not its plan's.
    #[test]
    fn a_late_sender_skips_frames_and_says_how_late_it_started() {
        let mut sender = FrameSender::new(&settings("100:2m", 0), 3_000, VIDEO_HEADER, 0);
        let mut out = Vec::new();
        sender.plan(0, 64, &mut out).unwrap();
        let planned = out.clone();
        sender.sent(&planned, 1, 0);
        sender.plan(35_000_000, 64, &mut out).unwrap();
        assert_eq!((out[0].1.id, out[0].1.previous), (4, 1));
        // Its first datagram goes to the kernel at 35.2 ms: 5.2 ms after its due time.
        assert!(sender.first_written(35_200_000));
        let c = sender.counts();
        assert_eq!(
            (c.sent, c.skipped, c.slips, c.start_late_max_us),
            (2, 2, 1, 5_200)
        );
    }
}
