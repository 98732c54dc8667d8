//! A job an agent runs as the source of a mesh test and reports once: a STAMP window, a
//! trace, and the kinds to come. The agent's connection holds one as its work, looks at
//! it as often as it asks, says it is alive meanwhile, and sends its reply (or why it
//! failed) when it ends; the connection never names a kind of job.

use super::rpm_job::SourceError;
use linerate_proto::agent::AgentReply;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a running agent tells its controller it is alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(500);

/// What the agent's server allows any job (`serve`'s limits).
pub(crate) struct Bounds {
    pub max_duration_s: f64,
    pub max_rate_bps: Option<u64>,
}

/// The source a job's packets leave from, as a controller named it (`source`,
/// `source_dev`): checked on this host before anything is sent.
pub(crate) fn check_source(source: Option<&linerate_model::Source>) -> Result<(), String> {
    source.map_or(Ok(()), linerate_model::Source::check)
}

/// A job as a controller asked for it, before it runs.
pub(crate) trait SourceJob: Send {
    /// What logs and refusals call it: "STAMP test", "trace".
    fn what(&self) -> &'static str;
    /// This server's own bounds on it and its source's checks; why not, if it may not run.
    fn check(&self, bounds: &Bounds) -> Result<(), String>;
    /// Starts it for `requester` (whom its destination must be allowed for, any host where
    /// this server holds a `key`, which a job that dials a linerate server proves to it);
    /// it ends early when `stop` is set.
    fn start(
        self: Box<Self>,
        requester: IpAddr,
        key: Option<linerate_proto::auth::Key>,
        stop: Arc<AtomicBool>,
    ) -> Result<Box<dyn SourceRun>, SourceError>;
}

/// A job under way.
pub(crate) trait SourceRun: Send {
    /// Its reply once it ended; `None` while it runs.
    fn poll(&mut self) -> Option<Result<AgentReply, SourceError>>;
    /// When its outcome is due, where it knows: the agent sleeps until then (or its next
    /// heartbeat) instead of looking 20 times a second.
    fn due(&self) -> Option<Instant> {
        None
    }
    /// How often the agent says it is alive meanwhile.
    fn heartbeat(&self) -> Duration {
        HEARTBEAT
    }
}

/// What a source job's request carries besides its kind.
pub(crate) struct Asked {
    /// The kind's own request.
    pub spec: serde_json::Value,
    /// The heartbeat the controller asked, if it did.
    pub heartbeat_s: Option<linerate_proto::agent::Seconds>,
    pub source: Option<linerate_model::Source>,
}

/// A kind of job an agent runs as a mesh test's source, both of its sides in its job
/// module: what the agent reads from a request and runs, and what the controller asks and
/// reads back. The agent's connection and the coordinator find a kind in
/// [`super::SOURCE_KINDS`] by its name and never name one.
pub struct SourceKind {
    /// Its name on the wire and in the mesh file (`run = "stamp"`).
    pub name: &'static str,
    /// What logs and refusals call its jobs: "STAMP test", "trace".
    pub what: &'static str,
    /// The agent's side: the job a request asks, its values bounded as they are read.
    pub(crate) read: fn(Asked) -> Result<Box<dyn SourceJob>, String>,
    /// The controller's side: the heartbeat it asks for (`None`: the agent's own), and
    /// the longest it waits for the answer of a job `spec` asks.
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) limit: fn(&serde_json::Value) -> Result<Duration, String>,
    /// The controller's side: the answer's report, read and held to what `spec` asked,
    /// as the result document of a job whose destination is called `target`.
    pub(crate) answer: fn(
        &serde_json::Value,
        serde_json::Value,
        &str,
    ) -> Result<linerate_report::document::Document, String>,
    /// A kind one receiver of a fan-out job runs (multicast): the controller's side, its
    /// document gathered with the source's into the row of the pair (source, receiver).
    pub(crate) gather: Option<Gather>,
}

/// How a fan-out receiver's document is gathered with its source's.
pub(crate) type Gather = fn(
    &linerate_report::document::Document,
    linerate_report::document::Document,
) -> Result<linerate_report::document::Document, String>;

/// A job on a thread of its own whose report (or why not) arrives once: `what` names it
/// where its report cannot be encoded or its thread ended without one.
pub(crate) struct ThreadRun<R> {
    pub what: &'static str,
    pub outcome: std::sync::mpsc::Receiver<Result<R, SourceError>>,
}

impl<R: serde::Serialize + Send> SourceRun for ThreadRun<R> {
    fn poll(&mut self) -> Option<Result<AgentReply, SourceError>> {
        use std::sync::mpsc::TryRecvError;
        let failed = |reason: String| SourceError {
            reason,
            unreachable: None,
        };
        match self.outcome.try_recv() {
            Ok(outcome) => Some(outcome.and_then(|report| {
                let report = serde_json::to_value(report)
                    .map_err(|e| failed(format!("cannot encode the {}: {e}", self.what)))?;
                Ok(AgentReply::SourceResult { report })
            })),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                Some(Err(failed(format!("the {} ended", self.what))))
            }
        }
    }
}
