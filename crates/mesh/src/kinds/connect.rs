//! `run = "connect"`: how long a TCP connection takes to open on every path (netperf's
//! TCP_CC): each transaction connects to the destination's agent and closes again, and
//! the median of those times heads the result.

use super::{profile_job, Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{transactions_per_second, MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};
use linerate_profile::Action as Op;

#[derive(Debug, Clone, PartialEq)]
pub struct Connect {
    /// Connections a second (a probe at a low rate); `None`: one after another.
    pub per_second: Option<f64>,
}

impl Kind for Connect {
    fn run(&self) -> &'static str {
        "connect"
    }

    fn transport(&self) -> Transport {
        Transport::Tcp
    }

    fn measure(&self) -> Measure {
        Measure::Latency
    }

    fn headline(&self) -> Headline {
        Headline::Transaction {
            index: 0,
            label: "connect",
        }
    }

    fn marks_packets(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        profile_job(site, Transport::Tcp, 1, true, |parts| {
            vec![parts.timed(self.per_second, vec![parts.connect.clone(), Op::Disconnect])]
        })
    }
}

/// A connect test's options: rate (connections a second) and nothing of a transfer.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let protocol = table.take_transport(reader)?;
    if *protocol.get_ref() == Transport::Udp {
        return Err(reader.at(
            &protocol,
            "run = \"connect\" opens TCP connections: UDP has none",
        ));
    }
    let per_second = match table.take::<String>(reader, "rate")? {
        Some(r) => Some(transactions_per_second(r.get_ref()).ok_or_else(|| {
            reader.at(
                &r,
                format!(
                    "rate '{}' is not connections per second like \"10/s\" (from 0.01 to 1000000)",
                    r.get_ref()
                ),
            )
        })?),
        None => None,
    };
    let seconds = table.duration(reader, DEFAULT_TEST_SECONDS)?;
    Ok((TestKind::Connect(Connect { per_second }), seconds))
}

#[cfg(test)]
mod tests {
    use crate::kinds::Connect;
    use crate::{job_plan, parse, JobPlan, TestKind};
    use linerate_profile::{Action, Repeat};

    const MESH: &str = "name = \"m\"\n\
        [[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n\
        [[host]]\nname = \"b\"\naddress = \"10.0.0.2\"\n\
        [[test]]\nname = \"open\"\nrun = \"connect\"\nduration = \"5s\"\ninterval = \"1m\"\nrate = \"20/s\"\ndscp = \"EF\"\n\
        [[group]]\nname = \"all\"\nhosts = [\"*\"]\ndirections = \"one\"\ntests = [\"open\"]\n";

    /// The file's table becomes a light TCP test whose jobs connect and close at the
    /// rate, marked, timed by the connect.
    #[test]
    fn a_connect_test_opens_and_closes_at_its_rate() {
        let mesh = parse("m.toml", MESH).unwrap();
        let test = &mesh.tests[0];
        assert_eq!(
            test.kind,
            TestKind::Connect(Connect {
                per_second: Some(20.0)
            })
        );
        assert!(!test.exclusive, "a probe is light unless the file says so");
        assert_eq!(test.marks.map(|m| m.dscp), Some(46));
        assert_eq!(test.kind.run(), "connect");
        assert_eq!(test.kind.protocol_label(), "tcp");
        assert_eq!(
            test.kind.kind().measure(),
            linerate_model::measure::Measure::Latency
        );
        let jobs = mesh.jobs();
        assert_eq!(jobs.len(), 1, "one way unless the group says both");
        let JobPlan::Profile(profile) = job_plan(&mesh, &jobs[0]) else {
            panic!("a profile")
        };
        let group = &profile.groups[0];
        assert_eq!(group.host.as_deref(), Some("10.0.0.1"));
        let [timed] = group.transactions.as_slice() else {
            panic!("one transaction: {:?}", group.transactions)
        };
        assert_eq!(timed.repeat, Repeat::Duration(5.0));
        assert_eq!(timed.rate, Some(20.0));
        let actions: Vec<&Action> = timed.ops.iter().map(|op| &op.action).collect();
        assert!(
            matches!(actions.as_slice(), [Action::Connect(e), Action::Disconnect] if e.remote.as_deref() == Some("10.0.0.2") && e.nodelay),
            "{actions:?}"
        );
    }

    /// What a connect test cannot take is refused at its place.
    #[test]
    fn a_connect_test_refuses_what_it_cannot_take() {
        for (change, needle) in [
            ("rate = \"20/s\"", "size = \"1k\""),
            ("rate = \"20/s\"", "protocol = \"udp\""),
            ("rate = \"20/s\"", "rate = \"fast\""),
        ] {
            let text = MESH.replace(change, needle);
            let error = parse("m.toml", &text).unwrap_err().to_string();
            assert!(error.starts_with("m.toml:"), "{error}");
            assert!(
                error.contains("size") || error.contains("UDP") || error.contains("fast"),
                "{needle}: {error}"
            );
        }
    }
}
