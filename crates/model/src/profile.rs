//! The figures of one group of a profile run, as its host reports them to the controller
//! (docs/results.md, "Profile runs").

use crate::latency::LatencySummary;
use serde::{Deserialize, Serialize};

/// One operation of one transaction, over all threads of a group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpFigures {
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn: Option<String>,
    /// Executions (each moves `count` messages).
    pub count: u64,
    /// Payload bytes this side moved: written by a write, read by a read.
    pub bytes: u64,
    /// Payload bytes the peer counted for this operation: what it read of a write, wrote
    /// for a read.
    pub peer_bytes: u64,
    pub errors: u64,
    pub latency_us: LatencySummary,
}

/// One transaction of a group, over all its threads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransactionFigures {
    /// Iterations completed by all threads together.
    pub iterations: u64,
    /// Payload bytes received in this transaction, counted where they arrived.
    pub received_bytes: u64,
    pub errors: u64,
    /// From the first thread's start of it to the last thread's end of it.
    pub elapsed_s: f64,
    pub iterations_per_s: f64,
    pub received_bps: f64,
    /// Time per iteration.
    pub latency_us: LatencySummary,
    pub ops: Vec<OpFigures>,
}

/// One thread's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadFigures {
    pub thread: u32,
    /// Iterations of all transactions.
    pub iterations: u64,
    /// Payload bytes this thread's connections received, counted where they arrived.
    pub received_bytes: u64,
    pub errors: u64,
    pub elapsed_s: f64,
    /// Why the thread stopped early, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupResult {
    pub name: String,
    /// The host that ran it: an agent's address, or "local".
    pub host: String,
    pub threads: u32,
    pub received_bytes: u64,
    pub sent_bytes: u64,
    pub iterations: u64,
    pub errors: u64,
    /// From the synchronized start to the group's last thread ending.
    pub elapsed_s: f64,
    pub transactions: Vec<TransactionFigures>,
    pub per_thread: Vec<ThreadFigures>,
    /// What went wrong outside any one thread: a peer that did not report, a thread that
    /// could not start, a host lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}
