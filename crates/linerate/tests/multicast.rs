//! Multicast (docs/multicast.md) between network namespaces on one bridge: linerate's
//! sender and receivers, iperf 2's both ways, source-specific joins, and what a host that
//! did not join gets. The references are the kernel's own counts in each receiver's
//! namespace (/proc/net/snmp: datagrams delivered, receive-buffer drops) and the peer's
//! own report. They need root; without it they are counted as skipped.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The final datagrams a linerate sender sends after its stream.
const FINALS: u64 = 10;

fn skip_unless_root(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return true;
    }
    false
}

/// `linerate serve --join ...` in a namespace, its stream lines (JSON) collected.
struct Receiver {
    child: Child,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    fn start(ns: &str, joins: &[String], extra: &[&str]) -> Receiver {
        let mut command = Command::new("ip");
        command
            .args([
                "netns",
                "exec",
                ns,
                binary(),
                "serve",
                "--port",
                "0",
                "--no-tls",
            ])
            .args(["--log-format", "json"])
            .envs(scratch_env());
        for join in joins {
            command.args(["--join", join]);
        }
        let mut child = command
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start linerate serve --join");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) {
                    sink.lock().unwrap().push(value);
                }
            }
        });
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let receiver = Receiver { child, lines, log };
        let until = Instant::now() + Duration::from_secs(10);
        while receiver.log().matches("joined multicast").count() < joins.len() {
            assert!(
                Instant::now() < until,
                "receiver did not join: {}",
                receiver.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        receiver
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The streams it has reported so far.
    fn streams(&self) -> Vec<serde_json::Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l["event"] == "multicast_stream")
            .map(|l| l["stream"].clone())
            .collect()
    }

    /// Waits for `count` streams.
    fn wait_streams(&self, count: usize) -> Vec<serde_json::Value> {
        let until = Instant::now() + Duration::from_secs(15);
        while self.streams().len() < count && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let streams = self.streams();
        assert!(
            streams.len() >= count,
            "{} of {count} streams: {streams:?}\n{}",
            streams.len(),
            self.log()
        );
        streams
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's UDP counts in a namespace: datagrams delivered to sockets, and those a
/// full receive buffer dropped.
fn udp_counts(ns: &str) -> (u64, u64) {
    (
        snmp_counter(ns, "Udp", "InDatagrams"),
        snmp_counter(ns, "Udp", "RcvbufErrors"),
    )
}

/// Packets the CPUs' input queues dropped (`/proc/net/softnet_stat`'s second column,
/// summed): a bridge's copies wait there, and on a busy host some may be dropped before
/// any socket sees them. The count is the host's, not a namespace's.
fn backlog_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .sum()
}

/// `linerate stream GROUP -u` from host 0 of `star` through its interface; its document.
fn send(star: &Star, group: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["stream", group, "-u", "--bind-dev", &star.devs[0], "--json"];
    args.extend_from_slice(extra);
    let output = linerate_in(&star.hosts[0], &args);
    assert!(output.status.success(), "{}", stderr(&output));
    let document = json(&output);
    assert_eq!(document["test"], "multicast", "{document}");
    document["sent"].clone()
}

/// One sender, two hosts that joined and one that did not: each joined receiver counts
/// every datagram the sender sent, less exactly what its own kernel dropped; the host
/// that did not join is delivered nothing; the join's latency and, on one clock, the
/// one-way delay are given.
#[test]
fn every_receiver_counts_the_senders_datagrams_less_its_own_kernels_drops() {
    if skip_unless_root("multicast receivers test") {
        return;
    }
    let star = Star::new("mcast", 4);
    let group = "239.1.2.3";
    let joined: Vec<Receiver> = [1, 2]
        .iter()
        .map(|&i| {
            Receiver::start(
                &star.hosts[i],
                &[format!("{group}%{}", star.devs[i])],
                &["--same-clock"],
            )
        })
        .collect();
    // Host 3 listens to another group on the same port.
    let other = Receiver::start(
        &star.hosts[3],
        &[format!("239.9.9.9%{}", star.devs[3])],
        &[],
    );
    let before: Vec<(u64, u64)> = (1..4).map(|i| udp_counts(&star.hosts[i])).collect();
    let backlog_before = backlog_drops();
    let sent = send(&star, group, &["-b", "4M", "-t", "2", "-l", "1000"]);
    let datagrams = sent["datagrams"].as_u64().unwrap();
    assert!(datagrams > 900, "{sent}");
    assert_eq!(sent["send_errors"], 0, "{sent}");
    assert_eq!(sent["finals"], FINALS, "{sent}");
    for (k, receiver) in joined.iter().enumerate() {
        let stream = receiver.wait_streams(1).remove(0);
        let (delivered, dropped) = {
            let after = udp_counts(&star.hosts[k + 1]);
            (after.0 - before[k].0, after.1 - before[k].1)
        };
        assert_eq!(stream["group"], group);
        assert_eq!(stream["ended"], "final", "{stream}");
        assert_eq!(stream["expected"], datagrams, "{stream}");
        let counted =
            stream["datagrams"].as_u64().unwrap() + stream["duplicates"].as_u64().unwrap();
        // The receiver counted every datagram its kernel delivered: the stream's, and
        // the finals that came.
        assert!(
            counted <= delivered && delivered <= counted + FINALS,
            "counted {counted}, the kernel delivered {delivered}: {stream}"
        );
        let backlog = backlog_drops() - backlog_before;
        if backlog == 0 {
            // Nothing was dropped before the UDP layer (the CPUs' input queues): what
            // was sent was delivered or dropped by the socket's full buffer, and the
            // stream's loss is what the socket dropped of it.
            assert_eq!(delivered + dropped, datagrams + FINALS, "{stream}");
            let finals_delivered = delivered - counted;
            assert_eq!(
                stream["lost"].as_u64().unwrap(),
                dropped - (FINALS - finals_delivered),
                "the loss is what the kernel dropped of the stream ({dropped} in all): {stream}"
            );
        }
        assert!(
            stream["join_latency_ms"].as_f64().unwrap() > 0.0,
            "{stream}"
        );
        let delay = &stream["one_way_delay"];
        assert_eq!(delay["state"], "given", "{stream}");
        let (min, mean, max) = (
            num(delay, "/min_ms"),
            num(delay, "/mean_ms"),
            num(delay, "/max_ms"),
        );
        assert!(0.0 <= min && min <= mean && mean <= max, "{stream}");
        // The stream is kept as a run: `show` gives it back.
        let log = receiver.log();
        let id = log
            .split("stored as run ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("not stored: {log}"));
        let shown = linerate(&["show", id, "--json"]);
        assert!(shown.status.success(), "{}", stderr(&shown));
        let kept = json(&shown);
        assert_eq!(kept["test"], "multicast", "{kept}");
        assert_eq!(kept["received"], stream, "{kept}");
    }
    // The host that joined another group: nothing delivered, nothing reported.
    let (delivered, _) = udp_counts(&star.hosts[3]);
    assert_eq!(
        delivered, before[2].0,
        "a host that did not join got datagrams"
    );
    assert!(other.streams().is_empty(), "{:?}", other.streams());
}

/// A socket's drops as the kernel counts them (/proc/net/udp's last column), by the
/// address it is bound to (`239.1.2.3:5001`), in namespace `ns`.
fn socket_drops(ns: &str) -> std::collections::HashMap<String, u64> {
    let text = common::run("ip", &["netns", "exec", ns, "cat", "/proc/net/udp"]);
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (ip, port) = fields.get(1)?.split_once(':')?;
            // Little-endian hex of the address, big-endian hex of the port.
            let ip = u32::from_str_radix(ip, 16).ok()?.to_le_bytes();
            let port = u16::from_str_radix(port, 16).ok()?;
            let drops = fields.last()?.parse().ok()?;
            Some((
                format!("{}.{}.{}.{}:{port}", ip[0], ip[1], ip[2], ip[3]),
                drops,
            ))
        })
        .collect()
}

/// One sender of ten groups, a hundred receivers (namespaces on one bridge) each joined
/// to all ten: every receiver reports every group's stream, each stream's loss is what
/// that receiver's socket for the group dropped (the kernel's own count, which may also
/// hold the stream's repeated final datagrams), and each join's latency is given.
#[test]
fn a_hundred_receivers_of_ten_groups_each_lose_what_their_kernel_dropped() {
    if skip_unless_root("multicast hundred receivers test") {
        return;
    }
    const RECEIVERS: usize = 100;
    const GROUPS: usize = 10;
    let star = Star::new("mc100", RECEIVERS + 1);
    let groups: Vec<String> = (1..=GROUPS).map(|i| format!("239.2.0.{i}")).collect();
    let receivers: Vec<Receiver> = (1..=RECEIVERS)
        .map(|i| {
            let joins: Vec<String> = groups
                .iter()
                .map(|g| format!("{g}%{}", star.devs[i]))
                .collect();
            Receiver::start(&star.hosts[i], &joins, &[])
        })
        .collect();
    let backlog_before = backlog_drops();
    let sent = send(
        &star,
        &groups[0],
        &["--groups", "10", "-b", "400k", "-t", "2", "-l", "1000"],
    );
    assert_eq!(sent["groups"], GROUPS, "{sent}");
    let backlog = backlog_drops() - backlog_before;
    let total = sent["datagrams"].as_u64().unwrap();
    for (i, receiver) in receivers.iter().enumerate() {
        let streams = receiver.wait_streams(GROUPS);
        let drops = socket_drops(&star.hosts[i + 1]);
        let mut expected_sum = 0;
        for stream in &streams {
            let group = stream["group"].as_str().unwrap();
            assert!(groups.iter().any(|g| g == group), "{stream}");
            assert_eq!(stream["ended"], "final", "receiver {i}: {stream}");
            let lost = stream["lost"].as_u64().unwrap();
            let dropped = drops[&format!("{group}:5001")];
            // What the socket dropped (the stream's, perhaps finals), and on a busy host
            // what the CPUs' input queues dropped before any socket saw it.
            assert!(
                lost <= dropped + backlog && dropped <= lost + FINALS,
                "receiver {i} {group}: lost {lost}, its socket dropped {dropped}, the input queues {backlog}"
            );
            assert_eq!(
                stream["datagrams"].as_u64().unwrap() + lost,
                stream["expected"].as_u64().unwrap(),
                "{stream}"
            );
            assert!(stream["join_latency_ms"].as_f64().is_some(), "{stream}");
            expected_sum += stream["expected"].as_u64().unwrap();
        }
        assert_eq!(
            expected_sum, total,
            "receiver {i}: the groups' counts sum to what was sent"
        );
    }
}

/// iperf 2 on either end: iperf 2's receiver counts linerate's stream (its total counts
/// the final datagram, as it does its own client's), and linerate's receiver counts
/// iperf 2's stream to the datagram iperf 2 says it wrote.
#[test]
fn iperf_2_receives_linerates_stream_and_linerate_receives_iperf_2s() {
    if skip_unless_root("multicast iperf 2 test") || !have("iperf", "multicast iperf 2 test") {
        return;
    }
    let star = Star::new("mcip", 3);
    let group = "239.1.2.4";
    // iperf 2's receiver in host 2: it joins through the route to the group.
    common::run(
        "ip",
        &[
            "-n",
            &star.hosts[2],
            "route",
            "add",
            "224.0.0.0/4",
            "dev",
            &star.devs[2],
        ],
    );
    let iperf_receiver = Command::new("ip")
        .args([
            "netns",
            "exec",
            &star.hosts[2],
            "timeout",
            "20",
            "iperf",
            "-s",
            "-u",
        ])
        .args(["-B", group, "-e"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start iperf -s");
    let iperf_pid = iperf_receiver.id();
    std::thread::sleep(Duration::from_millis(500));
    let sent = send(&star, group, &["-b", "2M", "-t", "1", "-l", "500"]);
    let datagrams = sent["datagrams"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // iperf 2 ends its report when it is told to: SIGINT, then it prints and exits.
    let _ = Command::new("kill")
        .args(["-INT", &iperf_pid.to_string()])
        .status();
    let output = iperf_receiver.wait_with_output().expect("iperf -s ends");
    let text = String::from_utf8_lossy(&output.stdout);
    let (lost, total) = text
        .lines()
        .rev()
        .find_map(|l| {
            let field = l
                .split_whitespace()
                .find(|w| w.contains('/') && w.split('/').all(|n| n.parse::<u64>().is_ok()))?;
            let (a, b) = field.split_once('/')?;
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no Lost/Total in iperf's report:\n{text}"));
    assert_eq!(
        total,
        datagrams + 1,
        "iperf 2 counts the final datagram:\n{text}"
    );
    assert_eq!(lost, 0, "{text}");

    // iperf 2 sends; linerate's receiver in host 1 counts.
    let receiver = Receiver::start(&star.hosts[1], &[format!("{group}%{}", star.devs[1])], &[]);
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            &star.hosts[0],
            "timeout",
            "20",
            "iperf",
            "-c",
            group,
        ])
        .args(["-u", "-T", "1", "-t", "1", "-b", "1M", "-l", "400", "-e"])
        .args(["-B", &star.addrs[0]])
        .output()
        .expect("iperf -c");
    let text = String::from_utf8_lossy(&client.stdout);
    assert!(client.status.success(), "{text}");
    // "Write/Err" column: datagrams written, errors.
    let written: u64 = text
        .lines()
        .rev()
        .find_map(|l| {
            l.split_whitespace()
                .find(|w| w.ends_with("/0") && w.split('/').all(|n| n.parse::<u64>().is_ok()))
                .and_then(|w| w.split('/').next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no Write/Err in iperf's report:\n{text}"));
    let stream = receiver.wait_streams(1).remove(0);
    assert_eq!(stream["ended"], "final", "{stream}");
    assert_eq!(stream["expected"], written, "{stream}\n{text}");
    assert_eq!(
        stream["datagrams"].as_u64().unwrap() + stream["lost"].as_u64().unwrap(),
        written,
        "{stream}"
    );
    assert_eq!(
        stream["one_way_delay"]["state"], "withheld",
        "no --same-clock"
    );
}

/// A source-specific join hears its source alone: a stream from another host to that
/// group is not delivered, the one from the named source is.
#[test]
fn a_source_specific_join_hears_its_source_alone() {
    if skip_unless_root("multicast source-specific test") {
        return;
    }
    let star = Star::new("mcssm", 3);
    let (dev0, dev1) = (&star.devs[0], &star.devs[1]);
    let receiver = Receiver::start(
        &star.hosts[1],
        &[
            format!("232.1.1.1@{}%{dev1}", star.addrs[0]),
            format!("232.1.1.2@{}%{dev1}", star.addrs[2]),
        ],
        &[],
    );
    let before = udp_counts(&star.hosts[1]);
    // Host 0 sends to both groups; only the first names it as the source.
    for group in ["232.1.1.1", "232.1.1.2"] {
        let output = linerate_in(
            &star.hosts[0],
            &[
                "stream",
                group,
                "-u",
                "--bind-dev",
                dev0,
                "-b",
                "1M",
                "-t",
                "0.5",
                "--json",
            ],
        );
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let streams = receiver.wait_streams(1);
    // Let anything late arrive before counting.
    std::thread::sleep(Duration::from_millis(2500));
    let streams_now = receiver.streams();
    assert_eq!(streams_now.len(), 1, "{streams_now:?}");
    assert_eq!(streams[0]["group"], "232.1.1.1");
    assert_eq!(streams[0]["source"], star.addrs[0].as_str());
    let delivered = udp_counts(&star.hosts[1]).0 - before.0;
    let counted = streams[0]["datagrams"].as_u64().unwrap() + FINALS;
    assert_eq!(
        delivered, counted,
        "the kernel delivered the source's stream alone"
    );
}

/// What cannot be a multicast test is refused before anything is sent: one line naming
/// the value, exit 2.
#[test]
fn a_join_or_a_send_that_cannot_be_is_one_line_and_exit_2() {
    for (args, says) in [
        (vec!["serve", "--join", "10.0.0.1"], "not a multicast group"),
        (
            vec!["serve", "--join", "232.1.1.1@239.0.0.1"],
            "cannot send",
        ),
        (vec!["stream", "239.1.1.1"], "add -u"),
        (vec!["stream", "239.1.1.1", "-u", "-R"], "cannot send back"),
        (vec!["stream", "239.1.1.1", "-u", "-P", "2"], "one sender"),
        (
            vec!["stream", "239.1.1.1", "-u", "-l", "8"],
            "carries 20 to",
        ),
        (
            vec!["stream", "127.0.0.1", "--ttl", "4"],
            "are for a multicast group",
        ),
        (
            vec!["stream", "239.255.255.255", "-u", "--groups", "2"],
            "past the multicast range",
        ),
        (
            vec!["stream", "239.1.1.1", "-u", "--receivers", "10.0.0.2"],
            "'--receivers' needs --key",
        ),
        (
            vec!["stream", "127.0.0.1", "--receivers", "10.0.0.2"],
            "are for a multicast group",
        ),
    ] {
        let output = linerate(&args);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{args:?}: {text}");
    }
}

/// IPv6: an any-source and a source-specific join (MLDv2) both count a sender's streams
/// (its hop limit set, its interface named), each to the datagram it sent.
#[test]
fn ipv6_groups_are_joined_any_source_and_source_specific() {
    if skip_unless_root("multicast IPv6 test") {
        return;
    }
    let star = Star::new("mcv6", 2);
    for (i, ns) in star.hosts.iter().enumerate() {
        common::run(
            "ip",
            &[
                "-n",
                ns,
                "addr",
                "add",
                &format!("fd77::{}/64", i + 1),
                "dev",
                &star.devs[i],
                "nodad",
            ],
        );
    }
    let receiver = Receiver::start(
        &star.hosts[1],
        &[
            format!("ff3e::77%{}", star.devs[1]),
            format!("[ff3e::78]@fd77::1%{}", star.devs[1]),
        ],
        &[],
    );
    let mut sent = Vec::new();
    for group in ["ff3e::77", "[ff3e::78]"] {
        let doc = send(&star, group, &["-b", "1M", "-t", "0.5", "--ttl", "4"]);
        assert_eq!(doc["ttl"], 4, "{doc}");
        sent.push(doc["datagrams"].as_u64().unwrap());
    }
    let mut streams = receiver.wait_streams(2);
    streams.sort_by_key(|s| s["group"].as_str().unwrap_or_default().to_string());
    assert_eq!(streams[0]["group"], "ff3e::77");
    assert_eq!(streams[1]["group"], "ff3e::78");
    assert_eq!(streams[1]["source"], "fd77::1");
    for (stream, sent) in streams.iter().zip(sent) {
        assert_eq!(stream["expected"], sent, "{stream}");
        assert_eq!(
            stream["datagrams"].as_u64().unwrap() + stream["lost"].as_u64().unwrap(),
            sent,
            "{stream}"
        );
        assert_eq!(stream["ended"], "final", "{stream}");
    }
}

/// `--dscp` and `--ecn` mark a multicast sender's datagrams as they mark any test's: the
/// TOS byte on the wire (tcpdump on a host the bridge floods) is EF with ECT(0).
#[test]
fn a_multicast_senders_marks_are_on_the_wire() {
    if skip_unless_root("multicast marks test") || !have("tcpdump", "multicast marks test") {
        return;
    }
    let star = Star::new("mcdscp", 2);
    let mut capture = Command::new("ip")
        .args([
            "netns",
            "exec",
            &star.hosts[1],
            "timeout",
            "20",
            "tcpdump",
            "-n",
            "-v",
        ])
        .args(["-c", "3", "-i", &star.devs[1], "udp and dst 239.1.2.9"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    let mut errors = BufReader::new(capture.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    while errors.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("listening on") {
        line.clear();
    }
    let doc = send(
        &star,
        "239.1.2.9",
        &["-b", "100k", "-t", "0.3", "--dscp", "EF", "--ecn"],
    );
    assert_eq!(doc["marks"]["dscp"], 46, "{doc}");
    let output = capture.wait_with_output().expect("tcpdump ends");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.matches("tos 0xba").count(), 3, "{text}");
}

/// `-z` on a multicast sender: where the kernel refuses real-time scheduling (root without
/// CAP_SYS_NICE, by `setpriv`) the stream is still sent, and the refusal is on stderr and
/// among the sender's document's warnings; allowed, the document has none.
#[test]
fn a_multicast_senders_refused_realtime_scheduling_is_in_its_document() {
    let test = "a_multicast_senders_refused_realtime_scheduling_is_in_its_document";
    if skip_unless_root(test) || !have("setpriv", test) {
        return;
    }
    let star = Star::new("mcz", 2);
    let args = [
        "stream",
        "239.1.2.10",
        "-u",
        "--bind-dev",
        &star.devs[0],
        "-b",
        "100k",
        "-t",
        "0.3",
        "-z",
        "--json",
    ];
    let refusal = "-z: real-time scheduling was refused";
    let refused = linerate_without_sys_nice(Some(&star.hosts[0]), &args);
    assert!(refused.status.success(), "{}", stderr(&refused));
    let doc = json(&refused);
    assert!(num(&doc, "/sent/datagrams") > 0.0, "{doc}");
    assert!(doc["warnings"].to_string().contains(refusal), "{doc}");
    assert!(stderr(&refused).contains(refusal));
    let taken = linerate_in(&star.hosts[0], &args);
    assert!(taken.status.success(), "{}", stderr(&taken));
    assert!(json(&taken).get("warnings").is_none(), "{}", json(&taken));
}

/// A mesh's multicast test (`run = "multicast"`, docs/mesh.md): host a's agent sends a
/// stream to a group and the agents of b, c and d (a star around a) join it and count,
/// one job a cycle and a row per receiver. The network limits what reaches c of the
/// group's datagrams (a short FIFO of its own on the bridge's port towards c): c's loss
/// is what that FIFO dropped of the stream (it may also drop some of the ten final
/// datagrams, which no row counts), b's and d's are what their own kernels dropped
/// (none, on a quiet host), the loss alert opens for a -> c alone, and each row's
/// figure is its receiver's share of what a's agent said it sent.
#[test]
fn a_mesh_multicast_test_counts_each_receivers_loss_and_alerts_on_the_one_that_loses() {
    if skip_unless_root("mesh multicast test") {
        return;
    }
    let star = Star::new("mcmesh", 4);
    for i in 0..4 {
        // Each host's route to the groups: through its one interface.
        common::run(
            "ip",
            &[
                "-n",
                &star.hosts[i],
                "route",
                "add",
                "224.0.0.0/4",
                "dev",
                &star.devs[i],
            ],
        );
    }
    star.limit_udp_towards(2, 5001, "1600kbit");
    let dir = std::env::temp_dir().join(format!("lr-mcmesh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("mesh.key");
    std::fs::write(&key, "the key of the multicast mesh, for this test\n").unwrap();
    let key = key.to_str().unwrap().to_string();
    let _agents: Vec<ServeProcess> = (0..4)
        .map(|i| {
            ServeProcess::start_at(
                Some(&star.hosts[i]),
                &star.addrs[i],
                "5201",
                &["--no-store", "--key", &key],
            )
        })
        .collect();
    let mut text = format!("name = \"tv\"\nkey = \"{key}\"\n");
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        text += &format!(
            "[[host]]\nname = \"{name}\"\naddress = \"{}:5201\"\n",
            star.addrs[i]
        );
    }
    text += "[[test]]\nname = \"channel\"\nrun = \"multicast\"\ngroup = \"239.7.7.7\"\n\
             rate = \"2M\"\nsize = \"1000\"\nduration = \"4s\"\ninterval = \"9s\"\n\
             [[group]]\nname = \"viewers\"\nshape = \"star\"\ncenter = \"a\"\n\
             directions = \"one\"\ntests = [\"channel\"]\n\
             [alerts]\nloss_above = \"1%\"\nfor = \"5s\"\n";
    let file = dir.join("mesh.toml");
    std::fs::write(&file, text).unwrap();
    let db = dir.join("results.db");
    let counts = |i: usize| udp_counts(&star.hosts[i]);
    let before: Vec<(u64, u64)> = (1..4).map(counts).collect();
    let backlog_before = backlog_drops();
    let out = linerate_in(
        &star.hosts[0],
        &[
            "--db",
            db.to_str().unwrap(),
            "mesh",
            "run",
            file.to_str().unwrap(),
            "--cycles",
            "2",
            "--json",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let backlog = backlog_drops() - backlog_before;
    let kernel_drops: Vec<u64> = (1..4).map(|i| counts(i).1 - before[i - 1].1).collect();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let rows: Vec<&serde_json::Value> = lines.iter().filter(|l| l.get("src").is_some()).collect();
    assert_eq!(rows.len(), 6, "two jobs, three receivers each: {rows:#?}");
    let mut lost = [0u64; 3];
    for row in &rows {
        assert_eq!(row["ok"], true, "{row}");
        assert_eq!(row["src"], "a", "{row}");
        assert_eq!(row["test"], "channel", "{row}");
        let receiver = match row["dst"].as_str().unwrap() {
            "b" => 0,
            "c" => 1,
            "d" => 2,
            other => panic!("a row to {other}"),
        };
        let text = row["headline_text"].as_str().unwrap();
        let (got, sent) = text
            .split('(')
            .nth(1)
            .and_then(|t| t.split(" received").next())
            .and_then(|t| t.split_once(" of "))
            .map(|(g, s)| (g.parse::<u64>().unwrap(), s.parse::<u64>().unwrap()))
            .unwrap_or_else(|| panic!("no counts in {text}"));
        // 2 Mbit/s of 1,000-byte datagrams for 4 s: about 1,000 sent.
        assert!(sent > 900, "{row}");
        let share = row["headline"].as_f64().unwrap();
        assert!(
            (share - (sent - got) as f64 / sent as f64).abs() < 1e-9,
            "the figure is the share of the sender's count never received: {row}"
        );
        lost[receiver] += sent - got;
    }
    let limited = star.limited_drops(2);
    eprintln!(
        "multicast mesh: lost {lost:?}; the FIFO towards c dropped {limited}; the receivers' kernels dropped {kernel_drops:?}, the input queues {backlog}"
    );
    // c: what the network's FIFO dropped of the two streams (and perhaps some of their
    // twenty finals), plus what its own kernel dropped.
    assert!(lost[1] > 0, "the limit towards c dropped nothing");
    assert!(
        lost[1] <= limited + kernel_drops[1] + backlog && limited <= lost[1] + 2 * FINALS,
        "c lost {}, the FIFO towards it dropped {limited}, its kernel {}",
        lost[1],
        kernel_drops[1]
    );
    for (receiver, k) in [(0, 0), (2, 2)] {
        assert!(
            lost[receiver] <= kernel_drops[k] + backlog,
            "receiver {receiver} lost {} where its kernel dropped {}",
            lost[receiver],
            kernel_drops[k]
        );
    }
    let alerts: Vec<String> = lines
        .iter()
        .filter(|l| l["event"] == "alert" && l["resolved"] == false)
        .map(|l| l["text"].as_str().unwrap().to_string())
        .collect();
    eprintln!("alerts: {alerts:?}");
    assert!(
        alerts.iter().any(|a| a.contains("channel: a -> c loses")
            && a.contains("the way out of a's multicast stream to c")),
        "no alert for a -> c: {alerts:#?}"
    );
    assert!(
        alerts.iter().all(|a| a.contains("a -> c")),
        "an alert for a receiver that lost nothing: {alerts:#?}"
    );
}

/// `linerate stream GROUP -u --receivers`: the sender asks each receiver's `serve --key`
/// to join and count its stream, and keeps each one's count in its own run. The receiver
/// behind a limit loses what the limit's FIFO dropped (the qdisc's own count), the other
/// what its kernel dropped (nothing, mostly); a receiver whose server holds another key
/// refuses, is named in the run with why, never joins (its kernel is delivered nothing)
/// and the stream goes on for the others.
#[test]
fn a_sender_gathers_each_receivers_count_of_its_stream() {
    if skip_unless_root("multicast gathering test") {
        return;
    }
    let star = Star::new("mcgath", 4);
    for i in 0..4 {
        let route = ["-n", &star.hosts[i], "route", "add", "224.0.0.0/4"];
        common::run("ip", &[&route[..], &["dev", &star.devs[i]]].concat());
    }
    star.limit_udp_towards(2, 5001, "1600kbit");
    let dir = std::env::temp_dir().join(format!("lr-mcgath-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("group.key");
    std::fs::write(&key, "the key of the gathering sender, for this test\n").unwrap();
    let other = dir.join("other.key");
    std::fs::write(&other, "another key, which the sender does not hold\n").unwrap();
    let (key, other) = (key.to_str().unwrap(), other.to_str().unwrap());
    let _servers: Vec<ServeProcess> = [(1, key), (2, key), (3, other)]
        .iter()
        .map(|&(i, k)| {
            ServeProcess::start_at(
                Some(&star.hosts[i]),
                &star.addrs[i],
                "5201",
                &["--no-store", "--key", k],
            )
        })
        .collect();
    let counts = |i: usize| udp_counts(&star.hosts[i]);
    let before: Vec<(u64, u64)> = (1..4).map(counts).collect();
    let backlog_before = backlog_drops();
    let receivers = format!("{},{},{}", star.addrs[1], star.addrs[2], star.addrs[3]);
    let out = linerate_in(
        &star.hosts[0],
        &[
            "--key",
            key,
            "--no-store",
            "stream",
            "239.8.8.8",
            "-u",
            "-b",
            "2M",
            "-l",
            "1000",
            "-t",
            "3",
            "--bind-dev",
            &star.devs[0],
            "--receivers",
            &receivers,
            "--json",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let backlog = backlog_drops() - backlog_before;
    let delivered: Vec<u64> = (1..4).map(|i| counts(i).0 - before[i - 1].0).collect();
    let kernel_drops: Vec<u64> = (1..4).map(|i| counts(i).1 - before[i - 1].1).collect();
    let document = json(&out);
    let sent = document["sent"]["datagrams"].as_u64().unwrap();
    assert!(
        sent > 600,
        "2 Mbit/s of 1,000-byte datagrams for 3 s: {document}"
    );
    let gathered = document["receivers"]
        .as_array()
        .expect("no receivers in the run");
    assert_eq!(gathered.len(), 3, "{document}");
    let lost = |i: usize| {
        let count = &gathered[i];
        assert_eq!(count["receiver"], star.addrs[i + 1], "{count}");
        assert!(count.get("error").is_none(), "{count}");
        let stream = &count["received"];
        assert_eq!(stream["group"], "239.8.8.8", "{count}");
        assert_eq!(
            stream["sender"]
                .as_str()
                .unwrap()
                .split(':')
                .next()
                .unwrap(),
            star.addrs[0],
            "the stream counted is the sender's own: {count}"
        );
        sent - stream["datagrams"].as_u64().unwrap().min(sent)
    };
    let limited = star.limited_drops(2);
    let (lost_b, lost_c) = (lost(0), lost(1));
    eprintln!(
        "gathered: b lost {lost_b}, c lost {lost_c} of {sent}; the FIFO towards c dropped {limited}; kernels dropped {kernel_drops:?}, input queues {backlog}; delivered {delivered:?}"
    );
    assert!(lost_b <= kernel_drops[0] + backlog, "b lost {lost_b}");
    assert!(lost_c > 0, "the limit towards c dropped nothing");
    assert!(
        lost_c <= limited + kernel_drops[1] + backlog && limited <= lost_c + FINALS,
        "c lost {lost_c}, the FIFO towards it dropped {limited}, its kernel {}",
        kernel_drops[1]
    );
    let refused = &gathered[2];
    assert_eq!(refused["receiver"], star.addrs[3], "{refused}");
    assert!(refused.get("received").is_none(), "{refused}");
    assert!(
        refused["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{refused}"
    );
    assert_eq!(delivered[2], 0, "a receiver that refused joined anyway");
}

/// A capture's multicast datagrams to `group`: (capture time in ns since the epoch, the
/// packet number iperf 2's header carries: negative for a final), from a nanosecond pcap
/// of Ethernet frames carrying IPv4 and UDP.
fn group_datagrams(pcap: &std::path::Path, group: [u8; 4]) -> Vec<(u64, i32)> {
    let mut out = Vec::new();
    for Captured { at_ns, bytes, .. } in pcap_packets(pcap) {
        let packet = &bytes[..];
        let ipv4 = packet.len() >= 14 + 20 && packet[12..14] == [0x08, 0x00];
        if !ipv4 || packet[14 + 9] != 17 || packet[14 + 16..14 + 20] != group {
            continue;
        }
        let payload = 14 + usize::from(packet[14] & 0x0f) * 4 + 8;
        if packet.len() >= payload + 4 {
            let number = i32::from_be_bytes(packet[payload..payload + 4].try_into().unwrap());
            out.push((at_ns, number));
        }
    }
    out
}

/// tcpdump on `dev` in namespace `ns`, writing the group's datagrams (the first 64 bytes
/// of each) to `pcap` until it is sent SIGINT.
fn capture_group(ns: &str, dev: &str, group: &str, pcap: &std::path::Path) -> Child {
    Command::new("ip")
        .args([
            "netns", "exec", ns, "tcpdump", "-i", dev, "-n", "-U", "-s", "64",
        ])
        // Each packet handed over as it comes: a buffered block is lost at SIGINT.
        .arg("--immediate-mode")
        .args(["--time-stamp-precision", "nano", "-w"])
        .arg(pcap)
        .args(["udp", "and", "dst", "host", group])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tcpdump")
}

/// The lab's receivers (`lab up --receivers 4`) behind its emulator, on its snooping
/// bridge. A sender on the lab's client gathers two keyed receivers' counts: each lost
/// exactly the datagrams the emulator did not pass (a capture on the bridge's port from
/// the router is the reference: what the sender sent less what crossed there), less any
/// its own kernel dropped, and the emulator's own loss count covers them. A third receiver
/// (`serve --join`) hears the group until it leaves and nothing from 300 ms after; a fourth,
/// which never joined, is delivered none of the group's datagrams.
#[test]
fn the_labs_receivers_lose_what_its_emulator_dropped_and_hear_the_group_only_while_joined() {
    let test =
        "the_labs_receivers_lose_what_its_emulator_dropped_and_hear_the_group_only_while_joined";
    if skip_unless_root(test) || !have("tcpdump", test) {
        return;
    }
    struct Down(&'static str);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = linerate(&["lab", "down", "--name", self.0]);
        }
    }
    let name = "mclab";
    let up = linerate(&[
        "lab",
        "up",
        "--name",
        name,
        "--rtt",
        "10ms",
        "--loss",
        "2%,0%",
        "--seed",
        "11",
        "--receivers",
        "4",
    ]);
    assert!(up.status.success(), "{}", stderr(&up));
    let _down = Down(name);
    let ns = |host: &str| format!("lrlab-{name}-{host}");
    let dir = std::env::temp_dir().join(format!("lr-mclab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("lab.key");
    std::fs::write(&key, "the lab's multicast key, for this test alone\n").unwrap();
    let key = key.to_str().unwrap().to_string();
    let in_ns = |host: &str, args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &ns(host), binary()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start linerate in the lab")
    };
    let mut agents: Vec<Child> = ["rx1", "rx2"]
        .iter()
        .map(|rx| in_ns(rx, &["--key", &key, "--no-store", "serve", "-q"]))
        .collect();
    let mut leaver = in_ns(
        "rx3",
        &["--no-store", "serve", "--no-iperf2", "--join", "239.9.9.9"],
    );
    let pcap = |what: &str| dir.join(format!("{what}.pcap"));
    let group = "239.9.9.9";
    let mut captures = vec![
        capture_group(&ns("switch"), "to-router", group, &pcap("uplink")),
        capture_group(&ns("rx3"), "eth0", group, &pcap("rx3")),
        capture_group(&ns("rx4"), "eth0", group, &pcap("rx4")),
    ];
    std::thread::sleep(Duration::from_millis(1_500));
    let drops = |rx: &str| snmp_counter(&ns(rx), "Udp", "RcvbufErrors");
    let drops_before = [drops("rx1"), drops("rx2")];
    let lost_before = emulator_lost(name);
    let sender = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns("client"),
            binary(),
            "--key",
            &key,
            "--no-store",
        ])
        .args(["stream", group, "-u", "-b", "2M", "-l", "1000", "-t", "4"])
        .args(["--receivers", "rx1,rx2", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the sender");
    // The sender waits a second for its receivers, then sends for four: rx3 leaves two
    // seconds into the stream.
    std::thread::sleep(Duration::from_secs(3));
    let _ = leaver.kill();
    let _ = leaver.wait();
    let left_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let out = sender.wait_with_output().unwrap();
    std::thread::sleep(Duration::from_millis(1_200));
    let emulator_lost = emulator_lost(name) - lost_before;
    for capture in &mut captures {
        // SAFETY: SIGINT to the tcpdump this test started, by its PID: it flushes and ends.
        unsafe { libc::kill(capture.id() as libc::pid_t, libc::SIGINT) };
        let _ = capture.wait();
    }
    for agent in &mut agents {
        let _ = agent.kill();
        let _ = agent.wait();
    }
    let kernel_drops = [
        drops("rx1") - drops_before[0],
        drops("rx2") - drops_before[1],
    ];
    let octets = [239, 9, 9, 9];
    let uplink = group_datagrams(&pcap("uplink"), octets);
    let rx3 = group_datagrams(&pcap("rx3"), octets);
    let rx4 = group_datagrams(&pcap("rx4"), octets);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let document = json(&out);
    let sent = document["sent"]["datagrams"].as_u64().unwrap();
    let passed = uplink.iter().filter(|(_, n)| *n >= 0).count() as u64;
    let dropped = sent - passed;
    let receivers = document["receivers"]
        .as_array()
        .expect("the receivers' counts");
    let lost: Vec<u64> = receivers
        .iter()
        .map(|r| sent - r["received"]["datagrams"].as_u64().unwrap_or(0).min(sent))
        .collect();
    let late = left_at + 300_000_000;
    let (heard, after) = (
        rx3.iter().filter(|(at, _)| *at < late).count(),
        rx3.iter().filter(|(at, _)| *at >= late).count(),
    );
    eprintln!(
        "lab receivers: sent {sent}, crossed the emulator {passed} (it dropped {dropped}; its own loss count {emulator_lost}); lost {lost:?}, kernels dropped {kernel_drops:?}; rx3 heard {} and {} after its leave; rx4 heard {}",
        heard,
        after,
        rx4.len()
    );
    assert!(dropped > 0, "2 % loss dropped nothing of {sent}");
    assert!(
        dropped <= emulator_lost,
        "the emulator counted {emulator_lost} lost, the capture says {dropped}"
    );
    for (i, lost) in lost.iter().enumerate() {
        assert!(
            *lost >= dropped && *lost <= dropped + kernel_drops[i],
            "rx{} lost {lost}: the emulator dropped {dropped}, its kernel {}: {}",
            i + 1,
            kernel_drops[i],
            receivers[i]
        );
    }
    assert!(heard > 100, "rx3 heard {heard} before it left");
    assert_eq!(after, 0, "rx3 still heard the group after it left");
    assert_eq!(rx4.len(), 0, "rx4 never joined and heard the group");
}

/// The lab emulator's frames lost at random, client to server, as its status file says.
fn emulator_lost(name: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/run/linerate/lab/{name}/status.json"))
        .expect("the emulator's status file");
    let status: serde_json::Value = serde_json::from_str(&text).expect("status JSON");
    status
        .pointer("/directions/0/counters/lost")
        .and_then(|v| v.as_u64())
        .expect("the emulator's loss count")
}
