//! The agent side of profile runs, inside `linerate serve`: one thread per agent
//! connection, which either runs groups for a controller or runs a group's mirror for the
//! group's host (docs/protocol.md 7).

use super::group::{self, DialPolicy, Mirror, PreparedGroup, WakeLatencyHold};
use super::rendezvous::Rendezvous;
use super::rpm_job::{self, RpmJob, SourcePolicy};
use super::source_job::{Bounds, SourceJob, SourceRun, HEARTBEAT};
use crate::access::Stage;
use crate::control::Control;
use crate::server_state::random_nonce;
use crate::server_state::ServerState;
use linerate_hostinfo::observe::{observe, read_settings, HostReading};
use linerate_hostinfo::source::Root;
use linerate_model::clock::UnixTime;
use linerate_model::observe::Observation;
use linerate_proto::agent::{AgentReply, AgentRequest, GroupPart, Loads, MirrorSpec, Seconds};
use linerate_proto::agent_session::{AgentEvent, AgentSession, AgentTimeouts};
use linerate_report::profile::GroupResult;
use linerate_report::rpm::RpmReport;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after the start the CPUs stay held awake: every thread is released by then.
const START_HOLD: Duration = Duration::from_millis(100);
/// The furthest ahead a start may be set (the controller's lead is half a second plus two
/// round trips): a later one would hold the prepared threads for as long as it says.
const MOST_START_AHEAD: Duration = Duration::from_secs(30);

/// How long from now (`now_unix_ns`) a start at `at_unix_ns` is; refused beyond
/// [`MOST_START_AHEAD`]. A start in the past is now.
fn start_delay(at_unix_ns: u64, now_unix_ns: u64) -> Result<Duration, String> {
    let ahead = Duration::from_nanos(at_unix_ns.saturating_sub(now_unix_ns));
    if ahead > MOST_START_AHEAD {
        return Err(format!(
            "a start {:.0} s ahead is refused (at most {} s)",
            ahead.as_secs_f64(),
            MOST_START_AHEAD.as_secs()
        ));
    }
    Ok(ahead)
}
/// How long a mirror's threads get to end on their own after the group host finished,
/// counted from the last thread that ended: thousands of threads draining what their
/// sockets still hold can take longer than that in all, but each takes milliseconds.
const MIRROR_DRAIN: Duration = Duration::from_secs(5);

enum RunEvent {
    Released(u64),
    Done(Vec<GroupResult>, Option<Box<Observation>>),
}

/// An RPM test on this connection: this host runs the client (the source), or serves
/// the source that asked (the destination) until the link closes or its time is up.
enum RpmState {
    Source(Receiver<Result<RpmReport, rpm_job::SourceError>>),
    Serving {
        _server: linerate_rpm::server::HttpServer,
        until: Instant,
    },
}

struct MirrorState {
    mirror: Mirror,
    spec: MirrorSpec,
    token: linerate_proto::Token,
    /// The mirror's share of its requester's `--max-rate-per-ip`, given back on drop.
    _rate_share: Option<crate::access::RateShare>,
}

/// Why an agent connection is over.
struct Ended {
    why: String,
    /// The agent's session closed it (a refusal, a deadline, a bad message), as opposed
    /// to the dialer hanging up or the server shutting down.
    by_agent: bool,
}

/// An agent connection: its socket (driven by [`Control`], as control connections are)
/// and the sans-IO session (linerate-proto's `agent_session`) that holds its handshake,
/// key check and deadlines. Every byte in or out goes through the session.
struct AgentConnection {
    control: Control,
    session: AgentSession,
}

impl AgentConnection {
    fn reply(&mut self, reply: &AgentReply) {
        self.session.reply(reply);
        self.control.flush(&mut self.session);
    }

    /// The next request, waiting at most `wait`: `Ok(None)` when none came in time,
    /// `Err` when the connection is over.
    fn recv(&mut self, wait: Duration) -> Result<Option<AgentRequest>, Ended> {
        let deadline = Instant::now() + wait;
        loop {
            match self.session.poll_event() {
                Some(AgentEvent::Request(request)) => return Ok(Some(request)),
                Some(AgentEvent::Closed(outcome)) => {
                    self.control.flush(&mut self.session);
                    return Err(match outcome {
                        Ok(()) => Ended {
                            why: "the connection closed".into(),
                            by_agent: false,
                        },
                        Err(why) => Ended {
                            why,
                            by_agent: true,
                        },
                    });
                }
                None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.control.step(&mut self.session, left);
        }
    }
}

/// One place among the server's running tests, given back on drop.
pub(crate) struct TestSlot(Arc<ServerState>);

impl TestSlot {
    /// Takes a place, or says why the server is full.
    pub(crate) fn take(shared: &Arc<ServerState>) -> Result<TestSlot, String> {
        let running = shared.running.fetch_add(1, Ordering::Relaxed);
        let slot = TestSlot(shared.clone());
        if running >= shared.config.limits.max_tests as usize {
            return Err(format!(
                "the server is running {running} tests, its limit (--max-tests)"
            ));
        }
        Ok(slot)
    }
}

impl Drop for TestSlot {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one agent connection until it closes or the server shuts down.
pub(crate) fn serve(shared: &Arc<ServerState>, stream: TcpStream, version: u32, peer: SocketAddr) {
    let Ok(own) = stream.local_addr() else {
        return;
    };
    // At --max-connections, an agent connection that has not proved itself, or holds no
    // work, may be closed to make room (docs/security.md).
    let mark = shared.gate.mark_session(peer.ip(), &stream);
    let Ok(control) = Control::new(stream) else {
        return;
    };
    let timeouts = AgentTimeouts {
        handshake: shared.config.timeouts.handshake,
        idle: shared.config.timeouts.idle,
    };
    let mut session = AgentSession::new(Instant::now(), version, shared.host.clone(), timeouts);
    if let Some(key) = &shared.config.key {
        if shared.blocked_for_failures(peer) {
            return;
        }
        match random_nonce() {
            Ok(nonce) => session = session.with_key(key.clone(), nonce),
            Err(e) => {
                shared.log(&format!(
                    "agent connection from {peer}: no randomness for a nonce: {e}"
                ));
                return;
            }
        }
    }
    let agent = Agent {
        shared,
        peer,
        own,
        link: AgentConnection { control, session },
        stop: Arc::new(AtomicBool::new(false)),
        work: Work::Idle,
        last_beat: Instant::now(),
        mark,
    };
    agent.serve();
}

/// The place a piece of agent work holds among the server's tests (agent work counts
/// toward --max-tests as a test does) and its share of the requester's
/// `--max-rate-per-ip`; both are given back when the work is dropped.
struct Held {
    _slot: Option<TestSlot>,
    _rate_share: Option<crate::access::RateShare>,
}

impl Held {
    fn slot(slot: TestSlot) -> Held {
        Held {
            _slot: Some(slot),
            _rate_share: None,
        }
    }
}

/// What an agent connection is doing: one piece of work at a time, each variant with its
/// own state and the place it holds, so that "this connection already has work" is one
/// match and the place is given back with the work.
enum Work {
    Idle,
    /// Groups prepared for a controller, to start at its word; the run's limit from its
    /// `prepare`, in seconds.
    Prepared {
        groups: Vec<PreparedGroup>,
        limit_s: f64,
        held: Held,
    },
    /// The groups run; their thread reports here.
    Running {
        events: Receiver<RunEvent>,
        /// The groups as the controller sent them, for what `serve --metrics` is told.
        specs: Vec<linerate_profile::Group>,
        _held: Held,
    },
    /// A mirror for a group host.
    Mirror {
        state: MirrorState,
        _held: Held,
    },
    /// An RPM test, as its source or its destination.
    Rpm {
        state: RpmState,
        _held: Held,
    },
    /// A job this host runs as the source of a mesh test and reports once (a STAMP
    /// window, a trace): `what` its logs call it.
    Source {
        run: Box<dyn SourceRun>,
        what: &'static str,
        _held: Held,
    },
}

impl Work {
    /// Whether the work holds a place among the server's tests (a connection that holds
    /// one is not closed to make room).
    fn holds_place(&self) -> bool {
        match self {
            Work::Idle => false,
            Work::Prepared { held, .. } => held._slot.is_some(),
            Work::Running { .. } | Work::Mirror { .. } | Work::Rpm { .. } | Work::Source { .. } => {
                true
            }
        }
    }
}

/// What one agent connection holds: the groups it prepared or runs for a controller, the
/// mirror it runs for a group host, or an RPM test. Dropping it stops them.
struct Agent<'a> {
    shared: &'a Arc<ServerState>,
    peer: SocketAddr,
    /// This server's own address on the connection, the peer of local connections.
    own: SocketAddr,
    link: AgentConnection,
    stop: Arc<AtomicBool>,
    work: Work,
    last_beat: Instant,
    /// This connection among those the gate may close to make room.
    mark: Option<crate::access::SessionMark>,
}

impl Agent<'_> {
    fn serve(mut self) {
        let why = loop {
            if self.shared.shutdown.load(Ordering::Relaxed) {
                self.stop.store(true, Ordering::Relaxed);
                break Ended {
                    why: "the server is shutting down".into(),
                    by_agent: false,
                };
            }
            let busy = match self.work {
                Work::Idle | Work::Prepared { .. } => false,
                Work::Running { .. }
                | Work::Mirror { .. }
                | Work::Rpm { .. }
                | Work::Source { .. } => true,
            };
            self.link.session.set_busy(Instant::now(), busy);
            if let Some(mark) = &self.mark {
                mark.set(if !self.link.session.handshake_done() {
                    Stage::Unauthenticated
                } else if self.work.holds_place() {
                    Stage::Busy
                } else {
                    Stage::Idle
                });
            }
            self.poll_run();
            self.poll_rpm();
            self.poll_source();
            let wait = self.wait();
            match self.link.recv(wait) {
                Ok(Some(request)) => self.handle(request),
                Ok(None) => {}
                Err(why) => break why,
            }
        };
        self.end(&why);
    }

    /// How long the connection's thread may sleep before it looks at its work again; a
    /// request wakes it at once. Running groups and RPM tests report through channels
    /// looked at 20 times a second. A STAMP window runs on the prober's thread: the
    /// thread wakes for its heartbeats and when the outcome is due, not more (an agent
    /// probing a hundred peers holds a hundred of these connections, all the time). With
    /// nothing to look at (idle, prepared, a mirror), it waits for the next request.
    fn wait(&self) -> Duration {
        match &self.work {
            Work::Running { .. } | Work::Rpm { .. } => Duration::from_millis(50),
            Work::Source { run, .. } => match run.due() {
                Some(due) => {
                    let beat = (self.last_beat + run.heartbeat())
                        .saturating_duration_since(Instant::now());
                    let due = due.saturating_duration_since(Instant::now());
                    // Once due, the outcome is looked for every 50 ms until it comes.
                    beat.min(due).max(Duration::from_millis(50))
                }
                None => Duration::from_millis(50),
            },
            Work::Idle | Work::Prepared { .. } | Work::Mirror { .. } => Duration::from_secs(1),
        }
    }

    /// Tells the controller what the running groups did, and that the agent is alive.
    fn poll_run(&mut self) {
        let Work::Running { events, specs, .. } = &self.work else {
            return;
        };
        match events.try_recv() {
            Ok(RunEvent::Released(at)) => self.link.reply(&AgentReply::Started { at_unix_ns: at }),
            Ok(RunEvent::Done(groups, observe)) => {
                if let Some(hook) = &self.shared.config.served_tests {
                    let ended_at = UnixTime::now().nanos() as f64 / 1e9;
                    for result in &groups {
                        let Some(spec) = specs.iter().find(|s| s.name == result.name) else {
                            continue;
                        };
                        let served = super::served::served_group(
                            spec,
                            result.clone(),
                            self.own.ip(),
                            ended_at,
                        );
                        (hook.0)(crate::server_state::Served::Group(&served));
                    }
                }
                let count = groups.len();
                self.link.reply(&AgentReply::PartResult { groups, observe });
                self.shared.log(&format!(
                    "profile run from {}: {count} group(s) finished",
                    self.peer
                ));
                self.work = Work::Idle;
            }
            Err(TryRecvError::Empty) => self.heartbeat(),
            Err(TryRecvError::Disconnected) => self.work = Work::Idle,
        }
    }

    /// Tells the controller how the RPM test this host runs ended, or that it is alive;
    /// ends a destination's server whose time is up.
    fn poll_rpm(&mut self) {
        let Work::Rpm { state, .. } = &self.work else {
            return;
        };
        let outcome = match state {
            RpmState::Source(outcome) => match outcome.try_recv() {
                Ok(outcome) => outcome,
                Err(TryRecvError::Empty) => return self.heartbeat(),
                Err(TryRecvError::Disconnected) => Err(rpm_job::SourceError {
                    reason: "the RPM client ended".into(),
                    unreachable: None,
                }),
            },
            RpmState::Serving { until, .. } if Instant::now() >= *until => {
                self.shared
                    .log(&format!("RPM server for {}: its time is up", self.peer));
                self.work = Work::Idle;
                return;
            }
            RpmState::Serving { .. } => return,
        };
        self.work = Work::Idle;
        match outcome {
            Ok(report) => {
                self.shared.log(&format!(
                    "RPM test from {}: RPM {}",
                    self.peer,
                    report.rpm.map_or("-".into(), |r| format!("{r:.0}"))
                ));
                self.link.reply(&AgentReply::RpmResult {
                    report: Box::new(report),
                });
            }
            Err(failed) => {
                self.shared
                    .log(&format!("RPM test from {}: {}", self.peer, failed.reason));
                self.failed(failed);
            }
        }
    }

    /// Tells the controller how the job this host runs as a source ended, or that it is
    /// alive.
    fn poll_source(&mut self) {
        let Work::Source { run, what, .. } = &mut self.work else {
            return;
        };
        let Some(result) = run.poll() else {
            let every = run.heartbeat();
            return self.heartbeat_every(every);
        };
        let what = *what;
        self.work = Work::Idle;
        match result {
            Ok(reply) => self.link.reply(&reply),
            Err(failed) => {
                self.shared
                    .log(&format!("{what} from {}: {}", self.peer, failed.reason));
                self.failed(failed);
            }
        }
    }

    /// Runs the job the controller asks of this host as a source, within this server's
    /// bounds and its place among the server's tests.
    fn source(&mut self, job: Box<dyn SourceJob>) {
        let what = job.what();
        if let Some(reason) = self.has_work() {
            return self.refuse(what, reason.into());
        }
        let limits = &self.shared.config.limits;
        let bounds = Bounds {
            max_duration_s: limits.max_duration_s,
            max_rate_bps: limits.max_rate_bps,
        };
        if let Err(reason) = job.check(&bounds) {
            return self.refuse(what, reason);
        }
        let taken = match TestSlot::take(self.shared) {
            Ok(taken) => taken,
            Err(reason) => return self.refuse(what, reason),
        };
        let key = self.shared.config.key.clone();
        match job.start(self.peer.ip(), key, self.stop.clone()) {
            Ok(run) => {
                self.last_beat = Instant::now();
                self.work = Work::Source {
                    run,
                    what,
                    _held: Held::slot(taken),
                }
            }
            Err(failed) => self.failed(failed),
        }
    }

    fn heartbeat(&mut self) {
        self.heartbeat_every(HEARTBEAT);
    }

    fn heartbeat_every(&mut self, every: Duration) {
        if self.last_beat.elapsed() >= every {
            self.link.reply(&AgentReply::Heartbeat);
            self.last_beat = Instant::now();
        }
    }

    fn handle(&mut self, request: AgentRequest) {
        match request {
            // The session takes these itself; they never reach here.
            AgentRequest::Hello { .. } | AgentRequest::Auth { .. } => {}
            AgentRequest::Ping { seq } => self.link.reply(&AgentReply::Pong {
                seq,
                unix_ns: UnixTime::now().nanos(),
            }),
            AgentRequest::Prepare { parts, limit_s } => self.prepare(parts, limit_s),
            AgentRequest::Start { at_unix_ns } => self.start(at_unix_ns),
            AgentRequest::Abort { reason } => {
                self.shared.log(&format!(
                    "profile run from {}: aborted: {reason}",
                    self.peer
                ));
                self.stop.store(true, Ordering::Relaxed);
            }
            AgentRequest::Mirror { spec } => self.mirror(&spec),
            AgentRequest::TransactionDone {
                thread,
                transaction,
                iterations,
            } => {
                if let Work::Mirror { state, .. } = &self.work {
                    state.mirror.set_count(thread, transaction, iterations);
                }
            }
            AgentRequest::Finish => self.finish_mirror(),
            AgentRequest::Rpm {
                remote,
                leg_s,
                tls,
                max_connections,
                source,
            } => self.rpm_source(remote, leg_s, tls, max_connections, source),
            AgentRequest::RpmServe { limit_s, tls } => self.rpm_serve(limit_s, tls),
            AgentRequest::Source {
                kind,
                spec,
                heartbeat_s,
                source,
            } => {
                let Some(kind) = super::source_kind(kind.as_str()) else {
                    let reason =
                        format!("this agent runs no source job of kind '{}'", kind.as_str());
                    return self.refuse("source job", reason);
                };
                let asked = super::source_job::Asked {
                    spec,
                    heartbeat_s,
                    source,
                };
                match (kind.read)(asked) {
                    Ok(job) => self.source(job),
                    Err(reason) => self.refuse(kind.what, reason),
                }
            }
        }
    }

    /// Why this connection cannot take an RPM test: work it has, or this server's
    /// bounds (`--no-tls`/`--require-tls`; `--max-rate`, which an RPM test's
    /// saturating loads cannot keep to).
    fn rpm_refusal(&self, tls: bool) -> Option<String> {
        use crate::secure::TlsMode;
        let config = &self.shared.config;
        if let Some(reason) = self.has_work() {
            Some(reason.into())
        } else if config.limits.max_rate_bps.is_some() || config.max_rate_per_ip.is_some() {
            Some(
                "an RPM test saturates the path, and this server has a --max-rate or --max-rate-per-ip"
                    .into(),
            )
        } else if tls && config.tls_mode == TlsMode::Off {
            Some("this server runs no encrypted tests (--no-tls)".into())
        } else if !tls && config.tls_mode == TlsMode::Required {
            Some("this server runs only encrypted tests (--require-tls)".into())
        } else {
            None
        }
    }

    /// Why this connection cannot take new work: the work it has.
    fn has_work(&self) -> Option<&'static str> {
        match self.work {
            Work::Idle => None,
            Work::Prepared { .. } => Some("groups are already prepared on this connection"),
            Work::Running { .. } => Some("groups are already running on this connection"),
            Work::Mirror { .. } | Work::Rpm { .. } | Work::Source { .. } => {
                Some("this connection already has work")
            }
        }
    }

    /// Runs the RPM client towards `remote`'s agent, as the controller asks.
    /// (The leg and the loads arrive bounded by their types; this server's own bounds
    /// are checked here.)
    fn rpm_source(
        &mut self,
        remote: String,
        leg_s: Seconds,
        tls: bool,
        max_connections: Loads,
        source: Option<linerate_model::Source>,
    ) {
        if let Some(reason) = self.rpm_refusal(tls) {
            return self.refuse("RPM test", reason);
        }
        if let Some(Err(reason)) = source.as_ref().map(linerate_model::Source::check) {
            return self.refuse("RPM test", reason);
        }
        let job = RpmJob {
            remote,
            leg: leg_s.duration(),
            tls,
            max_connections: max_connections.get(),
            source,
        };
        let leg_s = leg_s.get();
        if let Err(reason) = rpm_job::check(&job, self.shared.config.limits.max_duration_s) {
            return self.refuse("RPM test", reason);
        }
        let taken = match TestSlot::take(self.shared) {
            Ok(taken) => taken,
            Err(reason) => return self.refuse("RPM test", reason),
        };
        let policy = SourcePolicy {
            requester: self.peer.ip(),
            key: self.shared.config.key.clone(),
        };
        self.shared.log(&format!(
            "RPM test from {}: towards {}, 2 x {leg_s:.0} s",
            self.peer, job.remote
        ));
        match rpm_job::start_source(job, policy, self.stop.clone()) {
            Ok(outcome) => {
                self.work = Work::Rpm {
                    state: RpmState::Source(outcome),
                    _held: Held::slot(taken),
                }
            }
            Err(e) => self.refuse("RPM test", format!("cannot start: {e}")),
        }
    }

    /// Serves RPM for the host at the other end of this connection.
    fn rpm_serve(&mut self, limit_s: Seconds, tls: bool) {
        if let Some(reason) = self.rpm_refusal(tls) {
            return self.refuse("RPM server", reason);
        }
        let most = self.shared.config.limits.max_duration_s + 60.0;
        let limit_s = limit_s.get();
        if limit_s > most {
            return self.refuse(
                "RPM server",
                format!("a limit of {limit_s} s is outside this server's 0 to {most:.0} s"),
            );
        }
        let identity = if tls {
            match self.shared.config.tls_identity.load() {
                Ok(identity) => Some(identity),
                Err(reason) => return self.refuse("RPM server", reason),
            }
        } else {
            None
        };
        let taken = match TestSlot::take(self.shared) {
            Ok(taken) => taken,
            Err(reason) => return self.refuse("RPM server", reason),
        };
        match rpm_job::serve_for(self.own.ip(), self.peer.ip(), limit_s, identity.as_deref()) {
            Ok(server) => {
                self.shared.log(&format!(
                    "RPM server for {}: {}",
                    self.peer,
                    server.config_url()
                ));
                self.link.reply(&AgentReply::RpmReady {
                    port: server.addr.port(),
                    tls_fingerprint: identity.map(|i| i.fingerprint.clone()),
                });
                self.work = Work::Rpm {
                    state: RpmState::Serving {
                        _server: server,
                        until: Instant::now() + Duration::from_secs_f64(limit_s),
                    },
                    _held: Held::slot(taken),
                };
            }
            Err(reason) => self.refuse("RPM server", reason),
        }
    }

    /// Refuses a request, with one log line for the operator.
    /// Tells the controller why the work a source started (or could not start) failed,
    /// naming the peer to blame where there is one.
    fn failed(&mut self, failed: rpm_job::SourceError) {
        self.link.reply(&AgentReply::Error {
            reason: failed.reason.into(),
            unreachable: failed.unreachable.map(Into::into),
        });
    }

    fn refuse(&mut self, what: &str, reason: String) {
        self.shared.refused(self.peer, &format!("{what}: {reason}"));
        self.link.reply(&AgentReply::Error {
            reason: reason.into(),
            unreachable: None,
        });
    }

    /// Why a `prepare` cannot be taken, if it cannot: the server's limits, or work already
    /// on this connection.
    fn over_limits(&self, parts: &[GroupPart], limit: Seconds) -> Option<String> {
        let limit = limit.get();
        let limits = &self.shared.config.limits;
        let threads: u64 = parts.iter().map(|p| u64::from(p.group.threads)).sum();
        let groups: Vec<&linerate_profile::Group> = parts.iter().map(|p| &p.group).collect();
        if let Err(reason) = linerate_profile::budget::check(&groups)
            .and_then(|()| sends_only_given_files(&groups, &self.shared.config.sendable_files))
        {
            Some(reason)
        } else if limit > limits.max_duration_s {
            Some(format!(
                "a run limit of {limit} s is outside this server's 0 to {} s (--max-duration)",
                limits.max_duration_s
            ))
        } else if threads > u64::from(limits.max_flows) {
            Some(format!(
                "{threads} threads asked, this server allows {} (--max-flows)",
                limits.max_flows
            ))
        } else {
            self.has_work().map(String::from)
        }
    }

    /// Prepares the controller's groups: each peer of each group runs its mirror.
    fn prepare(&mut self, parts: Vec<GroupPart>, limit: Seconds) {
        if let Some(reason) = self.over_limits(&parts, limit) {
            return self.refuse("profile run", reason);
        }
        let groups: Vec<&linerate_profile::Group> = parts.iter().map(|p| &p.group).collect();
        let rate_share = match session_bounds(self.shared, self.peer, &groups) {
            Ok(share) => share,
            Err(reason) => return self.refuse("profile run", reason),
        };
        // A connection that runs no group here holds no place.
        let slot = if parts.is_empty() {
            None
        } else {
            match TestSlot::take(self.shared) {
                Ok(taken) => Some(taken),
                Err(reason) => return self.refuse("profile run", reason),
            }
        };
        let held = Held {
            _slot: slot,
            _rate_share: rate_share,
        };
        let names: Vec<String> = parts.iter().map(|p| p.group.name.clone()).collect();
        let policy = DialPolicy {
            own: self.own,
            requester: self.peer.ip(),
            key: self.shared.config.key.as_ref(),
        };
        let mut prepared = Vec::with_capacity(parts.len());
        for part in parts {
            match group::prepare(part, &policy, limit.get(), self.stop.clone()) {
                Ok(group) => prepared.push(group),
                Err(e) => {
                    self.shared.refused(
                        self.peer,
                        &format!("profile run: cannot prepare: {}", e.detail()),
                    );
                    return self.link.reply(&AgentReply::Error {
                        reason: e.public().into(),
                        unreachable: e.peer().map(Into::into),
                    });
                }
            }
        }
        self.shared.log(&format!(
            "profile run from {}: prepared group(s) {}",
            self.peer,
            names.join(", ")
        ));
        self.work = Work::Prepared {
            groups: prepared,
            limit_s: limit.get(),
            held,
        };
        self.link.reply(&AgentReply::Prepared);
    }

    /// Starts the prepared groups at `at_unix_ns` on this host's clock, on a thread that
    /// reports their release and their results.
    fn start(&mut self, at_unix_ns: u64) {
        if !matches!(self.work, Work::Prepared { .. }) {
            return self.refuse("start", "nothing is prepared on this connection".into());
        }
        let delay = match start_delay(at_unix_ns, UnixTime::now().nanos()) {
            Ok(delay) => delay,
            Err(reason) => return self.refuse("start", reason),
        };
        let (groups, limit_s, held) = match std::mem::replace(&mut self.work, Work::Idle) {
            Work::Prepared {
                groups,
                limit_s,
                held,
            } => (groups, limit_s, held),
            other => {
                self.work = other;
                return;
            }
        };
        let (sender, receiver) = channel();
        self.work = Work::Running {
            events: receiver,
            specs: groups.iter().map(|g| g.part.group.clone()).collect(),
            _held: held,
        };
        let start = Instant::now() + delay;
        let most = self.shared.config.limits.max_duration_s.max(1.0);
        let limit = start + Duration::from_secs_f64(limit_s.clamp(1.0, most));
        let hold = (!groups.is_empty()).then(WakeLatencyHold::acquire);
        let awake = match &hold {
            Some(hold) if !hold.held() => {
                " (CPUs not held awake for the start: /dev/cpu_dma_latency needs root)"
            }
            _ => "",
        };
        self.shared.log(&format!(
            "profile run from {}: starting {} group(s){awake}",
            self.peer,
            groups.len()
        ));
        let spawned = std::thread::Builder::new()
            .name("linerate-part".into())
            .spawn({
                let stop = self.stop.clone();
                move || run_groups(groups, start, limit, hold, &stop, &sender)
            });
        if let Err(e) = spawned {
            self.link.reply(&AgentReply::Error {
                reason: format!("cannot start: {e}").into(),
                unreachable: None,
            });
        }
    }

    /// Starts the mirror a group host asks for.
    fn mirror(&mut self, spec: &MirrorSpec) {
        let started = if let Some(reason) = self.has_work() {
            Err(reason.to_string())
        } else {
            TestSlot::take(self.shared).and_then(|taken| {
                Ok((
                    start_mirror(self.shared, spec, self.peer, self.own, &self.stop)?,
                    taken,
                ))
            })
        };
        match started {
            Ok((state, taken)) => {
                self.shared.log(&format!(
                    "mirror of group '{}' for {}: {} thread(s)",
                    spec.group.name, self.peer, spec.group.threads
                ));
                self.link.reply(&AgentReply::MirrorReady {
                    token: state.token.to_hex(),
                    udp_port: state.udp_port,
                    tls_fingerprint: super::group::ssl_fingerprint(&spec.group),
                });
                self.work = Work::Mirror {
                    state: state.state,
                    _held: Held::slot(taken),
                };
            }
            Err(reason) => self.refuse("mirror", reason),
        }
    }

    /// The group host finished: lets the mirror's threads drain, then sends its figures.
    fn finish_mirror(&mut self) {
        let state = match std::mem::replace(&mut self.work, Work::Idle) {
            Work::Mirror { state, .. } => state,
            other => {
                self.work = other;
                return;
            }
        };
        let mut ended = (state.mirror.finished_threads(), Instant::now());
        while !state.mirror.is_finished() && ended.1.elapsed() < MIRROR_DRAIN {
            std::thread::sleep(Duration::from_millis(10));
            let now_ended = state.mirror.finished_threads();
            if now_ended > ended.0 {
                ended = (now_ended, Instant::now());
            }
            // The group host waits for the figures a bounded time per message.
            self.heartbeat();
        }
        self.stop.store(true, Ordering::Relaxed);
        self.shared.unregister_flows(&state.token);
        let figures = state.mirror.finish(&state.spec.group);
        self.link.reply(&AgentReply::MirrorResult { figures });
        self.shared.log(&format!(
            "mirror of group '{}' for {}: ended",
            state.spec.group.name, self.peer
        ));
    }

    /// The connection is over: stops what it started, and says why.
    fn end(mut self, ended: &Ended) {
        let (peer, why) = (self.peer, &ended.why);
        if !self.link.session.handshake_done() {
            if self.link.session.proof_failed() {
                self.shared.failed_proof(peer);
            }
            self.shared
                .refused(peer, &format!("agent connection: {why}"));
        } else if ended.by_agent && !matches!(self.work, Work::Running { .. } | Work::Mirror { .. })
        {
            self.shared
                .log(&format!("agent connection from {peer}: {why}"));
        }
        self.stop.store(true, Ordering::Relaxed);
        match std::mem::replace(&mut self.work, Work::Idle) {
            Work::Mirror { state, .. } => {
                self.shared.unregister_flows(&state.token);
                let _ = state.mirror.finish(&state.spec.group);
                self.shared.log(&format!(
                    "mirror of group '{}' for {peer}: ended early: {why}",
                    state.spec.group.name
                ));
            }
            Work::Running { .. } => self
                .shared
                .log(&format!("profile run from {peer}: stopped: {why}")),
            Work::Rpm { .. } => self
                .shared
                .log(&format!("RPM test with {peer}: ended: {why}")),
            Work::Source { what, .. } => {
                self.shared.log(&format!("{what} for {peer}: ended: {why}"))
            }
            Work::Idle | Work::Prepared { .. } => {}
        }
    }
}

/// The limits a test session has, bound on agent work as well: `--require-tls` takes
/// only groups whose every connection is `ssl`, and under `--max-rate` every group must
/// declare rates that keep the request within it (the threads pace themselves to them).
/// Under `--max-rate-per-ip` the declared rate is reserved for the requester's address as
/// a test's is; the share is held until the work ends.
fn session_bounds(
    shared: &Arc<ServerState>,
    peer: SocketAddr,
    groups: &[&linerate_profile::Group],
) -> Result<Option<crate::access::RateShare>, String> {
    use crate::secure::TlsMode;
    use linerate_profile::budget::{all_encrypted, declared_rate_bps};
    if shared.config.tls_mode == TlsMode::Required && !groups.iter().all(|g| all_encrypted(g)) {
        return Err(
            "this server runs only encrypted tests (--require-tls): every connection must be ssl"
                .into(),
        );
    }
    let most = match (
        shared.config.limits.max_rate_bps,
        shared.config.max_rate_per_ip,
    ) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return Ok(None),
    };
    let mut total = 0.0;
    for group in groups {
        match declared_rate_bps(group) {
            Some(rate) => total += rate,
            None => {
                return Err(format!(
                    "group '{}' moves data unpaced; this server limits rates (--max-rate, --max-rate-per-ip): give its transfers a rate",
                    group.name
                ))
            }
        }
    }
    if total > most as f64 {
        return Err(format!(
            "the groups declare {} together, over this server's {}",
            linerate_report::units::format_rate(total, linerate_report::units::Scale::Adaptive),
            linerate_report::units::format_rate(
                most as f64,
                linerate_report::units::Scale::Adaptive
            )
        ));
    }
    match shared.config.max_rate_per_ip {
        Some(per_ip) => crate::access::RateBook::reserve(
            &shared.rates,
            shared.gate.policy.client(peer.ip()),
            total,
            per_ip,
        )
        .map(Some),
        None => Ok(None),
    }
}

/// Runs the groups from `start` until `limit`, holding the CPUs awake around the start,
/// and reports the first release and every group's result.
fn run_groups(
    groups: Vec<PreparedGroup>,
    start: Instant,
    limit: Instant,
    hold: Option<WakeLatencyHold>,
    stop: &AtomicBool,
    sender: &std::sync::mpsc::Sender<RunEvent>,
) {
    // The host's counters around the part, as a test's window has them (docs/observe.md).
    let before = HostReading::read(&Root::live());
    let observed_from = Instant::now();
    let runners: Vec<_> = groups
        .into_iter()
        .map(|g| std::thread::spawn(move || group::run(g, start, limit)))
        .collect();
    if let Some(hold) = hold {
        // In slices: a run stopped before its start lets the CPUs go at once.
        let until = start + START_HOLD;
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(super::SLICE),
            );
        }
        drop(hold);
    }
    let mut results = Vec::new();
    let mut released = Vec::new();
    for runner in runners {
        if let Ok((result, at)) = runner.join() {
            results.push(result);
            released.extend(at);
        }
    }
    if let Some(first) = released.iter().min() {
        let _ = sender.send(RunEvent::Released(*first));
    }
    let root = Root::live();
    let after = HostReading::read(&root);
    let observation = observe(
        &before,
        &after,
        observed_from.elapsed().as_secs_f64(),
        read_settings(&root),
    );
    let _ = sender.send(RunEvent::Done(results, Some(Box::new(observation))));
}

/// Refuses groups that would send a file this server was not given: `linerate serve`
/// is given none, the controller's own server the files its profile listed.
fn sends_only_given_files(
    groups: &[&linerate_profile::Group],
    given: &std::collections::BTreeSet<String>,
) -> Result<(), String> {
    if given.is_empty() {
        return linerate_profile::budget::sends_no_files(groups);
    }
    for group in groups {
        for op in group.transactions.iter().flat_map(|t| &t.ops) {
            if let linerate_profile::Action::Sendfile(send) = &op.action {
                if let Some(file) = send.files.iter().find(|f| !given.contains(&f.path)) {
                    return Err(format!(
                        "group '{}' would send {}, which this server was not given",
                        group.name, file.path
                    ));
                }
            }
        }
    }
    Ok(())
}

struct Started {
    state: MirrorState,
    token: linerate_proto::Token,
    udp_port: u16,
}

fn start_mirror(
    shared: &Arc<ServerState>,
    spec: &MirrorSpec,
    peer: SocketAddr,
    own: SocketAddr,
    stop: &Arc<AtomicBool>,
) -> Result<Started, String> {
    let threads = spec.group.threads;
    let limits = &shared.config.limits;
    linerate_profile::budget::check(&[&spec.group])?;
    linerate_profile::budget::sends_no_files(&[&spec.group])?;
    let rate_share = session_bounds(shared, peer, &[&spec.group])?;
    if threads == 0 || threads > linerate_profile::MAX_THREADS || threads > limits.max_flows {
        return Err(format!(
            "{threads} threads asked, this server allows {} (--max-flows)",
            limits.max_flows.min(linerate_profile::MAX_THREADS)
        ));
    }
    if spec.limit_s.get() > limits.max_duration_s {
        return Err(format!(
            "a run limit of {} s is outside this server's 0 to {} s (--max-duration)",
            spec.limit_s.get(),
            limits.max_duration_s
        ));
    }
    let token = crate::server_state::random_token().map_err(|e| e.to_string())?;
    let incoming = shared.register_flows(token);
    let rendezvous = Rendezvous::open(own.ip(), token, peer.ip(), stop.clone())
        .map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    rendezvous.feed(incoming);
    let udp_port = rendezvous.udp_port;
    let mirror = Mirror::start(spec, rendezvous, peer.ip(), stop.clone()).map_err(|e| {
        shared.unregister_flows(&token);
        format!("cannot start the mirror threads: {e}")
    })?;
    Ok(Started {
        state: MirrorState {
            mirror,
            spec: spec.clone(),
            token,
            _rate_share: rate_share,
        },
        token,
        udp_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start at the end of time once held a thousand prepared threads asleep after their
    /// connection had gone.
    #[test]
    fn a_start_far_ahead_is_refused_and_one_in_the_past_is_now() {
        let now = 1_800_000_000_000_000_000;
        assert!(start_delay(u64::MAX, now).unwrap_err().contains("refused"));
        assert!(start_delay(now + 31_000_000_000, now).is_err());
        assert_eq!(
            start_delay(now + 500_000_000, now),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(start_delay(now - 5, now), Ok(Duration::ZERO));
    }
}
