//! How a command ends badly, and the one place that turns it into an exit code and a
//! line on stderr: 2 for the user's mistakes, 1 for a run that could not finish or whose
//! result (already printed) says part of it failed.

use clap::error::ErrorKind;
use std::process::ExitCode;

pub use linerate_campaign::failure::Failure;

/// A flag clap refused, or help and version that clap prints.
#[derive(Debug)]
pub struct FlagsRefused(pub clap::Error);

impl std::fmt::Display for FlagsRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for FlagsRefused {}

/// What a command returns.
pub type CommandResult = anyhow::Result<()>;

/// The exit code of `outcome`, after saying why on stderr. With `json`, a command that
/// could not finish also prints `{"error": ...}` on stdout, so a script reading the
/// document gets one either way.
pub fn exit_code(outcome: CommandResult, json: bool) -> ExitCode {
    let Err(error) = outcome else {
        return ExitCode::SUCCESS;
    };
    if let Some(FlagsRefused(error)) = error.downcast_ref::<FlagsRefused>() {
        return flags(error);
    }
    match error.downcast_ref::<Failure>() {
        Some(Failure::Usage(message)) => {
            eprintln!("linerate: error: {message} (see '{} --help')", typed_here());
            ExitCode::from(2)
        }
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
            eprintln!("linerate: {}", one_line(&rendered, &typed_here()));
            ExitCode::from(2)
        }
    }
}

/// The command the user typed (`linerate lab up`): the words of `args` that name a
/// subcommand of the one before.
pub fn typed_command(root: &clap::Command, args: &[String]) -> String {
    let mut words = vec![root.get_name().to_string()];
    let mut command = root;
    for arg in args.iter().skip(1) {
        if let Some(sub) = command.find_subcommand(arg) {
            words.push(sub.get_name().to_string());
            command = sub;
        }
    }
    words.join(" ")
}

/// The command this process was given, as [`typed_command`] reads it.
fn typed_here() -> String {
    let args: Vec<String> = std::env::args().collect();
    typed_command(&<crate::cli::Cli as clap::CommandFactory>::command(), &args)
}

/// clap's rendered error in one line: the error, its tip ("a similar argument exists:
/// '--parallel'") when it has one, and the help of the command typed.
fn one_line(rendered: &str, typed: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut line = lines
        .next()
        .unwrap_or("error: invalid arguments")
        .to_string();
    // "the following required arguments were not provided:" names them below.
    if line.ends_with(':') {
        if let Some(next) = lines.next() {
            line = format!("{line} {next}");
        }
    }
    for tip in lines.filter_map(|l| l.strip_prefix("tip: ")) {
        line.push_str("; ");
        line.push_str(tip);
    }
    format!("{line} (see '{typed} --help')")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "linerate")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Command {
        Stream {
            #[arg(long)]
            parallel: Option<u32>,
        },
    }

    #[test]
    fn a_mistyped_flag_gets_the_tip_and_the_subcommands_help() {
        let error = Cli::try_parse_from(["linerate", "stream", "--paralel", "4"]).unwrap_err();
        let line = one_line(&error.render().to_string(), "linerate stream");
        assert!(
            line.starts_with("error: unexpected argument '--paralel' found"),
            "{line}"
        );
        assert!(line.contains("'--parallel'"), "{line}");
        assert!(line.ends_with("(see 'linerate stream --help')"), "{line}");
        assert!(!line.contains('\n'));
        let args: Vec<String> = ["linerate", "stream", "--parallel", "x"]
            .map(String::from)
            .to_vec();
        let root = <Cli as clap::CommandFactory>::command();
        assert_eq!(typed_command(&root, &args), "linerate stream");
        let error = Cli::try_parse_from(&args).unwrap_err();
        let line = one_line(&error.render().to_string(), "linerate stream");
        assert!(line.ends_with("(see 'linerate stream --help')"), "{line}");
        let error = Cli::try_parse_from(["linerate", "strem"]).unwrap_err();
        let line = one_line(&error.render().to_string(), "linerate");
        assert!(line.contains("'stream'"), "{line}");
        assert!(line.ends_with("(see 'linerate --help')"), "{line}");
    }
}
