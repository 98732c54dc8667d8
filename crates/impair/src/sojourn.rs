//! How long frames waited in the queue before the bottleneck: a fixed histogram of
//! quarter-octave buckets from 1 us to about 2 s, cheap enough to fill for every frame
//! and to add across forwarding threads. A percentile read from it is within 9 % of the
//! true value (a bucket's width), enough to tell a queue held near CoDel's 5 ms from one
//! sitting at 250 ms.

use serde::{Deserialize, Serialize};

/// Buckets a side: bucket `i` holds waits from 2^(i/4) us to 2^((i+1)/4) us; the first
/// also holds shorter waits (a frame that met an idle bottleneck waits 0), the last
/// longer ones.
pub const BUCKETS: usize = 84;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<u64>", into = "Vec<u64>")]
pub struct Sojourns {
    counts: [u64; BUCKETS],
}

impl Default for Sojourns {
    fn default() -> Sojourns {
        Sojourns {
            counts: [0; BUCKETS],
        }
    }
}

impl From<Vec<u64>> for Sojourns {
    /// From a status file: extra buckets are added into the last, missing ones are 0.
    fn from(counts: Vec<u64>) -> Sojourns {
        let mut sojourns = Sojourns::default();
        for (i, n) in counts.into_iter().enumerate() {
            sojourns.counts[i.min(BUCKETS - 1)] += n;
        }
        sojourns
    }
}

impl From<Sojourns> for Vec<u64> {
    fn from(sojourns: Sojourns) -> Vec<u64> {
        // Trailing empty buckets are left out: a short status file.
        let used = sojourns
            .counts
            .iter()
            .rposition(|n| *n > 0)
            .map_or(0, |i| i + 1);
        sojourns.counts[..used].to_vec()
    }
}

impl Sojourns {
    fn bucket(wait_ns: u64) -> usize {
        if wait_ns < 1_000 {
            return 0;
        }
        let quarter_octaves = 4.0 * (wait_ns as f64 / 1_000.0).log2();
        (quarter_octaves as usize).min(BUCKETS - 1)
    }

    /// A frame waited `wait_ns` before the bottleneck took it.
    pub fn record(&mut self, wait_ns: u64) {
        self.counts[Self::bucket(wait_ns)] += 1;
    }

    pub fn add(&mut self, other: &Sojourns) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The wait at quantile `q` (0 to 1), milliseconds: the geometric middle of its
    /// bucket, 0 for the first; `None` with nothing recorded.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                if i == 0 {
                    return Some(0.0);
                }
                let middle_us = 2f64.powf((i as f64 + 0.5) / 4.0);
                return Some(middle_us / 1_000.0);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_is_within_a_bucket_of_the_wait() {
        for wait_ms in [0.01, 0.5, 5.0, 47.0, 250.0, 1500.0] {
            let mut s = Sojourns::default();
            for _ in 0..10 {
                s.record((wait_ms * 1e6) as u64);
            }
            let p50 = s.quantile_ms(0.5).unwrap();
            assert!(
                (p50 / wait_ms - 1.0).abs() < 0.1,
                "{wait_ms} ms read as {p50}"
            );
        }
        let mut idle = Sojourns::default();
        idle.record(0);
        assert_eq!(idle.quantile_ms(0.5), Some(0.0));
        assert_eq!(Sojourns::default().quantile_ms(0.5), None);
    }

    #[test]
    fn the_median_of_a_mix_and_the_round_trip_through_a_status_file() {
        let mut s = Sojourns::default();
        for _ in 0..30 {
            s.record(5_000_000);
        }
        for _ in 0..70 {
            s.record(200_000_000);
        }
        let p50 = s.quantile_ms(0.5).unwrap();
        assert!((180.0..220.0).contains(&p50), "{p50}");
        let p25 = s.quantile_ms(0.25).unwrap();
        assert!((4.5..5.5).contains(&p25), "{p25}");
        let text = serde_json::to_string(&s).unwrap();
        let back: Sojourns = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        let mut twice = s;
        twice.add(&s);
        assert_eq!(twice.count(), 200);
    }
}
