//! `linerate doctor`'s rules on hosts whose answer is known.

mod common;
use common::expand;
use linerate_hostinfo::doctor::{diagnose, Facts};
use linerate_hostinfo::observe::{read_settings, HostReading};
use linerate_hostinfo::source::Root;
use linerate_model::observe::{HostSettings, PathFacts};

/// The seeds' scp story: a 48 KB window at 100 ms caps a stream at 3.9 Mbit/s.
#[test]
fn a_48_kb_window_at_100_ms_is_the_first_finding_with_its_fix() {
    let facts = Facts {
        settings: HostSettings {
            tcp_rmem: Some([4096, 65536, 98_304]),
            tcp_wmem: Some([4096, 16384, 4_194_304]),
            rmem_max: Some(33_554_432),
            wmem_max: Some(33_554_432),
            congestion_control: Some("bbr".into()),
            ..Default::default()
        },
        cpus: 2,
        path: Some(PathFacts {
            target: "server".into(),
            rtt_ms: 100.0,
            ..Default::default()
        }),
        target_bps: Some(1e9),
        ..Default::default()
    };
    let findings = diagnose(&facts);
    let first = &findings[0];
    assert_eq!(first.rank, 1);
    assert_eq!(first.topic, "receive window");
    assert!(first.finding.contains("48 KiB of window"), "{first:?}");
    assert!(first.finding.contains("capped at 3.9 Mbit/s"), "{first:?}");
    // 1 Gbit/s x 100 ms is 12.5 MB in flight; twice that for the window's share, up to
    // a power of two.
    assert_eq!(
        first.command,
        "sysctl -w net.ipv4.tcp_rmem='4096 65536 33554432'"
    );
    assert_eq!(
        first.effect,
        "one stream's ceiling at this round trip: 3.9 Mbit/s -> 1.0 Gbit/s"
    );
    assert_eq!(
        first.sysctls,
        vec![(
            "net.ipv4.tcp_rmem".to_string(),
            "4096 65536 33554432".to_string()
        )]
    );
    // The 4 MiB send buffer caps a stream at 168 Mbit/s: found, ranked below.
    let send = findings.iter().find(|f| f.topic == "send window").unwrap();
    assert!(
        send.rank > 1 && send.finding.contains("167.8 Mbit/s"),
        "{send:?}"
    );
    // A round trip short enough finds nothing about windows.
    let near = Facts {
        path: Some(PathFacts {
            target: "server".into(),
            rtt_ms: 0.05,
            ..Default::default()
        }),
        ..facts
    };
    assert!(diagnose(&near).iter().all(|f| !f.topic.contains("window")));
}

/// The facts of a fixture's second reading, on a host of `cpus` CPUs, with no path.
fn fixture_facts(bundle: &str, cpus: usize) -> Facts {
    let dir = expand(bundle, &format!("doctor-{cpus}"));
    let root = Root::fixture(dir.join("after"));
    let facts = Facts {
        settings: read_settings(&root),
        reading: HostReading::read(&root),
        cpus,
        ..Default::default()
    };
    let _ = std::fs::remove_dir_all(&dir);
    facts
}

#[test]
fn one_busy_queue_and_one_interrupt_cpu_are_found_with_drops_and_short_rings() {
    let findings = diagnose(&fixture_facts("mlx5-one-busy-queue.txt", 4));
    let topics: Vec<&str> = findings.iter().map(|f| f.topic.as_str()).collect();
    assert_eq!(
        topics,
        vec![
            "interrupts",
            "receive queues",
            "backlog",
            "rings",
            "interrupt coalescing",
            "CPU idle states"
        ],
        "{findings:#?}"
    );
    let interrupts = &findings[0];
    assert!(
        interrupts
            .finding
            .starts_with("100 % of ens1f0's queue interrupts went to CPU 0"),
        "{interrupts:?}"
    );
    assert_eq!(interrupts.command, "systemctl start irqbalance");
    assert!(
        findings[1]
            .finding
            .starts_with("rx queue 0 has carried 98 % of ens1f0's received packets"),
        "{:?}",
        findings[1]
    );
    assert_eq!(findings[2].sysctls[0].0, "net.core.netdev_max_backlog");
    assert_eq!(findings[3].command, "ethtool -G ens1f0 rx 8192 tx 8192");
    assert_eq!(findings[4].command, "ethtool -C ens1f0 adaptive-rx on");
    assert!(
        findings[5].finding.contains("C6, which takes 133 us"),
        "{:?}",
        findings[5]
    );
    // No path was probed and no --rtt given: nothing is said about windows.
    assert!(findings.iter().all(|f| !f.topic.contains("window")));
    // A path over lo crosses no NIC: ens1f0's queues, interrupts and rings are not its
    // findings (once doctor spoke of eth0's RPS for a test against 127.0.0.1).
    let mut over_lo = fixture_facts("mlx5-one-busy-queue.txt", 4);
    over_lo.path = Some(PathFacts {
        target: "127.0.0.1".into(),
        interface: Some("lo".into()),
        ..Default::default()
    });
    let found = diagnose(&over_lo);
    assert!(
        found
            .iter()
            .all(|f| !f.finding.contains("ens1f0") && !f.command.contains("ens1f0")),
        "{found:#?}"
    );
}

#[test]
fn a_host_with_spread_queues_and_no_drops_is_healthy() {
    assert_eq!(diagnose(&fixture_facts("virtio-spread.txt", 2)), vec![]);
}

/// The rules a quiet NIC host can still break: offloads turned off, a macvlan on the
/// route, a path narrower than the interface, powersave, reno.
#[test]
fn offloads_a_stacked_route_a_narrow_path_powersave_and_reno_are_found() {
    let mut facts = fixture_facts("i40e-macvlan.txt", 2);
    facts.path = Some(PathFacts {
        target: "server (192.0.2.7)".into(),
        rtt_ms: 2.0,
        interface: Some("mv0".into()),
        interface_mtu: Some(9000),
        path_mtu: Some(1500),
        ..Default::default()
    });
    let findings = diagnose(&facts);
    let topics: Vec<&str> = findings.iter().map(|f| f.topic.as_str()).collect();
    assert_eq!(
        topics,
        vec![
            "offloads",
            "MTU",
            "stacked device",
            "congestion control",
            "CPU frequency"
        ],
        "{findings:#?}"
    );
    assert_eq!(findings[0].command, "ethtool -K ens2f0 gro on tx on");
    assert_eq!(findings[1].command, "ip link set dev mv0 mtu 1500");
    assert!(
        findings[2]
            .finding
            .contains("leaves by mv0, a software device stacked on ens2f0"),
        "{:?}",
        findings[2]
    );
    assert_eq!(
        findings[3].sysctls,
        vec![(
            "net.ipv4.tcp_congestion_control".to_string(),
            "bbr".to_string()
        )]
    );
    assert!(findings[4]
        .finding
        .starts_with("2 of 2 CPUs run the powersave governor"));
    // 128 MiB buffers at 2 ms carry far more than 10 Gbit/s: no window finding.
    assert!(findings.iter().all(|f| !f.topic.contains("window")));
}

/// A 200 Mbit/s token bucket on the route's interface: it is what holds a test down, it
/// ranks first, and windows are sized for it rather than for the 10 Gbit/s link.
#[test]
fn a_token_bucket_on_the_egress_is_found_first_and_sizes_the_windows() {
    let route = linerate_hostinfo::observe::InterfaceReading {
        name: "eth0".into(),
        speed_mbps: Some(10_000),
        qdisc: Some("tbf".into()),
        shaped_bps: Some(200_000_000),
        ..Default::default()
    };
    let facts = Facts {
        settings: HostSettings {
            tcp_rmem: Some([4096, 131_072, 6_291_456]),
            tcp_wmem: Some([4096, 16384, 4_194_304]),
            congestion_control: Some("bbr".into()),
            ..Default::default()
        },
        reading: HostReading {
            interfaces: vec![route],
            ..Default::default()
        },
        cpus: 2,
        path: Some(PathFacts {
            target: "server".into(),
            rtt_ms: 50.0,
            interface: Some("eth0".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let findings = diagnose(&facts);
    let first = &findings[0];
    assert_eq!(first.topic, "egress shaping", "{findings:#?}");
    assert!(first.finding.contains("eth0") && first.finding.contains("200.0 Mbit/s"));
    assert_eq!(first.command, "tc qdisc del dev eth0 root");
    // 200 Mbit/s x 50 ms is 1.25 MB: the 6 MiB receive buffer is enough for it, where
    // the 10 Gbit/s link would have asked for far more.
    assert_eq!(facts.target_bps(), 200e6);
    assert!(
        !findings.iter().any(|f| f.topic == "receive window"),
        "{findings:#?}"
    );
}

/// Other work at 98 % of the CPUs: said, and ranked above a window that matters less.
#[test]
fn other_work_on_the_cpus_is_named_and_ranked_by_what_it_leaves() {
    let facts = Facts {
        settings: HostSettings {
            congestion_control: Some("bbr".into()),
            ..Default::default()
        },
        cpus: 2,
        others_busy_pct: Some(98.0),
        ..Default::default()
    };
    let findings = diagnose(&facts);
    let work = findings
        .iter()
        .find(|f| f.topic == "other work")
        .expect("found");
    assert_eq!(work.rank, 1);
    assert!(work.finding.contains("98 %"), "{work:?}");
    let calm = Facts {
        others_busy_pct: Some(10.0),
        ..facts
    };
    assert!(!diagnose(&calm).iter().any(|f| f.topic == "other work"));
}

/// The first-hour report: on a 50 ms path losing 2 % each way, doctor ranked the send
/// buffer first and never named the loss. One cubic stream there holds near 2 Mbit/s
/// (Mathis), far below what a 4 MiB buffer allows: the loss comes first.
#[test]
fn loss_on_the_path_ranks_above_the_windows_it_makes_irrelevant() {
    let lossy = PathFacts {
        target: "server (192.0.2.7)".into(),
        rtt_ms: 50.0,
        path_mtu: Some(1500),
        loss: Some(linerate_model::observe::LossProbe {
            answered: 1_536,
            lost: 64,
            late: 0,
            rtt_median_ms: 50.4,
        }),
        ..Default::default()
    };
    let facts = Facts {
        settings: HostSettings {
            tcp_rmem: Some([4096, 131_072, 6_291_456]),
            tcp_wmem: Some([4096, 16384, 4_194_304]),
            rmem_max: Some(212_992),
            wmem_max: Some(212_992),
            congestion_control: Some("cubic".into()),
            ..Default::default()
        },
        cpus: 2,
        path: Some(lossy.clone()),
        target_bps: Some(1e9),
        ..Default::default()
    };
    let findings = diagnose(&facts);
    let first = &findings[0];
    assert_eq!(first.topic, "path loss", "{findings:#?}");
    // 64 of 1,600 transactions: 4 %, about 2.02 % each way.
    assert!(first.finding.contains("64 of 1600"), "{first:?}");
    assert!(first.finding.contains("2.02 % each way"), "{first:?}");
    // 1448 bytes x 8 / 50.4 ms x 1.22 / sqrt(0.0202): near 2.0 Mbit/s.
    assert!(first.finding.contains("near 2.0 Mbit/s"), "{first:?}");
    assert!(first.command.contains("-C bbr"), "{first:?}");
    // bbr already the host's default: the loss is still named, and what is left to try
    // is parallel streams, not the bbr the host already runs.
    let mut on_bbr = facts.clone();
    on_bbr.settings.congestion_control = Some("bbr".into());
    let found = diagnose(&on_bbr);
    let loss = found.iter().find(|f| f.topic == "path loss").unwrap();
    assert!(
        !loss.command.contains("-C bbr") && loss.command.contains("-P 8"),
        "{loss:?}"
    );
    let send = findings.iter().find(|f| f.topic == "send window");
    assert!(send.is_none_or(|s| s.rank > 1), "{findings:#?}");
    // A clean probe says nothing about loss.
    let clean = Facts {
        path: Some(PathFacts {
            loss: Some(linerate_model::observe::LossProbe {
                answered: 1_600,
                lost: 0,
                late: 0,
                rtt_median_ms: 50.4,
            }),
            ..lossy
        }),
        ..facts
    };
    assert!(diagnose(&clean).iter().all(|f| f.topic != "path loss"));
}

/// The other root qdiscs that hold a test down: an htb's default class (named as htb),
/// an fq that caps each flow, and a netem that adds delay and loss to all that leaves.
#[test]
fn htb_fq_and_netem_on_the_egress_are_named_with_their_rates() {
    let facts_with = |reading: linerate_hostinfo::observe::InterfaceReading| Facts {
        settings: HostSettings {
            congestion_control: Some("bbr".into()),
            ..Default::default()
        },
        reading: HostReading {
            interfaces: vec![reading],
            ..Default::default()
        },
        cpus: 2,
        path: Some(PathFacts {
            target: "server".into(),
            rtt_ms: 1.0,
            interface: Some("eth0".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let eth0 = linerate_hostinfo::observe::InterfaceReading {
        name: "eth0".into(),
        speed_mbps: Some(10_000),
        ..Default::default()
    };
    let htb = diagnose(&facts_with(linerate_hostinfo::observe::InterfaceReading {
        qdisc: Some("htb".into()),
        shaped_bps: Some(80_000_000),
        ..eth0.clone()
    }));
    assert_eq!(htb[0].topic, "egress shaping", "{htb:#?}");
    assert!(
        htb[0]
            .finding
            .contains("htb whose default class is capped (ceil) at 80.0 Mbit/s"),
        "{htb:#?}"
    );
    let fq = diagnose(&facts_with(linerate_hostinfo::observe::InterfaceReading {
        qdisc: Some("fq".into()),
        flow_cap_bps: Some(100_000_000),
        ..eth0.clone()
    }));
    assert_eq!(fq[0].topic, "per-flow cap", "{fq:#?}");
    assert!(fq[0].finding.contains("at most 100.0 Mbit/s"), "{fq:#?}");
    assert_eq!(fq[0].command, "tc qdisc replace dev eth0 root fq");
    let netem = diagnose(&facts_with(linerate_hostinfo::observe::InterfaceReading {
        qdisc: Some("netem".into()),
        added_delay_ms: Some(25.0),
        added_loss_pct: Some(2.0),
        ..eth0
    }));
    assert_eq!(netem[0].topic, "egress emulation", "{netem:#?}");
    assert!(
        netem[0].finding.contains("adds 25.0 ms and 2.00 % loss"),
        "{netem:#?}"
    );
}
