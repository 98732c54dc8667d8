//! STAMP from an agent (a mesh's `run = "stamp"`): the controller asks the source's agent
//! to probe the destination's reflector for one report window; the agent runs
//! `linerate stamp`'s sender and answers with its report.
//!
//! Nobody is probed on a name alone where that matters: with a key, the requester proved
//! it and may name any reflector (a router cannot prove anything, and STAMP's probes are
//! small, paced and bounded here: at most 10,000 a second of at most 9,000 octets, within
//! `--max-rate`); without a key, only the requester's own address, as a profile's peers.

use linerate_proto::agent::{AgentReply, Dscp, ProbeRate, ProbeSize, Seconds};
use linerate_proto::text::PeerText;
use linerate_report::document::Document;
use linerate_report::stamp::StampReport;
use linerate_stamp::sender::Options;
use linerate_stamp::wire::{tlv, Mode};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

/// What a STAMP test asks of its source.
#[derive(Debug, Clone, PartialEq)]
pub struct StampJob {
    /// The destination's reflector: `host:port`, `[v6]:port`.
    pub reflector: String,
    /// One report window.
    pub window: Duration,
    pub rate_pps: f64,
    pub size: Option<u16>,
    pub dscp: Option<u8>,
    /// Where the probes leave from (a mesh host's `source`, `source_dev`).
    pub source: Option<linerate_model::Source>,
}

/// How long a source waits for the last answers after a window.
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

impl StampJob {
    /// The probes' size, octets: as asked, else the smallest with the Direct Measurement
    /// TLV (and Class of Service with a DSCP).
    pub fn probe_size(&self) -> usize {
        match self.size {
            Some(size) => usize::from(size),
            None => {
                let request = self.request();
                let mut tlvs = Vec::new();
                request.encode(0, &[0; 4], None, &mut tlvs);
                Mode::Open.base_len() + tlvs.len()
            }
        }
    }

    fn request(&self) -> tlv::Request {
        tlv::Request {
            padding: 0,
            class_of_service: self.dscp,
            direct_measurement: true,
            hmac: false,
        }
    }
}

/// Why a STAMP request cannot be taken: out of this server's bounds.
pub(crate) fn check(
    job: &StampJob,
    max_duration_s: f64,
    max_rate_bps: Option<u64>,
) -> Result<(), String> {
    let window = job.window.as_secs_f64();
    if !(1.0..=max_duration_s).contains(&window) {
        return Err(format!(
            "a STAMP window of {window:.0} s is outside this server's 1 to {max_duration_s:.0} s (--max-duration)"
        ));
    }
    let bps = job.rate_pps * job.probe_size() as f64 * 8.0;
    if let Some(most) = max_rate_bps {
        if bps > most as f64 {
            return Err(format!(
                "STAMP probes at {:.0}/s of {} octets are {:.0} bit/s, over this server's --max-rate of {most}",
                job.rate_pps,
                job.probe_size(),
                bps
            ));
        }
    }
    if let Some(size) = job.size {
        let bare = StampJob {
            size: None,
            ..job.clone()
        }
        .probe_size();
        let padding = usize::from(size).saturating_sub(bare);
        if usize::from(size) < bare || (padding > 0 && padding < tlv::HEADER) {
            return Err(format!(
                "a probe of {size} octets cannot carry its TLVs (at least {bare}, or {} and up)",
                bare + tlv::HEADER
            ));
        }
    }
    Ok(())
}

/// Why the source's part failed, and whether the reflector is to blame.
pub(crate) use super::rpm_job::SourceError;

/// The source's part: a session on the process's prober (one thread for every window
/// this agent probes), its report (or why not) sent once.
pub(crate) fn start_source(
    job: StampJob,
    requester: IpAddr,
    keyed: bool,
    cancel: Arc<AtomicBool>,
) -> Result<Receiver<linerate_stamp::prober::SessionResult>, SourceError> {
    let blame = |reason: String| SourceError {
        reason,
        unreachable: Some(job.reflector.clone()),
    };
    let addr =
        super::resolve(&job.reflector).map_err(|e| blame(format!("{}: {e}", job.reflector)))?;
    super::group::may_dial(addr, requester, keyed).map_err(|reason| SourceError {
        reason,
        unreachable: None,
    })?;
    let mut request = job.request();
    let bare = StampJob {
        size: None,
        ..job.clone()
    }
    .probe_size();
    if let Some(size) = job.size {
        request.padding = usize::from(size).saturating_sub(bare);
    }
    let options = Options {
        rate_pps: job.rate_pps,
        duration: Some(job.window),
        extensions: request,
        dscp: job.dscp,
        source: job.source.clone(),
        timeout: ANSWER_WAIT,
        report_every: Duration::ZERO,
        ..Options::to(job.reflector.clone(), addr)
    };
    let outcome = linerate_stamp::prober::shared()
        .and_then(|prober| prober.probe(options, cancel))
        .map_err(|e| SourceError {
            reason: format!("cannot start STAMP: {e}"),
            unreachable: None,
        })?;
    Ok(outcome)
}

/// A window's outcome as the agent reports it: no answer at all is the reflector's
/// failure, blamed on it (`reflector` as the request named it).
pub(crate) fn outcome(
    result: Option<std::io::Result<StampReport>>,
    reflector: &str,
) -> Result<StampReport, SourceError> {
    match result {
        Some(Ok(report))
            if report.sent > 0 && report.answered == 0 && report.interrupted_after_s.is_none() =>
        {
            Err(SourceError {
                reason: format!(
                    "no STAMP answer from {} ({} probes): no reflector there, or a firewall",
                    report.address, report.sent
                ),
                unreachable: Some(reflector.to_string()),
            })
        }
        Some(Ok(report)) => Ok(report),
        Some(Err(e)) => Err(SourceError {
            reason: format!("STAMP to {reflector}: {e}"),
            unreachable: None,
        }),
        None => Err(SourceError {
            reason: "the STAMP prober stopped".into(),
            unreachable: None,
        }),
    }
}

/// An agent's report, checked against what was asked: no more probes than the window
/// allows at its rate (with a second's slack), no more answers than probes; its text made
/// printable and bounded.
pub(crate) fn within_bounds(
    mut report: StampReport,
    job: &StampJob,
) -> Result<StampReport, String> {
    let most = (job.rate_pps * (job.window.as_secs_f64() + 1.0)).ceil() as u64 + 1;
    if report.sent > most || report.answered > report.sent || report.intervals.len() > 1_000 {
        return Err(format!(
            "a STAMP report out of bounds: {} probes sent, {} answered, {} intervals (at most {most} probes)",
            report.sent,
            report.answered,
            report.intervals.len()
        ));
    }
    // Its words reach rows, logs and terminals: cut and escaped as every peer's text is,
    // a few warnings at most.
    let printable = |text: &mut String| *text = linerate_proto::text::printable(text);
    for text in [
        &mut report.test,
        &mut report.target,
        &mut report.address,
        &mut report.mode,
        &mut report.loss.basis,
    ] {
        printable(text);
    }
    report.warnings.truncate(8);
    report.warnings.iter_mut().for_each(printable);
    for way in [&mut report.forward, &mut report.reverse] {
        if let Some(why) = way.withheld.as_mut() {
            printable(why);
        }
    }
    report.unrecognized_tlvs.truncate(256);
    Ok(report)
}

/// A STAMP window as a request carries it, each value bounded where it is decoded.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    reflector: PeerText,
    window_s: Seconds,
    rate: ProbeRate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size: Option<ProbeSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dscp: Option<Dscp>,
}

impl Spec {
    fn read(spec: &serde_json::Value) -> Result<Spec, String> {
        Spec::deserialize(spec).map_err(|e| format!("a STAMP request that does not read: {e}"))
    }

    fn job(self, source: Option<linerate_model::Source>) -> StampJob {
        StampJob {
            reflector: self.reflector.into_string(),
            window: self.window_s.duration(),
            rate_pps: self.rate.get(),
            size: self.size.map(u16::from),
            dscp: self.dscp.map(u8::from),
            source,
        }
    }
}

/// How often the agent of a STAMP window says it is alive: a pair's windows follow one
/// another all the time, and the controller counts an agent lost after three unheard.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// STAMP as a kind of source job: a window of probes to the destination's reflector.
pub static KIND: super::source_job::SourceKind = super::source_job::SourceKind {
    name: "stamp",
    what: "STAMP test",
    read: |asked| {
        let job = Spec::read(&asked.spec)?.job(asked.source);
        let heartbeat = linerate_proto::agent::stamp_heartbeat(asked.heartbeat_s);
        Ok(Box::new(StampSource { job, heartbeat }))
    },
    heartbeat: Some(HEARTBEAT),
    // The window, the wait for the last answers, set-up; past it the run is abandoned.
    limit: |spec| Ok(Spec::read(spec)?.window_s.duration() + ANSWER_WAIT + Duration::from_secs(30)),
    answer: |spec, report, target| {
        let job = Spec::read(spec)?.job(None);
        let report = StampReport::deserialize(report)
            .map_err(|e| format!("a STAMP report that does not read: {e}"))?;
        let mut report = within_bounds(report, &job)?;
        report.target = target.to_string();
        Ok(Document::Stamp(Box::new(report)))
    },
    gather: None,
};

/// The request a mesh's STAMP window sends (`JobPlan::Source`'s spec), for the tests.
#[cfg(test)]
pub(crate) fn spec_of(job: &StampJob) -> serde_json::Value {
    serde_json::json!({
        "reflector": job.reflector,
        "window_s": job.window.as_secs_f64(),
        "rate": job.rate_pps,
        "size": job.size,
        "dscp": job.dscp,
    })
}

/// A STAMP window as a controller asked for it, with how often its agent says it is
/// alive while it runs.
pub(crate) struct StampSource {
    pub job: StampJob,
    pub heartbeat: Duration,
}

impl super::source_job::SourceJob for StampSource {
    fn what(&self) -> &'static str {
        "STAMP test"
    }

    fn check(&self, bounds: &super::source_job::Bounds) -> Result<(), String> {
        check(&self.job, bounds.max_duration_s, bounds.max_rate_bps)?;
        super::source_job::check_source(self.job.source.as_ref())
    }

    fn start(
        self: Box<Self>,
        requester: IpAddr,
        key: Option<linerate_proto::auth::Key>,
        stop: Arc<AtomicBool>,
    ) -> Result<Box<dyn super::source_job::SourceRun>, SourceError> {
        let reflector = self.job.reflector.clone();
        let due = std::time::Instant::now() + self.job.window + ANSWER_WAIT;
        let outcome = start_source(self.job, requester, key.is_some(), stop)?;
        Ok(Box::new(StampRun {
            outcome,
            reflector,
            due,
            heartbeat: self.heartbeat,
        }))
    }
}

/// A window on the process's prober: its outcome arrives once, when it is due.
struct StampRun {
    outcome: Receiver<linerate_stamp::prober::SessionResult>,
    /// As the request named it, for the blame.
    reflector: String,
    due: std::time::Instant,
    heartbeat: Duration,
}

impl super::source_job::SourceRun for StampRun {
    fn poll(&mut self) -> Option<Result<AgentReply, SourceError>> {
        let result = match self.outcome.try_recv() {
            Ok(result) => Some(result),
            Err(TryRecvError::Empty) => return None,
            Err(TryRecvError::Disconnected) => None,
        };
        Some(outcome(result, &self.reflector).and_then(|report| {
            let report = serde_json::to_value(report).map_err(|e| SourceError {
                reason: format!("cannot encode the STAMP report: {e}"),
                unreachable: None,
            })?;
            Ok(AgentReply::SourceResult { report })
        }))
    }

    fn due(&self) -> Option<std::time::Instant> {
        Some(self.due)
    }

    fn heartbeat(&self) -> Duration {
        self.heartbeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(window_s: f64, rate: f64, size: Option<u16>) -> StampJob {
        StampJob {
            reflector: "10.0.0.2:862".into(),
            window: Duration::from_secs_f64(window_s),
            rate_pps: rate,
            size,
            dscp: None,
            source: None,
        }
    }

    /// An agent's report is held to its window's probes, and its words are escaped and
    /// few before they reach a row, a log or a terminal.
    #[test]
    fn an_agents_report_is_bounded_and_printable() {
        let settings = linerate_stamp::tally::Settings {
            target: "r\u{1b}[2J".into(),
            address: "10.0.0.2:862".into(),
            mode: Mode::Open,
            protocol: Default::default(),
            rate_pps: 10.0,
            size: 60,
            dscp: None,
            ssid: 1,
            same_clock: false,
            sender_clock: None,
            started_at: 0.0,
            call: None,
        };
        let mut report = linerate_stamp::tally::Tally::new(settings, 0).finish(1, false);
        report.warnings = vec!["line\nforged".into(); 100];
        let checked = within_bounds(report.clone(), &job(60.0, 10.0, None)).unwrap();
        assert_eq!(checked.warnings.len(), 8);
        assert!(
            !checked.warnings[0].contains('\n'),
            "{:?}",
            checked.warnings[0]
        );
        assert!(!checked.target.contains('\u{1b}'), "{:?}", checked.target);
        report.sent = 10_000;
        assert!(within_bounds(report, &job(60.0, 10.0, None)).is_err());
    }

    /// A STAMP job's request reads back into the job it was made from; values out of
    /// their bounds are refused where they are read, before anything runs.
    #[test]
    fn a_stamp_spec_reads_back_and_is_bounded_where_it_is_read() {
        let asked = job(60.0, 50.0, Some(1400));
        let spec = spec_of(&asked);
        assert_eq!(Spec::read(&spec).unwrap().job(None), asked);
        let limit = (KIND.limit)(&spec).unwrap();
        assert_eq!(
            limit,
            Duration::from_secs(60) + ANSWER_WAIT + Duration::from_secs(30)
        );
        for (key, value) in [
            ("rate", serde_json::json!(0)),
            ("rate", serde_json::json!(1e9)),
            ("size", serde_json::json!(20)),
            ("dscp", serde_json::json!(64)),
            ("window_s", serde_json::json!(-1)),
            ("reflector", serde_json::json!(7)),
        ] {
            let mut bad = spec.clone();
            bad[key] = value;
            let read = (KIND.read)(super::super::source_job::Asked {
                spec: bad,
                heartbeat_s: None,
                source: None,
            });
            assert!(read.is_err(), "{key} out of bounds was read");
        }
    }

    /// The window must fit --max-duration, the probes --max-rate, and a size its TLVs.
    #[test]
    fn a_stamp_request_is_held_to_the_servers_bounds() {
        assert_eq!(check(&job(60.0, 10.0, None), 300.0, None), Ok(()));
        assert!(check(&job(600.0, 10.0, None), 300.0, None)
            .unwrap_err()
            .contains("--max-duration"));
        assert!(
            check(&job(60.0, 10_000.0, Some(9000)), 300.0, Some(100_000_000))
                .unwrap_err()
                .contains("--max-rate")
        );
        assert!(check(&job(60.0, 10.0, Some(50)), 300.0, None).is_err());
        assert_eq!(check(&job(60.0, 10.0, Some(1400)), 300.0, None), Ok(()));
    }
}
