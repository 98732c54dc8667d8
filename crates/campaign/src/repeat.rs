//! A test repeated (`--iterations`, `--confidence`) into one report: the median
//! iteration's, with every iteration and the confidence interval of the headline.

use crate::sink::{Event, Sink};
use anyhow::{anyhow, bail, Context, Result};
use linerate_report::stats::{estimate, RepeatPlan};
use linerate_report::{Headline, Repetition, Report};
use std::sync::atomic::{AtomicBool, Ordering};

/// Flows that failed: the report says which and why; the error says so again, so that a
/// run with failed flows does not end as a success.
pub fn check_flows(report: &Report) -> Result<()> {
    if report.summary.flows_failed > 0 {
        bail!(
            "{} of {} flows failed; the figures cover only what arrived",
            report.summary.flows_failed,
            report.summary.flows
        );
    }
    Ok(())
}

/// Runs a test once, or as `plan` says: `one(i, sink)` runs iteration `i` with its live
/// events going to `sink`, which also hears of every finished iteration. An iteration
/// with failed flows fails the run.
pub fn repeat(
    plan: Option<RepeatPlan>,
    cancel: &AtomicBool,
    sink: &mut dyn Sink,
    mut one: impl FnMut(u32, &mut dyn Sink) -> Result<Report>,
) -> Result<Report> {
    let Some(plan) = plan else {
        return one(0, sink);
    };
    let mut iterations: Vec<Report> = Vec::new();
    let mut values: Vec<f64> = Vec::new();
    let mut interrupted = false;
    let mut cut_short = None;
    while plan.wants_more(&values) {
        if cancel.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let index = iterations.len() as u32;
        let report = one(index, sink).with_context(|| format!("iteration {}", index + 1))?;
        if report.interrupted.is_some() {
            // An iteration cut short is no sample of the headline: the run is the ones
            // before it, or this part when it is the first.
            if iterations.is_empty() {
                return Ok(report);
            }
            cut_short = report.interrupted;
            break;
        }
        check_flows(&report).with_context(|| format!("iteration {}", index + 1))?;
        let value = Headline::of(&report.config).value(&report.summary);
        sink.event(&Event::Iteration {
            index,
            report: &report,
            value,
        });
        values.push(value);
        iterations.push(report);
    }
    let Some(first) = iterations.first() else {
        return Err(anyhow!("interrupted before the first iteration ended"));
    };
    let metric = Headline::of(&first.config);
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let representative = order[(order.len() - 1) / 2];
    let mut report = iterations[representative].clone();
    report.interrupted = cut_short;
    if interrupted || cut_short.is_some() {
        report.warnings.push(format!(
            "interrupted after {} iterations: the interval covers those",
            values.len()
        ));
    }
    report.repetition = Some(Repetition {
        metric,
        estimate: estimate(&values, plan.level_pct()),
        confidence: plan.confidence,
        met: plan.met(&values),
        max_iterations: plan.max,
        representative,
        values,
        iterations,
    });
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{report_of, stream_config};

    struct Heard(Vec<(u32, f64)>);

    impl Sink for Heard {
        fn event(&mut self, event: &Event<'_>) {
            if let Event::Iteration { index, value, .. } = event {
                self.0.push((*index, *value));
            }
        }
    }

    #[test]
    fn the_median_iteration_represents_the_run() {
        let rates = [3e9, 1e9, 2e9, 5e9, 4e9];
        let plan = RepeatPlan::from_flags(Some(5), None);
        let mut heard = Heard(Vec::new());
        let report = repeat(plan, &AtomicBool::new(false), &mut heard, |i, _| {
            Ok(report_of(stream_config(), rates[i as usize]))
        })
        .unwrap();
        assert_eq!(report.summary.receiver_bps, 3e9);
        let repetition = report.repetition.unwrap();
        assert_eq!(repetition.values, rates);
        assert_eq!(repetition.representative, 0);
        assert_eq!(heard.0.len(), 5);
        assert_eq!(heard.0[3], (3, 5e9));
    }

    #[test]
    fn once_without_a_plan_and_no_repetition_recorded() {
        let report = repeat(
            None,
            &AtomicBool::new(true),
            &mut Heard(Vec::new()),
            |_, _| Ok(report_of(stream_config(), 1e9)),
        )
        .unwrap();
        assert!(report.repetition.is_none());
    }

    #[test]
    fn an_iteration_with_failed_flows_fails_the_run() {
        let plan = RepeatPlan::from_flags(Some(3), None);
        let error = repeat(
            plan,
            &AtomicBool::new(false),
            &mut Heard(Vec::new()),
            |i, _| {
                let mut report = report_of(stream_config(), 1e9);
                report.summary.flows_failed = u32::from(i == 1);
                Ok(report)
            },
        )
        .unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "iteration 2: 1 of 1 flows failed; the figures cover only what arrived"
        );
    }

    #[test]
    fn cancelled_before_the_first_iteration_is_an_error() {
        let plan = RepeatPlan::from_flags(Some(3), None);
        let error = repeat(
            plan,
            &AtomicBool::new(true),
            &mut Heard(Vec::new()),
            |_, _| Ok(report_of(stream_config(), 1e9)),
        )
        .unwrap_err();
        assert!(error.to_string().contains("interrupted"), "{error}");
    }
}

#[cfg(test)]
mod interruption_tests {
    use super::*;
    use crate::fixtures::{report_of, stream_config};
    use crate::sink::Discard;
    use linerate_report::Interruption;

    fn cut(mut report: Report) -> Report {
        report.interrupted = Some(Interruption { after_s: 1.5 });
        report
    }

    #[test]
    fn an_iteration_cut_short_ends_the_run_without_being_a_sample() {
        let plan = RepeatPlan::from_flags(Some(5), None);
        let report = repeat(plan, &AtomicBool::new(false), &mut Discard, |i, _| {
            let report = report_of(stream_config(), f64::from(i + 1) * 1e9);
            Ok(if i == 2 { cut(report) } else { report })
        })
        .unwrap();
        let repetition = report.repetition.as_ref().unwrap();
        assert_eq!(repetition.values, [1e9, 2e9]);
        assert_eq!(report.interrupted, Some(Interruption { after_s: 1.5 }));
        assert!(report
            .warnings
            .iter()
            .any(|w| w.contains("interrupted after 2")));
    }

    #[test]
    fn a_first_iteration_cut_short_is_the_result() {
        let plan = RepeatPlan::from_flags(Some(5), None);
        let report = repeat(plan, &AtomicBool::new(false), &mut Discard, |_, _| {
            Ok(cut(report_of(stream_config(), 1e9)))
        })
        .unwrap();
        assert!(report.repetition.is_none());
        assert!(report.interrupted.is_some());
    }
}
