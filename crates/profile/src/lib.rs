//! Workload profiles: the model ([`model`]), linerate's TOML format ([`toml_format`]) and
//! uperf's XML ([`uperf`]). Both formats go through one validator, so every value that
//! fails is reported with its file, line and column.

pub mod budget;
mod build;
pub mod model;
pub mod source;
pub mod toml_format;
pub mod uperf;

pub use build::{MAX_FILES_PER_SEND, MAX_THREADS};
pub use model::*;
pub use source::{Pos, ProfileError, Vars};

/// The format of a profile file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    UperfXml,
}

impl Format {
    /// By extension, or by the first non-blank character (`<` is XML).
    pub fn detect(path: &str, text: &str) -> Format {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".xml") || text.trim_start().starts_with('<') {
            Format::UperfXml
        } else {
            Format::Toml
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Toml => "toml",
            Format::UperfXml => "uperf-xml",
        }
    }
}

/// A profile as read from its file.
#[derive(Debug)]
pub struct Parsed {
    pub profile: Profile,
    pub format: Format,
    /// What the file says that changes nothing, each `file:line:col: why`, to be shown
    /// to the user.
    pub notes: Vec<String>,
}

/// Reads a profile in either format; `path` names the file in errors.
pub fn parse(path: &str, text: &str, vars: &Vars) -> Result<Parsed, ProfileError> {
    let format = Format::detect(path, text);
    let (profile, notes) = match format {
        Format::Toml => (toml_format::parse(path, text, vars)?, Vec::new()),
        Format::UperfXml => uperf::parse_noting(path, text, vars)?,
    };
    Ok(Parsed {
        profile,
        format,
        notes,
    })
}

#[cfg(test)]
mod tests;
