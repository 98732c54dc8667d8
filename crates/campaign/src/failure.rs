//! How a command ends badly where that decides its exit code, carried inside its
//! `anyhow::Error`; the binary turns it into the code and the line on stderr (anything
//! else that fails a command could not run or finish: exit 1).

/// How a command failed.
#[derive(Debug)]
pub enum Failure {
    /// A mistake in what the user asked: one line naming the value (exit 2).
    Usage(String),
    /// The command ran and printed its result, which says part of it failed (exit 1).
    Partial(String),
    /// A command run for the user (`lab exec`, `lab run`), or a copy cut short by the
    /// operator, ended with this status, which becomes ours; it said why itself.
    Status(u8),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(message) | Failure::Partial(message) => f.write_str(message),
            Failure::Status(code) => write!(f, "exit status {code}"),
        }
    }
}

impl std::error::Error for Failure {}

/// The user's mistake, as a command's error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Failure::Usage(message.into()).into()
}
