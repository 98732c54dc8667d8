//! `run = "quic"`: bulk data from the source to the destination over QUIC, as `linerate
//! stream HOST --quic -P N` sends it: TLS 1.3 inside, over UDP, one stream a flow on one
//! connection, from the source's agent to the destination's server, counted where it
//! arrives. Its goodput heads the row, held to its baseline as a TCP stream's is.

use super::{Context, JobPlan, JobSite, Kind, TestKind, Transport};
use crate::model::DEFAULT_TEST_SECONDS;
use crate::reading::{MeshError, Reader, TestTable};
use linerate_model::measure::{Headline, Measure};

/// The most streams one test asks: as many as a TCP stream's flows.
pub const MAX_QUIC_STREAMS: u32 = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct Quic {
    /// Streams on the connection, each a flow.
    pub parallel: u32,
}

impl Kind for Quic {
    fn run(&self) -> &'static str {
        "quic"
    }

    fn transport(&self) -> Transport {
        Transport::Udp
    }

    fn protocol_label(&self) -> &'static str {
        "quic"
    }

    fn measure(&self) -> Measure {
        Measure::Goodput
    }

    fn headline(&self) -> Headline {
        Headline::Goodput
    }

    /// Throughput: another test beside it would take its share.
    fn exclusive_by_default(&self) -> bool {
        true
    }

    fn plan(&self, site: &JobSite) -> JobPlan {
        // What the agent's client job reads (drivers' `client_job::Spec`).
        JobPlan::Source {
            kind: "client",
            spec: serde_json::json!({
                "server": site.dst.address,
                "seconds": site.seconds,
                "test": "quic",
                "parallel": self.parallel,
            }),
        }
    }
}

/// A QUIC stream's options: `parallel` streams (1 to 64) for its `duration`.
pub(super) fn read(
    reader: &Reader,
    table: &mut TestTable,
    _: &Context,
) -> Result<(TestKind, f64), MeshError> {
    let parallel = match table.take::<u32>(reader, "parallel")? {
        Some(p) if (1..=MAX_QUIC_STREAMS).contains(p.get_ref()) => *p.get_ref(),
        Some(p) => {
            return Err(reader.at(
                &p,
                format!(
                    "parallel {} must be between 1 and {MAX_QUIC_STREAMS}",
                    p.get_ref()
                ),
            ))
        }
        None => 1,
    };
    let seconds = table.duration(reader, DEFAULT_TEST_SECONDS)?;
    Ok((TestKind::Quic(Quic { parallel }), seconds))
}

#[cfg(test)]
mod tests {
    use crate::kinds::Quic;
    use crate::{job_plan, parse, JobPlan, TestKind};
    use linerate_model::measure::Measure;

    const MESH: &str = "name = \"m\"\n\
        [[host]]\nname = \"a\"\naddress = \"10.0.0.1:5201\"\n\
        [[host]]\nname = \"b\"\naddress = \"10.0.0.2:5201\"\n\
        [[test]]\nname = \"q\"\nrun = \"quic\"\nduration = \"8s\"\ninterval = \"1h\"\nparallel = 4\n\
        [[group]]\nname = \"all\"\nhosts = [\"*\"]\ntests = [\"q\"]\n";

    /// The file's table becomes a QUIC stream the source's agent runs against the
    /// destination's server, its streams and length as given, exclusive as throughput is.
    #[test]
    fn a_quic_test_asks_the_sources_agent_for_its_streams() {
        let mesh = parse("m.toml", MESH).unwrap();
        let test = &mesh.tests[0];
        assert_eq!(test.kind, TestKind::Quic(Quic { parallel: 4 }));
        assert_eq!((test.seconds, test.exclusive), (8.0, true));
        assert_eq!(test.kind.protocol_label(), "quic");
        assert_eq!(test.kind.kind().measure(), Measure::Goodput);
        let jobs = mesh.jobs();
        assert_eq!(jobs.len(), 2, "both ways in a full mesh");
        for job in &jobs {
            let JobPlan::Source {
                kind: "client",
                spec,
            } = job_plan(&mesh, job)
            else {
                panic!("a client test")
            };
            assert_eq!(spec["test"], "quic");
            assert_eq!(spec["parallel"], 4);
            assert_eq!(spec["seconds"], 8.0);
            assert_eq!(spec["server"], mesh.hosts[job.dst].address.as_str());
        }
    }

    /// What a QUIC test cannot take is refused at its place, in one line.
    #[test]
    fn a_quic_test_refuses_what_it_cannot_take() {
        for (change, needle) in [
            ("parallel = 4", "parallel = 65"),
            ("parallel = 4", "rate = \"1G\""),
            ("parallel = 4", "dscp = \"EF\""),
            ("duration = \"8s\"", "duration = \"0s\""),
        ] {
            let error = parse("m.toml", &MESH.replace(change, needle))
                .unwrap_err()
                .to_string();
            let key = needle.split(' ').next().unwrap();
            assert!(error.starts_with("m.toml:"), "{error}");
            assert!(error.contains(key), "{needle}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
