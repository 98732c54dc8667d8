//! A host's clock as its discipline (NTP, PTP, chrony through the kernel) declares it:
//! what one-way delay figures need to be believed.

use serde::{Deserialize, Serialize};

/// The kernel's view of its clock (`adjtimex(2)`): whether a time source keeps it
/// synchronised, and the error it estimates and bounds, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockState {
    pub synchronised: bool,
    pub estimated_error_s: f64,
    pub max_error_s: f64,
}

impl ClockState {
    /// "synchronised, error ≤ 1.5 ms (estimated 0.2 ms)" or "unsynchronised".
    pub fn describe(&self) -> String {
        if self.synchronised {
            format!(
                "synchronised, error at most {:.3} ms (estimated {:.3} ms)",
                self.max_error_s * 1e3,
                self.estimated_error_s * 1e3
            )
        } else {
            "not synchronised to a time source".into()
        }
    }
}

/// A moment of the wall clock: the time since the Unix epoch. Every "when" linerate keeps
/// (a run's start, a row's end, an alert's, a token's expiry, a path's memory) is read as
/// this one type; a clock set before 1970 reads as the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixTime(std::time::Duration);

impl UnixTime {
    /// The wall clock now: the one place linerate reads it. The sans-IO crates' lints
    /// forbid this call as they forbid `SystemTime::now`; their callers pass the time in.
    #[allow(clippy::disallowed_methods)]
    pub fn now() -> UnixTime {
        UnixTime::from_system(std::time::SystemTime::now())
    }

    pub fn from_system(at: std::time::SystemTime) -> UnixTime {
        UnixTime(at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default())
    }

    /// Seconds since the epoch, as the stores and documents keep them; a negative or
    /// non-finite figure reads as the epoch.
    pub fn from_seconds(seconds: f64) -> UnixTime {
        UnixTime(std::time::Duration::try_from_secs_f64(seconds).unwrap_or_default())
    }

    pub fn seconds(self) -> f64 {
        self.0.as_secs_f64()
    }

    pub fn whole_seconds(self) -> u64 {
        self.0.as_secs()
    }

    pub fn nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn since_epoch(self) -> std::time::Duration {
        self.0
    }

    pub fn system(self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + self.0
    }
}

#[cfg(test)]
mod unix_time_tests {
    use super::UnixTime;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn seconds_and_system_times_read_back_as_they_went_in() {
        let at = UnixTime::from_seconds(1_700_000_000.25);
        assert_eq!(at.whole_seconds(), 1_700_000_000);
        assert_eq!(at.nanos(), 1_700_000_000_250_000_000);
        assert_eq!(
            at.system(),
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_250)
        );
        assert_eq!(UnixTime::from_system(at.system()), at);
    }

    #[test]
    fn times_before_the_epoch_or_not_numbers_read_as_the_epoch() {
        assert_eq!(UnixTime::from_seconds(-5.0), UnixTime::default());
        assert_eq!(UnixTime::from_seconds(f64::NAN), UnixTime::default());
        let before = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(UnixTime::from_system(before).seconds(), 0.0);
    }
}
