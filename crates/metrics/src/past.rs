//! A pair's long history for the grid's plot: the board keeps a pair's newest
//! [`HISTORY`](crate::board::HISTORY) results, which a probe a minute fills in four hours;
//! asked for days (`/api/history?...&days=30`), the plot reads the mesh's store instead,
//! an hour a point: summed up from the stored rows, and past the rows' span (where
//! retention removed them) from the store's hourly aggregates. Each point says which.

use crate::assess::Thresholds;
use crate::board::{Board, Key};
use serde::Serialize;
use serde_json::Value;

/// The longest span the plot reads: a year and a month (hourly aggregates are kept for a
/// year by default), 9,600 points a series at most.
pub const MAX_DAYS: u32 = 400;

/// Where a pair's past is kept: the mesh's store, read through its writer.
pub trait PastSource: Send + Sync {
    /// The series `key`'s hours since `since` (Unix seconds), oldest first.
    fn hourly(&self, key: &Key, since: f64) -> Result<Vec<HourPoint>, String>;
}

/// What a point was summed up from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kept {
    /// The hour's stored rows, summed up as the plot asked.
    Rows,
    /// The store's hourly aggregate: retention removed the rows.
    Aggregate,
}

/// One hour of a series: its jobs, and its ok jobs' headline figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HourPoint {
    /// The hour's start, Unix seconds.
    pub at: f64,
    pub count: u64,
    pub ok: u64,
    pub min: Option<f64>,
    pub median: Option<f64>,
    pub max: Option<f64>,
    pub kept: Kept,
}

/// `days` from a query string: `None` when absent; 1 to [`MAX_DAYS`].
pub fn days_of(query: &str) -> Result<Option<u32>, String> {
    let Some(value) = query.split('&').find_map(|part| part.strip_prefix("days=")) else {
        return Ok(None);
    };
    match value.parse::<u32>() {
        Ok(days) if (1..=MAX_DAYS).contains(&days) => Ok(Some(days)),
        _ => Err(format!(
            "days={value}: give a whole number of days from 1 to {MAX_DAYS}"
        )),
    }
}

/// A pair's history over `days` to `now`: what [`crate::grid::history_json`] says of it
/// (its baseline, its state), with `hourly` points from `past` in place of the board's
/// recent ones. The board is locked only to read the pair, never while the store is read.
pub fn long_history_json(
    board: &std::sync::Mutex<Board>,
    query: &str,
    days: u32,
    thresholds: &Thresholds,
    past: &dyn PastSource,
    now: f64,
) -> Result<Value, String> {
    let (mut doc, key) = {
        let board = board.lock().unwrap_or_else(|e| e.into_inner());
        let key = crate::grid::pair_series(&board, query)?.0.clone();
        (crate::grid::history_json(&board, query, thresholds)?, key)
    };
    let since = now - f64::from(days) * 86_400.0;
    let points = past
        .hourly(&key, since)
        .map_err(|why| format!("reading the pair's past: {why}"))?;
    let aggregates_until = points
        .iter()
        .filter(|p| p.kept == Kept::Aggregate)
        .map(|p| p.at + 3600.0)
        .reduce(f64::max);
    let object = doc.as_object_mut().expect("history_json is an object");
    object.remove("points");
    object.insert("days".into(), days.into());
    object.insert("since".into(), since.into());
    object.insert("aggregates_until".into(), aggregates_until.into());
    object.insert(
        "hourly".into(),
        serde_json::to_value(&points).expect("points serialize"),
    );
    Ok(doc)
}
