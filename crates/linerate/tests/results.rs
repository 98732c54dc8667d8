//! The results database and what reads it, end to end: runs kept and shown as they were
//! printed, sweeps, repetition, compare, export, the HTML report in a real browser, and
//! bad input that must fail cleanly.

mod common;

use common::{chromium_screenshot, host_was_busy, json, stderr};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The binary with its own database at `db` (not the shared scratch one).
fn with_db(db: &Path, args: &[&str]) -> Output {
    common::command()
        .env("LINERATE_DB", db)
        .args(args)
        .output()
        .expect("run linerate")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        stdout(output),
        stderr(output)
    );
    stdout(output)
}

fn db_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("results.db")
}

/// `show` prints a kept run exactly as the run printed its result; with --json, the
/// document byte for byte, which `export` writes too.
#[test]
fn show_prints_what_the_run_printed() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let path = db.display().to_string();
    let runs = [
        vec!["stream", "-t", "0.5", "-i", "0.25"],
        vec![
            "stream",
            "-t",
            "0.3",
            "-i",
            "0",
            "--iterations",
            "2",
            "-w",
            "512k",
        ],
        vec!["rr", "-t", "0.3", "-i", "0", "-P", "2"],
        vec!["crr", "-t", "0.3", "-i", "0"],
    ];
    for (index, args) in runs.iter().enumerate() {
        let id = index + 1;
        let printed = ok(&with_db(&db, args));
        let shown = ok(&with_db(&db, &["show", &id.to_string()]));
        // The header names the run; the rest is the run's own end-of-test text.
        let mut lines = shown.lines();
        assert!(
            lines.next().unwrap().starts_with(&format!("Run {id}: ")),
            "{shown}"
        );
        assert!(lines.next().unwrap().starts_with("Command: "), "{shown}");
        let body: String = lines.map(|l| format!("{l}\n")).collect();
        assert!(body.lines().count() >= 4, "{shown}");
        // A run with intervals shows them as it printed them, then its summary.
        let (intervals, body) = match body.split_once("- - - ") {
            Some((intervals, rest)) if intervals.starts_with("[ ID]") => {
                (intervals.to_string(), format!("- - - {rest}"))
            }
            _ => (String::new(), body),
        };
        if args.contains(&"0.25") {
            assert!(!intervals.is_empty(), "show printed no intervals:\n{shown}");
            assert!(
                printed.contains(&intervals),
                "run printed:\n{printed}\nshow printed:\n{intervals}"
            );
        }
        let stored = format!("Stored as run {id} in {path} ('linerate show {id}')\n");
        assert!(
            printed.ends_with(&format!("{body}{stored}")),
            "run printed:\n{printed}\nshow printed:\n{body}"
        );
    }
    // Repeated runs show every iteration.
    let repeated = ok(&with_db(&db, &["show", "2"]));
    assert!(
        repeated.contains("2 iterations, receiver goodput: mean"),
        "{repeated}"
    );

    let printed = with_db(&db, &["stream", "-t", "0.3", "--json"]);
    let document = ok(&printed);
    assert!(
        stderr(&printed).contains("Stored as run 5"),
        "{}",
        stderr(&printed)
    );
    assert_eq!(ok(&with_db(&db, &["show", "5", "--json"])), document);
    assert_eq!(ok(&with_db(&db, &["export", "5"])), document);
    let exported = dir.path().join("run5.json");
    ok(&with_db(
        &db,
        &[
            "export",
            "5",
            "--format",
            "json",
            "-o",
            exported.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read_to_string(&exported).unwrap(), document);

    // history lists all five, newest first, with their headline figures.
    let listed = json(&with_db(&db, &["history", "--json"]));
    let ids: Vec<i64> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [5, 4, 3, 2, 1]);
    let doc: serde_json::Value = serde_json::from_str(&document).unwrap();
    assert_eq!(listed[0]["headline"], doc["summary"]["receiver_bps"]);
    assert_eq!(listed[0]["test"], "tcp_stream");
    let rr_only = json(&with_db(&db, &["history", "--json", "--test", "tcp_rr"]));
    assert_eq!(rr_only.as_array().unwrap().len(), 1);
    let table = ok(&with_db(&db, &["history", "-n", "1"]));
    assert!(
        table.contains("tcp_stream") && !table.contains("tcp_crr"),
        "{table}"
    );
}

/// `--no-store` keeps nothing; LINERATE_DB and XDG_DATA_HOME choose the file.
#[test]
fn where_runs_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    ok(&with_db(
        &db,
        &["stream", "-t", "0.2", "-i", "0", "--no-store"],
    ));
    assert!(!db.exists(), "--no-store created {}", db.display());
    let data = dir.path().join("data");
    let output = common::command()
        .env_remove("LINERATE_DB")
        .env("XDG_DATA_HOME", &data)
        .args(["stream", "-t", "0.2", "-i", "0"])
        .output()
        .unwrap();
    ok(&output);
    assert!(data.join("linerate/results.db").exists());
    let flag = dir.path().join("flag.db");
    ok(&with_db(
        &db,
        &[
            "stream",
            "-t",
            "0.2",
            "-i",
            "0",
            "--db",
            flag.to_str().unwrap(),
        ],
    ));
    assert!(flag.exists() && !db.exists(), "--db wins over LINERATE_DB");
}

/// A sweep runs the product in order, each point with its settings, and keeps one
/// document; its rows are the seeds' columns.
#[test]
fn a_sweep_runs_every_point_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let output = with_db(
        &db,
        &[
            "sweep",
            "--window",
            "256k,auto",
            "--parallel",
            "2,1",
            "-t",
            "0.3",
            "--json",
        ],
    );
    let doc = json(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(doc["test"], "sweep");
    assert_eq!(doc["sweep_of"], "tcp_stream");
    let points = doc["points"].as_array().unwrap();
    let seen: Vec<(u64, Option<u64>)> = points
        .iter()
        .map(|p| {
            let config = &p["report"]["config"];
            assert_eq!(config["parallel"], p["settings"]["parallel"]);
            assert_eq!(config["window"], p["settings"]["window"]);
            assert!(p["report"]["summary"]["receiver_bps"].as_f64().unwrap() > 0.0);
            (
                config["parallel"].as_u64().unwrap(),
                config["window"].as_u64(),
            )
        })
        .collect();
    // --parallel varies slowest, each list in the order given.
    assert_eq!(
        seen,
        [(2, Some(262_144)), (2, None), (1, Some(262_144)), (1, None)]
    );
    // Every point's own flows and threads.
    assert_eq!(points[0]["report"]["flows"].as_array().unwrap().len(), 2);
    assert_eq!(points[2]["report"]["config"]["threads"], 1);

    let text = ok(&with_db(
        &db,
        &["sweep", "--test", "rr", "--request", "1,2k", "-t", "0.3"],
    ));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Sweeping tcp_rr"), "{text}");
    assert!(lines[1].starts_with("#conn req resp"), "{text}");
    assert!(
        lines[1].contains("tps") && lines[1].contains("p99us"),
        "{text}"
    );
    assert!(lines[2].starts_with("1     1   1 "), "{text}");
    assert!(lines[3].starts_with("1     2K  1 "), "{text}");
    let stream_rows = ok(&with_db(&db, &["show", "1"]));
    assert!(stream_rows.contains("#conn wndsz") && stream_rows.contains("Mbps cpu(usr/sys)"));
    let csv = ok(&with_db(&db, &["export", "1", "--format", "csv"]));
    let rows: Vec<&str> = csv.lines().collect();
    assert!(
        rows[0].starts_with("parallel,window,receiver_bps,"),
        "{csv}"
    );
    assert_eq!(rows.len(), 5);
    assert!(rows[2].starts_with("2,auto,"), "{csv}");
}

/// A UDP sweep over rates: each point's receiver figure follows its own rate, as the
/// kernel's count of datagrams delivered says.
#[test]
fn udp_sweep_points_carry_their_rates() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let output = with_db(
        &db,
        &[
            "sweep", "--udp", "--rate", "20M,60M", "--length", "1000", "-t", "1", "--json",
        ],
    );
    let doc = json(&output);
    for (point, rate) in doc["points"].as_array().unwrap().iter().zip([20e6, 60e6]) {
        let summary = &point["report"]["summary"];
        let received = summary["receiver_bps"].as_f64().unwrap();
        // Short of the rate only where other work held the CPUs (and the report said so).
        let low = if host_was_busy(&point["report"]) {
            1.0
        } else {
            0.05
        };
        assert!(
            received < rate * 1.05 && received > rate * (1.0 - low),
            "{received} vs {rate}"
        );
        // The kernel delivered as many datagrams as linerate counted (and no fewer).
        let kernel = summary["kernel"]["remote"]["in_datagrams"]
            .as_f64()
            .unwrap();
        let counted = summary["received"].as_f64().unwrap();
        assert!(
            kernel >= counted * 0.99,
            "kernel {kernel} vs counted {counted}"
        );
    }
}

/// Runs compared from the database: deltas against the first, and a significance
/// verdict when both were repeated.
#[test]
fn compare_judges_repeated_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    ok(&with_db(
        &db,
        &["rr", "-t", "0.3", "-i", "0", "--iterations", "3"],
    ));
    ok(&with_db(
        &db,
        &[
            "rr",
            "-t",
            "0.3",
            "-i",
            "0",
            "--iterations",
            "3",
            "--request",
            "8k",
        ],
    ));
    ok(&with_db(&db, &["rr", "-t", "0.3", "-i", "0"]));
    let text = ok(&with_db(&db, &["compare", "1", "2", "3"]));
    assert!(
        text.contains("Δ run 2") && text.contains("Round trip p99"),
        "{text}"
    );
    assert!(
        text.contains("Run 2 against run 1: ") && text.contains("significant at 95%"),
        "{text}"
    );
    assert!(text.contains("run 3 ran once"), "{text}");
    let doc = json(&with_db(
        &db,
        &["compare", "1", "2", "--json", "--level", "99"],
    ));
    assert_eq!(doc["level_pct"], 99.0);
    let headline = &doc["metrics"][0];
    assert_eq!(headline["key"], "transactions_per_s");
    let (a, b) = (
        headline["values"][0].as_f64().unwrap(),
        headline["values"][1].as_f64().unwrap(),
    );
    let delta = headline["delta_pct"][1].as_f64().unwrap();
    assert!((delta - (b - a) / a * 100.0).abs() < 1e-6, "{headline}");
    assert!(
        headline["difference"][1]["p_value"].as_f64().is_some(),
        "{headline}"
    );
}

/// Bad input: one line naming the value, the right exit code, and nothing half-written.
#[test]
fn bad_input_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    ok(&with_db(&db, &["stream", "-t", "0.2", "-i", "0"]));
    let before = std::fs::read(&db).unwrap();
    for (args, code, needle) in [
        (vec!["show", "42"], 1, "no run 42"),
        (vec!["export", "42", "--format", "csv"], 1, "no run 42"),
        (vec!["compare", "1"], 2, "2 values required"),
        (vec!["compare", "1", "7"], 1, "no run 7"),
        (vec!["sweep", "--parallel", "8,x"], 2, "'x'"),
        (vec!["sweep", "--parallel", "8,5000"], 2, "'5000'"),
        (vec!["sweep", "--window", "256k,zz"], 2, "'zz'"),
        (vec!["sweep", "--parallel", "8,8"], 2, "lists 8 twice"),
        (
            vec!["sweep", "--request", "1k"],
            2,
            "'--request' applies to --test rr and crr",
        ),
        (vec!["sweep", "--test", "crr", "--udp"], 2, "'--udp'"),
        (vec!["sweep", "--udp", "--length", "8"], 2, "'8'"),
        (vec!["stream", "--confidence", "100,5"], 2, "'100,5'"),
        (vec!["stream", "--iterations", "0"], 2, "'0'"),
        (
            vec!["history", "--since", "yesterday-ish"],
            2,
            "'yesterday-ish'",
        ),
        (vec!["export", "1", "--format", "xml"], 2, "'xml'"),
        (
            vec!["store", "prune", "--older-than", "0s"],
            2,
            "'0s' must be more than 0",
        ),
        (
            vec!["store", "prune", "--older-than", "soon"],
            2,
            "'soon' is not an age",
        ),
        (vec!["store", "prune"], 2, "--older-than"),
    ] {
        let output = with_db(&db, &args);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {message}");
        assert!(message.contains(needle), "{args:?}: {message}");
        assert_eq!(message.trim().lines().count(), 1, "{args:?}: {message}");
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the database is untouched"
    );

    // A damaged file and another program's database are refused before the test runs,
    // and left as they were.
    let damaged = dir.path().join("damaged.db");
    std::fs::write(
        &damaged,
        b"this is not a database, it is a text file\n".repeat(200),
    )
    .unwrap();
    let output = with_db(&damaged, &["stream", "-t", "30"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("damaged or not a database"),
        "{}",
        stderr(&output)
    );
    assert!(
        stdout(&output).is_empty(),
        "no test ran: {}",
        stdout(&output)
    );
    assert!(std::fs::read(&damaged)
        .unwrap()
        .starts_with(b"this is not a database"));
    let output = with_db(&damaged, &["history"]);
    assert_eq!(output.status.code(), Some(1));

    let absent = dir.path().join("absent.db");
    let output = with_db(&absent, &["history"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no results database at"),
        "{}",
        stderr(&output)
    );
    assert!(!absent.exists());

    // compare refuses runs of different tests, and sweeps.
    ok(&with_db(&db, &["rr", "-t", "0.2", "-i", "0"]));
    let output = with_db(&db, &["compare", "1", "2"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("run 2 is tcp_rr and run 1 is tcp_stream"));
}

/// The HTML report is one self-contained file, and a real browser draws it.
#[test]
fn the_html_report_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    ok(&with_db(
        &db,
        &["stream", "-t", "1", "-i", "0.2", "-P", "2", "--per-flow"],
    ));
    ok(&with_db(
        &db,
        &["stream", "-t", "0.3", "-i", "0.1", "--iterations", "2"],
    ));
    ok(&with_db(&db, &["rr", "-t", "0.5", "-i", "0.1"]));
    ok(&with_db(&db, &["sweep", "--parallel", "1,2", "-t", "0.3"]));
    ok(&with_db(
        &db,
        &["sweep", "--parallel", "1,2", "-t", "0.3", "-w", "128k"],
    ));
    let html_path = dir.path().join("report.html");
    let output = with_db(
        &db,
        &[
            "report",
            "1",
            "2",
            "3",
            "4",
            "5",
            "--html",
            html_path.to_str().unwrap(),
        ],
    );
    ok(&output);
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    for id in 1..=5 {
        assert!(
            html.contains(&format!("id=\"run-{id}\"")),
            "run {id} missing"
        );
    }
    assert!(html.contains("id=\"comparison\""));
    assert!(html.contains("Sweeps of tcp_stream compared"));
    assert!(
        html.contains("per flow and in sum"),
        "per-flow goodput chart"
    );
    assert!(html.contains("Latency by percentile"));
    assert!(html.contains("receiver goodput by #conn"));
    assert!(html.matches("<svg").count() >= 8, "charts are inline SVG");
    // Nothing is fetched: no scripts, links, images or URLs other than SVG's namespace.
    for banned in [
        "<script", "<link", "<img", "src=", "href=", "url(", "@import",
    ] {
        assert!(!html.contains(banned), "found {banned}");
    }
    let without_namespace = html.replace("http://www.w3.org/2000/svg", "");
    assert!(!without_namespace.contains("http://") && !without_namespace.contains("https://"));

    let Some(shot) = chromium_screenshot(&html_path, (900, 2400), "html_report") else {
        return;
    };
    let (inked, colours) = shot.ink_and_colours();
    let total = shot.pixels.len() / shot.channels;
    assert!(
        (shot.width, shot.height) == (900, 2400),
        "{}x{}",
        shot.width,
        shot.height
    );
    // Text, axes and coloured lines: a blank or failed page has almost no ink and one
    // or two colours.
    assert!(inked * 100 > total, "only {inked} of {total} pixels drawn");
    assert!(colours > 20, "only {colours} colours");
}

/// A home where the default database cannot be made (here under /proc, where not even
/// root creates a directory) does not stop a test: it runs, and says once that it was not
/// kept, why, and what to give instead. A database asked for with --db that cannot be
/// made still stops the command, its cause said once.
#[test]
fn an_unwritable_home_runs_the_test_and_says_it_was_not_kept() {
    let out = std::process::Command::new(common::binary())
        .env_remove("LINERATE_DB")
        .env_remove("XDG_DATA_HOME")
        .env("HOME", "/proc/linerate-no-home")
        .args(["stream", "-t", "0.3", "--json"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(json(&out)["summary"]["receiver_bytes"].as_u64().unwrap() > 0);
    assert!(
        err.contains("this run is not kept")
            && err.contains("--db PATH")
            && err.contains("--no-store"),
        "{err}"
    );
    let cause = err
        .lines()
        .find(|l| l.contains("not kept"))
        .unwrap_or_default()
        .to_string();
    assert!(cause.contains("/proc/linerate-no-home"), "{cause}");
    // A cause appears once, not again after itself.
    let reason = cause
        .split("cannot create the directory")
        .nth(1)
        .unwrap_or("");
    let first = reason.find("(os error").unwrap_or(0);
    assert!(!reason[first + 1..].contains("(os error"), "{cause}");
    let named = std::process::Command::new(common::binary())
        .args(["--db", "/proc/linerate-no-home/x.db", "stream", "-t", "0.3"])
        .output()
        .unwrap();
    let err = stderr(&named);
    assert_eq!(named.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("(os error").count(), 1, "{err}");
}

/// A run interrupted with Ctrl-C is kept marked as such, and what it did not measure is
/// not shown as a measurement: `history` says "interrupted", a CPU without a reading says
/// "not measured" instead of 0.0 %, and `compare` against a whole run leaves such a CPU
/// out instead of showing it 100 % lower.
#[test]
fn an_interrupted_run_is_marked_and_spoils_no_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    ok(&with_db(&db, &["stream", "-t", "1"]));
    let child = common::command()
        .env("LINERATE_DB", &db)
        .args(["stream", "-t", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(unsafe { kill(child.id() as i32, 2) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let text = stdout(&out);
    let history = ok(&with_db(&db, &["history"]));
    assert!(
        history.lines().any(|l| l.contains("interrupted after")),
        "{history}"
    );
    let shown = json(&with_db(&db, &["show", "2", "--json"]));
    assert!(
        shown["interrupted"]["after_s"].as_f64().unwrap() > 0.0,
        "{shown}"
    );
    let cpu = &shown["summary"]["cpu"]["local"];
    let measured =
        cpu["window_s"].as_f64().unwrap() > 0.0 || cpu["process_pct"].as_f64().unwrap() > 0.0;
    if !measured {
        assert!(text.contains("not measured"), "{text}");
        assert!(!text.contains("peer process 0.0%"), "{text}");
    }
    // The CPU figures the interrupted run did not read are left out ("-"), not shown as
    // falling 100 % (other rows may change as much: retransmits going from 2 to 0).
    let compared = ok(&with_db(&db, &["compare", "1", "2"]));
    for line in compared
        .lines()
        .filter(|l| l.contains("CPU") || l.contains("Service demand"))
    {
        assert!(!line.contains("-100.0"), "{compared}");
        if !measured {
            assert!(
                line.trim_end_matches(['│', ' ']).ends_with('-'),
                "{compared}"
            );
        }
    }
}

extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
}

/// `store prune`: a dry run counts and changes nothing; a prune removes the runs older
/// than the age given and keeps the newer; its JSON says what it did.
#[test]
fn store_prune_removes_what_is_older_than_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    ok(&with_db(&db, &["stream", "-t", "0.2", "-i", "0"]));
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    ok(&with_db(&db, &["stream", "-t", "0.2", "-i", "0"]));
    let started = |db: &Path| -> Vec<f64> {
        let out = ok(&with_db(db, &["history", "-n", "0", "--json"]));
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["started_at"].as_f64().unwrap())
            .collect()
    };
    let times = started(&db);
    assert_eq!(times.len(), 2);
    // An age between the two runs' (their starts 2.5 s apart or more): the older goes.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let middle = (times[0] + times[1]) / 2.0;
    let age = format!("{}ms", ((now - middle) * 1000.0) as u64);
    let dry = ok(&with_db(
        &db,
        &["store", "prune", "--older-than", &age, "--dry-run"],
    ));
    assert!(dry.contains("would remove 1 runs"), "{dry}");
    assert_eq!(started(&db).len(), 2, "a dry run changes nothing");
    let done = json(&with_db(
        &db,
        &["store", "prune", "--older-than", &age, "--json", "--vacuum"],
    ));
    assert_eq!(done["runs"], 1, "{done}");
    assert_eq!(done["vacuumed"], true, "{done}");
    assert_eq!(
        started(&db),
        vec![times[0].max(times[1])],
        "the newer is kept"
    );
    let missing = with_db(
        &dir.path().join("none.db"),
        &["store", "prune", "--older-than", "1d"],
    );
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("no results database"),
        "{}",
        stderr(&missing)
    );
}

/// `mesh history` of a pair whose older rows a prune summed up by the hour: the rows
/// since the prune's cutoff as rows, the hours before it as hourly aggregates (each with
/// its jobs and its figures' median), the two never covering the same time, and each
/// line saying which it is.
#[test]
fn mesh_history_reads_rows_and_past_them_the_hourly_aggregates() {
    use linerate_store::{MeshRow, Outcome, Store};
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let hour = 3600.0;
    let start = ((now - 10.0 * 86_400.0) / hour).floor() * hour;
    let mut rows = Vec::new();
    {
        let mut store = Store::open(&db).unwrap();
        let mut at = start + 60.0;
        let mut cycle = 0;
        while at < now - 60.0 {
            for (dst, value) in [("b", 0.0012), ("c", 0.0030)] {
                let row = MeshRow {
                    run_id: None,
                    mesh: "lab".into(),
                    src: "a".into(),
                    dst: dst.into(),
                    test: "lat".into(),
                    direction: "forward".into(),
                    protocol: "tcp".into(),
                    cycle,
                    started_at: at,
                    ended_at: at + 1.0,
                    outcome: Outcome::Ok,
                    headline: Some(value + (cycle % 3) as f64 * 1e-4),
                    headline_text: format!("{:.2} ms", value * 1e3),
                };
                store.insert_mesh(&row, None).unwrap();
                rows.push(row);
            }
            at += 1800.0;
            cycle += 1;
        }
    }
    ok(&with_db(&db, &["store", "prune", "--older-than", "5d"]));
    let cutoff = ((now - 5.0 * 86_400.0) / hour).floor() * hour;
    let since = now - 8.0 * 86_400.0;
    let doc = json(&with_db(
        &db,
        &[
            "mesh", "history", "lab", "a", "b", "--since", "8d", "--json",
        ],
    ));
    let points = doc["points"].as_array().unwrap();
    let hourly: Vec<&serde_json::Value> =
        points.iter().filter(|p| p["source"] == "hourly").collect();
    let kept: Vec<&serde_json::Value> = points.iter().filter(|p| p["source"] == "row").collect();
    let expected_rows = rows
        .iter()
        .filter(|r| r.dst == "b" && r.started_at >= cutoff && r.started_at >= since)
        .count();
    assert_eq!(kept.len(), expected_rows, "{doc}");
    let expected_hours: std::collections::BTreeSet<i64> = rows
        .iter()
        .filter(|r| r.dst == "b" && r.started_at < cutoff)
        .map(|r| (r.started_at / hour).floor() as i64)
        .filter(|h| *h as f64 * hour >= (since / hour).floor() * hour)
        .collect();
    assert_eq!(hourly.len(), expected_hours.len(), "{doc}");
    for a in &hourly {
        assert_eq!(a["count"], 2, "two rows an hour: {a}");
        assert!(a["median"].as_f64().unwrap() >= 0.0012, "{a}");
        assert!(a["at"].as_f64().unwrap() < cutoff);
    }
    assert!(kept.iter().all(|r| r["at"].as_f64().unwrap() >= cutoff));
    assert!(kept.iter().all(|r| r["dst"] == "b"));
    // The text says which is which.
    let text = ok(&with_db(
        &db,
        &["mesh", "history", "lab", "a", "b", "--since", "8d"],
    ));
    assert!(
        text.contains("Hourly aggregates (the rows were removed by retention)"),
        "{text}"
    );
    println!("{text}");
    assert!(text.contains("Rows: from"), "{text}");
    assert!(
        text.contains("median 1.") && text.contains(" ms (p95"),
        "{text}"
    );
    assert!(
        text.contains("2/2 ok") && text.contains("1.20 ms"),
        "{text}"
    );
    // An unknown pair is a usage error naming it.
    let none = with_db(&db, &["mesh", "history", "lab", "a", "z"]);
    assert_eq!(none.status.code(), Some(2), "{}", stderr(&none));
    assert!(stderr(&none).contains("a -> z"), "{}", stderr(&none));
}
