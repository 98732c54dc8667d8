//! The `linerate` binary: flags, glue and exit codes; the work is in the library crates.
//!
//! Exit codes: 0 success, 1 a test that could not run or finished with failed flows,
//! 2 a usage error (bad flag or value).

mod cli;
mod copy_cmd;
mod copy_report;
mod doctor_cmd;
mod failure;
mod iperf3_cmd;
mod keep;
mod lab_cmd;
mod run_cmd;
mod store_cmd;
mod sweep_cmd;

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use cli::{Cli, Command, RrArgs, ServeArgs, StreamArgs, TlsArgs, TransactionArgs};
use failure::{Failure, Outcome};
use linerate_drivers::access::{AccessPolicy, LogFormat};
use linerate_drivers::client::{self, ClientOptions, Progress};
use linerate_drivers::find_max::{self, FindMaxError};
use linerate_drivers::load;
use linerate_drivers::server::{Server, ServerConfig};
use linerate_model::{
    StreamRequest, StreamTransport, TestKind, TestRequest, TransactionRequest, DEFAULT_TIME_S,
    FIND_MAX_TRIAL_S,
};
use linerate_proto::auth::Key;
use linerate_proto::Limits;
use linerate_report::document::Document;
use linerate_report::stats::RepeatPlan;
use linerate_report::text::{self, INTERVAL_HEADER, TRIAL_HEADER};
use linerate_report::units::Scale;
use linerate_report::{Direction, Headline, RateTrial, Report, TestConfig};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() -> ExitCode {
    // Output piped into `head` should end the process quietly, as for any command-line
    // tool. Sockets are unaffected: the standard library sends with MSG_NOSIGNAL.
    // SAFETY: setting a signal's disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return failure::exit_code(Err(Failure::Flags(error).into()), false),
    };
    let storage = keep::Storage {
        path: cli.db,
        disabled: cli.no_store,
    };
    if let Some(path) = &cli.key {
        match read_key(path) {
            Ok(key) => {
                let _ = KEY.set(key);
            }
            Err(message) => return failure::exit_code(Err(Failure::Usage(message).into()), false),
        }
    }
    let (json, outcome) = match cli.command {
        Command::Serve(args) => (false, serve(&args, &storage)),
        Command::Stream(args) => (args.json, stream(&args, &storage)),
        Command::Rr(args) => (
            args.common.json,
            transactions(&args.common, Some(&args), &storage),
        ),
        Command::Crr(args) => (args.common.json, transactions(&args.common, None, &storage)),
        Command::Iperf3(args) => (
            args.json || args.iperf3_json || args.json_stream,
            iperf3_cmd::run(&args, &storage),
        ),
        Command::Sweep(args) => (args.json, sweep_cmd::run(&args, &storage)),
        Command::History(args) => (args.json, store_cmd::history(&args, &storage)),
        Command::Show(args) => (args.json, store_cmd::show(&args, &storage)),
        Command::Compare(args) => (args.json, store_cmd::compare(&args, &storage)),
        Command::Export(args) => (false, store_cmd::export(&args, &storage)),
        Command::Report(args) => (false, store_cmd::report(&args, &storage)),
        Command::Run(args) => (args.json, run_cmd::run(&args, &storage)),
        Command::Profile(command) => (false, run_cmd::profile(&command)),
        Command::Impair(args) => (false, lab_cmd::impair(&args)),
        Command::Lab(command) => (false, lab_cmd::run(&command)),
        Command::Copy(args) => (args.json, copy_cmd::copy(&args, &storage)),
        Command::Disk(args) => (args.json, copy_cmd::disk(&args)),
        Command::Doctor(args) => (args.json, doctor_cmd::run(&args)),
    };
    failure::exit_code(outcome, json)
}

fn serve(args: &ServeArgs, storage: &keep::Storage) -> Outcome {
    let ip = args.listen.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    let mut config = ServerConfig::new(SocketAddr::new(ip, args.port));
    config.limits = Limits {
        max_tests: args.max_tests,
        max_flows: args.max_flows,
        max_duration_s: args.max_duration,
        max_rate_bps: args.max_rate.filter(|r| *r > 0),
    };
    if let Some(threads) = args.threads {
        config.threads = Some(threads as usize);
    }
    config.log = !args.quiet;
    config.tls_mode = if args.no_tls {
        linerate_drivers::secure::TlsMode::Off
    } else if args.require_tls {
        linerate_drivers::secure::TlsMode::Required
    } else {
        linerate_drivers::secure::TlsMode::Offered
    };
    config.tls_identity = Arc::new(linerate_drivers::secure::ServerIdentity::new(
        args.cert.clone().zip(args.cert_key.clone()),
    ));
    if args.cert.is_some() {
        // A certificate that cannot be used is the operator's mistake, told at start.
        if let Err(why) = config.tls_identity.load() {
            return Err(
                Failure::Usage(format!("invalid value for '--cert'/'--cert-key': {why}")).into(),
            );
        }
    }
    config.timeouts.handshake = std::time::Duration::from_secs_f64(args.handshake_timeout);
    config.timeouts.idle = std::time::Duration::from_secs_f64(args.idle_timeout);
    config.key = user_key();
    config.max_rate_per_ip = args.max_rate_per_ip.filter(|r| *r > 0);
    config.access = AccessPolicy {
        allow: args.allow.clone(),
        deny: args.deny.clone(),
        max_connections: args.max_connections as usize,
        max_per_ip: args.max_clients_per_ip.map_or(0, |n| n as usize),
        v6_prefix: args.ipv6_client_prefix,
    };
    config.log_format = if args.log_format == "json" {
        LogFormat::Json
    } else {
        LogFormat::Text
    };
    if let (Some(private_key), Some(users)) =
        (&args.rsa_private_key_path, &args.authorized_users_path)
    {
        match linerate_drivers::iperf3_auth::load(
            private_key,
            users,
            args.time_skew_threshold,
            args.rsa_pkcs1_padding,
        ) {
            Ok(auth) => config.iperf3_auth = Some(Arc::new(auth)),
            Err(message) => {
                return Err(Failure::Usage(format!(
                "invalid value for '--rsa-private-key-path'/'--authorized-users-path': {message}"
            ))
                .into())
            }
        }
    }
    if let Some(dir) = &args.files {
        let Some(key) = config.key.clone() else {
            return Err(Failure::Usage(
                "'--files' needs '--key FILE': files are served only to clients that hold the key"
                    .into(),
            )
            .into());
        };
        match linerate_transfer::service::FileService::new(dir, key) {
            Ok(service) => config.files = Some(Arc::new(service)),
            Err(e) => {
                return Err(Failure::Usage(format!(
                    "invalid value '{}' for '--files': {e}",
                    dir.display()
                ))
                .into())
            }
        }
    }
    if config.key.is_none() {
        eprintln!(
            "linerate: warning: no --key: anyone who can reach this server can run tests on it (docs/security.md)"
        );
    }
    // linerate clients keep their own results; iperf3 clients cannot, so their tests are
    // kept here.
    if let Some(store) = storage.open_for_run()? {
        config.iperf3_reports = Some(keep::iperf3_sink(store, !args.quiet));
    }
    let server = match Server::bind(config.clone()) {
        Ok(server) => server,
        // No IPv6 on this host: the default falls back to every IPv4 address.
        Err(_) if args.listen.is_none() => {
            config.listen = SocketAddr::from(([0, 0, 0, 0], args.port));
            Server::bind(config.clone())
                .with_context(|| format!("cannot listen on {}", config.listen))?
        }
        Err(e) => return Err(anyhow!(e).context(format!("cannot listen on {}", config.listen))),
    };
    let shutdown = server.shutdown_flag();
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, shutdown.clone())
            .context("cannot install signal handlers")?;
    }
    server.run().context("server failed")?;
    Ok(())
}

/// The test `linerate stream`'s flags ask for.
fn stream_request(args: &StreamArgs) -> TestRequest {
    let direction = if args.bidir {
        Direction::Bidir
    } else if args.reverse {
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
        target: args.host.clone(),
        port: args.port,
        parallel: args.parallel,
        threads: args.threads,
        time_s: args.time.unwrap_or(if args.find_max {
            FIND_MAX_TRIAL_S
        } else {
            DEFAULT_TIME_S
        }),
        omit_s: args.omit,
        interval_s: args.interval,
        window: args.window,
        congestion: args.congestion.clone(),
        per_flow: args.per_flow,
        connect_timeout_s: args.connect_timeout,
        observe: !args.no_observe,
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
        target: common.host.clone(),
        port: common.port,
        parallel: common.parallel,
        threads: common.threads,
        time_s: common.time,
        omit_s: common.omit,
        interval_s: common.interval,
        window: common.window,
        congestion: common.congestion.clone(),
        per_flow: common.per_flow,
        connect_timeout_s: common.connect_timeout,
        observe: !common.no_observe,
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

/// Resolves a request on this machine (linerate-model's one resolver), with the path's
/// datagram size towards `target` (or loopback) for UDP streams; `Err` is a usage error.
pub(crate) fn resolve_request(
    request: &TestRequest,
    target: Option<SocketAddr>,
) -> std::result::Result<TestConfig, String> {
    let udp_stream = matches!(
        &request.kind,
        TestKind::Stream(StreamRequest {
            transport: StreamTransport::Udp { length: None, .. },
            ..
        })
    );
    let probe =
        udp_stream.then(|| target.unwrap_or(SocketAddr::from(([127, 0, 0, 1], request.port))));
    let config = TestConfig::resolve(request, &linerate_engine::sys::environment(probe))?;
    within_bounds(&config)?;
    Ok(config)
}

/// `linerate rr` (with its own flags) and `linerate crr` (`rr` is `None`).
fn transactions(common: &TransactionArgs, rr: Option<&RrArgs>, storage: &keep::Storage) -> Outcome {
    if let Some(rr) = rr {
        check_secure_flags(&rr.secure, false, false)?;
    }
    let udp = rr.is_some_and(|a| a.udp);
    for (name, size) in [
        ("--request", common.request),
        ("--response", common.response),
    ] {
        if udp && size > 65_507 {
            return Err(Failure::Usage(format!(
                "invalid value '{size}' for '{name}': a UDP datagram carries 1 to 65507 bytes"
            ))
            .into());
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(&cpu) = common.cpu.iter().find(|&&c| usize::from(c) >= cores) {
        return Err(Failure::Usage(format!(
            "invalid value '{cpu}' for '--cpu': this machine has CPUs 0 to {}",
            cores - 1
        ))
        .into());
    }
    let target = match &common.host {
        Some(host) => Some(resolve(host, common.port)?),
        None => None,
    };
    let config = match resolve_request(&transaction_request(common, rr), target) {
        Ok(config) => config,
        Err(message) => return Err(Failure::Usage(message).into()),
    };
    let mut store = storage.open_for_run()?;
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, cancel.clone())
            .context("cannot install signal handlers")?;
    }
    let quiet = common.json;
    if !quiet {
        let banner = match (&common.host, target) {
            (Some(host), Some(addr)) => {
                format!("Connecting to {host} ({addr}), {}", config.describe())
            }
            _ => format!(
                "Measuring this machine over loopback (in-process server), {}",
                config.describe()
            ),
        };
        println!("{banner}");
    }
    let plan = RepeatPlan::from_flags(common.repeat.iterations, common.repeat.confidence);
    let live_intervals = plan.is_none();
    let secure = rr.map(|a| a.secure.clone()).unwrap_or_default();
    let one = |_iteration: u32| {
        transaction_test(target, &config, &secure, quiet, live_intervals, &cancel)
    };
    let each = |index: u32, _: &Report, value: f64| {
        if !quiet {
            println!(
                "Iteration {}: {}",
                index + 1,
                Headline::TransactionsPerS.format(value, Scale::Adaptive)
            );
        }
    };
    let report = keep::repeat(plan, &cancel, one, each)?;
    let document = Document::Test(Box::new(report));
    let text = document.render_text(Scale::Adaptive);
    keep::finish(&document, common.json, &text, store.as_mut())?;
    let Document::Test(report) = document else {
        unreachable!("built as a test above")
    };
    crate::check_flows(&report).map_err(|e| Failure::Partial(format!("{e:#}")).into())
}

/// One request/response test, with its bulk load beside it when asked for.
fn transaction_test(
    target: Option<SocketAddr>,
    config: &TestConfig,
    secure: &TlsArgs,
    quiet: bool,
    live_intervals: bool,
    cancel: &Arc<AtomicBool>,
) -> Result<Report> {
    let mut progress = |event: Progress| {
        if quiet {
            return;
        }
        match event {
            Progress::Connected { server } => println!(
                "Server: {} on {} (kernel {}, {} x {})",
                server.software, server.hostname, server.kernel, server.cores, server.cpu_model
            ),
            Progress::Started => {
                if config.interval_s > 0.0 && live_intervals {
                    println!("{}", linerate_report::rr::RR_INTERVAL_HEADER);
                }
            }
            Progress::Interval(interval) => {
                if !live_intervals {
                    return;
                }
                if let Some(line) = linerate_report::rr::rr_interval_line("SUM", &interval) {
                    println!("{line}");
                }
            }
            // Only iperf3 clients say this.
            Progress::Iperf3Streams { .. } => {}
        }
    };
    let options = client_options(config, secure);
    Ok(load::run_with_load(
        target,
        &options,
        cancel,
        &mut progress,
    )?)
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let mut addrs = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve host '{host}'"))?;
    addrs
        .next()
        .ok_or_else(|| anyhow!("host '{host}' has no address"))
}

/// The key the user named (`--key` or `LINERATE_KEY`), read once before any command runs.
static KEY: std::sync::OnceLock<Key> = std::sync::OnceLock::new();

/// The key the user named, if any.
pub(crate) fn user_key() -> Option<Key> {
    KEY.get().cloned()
}

/// Reads a key file; a file that cannot be a key is the user's mistake, named in one line.
fn read_key(path: &std::path::Path) -> Result<Key, String> {
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| format!("invalid value '{shown}' for '--key': {e}"))?;
    if meta.len() > linerate_proto::auth::MAX_KEY_FILE as u64 {
        return Err(format!(
            "invalid value '{shown}' for '--key': over {} bytes",
            linerate_proto::auth::MAX_KEY_FILE
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("invalid value '{shown}' for '--key': {e}"))?;
    Key::from_file_contents(&bytes).map_err(|e| format!("invalid value '{shown}' for '--key': {e}"))
}

/// The bounds every server puts on a test (linerate-proto's `validate`), checked before
/// connecting, so that a test no server would take is the user's mistake, told at once.
/// Only the server's own limits (tests, flows, duration, rate) are left to the server.
fn within_bounds(config: &TestConfig) -> Result<(), String> {
    let unlimited = Limits {
        max_tests: u32::MAX,
        max_flows: u32::MAX,
        max_duration_s: f64::MAX,
        max_rate_bps: None,
    };
    linerate_proto::session::validate(config, &unlimited).map_err(|(_, reason)| reason)
}

/// Flags that mean something only for an encrypted test, given without one.
pub(crate) fn check_secure_flags(
    secure: &TlsArgs,
    quic: bool,
    baseline: bool,
) -> Result<(), Failure> {
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

fn stream(args: &StreamArgs, storage: &keep::Storage) -> Outcome {
    check_secure_flags(&args.secure, args.quic, args.baseline)?;
    let target = match &args.host {
        Some(host) => Some(resolve(host, args.port)?),
        None => None,
    };
    let config = match resolve_request(&stream_request(args), target) {
        Ok(config) => config,
        Err(message) => return Err(Failure::Usage(message).into()),
    };
    let mut store = storage.open_for_run()?;
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, cancel.clone())
            .context("cannot install signal handlers")?;
    }
    if args.find_max {
        return find_max(args, config, target, &cancel, store.as_mut());
    }
    let flow_ids: Vec<u32> = (0..config.connections()).collect();
    let sends = |id: u32| config.flow_direction(id) != Direction::Reverse;
    let quiet = args.json;
    let plan = RepeatPlan::from_flags(args.repeat.iterations, args.repeat.confidence);
    let live_intervals = plan.is_none();
    let mut progress = |event: Progress| {
        if quiet {
            return;
        }
        match event {
            Progress::Connected { server } => {
                println!(
                    "Server: {} on {} (kernel {}, {} x {})",
                    server.software, server.hostname, server.kernel, server.cores, server.cpu_model
                );
            }
            Progress::Started => {
                if config.interval_s > 0.0 && live_intervals {
                    println!("{INTERVAL_HEADER}");
                }
            }
            Progress::Interval(interval) if live_intervals => {
                for line in text::side_interval_lines(
                    &interval,
                    &sends,
                    &flow_ids,
                    args.format,
                    args.per_flow,
                ) {
                    println!("{line}");
                }
            }
            Progress::Interval(_) | Progress::Iperf3Streams { .. } => {}
        }
    };
    let baseline = if args.baseline {
        Some(run_baseline(args, target, &config, &cancel)?)
    } else {
        None
    };
    if !quiet {
        println!("{}", banner(args, target, &config));
    }
    let cancel_flag = cancel.clone();
    let each = |index: u32, _: &Report, value: f64| {
        if !quiet {
            println!(
                "Iteration {}: {}",
                index + 1,
                Headline::ReceiverBps.format(value, args.format)
            );
        }
    };
    let report = keep::repeat(
        plan,
        &cancel_flag,
        |_| {
            let mut report = run_once(target, &config, &args.secure, &cancel, &mut progress)?;
            if let Some(plain) = &baseline {
                if let Some(crypto) = report.summary.crypto.as_mut() {
                    crypto.compare_with(report.summary.receiver_bps, &plain.summary);
                }
            }
            Ok(report)
        },
        each,
    )?;
    let document = Document::Test(Box::new(report));
    let text = document.render_text(args.format);
    keep::finish(&document, args.json, &text, store.as_mut())?;
    let Document::Test(report) = document else {
        unreachable!("built as a test above")
    };
    crate::check_flows(&report).map_err(|e| Failure::Partial(format!("{e:#}")).into())
}

/// "Connecting to HOST (ADDR), ..." or the loopback equivalent.
fn banner(args: &StreamArgs, target: Option<SocketAddr>, config: &TestConfig) -> String {
    match (&args.host, target) {
        (Some(host), Some(addr)) => format!("Connecting to {host} ({addr}), {}", config.describe()),
        _ => format!(
            "Measuring this machine over loopback (in-process server), {}",
            config.describe()
        ),
    }
}

/// One test against `target`, or against an in-process server when there is none.
fn run_once(
    target: Option<SocketAddr>,
    config: &TestConfig,
    secure: &TlsArgs,
    cancel: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report> {
    Ok(client::run_test(
        target,
        &client_options(config, secure),
        cancel,
        progress,
    )?)
}

/// The client's options for `config`: the user's key, and the TLS trust and in-process
/// certificate the flags name.
fn client_options(config: &TestConfig, secure: &TlsArgs) -> ClientOptions {
    let mut options = ClientOptions::new(config.clone());
    options.key = user_key();
    options.ca = secure.ca.clone();
    options.local_identity = secure.cert.clone().zip(secure.cert_key.clone());
    options
}

/// `--baseline`: the same test plain over TCP, run first; its result is shown in one
/// line and set beside the encrypted run's.
fn run_baseline(
    args: &StreamArgs,
    target: Option<SocketAddr>,
    config: &TestConfig,
    cancel: &Arc<AtomicBool>,
) -> Result<Report> {
    let mut plain = config.clone();
    plain.tls = None;
    plain.quic = None;
    plain.protocol = linerate_model::Protocol::Tcp;
    if !args.json {
        println!("Baseline first: the same test plain, {}", plain.describe());
    }
    let report = client::run_test(
        target,
        &client_options(&plain, &args.secure),
        cancel,
        &mut |_| {},
    )?;
    crate::check_flows(&report)?;
    if !args.json {
        let (cpu, total) = linerate_report::crypto::cpu_per_gbit(&report.summary);
        println!(
            "Baseline: plain TCP {}, {total:.4} CPU s/Gbit (client {:.4}, server {:.4})",
            linerate_report::units::format_rate(report.summary.receiver_bps, args.format),
            cpu.local,
            cpu.remote
        );
    }
    Ok(report)
}

/// Flows that failed: the report, already printed, says which and why; the error says so
/// again on stderr (and a JSON document on stdout stays the only one).
pub(crate) fn check_flows(report: &Report) -> Result<()> {
    if report.summary.flows_failed > 0 {
        bail!(
            "{} of {} flows failed; the figures cover only what arrived",
            report.summary.flows_failed,
            report.summary.flows
        );
    }
    Ok(())
}

/// `--find-max` (linerate-drivers' `find_max`): its trials printed one line each as they
/// end, then the highest rate whose receiver-side loss stayed within `--max-loss` and what
/// stopped it.
fn find_max(
    args: &StreamArgs,
    config: TestConfig,
    target: Option<SocketAddr>,
    cancel: &Arc<AtomicBool>,
    store: Option<&mut linerate_store::Store>,
) -> Outcome {
    if !args.json {
        println!("{}", banner(args, target, &config));
        println!(
            "Searching for the highest rate with loss <= {}%, {} s trials",
            args.max_loss, config.time_s
        );
        println!("{TRIAL_HEADER}");
    }
    let run_trial = |trial: &TestConfig| -> Result<Report> {
        let report = run_once(target, trial, &args.secure, cancel, &mut |_| {})?;
        check_flows(&report)?;
        Ok(report)
    };
    let on_trial = |number: usize, trial: &RateTrial| {
        if !args.json {
            println!("{}", text::trial_line(number, trial, args.format));
        }
    };
    let report = match find_max::find_max(
        config,
        args.max_loss,
        args.format,
        cancel,
        run_trial,
        on_trial,
    ) {
        Ok(report) => report,
        Err(FindMaxError::Trial(error)) => return Err(error),
        Err(FindMaxError::Interrupted) => bail!("interrupted before the first trial ended"),
    };
    // The trials were printed as they ended; the answer is what is left.
    let text = text::render_find_max(&report, args.format);
    keep::finish(
        &Document::FindMax(Box::new(report)),
        args.json,
        &text,
        store,
    )?;
    Ok(())
}
