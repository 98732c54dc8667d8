use super::*;
use crate::Store;
use linerate_model::clock::UnixTime;
use linerate_model::mesh_row::Outcome;
use std::sync::Mutex;

const STREAM: &str = include_str!("../testdata/tcp_stream.json");

fn row(n: u64) -> MeshRow {
    MeshRow {
        run_id: None,
        mesh: "lab".into(),
        src: "a".into(),
        dst: "b".into(),
        test: "tput".into(),
        direction: "forward".into(),
        protocol: "tcp".into(),
        cycle: n,
        started_at: 1000.0 + n as f64,
        ended_at: 1001.0 + n as f64,
        outcome: Outcome::Ok,
        headline: Some(9.4e9),
        headline_text: "9.40 Gbits/sec".into(),
    }
}

fn pending(n: u64, with_document: bool) -> Pending {
    Pending {
        row: row(n),
        document: with_document.then(|| (Document::from_json(STREAM).unwrap(), STREAM.into())),
        queued_at: UnixTime::now().seconds(),
    }
}

/// A store that refuses while told to, and keeps what it takes in order; a write that
/// is "lost on the way back" is kept and still reported failed (a commit whose answer
/// never came).
#[derive(Default)]
struct Flaky {
    refusing: bool,
    lose_answers: u32,
    kept: Vec<MeshRow>,
    documents: usize,
}

struct FlakyStore(Arc<Mutex<Flaky>>);

impl MeshArchive for FlakyStore {
    fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError> {
        let mut state = self.0.lock().unwrap();
        let refused = || StoreError::Archive {
            url: "flaky".into(),
            why: "connection refused".into(),
        };
        if state.refusing {
            return Err(refused());
        }
        // Kept once by its key, as the real stores do.
        let key = row.job_key();
        if !state.kept.iter().any(|r| r.job_key() == key) {
            state.kept.push(row.clone());
            state.documents += usize::from(run.is_some());
        }
        if state.lose_answers > 0 {
            state.lose_answers -= 1;
            return Err(refused());
        }
        Ok(Some(state.kept.len() as i64))
    }
    fn mesh_rows(&mut self, _mesh: &str, _latest: bool) -> Result<Vec<MeshRow>, StoreError> {
        Ok(self.0.lock().unwrap().kept.clone())
    }
    fn location(&self) -> String {
        "flaky".into()
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// While the store refuses, results wait in the file spool, in order; once it takes
/// writes again every one is written, in order and once, the one whose answer was lost
/// included; the counts say what happened.
#[test]
fn results_wait_while_the_store_refuses_and_are_written_once_in_order_after() {
    let dir = tempfile::tempdir().unwrap();
    let state = Arc::new(Mutex::new(Flaky::default()));
    let counts = Arc::new(SpoolCounts::default());
    let spool = Spool::open(Some(&dir.path().join("spool.db")), 1 << 30, counts.clone()).unwrap();
    let mut writer = Writer::start(
        Box::new(FlakyStore(state.clone())),
        spool,
        Duration::from_secs(5),
        None,
    )
    .unwrap();
    for n in 0..5 {
        let item = pending(n, true);
        let (document, json) = item.document.as_ref().unwrap();
        let id = writer
            .insert_mesh(&item.row, Some((document, json)))
            .unwrap();
        assert_eq!(
            id,
            Some(n as i64 + 1),
            "written at once while the store answers"
        );
    }
    state.lock().unwrap().refusing = true;
    for n in 5..25 {
        let item = pending(n, n % 2 == 0);
        let run = item.document.as_ref().map(|(d, j)| (d, j.as_str()));
        assert_eq!(writer.insert_mesh(&item.row, run).unwrap(), None);
    }
    wait_for("20 results in the spool", || {
        counts.waiting.load(Ordering::Relaxed) == 20
    });
    assert!(counts.write_failures.load(Ordering::Relaxed) >= 1);
    assert_eq!(counts.writing.load(Ordering::Relaxed), 0);
    assert!(counts.oldest_age_s(UnixTime::now().seconds()) >= 0.0);
    assert_eq!(state.lock().unwrap().kept.len(), 5, "nothing got through");
    {
        let mut state = state.lock().unwrap();
        state.refusing = false;
        state.lose_answers = 1;
    }
    wait_for("the spool to drain", || {
        counts.waiting.load(Ordering::Relaxed) == 0
    });
    // The writer marks the store writable just after the last result leaves the spool.
    wait_for("the store to be marked writable", || {
        counts.writing.load(Ordering::Relaxed) == 1
    });
    let state = state.lock().unwrap();
    let cycles: Vec<u64> = state.kept.iter().map(|r| r.cycle).collect();
    assert_eq!(cycles, (0..25).collect::<Vec<_>>(), "each once, in order");
    assert_eq!(state.documents, 5 + 10, "every document with its row");
    assert_eq!(counts.replayed.load(Ordering::Relaxed), 20);
    assert_eq!(counts.writing.load(Ordering::Relaxed), 1);
    assert_eq!(counts.dropped_results.load(Ordering::Relaxed), 0);
    drop(state);
    drop(writer);
}

/// What a coordinator killed mid-outage left in its spool file is written when it starts
/// again, before its past is read back.
#[test]
fn a_spool_left_by_a_killed_coordinator_is_written_first_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.db");
    let counts = Arc::new(SpoolCounts::default());
    {
        let mut spool = Spool::open(Some(&path), 1 << 30, counts.clone()).unwrap();
        for n in 0..3 {
            spool.push(pending(n, n == 1));
        }
        assert_eq!(spool.len(), 3);
        // Dropped without a writer: as a SIGKILL leaves it.
    }
    let state = Arc::new(Mutex::new(Flaky::default()));
    let spool = Spool::open(Some(&path), 1 << 30, counts.clone()).unwrap();
    assert_eq!(spool.len(), 3, "kept over the restart");
    let mut writer = Writer::start(
        Box::new(FlakyStore(state.clone())),
        spool,
        Duration::from_secs(5),
        None,
    )
    .unwrap();
    let past = writer.mesh_rows("lab", false).unwrap();
    assert_eq!(past.iter().map(|r| r.cycle).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(state.lock().unwrap().documents, 1);
    assert_eq!(counts.waiting.load(Ordering::Relaxed), 0);
}

/// At its bound the spool lets the oldest documents go first and keeps the rows; with
/// only rows left, the oldest rows go; each loss counted. In memory and in a file alike.
#[test]
fn a_full_spool_lets_the_oldest_documents_go_before_any_row() {
    let dir = tempfile::tempdir().unwrap();
    for file in [None, Some(dir.path().join("spool.db"))] {
        let counts = Arc::new(SpoolCounts::default());
        let one = pending(0, true).bytes();
        let bare = pending(0, false).bytes();
        // Room for three documents and a few rows.
        let bound = 3 * one + 4 * bare;
        let mut spool = Spool::open(file.as_deref(), bound, counts.clone()).unwrap();
        for n in 0..10 {
            spool.push(pending(n, true));
        }
        assert!(spool.bytes() <= bound, "{} > {bound}", spool.bytes());
        assert_eq!(spool.len(), 10, "{file:?}: every row kept");
        let dropped = counts.dropped_documents.load(Ordering::Relaxed);
        assert!(dropped >= 7, "{file:?}: {dropped}");
        assert_eq!(counts.dropped_results.load(Ordering::Relaxed), 0);
        // The newest kept whole, the oldest bare.
        let oldest = spool.oldest().unwrap();
        assert_eq!(oldest.row.cycle, 0);
        assert!(oldest.document.is_none(), "{file:?}");
        // Rows alone past the bound: the oldest go.
        let mut small = Spool::open(None, 3 * bare, counts.clone()).unwrap();
        for n in 0..5 {
            small.push(pending(n, false));
        }
        assert_eq!(small.len(), 3);
        assert_eq!(small.oldest().unwrap().row.cycle, 2);
        assert_eq!(counts.dropped_results.load(Ordering::Relaxed), 2);
    }
}

/// A job written twice to the SQLite store (a replay after a crash) is kept once, with
/// its first run.
#[test]
fn a_job_written_twice_is_kept_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("results.db")).unwrap();
    let document = Document::from_json(STREAM).unwrap();
    let first = store
        .insert_mesh(&row(1), Some((&document, STREAM)))
        .unwrap();
    let again = store
        .insert_mesh(&row(1), Some((&document, STREAM)))
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(store.mesh_rows("lab", false).unwrap().len(), 1);
    assert_eq!(store.list(&crate::Filter::default()).unwrap().len(), 1);
    // Another cycle of the same pair is another job.
    store.insert_mesh(&row(2), None).unwrap();
    assert_eq!(store.mesh_rows("lab", false).unwrap().len(), 2);
}

/// Through the writer: results handed over together are stored together, with their
/// run ids, and a restarted board's rows come back a pair at a time, each pair's newest
/// up to the bound, oldest first.
#[test]
fn the_writer_stores_a_batch_and_reads_each_pairs_newest_a_pair_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("results.db")).unwrap();
    let counts = Arc::new(SpoolCounts::default());
    let spool = Spool::open(None, 1 << 30, counts).unwrap();
    let mut writer = Writer::start(Box::new(store), spool, Duration::from_secs(5), None).unwrap();
    let document = Document::from_json(STREAM).unwrap();
    let rows: Vec<MeshRow> = (0..6)
        .map(|n| MeshRow {
            dst: if n % 2 == 0 { "b" } else { "c" }.into(),
            ..row(n)
        })
        .collect();
    let items: Vec<crate::MeshItem<'_>> = rows
        .iter()
        .map(|r| (r, (r.cycle == 0).then_some((&document, STREAM))))
        .collect();
    let ids = writer.insert_mesh_batch(&items).unwrap();
    assert_eq!(ids.len(), 6);
    assert!(
        ids[0].is_some() && ids[1..].iter().all(Option::is_none),
        "{ids:?}"
    );
    let mut pairs = Vec::new();
    writer
        .recent_rows_each("lab", 2, &mut |pair| {
            pairs.push(
                pair.iter()
                    .map(|r| (r.dst.clone(), r.cycle))
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            vec![("b".to_string(), 2), ("b".to_string(), 4)],
            vec![("c".to_string(), 3), ("c".to_string(), 5)],
        ]
    );
}
