//! Statistics over repeated runs: Student-t confidence intervals for the mean, the
//! stopping rule of `--confidence`, and Welch's test for whether two runs differ.
//!
//! Iterations of a test are treated as independent samples of its headline figure. With
//! few samples the normal approximation understates the interval, so the half-width uses
//! Student's t with n - 1 degrees of freedom, as netperf does.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The confidence asked for: the level (e.g. 99 %) and the largest half-width of the
/// interval as a percentage of the mean (e.g. 5 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Confidence {
    pub level_pct: f64,
    pub half_width_pct: f64,
}

impl Confidence {
    /// Parses "LEVEL,WIDTH" (`99,5`) or "LEVEL" alone (width 5 %).
    pub fn parse(text: &str) -> Result<Confidence, String> {
        let (level, width) = match text.split_once(',') {
            Some((level, width)) => (level, width),
            None => (text, "5"),
        };
        let number = |part: &str| part.trim().trim_end_matches('%').parse::<f64>().ok();
        let level_pct = number(level)
            .filter(|l| (50.0..100.0).contains(l))
            .ok_or_else(|| {
                format!("'{text}': the level '{level}' must be a percentage from 50 to below 100")
            })?;
        let half_width_pct = number(width)
            .filter(|w| *w > 0.0 && *w < 100.0)
            .ok_or_else(|| {
                format!("'{text}': the width '{width}' must be a percentage above 0 and below 100")
            })?;
        Ok(Confidence {
            level_pct,
            half_width_pct,
        })
    }
}

/// The mean of samples with its confidence interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub samples: usize,
    pub mean: f64,
    /// The sample standard deviation (n - 1 in the denominator).
    pub stddev: f64,
    pub level_pct: f64,
    /// Half the width of the interval: the mean lies within mean ± half_width at the
    /// level, under the t model. Infinite for a single sample.
    pub half_width: f64,
    /// `half_width` as a percentage of the mean.
    pub half_width_pct: f64,
}

/// The two-sided Student-t critical value for `level_pct` with `df` degrees of freedom.
pub fn t_critical(level_pct: f64, df: f64) -> f64 {
    let alpha = 1.0 - level_pct / 100.0;
    StudentsT::new(0.0, 1.0, df)
        .map(|t| t.inverse_cdf(1.0 - alpha / 2.0))
        .unwrap_or(f64::INFINITY)
}

/// The mean of `values` and its confidence interval at `level_pct`.
pub fn estimate(values: &[f64], level_pct: f64) -> Estimate {
    let n = values.len();
    let mean = if n > 0 {
        values.iter().sum::<f64>() / n as f64
    } else {
        0.0
    };
    let stddev = sample_stddev(values, mean);
    let half_width = if n >= 2 {
        t_critical(level_pct, (n - 1) as f64) * stddev / (n as f64).sqrt()
    } else {
        f64::INFINITY
    };
    let half_width_pct = if mean != 0.0 {
        half_width / mean.abs() * 100.0
    } else if half_width == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    Estimate {
        samples: n,
        mean,
        stddev,
        level_pct,
        half_width,
        half_width_pct,
    }
}

fn sample_stddev(values: &[f64], mean: f64) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
    (squares / (values.len() - 1) as f64).sqrt()
}

/// How many times to run a test: a fixed count, or until the interval is narrow enough.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RepeatPlan {
    /// At least this many iterations (at most `max`).
    pub min: u32,
    pub max: u32,
    /// Stop early once the interval at this level is within the width.
    pub confidence: Option<Confidence>,
}

/// The least number of iterations before the confidence rule may stop a run: with two
/// samples the interval rests on one degree of freedom and a lucky pair stops too soon.
pub const CONFIDENCE_MIN_ITERATIONS: u32 = 3;
/// The cap on iterations under `--confidence` when `--iterations` does not set one
/// (netperf's default too).
pub const CONFIDENCE_DEFAULT_CAP: u32 = 10;
/// The level of the interval reported for `--iterations` without `--confidence`.
pub const DEFAULT_LEVEL_PCT: f64 = 99.0;

impl RepeatPlan {
    /// The plan for `--iterations` and `--confidence` as given; `None` for one run.
    pub fn from_flags(iterations: Option<u32>, confidence: Option<Confidence>) -> Option<Self> {
        match (iterations, confidence) {
            (None | Some(1), None) => None,
            (Some(n), None) => Some(RepeatPlan {
                min: n,
                max: n,
                confidence: None,
            }),
            (cap, Some(confidence)) => {
                let max = cap.unwrap_or(CONFIDENCE_DEFAULT_CAP);
                Some(RepeatPlan {
                    min: CONFIDENCE_MIN_ITERATIONS.min(max),
                    max,
                    confidence: Some(confidence),
                })
            }
        }
    }

    pub fn level_pct(&self) -> f64 {
        self.confidence.map_or(DEFAULT_LEVEL_PCT, |c| c.level_pct)
    }

    /// Whether another iteration should run after these `values`.
    pub fn wants_more(&self, values: &[f64]) -> bool {
        let n = values.len() as u32;
        if n < self.min {
            return true;
        }
        if n >= self.max {
            return false;
        }
        match self.confidence {
            Some(_) => self.met(values) != Some(true),
            None => false,
        }
    }

    /// Whether `values` meet the confidence asked for (`None` when none was asked).
    pub fn met(&self, values: &[f64]) -> Option<bool> {
        self.confidence
            .map(|c| estimate(values, c.level_pct).half_width_pct <= c.half_width_pct)
    }
}

/// Welch's two-sample t test: do two sets of iterations have different means?
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value: the chance of a difference at least this large if the means
    /// were equal.
    pub p_value: f64,
    pub level_pct: f64,
    /// `p_value` below 1 - level.
    pub significant: bool,
}

/// Welch's test of `a` against `b` at `level_pct`; `None` when either has fewer than two
/// samples (no variance to judge by).
pub fn welch(a: &[f64], b: &[f64], level_pct: f64) -> Option<Difference> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (ea, eb) = (estimate(a, level_pct), estimate(b, level_pct));
    let va = ea.stddev.powi(2) / a.len() as f64;
    let vb = eb.stddev.powi(2) / b.len() as f64;
    let alpha = 1.0 - level_pct / 100.0;
    if va + vb == 0.0 {
        // No spread at all: any difference is certain, none is not one.
        let differs = ea.mean != eb.mean;
        return Some(Difference {
            t: if differs { f64::INFINITY } else { 0.0 },
            df: (a.len() + b.len() - 2) as f64,
            p_value: if differs { 0.0 } else { 1.0 },
            level_pct,
            significant: differs,
        });
    }
    let t = (ea.mean - eb.mean) / (va + vb).sqrt();
    let df =
        (va + vb).powi(2) / (va.powi(2) / (a.len() - 1) as f64 + vb.powi(2) / (b.len() - 1) as f64);
    let p_value = StudentsT::new(0.0, 1.0, df)
        .map(|dist| 2.0 * (1.0 - dist.cdf(t.abs())))
        .unwrap_or(1.0);
    Some(Difference {
        t,
        df,
        p_value,
        level_pct,
        significant: p_value < alpha,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= tolerance
    }

    /// Critical values from printed t tables.
    #[test]
    fn t_critical_values_match_the_tables() {
        for (level, df, expected) in [
            (95.0, 1.0, 12.706),
            (95.0, 9.0, 2.262),
            (99.0, 4.0, 4.604),
            (99.0, 9.0, 3.250),
            (90.0, 30.0, 1.697),
            (99.0, 1000.0, 2.581),
        ] {
            let t = t_critical(level, df);
            assert!(close(t, expected, 0.001), "t({level}, {df}) = {t}");
        }
    }

    /// 10, 12, 14, 16, 18: mean 14, s = sqrt(10), 99 % half-width = 4.604 * s / sqrt(5).
    #[test]
    fn the_interval_of_known_samples() {
        let e = estimate(&[10.0, 12.0, 14.0, 16.0, 18.0], 99.0);
        assert_eq!(e.samples, 5);
        assert!(close(e.mean, 14.0, 1e-12));
        assert!(close(e.stddev, 10f64.sqrt(), 1e-12));
        let expected = 4.604_094 * 10f64.sqrt() / 5f64.sqrt();
        assert!(close(e.half_width, expected, 1e-5), "{e:?}");
        assert!(close(e.half_width_pct, expected / 14.0 * 100.0, 1e-4));
        // One sample has no interval.
        assert!(estimate(&[5.0], 99.0).half_width.is_infinite());
        // Identical samples have a zero-width one.
        assert_eq!(estimate(&[3.0, 3.0, 3.0], 99.0).half_width, 0.0);
    }

    #[test]
    fn confidence_flags_parse_and_refuse_nonsense() {
        assert_eq!(
            Confidence::parse("99,5").unwrap(),
            Confidence {
                level_pct: 99.0,
                half_width_pct: 5.0
            }
        );
        assert_eq!(Confidence::parse("95").unwrap().half_width_pct, 5.0);
        assert_eq!(Confidence::parse("99.9%,2.5%").unwrap().level_pct, 99.9);
        for bad in ["100,5", "40,5", "99,0", "99,x", "abc", "99,100"] {
            let error = Confidence::parse(bad).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn the_stopping_rule() {
        let plan = RepeatPlan::from_flags(None, Some(Confidence::parse("99,5").unwrap())).unwrap();
        assert_eq!((plan.min, plan.max), (3, 10));
        // Tight samples stop at the minimum of three.
        assert!(plan.wants_more(&[100.0, 100.5]));
        assert!(!plan.wants_more(&[100.0, 100.5, 99.8]));
        assert_eq!(plan.met(&[100.0, 100.5, 99.8]), Some(true));
        // Wide ones run on to the cap, and say they missed.
        let wide = [100.0, 140.0, 70.0, 120.0, 90.0, 60.0, 130.0, 80.0, 110.0];
        assert!(plan.wants_more(&wide));
        let mut capped = wide.to_vec();
        capped.push(100.0);
        assert!(!plan.wants_more(&capped));
        assert_eq!(plan.met(&capped), Some(false));
        // A fixed count runs exactly that many.
        let fixed = RepeatPlan::from_flags(Some(4), None).unwrap();
        assert!(fixed.wants_more(&[1.0, 1.0, 1.0]));
        assert!(!fixed.wants_more(&[1.0, 1.0, 1.0, 1.0]));
        assert_eq!(fixed.met(&[1.0; 4]), None);
        assert_eq!(RepeatPlan::from_flags(Some(1), None), None);
        assert_eq!(RepeatPlan::from_flags(None, None), None);
        // --iterations caps --confidence.
        let capped = RepeatPlan::from_flags(Some(2), Some(Confidence::parse("95").unwrap()));
        assert_eq!(capped.map(|p| (p.min, p.max)), Some((2, 2)));
    }

    /// Welch's test against values worked out independently (the textbook formulas in
    /// Python, the p-value by numerical integration of the t density).
    #[test]
    fn welch_matches_a_reference_computation() {
        // t = -4.31522, df = 7.45410, two-sided p = 0.0030228
        let a = [19.1, 20.2, 20.9, 19.6, 20.4];
        let b = [21.3, 22.0, 21.1, 22.4, 21.9];
        let d = welch(&a, &b, 95.0).unwrap();
        assert!(close(d.t, -4.31522, 1e-4), "{d:?}");
        assert!(close(d.df, 7.45410, 1e-4), "{d:?}");
        assert!(close(d.p_value, 0.003_022_8, 2e-6), "{d:?}");
        assert!(d.significant);
        // Overlapping noise is not significant.
        let c = [20.0, 21.5, 19.0, 22.0, 20.5];
        let d = welch(&a, &c, 95.0).unwrap();
        assert!(!d.significant && d.p_value > 0.2, "{d:?}");
        // Single runs cannot be judged.
        assert!(welch(&[1.0], &b, 95.0).is_none());
        // No spread: equal means are not different, unequal ones are.
        assert!(!welch(&[5.0, 5.0], &[5.0, 5.0], 95.0).unwrap().significant);
        assert!(welch(&[5.0, 5.0], &[6.0, 6.0], 95.0).unwrap().significant);
    }
}
