//! `--load`: bulk TCP flows, client to server, run as a stream test of their own beside a
//! request/response test, so the transactions' latency is measured under load; their
//! goodput joins the transactions' report.

use crate::client::{run_test, ClientError, ClientOptions, TestUpdate};
use linerate_model::{
    Direction, StreamRequest, StreamTransport, TestConfig, TestKind, TestRequest,
};
use linerate_report::{LoadSummary, Report};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Seconds a test beside another (a bulk load, a conference's calls) starts ahead of it
/// (connections open, windows grow) and runs on after it, so that it covers its whole
/// window.
pub const LEAD_S: f64 = 1.0;

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
        rr.load = Some(LoadSummary {
            flows: load.summary.flows,
            receiver_bps: load.summary.receiver_bps,
            sender_bps: load.summary.sender_bps,
            retransmits: load.summary.retransmits,
        });
        report
            .warnings
            .extend(load.warnings.iter().map(|w| format!("load: {w}")));
    }
    Ok(report)
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
        interval_s: 0.0,
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
