//! The one figure that heads a result where there is room for one: a mesh's row, its
//! grid cell and its metrics. Which figure depends on what was measured; how it is read
//! from a document is here, beside the documents.

use crate::document::Document;
use crate::units::Scale;

pub use linerate_model::measure::Headline;

/// The figure and its text, e.g. `(Some(9.4e9), "9.40 Gbits/sec")`; `None` and an empty
/// text when the document does not carry it.
pub fn of(document: &Document, headline: Headline) -> (Option<f64>, String) {
    match (document, headline) {
        (Document::Rpm(report), Headline::Responsiveness) => {
            let text = match (report.rpm, &report.grade) {
                (Some(rpm), Some(grade)) => format!(
                    "RPM {rpm:.0} ({}), grade {grade}",
                    report.band.as_deref().unwrap_or("-")
                ),
                (Some(rpm), None) => format!("RPM {rpm:.0}"),
                _ => String::new(),
            };
            (report.rpm, text)
        }
        (Document::Stamp(report), Headline::Loss) => (
            Some(report.loss.round_trip_pct / 100.0),
            report.headline_text(),
        ),
        (Document::Trace(report), Headline::Hops) => (
            report
                .paths
                .iter()
                .filter_map(|p| p.reached_ttl)
                .max()
                .map(f64::from),
            report.headline_text(),
        ),
        (Document::Profile(report), Headline::Goodput) => (
            Some(report.summary.received_bps),
            crate::units::format_rate(report.summary.received_bps, Scale::Adaptive),
        ),
        (Document::Profile(report), Headline::Transaction { index, label }) => {
            let timed = report
                .groups
                .first()
                .and_then(|g| g.transactions.get(index))
                .map(|t| (t.latency_us.p50, t.iterations_per_s));
            match timed {
                Some((p50, rate)) => (
                    Some(p50 / 1e6),
                    format!(
                        "{label} p50 {} ({rate:.0}/s)",
                        linerate_model::units::format_micros(p50)
                    ),
                ),
                None => (None, String::new()),
            }
        }
        _ => (None, String::new()),
    }
}
