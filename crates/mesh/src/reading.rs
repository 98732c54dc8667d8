//! What every part of the mesh file is read with: the reader that names a mistake's line
//! and column, a test's table (whose keys its readers take), and the checks its values share. Below the kinds,
//! which read their own options with it, and the file, which reads the rest.

use crate::host::Transport;
use linerate_model::units::{parse_dscp, parse_duration, parse_size};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
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

/// A test's table as the file gives it: each key with its place. What reads the test
/// takes the keys it knows (the file the fields every test has, the test's kind its own
/// options); a key no one took is not an option of that kind, and is refused at its
/// place. So a kind declares its options by reading them, in its own module.
pub(crate) struct TestTable {
    entries: BTreeMap<String, (Range<usize>, Spanned<toml::Value>)>,
}

impl<'de> Deserialize<'de> for TestTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<Spanned<String>, Spanned<toml::Value>>::deserialize(deserializer)?;
        let entries = raw
            .into_iter()
            .map(|(key, value)| {
                let span = key.span();
                (key.into_inner(), (span, value))
            })
            .collect();
        Ok(TestTable { entries })
    }
}

impl TestTable {
    /// The value of `key`, taken from the table, as a `T` at its place.
    pub(crate) fn take<T: serde::de::DeserializeOwned>(
        &mut self,
        reader: &Reader,
        key: &str,
    ) -> Result<Option<Spanned<T>>, MeshError> {
        let Some((_, value)) = self.entries.remove(key) else {
            return Ok(None);
        };
        let span = value.span();
        let typed = T::deserialize(value.into_inner()).map_err(|e| {
            let why = e.message().lines().next().unwrap_or("").trim().to_string();
            reader.error(span.start, format!("{key}: {why}"))
        })?;
        Ok(Some(Spanned::new(span, typed)))
    }

    /// `key`'s value, which every test has: missing, a mistake at the table's start.
    pub(crate) fn required<T: serde::de::DeserializeOwned>(
        &mut self,
        reader: &Reader,
        key: &str,
        table_start: usize,
    ) -> Result<Spanned<T>, MeshError> {
        self.take(reader, key)?
            .ok_or_else(|| reader.error(table_start, format!("a [[test]] needs a {key}")))
    }

    /// A time `key` in seconds, at its place (see [`Reader::seconds`]).
    pub(crate) fn take_seconds(
        &mut self,
        reader: &Reader,
        key: &str,
        positive: bool,
    ) -> Result<Option<Spanned<f64>>, MeshError> {
        let Some(text) = self.take::<String>(reader, key)? else {
            return Ok(None);
        };
        let seconds = reader.seconds(&text, key, positive)?;
        Ok(Some(Spanned::new(text.span(), seconds)))
    }

    /// A time `key` of at least `least` seconds (`why` says so where it is less), `default`
    /// unless given.
    pub(crate) fn seconds_at_least(
        &mut self,
        reader: &Reader,
        key: &str,
        (least, why): (f64, &str),
        default: f64,
    ) -> Result<f64, MeshError> {
        match self.take_seconds(reader, key, true)? {
            Some(s) if *s.get_ref() < least => Err(reader.at(&s, why)),
            Some(s) => Ok(*s.get_ref()),
            None => Ok(default),
        }
    }

    /// `duration`, in seconds: the length of one of the test's jobs, `default` unless
    /// given.
    pub(crate) fn duration(&mut self, reader: &Reader, default: f64) -> Result<f64, MeshError> {
        Ok(self
            .take_seconds(reader, "duration", true)?
            .map_or(default, |d| *d.get_ref()))
    }

    /// `protocol`, for the kinds that run over TCP or UDP (TCP unless given).
    pub(crate) fn take_transport(
        &mut self,
        reader: &Reader,
    ) -> Result<Spanned<Transport>, MeshError> {
        let Some(p) = self.take::<String>(reader, "protocol")? else {
            return Ok(Spanned::new(0..0, Transport::Tcp));
        };
        let transport = match p.get_ref().as_str() {
            "tcp" => Transport::Tcp,
            "udp" => Transport::Udp,
            other => return Err(reader.at(&p, format!("protocol '{other}' is not tcp or udp"))),
        };
        Ok(Spanned::new(p.span(), transport))
    }

    /// `key` refused with `why` where it is given: an option the kind has no use for
    /// and a reason worth more than "not an option".
    pub(crate) fn refuse(&self, reader: &Reader, key: &str, why: &str) -> Result<(), MeshError> {
        match self.entries.get(key) {
            Some((_, value)) => Err(reader.error(value.span().start, why)),
            None => Ok(()),
        }
    }

    /// The first key (in the file's order) no reader took: not an option of `run`.
    pub(crate) fn refuse_the_rest(&self, reader: &Reader, run: &str) -> Result<(), MeshError> {
        match self.entries.iter().min_by_key(|(_, (span, _))| span.start) {
            Some((key, (span, _))) => Err(reader.error(
                span.start,
                format!("'{key}' is not an option of run = \"{run}\""),
            )),
            None => Ok(()),
        }
    }
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
