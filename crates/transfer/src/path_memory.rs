//! What earlier copies learned of their paths, so that the next copy over the same path
//! begins its rate search from it (docs/transfer-protocol.md 5, "A search resumed").
//!
//! A client keeps its book in a small JSON file (`$XDG_STATE_HOME/linerate/paths.json`),
//! one entry per direction, server and source address; a server keeps one in memory per
//! client address for the files it sends. Entries live an hour, as Linux keeps its TCP
//! metrics (`TCP_METRICS_TIMEOUT`): a path's rate is a fact of the hour, not of the week.
//! The book is sans-IO; [`load`] and [`save`] are its only file access, and a book that
//! cannot be read is an empty one: a copy never fails for its memory.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::outcome::{Direction, FileOutcome};
use crate::rate::PathMemory;

/// Round trips a file's transfer must have lasted for its rate model to be worth
/// remembering: a small file ends while the search still climbs, and its estimate says
/// how far the search got, not what the path carries.
pub const LESSON_ROUND_TRIPS: f64 = 10.0;

/// What a finished file's transfer teaches of its path, if it lasted long enough to
/// have found the rate.
pub fn lesson(outcome: &FileOutcome) -> Option<PathMemory> {
    let memory = PathMemory::of(outcome.bottleneck_bps, outcome.min_rtt_ms)?;
    let round_trip_s = memory.min_rtt_ns as f64 / 1e9;
    (outcome.wall_s >= LESSON_ROUND_TRIPS * round_trip_s).then_some(memory)
}

/// Seconds an entry is believed.
pub const LIFETIME_S: u64 = 3600;
/// Entries a book keeps; the oldest go first.
pub const MAX_ENTRIES: usize = 256;
/// The largest book file read (a few hundred entries are 40 KB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// One path's memory and when it was made (seconds since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    #[serde(flatten)]
    pub memory: PathMemory,
    pub saved_unix_s: u64,
}

/// Paths by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathBook {
    pub paths: BTreeMap<String, Remembered>,
}

/// The key of a client's path: its direction, the server's address and port, and the
/// source address and device it left from (a different source can be a different path).
pub fn client_key(
    direction: Direction,
    server: SocketAddr,
    bind: Option<IpAddr>,
    device: Option<&str>,
) -> String {
    let way = match direction {
        Direction::Push => "push to",
        Direction::Pull => "pull from",
    };
    let mut key = format!("{way} {server}");
    if let Some(source) = bind {
        key.push_str(&format!(" from {source}"));
    }
    if let Some(device) = device {
        key.push_str(&format!(" via {device}"));
    }
    key
}

impl PathBook {
    /// A book from its file's text; anything unreadable is an empty book.
    pub fn parse(text: &str) -> PathBook {
        let mut book: PathBook = serde_json::from_str(text).unwrap_or_default();
        book.paths
            .retain(|_, r| r.memory.bottleneck_bps > 0 && r.memory.min_rtt_ns > 0);
        book.trim();
        book
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a book serialises")
    }

    /// What the path under `key` was last seen to carry, if that was within the hour.
    pub fn recall(&self, key: &str, now_unix_s: u64) -> Option<Remembered> {
        self.paths
            .get(key)
            .filter(|r| now_unix_s.saturating_sub(r.saved_unix_s) < LIFETIME_S)
            .filter(|r| r.saved_unix_s <= now_unix_s.saturating_add(60))
            .copied()
    }

    pub fn remember(&mut self, key: &str, memory: PathMemory, now_unix_s: u64) {
        self.paths.insert(
            key.to_string(),
            Remembered {
                memory,
                saved_unix_s: now_unix_s,
            },
        );
        self.trim();
    }

    /// Keeps the newest [`MAX_ENTRIES`].
    fn trim(&mut self) {
        while self.paths.len() > MAX_ENTRIES {
            let oldest = self
                .paths
                .iter()
                .min_by_key(|(_, r)| r.saved_unix_s)
                .map(|(k, _)| k.clone())
                .expect("a book over its size has entries");
            self.paths.remove(&oldest);
        }
    }
}

/// Where a client keeps its book: `$XDG_STATE_HOME/linerate/paths.json`, or
/// `~/.local/state/linerate/paths.json`.
pub fn default_file() -> Option<PathBuf> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".local/state")
        }
    };
    Some(state.join("linerate").join("paths.json"))
}

/// The book in `file`; a missing, oversized or broken file is an empty book.
pub fn load(file: &Path) -> PathBook {
    use std::io::Read;
    let mut text = String::new();
    match std::fs::File::open(file) {
        Ok(f) => {
            if f.take(MAX_FILE_BYTES).read_to_string(&mut text).is_err() {
                return PathBook::default();
            }
            PathBook::parse(&text)
        }
        Err(_) => PathBook::default(),
    }
}

/// Writes the book whole (a temporary file renamed over the old one, so a reader never
/// sees half of it).
pub fn save(file: &Path, book: &PathBook) -> io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temporary = file.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&temporary, book.to_json())?;
    std::fs::rename(&temporary, file).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

/// Seconds since the Unix epoch now: the drivers' clock, for the book's ages.
#[allow(clippy::disallowed_methods)]
pub fn now_unix_s() -> u64 {
    linerate_model::clock::UnixTime::now().whole_seconds()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(bps: u64) -> PathMemory {
        PathMemory {
            bottleneck_bps: bps,
            min_rtt_ns: 100_000_000,
        }
    }

    #[test]
    fn an_entry_is_recalled_within_the_hour_and_not_after() {
        let mut book = PathBook::default();
        let key = client_key(
            Direction::Push,
            "10.0.0.2:5201".parse().unwrap(),
            None,
            None,
        );
        book.remember(&key, memory(1_000_000_000), 1_000_000);
        assert_eq!(
            book.recall(&key, 1_000_000 + LIFETIME_S - 1)
                .map(|r| r.memory),
            Some(memory(1_000_000_000))
        );
        assert_eq!(book.recall(&key, 1_000_000 + LIFETIME_S), None);
        // One saved in the future (a clock set back) is not believed either.
        assert_eq!(book.recall(&key, 1_000_000 - 3600), None);
        let other = client_key(
            Direction::Pull,
            "10.0.0.2:5201".parse().unwrap(),
            None,
            None,
        );
        assert_eq!(book.recall(&other, 1_000_000), None);
        let bound = client_key(
            Direction::Push,
            "10.0.0.2:5201".parse().unwrap(),
            Some("10.0.1.1".parse().unwrap()),
            Some("vrf-blue"),
        );
        assert_eq!(bound, "push to 10.0.0.2:5201 from 10.0.1.1 via vrf-blue");
        assert_eq!(book.recall(&bound, 1_000_000), None);
    }

    #[test]
    fn a_book_keeps_its_newest_entries_and_survives_its_file() {
        let mut book = PathBook::default();
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            book.remember(
                &format!("push to 10.0.0.{i}:5201"),
                memory(1_000_000 + i),
                i,
            );
        }
        assert_eq!(book.paths.len(), MAX_ENTRIES);
        assert!(book.recall("push to 10.0.0.0:5201", 100).is_none());
        assert!(book.recall("push to 10.0.0.265:5201", 300).is_some());
        assert_eq!(PathBook::parse(&book.to_json()), book);
    }

    #[test]
    fn only_a_transfer_long_enough_to_have_found_the_rate_teaches_it() {
        let outcome = |wall_s: f64| FileOutcome {
            wall_s,
            bottleneck_bps: Some(950e6),
            min_rtt_ms: Some(100.0),
            ..FileOutcome::default()
        };
        assert_eq!(lesson(&outcome(0.5)), None);
        assert_eq!(lesson(&outcome(0.9)), None);
        assert_eq!(
            lesson(&outcome(2.0)),
            Some(PathMemory {
                bottleneck_bps: 950_000_000,
                min_rtt_ns: 100_000_000
            })
        );
        // A fixed rate has no model to teach from.
        let fixed = FileOutcome {
            bottleneck_bps: None,
            ..outcome(10.0)
        };
        assert_eq!(lesson(&fixed), None);
    }

    #[test]
    fn a_broken_book_is_an_empty_one() {
        for text in [
            "",
            "{",
            "[]",
            "{\"paths\": 3}",
            "{\"paths\": {\"k\": {\"bottleneck_bps\": -1}}}",
        ] {
            assert_eq!(PathBook::parse(text), PathBook::default(), "{text}");
        }
        // Zeros say nothing of a path.
        let zero =
            "{\"paths\": {\"k\": {\"bottleneck_bps\": 0, \"min_rtt_ns\": 5, \"saved_unix_s\": 1}}}";
        assert!(PathBook::parse(zero).paths.is_empty());
    }

    #[test]
    fn a_saved_book_loads_back_and_a_missing_one_is_empty() {
        let dir = std::env::temp_dir().join(format!("linerate-paths-{}", std::process::id()));
        let file = dir.join("state/paths.json");
        assert_eq!(load(&file), PathBook::default());
        let mut book = PathBook::default();
        book.remember("pull from [fd00::2]:5201", memory(42_000_000), now_unix_s());
        save(&file, &book).unwrap();
        assert_eq!(load(&file), book);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
