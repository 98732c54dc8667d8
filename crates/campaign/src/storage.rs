//! Where runs are kept: the results database a command opens before its test runs, and
//! the keeper of the tests a server runs for iperf3 clients (which cannot keep their own).

use anyhow::{anyhow, Result};
use linerate_report::document::Document;
use linerate_report::Report;
use linerate_store::{Store, StoreError};
use std::path::PathBuf;

/// Where runs are kept, and whether this one is.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    /// `--db` or `LINERATE_DB`; `None` is the default under the data home.
    pub path: Option<PathBuf>,
    /// `--no-store`.
    pub disabled: bool,
}

impl Storage {
    /// The database file: `--db`, `LINERATE_DB`, or the default under the data home.
    pub fn path(&self) -> Result<PathBuf> {
        match &self.path {
            Some(path) => Ok(path.clone()),
            None => linerate_store::default_path().ok_or_else(|| {
                anyhow!("no place for the results database: set XDG_DATA_HOME or HOME, or give --db PATH (or --no-store)")
            }),
        }
    }

    /// Opens the database before a test runs, so that a database that cannot take the
    /// result fails the command before the test's time is spent; `None` with
    /// `--no-store`.
    pub fn open_for_run(&self) -> Result<Option<Store>> {
        if self.disabled {
            return Ok(None);
        }
        let path = match self.path() {
            Ok(path) => path,
            Err(why) => return self.unkept(why),
        };
        match Store::open(&path) {
            Ok(store) => Ok(Some(store)),
            // The default place cannot be made (an unwritable or missing home): the test
            // still runs, and says it is not kept and why. A database named with --db
            // that cannot be opened stops the command: that place was asked for.
            Err(e @ StoreError::Directory { .. }) if self.path.is_none() => self.unkept(anyhow!(e)),
            Err(e) => Err(anyhow!(e)),
        }
    }

    /// Runs without keeping, saying why once on stderr.
    fn unkept(&self, why: anyhow::Error) -> Result<Option<Store>> {
        if self.path.is_some() {
            return Err(why);
        }
        eprintln!(
            "linerate: warning: this run is not kept: {why:#} (give --db PATH to keep it elsewhere, or --no-store)"
        );
        Ok(None)
    }

    /// Opens an existing database to read from.
    pub fn open_to_read(&self) -> Result<Store> {
        let path = self.path()?;
        if !path.exists() {
            return Err(anyhow!(
                "no results database at {} yet: runs are kept there as they run (or give --db PATH)",
                path.display()
            ));
        }
        Store::open(&path).map_err(|e| anyhow!(e))
    }
}

/// Keeps the reports of iperf3 tests a server ran; a failure to keep one is logged and
/// the server goes on serving.
pub fn server_keeper(store: Store, log: bool) -> linerate_drivers::server::ReportKeeper {
    let store = std::sync::Mutex::new(store);
    linerate_drivers::server::ReportKeeper(std::sync::Arc::new(
        move |tool: linerate_drivers::server::ServedTool, test: u64, report: &Report| {
            let document = Document::Test(Box::new(report.clone()));
            let outcome = document
                .to_json()
                .map_err(|e| e.to_string())
                .and_then(|json| {
                    let command = format!("{} client at {}", tool.name(), report.config.target);
                    let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
                    store
                        .insert(&document, &json, &command)
                        .map(|id| (id, store.path().to_string()))
                        .map_err(|e| e.to_string())
                });
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
            match outcome {
                Ok((id, path)) if log => {
                    eprintln!(
                        "{now} {} test {test}: stored as run {id} in {path}",
                        tool.name()
                    )
                }
                Ok(_) => {}
                Err(e) => eprintln!("{now} {} test {test}: not stored: {e}", tool.name()),
            }
        },
    ))
}

/// The command line as typed, for the record: arguments with spaces or quotes are
/// quoted so that it can be pasted back into a shell.
pub fn command_line() -> String {
    quote_args(std::env::args())
}

fn quote_args(args: impl Iterator<Item = String>) -> String {
    args.map(|arg| {
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
            format!("'{}'", arg.replace('\'', r"'\''"))
        } else {
            arg
        }
    })
    .collect::<Vec<_>>()
    .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_a_shell_would_split() {
        let args = ["linerate", "stream", "--title", "a b", "it's", ""].map(String::from);
        assert_eq!(
            quote_args(args.into_iter()),
            r"linerate stream --title 'a b' 'it'\''s' ''"
        );
    }

    #[test]
    fn a_database_that_is_not_there_is_named_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage {
            path: Some(dir.path().join("none.db")),
            disabled: false,
        };
        let error = storage.open_to_read().err().unwrap().to_string();
        assert!(error.contains("none.db"), "{error}");
        assert!(!dir.path().join("none.db").exists());
    }

    #[test]
    fn no_store_opens_nothing() {
        let storage = Storage {
            path: Some("/nonexistent/dir/x.db".into()),
            disabled: true,
        };
        assert!(storage.open_for_run().unwrap().is_none());
    }
}
