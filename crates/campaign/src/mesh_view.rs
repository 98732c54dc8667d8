//! How a mesh's rows are shown: the last figure of every pair as a table per test
//! (sources down, destinations across), and the live view `mesh run` redraws in a
//! terminal as results arrive; what `mesh plan` and `mesh history` print.

use crate::failure::usage;
use crate::storage::Storage;
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use linerate_mesh::{Mesh, PlanSummary};
use linerate_metrics::board::Measure;
use linerate_model::clock::UnixTime;
use linerate_model::mesh_row::{MeshRow, Outcome};
use linerate_store::archive::Archive;
use linerate_store::prune::PairQuery;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Above this many hosts a test's grid no longer fits a terminal: the live view shows
/// counts and the failing pairs instead.
const GRID_HOSTS: usize = 16;
/// The newest events the live view keeps under the grid.
const EVENTS: usize = 6;
/// The live view redraws at most this often (a large mesh ends many jobs a second).
const REDRAW: Duration = Duration::from_millis(250);

/// A row as `mesh run --json` and `mesh status --json` print it.
pub fn row_json(row: &MeshRow) -> serde_json::Value {
    serde_json::to_value(RowJson::of(row)).expect("a row is plain data")
}

/// A mesh row as JSON, its fields borrowed and in the order `row_json` has always given
/// them (alphabetical): `mesh status --json` writes a large mesh's thousands of rows
/// straight from these, without a map built for each.
#[derive(serde::Serialize)]
pub struct RowJson<'a> {
    blamed: Option<&'a str>,
    cycle: u64,
    direction: &'a str,
    dst: &'a str,
    ended_at: f64,
    headline: Option<f64>,
    headline_text: &'a str,
    mesh: &'a str,
    ok: bool,
    outcome: &'a str,
    protocol: &'a str,
    reason: &'a str,
    run_id: Option<i64>,
    src: &'a str,
    started_at: f64,
    test: &'a str,
}

impl<'a> RowJson<'a> {
    pub fn of(row: &'a MeshRow) -> RowJson<'a> {
        RowJson {
            blamed: row.outcome.blamed(),
            cycle: row.cycle,
            direction: &row.direction,
            dst: &row.dst,
            ended_at: row.ended_at,
            headline: row.headline,
            headline_text: &row.headline_text,
            mesh: &row.mesh,
            ok: row.outcome.is_ok(),
            outcome: row.outcome.name(),
            protocol: &row.protocol,
            reason: row.outcome.reason(),
            run_id: row.run_id,
            src: &row.src,
            started_at: row.started_at,
            test: &row.test,
        }
    }
}

/// What a cell shows: the figure, or a mark that does not rely on colour.
fn cell(row: &MeshRow) -> String {
    match row.outcome {
        Outcome::Ok => row.headline_text.clone(),
        Outcome::Skipped { .. } => "- skipped".into(),
        Outcome::Failed { .. } => "x failed".into(),
        Outcome::Interrupted { .. } => "~ interrupted".into(),
    }
}

/// One table per test: sources down, destinations across, each cell the last figure.
pub fn tables(mesh: &str, rows: &[MeshRow]) -> String {
    let mut out = String::new();
    let tests: BTreeSet<&str> = rows.iter().map(|r| r.test.as_str()).collect();
    for test in tests {
        let mine: Vec<&MeshRow> = rows.iter().filter(|r| r.test == test).collect();
        let hosts: BTreeSet<&str> = mine
            .iter()
            .flat_map(|r| [r.src.as_str(), r.dst.as_str()])
            .collect();
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec![format!("{test}: from \\ to")];
        header.extend(hosts.iter().map(|h| h.to_string()));
        table.set_header(header);
        for src in &hosts {
            let mut line = vec![src.to_string()];
            for dst in &hosts {
                let found = mine.iter().find(|r| r.src == *src && r.dst == *dst);
                line.push(match found {
                    _ if src == dst => "-".into(),
                    None => String::new(),
                    Some(r) => cell(r),
                });
            }
            table.add_row(line);
        }
        out += &format!("Mesh '{mesh}', test {test}:\n{table}\n");
    }
    out
}

/// Per test: pairs seen, how many are failing now, and the failing pairs (a mesh too
/// large for its grids).
fn summary(rows: &[MeshRow]) -> String {
    let mut out = String::new();
    let tests: BTreeSet<&str> = rows.iter().map(|r| r.test.as_str()).collect();
    for test in tests {
        let mine: Vec<&MeshRow> = rows.iter().filter(|r| r.test == test).collect();
        let failing: Vec<&&MeshRow> = mine.iter().filter(|r| !r.outcome.is_ok()).collect();
        let cycle = mine.iter().map(|r| r.cycle).max().unwrap_or(0);
        out += &format!(
            "{test}: {} pairs measured, cycle {cycle}, {} failing now\n",
            mine.len(),
            failing.len()
        );
        for r in failing.iter().take(10) {
            out += &format!("  x {} -> {}: {}\n", r.src, r.dst, r.outcome);
        }
        if failing.len() > 10 {
            out += &format!("  ... and {} more\n", failing.len() - 10);
        }
    }
    out
}

/// The live view of a running mesh: redrawn in place on a terminal as rows arrive.
pub struct LiveView {
    mesh: String,
    hosts: usize,
    started: Instant,
    rows: Vec<MeshRow>,
    events: VecDeque<String>,
    counts: [usize; 4],
    drawn: Option<Instant>,
}

impl LiveView {
    pub fn new(mesh: &str, hosts: usize) -> LiveView {
        LiveView {
            mesh: mesh.to_string(),
            hosts,
            started: Instant::now(),
            rows: Vec::new(),
            events: VecDeque::new(),
            counts: [0; 4],
            drawn: None,
        }
    }

    /// A line among the events that is not a job's (hosts found, lost).
    pub fn note(&mut self, text: &str) {
        self.events.push_back(text.to_string());
        while self.events.len() > EVENTS {
            self.events.pop_front();
        }
        self.draw(true);
    }

    pub fn push(&mut self, row: &MeshRow) {
        self.counts[match row.outcome {
            Outcome::Ok => 0,
            Outcome::Failed { .. } => 1,
            Outcome::Skipped { .. } => 2,
            Outcome::Interrupted { .. } => 3,
        }] += 1;
        let what = if row.outcome.is_ok() {
            row.headline_text.clone()
        } else {
            row.outcome.to_string()
        };
        self.events.push_back(format!(
            "cycle {:<3} {:<10} {} -> {}: {what}",
            row.cycle, row.test, row.src, row.dst
        ));
        while self.events.len() > EVENTS {
            self.events.pop_front();
        }
        // Only the newest row of a pair is shown: older ones are dropped as they come.
        self.rows
            .retain(|r| !(r.test == row.test && r.src == row.src && r.dst == row.dst));
        self.rows.push(row.clone());
    }

    /// The whole view as text.
    pub fn render(&self) -> String {
        let [ok, failed, skipped, interrupted] = self.counts;
        let interrupted = if interrupted > 0 {
            format!(", {interrupted} interrupted")
        } else {
            String::new()
        };
        let mut out = format!(
            "Mesh '{}': {} hosts, running {}; {ok} ok, {failed} failed, {skipped} skipped{interrupted} (Ctrl-C stops within 10 s)\n",
            self.mesh,
            self.hosts,
            humantime::format_duration(Duration::from_secs(self.started.elapsed().as_secs())),
        );
        if self.hosts <= GRID_HOSTS {
            out += &tables(&self.mesh, &self.rows);
        } else {
            out += &summary(&self.rows);
        }
        out += "Latest:\n";
        for event in &self.events {
            out += &format!("  {event}\n");
        }
        out
    }

    /// Redraws the view (at most every [`REDRAW`] unless `now`).
    pub fn draw(&mut self, now: bool) {
        if !now && self.drawn.is_some_and(|at| at.elapsed() < REDRAW) {
            return;
        }
        self.drawn = Some(Instant::now());
        let mut out = std::io::stdout().lock();
        // Home, clear to the end, the view.
        let _ = write!(out, "\x1b[H\x1b[J{}", self.render());
        let _ = out.flush();
    }
}

/// Where `mesh run` says what happened: a JSON line per row and event (`--json`), the live
/// view on a terminal, or a line per job and the tables at the end.
pub struct Printer {
    mesh: String,
    json: bool,
    live: Option<LiveView>,
    /// Each pair's newest row, for the tables at the end (the live view keeps its own):
    /// never every row, which a coordinator left running for months would pile up.
    newest: BTreeMap<(String, String, String), MeshRow>,
    failures: usize,
}

impl Printer {
    /// The printer of mesh `name` of `hosts` hosts.
    pub fn new(name: &str, hosts: usize, json: bool) -> Printer {
        use std::io::IsTerminal;
        let live = (!json && std::io::stdout().is_terminal()).then(|| LiveView::new(name, hosts));
        Printer {
            mesh: name.to_string(),
            json,
            live,
            newest: BTreeMap::new(),
            failures: 0,
        }
    }

    /// An event that is not a job's: `event` with --json, else `text`.
    pub fn note(&mut self, text: &str, event: serde_json::Value) {
        match self.live.as_mut() {
            _ if self.json => println!("{event}"),
            Some(view) => view.note(text),
            None => eprintln!("linerate mesh: {text}"),
        }
    }

    pub fn row(&mut self, row: &MeshRow) {
        if !row.outcome.is_ok() && !row.outcome.is_interrupted() {
            self.failures += 1;
        }
        if self.json {
            println!("{}", row_json(row));
            return;
        }
        if let Some(view) = self.live.as_mut() {
            view.push(row);
            view.draw(false);
            return;
        }
        let what = if row.outcome.is_ok() {
            row.headline_text.clone()
        } else {
            row.outcome.to_string()
        };
        println!(
            "cycle {:<3} {:<12} {} -> {}: {what}",
            row.cycle, row.test, row.src, row.dst
        );
        let key = (row.test.clone(), row.src.clone(), row.dst.clone());
        let newer = self
            .newest
            .get(&key)
            .is_none_or(|old| row.started_at >= old.started_at);
        if newer {
            self.newest.insert(key, row.clone());
        }
    }

    /// The last view or the tables; the count of jobs that failed or were skipped.
    pub fn finish(mut self, stopped: bool) -> usize {
        if let Some(view) = self.live.as_mut() {
            view.draw(true);
        } else if !self.json {
            let rows: Vec<MeshRow> = self.newest.into_values().collect();
            print!("{}", tables(&self.mesh, &rows));
        }
        if !self.json && stopped {
            eprintln!(
                "linerate mesh: stopped; the results so far are kept (jobs the stop cut short as interrupted{})",
                if self.failures > 0 {
                    format!("; {} failed or were skipped before it", self.failures)
                } else {
                    String::new()
                }
            );
        }
        self.failures
    }
}

/// Where a mesh's rows are read from: the results database, or an archive.
#[derive(Debug, Clone, Copy)]
pub enum RowsFrom<'a> {
    Store(&'a Storage),
    Archive {
        url: &'a str,
        password_file: Option<&'a Path>,
    },
}

/// `mesh status`: each pair's newest rows, as tables a test, then the jobs that did not
/// measure and why; or the rows as JSON.
pub fn status(name: &str, from: RowsFrom, json: bool) -> Result<()> {
    let (rows, location) = match from {
        RowsFrom::Archive { url, password_file } => {
            let mut archive = open_archive(url, password_file)?;
            (archive.mesh_rows(name, true)?, archive.url().to_string())
        }
        RowsFrom::Store(storage) => {
            let store = storage.open_to_read()?;
            (store.mesh_rows(name, true)?, store.path().to_string())
        }
    };
    if rows.is_empty() {
        return Err(usage(format!(
            "no results of a mesh named '{name}' in {location} (run 'linerate mesh run FILE' first)"
        )));
    }
    if json {
        let doc: Vec<RowJson> = rows.iter().map(RowJson::of).collect();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut out, &doc).context("encoding the rows")?;
        std::io::Write::write_all(&mut out, b"\n")
            .and_then(|()| std::io::Write::flush(&mut out))
            .context("writing the rows")?;
        return Ok(());
    }
    print!("{}", tables(name, &rows));
    for row in rows.iter().filter(|r| !r.outcome.is_ok()) {
        println!(
            "{} {} -> {} (cycle {}): {}",
            row.test, row.src, row.dst, row.cycle, row.outcome
        );
    }
    Ok(())
}

/// `mesh history`: a pair's rows since `--since`, and before them the hourly aggregates
/// that stand for the rows retention removed, each line saying which it is.
pub fn history(
    name: &str,
    file: Option<&Mesh>,
    query: &PairQuery,
    from: RowsFrom,
    json: bool,
) -> Result<()> {
    let (found, location) = match from {
        RowsFrom::Archive { url, password_file } => {
            let mut archive = open_archive(url, password_file)?;
            (archive.pair_history(query)?, archive.url().to_string())
        }
        RowsFrom::Store(storage) => {
            let store = storage.open_to_read()?;
            (store.pair_history(query)?, store.path().to_string())
        }
    };
    if found.rows.is_empty() && found.hourly.is_empty() {
        return Err(usage(format!(
            "no results of {} -> {}{} in mesh '{name}' since {} in {location}",
            query.src,
            query.dst,
            query.test.map_or(String::new(), |t| format!(" ({t})")),
            utc(query.since)
        )));
    }
    let units = history_units(file, &found.rows);
    if json {
        let doc = history_json(
            name,
            (query.src, query.dst, query.test),
            query.since,
            &found,
        );
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("encoding the history")?
        );
        return Ok(());
    }
    println!(
        "Mesh '{name}': {} -> {}, since {}",
        query.src,
        query.dst,
        utc(query.since)
    );
    if let (Some(first), Some(last)) = (found.hourly.first(), found.hourly.last()) {
        println!(
            "Hourly aggregates (the rows were removed by retention): {} to {}",
            utc(first.hour),
            utc(last.hour + 3600.0)
        );
    }
    if let Some(first) = found.rows.first() {
        println!("Rows: from {}", utc(first.started_at));
    }
    println!("{}", history_table(&found, &units));
    Ok(())
}

/// The archive at `url`: a connection string that is not PostgreSQL's is a usage error
/// (exit 2) naming it without its password; one that carries a password works, with a
/// warning that `ps` shows it.
pub fn open_archive(url: &str, password_file: Option<&Path>) -> Result<Archive> {
    let url = postgres_url(url).map_err(usage)?;
    let target = linerate_store::connection::target(&url, &Default::default());
    if target.is_ok_and(|t| t.config.get_password().is_some()) {
        eprintln!(
            "linerate: warning: the archive's password is on the command line, where every local user's ps shows it: give it with --store-password-file, PGPASSWORD or ~/.pgpass"
        );
    }
    let credentials = linerate_store::connection::Credentials::from_env(
        password_file.map(std::path::Path::to_path_buf),
    );
    Ok(Archive::open_with(&url, &credentials)?)
}

/// `--store URL` as PostgreSQL's connection string, checked by the command (a flag
/// parser's error would echo the value, password and all): a URL, or libpq's key-value
/// form; anything else is named without its password.
pub fn postgres_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    let url = text.starts_with("postgres://") || text.starts_with("postgresql://");
    let key_values = !text.contains("://") && text.contains('=');
    if url || key_values {
        Ok(text.to_string())
    } else {
        Err(format!(
            "--store {}: not a PostgreSQL connection string (postgres://USER@HOST[:PORT]/DB, or host=HOST dbname=DB); the results database is --db PATH",
            linerate_store::connection::redact(text)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(src: &str, dst: &str, ok: bool, reason: &str, text: &str, at: f64) -> MeshRow {
        MeshRow {
            run_id: None,
            mesh: "m".into(),
            src: src.into(),
            dst: dst.into(),
            test: "tput".into(),
            direction: "forward".into(),
            protocol: "tcp".into(),
            cycle: 1,
            started_at: at,
            ended_at: at + 1.0,
            outcome: match (ok, reason.strip_prefix("skipped: ")) {
                (true, _) => Outcome::Ok,
                (false, Some(reason)) => Outcome::Skipped {
                    reason: reason.into(),
                },
                (false, None) => Outcome::Failed {
                    blamed: None,
                    reason: reason.into(),
                },
            },
            headline: None,
            headline_text: text.into(),
        }
    }

    /// A coordinator left running prints a line a job and keeps only each pair's newest
    /// row for its closing tables: its memory does not grow with the jobs it ran.
    #[test]
    fn the_plain_printer_keeps_each_pairs_newest_row_only() {
        let mut printer = Printer {
            mesh: "m".into(),
            json: false,
            live: None,
            newest: BTreeMap::new(),
            failures: 0,
        };
        for i in 0..3000 {
            let (src, dst) = [("a", "b"), ("b", "a"), ("a", "c")][i % 3];
            let ok = i % 10 != 0;
            printer.row(&row(
                src,
                dst,
                ok,
                "refused",
                &format!("{i} Mbits/sec"),
                i as f64,
            ));
        }
        assert_eq!(printer.newest.len(), 3);
        let newest = &printer.newest[&("tput".into(), "a".into(), "c".into())];
        assert_eq!(newest.started_at, 2999.0);
        assert_eq!(printer.finish(false), 300);
    }

    #[test]
    fn the_live_view_shows_each_pairs_newest_figure_and_marks_failures_without_colour() {
        let mut view = LiveView::new("m", 3);
        view.push(&row("a", "b", true, "", "1.00 Gbits/sec", 1.0));
        view.push(&row("a", "b", true, "", "2.00 Gbits/sec", 2.0));
        view.push(&row("b", "c", false, "agent b: refused", "", 3.0));
        view.push(&row("c", "a", false, "skipped: host c is down", "", 4.0));
        let text = view.render();
        assert!(text.contains("2 ok, 1 failed, 1 skipped"), "{text}");
        assert!(
            text.contains("2.00 Gbits/sec") && !text.contains("1.00 Gbits/sec │"),
            "{text}"
        );
        assert!(
            text.contains("x failed") && text.contains("- skipped"),
            "{text}"
        );
        assert!(text.contains("b -> c: failed: agent b: refused"), "{text}");
        assert!(text.contains("c -> a: skipped: host c is down"), "{text}");
    }

    #[test]
    fn a_mesh_too_wide_for_a_grid_shows_counts_and_its_failing_pairs() {
        let mut view = LiveView::new("m", 40);
        for i in 0..40 {
            view.push(&row(
                &format!("h{i}"),
                "h0",
                i != 7,
                "refused",
                "9 Mbits/sec",
                1.0,
            ));
        }
        let text = view.render();
        assert!(
            text.contains("tput: 40 pairs measured, cycle 1, 1 failing now"),
            "{text}"
        );
        assert!(text.contains("x h7 -> h0: failed: refused"), "{text}");
        assert!(!text.contains("from \\ to"), "{text}");
    }
}

/// `mesh plan --json`: each test's figures and the first cycle's slots.
pub fn plan_json(mesh: &Mesh, plan: &PlanSummary) -> serde_json::Value {
    let tests: Vec<serde_json::Value> = plan
        .tests
        .iter()
        .map(|t| {
            let test = &mesh.tests[t.test];
            serde_json::json!({
                "test": test.name,
                "run": test.kind.run(),
                "protocol": test.kind.protocol().name(),
                "exclusive": test.exclusive,
                "jobs": t.jobs,
                "rounds": t.rounds,
                "interval_s": test.interval_s,
                "cycle_s": t.cycle_s,
            })
        })
        .collect();
    let schedule: Vec<serde_json::Value> = plan
        .first_cycle
        .iter()
        .map(|slot| {
            let job = slot.job;
            serde_json::json!({
                "test": mesh.tests[job.test].name,
                "src": mesh.hosts[job.src].name,
                "dst": mesh.hosts[job.dst].name,
                "round": job.round + 1,
                "start_s": slot.start_s,
                "end_s": slot.end_s,
            })
        })
        .collect();
    serde_json::json!({
        "mesh": mesh.name,
        "hosts": mesh.hosts.len(),
        "tests": tests,
        "schedule": schedule,
    })
}

/// `mesh plan`'s text: each test's figures and the first cycle of the exclusive tests,
/// round by round; `setup_s` is what a job costs beyond its test's time.
pub fn plan_text(mesh: &Mesh, plan: &PlanSummary, setup_s: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Mesh '{}': {} hosts, {} jobs (each its test's time plus about {setup_s:.0} s to set up)",
        mesh.name,
        mesh.hosts.len(),
        plan.jobs
    );
    for figures in &plan.tests {
        let test = &mesh.tests[figures.test];
        let every = humantime::format_duration(Duration::from_secs_f64(test.interval_s));
        match (figures.rounds, figures.cycle_s) {
            (Some(rounds), Some(cycle_s)) => {
                let _ = writeln!(
        out,
                    "  {} ({} {}, {:.0} s, exclusive): {} jobs in {rounds} rounds, a cycle of {cycle_s:.0} s, every {every}",
                    test.name,
                    test.kind.run(),
                    test.kind.protocol().name(),
                    test.seconds,
                    figures.jobs,
                );
                if cycle_s > test.interval_s {
                    let _ = writeln!(out, "    note: a cycle takes longer than its interval; cycles will run back to back");
                }
            }
            _ => {
                let _ = writeln!(
                    out,
                    "  {} ({} {}, {:.0} s, light{}): {} jobs{}, each every {every} at its own phase",
                    test.name,
                    test.kind.run(),
                    test.kind.protocol().name(),
                    test.seconds,
                    if test.pause_for_exclusive {
                        ", paused beside exclusive tests"
                    } else {
                        ""
                    },
                    figures.jobs,
                    if test.kind.kind().fans_out() {
                        format!(" (one a source, to {} receivers in all)", figures.rows)
                    } else {
                        String::new()
                    },
                );
            }
        }
    }
    // The first cycle of the exclusive tests, round by round.
    let mut by_start: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for slot in &plan.first_cycle {
        let job = slot.job;
        by_start
            .entry((slot.start_s * 1000.0).round() as u64)
            .or_default()
            .push(format!(
                "{} {}->{}",
                mesh.tests[job.test].name, mesh.hosts[job.src].name, mesh.hosts[job.dst].name
            ));
    }
    if !by_start.is_empty() {
        let _ = writeln!(out, "First cycle:");
        for (ms, pairs) in by_start {
            let _ = writeln!(
                out,
                "  +{:>6.0} s  {}",
                ms as f64 / 1000.0,
                pairs.join(", ")
            );
        }
    }
    out
}

/// `mesh history`'s table: the hours, then the rows, each line saying which it is.
pub fn history_table(
    found: &linerate_store::prune::PairHistory,
    units: &HistoryUnits,
) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["when (UTC)", "test", "kept as", "figure", "jobs"]);
    for a in &found.hourly {
        let show = |v: Option<f64>| v.map_or("-".into(), |v| units.text(&a.test, v));
        let figure = match a.median {
            Some(_) => format!(
                "median {} (p95 {}, {} to {})",
                show(a.median),
                show(a.p95),
                show(a.min),
                show(a.max)
            ),
            None => "-".into(),
        };
        let mut jobs = format!("{}/{} ok", a.ok, a.count);
        if a.failed > 0 {
            jobs += &format!(", {} failed", a.failed);
        }
        if a.skipped > 0 {
            jobs += &format!(", {} skipped", a.skipped);
        }
        table.add_row([utc(a.hour), a.test.clone(), "hour".into(), figure, jobs]);
    }
    for r in &found.rows {
        let figure = if r.outcome.is_ok() {
            r.headline_text.clone()
        } else {
            "-".into()
        };
        table.add_row([
            utc(r.started_at),
            r.test.clone(),
            "row".into(),
            figure,
            r.outcome.to_string(),
        ]);
    }
    table
}

/// `mesh history --json`: every point, each with its `source` (`hourly` or `row`).
pub fn history_json(
    name: &str,
    (src, dst, test): (&str, &str, Option<&str>),
    since: f64,
    found: &linerate_store::prune::PairHistory,
) -> serde_json::Value {
    let hourly = found.hourly.iter().map(|a| {
        serde_json::json!({
            "source": "hourly", "at": a.hour, "test": a.test,
            "direction": a.direction, "protocol": a.protocol,
            "count": a.count, "ok": a.ok, "failed": a.failed, "skipped": a.skipped,
            "figures": a.figures, "min": a.min, "median": a.median, "p95": a.p95,
            "max": a.max, "mean": a.mean,
        })
    });
    let rows = found.rows.iter().map(|r| {
        let mut v = row_json(r);
        v["source"] = "row".into();
        v["at"] = r.started_at.into();
        v
    });
    serde_json::json!({
        "mesh": name, "src": src, "dst": dst, "test": test,
        "since": since,
        "rows_from": found.rows.first().map(|r| r.started_at),
        "points": hourly.chain(rows).collect::<Vec<_>>(),
    })
}

/// A time as `2026-11-27 21:00:05`, UTC.
pub fn utc(at: f64) -> String {
    let at = UnixTime::from_seconds(at).system();
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_string()
}

/// How each test's figure is written: the mesh file's kinds when it was given, else what
/// the pair's rows wrote.
pub struct HistoryUnits(BTreeMap<String, FigureUnit>);

#[derive(Clone, Copy)]
enum FigureUnit {
    BitsPerSecond,
    Seconds,
    Rpm,
    Plain,
}

impl HistoryUnits {
    fn text(&self, test: &str, value: f64) -> String {
        match self.0.get(test).copied().unwrap_or(FigureUnit::Plain) {
            FigureUnit::BitsPerSecond => {
                linerate_model::units::format_rate(value, linerate_model::units::Scale::Adaptive)
            }
            FigureUnit::Seconds if value < 1e-3 => format!("{:.1} us", value * 1e6),
            FigureUnit::Seconds if value < 1.0 => format!("{:.3} ms", value * 1e3),
            FigureUnit::Seconds => format!("{value:.3} s"),
            FigureUnit::Rpm => format!("{value:.0} RPM"),
            FigureUnit::Plain => format!("{value:.6}"),
        }
    }
}

pub fn history_units(file: Option<&Mesh>, rows: &[MeshRow]) -> HistoryUnits {
    let mut units = BTreeMap::new();
    if let Some(mesh) = file {
        for test in &mesh.tests {
            let unit = match test.kind.kind().measure() {
                Measure::Goodput => FigureUnit::BitsPerSecond,
                Measure::Latency => FigureUnit::Seconds,
                Measure::Responsiveness => FigureUnit::Rpm,
                Measure::Loss | Measure::Hops | Measure::Mos => FigureUnit::Plain,
            };
            units.insert(test.name.clone(), unit);
        }
    }
    for row in rows.iter().filter(|r| r.outcome.is_ok()) {
        let text = &row.headline_text;
        let unit = if text.contains("bits") {
            FigureUnit::BitsPerSecond
        } else if text.contains("RPM") {
            FigureUnit::Rpm
        } else if text.ends_with('s') {
            FigureUnit::Seconds
        } else {
            continue;
        };
        units.entry(row.test.clone()).or_insert(unit);
    }
    HistoryUnits(units)
}
