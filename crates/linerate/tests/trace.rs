//! `linerate trace` over a topology of namespaces with four routers and two equal-cost
//! paths, against Debian's traceroute and scamper over the same topology. Needs root;
//! without it the tests count as skipped.

mod common;
use common::*;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// The topology's tests take turns: they share its addresses.
static TURN: Mutex<()> = Mutex::new(());

/// client - r1 = (r2 | r3) = r4 - server: r1 spreads the server's prefix over r2 and r3
/// by a hash of addresses and ports (a Linux multipath route with
/// fib_multipath_hash_policy=1), so flows that differ in their source port take either
/// branch and every packet of one flow takes the same one. Every router answers at once
/// (no ICMP rate limit), as a trace of many flows needs.
struct Topology {
    names: Vec<String>,
}

/// The addresses the hops answer from, nearest first: r1; r2 or r3; r4; the server.
const HOP1: &str = "10.91.1.2";
const BRANCHES: [&str; 2] = ["10.91.2.2", "10.91.3.2"];
const HOP3: &str = "10.91.4.2";
const SERVER: &str = "10.91.6.2";

impl Topology {
    fn new() -> Topology {
        let pid = std::process::id();
        let name = |n: &str| format!("lr-tr-{pid}-{n}");
        let nodes = ["c", "r1", "r2", "r3", "r4", "s"];
        let topology = Topology {
            names: nodes.iter().map(|n| name(n)).collect(),
        };
        for ns in &topology.names {
            run("ip", &["netns", "add", ns]);
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
            for setting in [
                "net.ipv4.ip_forward=1",
                "net.ipv4.icmp_ratelimit=0",
                "net.ipv4.icmp_msgs_per_sec=100000",
                "net.ipv4.fib_multipath_hash_policy=1",
            ] {
                run("ip", &["netns", "exec", ns, "sysctl", "-qw", setting]);
            }
        }
        // (a, b, subnet): a veth between nodes a and b, a at .1 and b at .2.
        let links = [
            ("c", "r1", 1),
            ("r1", "r2", 2),
            ("r1", "r3", 3),
            ("r2", "r4", 4),
            ("r3", "r4", 5),
            ("r4", "s", 6),
        ];
        for (a, b, subnet) in links {
            let (dev_a, dev_b) = (format!("t{pid}{a}{b}"), format!("t{pid}{b}{a}"));
            let (dev_a, dev_b) = (short(&dev_a), short(&dev_b));
            run(
                "ip",
                &[
                    "link", "add", &dev_a, "type", "veth", "peer", "name", &dev_b,
                ],
            );
            for (node, dev, host) in [(a, &dev_a, 1), (b, &dev_b, 2)] {
                let ns = name(node);
                run("ip", &["link", "set", dev, "netns", &ns]);
                let addr = format!("10.91.{subnet}.{host}/24");
                run("ip", &["-n", &ns, "addr", "add", &addr, "dev", dev]);
                run("ip", &["-n", &ns, "link", "set", dev, "up"]);
            }
        }
        let route = |node: &str, args: &[&str]| {
            let ns = name(node);
            let mut all = vec!["-n", ns.as_str(), "route", "add"];
            all.extend_from_slice(args);
            run("ip", &all);
        };
        route("c", &["default", "via", "10.91.1.2"]);
        route(
            "r1",
            &[
                "10.91.6.0/24",
                "nexthop",
                "via",
                "10.91.2.2",
                "nexthop",
                "via",
                "10.91.3.2",
            ],
        );
        route("r1", &["10.91.4.0/24", "via", "10.91.2.2"]);
        route("r1", &["10.91.5.0/24", "via", "10.91.3.2"]);
        route("r2", &["default", "via", "10.91.2.1"]);
        route("r2", &["10.91.6.0/24", "via", "10.91.4.2"]);
        route("r3", &["default", "via", "10.91.3.1"]);
        route("r3", &["10.91.6.0/24", "via", "10.91.5.2"]);
        // The way back goes through r2 alone.
        route("r4", &["default", "via", "10.91.4.1"]);
        route("s", &["default", "via", "10.91.6.1"]);
        topology
    }

    fn client(&self) -> &str {
        &self.names[0]
    }
}

/// Interface names are at most 15 bytes.
fn short(name: &str) -> String {
    name.chars()
        .rev()
        .take(15)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
        }
    }
}

fn skip_unless_root(test: &str) -> bool {
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return true;
    }
    false
}

/// Each hop's addresses in a trace document, nearest first, to the deepest a flow reached.
fn hops_of(doc: &serde_json::Value) -> Vec<BTreeSet<String>> {
    doc["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .map(|h| {
            h["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["address"].as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

fn trace_json(topology: &Topology, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["trace", SERVER];
    all.extend_from_slice(args);
    all.push("--json");
    let out = linerate_in(topology.client(), &all);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    json(&out)
}

/// The hop addresses of a Debian traceroute run (`-n`, one address a line after the hop
/// number; `*` for none).
fn traceroute_hops(text: &str) -> Vec<BTreeSet<String>> {
    text.lines()
        .skip(1)
        .map(|line| {
            line.split_whitespace()
                .skip(1)
                .filter(|w| w.parse::<std::net::Ipv4Addr>().is_ok())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn every_protocol_finds_the_hops_and_many_flows_find_both_branches() {
    let test = "every_protocol_finds_the_hops_and_many_flows_find_both_branches";
    if skip_unless_root(test) {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let topology = Topology::new();
    for protocol in [
        &[][..],
        &["--icmp"],
        &["--tcp", "-p", "5201"],
        // From the client's address, named: the same path.
        &["--icmp", "-B", "10.91.1.1"],
        &["-B", "10.91.1.1"],
    ] {
        let doc = trace_json(&topology, protocol);
        assert_eq!(doc["test"], "trace");
        assert_eq!(doc["reached"], true, "{protocol:?}: {doc}");
        let hops = hops_of(&doc);
        assert_eq!(hops.len(), 4, "{protocol:?}: {hops:?}");
        assert_eq!(hops[0], BTreeSet::from([HOP1.to_string()]), "{protocol:?}");
        // One flow, one branch: every probe of it went the same way (Paris).
        assert_eq!(hops[1].len(), 1, "{protocol:?}: {hops:?}");
        assert!(BRANCHES.contains(&hops[1].iter().next().unwrap().as_str()));
        assert_eq!(hops[2], BTreeSet::from([HOP3.to_string()]), "{protocol:?}");
        assert_eq!(
            hops[3],
            BTreeSet::from([SERVER.to_string()]),
            "{protocol:?}"
        );
        assert_eq!(doc["distinct_paths"], 1);
        // Three queries a hop, all answered: no ICMP rate limit in this topology.
        assert_eq!(doc["answered"], doc["sent"], "{protocol:?}: {doc}");
    }
    // Eight flows with different source ports: both branches, each flow on one.
    let started = std::time::Instant::now();
    let doc = trace_json(&topology, &["-P", "8"]);
    let took = started.elapsed();
    let hops = hops_of(&doc);
    assert_eq!(
        hops[1],
        BRANCHES
            .iter()
            .map(|b| b.to_string())
            .collect::<BTreeSet<_>>(),
        "8 flows took one branch only (1 in 128 by chance): {doc}"
    );
    assert_eq!(doc["distinct_paths"], 2);
    for path in doc["paths"].as_array().unwrap() {
        assert_eq!(path["reached_ttl"], 4, "{path}");
    }
    // A quiet path: done as soon as the answers are in.
    assert!(
        num(&doc, "/duration_s") < 2.0,
        "took {:.2} s (the run {took:?})",
        num(&doc, "/duration_s")
    );
}

/// The same hops as Debian's traceroute (UDP to a fixed port: one flow) and scamper
/// (Paris UDP) over the same topology, each at every hop one of the addresses linerate's
/// sixteen flows found there (eight all hashed onto one of the two equal paths one run in
/// 128, and the one flow of scamper took the other: a CI run saw it).
#[test]
fn hops_agree_with_traceroute_and_scamper() {
    let test = "hops_agree_with_traceroute_and_scamper";
    if skip_unless_root(test) || !have("traceroute", test) || !have("scamper", test) {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let topology = Topology::new();
    let ours = hops_of(&trace_json(&topology, &["-P", "16"]));
    let traceroute = run(
        "ip",
        &[
            "netns",
            "exec",
            topology.client(),
            "traceroute",
            "-n",
            "-U",
            "-p",
            "33434",
            "-q",
            "1",
            SERVER,
        ],
    );
    let theirs = traceroute_hops(&traceroute);
    assert_eq!(
        theirs.len(),
        ours.len(),
        "traceroute:\n{traceroute}\nours: {ours:?}"
    );
    for (hop, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        assert!(
            t.len() == 1 && t.is_subset(o),
            "hop {}: traceroute {t:?}, ours {o:?}",
            hop + 1
        );
    }
    let scamper = run(
        "ip",
        &[
            "netns",
            "exec",
            topology.client(),
            "scamper",
            "-O",
            "text",
            "-c",
            "trace -P udp-paris -q 1",
            "-i",
            SERVER,
        ],
    );
    let theirs = traceroute_hops(&scamper);
    assert_eq!(
        theirs.len(),
        ours.len(),
        "scamper:\n{scamper}\nours: {ours:?}"
    );
    for (hop, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        assert!(
            t.len() == 1 && t.is_subset(o),
            "hop {}: scamper {t:?}, ours {o:?}",
            hop + 1
        );
    }
}

/// `linerate trace 127.0.0.1 ARGS` as nobody, without capabilities.
fn unprivileged(args: &[&str]) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(binary())
        .args(["--no-store", "trace", "127.0.0.1"])
        .args(args)
        .output()
        .expect("setpriv")
}

#[test]
fn raw_probes_without_privilege_say_so_and_offer_udp() {
    // The check is the message: run as an unprivileged user where there is one.
    let test = "raw_probes_without_privilege_say_so_and_offer_udp";
    if skip_unless_root(test) {
        return;
    }
    let out = unprivileged(&["--icmp"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains("CAP_NET_RAW") && text.contains("UDP"),
        "{text}"
    );
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    // UDP runs unprivileged: loopback is one hop.
    let out = unprivileged(&["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["reached"], true, "{doc}");
    assert_eq!(
        hops_of(&doc),
        vec![BTreeSet::from(["127.0.0.1".to_string()])]
    );
}

/// A mesh of two agents across the topology (the client's and the server's), tracing
/// each way every 2 s from two flows. r4 then sends its traffic back through r3 instead
/// of r2: the server's way to the client changes at hop 2, the client's way to the
/// server (r1's two branches, each flow kept on its own by its fixed source port) does
/// not, trace after trace. The coordinator tells exactly one path change, of server ->
/// client, naming the hop and both routers, and the stored trace documents hold both
/// ways. Stopped, the route put back, and started again, the coordinator compares its
/// first traces with the stored ones: the one change back, told at once.
#[test]
fn a_route_changed_mid_mesh_is_one_path_change_for_exactly_the_pair_it_moved() {
    use std::io::BufRead;
    let test = "a_route_changed_mid_mesh_is_one_path_change_for_exactly_the_pair_it_moved";
    if skip_unless_root(test) {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let topology = Topology::new();
    // The routers answer from the address a probe came in on, as most routers do: what a
    // trace sees of a hop is then the way the probes took, not the way the router's
    // answers go back (which a route changed for one pair would change for the other).
    for router in &topology.names[1..5] {
        run(
            "ip",
            &[
                "netns",
                "exec",
                router,
                "sysctl",
                "-qw",
                "net.ipv4.icmp_errors_use_inbound_ifaddr=1",
            ],
        );
    }
    let dir = std::env::temp_dir().join(format!("linerate-{}-trace-mesh", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("mesh.key");
    std::fs::write(&key, "the trace mesh's agents' key\n").unwrap();
    let key = key.display().to_string();
    let server_ns = topology.names[5].clone();
    let _agents = [
        ServeProcess::start_at(
            Some(topology.client()),
            "10.91.1.1",
            "5201",
            &["--no-store", "--key", &key],
        ),
        ServeProcess::start_at(
            Some(&server_ns),
            SERVER,
            "5201",
            &["--no-store", "--key", &key],
        ),
    ];
    let file = dir.join("mesh.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"paths\"\nkey = \"{key}\"\n\
             [[host]]\nname = \"client\"\naddress = \"10.91.1.1:5201\"\n\
             [[host]]\nname = \"server\"\naddress = \"{SERVER}:5201\"\n\
             [[test]]\nname = \"path\"\nrun = \"trace\"\nparallel = 2\nmax_hops = 8\nmtu = true\ninterval = \"2s\"\n\
             [[group]]\nname = \"all\"\ntests = [\"path\"]\n"
        ),
    )
    .unwrap();
    let db = dir.join("results.db").display().to_string();
    let events = |seen: &[serde_json::Value]| -> Vec<serde_json::Value> {
        seen.iter()
            .filter(|l| l["event"] == "path_change")
            .cloned()
            .collect()
    };
    let r4_back_via = |router: &str| {
        run(
            "ip",
            &[
                "-n",
                &topology.names[4],
                "route",
                "replace",
                "default",
                "via",
                router,
            ],
        );
    };
    // A coordinator, read until each way was traced `first` times (then `between` runs)
    // and `then` times in all, or a minute passes each; then stopped. Its lines.
    let coordinate = |first: usize, between: &dyn Fn(), then: usize| -> Vec<serde_json::Value> {
        let mut coordinator = std::process::Command::new("ip")
            .args(["netns", "exec", topology.client(), binary()])
            .args(["--db", &db, "mesh", "run", file.to_str().unwrap(), "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(coordinator.stdout.take().unwrap()).lines();
        let mut seen: Vec<serde_json::Value> = Vec::new();
        let mut read_until = |n: usize, seen: &mut Vec<serde_json::Value>| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let traced = |seen: &Vec<serde_json::Value>, src: &str| {
                seen.iter()
                    .filter(|l| l["src"] == src && l["test"] == "path" && l.get("event").is_none())
                    .count()
            };
            while traced(seen, "client") < n || traced(seen, "server") < n {
                assert!(std::time::Instant::now() < deadline, "{seen:#?}");
                let line = lines.next().expect("the coordinator runs").unwrap();
                seen.push(serde_json::from_str(&line).unwrap_or(serde_json::json!({"text": line})));
            }
        };
        read_until(first, &mut seen);
        assert!(events(&seen).is_empty(), "no route moved yet: {seen:#?}");
        between();
        read_until(then, &mut seen);
        // SAFETY: signals a child this test started and has not reaped.
        unsafe { libc::kill(coordinator.id() as i32, libc::SIGTERM) };
        let _ = coordinator.wait();
        seen
    };
    let seen = coordinate(3, &|| r4_back_via("10.91.5.1"), 7);
    let changes = events(&seen);
    assert_eq!(changes.len(), 1, "{seen:#?}");
    let change = &changes[0];
    assert_eq!(
        (&change["src"], &change["dst"]),
        (&"server".into(), &"client".into())
    );
    let words = change["words"].as_str().unwrap();
    assert!(
        words.starts_with("hop 2: 10.91.4.1 -> 10.91.5.1 (2 of 2 flows)"),
        "{words}"
    );
    // Every trace ran, and reached its destination in four hops.
    let rows: Vec<&serde_json::Value> = seen
        .iter()
        .filter(|l| l["test"] == "path" && l.get("event").is_none())
        .collect();
    assert!(rows.iter().all(|r| r["outcome"] == "ok"), "{rows:#?}");
    assert!(rows.iter().all(|r| r["headline"] == 4.0), "{rows:#?}");
    // The stored document of the change's trace holds the new way.
    let id = change["run_id"].as_i64().expect("a stored run").to_string();
    let shown = linerate_in(topology.client(), &["--db", &db, "show", &id, "--json"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let stored = json(&shown);
    let hops = hops_of(&stored);
    assert!(hops[1].contains("10.91.5.1"), "{hops:?}");
    // Each hop's MTU probed too (mtu = true): 1500 all the way, never a change.
    assert_eq!(
        stored["paths"][0]["pmtu"],
        serde_json::json!([{"ttl": 1, "mtu": 1500}]),
        "{stored}"
    );
    // Stopped, the route put back, started again: the new coordinator knows each pair's
    // way from its last stored trace, and its first trace of server -> client is the one
    // change (back), client -> server none.
    r4_back_via("10.91.4.1");
    let again = coordinate(0, &|| {}, 3);
    let changes = events(&again);
    assert_eq!(changes.len(), 1, "{again:#?}");
    assert_eq!(changes[0]["src"], "server");
    let words = changes[0]["words"].as_str().unwrap();
    assert!(
        words.starts_with("hop 2: 10.91.5.1 -> 10.91.4.1 (2 of 2 flows)"),
        "{words}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The links from r2 and r3 to r4 carry 1400 octets, the rest 1500: `--mtu` finds 1500
/// at the first hop and 1400 from the third (the first beyond the narrower links) on
/// every flow, reaching the server, with UDP, TCP SYN and ICMP echo probes alike; Debian's tracepath ends at the same path MTU, and the
/// kernel learned the same from the routers' answers (its route's cached MTU).
#[test]
fn each_hops_mtu_agrees_with_tracepath_and_the_kernel() {
    let test = "each_hops_mtu_agrees_with_tracepath_and_the_kernel";
    if skip_unless_root(test) || !have("tracepath", test) {
        return;
    }
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let topology = Topology::new();
    let pid = std::process::id();
    for (a, b) in [("r2", "r4"), ("r3", "r4")] {
        for (node, dev) in [(a, format!("t{pid}{a}{b}")), (b, format!("t{pid}{b}{a}"))] {
            let ns = format!("lr-tr-{pid}-{node}");
            run(
                "ip",
                &["-n", &ns, "link", "set", "dev", &short(&dev), "mtu", "1400"],
            );
        }
    }
    for probe in [&[][..], &["--tcp"][..], &["--icmp"][..]] {
        // Each probe finds the MTUs afresh, not from the kernel's cache of the last's.
        run("ip", &["-n", topology.client(), "route", "flush", "cache"]);
        let mut args = vec!["--mtu", "-P", "4"];
        args.extend_from_slice(probe);
        let doc = trace_json(&topology, &args);
        assert_eq!(doc["reached"], true, "{probe:?}: {doc}");
        let hops = doc["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 4, "{probe:?}: {doc}");
        assert_eq!(hops[0]["mtu"], 1500, "{probe:?}: {doc}");
        assert_eq!(hops[2]["mtu"], 1400, "{probe:?}: {doc}");
        assert!(
            hops[1].get("mtu").is_none() && hops[3].get("mtu").is_none(),
            "{probe:?}: {doc}"
        );
        for path in doc["paths"].as_array().unwrap() {
            assert_eq!(
                path["pmtu"],
                serde_json::json!([{"ttl": 1, "mtu": 1500}, {"ttl": 3, "mtu": 1400}]),
                "{probe:?}: {doc}"
            );
            assert_eq!(path["reached_ttl"], 4, "{probe:?}: {doc}");
        }
    }
    run("ip", &["-n", topology.client(), "route", "flush", "cache"]);
    let text = linerate_in(topology.client(), &["--no-store", "trace", SERVER, "--mtu"]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("pmtu 1400"), "{text}");
    let kernel = run("ip", &["-n", topology.client(), "route", "get", SERVER]);
    assert!(kernel.contains("mtu 1400"), "the kernel's route: {kernel}");
    run("ip", &["-n", topology.client(), "route", "flush", "cache"]);
    let theirs = run(
        "ip",
        &[
            "netns",
            "exec",
            topology.client(),
            "tracepath",
            "-n",
            SERVER,
        ],
    );
    assert!(
        theirs.contains("Resume: pmtu 1400 hops 4"),
        "tracepath:\n{theirs}"
    );
}
