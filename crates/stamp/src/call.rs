//! A call carried by an echo session (`linerate app --pattern voip --peer irtt`): the
//! sender's requests, one codec frame every 20 ms, are the call's way out; the reflector's
//! answers, one for each request it receives, the way back. Each answer brings both ways'
//! one-way delays (T2 − T1 out, T4 − T3 back) and the reflector's own account of what it
//! received (its count, and irtt's window of the last 64 requests), from which each way's
//! losses are placed, their runs counted, and a jitter buffer judged, so that each way is
//! scored as `linerate app --pattern voip` scores its own (ITU-T G.107's E-model).
//!
//! Sans-IO: the tally hands the answers in as they arrive; the figures are made at the end.

use linerate_model::call::{AdaptivePlayout, CallSettings, CallWayCounts, JitterBuffer};
use linerate_model::latency::LatencyHistogram;
use linerate_model::{CallStream, Direction};
use linerate_report::model::{CallSummary, CallWay};

/// Answers kept, at most: a call's 50 a second for five hours. Past it, answers are not
/// kept and the ways are scored on the first (the summary's counts say how many).
pub const MOST_KEPT: usize = 1 << 20;

/// One answered request as the call sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    /// The request's sequence number (the sender's).
    pub seq: u32,
    /// The reflector's count of the requests it had received, this one among them, less
    /// one: its order of arrival there.
    pub reflector_seq: u32,
    /// irtt's received window: bit i set where request `seq − i` had been received (bit 0
    /// this one); `None` or 0 where the reflector did not say.
    pub window: Option<u64>,
    /// One-way delays, nanoseconds: out (T2 − T1) and back (T4 − T3); `None` where the
    /// answer's timestamps could not all be true (it arrived; its delay is not known).
    pub transit_ns: Option<(i64, i64)>,
}

/// The answers of a call, in the order they arrived.
#[derive(Debug, Clone)]
pub struct CallLog {
    settings: CallSettings,
    /// Each way's Quality of Outcome requirement (`--qoo`); `None`: a voice call's.
    qoo: Option<linerate_model::qoo::Requirement>,
    echoes: Vec<Echo>,
}

/// A jitter buffer judging one way's datagrams in their order of arrival.
enum Playout {
    /// Set on the first datagram's transit.
    Fixed {
        buffer_ns: i128,
        first: Option<i128>,
    },
    Adaptive(Box<AdaptivePlayout>),
}

impl Playout {
    fn of(buffer: JitterBuffer) -> Playout {
        match buffer {
            JitterBuffer::Fixed { ms } => Playout::Fixed {
                buffer_ns: i128::from(ms) * 1_000_000,
                first: None,
            },
            JitterBuffer::Adaptive { most_ms } => {
                Playout::Adaptive(Box::new(AdaptivePlayout::new(most_ms)))
            }
        }
    }

    fn late(&mut self, transit_ns: i64) -> bool {
        let transit = i128::from(transit_ns);
        match self {
            Playout::Fixed { buffer_ns, first } => {
                let first = *first.get_or_insert(transit);
                transit - first > *buffer_ns
            }
            Playout::Adaptive(adaptive) => adaptive.late(transit),
        }
    }

    /// An adaptive buffer's mean depth, milliseconds; `None` for a fixed one.
    fn adapted_ms(&self) -> Option<f64> {
        match self {
            Playout::Fixed { .. } => None,
            Playout::Adaptive(adaptive) => Some(adaptive.mean_depth_ns() / 1e6),
        }
    }
}

/// One way's datagrams as its receiver would have counted them.
struct Way {
    direction: Direction,
    /// Every datagram sent this way, in its order of sending (by the request's sequence
    /// number), and whether it arrived.
    sequence: Vec<(u32, bool)>,
    /// The datagrams whose delay is known and their transits, in their order of arrival.
    transits: Vec<(u32, i64)>,
}

impl CallLog {
    pub fn new(call: CallStream) -> CallLog {
        CallLog {
            settings: call.settings,
            qoo: call.qoo,
            echoes: Vec::new(),
        }
    }

    /// Takes an answer in as it arrived (a duplicate is the tally's to refuse).
    pub fn answered(&mut self, echo: Echo) {
        if self.echoes.len() < MOST_KEPT {
            self.echoes.push(echo);
        }
    }

    /// Both ways of the call, scored, after `sent` requests.
    ///
    /// The way out: `sent` datagrams; those the reflector received are every answered one
    /// and, between two answered requests, those the later answer's window marks (exact
    /// within 64 requests) or, without a window, as many as the reflector's count rose,
    /// taken as the gap's first (its losses one run, at its end). The way back: one answer
    /// for each request received; the received are the answered, and an unanswered
    /// request the reflector received is a loss back. Requests after the last answer are
    /// counted lost on the way out (nothing tells their fate). Each way's jitter buffer
    /// judges the datagrams whose delay is known (every answered one) in their order of
    /// arrival: at the reflector by its count, here as the answers came.
    pub fn summary(&self, sent: u64) -> CallSummary {
        // The answers in two orders, by reference: the requests', and the reflector's.
        let mut by_seq: Vec<&Echo> = self.echoes.iter().collect();
        by_seq.sort_by_key(|e| e.seq);
        by_seq.dedup_by_key(|e| e.seq);
        let received_out = received_out(&by_seq, sent);
        // The way back: the reflector answered each request it received, in order.
        let answered = |seq: u32| by_seq.binary_search_by_key(&seq, |e| e.seq).is_ok();
        let mut at_reflector: Vec<&Echo> = self.echoes.iter().collect();
        at_reflector.sort_by_key(|e| e.reflector_seq);
        let transits = |echoes: &[&Echo], pick: fn((i64, i64)) -> i64| {
            echoes
                .iter()
                .filter_map(|e| e.transit_ns.map(|t| (e.seq, pick(t))))
                .collect()
        };
        let as_arrived: Vec<&Echo> = self.echoes.iter().collect();
        let ways = [
            Way {
                direction: Direction::Forward,
                sequence: (0u32..).zip(received_out.iter().copied()).collect(),
                transits: transits(&at_reflector, |t| t.0),
            },
            Way {
                direction: Direction::Reverse,
                sequence: (0u32..)
                    .zip(received_out.iter())
                    .filter(|(_, received)| **received)
                    .map(|(seq, _)| (seq, answered(seq)))
                    .collect(),
                transits: transits(&as_arrived, |t| t.1),
            },
        ];
        CallSummary {
            codec: self.settings.codec,
            jitter_buffer_ms: self.settings.jitter_buffer_ms,
            adaptive: self.settings.adaptive,
            ways: ways.into_iter().map(|w| self.scored(w)).collect(),
        }
    }

    fn scored(&self, way: Way) -> CallWay {
        let mut playout = Playout::of(self.settings.buffer());
        let mut late = std::collections::HashSet::new();
        let mut delays = LatencyHistogram::new();
        let mut jitter = 0.0f64;
        let mut previous: Option<i64> = None;
        let mut sum = 0i128;
        for &(seq, transit) in &way.transits {
            if playout.late(transit) {
                late.insert(seq);
            }
            // A delay below zero is the clocks', never the network's: counted at zero.
            delays.record(transit.max(0) as u64);
            sum += i128::from(transit);
            if let Some(previous) = previous {
                let d = (transit - previous).unsigned_abs() as f64;
                jitter += (d - jitter) / 16.0;
            }
            previous = Some(transit);
        }
        let known = way.transits.len();
        let one_way_delay_ms = (known > 0).then(|| sum as f64 / known as f64 / 1e6);
        let one_way_delay_us = (known > 0).then(|| delays.summary(false));
        let sent = way.sequence.len() as u64;
        let received = way.sequence.iter().filter(|(_, heard)| *heard).count() as u64;
        let loss_events = runs_missing(way.sequence.iter().map(|(_, heard)| *heard));
        let unplayed_runs = runs_missing(
            way.sequence
                .iter()
                .map(|(seq, heard)| *heard && !late.contains(seq)),
        );
        let late = late.len() as u64;
        let lost = sent.saturating_sub(received);
        let adapted_ms = playout.adapted_ms();
        let score = linerate_model::call::score(
            &self.settings,
            &CallWayCounts {
                one_way_delay_ms: one_way_delay_ms.unwrap_or(0.0),
                received,
                lost,
                late,
                loss_events,
                unplayed_runs,
                jitter_buffer_ms: adapted_ms.unwrap_or(f64::from(self.settings.jitter_buffer_ms)),
            },
        );
        let qoo = one_way_delay_us.as_ref().map(|latency_us| {
            let given = self.qoo.as_ref();
            linerate_model::qoo::Requirement::score_call(given, latency_us, sent, lost + late)
        });
        CallWay {
            direction: way.direction,
            received,
            lost,
            late,
            loss_events,
            unplayed_runs,
            silent: 0,
            one_way_delay_ms,
            one_way_delay_us,
            qoo,
            jitter_ms: jitter / 1e6,
            jitter_buffer_ms: adapted_ms,
            score,
        }
    }
}

/// Which of the `sent` requests the reflector received, from the answers in order of
/// their sequence numbers (see [`CallLog::summary`]).
fn received_out(by_seq: &[&Echo], sent: u64) -> Vec<bool> {
    let sent = usize::try_from(sent)
        .unwrap_or(usize::MAX)
        .min(MOST_KEPT * 64);
    let mut received = vec![false; sent];
    let mut previous: Option<&Echo> = None;
    for echo in by_seq {
        let seq = echo.seq as usize;
        if seq >= sent {
            continue;
        }
        received[seq] = true;
        let gap_start = previous.map_or(0, |p| p.seq as usize + 1);
        let gap = seq - gap_start;
        match echo.window.filter(|w| *w & 1 == 1) {
            Some(window) if gap < 64 => {
                for (i, slot) in received[gap_start..seq].iter_mut().rev().enumerate() {
                    *slot = window & (1 << (i + 1)) != 0;
                }
            }
            _ => {
                // The count rose by those received in the gap and this one; a reflector
                // whose count went back (restarted) is taken to have received none.
                let counted = previous.map_or(echo.reflector_seq as usize, |p| {
                    echo.reflector_seq
                        .checked_sub(p.reflector_seq)
                        .map_or(0, |rose| rose.saturating_sub(1) as usize)
                });
                for slot in received[gap_start..seq].iter_mut().take(counted.min(gap)) {
                    *slot = true;
                }
            }
        }
        previous = Some(echo);
    }
    received
}

/// Runs of consecutive `false` in `arrived`.
fn runs_missing(arrived: impl Iterator<Item = bool>) -> u64 {
    let mut runs = 0;
    let mut in_run = false;
    for came in arrived {
        if !came && !in_run {
            runs += 1;
        }
        in_run = !came;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::call::Codec;

    fn settings(buffer: JitterBuffer) -> CallStream {
        CallStream::of(CallSettings::checked(Codec::parse("g711").unwrap(), buffer).unwrap())
    }

    const MS: i64 = 1_000_000;

    /// A call whose requests 0..10 went: 3 and 4 lost on the way out, 7 lost on the way
    /// back, 9's answer late (its transit back 50 ms over the first's, past a 40 ms
    /// buffer). Told once with irtt's window and once with the reflector's count alone.
    #[test]
    fn each_ways_losses_are_placed_and_its_late_datagrams_judged() {
        for with_window in [true, false] {
            let mut log = CallLog::new(settings(JitterBuffer::Fixed { ms: 40 }));
            let mut window = 0u64;
            let mut count = 0u32;
            for seq in 0..10u32 {
                if seq == 3 || seq == 4 {
                    window <<= 1;
                    continue;
                }
                window = (window << 1) | 1;
                count += 1;
                if seq == 7 {
                    continue;
                }
                log.answered(Echo {
                    seq,
                    reflector_seq: count - 1,
                    window: with_window.then_some(window),
                    transit_ns: Some((20 * MS, if seq == 9 { 90 * MS } else { 40 * MS })),
                });
            }
            let call = log.summary(10);
            let (out, back) = (&call.ways[0], &call.ways[1]);
            assert_eq!(out.direction, Direction::Forward);
            assert_eq!((out.received, out.lost, out.loss_events), (8, 2, 1));
            assert_eq!((back.received, back.lost, back.loss_events), (7, 1, 1));
            assert_eq!((out.late, back.late), (0, 1));
            // Back, 7 lost and 9 late are apart (8 was heard): two runs unheard.
            assert_eq!((out.unplayed_runs, back.unplayed_runs), (1, 2));
            assert!((out.one_way_delay_ms.unwrap() - 20.0).abs() < 1e-9);
            // The late answer counts among the way's losses for the score.
            assert!((back.score.loss_pct - 2.0 / 8.0 * 100.0).abs() < 1e-9);
        }
    }

    /// With the window, losses a gap's count alone cannot place are placed: 2 lost out
    /// and 4 lost back, interleaved in one gap, are two runs out and one back.
    #[test]
    fn a_window_places_interleaved_losses() {
        let mut log = CallLog::new(settings(JitterBuffer::Fixed { ms: 60 }));
        // Requests 0..8: 1 and 3 lost out; 2, 4, 5 and 6 lost back; 0 and 7 answered.
        let received = [true, false, true, false, true, true, true, true];
        let window = received
            .iter()
            .rev()
            .fold(0u64, |w, r| (w << 1) | u64::from(*r));
        for (seq, reflector_seq, window) in [(0u32, 0u32, 1u64), (7, 5, window)] {
            log.answered(Echo {
                seq,
                reflector_seq,
                window: Some(window),
                transit_ns: Some((MS, MS)),
            });
        }
        let call = log.summary(8);
        assert_eq!((call.ways[0].lost, call.ways[0].loss_events), (2, 2));
        assert_eq!((call.ways[1].lost, call.ways[1].loss_events), (4, 1));
        assert_eq!(call.ways[1].unplayed_runs, 1);
        assert_eq!(call.ways[1].received, 2);
    }

    /// Requests after the last answer are lost on the way out; a delay below zero (the
    /// clocks') is held at zero in the distribution.
    #[test]
    fn the_unanswered_tail_is_lost_out_and_clocks_never_make_a_negative_delay() {
        let mut log = CallLog::new(settings(JitterBuffer::Adaptive { most_ms: 200 }));
        for seq in 0..5u32 {
            log.answered(Echo {
                seq,
                reflector_seq: seq,
                window: None,
                transit_ns: Some((-3 * MS, 5 * MS)),
            });
        }
        let call = log.summary(8);
        assert_eq!((call.ways[0].lost, call.ways[0].loss_events), (3, 1));
        assert_eq!(call.ways[1].lost, 0);
        assert!(call.ways[0].one_way_delay_us.as_ref().unwrap().min < 0.01);
        assert!(call.ways[0].jitter_buffer_ms.is_some());
    }
}
