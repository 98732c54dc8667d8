//! `linerate serve` under bad input and broken peers: it logs, frees the test's resources
//! and keeps serving others.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn healthy_test(server: &ServeProcess) {
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &server.port.to_string(),
        "-t",
        "0.5",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = json(&out);
    assert!(
        doc["summary"]["receiver_bytes"].as_u64().unwrap() > 0,
        "{doc}"
    );
}

#[test]
fn hostile_input_is_refused_and_the_server_keeps_serving() {
    let server = ServeProcess::start(&["--handshake-timeout", "1"]);
    healthy_test(&server);
    let baseline = server.wait_fds(server.open_fds(), Duration::from_millis(200));
    let threads = server.thread_count();

    // Garbage instead of a preface.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    read_to_close(&mut s);
    assert!(
        server.wait_log("not a linerate client", Duration::from_secs(3)),
        "{}",
        server.log()
    );

    // A length prefix over 1 MiB: refused with a reason, before any body is buffered.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(&preface(1)).unwrap();
    s.write_all(&(4u32 << 20).to_be_bytes()).unwrap();
    let reply = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(reply.contains("over the limit"), "{reply}");

    // Malformed JSON in a well-formed frame.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(&preface(1)).unwrap();
    s.write_all(&frame(b"{\"type\":\"hello\",")).unwrap();
    let reply = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(reply.contains("malformed"), "{reply}");

    // A truncated frame, then the peer goes away.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(&preface(1)).unwrap();
    s.write_all(&frame(b"{\"type\":\"hello\"}")[..10]).unwrap();
    drop(s);

    // A data connection with a token no test has.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let mut data = b"LINEDATA".to_vec();
    data.extend_from_slice(&[0xAB; 16]);
    data.extend_from_slice(&0u32.to_be_bytes());
    s.write_all(&data).unwrap();
    read_to_close(&mut s);
    assert!(
        server.wait_log("unknown test token", Duration::from_secs(3)),
        "{}",
        server.log()
    );

    // A peer that connects and says nothing, and one that stops after the preface.
    let silent = TcpStream::connect(server.addr()).unwrap();
    let mut mute = TcpStream::connect(server.addr()).unwrap();
    mute.write_all(&preface(1)).unwrap();
    // Others are served while they hang on.
    healthy_test(&server);
    assert!(
        server.wait_log("sent no preface", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    assert!(
        server.wait_log("waiting for the client's hello", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    drop((silent, mute));

    // A newer protocol version gets a refusal that names the mismatch.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(&preface(99)).unwrap();
    let reply = String::from_utf8_lossy(&read_to_close(&mut s)).into_owned();
    assert!(reply.contains("version_mismatch"), "{reply}");

    healthy_test(&server);
    let after = server.wait_fds(baseline, Duration::from_secs(5));
    assert_eq!(
        after,
        baseline,
        "descriptors leaked; log:\n{}",
        server.log()
    );
    let until = Instant::now() + Duration::from_secs(5);
    while server.thread_count() > threads && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(server.thread_count() <= threads, "threads leaked");
}

#[test]
fn a_client_killed_mid_test_frees_everything() {
    let server = ServeProcess::start(&[]);
    healthy_test(&server);
    let baseline = server.wait_fds(server.open_fds(), Duration::from_millis(200));
    let mut client = spawn_stream(server.port, &["-t", "30", "-P", "8"], Stdio::null());
    assert!(
        server.wait_line(&["test 2 ", ": started"], Duration::from_secs(10)),
        "{}",
        server.log()
    );
    assert!(
        server.open_fds() >= baseline + 9,
        "the test's sockets are open"
    );
    std::thread::sleep(Duration::from_millis(500));
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(
        server.wait_log("peer closed the control connection", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    assert_eq!(
        server.wait_fds(baseline, Duration::from_secs(5)),
        baseline,
        "{}",
        server.log()
    );
    healthy_test(&server);
}

#[test]
fn a_server_vanishing_mid_test_ends_the_client_promptly() {
    let mut server = ServeProcess::start(&[]);
    let started = Instant::now();
    let client = spawn_stream(server.port, &["-t", "30"], Stdio::piped());
    assert!(server.wait_log(": started", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(500));
    server.child.kill().unwrap();
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("closed the control connection"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn limits_are_enforced_with_a_reason() {
    let server = ServeProcess::start(&["--max-flows", "4", "--max-duration", "5"]);
    let port = server.port.to_string();
    let out = linerate(&["stream", "127.0.0.1", "-p", &port, "-P", "8", "-t", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("refused") && err.contains("8 connections"),
        "{err}"
    );
    let out = linerate(&["stream", "127.0.0.1", "-p", &port, "-t", "6"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("allows 5 s"), "{}", stderr(&out));
    // Bidir counts both directions' connections.
    let out = linerate(&[
        "stream",
        "127.0.0.1",
        "-p",
        &port,
        "-P",
        "3",
        "--bidir",
        "-t",
        "1",
    ]);
    assert!(stderr(&out).contains("6 connections"), "{}", stderr(&out));
}

#[test]
fn a_server_of_another_version_is_named_as_such() {
    // A fake server that answers the hello with a welcome of version 99.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let body = br#"{"type":"welcome","version":99,"software":"x","host":{"hostname":"","kernel":"","cpu_model":"","cores":1,"cpu_mhz":null,"software":""},"limits":{"max_tests":1,"max_flows":1,"max_duration_s":1.0}}"#;
        s.write_all(&frame(body)).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    let out = linerate(&["stream", "127.0.0.1", "-p", &port.to_string(), "-t", "1"]);
    fake.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("version mismatch"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_server_that_says_nothing_times_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = Instant::now();
    let out = linerate(&["stream", "127.0.0.1", "-p", &port.to_string(), "-t", "1"]);
    drop(listener);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let server = ServeProcess::start(&[]);
    healthy_test(&server);
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    assert!(
        server.wait_log("shutting down", Duration::from_secs(5)),
        "{}",
        server.log()
    );
    let mut server = server;
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(Instant::now() < until, "server did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A port another server holds is named as the address asked for (every address, [::]),
/// with what to do, and exits 1.
#[test]
fn a_port_in_use_is_named_with_what_to_do() {
    let holder = std::net::TcpListener::bind("[::]:0")
        .or_else(|_| std::net::TcpListener::bind("0.0.0.0:0"))
        .unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let out = linerate(&["serve", "--port", &port]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("holds port {port}")) && err.contains("--port"),
        "{err}"
    );
    if holder.local_addr().unwrap().is_ipv6() {
        assert!(err.contains(&format!("[::]:{port}")), "{err}");
    }
}

/// `serve -z --log-format json`: where the kernel refuses real-time scheduling (root
/// without CAP_SYS_NICE, by `setpriv`), the server still starts and says so as a line of
/// its log, in the log's format, as it says there is no `--key`: every line it writes up to
/// "listening" is a JSON object. Allowed (root), it says nothing of it.
#[test]
fn a_servers_refused_realtime_scheduling_is_a_line_of_its_log_in_its_format() {
    let test = "a_servers_refused_realtime_scheduling_is_a_line_of_its_log_in_its_format";
    if !is_root() {
        skip(test, "needs root: without it the kernel refuses either way");
        return;
    }
    if !have("setpriv", test) {
        return;
    }
    let start = |prefix: &[&str]| {
        let mut command = std::process::Command::new(prefix.first().copied().unwrap_or(binary()));
        if !prefix.is_empty() {
            command.args(&prefix[1..]).arg(binary());
        }
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1", "--port", "0", "-z"])
            .args(["--log-format", "json"])
            .envs(scratch_env())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start linerate serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = Vec::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let line = line.expect("a line of the log");
            let listening = line.contains("listening on");
            lines.push(line);
            if listening {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        for line in &lines {
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|_| panic!("not a JSON log line: {line}"));
            assert!(
                event["time"].is_string() && event["message"].is_string(),
                "{line}"
            );
        }
        lines.join("\n")
    };
    let refused = start(&["setpriv", "--bounding-set=-sys_nice"]);
    assert!(
        refused.contains("warning: -z: real-time scheduling was refused")
            && refused.contains("warning: no --key"),
        "{refused}"
    );
    let taken = start(&[]);
    assert!(!taken.contains("real-time scheduling"), "{taken}");
}
