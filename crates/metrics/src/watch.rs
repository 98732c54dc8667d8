//! Everything that watches a mesh's results, behind one call per result: the board the
//! listener reads, remote_write, and the alerts. The coordinator calls [`Watch::record`]
//! as each job ends; open alerts are re-sent from there when it is time.

use crate::alerts::{Alerts, Change, LossOf, Notifier};
use crate::assess::{assess, Assessment, State, Thresholds};
use crate::board::{Board, Key, Measure, ProcessCounts, ProcessSource};
use crate::remote_write::RemoteWriter;
use crate::server::MetricsServer;
use linerate_model::mesh_row::MeshRow;
use linerate_report::document::Document;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub struct Watch {
    pub board: Arc<Mutex<Board>>,
    pub thresholds: Thresholds,
    pub server: Option<MetricsServer>,
    pub remote: Option<RemoteWriter>,
    pub alerts: Alerts,
    pub notifier: Option<Notifier>,
}

/// What a watch is started with: the mesh's hosts and tests (each with the figure it
/// measures), its past rows, its thresholds, and where to serve, send and alert.
pub struct WatchSpec<'a> {
    pub mesh: &'a str,
    pub hosts: Vec<&'a str>,
    pub tests: Vec<(&'a str, Measure)>,
    pub past: &'a [MeshRow],
    pub thresholds: Thresholds,
    /// `--metrics`: the listener for /metrics and the grid.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--remote-write`: the receiver's URL.
    pub remote_write: Option<&'a str>,
    /// The `[alerts]` receivers, and the grid's address in their messages (else the
    /// listener's).
    pub alertmanager: Option<&'a str>,
    pub webhook: Option<&'a str>,
    pub grid_url: Option<String>,
    /// The store writer's counts, read at each scrape.
    pub store: Option<std::sync::Arc<dyn Fn() -> crate::board::StoreCounts + Send + Sync>>,
    /// The store's pairs' past, for the grid's plot over days.
    pub past_source: Option<Arc<dyn crate::past::PastSource>>,
}

/// Which part of a watch could not start, and why.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("--metrics {addr}: {why:#}")]
    Metrics {
        addr: std::net::SocketAddr,
        why: anyhow::Error,
    },
    #[error("--remote-write {url}: {why:#}")]
    RemoteWrite { url: String, why: anyhow::Error },
    #[error("[alerts]: {0:#}")]
    Alerts(anyhow::Error),
}

impl Watch {
    /// Adds a pair's past rows (oldest first) to the board: a restarted coordinator's
    /// history and baselines, read from its store a pair at a time.
    pub fn seed(&self, rows: &[MeshRow]) {
        self.board
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seed(rows);
    }

    /// A pair's way as its last stored trace went (a restarted coordinator's).
    pub fn learn_route(&self, row: &MeshRow, report: &linerate_report::trace::TraceReport) {
        self.board
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .learn_route(row, report);
    }

    /// Starts everything that watches a mesh: the board with its past, the listener, the
    /// remote writer and the alerts' notifier.
    pub fn start(spec: WatchSpec<'_>) -> Result<Watch, WatchError> {
        let mut board = Board {
            reserve_history: true,
            ..Board::default()
        };
        for host in &spec.hosts {
            board.declare_host(host);
        }
        for (test, measure) in &spec.tests {
            board.declare(test, *measure);
        }
        board.seed(spec.past);
        let board = Arc::new(Mutex::new(board));
        let server = match spec.metrics {
            Some(addr) => Some(
                crate::server::start(
                    addr,
                    board.clone(),
                    spec.mesh,
                    spec.thresholds,
                    spec.past_source.clone(),
                )
                .map_err(|why| WatchError::Metrics { addr, why })?,
            ),
            None => None,
        };
        let remote = match spec.remote_write {
            Some(url) => Some(
                RemoteWriter::start(url).map_err(|why| WatchError::RemoteWrite {
                    url: url.to_string(),
                    why,
                })?,
            ),
            None => None,
        };
        let grid = spec
            .grid_url
            .or_else(|| server.as_ref().map(|s| format!("http://{}", s.addr)));
        let notifier =
            Notifier::start(spec.alertmanager, spec.webhook, grid).map_err(WatchError::Alerts)?;
        let (remote_counts, notifier_counts) = (
            remote.as_ref().map(|r| r.poster.counts.clone()),
            notifier.as_ref().map(Notifier::counts),
        );
        let store = spec.store;
        board.lock().unwrap_or_else(|e| e.into_inner()).process =
            Some(ProcessSource(Arc::new(move || {
                let dropped = |c: &crate::post::Counts| c.dropped.load(Ordering::Relaxed);
                ProcessCounts {
                    store: store.as_ref().map(|read| read()),
                    remote_write_dropped: remote_counts.as_deref().map(dropped),
                    notifications_dropped: notifier_counts.as_deref().map(dropped),
                }
            })));
        Ok(Watch {
            board,
            thresholds: spec.thresholds,
            server,
            remote,
            alerts: Alerts::default(),
            notifier,
        })
    }

    /// A finished job: on the board, sent on, and the alerts updated. What changed is
    /// returned (the coordinator shows it): the alerts opened and resolved, and the path
    /// change a trace saw. An alert that opens names a path change of its pair (either
    /// way) that may have happened since the series' result before; one already open
    /// names a path change seen later that may have happened in its span (sent with the
    /// open alerts' next re-send).
    pub fn record(&mut self, row: &MeshRow, document: Option<&Document>) -> Recorded {
        let mut board = self.board.lock().unwrap_or_else(|e| e.into_inner());
        let own = Key::of(row);
        let path_changes =
            |board: &Board| board.series.get(&own).map_or(0, |s| s.totals.path_changes);
        let before = path_changes(&board);
        let keys = board.record(row, document);
        let path_change = (path_changes(&board) > before)
            .then(|| {
                board
                    .path_marks
                    .get(&(own.mesh.clone(), own.src.clone(), own.dst.clone()))
                    .and_then(|marks| marks.back().cloned())
            })
            .flatten();
        let mut changes = Vec::new();
        for key in keys {
            if let Some(remote) = &self.remote {
                remote.push(&board, &key);
            }
            let Some(series) = board.series.get(&key) else {
                continue;
            };
            let since = series
                .history
                .iter()
                .rev()
                .nth(1)
                .map_or(row.started_at, |p| p.at);
            let assessment = assess(series, &self.thresholds);
            let mut change = self.alerts.update(
                &key,
                &assessment,
                series.latest.value,
                row.ended_at,
                &self.thresholds,
            );
            // A multicast receiver's loss is of its source's stream, not of probes.
            if let (Some(Document::Multicast(_)), Some(Change::Opened(a) | Change::Resolved(a))) =
                (document, change.as_mut())
            {
                a.lost = LossOf::MulticastStream;
            }
            let frames = frames_lost(series).and_then(|lost| {
                frames_change(&mut self.alerts, &key, lost, row.ended_at, &self.thresholds)
            });
            for mut change in [change, frames].into_iter().flatten() {
                if let Change::Opened(alert) = &mut change {
                    alert.since = since;
                    alert.path_change = board
                        .path_changes_between(&key, since, alert.started_at)
                        .last()
                        .map(|mark| mark.describe());
                    if let Some(open) = self.alerts.open.get_mut(&(key.clone(), alert.measure)) {
                        *open = alert.clone();
                    }
                }
                if let Some(notifier) = &mut self.notifier {
                    notifier.send(&change);
                }
                changes.push(change);
            }
        }
        if let Some(mark) = &path_change {
            for alert in self.alerts.open.values_mut() {
                let k = &alert.key;
                let pair = k.mesh == own.mesh
                    && ((k.src == mark.src && k.dst == mark.dst)
                        || (k.src == mark.dst && k.dst == mark.src));
                if pair
                    && alert.path_change.is_none()
                    && mark.since < alert.started_at
                    && mark.at > alert.since
                {
                    alert.path_change = Some(mark.describe());
                }
            }
        }
        if let Some(notifier) = &mut self.notifier {
            notifier.keep_alive(&self.alerts);
        }
        Recorded {
            changes,
            path_change,
        }
    }
}

/// A video's frames not shown in time, `lost` of them, held to the loss bound beside its
/// latency's baseline: the second alert of its series, said as frames.
fn frames_change(
    alerts: &mut Alerts,
    key: &Key,
    lost: f64,
    at: f64,
    thresholds: &Thresholds,
) -> Option<Change> {
    let frames = Assessment {
        state: State::Normal,
        baseline: None,
        ratio: None,
        measure: Measure::Loss,
    };
    let mut change = alerts.update(key, &frames, Some(lost), at, thresholds)?;
    match &mut change {
        Change::Opened(alert) | Change::Resolved(alert) => alert.lost = LossOf::Frames,
    }
    Some(change)
}

/// A video's share of frames not shown in time, where its newest job ran: the loss
/// ratio of a series whose headline is a frame's latency (the board keeps the frames not
/// whole or late there).
fn frames_lost(series: &crate::board::Series) -> Option<f64> {
    let video = series.measure == Some(Measure::Latency) && series.latest.outcome.is_ok();
    series.latest.loss_ratio.filter(|_| video)
}

/// What one result changed that the coordinator shows.
#[derive(Debug, Default)]
pub struct Recorded {
    pub changes: Vec<Change>,
    /// A trace that went another way than the pair's trace before it.
    pub path_change: Option<crate::board::PathMark>,
}
