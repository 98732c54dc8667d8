//! `linerate run` and `linerate profile`: profiles read, checked and run.

use crate::cli::{ProfileCommand, RunArgs, SetArgs};
use crate::failure::{CommandResult, Failure};
use crate::Globals;
use anyhow::Result;
use linerate_campaign::cancel;
use linerate_campaign::sink::{self, TextSink};
use linerate_drivers::profile::controller::{self, RunOptions};
use linerate_profile::{toml_format, Format, Profile, Vars};
use linerate_report::document::Document;
use std::time::Duration;

/// A profile that does not read is a usage error: one line naming file, line and value.
fn load(path: &std::path::Path, set: &SetArgs) -> Result<(Profile, Format)> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("cannot read profile {name}: {e}")))?;
    let vars = Vars::new(set.set.iter().cloned().collect());
    let parsed =
        linerate_profile::parse(&name, &text, &vars).map_err(|e| Failure::Usage(e.to_string()))?;
    for note in &parsed.notes {
        eprintln!("linerate: note: {note}");
    }
    let (mut profile, format) = (parsed.profile, parsed.format);
    // The files sendfile operations send are this host's, listed before anything runs.
    linerate_drivers::profile::files::find(&mut profile)
        .map_err(|e| Failure::Usage(format!("{name}: {e}")))?;
    // Each host gets its groups in one request, which its agent bounds: said here first.
    let mut hosts: Vec<&Option<String>> = profile.groups.iter().map(|g| &g.host).collect();
    hosts.sort();
    hosts.dedup();
    for host in hosts {
        let groups: Vec<_> = profile.groups.iter().filter(|g| g.host == *host).collect();
        linerate_profile::budget::check(&groups).map_err(|e| {
            let on = host.as_deref().unwrap_or("this host");
            Failure::Usage(format!("{name}: the groups for {on}: {e}"))
        })?;
    }
    Ok((profile, format))
}

pub fn run(args: &RunArgs, globals: &Globals) -> CommandResult {
    let (profile, format) = load(&args.profile, &args.set)?;
    let store = globals.storage.open_for_run()?;
    let stop = cancel::on_signals()?;
    let options = RunOptions {
        lead: Duration::from_secs_f64(args.lead),
        control_timeout: Duration::from_secs_f64(args.control_timeout),
        limit: args.limit.map(Duration::from_secs_f64),
        log: true,
        key: globals.key.clone(),
        ..RunOptions::default()
    };
    let mut report = controller::run(&profile, &options, &stop)?;
    report.config.source = args.profile.display().to_string();
    report.config.format = format.name().into();
    report.config.set = args.set.set.iter().cloned().collect();
    let complete = report.summary.complete;
    let document = Document::Profile(Box::new(report));
    let text = TextSink::new(std::io::stdout(), args.format);
    sink::standard(args.print.json, text, store).finish_document(&document)?;
    if !complete {
        return Err(Failure::Partial("the run is incomplete (see above)".into()).into());
    }
    Ok(())
}

pub fn profile(command: &ProfileCommand) -> CommandResult {
    match command {
        ProfileCommand::Convert(args) => {
            let (profile, _) = load(&args.profile, &args.set)?;
            print!("{}", toml_format::to_toml(&profile));
        }
        ProfileCommand::Check(args) => {
            let (profile, format) = load(&args.profile, &args.set)?;
            println!(
                "{}: profile '{}' ({}), {} group(s), {} thread(s)",
                args.profile.display(),
                profile.name,
                format.name(),
                profile.groups.len(),
                profile.total_threads()
            );
            for group in &profile.groups {
                println!(
                    "  group '{}': {} thread(s) on {}, {} transaction(s)",
                    group.name,
                    group.threads,
                    group.host.as_deref().unwrap_or("this host"),
                    group.transactions.len()
                );
            }
        }
    }
    Ok(())
}
