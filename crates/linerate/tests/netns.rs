//! Tests across two network namespaces joined by a veth pair. They need root; without it
//! they say so and pass as skipped (CI runs as root and runs them).

mod common;
use common::*;
use std::time::{Duration, Instant};

fn skip_unless_root(test: &str) -> bool {
    if !is_root() {
        eprintln!("SKIPPED {test}: needs root for network namespaces");
        return true;
    }
    false
}

/// MEASUREMENT.md, "How we prove it": a tbf-shaped 1 Gbit/s link carries at most
/// 1e9 x 1448/1514 bit/s of TCP payload (MTU 1500, TCP timestamps on).
#[test]
fn goodput_on_a_shaped_link_matches_the_ceiling_and_the_interface_counters() {
    if skip_unless_root("tbf truth test") {
        return;
    }
    let pair = VethPair::new("tbf");
    run(
        "ip",
        &[
            "netns",
            "exec",
            &pair.ns_a,
            "tc",
            "qdisc",
            "add",
            "dev",
            &pair.dev_a,
            "root",
            "tbf",
            "rate",
            "1gbit",
            "burst",
            "64kb",
            "latency",
            "50ms",
        ],
    );
    let server = ServeProcess::start_with(Some(&pair.ns_b), &pair.addr_b, &[]);
    let bytes_before = pair.counter(&pair.ns_a, &pair.dev_a, "tx_bytes");
    let port = server.port.to_string();
    let out = linerate_in(
        &pair.ns_a,
        &["stream", &pair.addr_b, "-p", &port, "-t", "5", "--json"],
    );
    let bytes_after = pair.counter(&pair.ns_a, &pair.dev_a, "tx_bytes");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let goodput = doc["summary"]["receiver_bps"].as_f64().unwrap();
    let ceiling = 1e9 * 1448.0 / 1514.0;
    assert!(
        (goodput / ceiling - 1.0).abs() < 0.01,
        "goodput {:.1} Mbit/s vs ceiling {:.1} Mbit/s",
        goodput / 1e6,
        ceiling / 1e6
    );
    assert_eq!(
        doc["flows"][0]["mss"], 1448,
        "the ceiling assumes a 1448-byte MSS"
    );
    // The interface's own count of bytes sent, less the headers of full-sized segments
    // (14 Ethernet + 20 IP + 32 TCP with timestamps per 1514), against everything the
    // receiver counted (warm-up, window and drain, as the counters cover the whole test).
    let wire_payload = (bytes_after - bytes_before) as f64 * 1448.0 / 1514.0;
    let received = doc["summary"]["receiver_bytes_total"].as_f64().unwrap();
    assert!(
        (received / wire_payload - 1.0).abs() < 0.01,
        "received {received} bytes, the interface counters say {wire_payload:.0}"
    );
    // And the headline rate agrees with the counters' rate over the same window share.
    let window_share = doc["summary"]["receiver_bytes"].as_f64().unwrap() / received;
    let counter_rate =
        wire_payload * window_share * 8.0 / doc["summary"]["duration_s"].as_f64().unwrap();
    assert!(
        (goodput / counter_rate - 1.0).abs() < 0.01,
        "{goodput} vs {counter_rate}"
    );
}

#[test]
fn an_unreachable_host_fails_within_the_connect_timeout() {
    if skip_unless_root("unreachable host test") {
        return;
    }
    let pair = VethPair::new("unr");
    // An address on the veth's subnet that no namespace holds: ARP goes unanswered.
    let nobody = pair
        .addr_b
        .rsplit_once('.')
        .map(|(net, _)| format!("{net}.3"))
        .unwrap();
    let started = Instant::now();
    let out = linerate_in(
        &pair.ns_a,
        &["stream", &nobody, "--connect-timeout", "2", "-t", "1"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("cannot connect to") && err.contains(&nobody),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
}
