//! Is a series worse than it was? Each series' newest value against its baseline (the
//! median and spread of its recent successful results) and the mesh file's thresholds.
//! The grid colours cells with it; the alerts open and resolve on its changes. Sans-IO.

use crate::board::{Baseline, Measure, Series};
use linerate_model::mesh_row::Outcome;
use serde::Serialize;

/// When a change is worth a colour and an alert (the mesh file's `[alerts]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Goodput below the baseline by more than this share (0.3: 30 % down).
    pub goodput_drop: f64,
    /// Transaction time above the baseline by more than this share (0.5: 50 % up), and
    /// by at least `latency_rise_min` seconds, and beyond the baseline's own spread
    /// ([`LATENCY_SPREAD_MADS`] of its median absolute deviations): a rise of tens of
    /// microseconds on a loopback that always wanders that much is no regression.
    pub latency_rise: f64,
    pub latency_rise_min: f64,
    /// Responsiveness (RPM) below the baseline by more than this share.
    pub responsiveness_drop: f64,
    /// Probes lost above this share (STAMP; 0.0005: 0.05 %) is worse, baseline or not...
    pub loss_above: f64,
    /// ...and an alert once it has been so for this long, seconds.
    pub loss_for_s: f64,
    /// The baseline: up to this many recent successful results...
    pub window: usize,
    /// ...once there are at least this many.
    pub at_least: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            goodput_drop: 0.3,
            latency_rise: 0.5,
            latency_rise_min: 0.001,
            responsiveness_drop: 0.3,
            loss_above: 0.001,
            loss_for_s: 300.0,
            window: 20,
            at_least: 3,
        }
    }
}

/// A latency is worse only beyond this many of its baseline's median absolute
/// deviations above the median.
pub const LATENCY_SPREAD_MADS: f64 = 3.0;

/// A series' state now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not enough history for a baseline.
    Learning,
    Normal,
    /// Worse than its baseline beyond the threshold.
    Worse,
    /// The newest test failed.
    Failed,
}

impl State {
    /// What the grid prints beside the colour, so that nothing relies on it.
    pub fn symbol(self) -> &'static str {
        match self {
            State::Learning => "·",
            State::Normal => "✓",
            State::Worse => "▼",
            State::Failed => "✗",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Assessment {
    pub state: State,
    pub baseline: Option<Baseline>,
    /// The newest value relative to the baseline's median (0.5: half of it).
    pub ratio: Option<f64>,
    /// Which figure (serialized as its name, "what": "goodput").
    #[serde(rename = "what")]
    pub measure: Measure,
}

pub fn assess(series: &Series, t: &Thresholds) -> Assessment {
    let latest = &series.latest;
    let measure = series.measure.unwrap_or(Measure::Goodput);
    let what = measure;
    // An interrupted job assesses as a failed one, as the grid marks it.
    if let Outcome::Failed { .. } | Outcome::Interrupted { .. } = latest.outcome {
        return Assessment {
            state: State::Failed,
            baseline: None,
            ratio: None,
            measure: what,
        };
    }
    // Loss is held to an absolute bound: a path that has always lost 0.2 % has always
    // been broken, and a baseline would call it normal.
    if measure == Measure::Loss {
        let baseline = series.baseline(t.window, t.at_least);
        let Some(value) = latest.value else {
            return Assessment {
                state: State::Learning,
                baseline,
                ratio: None,
                measure: what,
            };
        };
        return Assessment {
            state: if value > t.loss_above {
                State::Worse
            } else {
                State::Normal
            },
            baseline,
            ratio: (t.loss_above > 0.0).then(|| value / t.loss_above),
            measure: what,
        };
    }
    let baseline = series.baseline(t.window, t.at_least);
    let (Some(value), Some(base)) = (latest.value, baseline) else {
        return Assessment {
            state: State::Learning,
            baseline,
            ratio: None,
            measure: what,
        };
    };
    let ratio = (base.median > 0.0).then(|| value / base.median);
    let worse = match (measure, ratio) {
        (Measure::Goodput, Some(r)) => r < 1.0 - t.goodput_drop,
        (Measure::Latency, Some(r)) => {
            let above = value - base.median;
            r > 1.0 + t.latency_rise
                && above >= t.latency_rise_min
                && above > LATENCY_SPREAD_MADS * base.mad
        }
        (Measure::Responsiveness, Some(r)) => r < 1.0 - t.responsiveness_drop,
        (Measure::Loss | Measure::Hops, _) | (_, None) => false,
    };
    Assessment {
        state: if worse { State::Worse } else { State::Normal },
        baseline,
        ratio,
        measure: what,
    }
}
