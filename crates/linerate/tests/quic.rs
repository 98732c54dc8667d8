//! QUIC streams end to end: every byte a sender handed to a stream arrives and is counted,
//! the wire carries it with QUIC's packet overhead, and the report says what it cost.

mod common;
use common::*;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The pacing test holds its rate to 3 %: it runs alone, the others (unpaced QUIC streams,
/// each side at a CPU) beside each other. With them beside it on a 2-CPU machine its
/// sender got 80 % of its rate; beside two busy loops alone, all of it.
static CPUS: RwLock<()> = RwLock::new(());

fn alone() -> RwLockWriteGuard<'static, ()> {
    CPUS.write().unwrap_or_else(|e| e.into_inner())
}

fn beside_others() -> RwLockReadGuard<'static, ()> {
    CPUS.read().unwrap_or_else(|e| e.into_inner())
}

/// Every byte a sender counted arrived, or the report says which flow's last bytes did
/// not within the drain: a receiver starved of CPU on a busy host may still be reading
/// when the drain (and the time it is stretched by while packets move) runs out, and the
/// report must then say so rather than pass the shortfall off as the path's.
fn assert_all_arrived(doc: &serde_json::Value) {
    let warnings = doc["warnings"].to_string();
    for flow in doc["flows"].as_array().expect("flows") {
        assert!(flow["error"].is_null(), "flow failed: {}", flow["error"]);
        let id = &flow["id"];
        if flow["receiver_bytes_total"] != flow["sender_bytes_total"] {
            assert!(
                warnings.contains(&format!(
                    "flow {id}: the sender's last bytes did not all arrive"
                )),
                "flow {id}: received {} of {} sent, and no warning says so: {warnings}",
                flow["receiver_bytes_total"],
                flow["sender_bytes_total"]
            );
        }
        assert!(num(flow, "/receiver_bytes_total") > 0.0);
    }
}

#[test]
fn quic_streams_on_one_connection_and_on_many_deliver_every_byte() {
    let _cpus = beside_others();
    for shape in [
        &["-P", "3"][..],
        &["-P", "2", "--connections"],
        &["-R"],
        &["--bidir"],
    ] {
        let mut args = vec!["stream", "--quic", "-t", "1", "-i", "0", "--json"];
        args.extend_from_slice(shape);
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(0), "{shape:?}: {}", stderr(&out));
        let doc = json(&out);
        assert_eq!(doc["test"], "quic_stream");
        assert_all_arrived(&doc);
        let crypto = &doc["summary"]["crypto"];
        assert_eq!(crypto["protocol"], "quic", "{shape:?}");
        assert_eq!(crypto["suite"], "TLS_AES_256_GCM_SHA384");
        for side in ["local", "remote"] {
            let sealing = num(crypto, &format!("/crypto_s_per_gbit/{side}"));
            let all = num(crypto, &format!("/cpu_s_per_gbit/{side}"));
            assert!(
                sealing > 0.0 && sealing < all,
                "{shape:?} {side}: {sealing} of {all}"
            );
        }
    }
}

/// `linerate stream --quic -t 1 -i 0 --json` with `extra`: its document, once it passed.
fn quic_stream_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["stream", "--quic", "-t", "1", "-i", "0", "--json"];
    args.extend_from_slice(extra);
    let out = linerate(&args);
    assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", stderr(&out));
    json(&out)
}

#[test]
fn quic_flows_spread_over_workers_each_with_its_own_connection_and_port() {
    let _cpus = beside_others();
    // Two QUIC workers a side (this machine has at least two CPUs), four flows: flows 0
    // and 2 on one worker's connection, 1 and 3 on the other's, each to its own server
    // port; every byte arrives, and the crypto time is every worker's.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        skip_unrunnable(
            "quic_flows_spread_over_workers_each_with_its_own_connection_and_port",
            "one CPU: a side runs one QUIC worker per CPU at most",
        );
        return;
    }
    let doc = quic_stream_json(&["-P", "4", "--threads", "2"]);
    assert_eq!(doc["config"]["quic"]["workers"], 2);
    assert_all_arrived(&doc);
    // Two connections, one a worker, whatever the streams they carry.
    assert_eq!(doc["summary"]["crypto"]["connections"], 2);
    let port_of = |flow: usize| {
        let addr = doc["flows"][flow]["client"]["remote_addr"]
            .as_str()
            .unwrap();
        addr.rsplit(':').next().unwrap().to_string()
    };
    assert_eq!(port_of(0), port_of(2));
    assert_eq!(port_of(1), port_of(3));
    assert_ne!(port_of(0), port_of(1));
    for side in ["local", "remote"] {
        let sealing = num(
            &doc["summary"]["crypto"],
            &format!("/crypto_s_per_gbit/{side}"),
        );
        assert!(sealing > 0.0, "{side}: {sealing}");
    }

    // One thread asks for one worker: every flow on one connection, one server port.
    let doc = quic_stream_json(&["-P", "2", "--threads", "1"]);
    assert!(
        doc["config"]["quic"]["workers"].is_null(),
        "one worker is the default"
    );
    assert_all_arrived(&doc);
    assert_eq!(doc["summary"]["crypto"]["connections"], 1);
    assert_eq!(
        doc["flows"][0]["client"]["remote_addr"],
        doc["flows"][1]["client"]["remote_addr"]
    );
}

#[test]
fn quic_takes_the_cipher_and_congestion_control_asked_for() {
    let _cpus = beside_others();
    let doc = quic_stream_json(&["--cipher", "chacha20-poly1305", "-C", "bbr"]);
    assert_eq!(
        doc["summary"]["crypto"]["suite"],
        "TLS_CHACHA20_POLY1305_SHA256"
    );
    assert_eq!(doc["flows"][0]["client"]["congestion"], "bbr");
    let out = linerate(&["stream", "--quic", "-C", "vegas", "-t", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'vegas'"), "{}", stderr(&out));
}

#[test]
fn a_server_without_tls_refuses_quic() {
    let _cpus = beside_others();
    let server = ServeProcess::start(&["--no-tls"]);
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &server.port.to_string(),
        "--quic",
        "-t",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("runs no encrypted tests"),
        "{}",
        stderr(&out)
    );
}

/// Truth against the kernel: between two namespaces the client's interface carried the
/// QUIC packets, so its UDP payload is the plaintext counted plus QUIC's per-packet
/// headers, frame headers and tags: a few percent, never less than the plaintext.
#[test]
fn the_wire_carries_the_counted_bytes_plus_quic_overhead() {
    let _cpus = beside_others();
    if !is_root() {
        skip("QUIC wire truth test", "needs root for network namespaces");
        return;
    }
    let pair = VethPair::new("quic");
    let (doc, bytes, packets) = pair.stream_counting_tx(&["--quic", "-t", "2", "-i", "0"]);
    assert_all_arrived(&doc);
    // Each packet the interface counts (a GSO packet counts once) carries 14 Ethernet,
    // 20 IP and 8 UDP bytes of headers. The control connection's few kilobytes ride too.
    let headers = packets as f64 * 42.0;
    let payload = bytes as f64 - headers;
    let plaintext = num(&doc, "/summary/receiver_bytes_total");
    let ratio = payload / plaintext;
    eprintln!("UDP payload {payload:.0} B for {plaintext:.0} B of stream data: {ratio:.4}");
    assert!(
        (1.005..1.08).contains(&ratio),
        "UDP payload / stream bytes = {ratio:.4}: QUIC's overhead is a few percent"
    );
}

#[test]
fn a_paced_quic_stream_keeps_to_its_rate() {
    let _cpus = alone();
    let out = linerate(&["stream", "--quic", "-b", "100M", "-t", "2", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    let achieved = num(&doc, "/summary/pacing/achieved_pct");
    // Never above the rate; below it only where other work kept the CPUs busy (which the
    // result says).
    assert!(achieved < 103.0, "achieved {achieved} % of 100 Mbit/s");
    assert!(
        achieved >= 97.0 || host_was_busy(&doc),
        "achieved {achieved} % of 100 Mbit/s"
    );
    // The receiver got what the pacer let out: never more, and less only where the host
    // was busy (as above).
    let received = num(&doc, "/summary/receiver_bps");
    assert!(received < 1.05e8, "received {received} bit/s");
    assert!(
        received > 0.95e8 || host_was_busy(&doc),
        "received {received} bit/s"
    );
}
