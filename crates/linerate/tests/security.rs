//! `linerate serve` on the open internet (docs/security.md): bounded requests, keys,
//! agents that dial no third party, limits that bind every kind of connection, and a log
//! that stays short under a flood.

mod common;
use common::*;
use linerate_proto::auth::{Challenge, ClientAuth, Key, Nonce, Role};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

fn healthy_test(server: &ServeProcess, extra: &[&str]) {
    let port = server.port.to_string();
    let mut args = vec!["stream", "127.0.0.1", "-p", &port, "-t", "0.5", "--json"];
    args.extend_from_slice(extra);
    let out = linerate(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(json(&out)["summary"]["receiver_bytes"].as_u64().unwrap() > 0);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// A key file with `text` in the test's scratch directory.
fn key_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("linerate-security-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn spec_with(interval: f64, parallel: u32, time: f64) -> serde_json::Value {
    serde_json::json!({"type": "spec", "config": {
        "protocol": "tcp", "target": "t", "port": 5201, "direction": "forward",
        "parallel": parallel, "threads": 1, "time_s": time, "omit_s": 0.0,
        "interval_s": interval, "length": 131072, "window": null, "mss": null,
        "nodelay": false, "congestion": null, "rate_bps": null, "per_flow": false,
        "connect_timeout_s": 5.0
    }})
}

fn hello(auth: Option<&ClientAuth>) -> Vec<u8> {
    let mut message = serde_json::json!({"type": "hello", "software": "test", "host": linerate_report::HostFacts::default()});
    if let Some(auth) = auth {
        message["nonce"] = auth.nonce_hex().into();
        message["pake"] = auth.pake_hex().into();
    }
    frame(message.to_string().as_bytes())
}

/// The next frame, opened with `seal`.
fn read_sealed(
    stream: &mut TcpStream,
    seal: &mut Option<linerate_proto::auth::ControlSeal>,
) -> serde_json::Value {
    let body =
        linerate_proto::auth::open_with(seal, read_frame_body(stream)).expect("a frame that opens");
    serde_json::from_slice(&body).expect("a JSON frame")
}

#[test]
fn a_too_short_interval_is_a_usage_error_and_a_refused_spec() {
    let out = linerate(&["stream", "-i", "1e-9", "-t", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'1e-9'"), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1);
    // A test no server would keep the readings of: told before connecting.
    let out = linerate(&["stream", "-P", "4096", "-t", "86000", "-i", "0.01"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("interval readings"),
        "{}",
        stderr(&out)
    );

    let server = ServeProcess::start(&["--max-tests", "8", "--max-duration", "30"]);
    for (spec, expect) in [
        (spec_with(1e-9, 1, 10.0), "interval"),
        (spec_with(0.01, 4096, 29.0), "interval readings"),
    ] {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(&preface(1)).unwrap();
        s.write_all(&hello(None)).unwrap();
        s.write_all(&frame(spec.to_string().as_bytes())).unwrap();
        let welcome = read_frame(&mut s);
        assert_eq!(welcome["type"], "welcome");
        let reply = read_frame(&mut s);
        assert_eq!(reply["type"], "refuse", "{reply}");
        assert!(
            reply["reason"].as_str().unwrap().contains(expect),
            "{reply}"
        );
    }
    let rss = rss_kib(server.pid());
    assert!(rss < 64 * 1024, "server RSS {rss} KiB after the attack");
    healthy_test(&server, &[]);
}

#[test]
fn silent_agent_connections_are_closed_at_the_handshake_deadline() {
    let server = ServeProcess::start(&["--handshake-timeout", "1"]);
    healthy_test(&server, &[]);
    let threads = server.thread_count();
    let mut preface = b"LINEAGNT".to_vec();
    preface.extend_from_slice(&linerate_proto::agent::AGENT_VERSION.to_be_bytes());
    let mut silent: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr()).unwrap();
            s.write_all(&preface).unwrap();
            s
        })
        .collect();
    let started = Instant::now();
    for s in &mut silent {
        let bytes = read_to_close(s);
        // At most an error frame, then the close.
        assert!(bytes.len() < 4096);
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "closed after {took:?} with a 1 s deadline"
    );
    let now = server.wait_threads(threads, Duration::from_secs(5));
    assert!(now <= threads, "{now} threads, {threads} before");
    assert!(server.wait_log("sent no hello", Duration::from_secs(2)));
}

/// A profile whose one group runs on `agent` and dials `remote`.
fn dialing_profile(name: &str, agent: &str, remote: &str) -> String {
    let path = key_file(
        name,
        &format!(
            "[[group]]\nhost = \"{agent}\"\nremote = \"{remote}\"\n[[group.transaction]]\nops = [{{ op = \"connect\" }}]\n[[group.transaction]]\nduration = \"1s\"\nops = [{{ op = \"write\", size = \"1k\" }}]\n"
        ),
    );
    path
}

#[test]
fn agents_dial_no_third_party() {
    let agent = ServeProcess::start(&[]);
    // An open port on another address, and a closed one.
    let open = TcpListener::bind("127.0.0.2:0").unwrap();
    open.set_nonblocking(true).unwrap();
    let open_addr = open.local_addr().unwrap().to_string();
    let closed_addr = {
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut refusals = Vec::new();
    for (name, remote) in [("open.toml", &open_addr), ("closed.toml", &closed_addr)] {
        let profile = dialing_profile(name, &agent.addr(), remote);
        let out = linerate(&["run", &profile, "--no-store", "--control-timeout", "5"]);
        assert_ne!(out.status.code(), Some(0));
        let text = stderr(&out).replace(remote.as_str(), "REMOTE");
        let error = text
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or_default()
            .to_string();
        assert!(
            error.contains("is not a linerate agent this agent may dial"),
            "{text}"
        );
        refusals.push(error);
    }
    assert_eq!(
        refusals[0], refusals[1],
        "the refusal tells an open port from a closed one"
    );
    match open.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the third party was dialed: {other:?}"),
    }
    assert!(agent.wait_log("not dialed", Duration::from_secs(2)));

    // An agent with a key dials named hosts, but one that is not a linerate agent with
    // the key (an open port that says nothing, a closed port) gets the same refusal.
    let key = key_file("agents.key", "the agents' shared key, 32 bytes");
    let keyed = ServeProcess::start(&["--key", &key]);
    let mut keyed_refusals = Vec::new();
    for (name, remote) in [("kopen.toml", &open_addr), ("kclosed.toml", &closed_addr)] {
        let profile = dialing_profile(name, &keyed.addr(), remote);
        let out = linerate(&["run", &profile, "--no-store", "--key", &key]);
        assert_ne!(out.status.code(), Some(0));
        let text = stderr(&out).replace(remote.as_str(), "REMOTE");
        keyed_refusals.push(
            text.lines()
                .find(|l| l.contains("error"))
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert_eq!(keyed_refusals[0], keyed_refusals[1]);
    assert_eq!(
        keyed_refusals[0],
        refusals[0].replace(&agent.addr(), &keyed.addr())
    );
}

#[test]
fn a_keyed_server_serves_only_holders_of_its_key() {
    let good = key_file("good.key", "a shared key for the lab, 32 bytes\n");
    let bad = key_file("bad.key", "another key, not the server's one\n");
    let server = ServeProcess::start(&["--key", &good]);
    healthy_test(&server, &["--key", &good]);
    // The key from the environment works as well.
    let port = server.port.to_string();
    let out = command()
        .env("LINERATE_KEY", &good)
        .args(["stream", "127.0.0.1", "-p", &port, "-t", "0.3", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    stream_refused(&port, &["-t", "0.3"], "requires a key");
    stream_refused(
        &port,
        &["-t", "0.3", "--key", &bad],
        "does not hold this key",
    );

    // A genuine handshake recorded, then replayed on a new connection: refused.
    let key = Key::from_file_contents(std::fs::read(&good).unwrap().as_slice()).unwrap();
    let mut auth = ClientAuth::new(&key, &Nonce([42; 32]));
    let mut recorded = preface(1);
    recorded.extend(hello(Some(&auth)));
    let mut genuine = TcpStream::connect(server.addr()).unwrap();
    genuine.write_all(&recorded).unwrap();
    let welcome = read_frame(&mut genuine);
    let challenge: Challenge = serde_json::from_value(welcome["auth"].clone()).unwrap();
    let (proof, keys) = auth
        .answer(&challenge, b"linerate control v1")
        .expect("the server proves the key");
    let mut seal = Some(keys.seal_for(Role::Client));
    let mut rest = frame(
        serde_json::json!({"type": "auth", "proof": proof})
            .to_string()
            .as_bytes(),
    );
    rest.extend(linerate_proto::auth::encode_with(
        &mut seal,
        &spec_with(1.0, 1, 1.0),
    ));
    genuine.write_all(&rest).unwrap();
    let accepted = read_sealed(&mut genuine, &mut seal);
    assert_eq!(accepted["type"], "accepted", "{accepted}");
    recorded.extend(rest);
    let mut replay = TcpStream::connect(server.addr()).unwrap();
    replay.write_all(&recorded).unwrap();
    let _welcome = read_frame(&mut replay);
    let reply = read_frame(&mut replay);
    assert_eq!(reply["type"], "refuse", "{reply}");
    assert_eq!(reply["code"], "unauthorized", "{reply}");
    assert!(server.wait_line(
        &["refused 127.0.0.1:", "does not match"],
        Duration::from_secs(3)
    ));
    drop(genuine);

    // Agents too: a profile run with the key, and without it.
    let profile = key_file(
        "keyed.toml",
        &format!(
            "[[group]]\nhost = \"{}\"\n[[group.transaction]]\nops = [{{ op = \"connect\" }}]\n[[group.transaction]]\nduration = \"1s\"\nops = [{{ op = \"write\", size = \"1k\" }}]\n",
            server.addr()
        ),
    );
    let out = linerate(&["run", &profile, "--no-store", "--key", &good]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = linerate(&["run", &profile, "--no-store"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("requires a key"), "{}", stderr(&out));
    healthy_test(&server, &["--key", &good]);
}

#[test]
fn a_connection_flood_is_capped_and_others_are_still_served() {
    assert!(
        raise_descriptor_limit(12_000),
        "this test needs 12000 descriptors (ulimit -Hn)"
    );
    // A handshake deadline far past the test's bounds: whatever is closed was closed for
    // the cap.
    let server = ServeProcess::start(&["--max-connections", "1000", "--handshake-timeout", "300"]);
    let target: SocketAddr = server.addr().parse().unwrap();
    let source: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let started = Instant::now();
    let mut flood = Vec::with_capacity(5000);
    for _ in 0..5000 {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.bind(&source.into()).unwrap();
        socket
            .connect_timeout(&target.into(), Duration::from_secs(5))
            .unwrap();
        let stream: TcpStream = socket.into();
        stream
            .set_read_timeout(Some(Duration::from_millis(1)))
            .unwrap();
        flood.push(stream);
    }
    // Those beyond the cap are closed as soon as the acceptor reaches them (on a busy
    // machine the backlog takes a while to drain), and no more than those.
    let mut open: Vec<bool> = vec![true; flood.len()];
    let mut closed = 0;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        for (s, open) in flood.iter_mut().zip(open.iter_mut()) {
            let mut byte = [0u8; 1];
            if *open && matches!(s.read(&mut byte), Ok(0)) {
                *open = false;
                closed += 1;
            }
        }
        if closed >= 3900 || Instant::now() >= until {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    for (s, open) in flood.iter_mut().zip(open.iter_mut()) {
        let mut byte = [0u8; 1];
        if *open && matches!(s.read(&mut byte), Ok(0)) {
            closed += 1;
        }
    }
    assert!(
        (3900..=4100).contains(&closed),
        "{closed} of 5000 closed, with a cap of 1000"
    );
    // A client from another address still runs a test.
    healthy_test(&server, &[]);
    let lines = server
        .log()
        .lines()
        .filter(|l| l.contains("refused"))
        .count();
    // At most 5 refusal lines and one count of the rest per second of the flood (a busy
    // machine stretches the flood over more seconds, not the lines per second).
    let seconds = started.elapsed().as_secs_f64().ceil() + 1.0;
    assert!(
        (lines as f64) <= 6.0 * seconds,
        "{lines} refusal lines for a flood of {seconds} s:\n{}",
        server.log()
    );
    drop(flood);
}

#[test]
fn iperf3_clients_are_bound_by_max_duration_and_authenticate() {
    if !have(
        "iperf3",
        "iperf3_clients_are_bound_by_max_duration_and_authenticate",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("linerate-rsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let private = dir.join("private.pem");
    let public = dir.join("public.pem");
    let made = Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&private)
        .arg("2048")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
        && Command::new("openssl")
            .args(["rsa", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
    assert!(made, "openssl makes the test's RSA keys");
    let users = dir.join("users.csv");
    std::fs::write(
        &users,
        format!(
            "# iperf3 users\nmario,{}\n",
            linerate_proto::iperf3::auth::password_hash("mario", "rossi")
        ),
    )
    .unwrap();
    // Debian's iperf3 (before 3.17) pads with PKCS #1 v1.5: a server that takes only
    // OAEP, as 3.17+ pads, refuses it and says why in its log.
    let strict = ServeProcess::start(&[
        "--rsa-private-key-path",
        private.to_str().unwrap(),
        "--authorized-users-path",
        users.to_str().unwrap(),
    ]);
    let strict_port = strict.port.to_string();
    let out = Command::new("iperf3")
        .env("IPERF3_PASSWORD", "rossi")
        .args([
            "-c",
            "127.0.0.1",
            "-p",
            &strict_port,
            "--username",
            "mario",
            "-t",
            "1",
        ])
        .arg("--rsa-public-key-path")
        .arg(&public)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(strict.wait_line(&["refused", "cannot be decrypted"], Duration::from_secs(3)));
    let server = ServeProcess::start(&[
        "--max-duration",
        "30",
        "--max-flows",
        "8",
        "--rsa-private-key-path",
        private.to_str().unwrap(),
        "--authorized-users-path",
        users.to_str().unwrap(),
        "--rsa-pkcs1-padding",
    ]);
    let port = server.port.to_string();
    let client = |password: &str, extra: &[&str]| {
        Command::new("iperf3")
            .env("IPERF3_PASSWORD", password)
            .args(["-c", "127.0.0.1", "-p", &port, "--username", "mario"])
            .arg("--rsa-public-key-path")
            .arg(&public)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = client("rossi", &["-t", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = client("wrong", &["-t", "1"]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("authorization failed"), "{text}");
    // Over --max-flows: refused with iperf3's stream-count error.
    let out = client("rossi", &["-t", "1", "-P", "9"]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("parallel streams too large"), "{text}");
    // Over --max-duration: refused with iperf3's duration error, at once.
    let started = Instant::now();
    let out = client("rossi", &["-t", "40"]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("test duration too long"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(server.wait_line(&["refused", "40 s asked"], Duration::from_secs(2)));
    // A client without credentials is refused as well.
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port, "-t", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn max_rate_binds_native_and_iperf3_clients() {
    let server = ServeProcess::start(&["--max-rate", "200M", "--max-rate-per-ip", "300M"]);
    let port = server.port.to_string();
    stream_refused(&port, &["-t", "0.5"], "unpaced");
    stream_refused(
        &port,
        &["-t", "0.5", "-b", "150M", "-P", "2"],
        "300 Mbits/sec asked",
    );
    healthy_test(&server, &["-b", "50M", "-P", "2"]);
    assert!(server.wait_line(&["refused 127.0.0.1:", "unpaced"], Duration::from_secs(2)));
}

#[test]
fn iperf3_clients_are_bound_by_max_rate() {
    if !have("iperf3", "iperf3_clients_are_bound_by_max_rate") {
        return;
    }
    let server = ServeProcess::start(&["--max-rate", "200M"]);
    let port = server.port.to_string();
    let run = |extra: &[&str]| {
        Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", &port, "-t", "1"])
            .args(extra)
            .output()
            .unwrap()
    };
    let unlimited = run(&[]);
    assert!(!unlimited.status.success());
    assert!(server.wait_line(&["refused", "unlimited rate"], Duration::from_secs(2)));
    assert!(run(&["-b", "100M"]).status.success());
    assert!(!run(&["-b", "150M", "-P", "2"]).status.success());
}

/// An agent connection with a mirror running: the group host's side of the protocol by
/// hand, so the test can send what a hostile group host would. The mirror accepts one UDP
/// flow per thread and writes to it for `seconds`.
fn hostile_mirror(server: &ServeProcess, threads: u32, seconds: u32) -> (TcpStream, String, u16) {
    let text = format!(
        "[[group]]\nthreads = {threads}\n[[group.transaction]]\nops = [{{ op = \"connect\", protocol = \"udp\" }}]\n[[group.transaction]]\nduration = \"{seconds}s\"\nops = [{{ op = \"read\", size = \"1400\" }}]\n"
    );
    let profile = linerate_profile::parse("hostile.toml", &text, &Default::default())
        .expect("profile")
        .profile;
    let mut group = profile.groups[0].clone();
    for op in group.transactions.iter_mut().flat_map(|t| &mut t.ops) {
        op.action = op.action.mirror();
    }
    let spec = linerate_proto::agent::MirrorSpec {
        group,
        dial_back: None,
        limit_s: linerate_proto::agent::Seconds::new(f64::from(seconds) + 5.0).unwrap(),
    };
    let mut link = TcpStream::connect(server.addr()).unwrap();
    let mut opening =
        linerate_proto::agent::agent_preface(linerate_proto::agent::AGENT_VERSION).to_vec();
    opening.extend(frame(br#"{"type":"hello"}"#));
    let request = linerate_proto::agent::AgentRequest::Mirror {
        spec: Box::new(spec),
    };
    opening.extend(frame(serde_json::to_string(&request).unwrap().as_bytes()));
    link.write_all(&opening).unwrap();
    let welcome = read_frame(&mut link);
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    let ready = read_frame(&mut link);
    assert_eq!(ready["type"], "mirror_ready", "{ready}");
    let token = ready["token"].as_str().unwrap().to_string();
    let port = ready["udp_port"].as_u64().unwrap() as u16;
    (link, token, port)
}

/// Counts the datagrams and bytes that reach `socket` until nothing came for `quiet`.
fn received(socket: &std::net::UdpSocket, quiet: Duration) -> (u64, u64) {
    socket.set_read_timeout(Some(quiet)).unwrap();
    let (mut count, mut bytes) = (0, 0);
    let mut buf = [0u8; 65536];
    while let Ok(n) = socket.recv(&mut buf) {
        count += 1;
        bytes += n as u64;
    }
    (count, bytes)
}

/// A mirror's UDP hello once turned one forged 28-byte datagram into 169 MB sent to the
/// forged source. The victim here sends the hello from its own socket: on the wire that
/// is the same datagram as one forged with its address, and the victim never answers.
#[test]
fn a_mirror_sends_nothing_to_an_address_that_did_not_prove_it_receives_there() {
    let server = ServeProcess::start(&[]);
    let (link, token, port) = hostile_mirror(&server, 2, 4);
    let token = linerate_proto::Token::from_hex(&token).unwrap();
    let rendezvous: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let hello = linerate_proto::preface::data_preface(token, 0);

    // The control connection's own host, a port that never answers the cookie: it gets
    // the cookie only, no larger than the hello.
    let victim = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..5 {
        victim.send_to(&hello, rendezvous).unwrap();
    }
    let (count, bytes) = received(&victim, Duration::from_secs(2));
    assert!(
        count <= 5 && bytes <= 5 * hello.len() as u64,
        "{count} datagrams, {bytes} bytes to an address that never proved itself"
    );
    // Another host: nothing at all.
    let elsewhere = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    elsewhere.send_to(&hello, rendezvous).unwrap();
    assert_eq!(received(&elsewhere, Duration::from_secs(1)), (0, 0));

    // A spray of 30,000 hellos leaves the server's descriptors where they were, and a
    // test from another client runs meanwhile.
    let baseline = server.open_fds();
    let sprayer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let spray = std::thread::spawn(move || {
        for flow in 0..30_000u32 {
            let hello = linerate_proto::preface::data_preface(token, flow);
            let _ = sprayer.send_to(&hello, rendezvous);
        }
    });
    healthy_test(&server, &[]);
    spray.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let now = server.open_fds();
    assert!(
        now <= baseline + 100,
        "{now} descriptors after the spray, {baseline} before"
    );

    // A genuine flow still opens: the hello, its cookie back, then the mirror's data.
    let genuine = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    genuine
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let flow1 = linerate_proto::preface::data_preface(token, 1 << 12);
    genuine.send_to(&flow1, rendezvous).unwrap();
    let mut buf = [0u8; 2048];
    let n = genuine.recv(&mut buf).expect("a cookie");
    let cookie =
        linerate_proto::address_check::parse_challenge(&buf[..n], 1 << 12).expect("a challenge");
    let proven = linerate_proto::address_check::validated_hello(&flow1, &cookie);
    genuine.send_to(&proven, rendezvous).unwrap();
    let (count, _) = received(&genuine, Duration::from_secs(1));
    assert!(count > 10, "the proven flow got {count} datagrams");
    drop(link);
}

/// An agent connection past its hello, from 127.0.0.1.
fn agent_link(server: &ServeProcess) -> TcpStream {
    let mut link = TcpStream::connect(server.addr()).unwrap();
    let mut opening =
        linerate_proto::agent::agent_preface(linerate_proto::agent::AGENT_VERSION).to_vec();
    opening.extend(frame(br#"{"type":"hello"}"#));
    link.write_all(&opening).unwrap();
    let welcome = read_frame(&mut link);
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    link
}

fn send_request(link: &mut TcpStream, request: &linerate_proto::agent::AgentRequest) {
    link.write_all(&frame(serde_json::to_string(request).unwrap().as_bytes()))
        .unwrap();
}

/// The next reply that is not a heartbeat.
fn agent_reply(link: &mut TcpStream) -> serde_json::Value {
    loop {
        let reply = read_frame(link);
        if reply["type"] != "heartbeat" {
            return reply;
        }
    }
}

fn group_of(
    threads: u32,
    transactions: Vec<linerate_profile::Transaction>,
) -> linerate_profile::Group {
    linerate_profile::Group {
        name: "g".into(),
        threads,
        host: None,
        transactions,
    }
}

fn transaction(ops: Vec<linerate_profile::Action>) -> linerate_profile::Transaction {
    linerate_profile::Transaction {
        repeat: linerate_profile::Repeat::Iterations(1),
        rate: None,
        ops: ops
            .into_iter()
            .map(|action| linerate_profile::Op { conn: None, action })
            .collect(),
    }
}

/// Requests that once grew an agent to gigabytes, aborted it or spawned threads until
/// EAGAIN: each refused naming its bound, the server small, a test right after.
#[test]
fn oversized_agent_requests_are_refused_and_the_server_stays_small() {
    use linerate_profile::{Action, Think};
    let server = ServeProcess::start(&[]);
    let nothing = || transaction(vec![]);
    let think = |seconds: f64| {
        transaction(vec![Action::Think(Think {
            seconds,
            busy: false,
        })])
    };
    let cases: Vec<(&str, Vec<linerate_profile::Group>)> = vec![
        (
            "transactions and operations",
            vec![group_of(16, vec![nothing(); 20_000])],
        ),
        (
            "transactions and operations",
            vec![group_of(1, vec![transaction(vec![Action::Nop; 20_000])])],
        ),
        ("groups", vec![group_of(1, vec![nothing()]); 5_000]),
        ("think", vec![group_of(1, vec![think(1e300)])]),
        ("think", vec![group_of(1, vec![think(-1.0)])]),
    ];
    for (needle, groups) in cases {
        let mut link = agent_link(&server);
        let parts = groups
            .into_iter()
            .enumerate()
            .map(|(index, group)| linerate_proto::agent::GroupPart {
                index,
                host_label: "h".into(),
                group,
            })
            .collect();
        send_request(
            &mut link,
            &linerate_proto::agent::AgentRequest::Prepare {
                parts,
                limit_s: linerate_proto::agent::Seconds::new(10.0).unwrap(),
            },
        );
        let reply = agent_reply(&mut link);
        assert_eq!(reply["type"], "error", "{reply}");
        assert!(
            reply["reason"].as_str().unwrap().contains(needle),
            "{reply}"
        );
    }
    // A mirror of 4,096 threads with 256 KiB messages: 2 GiB of buffers.
    let mut link = agent_link(&server);
    let write = Action::Write(linerate_profile::Transfer {
        size: linerate_profile::Size::Fixed(256 * 1024),
        rsize: None,
        count: 1,
        last: None,
        rate: None,
        canfail: false,
    });
    let spec = linerate_proto::agent::MirrorSpec {
        group: group_of(4096, vec![transaction(vec![write])]),
        dial_back: None,
        limit_s: linerate_proto::agent::Seconds::new(10.0).unwrap(),
    };
    send_request(
        &mut link,
        &linerate_proto::agent::AgentRequest::Mirror {
            spec: Box::new(spec),
        },
    );
    let reply = agent_reply(&mut link);
    assert!(
        reply["reason"].as_str().unwrap_or("").contains("MiB"),
        "{reply}"
    );
    let rss = rss_kib(server.pid());
    assert!(rss < 256 * 1024, "server RSS {rss} KiB");
    healthy_test(&server, &[]);
}

/// A thousand threads prepared to start in 20 s, then the connection closed: they once
/// slept on whatever start they were given.
#[test]
fn prepared_threads_end_when_their_connection_closes_before_the_start() {
    use linerate_profile::{Action, Think};
    let server = ServeProcess::start(&[]);
    healthy_test(&server, &[]);
    let threads = server.thread_count();
    let mut link = agent_link(&server);
    let group = group_of(
        1000,
        vec![transaction(vec![Action::Think(Think {
            seconds: 0.001,
            busy: false,
        })])],
    );
    let parts = vec![linerate_proto::agent::GroupPart {
        index: 0,
        host_label: "h".into(),
        group,
    }];
    send_request(
        &mut link,
        &linerate_proto::agent::AgentRequest::Prepare {
            parts,
            limit_s: linerate_proto::agent::Seconds::new(30.0).unwrap(),
        },
    );
    let reply = agent_reply(&mut link);
    assert_eq!(reply["type"], "prepared", "{reply}");
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    send_request(
        &mut link,
        &linerate_proto::agent::AgentRequest::Start {
            at_unix_ns: now_ns + 20_000_000_000,
        },
    );
    // The threads exist and wait for the start.
    let until = Instant::now() + Duration::from_secs(5);
    while server.thread_count() < threads + 1000 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        server.thread_count() >= threads + 1000,
        "{} threads",
        server.thread_count()
    );
    drop(link);
    let now = server.wait_threads(threads, Duration::from_secs(5));
    assert!(
        now <= threads,
        "{now} threads 5 s after the connection closed, {threads} before"
    );
    healthy_test(&server, &[]);
}

/// Which way a relayed frame goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    ToServer,
    ToClient,
}

type Rewrite = std::sync::Arc<dyn Fn(Way, Vec<u8>) -> Vec<u8> + Send + Sync>;

/// Copies frames from `from` to `to`, each through `rewrite`.
fn relay_frames(mut from: TcpStream, mut to: TcpStream, way: Way, rewrite: Rewrite) {
    loop {
        let mut len = [0u8; 4];
        if from.read_exact(&mut len).is_err() {
            let _ = to.shutdown(std::net::Shutdown::Write);
            return;
        }
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        if from.read_exact(&mut body).is_err() {
            return;
        }
        if to.write_all(&frame(&rewrite(way, body))).is_err() {
            return;
        }
    }
}

/// A relay in front of `server`, as an attacker on the path runs one: data connections
/// pass as they are; on native control and copy connections every frame, each way, goes
/// through `rewrite`.
fn relay(
    server: SocketAddr,
    rewrite: Rewrite,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let stop = done.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            let Ok((mut client, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            client.set_nonblocking(false).unwrap();
            let mut upstream = TcpStream::connect(server).unwrap();
            let rewrite = rewrite.clone();
            std::thread::spawn(move || {
                let mut magic = [0u8; 8];
                if client.read_exact(&mut magic).is_err() {
                    return;
                }
                upstream.write_all(&magic).unwrap();
                let framed = &magic == b"LINERATE" || &magic == b"LINECOPY";
                if framed {
                    let mut version = [0u8; 4];
                    if client.read_exact(&mut version).is_err() {
                        return;
                    }
                    upstream.write_all(&version).unwrap();
                }
                let (back_from, back_to) =
                    (upstream.try_clone().unwrap(), client.try_clone().unwrap());
                if framed {
                    let back = rewrite.clone();
                    std::thread::spawn(move || {
                        relay_frames(back_from, back_to, Way::ToClient, back)
                    });
                    relay_frames(client, upstream, Way::ToServer, rewrite);
                } else {
                    let (mut back_from, mut back_to) = (back_from, back_to);
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut back_from, &mut back_to);
                    });
                    let _ = std::io::copy(&mut client, &mut upstream);
                }
            });
        }
    });
    (port, done)
}

/// A frame's JSON, when it is JSON (a sealed frame is not).
fn json_of(body: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(body).ok()
}

/// A relay that rewrote the rate a test declares once let 299 Mbit/s through
/// `--max-rate-per-ip 10M`: the bytes measured bind, not the declaration.
#[test]
fn a_rate_rewritten_on_the_way_is_cut_to_the_limit() {
    let server = ServeProcess::start(&["--max-rate-per-ip", "10M"]);
    let rewrite: Rewrite = std::sync::Arc::new(|way, body| match json_of(&body) {
        Some(mut message) if way == Way::ToServer && message["type"] == "spec" => {
            message["config"]["rate_bps"] = serde_json::json!(5_000_000u64);
            serde_json::to_vec(&message).unwrap()
        }
        _ => body,
    });
    let (port, done) = relay(server.addr().parse().unwrap(), rewrite);
    let port = port.to_string();
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &port,
        "-b",
        "200M",
        "-t",
        "4",
        "--json",
    ]);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let text = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(0),
        "the test ran to its end: {text}"
    );
    assert!(text.contains("max-rate-per-ip"), "{text}");
    assert!(server.wait_line(
        &["refused 127.0.0.1:", "its share of --max-rate-per-ip"],
        Duration::from_secs(3)
    ));
    healthy_test(&server, &["-b", "5M"]);
}

/// Agents once ignored `--require-tls` and `--max-rate`: a profile run is a session like
/// any other.
#[test]
fn agent_work_is_bound_by_require_tls_and_max_rate() {
    let profile = |name: &str, server: &ServeProcess, connect: &str, write: &str| {
        key_file(
            name,
            &format!(
                "[[group]]\nhost = \"{}\"\n[[group.transaction]]\nops = [{{ op = \"connect\", {connect} }}]\n[[group.transaction]]\nduration = \"1s\"\nops = [{{ op = \"write\", {write} }}]\n",
                server.addr()
            ),
        )
    };
    let tls_only = ServeProcess::start(&["--require-tls"]);
    let plain = profile(
        "plain.toml",
        &tls_only,
        "protocol = \"tcp\"",
        "size = \"1k\"",
    );
    let out = linerate(&["run", &plain, "--no-store"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("--require-tls"), "{}", stderr(&out));
    let ssl = profile("ssl.toml", &tls_only, "protocol = \"ssl\"", "size = \"1k\"");
    let out = linerate(&["run", &ssl, "--no-store"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let limited = ServeProcess::start(&["--max-rate", "10M"]);
    let unpaced = profile(
        "unpaced.toml",
        &limited,
        "protocol = \"tcp\"",
        "size = \"1k\"",
    );
    let out = linerate(&["run", &unpaced, "--no-store"]);
    assert!(stderr(&out).contains("unpaced"), "{}", stderr(&out));
    let fast = profile(
        "fast.toml",
        &limited,
        "protocol = \"tcp\"",
        "size = \"64k\", rate = 1000",
    );
    let out = linerate(&["run", &fast, "--no-store"]);
    assert!(
        stderr(&out).contains("over this server's"),
        "{}",
        stderr(&out)
    );
    let slow = profile(
        "slow.toml",
        &limited,
        "protocol = \"tcp\"",
        "size = \"1k\", rate = 100",
    );
    let out = linerate(&["run", &slow, "--no-store"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The passphrase the keyed tests below use: the kind people choose.
const CHOSEN: &str = "summer2026!lab-key";

/// Whether `guess` is confirmed by `challenge` (recorded or provoked) in any way an
/// attacker holding the guess could check offline: finishing SPAKE2 against the server's
/// message, or the proof of the scheme before it (a MAC of the nonces under the key).
fn confirms(guess: &str, challenge: &Challenge, client_nonce: &str) -> bool {
    let key = Key::from_file_contents(guess.as_bytes()).unwrap();
    let mut attacker = ClientAuth::new(&key, &Nonce([77; 32]));
    let finishes = attacker.answer(challenge, b"linerate control v1").is_ok();
    let old = blake3::Hasher::new_keyed(&blake3::derive_key(
        "linerate 2026-11 shared key for control and agent connections",
        guess.as_bytes(),
    ))
    .update(b"linerate server proof\0")
    .update(&Nonce::from_hex(client_nonce).unwrap().0)
    .update(&Nonce::from_hex(&challenge.nonce).unwrap().0)
    .finalize();
    finishes || old.to_hex().as_str() == challenge.proof
}

/// An offline dictionary that holds the key cannot confirm it from a recorded or a
/// provoked handshake; what follows the handshake is sealed, and a relay that changes a
/// byte of it ends the session instead of steering it.
#[test]
fn a_handshake_gives_nothing_to_guess_against_and_the_channel_after_it_is_sealed() {
    let key_path = key_file("chosen.key", CHOSEN);
    let files =
        std::env::temp_dir().join(format!("linerate-security-files-{}", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    let server = ServeProcess::start(&["--key", &key_path, "--files", files.to_str().unwrap()]);
    let recorded = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(Way, Vec<u8>)>::new()));
    let log = recorded.clone();
    let recording: Rewrite = std::sync::Arc::new(move |way, body| {
        log.lock().unwrap().push((way, body.clone()));
        body
    });
    let (port, done) = relay(server.addr().parse().unwrap(), recording);
    let port = port.to_string();
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &port,
        "--key",
        &key_path,
        "-t",
        "0.5",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let frames = recorded.lock().unwrap().clone();
    let recorded_hello =
        json_of(&frames.iter().find(|(w, _)| *w == Way::ToServer).unwrap().1).unwrap();
    let welcome = json_of(&frames.iter().find(|(w, _)| *w == Way::ToClient).unwrap().1).unwrap();
    let genuine: Challenge = serde_json::from_value(welcome["auth"].clone()).unwrap();
    // The welcome, sent before the client proved anything, tells nothing of the host.
    for field in ["hostname", "kernel", "cpu_model"] {
        assert_eq!(welcome["host"][field], "", "{welcome}");
    }
    // After the hello, the welcome and the proof, nothing on the wire reads.
    let readable: Vec<String> = frames
        .iter()
        .filter_map(|(_, body)| json_of(body))
        .map(|m| m["type"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(readable, ["hello", "welcome", "auth"], "{readable:?}");

    // A provoked handshake: the attacker's own hello (its scalar bound to one guess).
    let mut provoker = ClientAuth::new(
        &Key::from_file_contents(b"the attacker's single online guess").unwrap(),
        &Nonce([5; 32]),
    );
    let mut direct = TcpStream::connect(server.addr()).unwrap();
    let mut opening = preface(1);
    opening.extend(hello(Some(&provoker)));
    direct.write_all(&opening).unwrap();
    let provoked: Challenge =
        serde_json::from_value(read_frame(&mut direct)["auth"].clone()).unwrap();
    assert!(provoker.answer(&provoked, b"linerate control v1").is_err());
    drop(direct);

    let dictionary = [
        "password-password",
        "letmein-letmein!",
        CHOSEN,
        "summer2025!lab-key",
    ];
    let client_nonce = recorded_hello["nonce"].as_str().unwrap();
    let confirmed: Vec<&str> = dictionary
        .into_iter()
        .filter(|guess| {
            confirms(guess, &genuine, client_nonce)
                || confirms(guess, &provoked, &provoker.nonce_hex())
        })
        .collect();
    assert!(confirmed.is_empty(), "confirmed offline: {confirmed:?}");

    // A copy with --encrypt through the relay: the option never crosses in the clear.
    let source = files.join("source.bin");
    std::fs::write(&source, vec![7u8; 300_000]).unwrap();
    recorded.lock().unwrap().clear();
    let copied = linerate(&[
        "copy",
        "-p",
        &port,
        "--key",
        &key_path,
        "--encrypt",
        "--json",
        "-q",
        source.to_str().unwrap(),
        "127.0.0.1:copied.bin",
    ]);
    assert_eq!(copied.status.code(), Some(0), "{}", stderr(&copied));
    assert_eq!(json(&copied)["copy"]["encrypted"], true);
    let seen = recorded.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|(_, body)| body.windows(7).any(|w| w == b"encrypt")),
        "the copy's options crossed in the clear"
    );
    done.store(true, std::sync::atomic::Ordering::Relaxed);

    // A relay that changes one bit of the first sealed frame each way ends the session.
    let tampering: Rewrite = std::sync::Arc::new(|_, mut body| {
        if json_of(&body).is_none() && !body.is_empty() {
            body[0] ^= 0x20;
        }
        body
    });
    let (tamper_port, done) = relay(server.addr().parse().unwrap(), tampering);
    let tamper_port = tamper_port.to_string();
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &tamper_port,
        "--key",
        &key_path,
        "-t",
        "0.5",
    ]);
    assert_ne!(out.status.code(), Some(0));
    let copied = linerate(&[
        "copy",
        "-p",
        &tamper_port,
        "--key",
        &key_path,
        "--encrypt",
        "-q",
        source.to_str().unwrap(),
        "127.0.0.1:tampered.bin",
    ]);
    assert_ne!(copied.status.code(), Some(0));
    assert!(!files.join("tampered.bin").exists());
    assert!(
        server.wait_log("did not open", Duration::from_secs(3)),
        "{}",
        server.log()
    );
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = std::fs::remove_dir_all(&files);
}

/// Online guessing is all a PAKE leaves: ten failed proofs from one client within a
/// minute, and it is refused at once, the right key included (other clients are not:
/// the book is per client, access.rs's unit test).
#[test]
fn failed_proofs_block_a_client_for_a_while() {
    let good = key_file("guessed.key", "the key being guessed online, 32 b");
    let server = ServeProcess::start(&["--key", &good]);
    let port = server.port.to_string();
    for i in 0..10 {
        let guess = key_file(
            &format!("guess{i}.key"),
            &format!("guess number {i} of many"),
        );
        let out = linerate(&[
            "stream",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "0.2",
            "--key",
            &guess,
        ]);
        assert_ne!(out.status.code(), Some(0));
    }
    // A second's pause: the guesses' refusal lines filled the log's window (five a
    // second), and the line this test reads must not be one of those only counted.
    std::thread::sleep(Duration::from_millis(1200));
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "0.2",
        "--key",
        &good,
    ]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "the eleventh attempt was let in"
    );
    assert!(server.wait_line(
        &["refused 127.0.0.1:", "failed proofs"],
        Duration::from_secs(3)
    ));
}

/// A peer may not make `linerate serve` send its files: a prepared group or a mirror
/// holding a sendfile of /etc/hostname is refused, naming why, and the server serves on.
#[test]
fn an_agent_never_sends_its_files_on_a_peers_word() {
    use linerate_profile::{Action, Endpoint, FileSend, Protocol, SendFile};
    let server = ServeProcess::start(&[]);
    let connect = Action::Connect(Endpoint {
        protocol: Protocol::Tcp,
        remote: None,
        window: None,
        nodelay: false,
        congestion: None,
        cipher: None,
        engine: None,
        marks: None,
        source: None,
    });
    let sendfile = Action::Sendfile(FileSend {
        dir: "/etc".into(),
        files: vec![SendFile {
            path: "/etc/hostname".into(),
            size: 1,
        }],
        nfiles: None,
        chunk: None,
        count: 1,
        canfail: false,
    });
    let group = group_of(1, vec![transaction(vec![connect, sendfile])]);
    let mut link = agent_link(&server);
    send_request(
        &mut link,
        &linerate_proto::agent::AgentRequest::Prepare {
            parts: vec![linerate_proto::agent::GroupPart {
                index: 0,
                host_label: "h".into(),
                group: group.clone(),
            }],
            limit_s: linerate_proto::agent::Seconds::new(10.0).unwrap(),
        },
    );
    let reply = agent_reply(&mut link);
    assert_eq!(reply["type"], "error", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains("would send this host's files"),
        "{reply}"
    );
    let mut link = agent_link(&server);
    let spec = linerate_proto::agent::MirrorSpec {
        group,
        dial_back: None,
        limit_s: linerate_proto::agent::Seconds::new(10.0).unwrap(),
    };
    send_request(
        &mut link,
        &linerate_proto::agent::AgentRequest::Mirror {
            spec: Box::new(spec),
        },
    );
    let reply = agent_reply(&mut link);
    assert!(
        reply["reason"]
            .as_str()
            .unwrap_or("")
            .contains("would send this host's files"),
        "{reply}"
    );
    healthy_test(&server, &[]);
}

/// An agent connection does one piece of work at a time: while it serves RPM, a second
/// RPM server, a prepare and a mirror are refused on it (the place it holds stays one),
/// and a start with nothing prepared is refused instead of running nothing; the server
/// serves others meanwhile.
#[test]
fn an_agent_connection_takes_one_piece_of_work_at_a_time() {
    use linerate_proto::agent::{AgentRequest, MirrorSpec};
    let server = ServeProcess::start(&[]);
    let mut link = agent_link(&server);
    let serve = AgentRequest::RpmServe {
        limit_s: linerate_proto::agent::Seconds::new(20.0).unwrap(),
        tls: false,
    };
    send_request(&mut link, &serve);
    let ready = agent_reply(&mut link);
    assert_eq!(ready["type"], "rpm_ready", "{ready}");
    let group = group_of(1, vec![transaction(vec![])]);
    for request in [
        serve,
        AgentRequest::Prepare {
            parts: Vec::new(),
            limit_s: linerate_proto::agent::Seconds::new(10.0).unwrap(),
        },
        AgentRequest::Mirror {
            spec: Box::new(MirrorSpec {
                group,
                dial_back: None,
                limit_s: linerate_proto::agent::Seconds::new(10.0).unwrap(),
            }),
        },
    ] {
        send_request(&mut link, &request);
        let reply = agent_reply(&mut link);
        assert_eq!(reply["type"], "error", "{reply}");
        assert!(
            reply["reason"]
                .as_str()
                .unwrap_or("")
                .contains("this connection already has work"),
            "{reply}"
        );
    }
    let mut fresh = agent_link(&server);
    send_request(&mut fresh, &AgentRequest::Start { at_unix_ns: 0 });
    let reply = agent_reply(&mut fresh);
    assert_eq!(reply["type"], "error", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap_or("")
            .contains("nothing is prepared"),
        "{reply}"
    );
    healthy_test(&server, &[]);
}
