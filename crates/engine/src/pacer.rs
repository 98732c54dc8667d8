//! A per-flow token bucket for `--rate`, with nanosecond accounting.
//!
//! Kernel pacing (SO_MAX_PACING_RATE) needs the fq qdisc, which is not always there and
//! silently does nothing without it (docs/measurement.md 8), so pacing is done here. The
//! bucket may go into debt by one write: a write is allowed while the balance is positive
//! and its full size is charged, so the long-run rate is exact whatever the write size.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Pacer {
    bytes_per_ns: f64,
    balance: f64,
    burst: f64,
    last: Instant,
    /// Credit the bucket could not hold: earned while the sender was away (held off the
    /// CPU, or blocked) for longer than its burst covers, and never sent.
    forfeited: f64,
}

impl Pacer {
    /// `rate_bps` in bits per second; the bucket holds at most `burst` bytes of credit.
    pub fn new(now: Instant, rate_bps: u64, burst: u64) -> Pacer {
        Pacer {
            bytes_per_ns: rate_bps as f64 / 8.0 / 1e9,
            balance: 0.0,
            burst: burst as f64,
            last: now,
            forfeited: 0.0,
        }
    }

    /// Brings the credit (and the lateness) up to `now`: to each interval's boundary
    /// before lateness is read there, so a sender away across several boundaries is
    /// counted late in each interval it missed. A time before the last is a no-op.
    pub fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_nanos() as f64;
        let earned = self.balance + elapsed * self.bytes_per_ns;
        self.forfeited += (earned - self.burst).max(0.0);
        self.balance = earned.min(self.burst);
        self.last = now;
    }

    /// `None` if a write may go now; otherwise how long to wait.
    pub fn delay(&mut self, now: Instant) -> Option<Duration> {
        self.refill(now);
        if self.balance > 0.0 {
            None
        } else {
            let ns = (-self.balance / self.bytes_per_ns).ceil().max(1.0);
            Some(Duration::from_nanos(ns as u64))
        }
    }

    /// How many writes of `size` bytes may go now (at least one when any may go): the
    /// credit divided by the size, rounded up, since the bucket may go into debt by one.
    pub fn allowance(&mut self, now: Instant, size: usize) -> usize {
        self.refill(now);
        if self.balance > 0.0 {
            (self.balance / size.max(1) as f64).ceil() as usize
        } else {
            0
        }
    }

    /// How long the bucket takes to earn `bytes` of credit.
    pub fn time_for(&self, bytes: usize) -> Duration {
        Duration::from_nanos((bytes as f64 / self.bytes_per_ns).ceil() as u64)
    }

    /// How long the sender has been late past its burst, in all: the forfeited credit as
    /// time at the rate. A paced interval short of its target by this much was short
    /// because the sender did not run, not because the pacer misjudged.
    pub fn late(&self) -> Duration {
        Duration::from_nanos((self.forfeited / self.bytes_per_ns) as u64)
    }

    /// Charges bytes that were written.
    pub fn charge(&mut self, bytes: usize) {
        self.balance -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_run_rate_is_exact_on_a_virtual_clock() {
        let start = Instant::now();
        let mut now = start;
        // 100 Mbit/s with 128 KiB writes: 12.5 MB/s.
        let mut pacer = Pacer::new(now, 100_000_000, 131072);
        let mut sent = 0u64;
        let end = start + Duration::from_secs(10);
        while now < end {
            match pacer.delay(now) {
                None => {
                    pacer.charge(131072);
                    sent += 131072;
                }
                Some(wait) => now += wait,
            }
        }
        let rate = sent as f64 * 8.0 / 10.0;
        assert!((rate / 100e6 - 1.0).abs() < 0.002, "rate {rate}");
    }

    #[test]
    fn idle_time_earns_at_most_the_burst() {
        let start = Instant::now();
        let mut pacer = Pacer::new(start, 8_000_000, 10_000);
        // A second of idling would be 1 MB of credit; the burst caps it at 10 kB.
        let later = start + Duration::from_secs(1);
        assert!(pacer.delay(later).is_none());
        pacer.charge(10_000);
        assert!(pacer.delay(later).is_some());
        // What it could not hold is the time the sender was away, less the burst's
        // 10 ms: 990 ms.
        assert_eq!(pacer.late().as_millis(), 990);
    }

    #[test]
    fn a_sender_on_time_is_never_late() {
        let start = Instant::now();
        let mut now = start;
        let mut pacer = Pacer::new(now, 8_000_000, 10_000);
        for _ in 0..10_000 {
            if pacer.delay(now).is_none() {
                pacer.charge(1_000);
            }
            now += Duration::from_micros(500);
        }
        assert_eq!(pacer.late(), Duration::ZERO);
    }
}
