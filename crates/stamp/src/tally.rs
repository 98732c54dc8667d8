//! A Session-Sender's bookkeeping, without I/O: the probes it sent, the answers that came
//! back, and the figures they make (round trip, one-way and added delay each way, loss
//! each way where the reflector lets it be told, reordering, duplicates, RFC 3550 jitter,
//! the marks each way). Times come in as arguments: monotonic nanoseconds for the round
//! trip, Unix nanoseconds for what is compared with the reflector's timestamps.

use crate::wire::{tlv, ErrorEstimate, Reflected, Timestamp};
use linerate_model::clock::ClockState;
use linerate_model::latency::LatencyHistogram;
use linerate_report::stamp::{
    delay_bucket, Clocks, DelayFigures, Marks, OneWay, Protocol, StampInterval, StampLoss,
    StampReport, DELAY_BOUNDS_US, STAMP,
};
use std::collections::{BTreeMap, BTreeSet};

/// Probes remembered for matching answers, at most: an answer to a probe this many older
/// than the newest is not matched (at 10,000/s, 6.5 s late). A slower session remembers
/// eight seconds' worth (at least 1,024): an agent holds a session per peer.
const MOST_REMEMBERED: usize = 65_536;
/// One-way delays kept per direction for exact percentiles; past this, every other is
/// kept, and so on (the figures then rest on an even sample of the run).
const KEPT_DELAYS: usize = 1 << 21;

/// What the run was asked, for the report.
#[derive(Debug, Clone)]
pub struct Settings {
    pub target: String,
    pub address: String,
    pub mode: crate::wire::Mode,
    /// STAMP's, or the protocol of the foreign wire the sender carries.
    pub protocol: Protocol,
    pub rate_pps: f64,
    pub size: usize,
    pub dscp: Option<u8>,
    /// The session's SSID (nonzero): answers carrying another are not this run's.
    pub ssid: u16,
    /// Both ends read one clock (loopback, namespaces of one host).
    pub same_clock: bool,
    pub sender_clock: Option<ClockState>,
    pub started_at: f64,
    /// The requests are a call's frames (`linerate app --pattern voip --peer irtt`):
    /// each way scored as one (crate::call).
    pub call: Option<linerate_model::CallStream>,
}

/// An answer as it arrived.
#[derive(Debug, Clone)]
pub struct Reply {
    pub answer: Reflected,
    pub tlvs: tlv::Answer,
    /// T4, Unix nanoseconds (the kernel's receive time where it gave one).
    pub arrived_unix_ns: i128,
    /// Monotonic nanoseconds at arrival, on the clock `sent` was given.
    pub arrived_ns: u64,
    /// The answer's TOS as it arrived, where the socket said.
    pub tos: Option<u8>,
    /// irtt's received window (crate::call::Echo::window), where the answer carried one.
    pub received_window: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Probe {
    seq: u32,
    sent_ns: u64,
    timestamp: Timestamp,
    /// When the kernel sent it (Unix nanoseconds), where it said: T1 on the wire.
    left_unix_ns: Option<i128>,
    answered: bool,
    /// Its one-way delays (out, back; clock offsets in them), once answered with
    /// timestamps that are possible: its neighbours' IPDV is taken against them.
    transit: Option<(i64, i64)>,
}

/// The counts an answer carries, for splitting loss by direction.
#[derive(Debug, Clone, Copy)]
struct Counts {
    seq: u32,
    sent: u32,
    received: u32,
    reflected: u32,
}

/// RFC 3550 §6.4.1's running jitter estimate.
#[derive(Debug, Default, Clone, Copy)]
struct Jitter {
    estimate: f64,
    previous: Option<i128>,
}

impl Jitter {
    fn record(&mut self, transit: i128) {
        if let Some(previous) = self.previous {
            let d = (transit - previous).abs() as f64;
            self.estimate += (d - self.estimate) / 16.0;
        }
        self.previous = Some(transit);
    }
}

/// Delays kept for exact percentiles, thinned evenly past [`KEPT_DELAYS`].
#[derive(Debug, Default)]
struct Delays {
    values: Vec<i64>,
    stride: u64,
    seen: u64,
    min: Option<i64>,
    /// Every delay counted into its bucket (exact, however many were thinned).
    buckets: [u64; DELAY_BOUNDS_US.len() + 1],
    sum_ns: i128,
}

impl Delays {
    fn record(&mut self, ns: i64) {
        self.min = Some(self.min.map_or(ns, |m| m.min(ns)));
        self.buckets[delay_bucket(ns)] += 1;
        self.sum_ns += i128::from(ns);
        if self.stride == 0 {
            self.stride = 1;
        }
        if self.seen % self.stride == 0 {
            self.values.push(ns);
            if self.values.len() >= KEPT_DELAYS {
                let mut keep = false;
                self.values.retain(|_| {
                    keep = !keep;
                    keep
                });
                self.stride *= 2;
            }
        }
        self.seen += 1;
    }

    /// Percentiles in microseconds, less `floor` nanoseconds.
    fn figures(&self, floor: i64) -> DelayFigures {
        let mut sorted = self.values.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return DelayFigures::default();
        }
        let at = |q: f64| {
            let i = ((sorted.len() - 1) as f64 * q).round() as usize;
            (sorted[i] - floor) as f64 / 1e3
        };
        let mean = sorted.iter().map(|v| (v - floor) as f64).sum::<f64>() / sorted.len() as f64;
        DelayFigures {
            min: (self.min.unwrap_or(sorted[0]) - floor) as f64 / 1e3,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: (sorted[sorted.len() - 1] - floor) as f64 / 1e3,
            mean: mean / 1e3,
        }
    }
}

fn median(values: &mut [i64]) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[values.len() / 2])
}

/// An unsynchronised Linux clock's largest error (adjtimex's maxerror stops at 16 s):
/// the sender's bound when its clock could not be read.
const UNSYNCHRONISED_ERROR_S: f64 = 16.0;
/// The two clocks' error bounds together are taken as at most this: an hour (a
/// reflector may declare up to 2^39 s, which would make every timestamp possible).
const MAX_CLOCK_ERROR_NS: i128 = 3_600_000_000_000;

/// The interval being counted.
#[derive(Debug, Default)]
struct Current {
    sent: u64,
    answered: u64,
    rtt: Vec<i64>,
    forward: Vec<i64>,
    reverse: Vec<i64>,
}

/// An interval closed, its one-way medians still absolute (the run's minimum is known
/// only at the end).
#[derive(Debug, Clone, Copy)]
struct Closed {
    end_s: f64,
    sent: u64,
    answered: u64,
    rtt: Option<i64>,
    forward: Option<i64>,
    reverse: Option<i64>,
}

/// The run so far.
#[derive(Debug)]
pub struct Tally {
    settings: Settings,
    started_ns: u64,
    /// The probes remembered, by sequence number modulo its length.
    window: Vec<Option<Probe>>,
    sent: u64,
    answered: u64,
    duplicates: u64,
    reordered: u64,
    unmatched: u64,
    kernel_sent_times: u64,
    rtt_buckets: [u64; DELAY_BOUNDS_US.len() + 1],
    highest: Option<u32>,
    rtt: LatencyHistogram,
    hold: Delays,
    forward: Delays,
    reverse: Delays,
    rtt_jitter: Jitter,
    forward_jitter: Jitter,
    reverse_jitter: Jitter,
    /// RFC 5481's IPDV each way between probes of consecutive sequence numbers, both
    /// answered, its magnitude (as irtt reports it).
    forward_ipdv: Delays,
    reverse_ipdv: Delays,
    by_seq: Option<(Counts, Counts)>,
    by_direct: Option<(Counts, Counts)>,
    every_answer_direct: bool,
    stateful: bool,
    reflector_clock: ErrorEstimate,
    ttl: Option<u8>,
    unrecognized: BTreeSet<u8>,
    integrity_failures: u64,
    /// Answers whose T2 or T3 the run and the clocks cannot explain.
    impossible_timestamps: u64,
    /// Datagrams from the reflector that could not be read as answers, and answers read
    /// from a TWAMP-light responder's shorter packet.
    unreadable_answers: u64,
    short_answers: u64,
    /// Answers whose TLVs came back as sent.
    echoed: u64,
    marks_forward: BTreeMap<(u8, u8), u64>,
    marks_reverse: BTreeMap<(u8, u8), u64>,
    current: Current,
    closed: Vec<Closed>,
    call: Option<crate::call::CallLog>,
}

/// Widens the (first, last) pair to hold `counts`, by sequence number.
fn widen(pair: &mut Option<(Counts, Counts)>, counts: Counts) {
    match pair {
        None => *pair = Some((counts, counts)),
        Some((first, last)) => {
            if counts.seq < first.seq {
                *first = counts;
            }
            if counts.seq > last.seq {
                *last = counts;
            }
        }
    }
}

impl Tally {
    pub fn new(settings: Settings, started_ns: u64) -> Tally {
        let remembered = ((settings.rate_pps * 8.0) as usize)
            .clamp(1_024, MOST_REMEMBERED)
            .next_power_of_two();
        let call = settings.call.clone().map(crate::call::CallLog::new);
        Tally {
            settings,
            started_ns,
            window: vec![None; remembered],
            sent: 0,
            answered: 0,
            duplicates: 0,
            reordered: 0,
            unmatched: 0,
            kernel_sent_times: 0,
            rtt_buckets: [0; DELAY_BOUNDS_US.len() + 1],
            highest: None,
            rtt: LatencyHistogram::new(),
            hold: Delays::default(),
            forward: Delays::default(),
            reverse: Delays::default(),
            rtt_jitter: Jitter::default(),
            forward_jitter: Jitter::default(),
            reverse_jitter: Jitter::default(),
            forward_ipdv: Delays::default(),
            reverse_ipdv: Delays::default(),
            by_seq: None,
            by_direct: None,
            every_answer_direct: true,
            stateful: false,
            reflector_clock: ErrorEstimate::default(),
            ttl: None,
            unrecognized: BTreeSet::new(),
            integrity_failures: 0,
            impossible_timestamps: 0,
            unreadable_answers: 0,
            short_answers: 0,
            echoed: 0,
            marks_forward: BTreeMap::new(),
            marks_reverse: BTreeMap::new(),
            current: Current::default(),
            closed: Vec::new(),
            call,
        }
    }

    /// The sequence number the next probe carries (the count sent so far; the first is 0).
    pub fn next_seq(&self) -> u32 {
        self.sent as u32
    }

    pub fn sent(&self) -> u64 {
        self.sent
    }

    pub fn answered(&self) -> u64 {
        self.answered
    }

    /// The time (T1) probe `seq` carried, while it is remembered: a protocol whose
    /// answers do not copy it back (irtt's) is matched by its sequence number alone.
    pub fn probe_timestamp(&self, seq: u32) -> Option<Timestamp> {
        let slot = self.window[seq as usize % self.window.len()];
        slot.filter(|p| p.seq == seq).map(|p| p.timestamp)
    }

    /// Notes a probe sent at `sent_ns` carrying `timestamp` (T1).
    pub fn sent_probe(&mut self, seq: u32, sent_ns: u64, timestamp: Timestamp) {
        let slots = self.window.len();
        self.window[seq as usize % slots] = Some(Probe {
            seq,
            sent_ns,
            timestamp,
            left_unix_ns: None,
            answered: false,
            transit: None,
        });
        self.sent += 1;
        self.current.sent += 1;
    }

    /// The kernel's time of probe `seq`'s leaving (SO_TIMESTAMPING): the round trip and
    /// the way out count from it instead of from the loop's time before the send call. A
    /// time before that, or a second after it, is not this probe's and is ignored.
    pub fn left_at(&mut self, seq: u32, unix_ns: i128) {
        let slots = self.window.len();
        let Some(probe) = self.window[seq as usize % slots]
            .as_mut()
            .filter(|p| p.seq == seq && !p.answered)
        else {
            return;
        };
        let after = unix_ns - probe.timestamp.unix_ns(false);
        if (0..1_000_000_000).contains(&after) {
            probe.sent_ns += after as u64;
            probe.left_unix_ns = Some(unix_ns);
        }
    }

    /// A datagram from the reflector that is not an answer this run can read (too short,
    /// an HMAC that does not check).
    pub fn unreadable_answer(&mut self) {
        self.unreadable_answers += 1;
    }

    /// The next answer was read from a TWAMP-light responder's shorter packet.
    pub fn short_answer(&mut self) {
        self.short_answers += 1;
    }

    /// Takes an answer in: matched to its probe (by sequence number, SSID and the T1 it
    /// echoes, so a stray or forged answer is not counted), or counted as not this run's;
    /// then its every figure (round trip, each way's delay and jitter, the counts each
    /// way, the marks) in the order RFC 8762 and 8972 give them.
    pub fn answer(&mut self, reply: &Reply) {
        let a = &reply.answer;
        let slots = self.window.len();
        let slot = &mut self.window[a.sender_seq as usize % slots];
        let Some(probe) = slot.as_mut().filter(|p| {
            p.seq == a.sender_seq
                && p.timestamp == a.sender_timestamp
                && (a.ssid == self.settings.ssid || a.ssid == 0)
        }) else {
            self.unmatched += 1;
            return;
        };
        if probe.answered {
            self.duplicates += 1;
            return;
        }
        probe.answered = true;
        let sent_ns = probe.sent_ns;
        let left_unix_ns = probe.left_unix_ns;
        self.answered += 1;
        self.current.answered += 1;
        match self.highest {
            Some(h) if a.sender_seq < h => self.reordered += 1,
            _ => self.highest = Some(a.sender_seq),
        }
        if reply.tlvs.integrity_failed {
            self.integrity_failures += 1;
        }
        self.unrecognized
            .extend(reply.tlvs.unrecognized.iter().copied());

        let rtt = reply.arrived_ns.saturating_sub(sent_ns);
        self.rtt.record(rtt);
        self.rtt_buckets[delay_bucket(rtt.min(i64::MAX as u64) as i64)] += 1;
        self.current.rtt.push(rtt as i64);
        self.rtt_jitter.record(i128::from(rtt));

        let transit = self.record_one_way(reply, left_unix_ns);
        if let Some(transit) = transit {
            self.record_ipdv(a.sender_seq, transit);
        }
        if let Some(call) = self.call.as_mut() {
            call.answered(crate::call::Echo {
                seq: a.sender_seq,
                reflector_seq: a.seq,
                window: reply.received_window,
                transit_ns: transit,
            });
        }
        self.ttl = Some(self.ttl.map_or(a.sender_ttl, |t| t.min(a.sender_ttl)));

        if a.seq != a.sender_seq {
            self.stateful = true;
        }
        widen(
            &mut self.by_seq,
            Counts {
                seq: a.sender_seq,
                sent: a.sender_seq,
                received: a.seq,
                reflected: a.seq,
            },
        );
        // A reflector that does not know RFC 8972 sends the TLVs back as they went: a
        // Direct Measurement TLV with the reflector's counts still zero. Its Class of
        // Service TLV then says nothing of what arrived.
        let echoed = reply
            .tlvs
            .direct_measurement
            .is_some_and(|dm| dm.reflector_received == 0 && dm.reflector_sent == 0);
        if echoed {
            self.echoed += 1;
        }
        match reply.tlvs.direct_measurement {
            Some(dm) if !echoed => widen(
                &mut self.by_direct,
                Counts {
                    seq: a.sender_seq,
                    sent: dm.sender_sent,
                    received: dm.reflector_received,
                    reflected: dm.reflector_sent,
                },
            ),
            _ => self.every_answer_direct = false,
        }
        if let (Some(_), Some(cos), false) =
            (self.settings.dscp, reply.tlvs.class_of_service, echoed)
        {
            *self
                .marks_forward
                .entry((cos.received_dscp, cos.received_ecn))
                .or_default() += 1;
        }
        if let (Some(_), Some(tos)) = (self.settings.dscp, reply.tos) {
            *self.marks_reverse.entry((tos >> 2, tos & 3)).or_default() += 1;
        }
    }

    /// An answer's one-way delays, each timestamp read in the format its own error
    /// estimate says (the probe's kernel time of leaving, where there is one); four
    /// times that cannot all be true are counted, not recorded.
    fn record_one_way(&mut self, reply: &Reply, left_unix_ns: Option<i128>) -> Option<(i64, i64)> {
        let a = &reply.answer;
        self.kernel_sent_times += u64::from(left_unix_ns.is_some());
        let t1 = left_unix_ns.unwrap_or_else(|| a.sender_timestamp.unix_ns(a.sender_error.ptp()));
        let t2 = a.receive.unix_ns(a.error.ptp());
        let t3 = a.timestamp.unix_ns(a.error.ptp());
        let t4 = reply.arrived_unix_ns;
        self.reflector_clock = a.error;
        if self.timestamps_possible(t1, t2, t3, t4, a.error) {
            let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            let (forward, reverse) = (clamp(t2 - t1), clamp(t4 - t3));
            self.forward.record(forward);
            self.reverse.record(reverse);
            self.hold.record(clamp(t3 - t2));
            self.current.forward.push(forward);
            self.current.reverse.push(reverse);
            self.forward_jitter.record(t2 - t1);
            self.reverse_jitter.record(t4 - t3);
            Some((forward, reverse))
        } else {
            self.impossible_timestamps += 1;
            None
        }
    }

    /// Keeps probe `seq`'s one-way delays and takes the IPDV against each neighbour
    /// (the one before and the one after) already answered: each pair once, whichever
    /// of the two came back last.
    fn record_ipdv(&mut self, seq: u32, transit: (i64, i64)) {
        let slots = self.window.len();
        if let Some(probe) = self.window[seq as usize % slots]
            .as_mut()
            .filter(|p| p.seq == seq)
        {
            probe.transit = Some(transit);
        }
        for neighbour in [seq.wrapping_sub(1), seq.wrapping_add(1)] {
            let Some(other) = self.window[neighbour as usize % slots]
                .filter(|p| p.seq == neighbour)
                .and_then(|p| p.transit)
            else {
                continue;
            };
            self.forward_ipdv.record((transit.0 - other.0).abs());
            self.reverse_ipdv.record((transit.1 - other.1).abs());
        }
    }

    /// Closes the interval ending at `now_ns`: its figures, for a live line.
    pub fn close_interval(&mut self, now_ns: u64) -> StampInterval {
        let mut current = std::mem::take(&mut self.current);
        let closed = Closed {
            end_s: now_ns.saturating_sub(self.started_ns) as f64 / 1e9,
            sent: current.sent,
            answered: current.answered,
            rtt: median(&mut current.rtt),
            forward: median(&mut current.forward),
            reverse: median(&mut current.reverse),
        };
        self.closed.push(closed);
        self.interval(&closed)
    }

    fn interval(&self, closed: &Closed) -> StampInterval {
        let added = |v: Option<i64>, d: &Delays| v.zip(d.min).map(|(v, m)| (v - m) as f64 / 1e3);
        StampInterval {
            end_s: closed.end_s,
            sent: closed.sent,
            answered: closed.answered,
            rtt_p50_us: closed.rtt.map(|v| v as f64 / 1e3),
            forward_added_p50_us: added(closed.forward, &self.forward),
            reverse_added_p50_us: added(closed.reverse, &self.reverse),
        }
    }

    /// Loss each way, and how it was told.
    fn loss(&self) -> StampLoss {
        let lost = self.sent.saturating_sub(self.answered);
        let (pair, basis) = if self.answered == 0 {
            (None, "round trip only: nothing was answered".to_string())
        } else if self.every_answer_direct && self.by_direct.is_some() {
            (
                self.by_direct,
                "direct measurement (the reflector's counts)".to_string(),
            )
        } else if self.stateful {
            (
                self.by_seq,
                "the reflector's sequence numbers (stateful)".to_string(),
            )
        } else {
            let (first, last) = self.by_seq.expect("answers were counted");
            let span = u64::from(last.seq.wrapping_sub(first.seq)) + 1;
            let between = span.saturating_sub(self.answered);
            if between == 0 {
                (
                    self.by_seq,
                    "nothing was lost between the first answer and the last".to_string(),
                )
            } else {
                (
                    None,
                    "round trip only: the reflector's sequence numbers followed the probes' (a stateless reflector, or every loss on the way back) and it filled in no Direct Measurement TLV".to_string(),
                )
            }
        };
        let split = pair.and_then(|(first, last)| {
            let forward = i64::from(last.sent.wrapping_sub(first.sent))
                - i64::from(last.received.wrapping_sub(first.received));
            let reverse = i64::from(last.reflected.wrapping_sub(first.reflected))
                - (self.answered as i64 - 1);
            let ends = i64::from(first.seq) + (self.sent as i64 - 1 - i64::from(last.seq));
            (forward >= 0 && reverse >= 0 && ends >= 0 && (forward + reverse + ends) as u64 == lost)
                .then_some((forward as u64, reverse as u64, ends as u64))
        });
        match (pair, split) {
            (Some(_), None) => StampLoss::of(
                self.sent,
                self.answered,
                None,
                "round trip only: the reflector's counts do not add up (it restarted, counts duplicates, or another sender shares the session)".into(),
            ),
            _ => StampLoss::of(self.sent, self.answered, split, basis),
        }
    }

    /// Whether the reflector's T2 and T3 fit the run: on one clock, T1 <= T2 <= T3 <= T4;
    /// on two, the same widened by both clocks' error bounds (the sender's from
    /// adjtimex, the reflector's as its answer declares it, together at most
    /// [`MAX_CLOCK_ERROR_NS`], so a reflector cannot declare any timestamp possible); and
    /// the hold, read on the reflector's one clock, no longer than the round trip. A
    /// millisecond's slack on each side for timestamps taken in the kernel on one side
    /// and in the program on the other.
    fn timestamps_possible(
        &self,
        t1: i128,
        t2: i128,
        t3: i128,
        t4: i128,
        reflector: ErrorEstimate,
    ) -> bool {
        const SLACK_NS: i128 = 1_000_000;
        let bound_ns = if self.settings.same_clock {
            0
        } else {
            let sender_s = self
                .settings
                .sender_clock
                .map_or(UNSYNCHRONISED_ERROR_S, |c| c.max_error_s);
            let both_s = (sender_s + reflector.error_s()).min(MAX_CLOCK_ERROR_NS as f64 / 1e9);
            (both_s.max(0.0) * 1e9) as i128
        };
        let widened = bound_ns + SLACK_NS;
        t2 >= t1 - widened
            && t3 >= t2 - SLACK_NS
            && t3 <= t4 + widened
            && t3 - t2 <= t4 - t1 + SLACK_NS
    }

    /// Why an absolute one-way delay cannot be believed, if it cannot.
    fn withheld(&self, delay: &DelayFigures) -> Option<String> {
        if self.settings.same_clock {
            return None;
        }
        let Some(sender) = self.settings.sender_clock.filter(|c| c.synchronised) else {
            return Some(
                "this host's clock is not synchronised to a time source (adjtimex)".into(),
            );
        };
        if !self.reflector_clock.synchronised() {
            return Some("the reflector's answers say its clock is not synchronised".into());
        }
        let bound_us = (sender.max_error_s + self.reflector_clock.error_s()) * 1e6;
        (bound_us > delay.p50.abs()).then(|| {
            format!(
                "the clocks' error bound ({:.3} ms) is larger than the delay ({:.3} ms)",
                bound_us / 1e3,
                delay.p50 / 1e3
            )
        })
    }

    fn one_way(&self, delays: &Delays, jitter: &Jitter, ipdv: &Delays) -> OneWay {
        let absolute = delays.figures(0);
        let withheld = self.withheld(&absolute);
        let told = withheld.is_none() && delays.seen > 0;
        OneWay {
            delay_us: withheld.is_none().then_some(absolute),
            withheld,
            added_us: delays.figures(delays.min.unwrap_or(0)),
            jitter_us: jitter.estimate / 1e3,
            ipdv_us: (ipdv.seen > 0).then(|| ipdv.figures(0)),
            histogram: if told {
                delays.buckets.to_vec()
            } else {
                Vec::new()
            },
            sum_us: if told {
                delays.sum_ns as f64 / 1e3
            } else {
                0.0
            },
        }
    }

    /// The run's figures, `now_ns` its end; `interrupted` when it was cut short.
    pub fn finish(&self, now_ns: u64, interrupted: bool) -> StampReport {
        let s = &self.settings;
        let duration_s = now_ns.saturating_sub(self.started_ns) as f64 / 1e9;
        let mut warnings = Vec::new();
        if self.integrity_failures > 0 {
            warnings.push(format!(
                "{} answers' HMAC TLV failed (the reflector flagged ours, or theirs did not check here)",
                self.integrity_failures
            ));
        }
        if self.impossible_timestamps > 0 {
            warnings.push(format!(
                "{} answers carried reflector timestamps the run and the clocks' error bounds cannot explain (before the probe left, after the answer came, or a hold longer than the round trip): left out of the one-way figures and the hold",
                self.impossible_timestamps
            ));
        }
        if self.unreadable_answers > 0 {
            warnings.push(format!(
                "{} datagrams came back that could not be read as STAMP answers (shorter than its {} octets, or an HMAC that does not check)",
                self.unreadable_answers,
                s.mode.base_len()
            ));
        }
        if self.short_answers > 0 {
            warnings.push(format!(
                "{} answers were TWAMP-light packets shorter than STAMP's (a TWAMP-light responder): read up to the sender's error estimate; their TTL is unknown",
                self.short_answers
            ));
        }
        if self.echoed > 0 {
            warnings.push(format!(
                "{} answers carried our TLVs back unfilled: the reflector does not take RFC 8972's extensions",
                self.echoed
            ));
        }
        if let Some(dscp) = s.dscp {
            if self.marks_reverse.is_empty() && self.answered > 0 {
                warnings.push(format!(
                    "the answers' marks could not be read here; DSCP {dscp} was asked of them"
                ));
            }
        }
        let counts = |m: &BTreeMap<(u8, u8), u64>| m.iter().map(|(k, n)| (k.0, k.1, *n)).collect();
        StampReport {
            test: STAMP.into(),
            protocol: s.protocol,
            started_at: s.started_at,
            target: s.target.clone(),
            address: s.address.clone(),
            mode: s.mode.name().into(),
            rate_pps: s.rate_pps,
            size: s.size,
            duration_s,
            sent: self.sent,
            answered: self.answered,
            duplicates: self.duplicates,
            reordered: self.reordered,
            unmatched: self.unmatched,
            kernel_sent_times: self.kernel_sent_times,
            rtt_histogram: if self.answered > 0 {
                self.rtt_buckets.to_vec()
            } else {
                Vec::new()
            },
            loss: self.loss(),
            rtt_us: self.rtt.summary(false),
            reflector_hold_us: (self.answered > 0).then(|| self.hold.figures(0).p50),
            rtt_jitter_us: self.rtt_jitter.estimate / 1e3,
            forward: self.one_way(&self.forward, &self.forward_jitter, &self.forward_ipdv),
            reverse: self.one_way(&self.reverse, &self.reverse_jitter, &self.reverse_ipdv),
            clocks: Clocks {
                same_clock: s.same_clock,
                sender: s.sender_clock,
                reflector_synchronised: self.reflector_clock.synchronised(),
                reflector_error_s: self.reflector_clock.error_s(),
            },
            hops: self.ttl.filter(|t| *t > 0).map(|t| 255 - t),
            reflector_stateful: (self.answered > 0 && self.stateful).then_some(true),
            unrecognized_tlvs: self.unrecognized.iter().copied().collect(),
            marks: s.dscp.map(|dscp| Marks {
                dscp,
                forward: counts(&self.marks_forward),
                reverse: counts(&self.marks_reverse),
            }),
            intervals: self.closed.iter().map(|c| self.interval(c)).collect(),
            impossible_timestamps: self.impossible_timestamps,
            unreadable_answers: self.unreadable_answers,
            short_answers: self.short_answers,
            warnings,
            error: None,
            interrupted_after_s: interrupted.then_some(duration_s),
            host: None,
            call: self.call.as_ref().map(|call| call.summary(self.sent)),
        }
    }
}
