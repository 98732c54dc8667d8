//! The central archive on PostgreSQL: the same runs and mesh rows as the SQLite store,
//! so that many coordinators (and hosts) share one database. Its schema is versioned in
//! `linerate_schema` and brought up to date under an advisory lock, so coordinators that
//! start together migrate it once; every row is written in one transaction with its run.
//! The `postgres` crate (sync, the maintained client) speaks the protocol; nothing here
//! builds SQL from values.

use crate::connection::{self, Credentials, SslMode};
use crate::mesh_columns::{mesh_row, MESH_COLUMNS};
use crate::migrations::{self, Dialect};
use crate::prune::{aggregate, Aggregate, PairHistory, PairQuery, RawRow, RetainStep, HOUR};
use crate::{Listed, MeshRow, StoreError};
use linerate_model::clock::UnixTime;
use linerate_report::document::Document;
use postgres::{Client, NoTls};

/// One mesh job with the prepared [`INSERT_MESH`]: the job's key checked, its run and its
/// row written, in one round trip. Returns the run's id.
fn insert_mesh_with(
    client: &mut impl postgres::GenericClient,
    statement: &postgres::Statement,
    row: &MeshRow,
    run: Option<(&Document, &str)>,
) -> Result<Option<i64>, postgres::Error> {
    let key = row.job_key();
    let listed = Listed::of_mesh(row);
    // The run's columns, all NULL when the job has none.
    let run_columns = run.map(|(document, json)| {
        (
            document.started_at(),
            UnixTime::now().seconds(),
            document.test().to_string(),
            document.kind(),
            document.path_brief(),
            json,
        )
    });
    let r = run_columns.as_ref();
    let headline = listed.headline.filter(|v| v.is_finite());
    let found = client.query_opt(
        statement,
        &[
            &row.mesh,
            &row.src,
            &row.dst,
            &row.test,
            &row.direction,
            &row.protocol,
            &(row.cycle as i64),
            &row.started_at,
            &row.ended_at,
            &row.outcome.is_ok(),
            &row.outcome.reason(),
            &row.headline.filter(|v| v.is_finite()),
            &row.headline_text,
            &row.outcome.name(),
            &row.outcome.blamed(),
            &key,
            &r.map(|r| r.0),
            &r.map(|r| r.1),
            &r.map(|r| r.2.as_str()),
            &r.map(|r| r.3.as_str()),
            &r.map(|_| listed.target.as_str()),
            &r.and(headline),
            &r.map(|_| listed.headline_text.as_str()),
            &r.map(|_| listed.command.as_str()),
            &r.map(|r| r.4.as_str()),
            &r.map(|r| r.5),
        ],
    )?;
    Ok(found.and_then(|r| r.get(0)))
}

/// An advisory lock's key: "LRAT", the store's application id.
const MIGRATION_LOCK: i64 = 0x4c52_4154;

pub struct Archive {
    client: Client,
    /// The URL without its password, for messages.
    shown: String,
    /// Where and how it was reached, to connect again.
    target: connection::Target,
    /// Statements prepared on this connection.
    statements: std::collections::HashMap<&'static str, postgres::Statement>,
}

/// One mesh job written in one statement (one round trip, one implicit transaction):
/// nothing when its key is kept already (a replay; the run it was kept with is
/// returned), else its run (when it has a document) and its row. $1-$16: the row's
/// columns and key; $17-$26: the run's, NULL without one. Should two writers race on
/// one key, the unique index refuses the second, which is retried and finds the first.
const INSERT_MESH: &str = "
    WITH kept AS (
        SELECT run_id FROM linerate_mesh_results WHERE job_key = $16::TEXT
    ), run AS (
        INSERT INTO linerate_runs (started_at, stored_at, test, kind, target, headline,
                                   headline_text, command, path, document)
        SELECT $17::DOUBLE PRECISION, $18::DOUBLE PRECISION, $19::TEXT, $20::TEXT,
               $21::TEXT, $22::DOUBLE PRECISION, $23::TEXT, $24::TEXT, $25::TEXT, $26::TEXT
        WHERE $26::TEXT IS NOT NULL AND NOT EXISTS (SELECT 1 FROM kept)
        RETURNING id
    ), added AS (
        INSERT INTO linerate_mesh_results (run_id, mesh, src, dst, test, direction,
            protocol, cycle, started_at, ended_at, ok, reason, headline, headline_text,
            outcome, blamed, job_key)
        SELECT (SELECT id FROM run), $1::TEXT, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT,
               $6::TEXT, $7::BIGINT, $8::DOUBLE PRECISION, $9::DOUBLE PRECISION,
               $10::BOOLEAN, $11::TEXT, $12::DOUBLE PRECISION, $13::TEXT, $14::TEXT,
               $15::TEXT, $16::TEXT
        WHERE NOT EXISTS (SELECT 1 FROM kept)
        RETURNING id, run_id
    ), latest AS (
        INSERT INTO linerate_mesh_latest (mesh, src, dst, test, result_id, started_at,
            run_id, direction, protocol, cycle, ended_at, outcome, reason, blamed, headline,
            headline_text)
        SELECT $1::TEXT, $2::TEXT, $3::TEXT, $4::TEXT, id, $8::DOUBLE PRECISION, run_id,
               $5::TEXT, $6::TEXT, $7::BIGINT, $9::DOUBLE PRECISION, $14::TEXT, $11::TEXT,
               $15::TEXT, $12::DOUBLE PRECISION, $13::TEXT
        FROM added
        ON CONFLICT (mesh, src, dst, test) DO UPDATE
            SET result_id = EXCLUDED.result_id, started_at = EXCLUDED.started_at,
                run_id = EXCLUDED.run_id, direction = EXCLUDED.direction,
                protocol = EXCLUDED.protocol, cycle = EXCLUDED.cycle,
                ended_at = EXCLUDED.ended_at, outcome = EXCLUDED.outcome,
                reason = EXCLUDED.reason, blamed = EXCLUDED.blamed,
                headline = EXCLUDED.headline, headline_text = EXCLUDED.headline_text
            WHERE EXCLUDED.started_at >= linerate_mesh_latest.started_at
    )
    SELECT run_id FROM added UNION ALL SELECT run_id FROM kept";

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long data sent may go unacknowledged before the connection counts as lost.
const UNACKNOWLEDGED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A client for `target`, over TLS where its mode asks.
fn connect(target: &connection::Target) -> Result<Client, StoreError> {
    let failed = |why: String| StoreError::Archive {
        url: target.shown.clone(),
        why,
    };
    match target.ssl {
        SslMode::Disable => target.config.connect(NoTls),
        _ => {
            let tls = connection::tls_config(target).map_err(failed)?;
            target
                .config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
        }
    }
    .map_err(|e| {
        let mut why = describe(&e);
        if why.contains("certificate") || why.contains("TLS") {
            why += &format!(
                " (sslmode={}; docs/mesh.md: the archive's TLS)",
                target.ssl.name()
            );
        }
        failed(why)
    })
    .and_then(|mut client| {
        // Every query here is short; PostgreSQL's JIT compiled the latest rows' join of a
        // 100-host mesh for 13-43 ms, more than the query took without it.
        client
            .batch_execute("SET jit = off")
            .map_err(|e| failed(describe(&e)))?;
        Ok(client)
    })
}

/// Writes the aggregates of `mesh`'s hour starting at `hour` from its rows, unless they
/// are written already; how many were written.
fn sum_up_hour(
    tx: &mut postgres::Transaction<'_>,
    mesh: &str,
    hour: f64,
) -> Result<u64, postgres::Error> {
    let rows: Vec<RawRow> = tx
        .query(
            "SELECT mesh, src, dst, test, direction, protocol, outcome, headline
             FROM linerate_mesh_results
             WHERE mesh = $1 AND started_at >= $2 AND started_at < $3",
            &[&mesh, &hour, &(hour + HOUR)],
        )?
        .iter()
        .map(|r| {
            (
                [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)],
                r.get(6),
                r.get(7),
            )
        })
        .collect();
    let mut written = 0;
    for a in aggregate(hour, rows) {
        written += tx.execute(
            "INSERT INTO linerate_mesh_hourly (mesh, src, dst, test, direction, protocol,
                 hour, count, ok, failed, skipped, figures, min, median, p95, max, mean)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                     $17)
             ON CONFLICT DO NOTHING",
            &[
                &a.mesh,
                &a.src,
                &a.dst,
                &a.test,
                &a.direction,
                &a.protocol,
                &a.hour,
                &(a.count as i64),
                &(a.ok as i64),
                &(a.failed as i64),
                &(a.skipped as i64),
                &(a.figures as i64),
                &a.min,
                &a.median,
                &a.p95,
                &a.max,
                &a.mean,
            ],
        )?;
    }
    Ok(written)
}

/// An aggregate from its columns, in `linerate_mesh_hourly`'s order.
fn aggregate_of(r: &postgres::Row) -> Aggregate {
    Aggregate {
        mesh: r.get(0),
        src: r.get(1),
        dst: r.get(2),
        test: r.get(3),
        direction: r.get(4),
        protocol: r.get(5),
        hour: r.get(6),
        count: r.get::<_, i64>(7) as u64,
        ok: r.get::<_, i64>(8) as u64,
        failed: r.get::<_, i64>(9) as u64,
        skipped: r.get::<_, i64>(10) as u64,
        figures: r.get::<_, i64>(11) as u64,
        min: r.get(12),
        median: r.get(13),
        p95: r.get(14),
        max: r.get(15),
        mean: r.get(16),
    }
}

/// A client error in full: the server's own message when it sent one (the client's
/// Display says only "db error").
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.to_string(),
        None => {
            // The cause too: "error performing TLS handshake" says nothing of which
            // certificate check failed.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                let said = cause.to_string();
                if !text.contains(&said) {
                    text = format!("{text}: {said}");
                }
                source = cause.source();
            }
            text
        }
    }
}

impl Archive {
    /// Connects to the archive at `url` (`postgres://user@host:port/db`, or libpq's
    /// key-value form) with the password and TLS of the environment
    /// ([`Credentials::from_env`]) and brings its schema up to date.
    pub fn open(url: &str) -> Result<Archive, StoreError> {
        Archive::open_with(url, &Credentials::from_env(None))
    }

    /// As [`open`](Self::open), with the password's sources given (crate::connection).
    pub fn open_with(url: &str, credentials: &Credentials) -> Result<Archive, StoreError> {
        let mut target = connection::target(url, credentials)?;
        // A server that went away is found out in bounded time: a connection attempt
        // gives up after 10 s, and data the server never acknowledges after 30 s. A
        // mesh's results wait in its spool meanwhile (crate::spool).
        if target.config.get_connect_timeout().is_none() {
            target.config.connect_timeout(CONNECT_TIMEOUT);
        }
        if target.config.get_tcp_user_timeout().is_none() {
            target.config.tcp_user_timeout(UNACKNOWLEDGED_TIMEOUT);
        }
        let client = connect(&target)?;
        let mut archive = Archive {
            client,
            shown: target.shown.clone(),
            target,
            statements: std::collections::HashMap::new(),
        };
        archive.migrate()?;
        Ok(archive)
    }

    /// Connects again when the connection was lost (the server restarted, the network
    /// broke): a long-lived coordinator outlives its archive's restarts.
    fn reconnect_if_closed(&mut self) -> Result<(), StoreError> {
        if self.client.is_closed() {
            self.client = connect(&self.target)?;
            self.statements.clear();
        }
        Ok(())
    }

    pub fn url(&self) -> &str {
        &self.shown
    }

    fn error(&self, e: postgres::Error) -> StoreError {
        StoreError::Archive {
            url: self.shown.clone(),
            why: describe(&e),
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let shown = self.shown.clone();
        let failed = |e: postgres::Error| StoreError::Archive {
            url: shown.clone(),
            why: describe(&e),
        };
        let mut tx = self.client.transaction().map_err(failed)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(failed)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS linerate_schema (version BIGINT NOT NULL)")
            .map_err(failed)?;
        let version: i64 = match tx
            .query_opt("SELECT version FROM linerate_schema", &[])
            .map_err(failed)?
        {
            Some(row) => row.get(0),
            None => {
                tx.execute("INSERT INTO linerate_schema (version) VALUES (0)", &[])
                    .map_err(failed)?;
                0
            }
        };
        let known = migrations::version(Dialect::Postgres);
        if version > known {
            return Err(StoreError::TooNew {
                path: self.shown.clone(),
                found: version,
                known,
            });
        }
        for (step, sql) in migrations::steps(Dialect::Postgres)
            .into_iter()
            .enumerate()
            .skip(version as usize)
        {
            tx.batch_execute(sql).map_err(failed)?;
            tx.execute(
                "UPDATE linerate_schema SET version = $1",
                &[&(step as i64 + 1)],
            )
            .map_err(failed)?;
        }
        tx.commit().map_err(failed)
    }

    /// The schema version of the archive.
    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        let row = self
            .client
            .query_one("SELECT version FROM linerate_schema", &[])
            .map_err(|e| self.error(e))?;
        Ok(row.get(0))
    }

    /// Stores one mesh job: its run (when it ran) and its labelled row, in one
    /// transaction. Returns the run's id, when it ran.
    pub fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError> {
        self.reconnect_if_closed()?;
        let statement = self.prepared(INSERT_MESH).map_err(|e| self.error(e))?;
        insert_mesh_with(&mut self.client, &statement, row, run).map_err(|e| self.error(e))
    }

    /// Stores several mesh jobs in one transaction: a round trip each, and one commit
    /// (one flush of the server's log) for them all; all or none. Their run ids, in order.
    pub fn insert_mesh_batch(
        &mut self,
        items: &[crate::MeshItem<'_>],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        self.reconnect_if_closed()?;
        let statement = self.prepared(INSERT_MESH).map_err(|e| self.error(e))?;
        let written = (|| {
            let mut tx = self.client.transaction()?;
            let ids = items
                .iter()
                .map(|(row, run)| insert_mesh_with(&mut tx, &statement, row, *run))
                .collect::<Result<Vec<_>, _>>()?;
            tx.commit()?;
            Ok(ids)
        })();
        written.map_err(|e| self.error(e))
    }

    /// `sql` prepared on this connection, once: each result is one round trip with its
    /// values. Forgotten when the connection is made again.
    fn prepared(&mut self, sql: &'static str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// One step of `mesh`'s retention, as the SQLite store's
    /// ([`crate::Store::retain_step`]): the oldest hour before `raw_before` summed up,
    /// else a batch of its rows removed with their runs, else a batch of aggregates
    /// before `hourly_before` removed; each one transaction.
    pub fn retain_step(
        &mut self,
        mesh: &str,
        raw_before: f64,
        hourly_before: Option<f64>,
        batch: usize,
    ) -> Result<RetainStep, StoreError> {
        self.reconnect_if_closed()?;
        let shown = self.shown.clone();
        let failed = |e: postgres::Error| StoreError::Archive {
            url: shown.clone(),
            why: describe(&e),
        };
        let mut step = RetainStep::default();
        let last_hour = (raw_before / HOUR).floor() * HOUR;
        let batch = batch.max(1) as i64;
        let oldest: Option<f64> = self
            .client
            .query_one(
                "SELECT min(started_at) FROM linerate_mesh_results
                 WHERE mesh = $1 AND started_at < $2",
                &[&mesh, &last_hour],
            )
            .map_err(failed)?
            .get(0);
        if let Some(oldest) = oldest {
            let hour = (oldest / HOUR).floor() * HOUR;
            step.more = true;
            let mut tx = self.client.transaction().map_err(failed)?;
            let summed: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM linerate_mesh_hourly
                                    WHERE mesh = $1 AND hour = $2)",
                    &[&mesh, &hour],
                )
                .map_err(failed)?
                .get(0);
            // An hour past the aggregates' own span is not summed up only to go.
            let past_span = hourly_before.is_some_and(|before| hour < before);
            if !summed && !past_span {
                step.aggregates = sum_up_hour(&mut tx, mesh, hour).map_err(failed)?;
                step.hours = 1;
            } else {
                let removed: Vec<(i64, Option<i64>)> = tx
                    .query(
                        "DELETE FROM linerate_mesh_results WHERE id IN (
                             SELECT id FROM linerate_mesh_results
                             WHERE mesh = $1 AND started_at >= $2 AND started_at < $3
                             LIMIT $4)
                         RETURNING id, run_id",
                        &[&mesh, &hour, &(hour + HOUR), &batch],
                    )
                    .map_err(failed)?
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect();
                step.mesh_rows = removed.len() as u64;
                // A pair whose newest row went has no newest row (as on SQLite).
                let (results, runs): (Vec<i64>, Vec<Option<i64>>) = removed.into_iter().unzip();
                tx.execute(
                    "DELETE FROM linerate_mesh_latest WHERE mesh = $1 AND result_id = ANY($2)",
                    &[&mesh, &results],
                )
                .map_err(failed)?;
                let ids: Vec<i64> = runs.into_iter().flatten().collect();
                step.runs = tx
                    .execute("DELETE FROM linerate_runs WHERE id = ANY($1)", &[&ids])
                    .map_err(failed)?;
            }
            tx.commit().map_err(failed)?;
            return Ok(step);
        }
        if let Some(before) = hourly_before {
            step.hourly_removed = self
                .client
                .execute(
                    "DELETE FROM linerate_mesh_hourly WHERE ctid IN (
                         SELECT ctid FROM linerate_mesh_hourly
                         WHERE mesh = $1 AND hour < $2 LIMIT $3)",
                    &[&mesh, &before, &batch],
                )
                .map_err(failed)?;
            step.more = step.hourly_removed == batch as u64;
        }
        Ok(step)
    }

    /// A mesh's hourly aggregates, oldest first.
    pub fn mesh_hourly(&mut self, mesh: &str) -> Result<Vec<Aggregate>, StoreError> {
        self.reconnect_if_closed()?;
        let rows = self
            .client
            .query(
                "SELECT mesh, src, dst, test, direction, protocol, hour, count, ok, failed,
                        skipped, figures, min, median, p95, max, mean
                 FROM linerate_mesh_hourly WHERE mesh = $1
                 ORDER BY hour, src, dst, test, direction",
                &[&mesh],
            )
            .map_err(|e| self.error(e))?;
        Ok(rows.iter().map(aggregate_of).collect())
    }

    /// A mesh's rows, oldest first; `latest`: only each (src, dst, test)'s newest.
    pub fn mesh_rows(&mut self, mesh: &str, latest: bool) -> Result<Vec<MeshRow>, StoreError> {
        if latest {
            // Read through each pair's newest (kept as rows are written): a pair whose
            // newest row retention removed has none.
            let mut rows = self.mesh_rows_where("linerate_mesh_latest", "mesh = $1", &[&mesh])?;
            // Sorted here: PostgreSQL's sort of 19,800 pairs by their text (under the
            // database's collation) took 4x the rest of the query.
            rows.sort_by(|a, b| (&a.test, &a.src, &a.dst).cmp(&(&b.test, &b.src, &b.dst)));
            Ok(rows)
        } else {
            self.mesh_rows_where(
                "linerate_mesh_results",
                "mesh = $1 ORDER BY started_at, id",
                &[&mesh],
            )
        }
    }

    /// Up to `per_pair` of each pair's newest rows (the pairs the latest table knows),
    /// oldest first, handed to `each` a pair at a time, each pair read through its index.
    pub fn recent_rows_each(
        &mut self,
        mesh: &str,
        per_pair: usize,
        each: &mut dyn FnMut(Vec<MeshRow>),
    ) -> Result<(), StoreError> {
        self.reconnect_if_closed()?;
        let pairs = self
            .client
            .query(
                "SELECT src, dst, test FROM linerate_mesh_latest WHERE mesh = $1",
                &[&mesh],
            )
            .map_err(|e| self.error(e))?;
        let most = per_pair as i64;
        for pair in pairs {
            let (src, dst, test): (String, String, String) =
                (pair.get(0), pair.get(1), pair.get(2));
            let rows = self.mesh_rows_where(
                "linerate_mesh_results",
                "id IN (SELECT id FROM linerate_mesh_results WHERE mesh = $1 AND src = $2
                        AND dst = $3 AND test = $4 ORDER BY started_at DESC, id DESC LIMIT $5)
                 ORDER BY started_at, id",
                &[&mesh, &src, &dst, &test, &most],
            )?;
            each(rows);
        }
        Ok(())
    }

    /// The mesh rows of `table` (the results, or each pair's newest) that `filter` (a
    /// WHERE clause and its order) picks.
    fn mesh_rows_where(
        &mut self,
        table: &str,
        filter: &str,
        values: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<MeshRow>, StoreError> {
        self.reconnect_if_closed()?;
        let sql = format!("SELECT run_id, {MESH_COLUMNS} FROM {table} WHERE {filter}");
        let rows = self
            .client
            .query(sql.as_str(), values)
            .map_err(|e| self.error(e))?;
        rows.iter()
            .map(|r| mesh_row(r, 1, r.try_get(0)?))
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))
    }

    /// One pair's history, as the SQLite store's ([`crate::Store::pair_history`]).
    pub fn pair_history(&mut self, query: &PairQuery<'_>) -> Result<PairHistory, StoreError> {
        let q = query;
        let since_hour = (q.since / HOUR).floor() * HOUR;
        let rows = self.mesh_rows_where(
            "linerate_mesh_results",
            "mesh = $1 AND src = $2 AND dst = $3 AND ($4::TEXT IS NULL OR test = $4)
             AND started_at >= $5 ORDER BY started_at, id",
            &[&q.mesh, &q.src, &q.dst, &q.test, &q.since],
        )?;
        let hourly = self
            .client
            .query(
                "SELECT mesh, src, dst, test, direction, protocol, hour, count, ok, failed,
                        skipped, figures, min, median, p95, max, mean
                 FROM linerate_mesh_hourly
                 WHERE mesh = $1 AND src = $2 AND dst = $3 AND ($4::TEXT IS NULL OR test = $4)
                   AND hour >= $5
                 ORDER BY hour, test, direction",
                &[&q.mesh, &q.src, &q.dst, &q.test, &since_hour],
            )
            .map_err(|e| self.error(e))?
            .iter()
            .map(aggregate_of)
            .collect();
        Ok(PairHistory { rows, hourly })
    }

    /// A stored run's document as it was printed.
    pub fn run_json(&mut self, id: i64) -> Result<String, StoreError> {
        let row = self
            .client
            .query_opt("SELECT document FROM linerate_runs WHERE id = $1", &[&id])
            .map_err(|e| self.error(e))?
            .ok_or_else(|| StoreError::NotFound {
                path: self.shown.clone(),
                id,
            })?;
        Ok(row.get(0))
    }
}
