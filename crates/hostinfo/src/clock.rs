//! The clock's state as the kernel keeps it for its discipline (`adjtimex(2)` with no
//! change asked): synchronised or not, and its estimated and maximum error.

use linerate_model::clock::ClockState;

/// The state of the kernel's clock discipline's unsynchronised flag (STA_UNSYNC).
const STA_UNSYNC: i32 = 0x0040;
/// adjtimex's answer when the clock is not synchronised.
const TIME_ERROR: i32 = 5;

/// This host's clock; `None` where the kernel will not say.
pub fn read() -> Option<ClockState> {
    // SAFETY: a zeroed timex with modes 0 asks for the state and changes nothing; the
    // kernel writes only into the struct it is given.
    let mut timex: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut timex) };
    if state < 0 {
        return None;
    }
    Some(of(
        state,
        timex.status,
        timex.esterror as i64,
        timex.maxerror as i64,
    ))
}

/// The state from adjtimex's answer and fields (errors in microseconds).
pub fn of(state: i32, status: i32, esterror_us: i64, maxerror_us: i64) -> ClockState {
    ClockState {
        synchronised: state != TIME_ERROR && status & STA_UNSYNC == 0,
        estimated_error_s: esterror_us.max(0) as f64 / 1e6,
        max_error_s: maxerror_us.max(0) as f64 / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unsynchronised flag, or adjtimex's TIME_ERROR, is an unsynchronised clock
    /// whatever error it states; the errors are microseconds.
    #[test]
    fn unsynchronised_is_told_by_the_flag_or_the_answer() {
        let synced = of(0, 0x2001, 150, 16_000);
        assert!(synced.synchronised);
        assert_eq!(synced.estimated_error_s, 150e-6);
        assert_eq!(synced.max_error_s, 0.016);
        assert!(!of(0, STA_UNSYNC, 0, 0).synchronised);
        assert!(!of(TIME_ERROR, 0, 0, 0).synchronised);
    }

    /// This host's kernel answers (whatever its clock's state).
    #[test]
    fn the_kernel_answers() {
        let state = read().expect("adjtimex answers");
        assert!(state.max_error_s >= 0.0);
    }
}
