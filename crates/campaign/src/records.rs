//! What the results database keeps, read back and printed: `history`, `show`, `compare`,
//! `export` and `report`; and `store prune`, which keeps it the size asked.

use crate::storage::Storage;
use anyhow::{anyhow, bail, Context, Result};
use linerate_model::clock::UnixTime;
use linerate_report::document::Document;
use linerate_report::units::Scale;
use linerate_store::{Filter, RunRow, StoredRun};
use std::path::Path;

/// A time as UTC, to the second: "2026-11-21T22:16:03Z".
fn when(epoch_s: f64) -> String {
    let time = UnixTime::from_seconds(epoch_s).system();
    humantime::format_rfc3339_seconds(time).to_string()
}

/// `history`: the runs the filter matches, newest first, as a table or a JSON array.
pub fn history(storage: &Storage, filter: &Filter, json: bool) -> Result<()> {
    let store = storage.open_to_read()?;
    let rows = store.list(filter).map_err(|e| anyhow!(e))?;
    if json {
        let list: Vec<serde_json::Value> = rows.iter().map(row_json).collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("No runs stored in {} match.", store.path());
        return Ok(());
    }
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(["id", "started (UTC)", "test", "target", "path", "headline"]);
    for row in &rows {
        table.add_row([
            row.id.to_string(),
            when(row.started_at),
            row.kind.clone(),
            row.target.clone(),
            row.path.clone(),
            row.headline_text.clone(),
        ]);
    }
    println!("{table}");
    Ok(())
}

fn row_json(row: &RunRow) -> serde_json::Value {
    serde_json::json!({
        "id": row.id,
        "started_at": row.started_at,
        "stored_at": row.stored_at,
        "test": row.test,
        "kind": row.kind,
        "target": row.target,
        "headline": row.headline,
        "headline_text": row.headline_text,
        "command": row.command,
        "path": row.path,
    })
}

/// `show`: a stored run as it was printed when it ran, or its document.
pub fn show(storage: &Storage, id: i64, json: bool, format: Scale) -> Result<()> {
    let store = storage.open_to_read()?;
    let run = store.get(id).map_err(|e| anyhow!(e))?;
    if json {
        println!("{}", run.json);
        return Ok(());
    }
    println!(
        "Run {}: {} against {}, started {}",
        run.row.id,
        run.row.kind,
        run.row.target,
        when(run.row.started_at)
    );
    if !run.row.command.is_empty() {
        println!("Command: {}", run.row.command);
    }
    print!("{}", run.document.render_text_as_run(format));
    Ok(())
}

fn fetch(storage: &Storage, ids: &[i64]) -> Result<Vec<StoredRun>> {
    let store = storage.open_to_read()?;
    ids.iter()
        .map(|&id| store.get(id).map_err(|e| anyhow!(e)))
        .collect()
}

/// Each run's report of one kind, by id, when every run (at least one) is of that kind.
fn every<'a, T>(
    runs: &'a [StoredRun],
    kind: impl Fn(&'a Document) -> Option<&'a T>,
) -> Option<Vec<(i64, &'a T)>> {
    let picked: Option<Vec<_>> = runs
        .iter()
        .map(|run| kind(&run.document).map(|r| (run.row.id, r)))
        .collect();
    picked.filter(|p| !p.is_empty())
}

/// `compare`: stored runs side by side, with deltas and their significance at `level`.
pub fn compare(storage: &Storage, ids: &[i64], level: f64, json: bool) -> Result<()> {
    let runs = fetch(storage, ids)?;
    // Profile, RPM and STAMP runs ran once each: their own side-by-side tables, text only.
    if !json {
        if let Some(profiles) = every(&runs, |d| match d {
            Document::Profile(report) => Some(report.as_ref()),
            _ => None,
        }) {
            print!("{}", linerate_report::profile::compare_text(&profiles));
            return Ok(());
        }
        if let Some(rpms) = every(&runs, |d| match d {
            Document::Rpm(report) => Some(report.as_ref()),
            _ => None,
        }) {
            print!("{}", linerate_report::rpm::compare_text(&rpms));
            return Ok(());
        }
        if let Some(stamps) = every(&runs, |d| match d {
            Document::Stamp(report) => Some(report.as_ref()),
            _ => None,
        }) {
            print!("{}", linerate_report::stamp::compare_text(&stamps));
            return Ok(());
        }
    }
    let mut tests = Vec::new();
    for run in &runs {
        match &run.document {
            Document::Test(report) => tests.push((run.row.id, report.as_ref())),
            other => bail!(
                "run {} is a {}: compare takes test runs, or profile, rpm or stamp runs without --json ('linerate report {} ... --html FILE' draws sweeps side by side)",
                run.row.id,
                other.kind(),
                run.row.id
            ),
        }
    }
    let comparison = linerate_report::compare::compare(&tests, level).map_err(|e| anyhow!(e))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", comparison.render_text());
    }
    Ok(())
}

/// `export`: a stored run's document (JSON) or its intervals (CSV), to a file or stdout.
pub fn export(storage: &Storage, id: i64, csv: bool, output: Option<&Path>) -> Result<()> {
    let run = fetch(storage, &[id])?.remove(0);
    let text = if csv {
        linerate_report::export::csv(&run.document).context("cannot write the CSV")?
    } else {
        format!("{}\n", run.json)
    };
    write_out(output, &text)
}

/// `report --html`: stored runs drawn into one self-contained HTML file.
pub fn report(storage: &Storage, ids: &[i64], html_file: &Path) -> Result<()> {
    let runs = fetch(storage, ids)?;
    let documents: Vec<(i64, &Document)> = runs.iter().map(|r| (r.row.id, &r.document)).collect();
    let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
    let html = linerate_report::html::render(&documents, &tool);
    write_out(Some(html_file), &html)?;
    eprintln!(
        "Wrote {} ({} run{}, {} KB)",
        html_file.display(),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        html.len().div_ceil(1024)
    );
    Ok(())
}

/// Writes to a file (through a temporary beside it, so a failed write leaves no half
/// file) or to stdout.
fn write_out(path: Option<&Path>, text: &str) -> Result<()> {
    let Some(path) = path else {
        print!("{text}");
        return Ok(());
    };
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("'{}' is not a file name", path.display()))?;
    let temporary = path.with_file_name(format!(".{}.partial", name.to_string_lossy()));
    std::fs::write(&temporary, text)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            anyhow!("cannot write {}: {e}", path.display())
        })?;
    Ok(())
}

/// What `store prune` is asked.
#[derive(Debug, Clone, Copy)]
pub struct Prune {
    /// Runs that started longer ago than this leave.
    pub older_than_s: f64,
    /// Rows removed a transaction.
    pub batch: usize,
    pub dry_run: bool,
    pub vacuum: bool,
    pub json: bool,
}

/// `store prune`: the runs older than the age asked leave, a mesh's rows summed up by the
/// hour first; a line an hour of mesh rows on a terminal, the totals at the end.
pub fn prune(storage: &Storage, ask: &Prune) -> Result<()> {
    let mut store = storage.open_to_read()?;
    let now = UnixTime::now().seconds();
    let cutoff = now - ask.older_than_s;
    let live = !ask.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |p: &linerate_store::prune::Pruned| {
        if live {
            eprint!(
                "\r{} hours summed up, {} mesh rows and {} runs removed",
                p.hours, p.mesh_rows, p.runs
            );
        }
    };
    let done = store
        .prune(cutoff, ask.batch, ask.dry_run, &mut progress)
        .map_err(|e| anyhow!(e))?;
    if live {
        eprintln!();
    }
    if ask.vacuum && !ask.dry_run {
        store.vacuum().map_err(|e| anyhow!(e))?;
    }
    if ask.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "database": store.path(),
                "older_than": when(cutoff),
                "dry_run": ask.dry_run,
                "hours": done.hours,
                "aggregates": done.aggregates,
                "mesh_rows": done.mesh_rows,
                "runs": done.runs,
                "vacuumed": ask.vacuum && !ask.dry_run,
            }))?
        );
        return Ok(());
    }
    let verb = if ask.dry_run {
        "would remove"
    } else {
        "removed"
    };
    println!(
        "{}: {verb} {} runs and {} mesh rows started before {} ({} hours of mesh rows{}).",
        store.path(),
        done.runs,
        done.mesh_rows,
        when(cutoff),
        done.hours,
        if ask.dry_run {
            ", to be summed up by the hour first".to_string()
        } else {
            format!(", summed up in {} hourly aggregates", done.aggregates)
        }
    );
    Ok(())
}
