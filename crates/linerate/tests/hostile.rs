//! The parts that stay up for months against hostile peers (docs/security.md): the mesh
//! coordinator against whatever answers a host's address, and the HTTP listeners (RPM,
//! metrics and the grid) against silent connections. In a test binary of its own: the
//! attacks take this machine's CPUs for seconds at a time.

mod common;

use common::*;
use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PORT: &str = "5201";

/// A squatter on an agent's address: it answers every connection with one
/// `{"type":"error"}` frame before any key is proved: a 60 MB reason (`big`, over the
/// bound before the proof) or one of 900 KB under it (`escapes`), full of a terminal's
/// escapes, carriage returns and a forged log line.
const SQUATTER: &str = r#"
import json, socket, struct, sys, threading
listener = socket.create_server((sys.argv[1], int(sys.argv[2])), reuse_port=False)
big = sys.argv[3] == "big"
forged = "\x1b[2J\x1b[31m\r\nFAKE LOG LINE: ok\r\n"
small = json.dumps({"type": "error", "reason": (forged + "x" * 4096) * 200}).encode()
count = 0
def answer(conn, n):
    try:
        conn.settimeout(0.2)
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        conn.settimeout(5)
        if big:
            reason = b"y" * 60_000_000
            body_head = b'{"type":"error","reason":"'
            conn.sendall(struct.pack(">I", len(body_head) + len(reason) + 2) + body_head)
            for i in range(0, len(reason), 1 << 20):
                conn.sendall(reason[i:i + (1 << 20)])
            conn.sendall(b'"}')
        else:
            conn.sendall(struct.pack(">I", len(small)) + small)
        # Held until the dialer closes: closed with unread bytes, it would be reset and
        # the answer lost.
        while conn.recv(4096):
            pass
    except OSError:
        pass
    finally:
        conn.close()
while True:
    conn, _ = listener.accept()
    threading.Thread(target=answer, args=(conn, count), daemon=True).start()
    count += 1
"#;

fn vm_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn a_keyless_squatter_cannot_fill_the_coordinators_memory_disk_or_terminal() {
    let test = "a_keyless_squatter_cannot_fill_the_coordinators_memory_disk_or_terminal";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("python3", test) {
        return;
    }
    // h0 and h1 agents, h2 and h3 squatters, the coordinator in the fifth.
    let star = Star::new("squat", 5);
    let dir = std::env::temp_dir().join(format!("linerate-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("mesh.key");
    std::fs::write(&key, "the mesh agents' shared key, for this test\n").unwrap();
    let key = key.display().to_string();
    let _agents: Vec<ServeProcess> = (0..2)
        .map(|i| {
            ServeProcess::start_at(
                Some(&star.hosts[i]),
                &star.addrs[i],
                PORT,
                &["--no-store", "--key", &key],
            )
        })
        .collect();
    let squatter_script = dir.join("squatter.py");
    std::fs::write(&squatter_script, SQUATTER).unwrap();
    let mut squatters: Vec<std::process::Child> = [(2, "big"), (3, "escapes")]
        .into_iter()
        .map(|(i, kind)| {
            Command::new("ip")
                .args(["netns", "exec", &star.hosts[i], "python3"])
                .arg(&squatter_script)
                .args([star.addrs[i].as_str(), PORT, kind])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut text = format!("name = \"squat\"\nkey = \"{key}\"\n");
    for i in 0..4 {
        text += &format!(
            "[[host]]\nname = \"h{i}\"\naddress = \"{}:{PORT}\"\n",
            star.addrs[i]
        );
    }
    text += r#"
[[test]]
name = "lat"
run = "rr"
duration = "0.5s"
interval = "1s"

[[group]]
name = "agents"
hosts = ["h0", "h1"]
tests = ["lat"]

# The squatters only as sources: the coordinator dials each itself (an agent that dials
# one for a job hears only the agents' own refusal, which names nothing it said).
[[group]]
name = "squatters"
shape = "pairs"
pairs = [["h2", "h0"], ["h3", "h1"]]
directions = "one"
tests = ["lat"]
"#;
    let file = dir.join("mesh.toml");
    std::fs::write(&file, text).unwrap();
    let db = dir.join("results.db");
    let db = db.display().to_string();
    // The squatter listens before the mesh starts.
    std::thread::sleep(Duration::from_secs(1));
    let mut coordinator = Command::new("ip")
        .args(["netns", "exec", &star.hosts[4], binary()])
        .args(["--db", &db, "mesh", "run"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = coordinator.id();
    let stdout = coordinator.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        BufReader::new(stdout).read_to_end(&mut all).unwrap();
        all
    });
    // Long enough for the squatter to answer many jobs and for its host to be skipped
    // again and again while down.
    let mut peak_kib = 0;
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        peak_kib = peak_kib.max(vm_kib(pid, "VmHWM:"));
        std::thread::sleep(Duration::from_millis(200));
    }
    peak_kib = peak_kib.max(vm_kib(pid, "VmHWM:"));
    unsafe { libc_kill(pid as i32, 2) };
    let status = coordinator.wait().unwrap();
    let stdout = reader.join().unwrap();
    let mut stderr_text = String::new();
    coordinator
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr_text)
        .unwrap();
    for squatter in &mut squatters {
        let _ = squatter.kill();
        let _ = squatter.wait();
    }
    let out = String::from_utf8_lossy(&stdout).to_string();
    eprintln!(
        "coordinator: peak RSS {peak_kib} KiB, database {} bytes, stdout {} bytes",
        std::fs::metadata(&db).map_or(0, |m| m.len()),
        out.len()
    );
    assert!(status.code().is_some(), "the coordinator ended by itself");
    assert!(
        peak_kib < 256 * 1024,
        "coordinator peak RSS {peak_kib} KiB:\n{stderr_text}"
    );
    let db_bytes = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    let wal_bytes = std::fs::metadata(format!("{db}-wal")).map_or(0, |m| m.len());
    assert!(
        db_bytes + wal_bytes < 10 << 20,
        "database {db_bytes} + {wal_bytes} bytes"
    );
    for (name, text) in [("stdout", &out), ("stderr", &stderr_text)] {
        let control: Vec<char> = text
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(
            control.is_empty(),
            "control characters in {name}: {control:?}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("FAKE LOG LINE")),
            "a forged line in {name}"
        );
        assert!(
            text.len() < 4 << 20,
            "{name} of {} bytes for 15 s of a three-host mesh",
            text.len()
        );
    }
    // Both squatters were heard: the 60 MB frame refused at its length, the 900 KB reason
    // escaped and cut; and their skipped jobs point to the kept reason instead of
    // repeating it.
    for line in out
        .lines()
        .filter(|l| l.contains("h2") || l.contains("h3"))
        .take(8)
    {
        eprintln!("{}", line.chars().take(400).collect::<String>());
    }
    let any_escaped = out.contains("\\u{1b}");
    let skipped_points = out.contains("is down after") && out.contains("the reason is in");
    assert!(
        any_escaped && out.contains("over the limit of 1048576 bytes"),
        "both squatters' answers show in the rows, escaped or refused:\n{out}"
    );
    assert!(skipped_points, "skips name the kept failure:\n{out}");
    // Each row that carries the escaped reason is cut to its bound.
    for line in out.lines().filter(|l| l.contains("FAKE LOG LINE")) {
        assert!(
            line.chars().count() < 2_600,
            "{} chars",
            line.chars().count()
        );
    }
    // The real hosts were measured all along.
    assert!(
        out.lines()
            .any(|l| l.contains("h0") && l.contains("h1") && l.contains("rtt")),
        "h0 and h1 measured beside the squatter:\n{out}"
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

/// Holds silent connections and, meanwhile, times a well-behaved client. Run in the
/// client's namespace: `python3 holder.py SERVER_V6 HTTP HTTPS METRICS`.
/// Prints one JSON object: how many silent connections were accepted and held, the
/// normal client's times, and how many silent connections the server closed by its
/// deadline.
const HOLDER: &str = r##"
import json, socket, ssl, sys, time
server, http_port, https_port, metrics_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
flood = [f"fd00:0:0:1::{i}" for i in range(1, 5)]   # four addresses of one /64
other = "fd00:0:0:2::1"                               # a client of another /64
def connect(source, port, timeout=2):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((server, port))
    return s
silent = []
for port, count in ((http_port, 1024), (metrics_port, 256)):
    for i in range(count):
        try:
            silent.append(connect(flood[i % 4], port))
        except OSError:
            pass
# TLS connections that finish their handshake and never ask.
context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
tls_silent = []
for i in range(8):
    try:
        tls_silent.append(context.wrap_socket(connect(flood[i % 4], https_port), server_hostname="x"))
    except OSError:
        pass
time.sleep(0.5)
def get(port, path, headers=""):
    start = time.monotonic()
    s = connect(other, port, timeout=5)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return time.monotonic() - start, data
took_http, small = get(http_port, "/small")
took_metrics, metrics = get(metrics_port, "/metrics", "Accept: application/openmetrics-text\r\n")
_, grid = get(metrics_port, "/")
def closed(sock):
    try:
        sock.settimeout(0.01)
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True
open_before = sum(1 for s in silent if not closed(s))
time.sleep(12)
print(json.dumps({
    "held_silent": open_before,
    "http_s": took_http, "http_status": small.split(b"\r\n", 1)[0].decode(),
    "metrics_s": took_metrics, "metrics_status": metrics.split(b"\r\n", 1)[0].decode(),
    "metrics_eof": metrics.rstrip().endswith(b"# EOF"),
    "grid_head": grid.split(b"\r\n\r\n", 1)[0].decode(errors="replace"),
    "tls_held": len(tls_silent),
    "silent_closed_after_12s": sum(1 for s in silent if closed(s)),
    "tls_closed_after_12s": sum(1 for s in tls_silent if closed(s)),
    "silent": len(silent),
}))
"##;

#[test]
fn silent_connections_from_one_slash_64_lock_no_client_out_of_the_http_listeners() {
    let test = "silent_connections_from_one_slash_64_lock_no_client_out_of_the_http_listeners";
    if !is_root() {
        skip(test, "needs root for network namespaces");
        return;
    }
    if !have("python3", test) {
        return;
    }
    let star = Star::new("slow", 2);
    // IPv6 on the bridge: the server's address, four of the flooder's /64, one of
    // another client's.
    let (server, client) = (&star.hosts[0], &star.hosts[1]);
    let dev = |ns: &str| -> String {
        run("ip", &["-n", ns, "-o", "link", "show"])
            .lines()
            .find_map(|l| {
                let name = l.split(": ").nth(1)?.split('@').next()?;
                (name != "lo").then(|| name.to_string())
            })
            .expect("the host's veth")
    };
    let (server_dev, client_dev) = (dev(server), dev(client));
    run(
        "ip",
        &[
            "-n",
            server,
            "addr",
            "add",
            "fd00::1/48",
            "dev",
            &server_dev,
            "nodad",
        ],
    );
    for addr in [
        "fd00:0:0:1::1",
        "fd00:0:0:1::2",
        "fd00:0:0:1::3",
        "fd00:0:0:1::4",
        "fd00:0:0:2::1",
    ] {
        run(
            "ip",
            &[
                "-n",
                client,
                "addr",
                "add",
                &format!("{addr}/48"),
                "dev",
                &client_dev,
                "nodad",
            ],
        );
    }
    let _serve = ServeProcess::start_at(
        Some(server),
        &star.addrs[0],
        "5201",
        &[
            "--no-store",
            "--http",
            "[::]:8080",
            "--https",
            "[::]:8443",
            "--metrics",
            "[::]:9470",
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    let dir = std::env::temp_dir().join(format!("linerate-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("holder.py");
    std::fs::write(&script, HOLDER).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", client, "python3"])
        .arg(&script)
        .args(["fd00::1", "8080", "8443", "9470"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: {text}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            run("ip", &["-n", client, "-6", "addr"]) + &run("ip", &["-n", client, "-6", "route"])
        )
    });
    eprintln!("{report}");
    // Held: what the caps allow one /64 (256 on the RPM listener, 16 on the metrics
    // one), not the 1,280 it opened.
    let held = report["held_silent"].as_u64().unwrap();
    assert!(held <= 256 + 16, "{report}");
    assert!(held >= 16, "{report}");
    for (took, status) in [("http_s", "http_status"), ("metrics_s", "metrics_status")] {
        assert!(
            report[took].as_f64().unwrap() < 1.0 && report[status] == "HTTP/1.1 200 OK",
            "a well-behaved client is served within 1 s: {report}"
        );
    }
    assert_eq!(report["metrics_eof"], true, "{report}");
    let grid = report["grid_head"].as_str().unwrap().to_ascii_lowercase();
    for header in [
        "content-security-policy: default-src 'self'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
    ] {
        assert!(grid.contains(header), "{header} in\n{grid}");
    }
    // The deadline from accept to the first request closes them all, TLS ones that
    // finished their handshake too.
    assert_eq!(
        report["silent_closed_after_12s"], report["silent"],
        "{report}"
    );
    assert!(report["tls_held"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(
        report["tls_closed_after_12s"], report["tls_held"],
        "{report}"
    );
}
