//! What both assemblies of a report (bulk in `assemble`, request/response in `rr`) take
//! from the sides alike: their warnings, rates from counts, and a flow's socket facts.

use crate::model::PerSide;
use crate::{FlowSide, SideResult, SocketFacts};

/// Both sides' warnings, the server's marked as such.
pub(crate) fn side_warnings(local: &SideResult, remote: &SideResult) -> Vec<String> {
    let mut warnings = local.warnings.clone();
    warnings.extend(remote.warnings.iter().map(|w| format!("server: {w}")));
    warnings
}

pub(crate) fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

pub(crate) fn socket_facts(side: Option<&FlowSide>) -> SocketFacts {
    side.map(|f| SocketFacts {
        local_addr: f.local_addr.clone(),
        remote_addr: f.remote_addr.clone(),
        sndbuf: f.sndbuf,
        rcvbuf: f.rcvbuf,
        congestion: f.congestion.clone(),
    })
    .unwrap_or_default()
}

/// Both ends' observations, if either end observed.
pub(crate) fn observed(
    local: &SideResult,
    remote: &SideResult,
) -> Option<PerSide<Option<linerate_model::observe::Observation>>> {
    (local.observe.is_some() || remote.observe.is_some()).then(|| PerSide {
        local: local.observe.clone(),
        remote: remote.observe.clone(),
    })
}
