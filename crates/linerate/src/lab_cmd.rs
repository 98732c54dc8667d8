//! `linerate impair` and `linerate lab`: flag values into a path, and the lab's commands.

use crate::cli::{ImpairArgs, ImpairmentArgs, LabCommand, LabPathArgs, LabRunArgs};
use crate::failure::{Failure, Outcome};
use anyhow::Context;
use linerate_impair::lab::{self, Lab, LabError, UpOptions};
use linerate_impair::runner::{self, RunOptions};
use linerate_impair::spec::{self, LinkSpec, SpecError};
use linerate_model::{Impairment, PathFacts};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn usage(error: impl std::fmt::Display) -> anyhow::Error {
    Failure::Usage(error.to_string()).into()
}

/// Both directions' impairments from the flags; `rtt` (lab) sets half of it each way.
fn impairments(
    args: &ImpairmentArgs,
    rtt: Option<&str>,
) -> Result<(Impairment, Impairment), SpecError> {
    let mut directions = [Impairment::default(), Impairment::default()];
    if let Some(text) = rtt {
        let (a, b) = spec::split_pair("--rtt", text)?;
        if a != b {
            return Err(SpecError::Value {
                flag: "--rtt",
                value: text.into(),
                why: "is one round trip; give --delay A,B for different directions".into(),
            });
        }
        let ms = spec::parse_duration_ms("--rtt", a)?;
        for d in &mut directions {
            d.delay_ms = ms / 2.0;
        }
    }
    type Setter = fn(&mut Impairment, &'static str, &str) -> Result<(), SpecError>;
    let fields: [(&'static str, &Option<String>, Setter); 8] = [
        ("--delay", &args.delay, |d, f, v| {
            d.delay_ms = spec::parse_duration_ms(f, v)?;
            Ok(())
        }),
        ("--jitter", &args.jitter, |d, f, v| {
            d.jitter_ms = spec::parse_duration_ms(f, v)?;
            Ok(())
        }),
        ("--loss", &args.loss, |d, f, v| {
            d.loss_pct = spec::parse_percent(f, v)?;
            Ok(())
        }),
        ("--loss-burst", &args.loss_burst, |d, f, v| {
            d.loss_burst = Some(spec::parse_burst(f, v)?);
            Ok(())
        }),
        ("--reorder", &args.reorder, |d, f, v| {
            d.reorder_pct = spec::parse_percent(f, v)?;
            Ok(())
        }),
        ("--duplicate", &args.duplicate, |d, f, v| {
            d.duplicate_pct = spec::parse_percent(f, v)?;
            Ok(())
        }),
        ("--corrupt", &args.corrupt, |d, f, v| {
            d.corrupt_pct = spec::parse_percent(f, v)?;
            Ok(())
        }),
        ("--rate", &args.rate, |d, f, v| {
            d.rate_bps = Some(spec::parse_link_rate(f, v)?);
            Ok(())
        }),
    ];
    for (flag, value, set) in fields {
        if let Some(text) = value {
            let (a, b) = spec::split_pair(flag, text)?;
            set(&mut directions[0], flag, a)?;
            set(&mut directions[1], flag, b)?;
        }
    }
    if let Some(text) = &args.queue {
        let (a, b) = spec::split_pair("--queue", text)?;
        for (d, v) in directions.iter_mut().zip([a, b]) {
            let limit = spec::parse_queue("--queue", v)?;
            let Some(rate) = d.rate_bps else {
                return Err(SpecError::Value {
                    flag: "--queue",
                    value: text.clone(),
                    why: "needs --rate (the queue is the one before the bottleneck)".into(),
                });
            };
            d.queue_bytes = Some(limit.bytes_at(rate));
        }
    }
    if directions.iter().all(|d| d.loss_pct == 0.0) {
        if let Some(burst) = &args.loss_burst {
            return Err(SpecError::Value {
                flag: "--loss-burst",
                value: burst.clone(),
                why: "needs --loss (the long-run share of frames lost)".into(),
            });
        }
    }
    // A direction without loss has no bursts of it.
    for d in &mut directions {
        if d.loss_pct == 0.0 {
            d.loss_burst = None;
        }
    }
    let [forward, reverse] = directions;
    Ok((forward, reverse))
}

fn memory_limit(args: &ImpairmentArgs) -> anyhow::Result<u64> {
    let limit = linerate_model::units::parse_size(&args.memory)
        .map_err(|e| usage(format!("invalid --memory '{}': {}", args.memory, e.why)))?;
    if limit < 1 << 20 {
        return Err(usage(format!(
            "invalid --memory '{}': must be at least 1M",
            args.memory
        )));
    }
    Ok(limit)
}

/// The path and each direction's resolved settings.
fn resolve_path(
    emulator: &str,
    lab: Option<&str>,
    args: &ImpairmentArgs,
    rtt: Option<&str>,
) -> anyhow::Result<(PathFacts, LinkSpec, LinkSpec)> {
    let (mut forward, mut reverse) = impairments(args, rtt).map_err(usage)?;
    let limit = memory_limit(args)?;
    let forward_spec = LinkSpec::resolve("forward", &mut forward, limit).map_err(usage)?;
    let reverse_spec = LinkSpec::resolve("reverse", &mut reverse, limit).map_err(usage)?;
    let path = PathFacts {
        emulator: emulator.into(),
        lab: lab.map(str::to_string),
        forward,
        reverse,
        seed: args.seed.unwrap_or_else(rand_seed),
    };
    Ok((path, forward_spec, reverse_spec))
}

fn rand_seed() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = getrandom::getrandom(&mut bytes);
    u64::from_le_bytes(bytes) >> 16
}

fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, stop.clone()).context("installing a signal handler")?;
    }
    Ok(stop)
}

pub fn impair(args: &ImpairArgs) -> Outcome {
    let (path, forward, reverse) = match &args.path_json {
        Some(json) => {
            let mut path = PathFacts::from_json(json)
                .ok_or_else(|| usage("invalid --path-json: not a path document"))?;
            let limit = memory_limit(&args.impairment)?;
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
    };
    let stop = stop_on_signals()?;
    let mut out = std::io::stdout();
    match runner::run(&options, stop, &mut out) {
        Ok(_) => Ok(()),
        Err(error) => Err(usage(error)),
    }
}

fn lab_error(error: LabError) -> anyhow::Error {
    match error {
        LabError::Io(_) | LabError::Command { .. } | LabError::Emulator(_) => {
            anyhow::Error::new(error)
        }
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
    let buffers = match &path_args.buffers {
        None => None,
        Some(text) => {
            let bytes = linerate_model::units::parse_size(text)
                .map_err(|e| usage(format!("invalid --buffers '{text}': {}", e.why)))?;
            if !(64 * 1024..=1 << 30).contains(&bytes) {
                return Err(usage(format!(
                    "invalid --buffers '{text}': must be between 64K and 1G"
                )));
            }
            Some(bytes)
        }
    };
    let options = UpOptions {
        path: path.clone(),
        mtu: usize::from(path_args.mtu),
        buffers,
        exe: std::env::current_exe().context("finding this program's path")?,
    };
    lab::up(lab, &options).map_err(lab_error)?;
    Ok(path)
}

fn exit_status(status: std::process::ExitStatus) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Failure::Status(code.clamp(1, 255) as u8).into()),
        None => Err(Failure::Status(128 + status.signal().unwrap_or(0).clamp(0, 127) as u8).into()),
    }
}

pub fn run(command: &LabCommand) -> Outcome {
    match command {
        LabCommand::Up(args) => {
            let lab = Lab::new(&args.lab.name).map_err(lab_error)?;
            let path = up(&lab, &args.path)?;
            println!("lab '{}' is up: {}", lab.name(), path.summary());
            println!(
                "  client {} ({}), server {} ({}); the router runs the emulator",
                lab::CLIENT_V4,
                lab::CLIENT_V6,
                lab::SERVER_V4,
                lab::SERVER_V6
            );
            let name = if lab.name() == "lab" {
                String::new()
            } else {
                format!(" --name {}", lab.name())
            };
            println!("  linerate lab exec{name} server -- linerate serve &");
            println!("  linerate lab exec{name} client -- linerate stream server -t 30");
            println!("  linerate lab down{name}");
            Ok(())
        }
        LabCommand::Exec(args) => {
            let lab = Lab::new(&args.lab.name).map_err(lab_error)?;
            let mut command =
                lab::command_in(&lab, &args.host, &args.command).map_err(lab_error)?;
            let status = command.status().context("running the command")?;
            exit_status(status)
        }
        LabCommand::Status(args) => {
            let lab = Lab::new(&args.lab.name).map_err(lab_error)?;
            let path = lab.path().map_err(lab_error)?;
            let text = std::fs::read_to_string(lab.status_file())
                .with_context(|| format!("reading {}", lab.status_file().display()))?;
            let status: runner::Status = serde_json::from_str(&text)
                .with_context(|| format!("reading {}", lab.status_file().display()))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                println!("lab '{}': {}", lab.name(), path.summary());
                println!("{}", runner::summary(&status));
            }
            Ok(())
        }
        LabCommand::Down(args) => {
            let names = if args.all {
                lab::list()
            } else {
                vec![args.lab.name.clone()]
            };
            if names.is_empty() {
                println!("no labs on this machine");
            }
            for name in names {
                let lab = Lab::new(&name).map_err(lab_error)?;
                let removed = lab::down(&lab).map_err(lab_error)?;
                if removed.namespaces == 0 {
                    println!("no lab named '{name}'");
                } else {
                    println!(
                        "lab '{name}' removed: {} namespaces, {} processes ended",
                        removed.namespaces, removed.processes
                    );
                }
            }
            Ok(())
        }
        LabCommand::Run(args) => lab_run(args),
    }
}

/// Splits `--serve-args` as a shell would split plain words: whitespace separates, single
/// or double quotes keep a word together.
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!(
            "invalid --serve-args '{text}': a quote is not closed"
        ));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The port `linerate serve` will listen on with these arguments.
fn serve_port(words: &[String]) -> Result<u16, String> {
    let mut port = 5201;
    let mut iter = words.iter();
    while let Some(w) = iter.next() {
        let value = if w == "-p" || w == "--port" {
            iter.next().cloned()
        } else {
            w.strip_prefix("--port=").map(str::to_string)
        };
        if let Some(v) = value {
            port = v
                .parse()
                .map_err(|_| format!("invalid --serve-args: port '{v}' is not a number"))?;
        }
    }
    Ok(port)
}

fn lab_run(args: &LabRunArgs) -> Outcome {
    let serve_words = split_words(args.serve_args.as_deref().unwrap_or("")).map_err(usage)?;
    let port = serve_port(&serve_words).map_err(usage)?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("run{}", std::process::id()));
    let lab = Lab::new(&name).map_err(lab_error)?;
    // Signals are caught before anything is built, so a Ctrl-C at any point tears down.
    let stop = stop_on_signals()?;
    up(&lab, &args.path)?;
    let outcome = run_in_lab(&lab, args, &serve_words, port, &stop);
    let removed = lab::down(&lab);
    if let Err(error) = removed {
        eprintln!("linerate: warning: removing lab '{name}': {error}");
    }
    outcome
}

fn run_in_lab(
    lab: &Lab,
    args: &LabRunArgs,
    serve_words: &[String],
    port: u16,
    stop: &AtomicBool,
) -> Outcome {
    let exe = std::env::current_exe()
        .context("finding this program's path")?
        .display()
        .to_string();
    let mut serve_argv = vec![exe, "serve".to_string()];
    serve_argv.extend(serve_words.iter().cloned());
    let mut serve = lab::command_in(lab, "server", &serve_argv).map_err(lab_error)?;
    let log = std::fs::File::create(lab.log_file().with_file_name("serve.log"))?;
    serve.stdout(log.try_clone()?).stderr(log);
    lab::detach(&mut serve);
    let mut server = serve
        .spawn()
        .context("starting linerate serve in the lab")?;
    if !lab::wait_listening(lab, port, Duration::from_secs(10)).map_err(lab_error)? {
        let _ = server.kill();
        let log =
            std::fs::read_to_string(lab.log_file().with_file_name("serve.log")).unwrap_or_default();
        anyhow::bail!(
            "linerate serve did not listen on port {port} in the lab: {}",
            log.trim()
        );
    }
    let mut command = lab::command_in(lab, "client", &args.command).map_err(lab_error)?;
    let mut child = command
        .spawn()
        .with_context(|| format!("running {}", args.command.join(" ")))?;
    let mut interrupted_at: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop.load(Ordering::Relaxed) {
            match interrupted_at {
                None => {
                    interrupted_at = Some(Instant::now());
                    // SAFETY: signalling our own child by its PID.
                    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                }
                Some(at) if at.elapsed() > Duration::from_secs(3) => {
                    let _ = child.kill();
                }
                Some(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = server.kill();
    let _ = server.wait();
    if interrupted_at.is_some() {
        return Err(Failure::Status(130).into());
    }
    exit_status(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_args_split_like_a_shell() {
        assert_eq!(
            split_words(r#"--key "my lab.key"  --max-tests 4 -p '6000'"#).unwrap(),
            vec!["--key", "my lab.key", "--max-tests", "4", "-p", "6000"]
        );
        assert!(split_words("--key 'open").is_err());
        let words = split_words("--max-tests 4 --port 6001").unwrap();
        assert_eq!(serve_port(&words), Ok(6001));
        assert_eq!(serve_port(&[]), Ok(5201));
    }
}
