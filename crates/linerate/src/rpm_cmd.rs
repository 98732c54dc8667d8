//! `linerate rpm TARGET`: responsiveness under working conditions against a server of the
//! draft (linerate_rpm::client), printed as networkQuality prints it, or as JSON.

use crate::cli::{RpmArgs, TrustArgs};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_campaign::rpm_run;
use linerate_rpm::client::Options;
use std::sync::Arc;

/// TARGET as the configuration's URL: a URL as it is, HOST[:PORT] at https (or http with
/// `--http`) `/.well-known/nq`.
pub fn config_url(target: &str, cleartext: bool) -> Result<String, String> {
    if target.starts_with("http://") || target.starts_with("https://") {
        return target
            .parse::<linerate_rpm::Uri>()
            .map(|_| target.to_string())
            .map_err(|e| format!("invalid value '{target}' for '<TARGET>': {e}"));
    }
    if target.is_empty() || target.contains('/') || target.contains(char::is_whitespace) {
        return Err(format!(
            "invalid value '{target}' for '<TARGET>': give HOST[:PORT] or a URL"
        ));
    }
    let scheme = if cleartext { "http" } else { "https" };
    Ok(format!("{scheme}://{target}/.well-known/nq"))
}

/// The TLS client configuration `--insecure`, `--ca` or `--pin` asks for; `None` when
/// none was given.
pub fn client_tls(
    args: &TrustArgs,
) -> Result<Option<Arc<linerate_rpm::tls::ClientConfig>>, Failure> {
    let config = if args.insecure {
        linerate_rpm::tls::any_certificate()
    } else if let Some(ca) = &args.ca {
        let trust = linerate_tls::verify::Trust::from_ca_file(ca)
            .map_err(|e| Failure::Usage(format!("invalid value for '--ca': {e}")))?;
        linerate_rpm::tls::checked(&trust)
    } else if let Some(pin) = &args.pin {
        linerate_rpm::tls::checked(&linerate_tls::verify::Trust::Pinned(pin.to_lowercase()))
    } else {
        return Ok(None);
    };
    config
        .map(Some)
        .map_err(|e| Failure::Usage(format!("TLS: {e}")))
}

pub fn run(args: &RpmArgs, globals: &Globals) -> CommandResult {
    let url = config_url(&args.target, args.http).map_err(Failure::Usage)?;
    let tls = client_tls(&args.trust)?;
    if url.starts_with("https://") && tls.is_none() {
        return Err(Failure::Usage(format!(
            "{url}: give --insecure (any certificate), --ca FILE or --pin SHA256 to check the server's certificate, or --http for cleartext"
        ))
        .into());
    }
    let mut options = Options::new(url, tls);
    options.target = args.target.clone();
    options.leg_limit = std::time::Duration::from_secs_f64(args.time);
    options.max_connections = args.max_connections as usize;
    options.bind = args.source.bind;
    options.bind_device = args.source.bind_dev.clone();
    rpm_run::run(&options, args.print.json, &globals.storage)
}
