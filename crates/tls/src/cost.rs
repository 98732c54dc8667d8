//! What sealing and opening cost, in the thread's CPU time.
//!
//! The thread CPU clock is a system call (no vDSO), about 0.3 us here: reading it around
//! every 16 KiB record would cost several percent of a core at 10 Gbit/s. So one call in
//! `every` is timed, and its CPU time counts `every` times: the calls of a stream are alike
//! (full records, or one record per transaction), so the estimate is unbiased, and over
//! thousands of calls its error is a small fraction of the total. CPU time, not the wall
//! clock: a thread preempted inside a call is not charged for the wait. Reading the clock
//! twice costs about 240 ns of the thread's own time here, as much as sealing one QUIC
//! packet; that cost, measured per thread and again every 1,024 timed calls (it drifts with
//! the load), is taken off every timed call.

use std::time::Duration;

/// The calling thread's CPU time so far.
pub fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the kernel to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Timed calls between two measurements of the clock's cost.
const RECALIBRATE_EVERY: u32 = 1024;

/// The thread CPU time two back-to-back clock reads show: the clock's own cost inside
/// every timed call. Measured per thread (the median of 16 pairs) at its first timed call
/// and again every [`RECALIBRATE_EVERY`] timed calls: the cost drifts with the machine's
/// load (on a virtual machine a vCPU's stolen time is charged to the running thread; a
/// pair measured at 70 ns when a process started cost 930 ns beside two busy loops).
fn clock_cost() -> Duration {
    thread_local! {
        static COST: std::cell::Cell<(Duration, u32)> = const { std::cell::Cell::new((Duration::ZERO, 0)) };
    }
    COST.with(|cell| {
        let (cost, left) = cell.get();
        if left > 0 {
            cell.set((cost, left - 1));
            return cost;
        }
        let mut pairs: Vec<Duration> = (0..16)
            .map(|_| {
                let began = thread_cpu();
                thread_cpu().saturating_sub(began)
            })
            .collect();
        pairs.sort();
        let fresh = pairs[pairs.len() / 2];
        cell.set((fresh, RECALIBRATE_EVERY - 1));
        fresh
    })
}

/// Runs `work`, the `call`-th of its kind; when `call` is a multiple of `every`, also
/// returns its CPU time scaled by `every` (the estimate of the calls it stands for).
pub fn sampled<R>(call: u64, every: u64, work: impl FnOnce() -> R) -> (R, Option<Duration>) {
    let (result, spent) = timed_in_turn(call, every, work);
    let scale = u32::try_from(every).unwrap_or(u32::MAX);
    (result, spent.map(|spent| spent * scale))
}

/// Runs `work`, the `call`-th of its kind; when `call` is a multiple of `every`, also
/// returns its own CPU time, the clock's cost taken off.
fn timed_in_turn<R>(call: u64, every: u64, work: impl FnOnce() -> R) -> (R, Option<Duration>) {
    if !call.is_multiple_of(every.max(1)) {
        return (work(), None);
    }
    let cost = clock_cost();
    let began = thread_cpu();
    let result = work();
    let spent = thread_cpu().saturating_sub(began).saturating_sub(cost);
    (result, Some(spent))
}

/// The CPU time of calls whose work grows with their bytes and whose bytes differ widely
/// (a read opens whatever whole records the socket held: one, or sixty): one call in
/// `every` is timed, and the time per byte of the timed calls is charged to every byte.
/// Scaling each timed call by `every` instead left the estimate at the mercy of which
/// calls were the timed ones; a receiver's estimate once came to more than its thread's
/// whole CPU time. Calls are timed in the order they come, so the timed calls' sizes are
/// those of all calls, and the ratio holds whether or not a call has a fixed part.
#[derive(Debug, Clone, Default)]
pub struct PerByteCost {
    calls: u64,
    bytes: u64,
    timed: Duration,
    timed_bytes: u64,
    timed_calls: u64,
}

impl PerByteCost {
    /// Runs `work`, a call over `bytes`, and times it if its turn has come.
    pub fn time<R>(&mut self, bytes: usize, every: u64, work: impl FnOnce() -> R) -> R {
        let (result, spent) = timed_in_turn(self.calls, every, work);
        self.calls += 1;
        self.bytes += bytes as u64;
        if let Some(spent) = spent {
            // Unscaled: the bytes stand for the calls not timed.
            self.timed += spent;
            self.timed_bytes += bytes as u64;
            self.timed_calls += 1;
        }
        result
    }

    /// The estimated CPU time of all calls so far.
    pub fn estimate(&self) -> Duration {
        if self.timed_bytes > 0 {
            self.timed
                .mul_f64(self.bytes as f64 / self.timed_bytes as f64)
        } else if self.timed_calls > 0 {
            // Only empty calls were timed: their cost is per call.
            self.timed
                .mul_f64(self.calls as f64 / self.timed_calls as f64)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(iterations: u64) -> u64 {
        (0..iterations).fold(0u64, |a, i| a.wrapping_mul(31).wrapping_add(i))
    }

    #[test]
    fn calls_of_unlike_sizes_are_estimated_by_their_bytes() {
        // Every eighth call is sixty-four times the others': scaling the timed calls by
        // eight would charge the big call's cost to all eight (about seven times the truth).
        let size = |call: u64| if call.is_multiple_of(8) { 64 } else { 1 };
        let mut every_call = Duration::ZERO;
        let mut estimate = PerByteCost::default();
        for call in 0..800u64 {
            let work = || std::hint::black_box(spin(2_000 * size(call)));
            every_call += sampled(call, 1, work).1.unwrap();
            estimate.time(size(call) as usize, 8, work);
        }
        let ratio = estimate.estimate().as_secs_f64() / every_call.as_secs_f64();
        assert!((0.5..2.0).contains(&ratio), "estimate/measured = {ratio}");
    }

    #[test]
    fn sampling_estimates_the_cpu_time_of_alike_calls() {
        // Every call timed, against one call in eight timed and scaled: the same work.
        let every_call: Duration = (0..400)
            .filter_map(|call| sampled(call, 1, || std::hint::black_box(spin(20_000))).1)
            .sum();
        let estimate: Duration = (0..400)
            .filter_map(|call| sampled(call, 8, || std::hint::black_box(spin(20_000))).1)
            .sum();
        let ratio = estimate.as_secs_f64() / every_call.as_secs_f64();
        assert!((0.5..2.0).contains(&ratio), "estimate/measured = {ratio}");
    }

    #[test]
    fn the_clocks_own_cost_is_not_charged() {
        // Against the clock's cost measured here, in this run: an empty call's median
        // charge is well under a bare pair of clock reads, which is what it would be
        // charged if the cost were not taken off. Medians: an interrupt or a migration
        // inside one of a thousand reads (other tests run beside this one) is not the
        // clock's usual cost. No fixed nanoseconds: the clock's cost drifts with the
        // machine (220 ns of drift between a process's calibration and its calls was seen).
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let charged = median(
            (0..1000)
                .filter_map(|call| sampled(call, 1, || std::hint::black_box(0u64)).1)
                .collect(),
        );
        let bare = median(
            (0..1000)
                .map(|_| {
                    let began = thread_cpu();
                    thread_cpu().saturating_sub(began)
                })
                .collect(),
        );
        assert!(
            charged < bare.mul_f64(0.75) || bare.is_zero(),
            "an empty call was charged {charged:?}; a bare pair of clock reads costs {bare:?}"
        );
    }

    #[test]
    fn a_thread_asleep_is_not_charged() {
        let (_, spent) = sampled(0, 1, || std::thread::sleep(Duration::from_millis(50)));
        assert!(spent.unwrap() < Duration::from_millis(5), "{spent:?}");
    }
}
