//! What an agent tells its own server's `serve --metrics` of a group it ran: the shape of
//! the group's timed transaction (a stream, rr or crr, as a mesh plans them), read from
//! the profile the controller sent, beside the figures the group counted.

use linerate_model::profile::GroupResult;
use linerate_model::ServedGroup;
use linerate_profile::{Action, Group, Transaction};

/// The group `spec` ran, as this host's server hears of it.
pub(crate) fn served_group(
    spec: &Group,
    result: GroupResult,
    local: std::net::IpAddr,
    ended_at: f64,
) -> ServedGroup {
    // The timed transaction: the one with the most timed iterations (a mesh job's
    // connect and disconnect run once around it).
    let timed = result
        .transactions
        .iter()
        .enumerate()
        .filter(|(_, t)| t.latency_us.count > 0)
        .max_by_key(|(_, t)| t.iterations)
        .map(|(i, _)| i);
    let (kind, sends) = timed
        .and_then(|i| spec.transactions.get(i))
        .map_or(("profile", false), shape);
    let endpoint = spec
        .transactions
        .iter()
        .flat_map(|t| &t.ops)
        .find_map(|op| match &op.action {
            Action::Connect(endpoint) | Action::Accept(endpoint) => Some(endpoint),
            _ => None,
        });
    ServedGroup {
        local,
        peer: endpoint.and_then(|e| e.remote.clone()),
        kind,
        sends,
        protocol: endpoint.map_or("tcp", |e| e.protocol.name()),
        timed,
        result,
        ended_at,
    }
}

/// A transaction's shape: a connection each ("crr"), a request and its answer ("rr"),
/// bytes one way ("stream", and whether they go to the peer), or anything else.
fn shape(transaction: &Transaction) -> (&'static str, bool) {
    let has = |pick: fn(&Action) -> bool| transaction.ops.iter().any(|op| pick(&op.action));
    let sends = has(|a| {
        matches!(
            a,
            Action::Write(_) | Action::Sendto(_) | Action::Sendfile(_)
        )
    });
    let receives = has(|a| {
        matches!(
            a,
            Action::Read(_) | Action::Recv(_) | Action::ReceiveFiles(_)
        )
    });
    let connects = has(|a| matches!(a, Action::Connect(_)));
    match (connects, sends, receives) {
        (true, true, true) => ("crr", true),
        (false, true, true) => ("rr", true),
        (false, true, false) => ("stream", true),
        (false, false, true) => ("stream", false),
        _ => ("profile", sends),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::profile::TransactionFigures;

    fn profile(text: &str) -> Group {
        linerate_profile::parse("test.xml", text, &Default::default())
            .unwrap()
            .profile
            .groups
            .into_iter()
            .next()
            .unwrap()
    }

    fn ran(transactions: &[(u64, u64)]) -> GroupResult {
        GroupResult {
            transactions: transactions
                .iter()
                .map(|&(iterations, timed)| {
                    let mut t = TransactionFigures {
                        iterations,
                        ..TransactionFigures::default()
                    };
                    t.latency_us.count = timed;
                    t
                })
                .collect(),
            ..GroupResult::default()
        }
    }

    /// A mesh's three shapes are told apart by their timed transaction, with the peer and
    /// the protocol its connection names; a stream's way follows its operation.
    #[test]
    fn a_groups_shape_is_that_of_its_timed_transaction() {
        let local = "10.0.0.1".parse().unwrap();
        let stream = profile(
            r#"<profile name="s"><group nthreads="1">
            <transaction iterations="1"><flowop type="connect" options="remotehost=10.0.0.2:5201 protocol=udp"/></transaction>
            <transaction duration="1s"><flowop type="write" options="size=1k"/></transaction>
            <transaction iterations="1"><flowop type="disconnect"/></transaction>
            </group></profile>"#,
        );
        let served = served_group(&stream, ran(&[(1, 1), (900, 900), (1, 1)]), local, 0.0);
        assert_eq!(
            (served.kind, served.sends, served.timed),
            ("stream", true, Some(1))
        );
        assert_eq!(served.peer.as_deref(), Some("10.0.0.2:5201"));
        assert_eq!(served.protocol, "udp");

        let reverse = profile(
            r#"<profile name="r"><group nthreads="1">
            <transaction iterations="1"><flowop type="connect" options="remotehost=h2"/></transaction>
            <transaction duration="1s"><flowop type="read" options="size=1k"/></transaction>
            </group></profile>"#,
        );
        let served = served_group(&reverse, ran(&[(1, 1), (50, 50)]), local, 0.0);
        assert_eq!(
            (served.kind, served.sends, served.protocol),
            ("stream", false, "tcp")
        );

        let rr = profile(
            r#"<profile name="rr"><group nthreads="1">
            <transaction iterations="1"><flowop type="connect" options="remotehost=h2"/></transaction>
            <transaction duration="1s"><flowop type="write" options="size=1"/><flowop type="read" options="size=1"/></transaction>
            </group></profile>"#,
        );
        assert_eq!(
            served_group(&rr, ran(&[(1, 1), (20, 20)]), local, 0.0).kind,
            "rr"
        );

        let crr = profile(
            r#"<profile name="crr"><group nthreads="1">
            <transaction duration="1s"><flowop type="connect" options="remotehost=h2"/><flowop type="write" options="size=1"/><flowop type="read" options="size=1"/><flowop type="disconnect"/></transaction>
            </group></profile>"#,
        );
        assert_eq!(served_group(&crr, ran(&[(20, 20)]), local, 0.0).kind, "crr");
        // Nothing timed: no shape to name.
        let none = served_group(&crr, ran(&[(0, 0)]), local, 0.0);
        assert_eq!((none.kind, none.timed), ("profile", None));
    }
}
