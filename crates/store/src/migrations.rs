//! The results database's schema, as one list of steps with both of its dialects side by
//! side: SQLite (the default store) and PostgreSQL (the archive). A step one dialect does
//! not need (PostgreSQL's first step made at once what SQLite built in four) has `None`
//! there; each store's version is the number of its steps applied, so that databases made
//! before the list was one read as they did.

/// The database a step is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// One step of the schema, in each dialect that has it.
pub struct Migration {
    pub sqlite: Option<&'static str>,
    pub postgres: Option<&'static str>,
}

impl Migration {
    pub const fn of(&self, dialect: Dialect) -> Option<&'static str> {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        }
    }
}

/// Every step, oldest first: a step of a dialect takes its version `i` to `i + 1`.
pub const MIGRATIONS: &[Migration] = &[
    // runs with their documents.
    Migration {
        sqlite: Some(
            "CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at REAL NOT NULL,
        stored_at REAL NOT NULL,
        test TEXT NOT NULL,
        target TEXT NOT NULL,
        headline REAL,
        headline_text TEXT NOT NULL,
        document TEXT NOT NULL
    );",
        ),
        // PostgreSQL was first made at the SQLite store's step 4: no step of its own.
        postgres: None,
    },
    // what kind of run (a sweep names the test it swept), the command that made it, and an
    // index for time-ordered listings. Older rows get their kind from their documents.
    Migration {
        sqlite: Some(
            "ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT '';
     ALTER TABLE runs ADD COLUMN command TEXT NOT NULL DEFAULT '';
     UPDATE runs SET kind = CASE
         WHEN test = 'sweep' THEN 'sweep of ' || json_extract(document, '$.sweep_of')
         ELSE test END;
     CREATE INDEX runs_started_at ON runs (started_at);",
        ),
        // PostgreSQL was first made at the SQLite store's step 4: no step of its own.
        postgres: None,
    },
    // the path a run crossed, in brief ("lab NAME: rtt +20 ms, loss 2% each way" or "direct"),
    // for listings and filters. Older rows get theirs from their documents (`backfill_paths`).
    Migration {
        sqlite: Some("ALTER TABLE runs ADD COLUMN path TEXT;"),
        // PostgreSQL was first made at the SQLite store's step 4: no step of its own.
        postgres: None,
    },
    // a mesh's results with their labels, one row per job run (or skipped), the run's document
    // in `runs` when it ran; indexed for "pair x test over time".
    Migration {
        sqlite: Some(
            "CREATE TABLE mesh_results (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER REFERENCES runs (id),
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        direction TEXT NOT NULL,
        protocol TEXT NOT NULL,
        cycle INTEGER NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL NOT NULL,
        ok INTEGER NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        headline REAL,
        headline_text TEXT NOT NULL DEFAULT ''
     );
     CREATE INDEX mesh_results_pair ON mesh_results (mesh, src, dst, test, started_at);",
        ),
        // runs with their documents, and a mesh's rows with their labels, indexed for "pair x
        // test over time".
        postgres: Some(
            "CREATE TABLE linerate_runs (
        id BIGSERIAL PRIMARY KEY,
        started_at DOUBLE PRECISION NOT NULL,
        stored_at DOUBLE PRECISION NOT NULL,
        test TEXT NOT NULL,
        kind TEXT NOT NULL,
        target TEXT NOT NULL,
        headline DOUBLE PRECISION,
        headline_text TEXT NOT NULL,
        command TEXT NOT NULL,
        path TEXT,
        document TEXT NOT NULL
     );
     CREATE INDEX linerate_runs_started_at ON linerate_runs (started_at);
     CREATE TABLE linerate_mesh_results (
        id BIGSERIAL PRIMARY KEY,
        run_id BIGINT REFERENCES linerate_runs (id),
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        direction TEXT NOT NULL,
        protocol TEXT NOT NULL,
        cycle BIGINT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        ended_at DOUBLE PRECISION NOT NULL,
        ok BOOLEAN NOT NULL,
        reason TEXT NOT NULL,
        headline DOUBLE PRECISION,
        headline_text TEXT NOT NULL
     );
     CREATE INDEX linerate_mesh_pair ON linerate_mesh_results (mesh, src, dst, test, started_at);",
        ),
    },
    // how a mesh job ended as a column of its own (ok, failed or skipped) and the host a
    // failure blames, instead of a "skipped:" prefix on the reason. `ok` stays for readers of
    // the older schema. Older rows get theirs from their reasons; their blame was not kept.
    Migration {
        sqlite: Some(
            "ALTER TABLE mesh_results ADD COLUMN outcome TEXT NOT NULL DEFAULT 'failed'
         CHECK (outcome IN ('ok', 'failed', 'skipped'));
     ALTER TABLE mesh_results ADD COLUMN blamed TEXT;
     UPDATE mesh_results SET
         outcome = CASE WHEN ok THEN 'ok'
                        WHEN reason LIKE 'skipped: %' THEN 'skipped'
                        ELSE 'failed' END,
         reason = CASE WHEN NOT ok AND reason LIKE 'skipped: %' THEN substr(reason, 10)
                       ELSE reason END;",
        ),
        // how a mesh job ended as a column of its own and the host a failure blames (as the
        // SQLite store's step 5).
        postgres: Some(
            "ALTER TABLE linerate_mesh_results ADD COLUMN outcome TEXT NOT NULL DEFAULT 'failed'
         CHECK (outcome IN ('ok', 'failed', 'skipped'));
     ALTER TABLE linerate_mesh_results ADD COLUMN blamed TEXT;
     UPDATE linerate_mesh_results SET
         outcome = CASE WHEN ok THEN 'ok'
                        WHEN reason LIKE 'skipped: %' THEN 'skipped'
                        ELSE 'failed' END,
         reason = CASE WHEN NOT ok AND reason LIKE 'skipped: %' THEN substr(reason, 10)
                       ELSE reason END;",
        ),
    },
    // a mesh's hourly aggregates, kept when its raw rows are pruned (`prune`): per series and
    // hour, how many jobs and how they ended, and the figure's spread over the ok ones. And
    // the indexes that find a run's mesh row and an hour's rows.
    Migration {
        sqlite: Some(
            "CREATE TABLE mesh_hourly (
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        direction TEXT NOT NULL,
        protocol TEXT NOT NULL,
        hour REAL NOT NULL,
        count INTEGER NOT NULL,
        ok INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        skipped INTEGER NOT NULL,
        figures INTEGER NOT NULL,
        min REAL,
        median REAL,
        p95 REAL,
        max REAL,
        mean REAL,
        PRIMARY KEY (mesh, src, dst, test, direction, protocol, hour)
     );
     CREATE INDEX mesh_results_run ON mesh_results (run_id);
     CREATE INDEX mesh_results_started_at ON mesh_results (started_at);",
        ),
        // PostgreSQL was first made at the SQLite store's step 4: no step of its own.
        postgres: None,
    },
    // each mesh job's own key (MeshRow::job_key), unique, so that a result written twice (a
    // spool replayed after a crash) is kept once.
    Migration {
        sqlite: Some(
            "ALTER TABLE mesh_results ADD COLUMN job_key TEXT;
     CREATE UNIQUE INDEX mesh_results_job ON mesh_results (job_key) WHERE job_key IS NOT NULL;",
        ),
        // each mesh job's own key (MeshRow::job_key), unique, so that a result written twice
        // (a spool replayed, a commit whose answer was lost) is kept once.
        postgres: Some(
            "ALTER TABLE linerate_mesh_results ADD COLUMN job_key TEXT;
     CREATE UNIQUE INDEX linerate_mesh_job ON linerate_mesh_results (job_key);",
        ),
    },
    // a mesh's retention finds its oldest rows and its hours by the mesh.
    Migration {
        sqlite: Some(
            "CREATE INDEX mesh_results_mesh_started ON mesh_results (mesh, started_at);
     CREATE INDEX mesh_hourly_mesh_hour ON mesh_hourly (mesh, hour);",
        ),
        // retention, as the SQLite store's steps 6 and 8: each series' hours summed up before
        // their rows go, and the indexes that find a mesh's oldest rows, a run's mesh row (a
        // run's removal checks it) and a mesh's hours.
        postgres: Some(
            "CREATE TABLE linerate_mesh_hourly (
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        direction TEXT NOT NULL,
        protocol TEXT NOT NULL,
        hour DOUBLE PRECISION NOT NULL,
        count BIGINT NOT NULL,
        ok BIGINT NOT NULL,
        failed BIGINT NOT NULL,
        skipped BIGINT NOT NULL,
        figures BIGINT NOT NULL,
        min DOUBLE PRECISION,
        median DOUBLE PRECISION,
        p95 DOUBLE PRECISION,
        max DOUBLE PRECISION,
        mean DOUBLE PRECISION,
        PRIMARY KEY (mesh, src, dst, test, direction, protocol, hour)
     );
     CREATE INDEX linerate_mesh_hourly_hour ON linerate_mesh_hourly (mesh, hour);
     CREATE INDEX linerate_mesh_started ON linerate_mesh_results (mesh, started_at);
     CREATE INDEX linerate_mesh_run ON linerate_mesh_results (run_id);",
        ),
    },
    // each pair's newest row, kept as rows are written, so that a mesh's latest results (`mesh
    // status`, a coordinator's restart) are read in time proportional to its pairs, not to the
    // months of rows behind them. Filled from the rows there are.
    Migration {
        sqlite: Some(
            "CREATE TABLE mesh_latest (
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        result_id INTEGER NOT NULL,
        started_at REAL NOT NULL,
        PRIMARY KEY (mesh, src, dst, test)
     ) WITHOUT ROWID;
     INSERT INTO mesh_latest (mesh, src, dst, test, result_id, started_at)
        SELECT mesh, src, dst, test, id, MAX(started_at) FROM mesh_results
        GROUP BY mesh, src, dst, test;",
        ),
        // each pair's newest row, as the SQLite store's step 9.
        postgres: Some(
            "CREATE TABLE linerate_mesh_latest (
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        result_id BIGINT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (mesh, src, dst, test)
     );
     INSERT INTO linerate_mesh_latest (mesh, src, dst, test, result_id, started_at)
        SELECT DISTINCT ON (mesh, src, dst, test) mesh, src, dst, test, id, started_at
        FROM linerate_mesh_results ORDER BY mesh, src, dst, test, started_at DESC, id DESC;",
        ),
    },
    // the newest row's columns in the latest table, so that `mesh status` reads that table
    // alone (19,800 probes into a ten-million-row table took 100 ms); a pair whose newest row
    // retention removed has none.
    Migration {
        // SQLite reads the latest table's rows through their ids: no step.
        sqlite: None,
        postgres: Some(
            "ALTER TABLE linerate_mesh_latest
        ADD COLUMN run_id BIGINT, ADD COLUMN direction TEXT, ADD COLUMN protocol TEXT,
        ADD COLUMN cycle BIGINT, ADD COLUMN ended_at DOUBLE PRECISION, ADD COLUMN outcome TEXT,
        ADD COLUMN reason TEXT, ADD COLUMN blamed TEXT, ADD COLUMN headline DOUBLE PRECISION,
        ADD COLUMN headline_text TEXT;
     UPDATE linerate_mesh_latest AS l SET run_id = r.run_id, direction = r.direction,
        protocol = r.protocol, cycle = r.cycle, ended_at = r.ended_at, outcome = r.outcome,
        reason = r.reason, blamed = r.blamed, headline = r.headline,
        headline_text = r.headline_text
        FROM linerate_mesh_results AS r WHERE r.id = l.result_id;
     DELETE FROM linerate_mesh_latest WHERE outcome IS NULL;",
        ),
    },
    // 'interrupted' among the outcomes (a job the operator's stop cut short, kept and marked,
    // not a failure). SQLite cannot widen a CHECK in place: the table is made again with it,
    // its rows (ids included) and indexes as they were.
    Migration {
        sqlite: Some(
            "CREATE TABLE mesh_results_10 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER REFERENCES runs (id),
        mesh TEXT NOT NULL,
        src TEXT NOT NULL,
        dst TEXT NOT NULL,
        test TEXT NOT NULL,
        direction TEXT NOT NULL,
        protocol TEXT NOT NULL,
        cycle INTEGER NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL NOT NULL,
        ok INTEGER NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        headline REAL,
        headline_text TEXT NOT NULL DEFAULT '',
        outcome TEXT NOT NULL DEFAULT 'failed'
            CHECK (outcome IN ('ok', 'failed', 'skipped', 'interrupted')),
        blamed TEXT,
        job_key TEXT
     );
     INSERT INTO mesh_results_10 (id, run_id, mesh, src, dst, test, direction, protocol,
            cycle, started_at, ended_at, ok, reason, headline, headline_text, outcome,
            blamed, job_key)
        SELECT id, run_id, mesh, src, dst, test, direction, protocol, cycle, started_at,
            ended_at, ok, reason, headline, headline_text, outcome, blamed, job_key
        FROM mesh_results;
     DROP TABLE mesh_results;
     ALTER TABLE mesh_results_10 RENAME TO mesh_results;
     CREATE INDEX mesh_results_pair ON mesh_results (mesh, src, dst, test, started_at);
     CREATE INDEX mesh_results_run ON mesh_results (run_id);
     CREATE INDEX mesh_results_started_at ON mesh_results (started_at);
     CREATE UNIQUE INDEX mesh_results_job ON mesh_results (job_key) WHERE job_key IS NOT NULL;
     CREATE INDEX mesh_results_mesh_started ON mesh_results (mesh, started_at);",
        ),
        // 'interrupted' among the outcomes (as the SQLite store's step 10). The column's CHECK
        // was added with the column in step 2, under PostgreSQL's name for it.
        postgres: Some(
            "ALTER TABLE linerate_mesh_results
        DROP CONSTRAINT IF EXISTS linerate_mesh_results_outcome_check;
     ALTER TABLE linerate_mesh_results ADD CONSTRAINT linerate_mesh_results_outcome_check
        CHECK (outcome IN ('ok', 'failed', 'skipped', 'interrupted'));",
        ),
    },
];

/// How many steps a dialect has: the schema version its store writes.
pub const fn version(dialect: Dialect) -> i64 {
    let mut count = 0;
    let mut i = 0;
    while i < MIGRATIONS.len() {
        if MIGRATIONS[i].of(dialect).is_some() {
            count += 1;
        }
        i += 1;
    }
    count
}

/// A dialect's steps in order: `steps(d)[i]` takes its version `i` to `i + 1`.
pub fn steps(dialect: Dialect) -> Vec<&'static str> {
    MIGRATIONS.iter().filter_map(|m| m.of(dialect)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_keeps_the_versions_its_databases_were_made_with() {
        // Ten SQLite steps and seven PostgreSQL ones had been applied to databases in use
        // when the two lists became one: their numbering must not move.
        assert_eq!(version(Dialect::Sqlite), 10);
        assert_eq!(version(Dialect::Postgres), 7);
        let sqlite = steps(Dialect::Sqlite);
        assert!(sqlite[0].starts_with("CREATE TABLE runs ("));
        assert!(sqlite[3].starts_with("CREATE TABLE mesh_results ("));
        assert!(sqlite[9].starts_with("CREATE TABLE mesh_results_10 ("));
        let postgres = steps(Dialect::Postgres);
        assert!(postgres[0].starts_with("CREATE TABLE linerate_runs ("));
        assert!(postgres[5].starts_with("ALTER TABLE linerate_mesh_latest"));
        assert!(postgres[6].contains("'interrupted'"));
    }
}
