//! Round-trip latency figures: HDR histograms kept per worker, merged, and reduced to the
//! percentiles request/response tests report (docs/results.md).
//!
//! Values are recorded in nanoseconds with three significant digits (HdrHistogram keeps
//! every value within 0.1 % of its true value), from 1 ns to 100 s; a longer round trip
//! saturates at the top and still counts. Figures are reported in microseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The longest round trip recorded exactly, in nanoseconds.
const HIGHEST_NS: u64 = 100_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// Round-trip times of one worker, one interval, or a whole test.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            // The bounds are constants within HdrHistogram's limits.
            inner: Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
                .expect("valid histogram bounds"),
        }
    }

    /// Records one round trip of `ns` nanoseconds (0 counts as 1 ns).
    pub fn record(&mut self, ns: u64) {
        self.inner.saturating_record(ns.max(1));
    }

    /// Records `count` round trips of `ns` nanoseconds.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        self.inner.saturating_record_n(ns.max(1), count);
    }

    /// Adds every value of `other`: the histogram of both.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both share the same bounds, so addition cannot fail.
        self.inner
            .add(&other.inner)
            .expect("histograms with equal bounds add");
    }

    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    /// The value at `quantile` (0 to 1), in microseconds.
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        self.inner.value_at_quantile(quantile) as f64 / 1e3
    }

    /// Every non-empty bucket, in increasing order: one pass over the histogram, where a
    /// summary's percentiles take several.
    pub fn buckets(&self) -> Vec<LatencyBucket> {
        self.inner
            .iter_recorded()
            .map(|v| LatencyBucket {
                // The bucket's highest equivalent value: what a percentile reports.
                le_us: self.inner.highest_equivalent(v.value_iterated_to()) as f64 / 1e3,
                count: v.count_at_value(),
            })
            .collect()
    }

    /// The reported figures, with the full histogram (`with_buckets`) or without.
    pub fn summary(&self, with_buckets: bool) -> LatencySummary {
        if self.count() == 0 {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        let histogram = if with_buckets {
            self.buckets()
        } else {
            Vec::new()
        };
        LatencySummary {
            count: self.count(),
            mean: self.inner.mean() / 1e3,
            stddev: self.inner.stdev() / 1e3,
            min: us(self.inner.min()),
            p50: self.quantile_us(0.50),
            p90: self.quantile_us(0.90),
            p99: self.quantile_us(0.99),
            p999: self.quantile_us(0.999),
            p9999: self.quantile_us(0.9999),
            max: us(self.inner.highest_equivalent(self.inner.max())),
            histogram,
        }
    }
}

/// One bucket of the full histogram: round trips of at most `le_us` (and more than the
/// previous bucket's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyBucket {
    pub le_us: f64,
    pub count: u64,
}

/// Round-trip time figures in microseconds (docs/results.md, `latency_us`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Round trips measured.
    pub count: u64,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    /// Every non-empty bucket, in increasing order; empty where not asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<LatencyBucket>,
}

impl LatencyHistogram {
    /// A histogram holding a summary's buckets again (each value at its bucket's top,
    /// within HdrHistogram's resolution of where it was recorded), for merging figures
    /// that travelled as summaries.
    pub fn from_buckets(buckets: &[LatencyBucket]) -> LatencyHistogram {
        let mut histogram = LatencyHistogram::new();
        for bucket in buckets {
            histogram.record_n((bucket.le_us * 1e3).round() as u64, bucket.count);
        }
        histogram
    }
}

/// The buckets of a distribution `now` less those it held `before` (an interval's, from
/// two snapshots of one growing distribution); buckets left empty are left out.
pub fn buckets_since(now: &[LatencyBucket], before: &[LatencyBucket]) -> Vec<LatencyBucket> {
    let mut earlier = before.iter().peekable();
    now.iter()
        .filter_map(|bucket| {
            // Both in order of their tops, `before`'s a subset of `now`'s.
            while earlier.next_if(|b| b.le_us < bucket.le_us).is_some() {}
            let had = earlier
                .next_if(|b| b.le_us == bucket.le_us)
                .map_or(0, |b| b.count);
            let count = bucket.count.saturating_sub(had);
            (count > 0).then_some(LatencyBucket {
                le_us: bucket.le_us,
                count,
            })
        })
        .collect()
}

/// Two distributions' buckets as one: counts of buckets with the same top added, in order
/// of their tops (each list in that order, as a summary gives them).
pub fn buckets_merged(a: &[LatencyBucket], b: &[LatencyBucket]) -> Vec<LatencyBucket> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.le_us == y.le_us => {
                merged.push(LatencyBucket {
                    le_us: x.le_us,
                    count: x.count + y.count,
                });
                (i, j) = (i + 1, j + 1);
            }
            (Some(x), Some(y)) if x.le_us < y.le_us => {
                merged.push(x.clone());
                i += 1;
            }
            (Some(x), None) => {
                merged.push(x.clone());
                i += 1;
            }
            (_, Some(y)) => {
                merged.push(y.clone());
                j += 1;
            }
            (None, None) => return merged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets of (top in us, count).
    fn delays(values: &[(f64, u64)]) -> Vec<LatencyBucket> {
        values
            .iter()
            .map(|&(le_us, count)| LatencyBucket { le_us, count })
            .collect()
    }

    #[test]
    fn two_distributions_buckets_merge_by_their_tops() {
        assert_eq!(
            buckets_merged(
                &delays(&[(1.0, 2), (3.0, 1), (9.0, 4)]),
                &delays(&[(2.0, 5), (3.0, 2), (10.0, 1)])
            ),
            delays(&[(1.0, 2), (2.0, 5), (3.0, 3), (9.0, 4), (10.0, 1)])
        );
        assert_eq!(
            buckets_merged(&[], &delays(&[(2.0, 5)])),
            delays(&[(2.0, 5)])
        );
        assert_eq!(
            buckets_merged(&delays(&[(2.0, 5)]), &[]),
            delays(&[(2.0, 5)])
        );
    }

    /// An interval's buckets are the later snapshot's less the earlier's, matched by
    /// their tops; a bucket that did not grow is left out.
    #[test]
    fn an_intervals_buckets_are_the_later_less_the_earlier() {
        let before = delays(&[(5.0, 3), (20.0, 10)]);
        let now = delays(&[(2.0, 1), (5.0, 3), (20.0, 12), (58.0, 4)]);
        let since: Vec<(f64, u64)> = buckets_since(&now, &before)
            .iter()
            .map(|b| (b.le_us, b.count))
            .collect();
        assert_eq!(since, [(2.0, 1), (20.0, 2), (58.0, 4)]);
        assert_eq!(buckets_since(&now, &[]).len(), 4);
        assert!(buckets_since(&before, &before).is_empty());
    }

    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() <= expected * 0.001 + 1e-9
    }

    /// 1..=10,000 µs, one each: every percentile is known exactly (to HdrHistogram's
    /// 0.1 % resolution).
    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new();
        for us in 1..=10_000u64 {
            h.record(us * 1000);
        }
        let s = h.summary(false);
        assert_eq!(s.count, 10_000);
        for (actual, expected) in [
            (s.p50, 5_000.0),
            (s.p90, 9_000.0),
            (s.p99, 9_900.0),
            (s.p999, 9_990.0),
            (s.p9999, 9_999.0),
            (s.max, 10_000.0),
            (s.min, 1.0),
            (s.mean, 5_000.5),
        ] {
            assert!(close(actual, expected), "{actual} vs {expected}: {s:?}");
        }
        // The standard deviation of 1..=n is sqrt((n^2 - 1) / 12).
        let sd = ((10_000f64.powi(2) - 1.0) / 12.0).sqrt();
        assert!((s.stddev - sd).abs() < sd * 0.002, "{} vs {sd}", s.stddev);
    }

    /// Merging per-worker histograms gives the histogram of all values: a rare slow
    /// outlier on one worker lands in the merged tail, not lost in an average.
    #[test]
    fn merged_workers_keep_each_others_tails() {
        let mut fast = LatencyHistogram::new();
        let mut mixed = LatencyHistogram::new();
        for _ in 0..9_990 {
            fast.record(20_000); // 20 µs
        }
        for i in 0..10 {
            mixed.record(2_000_000 + i); // about 2 ms
        }
        let mut all = LatencyHistogram::new();
        all.merge(&fast);
        all.merge(&mixed);
        let s = all.summary(true);
        assert_eq!(s.count, 10_000);
        assert!(close(s.p50, 20.0) && close(s.p99, 20.0), "{s:?}");
        assert!(close(s.p9999, 2_000.0), "{s:?}");
        assert!(s.max >= 2_000.0 && s.max < 2_003.0, "{s:?}");
        // The buckets add up to the count and rise.
        assert_eq!(s.histogram.iter().map(|b| b.count).sum::<u64>(), 10_000);
        assert!(s.histogram.windows(2).all(|w| w[0].le_us < w[1].le_us));
        assert_eq!(s.histogram[0].count, 9_990);
    }

    #[test]
    fn an_empty_histogram_reports_zeros_and_a_huge_value_saturates() {
        assert_eq!(
            LatencyHistogram::new().summary(true),
            LatencySummary::default()
        );
        let mut h = LatencyHistogram::new();
        h.record(u64::MAX);
        h.record(0);
        let s = h.summary(false);
        assert_eq!(s.count, 2);
        assert!(s.max >= 1e8 * 0.999, "{s:?}");
    }
}
