//! The controller of a profile run (`linerate run`): it hands each agent its groups,
//! estimates each agent's clock offset, announces one start time, collects the results
//! and merges them. Groups without a host run on the controller's own in-process agent.

use super::link::Link;
use super::rpm_job::{self, RpmJob};
use crate::server::LocalServer;
use linerate_model::clock::UnixTime;
use linerate_profile::{Profile, Repeat};
use linerate_proto::agent::{
    estimate_offset, AgentReply, AgentRequest, ClockOffset, ClockSample, GroupPart, Loads, Seconds,
};
use linerate_report::profile::{GroupResult, HostResult, ProfileReport};
use linerate_report::rpm::RpmReport;
use linerate_report::HostFacts;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The name of the controller's own host in results.
pub const LOCAL: &str = "local";

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// How far ahead of the announcement the start lies (beyond twice the slowest round
    /// trip), so every agent has its threads waiting.
    pub lead: Duration,
    /// An agent silent this long is lost.
    pub control_timeout: Duration,
    /// The longest the run may take; `None`: the profile's timed transactions plus two
    /// minutes.
    pub limit: Option<Duration>,
    /// Clock samples per agent.
    pub clock_samples: usize,
    /// Progress lines on stderr.
    pub log: bool,
    /// The agents' key: proven to each agent, and held by the controller's own agent.
    pub key: Option<linerate_proto::auth::Key>,
    /// Where STAMP windows keep their links to agents between windows; `None`: a link
    /// each.
    pub links: Option<Arc<super::link::LinkPool>>,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            lead: Duration::from_millis(500),
            control_timeout: Duration::from_secs(5),
            limit: None,
            clock_samples: 8,
            log: false,
            key: None,
            links: None,
        }
    }
}

/// Why a run could not start (once started, problems end it with an incomplete result).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("agent {host}: {why}")]
    Agent {
        host: String,
        why: String,
        /// The peer the agent named as the cause (it could not reach or use it), as the
        /// profile named it.
        unreachable: Option<String>,
    },
    /// The link to an agent that had answered broke under way (the agent restarted or
    /// went away, a connection was reset): this job failed; whether the host is down is
    /// for the next job that dials it to find.
    #[error("agent {host}: {why}")]
    Lost { host: String, why: String },
    #[error("cannot start the local agent: {0}")]
    Local(std::io::Error),
}

struct Agent {
    host: String,
    link: Option<Link>,
    facts: Option<HostFacts>,
    clock: ClockOffset,
    parts: Vec<GroupPart>,
    last_heard: Instant,
    released_ns: Option<u64>,
    groups: Option<Vec<GroupResult>>,
    observe: Option<Box<linerate_model::observe::Observation>>,
    failure: Option<String>,
}

/// The longest run a profile asks for, plus margin.
fn default_limit(profile: &Profile) -> Duration {
    let longest = profile
        .groups
        .iter()
        .map(|g| {
            g.transactions
                .iter()
                .map(|t| match t.repeat {
                    Repeat::Duration(s) => s,
                    Repeat::Iterations(_) => 0.0,
                })
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    Duration::from_secs_f64(longest + 120.0)
}

fn agent_error(host: &str, why: impl ToString) -> RunError {
    RunError::Agent {
        host: host.to_string(),
        why: why.to_string(),
        unreachable: None,
    }
}

/// An agent's error reply as a run's error, with the peer it blames.
fn agent_refused(
    host: &str,
    reason: linerate_proto::text::PeerText,
    unreachable: Option<linerate_proto::text::PeerText>,
) -> RunError {
    RunError::Agent {
        host: host.to_string(),
        why: reason.into_string(),
        unreachable: unreachable.map(|p| p.into_string()),
    }
}

/// Runs a profile to its end, or to the loss of an agent (an incomplete result).
pub fn run(
    profile: &Profile,
    options: &RunOptions,
    stop: &AtomicBool,
) -> Result<ProfileReport, RunError> {
    let limit = options.limit.unwrap_or_else(|| default_limit(profile));
    let mut hosts: Vec<String> = Vec::new();
    for group in &profile.groups {
        let host = group.host.clone().unwrap_or_else(|| LOCAL.into());
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    // The controller's own agent: runs groups without a host, and mirrors connections of
    // local groups without a remote.
    let local = if hosts.iter().any(|h| h == LOCAL) {
        Some(
            LocalServer::start(|config| {
                config.key = options.key.clone();
                config.sendable_files = Arc::new(files_of(profile));
            })
            .map_err(RunError::Local)?,
        )
    } else {
        None
    };
    let result = run_with(
        profile,
        options,
        stop,
        &hosts,
        local.as_ref().map(|l| l.addr),
        limit,
    );
    if let Some(local) = local {
        local.shutdown.store(true, Ordering::Relaxed);
    }
    result
}

/// The files the profile's sendfile operations listed: what its own server may send.
fn files_of(profile: &Profile) -> std::collections::BTreeSet<String> {
    profile
        .groups
        .iter()
        .flat_map(|g| &g.transactions)
        .flat_map(|t| &t.ops)
        .filter_map(|op| match &op.action {
            linerate_profile::Action::Sendfile(send) => Some(&send.files),
            _ => None,
        })
        .flatten()
        .map(|f| f.path.clone())
        .collect()
}

fn run_with(
    profile: &Profile,
    options: &RunOptions,
    stop: &AtomicBool,
    hosts: &[String],
    local: Option<SocketAddr>,
    limit: Duration,
) -> Result<ProfileReport, RunError> {
    let log = |line: String| {
        if options.log {
            eprintln!("{line}");
        }
    };
    let mut agents = Vec::new();
    for host in hosts {
        agents.push(connect_agent(profile, options, host, local, &log)?);
    }
    prepare_all(&mut agents, options, limit)?;
    let slowest = agents.iter().map(|a| a.clock.rtt_ns).max().unwrap_or(0);
    let start_ns = UnixTime::now().nanos() + options.lead.as_nanos() as u64 + 2 * slowest;
    let started_at = start_ns as f64 / 1e9;
    for agent in &mut agents {
        let at = agent.clock.to_agent(start_ns);
        let link = agent.link.as_mut().expect("connected");
        if let Err(e) = link.send(&AgentRequest::Start { at_unix_ns: at }) {
            agent.failure = Some(format!("lost before the start: {e}"));
        }
        agent.last_heard = Instant::now();
    }
    log(format!(
        "started {} group(s) on {} host(s)",
        profile.groups.len(),
        agents.len()
    ));
    let hard_end = Instant::now() + options.lead + limit + Duration::from_secs(30);
    collect(&mut agents, options, stop, hard_end, &log);
    Ok(assemble(profile, agents, start_ns, started_at))
}

/// Whether the agent `host` answers this controller now: dialed, greeted and, holding
/// the key, proven both ways, then left. A mesh asks it of a host a failed job blamed
/// before it takes the host down: another agent's failure to reach a host (its cause kept
/// from the requester) or one handshake that timed out on a loaded host is not the host
/// being gone.
pub fn agent_answers(host: &str, options: &RunOptions) -> Result<(), String> {
    let addr = super::resolve(host).map_err(|e| e.to_string())?;
    Link::dial(addr, options.control_timeout, options.key.as_ref())
        .map(drop)
        .map_err(|e| format!("{addr}: {e}"))
}

/// Dials the agent `host` (the controller's own for [`LOCAL`]), estimates its clock's
/// offset, and picks the profile's groups it runs.
fn connect_agent(
    profile: &Profile,
    options: &RunOptions,
    host: &str,
    local: Option<SocketAddr>,
    log: &dyn Fn(String),
) -> Result<Agent, RunError> {
    let addr = match (host, local) {
        (LOCAL, Some(addr)) => addr,
        _ => super::resolve(host).map_err(|e| agent_error(host, e))?,
    };
    let (mut link, facts) = Link::dial(addr, options.control_timeout, options.key.as_ref())
        .map_err(|e| agent_error(host, format!("cannot connect to {addr}: {e}")))?;
    let mut samples = Vec::new();
    for seq in 0..options.clock_samples as u64 {
        let sent = UnixTime::now().nanos();
        link.send(&AgentRequest::Ping { seq })
            .map_err(|e| agent_error(host, e))?;
        match link.recv::<AgentReply>(options.control_timeout) {
            Ok(Some(AgentReply::Pong {
                seq: s,
                unix_ns: agent,
            })) if s == seq => samples.push(ClockSample {
                sent_ns: sent,
                agent_ns: agent,
                received_ns: UnixTime::now().nanos(),
            }),
            Ok(Some(AgentReply::Error {
                reason,
                unreachable,
            })) => return Err(agent_refused(host, reason, unreachable)),
            Ok(_) => return Err(agent_error(host, "no answer to a clock ping")),
            Err(e) => return Err(agent_error(host, e)),
        }
    }
    let clock = estimate_offset(&samples).ok_or_else(|| agent_error(host, "no clock samples"))?;
    log(format!(
        "agent {host} ({addr}): {}, clock offset {:+.3} ms (rtt {:.3} ms)",
        facts.hostname,
        clock.offset_ns as f64 / 1e6,
        clock.rtt_ns as f64 / 1e6
    ));
    let parts = profile
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.host.as_deref().unwrap_or(LOCAL) == host)
        .map(|(index, group)| GroupPart {
            index,
            host_label: host.to_string(),
            group: group.clone(),
        })
        .collect();
    Ok(Agent {
        host: host.to_string(),
        link: Some(link),
        facts: Some(facts),
        clock,
        parts,
        last_heard: Instant::now(),
        released_ns: None,
        groups: None,
        observe: None,
        failure: None,
    })
}

/// Hands every agent its groups and waits until each has its peers' mirrors running.
fn prepare_all(
    agents: &mut [Agent],
    options: &RunOptions,
    limit: Duration,
) -> Result<(), RunError> {
    let limit_s = Seconds::clamped(limit.as_secs_f64());
    for agent in agents {
        let link = agent.link.as_mut().expect("connected");
        link.send(&AgentRequest::Prepare {
            parts: agent.parts.clone(),
            limit_s,
        })
        .map_err(|e| agent_error(&agent.host, e))?;
        // Preparing dials every peer of the agent's groups: allow for their answers.
        match link.recv::<AgentReply>(options.control_timeout * 4) {
            Ok(Some(AgentReply::Prepared)) => {}
            Ok(Some(AgentReply::Error {
                reason,
                unreachable,
            })) => return Err(agent_refused(&agent.host, reason, unreachable)),
            Ok(_) => return Err(agent_error(&agent.host, "did not get ready in time")),
            Err(e) => return Err(agent_error(&agent.host, e)),
        }
    }
    Ok(())
}

/// Agents that have neither reported nor failed.
fn pending(agents: &mut [Agent]) -> impl Iterator<Item = &mut Agent> {
    agents
        .iter_mut()
        .filter(|a| a.groups.is_none() && a.failure.is_none())
}

/// Collects every agent's results, aborting the run when the user interrupts, an agent is
/// lost or the run outlasts its limit; agents that do not report after the abort fail.
fn collect(
    agents: &mut [Agent],
    options: &RunOptions,
    stop: &AtomicBool,
    hard_end: Instant,
    log: &dyn Fn(String),
) {
    let mut aborted = false;
    while pending(agents).next().is_some() {
        let must_abort = stop.load(Ordering::Relaxed)
            || Instant::now() >= hard_end
            || agents.iter().any(|a| a.failure.is_some());
        if must_abort && !aborted {
            aborted = true;
            let reason = if stop.load(Ordering::Relaxed) {
                "interrupted".to_string()
            } else if let Some(lost) = agents.iter().find(|a| a.failure.is_some()) {
                format!("agent {} was lost", lost.host)
            } else {
                "the run outlasted its limit".to_string()
            };
            log(format!("aborting the run: {reason}"));
            for agent in pending(agents) {
                if let Some(link) = agent.link.as_mut() {
                    let _ = link.send(&AgentRequest::Abort {
                        reason: reason.as_str().into(),
                    });
                }
            }
        }
        if aborted && Instant::now() >= hard_end + Duration::from_secs(30) {
            for agent in pending(agents) {
                agent.failure = Some("did not report after the abort".into());
            }
            break;
        }
        for agent in pending(agents) {
            poll_agent(agent, options, log);
        }
    }
}

/// Takes what one agent says within a short wait: its release time, its results, or its
/// failure (an error, silence past the control timeout, a lost connection).
fn poll_agent(agent: &mut Agent, options: &RunOptions, log: &dyn Fn(String)) {
    let link = agent.link.as_mut().expect("connected");
    match link.recv::<AgentReply>(Duration::from_millis(20)) {
        Ok(Some(reply)) => {
            agent.last_heard = Instant::now();
            match reply {
                AgentReply::Started { at_unix_ns } => {
                    agent.released_ns = Some(agent.clock.to_controller(at_unix_ns))
                }
                AgentReply::PartResult { groups, observe } => {
                    log(format!("agent {}: finished", agent.host));
                    agent.groups = Some(groups);
                    agent.observe = observe;
                }
                AgentReply::Error { reason, .. } => agent.failure = Some(reason.into()),
                _ => {}
            }
        }
        Ok(None) => {
            let silent = agent.last_heard.elapsed();
            if silent >= options.control_timeout {
                agent.failure = Some(format!("silent for {:.1} s", silent.as_secs_f64()));
            }
        }
        Err(e) => agent.failure = Some(format!("connection lost: {e}")),
    }
    if let Some(failure) = &agent.failure {
        log(format!("agent {}: {failure}", agent.host));
    }
}

fn assemble(
    profile: &Profile,
    agents: Vec<Agent>,
    start_ns: u64,
    started_at: f64,
) -> ProfileReport {
    let mut report = ProfileReport {
        test: linerate_report::profile::PROFILE.into(),
        started_at,
        ..ProfileReport::default()
    };
    let mut groups: Vec<(usize, GroupResult)> = Vec::new();
    let mut lost = Vec::new();
    let released: Vec<u64> = agents.iter().filter_map(|a| a.released_ns).collect();
    for agent in &agents {
        let reported = agent.groups.clone().unwrap_or_default();
        for part in &agent.parts {
            match reported.iter().find(|g| g.name == part.group.name) {
                Some(result) => groups.push((part.index, result.clone())),
                None => groups.push((
                    part.index,
                    GroupResult {
                        name: part.group.name.clone(),
                        host: agent.host.clone(),
                        threads: part.group.threads,
                        failures: vec![format!(
                            "no result: host {} {}",
                            agent.host,
                            agent.failure.as_deref().unwrap_or("did not report")
                        )],
                        ..GroupResult::default()
                    },
                )),
            }
        }
        if let Some(failure) = &agent.failure {
            lost.push(format!("{}: {failure}", agent.host));
        }
        report.hosts.push(HostResult {
            host: agent.host.clone(),
            clock_offset_ms: agent.clock.offset_ns as f64 / 1e6,
            clock_rtt_ms: agent.clock.rtt_ns as f64 / 1e6,
            start_delay_ms: agent
                .released_ns
                .map_or(0.0, |r| (r as f64 - start_ns as f64) / 1e6),
            failure: agent.failure.clone(),
            facts: agent.facts.clone(),
            observe: agent.observe.as_deref().cloned(),
            ..HostResult::default()
        });
    }
    groups.sort_by_key(|(index, _)| *index);
    report.groups = groups.into_iter().map(|(_, g)| g).collect();
    let stopped: usize = report
        .groups
        .iter()
        .map(|g| g.per_thread.iter().filter(|t| t.failure.is_some()).count())
        .sum();
    report.incomplete = if !lost.is_empty() {
        Some(format!(
            "lost {}; the figures cover what the other hosts reported",
            lost.join("; ")
        ))
    } else if stopped > 0 {
        Some(format!(
            "{stopped} thread(s) stopped before the end of their transactions"
        ))
    } else {
        report
            .groups
            .iter()
            .find_map(|g| g.failures.first().cloned())
    };
    let skew = match (released.iter().min(), released.iter().max()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e6,
        _ => 0.0,
    };
    report.summarize(skew);
    report.config.name = profile.name.clone();
    report.config.target = if agents.len() == 1 && agents[0].host == LOCAL {
        "loopback".into()
    } else {
        agents
            .iter()
            .map(|a| a.host.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    report.config.profile = serde_json::to_value(profile).unwrap_or_default();
    report
}

/// Runs an RPM test from the agent at `source` towards `job.remote` (docs/protocol.md): the report, or why the
/// test could not run.
pub fn run_rpm(
    source: &str,
    job: &RpmJob,
    options: &RunOptions,
    stop: &AtomicBool,
) -> Result<RpmReport, RunError> {
    let request = AgentRequest::Rpm {
        remote: job.remote.clone(),
        leg_s: Seconds::clamped(job.leg.as_secs_f64()),
        tls: job.tls,
        max_connections: Loads::new(job.max_connections)
            .map_err(|why| agent_failed(source, why))?,
        source: job.source.clone(),
    };
    // Two directions, the idle phase and set-up; past it the run is abandoned.
    let limit = job.leg * 2 + Duration::from_secs_f64(rpm_job::SERVE_MARGIN_S);
    let report = ask_and_wait(
        source,
        request,
        limit,
        "RPM test",
        (options, None),
        stop,
        |reply| match reply {
            AgentReply::RpmResult { report } => Some(report),
            _ => None,
        },
    )?;
    rpm_job::within_bounds(*report, job).map_err(|why| agent_failed(source, why))
}

/// Runs one job of the source kind `kind` (`stamp`, `trace`, ...) on the agent at
/// `source`, as `spec` asks it, for the destination called `target`: the kind says how
/// long to wait and how often the agent is heard meanwhile, and reads the answer's report
/// into a document held to what was asked. An agent lost is seen after three heartbeats
/// unheard.
pub fn run_source(
    source: &str,
    (kind, spec): (&str, &serde_json::Value),
    (from, target): (Option<linerate_model::Source>, &str),
    options: &RunOptions,
    stop: &AtomicBool,
) -> Result<linerate_report::document::Document, RunError> {
    let failed = |why: String| agent_failed(source, why);
    let kind = super::source_kind(kind)
        .ok_or_else(|| failed(format!("no source job of kind '{kind}' in this build")))?;
    let limit = (kind.limit)(spec).map_err(failed)?;
    let request = AgentRequest::Source {
        kind: linerate_proto::agent::JobKind::try_from(kind.name.to_string()).map_err(failed)?,
        spec: spec.clone(),
        heartbeat_s: kind.heartbeat.map(|h| Seconds::clamped(h.as_secs_f64())),
        source: from,
    };
    let options = RunOptions {
        control_timeout: options
            .control_timeout
            .max(kind.heartbeat.unwrap_or_default() * 3),
        ..options.clone()
    };
    let report = ask_and_wait(
        source,
        request,
        limit,
        kind.what,
        (&options, options.links.as_deref()),
        stop,
        |reply| match reply {
            AgentReply::SourceResult { report } => Some(report),
            _ => None,
        },
    )?;
    (kind.answer)(spec, report, target).map_err(failed)
}

/// One host of a fan-out job as the controller asks it: its agent's address and where
/// its packets leave from or arrive through (`source`, `source_dev`).
pub struct FanoutHost {
    /// Its name, as rows and documents say it.
    pub name: String,
    pub address: String,
    pub source: Option<linerate_model::Source>,
}

/// Runs a fan-out job (multicast): every receiver's agent runs the source kind `receive`
/// and the source's agent `send`, all at once (the sender's request makes it wait until
/// the receivers are ready). Returns the source's failure, or each receiver's document
/// gathered with the source's (or why that receiver failed), in `receivers`' order. A
/// source that fails ends the receivers' waits; `stop` ends them all.
pub fn run_fanout(
    source: &FanoutHost,
    (send, receive): ((&str, &serde_json::Value), (&str, &serde_json::Value)),
    receivers: &[FanoutHost],
    options: &RunOptions,
    stop: &AtomicBool,
) -> Result<Vec<Result<linerate_report::document::Document, RunError>>, RunError> {
    let gather = super::source_kind(receive.0)
        .and_then(|kind| kind.gather)
        .ok_or_else(|| {
            agent_failed(
                &source.address,
                format!("no fan-out receiver of kind '{}' in this build", receive.0),
            )
        })?;
    let abandon = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let (sent, received) = std::thread::scope(|scope| {
        let waits: Vec<_> = receivers
            .iter()
            .map(|host| {
                let abandon = &abandon;
                scope.spawn(move || {
                    let from = (host.source.clone(), host.name.as_str());
                    run_source(&host.address, receive, from, options, abandon)
                })
            })
            .collect();
        let (done, abandon) = (&done, &abandon);
        scope.spawn(move || {
            // The operator's stop reaches the receivers too.
            while !done.load(Ordering::Relaxed) {
                if stop.load(Ordering::Relaxed) {
                    abandon.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let from = (source.source.clone(), source.name.as_str());
        let sent = run_source(&source.address, send, from, options, stop);
        if sent.is_err() {
            abandon.store(true, Ordering::Relaxed);
        }
        let received: Vec<_> = waits
            .into_iter()
            .map(|wait| {
                wait.join().unwrap_or_else(|_| {
                    Err(RunError::Local(std::io::Error::other(
                        "a fan-out receiver's thread panicked",
                    )))
                })
            })
            .collect();
        done.store(true, Ordering::Relaxed);
        (sent, received)
    });
    let sent = sent?;
    Ok(received
        .into_iter()
        .zip(receivers)
        .map(|(document, host)| {
            document.and_then(|d| gather(&sent, d).map_err(|why| agent_failed(&host.address, why)))
        })
        .collect())
}

fn agent_failed(source: &str, why: String) -> RunError {
    RunError::Agent {
        host: source.to_string(),
        why,
        unreachable: None,
    }
}

/// Asks the agent at `source` for `request` and waits, at most `limit`, for the reply
/// `result` picks; heartbeats and other replies keep it waiting, an error or silence of
/// the control timeout ends it, `stop` sends an abort (and still waits for the report
/// the abort brings). With a pool, a link it holds is used first and the link is given
/// back after a job that ended well; a pooled link the agent closed meanwhile (nothing
/// heard on it) is replaced by a fresh one, and the request asked again.
fn ask_and_wait<R>(
    source: &str,
    request: AgentRequest,
    limit: Duration,
    what: &str,
    (options, pool): (&RunOptions, Option<&super::link::LinkPool>),
    stop: &AtomicBool,
    result: impl Fn(AgentReply) -> Option<R>,
) -> Result<R, RunError> {
    let failed = |why: String| agent_failed(source, why);
    let addr = super::resolve(source).map_err(|e| failed(e.to_string()))?;
    let hard_end = Instant::now() + limit;
    let mut pooled = pool.and_then(|p| p.take(addr));
    loop {
        let reused = pooled.is_some();
        let mut link = match pooled.take() {
            Some(link) => link,
            None => {
                Link::dial(addr, options.control_timeout, options.key.as_ref())
                    .map_err(|e| failed(format!("cannot connect to {addr}: {e}")))?
                    .0
            }
        };
        let mut heard = false;
        let asked = link.send(&request).map_err(|e| failed(e.to_string()));
        let waited = asked.and_then(|()| {
            let waiting = Waiting {
                source,
                hard_end,
                what,
                options,
                stop,
            };
            wait_for_reply(&mut link, &waiting, &mut heard, &result)
        });
        match waited {
            Ok((found, clean)) => {
                if let (Some(pool), true) = (pool, clean) {
                    pool.give_back(addr, link);
                }
                return Ok(found);
            }
            // Nothing heard on a link from the pool: the agent closed it while it waited
            // there, and nothing of this request reached it.
            Err(_) if reused && !heard => continue,
            Err(e) => return Err(e),
        }
    }
}

/// What [`wait_for_reply`] waits under.
struct Waiting<'a> {
    source: &'a str,
    hard_end: Instant,
    what: &'a str,
    options: &'a RunOptions,
    stop: &'a AtomicBool,
}

/// Waits on `link` for the reply `result` picks (see [`ask_and_wait`]); with it, whether
/// the link is fit for another job (no abort was sent). `heard` says whether any reply
/// came.
fn wait_for_reply<R>(
    link: &mut Link,
    waiting: &Waiting<'_>,
    heard: &mut bool,
    result: &impl Fn(AgentReply) -> Option<R>,
) -> Result<(R, bool), RunError> {
    let Waiting {
        source,
        hard_end,
        what,
        options,
        stop,
    } = *waiting;
    let failed = |why: String| agent_failed(source, why);
    let mut last_heard = Instant::now();
    let mut aborted = false;
    loop {
        if stop.load(Ordering::Relaxed) && !aborted {
            aborted = true;
            let _ = link.send(&AgentRequest::Abort {
                reason: "interrupted".into(),
            });
        }
        if Instant::now() >= hard_end {
            return Err(failed(format!("the {what} outlasted its limit")));
        }
        match link.recv::<AgentReply>(Duration::from_millis(50)) {
            Ok(Some(AgentReply::Error {
                reason,
                unreachable,
            })) => {
                *heard = true;
                return Err(agent_refused(source, reason, unreachable));
            }
            Ok(Some(reply)) => {
                *heard = true;
                match result(reply) {
                    Some(found) => return Ok((found, !aborted)),
                    None => last_heard = Instant::now(),
                }
            }
            Ok(None) if last_heard.elapsed() >= options.control_timeout => {
                return Err(failed(format!(
                    "silent for {:.1} s",
                    last_heard.elapsed().as_secs_f64()
                )))
            }
            Ok(None) => {}
            Err(e) => {
                return Err(RunError::Lost {
                    host: source.to_string(),
                    why: format!("connection lost: {e}"),
                })
            }
        }
    }
}
