use super::*;
use crate::migrations::{steps, Dialect};
use std::collections::BTreeMap;

const STREAM: &str = include_str!("testdata/tcp_stream.json");
const RR: &str = include_str!("testdata/tcp_rr.json");
const UDP: &str = include_str!("testdata/udp_stream.json");

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn store_in(dir: &tempfile::TempDir) -> (Store, PathBuf) {
    let path = dir.path().join("sub/dir/results.db");
    (Store::open(&path).expect("a new store opens"), path)
}

fn insert(store: &mut Store, json: &str) -> i64 {
    let document = Document::from_json(json).expect("a valid document");
    store
        .insert(&document, json, "linerate stream")
        .expect("stored")
}

#[test]
fn a_run_comes_back_exactly_as_stored() {
    let dir = temp();
    let (mut store, path) = store_in(&dir);
    assert!(path.exists(), "the directories and file are created");
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let id = insert(&mut store, STREAM);
    let run = store.get(id).unwrap();
    assert_eq!(run.json, STREAM, "the text is kept byte for byte");
    assert_eq!(run.document, Document::from_json(STREAM).unwrap());
    assert_eq!(run.row.test, "tcp_stream");
    assert_eq!(run.row.kind, "tcp_stream");
    assert_eq!(run.row.target, "loopback");
    assert_eq!(run.row.command, "linerate stream");
    let expected = run.document.headline().unwrap().1;
    assert_eq!(run.row.headline, Some(expected));
    assert!(run.row.headline_text.contains("bits/sec"), "{:?}", run.row);
}

/// Every document reads back whole: written again, it is the same text.
#[test]
fn documents_read_back_whole() {
    for text in [STREAM, RR, UDP] {
        let document = Document::from_json(text).unwrap();
        assert_eq!(document.to_json().unwrap(), text.trim_end());
    }
    let Document::Test(rr) = Document::from_json(RR).unwrap() else {
        panic!("a test document")
    };
    assert!(
        rr.summary.rr.is_some(),
        "the request/response figures are read"
    );
    let Document::Test(udp) = Document::from_json(UDP).unwrap() else {
        panic!("a test document")
    };
    assert!(udp.summary.udp.is_some(), "the datagram figures are read");
}

#[test]
fn listings_filter_and_put_the_newest_first() {
    let dir = temp();
    let (mut store, _) = store_in(&dir);
    let stream = insert(&mut store, STREAM);
    let rr = insert(&mut store, RR);
    let all = store.list(&Filter::default()).unwrap();
    // Both documents are real runs; the rr one started later.
    assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), [rr, stream]);
    let only_rr = store
        .list(&Filter {
            test: Some("tcp_rr".into()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(only_rr.len(), 1);
    assert_eq!(only_rr[0].id, rr);
    let limited = store
        .list(&Filter {
            limit: Some(1),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(limited.len(), 1);
    let later = store
        .list(&Filter {
            since: Some(all[0].started_at),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(later.len(), 1);
    let elsewhere = store
        .list(&Filter {
            target: Some("server1".into()),
            ..Filter::default()
        })
        .unwrap();
    assert!(elsewhere.is_empty());
}

#[test]
fn an_unknown_run_is_named() {
    let dir = temp();
    let (store, path) = store_in(&dir);
    let error = store.get(42).unwrap_err().to_string();
    assert!(error.contains("no run 42"), "{error}");
    assert!(error.contains(&path.display().to_string()), "{error}");
}

/// A database written by the first schema gains the second's columns, with older rows'
/// kinds filled in from their documents.
#[test]
fn a_version_one_database_is_migrated() {
    let dir = temp();
    let path = dir.path().join("v1.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; {} PRAGMA user_version = 1;",
            steps(Dialect::Sqlite)[0]
        ))
        .unwrap();
        conn.execute(
            "INSERT INTO runs (started_at, stored_at, test, target, headline, headline_text, document)
             VALUES (1.0, 2.0, 'tcp_rr', 'loopback', 5.0, '5 transactions/s', ?1)",
            [RR],
        )
        .unwrap();
    }
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let run = store.get(1).unwrap();
    assert_eq!(run.row.kind, "tcp_rr");
    assert_eq!(run.row.command, "");
    // The path was filled from the document: this run crossed none.
    assert_eq!(run.row.path, "direct");
    assert_eq!(run.json, RR);
    // New runs go in beside it.
    let id = insert(&mut store, STREAM);
    assert_eq!(store.list(&Filter::default()).unwrap().len(), 2);
    assert!(id > 1);
}

/// A mesh kept by the fourth schema, whose outcome was a "skipped:" prefix on the reason,
/// reads back with its outcomes typed: the prefix gone, its successes and failures as they
/// were, and a failure blaming nobody (its blame was not kept).
#[test]
fn a_version_four_mesh_gets_its_outcomes_from_its_reasons() {
    let dir = temp();
    let path = dir.path().join("v4.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; {} PRAGMA user_version = 4;",
            steps(Dialect::Sqlite)[..4].join("\n")
        ))
        .unwrap();
        for (started_at, ok, reason) in [
            (1.0, true, ""),
            (2.0, false, "connection refused"),
            (3.0, false, "skipped: host b is down after 1 failure(s)"),
        ] {
            conn.execute(
                "INSERT INTO mesh_results (mesh, src, dst, test, direction, protocol, cycle,
                     started_at, ended_at, ok, reason) VALUES
                     ('lab', 'a', 'b', 'tput', 'forward', 'tcp', 1, ?1, ?1, ?2, ?3)",
                params![started_at, ok, reason],
            )
            .unwrap();
        }
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let outcomes: Vec<Outcome> = store
        .mesh_rows("lab", false)
        .unwrap()
        .into_iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Ok,
            Outcome::Failed {
                blamed: None,
                reason: "connection refused".into()
            },
            Outcome::Skipped {
                reason: "host b is down after 1 failure(s)".into()
            },
        ]
    );
}

/// A failure's blamed host is kept beside its reason.
#[test]
fn a_failure_keeps_the_host_it_blames() {
    let dir = temp();
    let (mut store, _) = store_in(&dir);
    let failed = Outcome::Failed {
        blamed: Some("h2".into()),
        reason: "h2:7575: connection refused".into(),
    };
    let row = MeshRow {
        run_id: None,
        mesh: "lab".into(),
        src: "h1".into(),
        dst: "h2".into(),
        test: "lat".into(),
        direction: "forward".into(),
        protocol: "tcp".into(),
        cycle: 1,
        started_at: 1.0,
        ended_at: 2.0,
        outcome: failed.clone(),
        headline: None,
        headline_text: String::new(),
    };
    store.insert_mesh(&row, None).unwrap();
    assert_eq!(store.mesh_rows("lab", true).unwrap()[0].outcome, failed);
}

/// A migration that fails leaves the file at its old version, with nothing half done.
#[test]
fn a_failed_migration_changes_nothing() {
    let dir = temp();
    let path = dir.path().join("odd.db");
    {
        let conn = Connection::open(&path).unwrap();
        // Version 1, but with a column the second step adds: that step cannot apply.
        conn.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; {} ALTER TABLE runs ADD COLUMN command TEXT;
             PRAGMA user_version = 1;",
            steps(Dialect::Sqlite)[0]
        ))
        .unwrap();
    }
    let error = Store::open(&path)
        .err()
        .expect("the migration fails")
        .to_string();
    assert!(error.contains("command"), "{error}");
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1);
    let kind_columns: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'kind'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        kind_columns, 0,
        "the step's first statement was rolled back"
    );
}

#[test]
fn foreign_damaged_and_newer_files_are_refused() {
    let dir = temp();
    let foreign = dir.path().join("foreign.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('a');")
        .unwrap();
    let error = Store::open(&foreign).err().unwrap().to_string();
    assert!(error.contains("not a linerate results database"), "{error}");
    assert!(error.contains("foreign.db"), "{error}");
    // The other program's data is untouched.
    let rows: i64 = Connection::open(&foreign)
        .unwrap()
        .query_row("SELECT count(*) FROM users", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1);

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let error = Store::open(&garbage).err().unwrap().to_string();
    assert!(error.contains("damaged or not a database"), "{error}");
    assert_eq!(std::fs::read(&garbage).unwrap(), vec![0x5a; 8192]);

    let newer = dir.path().join("newer.db");
    Connection::open(&newer)
        .unwrap()
        .execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 99;"
        ))
        .unwrap();
    let error = Store::open(&newer).err().unwrap().to_string();
    assert!(
        error.contains("newer linerate (schema version 99"),
        "{error}"
    );
}

/// Several writers at once (as parallel test runs would be): every run lands, once.
#[test]
fn concurrent_writers_lose_nothing() {
    let dir = temp();
    let path = dir.path().join("shared.db");
    let writers: Vec<_> = (0..6)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).expect("opens beside the others");
                (0..15)
                    .map(|_| insert(&mut store, STREAM))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<i64> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("a writer finished"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 90);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.list(&Filter::default()).unwrap().len(), 90);
}

/// Runs over an emulated path list it in brief, and a listing filters by it.
#[test]
fn runs_are_listed_and_filtered_by_their_path() {
    let dir = temp();
    let (mut store, _) = store_in(&dir);
    let direct = insert(&mut store, STREAM);
    let mut doc: serde_json::Value = serde_json::from_str(STREAM).unwrap();
    doc["host"]["local"]["path"] = serde_json::json!({
        "emulator": "lab",
        "lab": "wan",
        "forward": {"delay_ms": 10.0, "loss_pct": 2.0},
        "reverse": {"delay_ms": 10.0, "loss_pct": 2.0},
        "seed": 1
    });
    let lossy = insert(&mut store, &doc.to_string());
    let rows = store.list(&Filter::default()).unwrap();
    let path_of = |id: i64| rows.iter().find(|r| r.id == id).unwrap().path.clone();
    assert_eq!(path_of(direct), "direct");
    assert_eq!(path_of(lossy), "lab wan: rtt +20 ms, loss 2% each way");
    let only = |text: &str| {
        store
            .list(&Filter {
                path: Some(text.into()),
                ..Filter::default()
            })
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(only("LOSS 2%"), [lossy]);
    assert_eq!(only("direct"), [direct]);
}

/// A mesh's rows: each kept with its run (the run listed under its pair), a skipped job
/// without one; `latest` keeps each pair and test's newest.
#[test]
fn mesh_rows_keep_their_runs_and_the_latest_per_pair() {
    let dir = temp();
    let (mut store, _) = store_in(&dir);
    let document = Document::from_json(STREAM).unwrap();
    let row = |src: &str, cycle: u64, started_at: f64, ok: bool| MeshRow {
        run_id: None,
        mesh: "lab".into(),
        src: src.into(),
        dst: "b".into(),
        test: "tput".into(),
        direction: "forward".into(),
        protocol: "tcp".into(),
        cycle,
        started_at,
        ended_at: started_at + 10.0,
        outcome: if ok {
            Outcome::Ok
        } else {
            Outcome::Skipped {
                reason: "host a is down".into(),
            }
        },
        headline: ok.then_some(9.4e9),
        headline_text: if ok {
            "9.40 Gbits/sec".into()
        } else {
            String::new()
        },
    };
    let first = store
        .insert_mesh(&row("a", 1, 100.0, true), Some((&document, STREAM)))
        .unwrap();
    let skipped = store.insert_mesh(&row("a", 2, 200.0, false), None).unwrap();
    let other = store
        .insert_mesh(&row("c", 1, 150.0, true), Some((&document, STREAM)))
        .unwrap();
    assert!(first.is_some() && other.is_some() && skipped.is_none());
    let all = store.mesh_rows("lab", false).unwrap();
    assert_eq!(all.iter().map(|r| r.cycle).collect::<Vec<_>>(), [1, 1, 2]);
    assert_eq!(all[0].run_id, first);
    let latest = store.mesh_rows("lab", true).unwrap();
    assert_eq!(latest.len(), 2);
    let from_a = latest.iter().find(|r| r.src == "a").unwrap();
    assert_eq!(from_a.cycle, 2);
    assert_eq!(
        from_a.outcome,
        Outcome::Skipped {
            reason: "host a is down".into()
        }
    );
    // The run is listed under its pair and the mesh that ran it.
    let run = store.get(first.unwrap()).unwrap();
    assert_eq!(run.row.target, "a -> b");
    assert_eq!(run.row.command, "mesh lab test tput cycle 1");
    assert!(store.mesh_rows("other", true).unwrap().is_empty());
    // A job the operator's stop cut short is kept as interrupted, and reads back so.
    let mut cut = row("c", 2, 300.0, false);
    cut.outcome = Outcome::Interrupted {
        reason: "the coordinator was stopped while it ran: 1 thread(s) stopped".into(),
    };
    store.insert_mesh(&cut, None).unwrap();
    let latest = store.mesh_rows("lab", true).unwrap();
    let from_c = latest.iter().find(|r| r.src == "c").unwrap();
    assert_eq!(from_c.outcome, cut.outcome);
}

/// Rows written together (one transaction) come back as written; each pair's newest is
/// the one `latest` reads, even when an older result arrives after it (a spool's replay),
/// and a replayed job is kept once; `recent_rows` gives each pair's newest N, oldest
/// first; a database of the version before the latest table gets it filled.
#[test]
fn a_batch_is_stored_whole_and_each_pairs_newest_is_read_through_the_latest_table() {
    let dir = temp();
    let (mut store, path) = store_in(&dir);
    let row = |src: &str, cycle: u64, started_at: f64| MeshRow {
        run_id: None,
        mesh: "lab".into(),
        src: src.into(),
        dst: "b".into(),
        test: "lat".into(),
        direction: "forward".into(),
        protocol: "tcp".into(),
        cycle,
        started_at,
        ended_at: started_at + 1.0,
        outcome: Outcome::Ok,
        headline: Some(cycle as f64),
        headline_text: format!("{cycle}"),
    };
    let document = Document::from_json(STREAM).unwrap();
    let written: Vec<MeshRow> = (1..=5)
        .flat_map(|cycle| {
            [
                row("a", cycle, cycle as f64 * 10.0),
                row("c", cycle, cycle as f64 * 10.0 + 1.0),
            ]
        })
        .collect();
    let items: Vec<crate::MeshItem<'_>> = written
        .iter()
        .map(|r| (r, (r.cycle == 5).then_some((&document, STREAM))))
        .collect();
    let ids = store.insert_mesh_batch(&items).unwrap();
    assert_eq!(
        ids.iter().filter(|id| id.is_some()).count(),
        2,
        "the two runs of cycle 5"
    );
    assert_eq!(store.mesh_rows("lab", false).unwrap().len(), 10);
    // An older result arrives late (cycle 0), and cycle 5 of a is replayed.
    store.insert_mesh(&row("a", 0, 1.0), None).unwrap();
    let replayed = store.insert_mesh(&row("a", 5, 50.0), None).unwrap();
    assert_eq!(
        replayed, ids[8],
        "a replay keeps the run it was written with"
    );
    assert_eq!(
        store.mesh_rows("lab", false).unwrap().len(),
        11,
        "the replay kept once"
    );
    let latest = store.mesh_rows("lab", true).unwrap();
    let cycles: Vec<(String, u64)> = latest.iter().map(|r| (r.src.clone(), r.cycle)).collect();
    assert_eq!(cycles, [("a".to_string(), 5), ("c".to_string(), 5)]);
    let recent = store.recent_rows("lab", 2).unwrap();
    let seen: Vec<(String, u64)> = recent.iter().map(|r| (r.src.clone(), r.cycle)).collect();
    assert_eq!(
        seen,
        [
            ("a".to_string(), 4),
            ("c".to_string(), 4),
            ("a".to_string(), 5),
            ("c".to_string(), 5)
        ]
    );
    // The step that made the table fills it from the rows a database already holds.
    drop(store);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("DROP TABLE mesh_latest; PRAGMA user_version = 8;")
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let again = store.mesh_rows("lab", true).unwrap();
    assert_eq!(again.iter().map(|r| r.cycle).collect::<Vec<_>>(), [5, 5]);
}

/// Retention: 60 days of a mesh's rows (two series, one every 30 minutes, some failed or
/// skipped, every fourth with its run) and plain runs, pruned to 14 days. Every hour
/// before the cutoff's is summed up, and each aggregate equals what the raw rows said
/// before they went (counted here from the rows, apart from the prune's own code); the
/// rows and their runs before it are gone, those after it all kept; a second prune finds
/// nothing to do and writes nothing again; a dry run counts without changing anything.
#[test]
// Long: 60 days seeded, then each thing a prune promises checked in turn against them.
fn a_prune_sums_up_the_hours_it_removes_and_keeps_the_rest() {
    use crate::prune::HOUR;
    let dir = temp();
    let (mut store, _) = store_in(&dir);
    // Thousands of one-row transactions: without waiting on the disk for each.
    store
        .conn
        .execute_batch("PRAGMA synchronous = OFF")
        .unwrap();
    let day = 86_400.0;
    let now = 1_795_000_000.0_f64;
    let start = now - 60.0 * day;
    let rows = seed_mesh(&mut store, "m", start);
    let old_plain = insert(&mut store, STREAM);
    store
        .conn
        .execute(
            "UPDATE runs SET started_at = ?1 WHERE id = ?2",
            params![start, old_plain],
        )
        .unwrap();
    let new_plain = insert(&mut store, UDP);
    store
        .conn
        .execute(
            "UPDATE runs SET started_at = ?1 WHERE id = ?2",
            params![now, new_plain],
        )
        .unwrap();
    let cutoff = now - 14.0 * day + 1234.0;
    let last_hour = (cutoff / HOUR).floor() * HOUR;
    // What the rows say, per series and hour, before the prune.
    let mut expected: BTreeMap<(String, i64), Vec<&MeshRow>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.started_at < last_hour) {
        let hour = (row.started_at / HOUR).floor() as i64;
        expected
            .entry((row.src.clone(), hour))
            .or_default()
            .push(row);
    }
    let dry = store.prune(cutoff, 100, true, &mut |_| {}).unwrap();
    let pruned_rows = rows.iter().filter(|r| r.started_at < last_hour).count() as u64;
    assert_eq!(dry.mesh_rows, pruned_rows);
    assert_eq!(
        store.mesh_rows("m", false).unwrap().len(),
        rows.len(),
        "a dry run changes nothing"
    );
    let mut hours_told = 0;
    let done = store
        .prune(cutoff, 100, false, &mut |p| hours_told = p.hours)
        .unwrap();
    assert_eq!(done.mesh_rows, pruned_rows);
    assert_eq!(done.aggregates, expected.len() as u64);
    assert_eq!(hours_told, done.hours);
    // The runs of the pruned rows (one in four) and the old plain run went.
    let pruned_runs = (0..(60 * 48))
        .filter(|i| i % 4 == 0 && start + *i as f64 * 1800.0 + 7.0 < last_hour)
        .count() as u64
        * 2;
    assert_eq!(done.runs, pruned_runs + 1);
    assert!(store.get(old_plain).is_err());
    assert!(store.get(new_plain).is_ok());
    let left = store.mesh_rows("m", false).unwrap();
    assert_eq!(left.len() as u64, rows.len() as u64 - pruned_rows);
    assert!(left.iter().all(|r| r.started_at >= last_hour));
    assert!(left
        .iter()
        .filter(|r| r.run_id.is_some())
        .all(|r| store.get(r.run_id.unwrap()).is_ok()));
    // Each aggregate, against the raw rows it replaced.
    let aggregates = store.mesh_hourly("m").unwrap();
    assert_aggregates_match(&aggregates, &expected);
    // Nothing left to do: a second prune writes nothing and removes nothing.
    let again = store.prune(cutoff, 100, false, &mut |_| {}).unwrap();
    assert_eq!(again, crate::prune::Pruned::default());
    assert_eq!(store.mesh_hourly("m").unwrap(), aggregates);
}

/// Two series ("a" and "b" to "c") of mesh `mesh`, a row every 30 minutes for 60 days from
/// `start`: some failed or skipped, every fourth with its run. The rows as written.
fn seed_mesh(store: &mut Store, mesh: &str, start: f64) -> Vec<MeshRow> {
    let document = Document::from_json(RR).unwrap();
    let mut rows = Vec::new();
    for i in 0..(60 * 48) {
        let at = start + i as f64 * 1800.0 + 7.0;
        for (s, src) in ["a", "b"].into_iter().enumerate() {
            let outcome = match (i + s) % 23 {
                0 => Outcome::Failed {
                    blamed: None,
                    reason: "refused".into(),
                },
                5 => Outcome::Skipped {
                    reason: "down".into(),
                },
                _ => Outcome::Ok,
            };
            let ok = outcome.is_ok();
            let row = MeshRow {
                run_id: None,
                mesh: mesh.into(),
                src: src.into(),
                dst: "c".into(),
                test: "lat".into(),
                direction: "forward".into(),
                protocol: "tcp".into(),
                cycle: i as u64,
                started_at: at,
                ended_at: at + 1.0,
                outcome,
                headline: ok.then(|| 0.001 + ((i * 7 + s * 3) % 17) as f64 * 1e-4),
                headline_text: String::new(),
            };
            rows.push(row.clone());
            let run = (i % 4 == 0).then_some((&document, RR));
            store.insert_mesh(&row, run).unwrap();
        }
    }
    rows
}

/// Each aggregate equals what the raw rows of its series and hour (`expected`, counted
/// here apart from the prune's own code) said, and there is one for each.
fn assert_aggregates_match(
    aggregates: &[crate::prune::Aggregate],
    expected: &BTreeMap<(String, i64), Vec<&MeshRow>>,
) {
    use crate::prune::{nearest_rank, HOUR};
    assert_eq!(aggregates.len(), expected.len());
    for a in aggregates {
        let raw = &expected[&(a.src.clone(), (a.hour / HOUR) as i64)];
        let ok: Vec<&&MeshRow> = raw.iter().filter(|r| r.outcome.is_ok()).collect();
        let mut values: Vec<f64> = ok.iter().filter_map(|r| r.headline).collect();
        values.sort_by(f64::total_cmp);
        assert_eq!(a.count, raw.len() as u64);
        assert_eq!(a.ok, ok.len() as u64);
        assert_eq!(
            a.skipped,
            raw.iter().filter(|r| r.outcome.name() == "skipped").count() as u64
        );
        assert_eq!(
            a.failed,
            raw.iter().filter(|r| r.outcome.name() == "failed").count() as u64
        );
        assert_eq!(a.figures, values.len() as u64);
        assert_eq!(a.min, values.first().copied());
        assert_eq!(a.max, values.last().copied());
        assert_eq!(a.median, nearest_rank(&values, 0.5));
        assert_eq!(a.p95, nearest_rank(&values, 0.95));
        if let Some(mean) = a.mean {
            let sum: f64 = values.iter().sum();
            assert!((mean - sum / values.len() as f64).abs() < 1e-12);
        }
        assert_eq!(
            (a.dst.as_str(), a.test.as_str(), a.direction.as_str()),
            ("c", "lat", "forward")
        );
    }
}

/// A mesh's retention, a step at a time as its coordinator applies it: the mesh's rows
/// past 14 days summed up by the hour and removed (each aggregate what its rows said),
/// the aggregates past 30 days removed too; another mesh's rows and the plain runs stay
/// whatever their age. Each step did a bounded amount.
#[test]
fn a_mesh_retention_step_by_step_keeps_its_span_and_touches_nothing_else() {
    use crate::prune::{RetainStep, HOUR};
    let dir = temp();
    let (mut store, _) = store_in(&dir);
    store
        .conn
        .execute_batch("PRAGMA synchronous = OFF")
        .unwrap();
    let day = 86_400.0;
    let now = 1_795_000_000.0_f64;
    let start = now - 60.0 * day;
    let rows = seed_mesh(&mut store, "m", start);
    let others = seed_mesh(&mut store, "other", start);
    let plain = insert(&mut store, STREAM);
    store
        .conn
        .execute(
            "UPDATE runs SET started_at = ?1 WHERE id = ?2",
            params![start, plain],
        )
        .unwrap();
    let (raw_before, hourly_before) = (now - 14.0 * day, now - 30.0 * day);
    let last_hour = (raw_before / HOUR).floor() * HOUR;
    let expected = by_source_and_hour(rows.iter().filter(|r| {
        r.started_at < last_hour && (r.started_at / HOUR).floor() * HOUR >= hourly_before
    }));
    // Until done, as a coordinator does it: first with the aggregates kept forever,
    // then with a span of 30 days for them.
    let mut retain = |hourly_before: Option<f64>| {
        let mut total = RetainStep::default();
        loop {
            let step = store
                .retain_step("m", raw_before, hourly_before, 3)
                .unwrap();
            assert!(step.mesh_rows <= 3 && step.hourly_removed <= 3 && step.hours <= 1);
            total.add(&step);
            if !step.more {
                return total;
            }
        }
    };
    let forever = retain(None);
    let gone = rows.iter().filter(|r| r.started_at < last_hour).count() as u64;
    assert_eq!(forever.mesh_rows, gone);
    assert_eq!(forever.hourly_removed, 0);
    let spanned = retain(Some(hourly_before));
    assert_eq!(spanned.mesh_rows, 0);
    assert_eq!(
        spanned.hourly_removed,
        forever.aggregates - expected.len() as u64,
        "the aggregates before 30 days went"
    );
    let left = store.mesh_rows("m", false).unwrap();
    assert_eq!(left.len() as u64, rows.len() as u64 - gone);
    assert!(left.iter().all(|r| r.started_at >= last_hour));
    // The aggregates within 30 days, each what its rows said.
    let aggregates = store.mesh_hourly("m").unwrap();
    assert!(aggregates.iter().all(|a| a.hour >= hourly_before));
    assert_aggregates_match(&aggregates, &expected);
    // Untouched: another mesh, and runs of no mesh.
    assert_eq!(store.mesh_rows("other", false).unwrap().len(), others.len());
    assert!(store.mesh_hourly("other").unwrap().is_empty());
    assert!(store.get(plain).is_ok());
    // Caught up: a step finds nothing.
    let again = store
        .retain_step("m", raw_before, Some(hourly_before), 3)
        .unwrap();
    assert_eq!(again, RetainStep::default());
    // A pair's hours over 30 days (the grid's plot over days): the stored aggregates
    // where the rows went, then the rows summed up by the hour, each as its rows said,
    // each hour once.
    let history = store
        .pair_history(&crate::prune::PairQuery {
            mesh: "m",
            src: "a",
            dst: "c",
            test: Some("lat"),
            since: hourly_before,
        })
        .unwrap();
    let hours = history.by_hour();
    assert!(hours.windows(2).all(|w| w[0].0.hour < w[1].0.hour));
    let kept: Vec<_> = hours.iter().filter(|h| !h.1).map(|h| h.0.clone()).collect();
    let stored: Vec<_> = aggregates.into_iter().filter(|a| a.src == "a").collect();
    assert_eq!(kept, stored);
    let summed: Vec<_> = hours.iter().filter(|h| h.1).map(|h| h.0.clone()).collect();
    let raw = by_source_and_hour(
        rows.iter()
            .filter(|r| r.src == "a" && r.started_at >= last_hour),
    );
    assert!(summed.iter().all(|a| a.hour >= last_hour));
    assert_aggregates_match(&summed, &raw);
}

/// Rows by their source and hour, as the hourly aggregates sum them up.
fn by_source_and_hour<'a>(
    rows: impl Iterator<Item = &'a MeshRow>,
) -> BTreeMap<(String, i64), Vec<&'a MeshRow>> {
    let mut by_hour: BTreeMap<(String, i64), Vec<&MeshRow>> = BTreeMap::new();
    for row in rows {
        let hour = (row.started_at / crate::prune::HOUR).floor() as i64;
        by_hour
            .entry((row.src.clone(), hour))
            .or_default()
            .push(row);
    }
    by_hour
}

/// The nearest-rank percentile: the smallest value with at least that share at or below.
#[test]
fn nearest_rank_percentiles() {
    use crate::prune::nearest_rank;
    let values: Vec<f64> = (1..=20).map(f64::from).collect();
    assert_eq!(nearest_rank(&values, 0.5), Some(10.0));
    assert_eq!(nearest_rank(&values, 0.95), Some(19.0));
    assert_eq!(nearest_rank(&values, 1.0), Some(20.0));
    assert_eq!(nearest_rank(&values[..1], 0.95), Some(1.0));
    assert_eq!(nearest_rank(&[], 0.5), None);
}
