//! The one figure that heads a result where there is room for one: a mesh's row, its
//! grid cell and its metrics. Which figure depends on what was measured; how it is read
//! from a document is here, beside the documents.

use crate::document::Document;

pub use linerate_model::measure::Headline;

/// The figure and its text, e.g. `(Some(9.4e9), "9.40 Gbits/sec")`; `None` and an empty
/// text when the document does not carry it.
pub fn of(document: &Document, headline: Headline) -> (Option<f64>, String) {
    document.as_kind().mesh_figure(headline)
}
