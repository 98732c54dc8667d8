//! A mesh's host and the transports its tests go over: what a kind plans a job with.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub name: String,
    /// `host`, `host:port` or `[v6]:port`: where its `linerate serve` listens (for a
    /// host that only reflects, its STAMP reflector).
    pub address: String,
    pub labels: BTreeMap<String, String>,
    /// It runs no agent, only a STAMP reflector (`reflector = "stamp"`: a router, any RFC
    /// 8762 reflector): the destination of STAMP tests, and of nothing else.
    pub reflector_only: bool,
    /// Where its jobs' connections leave from (`source`, `source_dev`); `None`: where
    /// its routes say.
    pub source: Option<linerate_model::Source>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}
