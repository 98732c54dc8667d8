//! One job of a mesh as it is kept: its labels, times, figure and how it ended. The
//! coordinator writes it, the stores keep it, the metrics, the grid and `mesh status`
//! read it; it lives here so that none of those readers needs a database client.

/// How a mesh job ended, as it is kept and read back: a reader matches on it instead of
/// reading a reason's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and measured what it set out to.
    Ok,
    /// It ran, or tried to, and did not measure: `blamed` names the host whose fault it
    /// was, when one was found (an agent that could not be reached, or that refused).
    Failed {
        blamed: Option<String>,
        reason: String,
    },
    /// It was not run: a host it needs is down (`reason` says which and where the failure
    /// that took it down is kept).
    Skipped { reason: String },
    /// The operator's stop (SIGTERM, Ctrl-C) cut it short: kept and marked, as an
    /// interrupted client run is, never counted as a failure of its pair.
    Interrupted { reason: String },
}

/// A series' newest job before any has ended: not measured, and not a failure.
impl Default for Outcome {
    fn default() -> Outcome {
        Outcome::Skipped {
            reason: "not measured yet".into(),
        }
    }
}

impl Outcome {
    /// The outcome's name as a column holds it: "ok", "failed", "skipped" or
    /// "interrupted".
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed { .. } => "failed",
            Outcome::Skipped { .. } => "skipped",
            Outcome::Interrupted { .. } => "interrupted",
        }
    }

    /// The outcome from its columns; an unknown name is a failure, so that a row never
    /// reads as a success it was not.
    pub fn from_columns(name: &str, reason: String, blamed: Option<String>) -> Outcome {
        match name {
            "ok" => Outcome::Ok,
            "skipped" => Outcome::Skipped { reason },
            "interrupted" => Outcome::Interrupted { reason },
            _ => Outcome::Failed { blamed, reason },
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }

    pub fn is_skipped(&self) -> bool {
        matches!(self, Outcome::Skipped { .. })
    }

    pub fn is_interrupted(&self) -> bool {
        matches!(self, Outcome::Interrupted { .. })
    }

    /// Why it failed or was skipped; empty for a success.
    pub fn reason(&self) -> &str {
        match self {
            Outcome::Ok => "",
            Outcome::Failed { reason, .. }
            | Outcome::Skipped { reason }
            | Outcome::Interrupted { reason } => reason,
        }
    }

    /// The host blamed for a failure.
    pub fn blamed(&self) -> Option<&str> {
        match self {
            Outcome::Failed { blamed, .. } => blamed.as_deref(),
            _ => None,
        }
    }
}

/// "ok", "failed: REASON (HOST blamed)" or "skipped: REASON", as a line of text shows it.
impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Failed {
                blamed: Some(host),
                reason,
            } => write!(f, "failed: {reason} ({host} blamed)"),
            Outcome::Failed {
                blamed: None,
                reason,
            } => write!(f, "failed: {reason}"),
            Outcome::Skipped { reason } => write!(f, "skipped: {reason}"),
            Outcome::Interrupted { reason } => write!(f, "interrupted: {reason}"),
        }
    }
}

/// One job of a mesh as the store keeps it: its labels, times and figure.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshRow {
    /// The run's id in `runs` (its whole document), when it ran.
    pub run_id: Option<i64>,
    pub mesh: String,
    pub src: String,
    pub dst: String,
    pub test: String,
    /// "forward": from `src` to `dst`.
    pub direction: String,
    pub protocol: String,
    pub cycle: u64,
    pub started_at: f64,
    pub ended_at: f64,
    pub outcome: Outcome,
    pub headline: Option<f64>,
    pub headline_text: String,
}

impl MeshRow {
    /// The job's own name in a store, the same however often it is written: its mesh,
    /// pair, test, cycle and start to the microsecond (one pair's test never starts twice
    /// in a microsecond). A result written again after an interruption (a spool replayed,
    /// a commit whose answer was lost) is found by it and not kept twice.
    pub fn job_key(&self) -> String {
        format!(
            "{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
            self.mesh,
            self.src,
            self.dst,
            self.test,
            self.direction,
            self.cycle,
            (self.started_at * 1e6).round() as i64
        )
    }
}

/// Results on their way to the store, as a coordinator's writer counts them
/// (linerate_store::spool) and its metrics show them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreCounts {
    /// Results waiting in the spool, and their bytes.
    pub waiting: u64,
    pub waiting_bytes: u64,
    /// How long the oldest has waited.
    pub oldest_waiting_s: f64,
    /// Whether the store takes writes now.
    pub writing: bool,
    /// Writes the store refused or failed, each try.
    pub write_failures: u64,
    /// Results written from the spool.
    pub replayed: u64,
    /// Documents let go at the spool's bound (their rows kept), and whole results let go
    /// (at the bound with no document left, or while the store hung).
    pub dropped_documents: u64,
    pub dropped_results: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_reads_back_from_its_columns() {
        for outcome in [
            Outcome::Ok,
            Outcome::Failed {
                blamed: Some("h2".into()),
                reason: "refused".into(),
            },
            Outcome::Failed {
                blamed: None,
                reason: "timed out".into(),
            },
            Outcome::Skipped {
                reason: "host h2 is down".into(),
            },
            Outcome::Interrupted {
                reason: "the coordinator was stopped".into(),
            },
        ] {
            let back = Outcome::from_columns(
                outcome.name(),
                outcome.reason().to_string(),
                outcome.blamed().map(String::from),
            );
            assert_eq!(back, outcome);
        }
        assert_eq!(
            Outcome::Failed {
                blamed: Some("h2".into()),
                reason: "refused".into()
            }
            .to_string(),
            "failed: refused (h2 blamed)"
        );
        // A name this build does not know never reads as a success.
        assert!(!Outcome::from_columns("later", String::new(), None).is_ok());
    }
}
