//! `serve --metrics`: each native test a server served, as the board's rows and figures.
//! A server counts what it received, so its goodput is the receiver's; when it sent, it
//! has the sender's TCP retransmits (TCP_INFO) and its CPU per gigabit instead. Series:
//! {mesh="serve", src, dst, test="stream|rr|crr", direction="forward|reverse", protocol},
//! src and dst the addresses the bytes went from and to.

use crate::board::{Figures, Transactions};
use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_model::ndt7::{Subtest, SubtestEnd, SubtestResult};
use linerate_model::{Direction, Role, Served, ServedGroup, ServedTest, Workload};

/// What the board keeps of anything a server ran to its end.
pub fn rows_of_served(served: Served<'_>) -> Vec<(MeshRow, Figures)> {
    match served {
        Served::Test(test) => rows_of(test),
        Served::Group(group) => rows_of_group(group).into_iter().collect(),
        Served::Ndt7 { subtest, ended_at } => vec![rows_of_ndt7(subtest, ended_at)],
    }
}

/// What the board keeps of an ndt7 subtest served: one row, the way its bytes went (a
/// download from this server to the client, "reverse" as a served stream's would be; an
/// upload "forward"), with the subtest's figure (counted where the data arrived: the
/// client's own count of a download where it sent one, this server's of an upload).
pub fn rows_of_ndt7(subtest: &SubtestResult, ended_at: f64) -> (MeshRow, Figures) {
    let canonical = |addr: &str| {
        addr.parse::<std::net::SocketAddr>()
            .map_or_else(|_| addr.to_string(), |a| a.ip().to_canonical().to_string())
    };
    let (client, server) = (canonical(&subtest.client), canonical(&subtest.server));
    let (src, dst, direction) = match subtest.subtest {
        Subtest::Download => (server, client, "reverse"),
        Subtest::Upload => (client, server, "forward"),
    };
    let outcome = match subtest.ended {
        SubtestEnd::Completed => Outcome::Ok,
        _ => Outcome::Failed {
            blamed: None,
            reason: subtest
                .ended_why
                .clone()
                .unwrap_or_else(|| format!("{:?}", subtest.ended)),
        },
    };
    let bps = (subtest.goodput_bps > 0.0).then_some(subtest.goodput_bps);
    let row = MeshRow {
        run_id: None,
        mesh: "serve".into(),
        src,
        dst,
        test: "ndt7".into(),
        direction: direction.into(),
        protocol: "tcp".into(),
        cycle: 0,
        started_at: ended_at - subtest.elapsed_s,
        ended_at,
        outcome,
        headline: bps,
        headline_text: String::new(),
    };
    let figures = Figures {
        goodput_bps: bps,
        duration_s: subtest.elapsed_s,
        ..Figures::default()
    };
    (row, figures)
}

/// What the board keeps of a group this host's agent ran: one row, from this host to the
/// group's peer (from the peer for a stream read from it), with the figures of its timed
/// transaction. A stream's goodput is the bytes the receiving end counted over the
/// transaction's time (the peer's count of what this host wrote); rr and crr have their
/// transactions' times. None for a group that timed nothing.
pub fn rows_of_group(group: &ServedGroup) -> Option<(MeshRow, Figures)> {
    let result = &group.result;
    let timed = &result.transactions[group.timed?];
    let local = group.local.to_canonical().to_string();
    // The peer as an address where the profile names one with a port.
    let peer = group.peer.as_deref().map_or_else(
        || "local".to_string(),
        |p| {
            p.parse::<std::net::SocketAddr>()
                .map_or_else(|_| p.to_string(), |a| a.ip().to_canonical().to_string())
        },
    );
    let stream = group.kind == "stream";
    let (src, dst, direction) = if stream && !group.sends {
        (peer, local, "reverse")
    } else {
        (local, peer, "forward")
    };
    // Counted where the bytes arrived: the peer's count of this host's writes, or this
    // host's count of its reads; and what their senders sent.
    let (received, sent) = timed.ops.iter().fold((0u64, 0u64), |(received, sent), op| {
        let (arrived, left) = if matches!(op.op.as_str(), "write" | "sendto" | "sendfile") {
            (op.peer_bytes, op.bytes)
        } else {
            (op.bytes, op.peer_bytes)
        };
        (received + arrived, sent + left)
    });
    let seconds = timed.elapsed_s;
    let bps = (seconds > 0.0).then(|| received as f64 * 8.0 / seconds);
    let failure = result
        .failures
        .first()
        .cloned()
        .or_else(|| result.per_thread.iter().find_map(|t| t.failure.clone()))
        .or_else(|| (result.errors > 0).then(|| format!("{} operation(s) failed", result.errors)));
    let row = MeshRow {
        run_id: None,
        mesh: "serve".into(),
        src,
        dst,
        test: group.kind.into(),
        direction: direction.into(),
        protocol: group.protocol.into(),
        cycle: 0,
        started_at: group.ended_at - result.elapsed_s,
        ended_at: group.ended_at,
        outcome: match failure {
            None => Outcome::Ok,
            Some(reason) => Outcome::Failed {
                blamed: None,
                reason,
            },
        },
        headline: if stream { bps } else { None },
        headline_text: String::new(),
    };
    let figures = Figures {
        goodput_bps: if stream { bps } else { None },
        loss_ratio: (stream && group.protocol == "udp" && sent > 0)
            .then(|| (1.0 - received as f64 / sent as f64).max(0.0)),
        rtt: (!stream && group.kind != "profile").then(|| Transactions::of(&timed.latency_us)),
        duration_s: seconds,
        ..Figures::default()
    };
    Some((row, figures))
}

/// What the board keeps of a served test: a row and its figures per direction it moved
/// bytes in (two for a bidirectional test).
pub fn rows_of(test: &ServedTest) -> Vec<(MeshRow, Figures)> {
    let side = &test.side;
    // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d: named as IPv4.
    let (client, server) = (
        test.peer.ip().to_canonical().to_string(),
        test.local.to_canonical().to_string(),
    );
    let kind = test.config.workload.name();
    let stream = test.config.workload == Workload::Stream;
    let protocol = test.config.protocol;
    let window = side.flows.iter().map(|f| f.window_s).fold(0.0, f64::max);
    let cpu_s = side.cpu.busy_pct / 100.0 * f64::from(side.cpu.cores) * side.cpu.window_s;
    let mut out = Vec::new();
    for receiving in [true, false] {
        let flows: Vec<_> = side
            .flows
            .iter()
            .filter(|f| match f.role {
                Role::Receive => receiving,
                Role::Send => !receiving,
                // rr: the server answers; its row is the client's direction.
                Role::Respond | Role::Request => receiving,
            })
            .collect();
        if flows.is_empty() {
            continue;
        }
        let bytes: u64 = flows.iter().map(|f| f.window_bytes).sum();
        let bps = if window > 0.0 {
            bytes as f64 * 8.0 / window
        } else {
            0.0
        };
        let failed = flows.iter().find_map(|f| f.error.clone());
        let udp: Option<(u64, u64)> = flows
            .iter()
            .filter_map(|f| f.udp.as_ref())
            .map(|u| (u.received, u.lost))
            .reduce(|a, b| (a.0 + b.0, a.1 + b.1));
        let (src, dst, direction) = if receiving {
            (&client, &server, "forward")
        } else {
            (&server, &client, "reverse")
        };
        let row = MeshRow {
            run_id: None,
            mesh: "serve".into(),
            src: src.clone(),
            dst: dst.clone(),
            test: kind.into(),
            direction: direction.into(),
            protocol: protocol.as_str().into(),
            cycle: 0,
            started_at: test.ended_at - window,
            ended_at: test.ended_at,
            outcome: match failed {
                None => Outcome::Ok,
                Some(reason) => Outcome::Failed {
                    blamed: None,
                    reason,
                },
            },
            headline: (receiving && stream).then_some(bps),
            headline_text: String::new(),
        };
        let gbit = bytes as f64 * 8.0 / 1e9;
        let figures = Figures {
            goodput_bps: (receiving && stream).then_some(bps),
            loss_ratio: udp
                .filter(|(r, l)| r + l > 0)
                .map(|(r, l)| l as f64 / (r + l) as f64),
            retransmits: (!receiving && protocol.traits().kernel_tcp)
                .then(|| flows.iter().map(|f| f.retransmits).sum()),
            cpu_s_per_gbit: (stream && gbit > 0.0 && test.config.direction != Direction::Bidir)
                .then_some(cpu_s / gbit),
            duration_s: window,
            ..Figures::default()
        };
        out.push((row, figures));
    }
    out
}
