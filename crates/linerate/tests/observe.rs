//! `--observe` on this host, held against a second, independent reading of /proc and
//! /sys taken around the whole run: what the window saw lies inside what the run saw, and
//! loopback carried at least the payload the receiver counted in that window.

mod common;
use common::*;
use serde_json::Value;

fn net_rx_softirqs() -> u64 {
    let text = std::fs::read_to_string("/proc/softirqs").unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("NET_RX:"))
        .unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|c| c.parse::<u64>().unwrap())
        .sum()
}

fn all_interrupts() -> u64 {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap();
    text.lines()
        .skip(1)
        .flat_map(|line| {
            let rest = line.split_once(':').map_or("", |(_, r)| r);
            rest.split_whitespace()
                .map_while(|w| w.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn lo_rx_bytes() -> u64 {
    std::fs::read_to_string("/sys/class/net/lo/statistics/rx_bytes")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn sum(list: &Value, key: &str) -> u64 {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v[key].as_u64().unwrap())
        .sum()
}

#[test]
fn observed_counters_lie_within_a_second_reading_taken_around_the_run() {
    let (rx0, irq0, lo0) = (net_rx_softirqs(), all_interrupts(), lo_rx_bytes());
    let out = linerate(&["stream", "-t", "2", "-J"]);
    let (rx1, irq1, lo1) = (net_rx_softirqs(), all_interrupts(), lo_rx_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    let received = num(&doc, "/summary/receiver_bytes") as u64;
    for side in ["local", "remote"] {
        let o = &doc["observe"][side];
        assert!(o.is_object(), "observe.{side} missing: {}", doc["observe"]);
        let window_rx = sum(&o["cpus"], "net_rx");
        assert!(
            window_rx > 0 && window_rx <= rx1 - rx0,
            "{side}: NET_RX in the window {window_rx}, around the run {}",
            rx1 - rx0
        );
        let window_irq = sum(&o["interrupts"], "total");
        assert!(
            window_irq > 0 && window_irq <= irq1 - irq0,
            "{side}: interrupts in the window {window_irq}, around the run {}",
            irq1 - irq0
        );
        let lo = o["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == "lo")
            .unwrap_or_else(|| panic!("{side}: lo moved packets but is not listed"));
        let lo_bytes = lo["rx_bytes"].as_u64().unwrap();
        assert!(
            lo_bytes <= lo1 - lo0,
            "{side}: lo bytes in the window {lo_bytes}, around the run {}",
            lo1 - lo0
        );
        // The payload read in the window crossed lo in (almost) the same window: only
        // what sat in socket buffers at its edges may differ.
        assert!(
            lo_bytes as f64 >= received as f64 * 0.95,
            "{side}: lo carried {lo_bytes} bytes in the window, the receiver read {received}"
        );
        assert!(
            o["settings"]["tcp_rmem"].is_array(),
            "{side}: {}",
            o["settings"]
        );
    }
}

#[test]
fn no_observe_leaves_the_host_unread() {
    let out = linerate(&["stream", "-t", "1", "-J", "--no-observe"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["config"]["observe"], false);
    assert!(doc.get("observe").is_none(), "{}", doc["observe"]);
}
