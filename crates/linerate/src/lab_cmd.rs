//! `linerate impair` and `linerate lab`: flag values into a path, and the lab's commands.

use crate::cli::{ImpairArgs, ImpairmentArgs, LabCommand, LabPathArgs, LabRunArgs};
use crate::failure::{CommandResult, Failure};
use anyhow::Context;
use linerate_impair::lab::{self, Lab, LabError, UpOptions};
use linerate_impair::lab_run::{self, RunEnd};
use linerate_impair::path::{self, PathAsk};
use linerate_impair::runner::{self, RunOptions};
use linerate_impair::spec::{DirectionTexts, LinkSpec};
use linerate_model::PathFacts;
use std::time::Duration;

fn usage(error: impl std::fmt::Display) -> anyhow::Error {
    Failure::Usage(error.to_string()).into()
}

/// The flags' values, for the emulator's spec to read.
fn texts(args: &ImpairmentArgs) -> DirectionTexts {
    DirectionTexts {
        delay: args.delay.clone(),
        jitter: args.jitter.clone(),
        loss: args.loss.clone(),
        loss_burst: args.loss_burst.clone(),
        reorder: args.reorder.clone(),
        duplicate: args.duplicate.clone(),
        corrupt: args.corrupt.clone(),
        rate: args.rate.clone(),
        queue: args.queue.clone(),
        remark: args.remark.clone(),
        aqm: args.aqm.clone(),
        ecn: args.ecn,
    }
}

/// The path the flags ask for, resolved by the emulator's spec.
fn resolve_path(
    emulator: &str,
    lab: Option<&str>,
    args: &ImpairmentArgs,
    rtt: Option<&str>,
) -> anyhow::Result<(PathFacts, LinkSpec, LinkSpec)> {
    let ask = PathAsk {
        texts: texts(args),
        rtt,
        memory: &args.memory,
        offloads: args.offloads,
        seed: args.seed.unwrap_or_else(rand_seed),
        threads: args.threads,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    path::resolve_path(emulator, lab, &ask).map_err(usage)
}

fn rand_seed() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::getrandom(&mut bytes);
    u64::from_le_bytes(bytes) >> 16
}

pub fn impair(args: &ImpairArgs) -> CommandResult {
    let (path, forward, reverse) = match &args.path_json {
        Some(json) => {
            let mut path = PathFacts::from_json(json)
                .ok_or_else(|| usage("invalid --path-json: not a path document"))?;
            let limit = path::memory_limit(&args.impairment.memory).map_err(usage)?;
            let forward = LinkSpec::resolve("forward", &mut path.forward, limit).map_err(usage)?;
            let reverse = LinkSpec::resolve("reverse", &mut path.reverse, limit).map_err(usage)?;
            (path, forward, reverse)
        }
        None => resolve_path("impair", None, &args.impairment, None)?,
    };
    if let Some(t) = args.time {
        if !(t > 0.0 && t.is_finite()) {
            return Err(usage(format!("invalid -t/--time '{t}': must be above 0")));
        }
    }
    let options = RunOptions {
        interfaces: [args.between[0].clone(), args.between[1].clone()],
        path,
        forward,
        reverse,
        duration: args.time.map(Duration::from_secs_f64),
        quiet: args.quiet,
        status_file: args.status_file.clone(),
        frame_log: args.frame_log.clone(),
    };
    let stop = linerate_campaign::cancel::on_signals_and_hangup()?;
    let mut out = std::io::stdout();
    match runner::run(&options, stop, &mut out) {
        Ok(_) => Ok(()),
        Err(error) => Err(usage(error)),
    }
}

fn lab_error(error: LabError) -> anyhow::Error {
    match error {
        LabError::Io(_)
        | LabError::Command { .. }
        | LabError::Emulator(_)
        | LabError::NotListening { .. } => anyhow::Error::new(error),
        _ => usage(error),
    }
}

fn up(lab: &Lab, path_args: &LabPathArgs) -> anyhow::Result<PathFacts> {
    let (path, _, _) = resolve_path(
        "lab",
        Some(lab.name()),
        &path_args.impairment,
        path_args.rtt.as_deref(),
    )?;
    let options = UpOptions {
        path: path.clone(),
        mtu: usize::from(path_args.mtu),
        buffers: path_args.buffers,
        receivers: path_args.receivers,
        frame_log: path_args.frame_log,
        exe: std::env::current_exe().context("finding this program's path")?,
    };
    lab::up(lab, &options).map_err(lab_error)?;
    Ok(path)
}

fn exit_status(status: std::process::ExitStatus) -> CommandResult {
    use std::os::unix::process::ExitStatusExt;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Failure::Status(code.clamp(1, 255) as u8).into()),
        None => Err(Failure::Status(128 + status.signal().unwrap_or(0).clamp(0, 127) as u8).into()),
    }
}

pub fn run(command: &LabCommand) -> CommandResult {
    match command {
        LabCommand::Up(args) => {
            let lab = Lab::new(&args.lab.name).map_err(lab_error)?;
            let path = up(&lab, &args.path)?;
            print!("{}", lab::up_text(&lab, &path, args.path.receivers));
            Ok(())
        }
        LabCommand::Exec(args) => {
            let lab = Lab::new(&args.lab.name).map_err(lab_error)?;
            let argv = this_binary_for_linerate(&args.command)?;
            let mut command = lab::command_in(&lab, &args.host, &argv).map_err(lab_error)?;
            let status = lab_run::run_forwarding_signals(&mut command).map_err(lab_error)?;
            exit_status(status)
        }
        LabCommand::Status(args) => {
            let lab = Lab::new(&args.lab.name).map_err(lab_error)?;
            let path = lab.path().map_err(lab_error)?;
            let status = lab.status().map_err(lab_error)?;
            if args.print.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                println!("lab '{}': {}", lab.name(), path.summary());
                println!("{}", runner::summary(&status));
                if lab.frame_log_file().exists() {
                    println!("each frame's fate: {}", lab.frame_log_file().display());
                }
            }
            Ok(())
        }
        LabCommand::Down(args) => {
            let names = if args.all {
                lab::list()
            } else {
                vec![args.lab.name.clone()]
            };
            lab::down_each(&names, &mut |line| println!("{line}")).map_err(lab_error)
        }
        LabCommand::Run(args) => lab_run(args),
    }
}

fn lab_run(args: &LabRunArgs) -> CommandResult {
    let serve_words =
        lab_run::split_words(args.serve_args.as_deref().unwrap_or("")).map_err(usage)?;
    let port = lab_run::serve_port(&serve_words).map_err(usage)?;
    let exe = std::env::current_exe().context("finding this program's path")?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("run{}", std::process::id()));
    let lab = Lab::new(&name).map_err(lab_error)?;
    // Signals are caught before anything is built, so a Ctrl-C at any point tears down.
    let stop = linerate_campaign::cancel::on_signals_and_hangup()?;
    up(&lab, &args.path)?;
    let command = this_binary_for_linerate(&args.command)?;
    let outcome = lab_run::run_beside_server(&lab, &exe, &serve_words, port, &command, &stop);
    let succeeded = matches!(&outcome, Ok(RunEnd::Exited(status)) if status.success());
    for line in lab::down_after_run(&lab, args.name.is_some(), succeeded) {
        eprintln!("linerate: {line}");
    }
    match outcome.map_err(lab_error)? {
        RunEnd::Exited(status) => exit_status(status),
        RunEnd::Interrupted => Err(Failure::Status(130).into()),
    }
}

/// A command that names `linerate` runs this very binary, so that a lab works from a
/// build that is not on PATH (`cargo run -- lab run -- linerate stream server`).
fn this_binary_for_linerate(argv: &[String]) -> anyhow::Result<Vec<String>> {
    let mut argv = argv.to_vec();
    if argv.first().is_some_and(|program| program == "linerate") {
        let exe = std::env::current_exe().context("finding this program's path")?;
        argv[0] = exe.display().to_string();
    }
    Ok(argv)
}
