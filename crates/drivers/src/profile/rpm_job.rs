//! RPM between two agents (a mesh's `run = "rpm"`): the controller asks the source's agent
//! to run `linerate rpm`; the source dials the destination's agent with the key, which
//! serves the draft's endpoints on a port of its own for the source's address alone; the
//! loads and probes cross between the two hosts and are counted where they arrive, as
//! `linerate rpm` counts them against `serve --http`.
//!
//! Nobody is dialed on a name alone: the source dials the destination's agent as it dials
//! a profile's peers (`group::may_dial`: any host proving the key, or without a key only
//! the requester), and
//! the HTTP connections go only to the port that agent announced over that link, the
//! certificate pinned to the fingerprint it announced there.

use super::link::Link;
use linerate_proto::agent::{AgentReply, AgentRequest, Seconds};
use linerate_proto::auth::Key;
use linerate_report::rpm::RpmReport;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

/// What an RPM test asks of its source.
#[derive(Debug, Clone, PartialEq)]
pub struct RpmJob {
    /// The destination's agent (`host`, `host:port`).
    pub remote: String,
    /// Each direction's time limit.
    pub leg: Duration,
    pub tls: bool,
    pub max_connections: u32,
    /// Where the test's connections leave from (a mesh host's `source`, `source_dev`).
    pub source: Option<linerate_model::Source>,
}

/// The most loading connections a source opens.
pub const MAX_LOADS: u32 = linerate_proto::agent::MAX_RPM_LOADS;

/// How long the destination's server lives beyond the two directions (the configuration,
/// the idle phase, set-up).
pub(crate) const SERVE_MARGIN_S: f64 = 30.0;

/// Why an RPM request cannot be taken: out of this server's bounds.
pub(crate) fn check(job: &RpmJob, max_duration_s: f64) -> Result<(), String> {
    let whole = job.leg.as_secs_f64() * 2.0;
    if !(1.0..=max_duration_s).contains(&whole) {
        return Err(format!(
            "an RPM test of 2 x {:.0} s is outside this server's 1 to {max_duration_s:.0} s (--max-duration)",
            job.leg.as_secs_f64()
        ));
    }
    // The number of loading connections is bounded where a request is decoded
    // (linerate_proto::agent::Loads).
    Ok(())
}

/// The destination's part: an RPM server on `own`'s address (the one the source
/// reached), serving `requester` alone, each request at most `limit_s`.
pub(crate) fn serve_for(
    own: IpAddr,
    requester: IpAddr,
    limit_s: f64,
    tls: Option<&crate::secure::ServerTls>,
) -> Result<linerate_rpm::server::HttpServer, String> {
    let limits = linerate_rpm::server::Limits {
        max_connections: 256,
        max_per_client: 256,
        max_request: Duration::from_secs_f64(limit_s),
        only_from: Some(requester),
        ..Default::default()
    };
    linerate_rpm::server::start(
        SocketAddr::new(own, 0),
        tls.map(|t| t.config.clone()),
        limits,
    )
    .map_err(|e| format!("cannot serve RPM: {e:#}"))
}

/// What the source needs to reach the destination's agent.
pub(crate) struct SourcePolicy {
    pub requester: IpAddr,
    pub key: Option<Key>,
}

/// Why the source's part failed, and whether the destination is to blame.
#[derive(Debug)]
pub(crate) struct SourceError {
    pub reason: String,
    /// The destination (as the request named it), when it could not be reached or used:
    /// dialed, proved, asked to serve, or its server reached.
    pub unreachable: Option<String>,
}

/// The source's part, on a thread of its own: dials the destination's agent, has it
/// serve, runs the client against it. Its one message is the report or why not.
pub(crate) fn start_source(
    job: RpmJob,
    policy: SourcePolicy,
    cancel: Arc<AtomicBool>,
) -> std::io::Result<Receiver<Result<RpmReport, SourceError>>> {
    let (sender, receiver) = channel();
    std::thread::Builder::new()
        .name("linerate-rpm".into())
        .spawn(move || {
            // Every failure of the source's part is on the way to the destination or at
            // it, but a certificate this host could not build.
            let outcome = run_source(&job, &policy, cancel).map_err(|reason| SourceError {
                unreachable: (!reason.starts_with("TLS: ")).then(|| job.remote.clone()),
                reason,
            });
            let _ = sender.send(outcome);
        })?;
    Ok(receiver)
}

fn run_source(
    job: &RpmJob,
    policy: &SourcePolicy,
    cancel: Arc<AtomicBool>,
) -> Result<RpmReport, String> {
    let addr = super::resolve(&job.remote).map_err(|e| format!("{}: {e}", job.remote))?;
    super::group::may_dial(addr, policy.requester, policy.key.is_some())?;
    let timeout = Duration::from_secs(5);
    let (mut link, _) =
        Link::dial(addr, timeout, policy.key.as_ref()).map_err(|e| format!("{addr}: {e}"))?;
    let limit_s = Seconds::clamped(job.leg.as_secs_f64() * 2.0 + SERVE_MARGIN_S);
    link.send(&AgentRequest::RpmServe {
        limit_s,
        tls: job.tls,
    })
    .map_err(|e| format!("{addr}: {e}"))?;
    let (port, fingerprint) = match link.recv::<AgentReply>(timeout * 2) {
        Ok(Some(AgentReply::RpmReady {
            port,
            tls_fingerprint,
        })) => (port, tls_fingerprint),
        Ok(Some(AgentReply::Error { reason, .. })) => return Err(format!("{addr}: {reason}")),
        Ok(_) => return Err(format!("{addr}: did not serve RPM in time")),
        Err(e) => return Err(format!("{addr}: {e}")),
    };
    let served = SocketAddr::new(addr.ip(), port);
    let tls = match (job.tls, fingerprint) {
        (false, _) => None,
        (true, Some(fingerprint)) => Some(
            linerate_rpm::tls::checked(&linerate_tls::verify::Trust::Pinned(fingerprint))
                .map_err(|e| format!("TLS: {e}"))?,
        ),
        (true, None) => return Err(format!("{addr}: served RPM without a certificate")),
    };
    let scheme = if job.tls { "https" } else { "http" };
    let mut options =
        linerate_rpm::client::Options::new(format!("{scheme}://{served}/.well-known/nq"), tls);
    options.target = job.remote.clone();
    options.leg_limit = job.leg;
    options.max_connections = job.max_connections as usize;
    options.cancel = Some(cancel);
    if let Some(source) = &job.source {
        options.bind = source.address;
        options.bind_device = source.device.clone();
    }
    // The link stays open while the client runs: the destination serves while it is.
    let report = linerate_rpm::client::run(&options, &mut |_| {}).map_err(|e| format!("{e:#}"));
    drop(link);
    report
}

/// An agent's report, checked against what was asked: an interval a second at most in
/// each direction's time (a report past that is not one this test made).
pub(crate) fn within_bounds(report: RpmReport, job: &RpmJob) -> Result<RpmReport, String> {
    let most = job.leg.as_secs_f64().ceil() as usize + 2;
    for leg in [&report.download, &report.upload] {
        if leg.intervals.len() > most || leg.connections > job.max_connections as usize {
            return Err(format!(
                "an RPM report out of bounds: {} intervals and {} connections in the {} (at most {most} and {})",
                leg.intervals.len(),
                leg.connections,
                leg.direction,
                job.max_connections
            ));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(leg_s: f64, max_connections: u32) -> RpmJob {
        RpmJob {
            remote: "10.0.0.2".into(),
            leg: Duration::from_secs_f64(leg_s),
            tls: true,
            max_connections,
            source: None,
        }
    }

    /// Both directions must fit the server's --max-duration, and the loads its bound.
    #[test]
    fn an_rpm_request_is_held_to_the_servers_bounds() {
        assert_eq!(check(&job(20.0, 16), 300.0), Ok(()));
        let long = check(&job(200.0, 16), 300.0).unwrap_err();
        assert!(long.contains("--max-duration"), "{long}");
        assert!(check(&job(0.2, 16), 300.0).is_err());
    }
}
