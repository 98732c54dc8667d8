use crate::*;
use std::collections::BTreeMap;

fn vars(pairs: &[(&str, &str)]) -> Vars {
    Vars {
        set: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        environment: false,
    }
}

fn uperf_vars() -> Vars {
    vars(&[
        ("h", "10.0.0.1"),
        ("h1", "10.0.0.1"),
        ("h2", "10.0.0.2"),
        ("h3", "10.0.0.3"),
        ("h4", "10.0.0.4"),
        ("nthr", "4"),
        ("iter", "100"),
        ("proto", "tcp"),
        ("conn", "8"),
    ])
}

/// One of the project's own profiles in uperf's format (tests/fixtures/uperf).
fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/uperf/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// uperf's own profiles, kept beside the repository in ../shared/profiles/uperf; `None`
/// (with the test recorded as skipped) in a clone that has nothing beside it.
fn shared_uperf_dir(test: &str) -> Option<std::path::PathBuf> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/profiles/uperf");
    if dir.is_dir() {
        return Some(dir);
    }
    let reason = format!(
        "uperf's own profiles are not beside the repository ({})",
        dir.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run: {reason} (CI=true: a test that cannot run fails)");
    }
    eprintln!("SKIPPED {test}: {reason}");
    if let Ok(log) = std::env::var("LINERATE_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(file, "{test}: {reason}");
        }
    }
    None
}

fn toml_err(text: &str) -> ProfileError {
    toml_format::parse("p.toml", text, &vars(&[])).expect_err("the profile must be refused")
}

#[test]
fn every_shared_uperf_profile_runs_or_is_refused_by_name() {
    let refused = [
        ("sctp.xml", "protocol 'sctp'"),
        ("sctp-over-udp.xml", "protocol 'sctp'"),
        ("sctp_flowop_test.xml", "protocol 'sctp'"),
        ("vsock.xml", "protocol 'vsock'"),
        ("rdstest.xml", "protocol 'rds'"),
        ("oraclerac.xml", "protocol 'udapl'"),
        ("tcp-freebsd-change-stack.xml", "uperf option 'stack'"),
    ];
    let Some(dir) = shared_uperf_dir("every_shared_uperf_profile_runs_or_is_refused_by_name")
    else {
        return;
    };
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("shared uperf profiles") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".xml") {
            continue;
        }
        seen += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let outcome = uperf::parse(&name, &text, &uperf_vars());
        match refused.iter().find(|(file, _)| *file == name) {
            Some((_, element)) => {
                let err = outcome.expect_err(&name);
                assert!(
                    err.message.contains(element) && err.message.contains("not supported"),
                    "{name}: {err}"
                );
                assert!(
                    err.pos.line > 1,
                    "{name}: the position points into the file: {err}"
                );
            }
            None => {
                let profile = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!profile.groups.is_empty(), "{name}");
                converts_and_reads_back(&name, &text);
            }
        }
    }
    assert_eq!(seen, 24, "every shared profile was read");
}

#[test]
fn uperf_semantics_of_a_bulk_write_profile() {
    let Parsed {
        profile, format, ..
    } = parse("bulk-write.xml", &fixture("bulk-write.xml"), &uperf_vars()).unwrap();
    assert_eq!(format, Format::UperfXml);
    assert_eq!(profile.name, "bulk-write");
    let group = &profile.groups[0];
    assert_eq!(group.threads, 4);
    assert_eq!(group.host, None);
    assert_eq!(group.transactions.len(), 3);
    assert_eq!(group.transactions[0].repeat, Repeat::Iterations(1));
    let Action::Connect(endpoint) = &group.transactions[0].ops[0].action else {
        panic!("connect first");
    };
    assert_eq!(endpoint.protocol, Protocol::Tcp);
    assert_eq!(endpoint.remote.as_deref(), Some("10.0.0.1"));
    assert_eq!(endpoint.window, Some(50 * 1024));
    assert!(endpoint.nodelay);
    assert_eq!(group.transactions[1].repeat, Repeat::Duration(30.0));
    let Action::Write(write) = &group.transactions[1].ops[0].action else {
        panic!("write");
    };
    assert_eq!((write.size, write.count), (Size::Fixed(8192), 10));
    assert_eq!(group.transactions[2].ops[0].action, Action::Disconnect);
}

#[test]
fn uperf_named_connections_think_and_defaults() {
    let two = parse("dual-path.xml", &fixture("dual-path.xml"), &uperf_vars())
        .unwrap()
        .profile;
    let connects = &two.groups[0].transactions[0].ops;
    assert_eq!(connects[0].conn, None);
    assert_eq!(connects[1].conn.as_deref(), Some("1"));
    let Action::Connect(udp) = &connects[1].action else {
        panic!()
    };
    assert_eq!(
        (udp.protocol, udp.remote.as_deref()),
        (Protocol::Udp, Some("10.0.0.2"))
    );
    // A transaction without iterations or duration runs once.
    assert_eq!(two.groups[0].transactions[0].repeat, Repeat::Iterations(1));
    let ldap = parse(
        "directory-lookup.xml",
        &fixture("directory-lookup.xml"),
        &uperf_vars(),
    )
    .unwrap()
    .profile;
    let ops = &ldap.groups[0].transactions[1].ops;
    assert_eq!(
        ops[1].action,
        Action::Think(Think {
            seconds: 0.01,
            busy: false
        })
    );
    assert_eq!(
        ops[3].action,
        Action::Think(Think {
            seconds: 0.01,
            busy: true
        })
    );
    // The peer's mirror: a write meets a read of the same size, a think meets nothing.
    assert_eq!(
        ops[0].action.mirror(),
        Action::Read(Transfer {
            size: Size::Fixed(70),
            rsize: None,
            count: 1,
            last: None,
            rate: None,
            canfail: false
        })
    );
    assert_eq!(ops[1].action.mirror(), Action::Nop);
}

#[test]
fn uperf_variables_and_errors_point_at_the_value() {
    let text = "<?xml version=\"1.0\"?>\n<profile name=\"p\">\n  <group nthreads=\"$nthr\">\n    <transaction iterations=\"1\">\n      <flowop type=\"connect\" options=\"remotehost=$h protocol=tcp\"/>\n    </transaction>\n  </group>\n</profile>\n";
    let err = uperf::parse("p.xml", text, &vars(&[("h", "x")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "p.xml:3:20: ${nthr} is not set (give --set nthr=VALUE or set nthr in the environment)"
    );
    let err = uperf::parse("p.xml", text, &vars(&[("nthr", "many"), ("h", "x")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "p.xml:3:20: threads 'many' is not a whole number"
    );
    let bad_option = text.replace("protocol=tcp", "protocol=tcp wndsz=lots");
    let err = uperf::parse("p.xml", &bad_option, &vars(&[("nthr", "2"), ("h", "x")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "p.xml:5:72: window 'lots' is not a size like 64k"
    );
    let unknown = text.replace("protocol=tcp", "protocol=tcp frobnicate=1");
    let err = uperf::parse("p.xml", &unknown, &vars(&[("nthr", "2"), ("h", "x")])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "p.xml:5:66: unknown uperf option 'frobnicate' of flowop connect"
    );
    let err = uperf::parse("p.xml", "<profile><group>", &vars(&[])).unwrap_err();
    assert!(err.message.starts_with("not well-formed XML"), "{err}");
}

const GOOD: &str = r#"
name = "mixed"
[vars]
server = "10.1.0.1"
conns = 4

[[group]]
name = "oltp"
threads = "${conns}"
remote = "${server}"

[[group.transaction]]
iterations = 1
ops = [{ op = "connect", protocol = "tcp", nodelay = true, window = "256k" }]

[[group.transaction]]
duration = "2s"
rate = 500
ops = [
  { op = "write", size = 170 },
  { op = "read", size = "rand(35,415)" },
  { op = "think", duration = "1ms", busy = true },
]

[[group.transaction]]
ops = [{ op = "disconnect" }]
"#;

#[test]
fn toml_profile_with_defaults_and_overrides() {
    let profile = toml_format::parse("p.toml", GOOD, &vars(&[])).unwrap();
    let group = &profile.groups[0];
    assert_eq!((group.name.as_str(), group.threads), ("oltp", 4));
    let Action::Connect(endpoint) = &group.transactions[0].ops[0].action else {
        panic!()
    };
    assert_eq!(endpoint.remote.as_deref(), Some("10.1.0.1"));
    assert_eq!(endpoint.window, Some(262_144));
    assert_eq!(group.transactions[1].rate, Some(500.0));
    assert_eq!(group.transactions[1].repeat, Repeat::Duration(2.0));
    let Action::Read(read) = &group.transactions[1].ops[1].action else {
        panic!()
    };
    assert_eq!(read.size, Size::Random { min: 35, max: 415 });
    // --set wins over the profile's default.
    let set = toml_format::parse(
        "p.toml",
        GOOD,
        &vars(&[("conns", "32"), ("server", "local")]),
    )
    .unwrap();
    assert_eq!(set.groups[0].threads, 32);
    let Action::Connect(local) = &set.groups[0].transactions[0].ops[0].action else {
        panic!()
    };
    assert_eq!(local.remote, None, "'local' is the in-process server");
}

#[test]
fn toml_errors_name_the_line_column_and_value() {
    let cases: Vec<(String, &str)> = vec![
        (GOOD.replace("threads = \"${conns}\"", "threads = 0"), "p.toml:9:11: threads '0' must be between 1 and 16384"),
        (GOOD.replace("size = 170", "size = \"huge\""), "p.toml:20:26: size 'huge' is not a size like 64k"),
        (GOOD.replace("op = \"write\"", "op = \"scribble\""), "p.toml:20:10: unknown operation 'scribble' (connect, accept, disconnect, write, read, sendto, recv, sendfile, sendfilev, think, nop)"),
        (GOOD.replace("protocol = \"tcp\"", "protocol = \"sctp\""), "p.toml:14:37: protocol 'sctp' is not supported: linerate runs tcp, udp and ssl profiles"),
        (GOOD.replace("duration = \"2s\"", "duration = \"soon\""), "p.toml:17:12: duration 'soon' is not a duration like 30s or 100ms"),
        (GOOD.replace("rate = 500", "rate = -1"), "p.toml:18:8: rate '-1' is not a positive number"),
        (GOOD.replace("busy = true", "colour = true"), "p.toml:22:37: 'colour' is not an option of think"),
        (GOOD.replace("\"${conns}\"", "\"${missing}\""), "p.toml:9:11: ${missing} is not set (give --set missing=VALUE or set missing in the environment)"),
        (GOOD.replace("iterations = 1\n", "iterations = 1\nduration = \"1s\"\n"), "p.toml:14:12: a transaction has iterations or a duration, not both"),
    ];
    for (text, expected) in cases {
        assert_eq!(toml_err(&text).to_string(), expected);
    }
    let unknown_key = toml_err(&GOOD.replace("name = \"oltp\"", "nmae = \"oltp\""));
    assert_eq!(unknown_key.pos.line, 8, "{unknown_key}");
    assert!(unknown_key.message.contains("nmae"), "{unknown_key}");
    let syntax = toml_err("name = \"x\"\n[[group]\n");
    assert_eq!(syntax.pos.line, 2, "{syntax}");
    let no_connection =
        toml_err("[[group]]\n[[group.transaction]]\nops = [{ op = \"write\", size = 1 }]\n");
    assert!(
        no_connection.message.contains("before any connect"),
        "{no_connection}"
    );
    let big_datagram = toml_err("[[group]]\n[[group.transaction]]\nops = [{ op = \"connect\", protocol = \"udp\" }, { op = \"write\", size = \"64k\" }]\n");
    assert!(
        big_datagram
            .message
            .contains("does not fit one UDP datagram"),
        "{big_datagram}"
    );
}

#[test]
fn a_converted_uperf_profile_reads_back_the_same() {
    for name in [
        "bulk-write.xml",
        "dual-path.xml",
        "directory-lookup.xml",
        "echo-accept.xml",
    ] {
        converts_and_reads_back(name, &fixture(name));
    }
}

fn converts_and_reads_back(name: &str, text: &str) {
    let profile = uperf::parse(name, text, &uperf_vars()).unwrap();
    let toml = toml_format::to_toml(&profile);
    let back = toml_format::parse("converted.toml", &toml, &vars(&[]))
        .unwrap_or_else(|e| panic!("{name}: {e}\n{toml}"));
    assert_eq!(back, profile, "{name}");
}

#[test]
fn the_projects_uperf_fixtures_run_or_are_refused_by_name() {
    for (name, refused) in [
        ("bulk-write.xml", None),
        ("dual-path.xml", None),
        ("directory-lookup.xml", None),
        ("echo-accept.xml", None),
        ("tls-read.xml", None),
        ("vsock-write.xml", Some(("protocol 'vsock'", 6))),
    ] {
        let outcome = uperf::parse(name, &fixture(name), &uperf_vars());
        match refused {
            Some((element, line)) => {
                let err = outcome.expect_err(name);
                assert!(
                    err.message.contains(element) && err.message.contains("not supported"),
                    "{name}: {err}"
                );
                assert_eq!(err.pos.line, line, "{name}: {err}");
            }
            None => assert!(!outcome.unwrap().groups.is_empty(), "{name}"),
        }
    }
}

mod round_trip {
    use super::*;
    use proptest::prelude::*;

    fn size() -> impl Strategy<Value = Size> {
        prop_oneof![
            (1u64..65_507).prop_map(Size::Fixed),
            (1u64..63).prop_map(|k| Size::Fixed(k << 10)),
            (1u64..3000, 0u64..3000).prop_map(|(a, b)| Size::Random { min: a, max: a + b }),
        ]
    }

    fn seconds() -> impl Strategy<Value = f64> {
        prop_oneof![
            (0u32..3600).prop_map(f64::from),
            (1u32..999).prop_map(|ms| f64::from(ms) / 1e3)
        ]
    }

    fn rate() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            (1u32..100_000).prop_map(|r| Some(f64::from(r))),
            (1u32..1000).prop_map(|r| Some(f64::from(r) / 8.0))
        ]
    }

    fn endpoint() -> impl Strategy<Value = Endpoint> {
        (
            prop_oneof![
                Just(Protocol::Tcp),
                Just(Protocol::Udp),
                Just(Protocol::Ssl)
            ],
            prop_oneof![
                Just(None),
                Just(Some("10.0.0.7".to_string())),
                Just(Some("agent-3:5300".to_string()))
            ],
            prop_oneof![Just(None), (1u64..4096).prop_map(|k| Some(k * 1024))],
            any::<bool>(),
            prop_oneof![Just(None), Just(Some("cubic".to_string()))],
        )
            .prop_map(|(protocol, remote, window, nodelay, congestion)| Endpoint {
                cipher: None,
                engine: None,
                marks: None,
                source: None,
                protocol,
                remote,
                window,
                nodelay,
                congestion,
            })
    }

    fn transfer() -> impl Strategy<Value = Transfer> {
        (
            size(),
            prop_oneof![Just(None), size().prop_map(Some)],
            1u64..100,
            rate(),
            any::<bool>(),
        )
            .prop_map(|(size, rsize, count, rate, canfail)| Transfer {
                size,
                rsize,
                count,
                last: None,
                rate,
                canfail,
            })
    }

    /// A byte stream's rsize is fixed, and only beside a fixed size (the peer must know
    /// the bytes it moves).
    fn stream_rsize(mut t: Transfer) -> Transfer {
        if !matches!((t.size, t.rsize), (Size::Fixed(_), Some(Size::Fixed(_)))) {
            t.rsize = None;
        }
        t
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            endpoint().prop_map(Action::Connect),
            endpoint().prop_map(Action::Accept),
            Just(Action::Disconnect),
            transfer().prop_map(|t| Action::Write(stream_rsize(t))),
            transfer().prop_map(|t| Action::Read(stream_rsize(t))),
            transfer().prop_map(Action::Sendto),
            transfer().prop_map(Action::Recv),
            (seconds(), any::<bool>())
                .prop_map(|(seconds, busy)| Action::Think(Think { seconds, busy })),
            (
                "[a-z/]{1,12}",
                prop_oneof![Just(None), (1u32..=64).prop_map(Some)],
                prop_oneof![Just(None), (1u64..1 << 30).prop_map(Some)],
                1u64..100,
                any::<bool>()
            )
                .prop_map(|(dir, nfiles, chunk, count, canfail)| Action::Sendfile(
                    FileSend {
                        dir,
                        files: Vec::new(),
                        nfiles,
                        chunk,
                        count,
                        canfail
                    }
                )),
            Just(Action::Nop),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        (
            prop_oneof![
                Just(None),
                Just(Some("1".to_string())),
                Just(Some("db \"main\"".to_string()))
            ],
            action(),
        )
            .prop_map(|(conn, action)| {
                let conn = match action {
                    Action::Think(_) | Action::Nop => None,
                    _ => conn,
                };
                Op { conn, action }
            })
    }

    fn transaction() -> impl Strategy<Value = Transaction> {
        (
            prop_oneof![
                (0u64..100_000).prop_map(Repeat::Iterations),
                seconds().prop_map(Repeat::Duration)
            ],
            rate(),
            proptest::collection::vec(op(), 1..6),
        )
            .prop_map(|(repeat, rate, ops)| Transaction { repeat, rate, ops })
    }

    /// A profile whose every data operation has a TCP connection opened first, as the
    /// validator demands (the generated body follows it).
    fn profile() -> impl Strategy<Value = Profile> {
        proptest::collection::vec(
            (
                "[a-z][a-z0-9 ]{0,12}",
                1u32..5000,
                prop_oneof![Just(None), Just(Some("10.9.0.2".to_string()))],
                proptest::collection::vec(transaction(), 1..4),
            ),
            1..4,
        )
        .prop_map(|groups| Profile {
            name: "generated \u{e9}\"quoted\"".into(),
            groups: groups
                .into_iter()
                .map(|(name, threads, host, mut transactions)| {
                    let opener = |conn: Option<&str>| Op {
                        conn: conn.map(str::to_string),
                        action: Action::Connect(Endpoint {
                            cipher: None,
                            engine: None,
                            marks: None,
                            source: None,
                            protocol: Protocol::Tcp,
                            remote: None,
                            window: None,
                            nodelay: false,
                            congestion: None,
                        }),
                    };
                    // Files go over byte streams, and a group another host runs sends
                    // no files of this one.
                    let mut udp = std::collections::BTreeSet::new();
                    for op in transactions.iter_mut().flat_map(|t| &mut t.ops) {
                        match &op.action {
                            Action::Connect(e) | Action::Accept(e) => {
                                if e.protocol == Protocol::Udp {
                                    udp.insert(op.conn.clone());
                                } else {
                                    udp.remove(&op.conn);
                                }
                            }
                            Action::Sendfile(_) if host.is_some() || udp.contains(&op.conn) => {
                                op.action = Action::Nop;
                                op.conn = None;
                            }
                            _ => {}
                        }
                    }
                    let openers = [None, Some("1"), Some("db \"main\"")].map(opener).to_vec();
                    transactions.insert(
                        0,
                        Transaction {
                            repeat: Repeat::Iterations(1),
                            rate: None,
                            ops: openers,
                        },
                    );
                    Group {
                        name,
                        threads,
                        host,
                        transactions,
                    }
                })
                .collect(),
        })
    }

    proptest! {
        #[test]
        fn to_toml_and_back_keeps_the_meaning(profile in profile()) {
            let text = toml_format::to_toml(&profile);
            let back = toml_format::parse("generated.toml", &text, &vars(&[]));
            prop_assert_eq!(back.as_ref().ok(), Some(&profile), "{:?}\n{}", back.as_ref().err(), text);
        }
    }
}

#[test]
fn format_detection() {
    assert_eq!(Format::detect("a.xml", ""), Format::UperfXml);
    assert_eq!(Format::detect("a.profile", "  <?xml"), Format::UperfXml);
    assert_eq!(Format::detect("a.toml", "name = 1"), Format::Toml);
    let _ = BTreeMap::<u8, u8>::new();
}

#[test]
fn a_flowop_duration_is_ignored_as_uperf_ignores_it_and_said_so() {
    let (profile, notes) =
        uperf::parse_noting("tls-read.xml", &fixture("tls-read.xml"), &uperf_vars()).unwrap();
    // uperf runs `count` reads per iteration whatever the flowop's duration says: two
    // iterations of one 8 KiB read.
    let txn = &profile.groups[0].transactions[1];
    assert_eq!(txn.repeat, Repeat::Iterations(2));
    let Action::Read(read) = &txn.ops[0].action else {
        panic!("{txn:?}")
    };
    assert_eq!((read.size, read.count), (Size::Fixed(8192), 1));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("tls-read.xml:8:")
            && notes[0].contains("duration on a read is ignored"),
        "{notes:?}"
    );
    // A think's duration is its own, and no note.
    let (_, none) = uperf::parse_noting(
        "think.xml",
        r#"<profile name="t"><group><transaction iterations="1">
<flowop type="think" options="duration=10ms"/></transaction></group></profile>"#,
        &vars(&[]),
    )
    .unwrap();
    assert!(none.is_empty(), "{none:?}");
}

/// The peer's transfer of `action`, and the bytes each side moves.
fn mirrored_bytes(action: &Action) -> (Transfer, u64, u64) {
    let (ours, _) = action.transfer().unwrap();
    let peer = match action.mirror() {
        Action::Read(t) | Action::Write(t) | Action::Recv(t) | Action::Sendto(t) => t,
        other => panic!("{other:?}"),
    };
    let bytes = |t: &Transfer| {
        (0..t.count)
            .map(|k| t.fixed_size_of(k).unwrap())
            .sum::<u64>()
    };
    (peer.clone(), bytes(ours), bytes(&peer))
}

#[test]
fn rsize_is_the_peers_piece_of_the_same_bytes_on_a_stream() {
    let parse_op = |options: &str, kind: &str| {
        let text = format!(
            r#"<profile name="r"><group nthreads="64"><transaction iterations="1">
<flowop type="connect" options="remotehost=$h protocol=tcp"/></transaction>
<transaction iterations="1"><flowop type="{kind}" options="{options}"/></transaction></group></profile>"#
        );
        uperf::parse("r.xml", &text, &uperf_vars()).unwrap().groups[0].transactions[1].ops[0]
            .action
            .clone()
    };
    // The issue's profile: 64 processes writing count=10 size=8k rsize=16k. The peer reads
    // the same 80 KiB as five 16 KiB pieces (before, ten 16 KiB reads waited for 160 KiB).
    let (peer, ours, theirs) = mirrored_bytes(&parse_op("count=10 size=8k rsize=16k", "write"));
    assert_eq!(
        (peer.size, peer.count, peer.last),
        (Size::Fixed(16384), 5, None)
    );
    assert_eq!((ours, theirs), (81920, 81920));
    // Pieces that do not divide the bytes: the last one is shorter.
    let (peer, ours, theirs) = mirrored_bytes(&parse_op("count=3 size=10k rsize=4k", "read"));
    assert_eq!(
        (peer.size, peer.count, peer.last),
        (Size::Fixed(4096), 8, Some(2048))
    );
    assert_eq!((ours, theirs), (30720, 30720));
    // And back: the mirror of the mirror moves the same bytes too.
    let twice = parse_op("count=3 size=10k rsize=4k", "read")
        .mirror()
        .mirror();
    let (_, back, _) = mirrored_bytes(&twice);
    assert_eq!(back, 30720);
    // A paced write keeps its byte rate on the peer.
    let (peer, _, _) = mirrored_bytes(&parse_op("count=10 size=8k rsize=16k rate=100", "write"));
    assert_eq!(peer.rate, Some(50.0));
    // Random sizes leave the peer not knowing the bytes: refused, by position.
    let text = r#"<profile name="r"><group><transaction iterations="1">
<flowop type="connect" options="remotehost=$h protocol=tcp"/>
<flowop type="write" options="size=rand(1k,8k) rsize=16k"/></transaction></group></profile>"#;
    let err = uperf::parse("r.xml", text, &uperf_vars()).unwrap_err();
    assert!(err.message.contains("rsize needs fixed sizes"), "{err}");
    assert_eq!(err.pos.line, 3, "{err}");
}

#[test]
fn rsize_on_datagrams_is_the_peers_datagram_message_for_message() {
    let text = r#"<profile name="u"><group><transaction iterations="1">
<flowop type="connect" options="remotehost=$h protocol=udp"/>
<flowop type="sendto" options="count=4 size=1k rsize=8k"/></transaction></group></profile>"#;
    let profile = uperf::parse("u.xml", text, &uperf_vars()).unwrap();
    let Action::Recv(peer) = profile.groups[0].transactions[0].ops[1].action.mirror() else {
        panic!()
    };
    assert_eq!((peer.size, peer.count), (Size::Fixed(8192), 4));
}

#[test]
fn sendfile_and_sendfilev_read_in_both_formats_and_are_bounded() {
    let xml = r#"<profile name="files"><group nthreads="2">
<transaction iterations="1"><flowop type="connect" options="remotehost=$h protocol=tcp"/></transaction>
<transaction iterations="3">
  <flowop type="sendfile" options="dir=/srv/files size=64k"/>
  <flowop type="sendfilev" options="dir=/srv/files nfiles=4 count=2"/>
</transaction></group></profile>"#;
    let profile = uperf::parse("files.xml", xml, &uperf_vars()).unwrap();
    let ops = &profile.groups[0].transactions[1].ops;
    let Action::Sendfile(one) = &ops[0].action else {
        panic!("{ops:?}")
    };
    assert_eq!(
        (one.dir.as_str(), one.nfiles, one.chunk, one.count),
        ("/srv/files", None, Some(65536), 1)
    );
    assert_eq!(ops[0].action.name(), "sendfile");
    let Action::Sendfile(many) = &ops[1].action else {
        panic!("{ops:?}")
    };
    assert_eq!((many.nfiles, many.chunk, many.count), (Some(4), None, 2));
    assert_eq!(ops[1].action.name(), "sendfilev");
    // The peer receives what is sent; it is the receiving side.
    assert_eq!(ops[1].action.mirror(), Action::ReceiveFiles(many.clone()));
    assert_eq!(ops[1].action.mirror().sends(), Some(false));
    // The TOML conversion says the same.
    converts_and_reads_back("files.xml", xml);
    let bad = |options: &str, protocol: &str| {
        let text = format!(
            r#"<profile name="b"><group><transaction iterations="1">
<flowop type="connect" options="remotehost=$h protocol={protocol}"/>
<flowop type="sendfilev" options="{options}"/></transaction></group></profile>"#
        );
        uperf::parse("b.xml", &text, &uperf_vars())
            .unwrap_err()
            .to_string()
    };
    assert!(bad("nfiles=2", "tcp").contains("sendfilev needs dir="));
    assert!(bad("dir=/d nfiles=65", "tcp").contains("nfiles '65' must be between 1 and 64"));
    assert!(bad("dir=/d", "udp").contains("needs a tcp or ssl connection"));
    // A group that another host runs cannot send the files of the host that read it.
    let remote = r#"
[[group]]
host = "10.0.0.9"
[[group.transaction]]
ops = [{ op = "connect" }, { op = "sendfile", dir = "/d" }]
"#;
    let err = toml_format::parse("r.toml", remote, &vars(&[])).unwrap_err();
    assert!(
        err.message
            .contains("cannot run in a group on host '10.0.0.9'"),
        "{err}"
    );
}

#[test]
fn groups_from_the_network_never_send_this_hosts_files() {
    let text = r#"
[[group]]
[[group.transaction]]
ops = [{ op = "connect" }, { op = "sendfile", dir = "/etc" }]
"#;
    let profile = toml_format::parse("p.toml", text, &vars(&[])).unwrap();
    let group = &profile.groups[0];
    assert!(budget::sends_no_files(&[group])
        .unwrap_err()
        .contains("would send this host's files"));
    // Its mirror receives, and is welcome.
    let mut mirror = group.clone();
    for op in mirror.transactions.iter_mut().flat_map(|t| &mut t.ops) {
        op.action = op.action.mirror();
    }
    assert!(budget::sends_no_files(&[&mirror]).is_ok());
    // A mirror's file list and files per send are bounded where they are read.
    let Action::ReceiveFiles(files) = &mut mirror.transactions[0].ops[1].action else {
        panic!()
    };
    files.files = vec![
        SendFile {
            path: "x".into(),
            size: 1
        };
        budget::MAX_SEND_FILES + 1
    ];
    assert!(budget::check(&[&mirror])
        .unwrap_err()
        .contains("files to choose from"));
}

/// uperf reads its options for every flowop and leaves out those a flowop does not use: a
/// sendfile with `nfiles` (sendfilev's option) runs, with a note, instead of being
/// refused.
#[test]
fn nfiles_on_a_sendfile_is_ignored_as_uperf_ignores_it_and_said_so() {
    let (profile, notes) = uperf::parse_noting(
        "send.xml",
        r#"<profile name="s"><group><transaction iterations="1">
<flowop type="connect" options="remotehost=127.0.0.1 protocol=tcp"/></transaction>
<transaction iterations="1">
<flowop type="sendfile" options="dir=/etc size=1 nfiles=4"/></transaction></group></profile>"#,
        &vars(&[]),
    )
    .unwrap();
    assert!(matches!(
        profile.groups[0].transactions[1].ops[0].action,
        Action::Sendfile(_)
    ));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("send.xml:4:") && notes[0].contains("nfiles on a sendfile is ignored"),
        "{notes:?}"
    );
}
