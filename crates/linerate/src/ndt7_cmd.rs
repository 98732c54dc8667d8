//! `linerate ndt7 TARGET`: M-Lab's speed test against any ndt7 server
//! (linerate_ndt7::client), its certificate checked as the user says.

use crate::cli::Ndt7Args;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_model::ndt7::Subtest;
use linerate_ndt7::client::{Options, Target};
use std::sync::Arc;

pub fn run(args: &Ndt7Args, globals: &Globals) -> CommandResult {
    let target = Target::parse(&args.target, args.cleartext)
        .map_err(|e| Failure::Usage(format!("invalid value for '<TARGET>': {e}")))?;
    let trust = if args.insecure {
        Some(linerate_rpm::tls::any_certificate())
    } else if let Some(ca) = &args.ca {
        let trust = linerate_tls::verify::Trust::from_ca_file(ca)
            .map_err(|e| Failure::Usage(format!("invalid value for '--ca': {e}")))?;
        Some(linerate_rpm::tls::checked(&trust))
    } else {
        args.pin.as_ref().map(|pin| {
            linerate_rpm::tls::checked(&linerate_tls::verify::Trust::Pinned(pin.to_lowercase()))
        })
    };
    let tls = match trust.transpose().map_err(|e| Failure::Usage(format!("TLS: {e}")))? {
        // The upgrade is HTTP/1.1's: no h2 by ALPN.
        Some(config) => {
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(Arc::new(config))
        }
        None if target.tls => {
            return Err(Failure::Usage(format!(
                "{}: give --insecure (any certificate), --ca FILE or --pin SHA256 to check the server's certificate, or --cleartext for ws://",
                args.target
            ))
            .into())
        }
        None => None,
    };
    let subtests = match (args.download, args.upload) {
        (true, _) => vec![Subtest::Download],
        (_, true) => vec![Subtest::Upload],
        _ => vec![Subtest::Download, Subtest::Upload],
    };
    let options = Options {
        target,
        subtests,
        tls,
        upload_runtime: std::time::Duration::from_secs_f64(linerate_model::ndt7::RUNTIME_S),
    };
    linerate_campaign::ndt7_run::run(&options, &args.target, args.print.json, &globals.storage)
}
