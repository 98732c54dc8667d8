//! What both assemblies of a report (bulk in `assemble`, request/response in `rr`) take
//! from the sides alike: their warnings, rates from counts, and a flow's socket facts.

use crate::model::PerSide;
use crate::{FlowSide, SideResult, SocketFacts};
use linerate_model::Role;

/// Both sides' warnings, the server's marked as such.
pub(crate) fn side_warnings(local: &SideResult, remote: &SideResult) -> Vec<String> {
    let mut warnings = local.warnings.clone();
    warnings.extend(remote.warnings.iter().map(|w| format!("server: {w}")));
    warnings.extend(window_mismatch(local, remote));
    warnings
}

/// Where a flow's two ends measured over windows of clearly different lengths (one end
/// learned of the end, an interruption say, later than the other): each end's rate is
/// its bytes over its own window, so the sender's and the receiver's rates differ though
/// their bytes agree. Said for the flow with the widest gap, when it is over 0.1 s and
/// over 5 % of the longer window.
fn window_mismatch(local: &SideResult, remote: &SideResult) -> Option<String> {
    let sides = [local, remote];
    let window = |role: Role, id: u32| {
        sides
            .iter()
            .flat_map(|s| &s.flows)
            .find(|f| f.role == role && f.id == id)
            .map(|f| f.window_s)
    };
    let (id, sent, received) = sides
        .iter()
        .flat_map(|s| &s.flows)
        .filter(|f| f.role == Role::Send)
        .filter_map(|f| Some((f.id, f.window_s, window(Role::Receive, f.id)?)))
        .max_by(|a, b| (a.1 - a.2).abs().total_cmp(&(b.1 - b.2).abs()))?;
    let gap = (sent - received).abs();
    (gap > 0.1 && gap > 0.05 * sent.max(received)).then(|| {
        format!(
            "flow {id}'s sender measured over {sent:.2} s and its receiver over {received:.2} s: \
             one end learned of the end {gap:.2} s after the other, so each rate is over its \
             own window and they differ though the bytes agree"
        )
    })
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
