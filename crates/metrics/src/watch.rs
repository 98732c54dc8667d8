//! Everything that watches a mesh's results, behind one call per result: the board the
//! listener reads, remote_write, and the alerts. The coordinator calls [`Watch::record`]
//! as each job ends; open alerts are re-sent from there when it is time.

use crate::alerts::{Alerts, Change, Notifier};
use crate::assess::{assess, Thresholds};
use crate::board::{Board, Key};
use crate::remote_write::RemoteWriter;
use crate::server::MetricsServer;
use linerate_model::mesh_row::MeshRow;
use linerate_report::document::Document;
use std::sync::{Arc, Mutex};

pub struct Watch {
    pub board: Arc<Mutex<Board>>,
    pub thresholds: Thresholds,
    pub server: Option<MetricsServer>,
    pub remote: Option<RemoteWriter>,
    pub alerts: Alerts,
    pub notifier: Option<Notifier>,
}

impl Watch {
    /// A finished job: on the board, sent on, and the alerts updated. The alerts' changes
    /// are returned (the coordinator shows them).
    pub fn record(&mut self, row: &MeshRow, document: Option<&Document>) -> Option<Change> {
        let key = Key::of(row);
        let mut board = self.board.lock().unwrap_or_else(|e| e.into_inner());
        board.record(row, document);
        if let Some(remote) = &self.remote {
            remote.push(&board, &key);
        }
        let series = board.series.get(&key)?;
        let assessment = assess(series, &self.thresholds);
        let change = self
            .alerts
            .update(&key, &assessment, series.latest.value, row.ended_at);
        if let Some(notifier) = &mut self.notifier {
            if let Some(change) = &change {
                notifier.send(change);
            }
            notifier.keep_alive(&self.alerts);
        }
        change
    }
}
