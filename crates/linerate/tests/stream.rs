//! `linerate stream` end to end on loopback: the result contract and its consistency.

mod common;
use common::*;

const CONTRACT: &[&str] = &[
    "/test",
    "/config/parallel",
    "/config/direction",
    "/config/length",
    "/host/local/kernel",
    "/host/local/cpu_model",
    "/host/local/cores",
    "/host/remote/kernel",
    "/host/remote/cpu_model",
    "/host/remote/cores",
    "/intervals/0/start",
    "/intervals/0/end",
    "/intervals/0/receiver_bps",
    "/intervals/0/sender_bps",
    "/summary/receiver_bps",
    "/summary/receiver_bytes",
    "/summary/sender_bps",
    "/summary/sender_bytes",
    "/summary/retransmits",
    "/summary/duration_s",
    "/summary/service_demand_us_per_kb/local",
    "/summary/service_demand_us_per_kb/remote",
];

const CPU_KEYS: &[&str] = &[
    "user_pct",
    "system_pct",
    "softirq_pct",
    "busiest_core_pct",
    "process_pct",
];

#[test]
fn local_stream_json_keeps_the_contract_and_adds_up() {
    let out = linerate(&["stream", "-t", "2", "-i", "0.5", "-P", "3", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    for key in CONTRACT {
        assert!(doc.pointer(key).is_some(), "missing {key}");
    }
    for side in ["local", "remote"] {
        for key in CPU_KEYS {
            let value = num(&doc, &format!("/summary/cpu/{side}/{key}"));
            assert!(
                (0.0..=100.0 * 64.0).contains(&value),
                "{side} {key} = {value}"
            );
        }
    }
    assert_eq!(doc["test"], "tcp_stream");
    assert_eq!(doc["config"]["parallel"], 3);
    assert_eq!(doc["flows"].as_array().unwrap().len(), 3);
    assert_eq!(doc["intervals"].as_array().unwrap().len(), 4);
    let received = num(&doc, "/summary/receiver_bytes");
    assert!(received > 0.0);
    // The summary is the sum of its flows, and the intervals cover the same window.
    let flow_sum: f64 = doc["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["receiver_bytes"].as_f64().unwrap())
        .sum();
    assert_eq!(flow_sum, received);
    let interval_sum: f64 = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["receiver_bytes"].as_f64().unwrap())
        .sum();
    assert!(
        (interval_sum / received - 1.0).abs() < 0.01,
        "{interval_sum} vs {received}"
    );
    // Everything the sender wrote arrived by the end of the drain.
    assert_eq!(
        num(&doc, "/summary/receiver_bytes_total"),
        num(&doc, "/summary/sender_bytes_total")
    );
    let duration = num(&doc, "/summary/duration_s");
    assert!((duration - 2.0).abs() < 0.1, "{duration}");
    let rate = num(&doc, "/summary/receiver_bps");
    assert!((rate / (received * 8.0 / duration) - 1.0).abs() < 0.02);
    assert!(num(&doc, "/summary/service_demand_us_per_kb/local") > 0.0);
    assert!(num(&doc, "/summary/cpu/local/process_pct") > 0.0);
}

#[test]
fn reverse_and_bidir_measure_the_right_ends() {
    let out = linerate(&["stream", "-t", "1", "-R", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["config"]["direction"], "reverse");
    assert_eq!(doc["flows"][0]["direction"], "reverse");
    assert!(num(&doc, "/summary/receiver_bytes") > 0.0);

    let out = linerate(&["stream", "-t", "1", "--bidir", "-P", "2", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let directions = doc["summary"]["directions"]
        .as_array()
        .expect("bidir directions");
    assert_eq!(directions.len(), 2);
    for d in directions {
        assert_eq!(d["flows"], 2);
        assert!(d["receiver_bytes"].as_f64().unwrap() > 0.0, "{d}");
    }
    assert_eq!(doc["flows"].as_array().unwrap().len(), 4);
}

#[test]
fn text_output_has_intervals_and_headline() {
    let out = linerate(&["stream", "-t", "1", "-i", "0.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0.00-0.50 sec"), "{text}");
    assert!(text.contains("Receiver goodput:"), "{text}");
    // Loopback: both ends on one host, one CPU line with each end's share.
    assert!(
        text.contains("CPU (one host, client and server)") && text.contains("server "),
        "{text}"
    );
}

#[test]
fn window_reports_what_the_kernel_granted() {
    let out = linerate(&["stream", "-t", "0.5", "-w", "64K", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    // Linux doubles the request for its own bookkeeping.
    assert_eq!(doc["flows"][0]["client"]["sndbuf"], 131072);
    assert_eq!(doc["flows"][0]["server"]["rcvbuf"], 131072);
}

#[test]
fn pacing_holds_each_flow_to_its_rate() {
    let out = linerate(&["stream", "-t", "2", "-P", "2", "--rate", "200M", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    // Never above the rate; below it only where other work kept the CPUs busy (which
    // the result says: a rate asked is then the machine's to break, not the pacer's).
    let busy = host_was_busy(&doc);
    for flow in doc["flows"].as_array().unwrap() {
        let bps = flow["receiver_bps"].as_f64().unwrap();
        assert!(bps / 200e6 < 1.03, "flow at {bps}: above its rate");
        assert!(busy || bps / 200e6 > 0.97, "flow at {bps}");
    }
}

#[test]
fn many_flows_on_few_threads_all_move_data() {
    let out = linerate(&[
        "stream",
        "-t",
        "1",
        "-P",
        "200",
        "--threads",
        "2",
        "-i",
        "0",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 200);
    assert!(
        flows
            .iter()
            .all(|f| f["receiver_bytes"].as_u64().unwrap() > 0),
        "a starved flow"
    );
}

#[test]
fn omit_leaves_the_warm_up_out_of_the_window() {
    let out = linerate(&["stream", "-t", "1", "--omit", "0.5", "-i", "0.5", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let intervals = doc["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), 3);
    assert_eq!(intervals[0]["omitted"], true);
    assert_eq!(intervals[1]["omitted"], false);
    let duration = num(&doc, "/summary/duration_s");
    assert!((duration - 1.0).abs() < 0.05, "{duration}");
    // The window holds only the two measured intervals' bytes.
    let measured: f64 = intervals[1..]
        .iter()
        .map(|i| i["receiver_bytes"].as_f64().unwrap())
        .sum();
    let window = num(&doc, "/summary/receiver_bytes");
    assert!(
        (measured / window - 1.0).abs() < 0.01,
        "{measured} vs {window}"
    );
    assert!(num(&doc, "/summary/receiver_bytes_total") > window);
}

#[test]
fn mss_and_congestion_reach_the_sockets() {
    let out = linerate(&["stream", "-t", "0.5", "-M", "1000", "-C", "reno", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let mss = doc["flows"][0]["mss"].as_u64().unwrap();
    assert!(mss > 0 && mss <= 1000, "mss {mss}");
    assert_eq!(doc["flows"][0]["client"]["congestion"], "reno");
    assert_eq!(doc["flows"][0]["server"]["congestion"], "reno");
}

#[test]
fn an_unknown_congestion_algorithm_is_named_in_the_error() {
    let out = linerate(&["stream", "-t", "0.5", "-C", "no-such-cc"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("no-such-cc"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn ctrl_c_ends_a_test_with_what_ran_shown_and_kept_and_status_130() {
    let server = ServeProcess::start(&[]);
    let port = server.port.to_string();
    let db = std::env::temp_dir().join(format!("linerate-interrupt-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let child = std::process::Command::new(binary())
        .env("LINERATE_DB", &db)
        .args(["stream", "127.0.0.1", "-p", &port, "-t", "20", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("linerate stream");
    std::thread::sleep(std::time::Duration::from_millis(3000));
    // SAFETY: signalling the child this test started, by its PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    // Ended at once, not at the end of its 20 s.
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interrupted after"),
        "{}",
        stderr(&out)
    );
    let doc = json(&out);
    let after = num(&doc, "/interrupted/after_s");
    assert!((0.5..8.0).contains(&after), "interrupted after {after} s");
    assert!(num(&doc, "/summary/receiver_bytes") > 0.0);
    assert!((num(&doc, "/summary/duration_s") - after).abs() < 1e-9);
    assert!(!doc["intervals"].as_array().unwrap().is_empty());
    // The server ended its side when told, and the run is kept with its mark.
    assert!(server.wait_log(
        "ended early by the client",
        std::time::Duration::from_secs(5)
    ));
    let shown = std::process::Command::new(binary())
        .env("LINERATE_DB", &db)
        .args(["show", "1", "--json"])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert_eq!(json(&shown)["interrupted"], doc["interrupted"]);
    let _ = std::fs::remove_file(&db);
}
