//! CSV forms of a result document, one row per measured thing (each kind says what its
//! rows are: per interval for a test, per iteration for a repeated test, per point for a
//! sweep, per trial for a search, per probe or hop for the others).

use crate::document::Document;

/// The document as CSV text with a header row.
pub fn csv(document: &Document) -> Result<String, csv::Error> {
    let (header, rows) = document.as_kind().rows();
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(&header)?;
    for row in rows {
        writer.write_record(&row)?;
    }
    let bytes = writer.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
