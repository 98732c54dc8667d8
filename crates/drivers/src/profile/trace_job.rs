//! A trace from an agent (a mesh's `run = "trace"`): the controller asks the source's
//! agent which way its packets go to the destination's address; the agent runs
//! `linerate trace`'s prober on a thread of its own and answers with its report.
//!
//! Nobody is probed on a name alone where that matters: with a key, the requester proved
//! it and may name any target (a router cannot prove anything, and a trace is small:
//! at most 16 flows of 64 distances, one probe every 5 ms); without a key, only the
//! requester's own address, as a profile's peers.

use linerate_model::clock::UnixTime;
use linerate_proto::agent::{TraceFlows, TraceHops};
use linerate_proto::text::PeerText;
use linerate_report::document::Document;
use linerate_report::trace::TraceReport;
use linerate_trace::net::{self, Protocol, TraceError};
use linerate_trace::prober::Plan;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

/// Between two probes, and how long each waits for its answer.
pub const GAP: Duration = Duration::from_millis(5);
pub const WAIT: Duration = Duration::from_secs(1);

/// What a trace asks of its source.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The destination's address (or name), no port.
    pub target: String,
    pub probe: linerate_model::TraceProbe,
    pub flows: u16,
    pub max_hops: u8,
    pub port: Option<u16>,
    /// The first flow's source port, where free.
    pub source_port: Option<u16>,
    /// Each hop's MTU too.
    pub mtu: bool,
    /// Where the probes leave from (a mesh host's `source`, `source_dev`).
    pub source: Option<linerate_model::Source>,
}

impl TraceJob {
    /// The longest a trace may take: every probe sent, the last one's wait.
    pub fn longest(&self) -> Duration {
        GAP * u32::from(self.flows) * u32::from(self.max_hops) + WAIT
    }

    fn protocol(&self) -> Protocol {
        match self.probe {
            linerate_model::TraceProbe::Udp => Protocol::Udp,
            linerate_model::TraceProbe::Tcp => Protocol::Tcp,
            linerate_model::TraceProbe::Icmp => Protocol::Icmp,
        }
    }
}

pub(crate) use super::rpm_job::SourceError;

/// The source's part: the target resolved and allowed, the sockets opened (a missing
/// privilege is said before anything is sent), then the trace on a thread of its own;
/// its one message is the report or why not.
pub(crate) fn start_source(
    job: TraceJob,
    requester: IpAddr,
    keyed: bool,
    cancel: Arc<AtomicBool>,
) -> Result<Receiver<Result<TraceReport, SourceError>>, SourceError> {
    let failed = |reason: String| SourceError {
        reason,
        unreachable: None,
    };
    let addr = super::resolve(&job.target).map_err(|e| SourceError {
        reason: format!("{}: {e}", job.target),
        unreachable: Some(job.target.clone()),
    })?;
    super::group::may_dial(addr, requester, keyed).map_err(failed)?;
    let protocol = job.protocol();
    let options = net::Options {
        target: addr.ip(),
        protocol,
        port: job.port.unwrap_or(protocol.default_port()),
        plan: Plan {
            flows: job.flows,
            queries: 1,
            first_ttl: 1,
            max_ttl: job.max_hops,
            gap_ns: GAP.as_nanos() as u64,
            wait_ns: WAIT.as_nanos() as u64,
        },
        bind: job.source.as_ref().and_then(|s| s.address),
        device: job.source.as_ref().and_then(|s| s.device.clone()),
        source_port: job.source_port,
        mtu: job.mtu,
    };
    let said = |e: TraceError| failed(format!("trace to {}: {e}", job.target));
    let opened = net::open(&options).map_err(said)?;
    let (tell, outcome) = mpsc::channel();
    let target = job.target.clone();
    std::thread::Builder::new()
        .name("agent-trace".into())
        .spawn(move || {
            let started_at = UnixTime::now().seconds();
            let result = net::trace(opened, &options, &cancel)
                .map(|traced| linerate_trace::report(&target, &options, &traced, started_at))
                .map_err(|e| SourceError {
                    reason: format!("trace to {target}: {e}"),
                    unreachable: None,
                });
            let _ = tell.send(result);
        })
        .map_err(|e| failed(format!("cannot start a trace: {e}")))?;
    Ok(outcome)
}

/// An agent's report, checked against what was asked: no more flows, distances or
/// answers than the request allows; its words made printable and bounded.
pub(crate) fn within_bounds(
    mut report: TraceReport,
    job: &TraceJob,
) -> Result<TraceReport, String> {
    let out_of_bounds = report.paths.len() > usize::from(job.flows)
        || report.hops.len() > usize::from(job.max_hops)
        || report.paths.iter().any(|p| {
            p.hops.len() > usize::from(job.max_hops) || p.hops.iter().any(|h| h.answers.len() > 3)
        })
        || report
            .hops
            .iter()
            .any(|h| h.addresses.len() > usize::from(job.flows) * 3);
    if out_of_bounds {
        return Err(format!(
            "a trace report out of bounds: {} flows, {} distances (asked {} flows, {} hops)",
            report.paths.len(),
            report.hops.len(),
            job.flows,
            job.max_hops
        ));
    }
    // Its words reach rows, logs and terminals: cut and escaped as every peer's text is.
    let printable = |text: &mut String| *text = linerate_proto::text::printable(text);
    for text in [
        &mut report.test,
        &mut report.target,
        &mut report.address,
        &mut report.protocol,
    ] {
        printable(text);
    }
    report.warnings.truncate(8);
    report.warnings.iter_mut().for_each(printable);
    for path in &mut report.paths {
        for answer in path
            .hops
            .iter_mut()
            .flat_map(|h| h.answers.iter_mut().flatten())
        {
            printable(&mut answer.address);
            printable(&mut answer.kind);
        }
    }
    for hop in &mut report.hops {
        for address in &mut hop.addresses {
            printable(&mut address.address);
            address.flows.truncate(usize::from(job.flows));
        }
    }
    report.host = None;
    Ok(report)
}

/// A trace as a request carries it, each value bounded where it is decoded (an agent
/// sends at most flows times distances probes).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    target: PeerText,
    probe: linerate_model::TraceProbe,
    flows: TraceFlows,
    max_hops: TraceHops,
    /// The destination port of UDP and TCP probes; absent: traceroute's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source_port: Option<u16>,
    /// Each hop's MTU too (UDP probes only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    mtu: bool,
}

impl Spec {
    fn read(spec: &serde_json::Value) -> Result<Spec, String> {
        Spec::deserialize(spec).map_err(|e| format!("a trace request that does not read: {e}"))
    }

    fn job(self, source: Option<linerate_model::Source>) -> TraceJob {
        TraceJob {
            target: self.target.into_string(),
            probe: self.probe,
            flows: self.flows.into(),
            max_hops: self.max_hops.into(),
            port: self.port,
            source_port: self.source_port,
            mtu: self.mtu,
            source,
        }
    }
}

/// A trace as a kind of source job: which way the source's packets go to the
/// destination's address.
pub static KIND: super::source_job::SourceKind = super::source_job::SourceKind {
    name: "trace",
    what: "trace",
    read: |asked| Ok(Box::new(Spec::read(&asked.spec)?.job(asked.source))),
    heartbeat: None,
    // Every probe and its wait, set-up; past it the run is abandoned.
    limit: |spec| Ok(Spec::read(spec)?.job(None).longest() + Duration::from_secs(30)),
    answer: |spec, report, target| {
        let job = Spec::read(spec)?.job(None);
        let report = TraceReport::deserialize(report)
            .map_err(|e| format!("a trace report that does not read: {e}"))?;
        let mut report = within_bounds(report, &job)?;
        report.target = target.to_string();
        Ok(Document::Trace(Box::new(report)))
    },
    gather: None,
};

impl super::source_job::SourceJob for TraceJob {
    fn what(&self) -> &'static str {
        "trace"
    }

    /// (The flows and distances arrive bounded by their types; the source is checked
    /// here.)
    fn check(&self, _: &super::source_job::Bounds) -> Result<(), String> {
        super::source_job::check_source(self.source.as_ref())
    }

    fn start(
        self: Box<Self>,
        requester: IpAddr,
        key: Option<linerate_proto::auth::Key>,
        stop: Arc<AtomicBool>,
    ) -> Result<Box<dyn super::source_job::SourceRun>, SourceError> {
        let outcome = start_source(*self, requester, key.is_some(), stop)?;
        Ok(Box::new(super::source_job::ThreadRun {
            what: "trace",
            outcome,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace's flows and distance are refused out of bounds where its request is read
    /// (an agent sends their product in probes); one within them arrives whole.
    #[test]
    fn a_trace_spec_is_bounded_where_it_is_read() {
        let asked = |flows: u32, hops: u32| {
            Spec::read(&serde_json::json!({
                "target": "192.0.2.1", "probe": "udp", "flows": flows, "max_hops": hops,
            }))
        };
        assert!(asked(17, 30).is_err());
        assert!(asked(0, 30).is_err());
        assert!(asked(4, 65).is_err());
        assert!(asked(4, 0).is_err());
        assert!(asked(70_000, 30).is_err());
        let job = asked(16, 64).unwrap().job(None);
        assert_eq!(
            (job.flows, job.max_hops, job.port, job.source_port),
            (16, 64, None, None)
        );
        let gre =
            serde_json::json!({"target": "192.0.2.1", "probe": "gre", "flows": 1, "max_hops": 30});
        assert!(Spec::read(&gre).is_err());
        let limit = (KIND.limit)(&serde_json::json!({
            "target": "192.0.2.1", "probe": "icmp", "flows": 4, "max_hops": 20,
        }))
        .unwrap();
        assert_eq!(limit, GAP * 80 + WAIT + Duration::from_secs(30));
    }
    use linerate_report::trace::{Answer, FlowHop, FlowPath, TRACE};

    fn job() -> TraceJob {
        TraceJob {
            target: "10.0.0.2".into(),
            probe: linerate_model::TraceProbe::Udp,
            flows: 2,
            max_hops: 4,
            port: None,
            source_port: Some(61_000),
            source: None,
            mtu: false,
        }
    }

    fn report(flows: u16, hops: u8, address: &str) -> TraceReport {
        let paths: Vec<FlowPath> = (0..flows)
            .map(|flow| FlowPath {
                flow,
                source_port: 61_000 + flow,
                hops: (1..=hops)
                    .map(|ttl| FlowHop {
                        ttl,
                        answers: vec![Some(Answer {
                            address: address.into(),
                            rtt_ms: 1.0,
                            kind: "time exceeded".into(),
                        })],
                    })
                    .collect(),
                reached_ttl: None,
                pmtu: Vec::new(),
            })
            .collect();
        let (merged, distinct_paths) = TraceReport::merge(&paths);
        TraceReport {
            test: TRACE.into(),
            started_at: 0.0,
            target: "b".into(),
            address: "10.0.0.2".into(),
            protocol: "udp".into(),
            port: Some(Protocol::Udp.default_port()),
            flows,
            queries: 1,
            first_ttl: 1,
            max_ttl: hops,
            duration_s: 0.1,
            sent: 0,
            answered: 0,
            unmatched: 0,
            paths,
            hops: merged,
            reached: false,
            distinct_paths,
            warnings: vec!["line\nforged".into(); 100],
            host: None,
        }
    }

    /// An agent's report is held to the flows and distances asked, and its words are
    /// escaped and few before they reach a row, a log or a terminal.
    #[test]
    fn an_agents_trace_report_is_bounded_and_printable() {
        let checked = within_bounds(report(2, 4, "10.0.0.1\u{1b}[2J"), &job()).unwrap();
        assert_eq!(checked.warnings.len(), 8);
        assert!(!checked.warnings[0].contains('\n'));
        let address = &checked.paths[0].hops[0].answers[0]
            .as_ref()
            .unwrap()
            .address;
        assert!(!address.contains('\u{1b}'), "{address:?}");
        assert!(!checked.hops[0].addresses[0].address.contains('\u{1b}'));
        assert!(within_bounds(report(3, 4, "10.0.0.1"), &job()).is_err());
        assert!(within_bounds(report(2, 5, "10.0.0.1"), &job()).is_err());
    }

    /// The longest a trace takes bounds the controller's wait: every probe and a wait.
    #[test]
    fn a_traces_longest_is_its_probes_and_one_wait() {
        assert_eq!(job().longest(), GAP * 8 + WAIT);
    }
}
