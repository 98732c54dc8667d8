//! Request/response tests (`linerate rr`, `linerate crr`) over loopback: the result
//! contract, the honesty of the figures against each other and against a fault hook in
//! the server, and failed peers.

mod common;

use common::{json, linerate, num, stderr};
use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};

/// Runs linerate with the server-side fault hook set (the in-process server shares the
/// environment).
fn linerate_with_fault(hook: &str, args: &[&str]) -> Output {
    common::command()
        .args(args)
        .env("LINERATE_FAULT_HOOK", hook)
        .output()
        .expect("linerate runs")
}

fn latency_keys_are_ordered(latency: &Value) {
    let get = |k: &str| {
        latency[k]
            .as_f64()
            .unwrap_or_else(|| panic!("latency_us.{k} missing in {latency}"))
    };
    let chain = ["min", "p50", "p90", "p99", "p999", "p9999", "max"];
    for pair in chain.windows(2) {
        assert!(
            get(pair[0]) <= get(pair[1]),
            "{} {} above {} {}",
            pair[0],
            get(pair[0]),
            pair[1],
            get(pair[1])
        );
    }
    assert!(get("mean") >= get("min") && get("mean") <= get("max"));
    assert!(get("stddev") >= 0.0);
}

#[test]
fn tcp_rr_reports_every_transaction_of_the_window_once() {
    let out = linerate(&["rr", "-t", "2", "-O", "0.5", "-J"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["test"], "tcp_rr");
    assert_eq!(doc["config"]["workload"], "rr");
    assert_eq!(doc["config"]["rr"]["request"], 1);
    assert!(
        doc["config"]["nodelay"].as_bool().unwrap(),
        "rr sets TCP_NODELAY by default"
    );
    let summary = &doc["summary"];
    assert_eq!(summary["latency_kind"], "round_trip");
    let transactions = num(&doc, "/summary/transactions");
    assert!(transactions > 100.0, "{summary}");
    // The histogram holds exactly the window's transactions: no more, no fewer.
    let latency = &summary["latency_us"];
    latency_keys_are_ordered(latency);
    assert_eq!(num(latency, "/count"), transactions);
    let buckets: f64 = latency["histogram"]
        .as_array()
        .expect("the full histogram")
        .iter()
        .map(|b| b["count"].as_f64().unwrap())
        .sum();
    assert_eq!(buckets, transactions);
    // Intervals after the warm-up add up to the summary.
    let measured: f64 = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| !i["omitted"].as_bool().unwrap())
        .map(|i| i["rr"]["transactions"].as_f64().unwrap())
        .sum();
    assert_eq!(measured, transactions);
    for interval in doc["intervals"].as_array().unwrap() {
        let rr = &interval["rr"];
        assert!(
            num(rr, "/p50_us") <= num(rr, "/p99_us") && num(rr, "/p99_us") <= num(rr, "/max_us")
        );
    }
    // One transaction in flight: the rate is the inverse of the mean round trip.
    let per_flow = num(&doc, "/summary/transactions_per_s");
    let mean_s = num(latency, "/mean") / 1e6;
    let product = per_flow * mean_s;
    assert!(
        (0.9..=1.02).contains(&product),
        "rate {per_flow}/s x mean {mean_s} s = {product}, not 1"
    );
    assert!(num(&doc, "/summary/service_demand_us_per_transaction/local") > 0.0);
    // Bytes arrive both ways: a byte per request at the server, a byte per answer here.
    let bytes = num(&doc, "/summary/receiver_bytes");
    assert!(
        bytes >= 2.0 * transactions * 0.95,
        "{bytes} bytes for {transactions}"
    );
}

#[test]
fn outstanding_transactions_are_kept_in_flight_and_reported() {
    let out = linerate(&[
        "rr",
        "-t",
        "1.5",
        "-P",
        "2",
        "--outstanding",
        "4",
        "--request",
        "100",
        "--response",
        "2k",
        "-i",
        "0",
        "-J",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    let achieved = num(&doc, "/summary/outstanding_achieved");
    assert_eq!(num(&doc, "/summary/outstanding_asked"), 4.0);
    assert!(
        (3.0..=4.1).contains(&achieved),
        "achieved {achieved} in flight"
    );
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2);
    for flow in flows {
        assert!(flow["transactions"].as_f64().unwrap() > 0.0);
        assert!(flow["error"].is_null());
    }
    // 100 bytes in per request at the server, 2048 per answer at the client.
    let t = num(&doc, "/summary/transactions");
    let bytes = num(&doc, "/summary/receiver_bytes");
    assert!(
        bytes >= t * 2148.0 * 0.98 && bytes <= t * 2148.0 * 1.02 + 8.0 * 2148.0,
        "{bytes} bytes for {t} transactions"
    );
}

#[test]
fn udp_rr_times_one_datagram_each_way() {
    let out = linerate(&[
        "rr",
        "-u",
        "-t",
        "1.5",
        "--request",
        "64",
        "--response",
        "1400",
        "-J",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["test"], "udp_rr");
    assert!(num(&doc, "/summary/transactions") > 100.0);
    latency_keys_are_ordered(&doc["summary"]["latency_us"]);
    assert_eq!(num(&doc, "/summary/lost"), 0.0, "loopback loses nothing");
    assert_eq!(
        common::warnings_besides_other_work(&doc),
        Vec::<String>::new()
    );
}

#[test]
fn open_loop_keeps_its_rate_and_counts_from_due_times() {
    let out = linerate(&["rr", "-t", "2", "--rate", "2000", "-i", "0", "-J"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    let achieved = num(&doc, "/summary/rate_achieved_tps");
    assert_eq!(num(&doc, "/summary/rate_asked_tps"), 2000.0);
    assert!(
        (1960.0..=2040.0).contains(&achieved),
        "asked 2000/s, achieved {achieved}/s"
    );
    assert_eq!(num(&doc, "/summary/owed"), 0.0);
}

#[test]
fn a_rate_the_flow_cannot_honour_is_reported_as_asked_versus_achieved() {
    // At most one in flight against answers that take at least the stall: 1 ms pauses
    // on every request cap the rate near 1000/s, well under the 5000/s asked.
    let out = linerate_with_fault(
        "stall:1:1",
        &[
            "rr",
            "-t",
            "1.5",
            "--rate",
            "5000",
            "--outstanding",
            "1",
            "-i",
            "0",
            "-J",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    let achieved = num(&doc, "/summary/rate_achieved_tps");
    assert!(
        achieved < 1100.0,
        "achieved {achieved}/s through 1 ms stalls"
    );
    assert!(num(&doc, "/summary/owed") > 1000.0);
    let warning = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|w| w.contains("asked 5.00k transactions/s per flow"))
        .unwrap_or_else(|| panic!("no shortfall warning in {}", doc["warnings"]));
    assert!(warning.contains("never sent"), "{warning}");
}

#[test]
fn a_stall_shows_in_the_open_loop_tail_and_in_the_closed_loop_rate() {
    // A 2 ms pause before one answer in 1000.
    let hook = "stall:1000:2";
    let open = linerate_with_fault(hook, &["rr", "-t", "3", "--rate", "2000", "-i", "0", "-J"]);
    assert!(open.status.success(), "{}", stderr(&open));
    let open = json(&open);
    // Each stall delays its own request and every one due during it (0.5 ms apart),
    // counted from their due times: about 4 per 1000 carry more than a millisecond.
    let p999 = num(&open, "/summary/latency_us/p999");
    assert!(
        p999 >= 1000.0,
        "open loop p99.9 {p999} us hides the 2 ms stalls"
    );

    let closed = linerate_with_fault(hook, &["rr", "-t", "3", "-i", "0", "-J"]);
    assert!(closed.status.success(), "{}", stderr(&closed));
    let closed = json(&closed);
    // Closed loop waits the stall out: the stalled transactions carry it...
    assert!(num(&closed, "/summary/latency_us/max") >= 2000.0);
    // ...and the rate carries the waiting: rate x mean round trip is still one
    // transaction in flight, so the stalls' time is in the rate, not hidden from it.
    let product = num(&closed, "/summary/transactions_per_s")
        * num(&closed, "/summary/latency_us/mean")
        / 1e6;
    assert!((0.9..=1.02).contains(&product), "rate x mean = {product}");
    let transactions = num(&closed, "/summary/transactions");
    let stalled_s = (transactions / 1000.0).floor() * 0.002;
    let busy_s = transactions * num(&closed, "/summary/latency_us/mean") / 1e6;
    assert!(
        busy_s >= stalled_s,
        "{transactions} transactions took {busy_s} s, less than their {stalled_s} s of stalls"
    );
}

fn failed_flow_test(hook: &str, time: &str, reason: &str) {
    let started = Instant::now();
    let out = linerate_with_fault(hook, &["rr", "-P", "2", "-t", time, "-i", "0", "-J"]);
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 of 2 flows failed"),
        "{}",
        stderr(&out)
    );
    let doc = json(&out);
    let flows = doc["flows"].as_array().unwrap();
    let error = flows[0]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("flow 0 did not fail: {}", flows[0]));
    assert!(error.contains(reason), "{error}");
    assert!(error.contains(" s"), "the time of the failure: {error}");
    assert!(flows[1]["error"].is_null(), "{}", flows[1]);
    let t = num(&doc, "/summary/transactions");
    assert!(
        flows[1]["transactions"].as_f64().unwrap() > t / 2.0,
        "flow 1 went on"
    );
    let limit: f64 = time.parse().unwrap();
    assert!(
        elapsed < Duration::from_secs_f64(limit + 8.0),
        "took {elapsed:?} for a {limit} s test"
    );
}

#[test]
fn a_peer_that_closes_mid_test_fails_its_flow_only() {
    failed_flow_test("close:500", "2", "closed the connection");
}

#[test]
fn a_peer_that_answers_with_the_wrong_size_fails_its_flow_only() {
    failed_flow_test("wrong-size:500", "2", "wrong answer");
}

#[test]
fn a_peer_that_stops_answering_fails_its_flow_within_the_test() {
    failed_flow_test("silent:500", "5", "stopped answering");
}

#[test]
fn crr_times_the_connect_and_the_whole_transaction() {
    let out = linerate(&["crr", "-t", "1.5", "-P", "2", "-J"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["test"], "tcp_crr");
    let transactions = num(&doc, "/summary/transactions");
    assert!(transactions > 100.0);
    let connect = &doc["summary"]["connect_latency_us"];
    latency_keys_are_ordered(connect);
    latency_keys_are_ordered(&doc["summary"]["latency_us"]);
    // One connect per transaction; a flow's connect and its answer can fall on either
    // side of a window edge.
    let connects = num(connect, "/count");
    assert!(
        (connects - transactions).abs() <= 4.0,
        "{connects} connects for {transactions} transactions"
    );
    assert!(
        num(connect, "/p50") < num(&doc, "/summary/latency_us/p50"),
        "the connect is part of the transaction"
    );
    assert!(doc["summary"]["time_wait"].as_f64().is_some());
    assert_eq!(num(&doc, "/summary/port_exhausted"), 0.0);
}

#[test]
fn rr_under_load_reports_latency_and_bulk_goodput() {
    let out = linerate(&["rr", "-t", "1.5", "--load", "1", "-i", "0", "-J"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert!(num(&doc, "/summary/transactions") > 10.0);
    assert_eq!(num(&doc, "/summary/load/flows"), 1.0);
    assert!(num(&doc, "/summary/load/receiver_bps") > 1e6);
    // The transactions alone first: what the load added to their median, graded.
    assert!(
        num(&doc, "/summary/load/idle_p50_us") > 0.0,
        "{}",
        doc["summary"]
    );
    let added_ms = num(&doc, "/summary/load/added_ms");
    let grade = linerate_model::measure::bufferbloat_grade(added_ms.max(0.0) / 1e3);
    assert_eq!(doc["summary"]["load"]["grade"], grade, "{}", doc["summary"]);
    let text = linerate(&["rr", "-t", "1", "--load", "1", "-i", "0"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("bufferbloat grade"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
}

#[test]
fn rr_text_states_round_trips_and_interval_lines() {
    let out = linerate(&["rr", "-t", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("p99 RTT"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("[SUM]")).count(),
        2,
        "{text}"
    );
    assert!(text.contains("Latency (round trip"), "{text}");
    assert!(text.contains("p99.99"), "{text}");
}

#[test]
fn rr_usage_errors_name_the_value() {
    for (args, needle) in [
        (vec!["rr", "--request", "0"], "'0'"),
        (vec!["rr", "--response", "65M"], "'65M'"),
        (vec!["rr", "-u", "--response", "65508"], "'65508'"),
        (vec!["rr", "--outstanding", "0"], "'0'"),
        (vec!["rr", "--rate", "0"], "'0'"),
        (vec!["rr", "--cpu", "4096"], "'4096'"),
        (vec!["crr", "--udp"], "--udp"),
        (vec!["crr", "--outstanding", "2"], "--outstanding"),
    ] {
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
