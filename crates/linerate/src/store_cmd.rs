//! The commands that read the results database: `history`, `show`, `compare`, `export`
//! and `report`; and `store prune`, which keeps it the size asked.

use crate::cli::{
    CompareArgs, ExportArgs, ExportFormat, HistoryArgs, PruneArgs, ReportArgs, ShowArgs,
};
use crate::failure::CommandResult;
use anyhow::{anyhow, bail, Context, Result};
use linerate_campaign::storage::Storage;
use linerate_model::clock::UnixTime;
use linerate_report::document::Document;
use linerate_store::{Filter, RunRow, StoredRun};

/// A time as UTC, to the second: "2026-11-21T22:16:03Z".
fn when(epoch_s: f64) -> String {
    let time = UnixTime::from_seconds(epoch_s).system();
    humantime::format_rfc3339_seconds(time).to_string()
}

pub fn history(args: &HistoryArgs, storage: &Storage) -> CommandResult {
    let store = storage.open_to_read()?;
    let rows = store
        .list(&Filter {
            test: args.test.clone(),
            target: args.target.clone(),
            since: args.since,
            path: args.path.clone(),
            limit: (args.limit > 0).then_some(args.limit),
        })
        .map_err(|e| anyhow!(e))?;
    if args.print.json {
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

pub fn show(args: &ShowArgs, storage: &Storage) -> CommandResult {
    let store = storage.open_to_read()?;
    let run = store.get(args.id).map_err(|e| anyhow!(e))?;
    if args.print.json {
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
    print!("{}", run.document.render_text_as_run(args.format));
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

pub fn compare(args: &CompareArgs, storage: &Storage) -> CommandResult {
    let runs = fetch(storage, &args.ids)?;
    // Profile, RPM and STAMP runs ran once each: their own side-by-side tables, text only.
    if !args.print.json {
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
    let comparison =
        linerate_report::compare::compare(&tests, args.level).map_err(|e| anyhow!(e))?;
    if args.print.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", comparison.render_text());
    }
    Ok(())
}

pub fn export(args: &ExportArgs, storage: &Storage) -> CommandResult {
    let run = fetch(storage, &[args.id])?.remove(0);
    let text = match args.format {
        ExportFormat::Json => format!("{}\n", run.json),
        ExportFormat::Csv => {
            linerate_report::export::csv(&run.document).context("cannot write the CSV")?
        }
    };
    write_out(args.output.as_deref(), &text)
}

pub fn report(args: &ReportArgs, storage: &Storage) -> CommandResult {
    let runs = fetch(storage, &args.ids)?;
    let documents: Vec<(i64, &Document)> = runs.iter().map(|r| (r.row.id, &r.document)).collect();
    let tool = format!("linerate {}", env!("CARGO_PKG_VERSION"));
    let html = linerate_report::html::render(&documents, &tool);
    write_out(Some(&args.html), &html)?;
    eprintln!(
        "Wrote {} ({} run{}, {} KB)",
        args.html.display(),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        html.len().div_ceil(1024)
    );
    Ok(())
}

/// Writes to a file (through a temporary beside it, so a failed write leaves no half
/// file) or to stdout.
fn write_out(path: Option<&std::path::Path>, text: &str) -> CommandResult {
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

/// `store prune`: the runs older than the age asked leave, a mesh's rows summed up by the
/// hour first; a line an hour of mesh rows on a terminal, the totals at the end.
pub fn prune(args: &PruneArgs, storage: &Storage) -> CommandResult {
    let mut store = storage.open_to_read()?;
    let now = UnixTime::now().seconds();
    let cutoff = now - args.older_than;
    let live = !args.print.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |p: &linerate_store::prune::Pruned| {
        if live {
            eprint!(
                "\r{} hours summed up, {} mesh rows and {} runs removed",
                p.hours, p.mesh_rows, p.runs
            );
        }
    };
    let done = store
        .prune(cutoff, args.batch as usize, args.dry_run, &mut progress)
        .map_err(|e| anyhow!(e))?;
    if live {
        eprintln!();
    }
    if args.vacuum && !args.dry_run {
        store.vacuum().map_err(|e| anyhow!(e))?;
    }
    if args.print.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "database": store.path(),
                "older_than": when(cutoff),
                "dry_run": args.dry_run,
                "hours": done.hours,
                "aggregates": done.aggregates,
                "mesh_rows": done.mesh_rows,
                "runs": done.runs,
                "vacuumed": args.vacuum && !args.dry_run,
            }))?
        );
        return Ok(());
    }
    let verb = if args.dry_run {
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
        if args.dry_run {
            ", to be summed up by the hour first".to_string()
        } else {
            format!(", summed up in {} hourly aggregates", done.aggregates)
        }
    );
    Ok(())
}
