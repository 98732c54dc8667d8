//! The results database: every run's full result document in one SQLite file, with a few
//! columns beside it for listings.
//!
//! The file is marked as linerate's (`PRAGMA application_id`) and carries its schema
//! version (`PRAGMA user_version`); opening it applies any newer migrations in one
//! transaction, and refuses a file that is someone else's, damaged, or from a newer
//! linerate. Writers from several processes at once are safe: the journal is WAL, every
//! write is one `BEGIN IMMEDIATE` transaction, and a busy database is waited for.

pub mod archive;
pub mod connection;
mod mesh_columns;
pub mod migrations;
pub mod prune;
pub mod spool;

use linerate_model::clock::UnixTime;
pub use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_report::document::Document;
use mesh_columns::{mesh_row, MESH_COLUMNS};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// "LRAT": marks a SQLite file as a linerate results database.
pub const APPLICATION_ID: i32 = 0x4c52_4154;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = migrations::version(migrations::Dialect::Sqlite);

/// How long a writer waits for another to finish before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
/// (A cause is written into the message and is not a `source`, so that a chain of
/// errors printed with `{:#}` does not say it twice.)
pub enum StoreError {
    #[error("{path}: not a linerate results database ({why})")]
    Foreign { path: String, why: String },
    #[error("{path}: the results database is damaged or not a database ({cause})")]
    Corrupt {
        path: String,
        cause: rusqlite::Error,
    },
    #[error("{path}: written by a newer linerate (schema version {found}; this one reads up to {known})")]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
    #[error("no run {id} in {path} (see 'linerate history')")]
    NotFound { path: String, id: i64 },
    #[error("{path}: run {id} has a document this linerate cannot read ({cause})")]
    Unreadable {
        path: String,
        id: i64,
        cause: serde_json::Error,
    },
    #[error("cannot create the directory {dir}: {cause}")]
    Directory { dir: String, cause: std::io::Error },
    #[error("{path}: {cause}")]
    Sqlite {
        path: String,
        cause: rusqlite::Error,
    },
    #[error("archive {url}: {why}")]
    Archive { url: String, why: String },
}

/// Where a mesh's rows go: the SQLite store, or the PostgreSQL archive many coordinators
/// share.
/// A mesh job's row and its run (the document and its stored JSON), when it ran.
pub type MeshItem<'a> = (&'a MeshRow, Option<(&'a Document, &'a str)>);

pub trait MeshArchive {
    /// Stores a job's row with its run (when it ran), together; the run's id.
    fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError>;
    /// Stores several jobs, all or none: one commit where the store has transactions.
    /// Their run ids, in order.
    fn insert_mesh_batch(
        &mut self,
        items: &[MeshItem<'_>],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        items
            .iter()
            .map(|(row, run)| self.insert_mesh(row, *run))
            .collect()
    }
    /// A mesh's rows, oldest first; `latest`: each (src, dst, test)'s newest.
    fn mesh_rows(&mut self, mesh: &str, latest: bool) -> Result<Vec<MeshRow>, StoreError>;
    /// Up to `per_pair` of each (src, dst, test)'s newest rows, oldest first, handed to
    /// `each` a pair at a time: what a restarted coordinator's board shows, read pair by
    /// pair through the pair's index rather than every row a mesh has kept, and never
    /// all in memory at once.
    fn recent_rows_each(
        &mut self,
        mesh: &str,
        per_pair: usize,
        each: &mut dyn FnMut(Vec<MeshRow>),
    ) -> Result<(), StoreError> {
        let mut pairs: BTreeMap<(String, String, String), Vec<MeshRow>> = BTreeMap::new();
        for row in self.mesh_rows(mesh, false)? {
            let key = (row.src.clone(), row.dst.clone(), row.test.clone());
            pairs.entry(key).or_default().push(row);
        }
        for (_, mut rows) in pairs {
            let keep = rows.len().saturating_sub(per_pair);
            rows.drain(..keep);
            each(rows);
        }
        Ok(())
    }
    /// A stored run's document as it was stored (a restarted coordinator reads each
    /// pair's last trace from it); `None` where this store keeps no documents.
    fn run_json(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        let _ = id;
        Ok(None)
    }
    /// A pair's rows since `query.since` and the hourly aggregates that stand for the
    /// rows retention removed (the grid's long plot, `mesh history`).
    fn pair_history(
        &mut self,
        query: &prune::PairQuery<'_>,
    ) -> Result<prune::PairHistory, StoreError> {
        let rows = self
            .mesh_rows(query.mesh, false)?
            .into_iter()
            .filter(|r| {
                r.src == query.src
                    && r.dst == query.dst
                    && query.test.is_none_or(|t| r.test == t)
                    && r.started_at >= query.since
            })
            .collect();
        Ok(prune::PairHistory {
            rows,
            hourly: Vec::new(),
        })
    }
    /// Where it is, for messages.
    fn location(&self) -> String;
    /// One small step of a mesh's retention (crate::prune::RetainStep): rows that
    /// started before `raw_before` summed up by the hour and removed, then aggregates of
    /// hours before `hourly_before` removed; `batch` rows a transaction at most. A
    /// store that keeps nothing for long (one in memory) has nothing to do.
    fn retain_step(
        &mut self,
        _mesh: &str,
        _raw_before: f64,
        _hourly_before: Option<f64>,
        _batch: usize,
    ) -> Result<prune::RetainStep, StoreError> {
        Ok(prune::RetainStep::default())
    }
}

impl MeshArchive for Store {
    fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError> {
        Store::insert_mesh(self, row, run)
    }
    fn insert_mesh_batch(
        &mut self,
        items: &[MeshItem<'_>],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        Store::insert_mesh_batch(self, items)
    }
    fn mesh_rows(&mut self, mesh: &str, latest: bool) -> Result<Vec<MeshRow>, StoreError> {
        Store::mesh_rows(self, mesh, latest)
    }
    fn recent_rows_each(
        &mut self,
        mesh: &str,
        per_pair: usize,
        each: &mut dyn FnMut(Vec<MeshRow>),
    ) -> Result<(), StoreError> {
        Store::recent_rows_each(self, mesh, per_pair, each)
    }
    fn run_json(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        self.get(id).map(|run| Some(run.json))
    }
    fn pair_history(
        &mut self,
        query: &prune::PairQuery<'_>,
    ) -> Result<prune::PairHistory, StoreError> {
        Store::pair_history(self, query)
    }
    fn location(&self) -> String {
        self.path.clone()
    }
    fn retain_step(
        &mut self,
        mesh: &str,
        raw_before: f64,
        hourly_before: Option<f64>,
        batch: usize,
    ) -> Result<prune::RetainStep, StoreError> {
        Store::retain_step(self, mesh, raw_before, hourly_before, batch)
    }
}

impl MeshArchive for archive::Archive {
    fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError> {
        archive::Archive::insert_mesh(self, row, run)
    }
    fn insert_mesh_batch(
        &mut self,
        items: &[MeshItem<'_>],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        archive::Archive::insert_mesh_batch(self, items)
    }
    fn mesh_rows(&mut self, mesh: &str, latest: bool) -> Result<Vec<MeshRow>, StoreError> {
        archive::Archive::mesh_rows(self, mesh, latest)
    }
    fn recent_rows_each(
        &mut self,
        mesh: &str,
        per_pair: usize,
        each: &mut dyn FnMut(Vec<MeshRow>),
    ) -> Result<(), StoreError> {
        archive::Archive::recent_rows_each(self, mesh, per_pair, each)
    }
    fn run_json(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        archive::Archive::run_json(self, id).map(Some)
    }
    fn pair_history(
        &mut self,
        query: &prune::PairQuery<'_>,
    ) -> Result<prune::PairHistory, StoreError> {
        archive::Archive::pair_history(self, query)
    }
    fn location(&self) -> String {
        self.url().to_string()
    }
    fn retain_step(
        &mut self,
        mesh: &str,
        raw_before: f64,
        hourly_before: Option<f64>,
        batch: usize,
    ) -> Result<prune::RetainStep, StoreError> {
        archive::Archive::retain_step(self, mesh, raw_before, hourly_before, batch)
    }
}

/// A mesh job's run (when it ran) and row, within `tx`. Returns the run's id.
fn insert_mesh_in(
    tx: &rusqlite::Transaction<'_>,
    row: &MeshRow,
    run: Option<(&Document, &str)>,
) -> rusqlite::Result<Option<i64>> {
    let key = row.job_key();
    // Written before (a replay): the run it was kept with.
    let kept: Option<Option<i64>> = tx
        .query_row(
            "SELECT run_id FROM mesh_results WHERE job_key = ?1",
            params![key],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(run_id) = kept {
        return Ok(run_id);
    }
    let run_id = match run {
        Some((document, json)) => Some(insert_run(tx, document, json, &Listed::of_mesh(row))?),
        None => None,
    };
    tx.execute(
        "INSERT INTO mesh_results (run_id, mesh, src, dst, test, direction, protocol,
                                   cycle, started_at, ended_at, ok, reason, headline,
                                   headline_text, outcome, blamed, job_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                 ?16, ?17)",
        params![
            run_id,
            row.mesh,
            row.src,
            row.dst,
            row.test,
            row.direction,
            row.protocol,
            row.cycle as i64,
            row.started_at,
            row.ended_at,
            row.outcome.is_ok(),
            row.outcome.reason(),
            row.headline.filter(|v| v.is_finite()),
            row.headline_text,
            row.outcome.name(),
            row.outcome.blamed(),
            key,
        ],
    )?;
    // The pair's newest row, unless a newer one is kept (a replay of an older result).
    tx.execute(
        "INSERT INTO mesh_latest (mesh, src, dst, test, result_id, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (mesh, src, dst, test) DO UPDATE
            SET result_id = excluded.result_id, started_at = excluded.started_at
            WHERE excluded.started_at >= mesh_latest.started_at",
        params![
            row.mesh,
            row.src,
            row.dst,
            row.test,
            tx.last_insert_rowid(),
            row.started_at
        ],
    )?;
    Ok(run_id)
}

/// One run as listings show it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: i64,
    pub started_at: f64,
    pub stored_at: f64,
    pub kind: String,
    pub test: String,
    pub target: String,
    pub headline: Option<f64>,
    pub headline_text: String,
    pub command: String,
    /// The emulated path the run crossed, in brief, or "direct".
    pub path: String,
}

/// One run with its document.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub row: RunRow,
    /// The document exactly as it was stored (the run's `--json` output).
    pub json: String,
    pub document: Document,
}

/// Which runs a listing shows, newest first.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Runs of this test ("tcp_stream") or kind ("sweep of tcp_rr"); a sweep matches the
    /// test it swept too.
    pub test: Option<String>,
    /// Runs against this target, as named.
    pub target: Option<String>,
    /// Runs that started at or after this time (seconds since the Unix epoch).
    pub since: Option<f64>,
    /// Runs whose path, in brief, holds this text (any case): "loss 2%", "lab wan",
    /// "direct".
    pub path: Option<String>,
    pub limit: Option<usize>,
}

pub struct Store {
    conn: Connection,
    path: String,
}

/// `$XDG_DATA_HOME/linerate/results.db`, or `~/.local/share/linerate/results.db`.
pub fn default_path() -> Option<PathBuf> {
    let data = match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".local/share")
        }
    };
    Some(data.join("linerate").join("results.db"))
}

/// The columns beside a run's document that listings show.
pub(crate) struct Listed {
    pub target: String,
    pub headline: Option<f64>,
    pub headline_text: String,
    pub command: String,
}

impl Listed {
    /// A mesh job's run: its pair as the target, its figure as the headline.
    pub(crate) fn of_mesh(row: &MeshRow) -> Listed {
        Listed {
            target: format!("{} -> {}", row.src, row.dst),
            headline: row.headline,
            headline_text: row.headline_text.clone(),
            command: format!("mesh {} test {} cycle {}", row.mesh, row.test, row.cycle),
        }
    }
}

/// Inserts a run inside `tx`; its id.
fn insert_run(
    tx: &rusqlite::Transaction<'_>,
    document: &Document,
    json: &str,
    listed: &Listed,
) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO runs (started_at, stored_at, test, kind, target, headline,
                           headline_text, command, document, path)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            document.started_at(),
            UnixTime::now().seconds(),
            document.test(),
            document.kind(),
            listed.target,
            listed.headline.filter(|v| v.is_finite()),
            listed.headline_text,
            listed.command,
            json,
            document.path_brief(),
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

impl Store {
    /// Opens (creating when missing) the database at `path` and brings its schema up to
    /// date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let shown = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Directory {
                dir: dir.display().to_string(),
                cause: source,
            })?;
        }
        let sqlite = |source| StoreError::Sqlite {
            path: shown.clone(),
            cause: source,
        };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sqlite)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite)?;
        let mut store = Store { conn, path: shown };
        store.prepare()?;
        // WAL lets readers go on beside a writer; it is a property of the file and
        // cannot change inside a transaction. On a file system without shared memory it
        // stays in the default journal, which is slower but as safe.
        let mode = store
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0));
        // In WAL mode a commit need not wait on the disk (NORMAL): the file stays whole
        // whatever stops the process, a crashed process loses nothing, and only a power
        // loss can take the last commits back. Waiting on the disk for each kept a
        // coordinator to about 1,300 results a second here; this, above 4,000
        // (docs/performance.md).
        if mode.is_ok_and(|m| m.eq_ignore_ascii_case("wal")) {
            store
                .conn
                .execute_batch("PRAGMA synchronous = NORMAL")
                .map_err(|e| store.sqlite(e))?;
        }
        Ok(store)
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    fn sqlite(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            cause: source,
        }
    }

    /// Under the write lock, so that another process setting the file up is waited for
    /// and its work seen: refuses a damaged file, someone else's database and a newer
    /// schema, then applies every migration past the file's version in one transaction,
    /// so a failure leaves the file as it was.
    fn prepare(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let failed = |source: rusqlite::Error| match source.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt {
                    path: path.clone(),
                    cause: source,
                }
            }
            _ => StoreError::Sqlite {
                path: path.clone(),
                cause: source,
            },
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed)?;
        let pragma = |name: &str| -> Result<i64, StoreError> {
            tx.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
                .map_err(failed)
        };
        let id = pragma("application_id")?;
        let version = pragma("user_version")?;
        let tables: i64 = tx
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .map_err(failed)?;
        let fresh = id == 0 && tables == 0;
        if !fresh && id != i64::from(APPLICATION_ID) {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                why: if id == 0 {
                    format!("a SQLite database with {tables} tables of another program")
                } else {
                    format!("application id {id:#x}")
                },
            });
        }
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                known: SCHEMA_VERSION,
            });
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        if fresh {
            tx.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))
                .map_err(failed)?;
        }
        for (step, sql) in migrations::steps(migrations::Dialect::Sqlite)
            .into_iter()
            .enumerate()
            .skip(version as usize)
        {
            tx.execute_batch(sql).map_err(failed)?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", step + 1))
                .map_err(failed)?;
        }
        backfill_paths(&tx).map_err(failed)?;
        tx.commit().map_err(failed)
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.sqlite(e))
    }

    /// Stores a run; returns its id. `json` is the document's text as printed, kept as is.
    pub fn insert(
        &mut self,
        document: &Document,
        json: &str,
        command: &str,
    ) -> Result<i64, StoreError> {
        let listed = Listed {
            target: document.target().to_string(),
            headline: document.headline().map(|(_, v)| v),
            headline_text: document.headline_text(linerate_report::units::Scale::Adaptive),
            command: command.to_string(),
        };
        self.write(|tx| insert_run(tx, document, json, &listed))
    }

    /// Runs `work` in one write transaction (BEGIN IMMEDIATE: another writer is waited
    /// for), committed when it succeeds.
    fn write<T>(
        &mut self,
        work: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let path = self.path.clone();
        let sqlite = |source| StoreError::Sqlite {
            path: path.clone(),
            cause: source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let value = work(&tx).map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        Ok(value)
    }

    /// Stores one mesh job: its run (when it ran) and its labelled row, in one
    /// transaction, so a crash never keeps one without the other. Returns the run's id,
    /// when it ran.
    pub fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError> {
        self.write(|tx| insert_mesh_in(tx, row, run))
    }

    /// Stores several mesh jobs in one transaction (one commit, so one flush of the
    /// write-ahead log for them all), each as [`insert_mesh`](Self::insert_mesh) would,
    /// all or none. Their run ids, in order.
    pub fn insert_mesh_batch(
        &mut self,
        items: &[MeshItem<'_>],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        self.write(|tx| {
            items
                .iter()
                .map(|(row, run)| insert_mesh_in(tx, row, *run))
                .collect()
        })
    }

    /// A mesh's rows, oldest first; `latest`: only each (src, dst, test)'s newest.
    pub fn mesh_rows(&self, mesh: &str, latest: bool) -> Result<Vec<MeshRow>, StoreError> {
        if latest {
            // A pair whose newest row retention removed has none: it has not run within
            // the raw rows' span.
            // Sorted here: SQLite's sort of a large mesh's pairs took as long as reading them.
            let mut rows = self.mesh_rows_where(
                "id IN (SELECT result_id FROM mesh_latest WHERE mesh = ?1)",
                params![mesh],
            )?;
            rows.sort_by(|a, b| (&a.test, &a.src, &a.dst).cmp(&(&b.test, &b.src, &b.dst)));
            Ok(rows)
        } else {
            self.mesh_rows_where("mesh = ?1 ORDER BY started_at, id", params![mesh])
        }
    }

    /// Up to `per_pair` of each pair's newest rows (the pairs `mesh_latest` knows),
    /// oldest first: [`recent_rows_each`](Self::recent_rows_each)'s rows all together.
    pub fn recent_rows(&self, mesh: &str, per_pair: usize) -> Result<Vec<MeshRow>, StoreError> {
        let mut rows = Vec::new();
        self.recent_rows_each(mesh, per_pair, &mut |pair| rows.extend(pair))?;
        rows.sort_by(|a, b| a.started_at.total_cmp(&b.started_at));
        Ok(rows)
    }

    /// Up to `per_pair` of each pair's newest rows, oldest first, a pair at a time, each
    /// pair read through its index.
    pub fn recent_rows_each(
        &self,
        mesh: &str,
        per_pair: usize,
        each: &mut dyn FnMut(Vec<MeshRow>),
    ) -> Result<(), StoreError> {
        let pairs: Vec<(String, String, String)> = {
            let mut statement = self
                .conn
                .prepare("SELECT src, dst, test FROM mesh_latest WHERE mesh = ?1")
                .map_err(|e| self.sqlite(e))?;
            let found = statement
                .query_map(params![mesh], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| self.sqlite(e))?;
            found
        };
        for (src, dst, test) in pairs {
            let mut rows = self.mesh_rows_where(
                "id IN (SELECT id FROM mesh_results WHERE mesh = ?1 AND src = ?2 AND dst = ?3
                        AND test = ?4 ORDER BY started_at DESC, id DESC LIMIT ?5)",
                params![mesh, src, dst, test, per_pair as i64],
            )?;
            rows.sort_by(|a, b| a.started_at.total_cmp(&b.started_at));
            each(rows);
        }
        Ok(())
    }

    /// The mesh rows (table `m`) that `filter` (a WHERE clause and its order) picks.
    pub(crate) fn mesh_rows_where(
        &self,
        filter: &str,
        values: impl rusqlite::Params,
    ) -> Result<Vec<MeshRow>, StoreError> {
        let sql = format!("SELECT run_id, {MESH_COLUMNS} FROM mesh_results AS m WHERE {filter}");
        let mut statement = self.conn.prepare(&sql).map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map(values, |r| mesh_row(r, 1, r.get(0)?))
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sqlite(e))
    }

    const COLUMNS: &'static str =
        "id, started_at, stored_at, kind, test, target, headline, headline_text, command, \
         coalesce(path, 'direct')";

    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
        Ok(RunRow {
            id: r.get(0)?,
            started_at: r.get(1)?,
            stored_at: r.get(2)?,
            kind: r.get(3)?,
            test: r.get(4)?,
            target: r.get(5)?,
            headline: r.get(6)?,
            headline_text: r.get(7)?,
            command: r.get(8)?,
            path: r.get(9)?,
        })
    }

    /// Runs matching `filter`, newest first.
    pub fn list(&self, filter: &Filter) -> Result<Vec<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM runs
             WHERE (?1 IS NULL OR test = ?1 OR kind = ?1 OR kind = 'sweep of ' || ?1)
               AND (?2 IS NULL OR target = ?2)
               AND (?3 IS NULL OR started_at >= ?3)
               AND (?5 IS NULL OR instr(lower(coalesce(path, 'direct')), lower(?5)) > 0)
             ORDER BY started_at DESC, id DESC
             LIMIT ?4",
            Self::COLUMNS
        );
        let limit = filter.limit.map_or(-1, |l| l as i64);
        let mut statement = self.conn.prepare(&sql).map_err(|e| self.sqlite(e))?;
        let rows = statement
            .query_map(
                params![filter.test, filter.target, filter.since, limit, filter.path],
                Self::row,
            )
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sqlite(e))
    }

    /// One run with its document.
    pub fn get(&self, id: i64) -> Result<StoredRun, StoreError> {
        let sql = format!("SELECT {}, document FROM runs WHERE id = ?1", Self::COLUMNS);
        let found = self
            .conn
            .query_row(&sql, [id], |r| Ok((Self::row(r)?, r.get::<_, String>(10)?)))
            .optional()
            .map_err(|e| self.sqlite(e))?;
        let Some((row, json)) = found else {
            return Err(StoreError::NotFound {
                path: self.path.clone(),
                id,
            });
        };
        let document = Document::from_json(&json).map_err(|source| StoreError::Unreadable {
            path: self.path.clone(),
            id,
            cause: source,
        })?;
        Ok(StoredRun {
            row,
            json,
            document,
        })
    }
}

/// Fills the path of rows stored before the column was there, from their documents
/// (a document this build cannot read keeps "direct").
fn backfill_paths(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let missing: Vec<(i64, String)> = {
        let mut statement = tx.prepare("SELECT id, document FROM runs WHERE path IS NULL")?;
        let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (id, json) in missing {
        let brief = Document::from_json(&json).map_or("direct".to_string(), |d| d.path_brief());
        tx.execute(
            "UPDATE runs SET path = ?1 WHERE id = ?2",
            params![brief, id],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
