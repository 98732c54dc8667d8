//! `linerate stream`, `rr` and `crr`: flags into a test request, then one campaign call
//! (a test, repeated or not, or `--find-max`'s search) with its results going through the
//! standard sinks.

use crate::cli::{RrArgs, StreamArgs, TlsArgs, TransactionArgs};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use anyhow::bail;
use linerate_campaign::find_max::{self, FindMaxError};
use linerate_campaign::sink::{self, Discard, Event, Sink, TextSink};
use linerate_campaign::test::Family;
use linerate_campaign::{baseline, cancel, repeat, test};
use linerate_drivers::client::ClientOptions;
use linerate_model::{
    StreamRequest, StreamTransport, TestKind, TestRequest, TransactionRequest, DEFAULT_TIME_S,
    FIND_MAX_TRIAL_S,
};
use linerate_proto::auth::Key;
use linerate_report::document::Document;
use linerate_report::stats::RepeatPlan;
use linerate_report::units::Scale;
use linerate_report::{Direction, TestConfig};
use std::net::SocketAddr;

/// How one test command shows and keeps its result.
struct Shown<'a> {
    host: Option<&'a str>,
    port: u16,
    /// The IP version the server is reached over (`-4`, `-6`, `--bind`).
    family: Family,
    secure: &'a TlsArgs,
    plan: Option<RepeatPlan>,
    json: bool,
    scale: Scale,
    per_flow: bool,
}

/// The test `linerate stream`'s flags ask for.
fn stream_request(args: &StreamArgs) -> TestRequest {
    let direction = if args.direction.bidir {
        Direction::Bidir
    } else if args.direction.reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    let transport = if args.quic {
        StreamTransport::Quic {
            length: args.length,
            connection_per_flow: args.connections,
        }
    } else if args.udp {
        StreamTransport::Udp {
            length: args.length,
            pps: args.pps,
            gso: args.gso,
            gro: args.gro,
        }
    } else {
        StreamTransport::Tcp {
            length: args.length,
            mss: args.mss,
            nodelay: args.nodelay,
        }
    };
    TestRequest {
        tls: args.secure.settings(args.quic),
        target: args.server.host.clone(),
        port: args.server.port,
        parallel: args.parallel,
        threads: args.measure.threads,
        time_s: args.time.unwrap_or(if args.find_max {
            FIND_MAX_TRIAL_S
        } else {
            DEFAULT_TIME_S
        }),
        omit_s: args.measure.omit,
        interval_s: args.measure.interval,
        window: args.measure.window,
        congestion: args.congestion.clone(),
        per_flow: args.per_flow,
        connect_timeout_s: args.server.connect_timeout,
        observe: !args.measure.no_observe,
        source: args.server.source(),
        marks: args.server.marks(),
        kind: TestKind::Stream(StreamRequest {
            direction,
            rate_bps: args.rate,
            transport,
        }),
    }
}

/// The test `linerate rr` (with its own flags) or `linerate crr` (`rr` is `None`) asks for.
fn transaction_request(common: &TransactionArgs, rr: Option<&RrArgs>) -> TestRequest {
    TestRequest {
        tls: rr.and_then(|a| a.secure.settings(false)),
        target: common.server.host.clone(),
        port: common.server.port,
        parallel: common.parallel,
        threads: common.measure.threads,
        time_s: common.time,
        omit_s: common.measure.omit,
        interval_s: common.measure.interval,
        window: common.measure.window,
        congestion: common.congestion.clone(),
        per_flow: common.per_flow,
        connect_timeout_s: common.server.connect_timeout,
        observe: !common.measure.no_observe,
        source: common.server.source(),
        marks: common.server.marks(),
        kind: TestKind::Transactions(TransactionRequest {
            connect_each: rr.is_none(),
            udp: rr.is_some_and(|a| a.udp),
            request: common.request,
            response: common.response,
            outstanding: rr.and_then(|a| a.outstanding),
            rate_tps: rr.and_then(|a| a.rate),
            busy_poll_us: common.busy_poll,
            cpus: common.cpu.iter().map(|&c| usize::from(c)).collect(),
            load: rr.map_or(0, |a| a.load),
            keep_nagle: common.no_nodelay,
        }),
    }
}

/// `linerate stream`.
pub fn stream(args: &StreamArgs, globals: &Globals) -> CommandResult {
    check_secure_flags(&args.secure, args.quic, args.baseline)?;
    let shown = Shown {
        host: args.server.host.as_deref(),
        port: args.server.port,
        family: args.server.family().map_err(Failure::Usage)?,
        secure: &args.secure,
        plan: RepeatPlan::from_flags(args.repeat.iterations, args.repeat.confidence),
        json: args.output.print.json,
        scale: args.output.format,
        per_flow: args.per_flow,
    };
    if args.find_max {
        return search(args, &shown, globals);
    }
    run(&stream_request(args), &shown, args.baseline, globals)
}

/// `linerate rr` (with its own flags) and `linerate crr` (`rr` is `None`).
pub fn transactions(
    common: &TransactionArgs,
    rr: Option<&RrArgs>,
    globals: &Globals,
) -> CommandResult {
    let default_secure = TlsArgs::default();
    let secure = rr.map_or(&default_secure, |a| &a.secure);
    check_secure_flags(secure, false, false)?;
    let shown = Shown {
        host: common.server.host.as_deref(),
        port: common.server.port,
        family: common.server.family().map_err(Failure::Usage)?,
        secure,
        plan: RepeatPlan::from_flags(common.repeat.iterations, common.repeat.confidence),
        json: common.output.print.json,
        scale: common.output.format,
        per_flow: common.per_flow,
    };
    run(&transaction_request(common, rr), &shown, false, globals)
}

/// The request resolved on this machine; under `--verbose`, what it chose and why, on
/// stderr (stdout may be a JSON document).
fn resolved(
    request: &TestRequest,
    target: Option<SocketAddr>,
    globals: &Globals,
) -> Result<TestConfig, Failure> {
    let (config, choices) = test::resolve_explained(request, target).map_err(Failure::Usage)?;
    if globals.verbose {
        for line in choices {
            eprintln!("linerate: {line}");
        }
    }
    Ok(config)
}

/// The address of the server named, resolved; `None` for the in-process one.
fn target_of(shown: &Shown) -> anyhow::Result<Option<SocketAddr>> {
    shown
        .host
        .map(|host| test::resolve_host_as(host, shown.port, shown.family))
        .transpose()
}

/// Runs one test command: the baseline first when asked, then the test (repeated as the
/// plan says), its result shown and kept.
fn run(
    request: &TestRequest,
    shown: &Shown,
    with_baseline: bool,
    globals: &Globals,
) -> CommandResult {
    let target = target_of(shown)?;
    let config = resolved(request, target, globals)?;
    let store = globals.storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let text = TextSink::new(std::io::stdout(), shown.scale).intervals(
        &config,
        shown.per_flow,
        shown.plan.is_none(),
    );
    let mut sinks = sink::standard(shown.json, text, store);
    let options = |config: &TestConfig| client_options(config, shown.secure, globals.key.clone());
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

/// `--find-max`: its trials shown one line each as they end, then the highest rate whose
/// receiver-side loss stayed within `--max-loss` and what stopped it.
fn search(args: &StreamArgs, shown: &Shown, globals: &Globals) -> CommandResult {
    let target = target_of(shown)?;
    let config = resolved(&stream_request(args), target, globals)?;
    let store = globals.storage.open_for_run()?;
    let cancel = cancel::on_signals()?;
    let text = TextSink::new(std::io::stdout(), shown.scale);
    let mut sinks = sink::standard(shown.json, text, store);
    sinks.event(&Event::Note(&test::banner(shown.host, target, &config)));
    sinks.event(&Event::Note(&format!(
        "Searching for the highest rate with loss <= {}%, {} s trials",
        args.max_loss, config.time_s
    )));
    let run_trial = |trial: &TestConfig| -> anyhow::Result<_> {
        let options = client_options(trial, shown.secure, globals.key.clone());
        let report = test::run(target, &options, &cancel, &mut Discard)?;
        repeat::check_flows(&report)?;
        Ok(report)
    };
    let report = match find_max::find_max(
        config,
        args.max_loss,
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

/// The client's options for `config`: the user's key, and the TLS trust and in-process
/// certificate the flags name.
pub fn client_options(config: &TestConfig, secure: &TlsArgs, key: Option<Key>) -> ClientOptions {
    let mut options = ClientOptions::new(config.clone());
    options.key = key;
    options.ca = secure.ca.clone();
    options.local_identity = secure.cert.clone().zip(secure.cert_key.clone());
    options
}

/// Flags that mean something only for an encrypted test, given without one.
pub fn check_secure_flags(secure: &TlsArgs, quic: bool, baseline: bool) -> Result<(), Failure> {
    if secure.tls || quic {
        return Ok(());
    }
    let stray = [
        ("--cipher", secure.cipher.is_some()),
        ("--ca", secure.ca.is_some()),
        ("--cert", secure.cert.is_some()),
        ("--baseline", baseline),
    ];
    match stray.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(Failure::Usage(format!(
            "'{flag}' applies to encrypted tests: add '--tls' (or '--quic')"
        ))),
        None => Ok(()),
    }
}
