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
