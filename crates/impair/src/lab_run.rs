//! A command run on a lab's client while `linerate serve` runs on its server (`linerate
//! lab run`): the server started and waited for, the command supervised, both ended on a
//! signal, so that the caller can take the lab down after.

// A driver: it supervises processes in real time.
#![allow(clippy::disallowed_methods)]

use crate::lab::{self, Lab, LabError};
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How the client's command ended.
#[derive(Debug)]
pub enum RunEnd {
    /// It exited by itself, with this status.
    Exited(ExitStatus),
    /// A signal to us stopped it (SIGTERM, then SIGKILL after 3 s).
    Interrupted,
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
pub fn serve_port(words: &[String]) -> Result<u16, String> {
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

/// Runs `command` on the lab's client while `exe serve SERVE_WORDS` runs on its server
/// (listening on `port`); `stop` ends the command. The server's output goes to
/// `serve.log` beside the lab's log.
pub fn run_beside_server(
    lab: &Lab,
    exe: &Path,
    serve_words: &[String],
    port: u16,
    command: &[String],
    stop: &AtomicBool,
) -> Result<RunEnd, LabError> {
    let mut serve_argv = vec![exe.display().to_string(), "serve".to_string()];
    serve_argv.extend(serve_words.iter().cloned());
    let mut serve = lab::command_in(lab, "server", &serve_argv)?;
    let log_path = lab.log_file().with_file_name("serve.log");
    let log = std::fs::File::create(&log_path)?;
    serve.stdout(log.try_clone()?).stderr(log);
    lab::detach(&mut serve);
    let mut server = serve.spawn().map_err(|e| LabError::Command {
        command: serve_argv.join(" "),
        stderr: e.to_string(),
    })?;
    if !lab::wait_listening(lab, port, Duration::from_secs(10))? {
        let _ = server.kill();
        let _ = server.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        return Err(LabError::NotListening {
            port,
            log: log.trim().to_string(),
        });
    }
    let outcome = supervise(lab, command, stop);
    let _ = server.kill();
    let _ = server.wait();
    outcome
}

/// Runs `command` on the lab's client until it exits, or until `stop`: then SIGTERM, and
/// SIGKILL 3 s later.
fn supervise(lab: &Lab, command: &[String], stop: &AtomicBool) -> Result<RunEnd, LabError> {
    let mut child = lab::command_in(lab, "client", command)?
        .spawn()
        .map_err(|e| LabError::Command {
            command: command.join(" "),
            stderr: e.to_string(),
        })?;
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
    Ok(match interrupted_at {
        Some(_) => RunEnd::Interrupted,
        None => RunEnd::Exited(status),
    })
}

/// Runs `command` (a command in a lab host) in the foreground and passes on SIGINT,
/// SIGTERM and SIGHUP sent to this process, then waits for it: a `lab exec` that is
/// stopped stops what it runs, instead of leaving it behind under PID 1.
pub fn run_forwarding_signals(command: &mut std::process::Command) -> Result<ExitStatus, LabError> {
    const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    let flags: Vec<std::sync::Arc<AtomicBool>> = FORWARDED
        .iter()
        .map(|_| std::sync::Arc::new(AtomicBool::new(false)))
        .collect();
    let mut ids = Vec::new();
    for (signal, flag) in FORWARDED.iter().zip(&flags) {
        ids.push(signal_hook::flag::register(*signal, flag.clone())?);
    }
    let outcome = (|| {
        let mut child = command.spawn()?;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            for (signal, flag) in FORWARDED.iter().zip(&flags) {
                if flag.swap(false, Ordering::Relaxed) {
                    // SAFETY: signalling our own child by its PID.
                    unsafe { libc::kill(child.id() as i32, *signal) };
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })();
    // Later signals take their default course again.
    for id in ids {
        signal_hook::low_level::unregister(id);
    }
    outcome.map_err(LabError::Io)
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
        assert_eq!(serve_port(&["--port=7000".to_string()]), Ok(7000));
        assert_eq!(serve_port(&[]), Ok(5201));
        assert!(serve_port(&["-p".into(), "x".into()]).is_err());
    }
}
