//! `--find-max`: short UDP trials driven by the sans-IO rate search ([`crate::search`]),
//! and the answer with what stopped the rate going higher (docs/measurement.md). The
//! trials themselves run through a closure, so the caller decides how a test is run and
//! what is printed as each trial ends.

use crate::search::{Probe, RateSearch, TrialOutcome};
use crate::sink::{Event, Sink};
use linerate_report::text;
use linerate_report::units::{format_rate, Scale};
use linerate_report::{
    CpuUsage, Direction, FindMaxReport, PerSide, RateFound, RateTrial, Report, TestConfig,
    TrialVerdict,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// The search stops when the passing and failing rates are this close (a fraction of the
/// failing one), or after this many trials.
const RESOLUTION: f64 = 0.02;
const MOST_TRIALS: usize = 12;

/// Why a search ended without an answer.
#[derive(Debug)]
pub enum FindMaxError<E> {
    /// A trial failed.
    Trial(E),
    /// Interrupted before the first trial ended.
    Interrupted,
}

/// Searches for the highest rate of `config` (a UDP stream test) whose receiver-side loss
/// stays within `max_loss_pct`. `run_trial` runs one trial; `sink` hears each as it ends.
pub fn find_max<E>(
    mut config: TestConfig,
    max_loss_pct: f64,
    scale: Scale,
    cancel: &AtomicBool,
    sink: &mut dyn Sink,
    mut run_trial: impl FnMut(&TestConfig) -> Result<Report, E>,
) -> Result<FindMaxReport, FindMaxError<E>> {
    // Trials are summed up one line each, not by intervals.
    config.interval_s = 0.0;
    config.rate_bps = None;
    let flows = f64::from(config.parallel);
    let mut search = RateSearch::new(max_loss_pct, RESOLUTION, MOST_TRIALS);
    let mut trials: Vec<RateTrial> = Vec::new();
    let mut first: Option<Report> = None;
    let mut warnings = Vec::new();
    while let Some(probe) = search.next() {
        if cancel.load(Ordering::Relaxed) {
            warnings.push("interrupted: the search ended early".to_string());
            break;
        }
        let mut trial_config = config.clone();
        trial_config.rate_bps = match probe {
            Probe::Unpaced => None,
            Probe::Rate(rate) => Some(rate),
        };
        let report = run_trial(&trial_config).map_err(FindMaxError::Trial)?;
        let udp = report.summary.udp.clone().unwrap_or_default();
        let verdict = search.record(
            probe,
            TrialOutcome {
                sender_bps: report.summary.sender_bps / flows,
                receiver_bps: report.summary.receiver_bps / flows,
                loss_pct: udp.trial_loss_pct(),
            },
        );
        let trial = RateTrial {
            offered_bps: trial_config.rate_bps.map(|rate| rate as f64 * flows),
            verdict,
            summary: report.summary.clone(),
            warnings: report.warnings.clone(),
        };
        sink.event(&Event::Trial {
            number: trials.len() + 1,
            trial: &trial,
        });
        trials.push(trial);
        first.get_or_insert(report);
    }
    let Some(first) = first else {
        return Err(FindMaxError::Interrupted);
    };
    let best_offered = search.best_rate().map(|rate| rate as f64 * flows);
    let found = if search.sender_is_the_limit() {
        trials.first()
    } else if search.sender_fell_short() {
        // What the short sender delivered within the bound, or a pass that delivered more.
        trials
            .iter()
            .filter(|t| matches!(t.verdict, TrialVerdict::Passed | TrialVerdict::SenderShort))
            .max_by(|a, b| a.summary.receiver_bps.total_cmp(&b.summary.receiver_bps))
    } else {
        trials
            .iter()
            .find(|t| t.verdict == TrialVerdict::Passed && t.offered_bps == best_offered)
    };
    let result = found.map(|trial| {
        let udp = trial.summary.udp.clone().unwrap_or_default();
        RateFound {
            offered_bps: trial.offered_bps,
            receiver_bps: trial.summary.receiver_bps,
            receiver_pps: udp.receiver_pps,
            loss_pct: udp.trial_loss_pct(),
            limited_by: if udp.qdisc_drops > 0 {
                "sender's queue"
            } else if trial.offered_bps.is_none() || trial.verdict == TrialVerdict::SenderShort {
                "sender"
            } else {
                "receiver or path"
            }
            .to_string(),
        }
    });
    let limit = limit(&config, &trials, search.sender_is_the_limit(), scale);
    Ok(FindMaxReport {
        tool: first.tool.clone(),
        test: "udp_find_max".to_string(),
        started_at: first.started_at,
        config,
        host: first.host.clone(),
        max_loss_pct,
        trials,
        result,
        limit,
        warnings,
    })
}

/// What stopped the rate going higher: the sender, when unpaced it could not overload the
/// receiver; else the lowest failing rate above the answer, in words.
fn limit(
    config: &TestConfig,
    trials: &[RateTrial],
    sender_is_the_limit: bool,
    scale: Scale,
) -> Option<String> {
    let failing = trials
        .iter()
        .filter(|t| t.verdict != TrialVerdict::Passed)
        .min_by(|a, b| {
            let rate = |t: &RateTrial| t.offered_bps.unwrap_or(f64::INFINITY);
            rate(a).total_cmp(&rate(b))
        });
    match (sender_is_the_limit, failing) {
        (true, _) => trials.first().map(|t| {
            let cpu = sending_side(config, &t.summary.cpu);
            let qdisc_drops = t.summary.udp.as_ref().map_or(0, |u| u.qdisc_drops);
            if qdisc_drops > 0 {
                return format!(
                    "unpaced, the senders reached {} and the receivers took it all within the bound, \
                     while the sending host's own queue (qdisc) dropped {qdisc_drops} datagrams on the \
                     way out: the link out of the sending host is the bottleneck",
                    format_rate(t.summary.sender_bps, scale),
                );
            }
            format!(
                "unpaced, the senders reached {} and the receivers took it all within the bound: the sender is the bottleneck (busiest sending core {:.0}%)",
                format_rate(t.summary.sender_bps, scale),
                cpu.busiest_core_pct
            )
        }),
        (false, Some(t)) => {
            let kernel = t.summary.udp.as_ref().map(|u| &u.kernel);
            let receiver_kernel = kernel.map(|k| match config.direction {
                Direction::Reverse => &k.local,
                _ => &k.remote,
            });
            Some(text::limit_words(
                t,
                receiver_kernel,
                sending_side(config, &t.summary.cpu),
            ))
        }
        (false, None) => None,
    }
}

/// The CPU figures of the host whose flows send.
fn sending_side<'a>(config: &TestConfig, sides: &'a PerSide<CpuUsage>) -> &'a CpuUsage {
    match config.direction {
        Direction::Reverse => &sides.remote,
        _ => &sides.local,
    }
}
