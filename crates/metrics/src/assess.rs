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
    /// A call's way scoring a MOS below this (1 to 4.5) is worse, baseline or not...
    pub mos_below: f64,
    /// ...and an alert once its mean over this long, seconds, is.
    pub mos_for_s: f64,
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
            mos_below: 3.6,
            mos_for_s: 300.0,
            window: 20,
            at_least: 3,
        }
    }
}

/// The absolute bound a measure is held to over a span, rather than to its baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub limit: f64,
    /// Worse above the limit (loss) or below it (a call's MOS).
    pub above: bool,
    pub span_s: f64,
}

impl Bound {
    pub fn crossed_by(&self, value: f64) -> bool {
        if self.above {
            value > self.limit
        } else {
            value < self.limit
        }
    }
}

impl Thresholds {
    /// The bound `measure` is held to, where it is held to one ([`Measure::bounded`]).
    pub fn bound(&self, measure: Measure) -> Option<Bound> {
        match measure {
            Measure::Loss => Some(Bound {
                limit: self.loss_above,
                above: true,
                span_s: self.loss_for_s,
            }),
            Measure::Mos => Some(Bound {
                limit: self.mos_below,
                above: false,
                span_s: self.mos_for_s,
            }),
            Measure::Goodput | Measure::Latency | Measure::Responsiveness | Measure::Hops => None,
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
    // Loss and a call's score are held to absolute bounds: a path that has always lost
    // 0.2 % has always been broken, and a baseline would call it normal.
    if let Some(bound) = t.bound(measure) {
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
            state: if bound.crossed_by(value) {
                State::Worse
            } else {
                State::Normal
            },
            baseline,
            ratio: (bound.limit > 0.0).then(|| value / bound.limit),
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
        (Measure::Loss | Measure::Mos | Measure::Hops, _) | (_, None) => false,
    };
    Assessment {
        state: if worse { State::Worse } else { State::Normal },
        baseline,
        ratio,
        measure: what,
    }
}
