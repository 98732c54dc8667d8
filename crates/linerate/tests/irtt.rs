//! Debian's irtt (0.9) client against `linerate serve --irtt`: what irtt measured of each
//! round trip, against its own clock (one host: the server's stamps must fall between the
//! client's send and receive of the same packet), and what the server counted, against
//! what the client says it sent. The lab test (tests/lab.rs) holds each way's delay to the
//! emulator's.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

/// `linerate serve --irtt 127.0.0.1:0 EXTRA` and the irtt port it announced.
fn irtt_server(extra: &[&str]) -> (ServeProcess, String) {
    let mut args = vec!["--no-store", "--no-iperf2", "--irtt", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = ServeProcess::start(&args);
    assert!(
        server.wait_log("irtt server on udp", Duration::from_secs(10)),
        "{}",
        server.log()
    );
    let log = server.log();
    let addr = log
        .lines()
        .find_map(|l| l.split("irtt server on udp ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the irtt address")
        .to_string();
    (server, addr)
}

/// `irtt client ARGS ADDR` with its JSON on standard output, killed after 30 s.
fn irtt_client(addr: &str, args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-s", "KILL", "30", "irtt", "client", "-Q", "-o", "-"])
        .args(args)
        .arg(addr)
        .output()
        .expect("run irtt")
}

fn wall(stamp: &Value) -> i64 {
    stamp["wall"].as_i64().expect("a wall time")
}

/// 2 s of 172-byte requests every 10 ms, random fill both ways: every request answered
/// (loopback loses none), the server's received count (irtt's "server packets received"),
/// its own log line and its /metrics agree with what the client sent, each answer is the request's
/// length, and on the one clock of one host each server stamp lies between the client's
/// send and receive of that round trip, the receive before the send, the server's two
/// clocks agreeing on the time between.
#[test]
fn a_real_irtt_client_is_answered_and_each_round_trip_stamped_within_it() {
    let test = "a_real_irtt_client_is_answered_and_each_round_trip_stamped_within_it";
    if !have("irtt", test) {
        return;
    }
    let (server, addr) = irtt_server(&["--metrics", "127.0.0.1:0"]);
    assert!(server.wait_log("metrics at http://", Duration::from_secs(5)));
    let metrics = server
        .log()
        .split("metrics at http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("the metrics address")
        .to_string();
    let out = irtt_client(
        &addr,
        &[
            "-d",
            "2s",
            "-i",
            "10ms",
            "-l",
            "172",
            "--fill=rand",
            "--sfill=rand",
        ],
    );
    assert!(
        out.status.success(),
        "irtt: {}\n{}",
        stderr(&out),
        server.log()
    );
    let doc = json(&out);
    let stats = &doc["stats"];
    let sent = num(stats, "/packets_sent");
    assert!(sent >= 150.0, "{stats}");
    assert_eq!(num(stats, "/packets_received"), sent, "{stats}");
    assert_eq!(num(stats, "/server_packets_received"), sent, "{stats}");
    assert_eq!(num(stats, "/bytes_received"), sent * 172.0, "{stats}");
    assert_eq!(doc["config"]["params"]["server_fill"], "rand");
    let said = format!("{sent} of {sent} requests answered", sent = sent as u64);
    assert!(
        server.wait_line(&["irtt: session from", &said], Duration::from_secs(5)),
        "{}",
        server.log()
    );
    // The open's answer and every echo's.
    assert_eq!(
        metric(&metrics, "linerate_irtt_answered_packets_total"),
        sent + 1.0
    );
    assert_eq!(metric(&metrics, "linerate_irtt_sessions"), 0.0);
    let trips = doc["round_trips"].as_array().expect("round trips");
    for trip in trips {
        let client = &trip["timestamps"]["client"];
        let served = &trip["timestamps"]["server"];
        let (sent_at, back_at) = (wall(&client["send"]), wall(&client["receive"]));
        let (heard, answered) = (wall(&served["receive"]), wall(&served["send"]));
        assert!(
            sent_at <= heard && heard <= answered && answered <= back_at,
            "out of order: {trip}"
        );
        let mono = served["send"]["monotonic"].as_i64().unwrap()
            - served["receive"]["monotonic"].as_i64().unwrap();
        assert!((mono - (answered - heard)).abs() <= 10_000, "{trip}");
    }
}

/// With `--irtt-hmac-key-file` only signed packets are answered: a client with the key
/// runs, one with another key or none is never answered (irtt's "no reply from server")
/// and the server logs why.
#[test]
fn an_irtt_server_with_a_key_answers_only_clients_that_sign_with_it() {
    let test = "an_irtt_server_with_a_key_answers_only_clients_that_sign_with_it";
    if !have("irtt", test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("lr-irtt-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("irtt.key");
    std::fs::write(&key, "a shared secret\n").unwrap();
    let (server, addr) = irtt_server(&["--irtt-hmac-key-file", key.to_str().unwrap()]);
    let signed = irtt_client(
        &addr,
        &["-d", "500ms", "-i", "20ms", "--hmac=a shared secret"],
    );
    assert!(
        signed.status.success(),
        "{}\n{}",
        stderr(&signed),
        server.log()
    );
    // Every request sent answered (a busy host's client may send one or two fewer than
    // the 25 of 500 ms).
    let stats = &json(&signed)["stats"];
    assert!(num(stats, "/packets_sent") >= 15.0, "{stats}");
    assert_eq!(
        num(stats, "/packets_received"),
        num(stats, "/packets_sent"),
        "{stats}"
    );
    for hmac in [Some("--hmac=another secret"), None] {
        let mut args = vec!["-d", "500ms", "--timeouts=200ms,200ms"];
        args.extend(hmac);
        let refused = irtt_client(&addr, &args);
        assert!(!refused.status.success(), "{hmac:?}: answered");
        assert!(
            stderr(&refused).contains("no reply from server"),
            "{}",
            stderr(&refused)
        );
    }
    assert!(
        server.wait_log("HMAC does not match", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    assert!(
        server.wait_log("no HMAC where one is required", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a client asks beyond the server's bounds is granted within them, as irtt's own
/// server does: an interval of 1 ms becomes 10 ms, which irtt's client refuses unless
/// told to take it (`--loose`), and then sends at.
#[test]
fn an_irtt_client_asking_beyond_the_bounds_is_granted_them() {
    let test = "an_irtt_client_asking_beyond_the_bounds_is_granted_them";
    if !have("irtt", test) {
        return;
    }
    let (server, addr) = irtt_server(&[]);
    let strict = irtt_client(&addr, &["-d", "1s", "-i", "1ms"]);
    assert!(!strict.status.success());
    assert!(
        stderr(&strict).contains("server increased interval from 1ms to 10ms"),
        "{}",
        stderr(&strict)
    );
    let loose = irtt_client(&addr, &["-d", "1s", "-i", "1ms", "--loose"]);
    assert!(
        loose.status.success(),
        "{}\n{}",
        stderr(&loose),
        server.log()
    );
    let doc = json(&loose);
    assert_eq!(num(&doc, "/config/params/interval"), 10_000_000.0);
    let sent = num(&doc, "/stats/packets_sent");
    // At 10 ms, not the 1 ms asked (a thousand); a busy host's client sends fewer.
    assert!(
        (50.0..=101.0).contains(&sent),
        "{sent} requests in 1 s at 10 ms"
    );
    assert_eq!(num(&doc, "/stats/server_packets_received"), sent);
}

/// `linerate stamp --irtt` against `serve --irtt` on loopback, signed with a shared key:
/// every request answered and counted by the server (its log line), the figures of one
/// clock (each way's one-way delay given, none below zero, within the round trip), and a
/// wrong key refused at the open with the reason.
#[test]
fn stamp_irtt_measures_against_serve_irtt_with_a_key() {
    let dir = std::env::temp_dir().join(format!("lr-irtt-stamp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("irtt.key");
    let wrong = dir.join("wrong.key");
    std::fs::write(&key, "shared\n").unwrap();
    std::fs::write(&wrong, "other\n").unwrap();
    let (server, addr) = irtt_server(&["--irtt-hmac-key-file", key.to_str().unwrap()]);
    let out = linerate(&[
        "--no-store",
        "stamp",
        &addr,
        "--irtt",
        "--irtt-hmac-key-file",
        key.to_str().unwrap(),
        "--interval",
        "10ms",
        "-t",
        "1",
        "--size",
        "200",
        "--json",
    ]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), server.log());
    let doc = json(&out);
    assert_eq!(doc["protocol"], "irtt");
    assert_eq!(doc["mode"], "authenticated");
    assert_eq!(num(&doc, "/size"), 200.0);
    let sent = num(&doc, "/sent");
    assert!(sent >= 50.0, "{doc}");
    assert_eq!(num(&doc, "/answered"), sent, "{doc}");
    assert_eq!(num(&doc, "/loss/forward"), 0.0, "{}", doc["loss"]);
    let said = format!("{n} of {n} requests answered", n = sent as u64);
    assert!(
        server.wait_line(&[&said], Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let rtt_max = num(&doc, "/rtt_us/max");
    for way in ["forward", "reverse"] {
        let delay = &doc[way]["delay_us"];
        assert!(
            num(delay, "/min") >= 0.0 && num(delay, "/max") <= rtt_max,
            "{way}: {delay}"
        );
    }
    let refused = linerate(&[
        "--no-store",
        "stamp",
        &addr,
        "--irtt",
        "--irtt-hmac-key-file",
        wrong.to_str().unwrap(),
        "-t",
        "1",
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("The same key?"),
        "{}",
        stderr(&refused)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
