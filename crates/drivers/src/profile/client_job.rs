//! A linerate client test from an agent: the controller asks the source's agent to run,
//! against the destination's linerate server, the client test a mesh kind asks (a call,
//! as `linerate app --pattern voip` makes one), and the agent runs it on a thread of its
//! own and answers with its report, which the controller holds to what was asked.
//!
//! A mesh kind whose jobs are a client test plans a `source` job of kind "client" and
//! adds its test here: a variant of [`ClientTest`] (its options, bounded as they are
//! read), the request it is, the most it sends and what its report must hold.
//!
//! Nobody is tested on a name alone: with a key the destination is any linerate server
//! that proves it (the test's handshake requires the proof of the server as of the
//! client); without one, only the requester's own address, as a profile's peers.

use super::rpm_job::SourceError;
use super::source_job::{Asked, Bounds, SourceJob, SourceKind, SourceRun};
use linerate_model::app::{AppOptions, Plan, PlannedTest};
use linerate_model::call::{CallSettings, Codec};
use linerate_model::marks::Marks;
use linerate_model::video::VideoSettings;
use linerate_model::{
    CallStream, Direction, StreamRequest, StreamTransport, TestKind, TestRequest,
};
use linerate_proto::agent::Seconds;
use linerate_proto::auth::Key;
use linerate_proto::text::PeerText;
use linerate_report::document::Document;
use linerate_report::Report;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// A client test as a request carries it, each value bounded where it is decoded.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    /// The destination's server: `host:port`, as the mesh file names its agent.
    server: PeerText,
    seconds: Seconds,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    marks: Option<Marks>,
    #[serde(flatten)]
    test: ClientTest,
}

/// The client tests a mesh kind may ask of an agent, by `test`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "snake_case")]
enum ClientTest {
    /// A call both ways, scored each way by the E-model (a mesh's `run = "voip"`): its
    /// buffer fixed at `jitter_buffer_ms`, or adaptive up to it.
    Call {
        codec: Codec,
        jitter_buffer_ms: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        adaptive: bool,
    },
    /// Bulk data over QUIC, `parallel` streams on one connection, unpaced (a mesh's
    /// `run = "quic"`).
    Quic { parallel: u32 },
    /// Video frames to the destination, as `stream -u --isochronous` sends them (a mesh's
    /// `run = "video"`).
    Video { frames: VideoSettings },
    /// An application pattern (`linerate app --pattern NAME`, `linerate_model::app`) with
    /// the options it reads, checked by the pattern (a mesh's `run = "game"`,
    /// `run = "conference"`): its test, and the test beside it where it has one.
    App {
        pattern: PeerText,
        /// Boxed: every option a pattern may read is the largest of the tests.
        #[serde(default)]
        options: Box<AppOptions>,
        /// The pattern's plan of `options`, as [`ClientTest::checked`] made it where the
        /// request was read: never on the wire.
        #[serde(skip)]
        plan: Option<Box<Plan>>,
    },
}

/// A call's settings as a request names them.
fn call_settings(codec: Codec, jitter_buffer_ms: u32, adaptive: bool) -> CallSettings {
    CallSettings {
        codec,
        jitter_buffer_ms,
        adaptive,
    }
}

/// The most streams a QUIC test asks (the mesh file's bound).
const MAX_QUIC_STREAMS: u32 = 64;

/// The most a receiver can count, bits a second: above any link a host has today, so
/// that a report claiming more is a lie, not a fast path.
const MOST_BPS: f64 = 1.6e12;

impl ClientTest {
    /// What logs and refusals call it.
    fn what(&self) -> &'static str {
        match self {
            ClientTest::Call { .. } => "call",
            ClientTest::Quic { .. } => "QUIC stream",
            ClientTest::Video { .. } => "video",
            ClientTest::App { pattern, .. } => {
                linerate_model::app::find(pattern.as_str()).map_or("application", |p| p.name)
            }
        }
    }

    /// An application's plan, as [`ClientTest::checked`] made it; `None` for the other
    /// tests.
    fn plan(&self) -> Option<&Plan> {
        match self {
            ClientTest::App { plan, .. } => plan.as_deref(),
            _ => None,
        }
    }

    /// An application's plan, which [`ClientTest::checked`] made where it was read.
    fn app_plan(&self) -> &Plan {
        self.plan()
            .expect("an application's plan made where it was read")
    }

    /// Itself with its values within their bounds (an application's plan made), or why
    /// not.
    fn checked(mut self) -> Result<ClientTest, String> {
        if let ClientTest::App {
            pattern,
            options,
            plan,
        } = &mut self
        {
            *plan = Some(Box::new(
                linerate_model::app::find(pattern.as_str())?.plan(options)?,
            ));
            return Ok(self);
        }
        self.check()?;
        Ok(self)
    }

    /// The values of a test other than an application within their bounds, or why not.
    fn check(&self) -> Result<(), String> {
        match self {
            ClientTest::Call {
                codec,
                jitter_buffer_ms,
                adaptive,
            } => CallSettings::checked(
                *codec,
                call_settings(*codec, *jitter_buffer_ms, *adaptive).buffer(),
            )
            .map(|_| ()),
            ClientTest::Quic { parallel } => match (1..=MAX_QUIC_STREAMS).contains(parallel) {
                true => Ok(()),
                false => Err(format!(
                    "a QUIC test of {parallel} streams (1 to {MAX_QUIC_STREAMS})"
                )),
            },
            ClientTest::Video { frames } => frames.checked().map(|_| ()),
            ClientTest::App { .. } => Ok(()),
        }
    }

    /// The test it is, as the command line asks it.
    fn kind(&self) -> TestKind {
        match self {
            ClientTest::Call {
                codec,
                jitter_buffer_ms,
                adaptive,
            } => TestKind::Stream(StreamRequest {
                direction: Direction::Bidir,
                rate_bps: None,
                transport: StreamTransport::Call(CallStream::of(call_settings(
                    *codec,
                    *jitter_buffer_ms,
                    *adaptive,
                ))),
            }),
            ClientTest::Quic { .. } => TestKind::Stream(StreamRequest {
                direction: Direction::Forward,
                rate_bps: Some(0),
                transport: StreamTransport::Quic {
                    length: None,
                    connection_per_flow: false,
                },
            }),
            ClientTest::Video { frames } => TestKind::Stream(StreamRequest {
                direction: Direction::Forward,
                rate_bps: None,
                transport: StreamTransport::Video(linerate_model::VideoStream::of(*frames)),
            }),
            ClientTest::App { .. } => TestKind::Stream(self.app_plan().test.stream.clone()),
        }
    }

    /// The test beside it, as the command line asks it: an application's second shape.
    fn beside(&self) -> Option<PlannedTest> {
        self.plan().and_then(|plan| plan.beside.clone())
    }

    /// How it sets the request's flows and encryption (QUIC's TLS 1.3 inside).
    fn shape(&self, request: &mut TestRequest) {
        if let Some(plan) = self.plan() {
            request.parallel = plan.test.flows;
        }
        if let ClientTest::Quic { parallel } = self {
            request.parallel = *parallel;
            request.tls = Some(linerate_model::TlsSettings {
                cipher: linerate_model::DEFAULT_CIPHER.into(),
                ktls: false,
            });
        }
    }

    /// The most it sends each way, bits a second: held to the agent's `--max-rate`.
    fn most_bps(&self) -> u64 {
        match self {
            ClientTest::Call {
                codec,
                jitter_buffer_ms,
                adaptive,
            } => {
                let settings = call_settings(*codec, *jitter_buffer_ms, *adaptive);
                settings.pps() * codec.datagram_bytes() * 8
            }
            // Unpaced: as much as the path takes.
            ClientTest::Quic { .. } => u64::MAX,
            // Its mean load, as a server's rate limit weighs it.
            ClientTest::Video { frames } => frames.mean_bps,
            // Its tests' loads together, the larger way of each, times its flows.
            ClientTest::App { .. } => self
                .app_plan()
                .tests()
                .map(|t| u64::from(t.flows).saturating_mul(stream_most_bps(&t.stream)))
                .fold(0, u64::saturating_add),
        }
    }

    /// Whether `report` is what a run of this test for `seconds` can be: for a call, its
    /// codec, its two ways, no more datagrams each way than it sends (twice over, for a
    /// clock that ran fast), no more late than received.
    fn holds(&self, report: &Report, seconds: f64) -> Result<(), String> {
        match self {
            ClientTest::Call {
                codec,
                jitter_buffer_ms,
                adaptive,
            } => {
                let settings = call_settings(*codec, *jitter_buffer_ms, *adaptive);
                call_holds(report, &settings, 1, seconds)
            }
            ClientTest::Quic { parallel } => {
                let summary = &report.summary;
                let out_of_bounds = report.config.workload
                    != linerate_report::model::Workload::Stream
                    || summary.call.is_some()
                    || summary.flows > *parallel
                    || report.flows.len() > *parallel as usize
                    || !(0.0..=MOST_BPS).contains(&summary.receiver_bps)
                    || summary.receiver_bytes as f64 > MOST_BPS / 8.0 * (seconds + 1.0)
                    || !(0.0..=seconds * 2.0 + 1.0).contains(&summary.duration_s);
                match out_of_bounds {
                    true => Err(format!(
                        "a QUIC stream report out of bounds: {} flows, {:.0} bit/s over {:.1} s (asked {parallel} streams for {seconds} s)",
                        summary.flows, summary.receiver_bps, summary.duration_s
                    )),
                    false => Ok(()),
                }
            }
            ClientTest::Video { frames } => {
                let stream = linerate_model::VideoStream::of(*frames);
                video_holds(report, &stream, 1, seconds)?;
                match report.summary.video.as_ref().map(|v| v.settings) {
                    Some(asked) if asked == *frames => Ok(()),
                    _ => Err(format!(
                        "a video report of other frames than the {} asked",
                        frames.spec()
                    )),
                }
            }
            // Each of its tests' figures within what that test sends over its flows (a
            // test beside runs a lead longer at each end).
            ClientTest::App { .. } => {
                let plan = self.app_plan();
                if report.flows.len() > 2 * plan.test.flows as usize {
                    return Err(format!(
                        "a {} report of {} flows (asked {} each way)",
                        self.what(),
                        report.flows.len(),
                        plan.test.flows
                    ));
                }
                let lead = 2.0 * crate::bulk_load::LEAD_S;
                for test in plan.tests() {
                    match &test.stream.transport {
                        StreamTransport::Call(call) => {
                            call_holds(report, &call.settings, test.flows, seconds + lead)?
                        }
                        StreamTransport::Video(video) => {
                            video_holds(report, video, test.flows, seconds)?
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
        }
    }
}

/// The most a stream of an application sends one way, bits a second: a video's larger
/// way's mean load, a call's codec rate.
fn stream_most_bps(stream: &StreamRequest) -> u64 {
    match &stream.transport {
        StreamTransport::Video(video) => video
            .settings
            .mean_bps
            .max(video.back.map_or(0, |b| b.mean_bps)),
        StreamTransport::Call(call) => {
            call.settings.pps() * call.settings.codec.datagram_bytes() * 8
        }
        _ => u64::MAX,
    }
}

/// Whether a report's call is what a call of `settings` over `flows` flows each way for
/// `seconds` can be: its codec, its two ways, no more datagrams each way than it sends
/// (twice over, for a clock that ran fast), no more late than received, its flows.
fn call_holds(
    report: &Report,
    settings: &CallSettings,
    flows: u32,
    seconds: f64,
) -> Result<(), String> {
    let Some(call) = report.summary.call.as_ref() else {
        return Err("a call report without the call's scores".into());
    };
    let most = 2 * (seconds.ceil() as u64 + 1) * settings.pps() * u64::from(flows);
    let out_of_bounds = call.codec != settings.codec
        || call.ways.len() != 2
        || call
            .ways
            .iter()
            .any(|w| w.received.saturating_add(w.lost) > most || w.late > w.received)
        || report.flows.len() > 2 * flows as usize;
    match out_of_bounds {
        true => Err(format!(
            "a call report out of bounds: {} ways, {} flows (asked a {} call of {seconds} s)",
            call.ways.len(),
            report.flows.len(),
            settings.codec.name(),
        )),
        false => Ok(()),
    }
}

/// Whether a report's video is what `stream` over `flows` flows each way for `seconds`
/// can send: a way each direction it goes at most, no more frames each way than twice
/// its time holds (for a clock that ran fast), no more late than whole, its flows.
fn video_holds(
    report: &Report,
    stream: &linerate_model::VideoStream,
    flows: u32,
    seconds: f64,
) -> Result<(), String> {
    let Some(video) = report.summary.video.as_ref() else {
        return Err("a video report without its frames".into());
    };
    let ways = 1 + usize::from(stream.back.is_some());
    let fps = stream.settings.fps.max(stream.back.map_or(0.0, |b| b.fps));
    let most = (2.0 * fps * (seconds + 1.0)).ceil() as u64 * u64::from(flows);
    let out_of_bounds = video.ways.len() > ways
        || video.ways.iter().any(|w| {
            let c = &w.counts;
            c.sent > most
                || c.whole.saturating_add(c.partial) > most
                || c.late > c.whole
                || c.latency_us.count > c.whole
        })
        || report.flows.len() > ways * flows as usize;
    match out_of_bounds {
        true => Err(format!(
            "a video report out of bounds: {} ways, {} flows (asked {} for {seconds} s)",
            video.ways.len(),
            report.flows.len(),
            stream.settings.spec()
        )),
        false => Ok(()),
    }
}

impl Spec {
    fn read(spec: &serde_json::Value) -> Result<Spec, String> {
        let spec = Spec::deserialize(spec)
            .map_err(|e| format!("a client test request that does not read: {e}"))?;
        Ok(Spec {
            test: spec.test.checked()?,
            ..spec
        })
    }

    /// The request this test is, as the command line asks it.
    fn request(&self, source: Option<linerate_model::Source>) -> TestRequest {
        let mut request = TestRequest::new(self.test.kind());
        self.test.shape(&mut request);
        // The host as a name (QUIC's and TLS's server name), its port apart.
        let server = self.server.as_str();
        match server.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
            // A bare IPv6 address has colons of its own: only a bracketed one has a port.
            Some((host, Ok(port)))
                if !host.is_empty() && (!host.contains(':') || host.starts_with('[')) =>
            {
                request.target = Some(host.trim_matches(['[', ']']).to_string());
                request.port = port;
            }
            _ => request.target = Some(server.to_string()),
        }
        request.time_s = self.seconds.get();
        // One report for the window: a mesh row needs no intervals.
        request.interval_s = 0.0;
        request.observe = false;
        request.source = source;
        request.marks = self.marks;
        request
    }

    /// The test to run beside it, where it has one (an application's second shape), to
    /// the same server, a lead longer at each end.
    fn beside_request(&self, request: &TestRequest) -> Option<TestRequest> {
        let beside = self.test.beside()?;
        Some(crate::bulk_load::beside_request(
            request,
            &TestRequest {
                parallel: beside.flows,
                ..TestRequest {
                    kind: TestKind::Stream(beside.stream),
                    ..request.clone()
                }
            },
        ))
    }
}

/// A client test asked of this agent, before it runs.
struct ClientJob {
    spec: Spec,
    source: Option<linerate_model::Source>,
}

/// A client test as a kind of source job.
pub static KIND: SourceKind = SourceKind {
    name: "client",
    what: "client test",
    read: |asked: Asked| {
        Ok(Box::new(ClientJob {
            spec: Spec::read(&asked.spec)?,
            source: asked.source,
        }))
    },
    heartbeat: None,
    // The test, its drain and the exchange of both sides' results, set-up; past it the
    // run is abandoned.
    limit: |spec| Ok(Spec::read(spec)?.seconds.duration() + Duration::from_secs(30)),
    answer: |spec, report, target| {
        let spec = Spec::read(spec)?;
        let report = Report::deserialize(report)
            .map_err(|e| format!("a {} report that does not read: {e}", spec.test.what()))?;
        let mut report = within_bounds(report, &spec)?;
        report.config.target = target.to_string();
        Ok(Document::Test(Box::new(report)))
    },
    gather: None,
};

/// An agent's report, checked against what was asked: what its test's report can hold,
/// its intervals few; its words made printable and few.
fn within_bounds(mut report: Report, spec: &Spec) -> Result<Report, String> {
    spec.test.holds(&report, spec.seconds.get())?;
    if report.intervals.len() > 1_000 {
        return Err(format!(
            "a {} report of {} intervals",
            spec.test.what(),
            report.intervals.len()
        ));
    }
    // Its words reach rows, logs and terminals: cut and escaped as every peer's text is.
    let printable = |text: &mut String| *text = linerate_proto::text::printable(text);
    printable(&mut report.test);
    report.warnings.truncate(8);
    report.warnings.iter_mut().for_each(printable);
    Ok(report)
}

impl SourceJob for ClientJob {
    fn what(&self) -> &'static str {
        self.spec.test.what()
    }

    fn check(&self, bounds: &Bounds) -> Result<(), String> {
        super::source_job::check_source(self.source.as_ref())?;
        let (what, seconds) = (self.spec.test.what(), self.spec.seconds.get());
        if seconds > bounds.max_duration_s {
            return Err(format!(
                "a {what} of {seconds:.0} s is longer than this server's {:.0} s (--max-duration)",
                bounds.max_duration_s
            ));
        }
        let rate = self.spec.test.most_bps();
        match bounds.max_rate_bps {
            Some(most) if rate == u64::MAX => Err(format!(
                "a {what} is unpaced, and this server sends at most {most} bit/s (--max-rate)"
            )),
            Some(most) if rate > most => Err(format!(
                "a {what} sends {rate} bit/s, above this server's {most} bit/s (--max-rate)"
            )),
            _ => Ok(()),
        }
    }

    fn start(
        self: Box<Self>,
        requester: IpAddr,
        key: Option<Key>,
        stop: Arc<AtomicBool>,
    ) -> Result<Box<dyn SourceRun>, SourceError> {
        let server = self.spec.server.as_str().to_string();
        let what = self.spec.test.what();
        let failed = |reason: String| SourceError {
            reason,
            unreachable: None,
        };
        let addr = super::resolve(&server).map_err(|e| SourceError {
            reason: format!("{server}: {e}"),
            unreachable: Some(server.clone()),
        })?;
        super::group::may_dial(addr, requester, key.is_some()).map_err(failed)?;
        let request = self.spec.request(self.source);
        let environment = linerate_engine::sys::environment(None);
        let options_of = |request: &TestRequest| {
            let config =
                linerate_model::TestConfig::resolve(request, &environment).map_err(failed)?;
            let mut options = crate::client::ClientOptions::new(config);
            options.key = key.clone();
            Ok::<_, SourceError>(options)
        };
        let options = options_of(&request)?;
        let beside = match self.spec.beside_request(&request) {
            Some(beside) => Some(options_of(&beside)?),
            None => None,
        };
        let (tell, outcome) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("agent-{what}"))
            .spawn(move || {
                let failed = |e: String| SourceError {
                    reason: format!("{what} to {server}: {e}"),
                    unreachable: None,
                };
                let result = match beside {
                    None => crate::client::run(addr, &options, &stop, &mut |_| {})
                        .map_err(|e| failed(e.to_string())),
                    // Both shapes or none: a row headed by one of them fails without it.
                    Some(beside) => crate::bulk_load::run_beside(
                        Some(addr),
                        &options,
                        beside,
                        &stop,
                        &mut |_| {},
                    )
                    .map_err(|e| failed(e.to_string()))
                    .and_then(|(report, beside_failed)| match beside_failed {
                        Some(why) => Err(failed(why)),
                        None => Ok(report),
                    }),
                };
                let _ = tell.send(result);
            })
            .map_err(|e| failed(format!("cannot start a {what}: {e}")))?;
        Ok(Box::new(super::source_job::ThreadRun { what, outcome }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `request` over loopback against the in-process server, drained briefly.
    fn run_over_loopback(request: &TestRequest) -> Report {
        let environment = linerate_engine::sys::environment(None);
        let config = linerate_model::TestConfig::resolve(request, &environment)
            .unwrap_or_else(|e| panic!("{e}: {request:?}"));
        let mut options = crate::client::ClientOptions::new(config);
        options.drain = Duration::from_millis(300);
        crate::client::run_local(&options, &AtomicBool::new(false), &mut |_| {})
            .unwrap_or_else(|e| panic!("a run over loopback: {e}"))
    }

    /// A call's request is bounded where it is read: its length (a time limit), its
    /// jitter buffer (at most a second), its codec by name.
    #[test]
    fn a_call_spec_is_bounded_where_it_is_read() {
        let asked = |seconds: f64, codec: &str, buffer: u32| {
            Spec::read(&serde_json::json!({
                "server": "192.0.2.1:5201", "seconds": seconds, "test": "call",
                "codec": codec, "jitter_buffer_ms": buffer,
            }))
        };
        assert!(asked(0.0, "g711", 60).is_err());
        assert!(asked(-1.0, "g711", 60).is_err());
        assert!(asked(1e9, "g711", 60).is_err());
        assert!(asked(10.0, "opus-ish", 60).is_err());
        assert!(asked(10.0, "g711", 3_600_000).is_err());
        let spec = asked(10.0, "g729a", 40).unwrap();
        let request = spec.request(None);
        assert_eq!(request.target.as_deref(), Some("192.0.2.1"));
        assert_eq!(request.port, 5201);
        for (server, target) in [("[fd00::1]:5202", "fd00::1"), ("fd00::1", "fd00::1")] {
            let mut v6 = spec.clone();
            v6.server = serde_json::from_value(serde_json::json!(server)).unwrap();
            assert_eq!(v6.request(None).target.as_deref(), Some(target), "{server}");
        }
        assert_eq!(request.time_s, 10.0);
        let TestKind::Stream(stream) = request.kind else {
            panic!("a call is a stream")
        };
        assert_eq!(stream.direction, Direction::Bidir);
        assert_eq!(
            stream.transport,
            StreamTransport::Call(CallStream::of(CallSettings {
                codec: Codec::G729a,
                jitter_buffer_ms: 40,
                adaptive: false,
            }))
        );
    }

    /// A real call's report (1 s over loopback, against the in-process server) is taken;
    /// the same report claiming more datagrams than the call sends, another codec, or no
    /// scores is refused rather than stored.
    #[test]
    fn a_call_report_beyond_what_was_asked_is_refused() {
        let spec = Spec::read(&serde_json::json!({
            "server": "127.0.0.1:5201", "seconds": 1.0, "test": "call", "codec": "g711",
            "jitter_buffer_ms": 60,
        }))
        .unwrap();
        let report = run_over_loopback(&spec.request(None));
        let call = report.summary.call.clone().expect("a call is scored");
        assert_eq!(call.ways.len(), 2);
        assert!(call.ways.iter().all(|w| w.received > 0), "{call:?}");
        assert!(within_bounds(report.clone(), &spec).is_ok());
        let mut inflated = report.clone();
        inflated.summary.call.as_mut().unwrap().ways[1].received = 1_000;
        assert!(within_bounds(inflated, &spec).is_err());
        let mut other_codec = report.clone();
        other_codec.summary.call.as_mut().unwrap().codec = Codec::G729a;
        assert!(within_bounds(other_codec, &spec).is_err());
        let mut unscored = report;
        unscored.summary.call = None;
        assert!(within_bounds(unscored, &spec).is_err());
    }

    /// A QUIC test's request is its streams, unpaced, encrypted; a real run's report (1 s
    /// over loopback against the in-process server) is taken, and the same report with
    /// more streams than asked or a rate no host reaches is refused.
    #[test]
    fn a_quic_tests_report_is_held_to_its_streams() {
        let asked = |parallel: u32| {
            Spec::read(&serde_json::json!({
                "server": "127.0.0.1:5201", "seconds": 1.0, "test": "quic",
                "parallel": parallel,
            }))
        };
        assert!(asked(0).is_err());
        assert!(asked(65).is_err());
        let spec = asked(2).unwrap();
        let request = spec.request(None);
        assert_eq!(request.parallel, 2);
        assert!(request.tls.is_some(), "QUIC is TLS 1.3 inside");
        let bounds = Bounds {
            max_duration_s: 60.0,
            max_rate_bps: Some(1_000_000_000),
        };
        let job = ClientJob {
            spec: spec.clone(),
            source: None,
        };
        assert!(job.check(&bounds).unwrap_err().contains("unpaced"));
        let report = run_over_loopback(&request);
        assert!(report.summary.receiver_bps > 0.0, "{:?}", report.summary);
        assert!(within_bounds(report.clone(), &spec).is_ok());
        let mut more_streams = report.clone();
        more_streams.summary.flows = 3;
        assert!(within_bounds(more_streams, &spec).is_err());
        let mut too_fast = report;
        too_fast.summary.receiver_bps = 1e13;
        assert!(within_bounds(too_fast, &spec).is_err());
    }

    /// A video test's request is its frames, bounded where they are read; a real run's
    /// report (2 s over loopback against the in-process server) is taken, and the same
    /// report with more frames than the time holds, other frames, or none is refused.
    #[test]
    fn a_video_tests_report_is_held_to_its_frames() {
        let asked = |frames: serde_json::Value| {
            Spec::read(&serde_json::json!({
                "server": "127.0.0.1:5201", "seconds": 2.0, "test": "video", "frames": frames,
            }))
        };
        let frames =
            |fps: f64, mean: u64| serde_json::json!({"fps": fps, "mean_bps": mean, "stdev_bps": 0});
        assert!(asked(frames(5_000.0, 1_000_000)).is_err());
        assert!(asked(frames(30.0, 0)).is_err());
        assert!(
            asked(serde_json::json!("30:4m")).is_err(),
            "settings, not a flag's text"
        );
        let spec = asked(frames(30.0, 4_000_000)).unwrap();
        let bounds = Bounds {
            max_duration_s: 60.0,
            max_rate_bps: Some(1_000_000),
        };
        let job = ClientJob {
            spec: spec.clone(),
            source: None,
        };
        assert!(
            job.check(&bounds).is_err(),
            "4 Mbit/s over a 1 Mbit/s limit"
        );
        let report = run_over_loopback(&spec.request(None));
        let way = &report.summary.video.as_ref().expect("frames counted").ways[0];
        assert!(way.counts.sent >= 50 && way.counts.whole > 0, "{way:?}");
        assert!(within_bounds(report.clone(), &spec).is_ok());
        let mut inflated = report.clone();
        inflated.summary.video.as_mut().unwrap().ways[0]
            .counts
            .whole = 1_000;
        assert!(within_bounds(inflated, &spec).is_err());
        let mut other = report.clone();
        other.summary.video.as_mut().unwrap().settings.fps = 60.0;
        assert!(within_bounds(other, &spec).is_err());
        let mut none = report;
        none.summary.video = None;
        assert!(within_bounds(none, &spec).is_err());
    }

    /// An application's request is its pattern's name and options, checked by the
    /// pattern where read; its report is held to what its tests send (a game's frames
    /// both ways, over loopback here), and its load to the agent's rate limit.
    #[test]
    fn an_applications_report_is_held_to_its_patterns_tests() {
        let asked = |pattern: &str, options: serde_json::Value| {
            Spec::read(&serde_json::json!({
                "server": "127.0.0.1:5201", "seconds": 2.0, "test": "app",
                "pattern": pattern, "options": options,
            }))
        };
        let err = asked("chess", serde_json::json!({})).unwrap_err();
        assert!(err.contains("'chess'"), "{err}");
        let err = asked("conference", serde_json::json!({"participants": 100})).unwrap_err();
        assert!(err.contains("'100'"), "{err}");
        assert!(asked("game", serde_json::json!({"participants": 3})).is_err());
        assert!(asked("game", serde_json::json!({"tempo": 3})).is_err());
        let fast =
            serde_json::json!({"state": {"fps": 5_000.0, "mean_bps": 1_000_000, "stdev_bps": 0}});
        assert!(
            asked("game", fast).is_err(),
            "a state beyond a frame rate's bound"
        );
        // A conference of 5: four flows each way of 5 Mbit/s video and of a G.711 call.
        let conference = asked("conference", serde_json::json!({"participants": 5})).unwrap();
        assert_eq!(conference.test.what(), "conference");
        assert_eq!(conference.test.most_bps(), 4 * 5_000_000 + 4 * 50 * 172 * 8);
        assert_eq!(conference.request(None).parallel, 4);
        let beside = conference
            .beside_request(&conference.request(None))
            .expect("calls beside");
        assert_eq!(
            (beside.parallel, beside.time_s, beside.omit_s),
            (4, 3.0, 1.0)
        );
        let spec = asked("game", serde_json::json!({})).unwrap();
        assert!(spec.beside_request(&spec.request(None)).is_none());
        let bounds = Bounds {
            max_duration_s: 60.0,
            max_rate_bps: Some(500_000),
        };
        let job = ClientJob {
            spec: spec.clone(),
            source: None,
        };
        assert!(
            job.check(&bounds).is_err(),
            "614 kbit/s over a 500 kbit/s limit"
        );
        let report = run_over_loopback(&spec.request(None));
        let ways = &report.summary.video.as_ref().expect("frames counted").ways;
        assert_eq!(ways.len(), 2, "{ways:?}");
        assert!(within_bounds(report.clone(), &spec).is_ok());
        let mut inflated = report.clone();
        inflated.summary.video.as_mut().unwrap().ways[1].counts.sent = 10_000;
        assert!(within_bounds(inflated, &spec).is_err());
        let mut none = report;
        none.summary.video = None;
        assert!(within_bounds(none, &spec).is_err());
    }
}
