//! The mesh end to end: hosts as network namespaces on one bridge, each running `linerate
//! serve --key`, and the coordinator in a namespace of its own. In a test binary of its
//! own: the mesh's agents share this machine's two CPUs with nothing else of the suite.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const PORT: &str = "5201";

fn key_file(tag: &str) -> String {
    let key = std::env::temp_dir()
        .join(format!("linerate-{}-{tag}.key", std::process::id()))
        .display()
        .to_string();
    std::fs::write(&key, "the mesh agents' shared key, for this test\n").unwrap();
    key
}

/// The agent of host `i`, on the mesh's port.
fn agent(star: &Star, i: usize, key: &str) -> ServeProcess {
    ServeProcess::start_at(
        Some(&star.hosts[i]),
        &star.addrs[i],
        PORT,
        &["--no-store", "--key", key],
    )
}

/// One mesh at a time: each takes this machine's CPUs.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A mesh of the first `n` hosts: a 1 s throughput test in exclusive slots, cycles back
/// to back (the interval is shorter than a cycle), and a light 1 s rr test every
/// `lat_every` that pauses beside them, and a light connect-per-transaction test (crr)
/// at 20 transactions a second, as often, which does not.
fn mesh_file(star: &Star, n: usize, key: &str, tag: &str, lat_every: &str) -> String {
    let mut text = format!("name = \"{tag}\"\nkey = \"{key}\"\n");
    for i in 0..n {
        text += &format!(
            "[[host]]\nname = \"h{i}\"\naddress = \"{}:{PORT}\"\n",
            star.addrs[i]
        );
    }
    text += &r#"
[[test]]
name = "tput"
run = "stream"
duration = "1s"
interval = "5s"

[[test]]
name = "lat"
run = "rr"
duration = "1s"
interval = "LAT_EVERY"
pause_for_exclusive = true

[[test]]
name = "conn"
run = "crr"
rate = "20/s"
duration = "1s"
interval = "LAT_EVERY"

[[group]]
name = "all"
tests = ["tput", "lat", "conn"]
"#
    .replace("LAT_EVERY", lat_every);
    let path = std::env::temp_dir().join(format!("linerate-{}-{tag}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A results database of the test's own.
fn fresh_db(tag: &str) -> String {
    let path = std::env::temp_dir().join(format!("linerate-{}-{tag}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path.display().to_string()
}

fn rows(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Exclusive rows sharing a host never overlap in time (from the stored start and end).
/// A skipped job's row ran nothing: its time is when it was skipped.
fn assert_no_overlap(rows: &[&serde_json::Value]) {
    let rows: Vec<&&serde_json::Value> =
        rows.iter().filter(|r| r["outcome"] != "skipped").collect();
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            let hosts = |r: &serde_json::Value| [r["src"].clone(), r["dst"].clone()];
            let shared = hosts(a).iter().any(|h| hosts(b).contains(h));
            let overlap = num(a, "/started_at") < num(b, "/ended_at")
                && num(b, "/started_at") < num(a, "/ended_at");
            assert!(
                !(shared && overlap),
                "overlapping exclusive jobs:\n{a}\n{b}"
            );
        }
    }
}

#[test]
fn a_mesh_of_four_measures_every_pair_each_cycle_in_slots_no_host_shares() {
    let test = "a_mesh_of_four_measures_every_pair_each_cycle_in_slots_no_host_shares";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("mesh", 5);
    let key = key_file("mesh");
    let _agents: Vec<ServeProcess> = (0..4).map(|i| agent(&star, i, &key)).collect();
    let file = mesh_file(&star, 4, &key, "four", "2s");
    let db = fresh_db("four");
    let before: Vec<u64> = (0..4).map(|i| star.counter(i, "rx_bytes")).collect();
    let opens = || -> u64 {
        (0..4)
            .map(|i| snmp_counter(&star.hosts[i], "Tcp", "PassiveOpens"))
            .sum()
    };
    let opens_before = opens();
    let out = linerate_in(
        &star.hosts[4],
        &["--db", &db, "mesh", "run", &file, "--cycles", "2", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let after: Vec<u64> = (0..4).map(|i| star.counter(i, "rx_bytes")).collect();
    let opened = opens() - opens_before;
    let rows = rows(&out.stdout);
    let tput: Vec<&serde_json::Value> = rows.iter().filter(|r| r["test"] == "tput").collect();
    // Every ordered pair once in each cycle, each measured.
    for cycle in [1, 2] {
        let pairs: BTreeSet<(String, String)> = tput
            .iter()
            .filter(|r| r["cycle"] == cycle)
            .map(|r| {
                assert_eq!(r["ok"], true, "{r}");
                (r["src"].to_string(), r["dst"].to_string())
            })
            .collect();
        assert_eq!(pairs.len(), 12, "cycle {cycle}: {tput:#?}");
    }
    assert_no_overlap(&tput);
    // The light test ran beside them, and says its round trip.
    let lat: Vec<&serde_json::Value> = rows.iter().filter(|r| r["test"] == "lat").collect();
    assert!(lat.len() >= 4, "{lat:#?}");
    assert!(lat
        .iter()
        .all(|r| r["headline_text"].as_str().unwrap().starts_with("rtt p50")));
    // crr: a connection per transaction, paced at 20 a second; the destinations' kernels
    // accepted at least as many connections as the documents count transactions (beside
    // the agents' own control connections).
    let conn: Vec<&serde_json::Value> = rows.iter().filter(|r| r["test"] == "conn").collect();
    assert!(conn.len() >= 4, "{conn:#?}");
    let mut transactions = 0u64;
    for row in &conn {
        assert_eq!(row["ok"], true, "{row}");
        assert!(
            row["headline_text"]
                .as_str()
                .unwrap()
                .starts_with("connect+rr p50"),
            "{row}"
        );
        let id = row["run_id"].as_i64().expect("a stored run").to_string();
        let shown = linerate_in(&star.hosts[4], &["--db", &db, "show", &id, "--json"]);
        let doc = json(&shown);
        let done = num(&doc, "/groups/0/transactions/0/iterations") as u64;
        let seconds = num(&doc, "/summary/duration_s");
        assert!(done >= 5, "{doc}");
        assert!(
            done as f64 <= 20.0 * seconds + 2.0,
            "paced at 20/s: {done} in {seconds:.2} s"
        );
        transactions += done;
    }
    assert!(
        opened >= transactions,
        "the destinations accepted {opened} connections, the documents count {transactions} transactions"
    );
    // The truth: what each destination received by its stored documents, against its
    // interface's own counter (which carried that and the headers, control and probes).
    for (d, (b, a)) in before.iter().zip(&after).enumerate() {
        let name = format!("h{d}");
        let mut received = 0u64;
        for row in tput.iter().filter(|r| r["dst"] == name.as_str()) {
            let id = row["run_id"].as_i64().expect("a stored run").to_string();
            let shown = linerate_in(&star.hosts[4], &["--db", &db, "show", &id, "--json"]);
            assert!(shown.status.success(), "{}", stderr(&shown));
            received += num(&json(&shown), "/summary/received_bytes") as u64;
        }
        assert!(received > 0, "{name} received nothing");
        assert!(
            a - b >= received,
            "{name}: its interface received {} bytes, the documents say {received}",
            a - b
        );
    }
    // The status: a table per test with every pair's last figure.
    let status = linerate_in(&star.hosts[4], &["--db", &db, "mesh", "status", "four"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("test tput") && text.contains("test lat"),
        "{text}"
    );
    assert!(text.contains("bits/sec"), "{text}");
    // SIGTERM: the coordinator stops starting jobs, ends the running ones within 10 s and
    // keeps what they measured.
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &star.hosts[4], binary()])
        .args(["--db", &db, "mesh", "run", &file, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(coordinator.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a first result").unwrap();
    assert!(first.contains("\"mesh\":\"four\""), "{first}");
    let asked = std::time::Instant::now();
    // SAFETY: signals a child this test started and has not reaped.
    unsafe { libc::kill(coordinator.id() as i32, libc::SIGTERM) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = coordinator.wait().unwrap();
    let took = asked.elapsed().as_secs_f64();
    assert!(took < 12.0, "stopped {took:.1} s after SIGTERM");
    // A stop is the operator's: status 0 (what `systemctl stop` expects), and the jobs
    // it cut short are kept as interrupted, never as failures of their pairs.
    assert_eq!(status.code(), Some(0), "{status:?}: {rest:?}");
    for line in &rest {
        let Ok(row) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        assert_ne!(row["outcome"], "failed", "a job the stop cut short: {row}");
    }
    let kept = linerate_in(
        &star.hosts[4],
        &["--db", &db, "mesh", "status", &file, "--json"],
    );
    assert!(kept.status.success(), "{}", stderr(&kept));
    let newest = json(&kept)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cycle"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        newest >= 3,
        "the stopped run's results are kept (cycle {newest}); after: {rest:?}"
    );
    let marked = rest
        .iter()
        .filter(|l| l.contains("\"outcome\":\"interrupted\""))
        .count();
    eprintln!("{marked} jobs kept as interrupted by the stop");
}

/// The coordinator's Kubernetes manifest carries a mesh file that reads.
#[test]
fn the_shipped_kubernetes_mesh_file_reads() {
    let manifest = std::fs::read_to_string(format!(
        "{}/../../deploy/linerate-mesh.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let block: String = manifest
        .split("  mesh.toml: |\n")
        .nth(1)
        .expect("the ConfigMap's mesh.toml")
        .lines()
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or("")))
        .collect();
    let dir = std::env::temp_dir().join(format!("linerate-{}-k8s", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mesh.toml");
    std::fs::write(&path, &block).unwrap();
    // Its discovery name does not resolve here: read as far as that, which it names.
    let out = linerate(&["mesh", "plan", path.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("discover 'linerate-agents.linerate.svc.cluster.local'"),
        "{err}\n{block}"
    );
    // With a name that resolves (this host's), it plans.
    let local = block.replace("linerate-agents.linerate.svc.cluster.local", "localhost")
        + "[[host]]\nname = \"other\"\naddress = \"192.0.2.1\"\n";
    std::fs::write(&path, local).unwrap();
    let out = linerate(&["mesh", "plan", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Mesh 'cluster'") && text.contains("127.0.0.1"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `mesh run FILE --cycles N --json` on host `ns`, keeping to `db`.
fn mesh_run(ns: &str, db: &str, file: &std::path::Path, cycles: u32) -> std::process::Output {
    let cycles = cycles.to_string();
    let file = file.to_str().unwrap();
    linerate_in(
        ns,
        &[
            "--db", db, "mesh", "run", file, "--cycles", &cycles, "--json",
        ],
    )
}

/// A mesh file of the star's first two hosts (agents on `PORT`, holding `key`) and
/// `tests` (its tests and groups, as TOML), written to a temporary file.
fn two_host_mesh(star: &Star, name: &str, key: &str, tests: &str) -> std::path::PathBuf {
    let mut text = format!("name = \"{name}\"\nkey = \"{key}\"\n");
    for i in 0..2 {
        text += &format!(
            "[[host]]\nname = \"h{i}\"\naddress = \"{}:{PORT}\"\n",
            star.addrs[i]
        );
    }
    text += tests;
    let file = std::env::temp_dir().join(format!("linerate-{}-{name}.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    file
}

/// Twelve hosts, one killed mid-cycle: its jobs fail or are skipped, each with the
/// reason, and the others go on; restarted, its pairs are measured again in the next
/// run, which resumes the cycle count from the store.
#[test]
fn a_host_killed_mid_cycle_of_twelve_is_reported_and_measured_again_once_back() {
    let test = "a_host_killed_mid_cycle_of_twelve_is_reported_and_measured_again_once_back";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    const HOSTS: usize = 12;
    const PAIRS: usize = HOSTS * (HOSTS - 1);
    let _turn = turn();
    let star = Star::new("meshdown", HOSTS + 1);
    let key = key_file("meshdown");
    let mut agents: Vec<Option<ServeProcess>> =
        (0..HOSTS).map(|i| Some(agent(&star, i, &key))).collect();
    // The light test seldom: 132 pairs of it every 2 s would take the CPUs the
    // throughput tests are timed on.
    let file = mesh_file(&star, HOSTS, &key, "down", "60s");
    // And the throughput tests paced: up to six run at once (no host shares a slot), and
    // six unpaced debug-built streams on 2 CPUs left the agents' handshakes waiting past
    // the control timeout (here: 188 of some 760 jobs failed after host 2 came back, five
    // hosts that were never killed taken down, steal 4 %). What this test is about is a
    // host's going and return, not how fast the others can send.
    let paced = std::fs::read_to_string(&file)
        .unwrap()
        .replace("run = \"stream\"\n", "run = \"stream\"\nrate = \"100M\"\n");
    assert!(paced.contains("rate = \"100M\""), "{paced}");
    std::fs::write(&file, paced).unwrap();
    let db = fresh_db("down");
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &star.hosts[HOSTS], binary()])
        .args(["--db", &db, "mesh", "run", &file, "--cycles", "1", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = coordinator.stdout.take().unwrap();
    let mut lines = Vec::new();
    let mut killed_at = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let row: serde_json::Value = serde_json::from_str(&line).unwrap();
        let tput_done = row["test"] == "tput";
        lines.push(row);
        // After the first round, host 2 goes away.
        if tput_done && agents[2].is_some() {
            agents[2] = None;
            killed_at = Some(lines.len());
        }
    }
    let status = coordinator.wait().unwrap();
    assert_eq!(status.code(), Some(1), "some jobs failed: exit 1");
    assert!(killed_at.is_some(), "{lines:#?}");
    let tput: Vec<&serde_json::Value> = lines.iter().filter(|r| r["test"] == "tput").collect();
    assert_eq!(tput.len(), PAIRS, "every job has a row: {tput:#?}");
    let pairs: BTreeSet<(String, String)> = tput
        .iter()
        .map(|r| (r["src"].to_string(), r["dst"].to_string()))
        .collect();
    assert_eq!(pairs.len(), PAIRS, "each ordered pair once: {tput:#?}");
    assert_no_overlap(&tput);
    for row in &tput {
        let with_2 = row["src"] == "h2" || row["dst"] == "h2";
        if !with_2 {
            assert_eq!(row["ok"], true, "the others go on: {row}");
        } else if row["ok"] == false {
            let reason = row["reason"].as_str().unwrap();
            assert!(!reason.is_empty(), "{row}");
        }
    }
    let failed_with_2 = tput
        .iter()
        .filter(|r| r["ok"] == false && (r["src"] == "h2" || r["dst"] == "h2"))
        .count();
    assert!(failed_with_2 >= 1, "{tput:#?}");
    // The job that first finds host 2 gone blames it: a throughput or a light job,
    // whichever tried it first (a stream cut mid-run says the connection was lost).
    assert!(
        lines
            .iter()
            .any(|r| r["outcome"] == "failed" && r["blamed"] == "h2"),
        "a failure blames the host that went away: {lines:#?}"
    );
    assert!(
        tput.iter().any(|r| r["outcome"] == "skipped"
            && r["reason"].as_str().unwrap().starts_with("host h2 is down")),
        "after a failure the rest of its jobs are skipped, naming it: {tput:#?}"
    );
    // Back: the next run resumes at cycle 2 and measures every pair, host 2's too.
    agents[2] = Some(agent(&star, 2, &key));
    let (out, steal) = steal_share_during(|| {
        linerate_in(
            &star.hosts[HOSTS],
            &["--db", &db, "mesh", "run", &file, "--cycles", "1", "--json"],
        )
    });
    let again = rows(&out.stdout);
    let not_ok: Vec<&serde_json::Value> = again.iter().filter(|r| r["ok"] != true).collect();
    let tput: Vec<&serde_json::Value> = again.iter().filter(|r| r["test"] == "tput").collect();
    assert_eq!(tput.len(), PAIRS, "{tput:#?}");
    assert!(tput.iter().all(|r| r["cycle"] == 2), "{tput:#?}");
    assert_no_overlap(&tput);
    // Every job succeeds; where the hypervisor held the host back (a CI run once: 12
    // agents on 2 CPUs, handshakes between two hosts that were never killed timed out),
    // host 2 is still measured both ways, and nothing is skipped as if it were down.
    // What this test is about is host 2's return. On 12 debug-built agents and 2 CPUs a
    // handshake can miss the control timeout even where the host was not stolen from
    // (CI, steal under 3 %: one light job of hundreds; then two agents' dials of their
    // peers; then 8 of some 400 jobs, and one mirror that gave up mid-test). Such a
    // failure is allowed, printed, only where it took no host down: the coordinator
    // dialed the blamed host itself and it answered (before that check, one such failure
    // skipped some fifty jobs of two hosts that were never killed), or the test broke
    // under way and blamed nobody; and at most one job in twenty.
    let loaded = |r: &serde_json::Value| {
        let reason = r["reason"].as_str().unwrap_or("");
        reason.contains("answered the coordinator right after, so it is not taken down")
            || (r["blamed"].is_null() && reason.contains("the peer closed the connection"))
    };
    let held_back = not_ok.iter().filter(|r| loaded(r)).count();
    if steal <= 0.03 {
        if !not_ok.is_empty() {
            eprintln!(
                "{held_back} of {} jobs failed under the host's load, no host taken down: {not_ok:#?}",
                again.len()
            );
        }
        assert!(
            held_back == not_ok.len() && held_back * 20 <= again.len(),
            "{}\nthe jobs that did not succeed: {not_ok:#?}",
            stderr(&out)
        );
    } else {
        eprintln!(
            "steal {:.1} %: {} jobs did not succeed",
            steal * 100.0,
            not_ok.len()
        );
        assert!(
            not_ok.iter().all(|r| !r["reason"]
                .as_str()
                .unwrap_or("")
                .starts_with("host h2 is down")),
            "{not_ok:#?}"
        );
    }
    for (end, name) in [("src", "from"), ("dst", "to")] {
        assert!(
            tput.iter().any(|r| r[end] == "h2" && r["ok"] == true),
            "no job {name} host 2 succeeded: {not_ok:#?}"
        );
    }
}

/// An agent restarted while its test runs: that job fails, naming what happened and no
/// host (the agent answers again at once), and every job after it runs, the restarted
/// agent's included: none is skipped as if its host were down.
#[test]
fn an_agent_restarted_mid_test_fails_that_job_only() {
    let test = "an_agent_restarted_mid_test_fails_that_job_only";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("meshrestart", 3);
    let key = key_file("meshrestart");
    let mut agents: Vec<Option<ServeProcess>> =
        (0..2).map(|i| Some(agent(&star, i, &key))).collect();
    let file = two_host_mesh(
        &star,
        "restart",
        &key,
        "[[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"6s\"\ninterval = \"1s\"\n\
             [[group]]\nname = \"all\"\ntests = [\"tput\"]\n",
    );
    let db = fresh_db("restart");
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &star.hosts[2], binary()])
        .args(["--db", &db, "mesh", "run"])
        .arg(&file)
        .args(["--cycles", "2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = coordinator.stdout.take().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        lines.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        if lines.len() == 1 {
            // The second job is under way once bulk data moves through h1's interface
            // (every job here has h1 at one end; set-up moves a few kilobytes).
            let moved = || {
                let out = Command::new("ip")
                    .args(["netns", "exec", &star.hosts[1], "cat", "/proc/net/dev"])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| l.contains(':') && !l.trim_start().starts_with("lo:"))
                    .filter_map(|l| {
                        let fields: Vec<u64> = l
                            .split(':')
                            .nth(1)?
                            .split_whitespace()
                            .filter_map(|f| f.parse().ok())
                            .collect();
                        Some(fields.first()? + fields.get(8)?)
                    })
                    .sum::<u64>()
            };
            wait_until("the second job's data moving", 20, || {
                let before = moved();
                std::thread::sleep(std::time::Duration::from_millis(200));
                moved() - before > 5_000_000
            });
            agents[1] = None;
            agents[1] = Some(agent(&star, 1, &key));
        }
    }
    let status = coordinator.wait().unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(status.code(), Some(1), "one job failed: exit 1; {lines:#?}");
    assert_eq!(lines.len(), 4, "two cycles of two pairs: {lines:#?}");
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok", "failed", "ok", "ok"], "{lines:#?}");
    let failed = &lines[1];
    assert!(
        failed["blamed"].is_null(),
        "no host taken for down: {failed}"
    );
    assert!(!failed["reason"].as_str().unwrap().is_empty(), "{failed}");
    // The restarted agent served both directions after it.
    let after: BTreeSet<(String, String)> = lines[2..]
        .iter()
        .map(|r| (r["src"].to_string(), r["dst"].to_string()))
        .collect();
    assert_eq!(after.len(), 2, "{lines:#?}");
    let _ = std::fs::remove_file(&db);
}

/// Two agents that cannot reach each other but both answer the coordinator: every job
/// between them fails (the source's agent cannot use its peer), and no host is taken
/// down for it, since the coordinator dials the blamed host itself and it answers; so no
/// job is skipped as if a host were gone, and each row says why nobody is blamed.
#[test]
fn a_host_another_agent_cannot_reach_but_the_coordinator_can_is_not_taken_down() {
    let test = "a_host_another_agent_cannot_reach_but_the_coordinator_can_is_not_taken_down";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("meshsplit", 3);
    let key = key_file("meshsplit");
    let _agents: Vec<ServeProcess> = (0..2).map(|i| agent(&star, i, &key)).collect();
    // h0 has no route to h1 (nor back: h1's answers to h0 are unroutable in h0's
    // namespace), while the coordinator on h2 reaches both.
    let cut = Command::new("ip")
        .args([
            "netns",
            "exec",
            &star.hosts[0],
            "ip",
            "route",
            "add",
            "unreachable",
        ])
        .arg(format!("{}/32", star.addrs[1]))
        .status()
        .unwrap();
    assert!(cut.success());
    let file = two_host_mesh(
        &star,
        "split",
        &key,
        "[[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"2s\"\ninterval = \"1s\"\n\
             [[group]]\nname = \"all\"\ntests = [\"tput\"]\n",
    );
    let db = fresh_db("split");
    let out = mesh_run(&star.hosts[2], &db, &file, 2);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&db);
    let lines = rows(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "jobs failed: exit 1; {lines:#?}"
    );
    assert_eq!(
        lines.len(),
        4,
        "two cycles of two pairs, none skipped: {lines:#?}"
    );
    for row in &lines {
        let reason = row["reason"].as_str().unwrap_or("");
        assert_eq!(row["outcome"], "failed", "{row}");
        assert!(row["blamed"].is_null(), "no host taken for down: {row}");
        assert!(
            reason.contains("answered the coordinator right after, so it is not taken down"),
            "{row}"
        );
    }
    let pairs: BTreeSet<(String, String)> = lines
        .iter()
        .map(|r| (r["src"].to_string(), r["dst"].to_string()))
        .collect();
    assert_eq!(pairs.len(), 2, "both directions tried: {lines:#?}");
}

#[test]
fn mistakes_in_a_mesh_file_are_one_line_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("linerate-{}-meshbad", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = "[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n[[host]]\nname = \"b\"\naddress = \"10.0.0.2\"\n\
                [[test]]\nname = \"t\"\nrun = \"stream\"\ninterval = \"1h\"\n[[group]]\nname = \"g\"\ntests = [\"t\"]\n";
    for (text, needle) in [
        (
            good.replace(
                "tests = [\"t\"]",
                "hosts = [\"a\", \"zz\"]\ntests = [\"t\"]",
            ),
            "unknown host 'zz'",
        ),
        (
            good.replace("interval = \"1h\"", "interval = \"hourly\""),
            "interval 'hourly' is not a time",
        ),
        (
            good.replace("name = \"b\"", "name = \"a\""),
            "host 'a' is named twice",
        ),
    ] {
        let path = dir.join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = linerate(&["mesh", "plan", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(needle) && err.contains("bad.toml:"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // A mesh without a key cannot run: its agents would not dial each other.
    let path = dir.join("nokey.toml");
    std::fs::write(&path, good).unwrap();
    let out = linerate(&["--no-store", "mesh", "run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no key"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(dir);
}

/// A real PostgreSQL server (Debian's), in a network namespace, on a directory of its
/// own, with trust authentication for the test's user; stopped and removed on drop.
struct Postgres {
    child: std::process::Child,
    dir: std::path::PathBuf,
    url: String,
    /// How it was started, to start it again.
    launch: PgLaunch,
}

/// A server's command line: started once, and again after a stop.
struct PgLaunch {
    ns: String,
    addr: String,
    bin: std::path::PathBuf,
    data: std::path::PathBuf,
    dir: std::path::PathBuf,
    port: &'static str,
    settings: Vec<String>,
}

impl PgLaunch {
    fn spawn(&self) -> Result<std::process::Child, String> {
        // setpriv execs the server itself (runuser would stay its parent and keep the
        // signals the test sends it to stop it).
        let mut command = Command::new("ip");
        command
            .args([
                "netns", "exec", &self.ns, "setpriv", "--reuid", "postgres", "--regid", "postgres",
            ])
            .args(["--clear-groups", "--"])
            .arg(self.bin.join("postgres"))
            .args([
                "-D",
                self.data.to_str().unwrap(),
                "-p",
                self.port,
                "-k",
                self.dir.to_str().unwrap(),
            ]);
        for setting in &self.settings {
            command.args(["-c", setting]);
        }
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("postgres: {e}"))
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let ready = Command::new("ip")
                .args(["netns", "exec", &self.ns])
                .arg(self.bin.join("pg_isready"))
                .args(["-h", &self.addr, "-p", self.port])
                .output()
                .is_ok_and(|o| o.status.success());
            if ready {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err("PostgreSQL did not become ready within 30 s".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

/// What a test's PostgreSQL takes: plain with trust, or TLS only with a password.
struct PgSecurity {
    /// The server's certificate and key (PEM files), and TLS required of every client.
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The superuser's password, required (SCRAM) of every client over the network.
    password: Option<&'static str>,
}

impl Postgres {
    /// `None` (with the reason) when PostgreSQL is not installed.
    fn start(ns: &str, addr: &str) -> Result<Postgres, String> {
        Self::start_secured(
            ns,
            addr,
            "pg",
            PgSecurity {
                tls: None,
                password: None,
            },
        )
    }

    /// A server in `ns` on `addr`, its files under a directory named by `tag`.
    fn start_secured(
        ns: &str,
        addr: &str,
        tag: &str,
        security: PgSecurity,
    ) -> Result<Postgres, String> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|_| "PostgreSQL is not installed (/usr/lib/postgresql)".to_string())?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("postgres").exists())
            .ok_or("no postgres binary under /usr/lib/postgresql")?;
        let dir = std::env::temp_dir().join(format!("linerate-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        run("chown", &["postgres:postgres", dir.to_str().unwrap()]);
        let data = dir.join("data");
        let mut initdb = Command::new("runuser");
        initdb
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .args(["-D", data.to_str().unwrap(), "-U", "linerate", "--no-sync"]);
        match security.password {
            Some(password) => {
                let file = dir.join("pwfile");
                std::fs::write(&file, format!("{password}\n")).unwrap();
                run("chown", &["postgres:postgres", file.to_str().unwrap()]);
                initdb
                    .args(["--auth-local", "trust", "--auth-host", "scram-sha-256"])
                    .arg(format!("--pwfile={}", file.display()));
            }
            None => {
                initdb.args(["-A", "trust"]);
            }
        }
        let initdb = initdb.output().map_err(|e| format!("initdb: {e}"))?;
        if !initdb.status.success() {
            return Err(format!("initdb failed: {}", stderr(&initdb)));
        }
        // The namespace's own address: a test server no one else reaches. With TLS, a
        // connection without it is refused, so a test that connects proves it was used.
        let hba = data.join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
        let method = if security.password.is_some() {
            "scram-sha-256"
        } else {
            "trust"
        };
        if security.tls.is_some() {
            rules += &format!(
                "hostssl all all {addr}/32 {method}\nhostnossl all all {addr}/32 reject\n"
            );
        } else {
            rules += &format!("host all all {addr}/32 {method}\n");
        }
        std::fs::write(&hba, rules).map_err(|e| format!("pg_hba.conf: {e}"))?;
        let mut settings = vec![format!("listen_addresses={addr}"), "fsync=off".to_string()];
        if let Some((cert, key)) = &security.tls {
            let (kept_cert, kept_key) = (data.join("server.crt"), data.join("server.key"));
            std::fs::copy(cert, &kept_cert).unwrap();
            std::fs::copy(key, &kept_key).unwrap();
            for file in [&kept_cert, &kept_key] {
                run("chown", &["postgres:postgres", file.to_str().unwrap()]);
                run("chmod", &["0600", file.to_str().unwrap()]);
            }
            settings.extend([
                "ssl=on".to_string(),
                format!("ssl_cert_file={}", kept_cert.display()),
                format!("ssl_key_file={}", kept_key.display()),
            ]);
        }
        let port = "54329";
        let launch = PgLaunch {
            ns: ns.to_string(),
            addr: addr.to_string(),
            bin,
            data,
            dir: dir.clone(),
            port,
            settings,
        };
        let child = launch.spawn()?;
        // Not this machine's loopback: without TLS the test says so (verify-full is the
        // default for any other host).
        let url = match security.tls {
            Some(_) => format!("postgres://linerate@{addr}:{port}/postgres"),
            None => format!("postgres://linerate@{addr}:{port}/postgres?sslmode=disable"),
        };
        let server = Postgres {
            child,
            dir,
            url,
            launch,
        };
        server.launch.wait_ready()?;
        Ok(server)
    }

    /// Stops the server (a fast shutdown: its clients are cut off), keeping its files.
    fn stop(&mut self) {
        // SAFETY: signals the server this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }

    /// Starts the stopped server again on its files.
    fn start_again(&mut self) {
        self.child = self.launch.spawn().unwrap();
        self.launch.wait_ready().unwrap();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown; none for a server already stopped (its
        // process id may be another's by now).
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: signals the server this test started, still running.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A mesh's hosts with PostgreSQL on the last: `agents` hosts running agents, one more
/// for the coordinator and the server. `None` (the test skipped, with the reason) without
/// root or PostgreSQL.
struct PgMesh {
    star: Star,
    postgres: Postgres,
    key: String,
    _agents: Vec<ServeProcess>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl PgMesh {
    fn start(test: &str, tag: &str, agents: usize) -> Option<PgMesh> {
        if !is_root() {
            skip(
                test,
                "needs root for network namespaces and to run PostgreSQL as its user",
            );
            return None;
        }
        let turn = turn();
        let star = Star::new(tag, agents + 1);
        let postgres = match Postgres::start(&star.hosts[agents], &star.addrs[agents]) {
            Ok(server) => server,
            Err(reason) => {
                skip(test, &reason);
                return None;
            }
        };
        let key = key_file(tag);
        let running = (0..agents).map(|i| agent(&star, i, &key)).collect();
        Some(PgMesh {
            star,
            postgres,
            key,
            _agents: running,
            _turn: turn,
        })
    }
}

/// Two coordinators (two meshes over disjoint hosts) write to one PostgreSQL archive at
/// once: every row each printed is in the archive once, with its run, nothing lost or
/// doubled; `mesh status --store` reads it back.
#[test]
fn two_coordinators_share_one_postgresql_archive() {
    let test = "two_coordinators_share_one_postgresql_archive";
    let Some(lab) = PgMesh::start(test, "meshpg", 4) else {
        return;
    };
    let (star, postgres, key) = (&lab.star, &lab.postgres, &lab.key);
    // Mesh "left" over hosts 0 and 1, mesh "right" over 2 and 3.
    let all = mesh_file(star, 4, key, "pgall", "2s");
    let text = std::fs::read_to_string(&all).unwrap();
    let only = |name: &str, hosts: [&str; 2]| {
        let path =
            std::env::temp_dir().join(format!("linerate-{}-{name}.toml", std::process::id()));
        let text = text
            .replace("name = \"pgall\"", &format!("name = \"{name}\""))
            .replace(
                "name = \"all\"",
                &format!(
                    "name = \"all\"\nhosts = [\"{}\", \"{}\"]",
                    hosts[0], hosts[1]
                ),
            );
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (left, right) = (only("left", ["h0", "h1"]), only("right", ["h2", "h3"]));
    let coordinator = |file: &str| {
        Command::new("ip")
            .args(["netns", "exec", &star.hosts[4], binary()])
            .args(["--no-store", "mesh", "run", file, "--cycles", "3", "--json"])
            .args(["--store", &postgres.url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (coordinator(&left), coordinator(&right));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    // The archive is reached from the coordinators' namespace: this thread moves there
    // (a network namespace is a thread's own).
    let ns = std::fs::File::open(format!("/var/run/netns/{}", star.hosts[4])).unwrap();
    let scope = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                use std::os::fd::AsRawFd;
                // SAFETY: the descriptor is an open network namespace; only this thread moves.
                assert_eq!(
                    unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                    0
                );
                check_archive(&postgres.url, &a, &b);
            })
            .join()
    });
    if let Err(panic) = scope {
        std::panic::resume_unwind(panic);
    }
    let status = linerate_in(
        &star.hosts[4],
        &["mesh", "status", "left", "--store", &postgres.url, "--json"],
    );
    assert!(status.status.success(), "{}", stderr(&status));
    let latest = json(&status);
    assert_eq!(
        latest.as_array().unwrap().len(),
        6,
        "two pairs x three tests: {latest}"
    );
    // A URL that is not PostgreSQL's is refused by the flag, exit 2.
    let out = linerate(&["mesh", "status", "left", "--store", "/tmp/x.db"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The coordinator's /metrics as curl reads it from namespace `ns`: each unlabelled
/// sample's value by name.
fn coordinator_metrics(ns: &str, addr: &str) -> std::collections::BTreeMap<String, f64> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "-m", "5"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// A coordinator (`mesh run --json`) running in a namespace, the rows it prints
/// collected as they come (not the events between them).
struct RunningMesh {
    child: std::process::Child,
    printed: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    ns: String,
}

impl RunningMesh {
    fn start(ns: &str, global: &[&str], file: &str, local: &[&str]) -> RunningMesh {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, binary()])
            .args(global)
            .args(["mesh", "run", file, "--json"])
            .args(local)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stdout, into) = (child.stdout.take().unwrap(), printed.clone());
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let row: serde_json::Value = serde_json::from_str(&line).unwrap();
                if row.get("src").is_some() {
                    into.lock().unwrap().push(row);
                }
            }
        });
        RunningMesh {
            child,
            printed,
            reader: Some(reader),
            ns: ns.to_string(),
        }
    }

    fn count(&self) -> usize {
        self.printed.lock().unwrap().len()
    }

    /// A coordinator metric without labels, read over HTTP from `listen`; NaN when absent.
    fn metric(&self, listen: &str, name: &str) -> f64 {
        coordinator_metrics(&self.ns, listen)
            .get(name)
            .copied()
            .unwrap_or(f64::NAN)
    }

    /// Interrupts it: its rows, and what it said on stderr. Jobs the interrupt cut short
    /// count as failed: exit 1, not a crash.
    fn interrupt(mut self) -> (Vec<serde_json::Value>, String) {
        // SAFETY: interrupts the coordinator this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut said = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut said).unwrap();
        let code = self.child.wait().unwrap().code();
        assert!(matches!(code, Some(0 | 1)), "{code:?}: {said}");
        self.reader.take().unwrap().join().unwrap();
        let printed = self.printed.lock().unwrap().clone();
        (printed, said)
    }
}

/// Waits for `done`, polling, at most `within` seconds (the test fails then).
fn wait_until(what: &str, within: u64, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(within);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited {within} s for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// A job as one line: source, destination, test, cycle and start to the microsecond.
fn job_line(src: &str, dst: &str, test: &str, cycle: i64, started_at: f64) -> String {
    format!("{src} {dst} {test} {cycle} {started_at:.6}")
}

/// The printed rows' jobs, in the order printed.
fn printed_jobs(printed: &[serde_json::Value]) -> Vec<String> {
    printed
        .iter()
        .map(|r| {
            job_line(
                r["src"].as_str().unwrap(),
                r["dst"].as_str().unwrap(),
                r["test"].as_str().unwrap(),
                r["cycle"].as_i64().unwrap(),
                num(r, "/started_at"),
            )
        })
        .collect()
}

/// The jobs a SQLite store keeps, in the order written, and whether the file is whole.
fn stored_jobs(db: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut statement = conn
        .prepare("SELECT src, dst, test, cycle, started_at FROM mesh_results ORDER BY id")
        .unwrap();
    let jobs = statement
        .query_map([], |r| {
            Ok(job_line(
                &r.get::<_, String>(0)?,
                &r.get::<_, String>(1)?,
                &r.get::<_, String>(2)?,
                r.get(3)?,
                r.get(4)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    jobs
}

/// The archive stopped for 60 s in the middle of a running mesh and started again: the
/// coordinator goes on measuring, says once that results wait in its spool (its
/// metrics too), and writes them once the archive is back. Every job that ran is in the
/// archive exactly once and in the order it ended, and the spool drains to zero.
#[test]
// Long: a mesh, an outage and its recovery watched through the metrics, then every row
// checked against the archive.
fn an_archive_down_for_a_minute_loses_no_result_and_doubles_none() {
    let test = "an_archive_down_for_a_minute_loses_no_result_and_doubles_none";
    if !have("curl", test) {
        return;
    }
    let Some(mut lab) = PgMesh::start(test, "meshspool", 3) else {
        return;
    };
    let (star, key) = (&lab.star, &lab.key);
    let file = mesh_file(star, 3, key, "spooled", "2s");
    let spool = std::env::temp_dir().join(format!("linerate-{}-spool.db", std::process::id()));
    let _ = std::fs::remove_file(&spool);
    let mut text = std::fs::read_to_string(&file).unwrap();
    text = text.replacen(
        "[[host]]",
        &format!("[store]\nspool = \"{}\"\n\n[[host]]", spool.display()),
        1,
    );
    std::fs::write(&file, text).unwrap();
    let listen = "127.0.0.1:9477";
    let mesh = RunningMesh::start(
        &star.hosts[3],
        &["--no-store"],
        &file,
        &["--store", &lab.postgres.url, "--metrics", listen],
    );
    let metric = |name: &str| mesh.metric(listen, name);
    wait_until("six results", 60, || mesh.count() >= 6);
    assert_eq!(metric("linerate_store_writing"), 1.0);
    let before_outage = mesh.count();
    lab.postgres.stop();
    let stopped = std::time::Instant::now();
    wait_until("results to wait in the spool", 40, || {
        metric("linerate_store_waiting_results") >= 3.0
    });
    assert_eq!(metric("linerate_store_writing"), 0.0);
    assert!(metric("linerate_store_write_failures_total") >= 1.0);
    std::thread::sleep(std::time::Duration::from_secs(60).saturating_sub(stopped.elapsed()));
    let during_outage = mesh.count() - before_outage;
    assert!(
        during_outage >= 10,
        "the mesh went on measuring: {during_outage} results in 60 s"
    );
    let oldest = metric("linerate_store_oldest_waiting_seconds");
    assert!(
        oldest >= 40.0,
        "the oldest has waited since the stop: {oldest} s"
    );
    lab.postgres.start_again();
    // The writer tries again at most 30 s apart.
    wait_until("the spool to drain", 90, || {
        metric("linerate_store_waiting_results") == 0.0 && metric("linerate_store_writing") == 1.0
    });
    let replayed = metric("linerate_store_replayed_results_total");
    assert_eq!(metric("linerate_store_dropped_results_total"), 0.0);
    assert_eq!(metric("linerate_store_dropped_documents_total"), 0.0);
    // A few more, written directly again.
    let after = mesh.count();
    wait_until("results after the outage", 60, || mesh.count() >= after + 3);
    let (printed, said) = mesh.interrupt();
    assert_eq!(
        said.matches("cannot write to the store").count(),
        1,
        "said once: {said}"
    );
    assert!(said.contains("takes writes again"), "{said}");
    let url = lab.postgres.url.clone();
    let stored = in_netns(&star.hosts[3], move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client
            .query(
                "SELECT src, dst, test, cycle, started_at, run_id IS NOT NULL
                 FROM linerate_mesh_results WHERE mesh = 'spooled' ORDER BY id",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| {
                (
                    job_line(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)),
                    r.get::<_, bool>(5),
                )
            })
            .collect::<Vec<_>>()
    });
    let kept: Vec<String> = stored.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        kept,
        printed_jobs(&printed),
        "every printed result once, in order"
    );
    // Each result that measured kept its document through the spool.
    for (row, (_, with_run)) in printed.iter().zip(&stored) {
        if row["outcome"] == "ok" {
            assert!(*with_run, "{row}");
        }
    }
    // A result spooled is printed without its run id (it is not known yet); one written
    // in the moment before the stop, or slowly, may have one or not.
    let unknown = printed.iter().filter(|r| r["run_id"].is_null()).count();
    assert!(
        replayed >= 1.0 && replayed <= unknown as f64 && unknown >= during_outage / 2,
        "{replayed} replayed, {unknown} printed without a run id, {during_outage} printed in the outage"
    );
    let _ = std::fs::remove_file(&spool);
}

/// A tmpfs mounted for a test, unmounted (with what is in it) on drop.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(tag: &str, size: &str) -> SmallDisk {
        let dir = std::env::temp_dir().join(format!("linerate-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                dir.to_str().unwrap(),
            ],
        );
        SmallDisk(dir)
    }

    /// Fills what is left of it with one file; its path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 << 10];
        while file.write_all(&block).is_ok() {}
        // The last partial blocks too.
        while file.write_all(&block[..512]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The disk under the SQLite results database fills up mid-run: one line says the store
/// cannot be written, the mesh goes on measuring (its results in memory and in
/// /metrics), and once space is freed every result is written, each once; the database
/// passes SQLite's integrity check.
#[test]
// Long: a mesh, its disk filled and freed, then every row and the file checked.
fn a_full_disk_under_the_store_stops_writing_not_measuring_and_writing_resumes() {
    let test = "a_full_disk_under_the_store_stops_writing_not_measuring_and_writing_resumes";
    if !is_root() {
        skip(
            test,
            "needs root for network namespaces and to mount a tmpfs",
        );
        return;
    }
    if !have("curl", test) {
        return;
    }
    let _turn = turn();
    let star = Star::new("meshfull", 3);
    let key = key_file("meshfull");
    let _agents: Vec<ServeProcess> = (0..2).map(|i| agent(&star, i, &key)).collect();
    let file = mesh_file(&star, 2, &key, "fulldisk", "1s");
    let disk = SmallDisk::mount("fulldisk", "4m");
    let db = disk.0.join("results.db");
    let listen = "127.0.0.1:9478";
    let mesh = RunningMesh::start(
        &star.hosts[2],
        &["--db", db.to_str().unwrap()],
        &file,
        &["--metrics", listen],
    );
    let metric = |name: &str| mesh.metric(listen, name);
    wait_until("four results", 60, || mesh.count() >= 4);
    let filler = disk.fill();
    // The store refuses at its next write that needs a page the disk no longer has.
    wait_until("the store to refuse", 90, || {
        metric("linerate_store_writing") == 0.0
    });
    let refused_at = mesh.count();
    wait_until("measuring to go on", 60, || mesh.count() >= refused_at + 10);
    assert!(metric("linerate_store_waiting_results") >= 5.0);
    let scraped = coordinator_metrics(&star.hosts[2], listen);
    assert!(
        scraped
            .keys()
            .any(|k| k.starts_with("linerate_tests_total")),
        "figures still reach /metrics: {scraped:?}"
    );
    std::fs::remove_file(&filler).unwrap();
    wait_until("writing to resume", 90, || {
        metric("linerate_store_writing") == 1.0 && metric("linerate_store_waiting_results") == 0.0
    });
    let after = mesh.count();
    wait_until("results after", 60, || mesh.count() >= after + 2);
    let (printed, said) = mesh.interrupt();
    let refusals: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("cannot write to the store"))
        .collect();
    assert_eq!(refusals.len(), 1, "one line: {said}");
    assert!(refusals[0].contains("full"), "{}", refusals[0]);
    assert!(said.contains("takes writes again"), "{said}");
    assert_eq!(
        stored_jobs(&db),
        printed_jobs(&printed),
        "every printed result once, in order"
    );
    drop(disk);
}

/// The coordinator killed with SIGKILL at ten moments over a mesh run, and started
/// again each time on the same store: every result it printed is stored once, nothing
/// is stored twice (a job's key is unique, and the exclusive test's cycles of a pair are
/// each stored once), and the store is whole. A result stored in the moment a kill cut
/// its line short is the only kind stored and not printed: at most one a kill.
#[test]
// Long: ten starts and kills, then the union of what was printed against the store.
fn a_coordinator_killed_ten_times_resumes_without_a_missing_or_doubled_row() {
    let test = "a_coordinator_killed_ten_times_resumes_without_a_missing_or_doubled_row";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("meshkill", 4);
    let key = key_file("meshkill");
    let _agents: Vec<ServeProcess> = (0..3).map(|i| agent(&star, i, &key)).collect();
    let file = mesh_file(&star, 3, &key, "killed", "1s");
    let db = fresh_db("killed");
    // Moments drawn from a seed that is printed, so that a failure can be replayed.
    let mut seed = u64::from(std::process::id()) | 1;
    println!("{test}: seed {seed}");
    let mut draw = |below_ms: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below_ms
    };
    let mut printed: Vec<serde_json::Value> = Vec::new();
    for _ in 0..10 {
        let mut coordinator = Command::new("ip")
            .args(["netns", "exec", &star.hosts[3], binary()])
            .args(["--db", &db, "mesh", "run", &file, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500 + draw(4000)));
        // SAFETY: kills the coordinator this test started (ip execs it: the same process).
        unsafe { libc::kill(coordinator.id() as i32, libc::SIGKILL) };
        coordinator.wait().unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(coordinator.stdout.as_mut().unwrap(), &mut out).unwrap();
        // A line the kill cut short is not a printed row.
        printed.extend(
            out.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|r| r.get("src").is_some()),
        );
    }
    assert!(printed.len() >= 20, "{} rows printed", printed.len());
    let stored_keys = stored_jobs(std::path::Path::new(&db));
    let unique: BTreeSet<&String> = stored_keys.iter().collect();
    assert_eq!(unique.len(), stored_keys.len(), "no row twice");
    // "src dst test cycle started_at": the exclusive test's (src, dst, cycle).
    let exclusive: Vec<(&str, &str, &str)> = stored_keys
        .iter()
        .map(|k| k.split(' ').collect::<Vec<_>>())
        .filter(|f| f[2] == "tput")
        .map(|f| (f[0], f[1], f[3]))
        .collect();
    let exclusive_unique: BTreeSet<_> = exclusive.iter().collect();
    assert_eq!(
        exclusive_unique.len(),
        exclusive.len(),
        "no exclusive cycle of a pair run and stored twice: {exclusive:?}"
    );
    for key in printed_jobs(&printed) {
        assert!(unique.contains(&key), "printed, not stored: {key}");
    }
    let unprinted = stored_keys.len() - printed.len();
    assert!(
        unprinted <= 10,
        "{unprinted} rows stored and never printed (at most one a kill)"
    );
}

/// `work` on a thread of its own moved into network namespace `ns` (a network namespace
/// is a thread's own): what reaches a server there as the coordinator does.
fn in_netns<T: Send + 'static>(ns: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let handle = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    let joined = std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is an open network namespace; only this thread moves.
        assert_eq!(
            unsafe { libc::setns(handle.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        work()
    })
    .join();
    match joined {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Two series of mesh `mesh` ("a" and "b" to "c"), a row every 30 minutes for 60 days
/// before `now`, some failed or skipped; every fourth with a run.
fn old_rows(mesh: &str, now: f64) -> Vec<linerate_store::MeshRow> {
    use linerate_store::{MeshRow, Outcome};
    let start = now - 60.0 * 86_400.0;
    let mut rows = Vec::new();
    for i in 0..(60 * 48) {
        let at = start + i as f64 * 1800.0 + 7.0;
        for (s, src) in ["a", "b"].into_iter().enumerate() {
            let outcome = match (i + s) % 23 {
                0 => Outcome::Failed {
                    blamed: None,
                    reason: "refused".into(),
                },
                5 => Outcome::Skipped {
                    reason: "down".into(),
                },
                _ => Outcome::Ok,
            };
            let ok = outcome.is_ok();
            rows.push(MeshRow {
                run_id: None,
                mesh: mesh.into(),
                src: src.into(),
                dst: "c".into(),
                test: "lat".into(),
                direction: "forward".into(),
                protocol: "tcp".into(),
                cycle: i as u64,
                started_at: at,
                ended_at: at + 1.0,
                outcome,
                headline: ok.then(|| 0.001 + ((i * 7 + s * 3) % 17) as f64 * 1e-4),
                headline_text: String::new(),
            });
        }
    }
    rows
}

/// A mesh file's `[retention]` applied by the coordinator as it runs, on SQLite and on
/// PostgreSQL alike: 60 days of a mesh's rows are cut to the 14 days asked for, the
/// hours between 14 and 30 days ago summed up, each store's aggregates the same, and
/// the coordinator says what it did once.
#[test]
// Long: two stores seeded, a coordinator run on each, then both compared.
fn a_mesh_retention_is_applied_by_its_coordinator_on_sqlite_and_postgresql() {
    let test = "a_mesh_retention_is_applied_by_its_coordinator_on_sqlite_and_postgresql";
    let Some(lab) = PgMesh::start(test, "meshkeep", 2) else {
        return;
    };
    let (star, postgres, key) = (&lab.star, &lab.postgres, &lab.key);
    let file = mesh_file(star, 2, key, "retained", "2s");
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        "[[host]]",
        "[retention]\nraw = \"14d\"\nhourly = \"30d\"\n\n[[host]]",
        1,
    );
    std::fs::write(&file, text).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let rows = old_rows("retained", now);
    let db = fresh_db("retained");
    // The rows in one transaction (thousands of the store's own one-row transactions
    // would wait on the disk for each).
    {
        let mut store = linerate_store::Store::open(std::path::Path::new(&db)).unwrap();
        let items: Vec<linerate_store::MeshItem<'_>> = rows.iter().map(|r| (r, None)).collect();
        store.insert_mesh_batch(&items).unwrap();
    }
    let url = postgres.url.clone();
    let seeded = rows.clone();
    let seeding = std::time::Instant::now();
    in_netns(&star.hosts[2], move || {
        let mut archive = linerate_store::archive::Archive::open(&url).unwrap();
        for row in &seeded {
            archive.insert_mesh(row, None).unwrap();
        }
    });
    println!("{test}: archive seeded in {:?}", seeding.elapsed());
    // The archive as version 5 left it (each pair's newest named by its id alone): the
    // coordinator's start takes it to 6, filling each pair's newest row in.
    let downgrade = Command::new("ip")
        .args(["netns", "exec", &star.hosts[2]])
        .arg(postgres.launch.bin.join("psql"))
        .args(["-v", "ON_ERROR_STOP=1", "-d", &postgres.url, "-c"])
        .arg(
            "ALTER TABLE linerate_mesh_latest DROP COLUMN run_id, DROP COLUMN direction,
                 DROP COLUMN protocol, DROP COLUMN cycle, DROP COLUMN ended_at,
                 DROP COLUMN outcome, DROP COLUMN reason, DROP COLUMN blamed,
                 DROP COLUMN headline, DROP COLUMN headline_text;
             UPDATE linerate_schema SET version = 5;",
        )
        .output()
        .unwrap();
    assert!(downgrade.status.success(), "{}", stderr(&downgrade));
    // Each coordinator runs until it has applied the retention, then its grid's plot of
    // a -> c over 30 days is read.
    let run = |global: &[&str], local: &[&str]| {
        let started = std::time::Instant::now();
        let mut coordinator = Command::new("ip")
            .args(["netns", "exec", &star.hosts[2], binary()])
            .args(global)
            .args(["mesh", "run", &file, "--json", "--metrics", "127.0.0.1:0"])
            .args(local)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(coordinator.stderr.take().unwrap());
        let mut said = Vec::new();
        for line in stderr.lines().map_while(Result::ok) {
            let done = line.contains("retention:");
            said.push(line);
            if done {
                break;
            }
        }
        let listen = said
            .iter()
            .find_map(|l| l.split("metrics at http://").nth(1))
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no metrics address: {said:?}"))
            .to_string();
        let plot = Command::new("ip")
            .args(["netns", "exec", &star.hosts[2], "curl", "-sS", "-m", "20"])
            .arg(format!(
                "http://{listen}/api/history?test=lat&src=a&dst=c&days=30"
            ))
            .output()
            .unwrap();
        // SAFETY: interrupts the coordinator this test started.
        unsafe { libc::kill(coordinator.id() as i32, libc::SIGINT) };
        coordinator.wait().unwrap();
        println!("{test}: retention applied in {:?}", started.elapsed());
        let plot: serde_json::Value = serde_json::from_slice(&plot.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&plot.stdout)));
        (said.join("\n"), plot)
    };
    let raw_before = now - 14.0 * 86_400.0;
    let last_hour = (raw_before / 3600.0).floor() * 3600.0;
    let gone = rows.iter().filter(|r| r.started_at < last_hour).count();
    for (said, plot) in [
        run(&["--db", &db], &[]),
        run(&["--no-store"], &["--store", &postgres.url]),
    ] {
        let line = said
            .lines()
            .find(|l| l.contains("retention:"))
            .unwrap_or_else(|| panic!("no retention line: {said}"));
        assert!(
            line.contains(&format!("{gone} row(s)")) && line.contains("past 14d"),
            "{line}"
        );
        assert_plot_is_the_seeded_hours(&plot, &rows, now - 30.0 * 86_400.0, last_hour);
    }
    let store = linerate_store::Store::open(std::path::Path::new(&db)).unwrap();
    let left = store.mesh_rows("retained", false).unwrap();
    let old_left: Vec<_> = left.iter().filter(|r| r.started_at < last_hour).collect();
    assert!(old_left.is_empty(), "{old_left:?}");
    assert!(left.len() >= rows.len() - gone, "the newer rows stay");
    let sqlite = store.mesh_hourly("retained").unwrap();
    let hourly_before = now - 30.0 * 86_400.0;
    assert!(sqlite.iter().all(|a| a.hour + 3600.0 > hourly_before));
    // Every hour between 30 and 14 days ago, both series.
    let hours = ((last_hour - (hourly_before / 3600.0).ceil() * 3600.0) / 3600.0) as usize;
    assert!(
        sqlite.len() >= 2 * hours,
        "{} aggregates for {hours} hours",
        sqlite.len()
    );
    let url = postgres.url.clone();
    let (archive_rows, archived, archive_latest) = in_netns(&star.hosts[2], move || {
        let mut archive = linerate_store::archive::Archive::open(&url).unwrap();
        (
            archive.mesh_rows("retained", false).unwrap(),
            archive.mesh_hourly("retained").unwrap(),
            archive.mesh_rows("retained", true).unwrap(),
        )
    });
    // Each seeded pair's newest row, as seeded, in both stores (`mesh status`).
    for src in ["a", "b"] {
        let seeded = rows
            .iter()
            .filter(|r| r.src == src)
            .max_by(|x, y| x.started_at.total_cmp(&y.started_at))
            .unwrap();
        for (store, latest) in [
            ("sqlite", store.mesh_rows("retained", true).unwrap()),
            ("postgres", archive_latest.clone()),
        ] {
            let found: Vec<_> = latest.iter().filter(|r| r.src == src).collect();
            assert_eq!(found.len(), 1, "{store}: {found:?}");
            let mut found = found[0].clone();
            found.run_id = None;
            assert_eq!(&found, seeded, "{store}");
        }
    }
    assert!(archive_rows.iter().all(|r| r.started_at >= last_hour));
    // The same hours summed up the same, where both stores' passes saw the same rows
    // (each pass's cutoff is its own moment: compare the hours both have).
    let same_hours: Vec<_> = sqlite
        .iter()
        .filter(|a| archived.iter().any(|b| b.hour == a.hour && b.src == a.src))
        .collect();
    assert!(same_hours.len() >= 2 * hours - 4);
    for a in same_hours {
        let b = archived
            .iter()
            .find(|b| b.hour == a.hour && b.src == a.src)
            .unwrap();
        assert_eq!(a, b);
    }
}

/// The grid's plot of a -> c over days: an hour a point from `since` on, each point what
/// the seeded rows of its hour say (counted here, apart from the store's code), from the
/// store's aggregates before `last_hour` (retention removed those rows) and from the rows
/// after.
fn assert_plot_is_the_seeded_hours(
    plot: &serde_json::Value,
    seeded: &[linerate_store::MeshRow],
    since: f64,
    last_hour: f64,
) {
    let points = plot["hourly"]
        .as_array()
        .unwrap_or_else(|| panic!("no hourly points: {plot}"));
    let first_hour = (since / 3600.0).floor() * 3600.0;
    let hours = seeded
        .iter()
        .filter(|r| r.src == "a" && r.started_at >= first_hour)
        .map(|r| (r.started_at / 3600.0).floor() as i64)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(
        points.len() + 1 >= hours.len(),
        "{} points for {} hours",
        points.len(),
        hours.len()
    );
    assert_eq!(plot["aggregates_until"], last_hour, "{plot}");
    for point in points {
        let at = point["at"].as_f64().unwrap();
        let rows: Vec<_> = seeded
            .iter()
            .filter(|r| r.src == "a" && (r.started_at / 3600.0).floor() * 3600.0 == at)
            .collect();
        let mut values: Vec<f64> = rows
            .iter()
            .filter(|r| r.outcome.is_ok())
            .filter_map(|r| r.headline)
            .collect();
        values.sort_by(f64::total_cmp);
        let median = (!values.is_empty()).then(|| values[values.len().div_ceil(2) - 1]);
        let kept = if at < last_hour { "aggregate" } else { "rows" };
        assert_eq!(point["kept"], kept, "{point}");
        assert_eq!(point["count"], rows.len() as u64, "{point}");
        assert_eq!(
            point["ok"],
            rows.iter().filter(|r| r.outcome.is_ok()).count() as u64
        );
        assert_eq!(point["median"].as_f64(), median, "{point}");
    }
}

/// What each coordinator printed is in the archive once, with its run.
fn check_archive(url: &str, a: &std::process::Output, b: &std::process::Output) {
    for (name, out) in [("left", a), ("right", b)] {
        assert!(out.status.success(), "{name}: {}", stderr(out));
        let printed = rows(&out.stdout);
        assert!(printed.len() >= 6, "{name}: {printed:#?}");
        let mut archive = linerate_store::archive::Archive::open(url).unwrap();
        let stored = archive.mesh_rows(name, false).unwrap();
        assert_eq!(stored.len(), printed.len(), "{name}: every row once");
        let ids: BTreeSet<i64> = stored.iter().filter_map(|r| r.run_id).collect();
        assert_eq!(
            ids.len(),
            stored.len(),
            "{name}: a run of its own for each row"
        );
        for row in &printed {
            let id = row["run_id"].as_i64().expect("stored with its run");
            let kept = stored
                .iter()
                .find(|s| s.run_id == Some(id))
                .unwrap_or_else(|| panic!("{name}: run {id} printed, not in the archive"));
            assert_eq!(
                (kept.src.as_str(), kept.test.as_str()),
                (row["src"].as_str().unwrap(), row["test"].as_str().unwrap())
            );
            let document = archive.run_json(id).unwrap();
            assert!(document.contains("\"test\""), "{document}");
        }
        assert_eq!(
            archive.schema_version().unwrap(),
            linerate_store::migrations::version(linerate_store::migrations::Dialect::Postgres)
        );
    }
}

/// Hosts discovered from a DNS name (here the coordinator's namespace's hosts file, which
/// `ip netns exec` puts in place of /etc/hosts) are found again while the mesh runs: a
/// host that joins is announced and its pairs are measured without a restart.
#[test]
fn a_host_that_joins_a_discovered_mesh_is_measured_without_a_restart() {
    let test = "a_host_that_joins_a_discovered_mesh_is_measured_without_a_restart";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("meshdns", 4);
    let key = key_file("meshdns");
    let _agents: Vec<ServeProcess> = (0..3).map(|i| agent(&star, i, &key)).collect();
    let coordinator = &star.hosts[3];
    let etc = std::path::PathBuf::from(format!("/etc/netns/{coordinator}"));
    std::fs::create_dir_all(&etc).unwrap();
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _etc = Remove(etc.clone());
    let hosts_file = etc.join("hosts");
    let name = "agents.mesh.test";
    let listing = |n: usize| -> String {
        let mut text = "127.0.0.1 localhost\n".to_string();
        for addr in &star.addrs[..n] {
            text += &format!("{addr} {name}\n");
        }
        text
    };
    std::fs::write(&hosts_file, listing(2)).unwrap();
    let file = std::env::temp_dir().join(format!("linerate-{}-dns.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "name = \"dns\"\nkey = \"{key}\"\n[[discover]]\nname = \"{name}\"\nport = {PORT}\nevery = \"1s\"\n\
             [[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"1s\"\ninterval = \"2s\"\n\
             [[group]]\nname = \"all\"\ntests = [\"tput\"]\n"
        ),
    )
    .unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", coordinator, binary()])
        .args(["--no-store", "mesh", "run", file.to_str().unwrap()])
        .args(["--cycles", "4", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        let row: serde_json::Value = serde_json::from_str(&line).unwrap();
        // After the first result the third host appears under the name.
        if lines.is_empty() {
            std::fs::write(&hosts_file, listing(3)).unwrap();
        }
        lines.push(row);
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{lines:#?}", stderr(&out));
    let joined = star.addrs[2].clone();
    let event = lines
        .iter()
        .position(|r| r["event"] == "hosts")
        .unwrap_or_else(|| panic!("no hosts event: {lines:#?}"));
    assert_eq!(
        lines[event]["added"],
        serde_json::json!([joined]),
        "{lines:#?}"
    );
    // Before it, pairs of the first two only; after it, the third's pairs measured.
    assert!(lines[..event]
        .iter()
        .all(|r| r["src"] != joined.as_str() && r["dst"] != joined.as_str()));
    let with_new: BTreeSet<(String, String)> = lines[event + 1..]
        .iter()
        .filter(|r| r["ok"] == true && (r["src"] == joined.as_str() || r["dst"] == joined.as_str()))
        .map(|r| (r["src"].to_string(), r["dst"].to_string()))
        .collect();
    assert_eq!(with_new.len(), 4, "both ways with both others: {lines:#?}");
    let tput: Vec<&serde_json::Value> = lines.iter().filter(|r| r["test"] == "tput").collect();
    assert_no_overlap(&tput);
}

/// An RPM test in a mesh: the source's agent runs the client against a server the
/// destination's agent starts for it alone (pinned over TLS), so the loads cross between
/// the two hosts. What the source receives passes a 40 Mbit/s tbf with a 100 ms queue in
/// the network: the download (destination to source) is held to the shaper's rate, whose
/// own counter saw the bytes, and the latency the load adds is bounded by the queue; the
/// upload is not shaped. The coordinator carries none of it; the row says the RPM and the grade.
#[test]
fn an_rpm_test_in_a_mesh_loads_the_path_between_its_two_agents() {
    let test = "an_rpm_test_in_a_mesh_loads_the_path_between_its_two_agents";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("meshrpm", 3);
    let key = key_file("meshrpm");
    let _agents: Vec<ServeProcess> = (0..2).map(|i| agent(&star, i, &key)).collect();
    const RATE_BPS: f64 = 40e6;
    // 500 kB at 40 Mbit/s: a queue that drains in 100 ms.
    const QUEUE_BYTES: u64 = 500_000;
    let drain_s = QUEUE_BYTES as f64 * 8.0 / RATE_BPS;
    star.shape_towards(0, "40mbit", QUEUE_BYTES);
    let text = format!(
        r#"name = "rpm"
key = "{key}"
[[host]]
name = "h0"
address = "{}:{PORT}"
[[host]]
name = "h1"
address = "{}:{PORT}"
[[test]]
name = "responsiveness"
run = "rpm"
duration = "5s"
interval = "1h"
max_connections = 8
[[group]]
name = "one"
shape = "pairs"
pairs = [["h0", "h1"]]
directions = "one"
tests = ["responsiveness"]
"#,
        star.addrs[0], star.addrs[1]
    );
    let file = std::env::temp_dir().join(format!("linerate-{}-rpm.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let file = file.display().to_string();
    let plan = linerate(&["mesh", "plan", &file]);
    let planned = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(
        planned.contains("responsiveness (rpm tcp, 15 s, exclusive)"),
        "{planned}{}",
        stderr(&plan)
    );
    let db = fresh_db("rpm");
    let shaped_before = star.shaped_sent(0);
    let coordinator_before = star.counter(2, "rx_bytes") + star.counter(2, "tx_bytes");
    let out = linerate_in(
        &star.hosts[2],
        &["--db", &db, "mesh", "run", &file, "--cycles", "1", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shaped = star.shaped_sent(0) - shaped_before;
    let coordinator =
        star.counter(2, "rx_bytes") + star.counter(2, "tx_bytes") - coordinator_before;
    let rows = rows(&out.stdout);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(row["ok"], true, "{row}");
    assert_eq!(
        (row["src"].as_str(), row["dst"].as_str()),
        (Some("h0"), Some("h1"))
    );
    let headline = row["headline_text"].as_str().unwrap();
    assert!(
        headline.starts_with("RPM ") && headline.contains("grade"),
        "{row}"
    );
    let id = row["run_id"].as_i64().expect("a stored run").to_string();
    let shown = linerate_in(&star.hosts[2], &["--db", &db, "show", &id, "--json"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let doc = json(&shown);
    assert_eq!(doc["test"], "rpm", "{doc}");
    assert_eq!(doc["tls"], true, "{doc}");
    assert!((num(&doc, "/rpm") - row["headline"].as_f64().unwrap()).abs() < 1e-6);
    // The download crossed the shaper: held to its rate, and its counter saw the bytes.
    let download = num(&doc, "/download/capacity_bps");
    assert!(
        (0.7 * RATE_BPS..=1.03 * RATE_BPS).contains(&download),
        "download {download:.0} bit/s through a {RATE_BPS:.0} bit/s shaper"
    );
    let download_s = doc["download"]["intervals"]
        .as_array()
        .unwrap()
        .last()
        .map(|i| i["end_s"].as_f64().unwrap())
        .unwrap();
    assert!(
        shaped as f64 * 8.0 >= 0.8 * download * download_s,
        "the shaper sent {shaped} bytes; the download claims {download:.0} bit/s for {download_s:.1} s"
    );
    // The upload went the other way, unshaped.
    let upload = num(&doc, "/upload/capacity_bps");
    assert!(
        upload > 1.5 * RATE_BPS,
        "upload {upload:.0} bit/s, unshaped"
    );
    // The latency the download's load added: the queue's, so no more than it drains in
    // (beside a margin for the host's own scheduling), and something of it.
    let added = num(&doc, "/download/added_latency_s");
    assert!(
        added > drain_s * 0.1 && added < drain_s + 0.03,
        "added {:.1} ms behind a queue that drains in {:.0} ms",
        added * 1e3,
        drain_s * 1e3
    );
    eprintln!(
        "rpm in a mesh: RPM {:.0}, download {:.1} Mbit/s (shaper sent {shaped} B), upload {:.1} Mbit/s, added {:.1} ms (queue drains in {:.0} ms), coordinator {coordinator} B",
        num(&doc, "/rpm"),
        download / 1e6,
        upload / 1e6,
        added * 1e3,
        drain_s * 1e3
    );
    // The coordinator spoke only to the source's agent: control, not the loads.
    assert!(
        (coordinator as f64) < 0.05 * shaped as f64,
        "the coordinator's interface moved {coordinator} bytes, the path {shaped}"
    );
    let status = linerate_in(&star.hosts[2], &["--db", &db, "mesh", "status", "rpm"]);
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(status.contains("RPM "), "{status}");
}

/// The archive link (docs/mesh.md): TLS verified as libpq's sslmode says, verify-full by
/// default for a host that is not this machine, against Debian's PostgreSQL with ssl on
/// and a certificate made here; the password from a file or the environment, and never in
/// a message, whatever form the connection string takes.
#[test]
fn the_archive_is_reached_over_verified_tls_and_its_password_never_shows() {
    let test = "the_archive_is_reached_over_verified_tls_and_its_password_never_shows";
    if !is_root() {
        skip(
            test,
            "needs root for network namespaces and to run PostgreSQL as its user",
        );
        return;
    }
    if !have("openssl", test) {
        return;
    }
    // The client in the server's namespace, reaching it at its address (not loopback).
    let star = Star::new("pgtls", 1);
    let (db_host, addr) = (&star.hosts[0], star.addrs[0].clone());
    let client = db_host.clone();
    let dir = std::env::temp_dir().join(format!("linerate-{}-pgtls-certs", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let at = |name: &str| dir.join(name).display().to_string();
    let openssl = |args: &[&str]| run("openssl", args);
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &at("ca.key"),
        "-out",
        &at("ca.pem"),
        "-days",
        "2",
        "-subj",
        "/CN=linerate test archive CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &at("server.key"),
        "-out",
        &at("server.csr"),
        "-subj",
        "/CN=archive",
    ]);
    std::fs::write(
        dir.join("ext"),
        format!("subjectAltName=IP:{addr},DNS:archive.mesh.test\n"),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &at("server.csr"),
        "-CA",
        &at("ca.pem"),
        "-CAkey",
        &at("ca.key"),
        "-CAcreateserial",
        "-out",
        &at("server.crt"),
        "-days",
        "2",
        "-extfile",
        &at("ext"),
    ]);
    const PASSWORD: &str = "archive-s3cret-pw";
    let postgres = match Postgres::start_secured(
        db_host,
        &addr,
        "pgtls",
        PgSecurity {
            tls: Some((dir.join("server.crt"), dir.join("server.key"))),
            password: Some(PASSWORD),
        },
    ) {
        Ok(server) => server,
        Err(reason) => {
            skip(test, &reason);
            return;
        }
    };
    // Two names for the server's address in the client's namespace: one its certificate
    // carries, one it does not.
    let hosts_dir = format!("/etc/netns/{client}");
    std::fs::create_dir_all(&hosts_dir).unwrap();
    std::fs::write(
        format!("{hosts_dir}/hosts"),
        format!("127.0.0.1 localhost\n{addr} archive.mesh.test\n{addr} impostor.mesh.test\n"),
    )
    .unwrap();
    let password_file = at("password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let ca = at("ca.pem");
    // `mesh status` of a mesh the archive has never seen: connected, it says so.
    let status = |store: &str, password: Option<&str>, extra: &[&str]| {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &client, binary()])
            .args(["--no-store", "mesh", "status", "nomesh", "--store", store])
            .args(extra)
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            // No ~/.pgpass or ~/.postgresql/root.crt of the machine's.
            .env("HOME", &dir);
        if let Some(password) = password {
            command.env("PGPASSWORD", password);
        }
        let out = command.output().unwrap();
        let (text, said) = (
            stderr(&out),
            String::from_utf8_lossy(&out.stdout).to_string(),
        );
        assert!(
            !text.contains(PASSWORD) && !said.contains(PASSWORD),
            "the password shows: {text}{said}"
        );
        (out.status.code(), text)
    };
    let connected = |(_, text): &(Option<i32>, String)| text.contains("no results of a mesh");
    let url = |host: &str, params: &str| {
        format!("postgres://linerate@{host}:54329/postgres?sslrootcert={ca}{params}")
    };
    // verify-full by default (the host is not this machine), by address and by a name
    // the certificate carries; the password from the environment or the file.
    let by_address = status(&url(&addr, ""), Some(PASSWORD), &[]);
    assert!(connected(&by_address), "{}", by_address.1);
    let by_name = status(
        &url("archive.mesh.test", ""),
        None,
        &["--store-password-file", &password_file],
    );
    assert!(connected(&by_name), "{}", by_name.1);
    // A name the certificate does not carry: refused under verify-full, taken by
    // verify-ca (the chain only) and require.
    let impostor = status(&url("impostor.mesh.test", ""), Some(PASSWORD), &[]);
    assert!(!connected(&impostor), "{}", impostor.1);
    assert!(
        impostor.1.contains("certificate") && impostor.1.contains("verify-full"),
        "{}",
        impostor.1
    );
    for mode in ["verify-ca", "require"] {
        let out = status(
            &url("impostor.mesh.test", &format!("&sslmode={mode}")),
            Some(PASSWORD),
            &[],
        );
        assert!(connected(&out), "{mode}: {}", out.1);
    }
    // No root certificate given: the system's bundle, which does not know the test's CA.
    let unknown = status(
        &format!("postgres://linerate@{addr}:54329/postgres"),
        Some(PASSWORD),
        &[],
    );
    assert!(!connected(&unknown), "{}", unknown.1);
    // Without TLS the server refuses (hostnossl reject): the connections above used it.
    let plain = status(&url(&addr, "&sslmode=disable"), Some(PASSWORD), &[]);
    assert!(!connected(&plain), "{}", plain.1);
    // No password, a wrong one, one in the string (it works, with a warning), one in an
    // invalid string, one in the key-value form: never shown.
    let none = status(&url(&addr, ""), None, &[]);
    assert!(!connected(&none), "{}", none.1);
    let inline = url(&addr, "").replace("linerate@", &format!("linerate:{PASSWORD}@"));
    let warned = status(&inline, None, &[]);
    assert!(connected(&warned), "{}", warned.1);
    assert!(warned.1.contains("ps shows it"), "{}", warned.1);
    let wrong = inline.replace(PASSWORD, &format!("{PASSWORD}x"));
    let wrong = status(&wrong, None, &[]);
    assert!(!connected(&wrong), "{}", wrong.1);
    let invalid = status(&format!("{inline}&password={PASSWORD}&bogus=1"), None, &[]);
    assert!(
        !connected(&invalid) && invalid.1.contains("***"),
        "{}",
        invalid.1
    );
    let key_values = format!("host={addr} port=54329 user=linerate password={PASSWORD} nonsense");
    let refused = status(&key_values, None, &[]);
    assert!(!connected(&refused), "{}", refused.1);
    let not_postgres = status(&format!("mysql://u:{PASSWORD}@h/db"), None, &[]);
    assert_eq!(not_postgres.0, Some(2), "{}", not_postgres.1);
    // A coordinator that runs for months: its password is in no process's command line
    // (`ps`) or environment.
    let mesh = dir.join("mesh.toml");
    std::fs::write(
        &mesh,
        format!(
            "name = \"pgps\"\nkey = \"{}\"\n[[host]]\nname = \"a\"\naddress = \"192.0.2.1:5201\"\n[[host]]\nname = \"b\"\naddress = \"192.0.2.2:5201\"\n[[test]]\nname = \"lat\"\nrun = \"rr\"\nduration = \"1s\"\ninterval = \"10s\"\n[[group]]\nname = \"all\"\ntests = [\"lat\"]\n",
            key_file("pgps")
        ),
    )
    .unwrap();
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &client, binary()])
        .args(["--no-store", "mesh", "run"])
        .arg(&mesh)
        .args([
            "--store",
            &url(&addr, ""),
            "--store-password-file",
            &password_file,
        ])
        .env_remove("PGPASSWORD")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = coordinator.id();
    if coordinator.try_wait().unwrap().is_some() {
        panic!("{}", stderr(&coordinator.wait_with_output().unwrap()));
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let running = coordinator.try_wait().unwrap().is_none();
    // SAFETY: signals the coordinator this test started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let out = coordinator.wait_with_output().unwrap();
    assert!(running, "the coordinator runs: {}", stderr(&out));
    let shows = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains(PASSWORD);
    assert!(!shows(&cmdline) && !shows(&environ), "the password in ps");
    assert!(!stderr(&out).contains(PASSWORD), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&hosts_dir);
    drop(postgres);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A mesh keeps its jobs' documents compact: the figures and percentiles, not the
/// histograms, per-thread figures and host counters. The rr probes' documents average at
/// most 2 KB as stored; one job in `detail_every` keeps its whole document, which `show`
/// reads as any run; and `show` of a compact one says what was not kept. The figures a
/// compact document keeps are the whole one's: the destination's received bytes against
/// its interface counter still hold (the test above reads them from the documents).
#[test]
fn a_mesh_keeps_compact_documents_and_the_whole_one_where_asked() {
    let test = "a_mesh_keeps_compact_documents_and_the_whole_one_where_asked";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let star = Star::new("compact", 3);
    let key = key_file("compact");
    let _agents: Vec<ServeProcess> = (0..2).map(|i| agent(&star, i, &key)).collect();
    let file = two_host_mesh(
        &star,
        "compact",
        &key,
        "[store]\ndetail_every = 4\n\
             [[test]]\nname = \"lat\"\nrun = \"rr\"\nrate = \"20/s\"\nduration = \"1s\"\ninterval = \"1s\"\n\
             [[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"1s\"\ninterval = \"2s\"\n\
             [[group]]\nname = \"all\"\ntests = [\"lat\", \"tput\"]\n",
    );
    let db = fresh_db("compact");
    let out = mesh_run(&star.hosts[2], &db, &file, 3);
    assert!(out.status.success(), "{}", stderr(&out));
    let conn = rusqlite::Connection::open(&db).unwrap();
    // (run id, test, stored document's length, whether it is whole), in the order kept.
    let mut query = conn
        .prepare(
            "SELECT r.id, m.test, length(r.document), instr(r.document, '\"not_kept\"') = 0
             FROM mesh_results m JOIN runs r ON r.id = m.run_id ORDER BY r.id",
        )
        .unwrap();
    let runs: Vec<(i64, String, i64, bool)> = query
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(runs.len() >= 12, "{runs:?}");
    // One in four whole: the first, the fifth, ...
    for (n, (id, _, _, whole)) in runs.iter().enumerate() {
        assert_eq!(*whole, n % 4 == 0, "run {id} (the {n}th kept): {runs:?}");
    }
    let compact_rr: Vec<i64> = runs
        .iter()
        .filter(|(_, test, _, whole)| test == "lat" && !whole)
        .map(|r| r.2)
        .collect();
    assert!(!compact_rr.is_empty(), "{runs:?}");
    let average = compact_rr.iter().sum::<i64>() as f64 / compact_rr.len() as f64;
    eprintln!("compact rr documents: {average:.0} bytes on average");
    assert!(
        average <= 2048.0,
        "compact rr documents average {average:.0} bytes: {runs:?}"
    );
    // Whole ones are larger (their histograms, the hosts' counters and facts).
    let whole_rr: Vec<i64> = runs
        .iter()
        .filter(|(_, test, _, whole)| test == "lat" && *whole)
        .map(|r| r.2)
        .collect();
    if let Some(whole) = whole_rr.first() {
        assert!(*whole as f64 > average, "{runs:?}");
    }
    // `show` reads both; a compact one says what it lacks, with the figures still there.
    let compact_id = runs
        .iter()
        .find(|r| r.1 == "lat" && !r.3)
        .unwrap()
        .0
        .to_string();
    let shown = linerate_in(&star.hosts[2], &["--db", &db, "show", &compact_id]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("Not kept"), "{text}");
    assert!(text.contains("latency histograms"), "{text}");
    let doc = json(&linerate_in(
        &star.hosts[2],
        &["--db", &db, "show", &compact_id, "--json"],
    ));
    assert!(
        num(&doc, "/groups/0/transactions/0/latency_us/p50") > 0.0,
        "{doc}"
    );
    assert!(
        num(&doc, "/groups/0/transactions/0/iterations") >= 10.0,
        "{doc}"
    );
    let whole_id = runs[0].0.to_string();
    let shown = linerate_in(&star.hosts[2], &["--db", &db, "show", &whole_id]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert!(!String::from_utf8_lossy(&shown.stdout).contains("Not kept"));
    let _ = std::fs::remove_file(&db);
}
