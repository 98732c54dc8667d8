//! `linerate mesh run`: the coordinator. It asks the sans-IO scheduler (linerate-mesh)
//! what to run, runs each job as a profile whose one group runs on the source host's agent
//! and connects to the destination's (so the bytes are counted at the destination, and the
//! coordinator carries none of them), stores every result with its labels, and tells the
//! scheduler how it ended. A job is a thread that waits on the agents; the scheduler's
//! state lives on this one thread.

use crate::threads::ThreadPool;
use anyhow::{Context, Result};
use linerate_drivers::profile::controller::{self, RunError, RunOptions};
use linerate_drivers::profile::rpm_job::RpmJob;
use linerate_mesh::{job_plan, Action, Job, JobEnd, JobPlan, Mesh, Past, Scheduler};
use linerate_model::clock::UnixTime;
use linerate_proto::text::printable;
use linerate_report::document::Document;
use linerate_report::headline;
use linerate_report::rpm::RpmReport;
use linerate_store::{MeshArchive, MeshRow, Outcome};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// A wait for the next job at least this long is told (`MeshEvent::Waiting`).
const WAIT_WORTH_SAYING_S: f64 = 30.0;
/// Results that ended together are stored in one transaction, this many at most: a
/// commit (a flush of the store's log) costs about as much as the rows it carries, so a
/// mesh that finishes results faster than one commit each shares commits instead of
/// falling behind, and one that does not pays nothing (a batch of one).
const BATCH: usize = 256;

/// How long running jobs get to end after a stop before the coordinator leaves them.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Hosts found again while the mesh runs (its `[[discover]]` names resolved anew).
pub struct Rediscover {
    pub every: Duration,
    /// The mesh with the hosts its names resolve to now; an error keeps the hosts it has.
    pub find: Box<dyn FnMut() -> Result<Mesh> + Send>,
}

/// What a running mesh tells its caller.
pub enum MeshEvent<'a> {
    /// A job ended (or was skipped), stored.
    Result(&'a JobResult),
    /// Discovery changed the hosts: the mesh goes on with these added and removed.
    Hosts {
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// Discovery failed: the mesh goes on with the hosts it has.
    DiscoveryFailed(String),
    /// Nothing runs, and the next job is due at `until` (Unix seconds).
    Waiting { until: f64 },
}

/// What a mesh run does besides running jobs.
pub struct MeshOptions {
    /// Stop once every exclusive test has completed this many cycles (a mesh of light
    /// tests only: once every job ran this many times); `None`: until stopped.
    pub cycles: Option<u64>,
    pub key: Option<linerate_proto::auth::Key>,
    /// How long the agents may stay silent, and how far ahead each run starts.
    pub control_timeout: Duration,
    pub lead: Duration,
    pub rediscover: Option<Rediscover>,
}

/// One finished (or skipped) job, as stored and printed.
#[derive(Debug, Clone)]
pub struct JobResult {
    pub row: MeshRow,
    /// The run's report, when it ran.
    pub document: Option<Document>,
}

/// The coordinator's clock: Unix seconds, and how long it waits in real time for a second
/// of it. Injected, as the scheduler's time is, so that its decisions are tested without
/// waiting.
#[derive(Clone)]
pub struct Clock {
    pub now: Arc<dyn Fn() -> f64 + Send + Sync>,
    /// Real seconds a wait of one clock second takes: 1 on the system's clock.
    pub pace: f64,
}

impl Clock {
    /// The schedule's clock: Unix seconds when the coordinator started, then counted on
    /// the monotonic clock, so that the host's time set back or forward (an NTP step, an
    /// operator's `date`) neither holds a cycle up for the hour nor runs one twice.
    pub fn system() -> Clock {
        let start = std::time::Instant::now();
        Clock::anchored(UnixTime::now().seconds(), move || start.elapsed())
    }

    /// Unix seconds `wall` at the start, then `wall` plus what `elapsed` (a monotonic
    /// clock) says has passed.
    pub fn anchored(wall: f64, elapsed: impl Fn() -> Duration + Send + Sync + 'static) -> Clock {
        Clock {
            now: Arc::new(move || wall + elapsed().as_secs_f64()),
            pace: 1.0,
        }
    }

    /// The wall clock, as stored times are: a job's start and end say when it ran by the
    /// host's clock, whatever the schedule's says.
    pub fn wall() -> Clock {
        Clock {
            now: Arc::new(|| UnixTime::now().seconds()),
            pace: 1.0,
        }
    }

    fn read(&self) -> f64 {
        (self.now)()
    }
}

/// Runs one job to its end on the thread the coordinator gives it: the agents' way
/// ([`AgentRunner`]), or a test's.
pub trait JobRunner: Send + Sync {
    /// How the job ended and its results: one, or for a job that fans out one per
    /// receiver.
    fn run(&self, mesh: &Mesh, job: Job, cycle: u64, stop: &AtomicBool)
        -> (JobEnd, Vec<JobResult>);
}

/// The jobs as the agents run them: a profile on the source's agent, or an RPM test
/// between the two.
pub struct AgentRunner {
    pub options: RunOptions,
    pub clock: Clock,
}

impl JobRunner for AgentRunner {
    fn run(
        &self,
        mesh: &Mesh,
        job: Job,
        cycle: u64,
        stop: &AtomicBool,
    ) -> (JobEnd, Vec<JobResult>) {
        let (outcome, results) = run_job(mesh, job, cycle, &self.options, stop, &*self.clock.now);
        if stop.load(Ordering::Relaxed) {
            return (outcome, results);
        }
        confirm_blame(mesh, outcome, results, &self.options)
    }
}

/// A failed job takes down only the blamed hosts that do not answer the coordinator's
/// own dial either. The blame may be another agent's word (the source's agent could not
/// reach or use the destination, a cause it keeps from the requester) or one handshake
/// that timed out on a loaded host; a host that answers at once is up, and taking it
/// down would skip its every job for the backoff. Its row then blames nobody and says
/// why.
fn confirm_blame(
    mesh: &Mesh,
    outcome: JobEnd,
    mut results: Vec<JobResult>,
    options: &RunOptions,
) -> (JobEnd, Vec<JobResult>) {
    let JobEnd::Failed { hosts, reason } = outcome else {
        return (outcome, results);
    };
    let (gone, answering): (Vec<usize>, Vec<usize>) = hosts
        .into_iter()
        .partition(|&host| controller::agent_answers(&mesh.hosts[host].address, options).is_err());
    if answering.is_empty() {
        return (
            JobEnd::Failed {
                hosts: gone,
                reason,
            },
            results,
        );
    }
    let names: Vec<&str> = answering
        .iter()
        .map(|&host| mesh.hosts[host].name.as_str())
        .collect();
    let cleared = format!(
        " ({} answered the coordinator right after, so it is not taken down)",
        names.join(", ")
    );
    // Each row that blamed a host that answered blames nobody, and says why.
    for result in &mut results {
        if let Outcome::Failed { blamed, reason } = &mut result.row.outcome {
            if blamed.as_deref().is_some_and(|name| names.contains(&name)) {
                *blamed = None;
                reason.push_str(&cleared);
            }
        }
    }
    let outcome = JobEnd::Failed {
        hosts: gone,
        reason: format!("{reason}{cleared}"),
    };
    (outcome, results)
}

/// The figure a job's row carries: goodput for a stream, the median time of the timed
/// transaction for rr (after its connect) and crr (its only one, the connect in it), the
/// responsiveness for rpm.
fn figure(test: &linerate_mesh::MeshTest, document: &Document) -> (Option<f64>, String) {
    let which = test.kind.kind().headline();
    headline::of(document, which)
}

/// Which host a failed run is laid at: the destination when the source's agent names it
/// as the peer it could not reach or use, else the source; none when the link to an agent
/// that had answered broke under way (a restarted agent answers the next job at once; a
/// host that is gone fails that job's dial). (The agent's words are not read: a reason
/// that merely mentions the destination's address blames nobody new.)
fn failed_hosts(mesh: &Mesh, job: &Job, error: &RunError) -> Vec<usize> {
    match error {
        RunError::Agent {
            unreachable: Some(peer),
            ..
        } if *peer == mesh.hosts[job.dst].address => vec![job.dst],
        RunError::Agent { .. } => vec![job.src],
        RunError::Lost { .. } | RunError::Local(_) => Vec::new(),
    }
}

/// How a job ended as its row keeps it: the scheduler's outcome with the blamed host by
/// name (a failure blames at most one: the destination or the source).
fn row_outcome(mesh: &Mesh, outcome: &JobEnd) -> Outcome {
    match outcome {
        JobEnd::Done => Outcome::Ok,
        JobEnd::Failed { hosts, reason } => Outcome::Failed {
            blamed: hosts.first().map(|&h| mesh.hosts[h].name.clone()),
            reason: reason.clone(),
        },
    }
}

/// A job's row with its labels and times, not (yet) a success.
fn labelled(mesh: &Mesh, job: &Job, cycle: u64, started_at: f64, ended_at: f64) -> MeshRow {
    labelled_to(mesh, job, job.dst, cycle, (started_at, ended_at))
}

/// A row of `job` to `dst` (a receiver, for a job that fans out).
fn labelled_to(
    mesh: &Mesh,
    job: &Job,
    dst: usize,
    cycle: u64,
    (started_at, ended_at): (f64, f64),
) -> MeshRow {
    let test = &mesh.tests[job.test];
    MeshRow {
        run_id: None,
        mesh: mesh.name.clone(),
        src: mesh.hosts[job.src].name.clone(),
        dst: mesh.hosts[dst].name.clone(),
        test: test.name.clone(),
        direction: "forward".into(),
        protocol: test.kind.protocol_label().into(),
        cycle,
        started_at,
        ended_at,
        outcome: Outcome::Failed {
            blamed: None,
            reason: String::new(),
        },
        headline: None,
        headline_text: String::new(),
    }
}

/// Runs one job to its end; how it ended and its results (one, or one per receiver).
fn run_job(
    mesh: &Mesh,
    job: Job,
    cycle: u64,
    options: &RunOptions,
    stop: &AtomicBool,
    clock: &dyn Fn() -> f64,
) -> (JobEnd, Vec<JobResult>) {
    let started_at = clock();
    let src = &mesh.hosts[job.src];
    let source = src.source.clone();
    let one = |(outcome, result): (JobEnd, JobResult)| (outcome, vec![result]);
    match job_plan(mesh, &job) {
        JobPlan::Profile(profile) => {
            let result = controller::run(&profile, options, stop);
            one(profile_ended(
                mesh,
                job,
                cycle,
                (started_at, clock()),
                result,
            ))
        }
        JobPlan::Rpm {
            remote,
            leg,
            tls,
            max_connections,
        } => {
            let rpm = RpmJob {
                remote,
                leg,
                tls,
                max_connections,
                source,
            };
            let result = controller::run_rpm(&src.address, &rpm, options, stop);
            one(rpm_ended(mesh, job, cycle, (started_at, clock()), result))
        }
        JobPlan::Source { kind, spec } => {
            let target = &mesh.hosts[job.dst].name;
            let result = controller::run_source(
                &src.address,
                (kind, &spec),
                (source, target),
                options,
                stop,
            );
            one(probe_ended(mesh, job, cycle, (started_at, clock()), result))
        }
        JobPlan::Fanout { send, receive } => {
            let receivers = mesh.receivers(&job);
            let host = |h: usize| controller::FanoutHost {
                name: mesh.hosts[h].name.clone(),
                address: mesh.hosts[h].address.clone(),
                source: mesh.hosts[h].source.clone(),
            };
            let hosts: Vec<controller::FanoutHost> = receivers.iter().map(|&h| host(h)).collect();
            let result = controller::run_fanout(
                &host(job.src),
                ((send.0, &send.1), (receive.0, &receive.1)),
                &hosts,
                options,
                stop,
            );
            fanout_ended(mesh, job, cycle, &receivers, (started_at, clock()), result)
        }
    }
}

/// A fan-out job's outcome: a row per receiver, done where that receiver counted (what
/// it lost is a figure, not a failure); a source that failed fails every row, laid at the
/// source, and a receiver's agent that failed is laid at that receiver.
fn fanout_ended(
    mesh: &Mesh,
    job: Job,
    cycle: u64,
    receivers: &[usize],
    times: (f64, f64),
    result: Result<Vec<Result<Document, RunError>>, RunError>,
) -> (JobEnd, Vec<JobResult>) {
    let rows = |outcome: &JobEnd| -> Vec<JobResult> {
        receivers
            .iter()
            .map(|&dst| JobResult {
                row: MeshRow {
                    outcome: row_outcome(mesh, outcome),
                    ..labelled_to(mesh, &job, dst, cycle, times)
                },
                document: None,
            })
            .collect()
    };
    let received = match result {
        Ok(received) => received,
        Err(error) => {
            let outcome = JobEnd::Failed {
                hosts: failed_hosts(mesh, &job, &error),
                reason: printable(&error.to_string()),
            };
            let results = rows(&outcome);
            return (outcome, results);
        }
    };
    // The receivers whose own agents failed them, and the first reason.
    let (mut blamed, mut first_reason) = (Vec::new(), None);
    let mut results = Vec::with_capacity(receivers.len());
    for (&dst, document) in receivers.iter().zip(received) {
        let mut row = labelled_to(mesh, &job, dst, cycle, times);
        let document = match document {
            Ok(document) => {
                let (headline, text) = figure(&mesh.tests[job.test], &document);
                row.headline = headline;
                row.headline_text = text;
                row.outcome = Outcome::Ok;
                Some(document)
            }
            Err(error) => {
                let hosts = match &error {
                    RunError::Agent { .. } => vec![dst],
                    RunError::Lost { .. } | RunError::Local(_) => Vec::new(),
                };
                let outcome = JobEnd::Failed {
                    hosts: hosts.clone(),
                    reason: printable(&error.to_string()),
                };
                row.outcome = row_outcome(mesh, &outcome);
                blamed.extend(hosts);
                if let JobEnd::Failed { reason, .. } = outcome {
                    first_reason.get_or_insert(reason);
                }
                None
            }
        };
        results.push(JobResult { row, document });
    }
    let outcome = match first_reason {
        Some(reason) => JobEnd::Failed {
            hosts: blamed,
            reason,
        },
        None => JobEnd::Done,
    };
    (outcome, results)
}

/// A profile job's outcome: done when its report is complete, else failed with the
/// report's reason; a run that could not start is laid at the host it names.
fn profile_ended(
    mesh: &Mesh,
    job: Job,
    cycle: u64,
    (started_at, ended_at): (f64, f64),
    result: Result<linerate_report::profile::ProfileReport, RunError>,
) -> (JobEnd, JobResult) {
    let test = &mesh.tests[job.test];
    let mut row = labelled(mesh, &job, cycle, started_at, ended_at);
    match result {
        Ok(mut report) => {
            report.config.source = format!("mesh {}", mesh.name);
            let complete = report.summary.complete;
            let reason = printable(report.incomplete.as_deref().unwrap_or_default());
            let document = Document::Profile(Box::new(report));
            let (headline, text) = figure(test, &document);
            row.headline = headline;
            row.headline_text = text;
            let outcome = if complete {
                JobEnd::Done
            } else {
                JobEnd::Failed {
                    hosts: Vec::new(),
                    reason,
                }
            };
            row.outcome = row_outcome(mesh, &outcome);
            (
                outcome,
                JobResult {
                    row,
                    document: Some(document),
                },
            )
        }
        Err(error) => {
            let outcome = JobEnd::Failed {
                hosts: failed_hosts(mesh, &job, &error),
                reason: printable(&error.to_string()),
            };
            row.outcome = row_outcome(mesh, &outcome);
            (
                outcome,
                JobResult {
                    row,
                    document: None,
                },
            )
        }
    }
}

/// An RPM job's outcome: complete when both directions measured a responsiveness.
fn rpm_ended(
    mesh: &Mesh,
    job: Job,
    cycle: u64,
    (started_at, ended_at): (f64, f64),
    result: Result<RpmReport, RunError>,
) -> (JobEnd, JobResult) {
    let mut row = labelled(mesh, &job, cycle, started_at, ended_at);
    let (hosts, reason, document) = match result {
        Ok(mut report) => {
            report.target = mesh.hosts[job.dst].name.clone();
            let missing: Vec<&str> = [&report.download, &report.upload]
                .into_iter()
                .filter(|leg| leg.rpm.is_none())
                .map(|leg| leg.direction.as_str())
                .collect();
            let reason = if missing.is_empty() {
                String::new()
            } else {
                format!("no responsiveness measured: {}", missing.join(", "))
            };
            let document = Document::Rpm(Box::new(report));
            let (headline, text) = figure(&mesh.tests[job.test], &document);
            row.headline = headline;
            row.headline_text = text;
            (Vec::new(), reason, Some(document))
        }
        Err(error) => (
            failed_hosts(mesh, &job, &error),
            printable(&error.to_string()),
            None,
        ),
    };
    let outcome = if reason.is_empty() {
        JobEnd::Done
    } else {
        JobEnd::Failed { hosts, reason }
    };
    row.outcome = row_outcome(mesh, &outcome);
    (outcome, JobResult { row, document })
}

/// A STAMP window's or a trace's outcome: done when it ran. Loss, however much, is a
/// figure, not a failure (nothing answered is the reflector's failure, an error); so is
/// a destination a trace did not reach (its report says how far it got).
fn probe_ended(
    mesh: &Mesh,
    job: Job,
    cycle: u64,
    (started_at, ended_at): (f64, f64),
    result: Result<Document, RunError>,
) -> (JobEnd, JobResult) {
    let mut row = labelled(mesh, &job, cycle, started_at, ended_at);
    let (outcome, document) = match result {
        Ok(document) => {
            let (headline, text) = figure(&mesh.tests[job.test], &document);
            row.headline = headline;
            row.headline_text = text;
            (JobEnd::Done, Some(document))
        }
        Err(error) => (
            JobEnd::Failed {
                hosts: failed_hosts(mesh, &job, &error),
                reason: printable(&error.to_string()),
            },
            None,
        ),
    };
    row.outcome = row_outcome(mesh, &outcome);
    (outcome, JobResult { row, document })
}

/// What the store holds of `mesh`, as the scheduler resumes from it.
pub fn past_of(mesh: &Mesh, rows: &[MeshRow]) -> Vec<Past> {
    let jobs = mesh.jobs();
    // A job that fans out is found by any of its receivers' rows.
    let index: BTreeMap<(&str, &str, &str), usize> = jobs
        .iter()
        .enumerate()
        .flat_map(|(i, j)| {
            mesh.receivers(j).into_iter().map(move |dst| {
                (
                    (
                        mesh.tests[j.test].name.as_str(),
                        mesh.hosts[j.src].name.as_str(),
                        mesh.hosts[dst].name.as_str(),
                    ),
                    i,
                )
            })
        })
        .collect();
    rows.iter()
        .filter_map(|row| {
            let job = *index.get(&(row.test.as_str(), row.src.as_str(), row.dst.as_str()))?;
            Some(Past {
                job,
                cycle: row.cycle,
                started_at: row.started_at,
                ended_at: row.ended_at,
            })
        })
        .collect()
}

/// The hosts of `new` not in `old`, and of `old` not in `new`, by name.
fn host_changes(old: &Mesh, new: &Mesh) -> (Vec<String>, Vec<String>) {
    let names = |m: &Mesh| -> std::collections::BTreeSet<String> {
        m.hosts.iter().map(|h| h.name.clone()).collect()
    };
    let (before, after) = (names(old), names(new));
    (
        after.difference(&before).cloned().collect(),
        before.difference(&after).cloned().collect(),
    )
}

/// Where a failed job's row is found: its test, pair and end time (`history` and the
/// grid list rows by these).
fn failure_place(row: &MeshRow) -> String {
    let ended = UnixTime::from_seconds(row.ended_at).system();
    format!(
        "the failed {} {} -> {} of {}",
        row.test,
        row.src,
        row.dst,
        humantime::format_rfc3339_seconds(ended)
    )
}

/// A finished job as its thread hands it back: the job, how it ended, its results.
type Finished = (usize, JobEnd, Vec<JobResult>);

/// Each job's newest row, by (test, src, dst): what the schedule resumes from when the
/// hosts change.
type Newest = BTreeMap<(String, String, String), MeshRow>;

/// The coordinator's state on its one thread: the mesh as it stands, its scheduler, and
/// the channel the job threads report on.
struct Coordinator<'a> {
    mesh: Mesh,
    scheduler: Scheduler,
    jobs: Vec<Job>,
    runner: Arc<dyn JobRunner>,
    clock: Clock,
    store: Option<&'a mut dyn MeshArchive>,
    newest: Newest,
    /// Runs done per job this session, for a mesh of light tests only.
    runs: Vec<u64>,
    /// The exclusive tests, and the cycle each was in when this session began (`--cycles`
    /// counts from there).
    exclusive: Vec<usize>,
    first_cycle: Vec<u64>,
    results: mpsc::Sender<Finished>,
    finished: mpsc::Receiver<Finished>,
    jobs_stop: Arc<AtomicBool>,
    /// The threads jobs run on.
    job_threads: ThreadPool,
    /// Hosts found that the mesh moves to once the running jobs have ended.
    moving_to: Option<Mesh>,
    /// By host name: the stored failure that took the host down, which its skipped jobs'
    /// rows name instead of repeating its reason.
    down_kept_in: BTreeMap<String, String>,
    next_discovery: Option<std::time::Instant>,
    /// The due time last said to be waited for.
    told_waiting: Option<f64>,
    /// Documents stored so far in this session (for `[store] detail_every`).
    documents_kept: u64,
    /// `--cycles`: how many this session runs.
    cycles: Option<u64>,
}

impl<'a> Coordinator<'a> {
    fn new(
        mesh: &Mesh,
        options: &MeshOptions,
        mut store: Option<&'a mut dyn MeshArchive>,
        runner: Arc<dyn JobRunner>,
        clock: Clock,
    ) -> Result<Coordinator<'a>> {
        let mut scheduler = Scheduler::new(mesh, clock.read());
        let mut newest = Newest::new();
        if let Some(store) = store.as_deref_mut() {
            // Each job's newest row is all a schedule resumes from (its cycle and when it
            // ran): read through the pairs' latest, not the months of rows behind them.
            let rows = store
                .mesh_rows(&mesh.name, true)
                .context("reading the mesh's past results")?;
            scheduler.resume(&past_of(mesh, &rows), clock.read());
            for row in rows {
                newest.insert((row.test.clone(), row.src.clone(), row.dst.clone()), row);
            }
        }
        if options.cycles.is_some() {
            // A run of N cycles runs every test now (light ones included), not at its
            // phase or an interval after its last run.
            scheduler.start_now(clock.read());
        }
        let jobs = scheduler.jobs().to_vec();
        let first_cycle: Vec<u64> = (0..mesh.tests.len())
            .map(|t| {
                scheduler
                    .cycle(t)
                    .map_or(1, |(n, _, done)| if done { n + 1 } else { n })
            })
            .collect();
        if let Some(n) = options.cycles {
            // The exclusive tests stop opening cycles once through N, so the light ones
            // (paused beside them) get their turn and the run ends.
            for (test, &first) in first_cycle.iter().enumerate() {
                scheduler.last_cycle(test, first + n.max(1) - 1);
            }
        }
        let (results, finished) = mpsc::channel();
        Ok(Coordinator {
            runner,
            clock,
            exclusive: (0..mesh.tests.len())
                .filter(|&t| mesh.tests[t].exclusive)
                .collect(),
            runs: vec![0; jobs.len()],
            mesh: mesh.clone(),
            scheduler,
            jobs,
            store,
            newest,
            first_cycle,
            results,
            finished,
            jobs_stop: Arc::new(AtomicBool::new(false)),
            job_threads: ThreadPool::new("mesh-job"),
            moving_to: None,
            down_kept_in: BTreeMap::new(),
            told_waiting: None,
            documents_kept: 0,
            cycles: options.cycles,
            next_discovery: options
                .rediscover
                .as_ref()
                .map(|r| std::time::Instant::now() + r.every),
        })
    }

    /// Whether `--cycles` is reached: every exclusive test through that many cycles, and
    /// every light job run that many times, in this session.
    fn done(&self, cycles: Option<u64>) -> bool {
        let Some(n) = cycles else {
            return false;
        };
        let exclusive_done = self.exclusive.iter().all(|&t| {
            self.scheduler
                .cycle(t)
                .is_some_and(|(number, _, complete)| {
                    let through = (number + 1).saturating_sub(self.first_cycle[t]);
                    through > n || (through == n && complete)
                })
        });
        let light_done = self
            .jobs
            .iter()
            .zip(&self.runs)
            .filter(|(job, _)| !self.mesh.tests[job.test].exclusive)
            .all(|(_, &runs)| runs >= n);
        exclusive_done && light_done
    }

    /// Says once when nothing runs and the next job is due more than a little while
    /// away, so that a run that waits says what for.
    fn tell_waiting(&mut self, now: f64, each: &mut dyn FnMut(MeshEvent)) {
        if self.scheduler.running() > 0 {
            return;
        }
        let Some(due) = self.scheduler.next_wakeup(now) else {
            return;
        };
        if due - now >= WAIT_WORTH_SAYING_S && self.told_waiting != Some(due) {
            self.told_waiting = Some(due);
            each(MeshEvent::Waiting { until: due });
        }
    }

    /// Stores results together (one transaction: a busy mesh's results share a commit)
    /// with their run ids set, and notes each as its job's newest. A document goes in
    /// compact unless `[store]` keeps this one whole; the result reported on (to the
    /// metrics, the grid, the alerts) keeps its every figure either way.
    fn keep_all(&mut self, results: &mut [JobResult]) -> Result<()> {
        if let Some(store) = self.store.as_deref_mut() {
            let mut jsons = Vec::with_capacity(results.len());
            for result in results.iter() {
                jsons.push(match &result.document {
                    Some(document) => {
                        let n = self.documents_kept;
                        self.documents_kept += 1;
                        let failed = !result.row.outcome.is_ok();
                        Some(if self.mesh.store.keeps_whole(n, failed) {
                            document.to_stored_json()?
                        } else {
                            document.compact().to_stored_json()?
                        })
                    }
                    None => None,
                });
            }
            let items: Vec<linerate_store::MeshItem<'_>> = results
                .iter()
                .zip(&jsons)
                .map(|(result, json)| (&result.row, result.document.as_ref().zip(json.as_deref())))
                .collect();
            let ids = store.insert_mesh_batch(&items)?;
            for (result, id) in results.iter_mut().zip(ids) {
                result.row.run_id = id;
            }
        }
        for result in results.iter() {
            let row = &result.row;
            self.newest.insert(
                (row.test.clone(), row.src.clone(), row.dst.clone()),
                row.clone(),
            );
        }
        Ok(())
    }

    /// Resolves the hosts again when it is time; a change waits in `moving_to`.
    fn rediscover(&mut self, rediscover: &mut Rediscover, each: &mut dyn FnMut(MeshEvent)) {
        let now = std::time::Instant::now();
        let due = self.next_discovery.is_some_and(|at| now >= at);
        if !due || self.moving_to.is_some() {
            return;
        }
        self.next_discovery = Some(now + rediscover.every);
        match (rediscover.find)() {
            Ok(found) => {
                let (added, removed) = host_changes(&self.mesh, &found);
                if !added.is_empty() || !removed.is_empty() {
                    each(MeshEvent::Hosts { added, removed });
                    self.moving_to = Some(found);
                }
            }
            Err(e) => each(MeshEvent::DiscoveryFailed(format!("{e:#}"))),
        }
    }

    /// Moves to the hosts found once nothing runs: a new schedule, resumed from what was
    /// measured.
    fn move_when_idle(&mut self, now: f64) {
        if self.moving_to.is_none() || self.scheduler.running() > 0 {
            return;
        }
        self.mesh = self.moving_to.take().expect("checked above");
        let rows: Vec<MeshRow> = self.newest.values().cloned().collect();
        self.scheduler = Scheduler::new(&self.mesh, now);
        self.scheduler.resume(&past_of(&self.mesh, &rows), now);
        // A run of N cycles keeps its bound over the new hosts.
        if let Some(n) = self.cycles {
            for (test, &first) in self.first_cycle.iter().enumerate() {
                self.scheduler.last_cycle(test, first + n.max(1) - 1);
            }
        }
        self.jobs = self.scheduler.jobs().to_vec();
        self.runs = vec![0; self.jobs.len()];
    }

    /// Starts a job on a thread of the pool's, or keeps a skipped one's row.
    fn act(&mut self, action: Action, now: f64, each: &mut dyn FnMut(MeshEvent)) -> Result<()> {
        match action {
            Action::Start { job, cycle } => {
                let (mesh, results, stop) = (
                    self.mesh.clone(),
                    self.results.clone(),
                    self.jobs_stop.clone(),
                );
                let runner = self.runner.clone();
                let spec = self.jobs[job];
                self.job_threads
                    .run(move || {
                        let (outcome, ran) = runner.run(&mesh, spec, cycle, &stop);
                        let _ = results.send((job, outcome, ran));
                    })
                    .context("starting a job's thread")?;
            }
            Action::Skip { job, cycle, down } => {
                let kept_in = self.down_kept_in.get(&down.name).map(String::as_str);
                let spec = self.jobs[job];
                // A row per receiver, as the job would have made.
                let mut results: Vec<JobResult> = self
                    .mesh
                    .receivers(&spec)
                    .into_iter()
                    .map(|dst| JobResult {
                        row: MeshRow {
                            outcome: Outcome::Skipped {
                                reason: down.describe(kept_in),
                            },
                            ..labelled_to(&self.mesh, &spec, dst, cycle, (now, now))
                        },
                        document: None,
                    })
                    .collect();
                self.keep_all(&mut results)?;
                // A skipped job had its turn: `--cycles` counts it, or a light job of a
                // host that stays down would keep the run from ending.
                if let Some(runs) = self.runs.get_mut(job) {
                    *runs += 1;
                }
                for result in &results {
                    each(MeshEvent::Result(result));
                }
            }
        }
        Ok(())
    }

    /// A job that ended, and every other that ended meanwhile (up to [`BATCH`]): kept
    /// together, then each told to the scheduler and reported.
    fn ended(&mut self, first: Finished, each: &mut dyn FnMut(MeshEvent)) -> Result<()> {
        let mut finished = vec![first];
        while finished.len() < BATCH {
            match self.finished.try_recv() {
                Ok(more) => finished.push(more),
                Err(_) => break,
            }
        }
        let stopped = self.jobs_stop.load(Ordering::Relaxed);
        let mut jobs: Vec<(usize, JobEnd, usize)> = Vec::with_capacity(finished.len());
        let mut results: Vec<JobResult> = Vec::new();
        for (job, outcome, ran) in finished {
            let (job, outcome, ran) = if stopped {
                interrupted(job, outcome, ran)
            } else {
                (job, outcome, ran)
            };
            jobs.push((job, outcome, ran.len()));
            results.extend(ran);
        }
        self.keep_all(&mut results)?;
        let mut rest = results.as_slice();
        for (job, outcome, count) in jobs {
            let (mine, after) = rest.split_at(count);
            rest = after;
            if let JobEnd::Failed { hosts, .. } = &outcome {
                // Kept only where a store holds the row it names: the row that blames
                // the host, else the job's first.
                if self.store.is_some() {
                    for &host in hosts {
                        let name = self.mesh.hosts[host].name.clone();
                        let row = mine
                            .iter()
                            .find(|r| {
                                matches!(&r.row.outcome, Outcome::Failed { blamed: Some(b), .. } if *b == name)
                            })
                            .or(mine.first());
                        if let Some(result) = row {
                            self.down_kept_in.insert(name, failure_place(&result.row));
                        }
                    }
                }
            }
            self.scheduler.finished(job, self.clock.read(), outcome);
            if let Some(runs) = self.runs.get_mut(job) {
                *runs += 1;
            }
            for result in mine {
                each(MeshEvent::Result(result));
            }
        }
        Ok(())
    }

    /// Stopped or done: the running jobs end (a stop ends their profile runs early) and
    /// what they measured is kept; those still running after the grace are left.
    fn drain(&mut self, stopped: bool, each: &mut dyn FnMut(MeshEvent)) -> Result<()> {
        self.jobs_stop.store(stopped, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + STOP_GRACE;
        while self.scheduler.running() > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.finished.recv_timeout(left) {
                Ok(finished) => self.ended(finished, each)?,
                Err(_) => break,
            }
        }
        Ok(())
    }
}

/// A job that ended after the operator's stop: if it did not finish, the stop cut it
/// short, and it is kept as interrupted (its reason kept), not as a failure of its pair;
/// nor does it take a host down.
fn interrupted(
    job: usize,
    outcome: JobEnd,
    mut results: Vec<JobResult>,
) -> (usize, JobEnd, Vec<JobResult>) {
    let mut cut = false;
    for result in &mut results {
        if let Outcome::Failed { reason, .. } = &result.row.outcome {
            result.row.outcome = Outcome::Interrupted {
                reason: format!("the coordinator was stopped while it ran: {reason}"),
            };
            cut = true;
        }
    }
    if cut {
        (job, JobEnd::Done, results)
    } else {
        (job, outcome, results)
    }
}

/// Runs the mesh until `stop` (then ends the running jobs within [`STOP_GRACE`]) or
/// `options.cycles`; each result goes to `store` and then to `each`. With
/// `options.rediscover`, the hosts are found again every so often; when they change, no
/// job starts until the running ones end, and the schedule carries on over the new
/// hosts from what was measured (their new pairs join the cycle under way).
pub fn run(
    mesh: &Mesh,
    options: MeshOptions,
    store: Option<&mut dyn MeshArchive>,
    stop: &Arc<AtomicBool>,
    each: &mut dyn FnMut(MeshEvent),
) -> Result<()> {
    let clock = Clock::system();
    let runner = Arc::new(AgentRunner {
        options: RunOptions {
            lead: options.lead,
            control_timeout: options.control_timeout,
            key: options.key.clone(),
            log: false,
            links: Some(Arc::new(linerate_drivers::profile::LinkPool::default())),
            ..RunOptions::default()
        },
        clock: Clock::wall(),
    });
    run_with(mesh, options, store, stop, each, runner, clock)
}

/// [`run`] with the jobs run by `runner` and the time read from `clock`.
pub fn run_with(
    mesh: &Mesh,
    mut options: MeshOptions,
    store: Option<&mut dyn MeshArchive>,
    stop: &Arc<AtomicBool>,
    each: &mut dyn FnMut(MeshEvent),
    runner: Arc<dyn JobRunner>,
    clock: Clock,
) -> Result<()> {
    let mut c = Coordinator::new(mesh, &options, store, runner, clock.clone())?;
    // Done: start nothing more (a cycle opened by the same poll would never let the
    // running count reach zero); the running jobs end in the drain.
    while !stop.load(Ordering::Relaxed) && !c.done(options.cycles) {
        let now = clock.read();
        if let Some(rediscover) = options.rediscover.as_mut() {
            c.rediscover(rediscover, each);
        }
        c.move_when_idle(now);
        let actions = match c.moving_to {
            None => c.scheduler.poll(now),
            Some(_) => Vec::new(),
        };
        for action in actions {
            c.act(action, now, each)?;
        }
        c.tell_waiting(now, each);
        let wake = c
            .scheduler
            .next_wakeup(now)
            .map_or(1.0, |at| (at - clock.read()).clamp(0.0, 1.0));
        match c
            .finished
            .recv_timeout(Duration::from_secs_f64(wake.max(0.01) * clock.pace))
        {
            Ok(finished) => c.ended(finished, each)?,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    c.drain(stop.load(Ordering::Relaxed), each)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mesh of `hosts` (named a, b, c ... at 10.0.0.1, .2, .3 ...) running one test of
    /// `run` over every ordered pair.
    fn mesh_of(hosts: usize, test: &str, run: &str, interval: &str) -> Mesh {
        let mut text = "name = \"m\"\n".to_string();
        for i in 0..hosts {
            let name = char::from(b'a' + i as u8);
            text += &format!(
                "[[host]]\nname = \"{name}\"\naddress = \"10.0.0.{}:5201\"\n",
                i + 1
            );
        }
        text += &format!(
            "[[test]]\nname = \"{test}\"\nrun = \"{run}\"\nduration = \"1s\"\ninterval = \"{interval}\"\n\
             [[group]]\nname = \"all\"\ntests = [\"{test}\"]\n"
        );
        linerate_mesh::parse("mesh.toml", &text).unwrap()
    }

    fn two_hosts() -> Mesh {
        mesh_of(2, "lat", "rr", "10s")
    }

    /// A job that failed after the operator's stop is kept as interrupted and takes no
    /// host down; one that finished is kept as it was.
    #[test]
    fn a_job_the_stop_cut_short_is_interrupted_not_failed() {
        let mesh = two_hosts();
        let job = Job {
            src: 0,
            dst: 1,
            test: 0,
            round: 0,
        };
        let mut result = JobResult {
            row: labelled(&mesh, &job, 1, 0.0, 1.0),
            document: None,
        };
        result.row.outcome = Outcome::Failed {
            blamed: Some("h1".into()),
            reason: "1 thread(s) stopped before the end of their transactions".into(),
        };
        let failed = JobEnd::Failed {
            hosts: vec![1],
            reason: String::new(),
        };
        let (_, outcome, kept) = interrupted(0, failed, vec![result]);
        assert!(matches!(outcome, JobEnd::Done));
        assert_eq!(kept[0].row.outcome.name(), "interrupted");
        assert!(kept[0]
            .row
            .outcome
            .reason()
            .contains("stopped before the end"));
        let mut done = JobResult {
            row: labelled(&mesh, &job, 1, 0.0, 1.0),
            document: None,
        };
        done.row.outcome = Outcome::Ok;
        let (_, _, kept) = interrupted(0, JobEnd::Done, vec![done]);
        assert!(kept[0].row.outcome.is_ok());
    }

    /// A multicast job from a to b, c and d is a row per receiver: each that counted is
    /// done with its own figure, one whose agent failed is failed and laid at that
    /// receiver alone (the job's failure takes only it down); a source that failed fails
    /// every row, laid at the source.
    #[test]
    fn a_fan_out_job_is_a_row_per_receiver_each_blamed_on_its_own() {
        let mut text = "name = \"m\"\n".to_string();
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            text += &format!(
                "[[host]]\nname = \"{name}\"\naddress = \"10.0.0.{}:5201\"\n",
                i + 1
            );
        }
        text += "[[test]]\nname = \"tv\"\nrun = \"multicast\"\ngroup = \"239.1.1.1\"\ninterval = \"1m\"\n\
                 [[group]]\nname = \"all\"\nshape = \"star\"\ncenter = \"a\"\ndirections = \"one\"\ntests = [\"tv\"]\n";
        let mesh = linerate_mesh::parse("mesh.toml", &text).unwrap();
        let job = mesh.jobs()[0];
        let receivers = mesh.receivers(&job);
        assert_eq!(receivers, [1, 2, 3]);
        let report = |lost: u64| {
            let mut doc: linerate_report::multicast::MulticastReport = serde_json::from_value(
                serde_json::json!({"test": "multicast", "started_at": 0.0, "target": "239.1.1.1:5001",
                    "receiver": "b"}),
            )
            .unwrap();
            doc.sent = Some(serde_json::from_value(serde_json::json!({
                "group": "239.1.1.1", "groups": 1, "port": 5001, "ttl": 1, "interface": null,
                "local": null, "length": 1000, "rate_bps": 1000000, "datagrams": 1000,
                "bytes": 1000000, "send_errors": 0, "duration_s": 8.0, "sent_bps": 1e6, "finals": 10
            })).unwrap());
            doc.received = Some(Box::new(
                serde_json::from_value(serde_json::json!({
                    "group": "239.1.1.1", "port": 5001, "source": null, "sender": "10.0.0.1:40000",
                    "datagrams": 1000 - lost, "bytes": (1000 - lost) * 1000, "lost": lost,
                    "expected": 1000, "loss_percent": lost as f64 / 10.0, "out_of_order": 0,
                    "duplicates": 0, "foreign": 0, "jitter_ms": 0.1, "duration_s": 8.0,
                    "received_bps": 1e6, "join_latency_ms": 1.0,
                    "one_way_delay": {"state": "withheld", "reason": "clocks"},
                    "added_delay_ms": 0.0, "ended": "final"
                }))
                .unwrap(),
            ));
            Document::Multicast(Box::new(doc))
        };
        let refused = RunError::Agent {
            host: "10.0.0.3:5201".into(),
            why: "cannot join 239.1.1.1".into(),
            unreachable: None,
        };
        let (outcome, rows) = fanout_ended(
            &mesh,
            job,
            1,
            &receivers,
            (0.0, 10.0),
            Ok(vec![Ok(report(0)), Err(refused), Ok(report(50))]),
        );
        let JobEnd::Failed { hosts, reason } = outcome else {
            panic!("a receiver failed")
        };
        assert_eq!(hosts, [2]);
        assert!(reason.contains("cannot join"), "{reason}");
        let dsts: Vec<&str> = rows.iter().map(|r| r.row.dst.as_str()).collect();
        assert_eq!(dsts, ["b", "c", "d"]);
        assert!(rows.iter().all(|r| r.row.src == "a"));
        assert_eq!(rows[0].row.headline, Some(0.0));
        assert_eq!(rows[2].row.headline, Some(0.05));
        assert!(
            matches!(&rows[1].row.outcome, Outcome::Failed { blamed: Some(c), .. } if c == "c")
        );
        assert!(rows[1].document.is_none());
        let lost_source = RunError::Agent {
            host: "10.0.0.1:5201".into(),
            why: "no route to the group".into(),
            unreachable: None,
        };
        let (outcome, rows) = fanout_ended(&mesh, job, 1, &receivers, (0.0, 1.0), Err(lost_source));
        assert!(matches!(outcome, JobEnd::Failed { ref hosts, .. } if hosts == &[0]));
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(
            |r| matches!(&r.row.outcome, Outcome::Failed { blamed: Some(a), .. } if a == "a")
        ));
    }

    #[test]
    fn the_destination_is_blamed_only_when_the_agent_names_it_unreachable() {
        let mesh = two_hosts();
        let job = mesh
            .jobs()
            .into_iter()
            .find(|j| mesh.hosts[j.src].name == "a")
            .unwrap();
        let agent = |why: &str, unreachable: Option<&str>| RunError::Agent {
            host: "10.0.0.1:5201".into(),
            why: why.into(),
            unreachable: unreachable.map(str::to_string),
        };
        let named = agent("peer 10.0.0.2:5201 is not ...", Some("10.0.0.2:5201"));
        assert_eq!(failed_hosts(&mesh, &job, &named), vec![job.dst]);
        // Its words mention the destination, but the agent failed on its own.
        let mentioned = agent("out of memory while serving 10.0.0.2:5201", None);
        assert_eq!(failed_hosts(&mesh, &job, &mentioned), vec![job.src]);
        let local = RunError::Local(std::io::Error::other("no threads"));
        assert!(failed_hosts(&mesh, &job, &local).is_empty());
        let lost = RunError::Lost {
            host: "10.0.0.1:5201".into(),
            why: "connection lost: connection reset by peer".into(),
        };
        assert!(
            failed_hosts(&mesh, &job, &lost).is_empty(),
            "nobody taken for down"
        );
    }

    /// An archive in memory.
    #[derive(Default)]
    struct Kept {
        rows: Vec<MeshRow>,
        /// The size of each hand-over, in order.
        batches: Vec<usize>,
    }

    impl MeshArchive for Kept {
        fn insert_mesh(
            &mut self,
            row: &MeshRow,
            _run: Option<(&Document, &str)>,
        ) -> Result<Option<i64>, linerate_store::StoreError> {
            self.rows.push(row.clone());
            self.batches.push(1);
            Ok(None)
        }
        fn insert_mesh_batch(
            &mut self,
            items: &[linerate_store::MeshItem<'_>],
        ) -> Result<Vec<Option<i64>>, linerate_store::StoreError> {
            self.rows
                .extend(items.iter().map(|(row, _)| (*row).clone()));
            self.batches.push(items.len());
            Ok(vec![None; items.len()])
        }
        fn mesh_rows(
            &mut self,
            mesh: &str,
            _latest: bool,
        ) -> Result<Vec<MeshRow>, linerate_store::StoreError> {
            Ok(self
                .rows
                .iter()
                .filter(|r| r.mesh == mesh)
                .cloned()
                .collect())
        }
        fn location(&self) -> String {
            "memory".into()
        }
    }

    /// Jobs that end at once: those with host `dead` fail, its agent unreachable (the
    /// source's agent names it, or the coordinator cannot reach it as the source).
    struct Fake {
        dead: &'static str,
        clock: Clock,
    }

    impl JobRunner for Fake {
        fn run(
            &self,
            mesh: &Mesh,
            job: Job,
            cycle: u64,
            _: &AtomicBool,
        ) -> (JobEnd, Vec<JobResult>) {
            let now = self.clock.read();
            let mut row = labelled(mesh, &job, cycle, now, now + 1.0);
            let (src, dst) = (&mesh.hosts[job.src], &mesh.hosts[job.dst]);
            let error = if src.name == self.dead {
                Some(RunError::Agent {
                    host: src.address.clone(),
                    why: "cannot connect: connection refused".into(),
                    unreachable: None,
                })
            } else if dst.name == self.dead {
                Some(RunError::Agent {
                    host: src.address.clone(),
                    why: format!("peer {} is not a linerate agent", dst.address),
                    unreachable: Some(dst.address.clone()),
                })
            } else {
                None
            };
            let outcome = match error {
                Some(error) => JobEnd::Failed {
                    hosts: failed_hosts(mesh, &job, &error),
                    reason: printable(&error.to_string()),
                },
                None => JobEnd::Done,
            };
            row.outcome = row_outcome(mesh, &outcome);
            let result = JobResult {
                row,
                document: None,
            };
            (outcome, vec![result])
        }
    }

    /// Three healthy hosts (a, b, d; the fake runner's dead host c is not among them)
    /// with an exclusive throughput test and a light latency test at these intervals.
    fn throughput_and_latency(tput_every: &str, lat_every: &str) -> Mesh {
        let mut text = "name = \"m\"\n".to_string();
        for (name, last) in [("a", 1), ("b", 2), ("d", 4)] {
            text += &format!("[[host]]\nname = \"{name}\"\naddress = \"10.0.0.{last}:5201\"\n");
        }
        for (name, run, every) in [("tput", "stream", tput_every), ("lat", "rr", lat_every)] {
            text += &format!(
                "[[test]]\nname = \"{name}\"\nrun = \"{run}\"\nduration = \"1s\"\ninterval = \"{every}\"\n"
            );
        }
        text += "[[group]]\nname = \"all\"\ntests = [\"tput\", \"lat\"]\n";
        linerate_mesh::parse("mesh.toml", &text).unwrap()
    }

    fn three_hosts() -> Mesh {
        mesh_of(3, "tput", "stream", "60s")
    }

    /// The schedule's clock counts on from where the wall clock stood at its start,
    /// whatever the wall clock does since: set back an hour, it neither stops nor goes
    /// back (a cycle would wait an hour); set forward, it does not jump (every job would
    /// fall due at once).
    #[test]
    fn the_schedule_clock_holds_its_course_when_the_host_time_steps() {
        let passed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = passed.clone();
        let clock = Clock::anchored(1.8e9, move || {
            Duration::from_millis(seen.load(Ordering::Relaxed))
        });
        assert_eq!(clock.read(), 1.8e9);
        passed.store(90_000, Ordering::Relaxed);
        assert_eq!(clock.read(), 1.8e9 + 90.0);
        // Whatever the wall clock reads now (set back or forward by an hour), the
        // schedule's time is its start plus the monotonic clock's count.
        passed.store(150_000, Ordering::Relaxed);
        assert_eq!(clock.read(), 1.8e9 + 150.0);
        let system = Clock::system();
        let (a, b) = (system.read(), system.read());
        assert!(b >= a && (a - UnixTime::now().seconds()).abs() < 5.0);
    }

    /// A clock that moves a second each time it is read, a second of it waited in a
    /// millisecond: a simulated hour passes in moments.
    fn racing_clock() -> Clock {
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Clock {
            now: Arc::new(move || 1.8e9 + ticks.fetch_add(1, Ordering::Relaxed) as f64),
            pace: 0.001,
        }
    }

    fn run_cycles(mesh: &Mesh, kept: &mut Kept, cycles: u64) -> Vec<MeshRow> {
        let clock = racing_clock();
        let runner = Arc::new(Fake {
            dead: "c",
            clock: clock.clone(),
        });
        let options = MeshOptions {
            cycles: Some(cycles),
            key: None,
            control_timeout: Duration::from_secs(5),
            lead: Duration::from_millis(100),
            rediscover: None,
        };
        let mut printed = Vec::new();
        let stop = Arc::new(AtomicBool::new(false));
        run_with(
            mesh,
            options,
            Some(kept),
            &stop,
            &mut |event| {
                if let MeshEvent::Result(result) = event {
                    printed.push(result.row.clone());
                }
            },
            runner,
            clock,
        )
        .unwrap();
        printed
    }

    /// Jobs that ended while the coordinator was busy are stored in one hand-over (one
    /// transaction), in the order they ended, and each is still reported and told to the
    /// scheduler.
    #[test]
    fn results_that_ended_together_are_stored_together_in_order() {
        let mesh = mesh_of(4, "lat", "rr", "10s");
        let clock = racing_clock();
        let runner = Arc::new(Fake {
            dead: "none",
            clock: clock.clone(),
        });
        let options = MeshOptions {
            cycles: Some(1),
            key: None,
            control_timeout: Duration::from_secs(5),
            lead: Duration::from_millis(100),
            rediscover: None,
        };
        let mut kept = Kept::default();
        let mut sent = Vec::new();
        let mut reported = Vec::new();
        {
            let mut c = Coordinator::new(
                &mesh,
                &options,
                Some(&mut kept),
                runner.clone(),
                clock.clone(),
            )
            .unwrap();
            // Start jobs as the scheduler says, and let each end at once (run here, its
            // result queued as a job's thread would queue it).
            for _ in 0..1000 {
                for action in c.scheduler.poll(clock.read()) {
                    if let Action::Start { job, cycle } = action {
                        let stop = AtomicBool::new(false);
                        let (outcome, ran) = runner.run(&mesh, c.jobs[job], cycle, &stop);
                        sent.extend(ran.iter().map(|r| (r.row.src.clone(), r.row.dst.clone())));
                        c.results.send((job, outcome, ran)).unwrap();
                    }
                }
                if sent.len() >= 4 {
                    break;
                }
            }
            assert!(
                sent.len() >= 4,
                "the scheduler started {} job(s)",
                sent.len()
            );
            assert_eq!(c.scheduler.running(), sent.len());
            let first = c.finished.recv().unwrap();
            c.ended(first, &mut |event| {
                if let MeshEvent::Result(result) = event {
                    reported.push((result.row.src.clone(), result.row.dst.clone()));
                }
            })
            .unwrap();
            assert_eq!(c.scheduler.running(), 0, "each told to the scheduler");
        }
        assert_eq!(kept.batches, vec![sent.len()], "one hand-over for them all");
        let stored: Vec<_> = kept
            .rows
            .iter()
            .map(|row| (row.src.clone(), row.dst.clone()))
            .collect();
        assert_eq!(stored, sent, "stored in the order they ended");
        assert_eq!(reported, sent, "each reported");
    }

    #[test]
    fn a_dead_host_is_blamed_once_skipped_after_and_a_restart_resumes() {
        let mesh = three_hosts();
        let mut kept = Kept::default();
        let printed = run_cycles(&mesh, &mut kept, 1);
        // Every ordered pair has its row in the cycle: ok without c, failed or skipped
        // with it.
        assert_eq!(printed.len(), 6, "{printed:#?}");
        for row in &printed {
            let with_c = row.src == "c" || row.dst == "c";
            assert_eq!(row.outcome.is_ok(), !with_c, "{row:?}");
        }
        let failed: Vec<&MeshRow> = printed
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed { .. }))
            .collect();
        let skipped: Vec<&MeshRow> = printed.iter().filter(|r| r.outcome.is_skipped()).collect();
        assert!(!failed.is_empty() && !skipped.is_empty(), "{printed:#?}");
        for row in &failed {
            // Host c is blamed whichever end of the job it was.
            assert_eq!(row.outcome.blamed(), Some("c"), "{row:?}");
        }
        for row in &skipped {
            // The skip names the kept failure instead of repeating its reason.
            let reason = row.outcome.reason();
            assert!(
                reason.starts_with("host c is down")
                    && reason.contains("the reason is in the failed tput")
                    && !reason.contains("connection refused")
                    && !reason.contains("not a linerate agent"),
                "{row:?}"
            );
        }
        // The store holds what was printed; a new coordinator resumes at cycle 2.
        assert_eq!(kept.rows.len(), printed.len());
        let again = run_cycles(&mesh, &mut kept, 1);
        assert!(again.iter().all(|r| r.cycle == 2), "{again:#?}");
        assert_eq!(again.len(), 6);
    }

    /// `--cycles 1` runs every test of the file now and ends, on a store that already
    /// holds a cycle too: the exclusive test opens its next cycle at once instead of an
    /// interval (an hour) after the last, and the light test runs each job once instead
    /// of waiting for its phase in the hour.
    #[test]
    fn one_cycle_runs_every_test_now_even_after_a_cycle_is_kept() {
        let mesh = throughput_and_latency("1h", "1h");
        let mut kept = Kept::default();
        for (session, cycle) in [(1, 1), (2, 2)] {
            let printed = run_cycles(&mesh, &mut kept, 1);
            let of = |test: &str| printed.iter().filter(|r| r.test == test).count();
            // Six ordered pairs, each test once; c is not in this mesh, so all pass.
            assert_eq!(
                (of("tput"), of("lat")),
                (6, 6),
                "session {session}: {printed:#?}"
            );
            assert!(printed.iter().all(|r| r.outcome.is_ok()), "{printed:#?}");
            let first = printed
                .iter()
                .map(|r| r.started_at)
                .fold(f64::MAX, f64::min);
            let last = printed.iter().map(|r| r.ended_at).fold(0.0, f64::max);
            // Simulated seconds: the clock moves a second a read, so a run that waited for
            // the next hour or for its phases would span thousands.
            assert!(
                last - first < 600.0,
                "session {session} took {} s",
                last - first
            );
            assert!(
                printed
                    .iter()
                    .filter(|r| r.test == "tput")
                    .all(|r| r.cycle == cycle),
                "{printed:#?}"
            );
        }
    }

    /// A throughput test whose cycles come back to back (a short interval) opens no
    /// second cycle in a run of one: the light test paused beside it gets its turn and the
    /// run ends, with exactly one cycle of the throughput test (once it ran three).
    #[test]
    fn one_cycle_opens_no_second_while_light_jobs_wait() {
        let mesh = throughput_and_latency("2s", "60s");
        let mut kept = Kept::default();
        let printed = run_cycles(&mesh, &mut kept, 1);
        let tput: Vec<&MeshRow> = printed.iter().filter(|r| r.test == "tput").collect();
        assert_eq!(tput.len(), 6, "{printed:#?}");
        assert!(tput.iter().all(|r| r.cycle == 1), "{tput:#?}");
        assert!(
            printed.iter().filter(|r| r.test == "lat").count() >= 6,
            "{printed:#?}"
        );
    }

    /// A light test whose host stays down still ends `--cycles 1`: its skipped jobs had
    /// their turn (once, a run waited on them for ever).
    #[test]
    fn one_cycle_of_a_light_test_ends_with_a_host_down() {
        let (done, ended) = mpsc::channel();
        std::thread::spawn(move || {
            let mesh = mesh_of(3, "lat", "rr", "1h");
            let mut kept = Kept::default();
            let printed = run_cycles(&mesh, &mut kept, 1);
            let _ = done.send(printed);
        });
        let printed = ended
            .recv_timeout(Duration::from_secs(60))
            .expect("one cycle ends");
        assert_eq!(printed.len(), 6, "{printed:#?}");
        assert!(
            printed
                .iter()
                .filter(|r| r.src == "c" || r.dst == "c")
                .all(|r| !r.outcome.is_ok()),
            "{printed:#?}"
        );
    }

    #[test]
    fn a_reason_from_a_peer_is_kept_printable_and_bounded() {
        let mesh = two_hosts();
        let job = mesh.jobs()[0];
        let result = Err(RunError::Agent {
            host: "10.0.0.1:5201".into(),
            why: format!("\u{1b}[2J\r\nFAKE LOG LINE{}", "x".repeat(100_000)),
            unreachable: None,
        });
        let (outcome, kept) = rpm_ended(&mesh, job, 1, (0.0, 1.0), result);
        let kept_reason = kept.row.outcome.reason();
        assert!(kept_reason.chars().count() <= 2003);
        assert!(!kept_reason.chars().any(char::is_control));
        assert_eq!(
            kept.row.outcome.blamed(),
            Some(mesh.hosts[job.src].name.as_str())
        );
        let JobEnd::Failed { hosts, reason } = outcome else {
            panic!("a failure")
        };
        assert_eq!(hosts, vec![job.src]);
        assert_eq!(reason, kept_reason);
    }
}
