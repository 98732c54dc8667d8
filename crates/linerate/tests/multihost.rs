//! A profile across five agents in network namespaces: one server, four client hosts.
//! In a test binary of its own, so that no other test's load runs beside it: the start
//! skew it checks is a scheduling figure.

mod common;

use common::*;

fn repo(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn four_client_hosts_receive_from_one_server_with_a_synchronized_start() {
    if !is_root() {
        skip(
            "four_client_hosts_receive_from_one_server_with_a_synchronized_start",
            "needs root for network namespaces",
        );
        return;
    }
    let star = Star::new("four", 6);
    // Agents dial hosts other than the controller only when they share a key with them.
    let key = std::env::temp_dir()
        .join(format!("linerate-{}-agents.key", std::process::id()))
        .display()
        .to_string();
    std::fs::write(&key, "the five agents' shared key, for this test\n").unwrap();
    let agents: Vec<ServeProcess> = (0..5)
        .map(|i| {
            ServeProcess::start_with(
                Some(&star.hosts[i]),
                &star.addrs[i],
                &["--no-store", "--key", &key],
            )
        })
        .collect();
    let host = |i: usize| format!("{}:{}", star.addrs[i], agents[i].port);
    // The shipped profile, each client paced to 500 reads of 64 KiB per second (about
    // 260 Mbit/s): five "hosts" share this machine's CPUs, and an unpaced first host
    // would saturate them and delay the others' wake-ups, which is not what the skew
    // figure is about.
    let shipped = std::fs::read_to_string(repo("profiles/four-clients.toml")).unwrap();
    let text = shipped.replace(
        "duration = \"${duration}\"\n",
        "duration = \"${duration}\"\nrate = 500\n",
    );
    assert_eq!(text.matches("rate = 500").count(), 4);
    let paced = std::env::temp_dir()
        .join(format!("linerate-{}-four-clients.toml", std::process::id()))
        .display()
        .to_string();
    std::fs::write(&paced, text).unwrap();
    let before: Vec<u64> = (1..5).map(|i| star.counter(i, "rx_bytes")).collect();
    let mut args = vec![
        "run".to_string(),
        paced.clone(),
        "--set".into(),
        format!("server={}", host(0)),
        "--set".into(),
        "duration=2s".into(),
        "--set".into(),
        "threads=1".into(),
        "--json".into(),
        "--no-store".into(),
        "--key".into(),
        key.clone(),
    ];
    for c in 1..5 {
        args.push("--set".into());
        args.push(format!("c{c}={}", host(c)));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = linerate_in(&star.hosts[5], &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let after: Vec<u64> = (1..5).map(|i| star.counter(i, "rx_bytes")).collect();
    let doc = json(&out);
    assert_eq!(doc["summary"]["complete"], true, "{}", doc["incomplete"]);
    let hosts = doc["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 4);
    let total = doc["summary"]["received_bps"].as_f64().unwrap();
    let sum: f64 = hosts
        .iter()
        .map(|h| h["received_bps"].as_f64().unwrap())
        .sum();
    assert!(
        (total - sum).abs() <= total * 1e-9,
        "total {total} sum {sum}"
    );
    for (c, h) in hosts.iter().enumerate() {
        assert_eq!(h["host"], host(c + 1));
        let received = h["received_bytes"].as_u64().unwrap();
        assert!(h["received_bps"].as_f64().unwrap() > 0.0, "{h}");
        // The interface saw the payload plus headers and the agents' control traffic; at
        // 66 bytes of headers per segment, 20 % allows segments down to a third of the MSS
        // (paced reads leave some short).
        let wire = after[c] - before[c];
        assert!(
            wire >= received,
            "host {c}: {wire} bytes on the wire < {received} payload"
        );
        assert!(
            (wire as f64) < received as f64 * 1.20,
            "host {c}: {wire} on the wire for {received}"
        );
    }
    let skew = doc["summary"]["start_skew_ms"].as_f64().unwrap();
    let delays: Vec<f64> = hosts
        .iter()
        .map(|h| h["start_delay_ms"].as_f64().unwrap())
        .collect();
    eprintln!("start skew {skew:.3} ms; host delays {delays:?} ms");
    assert!(skew < 10.0, "start skew {skew} ms; delays {delays:?}");
    for delay in &delays {
        assert!(
            (-1.0..10.0).contains(delay),
            "a host started {delay} ms from the announced instant; delays {delays:?}"
        );
    }
    assert!(
        agents[0].log().contains("mirror of group 'client1'"),
        "{}",
        agents[0].log()
    );
}
