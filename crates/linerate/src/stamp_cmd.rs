//! `linerate stamp TARGET`: a STAMP Session-Sender (linerate_stamp::sender) against any
//! reflector, its result printed, kept and shown as every other test's.

use crate::cli::{AppArgs, StampArgs};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::stamp_run;
use linerate_stamp::sender::Options;
use linerate_stamp::wire::{tlv, Mode};
use std::time::Duration;

/// The run the flags ask for: the mode the key makes, the rate, the TLVs and the padding
/// that makes `--size`.
fn options(args: &StampArgs) -> Result<Options, Failure> {
    let port = if args.irtt {
        linerate_irtt::wire::PORT
    } else {
        linerate_stamp::PORT
    };
    let addr = linerate_stamp::resolve_reflector_at(&args.target, port).map_err(|why| {
        Failure::Usage(format!(
            "invalid value '{}' for '<TARGET>': {why}",
            args.target
        ))
    })?;
    if let Some(bind) = args.source.bind.filter(|b| b.is_ipv4() != addr.is_ipv4()) {
        return Err(Failure::Usage(format!(
            "invalid value '{bind}' for '--bind': the reflector {addr} is of the other IP version"
        )));
    }
    let key = args.hmac_key.clone().or_else(|| args.hmac_key_file.clone());
    let mode = if key.is_some() {
        Mode::Authenticated
    } else {
        Mode::Open
    };
    let rate_pps = match (args.rate, args.interval) {
        (Some(rate), _) => rate,
        (None, Some(gap)) => 1.0 / gap,
        (None, None) => 10.0,
    };
    let extensions = tlv::Request {
        padding: 0,
        class_of_service: args.dscp.filter(|_| !args.no_tlvs),
        direct_measurement: !args.no_tlvs,
        hmac: mode == Mode::Authenticated && !args.no_tlvs,
    };
    let session = Options::to(args.target.clone(), addr);
    let mut options = Options {
        mode,
        key,
        rate_pps,
        count: args.count,
        duration: match (args.time, args.count) {
            (Some(t), _) => Some(Duration::from_secs_f64(t)),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        },
        extensions,
        dscp: args.dscp,
        source: args.source.source(),
        timeout: Duration::from_secs_f64(args.timeout),
        report_every: Duration::from_secs_f64(args.interval_report),
        same_clock: args.same_clock || in_lab(&session),
        ..session
    };
    if let Some(size) = args.size.filter(|_| !args.irtt) {
        options
            .pad_to(usize::from(size))
            .map_err(|why| Failure::Usage(format!("invalid value '{size}' for '--size': {why}")))?;
    }
    Ok(options)
}

/// Whether a session's two ends share this host's clock: the reflector is this host's,
/// or both are network namespaces of it (`lab run`, `lab exec` name the path they build).
fn in_lab(session: &Options) -> bool {
    session.same_clock || std::env::var_os(linerate_model::PATH_ENV).is_some()
}

pub fn run(args: &StampArgs, globals: &Globals) -> CommandResult {
    let irtt = args.irtt.then(|| linerate_irtt::client::Ask {
        length: args.size.map_or(0, usize::from),
        key: args.irtt_hmac_key_file.clone(),
    });
    stamp_run::run(&options(args)?, irtt, args.print.json, &globals.storage)
}

/// `linerate app --pattern voip --peer irtt`: a call to an irtt server, a request each
/// frame (the codec's datagram, or irtt's fields where they are longer) every 20 ms, each
/// answer the frame back; both ways scored as a call (linerate_stamp::call, docs/app.md).
pub fn call(args: &AppArgs, call: linerate_model::CallStream, globals: &Globals) -> CommandResult {
    if call.settings.codec.voice_activity() {
        return Err(Failure::Usage(format!(
            "invalid value '{}' for '--codec': irtt answers a request every interval, and {} sends only while its speaker talks: call linerate's own server",
            call.settings.codec.name(),
            call.settings.codec.name()
        ))
        .into());
    }
    let server = &args.server;
    let Some(host) = server.host.clone() else {
        return Err(Failure::Usage("'--peer irtt' needs the irtt server: HOST".into()).into());
    };
    let target = match server.port {
        Some(port) if host.contains(':') && !host.starts_with('[') => format!("[{host}]:{port}"),
        Some(port) => format!("{host}:{port}"),
        None => host.clone(),
    };
    let addr = linerate_stamp::resolve_reflector_at(&target, linerate_irtt::wire::PORT)
        .map_err(|why| Failure::Usage(format!("invalid value '{host}' for '<HOST>': {why}")))?;
    let session = Options::to(host, addr);
    let options = Options {
        rate_pps: call.settings.pps() as f64,
        duration: Some(Duration::from_secs_f64(args.time)),
        dscp: server.dscp,
        source: server.source(),
        report_every: Duration::from_secs_f64(args.measure.interval),
        same_clock: in_lab(&session),
        call: Some(call.clone()),
        ..session
    };
    let irtt = linerate_irtt::client::Ask {
        length: call.settings.codec.datagram_bytes() as usize,
        key: None,
    };
    stamp_run::run(
        &options,
        Some(irtt),
        args.output.print.json,
        &globals.storage,
    )
}
