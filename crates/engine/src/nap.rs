//! How long a lone UDP receiver (without GRO) naps between short batches
//! (docs/performance.md, "A UDP receiver that naps between short batches").
//!
//! A receiver faster than its sender empties the socket at every wake-up and blocks
//! again: it took about four datagrams a `recvmmsg` and a third of its CPU was waking up.
//! After a read that left the socket empty, it sleeps instead, for as long as the socket
//! buffer can hold what arrives meanwhile (half of it, at the rate just seen), at most
//! [`NAP_MAX`]; the next read then takes a full batch. The datagrams' arrival times come
//! from the kernel's timestamps, so a nap delays their reading, never their measurement:
//! without timestamps there is no nap.
//!
//! Pure: the caller gives the time and sleeps.

use std::time::{Duration, Instant};

/// The longest nap: a quarter of a millisecond, well inside any report interval.
pub const NAP_MAX: Duration = Duration::from_micros(250);
/// A shorter nap costs more (a timed sleep, about 20 us of CPU on a virtual machine)
/// than the wake-ups it saves: block in the receive call instead.
pub const NAP_MIN: Duration = Duration::from_micros(20);
/// How late a nap is taken to end before one has been seen to: a timed sleep on a
/// virtual machine wakes 20-45 us late.
const FIRST_LATE: Duration = Duration::from_micros(50);

#[derive(Debug)]
pub struct Napper {
    /// Datagrams half the socket's receive buffer holds (SO_RCVBUF as the kernel set it,
    /// over what the kernel charges for one datagram of the test).
    half_buffer: f64,
    /// Datagrams read since `since`.
    received: usize,
    /// The last nap's start and length (or the first short read of a stream: no nap).
    since: Option<(Instant, Duration)>,
    /// How much later than asked the reads after a nap came (the timer's overshoot, the
    /// wait for a CPU, the reading), the largest lately (each nap forgets an eighth): a
    /// nap leaves room for it.
    late: Duration,
}

impl Napper {
    /// For a socket whose receive buffer holds `buffer` bytes, each datagram charged
    /// `charge` of them.
    pub fn new(buffer: usize, charge: usize) -> Napper {
        Napper {
            half_buffer: (buffer / 2) as f64 / charge.max(1) as f64,
            received: 0,
            since: None,
            late: FIRST_LATE,
        }
    }

    /// A read gave `count` datagrams.
    pub fn read(&mut self, count: usize) {
        self.received += count;
    }

    /// Nothing arrived for a while: the rate is measured afresh when datagrams come.
    pub fn quiet(&mut self) {
        self.since = None;
        self.received = 0;
    }

    /// A read left the socket empty (fewer than a batch) at `now`; `stamped` says the
    /// kernel timestamped its datagrams. How long to nap before reading again, if at all.
    pub fn after_short_read(&mut self, now: Instant, stamped: bool) -> Option<Duration> {
        if !stamped {
            // Their times would be the read times: a nap would show in every delay.
            self.quiet();
            return None;
        }
        let received = std::mem::take(&mut self.received);
        let Some((since, asked)) = self.since.take() else {
            // The first short read of a stream: the rate is measured from here.
            self.since = Some((now, Duration::ZERO));
            return None;
        };
        let span = now.saturating_duration_since(since);
        if !asked.is_zero() {
            let late = span.saturating_sub(asked);
            self.late = late.max(self.late - self.late / 8);
        }
        let rate = received as f64 / span.as_secs_f64().max(1e-6);
        let fits = Duration::from_secs_f64((self.half_buffer / rate.max(1.0)).min(1.0));
        let nap = fits.saturating_sub(self.late).min(NAP_MAX);
        if nap < NAP_MIN {
            self.since = Some((now, Duration::ZERO));
            return None;
        }
        self.since = Some((now, nap));
        Some(nap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Runs a stream of `rate` datagrams a second into a napping reader whose naps end
    /// `late` after they were asked to, for `reads` short reads (each read takes all that
    /// waits, in batches of 64); gives the naps taken and the most datagrams queued.
    fn stream(
        napper: &mut Napper,
        rate: f64,
        late: Duration,
        reads: usize,
    ) -> (Vec<Duration>, f64) {
        let mut now = Instant::now();
        let mut read_at = now;
        let (mut naps, mut most) = (Vec::new(), 0f64);
        for _ in 0..reads {
            let waiting = now.duration_since(read_at).as_secs_f64() * rate;
            most = most.max(waiting);
            read_at = now;
            let mut count = waiting.round().max(1.0) as usize;
            while count >= 64 {
                napper.read(64);
                count -= 64;
            }
            napper.read(count);
            match napper.after_short_read(now, true) {
                Some(nap) => {
                    naps.push(nap);
                    now += nap + late;
                }
                // Blocked: woken by the next datagram.
                None => now += Duration::from_secs_f64(1.0 / rate),
            }
        }
        (naps, most)
    }

    #[test]
    fn a_fast_stream_of_small_datagrams_naps_the_longest_time() {
        // 212,992 bytes of buffer, 832 charged per 64-byte datagram, 450,000 a second:
        // half the buffer is 128 datagrams, 284 us of them; the cap holds.
        let mut napper = Napper::new(212_992, 832);
        let (naps, most) = stream(&mut napper, 450_000.0, us(5), 50);
        assert!(naps[5..].iter().all(|&n| n == NAP_MAX), "{naps:?}");
        assert!(most <= 128.0, "{most} datagrams queued");
    }

    #[test]
    fn a_late_wake_up_shortens_the_nap_so_the_buffer_still_holds() {
        // 1,400-byte datagrams at 450,000 a second, 2,304 bytes charged each: half the
        // buffer holds 46 of them, 102 us. Naps end 45 us late.
        let mut napper = Napper::new(212_992, 2_304);
        let (naps, most) = stream(&mut napper, 450_000.0, us(45), 60);
        let settled = &naps[5..];
        assert!(!settled.is_empty());
        assert!(settled.iter().all(|&n| n <= us(60)), "{settled:?}");
        assert!(most <= 47.0, "{most} datagrams queued");
    }

    #[test]
    fn a_buffer_that_fills_faster_than_a_wake_up_means_no_nap() {
        // 10 Gbit/s of 1,472-byte datagrams: half the buffer lasts 50 us, and the naps
        // come back 45 us late; a 4 KiB buffer holds one datagram at all.
        for (buffer, late) in [(212_992, us(45)), (4_096, us(0))] {
            let mut napper = Napper::new(buffer, 2_304);
            let (naps, _) = stream(&mut napper, 850_000.0, late, 40);
            assert!(naps.len() <= 1, "{buffer}: {naps:?}");
        }
    }

    #[test]
    fn nothing_arriving_or_no_timestamps_means_blocking() {
        let mut napper = Napper::new(212_992, 832);
        let now = Instant::now();
        // 3 datagrams in 30 us, 100,000 a second: half the buffer lasts the longest nap.
        napper.read(3);
        assert_eq!(napper.after_short_read(now, true), None);
        napper.read(3);
        assert_eq!(napper.after_short_read(now + us(30), true), Some(NAP_MAX));
        napper.quiet();
        // The stream starts again: the rate is measured afresh.
        napper.read(3);
        assert_eq!(napper.after_short_read(now + us(400), true), None);
        napper.read(3);
        assert_eq!(napper.after_short_read(now + us(430), true), Some(NAP_MAX));
        napper.read(3);
        assert_eq!(napper.after_short_read(now + us(700), false), None);
        napper.read(3);
        assert_eq!(napper.after_short_read(now + us(730), true), None);
    }
}
