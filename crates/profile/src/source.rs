//! Where a value came from, and `${name}` references.
//!
//! Both front ends turn their file into [`Text`] values that remember their position in
//! the file, so a value that fails a check is reported as `file:line:col`, whichever
//! format it was written in.

use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

/// A line and column, both counted from 1 (columns in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    /// The position of byte `offset` in `text`.
    pub fn at(text: &str, offset: usize) -> Pos {
        let offset = offset.min(text.len());
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line,
            col: before[line_start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A profile that cannot run: the file, the position and what is wrong there.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{file}:{pos}: {message}")]
pub struct ProfileError {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

/// A value as written, after its references were filled, and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    pub value: String,
    pub pos: Pos,
}

/// Where `${name}` (and uperf's `$name`) references get their values: `--set` first, then
/// the environment, then the profile's own defaults.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    pub set: BTreeMap<String, String>,
    /// Read the process environment (off in tests that must not depend on it).
    pub environment: bool,
}

impl Vars {
    pub fn new(set: BTreeMap<String, String>) -> Vars {
        Vars {
            set,
            environment: true,
        }
    }

    fn lookup(&self, name: &str, defaults: &BTreeMap<String, String>) -> Option<String> {
        if let Some(value) = self.set.get(name) {
            return Some(value.clone());
        }
        if self.environment {
            if let Ok(value) = std::env::var(name) {
                return Some(value);
            }
        }
        defaults.get(name).cloned()
    }
}

/// Fills references in values read from one file.
pub(crate) struct Filler<'a> {
    pub file: &'a str,
    pub vars: &'a Vars,
    pub defaults: BTreeMap<String, String>,
    /// uperf's bare `$name` form is accepted besides `${name}`.
    pub bare_dollar: bool,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl Filler<'_> {
    pub fn error(&self, pos: Pos, message: impl Into<String>) -> ProfileError {
        ProfileError {
            file: self.file.to_string(),
            pos,
            message: message.into(),
        }
    }

    /// `raw` with every reference replaced; `$$` is a literal `$`.
    pub fn fill(&self, raw: &str, pos: Pos) -> Result<Text, ProfileError> {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(dollar) = rest.find('$') {
            out.push_str(&rest[..dollar]);
            let after = &rest[dollar + 1..];
            let (name, consumed) = if let Some(braced) = after.strip_prefix('{') {
                let Some(close) = braced.find('}') else {
                    return Err(self.error(pos, format!("unclosed reference in '{raw}'")));
                };
                (&braced[..close], close + 2)
            } else if let Some(literal) = after.strip_prefix('$') {
                let _ = literal;
                out.push('$');
                rest = &after[1..];
                continue;
            } else if self.bare_dollar {
                let len = after.find(|c| !is_name_char(c)).unwrap_or(after.len());
                (&after[..len], len)
            } else {
                return Err(self.error(
                    pos,
                    format!("'$' in '{raw}' must start a reference like ${{name}} (write $$ for a dollar sign)"),
                ));
            };
            if name.is_empty() || !name.chars().all(is_name_char) {
                return Err(self.error(pos, format!("bad reference name '{name}' in '{raw}'")));
            }
            match self.vars.lookup(name, &self.defaults) {
                Some(value) => out.push_str(&value),
                None => {
                    return Err(self.error(
                        pos,
                        format!("${{{name}}} is not set (give --set {name}=VALUE or set {name} in the environment)"),
                    ))
                }
            }
            rest = &after[consumed..];
        }
        out.push_str(rest);
        // XML attribute values carry the layout of the file around them; TOML strings are
        // exactly what was written.
        if self.bare_dollar {
            out = out.trim().to_string();
        }
        Ok(Text { value: out, pos })
    }
}
