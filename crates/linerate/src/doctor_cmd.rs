//! `linerate doctor [HOST]`: gathers this host's readings (and the path's, with HOST),
//! runs the rules (linerate_hostinfo::doctor) and prints the findings; `--apply` sets
//! the sysctls they name, printing each old value for undo.

use crate::cli::DoctorArgs;
use crate::failure::Outcome;
use anyhow::{bail, Context};
use linerate_hostinfo::doctor::{diagnose, Facts};
use linerate_hostinfo::observe::{read_settings, HostReading};
use linerate_hostinfo::source::Root;
use linerate_model::observe::Diagnosis;
use std::time::Duration;

pub fn run(args: &DoctorArgs) -> Outcome {
    let path = match &args.host {
        Some(host) => Some(
            linerate_drivers::doctor::probe_path(host, args.port, Duration::from_secs(3))
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let root = Root::live();
    let facts = Facts {
        settings: read_settings(&root),
        reading: HostReading::read(&root),
        cpus: linerate_engine::sys::cpus(),
        path,
        assumed_rtt_ms: args.rtt,
        target_bps: args.target.map(|t| t as f64),
    };
    let diagnosis = Diagnosis {
        target_bps: facts.target_bps(),
        findings: diagnose(&facts),
        path: facts.path.clone(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diagnosis)?);
    } else {
        print!("{}", render(&diagnosis, &facts, args));
    }
    if args.apply {
        apply(&diagnosis)?;
    }
    Ok(())
}

fn render(diagnosis: &Diagnosis, facts: &Facts, args: &DoctorArgs) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = write!(out, "linerate doctor: this host, {} CPUs", facts.cpus);
    match &diagnosis.path {
        Some(path) => {
            let _ = writeln!(
                out,
                "; the path to {}: round trip {:.2} ms{}{}",
                path.target,
                path.rtt_ms,
                path.interface
                    .as_ref()
                    .map_or(String::new(), |i| format!(", out by {i}")),
                match (path.interface_mtu, path.path_mtu) {
                    (Some(mtu), Some(pmtu)) => format!(" (MTU {mtu}, path MTU {pmtu})"),
                    _ => String::new(),
                }
            );
        }
        None => {
            let _ = writeln!(out);
        }
    }
    if diagnosis.path.is_none() && args.rtt.is_none() {
        let _ = writeln!(
            out,
            "Windows are not judged: name a HOST running 'linerate serve', or give --rtt MS."
        );
    } else {
        let _ = writeln!(
            out,
            "Windows are held against {:.1} Gbit/s{}.",
            diagnosis.target_bps / 1e9,
            if args.target.is_some() {
                " (--target)"
            } else {
                ""
            }
        );
    }
    if diagnosis.findings.is_empty() {
        let _ = writeln!(out, "Nothing found that is likely to hold a result down.");
        return out;
    }
    for finding in &diagnosis.findings {
        let _ = writeln!(
            out,
            "\n{}. {}: {}",
            finding.rank, finding.topic, finding.finding
        );
        for evidence in &finding.evidence {
            let _ = writeln!(out, "   evidence: {evidence}");
        }
        let _ = writeln!(out, "   change:   {}", finding.command);
        let _ = writeln!(out, "   moves:    {}", finding.effect);
    }
    if !args.apply {
        let sysctls = diagnosis
            .findings
            .iter()
            .filter(|f| !f.sysctls.is_empty())
            .count();
        let _ = writeln!(
            out,
            "\nNothing was changed.{}",
            if sysctls > 0 {
                " --apply sets the sysctls above and prints the old values for undo."
            } else {
                ""
            }
        );
    }
    out
}

/// Sets every sysctl the findings name; prints old and new values and the undo command.
fn apply(diagnosis: &Diagnosis) -> Outcome {
    let sysctls: Vec<&(String, String)> =
        diagnosis.findings.iter().flat_map(|f| &f.sysctls).collect();
    if sysctls.is_empty() {
        eprintln!("linerate doctor: no sysctl to set");
        return Ok(());
    }
    for (name, value) in sysctls {
        // Names come from the rules, never from input: dotted sysctl names only.
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
        {
            bail!("refusing an unexpected sysctl name '{name}'");
        }
        let file = format!("/proc/sys/{}", name.replace('.', "/"));
        let old = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {name}"))?
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        std::fs::write(&file, value).with_context(|| format!("setting {name} (needs root)"))?;
        eprintln!("{name}: '{old}' -> '{value}'   (undo: sysctl -w {name}='{old}')");
    }
    Ok(())
}
