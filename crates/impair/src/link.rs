//! One direction of an emulated path: a sans-IO delay line with loss, duplication,
//! corruption, reordering, a rate limit and a drop-tail queue (docs/impair.md 3).
//!
//! Calling order, for each direction:
//! 1. [`Link::handle_arrival`]`(now, frame)` for every frame that entered the emulator;
//! 2. [`Link::poll_departure`]`(now)` until it returns `None`: frames due to leave, in order;
//! 3. [`Link::poll_timeout`]: when the next frame is due; wait until then or until more
//!    frames arrive, then start again.
//!
//! Time is nanoseconds on one monotonic clock the caller reads; randomness comes from a
//! ChaCha8 generator seeded by the caller, so a seed repeats a run's drop pattern for the
//! same arrivals. Every step is O(1) per frame: the delay line is a FIFO of timestamped
//! frames (the exit time of a frame is never earlier than that of the frame before it),
//! the rate limit is the time the bottleneck becomes free, and the queue's occupancy is
//! derived from that time rather than kept in a second structure.

use crate::aqm::ManagedQueue;
use crate::frame_log::{Fate, FrameRecord, Recorder};
use crate::spec::LinkSpec;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

pub use crate::frame::Frame;

/// What one direction has done since it started. Every frame that arrived is either passed,
/// dropped for one cause, or still in the link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkCounters {
    /// Frames that entered.
    pub arrived: u64,
    /// Frames (duplicates included) that left, and their bytes.
    pub passed: u64,
    pub passed_bytes: u64,
    /// The frames that left as the wire carries them: an offloaded segment counts as the
    /// frames the kernel cuts it into. Equal to `passed` without offloads.
    #[serde(default)]
    pub passed_wire_frames: u64,
    /// Frames dropped by the loss model.
    pub lost: u64,
    /// Frames dropped because the queue before the bottleneck was full.
    pub queue_drops: u64,
    /// Frames the AQM (`--aqm`) dropped to keep the queue's wait near its target.
    #[serde(default)]
    pub aqm_drops: u64,
    /// Of `aqm_drops`, frames dropped with `--ecn` because they were not ECN-capable
    /// (an ECN-capable frame is marked, never dropped, while the queue holds it).
    #[serde(default)]
    pub aqm_drops_not_ect: u64,
    /// Frames the AQM marked Congestion Experienced in place of a drop (`--ecn`).
    #[serde(default)]
    pub ce_marked: u64,
    /// Frames dropped because the delay line held its memory limit.
    pub limit_drops: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames with a bit flipped that went on (not dropped by the queue after).
    pub corrupted: u64,
    /// Frames that left after a later frame.
    pub reordered: u64,
    /// Frames whose DSCP the link set (`--remark`), of those it passed on.
    #[serde(default)]
    pub remarked: u64,
    /// Sum and maximum of the time frames spent in the link, nanoseconds.
    pub delay_sum_ns: u64,
    pub delay_max_ns: u64,
    /// The emulator's own lateness: how much later than due frames left (the caller's
    /// clock at the poll that released them, against the time the path set), summed and
    /// at most, nanoseconds, and the frames that left more than [`LATE_NS`] late. A frame
    /// released late has that much more delay (and the bottleneck that much less rate)
    /// than asked; what a receiver measures is compared with the path plus this.
    #[serde(default)]
    pub late_sum_ns: u64,
    #[serde(default)]
    pub late_max_ns: u64,
    #[serde(default)]
    pub late_frames: u64,
    /// How long frames waited in the queue before the bottleneck (with a rate).
    #[serde(default)]
    pub sojourns: crate::sojourn::Sojourns,
}

/// A frame that leaves more than this after it was due counts as late (100 us).
pub const LATE_NS: u64 = 100_000;

impl LinkCounters {
    /// The mean lateness of passed frames, milliseconds.
    pub fn mean_lateness_ms(&self) -> f64 {
        if self.passed == 0 {
            0.0
        } else {
            self.late_sum_ns as f64 / self.passed as f64 / 1e6
        }
    }

    /// Adds `other`'s counts (another forwarding thread's link of the same direction):
    /// sums, and the larger of the maxima.
    pub fn add(&mut self, other: &LinkCounters) {
        // Destructured, so that a new counter is a compile error here until it is added.
        let LinkCounters {
            arrived,
            passed,
            passed_bytes,
            passed_wire_frames,
            lost,
            queue_drops,
            aqm_drops,
            aqm_drops_not_ect,
            ce_marked,
            limit_drops,
            duplicated,
            corrupted,
            reordered,
            remarked,
            delay_sum_ns,
            delay_max_ns,
            late_sum_ns,
            late_max_ns,
            late_frames,
            sojourns,
        } = *other;
        self.arrived += arrived;
        self.passed += passed;
        self.passed_bytes += passed_bytes;
        self.passed_wire_frames += passed_wire_frames;
        self.lost += lost;
        self.queue_drops += queue_drops;
        self.aqm_drops += aqm_drops;
        self.aqm_drops_not_ect += aqm_drops_not_ect;
        self.ce_marked += ce_marked;
        self.sojourns.add(&sojourns);
        self.limit_drops += limit_drops;
        self.duplicated += duplicated;
        self.corrupted += corrupted;
        self.reordered += reordered;
        self.remarked += remarked;
        self.delay_sum_ns += delay_sum_ns;
        self.delay_max_ns = self.delay_max_ns.max(delay_max_ns);
        self.late_sum_ns += late_sum_ns;
        self.late_max_ns = self.late_max_ns.max(late_max_ns);
        self.late_frames += late_frames;
    }

    /// The mean time passed frames spent in the link, milliseconds.
    pub fn mean_delay_ms(&self) -> f64 {
        if self.passed == 0 {
            0.0
        } else {
            self.delay_sum_ns as f64 / self.passed as f64 / 1e6
        }
    }
}

struct Queued<F> {
    exit_ns: u64,
    arrived_ns: u64,
    /// The original of a duplicated frame (its copy is just ahead of it): overtaking
    /// the copy, or being overtaken after the copy left, is nothing a receiver sees as
    /// reordering, so it is not counted as such.
    twin: bool,
    /// The transport flow the frame belongs to ([`Frame::flow`]).
    flow: Option<u64>,
    frame: F,
}

/// How long a frame chosen for reordering waits for a later frame to overtake it. If none
/// comes, it leaves on its own and is not counted as reordered.
pub const REORDER_HOLD_NS: u64 = 10_000_000;

/// One direction of the path. See the module comment for the calling order.
pub struct Link<F> {
    spec: LinkSpec,
    rng: ChaCha8Rng,
    /// Gilbert-Elliott: in the bad state every frame is lost.
    bad_state: bool,
    line: VecDeque<Queued<F>>,
    line_bytes: u64,
    /// When the bottleneck finishes sending what it holds, and the remainder (in
    /// bit-nanoseconds, below one rate unit) carried so that rounding never accumulates.
    free_at_ns: u64,
    free_remainder: u64,
    last_exit_ns: u64,
    held: Option<Queued<F>>,
    /// A frame that was held and is now due right after the one just returned, and
    /// whether that counts as reordering.
    release: Option<(Queued<F>, bool)>,
    /// CoDel or FQ-CoDel in place of drop-tail (`--aqm`, with a rate).
    managed: Option<ManagedQueue<F>>,
    counters: LinkCounters,
    /// Each frame's fate, where the frame log asked for it (`--frame-log`).
    recorder: Option<Recorder>,
}

impl<F: Frame> Link<F> {
    pub fn new(spec: LinkSpec, seed: u64) -> Link<F> {
        Link {
            spec,
            rng: ChaCha8Rng::seed_from_u64(seed),
            bad_state: false,
            line: VecDeque::new(),
            line_bytes: 0,
            free_at_ns: 0,
            free_remainder: 0,
            last_exit_ns: 0,
            held: None,
            release: None,
            managed: spec
                .aqm
                .filter(|_| spec.rate_bps.is_some())
                .map(|aqm| ManagedQueue::new(aqm, spec.queue_bytes, seed)),
            counters: LinkCounters::default(),
            recorder: None,
        }
    }

    /// Keeps a record of what becomes of each of the next `limit` frames (frames an AQM
    /// drops are counted, not recorded); [`Link::take_frame_records`] takes them.
    pub fn record_frames(&mut self, limit: u64) {
        self.recorder = Some(Recorder::new(limit));
    }

    /// The records kept since the last call and the frames not recorded since then (past
    /// the limit); `None` where none are kept.
    pub fn take_frame_records(&mut self) -> Option<(Vec<FrameRecord>, u64)> {
        self.recorder.as_mut().map(Recorder::take)
    }

    fn record(&mut self, arrived_ns: u64, frame: &F, fate: Fate) {
        if let Some(recorder) = self.recorder.as_mut() {
            recorder.record(arrived_ns, frame, fate);
        }
    }

    pub fn counters(&self) -> LinkCounters {
        let mut counters = self.counters;
        if let Some(managed) = &self.managed {
            let aqm = managed.counts();
            counters.aqm_drops = aqm.dropped;
            counters.aqm_drops_not_ect = aqm.dropped_not_ect;
            counters.ce_marked = aqm.marked;
            counters.queue_drops += aqm.overflow;
        }
        counters
    }

    /// Frames in the link now, and their bytes.
    pub fn occupancy(&self) -> (usize, u64) {
        let held = usize::from(self.held.is_some()) + usize::from(self.release.is_some());
        let (queued, queued_bytes) = self.managed.as_ref().map_or((0, 0), |m| m.occupancy());
        (
            self.line.len() + held + queued,
            self.line_bytes + queued_bytes,
        )
    }

    /// Draws whether the loss model drops the next frame.
    fn lose(&mut self) -> bool {
        let p = self.spec.loss;
        if p <= 0.0 {
            return false;
        }
        match self.spec.loss_burst {
            None => self.rng.gen::<f64>() < p,
            Some(burst) => {
                if p >= 1.0 {
                    return true;
                }
                // Gilbert-Elliott with certain loss in the bad state: leaving it has
                // probability 1/burst (mean run of losses = burst); entering it is set so
                // that the stationary share of the bad state is p.
                let leave = 1.0 / burst;
                let enter = p * leave / (1.0 - p);
                let u = self.rng.gen::<f64>();
                self.bad_state = if self.bad_state {
                    u >= leave
                } else {
                    u < enter
                };
                self.bad_state
            }
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen::<f64>() < p
    }

    /// One frame entered the link at `now_ns`.
    pub fn handle_arrival(&mut self, now_ns: u64, mut frame: F) {
        // The bottleneck sends what was due before this frame came.
        self.serve(now_ns);
        self.counters.arrived += 1;
        if self.lose() {
            self.counters.lost += 1;
            self.record(now_ns, &frame, Fate::Lost);
            return;
        }
        let remarked = self.spec.remark.is_some_and(|dscp| frame.remark(dscp));
        let corrupted = self.chance(self.spec.corrupt) && {
            let pick = self.rng.gen::<u64>();
            frame.flip_bit(pick)
        };
        let mut twin = false;
        if self.chance(self.spec.duplicate) {
            let copy = frame.clone();
            if self.admit(now_ns, copy, false) {
                self.counters.duplicated += 1;
                twin = true;
            }
        }
        // Counted once it is on its way: a corrupted frame the queue then dropped never
        // reaches the receiver's checks, and counting it made the two disagree. (An AQM
        // may still drop it as it leaves the queue, which these counts do not follow.)
        if self.admit(now_ns, frame, twin) {
            self.counters.corrupted += u64::from(corrupted);
            // A duplicate is a copy of the re-marked frame: it leaves re-marked too.
            self.counters.remarked += u64::from(remarked) * (1 + u64::from(twin));
        }
    }

    /// A frame that passed the loss model goes to the queue: the AQM's, or drop-tail's
    /// through the bottleneck into the delay line; false when it was dropped on the way.
    fn admit(&mut self, now_ns: u64, frame: F, twin: bool) -> bool {
        let len = frame.wire_len() as u64;
        if let Some(managed) = self.managed.as_mut() {
            if managed.is_empty() && self.free_at_ns < now_ns {
                // An idle bottleneck takes the frame at once.
                self.free_at_ns = now_ns;
                self.free_remainder = 0;
            }
            let kept = managed.enqueue(now_ns, frame, len, twin);
            self.serve(now_ns);
            return kept;
        }
        let mut leaves_bottleneck = now_ns;
        if let Some(rate) = self.spec.rate_bps {
            if self.free_at_ns < now_ns {
                self.free_at_ns = now_ns;
                self.free_remainder = 0;
            }
            // Bytes still waiting for the bottleneck: the time it is busy, at its rate.
            let wait_ns = self.free_at_ns - now_ns;
            let backlog = (wait_ns as u128 * rate as u128 / 8_000_000_000) as u64;
            if backlog + len > self.spec.queue_bytes {
                self.counters.queue_drops += 1;
                self.record(now_ns, &frame, Fate::QueueFull);
                return false;
            }
            self.counters.sojourns.record(wait_ns);
            leaves_bottleneck = self.occupy_bottleneck(len, rate);
        }
        self.enter_line(now_ns, leaves_bottleneck, frame, twin)
    }

    /// The bottleneck sends `len` bytes from when it is free; returns when they are out.
    fn occupy_bottleneck(&mut self, len: u64, rate: u64) -> u64 {
        let bit_ns = len as u128 * 8 * 1_000_000_000 + self.free_remainder as u128;
        self.free_at_ns += (bit_ns / rate as u128) as u64;
        self.free_remainder = (bit_ns % rate as u128) as u64;
        self.free_at_ns
    }

    /// With an AQM: the bottleneck takes the queue's frames, each when it is free, up to
    /// `now_ns`. CoDel judges each at that moment, which is exact however late the caller
    /// polls.
    fn serve(&mut self, now_ns: u64) {
        let Some(rate) = self.spec.rate_bps else {
            return;
        };
        while let Some(managed) = self.managed.as_mut() {
            if managed.is_empty() || self.free_at_ns > now_ns {
                return;
            }
            let at = self.free_at_ns;
            let Some(waiting) = managed.dequeue(at) else {
                return;
            };
            self.counters
                .sojourns
                .record(at.saturating_sub(waiting.enqueued_ns));
            let leaves = self.occupy_bottleneck(waiting.len, rate);
            self.enter_line(waiting.enqueued_ns, leaves, waiting.frame, waiting.twin);
        }
    }

    /// A frame that arrived at `arrived_ns` and left the bottleneck at `leaves_ns` enters
    /// the delay line; false when the line held its memory limit.
    fn enter_line(&mut self, arrived_ns: u64, leaves_ns: u64, frame: F, twin: bool) -> bool {
        let len = frame.wire_len() as u64;
        if self.line_bytes + len > self.spec.limit_bytes {
            self.counters.limit_drops += 1;
            self.record(arrived_ns, &frame, Fate::MemoryFull);
            return false;
        }
        let mut delay = self.spec.delay_ns;
        if self.spec.jitter_ns > 0 {
            let spread = self.rng.gen_range(0..=2 * self.spec.jitter_ns);
            delay = (delay + spread).saturating_sub(self.spec.jitter_ns);
        }
        // FIFO: jitter never lets a frame overtake the one before it.
        let exit_ns = (leaves_ns + delay).max(self.last_exit_ns);
        self.last_exit_ns = exit_ns;
        self.line_bytes += len;
        self.line.push_back(Queued {
            exit_ns,
            arrived_ns,
            twin,
            // Only reordering asks which flow a frame is of: no parsing per frame else.
            flow: if self.spec.reorder > 0.0 {
                frame.flow()
            } else {
                None
            },
            frame,
        });
        true
    }

    /// `queued` leaves at `now_ns`; it was due at `due_ns`.
    fn leave(&mut self, now_ns: u64, due_ns: u64, queued: Queued<F>) -> F {
        let late = now_ns.saturating_sub(due_ns);
        self.counters.late_sum_ns += late;
        self.counters.late_max_ns = self.counters.late_max_ns.max(late);
        self.counters.late_frames += u64::from(late > LATE_NS);
        let delay = now_ns.saturating_sub(queued.arrived_ns);
        let len = queued.frame.wire_len() as u64;
        // A held frame keeps its bytes in the line until it leaves.
        self.line_bytes -= len;
        self.counters.passed += 1;
        self.counters.passed_bytes += len;
        self.counters.passed_wire_frames += queued.frame.wire_frames() as u64;
        self.counters.delay_sum_ns += delay;
        self.counters.delay_max_ns = self.counters.delay_max_ns.max(delay);
        let left = Fate::Passed {
            due_ns,
            left_ns: now_ns,
        };
        self.record(queued.arrived_ns, &queued.frame, left);
        queued.frame
    }

    /// The next frame due to leave at `now_ns`, if any.
    pub fn poll_departure(&mut self, now_ns: u64) -> Option<F> {
        self.serve(now_ns);
        if let Some((released, reordered)) = self.release.take() {
            self.counters.reordered += u64::from(reordered);
            // Due right after the frame that overtook it, which has just left.
            return Some(self.leave(now_ns, now_ns, released));
        }
        loop {
            let due = self.line.front().is_some_and(|q| q.exit_ns <= now_ns);
            if !due {
                // A held frame that nothing overtook in time leaves in its place.
                if self
                    .held
                    .as_ref()
                    .is_some_and(|h| h.exit_ns + REORDER_HOLD_NS <= now_ns)
                {
                    let held = self.held.take()?;
                    let due = held.exit_ns + REORDER_HOLD_NS;
                    return Some(self.leave(now_ns, due, held));
                }
                return None;
            }
            let queued = self.line.pop_front()?;
            if let Some(held) = self.held.take() {
                // This frame overtakes the held one, which follows it at once.
                // Not reordering as a receiver sees it: `queued` overtaking its own copy,
                // `held` arriving after its copy went ahead, or two frames of different
                // flows (no receiver sees both).
                let reordered =
                    !(queued.twin || held.twin) && held.flow.is_some() && held.flow == queued.flow;
                self.release = Some((held, reordered));
                let due = queued.exit_ns;
                return Some(self.leave(now_ns, due, queued));
            }
            if self.chance(self.spec.reorder) {
                self.held = Some(queued);
                continue;
            }
            let due = queued.exit_ns;
            return Some(self.leave(now_ns, due, queued));
        }
    }

    /// When the next frame is due (nanoseconds on the caller's clock); `None` when the link
    /// is empty.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.release.is_some() {
            return Some(0);
        }
        let head = self.line.front().map(|q| q.exit_ns);
        let held = self.held.as_ref().map(|h| h.exit_ns + REORDER_HOLD_NS);
        // The AQM's queue: when the bottleneck is free for its next frame.
        let served = self
            .managed
            .as_ref()
            .filter(|m| !m.is_empty())
            .map(|_| self.free_at_ns);
        [head, held, served].into_iter().flatten().min()
    }
}

impl<F> Link<F> {
    /// The link's settings.
    pub fn spec(&self) -> &LinkSpec {
        &self.spec
    }
}

#[cfg(test)]
impl<F> Link<F> {
    fn line_bytes(&self) -> u64 {
        self.line_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LinkSpec;

    /// A frame that carries its number, so the order out can be checked.
    #[derive(Clone, Debug, PartialEq)]
    struct Numbered {
        number: u64,
        len: usize,
        flipped: bool,
    }

    impl Frame for Numbered {
        fn wire_len(&self) -> usize {
            self.len
        }
        fn flip_bit(&mut self, _pick: u64) -> bool {
            self.flipped = true;
            true
        }
        fn remark(&mut self, _dscp: u8) -> bool {
            false
        }
        fn mark_ce(&mut self) -> bool {
            false
        }
        /// Odd lengths stand for frames of no flow (neighbour discovery).
        fn flow(&self) -> Option<u64> {
            self.len.is_multiple_of(2).then_some(0)
        }
        /// The number as the payload's head.
        fn summary(&self) -> crate::frame::FrameSummary {
            crate::frame::FrameSummary {
                ip: None,
                ports: None,
                head: self.number.to_be_bytes(),
                head_len: 8,
            }
        }
    }

    fn frame(number: u64) -> Numbered {
        Numbered {
            number,
            len: 1500,
            flipped: false,
        }
    }

    fn spec() -> LinkSpec {
        LinkSpec::unimpaired()
    }

    /// Feeds `count` frames `gap_ns` apart and drains the link until it is empty; returns
    /// what left and when.
    fn run(link: &mut Link<Numbered>, count: u64, gap_ns: u64) -> Vec<(u64, Numbered)> {
        let mut out = Vec::new();
        let mut now = 0;
        let mut next_arrival = 0;
        let mut sent = 0;
        loop {
            while let Some(f) = link.poll_departure(now) {
                out.push((now, f));
            }
            let timeout = link.poll_timeout();
            if sent == count && timeout.is_none() {
                return out;
            }
            let mut next = timeout.unwrap_or(u64::MAX).max(now);
            if sent < count {
                next = next.min(next_arrival);
            }
            now = next;
            if sent < count && now == next_arrival {
                link.handle_arrival(now, frame(sent));
                sent += 1;
                next_arrival += gap_ns;
            }
        }
    }

    #[test]
    fn an_aqm_link_keeps_order_accounts_for_every_frame_and_waits_less_than_drop_tail() {
        // 1,500-byte frames every 1 ms (12 Mbit/s) into 10 Mbit/s for 20 s, a 250 ms
        // queue: drop-tail fills it; CoDel, against a sender that does not slow down,
        // takes seconds to raise its drop rate enough but holds the wait lower.
        let bottleneck = |aqm| LinkSpec {
            rate_bps: Some(10_000_000),
            queue_bytes: 312_500,
            delay_ns: 10_000_000,
            aqm,
            ..spec()
        };
        let codel = linerate_model::Aqm {
            kind: linerate_model::AqmKind::Codel,
            ecn: false,
            target_ms: 5.0,
            interval_ms: 100.0,
        };
        let mut managed = Link::new(bottleneck(Some(codel)), 1);
        let mut tail = Link::new(bottleneck(None), 1);
        let out = run(&mut managed, 20_000, 1_000_000);
        run(&mut tail, 20_000, 1_000_000);
        let numbers: Vec<u64> = out.iter().map(|(_, f)| f.number).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in order");
        let c = managed.counters();
        assert!(c.aqm_drops > 0, "{c:?}");
        assert_eq!(c.arrived, c.passed + c.aqm_drops + c.queue_drops);
        assert_eq!(managed.occupancy(), (0, 0));
        assert_eq!(c.sojourns.count(), c.passed);
        let p50 = |link: &Link<Numbered>| link.counters().sojourns.quantile_ms(0.5).unwrap();
        assert!(p50(&tail) > 200.0, "drop-tail waits {}", p50(&tail));
        assert!(
            p50(&managed) < p50(&tail) * 0.75,
            "CoDel waits {}",
            p50(&managed)
        );
        // Every frame still spent the delay and its time on the bottleneck.
        assert!(c.delay_sum_ns / c.passed >= 10_000_000 + 1_200_000);
    }

    #[test]
    fn delay_is_added_exactly_and_order_kept() {
        let mut link = Link::new(
            LinkSpec {
                delay_ns: 5_000_000,
                ..spec()
            },
            1,
        );
        let out = run(&mut link, 100, 1000);
        assert_eq!(out.len(), 100);
        for (i, (at, f)) in out.iter().enumerate() {
            assert_eq!(f.number, i as u64);
            assert_eq!(*at, i as u64 * 1000 + 5_000_000);
        }
        assert_eq!(link.counters().mean_delay_ms(), 5.0);
        assert_eq!(link.line_bytes(), 0);
    }

    /// With records asked, every frame is accounted for once: the lost by the loss model,
    /// the queue's drops, and each passed frame with its arrival, the time it was due and
    /// the time it left, in the order they left; the counters agree with the records.
    #[test]
    fn each_frames_fate_is_recorded_with_its_times() {
        let mut link = Link::new(
            LinkSpec {
                delay_ns: 5_000_000,
                loss: 0.2,
                rate_bps: Some(12_000_000),
                queue_bytes: 4_500,
                ..spec()
            },
            3,
        );
        link.record_frames(1_000);
        let out = run(&mut link, 200, 500_000);
        let (records, unrecorded) = link.take_frame_records().expect("records kept");
        assert_eq!(unrecorded, 0);
        let c = link.counters();
        assert_eq!(records.len() as u64, c.arrived);
        let count =
            |wanted: fn(&Fate) -> bool| records.iter().filter(|r| wanted(&r.fate)).count() as u64;
        assert_eq!(count(|f| *f == Fate::Lost), c.lost);
        assert_eq!(count(|f| *f == Fate::QueueFull), c.queue_drops);
        assert!(c.lost > 0 && c.queue_drops > 0, "{c:?}");
        let passed: Vec<_> = records
            .iter()
            .filter_map(|r| match r.fate {
                Fate::Passed { due_ns, left_ns } => Some((r, due_ns, left_ns)),
                _ => None,
            })
            .collect();
        assert_eq!(passed.len(), out.len());
        for ((record, due, left), (at, frame)) in passed.iter().zip(&out) {
            assert_eq!(record.summary.head, frame.number.to_be_bytes());
            assert_eq!(left, at);
            assert_eq!(record.arrived_ns, frame.number * 500_000);
            // The delay and at least the frame's own time on the bottleneck (1 ms).
            assert!(
                *due >= record.arrived_ns + 5_000_000 + 1_000_000,
                "{record:?}"
            );
            assert!(left >= due);
        }
        // Past its limit a link counts what it does not record.
        let mut small = Link::new(spec(), 1);
        small.record_frames(3);
        run(&mut small, 10, 1_000);
        let (records, unrecorded) = small.take_frame_records().unwrap();
        assert_eq!((records.len(), unrecorded), (3, 7));
        assert!(Link::<Numbered>::new(spec(), 1)
            .take_frame_records()
            .is_none());
    }

    #[test]
    fn an_offloaded_segments_header_is_not_part_of_its_flow_or_payload() {
        use crate::ring::VNET_HEADER;
        // A 100-byte TCP payload behind the virtio_net_hdr, not a segment to cut.
        let mut bytes = vec![0u8; VNET_HEADER + 14 + 20 + 32 + 100];
        let e = VNET_HEADER;
        bytes[e + 12..e + 14].copy_from_slice(&0x0800u16.to_be_bytes());
        bytes[e + 14] = 0x45;
        bytes[e + 14 + 9] = 6;
        bytes[e + 14 + 20 + 12] = 8 << 4;
        let mut segment = crate::frame::Offloaded(bytes.clone());
        assert_eq!((segment.wire_len(), segment.wire_frames()), (166, 1));
        assert!(segment.flip_bit(0));
        assert_eq!(segment.0[e + 66], 1, "the first payload bit flipped");
        assert_eq!(segment.flow(), crate::frame::flow_key(&bytes[e..]));
        assert!(segment.flow().is_some());
    }

    #[test]
    fn rate_spaces_frames_by_their_serialization_time() {
        // 1500 bytes at 12 Mbit/s: 1 ms each; all arrive at once.
        let mut link = Link::new(
            LinkSpec {
                rate_bps: Some(12_000_000),
                queue_bytes: 1_000_000,
                ..spec()
            },
            1,
        );
        let out = run(&mut link, 10, 0);
        let times: Vec<u64> = out.iter().map(|(t, _)| *t).collect();
        assert_eq!(
            times,
            (1..=10).map(|k| k * 1_000_000).collect::<Vec<_>>(),
            "each frame leaves when the bottleneck has sent it"
        );
    }

    #[test]
    fn drop_tail_queue_holds_its_bytes_and_no_more() {
        let mut link = Link::new(
            LinkSpec {
                rate_bps: Some(12_000_000),
                queue_bytes: 4500,
                ..spec()
            },
            1,
        );
        let out = run(&mut link, 10, 0);
        // Three frames fit the queue (4500 bytes), the rest of the burst is dropped.
        assert_eq!(out.len(), 3);
        assert_eq!(link.counters().queue_drops, 7);
    }

    #[test]
    fn rate_over_a_long_run_has_no_rounding_drift() {
        // 1514-byte frames at 1 Gbit/s: 12.112 us each; 100,000 back to back.
        let mut link = Link::new(
            LinkSpec {
                rate_bps: Some(1_000_000_000),
                queue_bytes: u64::MAX / 2,
                limit_bytes: u64::MAX / 2,
                ..spec()
            },
            1,
        );
        for n in 0..100_000 {
            link.handle_arrival(
                0,
                Numbered {
                    number: n,
                    len: 1514,
                    flipped: false,
                },
            );
        }
        let mut last = 0;
        while let Some(t) = link.poll_timeout() {
            last = t;
            while link.poll_departure(t).is_some() {}
        }
        assert_eq!(last, 100_000 * 1514 * 8);
    }

    #[test]
    fn loss_matches_its_probability_and_the_seed_repeats_it() {
        let lossy = LinkSpec {
            loss: 0.01,
            ..spec()
        };
        let mut a = Link::new(lossy, 42);
        let out_a = run(&mut a, 200_000, 100);
        let lost = a.counters().lost as f64;
        // 99.9 % binomial interval around 2000.
        assert!((1850.0..2150.0).contains(&lost), "lost {lost}");
        let mut b = Link::new(lossy, 42);
        let out_b = run(&mut b, 200_000, 100);
        assert_eq!(out_a, out_b, "same seed, same arrivals: same frames pass");
        let mut c = Link::new(lossy, 43);
        assert_ne!(run(&mut c, 200_000, 100), out_a);
    }

    #[test]
    fn gilbert_elliott_bursts_have_the_asked_mean_length() {
        let mut link = Link::new(
            LinkSpec {
                loss: 0.02,
                loss_burst: Some(4.0),
                ..spec()
            },
            9,
        );
        let out = run(&mut link, 400_000, 100);
        let numbers: Vec<u64> = out.iter().map(|(_, f)| f.number).collect();
        let mut bursts = 0u64;
        let mut lost = 0u64;
        for pair in numbers.windows(2) {
            let gap = pair[1] - pair[0] - 1;
            if gap > 0 {
                bursts += 1;
                lost += gap;
            }
        }
        let mean = lost as f64 / bursts as f64;
        assert!((3.6..4.4).contains(&mean), "mean burst {mean}");
        let share = lost as f64 / 400_000.0;
        assert!((0.017..0.023).contains(&share), "loss {share}");
    }

    #[test]
    fn reordered_frames_follow_the_next_frame_and_are_counted() {
        let mut link = Link::new(
            LinkSpec {
                reorder: 0.05,
                ..spec()
            },
            3,
        );
        let out = run(&mut link, 20_000, 1000);
        assert_eq!(out.len(), 20_000);
        let mut late = 0;
        let mut highest = 0;
        for (i, (_, f)) in out.iter().enumerate() {
            if i > 0 && f.number < highest {
                late += 1;
            }
            highest = highest.max(f.number);
        }
        assert_eq!(late, link.counters().reordered);
        assert!((800..1200).contains(&late), "reordered {late}");
        assert_eq!(link.line_bytes(), 0);
    }

    /// A receiver sees a reorder only between two frames of its flow: a held frame that a
    /// frame of no flow (or of another) overtakes is not counted.
    #[test]
    fn only_frames_of_one_flow_count_as_reordered() {
        let mut link = Link::new(
            LinkSpec {
                reorder: 1.0,
                ..spec()
            },
            3,
        );
        link.handle_arrival(0, frame(0));
        // Neighbour discovery (odd length: no flow) overtakes it.
        link.handle_arrival(
            1,
            Numbered {
                number: 1,
                len: 91,
                flipped: false,
            },
        );
        let first = link.poll_departure(10_000_000).unwrap();
        let second = link.poll_departure(10_000_000).unwrap();
        assert_eq!((first.number, second.number), (1, 0));
        assert_eq!(link.counters().reordered, 0);
    }

    /// Frames released after they were due are counted as the emulator's own lateness.
    #[test]
    fn lateness_is_what_the_poll_came_after_the_due_time() {
        let mut link = Link::new(spec(), 3);
        let delay = spec().delay_ns;
        link.handle_arrival(0, frame(0));
        link.handle_arrival(0, frame(1));
        assert_eq!(link.poll_departure(delay + 50_000).unwrap().number, 0);
        assert_eq!(link.poll_departure(delay + 250_000).unwrap().number, 1);
        let c = link.counters();
        assert_eq!(
            (c.late_sum_ns, c.late_max_ns, c.late_frames),
            (300_000, 250_000, 1)
        );
        assert!((c.mean_lateness_ms() - 0.15).abs() < 1e-9);
    }

    #[test]
    fn a_held_frame_leaves_alone_when_nothing_overtakes_it() {
        let mut link = Link::new(
            LinkSpec {
                reorder: 1.0,
                ..spec()
            },
            3,
        );
        link.handle_arrival(0, frame(0));
        assert!(link.poll_departure(0).is_none());
        assert_eq!(link.poll_timeout(), Some(REORDER_HOLD_NS));
        assert_eq!(link.poll_departure(REORDER_HOLD_NS).unwrap().number, 0);
        assert_eq!(link.counters().reordered, 0);
    }

    #[test]
    fn duplicates_and_corruption_are_counted_as_done() {
        let mut link = Link::new(
            LinkSpec {
                duplicate: 0.1,
                corrupt: 0.05,
                ..spec()
            },
            5,
        );
        let out = run(&mut link, 10_000, 1000);
        let c = link.counters();
        assert_eq!(out.len() as u64, 10_000 + c.duplicated);
        // A corrupted frame that is also duplicated leaves flipped twice.
        let flipped = out.iter().filter(|(_, f)| f.flipped).count() as u64;
        assert!((c.corrupted..=c.corrupted + c.duplicated).contains(&flipped));
        assert!((800..1200).contains(&c.duplicated));
        assert!((400..600).contains(&c.corrupted));
    }

    #[test]
    fn memory_limit_drops_instead_of_growing() {
        let mut link = Link::new(
            LinkSpec {
                delay_ns: 1_000_000_000,
                limit_bytes: 15_000,
                ..spec()
            },
            5,
        );
        for n in 0..20 {
            link.handle_arrival(n, frame(n));
        }
        assert_eq!(link.counters().limit_drops, 10);
        assert_eq!(link.occupancy(), (10, 15_000));
    }

    #[test]
    fn jitter_varies_delay_within_its_bounds_without_reordering() {
        let mut link = Link::new(
            LinkSpec {
                delay_ns: 10_000_000,
                jitter_ns: 2_000_000,
                ..spec()
            },
            11,
        );
        let out = run(&mut link, 5000, 100_000);
        let mut previous = 0;
        for (at, f) in &out {
            assert!(f.number >= previous);
            previous = f.number;
            let delay = at - f.number * 100_000;
            assert!((8_000_000..=12_000_000).contains(&delay), "delay {delay}");
        }
    }
}
