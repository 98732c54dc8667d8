//! How a command ends badly, and the one place that turns it into an exit code and a
//! line on stderr: 2 for the user's mistakes, 1 for a run that could not finish or whose
//! result (already printed) says part of it failed.

use clap::error::ErrorKind;
use std::process::ExitCode;

/// How a command failed, when that decides the exit code; carried inside the command's
/// `anyhow::Error` (anything else that fails a command could not run or finish, exit 1).
#[derive(Debug)]
pub enum Failure {
    /// A mistake in what the user asked: one line naming the value (exit 2).
    Usage(String),
    /// A flag clap refused, or help and version that clap prints.
    Flags(clap::Error),
    /// The command ran and printed its result, which says part of it failed (exit 1).
    Partial(String),
    /// A command run for the user (`lab exec`, `lab run`) ended with this status, which
    /// becomes ours; it said why itself.
    Status(u8),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(message) | Failure::Partial(message) => f.write_str(message),
            Failure::Flags(error) => write!(f, "{error}"),
            Failure::Status(code) => write!(f, "exit status {code}"),
        }
    }
}

impl std::error::Error for Failure {}

/// What a command returns.
pub type Outcome = anyhow::Result<()>;

/// The exit code of `outcome`, after saying why on stderr. With `json`, a command that
/// could not finish also prints `{"error": ...}` on stdout, so a script reading the
/// document gets one either way.
pub fn exit_code(outcome: Outcome, json: bool) -> ExitCode {
    let Err(error) = outcome else {
        return ExitCode::SUCCESS;
    };
    match error.downcast_ref::<Failure>() {
        Some(Failure::Usage(message)) => {
            eprintln!("linerate: error: {message} (see 'linerate --help')");
            ExitCode::from(2)
        }
        Some(Failure::Flags(error)) => flags(error),
        Some(Failure::Status(code)) => ExitCode::from(*code),
        Some(Failure::Partial(message)) => {
            eprintln!("linerate: error: {message}");
            ExitCode::from(1)
        }
        None => {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let message = format!("{error:#}");
            if json {
                println!("{}", serde_json::json!({ "error": message }));
            }
            eprintln!("linerate: error: {message}");
            ExitCode::from(1)
        }
    }
}

/// Help and version go to stdout with exit 0; a mistake is one line on stderr, exit 2.
fn flags(error: &clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            ExitCode::from(2)
        }
        _ => {
            let rendered = error.render().to_string();
            let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut first = lines
                .next()
                .unwrap_or("error: invalid arguments")
                .to_string();
            // "the following required arguments were not provided:" names them below.
            if first.ends_with(':') {
                if let Some(next) = lines.next() {
                    first = format!("{first} {next}");
                }
            }
            eprintln!("linerate: {first} (see 'linerate --help')");
            ExitCode::from(2)
        }
    }
}
