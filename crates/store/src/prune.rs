//! Retention: runs older than a time leave the database, a mesh's rows with them after
//! their hours are summed up in `mesh_hourly` (per series and hour: how many jobs, how
//! they ended, the figure's minimum, median, 95th percentile, maximum and mean over the
//! ok ones). The work goes in small transactions, so that a coordinator writing to the
//! same file waits a moment at most, and an interrupted prune loses nothing: an hour's
//! aggregate is written whole before any of its rows go (and never written again), and
//! the rows then go a batch at a time.

use crate::{Store, StoreError};
use rusqlite::{params, OptionalExtension};
use std::collections::BTreeMap;

/// Seconds in the aggregates' unit of time.
pub const HOUR: f64 = 3600.0;

/// What a prune did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Hours of mesh rows summed up (each its series' aggregates).
    pub hours: u64,
    /// Aggregate rows written.
    pub aggregates: u64,
    pub mesh_rows: u64,
    pub runs: u64,
}

/// What one step of a mesh's retention did; `more`: there is more to do now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetainStep {
    /// Hours summed up (0 or 1), and the aggregates written for it.
    pub hours: u64,
    pub aggregates: u64,
    pub mesh_rows: u64,
    pub runs: u64,
    /// Aggregates past their own span removed.
    pub hourly_removed: u64,
    pub more: bool,
}

impl RetainStep {
    pub fn add(&mut self, other: &RetainStep) {
        self.hours += other.hours;
        self.aggregates += other.aggregates;
        self.mesh_rows += other.mesh_rows;
        self.runs += other.runs;
        self.hourly_removed += other.hourly_removed;
    }
}

/// One series' hour, summed up.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    pub mesh: String,
    pub src: String,
    pub dst: String,
    pub test: String,
    pub direction: String,
    pub protocol: String,
    /// The hour's start, Unix seconds.
    pub hour: f64,
    pub count: u64,
    pub ok: u64,
    pub failed: u64,
    pub skipped: u64,
    /// The ok jobs' figures (headline), summed up; `figures` of them.
    pub figures: u64,
    pub min: Option<f64>,
    pub median: Option<f64>,
    pub p95: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

/// Which pair's history: its mesh, source and destination, one test or all, since when
/// (Unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct PairQuery<'a> {
    pub mesh: &'a str,
    pub src: &'a str,
    pub dst: &'a str,
    pub test: Option<&'a str>,
    pub since: f64,
}

/// A pair's history as kept: its rows, and hourly aggregates where retention removed
/// the rows (older than every row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairHistory {
    pub rows: Vec<crate::MeshRow>,
    pub hourly: Vec<Aggregate>,
}

impl PairHistory {
    /// Every hour of it as an aggregate, oldest first, each said to be summed up from the
    /// rows here (`true`) or kept by retention (`false`): the rows summed up by the hour
    /// as retention would, after the aggregates that stand for removed rows.
    pub fn by_hour(&self) -> Vec<(Aggregate, bool)> {
        let mut hours: BTreeMap<i64, Vec<RawRow>> = BTreeMap::new();
        for row in &self.rows {
            let labels = [
                row.mesh.clone(),
                row.src.clone(),
                row.dst.clone(),
                row.test.clone(),
                row.direction.clone(),
                row.protocol.clone(),
            ];
            let hour = (row.started_at / HOUR).floor() as i64;
            hours.entry(hour).or_default().push((
                labels,
                row.outcome.name().to_string(),
                row.headline,
            ));
        }
        let summed = hours
            .into_iter()
            .flat_map(|(hour, rows)| aggregate(hour as f64 * HOUR, rows));
        let mut all: Vec<(Aggregate, bool)> = self
            .hourly
            .iter()
            .cloned()
            .map(|a| (a, false))
            .chain(summed.map(|a| (a, true)))
            .collect();
        all.sort_by(|a, b| a.0.hour.total_cmp(&b.0.hour));
        all
    }
}

/// An aggregate from its columns (mesh, src, dst, test, direction, protocol, hour,
/// count, ok, failed, skipped, figures, min, median, p95, max, mean).
fn aggregate_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Aggregate> {
    Ok(Aggregate {
        mesh: r.get(0)?,
        src: r.get(1)?,
        dst: r.get(2)?,
        test: r.get(3)?,
        direction: r.get(4)?,
        protocol: r.get(5)?,
        hour: r.get(6)?,
        count: r.get::<_, i64>(7)? as u64,
        ok: r.get::<_, i64>(8)? as u64,
        failed: r.get::<_, i64>(9)? as u64,
        skipped: r.get::<_, i64>(10)? as u64,
        figures: r.get::<_, i64>(11)? as u64,
        min: r.get(12)?,
        median: r.get(13)?,
        p95: r.get(14)?,
        max: r.get(15)?,
        mean: r.get(16)?,
    })
}

/// The nearest-rank percentile `q` (0-1) of sorted values.
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// A series' labels: mesh, source, destination, test, direction, protocol.
pub type Labels = [String; 6];

/// A raw row as summed up: its series, how it ended, its figure.
pub type RawRow = (Labels, String, Option<f64>);

/// A series' hour while it is counted: jobs, ok, failed, skipped, the ok ones' figures.
type Tally = (u64, u64, u64, u64, Vec<f64>);

/// The aggregates of raw rows, one per series.
pub fn aggregate(hour: f64, rows: impl IntoIterator<Item = RawRow>) -> Vec<Aggregate> {
    let mut series: BTreeMap<Labels, Tally> = BTreeMap::new();
    for (labels, outcome, figure) in rows {
        let entry = series.entry(labels).or_default();
        entry.0 += 1;
        match outcome.as_str() {
            "ok" => {
                entry.1 += 1;
                if let Some(v) = figure.filter(|v| v.is_finite()) {
                    entry.4.push(v);
                }
            }
            "skipped" => entry.3 += 1,
            // Cut short by the operator's stop: counted among the hour's jobs, neither a
            // success nor a failure.
            "interrupted" => {}
            _ => entry.2 += 1,
        }
    }
    series
        .into_iter()
        .map(|(labels, (count, ok, failed, skipped, mut values))| {
            values.sort_by(f64::total_cmp);
            let [mesh, src, dst, test, direction, protocol] = labels;
            let n = values.len();
            Aggregate {
                mesh,
                src,
                dst,
                test,
                direction,
                protocol,
                hour,
                count,
                ok,
                failed,
                skipped,
                figures: n as u64,
                min: values.first().copied(),
                median: nearest_rank(&values, 0.5),
                p95: nearest_rank(&values, 0.95),
                max: values.last().copied(),
                mean: (n > 0).then(|| values.iter().sum::<f64>() / n as f64),
            }
        })
        .collect()
}

impl Store {
    /// Removes the runs that started before `cutoff` (Unix seconds), a mesh's rows with
    /// them: whole hours only (an hour that ends after the cutoff waits for the next
    /// prune), each hour summed up in `mesh_hourly` first. `batch` rows go per
    /// transaction. `dry`: counts what would go and changes nothing. `progress` hears of
    /// each hour done.
    pub fn prune(
        &mut self,
        cutoff: f64,
        batch: usize,
        dry: bool,
        progress: &mut dyn FnMut(&Pruned),
    ) -> Result<Pruned, StoreError> {
        let mut done = Pruned::default();
        let last_hour = (cutoff / HOUR).floor() * HOUR;
        let batch = batch.max(1) as i64;
        if dry {
            let count = |sql: &str, at: f64| -> Result<u64, StoreError> {
                self.conn
                    .query_row(sql, params![at], |r| r.get::<_, i64>(0))
                    .map(|n| n as u64)
                    .map_err(|e| self.sqlite(e))
            };
            done.mesh_rows = count(
                "SELECT count(*) FROM mesh_results WHERE started_at < ?1",
                last_hour,
            )?;
            done.hours = count(
                "SELECT count(DISTINCT CAST(started_at / 3600 AS INTEGER)) FROM mesh_results
                 WHERE started_at < ?1",
                last_hour,
            )?;
            done.runs = count(
                "SELECT count(*) FROM runs AS r WHERE r.started_at < ?1 AND NOT EXISTS (
                     SELECT 1 FROM mesh_results AS m WHERE m.run_id = r.id)",
                cutoff,
            )? + count(
                "SELECT count(*) FROM mesh_results WHERE started_at < ?1 AND run_id IS NOT NULL",
                last_hour,
            )?;
            return Ok(done);
        }
        // A mesh's rows, an hour at a time from the oldest.
        loop {
            let oldest: Option<f64> = self
                .conn
                .query_row(
                    "SELECT min(started_at) FROM mesh_results WHERE started_at < ?1",
                    params![last_hour],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| self.sqlite(e))?
                .flatten();
            let Some(oldest) = oldest else { break };
            let hour = (oldest / HOUR).floor() * HOUR;
            done.aggregates += self.sum_up_hour(hour, None)?;
            loop {
                let (rows, runs) = self.remove_hour_batch(None, hour, batch)?;
                done.mesh_rows += rows;
                done.runs += runs;
                if rows < batch as u64 {
                    break;
                }
            }
            done.hours += 1;
            progress(&done);
        }
        // Runs of no mesh (a test, a sweep, a copy), by time.
        loop {
            let runs = self.write(|tx| {
                tx.execute(
                    "DELETE FROM runs WHERE id IN (
                         SELECT r.id FROM runs AS r WHERE r.started_at < ?1 AND NOT EXISTS (
                             SELECT 1 FROM mesh_results AS m WHERE m.run_id = r.id)
                         LIMIT ?2)",
                    params![cutoff, batch],
                )
            })? as u64;
            done.runs += runs;
            if runs < batch as u64 {
                break;
            }
        }
        progress(&done);
        Ok(done)
    }

    /// One step of `mesh`'s retention: its oldest hour before `raw_before` summed up
    /// (when it is not yet), else a batch of that hour's rows removed with their runs;
    /// with no such hour left, a batch of aggregates before `hourly_before` removed. Each
    /// step is one short transaction: the coordinator's writes wait for one at most.
    pub fn retain_step(
        &mut self,
        mesh: &str,
        raw_before: f64,
        hourly_before: Option<f64>,
        batch: usize,
    ) -> Result<RetainStep, StoreError> {
        let mut step = RetainStep::default();
        let last_hour = (raw_before / HOUR).floor() * HOUR;
        let batch = batch.max(1) as i64;
        let oldest: Option<f64> = self
            .conn
            .query_row(
                "SELECT min(started_at) FROM mesh_results WHERE mesh = ?1 AND started_at < ?2",
                params![mesh, last_hour],
                |r| r.get(0),
            )
            .map_err(|e| self.sqlite(e))?;
        if let Some(oldest) = oldest {
            let hour = (oldest / HOUR).floor() * HOUR;
            let summed: bool = self
                .conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM mesh_hourly WHERE mesh = ?1 AND hour = ?2)",
                    params![mesh, hour],
                    |r| r.get(0),
                )
                .map_err(|e| self.sqlite(e))?;
            step.more = true;
            // An hour past the aggregates' own span is not summed up only to go.
            let past_span = hourly_before.is_some_and(|before| hour < before);
            if !summed && !past_span {
                step.aggregates = self.sum_up_hour(hour, Some(mesh))?;
                step.hours = 1;
                return Ok(step);
            }
            let (rows, runs) = self.remove_hour_batch(Some(mesh), hour, batch)?;
            step.mesh_rows = rows;
            step.runs = runs;
            return Ok(step);
        }
        if let Some(before) = hourly_before {
            let removed = self.write(|tx| {
                tx.execute(
                    "DELETE FROM mesh_hourly WHERE rowid IN (
                         SELECT rowid FROM mesh_hourly WHERE mesh = ?1 AND hour < ?2 LIMIT ?3)",
                    params![mesh, before, batch],
                )
            })? as u64;
            step.hourly_removed = removed;
            step.more = removed == batch as u64;
        }
        Ok(step)
    }

    /// Removes up to `batch` rows of the hour starting at `hour` (a mesh's, or every
    /// mesh's) with their runs, in one transaction; how many rows and runs went.
    fn remove_hour_batch(
        &mut self,
        mesh: Option<&str>,
        hour: f64,
        batch: i64,
    ) -> Result<(u64, u64), StoreError> {
        self.write(|tx| {
            let ids: Vec<(i64, Option<i64>)> = tx
                .prepare(
                    "SELECT id, run_id FROM mesh_results
                     WHERE started_at >= ?1 AND started_at < ?2 AND (?3 IS NULL OR mesh = ?3)
                     LIMIT ?4",
                )?
                .query_map(params![hour, hour + HOUR, mesh, batch], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let mut runs = 0;
            for (id, run) in &ids {
                tx.execute("DELETE FROM mesh_results WHERE id = ?1", params![id])?;
                if let Some(run) = run {
                    runs += tx.execute("DELETE FROM runs WHERE id = ?1", params![run])?;
                }
            }
            Ok((ids.len() as u64, runs as u64))
        })
    }

    /// Writes the aggregates of the hour starting at `hour` from its rows (a mesh's, or
    /// every mesh's), unless they are written already (a prune interrupted after them:
    /// the rows left are not the hour's whole). How many were written.
    fn sum_up_hour(&mut self, hour: f64, mesh: Option<&str>) -> Result<u64, StoreError> {
        self.write(|tx| {
            let rows: Vec<RawRow> = tx
                .prepare(
                    "SELECT mesh, src, dst, test, direction, protocol, outcome, headline
                     FROM mesh_results WHERE started_at >= ?1 AND started_at < ?2
                         AND (?3 IS NULL OR mesh = ?3)",
                )?
                .query_map(params![hour, hour + HOUR, mesh], |r| {
                    Ok((
                        [
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                        ],
                        r.get(6)?,
                        r.get(7)?,
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let mut written = 0;
            for a in aggregate(hour, rows) {
                written += tx.execute(
                    "INSERT OR IGNORE INTO mesh_hourly (mesh, src, dst, test, direction,
                         protocol, hour, count, ok, failed, skipped, figures, min, median,
                         p95, max, mean)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                             ?15, ?16, ?17)",
                    params![
                        a.mesh,
                        a.src,
                        a.dst,
                        a.test,
                        a.direction,
                        a.protocol,
                        a.hour,
                        a.count as i64,
                        a.ok as i64,
                        a.failed as i64,
                        a.skipped as i64,
                        a.figures as i64,
                        a.min,
                        a.median,
                        a.p95,
                        a.max,
                        a.mean,
                    ],
                )?;
            }
            Ok(written as u64)
        })
    }

    /// One pair's history since `query.since`: its rows, and the hourly aggregates that
    /// stand for the rows retention removed (an hour is summed up only once all of it is
    /// removed, so the two never cover the same time).
    pub fn pair_history(&self, query: &PairQuery<'_>) -> Result<PairHistory, StoreError> {
        let q = query;
        let since_hour = (q.since / HOUR).floor() * HOUR;
        // A test at a time, each read through the pair's index with every column of it
        // equal: with the test left open ("any test") SQLite chose the index by mesh and
        // time instead and read every pair's rows since then (1.9 s at ten million rows
        // against 0.2 ms).
        let tests: Vec<String> = match q.test {
            Some(test) => vec![test.to_string()],
            None => self.pair_tests(q.mesh, q.src, q.dst)?,
        };
        let mut rows = Vec::new();
        let mut hourly = Vec::new();
        let mut statement = self
            .conn
            .prepare(
                "SELECT mesh, src, dst, test, direction, protocol, hour, count, ok, failed,
                        skipped, figures, min, median, p95, max, mean
                 FROM mesh_hourly
                 WHERE mesh = ?1 AND src = ?2 AND dst = ?3 AND test = ?4 AND hour >= ?5",
            )
            .map_err(|e| self.sqlite(e))?;
        for test in &tests {
            rows.extend(self.mesh_rows_where(
                "mesh = ?1 AND src = ?2 AND dst = ?3 AND test = ?4 AND started_at >= ?5
                 ORDER BY started_at, id",
                params![q.mesh, q.src, q.dst, test, q.since],
            )?);
            hourly.extend(
                statement
                    .query_map(
                        params![q.mesh, q.src, q.dst, test, since_hour],
                        aggregate_row,
                    )
                    .map_err(|e| self.sqlite(e))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(|e| self.sqlite(e))?,
            );
        }
        // Stable: each test's rows keep their order where two start together.
        rows.sort_by(|a, b| a.started_at.total_cmp(&b.started_at));
        hourly.sort_by(|a: &Aggregate, b: &Aggregate| {
            a.hour
                .total_cmp(&b.hour)
                .then_with(|| a.test.cmp(&b.test))
                .then_with(|| a.direction.cmp(&b.direction))
        });
        Ok(PairHistory { rows, hourly })
    }

    /// The tests a pair has rows or aggregates of.
    fn pair_tests(&self, mesh: &str, src: &str, dst: &str) -> Result<Vec<String>, StoreError> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT test FROM mesh_latest WHERE mesh = ?1 AND src = ?2 AND dst = ?3
                 UNION
                 SELECT DISTINCT test FROM mesh_hourly WHERE mesh = ?1 AND src = ?2 AND dst = ?3",
            )
            .map_err(|e| self.sqlite(e))?;
        let tests = statement
            .query_map(params![mesh, src, dst], |r| r.get(0))
            .map_err(|e| self.sqlite(e))?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(|e| self.sqlite(e));
        tests
    }

    /// A mesh's hourly aggregates, oldest first.
    pub fn mesh_hourly(&self, mesh: &str) -> Result<Vec<Aggregate>, StoreError> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT mesh, src, dst, test, direction, protocol, hour, count, ok, failed,
                        skipped, figures, min, median, p95, max, mean
                 FROM mesh_hourly WHERE mesh = ?1 ORDER BY hour, src, dst, test, direction",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map(params![mesh], aggregate_row)
            .map_err(|e| self.sqlite(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sqlite(e));
        rows
    }

    /// Gives the free pages back to the file system (VACUUM): a long lock, so asked for.
    pub fn vacuum(&mut self) -> Result<(), StoreError> {
        self.conn
            .execute_batch("VACUUM")
            .map_err(|e| self.sqlite(e))
    }
}
