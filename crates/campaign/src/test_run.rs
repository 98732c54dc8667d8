//! One test command as the user runs it (`stream`, `rr`, `crr`, `--find-max`): the
//! request resolved here, the baseline when asked, the test repeated as planned, its
//! result shown and kept.

use crate::failure::Failure;
use crate::find_max::{self, FindMaxError};
use crate::sink::{self, Discard, Event, Sink, TextSink};
use crate::storage::Storage;
use crate::test::{self, Family};
use crate::{baseline, cancel, repeat};
use anyhow::{bail, Result};
use linerate_drivers::client::ClientOptions;
use linerate_model::TestRequest;
use linerate_proto::auth::Key;
use linerate_report::document::Document;
use linerate_report::stats::RepeatPlan;
use linerate_report::units::Scale;
use linerate_report::TestConfig;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Who the client is to the server and whom it trusts: the user's key, the CA that
/// vouches for the server (`--ca`), the identity of an in-process server (`--cert`).
#[derive(Debug, Clone, Default)]
pub struct Trust {
    pub key: Option<Key>,
    pub ca: Option<PathBuf>,
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl Trust {
    /// The client's options for `config`.
    pub fn options(&self, config: &TestConfig) -> ClientOptions {
        let mut options = ClientOptions::new(config.clone());
        options.key = self.key.clone();
        options.ca = self.ca.clone();
        options.local_identity = self.identity.clone();
        options
    }
}

/// How one test command reaches its server, shows its result and keeps it.
pub struct Shown<'a> {
    /// The server named; `None` for the in-process one.
    pub host: Option<&'a str>,
    pub port: u16,
    /// The IP version the server is reached over (`-4`, `-6`, `--bind`).
    pub family: Family,
    pub trust: Trust,
    pub plan: Option<RepeatPlan>,
    pub json: bool,
    pub scale: Scale,
    pub per_flow: bool,
    /// Under `--verbose`, what the resolution chose and why, on stderr.
    pub verbose: bool,
    /// `-z`: this side's threads (and the in-process server's) under real-time scheduling.
    pub realtime: bool,
}

/// Real-time scheduling for this process's threads from here on, where `asked` (`-z`,
/// `--realtime`; `linerate_engine::sys::ask_realtime`): called before the test starts
/// any thread, so that all of them inherit it. A refusal is said on stderr and returned,
/// for the test's document: the test runs at normal priority.
pub fn take_realtime(asked: bool) -> Option<String> {
    let warning = realtime_refusal(asked)?;
    eprintln!("linerate: warning: {warning}");
    Some(warning)
}

/// As [`take_realtime`], the refusal returned and not said: for a caller with a log of
/// its own format (`serve --log-format json`).
pub fn realtime_refusal(asked: bool) -> Option<String> {
    let refused = asked.then(linerate_engine::sys::ask_realtime)?.err()?;
    Some(format!(
        "-z: real-time scheduling was refused ({refused}; it needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of {}): this side's threads run at normal priority",
        linerate_engine::sys::REALTIME_PRIORITY
    ))
}

/// The request resolved on this machine; under `--verbose`, what it chose and why, on
/// stderr (stdout may be a JSON document).
fn resolved(
    request: &TestRequest,
    target: Option<SocketAddr>,
    verbose: bool,
) -> Result<TestConfig, Failure> {
    let (config, choices) = test::resolve_explained(request, target).map_err(Failure::Usage)?;
    if verbose {
        for line in choices {
            eprintln!("linerate: {line}");
        }
    }
    Ok(config)
}

/// The address of the server named, resolved; `None` for the in-process one.
fn target_of(shown: &Shown) -> Result<Option<SocketAddr>> {
    shown
        .host
        .map(|host| test::resolve_host_as(host, shown.port, shown.family))
        .transpose()
}

/// What every test command has before it runs: the server's address, the request
/// resolved, the store to keep the run in, the operator's stop.
type Prepared = (
    Option<SocketAddr>,
    TestConfig,
    Option<linerate_store::Store>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
);

fn prepare(request: &TestRequest, shown: &Shown, storage: &Storage) -> Result<Prepared> {
    let target = target_of(shown)?;
    let config = resolved(request, target, shown.verbose)?;
    Ok((
        target,
        config,
        storage.open_for_run()?,
        cancel::on_signals()?,
    ))
}

/// Runs one test command: the baseline first when asked, then the test (repeated as the
/// plan says), its result shown and kept.
pub fn run(
    request: &TestRequest,
    shown: &Shown,
    with_baseline: bool,
    storage: &Storage,
) -> Result<()> {
    let realtime_refused = take_realtime(shown.realtime);
    let (target, config, store, cancel) = prepare(request, shown, storage)?;
    let text = TextSink::new(std::io::stdout(), shown.scale).intervals(
        &config,
        shown.per_flow,
        shown.plan.is_none(),
    );
    let mut sinks = sink::standard(shown.json, text, store);
    let options = |config: &TestConfig| shown.trust.options(config);
    let plain = if with_baseline {
        Some(baseline::run_baseline(
            &config,
            shown.scale,
            &mut sinks,
            |plain| test::run(target, &options(plain), &cancel, &mut Discard),
        )?)
    } else {
        None
    };
    sinks.event(&Event::Note(&test::banner(shown.host, target, &config)));
    let report = repeat::repeat(shown.plan, &cancel, &mut sinks, |_, sink| {
        let mut report = test::run(target, &options(&config), &cancel, sink)?;
        if let Some(plain) = &plain {
            baseline::compare(&mut report, plain);
        }
        report.warnings.extend(realtime_refused.clone());
        Ok(report)
    })?;
    let failed = repeat::check_flows(&report);
    let interrupted = report.interrupted;
    sinks.finish_document(&Document::Test(Box::new(report)))?;
    if let Some(mark) = interrupted {
        // As iperf3: the part that ran is shown and kept; the status says it was cut.
        eprintln!(
            "linerate: interrupted after {:.2} s; the result covers that part",
            mark.after_s
        );
        return Err(Failure::Status(130).into());
    }
    failed.map_err(|e| Failure::Partial(format!("{e:#}")).into())
}

/// An application pattern's plan (`linerate app`, `linerate_model::app::Plan`): its test
/// alone, or with the test `beside` it (a conference's calls beside its video).
pub fn run_app(
    request: &TestRequest,
    beside: Option<&TestRequest>,
    shown: &Shown,
    storage: &Storage,
) -> Result<()> {
    match beside {
        None => run(request, shown, false, storage),
        Some(beside) => run_beside(request, beside, shown, storage),
    }
}

/// A test with another beside it whose call scores join its summary (a conference's
/// calls beside its video). The test beside runs
/// [`LEAD_S`](linerate_drivers::bulk_load::LEAD_S) longer at each end, the first
/// omitted, so that its window begins with the test's and ends a second after it; one
/// run, shown and kept.
fn run_beside(
    request: &TestRequest,
    beside: &TestRequest,
    shown: &Shown,
    storage: &Storage,
) -> Result<()> {
    use linerate_drivers::bulk_load::{beside_request, run_beside};
    let realtime_refused = take_realtime(shown.realtime);
    let (target, config, store, cancel) = prepare(request, shown, storage)?;
    let beside_config = resolved(&beside_request(request, beside), target, shown.verbose)?;
    let text =
        TextSink::new(std::io::stdout(), shown.scale).intervals(&config, shown.per_flow, true);
    let mut sinks = sink::standard(shown.json, text, store);
    sinks.event(&Event::Note(&test::banner(shown.host, target, &config)));
    let mut progress = |event| sinks.event(&Event::Test(&event));
    let (mut report, beside_failed) = run_beside(
        target,
        &shown.trust.options(&config),
        shown.trust.options(&beside_config),
        &cancel,
        &mut progress,
    )?;
    report.warnings.extend(realtime_refused);
    let failed = repeat::check_flows(&report);
    let interrupted = report.interrupted.is_some();
    sinks.finish_document(&Document::Test(Box::new(report)))?;
    if interrupted {
        return Err(Failure::Status(130).into());
    }
    match beside_failed {
        Some(why) => Err(Failure::Partial(why).into()),
        None => failed.map_err(|e| Failure::Partial(format!("{e:#}")).into()),
    }
}

/// `--find-max`: its trials shown one line each as they end, then the highest rate whose
/// receiver-side loss stayed within `--max-loss` and what stopped it.
pub fn search(
    request: &TestRequest,
    max_loss: f64,
    shown: &Shown,
    storage: &Storage,
) -> Result<()> {
    let (target, config, store, cancel) = prepare(request, shown, storage)?;
    let text = TextSink::new(std::io::stdout(), shown.scale);
    let mut sinks = sink::standard(shown.json, text, store);
    sinks.event(&Event::Note(&test::banner(shown.host, target, &config)));
    sinks.event(&Event::Note(&format!(
        "Searching for the highest rate with loss <= {}%, {} s trials",
        max_loss, config.time_s
    )));
    let run_trial = |trial: &TestConfig| -> Result<_> {
        let options = shown.trust.options(trial);
        let report = test::run(target, &options, &cancel, &mut Discard)?;
        repeat::check_flows(&report)?;
        Ok(report)
    };
    let report = match find_max::find_max(
        config,
        max_loss,
        shown.scale,
        &cancel,
        &mut sinks,
        run_trial,
    ) {
        Ok(report) => report,
        Err(FindMaxError::Trial(error)) => return Err(error),
        Err(FindMaxError::Interrupted) => bail!("interrupted before the first trial ended"),
    };
    sinks.finish_document(&Document::FindMax(Box::new(report)))
}
