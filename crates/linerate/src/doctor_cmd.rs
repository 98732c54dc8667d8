//! `linerate doctor [HOST]`: gathers this host's readings (and the path's, with HOST),
//! runs the rules (linerate_hostinfo::doctor) and prints the findings; `--apply` sets
//! the sysctls they name, printing each old value for undo.

use crate::cli::DoctorArgs;
use crate::failure::CommandResult;
use linerate_hostinfo::doctor::{apply_sysctls, diagnose, render_text, Facts};
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
    let facts = Facts::of_this_host(
        linerate_engine::sys::cpus(),
        path,
        args.rtt,
        args.target.map(|t| t as f64),
    );
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
        for change in changes {
            eprintln!("{}", change.words());
        }
    }
    Ok(())
}
