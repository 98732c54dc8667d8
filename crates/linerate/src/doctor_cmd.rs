//! `linerate doctor [HOST]`: gathers this host's readings (and the path's, with HOST),
//! runs the rules (linerate_hostinfo::doctor) and prints the findings; `--apply` sets
//! the sysctls they name, printing each old value for undo.

use crate::cli::DoctorArgs;
use crate::failure::CommandResult;
use linerate_hostinfo::doctor::{apply_sysctls, diagnose, render_text, Facts, SysctlChange};
use linerate_hostinfo::observe::{read_settings, HostReading};
use linerate_hostinfo::source::Root;
use linerate_model::observe::Diagnosis;
use linerate_proto::auth::Key;
use std::time::Duration;

pub fn run(args: &DoctorArgs, key: Option<Key>) -> CommandResult {
    let path = match &args.host {
        Some(host) => {
            let mut path =
                linerate_drivers::doctor::probe_path(host, args.port, Duration::from_secs(3))
                    .map_err(anyhow::Error::msg)?;
            if !args.print.json {
                eprintln!("linerate doctor: probing the path's loss for 2 s ...");
            }
            let address = linerate_campaign::test::resolve_host(host, args.port)?;
            match linerate_drivers::doctor::probe_loss(address, key) {
                Ok(probe) => path.loss = Some(probe),
                Err(why) => path.loss_unprobed = Some(why),
            }
            Some(path)
        }
        None => None,
    };
    let root = Root::live();
    // Half a second of the CPUs while doctor runs nothing: what other work takes.
    let window = Duration::from_millis(500);
    let before = linerate_hostinfo::CpuSnapshot::read().ok();
    std::thread::sleep(window);
    let after = linerate_hostinfo::CpuSnapshot::read().ok();
    let others_busy_pct = before
        .zip(after)
        .map(|(a, b)| linerate_hostinfo::usage(&a, &b, Duration::ZERO, window).busy_pct);
    let facts = Facts {
        settings: read_settings(&root),
        reading: HostReading::read(&root),
        cpus: linerate_engine::sys::cpus(),
        path,
        assumed_rtt_ms: args.rtt,
        target_bps: args.target.map(|t| t as f64),
        others_busy_pct,
    };
    let diagnosis = Diagnosis {
        target_bps: facts.target_bps(),
        findings: diagnose(&facts),
        path: facts.path.clone(),
    };
    if args.print.json {
        println!("{}", serde_json::to_string_pretty(&diagnosis)?);
    } else {
        print!("{}", render_text(&diagnosis, &facts, args.apply));
    }
    if args.apply {
        let changes = apply_sysctls(&diagnosis).map_err(anyhow::Error::msg)?;
        if changes.is_empty() {
            eprintln!("linerate doctor: no sysctl to set");
        }
        for SysctlChange { name, old, new } in changes {
            match old {
                Some(old) => {
                    eprintln!("{name}: '{old}' -> '{new}'   (undo: sysctl -w {name}='{old}')")
                }
                None => eprintln!(
                    "{name}: not set: it is the host's, not this network namespace's; on the host: sysctl -w {name}='{new}'"
                ),
            }
        }
    }
    Ok(())
}
