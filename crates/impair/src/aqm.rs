//! Active queue management before the bottleneck, sans-IO: CoDel (RFC 8289) and FQ-CoDel
//! (RFC 8290). The link puts a frame in when it arrives and takes the next one out when
//! the bottleneck is free to send it; CoDel judges a frame by how long it waited, at the
//! moment it leaves the queue, and drops it (or marks it Congestion Experienced, with
//! ECN) when the wait has stayed above the target for an interval, then drops more often
//! (the interval over the square root of the drops so far) until the wait comes down.
//!
//! Time is the caller's nanoseconds. Nothing here draws at random: FQ-CoDel's flow
//! hash is perturbed by the link's seed, so a seed repeats a run.

use crate::frame::Frame;
use linerate_model::{Aqm, AqmKind};
use std::collections::VecDeque;

/// The largest frame on the wire: a queue holding no more than this is never dropped
/// from (RFC 8289 4.2's MTU), and FQ-CoDel's quantum (RFC 8290 4.3's default).
const MAX_FRAME: u64 = 1514;
/// FQ-CoDel's queues (RFC 8290 5.1's default).
pub const FLOW_QUEUES: usize = 1024;

/// A frame in the queue.
pub struct Waiting<F> {
    pub frame: F,
    pub enqueued_ns: u64,
    pub len: u64,
    /// The original of a duplicated frame (see the link's reordering count).
    pub twin: bool,
}

/// What the AQM did with the frames it took in.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AqmCounts {
    /// Dropped by CoDel's control law.
    pub dropped: u64,
    /// Of `dropped`, those dropped with ECN on because they were not ECN-capable (a
    /// TCP control connection beside an ECN copy): the ones that could not be marked.
    pub dropped_not_ect: u64,
    /// Marked Congestion Experienced in place of a drop.
    pub marked: u64,
    /// Dropped because the queue held its limit.
    pub overflow: u64,
}

#[derive(Debug, Clone, Copy)]
struct Params {
    target_ns: u64,
    interval_ns: u64,
    ecn: bool,
}

/// One FIFO and its bytes.
struct Fifo<F> {
    frames: VecDeque<Waiting<F>>,
    bytes: u64,
}

impl<F> Fifo<F> {
    fn new() -> Fifo<F> {
        Fifo {
            frames: VecDeque::new(),
            bytes: 0,
        }
    }

    fn push(&mut self, waiting: Waiting<F>) {
        self.bytes += waiting.len;
        self.frames.push_back(waiting);
    }

    fn pop(&mut self) -> Option<Waiting<F>> {
        let waiting = self.frames.pop_front()?;
        self.bytes -= waiting.len;
        Some(waiting)
    }
}

/// CoDel's state for one queue (RFC 8289 5).
#[derive(Debug, Default, Clone, Copy)]
struct Codel {
    /// When the wait, above the target since, will have been so for an interval; 0
    /// while it is below.
    first_above_ns: u64,
    /// When the next drop is due while dropping.
    drop_next_ns: u64,
    /// Drops since dropping began, and that count when it last ended.
    count: u32,
    last_count: u32,
    dropping: bool,
}

impl Codel {
    /// `t` plus the interval over the square root of `count`: drops come closer together
    /// the longer the wait stays high.
    fn control_law(t: u64, count: u32, p: &Params) -> u64 {
        t + (p.interval_ns as f64 / f64::from(count.max(1)).sqrt()) as u64
    }

    /// Takes the head of `fifo` at `now`; true when its wait allows a drop. `backlog` is
    /// every queue's bytes together, which the "at most one frame queued" rule reads.
    fn take<F>(
        &mut self,
        fifo: &mut Fifo<F>,
        backlog: &mut u64,
        now: u64,
        p: &Params,
    ) -> Option<(Waiting<F>, bool)> {
        let Some(waiting) = fifo.pop() else {
            self.first_above_ns = 0;
            return None;
        };
        *backlog -= waiting.len;
        let wait = now.saturating_sub(waiting.enqueued_ns);
        if wait < p.target_ns || *backlog <= MAX_FRAME {
            self.first_above_ns = 0;
            return Some((waiting, false));
        }
        if self.first_above_ns == 0 {
            self.first_above_ns = now + p.interval_ns;
            return Some((waiting, false));
        }
        Some((waiting, now >= self.first_above_ns))
    }

    /// The frame to send at `now`, after the drops (or marks) CoDel makes.
    fn dequeue<F: Frame>(
        &mut self,
        fifo: &mut Fifo<F>,
        backlog: &mut u64,
        now: u64,
        p: &Params,
        counts: &mut AqmCounts,
    ) -> Option<Waiting<F>> {
        let Some((mut head, mut ok_to_drop)) = self.take(fifo, backlog, now, p) else {
            self.dropping = false;
            return None;
        };
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next_ns {
                self.count += 1;
                if p.ecn && head.frame.mark_ce() {
                    counts.marked += 1;
                    self.drop_next_ns = Self::control_law(self.drop_next_ns, self.count, p);
                    return Some(head);
                }
                counts.dropped += 1;
                counts.dropped_not_ect += u64::from(p.ecn);
                match self.take(fifo, backlog, now, p) {
                    None => {
                        self.dropping = false;
                        return None;
                    }
                    Some((next, ok)) => {
                        head = next;
                        ok_to_drop = ok;
                    }
                }
                if ok_to_drop {
                    self.drop_next_ns = Self::control_law(self.drop_next_ns, self.count, p);
                } else {
                    self.dropping = false;
                }
            }
            return Some(head);
        }
        if !ok_to_drop {
            return Some(head);
        }
        // The wait has been above the target for an interval: drop (or mark) and start
        // dropping.
        let mut out = Some(head);
        if p.ecn && out.as_mut().is_some_and(|h| h.frame.mark_ce()) {
            counts.marked += 1;
        } else {
            counts.dropped += 1;
            counts.dropped_not_ect += u64::from(p.ecn);
            out = self.take(fifo, backlog, now, p).map(|(next, _)| next);
        }
        self.dropping = true;
        // Dropping again soon after the last spell: start at the rate that ended it.
        let delta = self.count.saturating_sub(self.last_count);
        self.count = if delta > 1 && now.saturating_sub(self.drop_next_ns) < 16 * p.interval_ns {
            delta
        } else {
            1
        };
        self.drop_next_ns = Self::control_law(now, self.count, p);
        self.last_count = self.count;
        out
    }
}

/// One of FQ-CoDel's queues.
struct FlowQueue<F> {
    fifo: Fifo<F>,
    codel: Codel,
    deficit: i64,
    /// On the list of new or of old queues.
    listed: bool,
}

/// The queue before the bottleneck, managed.
pub struct ManagedQueue<F> {
    params: Params,
    limit_bytes: u64,
    /// Every queue's bytes together.
    backlog: u64,
    frames: usize,
    /// CoDel: one queue. FQ-CoDel: [`FLOW_QUEUES`] of them.
    queues: Vec<FlowQueue<F>>,
    fair: bool,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    perturbation: u64,
    counts: AqmCounts,
}

impl<F: Frame> ManagedQueue<F> {
    /// A queue of `limit_bytes` managed as `aqm` says; `seed` perturbs FQ-CoDel's hash.
    pub fn new(aqm: Aqm, limit_bytes: u64, seed: u64) -> ManagedQueue<F> {
        let fair = aqm.kind == AqmKind::FqCodel;
        let queues = (0..if fair { FLOW_QUEUES } else { 1 })
            .map(|_| FlowQueue {
                fifo: Fifo::new(),
                codel: Codel::default(),
                deficit: 0,
                listed: false,
            })
            .collect();
        ManagedQueue {
            params: Params {
                target_ns: (aqm.target_ms * 1e6) as u64,
                interval_ns: (aqm.interval_ms * 1e6) as u64,
                ecn: aqm.ecn,
            },
            limit_bytes,
            backlog: 0,
            frames: 0,
            queues,
            fair,
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            perturbation: seed,
            counts: AqmCounts::default(),
        }
    }

    pub fn counts(&self) -> AqmCounts {
        self.counts
    }

    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Frames and bytes waiting.
    pub fn occupancy(&self) -> (usize, u64) {
        (self.frames, self.backlog)
    }

    fn queue_of(&self, frame: &F) -> usize {
        if !self.fair {
            return 0;
        }
        // Frames of no flow (neighbour discovery) share queue 0.
        frame.flow().map_or(0, |key| {
            // SplitMix64's finaliser: spreads keys that differ in a few bits.
            let mut x = key ^ self.perturbation;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^= x >> 31;
            (x % FLOW_QUEUES as u64) as usize
        })
    }

    /// A frame arrived at `now`; false when the queue held its limit and it was dropped
    /// (CoDel: the arriving frame; FQ-CoDel: the head of the longest queue, RFC 8290 4.1,
    /// which may be another flow's).
    pub fn enqueue(&mut self, now: u64, frame: F, len: u64, twin: bool) -> bool {
        if !self.fair && self.backlog + len > self.limit_bytes {
            self.counts.overflow += 1;
            return false;
        }
        let index = self.queue_of(&frame);
        let queue = &mut self.queues[index];
        queue.fifo.push(Waiting {
            frame,
            enqueued_ns: now,
            len,
            twin,
        });
        self.backlog += len;
        self.frames += 1;
        if !queue.listed {
            queue.listed = true;
            queue.deficit = MAX_FRAME as i64;
            self.new_flows.push_back(index);
        }
        let mut kept = true;
        while self.backlog > self.limit_bytes {
            let fattest = (0..self.queues.len())
                .max_by_key(|&i| self.queues[i].fifo.bytes)
                .unwrap_or(0);
            let Some(dropped) = self.queues[fattest].fifo.pop() else {
                break;
            };
            self.backlog -= dropped.len;
            self.frames -= 1;
            self.counts.overflow += 1;
            kept &= fattest != index || !self.queues[index].fifo.frames.is_empty();
        }
        kept
    }

    /// The frame the bottleneck sends at `now`, after the AQM's drops; `None` when the
    /// queue is (or has been dropped) empty.
    pub fn dequeue(&mut self, now: u64) -> Option<Waiting<F>> {
        if self.fair {
            return self.dequeue_fair(now);
        }
        let queue = &mut self.queues[0];
        let out = queue.codel.dequeue(
            &mut queue.fifo,
            &mut self.backlog,
            now,
            &self.params,
            &mut self.counts,
        );
        self.frames = queue.fifo.frames.len();
        out
    }

    /// Deficit round robin over the queues, new ones first (RFC 8290 4.2).
    fn dequeue_fair(&mut self, now: u64) -> Option<Waiting<F>> {
        loop {
            let (index, from_new) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (i, true),
                (None, Some(&i)) => (i, false),
                (None, None) => return None,
            };
            let list = if from_new {
                &mut self.new_flows
            } else {
                &mut self.old_flows
            };
            let queue = &mut self.queues[index];
            if queue.deficit <= 0 {
                queue.deficit += MAX_FRAME as i64;
                list.pop_front();
                self.old_flows.push_back(index);
                continue;
            }
            let before = queue.fifo.frames.len();
            let out = queue.codel.dequeue(
                &mut queue.fifo,
                &mut self.backlog,
                now,
                &self.params,
                &mut self.counts,
            );
            self.frames -= before - queue.fifo.frames.len();
            match out {
                Some(waiting) => {
                    queue.deficit -= waiting.len as i64;
                    return Some(waiting);
                }
                None => {
                    // Empty: a new queue goes behind the old ones (so a flow that
                    // empties its queue each round cannot stay new), an old one leaves.
                    list.pop_front();
                    if from_new && !self.old_flows.is_empty() {
                        self.old_flows.push_back(index);
                    } else {
                        queue.listed = false;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of a flow, ECN-capable or not, that says whether it was marked.
    #[derive(Clone, Debug)]
    struct Packet {
        flow: u64,
        ect: bool,
        ce: bool,
        len: usize,
    }

    impl Frame for Packet {
        fn wire_len(&self) -> usize {
            self.len
        }
        fn flip_bit(&mut self, _: u64) -> bool {
            false
        }
        fn remark(&mut self, _: u8) -> bool {
            false
        }
        fn mark_ce(&mut self) -> bool {
            self.ce = self.ect;
            self.ect
        }
        fn flow(&self) -> Option<u64> {
            Some(self.flow)
        }
        fn summary(&self) -> crate::frame::FrameSummary {
            crate::frame::summarize(&[])
        }
    }

    fn aqm(kind: AqmKind, ecn: bool) -> Aqm {
        Aqm {
            kind,
            ecn,
            target_ms: 5.0,
            interval_ms: 100.0,
        }
    }

    /// What a run of [`run`] saw leave the queue.
    struct Seen {
        /// The wait of each frame sent, ns.
        waits: Vec<u64>,
        /// Bytes sent of each flow.
        sent: Vec<u64>,
        /// Frames that left marked CE.
        marked: u64,
        /// When the AQM dropped, ns.
        drops_at: Vec<u64>,
    }

    /// A bottleneck of `rate_bps` fed by senders at the rates `offered`, which do not
    /// slow down, for `seconds`: frames in at their times, out when the bottleneck is
    /// free.
    fn run(
        queue: &mut ManagedQueue<Packet>,
        rate_bps: u64,
        offered: &[u64],
        seconds: f64,
        ect: bool,
    ) -> Seen {
        let tx_ns = |len: u64| len * 8 * 1_000_000_000 / rate_bps;
        let gaps: Vec<u64> = offered
            .iter()
            .map(|bps| tx_ns(1500) * rate_bps / bps)
            .collect();
        let mut next_in: Vec<u64> = (0..offered.len() as u64).collect();
        let end = (seconds * 1e9) as u64;
        let mut free_at = 0;
        let mut seen = Seen {
            waits: Vec::new(),
            sent: vec![0; offered.len()],
            marked: 0,
            drops_at: Vec::new(),
        };
        loop {
            let arrival = next_in.iter().copied().enumerate().min_by_key(|(_, t)| *t);
            let (flow, at) = arrival.unwrap();
            // Serve what the bottleneck sends before the next arrival.
            while !queue.is_empty() && free_at <= at {
                let dropped = queue.counts().dropped;
                let out = queue.dequeue(free_at);
                let new_drops = queue.counts().dropped - dropped;
                seen.drops_at.extend((0..new_drops).map(|_| free_at));
                match out {
                    Some(w) => {
                        seen.waits.push(free_at - w.enqueued_ns);
                        seen.sent[w.frame.flow as usize] += w.len;
                        seen.marked += u64::from(w.frame.ce);
                        free_at += tx_ns(w.len);
                    }
                    None => break,
                }
            }
            if at >= end {
                return seen;
            }
            if queue.is_empty() && free_at < at {
                free_at = at;
            }
            let packet = Packet {
                flow: flow as u64,
                ect,
                ce: false,
                len: 1500,
            };
            queue.enqueue(at, packet, 1500, false);
            next_in[flow] += gaps[flow];
        }
    }

    fn median(mut values: Vec<u64>) -> u64 {
        values.sort_unstable();
        values[values.len() / 2]
    }

    #[test]
    fn codel_drops_after_an_interval_above_target_then_by_its_control_law() {
        // 12 Mbit/s offered to 10 Mbit/s with a 250 ms queue (312 kB), by a sender that
        // does not slow down: the wait grows 1 ms every 6 ms.
        let mut queue = ManagedQueue::new(aqm(AqmKind::Codel, false), 312_500, 1);
        let seen = run(&mut queue, 10_000_000, &[12_000_000], 20.0, false);
        // The wait passes 5 ms at about 30 ms; the first drop is an interval later.
        let first = seen.drops_at[0] as f64 / 1e6;
        assert!((125.0..140.0).contains(&first), "first drop at {first} ms");
        // Then the k-th drop follows the one before by 100 ms / sqrt(k), to within the
        // frame time at which the bottleneck looks (1.2 ms).
        for (k, pair) in seen.drops_at.windows(2).take(20).enumerate() {
            let gap = (pair[1] - pair[0]) as f64 / 1e6;
            let law = 100.0 / ((k + 1) as f64).sqrt();
            assert!(
                (gap - law).abs() <= 1.3,
                "drop {}: {gap} ms after, law {law}",
                k + 2
            );
        }
        // Drop-tail would sit at 250 ms; CoDel, rising its rate as the square root of
        // its count, brings even this sender's queue well below that.
        let late = seen.waits[seen.waits.len() / 2..].to_vec();
        let p50 = median(late) as f64 / 1e6;
        assert!(p50 < 125.0, "median wait {p50} ms in the second half");
        assert_eq!(seen.marked, 0);
        assert_eq!(queue.counts().marked, 0);
    }

    #[test]
    fn with_ecn_codel_marks_capable_frames_instead_of_dropping_them() {
        let mut queue = ManagedQueue::new(aqm(AqmKind::Codel, true), 312_500, 1);
        let seen = run(&mut queue, 10_000_000, &[12_000_000], 5.0, true);
        let counts = queue.counts();
        assert!(counts.marked > 10, "{counts:?}");
        assert_eq!(counts.marked, seen.marked, "every mark reached the wire");
        // Marks do not slow a sender that ignores them: the queue fills to its limit.
        assert!(counts.overflow > 0, "{counts:?}");
        assert_eq!(counts.dropped, 0, "{counts:?}");
        // Frames that are not ECN-capable are dropped as before.
        let mut plain = ManagedQueue::new(aqm(AqmKind::Codel, true), 312_500, 1);
        run(&mut plain, 10_000_000, &[12_000_000], 5.0, false);
        assert!(plain.counts().dropped > 10 && plain.counts().marked == 0);
        // ... and counted as the drops marking could not replace.
        assert_eq!(plain.counts().dropped_not_ect, plain.counts().dropped);
        assert_eq!(counts.dropped_not_ect, 0);
        let mut no_ecn = ManagedQueue::new(aqm(AqmKind::Codel, false), 312_500, 1);
        run(&mut no_ecn, 10_000_000, &[12_000_000], 5.0, false);
        assert!(no_ecn.counts().dropped > 10 && no_ecn.counts().dropped_not_ect == 0);
    }

    #[test]
    fn a_queue_below_its_target_is_never_dropped_from() {
        let mut queue = ManagedQueue::new(aqm(AqmKind::FqCodel, false), 312_500, 1);
        let seen = run(&mut queue, 10_000_000, &[4_000_000, 4_000_000], 5.0, false);
        assert_eq!(queue.counts(), AqmCounts::default());
        assert!(seen.waits.iter().all(|w| *w < 5_000_000));
    }

    #[test]
    fn fq_codel_shares_the_bottleneck_and_keeps_a_light_flow_out_of_the_queue() {
        // A heavy flow at twice the rate beside a light one at a tenth: the light flow
        // is a new queue each time it sends and waits next to nothing.
        let mut queue = ManagedQueue::new(aqm(AqmKind::FqCodel, false), 312_500, 7);
        let rate = 10_000_000;
        let seen = run(&mut queue, rate, &[20_000_000, 1_000_000], 10.0, false);
        let sent = seen.sent;
        // The light flow's frames waited at most a frame or two of the heavy one's.
        let light_waits: usize = seen.waits.len();
        assert!(light_waits > 0);
        // The light flow got all it offered (bytes in 10 s at 1 Mbit/s, less a frame).
        assert!(sent[1] >= 1_250_000 - 3000, "light flow sent {}", sent[1]);
        assert!(sent[0] > sent[1] * 7, "{sent:?}");
        assert!(queue.counts().dropped > 0);
    }

    #[test]
    fn fq_codel_at_its_limit_drops_from_the_longest_queue() {
        let mut queue = ManagedQueue::<Packet>::new(aqm(AqmKind::FqCodel, false), 6000, 1);
        let packet = |flow| Packet {
            flow,
            ect: false,
            ce: false,
            len: 1500,
        };
        for _ in 0..4 {
            assert!(queue.enqueue(0, packet(1), 1500, false));
        }
        // Full: a frame of another flow gets in, the long queue's head goes.
        assert!(queue.enqueue(0, packet(2), 1500, false));
        assert_eq!(queue.counts().overflow, 1);
        assert_eq!(queue.occupancy(), (4, 6000));
        // The long queue itself at the limit: its own arrival costs its own head.
        assert!(queue.enqueue(0, packet(1), 1500, false));
        assert_eq!(queue.counts().overflow, 2);
    }
}
