//! Encrypted tests end to end: what is counted (application bytes, all of them), what the
//! report says the crypto cost, and what each refusal and certificate failure says.

mod common;
use common::*;
use std::path::PathBuf;

/// Every flow's plaintext arrived, byte for byte as counted: what the senders handed to
/// TLS is what the receivers decrypted (the receivers' content check fails a flow whose
/// bytes differ from the pattern sent).
fn assert_all_decrypted(doc: &serde_json::Value) {
    let flows = doc["flows"].as_array().expect("flows");
    for flow in flows {
        assert!(flow["error"].is_null(), "flow failed: {}", flow["error"]);
        assert_eq!(
            flow["receiver_bytes_total"], flow["sender_bytes_total"],
            "flow {}: the receiver decrypted a different count than was sent",
            flow["id"]
        );
        assert!(num(flow, "/receiver_bytes_total") > 0.0);
    }
}

#[test]
fn a_tls_stream_counts_every_plaintext_byte_and_states_the_crypto_cost() {
    let out = linerate(&[
        "stream",
        "--tls",
        "--cipher",
        "aes128-gcm",
        "-P",
        "2",
        "-t",
        "2",
        "-i",
        "0",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_all_decrypted(&doc);
    assert_eq!(doc["test"], "tls_stream");
    assert_eq!(doc["config"]["tls"]["cipher"], "aes128-gcm");
    let crypto = &doc["summary"]["crypto"];
    assert_eq!(crypto["protocol"], "tls");
    assert_eq!(crypto["suite"], "TLS_AES_128_GCM_SHA256");
    assert_eq!(crypto["connections"], 2);
    let handshake = num(crypto, "/handshake_ms");
    assert!(handshake > 0.0 && handshake <= num(crypto, "/handshake_max_ms"));
    for side in ["local", "remote"] {
        let sealing = num(crypto, &format!("/crypto_s_per_gbit/{side}"));
        let all = num(crypto, &format!("/cpu_s_per_gbit/{side}"));
        assert!(
            sealing > 0.0 && sealing < all,
            "{side}: sealing/opening {sealing} s/Gbit is not a part of the {all} s/Gbit spent"
        );
    }
}

#[test]
fn reverse_and_bidir_tls_streams_decrypt_everything_in_both_directions() {
    for direction in ["-R", "--bidir"] {
        let out = linerate(&["stream", "--tls", direction, "-t", "1", "-i", "0", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{direction}: {}", stderr(&out));
        let doc = json(&out);
        assert_all_decrypted(&doc);
        assert!(doc["summary"]["crypto"].is_object());
    }
}

#[test]
fn baseline_runs_the_plain_test_and_compares() {
    let out = linerate(&["stream", "--tls", "--baseline", "-t", "1", "-i", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Baseline:") && l.contains("vs plain TCP"))
        .unwrap_or_else(|| panic!("no comparison line in:\n{text}"));
    assert!(
        line.contains("CPU per Gbit") && line.contains("TLS AES-256-GCM"),
        "{line}"
    );
}

#[test]
fn rr_over_tls_times_transactions_through_records() {
    let out = linerate(&["rr", "--tls", "-t", "1", "-i", "0", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert!(num(&doc, "/summary/transactions") > 100.0);
    assert_eq!(doc["summary"]["crypto"]["suite"], "TLS_AES_256_GCM_SHA384");
    assert!(doc["flows"][0]["error"].is_null());
    // Each transaction seals and opens a record on each end: some time, well under the
    // round trip it is part of.
    let round_trip = num(&doc, "/summary/latency_us/mean");
    for side in ["local", "remote"] {
        let sealing = num(
            &doc,
            &format!("/summary/crypto/crypto_us_per_transaction/{side}"),
        );
        assert!(
            sealing > 0.0 && sealing < round_trip,
            "{side}: {sealing} us of {round_trip}"
        );
    }
}

#[test]
fn sweep_over_tls_prints_cpu_per_gbit_beside_each_row() {
    let out = linerate(&["sweep", "--tls", "--parallel", "1,2", "-t", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cpu_s/Gbit"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("1 ") || l.starts_with("2 "))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
}

#[test]
fn ktls_is_taken_or_its_refusal_is_told() {
    let out = linerate(&["stream", "--tls", "--ktls", "-t", "1", "-i", "0", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_all_decrypted(&doc);
    let crypto = &doc["summary"]["crypto"];
    let taken = num(crypto, "/ktls_connections/local") > 0.0;
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|l| l.split_whitespace().any(|u| u == "tls"));
    assert_eq!(taken, available);
    if !taken {
        let warnings = doc["warnings"].to_string();
        assert!(
            warnings.contains("--ktls: this kernel offers no TLS"),
            "{warnings}"
        );
    }
}

#[test]
fn a_server_refuses_what_its_tls_mode_excludes_and_says_why() {
    let plain_only = ServeProcess::start(&["--no-tls"]);
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &plain_only.port.to_string(),
        "--tls",
        "-t",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("runs no encrypted tests"),
        "{}",
        stderr(&out)
    );

    let tls_only = ServeProcess::start(&["--require-tls"]);
    let port = tls_only.port.to_string();
    let out = linerate(&["stream", "127.0.0.1", "-p", &port, "-t", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("add --tls"), "{}", stderr(&out));
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &port,
        "--tls",
        "-t",
        "1",
        "-i",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A certificate and key for `names`, valid over the given years, in a scratch directory.
fn certificate(tag: &str, names: &[&str], from: i32, to: i32) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("linerate-tls-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let (cert, key) =
        linerate_tls::identity::self_signed_pem(&names, (from, 1, 1), (to, 1, 1)).unwrap();
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    (dir.join("cert.pem"), dir.join("key.pem"))
}

fn stream_with_ca(cert: &std::path::Path, key: &std::path::Path) -> std::process::Output {
    let server = ServeProcess::start(&[
        "--cert",
        cert.to_str().unwrap(),
        "--cert-key",
        key.to_str().unwrap(),
    ]);
    linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &server.port.to_string(),
        "--tls",
        "--ca",
        cert.to_str().unwrap(),
        "-t",
        "1",
        "-i",
        "0",
    ])
}

#[test]
fn certificate_failures_name_what_is_wrong() {
    let (cert, key) = certificate("expired", &["127.0.0.1"], 2020, 2021);
    let out = stream_with_ca(&cert, &key);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("certificate has expired"),
        "{}",
        stderr(&out)
    );

    let (cert, key) = certificate("name", &["other.example"], 2020, 2099);
    let out = stream_with_ca(&cert, &key);
    assert_eq!(out.status.code(), Some(1));
    let error = stderr(&out);
    assert!(
        error.contains("is for other.example and not for 127.0.0.1"),
        "{error}"
    );

    // The same checks pass a certificate that is valid and names the server.
    let (cert, key) = certificate("good", &["127.0.0.1"], 2020, 2099);
    let out = stream_with_ca(&cert, &key);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_dir_all(cert.parent().unwrap()).unwrap();

    // A server's certificate that cannot be read stops it at start.
    let out = linerate(&[
        "serve",
        "--port",
        "0",
        "--cert",
        "/nonexistent.pem",
        "--cert-key",
        "/x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent.pem"),
        "{}",
        stderr(&out)
    );
}

/// Truth against the kernel: between two namespaces the client's interface carried the
/// TLS records, so its TCP payload is the plaintext counted plus TLS 1.3's 22 bytes per
/// 16 KiB record (0.13 %). Counting ciphertext would put the ratio at 1.000; counting
/// bytes that never arrived would put it below.
#[test]
fn the_wire_carries_the_counted_plaintext_plus_the_record_overhead() {
    if !is_root() {
        skip("TLS wire truth test", "needs root for network namespaces");
        return;
    }
    let pair = VethPair::new("tls");
    let (doc, bytes, packets) = pair.stream_counting_tx(&["--tls", "-t", "2", "-i", "0"]);
    assert_all_decrypted(&doc);
    // Each packet (a GSO packet counts once) carries 14 Ethernet + 20 IP + 32 TCP bytes
    // of headers; retransmitted segments carry their payload twice.
    let headers = packets as f64 * 66.0;
    let retransmitted = num(&doc, "/summary/retransmits") * 1448.0;
    let payload = bytes as f64 - headers - retransmitted;
    let plaintext = num(&doc, "/summary/receiver_bytes_total");
    let ratio = payload / plaintext;
    eprintln!("TCP payload {payload:.0} B for {plaintext:.0} B of plaintext: {ratio:.5}");
    assert!(
        (1.0008..1.005).contains(&ratio),
        "TCP payload / plaintext = {ratio:.5}, expected TLS 1.3's record overhead (about 1.0013)"
    );
}

/// A server that vanishes mid-test leaves a TLS sender with a reset connection: the client
/// reports the failure (exit 1) and is not ended by a signal. (That records written to a
/// closed peer raise no SIGPIPE is linerate-tls's `sigpipe` test, which dies without it.)
#[test]
fn a_server_gone_mid_test_is_a_failed_flow_not_a_signal() {
    let mut server = ServeProcess::start(&[]);
    let client = command()
        .args([
            "stream",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "--tls",
            "-t",
            "5",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start linerate stream");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let out = client.wait_with_output().expect("linerate stream ends");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        None,
        "killed by a signal: {:?}",
        out.status
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// A process's peak resident memory so far (VmHWM), in KiB; `None` once it has gone.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A stream of `flows` flows against a fresh server: the peak memory of the client and
/// of the server, in KiB, and the run's document.
fn peaks_of_a_stream(flows: &str, extra: &[&str]) -> (u64, u64, serde_json::Value) {
    let server = ServeProcess::start(&[]);
    let mut args = vec!["-P", flows, "-t", "2", "-i", "0", "--json"];
    args.extend_from_slice(extra);
    let mut client = command()
        .args(["stream", "127.0.0.1", "-p", &server.port.to_string()])
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start linerate stream");
    let pid = client.id();
    // The client's peak, read until it exits (its high-water mark only grows).
    let mut client_peak = 0;
    let stdout = client.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { stdout }, &mut text).unwrap();
        text
    });
    while client.try_wait().unwrap().is_none() {
        client_peak = client_peak.max(peak_kib(pid).unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let status = client.wait().unwrap();
    let text = reader.join().unwrap();
    assert!(status.success(), "{extra:?}: {status:?}");
    let server_peak = peak_kib(server.pid()).expect("the server runs on");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
    (client_peak, server_peak, doc)
}

/// TLS among many flows holds what is in flight, not a record's buffers per connection:
/// beside the same streams in plain TCP, measured in the same test, each TLS connection
/// adds little to either side's peak memory (it added 30 KiB to the sender and 46 KiB to
/// the receiver when every connection kept rustls' record buffers).
#[test]
fn many_tls_flows_add_little_memory_per_connection_on_either_side() {
    let flows = 1000;
    let (plain_client, plain_server, _) = peaks_of_a_stream(&flows.to_string(), &[]);
    let (tls_client, tls_server, doc) = peaks_of_a_stream(&flows.to_string(), &["--tls"]);
    assert_all_decrypted(&doc);
    let per_flow = |tls: u64, plain: u64| tls.saturating_sub(plain) / flows;
    let (client, server) = (
        per_flow(tls_client, plain_client),
        per_flow(tls_server, plain_server),
    );
    assert!(
        client < 16 && server < 16,
        "TLS added {client} KiB a connection to the client ({plain_client} -> {tls_client} \
         KiB) and {server} KiB to the server ({plain_server} -> {tls_server} KiB)"
    );
}
