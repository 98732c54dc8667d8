//! `serve --ndt7` against M-Lab's own command-line client (ndt7-client from crates.io)
//! in cleartext on loopback: both subtests run, each is kept as a run and scraped from
//! `--metrics`, and the figures the three carry are the same counts.

mod common;

use common::*;
use std::time::Duration;

/// The address a server's log line `... {marker}{scheme}://ADDR/...` names.
fn announced(server: &ServeProcess, marker: &str) -> String {
    assert!(
        server.wait_log(marker, Duration::from_secs(10)),
        "{}",
        server.log()
    );
    let log = server.log();
    let line = log.lines().find(|l| l.contains(marker)).unwrap();
    let url = line.split(marker).nth(1).unwrap();
    let rest = url.split("://").nth(1).unwrap();
    rest.split('/').next().unwrap().to_string()
}

/// The value of the one sample of `name` whose labels hold every `labels` pair.
fn sample_of(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn ndt7_client_in_cleartext_is_served_kept_and_scraped_with_the_same_counts() {
    let test = "ndt7_client_in_cleartext_is_served_kept_and_scraped_with_the_same_counts";
    let Some(peer) = ndt7_client(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db").display().to_string();
    let server = ServeProcess::start(&[
        "--db",
        &db,
        "--ndt7",
        "127.0.0.1:0",
        "--ndt7-cleartext",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let ndt7 = announced(&server, "ndt7 at ");
    let metrics = announced(&server, "metrics at ");
    let out = std::process::Command::new(&peer)
        .args([
            "--server",
            &ndt7,
            "--no-locate",
            "--no-tls",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ndt7-client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        server.wait_log("stored as run 2", Duration::from_secs(10)),
        "{}",
        server.log()
    );
    let kept = |id: &str| {
        let shown = linerate(&["show", id, "--json", "--db", &db]);
        assert!(shown.status.success(), "{}", stderr(&shown));
        json(&shown)["subtests"][0].clone()
    };
    let (download, upload) = (kept("1"), kept("2"));
    assert_eq!(download["subtest"], "download", "{download}");
    assert_eq!(upload["subtest"], "upload", "{upload}");
    for subtest in [&download, &upload] {
        assert_eq!(subtest["ended"], "completed", "{subtest}");
        assert_eq!(subtest["measured_by"], "server", "{subtest}");
    }
    // The download: ndt7-client counts what it received; where it sends its counts the
    // kept figure is that count, else the server's TCP's bytes acknowledged (the payload
    // and about 0.2 % of framing) over the server's clock. The server sent at least what
    // the client counted.
    let client_count = ndt7_client_last(&lines, "download", "client");
    let counted = num(&client_count, "/AppInfo/NumBytes");
    assert!(counted > 1e6, "{client_count}");
    assert!(num(&download, "/app_bytes") >= counted, "{download}");
    let figure = counted * 8.0 / (num(&client_count, "/AppInfo/ElapsedTime") / 1e6);
    let kept_bps = num(&download, "/goodput_bps");
    let band = match download["counted_by"].as_str() {
        Some("client AppInfo") => 1e-6,
        Some("server TCPInfo BytesAcked") => 0.03,
        other => panic!("the download counted by {other:?}"),
    };
    assert!(
        (kept_bps / figure - 1.0).abs() < band,
        "kept {kept_bps:.0} bit/s ({}) against the client's {figure:.0} bit/s",
        download["counted_by"]
    );
    // The upload: the server's last measurement ndt7-client printed (it stops reading
    // as its own 10 s end, so it may miss the last one sent) is one of those the server
    // kept, and the server's last has the kept count.
    let served = ndt7_client_last(&lines, "upload", "server");
    let series = upload["server_measurements"].as_array().unwrap();
    assert!(
        series.iter().any(|m| m["AppInfo"] == served["AppInfo"]),
        "{served} is not among the server's measurements"
    );
    assert_eq!(
        num(series.last().unwrap(), "/AppInfo/NumBytes"),
        num(&upload, "/app_bytes")
    );
    assert_eq!(upload["counted_by"], "server AppInfo");
    // /metrics: each subtest's figure, the way its bytes went.
    let text = get(&metrics, "/metrics");
    for (direction, subtest) in [("reverse", &download), ("forward", &upload)] {
        let scraped = sample_of(
            &text,
            "linerate_goodput_bytes_per_second",
            &[
                "test=\"ndt7\"",
                &format!("direction=\"{direction}\""),
                "mesh=\"serve\"",
            ],
        )
        .unwrap_or_else(|| panic!("no ndt7 {direction} goodput in {text}"));
        let kept_bps = num(subtest, "/goodput_bps");
        assert!(
            (scraped * 8.0 / kept_bps - 1.0).abs() < 1e-3,
            "{direction}: scraped {scraped} B/s, kept {kept_bps} bit/s"
        );
    }
}
