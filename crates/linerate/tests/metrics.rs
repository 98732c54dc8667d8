//! A mesh's results in the tools operators use: Debian's promtool checks the endpoint's
//! output, a real Prometheus scrapes it and receives the same series by remote_write, and
//! a real Alertmanager hears of a lab path whose rate is cut in half mid-mesh, and of its
//! return. Each server runs in a network namespace, on a directory of its own.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PORT: &str = "5201";

/// One at a time: each takes this machine's CPUs.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("linerate-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn key_file(dir: &std::path::Path) -> String {
    let key = dir.join("mesh.key");
    std::fs::write(&key, "the metrics tests' agents' key\n").unwrap();
    key.display().to_string()
}

/// Runs `f` on a thread inside network namespace `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is an open network namespace; only this thread moves.
        assert_eq!(
            unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        f()
    })
    .join()
    .unwrap()
}

/// An HTTP/1.0 request from namespace `ns`: (status, headers, body).
fn http(ns: &str, method: &str, addr: &str, path: &str, body: &str) -> (u16, String, String) {
    let (method, addr, path, body) = (
        method.to_string(),
        addr.to_string(),
        path.to_string(),
        body.to_string(),
    );
    in_ns(ns, move || {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, head.to_string(), body.to_string())
    })
}

/// A server from Debian (Prometheus, Alertmanager) in namespace `ns`, on a directory of
/// its own; stopped and removed on drop.
struct Daemon {
    child: Child,
    dir: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Daemon {
    fn start(ns: &str, dir: std::path::PathBuf, program: &str, args: &[String]) -> Daemon {
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{program}.log"));
        let child = Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, dir, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `path` to answer 200 on `addr`.
    fn ready(&self, ns: &str, addr: &str, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let target = addr.to_string();
            let up = in_ns(ns, move || std::net::TcpStream::connect(&target).is_ok());
            if up && http(ns, "GET", addr, path, "").0 == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready in 60 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: signals the server this test started and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An instant PromQL query through Prometheus' HTTP API: the result vector.
fn promql(ns: &str, addr: &str, query: &str) -> Vec<serde_json::Value> {
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    let (status, _, body) = http(
        ns,
        "GET",
        addr,
        &format!("/api/v1/query?query={encoded}"),
        "",
    );
    assert_eq!(status, 200, "{query}: {body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    doc["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The (time, value) samples of a range-vector result.
fn samples(result: &[serde_json::Value]) -> Vec<(f64, f64)> {
    result
        .iter()
        .flat_map(|r| r["values"].as_array().cloned().unwrap_or_default())
        .map(|v| {
            (
                v[0].as_f64().unwrap(),
                v[1].as_str().unwrap().parse::<f64>().unwrap(),
            )
        })
        .collect()
}

fn mesh_text(name: &str, key: &str, hosts: &[(String, String)], extra: &str) -> String {
    let mut text = format!("name = \"{name}\"\nkey = \"{key}\"\n");
    for (host, addr) in hosts {
        text += &format!("[[host]]\nname = \"{host}\"\naddress = \"{addr}:{PORT}\"\n");
    }
    text + extra
}

/// Agents on the star's first three hosts (host 0's with `first_extra` besides) and a mesh
/// file over them: a 1 s stream every `every[0]` and a 1 s rr at 50/s every `every[1]`.
fn three_host_mesh(
    star: &Star,
    dir: &std::path::Path,
    key: &str,
    name: &str,
    every: [&str; 2],
    first_extra: &[&str],
) -> (Vec<ServeProcess>, std::path::PathBuf) {
    let agents = (0..3)
        .map(|i| {
            let mut args = vec!["--no-store", "--key", key];
            if i == 0 {
                args.extend_from_slice(first_extra);
            }
            ServeProcess::start_at(Some(&star.hosts[i]), &star.addrs[i], PORT, &args)
        })
        .collect();
    let hosts: Vec<(String, String)> = (0..3)
        .map(|i| (format!("h{i}"), star.addrs[i].clone()))
        .collect();
    let [tput, lat] = every;
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        mesh_text(
            name,
            key,
            &hosts,
            &format!(
                "[[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"1s\"\ninterval = \"{tput}\"\n\
                 [[test]]\nname = \"lat\"\nrun = \"rr\"\nrate = \"50/s\"\nduration = \"1s\"\ninterval = \"{lat}\"\n\
                 [[group]]\nname = \"all\"\ntests = [\"tput\", \"lat\"]\n"
            ),
        ),
    )
    .unwrap();
    (agents, file)
}

/// `promtool check metrics` (Prometheus' own lint) passes on `text`.
fn promtool_accepts(text: &str) {
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        stderr(&checked)
    );
}

/// Reads the coordinator's JSON lines on a thread of its own, for the test to look at
/// while it runs.
fn collect_rows(child: &mut Child) -> Arc<Mutex<Vec<serde_json::Value>>> {
    let rows = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = rows.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(row) = serde_json::from_str(&line) {
                sink.lock().unwrap().push(row);
            }
        }
    });
    rows
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn stop(child: &mut Child) {
    // SAFETY: signals a child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

#[test]
fn prometheus_scrapes_a_mesh_and_receives_it_by_remote_write_as_stored() {
    let test = "prometheus_scrapes_a_mesh_and_receives_it_by_remote_write_as_stored";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("promtool", test) || !have("prometheus", test) {
        return;
    }
    let _turn = turn();
    let star = Star::new("prom", 4);
    let dir = scratch("prom");
    let key = key_file(&dir);
    // Host 0's agent also serves its own tests' metrics, which Prometheus scrapes too.
    let served = format!("{}:9474", star.addrs[0]);
    let (_agents, file) = three_host_mesh(
        &star,
        &dir,
        &key,
        "prom",
        ["2s", "2s"],
        &["--metrics", &served],
    );
    let ns = star.hosts[3].clone();
    let me = star.addrs[3].clone();
    let (metrics, prom) = (format!("{me}:9470"), format!("{me}:9090"));
    // Prometheus scrapes the coordinator every second and takes remote writes.
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mesh\n    static_configs:\n      - targets: ['{metrics}']\n  - job_name: serve\n    static_configs:\n      - targets: ['{served}']\n"),
    )
    .unwrap();
    let prometheus = Daemon::start(
        &ns,
        dir.join("prometheus"),
        "prometheus",
        &[
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address={prom}"),
            "--web.enable-remote-write-receiver".into(),
        ],
    );
    prometheus.ready(&ns, &prom, "/-/ready");
    let db = dir.join("results.db").display().to_string();
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &ns, binary()])
        .args(["--db", &db, "mesh", "run", file.to_str().unwrap(), "--json"])
        .args(["--metrics", &metrics])
        .args(["--remote-write", &format!("http://{prom}/api/v1/write")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rows = collect_rows(&mut coordinator);
    // Two cycles of throughput (6 pairs each) and rr beside them.
    wait_for("two cycles", Duration::from_secs(120), || {
        let rows = rows.lock().unwrap();
        let tput = rows
            .iter()
            .filter(|r| r["test"] == "tput" && r["ok"] == true)
            .count();
        let lat = rows
            .iter()
            .filter(|r| r["test"] == "lat" && r["ok"] == true)
            .count();
        tput >= 12 && lat >= 6
    });
    // promtool reads the endpoint's text (the classic format, as curl gets it) and lints it.
    let (status, head, text) = http(&ns, "GET", &metrics, "/metrics", "");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    promtool_accepts(&text);
    assert!(text.contains("linerate_rtt_seconds_bucket{"), "{text}");
    // Prometheus negotiated OpenMetrics and scraped it (its target is up).
    let up = promql(&ns, &prom, "up{job=\"mesh\"}");
    assert_eq!(up[0]["value"][1], "1", "{up:?}");
    // A native test against host 0: its server's count reaches Prometheus, equal to what
    // the client was told the server received.
    let native = linerate_in(
        &ns,
        &[
            "--no-store",
            "--key",
            &key,
            "stream",
            &star.addrs[0],
            "-p",
            PORT,
            "-t",
            "1",
            "--json",
        ],
    );
    assert!(native.status.success(), "{}", stderr(&native));
    let told = num(&json(&native), "/summary/receiver_bps") / 8.0;
    let mut from_serve = Vec::new();
    wait_for(
        "the server's goodput in Prometheus",
        Duration::from_secs(30),
        || {
            from_serve = promql(
                &ns,
                &prom,
                &format!("linerate_goodput_bytes_per_second{{job=\"serve\",src=\"{me}\"}}"),
            );
            !from_serve.is_empty()
        },
    );
    let scraped: f64 = from_serve[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(
        (scraped - told).abs() <= 0.02 * told,
        "Prometheus has {scraped} B/s from the server; the client was told {told} B/s"
    );
    assert_eq!(from_serve[0]["metric"]["mesh"], "serve", "{from_serve:?}");
    std::thread::sleep(Duration::from_secs(2));
    // Host 0's agent counts the mesh jobs it ran as their source, beside the native test:
    // its last stream to host 1 is the goodput the coordinator stored for that job (the
    // same receiver's count), and its rr probes have their round trips. Read while the
    // mesh runs: a job the coordinator's stop cuts short ends failed at the agent, and a
    // failed newest result has no goodput.
    let (status, _, own) = http(&ns, "GET", &served, "/metrics", "");
    assert_eq!(status, 200, "{own}");
    stop(&mut coordinator);
    let printed = rows.lock().unwrap().clone();
    let tput_rows: Vec<&serde_json::Value> = printed
        .iter()
        .filter(|r| r["test"] == "tput" && r["ok"] == true)
        .collect();
    let (src, dst) = (
        format!("src=\"{}\"", star.addrs[0]),
        format!("dst=\"{}\"", star.addrs[1]),
    );
    let agent_goodput = sample_of(
        &own,
        "linerate_goodput_bytes_per_second",
        &[&src, &dst, "test=\"stream\"", "direction=\"forward\""],
    )
    .unwrap_or_else(|| panic!("no stream h0 -> h1 in the agent's metrics:\n{own}"));
    let mut to_h1: Vec<f64> = tput_rows
        .iter()
        .filter(|r| r["src"] == "h0" && r["dst"] == "h1")
        .map(|r| num(r, "/headline") / 8.0)
        .collect();
    to_h1.reverse();
    assert!(
        to_h1
            .iter()
            .take(2)
            .any(|stored| (stored - agent_goodput).abs() <= 0.05 * stored),
        "the agent says {agent_goodput} B/s for h0 -> h1; the coordinator stored {to_h1:?}"
    );
    let round_trips = sample_of(&own, "linerate_rtt_seconds_count", &[&src, "test=\"rr\""])
        .unwrap_or_else(|| panic!("no rr round trips in the agent's metrics:\n{own}"));
    assert!(round_trips >= 10.0, "{round_trips} round trips: {own}");
    promtool_accepts(&own);
    // The scraped goodput of h0 -> h1 at its last scrape is the stored result that was
    // newest then.
    let scraped = samples(&promql(
        &ns,
        &prom,
        "linerate_goodput_bytes_per_second{job=\"mesh\",src=\"h0\",dst=\"h1\",test=\"tput\"}[10m]",
    ));
    let &(at, value) = scraped.last().expect("scraped goodput of h0 -> h1");
    let mut pair: Vec<&&serde_json::Value> = tput_rows
        .iter()
        .filter(|r| r["src"] == "h0" && r["dst"] == "h1" && num(r, "/ended_at") < at)
        .collect();
    pair.sort_by(|a, b| num(a, "/ended_at").total_cmp(&num(b, "/ended_at")));
    let newest = pair.last().expect("a stored h0 -> h1 before the scrape");
    let bytes = |r: &serde_json::Value| num(r, "/headline") / 8.0;
    // Recorded a moment after its end: the one before may still have been showing.
    let candidates: Vec<f64> = pair.iter().rev().take(2).map(|r| bytes(r)).collect();
    assert!(
        candidates.iter().any(|c| (c - value).abs() <= 1e-9 * c),
        "Prometheus says {value} B/s at {at}; the store's newest h0 -> h1: {candidates:?} ({newest})"
    );
    // Each stored result is the document's own figure.
    let id = newest["run_id"].as_i64().unwrap().to_string();
    let shown = linerate_in(&ns, &["--db", &db, "show", &id, "--json"]);
    assert_eq!(
        num(&json(&shown), "/summary/received_bps"),
        num(newest, "/headline")
    );
    // remote_write: every sample Prometheus received for a pair is a stored result, at
    // its end time; and every stored result of the pair arrived.
    let written = samples(&promql(
        &ns,
        &prom,
        "linerate_goodput_bytes_per_second{job=\"\",src=\"h0\",dst=\"h1\",test=\"tput\"}[10m]",
    ));
    let expected: BTreeSet<(i64, u64)> = tput_rows
        .iter()
        .filter(|r| r["src"] == "h0" && r["dst"] == "h1")
        .map(|r| ((num(r, "/ended_at") * 1000.0) as i64, bytes(r).to_bits()))
        .collect();
    let got: BTreeSet<(i64, u64)> = written
        .iter()
        .map(|(t, v)| ((t * 1000.0).round() as i64, v.to_bits()))
        .collect();
    assert_eq!(
        got, expected,
        "remote-written samples against the stored results"
    );
    // The rr histogram was scraped too. (A range function: once the coordinator is gone
    // its scraped series are marked stale, and an instant query no longer sees them.)
    let count = promql(
        &ns,
        &prom,
        "sum(max_over_time(linerate_rtt_seconds_count{job=\"mesh\"}[10m]))",
    );
    let transactions: f64 = count
        .first()
        .and_then(|c| c["value"][1].as_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(transactions > 0.0, "no rr histogram scraped: {count:?}");
    drop(prometheus);
    let _ = std::fs::remove_dir_all(dir);
}

/// A webhook receiver in namespace `ns`: every request's path and body.
fn webhook(ns: &str, addr: &str) -> Arc<Mutex<Vec<(String, String)>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let (ns, addr) = (ns.to_string(), addr.to_string());
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: as in_ns.
        assert_eq!(
            unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        let listener = std::net::TcpListener::bind(&addr).unwrap();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; length.min(1 << 20)];
            let _ = reader.read_exact(&mut body);
            sink.lock()
                .unwrap()
                .push((path, String::from_utf8_lossy(&body).into_owned()));
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    got
}

/// `mesh run FILE --json` in namespace `ns`, unstored, its rows read as they come.
fn coordinate(ns: &str, file: &std::path::Path) -> (Child, Arc<Mutex<Vec<serde_json::Value>>>) {
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", ns, binary()])
        .args([
            "--no-store",
            "mesh",
            "run",
            file.to_str().unwrap(),
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rows = collect_rows(&mut coordinator);
    (coordinator, rows)
}

/// A lab this test brought up (`lab up --name NAME` with `args`); down on drop.
struct LabDown(String);

impl Drop for LabDown {
    fn drop(&mut self) {
        let _ = Command::new(binary())
            .args(["lab", "down", "--name", &self.0])
            .output();
        let _ = std::fs::remove_dir_all(format!("/run/linerate/lab/{}", self.0));
    }
}

fn lab_up(lab: &str, args: &[&str]) -> LabDown {
    let up = Command::new(binary())
        .args(["lab", "up", "--name", lab])
        .args(args)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", stderr(&up));
    LabDown(lab.to_string())
}

/// Debian's Alertmanager in namespace `ns` on `addr`, sending every group (grouped by
/// `group_by`, quickly) to the webhook at `hook_addr`'s `/from-alertmanager`, resolutions
/// too; ready when returned.
fn alertmanager(
    ns: &str,
    dir: &std::path::Path,
    addr: &str,
    hook_addr: &str,
    group_by: &str,
) -> Daemon {
    let config = dir.join("alertmanager.yml");
    std::fs::write(
        &config,
        format!(
            "route:\n  receiver: test\n  group_by: [{group_by}]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
             receivers:\n  - name: test\n    webhook_configs:\n      - url: 'http://{hook_addr}/from-alertmanager'\n        send_resolved: true\n"
        ),
    )
    .unwrap();
    let daemon = Daemon::start(
        ns,
        dir.join("am"),
        "prometheus-alertmanager",
        &[
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.join("am-data").display()),
            format!("--web.listen-address={addr}"),
            "--cluster.listen-address=".into(),
        ],
    );
    daemon.ready(ns, addr, "/-/ready");
    daemon
}

/// An emulator this test started; ended on drop.
struct Emulator(Child);

impl Drop for Emulator {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

/// The lab's emulator started again with another rate (the lab's own router, interfaces
/// and the same delay).
fn set_lab_rate(lab: &str, rate: &str) -> Emulator {
    restart_lab_emulator(lab, &["--delay", "2ms", "--rate", rate])
}

/// The lab's emulator started again with these impairments (the lab's own router and
/// interfaces).
fn restart_lab_emulator(lab: &str, impairments: &[&str]) -> Emulator {
    let router = format!("lrlab-{lab}-router");
    let pids = run("ip", &["netns", "pids", &router]);
    for pid in pids.split_whitespace() {
        // SAFETY: the lab's emulator, which this test's lab started.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGTERM) };
    }
    wait_for("the old emulator to end", Duration::from_secs(10), || {
        run("ip", &["netns", "pids", &router]).trim().is_empty()
    });
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &router,
            binary(),
            "impair",
            "--between",
            "to-client",
            "to-server",
        ])
        .args(impairments)
        .args(["--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Emulator)
        .unwrap()
}

/// The UDP datagrams a namespace's kernel has dropped since it began: full receive and
/// send buffers and bad checksums (/proc/net/snmp's `InErrors` and `SndbufErrors`, which
/// `RcvbufErrors` is counted within).
fn kernel_udp_drops(ns: &str) -> u64 {
    snmp_counter(ns, "Udp", "InErrors") + snmp_counter(ns, "Udp", "SndbufErrors")
}

/// The frames an emulator dropped that its loss model did not, each direction (a full
/// queue or memory, its receive ring, a frame too large or refused on the way out), from
/// the status file it writes every second.
fn emulator_own_drops(status_file: &std::path::Path) -> [u64; 2] {
    let text = std::fs::read_to_string(status_file).expect("the emulator's status file");
    let status: serde_json::Value = serde_json::from_str(&text).expect("its status");
    [0, 1].map(|k| {
        let direction = &status["directions"][k];
        let count = |v: &serde_json::Value, name: &str| v[name].as_u64().unwrap_or(0);
        let counters = &direction["counters"];
        ["queue_drops", "aqm_drops", "limit_drops"]
            .iter()
            .map(|name| count(counters, name))
            .chain(
                ["oversize", "refused", "ring_drops"]
                    .iter()
                    .map(|name| count(direction, name)),
            )
            .sum()
    })
}

/// The key file in `dir` and an agent holding it in each of a lab's two hosts (the lab's
/// client and server namespaces, on their addresses); the agents end when dropped.
fn lab_agents(client: &str, server: &str, dir: &std::path::Path) -> (String, [ServeProcess; 2]) {
    let key = key_file(dir);
    let agents = [
        ServeProcess::start_at(
            Some(client),
            "10.77.0.1",
            PORT,
            &["--no-store", "--key", &key],
        ),
        ServeProcess::start_at(
            Some(server),
            "10.77.0.2",
            PORT,
            &["--no-store", "--key", &key],
        ),
    ];
    (key, agents)
}

#[test]
fn alertmanager_hears_of_a_halved_lab_path_and_of_its_return() {
    let test = "alertmanager_hears_of_a_halved_lab_path_and_of_its_return";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("prometheus-alertmanager", test) {
        return;
    }
    let _turn = turn();
    let lab = format!("m{}", std::process::id() % 100_000);
    let _down = lab_up(&lab, &["--rtt", "4ms", "--rate", "100M"]);
    let (client, server) = (format!("lrlab-{lab}-client"), format!("lrlab-{lab}-server"));
    let (client_ip, server_ip) = ("10.77.0.1", "10.77.0.2");
    let dir = scratch("alerts");
    let (key, _agents) = lab_agents(&client, &server, &dir);
    let hook_addr = format!("{client_ip}:9099");
    let hooks = webhook(&client, &hook_addr);
    let am = format!("{client_ip}:9093");
    let alertmanager = alertmanager(&client, &dir, &am, &hook_addr, "'alertname', 'src', 'dst'");
    let file = dir.join("mesh.toml");
    let hosts = [
        ("client".to_string(), client_ip.to_string()),
        ("server".to_string(), server_ip.to_string()),
    ];
    std::fs::write(
        &file,
        mesh_text(
            "wan",
            &key,
            &hosts,
            &format!(
                "[alerts]\ngoodput_drop = \"30%\"\nbaseline = 6\nat_least = 3\nalertmanager = \"http://{am}\"\nwebhook = \"http://{hook_addr}/direct\"\n\
                 [[test]]\nname = \"tput\"\nrun = \"stream\"\nduration = \"1s\"\ninterval = \"1s\"\n\
                 [[group]]\nname = \"all\"\ntests = [\"tput\"]\n"
            ),
        ),
    )
    .unwrap();
    let (mut coordinator, rows) = coordinate(&client, &file);
    let results = |rows: &[serde_json::Value]| rows.iter().filter(|r| r["test"] == "tput").count();
    // A baseline for both directions at the path's rate.
    wait_for("four cycles at 100 Mbit/s", Duration::from_secs(90), || {
        results(&rows.lock().unwrap()) >= 8
    });
    let cut_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let halved = set_lab_rate(&lab, "50M");
    wait_for(
        "an alert from Alertmanager",
        Duration::from_secs(90),
        || {
            hooks.lock().unwrap().iter().any(|(path, body)| {
                path == "/from-alertmanager" && body.contains("\"status\":\"firing\"")
            })
        },
    );
    drop(halved);
    let _restored = set_lab_rate(&lab, "100M");
    wait_for(
        "the resolution from Alertmanager",
        Duration::from_secs(90),
        || {
            hooks.lock().unwrap().iter().any(|(path, body)| {
                path == "/from-alertmanager" && body.contains("\"status\":\"resolved\"")
            })
        },
    );
    stop(&mut coordinator);
    let printed = rows.lock().unwrap().clone();
    let got = hooks.lock().unwrap().clone();
    // Alertmanager's notification names the alert and the pair, with the values.
    let firing = got
        .iter()
        .find(|(p, b)| p == "/from-alertmanager" && b.contains("\"status\":\"firing\""))
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&firing.1).unwrap();
    let alert = &doc["alerts"][0];
    assert_eq!(alert["labels"]["alertname"], "LinerateGoodputDrop", "{doc}");
    assert_eq!(alert["labels"]["mesh"], "wan", "{doc}");
    let value: f64 = alert["annotations"]["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let baseline: f64 = alert["annotations"]["baseline"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // The path's own rate, halved: about half of the baseline (the goodput under each).
    assert!(
        value < 0.7 * baseline && value > 0.3 * baseline,
        "value {value} against baseline {baseline}"
    );
    // The rows say the same: results before the cut near the baseline, one after it low.
    let low = printed
        .iter()
        .filter(|r| r["test"] == "tput" && r["ok"] == true && num(r, "/started_at") > cut_at)
        .any(|r| num(r, "/headline") < 0.7 * baseline);
    assert!(
        low,
        "a result below the threshold after the cut: {printed:#?}"
    );
    // The plain webhook got the opening and the resolution straight from linerate.
    assert!(
        got.iter()
            .any(|(p, b)| p == "/direct" && b.contains("\"status\":\"firing\"")),
        "{got:#?}"
    );
    assert!(
        got.iter()
            .any(|(p, b)| p == "/direct" && b.contains("\"status\":\"resolved\"")),
        "{got:#?}"
    );
    // And the coordinator printed both events.
    assert!(printed
        .iter()
        .any(|r| r["event"] == "alert" && r["resolved"] == false));
    assert!(printed
        .iter()
        .any(|r| r["event"] == "alert" && r["resolved"] == true));
    drop(alertmanager);
    let _ = std::fs::remove_dir_all(dir);
}

/// A latency alert is judged as an operator would: a 10 ms lab path's round trips,
/// which wander by tens of microseconds, open nothing over a baseline's worth of results;
/// its delay doubled opens `LinerateLatencyRise` once the rise has held for 3 of 5
/// results, its figures printed with their units, and its return resolves it.
#[test]
fn a_doubled_lab_delay_opens_a_latency_alert_and_its_wander_none() {
    let test = "a_doubled_lab_delay_opens_a_latency_alert_and_its_wander_none";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    let _turn = turn();
    let lab = format!("l{}", std::process::id() % 100_000);
    let _down = lab_up(&lab, &["--rtt", "10ms"]);
    let (client, server) = (format!("lrlab-{lab}-client"), format!("lrlab-{lab}-server"));
    let (client_ip, server_ip) = ("10.77.0.1", "10.77.0.2");
    let dir = scratch("latency-alert");
    let (key, _agents) = lab_agents(&client, &server, &dir);
    // Alerts are judged where something listens for them: a webhook here.
    let hook_addr = format!("{client_ip}:9098");
    let _hooks = webhook(&client, &hook_addr);
    let file = dir.join("mesh.toml");
    let hosts = [
        ("client".to_string(), client_ip.to_string()),
        ("server".to_string(), server_ip.to_string()),
    ];
    std::fs::write(
        &file,
        mesh_text(
            "lat",
            &key,
            &hosts,
            &format!("[alerts]\nbaseline = 10\nat_least = 5\nwebhook = \"http://{hook_addr}/direct\"\n\
             [[test]]\nname = \"lat\"\nrun = \"rr\"\nrate = \"50/s\"\nduration = \"1s\"\ninterval = \"1s\"\n\
             [[group]]\nname = \"all\"\ntests = [\"lat\"]\n"),
        ),
    )
    .unwrap();
    let (mut coordinator, rows) = coordinate(&client, &file);
    let results = |rows: &[serde_json::Value]| rows.iter().filter(|r| r["test"] == "lat").count();
    let alerts = |rows: &[serde_json::Value]| -> Vec<String> {
        rows.iter()
            .filter(|r| r["event"] == "alert")
            .map(|r| r["text"].as_str().unwrap_or("").to_string())
            .collect()
    };
    wait_for("24 results at 10 ms", Duration::from_secs(120), || {
        results(&rows.lock().unwrap()) >= 24
    });
    assert!(
        alerts(&rows.lock().unwrap()).is_empty(),
        "the path's own wander opened alerts: {:?}",
        alerts(&rows.lock().unwrap())
    );
    let doubled = restart_lab_emulator(&lab, &["--delay", "10ms"]);
    wait_for("the latency alert", Duration::from_secs(120), || {
        alerts(&rows.lock().unwrap())
            .iter()
            .any(|a| a.starts_with("alert LinerateLatencyRise"))
    });
    let opened = alerts(&rows.lock().unwrap());
    let line = opened
        .iter()
        .find(|a| a.starts_with("alert LinerateLatencyRise"))
        .unwrap();
    // "alert LinerateLatencyRise: lat client -> server 20.3 ms (baseline 10.2 ms)"
    eprintln!("{line}");
    assert!(
        line.contains(" ms (baseline ") && line.ends_with(" ms)"),
        "{line}"
    );
    drop(doubled);
    let _restored = restart_lab_emulator(&lab, &["--delay", "5ms"]);
    wait_for("the resolution", Duration::from_secs(120), || {
        alerts(&rows.lock().unwrap())
            .iter()
            .any(|a| a.starts_with("resolved LinerateLatencyRise"))
    });
    stop(&mut coordinator);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn metrics_and_remote_write_mistakes_are_one_line_with_exit_2() {
    let dir = scratch("metricsbad");
    let key = key_file(&dir);
    let file = dir.join("m.toml");
    std::fs::write(
        &file,
        "key = \"/nonexistent\"\n[[host]]\nname = \"a\"\naddress = \"10.0.0.1\"\n[[host]]\nname = \"b\"\naddress = \"10.0.0.2\"\n\
         [[test]]\nname = \"t\"\nrun = \"stream\"\ninterval = \"1h\"\n[[group]]\nname = \"g\"\ntests = [\"t\"]\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["--metrics", "nowhere"],
            "'nowhere' is not an address to listen on",
        ),
        (
            vec![
                "--remote-write",
                "https://example.com/api/v1/write",
                "--key",
                &key,
            ],
            "https is not supported",
        ),
    ] {
        let mut full = vec!["--no-store", "mesh", "run", path];
        full.extend(args);
        let out = linerate(&full);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let bad = std::fs::read_to_string(&file).unwrap() + "[alerts]\ngoodput_drop = \"lots\"\n";
    std::fs::write(&file, bad).unwrap();
    let out = linerate(&["mesh", "plan", path]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("goodput_drop 'lots' is not a share"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve --metrics`: the goodput a server received, against its interface's own count,
/// and the retransmits it sent with, against the kernel's; promtool accepts it.
#[test]
fn serve_metrics_say_what_the_server_received_and_retransmitted() {
    let test = "serve_metrics_say_what_the_server_received_and_retransmitted";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("promtool", test) {
        return;
    }
    let _turn = turn();
    let pair = VethPair::new("servemetrics");
    let metrics = format!("{}:9472", pair.addr_b);
    let _server = ServeProcess::start_at(
        Some(&pair.ns_b),
        &pair.addr_b,
        PORT,
        &["--no-store", "--metrics", &metrics],
    );
    let rx_before = pair.counter(&pair.ns_b, &pair.dev_b, "rx_bytes");
    let forward = linerate_in(
        &pair.ns_a,
        &[
            "--no-store",
            "stream",
            &pair.addr_b,
            "-p",
            PORT,
            "-t",
            "2",
            "--json",
        ],
    );
    assert!(forward.status.success(), "{}", stderr(&forward));
    let rx = pair.counter(&pair.ns_b, &pair.dev_b, "rx_bytes") - rx_before;
    let retrans_before = snmp_counter(&pair.ns_b, "Tcp", "RetransSegs");
    let reverse = linerate_in(
        &pair.ns_a,
        &[
            "--no-store",
            "stream",
            &pair.addr_b,
            "-p",
            PORT,
            "-t",
            "2",
            "-R",
            "--json",
        ],
    );
    assert!(reverse.status.success(), "{}", stderr(&reverse));
    let retrans = snmp_counter(&pair.ns_b, "Tcp", "RetransSegs") - retrans_before;
    let (status, _, text) = http(&pair.ns_b, "GET", &metrics, "/metrics", "");
    assert_eq!(status, 200, "{text}");
    let forward_labels = [
        "src=\"",
        "direction=\"forward\"",
        "protocol=\"tcp\"",
        "test=\"stream\"",
    ];
    let src = format!("src=\"{}\"", pair.addr_a);
    let mut labels = forward_labels.to_vec();
    labels[0] = &src;
    let goodput = sample_of(&text, "linerate_goodput_bytes_per_second", &labels).expect(&text);
    let seconds = num(&json(&forward), "/summary/duration_s");
    let counted = goodput * seconds;
    // The window's payload: within what the interface received (headers, warm-up and
    // drain besides it), and most of it.
    assert!(
        counted <= rx as f64 && counted >= 0.5 * rx as f64,
        "the server says {counted:.0} B in its window; its interface received {rx} B"
    );
    // The client's document has the same receiver's count.
    let client = num(&json(&forward), "/summary/receiver_bps") / 8.0;
    assert!(
        (client - goodput).abs() <= 0.02 * goodput,
        "client {client} B/s, server {goodput} B/s"
    );
    let dst = format!("dst=\"{}\"", pair.addr_a);
    let sent = sample_of(
        &text,
        "linerate_retransmits_total",
        &[&dst, "direction=\"reverse\""],
    )
    .expect(&text);
    assert!(
        sent <= retrans as f64,
        "the server counts {sent} retransmits; its kernel {retrans}"
    );
    promtool_accepts(&text);
}

/// Headless Chromium in namespace `ns`: `--dump-dom` or `--screenshot=PATH` of `url`,
/// after the page's scripts have had `budget_ms` of (virtual) time.
fn chromium(ns: &str, dir: &std::path::Path, url: &str, what: &str) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns, "chromium"])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,800",
            "--virtual-time-budget=8000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.join("chromium").display()
        ))
        .arg(what)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("run chromium")
}

/// The value of attribute `name` in the first element of `dom` that holds `anchor`.
fn attribute(dom: &str, anchor: &str, name: &str) -> Option<String> {
    let at = dom.find(anchor)?;
    let tag_end = dom[at..].find('>')? + at;
    let tag = &dom[dom[..at].rfind('<')?..tag_end];
    let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
    Some(tag[start..].split('"').next()?.to_string())
}

/// The live grid of a running mesh in headless Chromium: the cells drawn, a cell's value
/// the stored one, the history plot opened from a link.
#[test]
fn chromium_shows_the_live_grid_with_the_stored_figures_and_a_pairs_history() {
    let test = "chromium_shows_the_live_grid_with_the_stored_figures_and_a_pairs_history";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("chromium", test) {
        return;
    }
    let _turn = turn();
    let star = Star::new("grid", 4);
    let dir = scratch("grid");
    let key = key_file(&dir);
    // One cycle of throughput, then none for an hour: its figures hold still while
    // Chromium looks (rr goes on).
    let (_agents, file) = three_host_mesh(&star, &dir, &key, "grid", ["1h", "3s"], &[]);
    let ns = star.hosts[3].clone();
    let listen = format!("{}:9473", star.addrs[3]);
    let db = dir.join("results.db").display().to_string();
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &ns, binary()])
        .args(["--db", &db, "mesh", "run", file.to_str().unwrap(), "--json"])
        .args(["--metrics", &listen])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rows = collect_rows(&mut coordinator);
    wait_for("a cycle and some rr", Duration::from_secs(90), || {
        let rows = rows.lock().unwrap();
        rows.iter().filter(|r| r["test"] == "tput").count() >= 6
            && rows.iter().filter(|r| r["test"] == "lat").count() >= 2
    });
    let url = format!("http://{listen}/#test=tput&src=h0&dst=h1");
    let dom = chromium(&ns, &dir, &url, "--dump-dom");
    let shot = dir.join("grid.png");
    let shown = chromium(&ns, &dir, &url, &format!("--screenshot={}", shot.display()));
    stop(&mut coordinator);
    assert!(dom.status.success() && shown.status.success());
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    // The cell's value is the stored result of h0 -> h1.
    let value: f64 = attribute(
        &dom,
        "data-src=\"h0\" data-dst=\"h1\" data-test=\"tput\"",
        "data-value",
    )
    .unwrap_or_else(|| panic!("no h0 -> h1 cell: {dom}"))
    .parse()
    .unwrap();
    let printed = rows.lock().unwrap().clone();
    let stored = printed
        .iter()
        .find(|r| r["test"] == "tput" && r["src"] == "h0" && r["dst"] == "h1")
        .expect("h0 -> h1 printed");
    let id = stored["run_id"].as_i64().unwrap().to_string();
    let shown_run = linerate_in(&ns, &["--db", &db, "show", &id, "--json"]);
    assert_eq!(
        value,
        num(&json(&shown_run), "/summary/received_bps"),
        "the grid's cell against the stored run"
    );
    // Every pair of both tests has its cell (3 hosts: 6 pairs; the page shows one tab).
    assert_eq!(dom.matches("data-test=\"tput\"").count(), 6, "{dom}");
    // The link opened the pair's history: its plot and title.
    assert!(dom.contains("class=\"series\""), "no history plot: {dom}");
    assert!(dom.contains("tput: h0 → h1"), "{dom}");
    // The screenshot has the cells' colour (no baseline yet after one cycle: grey).
    let decoder = png::Decoder::new(BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    let channels = frame.color_type.samples();
    let learning = pixels[..frame.buffer_size()]
        .chunks(channels)
        .filter(|p| p[..3] == [0x9a, 0xa4, 0xae])
        .count();
    assert!(
        learning > 2000,
        "the cells' colour covers {learning} pixels"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The Grafana dashboard under deploy/ reads, and every series it queries is one the
/// endpoint writes (for a mesh's tests and a server's).
#[test]
fn the_grafana_dashboard_queries_only_series_the_endpoint_writes() {
    let path = format!(
        "{}/../../deploy/grafana-linerate-mesh.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // A board with every kind of series: a stream with loss, rr, and a server's send.
    use linerate_metrics::board::{Board, Figures, Quantiles, Responsiveness, Transactions};
    let mut board = Board::default();
    let row = |test: &str, protocol: &str| linerate_model::mesh_row::MeshRow {
        run_id: None,
        mesh: "m".into(),
        src: "a".into(),
        dst: "b".into(),
        test: test.into(),
        direction: "forward".into(),
        protocol: protocol.into(),
        cycle: 1,
        started_at: 1.0,
        ended_at: 2.0,
        outcome: linerate_model::mesh_row::Outcome::Ok,
        headline: Some(1.0),
        headline_text: String::new(),
    };
    let figures = Figures {
        goodput_bps: Some(1e9),
        loss_ratio: Some(0.01),
        retransmits: Some(3),
        cpu_s_per_gbit: Some(0.1),
        rtt: Some(Transactions {
            quantiles: Quantiles::default(),
            buckets: vec![(1e-3, 1)],
            count: 1,
            sum_s: 1e-3,
        }),
        duration_s: 1.0,
        qoo: None,
        responsiveness: None,
        one_way: Some(linerate_metrics::board::OneWayDelay {
            p50_s: Some(1e-3),
            p99_s: Some(2e-3),
            added_p50_s: 1e-4,
            added_p99_s: 1e-3,
        }),
        one_way_histogram: Some(Transactions {
            buckets: vec![(5e-4, 2)],
            count: 2,
            sum_s: 8e-4,
            ..Transactions::default()
        }),
        traced: false,
        mos: Some(4.2),
    };
    board.record_figures(&row("t", "udp"), Some(&figures));
    // A trace's series: its distance, and its count of path changes.
    let trace = linerate_report::document::Document::Trace(Box::new(
        serde_json::from_value(serde_json::json!({
            "test": "trace", "started_at": 1.0, "target": "b", "address": "10.0.0.2",
            "protocol": "udp", "port": 33434, "flows": 1, "queries": 1, "first_ttl": 1,
            "max_ttl": 30, "duration_s": 0.1, "sent": 1, "answered": 1, "unmatched": 0,
            "paths": [{"flow": 0, "source_port": 61000, "reached_ttl": 1, "hops": [
                {"ttl": 1, "answers": [{"address": "10.0.0.2", "rtt_ms": 0.1, "kind": "reached"}]}]}],
            "hops": [], "reached": true, "distinct_paths": 1
        }))
        .unwrap(),
    ));
    board.record(&row("path", "udp"), Some(&trace));
    let rpm = Figures {
        responsiveness: Some(Responsiveness {
            rpm: Some(1200.0),
            download_bps: 1e8,
            upload_bps: 5e7,
            idle_latency_s: 0.002,
            added_latency_s: Some(0.04),
        }),
        duration_s: 20.0,
        ..Figures::default()
    };
    board.record_figures(&row("r", "tcp"), Some(&rpm));
    let text = linerate_metrics::openmetrics::encode(
        Arc::new(Mutex::new(board)),
        linerate_metrics::openmetrics::Format::Classic,
    );
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        exprs.push(var["query"].as_str().unwrap().to_string());
    }
    // The names the one table of families defines (scrape and remote write alike).
    let defined: Vec<String> = linerate_metrics::families::FAMILIES
        .iter()
        .flat_map(linerate_metrics::families::series_names)
        .collect();
    let mut named = 0;
    for expr in &exprs {
        for (at, _) in expr.match_indices("linerate_") {
            let name: String = expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            named += 1;
            assert!(
                defined.contains(&name),
                "the dashboard queries {name}, which no family defines: {defined:?}"
            );
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name}{{"))),
                "the dashboard queries {name}, which the endpoint does not write:\n{text}"
            );
        }
    }
    assert!(named >= 8, "{exprs:?}");
}

/// Six hosts, three on each side of one emulated link (addresses added to the lab's two
/// namespaces): five agents and stamp-suite's reflector with no agent beside it, STAMP at
/// 500/s between every pair beside paced exclusive streams. The link loses 0.2 % of
/// what goes from the client side to the server side. Alertmanager hears of steady loss
/// for exactly the ways that cross it that way (a client-side host's probes out to the
/// server side, a server-side host's answers back from the client side), each naming its
/// direction, and of nothing on the ways within a side; and of every one resolved once
/// the loss is taken away.
#[test]
fn alertmanager_hears_of_steady_stamp_loss_for_exactly_the_ways_that_cross_it() {
    let test = "alertmanager_hears_of_steady_stamp_loss_for_exactly_the_ways_that_cross_it";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("prometheus-alertmanager", test) {
        return;
    }
    let Some(suite) = stamp_suite(test) else {
        return;
    };
    let _turn = turn();
    let lab = format!("s{}", std::process::id() % 100_000);
    let _down = lab_up(&lab, &["--rtt", "4ms"]);
    let (client, server) = (format!("lrlab-{lab}-client"), format!("lrlab-{lab}-server"));
    // name, namespace, address; the client side first.
    let hosts = [
        ("a", &client, "10.77.0.1"),
        ("c", &client, "10.77.0.11"),
        ("e", &client, "10.77.0.12"),
        ("b", &server, "10.77.0.2"),
        ("d", &server, "10.77.0.21"),
        ("r", &server, "10.77.0.22"),
    ];
    for (_, ns, ip) in &hosts[..] {
        if !["10.77.0.1", "10.77.0.2"].contains(ip) {
            run(
                "ip",
                &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
            );
        }
    }
    let client_side = |name: &str| hosts[..3].iter().any(|h| h.0 == name);
    let dir = scratch("stamploss");
    let key = key_file(&dir);
    let _agents: Vec<ServeProcess> = hosts[..5]
        .iter()
        .map(|(_, ns, ip)| {
            let stamp = format!("{ip}:862");
            ServeProcess::start_at(
                Some(ns),
                ip,
                PORT,
                &["--no-store", "--key", &key, "--stamp", &stamp],
            )
        })
        .collect();
    let _reflector = Daemon::start(
        &server,
        dir.join("reflector"),
        &suite,
        &[
            "--is-reflector".into(),
            "--stateful-reflector".into(),
            "--local-addr".into(),
            "10.77.0.22".into(),
            "--local-port".into(),
            "862".into(),
        ],
    );
    let hook_addr = "10.77.0.1:9099";
    let hooks = webhook(&client, hook_addr);
    let am = "10.77.0.1:9093";
    let alertmanager = alertmanager(
        &client,
        &dir,
        am,
        hook_addr,
        "'alertname', 'src', 'dst', 'direction'",
    );
    let status_file = dir.join("lossy-emulator.json");
    let lossy = restart_lab_emulator(
        &lab,
        &[
            "--delay",
            "2ms",
            "--loss",
            "0.2%,0",
            "--seed",
            "5",
            "--status-file",
            status_file.to_str().unwrap(),
        ],
    );
    // What the kernels drop besides the loss model (a starved host's full sockets), counted
    // from before the first probe: such drops are loss too, on whichever way they fall.
    let sides = [client.as_str(), server.as_str()];
    let kernel_drops_before = sides.map(kernel_udp_drops);
    let mut text = format!("name = \"soft\"\nkey = \"{key}\"\n");
    for (name, _, ip) in &hosts[..5] {
        text += &format!("[[host]]\nname = \"{name}\"\naddress = \"{ip}:{PORT}\"\n");
    }
    text += "[[host]]\nname = \"r\"\naddress = \"10.77.0.22:862\"\nreflector = \"stamp\"\n";
    // 500 probes a second in 2 s windows: the 10 s span holds 5,000 a way, 10 of them
    // lost at 0.2 %, against a bound of 0.05 % (2.5).
    text += &format!(
        "[alerts]\nloss_above = \"0.05%\"\nfor = \"10s\"\nalertmanager = \"http://{am}\"\n\
         [[test]]\nname = \"loss\"\nrun = \"stamp\"\nrate = \"500/s\"\nreport = \"2s\"\n\
         [[test]]\nname = \"tput\"\nrun = \"stream\"\nrate = \"20M\"\nduration = \"1s\"\ninterval = \"15s\"\n\
         [[group]]\nname = \"all\"\ntests = [\"loss\", \"tput\"]\n"
    );
    let file = dir.join("mesh.toml");
    std::fs::write(&file, text).unwrap();
    let (mut coordinator, rows) = coordinate(&client, &file);
    // The ways that cross the link client to server: a client-side host's probes out to
    // the server side, a server-side host's answers back from the client side.
    let mut crossing = BTreeSet::new();
    for (src, _, _) in &hosts[..5] {
        for (dst, _, _) in &hosts {
            if src == dst || client_side(src) == client_side(dst) {
                continue;
            }
            let direction = if client_side(src) {
                "forward"
            } else {
                "reverse"
            };
            crossing.insert((src.to_string(), dst.to_string(), direction.to_string()));
        }
    }
    assert_eq!(crossing.len(), 9 + 6);
    // The ways Alertmanager has sent with this status.
    let told = |status: &str| -> BTreeSet<(String, String, String)> {
        hooks
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path == "/from-alertmanager")
            .filter_map(|(_, body)| serde_json::from_str::<serde_json::Value>(body).ok())
            .flat_map(|doc| doc["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|alert| alert["status"] == status)
            .map(|alert| {
                let l = &alert["labels"];
                let text = |k: &str| l[k].as_str().unwrap_or("").to_string();
                assert_eq!(text("alertname"), "LinerateLossAbove", "{alert}");
                (text("src"), text("dst"), text("direction"))
            })
            .collect()
    };
    wait_for(
        "Alertmanager's notice of every crossing way's loss",
        Duration::from_secs(120),
        || told("firing").is_superset(&crossing),
    );
    // A span and two windows more of the same loss: still those ways and no other.
    std::thread::sleep(Duration::from_secs(14));
    let firing = told("firing");
    assert!(
        firing.is_superset(&crossing),
        "alerts for every way crossing the lossy link: {firing:?}"
    );
    // A way that does not cross the link that way may lose only what the path dropped
    // besides the loss model: a full socket in either namespace, or the emulator's own
    // drops (a full ring, a full queue) on the way back. Where none was counted, an alert
    // on such a way is linerate's error.
    let kernel_drops: Vec<u64> = sides
        .iter()
        .zip(kernel_drops_before)
        .map(|(ns, before)| kernel_udp_drops(ns) - before)
        .collect();
    let emulator = emulator_own_drops(&status_file);
    let uncrossing: BTreeSet<_> = firing.difference(&crossing).cloned().collect();
    let other_drops = kernel_drops.iter().sum::<u64>() + emulator.iter().sum::<u64>();
    eprintln!(
        "alerts on ways that do not cross the link: {uncrossing:?}; UDP datagrams the \
         client and server namespaces' kernels dropped {kernel_drops:?}, the emulator \
         itself (forward, reverse) {emulator:?}"
    );
    assert!(
        uncrossing.is_empty() || other_drops >= 3,
        "alerts for exactly the ways crossing the lossy link, where no kernel or emulator \
         dropped anything besides the loss model: {uncrossing:?} more than {crossing:?}"
    );
    // The loss taken away. The emulator's restart loses what is in flight both ways for
    // a moment, which may open an alert or two of its own: every alert opened resolves.
    let started_clean = std::time::Instant::now();
    drop(lossy);
    let _clean = restart_lab_emulator(&lab, &["--delay", "2ms"]);
    wait_for(
        "Alertmanager's notice of every way resolved",
        Duration::from_secs(120),
        || {
            let resolved = told("resolved");
            resolved.is_superset(&crossing) && resolved.is_superset(&told("firing"))
        },
    );
    let resolved_after = started_clean.elapsed();
    stop(&mut coordinator);
    // Every way back under the bound within `for` and a few windows of the link being
    // clean (the emulator's restart and Alertmanager's group interval besides).
    assert!(
        resolved_after < Duration::from_secs(40),
        "{resolved_after:?}"
    );
    // Every pair was measured window after window, and the streams ran beside.
    let printed = rows.lock().unwrap().clone();
    for (src, _, _) in &hosts[..5] {
        for (dst, _, _) in &hosts {
            if src == dst {
                continue;
            }
            let windows: Vec<&serde_json::Value> = printed
                .iter()
                .filter(|r| r["test"] == "loss" && r["src"] == *src && r["dst"] == *dst)
                .collect();
            assert!(
                windows.len() >= 6,
                "{src} -> {dst}: {} windows",
                windows.len()
            );
            assert!(
                windows.iter().all(|r| r["ok"] == true),
                "{src} -> {dst}: {windows:#?}"
            );
        }
    }
    assert!(
        printed
            .iter()
            .any(|r| r["test"] == "tput" && r["ok"] == true),
        "no stream ran beside the probes"
    );
    drop(alertmanager);
    let _ = std::fs::remove_dir_all(dir);
}

/// A mesh's connect test over a 20 ms lab path: its headline, the median time to open a
/// connection, is one round trip as ping measures it over the same path in the same run
/// (the SYN and its answer), and never less than ping's least.
#[test]
fn a_mesh_connect_test_times_one_round_trip_as_ping_does() {
    let test = "a_mesh_connect_test_times_one_round_trip_as_ping_does";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("ping", test) {
        return;
    }
    let _turn = turn();
    let lab = format!("c{}", std::process::id() % 100_000);
    let _down = lab_up(&lab, &["--rtt", "20ms"]);
    let (client, server) = (format!("lrlab-{lab}-client"), format!("lrlab-{lab}-server"));
    let dir = scratch("connect");
    let (key, _agents) = lab_agents(&client, &server, &dir);
    let hosts = [
        ("client".to_string(), "10.77.0.1".to_string()),
        ("server".to_string(), "10.77.0.2".to_string()),
    ];
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        mesh_text(
            "open",
            &key,
            &hosts,
            "[[test]]\nname = \"open\"\nrun = \"connect\"\nrate = \"20/s\"\nduration = \"3s\"\ninterval = \"1m\"\n\
             [[group]]\nname = \"all\"\ntests = [\"open\"]\n",
        ),
    )
    .unwrap();
    let ping = Command::new("ip")
        .args([
            "netns", "exec", &client, "ping", "-n", "-c", "40", "-i", "0.05",
        ])
        .arg("10.77.0.2")
        .output()
        .unwrap();
    assert!(ping.status.success(), "{}", stderr(&ping));
    let times = ping_times_ms(&String::from_utf8_lossy(&ping.stdout));
    assert!(times.len() >= 30, "{times:?}");
    let (ping_min, ping_p50) = (times[0], times[times.len() / 2]);
    let out = Command::new("ip")
        .args(["netns", "exec", &client, binary()])
        .args(["--no-store", "mesh", "run", file.to_str().unwrap()])
        .args(["--cycles", "1", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|row| row["test"] == "open")
        .collect();
    assert_eq!(rows.len(), 2, "both ways: {rows:?}");
    for row in &rows {
        assert_eq!(row["outcome"], "ok", "{row}");
        assert_eq!(row["protocol"], "tcp", "{row}");
        let text = row["headline_text"].as_str().unwrap();
        assert!(text.starts_with("connect p50 "), "{text}");
        let p50 = num(row, "/headline") * 1e3;
        eprintln!(
            "{}: connect p50 {p50:.3} ms; ping least {ping_min:.3} ms, median {ping_p50:.3} ms",
            row["src"]
        );
        assert!(
            p50 >= ping_min - 0.2 && (p50 - ping_p50).abs() <= 2.0,
            "connect p50 {p50:.3} ms, ping's least {ping_min:.3} ms and median {ping_p50:.3} ms"
        );
    }
}
