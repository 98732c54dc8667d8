//! `linerate serve`: the flags into a server's configuration, and the server run until
//! SIGINT or SIGTERM.

use crate::cli::ServeArgs;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::serve_run::{self, Beside};
use linerate_campaign::storage;
use linerate_drivers::access::{AccessPolicy, LogFormat};
use linerate_drivers::server::ServerConfig;
use linerate_proto::Limits;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

pub fn serve(args: &ServeArgs, globals: &Globals) -> CommandResult {
    // Before any of the server's threads starts; a refusal is a line of the operator's
    // log, in its format, even under --quiet (the operator asked for it).
    let realtime_refused = linerate_campaign::test_run::realtime_refusal(args.realtime);
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
    set_tls(args, &mut config)?;
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
    // Warnings of the server's own set-up, in the log's format, even under --quiet.
    let set_up = linerate_drivers::access::OperatorLog::new(true, config.log_format);
    if let Some(warning) = realtime_refused {
        set_up.line(&format!("warning: {warning}"));
    }
    config.iperf3_auth = iperf3_auth(args)?;
    config.files = file_service(args, config.key.clone())?;
    let joins = (!args.join.is_empty()).then_some(args.join_port);
    config.iperf2 = args.iperf2.serving(config.key.is_some(), joins);
    config.same_clock = args.same_clock;
    if config.key.is_none() {
        set_up.line("warning: no --key: anyone who can reach this server can run tests on it (docs/security.md)");
    }
    // linerate clients keep their own results; iperf3 clients cannot, so their tests are
    // kept here.
    if let Some(store) = globals.storage.open_for_run()? {
        config.foreign_reports = Some(storage::server_keeper(store, !args.quiet));
    }
    let beside = Beside {
        metrics: args.metrics,
        stamp: args.stamp.map(|addr| (addr, stamp_reflector(args))),
        irtt: args
            .irtt
            .map(|addr| (addr, args.irtt_hmac_key_file.clone())),
        http: args.http,
        https: args.https,
        rpm_max_request_s: args.max_duration.clamp(10.0, 3600.0),
        ndt7: args.ndt7.map(|addr| (addr, args.ndt7_cleartext)),
        v6_prefix: args.ipv6_client_prefix,
        default_listen: args.listen.is_none(),
        port: args.port,
        multicast: (!args.join.is_empty()).then(|| {
            (
                args.join.clone(),
                linerate_drivers::multicast::ReceiveOptions {
                    port: args.join_port,
                    silence: std::time::Duration::from_secs_f64(args.join_silence),
                    same_clock: args.same_clock,
                },
            )
        }),
        json_lines: args.log_format == "json",
    };
    serve_run::run(config, &beside, &globals.storage)
}

/// `--no-tls`, `--require-tls` and the certificate, which must load when given.
fn set_tls(args: &ServeArgs, config: &mut ServerConfig) -> Result<(), Failure> {
    config.tls_mode = linerate_drivers::secure::TlsMode::from_flags(args.no_tls, args.require_tls);
    config.tls_identity = Arc::new(linerate_drivers::secure::ServerIdentity::new(
        args.cert.clone().zip(args.cert_key.clone()),
    ));
    if args.cert.is_some() {
        // A certificate that cannot be used is the operator's mistake, told at start.
        if let Err(why) = config.tls_identity.load() {
            return Err(Failure::Usage(format!(
                "invalid value for '--cert'/'--cert-key': {why}"
            )));
        }
    }
    Ok(())
}

/// The STAMP reflector's settings, from `--stamp-*` and the server's.
fn stamp_reflector(args: &ServeArgs) -> linerate_stamp::reflector::Config {
    linerate_stamp::reflector::Config {
        key: args.stamp_hmac_key_file.clone(),
        authenticated_only: args.stamp_authenticated_only,
        max_sessions: args.stamp_sessions as usize,
        max_sessions_per_source: args.stamp_sessions_per_source as usize,
        ipv6_source_prefix: args.ipv6_client_prefix,
        twamp_light_pps: args.stamp_twamp_light,
        per_source_pps: args.stamp_rate_per_source,
        total_pps: args.stamp_rate,
        ..linerate_stamp::reflector::Config::default()
    }
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
