//! `linerate stamp TARGET`: a STAMP Session-Sender (linerate_stamp::sender) against any
//! reflector, its result printed, kept and shown as every other test's.

use crate::cli::StampArgs;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::stamp_run;
use linerate_model::clock::UnixTime;
use linerate_stamp::sender::{self, Options};
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
    let mut options = Options {
        target: args.target.clone(),
        addr,
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
        // In a lab (`lab run`, `lab exec` name the path they build), both ends are
        // network namespaces of this host: one clock.
        same_clock: args.same_clock
            || sender::is_local(addr.ip())
            || std::env::var_os(linerate_model::PATH_ENV).is_some(),
        ssid: linerate_stamp::random_ssid(),
        started_at: UnixTime::now().seconds(),
        wire: None,
    };
    if let Some(size) = args.size.filter(|_| !args.irtt) {
        options
            .pad_to(usize::from(size))
            .map_err(|why| Failure::Usage(format!("invalid value '{size}' for '--size': {why}")))?;
    }
    Ok(options)
}

pub fn run(args: &StampArgs, globals: &Globals) -> CommandResult {
    let irtt = args.irtt.then(|| linerate_irtt::client::Ask {
        length: args.size.map_or(0, usize::from),
        key: args.irtt_hmac_key_file.clone(),
    });
    stamp_run::run(&options(args)?, irtt, args.print.json, &globals.storage)
}
