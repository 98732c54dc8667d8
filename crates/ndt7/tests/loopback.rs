//! The server and the client against each other over loopback, and the server against
//! requests that are not ndt7 upgrades: counts that must agree byte for byte, and the
//! statuses RFC 6455 and the spec give.

use linerate_model::ndt7::{Subtest, SubtestEnd, SubtestResult};
use linerate_ndt7::{client, server};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn start(runtime_s: f64) -> (server::Ndt7Server, Arc<Mutex<Vec<SubtestResult>>>) {
    let kept: Arc<Mutex<Vec<SubtestResult>>> = Arc::default();
    let keep = kept.clone();
    let limits = server::Limits {
        runtime: Duration::from_secs_f64(runtime_s),
        hard_bound: Duration::from_secs_f64(runtime_s + 3.0),
        ..Default::default()
    };
    let server = server::start(
        "127.0.0.1:0".parse().unwrap(),
        None,
        limits,
        Arc::new(move |result| keep.lock().unwrap().push(result)),
    )
    .unwrap();
    (server, kept)
}

fn wait_for(kept: &Arc<Mutex<Vec<SubtestResult>>>, n: usize) -> Vec<SubtestResult> {
    for _ in 0..100 {
        if kept.lock().unwrap().len() >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    kept.lock().unwrap().clone()
}

#[test]
fn the_client_and_server_count_the_same_bytes_both_ways() {
    let (server, kept) = start(1.5);
    // The client uploads for longer than the server's runtime, as M-Lab's clients do: the
    // server ends the upload, its last measurement (its final count) sent before its
    // Close. A client that closed first would not hear that last count.
    let options = client::Options {
        target: client::Target::parse(&server.addr.to_string(), true).unwrap(),
        subtests: vec![Subtest::Download, Subtest::Upload],
        tls: None,
        upload_runtime: Duration::from_secs(4),
    };
    let ours = client::run(&options, &mut |_| {}).unwrap();
    let theirs = wait_for(&kept, 2);
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    let (down, up) = (&ours[0], &ours[1]);
    let (served_down, served_up) = (&theirs[0], &theirs[1]);
    // Download: the client received every payload byte the server sent, no more.
    assert_eq!(down.subtest, Subtest::Download);
    assert_eq!(down.ended, SubtestEnd::Completed, "{down:?}");
    assert_eq!(served_down.ended, SubtestEnd::Completed, "{served_down:?}");
    assert_eq!(down.app_bytes, served_down.app_bytes);
    assert!(down.app_bytes > 1 << 20);
    assert!(!down.server_measurements.is_empty());
    // The server took the client's own count for its figure.
    assert_eq!(served_down.counted_by, "client AppInfo");
    assert_eq!(
        served_down.metadata[0],
        ("client_name".into(), "linerate".into())
    );
    // Upload: the server counted every byte the client sent, and the client's figure is
    // the server's count.
    assert_eq!(up.subtest, Subtest::Upload);
    assert_eq!(up.counted_by, "server AppInfo");
    assert_eq!(served_up.ended, SubtestEnd::Completed, "{served_up:?}");
    let server_last = up.server_measurements.last().unwrap().app_info.unwrap();
    assert_eq!(server_last.num_bytes as u64, served_up.app_bytes);
    assert!(served_up.app_bytes <= up.app_bytes);
    // What the client handed over past the server's runtime was in buffers, not counted.
    assert!(served_up.app_bytes > 1 << 20, "{served_up:?}");
    // The server's TCPInfo is its own socket's: nothing acked the client did not receive
    // (framing adds at most 10 bytes a message), and what is not yet acked when the last
    // measurement is taken still sits in the send buffer, which autotuning keeps within
    // tcp_wmem's maximum.
    let tcp = down.server_measurements.last().unwrap().tcp_info.unwrap();
    let acked = tcp.bytes_acked.unwrap() as u64;
    assert!(acked <= tcp.bytes_sent.unwrap() as u64, "{tcp:?}");
    assert!(
        acked <= down.app_bytes + down.app_bytes / 100 + (64 << 10),
        "{tcp:?}"
    );
    let wmem_max: u64 = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(acked + wmem_max >= down.app_bytes, "{tcp:?} {down:?}");
    assert!(down.min_rtt_ms.unwrap() > 0.0);
}

fn raw_request(addr: std::net::SocketAddr, head: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn requests_that_are_not_ndt7_upgrades_get_the_status_the_rfc_and_spec_give() {
    let (server, _kept) = start(1.0);
    let upgrade = |path: &str, extra: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
        )
    };
    let status = |head: String| {
        let answer = raw_request(server.addr, &head);
        answer.lines().next().unwrap_or("").to_string()
    };
    let protocol = "Sec-WebSocket-Protocol: net.measurementlab.ndt.v7\r\n";
    assert!(
        status(upgrade("/ndt/v7/download", "")).contains(" 400 "),
        "no subprotocol"
    );
    assert!(status(upgrade("/elsewhere", protocol)).contains(" 404 "));
    assert!(status("GET /ndt/v7/download HTTP/1.1\r\nHost: x\r\n\r\n".into()).contains(" 426 "));
    let long = format!("/ndt/v7/upload?a={}", "b".repeat(5000));
    assert!(
        status(upgrade(&long, protocol)).contains(" 400 "),
        "a query over 4096 bytes"
    );
    assert!(status(upgrade("/ndt/v7/upload?a=%ff", protocol)).contains(" 400 "));
    let accepted = raw_request(server.addr, &upgrade("/ndt/v7/upload", protocol));
    assert!(accepted.starts_with("HTTP/1.1 101"), "{accepted}");
    // RFC 6455's own example key and its answer.
    assert!(
        accepted.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{accepted}"
    );
    assert!(accepted
        .to_ascii_lowercase()
        .contains("sec-websocket-protocol: net.measurementlab.ndt.v7"));
    assert_eq!(
        server
            .counters
            .bad_upgrades
            .load(std::sync::atomic::Ordering::Relaxed),
        5
    );
}

/// A connection upgraded to an ndt7 subtest by hand, its 101 read: what follows is raw
/// WebSocket frames.
fn upgraded(addr: std::net::SocketAddr, path: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: net.measurementlab.ndt.v7\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the upgrade's answer");
        answer.push(byte[0]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 101"));
    stream
}

/// A client frame's header: `masked` with an all-zero key (so the payload goes as is).
fn frame_head(fin: bool, opcode: u8, len: u64, masked: bool) -> Vec<u8> {
    let mask_bit = if masked { 0x80 } else { 0 };
    let mut out = vec![u8::from(fin) << 7 | opcode];
    match len {
        0..=125 => out.push(mask_bit | len as u8),
        126..=0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    if masked {
        out.extend_from_slice(&[0; 4]);
    }
    out
}

/// Reads until the server closes the connection (or the read times out); how long that
/// took.
fn until_closed(stream: &mut std::net::TcpStream) -> Duration {
    let began = std::time::Instant::now();
    let mut buf = [0u8; 65536];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
    began.elapsed()
}

/// Frames a client must not send: unmasked, longer than the spec's 16 MiB bound, and a
/// message cut into a storm of one-byte fragments. Each upload is closed at once (well
/// before its 5 s runtime), kept as refused with the reason, counted and logged; a proper
/// subtest beside them runs to its end.
#[test]
fn frames_a_client_must_not_send_close_the_subtest_and_others_go_on() {
    let (server, kept) = start(5.0);
    let storm: Vec<u8> = (0..200)
        .flat_map(|i| {
            let mut f = frame_head(false, if i == 0 { 2 } else { 0 }, 1, true);
            f.push(b'x');
            f
        })
        .collect();
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "unmasked",
            [frame_head(true, 2, 4, false), b"abcd".to_vec()].concat(),
            "unmasked",
        ),
        (
            "oversize",
            frame_head(true, 2, (16 << 20) + 1, true),
            "too long",
        ),
        ("fragment storm", storm, "fragment storm"),
    ];
    for (i, (case, bytes, why)) in cases.iter().enumerate() {
        let mut stream = upgraded(server.addr, linerate_model::ndt7::UPLOAD_PATH);
        stream.write_all(bytes).unwrap();
        let closed_after = until_closed(&mut stream);
        assert!(
            closed_after < Duration::from_secs(3),
            "{case}: closed after {closed_after:?}"
        );
        let results = wait_for(&kept, i + 1);
        let result = &results[i];
        assert_eq!(result.ended, SubtestEnd::Refused, "{case}: {result:?}");
        let ended_why = result.ended_why.clone().unwrap_or_default();
        assert!(
            ended_why.to_lowercase().contains(why),
            "{case}: {ended_why}"
        );
    }
    assert_eq!(
        server
            .counters
            .closed_by_server
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    // The server serves on.
    let options = client::Options {
        target: client::Target::parse(&server.addr.to_string(), true).unwrap(),
        subtests: vec![Subtest::Download],
        tls: None,
        upload_runtime: Duration::from_secs(1),
    };
    let ours = client::run(&options, &mut |_| {}).unwrap();
    assert_eq!(ours[0].ended, SubtestEnd::Completed, "{ours:?}");
}
