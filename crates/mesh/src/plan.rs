//! What a mesh's jobs are, before anything runs them: the profile (or RPM test) each job
//! is ([`job_plan`]), and the figures of a schedule simulated on a clock of its own
//! ([`summary`], what `linerate mesh plan` prints).

use crate::kinds::JobSite;
pub use crate::kinds::{address_of, reflector_of, trace_source_port, JobPlan};
use crate::model::{Job, Mesh};
use crate::schedule::simulate;

/// What runs `job`: its test's kind says.
pub fn job_plan(mesh: &Mesh, job: &Job) -> JobPlan {
    let test = &mesh.tests[job.test];
    let site = JobSite {
        mesh: &mesh.name,
        test: &test.name,
        seconds: test.seconds,
        marks: test.marks,
        src: &mesh.hosts[job.src],
        dst: &mesh.hosts[job.dst],
    };
    test.kind.kind().plan(&site)
}

/// A schedule's figures per test.
#[derive(Debug, Clone, PartialEq)]
pub struct TestPlan {
    /// The test's index in the mesh.
    pub test: usize,
    pub jobs: usize,
    /// The rows a run of each of its jobs makes: one a job, or for a test that fans
    /// out, one per receiver.
    pub rows: usize,
    /// Exclusive tests: the rounds of a cycle, and how long the first cycle takes.
    pub rounds: Option<u32>,
    pub cycle_s: Option<f64>,
}

/// An exclusive job's place in the first cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub job: Job,
    pub start_s: f64,
    pub end_s: f64,
}

/// What `mesh plan` shows: the jobs, each test's figures, and the first cycle of the
/// exclusive tests, from the scheduler run on simulated time.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSummary {
    pub jobs: usize,
    pub tests: Vec<TestPlan>,
    /// By start time.
    pub first_cycle: Vec<Slot>,
}

/// The plan of one cycle, each job taking its test's time plus `setup_s`.
pub fn summary(mesh: &Mesh, setup_s: f64) -> PlanSummary {
    let simulation = simulate(mesh, 1, |job| mesh.tests[job.test].seconds + setup_s);
    let (jobs, placed) = (&simulation.jobs, &simulation.placed);
    let mut tests = Vec::new();
    for (index, test) in mesh.tests.iter().enumerate() {
        let count = jobs.iter().filter(|j| j.test == index).count();
        if count == 0 {
            continue;
        }
        let first: Vec<_> = placed
            .iter()
            .filter(|p| p.cycle == 1 && jobs[p.job].test == index)
            .collect();
        let start = first.iter().map(|p| p.start).fold(f64::INFINITY, f64::min);
        let end = first.iter().map(|p| p.end).fold(0.0, f64::max);
        let rounds = jobs
            .iter()
            .filter(|j| j.test == index)
            .map(|j| j.round)
            .max()
            .unwrap_or(0)
            + 1;
        let rows = jobs
            .iter()
            .filter(|j| j.test == index)
            .map(|j| mesh.receivers(j).len())
            .sum();
        tests.push(TestPlan {
            test: index,
            jobs: count,
            rows,
            rounds: test.exclusive.then_some(rounds),
            cycle_s: (test.exclusive && !first.is_empty()).then_some(end - start),
        });
    }
    let mut first_cycle: Vec<Slot> = placed
        .iter()
        .filter(|p| p.cycle == 1 && mesh.tests[jobs[p.job].test].exclusive)
        .map(|p| Slot {
            job: jobs[p.job],
            start_s: p.start,
            end_s: p.end,
        })
        .collect();
    first_cycle.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    PlanSummary {
        jobs: jobs.len(),
        tests,
        first_cycle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_profile::Repeat;
    use std::time::Duration;

    fn mesh(text: &str) -> Mesh {
        crate::parse("m.toml", text).unwrap()
    }

    const FOUR: &str = r#"
name = "m"
[[host]]
name = "a"
address = "10.0.0.1:5201"
[[host]]
name = "b"
address = "10.0.0.2:5201"
[[host]]
name = "c"
address = "10.0.0.3:5201"
[[host]]
name = "d"
address = "10.0.0.4:5201"
[[test]]
name = "tput"
run = "stream"
duration = "10s"
interval = "4h"
[[test]]
name = "lat"
run = "rr"
duration = "5s"
interval = "1m"
[[test]]
name = "rpm"
run = "rpm"
duration = "8s"
interval = "1h"
[[group]]
name = "all"
tests = ["tput", "lat", "rpm"]
"#;

    /// Four hosts both ways: 12 jobs a test; the exclusive stream needs 6 rounds of 11 s,
    /// no host in two jobs of one round, and the cycle is those rounds end to end.
    #[test]
    fn a_plan_of_four_hosts_has_six_rounds_each_its_pairs_apart() {
        let mesh = mesh(FOUR);
        let plan = summary(&mesh, 1.0);
        assert_eq!(plan.jobs, 36);
        let tput = plan
            .tests
            .iter()
            .find(|t| mesh.tests[t.test].name == "tput")
            .unwrap();
        assert_eq!((tput.jobs, tput.rounds), (12, Some(6)));
        assert!((tput.cycle_s.unwrap() - 66.0).abs() < 1e-9, "{tput:?}");
        let lat = plan
            .tests
            .iter()
            .find(|t| mesh.tests[t.test].name == "lat")
            .unwrap();
        assert_eq!((lat.rounds, lat.cycle_s), (None, None));
        let stream: Vec<&Slot> = plan
            .first_cycle
            .iter()
            .filter(|s| mesh.tests[s.job.test].name == "tput")
            .collect();
        assert_eq!(stream.len(), 12);
        for (i, a) in stream.iter().enumerate() {
            for b in &stream[i + 1..] {
                let overlap = a.start_s < b.end_s && b.start_s < a.end_s;
                let shared = [a.job.src, a.job.dst]
                    .iter()
                    .any(|h| *h == b.job.src || *h == b.job.dst);
                assert!(!(overlap && shared), "{a:?} {b:?}");
            }
        }
    }

    /// A stream job is a profile of one group on the source's agent that connects to the
    /// destination's; an rr job times the transaction after its connect; an RPM job is
    /// no profile but the destination's agent and the legs.
    #[test]
    fn each_kind_of_test_is_planned_as_its_own_profile() {
        let mesh = mesh(FOUR);
        let jobs = mesh.jobs();
        let of = |name: &str| {
            let job = jobs
                .iter()
                .find(|j| mesh.tests[j.test].name == name && j.src == 0 && j.dst == 1)
                .unwrap();
            job_plan(&mesh, job)
        };
        let JobPlan::Profile(stream) = of("tput") else {
            panic!("a profile")
        };
        let group = &stream.groups[0];
        assert_eq!(group.host.as_deref(), Some("10.0.0.1:5201"));
        assert_eq!(group.transactions.len(), 3);
        let JobPlan::Profile(rr) = of("lat") else {
            panic!("a profile")
        };
        assert_eq!(rr.groups[0].transactions[1].ops.len(), 2);
        assert!(matches!(
            rr.groups[0].transactions[1].repeat,
            Repeat::Duration(s) if s == 5.0
        ));
        assert_eq!(
            of("rpm"),
            JobPlan::Rpm {
                remote: "10.0.0.2:5201".into(),
                leg: Duration::from_secs(8),
                tls: true,
                max_connections: 16,
            }
        );
    }
}
