//! `linerate serve`: the flags into a server's configuration, and the server run until
//! SIGINT or SIGTERM.

use crate::cli::ServeArgs;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use anyhow::{anyhow, Context};
use linerate_campaign::{cancel, storage};
use linerate_drivers::access::{AccessPolicy, LogFormat};
use linerate_drivers::server::{Server, ServerConfig};
use linerate_drivers::server_state::ServedTestHook;
use linerate_metrics::assess::Thresholds;
use linerate_metrics::board::{Board, ReflectorCounts, ReflectorSource};
use linerate_metrics::served;
use linerate_proto::Limits;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub fn serve(args: &ServeArgs, globals: &Globals) -> CommandResult {
    let ip = args.listen.unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    let mut config = ServerConfig::new(SocketAddr::new(ip, args.port));
    config.mptcp = args.mptcp;
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
    config.key = globals.key.clone();
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
    config.iperf3_auth = iperf3_auth(args)?;
    config.files = file_service(args, config.key.clone())?;
    if config.key.is_none() {
        eprintln!(
            "linerate: warning: no --key: anyone who can reach this server can run tests on it (docs/security.md)"
        );
    }
    // linerate clients keep their own results; iperf3 clients cannot, so their tests are
    // kept here.
    if let Some(store) = globals.storage.open_for_run()? {
        config.iperf3_reports = Some(storage::server_keeper(store, !args.quiet));
    }
    // Kept until the server ends: dropped, the reflector stops.
    let stamp = stamp_reflector(args, &config)?;
    // Kept until the server ends: dropped, the listener stops.
    let _metrics = metrics_listener(args, &mut config, stamp.as_ref())?;
    // Kept until the server ends, as the metrics listener.
    let _http = http_servers(args, &config)?;
    let server = match Server::bind(config.clone()) {
        Ok(server) => server,
        // The port is taken: say so of the address asked for ([::], every address).
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(anyhow!(e).context(format!(
                "cannot listen on {} (another server holds port {}: stop it, or give --port)",
                config.listen, args.port
            )))
        }
        // No IPv6 on this host: the default falls back to every IPv4 address.
        Err(_) if args.listen.is_none() => {
            config.listen = SocketAddr::from(([0, 0, 0, 0], args.port));
            Server::bind(config.clone())
                .with_context(|| format!("cannot listen on {}", config.listen))?
        }
        Err(e) => return Err(anyhow!(e).context(format!("cannot listen on {}", config.listen))),
    };
    cancel::set_on_signals(&server.shutdown_flag())?;
    server.run().context("server failed")?;
    Ok(())
}

/// `--metrics`: the listener, the served tests on its board, and the STAMP reflector's
/// counts read at each scrape.
fn metrics_listener(
    args: &ServeArgs,
    config: &mut ServerConfig,
    stamp: Option<&linerate_stamp::listener::Listener>,
) -> Result<Option<linerate_metrics::server::MetricsServer>, Failure> {
    let Some(addr) = args.metrics else {
        return Ok(None);
    };
    let board = Arc::new(Mutex::new(Board::default()));
    if let Some(listener) = stamp {
        let counters = listener.counters.clone();
        board.lock().unwrap_or_else(|e| e.into_inner()).reflector =
            Some(ReflectorSource(Arc::new(move || ReflectorCounts {
                answered: counters.answered.load(Ordering::Relaxed),
                refused: counters.refused(),
                sessions: counters.sessions.load(Ordering::Relaxed),
            })));
    }
    let listener =
        linerate_metrics::server::start(addr, board.clone(), "serve", Thresholds::default(), None)
            .map_err(|e| Failure::Usage(format!("--metrics {addr}: {e:#}")))?;
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

/// The STAMP reflector of `--stamp`, under the server's --allow and --deny.
fn stamp_reflector(
    args: &ServeArgs,
    config: &ServerConfig,
) -> Result<Option<linerate_stamp::listener::Listener>, Failure> {
    let Some(addr) = args.stamp else {
        return Ok(None);
    };
    let key = match &args.stamp_hmac_key_file {
        Some(path) => Some(
            crate::stamp_cmd::read_key_file(path, "--stamp-hmac-key-file")
                .map_err(Failure::Usage)?,
        ),
        None => None,
    };
    let reflector = linerate_stamp::reflector::Config {
        key,
        authenticated_only: args.stamp_authenticated_only,
        max_sessions: args.stamp_sessions as usize,
        max_sessions_per_source: args.stamp_sessions_per_source as usize,
        ipv6_source_prefix: args.ipv6_client_prefix,
        twamp_light_pps: args.stamp_twamp_light,
        per_source_pps: args.stamp_rate_per_source,
        total_pps: args.stamp_rate,
        ..linerate_stamp::reflector::Config::default()
    };
    let policy = config.access.clone();
    let log = Arc::new(linerate_drivers::access::OperatorLog::new(
        true,
        config.log_format,
    ));
    let line = log.clone();
    let listener = linerate_stamp::listener::start(
        addr,
        reflector,
        Arc::new(move |ip| policy.permits(linerate_drivers::access::canonical(ip))),
        Arc::new(move |message: &str| line.line(message)),
    )
    .map_err(|e| Failure::Usage(format!("--stamp {addr}: cannot listen: {e}")))?;
    log.line(&format!(
        "STAMP reflector on udp {}{}",
        listener.addr,
        if args.stamp_authenticated_only {
            " (authenticated packets only)"
        } else {
            ""
        }
    ));
    Ok(Some(listener))
}

/// The RPM servers of `--http` and `--https`.
fn http_servers(
    args: &ServeArgs,
    config: &ServerConfig,
) -> anyhow::Result<Vec<linerate_rpm::server::HttpServer>> {
    let mut servers = Vec::new();
    for (addr, tls, flag) in [(args.http, false, "--http"), (args.https, true, "--https")] {
        let Some(addr) = addr else { continue };
        let tls = if tls {
            let identity = config
                .tls_identity
                .load()
                .map_err(|why| Failure::Usage(format!("{flag}: {why}")))?;
            eprintln!(
                "linerate serve: the HTTPS certificate's SHA-256 fingerprint is {}",
                identity.fingerprint
            );
            Some(identity.config.clone())
        } else {
            None
        };
        let limits = linerate_rpm::server::Limits {
            max_request: std::time::Duration::from_secs_f64(args.max_duration.clamp(10.0, 3600.0)),
            v6_prefix: args.ipv6_client_prefix,
            ..Default::default()
        };
        let server = linerate_rpm::server::start(addr, tls, limits)
            .map_err(|e| Failure::Usage(format!("{flag} {addr}: {e:#}")))?;
        eprintln!(
            "linerate serve: responsiveness (RPM) at {}",
            server.config_url()
        );
        servers.push(server);
    }
    Ok(servers)
}

/// iperf3's authentication (`--rsa-private-key-path`, `--authorized-users-path`).
fn iperf3_auth(
    args: &ServeArgs,
) -> anyhow::Result<Option<Arc<linerate_drivers::iperf3_auth::Iperf3Auth>>> {
    let (Some(private_key), Some(users)) =
        (&args.rsa_private_key_path, &args.authorized_users_path)
    else {
        return Ok(None);
    };
    match linerate_drivers::iperf3_auth::load(
        private_key,
        users,
        args.time_skew_threshold,
        args.rsa_pkcs1_padding,
    ) {
        Ok(auth) => Ok(Some(Arc::new(auth))),
        Err(message) => Err(Failure::Usage(format!(
            "invalid value for '--rsa-private-key-path'/'--authorized-users-path': {message}"
        ))
        .into()),
    }
}

/// The files `--files` serves, to clients that hold `key` only.
fn file_service(
    args: &ServeArgs,
    key: Option<linerate_proto::auth::Key>,
) -> anyhow::Result<Option<Arc<linerate_transfer::service::FileService>>> {
    let Some(dir) = &args.files else {
        return Ok(None);
    };
    let Some(key) = key else {
        return Err(Failure::Usage(
            "'--files' needs '--key FILE': files are served only to clients that hold the key"
                .into(),
        )
        .into());
    };
    match linerate_transfer::service::FileService::new(dir, key) {
        Ok(service) => Ok(Some(Arc::new(service))),
        Err(e) => Err(Failure::Usage(format!(
            "invalid value '{}' for '--files': {e}",
            dir.display()
        ))
        .into()),
    }
}
