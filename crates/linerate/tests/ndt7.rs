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

/// How one hand-made download client fared.
enum Fared {
    /// Upgraded, read the subtest to the server's Close and answered it: the payload
    /// bytes it received.
    Closed(u64),
    /// Not upgraded: why (the server closed the connection, or answered otherwise).
    Refused(String),
}

/// A connection from `source` upgraded to ndt7 at `path` by hand over a blocking socket
/// (a thousand fit in one test process), or why the server did not upgrade it.
fn upgraded_by_hand(
    server: std::net::SocketAddr,
    source: std::net::Ipv4Addr,
    path: &str,
) -> Result<std::net::TcpStream, String> {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&std::net::SocketAddr::from((source, 0)).into())
        .unwrap();
    socket
        .connect_timeout(&server.into(), Duration::from_secs(20))
        .map_err(|e| format!("connect: {e}"))?;
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: net.measurementlab.ndt.v7\r\n\r\n");
    if stream.write_all(head.as_bytes()).is_err() {
        return Err("the connection closed before the upgrade".into());
    }
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            _ => return Err("the connection closed before the upgrade".into()),
        }
    }
    if !answer.starts_with(b"HTTP/1.1 101") {
        return Err(String::from_utf8_lossy(&answer).into_owned());
    }
    Ok(stream)
}

/// A download from `source`, written by hand over a blocking socket so a thousand fit in
/// one test process: the upgrade, the server's frames read (unmasked, as a server's are)
/// until its Close, which is answered.
fn download_by_hand(server: std::net::SocketAddr, source: std::net::Ipv4Addr) -> Fared {
    use std::io::{Read, Write};
    let mut stream = match upgraded_by_hand(server, source, "/ndt/v7/download") {
        Ok(stream) => stream,
        Err(why) => return Fared::Refused(why),
    };
    let mut payload = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut header = [0u8; 2];
        if stream.read_exact(&mut header).is_err() {
            // Upgraded, then cut off without a Close: neither outcome the server may give.
            return Fared::Refused(format!("cut off after {payload} bytes"));
        }
        let len = match header[1] & 0x7f {
            126 => {
                let mut ext = [0u8; 2];
                stream.read_exact(&mut ext).unwrap();
                u64::from(u16::from_be_bytes(ext))
            }
            127 => {
                let mut ext = [0u8; 8];
                stream.read_exact(&mut ext).unwrap();
                u64::from_be_bytes(ext)
            }
            short => u64::from(short),
        };
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            stream.read_exact(&mut buf[..n]).unwrap();
            left -= n as u64;
        }
        match header[0] & 0x0f {
            0x2 => payload += len,
            0x8 => {
                // Our Close, masked (with a zero key) as a client's must be.
                let _ = stream.write_all(&[0x88, 0x80, 0, 0, 0, 0]);
                let _ = stream.read(&mut buf);
                return Fared::Closed(payload);
            }
            _ => {}
        }
    }
}

/// The most memory a process has held (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// A thousand downloads at once from forty addresses (25 each, within the per-client
/// cap): the server holds them under 256 MiB at its peak, and every one runs to the
/// server's Close, answered, and is kept; none is cut off.
#[test]
fn a_thousand_subtests_at_once_are_served_within_256_mib() {
    assert!(
        raise_descriptor_limit(4_000),
        "this test holds 1,000 sockets"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db").display().to_string();
    let server = ServeProcess::start(&["--db", &db, "--ndt7", "127.0.0.1:0", "--ndt7-cleartext"]);
    let addr: std::net::SocketAddr = announced(&server, "ndt7 at ").parse().unwrap();
    let clients: Vec<_> = (0..1000u32)
        .map(|i| {
            let source = std::net::Ipv4Addr::new(127, 3, (i % 40) as u8, 1);
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || download_by_hand(addr, source))
                .unwrap()
        })
        .collect();
    let fared: Vec<Fared> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let peak = peak_rss(server.pid());
    let closed: Vec<u64> = fared
        .iter()
        .filter_map(|f| match f {
            Fared::Closed(bytes) => Some(*bytes),
            Fared::Refused(_) => None,
        })
        .collect();
    let refused: Vec<&String> = fared
        .iter()
        .filter_map(|f| match f {
            Fared::Refused(why) => Some(why),
            Fared::Closed(_) => None,
        })
        .collect();
    eprintln!(
        "{} downloads closed by the server ({} bytes each at least), {} refused; the server's peak RSS {:.1} MiB",
        closed.len(),
        closed.iter().min().unwrap_or(&0),
        refused.len(),
        peak as f64 / (1 << 20) as f64
    );
    assert!(
        refused.is_empty(),
        "refused: {:?}",
        &refused[..refused.len().min(5)]
    );
    assert!(closed.iter().all(|&bytes| bytes > 0));
    assert!(peak < 256 << 20, "the server's peak RSS {peak} bytes");
    // Each is kept as a run: the log says so of each.
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let kept = || server.log().matches("stored as run").count();
    while kept() < 1000 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        kept(),
        1000,
        "{}",
        server
            .log()
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// An upload from `source` written by hand: binary messages of `message` bytes, each one
/// masked frame written 64 KiB at a time, until the server's Close (then the message
/// under way is finished and the Close answered). The payload bytes written, and the
/// server's last count of them (its AppInfo's NumBytes), or why it was not served.
fn upload_by_hand(
    server: std::net::SocketAddr,
    source: std::net::Ipv4Addr,
    message: u64,
) -> Result<(u64, u64), String> {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut stream = upgraded_by_hand(server, source, "/ndt/v7/upload")?;
    let closing = std::sync::Arc::new(AtomicBool::new(false));
    let mut reader = stream.try_clone().unwrap();
    let seen = closing.clone();
    // The server's frames: its measurements (the last count kept) until its Close.
    let counted = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut last = 0u64;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let mut header = [0u8; 2];
                if reader.read_exact(&mut header).is_err() {
                    break;
                }
                let len = match header[1] & 0x7f {
                    126 => {
                        let mut ext = [0u8; 2];
                        reader.read_exact(&mut ext).unwrap();
                        usize::from(u16::from_be_bytes(ext))
                    }
                    short => usize::from(short),
                };
                reader.read_exact(&mut buf[..len]).unwrap();
                match header[0] & 0x0f {
                    0x1 => {
                        let m: serde_json::Value = serde_json::from_slice(&buf[..len]).unwrap();
                        last = m["AppInfo"]["NumBytes"].as_u64().unwrap_or(last);
                    }
                    0x8 => break,
                    _ => {}
                }
            }
            seen.store(true, Ordering::Relaxed);
            last
        })
        .unwrap();
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    'messages: while !closing.load(Ordering::Relaxed) {
        // FIN, binary; masked, a 64-bit length; a zero mask key (the payload as it is).
        let mut frame = vec![0x82, 0x80 | 127];
        frame.extend_from_slice(&message.to_be_bytes());
        frame.extend_from_slice(&[0; 4]);
        if stream.write_all(&frame).is_err() {
            break;
        }
        let mut left = message;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if stream.write_all(&chunk[..n]).is_err() {
                break 'messages;
            }
            left -= n as u64;
            written += n as u64;
        }
    }
    let _ = stream.write_all(&[0x88, 0x80, 0, 0, 0, 0]);
    let last = counted.join().unwrap();
    Ok((written, last))
}

/// A hundred uploads at once, each sending 16 MiB messages (the most the spec allows, one
/// frame each): the server counts their payload as it arrives and never assembles a
/// message, so it holds them in under 256 MiB at its peak where whole messages would be
/// 1.6 GiB; each upload's count is at least one whole message and no more than was sent.
#[test]
fn a_hundred_uploads_of_16_mib_messages_are_counted_within_256_mib() {
    assert!(raise_descriptor_limit(1_000), "this test holds 200 sockets");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db").display().to_string();
    let server = ServeProcess::start(&["--db", &db, "--ndt7", "127.0.0.1:0", "--ndt7-cleartext"]);
    let addr: std::net::SocketAddr = announced(&server, "ndt7 at ").parse().unwrap();
    let message = linerate_model::ndt7::MAX_MESSAGE as u64;
    let clients: Vec<_> = (0..100u32)
        .map(|i| {
            let source = std::net::Ipv4Addr::new(127, 4, (i % 5) as u8, 1);
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || upload_by_hand(addr, source, message))
                .unwrap()
        })
        .collect();
    let fared: Vec<Result<(u64, u64), String>> =
        clients.into_iter().map(|c| c.join().unwrap()).collect();
    let peak = peak_rss(server.pid());
    let served: Vec<(u64, u64)> = fared.iter().filter_map(|f| f.clone().ok()).collect();
    let total: u64 = served.iter().map(|(written, _)| written).sum();
    eprintln!(
        "{} uploads served, {:.1} GiB written in 16 MiB messages; the server's peak RSS {:.1} MiB",
        served.len(),
        total as f64 / (1u64 << 30) as f64,
        peak as f64 / (1 << 20) as f64
    );
    let refused: Vec<&String> = fared.iter().filter_map(|f| f.as_ref().err()).collect();
    assert!(refused.is_empty(), "{:?}", &refused[..refused.len().min(5)]);
    for (written, counted) in &served {
        assert!(
            *counted >= message && counted <= written,
            "the server counted {counted} of {written} bytes"
        );
    }
    assert!(peak < 256 << 20, "the server's peak RSS {peak} bytes");
}

/// A locate service on loopback: answers each request with `status` and `body`, as many
/// times as asked, then ends.
fn locate_service(status: &'static str, body: String, answers: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(answers) {
            let mut stream = stream.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            assert!(head.starts_with(b"GET /v2/nearest/ndt/ndt7 HTTP/1.1"));
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}/v2/nearest/ndt/ndt7")
}

/// `--locate` (as `--mlab` asks M-Lab's): the nearest server's URLs, access tokens and
/// all, are the ones the subtests use (the served subtest keeps the token as the query
/// string's metadata); a locate service that fails or offers nothing usable is one line.
#[test]
fn a_located_server_is_tested_with_the_urls_the_locate_answer_gave() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db").display().to_string();
    let server = ServeProcess::start(&["--db", &db, "--ndt7", "127.0.0.1:0", "--ndt7-cleartext"]);
    let ndt7 = announced(&server, "ndt7 at ");
    let answer = format!(
        r#"{{"results": [{{"machine": "mlab1-lab01.example", "location": {{"city": "Lab", "country": "ZZ"}},
          "urls": {{"ws:///ndt/v7/download": "ws://{ndt7}/ndt/v7/download?access_token=DOWNTOKEN",
                    "ws:///ndt/v7/upload": "ws://{ndt7}/ndt/v7/upload?access_token=UPTOKEN"}}}}]}}"#
    );
    let locate = locate_service("200 OK", answer, 1);
    let out = linerate(&[
        "--no-store",
        "ndt7",
        "--locate",
        &locate,
        "--cleartext",
        "--download",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("mlab1-lab01.example (Lab, ZZ)"),
        "{}",
        stderr(&out)
    );
    let doc = json(&out);
    assert_eq!(doc["target"], "mlab1-lab01.example");
    assert_eq!(doc["subtests"][0]["ended"], "completed", "{doc}");
    assert!(
        server.wait_log("stored as run 1", Duration::from_secs(10)),
        "{}",
        server.log()
    );
    let kept = json(&linerate(&["show", "1", "--json", "--db", &db]));
    let metadata = &kept["subtests"][0]["metadata"];
    assert_eq!(
        metadata[0],
        serde_json::json!(["access_token", "DOWNTOKEN"]),
        "{kept}"
    );
    assert_eq!(
        metadata[1],
        serde_json::json!(["client_name", "linerate"]),
        "{kept}"
    );
    // A locate service that fails, and one with no server of the scheme asked.
    let failing = locate_service("503 Service Unavailable", "{\"error\": \"busy\"}".into(), 1);
    let out = linerate(&["--no-store", "ndt7", "--locate", &failing, "--cleartext"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("503"), "{}", stderr(&out));
    let tls_only = locate_service(
        "200 OK",
        r#"{"results": [{"machine": "m", "urls": {"wss:///ndt/v7/download": "wss://h/ndt/v7/download", "wss:///ndt/v7/upload": "wss://h/ndt/v7/upload"}}]}"#.into(),
        1,
    );
    let out = linerate(&["--no-store", "ndt7", "--locate", &tls_only, "--cleartext"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no server with ws://"),
        "{}",
        stderr(&out)
    );
    // Neither a target nor a locate service: the user's mistake.
    let out = linerate(&["--no-store", "ndt7"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
