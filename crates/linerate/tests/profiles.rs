//! Profile runs end to end: `linerate run` on loopback, across agents in network
//! namespaces (one server, four clients), an agent lost mid-run, and bad profiles.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn repo(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

fn write_profile(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("linerate-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_loopback_profile_runs_counts_at_the_receiver_and_is_kept() {
    let out = linerate(&[
        "run",
        &repo("profiles/rr-1byte.toml"),
        "--set",
        "duration=1s",
        "--set",
        "threads=2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["test"], "profile");
    assert_eq!(doc["config"]["format"], "toml");
    assert_eq!(doc["summary"]["complete"], true);
    let group = &doc["groups"][0];
    assert_eq!(group["threads"], 2);
    let rr = &group["transactions"][1];
    let (write, read) = (&rr["ops"][0], &rr["ops"][1]);
    let iterations = rr["iterations"].as_u64().unwrap();
    assert!(iterations > 100, "{rr}");
    // Every iteration wrote one byte and read one: the mirror read exactly the bytes
    // written (its count), and wrote exactly the bytes read.
    assert_eq!(write["count"].as_u64(), Some(iterations));
    assert_eq!(write["peer_bytes"].as_u64(), Some(iterations));
    assert_eq!(read["bytes"].as_u64(), Some(iterations));
    assert_eq!(rr["received_bytes"].as_u64(), Some(2 * iterations));
    // The host's own view of the part (--observe): lo carried at least one packet per
    // message the threads exchanged (a 1-byte request and a 1-byte answer each).
    let observed = &doc["hosts"][0]["observe"];
    let lo = observed["interfaces"]
        .as_array()
        .unwrap_or_else(|| panic!("no observation: {}", doc["hosts"]))
        .iter()
        .find(|i| i["name"] == "lo")
        .expect("lo moved packets");
    assert!(
        lo["rx_packets"].as_u64().unwrap() >= 2 * iterations,
        "lo {lo}, {iterations} iterations"
    );
    assert!(rr["latency_us"]["p50"].as_f64().unwrap() > 0.0);
    assert!(
        read["latency_us"]["p99"].as_f64().unwrap() >= read["latency_us"]["p50"].as_f64().unwrap()
    );
    // Kept like every other run.
    let note = stderr(&out);
    let id = note
        .split("Stored as run ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("stored");
    let shown = linerate(&["show", id]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("Profile '1-byte request/response'"));
    let csv = linerate(&["export", id, "--format", "csv"]);
    assert!(String::from_utf8_lossy(&csv.stdout).starts_with("group,host,transaction,op"));
    // Two profile runs compare side by side.
    let second = linerate(&[
        "run",
        &repo("profiles/rr-1byte.toml"),
        "--set",
        "duration=0.5s",
    ]);
    assert!(second.status.success(), "{}", stderr(&second));
    let note = String::from_utf8_lossy(&second.stdout).to_string();
    let id2 = note
        .split("Stored as run ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("stored");
    let compared = linerate(&["compare", id, id2]);
    let text = String::from_utf8_lossy(&compared.stdout);
    assert!(
        compared.status.success()
            && text.contains(&format!("Δ run {id2}"))
            && text.contains("rr txn 2 p99 us"),
        "{text}"
    );
}

#[test]
fn uperf_profiles_run_directly_with_their_variables() {
    // echo-accept.xml: the master accepts (the peer dials back) and uses $proto; UDP here.
    let text = std::fs::read_to_string(repo("crates/profile/tests/fixtures/uperf/echo-accept.xml"))
        .unwrap()
        .replace("duration=\"30s\"", "duration=\"1s\"");
    let path = write_profile("echo-accept.xml", &text);
    let out = linerate(&[
        "run",
        &path,
        "--set",
        "h=local",
        "--set",
        "proto=udp",
        "--json",
        "--no-store",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["config"]["format"], "uperf-xml");
    let txn = &doc["groups"][0]["transactions"][1];
    let iterations = txn["iterations"].as_u64().unwrap();
    assert!(iterations > 100, "{txn}");
    // 90-byte datagrams each way, one per iteration, none lost on loopback.
    assert_eq!(txn["ops"][0]["peer_bytes"].as_u64(), Some(90 * iterations));
    assert_eq!(txn["ops"][1]["bytes"].as_u64(), Some(90 * iterations));
    // tls-read.xml puts a duration on a read: uperf ignores it (only think reads a
    // flowop's duration) and reads count=1 per iteration; so does linerate, saying so.
    let out = linerate(&[
        "run",
        &repo("crates/profile/tests/fixtures/uperf/tls-read.xml"),
        "--set",
        "h=local",
        "--json",
        "--no-store",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("note: ")
            && err.contains("tls-read.xml:8:")
            && err.contains("duration on a read is ignored"),
        "{err}"
    );
    let reads = &json(&out)["groups"][0]["transactions"][1];
    assert_eq!(reads["iterations"].as_u64(), Some(2), "{reads}");
    assert_eq!(reads["ops"][0]["bytes"].as_u64(), Some(2 * 8192), "{reads}");
}

/// uperf's asymmetric messages: the peer moves the same bytes in `rsize` pieces. The
/// profile a user brought from uperf (64 processes writing then reading count=10 size=8k
/// rsize=16k) stalled when the peer read ten 16 KiB pieces of 80 KiB.
#[test]
fn rsize_profiles_from_uperf_complete_with_the_same_bytes_each_way() {
    let text = r#"<?xml version="1.0"?>
<profile name="asymmetric">
  <group nprocs="64">
    <transaction iterations="1">
      <flowop type="connect" options="remotehost=$h protocol=tcp"/>
    </transaction>
    <transaction iterations="20">
      <flowop type="write" options="count=10 size=8k rsize=16k"/>
      <flowop type="read" options="count=10 size=8k rsize=16k"/>
    </transaction>
    <transaction iterations="1">
      <flowop type="disconnect"/>
    </transaction>
  </group>
</profile>
"#;
    let path = write_profile("asymmetric.xml", text);
    let out = linerate(&[
        "run",
        &path,
        "--set",
        "h=local",
        "--json",
        "--no-store",
        "--limit",
        "60",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["summary"]["complete"], true, "{}", doc["summary"]);
    let txn = &doc["groups"][0]["transactions"][1];
    assert_eq!(txn["iterations"].as_u64(), Some(64 * 20), "{txn}");
    let bytes = 64 * 20 * 10 * 8192u64;
    let (write, read) = (&txn["ops"][0], &txn["ops"][1]);
    // Counted at each receiver: the peer read every byte written, and wrote every byte
    // this side read.
    assert_eq!(write["bytes"].as_u64(), Some(bytes), "{write}");
    assert_eq!(write["peer_bytes"].as_u64(), Some(bytes), "{write}");
    assert_eq!(read["bytes"].as_u64(), Some(bytes), "{read}");
    assert_eq!(read["peer_bytes"].as_u64(), Some(bytes), "{read}");
}

/// A directory of files for sendfile operations: `sizes` bytes each, distinct contents.
fn file_tree(name: &str, sizes: &[usize]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("linerate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("nested")).unwrap();
    for (i, size) in sizes.iter().enumerate() {
        let at = if i % 2 == 0 {
            dir.join(format!("f{i}"))
        } else {
            dir.join(format!("nested/f{i}"))
        };
        std::fs::write(at, vec![i as u8 + 1; *size]).unwrap();
    }
    dir
}

/// uperf's sendfile and sendfilev: files picked from a directory and sent whole, over
/// plain TCP with sendfile(2) and over TLS through the session. Files of one size make
/// the bytes independent of which were picked; the loopback interface's own counter
/// (the run's host observation) carried at least them.
#[test]
fn sendfile_profiles_send_whole_files_from_their_directory() {
    let dir = file_tree("sendfile", &[300_000; 5]);
    for protocol in ["tcp", "ssl"] {
        let text = format!(
            r#"<?xml version="1.0"?>
<profile name="files">
  <group nthreads="2">
    <transaction iterations="1">
      <flowop type="connect" options="remotehost=$h protocol={protocol}"/>
    </transaction>
    <transaction iterations="4">
      <flowop type="sendfile" options="dir={dir} size=64k"/>
      <flowop type="sendfilev" options="dir={dir} nfiles=3"/>
      <flowop type="read" options="size=1"/>
    </transaction>
    <transaction iterations="1">
      <flowop type="disconnect"/>
    </transaction>
  </group>
</profile>
"#,
            dir = dir.display()
        );
        let path = write_profile(&format!("files-{protocol}.xml"), &text);
        let out = linerate(&["run", &path, "--set", "h=local", "--json", "--no-store"]);
        assert!(out.status.success(), "{protocol}: {}", stderr(&out));
        let doc = json(&out);
        assert_eq!(
            doc["summary"]["complete"], true,
            "{protocol}: {}",
            doc["summary"]
        );
        let txn = &doc["groups"][0]["transactions"][1];
        assert_eq!(txn["iterations"].as_u64(), Some(2 * 4), "{protocol}: {txn}");
        let (one, many) = (&txn["ops"][0], &txn["ops"][1]);
        assert_eq!(one["op"], "sendfile");
        assert_eq!(many["op"], "sendfilev");
        // Two threads, four iterations: one file, then three, of 300,000 bytes each,
        // sent and received whole.
        assert_eq!(
            one["bytes"].as_u64(),
            Some(8 * 300_000),
            "{protocol}: {one}"
        );
        assert_eq!(
            one["peer_bytes"].as_u64(),
            Some(8 * 300_000),
            "{protocol}: {one}"
        );
        assert_eq!(
            many["bytes"].as_u64(),
            Some(8 * 900_000),
            "{protocol}: {many}"
        );
        assert_eq!(
            many["peer_bytes"].as_u64(),
            Some(8 * 900_000),
            "{protocol}: {many}"
        );
        // Every file sent was a whole one: the read after them found the peer's 1 byte
        // (a stream cut mid-file would have desynchronised it).
        assert_eq!(
            txn["ops"][2]["bytes"].as_u64(),
            Some(8),
            "{protocol}: {txn}"
        );
        let lo = doc["hosts"][0]["observe"]["interfaces"]
            .as_array()
            .unwrap_or_else(|| panic!("no observation: {}", doc["hosts"]))
            .iter()
            .find(|i| i["name"] == "lo")
            .cloned()
            .expect("lo moved packets");
        assert!(
            lo["rx_bytes"].as_u64().unwrap() >= 8 * 1_200_000,
            "{protocol}: lo {lo}"
        );
    }
    // A directory with nothing to send is a usage error naming it.
    let empty = file_tree("sendfile-empty", &[]);
    let text = format!(
        r#"<profile name="e"><group><transaction iterations="1">
<flowop type="connect" options="remotehost=$h protocol=tcp"/>
<flowop type="sendfile" options="dir={}"/></transaction></group></profile>"#,
        empty.display()
    );
    let path = write_profile("files-empty.xml", &text);
    let out = linerate(&["run", &path, "--set", "h=local", "--no-store"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("holds no file with any bytes"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(empty);
}

/// uperf's `protocol=ssl` runs: TCP through TLS 1.3, the peer's certificate pinned by
/// the fingerprint it announced. Its `engine` is kept as written (linerate's TLS is on the
/// CPU). The reads the file asks for arrive whole, decrypted.
#[test]
fn uperf_ssl_profiles_run_over_tls() {
    let text = std::fs::read_to_string(repo("crates/profile/tests/fixtures/uperf/tls-read.xml"))
        .unwrap()
        .replace(
            "<transaction iterations=\"2\">",
            "<transaction duration=\"1s\">",
        )
        .replace("count=1 duration=3s size=8k", "count=1 size=8k");
    let path = write_profile("ssl-timed.xml", &text);
    let out = linerate(&["run", &path, "--set", "h=local", "--json", "--no-store"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc = json(&out);
    let connect = &doc["config"]["profile"]["groups"][0]["transactions"][0]["ops"][0]["action"];
    assert_eq!(connect["connect"]["protocol"], "ssl", "{connect}");
    assert_eq!(connect["connect"]["engine"], "pkcs11", "{connect}");
    let reads = &doc["groups"][0]["transactions"][1];
    let iterations = reads["iterations"].as_u64().unwrap();
    assert!(iterations > 100, "{reads}");
    assert_eq!(reads["ops"][0]["bytes"].as_u64(), Some(8192 * iterations));
}

#[test]
fn convert_prints_toml_that_runs_the_same_profile() {
    let out = linerate(&[
        "profile",
        "convert",
        &repo("crates/profile/tests/fixtures/uperf/dual-path.xml"),
        "--set",
        "h1=10.0.0.1",
        "--set",
        "h2=10.0.0.2:6000",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let toml = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(toml.contains("remote = \"10.0.0.2:6000\""), "{toml}");
    assert!(toml.contains("conn = \"1\""), "{toml}");
    let path = write_profile("two-hosts.toml", &toml);
    let again = linerate(&["profile", "convert", &path]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), toml);
}

#[test]
fn bad_profiles_and_values_are_one_line_errors() {
    let bad = write_profile(
        "bad.toml",
        "[[group]]\nthreads = \"${n}\"\n[[group.transaction]]\nops = [{ op = \"connect\" }]\n",
    );
    let vsock = repo("crates/profile/tests/fixtures/uperf/vsock-write.xml");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", &bad], "bad.toml:2:11: ${n} is not set"),
        (
            vec!["run", &bad, "--set", "n=zero"],
            "threads 'zero' is not a whole number",
        ),
        (
            vec!["run", "/nonexistent/p.toml"],
            "cannot read profile /nonexistent/p.toml",
        ),
        (vec!["run", &bad, "--set", "n"], "'n' is not NAME=VALUE"),
        (
            vec!["profile", "check", &vsock, "--set", "h=x"],
            "protocol 'vsock' is not supported",
        ),
    ];
    for (args, expected) in cases {
        let mut args = args.clone();
        // `run` keeps results; `profile check` keeps none and would refuse the flag.
        if args[0] == "run" {
            args.push("--no-store");
        }
        let out = linerate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    // An agent that is not there: a clear error, exit 1, no hang.
    let nowhere = write_profile(
        "nowhere.toml",
        "[[group]]\nhost = \"127.0.0.1:9\"\n[[group.transaction]]\nops = [{ op = \"connect\" }]\n",
    );
    let started = Instant::now();
    let out = linerate(&["run", &nowhere, "--no-store", "--control-timeout", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("agent 127.0.0.1:9: cannot connect"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_agent_lost_mid_run_ends_it_incomplete_within_the_control_timeout() {
    let runner = ServeProcess::start(&[]);
    let peer = ServeProcess::start(&[]);
    let profile = write_profile(
        "lost.toml",
        &format!(
            "[[group]]\nname = \"far\"\nhost = \"{}\"\nremote = \"{}\"\nthreads = 2\n\
             [[group.transaction]]\nops = [{{ op = \"connect\" }}]\n\
             [[group.transaction]]\nduration = \"30s\"\nops = [{{ op = \"write\", size = \"16k\" }}]\n\
             [[group]]\nname = \"near\"\nthreads = 1\n\
             [[group.transaction]]\nops = [{{ op = \"connect\" }}]\n\
             [[group.transaction]]\nduration = \"30s\"\nops = [{{ op = \"write\", size = \"16k\" }}]\n",
            runner.addr(),
            peer.addr()
        ),
    );
    let child = command()
        .args([
            "run",
            &profile,
            "--json",
            "--no-store",
            "--control-timeout",
            "2",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        runner.wait_log("starting 1 group(s)", Duration::from_secs(10)),
        "{}",
        runner.log()
    );
    std::thread::sleep(Duration::from_millis(1500));
    let mut runner = runner;
    let killed = Instant::now();
    runner.child.kill().unwrap();
    let _ = runner.child.wait();
    let out = child.wait_with_output().unwrap();
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "the run ended {took:?} after the agent was killed"
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["summary"]["complete"], false);
    let why = doc["incomplete"].as_str().unwrap();
    assert!(why.contains(&format!("lost {}", runner.addr())), "{why}");
    let far = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == runner.addr())
        .unwrap();
    assert!(
        far["failure"].as_str().unwrap().contains("connection lost"),
        "{far}"
    );
    // The other host's group reported what it did before the abort.
    let near = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "near")
        .unwrap();
    assert!(near["received_bytes"].as_u64().unwrap() > 0, "{near}");
    assert!(stderr(&out).contains("incomplete"), "{}", stderr(&out));
    // The surviving agent keeps serving.
    assert!(
        peer.wait_log("ended", Duration::from_secs(10)),
        "{}",
        peer.log()
    );
    let again = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &peer.port.to_string(),
        "-t",
        "0.3",
        "--no-store",
    ]);
    assert!(again.status.success(), "{}", stderr(&again));
}

/// CPU seconds a process has used (user and system), from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Agents wait for the controller, their peers and their connections in blocking calls
/// with timeouts, not in loops: a profile whose threads think for 2 s costs the agent
/// that runs the group and the one that mirrors it almost no CPU. (Connections handed
/// over by the server's event loop once stayed non-blocking, and each wait spun a CPU.)
#[test]
fn agents_wait_for_an_idle_profile_without_spinning() {
    let runner = ServeProcess::start(&[]);
    let peer = ServeProcess::start(&[]);
    let profile = write_profile(
        "idle.toml",
        &format!(
            "[[group]]\nname = \"idle\"\nhost = \"{}\"\nremote = \"{}\"\nthreads = 2\n\
             [[group.transaction]]\nops = [{{ op = \"connect\" }}]\n\
             [[group.transaction]]\nops = [{{ op = \"think\", duration = \"2s\" }}]\n\
             [[group.transaction]]\nops = [{{ op = \"disconnect\" }}]\n",
            runner.addr(),
            peer.addr()
        ),
    );
    let before = [cpu_seconds(runner.pid()), cpu_seconds(peer.pid())];
    let out = linerate(&["run", &profile, "--json", "--no-store"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["summary"]["complete"], true);
    let used = [
        cpu_seconds(runner.pid()) - before[0],
        cpu_seconds(peer.pid()) - before[1],
    ];
    // A spinning wait uses a CPU for the whole 2 s (and more for each thread).
    assert!(
        used.iter().all(|&s| s < 0.5),
        "CPU seconds used by the runner and its peer over a 2 s idle run: {used:?}"
    );
}
