//! A mesh's results on their way to the store, kept when the store cannot take them.
//!
//! The coordinator hands each result to a [`Writer`]: a thread of its own that owns the
//! store's connection, so that a slow archive never holds up the schedule. While the
//! store answers, a result is written at once and the coordinator gets its run id. When
//! a write fails (PostgreSQL down, slow or refusing; the disk under SQLite full), that
//! result and every one after it go to the [`Spool`] in order, and the writer tries the
//! store again after 1 s, 2 s, 4 s... up to 30 s, replaying the spool oldest first, each
//! result once: a store keeps a job under its own key (`MeshRow::job_key`), so a result
//! written just before a crash and replayed after it is not kept twice.
//!
//! The spool is a SQLite file next to the coordinator (kept over a restart, and replayed
//! before anything else when the coordinator starts again), or memory where there is no
//! file (the store is the SQLite file itself, or the spool's own disk is full). It is
//! bounded in bytes: at its bound the oldest results' documents go first, then, where
//! only rows are left, the oldest rows; each loss is counted and said.

use crate::mesh_columns::{mesh_row, MESH_COLUMNS};
use crate::prune::{PairHistory, PairQuery, RetainStep};
use crate::{MeshArchive, StoreError};
use linerate_model::clock::UnixTime;
use linerate_model::mesh_row::{MeshRow, StoreCounts};
use linerate_report::document::Document;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A result waiting to be written: its row and its document (parsed, and as text).
#[derive(Debug, Clone)]
pub struct Pending {
    pub row: MeshRow,
    pub document: Option<(Document, String)>,
    /// When it was handed over (Unix time).
    pub queued_at: f64,
}

impl Pending {
    /// What it takes in the spool, about: its texts and a row's fixed part.
    fn bytes(&self) -> u64 {
        row_bytes(&self.row)
            + self
                .document
                .as_ref()
                .map_or(0, |(_, json)| json.len() as u64)
    }
}

fn row_bytes(row: &MeshRow) -> u64 {
    (row.mesh.len()
        + row.src.len()
        + row.dst.len()
        + row.test.len()
        + row.direction.len()
        + row.protocol.len()
        + row.outcome.reason().len()
        + row.outcome.blamed().map_or(0, str::len)
        + row.headline_text.len()
        + 64) as u64
}

/// What the spool and the writer did, read by the metrics at each scrape.
#[derive(Debug, Default)]
pub struct SpoolCounts {
    /// Results waiting in the spool now, and their bytes.
    pub waiting: AtomicU64,
    pub waiting_bytes: AtomicU64,
    /// The oldest waiting result's hand-over time (f64 bits; 0 when none waits).
    pub oldest_at: AtomicU64,
    /// Writes the store refused or failed (each try counts).
    pub write_failures: AtomicU64,
    /// Results written from the spool.
    pub replayed: AtomicU64,
    /// Documents let go at the spool's bound (their rows kept).
    pub dropped_documents: AtomicU64,
    /// Results let go whole: at the spool's bound with no document left to let go, or
    /// handed over while the writer's queue was full.
    pub dropped_results: AtomicU64,
    /// 1 while the store takes writes, 0 while results wait for it.
    pub writing: AtomicU64,
}

impl SpoolCounts {
    pub fn oldest_age_s(&self, now: f64) -> f64 {
        let at = f64::from_bits(self.oldest_at.load(Ordering::Relaxed));
        if at > 0.0 {
            (now - at).max(0.0)
        } else {
            0.0
        }
    }
}

/// The most a memory spool holds, whatever the file's bound: the coordinator's memory is
/// not the place for a long outage.
const MEMORY_BOUND: u64 = 64 << 20;

/// Results in order, oldest first: those in the file before those in memory.
pub struct Spool {
    file: Option<SpoolFile>,
    memory: VecDeque<Pending>,
    /// Items of `memory` before this index hold no document.
    memory_bare: usize,
    memory_bytes: u64,
    bound: u64,
    counts: Arc<SpoolCounts>,
    /// Said once: the file failed and memory is used.
    told_file_failed: bool,
}

struct SpoolFile {
    conn: Connection,
    path: String,
    len: u64,
    bytes: u64,
}

const SPOOL_SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS spooled (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        queued_at REAL NOT NULL,
        bytes INTEGER NOT NULL,
        mesh TEXT NOT NULL, src TEXT NOT NULL, dst TEXT NOT NULL, test TEXT NOT NULL,
        direction TEXT NOT NULL, protocol TEXT NOT NULL, cycle INTEGER NOT NULL,
        started_at REAL NOT NULL, ended_at REAL NOT NULL,
        outcome TEXT NOT NULL, reason TEXT NOT NULL, blamed TEXT,
        headline REAL, headline_text TEXT NOT NULL,
        document TEXT
    );
    CREATE INDEX IF NOT EXISTS spooled_documents ON spooled (seq) WHERE document IS NOT NULL;";

impl SpoolFile {
    fn open(path: &Path) -> Result<SpoolFile, StoreError> {
        let shown = path.display().to_string();
        let sqlite = |cause| StoreError::Sqlite {
            path: shown.clone(),
            cause,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|cause| StoreError::Directory {
                dir: dir.display().to_string(),
                cause,
            })?;
        }
        let conn = Connection::open(path).map_err(sqlite)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(sqlite)?;
        let _ = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0));
        conn.execute_batch(SPOOL_SCHEMA).map_err(sqlite)?;
        let (len, bytes): (i64, i64) = conn
            .query_row(
                "SELECT count(*), coalesce(sum(bytes), 0) FROM spooled",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sqlite)?;
        Ok(SpoolFile {
            conn,
            path: shown,
            len: len as u64,
            bytes: bytes as u64,
        })
    }

    fn push(&mut self, item: &Pending) -> rusqlite::Result<()> {
        let row = &item.row;
        self.conn.execute(
            "INSERT INTO spooled (queued_at, bytes, mesh, src, dst, test, direction, protocol,
                 cycle, started_at, ended_at, outcome, reason, blamed, headline, headline_text,
                 document)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            params![
                item.queued_at,
                item.bytes() as i64,
                row.mesh,
                row.src,
                row.dst,
                row.test,
                row.direction,
                row.protocol,
                row.cycle as i64,
                row.started_at,
                row.ended_at,
                row.outcome.name(),
                row.outcome.reason(),
                row.outcome.blamed(),
                row.headline.filter(|v| v.is_finite()),
                row.headline_text,
                item.document.as_ref().map(|(_, json)| json.as_str()),
            ],
        )?;
        self.len += 1;
        self.bytes += item.bytes();
        Ok(())
    }

    /// The oldest item and its sequence number.
    fn oldest(&self) -> rusqlite::Result<Option<(i64, Pending)>> {
        self.conn
            .query_row(
                &format!("SELECT seq, queued_at, {MESH_COLUMNS}, document FROM spooled ORDER BY seq LIMIT 1"),
                [],
                |r| {
                    let json: Option<String> = r.get(16)?;
                    // A document this build cannot read back goes without it: the row
                    // is what a mesh is followed by.
                    let document =
                        json.and_then(|json| Document::from_json(&json).ok().map(|d| (d, json)));
                    Ok((
                        r.get(0)?,
                        Pending {
                            queued_at: r.get(1)?,
                            row: mesh_row(r, 2, None)?,
                            document,
                        },
                    ))
                },
            )
            .optional()
    }

    /// The oldest item's sequence number and hand-over time, without reading it.
    fn head(&self) -> rusqlite::Result<Option<(i64, f64)>> {
        self.conn
            .query_row(
                "SELECT seq, queued_at FROM spooled ORDER BY seq LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
    }

    fn remove(&mut self, seq: i64) -> rusqlite::Result<()> {
        let bytes: Option<i64> = self
            .conn
            .query_row(
                "DELETE FROM spooled WHERE seq = ?1 RETURNING bytes",
                params![seq],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(bytes) = bytes {
            self.len = self.len.saturating_sub(1);
            self.bytes = self.bytes.saturating_sub(bytes as u64);
        }
        Ok(())
    }

    /// Lets the oldest document go (its row stays); false when none is left.
    fn drop_oldest_document(&mut self) -> rusqlite::Result<bool> {
        let freed: Option<i64> = self
            .conn
            .query_row(
                "UPDATE spooled SET document = NULL, bytes = bytes - length(CAST(document AS BLOB))
                 WHERE seq = (SELECT seq FROM spooled WHERE document IS NOT NULL ORDER BY seq LIMIT 1)
                 RETURNING ?1",
                params![0],
                |r| r.get(0),
            )
            .optional()?;
        if freed.is_some() {
            let bytes: i64 =
                self.conn
                    .query_row("SELECT coalesce(sum(bytes), 0) FROM spooled", [], |r| {
                        r.get(0)
                    })?;
            self.bytes = bytes as u64;
        }
        Ok(freed.is_some())
    }
}

impl Spool {
    /// A spool in `file` (created when missing; what an earlier run left in it comes
    /// first), or in memory only; at most `bound` bytes.
    pub fn open(
        file: Option<&Path>,
        bound: u64,
        counts: Arc<SpoolCounts>,
    ) -> Result<Spool, StoreError> {
        let file = file.map(SpoolFile::open).transpose()?;
        let spool = Spool {
            file,
            memory: VecDeque::new(),
            memory_bare: 0,
            memory_bytes: 0,
            bound,
            counts,
            told_file_failed: false,
        };
        spool.publish();
        Ok(spool)
    }

    pub fn len(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.len) + self.memory.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.bytes) + self.memory_bytes
    }

    /// Where it is kept, for messages.
    pub fn place(&self) -> String {
        match &self.file {
            Some(file) => file.path.clone(),
            None => "memory".into(),
        }
    }

    /// Keeps `item` after every other; at the bound, the oldest documents go first.
    pub fn push(&mut self, item: Pending) {
        let to_file = self.memory.is_empty() && self.file.is_some();
        let mut item = Some(item);
        if to_file {
            let file = self.file.as_mut().expect("checked above");
            if let Err(e) = file.push(item.as_ref().expect("set above")) {
                if !self.told_file_failed {
                    self.told_file_failed = true;
                    eprintln!(
                        "linerate mesh: the spool {} cannot take more ({e}); results wait in memory (at most {} MiB) until it can",
                        file.path,
                        MEMORY_BOUND >> 20
                    );
                }
            } else {
                item = None;
            }
        }
        if let Some(item) = item {
            self.memory_bytes += item.bytes();
            self.memory.push_back(item);
        }
        self.keep_within_bound();
        self.publish();
    }

    /// The oldest waiting result.
    pub fn oldest(&self) -> Option<Pending> {
        if let Some(file) = self.file.as_ref().filter(|f| f.len > 0) {
            if let Ok(Some((_, item))) = file.oldest() {
                return Some(item);
            }
        }
        self.memory.front().cloned()
    }

    /// Forgets the oldest waiting result (it was written).
    pub fn remove_oldest(&mut self) {
        if let Some(file) = self.file.as_mut().filter(|f| f.len > 0) {
            if let Ok(Some((seq, _))) = file.head() {
                if file.remove(seq).is_ok() {
                    self.publish();
                    return;
                }
            }
        }
        if let Some(item) = self.memory.pop_front() {
            self.memory_bytes = self.memory_bytes.saturating_sub(item.bytes());
            self.memory_bare = self.memory_bare.saturating_sub(1);
        }
        if self.memory.is_empty() {
            self.told_file_failed = false;
        }
        self.publish();
    }

    fn keep_within_bound(&mut self) {
        while self.bytes() > self.bound || self.memory_bytes > MEMORY_BOUND.min(self.bound) {
            let memory_over = self.memory_bytes > MEMORY_BOUND.min(self.bound);
            if !memory_over {
                if let Some(file) = self.file.as_mut() {
                    if file.drop_oldest_document().unwrap_or(false) {
                        self.counts
                            .dropped_documents
                            .fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
            }
            if self.drop_oldest_memory_document() {
                self.counts
                    .dropped_documents
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Rows only: the oldest goes.
            let before = self.len();
            if memory_over || self.file.as_ref().is_none_or(|f| f.len == 0) {
                if let Some(item) = self.memory.pop_front() {
                    self.memory_bytes = self.memory_bytes.saturating_sub(item.bytes());
                    self.memory_bare = self.memory_bare.saturating_sub(1);
                }
            } else {
                self.remove_oldest();
            }
            if self.len() == before {
                break;
            }
            self.counts.dropped_results.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn drop_oldest_memory_document(&mut self) -> bool {
        while self.memory_bare < self.memory.len() {
            let item = &mut self.memory[self.memory_bare];
            self.memory_bare += 1;
            if let Some((_, json)) = item.document.take() {
                self.memory_bytes = self.memory_bytes.saturating_sub(json.len() as u64);
                return true;
            }
        }
        false
    }

    fn publish(&self) {
        let c = &self.counts;
        c.waiting.store(self.len(), Ordering::Relaxed);
        c.waiting_bytes.store(self.bytes(), Ordering::Relaxed);
        // The time alone: reading the whole item would parse its document.
        let in_file = self
            .file
            .as_ref()
            .filter(|f| f.len > 0)
            .and_then(|f| f.head().ok().flatten())
            .map(|(_, at)| at);
        let oldest = in_file
            .or_else(|| self.memory.front().map(|p| p.queued_at))
            .unwrap_or(0.0);
        c.oldest_at.store(oldest.to_bits(), Ordering::Relaxed);
    }
}

/// What the writer thread is asked.
enum Request {
    /// Results to write together (one transaction), in order; the answer holds their
    /// run ids.
    Insert {
        items: Vec<Pending>,
        reply: mpsc::Sender<Vec<Option<i64>>>,
    },
    Rows {
        mesh: String,
        latest: bool,
        reply: mpsc::Sender<Result<Vec<MeshRow>, StoreError>>,
    },
    /// Each pair's newest rows, a message a pair (bounded: a large mesh's history is
    /// never all in memory), then the answer's end (the sender dropped), or an error.
    Recent {
        mesh: String,
        per_pair: usize,
        reply: mpsc::SyncSender<Result<Vec<MeshRow>, StoreError>>,
    },
    /// A stored run's document.
    RunJson {
        id: i64,
        reply: mpsc::Sender<Result<Option<String>, StoreError>>,
    },
    /// A pair's history (a [`StoreReader`]'s question: the grid's long plot).
    History {
        query: OwnedPairQuery,
        reply: mpsc::Sender<Result<PairHistory, StoreError>>,
    },
    /// The end: what waits is written once and the thread ends (readers may still hold
    /// senders, so the channel's end alone does not say it).
    Stop,
}

/// A [`PairQuery`] that can travel to the writer's thread.
#[derive(Debug, Clone)]
struct OwnedPairQuery {
    mesh: String,
    src: String,
    dst: String,
    test: Option<String>,
    since: f64,
}

/// Reads through a [`Writer`]'s thread from anywhere (the metrics listener's grid): the
/// question waits its turn between writes, so that the store has one connection and a
/// reader sees what was handed over before it asked. Answers nothing once the writer
/// has stopped.
#[derive(Clone)]
pub struct StoreReader {
    queue: SyncSender<Request>,
    location: String,
}

/// The longest a reader waits for its answer (a store that hangs).
const READ_WAIT: Duration = Duration::from_secs(10);

impl StoreReader {
    /// A pair's rows since `query.since` and the hourly aggregates before them.
    pub fn pair_history(&self, query: &PairQuery<'_>) -> Result<PairHistory, StoreError> {
        let stopped = || StoreError::Archive {
            url: self.location.clone(),
            why: "the store's writer stopped".into(),
        };
        let (reply, answer) = mpsc::channel();
        let query = OwnedPairQuery {
            mesh: query.mesh.to_string(),
            src: query.src.to_string(),
            dst: query.dst.to_string(),
            test: query.test.map(str::to_string),
            since: query.since,
        };
        self.queue
            .try_send(Request::History { query, reply })
            .map_err(|e| match e {
                TrySendError::Full(_) => StoreError::Archive {
                    url: self.location.clone(),
                    why: format!("{QUEUE} requests wait for the store's writer"),
                },
                TrySendError::Disconnected(_) => stopped(),
            })?;
        match answer.recv_timeout(READ_WAIT) {
            Ok(found) => found,
            Err(RecvTimeoutError::Timeout) => Err(StoreError::Archive {
                url: self.location.clone(),
                why: format!("no answer within {} s", READ_WAIT.as_secs()),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(stopped()),
        }
    }
}

/// Results handed over and not yet taken by the writer, at most: beyond it (the store
/// hangs without failing) a result is dropped and counted.
const QUEUE: usize = 4096;
/// The first wait before the store is tried again, and the longest.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// How often a long outage is said again.
const SAY_AGAIN: Duration = Duration::from_secs(60);
/// Spooled results written in one go before the writer looks at its queue again.
const REPLAY_BATCH: usize = 256;

/// How often a mesh's retention looks for work once it has caught up.
const RETAIN_EVERY: Duration = Duration::from_secs(600);
/// Rows a retention step removes at most: one short transaction.
const RETAIN_BATCH: usize = 500;

/// A mesh's `[retention]`, applied by its writer between writes: rows older than `raw_s`
/// summed up by the hour and removed, aggregates older than `hourly_s` removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    pub mesh: String,
    pub raw_s: f64,
    pub hourly_s: Option<f64>,
}

/// A store behind a thread and a spool: [`MeshArchive`] for the coordinator.
pub struct Writer {
    queue: Option<SyncSender<Request>>,
    counts: Arc<SpoolCounts>,
    location: String,
    /// How long the coordinator waits for a result's run id.
    wait: Duration,
    /// The answer to a result not written in time: until it comes, the writer is behind
    /// (the store is slow) and results are handed over without waiting.
    behind: Option<mpsc::Receiver<Vec<Option<i64>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer over `store` with `spool`; what the spool holds from before is
    /// written first.
    pub fn start(
        store: Box<dyn MeshArchive + Send>,
        spool: Spool,
        wait: Duration,
        retention: Option<Retention>,
    ) -> std::io::Result<Writer> {
        let (queue, requests) = mpsc::sync_channel(QUEUE);
        let counts = spool.counts.clone();
        counts
            .writing
            .store(u64::from(spool.is_empty()), Ordering::Relaxed);
        let location = store.location();
        let mut thread = WriterThread {
            failing: None,
            retry_at: (!spool.is_empty()).then(Instant::now),
            backoff: FIRST_RETRY,
            said_at: None,
            store,
            spool,
            retention,
            retain_at: Instant::now(),
            pass: RetainStep::default(),
        };
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || thread.run(requests))?;
        Ok(Writer {
            queue: Some(queue),
            counts,
            location,
            wait,
            behind: None,
            thread: Some(thread),
        })
    }

    pub fn counts(&self) -> Arc<SpoolCounts> {
        self.counts.clone()
    }

    /// A handle that reads through this writer from another thread.
    pub fn reader(&self) -> StoreReader {
        StoreReader {
            queue: self.queue.clone().expect("set until drop"),
            location: self.location.clone(),
        }
    }

    /// The counts as the metrics read them.
    pub fn snapshot(counts: &SpoolCounts) -> StoreCounts {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreCounts {
            waiting: load(&counts.waiting),
            waiting_bytes: load(&counts.waiting_bytes),
            oldest_waiting_s: counts.oldest_age_s(UnixTime::now().seconds()),
            writing: load(&counts.writing) == 1,
            write_failures: load(&counts.write_failures),
            replayed: load(&counts.replayed),
            dropped_documents: load(&counts.dropped_documents),
            dropped_results: load(&counts.dropped_results),
        }
    }
}

impl Writer {
    /// Hands `items` to the writer thread, to be written together, and waits for their
    /// run ids for a while; written later (or spooled) when the store is slow, ids
    /// unknown then.
    fn hand_over(&mut self, items: Vec<Pending>) -> Result<Vec<Option<i64>>, StoreError> {
        let count = items.len();
        let unknown = || vec![None; count];
        let (reply, answer) = mpsc::channel();
        let queue = self.queue.as_ref().expect("set until drop");
        match queue.try_send(Request::Insert { items, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let before = self
                    .counts
                    .dropped_results
                    .fetch_add(count as u64, Ordering::Relaxed);
                let n = before + count as u64;
                if (before + 1..=n).any(u64::is_power_of_two) {
                    eprintln!(
                        "linerate mesh: {} has not taken a result for a long while and {QUEUE} hand-overs wait for it; {n} result(s) dropped so far",
                        self.location
                    );
                }
                return Ok(unknown());
            }
            Err(TrySendError::Disconnected(_)) => return Err(self.stopped()),
        }
        if let Some(earlier) = &self.behind {
            match earlier.try_recv() {
                Err(mpsc::TryRecvError::Empty) => {
                    // Still behind: these wait their turn without holding anyone up.
                    self.behind = Some(answer);
                    return Ok(unknown());
                }
                _ => self.behind = None,
            }
        }
        // Written in time: their run ids. Else on their way (or spooled), ids unknown.
        match answer.recv_timeout(self.wait) {
            Ok(ids) => Ok(ids),
            Err(_) => {
                self.behind = Some(answer);
                Ok(unknown())
            }
        }
    }

    /// Sends a reader's request to the writer thread, which answers it between writes.
    fn ask(&self, request: Request) -> Result<(), StoreError> {
        self.queue
            .as_ref()
            .expect("set until drop")
            .send(request)
            .map_err(|_| self.stopped())
    }

    fn stopped(&self) -> StoreError {
        StoreError::Archive {
            url: self.location.clone(),
            why: "the store's writer stopped".into(),
        }
    }
}

fn pending(row: &MeshRow, run: Option<(&Document, &str)>) -> Pending {
    Pending {
        row: row.clone(),
        document: run.map(|(d, json)| (d.clone(), json.to_string())),
        queued_at: UnixTime::now().seconds(),
    }
}

impl MeshArchive for Writer {
    fn insert_mesh(
        &mut self,
        row: &MeshRow,
        run: Option<(&Document, &str)>,
    ) -> Result<Option<i64>, StoreError> {
        let ids = self.hand_over(vec![pending(row, run)])?;
        Ok(ids.into_iter().next().flatten())
    }

    fn insert_mesh_batch(
        &mut self,
        items: &[crate::MeshItem<'_>],
    ) -> Result<Vec<Option<i64>>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.hand_over(items.iter().map(|(row, run)| pending(row, *run)).collect())
    }

    fn mesh_rows(&mut self, mesh: &str, latest: bool) -> Result<Vec<MeshRow>, StoreError> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::Rows {
            mesh: mesh.to_string(),
            latest,
            reply,
        })?;
        answer.recv().map_err(|_| self.stopped())?
    }

    fn recent_rows_each(
        &mut self,
        mesh: &str,
        per_pair: usize,
        each: &mut dyn FnMut(Vec<MeshRow>),
    ) -> Result<(), StoreError> {
        let (reply, answer) = mpsc::sync_channel(16);
        self.ask(Request::Recent {
            mesh: mesh.to_string(),
            per_pair,
            reply,
        })?;
        for pair in answer {
            each(pair?);
        }
        Ok(())
    }

    fn run_json(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        let (reply, answer) = mpsc::channel();
        self.ask(Request::RunJson { id, reply })?;
        answer.recv().map_err(|_| self.stopped())?
    }

    fn pair_history(&mut self, query: &PairQuery<'_>) -> Result<PairHistory, StoreError> {
        self.reader().pair_history(query)
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}

impl Drop for Writer {
    /// Writes what waits, once, then stops: a file spool keeps what is left for the next
    /// start; what waits in memory and cannot be written is said to be lost.
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            // Behind whatever waits in the queue, which is written first.
            let _ = queue.send(Request::Stop);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct WriterThread {
    store: Box<dyn MeshArchive + Send>,
    spool: Spool,
    /// Why the store refuses, while it does.
    failing: Option<String>,
    retry_at: Option<Instant>,
    backoff: Duration,
    said_at: Option<Instant>,
    retention: Option<Retention>,
    /// When retention next looks for work.
    retain_at: Instant,
    /// What this pass of retention has done so far.
    pass: RetainStep,
}

impl WriterThread {
    fn run(&mut self, requests: mpsc::Receiver<Request>) {
        loop {
            let due = [
                self.retry_at,
                self.retention.as_ref().map(|_| self.retain_at),
            ]
            .into_iter()
            .flatten()
            .min();
            let timeout = due.map_or(Duration::from_secs(1), |at| {
                at.saturating_duration_since(Instant::now())
            });
            match requests.recv_timeout(timeout) {
                Ok(Request::Insert { items, reply }) => {
                    let _ = reply.send(self.insert(items));
                }
                Ok(Request::Rows {
                    mesh,
                    latest,
                    reply,
                }) => {
                    // What waits is written first, so that a reader sees it.
                    if self.failing.is_none() {
                        self.replay(usize::MAX);
                    }
                    let _ = reply.send(self.store.mesh_rows(&mesh, latest));
                }
                Ok(Request::Recent {
                    mesh,
                    per_pair,
                    reply,
                }) => {
                    if self.failing.is_none() {
                        self.replay(usize::MAX);
                    }
                    let mut each = |rows| {
                        let _ = reply.send(Ok(rows));
                    };
                    if let Err(e) = self.store.recent_rows_each(&mesh, per_pair, &mut each) {
                        let _ = reply.send(Err(e));
                    }
                }
                Ok(Request::RunJson { id, reply }) => {
                    if self.failing.is_none() {
                        self.replay(usize::MAX);
                    }
                    let _ = reply.send(self.store.run_json(id));
                }
                Ok(Request::History { query, reply }) => {
                    if self.failing.is_none() {
                        self.replay(usize::MAX);
                    }
                    let query = PairQuery {
                        mesh: &query.mesh,
                        src: &query.src,
                        dst: &query.dst,
                        test: query.test.as_deref(),
                        since: query.since,
                    };
                    let _ = reply.send(self.store.pair_history(&query));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Ok(Request::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    self.finish();
                    return;
                }
            }
            if self.retry_at.is_some_and(|at| Instant::now() >= at) {
                self.replay(REPLAY_BATCH);
            }
            if self.failing.is_none()
                && self.spool.is_empty()
                && self.retention.is_some()
                && Instant::now() >= self.retain_at
            {
                self.retain();
            }
            self.say_how_long();
        }
    }

    /// One step of the mesh's retention; the next soon while there is more to do (the
    /// queue is looked at first), else in [`RETAIN_EVERY`]. A pass that did something
    /// says so once it ends.
    fn retain(&mut self) {
        let Some(policy) = &self.retention else {
            return;
        };
        let now_s = UnixTime::now().seconds();
        let step = self.store.retain_step(
            &policy.mesh,
            now_s - policy.raw_s,
            policy.hourly_s.map(|h| now_s - h),
            RETAIN_BATCH,
        );
        match step {
            Ok(step) => {
                self.pass.add(&step);
                if step.more {
                    self.retain_at = Instant::now();
                    return;
                }
                let p = std::mem::take(&mut self.pass);
                if p != RetainStep::default() {
                    eprintln!(
                        "linerate mesh: retention: {} row(s) and {} run(s) past {} summed up into {} hourly aggregate(s) over {} hour(s) and removed; {} aggregate(s) past their span removed",
                        p.mesh_rows,
                        p.runs,
                        age_text(policy.raw_s),
                        p.aggregates,
                        p.hours,
                        p.hourly_removed
                    );
                }
            }
            Err(e) => {
                eprintln!(
                    "linerate mesh: retention: {e}; tried again in {} min",
                    RETAIN_EVERY.as_secs() / 60
                );
            }
        }
        self.retain_at = Instant::now() + RETAIN_EVERY;
    }

    /// Writes `items` now, together, when nothing waits before them; else (or when the
    /// store refuses them) they wait their turn in the spool, in order.
    fn insert(&mut self, items: Vec<Pending>) -> Vec<Option<i64>> {
        if self.failing.is_none() && self.spool.is_empty() {
            match self.write_all(&items) {
                Ok(ids) => return ids,
                Err(e) => self.failed(e),
            }
        }
        let count = items.len();
        for item in items {
            self.spool.push(item);
        }
        if self.retry_at.is_none() {
            self.retry_at = Some(Instant::now() + self.backoff);
        }
        vec![None; count]
    }

    fn write_all(&mut self, items: &[Pending]) -> Result<Vec<Option<i64>>, StoreError> {
        let listed: Vec<crate::MeshItem<'_>> = items
            .iter()
            .map(|item| {
                let run = item
                    .document
                    .as_ref()
                    .map(|(document, json)| (document, json.as_str()));
                (&item.row, run)
            })
            .collect();
        self.store.insert_mesh_batch(&listed).inspect_err(|_| {
            self.spool
                .counts
                .write_failures
                .fetch_add(1, Ordering::Relaxed);
        })
    }

    fn write(&mut self, item: &Pending) -> Result<Option<i64>, StoreError> {
        let run = item
            .document
            .as_ref()
            .map(|(document, json)| (document, json.as_str()));
        self.store.insert_mesh(&item.row, run).inspect_err(|_| {
            self.spool
                .counts
                .write_failures
                .fetch_add(1, Ordering::Relaxed);
        })
    }

    /// A write failed: said when the store starts refusing, then retried later.
    fn failed(&mut self, e: StoreError) {
        let why = e.to_string();
        if self.failing.is_none() {
            eprintln!(
                "linerate mesh: cannot write to the store: {why}; results wait in the spool ({}) and are written once it takes them again",
                self.spool.place()
            );
            self.said_at = Some(Instant::now());
        }
        self.failing = Some(why);
        self.spool.counts.writing.store(0, Ordering::Relaxed);
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(LAST_RETRY);
    }

    /// Writes up to `most` waiting results, oldest first, stopping at a failure.
    fn replay(&mut self, most: usize) {
        let mut written = 0;
        while written < most {
            let Some(item) = self.spool.oldest() else {
                break;
            };
            match self.write(&item) {
                Ok(_) => {
                    self.spool.remove_oldest();
                    self.spool.counts.replayed.fetch_add(1, Ordering::Relaxed);
                    written += 1;
                }
                Err(e) => {
                    self.failed(e);
                    return;
                }
            }
        }
        if self.spool.is_empty() {
            if self.failing.take().is_some() {
                eprintln!(
                    "linerate mesh: the store {} takes writes again; every waiting result is written",
                    self.store.location()
                );
            }
            self.retry_at = None;
            self.backoff = FIRST_RETRY;
            self.spool.counts.writing.store(1, Ordering::Relaxed);
        } else {
            // More to write: soon, after the queue has been looked at.
            self.retry_at = Some(Instant::now());
        }
    }

    fn say_how_long(&mut self) {
        let (Some(why), Some(said)) = (&self.failing, self.said_at) else {
            return;
        };
        if said.elapsed() >= SAY_AGAIN {
            eprintln!(
                "linerate mesh: the store still refuses ({why}); {} result(s) wait in the spool, the oldest {:.0} s",
                self.spool.len(),
                self.spool.counts.oldest_age_s(UnixTime::now().seconds())
            );
            self.said_at = Some(Instant::now());
        }
    }

    fn finish(&mut self) {
        if self.spool.is_empty() {
            return;
        }
        self.replay(usize::MAX);
        let left = self.spool.len();
        if left == 0 {
            return;
        }
        if self.spool.file.is_some() && self.spool.memory.is_empty() {
            eprintln!(
                "linerate mesh: {left} result(s) stay in the spool {} and are written when the mesh runs again",
                self.spool.place()
            );
        } else {
            eprintln!(
                "linerate mesh: {left} result(s) could not be written to {} and are lost: {}",
                self.store.location(),
                self.failing.as_deref().unwrap_or("the store refused them")
            );
        }
    }
}

/// An age as the mesh file says it: "14d", "36h".
fn age_text(seconds: f64) -> String {
    if seconds >= 86_400.0 && (seconds % 86_400.0) == 0.0 {
        format!("{}d", seconds / 86_400.0)
    } else {
        format!("{}h", (seconds / 3600.0).round())
    }
}

/// The default spool of a mesh named `mesh`: beside the results database.
pub fn default_spool_path(mesh: &str) -> Option<PathBuf> {
    let safe: String = mesh
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    crate::default_path().map(|p| p.with_file_name(format!("spool-{safe}.db")))
}

#[cfg(test)]
mod tests;
