//! What every part of the mesh file is read with: the reader that names a mistake's line
//! and column, a test's raw table, and the checks its values share. Below the kinds,
//! which read their own options with it, and the file, which reads the rest.

use linerate_model::units::{parse_dscp, parse_duration, parse_size};
use serde::Deserialize;
use toml::Spanned;

/// A mesh file that cannot run: where, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{col}: {message}")]
pub struct MeshError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTest {
    pub(crate) name: Spanned<String>,
    pub(crate) run: Spanned<String>,
    pub(crate) protocol: Option<Spanned<String>>,
    pub(crate) duration: Option<Spanned<String>>,
    pub(crate) interval: Option<Spanned<String>>,
    /// STAMP: the report window (each job's length).
    pub(crate) report: Option<Spanned<String>>,
    /// STAMP: the reflectors' port.
    pub(crate) port: Option<Spanned<u16>>,
    /// STAMP: the probes' DSCP; kinds that mark their packets: every packet's, both ways.
    pub(crate) dscp: Option<Spanned<String>>,
    /// Kinds that mark their packets: ECN-capable packets both ways.
    pub(crate) ecn: Option<Spanned<bool>>,
    pub(crate) jitter: Option<Spanned<String>>,
    pub(crate) exclusive: Option<bool>,
    pub(crate) pause_for_exclusive: Option<bool>,
    pub(crate) parallel: Option<Spanned<u32>>,
    pub(crate) rate: Option<Spanned<String>>,
    pub(crate) size: Option<Spanned<String>>,
    pub(crate) request: Option<Spanned<String>>,
    pub(crate) response: Option<Spanned<String>>,
    pub(crate) tls: Option<bool>,
    pub(crate) max_connections: Option<Spanned<u32>>,
    /// Trace: the farthest distance probed, and each hop's MTU.
    pub(crate) max_hops: Option<Spanned<u8>>,
    pub(crate) mtu: Option<Spanned<bool>>,
    /// A call: its codec and the receivers' jitter buffer.
    pub(crate) codec: Option<Spanned<String>>,
    pub(crate) jitter_buffer: Option<Spanned<String>>,
}

/// The longest interval or test a mesh may ask for: a week.
const MAX_SECONDS: f64 = 7.0 * 86_400.0;

pub(crate) struct Reader<'a> {
    pub(crate) file: &'a str,
    pub(crate) text: &'a str,
}

impl Reader<'_> {
    pub(crate) fn error(&self, offset: usize, message: impl Into<String>) -> MeshError {
        let before = &self.text[..offset.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        MeshError {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        }
    }

    pub(crate) fn at<T>(&self, value: &Spanned<T>, message: impl Into<String>) -> MeshError {
        self.error(value.span().start, message)
    }

    /// A time, in seconds, between `min` (exclusive of 0 when `positive`) and a week.
    pub(crate) fn seconds(
        &self,
        value: &Spanned<String>,
        what: &str,
        positive: bool,
    ) -> Result<f64, MeshError> {
        let text = value.get_ref();
        let seconds = parse_duration(text)
            .map_err(|e| self.at(value, format!("{what} '{text}' is not a time: {}", e.why)))?;
        if seconds < 0.0 || (positive && seconds == 0.0) || seconds > MAX_SECONDS {
            return Err(self.at(
                value,
                format!(
                    "{what} '{text}' must be {} and at most a week",
                    if positive { "above 0" } else { "0 or more" }
                ),
            ));
        }
        Ok(seconds)
    }
}

/// `'WHAT' is not an option of run = "RUN"`, at the value, when it is given.
pub(crate) fn not_an_option(
    reader: &Reader,
    value: Option<&Spanned<String>>,
    what: &str,
    run: &str,
) -> Result<(), MeshError> {
    match value {
        Some(v) => Err(reader.at(v, format!("'{what}' is not an option of run = \"{run}\""))),
        None => Ok(()),
    }
}

/// A byte count between 1 and 1M, or `default` when not given.
pub(crate) fn read_size(
    reader: &Reader,
    value: &Option<Spanned<String>>,
    what: &str,
    default: u64,
) -> Result<u64, MeshError> {
    match value {
        None => Ok(default),
        Some(v) => match parse_size(v.get_ref()) {
            Ok(n) if (1..=1 << 20).contains(&n) => Ok(n),
            _ => Err(reader.at(
                v,
                format!("{what} '{}' must be a size from 1 byte to 1M", v.get_ref()),
            )),
        },
    }
}

/// A test's `dscp`: a name or a number.
pub(crate) fn read_dscp(reader: &Reader, d: &Spanned<String>) -> Result<u8, MeshError> {
    parse_dscp(d.get_ref()).ok_or_else(|| {
        reader.at(
            d,
            format!(
                "dscp '{}' is not a DSCP: a name (BE, EF, CS0-CS7, AF11-AF43, VA, LE) or 0-63",
                d.get_ref()
            ),
        )
    })
}

/// "10/s" or "10": transactions per second, from 0.01 to a million.
pub(crate) fn transactions_per_second(text: &str) -> Option<f64> {
    let number = text.trim().strip_suffix("/s").unwrap_or(text.trim());
    number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|n| (0.01..=1e6).contains(n))
}
