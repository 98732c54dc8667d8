//! A result document of any kind, as printed with `--json` and kept in the results
//! database: one test (possibly repeated), a sweep, or a `--find-max` search.
//!
//! The kind is told by the document's `test` key, so a stored run reads back as what it
//! was, and every consumer (`show`, `history`, `compare`, `export`, `report`) starts here.
//! What a document says of itself (its listing, text and rows) its kind says, through
//! [`ResultKind`] (`crate::result_kind`): a new kind of result is its module, a variant
//! here, its arm in [`Document::as_kind`] and its `test` key in [`Document::from_value`].

use crate::model::{FindMaxReport, Headline, Report};
use crate::result_kind::ResultKind;
use crate::sweep::SweepReport;
use crate::units::Scale;
use serde::Serialize;

/// Serialized as the document it holds (`untagged`): its own `test` key says its kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Document {
    Test(Box<Report>),
    Sweep(Box<SweepReport>),
    FindMax(Box<FindMaxReport>),
    Profile(Box<crate::profile::ProfileReport>),
    Rpm(Box<crate::rpm::RpmReport>),
    Stamp(Box<crate::stamp::StampReport>),
    Trace(Box<crate::trace::TraceReport>),
    Multicast(Box<crate::multicast::MulticastReport>),
    Ndt7(Box<crate::ndt7::Ndt7Report>),
}

/// The `test` value of a sweep document, and of a `--find-max` search.
pub const SWEEP: &str = "sweep";
pub const FIND_MAX: &str = "udp_find_max";

impl Document {
    /// Reads a document from its JSON text.
    pub fn from_json(text: &str) -> Result<Document, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        Document::from_value(value)
    }

    pub fn from_value(value: serde_json::Value) -> Result<Document, serde_json::Error> {
        Ok(match value.get("test").and_then(|t| t.as_str()) {
            Some(SWEEP) => Document::Sweep(Box::new(serde_json::from_value(value)?)),
            Some(FIND_MAX) => Document::FindMax(Box::new(serde_json::from_value(value)?)),
            Some(crate::profile::PROFILE) => {
                Document::Profile(Box::new(serde_json::from_value(value)?))
            }
            Some(crate::rpm::RPM) => Document::Rpm(Box::new(serde_json::from_value(value)?)),
            Some(crate::stamp::STAMP) => Document::Stamp(Box::new(serde_json::from_value(value)?)),
            Some(crate::trace::TRACE) => Document::Trace(Box::new(serde_json::from_value(value)?)),
            Some(crate::multicast::MULTICAST) => {
                Document::Multicast(Box::new(serde_json::from_value(value)?))
            }
            Some(crate::ndt7::NDT7) => Document::Ndt7(Box::new(serde_json::from_value(value)?)),
            _ => Document::Test(Box::new(serde_json::from_value(value)?)),
        })
    }

    /// The document's kind, which answers for it.
    pub fn as_kind(&self) -> &dyn ResultKind {
        match self {
            Document::Test(report) => report.as_ref(),
            Document::Sweep(sweep) => sweep.as_ref(),
            Document::FindMax(search) => search.as_ref(),
            Document::Profile(run) => run.as_ref(),
            Document::Rpm(run) => run.as_ref(),
            Document::Stamp(run) => run.as_ref(),
            Document::Trace(run) => run.as_ref(),
            Document::Multicast(run) => run.as_ref(),
            Document::Ndt7(run) => run.as_ref(),
        }
    }

    /// The document as `--json` prints it.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The document as the results database keeps it: JSON without indentation (half
    /// the size of `--json`'s), read back alike.
    pub fn to_stored_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// A copy without the bulk a mesh need not keep for every job (a profile run's
    /// histograms, per-thread figures, host counters and facts; see
    /// [`crate::profile::ProfileReport::compact`]). The other kinds are small already and
    /// come back whole.
    pub fn compact(&self) -> Document {
        match self {
            Document::Profile(run) => Document::Profile(Box::new(run.compact())),
            other => other.clone(),
        }
    }

    /// What a compact copy left out (empty for a whole document).
    pub fn not_kept(&self) -> &[String] {
        match self {
            Document::Profile(run) => &run.not_kept,
            _ => &[],
        }
    }

    /// "tcp_stream", "sweep", "udp_find_max".
    pub fn test(&self) -> &str {
        self.as_kind().test()
    }

    /// What was measured, for listings: "tcp_stream", "sweep of tcp_rr".
    pub fn kind(&self) -> String {
        self.as_kind().kind()
    }

    /// The emulated path the run crossed, in brief ("lab NAME: rtt +20 ms, loss 2% each
    /// way"), or "direct".
    pub fn path_brief(&self) -> String {
        self.as_kind().path().map_or("direct".into(), |p| p.brief())
    }

    /// The server as the user named it, or "loopback".
    pub fn target(&self) -> &str {
        self.as_kind().target()
    }

    pub fn started_at(&self) -> f64 {
        self.as_kind().started_at()
    }

    /// The figure a listing shows: a test's headline (the mean when repeated), a sweep's
    /// best point, a search's highest clean rate.
    pub fn headline(&self) -> Option<(Headline, f64)> {
        self.as_kind().headline()
    }

    /// The headline in words: "9.41 Gbits/sec", "best 31.9 Gbits/sec of 6 points".
    pub fn headline_text(&self, scale: Scale) -> String {
        self.as_kind().headline_text(scale)
    }

    /// The end-of-run text: what the run printed after its live lines, and what `show`
    /// prints.
    pub fn render_text(&self, scale: Scale) -> String {
        self.as_kind().render_text(scale)
    }

    /// The text as a run printed it, for `show`: a stream test's interval lines first
    /// (from the kept intervals, as the receiver counted them), then its summary.
    pub fn render_text_as_run(&self, scale: Scale) -> String {
        self.as_kind().render_text_as_run(scale)
    }

    /// What is left to print after a run's live lines: a test's summary (its intervals
    /// and iterations were shown as they came), a search's answer after its trial lines,
    /// a sweep's warnings after its rows.
    pub fn render_text_after_live(&self, scale: Scale) -> String {
        self.as_kind().render_text_after_live(scale)
    }
}
