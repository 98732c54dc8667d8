//! `linerate ndt7 TARGET`: M-Lab's speed test against any ndt7 server
//! (linerate_ndt7::client), its certificate checked as the user says.

use crate::cli::Ndt7Args;
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use linerate_model::ndt7::Subtest;
use linerate_ndt7::client::{Options, Target};
use std::sync::Arc;

/// Where the system keeps the CA certificates it trusts (Debian's ca-certificates).
const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub fn run(args: &Ndt7Args, globals: &Globals) -> CommandResult {
    let locate = args.locate.clone().or_else(|| {
        args.mlab
            .then(|| linerate_model::ndt7::MLAB_LOCATE_URL.to_string())
    });
    let tls = client_tls(args, locate.is_some())?;
    let (target, label) = match (&locate, &args.target) {
        (Some(url), _) => {
            let servers = linerate_ndt7::client::locate(url, tls.clone(), args.cleartext)
                .map_err(|e| anyhow::anyhow!("locating a server: {e:#}"))?;
            let nearest = servers[0].clone();
            let label = nearest.machine.clone();
            eprintln!(
                "linerate ndt7: the locate service offers {}",
                nearest.describe()
            );
            let target = Target::located(nearest).map_err(|e| anyhow::anyhow!("{e}"))?;
            (target, label)
        }
        (None, Some(text)) => {
            let target = Target::parse(text, args.cleartext)
                .map_err(|e| Failure::Usage(format!("invalid value for '<TARGET>': {e}")))?;
            (target, text.clone())
        }
        (None, None) => {
            return Err(Failure::Usage("give a TARGET, or --mlab".into()).into());
        }
    };
    if target.tls && tls.is_none() {
        return Err(Failure::Usage(format!(
            "{label}: give --insecure (any certificate), --ca FILE or --pin SHA256 to check the server's certificate, or --cleartext for ws://"
        ))
        .into());
    }
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
    linerate_campaign::ndt7_run::run(&options, &label, args.print.json, &globals.storage)
}

/// The TLS client configuration the user's flags ask for; with `located` (a located
/// public server) and none of them, the system's CA certificates. The upgrade and the
/// locate request are HTTP/1.1's: no h2 by ALPN.
fn client_tls(
    args: &Ndt7Args,
    located: bool,
) -> Result<Option<Arc<linerate_rpm::tls::ClientConfig>>, anyhow::Error> {
    let mut config = crate::rpm_cmd::client_tls(&args.trust)?;
    if config.is_none() && located {
        let trust = linerate_tls::verify::Trust::from_ca_file(std::path::Path::new(SYSTEM_CA_FILE))
            .map_err(|e| {
                Failure::Usage(format!(
                    "--mlab checks certificates against {SYSTEM_CA_FILE} ({e}): install ca-certificates, or give --ca FILE"
                ))
            })?;
        let system =
            linerate_rpm::tls::checked(&trust).map_err(|e| Failure::Usage(format!("TLS: {e}")))?;
        config = Some(system);
    }
    Ok(config.map(|config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }))
}
