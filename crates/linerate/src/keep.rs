//! Glue between test commands and the results database, and the loop that repeats a test
//! (`--iterations`, `--confidence`).

use anyhow::{anyhow, Context, Result};
use linerate_report::document::Document;
use linerate_report::stats::{estimate, RepeatPlan};
use linerate_report::{Headline, Repetition, Report};
use linerate_store::Store;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where runs are kept, and whether this one is.
#[derive(Debug, Clone)]
pub struct Storage {
    /// `--db` or `LINERATE_DB`.
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
        let path = self.path()?;
        let store = Store::open(&path).map_err(|e| anyhow!(e))?;
        Ok(Some(store))
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
pub fn iperf3_sink(store: Store, log: bool) -> linerate_drivers::server::ReportSink {
    let store = std::sync::Mutex::new(store);
    linerate_drivers::server::ReportSink(std::sync::Arc::new(move |test: u64, report: &Report| {
        let document = Document::Test(Box::new(report.clone()));
        let outcome = document
            .to_json()
            .map_err(|e| e.to_string())
            .and_then(|json| {
                let command = format!("iperf3 client at {}", report.config.target);
                let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
                store
                    .insert(&document, &json, &command)
                    .map(|id| (id, store.path().to_string()))
                    .map_err(|e| e.to_string())
            });
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        match outcome {
            Ok((id, path)) if log => {
                eprintln!("{now} iperf3 test {test}: stored as run {id} in {path}")
            }
            Ok(_) => {}
            Err(e) => eprintln!("{now} iperf3 test {test}: not stored: {e}"),
        }
    }))
}

/// The command line as typed, for the record.
pub fn command_line() -> String {
    std::env::args()
        .map(|arg| {
            if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", arg.replace('\'', r"'\''"))
            } else {
                arg
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints a finished run (its document with `--json`, else `text`, what the live output
/// has not shown yet) and keeps it. The note naming the stored run goes to stdout after
/// text, and to stderr after JSON so that stdout stays one document.
pub fn finish(
    document: &Document,
    json_mode: bool,
    text: &str,
    store: Option<&mut Store>,
) -> Result<()> {
    let json = document.to_json().context("cannot encode the result")?;
    if json_mode {
        println!("{json}");
    } else {
        print!("{text}");
    }
    if let Some(store) = store {
        let note = record(store, document, &json)?;
        if json_mode {
            eprintln!("{note}");
        } else {
            println!("{note}");
        }
    }
    Ok(())
}

/// Keeps a run whose document printed as `json`; returns the note that names it.
pub fn record(store: &mut Store, document: &Document, json: &str) -> Result<String> {
    let id = store
        .insert(document, json, &command_line())
        .map_err(|e| anyhow!(e))
        .context("the result above was not stored")?;
    Ok(format!(
        "Stored as run {id} in {} ('linerate show {id}')",
        store.path()
    ))
}

/// Runs a test once, or as `plan` says: `one(i)` runs iteration `i`, `each` hears of
/// every finished iteration. A repeated run's report is its median iteration's, with
/// every iteration and the confidence interval of the headline under `repetition`.
pub fn repeat(
    plan: Option<RepeatPlan>,
    cancel: &AtomicBool,
    mut one: impl FnMut(u32) -> Result<Report>,
    mut each: impl FnMut(u32, &Report, f64),
) -> Result<Report> {
    let Some(plan) = plan else {
        return one(0);
    };
    let mut iterations: Vec<Report> = Vec::new();
    let mut values: Vec<f64> = Vec::new();
    let mut interrupted = false;
    while plan.wants_more(&values) {
        if cancel.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let index = iterations.len() as u32;
        let report = one(index).with_context(|| format!("iteration {}", index + 1))?;
        crate::check_flows(&report).with_context(|| format!("iteration {}", index + 1))?;
        let value = Headline::of(&report.config).value(&report.summary);
        each(index, &report, value);
        values.push(value);
        iterations.push(report);
    }
    let Some(first) = iterations.first() else {
        return Err(anyhow!("interrupted before the first iteration ended"));
    };
    let metric = Headline::of(&first.config);
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let representative = order[(order.len() - 1) / 2];
    let mut report = iterations[representative].clone();
    if interrupted {
        report.warnings.push(format!(
            "interrupted after {} iterations: the interval covers those",
            values.len()
        ));
    }
    report.repetition = Some(Repetition {
        metric,
        estimate: estimate(&values, plan.level_pct()),
        confidence: plan.confidence,
        met: plan.met(&values),
        max_iterations: plan.max,
        representative,
        values,
        iterations,
    });
    Ok(report)
}
