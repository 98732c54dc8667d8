//! How a bridge direction waits for its next frame: a timer that is armed only when the
//! time it must wake changes, a wake a little ahead of a frame's due time by what timer
//! wake-ups have been measured to overshoot, and a short spin for the rest.
//!
//! Why: on a virtual machine, arming a high-resolution timer costs the host's help. On
//! the 2-vCPU machine of docs/performance.md a sleep of 1 us with a 1 ns timer slack took
//! about 21 us of CPU and woke 20-45 us late. A wait given to ppoll as its timeout arms a
//! timer on every call, so a direction that woke for every arriving frame paid that for
//! every frame (perf: half of its CPU in `schedule_hrtimeout_range`), and its frames
//! still left tens of microseconds late. A timerfd stays armed across calls; a wait
//! shorter than a timer's own overshoot is cheaper, and exact, spent polling the ring.
//!
//! The thread sleeps under SCHED_FIFO, so that its wake-up comes ahead of the test's own
//! busy threads, and spins under the ordinary policy. A real-time thread that spins
//! whenever frames are due every few microseconds (a 1 Gbit/s bottleneck) never leaves its
//! CPU; the kernel then stops the real-time class there for 50 ms of each second to run
//! the others, and frames left up to 51 ms late (measured). Spinning as an ordinary
//! thread, it is preempted for a scheduler slice at worst. The switch costs about 2 us.

// A driver: the clock and sleeping are its job (the core modules stay sans-IO).
#![allow(clippy::disallowed_methods)]

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Wakes end at least this far ahead of a due time, and waits this short are spun.
const MIN_EARLY_NS: u64 = 5_000;
/// What a timer's overshoot is assumed to be before one has been measured.
const FIRST_OVERSHOOT_NS: u64 = 20_000;
/// Bound on the spin: a machine whose timers overshoot more than this gets late frames
/// rather than a thread that spins for longer at each frame.
const MAX_EARLY_NS: u64 = 100_000;
/// Margin over the mean overshoot, for its spread.
const MARGIN_NS: u64 = 5_000;

/// A direction's timer and what it has learned of its overshoot.
pub struct Waiter {
    timer: OwnedFd,
    /// The absolute CLOCK_MONOTONIC time the timer is armed for, nanoseconds.
    armed_ns: Option<u64>,
    /// Mean of how late the timer's wake-ups came (a moving average, weight 1/8).
    overshoot_ns: u64,
    /// Whether the armed timer is for a frame due (not a status wake).
    armed_for_departure: bool,
    /// Whether the thread may run under SCHED_FIFO, and whether it does now.
    realtime_allowed: bool,
    realtime: bool,
}

/// CLOCK_MONOTONIC (the clock of `Instant`), nanoseconds.
pub fn monotonic_ns() -> u64 {
    // SAFETY: zero is a valid timespec; clock_gettime fills it.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

impl Waiter {
    /// A waiter for the calling thread: its timer slack is made 1 ns, and it runs under
    /// SCHED_FIFO where permitted (else at the highest ordinary priority).
    pub fn new() -> io::Result<Waiter> {
        sys::tight_timer_slack();
        let realtime = sys::set_realtime(true);
        if !realtime {
            sys::highest_ordinary_priority();
        }
        // SAFETY: plain call; the descriptor is owned at once.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Waiter {
            // SAFETY: fd is fresh and owned by nobody else.
            timer: unsafe { OwnedFd::from_raw_fd(fd) },
            armed_ns: None,
            armed_for_departure: false,
            overshoot_ns: FIRST_OVERSHOOT_NS,
            realtime_allowed: realtime,
            realtime,
        })
    }

    fn set_realtime(&mut self, on: bool) {
        if self.realtime_allowed && self.realtime != on {
            self.realtime = sys::set_realtime(on) && on;
        }
    }

    /// Polls `arrived` (a receive ring's next slot) until it says true or the monotonic
    /// clock reaches `until_ns`.
    pub fn spin_until(&mut self, arrived: impl Fn() -> bool, until_ns: u64) {
        self.set_realtime(false);
        while !arrived() && monotonic_ns() < until_ns {
            std::hint::spin_loop();
        }
    }

    /// How far ahead of a due time a sleep should end; waits shorter than this are spun.
    pub fn early_ns(&self) -> u64 {
        (self.overshoot_ns + MARGIN_NS).clamp(MIN_EARLY_NS, MAX_EARLY_NS)
    }

    /// Sleeps until `readable` (a receive ring's socket) can be read or the monotonic
    /// clock reaches about `until_ns` (the timer's overshoot later). The timer is armed
    /// again only when it would fire later than `until_ns`, or has fired. `departure`
    /// says the wake is for a frame due: only those wakes teach the overshoot, since a
    /// CPU idle for the 20 ms of a status wake wakes more slowly than a busy one.
    pub fn sleep(&mut self, readable: RawFd, until_ns: u64, departure: bool) -> io::Result<()> {
        if !matches!(self.armed_ns, Some(armed) if armed <= until_ns) {
            self.arm(until_ns)?;
            self.armed_for_departure = departure;
        }
        self.set_realtime(true);
        let mut fds = [
            libc::pollfd {
                fd: readable,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.timer.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds; no timeout, so no timer is armed by the call itself.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, std::ptr::null(), std::ptr::null()) };
        if n < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::Interrupted => Ok(()),
                _ => Err(error),
            };
        }
        if fds[1].revents & libc::POLLIN != 0 {
            let woke = monotonic_ns();
            let mut expirations = [0u8; 8];
            // SAFETY: reads the 8-byte expiration count into a live buffer.
            unsafe { libc::read(self.timer.as_raw_fd(), expirations.as_mut_ptr().cast(), 8) };
            if let Some(armed) = self.armed_ns.take().filter(|_| self.armed_for_departure) {
                let overshoot = woke.saturating_sub(armed).min(10 * MAX_EARLY_NS);
                self.overshoot_ns = (7 * self.overshoot_ns + overshoot) / 8;
            }
        }
        Ok(())
    }

    fn arm(&mut self, at_ns: u64) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: a valid itimerspec; the old value is not wanted.
        let result = unsafe {
            libc::timerfd_settime(
                self.timer.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_ns = Some(at_ns);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn a_sleep_ends_at_its_deadline_not_before_and_learns_the_overshoot() {
        let (quiet, _peer) = UnixDatagram::pair().unwrap();
        let mut waiter = Waiter::new().unwrap();
        let until = monotonic_ns() + 2_000_000;
        // Woken by the timer alone: never before the time asked.
        while monotonic_ns() < until {
            waiter.sleep(quiet.as_raw_fd(), until, true).unwrap();
        }
        assert!(monotonic_ns() >= until);
        assert_eq!(waiter.armed_ns, None, "a fired timer is spent");
        assert!((MIN_EARLY_NS..=MAX_EARLY_NS).contains(&waiter.early_ns()));
    }

    #[test]
    fn a_readable_descriptor_ends_the_sleep_and_keeps_the_timer_armed() {
        let (readable, peer) = UnixDatagram::pair().unwrap();
        peer.send(b"frame").unwrap();
        let mut waiter = Waiter::new().unwrap();
        let until = monotonic_ns() + 60_000_000_000;
        waiter.sleep(readable.as_raw_fd(), until, true).unwrap();
        assert!(monotonic_ns() < until);
        assert_eq!(
            waiter.armed_ns,
            Some(until),
            "armed once, kept for the next sleep"
        );
        // A later deadline does not arm it again; an earlier one does.
        waiter
            .sleep(readable.as_raw_fd(), until + 1_000, true)
            .unwrap();
        assert_eq!(waiter.armed_ns, Some(until));
        waiter
            .sleep(readable.as_raw_fd(), until - 1_000, true)
            .unwrap();
        assert_eq!(waiter.armed_ns, Some(until - 1_000));
    }

    #[test]
    fn a_spin_ends_when_a_frame_arrives_or_at_its_deadline() {
        let mut waiter = Waiter::new().unwrap();
        let until = monotonic_ns() + 1_000_000;
        waiter.spin_until(|| false, until);
        assert!(monotonic_ns() >= until);
        let far = monotonic_ns() + 60_000_000_000;
        waiter.spin_until(|| true, far);
        assert!(monotonic_ns() < far);
    }
}
