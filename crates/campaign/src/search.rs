//! `--find-max`: the search for the highest UDP rate a path carries with receiver-side
//! loss under a bound. Sans-IO: the caller runs each trial the search asks for and feeds
//! back what the receiver counted, so the search is tested on synthetic outcomes.
//!
//! The first trial is unpaced. If its loss is within bound, the sender is the limit and
//! the search ends. Otherwise the sender's unpaced rate bounds the search from above, and
//! the next trial is paced just under what the overloaded receiver still took (usually
//! close to the answer). While the only upper bound is the unpaced sender's rate, which
//! says little, passing rates gallop upwards (4 %, 8 %, 16 %, ... above the last pass);
//! once a paced trial fails, the search bisects between the highest passing and the
//! lowest failing rate until they are within `resolution` of each other.
//!
//! A paced trial whose sender fell short of its rate while the receivers took what it
//! sent within the bound ends the search: the sending host is the limit there, and a
//! lower rate would deliver less (halving on would end, falsely, in "no rate kept loss
//! within the bound").

/// A trial's pacing: as fast as possible, or a per-flow rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Unpaced,
    Rate(u64),
}

pub use linerate_report::TrialVerdict as Verdict;

/// What one trial's receivers and senders saw, per flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialOutcome {
    pub sender_bps: f64,
    pub receiver_bps: f64,
    pub loss_pct: f64,
}

/// A sender within this fraction of the asked rate reached it.
const SENDER_REACH: f64 = 0.98;
/// The first gallop step above a passing rate, as a fraction of it; it doubles with each
/// further pass.
const GALLOP_STEP: f64 = 0.04;
/// Trial rates below this (bit/s per flow) are not worth trying.
const FLOOR_BPS: u64 = 1_000;

#[derive(Debug, Clone)]
pub struct RateSearch {
    max_loss_pct: f64,
    resolution: f64,
    max_trials: usize,
    trials: usize,
    /// The highest rate that passed, and the lowest that failed.
    low: Option<u64>,
    high: Option<u64>,
    /// The next rate to try before bisecting (after the unpaced trial).
    hint: Option<u64>,
    /// The unpaced trial passed: the sender is the limit.
    unpaced_passed: bool,
    /// A paced trial failed, so `high` is a real bound (not the unpaced sender's rate).
    high_is_paced: bool,
    /// Passing trials since the last failure, which set the gallop's step.
    passes_in_a_row: u32,
    /// A paced trial's sender fell short of its rate with loss within the bound.
    sender_fell_short: bool,
}

impl RateSearch {
    /// A search for loss at most `max_loss_pct` percent, ending when the bounds are within
    /// `resolution` (a fraction of the upper one) or after `max_trials` trials.
    pub fn new(max_loss_pct: f64, resolution: f64, max_trials: usize) -> RateSearch {
        RateSearch {
            max_loss_pct,
            resolution,
            max_trials: max_trials.max(1),
            trials: 0,
            low: None,
            high: None,
            hint: None,
            unpaced_passed: false,
            high_is_paced: false,
            passes_in_a_row: 0,
            sender_fell_short: false,
        }
    }

    /// The trial to run next, or `None` when the search is over.
    pub fn next(&self) -> Option<Probe> {
        if self.trials == 0 {
            return Some(Probe::Unpaced);
        }
        if self.unpaced_passed || self.sender_fell_short || self.trials >= self.max_trials {
            return None;
        }
        let high = self.high?;
        if let Some(hint) = self.hint {
            return Some(Probe::Rate(hint));
        }
        let low = self.low.unwrap_or(0);
        if high.saturating_sub(low) as f64 <= self.resolution * high as f64 || high < FLOOR_BPS {
            return None;
        }
        let middle = low + (high - low) / 2;
        if self.high_is_paced || self.passes_in_a_row == 0 {
            return Some(Probe::Rate(middle));
        }
        let step = GALLOP_STEP * f64::from(1u32 << (self.passes_in_a_row - 1).min(16));
        Some(Probe::Rate(middle.min((low as f64 * (1.0 + step)) as u64)))
    }

    /// Takes the outcome of the trial `next` asked for; says whether it passed.
    pub fn record(&mut self, probe: Probe, outcome: TrialOutcome) -> Verdict {
        self.trials += 1;
        let lossy = outcome.loss_pct > self.max_loss_pct;
        match probe {
            Probe::Unpaced => {
                if !lossy {
                    self.unpaced_passed = true;
                    return Verdict::Passed;
                }
                self.high = Some(outcome.sender_bps as u64);
                let hint = (outcome.receiver_bps * 0.99) as u64;
                self.hint = (hint >= FLOOR_BPS).then_some(hint);
                Verdict::Lossy
            }
            Probe::Rate(rate) => {
                self.hint = None;
                let verdict = if lossy {
                    Verdict::Lossy
                } else if outcome.sender_bps < rate as f64 * SENDER_REACH {
                    self.sender_fell_short = true;
                    Verdict::SenderShort
                } else {
                    Verdict::Passed
                };
                if verdict == Verdict::Passed {
                    self.low = Some(self.low.map_or(rate, |l| l.max(rate)));
                    self.passes_in_a_row += 1;
                } else {
                    self.high = Some(self.high.map_or(rate, |h| h.min(rate)));
                    self.high_is_paced = true;
                    self.passes_in_a_row = 0;
                }
                verdict
            }
        }
    }

    /// The unpaced trial passed: nothing paced can do better.
    pub fn sender_is_the_limit(&self) -> bool {
        self.unpaced_passed
    }

    /// A paced trial's sender could not reach its rate, and what it sent arrived within
    /// the bound: the sending host is the limit.
    pub fn sender_fell_short(&self) -> bool {
        self.sender_fell_short
    }

    /// The highest per-flow rate that passed, if any.
    pub fn best_rate(&self) -> Option<u64> {
        self.low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that loses nothing up to `capacity` bit/s and the excess above it, behind a
    /// sender that reaches at most `sender_max`.
    fn path(capacity: f64, sender_max: f64) -> impl Fn(Probe) -> TrialOutcome {
        move |probe| {
            let offered = match probe {
                Probe::Unpaced => sender_max,
                Probe::Rate(rate) => (rate as f64).min(sender_max),
            };
            let received = offered.min(capacity);
            TrialOutcome {
                sender_bps: offered,
                receiver_bps: received,
                loss_pct: (offered - received) / offered * 100.0,
            }
        }
    }

    fn run(search: &mut RateSearch, path: impl Fn(Probe) -> TrialOutcome) -> Vec<Probe> {
        let mut probes = Vec::new();
        while let Some(probe) = search.next() {
            search.record(probe, path(probe));
            probes.push(probe);
            assert!(probes.len() <= 20, "the search does not end: {probes:?}");
        }
        probes
    }

    #[test]
    fn a_receiver_limit_is_found_within_the_resolution() {
        let mut search = RateSearch::new(0.1, 0.02, 12);
        let probes = run(&mut search, path(300e6, 1e9));
        let best = search.best_rate().unwrap() as f64;
        assert!((300e6 * 0.98..=300e6).contains(&best), "{best}");
        assert_eq!(probes[0], Probe::Unpaced);
        // The receiver's rate under overload is the first paced guess, just under it.
        assert_eq!(probes[1], Probe::Rate(297_000_000));
        assert!(!search.sender_is_the_limit());
    }

    /// A good first guess is confirmed in a few trials: gallop just above it, fail, and
    /// bisect the narrow gap, rather than bisecting down from the sender's rate.
    #[test]
    fn a_passing_guess_gallops_up_instead_of_bisecting_from_the_sender() {
        let mut search = RateSearch::new(0.1, 0.02, 12);
        let probes = run(&mut search, path(194e6, 2e9));
        assert!(probes.len() <= 5, "{probes:?}");
        let best = search.best_rate().unwrap() as f64;
        assert!((194e6 * 0.98..=194e6).contains(&best), "{best}");
    }

    /// A receiver far faster than its overloaded rate suggests is reached by galloping.
    #[test]
    fn galloping_reaches_a_capacity_far_above_the_first_guess() {
        let mut search = RateSearch::new(0.1, 0.02, 12);
        // Overloaded, the receiver takes only 100 Mbit/s; paced, it takes 400.
        let path = |probe: Probe| match probe {
            Probe::Unpaced => TrialOutcome {
                sender_bps: 1e9,
                receiver_bps: 1e8,
                loss_pct: 90.0,
            },
            Probe::Rate(rate) => {
                let rate = rate as f64;
                TrialOutcome {
                    sender_bps: rate,
                    receiver_bps: rate.min(4e8),
                    loss_pct: (rate - rate.min(4e8)) / rate * 100.0,
                }
            }
        };
        let probes = run(&mut search, path);
        let best = search.best_rate().unwrap() as f64;
        assert!(
            (4e8 * 0.97..=4e8).contains(&best),
            "{best} after {probes:?}"
        );
    }

    #[test]
    fn a_clean_unpaced_trial_ends_the_search_at_once() {
        let mut search = RateSearch::new(0.1, 0.02, 12);
        let probes = run(&mut search, path(2e9, 1e9));
        assert_eq!(probes, vec![Probe::Unpaced]);
        assert!(search.sender_is_the_limit());
        assert_eq!(search.best_rate(), None);
    }

    #[test]
    fn a_sender_short_of_the_rate_fails_the_trial() {
        let mut search = RateSearch::new(0.1, 0.02, 12);
        let unpaced = TrialOutcome {
            sender_bps: 1e9,
            receiver_bps: 5e8,
            loss_pct: 50.0,
        };
        assert_eq!(search.record(Probe::Unpaced, unpaced), Verdict::Lossy);
        let short = TrialOutcome {
            sender_bps: 4.5e8,
            receiver_bps: 4.5e8,
            loss_pct: 0.0,
        };
        let Some(Probe::Rate(rate)) = search.next() else {
            panic!("a paced trial comes next")
        };
        assert_eq!(
            search.record(Probe::Rate(rate), short),
            Verdict::SenderShort
        );
        assert_eq!(search.best_rate(), None);
        // Lower rates would deliver less: the search ends, the sender the limit.
        assert!(search.sender_fell_short());
        assert_eq!(search.next(), None);
    }

    /// A sender that paces slower than it sends unpaced (a busy host) ends the search at
    /// its first short trial instead of halving down to nothing.
    #[test]
    fn a_sender_that_cannot_pace_ends_the_search_instead_of_halving() {
        let mut search = RateSearch::new(0.1, 0.02, 12);
        let busy = |probe: Probe| match probe {
            Probe::Unpaced => TrialOutcome {
                sender_bps: 1.8e8,
                receiver_bps: 1.4e7,
                loss_pct: 92.0,
            },
            Probe::Rate(rate) => {
                let sent = (rate as f64).min(1e7);
                TrialOutcome {
                    sender_bps: sent,
                    receiver_bps: sent,
                    loss_pct: 0.0,
                }
            }
        };
        let probes = run(&mut search, busy);
        assert_eq!(probes.len(), 2, "{probes:?}");
        assert!(search.sender_fell_short());
    }

    #[test]
    fn a_path_that_always_loses_ends_within_the_trial_budget_with_no_answer() {
        let mut search = RateSearch::new(0.1, 0.02, 8);
        let lossy = |probe: Probe| {
            let offered = match probe {
                Probe::Unpaced => 1e9,
                Probe::Rate(r) => r as f64,
            };
            TrialOutcome {
                sender_bps: offered,
                receiver_bps: offered * 0.99,
                loss_pct: 1.0,
            }
        };
        let probes = run(&mut search, lossy);
        assert_eq!(probes.len(), 8);
        assert_eq!(search.best_rate(), None);
    }
}
