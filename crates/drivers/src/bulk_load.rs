//! `--load`: bulk TCP flows, client to server, run as a stream test of their own beside a
//! request/response test, so the transactions' latency is measured under load; their
//! goodput joins the transactions' report.

use crate::client::{run_test, ClientError, ClientOptions, TestUpdate};
use linerate_model::measure::bufferbloat_grade;
use linerate_model::{
    Direction, StreamRequest, StreamTransport, TestConfig, TestKind, TestRequest,
};
use linerate_report::{LoadSummary, Report};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub use linerate_model::BESIDE_LEAD_S as LEAD_S;

/// Runs the transactions of `options` with their load beside them (when `rr.load` asks
/// for any): the load's figures go into the report's `rr.load`, its warnings beside the
/// report's own.
pub fn run_with_load(
    target: Option<SocketAddr>,
    options: &ClientOptions,
    cancel: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<Report, ClientError> {
    let config = &options.config;
    let flows = config.rr.as_ref().map_or(0, |r| r.load);
    let idle_p50_us = match flows {
        0 => None,
        _ => idle_round_trip(target, options, cancel)?,
    };
    let bulk = (flows > 0)
        .then(|| start(target, options, flows, cancel))
        .transpose()?;
    let outcome = run_test(target, options, cancel, progress);
    let load_report = match bulk {
        Some(handle) => Some(
            handle
                .join()
                .map_err(|_| ClientError::Load(Box::new(ClientError::Interrupted)))?
                .map_err(|e| ClientError::Load(Box::new(e)))?,
        ),
        None => None,
    };
    let mut report = outcome?;
    if let (Some(load), Some(rr)) = (&load_report, report.summary.rr.as_mut()) {
        let loaded_p50_us = (rr.latency_us.count > 0).then_some(rr.latency_us.p50);
        let added_ms = idle_p50_us
            .zip(loaded_p50_us)
            .map(|(idle, loaded)| (loaded - idle) / 1e3);
        rr.load = Some(LoadSummary {
            flows: load.summary.flows,
            receiver_bps: load.summary.receiver_bps,
            sender_bps: load.summary.sender_bps,
            retransmits: load.summary.retransmits,
            idle_p50_us,
            added_ms,
            grade: added_ms.map(|ms| bufferbloat_grade(ms.max(0.0) / 1e3).to_string()),
        });
        report
            .warnings
            .extend(load.warnings.iter().map(|w| format!("load: {w}")));
        // Each interval's load beside its transactions: the load's window starts with
        // their first interval (its own warm-up is the lead), interval by interval.
        let load_intervals = load.intervals.iter().filter(|i| !i.omitted);
        for (interval, load) in report.intervals.iter_mut().zip(load_intervals) {
            if let Some(rr) = interval.rr.as_mut() {
                rr.load_bps = Some(load.receiver_bps);
            }
        }
    }
    Ok(report)
}

/// Seconds the transactions run alone before their load starts: the idle round trip that
/// what the load adds is reckoned against (`rpm` measures its idle latency first too).
pub const IDLE_S: f64 = 2.0;

/// The transactions' median round trip over [`IDLE_S`] alone, microseconds (`None`
/// where none completed).
fn idle_round_trip(
    target: Option<SocketAddr>,
    options: &ClientOptions,
    cancel: &Arc<AtomicBool>,
) -> Result<Option<f64>, ClientError> {
    let mut idle = options.clone();
    idle.config.time_s = IDLE_S;
    idle.config.omit_s = 0.0;
    idle.config.interval_s = 0.0;
    if let Some(rr) = idle.config.rr.as_mut() {
        rr.load = 0;
    }
    let report = run_test(target, &idle, cancel, &mut |_| {})?;
    Ok(report
        .summary
        .rr
        .filter(|rr| rr.latency_us.count > 0)
        .map(|rr| rr.latency_us.p50))
}

/// The load's own stream test: it starts before the transactions (its warm-up) and ends
/// after them.
fn load_config(rr_config: &TestConfig, flows: u32) -> Result<TestConfig, ClientError> {
    let request = TestRequest {
        tls: None,
        target: Some(rr_config.target.clone()),
        port: rr_config.port,
        parallel: flows,
        threads: None,
        time_s: rr_config.omit_s + rr_config.time_s + 2.0 * LEAD_S,
        omit_s: LEAD_S,
        // Its intervals beside the transactions' (each one's load, drawn with them).
        interval_s: rr_config.interval_s,
        window: rr_config.window,
        congestion: rr_config.congestion.clone(),
        per_flow: false,
        connect_timeout_s: rr_config.connect_timeout_s,
        // The load beside a test: the test itself observes the host.
        observe: false,
        // From where the test leaves.
        source: rr_config.source.clone(),
        // Unmarked: the load is the bulk traffic the marked transactions compete with
        // (an EF probe beside best-effort load is what a class is tested with).
        marks: None,
        kind: TestKind::Stream(StreamRequest {
            direction: Direction::Forward,
            rate_bps: None,
            transport: StreamTransport::Tcp {
                length: None,
                mss: None,
                nodelay: false,
            },
        }),
    };
    TestConfig::resolve(&request, &linerate_engine::sys::environment(None))
        .map_err(ClientError::Config)
}

/// Starts `flows` bulk flows on a thread of their own; returns once they run.
fn start(
    target: Option<SocketAddr>,
    options: &ClientOptions,
    flows: u32,
    cancel: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<Report, ClientError>>, ClientError> {
    let mut load_options = options.clone();
    load_options.config = load_config(&options.config, flows)?;
    start_beside(target, load_options, cancel).map_err(|e| match e {
        ClientError::Load(_) => e,
        other => ClientError::Load(Box::new(other)),
    })
}

/// A test beside another: started on a thread of its own, returned once it runs and has
/// had [`LEAD_S`] to settle. Its configuration should run [`LEAD_S`] longer at each end
/// than the test it is beside, omitting the first. Its error, where it ended before it
/// started, is its own.
pub fn start_beside(
    target: Option<SocketAddr>,
    load_options: ClientOptions,
    cancel: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<Report, ClientError>>, ClientError> {
    let (started, running) = std::sync::mpsc::channel();
    let cancel = cancel.clone();
    let handle = std::thread::Builder::new()
        .name("linerate-beside".into())
        .spawn(move || {
            let mut progress = |event: TestUpdate| {
                if matches!(event, TestUpdate::Started) {
                    let _ = started.send(());
                }
            };
            run_test(target, &load_options, &cancel, &mut progress)
        })
        .map_err(|source| ClientError::Io {
            context: "starting the test beside",
            source,
        })?;
    if running.recv().is_err() {
        // The test ended before it started: its error says why.
        return Err(match handle.join() {
            Ok(Err(error)) => error,
            _ => ClientError::Interrupted,
        });
    }
    std::thread::sleep(Duration::from_secs_f64(LEAD_S));
    Ok(handle)
}

/// The test to run beside `request`: `beside` stretched [`LEAD_S`] at each end, its first
/// omitted, so that its window covers the test's; no intervals of its own.
pub fn beside_request(request: &TestRequest, beside: &TestRequest) -> TestRequest {
    TestRequest {
        time_s: request.omit_s + request.time_s + LEAD_S,
        omit_s: LEAD_S,
        interval_s: 0.0,
        ..beside.clone()
    }
}

/// Runs the test of `options` with the test of `beside` (made by [`beside_request`])
/// beside it, as an application of two shapes at once runs (a conference's calls beside
/// its video): the beside test's call scores join the report's summary and its warnings
/// the report's. Where the beside test failed, the report keeps its own figures and says
/// why, and the reason comes back with it.
pub fn run_beside(
    target: Option<SocketAddr>,
    options: &ClientOptions,
    beside: ClientOptions,
    cancel: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(TestUpdate),
) -> Result<(Report, Option<String>), ClientError> {
    let what = match beside.config.call {
        Some(_) => "the calls beside",
        None => "the test beside",
    };
    let handle = start_beside(target, beside, cancel).map_err(|e| ClientError::Beside {
        what,
        error: Box::new(e),
    })?;
    let outcome = run_test(target, options, cancel, progress);
    let beside = handle.join().map_err(|_| ClientError::Interrupted)?;
    let mut report = outcome?;
    let failed = match beside {
        Ok(beside) => {
            if report.summary.call.is_none() {
                report.summary.call = beside.summary.call;
            }
            report
                .warnings
                .extend(beside.warnings.iter().map(|w| format!("{what}: {w}")));
            None
        }
        Err(e) => {
            let why = format!("{what} failed: {e}");
            report.warnings.push(why.clone());
            Some(why)
        }
    };
    Ok((report, failed))
}
