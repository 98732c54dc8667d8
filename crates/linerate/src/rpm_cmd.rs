//! `linerate rpm TARGET`: responsiveness under working conditions against a server of the
//! draft (linerate_rpm::client), printed as networkQuality prints it, or as JSON.

use crate::cli::RpmArgs;
use crate::failure::{Failure, Outcome};
use anyhow::Context;
use linerate_rpm::client::{self, Leg, Options, RpmResult};
use std::io::IsTerminal;
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

fn trust(args: &RpmArgs) -> Result<Option<Arc<linerate_rpm::tls::ClientConfig>>, Failure> {
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

pub fn run(args: &RpmArgs) -> Outcome {
    let url = config_url(&args.target, args.http).map_err(Failure::Usage)?;
    let tls = trust(args)?;
    if url.starts_with("https://") && tls.is_none() {
        return Err(Failure::Usage(format!(
            "{url}: give --insecure (any certificate), --ca FILE or --pin SHA256 to check the server's certificate, or --http for cleartext"
        ))
        .into());
    }
    let mut options = Options::new(url, tls);
    options.leg_limit = std::time::Duration::from_secs_f64(args.time);
    options.max_connections = args.max_connections as usize;
    // Progress on a terminal, or beside text; JSON alone when piped.
    let show = !args.json || std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if show {
            eprintln!("linerate rpm: {line}");
        }
    };
    let result = client::run(&options, &mut progress).context("rpm")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", render(&result));
    }
    Ok(())
}

fn leg_line(leg: &Leg) -> String {
    let rpm = leg.rpm.map_or("-".into(), |r| {
        format!("{r:.0} RPM ({})", linerate_rpm::method::rpm_band(r))
    });
    let added = leg
        .added_latency_s
        .map_or("-".into(), |a| format!("{:+.1} ms", a * 1e3));
    let settled = if leg.goodput_saturated && leg.rpm_saturated {
        ""
    } else {
        " (time limit: not settled)"
    };
    format!(
        "{:<9} {:>9.2} Mbit/s over {:>2} connections, {rpm}, added latency {added}{settled}\n",
        leg.direction,
        leg.capacity_bps / 1e6,
        leg.connections
    )
}

/// The result as networkQuality prints it: capacities, responsiveness, idle latency, the
/// grade.
pub fn render(r: &RpmResult) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "idle latency {:.2} ms (a new connection: {:.2} ms)\n",
        r.idle_latency_s * 1e3,
        r.idle_connect_s * 1e3
    ));
    out.push_str(&leg_line(&r.download));
    out.push_str(&leg_line(&r.upload));
    if let Some(rpm) = r.rpm {
        out.push_str(&format!(
            "responsiveness {rpm:.0} RPM ({})\n",
            r.band.unwrap_or("-")
        ));
    }
    if let (Some(added), Some(grade)) = (r.added_latency_s, r.grade) {
        out.push_str(&format!(
            "bufferbloat grade {grade} (+{:.1} ms under load)\n",
            added.max(0.0) * 1e3
        ));
    }
    out
}
