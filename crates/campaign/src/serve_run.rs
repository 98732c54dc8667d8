//! `linerate serve` as it runs: the test server, and beside it the metrics listener,
//! the STAMP reflector and the RPM servers, until a signal ends them.

use crate::cancel;
use crate::failure::usage;
use crate::storage::Storage;
use anyhow::{anyhow, Context, Result};
use linerate_drivers::multicast::{ReceiveOptions, ReceiverEvent, Receivers};
use linerate_drivers::server::{Server, ServerConfig};
use linerate_drivers::server_state::ServedTestHook;
use linerate_metrics::assess::Thresholds;
use linerate_metrics::board::{Board, Reflector, ReflectorCounts, ReflectorSource};
use linerate_metrics::served;
use linerate_model::multicast::Join;
use linerate_stamp::listener::{Counters, Reasons};
use linerate_stamp::reflector;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What `linerate serve` runs beside its test server, each kept until the server ends.
#[derive(Debug, Clone)]
pub struct Beside {
    /// `--metrics`: OpenMetrics and the served tests' board.
    pub metrics: Option<SocketAddr>,
    /// `--stamp`: a STAMP reflector, under the server's --allow and --deny.
    pub stamp: Option<(SocketAddr, reflector::Config)>,
    /// `--irtt`: an irtt server, with its key (`--irtt-hmac-key-file`), under the
    /// server's --allow, --deny and --max-duration.
    pub irtt: Option<(SocketAddr, Option<linerate_irtt::wire::HmacKey>)>,
    /// `--http` and `--https`: the RPM servers.
    pub http: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    /// An RPM request's bound, seconds.
    pub rpm_max_request_s: f64,
    /// `--ndt7`: the ndt7 server, and whether it speaks cleartext (`--ndt7-cleartext`).
    pub ndt7: Option<(SocketAddr, bool)>,
    pub v6_prefix: u8,
    /// The address was the default ([::]): with no IPv6, every IPv4 address instead.
    pub default_listen: bool,
    pub port: u16,
    /// `--join`: the multicast groups to count senders' streams of, and how.
    pub multicast: Option<(Vec<Join>, ReceiveOptions)>,
    /// `--log-format json`: each multicast stream's figures as one JSON line.
    pub json_lines: bool,
}

/// `linerate serve`: the test server with what runs beside it, until a signal ends it.
pub fn run(mut config: ServerConfig, beside: &Beside, storage: &Storage) -> Result<()> {
    // Kept until the server ends: dropped, the reflector and the irtt server stop.
    let stamp = stamp_reflector(beside, &config)?;
    let irtt = irtt_server(beside, &config)?;
    let answering = [
        stamp
            .as_ref()
            .map(|s| (Reflector::Stamp, counts_of(&s.counters))),
        irtt.as_ref()
            .map(|s| (Reflector::Irtt, counts_of(&s.counters))),
    ];
    // Kept until the server ends: dropped, the listener stops.
    let _metrics = metrics_listener(
        beside,
        &mut config,
        answering.into_iter().flatten().collect(),
    )?;
    // Kept until the server ends, as the metrics listener.
    let _http = http_servers(beside, &config)?;
    let _ndt7 = ndt7_server(beside, &config, storage)?;
    // Kept until the server ends: dropped, the streams under way are told and the
    // groups left.
    let _multicast = multicast_receivers(beside, config.log, storage)?;
    let server = match Server::bind(config.clone()) {
        Ok(server) => server,
        // The port is taken: say so of the address asked for ([::], every address).
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(anyhow!(e).context(format!(
                "cannot listen on {} (another server holds port {}: stop it, or give --port)",
                config.listen, beside.port
            )))
        }
        // No IPv6 on this host: the default falls back to every IPv4 address.
        Err(_) if beside.default_listen => {
            config.listen = SocketAddr::from(([0, 0, 0, 0], beside.port));
            Server::bind(config.clone())
                .with_context(|| format!("cannot listen on {}", config.listen))?
        }
        Err(e) => return Err(anyhow!(e).context(format!("cannot listen on {}", config.listen))),
    };
    cancel::set_on_signals(&server.shutdown_flag())?;
    server.run().context("server failed")?;
    Ok(())
}

/// `--join`: the receivers of the groups the operator named, each stream's figures on
/// standard output as it ends (a line, or with `--log-format json` a JSON object) and
/// kept as a run.
fn multicast_receivers(beside: &Beside, log: bool, storage: &Storage) -> Result<Option<Receivers>> {
    let Some((joins, options)) = &beside.multicast else {
        return Ok(None);
    };
    let json = beside.json_lines;
    let mut store = storage.open_for_run()?;
    let receivers = Receivers::start(joins, options.clone(), move |event| {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        // The operator's log, as the server's own lines are written.
        let say = |event: &str, message: String| {
            if !log {
                return;
            }
            if json {
                let line = serde_json::json!({"time": now, "event": event, "message": message});
                eprintln!("{line}");
            } else {
                eprintln!("{now} {message}");
            }
        };
        match event {
            ReceiverEvent::Joined { join, port } => {
                say("log", format!("joined multicast {} on port {port}", join.describe()))
            }
            ReceiverEvent::Stream(stream) => {
                if json {
                    let mut line =
                        serde_json::json!({"time": now, "event": "multicast_stream"});
                    line["stream"] = serde_json::to_value(&*stream).unwrap_or_default();
                    println!("{line}");
                } else {
                    println!("{now} {}", linerate_report::multicast::stream_line(&stream));
                }
                let about = format!("multicast {} from {}", stream.group, stream.sender);
                if let Some(store) = store.as_mut() {
                    match crate::multicast_run::keep_stream(store, &stream) {
                        Ok(said) => say("log", format!("{about}: {said}")),
                        Err(e) => say("log", format!("{about}: not stored: {e:#}")),
                    }
                }
            }
            ReceiverEvent::Refused { join, datagrams } => say(
                "refused",
                format!(
                    "multicast {}: {datagrams} datagrams refused (from another source than the join's, or senders beyond {} at once)",
                    join.describe(),
                    linerate_proto::multicast::MAX_SENDERS
                ),
            ),
        }
    })
    .map_err(|e| usage(e.to_string()))?;
    Ok(Some(receivers))
}

/// Reads an answering service's counters at each scrape.
fn counts_of<R: Reasons>(counters: &Arc<Counters<R>>) -> ReflectorSource {
    let counters = counters.clone();
    ReflectorSource(Arc::new(move || ReflectorCounts {
        answered: counters.answered.load(Ordering::Relaxed),
        refused: counters.refused(),
        sessions: counters.sessions.load(Ordering::Relaxed),
    }))
}

/// `--metrics`: the listener, the served tests on its board, and the answering services'
/// counts (the STAMP reflector's, the irtt server's) read at each scrape.
fn metrics_listener(
    beside: &Beside,
    config: &mut ServerConfig,
    answering: Vec<(Reflector, ReflectorSource)>,
) -> Result<Option<linerate_metrics::server::MetricsServer>> {
    let Some(addr) = beside.metrics else {
        return Ok(None);
    };
    let board = Arc::new(Mutex::new(Board::default()));
    board.lock().unwrap_or_else(|e| e.into_inner()).reflectors = answering;
    let listener =
        linerate_metrics::server::start(addr, board.clone(), "serve", Thresholds::default(), None)
            .map_err(|e| usage(format!("--metrics {addr}: {e:#}")))?;
    eprintln!(
        "linerate serve: metrics at http://{}/metrics",
        listener.addr
    );
    config.served_tests = Some(ServedTestHook(Arc::new(move |served| {
        let mut board = board.lock().unwrap_or_else(|e| e.into_inner());
        for (row, figures) in served::rows_of_served(served) {
            board.record_figures(&row, Some(&figures));
        }
    })));
    Ok(Some(listener))
}

/// What a UDP service beside the server answers under: the server's --allow and --deny,
/// and the operator's log (its refusals told whatever `-q` says), with the log itself for
/// the service's own first line.
fn access_of(
    config: &ServerConfig,
) -> (
    linerate_stamp::listener::Permits,
    linerate_stamp::listener::LogLine,
    Arc<linerate_drivers::access::OperatorLog>,
) {
    let policy = config.access.clone();
    let log = Arc::new(linerate_drivers::access::OperatorLog::new(
        true,
        config.log_format,
    ));
    let line = log.clone();
    (
        Arc::new(move |ip| policy.permits(linerate_drivers::access::canonical(ip))),
        Arc::new(move |message: &str| line.line(message)),
        log,
    )
}

/// The STAMP reflector of `--stamp`, under the server's --allow and --deny.
fn stamp_reflector(
    beside: &Beside,
    config: &ServerConfig,
) -> Result<Option<linerate_stamp::listener::Listener>> {
    let Some((addr, reflector)) = beside.stamp.clone() else {
        return Ok(None);
    };
    let authenticated_only = reflector.authenticated_only;
    let (permits, line, log) = access_of(config);
    let listener = linerate_stamp::listener::start(addr, reflector, permits, line)
        .map_err(|e| usage(format!("--stamp {addr}: cannot listen: {e}")))?;
    log.line(&format!(
        "STAMP reflector on udp {}{}",
        listener.addr,
        if authenticated_only {
            " (authenticated packets only)"
        } else {
            ""
        }
    ));
    Ok(Some(listener))
}

/// The irtt server of `--irtt`, under the server's --allow, --deny and --max-duration.
fn irtt_server(
    beside: &Beside,
    config: &ServerConfig,
) -> Result<Option<linerate_irtt::listener::Listener>> {
    let Some((addr, key)) = beside.irtt.clone() else {
        return Ok(None);
    };
    let keyed = key.is_some();
    let irtt = linerate_irtt::server::Config {
        key,
        max_duration_ns: (config.limits.max_duration_s.min(86_400.0) * 1e9) as i64,
        ipv6_source_prefix: beside.v6_prefix,
        ..linerate_irtt::server::Config::default()
    };
    let (permits, line, log) = access_of(config);
    let listener = linerate_irtt::listener::start(addr, irtt, permits, line, config.log)
        .map_err(|e| usage(format!("--irtt {addr}: cannot listen: {e}")))?;
    log.line(&format!(
        "irtt server on udp {}{}",
        listener.addr,
        if keyed {
            " (HMAC-signed packets only)"
        } else {
            ""
        }
    ));
    Ok(Some(listener))
}

/// The ndt7 server of `--ndt7`: TLS with the server's identity, or cleartext.
fn ndt7_server(
    beside: &Beside,
    config: &ServerConfig,
    storage: &Storage,
) -> Result<Option<linerate_ndt7::server::Ndt7Server>> {
    let Some((addr, cleartext)) = beside.ndt7 else {
        return Ok(None);
    };
    let tls = if cleartext {
        None
    } else {
        let identity = config
            .tls_identity
            .load()
            .map_err(|why| usage(format!("--ndt7: {why}")))?;
        eprintln!(
            "linerate serve: the ndt7 certificate's SHA-256 fingerprint is {}",
            identity.fingerprint
        );
        Some(identity.config.clone())
    };
    let limits = linerate_ndt7::server::Limits {
        v6_prefix: beside.v6_prefix,
        ..Default::default()
    };
    let keep = crate::ndt7_run::server_keeper(
        storage.open_for_run()?,
        config.log,
        config.served_tests.clone(),
    );
    let server = linerate_ndt7::server::start(addr, tls, limits, keep)
        .map_err(|e| usage(format!("--ndt7 {addr}: {e:#}")))?;
    eprintln!("linerate serve: ndt7 at {}", server.download_url());
    Ok(Some(server))
}

/// The RPM servers of `--http` and `--https`.
fn http_servers(
    beside: &Beside,
    config: &ServerConfig,
) -> Result<Vec<linerate_rpm::server::HttpServer>> {
    let mut servers = Vec::new();
    for (addr, tls, flag) in [
        (beside.http, false, "--http"),
        (beside.https, true, "--https"),
    ] {
        let Some(addr) = addr else { continue };
        let tls = if tls {
            let identity = config
                .tls_identity
                .load()
                .map_err(|why| usage(format!("{flag}: {why}")))?;
            eprintln!(
                "linerate serve: the HTTPS certificate's SHA-256 fingerprint is {}",
                identity.fingerprint
            );
            Some(identity.config.clone())
        } else {
            None
        };
        let limits = linerate_rpm::server::Limits {
            max_request: Duration::from_secs_f64(beside.rpm_max_request_s),
            v6_prefix: beside.v6_prefix,
            // The page's ndt7 subtests go to this host's ndt7 port.
            ndt7: beside
                .ndt7
                .map(|(addr, cleartext)| (addr.port(), !cleartext)),
            ..Default::default()
        };
        let server = linerate_rpm::server::start(addr, tls, limits)
            .map_err(|e| usage(format!("{flag} {addr}: {e:#}")))?;
        eprintln!(
            "linerate serve: responsiveness (RPM) at {}",
            server.config_url()
        );
        servers.push(server);
    }
    Ok(servers)
}
