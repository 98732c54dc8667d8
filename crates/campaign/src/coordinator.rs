//! A mesh's coordinator as `linerate mesh run` starts it: from a spec (the mesh, its
//! opened store, what watches its results), it builds the store's writer with its spool,
//! the watch (the board seeded from the store, `/metrics`, remote write, alerts) and runs
//! the schedule ([`crate::mesh::run`]), telling each result, alert, path change and
//! change of hosts as a [`Note`]: a line for people and an event for scripts. The binary
//! turns flags into the spec and prints the notes; nothing here prints.

use crate::mesh::{self, MeshEvent, MeshOptions};
use anyhow::Context;
use linerate_mesh::Mesh;
use linerate_metrics::alerts::Change;
use linerate_metrics::assess::Thresholds;
use linerate_metrics::board::{Measure, StoreCounts};
use linerate_metrics::past::{HourPoint, Kept, PastSource};
use linerate_metrics::watch::{Watch, WatchError, WatchSpec};
use linerate_model::clock::UnixTime;
use linerate_report::document::Document;
use linerate_store::prune::PairQuery;
use linerate_store::spool::{Retention, Spool, SpoolCounts, StoreReader, Writer};
use linerate_store::{MeshArchive, MeshRow};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// How long the coordinator waits for a result to be written (and its run id known)
/// before it goes on: a slow store holds the schedule up no longer.
const STORE_WAIT: Duration = Duration::from_secs(2);

/// Where the mesh's results are kept: an opened store and where its spool lies.
pub struct StoreSpec {
    pub store: Box<dyn MeshArchive + Send>,
    pub spool: SpoolPlace,
}

/// Where results the store cannot take yet wait.
pub enum SpoolPlace {
    /// In memory (the SQLite database beside the coordinator: a file on the same disk
    /// would fill with it).
    Memory,
    /// The file the mesh names (`[store] spool`).
    File(std::path::PathBuf),
    /// The default file beside the coordinator, or memory where it cannot be opened.
    Default,
}

/// Everything a coordinator starts from.
pub struct CoordinatorSpec {
    pub mesh: Mesh,
    /// The mesh file, for messages that name it.
    pub file: std::path::PathBuf,
    pub options: MeshOptions,
    pub store: Option<StoreSpec>,
    /// `--metrics`: the HTTP listener of `/metrics` and the grid.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--remote-write`: a Prometheus remote-write receiver.
    pub remote_write: Option<String>,
}

/// Why a coordinator could not start.
#[derive(Debug)]
pub enum StartError {
    /// A mistake in the mesh file or the flags, said in one line.
    Usage(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for StartError {
    fn from(error: anyhow::Error) -> StartError {
        StartError::Other(error)
    }
}

/// What the coordinator tells: a finished job's row, or a line with its event.
pub enum Note<'a> {
    Row(&'a MeshRow),
    Line {
        text: String,
        event: serde_json::Value,
    },
}

/// A coordinator started and ready to run its schedule.
pub struct Coordinator {
    mesh: Mesh,
    options: MeshOptions,
    writer: Option<Writer>,
    watch: Option<Watch>,
    /// What it says before it runs (the spool it resumes, where its metrics are).
    pub notices: Vec<String>,
}

impl Coordinator {
    /// Opens the spool and the writer, starts the watch where anything watches (the
    /// metrics, remote write, an alert receiver, or a kind whose results are told
    /// without one) and seeds it from the store.
    pub fn start(spec: CoordinatorSpec) -> Result<Coordinator, StartError> {
        let CoordinatorSpec {
            mesh,
            file,
            options,
            store,
            metrics,
            remote_write,
        } = spec;
        let mut notices = Vec::new();
        let mut writer = match store {
            Some(store) => Some(store_writer(&mesh, &file, store, &mut notices)?),
            None => None,
        };
        let watching = metrics.is_some()
            || remote_write.is_some()
            || mesh.alerts.alertmanager.is_some()
            || mesh.alerts.webhook.is_some()
            || mesh
                .tests
                .iter()
                .any(|t| t.kind.kind().told_without_receivers());
        let watch = if watching {
            let counts = writer.as_ref().map(|w| w.counts());
            let past_source = writer
                .as_ref()
                .map(|w| Arc::new(StorePast { reader: w.reader() }) as Arc<dyn PastSource>);
            let mut watch = start_watch(&mesh, &file, metrics, remote_write, counts, past_source)?;
            if let Some(server) = &watch.server {
                notices.push(format!(
                    "linerate mesh: metrics at http://{}/metrics, the grid at http://{}/",
                    server.addr, server.addr
                ));
            }
            if let Some(writer) = writer.as_mut() {
                seed(&mesh, writer, &mut watch, &mut notices)?;
            }
            Some(watch)
        } else {
            None
        };
        Ok(Coordinator {
            mesh,
            options,
            writer,
            watch,
            notices,
        })
    }

    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// Runs the schedule until its cycles are done or `stop` is set, telling `each`
    /// every note.
    pub fn run(self, stop: &Arc<AtomicBool>, each: &mut dyn FnMut(Note<'_>)) -> anyhow::Result<()> {
        let Coordinator {
            mesh,
            options,
            mut writer,
            mut watch,
            ..
        } = self;
        let store = writer.as_mut().map(|w| w as &mut dyn MeshArchive);
        let mut trim = HeapTrim::new();
        let mut each_event = |event: MeshEvent| {
            trim.now_and_then();
            for note in notes(event, watch.as_mut()) {
                each(note);
            }
        };
        mesh::run(&mesh, options, store, stop, &mut each_event)
    }
}

/// What one event of the schedule tells: a result's path change and alerts, then its
/// row; a change of hosts, a wait, a failed discovery.
fn notes<'a>(event: MeshEvent<'a>, watch: Option<&mut Watch>) -> Vec<Note<'a>> {
    let mut notes = Vec::new();
    let mut line = |text: String, event: serde_json::Value| notes.push(Note::Line { text, event });
    match event {
        MeshEvent::Result(result) => {
            let recorded = watch
                .map(|w| w.record(&result.row, result.document.as_ref()))
                .unwrap_or_default();
            if let Some(mark) = &recorded.path_change {
                let event = serde_json::json!({
                    "event": "path_change",
                    "mesh": result.row.mesh,
                    "test": mark.test,
                    "src": mark.src,
                    "dst": mark.dst,
                    "since": mark.since,
                    "at": mark.at,
                    "words": mark.words,
                    "run_id": result.row.run_id,
                });
                line(format!("path change: {}", mark.describe()), event);
            }
            for change in recorded.changes {
                let (a, resolved) = match &change {
                    Change::Opened(a) => (a, false),
                    Change::Resolved(a) => (a, true),
                };
                let verb = if resolved { "resolved" } else { "alert" };
                let text = format!("{verb} {}: {}", a.name(), a.words());
                let event =
                    serde_json::json!({ "event": "alert", "text": text, "resolved": resolved });
                line(text, event);
            }
            notes.push(Note::Row(&result.row));
        }
        MeshEvent::Hosts { added, removed } => {
            let text = format!(
                "hosts changed: {} added [{}], {} removed [{}]; the schedule carries on over them once the running jobs end",
                added.len(),
                added.join(", "),
                removed.len(),
                removed.join(", ")
            );
            line(
                text,
                serde_json::json!({ "event": "hosts", "added": added, "removed": removed }),
            );
        }
        MeshEvent::Waiting { until } => {
            let at = UnixTime::from_seconds(until).system();
            let left = Duration::from_secs((until - UnixTime::now().seconds()).max(0.0) as u64);
            let text = format!(
                "nothing runs until {} (in {}): the next job is due then",
                humantime::format_rfc3339_seconds(at),
                humantime::format_duration(left)
            );
            line(
                text,
                serde_json::json!({ "event": "waiting", "until": until }),
            );
        }
        MeshEvent::DiscoveryFailed(why) => {
            let text = format!("discovery failed, hosts kept: {why}");
            line(
                text,
                serde_json::json!({ "event": "discovery_failed", "why": why }),
            );
        }
    }
    notes
}

/// The mesh's store behind its writer, with its spool where the spec says.
fn store_writer(
    mesh: &Mesh,
    file: &std::path::Path,
    spec: StoreSpec,
    notices: &mut Vec<String>,
) -> Result<Writer, StartError> {
    let bound = mesh.store.spool_bound();
    let fresh = || Arc::new(SpoolCounts::default());
    let spool = match spec.spool {
        SpoolPlace::Memory => Spool::open(None, bound, fresh()).map_err(anyhow::Error::from)?,
        SpoolPlace::File(path) => Spool::open(Some(&path), bound, fresh())
            .map_err(|e| StartError::Usage(format!("{}: [store] spool: {e}", file.display())))?,
        SpoolPlace::Default => {
            let path = linerate_store::spool::default_spool_path(&mesh.name);
            match Spool::open(path.as_deref(), bound, fresh()) {
                Ok(spool) => spool,
                Err(e) => {
                    notices.push(format!(
                        "linerate mesh: warning: no spool file ({e}); results the archive cannot take wait in memory (set [store] spool = \"PATH\")"
                    ));
                    Spool::open(None, bound, fresh()).map_err(anyhow::Error::from)?
                }
            }
        }
    };
    if !spool.is_empty() {
        notices.push(format!(
            "linerate mesh: {} result(s) left in the spool {} are written first",
            spool.len(),
            spool.place()
        ));
    }
    let retention = mesh.retention.map(|r| Retention {
        mesh: mesh.name.clone(),
        raw_s: r.raw_s,
        hourly_s: r.hourly_s,
    });
    Ok(Writer::start(spec.store, spool, STORE_WAIT, retention)
        .context("starting the store's writer")?)
}

/// The board, `/metrics`, remote write and the file's alert receivers.
fn start_watch(
    mesh: &Mesh,
    file: &std::path::Path,
    metrics: Option<std::net::SocketAddr>,
    remote_write: Option<String>,
    store: Option<Arc<SpoolCounts>>,
    past_source: Option<Arc<dyn PastSource>>,
) -> Result<Watch, StartError> {
    let rules = &mesh.alerts;
    let spec = WatchSpec {
        mesh: &mesh.name,
        hosts: mesh.hosts.iter().map(|h| h.name.as_str()).collect(),
        tests: mesh
            .tests
            .iter()
            .map(|test| (test.name.as_str(), test.kind.kind().measure()))
            .collect(),
        past: &[],
        thresholds: Thresholds {
            goodput_drop: rules.goodput_drop,
            latency_rise: rules.latency_rise,
            latency_rise_min: rules.latency_rise_min_s,
            responsiveness_drop: rules.responsiveness_drop,
            loss_above: rules.loss_above,
            loss_for_s: rules.loss_for_s,
            mos_below: rules.mos_below,
            mos_for_s: rules.mos_for_s,
            window: rules.baseline,
            at_least: rules.at_least,
        },
        metrics,
        remote_write: remote_write.as_deref(),
        alertmanager: rules.alertmanager.as_deref(),
        webhook: rules.webhook.as_deref(),
        grid_url: rules.grid_url.clone(),
        store: store.map(|counts| {
            Arc::new(move || Writer::snapshot(&counts))
                as Arc<dyn Fn() -> StoreCounts + Send + Sync>
        }),
        past_source,
    };
    Watch::start(spec).map_err(|e| match e {
        WatchError::Alerts(_) => StartError::Usage(format!("{}: {e}", file.display())),
        _ => StartError::Usage(e.to_string()),
    })
}

/// What the board keeps of each pair (its plot, its baseline), read a pair at a time: a
/// large mesh's months of rows are never in memory together; and each pair's way as its
/// last stored trace went.
fn seed(
    mesh: &Mesh,
    store: &mut dyn MeshArchive,
    watch: &mut Watch,
    notices: &mut Vec<String>,
) -> Result<(), StartError> {
    let traces: std::collections::BTreeSet<&str> = mesh
        .tests
        .iter()
        .filter(|t| t.kind.kind().measure() == Measure::Hops)
        .map(|t| t.name.as_str())
        .collect();
    let mut last_traces = Vec::new();
    store
        .recent_rows_each(&mesh.name, linerate_metrics::board::HISTORY, &mut |rows| {
            watch.seed(&rows);
            if let Some(last) = rows
                .iter()
                .rev()
                .find(|r| traces.contains(r.test.as_str()) && r.run_id.is_some())
            {
                last_traces.push(last.clone());
            }
        })
        .context("reading the mesh's past results")?;
    learn_routes(store, watch, &last_traces, notices);
    Ok(())
}

/// Each pair's way as its last stored trace went, so that a restarted coordinator tells
/// a change from it (a document that cannot be read leaves its pair to learn its way
/// from its next trace, said once).
fn learn_routes(
    store: &mut dyn MeshArchive,
    watch: &Watch,
    last_traces: &[MeshRow],
    notices: &mut Vec<String>,
) {
    let mut unread = 0;
    for row in last_traces {
        let document = row
            .run_id
            .and_then(|id| store.run_json(id).ok().flatten())
            .and_then(|json| Document::from_json(&json).ok());
        match document {
            Some(Document::Trace(report)) => watch.learn_route(row, &report),
            _ => unread += 1,
        }
    }
    if unread > 0 {
        notices.push(format!(
            "linerate mesh: {unread} pair(s)' last trace could not be read: their next trace sets their way"
        ));
    }
}

/// The grid's plot over days, read from the mesh's store through its writer.
struct StorePast {
    reader: StoreReader,
}

impl PastSource for StorePast {
    fn hourly(
        &self,
        key: &linerate_metrics::board::Key,
        since: f64,
    ) -> Result<Vec<HourPoint>, String> {
        let found = self
            .reader
            .pair_history(&PairQuery {
                mesh: &key.mesh,
                src: &key.src,
                dst: &key.dst,
                test: Some(&key.test),
                since,
            })
            .map_err(|e| e.to_string())?;
        Ok(found
            .by_hour()
            .into_iter()
            .filter(|(a, _)| a.direction == key.direction && a.protocol == key.protocol)
            .map(|(a, from_rows)| HourPoint {
                at: a.hour,
                count: a.count,
                ok: a.ok,
                min: a.min,
                median: a.median,
                max: a.max,
                kept: if from_rows {
                    Kept::Rows
                } else {
                    Kept::Aggregate
                },
            })
            .collect())
    }
}

/// With glibc's allocator (a build without the `jemalloc` feature): one arena for the
/// coordinator. Its jobs' threads allocate what its own thread keeps and frees (results,
/// documents, links given back), and glibc gives threads up to eight arenas a CPU, each
/// keeping its own fragments: a 30-minute soak measured the resident memory growing 6 MiB
/// an hour, all of it in those arenas (docs/performance.md). One arena reuses what any
/// thread freed. Call before the first thread starts. jemalloc, the default, returns
/// freed pages by itself and needs neither this nor [`HeapTrim`].
pub fn one_allocator_arena() {
    #[cfg(all(target_env = "gnu", not(feature = "jemalloc")))]
    // SAFETY: mallopt changes a glibc tunable; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// With glibc's allocator: hands its free pages back to the kernel once a minute. glibc
/// returns only the top of its heap by itself; a burst of results (a cycle's jobs ending
/// together) leaves free pages below live ones, which the resident size kept as growth.
/// A heap profile of a 12-minute soak found the memory in use flat from the second
/// minute while the resident size still rose (docs/performance.md).
struct HeapTrim {
    last: std::time::Instant,
}

impl HeapTrim {
    const EVERY: Duration = Duration::from_secs(60);

    fn new() -> HeapTrim {
        HeapTrim {
            last: std::time::Instant::now(),
        }
    }

    /// Trims when a minute has passed since the last time: a walk of the heap's free
    /// chunks, a millisecond or so at the coordinator's size.
    fn now_and_then(&mut self) {
        if self.last.elapsed() < Self::EVERY {
            return;
        }
        self.last = std::time::Instant::now();
        #[cfg(all(target_env = "gnu", not(feature = "jemalloc")))]
        // SAFETY: malloc_trim only releases memory the allocator holds free.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
