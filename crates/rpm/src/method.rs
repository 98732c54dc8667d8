//! The method of "Responsiveness under Working Conditions" (draft-ietf-ippm-responsiveness),
//! sans IO: the trimmed mean of probe times, responsiveness in round trips per minute, the
//! saturation rule that says when a figure has stopped moving, and the grades people
//! quote. Time comes in as seconds on the caller's clock, so every rule is tested without
//! a network.

/// The share of the lowest probe times kept by [`trimmed_mean`]: the slowest 5 % are
/// dropped (a probe that met a retransmission says little about the queue).
pub const TRIM_KEEP: f64 = 0.95;

/// The mean of the lowest `keep` share of `values` (at least one of them); `None` when
/// there are none.
pub fn trimmed_mean(values: &[f64], keep: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let kept = ((sorted.len() as f64 * keep.clamp(0.0, 1.0)).ceil() as usize).max(1);
    let kept = &sorted[..kept.min(sorted.len())];
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

/// One interval's probe times, in seconds, by kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probes {
    /// Foreign probes (a new connection each): the TCP handshake.
    pub connect_s: Vec<f64>,
    /// Foreign probes: the TLS handshake (empty over cleartext).
    pub tls_s: Vec<f64>,
    /// Foreign probes: the small object's request to its last byte.
    pub http_foreign_s: Vec<f64>,
    /// Self probes: the small object over a load-generating connection.
    pub http_self_s: Vec<f64>,
}

impl Probes {
    pub fn extend(&mut self, other: &Probes) {
        self.connect_s.extend_from_slice(&other.connect_s);
        self.tls_s.extend_from_slice(&other.tls_s);
        self.http_foreign_s.extend_from_slice(&other.http_foreign_s);
        self.http_self_s.extend_from_slice(&other.http_self_s);
    }
}

/// Responsiveness as the draft computes it: the foreign probes' stages turned into round
/// trips per minute (their trimmed means averaged), the self probes' likewise, and the
/// mean of the two. Over cleartext there is no TLS stage. `None` until both kinds have a
/// time.
pub fn responsiveness(probes: &Probes) -> Option<f64> {
    let tm = |v: &[f64]| trimmed_mean(v, TRIM_KEEP);
    let mut stages = vec![tm(&probes.connect_s)?, tm(&probes.http_foreign_s)?];
    if let Some(tls) = tm(&probes.tls_s) {
        stages.push(tls);
    }
    let foreign = stages.iter().sum::<f64>() / stages.len() as f64;
    let loaded = tm(&probes.http_self_s)?;
    if foreign <= 0.0 || loaded <= 0.0 {
        return None;
    }
    Some((60.0 / foreign + 60.0 / loaded) / 2.0)
}

/// Whether a series of per-interval figures has stopped moving: the last `window`
/// moving averages (each over `window` figures) spread, as a standard deviation, less
/// than `tolerance` of the newest average. Figures may carry weights (a rate the seconds
/// it was measured over), and then an average is the weighted one.
#[derive(Debug, Clone)]
pub struct Saturation {
    window: usize,
    tolerance: f64,
    values: Vec<(f64, f64)>,
    averages: Vec<f64>,
}

impl Saturation {
    /// The draft's defaults: four intervals, 5 %.
    pub fn new(window: usize, tolerance: f64) -> Saturation {
        Saturation {
            window: window.max(1),
            tolerance,
            values: Vec::new(),
            averages: Vec::new(),
        }
    }

    /// Adds an interval's figure; `true` once saturated.
    pub fn add(&mut self, value: f64) -> bool {
        self.add_weighted(value, 1.0)
    }

    /// Adds an interval's figure with its weight; `true` once saturated. A rate weighed by
    /// the seconds it took makes the average the amount over the time: an interval cut
    /// short (a tick late after adding a connection) counts for the time it lasted, not
    /// as much as a whole one.
    pub fn add_weighted(&mut self, value: f64, weight: f64) -> bool {
        self.values.push((value, weight.max(f64::MIN_POSITIVE)));
        let recent = &self.values[self.values.len().saturating_sub(self.window)..];
        let weights: f64 = recent.iter().map(|(_, w)| w).sum();
        self.averages
            .push(recent.iter().map(|(v, w)| v * w).sum::<f64>() / weights);
        self.saturated()
    }

    pub fn saturated(&self) -> bool {
        if self.averages.len() < self.window {
            return false;
        }
        let last = &self.averages[self.averages.len() - self.window..];
        let mean = last.iter().sum::<f64>() / last.len() as f64;
        let variance = last.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / last.len() as f64;
        let newest = *last.last().expect("window >= 1");
        newest > 0.0 && variance.sqrt() < self.tolerance * newest
    }

    /// The newest moving average.
    pub fn average(&self) -> Option<f64> {
        self.averages.last().copied()
    }
}

/// The draft's words for an RPM: under 300 low, up to 1,000 medium, above it high.
pub fn rpm_band(rpm: f64) -> &'static str {
    if rpm < 300.0 {
        "Low"
    } else if rpm < 1000.0 {
        "Medium"
    } else {
        "High"
    }
}

pub use linerate_model::measure::bufferbloat_grade;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_trimmed_mean_drops_the_slowest_twentieth() {
        let mut v: Vec<f64> = vec![1.0; 19];
        v.push(1000.0);
        assert_eq!(trimmed_mean(&v, TRIM_KEEP), Some(1.0));
        assert_eq!(trimmed_mean(&[2.0], TRIM_KEEP), Some(2.0));
        assert_eq!(trimmed_mean(&[], TRIM_KEEP), None);
    }

    #[test]
    fn responsiveness_averages_the_foreign_and_the_loaded_rpm() {
        // Foreign stages 50 ms each (1,200 RPM), self probes 100 ms (600 RPM): 900.
        let probes = Probes {
            connect_s: vec![0.05; 10],
            tls_s: vec![0.05; 10],
            http_foreign_s: vec![0.05; 10],
            http_self_s: vec![0.1; 10],
        };
        let rpm = responsiveness(&probes).unwrap();
        assert!((rpm - 900.0).abs() < 1e-6, "{rpm}");
        // Cleartext: no TLS stage.
        let clear = Probes {
            tls_s: Vec::new(),
            ..probes.clone()
        };
        assert!((responsiveness(&clear).unwrap() - 900.0).abs() < 1e-6);
        assert_eq!(responsiveness(&Probes::default()), None);
    }

    #[test]
    fn a_series_saturates_once_its_moving_averages_stop_moving() {
        let mut s = Saturation::new(4, 0.05);
        // Ramping: never saturated.
        for v in [10.0, 20.0, 40.0, 80.0, 160.0] {
            assert!(!s.add(v));
        }
        let mut saturated_at = None;
        for i in 0..12 {
            if s.add(300.0) && saturated_at.is_none() {
                saturated_at = Some(i);
            }
        }
        assert!(saturated_at.is_some_and(|i| i >= 3), "{saturated_at:?}");
    }

    #[test]
    fn a_rate_weighed_by_its_seconds_averages_to_the_amount_over_the_time() {
        // 47 Mbit/s throughout, counted in intervals of 1, 0.3 (after a late tick), 0.7
        // and 1 s; the short one caught a report that belonged to the one before.
        let mut s = Saturation::new(4, 0.05);
        let counted = [(47e6, 1.0), (40e6, 0.3), (50e6, 0.7), (47e6, 1.0)];
        for (bps, seconds) in counted {
            s.add_weighted(bps, seconds);
        }
        let bits: f64 = counted.iter().map(|(b, t)| b * t).sum();
        assert!((s.average().unwrap() - bits / 3.0).abs() < 1.0);
        // Unweighted, the short interval would count as a whole one: 46 Mbit/s.
        let mut unweighted = Saturation::new(4, 0.05);
        for (bps, _) in counted {
            unweighted.add(bps);
        }
        assert!((unweighted.average().unwrap() - 46e6).abs() < 1.0);
    }

    #[test]
    fn grades_and_bands_follow_their_scales() {
        assert_eq!(bufferbloat_grade(0.004), "A+");
        assert_eq!(bufferbloat_grade(0.029), "A");
        assert_eq!(bufferbloat_grade(0.059), "B");
        assert_eq!(bufferbloat_grade(0.199), "C");
        assert_eq!(bufferbloat_grade(0.399), "D");
        assert_eq!(bufferbloat_grade(0.400), "F");
        assert_eq!(rpm_band(299.0), "Low");
        assert_eq!(rpm_band(999.0), "Medium");
        assert_eq!(rpm_band(1000.0), "High");
    }

    proptest! {
        /// The trimmed mean lies between the least and the greatest value.
        #[test]
        fn the_trimmed_mean_is_within_the_values(v in proptest::collection::vec(0.0f64..1e3, 1..200)) {
            let m = trimmed_mean(&v, TRIM_KEEP).unwrap();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            prop_assert!(m >= lo - 1e-9 && m <= hi + 1e-9);
        }
    }
}
