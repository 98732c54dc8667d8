//! `serve --http`/`--https` and `linerate rpm` on loopback: real clients (curl) read the
//! configuration and the endless download over HTTP/2, and `linerate rpm` completes
//! against both listeners. Over emulated paths (deep and short queues, mach) in lab.rs.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// `linerate serve --http 127.0.0.1:0 --https 127.0.0.1:0`: its process and the two
/// configuration URLs it announced.
struct Served {
    child: Child,
    http: String,
    https: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_http(extra: &[&str]) -> Served {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let mut child = Command::new(binary())
        .args([
            "--no-store",
            "serve",
            "-q",
            "--port",
            &port,
            "--listen",
            "127.0.0.1",
        ])
        .args(["--http", "127.0.0.1:0", "--https", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut http, mut https) = (String::new(), String::new());
    while http.is_empty() || https.is_empty() {
        let line = lines.next().expect("serve announces its URLs").unwrap();
        if let Some(url) = line.split("responsiveness (RPM) at ").nth(1) {
            if url.starts_with("https://") {
                https = url.to_string();
            } else {
                http = url.to_string();
            }
        }
    }
    // The rest of its log is not read: drained so that it never blocks.
    std::thread::spawn(move || for _ in lines {});
    Served { child, http, https }
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl").args(args).output().expect("curl")
}

/// curl reads the configuration over HTTP/2 with TLS (ALPN) and over cleartext (prior
/// knowledge), and the endless download streams until curl stops it: a client of the
/// draft needs nothing else.
#[test]
fn curl_reads_the_configuration_and_the_endless_download_over_http2() {
    let test = "curl_reads_the_configuration_and_the_endless_download_over_http2";
    if !have("curl", test) {
        return;
    }
    let served = serve_http(&[]);
    for (url, how) in [
        (&served.https, vec!["--http2", "-k"]),
        (&served.http, vec!["--http2-prior-knowledge"]),
    ] {
        let mut args = vec!["-sS", "-w", "\n%{http_version}"];
        args.extend(&how);
        args.push(url);
        let out = curl(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, version) = text.rsplit_once('\n').unwrap();
        assert_eq!(version, "2", "{url}: HTTP/{version}");
        let config: serde_json::Value = serde_json::from_str(body).unwrap();
        let large = config["urls"]["large_https_download_url"].as_str().unwrap();
        assert!(
            url.starts_with(&large[..large.len() - "/large".len()]),
            "{large} from {url}"
        );
        // The endless download: curl stops it after a second, with megabytes read.
        let mut args = vec![
            "-s",
            "-o",
            "/dev/null",
            "--max-time",
            "1",
            "-w",
            "%{size_download} %{http_version}",
        ];
        args.extend(&how);
        args.push(large);
        let out = curl(&args);
        let report = String::from_utf8_lossy(&out.stdout).to_string();
        let (size, version) = report.split_once(' ').unwrap();
        assert_eq!(
            out.status.code(),
            Some(28),
            "curl stops at its time limit: {report}"
        );
        assert_eq!(version, "2");
        assert!(
            size.parse::<u64>().unwrap() > 10_000_000,
            "{large}: {report}"
        );
    }
    // An upload over HTTP/1.1 (curl -T) is read to its end and its size answered.
    let upload = served.http.replace("/.well-known/nq", "/slurp");
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("head -c 5000000 /dev/zero | curl -sS -T - -X POST {upload}"),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"bytes\":5000000}",
        "{}",
        stderr(&out)
    );
}

/// `linerate rpm` against both listeners: JSON with both directions measured, capacity
/// counted, a grade; each run kept, listed by `history`, compared by `compare`, exported as
/// CSV; a TLS server without a way to check it is a one-line usage error.
#[test]
fn rpm_measures_both_directions_over_tls_and_cleartext_and_keeps_each_run() {
    let served = serve_http(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("results.db").display().to_string();
    for (url, trust) in [(&served.https, vec!["--insecure"]), (&served.http, vec![])] {
        let mut args = vec![
            "--db",
            db.as_str(),
            "rpm",
            url.as_str(),
            "--time",
            "4",
            "--json",
        ];
        args.extend(&trust);
        let out = linerate(&args);
        assert!(out.status.success(), "{url}: {}", stderr(&out));
        let result = json(&out);
        assert_eq!(result["test"], "rpm");
        assert_eq!(result["tls"], url.starts_with("https://"));
        for leg in ["download", "upload"] {
            assert!(
                num(&result, &format!("/{leg}/capacity_bps")) > 1e8,
                "{leg}: {result}"
            );
            assert!(
                num(&result, &format!("/{leg}/probes")) > 10.0,
                "{leg}: {result}"
            );
            assert!(!result[leg]["intervals"].as_array().unwrap().is_empty());
        }
        assert!(num(&result, "/rpm") > 0.0, "{result}");
        assert!(result["grade"].is_string(), "{result}");
        // The spreads the latency chart draws are of the probes behind the figures: the
        // 20 idle round trips and 10 handshakes, and each leg's last window, whose
        // trimmed means lie within them.
        assert_eq!(num(&result, "/idle_spread/count"), 20.0, "{result}");
        assert_eq!(num(&result, "/idle_connect_spread/count"), 10.0, "{result}");
        for (figure, spread) in [
            ("/idle_latency_s", "/idle_spread"),
            ("/download/loaded_self_s", "/download/loaded_self_spread"),
            ("/upload/loaded_connect_s", "/upload/loaded_connect_spread"),
        ] {
            let value = num(&result, figure);
            assert!(
                num(&result, &format!("{spread}/min_s")) <= value
                    && value <= num(&result, &format!("{spread}/max_s")),
                "{figure} {value} outside {spread}: {result}"
            );
        }
    }
    let history = linerate(&["--db", &db, "history"]);
    let listed = String::from_utf8_lossy(&history.stdout).to_string();
    assert_eq!(listed.matches(" rpm ").count(), 2, "{listed}");
    assert!(listed.contains(" RPM ("), "{listed}");
    let compared = linerate(&["--db", &db, "compare", "1", "2"]);
    assert!(compared.status.success(), "{}", stderr(&compared));
    let table = String::from_utf8_lossy(&compared.stdout).to_string();
    for row in ["download Mbit/s", "upload RPM", "grade"] {
        assert!(table.contains(row), "{table}");
    }
    let csv = linerate(&["--db", &db, "export", "2", "--format", "csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout).to_string();
    assert!(
        csv.starts_with("direction,end_s,connections,goodput_bps,rpm\n"),
        "{csv}"
    );
    assert!(
        csv.contains("\ndownload,") && csv.contains("\nupload,"),
        "{csv}"
    );

    // The report draws the run: goodput and responsiveness over time, and the latency
    // idle against loaded, in a real browser.
    let page = dir.path().join("rpm.html");
    let report = linerate(&["--db", &db, "report", "2", "--html", page.to_str().unwrap()]);
    assert!(report.status.success(), "{}", stderr(&report));
    let html = std::fs::read_to_string(&page).unwrap();
    for chart in [
        "Goodput as load-generating connections were added",
        "Latency idle and under load",
        "download handshake",
    ] {
        assert!(html.contains(chart), "{chart} missing");
    }
    assert!(html.matches("<svg").count() >= 3, "charts are inline SVG");
    if let Some(shot) = chromium_screenshot(&page, (900, 1800), "rpm_report_in_chromium") {
        let (inked, colours) = shot.ink_and_colours();
        assert!(
            inked * 100 > shot.pixels.len() / shot.channels,
            "{inked} pixels drawn"
        );
        assert!(colours > 20, "only {colours} colours");
    }

    let out = linerate(&["--no-store", "rpm", &served.https, "--time", "4"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--insecure"), "{err}");
}

/// A server that accepts and never answers: `linerate rpm` gives up within its step
/// timeout (10 s) with one line saying what did not answer, not hanging.
#[test]
fn rpm_gives_up_on_a_server_that_never_answers() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        let (stream, _) = silent.accept().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(12));
        drop(stream);
    });
    let started = std::time::Instant::now();
    let out = linerate(&[
        "--no-store",
        "rpm",
        &format!("http://{addr}/.well-known/nq"),
    ]);
    let took = started.elapsed();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("no answer within 10 s"), "{err}");
    assert!(took < std::time::Duration::from_secs(14), "{took:?}");
    held.join().unwrap();
}

/// `rpm` aimed at linerate's test port (the commonest slip: 5201 instead of serve's
/// --http port) says so and what to give instead, rather than "connection reset".
#[test]
fn rpm_at_the_test_port_says_which_port_to_give() {
    let server = ServeProcess::start(&[]);
    let target = format!("127.0.0.1:{}", server.port);
    let out = linerate(&["rpm", "--http", &target, "-t", "2"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is linerate's test port") && err.contains("--http PORT"),
        "{err}"
    );
}

/// `-B` makes every connection leave from the address named: a listener standing in for
/// the server sees the first one come from it.
#[test]
fn connections_leave_from_the_address_bound() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/.well-known/nq", listener.local_addr().unwrap());
    let run = std::thread::spawn(move || {
        linerate(&["rpm", &url, "-B", "127.0.0.3", "-t", "2", "--json"])
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (connection, peer) = loop {
        match listener.accept() {
            Ok(accepted) => break accepted,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no connection came: {}",
                    if run.is_finished() {
                        stderr(&run.join().unwrap())
                    } else {
                        String::new()
                    }
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    assert_eq!(peer.ip().to_string(), "127.0.0.3");
    drop(connection);
    drop(listener);
    let out = run.join().unwrap();
    assert_ne!(out.status.code(), Some(0), "no server answered");
}
