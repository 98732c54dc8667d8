//! What a kind of result says of itself, in one place: its name and target for listings,
//! the figure that heads it, its text, and its CSV rows.
//!
//! Each kind's module implements [`ResultKind`] beside its document type; the document
//! module's `Document` holds one document of some kind and hands every question to it
//! (`Document::as_kind`). A new kind of result is its module and one variant there; no
//! listing, renderer or sink names the kind to print, list or export it.

use crate::model::Headline;
use crate::units::Scale;
use linerate_model::PathFacts;

/// A CSV header and its rows.
pub type Rows = (Vec<String>, Vec<Vec<String>>);

pub trait ResultKind {
    /// The document's `test` key: "tcp_stream", "sweep", "stamp".
    fn test(&self) -> &str;

    /// What was measured, for listings: "tcp_stream", "sweep of tcp_rr".
    fn kind(&self) -> String {
        self.test().to_string()
    }

    /// The server or reflector as the user named it, or "loopback".
    fn target(&self) -> &str;

    /// Seconds since the Unix epoch at the run's start.
    fn started_at(&self) -> f64;

    /// The emulated path the run crossed, as a host recorded it.
    fn path(&self) -> Option<&PathFacts> {
        None
    }

    /// The figure a listing ranks runs by, where the kind has one (loss and delay have no
    /// one figure that ranks runs: listings use the text).
    fn headline(&self) -> Option<(Headline, f64)> {
        None
    }

    /// The headline in words: "9.41 Gbits/sec", "best 31.9 Gbits/sec of 6 points".
    fn headline_text(&self, scale: Scale) -> String;

    /// The figure a mesh's row, grid cell and metrics show for `which`, and its text;
    /// `None` and an empty text when the document does not carry it.
    fn mesh_figure(&self, which: linerate_model::measure::Headline) -> (Option<f64>, String) {
        let _ = which;
        (None, String::new())
    }

    /// The end-of-run text: what the run printed after its live lines, and what `show`
    /// prints.
    fn render_text(&self, scale: Scale) -> String;

    /// The text as a run printed it, for `show`, live lines included where they are kept.
    fn render_text_as_run(&self, scale: Scale) -> String {
        self.render_text(scale)
    }

    /// What is left to print after a run's live lines.
    fn render_text_after_live(&self, scale: Scale) -> String {
        self.render_text(scale)
    }

    /// The document as CSV rows, one per measured thing.
    fn rows(&self) -> Rows;
}

/// A figure as CSV text: the shortest text that reads back as the same number.
pub fn number(value: f64) -> String {
    format!("{value}")
}
